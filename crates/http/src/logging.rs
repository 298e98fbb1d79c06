//! Triton's logging extension over HTTP: `GET /v2/logging` reads the log settings,
//! `POST /v2/logging` changes the ones its JSON object names and answers with all of them.

use axum::extract::State;
use axum::Json;
use bytes::Bytes;
use nereid_core::log_settings::{LogSettings, SettingValue};
use serde_json::{json, Map, Value};

use crate::admin::optional_body;
use crate::error::ApiResult;
use crate::AppState;

pub(crate) async fn get_settings(State(s): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(Json(settings_json(&s.server.log_settings()?)))
}

pub(crate) async fn update_settings(
    State(s): State<AppState>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let request: Map<String, Value> = optional_body(&body)?;
    // A null leaves its setting alone, as in Triton.
    let changes: Vec<_> = request
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| (name, setting_value(value)))
        .collect();
    Ok(Json(settings_json(
        &s.server.update_log_settings(&changes)?,
    )))
}

fn setting_value(value: Value) -> SettingValue {
    match value {
        Value::Bool(on) => SettingValue::Bool(on),
        Value::Number(n) => match n.as_u64() {
            Some(n) => SettingValue::Unsigned(n),
            None if n.is_i64() => SettingValue::Other("a negative number"),
            None => SettingValue::Other("a fractional number"),
        },
        Value::String(text) => SettingValue::Text(text),
        Value::Array(_) => SettingValue::Other("an array"),
        Value::Object(_) => SettingValue::Other("an object"),
        Value::Null => SettingValue::Other("null"),
    }
}

fn settings_json(settings: &LogSettings) -> Value {
    json!({
        "log_file": settings.file,
        "log_info": settings.info,
        "log_warning": settings.warning,
        "log_error": settings.error,
        "log_verbose_level": settings.verbose_level,
        "log_format": settings.format.name(),
    })
}
