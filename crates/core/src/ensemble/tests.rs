//! Ensembles end to end inside the core: test-backend composing models behind real
//! default schedulers, a table of them, and ensembles built over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::graph::Plan;
use super::{Ensemble, StepModel, StepModels};
use crate::config::PublishedConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::loaded::LoadedModel;
use crate::model::ModelSpec;
use crate::request::InferRequest;
use crate::testing::{self, int32s, Outputs, TestBackend};

/// A model with inputs `inputs` (INT32 [-1]) behind a default scheduler: OUT is the sum of
/// every input plus `add` (with one input and `add` 0, the input echoed: its own buffer).
/// A request whose first element is -1 fails with "boom".
fn model(name: &str, inputs: &[&str], add: i32) -> Arc<LoadedModel> {
    let backend = match inputs {
        [input] if add == 0 => TestBackend::echo(&[(input, "OUT")]),
        _ => TestBackend::new(Outputs::SumInt32 {
            output: "OUT".into(),
            add,
        }),
    }
    .failing_on(-1, Error::internal("boom"));
    let inputs: String = inputs
        .iter()
        .map(|i| format!(r#"{{ name: "{i}" data_type: TYPE_INT32 dims: [ -1 ] }}"#))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        r#"backend: "fake" max_batch_size: 8 input [ {inputs} ]
           output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]"#
    );
    testing::serve(testing::config(name, &text), &backend, None)
}

struct Table(HashMap<String, Arc<LoadedModel>>);

impl StepModels for Table {
    fn step_model(&self, name: &str, _: Option<i64>) -> Result<Arc<dyn StepModel>> {
        match self.0.get(name) {
            Some(model) => Ok(model.clone()),
            None => Err(Error::not_found(format!("no model '{name}'"))),
        }
    }
}

/// `(model, [(model input, tensor)], output tensor)` steps over IN -> OUT.
type Steps<'a> = &'a [(&'a str, &'a [(&'a str, &'a str)], &'a str)];

fn ensemble(table: &Arc<dyn StepModels>, steps: Steps<'_>) -> Arc<LoadedModel> {
    let steps: Vec<String> = steps
        .iter()
        .map(|(model, inputs, output)| {
            let inputs: String = inputs
                .iter()
                .map(|(k, v)| format!(r#"input_map {{ key: "{k}" value: "{v}" }} "#))
                .collect();
            format!(
                r#"{{ model_name: "{model}" model_version: -1 {inputs} output_map {{ key: "OUT" value: "{output}" }} }}"#
            )
        })
        .collect();
    let text = format!(
        r#"platform: "ensemble" max_batch_size: 8
           input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
           output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
           ensemble_scheduling {{ step [ {} ] }}"#,
        steps.join(", ")
    );
    let config = testing::config("e", &text);
    let plan = Plan::new(&config).expect("valid plan");
    let ensemble = Ensemble::new(&config, plan, Arc::downgrade(table)).expect("valid steps");
    let spec = Arc::new(ModelSpec::new(config.clone(), 1).expect("valid"));
    let published = Arc::new(PublishedConfig::new(config));
    Arc::new(LoadedModel::ensemble(
        spec,
        published,
        ensemble,
        Arc::default(),
        None,
    ))
}

fn table(models: Vec<Arc<LoadedModel>>) -> Arc<dyn StepModels> {
    Arc::new(Table(
        models
            .into_iter()
            .map(|m| (m.spec().name.clone(), m))
            .collect(),
    ))
}

fn request(values: &[i32]) -> InferRequest {
    testing::request(
        "e",
        "r",
        vec![testing::int32_input(
            "IN",
            &[1, values.len() as i64],
            values,
        )],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_passes_tensors_between_steps_without_copying() {
    let id = model("id", &["X"], 0);
    let models = table(vec![id.clone()]);
    let e = ensemble(
        &models,
        &[
            ("id", &[("X", "IN")], "a"),
            ("id", &[("X", "a")], "b"),
            ("id", &[("X", "b")], "OUT"),
        ],
    );
    let req = request(&[1, 2, 3]);
    let sent = req.inputs[0].data.as_ptr();
    let response = e.clone().submit(req, Instant::now()).await.expect("ok");
    assert_eq!(response.id, "r");
    assert_eq!(int32s(&response.outputs[0].data), vec![1, 2, 3]);
    assert_eq!(
        response.outputs[0].data.as_ptr(),
        sent,
        "the same buffer all the way"
    );
    let stats = e.snapshot();
    assert_eq!((stats.inference_count, stats.execution_count), (1, 1));
    let steps = id.snapshot();
    assert_eq!(steps.inference_stats.success.count, 3);
    assert_eq!(
        stats.inference_stats.compute_infer.ns,
        steps.inference_stats.compute_infer.ns
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diamond_runs_both_branches_and_joins_them() {
    let models = table(vec![
        model("plus1", &["X"], 1),
        model("plus10", &["X"], 10),
        model("plus100", &["X"], 100),
        model("sum", &["A", "B"], 0),
    ]);
    let e = ensemble(
        &models,
        &[
            ("plus1", &[("X", "IN")], "x"),
            ("plus10", &[("X", "x")], "left"),
            ("plus100", &[("X", "x")], "right"),
            ("sum", &[("A", "left"), ("B", "right")], "OUT"),
        ],
    );
    let response = e
        .submit(request(&[0, 5]), Instant::now())
        .await
        .expect("ok");
    // (v+1+10) + (v+1+100)
    assert_eq!(int32s(&response.outputs[0].data), vec![112, 122]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_or_missing_step_fails_the_whole_request() {
    let models = table(vec![model("id", &["X"], 0), model("plus1", &["X"], 1)]);
    let e = ensemble(
        &models,
        &[("id", &[("X", "IN")], "a"), ("plus1", &[("X", "a")], "OUT")],
    );
    let err = e
        .clone()
        .submit(request(&[-1]), Instant::now())
        .await
        .expect_err("fails");
    assert_eq!(err.message(), "in ensemble 'e', boom");
    assert_eq!(err.kind(), ErrorKind::Internal);
    let stats = e.snapshot();
    assert_eq!(stats.inference_stats.fail.count, 1);
    assert_eq!(stats.failures, [0, 1, 0, 0], "counted as OTHER");
    assert_eq!(stats.pending, 0);
    // A composing model that went away (the table dropped) fails requests cleanly.
    drop(models);
    let err = e
        .submit(request(&[1]), Instant::now())
        .await
        .expect_err("fails");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
}

/// An ensemble's own `reshape`s: its steps get the inputs in the reshape layout (here a
/// non-batching ensemble feeding a batching model a batch of one, Triton's usual way to
/// join the two), and its outputs go back to the client with the configured `dims`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_reshapes_its_inputs_and_outputs() {
    let (_models, e) = over_one_echo_step(
        r#"input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2, 2 ] reshape { shape: [ 1, 4 ] } } ]
           output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] reshape { shape: [ 1, 4 ] } } ]"#,
    );
    let input = testing::int32_input("IN", &[2, 2], &[1, 2, 3, 4]);
    let response = e
        .submit(testing::request("e", "r", vec![input]), Instant::now())
        .await
        .expect("ok");
    assert_eq!(response.outputs[0].shape, vec![4]);
    assert_eq!(int32s(&response.outputs[0].data), vec![1, 2, 3, 4]);
}

/// Ensemble `e` (inputs and outputs declared by `io`) of one step, the echoing batching
/// model `id` (`max_batch_size: 8`, `X` to `OUT`, `dims: [-1]`), its `IN` into `X` and its
/// `OUT` out. The step table comes back too: the ensemble holds it only weakly.
fn over_one_echo_step(io: &str) -> (Arc<dyn StepModels>, Arc<LoadedModel>) {
    let models = table(vec![model("id", &["X"], 0)]);
    let config = testing::config(
        "e",
        &format!(
            r#"platform: "ensemble" {io}
               ensemble_scheduling {{ step [ {{ model_name: "id" model_version: -1
                 input_map {{ key: "X" value: "IN" }} output_map {{ key: "OUT" value: "OUT" }} }} ] }}"#
        ),
    );
    let plan = Plan::new(&config).expect("valid plan");
    let ensemble = Ensemble::new(&config, plan, Arc::downgrade(&models)).expect("valid steps");
    let spec = Arc::new(ModelSpec::new(config.clone(), 1).expect("valid"));
    let published = Arc::new(PublishedConfig::new(config));
    let e = LoadedModel::ensemble(spec, published, ensemble, Arc::default(), None);
    (models, Arc::new(e))
}

/// A non-batching ensemble over a batching model (`max_batch_size: 8`, `dims: [-1]`), as
/// Triton's L0_infer_zero builds them: the step gets the tensor as a batch of one, and
/// the client gets it back without the batch dimension, zero-sized tensors included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensors_cross_between_non_batching_ensembles_and_batching_models() {
    let (_models, e) = over_one_echo_step(
        r#"input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
           output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]"#,
    );
    for values in [&[5, 6, 7][..], &[]] {
        let input = testing::int32_input("IN", &[values.len() as i64], values);
        let response = e
            .clone()
            .submit(testing::request("e", "r", vec![input]), Instant::now())
            .await
            .expect("ok");
        assert_eq!(response.outputs[0].shape, vec![values.len() as i64]);
        assert_eq!(int32s(&response.outputs[0].data), values);
    }
}
