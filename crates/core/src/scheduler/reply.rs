//! Where a job's answer goes. Normally straight to the waiting caller; with
//! `preserve_ordering`, through a shared ticket counter so that callers get their answers
//! in the order their requests arrived, whichever instance finishes first.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::presence::CallerPresence;
use crate::request::InferResponse;

type Sender = oneshot::Sender<Result<InferResponse>>;

/// The reply channel of one job.
#[derive(Debug)]
pub struct Reply {
    sender: Option<Sender>,
    ticket: Option<(Arc<ReplyOrder>, u64)>,
    /// Shared with the awaiting future's guard, for backends that ask while running.
    presence: Option<CallerPresence>,
}

impl Reply {
    /// A reply delivered as soon as it is sent.
    pub fn new(sender: Sender) -> Self {
        Self {
            sender: Some(sender),
            ticket: None,
            presence: None,
        }
    }

    /// A reply whose caller's presence can also be read while the job runs (see
    /// [`CallerPresence`]); the caller holds the presence's guard.
    pub fn watched(sender: Sender, presence: CallerPresence) -> Self {
        Self {
            sender: Some(sender),
            ticket: None,
            presence: Some(presence),
        }
    }

    /// The caller's presence, when watched.
    pub fn presence(&self) -> Option<&CallerPresence> {
        self.presence.as_ref()
    }

    /// Makes this reply wait for every earlier ticket of `order`.
    pub fn order_by(&mut self, order: &Arc<ReplyOrder>) {
        self.ticket = Some((order.clone(), order.issue()));
    }

    /// Whether the caller stopped waiting for the answer (its connection closed, its call
    /// was cancelled): nobody would read it.
    pub fn caller_left(&self) -> bool {
        self.sender.as_ref().is_none_or(|s| s.is_closed())
            || self.presence.as_ref().is_some_and(CallerPresence::left)
    }

    /// Delivers the answer (or queues it until earlier answers are out).
    pub fn send(mut self, result: Result<InferResponse>) {
        self.deliver(result);
    }

    fn deliver(&mut self, result: Result<InferResponse>) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        match self.ticket.take() {
            // The caller may have gone away; nothing to do then.
            None => {
                let _ = sender.send(result);
            }
            Some((order, ticket)) => order.complete(ticket, sender, result),
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        // A job dropped without an answer must not hold back later ordered answers.
        if self.sender.is_some() && self.ticket.is_some() {
            self.deliver(Err(Error::internal(
                "the request was dropped before completion",
            )));
        }
    }
}

/// Ticket counter and the answers waiting for their turn.
#[derive(Debug, Default)]
pub struct ReplyOrder {
    // Short critical sections: issuing a ticket, or filing an answer and flushing.
    state: Mutex<OrderState>,
}

#[derive(Debug, Default)]
struct OrderState {
    issued: u64,
    next: u64,
    waiting: BTreeMap<u64, (Sender, Result<InferResponse>)>,
}

impl ReplyOrder {
    fn issue(&self) -> u64 {
        let mut s = self.state.lock();
        s.issued += 1;
        s.issued - 1
    }

    fn complete(&self, ticket: u64, sender: Sender, result: Result<InferResponse>) {
        let ready = {
            let mut s = self.state.lock();
            s.waiting.insert(ticket, (sender, result));
            let mut ready = Vec::new();
            while let Some(entry) = {
                let next = s.next;
                s.waiting.remove(&next)
            } {
                s.next += 1;
                ready.push(entry);
            }
            ready
        };
        for (sender, result) in ready {
            let _ = sender.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(id: &str) -> Result<InferResponse> {
        Ok(InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: id.into(),
            parameters: vec![],
            outputs: Default::default(),
        })
    }

    #[test]
    fn ordered_replies_wait_for_earlier_tickets() {
        let order = Arc::new(ReplyOrder::default());
        let (tx0, mut rx0) = oneshot::channel();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        let mut r0 = Reply::new(tx0);
        let mut r1 = Reply::new(tx1);
        let mut r2 = Reply::new(tx2);
        r0.order_by(&order);
        r1.order_by(&order);
        r2.order_by(&order);
        r1.send(response("1"));
        assert!(rx1.try_recv().is_err(), "must wait for ticket 0");
        drop(r2);
        r0.send(response("0"));
        assert_eq!(rx0.try_recv().expect("sent").expect("ok").id, "0");
        assert_eq!(rx1.try_recv().expect("sent").expect("ok").id, "1");
        assert!(
            rx2.try_recv().expect("sent").is_err(),
            "dropped reply answers with an error"
        );
    }
}
