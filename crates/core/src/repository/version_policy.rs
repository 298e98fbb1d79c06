//! Which of a model's version directories to load (`version_policy`).

use nereid_proto::inference::{model_version_policy::PolicyChoice, ModelVersionPolicy};

/// The versions of `available` (any order) that `policy` selects, ascending.
pub fn select_versions(policy: Option<&ModelVersionPolicy>, available: &[i64]) -> Vec<i64> {
    let mut sorted = available.to_vec();
    sorted.sort_unstable();
    match policy.and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::All(_)) => sorted,
        Some(PolicyChoice::Specific(s)) => sorted
            .into_iter()
            .filter(|v| s.versions.contains(v))
            .collect(),
        Some(PolicyChoice::Latest(l)) => latest(sorted, l.num_versions.max(1) as usize),
        None => latest(sorted, 1),
    }
}

fn latest(sorted: Vec<i64>, n: usize) -> Vec<i64> {
    let skip = sorted.len().saturating_sub(n);
    sorted.into_iter().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_proto::inference::model_version_policy::{All, Latest, Specific};

    fn policy(choice: PolicyChoice) -> ModelVersionPolicy {
        ModelVersionPolicy {
            policy_choice: Some(choice),
        }
    }

    #[test]
    fn selects_as_triton_does() {
        let available = [3, 1, 10, 2];
        assert_eq!(select_versions(None, &available), vec![10]);
        let p = policy(PolicyChoice::Latest(Latest { num_versions: 2 }));
        assert_eq!(select_versions(Some(&p), &available), vec![3, 10]);
        let p = policy(PolicyChoice::All(All {}));
        assert_eq!(select_versions(Some(&p), &available), vec![1, 2, 3, 10]);
        let p = policy(PolicyChoice::Specific(Specific {
            versions: vec![2, 7],
        }));
        assert_eq!(select_versions(Some(&p), &available), vec![2]);
    }
}
