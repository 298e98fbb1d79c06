//! Ensembles with a decoupled step, over stand-in step models: each response of the
//! decoupled step is an iteration that runs the steps downstream and makes one ensemble
//! response, `max_inflight_requests` bounds how many of a step's requests run at once,
//! and a step fed by two lineages cannot load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::graph::Plan;
use super::{Ensemble, StepModel, StepModels};
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{Answer, InferRequest, InferResponse, OutputTensor};
use crate::response_stream::{ResponseSender, ResponseStream};
use crate::stats::StepTimes;
use crate::testing::{self, int32s};

/// `repeat` (decoupled: IN = n answers OUT = 0 .. n-1) or `square` (Y = X * X after
/// 10 ms, counting how many of its requests run at once, Y left out for X = 7; Z,
/// optional, is not read).
struct Fake {
    spec: ModelSpec,
    running: AtomicUsize,
    most: AtomicUsize,
}

fn fake(name: &str, decoupled: bool) -> Arc<Fake> {
    let (inputs, output, policy) = if decoupled {
        (
            &["IN"][..],
            "OUT",
            "model_transaction_policy { decoupled: true }",
        )
    } else {
        (&["X", "Z"][..], "Y", "")
    };
    // Z is optional: only the test of mixed lineages feeds it.
    let inputs: Vec<String> = inputs
        .iter()
        .map(|i| {
            format!(
                r#"{{ name: "{i}" data_type: TYPE_INT32 dims: [ 1 ] optional: {} }}"#,
                *i == "Z"
            )
        })
        .collect();
    let text = format!(
        r#"backend: "fake" max_batch_size: 0 {policy}
           input [ {} ]
           output [ {{ name: "{output}" data_type: TYPE_INT32 dims: [ 1 ] }} ]"#,
        inputs.join(", ")
    );
    let spec = ModelSpec::new(testing::config(name, &text), 1).expect("valid");
    Arc::new(Fake {
        spec,
        running: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    })
}

fn int32(name: &str, value: i32) -> OutputTensor {
    OutputTensor {
        name: name.into(),
        datatype: nereid_proto::DataType::Int32,
        shape: vec![1],
        data: bytes::Bytes::copy_from_slice(&value.to_le_bytes()),
        device: None,
    }
}

fn response(outputs: Vec<OutputTensor>) -> InferResponse {
    InferResponse {
        model_name: String::new(),
        model_version: 1,
        id: String::new(),
        parameters: Vec::new(),
        outputs: outputs.into(),
    }
}

impl StepModel for Fake {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn ensemble_plan(&self) -> Option<&Plan> {
        None
    }

    fn submit_step(
        self: Arc<Self>,
        request: InferRequest,
        _: Instant,
        _: Arc<StepTimes>,
    ) -> Answer {
        let x = int32s(&request.inputs[0].data)[0];
        Box::pin(async move {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            // Leaves its output out for X = 7, as a model with an optional output may.
            let outputs = if x == 7 {
                vec![]
            } else {
                vec![int32("Y", x * x)]
            };
            Ok(response(outputs))
        })
    }

    fn submit_step_stream(
        self: Arc<Self>,
        request: InferRequest,
        _: Instant,
    ) -> Result<ResponseStream> {
        let n = int32s(&request.inputs[0].data)[0];
        let (sender, stream) = ResponseSender::channel(Box::new(|outputs| Ok(response(outputs))));
        for i in 0..n {
            sender.send(Ok(vec![int32("OUT", i)]), false);
        }
        sender.close();
        Ok(stream)
    }
}

struct Table(HashMap<&'static str, Arc<Fake>>);

impl StepModels for Table {
    fn step_model(&self, name: &str, _: Option<i64>) -> Result<Arc<dyn StepModel>> {
        match self.0.get(name) {
            Some(model) => Ok(model.clone()),
            None => Err(Error::not_found(format!("no model '{name}'"))),
        }
    }
}

const COUNTED: &str = r#"platform: "ensemble" max_batch_size: 0
    input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "SQUARE" data_type: TYPE_INT32 dims: [ 1 ] } ]
    ensemble_scheduling { LIMIT step [
      { model_name: "repeat" model_version: -1 input_map { key: "IN" value: "N" } output_map { key: "OUT" value: "COUNT" } },
      { model_name: "square" model_version: -1 input_map { key: "X" value: "STEP_INPUT" } output_map { key: "Y" value: "SQUARE" } }
    ] }"#;

fn build(limit: &str, step_input: &str) -> (Arc<dyn StepModels>, Result<Ensemble>, Arc<Fake>) {
    let square = fake("square", false);
    let table: Arc<dyn StepModels> = Arc::new(Table(HashMap::from([
        ("repeat", fake("repeat", true)),
        ("square", square.clone()),
    ])));
    let text = COUNTED
        .replace("LIMIT", limit)
        .replace("STEP_INPUT", step_input);
    let config = testing::config("counted", &text);
    let plan = Plan::new(&config).expect("valid plan");
    let ensemble = Ensemble::new(&config, plan, Arc::downgrade(&table));
    (table, ensemble, square)
}

/// What an ensemble run answered: its responses as (COUNT, SQUARE), sorted, how many
/// messages were marked last, and how many of those were a final flag alone.
#[derive(Debug, PartialEq)]
struct Answered {
    pairs: Vec<(i32, i32)>,
    lasts: usize,
    flags_alone: usize,
}

/// Runs the ensemble for N = `n`.
async fn run(ensemble: &Ensemble, n: i32) -> Answered {
    let request = testing::request("counted", "r", vec![testing::int32_input("N", &[1], &[n])]);
    let mut pairs = Vec::new();
    let mut lasts = 0;
    let mut flags_alone = 0;
    ensemble
        .start(request, Arc::default(), None)
        .drive(|result, last| {
            lasts += usize::from(last);
            flags_alone += usize::from(last && result.is_none());
            if let Some(result) = result {
                let outputs = result.expect("no step fails");
                let value = |name: &str| {
                    let found = outputs.iter().find(|o| o.name == name).expect("output");
                    int32s(&found.data)[0]
                };
                pairs.push((value("COUNT"), value("SQUARE")));
            }
        })
        .await;
    pairs.sort();
    Answered {
        pairs,
        lasts,
        flags_alone,
    }
}

#[tokio::test(start_paused = true)]
async fn each_response_of_a_decoupled_step_is_an_ensemble_response() {
    let (_table, ensemble, square) = build("", "COUNT");
    let ensemble = ensemble.expect("loads");
    assert!(ensemble.decoupled());
    let answered = run(&ensemble, 4).await;
    assert_eq!(answered.pairs, [(0, 0), (1, 1), (2, 4), (3, 9)]);
    assert_eq!(answered.lasts, 1, "one final flag");
    // `repeat` ended before the last square step answered, so that answer's response is
    // the final one (Triton's `triton_final_response: true` on a response), not a flag
    // sent alone after it, which a client that asks for no empty responses never sees.
    assert_eq!(answered.flags_alone, 0);
    // Without a bound, every response's square step runs at once.
    assert_eq!(square.most.load(Ordering::SeqCst), 4);
    let nothing = Answered {
        pairs: vec![],
        lasts: 1,
        flags_alone: 1,
    };
    assert_eq!(run(&ensemble, 0).await, nothing);
}

#[tokio::test(start_paused = true)]
async fn max_inflight_requests_bounds_a_steps_requests_at_once() {
    let (_table, ensemble, square) = build("max_inflight_requests: 2", "COUNT");
    let answered = run(&ensemble.expect("loads"), 5).await;
    assert_eq!(answered.pairs.len(), 5);
    assert_eq!(square.most.load(Ordering::SeqCst), 2);
}

/// The output names of each response of the `counted` ensemble for N = `n`, asking for
/// `wanted` outputs (all, for `None`).
async fn output_names(ensemble: &Ensemble, n: i32, wanted: Option<&[String]>) -> Vec<Vec<String>> {
    let request = testing::request("counted", "r", vec![testing::int32_input("N", &[1], &[n])]);
    let mut names = Vec::new();
    ensemble
        .start(request, Arc::default(), wanted)
        .drive(|result, _| {
            if let Some(result) = result {
                let outputs = result.expect("no step fails");
                names.push(outputs.iter().map(|o| o.name.clone()).collect());
            }
        })
        .await;
    names.sort();
    names
}

#[tokio::test(start_paused = true)]
async fn a_step_feeding_only_outputs_not_asked_for_does_not_run() {
    let (_table, ensemble, square) = build("", "COUNT");
    let ensemble = ensemble.expect("loads");
    let wanted = ["COUNT".to_string()];
    let names = output_names(&ensemble, 3, Some(&wanted)).await;
    assert_eq!(names, vec![vec!["COUNT".to_string()]; 3]);
    assert_eq!(square.most.load(Ordering::SeqCst), 0, "square was pruned");
}

#[tokio::test(start_paused = true)]
async fn an_output_a_step_left_out_is_left_out_of_that_response() {
    let (_table, ensemble, _) = build("", "COUNT");
    let names = output_names(&ensemble.expect("loads"), 9, None).await;
    let both = vec!["COUNT".to_string(), "SQUARE".to_string()];
    let mut expected = vec![both; 8];
    expected.push(vec!["COUNT".to_string()]);
    expected.sort();
    assert_eq!(names, expected, "square left Y out for COUNT = 7 only");
}

#[test]
fn a_step_fed_by_two_lineages_cannot_load() {
    // `square` reads the request's N while the ensemble's outputs pair it with COUNT:
    // each step has one lineage, but the outputs meet at the ensemble with two
    // (Triton's sink node; L0_model_config's invalid_decoupled_branching_2).
    let (_table, ensemble, _) = build("", "N");
    let error = ensemble.err().expect("outputs of two lineages");
    assert_eq!(
        error.message(),
        "in ensemble counted, step of model 'counted' receives inputs originated from different decoupled models"
    );
    let text = COUNTED
        .replace("LIMIT", "")
        .replace("STEP_INPUT", "N")
        .replace(
            r#"input_map { key: "X" value: "N" }"#,
            r#"input_map { key: "X" value: "N" } input_map { key: "Z" value: "COUNT" }"#,
        );
    let config = testing::config("counted", &text);
    let plan = Plan::new(&config).expect("valid plan");
    let table: Arc<dyn StepModels> = Arc::new(Table(HashMap::from([
        ("repeat", fake("repeat", true)),
        ("square", fake("square", false)),
    ])));
    let error = Ensemble::new(&config, plan, Arc::downgrade(&table))
        .err()
        .expect("refused");
    assert!(
        error.message().contains("step of model 'square'"),
        "{error}"
    );
}
