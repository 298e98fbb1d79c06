//! `Content-Encoding` of request bodies and `Accept-Encoding` of responses (gzip and
//! deflate, as Triton supports).

use std::io::{Read, Write};

use axum::http::HeaderMap;
use bytes::Bytes;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;
use nereid_core::{Error, Result};

/// A supported content coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `gzip`.
    Gzip,
    /// `deflate` (zlib-wrapped, per HTTP).
    Deflate,
}

impl Encoding {
    /// The header token.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
        }
    }
}

/// Decodes the body by its `Content-Encoding`, refusing to inflate past `limit` bytes.
pub fn decode_body(headers: &HeaderMap, body: Bytes, limit: usize) -> Result<Bytes> {
    let Some(value) = headers.get(axum::http::header::CONTENT_ENCODING) else {
        return Ok(body);
    };
    let coding = value.to_str().unwrap_or("").trim().to_ascii_lowercase();
    let mut out = Vec::new();
    let read = match coding.as_str() {
        "" | "identity" => return Ok(body),
        "gzip" => GzDecoder::new(&body[..])
            .take(limit as u64 + 1)
            .read_to_end(&mut out),
        "deflate" => ZlibDecoder::new(&body[..])
            .take(limit as u64 + 1)
            .read_to_end(&mut out),
        other => {
            return Err(Error::invalid_arg(format!(
                "unsupported Content-Encoding '{other}', expected gzip or deflate"
            )))
        }
    };
    read.map_err(|e| Error::invalid_arg(format!("failed to decompress the request body: {e}")))?;
    if out.len() > limit {
        return Err(Error::invalid_arg(format!(
            "Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use --http-max-input-size to increase the limit."
        )));
    }
    Ok(Bytes::from(out))
}

/// The response coding the client accepts, preferring gzip.
pub fn accepted(headers: &HeaderMap) -> Option<Encoding> {
    let accept = headers
        .get(axum::http::header::ACCEPT_ENCODING)?
        .to_str()
        .ok()?;
    // One pass, compared without copying: the header is read on every inference request.
    let (mut gzip, mut deflate) = (false, false);
    for part in accept.split(',') {
        let mut params = part.split(';');
        let name = params.next().unwrap_or("").trim();
        let is_gzip = name.eq_ignore_ascii_case("gzip");
        let is_deflate = name.eq_ignore_ascii_case("deflate");
        if !(is_gzip || is_deflate) {
            continue;
        }
        let refused = params.any(is_zero_quality);
        gzip |= is_gzip && !refused;
        deflate |= is_deflate && !refused;
    }
    if gzip {
        Some(Encoding::Gzip)
    } else if deflate {
        Some(Encoding::Deflate)
    } else {
        None
    }
}

/// Whether an offer's parameter is a quality of zero (`q=0`, `Q = 0.0`, ...): the coding is
/// refused.
fn is_zero_quality(parameter: &str) -> bool {
    parameter.split_once('=').is_some_and(|(name, value)| {
        name.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f32>() == Ok(0.0)
    })
}

/// Compresses a response body.
pub fn encode(encoding: Encoding, body: &[u8]) -> Vec<u8> {
    // Writing into a Vec cannot fail.
    match encoding {
        Encoding::Gzip => {
            let mut e = GzEncoder::new(Vec::new(), Compression::fast());
            let _ = e.write_all(body);
            e.finish().unwrap_or_default()
        }
        Encoding::Deflate => {
            let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
            let _ = e.write_all(body);
            e.finish().unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn round_trips_gzip_and_deflate() {
        for enc in [Encoding::Gzip, Encoding::Deflate] {
            let packed = encode(enc, b"hello hello hello");
            let mut headers = HeaderMap::new();
            headers.insert("content-encoding", HeaderValue::from_static(enc.token()));
            let body = decode_body(&headers, Bytes::from(packed), 1 << 20).expect("valid");
            assert_eq!(&body[..], b"hello hello hello");
        }
    }

    #[test]
    fn refuses_bombs_and_unknown_codings() {
        let packed = encode(Encoding::Gzip, &[0u8; 10_000]);
        let mut headers = HeaderMap::new();
        headers.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert!(decode_body(&headers, Bytes::from(packed), 100).is_err());
        headers.insert("content-encoding", HeaderValue::from_static("br"));
        assert!(decode_body(&headers, Bytes::new(), 100).is_err());
    }

    #[test]
    fn picks_the_accepted_coding() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "accept-encoding",
            HeaderValue::from_static("deflate, gzip;q=0"),
        );
        assert_eq!(accepted(&headers), Some(Encoding::Deflate));
        headers.insert("accept-encoding", HeaderValue::from_static("br"));
        assert_eq!(accepted(&headers), None);
        for (offer, coding) in [
            ("identity", None),
            ("GZIP, deflate", Some(Encoding::Gzip)),
            ("gzip; Q = 0 ,deflate;q=0.5", Some(Encoding::Deflate)),
            ("gzip;q=0.0, deflate ; q=0", None),
            ("gzip;level=1;q=0, gzip", Some(Encoding::Gzip)),
        ] {
            headers.insert("accept-encoding", HeaderValue::from_static(offer));
            assert_eq!(accepted(&headers), coding, "{offer}");
        }
    }
}
