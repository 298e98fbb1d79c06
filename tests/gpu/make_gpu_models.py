"""Writes the model repository scripts/gpu_check.sh serves on the device machine, with
that machine's PyTorch (TorchScript is saved by the release that will load it):

- torch_addsub (pytorch backend, KIND_GPU on GPU 0): INPUT__0, INPUT__1 FP32 [16] ->
  OUTPUT__0 = sum, OUTPUT__1 = difference; also the CUDA shared-memory model.
- torch_matmul_gpu / torch_matmul_cpu (pytorch backend, the same TorchScript file, one
  KIND_GPU and one KIND_CPU instance): INPUT__0 FP32 [batch, DIM] -> OUTPUT__0, DEPTH
  rounds of tanh(x @ W) with W seeded (matmul_weights() gives it to the checks).
- py_torch_gpu (Triton's python backend, KIND_GPU): moves INPUT0 to its GPU with torch,
  answers OUTPUT0 = 2 * INPUT0 + 1 as a GPU tensor through DLPack, and DEVICE (INT64
  [2]) = whether the result was on the GPU, whether the response tensor is not in CPU
  memory.

Usage: python3 tests/gpu/make_gpu_models.py REPOSITORY
"""

import os
import sys
import textwrap

import torch

DIM = 2048
DEPTH = 8
MAX_BATCH = 64


def matmul_weights():
    """The matmul models' weights, the same on every call (CPU, float32)."""
    generator = torch.Generator().manual_seed(20261130)
    return torch.randn(DIM, DIM, generator=generator) / DIM**0.5


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a - b


class Matmul(torch.nn.Module):
    depth: torch.jit.Final[int]

    def __init__(self):
        super().__init__()
        self.depth = DEPTH
        self.weight = torch.nn.Parameter(matmul_weights(), requires_grad=False)

    def forward(self, x: torch.Tensor):
        for _ in range(self.depth):
            x = torch.tanh(x @ self.weight)
        return x


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())


def main(root):
    os.makedirs(os.path.join(root, "torch_addsub", "1"), exist_ok=True)
    torch.jit.script(AddSub()).save(os.path.join(root, "torch_addsub", "1", "model.pt"))
    write(os.path.join(root, "torch_addsub", "config.pbtxt"), """
        name: "torch_addsub"
        backend: "pytorch"
        max_batch_size: 0
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
                { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
                 { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
        instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]
    """)
    scripted = torch.jit.script(Matmul())
    for kind in ("gpu", "cpu"):
        name = f"torch_matmul_{kind}"
        os.makedirs(os.path.join(root, name, "1"), exist_ok=True)
        scripted.save(os.path.join(root, name, "1", "model.pt"))
        write(os.path.join(root, name, "config.pbtxt"), f"""
            name: "{name}"
            backend: "pytorch"
            max_batch_size: {MAX_BATCH}
            input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {DIM} ] }} ]
            output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {DIM} ] }} ]
            instance_group [ {{ kind: KIND_{kind.upper()} count: 1 }} ]
        """)
    write(os.path.join(root, "py_torch_gpu", "config.pbtxt"), """
        name: "py_torch_gpu"
        backend: "python"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
                 { name: "DEVICE" data_type: TYPE_INT64 dims: [ 2 ] } ]
        instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]
    """)
    write(os.path.join(root, "py_torch_gpu", "1", "model.py"), """
        import numpy as np
        import torch
        import triton_python_backend_utils as pb_utils
        from torch.utils.dlpack import from_dlpack, to_dlpack


        class TritonPythonModel:
            def initialize(self, args):
                self.device = torch.device("cuda", int(args["model_instance_device_id"]))

            def execute(self, requests):
                responses = []
                for request in requests:
                    tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                    x = from_dlpack(tensor.to_dlpack()).to(self.device)
                    y = (x * 2 + 1).contiguous()
                    out = pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(y))
                    device = np.array([int(y.is_cuda), int(not out.is_cpu())], dtype=np.int64)
                    responses.append(pb_utils.InferenceResponse(
                        [out, pb_utils.Tensor("DEVICE", device)]))
                return responses
    """)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
