//! The three shared-memory parameters of a tensor, checked the same way for HTTP and gRPC
//! (Triton's two frontends word these mistakes differently; ours say the same thing).

use crate::error::{Error, Result};

/// The raw parameter values a frontend found on a tensor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShmParams {
    /// `shared_memory_region`.
    pub region: Option<String>,
    /// `shared_memory_offset`.
    pub offset: Option<u64>,
    /// `shared_memory_byte_size`.
    pub byte_size: Option<u64>,
}

/// A tensor's validated place in a registered region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmRef {
    /// Region name.
    pub region: String,
    /// Offset in the region (on top of its registered offset).
    pub offset: u64,
    /// Bytes.
    pub byte_size: u64,
}

impl ShmParams {
    /// Whether any shared-memory parameter is present.
    pub fn any(&self) -> bool {
        self.region.is_some() || self.offset.is_some() || self.byte_size.is_some()
    }

    /// `None` when the tensor does not use shared memory; an error when the parameters are
    /// incomplete.
    pub fn resolve(self, tensor: &str) -> Result<Option<ShmRef>> {
        match (self.region, self.byte_size) {
            (None, None) if self.offset.is_none() => Ok(None),
            (None, _) => Err(Error::invalid_arg(format!(
                "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
            ))),
            (Some(_), None) => Err(Error::invalid_arg(format!(
                "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '{tensor}'"
            ))),
            (Some(region), Some(byte_size)) => Ok(Some(ShmRef {
                region,
                offset: self.offset.unwrap_or(0),
                byte_size,
            })),
        }
    }
}
