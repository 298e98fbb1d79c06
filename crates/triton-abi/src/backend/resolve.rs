//! Which library serves a model, found as Triton's core finds it (core
//! `src/backend_model.cc`: `GetBackendLibrarySearchPaths`, `GetBackendLibraryProperties`,
//! `GetBackendRuntimeLibraryName`, `FindBackendLibraryPath`; `src/model_config_utils.cc`:
//! `SetPythonBasedBackendExecutionEnvironment`), with Triton's messages:
//! - `libtriton_<backend>.so`, or the configuration's `runtime`, in `<model>/<version>/`,
//!   `<model>/`, then `<backend-directory>/<backend>/`; a `runtime` whose library lies
//!   outside the folder it was found in is refused;
//! - with no such library, `<backend-directory>/<backend>/model.py` makes a
//!   *python-based backend*: the python backend's library serving under the name
//!   `<backend>`, its artifacts folder `<backend-directory>/<backend>` (where the python
//!   backend takes `model.py` from), `runtime` set to `model.py`, and the folder's
//!   `pb_exec_env_model.py.tar.gz` as the model's `EXECUTION_ENV_PATH` unless it sets
//!   one. `runtime: "model.py"` asks for the same explicitly.

use std::path::{Path, PathBuf};

use nereid_core::backend::ModelSite;
use nereid_core::config::ModelConfig;
use nereid_core::{Error, Result};
use nereid_proto::inference::ModelParameter;

/// The python backend's name: its library serves the python-based backends too.
pub const PYTHON_BACKEND: &str = "python";

/// A python-based backend's file, and the `runtime` that asks for one.
pub const PYTHON_FILENAME: &str = "model.py";

/// The model parameter naming a python model's execution environment.
const EXECUTION_ENV_PATH: &str = "EXECUTION_ENV_PATH";

/// Where a model's backend library is, as Triton's core resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendLocation {
    /// The backend's name, the model's `backend` (also for a python-based backend, which
    /// the python backend's library serves under this name).
    pub name: String,
    /// The library to load.
    pub library: PathBuf,
    /// What `TRITONBACKEND_BackendArtifacts` answers: the folder the library was found
    /// in, or a python-based backend's own folder (holding its `model.py`).
    pub directory: PathBuf,
    /// Served by the python backend's library with `<directory>/model.py`.
    pub python_based: bool,
}

impl BackendLocation {
    /// The backend whose `--backend-config` settings this one gets: its own, or the
    /// python backend's for a python-based backend (Triton's `ResolveBackendConfigs`).
    pub fn config_name(&self) -> &str {
        if self.python_based {
            PYTHON_BACKEND
        } else {
            &self.name
        }
    }

    /// What the backend is shared under, beside its name: Triton's backend manager
    /// keeps a library by its path and a python-based backend by its `model.py`, so two
    /// models naming the same library and backend share one initialized backend.
    pub fn key(&self) -> PathBuf {
        if self.python_based {
            self.directory.join(PYTHON_FILENAME)
        } else {
            self.library.clone()
        }
    }
}

/// The library serving the model at `site` with configuration `config`, whose backends
/// are in `backend_dir` (`--backend-directory`). Completes `config` for a python-based
/// backend (`runtime`, `EXECUTION_ENV_PATH`) as Triton does.
pub fn resolve(
    backend_dir: &Path,
    site: &ModelSite<'_>,
    config: &mut ModelConfig,
) -> Result<BackendLocation> {
    let name = config.backend.clone();
    let mut search = vec![
        join(site.dir, &site.version.to_string()),
        site.dir.to_path_buf(),
        join(backend_dir, &name),
    ];
    // A python-based backend found by its model.py (runtime not given): its folder.
    let mut found_python_dir = None;
    let runtime = if config.runtime.is_empty() {
        let library_name = cpp_library_name(&name);
        if let Some((directory, library)) = find(&search, &library_name) {
            return Ok(BackendLocation {
                name,
                library,
                directory,
                python_based: false,
            });
        }
        let Some((directory, _)) = find(&[join(backend_dir, &name)], PYTHON_FILENAME) else {
            return Err(Error::invalid_arg(format!(
                "unable to find backend library for backend '{name}', try specifying runtime on the model configuration."
            )));
        };
        found_python_dir = Some(directory);
        config.runtime = PYTHON_FILENAME.to_string();
        PYTHON_FILENAME.to_string()
    } else {
        config.runtime.clone()
    };
    let python_based = runtime == PYTHON_FILENAME;
    let library_name = if python_based {
        search.push(join(backend_dir, PYTHON_BACKEND));
        cpp_library_name(PYTHON_BACKEND)
    } else {
        runtime.clone()
    };
    let model = site.name;
    let Some((directory, library)) = find(&search, &library_name) else {
        let searched: String = search
            .iter()
            .map(|p| format!("'{}' ", p.display()))
            .collect();
        return Err(Error::invalid_arg(format!(
            "unable to find backend library '{library_name}' for model '{model}', searched: {searched}"
        )));
    };
    if escapes(&library, &directory)? {
        return Err(Error::invalid_arg(format!(
            "backend library name '{library_name}' escapes backend directory '{}', for model '{model}', check model config runtime field",
            directory.display()
        )));
    }
    if !python_based {
        return Ok(BackendLocation {
            name,
            library,
            directory,
            python_based,
        });
    }
    let directory = match found_python_dir {
        Some(directory) => directory,
        None => {
            let directory = join(backend_dir, &name);
            let model_py = join(&directory, PYTHON_FILENAME);
            if !model_py.exists() {
                return Err(Error::invalid_arg(format!(
                    "unable to find Python backend based backend library '{runtime}' for model '{model}', searched: '{}'",
                    model_py.display()
                )));
            }
            directory
        }
    };
    set_execution_environment(&directory, config);
    Ok(BackendLocation {
        name,
        library,
        directory,
        python_based,
    })
}

/// `libtriton_<backend>.so`.
fn cpp_library_name(backend: &str) -> String {
    format!("libtriton_{backend}.so")
}

/// `segment` under `dir` as Triton's `JoinPath` puts it: an absolute segment is
/// appended too, not taken alone.
fn join(dir: &Path, segment: &str) -> PathBuf {
    dir.join(segment.trim_start_matches('/'))
}

/// The first folder of `search` holding `file` (anything by that name, as Triton's
/// `access(F_OK)`), and the file's path there.
fn find(search: &[PathBuf], file: &str) -> Option<(PathBuf, PathBuf)> {
    search.iter().find_map(|dir| {
        let path = join(dir, file);
        path.exists().then(|| (dir.clone(), path))
    })
}

/// Whether `child`, with links and `..` resolved, lies outside `parent` (Triton's
/// `IsChildPathEscapingParentPath`); both exist.
fn escapes(child: &Path, parent: &Path) -> Result<bool> {
    let canonical = |path: &Path, what: &str| {
        std::fs::canonicalize(path).map_err(|e| {
            Error::invalid_arg(format!(
                "Failed to canonicalize {what} path '{}': {e}",
                path.display()
            ))
        })
    };
    let child = canonical(child, "child")?;
    let parent = canonical(parent, "parent")?;
    Ok(!child.starts_with(parent))
}

/// Triton's `SetPythonBasedBackendExecutionEnvironment`: the backend folder's
/// `pb_exec_env_<runtime>.tar.gz`, when there, is the model's execution environment
/// unless the configuration names one.
fn set_execution_environment(directory: &Path, config: &mut ModelConfig) {
    if config.parameters.contains_key(EXECUTION_ENV_PATH) {
        return;
    }
    let environment = join(directory, &format!("pb_exec_env_{}.tar.gz", config.runtime));
    if environment.exists() {
        config.parameters.insert(
            EXECUTION_ENV_PATH.to_string(),
            ModelParameter {
                string_value: environment.to_string_lossy().into_owned(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend directory and a model `m` (version 1) in one temporary folder.
    struct Layout {
        root: tempfile::TempDir,
    }

    impl Layout {
        fn new() -> Self {
            let root = tempfile::tempdir().expect("temp dir");
            std::fs::create_dir_all(root.path().join("models/m/1")).expect("model dir");
            std::fs::create_dir_all(root.path().join("backends/python")).expect("python dir");
            let layout = Self { root };
            layout.file("backends/python/libtriton_python.so");
            layout
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.root.path().join(relative)
        }

        fn file(&self, relative: &str) -> PathBuf {
            let path = self.path(relative);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, b"").expect("write");
            path
        }

        /// Resolves model `m` with `backend` and `runtime`; the configuration after.
        fn resolve(&self, backend: &str, runtime: &str) -> (Result<BackendLocation>, ModelConfig) {
            let mut config = ModelConfig {
                name: "m".into(),
                backend: backend.into(),
                runtime: runtime.into(),
                ..Default::default()
            };
            let dir = self.path("models/m");
            let site = ModelSite {
                name: "m",
                dir: &dir,
                version: 1,
            };
            let found = resolve(&self.path("backends"), &site, &mut config);
            (found, config)
        }

        fn cpp(&self, name: &str, library: &str, directory: &str) -> BackendLocation {
            BackendLocation {
                name: name.into(),
                library: self.path(library),
                directory: self.path(directory),
                python_based: false,
            }
        }
    }

    #[test]
    fn a_library_is_looked_for_in_the_version_the_model_then_the_backend_folder() {
        let layout = Layout::new();
        layout.file("backends/ident/libtriton_ident.so");
        let (found, config) = layout.resolve("ident", "");
        let expected = layout.cpp(
            "ident",
            "backends/ident/libtriton_ident.so",
            "backends/ident",
        );
        assert_eq!(found.expect("found"), expected);
        assert_eq!(config.runtime, "");
        layout.file("models/m/libtriton_ident.so");
        let expected = layout.cpp("ident", "models/m/libtriton_ident.so", "models/m");
        assert_eq!(layout.resolve("ident", "").0.expect("found"), expected);
        layout.file("models/m/1/libtriton_ident.so");
        let expected = layout.cpp("ident", "models/m/1/libtriton_ident.so", "models/m/1");
        assert_eq!(layout.resolve("ident", "").0.expect("found"), expected);
        // A C++ library wins over a model.py beside it.
        layout.file("backends/ident/model.py");
        assert!(!layout.resolve("ident", "").0.expect("found").python_based);
    }

    #[test]
    fn a_folder_with_model_py_is_a_python_based_backend() {
        let layout = Layout::new();
        layout.file("backends/vllm/model.py");
        let (found, config) = layout.resolve("vllm", "");
        let found = found.expect("found");
        assert_eq!(
            found,
            BackendLocation {
                name: "vllm".into(),
                library: layout.path("backends/python/libtriton_python.so"),
                directory: layout.path("backends/vllm"),
                python_based: true,
            }
        );
        assert_eq!(found.config_name(), "python");
        assert_eq!(found.key(), layout.path("backends/vllm/model.py"));
        assert_eq!(config.runtime, "model.py");
        assert!(config.parameters.is_empty());
        // The same asked for explicitly.
        let (explicit, config) = layout.resolve("vllm", "model.py");
        assert_eq!(explicit.expect("found"), found);
        assert_eq!(config.runtime, "model.py");
    }

    #[test]
    fn the_backend_folder_may_hold_the_execution_environment() {
        let layout = Layout::new();
        layout.file("backends/vllm/model.py");
        let environment = layout.file("backends/vllm/pb_exec_env_model.py.tar.gz");
        let (_, config) = layout.resolve("vllm", "");
        let path = config.parameters.get("EXECUTION_ENV_PATH").expect("set");
        assert_eq!(path.string_value, environment.to_string_lossy());
        // One the configuration names stays.
        let mut config = ModelConfig {
            name: "m".into(),
            backend: "vllm".into(),
            ..Default::default()
        };
        let own = ModelParameter {
            string_value: "/envs/own.tar.gz".into(),
        };
        config
            .parameters
            .insert("EXECUTION_ENV_PATH".into(), own.clone());
        let dir = layout.path("models/m");
        let site = ModelSite {
            name: "m",
            dir: &dir,
            version: 1,
        };
        resolve(&layout.path("backends"), &site, &mut config).expect("found");
        assert_eq!(config.parameters.get("EXECUTION_ENV_PATH"), Some(&own));
    }

    #[test]
    fn a_runtime_names_the_library() {
        let layout = Layout::new();
        layout.file("backends/custom/libcustom.so");
        let (found, _) = layout.resolve("custom", "libcustom.so");
        let expected = layout.cpp("custom", "backends/custom/libcustom.so", "backends/custom");
        assert_eq!(found.expect("found"), expected);
        // Triton's JoinPath appends an absolute runtime to each folder.
        let (found, _) = layout.resolve("custom", "/libcustom.so");
        assert_eq!(found.expect("found"), expected);
    }

    #[test]
    fn nothing_found_is_tritons_message() {
        let layout = Layout::new();
        let (found, config) = layout.resolve("nope", "");
        assert_eq!(
            found.expect_err("nothing there").message(),
            "unable to find backend library for backend 'nope', try specifying runtime on the model configuration."
        );
        assert_eq!(config.runtime, "");
        let (found, _) = layout.resolve("nope", "libmissing.so");
        let searched = format!(
            "'{}' '{}' '{}' ",
            layout.path("models/m/1").display(),
            layout.path("models/m").display(),
            layout.path("backends/nope").display()
        );
        assert_eq!(
            found.expect_err("no such library").message(),
            format!("unable to find backend library 'libmissing.so' for model 'm', searched: {searched}")
        );
        let (found, _) = layout.resolve("nodir", "model.py");
        assert_eq!(
            found.expect_err("no model.py").message(),
            format!(
                "unable to find Python backend based backend library 'model.py' for model 'm', searched: '{}'",
                layout.path("backends/nodir/model.py").display()
            )
        );
    }

    #[test]
    fn a_runtime_escaping_its_folder_is_refused() {
        let layout = Layout::new();
        std::fs::create_dir_all(layout.path("backends/mine")).expect("mkdir");
        let (found, _) = layout.resolve("mine", "../python/libtriton_python.so");
        let directory = layout.path("backends/mine");
        assert_eq!(
            found.expect_err("escapes").message(),
            format!(
                "backend library name '../python/libtriton_python.so' escapes backend directory '{}', for model 'm', check model config runtime field",
                directory.display()
            )
        );
        // Leaving and coming back is no escape.
        let (found, _) = layout.resolve("python", "../python/libtriton_python.so");
        assert_eq!(
            found.expect("inside").directory,
            layout.path("backends/python")
        );
    }
}
