//! A tensor crossing between batching and non-batching models inside an ensemble: a
//! non-batching producer's tensor gains a batch dimension of 1 where its shape matches
//! the batching consumer's `dims` outright, and a batch-1 tensor loses its batch
//! dimension where a non-batching consumer's `dims` do not match it as it is — what
//! Triton's ensemble scheduler does (`EnsembleContext::ReshapeTensorDims`), so that e.g.
//! a non-batching ensemble can run identity models with `max_batch_size > 0`.

/// The shape a tensor takes on its way to a consumer whose configuration says `dims` and
/// whether it batches. `batch` is the batch size of the request that produced the tensor
/// (0 for a non-batching model's request).
pub fn reshape(dims: &[i64], consumer_batches: bool, batch: u64, shape: Vec<i64>) -> Vec<i64> {
    if consumer_batches == (batch != 0) {
        return shape;
    }
    if consumer_batches {
        if matches_with_wildcard(dims, &shape) {
            let mut batched = Vec::with_capacity(shape.len() + 1);
            batched.push(1);
            batched.extend_from_slice(&shape);
            return batched;
        }
    } else if batch == 1 && !matches_with_wildcard(dims, &shape) && !shape.is_empty() {
        return shape[1..].to_vec();
    }
    shape
}

/// The batch size a request to a model has: its first input's leading dimension when the
/// model batches, 0 otherwise (Triton's `InferenceRequest::BatchSize`).
pub fn batch_of(model_batches: bool, first_input_shape: Option<&[i64]>) -> u64 {
    match (model_batches, first_input_shape.and_then(|s| s.first())) {
        (true, Some(&first)) => u64::try_from(first).unwrap_or(0),
        _ => 0,
    }
}

/// Same rank and every dimension equal, or -1 on either side.
fn matches_with_wildcard(dims: &[i64], shape: &[i64]) -> bool {
    dims.len() == shape.len()
        && dims
            .iter()
            .zip(shape)
            .all(|(d, s)| d == s || *d == -1 || *s == -1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_batching_tensor_gains_a_batch_dimension_where_it_matches_dims() {
        assert_eq!(reshape(&[-1], true, 0, vec![0]), [1, 0]);
        assert_eq!(reshape(&[-1, -1], true, 0, vec![2, 3]), [1, 2, 3]);
        // Already shaped as a batch: left as it is.
        assert_eq!(reshape(&[4], true, 0, vec![8, 4]), [8, 4]);
    }

    #[test]
    fn a_batch_of_one_loses_its_batch_dimension_where_dims_do_not_match() {
        assert_eq!(reshape(&[4], false, 1, vec![1, 4]), [4]);
        // Matches as it is (dims with the batch dimension included): kept.
        assert_eq!(reshape(&[1, 4], false, 1, vec![1, 4]), [1, 4]);
        // A larger batch cannot be stripped.
        assert_eq!(reshape(&[4], false, 2, vec![2, 4]), [2, 4]);
    }

    #[test]
    fn same_kind_on_both_sides_is_left_alone() {
        assert_eq!(reshape(&[4], true, 3, vec![3, 4]), [3, 4]);
        assert_eq!(reshape(&[-1], false, 0, vec![5]), [5]);
    }

    #[test]
    fn the_batch_of_a_request_is_its_leading_dimension_for_batching_models_only() {
        assert_eq!(batch_of(true, Some(&[8, 4])), 8);
        assert_eq!(batch_of(true, Some(&[0])), 0);
        assert_eq!(batch_of(false, Some(&[8, 4])), 0);
        assert_eq!(batch_of(true, None), 0);
    }
}
