//! Triton's cloud repository paths (`docs/user_guide/model_repository.md`, "Cloud
//! Storage"): `s3://bucket/path`, `s3://host:port/bucket/path` for an S3-compatible
//! server over HTTP (`s3://https://host:port/...` over HTTPS), `gs://bucket/path` and
//! `as://account/container/path`.

/// Where a repository lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    /// Amazon S3, or an S3-compatible server at `endpoint` (`http://host:port`).
    S3 {
        /// A server other than AWS's, when the path names one.
        endpoint: Option<String>,
        /// The bucket.
        bucket: String,
    },
    /// Google Cloud Storage.
    Gcs {
        /// The bucket.
        bucket: String,
    },
    /// Azure Blob Storage.
    Azure {
        /// The storage account.
        account: String,
        /// The container.
        container: String,
    },
}

/// A parsed cloud repository path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The service and its bucket.
    pub service: Service,
    /// The repository's prefix inside the bucket, without leading or trailing `/`
    /// (empty for the bucket's root).
    pub prefix: String,
}

/// Whether `path` names cloud storage rather than a local directory.
pub fn is_cloud(path: &str) -> bool {
    ["s3://", "gs://", "as://"]
        .iter()
        .any(|s| path.starts_with(s))
}

impl Location {
    /// Parses `url`; the error says what is missing.
    pub fn parse(url: &str) -> Result<Self, String> {
        let malformed = |what: &str| format!("invalid cloud repository path '{url}': {what}");
        if let Some(rest) = url.strip_prefix("s3://") {
            let (scheme, rest) = match rest.strip_prefix("https://") {
                Some(rest) => ("https", rest),
                None => ("http", rest.strip_prefix("http://").unwrap_or(rest)),
            };
            let mut parts = rest.splitn(2, '/');
            let first = parts.next().unwrap_or_default();
            let rest = parts.next().unwrap_or_default();
            // A first segment with a port is the server; bucket names cannot hold ':'.
            let (endpoint, bucket, prefix) = if first.contains(':') {
                let (bucket, prefix) = split_first(rest);
                (Some(format!("{scheme}://{first}")), bucket, prefix)
            } else {
                (None, first.to_string(), rest.to_string())
            };
            if bucket.is_empty() {
                return Err(malformed("no bucket"));
            }
            return Ok(Self {
                service: Service::S3 { endpoint, bucket },
                prefix: trim(&prefix),
            });
        }
        if let Some(rest) = url.strip_prefix("gs://") {
            let (bucket, prefix) = split_first(rest);
            if bucket.is_empty() {
                return Err(malformed("no bucket"));
            }
            return Ok(Self {
                service: Service::Gcs { bucket },
                prefix: trim(&prefix),
            });
        }
        if let Some(rest) = url.strip_prefix("as://") {
            let (account, rest) = split_first(rest);
            let (container, prefix) = split_first(&rest);
            if account.is_empty() || container.is_empty() {
                return Err(malformed("expected as://account/container/path"));
            }
            return Ok(Self {
                service: Service::Azure { account, container },
                prefix: trim(&prefix),
            });
        }
        Err(malformed("unknown scheme (s3://, gs:// or as://)"))
    }
}

fn split_first(path: &str) -> (String, String) {
    match path.split_once('/') {
        Some((first, rest)) => (first.to_string(), rest.to_string()),
        None => (path.to_string(), String::new()),
    }
}

fn trim(prefix: &str) -> String {
    prefix.trim_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tritons_forms() {
        let s3 = |endpoint: Option<&str>, bucket: &str, prefix: &str| Location {
            service: Service::S3 {
                endpoint: endpoint.map(str::to_string),
                bucket: bucket.into(),
            },
            prefix: prefix.into(),
        };
        assert_eq!(
            Location::parse("s3://b/models/"),
            Ok(s3(None, "b", "models"))
        );
        assert_eq!(Location::parse("s3://b"), Ok(s3(None, "b", "")));
        assert_eq!(
            Location::parse("s3://localhost:9000/b/a/models"),
            Ok(s3(Some("http://localhost:9000"), "b", "a/models"))
        );
        assert_eq!(
            Location::parse("s3://https://minio.local:443/b/m"),
            Ok(s3(Some("https://minio.local:443"), "b", "m"))
        );
        assert_eq!(
            Location::parse("gs://bucket/repo").map(|l| l.service),
            Ok(Service::Gcs {
                bucket: "bucket".into()
            })
        );
        let azure = Location::parse("as://acct/cont/x/y").expect("parses");
        assert_eq!(
            azure.service,
            Service::Azure {
                account: "acct".into(),
                container: "cont".into()
            }
        );
        assert_eq!(azure.prefix, "x/y");
        assert!(Location::parse("as://acct").is_err());
        assert!(Location::parse("s3://localhost:9000/").is_err());
        assert!(is_cloud("gs://x") && !is_cloud("/models"));
    }
}
