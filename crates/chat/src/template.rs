//! One compiled chat template and the Jinja environment transformers renders it in
//! (`transformers.utils.chat_template_utils._compile_jinja_template`): `trim_blocks`,
//! `lstrip_blocks`, Python string/dict methods, `raise_exception`, `strftime_now`, a `tojson`
//! that writes as `json.dumps(ensure_ascii=False)`, and values printed as Python prints them.
//! Unlike Jinja2, every render is bounded: a fuel budget (instructions and bytes created) and
//! a recursion limit, so a hostile template fails with a `Limit` error instead of hanging.

use crate::error::{ChatError, ChatErrorKind};
use crate::pyjson::{dumps, DumpOptions};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// The name the one template has inside its environment.
const NAME: &str = "chat";

/// The work one render may do: about this many instructions, or 64 bytes per unit of data
/// created (so at most ~128 MB). A 1000-message conversation with tools through the Llama 3.1
/// template takes well under a tenth of it.
pub(crate) const FUEL: u64 = 2_000_000;

/// Nested macro calls / recursive loops; templates nest a few levels. Low enough that a render
/// on a runtime worker thread's small stack cannot overflow it.
pub(crate) const RECURSION_LIMIT: usize = 100;

/// A compiled template with its environment. Rendering takes `&self`, so one template serves
/// every request of a model at once.
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is `BadTemplate`.
    pub fn new(source: &str) -> Result<Self, ChatError> {
        Self::with_fuel(source, FUEL)
    }

    /// As [`ChatTemplate::new`] with another fuel budget (a test renders real templates with a
    /// tenth of the default).
    pub fn with_fuel(source: &str, fuel: u64) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatError::new(ChatErrorKind::BadTemplate, e.to_string()))?;
        env.set_syntax(syntax);
        env.set_debug(false);
        env.set_fuel(Some(fuel));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            crate::pyrepr::write_str(out, value).map_err(|e| {
                Error::new(ErrorKind::WriteFailure, "could not write output").with_source(e)
            })
        });
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(|e| ChatError::new(ChatErrorKind::BadTemplate, e.to_string()))?;
        Ok(ChatTemplate { env })
    }

    /// Renders with `ctx` (a map of the template's variables).
    pub fn render(&self, ctx: Value) -> Result<String, ChatError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatError::new(ChatErrorKind::BadTemplate, e.to_string()))?;
        template.render(ctx).map_err(|e| render_error(&e))
    }
}

/// The marker that tells a template's own `raise_exception` apart from other failures.
const RAISED: &str = "raise_exception";

/// `raise_exception(message)`: the template refuses the conversation; the message goes to the
/// client as the template wrote it.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message).with_source(Raised))
}

#[derive(Debug)]
struct Raised;

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(RAISED)
    }
}

impl std::error::Error for Raised {}

/// `strftime_now(format)`: the local time as Python's `datetime.now().strftime(format)`.
fn strftime_now(format: &str) -> Result<String, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: bad format {format:?}"),
        )
    })?;
    Ok(out)
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`: Python's `json.dumps`, not Jinja's HTML-escaping filter.
fn tojson(
    state: &State,
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> Result<String, Error> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(Error::from(ErrorKind::TooManyArguments));
    }
    let arg = |i: usize| -> Result<Value, Error> {
        match args.get(i) {
            Some(v) => Ok(v.clone()),
            None => Ok(kwargs.get::<Option<Value>>(names[i])?.unwrap_or_default()),
        }
    };
    let (ensure_ascii, indent, separators, sort_keys) = (arg(0)?, arg(1)?, arg(2)?, arg(3)?);
    kwargs.assert_all_used()?;
    let indent = match indent.kind() {
        ValueKind::Undefined | ValueKind::None => None,
        ValueKind::String => Some(indent.as_str().unwrap_or_default().to_owned()),
        ValueKind::Number => {
            let n = i64::try_from(indent.clone()).map_err(|_| bad_arg("indent"))?;
            // Python takes any width; past 64 spaces is no real template's, only a way to
            // multiply the output.
            Some(" ".repeat(n.clamp(0, 64) as usize))
        }
        _ => return Err(bad_arg("indent")),
    };
    let mut options = DumpOptions {
        ensure_ascii: ensure_ascii.is_true(),
        sort_keys: sort_keys.is_true(),
        ..DumpOptions::python(false)
    };
    if indent.is_some() {
        options.item_separator = ",".to_owned();
    }
    options.indent = indent;
    if !separators.is_none() && !separators.is_undefined() {
        let pair: Vec<Value> = separators
            .try_iter()
            .map_err(|_| bad_arg("separators"))?
            .collect();
        match pair.as_slice() {
            [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                options.item_separator = item.as_str().unwrap_or_default().to_owned();
                options.key_separator = key.as_str().unwrap_or_default().to_owned();
            }
            _ => return Err(bad_arg("separators")),
        }
    }
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let text = dumps(&json, &options);
    state.consume_fuel(text.len() as u64 / 64)?;
    Ok(text)
}

fn bad_arg(name: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("tojson: bad {name}"))
}

/// A render error as this crate's error: limits are `Limit`, the template's own
/// `raise_exception` keeps its bare message, anything else is `TemplateError`.
fn render_error(e: &Error) -> ChatError {
    let detail = e.detail().unwrap_or_default();
    if e.kind() == ErrorKind::OutOfFuel
        || detail.contains("recursion limit")
        || detail.contains("too many elements")
    {
        return ChatError::new(ChatErrorKind::Limit, e.to_string());
    }
    if raised(e) {
        return ChatError::new(ChatErrorKind::TemplateError, detail);
    }
    ChatError::new(ChatErrorKind::TemplateError, e.to_string())
}

/// Whether `e` (or an error it wraps, as a macro call wraps its body's) came from
/// `raise_exception`.
fn raised(e: &Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<Raised>() {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(source: &str, ctx: serde_json::Value) -> Result<String, ChatError> {
        ChatTemplate::new(source)?.render(Value::from(minijinja::value::Serde(&ctx)))
    }

    #[test]
    fn trims_blocks_like_transformers() {
        let out = render(
            "{% for m in messages %}\n  {% if m %}\n{{ m }}\n  {% endif %}\n{% endfor %}\n",
            json!({"messages": ["a", "b"]}),
        )
        .unwrap();
        assert_eq!(out, "a\nb\n");
    }

    #[test]
    fn tojson_as_python() {
        let ctx = json!({"x": {"b": "é", "a": [1, 2.0]}});
        assert_eq!(
            render("{{ x | tojson }}", ctx.clone()).unwrap(),
            r#"{"b": "é", "a": [1, 2.0]}"#
        );
        assert_eq!(
            render("{{ x | tojson(indent=2) }}", ctx.clone()).unwrap(),
            "{\n  \"b\": \"é\",\n  \"a\": [\n    1,\n    2.0\n  ]\n}"
        );
        assert_eq!(
            render(
                "{{ x | tojson(separators=(',', ':'), sort_keys=true) }}",
                ctx.clone()
            )
            .unwrap(),
            r#"{"a":[1,2.0],"b":"é"}"#
        );
        assert_eq!(
            render("{{ x | tojson(true) }}", ctx).unwrap(),
            r#"{"b": "\u00e9", "a": [1, 2.0]}"#
        );
        assert!(render("{{ 1 | tojson(bogus=1) }}", json!({})).is_err());
    }

    #[test]
    fn python_methods_and_printing() {
        let out = render(
            "{{ ' a '.strip() }}|{{ 'abc'.startswith('a') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ none }}|{{ d }}",
            json!({"d": {"z": 1, "y": null}}),
        )
        .unwrap();
        assert_eq!(out, "a|True|z=1;y=None;|None|{'z': 1, 'y': None}");
    }

    #[test]
    fn loop_controls() {
        let out = render(
            "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
            json!({}),
        )
        .unwrap();
        assert_eq!(out, "02");
    }

    #[test]
    fn raise_exception_is_a_template_error_with_its_message() {
        let e = render("{{ raise_exception('roles must alternate') }}", json!({})).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::TemplateError);
        assert_eq!(e.message(), "roles must alternate");
        let e = render(
            "{% macro m() %}{{ raise_exception('inside') }}{% endmacro %}{{ m() }}",
            json!({}),
        )
        .unwrap_err();
        assert_eq!(e.message(), "inside");
    }

    #[test]
    fn syntax_error_is_bad_template() {
        let e = ChatTemplate::new("{% for %}").unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::BadTemplate);
    }

    #[test]
    fn strftime_now_formats_and_rejects_bad_formats() {
        let year = render("{{ strftime_now('%Y') }}", json!({})).unwrap();
        assert_eq!(year.len(), 4);
        assert!(year.parse::<u32>().unwrap() >= 2024);
        assert!(render("{{ strftime_now('%Q') }}", json!({})).is_err());
    }

    #[test]
    fn endless_loops_run_out_of_fuel() {
        let started = std::time::Instant::now();
        let e = render(
            "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}x{% endfor %}{% endfor %}{% endfor %}",
            json!({}),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::Limit, "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn memory_bombs_run_out_of_fuel() {
        let e = render("{{ 'x' * 1000000000 }}", json!({})).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::Limit, "{e}");
        let e = render(
            "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            json!({}),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::Limit, "{e}");
    }

    #[test]
    fn deep_recursion_is_a_limit() {
        let e = render(
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            json!({}),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::Limit, "{e}");
    }

    /// The budget leaves real conversations room: a tenth of it renders 1000 messages of
    /// ~1 KB with tools through the corpus's Llama 3.1 and Qwen 2.5 templates.
    #[test]
    fn real_templates_fit_a_tenth_of_the_fuel() {
        let content = "All work and no play makes Jack a dull boy. ".repeat(23);
        let messages: Vec<_> = (0..1000)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": content}))
            .collect();
        for model in ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct"] {
            let path = format!(
                "{}/tests/data/chat_templates/{model}.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let corpus: serde_json::Value =
                serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let source = corpus["tokenizer_config"]["chat_template"]
                .as_str()
                .unwrap();
            let tools = corpus["cases"]
                .as_array()
                .unwrap()
                .iter()
                .find_map(|c| c["tools"].as_array())
                .unwrap();
            let ctx = json!({
                "messages": messages, "tools": tools, "add_generation_prompt": true,
                "bos_token": "<s>", "date_string": "26 Jul 2024"
            });
            let out = ChatTemplate::with_fuel(source, FUEL / 10)
                .unwrap()
                .render(Value::from(minijinja::value::Serde(&ctx)))
                .unwrap_or_else(|e| panic!("{model}: {e}"));
            assert!(out.len() > 1000 * content.len(), "{model}");
        }
    }
}
