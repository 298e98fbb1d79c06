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

    /// The names mappings give the directory `subdir` of repository `root` (several
    /// names may map to one directory); none when it is not mapped.
    fn mapped_names<'a>(&'a self, root: &'a Path, subdir: &'a str) -> Vec<&'a str> {
        self.mappings
            .iter()
            .filter(|(_, (repository, dir))| repository == root && dir == subdir)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Every model directory across `startup` and the registered repositories, keyed as
    /// the model table is (with `namespacing`, `<repository>::<name>`), mapped
    /// directories under each of their mapped names. As in Triton, a mapped name takes
    /// precedence: a directory that merely carries a name some mapping gives out is left
    /// out, so it neither conflicts with the mapped one nor loads. Blocking.
    pub(super) fn list(&self, startup: &[PathBuf], namespacing: bool) -> Result<ModelDirs> {
        let mut all = ModelDirs::new();
        for root in self.roots(startup) {
            for (subdir, dir) in list_models(std::slice::from_ref(&root))? {
                let mapped = self.mapped_names(&root, &subdir);
                if mapped.is_empty() && self.mappings.contains_key(&subdir) {
                    continue;
                }
                let names = if mapped.is_empty() {
                    vec![subdir.as_str()]
                } else {
                    mapped
                };
                for name in names {
                    if namespacing {
                        all.insert(qualified(&root, name), dir.clone());
                    } else if self.mappings.contains_key(name) {
                        all.insert(name.to_string(), dir.clone());
                    } else {
                        insert_model(&mut all, name, dir.clone());
                    }
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
