/* Attention of a block's rows over the host KV cache: see cache_attention.c. */
#ifndef MTPEDGE_CACHE_ATTENTION_H
#define MTPEDGE_CACHE_ATTENTION_H
#include <stdint.h>

typedef struct {
  int64_t heads, kv_heads, head_dim; /* query heads, key/value heads (heads is a multiple), per-head width */
  int64_t rows, context;             /* the block's rows T, the cache's columns C */
  float scale;                       /* multiplies q before the dot products */
  float masked_below;                /* a bias at or below this hides its column */
  int vector;                        /* the AVX-512 path (head_dim 64), as attn_vector_path said */
} AttnShape;

/* whether this CPU and environment take the AVX-512 path (MTPEDGE_KERNELS_PORTABLE: no); decided once per kernel */
int attn_vector_path(void);

/* cache (kv_heads, C, head_dim) <- rows (kv_heads, T, head_dim) at columns slots[T] */
void attn_write_rows(const AttnShape* s, float* cache, const float* rows, const int64_t* slots);
/* out (T, heads, head_dim) from q (heads, T, head_dim), key / value (kv_heads, C, head_dim), bias (T, C), in
   attn_tasks independent tasks (any order, any thread), each with attn_scratch_floats floats of its own */
int64_t attn_tasks(const AttnShape* s);
int64_t attn_scratch_floats(const AttnShape* s);
void attn_task(const AttnShape* s, const float* q, const float* key, const float* value, const float* bias,
               float* out, int64_t task, float* scratch);
#endif
