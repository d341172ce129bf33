/*
 * CUDA backend: host-side probes. The exact-mode kernels land with the CUDA
 * backend issue; until then ta_backend_available(TA_BACKEND_CUDA) is 0. The
 * shared descriptor and math headers are compiled for the device here, so CI
 * (nvcc, no GPU) catches anything in them that is not device-clean.
 */
#include <cuda_runtime.h>

extern "C" {
#include "ta_internal.h"
#include "ta_math.h"
}

/* Instantiates the shared headers in device code (never launched here; the
 * GPU math test in test/ launches its own kernels). */
__global__ void ta_cuda_header_probe(const float *x, float *y, int32_t n) {
    const int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    ta_tiling t;
    if (i >= n) return;
    if (ta_tiling_make(&t, n, n, 64, 64, 6, 11, 1, TA_TILING_BWD, 1) != TA_OK) return;
    y[i] = ta_exp(x[i]) + ta_log(x[i]) + (float)ta_tile_k_end(&t, i / t.rows_eff, n) +
           ta_f16_to_f32(ta_f32_to_f16(x[i])) + ta_bf16_to_f32(ta_f32_to_bf16(x[i]));
}

extern "C" int ta_cuda_compiled(void) { return 1; }

extern "C" int ta_cuda_device_present(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    return n > 0;
}
