//! Batching along any dimension. The stateful backend batches sequences along the one
//! dimension marked -1 (e.g. the middle one of `[4, -1, 5]`), so a sequence's share of a
//! batch tensor — its *row* — is `outer` blocks of `inner` contiguous bytes, where `outer`
//! is the product of the dimensions before the batch axis. Rows are moved block by block
//! (one `memcpy`, or one conversion pass, per block), never element by element, except
//! where states are stored as FP16 and must be converted.

use std::ops::Range;

/// How a stored row's bytes relate to the batch tensor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// The same bytes.
    Raw,
    /// FP32 in the batch, FP16 in store (`store_states_as_fp16`).
    Fp16,
}

impl Codec {
    /// Stored size of `batch_bytes` of batch data.
    pub fn stored_len(self, batch_bytes: usize) -> usize {
        match self {
            Codec::Raw => batch_bytes,
            Codec::Fp16 => batch_bytes / 2,
        }
    }

    /// Batch bytes from stored bytes.
    fn load(self, stored: &[u8], batch: &mut [u8]) {
        match self {
            Codec::Raw => batch.copy_from_slice(stored),
            Codec::Fp16 => {
                for (half, full) in stored.chunks_exact(2).zip(batch.chunks_exact_mut(4)) {
                    let value = half::f16::from_le_bytes([half[0], half[1]]).to_f32();
                    full.copy_from_slice(&value.to_le_bytes());
                }
            }
        }
    }

    /// Stored bytes from batch bytes.
    fn store(self, batch: &[u8], stored: &mut [u8]) {
        match self {
            Codec::Raw => stored.copy_from_slice(batch),
            Codec::Fp16 => {
                for (full, half) in batch.chunks_exact(4).zip(stored.chunks_exact_mut(2)) {
                    let value = f32::from_le_bytes([full[0], full[1], full[2], full[3]]);
                    half.copy_from_slice(&half::f16::from_f32(value).to_le_bytes());
                }
            }
        }
    }
}

/// Where the batch axis of a tensor is, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAxis {
    /// Product of the dimensions before the batch axis.
    outer: usize,
    /// Bytes after the batch axis, per batch index.
    inner: usize,
}

impl BatchAxis {
    /// The axis `axis` of a tensor with dimensions `dims` (the batch dimension's own
    /// value is ignored) and `element_size`-byte elements.
    pub fn new(dims: &[i64], axis: usize, element_size: usize) -> Self {
        let product = |d: &[i64]| d.iter().map(|&x| x.max(0) as usize).product::<usize>();
        Self {
            outer: product(&dims[..axis]),
            inner: product(&dims[axis + 1..]) * element_size,
        }
    }

    /// Bytes of one row (one batch index).
    pub fn row_bytes(&self) -> usize {
        self.outer * self.inner
    }

    /// Bytes of a batch of `rows` rows.
    pub fn batch_bytes(&self, rows: usize) -> usize {
        self.row_bytes() * rows
    }

    /// Where block `block` of row `row` lies in a batch of `rows` rows.
    fn block(&self, rows: usize, row: usize, block: usize) -> Range<usize> {
        let start = (block * rows + row) * self.inner;
        start..start + self.inner
    }

    /// The bytes of row `row` when they are contiguous in the batch (batch axis first).
    pub fn contiguous_row(&self, rows: usize, row: usize) -> Option<Range<usize>> {
        (self.outer == 1).then(|| self.block(rows, row, 0))
    }

    /// Writes `stored` (a row as `codec` stores it) into row `row` of `batch`.
    pub fn put_row(&self, batch: &mut [u8], rows: usize, row: usize, stored: &[u8], codec: Codec) {
        let stored_inner = codec.stored_len(self.inner);
        for (block, source) in stored
            .chunks_exact(stored_inner.max(1))
            .enumerate()
            .take(self.outer)
        {
            codec.load(source, &mut batch[self.block(rows, row, block)]);
        }
    }

    /// Reads row `row` of `batch` into `stored` (as `codec` stores it).
    pub fn take_row(&self, batch: &[u8], rows: usize, row: usize, stored: &mut [u8], codec: Codec) {
        let stored_inner = codec.stored_len(self.inner);
        for (block, target) in stored
            .chunks_exact_mut(stored_inner.max(1))
            .enumerate()
            .take(self.outer)
        {
            codec.store(&batch[self.block(rows, row, block)], target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn middle_axis_interleaves_rows_per_outer_block() {
        // dims [2, -1, 3]: row r of a 2-row batch sits at [o, r, :].
        let axis = BatchAxis::new(&[2, -1, 3], 1, 4);
        assert_eq!(axis.row_bytes(), 24);
        let a = bytes(&[1., 2., 3., 4., 5., 6.]);
        let b = bytes(&[7., 8., 9., 10., 11., 12.]);
        let mut batch = vec![0; axis.batch_bytes(2)];
        axis.put_row(&mut batch, 2, 0, &a, Codec::Raw);
        axis.put_row(&mut batch, 2, 1, &b, Codec::Raw);
        assert_eq!(
            floats(&batch),
            [1., 2., 3., 7., 8., 9., 4., 5., 6., 10., 11., 12.]
        );
        let mut back = vec![0; 24];
        axis.take_row(&batch, 2, 1, &mut back, Codec::Raw);
        assert_eq!(back, b);
        assert_eq!(axis.contiguous_row(2, 1), None);
    }

    #[test]
    fn first_axis_rows_are_contiguous() {
        let axis = BatchAxis::new(&[-1, 5], 0, 4);
        assert_eq!(axis.contiguous_row(3, 2), Some(40..60));
    }

    #[test]
    fn fp16_storage_round_trips_within_fp16_precision() {
        let axis = BatchAxis::new(&[-1, 2], 0, 4);
        let batch = bytes(&[1.5, -1024.25, 0.1, 3.0]);
        let mut stored = vec![0; Codec::Fp16.stored_len(axis.row_bytes())];
        axis.take_row(&batch, 2, 0, &mut stored, Codec::Fp16);
        assert_eq!(stored.len(), 4);
        let mut again = vec![0; axis.batch_bytes(2)];
        axis.put_row(&mut again, 2, 1, &stored, Codec::Fp16);
        assert_eq!(floats(&again), [0., 0., 1.5, -1024.0]);
    }
}
