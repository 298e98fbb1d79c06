//! Fuzzing of what a model repository on disk can hold: random trees of model and version
//! directories whose names, files, links, sockets, permissions and sizes are chosen to be
//! awkward (non-UTF-8 and 255-byte names, numbers past `i64`, links to `/dev/zero`, to
//! their own parents and to nothing, sparse files of gigabytes, configurations valid,
//! mutated and absent, warm-up data files of every kind). The repository loads the tree in
//! poll mode, the tree then changes and the repository polls it. Nothing may panic or hang
//! (each step runs under a deadline), and every model that does not load must say why.
//! `NEREID_FUZZ_ITERATIONS` sets the iteration count (see docs/src/development.md, "Fuzzing").

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{ControlMode, ModelRepository, ModelState};
use crate::testing::fuzz::{self, Rng};
use crate::testing::{self, TestBackend};

/// Iterations in the test command (each builds and loads a tree: a few milliseconds).
const SHORT_RUN: u64 = 300;

/// How long one load or poll of a small tree may take before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(20);

/// Names for the first two levels: the usual, and the awkward.
const MODEL_NAMES: &[&str] = &[
    "m",
    "add_sub",
    "ens",
    ".hidden",
    "a b",
    "ünïcödé",
    "-",
    "1",
    "config.pbtxt",
    "with\nnewline",
];
const VERSION_NAMES: &[&str] = &[
    "1",
    "2",
    "0",
    "01",
    "-1",
    "+3",
    "99999999999999999999",
    "9223372036854775807",
    "config.pbtxt",
    "configs",
    "warmup",
    "model.onnx",
];
const LEAF_NAMES: &[&str] = &["model.onnx", "config.pbtxt", "input0", "strings", "c.pbtxt"];

/// Configurations the tree's `config.pbtxt` files start from (the test backend's
/// `identity`), before mutation.
const CONFIGS: &[&str] = &[
    r#"backend: "identity" max_batch_size: 4
       input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
       output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]"#,
    r#"backend: "identity" max_batch_size: 0
       input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
       output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
       version_policy { all {} }
       model_warmup [ { name: "w" batch_size: 1
         inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "input0" } } } ]"#,
    r#"backend: "identity" max_batch_size: 2
       input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
       output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]
       model_warmup [ { name: "w" batch_size: 2
         inputs { key: "INPUT0" value { data_type: TYPE_STRING dims: [ 1 ] input_data_file: "strings" } } } ]"#,
    r#"platform: "ensemble" max_batch_size: 4
       input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
       output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
       ensemble_scheduling { step [ { model_name: "m" model_version: -1
         input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }"#,
    r#"backend: "identity" max_batch_size: 4 default_model_filename: "other.onnx"
       input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
       output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
       version_policy { specific { versions: [ 1, 9223372036854775807 ] } }"#,
];

/// What one path of the tree becomes.
#[derive(Debug, Clone)]
enum Content {
    Dir,
    Config(String),
    /// Raw bytes (empty included).
    Bytes(Vec<u8>),
    /// A sparse file this long: huge, yet nothing written.
    Sparse(u64),
    Link(String),
    /// A listening Unix socket: neither a file nor a directory.
    Socket,
}

/// One entry: a path of one to three components below the root, what it is, and the
/// mode its permissions get (`None`: left as created).
#[derive(Debug, Clone)]
struct Entry {
    path: Vec<Vec<u8>>,
    content: Content,
    mode: Option<u32>,
}

#[derive(Debug)]
struct Tree {
    entries: Vec<Entry>,
    /// Applied between the load and the poll.
    changes: Vec<Entry>,
    /// Paths removed between the load and the poll.
    removals: Vec<Vec<Vec<u8>>>,
}

/// A file name: mostly from the pools, sometimes random bytes (never '/' or NUL), 255
/// bytes (the longest a name may be) or 256 (one more).
fn name(rng: &mut Rng, pool: &[&str]) -> Vec<u8> {
    match rng.below(12) {
        0 => {
            let len = 1 + rng.below(12);
            rng.bytes(len)
        }
        .into_iter()
        .map(|b| if b == b'/' || b == 0 { b'_' } else { b })
        .collect(),
        1 => vec![b'x'; 255 + rng.below(2)],
        _ => rng.pick(pool).as_bytes().to_vec(),
    }
}

fn path(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut path = vec![name(rng, MODEL_NAMES)];
    if !rng.one_in(4) {
        path.push(name(rng, VERSION_NAMES));
        if rng.one_in(2) {
            path.push(name(rng, LEAF_NAMES));
        }
    }
    path
}

fn content(rng: &mut Rng, last: &[u8]) -> Content {
    let is_config = last == b"config.pbtxt" || last.ends_with(b".pbtxt");
    match rng.below(10) {
        0 => Content::Bytes(Vec::new()),
        1 => {
            let len = rng.below(64);
            Content::Bytes(rng.bytes(len))
        }
        2 => Content::Sparse(*rng.pick(&[4 << 20, (4 << 20) + 1, 5 << 30, 1 << 40])),
        3 => Content::Link(
            rng.pick(&[
                "/dev/zero",
                "/nonexistent",
                ".",
                "..",
                "../..",
                "/",
                "1",
                "config.pbtxt",
                "/dev/null",
            ])
            .to_string(),
        ),
        4 => Content::Socket,
        5 | 6 if !is_config => Content::Dir,
        _ if is_config => {
            let mut text = rng.pick(CONFIGS).as_bytes().to_vec();
            if !rng.one_in(2) {
                fuzz::mutate(
                    rng,
                    &mut text,
                    &[],
                    &["model_warmup", "input_data_file"],
                    4096,
                );
            }
            Content::Config(String::from_utf8_lossy(&text).into_owned())
        }
        _ => {
            // Warm-up data: 16 bytes (four FP32 values), too few, or length-prefixed strings.
            let data = match rng.below(3) {
                0 => vec![0u8; 16],
                1 => vec![0u8; 3],
                _ => [&5u32.to_le_bytes()[..], b"hello", &[0xff; 4]].concat(),
            };
            Content::Bytes(data)
        }
    }
}

fn entry(rng: &mut Rng) -> Entry {
    let path = path(rng);
    let last = path.last().cloned().unwrap_or_default();
    let content = content(rng, &last);
    let mode = rng
        .one_in(8)
        .then(|| *rng.pick(&[0o000, 0o200, 0o111, 0o444]));
    Entry {
        path,
        content,
        mode,
    }
}

/// A tree with a well-formed model or two among the noise, so loads get past the scan.
fn generate(rng: &mut Rng) -> Tree {
    let mut entries = Vec::new();
    for model in ["m", "ens"].into_iter().take(1 + rng.below(2)) {
        let config = if model == "ens" {
            CONFIGS[3]
        } else {
            CONFIGS[0]
        };
        entries.push(Entry {
            path: vec![model.into(), b"config.pbtxt".to_vec()],
            content: Content::Config(config.to_string()),
            mode: None,
        });
        entries.push(Entry {
            path: vec![model.into(), b"1".to_vec(), b"model.onnx".to_vec()],
            content: Content::Bytes(Vec::new()),
            mode: None,
        });
    }
    if rng.one_in(3) {
        // A model whose warm-up reads a data file, that file being anything.
        entries.push(Entry {
            path: vec![b"w".to_vec(), b"config.pbtxt".to_vec()],
            content: Content::Config(CONFIGS[1].to_string()),
            mode: None,
        });
        entries.push(Entry {
            path: vec![b"w".to_vec(), b"1".to_vec(), b"model.onnx".to_vec()],
            content: Content::Bytes(Vec::new()),
            mode: None,
        });
        let mut data = entry(rng);
        data.path = vec![b"w".to_vec(), b"warmup".to_vec(), b"input0".to_vec()];
        entries.push(data);
    }
    for _ in 0..rng.below(12) {
        entries.push(entry(rng));
    }
    let changes = (0..rng.below(4)).map(|_| entry(rng)).collect();
    let removals = (0..rng.below(3)).map(|_| path(rng)).collect();
    Tree {
        entries,
        changes,
        removals,
    }
}

fn full_path(root: &Path, path: &[Vec<u8>]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    path.iter().fold(root.to_path_buf(), |p, c| {
        p.join(std::ffi::OsStr::from_bytes(c))
    })
}

/// Makes `entry` under `root` as far as the file system allows (a name too long, a parent
/// that is a file, a path already taken: skipped, as a user's failed `mkdir` would be).
fn make(root: &Path, entry: &Entry, sockets: &mut Vec<std::os::unix::net::UnixListener>) {
    let path = full_path(root, &entry.path);
    if let Some(parent) = path.parent() {
        if std::fs::create_dir_all(parent).is_err() {
            return;
        }
    }
    let _ = std::fs::remove_file(&path);
    let made = match &entry.content {
        Content::Dir => std::fs::create_dir_all(&path),
        Content::Config(text) => std::fs::write(&path, text),
        Content::Bytes(bytes) => std::fs::write(&path, bytes),
        Content::Sparse(len) => std::fs::File::create(&path).and_then(|f| f.set_len(*len)),
        Content::Link(target) => symlink(target, &path),
        Content::Socket => std::os::unix::net::UnixListener::bind(&path).map(|s| sockets.push(s)),
    };
    if let (Ok(()), Some(mode)) = (made, entry.mode) {
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode));
    }
}

/// Gives every path back its owner's permissions so the temporary tree can be removed.
fn restore_permissions(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            restore_permissions(&entry.path());
        } else if kind.is_file() {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644));
        }
    }
}

/// Every model the index lists as not ready says why.
async fn check_index(repo: &ModelRepository, step: &str) {
    let index = tokio::time::timeout(DEADLINE, repo.index(false))
        .await
        .unwrap_or_else(|_| panic!("index after {step} hung"));
    let Ok(index) = index else {
        return;
    };
    for entry in index {
        if entry.state == Some(ModelState::Unavailable) {
            assert!(
                !entry.reason.trim().is_empty(),
                "{} {:?} unavailable without a reason after {step}",
                entry.name,
                entry.version
            );
        }
    }
}

fn check(tree: &Tree, runtime: &tokio::runtime::Runtime) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path();
    let mut sockets = Vec::new();
    for entry in &tree.entries {
        make(root, entry, &mut sockets);
    }
    runtime.block_on(async {
        let options = testing::repository_options(root, ControlMode::Poll, &[]);
        let repo = Arc::new(ModelRepository::new(
            options,
            TestBackend::identity().registry(),
        ));
        let failures = tokio::time::timeout(DEADLINE, repo.load_startup_models())
            .await
            .expect("the start-up load hung");
        if let Ok(failures) = failures {
            for failure in failures {
                assert!(!failure.message().trim().is_empty(), "{failure:?}");
            }
        }
        check_index(&repo, "the start-up load").await;
        for entry in &tree.changes {
            make(root, entry, &mut sockets);
        }
        for removed in &tree.removals {
            let path = full_path(root, removed);
            let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path));
        }
        let polled = tokio::time::timeout(DEADLINE, repo.poll())
            .await
            .expect("the poll hung");
        if let Err(e) = polled {
            assert!(!e.message().trim().is_empty(), "{e:?}");
        }
        check_index(&repo, "the poll").await;
        repo.stop_all();
    });
    restore_permissions(root);
}

#[test]
fn repository_trees() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let ran = fuzz::run("repository_trees", SHORT_RUN, generate, |tree, _| {
        check(tree, &runtime)
    });
    assert!(ran > 0);
}
