//! Each corpus file holds a real template (its package and version named in the file), the
//! conversations it was given and what transformers rendered: ours must be byte-identical, and
//! must fail where transformers failed (with the same message for `raise_exception`).

use nereid_chat::{ChatErrorKind, ChatPrompt, ModelText};
use serde_json::Value;

/// Python errors minijinja does not raise, each with why: a case that failed in transformers
/// with one of these may render here. (The Hermes 3 `tool_use` template loops over `tools`
/// unguarded; transformers only picks that template when tools are given.)
const KNOWN_DIVERGENCES: [(&str, &str); 1] = [(
    "'NoneType' object is not iterable",
    "minijinja iterates `none` as an empty sequence where Jinja2 raises TypeError",
)];

fn corpus_files() -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(super::data("chat_templates"))
        .expect("the corpus folder is in the repository")
        .map(|e| e.expect("a readable folder entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// A model folder holding the corpus file's tokenizer_config.json.
fn load(corpus: &Value) -> (tempfile::TempDir, ModelText) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        corpus["tokenizer_config"].to_string(),
    )
    .expect("a writable temporary folder");
    let text = ModelText::from_dir(dir.path())
        .expect("the corpus template loads")
        .expect("the folder has a tokenizer_config.json");
    (dir, text)
}

#[test]
fn renders_as_transformers() {
    let files = corpus_files();
    let models: Vec<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for family in ["llama-3", "qwen2.5", "mistral", "smollm2", "phi-3"] {
        assert!(
            models.iter().any(|m| m.starts_with(family)),
            "no {family} template in {models:?}"
        );
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in &files {
        let corpus: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        assert!(corpus["source"]["package"].is_string() && corpus["source"]["version"].is_string());
        let (_dir, text) = load(&corpus);
        assert!(text.has_chat_template());
        for case in corpus["cases"].as_array().unwrap() {
            let label = format!("{} / {}", corpus["model"], case["name"]);
            let messages = case["messages"].as_array().unwrap();
            let tools = case["tools"].as_array().map(Vec::as_slice);
            let prompt = ChatPrompt {
                messages,
                tools,
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
                extra: case["extra"].as_object(),
            };
            let got = text.apply_chat_template(&prompt);
            checked += 1;
            match (&got, case.get("expected"), case.get("expected_error")) {
                (Ok(got), Some(Value::String(want)), _) if got == want => {}
                (Ok(_), None, Some(Value::String(want)))
                    if KNOWN_DIVERGENCES.iter().any(|(python, _)| python == want) => {}
                (Err(e), None, Some(Value::String(want))) => {
                    let exact = case["error_type"] == "TemplateError";
                    if e.kind() != ChatErrorKind::TemplateError || (exact && e.message() != want) {
                        failures.push(format!("{label}: error {e:?}, transformers said {want:?}"));
                    }
                }
                _ => failures.push(format!(
                    "{label}:\n--- ours\n{got:?}\n--- transformers\n{:?}",
                    case.get("expected").or(case.get("expected_error"))
                )),
            }
        }
    }
    assert!(checked >= 40, "only {checked} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Tool-call arguments sent as JSON text (as OpenAI clients send them) render as the same
/// calls given as objects did in transformers.
#[test]
fn argument_text_renders_as_objects() {
    for model in ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct"] {
        let file = super::data(&format!("chat_templates/{model}.json"));
        let corpus: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        let (_dir, text) = load(&corpus);
        let case = corpus["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "tool_call_and_result")
            .unwrap();
        let mut messages = case["messages"].as_array().unwrap().clone();
        let arguments = &mut messages[1]["tool_calls"][0]["function"]["arguments"];
        *arguments = Value::String(arguments.to_string());
        let prompt = ChatPrompt {
            messages: &messages,
            tools: case["tools"].as_array().map(Vec::as_slice),
            add_generation_prompt: true,
            extra: case["extra"].as_object(),
        };
        assert_eq!(
            text.apply_chat_template(&prompt).unwrap(),
            case["expected"].as_str().unwrap(),
            "{model}"
        );
    }
}
