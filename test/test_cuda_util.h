/* What the GPU tests share (test_cuda_*.c): a CUDA runtime call that must
 * succeed, or the test exits with status 1 naming the call. */
#ifndef TA_TEST_CUDA_UTIL_H
#define TA_TEST_CUDA_UTIL_H

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

#endif /* TA_TEST_CUDA_UTIL_H */
