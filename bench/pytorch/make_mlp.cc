// Writes the benchmark's TorchScript model without Python's torch: a two-layer MLP,
// Linear(256 -> 256), ReLU, Linear(256 -> 16), whose weights are a fixed function of
// their index (no random generator, so every build of this file writes the same model).
// The forward method is TorchScript source compiled by libtorch (`Module::define`); the
// weights are registered on the module first so the source can refer to them.
//
// Usage: make_mlp OUT.pt
//   forward(INPUT__0: float32 [batch, 256]) -> float32 [batch, 16]
#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <string>

namespace {

// A deterministic weight tensor: sin of a scaled index, scaled by 1/sqrt(fan_in) so the
// activations stay of order one through both layers.
torch::Tensor Fixed(std::vector<int64_t> shape, double step, int64_t fan_in) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto t = torch::arange(n, torch::kFloat64).mul(step).sin().div(std::sqrt(double(fan_in)));
  return t.to(torch::kFloat32).reshape(shape).contiguous();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.pt\n", argv[0]);
    return 2;
  }
  try {
    torch::jit::Module module("Mlp");
    module.register_parameter("w1", Fixed({256, 256}, 0.37, 256), false);
    module.register_parameter("b1", Fixed({256}, 0.11, 256), false);
    module.register_parameter("w2", Fixed({16, 256}, 0.53, 256), false);
    module.register_parameter("b2", Fixed({16}, 0.29, 256), false);
    module.define(R"(
def forward(self, INPUT__0: Tensor) -> Tensor:
    hidden = torch.relu(torch.linear(INPUT__0, self.w1, self.b1))
    return torch.linear(hidden, self.w2, self.b2)
)");
    module.save(argv[1]);
    std::printf("wrote %s\n", argv[1]);
  }
  catch (const std::exception& e) {
    std::fprintf(stderr, "failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
