//! A TRITONCACHE plugin (tests/plugins/memory_cache.c, compiled here with `cc`) behind
//! `nereid_embed::caches::open_store` and `ResponseCache`: hits and misses, full-key comparison over the
//! plugin's hash key, failing plugins served uncached, and load-time errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use nereid_core::cache::key::{CacheKey, KeyData, KeyInput};
use nereid_core::cache::{CacheConfig, CacheStore, CachedOutputs, Outcome, ResponseCache};
use nereid_core::request::OutputTensor;
use nereid_core::{DataType, ErrorKind};
use nereid_embed::caches::library_path;
use tritonserver::cache::CacheLibraries;

/// Compiles the test plugin as `<dir>/<name>/libtritoncache_<name>.so`.
fn build_plugin(dir: &Path, name: &str, defines: &[&str]) -> PathBuf {
    // The executable must keep (and export) the functions the plugin calls.
    std::hint::black_box(tritonserver::exported_functions());
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugins/memory_cache.c");
    let out = library_path(dir, name);
    std::fs::create_dir_all(out.parent().expect("has a parent")).expect("plugin dir");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&source)
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status()
        .expect("a C compiler (`cc`) is needed to build the test plugin");
    assert!(status.success(), "compiling {}", source.display());
    out
}

/// The store `config` means, with this crate's library loader (as the binary asks).
fn open_store(
    config: &CacheConfig,
    directory: Option<&Path>,
) -> nereid_core::Result<Arc<dyn CacheStore>> {
    let kinds = nereid_embed::caches::CacheKinds {
        redis: None,
        libraries: Some(Arc::new(CacheLibraries)),
    };
    nereid_embed::caches::open_store(config, directory, &kinds)
}

fn config(name: &str, settings: &[(&str, &str)]) -> CacheConfig {
    CacheConfig {
        name: name.to_string(),
        settings: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn key(value: u8) -> CacheKey<'static> {
    CacheKey::new(
        "model".into(),
        1,
        vec![KeyInput {
            name: "INPUT0".into(),
            datatype: DataType::Uint8,
            shape: vec![4].into(),
            data: KeyData::Shared(Bytes::from(vec![value; 4])),
        }],
    )
}

fn outputs(value: u8) -> CachedOutputs {
    Arc::new(vec![OutputTensor {
        name: "OUTPUT0".to_string(),
        datatype: DataType::Uint8,
        shape: vec![4],
        data: Bytes::from(vec![value; 4]),
        device: None,
    }])
}

/// Asks the cache for `key`, computing `value` on a miss.
async fn ask(cache: &ResponseCache, key: CacheKey<'_>, value: u8) -> (u8, Outcome) {
    let (result, outcome) = cache
        .get_or_compute(key, || async move { Ok(outputs(value)) })
        .await;
    let outputs = result.expect("computed or cached");
    (outputs[0].data[0], outcome)
}

fn is_hit(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Hit { .. })
}

#[tokio::test]
async fn plugin_serves_hits_and_misses() {
    let dir = tempfile::tempdir().expect("tempdir");
    build_plugin(dir.path(), "memory", &[]);
    let store = open_store(&config("memory", &[("size", "10")]), Some(dir.path())).expect("opens");
    assert!(store.describe().contains("libtritoncache_memory.so"));
    let cache = ResponseCache::new(store);
    let (value, outcome) = ask(&cache, key(1), 10).await;
    assert_eq!(value, 10);
    assert!(matches!(outcome, Outcome::Miss { .. }), "{outcome:?}");
    let (value, outcome) = ask(&cache, key(1), 99).await;
    assert_eq!(value, 10, "the stored answer, not a new computation");
    assert!(is_hit(outcome), "{outcome:?}");
    let (value, outcome) = ask(&cache, key(2), 20).await;
    assert_eq!(value, 20);
    assert!(!is_hit(outcome));
}

#[tokio::test]
async fn colliding_plugin_keys_are_misses_not_wrong_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    build_plugin(dir.path(), "fixed", &[]);
    // Every entry is stored under one key, as if every hash collided.
    let store = open_store(&config("fixed", &[("key", "fixed")]), Some(dir.path())).expect("opens");
    let cache = ResponseCache::new(store);
    assert_eq!(ask(&cache, key(1), 10).await.0, 10);
    let (value, outcome) = ask(&cache, key(2), 20).await;
    assert_eq!(value, 20, "key 2 never gets key 1's answer");
    assert!(!is_hit(outcome));
}

#[tokio::test]
async fn failing_plugin_calls_are_served_uncached() {
    let dir = tempfile::tempdir().expect("tempdir");
    build_plugin(dir.path(), "failing", &[]);
    let insert =
        open_store(&config("failing", &[("fail", "insert")]), Some(dir.path())).expect("opens");
    let error = futures::executor::block_on(insert.insert(&key(1), &outputs(1)))
        .expect_err("the plugin refuses");
    assert!(
        error.message().contains("insert refused"),
        "{}",
        error.message()
    );
    let cache = ResponseCache::new(insert);
    for _ in 0..2 {
        let (value, outcome) = ask(&cache, key(1), 10).await;
        assert_eq!(value, 10);
        assert!(
            matches!(outcome, Outcome::Miss { .. }),
            "a refused insert is a miss"
        );
    }

    let lookup =
        open_store(&config("failing", &[("fail", "lookup")]), Some(dir.path())).expect("opens");
    let cache = ResponseCache::new(lookup);
    for _ in 0..2 {
        let (value, outcome) = ask(&cache, key(1), 10).await;
        assert_eq!(value, 10);
        assert!(!is_hit(outcome), "a failing lookup is a miss");
    }

    let error = open_store(&config("failing", &[("fail", "init")]), Some(dir.path()))
        .err()
        .expect("initialize fails");
    assert_eq!(error.kind(), ErrorKind::InvalidArg);
    assert_eq!(error.message(), "memory cache: refusing to start");
}

#[test]
fn missing_library_and_missing_entry_point_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let error = open_store(&config("absent", &[]), Some(dir.path()))
        .err()
        .expect("no library");
    assert_eq!(error.kind(), ErrorKind::InvalidArg);
    assert_eq!(
        error.message(),
        format!(
            "unable to find 'libtritoncache_absent.so' for cache. Searched: {}",
            dir.path().display()
        )
    );

    let path = build_plugin(dir.path(), "partial", &["NO_LOOKUP"]);
    let error = open_store(&config("partial", &[]), Some(dir.path()))
        .err()
        .expect("no lookup");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    let message = error.message();
    assert!(
        message.starts_with(
            "unable to find required entrypoint 'TRITONCACHE_CacheLookup' in shared library: "
        ),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");

    let broken = library_path(dir.path(), "broken");
    std::fs::create_dir_all(broken.parent().expect("parent")).expect("dir");
    std::fs::write(&broken, b"not a library").expect("write");
    let error = open_store(&config("broken", &[]), Some(dir.path()))
        .err()
        .expect("not loadable");
    assert!(error
        .message()
        .starts_with("unable to load shared library: "));
    assert!(
        error.message().contains(&broken.display().to_string()),
        "{}",
        error.message()
    );
}

#[test]
fn builtin_names_stay_built_in_unless_the_directory_has_the_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local =
        open_store(&config("local", &[("size", "1024")]), Some(dir.path())).expect("built in");
    assert!(
        !local.describe().contains("libtritoncache"),
        "{}",
        local.describe()
    );
    build_plugin(dir.path(), "local", &[]);
    let plugin =
        open_store(&config("local", &[("size", "1024")]), Some(dir.path())).expect("plugin");
    assert!(
        plugin.describe().contains("libtritoncache_local.so"),
        "{}",
        plugin.describe()
    );
    let builtin = open_store(&config("local", &[("size", "1024")]), None).expect("no directory");
    assert!(!builtin.describe().contains("libtritoncache"));
}
