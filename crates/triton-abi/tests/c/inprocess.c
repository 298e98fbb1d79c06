/* Exercises Nereid's libtritonserver.so through the in-process API, declared here
 * from the ABI (no Triton header): options, server life cycle, metadata, repository
 * control, requests with ids/flags/parameters, the response allocator, the response
 * cache, and the errors for null pointers and bad enum values.
 *
 * Usage: inprocess MODEL_REPOSITORY   (holding add_sub and add_sub_cached)
 * Prints "inprocess: OK" and exits 0 when every check passes. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct Error Error;
typedef struct Options Options;
typedef struct Server Server;
typedef struct Message Message;
typedef struct Request Request;
typedef struct Response Response;
typedef struct Allocator Allocator;
typedef struct Parameter Parameter;

typedef Error* (*AllocFn)(Allocator*, const char*, size_t, int, int64_t, void*, void**,
                          void**, int*, int64_t*);
typedef Error* (*ReleaseBufFn)(Allocator*, void*, void*, size_t, int, int64_t);
typedef void (*RequestReleaseFn)(Request*, uint32_t, void*);
typedef void (*ResponseFn)(Response*, uint32_t, void*);

extern Error* TRITONSERVER_ErrorNew(int code, const char* msg);
extern void TRITONSERVER_ErrorDelete(Error*);
extern int TRITONSERVER_ErrorCode(Error*);
extern const char* TRITONSERVER_ErrorMessage(Error*);
extern Error* TRITONSERVER_ApiVersion(uint32_t*, uint32_t*);
extern Error* TRITONSERVER_ServerOptionsNew(Options**);
extern Error* TRITONSERVER_ServerOptionsDelete(Options*);
extern Error* TRITONSERVER_ServerOptionsSetServerId(Options*, const char*);
extern Error* TRITONSERVER_ServerOptionsSetModelRepositoryPath(Options*, const char*);
extern Error* TRITONSERVER_ServerOptionsSetModelControlMode(Options*, int);
extern Error* TRITONSERVER_ServerOptionsSetStartupModel(Options*, const char*);
extern Error* TRITONSERVER_ServerOptionsSetStrictModelConfig(Options*, bool);
extern Error* TRITONSERVER_ServerOptionsSetCacheConfig(Options*, const char*, const char*);
extern Error* TRITONSERVER_ServerOptionsSetLogVerbose(Options*, int);
extern Error* TRITONSERVER_ServerOptionsSetBackendDirectory(Options*, const char*);
extern Error* TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(Options*, double);
extern Error* TRITONSERVER_ServerOptionsSetExitTimeout(Options*, unsigned int);
extern Error* TRITONSERVER_ServerOptionsSetRateLimiterMode(Options*, int);
extern Error* TRITONSERVER_ServerNew(Server**, Options*);
extern Error* TRITONSERVER_ServerDelete(Server*);
extern Error* TRITONSERVER_ServerStop(Server*);
extern Error* TRITONSERVER_ServerIsLive(Server*, bool*);
extern Error* TRITONSERVER_ServerIsReady(Server*, bool*);
extern Error* TRITONSERVER_ServerModelIsReady(Server*, const char*, int64_t, bool*);
extern Error* TRITONSERVER_ServerModelBatchProperties(Server*, const char*, int64_t,
                                                      uint32_t*, void**);
extern Error* TRITONSERVER_ServerModelTransactionProperties(Server*, const char*, int64_t,
                                                            uint32_t*, void**);
extern Error* TRITONSERVER_ServerMetadata(Server*, Message**);
extern Error* TRITONSERVER_ServerModelMetadata(Server*, const char*, int64_t, Message**);
extern Error* TRITONSERVER_ServerModelConfig(Server*, const char*, int64_t, uint32_t,
                                             Message**);
extern Error* TRITONSERVER_ServerModelStatistics(Server*, const char*, int64_t, Message**);
extern Error* TRITONSERVER_ServerModelIndex(Server*, uint32_t, Message**);
extern Error* TRITONSERVER_ServerLoadModel(Server*, const char*);
extern Error* TRITONSERVER_ServerLoadModelWithParameters(Server*, const char*,
                                                         const Parameter**, uint64_t);
extern Error* TRITONSERVER_ServerUnloadModel(Server*, const char*);
extern Error* TRITONSERVER_ServerInferAsync(Server*, Request*, void*);
extern Error* TRITONSERVER_MessageSerializeToJson(Message*, const char**, size_t*);
extern Error* TRITONSERVER_MessageDelete(Message*);
extern Parameter* TRITONSERVER_ParameterNew(const char*, int, const void*);
extern void TRITONSERVER_ParameterDelete(Parameter*);
extern const char* TRITONSERVER_ParameterTypeString(int);
extern Error* TRITONSERVER_ResponseAllocatorNew(Allocator**, AllocFn, ReleaseBufFn, void*);
extern Error* TRITONSERVER_ResponseAllocatorDelete(Allocator*);
extern Error* TRITONSERVER_InferenceRequestNew(Request**, Server*, const char*, int64_t);
extern Error* TRITONSERVER_InferenceRequestDelete(Request*);
extern Error* TRITONSERVER_InferenceRequestSetId(Request*, const char*);
extern Error* TRITONSERVER_InferenceRequestId(Request*, const char**);
extern Error* TRITONSERVER_InferenceRequestSetFlags(Request*, uint32_t);
extern Error* TRITONSERVER_InferenceRequestFlags(Request*, uint32_t*);
extern Error* TRITONSERVER_InferenceRequestSetCorrelationId(Request*, uint64_t);
extern Error* TRITONSERVER_InferenceRequestCorrelationId(Request*, uint64_t*);
extern Error* TRITONSERVER_InferenceRequestCorrelationIdString(Request*, const char**);
extern Error* TRITONSERVER_InferenceRequestSetPriorityUInt64(Request*, uint64_t);
extern Error* TRITONSERVER_InferenceRequestPriority(Request*, uint32_t*);
extern Error* TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(Request*, uint64_t);
extern Error* TRITONSERVER_InferenceRequestTimeoutMicroseconds(Request*, uint64_t*);
extern Error* TRITONSERVER_InferenceRequestSetStringParameter(Request*, const char*,
                                                              const char*);
extern Error* TRITONSERVER_InferenceRequestSetIntParameter(Request*, const char*, int64_t);
extern Error* TRITONSERVER_InferenceRequestSetBoolParameter(Request*, const char*, bool);
extern Error* TRITONSERVER_InferenceRequestAddInput(Request*, const char*, int,
                                                    const int64_t*, uint64_t);
extern Error* TRITONSERVER_InferenceRequestAppendInputData(Request*, const char*,
                                                           const void*, size_t, int, int64_t);
extern Error* TRITONSERVER_InferenceRequestRemoveAllInputData(Request*, const char*);
extern Error* TRITONSERVER_InferenceRequestAddRequestedOutput(Request*, const char*);
extern Error* TRITONSERVER_InferenceRequestSetReleaseCallback(Request*, RequestReleaseFn,
                                                              void*);
extern Error* TRITONSERVER_InferenceRequestSetResponseCallback(Request*, Allocator*, void*,
                                                               ResponseFn, void*);
extern Error* TRITONSERVER_InferenceResponseDelete(Response*);
extern Error* TRITONSERVER_InferenceResponseError(Response*);
extern Error* TRITONSERVER_InferenceResponseModel(Response*, const char**, int64_t*);
extern Error* TRITONSERVER_InferenceResponseId(Response*, const char**);
extern Error* TRITONSERVER_InferenceResponseOutputCount(Response*, uint32_t*);
extern Error* TRITONSERVER_InferenceResponseOutput(Response*, uint32_t, const char**, int*,
                                                   const int64_t**, uint64_t*,
                                                   const void**, size_t*, int*,
                                                   int64_t*, void**);
extern Error* TRITONSERVER_InferenceRequestCancel(Request*);
extern Error* TRITONSERVER_InferenceRequestIsCancelled(Request*, bool*);
extern Error* TRITONSERVER_InferenceTraceNew(void**, int, uint64_t, void*, void*, void*);
extern Error* TRITONSERVER_InferenceTraceDelete(void*);

enum { INVALID_ARG = 3, UNSUPPORTED = 5, NOT_FOUND = 2 };
enum { TYPE_FP32 = 11, MEMORY_CPU = 0, MEMORY_GPU = 2 };

static int failures = 0;
#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
      failures++;                                                     \
    }                                                                 \
  } while (0)

/* Succeeds or reports the error and stops. */
static void ok(Error* err, const char* what) {
  if (err != NULL) {
    fprintf(stderr, "FAIL %s: %s\n", what, TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
    exit(1);
  }
}

/* Expects an error with `code`; its message must contain `fragment`. */
static void fails(Error* err, int code, const char* fragment, const char* what) {
  if (err == NULL) {
    CHECK(0, "%s: expected an error", what);
    return;
  }
  CHECK(TRITONSERVER_ErrorCode(err) == code, "%s: code %d, expected %d (%s)", what,
        TRITONSERVER_ErrorCode(err), code, TRITONSERVER_ErrorMessage(err));
  CHECK(strstr(TRITONSERVER_ErrorMessage(err), fragment) != NULL,
        "%s: message '%s' lacks '%s'", what, TRITONSERVER_ErrorMessage(err), fragment);
  TRITONSERVER_ErrorDelete(err);
}

/* The message's JSON, as a NUL-terminated copy; the message is deleted. */
static char* json_of(Message* message) {
  const char* base;
  size_t size;
  ok(TRITONSERVER_MessageSerializeToJson(message, &base, &size), "serialize");
  char* copy = malloc(size + 1);
  memcpy(copy, base, size);
  copy[size] = 0;
  ok(TRITONSERVER_MessageDelete(message), "message delete");
  return copy;
}

static int allocations = 0, releases = 0;
/* Whether the allocator says its buffers are GPU 0's memory (they are host memory: the
 * CUDA driver test double's device memory is host memory). */
static int answer_gpu = 0;

static Error* alloc_fn(Allocator* a, const char* name, size_t size, int type, int64_t id,
                       void* userp, void** buffer, void** buffer_userp, int* actual_type,
                       int64_t* actual_id) {
  (void)a; (void)type; (void)id;
  CHECK(userp == (void*)&allocations, "alloc userp is the allocator userp");
  *buffer = size == 0 ? NULL : malloc(size);
  *buffer_userp = strdup(name);
  *actual_type = answer_gpu ? MEMORY_GPU : MEMORY_CPU;
  *actual_id = 0;
  allocations++;
  return NULL;
}

static Error* release_fn(Allocator* a, void* buffer, void* buffer_userp, size_t size,
                         int type, int64_t id) {
  (void)a; (void)size; (void)type; (void)id;
  free(buffer);
  free(buffer_userp);
  releases++;
  return NULL;
}

/* One response at a time: the callback hands it over and signals. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static Response* delivered = NULL;
static int released = 0, order_ok = 1;

static void response_fn(Response* response, uint32_t flags, void* userp) {
  CHECK(flags == 1, "response flags %u", flags);
  CHECK(userp == (void*)&delivered, "response userp");
  pthread_mutex_lock(&lock);
  delivered = response;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
}

static void release_request(Request* request, uint32_t flags, void* userp) {
  (void)request;
  CHECK(flags == 1, "release flags %u", flags);
  CHECK(userp == (void*)&released, "release userp");
  pthread_mutex_lock(&lock);
  if (delivered == NULL) order_ok = 0; /* Triton answers before it releases */
  released++;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
}

/* Submits `request` and waits for its response and its release. */
static Response* infer(Server* server, Request* request) {
  pthread_mutex_lock(&lock);
  delivered = NULL;
  int before = released;
  pthread_mutex_unlock(&lock);
  ok(TRITONSERVER_ServerInferAsync(server, request, NULL), "infer async");
  pthread_mutex_lock(&lock);
  while (delivered == NULL || released == before) pthread_cond_wait(&changed, &lock);
  Response* response = delivered;
  pthread_mutex_unlock(&lock);
  return response;
}

static Request* add_sub_request(Server* server, const char* model, Allocator* allocator,
                                const float* in0, const float* in1) {
  Request* request;
  ok(TRITONSERVER_InferenceRequestNew(&request, server, model, -1), "request new");
  const int64_t shape[2] = {1, 4};
  ok(TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, shape, 2), "in0");
  ok(TRITONSERVER_InferenceRequestAddInput(request, "INPUT1", TYPE_FP32, shape, 2), "in1");
  ok(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in0, 16, MEMORY_CPU, 0),
     "data0");
  /* Two chunks for INPUT1: appended data is concatenated. */
  ok(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT1", in1, 8, MEMORY_CPU, 0),
     "data1a");
  ok(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT1", in1 + 2, 8, MEMORY_CPU,
                                                  0),
     "data1b");
  ok(TRITONSERVER_InferenceRequestSetReleaseCallback(request, release_request, &released),
     "release cb");
  ok(TRITONSERVER_InferenceRequestSetResponseCallback(request, allocator, &allocations,
                                                      response_fn, &delivered),
     "response cb");
  return request;
}

static void check_sum_diff(Response* response, const float* in0, const float* in1) {
  ok(TRITONSERVER_InferenceResponseError(response), "response error");
  uint32_t count = 0;
  ok(TRITONSERVER_InferenceResponseOutputCount(response, &count), "output count");
  CHECK(count == 2, "output count %u", count);
  for (uint32_t i = 0; i < count; i++) {
    const char* name; int datatype; const int64_t* shape; uint64_t dims;
    const void* base; size_t size; int memtype; int64_t memid; void* userp;
    ok(TRITONSERVER_InferenceResponseOutput(response, i, &name, &datatype, &shape, &dims,
                                            &base, &size, &memtype, &memid, &userp),
       "output");
    CHECK(datatype == TYPE_FP32 && dims == 2 && shape[0] == 1 && shape[1] == 4,
          "output %s type/shape", name);
    CHECK(size == 16 && memtype == (answer_gpu ? MEMORY_GPU : MEMORY_CPU), "output %s size %zu",
          name, size);
    CHECK(userp != NULL && strcmp((const char*)userp, name) == 0, "buffer userp of %s", name);
    const float* out = base;
    int is_sum = strcmp(name, "OUTPUT0") == 0;
    for (int k = 0; k < 4; k++) {
      float want = is_sum ? in0[k] + in1[k] : in0[k] - in1[k];
      CHECK(out[k] == want, "%s[%d] = %f, want %f", name, k, out[k], want);
    }
  }
  const char* model; int64_t version;
  ok(TRITONSERVER_InferenceResponseModel(response, &model, &version), "response model");
  CHECK(version == 1, "response version %lld", (long long)version);
  fails(TRITONSERVER_InferenceResponseOutput(response, 7, NULL, NULL, NULL, NULL, NULL, NULL,
                                             NULL, NULL, NULL),
        INVALID_ARG, "out of bounds index 7: response has 2 outputs", "output index");
}

static void options_checks(Options* options) {
  fails(TRITONSERVER_ServerOptionsSetModelControlMode(options, 7), INVALID_ARG,
        "unknown control mode '7'", "bad control mode");
  fails(TRITONSERVER_ServerOptionsSetRateLimiterMode(options, 9), INVALID_ARG,
        "unknown rate limit mode '9'", "bad rate limiter mode");
  fails(TRITONSERVER_ServerOptionsSetServerId(NULL, "x"), INVALID_ARG, "must not be null",
        "null options");
  fails(TRITONSERVER_ServerOptionsSetServerId(options, NULL), INVALID_ARG,
        "must not be null", "null id");
  ok(TRITONSERVER_ServerOptionsSetLogVerbose(options, 1), "log verbose (ignored)");
  ok(TRITONSERVER_ServerOptionsSetBackendDirectory(options, "/opt/tritonserver/backends"),
     "backend dir (ignored)");
  ok(TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(options, 6.0),
     "compute capability (ignored)");
  ok(TRITONSERVER_ServerOptionsSetExitTimeout(options, 5), "exit timeout");
}

static void metadata_checks(Server* server) {
  bool flag = false;
  ok(TRITONSERVER_ServerIsLive(server, &flag), "live");
  CHECK(flag, "server live");
  ok(TRITONSERVER_ServerIsReady(server, &flag), "ready");
  CHECK(flag, "server ready");
  fails(TRITONSERVER_ServerIsReady(server, NULL), INVALID_ARG, "must not be null",
        "ready null");
  ok(TRITONSERVER_ServerModelIsReady(server, "add_sub", 1, &flag), "model ready");
  CHECK(flag, "add_sub ready");
  ok(TRITONSERVER_ServerModelIsReady(server, "no_such_model", -1, &flag), "unknown model");
  CHECK(!flag, "an unknown model is not ready (Triton 2.51: no error)");

  Message* message;
  ok(TRITONSERVER_ServerMetadata(server, &message), "server metadata");
  char* json = json_of(message);
  CHECK(strstr(json, "\"name\":\"inproc_test\"") != NULL, "server metadata: %s", json);
  free(json);
  ok(TRITONSERVER_ServerModelMetadata(server, "add_sub", -1, &message), "model metadata");
  json = json_of(message);
  CHECK(strstr(json, "\"versions\":[\"1\"]") && strstr(json, "\"INPUT0\""),
        "model metadata: %s", json);
  free(json);
  ok(TRITONSERVER_ServerModelConfig(server, "add_sub", 1, 1, &message), "model config");
  json = json_of(message);
  CHECK(strstr(json, "\"max_batch_size\":8") != NULL, "model config: %s", json);
  free(json);
  fails(TRITONSERVER_ServerModelConfig(server, "add_sub", 1, 2, &message), INVALID_ARG,
        "not supported", "config version 2");
  uint32_t flags = 0;
  ok(TRITONSERVER_ServerModelBatchProperties(server, "add_sub", -1, &flags, NULL), "batch");
  CHECK(flags == 2, "batch flags %u (FIRST_DIM)", flags);
  ok(TRITONSERVER_ServerModelTransactionProperties(server, "add_sub", -1, &flags, NULL),
     "txn");
  CHECK(flags == 1, "txn flags %u (ONE_TO_ONE)", flags);
}

static void repository_checks(Server* server) {
  Message* message;
  ok(TRITONSERVER_ServerModelIndex(server, 1, &message), "ready index");
  char* json = json_of(message);
  CHECK(strstr(json, "add_sub_cached") == NULL, "cached model not loaded yet: %s", json);
  free(json);
  ok(TRITONSERVER_ServerModelIndex(server, 0, &message), "index");
  json = json_of(message);
  CHECK(strstr(json, "\"name\":\"add_sub_cached\"") != NULL, "full index: %s", json);
  free(json);
  ok(TRITONSERVER_ServerLoadModel(server, "add_sub_cached"), "load add_sub_cached");
  ok(TRITONSERVER_ServerModelIndex(server, 1, &message), "ready index after load");
  json = json_of(message);
  /* Triton's field order: name, version, state. */
  CHECK(strstr(json, "{\"name\":\"add_sub_cached\",\"version\":\"1\",\"state\":\"READY\"}"),
        "ready index: %s", json);
  free(json);
  fails(TRITONSERVER_ServerLoadModelWithParameters(server, "add_sub", NULL, 2), INVALID_ARG,
        "load parameters are not provided while parameter count is non-zero", "null params");
  int64_t number = 3;
  Parameter* param = TRITONSERVER_ParameterNew("config", 1 /* INT */, &number);
  const Parameter* params[1] = {param};
  fails(TRITONSERVER_ServerLoadModelWithParameters(server, "add_sub", params, 1), INVALID_ARG,
        "'config' parameter must be a string", "non-string config");
  TRITONSERVER_ParameterDelete(param);
  CHECK(TRITONSERVER_ParameterNew("x", 4 /* BYTES */, &number) == NULL,
        "ParameterNew refuses BYTES");
  CHECK(strcmp(TRITONSERVER_ParameterTypeString(2), "BOOL") == 0, "parameter type string");
}

static void request_checks(Server* server) {
  Request* request;
  Error* unknown = TRITONSERVER_InferenceRequestNew(&request, server, "no_such_model", -1);
  CHECK(unknown != NULL, "request for an unknown model");
  if (unknown) TRITONSERVER_ErrorDelete(unknown);
  ok(TRITONSERVER_InferenceRequestNew(&request, server, "add_sub", -1), "request new");
  ok(TRITONSERVER_InferenceRequestSetId(request, "req-7"), "set id");
  const char* id;
  ok(TRITONSERVER_InferenceRequestId(request, &id), "id");
  CHECK(strcmp(id, "req-7") == 0, "id %s", id);
  ok(TRITONSERVER_InferenceRequestSetFlags(request, 3), "flags");
  uint32_t flags;
  ok(TRITONSERVER_InferenceRequestFlags(request, &flags), "get flags");
  CHECK(flags == 3, "flags %u", flags);
  ok(TRITONSERVER_InferenceRequestSetCorrelationId(request, 42), "corr id");
  uint64_t corr;
  ok(TRITONSERVER_InferenceRequestCorrelationId(request, &corr), "get corr id");
  CHECK(corr == 42, "corr id %llu", (unsigned long long)corr);
  const char* corr_text;
  fails(TRITONSERVER_InferenceRequestCorrelationIdString(request, &corr_text), INVALID_ARG,
        "given request's correlation id is not a string", "corr id string");
  /* As in Triton, a priority beyond the model's priority levels becomes its default
     level: 0 for add_sub, which has none. */
  ok(TRITONSERVER_InferenceRequestSetPriorityUInt64(request, 1ull << 40), "priority");
  uint32_t priority = 7;
  ok(TRITONSERVER_InferenceRequestPriority(request, &priority), "get priority");
  CHECK(priority == 0, "priority %u", priority);
  ok(TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(request, 1000), "timeout");
  uint64_t timeout;
  ok(TRITONSERVER_InferenceRequestTimeoutMicroseconds(request, &timeout), "get timeout");
  CHECK(timeout == 1000, "timeout %llu", (unsigned long long)timeout);
  ok(TRITONSERVER_InferenceRequestSetStringParameter(request, "s", "v"), "string param");
  ok(TRITONSERVER_InferenceRequestSetIntParameter(request, "i", -5), "int param");
  ok(TRITONSERVER_InferenceRequestSetBoolParameter(request, "b", true), "bool param");
  const int64_t shape[2] = {1, 4};
  ok(TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, shape, 2), "input");
  fails(TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, shape, 2),
        INVALID_ARG, "[request id: req-7] input 'INPUT0' already exists in request",
        "duplicate input");
  float data[4] = {0};
  fails(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUTX", data, 16, MEMORY_CPU,
                                                     0),
        INVALID_ARG, "input 'INPUTX' does not exist in request", "append to unknown input");
  fails(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", data, 16, MEMORY_GPU,
                                                     0),
        UNSUPPORTED, "data in GPU memory: CUDA is not available", "GPU input");
  ok(TRITONSERVER_InferenceRequestAddRequestedOutput(request, "OUTPUT0"), "requested output");
  fails(TRITONSERVER_InferenceRequestAddRequestedOutput(request, "OUTPUT0"), INVALID_ARG,
        "output 'OUTPUT0' already exists in request", "duplicate output");
  fails(TRITONSERVER_ServerInferAsync(server, request, NULL), INVALID_ARG,
        "no response callback", "infer without callback");
  /* A traced submission refused before it runs leaves the trace with the caller. */
  void* trace = NULL;
  ok(TRITONSERVER_InferenceTraceNew(&trace, 4, 0, NULL, NULL, NULL), "trace new");
  fails(TRITONSERVER_ServerInferAsync(server, request, trace), INVALID_ARG,
        "no response callback", "infer with trace without callback");
  ok(TRITONSERVER_InferenceTraceDelete(trace), "trace delete");
  fails(TRITONSERVER_InferenceTraceNew(NULL, 4, 0, NULL, NULL, NULL), INVALID_ARG,
        "trace must not be null", "trace new without a place for it");
  fails(TRITONSERVER_InferenceRequestSetId(NULL, "x"), INVALID_ARG, "must not be null",
        "null request");
  ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");
}

/* Outputs the allocator puts in GPU memory and inputs in GPU memory go through the CUDA
 * driver: with the test double (`fake`) they are written and read, without a driver the
 * output is refused with why and its buffer goes back to the allocator. */
static void gpu_checks(Server* server, Allocator* allocator, int fake) {
  const float in0[4] = {1, 2, 3, 4}, in1[4] = {10, 20, 30, 40};
  answer_gpu = 1;
  int releases_before = releases;
  Request* request = add_sub_request(server, "add_sub", allocator, in0, in1);
  Response* response = infer(server, request);
  if (fake) {
    check_sum_diff(response, in0, in1);
  } else {
    Error* err = TRITONSERVER_InferenceResponseError(response);
    CHECK(err != NULL && TRITONSERVER_ErrorCode(err) == UNSUPPORTED &&
              strstr(TRITONSERVER_ErrorMessage(err),
                     "the allocator returned GPU memory, which could not be written: CUDA is "
                     "not available") != NULL,
          "GPU output without CUDA: %s", err ? TRITONSERVER_ErrorMessage(err) : "no error");
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    CHECK(releases > releases_before, "the unusable buffer went back to the allocator");
  }
  ok(TRITONSERVER_InferenceResponseDelete(response), "response delete");
  ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");
  answer_gpu = 0;
  if (!fake) return;
  /* Input data "on GPU 0" is read through the driver. */
  const float in2[4] = {7, 7, 7, 7};
  request = add_sub_request(server, "add_sub", allocator, in0, in1);
  ok(TRITONSERVER_InferenceRequestRemoveAllInputData(request, "INPUT0"), "remove data");
  ok(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in2, 16, MEMORY_GPU, 0),
     "GPU input data");
  response = infer(server, request);
  check_sum_diff(response, in2, in1);
  ok(TRITONSERVER_InferenceResponseDelete(response), "response delete");
  ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");
}

/* Deleted while the process exits, as perf_analyzer's in-process mode deletes its server
 * from a static destructor: glibc has run the main thread's thread-local destructors
 * (the runtime context among them) by then. */
static Server* exiting_server;

static void delete_at_exit(void) {
  Error* err = TRITONSERVER_ServerDelete(exiting_server);
  if (err != NULL) {
    fprintf(stderr, "inprocess: server delete at exit failed\n");
    _exit(1);
  }
}

/* With the CUDA driver test double: only the GPU memory paths. */
static int fake_gpu_main(const char* repository) {
  Options* options;
  ok(TRITONSERVER_ServerOptionsNew(&options), "options new");
  ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, repository), "repository");
  ok(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2 /* EXPLICIT */), "mode");
  ok(TRITONSERVER_ServerOptionsSetStartupModel(options, "add_sub"), "startup model");
  Server* server;
  ok(TRITONSERVER_ServerNew(&server, options), "server new");
  ok(TRITONSERVER_ServerOptionsDelete(options), "options delete");
  Allocator* allocator;
  ok(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL), "allocator");
  gpu_checks(server, allocator, 1);
  ok(TRITONSERVER_ResponseAllocatorDelete(allocator), "allocator delete");
  ok(TRITONSERVER_ServerDelete(server), "server delete");
  if (failures != 0) {
    fprintf(stderr, "inprocess: %d failure(s)\n", failures);
    return 1;
  }
  printf("inprocess: OK\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[2], "fake-gpu") == 0) return fake_gpu_main(argv[1]);
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_REPOSITORY [fake-gpu]\n", argv[0]);
    return 2;
  }
  uint32_t major, minor;
  ok(TRITONSERVER_ApiVersion(&major, &minor), "api version");
  CHECK(major == 1 && minor == 34, "api version %u.%u", major, minor);

  Options* options;
  ok(TRITONSERVER_ServerOptionsNew(&options), "options new");
  ok(TRITONSERVER_ServerOptionsSetServerId(options, "inproc_test"), "server id");
  ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, argv[1]), "repository");
  ok(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2 /* EXPLICIT */), "mode");
  ok(TRITONSERVER_ServerOptionsSetStartupModel(options, "add_sub"), "startup model");
  ok(TRITONSERVER_ServerOptionsSetStrictModelConfig(options, true), "strict");
  ok(TRITONSERVER_ServerOptionsSetCacheConfig(options, "local", "{\"size\":\"1048576\"}"),
     "cache config");
  options_checks(options);
  Server* server;
  ok(TRITONSERVER_ServerNew(&server, options), "server new");
  ok(TRITONSERVER_ServerOptionsDelete(options), "options delete");

  metadata_checks(server);
  repository_checks(server);
  request_checks(server);

  Allocator* allocator;
  ok(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL), "allocator");

  const float in0[4] = {1, 2, 3, 4}, in1[4] = {10, 20, 30, 40};
  Request* request = add_sub_request(server, "add_sub", allocator, in0, in1);
  ok(TRITONSERVER_InferenceRequestSetId(request, "first"), "id");
  bool cancelled = true;
  fails(TRITONSERVER_InferenceRequestCancel(request), 1 /* INTERNAL */,
        "It is not possible to cancel an inference request before calling "
        "TRITONSERVER_InferAsync.",
        "cancel before submission");
  fails(TRITONSERVER_InferenceRequestIsCancelled(request, &cancelled), 1,
        "It is not possible to query cancellation status", "is cancelled before submission");
  Response* response = infer(server, request);
  ok(TRITONSERVER_InferenceRequestIsCancelled(request, &cancelled), "is cancelled");
  CHECK(!cancelled, "not cancelled");
  check_sum_diff(response, in0, in1);
  const char* id;
  ok(TRITONSERVER_InferenceResponseId(response, &id), "response id");
  CHECK(strcmp(id, "first") == 0, "response id %s", id);
  ok(TRITONSERVER_InferenceResponseDelete(response), "response delete");
  CHECK(allocations == 2 && releases == 2, "allocations %d releases %d", allocations,
        releases);

  /* The request is reusable after its release: new data, same object. */
  const float in2[4] = {5, 5, 5, 5};
  ok(TRITONSERVER_InferenceRequestRemoveAllInputData(request, "INPUT0"), "remove data");
  ok(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in2, 16, MEMORY_CPU, 0),
     "new data");
  response = infer(server, request);
  check_sum_diff(response, in2, in1);
  ok(TRITONSERVER_InferenceResponseDelete(response), "response delete");
  ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");

  /* A wrong shape is refused by ServerInferAsync itself; the caller keeps the request. */
  ok(TRITONSERVER_InferenceRequestNew(&request, server, "add_sub", -1), "request new");
  const int64_t bad_shape[2] = {1, 5};
  ok(TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TYPE_FP32, bad_shape, 2), "in");
  ok(TRITONSERVER_InferenceRequestSetResponseCallback(request, allocator, &allocations,
                                                      response_fn, &delivered),
     "response cb");
  fails(TRITONSERVER_ServerInferAsync(server, request, NULL), INVALID_ARG, "INPUT0",
        "bad shape");
  ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");

  /* The response cache: the second identical request is a hit. */
  for (int i = 0; i < 2; i++) {
    request = add_sub_request(server, "add_sub_cached", allocator, in0, in1);
    response = infer(server, request);
    check_sum_diff(response, in0, in1);
    ok(TRITONSERVER_InferenceResponseDelete(response), "response delete");
    ok(TRITONSERVER_InferenceRequestDelete(request), "request delete");
  }
  Message* message;
  ok(TRITONSERVER_ServerModelStatistics(server, "add_sub_cached", -1, &message), "stats");
  char* json = json_of(message);
  CHECK(strstr(json, "\"cache_hit\":{\"count\":1,") != NULL, "cache hit in stats: %s", json);
  CHECK(strstr(json, "\"cache_miss\":{\"count\":1,") != NULL, "cache miss in stats: %s",
        json);
  free(json);
  fails(TRITONSERVER_ServerModelStatistics(server, "no_such_model", -1, &message),
        INVALID_ARG, "requested model 'no_such_model' is not available", "stats unknown");

  ok(TRITONSERVER_ServerUnloadModel(server, "add_sub_cached"), "unload");
  bool ready = true;
  ok(TRITONSERVER_ServerModelIsReady(server, "add_sub_cached", -1, &ready), "unloaded");
  CHECK(!ready, "an unloaded model is not ready");

  gpu_checks(server, allocator, 0);
  CHECK(order_ok, "every response came before its request's release");
  ok(TRITONSERVER_ResponseAllocatorDelete(allocator), "allocator delete");
  ok(TRITONSERVER_ServerStop(server), "stop");
  fails(TRITONSERVER_ServerIsReady(server, &ready), 4 /* UNAVAILABLE */, "Server exiting",
        "ready after stop");
  CHECK(!ready, "not ready after stop");
  fails(TRITONSERVER_ServerModelIsReady(server, "add_sub", -1, &ready), 4, "Server not ready",
        "model ready after stop");
  ok(TRITONSERVER_ServerDelete(server), "server delete");

  ok(TRITONSERVER_ServerOptionsNew(&options), "options new");
  ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, argv[1]), "repository");
  ok(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2 /* EXPLICIT */), "mode");
  ok(TRITONSERVER_ServerNew(&exiting_server, options), "server new");
  ok(TRITONSERVER_ServerOptionsDelete(options), "options delete");
  CHECK(atexit(delete_at_exit) == 0, "atexit");
  if (failures != 0) {
    fprintf(stderr, "inprocess: %d failure(s)\n", failures);
    return 1;
  }
  printf("inprocess: OK\n");
  return 0;
}
