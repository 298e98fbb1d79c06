//! A cloud repository's local copy, as Triton makes one ("a local copy of a remote model
//! repository in a temporary folder"): the objects under the repository's prefix are
//! downloaded into a directory (`TRITON_AWS_MOUNT_DIRECTORY`, `TRITON_GCS_MOUNT_DIRECTORY`
//! or `TRITON_AZURE_MOUNT_DIRECTORY` when set, else a temporary one removed at exit). Each
//! refresh lists the prefix, downloads what is new or whose version tag (ETag, else
//! modification time and size) changed, and removes what is gone; a failing listing or
//! download leaves the copy as it was.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use nereid_core::repository::RemoteRepository;
use nereid_core::{Error, Result};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};
use parking_lot::Mutex;

use crate::credentials::{store, Env};
use crate::location::{Location, Service};

/// A cloud repository and its local copy.
pub struct CloudMirror {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: Option<ObjectPath>,
    local: PathBuf,
    /// Keeps a temporary copy's directory until the mirror is dropped.
    _temporary: Option<tempfile::TempDir>,
    /// Runs the store's requests for the blocking callers of `refresh`.
    runtime: tokio::runtime::Runtime,
    /// What each object became in the copy, by its path under the prefix. Locked for a
    /// whole refresh, so two never write the copy at once.
    copied: Mutex<HashMap<String, Copied>>,
}

/// One object of the repository as copied.
#[derive(Debug, Clone, PartialEq)]
struct Copied {
    /// The object's version tag when it was copied.
    tag: String,
    /// A folder marker ("model/1/", as storage consoles make an empty folder) became a
    /// directory rather than a file.
    folder: bool,
}

impl std::fmt::Debug for CloudMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudMirror")
            .field("url", &self.url)
            .field("local", &self.local)
            .finish()
    }
}

impl CloudMirror {
    /// Prepares the copy of the repository at `url` (nothing is read from the storage
    /// until the first refresh).
    pub fn open(url: &str, env: Env<'_>) -> std::result::Result<Self, String> {
        let location = Location::parse(url)?;
        let store = store(&location, url, env)?;
        let mount = match location.service {
            Service::S3 { .. } => "TRITON_AWS_MOUNT_DIRECTORY",
            Service::Gcs { .. } => "TRITON_GCS_MOUNT_DIRECTORY",
            Service::Azure { .. } => "TRITON_AZURE_MOUNT_DIRECTORY",
        };
        let (local, temporary) = match env(mount).filter(|d| !d.is_empty()) {
            Some(dir) => (PathBuf::from(dir), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("nereid-repository-")
                    .tempdir()
                    .map_err(|e| format!("cannot make a local copy of {url}: {e}"))?;
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the storage client for {url}: {e}"))?;
        Ok(Self {
            url: url.to_string(),
            store,
            prefix: (!location.prefix.is_empty()).then(|| ObjectPath::from(location.prefix)),
            local,
            _temporary: temporary,
            runtime,
            copied: Mutex::new(HashMap::new()),
        })
    }

    fn failed(&self, doing: &str, e: impl std::fmt::Display) -> Error {
        Error::unavailable(format!("{doing} model repository {}: {e}", self.url))
    }

    /// The object's path under the prefix, when it is a safe relative path.
    fn relative(&self, location: &ObjectPath) -> Option<String> {
        let key = location.as_ref();
        let rel = match &self.prefix {
            Some(prefix) => key.strip_prefix(prefix.as_ref())?.strip_prefix('/')?,
            None => key,
        };
        let safe = !rel.is_empty()
            && Path::new(rel)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        safe.then(|| rel.to_string())
    }

    async fn sync(&self, copied: &mut HashMap<String, Copied>) -> Result<()> {
        let listed: Vec<ObjectMeta> = self
            .store
            .list(self.prefix.as_ref())
            .try_collect()
            .await
            .map_err(|e| self.failed("cannot list", e))?;
        let mut wanted: HashMap<String, (ObjectPath, String, bool)> = HashMap::new();
        for meta in listed {
            let Some(rel) = self.relative(&meta.location) else {
                continue;
            };
            let tag = meta
                .e_tag
                .clone()
                .unwrap_or_else(|| format!("{}-{}", meta.last_modified, meta.size));
            wanted.insert(rel, (meta.location, tag, meta.size == 0));
        }
        // A folder marker with something under it needs no directory of its own.
        let folders: Vec<String> = wanted
            .keys()
            .filter(|rel| {
                wanted
                    .keys()
                    .any(|other| other.starts_with(&format!("{rel}/")))
            })
            .cloned()
            .collect();
        for rel in folders {
            wanted.remove(&rel);
        }
        for (rel, (location, tag, empty)) in &wanted {
            let target = self.local.join(rel);
            if let Some(done) = copied.get(rel) {
                let present = if done.folder {
                    target.is_dir()
                } else {
                    target.is_file()
                };
                if &done.tag == tag && present {
                    continue;
                }
            }
            let folder = self.copy(rel, location, *empty, &target).await?;
            copied.insert(
                rel.clone(),
                Copied {
                    tag: tag.clone(),
                    folder,
                },
            );
        }
        let gone: Vec<String> = copied
            .keys()
            .filter(|rel| !wanted.contains_key(*rel))
            .cloned()
            .collect();
        for rel in gone {
            let target = self.local.join(&rel);
            if copied.remove(&rel).is_some_and(|done| done.folder) {
                let _ = std::fs::remove_dir(&target);
            } else {
                let _ = std::fs::remove_file(&target);
            }
            remove_empty_parents(&target, &self.local);
        }
        Ok(())
    }

    /// Copies one listed object to `target`; answers whether it was a folder marker.
    /// The stores list a marker ("model/1/") without its slash, and reading it under that
    /// name finds nothing: an empty object that cannot be read is a folder.
    async fn copy(
        &self,
        rel: &str,
        location: &ObjectPath,
        empty: bool,
        target: &Path,
    ) -> Result<bool> {
        let read = async { self.store.get(location).await?.bytes().await }.await;
        match read {
            Ok(bytes) => {
                write_file(target, &bytes)
                    .map_err(|e| self.failed(&format!("cannot write '{rel}' of"), e))?;
                Ok(false)
            }
            Err(object_store::Error::NotFound { .. }) if empty => {
                std::fs::create_dir_all(target)
                    .map_err(|e| self.failed(&format!("cannot write '{rel}' of"), e))?;
                Ok(true)
            }
            Err(e) => Err(self.failed(&format!("cannot read '{rel}' of"), e)),
        }
    }
}

/// Writes `bytes` to `target` whole: a reader sees the old file or the new one.
fn write_file(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let partial = target.with_extension("nereid-partial");
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, target)
}

/// Removes the directories above `file` that became empty, up to `root`.
fn remove_empty_parents(file: &Path, root: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || std::fs::remove_dir(d).is_err() {
            return;
        }
        dir = d.parent();
    }
}

impl RemoteRepository for CloudMirror {
    fn url(&self) -> &str {
        &self.url
    }

    fn local_dir(&self) -> &Path {
        &self.local
    }

    fn refresh(&self) -> Result<()> {
        let mut copied = self.copied.lock();
        self.runtime.block_on(self.sync(&mut copied))
    }
}
