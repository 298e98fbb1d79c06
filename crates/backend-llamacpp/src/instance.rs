//! A model instance: reads each request, tokenizes its prompt and hands it to the
//! instance's engine. Execution returns at once, so the scheduler keeps feeding the
//! engine while it generates; the engine answers each request on its own stream.

use std::sync::Arc;
use std::time::Instant;

use nereid_core::backend::{ComputeTiming, InstanceBackend, Outcome, Streamed};
use nereid_core::batch::Batch;
use nereid_core::response_stream::ResponseSender;
use nereid_core::Error;

use crate::engine::{Engine, Job};
use crate::model::Llm;
use crate::request::Generation;

/// One instance: its engine and the model it tokenizes for.
pub struct LlamaCppInstance {
    llm: Arc<Llm>,
    engine: Engine,
}

impl LlamaCppInstance {
    /// An instance whose engine runs `llm`.
    pub fn new(llm: Arc<Llm>, engine: Engine) -> Self {
        Self { llm, engine }
    }

    fn job(&self, batch: &Batch<'_>, index: usize, sender: ResponseSender) {
        let arrived = Instant::now();
        let request = batch.requests()[index];
        let prepared = Generation::read(request).and_then(|generation| {
            let prompt = self.llm.tokenize(&generation.prompt)?;
            Ok((generation, prompt))
        });
        match prepared {
            Ok((generation, prompt)) => self.engine.submit(Job {
                generation,
                prompt,
                sender,
                batched: batch.spec().max_batch_size > 0,
                arrived,
            }),
            Err(e) => {
                sender.send(Err(e), true);
            }
        }
    }
}

impl InstanceBackend for LlamaCppInstance {
    fn execute(&mut self, batch: &Batch<'_>, _timing: &mut ComputeTiming) -> Vec<Outcome> {
        let message = format!(
            "model '{}' is served by the llamacpp backend, which needs the decoupled transaction policy (model_transaction_policy {{ decoupled: true }})",
            batch.spec().name
        );
        (0..batch.len())
            .map(|_| Outcome::from(Err(Error::invalid_arg(message.clone()))))
            .collect()
    }

    fn execute_decoupled(
        &mut self,
        batch: &Batch<'_>,
        senders: Vec<ResponseSender>,
        _timing: &mut ComputeTiming,
    ) -> Vec<Streamed> {
        senders
            .into_iter()
            .enumerate()
            .map(|(index, sender)| {
                self.job(batch, index, sender);
                Streamed::Released
            })
            .collect()
    }
}
