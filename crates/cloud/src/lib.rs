//! Model repositories in S3 (and S3-compatible servers), Google Cloud Storage and Azure
//! Blob Storage, named as tritonserver names them (`--model-repository=s3://bucket/path`).
//! Each is copied into a local directory that the core's repository scans like any other
//! and refreshes before each scan ([`nereid_core::repository::RemoteRepository`]).
//!
//! - [`location`]: Triton's `s3://`, `gs://` and `as://` paths.
//! - `credentials`: the object store of a path, with the credentials Triton reads.
//! - [`mirror`]: the local copy and its refresh.

mod credentials;
pub mod location;
pub mod mirror;

pub use credentials::Env;
pub use location::is_cloud;
pub use mirror::CloudMirror;
