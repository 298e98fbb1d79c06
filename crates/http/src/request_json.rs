//! An infer request's JSON as the decoder reads it: the shapes serde derives its reader
//! from, which [`crate::request_scan`] also fills on its faster path.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// An infer request's JSON, as serde reads it or [`crate::request_scan`] found it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestJson<'a> {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
    #[serde(borrow)]
    pub inputs: Vec<InputJson<'a>>,
    #[serde(default)]
    pub outputs: Option<Vec<OutputJson>>,
}

/// One input of a [`RequestJson`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputJson<'a> {
    pub name: String,
    pub shape: Vec<i64>,
    // Borrowed from the body when it has no escapes (always, for a valid datatype).
    #[serde(borrow)]
    pub datatype: Cow<'a, str>,
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
    #[serde(borrow, default)]
    pub data: Option<InputData<'a>>,
}

/// An input's JSON `data`: its text, read once the datatype is known (serde meets `data`
/// before it has checked the input), or its elements as the request scan already read them.
pub(crate) enum InputData<'a> {
    /// The JSON value, unread.
    Text(&'a RawValue),
    /// The elements' little-endian bytes.
    Read(Vec<u8>),
}

impl<'de: 'a, 'a> Deserialize<'de> for InputData<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(InputData::Text)
    }
}

/// One requested output of a [`RequestJson`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputJson {
    pub name: String,
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
}
