// Nereid's own C++ backend, in the shape of Triton's `recommended` example: a batching
// backend whose execute gathers the whole batch's input into one buffer, computes once,
// and scatters each request's slice into its response, with per-request and per-batch
// statistics. Written from the ABI (abi.h, no Triton header or library) with helpers of
// our own in the role of Triton's backend_common: errors become C++ exceptions inside and
// TRITONSERVER_Error at the boundary, so no exception ever crosses into the server, and
// the entry points are `extern "C"` so their names are not mangled.
//
// Model: input IN and output OUT, FP32, any shape; OUT = IN * scale.
// Parameters: "scale" (default 1), "unlucky": a value that makes the computation of the
// request holding it throw (that request gets an error response, the others succeed),
// "pinned_staging_bytes": a pinned buffer of that size each instance borrows from the
// server's memory manager for its lifetime, as a backend that copies batches to a GPU
// keeps pinned staging memory (default 0: none).
// tests/python/test_cpp_backend.py builds it with `c++` and drives it with tritonclient.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "abi.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// An error of the server's kind, carried as an exception until the ABI boundary.
class ServerError : public std::runtime_error {
 public:
  ServerError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Throws the server's error, taking ownership of it (it is deleted here).
void Check(Error* error) {
  if (error == nullptr) return;
  std::string message = TRITONSERVER_ErrorMessage(error);
  TRITONSERVER_ErrorDelete(error);
  throw ServerError(INTERNAL, message);
}

// Runs `body` and turns whatever it throws into an error for the server.
template <typename Body>
Error* AtBoundary(Body&& body) {
  try {
    body();
    return nullptr;
  } catch (const ServerError& e) {
    return TRITONSERVER_ErrorNew(e.code(), e.what());
  } catch (const std::exception& e) {
    return TRITONSERVER_ErrorNew(INTERNAL, e.what());
  } catch (...) {
    return TRITONSERVER_ErrorNew(INTERNAL, "unknown C++ exception");
  }
}

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The string value of parameter `key` in a model configuration's JSON, if present (the
// configuration is Triton's JSON: "parameters":{"key":{"string_value":"..."}}).
std::string Parameter(const std::string& json, const std::string& key, const std::string& fallback) {
  const std::string quoted = "\"" + key + "\"";
  size_t at = json.find("\"parameters\"");
  if (at == std::string::npos || (at = json.find(quoted, at)) == std::string::npos) return fallback;
  at = json.find("\"string_value\"", at);
  if (at == std::string::npos) return fallback;
  size_t start = json.find('"', json.find(':', at) + 1);
  size_t end = json.find('"', start + 1);
  if (start == std::string::npos || end == std::string::npos) return fallback;
  return json.substr(start + 1, end - start - 1);
}

class ModelState {
 public:
  explicit ModelState(Model* model) {
    const char* name = nullptr;
    Check(TRITONBACKEND_ModelName(model, &name));
    name_ = name;
    Message* config = nullptr;
    Check(TRITONBACKEND_ModelConfig(model, 1, &config));
    std::unique_ptr<Message, void (*)(Message*)> owned(config, [](Message* m) {
      Error* e = TRITONSERVER_MessageDelete(m);
      if (e != nullptr) TRITONSERVER_ErrorDelete(e);
    });
    const char* json = nullptr;
    size_t size = 0;
    Check(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
    const std::string text(json, size);
    scale_ = std::strtof(Parameter(text, "scale", "1").c_str(), nullptr);
    const std::string unlucky = Parameter(text, "unlucky", "");
    has_unlucky_ = !unlucky.empty();
    unlucky_ = has_unlucky_ ? std::strtof(unlucky.c_str(), nullptr) : 0.0f;
    staging_bytes_ = std::strtoull(Parameter(text, "pinned_staging_bytes", "0").c_str(), nullptr, 10);
    batching_ = text.find("\"max_batch_size\":0") == std::string::npos;
  }

  const std::string& name() const { return name_; }
  bool batching() const { return batching_; }
  uint64_t staging_bytes() const { return staging_bytes_; }

  // The model's computation, over a whole batch at once.
  void Compute(const std::vector<float>& in, std::vector<float>& out) const {
    out.resize(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (has_unlucky_ && in[i] == unlucky_) {
        throw std::runtime_error("value " + std::to_string(static_cast<int>(in[i])) + " is unlucky");
      }
      out[i] = in[i] * scale_;
    }
  }

 private:
  std::string name_;
  float scale_ = 1.0f;
  bool has_unlucky_ = false;
  float unlucky_ = 0.0f;
  bool batching_ = true;
  uint64_t staging_bytes_ = 0;
};

// An instance's pinned staging buffer, borrowed from the server's memory manager as
// CPU_PINNED and given back when the instance finalizes.
class Staging {
 public:
  Staging(Instance* instance, uint64_t bytes) {
    if (bytes == 0) return;
    Model* model = nullptr;
    Check(TRITONBACKEND_ModelInstanceModel(instance, &model));
    Backend* backend = nullptr;
    Check(TRITONBACKEND_ModelBackend(model, &backend));
    Check(TRITONBACKEND_BackendMemoryManager(backend, &manager_));
    Check(TRITONBACKEND_MemoryManagerAllocate(manager_, &buffer_, MEMORY_CPU_PINNED, 0, bytes));
    std::memset(buffer_, 0, bytes);
  }
  ~Staging() {
    if (buffer_ == nullptr) return;
    Error* error = TRITONBACKEND_MemoryManagerFree(manager_, buffer_, MEMORY_CPU_PINNED, 0);
    if (error != nullptr) TRITONSERVER_ErrorDelete(error);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

 private:
  MemoryManager* manager_ = nullptr;
  void* buffer_ = nullptr;
};

// One request's share of the batch: where its elements start and its shape.
struct Slice {
  Request* request;
  size_t offset = 0;
  size_t count = 0;
  std::vector<int64_t> shape;
  std::string error;  // empty when the request's input was read
};

// Appends request's input IN to `batch` (all of its buffers, in order).
void Gather(Slice& slice, std::vector<float>& batch) {
  Input* input = nullptr;
  Check(TRITONBACKEND_RequestInput(slice.request, "IN", &input));
  int datatype = 0;
  const int64_t* shape = nullptr;
  uint32_t dims = 0, buffers = 0;
  uint64_t bytes = 0;
  Check(TRITONBACKEND_InputProperties(input, nullptr, &datatype, &shape, &dims, &bytes, &buffers));
  if (datatype != TYPE_FP32) throw ServerError(INVALID_ARG, "IN must be FP32");
  slice.shape.assign(shape, shape + dims);
  slice.offset = batch.size();
  slice.count = bytes / sizeof(float);
  batch.resize(slice.offset + slice.count);
  char* to = reinterpret_cast<char*>(batch.data() + slice.offset);
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* data = nullptr;
    uint64_t size = 0;
    int memory = 0;
    int64_t device = 0;
    Check(TRITONBACKEND_InputBuffer(input, b, &data, &size, &memory, &device));
    std::memcpy(to, data, size);
    to += size;
  }
}

// Sends `slice`'s part of `out` as its response's OUT.
void Scatter(const Slice& slice, const std::vector<float>& out) {
  Response* response = nullptr;
  Check(TRITONBACKEND_ResponseNew(&response, slice.request));
  Error* failure = AtBoundary([&] {
    Output* output = nullptr;
    Check(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TYPE_FP32, slice.shape.data(),
                                       static_cast<uint32_t>(slice.shape.size())));
    void* buffer = nullptr;
    int memory = 0;
    int64_t device = 0;
    Check(TRITONBACKEND_OutputBuffer(output, &buffer, slice.count * sizeof(float), &memory, &device));
    std::memcpy(buffer, out.data() + slice.offset, slice.count * sizeof(float));
  });
  Check(TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, failure));
  if (failure != nullptr) TRITONSERVER_ErrorDelete(failure);
}

// Answers `slice` with an error response.
void Refuse(const Slice& slice, int code, const std::string& why) {
  Response* response = nullptr;
  Check(TRITONBACKEND_ResponseNew(&response, slice.request));
  Error* error = TRITONSERVER_ErrorNew(code, why.c_str());
  Check(TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, error));
  TRITONSERVER_ErrorDelete(error);
}

class InstanceState {
 public:
  InstanceState(ModelState* model, Instance* instance)
      : model_(model), staging_(instance, model->staging_bytes()) {}

  void Execute(Instance* instance, Request** requests, uint32_t count) {
    const uint64_t start = NowNs();
    std::vector<Slice> slices(count);
    std::vector<float> batch;
    uint64_t batch_size = 0;
    for (uint32_t r = 0; r < count; ++r) {
      slices[r].request = requests[r];
      try {
        Gather(slices[r], batch);
        batch_size += model_->batching() && !slices[r].shape.empty() ? slices[r].shape[0] : 1;
      } catch (const std::exception& e) {
        slices[r].error = e.what();
      }
    }
    const uint64_t compute_start = NowNs();
    std::vector<float> out;
    std::string compute_error;
    try {
      model_->Compute(batch, out);
    } catch (const std::exception& e) {
      compute_error = e.what();
    }
    // A failed batch computation is retried request by request, so one bad request
    // fails alone, as a backend that validates per request would.
    std::vector<std::string> errors(count);
    if (!compute_error.empty()) {
      out.assign(batch.size(), 0.0f);
      for (uint32_t r = 0; r < count; ++r) {
        if (!slices[r].error.empty()) continue;
        std::vector<float> alone(batch.begin() + slices[r].offset,
                                 batch.begin() + slices[r].offset + slices[r].count);
        std::vector<float> answer;
        try {
          model_->Compute(alone, answer);
          std::copy(answer.begin(), answer.end(), out.begin() + slices[r].offset);
        } catch (const std::exception& e) {
          errors[r] = std::string("the computation threw: ") + e.what();
        }
      }
    }
    const uint64_t compute_end = NowNs();
    for (uint32_t r = 0; r < count; ++r) {
      const Slice& slice = slices[r];
      bool ok = slice.error.empty() && errors[r].empty();
      if (!slice.error.empty()) {
        Refuse(slice, INVALID_ARG, model_->name() + ": " + slice.error);
      } else if (!errors[r].empty()) {
        Refuse(slice, INTERNAL, model_->name() + ": " + errors[r]);
      } else {
        Scatter(slice, out);
      }
      Check(TRITONBACKEND_ModelInstanceReportStatistics(instance, slice.request, ok, start,
                                                        compute_start, compute_end, NowNs()));
      Check(TRITONBACKEND_RequestRelease(slice.request, RELEASE_ALL));
    }
    Check(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, batch_size, start, compute_start,
                                                           compute_end, NowNs()));
  }

 private:
  ModelState* model_;
  Staging staging_;
};

}  // namespace

EXPORT Error* TRITONBACKEND_ModelInitialize(Model* model) {
  return AtBoundary([&] {
    auto state = std::make_unique<ModelState>(model);
    Check(TRITONBACKEND_ModelSetState(model, state.get()));
    state.release();
  });
}

EXPORT Error* TRITONBACKEND_ModelFinalize(Model* model) {
  return AtBoundary([&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelState(model, &state));
    delete static_cast<ModelState*>(state);
  });
}

EXPORT Error* TRITONBACKEND_ModelInstanceInitialize(Instance* instance) {
  return AtBoundary([&] {
    Model* model = nullptr;
    Check(TRITONBACKEND_ModelInstanceModel(instance, &model));
    void* model_state = nullptr;
    Check(TRITONBACKEND_ModelState(model, &model_state));
    auto state = std::make_unique<InstanceState>(static_cast<ModelState*>(model_state), instance);
    Check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()));
    state.release();
  });
}

EXPORT Error* TRITONBACKEND_ModelInstanceFinalize(Instance* instance) {
  return AtBoundary([&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelInstanceState(instance, &state));
    delete static_cast<InstanceState*>(state);
  });
}

EXPORT Error* TRITONBACKEND_ModelInstanceExecute(Instance* instance, Request** requests,
                                                 const uint32_t count) {
  return AtBoundary([&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelInstanceState(instance, &state));
    static_cast<InstanceState*>(state)->Execute(instance, requests, count);
  });
}
