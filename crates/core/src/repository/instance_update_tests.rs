//! Instance updates through the repository's load, counted on the test backend's
//! instances as Triton's L0_model_update counts a Python model's `initialize` and
//! `finalize` calls; and which changes need a full load.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::super::manager::{ControlMode, ModelRepository};
use super::super::overrides::LoadRequest;
use super::*;
use crate::request::ParamValue;
use crate::testing::{self, TestBackend, MODEL_FILE};

const IO: &str = r#"backend: "identity" max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]"#;

fn config(groups: &str) -> String {
    format!("{IO}\ninstance_group [ {groups} ]")
}

fn cpu(count: u32) -> String {
    config(&format!("{{ count: {count} kind: KIND_CPU }}"))
}

fn repository(root: &Path, backend: &TestBackend) -> Arc<ModelRepository> {
    let options = testing::repository_options(root, ControlMode::Explicit, &[]);
    Arc::new(ModelRepository::new(options, backend.registry()))
}

async fn reload(repo: &Arc<ModelRepository>, root: &Path, text: &str) -> crate::error::Result<()> {
    std::fs::write(root.join("m").join("config.pbtxt"), text).expect("config written");
    repo.load("m", LoadRequest::default()).await
}

async fn echo(repo: &ModelRepository) -> Vec<i32> {
    let model = repo.get("m", None).expect("served");
    let request = testing::request(
        "m",
        "r",
        vec![testing::int32_input("INPUT0", &[1, 1], &[7])],
    );
    let response = model
        .submit(request, std::time::Instant::now())
        .await
        .expect("answered");
    testing::int32s(&response.outputs[0].data)
}

/// Waits for the counts `expected`: a full reload or an unload stops the replaced
/// model's instances in the background (an instance update retires them before it
/// answers).
async fn finalized_in_background(backend: &TestBackend, expected: (usize, usize)) {
    for _ in 0..500 {
        if backend.instance_counts() == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(backend.instance_counts(), expected);
}

fn group_count(repo: &ModelRepository) -> Vec<i32> {
    let model = repo.get("m", None).expect("served");
    let config = &model.config().message;
    config.instance_group.iter().map(|g| g.count).collect()
}

#[tokio::test]
async fn a_reload_that_changes_only_the_instance_count_keeps_the_other_instances() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    testing::write_model(root.path(), "m", &cpu(2), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");
    assert_eq!(backend.instance_counts(), (2, 0));

    reload(&repo, root.path(), &cpu(3)).await.expect("grows");
    assert_eq!(
        backend.instance_counts(),
        (3, 0),
        "only the new one created"
    );
    assert_eq!(group_count(&repo), [3]);
    assert_eq!(echo(&repo).await, [7]);

    // Retired instances are finalized before the load answers.
    reload(&repo, root.path(), &cpu(1)).await.expect("shrinks");
    assert_eq!(backend.instance_counts(), (3, 2));
    assert_eq!(echo(&repo).await, [7]);

    // Count 0 is normalized to 1: nothing changes, as with an identical reload.
    reload(&repo, root.path(), &cpu(0)).await.expect("same");
    reload(&repo, root.path(), &cpu(0)).await.expect("same");
    assert_eq!(backend.instance_counts(), (3, 2));

    // A group renamed and split keeps instances of the same kind.
    let split =
        config(r#"{ name: "a" count: 1 kind: KIND_CPU }, { name: "b" count: 1 kind: KIND_CPU }"#);
    reload(&repo, root.path(), &split).await.expect("split");
    assert_eq!(backend.instance_counts(), (4, 2));
    assert_eq!(group_count(&repo), [1, 1]);

    repo.unload("m", false).await.expect("unloads");
    finalized_in_background(&backend, (4, 4)).await;
}

#[tokio::test]
async fn the_served_configuration_sent_back_with_a_new_count_updates_in_place() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    testing::write_model(root.path(), "m", &cpu(1), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");
    // What Triton's L0_model_update does: read the configuration, add an instance.
    let mut json = repo.get("m", None).expect("served").config().json.clone();
    json["instance_group"][0]["count"] = 2.into();
    let request = LoadRequest {
        config: Some(json.to_string()),
        files: Vec::new(),
    };
    repo.load("m", request).await.expect("grows");
    assert_eq!(backend.instance_counts(), (2, 0));
    assert_eq!(group_count(&repo), [2]);
}

#[tokio::test]
async fn other_changes_load_the_model_anew() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    testing::write_model(root.path(), "m", &cpu(2), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");

    // Another setting beside a new count: every instance is new.
    let batching = cpu(3).replace("max_batch_size: 4", "max_batch_size: 8");
    reload(&repo, root.path(), &batching)
        .await
        .expect("reloads");
    finalized_in_background(&backend, (5, 2)).await;

    // A changed model file, the configuration as it was: loaded anew too.
    std::fs::write(root.path().join("m/1").join(MODEL_FILE), b"new").expect("model file");
    reload(&repo, root.path(), &batching)
        .await
        .expect("reloads");
    finalized_in_background(&backend, (8, 5)).await;
    assert_eq!(echo(&repo).await, [7]);
}

#[tokio::test]
async fn a_failed_update_keeps_the_instances_serving() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    testing::write_model(root.path(), "m", &cpu(2), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");

    // No GPU here: the new group is refused and the model serves as before.
    let gpu = config("{ count: 1 kind: KIND_GPU }");
    let e = reload(&repo, root.path(), &gpu).await.expect_err("no GPU");
    assert!(e.message().contains("KIND_GPU"), "{}", e.message());
    let e = reload(&repo, root.path(), "not a configuration")
        .await
        .expect_err("unparseable");
    assert!(
        e.message().contains("failed to load 'm'"),
        "{}",
        e.message()
    );
    assert_eq!(backend.instance_counts(), (2, 0));
    assert_eq!(group_count(&repo), [2]);
    assert_eq!(echo(&repo).await, [7]);

    // The next update starts from what serves.
    reload(&repo, root.path(), &cpu(4)).await.expect("grows");
    assert_eq!(backend.instance_counts(), (4, 0));
}

#[tokio::test]
async fn requests_in_flight_finish_on_the_instance_that_is_retired() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity().with_delay(Duration::from_millis(300));
    testing::write_model(root.path(), "m", &cpu(1), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");
    let busy = tokio::spawn({
        let repo = repo.clone();
        async move { echo(&repo).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The only instance is busy; a new group of another kind replaces it.
    reload(&repo, root.path(), &config("{ count: 1 kind: KIND_MODEL }"))
        .await
        .expect("replaced");
    assert_eq!(backend.instance_counts(), (2, 1));
    assert_eq!(busy.await.expect("joined"), [7]);
    assert_eq!(echo(&repo).await, [7]);
}

/// A sequence model with `count` CPU instances, sequences released after 5 s idle.
fn sequences(count: u32) -> String {
    format!(
        "{IO}\nsequence_batching {{ max_sequence_idle_microseconds: 5000000 }}\n\
         instance_group [ {{ count: {count} kind: KIND_CPU }} ]"
    )
}

/// Sends one request of sequence `id` (START and END as given), returning the echo.
async fn step(repo: &ModelRepository, id: u64, start: bool, end: bool) -> Vec<i32> {
    let model = repo.get("m", None).expect("served");
    let mut request = testing::request(
        "m",
        "r",
        vec![testing::int32_input("INPUT0", &[1, 1], &[id as i32])],
    );
    request.set_parameter("sequence_id", ParamValue::Uint(id));
    request.set_parameter("sequence_start", ParamValue::Bool(start));
    request.set_parameter("sequence_end", ParamValue::Bool(end));
    let response = model
        .submit(request, std::time::Instant::now())
        .await
        .expect("answered");
    testing::int32s(&response.outputs[0].data)
}

#[tokio::test]
async fn a_sequence_model_updates_in_place_and_a_retired_instance_ends_its_sequences_first() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    testing::write_model(root.path(), "m", &sequences(2), &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");
    // New sequences spread over the instances: one each.
    assert_eq!(step(&repo, 1, true, false).await, [1]);
    assert_eq!(step(&repo, 2, true, false).await, [2]);

    reload(&repo, root.path(), &sequences(4))
        .await
        .expect("grows");
    assert_eq!(backend.instance_counts(), (4, 0));

    // Down to one (an added one is kept): the three others retire, but the first two
    // hold a sequence each and serve it to its end.
    reload(&repo, root.path(), &sequences(1))
        .await
        .expect("shrinks");
    finalized_in_background(&backend, (4, 1)).await;
    assert_eq!(step(&repo, 1, false, false).await, [1]);
    assert_eq!(step(&repo, 3, true, false).await, [3]);
    assert_eq!(step(&repo, 1, false, true).await, [1]);
    finalized_in_background(&backend, (4, 2)).await;
    assert_eq!(step(&repo, 2, false, true).await, [2]);
    finalized_in_background(&backend, (4, 3)).await;
    assert_eq!(step(&repo, 3, false, true).await, [3]);
    assert_eq!(backend.instance_counts(), (4, 3));

    repo.unload("m", false).await.expect("unloads");
    finalized_in_background(&backend, (4, 4)).await;
}

#[test]
fn only_instance_groups_and_version_policy_may_differ() {
    let before = testing::config("m", &cpu(1));
    let mut after = testing::config("m", &cpu(5));
    assert!(same_but_instances(&before, &after));
    let all = format!("{}\nversion_policy {{ all {{}} }}", cpu(5));
    after.version_policy = testing::config("m", &all).version_policy;
    assert!(same_but_instances(&before, &after));
    after.max_batch_size = 2;
    assert!(!same_but_instances(&before, &after));
}

#[test]
fn model_files_leave_out_the_configuration_other_versions_and_bytecode() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path();
    for folder in ["1/__pycache__", "2"] {
        std::fs::create_dir_all(dir.join(folder)).expect("folder");
    }
    let at = |secs| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
    let entry = |p: &str, time| (dir.join(p), 1, time);
    let signature = vec![
        entry("1", at(5)),
        entry("1/model.onnx", at(1)),
        entry("1/__pycache__", at(5)),
        entry("1/__pycache__/model.cpython-311.pyc", at(5)),
        entry("2/model.onnx", at(1)),
        entry("config.pbtxt", at(1)),
        entry("labels.txt", at(1)),
    ];
    let files = model_files(&signature, dir, &dir.join("config.pbtxt"), &[1]);
    assert_eq!(
        files,
        [
            (dir.join("1"), 0, None),
            entry("1/model.onnx", at(1)),
            entry("labels.txt", at(1)),
        ]
    );
}

#[tokio::test]
async fn passive_instances_are_initialized_and_finalized_but_never_sent_requests() {
    let root = tempfile::tempdir().expect("temp dir");
    let backend = TestBackend::identity();
    let groups = config(
        r#"{ name: "active" count: 1 kind: KIND_CPU }, { name: "held" count: 2 kind: KIND_CPU passive: true }"#,
    );
    testing::write_model(root.path(), "m", &groups, &[1]);
    let repo = repository(root.path(), &backend);
    repo.load("m", LoadRequest::default()).await.expect("loads");
    assert_eq!(backend.instance_counts(), (3, 0), "the passive ones too");
    for _ in 0..4 {
        assert_eq!(echo(&repo).await, [7]);
    }
    let ran: Vec<String> = backend
        .executions()
        .into_iter()
        .map(|e| e.instance)
        .collect();
    assert_eq!(ran, ["active_0"; 4]);
    repo.unload("m", false).await.expect("unloads");
    finalized_in_background(&backend, (3, 3)).await;
}
