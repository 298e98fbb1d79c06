// Writes the TorchScript test models of tests/pytorch without Python's torch: each model
// is TorchScript source compiled by libtorch (`Module::define`) and saved as a `model.pt`
// that Triton's pytorch backend loads with `torch::jit::load`.
//
// Usage: make_torchscript_models OUT_DIR
//   OUT_DIR/add_sub.pt        forward(INPUT0, INPUT1) -> (INPUT0 + INPUT1, INPUT0 - INPUT1)
//   OUT_DIR/identity.pt       forward(INPUT0) -> INPUT0 (any dtype, any shape)
//   OUT_DIR/accumulate.pt     forward(value, state, start, ready) -> (total, total): a
//                             running sum per sequence kept in Triton's implicit state,
//                             restarted by START. With a state the backend binds tensors
//                             by the <name>__<index> of the configuration only, and takes
//                             that convention only when some configured name is not an
//                             argument name: hence arguments named unlike INPUT__0 etc.
//   OUT_DIR/upper.pt          forward(INPUT__0: List[str]) -> List[str], each upper-cased
//                             (the backend's BYTES tensors are lists of strings)
#include <torch/script.h>

#include <cstdio>
#include <string>

namespace {

void Write(const std::string& path, const char* name, const char* source) {
  torch::jit::Module module(name);
  module.define(source);
  module.save(path);
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  try {
    Write(out + "/add_sub.pt", "AddSub", R"(
def forward(self, INPUT0: Tensor, INPUT1: Tensor) -> Tuple[Tensor, Tensor]:
    return INPUT0 + INPUT1, INPUT0 - INPUT1
)");
    Write(out + "/identity.pt", "Identity", R"(
def forward(self, INPUT0: Tensor) -> Tensor:
    return INPUT0
)");
    Write(out + "/accumulate.pt", "Accumulate", R"(
def forward(self, value: Tensor, state: Tensor, start: Tensor,
            ready: Tensor) -> Tuple[Tensor, Tensor]:
    keep = torch.logical_and(ready != 0, start == 0)
    total = torch.where(keep, state, torch.zeros_like(state)) + value
    return total, total
)");
    Write(out + "/upper.pt", "Upper", R"(
def forward(self, INPUT__0: List[str]) -> List[str]:
    return [text.upper() for text in INPUT__0]
)");
  }
  catch (const std::exception& e) {
    std::fprintf(stderr, "failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
