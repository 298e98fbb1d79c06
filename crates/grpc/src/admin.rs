//! The non-inference RPCs: readiness, metadata, configuration, statistics and the model
//! repository extension. Each is one call on the core facade plus a conversion to the
//! wire message, with Triton's parameter checks (server `src/grpc/grpc_server.cc`).

use nereid_core::repository::{IndexEntry, LoadRequest, FILE_PREFIX};
use nereid_core::server::TensorMetadata;
use nereid_core::stats::{ModelStatsSnapshot, StatDuration};
use nereid_core::{Error, Result, Server};
use nereid_proto::inference::model_metadata_response::TensorMetadata as WireTensorMetadata;
use nereid_proto::inference::model_repository_parameter::ParameterChoice;
use nereid_proto::inference::repository_index_response::ModelIndex;
use nereid_proto::inference::{
    InferBatchStatistics, InferResponseStatistics, InferStatistics, ModelConfigRequest,
    ModelConfigResponse, ModelMetadataRequest, ModelMetadataResponse, ModelReadyRequest,
    ModelReadyResponse, ModelStatistics, ModelStatisticsRequest, ModelStatisticsResponse,
    RepositoryIndexRequest, RepositoryIndexResponse, RepositoryModelLoadRequest,
    RepositoryModelUnloadRequest, ServerMetadataResponse, StatisticDuration,
};

use crate::convert::parse_version;

/// `ModelReady`: false for an unknown model or version (not an error); a malformed
/// version string is an error, as in Triton.
pub fn model_ready(server: &Server, request: &ModelReadyRequest) -> Result<ModelReadyResponse> {
    let version = parse_version(&request.version)?;
    Ok(ModelReadyResponse {
        ready: server.model_ready(&request.name, version),
    })
}

/// `ServerMetadata`: identity and the extensions that really work.
pub fn server_metadata(server: &Server) -> ServerMetadataResponse {
    let identity = server.identity();
    ServerMetadataResponse {
        name: identity.name.clone(),
        version: identity.version.clone(),
        extensions: server.extensions().into_iter().map(String::from).collect(),
    }
}

/// `ModelMetadata`.
pub fn model_metadata(
    server: &Server,
    request: &ModelMetadataRequest,
) -> Result<ModelMetadataResponse> {
    let version = parse_version(&request.version)?;
    let metadata = server.model_metadata(&request.name, version)?;
    let tensors = |list: Vec<TensorMetadata>| {
        list.into_iter()
            .map(|t| WireTensorMetadata {
                name: t.name,
                datatype: t.datatype.as_str().to_string(),
                shape: t.shape,
            })
            .collect()
    };
    Ok(ModelMetadataResponse {
        name: metadata.name,
        versions: metadata.versions,
        platform: metadata.platform,
        inputs: tensors(metadata.inputs),
        outputs: tensors(metadata.outputs),
    })
}

/// `ModelConfig`: the normalized configuration the model was loaded with.
pub fn model_config(server: &Server, request: &ModelConfigRequest) -> Result<ModelConfigResponse> {
    let version = parse_version(&request.version)?;
    let config = server.model_config(&request.name, version)?;
    Ok(ModelConfigResponse {
        config: Some(config.message.clone()),
    })
}

/// `ModelStatistics`: an empty name means every model, an empty version every version.
pub fn model_statistics(
    server: &Server,
    request: &ModelStatisticsRequest,
) -> Result<ModelStatisticsResponse> {
    let version = parse_version(&request.version)?;
    let name = (!request.name.is_empty()).then_some(request.name.as_str());
    let snapshots = server.statistics(name, version)?;
    Ok(ModelStatisticsResponse {
        model_stats: snapshots.into_iter().map(statistics).collect(),
    })
}

fn duration(d: StatDuration) -> Option<StatisticDuration> {
    Some(StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

fn statistics(s: ModelStatsSnapshot) -> ModelStatistics {
    let i = s.inference_stats;
    ModelStatistics {
        name: s.name,
        version: s.version.to_string(),
        last_inference: s.last_inference,
        inference_count: s.inference_count,
        execution_count: s.execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(i.success),
            fail: duration(i.fail),
            queue: duration(i.queue),
            compute_input: duration(i.compute_input),
            compute_infer: duration(i.compute_infer),
            compute_output: duration(i.compute_output),
            cache_hit: duration(i.cache_hit),
            cache_miss: duration(i.cache_miss),
        }),
        batch_stats: s
            .batch_stats
            .into_iter()
            .map(|b| InferBatchStatistics {
                batch_size: b.batch_size,
                compute_input: duration(b.compute_input),
                compute_infer: duration(b.compute_infer),
                compute_output: duration(b.compute_output),
            })
            .collect(),
        memory_usage: Vec::new(),
        response_stats: s
            .response_stats
            .into_iter()
            .map(|(index, r)| {
                let stat = InferResponseStatistics {
                    compute_infer: duration(r.compute_infer),
                    compute_output: duration(r.compute_output),
                    success: duration(r.success),
                    fail: duration(r.fail),
                    empty_response: duration(r.empty_response),
                    cancel: duration(r.cancel),
                };
                (index, stat)
            })
            .collect(),
    }
}

fn no_repository_name(repository_name: &str) -> Result<()> {
    if repository_name.is_empty() {
        Ok(())
    } else {
        Err(Error::unsupported(
            "'repository_name' specification is not supported",
        ))
    }
}

/// `RepositoryIndex`, optionally only ready models.
pub async fn repository_index(
    server: &Server,
    request: &RepositoryIndexRequest,
) -> Result<RepositoryIndexResponse> {
    no_repository_name(&request.repository_name)?;
    let entries = server.repository_index(request.ready).await?;
    Ok(RepositoryIndexResponse {
        models: entries.into_iter().map(index_entry).collect(),
    })
}

fn index_entry(e: IndexEntry) -> ModelIndex {
    ModelIndex {
        name: e.name,
        version: e.version.map(|v| v.to_string()).unwrap_or_default(),
        state: e.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
        reason: e.reason,
    }
}

/// `RepositoryModelLoad`: a `config` string parameter overrides the configuration (JSON);
/// `file:` bytes parameters are the files of an override model directory; anything
/// else is rejected as Triton does.
pub async fn repository_load(server: &Server, request: &RepositoryModelLoadRequest) -> Result<()> {
    no_repository_name(&request.repository_name)?;
    let mut parameters: Vec<_> = request.parameters.iter().collect();
    parameters.sort_by_key(|(key, _)| *key);
    let mut load = LoadRequest::default();
    for (key, parameter) in parameters {
        let choice = &parameter.parameter_choice;
        if key == "config" {
            match choice {
                Some(ParameterChoice::StringParam(json)) => load.config = Some(json.clone()),
                _ => {
                    return Err(Error::invalid_arg(
                        "invalid value type for load parameter 'config', expected string_param.",
                    ))
                }
            }
        } else if key.starts_with(FILE_PREFIX) {
            match choice {
                Some(ParameterChoice::BytesParam(content)) => {
                    load.files.push((key.clone(), content.clone().into()))
                }
                _ => {
                    return Err(Error::invalid_arg(format!(
                        "failed to load '{}', failed to poll from model repository: File parameter '{key}' must have bytes type for its value",
                        request.model_name
                    )))
                }
            }
        } else {
            return Err(Error::invalid_arg(format!(
                "unrecognized load parameter '{key}'."
            )));
        }
    }
    server.load_model(&request.model_name, load).await
}

/// `RepositoryModelUnload`. `unload_dependents` must be a bool, as in Triton; when true,
/// an ensemble's composing models that nothing else needs are unloaded with it.
pub async fn repository_unload(
    server: &Server,
    request: &RepositoryModelUnloadRequest,
) -> Result<()> {
    no_repository_name(&request.repository_name)?;
    let unload_dependents =
        match request.parameters.get("unload_dependents") {
            None => false,
            Some(p) => match p.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => b,
                _ => return Err(Error::invalid_arg(
                    "invalid value type for 'unload_dependents' parameter, expected bool_param.",
                )),
            },
        };
    server
        .unload_model(&request.model_name, unload_dependents)
        .await
}
