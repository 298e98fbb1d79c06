//! The object store of a [`Location`], with credentials as Triton takes them: the cloud's
//! own environment variables and default chains (instance metadata, web identity, the
//! attached service account), `AZURE_STORAGE_ACCOUNT` / `AZURE_STORAGE_KEY`, and
//! `TRITON_CLOUD_CREDENTIAL_PATH`, a JSON file of per-path credentials whose longest
//! matching path wins (`""` matches every path).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};
use serde::Deserialize;

use crate::location::{Location, Service};

/// Reads an environment variable (the process environment outside tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `TRITON_CLOUD_CREDENTIAL_PATH`'s file.
#[derive(Debug, Default, Deserialize)]
struct CredentialFile {
    #[serde(default)]
    s3: HashMap<String, S3Credential>,
    #[serde(default)]
    gs: HashMap<String, String>,
    #[serde(default, rename = "as")]
    azure: HashMap<String, AzureCredential>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct S3Credential {
    #[serde(default)]
    secret_key: String,
    #[serde(default)]
    key_id: String,
    #[serde(default)]
    region: String,
    #[serde(default)]
    session_token: String,
    #[serde(default)]
    profile: String,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct AzureCredential {
    #[serde(default)]
    account_key: String,
}

impl CredentialFile {
    fn read(env: Env<'_>) -> Result<Self, String> {
        let Some(path) = env("TRITON_CLOUD_CREDENTIAL_PATH").filter(|p| !p.is_empty()) else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("TRITON_CLOUD_CREDENTIAL_PATH {path}: {e}"))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("TRITON_CLOUD_CREDENTIAL_PATH {path}: not a credential file: {e}"))
    }
}

/// The entry of `entries` whose path is the longest prefix of `url`.
fn for_path<'a, T>(entries: &'a HashMap<String, T>, url: &str) -> Option<&'a T> {
    entries
        .iter()
        .filter(|(path, _)| url.starts_with(path.as_str()))
        .max_by_key(|(path, _)| path.len())
        .map(|(_, value)| value)
}

/// The store `location` (from `url`) lives in, with its credentials.
pub fn store(location: &Location, url: &str, env: Env<'_>) -> Result<Arc<dyn ObjectStore>, String> {
    let file = CredentialFile::read(env)?;
    let failed = |e: object_store::Error| format!("cannot reach {url}: {e}");
    let store: Arc<dyn ObjectStore> = match &location.service {
        Service::S3 { endpoint, bucket } => {
            let mut builder = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry())
                .with_client_options(client());
            if let Some(endpoint) = endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            let given = for_path(&file.s3, url).cloned().unwrap_or_default();
            let profile = Some(given.profile.clone())
                .filter(|p| !p.is_empty())
                .or_else(|| env("AWS_PROFILE"));
            let keys = (!given.key_id.is_empty())
                .then(|| {
                    (
                        given.key_id.clone(),
                        given.secret_key.clone(),
                        given.session_token.clone(),
                    )
                })
                .or_else(|| {
                    // A profile's keys, when the environment has none of its own.
                    env("AWS_ACCESS_KEY_ID")
                        .is_none()
                        .then(|| profile.as_deref().and_then(|p| profile_keys(p, env)))
                        .flatten()
                });
            if let Some((key_id, secret, token)) = keys {
                builder = builder
                    .with_access_key_id(key_id)
                    .with_secret_access_key(secret);
                if !token.is_empty() {
                    builder = builder.with_token(token);
                }
            }
            if !given.region.is_empty() {
                builder = builder.with_region(given.region);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        Service::Gcs { bucket } => {
            let mut builder = GoogleCloudStorageBuilder::new()
                .with_bucket_name(bucket)
                .with_retry(retry())
                .with_client_options(client());
            let path = for_path(&file.gs, url)
                .cloned()
                .or_else(|| env("GOOGLE_APPLICATION_CREDENTIALS"))
                .filter(|p| !p.is_empty());
            if let Some(path) = path {
                // A service-account key file is read as one (it may also name the
                // server, `gcs_base_url`); other files are application default credentials.
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("GOOGLE_APPLICATION_CREDENTIALS {path}: {e}"))?;
                let kind = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_string));
                builder = if kind.as_deref() == Some("service_account") {
                    builder.with_service_account_path(path)
                } else {
                    builder.with_application_credentials(path)
                };
            }
            Arc::new(builder.build().map_err(failed)?)
        }
        Service::Azure { account, container } => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_account(account)
                .with_container_name(container)
                .with_retry(retry())
                .with_client_options(client());
            let key = for_path(&file.azure, url)
                .map(|c| c.account_key.clone())
                .filter(|k| !k.is_empty())
                .or_else(|| env("AZURE_STORAGE_KEY"));
            if let Some(key) = key {
                builder = builder.with_access_key(key);
            }
            Arc::new(builder.build().map_err(failed)?)
        }
    };
    Ok(store)
}

/// A few quick retries: a storage that does not answer fails the scan within the
/// repository's time limit, and the next poll tries again.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(20),
        ..RetryConfig::default()
    }
}

/// Connections that give up on a silent server instead of hanging a scan. Plain HTTP is
/// allowed for the servers a user names (`s3://host:port/`, an emulator, a `gcs_base_url`);
/// the clouds' own endpoints are HTTPS.
fn client() -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(true)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(120))
}

/// The keys of `profile` in the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
/// by default `~/.aws/credentials`), as the AWS command line writes it.
fn profile_keys(profile: &str, env: Env<'_>) -> Option<(String, String, String)> {
    let path = env("AWS_SHARED_CREDENTIALS_FILE")
        .or_else(|| env("HOME").map(|home| format!("{home}/.aws/credentials")))?;
    let text = std::fs::read_to_string(path).ok()?;
    let mut section = String::new();
    let mut values: HashMap<&str, String> = HashMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if section == profile {
            if let Some((key, value)) = line.split_once('=') {
                let key = key.trim();
                for wanted in [
                    "aws_access_key_id",
                    "aws_secret_access_key",
                    "aws_session_token",
                ] {
                    if key == wanted {
                        values.insert(wanted, value.trim().to_string());
                    }
                }
            }
        }
    }
    Some((
        values.remove("aws_access_key_id")?,
        values.remove("aws_secret_access_key")?,
        values.remove("aws_session_token").unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_matching_path_wins() {
        let entries = HashMap::from([
            (String::new(), 1),
            ("s3://b".to_string(), 2),
            ("s3://b/deep".to_string(), 3),
        ]);
        assert_eq!(for_path(&entries, "s3://b/deep/models"), Some(&3));
        assert_eq!(for_path(&entries, "s3://b/other"), Some(&2));
        assert_eq!(for_path(&entries, "s3://c"), Some(&1));
    }

    #[test]
    fn a_profile_is_read_from_the_shared_credentials_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("credentials");
        std::fs::write(
            &path,
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[other]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=E\n",
        )
        .expect("written");
        let file = path.to_string_lossy().to_string();
        let env = move |name: &str| (name == "AWS_SHARED_CREDENTIALS_FILE").then(|| file.clone());
        assert_eq!(
            profile_keys("other", &env),
            Some(("C".into(), "D".into(), "E".into()))
        );
        assert_eq!(profile_keys("default", &env).map(|k| k.0), Some("A".into()));
        assert_eq!(profile_keys("missing", &env), None);
    }
}
