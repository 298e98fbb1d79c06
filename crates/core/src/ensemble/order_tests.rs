//! A sequence streamed through an ensemble reaches its later steps in order, even when
//! an earlier step answers its requests out of order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::graph::Plan;
use super::{Ensemble, StepModel, StepModels};
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{Answer, InferRequest, InferResponse, OutputTensor, ParamValue};
use crate::response_stream::ResponseStream;
use crate::stats::StepTimes;
use crate::testing;

const STEP: &str = r#"backend: "fake" max_batch_size: 0
    input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;

/// The first step answers each request when the test says; the second records the
/// order requests reach it and answers at once.
struct Steps {
    first: ModelSpec,
    second: ModelSpec,
    held: Mutex<Vec<oneshot::Sender<()>>>,
    reached: Mutex<Vec<i32>>,
}

/// A step model: which of the two it is.
struct Step(Arc<Steps>, bool);

struct Table(Arc<Steps>);

impl StepModels for Table {
    fn step_model(&self, name: &str, _: Option<i64>) -> Result<Arc<dyn StepModel>> {
        Ok(Arc::new(Step(self.0.clone(), name == "first")))
    }
}

fn echo(request: &InferRequest) -> InferResponse {
    InferResponse {
        model_name: request.model_name.clone(),
        model_version: 1,
        id: request.id.clone(),
        parameters: Vec::new(),
        outputs: vec![OutputTensor {
            name: "OUT".into(),
            datatype: nereid_proto::DataType::Int32,
            shape: vec![1],
            data: request.inputs[0].data.clone(),
            device: None,
        }]
        .into(),
    }
}

impl StepModel for Step {
    fn spec(&self) -> &ModelSpec {
        if self.1 {
            &self.0.first
        } else {
            &self.0.second
        }
    }

    fn ensemble_plan(&self) -> Option<&Plan> {
        None
    }

    fn submit_step(
        self: Arc<Self>,
        request: InferRequest,
        _: std::time::Instant,
        _: Arc<StepTimes>,
    ) -> Answer {
        let response = echo(&request);
        if !self.1 {
            let value = testing::int32s(&request.inputs[0].data)[0];
            self.0.reached.lock().expect("lock").push(value);
            return Box::pin(std::future::ready(Ok(response)));
        }
        let (tx, rx) = oneshot::channel();
        self.0.held.lock().expect("lock").push(tx);
        Box::pin(async move {
            rx.await.map_err(|_| Error::internal("dropped"))?;
            Ok(response)
        })
    }

    fn submit_step_stream(
        self: Arc<Self>,
        _: InferRequest,
        _: std::time::Instant,
    ) -> Result<ResponseStream> {
        Err(Error::internal("not decoupled"))
    }
}

fn sequence_request(value: i32, start: bool) -> InferRequest {
    let mut request = testing::request("e", "", vec![testing::int32_input("IN", &[1], &[value])]);
    request.parameters = vec![
        ("sequence_id".into(), ParamValue::Uint(7)),
        ("sequence_start".into(), ParamValue::Bool(start)),
    ];
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_reaches_the_next_step_after_the_earlier_one() {
    let steps = Arc::new(Steps {
        first: ModelSpec::new(testing::config("first", STEP), 1).expect("spec"),
        second: ModelSpec::new(testing::config("second", STEP), 1).expect("spec"),
        held: Mutex::new(Vec::new()),
        reached: Mutex::new(Vec::new()),
    });
    let table: Arc<dyn StepModels> = Arc::new(Table(steps.clone()));
    let config = testing::config(
        "e",
        r#"platform: "ensemble" max_batch_size: 0
           input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
           output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
           ensemble_scheduling { step [
             { model_name: "first" model_version: -1 input_map { key: "X" value: "IN" }
               output_map { key: "OUT" value: "a" } },
             { model_name: "second" model_version: -1 input_map { key: "X" value: "a" }
               output_map { key: "OUT" value: "OUT" } } ] }"#,
    );
    let plan = Plan::new(&config).expect("plan");
    let ensemble = Ensemble::new(&config, plan, Arc::downgrade(&table)).expect("ensemble");
    let runs: Vec<_> = [(1, true), (2, false), (3, false)]
        .into_iter()
        .map(|(value, start)| {
            let run = ensemble.start(sequence_request(value, start), Arc::default(), None);
            tokio::spawn(run.finish())
        })
        .collect();
    // The first step answers the last request first, then the second, then the first.
    let held: Vec<_> = std::mem::take(&mut *steps.held.lock().expect("lock"));
    assert_eq!(held.len(), 3, "every first step submitted at start");
    for tx in held.into_iter().rev() {
        let _ = tx.send(());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for run in runs {
        run.await.expect("joined").expect("answered");
    }
    assert_eq!(*steps.reached.lock().expect("lock"), vec![1, 2, 3]);
}
