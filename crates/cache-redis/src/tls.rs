//! TLS to Redis, from Triton's `redis_cache` keys: `tls_enabled`, `cert` and `key` (a
//! client certificate, for servers that ask for one), `cacert` and `cacert_dir` (the
//! authorities the server's certificate must chain to; the system's when neither is set)
//! and `sni`. The files are read at start-up, so a missing or malformed one stops the
//! server naming it rather than failing at the first connection.

use std::path::{Path, PathBuf};

use nereid_core::{Error, Result};
use redis::{ClientTlsConfig, TlsCertificates};

/// The TLS half of the redis cache's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TlsSettings {
    /// `cert`: the client certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// `key`: the client certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// `cacert`: a bundle of trusted authorities (PEM).
    pub cacert: Option<PathBuf>,
    /// `cacert_dir`: a directory of trusted authorities (every `.pem` / `.crt` in it).
    pub cacert_dir: Option<PathBuf>,
    /// `sni`: the server name sent in the handshake. The certificate is verified for the
    /// name Nereid connects to, so this must equal `host` (checked at start-up).
    pub sni: Option<String>,
}

fn failed(message: String) -> Error {
    Error::invalid_arg(format!("Failed to initialize RedisCache: {message}"))
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| failed(format!("cannot read {key} '{}': {e}", path.display())))
}

/// Whether `bytes` hold a PEM block whose label ends in `label` ("CERTIFICATE"; "PRIVATE
/// KEY" also matches the RSA and EC forms).
fn has_pem(bytes: &[u8], label: &str) -> bool {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .any(|line| line.starts_with("-----BEGIN ") && line.ends_with(&format!("{label}-----")))
}

impl TlsSettings {
    /// Checks the settings against the server's `host`: a client certificate needs both
    /// halves, and `sni` cannot name another server than the one verified.
    pub fn check(&self, host: &str) -> Result<()> {
        match (&self.cert, &self.key) {
            (Some(_), None) => return Err(failed("'cert' is set without 'key'".into())),
            (None, Some(_)) => return Err(failed("'key' is set without 'cert'".into())),
            _ => {}
        }
        if let Some(sni) = self.sni.as_deref().filter(|sni| *sni != host) {
            return Err(failed(format!(
                "'sni' ({sni}) differs from 'host' ({host}): Nereid verifies the server's certificate for the host it connects to; connect to '{sni}' by name instead"
            )));
        }
        Ok(())
    }

    /// The certificates the client presents and trusts, read from their files.
    pub fn certificates(&self) -> Result<TlsCertificates> {
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let client_cert = read("cert", cert)?;
                if !has_pem(&client_cert, "CERTIFICATE") {
                    return Err(failed(format!(
                        "cert '{}' holds no PEM certificate",
                        cert.display()
                    )));
                }
                let client_key = read("key", key)?;
                if !has_pem(&client_key, "PRIVATE KEY") {
                    return Err(failed(format!(
                        "key '{}' holds no PEM private key",
                        key.display()
                    )));
                }
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            _ => None,
        };
        let mut roots = Vec::new();
        if let Some(cacert) = &self.cacert {
            let bundle = read("cacert", cacert)?;
            if !has_pem(&bundle, "CERTIFICATE") {
                return Err(failed(format!(
                    "cacert '{}' holds no PEM certificate",
                    cacert.display()
                )));
            }
            roots.extend(bundle);
            roots.push(b'\n');
        }
        if let Some(dir) = &self.cacert_dir {
            roots.extend(authorities_in(dir)?);
        }
        Ok(TlsCertificates {
            client_tls,
            root_cert: (!roots.is_empty()).then_some(roots),
        })
    }
}

/// The PEM certificates of every `.pem` / `.crt` file in `dir`, in name order.
fn authorities_in(dir: &Path) -> Result<Vec<u8>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| failed(format!("cannot read cacert_dir '{}': {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "pem" || ext == "crt")
        })
        .collect();
    files.sort();
    let mut roots = Vec::new();
    for file in &files {
        let bytes = read("cacert_dir", file)?;
        if has_pem(&bytes, "CERTIFICATE") {
            roots.extend(bytes);
            roots.push(b'\n');
        }
    }
    if roots.is_empty() {
        return Err(failed(format!(
            "cacert_dir '{}' holds no PEM certificate (.pem or .crt)",
            dir.display()
        )));
    }
    Ok(roots)
}
