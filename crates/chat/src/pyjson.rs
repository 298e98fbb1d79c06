//! JSON text as Python's `json.dumps` writes it, because both the chat templates' `tojson`
//! (transformers' filter) and vLLM's tool parsers (arguments as text) write JSON that way:
//! `", "` and `": "` separators, optional indent, `ensure_ascii`, floats as `repr(float)`.

use serde_json::Value;
use std::fmt::Write;

/// The options of `json.dumps` that templates and parsers use.
#[derive(Debug, Clone)]
pub(crate) struct DumpOptions {
    /// Escape every non-ASCII character as `\uXXXX` (Python's default; transformers' `tojson`
    /// turns it off).
    pub ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: one item per line, each level indented by `s`.
    pub indent: Option<String>,
    /// Between items; Python's default is `", "` on one line and `","` with an indent.
    pub item_separator: String,
    /// Between a key and its value.
    pub key_separator: String,
    /// Sort object keys (templates may ask; Python's default is insertion order).
    pub sort_keys: bool,
}

impl DumpOptions {
    /// Python's `json.dumps(x, ensure_ascii=...)` with every other argument left default.
    pub fn python(ensure_ascii: bool) -> Self {
        DumpOptions {
            ensure_ascii,
            indent: None,
            item_separator: ", ".to_owned(),
            key_separator: ": ".to_owned(),
            sort_keys: false,
        }
    }
}

/// `json.dumps(value, **options)`.
pub(crate) fn dumps(value: &Value, options: &DumpOptions) -> String {
    let mut out = String::new();
    write_value(&mut out, value, options, 0);
    out
}

fn write_value(out: &mut String, value: &Value, o: &DumpOptions, level: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else if let Some(f) = n.as_f64() {
                out.push_str(&float_repr(f));
            }
        }
        Value::String(s) => write_string(out, s, o.ensure_ascii),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separate(out, o, level + 1, i == 0);
                write_value(out, item, o, level + 1);
            }
            close(out, o, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if o.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (i, (k, v)) in entries.into_iter().enumerate() {
                separate(out, o, level + 1, i == 0);
                write_string(out, k, o.ensure_ascii);
                out.push_str(&o.key_separator);
                write_value(out, v, o, level + 1);
            }
            close(out, o, level);
            out.push('}');
        }
    }
}

/// Before an item: the item separator (unless first), then a newline and indent if indenting.
fn separate(out: &mut String, o: &DumpOptions, level: usize, first: bool) {
    if !first {
        out.push_str(&o.item_separator);
    }
    if let Some(indent) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// Before a closing bracket: a newline and the outer level's indent if indenting.
fn close(out: &mut String, o: &DumpOptions, level: usize) {
    if let Some(indent) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// A JSON string literal as Python writes it (lowercase `\u00XX` escapes; with
/// `ensure_ascii`, every character outside ' '..='~' escaped, astral ones as surrogate pairs).
fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that read back the same, in fixed notation for
/// exponents -4..16 (`1.0`, `0.0001`) and scientific beyond (`1e+16`, `1.5e-07`).
pub(crate) fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    // Rust's `{:e}` prints the shortest round-trip digits: "1.5e-7", "1e16", "-0e0".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let n = digits.len() as i32;
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            if n <= exp + 1 {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', (exp + 1 - n) as usize));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..(exp + 1) as usize]);
                out.push('.');
                out.push_str(&digits[(exp + 1) as usize..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_default_spacing_and_order() {
        let v = json!({"b": 1, "a": [1, 2.5, "x"], "c": {}, "d": []});
        assert_eq!(
            dumps(&v, &DumpOptions::python(true)),
            r#"{"b": 1, "a": [1, 2.5, "x"], "c": {}, "d": []}"#
        );
    }

    #[test]
    fn indent_uses_comma_without_space() {
        let v = json!({"a": [1, {"b": null}], "c": true});
        let o = DumpOptions {
            indent: Some("  ".to_owned()),
            item_separator: ",".to_owned(),
            ..DumpOptions::python(false)
        };
        assert_eq!(
            dumps(&v, &o),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": true\n}"
        );
    }

    #[test]
    fn sort_keys() {
        let o = DumpOptions {
            sort_keys: true,
            ..DumpOptions::python(false)
        };
        assert_eq!(dumps(&json!({"b": 1, "a": 2}), &o), r#"{"a": 2, "b": 1}"#);
    }

    #[test]
    fn strings_escape_as_python() {
        let v = json!("é\u{1F600}\"\\\n\u{1}\u{7f}");
        assert_eq!(
            dumps(&v, &DumpOptions::python(false)),
            "\"é\u{1F600}\\\"\\\\\\n\\u0001\u{7f}\""
        );
        assert_eq!(
            dumps(&v, &DumpOptions::python(true)),
            "\"\\u00e9\\ud83d\\ude00\\\"\\\\\\n\\u0001\\u007f\""
        );
    }

    #[test]
    fn floats_as_python_repr() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123456789.125, "123456789.125"),
            (-0.0, "-0.0"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(float_repr(f), s, "{f}");
        }
    }
}
