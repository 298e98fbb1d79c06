//! The shared-memory RPCs (system and CUDA): status, register, unregister.

use nereid_core::shm::{check_handle, RegionKind};
use nereid_core::{Result, Server};
use nereid_proto::inference::*;

/// An empty name means "every region" in status and unregister calls.
fn optional(name: &str) -> Option<&str> {
    (!name.is_empty()).then_some(name)
}

/// `SystemSharedMemoryStatus`.
pub fn system_status(
    server: &Server,
    r: &SystemSharedMemoryStatusRequest,
) -> Result<SystemSharedMemoryStatusResponse> {
    let regions = server.shm_system_status(optional(&r.name))?;
    let regions = regions
        .into_iter()
        .map(|r| {
            let status = system_shared_memory_status_response::RegionStatus {
                name: r.name.clone(),
                key: r.key,
                offset: r.offset,
                byte_size: r.byte_size,
            };
            (r.name, status)
        })
        .collect();
    Ok(SystemSharedMemoryStatusResponse { regions })
}

/// `SystemSharedMemoryRegister`: refused first when clients may not use shared memory.
pub fn system_register(server: &Server, r: &SystemSharedMemoryRegisterRequest) -> Result<()> {
    server.shm_register_system(&r.name, &r.key, r.offset, r.byte_size)
}

/// `CudaSharedMemoryStatus`.
pub fn cuda_status(
    server: &Server,
    r: &CudaSharedMemoryStatusRequest,
) -> Result<CudaSharedMemoryStatusResponse> {
    let regions = server.shm_cuda_status(optional(&r.name))?;
    let regions = regions
        .into_iter()
        .map(|r| {
            let status = cuda_shared_memory_status_response::RegionStatus {
                name: r.name.clone(),
                device_id: u64::from(r.device_id),
                byte_size: r.byte_size,
            };
            (r.name, status)
        })
        .collect();
    Ok(CudaSharedMemoryStatusResponse { regions })
}

/// `CudaSharedMemoryRegister`: refused first when clients may not use shared memory. A
/// `raw_handle` that is not a handle is refused before the name is looked at, as Triton's
/// gRPC handler opens the handle first ("invalid args" even without a name; L0_grpc's
/// aio test sends neither).
pub fn cuda_register(server: &Server, r: &CudaSharedMemoryRegisterRequest) -> Result<()> {
    server.shm_client_access()?;
    check_handle(&r.name, &r.raw_handle)?;
    server.shm_register_cuda(&r.name, &r.raw_handle, r.device_id, r.byte_size)
}

/// `SystemSharedMemoryUnregister` and `CudaSharedMemoryUnregister`.
pub fn unregister(server: &Server, kind: RegionKind, name: &str) -> Result<()> {
    server.shm_unregister(kind, optional(name))
}
