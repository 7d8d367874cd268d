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

static void row_portable(const AttnShape* s, const float* q, const float* key, const float* value, const float* bias,
                         float* out, int64_t h, int64_t t, float* scores) {
  const int64_t d_n = s->head_dim, g = h / (s->heads / s->kv_heads);
  const float* k_g = key + g * s->context * d_n;
  const float* v_g = value + g * s->context * d_n;
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

/* the rows of key/value head g are its heads' block rows, r = (head in group) * T + t; a task takes 16 of them
   where 16 rows share registers, else one (so that a one-row call spreads over the threads too) */
#define LANE_ROWS 8 /* from this many rows of a group on, scores are computed 16 rows per register */

static int64_t group_rows(const AttnShape* s) { return s->heads / s->kv_heads * s->rows; }
static int64_t task_rows(const AttnShape* s) { return group_rows(s) >= LANE_ROWS ? 16 : 1; }

int64_t attn_tasks(const AttnShape* s) {
  return s->kv_heads * ((group_rows(s) + task_rows(s) - 1) / task_rows(s));
}

int64_t attn_scratch_floats(const AttnShape* s) {
  return 16 * 64 + 64 * 16 + 16 * ((s->context + 15) / 16 * 16);
}

#if defined(__x86_64__)
#include <immintrin.h>
#define AVX512F __attribute__((target("avx512f")))

/* v[0] + ... + v[15] as ((v_l + v_l+8) + (v_l+4 ...)) ...: the tree the 16-row path below repeats across
   registers, so that both give the same bits */
AVX512F static float sum16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* exp_nonpositive lane by lane, the same operations */
AVX512F static __m512 exp16(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EXP_C6), r, _mm512_set1_ps(EXP_C5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(bits));
}

/* scores of one row (q already scaled) over its open columns, one column at a time */
AVX512F static void row_scores(const AttnShape* s, const float* qs, const float* k_g, const float* b, int64_t end,
                               float* scores) {
  const __m512 q0 = _mm512_loadu_ps(qs), q1 = _mm512_loadu_ps(qs + 16), q2 = _mm512_loadu_ps(qs + 32),
               q3 = _mm512_loadu_ps(qs + 48);
  for (int64_t c = 0; c < end; ++c) {
    if (!(b[c] > s->masked_below)) {
      scores[c] = -INFINITY;
      continue;
    }
    const float* k = k_g + c * 64;
    __m512 acc = _mm512_mul_ps(q0, _mm512_loadu_ps(k));
    acc = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k + 16), acc);
    acc = _mm512_fmadd_ps(q2, _mm512_loadu_ps(k + 32), acc);
    acc = _mm512_fmadd_ps(q3, _mm512_loadu_ps(k + 48), acc);
    scores[c] = sum16(acc) + b[c];
  }
}

/* the same scores for up to 16 rows at once, one row per lane: lane r of P_l holds what lane l of row r's
   accumulator holds above, and the P_l are summed in sum16's tree */
AVX512F static void lane_scores(const AttnShape* s, const float* qs, int nrows, const float* k_g,
                                const float* const* b, const int64_t* end, float* const* scores, float* qt) {
  for (int d = 0; d < 64; ++d)
    for (int r = 0; r < 16; ++r) qt[d * 16 + r] = r < nrows ? qs[r * 64 + d] : 0.f;
  int64_t last = 0;
  for (int r = 0; r < nrows; ++r) last = end[r] > last ? end[r] : last;
  for (int64_t c = 0; c < last; ++c) {
    const float* k = k_g + c * 64;
    __m512 p[16];
    for (int l = 0; l < 16; ++l) {
      p[l] = _mm512_mul_ps(_mm512_loadu_ps(qt + l * 16), _mm512_set1_ps(k[l]));
      p[l] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + (l + 16) * 16), _mm512_set1_ps(k[l + 16]), p[l]);
      p[l] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + (l + 32) * 16), _mm512_set1_ps(k[l + 32]), p[l]);
      p[l] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + (l + 48) * 16), _mm512_set1_ps(k[l + 48]), p[l]);
    }
    for (int l = 0; l < 8; ++l) p[l] = _mm512_add_ps(p[l], p[l + 8]);
    for (int l = 0; l < 4; ++l) p[l] = _mm512_add_ps(p[l], p[l + 4]);
    const __m512 sums = _mm512_add_ps(_mm512_add_ps(p[0], p[2]), _mm512_add_ps(p[1], p[3]));
    float lane[16];
    _mm512_storeu_ps(lane, sums);
    for (int r = 0; r < nrows; ++r)
      if (c < end[r]) scores[r][c] = b[r][c] > s->masked_below ? lane[r] + b[r][c] : -INFINITY;
  }
}

/* softmax over a row's scores (-inf = hidden) and the weighted sum of values, shared by both score paths */
AVX512F static void row_output(const float* v_g, int64_t end, float* scores, float* o) {
  const int64_t blocks = (end + 15) / 16;
  for (int64_t c = end; c < blocks * 16; ++c) scores[c] = -INFINITY;
  __m512 top = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < blocks; ++i) top = _mm512_max_ps(top, _mm512_loadu_ps(scores + i * 16));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(top));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + i * 16), m));
    _mm512_storeu_ps(scores + i * 16, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 total = _mm512_set1_ps(sum16(sum));
  for (int64_t i = 0; i < blocks; ++i)
    _mm512_storeu_ps(scores + i * 16, _mm512_div_ps(_mm512_loadu_ps(scores + i * 16), total));
  __m512 o0 = _mm512_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
  for (int64_t c = 0; c < end; ++c) {
    if (scores[c] == 0.f) continue; /* hidden, or too small to count: adding 0 * v changes nothing */
    const __m512 p = _mm512_set1_ps(scores[c]);
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

/* rows [r0, r0 + n) of key/value head g (head_dim 64, n <= 16) */
AVX512F static void rows_avx512(const AttnShape* s, const float* q, const float* key, const float* value,
                                const float* bias, float* out, int64_t g, int64_t r0, int n, float* scratch) {
  const int64_t per_group = s->heads / s->kv_heads, width = (s->context + 15) / 16 * 16;
  const float* k_g = key + g * s->context * 64;
  const float* v_g = value + g * s->context * 64;
  float* qs = scratch;          /* 16 x 64 scaled queries */
  float* qt = qs + 16 * 64;     /* 64 x 16 */
  float* scores = qt + 64 * 16; /* 16 x width */
  const __m512 scale = _mm512_set1_ps(s->scale);
  const float* b[16];
  int64_t end[16];
  float* sc[16];
  for (int i = 0; i < n; ++i) {
    const int64_t r = r0 + i, h = g * per_group + r / s->rows, t = r % s->rows;
    const float* qr = q + (h * s->rows + t) * 64;
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(qs + i * 64 + j * 16, _mm512_mul_ps(_mm512_loadu_ps(qr + j * 16), scale));
    b[i] = bias + t * s->context;
    end[i] = open_end(s, b[i]);
    sc[i] = scores + i * width;
  }
  if (group_rows(s) >= LANE_ROWS) {
    lane_scores(s, qs, n, k_g, b, end, sc, qt);
  } else {
    for (int i = 0; i < n; ++i) row_scores(s, qs + i * 64, k_g, b[i], end[i], sc[i]);
  }
  for (int i = 0; i < n; ++i) {
    const int64_t r = r0 + i;
    row_output(v_g, end[i], sc[i], out + ((r % s->rows) * s->heads + g * per_group + r / s->rows) * 64);
  }
}

static int has_avx512f(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
static int has_avx512f(void) { return 0; }
#endif

int attn_vector_path(void) { return has_avx512f() && !getenv("MTPEDGE_KERNELS_PORTABLE"); }

void attn_task(const AttnShape* s, const float* q, const float* key, const float* value, const float* bias,
               float* out, int64_t task, float* scratch) {
  const int64_t per_task = task_rows(s), chunks = (group_rows(s) + per_task - 1) / per_task;
  const int64_t g = task / chunks, r0 = task % chunks * per_task;
  const int n = (int)(group_rows(s) - r0 < per_task ? group_rows(s) - r0 : per_task);
#if defined(__x86_64__)
  if (s->vector && s->head_dim == 64) {
    rows_avx512(s, q, key, value, bias, out, g, r0, n, scratch);
    return;
  }
#endif
  const int64_t per_group = s->heads / s->kv_heads;
  for (int64_t r = r0; r < r0 + n; ++r)
    row_portable(s, q, key, value, bias, out, g * per_group + r / s->rows, r % s->rows, scratch);
}
