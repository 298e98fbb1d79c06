//! Where a request's caller will take an output, for a backend that asks before it
//! allocates (Triton's response-allocator query, which backends reach through
//! `TRITONBACKEND_RequestOutputBufferProperties`). The in-process API forwards the
//! caller's query function; HTTP and gRPC answer from the output's shared-memory region,
//! as Triton's frontends do (`crate::shm::frontend_query`). A request nobody answers for
//! has no query: the backend is told the properties are not available.

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

    /// The caller's own memory where output `name` of `byte_size` bytes may be written in
    /// place, as Triton's frontends hand a backend the output's shared-memory region as
    /// its buffer; `None` (the default): the output goes to a buffer of the server's.
    fn lend(&self, _name: &str, _byte_size: usize) -> Option<OutputTarget> {
        None
    }

    /// Whether [`Self::lend`] may lend anything, so a model that must not have its
    /// outputs written in place wraps only the queries that would ([`without_lending`]).
    fn lends(&self) -> bool {
        false
    }
}

/// `query` answering as before but lending nothing: for a model whose outputs must be
/// the server's own bytes (the response cache keeps them after the client has its
/// region back).
pub fn without_lending(query: Arc<dyn OutputQuery>) -> Arc<dyn OutputQuery> {
    if query.lends() {
        Arc::new(Unlent(query))
    } else {
        query
    }
}

/// See [`without_lending`].
#[derive(Debug)]
struct Unlent(Arc<dyn OutputQuery>);

impl OutputQuery for Unlent {
    fn query(
        &self,
        name: Option<&str>,
        byte_size: Option<usize>,
        preferred: Placement,
    ) -> Result<Placement> {
        self.0.query(name, byte_size, preferred)
    }
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
