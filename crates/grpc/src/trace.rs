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
    Ok(TraceSettingResponse {
        settings: view
            .entries()
            .into_iter()
            .map(|(name, value)| (name.to_string(), ResponseValue { value }))
            .collect(),
    })
}
