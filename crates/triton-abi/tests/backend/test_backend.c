/* Nereid's own TRITONBACKEND test backend, declared from the ABI (no Triton header),
 * loaded by the nereid binary from --backend-directory like any Triton backend.
 * tests/python/test_hosted_backend.py builds it and drives it with tritonclient.
 *
 * The model's `parameters { key: "mode" }` picks what execute does:
 *   echo       OUT = IN for each requested output; META (INT64 [5]) = correlation id,
 *              flags, parameter count, the INT parameter "add" (0 if absent), timeout;
 *              a STRING parameter "note" is answered with response parameters: "note"
 *              (echoed), "count" (the parameter count), "echoed" (true), "ratio" (0.5);
 *              reports request and batch statistics; uses the memory manager.
 *   decoupled  IN[0] (INT32) responses OUT = 0..n-1 from another thread, after execute
 *              returned and the request was released, then the final flag alone; each
 *              reports response statistics (response i: start 1000 * (i + 1), outputs
 *              written from +40, end +60; the final flag: an empty response of 7 ns).
 *   error      each request answered with an INVALID_ARG error response.
 *   state      each request answered with the error of TRITONBACKEND_StateNew for a
 *              state named UNDECLARED (the model declares none).
 *   accumulate a sequence model whose INT32 [1] state STATE_IN/STATE_OUT is declared
 *              use_same_buffer_for_input_output: adds IN to the state in place through
 *              TRITONBACKEND_StateBuffer, never calls TRITONBACKEND_StateUpdate; OUT is
 *              the new state, SAME (INT32 [1]) 1 when the state buffer is the STATE_IN
 *              input's own buffer.
 *   fail       execute itself fails (the server answers every request).
 *   silent     requests released without any response.
 *   where      asks for IN's buffer preferring GPU memory and answers OUT = its bytes
 *              (read in place: the fake CUDA driver's device memory is host memory),
 *              asking for OUT's buffer preferring GPU memory too, and PLACE (INT64 [4]) =
 *              the memory type and device id it was given for IN, then for OUT.
 *   late       echo, 400 ms after execute is called (a client acts meanwhile).
 *   unallocated each request answered with OUT (FP32 [2]) whose buffer is never asked
 *              for (as Triton 2.51's python stub does under numpy 2).
 *   bls        OUT = OUTPUT0 of model `add_sub` for INPUT0 = INPUT1 = IN, through
 *              TRITONSERVER_ServerInferAsync on the model's server.
 *   auto       auto-completes IN/OUT (FP32 [-1]) when the config has no inputs.
 *   query      asks where OUT will go (TRITONBACKEND_RequestOutputBufferProperties with
 *              16 bytes, CPU_PINNED device 1 preferred) and answers OUT (INT64 [3]) = the
 *              memory type and device id it was told and the byte size it passed; the
 *              query's error, if any, is the response's.
 *   gpu_scratch IN (INT64 [k]) byte sizes: allocates each from the memory manager as GPU
 *              memory on the instance's device, all held at once, fills each with its
 *              index (the fake CUDA driver's device memory is host memory: tests only),
 *              checks none was overwritten, frees them; OUT (INT64 [k]) = 0 for each
 *              that held, -1 overwritten, else the allocation's TRITONSERVER error code,
 *              whose message is logged ("gpu_scratch <size>: <message>").
 * `--backend-config nereid_test,preferred=K:C[:G];...` makes the backend declare preferred
 * instance groups: kind K (TRITONSERVER_InstanceGroupKind), count C, optionally GPU G.
 * Backend, model and instance state objects are kept and checked; instance init fails
 * for mode "fail_instance", model init for "fail_model". Instances are CPU instances,
 * except for mode "placed", whose instances may be on any device and log where they are
 * ("placed <name> kind <kind> device <id>"), and whose model logs its instance groups as
 * it initializes ("placed model <name> groups ..."), for the GPU placement tests.
 * Build flags: -DNO_EXECUTE leaves out TRITONBACKEND_ModelInstanceExecute;
 * -DNEEDS_NEWER_API makes initialize ask for API 1.99. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"

#define RETURN_IF_ERROR(e)     \
  do {                         \
    Error* err__ = (e);        \
    if (err__ != NULL) return err__; \
  } while (0)

static uint64_t now_ns(void) { return 1000; }

typedef struct {
  char mode[32];
  char name[128];
} ModelState;

typedef struct {
  const char* magic;
} BackendState;

static const char* BACKEND_MAGIC = "nereid-test-backend";

/* The `mode` parameter's string_value in the configuration JSON (or "echo"). */
static void read_mode(const char* json, char* mode, size_t size) {
  snprintf(mode, size, "echo");
  const char* key = strstr(json, "\"mode\"");
  if (key == NULL) return;
  const char* value = strstr(key, "\"string_value\":\"");
  if (value == NULL) return;
  value += strlen("\"string_value\":\"");
  size_t n = 0;
  while (value[n] != '"' && value[n] != '\0' && n + 1 < size) n++;
  memcpy(mode, value, n);
  mode[n] = '\0';
}

Error* TRITONBACKEND_Initialize(Backend* backend) {
  uint32_t major, minor;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
#ifdef NEEDS_NEWER_API
  if (major != 1 || minor < 99)
    return TRITONSERVER_ErrorNew(UNSUPPORTED,
                                 "Triton backend API version does not support this backend");
#endif
  if (major != 1 || minor < 19)
    return TRITONSERVER_ErrorNew(UNSUPPORTED, "backend needs TRITONBACKEND API 1.19");
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_BackendName(backend, &name));
  Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  if (strstr(json, "\"cmdline\"") == NULL || strstr(json, "\"backend-directory\"") == NULL)
    return TRITONSERVER_ErrorNew(INTERNAL, "backend config lacks cmdline settings");
  if (strstr(json, "\"refuse\":\"yes\"") != NULL)
    return TRITONSERVER_ErrorNew(INVALID_ARG, "refused by --backend-config");
  int kind;
  const char* location;
  RETURN_IF_ERROR(TRITONBACKEND_BackendArtifacts(backend, &kind, &location));
  if (kind != 0 || strstr(location, name) == NULL)
    return TRITONSERVER_ErrorNew(INTERNAL, "artifacts are not the backend directory");
  BackendState* state = malloc(sizeof(BackendState));
  state->magic = BACKEND_MAGIC;
  RETURN_IF_ERROR(TRITONBACKEND_BackendSetState(backend, state));
  char line[256];
  snprintf(line, sizeof(line), "test backend '%s' initialized from %s", name, location);
  TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, line);
  return NULL;
}

Error* TRITONBACKEND_GetBackendAttribute(Backend* backend, BackendAttribute* attributes) {
  Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  const char* key = "\"preferred\":\"";
  const char* at = strstr(json, key);
  if (at == NULL) return NULL;
  at += strlen(key);
  while (*at != '"' && *at != '\0') {
    int kind, count, used = 0;
    if (sscanf(at, "%d:%d%n", &kind, &count, &used) != 2)
      return TRITONSERVER_ErrorNew(INVALID_ARG, "preferred: K:C[:G];...");
    at += used;
    uint64_t gpu = 0;
    int has_gpu = 0;
    if (*at == ':') {
      unsigned long long id;
      if (sscanf(at + 1, "%llu%n", &id, &used) != 1)
        return TRITONSERVER_ErrorNew(INVALID_ARG, "preferred: K:C[:G];...");
      gpu = id;
      has_gpu = 1;
      at += 1 + used;
    }
    RETURN_IF_ERROR(TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
        attributes, kind, (uint64_t)count, has_gpu ? &gpu : NULL, (uint64_t)has_gpu));
    if (*at == ';') at++;
  }
  return NULL;
}

Error* TRITONBACKEND_Finalize(Backend* backend) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_BackendState(backend, &state));
  free(state);
  return NULL;
}

Error* TRITONBACKEND_ModelInitialize(Model* model) {
  const char* name;
  uint64_t version;
  int kind;
  const char* repository;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  RETURN_IF_ERROR(TRITONBACKEND_ModelVersion(model, &version));
  RETURN_IF_ERROR(TRITONBACKEND_ModelRepository(model, &kind, &repository));
  if (version < 1 || strstr(repository, name) == NULL)
    return TRITONSERVER_ErrorNew(INTERNAL, "wrong version or repository");
  Backend* backend;
  void* backend_state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelBackend(model, &backend));
  RETURN_IF_ERROR(TRITONBACKEND_BackendState(backend, &backend_state));
  if (backend_state == NULL || ((BackendState*)backend_state)->magic != BACKEND_MAGIC)
    return TRITONSERVER_ErrorNew(INTERNAL, "backend state lost");
  Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  ModelState* state = calloc(1, sizeof(ModelState));
  read_mode(json, state->mode, sizeof(state->mode));
  snprintf(state->name, sizeof(state->name), "%s", name);
  if (strcmp(state->mode, "placed") == 0) {
    /* The instance groups as the model sees them when it initializes. */
    const char* groups = strstr(json, "\"instance_group\"");
    char line[320];
    snprintf(line, sizeof(line), "placed model %s groups %.240s", name, groups ? groups : "none");
    TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, line);
  }
  bool auto_complete;
  RETURN_IF_ERROR(TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete));
  if (strcmp(state->mode, "auto") == 0 && auto_complete && strstr(json, "\"input\":[{") == NULL) {
    const char* completed =
        "{\"name\":\"%s\",\"backend\":\"nereid_test\",\"max_batch_size\":0,"
        "\"parameters\":{\"mode\":{\"string_value\":\"echo\"}},"
        "\"input\":[{\"name\":\"IN\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
        "\"output\":[{\"name\":\"OUT\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}]}";
    char text[512];
    snprintf(text, sizeof(text), completed, name);
    Message* message;
    RETURN_IF_ERROR(TRITONSERVER_MessageNewFromSerializedJson(&message, text, strlen(text)));
    RETURN_IF_ERROR(TRITONBACKEND_ModelSetConfig(model, 1, message));
    TRITONSERVER_MessageDelete(message);
  }
  TRITONSERVER_MessageDelete(config);
  if (strcmp(state->mode, "fail_model") == 0) {
    free(state);
    return TRITONSERVER_ErrorNew(INVALID_ARG, "model initialization failed on purpose");
  }
  return TRITONBACKEND_ModelSetState(model, state);
}

Error* TRITONBACKEND_ModelFinalize(Model* model) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  free(state);
  return NULL;
}

Error* TRITONBACKEND_ModelInstanceInitialize(Instance* instance) {
  const char* name;
  int kind;
  int32_t device;
  Model* model;
  void* model_state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceName(instance, &name));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceDeviceId(instance, &device));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &model_state));
  if (model_state == NULL)
    return TRITONSERVER_ErrorNew(INTERNAL, "no model state");
  if (strcmp(((ModelState*)model_state)->mode, "gpu_scratch") == 0 ||
      strcmp(((ModelState*)model_state)->mode, "where") == 0) {
    /* Any device: the pool and GPU input tests use it. */
  } else if (strcmp(((ModelState*)model_state)->mode, "placed") == 0) {
    /* Says where the server placed it: the GPU placement tests read the log. */
    char line[160];
    snprintf(line, sizeof(line), "placed %s kind %d device %d", name, kind, (int)device);
    TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, line);
  } else if (kind != 1 /* CPU */) {
    return TRITONSERVER_ErrorNew(INTERNAL, "unexpected instance kind");
  }
  if (strcmp(((ModelState*)model_state)->mode, "fail_instance") == 0)
    return TRITONSERVER_ErrorNew(INVALID_ARG, "instance initialization failed on purpose");
  return TRITONBACKEND_ModelInstanceSetState(instance, model_state);
}

Error* TRITONBACKEND_ModelInstanceFinalize(Instance* instance) {
  (void)instance;
  return NULL;
}

/* Adds output `name` to `response` holding a copy of `size` bytes. */
/* Adds output `name` holding `size` bytes of `data`, asking for a buffer in *memory_type
 * (which, with *memory_id, then says where the buffer was: the fake CUDA driver's device
 * memory is host memory, so the copy works either way in the tests). */
static Error* add_output_in(Response* response, const char* name, int datatype,
                            const int64_t* shape, uint32_t dims, const void* data, size_t size,
                            int* memory_type, int64_t* memory_id) {
  Output* output;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, name, datatype, shape, dims));
  void* buffer;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, size, memory_type, memory_id));
  memcpy(buffer, data, size);
  return NULL;
}

static Error* add_output(Response* response, const char* name, int datatype,
                         const int64_t* shape, uint32_t dims, const void* data, size_t size) {
  int memory_type = 0;
  int64_t memory_id = 0;
  return add_output_in(response, name, datatype, shape, dims, data, size, &memory_type,
                       &memory_id);
}

static bool requested(Request* request, const char* name) {
  uint32_t count;
  if (TRITONBACKEND_RequestOutputCount(request, &count) != NULL) return false;
  for (uint32_t i = 0; i < count; i++) {
    const char* output;
    if (TRITONBACKEND_RequestOutputName(request, i, &output) == NULL && strcmp(output, name) == 0)
      return true;
  }
  return false;
}

/* The address and value of the INT32 input `name`. */
static Error* int32_input(Request* request, const char* name, int32_t** data) {
  Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  const void* buffer;
  uint64_t size;
  int memory_type = 0;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &buffer, &size, &memory_type, &memory_id));
  if (size != sizeof(int32_t)) return TRITONSERVER_ErrorNew(INVALID_ARG, "expected one INT32");
  *data = (int32_t*)buffer;
  return NULL;
}

static Error* accumulate(Request* request) {
  int32_t* in;
  int32_t* state_in;
  RETURN_IF_ERROR(int32_input(request, "IN", &in));
  RETURN_IF_ERROR(int32_input(request, "STATE_IN", &state_in));
  int64_t shape[1] = {1};
  State* state;
  RETURN_IF_ERROR(TRITONBACKEND_StateNew(&state, request, "STATE_OUT", TYPE_INT32, shape, 1));
  void* buffer;
  int memory_type = 0;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_StateBuffer(state, &buffer, sizeof(int32_t), &memory_type,
                                            &memory_id));
  int32_t* state_out = buffer;
  int32_t same = state_out == state_in;
  *state_out = *state_in + *in; /* in place when the buffers are one */
  Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  RETURN_IF_ERROR(add_output(response, "OUT", TYPE_INT32, shape, 1, state_out, sizeof(int32_t)));
  RETURN_IF_ERROR(add_output(response, "SAME", TYPE_INT32, shape, 1, &same, sizeof(int32_t)));
  return TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, NULL);
}

static Error* echo(Instance* instance, Request* request) {
  Model* model;
  Backend* backend;
  MemoryManager* memory;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelBackend(model, &backend));
  RETURN_IF_ERROR(TRITONBACKEND_BackendMemoryManager(backend, &memory));
  uint32_t inputs;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &inputs));
  Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, 0, &input));
  const char* name;
  int datatype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t byte_size;
  RETURN_IF_ERROR(
      TRITONBACKEND_InputProperties(input, &name, &datatype, &shape, &dims, &byte_size, &buffers));
  void* copy;
  RETURN_IF_ERROR(TRITONBACKEND_MemoryManagerAllocate(memory, &copy, 0, 0, byte_size));
  size_t offset = 0;
  for (uint32_t b = 0; b < buffers; b++) {
    const void* data;
    uint64_t size;
    int memory_type = 0;
    int64_t memory_id = 0;
    RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &data, &size, &memory_type, &memory_id));
    memcpy((char*)copy + offset, data, size);
    offset += size;
  }
  uint64_t correlation = 0, timeout = 0;
  uint32_t flags = 0, parameters = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestCorrelationId(request, &correlation));
  RETURN_IF_ERROR(TRITONBACKEND_RequestFlags(request, &flags));
  RETURN_IF_ERROR(TRITONBACKEND_InferenceRequestTimeoutMicroseconds(request, &timeout));
  RETURN_IF_ERROR(TRITONBACKEND_RequestParameterCount(request, &parameters));
  int64_t add = 0;
  const char* note = NULL;
  for (uint32_t p = 0; p < parameters; p++) {
    const char* key;
    int type;
    const void* value;
    RETURN_IF_ERROR(TRITONBACKEND_RequestParameter(request, p, &key, &type, &value));
    if (strcmp(key, "add") == 0 && type == PARAM_INT) add = *(const int64_t*)value;
    if (strcmp(key, "note") == 0 && type == PARAM_STRING) note = value;
  }
  Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  if (note != NULL) {
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, "note", note));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, "count", parameters));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetBoolParameter(response, "echoed", true));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetDoubleParameter(response, "ratio", 0.5));
  }
  Error* err = NULL;
  if (requested(request, "OUT"))
    err = add_output(response, "OUT", datatype, shape, dims, copy, byte_size);
  int64_t meta[5] = {(int64_t)correlation, flags, parameters, add, (int64_t)timeout};
  int64_t meta_shape[1] = {5};
  if (err == NULL && requested(request, "META"))
    err = add_output(response, "META", TYPE_INT64, meta_shape, 1, meta, sizeof(meta));
  TRITONBACKEND_MemoryManagerFree(memory, copy, 0, 0);
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, err));
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return TRITONBACKEND_ModelInstanceReportStatistics(instance, request, true, now_ns(),
                                                     now_ns() + 10, now_ns() + 20, now_ns() + 30);
}

static Error* query(Request* request) {
  size_t size = 16;
  int memory_type = 1; /* CPU_PINNED */
  int64_t memory_id = 1;
  Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  Error* err = TRITONBACKEND_RequestOutputBufferProperties(request, "OUT", &size, &memory_type,
                                                           &memory_id);
  if (err == NULL) {
    int64_t told[3] = {memory_type, memory_id, (int64_t)size};
    int64_t shape[1] = {3};
    err = add_output(response, "OUT", TYPE_INT64, shape, 1, told, sizeof(told));
  }
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, err));
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return NULL;
}

#define MAX_SCRATCH 8

static Error* gpu_scratch(Instance* instance, Request* request) {
  Model* model;
  Backend* backend;
  MemoryManager* memory;
  int32_t device;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelBackend(model, &backend));
  RETURN_IF_ERROR(TRITONBACKEND_BackendMemoryManager(backend, &memory));
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceDeviceId(instance, &device));
  Input* input;
  const void* data;
  uint64_t size;
  int memory_type = 0;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &memory_type, &memory_id));
  size_t count = size / sizeof(int64_t);
  if (count > MAX_SCRATCH) count = MAX_SCRATCH;
  int64_t sizes[MAX_SCRATCH], told[MAX_SCRATCH];
  void* pieces[MAX_SCRATCH] = {NULL};
  memcpy(sizes, data, count * sizeof(int64_t));
  for (size_t i = 0; i < count; i++) {
    Error* err = TRITONBACKEND_MemoryManagerAllocate(memory, &pieces[i], 2 /* GPU */, device,
                                                     (uint64_t)sizes[i]);
    told[i] = 0;
    if (err != NULL) {
      char line[320];
      snprintf(line, sizeof(line), "gpu_scratch %lld: %s", (long long)sizes[i],
               TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, line);
      told[i] = TRITONSERVER_ErrorCode(err);
      TRITONSERVER_ErrorDelete(err);
      pieces[i] = NULL;
    } else {
      memset(pieces[i], (int)i + 1, (size_t)sizes[i]);
    }
  }
  for (size_t i = 0; i < count; i++) {
    if (pieces[i] == NULL) continue;
    for (int64_t b = 0; b < sizes[i]; b++)
      if (((unsigned char*)pieces[i])[b] != (unsigned char)(i + 1)) told[i] = -1;
    Error* err = TRITONBACKEND_MemoryManagerFree(memory, pieces[i], 2, device);
    if (err != NULL) {
      told[i] = TRITONSERVER_ErrorCode(err);
      TRITONSERVER_ErrorDelete(err);
    }
  }
  Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  int64_t shape[1] = {(int64_t)count};
  Error* err = add_output(response, "OUT", TYPE_INT64, shape, 1, told, count * sizeof(int64_t));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, err));
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return NULL;
}

typedef struct {
  Instance* instance;
  Factory* factory;
  int32_t count;
} Streaming;

/* One response's statistics, as Triton's square backend reports them. */
static void report_response(Streaming* job, uint64_t start, uint64_t output_start, uint64_t end) {
  ResponseStatistics* stats;
  if (TRITONBACKEND_ModelInstanceResponseStatisticsNew(&stats) != NULL) return;
  TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(stats, job->instance);
  TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(stats, job->factory);
  TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(stats, start);
  TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(stats, output_start);
  TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(stats, end);
  TRITONBACKEND_ModelInstanceResponseStatisticsSetError(stats, NULL);
  Error* err = TRITONBACKEND_ModelInstanceReportResponseStatistics(stats);
  if (err != NULL) {
    fprintf(stderr, "test backend: %s\n", TRITONSERVER_ErrorMessage(err));
    TRITONSERVER_ErrorDelete(err);
  }
  TRITONBACKEND_ModelInstanceResponseStatisticsDelete(stats);
}

static void* stream_responses(void* arg) {
  Streaming* job = arg;
  for (int32_t i = 0; i < job->count; i++) {
    Response* response;
    if (TRITONBACKEND_ResponseNewFromFactory(&response, job->factory) != NULL) break;
    int64_t shape[1] = {1};
    Error* err = add_output(response, "OUT", TYPE_INT32, shape, 1, &i, sizeof(i));
    TRITONBACKEND_ResponseSend(response, 0, err);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    uint64_t start = 1000 * (uint64_t)(i + 1);
    report_response(job, start, start + 40, start + 60);
  }
  TRITONBACKEND_ResponseFactorySendFlags(job->factory, RESPONSE_FINAL);
  report_response(job, 1, 0, 8);
  TRITONBACKEND_ResponseFactoryDelete(job->factory);
  free(job);
  return NULL;
}

static Error* decoupled(Instance* instance, Request* request) {
  Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  const void* data;
  uint64_t size;
  int memory_type = 0;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &memory_type, &memory_id));
  Streaming* job = malloc(sizeof(Streaming));
  job->instance = instance;
  job->count = size >= 4 ? *(const int32_t*)data : 0;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseFactoryNew(&job->factory, request));
  pthread_t thread;
  pthread_create(&thread, NULL, stream_responses, job);
  pthread_detach(thread);
  return NULL;
}

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  ServerResponse* response;
} Waiter;

static Error* bls_alloc(Allocator* a, const char* name, size_t size, int type, int64_t id,
                        void* userp, void** buffer, void** buffer_userp, int* actual_type,
                        int64_t* actual_id) {
  (void)a; (void)name; (void)type; (void)id; (void)userp;
  *buffer = size > 0 ? malloc(size) : NULL;
  *buffer_userp = NULL;
  *actual_type = 0;
  *actual_id = 0;
  return NULL;
}

static Error* bls_release(Allocator* a, void* buffer, void* userp, size_t size, int type,
                          int64_t id) {
  (void)a; (void)userp; (void)size; (void)type; (void)id;
  free(buffer);
  return NULL;
}

static void bls_request_released(ServerRequest* request, uint32_t flags, void* userp) {
  (void)flags; (void)userp;
  TRITONSERVER_InferenceRequestDelete(request);
}

static void bls_response(ServerResponse* response, uint32_t flags, void* userp) {
  (void)flags;
  Waiter* waiter = userp;
  pthread_mutex_lock(&waiter->lock);
  waiter->response = response;
  pthread_cond_signal(&waiter->done);
  pthread_mutex_unlock(&waiter->lock);
}

static Error* bls(Instance* instance, Request* request) {
  Model* model;
  Server* server;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  const int64_t* shape;
  uint32_t dims;
  uint64_t byte_size;
  const void* data;
  uint64_t size;
  int memory_type = 0;
  int64_t memory_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, NULL, NULL, &shape, &dims, &byte_size, NULL));
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &size, &memory_type, &memory_id));
  ServerRequest* inner;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&inner, server, "add_sub", -1));
  const char* names[2] = {"INPUT0", "INPUT1"};
  for (int i = 0; i < 2; i++) {
    RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(inner, names[i], TYPE_FP32, shape, dims));
    RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputData(inner, names[i], data, size, 0, 0));
  }
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(inner, "OUTPUT0"));
  Allocator* allocator;
  RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&allocator, bls_alloc, bls_release, NULL));
  Waiter waiter = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL};
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetReleaseCallback(inner, bls_request_released, NULL));
  RETURN_IF_ERROR(
      TRITONSERVER_InferenceRequestSetResponseCallback(inner, allocator, NULL, bls_response, &waiter));
  RETURN_IF_ERROR(TRITONSERVER_ServerInferAsync(server, inner, NULL));
  pthread_mutex_lock(&waiter.lock);
  while (waiter.response == NULL) pthread_cond_wait(&waiter.done, &waiter.lock);
  pthread_mutex_unlock(&waiter.lock);
  Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  Error* err = TRITONSERVER_InferenceResponseError(waiter.response);
  if (err == NULL) {
    const char* name;
    int datatype;
    const int64_t* out_shape;
    uint64_t out_dims;
    const void* base;
    size_t out_size;
    int out_type;
    int64_t out_id;
    void* userp;
    err = TRITONSERVER_InferenceResponseOutput(waiter.response, 0, &name, &datatype, &out_shape,
                                               &out_dims, &base, &out_size, &out_type, &out_id,
                                               &userp);
    if (err == NULL)
      err = add_output(response, "OUT", datatype, out_shape, (uint32_t)out_dims, base, out_size);
  }
  TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, err);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  TRITONSERVER_InferenceResponseDelete(waiter.response);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
  return NULL;
}

#ifndef NO_EXECUTE
Error* TRITONBACKEND_ModelInstanceExecute(Instance* instance, Request** requests,
                                          const uint32_t count) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(instance, &state));
  const char* mode = ((ModelState*)state)->mode;
  if (strcmp(mode, "fail") == 0)
    return TRITONSERVER_ErrorNew(INTERNAL, "execute failed on purpose");
  for (uint32_t r = 0; r < count; r++) {
    Error* err = NULL;
    if (strcmp(mode, "decoupled") == 0) {
      err = decoupled(instance, requests[r]);
    } else if (strcmp(mode, "bls") == 0) {
      err = bls(instance, requests[r]);
    } else if (strcmp(mode, "accumulate") == 0) {
      err = accumulate(requests[r]);
    } else if (strcmp(mode, "query") == 0) {
      err = query(requests[r]);
    } else if (strcmp(mode, "gpu_scratch") == 0) {
      err = gpu_scratch(instance, requests[r]);
    } else if (strcmp(mode, "error") == 0) {
      Response* response;
      err = TRITONBACKEND_ResponseNew(&response, requests[r]);
      if (err == NULL) {
        Error* answer = TRITONSERVER_ErrorNew(INVALID_ARG, "the test backend refuses this request");
        err = TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, answer);
        TRITONSERVER_ErrorDelete(answer);
      }
    } else if (strcmp(mode, "where") == 0) {
      Input* input;
      const void* data;
      uint64_t size;
      int memory_type = 2; /* GPU preferred */
      int64_t memory_id = 0;
      const int64_t* shape;
      uint32_t dims;
      Response* response;
      err = TRITONBACKEND_RequestInput(requests[r], "IN", &input);
      if (err == NULL) err = TRITONBACKEND_InputProperties(input, NULL, NULL, &shape, &dims, NULL, NULL);
      if (err == NULL)
        err = TRITONBACKEND_InputBuffer(input, 0, &data, &size, &memory_type, &memory_id);
      int out_type = 2; /* GPU preferred */
      int64_t out_id = 0;
      if (err == NULL) err = TRITONBACKEND_ResponseNew(&response, requests[r]);
      if (err == NULL)
        err = add_output_in(response, "OUT", TYPE_FP32, shape, dims, data, size, &out_type, &out_id);
      int64_t place[4] = {memory_type, memory_id, out_type, out_id};
      const int64_t place_shape[1] = {4};
      if (err == NULL) err = add_output(response, "PLACE", TYPE_INT64, place_shape, 1, place, sizeof(place));
      if (err == NULL) err = TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, NULL);
    } else if (strcmp(mode, "unallocated") == 0) {
      Response* response;
      err = TRITONBACKEND_ResponseNew(&response, requests[r]);
      Output* output;
      const int64_t shape[1] = {2};
      if (err == NULL) err = TRITONBACKEND_ResponseOutput(response, &output, "OUT", TYPE_FP32, shape, 1);
      if (err == NULL) err = TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, NULL);
    } else if (strcmp(mode, "state") == 0) {
      Response* response;
      err = TRITONBACKEND_ResponseNew(&response, requests[r]);
      if (err == NULL) {
        State* state;
        int64_t shape[1] = {1};
        Error* answer = TRITONBACKEND_StateNew(&state, requests[r], "UNDECLARED", TYPE_INT32, shape, 1);
        err = TRITONBACKEND_ResponseSend(response, RESPONSE_FINAL, answer);
        if (answer != NULL) TRITONSERVER_ErrorDelete(answer);
      }
    } else if (strcmp(mode, "late") == 0) {
      usleep(400 * 1000);
      err = echo(instance, requests[r]);
    } else if (strcmp(mode, "silent") != 0) {
      err = echo(instance, requests[r]);
    }
    if (err != NULL) {
      fprintf(stderr, "test backend: %s\n", TRITONSERVER_ErrorMessage(err));
      TRITONSERVER_ErrorDelete(err);
    }
    TRITONBACKEND_RequestRelease(requests[r], RELEASE_ALL);
  }
  return TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, count, now_ns(), now_ns() + 10,
                                                          now_ns() + 20, now_ns() + 30);
}
#endif
