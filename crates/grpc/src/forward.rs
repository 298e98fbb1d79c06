//! `--grpc-header-forward-pattern`: a call's metadata as request parameters, matched by
//! the core's [`HeaderForward`] (shared with HTTP).
//!
//! Triton reads `ServerContext::client_metadata()`, which gRPC C++ fills with the
//! application's metadata only; tonic hands over the HTTP/2 headers whole, so the
//! transport's own (`te`, `content-type`, `grpc-*`) are left out here to forward what
//! Triton would. Binary (`-bin`) values are forwarded decoded, as gRPC C++ delivers them.

use std::borrow::Cow;

use nereid_core::header_forward::HeaderForward;
use nereid_core::request::Parameters;
use nereid_core::Result;
use tonic::metadata::{KeyAndValueRef, MetadataMap};

/// Headers of the gRPC transport, never application metadata.
fn is_transport(name: &str) -> bool {
    name == "te" || name == "content-type" || name.starts_with("grpc-")
}

/// The parameters `forward` takes from `metadata` (none without a pattern); fails on a
/// matching reserved name as Triton does.
pub fn forwarded(forward: Option<&HeaderForward>, metadata: &MetadataMap) -> Result<Parameters> {
    let Some(forward) = forward else {
        return Ok(Parameters::new());
    };
    let entries = metadata.iter().map(|entry| match entry {
        KeyAndValueRef::Ascii(key, value) => {
            (key.as_str(), Cow::Borrowed(value.as_encoded_bytes()))
        }
        KeyAndValueRef::Binary(key, value) => {
            let bytes = match value.to_bytes() {
                Ok(decoded) => Cow::Owned(decoded.to_vec()),
                Err(_) => Cow::Borrowed(value.as_encoded_bytes()),
            };
            (key.as_str(), bytes)
        }
    });
    forward.parameters(entries.filter(|(name, _)| !is_transport(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::request::ParamValue;
    use tonic::metadata::{BinaryMetadataValue, MetadataValue};

    fn string(name: &str, value: &str) -> (String, ParamValue) {
        (name.to_owned(), ParamValue::String(value.to_owned()))
    }

    fn metadata() -> MetadataMap {
        let mut map = MetadataMap::new();
        map.insert("te", MetadataValue::from_static("trailers"));
        map.insert(
            "content-type",
            MetadataValue::from_static("application/grpc"),
        );
        map.insert("grpc-accept-encoding", MetadataValue::from_static("gzip"));
        map.insert("user-agent", MetadataValue::from_static("grpc-python/1"));
        map.insert("my_header_1", MetadataValue::from_static("my_value_1"));
        map.insert_bin("my_blob-bin", BinaryMetadataValue::from_bytes(b"raw"));
        map
    }

    #[test]
    fn no_pattern_forwards_nothing() {
        assert_eq!(forwarded(None, &metadata()), Ok(Parameters::new()));
    }

    #[test]
    fn application_metadata_is_forwarded_and_transport_headers_are_not() {
        let forward = HeaderForward::new(".*").expect("valid");
        let got = forwarded(Some(&forward), &metadata()).expect("forwarded");
        assert_eq!(
            got,
            vec![
                string("user-agent", "grpc-python/1"),
                string("my_header_1", "my_value_1"),
                string("my_blob-bin", "raw"),
            ]
        );
        let forward = HeaderForward::new("MY_HEADER").expect("valid");
        let got = forwarded(Some(&forward), &metadata()).expect("forwarded");
        assert_eq!(got, vec![string("my_header_1", "my_value_1")]);
    }

    #[test]
    fn reserved_metadata_fails_the_call() {
        let forward = HeaderForward::new(".*").expect("valid");
        let mut map = metadata();
        map.insert("triton_x", MetadataValue::from_static("1"));
        let err = forwarded(Some(&forward), &map).expect_err("reserved");
        assert!(err.message().contains("reserved for Triton usage"));
    }
}
