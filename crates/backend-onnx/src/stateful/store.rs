//! Per-instance state storage: buffers of fixed-size slots, one slot per live sequence,
//! each slot holding every state tensor of its sequence back to back. Without lazy
//! allocation one buffer for every sequence the instance may hold is reserved at load.
//! With it, the first buffer holds `initial_buffer_size` sequences; a buffer of
//! `subsequent_buffer_size` is added once fewer than `buffer_alloc_threshold` slots are
//! free, and only the last buffer is released, once it is empty and more than
//! `buffer_dealloc_threshold` slots are free. The first buffer lives as long as the model.

use std::collections::BTreeSet;

use nereid_core::backend::StateUsage;

use super::params::{Capacity, LazyAllocation};

/// A sequence's place: buffer and slot within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId {
    buffer: usize,
    index: usize,
}

/// What [`StateStore::rebalance`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A buffer was added.
    Grew,
    /// The last buffer was released.
    Shrank,
}

struct Buffer {
    data: Vec<u8>,
    used: usize,
}

/// The state slots of one instance.
pub struct StateStore {
    /// Stored bytes of each state tensor, per sequence.
    tensor_bytes: Vec<usize>,
    /// Offset of each state tensor inside a slot.
    offsets: Vec<usize>,
    slot_bytes: usize,
    plan: Capacity,
    thresholds: Option<(usize, usize)>,
    buffers: Vec<Buffer>,
    /// Free slots, lowest buffer first, so later buffers empty out as sequences end.
    free: BTreeSet<(usize, usize)>,
}

impl StateStore {
    /// A store for states of `tensor_bytes` bytes each, planned by `plan`, with the
    /// first buffer allocated (and its pages touched, so the memory is really reserved);
    /// `None` when the memory cannot be had.
    pub fn new(
        tensor_bytes: Vec<usize>,
        plan: Capacity,
        lazy: Option<LazyAllocation>,
    ) -> Option<Self> {
        let mut offsets = Vec::with_capacity(tensor_bytes.len());
        let mut slot_bytes = 0;
        for bytes in &tensor_bytes {
            offsets.push(slot_bytes);
            slot_bytes += bytes;
        }
        let mut store = Self {
            tensor_bytes,
            offsets,
            slot_bytes,
            plan,
            thresholds: lazy.map(|l| (l.alloc_threshold, l.dealloc_threshold)),
            buffers: Vec::new(),
            free: BTreeSet::new(),
        };
        store.grow().then_some(store)
    }

    fn slots_of(&self, buffer: usize) -> usize {
        if buffer == 0 {
            self.plan.initial
        } else {
            self.plan.subsequent
        }
    }

    /// Adds a buffer; false when the allocator refuses (the size comes from the config).
    fn grow(&mut self) -> bool {
        let buffer = self.buffers.len();
        let slots = self.slots_of(buffer);
        let Some(bytes) = slots.checked_mul(self.slot_bytes) else {
            return false;
        };
        let mut data = Vec::new();
        if data.try_reserve_exact(bytes).is_err() {
            return false;
        }
        // black_box keeps the compiler from turning this into calloc, whose pages would
        // only be committed on first use: the seed's memory is reserved at allocation.
        data.resize(bytes, std::hint::black_box(0u8));
        self.buffers.push(Buffer { data, used: 0 });
        self.free.extend((0..slots).map(|index| (buffer, index)));
        true
    }

    fn shrink(&mut self) {
        if let Some(buffer) = self.buffers.pop() {
            let last = self.buffers.len();
            self.free.retain(|(b, _)| *b != last);
            drop(buffer);
        }
    }

    /// Takes the lowest free slot, adding a buffer first if every allocated slot is taken
    /// and the plan allows one more; `None` when the instance is full.
    pub fn allocate(&mut self) -> Option<SlotId> {
        if self.free.is_empty() && self.buffers.len() < self.plan.max_buffers && !self.grow() {
            return None;
        }
        let (buffer, index) = self.free.pop_first()?;
        self.buffers[buffer].used += 1;
        Some(SlotId { buffer, index })
    }

    /// Gives `slot` back.
    pub fn release(&mut self, slot: SlotId) {
        if let Some(b) = self.buffers.get_mut(slot.buffer) {
            if self.free.insert((slot.buffer, slot.index)) {
                b.used -= 1;
            }
        }
    }

    fn range(&self, slot: SlotId, tensor: usize) -> std::ops::Range<usize> {
        let start = slot.index * self.slot_bytes + self.offsets[tensor];
        start..start + self.tensor_bytes[tensor]
    }

    /// The stored bytes of state `tensor` of the sequence in `slot`.
    pub fn state(&self, slot: SlotId, tensor: usize) -> &[u8] {
        let range = self.range(slot, tensor);
        &self.buffers[slot.buffer].data[range]
    }

    /// The stored bytes of state `tensor` of `slot`, to overwrite.
    pub fn state_mut(&mut self, slot: SlotId, tensor: usize) -> &mut [u8] {
        let range = self.range(slot, tensor);
        &mut self.buffers[slot.buffer].data[range]
    }

    /// The lazy-allocation step the original runs after every execution: add a buffer
    /// when free slots run below the allocation threshold, else release the last buffer
    /// when it is empty and free slots exceed the deallocation threshold.
    pub fn rebalance(&mut self) -> Option<Change> {
        let (alloc, dealloc) = self.thresholds?;
        let free = self.free.len();
        if free < alloc && self.buffers.len() < self.plan.max_buffers {
            return self.grow().then_some(Change::Grew);
        }
        let last_empty = self.buffers.last().is_some_and(|b| b.used == 0);
        if self.buffers.len() > 1 && free > dealloc && last_empty {
            self.shrink();
            return Some(Change::Shrank);
        }
        None
    }

    /// Buffers, bytes and sequences, for the metrics.
    pub fn usage(&self) -> StateUsage {
        let capacity: usize = (0..self.buffers.len()).map(|b| self.slots_of(b)).sum();
        StateUsage {
            buffers: self.buffers.len() as u64,
            bytes: self.buffers.iter().map(|b| b.data.len() as u64).sum(),
            sequences: (capacity - self.free.len()) as u64,
            capacity: capacity as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lazy_store() -> StateStore {
        let lazy = LazyAllocation {
            initial: 4,
            subsequent: 2,
            alloc_threshold: 2,
            dealloc_threshold: 3,
        };
        let plan = Capacity {
            max_sequences: 8,
            initial: 4,
            subsequent: 2,
            max_buffers: 3,
        };
        StateStore::new(vec![8, 4], plan, Some(lazy)).expect("small")
    }

    #[test]
    fn eager_store_reserves_everything_at_once() {
        let plan = Capacity {
            max_sequences: 3,
            initial: 3,
            subsequent: 0,
            max_buffers: 1,
        };
        let mut store = StateStore::new(vec![20], plan, None).expect("small");
        assert_eq!(store.usage().bytes, 60);
        let slots: Vec<_> = (0..3).filter_map(|_| store.allocate()).collect();
        assert_eq!(slots.len(), 3);
        assert_eq!(store.allocate(), None, "full");
        assert_eq!(store.rebalance(), None);
    }

    #[test]
    fn slots_hold_each_tensor_separately() {
        let mut store = lazy_store();
        let a = store.allocate().expect("slot");
        let b = store.allocate().expect("slot");
        store.state_mut(a, 0).fill(1);
        store.state_mut(a, 1).fill(2);
        store.state_mut(b, 0).fill(3);
        assert_eq!(store.state(a, 0), [1; 8]);
        assert_eq!(store.state(a, 1), [2; 4]);
        assert_eq!(store.state(b, 0), [3; 8]);
        assert_eq!(store.state(b, 1), [0; 4]);
    }

    #[test]
    fn grows_below_the_alloc_threshold_and_releases_only_the_empty_last_buffer() {
        let mut store = lazy_store();
        assert_eq!(store.usage().buffers, 1);
        let mut held: Vec<SlotId> = (0..3).filter_map(|_| store.allocate()).collect();
        // 1 free < 2: grow to 6 slots.
        assert_eq!(store.rebalance(), Some(Change::Grew));
        held.extend((0..3).filter_map(|_| store.allocate()));
        assert_eq!(store.usage().sequences, 6);
        // Full: 0 free, grow to the maximum of 3 buffers.
        assert_eq!(store.rebalance(), Some(Change::Grew));
        assert_eq!(store.usage().capacity, 8);
        held.extend((0..2).filter_map(|_| store.allocate()));
        assert_eq!(store.allocate(), None, "8 sequences at most");
        assert_eq!(store.rebalance(), None);
        // Free the first buffer's four slots: 4 free > 3, but the last buffer is in use.
        for slot in held.drain(..4) {
            store.release(slot);
        }
        assert_eq!(store.rebalance(), None);
        // Empty the last buffer: now it goes, and only it.
        for slot in held.drain(2..) {
            store.release(slot);
        }
        assert_eq!(store.rebalance(), Some(Change::Shrank));
        assert_eq!(store.usage().buffers, 2);
        // 4 + 2 slots, 2 in use: 4 free > 3 but the second buffer still holds them.
        assert_eq!(store.rebalance(), None);
        for slot in held.drain(..) {
            store.release(slot);
        }
        assert_eq!(store.rebalance(), Some(Change::Shrank));
        assert_eq!(
            store.rebalance(),
            None,
            "the first buffer is never released"
        );
        assert_eq!(store.usage().buffers, 1);
    }

    #[test]
    fn new_sequences_fill_the_lowest_buffer_first() {
        let mut store = lazy_store();
        let first: Vec<SlotId> = (0..4).filter_map(|_| store.allocate()).collect();
        let extra = store.allocate().expect("grows on demand");
        assert_eq!(extra.buffer, 1);
        store.release(first[1]);
        assert_eq!(store.allocate(), Some(first[1]));
    }
}
