//! The engine thread's loop: admit, drop the cancelled, build one batch, decode it,
//! sample. It owns the context, the batch and every sequence; nothing here is shared.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use nereid_core::{Error, Result};

use super::sampler;
use super::sequence::{Job, Sequence};
use crate::metrics::EngineMetrics;
use crate::model::Llm;

/// How long a step waits when every sequence is paused on a slow client.
const PAUSED_WAIT: Duration = Duration::from_millis(2);

/// Runs the engine of `llm` until `stopping` is set or the queue closes. Whether the
/// context could be created goes to `ready` first.
pub fn run(
    llm: &Llm,
    metrics: &EngineMetrics,
    queue: Receiver<Job>,
    stopping: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<()>>,
) {
    let context = match llm.new_context() {
        Ok(context) => context,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut engine = Stepper {
        llm,
        metrics,
        load: (0, 0),
        batch: LlamaBatch::new(llm.args.batch_size as usize, 1),
        context,
        rows: Vec::new(),
        slots: (0..llm.args.max_num_seqs).map(|_| None).collect(),
    };
    loop {
        if stopping.load(Ordering::SeqCst) || !engine.admit(&queue) {
            engine.fail_all(&queue);
            engine.report_load(0, 0);
            return;
        }
        engine.drop_cancelled();
        let running = engine.slots.iter().filter(|s| s.is_some()).count();
        engine.report_load(running, queue.len());
        match engine.build_batch() {
            Ok(0) => std::thread::sleep(PAUSED_WAIT),
            Ok(_) => engine.decode_and_sample(),
            Err(e) => engine.fail_batch(e),
        }
    }
}

/// A batch row whose logits are sampled: the slot it belongs to and its index.
struct Row {
    slot: usize,
    index: i32,
}

struct Stepper<'a> {
    llm: &'a Llm,
    metrics: &'a EngineMetrics,
    /// The sequences running and requests waiting last reported to `metrics`.
    load: (usize, usize),
    context: LlamaContext<'a>,
    batch: LlamaBatch<'a>,
    /// The rows of the current batch to sample, in batch order.
    rows: Vec<Row>,
    /// One per KV-cache sequence id (the slot's index).
    slots: Vec<Option<Sequence>>,
}

impl Stepper<'_> {
    /// Reports this engine's sequences running and requests waiting.
    fn report_load(&mut self, running: usize, waiting: usize) {
        let (was_running, was_waiting) = self.load;
        self.metrics.add_load(
            running as i64 - was_running as i64,
            waiting as i64 - was_waiting as i64,
        );
        self.load = (running, waiting);
    }

    fn active(&self) -> bool {
        self.slots.iter().any(Option::is_some)
    }

    /// Fills free slots from the queue, waiting for a request when none is active.
    /// False when the queue closed (the instance is going away).
    fn admit(&mut self, queue: &Receiver<Job>) -> bool {
        for slot in 0..self.slots.len() {
            if self.slots[slot].is_some() {
                continue;
            }
            let job = if self.active() {
                match queue.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => return false,
                }
            } else {
                // Nothing runs while the engine waits: say so before waiting.
                self.report_load(0, queue.len());
                match queue.recv() {
                    Ok(job) => job,
                    Err(_) => return false,
                }
            };
            if job.sender.is_cancelled() {
                continue;
            }
            let chain = sampler::chain(
                &job.generation.sampling,
                self.llm.args.seed,
                self.llm.model.n_vocab(),
                self.llm.context_length,
            );
            self.metrics.prompt(job.prompt.len());
            self.slots[slot] = Some(Sequence::new(job, chain));
        }
        true
    }

    /// Frees the slots of requests whose clients left.
    fn drop_cancelled(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot]
                .as_ref()
                .is_some_and(Sequence::is_cancelled)
            {
                self.free(slot);
            }
        }
    }

    fn free(&mut self, slot: usize) -> Option<Sequence> {
        let sequence = self.slots[slot].take()?;
        // The slot's positions go, so the next request starts from an empty cache.
        let _ = self
            .context
            .clear_kv_cache_seq(Some(slot as u32), None, None);
        Some(sequence)
    }

    /// The next batch: one token per generating sequence, then prompt pieces within
    /// the budget. Returns its size; the rows to sample go to `rows`.
    fn build_batch(&mut self) -> std::result::Result<usize, Error> {
        self.batch.clear();
        self.rows.clear();
        let budget = self.llm.args.batch_size as usize;
        let chunk = self.llm.args.prefill_chunk as usize;
        let add_error = |e: llama_cpp_2::llama_batch::BatchAddError| {
            Error::internal(format!("unable to build the llama.cpp batch: {e}"))
        };
        for (slot, sequence) in self.slots.iter_mut().enumerate() {
            let Some(sequence) = sequence.as_mut().filter(|s| s.ready_to_feed()) else {
                continue;
            };
            if let Some((token, position)) = sequence.feed() {
                self.rows.push(Row {
                    slot,
                    index: self.batch.n_tokens(),
                });
                self.batch
                    .add(token, position, &[slot as i32], true)
                    .map_err(add_error)?;
            }
        }
        for (slot, sequence) in self.slots.iter_mut().enumerate() {
            let room = budget - self.batch.n_tokens() as usize;
            let Some(sequence) = sequence.as_mut() else {
                continue;
            };
            let unread = sequence.unread_prompt();
            let take = unread.len().min(chunk).min(room);
            if take == 0 {
                continue;
            }
            let completes = take == unread.len();
            let start = sequence.past();
            for (i, token) in unread[..take].iter().enumerate() {
                let last = completes && i + 1 == take;
                if last {
                    self.rows.push(Row {
                        slot,
                        index: self.batch.n_tokens(),
                    });
                }
                self.batch
                    .add(*token, start + i as i32, &[slot as i32], last)
                    .map_err(add_error)?;
            }
            sequence.read_prompt(take);
        }
        Ok(self.batch.n_tokens() as usize)
    }

    fn decode_and_sample(&mut self) {
        if let Err(e) = self.context.decode(&mut self.batch) {
            self.fail_batch(Error::internal(format!(
                "model '{}': llama.cpp could not decode the batch: {e}",
                self.llm.name
            )));
            return;
        }
        let vocab = self.llm.model.vocab();
        let mut piece = Vec::new();
        for row in std::mem::take(&mut self.rows) {
            let Some(sequence) = self.slots[row.slot].as_mut() else {
                continue;
            };
            let token = sequence.sampler().sample(&self.context, row.index);
            let (gap, first) = sequence.tick(Instant::now());
            self.metrics.token(gap, first);
            let generation = sequence.generation();
            let logprob = generation
                .returns
                .cumulative_logprob
                .then(|| log_probability(self.context.get_logits_ith(row.index), token.0));
            piece.clear();
            vocab.token_to_piece_into(
                token,
                &mut piece,
                !generation.sampling.skip_special_tokens,
                None,
            );
            let room = sequence.past() < self.llm.context_length as i32;
            if sequence
                .accept(token, &piece, vocab.is_eog(token), logprob, room)
                .is_some()
            {
                self.free(row.slot);
            }
        }
    }

    /// Ends every sequence of the failed step with `error`.
    fn fail_batch(&mut self, error: Error) {
        for slot in 0..self.slots.len() {
            if let Some(sequence) = self.free(slot) {
                sequence.fail(error.clone());
            }
        }
    }

    /// Ends every request, active or queued: the instance is going away.
    fn fail_all(&mut self, queue: &Receiver<Job>) {
        let error = || {
            Error::unavailable(format!(
                "model '{}' was unloaded while this request was generating",
                self.llm.name
            ))
        };
        for slot in 0..self.slots.len() {
            if let Some(sequence) = self.free(slot) {
                sequence.fail(error());
            }
        }
        while let Ok(job) = queue.try_recv() {
            job.sender.send(Err(error()), true);
        }
    }
}

/// The log probability of `token` under `logits` (a log-softmax at one point), as vLLM
/// reports it: from the model's own distribution, before sampling changed it.
fn log_probability(logits: &[f32], token: i32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let chosen = usize::try_from(token)
        .ok()
        .and_then(|i| logits.get(i))
        .map_or(f64::NEG_INFINITY, |&l| l as f64);
    chosen - max - sum.ln()
}

#[cfg(test)]
mod tests {
    use super::log_probability;

    #[test]
    fn log_probabilities_are_a_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0];
        let total: f64 = (0..3).map(|t| log_probability(&logits, t).exp()).sum();
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!(log_probability(&logits, 2) > log_probability(&logits, 0));
        assert_eq!(log_probability(&logits, 7), f64::NEG_INFINITY);
    }
}
