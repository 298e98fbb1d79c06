//! The infer response's JSON, written straight into the body: Triton's field order, and
//! each string and number spelled by serde_json as before (escapes, float forms, `null`
//! for a non-finite float). Writing the fixed parts by hand spares the list of output
//! views and the derived serializers' per-field dispatch on every response.

use std::io::Write;

use nereid_core::request::{InferResponse, OutputTensor, ParamValue};

use crate::json_data::JsonData;

/// How one output goes back to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// As JSON `data`.
    Json,
    /// As bytes after the JSON, announced by `binary_data_size`.
    Binary,
    /// Already written into a shared-memory region: only its name, type and shape.
    SharedMemory,
}

/// Appends `response`'s JSON to `out`, each output placed as `placement` says.
pub(crate) fn write(
    out: &mut Vec<u8>,
    response: &InferResponse,
    placement: impl Fn(&OutputTensor) -> Placement,
) -> serde_json::Result<()> {
    out.push(b'{');
    if !response.id.is_empty() {
        out.extend_from_slice(b"\"id\":");
        serde_json::to_writer(&mut *out, &response.id)?;
        out.push(b',');
    }
    out.extend_from_slice(b"\"model_name\":");
    serde_json::to_writer(&mut *out, &response.model_name)?;
    // KServe v2 gives the version as a string.
    out.extend_from_slice(b",\"model_version\":\"");
    serde_json::to_writer(&mut *out, &response.model_version)?;
    out.push(b'"');
    // Parameters a backend set, only when there are some (as Triton writes them).
    if !response.parameters.is_empty() {
        out.extend_from_slice(b",\"parameters\":{");
        for (i, (name, value)) in response.parameters.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, name)?;
            out.push(b':');
            match value {
                ParamValue::Bool(b) => serde_json::to_writer(&mut *out, b)?,
                ParamValue::Int(v) => serde_json::to_writer(&mut *out, v)?,
                ParamValue::Uint(v) => serde_json::to_writer(&mut *out, v)?,
                ParamValue::Double(v) => serde_json::to_writer(&mut *out, v)?,
                ParamValue::String(text) => serde_json::to_writer(&mut *out, text)?,
            }
        }
        out.push(b'}');
    }
    out.extend_from_slice(b",\"outputs\":[");
    for (i, output) in response.outputs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"name\":");
        serde_json::to_writer(&mut *out, &output.name)?;
        // Datatype names are plain ASCII: nothing to escape.
        out.extend_from_slice(b",\"datatype\":\"");
        out.extend_from_slice(output.datatype.as_str().as_bytes());
        out.extend_from_slice(b"\",\"shape\":");
        serde_json::to_writer(&mut *out, &output.shape)?;
        match placement(output) {
            Placement::Json => {
                out.extend_from_slice(b",\"data\":");
                let data = JsonData {
                    datatype: output.datatype,
                    data: &output.data,
                };
                serde_json::to_writer(&mut *out, &data)?;
            }
            Placement::Binary => {
                write!(
                    out,
                    ",\"parameters\":{{\"binary_data_size\":{}}}",
                    output.data.len()
                )
                .map_err(serde_json::Error::io)?;
            }
            Placement::SharedMemory => {}
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok(())
}
