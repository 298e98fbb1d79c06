//! `model_warmup` through a repository load with the test backend: samples run on every
//! instance before the load returns and count in the statistics as Triton counts them;
//! a failing sample, an unfixed dimension, a short data file and a sample without data
//! fail the load with Triton's words; a file's bytes reach the request, and no more of a
//! file is read than the sample needs.

use std::path::Path;
use std::sync::Arc;

use super::super::overrides::LoadRequest;
use super::*;
use crate::error::ErrorKind;
use crate::repository::{ControlMode, ModelRepository};
use crate::testing::{self, TestBackend};

const MODEL: &str = r#"backend: "identity" max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
    instance_group [ { count: 2 kind: KIND_CPU } ]
"#;

fn with_warmup(samples: &str) -> String {
    format!("{MODEL} model_warmup [ {samples} ]")
}

fn repository(root: &Path, backend: &TestBackend) -> Arc<ModelRepository> {
    let options = testing::repository_options(root, ControlMode::Explicit, &[]);
    Arc::new(ModelRepository::new(options, backend.registry()))
}

#[tokio::test]
async fn samples_run_on_every_instance_before_the_model_is_ready_and_are_counted() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = with_warmup(
        r#"{ name: "zeros" batch_size: 2 count: 2
             inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } },
           { name: "none" batch_size: 0
             inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } },
           { name: "random" batch_size: 1
             inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] random_data: true } } }"#,
    );
    testing::write_model(root.path(), "warm", &config, &[1]);
    let backend = TestBackend::identity();
    let repo = repository(root.path(), &backend);
    repo.load("warm", LoadRequest::default())
        .await
        .expect("loads");
    // Per instance: "zeros" twice as a batch of 2, then "random" once; "none" skipped.
    let mut per_instance = std::collections::BTreeMap::<String, Vec<usize>>::new();
    for e in backend.executions() {
        per_instance
            .entry(e.instance)
            .or_default()
            .push(e.batch_size);
    }
    assert_eq!(per_instance.len(), 2, "{per_instance:?}");
    assert!(
        per_instance.values().all(|b| b == &[2, 2, 1]),
        "{per_instance:?}"
    );
    let stats = repo.get("warm", None).expect("ready").snapshot();
    assert_eq!((stats.inference_count, stats.execution_count), (10, 6));
}

#[tokio::test]
async fn a_failing_sample_fails_the_load_naming_it() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = with_warmup(
        r#"{ name: "boom" batch_size: 1
             inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } }"#,
    );
    testing::write_model(root.path(), "bad", &config, &[1]);
    let backend = TestBackend::identity().failing(crate::error::Error::internal("kaput"));
    let repo = repository(root.path(), &backend);
    let error = repo
        .load("bad", LoadRequest::default())
        .await
        .expect_err("the warmup fails");
    assert!(
        error
            .message()
            .contains("failed to run warmup sample 'boom': kaput; "),
        "{error}"
    );
    assert_eq!(
        backend.executions().len(),
        1,
        "warmup stops at the first failure"
    );
}

#[tokio::test]
async fn samples_that_cannot_be_built_fail_the_load_with_tritons_words() {
    let cases = [
        (
            r#"{ name: "s" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ -1 ] zero_data: true } } }"#,
            "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
        ),
        (
            r#"{ name: "s" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "short.bin" } } }"#,
            "[request id: <id_unknown>] warmup setting expects 8 bytes, but the data provided from short.bin only has 3 bytes",
        ),
        (
            r#"{ name: "s" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] } } }"#,
            "warmup setting expects input 'INPUT0' to have input_data_type set",
        ),
        (
            r#"{ name: "s" batch_size: 1 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } }"#,
            "unexpected shape for input 'INPUT0'",
        ),
    ];
    for (sample, expected) in cases {
        let root = tempfile::tempdir().expect("temp dir");
        testing::write_model(root.path(), "m", &with_warmup(sample), &[1]);
        let warmup = root.path().join("m").join("warmup");
        std::fs::create_dir_all(&warmup).expect("warmup folder");
        std::fs::write(warmup.join("short.bin"), b"abc").expect("data file");
        let backend = TestBackend::identity();
        let repo = repository(root.path(), &backend);
        let error = repo
            .load("m", LoadRequest::default())
            .await
            .expect_err("refused");
        assert!(error.message().contains(expected), "{sample}: {error}");
        assert_eq!(error.kind(), ErrorKind::InvalidArg, "{sample}");
        assert!(backend.executions().is_empty(), "{sample}: nothing ran");
    }
}

#[test]
fn a_files_bytes_and_a_rows_shape_make_the_request() {
    let root = tempfile::tempdir().expect("temp dir");
    let warmup = root.path().join("warmup");
    std::fs::create_dir_all(&warmup).expect("warmup folder");
    let data: Vec<u8> = [7i32, 9, 11].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(warmup.join("in.bin"), &data).expect("data file");
    let config = testing::config(
        "m",
        &with_warmup(
            r#"{ name: "file" batch_size: 3
                 inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "in.bin" } } }"#,
        ),
    );
    let spec = ModelSpec::new(config.clone(), 1).expect("spec");
    let samples = warmup_samples(&spec, &config, root.path()).expect("built");
    assert_eq!(samples.len(), 1);
    let sample = &samples[0];
    assert_eq!(
        (sample.requests.len(), sample.batch_size, sample.count),
        (3, 1, 0)
    );
    let input = &sample.requests[0].inputs[0];
    assert_eq!(input.shape, vec![1, 2]);
    assert_eq!(
        &input.data[..],
        &data[..8],
        "the first bytes the tensor needs"
    );
}

#[test]
fn data_files_are_read_only_as_far_as_the_sample_needs() {
    let root = tempfile::tempdir().expect("temp dir");
    let warmup = root.path().join("warmup");
    std::fs::create_dir_all(&warmup).expect("warmup folder");
    // A 5 GiB sparse file: the INT32 [2] sample reads its first 8 bytes, not 5 GiB.
    std::fs::File::create(warmup.join("huge.bin"))
        .and_then(|f| f.set_len(5 << 30))
        .expect("sparse file");
    std::os::unix::fs::symlink("/dev/zero", warmup.join("zero.bin")).expect("link");
    let sample = |file: &str, datatype: &str| {
        let config = testing::config(
            "m",
            &format!(
                r#"backend: "identity" max_batch_size: 8
                input [ {{ name: "INPUT0" data_type: {datatype} dims: [ 2 ] }} ]
                output [ {{ name: "OUTPUT0" data_type: {datatype} dims: [ 2 ] }} ]
                model_warmup [ {{ name: "s" batch_size: 1
                  inputs {{ key: "INPUT0" value {{ data_type: {datatype} dims: [ 2 ] input_data_file: "{file}" }} }} }} ]"#
            ),
        );
        let spec = ModelSpec::new(config.clone(), 1).expect("spec");
        warmup_samples(&spec, &config, root.path())
    };
    let built = sample("huge.bin", "TYPE_INT32").expect("the first bytes");
    assert_eq!(built[0].requests[0].inputs[0].data.len(), 8);
    let refused = sample("zero.bin", "TYPE_INT32").expect_err("a device");
    assert!(
        refused.message().ends_with("zero.bin: not a regular file"),
        "{refused}"
    );
    // Strings take the whole file: past the bound it is refused, naming the bound.
    let refused = sample("huge.bin", "TYPE_STRING").expect_err("too large");
    assert!(
        refused.message().contains("more than the 67108864 bytes"),
        "{refused}"
    );
}
