//! The repository in explicit mode over a model directory on disk, with the test backend:
//! load, unload and reload, the index's states and reasons, failed loads and reloads as
//! the code reports them today, and version policies.

use std::path::Path;

use super::super::overrides::LoadRequest;
use super::*;
use crate::error::ErrorKind;
use crate::testing::{self, TestBackend, MODEL_FILE};

const CONFIG: &str = r#"backend: "identity" max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]"#;

fn repository(root: &Path, control_mode: ControlMode) -> Arc<ModelRepository> {
    let options = testing::repository_options(root, control_mode, &[]);
    Arc::new(ModelRepository::new(
        options,
        TestBackend::identity().registry(),
    ))
}

/// `(name, version, state, reason)` of an index row.
type Row = (String, Option<i64>, Option<&'static str>, String);

async fn index(repo: &ModelRepository, ready_only: bool) -> Vec<Row> {
    repo.index(ready_only)
        .await
        .expect("readable repository")
        .into_iter()
        .map(|e| (e.name, e.version, e.state.map(ModelState::as_str), e.reason))
        .collect()
}

fn row(name: &str, version: Option<i64>, state: Option<&'static str>, reason: &str) -> Row {
    (name.to_string(), version, state, reason.to_string())
}

/// The error `get` answers for a model version that is not served.
fn not_served(repo: &ModelRepository, name: &str, version: Option<i64>) -> Error {
    let Err(e) = repo.get(name, version) else {
        panic!("{name} {version:?} is served")
    };
    e
}

async fn echo(repo: &ModelRepository, name: &str, version: Option<i64>) -> Result<Vec<i32>> {
    let model = repo.get(name, version)?;
    let request = testing::request(
        name,
        "r",
        vec![testing::int32_input("INPUT0", &[1, 2], &[4, 2])],
    );
    let response = model.submit(request, std::time::Instant::now()).await?;
    Ok(testing::int32s(&response.outputs[0].data))
}

#[tokio::test]
async fn explicit_load_unload_and_reload() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "a", CONFIG, &[1]);
    testing::write_model(root.path(), "b", CONFIG, &[1]);
    let repo = repository(root.path(), ControlMode::Explicit);
    assert!(repo.load_startup_models().await.expect("starts").is_empty());
    // Nothing loaded: the index lists the directories without states.
    assert_eq!(
        index(&repo, false).await,
        vec![row("a", None, None, ""), row("b", None, None, "")]
    );
    assert!(index(&repo, true).await.is_empty());
    let e = not_served(&repo, "a", None);
    assert_eq!(e.message(), "Request for unknown model: 'a' is not found");

    repo.load("a", LoadRequest::default()).await.expect("loads");
    assert_eq!(echo(&repo, "a", None).await.expect("served"), vec![4, 2]);
    assert_eq!(
        index(&repo, true).await,
        vec![row("a", Some(1), Some("READY"), "")]
    );
    assert!(repo.all_ready());

    repo.unload("a", false).await.expect("unloads");
    assert_eq!(
        index(&repo, false).await,
        vec![
            row("a", Some(1), Some("UNAVAILABLE"), "unloaded"),
            row("b", None, None, "")
        ]
    );
    assert!(
        repo.all_ready(),
        "an explicit unload leaves the server ready, as Triton's IsReady"
    );
    let e = not_served(&repo, "a", None);
    assert_eq!(
        e.message(),
        "Request for unknown model: 'a' has no available versions"
    );
    let e = not_served(&repo, "a", Some(1));
    assert_eq!(
        e.message(),
        "Request for unknown model: 'a' version 1 is not found"
    );
    // Unloading what is not loaded succeeds, as in Triton.
    repo.unload("b", false).await.expect("no-op");

    // A reload picks up what changed on disk: a new version directory and policy.
    testing::write_model(
        root.path(),
        "a",
        &format!("{CONFIG} version_policy: {{ latest {{ num_versions: 2 }} }}"),
        &[1, 2],
    );
    repo.load("a", LoadRequest::default())
        .await
        .expect("reloads");
    assert_eq!(
        index(&repo, true).await,
        vec![
            row("a", Some(1), Some("READY"), ""),
            row("a", Some(2), Some("READY"), "")
        ]
    );
    assert_eq!(repo.get("a", None).expect("ready").spec().version, 2);
    assert_eq!(echo(&repo, "a", Some(1)).await.expect("served"), vec![4, 2]);

    let e = repo
        .load("zz", LoadRequest::default())
        .await
        .expect_err("no such directory");
    assert_eq!(
        (e.kind(), e.message()),
        (
            ErrorKind::Internal,
            "failed to load 'zz', failed to poll from model repository"
        )
    );
}

#[tokio::test]
async fn failed_loads_and_reloads_are_reported_in_the_index() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "a", CONFIG, &[1]);
    let repo = repository(root.path(), ControlMode::Explicit);
    repo.load("a", LoadRequest::default()).await.expect("loads");

    // The model file disappears: the reload fails for the version...
    let file = root.path().join("a/1").join(MODEL_FILE);
    std::fs::remove_file(&file).expect("remove");
    let e = repo
        .load("a", LoadRequest::default())
        .await
        .expect_err("no model file");
    let reason = format!("unable to find '{}' for model 'a'", file.display());
    assert_eq!(e.kind(), ErrorKind::InvalidArg);
    assert_eq!(
        e.message(),
        format!("load failed for model 'a': version 1 is at UNAVAILABLE state: {reason};")
    );
    // ...but the version that was serving keeps serving, as in Triton.
    assert_eq!(
        index(&repo, false).await,
        vec![row("a", Some(1), Some("READY"), "")]
    );
    assert!(repo.get("a", None).is_ok());
    assert!(repo.all_ready());

    // On a model that is not loaded the same failure shows in the index.
    repo.unload("a", false).await.expect("unloads");
    repo.load("a", LoadRequest::default())
        .await
        .expect_err("no model file");
    assert_eq!(
        index(&repo, false).await,
        vec![row("a", Some(1), Some("UNAVAILABLE"), &reason)]
    );
    assert!(repo.get("a", None).is_err());
    assert!(!repo.all_ready());

    // A configuration that cannot be read fails before any version is tried.
    std::fs::write(root.path().join("a/config.pbtxt"), "max_batch_size: [").expect("write");
    let e = repo
        .load("a", LoadRequest::default())
        .await
        .expect_err("bad config");
    assert_eq!(e.kind(), ErrorKind::Internal);
    assert!(
        e.message()
            .starts_with("failed to load 'a', failed to poll from model repository: "),
        "{}",
        e.message()
    );
    let rows = index(&repo, false).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].1, rows[0].2), (None, Some("UNAVAILABLE")));
    assert!(
        e.message().ends_with(&rows[0].3),
        "the reason is the parse error"
    );
    assert!(
        repo.all_ready(),
        "a model whose configuration cannot be read never reaches Triton's lifecycle and does not hold readiness"
    );

    // An unknown backend fails every selected version.
    testing::write_model(root.path(), "a", &CONFIG.replace("identity", "nope"), &[1]);
    let e = repo
        .load("a", LoadRequest::default())
        .await
        .expect_err("no backend");
    assert_eq!(
        e.message(),
        "load failed for model 'a': version 1 is at UNAVAILABLE state: unable to find backend library for backend 'nope', try specifying runtime on the model configuration.;"
    );
}

#[tokio::test]
async fn load_and_unload_need_explicit_mode() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "a", CONFIG, &[1]);
    let repo = repository(root.path(), ControlMode::None);
    assert!(repo.load_startup_models().await.expect("starts").is_empty());
    assert_eq!(
        index(&repo, true).await,
        vec![row("a", Some(1), Some("READY"), "")]
    );
    for e in [
        repo.load("a", LoadRequest::default())
            .await
            .expect_err("not explicit"),
        repo.unload("a", false).await.expect_err("not explicit"),
    ] {
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert_eq!(
            e.message(),
            "explicit model load / unload is not allowed if polling is enabled"
        );
    }
}

#[tokio::test]
async fn version_policies_choose_the_versions_loaded() {
    let root = tempfile::tempdir().expect("temp dir");
    let policies = [
        ("latest", "", vec![3]),
        ("all", "version_policy: { all { } }", vec![1, 2, 3]),
        (
            "specific",
            "version_policy: { specific { versions: [ 1, 3, 7 ] } }",
            vec![1, 3],
        ),
    ];
    for (name, policy, _) in &policies {
        testing::write_model(root.path(), name, &format!("{CONFIG} {policy}"), &[1, 2, 3]);
    }
    testing::write_model(
        root.path(),
        "none",
        &format!("{CONFIG} version_policy: {{ specific {{ versions: [ 7 ] }} }}"),
        &[1],
    );
    let repo = repository(root.path(), ControlMode::Explicit);
    for (name, _, versions) in policies {
        repo.load(name, LoadRequest::default())
            .await
            .expect("loads");
        let ready: Vec<Option<i64>> = index(&repo, true)
            .await
            .into_iter()
            .filter(|r| r.0 == name)
            .map(|r| r.1)
            .collect();
        assert_eq!(
            ready,
            versions.iter().map(|v| Some(*v)).collect::<Vec<_>>(),
            "{name}"
        );
        for v in versions {
            assert_eq!(repo.get(name, Some(v)).expect("ready").spec().version, v);
        }
    }
    assert!(repo.get("specific", Some(2)).is_err(), "not selected");
    let e = repo
        .load("none", LoadRequest::default())
        .await
        .expect_err("nothing selected");
    assert_eq!(
        e.message(),
        "failed to load 'none', failed to poll from model repository: at least one version must be available under the version policy of model 'none'"
    );
}

/// Without auto-completion, a configuration's faults are reported before the missing
/// versions, as Triton validates when it reads the repository (L0_model_config's
/// `noautofill_platform` cases have no version folder).
#[tokio::test]
async fn a_strict_configuration_is_validated_before_its_versions_are_looked_for() {
    let root = tempfile::tempdir().expect("temp dir");
    let bad_group = format!("{CONFIG} instance_group [ {{ kind: KIND_CPU gpus: [ 0 ] }} ]");
    testing::write_model(root.path(), "bad", &bad_group, &[]);
    testing::write_model(root.path(), "good", CONFIG, &[]);
    let repo = repository(root.path(), ControlMode::Explicit);
    let message = |name: &'static str| {
        let repo = repo.clone();
        async move {
            repo.load(name, LoadRequest::default())
                .await
                .expect_err("no version")
                .message()
                .to_string()
        }
    };
    assert_eq!(
        message("bad").await,
        "failed to load 'bad', failed to poll from model repository: instance group bad_0 of model bad has kind KIND_CPU but specifies one or more GPUs"
    );
    assert!(message("good").await.ends_with(
        "at least one version must be available under the version policy of model 'good'"
    ),);
}

#[tokio::test]
async fn a_failed_reload_keeps_the_loaded_version_serving() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "a", CONFIG, &[1]);
    let repo = repository(root.path(), ControlMode::Explicit);
    repo.load("a", LoadRequest::default()).await.expect("loads");
    std::fs::remove_file(root.path().join("a/1").join(MODEL_FILE)).expect("remove");
    repo.load("a", LoadRequest::default())
        .await
        .expect_err("the reload fails");
    assert_eq!(
        echo(&repo, "a", None).await.expect("still served"),
        vec![4, 2]
    );
    assert!(repo.all_ready());
    // A configuration edit that no longer parses fails before any version is tried: the
    // loaded version still serves.
    std::fs::write(root.path().join("a/config.pbtxt"), "max_batch_size: [").expect("write");
    repo.load("a", LoadRequest::default())
        .await
        .expect_err("bad config");
    assert_eq!(
        echo(&repo, "a", None).await.expect("still served"),
        vec![4, 2]
    );
    assert!(repo.all_ready());
}
