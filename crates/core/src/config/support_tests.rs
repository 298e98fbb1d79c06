//! The field table against the proto and the docs page, and the check on configurations.

use std::collections::BTreeSet;

use super::*;
use crate::config::parse_model_config;

/// Every `<message>.<field>` reachable from `ModelConfig`.
fn every_field() -> BTreeSet<(String, String)> {
    let mut fields = BTreeSet::new();
    let mut pending = vec![model_config_descriptor()];
    let mut seen = BTreeSet::new();
    while let Some(message) = pending.pop() {
        if !seen.insert(message.full_name().to_string()) {
            continue;
        }
        for field in message.fields() {
            fields.insert((message_path(&message).to_string(), field.name().to_string()));
            if let prost_reflect::Kind::Message(nested) = field.kind() {
                // Map fields are messages of their own (`…Entry`); their values count.
                if nested.is_map_entry() {
                    if let prost_reflect::Kind::Message(value) =
                        nested.map_entry_value_field().kind()
                    {
                        pending.push(value);
                    }
                } else {
                    pending.push(nested);
                }
            }
        }
    }
    fields
}

#[test]
fn every_field_of_the_proto_has_an_answer() {
    let missing: Vec<String> = every_field()
        .into_iter()
        .filter(|(message, field)| support_of(message, field).is_none())
        .map(|(message, field)| format!("{message}.{field}"))
        .collect();
    assert!(
        missing.is_empty(),
        "fields without an entry in FIELDS: {missing:?}"
    );
    let known: BTreeSet<String> = every_field()
        .into_iter()
        .flat_map(|(m, f)| [format!("{m}.{f}"), format!("{m}.*")])
        .collect();
    for (path, _) in FIELDS {
        assert!(known.contains(*path), "{path} is not a field of the proto");
    }
}

#[test]
fn the_readme_table_lists_every_entry_with_its_answer() {
    let page = include_str!("../../../../docs/src/reference/model-config.md");
    let start = page
        .find("# Model configuration fields")
        .expect("the docs page has the model configuration fields heading");
    let rows: Vec<(String, String)> = page[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Some((
                cells.get(1)?.trim_matches('`').to_string(),
                cells.get(2)?.to_string(),
            ))
        })
        .collect();
    assert_eq!(rows.len(), FIELDS.len(), "one docs page row per entry");
    for ((path, support), (row_path, answer)) in FIELDS.iter().zip(&rows) {
        assert_eq!(path, row_path, "docs page rows follow FIELDS' order");
        let expected = match support {
            Honoured => "honoured",
            NoEffect(_) => "no effect",
            Refused(_) => "refused",
        };
        assert_eq!(answer, expected, "{path}");
    }
}

fn config(text: &str) -> ModelConfig {
    parse_model_config(std::path::Path::new("config.pbtxt"), text).expect("parses")
}

#[test]
fn a_refused_field_fails_naming_its_path_and_others_pass() {
    let base = r#"name: "m" backend: "onnxruntime" max_batch_size: 4
        input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]"#;
    check_supported(&config(base)).expect("a plain config passes");
    let warned = format!(
        "{base} optimization {{ cuda {{ graphs: true }} input_pinned_memory {{ enable: true }} }}"
    );
    check_supported(&config(&warned)).expect("no-effect fields only warn");
    let cases = [
        (
            r#"instance_group [ { kind: KIND_CPU secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] } ]"#,
            "configuration field 'instance_group.secondary_devices' is not supported",
        ),
        (
            r#"optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }"#,
            "configuration field 'optimization.execution_accelerators.cpu_execution_accelerator' is not supported",
        ),
    ];
    for (extra, expected) in cases {
        let error = check_supported(&config(&format!("{base} {extra}"))).expect_err("refused");
        assert!(error.message().contains(expected), "{extra}: {error}");
        assert!(error.message().starts_with("model 'm': "), "{error}");
    }
    // Set to its default, a refused field is not set at all.
    let shape_tensor_off = base.replace("dims: [ -1 ] }", "dims: [ -1 ] is_shape_tensor: false }");
    assert_ne!(shape_tensor_off, base);
    check_supported(&config(&shape_tensor_off)).expect("false is the default");
}
