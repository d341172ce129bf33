/*
 * tileattn-bench's device-memory provider (bench_mem.h) for TA_BACKEND_CUDA:
 * cudaMalloc'd buffers (256-byte aligned, so TA_WORKSPACE_ALIGN holds),
 * synchronous copies and fills, the legacy default stream for the library's
 * calls, and cudaStreamSynchronize on it as the timing barrier. Every CUDA call
 * is checked; a failure returns -1 (the bench reports it in the row).
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "bench_mem.h"

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}
static void cuda_release(void *ptr) {
    if (ptr) (void)cudaFree(ptr);
}
static int cuda_upload(void *dst, const void *host_src, size_t bytes) {
    return cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}
static int cuda_download(void *host_dst, const void *src, size_t bytes) {
    return cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}
static int cuda_fill(void *dst, int byte, size_t bytes) {
    return cudaMemset(dst, byte, bytes) == cudaSuccess ? 0 : -1;
}
static int cuda_sync(void) { return cudaStreamSynchronize(0) == cudaSuccess ? 0 : -1; }

const bench_mem bench_cuda_mem = {"cuda device", cuda_alloc, cuda_release, cuda_upload,
                                  cuda_download, cuda_fill,  cuda_sync,    NULL};

int bench_cuda_probe(char *why, size_t n) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return 0;
    if (e == cudaSuccess || e == cudaErrorNoDevice)
        snprintf(why, n, "no CUDA device (cudaGetDeviceCount: %s)",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    else if (e == cudaErrorInsufficientDriver) /* also what a machine without a driver says */
        snprintf(why, n, "no usable CUDA driver: none installed, or older than the CUDA "
                         "runtime (cudaGetDeviceCount: cudaErrorInsufficientDriver)");
    else
        snprintf(why, n, "CUDA driver error (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
}
