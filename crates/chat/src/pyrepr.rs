//! How a value prints in a template: as Jinja2 prints it (Python's `str()`), not as
//! minijinja does, so that `{{ none }}`, `{{ true }}`, `{{ 1.0 }}` or a printed dict come out
//! as transformers renders them (`None`, `True`, `1.0`, `{'a': 1}`).

use crate::pyjson::float_repr;
use minijinja::value::{Value, ValueKind};
use std::fmt::Write;

/// Python's `str(value)`: strings as they are, undefined as nothing, others as `repr`.
pub(crate) fn write_str(out: &mut impl Write, value: &Value) -> std::fmt::Result {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => out.write_str(value.as_str().unwrap_or_default()),
        _ => write_repr(out, value),
    }
}

/// Python's `repr(value)` for the data a chat template sees (JSON-like values); other objects
/// (macros, namespaces) print as minijinja prints them.
fn write_repr(out: &mut impl Write, value: &Value) -> std::fmt::Result {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::None => out.write_str("None"),
        ValueKind::Bool => out.write_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => {
            if value.is_integer() {
                write!(out, "{value}")
            } else {
                match f64::try_from(value.clone()) {
                    Ok(f) => out.write_str(&float_repr(f)),
                    Err(_) => write!(out, "{value}"),
                }
            }
        }
        ValueKind::String => write_str_repr(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.write_char('[')?;
            if let Ok(items) = value.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.write_str(", ")?;
                    }
                    write_repr(out, &item)?;
                }
            }
            out.write_char(']')
        }
        ValueKind::Map => {
            out.write_char('{')?;
            if let Ok(keys) = value.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.write_str(", ")?;
                    }
                    write_repr(out, &key)?;
                    out.write_str(": ")?;
                    let item = value.get_item(&key).unwrap_or_default();
                    write_repr(out, &item)?;
                }
            }
            out.write_char('}')
        }
        _ => write!(out, "{value}"),
    }
}

/// Python's `repr(str)`: single quotes unless the text has a `'` and no `"`; backslash
/// escapes for quotes, `\n`, `\r`, `\t` and characters Python does not print.
fn write_str_repr(out: &mut impl Write, s: &str) -> std::fmt::Result {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.write_char(quote)?;
    for c in s.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if c == quote => {
                out.write_char('\\')?;
                out.write_char(c)?;
            }
            c if (c as u32) < 0x20 || ('\u{7f}'..='\u{a0}').contains(&c) || c == '\u{ad}' => {
                write!(out, "\\x{:02x}", c as u32)?
            }
            '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{feff}' => {
                write!(out, "\\u{:04x}", c as u32)?
            }
            c => out.write_char(c)?,
        }
    }
    out.write_char(quote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn show(v: serde_json::Value) -> String {
        let mut s = String::new();
        write_str(&mut s, &Value::from(minijinja::value::Serde(&v))).unwrap();
        s
    }

    #[test]
    fn scalars_print_as_python() {
        assert_eq!(show(json!(null)), "None");
        assert_eq!(show(json!(true)), "True");
        assert_eq!(show(json!(false)), "False");
        assert_eq!(show(json!(3)), "3");
        assert_eq!(show(json!(3.0)), "3.0");
        assert_eq!(show(json!("plain")), "plain");
        let mut s = String::new();
        write_str(&mut s, &Value::UNDEFINED).unwrap();
        assert_eq!(s, "");
    }

    #[test]
    fn containers_print_as_python_repr() {
        assert_eq!(
            show(json!({"b": [1, "x", null], "a": {"k": false}})),
            "{'b': [1, 'x', None], 'a': {'k': False}}"
        );
        assert_eq!(
            show(json!(["it's", "say \"hi\"", "a\nb"])),
            "[\"it's\", 'say \"hi\"', 'a\\nb']"
        );
        assert_eq!(show(json!(["both ' \""])), "['both \\' \"']");
    }
}
