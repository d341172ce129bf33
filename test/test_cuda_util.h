/* What the GPU tests share (test_cuda_*.c): a CUDA runtime call that must
 * succeed, or the test exits with status 1 naming the call; the fast
 * configuration tables' candidate counts. */
#ifndef TA_TEST_CUDA_UTIL_H
#define TA_TEST_CUDA_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

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
    return d == 64 ? 7 : d == 96 ? 5 : d == 128 ? 8 : d == 256 ? 7 : 0;
}

/* Candidates of the fast MTA forward's table (cuda/ta_cuda_fast_mta.cu,
 * TA_CUDA_FAST_MTA_CFGS): tile_config in [0, this], the same for every head
 * dim it takes. */
#define TA_TEST_FAST_MTA_CFGS 3

#endif /* TA_TEST_CUDA_UTIL_H */
