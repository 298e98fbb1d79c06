//! How a model's requests are scheduled, read once from the normalized configuration:
//! the scheduler chosen at load receives these typed settings and never sees the proto.

use std::collections::BTreeMap;
use std::time::Duration;

use nereid_proto::inference::model_config::SchedulingChoice;
use nereid_proto::inference::model_queue_policy::TimeoutAction;
use nereid_proto::inference::model_sequence_batching::StrategyChoice;
use nereid_proto::inference::{
    ModelConfig, ModelDynamicBatching, ModelQueuePolicy, ModelSequenceBatching,
};

use super::controls::ControlSpec;
use super::state::StateSpec;
use super::{over_limit, InstanceGroupSpec};
use crate::error::Result;

/// The most sequence slots of one model version, all instances together (and so also
/// the largest `max_candidate_sequences`). The sequence batcher keeps a slot entry and a
/// free-list entry for every slot from load on (about 100 bytes each), and the stateful
/// backend a state slot: 2^20 slots keep that bookkeeping near 100 MB, while real
/// deployments hold thousands of sequences per instance (the stateful backend's example
/// holds 1280).
pub const MAX_SEQUENCE_SLOTS: usize = 1 << 20;

/// The scheduler a model gets, with its settings (Triton's choice at load: sequence
/// batching, dynamic batching, otherwise the default scheduler).
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulingSpec {
    /// No batching across requests.
    Default,
    /// `dynamic_batching`.
    Dynamic(DynamicBatchingSpec),
    /// `sequence_batching` (boxed: it is much larger than the other settings).
    Sequence(Box<SequenceSpec>),
    /// `ensemble_scheduling`: the steps run on other models; the plan is built separately.
    Ensemble,
}

/// `dynamic_batching`, with Triton's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicBatchingSpec {
    /// Preferred batch sizes, ascending, each within `1..=max_batch_size`.
    pub preferred_batch_sizes: Vec<usize>,
    /// How long the oldest request may wait for a fuller batch.
    pub max_queue_delay: Duration,
    /// Answers go out in arrival order, whichever instance finishes first.
    pub preserve_ordering: bool,
    /// `priority_levels`: requests may ask for levels 1 (the highest) to this (0: there
    /// are no priorities). Any number is fine: a level costs nothing until a request
    /// waits at it, as in Triton, which makes queues only for levels in use.
    pub priority_levels: u64,
    /// The level of a request without a valid `priority` (1 without priorities).
    pub default_level: u64,
    /// `priority_queue_policy`: the levels with a policy of their own.
    pub level_policies: BTreeMap<u64, QueuePolicy>,
    /// `default_queue_policy`: every other level's policy.
    pub default_policy: QueuePolicy,
}

/// A priority level's queue policy (`default_queue_policy` / `priority_queue_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePolicy {
    /// REJECT (true) or DELAY (false) a request whose timeout passes while queued.
    pub reject_on_timeout: bool,
    /// `default_timeout_microseconds`, when set.
    pub default_timeout: Option<Duration>,
    /// Whether a request's own `timeout` parameter may lower the default.
    pub allow_timeout_override: bool,
    /// Largest queue (0: unbounded but for the scheduler's own bound).
    pub max_queue_size: usize,
}

/// `sequence_batching`, with Triton's defaults applied and its controls and state checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceSpec {
    /// How each instance's batches are formed.
    pub strategy: SequenceStrategy,
    /// A sequence without a request for this long is released.
    pub max_sequence_idle: Duration,
    /// The control tensors the server fills.
    pub controls: ControlSpec,
    /// Implicit state kept per sequence.
    pub states: Vec<StateSpec>,
    /// `iterative_sequence`: one request is a whole sequence, executed again each time
    /// the backend reschedules it, until it completes (Triton's iterative scheduling).
    pub iterative: bool,
}

/// The sequence batcher's strategy.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceStrategy {
    /// One request from every active slot, padding the gaps (`direct`).
    Direct {
        /// `minimum_slot_utilization`: wait for this share of slots to be ready...
        minimum_slot_utilization: f32,
        /// ...or for the oldest request to have waited this long.
        max_queue_delay: Duration,
    },
    /// The oldest ready requests of the candidate sequences (`oldest`).
    Oldest {
        /// Sequences each instance holds at once (`max_candidate_sequences`, by default
        /// the batch size).
        max_candidate_sequences: usize,
        /// Batch sizes to run at once.
        preferred_batch_sizes: Vec<usize>,
        /// Longest wait for a fuller batch.
        max_queue_delay: Duration,
    },
}

impl SchedulingSpec {
    /// Reads the scheduling section of a normalized, validated `config`.
    pub(super) fn from_config(config: &ModelConfig) -> Result<Self> {
        let max_batch = usize::try_from(config.max_batch_size).unwrap_or(0);
        Ok(match &config.scheduling_choice {
            None => SchedulingSpec::Default,
            Some(SchedulingChoice::DynamicBatching(d)) => {
                SchedulingSpec::Dynamic(DynamicBatchingSpec::from_config(d, max_batch))
            }
            Some(SchedulingChoice::SequenceBatching(s)) => SchedulingSpec::Sequence(Box::new(
                SequenceSpec::from_config(s, &config.name, max_batch)?,
            )),
            Some(SchedulingChoice::EnsembleScheduling(_)) => SchedulingSpec::Ensemble,
        })
    }

    /// The sequence settings, for a model with `sequence_batching`.
    pub fn sequence(&self) -> Option<&SequenceSpec> {
        match self {
            SchedulingSpec::Sequence(s) => Some(s.as_ref()),
            _ => None,
        }
    }
}

impl DynamicBatchingSpec {
    /// The settings of `config`.
    fn from_config(config: &ModelDynamicBatching, max_batch_size: usize) -> Self {
        let max_batch = max_batch_size.max(1);
        let mut preferred_batch_sizes: Vec<usize> = config
            .preferred_batch_size
            .iter()
            .filter_map(|&p| usize::try_from(p).ok())
            .filter(|&p| p > 0 && p <= max_batch)
            .collect();
        preferred_batch_sizes.sort_unstable();
        preferred_batch_sizes.dedup();
        // Policies for levels requests cannot ask for are never used.
        let level_policies = config
            .priority_queue_policy
            .iter()
            .filter(|(&level, _)| level >= 1 && level <= config.priority_levels)
            .map(|(&level, policy)| (level, QueuePolicy::from_config(Some(policy))))
            .collect();
        let default_level = if config.priority_levels == 0 {
            1
        } else {
            config.default_priority_level.max(1)
        };
        Self {
            preferred_batch_sizes,
            max_queue_delay: Duration::from_micros(config.max_queue_delay_microseconds),
            preserve_ordering: config.preserve_ordering,
            priority_levels: config.priority_levels,
            default_level,
            level_policies,
            default_policy: QueuePolicy::from_config(config.default_queue_policy.as_ref()),
        }
    }

    /// The level a request asking for `priority` waits at: the default level for none,
    /// 0 or one out of range, as in Triton.
    pub fn level_of(&self, priority: Option<u64>) -> u64 {
        match priority {
            Some(p) if p >= 1 && p <= self.priority_levels => p,
            _ => self.default_level,
        }
    }

    /// The queue policy of `level`.
    pub fn policy(&self, level: u64) -> QueuePolicy {
        self.level_policies
            .get(&level)
            .copied()
            .unwrap_or(self.default_policy)
    }
}

impl Default for DynamicBatchingSpec {
    /// Batching with no preferred sizes, no delay and one unbounded level.
    fn default() -> Self {
        Self::from_config(&ModelDynamicBatching::default(), 0)
    }
}

impl QueuePolicy {
    fn from_config(p: Option<&ModelQueuePolicy>) -> Self {
        let Some(p) = p else {
            return Self {
                reject_on_timeout: true,
                default_timeout: None,
                allow_timeout_override: false,
                max_queue_size: 0,
            };
        };
        Self {
            reject_on_timeout: p.timeout_action != TimeoutAction::Delay as i32,
            default_timeout: (p.default_timeout_microseconds > 0)
                .then(|| Duration::from_micros(p.default_timeout_microseconds)),
            allow_timeout_override: p.allow_timeout_override,
            max_queue_size: usize::try_from(p.max_queue_size).unwrap_or(usize::MAX),
        }
    }

    /// A request's timeout: the level's default, lowered by the request's `timeout`
    /// parameter when the policy allows overriding.
    pub fn timeout(&self, requested_us: Option<u64>) -> Option<Duration> {
        let requested = requested_us
            .filter(|&us| us > 0 && self.allow_timeout_override)
            .map(Duration::from_micros);
        match (self.default_timeout, requested) {
            (Some(d), Some(r)) => Some(d.min(r)),
            (d, r) => d.or(r),
        }
    }
}

impl SequenceSpec {
    fn from_config(config: &ModelSequenceBatching, model: &str, max_batch: usize) -> Result<Self> {
        let batch = max_batch.max(1);
        let strategy = match &config.strategy_choice {
            Some(StrategyChoice::Oldest(o)) => SequenceStrategy::Oldest {
                max_candidate_sequences: match usize::try_from(o.max_candidate_sequences) {
                    Ok(0) | Err(_) => batch,
                    Ok(c) if c > MAX_SEQUENCE_SLOTS => {
                        return Err(over_limit(
                            model,
                            "sequence_batching.oldest.max_candidate_sequences",
                            c,
                            MAX_SEQUENCE_SLOTS,
                        ))
                    }
                    Ok(c) => c,
                },
                preferred_batch_sizes: o
                    .preferred_batch_size
                    .iter()
                    .filter_map(|s| usize::try_from(*s).ok())
                    .collect(),
                max_queue_delay: Duration::from_micros(o.max_queue_delay_microseconds),
            },
            Some(StrategyChoice::Direct(d)) => SequenceStrategy::Direct {
                minimum_slot_utilization: d.minimum_slot_utilization,
                max_queue_delay: Duration::from_micros(d.max_queue_delay_microseconds),
            },
            None => SequenceStrategy::Direct {
                minimum_slot_utilization: 0.0,
                max_queue_delay: Duration::ZERO,
            },
        };
        let controls = ControlSpec::from_config(config, model)?;
        let states = config
            .state
            .iter()
            .enumerate()
            .map(|(index, state)| StateSpec::from_config(state, model, index))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            strategy,
            max_sequence_idle: Duration::from_micros(config.max_sequence_idle_microseconds),
            controls,
            states,
            iterative: config.iterative_sequence,
        })
    }

    /// Fails when the slots of all started instances of `groups` together exceed
    /// [`MAX_SEQUENCE_SLOTS`]: the sequence batcher allocates them all at load.
    pub(super) fn check_slots(
        &self,
        model: &str,
        max_batch_size: usize,
        groups: &[InstanceGroupSpec],
    ) -> Result<()> {
        let instances = groups
            .iter()
            .filter(|g| !g.passive)
            .map(InstanceGroupSpec::instances)
            .sum::<usize>()
            .max(1);
        let per_instance = self.slots_per_instance(max_batch_size);
        let slots = per_instance.saturating_mul(instances);
        if slots <= MAX_SEQUENCE_SLOTS {
            return Ok(());
        }
        let field = match self.strategy {
            SequenceStrategy::Oldest { .. } => {
                "sequence slots (sequence_batching.oldest.max_candidate_sequences × instances)"
            }
            SequenceStrategy::Direct { .. } => "sequence slots (max_batch_size × instances)",
        };
        Err(over_limit(
            model,
            field,
            format!("{per_instance} × {instances} = {slots}"),
            MAX_SEQUENCE_SLOTS,
        ))
    }

    /// Sequences each instance holds at once: `max_candidate_sequences` for `oldest`, the
    /// batch size for `direct`.
    pub fn slots_per_instance(&self, max_batch_size: usize) -> usize {
        match &self.strategy {
            SequenceStrategy::Oldest {
                max_candidate_sequences,
                ..
            } => *max_candidate_sequences,
            SequenceStrategy::Direct { .. } => max_batch_size.max(1),
        }
    }
}
