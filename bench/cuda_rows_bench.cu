/*
 * Shared-row layouts against HBM bandwidth (docs/cuda.md section 7, "Shared
 * rows"): blocks of 128 threads stream rows of 256 bytes (D = 128 bf16)
 * from device memory through shared memory by 16-byte cp.async, the way the
 * mma.sync kernels load K and V tiles (ta_fast_load_rows: a thread per
 * 16-byte chunk, two rows per warp instruction, 128-row tiles in three
 * buffers, the next two loading while one is "used"), with the tile's rows
 * in shared memory
 *
 *   padded    272 bytes apart (D + 8 elements: the kernels' layout before
 *             2026-12-03 and still that of the prefill mma.sync kernels),
 *   unpadded  256 bytes apart,
 *   swizzled  256 bytes apart, chunk c of row r at chunk c ^ (r & 7)
 *             (ta_fast_row_at with SW: the decode kernels' layout).
 *
 * Each layout with one and with two blocks per SM; the table gives the best
 * of 5 timed runs (CUDA events) as GB/s of rows read, and its ratio to a
 * device-to-device cudaMemcpy of the same bytes (read + write bytes over its
 * time) measured in the same run. Under ncu, --metrics
 * lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum
 * shows why padded rows lose: 2.6 L2 requests per 128-byte line and 1.5 L2
 * sectors per DRAM sector, against 1 and 1.
 *
 *   ./build/release/bench/cuda-rows-bench [rows per block, default 32768]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define ROWS_TILE 128 /* rows per tile */
#define STAGES    3   /* tile buffers */
#define THREADS   128

enum { PADDED = 0, UNPADDED = 1, SWIZZLED = 2 };

template <int MODE>
__global__ void __launch_bounds__(THREADS)
    rows_kernel(const uint16_t *src, int64_t rows_per_block, unsigned *sink) {
    extern __shared__ __align__(128) uint16_t sm[];
    constexpr int LD = MODE == PADDED ? 136 : 128; /* shared row, elements */
    const int c = (int)threadIdx.x % 16, r0 = (int)threadIdx.x / 16;
    const uint16_t *base = src + (int64_t)blockIdx.x * rows_per_block * 128;
    const int64_t tiles = rows_per_block / ROWS_TILE;
    auto load = [&](int64_t t, int buf) {
#pragma unroll
        for (int k = 0; k < ROWS_TILE / 8; ++k) {
            const int row = r0 + 8 * k;
            const int ch = MODE == SWIZZLED ? (c ^ (row & 7)) : c;
            const uint32_t d =
                (uint32_t)__cvta_generic_to_shared(sm + buf * ROWS_TILE * LD + row * LD + 8 * ch);
            const uint16_t *s = base + (t * ROWS_TILE + row) * 128 + 8 * c;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(s),
                         "r"(16));
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    unsigned acc = 0;
    for (int s = 0; s < STAGES - 1; ++s)
        load(s, s);
    for (int64_t t = 0; t < tiles; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();
        if (t + STAGES - 1 < tiles)
            load(t + STAGES - 1, (int)((t + STAGES - 1) % STAGES));
        else
            asm volatile("cp.async.commit_group;\n" ::);
        /* "use" the tile: one element per thread, so the loads are not dead */
        acc += sm[(t % STAGES) * ROWS_TILE * LD + threadIdx.x * 8];
    }
    if (acc == 0xdeadbeefu) *sink = acc;
}

static int check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) {
        fprintf(stderr, "cuda-rows-bench: %s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
    return 0;
}

int main(int argc, char **argv) {
    const int64_t per_sm_pair = argc > 1 ? atoll(argv[1]) : 32768;
    int dev = 0, sms = 0;
    cudaDeviceProp prop;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    sms = prop.multiProcessorCount;
    /* 2 sms blocks of per_sm_pair rows (or sms blocks of twice that) */
    const int64_t total_rows = 2 * (int64_t)sms * per_sm_pair;
    const size_t bytes = (size_t)total_rows * 256;
    uint16_t *src = NULL, *dst = NULL;
    unsigned *sink = NULL;
    cudaEvent_t a, b;
    check(cudaMalloc(&src, bytes), "cudaMalloc");
    check(cudaMalloc(&dst, bytes), "cudaMalloc");
    check(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
    check(cudaMemset(src, 0x3c, bytes), "cudaMemset");
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    float copy_ms = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
        float ms = 0.0f;
        check(cudaEventRecord(a), "cudaEventRecord");
        check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
        check(cudaEventRecord(b), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        if (rep > 0 && ms < copy_ms) copy_ms = ms;
    }
    const double copy_gbs = 2.0 * (double)bytes / copy_ms / 1e6;
    printf("device: %s, %d SMs; %.2f GB of 256-byte rows; copy (cudaMemcpy D2D, read + write): "
           "%.0f GB/s\n",
           prop.name, sms, (double)bytes / 1e9, copy_gbs);
    printf("%-9s %6s %6s | %8s %8s %8s\n", "layout", "blocks", "per SM", "ms", "GB/s", "x copy");
    const char *names[3] = {"padded", "unpadded", "swizzled"};
    void (*kernels[3])(const uint16_t *, int64_t, unsigned *) = {
        rows_kernel<PADDED>, rows_kernel<UNPADDED>, rows_kernel<SWIZZLED>};
    for (int m = 0; m < 3; ++m) {
        const int ld = m == PADDED ? 136 : 128;
        const size_t smem = (size_t)STAGES * ROWS_TILE * ld * 2;
        check(cudaFuncSetAttribute((const void *)kernels[m],
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              "cudaFuncSetAttribute");
        for (int per = 1; per <= 2; ++per) {
            const int blocks = per * sms;
            const int64_t rpb = total_rows / blocks;
            float best = 1e30f;
            for (int rep = 0; rep < 6; ++rep) {
                float ms = 0.0f;
                check(cudaEventRecord(a), "cudaEventRecord");
                kernels[m]<<<blocks, THREADS, smem>>>(src, rpb, sink);
                check(cudaGetLastError(), "launch");
                check(cudaEventRecord(b), "cudaEventRecord");
                check(cudaEventSynchronize(b), "cudaEventSynchronize");
                check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
                if (rep > 0 && ms < best) best = ms;
            }
            const double gbs = (double)bytes / best / 1e6;
            printf("%-9s %6d %6d | %8.3f %8.0f %8.3f\n", names[m], blocks, per, best, gbs,
                   gbs / copy_gbs);
        }
    }
    check(cudaFree(src), "cudaFree");
    check(cudaFree(dst), "cudaFree");
    check(cudaFree(sink), "cudaFree");
    return 0;
}
