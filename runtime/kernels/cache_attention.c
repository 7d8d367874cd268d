/* Attention of a block's rows over the host KV cache, reading only the columns a row sees.
 *
 * Why: the exported graph attends over the whole static bucket (C columns) with ~15 onnxruntime kernels per layer
 * (scatter of the new rows, transposes, two products, the bias, softmax, reshapes): ~20% of a one-row call's node
 * time (benchmarks/results/fast/README.md section 30), however few columns are filled. Here each row reads the
 * columns up to the last one its bias opens, and skips the hidden ones inside (the graph's softmax gives them
 * exp(-1e9 - max) = 0 exactly, so leaving them out changes no sum).
 *
 * Per head h (key/value head g = h / (heads / kv_heads)) and row t, in this order:
 *   s_c = dot(q * scale, K_g[c]) + bias[t, c]       for each open column c, in column order
 *   p_c = exp(s_c - max s) / sum_c exp(s_c - max s)
 *   out[t, h] = sum_c p_c V_g[c]                    in column order
 * A row's arithmetic depends on its own q, bias row and the cache only: the same bits at every block width and
 * bucket size, which lossless drafting needs. The new rows are written into the cache first (present = past with
 * each row's key and value at its cache slot; in place when onnxruntime binds present to past's buffer).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache_attention.h"

void attn_write_rows(const AttnShape* s, float* cache, const float* rows, const int64_t* slots) {
  for (int64_t g = 0; g < s->kv_heads; ++g)
    for (int64_t t = 0; t < s->rows; ++t)
      memcpy(cache + (g * s->context + slots[t]) * s->head_dim, rows + (g * s->rows + t) * s->head_dim,
             sizeof(float) * (size_t)s->head_dim);
}

/* exp(x) for x <= 0: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p of degree 6 (relative error ~2e-7). The
   vector path runs the same operations lane by lane. */
#define EXP_C6 1.3888889e-3f
#define EXP_C5 8.3333333e-3f
#define EXP_C4 4.1666667e-2f
#define EXP_C3 1.6666667e-1f
#define EXP_C2 0.5f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.428606765330187e-06f

static float exp_nonpositive(float x) {
  if (x < -87.f) return 0.f;
  const float n = nearbyintf(x * 1.44269504f);
  const float r = fmaf(-n, LN2_LO, fmaf(-n, LN2_HI, x));
  float p = fmaf(EXP_C6, r, EXP_C5);
  p = fmaf(p, r, EXP_C4);
  p = fmaf(p, r, EXP_C3);
  p = fmaf(p, r, EXP_C2);
  p = fmaf(p, r, 1.f);
  p = fmaf(p, r, 1.f);
  const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n >= -126: a normal float */
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

/* the last column row t sees + 1 (0: none) */
static int64_t open_end(const AttnShape* s, const float* bias_row) {
  for (int64_t c = s->context; c > 0; --c)
    if (bias_row[c - 1] > s->masked_below) return c;
  return 0;
}

static void head_rows_portable(const AttnShape* s, const float* q, const float* key, const float* value,
                               const float* bias, float* out, int64_t h, float* scores) {
  const int64_t d_n = s->head_dim, g = h / (s->heads / s->kv_heads);
  const float* k_g = key + g * s->context * d_n;
  const float* v_g = value + g * s->context * d_n;
  for (int64_t t = 0; t < s->rows; ++t) {
    const float* b = bias + t * s->context;
    const float* qt = q + (h * s->rows + t) * d_n;
    float* o = out + (t * s->heads + h) * d_n;
    const int64_t end = open_end(s, b);
    float top = -INFINITY;
    for (int64_t c = 0; c < end; ++c) {
      if (!(b[c] > s->masked_below)) continue;
      float dot = 0.f;
      for (int64_t d = 0; d < d_n; ++d) dot = fmaf(qt[d] * s->scale, k_g[c * d_n + d], dot);
      scores[c] = dot + b[c];
      top = scores[c] > top ? scores[c] : top;
    }
    float sum = 0.f;
    for (int64_t c = 0; c < end; ++c)
      if (b[c] > s->masked_below) sum += scores[c] = exp_nonpositive(scores[c] - top);
    for (int64_t d = 0; d < d_n; ++d) o[d] = 0.f;
    for (int64_t c = 0; c < end; ++c) {
      if (!(b[c] > s->masked_below)) continue;
      const float p = scores[c] / sum;
      for (int64_t d = 0; d < d_n; ++d) o[d] = fmaf(p, v_g[c * d_n + d], o[d]);
    }
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define AVX512F __attribute__((target("avx512f")))

/* head_dim 64: four registers per key or value row */
AVX512F static void head_rows_avx512(const AttnShape* s, const float* q, const float* key, const float* value,
                                     const float* bias, float* out, int64_t h, float* scores) {
  const int64_t g = h / (s->heads / s->kv_heads);
  const float* k_g = key + g * s->context * 64;
  const float* v_g = value + g * s->context * 64;
  const __m512 scale = _mm512_set1_ps(s->scale);
  for (int64_t t = 0; t < s->rows; ++t) {
    const float* b = bias + t * s->context;
    const float* qt = q + (h * s->rows + t) * 64;
    float* o = out + (t * s->heads + h) * 64;
    const __m512 q0 = _mm512_mul_ps(_mm512_loadu_ps(qt), scale), q1 = _mm512_mul_ps(_mm512_loadu_ps(qt + 16), scale),
                 q2 = _mm512_mul_ps(_mm512_loadu_ps(qt + 32), scale), q3 = _mm512_mul_ps(_mm512_loadu_ps(qt + 48), scale);
    const int64_t end = open_end(s, b);
    float top = -INFINITY;
    for (int64_t c = 0; c < end; ++c) {
      if (!(b[c] > s->masked_below)) continue;
      const float* k = k_g + c * 64;
      __m512 acc = _mm512_mul_ps(q0, _mm512_loadu_ps(k));
      acc = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k + 16), acc);
      acc = _mm512_fmadd_ps(q2, _mm512_loadu_ps(k + 32), acc);
      acc = _mm512_fmadd_ps(q3, _mm512_loadu_ps(k + 48), acc);
      scores[c] = _mm512_reduce_add_ps(acc) + b[c];
      top = scores[c] > top ? scores[c] : top;
    }
    float sum = 0.f;
    for (int64_t c = 0; c < end; ++c)
      if (b[c] > s->masked_below) sum += scores[c] = exp_nonpositive(scores[c] - top);
    __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t c = 0; c < end; ++c) {
      if (!(b[c] > s->masked_below)) continue;
      const __m512 p = _mm512_set1_ps(scores[c] / sum);
      const float* v = v_g + c * 64;
      o0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v), o0);
      o1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16), o1);
      o2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 32), o2);
      o3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 48), o3);
    }
    _mm512_storeu_ps(o, o0);
    _mm512_storeu_ps(o + 16, o1);
    _mm512_storeu_ps(o + 32, o2);
    _mm512_storeu_ps(o + 48, o3);
  }
}

static int has_avx512f(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#endif

void attn_head(const AttnShape* s, const float* q, const float* key, const float* value, const float* bias,
               float* out, int64_t h, float* scores) {
#if defined(__x86_64__)
  if (s->head_dim == 64 && has_avx512f() && !getenv("MTPEDGE_KERNELS_PORTABLE")) {
    head_rows_avx512(s, q, key, value, bias, out, h, scores);
    return;
  }
#endif
  head_rows_portable(s, q, key, value, bias, out, h, scores);
}
