//! Repository agents (`model_repository_agents` in a model's configuration) run before
//! the model loads, as in Triton, and a failing agent fails the load at the repository
//! stage. Triton's `checksum` agent is built in: each `MD5:<file>` parameter names a file
//! relative to the model directory and its expected digest, and the words of a failure
//! are the agent's. Nereid hosts no TRITONREPOAGENT libraries, so any other agent fails
//! the load with Triton's message for an agent missing from `--repoagent-directory`, or,
//! when the library is there, with a message saying it cannot be run. Nothing is skipped.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Component, Path};

use super::md5::Md5;
use crate::config::ModelConfig;
use crate::error::{Error, Result};

/// The agent Nereid runs itself.
pub const CHECKSUM_AGENT: &str = "checksum";

/// Runs the load action of every agent `config` lists, in order, on model `name` in
/// `dir`; the first failure is the answer, and is logged as Triton logs a directory its
/// poll could not read (it runs the agents then; L0_repoagent_checksum greps the line).
/// `agent_directory` is `--repoagent-directory`. Blocking (reads and digests files): call
/// it off the request threads.
pub(super) fn run_load_agents(
    name: &str,
    config: &ModelConfig,
    dir: &Path,
    agent_directory: &Path,
) -> Result<()> {
    let Some(agents) = &config.model_repository_agents else {
        return Ok(());
    };
    let ran = agents.agents.iter().try_for_each(|agent| {
        if agent.name == CHECKSUM_AGENT {
            verify_checksums(&agent.parameters, dir)
        } else {
            Err(unavailable_agent(&agent.name, agent_directory))
        }
    });
    if let Err(e) = &ran {
        tracing::error!("Poll failed for model directory '{name}': {}", e.message());
    }
    ran
}

/// Why agent `name` cannot run: Triton's message when its library is not in
/// `directory`, otherwise that Nereid does not host agent libraries.
fn unavailable_agent(name: &str, directory: &Path) -> Error {
    let library = format!("libtritonrepoagent_{name}.so");
    let path = directory.join(name).join(&library);
    if path.is_file() {
        Error::unsupported(format!(
            "repo agent '{name}' at '{}' cannot be run: Nereid hosts no repository agent libraries; only the '{CHECKSUM_AGENT}' agent is built in",
            path.display()
        ))
    } else {
        Error::invalid_arg(format!(
            "unable to find '{library}' for repo agent '{name}', searched: {}",
            directory.display()
        ))
    }
}

/// The checksum agent's load action: every `<algorithm>:<file>` parameter (in key order,
/// so a model with several bad files always reports the same one) must match.
fn verify_checksums(parameters: &HashMap<String, String>, dir: &Path) -> Result<()> {
    let ordered: BTreeMap<&String, &String> = parameters.iter().collect();
    for (key, expected) in ordered {
        let Some((algorithm, file)) = key.split_once(':') else {
            return Err(Error::invalid_arg(format!("failed to parse key: {key}")));
        };
        if !algorithm.eq_ignore_ascii_case("md5") {
            return Err(Error::unsupported(format!(
                "Unsupported checksum algorithm: {algorithm}"
            )));
        }
        let got = md5_of(dir, file)?;
        if got != *expected {
            return Err(Error::invalid_arg(format!(
                "Mismatched MD5 hash for file {file}, expect: {expected}, got: {got}"
            )));
        }
    }
    Ok(())
}

/// The MD5 digest of `file` (relative to the model directory `dir`), streamed. Unlike
/// Triton's agent, which opens whatever path it is given, the file must stay inside the
/// model directory (a configuration sent through the load API must not learn the digest
/// of other files) and be a regular file (a FIFO or a device would never end).
fn md5_of(dir: &Path, file: &str) -> Result<String> {
    let failed = |why: &dyn std::fmt::Display| {
        Error::invalid_arg(format!("failed to open text file for read {file}: {why}"))
    };
    let inside = Path::new(file)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !inside {
        return Err(failed(&"the path must stay within the model directory"));
    }
    let path = dir.join(file);
    let meta = std::fs::metadata(&path).map_err(|e| failed(&os_reason(&e)))?;
    if !meta.is_file() {
        return Err(failed(&"not a regular file"));
    }
    let mut reader = std::fs::File::open(&path).map_err(|e| failed(&os_reason(&e)))?;
    let mut digest = Md5::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(&os_reason(&e))),
        };
        digest.update(&buffer[..read]);
    }
    Ok(digest.hex())
}

/// An I/O error as `strerror` words it (what Triton's agent prints), without Rust's
/// " (os error N)" suffix.
fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_model_config;
    use crate::error::ErrorKind;

    fn config(agents: &str) -> ModelConfig {
        parse_model_config(
            Path::new("config.pbtxt"),
            &format!("name: \"m\" model_repository_agents {{ agents [ {agents} ] }}"),
        )
        .expect("valid configuration")
    }

    fn checksum(parameters: &[(&str, &str)]) -> ModelConfig {
        let parameters: String = parameters
            .iter()
            .map(|(k, v)| format!("parameters {{ key: \"{k}\" value: \"{v}\" }} "))
            .collect();
        config(&format!("{{ name: \"checksum\" {parameters} }}"))
    }

    fn run(config: &ModelConfig, dir: &Path) -> Result<()> {
        run_load_agents("m", config, dir, Path::new("/opt/tritonserver/repoagents"))
    }

    #[test]
    fn checksums_that_match_let_the_model_load() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("1")).expect("mkdir");
        std::fs::write(dir.path().join("1/model.onnx"), "abc").expect("write");
        std::fs::write(dir.path().join("labels.txt"), "").expect("write");
        let config = checksum(&[
            ("MD5:1/model.onnx", "900150983cd24fb0d6963f7d28e17f72"),
            ("md5:labels.txt", "d41d8cd98f00b204e9800998ecf8427e"),
        ]);
        run(&config, dir.path()).expect("checksums match");
        run(&ModelConfig::default(), dir.path()).expect("no agents");
    }

    #[test]
    fn a_bad_checksum_key_or_file_fails_in_the_agents_words() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("f"), "abc").expect("write");
        std::fs::create_dir(dir.path().join("d")).expect("mkdir");
        for (parameter, kind, message) in [
            (
                ("MD5:f", "00"),
                ErrorKind::InvalidArg,
                "Mismatched MD5 hash for file f, expect: 00, got: 900150983cd24fb0d6963f7d28e17f72",
            ),
            (
                ("MD5:missing", "00"),
                ErrorKind::InvalidArg,
                "failed to open text file for read missing: No such file or directory",
            ),
            (
                ("SHA1:f", "00"),
                ErrorKind::Unsupported,
                "Unsupported checksum algorithm: SHA1",
            ),
            (("f", "00"), ErrorKind::InvalidArg, "failed to parse key: f"),
            (
                ("MD5:../f", "00"),
                ErrorKind::InvalidArg,
                "failed to open text file for read ../f: the path must stay within the model directory",
            ),
            (
                ("MD5:d", "00"),
                ErrorKind::InvalidArg,
                "failed to open text file for read d: not a regular file",
            ),
        ] {
            let e = run(&checksum(&[parameter]), dir.path()).expect_err(message);
            assert_eq!((e.kind(), e.message()), (kind, message));
        }
    }

    #[test]
    fn other_agents_fail_naming_the_agent_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let agents = tempfile::tempdir().expect("temp dir");
        let config = config(r#"{ name: "checksum" }, { name: "encrypt" }"#);
        let e =
            run_load_agents("m", &config, dir.path(), agents.path()).expect_err("no such agent");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        assert_eq!(
            e.message(),
            format!(
                "unable to find 'libtritonrepoagent_encrypt.so' for repo agent 'encrypt', searched: {}",
                agents.path().display()
            )
        );
        let library = agents.path().join("encrypt/libtritonrepoagent_encrypt.so");
        std::fs::create_dir(library.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(&library, "").expect("write");
        let e = run_load_agents("m", &config, dir.path(), agents.path()).expect_err("not hosted");
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.message().starts_with(&format!(
                "repo agent 'encrypt' at '{}' cannot be run",
                library.display()
            )),
            "{}",
            e.message()
        );
    }
}
