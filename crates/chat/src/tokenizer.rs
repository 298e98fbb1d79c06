//! A model's Hugging Face tokenizer (`tokenizer.json`), run by the `tokenizers` crate with its
//! pure-Rust regex engine. Loaded once per model; encoding and decoding take `&self`.

use crate::error::{io_error, ChatError, ChatErrorKind};
use std::path::Path;

/// A loaded `tokenizer.json`.
pub(crate) struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.inner.get_vocab_size(true))
            .finish()
    }
}

impl Tokenizer {
    /// Reads `path`; `Ok(None)` when it does not exist, `BadTokenizer` when it is not a
    /// tokenizer this crate can run.
    pub fn from_file(path: &Path) -> Result<Option<Self>, ChatError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(path, e)),
        };
        let bad = |e: tokenizers::Error| {
            ChatError::new(
                ChatErrorKind::BadTokenizer,
                format!("{}: {e}", path.display()),
            )
        };
        let mut inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(bad)?;
        // A tokenizer.json saved for training may pad and truncate every encoding (to 128 for
        // all-MiniLM); transformers turns both off for a plain encode, and a server counting
        // prompt tokens must too.
        inner.with_padding(None);
        inner.with_truncation(None).map_err(bad)?;
        Ok(Some(Tokenizer { inner }))
    }

    /// Token ids of `text`; `add_special_tokens` runs the tokenizer's post-processor (BOS,
    /// `[CLS]`/`[SEP]`, ...).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ChatError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| ChatError::new(ChatErrorKind::BadTokenizer, e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`; an id outside the vocabulary is a `BadTokenizer` error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        let size = self.inner.get_vocab_size(true);
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= size) {
            return Err(ChatError::new(
                ChatErrorKind::BadTokenizer,
                format!("token id {bad} is outside the vocabulary ({size} tokens)"),
            ));
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| ChatError::new(ChatErrorKind::BadTokenizer, e.to_string()))
    }

    /// The id of a token (`"<|eot_id|>"`), added tokens included.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}
