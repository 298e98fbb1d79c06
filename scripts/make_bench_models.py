#!/usr/bin/env python3
"""Write the benchmark model repository (not committed; scripts/bench.sh calls this).

Usage: scripts/make_bench_models.py OUTPUT_DIR

Models (all FP32, ONNX Runtime, two CPU instances with one intra-op thread each, so the
two instances use the machine's two cores without oversubscribing them):
  mlp            the example MLP (16 -> 32 -> 4) with dynamic batching
  mlp_nobatch    the same model without dynamic batching (the batching-gain baseline)
  mlp_large      256 -> 1024 -> 1024 -> 256 with ReLUs (about 1.3 M weights), dynamic batching
  mlp_large_nobatch  the same without dynamic batching (the batching-gain baseline)
  add_sub        the example add_sub, one instance, no batching (per-request overhead)
  add_ones_N     OUTPUT = INPUT + N as N chained ONNX Add nodes, FP32 [16], one instance,
                 no batching (N = 1, 4, 16): N trivial steps of work in one model
  ensemble_add_ones_N  an ensemble of N steps, each add_ones_1: the same work as add_ones_N
                 with every step a separate inference (the per-step overhead)
"""

import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models  # noqa: E402

INSTANCES = """instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
parameters { key: "inter_op_thread_count" value { string_value: "1" } }
"""


def mlp_config(name, inp, out, max_batch, batching):
    text = (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch}\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {inp} ] }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {out} ] }} ]\n' + INSTANCES
    )
    if batching:
        text += "dynamic_batching { }\n"
    return text


def large_mlp_graph(name, sizes=(256, 1024, 1024, 256), seed=7):
    rs = np.random.RandomState(seed)
    nodes, inits = [], []
    current = "INPUT"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        w = (rs.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        bias = np.zeros(b, dtype=np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        last = i == len(sizes) - 2
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], ["OUTPUT" if last else f"a{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
            current = f"r{i}"
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        name,
        [vi("INPUT", TensorProto.FLOAT, ["batch", sizes[0]])],
        [vi("OUTPUT", TensorProto.FLOAT, ["batch", sizes[-1]])],
        initializer=inits,
    )
    return make_models._model(graph)


ENSEMBLE_STEPS = (1, 4, 16)
ADD_ONES_WIDTH = 16
ONE_INSTANCE = INSTANCES.replace("count: 2", "count: 1")


def add_ones_graph(name, n):
    """OUTPUT = INPUT + 1 + ... + 1 (n Add nodes, which ONNX Runtime does not fold)."""
    one = numpy_helper.from_array(np.ones([ADD_ONES_WIDTH], np.float32), "one")
    names = ["INPUT"] + [f"s{i}" for i in range(1, n)] + ["OUTPUT"]
    nodes = [helper.make_node("Add", [names[i], "one"], [names[i + 1]]) for i in range(n)]
    vi = helper.make_tensor_value_info
    shape = ["batch", ADD_ONES_WIDTH]
    graph = helper.make_graph(
        nodes, name, [vi("INPUT", TensorProto.FLOAT, shape)], [vi("OUTPUT", TensorProto.FLOAT, shape)], initializer=[one]
    )
    return make_models._model(graph)


def add_ones_config(name):
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {ADD_ONES_WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {ADD_ONES_WIDTH} ] }} ]\n' + ONE_INSTANCE
    )


def ensembles():
    """Yield (name, config) for the chains of add_ones_1 steps."""
    io = (
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {ADD_ONES_WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {ADD_ONES_WIDTH} ] }} ]\n'
    )
    for n in ENSEMBLE_STEPS:
        tensors = ["INPUT"] + [f"t{i}" for i in range(1, n)] + ["OUTPUT"]
        steps = [
            make_models.ensemble_step("add_ones_1", {"INPUT": tensors[i]}, {"OUTPUT": tensors[i + 1]})
            for i in range(n)
        ]
        name = f"ensemble_add_ones_{n}"
        yield name, make_models.ensemble_config(name, io, steps)


def models():
    small_in, small_out = make_models.MLP_IN, make_models.MLP_OUT
    yield "mlp", mlp_config("mlp", small_in, small_out, 64, True), make_models.mlp_graph("mlp")
    yield "mlp_nobatch", mlp_config("mlp_nobatch", small_in, small_out, 64, False), make_models.mlp_graph(
        "mlp_nobatch"
    )
    yield "mlp_large", mlp_config("mlp_large", 256, 256, 64, True), large_mlp_graph("mlp_large")
    yield "mlp_large_nobatch", mlp_config("mlp_large_nobatch", 256, 256, 64, False), large_mlp_graph(
        "mlp_large_nobatch"
    )
    yield "add_sub", make_models.ADD_SUB_CONFIG, make_models.add_sub_graph("add_sub")
    for n in ENSEMBLE_STEPS:
        name = f"add_ones_{n}"
        yield name, add_ones_config(name), add_ones_graph(name, n)


def main():
    out = sys.argv[1]
    if os.path.isdir(out):
        shutil.rmtree(out)
    for name, config, model in models():
        os.makedirs(os.path.join(out, name, "1"))
        with open(os.path.join(out, name, "config.pbtxt"), "w") as f:
            f.write(config)
        onnx.save(model, os.path.join(out, name, "1", "model.onnx"))
    for name, config in ensembles():
        os.makedirs(os.path.join(out, name, "1"))
        with open(os.path.join(out, name, "config.pbtxt"), "w") as f:
            f.write(config)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
