"""A configuration that contradicts its ONNX graph fails to load (issue 22, item 6), as
in Triton's ONNX Runtime backend, with its message naming the tensor: a datatype, a
rank or a fixed dimension the graph does not have, a number of inputs it does not
have, sequence controls that are not shape-[1] inputs of their type, state tensors of
another type. Before, such a model loaded and every request failed. One server loads
every model of one repository, the valid ones next to the broken ones."""

import os
import shutil

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from conftest import EXAMPLE_MODELS, Server, add_sub_config, base_args
from make_models import IR_VERSION, OPSET
from onnx import TensorProto, helper, numpy_helper

SEQUENCE = open(os.path.join(EXAMPLE_MODELS, "sequence_accumulate", "config.pbtxt")).read()
STRINGS = open(os.path.join(EXAMPLE_MODELS, "identity_string", "config.pbtxt")).read()


def renamed(text, old, new):
    return text.replace(f'name: "{old}"', f'name: "{new}"', 1)


def sequence(name, old, new):
    """sequence_accumulate's configuration under `name`, with `old` replaced by `new`."""
    assert old in SEQUENCE
    return renamed(SEQUENCE, "sequence_accumulate", name).replace(old, new)


def add_sub(name, **kw):
    return add_sub_config(name=name, **kw)


def weighted_graph():
    """Y = X + W, where W is an initializer a request may replace (a graph input with
    a default), which Triton's backend lets a configuration list as an optional input."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "weighted",
        [vi("X", TensorProto.FLOAT, [2]), vi("W", TensorProto.FLOAT, [2])],
        [vi("Y", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.array([10, 20], np.float32), "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def weighted_config(name, max_batch_size=0):
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "W" data_type: TYPE_FP32 dims: [ 2 ] optional: true },\n'
        '        { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    )


# name -> (graph, config.pbtxt, the load error); graph None is weighted_graph()
BAD = {
    "string_as_int64": (
        "identity_string",
        renamed(STRINGS, "identity_string", "string_as_int64").replace(
            "name: \"INPUT0\" data_type: TYPE_STRING", "name: \"INPUT0\" data_type: TYPE_INT64"
        ),
        "unable to load model 'string_as_int64', configuration expects datatype TYPE_INT64 "
        "for input 'INPUT0', model provides TYPE_BYTES",
    ),
    "one_input": (
        "add_sub",
        add_sub("one_input").replace(
            '  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }\n', ""
        ).replace('dims: [ 4 ] },\n]', "dims: [ 4 ] }\n]"),
        "unable to load model 'one_input', configuration expects 1 inputs, model provides 2",
    ),
    "wrong_rank": (
        "add_sub",
        add_sub("wrong_rank").replace(
            'name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ]',
            'name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ]',
        ),
        "model 'wrong_rank', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,4]) "
        "but the model configuration specifies 3 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,2,2])",
    ),
    "fixed_dim": (
        "add_sub",
        add_sub("fixed_dim").replace(
            'name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ]',
            'name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 5 ]',
        ),
        "model 'fixed_dim', tensor 'OUTPUT1': the model expects 2 dimensions (shape [-1,4]) "
        "but the model configuration specifies 2 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,5])",
    ),
    "unknown_output": (
        "add_sub",
        add_sub("unknown_output").replace('name: "OUTPUT1"', 'name: "OUTPUT9"'),
        "unexpected inference output 'OUTPUT9', allowed outputs are: OUTPUT0, OUTPUT1",
    ),
    "control_type": (
        "sequence_accumulate",
        sequence("control_type", "fp32_false_true", "int32_false_true"),
        "unable to load model 'control_type', sequence control 'START', the model expects "
        "data-type FLOAT but the model configuration specifies data-type TYPE_INT32",
    ),
    "control_name": (
        "sequence_accumulate",
        sequence("control_name", '{ name: "CORRID"', '{ name: "CORR"'),
        "configuration specified sequence control 'CORR', but model does not provide that input",
    ),
    "no_ready": (
        "sequence_accumulate",
        sequence(
            "no_ready",
            '    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: '
            "[ false, true ] } ] },\n",
            "",
        ),
        "unable to load model 'no_ready', configuration expects 5 inputs, model provides 6",
    ),
    "state_type": (
        "sequence_accumulate",
        sequence("state_type", 'output_name: "ACC_OUT" data_type: TYPE_FP32',
                 'output_name: "ACC_OUT" data_type: TYPE_INT32'),
        "unable to load model 'state_type', configuration expects datatype TYPE_INT32 for "
        "output state 'ACC_OUT', model provides TYPE_FP32",
    ),
    "optional_batching": (
        None,
        weighted_config("optional_batching", max_batch_size=4),
        "unable to load model 'optional_batching', optional input 'W' is not supported for "
        "models that support batching",
    ),
}

# Valid configurations of the same graphs: variable dims, strings, controls and state,
# a non-batching model over a graph with a variable first dimension.
GOOD = {
    "identity_string": ("identity_string", STRINGS),
    "sequence_accumulate": ("sequence_accumulate", SEQUENCE),
    "add_sub": ("add_sub", add_sub("add_sub")),
    "add_sub_nobatch": (
        "add_sub",
        add_sub("add_sub_nobatch", max_batch_size=0).replace("dims: [ 4 ]", "dims: [ -1, 4 ]"),
    ),
    # The optional input is an initializer, not among the inputs a run must have.
    "weighted": (None, weighted_config("weighted")),
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One server over every model above."""
    repo = str(tmp_path_factory.mktemp("io_check") / "models")
    for name, (graph, config, *_) in {**BAD, **GOOD}.items():
        assert f'name: "{name}"' in config, name
        version = os.path.join(repo, name, "1")
        if graph is None:
            os.makedirs(version)
            onnx.save(weighted_graph(), os.path.join(version, "model.onnx"))
        else:
            shutil.copytree(os.path.join(EXAMPLE_MODELS, graph, "1"), version)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
    server = Server(repo, base_args(repo, ["--exit-on-error=false"]))
    try:
        yield server.wait_started()
    finally:
        server.kill()


@pytest.fixture(scope="module")
def index(checked):
    return {m["name"]: m for m in checked.http_client().get_model_repository_index()}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_contradicting_config_fails_to_load_naming_the_tensor(index, name):
    assert index[name]["state"] == "UNAVAILABLE", index[name]
    assert BAD[name][2] in index[name]["reason"], index[name]["reason"]


@pytest.mark.parametrize("name", sorted(GOOD))
def test_a_matching_config_loads(index, name):
    assert index[name]["state"] == "READY", index[name]


def test_an_optional_initializer_input_keeps_its_default_unless_sent(checked):
    client = checked.http_client()

    def infer(*names):
        inputs = []
        for name in names:
            tensor = httpclient.InferInput(name, [2], "FP32")
            tensor.set_data_from_numpy(np.array([1, 2], np.float32))
            inputs.append(tensor)
        return client.infer("weighted", inputs).as_numpy("Y").tolist()

    assert infer("X") == [11, 22]
    assert infer("X", "W") == [2, 4]
