//! Reading a request body into one buffer under a size limit. An infer body nearly always
//! arrives as one data frame; its bytes are then taken as they are, without the collect
//! buffer and limit wrapper `axum::body::to_bytes` builds per request. A body in several
//! frames is copied into one buffer once.

use axum::BoxError;
use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;

/// Why a body could not be read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Longer than the limit (known from `Content-Length` before reading, or counted).
    TooLarge,
    /// The connection failed or timed out while the body arrived.
    Failed(axum::Error),
}

/// The whole of `body`, at most `limit` bytes; trailers are ignored. Any body type, so
/// that the connection's own body is read without boxing it first.
pub(crate) async fn read_body<B>(mut body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let limit_bytes = u64::try_from(limit).unwrap_or(u64::MAX);
    let announced = body.size_hint().lower();
    if announced > limit_bytes {
        return Err(BodyError::TooLarge);
    }
    // At most `limit`, which is a usize: a body of a gigabyte is joined without regrowing.
    let announced = usize::try_from(announced).unwrap_or(limit);
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    let mut length = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Failed(axum::Error::new(e)))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        length = length.saturating_add(data.len());
        if length > limit {
            return Err(BodyError::TooLarge);
        }
        if let Some(joined) = &mut joined {
            joined.extend_from_slice(&data);
        } else if first.is_empty() {
            first = data;
        } else {
            let mut buffer = BytesMut::with_capacity(length.max(announced));
            buffer.extend_from_slice(&first);
            buffer.extend_from_slice(&data);
            joined = Some(buffer);
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;
    use tokio_stream as stream;

    fn chunked(parts: &[&'static str]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Bytes::from_static(p.as_bytes())))
            .collect();
        Body::from_stream(stream::iter(frames))
    }

    #[tokio::test]
    async fn one_frame_is_taken_as_it_is() {
        let body = Bytes::from_static(b"{\"inputs\":[]}");
        let read = read_body(Body::from(body.clone()), 100)
            .await
            .expect("read");
        assert_eq!(read, body);
        assert_eq!(read.as_ptr(), body.as_ptr(), "no copy");
    }

    #[tokio::test]
    async fn frames_are_joined_in_order() {
        let read = read_body(chunked(&["ab", "", "cd", "e"]), 5)
            .await
            .expect("read");
        assert_eq!(&read[..], b"abcde");
        assert_eq!(&read_body(chunked(&[]), 5).await.expect("read")[..], b"");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused() {
        let known = read_body(Body::from("123456"), 5).await;
        assert!(matches!(known, Err(BodyError::TooLarge)), "from its length");
        let counted = read_body(chunked(&["123", "456"]), 5).await;
        assert!(matches!(counted, Err(BodyError::TooLarge)), "while reading");
    }

    #[tokio::test]
    async fn a_failing_body_is_reported() {
        let frames: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"ab")),
            Err(std::io::Error::other("reset")),
        ];
        let read = read_body(Body::from_stream(stream::iter(frames)), 100).await;
        match read {
            Err(BodyError::Failed(e)) => assert!(e.to_string().contains("reset"), "{e}"),
            other => panic!("expected a failure, got {other:?}"),
        }
    }
}
