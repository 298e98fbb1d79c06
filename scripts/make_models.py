#!/usr/bin/env python3
"""Write Nereid's example model repository (Triton layout) with tiny ONNX models.

Usage: scripts/make_models.py [OUTPUT_DIR]   (default: examples/models, relative
to the repository root)

Every model gets `<name>/config.pbtxt` and `<name>/1/model.onnx` (accumulate_fp32:
`1/accumulate_fp32.onnx`), except `add_sub_noconfig`, which has no config.pbtxt on
purpose: the server must auto-complete its configuration from the ONNX graph.

The output is deterministic: running the script twice gives byte-identical
files (no timestamps, fixed weights from a fixed seed, fixed ONNX opset and IR
version), so the generated files can be committed and re-checked with
`git diff --exit-code` after regenerating.

Models:
  add_sub           OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [4],
                    max_batch_size 8, platform onnxruntime_onnx
  add_sub_noconfig  the same graph, no config.pbtxt
  identity_<type>   INPUT0 -> OUTPUT0 (ONNX Identity), dims [-1], max_batch_size 8,
                    backend onnxruntime, one per Triton datatype (BYTES = "string")
  mlp               INPUT [16] -> Dense(32) -> ReLU -> Dense(4) -> OUTPUT [4], FP32,
                    max_batch_size 64, weights from numpy seed 20240607
  ensemble_add_sub  an ensemble of two add_sub steps: (INPUT0, INPUT1) -> add_sub ->
                    (sum, diff) -> add_sub -> OUTPUT0 = 2*INPUT0, OUTPUT1 = 2*INPUT1
  ensemble_diamond  a diamond: add_sub -> (sum, diff), then identity_fp32 on each branch
                    concurrently, then add_sub joins them: OUTPUT0 = 2*INPUT0,
                    OUTPUT1 = 2*INPUT1 (ensembles have an empty version directory 1/)
  sequence_accumulate  a stateful model for the sequence batcher: a running sum of INPUT
                    kept in implicit state (ACC_IN/ACC_OUT), reset by START, and the
                    START/END/READY/CORRID control tensors echoed as outputs
  accumulate_fp32   the stateful backend's example (backend "stateful"), like the
                    original's: Input/Output FP32 [4, -1, 5] batched along the middle
                    dimension, state Accumulate_In/Accumulate_Out [batch, 5] named by
                    state_pairs, ResetSequence (bool) driven by START; the new state is
                    the old one (zero at a start) plus Input summed over its 4 rows, and
                    Output = Input + new state. Its file is accumulate_fp32.onnx
                    (parameter onnx_file_name), as in the original.
"""

import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Opset 17 with IR version 8 is what onnx 1.13 wrote for it; every ONNX
# Runtime since 1.14 (and 1.31 used here) loads it.
OPSET = 17
IR_VERSION = 8
PRODUCER = "nereid-make-models"

MLP_SEED = 20240607
MLP_IN, MLP_HIDDEN, MLP_OUT = 16, 32, 4

# Triton type name suffix -> (ONNX element type, config.pbtxt data_type).
# The suffix is the lower-case Triton protocol name, except BYTES -> "string"
# (the config name is TYPE_STRING).
IDENTITY_TYPES = {
    "bool": (TensorProto.BOOL, "TYPE_BOOL"),
    "uint8": (TensorProto.UINT8, "TYPE_UINT8"),
    "uint16": (TensorProto.UINT16, "TYPE_UINT16"),
    "uint32": (TensorProto.UINT32, "TYPE_UINT32"),
    "uint64": (TensorProto.UINT64, "TYPE_UINT64"),
    "int8": (TensorProto.INT8, "TYPE_INT8"),
    "int16": (TensorProto.INT16, "TYPE_INT16"),
    "int32": (TensorProto.INT32, "TYPE_INT32"),
    "int64": (TensorProto.INT64, "TYPE_INT64"),
    "fp16": (TensorProto.FLOAT16, "TYPE_FP16"),
    "fp32": (TensorProto.FLOAT, "TYPE_FP32"),
    "fp64": (TensorProto.DOUBLE, "TYPE_FP64"),
    "bf16": (TensorProto.BFLOAT16, "TYPE_BF16"),
    "string": (TensorProto.STRING, "TYPE_STRING"),
}


def _model(graph):
    model = helper.make_model(
        graph,
        producer_name=PRODUCER,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def add_sub_graph(name):
    """[batch, 4] FP32 inputs; the batch dim is symbolic so Triton can batch."""
    shape = ["batch", 4]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        name,
        [vi("INPUT0", TensorProto.FLOAT, shape), vi("INPUT1", TensorProto.FLOAT, shape)],
        [vi("OUTPUT0", TensorProto.FLOAT, shape), vi("OUTPUT1", TensorProto.FLOAT, shape)],
    )
    return _model(graph)


def identity_graph(name, elem_type):
    shape = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")],
        name,
        [helper.make_tensor_value_info("INPUT0", elem_type, shape)],
        [helper.make_tensor_value_info("OUTPUT0", elem_type, shape)],
    )
    return _model(graph)


def mlp_weights():
    """The MLP's weights: (w1 [16,32], b1 [32], w2 [32,4], b2 [4]), float32.

    RandomState (not default_rng) because its stream is frozen across numpy
    versions. Values are rounded to multiples of 1/256 so they are exact in
    float32 and print the same everywhere.
    """
    rs = np.random.RandomState(MLP_SEED)

    def draw(*shape, scale):
        return (np.round(rs.standard_normal(shape) * scale * 256) / 256).astype(np.float32)

    w1 = draw(MLP_IN, MLP_HIDDEN, scale=0.25)
    b1 = draw(MLP_HIDDEN, scale=0.1)
    w2 = draw(MLP_HIDDEN, MLP_OUT, scale=0.25)
    b2 = draw(MLP_OUT, scale=0.1)
    return w1, b1, w2, b2


def mlp_graph(name):
    w1, b1, w2, b2 = mlp_weights()
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT", "w1"], ["h0"], name="dense1"),
            helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
            helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
            helper.make_node("MatMul", ["h2", "w2"], ["o0"], name="dense2"),
            helper.make_node("Add", ["o0", "b2"], ["OUTPUT"], name="bias2"),
        ],
        name,
        [vi("INPUT", TensorProto.FLOAT, ["batch", MLP_IN])],
        [vi("OUTPUT", TensorProto.FLOAT, ["batch", MLP_OUT])],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    return _model(graph)


# The control tensors of sequence_accumulate and their ONNX types.
SEQUENCE_CONTROLS = [
    ("START", TensorProto.FLOAT),
    ("END", TensorProto.INT32),
    ("READY", TensorProto.BOOL),
    ("CORRID", TensorProto.UINT64),
]


def sequence_accumulate_graph(name):
    """A running sum kept in implicit state, plus every control tensor echoed back.

    OUTPUT = ACC_OUT = ACC_IN * (1 - START) + INPUT; START_OUT, END_OUT, READY_OUT and
    CORRID_OUT are the control tensors as the model received them.
    """
    vi = helper.make_tensor_value_info
    shape = ["batch", 1]
    one = numpy_helper.from_array(np.ones([1], np.float32), "one")
    echoes = [
        helper.make_node("Identity", [c], [c + "_OUT"], name=c.lower()) for c, _ in SEQUENCE_CONTROLS
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["keep"], name="keep"),
            helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"], name="kept"),
            helper.make_node("Add", ["kept", "INPUT"], ["OUTPUT"], name="sum"),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"], name="state"),
            *echoes,
        ],
        name,
        [vi("INPUT", TensorProto.FLOAT, shape), vi("ACC_IN", TensorProto.FLOAT, shape)]
        + [vi(c, t, shape) for c, t in SEQUENCE_CONTROLS],
        [vi("OUTPUT", TensorProto.FLOAT, shape), vi("ACC_OUT", TensorProto.FLOAT, shape)]
        + [vi(c + "_OUT", t, shape) for c, t in SEQUENCE_CONTROLS],
        initializer=[one],
    )
    return _model(graph)


def accumulate_fp32_graph(name):
    """The stateful backend's accumulate model (opset 17, so ReduceSum takes its axes
    as an input)."""
    vi = helper.make_tensor_value_info
    zeros = numpy_helper.from_array(np.zeros([5], np.float32), "zeros")
    axis0 = numpy_helper.from_array(np.array([0], np.int64), "axis0")
    graph = helper.make_graph(
        [
            helper.make_node("Where", ["ResetSequence", "zeros", "Accumulate_In"], ["previous"], name="reset"),
            helper.make_node("ReduceSum", ["Input", "axis0"], ["step"], keepdims=0, name="reduce"),
            helper.make_node("Add", ["previous", "step"], ["Accumulate_Out"], name="accumulate"),
            helper.make_node("Add", ["Input", "Accumulate_Out"], ["Output"], name="output"),
        ],
        name,
        [
            vi("Input", TensorProto.FLOAT, [4, "batch", 5]),
            vi("Accumulate_In", TensorProto.FLOAT, ["batch", 5]),
            vi("ResetSequence", TensorProto.BOOL, ["batch", 1]),
        ],
        [
            vi("Output", TensorProto.FLOAT, [4, "batch", 5]),
            vi("Accumulate_Out", TensorProto.FLOAT, ["batch", 5]),
        ],
        initializer=[zeros, axis0],
    )
    return _model(graph)


# The original example's config, with CPU instances (the original uses KIND_GPU and
# TensorRT) and without its debug-only error_inject_rate.
ACCUMULATE_FP32_CONFIG = """\
name: "accumulate_fp32"
backend: "stateful"
max_batch_size: 16
sequence_batching {
  max_sequence_idle_microseconds: 100000000
  oldest { max_candidate_sequences: 1280 max_queue_delay_microseconds: 2000 }
  control_input [
    { name: "ResetSequence" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "EndSequence" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "Input" data_type: TYPE_FP32 dims: [ 4, -1, 5 ] } ]
output [ { name: "Output" data_type: TYPE_FP32 dims: [ 4, -1, 5 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters [
  { key: "onnx_file_name" value: { string_value: "accumulate_fp32.onnx" } },
  { key: "state_pairs" value: { string_value: "<<<Accumulate_In, Accumulate_Out>>>" } },
  { key: "ort_ep" value: { string_value: "cpu" } },
  { key: "compute_precision" value: { string_value: "fp32" } },
  { key: "store_states_as_fp16" value: { string_value: "0" } },
  { key: "max_candidate_sequence_use_ratio" value: { string_value: "0.9" } },
  { key: "infer_end_requests" value: { string_value: "0" } },
  { key: "initial_buffer_size" value: { string_value: "512" } },
  { key: "subsequent_buffer_size" value: { string_value: "100" } },
  { key: "buffer_alloc_threshold" value: { string_value: "32" } },
  { key: "buffer_dealloc_threshold" value: { string_value: "200" } },
  { key: "logging_level" value: { string_value: "INFO" } },
  { key: "metric_logging_frequency_seconds" value: { string_value: "0" } }
]
"""

# Models whose file is not model.onnx.
MODEL_FILES = {"accumulate_fp32": "accumulate_fp32.onnx"}

SEQUENCE_ACCUMULATE_CONFIG = """\
name: "sequence_accumulate"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "START_OUT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "END_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "READY_OUT" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
"""

ADD_SUB_IO = """\
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

ADD_SUB_CONFIG = (
    'name: "add_sub"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    + ADD_SUB_IO
    + "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
)

IDENTITY_CONFIG = """\
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] }} ]
"""

MLP_CONFIG = """\
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {inp} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {out} ] }} ]
""".format(inp=MLP_IN, out=MLP_OUT)


def ensemble_step(model, inputs, outputs):
    """One `step` entry: inputs/outputs map model tensor names to ensemble tensors."""
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'    {{ model_name: "{model}" model_version: -1{maps} }}'


def ensemble_config(name, io, steps):
    """config.pbtxt of an ensemble with the given input/output section and steps."""
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{io}'
        "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n"
    )


ENSEMBLE_ADD_SUB_CONFIG = ensemble_config(
    "ensemble_add_sub",
    ADD_SUB_IO,
    [
        ensemble_step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        ensemble_step("add_sub", {"INPUT0": "sum", "INPUT1": "diff"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
    ],
)

ENSEMBLE_DIAMOND_CONFIG = ensemble_config(
    "ensemble_diamond",
    ADD_SUB_IO,
    [
        ensemble_step("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
        ensemble_step("identity_fp32", {"INPUT0": "sum"}, {"OUTPUT0": "left"}),
        ensemble_step("identity_fp32", {"INPUT0": "diff"}, {"OUTPUT0": "right"}),
        ensemble_step("add_sub", {"INPUT0": "left", "INPUT1": "right"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
    ],
)

ENSEMBLES = {
    "ensemble_add_sub": ENSEMBLE_ADD_SUB_CONFIG,
    "ensemble_diamond": ENSEMBLE_DIAMOND_CONFIG,
}


def models():
    """Yield (name, config text or None, onnx ModelProto) for every model."""
    yield "add_sub", ADD_SUB_CONFIG, add_sub_graph("add_sub")
    yield "add_sub_noconfig", None, add_sub_graph("add_sub_noconfig")
    for suffix, (elem_type, dtype) in IDENTITY_TYPES.items():
        name = "identity_" + suffix
        yield name, IDENTITY_CONFIG.format(name=name, dtype=dtype), identity_graph(
            name, elem_type
        )
    yield "mlp", MLP_CONFIG, mlp_graph("mlp")
    yield "sequence_accumulate", SEQUENCE_ACCUMULATE_CONFIG, sequence_accumulate_graph(
        "sequence_accumulate"
    )
    yield "accumulate_fp32", ACCUMULATE_FP32_CONFIG, accumulate_fp32_graph("accumulate_fp32")


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name, config, model in models():
        model_dir = os.path.join(out_dir, name)
        # Start each model directory afresh so a stale config.pbtxt (e.g. in
        # add_sub_noconfig) cannot survive a regeneration.
        if os.path.isdir(model_dir):
            shutil.rmtree(model_dir)
        os.makedirs(os.path.join(model_dir, "1"))
        if config is not None:
            with open(os.path.join(model_dir, "config.pbtxt"), "w", newline="\n") as f:
                f.write(config)
        file_name = MODEL_FILES.get(name, "model.onnx")
        with open(os.path.join(model_dir, "1", file_name), "wb") as f:
            f.write(model.SerializeToString(deterministic=True))
        print(f"wrote {model_dir}")
    for name, config in ENSEMBLES.items():
        model_dir = os.path.join(out_dir, name)
        if os.path.isdir(model_dir):
            shutil.rmtree(model_dir)
        # An ensemble has no model file, but Triton still wants a version directory;
        # the .gitkeep keeps the empty directory in git.
        os.makedirs(os.path.join(model_dir, "1"))
        open(os.path.join(model_dir, "1", ".gitkeep"), "w").close()
        with open(os.path.join(model_dir, "config.pbtxt"), "w", newline="\n") as f:
            f.write(config)
        print(f"wrote {model_dir}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument(
        "output_dir",
        nargs="?",
        default=os.path.join(repo_root, "examples", "models"),
        help="model repository to write (default: <repo>/examples/models)",
    )
    args = parser.parse_args(argv)
    write(args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
