//! The I/O runtime every port's connections run on, in one place so that the server and
//! the benchmark floors (`hyper_floor`, `grpc_floor`) run the very same one.

use tokio::runtime::{Builder, Runtime};

/// I/O threads when nothing asks for a number: half the cores (at least one). A
/// request's protocol work is short, and on a machine whose other cores are busy (model
/// instances, a load generator) each extra network thread mostly adds work stealing.
pub fn default_io_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).max(1)
}

/// A multi-threaded runtime of `threads` workers named `nereid-io`, with I/O and timers.
pub fn io_runtime(threads: usize) -> std::io::Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("nereid-io")
        .build()
}
