/* onnxruntime custom operators of domain com.mtpedge:
 *
 *   Y = BlockMatMul(X, codes, scales[, offsets])       X (..., K) float32 -> Y (..., N) float32; float32 tables
 *   Y = BlockMatMulF16(X, codes, scales[, minima])     the same with float16 scales and block minima
 *       attributes K, N, bits, block_size, zero                                     (block_matmul.c)
 *   out, present_key, present_value = CacheAttention(q, new_key, new_value, past_key, past_value, cache_slots,
 *       attention_bias)   q (1, H, T, D), new_* (1, KV, T, D), past_* (1, KV, C, D), cache_slots (1, T) int64,
 *       attention_bias (1, 1, T, C) -> out (1, T, H * D); attributes scale, masked_below   (cache_attention.c)
 *
 * Registered by `SessionOptions.register_custom_ops_library` (runtime/kernels/__init__.py). Built against the C
 * API of onnxruntime 1.21 (version 21); onnxruntime serves older API versions to newer runtimes.
 */
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "block_matmul.h"
#include "cache_attention.h"

#define TILES_PER_TASK 4
#define DOMAIN "com.mtpedge"

static const OrtApi* g_api;

typedef enum { BLOCK_MATMUL, CACHE_ATTENTION } OpKind;

typedef struct {
  OrtCustomOp base; /* first: onnxruntime hands back a pointer to it */
  OpKind kind;
  int half_tables;
  const char* name;
} Op;

typedef struct {
  OpKind kind;
  int64_t k, n, bits, block, zero;
  int half_tables;
  int vector;                /* the code path, decided when the session creates the kernel (not per call) */
  float scale, masked_below; /* CacheAttention */
} Kernel;

typedef struct {
  const BmMatrix* m;
  BmTiles tiles_fn;
  const BmRows* rows_q;
  int64_t rows, tiles;
  float* y;
} Task;

static OrtStatus* fail(const char* what) { return g_api->CreateStatus(ORT_INVALID_ARGUMENT, what); }

#define TRY(expr)                    \
  do {                               \
    OrtStatus* status_ = (expr);     \
    if (status_) return status_;     \
  } while (0)

static OrtStatus* ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                                             void** out) {
  Kernel* kernel = calloc(1, sizeof(Kernel));
  if (!kernel) return api->CreateStatus(ORT_FAIL, "mtpedge kernels: out of memory");
  kernel->kind = ((const Op*)op)->kind;
  kernel->half_tables = ((const Op*)op)->half_tables;
  OrtStatus* status = NULL;
  if (kernel->kind == CACHE_ATTENTION) {
    kernel->vector = attn_vector_path();
    if ((status = api->KernelInfoGetAttribute_float(info, "scale", &kernel->scale)) ||
        (status = api->KernelInfoGetAttribute_float(info, "masked_below", &kernel->masked_below))) {
      free(kernel);
      return status;
    }
    *out = kernel;
    return NULL;
  }
  if ((status = api->KernelInfoGetAttribute_int64(info, "K", &kernel->k)) ||
      (status = api->KernelInfoGetAttribute_int64(info, "N", &kernel->n)) ||
      (status = api->KernelInfoGetAttribute_int64(info, "bits", &kernel->bits)) ||
      (status = api->KernelInfoGetAttribute_int64(info, "block_size", &kernel->block)) ||
      (status = api->KernelInfoGetAttribute_int64(info, "zero", &kernel->zero))) {
    free(kernel);
    return status;
  }
  BmMatrix probe = {kernel->n, kernel->k, kernel->block, (int)kernel->bits, (int)kernel->zero, 0, NULL, NULL, NULL};
  const char* why = bm_check(&probe);
  if (why) {
    free(kernel);
    return api->CreateStatus(ORT_INVALID_ARGUMENT, why);
  }
  kernel->vector = bm_vector_path();
  *out = kernel;
  return NULL;
}

static void run_task(void* data, size_t index) {
  const Task* t = data;
  int64_t tile0 = (int64_t)index * TILES_PER_TASK, tile1 = tile0 + TILES_PER_TASK;
  if (tile1 > t->tiles) tile1 = t->tiles;
  t->tiles_fn(t->m, t->rows_q, t->rows, tile0, tile1, t->y);
}

static OrtStatus* tensor_data(OrtKernelContext* ctx, size_t index, const void** data, size_t* count) {
  const OrtValue* value = NULL;
  TRY(g_api->KernelContext_GetInput(ctx, index, &value));
  if (!value) {
    *data = NULL;
    *count = 0;
    return NULL;
  }
  OrtTensorTypeAndShapeInfo* info = NULL;
  TRY(g_api->GetTensorTypeAndShape(value, &info));
  OrtStatus* status = g_api->GetTensorShapeElementCount(info, count);
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  if (status) return status;
  return g_api->GetTensorMutableData((OrtValue*)value, (void**)data);
}

/* input `index`'s dimensions (at most max_rank of them) and rank */
static OrtStatus* input_shape(OrtKernelContext* ctx, size_t index, int64_t* dims, size_t max_rank, size_t* rank) {
  const OrtValue* value = NULL;
  TRY(g_api->KernelContext_GetInput(ctx, index, &value));
  OrtTensorTypeAndShapeInfo* info = NULL;
  TRY(g_api->GetTensorTypeAndShape(value, &info));
  OrtStatus* status = g_api->GetDimensionsCount(info, rank);
  if (!status && (*rank < 1 || *rank > max_rank)) status = fail("mtpedge kernels: an input has an unexpected rank");
  if (!status) status = g_api->GetDimensions(info, dims, *rank);
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  return status;
}

/* input_shape of an input that must have exactly `rank` dimensions */
static OrtStatus* shape_of(OrtKernelContext* ctx, size_t index, int64_t* dims, size_t rank) {
  size_t actual = 0;
  TRY(input_shape(ctx, index, dims, rank, &actual));
  return actual == rank ? NULL : fail("CacheAttention: an input has an unexpected rank");
}

typedef struct {
  const AttnShape* shape;
  const float *q, *key, *value, *bias;
  float* out;
  float* scratch; /* attn_scratch_floats per task */
} AttnTask;

static void run_attention_task(void* data, size_t i) {
  const AttnTask* t = data;
  attn_task(t->shape, t->q, t->key, t->value, t->bias, t->out, (int64_t)i,
            t->scratch + (int64_t)i * attn_scratch_floats(t->shape));
}

static OrtStatus* compute_attention(const Kernel* kernel, OrtKernelContext* ctx) {
  int64_t q_dims[4], kv_dims[4], new_dims[4], bias_dims[4];
  TRY(shape_of(ctx, 0, q_dims, 4));
  TRY(shape_of(ctx, 1, new_dims, 4));
  TRY(shape_of(ctx, 3, kv_dims, 4));
  TRY(shape_of(ctx, 6, bias_dims, 4));
  AttnShape s = {q_dims[1],    kv_dims[1],           q_dims[3],     q_dims[2],
                 kv_dims[2],   kernel->scale,        kernel->masked_below, kernel->vector};
  if (s.kv_heads <= 0 || s.heads % s.kv_heads || kv_dims[3] != s.head_dim || new_dims[1] != s.kv_heads ||
      new_dims[2] != s.rows || bias_dims[2] != s.rows || bias_dims[3] != s.context)
    return fail("CacheAttention: q, new rows, cache and bias shapes do not agree");
  const void *q, *new_key, *new_value, *past_key, *past_value, *slots, *bias;
  size_t count;
  TRY(tensor_data(ctx, 0, &q, &count));
  TRY(tensor_data(ctx, 1, &new_key, &count));
  TRY(tensor_data(ctx, 2, &new_value, &count));
  TRY(tensor_data(ctx, 3, &past_key, &count));
  TRY(tensor_data(ctx, 4, &past_value, &count));
  TRY(tensor_data(ctx, 5, &slots, &count));
  TRY(tensor_data(ctx, 6, &bias, &count));
  for (int64_t t = 0; t < s.rows; ++t) {
    const int64_t slot = ((const int64_t*)slots)[t];
    if (slot < 0 || slot >= s.context) return fail("CacheAttention: a cache slot lies outside the cache");
  }
  const size_t cache_bytes = sizeof(float) * (size_t)(s.kv_heads * s.context * s.head_dim);
  float* present[2];
  const void* past[2] = {past_key, past_value};
  const void* rows[2] = {new_key, new_value};
  for (int i = 0; i < 2; ++i) {
    OrtValue* value = NULL;
    TRY(g_api->KernelContext_GetOutput(ctx, (size_t)(1 + i), kv_dims, 4, &value));
    TRY(g_api->GetTensorMutableData(value, (void**)&present[i]));
    if ((const void*)present[i] != past[i]) memcpy(present[i], past[i], cache_bytes); /* not bound in place */
    attn_write_rows(&s, present[i], rows[i], slots);
  }
  int64_t out_dims[3] = {1, s.rows, s.heads * s.head_dim};
  OrtValue* out_value = NULL;
  float* out = NULL;
  TRY(g_api->KernelContext_GetOutput(ctx, 0, out_dims, 3, &out_value));
  TRY(g_api->GetTensorMutableData(out_value, (void**)&out));
  const int64_t tasks = attn_tasks(&s);
  float* scratch = malloc(sizeof(float) * (size_t)(tasks * attn_scratch_floats(&s)));
  if (!scratch) return g_api->CreateStatus(ORT_FAIL, "CacheAttention: out of memory");
  AttnTask task = {&s, q, present[0], present[1], bias, out, scratch};
  OrtStatus* status = g_api->KernelContext_ParallelFor(ctx, run_attention_task, (size_t)tasks, 0, &task);
  free(scratch);
  return status;
}

static OrtStatus* ORT_API_CALL compute(void* kernel_ptr, OrtKernelContext* ctx) {
  const Kernel* kernel = kernel_ptr;
  if (kernel->kind == CACHE_ATTENTION) return compute_attention(kernel, ctx);
  size_t rank = 0;
  int64_t dims[8];
  TRY(input_shape(ctx, 0, dims, 8, &rank));
  if (dims[rank - 1] != kernel->k) return fail("BlockMatMul: the last axis of X is not K");
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i) rows *= dims[i];

  const void *x, *codes, *scales, *offsets;
  size_t nx, ncodes, nscales, noffsets = 0;
  TRY(tensor_data(ctx, 0, &x, &nx));
  TRY(tensor_data(ctx, 1, &codes, &ncodes));
  TRY(tensor_data(ctx, 2, &scales, &nscales));
  size_t inputs = 0;
  TRY(g_api->KernelContext_GetInputCount(ctx, &inputs));
  offsets = NULL;
  if (inputs > 3) TRY(tensor_data(ctx, 3, &offsets, &noffsets));
  const int64_t blocks = kernel->n * (kernel->k / kernel->block);
  if ((int64_t)ncodes != blocks * kernel->block * kernel->bits / 8 || (int64_t)nscales != blocks ||
      (offsets && (int64_t)noffsets != blocks))
    return fail("BlockMatMul: codes / scales / offsets do not match K, N, bits and block_size");

  dims[rank - 1] = kernel->n;
  OrtValue* y_value = NULL;
  TRY(g_api->KernelContext_GetOutput(ctx, 0, dims, rank, &y_value));
  float* y = NULL;
  TRY(g_api->GetTensorMutableData(y_value, (void**)&y));
  if (rows == 0) return NULL;

  const int64_t nb = kernel->k / kernel->block;
  char* scratch = malloc((size_t)(rows * kernel->k + rows * nb * 12 + 64));
  if (!scratch) return g_api->CreateStatus(ORT_FAIL, "BlockMatMul: out of memory");
  BmRows q = {(int8_t*)scratch, (float*)(scratch + rows * kernel->k + 0 * rows * nb * 4),
              (int32_t*)(scratch + rows * kernel->k + 1 * rows * nb * 4),
              (float*)(scratch + rows * kernel->k + 2 * rows * nb * 4)};
  if ((rows * kernel->k) % 4) { /* keep the float arrays aligned */
    size_t pad = 4 - (size_t)((rows * kernel->k) % 4);
    q.d = (float*)((char*)q.d + pad);
    q.zsum = (int32_t*)((char*)q.zsum + pad);
    q.s = (float*)((char*)q.s + pad);
  }
  bm_quantize_rows(x, rows, kernel->k, kernel->block, (int)kernel->zero, &q);
  BmMatrix m = {kernel->n,           kernel->k, kernel->block, (int)kernel->bits, (int)kernel->zero,
                kernel->half_tables, codes,     scales,        offsets};
  const int64_t tiles = kernel->n / 16;
  Task task = {&m, bm_tiles_for(&m, kernel->vector), &q, rows, tiles, y};
  const size_t tasks = (size_t)((tiles + TILES_PER_TASK - 1) / TILES_PER_TASK);
  OrtStatus* status = g_api->KernelContext_ParallelFor(ctx, run_task, tasks, 0, &task);
  free(scratch);
  return status;
}

static void ORT_API_CALL destroy_kernel(void* kernel) { free(kernel); }
static const char* ORT_API_CALL op_name(const OrtCustomOp* op) { return ((const Op*)op)->name; }
static const char* ORT_API_CALL op_provider(const OrtCustomOp* op) { (void)op; return "CPUExecutionProvider"; }
static ONNXTensorElementDataType ORT_API_CALL input_type(const OrtCustomOp* op, size_t i) {
  if (((const Op*)op)->kind == CACHE_ATTENTION)
    return i == 5 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  if (i == 1) return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  if (i >= 2 && ((const Op*)op)->half_tables) return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t ORT_API_CALL input_count(const OrtCustomOp* op) {
  return ((const Op*)op)->kind == CACHE_ATTENTION ? 7 : 4;
}
static ONNXTensorElementDataType ORT_API_CALL output_type(const OrtCustomOp* op, size_t i) {
  (void)op; (void)i;
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t ORT_API_CALL output_count(const OrtCustomOp* op) {
  return ((const Op*)op)->kind == CACHE_ATTENTION ? 3 : 1;
}
static OrtCustomOpInputOutputCharacteristic ORT_API_CALL input_kind(const OrtCustomOp* op, size_t i) {
  return ((const Op*)op)->kind == BLOCK_MATMUL && i == 3 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}
static OrtCustomOpInputOutputCharacteristic ORT_API_CALL output_kind(const OrtCustomOp* op, size_t i) {
  (void)op; (void)i;
  return INPUT_OUTPUT_REQUIRED;
}
static OrtMemType ORT_API_CALL input_memory(const OrtCustomOp* op, size_t i) { (void)op; (void)i; return OrtMemTypeDefault; }
static int ORT_API_CALL variadic_arity(const OrtCustomOp* op) { (void)op; return 1; }
static int ORT_API_CALL variadic_homogeneity(const OrtCustomOp* op) { (void)op; return 1; }
static int ORT_API_CALL start_version(const OrtCustomOp* op) { (void)op; return 1; }
static int ORT_API_CALL end_version(const OrtCustomOp* op) { (void)op; return 2147483647; }
static size_t ORT_API_CALL no_pairs(int** in, int** out) { *in = NULL; *out = NULL; return 0; }
static void ORT_API_CALL release_pairs(int* in, int* out) { (void)in; (void)out; }

static Op g_ops[3];

const char* mtpedge_kernel_path(void) { return bm_path(); }

static void define(Op* op, OpKind kind, const char* name, int half_tables) {
  OrtCustomOp* o = &op->base;
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->name = name;
  op->half_tables = half_tables;
  o->version = ORT_API_VERSION;
  o->GetName = op_name;
  o->GetExecutionProviderType = op_provider;
  o->GetInputType = input_type;
  o->GetInputTypeCount = input_count;
  o->GetOutputType = output_type;
  o->GetOutputTypeCount = output_count;
  o->GetInputCharacteristic = input_kind;
  o->GetOutputCharacteristic = output_kind;
  o->GetInputMemoryType = input_memory;
  o->GetVariadicInputMinArity = variadic_arity;
  o->GetVariadicInputHomogeneity = variadic_homogeneity;
  o->GetVariadicOutputMinArity = variadic_arity;
  o->GetVariadicOutputHomogeneity = variadic_homogeneity;
  o->CreateKernelV2 = create_kernel;
  o->KernelComputeV2 = compute;
  o->KernelDestroy = destroy_kernel;
  o->GetStartVersion = start_version;
  o->GetEndVersion = end_version;
  o->GetMayInplace = no_pairs;
  o->ReleaseMayInplace = release_pairs;
  o->GetAliasMap = no_pairs;
  o->ReleaseAliasMap = release_pairs;
}

ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* base) {
  g_api = base->GetApi(ORT_API_VERSION);
  if (!g_api) return NULL; /* an onnxruntime older than 1.21: nothing to register with */
  if (!g_ops[0].name) { /* once: sessions registered earlier keep pointers to these */
    define(&g_ops[0], BLOCK_MATMUL, "BlockMatMul", 0);
    define(&g_ops[1], BLOCK_MATMUL, "BlockMatMulF16", 1);
    define(&g_ops[2], CACHE_ATTENTION, "CacheAttention", 0);
  }
  OrtCustomOpDomain* domain = NULL;
  TRY(g_api->CreateCustomOpDomain(DOMAIN, &domain));
  TRY(g_api->CustomOpDomain_Add(domain, &g_ops[0].base));
  TRY(g_api->CustomOpDomain_Add(domain, &g_ops[1].base));
  TRY(g_api->CustomOpDomain_Add(domain, &g_ops[2].base));
  return g_api->AddCustomOpDomain(options, domain);
}
