//! The frontends' answer to a backend asking where an output will go (see
//! [`crate::output_query`]): as Triton's HTTP and gRPC frontends answer, from the output's
//! shared-memory region.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use super::OutputTarget;
use crate::error::Result;
use crate::output_query::{OutputQuery, Placement};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_query::MemoryKind;

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
