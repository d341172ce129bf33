/*
 * CUDA merge of partial attention results: split-K's last step and ta_merge
 * (docs/api.md, "Split-K and merge"). One thread per (row, feature) of the
 * output, rows = (b, h, r) of [B, H, S_q]: each thread runs src/ta_merge.h on
 * its row's parts (M, L, then its feature's ascending fmaf sum), the same
 * source and order as REF and CPU, so the same bits. The thread of feature 0
 * also writes the row's lse. Grid-stride, so any launch size covers every
 * element; one launch on the caller's stream, nothing synchronised.
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
    blocks = (prm.n_rows * pr->head_dim_v + threads - 1) / threads;
    args[0] = &prm;
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
