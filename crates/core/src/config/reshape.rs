//! The checks Triton core's `ValidateIOShape` makes of an input's or output's `reshape`
//! (`src/model_config_utils.cc`), with its messages: no empty reshape (a scalar) for a
//! model that does not batch, every dimension >= 1 or -1, and the same element count as
//! `dims`: equal totals, or, with variable-size dimensions, equal counts between each
//! pair of them (`[2,4,-1,6]` may become `[8,-1,1,6]`). An empty reshape stands for a
//! `dims` of one element. The messages start with the tensor's prefix
//! (`model input 'x' `); the caller adds ` for <model>`, as Triton's
//! `ValidateModelIOConfig` does.

use crate::error::{Error, Result};

/// Triton's wildcard dimension.
const WILDCARD: i64 = -1;

/// Refuses an empty `reshape` on a model that does not batch: the tensor would always
/// be a scalar, which Triton does not support.
pub fn check_empty(prefix: &str, reshape: Option<&[i64]>, max_batch_size: i32) -> Result<()> {
    if reshape.is_some_and(<[i64]>::is_empty) && max_batch_size == 0 {
        return Err(Error::invalid_arg(format!(
            "{prefix}cannot have empty reshape for non-batching model as scalar tensors are not supported"
        )));
    }
    Ok(())
}

/// Checks `reshape` against `dims` (whose own values are already checked) of tensor
/// `name`.
pub fn check(prefix: &str, name: &str, dims: &[i64], reshape: &[i64]) -> Result<()> {
    if reshape.iter().any(|&d| d < 1 && d != WILDCARD) {
        return Err(Error::invalid_arg(format!(
            "{prefix}reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
        )));
    }
    let dims_size = element_count(dims, &format!("{name} dims"))?;
    let reshape_size = element_count(reshape, &format!("{name} reshape"))?;
    let different_size =
        || Error::invalid_arg(format!("{prefix}has different size for dims and reshape"));
    // An empty reshape (count 0) goes with dims of one element.
    if dims_size != reshape_size
        && (reshape_size != Count::Known(0) || dims_size != Count::Known(1))
    {
        return Err(different_size());
    }
    if dims_size == Count::Wildcard {
        let (from, to) = (trunk_counts(dims), trunk_counts(reshape));
        if from.len() != to.len() {
            return Err(Error::invalid_arg(format!(
                "{prefix}has different number of variable-size dimensions for dims and reshape"
            )));
        }
        if from != to {
            return Err(different_size());
        }
    }
    Ok(())
}

/// Triton's `GetElementCount` of a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    /// The product of the dimensions (0 for an empty shape, as in Triton).
    Known(i64),
    /// Some dimension is -1.
    Wildcard,
}

/// The element count of `dims`, or Triton's error when it exceeds `i64::MAX` (found
/// before any later -1, as Triton walks the dimensions).
fn element_count(dims: &[i64], name: &str) -> Result<Count> {
    let mut count: Option<i64> = None;
    for &dim in dims {
        if dim == WILDCARD {
            return Ok(Count::Wildcard);
        }
        count = Some(match count {
            None => dim,
            Some(c) => c.checked_mul(dim).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "element count for tensor '{name}' exceeds maximum size of {}",
                    i64::MAX
                ))
            })?,
        });
    }
    Ok(Count::Known(count.unwrap_or(0)))
}

/// The element counts between the variable-size dimensions of `dims` (one more than
/// there are -1s).
fn trunk_counts(dims: &[i64]) -> Vec<i64> {
    let mut counts = Vec::new();
    let mut current: i64 = 1;
    for &dim in dims {
        if dim == WILDCARD {
            counts.push(current);
            current = 1;
        } else {
            // Triton multiplies without a check here; a product this large never
            // matches a real reshape either way.
            current = current.wrapping_mul(dim);
        }
    }
    counts.push(current);
    counts
}

#[cfg(test)]
mod tests {
    use crate::config::{normalize_and_validate, parse_model_config, NormalizeOptions};
    use std::path::Path;

    /// The load error of a model `m` with one input and one output, the input given by
    /// `input` (fields after its name and type) and the output by `output`.
    fn load_error(max_batch_size: i32, input: &str, output: &str) -> Option<String> {
        let text = format!(
            r#"backend: "identity" max_batch_size: {max_batch_size}
               input [ {{ name: "x" data_type: TYPE_FP32 {input} }} ]
               output [ {{ name: "y" data_type: TYPE_FP32 {output} }} ]"#
        );
        let mut config = parse_model_config(Path::new("config.pbtxt"), &text).expect("parses");
        normalize_and_validate(&mut config, "m", NormalizeOptions::default())
            .err()
            .map(|e| e.message().to_string())
    }

    fn input_error(max_batch_size: i32, input: &str) -> Option<String> {
        load_error(max_batch_size, input, "dims: [ 1 ]")
    }

    #[test]
    fn valid_reshapes_load() {
        for (mbs, input) in [
            // Triton's densenet_onnx example.
            (
                0,
                "dims: [ 3, 224, 224 ] reshape { shape: [ 1, 3, 224, 224 ] }",
            ),
            (8, "dims: [ 3, 4, 4 ] reshape { shape: [ 48 ] }"),
            // An empty reshape is a scalar per batch row of a [1] tensor.
            (8, "dims: [ 1 ] reshape { shape: [ ] }"),
            // Variable-size dimensions: equal counts between them.
            (
                0,
                "dims: [ 2, 4, -1, 6 ] reshape { shape: [ 8, -1, 1, 6 ] }",
            ),
            (0, "dims: [ -1 ] reshape { shape: [ 1, -1, 1 ] }"),
            (4, "dims: [ -1, 3, -1 ] reshape { shape: [ -1, 3, 1, -1 ] }"),
        ] {
            assert_eq!(input_error(mbs, input), None, "{input}");
        }
        let output = "dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] }";
        assert_eq!(load_error(0, "dims: [ 1 ]", output), None);
    }

    #[test]
    fn invalid_reshapes_fail_with_tritons_messages() {
        let prefix = "model input 'x' ";
        for (mbs, input, message) in [
            (
                0,
                "dims: [ 1 ] reshape { shape: [ ] }",
                "cannot have empty reshape for non-batching model as scalar tensors are not supported",
            ),
            (
                0,
                "dims: [ 4 ] reshape { shape: [ 2, 0 ] }",
                "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension",
            ),
            (
                0,
                "dims: [ 4 ] reshape { shape: [ -2, -2 ] }",
                "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension",
            ),
            (
                0,
                "dims: [ 3, 4, 4 ] reshape { shape: [ 1, 3, 4, 5 ] }",
                "has different size for dims and reshape",
            ),
            (8, "dims: [ 2 ] reshape { shape: [ ] }", "has different size for dims and reshape"),
            (0, "dims: [ -1 ] reshape { shape: [ 4 ] }", "has different size for dims and reshape"),
            (0, "dims: [ 4 ] reshape { shape: [ -1 ] }", "has different size for dims and reshape"),
            (
                0,
                "dims: [ 2, -1 ] reshape { shape: [ -1, 2 ] }",
                "has different size for dims and reshape",
            ),
            (
                0,
                "dims: [ -1, 4 ] reshape { shape: [ -1, 2, -1 ] }",
                "has different number of variable-size dimensions for dims and reshape",
            ),
        ] {
            assert_eq!(
                input_error(mbs, input),
                Some(format!("{prefix}{message} for m")),
                "{input}"
            );
        }
        assert_eq!(
            load_error(
                0,
                "dims: [ 1 ]",
                "dims: [ 10 ] reshape { shape: [ 1, 11 ] }"
            ),
            Some("model output 'y' has different size for dims and reshape for m".into())
        );
        // The dims checks come first; an empty non-batching reshape before the dims.
        assert_eq!(
            input_error(0, "dims: [ 0 ] reshape { shape: [ 0 ] }"),
            Some("model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m".into())
        );
        assert_eq!(
            input_error(0, "dims: [ 0 ] reshape { shape: [ ] }"),
            Some("model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not supported for m".into())
        );
    }

    #[test]
    fn overflowing_element_counts_fail_like_triton() {
        let huge = "9223372036854775807";
        assert_eq!(
            input_error(
                0,
                &format!("dims: [ {huge}, 2 ] reshape {{ shape: [ 1 ] }}")
            ),
            Some(format!(
                "element count for tensor 'x dims' exceeds maximum size of {huge} for m"
            ))
        );
        assert_eq!(
            input_error(
                0,
                &format!("dims: [ 2 ] reshape {{ shape: [ {huge}, 2, -1 ] }}")
            ),
            Some(format!(
                "element count for tensor 'x reshape' exceeds maximum size of {huge} for m"
            ))
        );
        // A -1 before the overflow makes the count a wildcard, as in Triton.
        assert_eq!(
            input_error(
                0,
                &format!("dims: [ 2 ] reshape {{ shape: [ -1, {huge}, 2 ] }}")
            ),
            Some("model input 'x' has different size for dims and reshape for m".into())
        );
    }
}
