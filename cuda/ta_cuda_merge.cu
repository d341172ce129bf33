/*
 * CUDA merge of partial attention results: split-K's last step and ta_merge
 * (docs/api.md, "Split-K and merge"), rows = (b, h, r) of [B, H, S_q]. Up to
 * TA_MERGE_ROW_PARTS parts, a block per row (ta_cuda_merge_row_kernel: the
 * row's M, weights and L once, then a thread per feature); more, a thread
 * per (row, feature) running src/ta_merge.h on its row's parts
 * (ta_cuda_merge_kernel: M, L, then its feature's ascending fmaf sum). Both
 * are the operations and the order of REF and CPU, so the same bits. lse is
 * written by one thread of the row. Grid-stride, so any launch size covers
 * every element; one launch on the caller's stream, nothing synchronised.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_host.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
#include "ta_math.h"
#include "ta_merge.h"
}

/* The merge kernel's parameters (by value). */
struct ta_cuda_merge_params {
    const void *o_parts;    /* [n, B, H, S_q, D_v] parts_dt, contiguous */
    const float *lse_parts; /* [n, B, H, S_q] */
    void *o;                /* [B, H, S_q, D_v] dtype, strides o_str */
    float *lse;             /* [B, H, S_q] or NULL */
    ta_strides o_str;
    int64_t n_rows; /* B H S_q */
    int32_t heads_q, seq_q, head_dim_v, n;
    int32_t parts_dt, dtype; /* ta_dtype */
};

/* Element idx of o in dtype dt (the forwards' ta_cuda_store, picked at run time). */
static __device__ __forceinline__ void ta_cuda_merge_store(void *base, int32_t dt, size_t idx,
                                                           float x) {
    if (dt == TA_F16)
        ta_cuda_store<TA_F16>(base, idx, x);
    else if (dt == TA_BF16)
        ta_cuda_store<TA_BF16>(base, idx, x);
    else
        ta_cuda_store<TA_F32>(base, idx, x);
}

__global__ void __launch_bounds__(256)
    ta_cuda_merge_kernel(const __grid_constant__ ta_cuda_merge_params p) {
    const int64_t n_elems = p.n_rows * p.head_dim_v;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_elems;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = e / p.head_dim_v;
        const int32_t d = (int32_t)(e % p.head_dim_v);
        const int32_t r = (int32_t)(row % p.seq_q);
        const int32_t h = (int32_t)(row / p.seq_q % p.heads_q);
        const int32_t b = (int32_t)(row / p.seq_q / p.heads_q);
        const size_t out =
            (size_t)(ta_strides_slice(&p.o_str, b, h) + (int64_t)r * p.o_str.seq + d);
        const float *lse = p.lse_parts + row;
        const float m = ta_merge_max(lse, (size_t)p.n_rows, p.n);
        float x, lse_out;
        if (ta_merge_live(m)) {
            const float l = ta_merge_sum(lse, (size_t)p.n_rows, p.n, m);
            x = ta_merge_feature(p.o_parts, (ta_dtype)p.parts_dt, (size_t)e, (size_t)(n_elems), lse,
                                 (size_t)p.n_rows, p.n, m, l);
            lse_out = ta_merge_lse(m, l);
        } else { /* every part empty: o = 0, lse = -inf */
            x = 0.0f;
            lse_out = m;
        }
        ta_cuda_merge_store(p.o, p.dtype, out, x);
        if (d == 0 && p.lse) p.lse[row] = lse_out;
    }
}

/* Parts per row the row kernel stages in shared memory; calls with more
 * parts run ta_cuda_merge_kernel. */
#define TA_MERGE_ROW_PARTS   256
#define TA_MERGE_ROW_THREADS 128

/*
 * One block per row (grid-stride over rows), the same operations in the same
 * order as ta_cuda_merge_kernel (src/ta_merge.h), so the same bits: the
 * row's lse_s staged in shared memory, M = ta_merge_max over them (thread
 * 0, s ascending), each part's weight w_s = ta_merge_weight(lse_s, M) once
 * (thread s, not once per feature), L = the ascending `+` of the live
 * weights (thread 0, ta_merge_sum's sum), then each feature's ascending fmaf
 * chain over the live parts (thread d; every part's element is loaded, a
 * dead part's is not used, so the loads need not wait on the test) and
 * acc / L. Where each thread of ta_cuda_merge_kernel evaluated 2 n
 * exponentials and 3 n dependent loads, a row here costs n exponentials;
 * H200, decode (8 .. 32 parts): 7-22 us -> bench/results (docs/cuda.md,
 * "Split-K and the merge kernel").
 */
__global__ void __launch_bounds__(TA_MERGE_ROW_THREADS)
    ta_cuda_merge_row_kernel(const __grid_constant__ ta_cuda_merge_params p) {
    __shared__ float sl[TA_MERGE_ROW_PARTS], sw[TA_MERGE_ROW_PARTS];
    __shared__ float s_m, s_l;
    const int tid = (int)threadIdx.x;
    const int64_t n_elems = p.n_rows * p.head_dim_v;
    for (int64_t row = blockIdx.x; row < p.n_rows; row += gridDim.x) {
        const int32_t r = (int32_t)(row % p.seq_q);
        const int32_t h = (int32_t)(row / p.seq_q % p.heads_q);
        const int32_t b = (int32_t)(row / p.seq_q / p.heads_q);
        float m, l = 0.0f;
        int live;
        for (int s = tid; s < p.n; s += blockDim.x)
            sl[s] = p.lse_parts[row + (int64_t)s * p.n_rows];
        __syncthreads();
        if (tid == 0) s_m = ta_merge_max(sl, 1, p.n);
        __syncthreads();
        m = s_m;
        live = ta_merge_live(m); /* the same for every thread of the row */
        if (live) {
            for (int s = tid; s < p.n; s += blockDim.x)
                sw[s] = ta_merge_live(sl[s]) ? ta_merge_weight(sl[s], m) : 0.0f;
            __syncthreads();
            if (tid == 0) {
                float sum = 0.0f;
                for (int s = 0; s < p.n; ++s)
                    if (ta_merge_live(sl[s])) sum = sum + sw[s];
                s_l = sum;
            }
            __syncthreads();
            l = s_l;
        }
        for (int32_t d = tid; d < p.head_dim_v; d += (int32_t)blockDim.x) {
            const size_t out =
                (size_t)(ta_strides_slice(&p.o_str, b, h) + (int64_t)r * p.o_str.seq + d);
            float x = 0.0f; /* every part empty: o = 0 */
            if (live) {
                float acc = -0.0f; /* ta_merge_feature's start */
                const size_t e = (size_t)(row * p.head_dim_v + d);
#pragma unroll 4
                for (int s = 0; s < p.n; ++s) {
                    const float v = ta_merge_load(p.o_parts, (ta_dtype)p.parts_dt,
                                                  e + (size_t)s * (size_t)n_elems);
                    if (ta_merge_live(sl[s])) acc = TA_FMAF(sw[s], v, acc);
                }
                x = acc / l;
            }
            ta_cuda_merge_store(p.o, p.dtype, out, x);
        }
        if (tid == 0 && p.lse) p.lse[row] = live ? ta_merge_lse(m, l) : m;
        __syncthreads(); /* the next row's lse_s and weights over these */
    }
}

extern "C" ta_status ta_cuda_merge_parts(const ta_plan *plan, const void *o_parts,
                                         ta_dtype parts_dt, const float *lse_parts, int32_t n,
                                         void *o, float *lse, void *stream) {
    const ta_problem *pr = &plan->p;
    const int64_t threads = 256, blocks_max = 65536;
    ta_cuda_merge_params prm;
    void *args[1];
    int64_t blocks;
    prm.o_parts = o_parts;
    prm.lse_parts = lse_parts;
    prm.o = o;
    prm.lse = lse;
    prm.o_str = plan->layout.o;
    prm.n_rows = (int64_t)plan->n_lse;
    prm.heads_q = pr->heads_q;
    prm.seq_q = pr->seq_q;
    prm.head_dim_v = pr->head_dim_v;
    prm.n = n;
    prm.parts_dt = (int32_t)parts_dt;
    prm.dtype = (int32_t)pr->dtype;
    args[0] = &prm;
    if (n <= TA_MERGE_ROW_PARTS)
        return ta_cuda_launch_threads(reinterpret_cast<const void *>(&ta_cuda_merge_row_kernel),
                                      prm.n_rows < blocks_max ? prm.n_rows : blocks_max,
                                      TA_MERGE_ROW_THREADS, 0, args, stream);
    blocks = (prm.n_rows * pr->head_dim_v + threads - 1) / threads;
    return ta_cuda_launch_threads(reinterpret_cast<const void *>(&ta_cuda_merge_kernel),
                                  blocks < blocks_max ? blocks : blocks_max, (int)threads, 0, args,
                                  stream);
}

extern "C" ta_status ta_cuda_merge(const ta_plan *plan, const ta_merge_args *a, void *stream) {
    const void *ptrs[4] = {a->o_parts, a->lse_parts, a->o, a->lse};
    const ta_status st = ta_cuda_check_pointers(ptrs, 4);
    if (st != TA_OK) return st;
    return ta_cuda_merge_parts(plan, a->o_parts, plan->p.dtype, a->lse_parts, a->num_parts, a->o,
                               a->lse, stream);
}
