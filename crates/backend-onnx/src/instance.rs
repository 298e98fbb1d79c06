//! One model instance: an ORT session executing batches.

use std::time::Instant;

use ort::session::{RunOptions, Session, SessionInputValue};

use nereid_core::backend::{ComputeTiming, InstanceBackend, Outcome};
use nereid_core::batch::Batch;
use nereid_core::request::OutputTensor;
use nereid_core::{Error, Result};

use crate::convert::{from_value, to_value, to_value_view};

/// An instance owning its session (ORT runs need `&mut Session`) and the options its
/// runs take, if the model sets any.
pub struct OnnxInstance {
    session: Session,
    run_options: Option<RunOptions>,
}

impl OnnxInstance {
    /// Wraps a session whose runs take `run_options` (see `session_options::run_options`).
    pub fn new(session: Session, run_options: Option<RunOptions>) -> Self {
        Self {
            session,
            run_options,
        }
    }

    fn run(&mut self, batch: &Batch<'_>, timing: &mut ComputeTiming) -> Result<Vec<OutputTensor>> {
        let spec = batch.spec();
        let started = Instant::now();
        // The gathered bytes outlive the run, so ORT can read them in place.
        let mut gathered = Vec::with_capacity(spec.inputs.len());
        for input in spec.inputs.iter().chain(&spec.internal_inputs) {
            if let Some(g) = batch.gather_input(&input.name)? {
                gathered.push((input, g));
            }
        }
        let mut computed = Vec::with_capacity(spec.batch_inputs.len());
        for batch_input in &spec.batch_inputs {
            computed.push((batch_input, batch.batch_input(batch_input)?));
        }
        let mut inputs: Vec<(String, SessionInputValue<'_>)> =
            Vec::with_capacity(gathered.len() + computed.len());
        let fed = gathered
            .iter()
            .map(|(input, g)| (input.name.as_str(), input.datatype, g));
        let computed_targets = computed.iter().flat_map(|(batch_input, g)| {
            (batch_input.targets.iter()).map(move |t| (t.as_str(), batch_input.datatype, g))
        });
        for (name, datatype, g) in fed.chain(computed_targets) {
            let value = match to_value_view(datatype, &g.shape, &g.data)? {
                Some(view) => view,
                None => to_value(datatype, &g.shape, &g.data)?.into(),
            };
            inputs.push((name.to_string(), value));
        }
        let prepared = Instant::now();
        let run = match &self.run_options {
            Some(options) => self.session.run_with_options(inputs, options),
            None => self.session.run(inputs),
        };
        let mut outputs = run
            .map_err(|e| Error::internal(format!("onnx runtime error {}: {e}", e.code() as i32)))?;
        let ran = Instant::now();
        let mut result = Vec::with_capacity(spec.outputs.len());
        for output in spec.outputs.iter().chain(&spec.internal_outputs) {
            let value = outputs.remove(&output.name).ok_or_else(|| {
                Error::internal(format!(
                    "model '{}' did not produce output '{}'",
                    spec.name, output.name
                ))
            })?;
            let (shape, data) = from_value(output.datatype, value)?;
            result.push(OutputTensor {
                name: output.name.clone(),
                datatype: output.datatype,
                shape,
                data,
                device: None,
            });
        }
        let done = Instant::now();
        timing.set_phases(started, prepared, ran, done);
        Ok(result)
    }
}

impl InstanceBackend for OnnxInstance {
    fn execute(&mut self, batch: &Batch<'_>, timing: &mut ComputeTiming) -> Vec<Outcome> {
        match self.run(batch, timing) {
            Ok(outputs) => batch
                .scatter(outputs)
                .into_iter()
                .map(Outcome::from)
                .collect(),
            Err(e) => batch
                .requests()
                .iter()
                .map(|_| Outcome::from(Err(e.clone())))
                .collect(),
        }
    }
}
