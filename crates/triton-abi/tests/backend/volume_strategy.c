/* Nereid's test custom batching library, declared from the ABI (no Triton header):
 * a batch takes requests while their input bytes fit the model's
 * `parameters { key: "MAX_BATCH_VOLUME_BYTES" }`, the rule of Triton's
 * volume_batching example. tests/python/test_batch_strategy.py builds it and names it
 * with TRITON_BATCH_STRATEGY_PATH or copies it in as batchstrategy.so.
 *
 * Each call prints one line ("volume: ..."), so the test reads what the batcher asked.
 * Build flags: -DPARTIAL leaves out TRITONBACKEND_ModelBatchFinalize (a library that
 * defines only some of the five functions must be refused). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"

typedef struct Batcher Batcher;

/* The parameter's string_value in the configuration JSON, as a number; -1 if absent. */
static long read_volume(const char* json) {
  const char* key = strstr(json, "\"MAX_BATCH_VOLUME_BYTES\"");
  if (key == NULL) return -1;
  const char* value = strstr(key, "\"string_value\":\"");
  if (value == NULL) return -1;
  return strtol(value + strlen("\"string_value\":\""), NULL, 10);
}

Error* TRITONBACKEND_ModelBatcherInitialize(Batcher** batcher, Model* model) {
  const char* name;
  Error* err = TRITONBACKEND_ModelName(model, &name);
  if (err != NULL) return err;
  Message* config;
  err = TRITONBACKEND_ModelConfig(model, 1, &config);
  if (err != NULL) return err;
  const char* json;
  size_t size;
  err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  if (err != NULL) return err;
  long volume = read_volume(json);
  TRITONSERVER_MessageDelete(config);
  if (volume < 0)
    return TRITONSERVER_ErrorNew(INVALID_ARG,
                                 "Unable to find MAX_BATCH_VOLUME_BYTES parameter in model config");
  uint64_t* limit = malloc(sizeof *limit);
  *limit = (uint64_t)volume;
  *batcher = (Batcher*)limit;
  printf("volume: batcher for %s holds %lu bytes\n", name, (unsigned long)*limit);
  fflush(stdout);
  return NULL;
}

Error* TRITONBACKEND_ModelBatcherFinalize(Batcher* batcher) {
  free(batcher);
  printf("volume: batcher finalized\n");
  fflush(stdout);
  return NULL;
}

Error* TRITONBACKEND_ModelBatchInitialize(const Batcher* batcher, void** userp) {
  uint64_t* left = malloc(sizeof *left);
  *left = *(const uint64_t*)batcher;
  *userp = left;
  return NULL;
}

#ifndef PARTIAL
Error* TRITONBACKEND_ModelBatchFinalize(void* userp) {
  free(userp);
  return NULL;
}
#endif

Error* TRITONBACKEND_ModelBatchIncludeRequest(Request* request, void* userp, bool* include) {
  *include = false;
  uint64_t* left = userp;
  uint32_t count;
  Error* err = TRITONBACKEND_RequestInputCount(request, &count);
  if (err != NULL) return err;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < count; i++) {
    Input* input;
    err = TRITONBACKEND_RequestInputByIndex(request, i, &input);
    if (err != NULL) return err;
    uint64_t size;
    err = TRITONBACKEND_InputProperties(input, NULL, NULL, NULL, NULL, &size, NULL);
    if (err != NULL) return err;
    bytes += size;
  }
  const char* id;
  err = TRITONBACKEND_RequestId(request, &id);
  if (err != NULL) return err;
  *include = bytes <= *left;
  if (*include) *left -= bytes;
  printf("volume: request '%s' of %lu bytes %s\n", id, (unsigned long)bytes,
         *include ? "joins" : "waits");
  fflush(stdout);
  return NULL;
}
