//! The state behind registered repositories (see `registered.rs`): which repositories
//! were registered, in order, and the names their mapped model directories go by; and
//! listing every model directory with those names, as each scan does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;

use super::ids::qualified;
use super::scan::{insert_model, list_models, ModelDirs};
use crate::error::Result;

/// The repositories registered so far and their mappings. Read on every scan (a clone
/// is taken under the lock); written only by registration.
#[derive(Default)]
pub(super) struct Registered(pub(super) RwLock<Registrations>);

/// One state of [`Registered`].
#[derive(Debug, Clone, Default)]
pub(super) struct Registrations {
    /// In order of registration.
    pub(super) repositories: Vec<PathBuf>,
    /// Model name → (its repository, its directory's name there).
    pub(super) mappings: BTreeMap<String, (PathBuf, String)>,
    /// `--model-repository` ones unregistered since (Triton allows it); registering one
    /// again brings it back.
    pub(super) withdrawn: Vec<PathBuf>,
}

impl Registered {
    /// The state now.
    pub(super) fn snapshot(&self) -> Registrations {
        self.0.read().clone()
    }
}

impl Registrations {
    /// The `--model-repository` roots not withdrawn, followed by the registered
    /// repositories.
    pub(super) fn roots(&self, startup: &[PathBuf]) -> Vec<PathBuf> {
        startup
            .iter()
            .filter(|root| !self.withdrawn.contains(root))
            .chain(&self.repositories)
            .cloned()
            .collect()
    }

    /// The name the directory `subdir` of repository `root` goes by.
    fn name_of<'a>(&'a self, root: &Path, subdir: &'a str) -> &'a str {
        self.mappings
            .iter()
            .find(|(_, (repository, dir))| repository == root && dir == subdir)
            .map_or(subdir, |(name, _)| name.as_str())
    }

    /// Every model directory across `startup` and the registered repositories, keyed as
    /// the model table is (with `namespacing`, `<repository>::<name>`), mapped
    /// directories under their mapped names. Blocking.
    pub(super) fn list(&self, startup: &[PathBuf], namespacing: bool) -> Result<ModelDirs> {
        let mut all = ModelDirs::new();
        for root in self.roots(startup) {
            for (subdir, dir) in list_models(std::slice::from_ref(&root))? {
                let name = self.name_of(&root, &subdir);
                if namespacing {
                    all.insert(qualified(&root, name), dir);
                } else {
                    insert_model(&mut all, name, dir);
                }
            }
        }
        Ok(all)
    }

    /// Whether `name` is a mapped name.
    pub(super) fn is_mapped(&self, name: &str) -> bool {
        self.mappings.contains_key(name)
    }
}
