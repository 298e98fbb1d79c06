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
/// size error); every other output is encoded from host memory. The region is lent to
/// the backend as the output's buffer where it fits.
#[derive(Debug)]
struct FrontendQuery {
    /// Output name → its window of a region.
    targets: HashMap<String, OutputTarget>,
}

impl OutputQuery for FrontendQuery {
    fn query(
        &self,
        name: Option<&str>,
        byte_size: Option<usize>,
        _preferred: Placement,
    ) -> Result<Placement> {
        let target = name.and_then(|n| self.targets.get(n));
        Ok(match target {
            Some(t) if byte_size.is_some_and(|size| size > t.window_size()) => Placement::CPU,
            Some(t) => t.placement(),
            None => Placement::CPU,
        })
    }

    fn lend(&self, name: &str, byte_size: usize) -> Option<OutputTarget> {
        self.targets
            .get(name)
            .filter(|t| byte_size <= t.window_size())
            .cloned()
    }

    fn lends(&self) -> bool {
        !self.targets.is_empty()
    }
}

/// The query HTTP and gRPC attach to a request whose outputs go to `targets` (output
/// name → its shared-memory window). Without shared-memory outputs every request shares
/// one answer, so the common case allocates nothing.
pub fn frontend_query(targets: &HashMap<String, OutputTarget>) -> Arc<dyn OutputQuery> {
    static HOST_ONLY: LazyLock<Arc<dyn OutputQuery>> = LazyLock::new(|| {
        Arc::new(FrontendQuery {
            targets: HashMap::new(),
        })
    });
    if targets.is_empty() {
        return HOST_ONLY.clone();
    }
    Arc::new(FrontendQuery {
        targets: targets.clone(),
    })
}
