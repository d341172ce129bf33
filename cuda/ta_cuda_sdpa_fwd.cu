/*
 * CUDA SDPA forward, TA_PRECISION_EXACT: bit-identical to ref/ta_ref_sdpa_fwd.c
 * (docs/reference.md section 2) for every dtype, mask, GQA and block size.
 *
 * One block per (batch b, query head h, CUDA Q tile) of 64 rows. The k tiles are
 * the plan's (cols_eff = block_k: the contract fixes where the online softmax
 * rescales); the rows are the backend's choice (rows are independent,
 * docs/design.md 3.5), so the tiling this kernel runs is
 * ta_cuda_tiling(plan, 64, block_k) (the plan's mask: causal, seqlens_k,
 * window) and each row tile's context (ta_cuda_context) gives its key length,
 * slices and K tiles [k_begin, k_end). For each of those k tiles, ascending:
 *   1. scores   s[i][j] = scale * dot(q_i, k_j, D)   threads over (i, j); with
 *               the rotary stage (p.rope) q_i and k_j turned as they are staged
 *   2. row max  m_tile, m_new, alpha = exp(m - m_new) one thread per row, j ascending
 *   3. p[i][j] = exp(s[i][j] - m_new[i])            threads over (i, j), visible only
 *   4. (l, l_lo) = (l, l_lo) * alpha + sum_j p       one thread per row, j ascending
 *   5. part = sum_j p[i][j] v[j] from +0             threads over (i, d), j ascending
 *      (acc, acc_lo) = (acc, acc_lo) * alpha + part  (src/ta_sum2.h)
 * then o = acc / l, lse = m + log(l) (rows that saw no key: 0, -inf). Split-K
 * (plan->fwd.num_splits = n > 1): one block per (b, h, Q tile, part), each
 * visiting its part's K tiles (ta_tile_split_visit) and storing its (o_s,
 * lse_s) in f32 into the workspace; the merge kernel (cuda/ta_cuda_merge.cu)
 * then writes o and lse. Steps 2-5
 * visit row i's visible columns of the tile only, [max(lo_i, col0), min(hi_i,
 * col0 + cols)) for its key interval [lo_i, hi_i) (ta_cuda_row_keys): masked
 * entries are skipped, never added as zeros. Row r of a tensor slice is at
 * the context's offset + r * its seq stride (any layout); with a paged KV
 * cache (p.block_table set) key j's k and v rows are at their pool row
 * (ta_cuda_kv_row): the same keys in the same order, the same bits.
 *
 * Where the MTA conv goes: step 1 computes raw scores on the loaded region
 * (ta_tile_row_load_begin.., ta_tile_col_load_begin..), the conv maps them to
 * the effective region, and steps 2-5 read the convolved scores. For SDPA both
 * regions coincide and the conv step is absent.
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
}

/* Dynamic shared memory: the forwards' table (cuda/ta_cuda_tile.cuh) without
 * the MTA regions: st [cols_cap][LDT] (scores, then p, of one k tile,
 * transposed: st[j][i]), stage, the row arrays. */
static __host__ __device__ ta_cuda_fwd_smem ta_cuda_sdpa_fwd_smem(int32_t cols_cap) {
    return ta_cuda_fwd_smem_make(cols_cap, 0, 0);
}

template <int DT, int NS, bool WL, bool ROPE, bool LAT>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_fwd_kernel(const __grid_constant__ ta_cuda_params p) {
    extern __shared__ float4 ta_cuda_fwd_dyn_smem[];
    __shared__ ta_cuda_slot v_slots[TA_CUDA_SLOTS];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const int32_t cols_cap = ta_cuda_fwd_cols_cap(&t), n_qt = t.num_q_tiles;
    const ta_cuda_fwd_smem sm = ta_cuda_sdpa_fwd_smem(cols_cap);
    float *base = reinterpret_cast<float *>(ta_cuda_fwd_dyn_smem);
    float *st = base + sm.st, *stage = base + sm.stage;
    float *m_run = base + sm.m_run, *l_run = base + sm.l_run, *l_lo = base + sm.l_lo;
    float *m_new = base + sm.m_new, *alpha = base + sm.alpha;
    int32_t *key_lo = reinterpret_cast<int32_t *>(base + sm.key_lo);
    int32_t *key_hi = reinterpret_cast<int32_t *>(base + sm.key_hi);
    int32_t *tile_lo = reinterpret_cast<int32_t *>(base + sm.tile_lo);
    int32_t *tile_hi = reinterpret_cast<int32_t *>(base + sm.tile_hi);
    const int32_t n_split = t.num_splits; /* split-K: parts per Q tile (1: none) */
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const int32_t qt = at.qt;
        const ta_tile_ctx &c = ctx_s; /* the tile's context: made once, read where used */
        const int32_t row0 = ta_tile_row_eff_begin(&t, qt);
        const int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
        float acc[4][NS][4]; /* acc[row 4ty+r][feature s*64 + 4tx + e]: the pairs' hi words */
        float acc_lo[4][NS][4]; /* their lo words (src/ta_sum2.h) */
        int32_t kt, k_first, k_last;
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(acc_lo);
        /* init: m = -inf, l = 0 per row; the visible key interval of each row;
         * the V slots on this tile's kv slice */
        __syncthreads(); /* the previous tile is done with the row arrays and slots */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, qt);
        __syncthreads();
        if (tid < TA_CUDA_TILE) {
            m_run[tid] = ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
            l_run[tid] = l_lo[tid] = 0.0f;
            ta_cuda_row_keys(&t, tid < rows ? row0 + tid : -1, c.key_len, &key_lo[tid],
                             &key_hi[tid]);
        }
        if (tid < NS)
            v_slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.v, c.v, p.lay.v.seq), p.head_dim_v,
                                           tid * TA_CUDA_SLOT);
        /* the context's K tiles [k_begin, k_end) of this part, ascending; the
         * others are fully masked (or another part's) */
        ta_tile_split_visit(&t, c.key_len, split, c.k_begin, c.k_end, &k_first, &k_last);
        for (kt = k_first; kt < k_last; ++kt) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, kt);
            const int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
            int32_t c0;
            /* step 1: s[i][j] = scale * dot(q_i, k_j), 64 columns at a time */
            for (c0 = 0; c0 < cols; c0 += TA_CUDA_TILE) {
                float s[4][4];
                const ta_cuda_rope_src rope = ta_cuda_rope_of(p, c, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_K);
                ta_cuda_dot_tile<DT>(s, ta_cuda_rows_of(p.q, c.q, p.lay.q.seq), row0, rows,
                                     ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), col0 + c0,
                                     ta_tiling_min_i32(TA_CUDA_TILE, cols - c0), p.head_dim, stage,
                                     ROPE ? &rope : nullptr, ta_cuda_kv_pages_of(p, c));
#pragma unroll
                for (int cc = 0; cc < 4; ++cc)
                    *reinterpret_cast<float4 *>(st + (size_t)(c0 + 4 * tx + cc) * TA_CUDA_LDT +
                                                4 * ty) =
                        make_float4(p.scale * s[0][cc], p.scale * s[1][cc], p.scale * s[2][cc],
                                    p.scale * s[3][cc]);
            }
            __syncthreads();
            /* latent attention's band: S -> fmaf(alpha, T, S) on its entries */
            if (LAT && p.rb_t) {
                ta_cuda_rband_tile(p, c.lse, st, row0, rows, col0, cols);
                __syncthreads();
            }
            /* steps 2-5: row max and alpha, p = exp(s - m_new), l, acc (shared with MTA) */
            ta_cuda_softmax_pv_tile<DT, NS, WL>(st, col0, cols, key_lo, key_hi, tile_lo, tile_hi,
                                                m_run, l_run, l_lo, m_new, alpha, stage, v_slots,
                                                acc, acc_lo, ta_cuda_kv_pages_of(p, c));
        }
        /* step 6: o = acc / l (IEEE division), lse = m + log(l); unseen rows: 0,
         * -inf; split-K: into part `split` (f32), merged by the merge kernel */
        __syncthreads();
        ta_cuda_fwd_store_part<DT, NS>(p, c, split, row0, rows, acc, m_run, l_run);
    }
}

/* The instantiations, by dtype, slot count (NS = ceil(D_v / 64), 1..4), left
 * bound (WL: a window's left bound, ta_cuda_left_bounded) and the rotary
 * stage (ROPE); latent attention's (cuda/ta_cuda_latent.cu: f32 sub-plans,
 * no rotary stage) with the band's step (LAT), which the others compile out. */
template <bool WL, bool ROPE> struct ta_cuda_fwd_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(&ta_cuda_fwd_kernel<DT, NS, WL, ROPE, false>);
    }
};
template <bool WL> struct ta_cuda_fwd_lat_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(&ta_cuda_fwd_kernel<DT, NS, WL, false, true>);
    }
};

extern "C" ta_status ta_cuda_sdpa_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                      const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int ns = (pr->head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const void *kernel = ta_cuda_pick_plan_lat<ta_cuda_fwd_family, ta_cuda_fwd_lat_family, 1>(
        plan, ns, ta_cuda_latent_plan(plan) != 0);
    const void *ptrs[5] = {a->q, a->k, a->v, a->o, a->lse};
    ta_tiling t;
    size_t smem;
    ta_status st;
    const void *ptrs_ws[1] = {ws->part_o}; /* split-K's parts (NULL: none) */
    if ((st = ta_cuda_check_pointers(ptrs, 5)) != TA_OK) return st;
    if ((st = ta_cuda_check_pointers(ptrs_ws, 1)) != TA_OK) return st;
    if ((st = ta_cuda_check_rope(plan)) != TA_OK) return st;
    /* 64-row CUDA Q tiles; the plan's k tiles and mask */
    if ((st = ta_cuda_tiling(plan, TA_CUDA_TILE, plan->fwd.block_k, TA_TILING_FWD, &t)) != TA_OK)
        return st;
    /* block_k's need (36,352 B at <= 64 .. 88,576 B at <= 256); the opt-in is
     * the largest block_k's, capped at the device's limit */
    smem = (size_t)ta_cuda_sdpa_fwd_smem(ta_cuda_fwd_cols_cap(&t)).floats * sizeof(float);
    st = ta_cuda_smem_opt_in(kernel, smem,
                             (size_t)ta_cuda_sdpa_fwd_smem(TA_BLOCK_MAX).floats * sizeof(float));
    if (st != TA_OK) return st;
    return ta_cuda_fwd_launch(kernel, smem, plan, &t, a, ws, stream);
}
