//! Where a request's caller will take an output, for a backend that asks before it
//! allocates (Triton's response-allocator query, which backends reach through
//! `TRITONBACKEND_RequestOutputBufferProperties`). The in-process API forwards the
//! caller's query function; HTTP and gRPC answer from the output's shared-memory region,
//! as Triton's frontends do. A request nobody answers for has no query: the backend is
//! told the properties are not available.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::error::Result;
use crate::shm::OutputTarget;

/// The kinds of memory Triton's C API names (`TRITONSERVER_MemoryType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary host memory.
    Cpu,
    /// Page-locked host memory.
    CpuPinned,
    /// Device memory.
    Gpu,
}

/// Where an output buffer lives: the memory kind and its device (0 for host memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The kind of memory.
    pub kind: MemoryKind,
    /// The device id.
    pub id: i64,
}

impl Placement {
    /// Host memory, where Nereid's frontends write the outputs they encode.
    pub const CPU: Self = Self {
        kind: MemoryKind::Cpu,
        id: 0,
    };
}

/// The caller's answer to "where will output `name` go?".
pub trait OutputQuery: Send + Sync + fmt::Debug {
    /// The placement for output `name` (`None`: any output of the request) of
    /// `byte_size` bytes when the backend says, given the backend's own `preferred`
    /// placement.
    fn query(
        &self,
        name: Option<&str>,
        byte_size: Option<usize>,
        preferred: Placement,
    ) -> Result<Placement>;
}

/// The answer of HTTP and gRPC (Triton's frontends' query): an output requested into a
/// shared-memory region goes to that region's memory, unless the backend's size is more
/// than the region's window takes (then host memory, and the write fails later with the
/// size error); every other output is encoded from host memory.
#[derive(Debug)]
struct FrontendQuery {
    /// Output name → its region's placement and window size.
    regions: HashMap<String, (Placement, usize)>,
}

impl OutputQuery for FrontendQuery {
    fn query(
        &self,
        name: Option<&str>,
        byte_size: Option<usize>,
        _preferred: Placement,
    ) -> Result<Placement> {
        let region = name.and_then(|n| self.regions.get(n));
        Ok(match region {
            Some((_, window)) if byte_size.is_some_and(|size| size > *window) => Placement::CPU,
            Some((placement, _)) => *placement,
            None => Placement::CPU,
        })
    }
}

/// The query HTTP and gRPC attach to a request whose outputs go to `targets` (output
/// name → its shared-memory window). Without shared-memory outputs every request shares
/// one answer, so the common case allocates nothing.
pub fn frontend_query(targets: &HashMap<String, OutputTarget>) -> Arc<dyn OutputQuery> {
    static HOST_ONLY: LazyLock<Arc<dyn OutputQuery>> = LazyLock::new(|| {
        Arc::new(FrontendQuery {
            regions: HashMap::new(),
        })
    });
    if targets.is_empty() {
        return HOST_ONLY.clone();
    }
    Arc::new(FrontendQuery {
        regions: targets
            .iter()
            .map(|(name, target)| (name.clone(), (target.placement(), target.window_size())))
            .collect(),
    })
}

/// An ensemble step's answer: any placement will do, so the backend's preference stands
/// (Triton's ensemble takes whatever its steps allocate and moves it on).
#[derive(Debug)]
struct AnyPlacement;

impl OutputQuery for AnyPlacement {
    fn query(&self, _: Option<&str>, _: Option<usize>, preferred: Placement) -> Result<Placement> {
        Ok(preferred)
    }
}

/// The query an ensemble attaches to each of its steps' requests (shared, allocates
/// nothing).
pub fn any_placement() -> Arc<dyn OutputQuery> {
    static ANY: LazyLock<Arc<dyn OutputQuery>> = LazyLock::new(|| Arc::new(AnyPlacement));
    ANY.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontends_answer_from_the_region_when_it_fits_else_host_memory() {
        let gpu = Placement {
            kind: MemoryKind::Gpu,
            id: 3,
        };
        let query = FrontendQuery {
            regions: HashMap::from([("OUT".to_string(), (gpu, 4))]),
        };
        let pinned = Placement {
            kind: MemoryKind::CpuPinned,
            id: 1,
        };
        assert_eq!(query.query(Some("OUT"), None, pinned).ok(), Some(gpu));
        assert_eq!(query.query(Some("OUT"), Some(4), pinned).ok(), Some(gpu));
        assert_eq!(
            query.query(Some("OUT"), Some(5), pinned).ok(),
            Some(Placement::CPU)
        );
        assert_eq!(
            query.query(Some("OTHER"), None, pinned).ok(),
            Some(Placement::CPU)
        );
        assert_eq!(
            query.query(None, Some(1), pinned).ok(),
            Some(Placement::CPU)
        );
    }
}
