//! Repositories kept somewhere else than a local directory (a bucket in S3, Google Cloud
//! Storage or Azure Blob Storage): a [`RemoteRepository`] keeps a local copy that the
//! repository scans like any `--model-repository` directory, brought up to date before
//! each scan (start-up, every poll, each load or index request), so backends read local
//! files and poll mode sees a changed object as a changed file.

use std::path::Path;

use crate::error::Result;

/// A repository whose models live in remote storage, copied into a local directory.
pub trait RemoteRepository: Send + Sync {
    /// The repository as the user named it (`s3://bucket/models`), for messages.
    fn url(&self) -> &str;

    /// The local directory holding the copy; it is one of the repository roots.
    fn local_dir(&self) -> &Path;

    /// Brings the copy up to date, blocking: objects that are new or changed are
    /// downloaded, files whose objects are gone are removed. On an error (the storage
    /// unreachable, credentials refused) the copy is left as it was, so the models
    /// already served keep their files.
    fn refresh(&self) -> Result<()>;
}
