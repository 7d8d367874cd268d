/* Block-quantized weight products for onnxruntime's CPU: y = x @ W^T, W in GGUF-style blocks.
 *
 * Why a kernel of our own: onnxruntime's MatMulNBits quantizes activations per block (int8, like llama.cpp's
 * Q8 path) but computes each row of a call on its own, so a 16-row call costs about 16 one-row calls, and it
 * cannot apply a Q4_1 block minimum (the graph adds it with a second product: 13.5% of a one-row call).
 * Here the weights of a 16-column tile are unpacked once per block and used by every row of the call, the
 * block minimum is one more fused multiply-add, and a row's arithmetic does not depend on the other rows
 * (width invariance, which lossless drafting needs: benchmarks/results/fast/README.md section 12).
 *
 * Per row and block b of `block` inputs (activations quantized per block, as MatMulNBits at accuracy 4):
 *   d_a = max|x_b| / 127,  q = round(x_b / d_a),  S_b = sum(x_b)                     (once per row and block)
 *   y[n] += scale[n,b] * d_a * (sum_i u[n,i] q_i - zero * sum_i q_i) + offset[n,b] * S_b
 * u are the codes (0..2^bits-1), zero the code mapped to 0. Integer sums are exact; the float steps run in a
 * fixed order per row, whatever the row count, column split or thread count.
 *
 * Tiled code layout (written by export/native_matmul.py), G = block / 4 groups of 4 inputs per block:
 *   8-bit: codes[tile][b][g][16 columns][4 inputs]                       (block * 16 bytes per tile-block)
 *   4-bit: byte (h, j, t) = u[j][4h + t] | u[j][4(h + G/2) + t] << 4     (block * 8 bytes per tile-block)
 * scales / offsets: [tile][b][16] float32; or, with half tables, float16 scales d and float16 block minima m, the
 * offset then m + zero * d, computed here in float32 (zero is a power of two: the float32 table's value exactly).
 * Half tables read 20 bytes per 32 4-bit weights instead of 24, as llama.cpp's Q4_1 does.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block_matmul.h"

#define TILE 16     /* output columns per tile: one 512-bit register of float32 */
#define ROW_CHUNK 8 /* rows that share one unpacked block (two registers per row stay live) */

/* ---- activations: quantized once per call, shared by every column ---- */

void bm_quantize_rows(const float* x, int64_t rows, int64_t k, int64_t block, int zero, BmRows* out) {
  const int64_t nb = k / block;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * block;
      float amax = 0.f, sum = 0.f;
      for (int64_t i = 0; i < block; ++i) {
        float a = fabsf(xb[i]);
        amax = a > amax ? a : amax;
        sum += xb[i];
      }
      const float d = amax / 127.f;
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      int8_t* q = out->q + r * k + b * block;
      int32_t qsum = 0;
      for (int64_t i = 0; i < block; ++i) {
        int v = (int)nearbyintf(xb[i] * inv);
        v = v > 127 ? 127 : (v < -127 ? -127 : v);
        q[i] = (int8_t)v;
        qsum += v;
      }
      out->d[r * nb + b] = d;
      out->zsum[r * nb + b] = zero * qsum;
      out->s[r * nb + b] = sum;
    }
  }
}

/* ---- portable path: any CPU (the reference the vector path is tested against) ---- */

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 31, mantissa = h & 1023;
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa) { /* subnormal: the value is mantissa * 2^-24, exact in float32 */
    float v = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -v : v;
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* one block's 16 scales and offsets as float32, whatever the tables hold */
static void block_tables(const BmMatrix* m, int64_t index, float* scale, float* offset) {
  for (int j = 0; j < TILE; ++j) {
    if (m->half_tables) {
      scale[j] = half_to_float(((const uint16_t*)m->scales)[index + j]);
      offset[j] = m->offsets ? fmaf((float)m->zero, scale[j], half_to_float(((const uint16_t*)m->offsets)[index + j]))
                             : 0.f;
    } else {
      scale[j] = ((const float*)m->scales)[index + j];
      offset[j] = m->offsets ? ((const float*)m->offsets)[index + j] : 0.f;
    }
  }
}

static void code_of(const BmMatrix* m, int64_t tile, int64_t b, int j, int i, int* u) {
  const int g = i / 4, t = i % 4, groups = (int)(m->block / 4);
  if (m->bits == 8) {
    *u = m->codes[((tile * (m->k / m->block) + b) * groups + g) * 64 + j * 4 + t];
  } else {
    const int half = groups / 2, h = g % half;
    const uint8_t byte = m->codes[((tile * (m->k / m->block) + b) * half + h) * 64 + j * 4 + t];
    *u = g < half ? (byte & 15) : (byte >> 4);
  }
}

static void tiles_portable(const BmMatrix* m, const BmRows* a, int64_t rows, int64_t tile0, int64_t tile1,
                           float* y) {
  const int64_t nb = m->k / m->block;
  for (int64_t tile = tile0; tile < tile1; ++tile) {
    for (int64_t r = 0; r < rows; ++r) {
      float acc[TILE] = {0};
      for (int64_t b = 0; b < nb; ++b) {
        float sc[TILE], of[TILE];
        block_tables(m, (tile * nb + b) * TILE, sc, of);
        const int8_t* q = a->q + r * m->k + b * m->block;
        for (int j = 0; j < TILE; ++j) {
          int32_t dot = 0;
          for (int i = 0; i < m->block; ++i) {
            int u;
            code_of(m, tile, b, j, i, &u);
            dot += u * q[i];
          }
          dot -= a->zsum[r * nb + b];
          acc[j] = fmaf((float)dot, sc[j] * a->d[r * nb + b], acc[j]);
          if (m->offsets) acc[j] = fmaf(of[j], a->s[r * nb + b], acc[j]);
        }
      }
      memcpy(y + r * m->n + tile * TILE, acc, sizeof acc);
    }
  }
}

/* ---- AVX-512 VNNI path ---- */
#if defined(__x86_64__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline static

/* One tile x up to ROW_CHUNK rows; GROUPS and BITS are constants at every call site, so the loops unroll. */
AVX512 void tile_rows_avx512(const BmMatrix* m, const BmRows* a, int64_t r0, int nrows, int64_t tile,
                             float* y, const int GROUPS, const int BITS) {
  const int64_t nb = m->k / m->block;
  const int packed = BITS == 4 ? GROUPS / 2 : GROUPS;
  const __m512i nibble = _mm512_set1_epi8(15);
  __m512 acc[ROW_CHUNK];
  for (int r = 0; r < ROW_CHUNK; ++r) acc[r] = _mm512_setzero_ps();
  const uint8_t* codes = m->codes + tile * nb * packed * 64;
  for (int64_t b = 0; b < nb; ++b) {
    /* 4-bit: the high nibbles are used in place (16 u, still < 256): their dot is 16x, shifted back exactly */
    __m512i w[8];
    for (int h = 0; h < packed; ++h) {
      const __m512i v = _mm512_loadu_si512((const void*)(codes + (b * packed + h) * 64));
      if (BITS == 4) {
        w[h] = _mm512_and_si512(v, nibble);
        w[h + packed] = _mm512_andnot_si512(nibble, v);
      } else {
        w[h] = v;
      }
    }
    const int64_t at = (tile * nb + b) * TILE;
    __m512 scale, offset = _mm512_setzero_ps();
    if (m->half_tables) {
      scale = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)m->scales + at)));
      if (m->offsets)
        offset = _mm512_fmadd_ps(_mm512_set1_ps((float)m->zero), scale,
                                 _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)m->offsets + at))));
    } else {
      scale = _mm512_loadu_ps((const float*)m->scales + at);
      if (m->offsets) offset = _mm512_loadu_ps((const float*)m->offsets + at);
    }
    for (int r = 0; r < nrows; ++r) {
      const int64_t row = r0 + r;
      const int32_t* q = (const int32_t*)(a->q + row * m->k + b * m->block);
      /* two independent chains (integer sums: exact in any order) so that a one-row call is not bound by the
         latency of one chain of dependent dot-product instructions */
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      for (int g = 0; g < GROUPS / 2; ++g) {
        lo = _mm512_dpbusd_epi32(lo, w[g], _mm512_set1_epi32(q[g]));
        hi = _mm512_dpbusd_epi32(hi, w[g + GROUPS / 2], _mm512_set1_epi32(q[g + GROUPS / 2]));
      }
      __m512i dot = _mm512_add_epi32(lo, BITS == 4 ? _mm512_srai_epi32(hi, 4) : hi);
      dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(a->zsum[row * nb + b]));
      const __m512 rs = _mm512_mul_ps(scale, _mm512_set1_ps(a->d[row * nb + b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), rs, acc[r]);
      if (m->offsets) acc[r] = _mm512_fmadd_ps(offset, _mm512_set1_ps(a->s[row * nb + b]), acc[r]);
    }
  }
  for (int r = 0; r < nrows; ++r) _mm512_storeu_ps(y + (r0 + r) * m->n + tile * TILE, acc[r]);
}

#define TILES_AVX512(NAME, GROUPS, BITS)                                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vnni"))) static void NAME(                                     \
      const BmMatrix* m, const BmRows* a, int64_t rows, int64_t tile0, int64_t tile1, float* y) {               \
    for (int64_t tile = tile0; tile < tile1; ++tile)                                                           \
      for (int64_t r0 = 0; r0 < rows; r0 += ROW_CHUNK)                                                         \
        tile_rows_avx512(m, a, r0, (int)(rows - r0 < ROW_CHUNK ? rows - r0 : ROW_CHUNK), tile, y, GROUPS, BITS); \
  }
TILES_AVX512(tiles_avx512_4b32, 8, 4)
TILES_AVX512(tiles_avx512_4b16, 4, 4)
TILES_AVX512(tiles_avx512_8b32, 8, 8)
TILES_AVX512(tiles_avx512_8b16, 4, 8)

static int has_avx512_vnni(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}
#else
static int has_avx512_vnni(void) { return 0; }
#endif

int bm_vector_path(void) { return has_avx512_vnni() && !getenv("MTPEDGE_KERNELS_PORTABLE"); }

const char* bm_path(void) { return bm_vector_path() ? "avx512-vnni" : "portable"; }

static BmTiles tiles_fn(const BmMatrix* m, int vector) {
#if defined(__x86_64__)
  if (vector) {
    if (m->bits == 4 && m->block == 32) return tiles_avx512_4b32;
    if (m->bits == 4 && m->block == 16) return tiles_avx512_4b16;
    if (m->bits == 8 && m->block == 32) return tiles_avx512_8b32;
    if (m->bits == 8 && m->block == 16) return tiles_avx512_8b16;
  }
#else
  (void)m, (void)vector;
#endif
  return tiles_portable;
}

const char* bm_check(const BmMatrix* m) {
  if (m->bits != 4 && m->bits != 8) return "bits must be 4 or 8";
  if (m->block != 16 && m->block != 32) return "block_size must be 16 or 32";
  if (m->k <= 0 || m->k % m->block) return "K must be a positive multiple of block_size";
  if (m->n <= 0 || m->n % TILE) return "N must be a positive multiple of 16";
  return NULL;
}

BmTiles bm_tiles_for(const BmMatrix* m, int vector) { return tiles_fn(m, vector); }
