/* The part of Triton's backend ABI (tritonbackend.h, tritonserver.h) Nereid's own test
 * backends use, declared here from the ABI's function signatures and enum values (no
 * Triton header), for C (test_backend.c) and C++ (cpp_backend.cc) alike. Handles are
 * opaque; every function is resolved at load time from the process that loads the
 * backend (the nereid binary or libtritonserver.so). */
#ifndef NEREID_TEST_BACKEND_ABI_H
#define NEREID_TEST_BACKEND_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Error Error;
typedef struct Message Message;
typedef struct Backend Backend;
typedef struct Model Model;
typedef struct Instance Instance;
typedef struct Request Request;
typedef struct Input Input;
typedef struct Response Response;
typedef struct Factory Factory;
typedef struct Output Output;
typedef struct MemoryManager MemoryManager;
typedef struct Server Server;
typedef struct ServerRequest ServerRequest;
typedef struct ServerResponse ServerResponse;
typedef struct Allocator Allocator;
typedef struct BackendAttribute BackendAttribute;

enum { INTERNAL = 1, INVALID_ARG = 3, UNSUPPORTED = 5 };
enum { TYPE_INT32 = 8, TYPE_INT64 = 9, TYPE_FP32 = 11 };
enum { PARAM_STRING = 0, PARAM_INT = 1 };
enum { MEMORY_CPU = 0, MEMORY_CPU_PINNED = 1 };
enum { RESPONSE_FINAL = 1, RELEASE_ALL = 1, LOG_INFO = 0 };

extern Error* TRITONSERVER_ErrorNew(int code, const char* msg);
extern void TRITONSERVER_ErrorDelete(Error*);
extern const char* TRITONSERVER_ErrorMessage(Error*);
extern int TRITONSERVER_ErrorCode(Error*);
extern Error* TRITONSERVER_MessageSerializeToJson(Message*, const char**, size_t*);
extern Error* TRITONSERVER_MessageNewFromSerializedJson(Message**, const char*, size_t);
extern Error* TRITONSERVER_MessageDelete(Message*);
extern Error* TRITONSERVER_LogMessage(int level, const char* file, int line, const char* msg);

extern Error* TRITONBACKEND_ApiVersion(uint32_t*, uint32_t*);
extern Error* TRITONBACKEND_BackendName(Backend*, const char**);
extern Error* TRITONBACKEND_BackendConfig(Backend*, Message**);
extern Error* TRITONBACKEND_BackendArtifacts(Backend*, int*, const char**);
extern Error* TRITONBACKEND_BackendMemoryManager(Backend*, MemoryManager**);
extern Error* TRITONBACKEND_BackendState(Backend*, void**);
extern Error* TRITONBACKEND_BackendSetState(Backend*, void*);
extern Error* TRITONBACKEND_MemoryManagerAllocate(MemoryManager*, void**, int, int64_t, uint64_t);
extern Error* TRITONBACKEND_MemoryManagerFree(MemoryManager*, void*, int, int64_t);
extern Error* TRITONBACKEND_ModelName(Model*, const char**);
extern Error* TRITONBACKEND_ModelVersion(Model*, uint64_t*);
extern Error* TRITONBACKEND_ModelRepository(Model*, int*, const char**);
extern Error* TRITONBACKEND_ModelConfig(Model*, uint32_t, Message**);
extern Error* TRITONBACKEND_ModelAutoCompleteConfig(Model*, bool*);
extern Error* TRITONBACKEND_ModelSetConfig(Model*, uint32_t, Message*);
extern Error* TRITONBACKEND_ModelServer(Model*, Server**);
extern Error* TRITONBACKEND_ModelBackend(Model*, Backend**);
extern Error* TRITONBACKEND_ModelState(Model*, void**);
extern Error* TRITONBACKEND_ModelSetState(Model*, void*);
extern Error* TRITONBACKEND_ModelInstanceName(Instance*, const char**);
extern Error* TRITONBACKEND_ModelInstanceKind(Instance*, int*);
extern Error* TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(BackendAttribute*, int, uint64_t,
                                                                    const uint64_t*, uint64_t);
extern Error* TRITONBACKEND_ModelInstanceDeviceId(Instance*, int32_t*);
extern Error* TRITONBACKEND_ModelInstanceModel(Instance*, Model**);
extern Error* TRITONBACKEND_ModelInstanceState(Instance*, void**);
extern Error* TRITONBACKEND_ModelInstanceSetState(Instance*, void*);
extern Error* TRITONBACKEND_ModelInstanceReportStatistics(Instance*, Request*, bool, uint64_t,
                                                           uint64_t, uint64_t, uint64_t);
extern Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(Instance*, uint64_t, uint64_t,
                                                                uint64_t, uint64_t, uint64_t);
typedef struct State State;
extern Error* TRITONBACKEND_StateNew(State**, Request*, const char*, int, const int64_t*,
                                     uint32_t);
extern Error* TRITONBACKEND_StateBuffer(State*, void**, uint64_t, int*, int64_t*);
typedef struct ResponseStatistics ResponseStatistics;
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsNew(ResponseStatistics**);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsDelete(ResponseStatistics*);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(ResponseStatistics*,
                                                                             Instance*);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(ResponseStatistics*,
                                                                               Factory*);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(ResponseStatistics*,
                                                                             uint64_t);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    ResponseStatistics*, uint64_t);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(ResponseStatistics*,
                                                                           uint64_t);
extern Error* TRITONBACKEND_ModelInstanceResponseStatisticsSetError(ResponseStatistics*, Error*);
extern Error* TRITONBACKEND_ModelInstanceReportResponseStatistics(ResponseStatistics*);
extern Error* TRITONBACKEND_RequestId(Request*, const char**);
extern Error* TRITONBACKEND_RequestCorrelationId(Request*, uint64_t*);
extern Error* TRITONBACKEND_RequestFlags(Request*, uint32_t*);
extern Error* TRITONBACKEND_InferenceRequestTimeoutMicroseconds(Request*, uint64_t*);
extern Error* TRITONBACKEND_RequestParameterCount(Request*, uint32_t*);
extern Error* TRITONBACKEND_RequestParameter(Request*, uint32_t, const char**, int*, const void**);
extern Error* TRITONBACKEND_ResponseSetStringParameter(Response*, const char*, const char*);
extern Error* TRITONBACKEND_ResponseSetIntParameter(Response*, const char*, int64_t);
extern Error* TRITONBACKEND_ResponseSetBoolParameter(Response*, const char*, bool);
extern Error* TRITONBACKEND_ResponseSetDoubleParameter(Response*, const char*, double);
extern Error* TRITONBACKEND_RequestInput(Request*, const char*, Input**);
extern Error* TRITONBACKEND_RequestInputCount(Request*, uint32_t*);
extern Error* TRITONBACKEND_RequestInputByIndex(Request*, uint32_t, Input**);
extern Error* TRITONBACKEND_RequestOutputCount(Request*, uint32_t*);
extern Error* TRITONBACKEND_RequestOutputBufferProperties(Request*, const char*, size_t*, int*, int64_t*);
extern Error* TRITONBACKEND_RequestOutputName(Request*, uint32_t, const char**);
extern Error* TRITONBACKEND_RequestRelease(Request*, uint32_t);
extern Error* TRITONBACKEND_InputProperties(Input*, const char**, int*, const int64_t**,
                                            uint32_t*, uint64_t*, uint32_t*);
extern Error* TRITONBACKEND_InputBuffer(Input*, uint32_t, const void**, uint64_t*, int*,
                                        int64_t*);
extern Error* TRITONBACKEND_ResponseNew(Response**, Request*);
extern Error* TRITONBACKEND_ResponseFactoryNew(Factory**, Request*);
extern Error* TRITONBACKEND_ResponseFactoryDelete(Factory*);
extern Error* TRITONBACKEND_ResponseFactorySendFlags(Factory*, uint32_t);
extern Error* TRITONBACKEND_ResponseNewFromFactory(Response**, Factory*);
extern Error* TRITONBACKEND_ResponseOutput(Response*, Output**, const char*, int,
                                           const int64_t*, uint32_t);
extern Error* TRITONBACKEND_OutputBuffer(Output*, void**, uint64_t, int*, int64_t*);
extern Error* TRITONBACKEND_ResponseSend(Response*, uint32_t, Error*);

extern Error* TRITONSERVER_InferenceRequestNew(ServerRequest**, Server*, const char*, int64_t);
extern Error* TRITONSERVER_InferenceRequestDelete(ServerRequest*);
extern Error* TRITONSERVER_InferenceRequestAddInput(ServerRequest*, const char*, int,
                                                    const int64_t*, uint64_t);
extern Error* TRITONSERVER_InferenceRequestAppendInputData(ServerRequest*, const char*,
                                                           const void*, size_t, int, int64_t);
extern Error* TRITONSERVER_InferenceRequestAddRequestedOutput(ServerRequest*, const char*);
typedef void (*RequestReleaseFn)(ServerRequest*, uint32_t, void*);
typedef void (*ResponseFn)(ServerResponse*, uint32_t, void*);
typedef Error* (*AllocFn)(Allocator*, const char*, size_t, int, int64_t, void*, void**,
                          void**, int*, int64_t*);
typedef Error* (*ReleaseBufFn)(Allocator*, void*, void*, size_t, int, int64_t);
extern Error* TRITONSERVER_InferenceRequestSetReleaseCallback(ServerRequest*, RequestReleaseFn,
                                                              void*);
extern Error* TRITONSERVER_InferenceRequestSetResponseCallback(ServerRequest*, Allocator*, void*,
                                                               ResponseFn, void*);
extern Error* TRITONSERVER_ResponseAllocatorNew(Allocator**, AllocFn, ReleaseBufFn, void*);
extern Error* TRITONSERVER_ResponseAllocatorDelete(Allocator*);
extern Error* TRITONSERVER_ServerInferAsync(Server*, ServerRequest*, void*);
extern Error* TRITONSERVER_InferenceResponseError(ServerResponse*);
extern Error* TRITONSERVER_InferenceResponseDelete(ServerResponse*);
extern Error* TRITONSERVER_InferenceResponseOutput(ServerResponse*, uint32_t, const char**, int*,
                                                   const int64_t**, uint64_t*, const void**,
                                                   size_t*, int*, int64_t*, void**);

#ifdef __cplusplus
}
#endif

#endif
