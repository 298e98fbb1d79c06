//! The trace extension's `TraceSetting` RPC: an empty `model_name` is the global setting;
//! an empty value list clears a setting, as Triton.

use nereid_core::trace::SettingValue;
use nereid_core::Server;
use nereid_proto::inference::trace_setting_response::SettingValue as ResponseValue;
use nereid_proto::inference::{TraceSettingRequest, TraceSettingResponse};

/// Applies the request's settings, if any, and answers the settings now in force.
pub fn setting(
    server: &Server,
    request: TraceSettingRequest,
) -> nereid_core::Result<TraceSettingResponse> {
    let model = (!request.model_name.is_empty()).then_some(request.model_name.as_str());
    let update: Vec<(String, SettingValue)> = request
        .settings
        .into_iter()
        .map(|(name, value)| {
            let mut values = value.value;
            let value = match values.len() {
                0 => SettingValue::Clear,
                1 if name != "trace_level" => SettingValue::Scalar(values.remove(0)),
                _ => SettingValue::List(values),
            };
            (name, value)
        })
        .collect();
    let update = (!update.is_empty()).then_some(update.as_slice());
    let view = server.trace_settings(model, update)?;
    let mut settings: std::collections::HashMap<String, ResponseValue> = view
        .entries()
        .into_iter()
        .map(|(name, value)| (name.to_string(), ResponseValue { value }))
        .collect();
    // The mode's own settings; one given twice lists both values, as in Triton.
    for (name, value) in view.mode_entries() {
        settings
            .entry(name.to_string())
            .or_default()
            .value
            .push(value.to_string());
    }
    Ok(TraceSettingResponse { settings })
}

/// A request's metadata value as text, for trace-context propagation (`None` if absent
/// or not ASCII).
pub(crate) fn metadata_text(metadata: &tonic::metadata::MetadataMap, name: &str) -> Option<String> {
    metadata.get(name)?.to_str().ok().map(str::to_string)
}
