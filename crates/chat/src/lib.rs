//! The text side of Nereid's OpenAI-compatible frontend, one crate because its dependencies
//! (Hugging Face `tokenizers`, `minijinja`) are heavy and nothing else needs them:
//!
//! - [`ModelText`]: a model's tokenizer (`tokenizer.json`) and chat template
//!   (`tokenizer_config.json`), found per model folder;
//! - chat templates rendered byte for byte as `transformers`' `apply_chat_template` renders
//!   them (checked against a corpus of real templates in `tests/data/`), with fuel and
//!   recursion limits so a hostile template cannot hang the server;
//! - [`tools`]: tool-call parsing of generated text as vLLM's `llama3_json`, `mistral` and
//!   `hermes` parsers do, whole or streaming.

mod config;
mod error;
mod messages;
mod model_text;
mod pyjson;
mod pyrepr;
mod template;
mod tokenizer;
pub mod tools;

pub use error::{ChatError, ChatErrorKind};
pub use model_text::{ChatPrompt, ModelText};
