//! nereid-chat's integration tests: real chat templates against transformers' output, and a
//! real tokenizer against Python `tokenizers`' ids. The data under `tests/data/` is made by
//! `scripts/make_chat_template_corpus.py`; neither Python nor a network is needed here.

mod corpus;
mod tokenizer;

use std::path::PathBuf;

/// `crates/chat/tests/data/<rel>`.
fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}
