//! The classification extension: a requested output with `classification: N` comes back
//! as the top `N` classes of each batch row, a `BYTES` tensor of `"value:index"` or
//! `"value:index:label"` strings, exactly as Triton's frontends build it (server
//! `src/classification.cc`, `TopkClassifications`, and the callers in `http_server.cc` and
//! `grpc/infer_handler.h`), and the labels come from each output's `label_filename`, read
//! when a model version loads (core `src/model.cc` and `src/label_provider.cc`).
//!
//! The server facade applies it to the response on the way out, after the response cache,
//! so an entry serves requests with and without classification alike.
//!
//! Triton's details kept here:
//! - classes are ordered by libstdc++'s `std::sort` of the indices with `value > value`,
//!   which is not stable: ties come out in whatever order that algorithm leaves them
//!   (index order up to 16 elements, where it is an insertion sort). [`cxx_sort`] is that
//!   algorithm step for step, so ties come out the same.
//! - values print with `std::to_string`: integers in decimal, floats as `%f` (six decimals,
//!   `nan`, `-nan`, `inf`, `-inf`).
//! - a model that batches (`max_batch_size > 0`) classifies each row of the first
//!   dimension: shape `[batch, min(N, row elements)]`; otherwise the whole tensor is one
//!   row: shape `[min(N, elements)]`.
//! - an empty label (a blank line, or an index past the file's end) adds no `:label`.
//! - `BOOL`, `FP16`, `BF16` and `BYTES` outputs fail with "class result not available for
//!   output due to unsupported type '...'", and a row over a million elements with
//!   "classification output tensor too large" (both INVALID_ARG).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nereid_proto::inference::ModelConfig;

use crate::error::{Error, Result};
use crate::request::{InferResponse, OutputTensor};
use nereid_proto::DataType;

/// Triton's bound on the elements of one classified row.
pub const MAX_CLASSIFICATION_ELEMENTS: usize = 1_000_000;

/// One output's labels by class index (the lines of its label file, as bytes).
pub type LabelList = Arc<Vec<Vec<u8>>>;

/// The labels of a model version's outputs (Triton's `LabelProvider`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    by_output: HashMap<String, LabelList>,
}

impl Labels {
    /// The label of class `index` of `output`; `None` when there is none or it is empty.
    pub fn get(&self, output: &str, index: usize) -> Option<&[u8]> {
        self.by_output
            .get(output)
            .and_then(|labels| labels.get(index))
            .map(Vec::as_slice)
            .filter(|label| !label.is_empty())
    }

    /// Every label of `output`, when it has a label list.
    pub fn of(&self, output: &str) -> Option<&LabelList> {
        self.by_output.get(output)
    }

    /// Gives `output` the labels `labels` unless it already has a list (Triton's
    /// `emplace`): how an ensemble takes over the labels of the steps that produce its
    /// outputs.
    pub fn inherit(&mut self, output: &str, labels: LabelList) {
        self.by_output.entry(output.to_string()).or_insert(labels);
    }

    /// [`Self::inherit`] for every output of `from`.
    pub fn inherit_all(&mut self, from: &Labels) {
        for (output, labels) in &from.by_output {
            self.inherit(output, labels.clone());
        }
    }

    /// Whether no output has labels.
    pub fn is_empty(&self) -> bool {
        self.by_output.is_empty()
    }
}

/// Reads the `label_filename` of every output of `config`, relative to the model directory
/// `model_dir`, with Triton's errors: a path that leads out of the model directory is
/// UNSUPPORTED, a file that cannot be read is INTERNAL.
pub fn read_labels(config: &ModelConfig, model_dir: &Path) -> Result<Labels> {
    let mut labels = Labels::default();
    for output in &config.output {
        if output.label_filename.is_empty() {
            continue;
        }
        let path = join_path(model_dir, &output.label_filename);
        if escapes(Path::new(&path), model_dir)? {
            return Err(Error::unsupported(format!(
                "label file path '{path}' for output '{}' in model '{}' is outside model directory",
                output.name, config.name
            )));
        }
        let contents = std::fs::read(&path).map_err(|e| {
            Error::internal(format!(
                "failed to open text file for read {path}: {}",
                strerror(&e)
            ))
        })?;
        if labels
            .by_output
            .insert(output.name.clone(), Arc::new(split_lines(&contents)))
            .is_some()
        {
            return Err(Error::internal(format!(
                "multiple label files for '{}'",
                output.name
            )));
        }
    }
    Ok(labels)
}

/// Lines as `std::getline` reads them: split at `\n` (a `\r` stays), no empty last line
/// after a final newline.
fn split_lines(contents: &[u8]) -> Vec<Vec<u8>> {
    let mut lines: Vec<Vec<u8>> = contents
        .split(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    if lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    lines
}

/// Triton's `JoinPath({dir, name})`: a leading `/` of `name` does not make it absolute.
fn join_path(dir: &Path, name: &str) -> String {
    let mut joined = dir.to_string_lossy().into_owned();
    if joined.is_empty() {
        return name.to_string();
    }
    let name = if joined.ends_with('/') {
        name.strip_prefix('/').unwrap_or(name)
    } else if name.starts_with('/') {
        name
    } else {
        joined.push('/');
        name
    };
    joined.push_str(name);
    joined
}

/// Whether `child` leads out of `parent` once symbolic links and `..` are resolved (Triton's
/// `IsChildPathEscapingParentPath`: `weakly_canonical(child)` against `canonical(parent)`).
fn escapes(child: &Path, parent: &Path) -> Result<bool> {
    let parent = std::fs::canonicalize(parent).map_err(|e| {
        Error::invalid_arg(format!(
            "Failed to canonicalize parent path '{}': {}",
            parent.display(),
            strerror(&e)
        ))
    })?;
    Ok(!weakly_canonical(child).starts_with(&parent))
}

/// `std::filesystem::weakly_canonical`: the longest existing prefix made canonical, the
/// rest appended in normal form.
fn weakly_canonical(path: &Path) -> PathBuf {
    let components: Vec<Component<'_>> = path.components().collect();
    let mut existing = components.len();
    let mut out = PathBuf::new();
    while existing > 0 {
        let prefix: PathBuf = components[..existing].iter().collect();
        if let Ok(canonical) = std::fs::canonicalize(&prefix) {
            out = canonical;
            break;
        }
        existing -= 1;
    }
    for component in &components[existing..] {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The C library's text for an I/O error, without Rust's " (os error N)".
fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Replaces each output of `response` named in `wanted` (output name, class count) by its
/// classification. `batching`: the model batches (`max_batch_size > 0`), so the first
/// dimension is the batch.
pub fn classify_response(
    response: &mut InferResponse,
    wanted: &[(String, u32)],
    batching: bool,
    labels: &Labels,
) -> Result<()> {
    for output in response.outputs.iter_mut() {
        if let Some((_, count)) = wanted.iter().find(|(name, _)| *name == output.name) {
            *output = classify(output, *count, batching, labels)?;
        }
    }
    Ok(())
}

/// The top `count` classes of `output` (per batch row when `batching`), as Triton returns
/// them.
pub fn classify(
    output: &OutputTensor,
    count: u32,
    batching: bool,
    labels: &Labels,
) -> Result<OutputTensor> {
    let shape = &output.shape;
    // Triton's arithmetic, down to the 32-bit batch size and a batch of 0 meaning "none".
    let batch_size = match shape.first() {
        Some(&first) if batching => first as u32,
        _ => 0,
    };
    let row_start = usize::from(batch_size != 0);
    let row_elements = shape[row_start.min(shape.len())..]
        .iter()
        .fold(1usize, |n, &d| {
            n.saturating_mul(usize::try_from(d).unwrap_or(0))
        });
    let row_bytes = row_elements.saturating_mul(element_size(output.datatype));
    let list = labels.of(&output.name).map(|l| l.as_slice());
    // The BYTES tensor is written directly: 4-byte length, then the string, per class.
    let mut data: Vec<u8> = Vec::new();
    let mut offset = 0usize;
    for _ in 0..batch_size.max(1) {
        // A row the data does not cover is classified as empty (it never happens: backends
        // return whole tensors).
        let end = offset.saturating_add(row_bytes);
        let row = output.data.get(offset..end).unwrap_or(&[]);
        top_k(row, output.datatype, count, list, &mut data)?;
        offset = end;
    }
    let classes = (count as usize).min(row_elements) as i64;
    let shape = if batch_size > 0 {
        vec![i64::from(batch_size), classes]
    } else {
        vec![classes]
    };
    Ok(OutputTensor {
        name: output.name.clone(),
        datatype: DataType::Bytes,
        shape,
        data: data.into(),
        device: None,
    })
}

/// `TRITONSERVER_DataTypeByteSize`.
fn element_size(datatype: DataType) -> usize {
    match datatype {
        DataType::Bytes => 0,
        DataType::Bool | DataType::Uint8 | DataType::Int8 => 1,
        DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => 2,
        DataType::Uint32 | DataType::Int32 | DataType::Fp32 => 4,
        DataType::Uint64 | DataType::Int64 | DataType::Fp64 => 8,
    }
}

fn unsupported_type(datatype: DataType) -> Error {
    Error::invalid_arg(format!(
        "class result not available for output due to unsupported type '{}'",
        datatype.as_str()
    ))
}

/// `TopkClassifications` on one row: appends its `min(count, elements)` strings to the
/// serialized BYTES tensor `out`.
fn top_k(
    row: &[u8],
    datatype: DataType,
    count: u32,
    labels: Option<&[Vec<u8>]>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let size = element_size(datatype);
    if size == 0 {
        return Err(unsupported_type(datatype));
    }
    if row.len() / size > MAX_CLASSIFICATION_ELEMENTS {
        return Err(Error::invalid_arg("classification output tensor too large"));
    }
    match datatype {
        DataType::Uint8 => add_classes::<u8>(row, count, labels, out),
        DataType::Uint16 => add_classes::<u16>(row, count, labels, out),
        DataType::Uint32 => add_classes::<u32>(row, count, labels, out),
        DataType::Uint64 => add_classes::<u64>(row, count, labels, out),
        DataType::Int8 => add_classes::<i8>(row, count, labels, out),
        DataType::Int16 => add_classes::<i16>(row, count, labels, out),
        DataType::Int32 => add_classes::<i32>(row, count, labels, out),
        DataType::Int64 => add_classes::<i64>(row, count, labels, out),
        DataType::Fp32 => add_classes::<f32>(row, count, labels, out),
        DataType::Fp64 => add_classes::<f64>(row, count, labels, out),
        DataType::Bool | DataType::Fp16 | DataType::Bf16 | DataType::Bytes => {
            return Err(unsupported_type(datatype))
        }
    }
    Ok(())
}

/// `AddClassResults<T>`: sort the indices by descending value, keep the first `count`.
fn add_classes<T: Score>(row: &[u8], count: u32, labels: Option<&[Vec<u8>]>, out: &mut Vec<u8>) {
    let values: Vec<T> = row.chunks_exact(T::SIZE).map(T::read).collect();
    let mut order: Vec<usize> = (0..values.len()).collect();
    cxx_sort(&mut order, &|a: usize, b: usize| values[a] > values[b]);
    for &index in order.iter().take(count as usize) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(values[index].text().as_bytes());
        out.push(b':');
        out.extend_from_slice(index.to_string().as_bytes());
        // Triton's `GetLabel`: an index past the list, or an empty line, is no label.
        if let Some(label) = labels.and_then(|l| l.get(index)).filter(|l| !l.is_empty()) {
            out.push(b':');
            out.extend_from_slice(label);
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }
}

/// An element type Triton classifies: read little-endian, printed by `std::to_string`.
trait Score: Copy + PartialOrd {
    const SIZE: usize;
    fn read(bytes: &[u8]) -> Self;
    fn text(self) -> String;
}

macro_rules! integer_score {
    ($($t:ty),*) => {$(
        impl Score for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn read(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }
            fn text(self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_score!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Score for f32 {
    const SIZE: usize = 4;
    fn read(bytes: &[u8]) -> Self {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(bytes);
        f32::from_le_bytes(raw)
    }
    fn text(self) -> String {
        // `std::to_string(float)` promotes to double; the sign of a NaN survives.
        if self.is_nan() {
            return nan_text(self.is_sign_negative());
        }
        printf_f(f64::from(self))
    }
}

impl Score for f64 {
    const SIZE: usize = 8;
    fn read(bytes: &[u8]) -> Self {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(bytes);
        f64::from_le_bytes(raw)
    }
    fn text(self) -> String {
        printf_f(self)
    }
}

fn nan_text(negative: bool) -> String {
    if negative { "-nan" } else { "nan" }.to_string()
}

/// glibc's `%f`: six decimals of the exact binary value, ties to even; `nan`, `-nan`,
/// `inf`, `-inf`.
fn printf_f(value: f64) -> String {
    if value.is_nan() {
        return nan_text(value.is_sign_negative());
    }
    if value.is_infinite() {
        return if value < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    format!("{value:.6}")
}

/// The insertion-sort threshold of libstdc++'s `std::sort` (`_S_threshold`).
const THRESHOLD: usize = 16;

/// libstdc++'s `std::sort(first, last, less)`, step for step (introsort: median-of-three
/// quicksort down to 16-element runs, heap sort past `2·log2(n)` levels, then one
/// insertion sort), so that elements `less` calls equal end up where C++ leaves them.
/// Where C++ relies on `less` being a strict weak order to skip a bounds check (NaNs break
/// that, and the C++ then reads out of bounds) the scans stop at the ends instead.
pub fn cxx_sort<T: Copy>(v: &mut [T], less: &dyn Fn(T, T) -> bool) {
    let n = v.len();
    if n == 0 {
        return;
    }
    let lg = (usize::BITS - 1 - n.leading_zeros()) as usize;
    introsort_loop(v, 0, n, lg * 2, less);
    final_insertion_sort(v, less);
}

fn introsort_loop<T: Copy>(
    v: &mut [T],
    first: usize,
    mut last: usize,
    mut depth_limit: usize,
    less: &dyn Fn(T, T) -> bool,
) {
    while last - first > THRESHOLD {
        if depth_limit == 0 {
            heap_sort(&mut v[first..last], less);
            return;
        }
        depth_limit -= 1;
        let cut = unguarded_partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth_limit, less);
        last = cut;
    }
}

fn unguarded_partition_pivot<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    less: &dyn Fn(T, T) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, less);
    unguarded_partition(v, first + 1, last, first, less)
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &dyn Fn(T, T) -> bool,
) {
    let pick = if less(v[a], v[b]) {
        if less(v[b], v[c]) {
            b
        } else if less(v[a], v[c]) {
            c
        } else {
            a
        }
    } else if less(v[a], v[c]) {
        a
    } else if less(v[b], v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Copy>(
    v: &mut [T],
    mut first: usize,
    mut last: usize,
    pivot: usize,
    less: &dyn Fn(T, T) -> bool,
) -> usize {
    let end = last;
    loop {
        while first < end && less(v[first], v[pivot]) {
            first += 1;
        }
        last -= 1;
        while last > pivot && less(v[pivot], v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &dyn Fn(T, T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(v, THRESHOLD, less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, v.len(), less);
    }
}

/// `__insertion_sort(v, v + last)`.
fn insertion_sort<T: Copy>(v: &mut [T], last: usize, less: &dyn Fn(T, T) -> bool) {
    for i in 1..last {
        let value = v[i];
        if less(value, v[0]) {
            v.copy_within(0..i, 1);
            v[0] = value;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &dyn Fn(T, T) -> bool) {
    let value = v[last];
    while last > 0 && less(value, v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = value;
}

/// `__partial_sort(first, last, last)`: `make_heap` then `sort_heap`.
fn heap_sort<T: Copy>(v: &mut [T], less: &dyn Fn(T, T) -> bool) {
    let len = v.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent];
            adjust_heap(v, parent, len, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut last = len;
    while last > 1 {
        last -= 1;
        // `__pop_heap(first, last, last)`.
        let value = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, value, less);
    }
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    mut hole: usize,
    len: usize,
    value: T,
    less: &dyn Fn(T, T) -> bool,
) {
    let top = hole;
    let mut second = hole;
    while second < (len - 1) / 2 {
        second = 2 * (second + 1);
        if less(v[second], v[second - 1]) {
            second -= 1;
        }
        v[hole] = v[second];
        hole = second;
    }
    if len & 1 == 0 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[hole] = v[second - 1];
        hole = second - 1;
    }
    // `__push_heap(first, hole, top, value)`.
    let mut parent = hole.saturating_sub(1) / 2;
    while hole > top && less(v[parent], value) {
        v[hole] = v[parent];
        hole = parent;
        parent = hole.saturating_sub(1) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
#[path = "classification_tests.rs"]
mod tests;
