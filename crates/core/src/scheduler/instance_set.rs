//! A model version's instances as a set that can change while the version serves: the
//! instances of its `instance_group`s are created here, and a reload that changes only
//! the groups keeps every instance whose group is unchanged but for its name and count,
//! creates the missing ones and retires the rest (Triton's instance update, core
//! `backend_model.cc` `UpdateInstanceGroup` and `PrepareInstances`). The queue, the
//! statistics and the instances in use carry over; only the difference is initialized or
//! finalized. Where the instances run is the scheduler's [`InstanceHost`]: the shared
//! pool of the default scheduler and the dynamic batcher, or the sequence batcher.

use std::sync::Arc;

use nereid_proto::inference::ModelInstanceGroup;
use parking_lot::Mutex;

use super::instances::{Instance, InstancePool, WorkerId};
use super::warmup::WarmupSample;
use crate::backend::{InstanceBackend, InstanceConfig, ModelBackend};
use crate::error::Result;
use crate::model::{InstanceGroupSpec, InstanceKind, ModelSpec};
use crate::rate_limit::{RateLimiter, Registration};
use crate::stats::ModelStats;

/// An instance to create: its name, its group's configuration and normalized form.
type Wanted<'a> = (
    String,
    &'a ModelInstanceGroup,
    &'a InstanceGroupSpec,
    InstanceKind,
);

/// Where a scheduler runs its instances, as an instance update changes them.
pub trait InstanceHost: Send + Sync {
    /// Starts `instances` after warming each up with `warmup`, returning their ids in
    /// order; all or none.
    fn add(&self, instances: Vec<Instance>, warmup: &[WarmupSample]) -> Result<Vec<WorkerId>>;

    /// Stops the instances `ids` once they finish what they serve; the others go on.
    fn retire(&self, ids: &[WorkerId]);

    /// The running instances, oldest first.
    fn workers(&self) -> Vec<WorkerId>;
}

/// The default scheduler's and the dynamic batcher's pool: its retire waits for the
/// instances to finish what they execute.
impl InstanceHost for InstancePool {
    fn add(&self, instances: Vec<Instance>, warmup: &[WarmupSample]) -> Result<Vec<WorkerId>> {
        InstancePool::add(self, instances, warmup)
    }

    fn retire(&self, ids: &[WorkerId]) {
        InstancePool::retire(self, ids)
    }

    fn workers(&self) -> Vec<WorkerId> {
        InstancePool::workers(self)
    }
}

/// The live instances of one model version, and what creates more.
pub struct InstanceSet {
    model: Box<dyn ModelBackend>,
    host: Arc<dyn InstanceHost>,
    stats: Arc<ModelStats>,
    warmup: Vec<WarmupSample>,
    rate_limiter: Option<Arc<RateLimiter>>,
    /// Each running instance's worker and identity; the lock also keeps two updates of
    /// one model from interleaving.
    live: Mutex<Vec<Live>>,
}

/// A running instance: its worker and the identity its group gives it.
#[derive(Clone)]
struct Live {
    worker: WorkerId,
    identity: ModelInstanceGroup,
}

/// What makes two instances interchangeable: their group's configuration without the
/// group's name and count, and the device the instance is on (Triton's instance
/// `Signature`: group and device id).
fn identity(group: &ModelInstanceGroup, kind: InstanceKind) -> ModelInstanceGroup {
    let gpus = match kind {
        InstanceKind::Gpu(id) => vec![id],
        InstanceKind::Cpu | InstanceKind::Model => group.gpus.clone(),
    };
    ModelInstanceGroup {
        name: String::new(),
        count: 1,
        gpus,
        ..group.clone()
    }
}

/// The instances `spec` asks for, in group order: `<group>_<index>` on each of the
/// group's devices (one name per index, as Triton names them), of the passive groups or
/// of the others.
fn wanted(spec: &ModelSpec, passive: bool) -> Vec<Wanted<'_>> {
    spec.config
        .instance_group
        .iter()
        .zip(&spec.instance_groups)
        .filter(|(_, group)| group.passive == passive)
        .flat_map(|(config, group)| {
            (0..group.count).flat_map(move |index| {
                group
                    .devices
                    .iter()
                    .map(move |&kind| (format!("{}_{index}", group.name), config, group, kind))
            })
        })
        .collect()
}

/// Creates the instances of `spec`'s passive groups through `model`: initialized as
/// Triton initializes them (core `backend_model.cc`), then only held until the version
/// unloads; no worker ever sends them requests, and the rate limiter never sees them.
pub fn create_passive(
    model: &dyn ModelBackend,
    spec: &ModelSpec,
    stats: &Arc<ModelStats>,
) -> Result<PassiveInstances> {
    let passive = create_instances(model, &wanted(spec, true), stats, None)?;
    let backends = passive.into_iter().map(|instance| instance.backend);
    Ok(PassiveInstances {
        _held: Mutex::new(backends.collect()),
    })
}

/// The instances of a version's passive groups, finalized when the version (and every
/// version an instance update made of it) is gone. The lock only makes them shareable;
/// nothing calls them.
#[derive(Default)]
pub struct PassiveInstances {
    _held: Mutex<Vec<Box<dyn InstanceBackend>>>,
}

/// Creates the instances `wanted` names through `model`, each registered with the rate
/// limiter when one is on; none survive a failure.
fn create_instances(
    model: &dyn ModelBackend,
    wanted: &[Wanted<'_>],
    stats: &Arc<ModelStats>,
    rate_limiter: Option<&Arc<RateLimiter>>,
) -> Result<Vec<Instance>> {
    let mut instances = Vec::with_capacity(wanted.len());
    for (name, config, group, kind) in wanted {
        let instance = InstanceConfig {
            name: name.clone(),
            kind: *kind,
            passive: group.passive,
            stats: stats.clone(),
        };
        let backend = model.create_instance(&instance)?;
        let turn = match rate_limiter {
            Some(limiter) => Some(registration(limiter, config, *kind)?),
            None => None,
        };
        let gpu = match kind {
            InstanceKind::Gpu(id) => u32::try_from(*id).ok(),
            InstanceKind::Cpu | InstanceKind::Model => None,
        };
        instances.push(Instance {
            name: instance.name,
            backend,
            turn,
            gpu,
        });
    }
    Ok(instances)
}

/// An instance registered with the rate limiter with its group's `rate_limiter`
/// resources on its device (CPU instances count as device 0, as in Triton).
fn registration(
    limiter: &Arc<RateLimiter>,
    config: &ModelInstanceGroup,
    kind: InstanceKind,
) -> Result<Registration> {
    let device = match kind {
        InstanceKind::Gpu(id) => id,
        InstanceKind::Cpu | InstanceKind::Model => 0,
    };
    limiter.register(config.rate_limiter.as_ref(), device)
}

/// What [`InstanceSet::start`] needs besides the pool.
pub struct InstanceSource {
    /// The loaded model, which creates instances.
    pub model: Box<dyn ModelBackend>,
    /// The version's statistics.
    pub stats: Arc<ModelStats>,
    /// The warmup every new instance runs before it serves.
    pub warmup: Vec<WarmupSample>,
    /// The server's rate limiter, when one is on.
    pub rate_limiter: Option<Arc<RateLimiter>>,
}

impl InstanceSet {
    /// The instances `spec` asks for, created through `source` and handed to the host
    /// `start` makes of them (the scheduler's); the set keeps the host to change them.
    pub fn start<H: InstanceHost + 'static>(
        spec: &ModelSpec,
        source: InstanceSource,
        start: impl FnOnce(Vec<Instance>, &[WarmupSample]) -> Result<Arc<H>>,
    ) -> Result<(Self, Arc<H>)> {
        let wanted = wanted(spec, false);
        let instances = create_instances(
            source.model.as_ref(),
            &wanted,
            &source.stats,
            source.rate_limiter.as_ref(),
        )?;
        let host = start(instances, &source.warmup)?;
        let live = host
            .workers()
            .into_iter()
            .zip(&wanted)
            .map(|(worker, (_, config, _, kind))| Live {
                worker,
                identity: identity(config, *kind),
            })
            .collect();
        let set = Self {
            model: source.model,
            host: host.clone(),
            stats: source.stats,
            warmup: source.warmup,
            rate_limiter: source.rate_limiter,
            live: Mutex::new(live),
        };
        Ok((set, host))
    }

    /// Changes the running instances to those `spec` asks for: each wanted instance
    /// takes a running one of the same identity when there is one left, the others are
    /// created (and warmed up) first; then the running instances no group wants any more
    /// are retired once they finish what they execute. On an error nothing changed.
    pub fn update(&self, spec: &ModelSpec) -> Result<()> {
        let mut live = self.live.lock();
        let mut unclaimed = live.clone();
        let mut kept = Vec::new();
        let mut missing = Vec::new();
        for want in wanted(spec, false) {
            let wanted_identity = identity(want.1, want.3);
            match unclaimed
                .iter()
                .rposition(|l| l.identity == wanted_identity)
            {
                Some(at) => kept.push(unclaimed.remove(at)),
                None => missing.push(want),
            }
        }
        let created = create_instances(
            self.model.as_ref(),
            &missing,
            &self.stats,
            self.rate_limiter.as_ref(),
        )?;
        let added = self.host.add(created, &self.warmup)?;
        tracing::debug!(
            model = %spec.name,
            kept = kept.len(),
            created = added.len(),
            retired = unclaimed.len(),
            "instance update"
        );
        let retired: Vec<WorkerId> = unclaimed.iter().map(|l| l.worker).collect();
        self.host.retire(&retired);
        kept.extend(added.into_iter().zip(&missing).map(|(worker, want)| Live {
            worker,
            identity: identity(want.1, want.3),
        }));
        *live = kept;
        Ok(())
    }
}
