//! The shared-memory RPCs (system and CUDA): status, register, unregister.

use nereid_core::shm::{RegionKind, ShmRegistry};
use nereid_core::{Error, Result};
use nereid_proto::inference::*;

/// An empty name means "every region" in status and unregister calls.
fn optional(name: &str) -> Option<&str> {
    (!name.is_empty()).then_some(name)
}

fn require_name(name: &str, kind: RegionKind) -> Result<()> {
    if name.is_empty() {
        return Err(kind.name_required());
    }
    Ok(())
}

/// `SystemSharedMemoryStatus`.
pub fn system_status(
    shm: &ShmRegistry,
    r: &SystemSharedMemoryStatusRequest,
) -> Result<SystemSharedMemoryStatusResponse> {
    let regions = shm.system_status(optional(&r.name))?;
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
pub fn system_register(shm: &ShmRegistry, r: &SystemSharedMemoryRegisterRequest) -> Result<()> {
    shm.client_access()?;
    require_name(&r.name, RegionKind::System)?;
    shm.register_system(&r.name, &r.key, r.offset, r.byte_size)
}

/// `CudaSharedMemoryStatus`.
pub fn cuda_status(
    shm: &ShmRegistry,
    r: &CudaSharedMemoryStatusRequest,
) -> Result<CudaSharedMemoryStatusResponse> {
    let regions = shm.cuda_status(optional(&r.name))?;
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

/// `CudaSharedMemoryRegister`: refused first when clients may not use shared memory.
pub fn cuda_register(shm: &ShmRegistry, r: &CudaSharedMemoryRegisterRequest) -> Result<()> {
    shm.client_access()?;
    require_name(&r.name, RegionKind::Cuda)?;
    let device = u32::try_from(r.device_id)
        .map_err(|_| Error::invalid_arg(format!("invalid CUDA device id {}", r.device_id)))?;
    shm.register_cuda(&r.name, &r.raw_handle, device, r.byte_size)
}

/// `SystemSharedMemoryUnregister` and `CudaSharedMemoryUnregister`.
pub fn unregister(shm: &ShmRegistry, kind: RegionKind, name: &str) -> Result<()> {
    shm.unregister(kind, optional(name))
}
