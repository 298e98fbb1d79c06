//! The repository flags through a repository on disk with the test backend: the custom
//! configuration name (start-up, explicit load, poll), the load parallelism and retries,
//! namespacing with an ensemble in each of two repositories, and repository agents.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::backend::{Backend, ModelBackend};
use crate::config::ModelConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::model::ModelSpec;
use crate::repository::{
    BackendRegistry, ControlMode, LoadRequest, ModelRepository, RepositoryOptions,
};
use crate::testing::{self, TestBackend};

const CONFIG: &str = r#"backend: "identity" max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]"#;

fn options(roots: &[&Path], mode: ControlMode, flags: RepositoryFlags) -> RepositoryOptions {
    let mut options = testing::repository_options(roots[0], mode, &[]);
    options.roots = roots.iter().map(|r| r.to_path_buf()).collect();
    options.settings.flags = flags;
    options
}

fn repository(root: &Path, mode: ControlMode, flags: RepositoryFlags) -> Arc<ModelRepository> {
    Arc::new(ModelRepository::new(
        options(&[root], mode, flags),
        TestBackend::identity().registry(),
    ))
}

fn max_batch_size(repo: &ModelRepository, name: &str) -> usize {
    repo.get(name, None).expect("served").spec().max_batch_size
}

#[tokio::test]
async fn the_custom_configuration_is_read_where_it_exists() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "custom", CONFIG, &[1]);
    testing::write_model(root.path(), "plain", CONFIG, &[1]);
    let configs = root.path().join("custom/configs");
    std::fs::create_dir(&configs).expect("mkdir");
    std::fs::write(
        configs.join("h100.pbtxt"),
        CONFIG.replace("max_batch_size: 4", "max_batch_size: 2"),
    )
    .expect("write");
    std::fs::create_dir(root.path().join("plain/configs")).expect("mkdir");
    let flags = RepositoryFlags {
        model_config_name: Some("h100".into()),
        ..RepositoryFlags::default()
    };

    let repo = repository(root.path(), ControlMode::Poll, flags.clone());
    assert!(repo.load_startup_models().await.expect("starts").is_empty());
    assert_eq!(max_batch_size(&repo, "custom"), 2);
    assert_eq!(max_batch_size(&repo, "plain"), 4, "no configs/h100.pbtxt");
    // An edit of the custom file is a change that polling reloads.
    std::fs::write(
        configs.join("h100.pbtxt"),
        CONFIG.replace("max_batch_size: 4", "max_batch_size: 3"),
    )
    .expect("write");
    repo.poll().await.expect("polls");
    assert_eq!(max_batch_size(&repo, "custom"), 3);
    // Without the custom file the model falls back to config.pbtxt.
    std::fs::remove_file(configs.join("h100.pbtxt")).expect("remove");
    repo.poll().await.expect("polls");
    assert_eq!(max_batch_size(&repo, "custom"), 4);

    std::fs::write(
        configs.join("h100.pbtxt"),
        CONFIG.replace("max_batch_size: 4", "max_batch_size: 1"),
    )
    .expect("write");
    let repo = repository(root.path(), ControlMode::Explicit, flags);
    repo.load("custom", LoadRequest::default())
        .await
        .expect("loads");
    assert_eq!(max_batch_size(&repo, "custom"), 1);
}

/// A backend (registered as `identity`) whose model loads take `delay`, fail the first
/// `failures` times, and count how many run at once; its auto-completion fails the first
/// `autocomplete_failures` times.
struct SlowFlaky {
    inner: TestBackend,
    delay: Duration,
    failures: AtomicU32,
    autocomplete_failures: AtomicU32,
    attempts: AtomicU32,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl SlowFlaky {
    fn new(delay: Duration, failures: u32) -> Arc<Self> {
        Arc::new(Self {
            inner: TestBackend::identity(),
            delay,
            failures: AtomicU32::new(failures),
            autocomplete_failures: AtomicU32::new(0),
            attempts: AtomicU32::new(0),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        })
    }

    fn registry(self: &Arc<Self>) -> BackendRegistry {
        let mut registry = BackendRegistry::new();
        registry.insert(testing::BACKEND_NAME, self.clone() as Arc<dyn Backend>);
        registry
    }
}

impl Backend for SlowFlaky {
    fn name(&self) -> &str {
        testing::BACKEND_NAME
    }

    fn default_model_filename(&self) -> &'static str {
        testing::MODEL_FILE
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_file: &Path) -> Result<()> {
        let failed = self
            .autocomplete_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failed {
            return Err(Error::internal("auto-completion failed on purpose"));
        }
        Ok(())
    }

    fn load_model(&self, spec: Arc<ModelSpec>, file: &Path) -> Result<Box<dyn ModelBackend>> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, Ordering::SeqCst);
        let failed = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failed {
            return Err(Error::internal("the backend failed on purpose"));
        }
        self.inner.load_model(spec, file)
    }
}

/// The error `get` answers for `name`, which must not be served.
fn refused(repo: &ModelRepository, name: &str) -> Error {
    let Err(e) = repo.get(name, None) else {
        panic!("{name} is served")
    };
    e
}

async fn start_with(
    root: &Path,
    backend: &Arc<SlowFlaky>,
    flags: RepositoryFlags,
) -> (Arc<ModelRepository>, Vec<Error>) {
    let repo = Arc::new(ModelRepository::new(
        options(&[root], ControlMode::None, flags),
        backend.registry(),
    ));
    let failures = repo.load_startup_models().await.expect("starts");
    (repo, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_the_load_thread_count_models_load_at_once() {
    let root = tempfile::tempdir().expect("temp dir");
    for name in ["a", "b", "c", "d"] {
        testing::write_model(root.path(), name, CONFIG, &[1]);
    }
    for (threads, most) in [(1, 1), (2, 2), (0, 1)] {
        let backend = SlowFlaky::new(Duration::from_millis(60), 0);
        let flags = RepositoryFlags {
            load_thread_count: threads,
            ..RepositoryFlags::default()
        };
        let (repo, failures) = start_with(root.path(), &backend, flags).await;
        assert!(failures.is_empty());
        assert_eq!(repo.ready_models().len(), 4);
        assert_eq!(
            backend.most_running.load(Ordering::SeqCst),
            most,
            "--model-load-thread-count={threads}"
        );
    }
}

#[tokio::test]
async fn a_failed_load_is_retried_the_retry_count_times() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "m", CONFIG, &[1]);
    let retries = |n| RepositoryFlags {
        load_retry_count: n,
        ..RepositoryFlags::default()
    };
    // Two failures, two retries: the third attempt loads.
    let backend = SlowFlaky::new(Duration::ZERO, 2);
    let (repo, failures) = start_with(root.path(), &backend, retries(2)).await;
    assert!(failures.is_empty());
    assert!(repo.get("m", None).is_ok());
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 3);
    // Two failures, one retry: the load fails with the backend's reason.
    let backend = SlowFlaky::new(Duration::ZERO, 2);
    let (repo, failures) = start_with(root.path(), &backend, retries(1)).await;
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        failures[0].message(),
        "load failed for model 'm': version 1 is at UNAVAILABLE state: the backend failed on purpose;"
    );
    assert!(repo.get("m", None).is_err());
    // Failures before the backend (here the configuration) are not retried.
    std::fs::write(root.path().join("m/config.pbtxt"), "max_batch_size: [").expect("write");
    let backend = SlowFlaky::new(Duration::ZERO, 0);
    let (_, failures) = start_with(root.path(), &backend, retries(3)).await;
    assert_eq!(failures.len(), 1);
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_failure_in_auto_completion_is_retried_too() {
    let root = tempfile::tempdir().expect("temp dir");
    testing::write_model(root.path(), "m", CONFIG, &[1]);
    let backend = SlowFlaky::new(Duration::ZERO, 0);
    backend.autocomplete_failures.store(2, Ordering::SeqCst);
    let flags = RepositoryFlags {
        load_retry_count: 2,
        ..RepositoryFlags::default()
    };
    let mut options = options(&[root.path()], ControlMode::None, flags);
    options.settings.strict_model_config = false;
    let repo = Arc::new(ModelRepository::new(options, backend.registry()));
    let failures = repo.load_startup_models().await.expect("starts");
    assert!(failures.is_empty(), "{failures:?}");
    assert!(repo.get("m", None).is_ok());
    assert_eq!(backend.attempts.load(Ordering::SeqCst), 1);
}

/// `m` in `root` served by backend `backend` and the ensemble `ensemble` over it.
fn write_namespace(root: &Path, backend: &str, ensemble: &str) {
    testing::write_model(root, "m", &CONFIG.replace("identity", backend), &[1]);
    testing::write_model(
        root,
        ensemble,
        r#"platform: "ensemble" max_batch_size: 4
           input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
           output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
           ensemble_scheduling { step [ { model_name: "m" model_version: -1
             input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }"#,
        &[1],
    );
}

async fn run_ensemble(repo: &ModelRepository, name: &str) {
    let input = testing::int32_input("IN", &[1, 2], &[4, 2]);
    let request = testing::request(name, "r", vec![input]);
    let model = repo.get(name, None).expect("served");
    let response = model
        .submit(request, std::time::Instant::now())
        .await
        .expect("answered");
    assert_eq!(testing::int32s(&response.outputs[0].data), vec![4, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_namespacing_each_ensemble_runs_its_own_repositorys_model() {
    let (a, b) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    write_namespace(a.path(), "identity", "ensemble_a");
    write_namespace(b.path(), "other", "ensemble_b");
    let (backend_a, backend_b) = (TestBackend::identity(), TestBackend::identity());
    let mut registry = backend_a.registry();
    registry.insert("other", Arc::new(backend_b.clone()) as Arc<dyn Backend>);
    let flags = RepositoryFlags {
        namespacing: true,
        ..RepositoryFlags::default()
    };
    let roots = [a.path(), b.path()];

    // Without namespacing the duplicate name fails to load, as before.
    let plain = Arc::new(ModelRepository::new(
        options(&roots, ControlMode::None, RepositoryFlags::default()),
        registry.clone(),
    ));
    let failures = plain.load_startup_models().await.expect("starts");
    assert!(failures
        .iter()
        .any(|e| e.message() == "model 'm' appears in multiple model repositories"));

    let repo = Arc::new(ModelRepository::new(
        options(&roots, ControlMode::Explicit, flags),
        registry,
    ));
    // Loading a name loads it in every namespace; the index lists each.
    repo.load("m", LoadRequest::default()).await.expect("loads");
    let rows: Vec<(String, Option<i64>)> = repo
        .index(true)
        .await
        .expect("index")
        .into_iter()
        .map(|e| (e.name, e.version))
        .collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| *r == ("m".to_string(), Some(1))));
    let e = refused(&repo, "m");
    assert_eq!(e.kind(), ErrorKind::InvalidArg);
    assert_eq!(
        e.message(),
        "There are 2 identifiers of model 'm' in global map, model namespace must be provided to resolve ambiguity."
    );
    assert_eq!(
        repo.ready_models_named("m").err().map(|e| e.to_string()),
        Some("requested model 'm' is not available".to_string())
    );

    for (ensemble, root, used, unused) in [
        ("ensemble_a", a.path(), &backend_a, &backend_b),
        ("ensemble_b", b.path(), &backend_b, &backend_a),
    ] {
        repo.load(ensemble, LoadRequest::default())
            .await
            .expect("loads");
        let (before_used, before_unused) = (used.executions().len(), unused.executions().len());
        run_ensemble(&repo, ensemble).await;
        assert_eq!(used.executions().len(), before_used + 1, "{ensemble}");
        assert_eq!(unused.executions().len(), before_unused, "{ensemble}");
        let config = repo.get(ensemble, None).expect("served").config().clone();
        let steps = &crate::config::ensembling(&config.message)
            .expect("an ensemble")
            .step;
        assert_eq!(steps[0].model_namespace, root.display().to_string());
    }

    // Unloading a name unloads it in every namespace, with the ensembles using it.
    repo.unload("m", false).await.expect("unloads");
    assert!(repo.ready_models().is_empty());
    let e = refused(&repo, "m");
    assert_eq!(e.kind(), ErrorKind::NotFound);
}

/// The backend ensemble `ensemble`'s one step ran on, seen from which of `a` and `b`
/// counted one more execution.
async fn step_backend_of(
    repo: &ModelRepository,
    ensemble: &str,
    a: &TestBackend,
    b: &TestBackend,
) -> &'static str {
    let before = (a.executions().len(), b.executions().len());
    run_ensemble(repo, ensemble).await;
    match (
        a.executions().len() - before.0,
        b.executions().len() - before.1,
    ) {
        (1, 0) => "a",
        (0, 1) => "b",
        other => panic!("{ensemble}: executions {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_ensemble_is_relinked_when_its_own_namespace_gets_the_step_model() {
    let (a, b) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    write_namespace(a.path(), "identity", "ensemble_a");
    write_namespace(b.path(), "other", "ensemble_b");
    let (backend_a, backend_b) = (TestBackend::identity(), TestBackend::identity());
    let mut registry = backend_a.registry();
    registry.insert("other", Arc::new(backend_b.clone()) as Arc<dyn Backend>);
    let flags = RepositoryFlags {
        namespacing: true,
        ..RepositoryFlags::default()
    };
    let c = tempfile::tempdir().expect("temp dir");
    let repo = Arc::new(ModelRepository::new(
        options(&[a.path(), b.path(), c.path()], ControlMode::Poll, flags),
        registry,
    ));
    let failures = repo.load_startup_models().await.expect("starts");
    assert!(failures.is_empty(), "{failures:?}");
    let (ba, bb) = (&backend_a, &backend_b);
    assert_eq!(step_backend_of(&repo, "ensemble_a", ba, bb).await, "a");
    // `a` loses its `m`: both ensembles run on `b`'s.
    let aside = tempfile::tempdir().expect("temp dir");
    std::fs::rename(a.path().join("m"), aside.path().join("m")).expect("moved out");
    repo.poll().await.expect("polls");
    assert_eq!(step_backend_of(&repo, "ensemble_a", ba, bb).await, "b");
    assert_eq!(step_backend_of(&repo, "ensemble_b", ba, bb).await, "b");
    // `m` comes back to `a`: `ensemble_a` prefers it again, `ensemble_b` keeps its own.
    std::fs::rename(aside.path().join("m"), a.path().join("m")).expect("moved back");
    repo.poll().await.expect("polls");
    assert_eq!(step_backend_of(&repo, "ensemble_a", ba, bb).await, "a");
    assert_eq!(step_backend_of(&repo, "ensemble_b", ba, bb).await, "b");
    // `a` loses its `m` again and a third namespace gets one: `ensemble_a`'s step is
    // ambiguous now, and it keeps running on `b`'s rather than losing its model.
    std::fs::rename(a.path().join("m"), aside.path().join("m")).expect("moved out");
    repo.poll().await.expect("polls");
    assert_eq!(step_backend_of(&repo, "ensemble_a", ba, bb).await, "b");
    testing::write_model(c.path(), "m", CONFIG, &[1]);
    repo.poll().await.expect("polls");
    assert_eq!(step_backend_of(&repo, "ensemble_a", ba, bb).await, "b");
}

#[tokio::test]
async fn repository_agents_run_before_the_model_loads() {
    let root = tempfile::tempdir().expect("temp dir");
    let agent = |name: &str, parameters: &str| {
        format!(
            "{CONFIG} model_repository_agents {{ agents [ {{ name: \"{name}\" {parameters} }} ] }}"
        )
    };
    // The test backend's model file is empty: its MD5 is that of no bytes.
    let empty = "d41d8cd98f00b204e9800998ecf8427e";
    let model_file = format!("1/{}", testing::MODEL_FILE);
    testing::write_model(
        root.path(),
        "good",
        &agent(
            "checksum",
            &format!(r#"parameters {{ key: "MD5:{model_file}" value: "{empty}" }}"#),
        ),
        &[1],
    );
    testing::write_model(
        root.path(),
        "bad",
        &agent(
            "checksum",
            &format!(r#"parameters {{ key: "MD5:{model_file}" value: "00" }}"#),
        ),
        &[1],
    );
    testing::write_model(root.path(), "other", &agent("decrypt", ""), &[1]);
    let agents = tempfile::tempdir().expect("temp dir");
    let flags = RepositoryFlags {
        repoagent_directory: agents.path().to_path_buf(),
        ..RepositoryFlags::default()
    };
    let repo = repository(root.path(), ControlMode::Explicit, flags);
    repo.load("good", LoadRequest::default())
        .await
        .expect("checksum matches");
    let e = repo
        .load("bad", LoadRequest::default())
        .await
        .expect_err("mismatch");
    assert_eq!(
        e.message(),
        format!("failed to load 'bad', failed to poll from model repository: Mismatched MD5 hash for file {model_file}, expect: 00, got: {empty}")
    );
    let e = repo
        .load("other", LoadRequest::default())
        .await
        .expect_err("no such agent");
    assert_eq!(
        e.message(),
        format!(
            "failed to load 'other', failed to poll from model repository: unable to find 'libtritonrepoagent_decrypt.so' for repo agent 'decrypt', searched: {}",
            agents.path().display()
        )
    );
    // An ensemble's agents run too.
    write_namespace(root.path(), "identity", "e");
    let config = std::fs::read_to_string(root.path().join("e/config.pbtxt")).expect("read");
    std::fs::write(
        root.path().join("e/config.pbtxt"),
        format!("{config} model_repository_agents {{ agents [ {{ name: \"decrypt\" }} ] }}"),
    )
    .expect("write");
    let e = repo
        .load("e", LoadRequest::default())
        .await
        .expect_err("no such agent");
    assert!(
        e.message()
            .contains("unable to find 'libtritonrepoagent_decrypt.so'"),
        "{}",
        e.message()
    );
}
