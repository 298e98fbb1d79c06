//! A request's `sampling_parameters`: the JSON object of vLLM's `SamplingParams` that
//! Triton's vLLM backend takes, read into [`Sampling`] with every value checked. Values
//! may be JSON numbers or strings holding them (Triton's vLLM backend converts strings
//! for its known keys, and clients built for it send either). A key vLLM knows but this
//! engine cannot honour is refused as unsupported; a key neither knows is refused as
//! invalid: both name the key, so nothing a client asks for is silently dropped.

use nereid_core::{Error, Result};
use serde_json::{Map, Value};

/// vLLM's `max_tokens` when a request gives none.
pub const DEFAULT_MAX_TOKENS: u32 = 16;

/// How one sequence is sampled and when it stops.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f32,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches this.
    pub top_p: f32,
    /// Only the `top_k` most likely tokens; `None` for all.
    pub top_k: Option<u32>,
    /// Tokens less likely than this fraction of the most likely one are dropped.
    pub min_p: f32,
    /// The seed of this sequence's random draws; `None` takes the engine's.
    pub seed: Option<u32>,
    /// Divides (or multiplies, when negative) the logits of tokens already seen; 1 is off.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of every token already generated.
    pub presence_penalty: f32,
    /// Subtracted per occurrence from the logit of every token already generated.
    pub frequency_penalty: f32,
    /// Texts that end generation; not part of the output unless
    /// `include_stop_str_in_output`.
    pub stop: Vec<String>,
    /// Token ids that end generation (after being emitted, as vLLM does).
    pub stop_token_ids: Vec<i32>,
    /// Whether the text of a matched stop string is kept.
    pub include_stop_str_in_output: bool,
    /// Most tokens generated.
    pub max_tokens: u32,
    /// Tokens generated before end-of-generation tokens may end the sequence.
    pub min_tokens: u32,
    /// Keep generating past end-of-generation tokens, up to `max_tokens`.
    pub ignore_eos: bool,
    /// Leave special tokens (`<|im_end|>`...) out of the text.
    pub skip_special_tokens: bool,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            min_p: 0.0,
            seed: None,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            include_stop_str_in_output: false,
            max_tokens: DEFAULT_MAX_TOKENS,
            min_tokens: 0,
            ignore_eos: false,
            skip_special_tokens: true,
        }
    }
}

/// vLLM keys this engine refuses, with what it lacks.
const UNSUPPORTED: [(&str, &str); 9] = [
    ("logprobs", "log probabilities are not returned"),
    ("prompt_logprobs", "log probabilities are not returned"),
    ("structured_outputs", "guided decoding is not available"),
    ("guided_decoding", "guided decoding is not available"),
    ("best_of", "one sequence is generated per request"),
    ("logit_bias", "logit biases are not applied"),
    ("bad_words", "bad words are not filtered"),
    ("allowed_token_ids", "token allow-lists are not applied"),
    ("truncate_prompt_tokens", "prompts are not truncated"),
];

impl Sampling {
    /// Reads the JSON text of a `sampling_parameters` input; errors name the key.
    pub fn parse(text: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid_arg(format!("'sampling_parameters' is not valid JSON: {e}"))
        })?;
        let Value::Object(fields) = value else {
            return Err(Error::invalid_arg(
                "'sampling_parameters' must be a JSON object",
            ));
        };
        Self::from_fields(&fields)
    }

    fn from_fields(fields: &Map<String, Value>) -> Result<Self> {
        let mut s = Self::default();
        for (key, value) in fields {
            let field = Field { key, value };
            match key.as_str() {
                "temperature" => s.temperature = field.float(0.0, f32::MAX)?,
                "top_p" => s.top_p = field.float(f32::MIN_POSITIVE, 1.0)?,
                "top_k" => s.top_k = field.top_k()?,
                "min_p" => s.min_p = field.float(0.0, 1.0)?,
                "seed" => s.seed = field.seed()?,
                "repetition_penalty" => {
                    s.repetition_penalty = field.float(f32::MIN_POSITIVE, f32::MAX)?
                }
                "presence_penalty" => s.presence_penalty = field.float(-2.0, 2.0)?,
                "frequency_penalty" => s.frequency_penalty = field.float(-2.0, 2.0)?,
                "stop" => s.stop = field.strings()?,
                "stop_token_ids" => s.stop_token_ids = field.token_ids()?,
                "include_stop_str_in_output" => s.include_stop_str_in_output = field.boolean()?,
                "max_tokens" => s.max_tokens = field.count(1)?,
                "min_tokens" => s.min_tokens = field.count(0)?,
                "ignore_eos" => s.ignore_eos = field.boolean()?,
                "skip_special_tokens" => s.skip_special_tokens = field.boolean()?,
                "n" => {
                    if field.count(1)? != 1 {
                        return Err(field.unsupported("one sequence is generated per request"));
                    }
                }
                "detokenize" => {
                    if !field.boolean()? {
                        return Err(field.unsupported("the output is always text"));
                    }
                }
                other => match UNSUPPORTED.iter().find(|(name, _)| *name == other) {
                    Some(_) if value.is_null() || value == &Value::from(0) => {}
                    Some((_, why)) => return Err(field.unsupported(why)),
                    None => {
                        return Err(Error::invalid_arg(format!(
                            "unknown sampling parameter '{key}'"
                        )))
                    }
                },
            }
        }
        if s.min_tokens > s.max_tokens {
            return Err(Error::invalid_arg(format!(
                "'min_tokens' ({}) must not be more than 'max_tokens' ({})",
                s.min_tokens, s.max_tokens
            )));
        }
        Ok(s)
    }
}

/// One key of the object and its value, for reading with the key named in errors.
struct Field<'a> {
    key: &'a str,
    value: &'a Value,
}

impl Field<'_> {
    fn invalid(&self, expected: &str) -> Error {
        Error::invalid_arg(format!(
            "sampling parameter '{}' must be {expected}, got {}",
            self.key, self.value
        ))
    }

    fn unsupported(&self, why: &str) -> Error {
        Error::unsupported(format!(
            "sampling parameter '{}' is not supported by the llamacpp backend: {why}",
            self.key
        ))
    }

    /// A number, given as a JSON number or a string holding one.
    fn number(&self) -> Option<f64> {
        match self.value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn float(&self, low: f32, high: f32) -> Result<f32> {
        let expected = || format!("a number between {low} and {high}");
        let v = self.number().ok_or_else(|| self.invalid(&expected()))? as f32;
        if v.is_finite() && (low..=high).contains(&v) {
            Ok(v)
        } else {
            Err(self.invalid(&expected()))
        }
    }

    fn integer(&self) -> Option<i64> {
        let v = self.number()?;
        (v.fract() == 0.0 && v.abs() < 2f64.powi(63)).then_some(v as i64)
    }

    fn count(&self, low: u32) -> Result<u32> {
        let expected = || format!("an integer of at least {low}");
        self.integer()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v >= low)
            .ok_or_else(|| self.invalid(&expected()))
    }

    /// vLLM's `top_k`: -1 (and 0) turn it off.
    fn top_k(&self) -> Result<Option<u32>> {
        match self.integer() {
            Some(-1 | 0) => Ok(None),
            Some(k) if k > 0 => Ok(Some(u32::try_from(k).unwrap_or(u32::MAX))),
            _ => Err(self.invalid("-1 (off) or a positive integer")),
        }
    }

    /// A seed of any size: llama.cpp's are 32 bits, so a larger one is folded into 32
    /// (the same seed still gives the same draws).
    fn seed(&self) -> Result<Option<u32>> {
        if self.value.is_null() {
            return Ok(None);
        }
        let v = match self.value {
            Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|v| v as u64)),
            Value::String(s) => s.trim().parse::<i64>().ok().map(|v| v as u64),
            _ => None,
        }
        .ok_or_else(|| self.invalid("an integer"))?;
        Ok(Some((v ^ (v >> 32)) as u32))
    }

    fn boolean(&self) -> Result<bool> {
        match self.value {
            Value::Bool(b) => Ok(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(self.invalid("true or false")),
        }
    }

    fn strings(&self) -> Result<Vec<String>> {
        match self.value {
            Value::Null => Ok(Vec::new()),
            Value::String(s) => Ok(vec![s.clone()]),
            Value::Array(items) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.invalid("a string or a list of strings")),
                })
                .collect(),
            _ => Err(self.invalid("a string or a list of strings")),
        }
        .and_then(|stops| {
            if stops.iter().any(String::is_empty) {
                Err(self.invalid("non-empty strings"))
            } else {
                Ok(stops)
            }
        })
    }

    fn token_ids(&self) -> Result<Vec<i32>> {
        let Value::Array(items) = self.value else {
            return Err(self.invalid("a list of token ids"));
        };
        items
            .iter()
            .map(|item| {
                item.as_i64()
                    .and_then(|v| i32::try_from(v).ok())
                    .filter(|v| *v >= 0)
                    .ok_or_else(|| self.invalid("a list of token ids"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::error::ErrorKind;

    #[test]
    fn an_empty_object_is_vllms_defaults() {
        assert_eq!(Sampling::parse("{}").expect("valid"), Sampling::default());
        assert_eq!(Sampling::default().max_tokens, 16);
    }

    #[test]
    fn numbers_may_come_as_strings_and_every_field_is_read() {
        let s = Sampling::parse(
            r#"{"temperature": "0.5", "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42,
                "repetition_penalty": 1.1, "presence_penalty": -0.5, "frequency_penalty": 0.5,
                "stop": ["\n\n", "END"], "stop_token_ids": [2], "include_stop_str_in_output": true,
                "max_tokens": "64", "min_tokens": 3, "ignore_eos": "true",
                "skip_special_tokens": false, "n": 1, "logprobs": null}"#,
        )
        .expect("valid");
        assert_eq!(s.temperature, 0.5);
        assert_eq!((s.top_p, s.top_k, s.min_p), (0.9, Some(40), 0.05));
        assert_eq!(s.seed, Some(42));
        assert_eq!(
            (
                s.repetition_penalty,
                s.presence_penalty,
                s.frequency_penalty
            ),
            (1.1, -0.5, 0.5)
        );
        assert_eq!(s.stop, ["\n\n", "END"]);
        assert_eq!(s.stop_token_ids, [2]);
        assert!(s.include_stop_str_in_output && s.ignore_eos && !s.skip_special_tokens);
        assert_eq!((s.max_tokens, s.min_tokens), (64, 3));
    }

    #[test]
    fn a_large_seed_is_folded_the_same_way_each_time() {
        let a = Sampling::parse(r#"{"seed": 12345678901234}"#).expect("valid");
        let b = Sampling::parse(r#"{"seed": "12345678901234"}"#).expect("valid");
        assert_eq!(a.seed, b.seed);
        assert!(a.seed.is_some());
        assert_eq!(
            Sampling::parse(r#"{"top_k": -1}"#).expect("off").top_k,
            None
        );
        assert_eq!(
            Sampling::parse(r#"{"stop": "x"}"#).expect("one").stop,
            ["x"]
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        for (text, key) in [
            (r#"{"temperature": -1}"#, "'temperature'"),
            (r#"{"top_p": 0}"#, "'top_p'"),
            (r#"{"top_p": 1.5}"#, "'top_p'"),
            (r#"{"top_k": -2}"#, "'top_k'"),
            (r#"{"min_p": 2}"#, "'min_p'"),
            (r#"{"repetition_penalty": 0}"#, "'repetition_penalty'"),
            (r#"{"presence_penalty": 3}"#, "'presence_penalty'"),
            (r#"{"max_tokens": 0}"#, "'max_tokens'"),
            (r#"{"max_tokens": 2.5}"#, "'max_tokens'"),
            (r#"{"max_tokens": "many"}"#, "'max_tokens'"),
            (r#"{"stop": [1]}"#, "'stop'"),
            (r#"{"stop": [""]}"#, "'stop'"),
            (r#"{"ignore_eos": 1}"#, "'ignore_eos'"),
            (r#"{"stop_token_ids": [-1]}"#, "'stop_token_ids'"),
            (r#"{"min_tokens": 5, "max_tokens": 2}"#, "'min_tokens'"),
            (r#"{"temprature": 0}"#, "'temprature'"),
            ("[1]", "JSON object"),
            ("{", "not valid JSON"),
        ] {
            let e = Sampling::parse(text).expect_err(text);
            assert_eq!(e.kind(), ErrorKind::InvalidArg, "{text}");
            assert!(e.message().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn what_vllm_knows_and_this_engine_cannot_do_is_unsupported() {
        for text in [
            r#"{"logprobs": 2}"#,
            r#"{"structured_outputs": "{\"json\": {}}"}"#,
            r#"{"n": 2}"#,
            r#"{"detokenize": false}"#,
        ] {
            let e = Sampling::parse(text).expect_err(text);
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{text}");
            assert!(e.message().contains("llamacpp"), "{text}: {e}");
        }
    }
}
