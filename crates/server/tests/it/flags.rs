//! Every tritonserver flag against the real binary, from the list kept as data in
//! `tests/data/tritonserver-flags.txt`: `--help` names each one, and each value Triton
//! refuses is refused here with Triton's words and exit status 1, never a panic.

use std::path::Path;
use std::process::{Command, Output};

/// One line of the flag list: the flag and, when it has one, a refused value and the
/// text its refusal holds.
struct Flag {
    name: String,
    refused: Option<(String, String)>,
}

fn flags() -> Vec<Flag> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tritonserver-flags.txt");
    let text = std::fs::read_to_string(&path).expect("the flag list is part of the crate");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut fields = line.split('\t');
            let name = fields.next().expect("a flag").to_string();
            let refused = match (fields.next(), fields.next()) {
                (Some(value), Some(message)) => Some((value.to_string(), message.to_string())),
                _ => None,
            };
            Flag { name, refused }
        })
        .collect()
}

/// Every `--name` a help text mentions.
fn long_flags(help: &str) -> std::collections::HashSet<String> {
    help.split("--")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect()
        })
        .collect()
}

fn nereid(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nereid"))
        .args(args)
        .env_remove("AIP_MODE")
        .env_remove("AIP_STORAGE_URI")
        .output()
        .expect("the binary runs")
}

#[test]
fn help_lists_every_tritonserver_flag() {
    let all = flags();
    assert!(all.len() >= 90, "the list holds tritonserver's flags");
    let help = nereid(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    let named = long_flags(&text);
    let missing: Vec<_> = all
        .iter()
        .filter(|flag| !named.contains(&flag.name))
        .map(|flag| flag.name.as_str())
        .collect();
    assert!(missing.is_empty(), "flags nereid --help lacks: {missing:?}");
}

#[test]
fn every_refused_value_gets_tritons_error_and_status_one() {
    let repository = std::env::temp_dir();
    let repository = repository.to_str().expect("utf-8 temp dir");
    for flag in flags() {
        let Some((value, message)) = &flag.refused else {
            continue;
        };
        let arg = format!("--{}={value}", flag.name);
        let out = nereid(&["--model-repository", repository, &arg]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{arg}: {stderr}");
        assert!(
            stderr.contains(message.as_str()),
            "{arg}: expected '{message}' in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{arg}: {stderr}");
    }
}

#[test]
fn an_unknown_flag_is_refused_as_getopt_does() {
    let out = nereid(&["--model-repository", ".", "--bogus-flag"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nereid: unrecognized option '--bogus-flag'"),
        "{stderr}"
    );
}
