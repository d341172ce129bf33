/*
 * Host-side helpers shared by the CUDA launch code (cuda/ta_cuda_sdpa_*.cu),
 * defined in cuda/ta_cuda.cu. Not installed.
 */
#ifndef TA_CUDA_HOST_CUH
#define TA_CUDA_HOST_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "ta_internal.h"
}

/* seqlens_k entries per launch, passed by value in the kernel parameters
 * (problems with more batch entries take several launches). 2 KB of the 4 KB
 * parameter space every CUDA version allows. */
#define TA_CUDA_BATCH_CHUNK 512

/*
 * TA_OK if every non-NULL pointer of ptrs[0 .. n) is memory a kernel on the
 * current device may read and write: device memory of that device, managed
 * memory, or mapped pinned host memory (cudaHostAlloc) whose device address is
 * the host address. Pageable host memory and another device's memory give
 * TA_ERR_BAD_ARG; a failing CUDA call TA_ERR_DEVICE. Only the base address is
 * checked (CUDA cannot tell an allocation's extent cheaply).
 */
ta_status ta_cuda_check_pointers(const void *const *ptrs, int n);

/*
 * Opt kernel in to `max_bytes` of dynamic shared memory (above the 48 KB
 * default). Always the same value for a kernel, so concurrent callers set the
 * same attribute (reentrant). TA_ERR_DEVICE if the device has less.
 */
ta_status ta_cuda_opt_in_smem(const void *kernel, size_t max_bytes);

/*
 * The current device's largest dynamic shared memory per block after an opt-in
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KB on sm_90, 163 KB on sm_80,
 * 99 KB on sm_86/sm_89), into *bytes. A constant of the device, so a launcher
 * may cap its opt-in with it and stay reentrant. TA_ERR_DEVICE if the query fails.
 */
ta_status ta_cuda_smem_limit(size_t *bytes);

/*
 * Launch kernel(param) with TA_CUDA_THREADS threads per block and
 * min(n_blocks, 2^31 - 1) blocks (kernels loop over their tiles with a grid
 * stride, so any n_blocks >= 1 is covered) on stream. TA_ERR_DEVICE if the
 * launch fails.
 */
ta_status ta_cuda_launch(const void *kernel, int64_t n_blocks, size_t smem_bytes, void *param,
                         void *stream);

#endif /* TA_CUDA_HOST_CUH */
