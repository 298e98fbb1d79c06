//! Model identifiers under `--model-namespacing`: `<repository>::<name>` (Triton's
//! spelling), how to take one apart, and which model an ensemble step means. Plain
//! functions over names, below everything that keys the model table.

use std::path::{Path, PathBuf};

/// Between a namespace and a name in a model identifier (Triton's spelling).
const SEPARATOR: &str = "::";

/// The identifier of model `name` of repository `root` with namespacing.
pub(super) fn qualified(root: &Path, name: &str) -> String {
    format!("{}{SEPARATOR}{name}", root.display())
}

/// `(namespace, name)` of identifier `id` when `namespacing` is on and `id` is
/// `<one of roots>::<name>`.
pub(super) fn split_id<'a>(
    roots: &[PathBuf],
    namespacing: bool,
    id: &'a str,
) -> Option<(&'a str, &'a str)> {
    if !namespacing {
        return None;
    }
    roots.iter().find_map(|root| {
        let root = root.display().to_string();
        let name = id.strip_prefix(root.as_str())?.strip_prefix(SEPARATOR)?;
        Some((&id[..root.len()], name))
    })
}

/// The key of the model that step model `step` of ensemble `ensemble` (a key) runs on,
/// among the keys `known` accepts: the ensemble's own namespace first, else the one
/// namespace holding it (Triton's rule). Without a match, the key in the ensemble's
/// namespace, which the caller then reports as not available.
pub(super) fn step_key(
    roots: &[PathBuf],
    namespacing: bool,
    known: impl Fn(&str) -> bool,
    ensemble: &str,
    step: &str,
) -> String {
    if !namespacing {
        return step.to_string();
    }
    let preferred = split_id(roots, namespacing, ensemble)
        .map(|(namespace, _)| format!("{namespace}{SEPARATOR}{step}"));
    if let Some(preferred) = preferred.as_deref().filter(|id| known(id)) {
        return preferred.to_string();
    }
    let mut candidates: Vec<String> = roots
        .iter()
        .map(|root| qualified(root, step))
        .filter(|id| known(id))
        .collect();
    if candidates.len() == 1 {
        return candidates.remove(0);
    }
    preferred.unwrap_or_else(|| step.to_string())
}
