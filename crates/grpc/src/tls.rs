//! gRPC over TLS and mutual TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`), with rustls.
//!
//! The PEM files are read once, at start-up ([`ServerTls::load`]): a missing or unreadable
//! file, or one without a certificate or key, stops the server with an error naming the
//! flag and the file (Triton reads an unreadable file as empty and fails later with a
//! misleading "Socket already in use"). Under mutual TLS a client must present a
//! certificate that chains to `--grpc-root-cert`, as gRPC's
//! `REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY`.
//!
//! The handshake runs in the frontend's own accept path, not tonic's, so that the
//! connection policy ([`crate::watch`]) sees the plaintext HTTP/2 frames: each accepted
//! socket, already under the connection cap and its idle timer, shakes hands in a task
//! of its own, so a slow or failing client never holds up the next accept.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use nereid_net::{Acceptor, Guarded};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// gRPC core's default server handshake timeout (`GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS`):
/// a client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections done with their handshake, waiting for the server to take them. Each one
/// holds a place under the connection cap, which bounds the handshakes under way.
const READY_CONNECTIONS: usize = 64;

/// The files the TLS flags name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--grpc-server-cert`: the server's certificate chain, PEM.
    pub server_cert: PathBuf,
    /// `--grpc-server-key`: the server's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub server_key: PathBuf,
    /// `--grpc-root-cert`: the certificates client certificates must chain to, PEM;
    /// read only under mutual TLS (Triton passes it to gRPC, which uses it only then).
    pub root_cert: PathBuf,
    /// `--grpc-use-ssl-mutual`: require and verify a client certificate.
    pub mutual: bool,
}

/// Why the TLS files cannot be used. Each names the flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A flag TLS needs was not given.
    #[error("{needed_by} needs --{flag}")]
    Missing {
        /// The flag not given.
        flag: &'static str,
        /// The flag that needs it.
        needed_by: &'static str,
    },
    /// A file could not be read.
    #[error("cannot read --{flag} file '{}': {source}", path.display())]
    Read {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file holds no PEM item of the kind wanted, or a malformed one.
    #[error("--{flag} file '{}' holds no {what}{}", path.display(), detail(.problem))]
    NoPem {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for ("PEM certificate", "PEM private key").
        what: &'static str,
        /// The parser's complaint, when the file was not well-formed.
        problem: Option<String>,
    },
    /// rustls refused the certificates or key (e.g. the key does not match the
    /// certificate, or an algorithm it does not support).
    #[error("--{flags}: {source}")]
    Rejected {
        /// The flags naming the files refused.
        flags: &'static str,
        /// rustls's reason.
        source: rustls::Error,
    },
    /// The root certificates cannot verify clients.
    #[error("--grpc-root-cert file '{}': {message}", path.display())]
    Roots {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

fn detail(problem: &Option<String>) -> String {
    problem
        .as_ref()
        .map(|p| format!(" ({p})"))
        .unwrap_or_default()
}

/// The server's TLS configuration, loaded and checked: hands out TLS handshakes.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    mutual: bool,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("mutual", &self.mutual)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads and checks the files; the server offers HTTP/2 by ALPN.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let needed_by = if files.mutual {
            "--grpc-use-ssl-mutual"
        } else {
            "--grpc-use-ssl"
        };
        let certs = certificates("grpc-server-cert", &files.server_cert, needed_by)?;
        let key = private_key(&files.server_key, needed_by)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rejected {
                flags: "grpc-use-ssl",
                source,
            })?;
        let builder = if files.mutual {
            let mut roots = RootCertStore::empty();
            for cert in certificates("grpc-root-cert", &files.root_cert, needed_by)? {
                roots.add(cert).map_err(|e| TlsError::Roots {
                    path: files.root_cert.clone(),
                    message: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Roots {
                    path: files.root_cert.clone(),
                    message: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config =
            builder
                .with_single_cert(certs, key)
                .map_err(|source| TlsError::Rejected {
                    flags: "grpc-server-cert / --grpc-server-key",
                    source,
                })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            mutual: files.mutual,
        })
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.mutual
    }

    /// The connections `acceptor` accepts, each through its handshake; a failed or
    /// timed-out handshake drops its connection (logged at debug level). Ends when
    /// dropped, which closes the listener.
    pub fn accept_all(&self, mut acceptor: Acceptor) -> impl Stream<Item = TlsStream<Guarded>> {
        let (ready, connections) = mpsc::channel(READY_CONNECTIONS);
        let tls = self.acceptor.clone();
        tokio::spawn(async move {
            loop {
                let guarded = tokio::select! {
                    guarded = acceptor.accept() => guarded,
                    () = ready.closed() => return,
                };
                let (tls, ready) = (tls.clone(), ready.clone());
                tokio::spawn(async move {
                    let peer = guarded.peer();
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(guarded)).await {
                        Ok(Ok(stream)) => {
                            // The server stopped taking connections: this one closes.
                            let _ = ready.send(stream).await;
                        }
                        Ok(Err(e)) => tracing::debug!("gRPC TLS handshake with {peer} failed: {e}"),
                        Err(_) => tracing::debug!(
                            "gRPC TLS handshake with {peer} did not finish within {}s",
                            HANDSHAKE_TIMEOUT.as_secs()
                        ),
                    }
                });
            }
        });
        futures::stream::unfold(connections, |mut connections| async move {
            let stream = connections.recv().await?;
            Some((stream, connections))
        })
    }
}

fn read(flag: &'static str, path: &Path, needed_by: &'static str) -> Result<Vec<u8>, TlsError> {
    if path.as_os_str().is_empty() {
        return Err(TlsError::Missing { flag, needed_by });
    }
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(
    flag: &'static str,
    path: &Path,
    needed_by: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(flag, path, needed_by)?;
    let no_pem = |problem: Option<String>| TlsError::NoPem {
        flag,
        path: path.to_path_buf(),
        what: "PEM certificate",
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| no_pem(Some(e.to_string())))?;
    if certs.is_empty() {
        return Err(no_pem(None));
    }
    Ok(certs)
}

fn private_key(path: &Path, needed_by: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let flag = "grpc-server-key";
    let pem = read(flag, path, needed_by)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoPem {
        flag,
        path: path.to_path_buf(),
        what: "PEM private key",
        problem: (!matches!(e, pem::Error::NoItemsFound)).then(|| e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            root_cert: dir.join("ca.crt"),
            mutual: false,
        }
    }

    #[test]
    fn a_missing_file_names_its_flag_and_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = ServerTls::load(&files(dir.path())).expect_err("no files");
        let text = err.to_string();
        assert!(
            text.starts_with("cannot read --grpc-server-cert file '")
                && text.contains("server.crt"),
            "{text}"
        );
    }

    #[test]
    fn a_flag_not_given_is_named() {
        let err = ServerTls::load(&TlsFiles {
            server_cert: PathBuf::new(),
            ..files(Path::new("/nonexistent"))
        })
        .expect_err("no cert flag");
        assert_eq!(err.to_string(), "--grpc-use-ssl needs --grpc-server-cert");
    }

    #[test]
    fn a_file_without_pem_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = files(dir.path());
        std::fs::write(&f.server_cert, "not a certificate\n").expect("write");
        let text = ServerTls::load(&f).expect_err("no PEM").to_string();
        assert!(
            text.starts_with("--grpc-server-cert file '")
                && text.ends_with("holds no PEM certificate"),
            "{text}"
        );
        std::fs::write(
            &f.server_cert,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        std::fs::write(&f.server_key, "").expect("write");
        let text = ServerTls::load(&f).expect_err("no key").to_string();
        assert!(
            text.starts_with("--grpc-server-key file '")
                && text.ends_with("holds no PEM private key"),
            "{text}"
        );
    }
}
