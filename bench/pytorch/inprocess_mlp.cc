// The in-process anchor of scripts/bench_pytorch.sh: the same TorchScript model that Nereid
// serves through Triton's pytorch backend, run by libtorch inside this process with
// `Module::forward` in a loop, and its CPU time per inference from getrusage (all threads
// of the process, user + system).
//
// Each forward call is set up as the backend's ModelInstanceState::Execute sets up its
// own with the backend's default parameters: optimized graph execution on, InferenceMode
// and NoGradGuard, the input a `torch::from_blob` view of a caller-owned buffer, the
// output copied out of the returned tensor into a caller-owned buffer. The intra-op and
// inter-op thread counts are set once on the main thread before the model loads (the
// backend does the same at model load, from INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT)
// and the loop runs on a second thread, as the backend's forward runs on its instance
// thread, not on the thread that loaded the model.
//
// Usage: inprocess_mlp [--same-thread] MODEL.pt THREADS ROUNDS WARMUP BATCH:ITERATIONS...
//   --same-thread: run the loop on the thread that set the thread counts (to show that
//   OpenMP's thread count is a per-thread setting, which the second thread does not get).
//   For every round and every BATCH: WARMUP untimed calls, then ITERATIONS timed calls.
//   Prints one line per (round, batch):
//     inprocess batch=B round=R iterations=N cpu_us=C wall_us=W
//   with C and W per forward call (one call is one request of B samples), then the
//   threads the process has and a checksum: the sum of the outputs for an input of ones
//   at batch 1 (scripts/bench_pytorch.sh compares it with the server's answer).
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kIn = 256;
constexpr int64_t kOut = 16;

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int ThreadCount() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) n += entry->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

// One call as the backend makes it: a view of the input buffer, forward, copy the output.
void Infer(torch::jit::Module& module, float* input, float* output, int64_t batch) {
  torch::jit::setGraphExecutorOptimize(true);
  torch::InferenceMode inference_guard(true);
  torch::NoGradGuard no_grad;
  std::vector<torch::jit::IValue> inputs{
      torch::from_blob(input, {batch, kIn}, torch::TensorOptions().dtype(torch::kFloat32))};
  torch::Tensor result = module.forward(inputs).toTensor().contiguous();
  std::memcpy(output, result.data_ptr<float>(), size_t(batch * kOut) * sizeof(float));
}

struct Step {
  int64_t batch;
  long iterations;
};

}  // namespace

int main(int argc, char** argv) {
  const bool same_thread = argc > 1 && std::strcmp(argv[1], "--same-thread") == 0;
  if (same_thread) {
    --argc;
    ++argv;
  }
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s [--same-thread] MODEL.pt THREADS ROUNDS WARMUP BATCH:ITERATIONS...\n",
                 argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const int rounds = std::atoi(argv[3]);
  const long warmup = std::atol(argv[4]);
  std::vector<Step> steps;
  for (int i = 5; i < argc; ++i) {
    Step step{};
    if (std::sscanf(argv[i], "%ld:%ld", &step.batch, &step.iterations) != 2) {
      std::fprintf(stderr, "bad BATCH:ITERATIONS '%s'\n", argv[i]);
      return 2;
    }
    steps.push_back(step);
  }
  at::set_num_threads(threads);
  at::set_num_interop_threads(threads);
  int status = 0;
  auto run = [&] {
    try {
      torch::jit::Module module = torch::jit::load(argv[1]);
      int64_t most = 1;
      for (const Step& step : steps) most = std::max(most, step.batch);
      // Seeded pseudo-random inputs in [-1, 1), the same on every run.
      std::vector<float> input(size_t(most * kIn)), output(size_t(most * kOut));
      uint32_t state = 12345;
      for (float& x : input) {
        state = state * 1664525u + 1013904223u;
        x = float(state >> 8) / float(1u << 23) - 1.0f;
      }
      for (int round = 0; round < rounds; ++round) {
        for (const Step& step : steps) {
          for (long i = 0; i < warmup; ++i) Infer(module, input.data(), output.data(), step.batch);
          const double cpu0 = CpuSeconds();
          const auto wall0 = std::chrono::steady_clock::now();
          for (long i = 0; i < step.iterations; ++i)
            Infer(module, input.data(), output.data(), step.batch);
          const double wall =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
          const double cpu = CpuSeconds() - cpu0;
          std::printf("inprocess batch=%ld round=%d iterations=%ld cpu_us=%.2f wall_us=%.2f\n",
                      long(step.batch), round, step.iterations, cpu / step.iterations * 1e6,
                      wall / step.iterations * 1e6);
          std::fflush(stdout);
        }
      }
      std::vector<float> ones(kIn, 1.0f);
      Infer(module, ones.data(), output.data(), 1);
      double sum = 0;
      for (int64_t j = 0; j < kOut; ++j) sum += output[size_t(j)];
      std::printf("threads=%d checksum=%.6f\n", ThreadCount(), sum);
    }
    catch (const std::exception& e) {
      std::fprintf(stderr, "failed: %s\n", e.what());
      status = 1;
    }
  };
  if (same_thread) {
    run();
  } else {
    std::thread worker(run);
    worker.join();
  }
  return status;
}
