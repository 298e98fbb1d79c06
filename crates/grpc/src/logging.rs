//! Triton's logging extension over gRPC (`LogSettings`): an empty request reads the log
//! settings, a request naming some changes those and answers with all of them.

use std::collections::HashMap;

use nereid_core::log_settings::{LogSettings, SettingValue};
use nereid_core::{Result, Server};
use nereid_proto::inference::log_settings_request::setting_value::ParameterChoice as Given;
use nereid_proto::inference::log_settings_response::setting_value::ParameterChoice as Reported;
use nereid_proto::inference::log_settings_response::SettingValue as ReportedValue;
use nereid_proto::inference::{LogSettingsRequest, LogSettingsResponse};

/// Applies `request` to the server's log settings and reports them.
pub fn log_settings(server: &Server, request: LogSettingsRequest) -> Result<LogSettingsResponse> {
    let changes: Vec<_> = request
        .settings
        .into_iter()
        .map(|(name, value)| {
            let value = match value.parameter_choice {
                Some(Given::BoolParam(on)) => SettingValue::Bool(on),
                Some(Given::Uint32Param(n)) => SettingValue::Unsigned(n.into()),
                Some(Given::StringParam(text)) => SettingValue::Text(text),
                None => SettingValue::Other("no value"),
            };
            (name, value)
        })
        .collect();
    let settings = if changes.is_empty() {
        server.log_settings()?
    } else {
        server.update_log_settings(&changes)?
    };
    Ok(LogSettingsResponse {
        settings: report(&settings),
    })
}

fn report(settings: &LogSettings) -> HashMap<String, ReportedValue> {
    let value = |choice| ReportedValue {
        parameter_choice: Some(choice),
    };
    HashMap::from([
        (
            "log_file".to_string(),
            value(Reported::StringParam(settings.file.clone())),
        ),
        (
            "log_info".to_string(),
            value(Reported::BoolParam(settings.info)),
        ),
        (
            "log_warning".to_string(),
            value(Reported::BoolParam(settings.warning)),
        ),
        (
            "log_error".to_string(),
            value(Reported::BoolParam(settings.error)),
        ),
        (
            "log_verbose_level".to_string(),
            value(Reported::Uint32Param(settings.verbose_level)),
        ),
        (
            "log_format".to_string(),
            value(Reported::StringParam(settings.format.name().to_string())),
        ),
    ])
}
