//! [`ModelText`]: everything about a model's text found in its folder, the one handle the
//! OpenAI frontend keeps per model, and [`ChatPrompt`], what one chat request renders.

use crate::config::TokenizerConfig;
use crate::error::{ChatError, ChatErrorKind};
use crate::messages;
use crate::template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use minijinja::value::{Serde, Value};
use std::path::Path;

/// Template variables transformers sets itself; `chat_template_kwargs` may not set them
/// (Python would fail with "got multiple values for keyword argument").
const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// A model's text side: its tokenizer and chat template, found per model. Immutable once
/// loaded, `Send + Sync`: share it behind an `Arc` across requests.
#[derive(Debug)]
pub struct ModelText {
    tokenizer: Option<Tokenizer>,
    /// Named templates (`default`, `tool_use`, ...), compiled at load.
    templates: Vec<(String, ChatTemplate)>,
    /// `bos_token`, `eos_token`, ... as template variables.
    special_tokens: Vec<(String, serde_json::Value)>,
}

/// One chat request's input to [`ModelText::apply_chat_template`].
#[derive(Debug, Clone, Copy)]
pub struct ChatPrompt<'a> {
    /// OpenAI messages (role, content as text or parts, tool_calls, tool_call_id, name).
    pub messages: &'a [serde_json::Value],
    /// OpenAI tools (`[{type: "function", function: {name, description, parameters}}]`).
    pub tools: Option<&'a [serde_json::Value]>,
    /// End with the opening of an assistant turn, for the model to continue.
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs`: more template variables (`date_string`, `enable_thinking`...).
    pub extra: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

impl ModelText {
    /// Reads `tokenizer.json` and `tokenizer_config.json` (chat_template, bos/eos tokens),
    /// plus `chat_template.jinja` and `special_tokens_map.json` when present, from `dir` (a
    /// model's folder in the model repository, or a `--tokenizer` folder). `Ok(None)` when
    /// `dir` holds none of them. A template that does not compile fails the load
    /// (`BadTemplate`), so a broken model is reported at load, not per request.
    pub fn from_dir(dir: &Path) -> Result<Option<ModelText>, ChatError> {
        let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let config = TokenizerConfig::from_dir(dir)?;
        if tokenizer.is_none() && config.is_none() {
            return Ok(None);
        }
        let config = config.unwrap_or_default();
        let templates = config
            .templates
            .iter()
            .map(|(name, source)| {
                let template = ChatTemplate::new(source).map_err(|e| {
                    ChatError::new(
                        e.kind(),
                        format!(
                            "chat template {name:?} of {}: {}",
                            dir.display(),
                            e.message()
                        ),
                    )
                })?;
                Ok((name.clone(), template))
            })
            .collect::<Result<Vec<_>, ChatError>>()?;
        Ok(Some(ModelText {
            tokenizer,
            templates,
            special_tokens: config.special_tokens,
        }))
    }

    /// Whether a chat template is known (else `/v1/chat/completions` cannot serve the model).
    pub fn has_chat_template(&self) -> bool {
        !self.templates.is_empty()
    }

    /// Whether a tokenizer is known (else the frontend cannot turn text into token ids).
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// Token ids of `text` (with the tokenizer's special tokens when `add_special_tokens`).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ChatError> {
        self.tokenizer()?.encode(text, add_special_tokens)
    }

    /// The text of `ids`. Tool-call parsers need the markers that are special tokens
    /// (`[TOOL_CALLS]`, `<|python_tag|>`): decode with `skip_special_tokens = false` for them.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        self.tokenizer()?.decode(ids, skip_special_tokens)
    }

    /// A special token of `tokenizer_config.json` by attribute (`"eos_token"`), e.g. to stop
    /// generation at it.
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.special_tokens
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_str())
    }

    /// The id of a token in the tokenizer's vocabulary (added tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.as_ref()?.token_to_id(token)
    }

    /// Renders the chat template exactly as `transformers`' `tokenizer.apply_chat_template(
    /// messages, tools=tools, add_generation_prompt=..., tokenize=False, **extra)` does, with
    /// one step of vLLM's first: assistant tool-call arguments sent as JSON text are parsed.
    /// A template's `raise_exception` or a request it cannot render is `TemplateError`; a
    /// render past the fuel or recursion limit is `Limit`.
    pub fn apply_chat_template(&self, prompt: &ChatPrompt<'_>) -> Result<String, ChatError> {
        let template = self.choose_template(prompt.tools.is_some())?;
        if let Some(key) = prompt
            .extra
            .and_then(|extra| RESERVED.iter().find(|k| extra.contains_key(**k)))
        {
            return Err(ChatError::new(
                ChatErrorKind::TemplateError,
                format!("chat_template_kwargs may not set {key:?}"),
            ));
        }
        let messages = messages::prepare(prompt.messages);
        let mut ctx: Vec<(String, Value)> = Vec::new();
        for (name, token) in &self.special_tokens {
            ctx.push((name.clone(), Value::from(Serde(token))));
        }
        if let Some(extra) = prompt.extra {
            for (name, value) in extra {
                ctx.push((name.clone(), Value::from(Serde(value))));
            }
        }
        ctx.push(("messages".to_owned(), Value::from(Serde(&*messages))));
        ctx.push((
            "tools".to_owned(),
            prompt
                .tools
                .map_or(Value::from(()), |t| Value::from(Serde(t))),
        ));
        ctx.push(("documents".to_owned(), Value::from(())));
        ctx.push((
            "add_generation_prompt".to_owned(),
            Value::from(prompt.add_generation_prompt),
        ));
        // Later entries win, as in transformers' `{**special_tokens_map, **kwargs}`.
        template.render(Value::from_pairs(ctx))
    }

    /// transformers' choice among named templates: `tool_use` when tools are given and it
    /// exists, else `default`, else the only one.
    fn choose_template(&self, with_tools: bool) -> Result<&ChatTemplate, ChatError> {
        let named = |name: &str| {
            self.templates
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
        };
        let chosen = match self.templates.as_slice() {
            [] => None,
            [(_, only)] => Some(only),
            _ => with_tools
                .then(|| named("tool_use"))
                .flatten()
                .or_else(|| named("default")),
        };
        chosen.ok_or_else(|| {
            let why = if self.templates.is_empty() {
                "this model has no chat template"
            } else {
                "this model has several chat templates and none is named \"default\""
            };
            ChatError::new(ChatErrorKind::TemplateError, why)
        })
    }

    fn tokenizer(&self) -> Result<&Tokenizer, ChatError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ChatError::new(
                ChatErrorKind::BadTokenizer,
                "this model has no tokenizer.json",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model(config: serde_json::Value) -> ModelText {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
        ModelText::from_dir(dir.path()).unwrap().unwrap()
    }

    fn prompt<'a>(messages: &'a [serde_json::Value]) -> ChatPrompt<'a> {
        ChatPrompt {
            messages,
            tools: None,
            add_generation_prompt: true,
            extra: None,
        }
    }

    #[test]
    fn variables_reach_the_template() {
        let m = model(json!({
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}{{ tools is none }}{{ documents is none }}{% if add_generation_prompt %}>{% endif %}{{ who }}{{ eos_token }}",
            "bos_token": {"content": "<s>"},
            "eos_token": "</s>"
        }));
        assert!(m.has_chat_template());
        assert!(!m.has_tokenizer());
        assert_eq!(m.special_token("eos_token"), Some("</s>"));
        let messages = [json!({"role": "user", "content": "hi"})];
        let extra = json!({"who": "me", "eos_token": "[override]"});
        let p = ChatPrompt {
            extra: extra.as_object(),
            ..prompt(&messages)
        };
        assert_eq!(
            m.apply_chat_template(&p).unwrap(),
            "<s>user:hi;TrueTrue>me[override]"
        );
    }

    #[test]
    fn reserved_kwargs_are_refused() {
        let m = model(json!({"chat_template": "x"}));
        let extra = json!({"messages": []});
        let p = ChatPrompt {
            extra: extra.as_object(),
            ..prompt(&[])
        };
        let e = m.apply_chat_template(&p).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::TemplateError);
    }

    #[test]
    fn named_templates_choose_tool_use_with_tools() {
        let m = model(json!({"chat_template": [
            {"name": "default", "template": "plain"},
            {"name": "tool_use", "template": "{{ tools | length }} tools"}
        ]}));
        assert_eq!(m.apply_chat_template(&prompt(&[])).unwrap(), "plain");
        let tools = [json!({"type": "function"})];
        let p = ChatPrompt {
            tools: Some(&tools),
            ..prompt(&[])
        };
        assert_eq!(m.apply_chat_template(&p).unwrap(), "1 tools");
    }

    #[test]
    fn no_template_and_no_tokenizer_are_errors() {
        let m = model(json!({"eos_token": "</s>"}));
        assert!(!m.has_chat_template());
        let e = m.apply_chat_template(&prompt(&[])).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::TemplateError);
        assert_eq!(
            m.encode("x", false).unwrap_err().kind(),
            ChatErrorKind::BadTokenizer
        );
    }

    #[test]
    fn broken_files_fail_the_load() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ModelText::from_dir(dir.path()).unwrap().is_none());
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"chat_template": "{% if %}"}"#,
        )
        .unwrap();
        let e = ModelText::from_dir(dir.path()).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::BadTemplate);
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        let e = ModelText::from_dir(dir.path()).unwrap_err();
        assert_eq!(e.kind(), ChatErrorKind::BadTokenizer);
    }

    #[test]
    fn model_text_is_shareable() {
        fn check<T: Send + Sync>() {}
        check::<ModelText>();
    }
}
