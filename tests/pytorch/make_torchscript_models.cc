// Writes the TorchScript test models of tests/pytorch without Python's torch: each model
// is TorchScript source compiled by libtorch (`Module::define`) and saved as a `model.pt`
// that Triton's pytorch backend loads with `torch::jit::load`.
//
// Usage: make_torchscript_models OUT_DIR
//   OUT_DIR/add_sub.pt        forward(INPUT0, INPUT1) -> (INPUT0 + INPUT1, INPUT0 - INPUT1)
//   OUT_DIR/identity.pt       forward(INPUT0) -> INPUT0 (any dtype, any shape)
//   OUT_DIR/accumulate.pt     forward(INPUT, START, READY, CORRID, STATE_IN) ->
//                             (OUTPUT, STATE_OUT): a running sum per sequence, the state
//                             reset by START, in Triton's implicit-state convention
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
def forward(self, INPUT: Tensor, START: Tensor, READY: Tensor, CORRID: Tensor,
            STATE_IN: Tensor) -> Tuple[Tensor, Tensor]:
    state = torch.where(START != 0, torch.zeros_like(STATE_IN), STATE_IN)
    total = state + INPUT
    return total, total
)");
  }
  catch (const std::exception& e) {
    std::fprintf(stderr, "failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
