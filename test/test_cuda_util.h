/* What the GPU tests share (test_cuda_*.c): a CUDA runtime call that must
 * succeed, or the test exits with status 1 naming the call; the fast
 * configuration tables' candidate counts. */
#ifndef TA_TEST_CUDA_UTIL_H
#define TA_TEST_CUDA_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "test_util.h"

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        const cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Candidates of head dim d in the fast configuration table: tile_config in
 * [0, this] (docs/cuda.md section 7, "Configurations"; written out here,
 * apart from cuda/ta_cuda_layout.c, so that a change to the table must be
 * made twice and the tests see it). 0 for a head dim not in the table. */
static inline int32_t ta_test_fast_candidates(int32_t d) {
    return d == 64 ? 9 : d == 96 ? 7 : d == 128 ? 10 : d == 256 ? 8 : 0;
}

/* Candidates of the fast MTA forward's table (cuda/ta_cuda_fast_mta.cu,
 * TA_CUDA_FAST_MTA_CFGS): tile_config in [0, this], the same for every head
 * dim it takes (5, the wgmma kernel, runs on sm_90 devices only).
 * ta_test_fast_mta_twin: a tile_config whose bits must equal cfg's: the
 * 64-key candidates 2, 3, 4 among themselves (the online softmax rescales at
 * the same keys), 0 and the default (5 on an sm_90 device, else 1), and 1 on
 * sm_90 and 5 themselves (run to run). */
#define TA_TEST_FAST_MTA_CFGS 5
static inline int32_t ta_test_fast_mta_twin(int32_t cfg, int sm90) {
    const int32_t def = sm90 ? 5 : 1;
    if (cfg == 0) return def;
    if (cfg == 1 || cfg == 5) return cfg == def ? 0 : cfg;
    return 2 + (cfg - 1) % 3;
}
/* The decode-shaped MTA kernel's candidates (at most 16 query rows:
 * cuda/ta_cuda_fast_decode.cu, ta_fast_mdec_cand): odd tile_configs the conv
 * on CUDA cores, even ones on tensor cores, 1 and 2 with raw scores per warp,
 * 3 and 4 shared by the block; 0 (and 5, which names the fold's wgmma
 * kernel) is 4 for more than 4 query rows, else 1. A twin has the same conv
 * and the other raw scores. */
static inline int32_t ta_test_fast_mdec_twin(int32_t cfg, int32_t seq_q) {
    const int32_t c = cfg > 0 && cfg <= 4 ? cfg : seq_q > 4 ? 4 : 1; /* the default */
    return (c + 1) % 4 + 1;                              /* 1 <-> 3, 2 <-> 4 */
}

/* The fast MTA tests' conv sizes (kind = a draw in [0, 5]): 6 x 11 (the
 * paper's), 7 x 7, 1 x 1, 16 x 31 (the largest), or any c_q in [1, 16] and
 * odd c_k in [1, 31]. */
static inline void ta_test_mta_conv(ta_rng *r, int32_t kind, ta_problem *p) {
    p->conv_q = kind == 0   ? 6
                : kind == 1 ? 7
                : kind == 2 ? 1
                : kind == 3 ? 16
                            : ta_rng_int(r, 1, 16);
    p->conv_k = kind == 0   ? 11
                : kind == 1 ? 7
                : kind == 2 ? 1
                : kind == 3 ? 31
                            : 2 * ta_rng_int(r, 0, 15) + 1;
}

/* Key lengths of p->batch entries (at most 4): 0, any, or S_k, a third each. */
static inline void ta_test_seqlens(ta_rng *r, const ta_problem *p, int32_t *seqlens) {
    int32_t b;
    for (b = 0; b < p->batch; ++b) {
        const int32_t kind = ta_rng_int(r, 0, 2);
        seqlens[b] = kind == 0 ? 0 : kind == 1 ? ta_rng_int(r, 0, p->seq_k) : p->seq_k;
    }
}

#endif /* TA_TEST_CUDA_UTIL_H */
