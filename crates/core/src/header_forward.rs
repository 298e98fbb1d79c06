//! Forwarding request headers as inference request parameters (Triton's
//! `--http-header-forward-pattern` / `--grpc-header-forward-pattern`).
//!
//! Both frontends share this matcher so they cannot drift; each only lists its headers
//! (HTTP headers, gRPC metadata). Triton's semantics (server `src/http_server.cc`
//! `ForEachHeader`, `src/grpc/infer_handler.h` `ForwardHeadersAsParameters`,
//! `src/command_line_parser.cc`):
//!
//! - the pattern is compiled with a `(?i)` prefix, so names match case-insensitively
//!   unless the pattern turns that off with `(?-i)`;
//! - a name matches when the pattern matches *anywhere* in it (RE2 `PartialMatch`), so
//!   `MY_HEADER.*` also forwards `x-my_header_1`; anchor with `^...$` for a whole name;
//! - each matching header becomes a string parameter named as the header arrived (both
//!   HTTP/1 and gRPC deliver lower-case names here) with its value, appended after the
//!   parameters of the request body, one per value when a header repeats;
//! - a matching header named like a reserved parameter, or starting `triton_`, fails the
//!   request with Triton's message.

use std::borrow::Cow;

use regex::Regex;

use crate::error::{Error, Result};
use crate::request::{ParamValue, Parameters};

/// Parameter names a header may not set (Triton's `kReservedParameterKeys`, server
/// `src/common.h`): the frontends read them from the request body themselves.
const RESERVED: [&str; 7] = [
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "headers",
    "binary_data_output",
];

/// Prefix of names kept for Triton's own parameters.
const RESERVED_PREFIX: &str = "triton_";

/// A compiled forward pattern; frontends hold one per protocol when its flag is given.
#[derive(Debug, Clone)]
pub struct HeaderForward {
    regex: Regex,
}

impl HeaderForward {
    /// Compiles `pattern` as Triton does, case-insensitive unless the pattern says
    /// `(?-i)`. An empty pattern forwards every header, as Triton's does (its `(?i)`
    /// prefix leaves a pattern that matches anything). A pattern that does not compile
    /// is an invalid-argument error naming it, for start-up to report.
    pub fn new(pattern: &str) -> Result<Self> {
        Regex::new(&format!("(?i){pattern}"))
            .map(|regex| Self { regex })
            .map_err(|e| {
                Error::invalid_arg(format!("invalid header forward pattern '{pattern}': {e}"))
            })
    }

    /// Whether a header called `name` is forwarded.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    /// The string parameters for the matching `headers` (name, raw value), in order;
    /// values that are not UTF-8 have their bad bytes replaced. Fails on the first
    /// matching reserved name, with Triton's message.
    pub fn parameters<N, V>(&self, headers: impl IntoIterator<Item = (N, V)>) -> Result<Parameters>
    where
        N: AsRef<str>,
        V: AsRef<[u8]>,
    {
        let mut forwarded = Parameters::new();
        for (name, value) in headers {
            let name = name.as_ref();
            if !self.matches(name) {
                continue;
            }
            if RESERVED.contains(&name) || name.starts_with(RESERVED_PREFIX) {
                return Err(Error::invalid_arg(format!(
                    "Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )));
            }
            let value = match String::from_utf8_lossy(value.as_ref()) {
                Cow::Borrowed(text) => text.to_owned(),
                Cow::Owned(text) => text,
            };
            forwarded.push((name.to_owned(), ParamValue::String(value)));
        }
        Ok(forwarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(pattern: &str, headers: &[(&str, &str)]) -> Result<Parameters> {
        let forward = HeaderForward::new(pattern)?;
        forward.parameters(headers.iter().map(|(n, v)| (*n, v.as_bytes())))
    }

    fn string(name: &str, value: &str) -> (String, ParamValue) {
        (name.to_owned(), ParamValue::String(value.to_owned()))
    }

    #[test]
    fn matches_anywhere_and_ignores_case() {
        let headers = [
            ("my_header_1", "my_value_1"),
            ("header_1", "value_1"),
            ("x-my_header_2", "v2"),
        ];
        let got = forward("MY_HEADER.*", &headers).expect("forwarded");
        assert_eq!(
            got,
            vec![
                string("my_header_1", "my_value_1"),
                string("x-my_header_2", "v2")
            ]
        );
    }

    #[test]
    fn case_sensitive_when_the_pattern_says_so() {
        let got = forward("(?-i)MY_HEADER.*", &[("my_header_1", "v")]).expect("forwarded");
        assert!(got.is_empty());
        let got = forward("(?-i)my_.*", &[("my_header_1", "v")]).expect("forwarded");
        assert_eq!(got, vec![string("my_header_1", "v")]);
    }

    #[test]
    fn anchored_pattern_matches_whole_names_only() {
        let got = forward("^abc$", &[("abc", "1"), ("abcd", "2")]).expect("forwarded");
        assert_eq!(got, vec![string("abc", "1")]);
    }

    #[test]
    fn repeated_headers_forward_each_value_and_keep_quotes() {
        let quoted = r#"This is a "quoted" string with a backslash\ "#;
        let got = forward(".*", &[("a", "1"), ("a", quoted)]).expect("forwarded");
        assert_eq!(got, vec![string("a", "1"), string("a", quoted)]);
    }

    #[test]
    fn empty_pattern_forwards_everything() {
        let got = forward("", &[("host", "h")]).expect("forwarded");
        assert_eq!(got, vec![string("host", "h")]);
    }

    #[test]
    fn reserved_names_fail_only_when_they_match() {
        for name in ["sequence_id", "priority", "headers", "triton_anything"] {
            let err = forward(".*", &[(name, "x")]).expect_err("reserved");
            assert_eq!(
                err.message(),
                format!("Header '{name}' is reserved for Triton usage and cannot be forwarded.")
            );
        }
        let got = forward("^my_", &[("timeout", "1"), ("my_a", "2")]).expect("not matched");
        assert_eq!(got, vec![string("my_a", "2")]);
    }

    #[test]
    fn invalid_utf8_values_are_replaced() {
        let forward = HeaderForward::new(".*").expect("valid");
        let got = forward
            .parameters([("a", [0x66u8, 0xff].as_slice())])
            .expect("forwarded");
        assert_eq!(got, vec![string("a", "f\u{fffd}")]);
    }

    #[test]
    fn invalid_pattern_is_an_error_naming_it() {
        let err = HeaderForward::new("(unclosed").expect_err("invalid");
        assert!(err
            .message()
            .starts_with("invalid header forward pattern '(unclosed'"));
    }
}
