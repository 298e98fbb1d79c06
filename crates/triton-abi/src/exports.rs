//! The table of every exported C function. A Rust executable drops `#[no_mangle]`
//! functions nothing references, even when the linker is told to export them; the nereid
//! binary passes this table to `std::hint::black_box` once so cache plugins it loads find
//! `TRITONCACHE_*` and `TRITONSERVER_*` in it. Add every new exported function here.

use crate::*;

/// Every `TRITONSERVER_*` and `TRITONCACHE_*` function this library exports.
pub fn exported_functions() -> Vec<*const ()> {
    vec![
        buffer_attributes::TRITONSERVER_BufferAttributesNew as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesDelete as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetMemoryTypeId as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetMemoryType as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetCudaIpcHandle as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesSetByteSize as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesMemoryTypeId as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesMemoryType as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesCudaIpcHandle as *const (),
        buffer_attributes::TRITONSERVER_BufferAttributesByteSize as *const (),
        cache::allocator::TRITONCACHE_Copy as *const (),
        cache::entry::TRITONCACHE_ApiVersion as *const (),
        cache::entry::TRITONCACHE_CacheEntryBufferCount as *const (),
        cache::entry::TRITONCACHE_CacheEntryAddBuffer as *const (),
        cache::entry::TRITONCACHE_CacheEntryGetBuffer as *const (),
        cache::entry::TRITONCACHE_CacheEntrySetBuffer as *const (),
        error::TRITONSERVER_ErrorNew as *const (),
        error::TRITONSERVER_ErrorDelete as *const (),
        error::TRITONSERVER_ErrorCode as *const (),
        error::TRITONSERVER_ErrorCodeString as *const (),
        error::TRITONSERVER_ErrorMessage as *const (),
        log::TRITONSERVER_LogIsEnabled as *const (),
        log::TRITONSERVER_LogMessage as *const (),
        metrics::TRITONSERVER_MetricFamilyNew as *const (),
        metrics::TRITONSERVER_MetricFamilyDelete as *const (),
        metrics::TRITONSERVER_MetricNew as *const (),
        metrics::TRITONSERVER_MetricDelete as *const (),
        metrics::TRITONSERVER_MetricValue as *const (),
        metrics::TRITONSERVER_MetricIncrement as *const (),
        metrics::TRITONSERVER_MetricSet as *const (),
        metrics::TRITONSERVER_GetMetricKind as *const (),
        types::TRITONSERVER_ApiVersion as *const (),
        types::TRITONSERVER_DataTypeString as *const (),
        types::TRITONSERVER_StringToDataType as *const (),
        types::TRITONSERVER_DataTypeByteSize as *const (),
        types::TRITONSERVER_MemoryTypeString as *const (),
    ]
}

#[cfg(test)]
mod tests {
    /// Every `#[no_mangle]` function in the crate's sources is in the table.
    #[test]
    fn the_table_lists_every_exported_function() {
        fn count(dir: &std::path::Path) -> usize {
            let entries = std::fs::read_dir(dir).expect("source directory");
            entries
                .map(|entry| entry.expect("directory entry").path())
                .map(|path| match path.is_dir() {
                    true => count(&path),
                    false => std::fs::read_to_string(&path)
                        .expect("source file")
                        .lines()
                        .filter(|line| line.trim() == "#[no_mangle]")
                        .count(),
                })
                .sum()
        }
        let sources = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        assert_eq!(super::exported_functions().len(), count(&sources));
    }
}
