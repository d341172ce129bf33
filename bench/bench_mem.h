/*
 * tileattn-bench's buffer providers: where a backend's tensors and workspace
 * live. Host memory (tileattn_bench.c) serves REF and CPU; device memory
 * (bench_mem_cuda.c, built with TILEATTN_CUDA) serves CUDA. The bench may
 * allocate; the library never does.
 */
#ifndef TA_BENCH_MEM_H
#define TA_BENCH_MEM_H

#include <stddef.h>

/* Every int-returning function returns 0 on success. */
typedef struct bench_mem {
    const char *name;
    void *(*alloc)(size_t bytes); /* TA_WORKSPACE_ALIGN-aligned; NULL on failure */
    void (*release)(void *ptr);
    int (*upload)(void *dst, const void *host_src, size_t bytes);
    int (*download)(void *host_dst, const void *src, size_t bytes);
    int (*fill)(void *dst, int byte, size_t bytes);
    int (*sync)(void); /* wait until the backend's queued work is done (timing) */
    void *stream;      /* passed to ta_fwd/ta_bwd; NULL: host backends, or CUDA's
                          legacy default stream */
} bench_mem;

#ifdef TA_BENCH_HAVE_CUDA
/* Device memory of the current CUDA device (cudaMalloc, synchronous copies,
 * the legacy default stream). */
extern const bench_mem bench_cuda_mem;

/* 0 if cudart sees a CUDA device; else -1 and why[n] says which of "no CUDA
 * device" and a driver/runtime error (with cudart's error name and text). */
int bench_cuda_probe(char *why, size_t n);
#endif

#endif /* TA_BENCH_MEM_H */
