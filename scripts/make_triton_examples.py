#!/usr/bin/env python3
"""Write ONNX stand-ins for Triton's example models, for running Triton's own
client examples (client repository, src/python/examples/*.py) against Nereid.

Usage: scripts/make_triton_examples.py OUTPUT_DIR

Writes three model repositories (Triton layout, `<name>/config.pbtxt` and
`<name>/1/model.onnx`), to be served together, except by the model-control
examples, which count the models in the repository index:

  OUTPUT_DIR/model_repository   the models of Triton's docs/examples/model_repository
                                except inception_onnx: seven models, the number
                                simple_http_model_control.py checks for
  OUTPUT_DIR/sequence_extra     simple_string_dyna_sequence, which Triton's QA adds
                                to that repository (L0_http, L0_grpc): with it the
                                eight models simple_grpc_model_control.py checks for
  OUTPUT_DIR/identity_extra     custom_identity_int32 (memory_growth_test.py), from
                                Triton QA's own repositories

Names, tensors, data types, shapes and configs are those of Triton's examples;
the graphs compute what Triton's example models compute (Triton's own
simple*/model.onnx graphs, and its dyna_sequence test backend):

model_repository:
  simple                INPUT0, INPUT1 INT32 [16], max_batch_size 8;
                        OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
  simple_int8           the same in INT8 (computed in INT32, cast back, as Triton's)
  simple_string         the same with BYTES tensors holding decimal integers: ONNX
                        Cast string -> int32, add/subtract, Cast int32 -> string
  simple_identity       INPUT0 -> OUTPUT0, BYTES dims [-1], max_batch_size 8 (Triton's
                        is a python-backend model; this one is an ONNX Identity)
  simple_sequence       sequence batcher (direct) with START and READY (INT32 0/1)
                        controls; OUTPUT = READY * (INPUT + START), INT32 [1],
                        stateless, exactly Triton's ONNX model: the examples expect
                        1, 11, 7, ... for the inputs 0, 11, 7, ...
  simple_dyna_sequence  sequence batcher (oldest, two instances) with START, END,
                        READY (INT32 0/1) and CORRID (UINT64);
                        OUTPUT = READY * (INPUT + START + END * CORRID)
  densenet_onnx         a tiny stand-in with densenet's exact config: input data_0
                        FP32 dims [3,224,224] reshaped to [1,3,224,224], output fc6_1
                        FP32 dims [1000] reshaped from [1,1000,1,1], label file
                        densenet_labels.txt (1000 made-up labels, "label_NNN");
                        the graph is a global average pool and a fixed 1x1
                        convolution to 1000 channels (weights from numpy seed
                        20250101), so its output depends on the image's mean colour

sequence_extra:
  simple_string_dyna_sequence  simple_dyna_sequence with a TYPE_STRING CORRID, as the
                               -d mode of the sequence examples wants (Triton QA builds
                               it from the dyna_sequence test backend): an INT32
                               accumulator kept in implicit state (ACC_IN/ACC_OUT),
                               set to INPUT at START, INPUT added otherwise, the
                               decimal CORRID added at END, unchanged when READY is 0

identity_extra:
  custom_identity_int32        INPUT0 -> OUTPUT0, INT32 dims [-1], max_batch_size
                               1024 (Triton QA's is an identity-backend model)

Not generated (no ONNX equivalent): repeat_int32 (simple_grpc_custom_repeat.py, a
decoupled model sending many responses per request) and
preprocess_inception_ensemble (ensemble_image_client.py, JPEG decoding in DALI).

The output is deterministic: running the script twice gives byte-identical files
(fixed opset and IR version, fixed weights, no timestamps).
"""

import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The same opset / IR version pair as scripts/make_models.py.
OPSET = 17
IR_VERSION = 8
PRODUCER = "nereid-make-triton-examples"

DENSENET_SEED = 20250101
DENSENET_CLASSES = 1000

vi = helper.make_tensor_value_info


def _model(graph):
    model = helper.make_model(
        graph, producer_name=PRODUCER, opset_imports=[helper.make_opsetid("", OPSET)]
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _cast(src, dst, to):
    return helper.make_node("Cast", [src], [dst], to=to, name=dst)


def add_sub_graph(name, elem_type):
    """[batch, 16] inputs; sum and difference computed in INT32 and cast back to
    the tensor type (a no-op for INT32, a wrap for INT8, decimal text for strings)."""
    shape = ["batch", 16]
    nodes = [
        _cast("INPUT0", "in0", TensorProto.INT32),
        _cast("INPUT1", "in1", TensorProto.INT32),
        helper.make_node("Add", ["in0", "in1"], ["sum"], name="sum"),
        helper.make_node("Sub", ["in0", "in1"], ["diff"], name="diff"),
        _cast("sum", "OUTPUT0", elem_type),
        _cast("diff", "OUTPUT1", elem_type),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [vi("INPUT0", elem_type, shape), vi("INPUT1", elem_type, shape)],
        [vi("OUTPUT0", elem_type, shape), vi("OUTPUT1", elem_type, shape)],
    )
    return _model(graph)


def identity_graph(name, elem_type):
    shape = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")],
        name,
        [vi("INPUT0", elem_type, shape)],
        [vi("OUTPUT0", elem_type, shape)],
    )
    return _model(graph)


def sequence_graph(name):
    """OUTPUT = READY * (INPUT + START), every tensor INT32 [batch, 1]."""
    shape = ["batch", 1]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["started"], name="started"),
            helper.make_node("Mul", ["READY", "started"], ["OUTPUT"], name="ready"),
        ],
        name,
        [vi(n, TensorProto.INT32, shape) for n in ("INPUT", "START", "READY")],
        [vi("OUTPUT", TensorProto.INT32, shape)],
    )
    return _model(graph)


def dyna_sequence_graph(name):
    """OUTPUT = READY * (INPUT + START + END * CORRID); CORRID is UINT64, the rest INT32."""
    shape = ["batch", 1]
    graph = helper.make_graph(
        [
            _cast("CORRID", "corrid", TensorProto.INT32),
            helper.make_node("Add", ["INPUT", "START"], ["started"], name="started"),
            helper.make_node("Mul", ["END", "corrid"], ["ended"], name="ended"),
            helper.make_node("Add", ["started", "ended"], ["value"], name="value"),
            helper.make_node("Mul", ["READY", "value"], ["OUTPUT"], name="ready"),
        ],
        name,
        [vi(n, TensorProto.INT32, shape) for n in ("INPUT", "START", "END", "READY")]
        + [vi("CORRID", TensorProto.UINT64, shape)],
        [vi("OUTPUT", TensorProto.INT32, shape)],
    )
    return _model(graph)


def string_dyna_sequence_graph(name):
    """The dyna_sequence backend's accumulator with a decimal-string CORRID:
    new = ACC_IN * (1 - START) + INPUT + END * int(CORRID);
    ACC_OUT = OUTPUT = READY ? new : ACC_IN."""
    shape = ["batch", 1]
    one = numpy_helper.from_array(np.ones([1], np.int32), "one")
    graph = helper.make_graph(
        [
            _cast("CORRID", "corrid", TensorProto.INT32),
            helper.make_node("Sub", ["one", "START"], ["keep"], name="keep"),
            helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"], name="kept"),
            helper.make_node("Add", ["kept", "INPUT"], ["summed"], name="summed"),
            helper.make_node("Mul", ["END", "corrid"], ["ended"], name="ended"),
            helper.make_node("Add", ["summed", "ended"], ["new"], name="new"),
            helper.make_node("Sub", ["new", "ACC_IN"], ["delta"], name="delta"),
            helper.make_node("Mul", ["READY", "delta"], ["ready_delta"], name="ready_delta"),
            helper.make_node("Add", ["ACC_IN", "ready_delta"], ["OUTPUT"], name="output"),
            helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"], name="state"),
        ],
        name,
        [vi(n, TensorProto.INT32, shape) for n in ("INPUT", "ACC_IN", "START", "END", "READY")]
        + [vi("CORRID", TensorProto.STRING, shape)],
        [vi("OUTPUT", TensorProto.INT32, shape), vi("ACC_OUT", TensorProto.INT32, shape)],
        initializer=[one],
    )
    return _model(graph)


def densenet_graph(name):
    """[1,3,224,224] -> channel means [1,3,1,1] -> 1x1 conv -> fc6_1 [1,1000,1,1]."""
    rng = np.random.default_rng(DENSENET_SEED)
    weight = rng.standard_normal((DENSENET_CLASSES, 3, 1, 1)).astype(np.float32)
    bias = (0.01 * rng.standard_normal(DENSENET_CLASSES)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["data_0"], ["pooled"], name="pool"),
            helper.make_node("Conv", ["pooled", "fc_w", "fc_b"], ["fc6_1"], name="fc"),
        ],
        name,
        [vi("data_0", TensorProto.FLOAT, [1, 3, 224, 224])],
        [vi("fc6_1", TensorProto.FLOAT, [1, DENSENET_CLASSES, 1, 1])],
        initializer=[
            numpy_helper.from_array(weight, "fc_w"),
            numpy_helper.from_array(bias, "fc_b"),
        ],
    )
    return _model(graph)


def densenet_labels():
    return "".join(f"label_{i:03d}\n" for i in range(DENSENET_CLASSES))


ADD_SUB_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{
    name: "INPUT0"
    data_type: {dtype}
    dims: [ 16 ]
  }},
  {{
    name: "INPUT1"
    data_type: {dtype}
    dims: [ 16 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: {dtype}
    dims: [ 16 ]
  }},
  {{
    name: "OUTPUT1"
    data_type: {dtype}
    dims: [ 16 ]
  }}
]
"""

IDENTITY_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [
  {{
    name: "INPUT0"
    data_type: {dtype}
    dims: [ -1 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: {dtype}
    dims: [ -1 ]
  }}
]
"""

SEQUENCE_CONFIG = """\
name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [
    {
      name: "START"
      control [
        {
          kind: CONTROL_SEQUENCE_START
          int32_false_true: [ 0, 1 ]
        }
      ]
    },
    {
      name: "READY"
      control [
        {
          kind: CONTROL_SEQUENCE_READY
          int32_false_true: [ 0, 1 ]
        }
      ]
    }
  ]
}
input [
  {
    name: "INPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
output [
  {
    name: "OUTPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
  }
]
"""

# {name}, {corrid_type} and {state} vary between simple_dyna_sequence and
# simple_string_dyna_sequence.
DYNA_SEQUENCE_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  oldest {{
    max_candidate_sequences: 1024
    max_queue_delay_microseconds: 10000
  }}
  control_input [
    {{
      name: "START"
      control [
        {{
          kind: CONTROL_SEQUENCE_START
          int32_false_true: [ 0, 1 ]
        }}
      ]
    }},
    {{
      name: "END"
      control [
        {{
          kind: CONTROL_SEQUENCE_END
          int32_false_true: [ 0, 1 ]
        }}
      ]
    }},
    {{
      name: "READY"
      control [
        {{
          kind: CONTROL_SEQUENCE_READY
          int32_false_true: [ 0, 1 ]
        }}
      ]
    }},
    {{
      name: "CORRID"
      control [
        {{
          kind: CONTROL_SEQUENCE_CORRID
          data_type: {corrid_type}
        }}
      ]
    }}
  ]{state}
}}
input [
  {{
    name: "INPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }}
]
output [
  {{
    name: "OUTPUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }}
]
parameters [
  {{
    key: "execute_delay_ms"
    value: {{ string_value: "3" }}
  }}
]
instance_group [
  {{
    count: 2
    kind: KIND_CPU
  }}
]
"""

ACCUMULATOR_STATE = """
  state [
    {
      input_name: "ACC_IN"
      output_name: "ACC_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
    }
  ]"""

DENSENET_CONFIG = """\
name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size : 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
"""


def example_models():
    """Yield (name, config, model, extra files) for model_repository."""
    yield "simple", ADD_SUB_CONFIG.format(
        name="simple", dtype="TYPE_INT32"
    ), add_sub_graph("simple", TensorProto.INT32), {}
    yield "simple_int8", ADD_SUB_CONFIG.format(
        name="simple_int8", dtype="TYPE_INT8"
    ), add_sub_graph("simple_int8", TensorProto.INT8), {}
    yield "simple_string", ADD_SUB_CONFIG.format(
        name="simple_string", dtype="TYPE_STRING"
    ), add_sub_graph("simple_string", TensorProto.STRING), {}
    yield "simple_identity", IDENTITY_CONFIG.format(
        name="simple_identity", dtype="TYPE_STRING", max_batch_size=8
    ), identity_graph("simple_identity", TensorProto.STRING), {}
    yield "simple_sequence", SEQUENCE_CONFIG, sequence_graph("simple_sequence"), {}
    yield "simple_dyna_sequence", DYNA_SEQUENCE_CONFIG.format(
        name="simple_dyna_sequence", corrid_type="TYPE_UINT64", state=""
    ), dyna_sequence_graph("simple_dyna_sequence"), {}
    yield "densenet_onnx", DENSENET_CONFIG, densenet_graph("densenet_onnx"), {
        "densenet_labels.txt": densenet_labels()
    }


def sequence_extra():
    """Yield (name, config, model, extra files) for sequence_extra."""
    name = "simple_string_dyna_sequence"
    yield name, DYNA_SEQUENCE_CONFIG.format(
        name=name, corrid_type="TYPE_STRING", state=ACCUMULATOR_STATE
    ), string_dyna_sequence_graph(name), {}


def identity_extra():
    """Yield (name, config, model, extra files) for identity_extra."""
    yield "custom_identity_int32", IDENTITY_CONFIG.format(
        name="custom_identity_int32", dtype="TYPE_INT32", max_batch_size=1024
    ), identity_graph("custom_identity_int32", TensorProto.INT32), {}


def write_repository(repo_dir, models):
    os.makedirs(repo_dir, exist_ok=True)
    for name, config, model, files in models:
        model_dir = os.path.join(repo_dir, name)
        # Start each model directory afresh so no stale file survives.
        if os.path.isdir(model_dir):
            shutil.rmtree(model_dir)
        os.makedirs(os.path.join(model_dir, "1"))
        texts = {"config.pbtxt": config, **files}
        for file_name, text in texts.items():
            with open(os.path.join(model_dir, file_name), "w", newline="\n") as f:
                f.write(text)
        with open(os.path.join(model_dir, "1", "model.onnx"), "wb") as f:
            f.write(model.SerializeToString(deterministic=True))
        print(f"wrote {model_dir}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", help="directory to write the repositories into")
    args = parser.parse_args(argv)
    out = args.output_dir
    write_repository(os.path.join(out, "model_repository"), example_models())
    write_repository(os.path.join(out, "sequence_extra"), sequence_extra())
    write_repository(os.path.join(out, "identity_extra"), identity_extra())
    return 0


if __name__ == "__main__":
    sys.exit(main())
