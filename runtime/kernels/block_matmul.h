/* Block-quantized weight products: see block_matmul.c. */
#ifndef MTPEDGE_BLOCK_MATMUL_H
#define MTPEDGE_BLOCK_MATMUL_H
#include <stdint.h>

typedef struct {
  int64_t n, k, block; /* outputs, inputs, inputs per block (16 or 32) */
  int bits, zero;      /* code width (4 or 8) and the code that stands for 0 */
  int half_tables;     /* 0: float32 scales and offsets; 1: float16 scales and block minima (see block_matmul.c) */
  const uint8_t* codes;
  const void* scales;
  const void* offsets; /* NULL: no block minimum */
} BmMatrix;

typedef struct {    /* rows of activations, quantized per block */
  int8_t* q;        /* [rows][k] */
  float* d;         /* [rows][k / block] scale of each block */
  int32_t* zsum;    /* [rows][k / block] zero * sum(q) */
  float* s;         /* [rows][k / block] float sum of the block's inputs */
} BmRows;

/* y[rows][tile0 * 16 .. tile1 * 16) of the product */
typedef void (*BmTiles)(const BmMatrix* m, const BmRows* a, int64_t rows, int64_t tile0, int64_t tile1, float* y);

const char* bm_check(const BmMatrix* m); /* NULL when the shapes are supported, else why not */
/* whether this CPU and environment take the AVX-512 VNNI path (MTPEDGE_KERNELS_PORTABLE: no); decided once per
   kernel, not per call: it reads the environment */
int bm_vector_path(void);
const char* bm_path(void); /* "avx512-vnni" or "portable" */
void bm_quantize_rows(const float* x, int64_t rows, int64_t k, int64_t block, int zero, BmRows* out);
BmTiles bm_tiles_for(const BmMatrix* m, int vector); /* the code of m's format on the path `vector` says */
#endif
