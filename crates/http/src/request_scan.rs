//! One pass over an infer request's JSON in the shape clients send it (tritonclient,
//! perf_analyzer, curl): an object of `id`, `parameters`, `inputs` and `outputs` whose
//! inputs carry `data` as (nested) arrays of numbers or booleans. Each input's elements go
//! straight into the little-endian bytes its datatype wants, in a buffer sized from its
//! shape. serde's reader visits every value through a layer of generic calls and reads
//! `data` twice (kept as raw text until the datatype is known, then converted): on a small
//! request that is most of the decoding.
//!
//! The scan accepts only what serde's reader accepts, with the same result, and gives up
//! (`None`) on everything else: an escape in a string, `null`, an unknown or repeated
//! field, `data` before `datatype`, BYTES data, a number it cannot take exactly as serde
//! does, and every error. The request is then read by serde, which so keeps every error
//! message: the scan changes how fast a request is read, never what it means.

use std::borrow::Cow;

use nereid_core::request::element_count;
use nereid_core::DataType;
use serde_json::{Map, Number, Value};

use crate::json_data::{put_bool, put_float, put_int, MAX_JSON_NESTING_DEPTH};
use crate::request_json::{InputData, InputJson, OutputJson, RequestJson};

/// The request in `text`, when it is in the shape the scan reads; `None` leaves it to serde.
pub(crate) fn scan(text: &str) -> Option<RequestJson<'_>> {
    let mut reader = Reader { text, at: 0 };
    let request = reader.request()?;
    reader.skip_space();
    (reader.at == text.len()).then_some(request)
}

/// A cursor over the JSON text.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

/// A JSON number as serde_json reads it: an integer token that fits `u64` (or, negative,
/// `i64`) is an integer, anything else a float.
enum Num {
    Int(i128),
    Float(f64),
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// Skips JSON's four whitespace characters (no others: serde refuses them).
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.bytes().get(self.at).copied()
    }

    /// Consumes `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.eat(byte).then_some(())
    }

    /// `word` (`true` or `false`) next.
    fn literal(&mut self, word: &str) -> Option<()> {
        self.skip_space();
        self.text[self.at..].starts_with(word).then(|| {
            self.at += word.len();
        })
    }

    /// A string without escapes or control characters, borrowed from the text.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let bytes = self.bytes();
        let start = self.at;
        let mut end = start;
        loop {
            match *bytes.get(end)? {
                b'"' => break,
                b'\\' | 0..0x20 => return None,
                _ => end += 1,
            }
        }
        self.at = end + 1;
        // Both ends are ASCII quotes, so both are character boundaries.
        self.text.get(start..end)
    }

    /// Reads an object, calling `field` on each key to read its value.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            field(self, key)?;
            if !self.eat(b',') {
                return self.expect(b'}');
            }
        }
    }

    /// Reads an array, calling `item` to read each element.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.eat(b']') {
            return Some(());
        }
        loop {
            item(self)?;
            if !self.eat(b',') {
                return self.expect(b']');
            }
        }
    }

    /// An array read into a `Vec` by `item`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        // Room for the usual few inputs, outputs or dimensions without regrowing.
        let mut items = Vec::with_capacity(4);
        self.array(|reader| {
            items.push(item(reader)?);
            Some(())
        })?;
        Some(items)
    }

    /// A number in JSON's grammar, valued as serde_json values it (see [`Num`]); `None`
    /// for what serde would reject and for an integer beyond `u64`, which serde reads by
    /// another route.
    fn number(&mut self) -> Option<Num> {
        self.skip_space();
        let bytes = self.bytes();
        let digits = |mut i: usize| {
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let start = self.at;
        let negative = bytes.get(start) == Some(&b'-');
        let mut end = start + usize::from(negative);
        // The integer part, valued as it is read: `None` once it passes `u64`.
        let mut magnitude = Some(0u64);
        match bytes.get(end) {
            Some(b'0') => end += 1,
            Some(b'1'..=b'9') => {
                while let Some(digit) = bytes.get(end).filter(|b| b.is_ascii_digit()) {
                    magnitude = magnitude
                        .and_then(|m| m.checked_mul(10)?.checked_add(u64::from(digit - b'0')));
                    end += 1;
                }
            }
            _ => return None,
        }
        if !matches!(bytes.get(end), Some(b'.' | b'e' | b'E')) {
            self.at = end;
            let magnitude = magnitude?;
            if !negative {
                return Some(Num::Int(i128::from(magnitude)));
            }
            // serde_json reads `-0`, and what is below `i64::MIN`, as the float `-magnitude`.
            if magnitude == 0 || magnitude > i64::MIN.unsigned_abs() {
                return Some(Num::Float(-(magnitude as f64)));
            }
            return Some(Num::Int(-i128::from(magnitude)));
        }
        if bytes.get(end) == Some(&b'.') {
            let fraction_end = digits(end + 1);
            if fraction_end == end + 1 {
                return None;
            }
            end = fraction_end;
        }
        if let Some(b'e' | b'E') = bytes.get(end) {
            let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
            let exponent_end = digits(end + 1 + sign);
            if exponent_end == end + 1 + sign {
                return None;
            }
            end = exponent_end;
        }
        self.at = end;
        // Correctly rounded, as serde_json's `float_roundtrip` reads it; serde refuses what
        // overflows.
        let value: f64 = self.text[start..end].parse().ok()?;
        value.is_finite().then_some(Num::Float(value))
    }

    fn request(&mut self) -> Option<RequestJson<'a>> {
        let (mut id, mut parameters, mut inputs, mut outputs) = (None, None, None, None);
        self.object(|reader, key| {
            match key {
                "id" if id.is_none() => id = Some(reader.string()?.to_owned()),
                "parameters" if parameters.is_none() => parameters = Some(reader.parameters()?),
                "inputs" if inputs.is_none() => inputs = Some(reader.list(Self::input)?),
                "outputs" if outputs.is_none() => outputs = Some(reader.list(Self::output)?),
                _ => return None,
            }
            Some(())
        })?;
        Some(RequestJson {
            id,
            parameters,
            inputs: inputs?,
            outputs,
        })
    }

    fn input(&mut self) -> Option<InputJson<'a>> {
        let (mut name, mut shape, mut datatype, mut parameters, mut data) =
            (None, None::<Vec<i64>>, None, None, None);
        self.object(|reader, key| {
            match key {
                "name" if name.is_none() => name = Some(reader.string()?.to_owned()),
                "shape" if shape.is_none() => shape = Some(reader.shape()?),
                "datatype" if datatype.is_none() => datatype = Some(reader.string()?),
                "parameters" if parameters.is_none() => parameters = Some(reader.parameters()?),
                "data" if data.is_none() => {
                    let datatype = DataType::parse(datatype?)?;
                    data = Some(reader.data(datatype, shape.as_deref())?);
                }
                _ => return None,
            }
            Some(())
        })?;
        Some(InputJson {
            name: name?,
            shape: shape?,
            datatype: Cow::Borrowed(datatype?),
            parameters,
            data: data.map(InputData::Read),
        })
    }

    fn output(&mut self) -> Option<OutputJson> {
        let (mut name, mut parameters) = (None, None);
        self.object(|reader, key| {
            match key {
                "name" if name.is_none() => name = Some(reader.string()?.to_owned()),
                "parameters" if parameters.is_none() => parameters = Some(reader.parameters()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(OutputJson {
            name: name?,
            parameters,
        })
    }

    fn shape(&mut self) -> Option<Vec<i64>> {
        self.list(|reader| match reader.number()? {
            Num::Int(dim) => i64::try_from(dim).ok(),
            Num::Float(_) => None,
        })
    }

    /// A `parameters` object whose values are all scalars (a string, a number or a
    /// boolean), as serde_json's `Value`s.
    fn parameters(&mut self) -> Option<Map<String, Value>> {
        let mut parameters = Map::new();
        self.object(|reader, key| {
            let value = match reader.peek()? {
                b'"' => Value::String(reader.string()?.to_owned()),
                b't' => reader.literal("true").map(|()| Value::Bool(true))?,
                b'f' => reader.literal("false").map(|()| Value::Bool(false))?,
                _ => Value::Number(match reader.number()? {
                    Num::Int(v) if v >= 0 => Number::from(u64::try_from(v).ok()?),
                    Num::Int(v) => Number::from(i64::try_from(v).ok()?),
                    Num::Float(v) => Number::from_f64(v)?,
                }),
            };
            // A repeated key keeps its last value, as in serde_json's map.
            parameters.insert(key.to_owned(), value);
            Some(())
        })?;
        Some(parameters)
    }

    /// An input's `data` as elements of `datatype` (not BYTES).
    fn data(&mut self, datatype: DataType, shape: Option<&[i64]>) -> Option<Vec<u8>> {
        let width = datatype.element_size()?;
        // Every element takes at least two bytes of JSON, so a shape that lies reserves
        // no more than the rest of the text could hold.
        let room = (self.text.len() - self.at) / 2 + 1;
        let elements = shape.and_then(element_count).unwrap_or(0).min(room);
        let mut out = Vec::with_capacity(elements * width);
        self.elements(datatype, &mut out, 0)?;
        Some(out)
    }

    /// One value of `data` at `depth` (0: the outermost), arrays flattened.
    fn elements(&mut self, datatype: DataType, out: &mut Vec<u8>, depth: u32) -> Option<()> {
        if depth >= MAX_JSON_NESTING_DEPTH {
            return None;
        }
        if self.peek()? != b'[' {
            return self.element(datatype, out);
        }
        // The elements of an array are read here, one call each only for nested arrays.
        let inner = depth + 1;
        self.array(|reader| {
            if reader.peek()? == b'[' {
                reader.elements(datatype, out, inner)
            } else if inner >= MAX_JSON_NESTING_DEPTH {
                None
            } else {
                reader.element(datatype, out)
            }
        })
    }

    /// One scalar of `data`: a number or a boolean.
    fn element(&mut self, datatype: DataType, out: &mut Vec<u8>) -> Option<()> {
        match self.peek()? {
            b't' => {
                self.literal("true")?;
                put_bool(datatype, out, true).ok()
            }
            b'f' => {
                self.literal("false")?;
                put_bool(datatype, out, false).ok()
            }
            _ => match self.number()? {
                Num::Int(v) => put_int(datatype, out, v).ok(),
                Num::Float(v) => put_float(datatype, out, v).ok(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::testing::fuzz::Rng;

    use super::*;
    use crate::json_data::parse_data;

    /// A parameters object, as both readers give it.
    type Params = Option<Map<String, Value>>;

    /// An input as the decoder goes on with it: name, shape, datatype, parameters, data.
    type SeenInput = (String, Vec<i64>, String, Params, Option<Vec<u8>>);

    /// A request as the decoder goes on with it, `data` read to bytes; `None` where the
    /// decoder would refuse the data.
    #[derive(Debug, PartialEq)]
    struct Seen {
        id: Option<String>,
        parameters: Params,
        inputs: Vec<SeenInput>,
        outputs: Option<Vec<(String, Params)>>,
    }

    fn seen(request: RequestJson<'_>) -> Option<Seen> {
        let inputs = request
            .inputs
            .into_iter()
            .map(|input| {
                let data = match input.data {
                    None => None,
                    Some(InputData::Read(bytes)) => Some(bytes),
                    Some(InputData::Text(raw)) => {
                        let datatype = DataType::parse(&input.datatype)?;
                        Some(parse_data(datatype, raw.get()).ok()?)
                    }
                };
                let datatype = input.datatype.into_owned();
                Some((input.name, input.shape, datatype, input.parameters, data))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Seen {
            id: request.id,
            parameters: request.parameters,
            inputs,
            outputs: request
                .outputs
                .map(|o| o.into_iter().map(|o| (o.name, o.parameters)).collect()),
        })
    }

    /// The scan's reading of `text` and serde's: equal whenever the scan reads it.
    fn both(text: &str) -> (Option<Seen>, Option<Seen>) {
        let scanned = scan(text).map(|r| seen(r).expect("the scan reads only valid data"));
        let by_serde = serde_json::from_str::<RequestJson<'_>>(text)
            .ok()
            .and_then(seen);
        (scanned, by_serde)
    }

    fn reads_as_serde_does(text: &str) {
        let (scanned, by_serde) = both(text);
        assert!(scanned.is_some(), "the scan reads {text}");
        assert_eq!(scanned, by_serde, "{text}");
    }

    fn leaves_to_serde(text: &str) {
        assert!(scan(text).is_none(), "left to serde: {text}");
    }

    #[test]
    fn the_requests_clients_send_are_read_as_serde_reads_them() {
        reads_as_serde_does(
            r#"{"inputs":[{"name":"INPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},{"name":"INPUT1","shape":[1,4],"datatype":"FP32","data":[1,1,1,1]}]}"#,
        );
        // tritonclient's binary tensors and outputs, with every parameter kind.
        reads_as_serde_does(
            r#"{ "id" : "7", "parameters": {"binary_data_output": true, "sequence_id": 42, "priority": 1, "name": "x", "ratio": 0.5, "neg": -3},
                "inputs": [ {"name": "A", "shape": [2, 2], "datatype": "INT32", "parameters": {"binary_data_size": 16}},
                            {"name": "B", "shape": [2, 2], "datatype": "BOOL", "data": [[true, false], [false, true]]} ],
                "outputs": [ {"name": "O", "parameters": {"binary_data": false}}, {"name": "P"} ] }"#,
        );
        reads_as_serde_does(
            r#"{"inputs":[{"datatype":"FP64","name":"F","shape":[3],"data":[1.5e300,-0.1,2E-5]}]}"#,
        );
        reads_as_serde_does(r#"{"inputs":[]}"#);
        reads_as_serde_does(
            r#"{"inputs":[{"name":"S","shape":[],"datatype":"INT8","data":-128}]}"#,
        );
        reads_as_serde_does(
            r#"{"inputs":[{"name":"H","shape":[4],"datatype":"FP16","data":[0.1,65504,-0,1e-8]}]}"#,
        );
        reads_as_serde_does(
            r#"{"inputs":[{"name":"U","shape":[2],"datatype":"UINT64","data":[18446744073709551615,0]},{"name":"I","shape":[1],"datatype":"INT64","data":[-9223372036854775808]}]}"#,
        );
    }

    #[test]
    fn what_serde_reads_otherwise_or_refuses_is_left_to_it() {
        for text in [
            r#"{"id":"a\"b","inputs":[]}"#,
            r#"{"id":null,"inputs":[]}"#,
            r#"{"inputs":[],"extra":1}"#,
            r#"{"inputs":[],"inputs":[]}"#,
            r#"{"inputs":[{"name":"A","name":"B","shape":[1],"datatype":"INT32","data":[1]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"data":[1],"datatype":"INT32"}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"BYTES","data":["x"]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1.0]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[-0]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"UINT8","data":[256]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[-0],"datatype":"INT32","data":[]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[01]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1.]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[1e999]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"FP32","data":[18446744073709551616]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"fp32","data":[1]}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","parameters":{"p":null}}]}"#,
            r#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","parameters":{"p":[1]}}]}"#,
            r#"{"inputs":[{"name":"A","datatype":"INT32","data":[1]}]}"#,
            r#"{"inputs":[]} x"#,
            r#"{"inputs":[],}"#,
            "{\"inputs\":[]}\u{a0}",
            "{\"id\":\"tab\there\",\"inputs\":[]}",
            "[]",
            "",
        ] {
            leaves_to_serde(text);
        }
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        leaves_to_serde(&format!(
            r#"{{"inputs":[{{"name":"A","shape":[1],"datatype":"INT32","data":{deep}}}]}}"#
        ));
        let deepest = format!("{}1{}", "[".repeat(99), "]".repeat(99));
        reads_as_serde_does(&format!(
            r#"{{"inputs":[{{"name":"A","shape":[1],"datatype":"INT32","data":{deepest}}}]}}"#
        ));
    }

    #[test]
    fn floats_are_read_to_the_same_bits_as_serde_reads_them() {
        for number in [
            "0.1",
            "2.2250738585072011e-308",
            "4.9e-324",
            "1.7976931348623157e308",
            "9007199254740993",
            "9007199254740993.0",
            "0.30000000000000004",
            "123456789012345678901234567890e-20",
            "3.4028235677973366e38",
            "1.401298464324817e-45",
            "-2.5E+3",
            "7e-400",
        ] {
            for datatype in ["FP64", "FP32", "FP16", "BF16"] {
                reads_as_serde_does(&format!(
                    r#"{{"inputs":[{{"name":"A","shape":[1],"datatype":"{datatype}","data":[{number}]}}]}}"#
                ));
            }
        }
    }

    /// A random request in the shape the scan reads, with every datatype, nesting and
    /// number form.
    fn random_request(rng: &mut Rng) -> String {
        const TYPES: [&str; 12] = [
            "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
            "FP16", "FP32", "FP64",
        ];
        const NUMBERS: [&str; 14] = [
            "0",
            "1",
            "-1",
            "255",
            "-128",
            "65535",
            "1.5",
            "-0.25",
            "1e3",
            "2E-2",
            "-0",
            "0.0",
            "4294967296",
            "-9223372036854775809",
        ];
        let space = |rng: &mut Rng| [" ", "", "\n", "\t", "\r\n "][rng.below(5)].to_string();
        let mut inputs = Vec::new();
        for i in 0..rng.below(3) {
            let datatype = TYPES[rng.below(TYPES.len())];
            let count = rng.below(4);
            let element = |rng: &mut Rng| {
                if datatype == "BOOL" && !rng.one_in(8) {
                    ["true", "false"][rng.below(2)].to_string()
                } else {
                    NUMBERS[rng.below(NUMBERS.len())].to_string()
                }
            };
            let elements: Vec<String> = (0..count).map(|_| element(rng)).collect();
            let data = if rng.one_in(3) {
                format!("[[{}]]", elements.join(","))
            } else {
                format!("[{}]", elements.join(&format!(",{}", space(rng))))
            };
            inputs.push(format!(
                r#"{{"name":"I{i}",{s}"shape":[{count}],"datatype":"{datatype}","data":{data}}}"#,
                s = space(rng)
            ));
        }
        let mut fields = vec![format!(r#""inputs":[{}]"#, inputs.join(","))];
        if rng.one_in(2) {
            fields.push(format!(r#""id":"r{}""#, rng.below(100)));
        }
        if rng.one_in(2) {
            fields.push(r#""outputs":[{"name":"O","parameters":{"binary_data":true}}]"#.into());
        }
        if rng.one_in(2) {
            fields.push(format!(
                r#""parameters":{{"priority":{},"k":{}}}"#,
                NUMBERS[rng.below(NUMBERS.len())],
                ["\"v\"", "true", "1.5", "-2"][rng.below(4)]
            ));
        }
        let at = rng.below(fields.len());
        fields.rotate_left(at);
        format!(
            "{{{}{}}}",
            space(rng),
            fields.join(&format!(",{}", space(rng)))
        )
    }

    #[test]
    fn random_and_mutated_requests_read_alike_or_go_to_serde() {
        let mut rng = Rng::new(0x5ca9);
        let mut scanned = 0;
        for _ in 0..4000 {
            let mut text = random_request(&mut rng).into_bytes();
            for _ in 0..rng.below(3) {
                let at = rng.below(text.len());
                match rng.below(3) {
                    0 => text[at] = b"{}[],:\"-.0e1 tx\\"[rng.below(16)],
                    1 => {
                        text.remove(at);
                    }
                    _ => text.insert(at, b"0-,]}\""[rng.below(6)]),
                }
            }
            let Ok(text) = std::str::from_utf8(&text) else {
                continue;
            };
            let (fast, by_serde) = both(text);
            if fast.is_some() {
                scanned += 1;
                assert_eq!(fast, by_serde, "{text}");
            }
        }
        assert!(scanned > 1000, "the scan read {scanned} of 4000");
    }
}
