//! Registering repositories at run time: Triton's refusals and messages, a mapped
//! directory loading under its mapped name (its configuration renamed), an ensemble
//! archive loading its composing model from the same repository, two archives with the
//! same directory name side by side, and unregistering.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::error::ErrorKind;
use crate::repository::LoadRequest;
use crate::testing::{self, TestBackend};

const CONFIG: &str = r#"name: "add_sub" backend: "identity" max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]"#;

const ENSEMBLE: &str = r#"name: "pipeline" platform: "ensemble" max_batch_size: 4
    input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
    ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1
      input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }"#;

fn repository(root: &Path, control_mode: ControlMode) -> Arc<ModelRepository> {
    repository_with(root, control_mode, false)
}

fn repository_with(
    root: &Path,
    control_mode: ControlMode,
    namespacing: bool,
) -> Arc<ModelRepository> {
    let mut options = testing::repository_options(root, control_mode, &[]);
    options.settings.flags.namespacing = namespacing;
    Arc::new(ModelRepository::new(
        options,
        TestBackend::identity().registry(),
    ))
}

/// A model archive holding `add_sub` (and the ensemble over it when `ensemble`).
fn archive(ensemble: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    testing::write_model(dir.path(), "add_sub", CONFIG, &[1]);
    if ensemble {
        testing::write_model(dir.path(), "pipeline", ENSEMBLE, &[1]);
    }
    dir
}

fn mapping(dir: &str, name: &str) -> Vec<(String, String)> {
    vec![(dir.to_string(), name.to_string())]
}

/// Registers `dir`, its `subdir` mapped to `name`, and loads `name`.
async fn register_and_load(repo: &Arc<ModelRepository>, dir: &Path, subdir: &str, name: &str) {
    repo.register_repository(dir, &mapping(subdir, name))
        .await
        .expect("registered");
    repo.load(name, LoadRequest::default())
        .await
        .expect("loads");
}

/// The model names the index lists, sorted (with namespacing the index is in the order
/// of the repositories' paths, here random).
async fn index_names(repo: &ModelRepository, ready_only: bool) -> Vec<String> {
    let index = repo.index(ready_only).await.expect("readable");
    let mut names: Vec<String> = index.into_iter().map(|e| e.name).collect();
    names.sort();
    names
}

/// The kind and message of a registration `repo` refuses.
async fn refusal(
    repo: &ModelRepository,
    path: &Path,
    mapping: &[(String, String)],
) -> (ErrorKind, String) {
    match repo.register_repository(path, mapping).await {
        Ok(()) => panic!("{} registered", path.display()),
        Err(e) => (e.kind(), e.message().to_string()),
    }
}

#[tokio::test]
async fn registration_is_refused_as_triton_refuses_it() {
    let root = tempfile::tempdir().expect("temp dir");
    let (a, b) = (archive(false), archive(false));
    let (shown_a, shown_root) = (a.path().display(), root.path().display());
    let polled = repository(root.path(), ControlMode::None);
    assert_eq!(
        refusal(&polled, a.path(), &mapping("add_sub", "h1")).await,
        (
            ErrorKind::Unsupported,
            "repository registration is not allowed if model control mode is not EXPLICIT".into()
        )
    );
    let repo = repository(root.path(), ControlMode::Explicit);
    let missing = root.path().join("missing");
    assert_eq!(
        refusal(&repo, &missing, &[]).await,
        (
            ErrorKind::InvalidArg,
            format!(
                "failed to register '{}', repository not found",
                missing.display()
            )
        )
    );
    assert_eq!(
        refusal(&repo, root.path(), &[]).await,
        (
            ErrorKind::AlreadyExists,
            format!("model repository '{shown_root}' has already been registered")
        )
    );
    let twice = [mapping("add_sub", "h"), mapping("other", "h")].concat();
    assert_eq!(
        refusal(&repo, a.path(), &twice).await,
        (
            ErrorKind::InvalidArg,
            format!("failed to register '{shown_a}', there is a conflicting mapping for 'h'")
        )
    );
    repo.register_repository(a.path(), &mapping("add_sub", "h1"))
        .await
        .expect("registered");
    assert_eq!(
        refusal(&repo, a.path(), &mapping("add_sub", "h2")).await,
        (
            ErrorKind::AlreadyExists,
            format!("model repository '{shown_a}' has already been registered")
        )
    );
    assert_eq!(
        refusal(&repo, b.path(), &mapping("add_sub", "h1")).await,
        (
            ErrorKind::AlreadyExists,
            "failed to register 'h1', there is a conflicting mapping for 'h1'".into()
        )
    );
    let nowhere = root.path().join("nowhere");
    let e = repo
        .unregister_repository(&nowhere)
        .expect_err("never known");
    assert_eq!(
        e.message(),
        format!(
            "failed to unregister '{}', repository not found",
            nowhere.display()
        )
    );
}

#[tokio::test]
async fn a_startup_repository_unregistered_serves_no_loads_until_registered_again() {
    // Triton's test_binding.py::test_server_explicit.
    let root = archive(false);
    let repo = repository(root.path(), ControlMode::Explicit);
    repo.unregister_repository(root.path())
        .expect("a startup root");
    let e = repo
        .unregister_repository(root.path())
        .expect_err("already withdrawn");
    assert!(e.message().ends_with("repository not found"), "{e:?}");
    repo.load("add_sub", LoadRequest::default())
        .await
        .expect_err("no repository holds it");
    repo.register_repository(root.path(), &[])
        .await
        .expect("registered again");
    assert_eq!(repo.roots(), [root.path().to_path_buf()], "listed once");
    repo.load("add_sub", LoadRequest::default())
        .await
        .expect("loads from it again");
}

#[tokio::test]
async fn mapped_directories_load_under_their_mapped_names() {
    for namespacing in [false, true] {
        mapped_directories_load(namespacing).await;
    }
}

/// Two archives with the same directory, under two names; one unloaded and unregistered
/// (and forgotten), then registered and loaded again.
async fn mapped_directories_load(namespacing: bool) {
    let root = tempfile::tempdir().expect("temp dir");
    let repo = repository_with(root.path(), ControlMode::Explicit, namespacing);
    let (a, b) = (archive(false), archive(false));
    for (dir, name) in [(&a, "h1"), (&b, "h2")] {
        register_and_load(&repo, dir.path(), "add_sub", name).await;
    }
    for name in ["h1", "h2"] {
        let model = repo.get(name, Some(1)).expect("ready");
        assert_eq!(model.spec().name, name, "named after the mapping");
    }
    assert_eq!(index_names(&repo, true).await, vec!["h1", "h2"]);
    repo.unload("h1", true).await.expect("unloads");
    repo.unregister_repository(a.path()).expect("unregistered");
    assert_eq!(index_names(&repo, false).await, vec!["h2"]);
    assert!(repo.get("h1", None).is_err());
    let gone = repo.load("h1", LoadRequest::default()).await;
    let message = gone.expect_err("gone").message().to_string();
    assert!(message.starts_with("failed to load 'h1'"), "{message}");
    // The repository can be registered again, as SageMaker does to reload an archive.
    register_and_load(&repo, a.path(), "add_sub", "h1").await;
}

#[tokio::test]
async fn an_ensemble_archive_loads_its_composing_model_from_the_archive() {
    let root = tempfile::tempdir().expect("temp dir");
    let repo = repository(root.path(), ControlMode::Explicit);
    let a = archive(true);
    register_and_load(&repo, a.path(), "pipeline", "ens").await;
    assert_eq!(index_names(&repo, true).await, vec!["add_sub", "ens"]);
    let model = repo.get("ens", None).expect("ready");
    let request = testing::request(
        "ens",
        "r",
        vec![testing::int32_input("IN", &[1, 2], &[4, 2])],
    );
    let response = model
        .submit(request, std::time::Instant::now())
        .await
        .expect("runs");
    assert_eq!(testing::int32s(&response.outputs[0].data), vec![4, 2]);
    repo.unload("ens", true).await.expect("unloads");
    assert!(
        index_names(&repo, true).await.is_empty(),
        "dependents unloaded too"
    );
    assert!(
        repo.all_ready(),
        "models unloaded through the API do not count against strict readiness"
    );
    repo.unregister_repository(a.path()).expect("unregistered");
    assert!(
        index_names(&repo, false).await.is_empty(),
        "an unregistered repository's unloaded models are forgotten"
    );
    assert!(repo.all_ready());
}

#[tokio::test]
async fn a_mapped_name_wins_over_a_directory_of_that_name_and_one_directory_takes_several() {
    // Triton's register_api_test: in EXPLICIT mode a mapping is looked up first, so a
    // directory merely called like a mapped name neither conflicts nor loads; one
    // directory mapped to two names loads under each; a name two repositories hold is
    // Triton's generic poll failure (INTERNAL), the conflict only logged.
    let root = tempfile::tempdir().expect("temp dir");
    let repo = repository(root.path(), ControlMode::Explicit);
    let (a, b) = (archive(false), archive(false));
    testing::write_model(b.path(), "m1", CONFIG, &[3]);
    let names = vec![
        ("add_sub".to_string(), "m1".to_string()),
        ("add_sub".to_string(), "m2".to_string()),
    ];
    repo.register_repository(b.path(), &names)
        .await
        .expect("registered");
    for name in ["m1", "m2"] {
        repo.load(name, LoadRequest::default())
            .await
            .expect("loads the mapped directory");
        // Version 1 is add_sub's; the directory called m1 has only version 3.
        assert!(repo.get(name, Some(1)).is_ok(), "{name} from add_sub");
    }
    repo.register_repository(a.path(), &[])
        .await
        .expect("registered");
    testing::write_model(root.path(), "add_sub", CONFIG, &[1]);
    let e = repo
        .load("add_sub", LoadRequest::default())
        .await
        .expect_err("in two repositories");
    assert_eq!(
        (e.kind(), e.message()),
        (
            ErrorKind::Internal,
            "failed to load 'add_sub', failed to poll from model repository"
        )
    );
}
