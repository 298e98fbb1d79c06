//! Restricted API groups (`--http-restricted-api`, `--grpc-restricted-protocol`): an
//! operator names groups of endpoints that answer only requests carrying a given header
//! with a given value, so that, say, model loading or shared-memory registration is open
//! to an admin sidecar but not to every client that reaches the port. The groups, flag
//! syntax and messages are Triton's (`src/restricted_features.h`,
//! `TritonParser::ParseRestrictedFeatureOption`); each frontend maps its own routes to a
//! group and words its own refusal.

use std::fmt;

/// A group of endpoints restricted together, named as on Triton's command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApiGroup {
    /// Server and model liveness/readiness.
    Health,
    /// Server and model metadata.
    Metadata,
    /// Inference, streaming included.
    Inference,
    /// The system and CUDA shared-memory extensions.
    SharedMemory,
    /// Model configuration.
    ModelConfig,
    /// Repository index, load and unload.
    ModelRepository,
    /// Statistics.
    Statistics,
    /// Trace settings.
    Trace,
    /// Log settings.
    Logging,
}

impl ApiGroup {
    /// Every group, in Triton's order (the order its `--help` lists them).
    pub const ALL: [ApiGroup; 9] = [
        ApiGroup::Health,
        ApiGroup::Metadata,
        ApiGroup::Inference,
        ApiGroup::SharedMemory,
        ApiGroup::ModelConfig,
        ApiGroup::ModelRepository,
        ApiGroup::Statistics,
        ApiGroup::Trace,
        ApiGroup::Logging,
    ];

    /// The group's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ApiGroup::Health => "health",
            ApiGroup::Metadata => "metadata",
            ApiGroup::Inference => "inference",
            ApiGroup::SharedMemory => "shared-memory",
            ApiGroup::ModelConfig => "model-config",
            ApiGroup::ModelRepository => "model-repository",
            ApiGroup::Statistics => "statistics",
            ApiGroup::Trace => "trace",
            ApiGroup::Logging => "logging",
        }
    }

    /// The group named `name` (exact, case-sensitive, as Triton compares).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ApiGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The header a restricted group's requests must carry, and its required value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restriction {
    /// Header (HTTP) or metadata (gRPC) key, with any frontend prefix applied.
    pub header: String,
    /// The exact value it must have.
    pub value: String,
}

impl Restriction {
    /// Whether a request whose header has `value` (`None` when absent) may pass.
    pub fn admits(&self, value: Option<&[u8]>) -> bool {
        value == Some(self.value.as_bytes())
    }
}

/// Which groups one frontend restricts. Empty (everything open) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restrictions {
    by_group: [Option<Restriction>; ApiGroup::ALL.len()],
}

impl Restrictions {
    /// Parses every occurrence of one restriction flag. `option` is the flag's name
    /// without dashes (for messages), `header_prefix` is put before each key (gRPC's
    /// `triton-grpc-protocol-`), `feature` names a group in messages (`api` or
    /// `protocol`). The errors are Triton's words; a group may appear in one flag only.
    pub fn parse(
        flags: &[String],
        option: &str,
        header_prefix: &str,
        feature: &str,
    ) -> Result<Self, String> {
        let mut restrictions = Self::default();
        for flag in flags {
            let (groups, key, value) = split_flag(flag, option)?;
            for name in groups.split(',') {
                let group = ApiGroup::from_name(name)
                    .ok_or_else(|| format!("unknown restricted {feature} '{name}' "))?;
                let slot = &mut restrictions.by_group[group.index()];
                if slot.is_some() {
                    return Err(format!(
                        "restricted {feature} '{name}' can not be specified in multiple config groups"
                    ));
                }
                *slot = Some(Restriction {
                    header: format!("{header_prefix}{key}"),
                    value: value.to_string(),
                });
            }
        }
        Ok(restrictions)
    }

    /// The restriction on `group`, if any.
    pub fn get(&self, group: ApiGroup) -> Option<&Restriction> {
        self.by_group[group.index()].as_ref()
    }

    /// Whether no group is restricted (frontends then skip the check entirely).
    pub fn is_empty(&self) -> bool {
        self.by_group.iter().all(Option::is_none)
    }
}

/// `<groups>:<key>=<value>`: the groups end at the first `:`, the key at the first `=`
/// after it, and none of the three may be empty.
fn split_flag<'a>(flag: &'a str, option: &str) -> Result<(&'a str, &'a str, &'a str), String> {
    let bad =
        || format!("--{option} option format is '<config name>:<setting>=<value>'. Got {flag}");
    let (groups, setting) = flag.split_once(':').ok_or_else(bad)?;
    let (key, value) = setting.split_once('=').ok_or_else(bad)?;
    if groups.is_empty() || key.is_empty() || value.is_empty() {
        return Err(bad());
    }
    Ok((groups, key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str], prefix: &str) -> Result<Restrictions, String> {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        Restrictions::parse(&flags, "http-restricted-api", prefix, "api")
    }

    #[test]
    fn names_round_trip_in_tritons_order() {
        for group in ApiGroup::ALL {
            assert_eq!(ApiGroup::from_name(group.name()), Some(group));
        }
        assert_eq!(ApiGroup::from_name("Health"), None);
        assert_eq!(ApiGroup::ALL[3].to_string(), "shared-memory");
    }

    #[test]
    fn groups_share_one_header_and_the_prefix_is_applied() {
        let r = parse(
            &[
                "shared-memory,model-repository:admin-key=s=cret",
                "health:h=1",
            ],
            "triton-grpc-protocol-",
        )
        .expect("valid");
        let shm = r.get(ApiGroup::SharedMemory).expect("restricted");
        assert_eq!(shm.header, "triton-grpc-protocol-admin-key");
        assert_eq!(shm.value, "s=cret");
        assert_eq!(r.get(ApiGroup::ModelRepository), Some(shm));
        assert_eq!(r.get(ApiGroup::Health).map(|h| h.value.as_str()), Some("1"));
        assert_eq!(r.get(ApiGroup::Inference), None);
        assert!(!r.is_empty());
        assert!(parse(&[], "").expect("valid").is_empty());
    }

    #[test]
    fn only_the_exact_value_is_admitted() {
        let r = Restriction {
            header: "k".into(),
            value: "v".into(),
        };
        assert!(r.admits(Some(b"v")));
        assert!(!r.admits(Some(b"V")));
        assert!(!r.admits(Some(b"")));
        assert!(!r.admits(None));
    }

    #[test]
    fn malformed_flags_get_tritons_messages() {
        let format = |flag: &str| {
            format!("--http-restricted-api option format is '<config name>:<setting>=<value>'. Got {flag}")
        };
        for flag in [
            "health",
            "health:k",
            ":k=v",
            "health:=v",
            "health:k=",
            "k=v:health",
        ] {
            assert_eq!(parse(&[flag], "").err(), Some(format(flag)), "{flag}");
        }
        assert_eq!(
            parse(&["health,helth:k=v"], "").err().as_deref(),
            Some("unknown restricted api 'helth' ")
        );
        assert_eq!(
            parse(&["health,:k=v"], "").err().as_deref(),
            Some("unknown restricted api '' ")
        );
        assert_eq!(
            parse(&["health:k=v", "metadata,health:k2=v"], "")
                .err()
                .as_deref(),
            Some("restricted api 'health' can not be specified in multiple config groups")
        );
    }
}
