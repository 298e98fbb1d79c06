//! The table of every exported C function. A Rust executable drops `#[no_mangle]`
//! functions nothing references, even when the linker is told to export them; the nereid
//! binary passes this table to `std::hint::black_box` once so cache plugins it loads find
//! `TRITONCACHE_*` and `TRITONSERVER_*` in it. Add every new exported function here.

use crate::*;

/// Every `TRITONSERVER_*` and `TRITONCACHE_*` function this library exports.
pub fn exported_functions() -> Vec<*const ()> {
    vec![
        buffer_attributes::TRITONSERVER_BufferAttributesByteSize as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesCudaIpcHandle as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesDelete as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesMemoryType as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesMemoryTypeId as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesNew as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetByteSize as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetCudaIpcHandle as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetMemoryType as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetMemoryTypeId as *const (),
        cache::allocator::TRITONCACHE_Copy as *const (),
        cache::entry::TRITONCACHE_ApiVersion as *const (),
        cache::entry::TRITONCACHE_CacheEntryAddBuffer as *const (),
        cache::entry::TRITONCACHE_CacheEntryBufferCount as *const (),
        cache::entry::TRITONCACHE_CacheEntryGetBuffer as *const (),
        cache::entry::TRITONCACHE_CacheEntrySetBuffer as *const (),
        error::TRITONSERVER_ErrorCode as *const (),
        error::TRITONSERVER_ErrorCodeString as *const (),
        error::TRITONSERVER_ErrorDelete as *const (),
        error::TRITONSERVER_ErrorMessage as *const (),
        error::TRITONSERVER_ErrorNew as *const (),
        inprocess::allocator::TRITONSERVER_ResponseAllocatorDelete as *const (),
        inprocess::allocator::TRITONSERVER_ResponseAllocatorNew as *const (),
        inprocess::allocator::TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction
            as *const (),
        inprocess::allocator::TRITONSERVER_ResponseAllocatorSetQueryFunction as *const (),
        inprocess::infer::TRITONSERVER_ServerInferAsync as *const (),
        inprocess::message::TRITONSERVER_MessageDelete as *const (),
        inprocess::message::TRITONSERVER_MessageNewFromSerializedJson as *const (),
        inprocess::message::TRITONSERVER_MessageSerializeToJson as *const (),
        inprocess::metrics::TRITONSERVER_MetricsDelete as *const (),
        inprocess::metrics::TRITONSERVER_MetricsFormatted as *const (),
        inprocess::metrics::TRITONSERVER_ServerMetrics as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsAddRateLimiterResource as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsDelete as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsNew as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetBackendConfig as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetBackendDirectory as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetBufferManagerThreadCount as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetCacheConfig as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetCacheDirectory as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetCpuMetrics as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetEnablePeerAccess as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetExitOnError as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetExitTimeout as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetGpuMetrics as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetHostPolicy as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogError as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogFile as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogFormat as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogInfo as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogVerbose as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetLogWarn as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetMetrics as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetMetricsConfig as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetMetricsInterval as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelConfigName as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelControlMode as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelLoadRetryCount as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelLoadThreadCount as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelNamespacing as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetModelRepositoryPath as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetRateLimiterMode as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetRepoAgentDirectory as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetResponseCacheByteSize as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetServerId as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetStartupModel as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetStrictModelConfig as *const (),
        inprocess::options::TRITONSERVER_ServerOptionsSetStrictReadiness as *const (),
        inprocess::parameter::TRITONSERVER_ParameterBytesNew as *const (),
        inprocess::parameter::TRITONSERVER_ParameterDelete as *const (),
        inprocess::parameter::TRITONSERVER_ParameterNew as *const (),
        inprocess::parameter::TRITONSERVER_ParameterTypeString as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestCancel as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestCorrelationId as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestCorrelationIdString as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestDelete as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestFlags as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestId as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestIsCancelled as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestNew as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestPriority as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestPriorityUInt64 as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetBoolParameter as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetCorrelationId as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetCorrelationIdString as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetDoubleParameter as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetFlags as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetId as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetIntParameter as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetPriority as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetPriorityUInt64 as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetReleaseCallback as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetResponseCallback as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetStringParameter as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestSetTimeoutMicroseconds as *const (),
        inprocess::request::TRITONSERVER_InferenceRequestTimeoutMicroseconds as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseDelete as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseError as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseId as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseModel as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseOutput as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseOutputClassificationLabel as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseOutputCount as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseParameter as *const (),
        inprocess::response::TRITONSERVER_InferenceResponseParameterCount as *const (),
        inprocess::server::TRITONSERVER_ServerDelete as *const (),
        inprocess::server::TRITONSERVER_ServerIsLive as *const (),
        inprocess::server::TRITONSERVER_ServerIsReady as *const (),
        inprocess::server::TRITONSERVER_ServerLoadModel as *const (),
        inprocess::server::TRITONSERVER_ServerLoadModelWithParameters as *const (),
        inprocess::server::TRITONSERVER_ServerMetadata as *const (),
        inprocess::server::TRITONSERVER_ServerModelBatchProperties as *const (),
        inprocess::server::TRITONSERVER_ServerModelConfig as *const (),
        inprocess::server::TRITONSERVER_ServerModelIndex as *const (),
        inprocess::server::TRITONSERVER_ServerModelIsReady as *const (),
        inprocess::server::TRITONSERVER_ServerModelMetadata as *const (),
        inprocess::server::TRITONSERVER_ServerModelStatistics as *const (),
        inprocess::server::TRITONSERVER_ServerModelTransactionProperties as *const (),
        inprocess::server::TRITONSERVER_ServerNew as *const (),
        inprocess::server::TRITONSERVER_ServerPollModelRepository as *const (),
        inprocess::server::TRITONSERVER_ServerRegisterModelRepository as *const (),
        inprocess::server::TRITONSERVER_ServerSetExitTimeout as *const (),
        inprocess::server::TRITONSERVER_ServerStop as *const (),
        inprocess::server::TRITONSERVER_ServerUnloadModel as *const (),
        inprocess::server::TRITONSERVER_ServerUnloadModelAndDependents as *const (),
        inprocess::server::TRITONSERVER_ServerUnregisterModelRepository as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAddInput as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAddRawInput as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAddRequestedOutput as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAppendInputData as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes
            as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestRemoveAllInputData as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestRemoveAllInputs as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestRemoveInput as *const (),
        inprocess::tensors::TRITONSERVER_InferenceRequestRemoveRequestedOutput as *const (),
        inprocess::unsupported::TRITONSERVER_GetMetricFamilyKind as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceActivityString as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceContext as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceDelete as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceId as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceLevelString as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceModelName as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceModelVersion as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceNew as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceParentId as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceReportActivity as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceRequestId as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceSetContext as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceSpawnChildTrace as *const (),
        inprocess::unsupported::TRITONSERVER_InferenceTraceTensorNew as *const (),
        inprocess::unsupported::TRITONSERVER_MetricArgsDelete as *const (),
        inprocess::unsupported::TRITONSERVER_MetricArgsNew as *const (),
        inprocess::unsupported::TRITONSERVER_MetricArgsSetHistogram as *const (),
        inprocess::unsupported::TRITONSERVER_MetricNewWithArgs as *const (),
        inprocess::unsupported::TRITONSERVER_MetricObserve as *const (),
        log::TRITONSERVER_LogIsEnabled as *const (),
        log::TRITONSERVER_LogMessage as *const (),
        metrics::TRITONSERVER_GetMetricKind as *const (),
        metrics::TRITONSERVER_MetricDelete as *const (),
        metrics::TRITONSERVER_MetricFamilyDelete as *const (),
        metrics::TRITONSERVER_MetricFamilyNew as *const (),
        metrics::TRITONSERVER_MetricIncrement as *const (),
        metrics::TRITONSERVER_MetricNew as *const (),
        metrics::TRITONSERVER_MetricSet as *const (),
        metrics::TRITONSERVER_MetricValue as *const (),
        types::TRITONSERVER_ApiVersion as *const (),
        types::TRITONSERVER_DataTypeByteSize as *const (),
        types::TRITONSERVER_DataTypeString as *const (),
        types::TRITONSERVER_InstanceGroupKindString as *const (),
        types::TRITONSERVER_MemoryTypeString as *const (),
        types::TRITONSERVER_StringToDataType as *const (),
    ]
}

#[cfg(test)]
mod tests {
    /// Every exported function in the crate's sources is in the table: each
    /// `extern "C" fn TRITON...` plus each entry of an `unsupported_fns!` list (written as
    /// `    TRITON...(` at the start of a line).
    #[test]
    fn the_table_lists_every_exported_function() {
        fn names(dir: &std::path::Path, found: &mut std::collections::BTreeSet<String>) {
            let entries = std::fs::read_dir(dir).expect("source directory");
            for path in entries.map(|entry| entry.expect("directory entry").path()) {
                if path.is_dir() {
                    names(&path, found);
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("source file");
                for line in text.lines() {
                    let name = match line.split_once("extern \"C\" fn ") {
                        Some((_, rest)) => rest,
                        None if line.starts_with("    TRITON") => line.trim_start(),
                        None => continue,
                    };
                    let Some((name, _)) = name.split_once('(') else {
                        continue;
                    };
                    let identifier = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if name.starts_with("TRITON") && identifier {
                        found.insert(name.to_string());
                    }
                }
            }
        }
        let mut found = std::collections::BTreeSet::new();
        names(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert_eq!(super::exported_functions().len(), found.len(), "{found:?}");
    }
}
