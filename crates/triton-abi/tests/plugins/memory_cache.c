/* A TRITONCACHE test plugin: an in-memory map from key to copies of the entry's
 * buffers. Its own prototypes stand in for Triton's headers. The JSON config selects
 * failures: "fail":"init" | "insert" | "lookup"; "key":"fixed" stores every entry under
 * one key (to force collisions). Build with -DNO_LOOKUP to leave out an entry point. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONCACHE_CacheEntry TRITONCACHE_CacheEntry;
typedef struct TRITONCACHE_Allocator TRITONCACHE_Allocator;

enum { ERR_INTERNAL = 1, ERR_NOT_FOUND = 2, ERR_INVALID_ARG = 3 };
enum { MEMORY_CPU = 0 };
enum { LOG_INFO = 0 };

TRITONSERVER_Error* TRITONSERVER_ErrorNew(uint32_t code, const char* msg);
TRITONSERVER_Error* TRITONSERVER_LogMessage(uint32_t level, const char* file, int line, const char* msg);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** attrs);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* attrs);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* attrs, size_t size);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* attrs, uint32_t type);
TRITONSERVER_Error* TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* attrs, size_t* size);
TRITONSERVER_Error* TRITONCACHE_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONCACHE_CacheEntryBufferCount(TRITONCACHE_CacheEntry* entry, size_t* count);
TRITONSERVER_Error* TRITONCACHE_CacheEntryAddBuffer(TRITONCACHE_CacheEntry* entry, void* base, TRITONSERVER_BufferAttributes* attrs);
TRITONSERVER_Error* TRITONCACHE_CacheEntryGetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void** base, TRITONSERVER_BufferAttributes* attrs);
TRITONSERVER_Error* TRITONCACHE_CacheEntrySetBuffer(TRITONCACHE_CacheEntry* entry, size_t index, void* base, TRITONSERVER_BufferAttributes* attrs);
TRITONSERVER_Error* TRITONCACHE_Copy(TRITONCACHE_Allocator* allocator, TRITONCACHE_CacheEntry* entry);

#define RETURN_IF_ERROR(x)             \
  do {                                 \
    TRITONSERVER_Error* e__ = (x);     \
    if (e__ != NULL) return e__;       \
  } while (0)

struct item {
  char* key;
  size_t count;
  void** buffers;
  size_t* sizes;
  struct item* next;
};

struct cache {
  pthread_mutex_t mu;
  struct item* items;
  int fail_insert, fail_lookup, fixed_key;
};

static const char* key_of(struct cache* c, const char* key) { return c->fixed_key ? "fixed" : key; }

TRITONSERVER_Error* TRITONCACHE_CacheInitialize(struct cache** out, const char* config) {
  uint32_t major = 0, minor = 0;
  RETURN_IF_ERROR(TRITONCACHE_ApiVersion(&major, &minor));
  if (major != 0 || minor < 1) {
    return TRITONSERVER_ErrorNew(ERR_INTERNAL, "unexpected TRITONCACHE API version");
  }
  if (strstr(config, "\"fail\":\"init\"") != NULL) {
    return TRITONSERVER_ErrorNew(ERR_INVALID_ARG, "memory cache: refusing to start");
  }
  struct cache* c = calloc(1, sizeof(struct cache));
  pthread_mutex_init(&c->mu, NULL);
  c->fail_insert = strstr(config, "\"fail\":\"insert\"") != NULL;
  c->fail_lookup = strstr(config, "\"fail\":\"lookup\"") != NULL;
  c->fixed_key = strstr(config, "\"key\":\"fixed\"") != NULL;
  TRITONSERVER_LogMessage(LOG_INFO, __FILE__, __LINE__, "memory cache initialized");
  *out = c;
  return NULL;
}

static void free_item(struct item* it) {
  for (size_t i = 0; i < it->count; i++) free(it->buffers[i]);
  free(it->buffers);
  free(it->sizes);
  free(it->key);
  free(it);
}

TRITONSERVER_Error* TRITONCACHE_CacheFinalize(struct cache* c) {
  struct item* it = c->items;
  while (it != NULL) {
    struct item* next = it->next;
    free_item(it);
    it = next;
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
  return NULL;
}

static struct item* find(struct cache* c, const char* key) {
  for (struct item* it = c->items; it != NULL; it = it->next) {
    if (strcmp(it->key, key) == 0) return it;
  }
  return NULL;
}

/* Allocates its own buffers, points the entry at them and asks for the copy. */
TRITONSERVER_Error* TRITONCACHE_CacheInsert(struct cache* c, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (c->fail_insert) return TRITONSERVER_ErrorNew(ERR_INTERNAL, "memory cache: insert refused");
  size_t count = 0;
  RETURN_IF_ERROR(TRITONCACHE_CacheEntryBufferCount(entry, &count));
  struct item* it = calloc(1, sizeof(struct item));
  it->key = strdup(key_of(c, key));
  it->count = count;
  it->buffers = calloc(count, sizeof(void*));
  it->sizes = calloc(count, sizeof(size_t));
  TRITONSERVER_BufferAttributes* attrs = NULL;
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesNew(&attrs));
  for (size_t i = 0; i < count; i++) {
    void* base = NULL;
    RETURN_IF_ERROR(TRITONCACHE_CacheEntryGetBuffer(entry, i, &base, attrs));
    RETURN_IF_ERROR(TRITONSERVER_BufferAttributesByteSize(attrs, &it->sizes[i]));
    it->buffers[i] = malloc(it->sizes[i]);
    RETURN_IF_ERROR(TRITONCACHE_CacheEntrySetBuffer(entry, i, it->buffers[i], NULL));
  }
  TRITONSERVER_BufferAttributesDelete(attrs);
  TRITONSERVER_Error* err = TRITONCACHE_Copy(allocator, entry);
  if (err != NULL) {
    free_item(it);
    return err;
  }
  pthread_mutex_lock(&c->mu);
  struct item* old = find(c, it->key);
  if (old != NULL) {
    /* replace in place */
    struct item* next = old->next;
    char* k = old->key;
    old->key = NULL;
    for (size_t i = 0; i < old->count; i++) free(old->buffers[i]);
    free(old->buffers);
    free(old->sizes);
    *old = *it;
    old->next = next;
    free(k);
    free(it);
  } else {
    it->next = c->items;
    c->items = it;
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

#ifndef NO_LOOKUP
TRITONSERVER_Error* TRITONCACHE_CacheLookup(struct cache* c, const char* key, TRITONCACHE_CacheEntry* entry,
                                            TRITONCACHE_Allocator* allocator) {
  if (c->fail_lookup) return TRITONSERVER_ErrorNew(ERR_INTERNAL, "memory cache: lookup refused");
  pthread_mutex_lock(&c->mu);
  struct item* it = find(c, key_of(c, key));
  if (it == NULL) {
    pthread_mutex_unlock(&c->mu);
    return TRITONSERVER_ErrorNew(ERR_NOT_FOUND, "key does not exist");
  }
  TRITONSERVER_Error* err = NULL;
  TRITONSERVER_BufferAttributes* attrs = NULL;
  err = TRITONSERVER_BufferAttributesNew(&attrs);
  for (size_t i = 0; err == NULL && i < it->count; i++) {
    TRITONSERVER_BufferAttributesSetByteSize(attrs, it->sizes[i]);
    TRITONSERVER_BufferAttributesSetMemoryType(attrs, MEMORY_CPU);
    err = TRITONCACHE_CacheEntryAddBuffer(entry, it->buffers[i], attrs);
  }
  if (err == NULL) err = TRITONCACHE_Copy(allocator, entry);
  TRITONSERVER_BufferAttributesDelete(attrs);
  pthread_mutex_unlock(&c->mu);
  return err;
}
#endif
