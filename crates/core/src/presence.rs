//! Whether the caller of a request still waits for its answer, for backends that ask
//! while the request runs. The frontends' futures awaiting answers hold a [`LeaveGuard`];
//! the scheduler's reply and the batch a backend executes hold the [`CallerPresence`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether the caller of a request still waits for its answer, readable from any thread
/// while the request runs: a hosted backend answers `TRITONBACKEND_RequestIsCancelled`
/// from it, on whichever thread asks. Set by a [`LeaveGuard`] when the future awaiting
/// the answer is dropped before the answer came (the client's connection closed, its
/// call was cancelled or passed its deadline).
#[derive(Debug, Clone, Default)]
pub struct CallerPresence(Arc<AtomicBool>);

impl CallerPresence {
    /// Whether the caller went away.
    pub fn left(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// A guard for the future awaiting the answer.
    pub fn guard(&self) -> LeaveGuard {
        LeaveGuard(Some(self.clone()))
    }
}

/// Held by the future awaiting an answer: dropped before [`LeaveGuard::answered`], it
/// marks the caller as gone.
#[derive(Debug)]
pub struct LeaveGuard(Option<CallerPresence>);

impl LeaveGuard {
    /// The answer arrived: the caller did not leave.
    pub fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for LeaveGuard {
    fn drop(&mut self) {
        if let Some(presence) = self.0.take() {
            presence.0.store(true, Ordering::Release);
        }
    }
}
