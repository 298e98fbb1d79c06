//! The rate limiter (`--rate-limit=execution_count`, Triton's `src/rate_limiter.cc`):
//! a model instance executes only while the resources its `instance_group.rate_limiter`
//! names are free, across every model of the server. Resources are per device (the
//! instance's; CPU instances count as device 0) unless marked `global`. Without
//! `--rate-limit-resource` each resource exists as many times as the most any one
//! instance asks for; with it, a resource asked for beyond what is given fails that
//! model's load with Triton's message. Instances waiting to execute are served one at a
//! time in order of executions × priority (`priority` 0 counts as 1), so an instance of
//! priority 2 gets half the turns of one of priority 1, as in Triton; the first in that
//! order waits for its resources even when a later one's are free (Triton's rule too).
//!
//! An instance's [`Registration`] travels with it to its worker, which runs each
//! execution (warmup included) under it; schedulers and backends are unchanged.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use nereid_proto::inference::ModelRateLimiter;
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Where a resource lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceDevice {
    /// Shared by every device (`global: true`).
    Global,
    /// One device's.
    Device(i32),
}

/// A `--rate-limit-resource=<name>:<count>[:<device>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimit {
    /// The resource's name, as `rate_limiter.resources` name it.
    pub name: String,
    /// How many there are.
    pub count: u64,
    /// The device they belong to; `None`: every device has that many.
    pub device: Option<i32>,
}

/// Resource counts by device and name.
type Resources = BTreeMap<(ResourceDevice, String), u64>;

/// The server-wide limiter every rate-limited instance registers with.
pub struct RateLimiter {
    /// `--rate-limit-resource`; empty: each resource exists as often as the most any
    /// instance needs.
    explicit: Vec<ResourceLimit>,
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Default)]
struct State {
    next_id: u64,
    instances: HashMap<u64, Entry>,
    /// What exists.
    available: Resources,
    /// What executing instances hold.
    held: Resources,
    /// Instances waiting to execute: (id, arrival).
    waiting: Vec<(u64, u64)>,
    arrivals: u64,
}

struct Entry {
    needs: Resources,
    priority: u64,
    executions: u64,
}

impl RateLimiter {
    /// A limiter over the resources `explicit` gives (`--rate-limit-resource`).
    pub fn new(explicit: Vec<ResourceLimit>) -> Arc<Self> {
        Arc::new(Self {
            explicit,
            state: Mutex::new(State::default()),
            turn: Condvar::new(),
        })
    }

    /// Registers an instance on `device` with the group's `rate_limiter` (none: it needs
    /// no resources but still takes its turn); fails, registering nothing, when the
    /// resources cannot be had (Triton's load errors).
    pub fn register(
        self: &Arc<Self>,
        config: Option<&ModelRateLimiter>,
        device: i32,
    ) -> Result<Registration> {
        let mut needs = Resources::new();
        for resource in config.map(|c| c.resources.as_slice()).unwrap_or_default() {
            let at = if resource.global {
                ResourceDevice::Global
            } else {
                ResourceDevice::Device(device)
            };
            needs.insert((at, resource.name.clone()), u64::from(resource.count));
        }
        let priority = u64::from(config.map_or(1, |c| c.priority).max(1));
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.instances.insert(
            id,
            Entry {
                needs,
                priority,
                executions: 0,
            },
        );
        if let Err(e) = self.recompute(&mut state) {
            state.instances.remove(&id);
            // Back to what held before this instance (which was valid).
            let _ = self.recompute(&mut state);
            return Err(e);
        }
        Ok(Registration {
            limiter: self.clone(),
            id,
        })
    }

    /// Sets what exists from the registered instances' needs and the explicit limits.
    fn recompute(&self, state: &mut State) -> Result<()> {
        let mut most = Resources::new();
        for entry in state.instances.values() {
            for (key, &count) in &entry.needs {
                let slot = most.entry(key.clone()).or_default();
                *slot = (*slot).max(count);
            }
        }
        for (device, name) in most.keys() {
            if *device != ResourceDevice::Global
                && most.contains_key(&(ResourceDevice::Global, name.clone()))
            {
                return Err(Error::invalid_arg(format!(
                    "Resource \"{name}\" is present as both global and device-specific resource in the model configuration."
                )));
            }
        }
        if !self.explicit.is_empty() {
            for ((device, name), needed) in most.iter_mut() {
                let given = self
                    .explicit
                    .iter()
                    .filter(|limit| &limit.name == name)
                    .filter(|limit| match device {
                        // A global resource takes the most given for it on any device.
                        ResourceDevice::Global => true,
                        ResourceDevice::Device(d) => limit.device.is_none_or(|l| l == *d),
                    })
                    .map(|limit| limit.count)
                    .max()
                    .unwrap_or(0);
                if given < *needed {
                    return Err(Error::invalid_arg(format!(
                        "Resource count for \"{name}\" is limited to {given} which will prevent scheduling of one or more model instances, the minimum required count is {needed}"
                    )));
                }
                *needed = given;
            }
        }
        tracing::debug!("{}", resource_map(&most));
        state.available = most;
        Ok(())
    }

    /// Waits for instance `id`'s turn and resources, then holds them. An instance that
    /// kept its place in line when it released (see [`Self::release`]) waits from there.
    fn acquire(&self, id: u64) {
        let mut state = self.state.lock();
        state.join_line(id);
        loop {
            if state.first_waiting() == Some(id) && state.fits(id) {
                state.waiting.retain(|(w, _)| *w != id);
                state.take(id);
                // The next in line may fit too.
                self.turn.notify_all();
                return;
            }
            self.turn.wait(&mut state);
        }
    }

    /// Gives back what instance `id` holds; with `again`, the instance takes its place in
    /// line in the same step, so that the next turn is chosen among it and those already
    /// waiting by executions × priority. Without that, an instance that finished would
    /// always come back after the others were served, and priorities would not count.
    fn release(&self, id: u64, again: bool) {
        let mut state = self.state.lock();
        if let Some(entry) = state.instances.get(&id) {
            let needs = entry.needs.clone();
            for (key, count) in needs {
                if let Some(held) = state.held.get_mut(&key) {
                    *held = held.saturating_sub(count);
                }
            }
        }
        if again {
            state.join_line(id);
        }
        self.turn.notify_all();
    }

    /// Takes instance `id` out of the line it joined on release, when it has nothing to
    /// execute after all.
    fn leave_line(&self, id: u64) {
        let mut state = self.state.lock();
        state.waiting.retain(|(w, _)| *w != id);
        self.turn.notify_all();
    }

    fn unregister(&self, id: u64) {
        let mut state = self.state.lock();
        state.instances.remove(&id);
        state.waiting.retain(|(w, _)| *w != id);
        // Removing an instance only lowers what is needed: always valid.
        let _ = self.recompute(&mut state);
        self.turn.notify_all();
    }
}

/// Triton's verbose account of what exists, device by device (L0_model_update reads a
/// count from it to see a limit lowered when an instance needing more left).
fn resource_map(available: &Resources) -> String {
    let mut text = String::from("\nMax Resource Map===>\n");
    let mut device = None;
    for ((at, name), count) in available {
        if device != Some(at) {
            device = Some(at);
            match at {
                ResourceDevice::Global => text.push_str("\tDevice: GLOBAL\n"),
                ResourceDevice::Device(id) => text.push_str(&format!("\tDevice: {id}\n")),
            }
        }
        text.push_str(&format!("\t\tResource: {name}\t Count: {count}\n"));
    }
    text
}

impl State {
    /// Puts instance `id` in line, unless it is there already.
    fn join_line(&mut self, id: u64) {
        if self.waiting.iter().any(|(w, _)| *w == id) {
            return;
        }
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.waiting.push((id, arrival));
    }

    /// The waiting instance whose turn it is: fewest executions × priority; on a tie the
    /// higher priority (the lower number: priority 2 gets half the turns of priority 1),
    /// then the earliest. (Triton leaves ties to its heap's order.)
    fn first_waiting(&self) -> Option<u64> {
        self.waiting
            .iter()
            .min_by_key(|(id, arrival)| {
                let (scaled, priority) = self.instances.get(id).map_or((0, 0), |e| {
                    (e.executions.saturating_mul(e.priority), e.priority)
                });
                (scaled, priority, *arrival)
            })
            .map(|(id, _)| *id)
    }

    fn fits(&self, id: u64) -> bool {
        let Some(entry) = self.instances.get(&id) else {
            return true;
        };
        entry.needs.iter().all(|(key, count)| {
            let held = self.held.get(key).copied().unwrap_or(0);
            held + count <= self.available.get(key).copied().unwrap_or(0)
        })
    }

    fn take(&mut self, id: u64) {
        let Some(entry) = self.instances.get_mut(&id) else {
            return;
        };
        entry.executions += 1;
        for (key, count) in &entry.needs {
            *self.held.entry(key.clone()).or_default() += count;
        }
    }
}

/// One instance's place in the limiter; dropping it (the model unloads) frees it.
pub struct Registration {
    limiter: Arc<RateLimiter>,
    id: u64,
}

impl Registration {
    /// Runs `body` once it is this instance's turn and its resources are held.
    pub fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        self.run_then(body, || false)
    }

    /// [`Self::run`]; before the resources go back, `again` says whether this instance
    /// has its next execution in hand. It then keeps its place in line (Triton's batcher
    /// has the next payload waiting at the limiter the same way); if that execution does
    /// not happen after all, [`Self::leave_line`] gives the place up.
    pub fn run_then<T>(&self, body: impl FnOnce() -> T, again: impl FnOnce() -> bool) -> T {
        self.limiter.acquire(self.id);
        let held = Held(self);
        let result = body();
        let again = again();
        std::mem::forget(held);
        self.limiter.release(self.id, again);
        result
    }

    /// Gives up the place in line [`Self::run_then`] kept, for an execution that did not
    /// happen.
    pub fn leave_line(&self) {
        self.limiter.leave_line(self.id);
    }
}

/// Releases the resources even when the execution panics.
struct Held<'a>(&'a Registration);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.limiter.release(self.0.id, false);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.limiter.unregister(self.id);
    }
}

#[cfg(test)]
#[path = "rate_limit_tests.rs"]
mod tests;
