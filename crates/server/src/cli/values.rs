//! tritonserver's value syntax, as clap value parsers: integers read the way `std::stoi`
//! reads them, booleans as Triton's `ParseOption<bool>`, pairs and `<name>,<key>=<value>`
//! settings split where Triton splits them. Each failure is Triton's own sentence, so
//! [`crate::cli::errors`] can print it under `Bad option: "--flag".` as tritonserver does.

use std::str::FromStr;

/// Triton's message for a value that is not a number.
fn invalid(arg: &str) -> String {
    format!("Invalid option value. Got {arg}")
}

/// Triton's message for a number outside the option's range.
fn out_of_bound(arg: &str) -> String {
    format!("Provided option value is out of bound. Got {arg}")
}

/// A boolean as Triton reads it: `true`/`on`/`1` or `false`/`off`/`0`, any case.
pub fn boolean(arg: &str) -> Result<bool, String> {
    match arg.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(format!("invalid value for bool option: {arg}")),
    }
}

/// An integer as `std::stoll` reads it: leading whitespace, an optional sign, then the
/// digits up to the first non-digit (tritonserver accepts `8000abc` as 8000, so a launch
/// line that works there works here).
fn leading_integer(arg: &str) -> Result<i128, String> {
    let text = arg.trim_start();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return Err(invalid(arg));
    }
    // More digits than any option's range takes is out of bound, as stoll says.
    let magnitude: i128 = digits[..end].parse().map_err(|_| out_of_bound(arg))?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// An integer option of type `T`: Triton's messages for text and for a value `T` cannot
/// hold (a port above 65535, a negative count).
pub fn integer<T: TryFrom<i128>>(arg: &str) -> Result<T, String> {
    T::try_from(leading_integer(arg)?).map_err(|_| out_of_bound(arg))
}

/// A floating-point option (`--min-supported-compute-capability`), as `std::stod`.
pub fn float(arg: &str) -> Result<f64, String> {
    f64::from_str(arg.trim()).map_err(|_| invalid(arg))
}

/// `<first><delim><second>`, split at the first `delim`, with Triton's message when the
/// delimiter is missing.
pub fn pair<'a>(arg: &'a str, delim: &str) -> Result<(&'a str, &'a str), String> {
    arg.split_once(delim).ok_or_else(|| {
        format!(
            "Cannot parse pair option due to incorrect number of inputs.--<pair option> argument requires format <first>{delim}<second>. Found: {arg}"
        )
    })
}

/// `<GPU device>:<byte size>` (`--cuda-memory-pool-byte-size`,
/// `--cuda-virtual-address-size`).
pub fn device_bytes(arg: &str) -> Result<(i32, u64), String> {
    let (device, size) = pair(arg, ":")?;
    Ok((integer(device)?, integer(size)?))
}

/// `<GPU device>:<fraction>` (`--model-load-gpu-limit`).
pub fn device_fraction(arg: &str) -> Result<(i32, f64), String> {
    let (device, fraction) = pair(arg, ":")?;
    Ok((integer(device)?, float(fraction)?))
}

/// `<low>-<high>` (`--sagemaker-safe-port-range`).
pub fn port_range(arg: &str) -> Result<(i32, i32), String> {
    let (low, high) = pair(arg, "-")?;
    Ok((integer(low)?, integer(high)?))
}

/// A `<name>,<setting>=<value>` setting (`--host-policy`): all three parts present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSetting {
    /// What precedes the first comma (the policy's name).
    pub name: String,
    /// The setting.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// `--host-policy=<policy name>,<setting>=<value>`, with Triton's message.
pub fn host_policy(arg: &str) -> Result<NamedSetting, String> {
    let error =
        || format!("--host-policy option format is '<policy name>,<setting>=<value>'. Got {arg}");
    let (name, rest) = arg.split_once(',').ok_or_else(error)?;
    let (key, value) = rest.split_once('=').ok_or_else(error)?;
    if name.is_empty() || key.is_empty() || value.is_empty() {
        return Err(error());
    }
    Ok(NamedSetting {
        name: name.to_string(),
        key: key.to_string(),
        value: value.to_string(),
    })
}

/// `--log-verbose`: `true` is 1 and `false` 0 (the SageMaker `serve` script passes
/// `--log-verbose=true`), any other value an integer; a negative level is off.
pub fn log_verbose(arg: &str) -> Result<u32, String> {
    match arg.to_ascii_lowercase().as_str() {
        "true" => Ok(1),
        "false" => Ok(0),
        _ => Ok(u32::try_from(integer::<i32>(arg)?.max(0)).unwrap_or(0)),
    }
}

/// An endpoint's address or port as given, checked only if the endpoint is served:
/// tritonserver stores `--http-port -47` or `--grpc-address -47` without looking at them
/// and starts with that endpoint off (its L0_socket suite launches exactly that), so a
/// launch line with a disabled endpoint's stale value keeps working here.
#[derive(Debug, Clone)]
pub struct Unchecked<T> {
    /// The value, or Triton's sentence for why the argument is not one.
    value: Result<T, String>,
}

impl<T: Clone> Unchecked<T> {
    /// The value, or `Bad option: "--<flag>".` over why the argument is not one.
    pub fn checked(&self, flag: &str) -> anyhow::Result<T> {
        self.value
            .clone()
            .map_err(|reason| super::config::bad_option(flag, &reason))
    }

    /// The value, if the argument is one.
    pub fn ok(&self) -> Option<T> {
        self.value.clone().ok()
    }
}

/// A port read as tritonserver reads it (any `int`), kept for [`Unchecked::checked`].
pub fn unchecked_port(arg: &str) -> Result<Unchecked<u16>, String> {
    integer::<i32>(arg)?;
    Ok(Unchecked {
        value: integer(arg),
    })
}

/// A bind address (see [`address`]), kept for [`Unchecked::checked`].
pub fn unchecked_address(arg: &str) -> Result<Unchecked<std::net::IpAddr>, String> {
    Ok(Unchecked {
        value: address(arg),
    })
}

/// A bind address as tritonserver's frontends take it: an IP address, optionally in
/// brackets or after libevhtp's `ipv4:`/`ipv6:` prefix (`ipv6:[::1]`, `ipv6:::1`), or a
/// host name resolved once at start-up (gRPC accepts `localhost`).
pub fn address(arg: &str) -> Result<std::net::IpAddr, String> {
    let bare = arg
        .strip_prefix("ipv6:")
        .or_else(|| arg.strip_prefix("ipv4:"))
        .unwrap_or(arg);
    let bare = bare
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .unwrap_or(bare);
    if let Ok(ip) = bare.parse() {
        return Ok(ip);
    }
    use std::net::ToSocketAddrs;
    (bare, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut found| found.next())
        .map(|found| found.ip())
        .ok_or_else(|| format!("cannot resolve address '{arg}'"))
}

/// `--model-control-mode`, `--rate-limit`, `--grpc-infer-response-compression-level`:
/// a word from a fixed list, lower-cased first as Triton does, else `invalid argument
/// for --<flag>`.
pub fn keyword<T: Copy>(arg: &str, flag: &str, words: &[(&str, T)]) -> Result<T, String> {
    let lower = arg.to_ascii_lowercase();
    words
        .iter()
        .find(|(word, _)| *word == lower)
        .map(|(_, value)| *value)
        .ok_or_else(|| format!("invalid argument for --{flag}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_like_stoi() {
        assert_eq!(integer::<u16>("8000"), Ok(8000));
        assert_eq!(integer::<u16>(" +8000abc"), Ok(8000));
        assert_eq!(integer::<i32>("-1"), Ok(-1));
        assert_eq!(
            integer::<u16>("abc"),
            Err("Invalid option value. Got abc".into())
        );
        assert_eq!(
            integer::<u16>("70000"),
            Err("Provided option value is out of bound. Got 70000".into())
        );
        assert_eq!(
            integer::<u32>("-3"),
            Err("Provided option value is out of bound. Got -3".into())
        );
        assert!(integer::<i64>(&"9".repeat(60)).is_err());
    }

    #[test]
    fn booleans_and_verbose_levels() {
        for on in ["true", "TRUE", "on", "1"] {
            assert_eq!(boolean(on), Ok(true));
        }
        for off in ["false", "Off", "0"] {
            assert_eq!(boolean(off), Ok(false));
        }
        assert_eq!(
            boolean("yes"),
            Err("invalid value for bool option: yes".into())
        );
        assert_eq!(log_verbose("true"), Ok(1));
        assert_eq!(log_verbose("False"), Ok(0));
        assert_eq!(log_verbose("2"), Ok(2));
        assert_eq!(log_verbose("-1"), Ok(0));
        assert!(log_verbose("loud").is_err());
    }

    #[test]
    fn pairs_and_settings() {
        assert_eq!(device_bytes("0:67108864"), Ok((0, 67_108_864)));
        assert_eq!(device_fraction("1:0.5"), Ok((1, 0.5)));
        assert_eq!(port_range("8000-8002"), Ok((8000, 8002)));
        let e = device_bytes("0").expect_err("no colon");
        assert!(e.starts_with("Cannot parse pair option"), "{e}");
        assert_eq!(
            device_bytes("0:big"),
            Err("Invalid option value. Got big".into())
        );
        assert_eq!(
            host_policy("gpu_0,numa-node=0").map(|s| s.name),
            Ok("gpu_0".into())
        );
        assert_eq!(
            host_policy("numa-node=0"),
            Err(
                "--host-policy option format is '<policy name>,<setting>=<value>'. Got numa-node=0"
                    .into()
            )
        );
    }

    #[test]
    fn addresses_take_evhtp_and_grpc_spellings() {
        let v6: std::net::IpAddr = "::1".parse().expect("ip");
        for spelling in ["::1", "[::1]", "ipv6:[::1]", "ipv6:::1"] {
            assert_eq!(address(spelling), Ok(v6), "{spelling}");
        }
        assert_eq!(address("ipv4:127.0.0.1"), Ok([127, 0, 0, 1].into()));
        assert!(address("localhost").is_ok());
        assert!(address("no such host.invalid").is_err());
    }

    #[test]
    fn keywords_are_lower_cased_first() {
        let words = [("none", 0), ("poll", 1)];
        assert_eq!(keyword("POLL", "model-control-mode", &words), Ok(1));
        assert_eq!(
            keyword("sometimes", "model-control-mode", &words),
            Err("invalid argument for --model-control-mode".into())
        );
    }
}
