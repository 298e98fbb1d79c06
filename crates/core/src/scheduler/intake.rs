//! The sending end of a scheduler's queue, closable once: `stop` drops the sender so the
//! receiving side drains what is queued and ends, and later requests are refused with
//! Triton's "stopping" error.

use parking_lot::RwLock;

use crate::error::Result;

/// A queue sender that `close` drops.
pub struct Intake<S> {
    // `None` once closed. Read on every enqueue, written once, at close.
    sender: RwLock<Option<S>>,
}

impl<S> Intake<S> {
    /// An open intake.
    pub fn new(sender: S) -> Self {
        Self {
            sender: RwLock::new(Some(sender)),
        }
    }

    /// Runs `send` with the sender, or refuses when closed.
    pub fn send_with(&self, send: impl FnOnce(&S) -> Result<()>) -> Result<()> {
        match self.sender.read().as_ref() {
            Some(sender) => send(sender),
            None => Err(super::stopping_error()),
        }
    }

    /// Drops the sender.
    pub fn close(&self) {
        self.sender.write().take();
    }
}
