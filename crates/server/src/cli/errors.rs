//! A command line clap refused, printed as tritonserver prints it: an unknown flag as
//! getopt's `unrecognized option`, a bad value as `Bad option: "--flag".` over Triton's
//! reason (which [`super::values`] words), a missing value as getopt's `requires an
//! argument`; exit status 1, as tritonserver's. `--help` and `--version` print and exit 0.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The flag clap names in an error (`--http-port <HTTP_PORT>` → `--http-port`).
fn flag_of(error: &clap::Error) -> Option<String> {
    match error.get(ContextKind::InvalidArg)? {
        ContextValue::String(arg) => arg.split([' ', '=']).next().map(str::to_string),
        _ => None,
    }
}

/// tritonserver's text for a refused command line; `None` for help and version output,
/// which clap prints itself.
pub fn triton_message(error: &clap::Error) -> Option<String> {
    let flag = flag_of(error).unwrap_or_default();
    Some(match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => return None,
        ErrorKind::UnknownArgument => format!(
            "nereid: unrecognized option '{flag}'\nUsage: nereid [options] (nereid --help lists them)"
        ),
        ErrorKind::ValueValidation => {
            let reason = std::error::Error::source(error)
                .map(ToString::to_string)
                .unwrap_or_else(|| error.to_string());
            format!("Bad option: \"{flag}\".\n{reason}")
        }
        ErrorKind::InvalidValue | ErrorKind::NoEquals => {
            format!("nereid: option '{flag}' requires an argument")
        }
        _ => error.to_string(),
    })
}

/// Prints `error` as tritonserver would and exits (1; 0 for help and version).
pub fn exit(error: clap::Error) -> ! {
    match triton_message(&error) {
        Some(message) => {
            crate::logging::report(&message);
            std::process::exit(1);
        }
        None => error.exit(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn message(args: &[&str]) -> String {
        let mut all = vec!["nereid"];
        all.extend_from_slice(args);
        let error = Cli::try_parse_from(all).expect_err("refused");
        triton_message(&error).expect("an error, not help")
    }

    #[test]
    fn refusals_are_worded_as_tritonserver_words_them() {
        assert_eq!(
            message(&["--http-port", "abc"]),
            "Bad option: \"--http-port\".\nInvalid option value. Got abc"
        );
        assert_eq!(
            message(&["--allow-grpc=maybe"]),
            "Bad option: \"--allow-grpc\".\ninvalid value for bool option: maybe"
        );
        assert_eq!(
            message(&["--rate-limit=sometimes"]),
            "Bad option: \"--rate-limit\".\ninvalid argument for --rate-limit"
        );
        assert!(
            message(&["--bogus-flag"]).starts_with("nereid: unrecognized option '--bogus-flag'")
        );
        assert_eq!(
            message(&["--grpc-port"]),
            "nereid: option '--grpc-port' requires an argument"
        );
    }

    #[test]
    fn help_is_not_an_error() {
        let error = Cli::try_parse_from(["nereid", "--help"]).expect_err("help exits");
        assert!(triton_message(&error).is_none());
    }
}
