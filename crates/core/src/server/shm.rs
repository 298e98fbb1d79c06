//! The facade's shared-memory extension calls (system and CUDA regions): register,
//! unregister and status, with the client-access check first as Triton orders it. Both
//! frontends make these calls; tensors in regions are still resolved at the edge through
//! [`Server::shm`].

use serde_json::{json, Value};

use super::Server;
use crate::error::{Error, Result};
use crate::shm::{CudaRegionStatus, RegionKind, RegionStatus};

impl Server {
    /// Fails unless clients may use shared memory (`--allow-client-shm`); the frontends
    /// call it before reading a register request's body, so a refused client learns that
    /// first whatever it sent.
    pub fn shm_client_access(&self) -> Result<()> {
        self.shm.client_access()
    }

    /// Registers the system region `name` over `key` (a POSIX shared-memory object).
    pub fn shm_register_system(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        self.require_region_name(name, RegionKind::System)?;
        self.shm.register_system(name, key, offset, byte_size)
    }

    /// Registers the CUDA region `name` from a `cudaIpcMemHandle_t` on `device` (wide
    /// as gRPC carries it; an id past `u32` is refused after the name check).
    pub fn shm_register_cuda(
        &self,
        name: &str,
        raw_handle: &[u8],
        device: i64,
        byte_size: u64,
    ) -> Result<()> {
        self.require_region_name(name, RegionKind::Cuda)?;
        let device = u32::try_from(device)
            .map_err(|_| Error::invalid_arg(format!("invalid CUDA device id {device}")))?;
        self.shm.register_cuda(name, raw_handle, device, byte_size)
    }

    /// Unregisters region `name` of `kind`, or every region of `kind` for `None`.
    pub fn shm_unregister(&self, kind: RegionKind, name: Option<&str>) -> Result<()> {
        self.shm.unregister(kind, name)
    }

    /// The system regions (one, or all for `None`).
    pub fn shm_system_status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        self.shm.system_status(name)
    }

    /// The CUDA regions (one, or all for `None`).
    pub fn shm_cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaRegionStatus>> {
        self.shm.cuda_status(name)
    }

    /// The regions of `kind` as the HTTP status endpoints answer them: a JSON array.
    pub fn shm_status_json(&self, kind: RegionKind, name: Option<&str>) -> Result<Value> {
        let regions: Vec<Value> = match kind {
            RegionKind::System => self
                .shm_system_status(name)?
                .into_iter()
                .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
                .collect(),
            RegionKind::Cuda => self
                .shm_cuda_status(name)?
                .into_iter()
                .map(|r| json!({"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}))
                .collect(),
        };
        Ok(Value::Array(regions))
    }

    /// Access first, then the name: a register call without a region name fails with
    /// Triton's "name required" error only for a client that may use shared memory.
    fn require_region_name(&self, name: &str, kind: RegionKind) -> Result<()> {
        self.shm.client_access()?;
        if name.is_empty() {
            return Err(kind.name_required());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::shm::{RegionKind, ShmLimits};
    use crate::testing::{self, TestBackend};

    #[tokio::test]
    async fn access_is_checked_before_the_name() {
        let repo = tempfile::tempdir().expect("temp dir");
        let server = testing::server(repo.path(), &TestBackend::identity()).await;
        let refused = server.shm_client_access().expect_err("off by default");
        let unnamed = server
            .shm_register_system("", "/key", 0, 8)
            .expect_err("refused");
        assert_eq!(unnamed, refused);
        let server = std::sync::Arc::into_inner(server)
            .expect("only owner")
            .with_shm_limits(ShmLimits {
                allow_clients: true,
                ..ShmLimits::default()
            });
        let unnamed = server
            .shm_register_cuda("", &[], 0, 8)
            .expect_err("no name");
        assert_eq!(unnamed, RegionKind::Cuda.name_required());
        assert_eq!(
            server
                .shm_status_json(RegionKind::System, None)
                .expect("status"),
            json!([])
        );
    }
}
