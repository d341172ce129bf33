/*
 * CUDA MTA forward (pre-softmax key-query conv), TA_PRECISION_EXACT:
 * bit-identical to ref/ta_ref_fwd.c with a conv (docs/mta.md, Specification,
 * forward steps 1-3) for every dtype, conv size, seqlens_k, GQA, S_q != S_k
 * and block size.
 *
 * One block per (batch b, query head h, CUDA Q tile). The k tiles are the
 * plan's (block_k loaded columns, cols_eff = block_k - 2P: the contract fixes
 * where the online softmax rescales); the rows are the backend's choice (rows
 * are independent, docs/design.md 3.5): a CUDA Q tile loads 64 rows, c_q - 1 halo
 * rows on top of 64 - (c_q - 1) effective ones, so the tiling this kernel runs
 * is ta_cuda_tiling(plan, 64, block_k, TA_TILING_FWD) (the plan's mask) and
 * each row tile's context (ta_cuda_context) gives its key length, slices and
 * K tiles [k_begin, k_end). For each of those k tiles, ascending:
 *   1. raw scores S on the loaded region [64 rows][block_k columns]
 *      (ta_cuda_mta_scores: scale * dot, +0 where not visible)  threads over (x, jl)
 *   2. conv C on the visible effective entries, written transposed into the
 *      score tile the softmax reads (ta_cuda_mta_conv)          threads over (x, 4 e)
 *   3. row max m_tile, m_new, alpha = exp(m - m_new)           one thread per row
 *   4. p = exp(C - m_new)                                       threads over (x, e)
 *   5. (l, l_lo) = (l, l_lo) * alpha + sum_e p                  one thread per row
 *   6. part = sum p v from +0; (acc, acc_lo) = (acc, acc_lo) * alpha + part
 *                                                               threads over (x, d)
 * then o = acc / l, lse = m + log(l) (rows that saw no key: 0, -inf).
 * Steps 3-6 and the store are the SDPA forward's (cuda/ta_cuda_sdpa_fwd.cu)
 * with the convolved scores in place of the raw ones. Visible: key j of row r
 * is in the row's interval [lo, hi) (ta_cuda_row_keys: causal, seqlens_k,
 * window), the raw scores by their own (row, key) before the conv, the
 * convolved ones after it (docs/mta.md section 2); C is formed and read only
 * on a row's visible columns [max(lo, col0), min(hi, col0 + cols)).
 * A paged KV cache (p.block_table set) moves where key j's k and v rows are
 * read (their pool row, ta_cuda_kv_row), never the arithmetic.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_host.cuh"
#include "ta_cuda_mta.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
#include "ta_math.h"
}

/*
 * Dynamic shared memory: the forwards' table (cuda/ta_cuda_tile.cuh), cols_cap
 * = ta_cuda_fwd_cols_cap, with the MTA regions:
 *   m_run, l_run, l_lo, m_new, alpha [64] f32; key_lo, key_hi [80] int32 (loaded
 *          rows' visible keys); tile_lo, tile_hi [64] int32 (effective rows'
 *          visible columns of the current k tile)
 *   s      [64][s_ld]           raw scores S of the loaded region (s_ld = ta_cuda_mta_s_ld)
 *   st     [cols_cap][LDT]      C, then p, of the effective region, transposed: st[e][x]
 *   stage  [STAGE_BUF]          dot-tile chunks and row offsets / V rows
 *   w      [W_BUF]              the head's conv kernel, rows padded to 4
 */
static __host__ __device__ ta_cuda_fwd_smem ta_cuda_mta_fwd_smem(int32_t cols_cap) {
    return ta_cuda_fwd_smem_make(cols_cap, TA_CUDA_TILE * ta_cuda_mta_s_ld(cols_cap),
                                 TA_CUDA_MTA_W_BUF);
}

template <int DT, int NS, bool WL, bool ROPE>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_mta_fwd_kernel(const __grid_constant__ ta_cuda_params p) {
    extern __shared__ float4 ta_cuda_mta_fwd_dyn_smem[];
    __shared__ ta_cuda_slot v_slots[TA_CUDA_SLOTS];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x;
    const int32_t cols_cap = ta_cuda_fwd_cols_cap(&t), n_qt = t.num_q_tiles;
    const int32_t s_ld = ta_cuda_mta_s_ld(cols_cap), pq = p.conv_q - 1;
    const ta_cuda_fwd_smem sm = ta_cuda_mta_fwd_smem(cols_cap);
    float *base = reinterpret_cast<float *>(ta_cuda_mta_fwd_dyn_smem);
    float *s = base + sm.s, *st = base + sm.st, *stage = base + sm.stage, *w_s = base + sm.w;
    float *m_run = base + sm.m_run, *l_run = base + sm.l_run, *l_lo = base + sm.l_lo;
    float *m_new = base + sm.m_new, *alpha = base + sm.alpha;
    /* key_lo, key_hi: the visible keys of loaded row x; effective row i is loaded row i + c_q - 1
     */
    int32_t *key_lo = reinterpret_cast<int32_t *>(base + sm.key_lo);
    int32_t *key_hi = reinterpret_cast<int32_t *>(base + sm.key_hi);
    int32_t *tile_lo = reinterpret_cast<int32_t *>(base + sm.tile_lo);
    int32_t *tile_hi = reinterpret_cast<int32_t *>(base + sm.tile_hi);
    const int32_t n_split = t.num_splits; /* split-K: parts per Q tile (1: none) */
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;
    /* S columns past a tile's loaded ones are read by the conv's discarded
     * lanes only; zero them once so they are never uninitialised */
    for (int e = tid; e < TA_CUDA_TILE * s_ld; e += TA_CUDA_THREADS)
        s[e] = 0.0f;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const int32_t qt = at.qt;
        const ta_tile_ctx &c = ctx_s; /* the tile's context: made once, read where used */
        const int32_t row0 = ta_tile_row_eff_begin(&t, qt);
        const int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
        ta_cuda_mta_region g;
        float acc[4][NS][4]; /* acc[row 4ty+r][feature s*64 + 4tx + e]: the pairs' hi words */
        float acc_lo[4][NS][4]; /* their lo words (src/ta_sum2.h) */
        int32_t kt, k_first, k_last;
        g.row_load0 = ta_tile_row_load_begin(&t, qt);
        g.rows_load = ta_tile_row_load_end(&t, qt) - g.row_load0; /* rows + c_q - 1 <= 64 */
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(acc_lo);
        /* init: the context; m = -inf, l = 0 per effective row; the visible key
         * interval of each loaded row; the V slots on the kv slice; the kernel */
        __syncthreads(); /* the previous tile is done with the row arrays, ctx_s, slots */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, qt);
        __syncthreads();
        if (tid < TA_CUDA_TILE) {
            m_run[tid] = ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
            l_run[tid] = l_lo[tid] = 0.0f;
        }
        if (tid < TA_CUDA_KEY_ROWS)
            ta_cuda_row_keys(&t, tid < g.rows_load ? g.row_load0 + tid : INT32_MIN, c.key_len,
                             &key_lo[tid], &key_hi[tid]);
        if (tid < NS)
            v_slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.v, c.v, p.lay.v.seq), p.head_dim_v,
                                           tid * TA_CUDA_SLOT);
        ta_cuda_mta_load_w(w_s, p.conv_w, c.head, p.conv_q, p.conv_k); /* ends with a barrier */
        /* the context's K tiles [k_begin, k_end) of this part, ascending; the
         * others are fully masked (or another part's) */
        ta_tile_split_visit(&t, c.key_len, split, c.k_begin, c.k_end, &k_first, &k_last);
        for (kt = k_first; kt < k_last; ++kt) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, kt);
            const int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
            const ta_cuda_rope_src rope = ta_cuda_rope_of(p, c, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_K);
            g.col_load0 = ta_tile_col_load_begin(&t, kt);
            g.cols_load = ta_tile_col_load_end(&t, kt) - g.col_load0;
            /* step 1: S on the loaded region (starts with a barrier); with the
             * rotary stage (p.rope) of turned q and k rows */
            ta_cuda_mta_scores<DT, WL>(
                s, s_ld, ta_cuda_rows_of(p.q, c.q, p.lay.q.seq),
                ta_cuda_rows_of(p.q_hist, c.q_hist + (int64_t)t.q_history * p.lay.q_hist.seq,
                                p.lay.q_hist.seq),
                ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), p.head_dim, p.scale, &t, key_lo, key_hi, g,
                stage, ROPE ? &rope : nullptr, ta_cuda_kv_pages_of(p, c));
            /* the visible effective columns [tile_lo, tile_hi) of each effective
             * row (the previous tile's readers have passed the scores' barriers) */
            if (tid < TA_CUDA_TILE)
                ta_cuda_tile_cols(ta_cuda_lo<WL>(key_lo, tid + pq), key_hi[tid + pq], col0, cols,
                                  &tile_lo[tid], &tile_hi[tid]);
            __syncthreads();
            /* step 2: C[x][e] on the visible effective entries, into st[e][x]
             * (effective row x reads loaded rows x .. x + c_q - 1, effective
             * column e reads loaded columns e .. e + c_k - 1) */
            ta_cuda_mta_conv<WL>(s, s_ld, w_s, p.conv_q, p.conv_k, rows, cols, tile_lo, tile_hi, st,
                                 1, TA_CUDA_LDT);
            __syncthreads();
            /* steps 3-6: row max and alpha, p = exp(C - m_new), l, acc: the SDPA
             * forward's, over the effective columns (keys col0 + j) of the
             * effective rows; tile_lo, tile_hi are rewritten with the same values */
            ta_cuda_softmax_pv_tile<DT, NS, WL>(st, col0, cols, key_lo + pq, key_hi + pq, tile_lo,
                                                tile_hi, m_run, l_run, l_lo, m_new, alpha, stage,
                                                v_slots, acc, acc_lo, ta_cuda_kv_pages_of(p, c));
        }
        /* step 7: o = acc / l (IEEE division), lse = m + log(l); unseen rows: 0,
         * -inf; split-K: into part `split` (f32), merged by the merge kernel */
        __syncthreads();
        ta_cuda_fwd_store_part<DT, NS>(p, c, split, row0, rows, acc, m_run, l_run);
    }
}

/* The instantiations, by dtype, slot count (NS = ceil(D_v / 64), 1..4) and
 * left bound (WL, ta_cuda_left_bounded) and the rotary stage (ROPE). */
template <bool WL, bool ROPE> struct ta_cuda_mta_fwd_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(&ta_cuda_mta_fwd_kernel<DT, NS, WL, ROPE>);
    }
};

extern "C" ta_status ta_cuda_mta_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                     const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int ns = (pr->head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const void *kernel = ta_cuda_pick_plan<ta_cuda_mta_fwd_family, 1>(plan, ns);
    const void *ptrs[7] = {a->q,   a->k,      a->v, a->o,
                           a->lse, a->conv_w, plan->p.q_history > 0 ? a->q_hist : NULL};
    ta_tiling t;
    size_t smem;
    ta_status st;
    const void *ptrs_ws[1] = {ws->part_o}; /* split-K's parts (NULL: none) */
    if ((st = ta_cuda_check_pointers(ptrs, 7)) != TA_OK) return st;
    if ((st = ta_cuda_check_pointers(ptrs_ws, 1)) != TA_OK) return st;
    if ((st = ta_cuda_check_rope(plan)) != TA_OK) return st;
    /* 64 loaded rows per CUDA Q tile (64 - (c_q - 1) effective); the plan's k tiles, mask */
    if ((st = ta_cuda_tiling(plan, TA_CUDA_TILE, plan->fwd.block_k, TA_TILING_FWD, &t)) != TA_OK)
        return st;
    /* block_k's need (57,856 B at <= 64 .. 159,232 B at <= 256); the opt-in is
     * the largest block_k's, capped at the device's limit. A GPU with 99 KB
     * (sm_86, sm_89) runs block_k <= 128 and refuses larger ones. */
    smem = (size_t)ta_cuda_mta_fwd_smem(ta_cuda_fwd_cols_cap(&t)).floats * sizeof(float);
    st = ta_cuda_smem_opt_in(kernel, smem,
                             (size_t)ta_cuda_mta_fwd_smem(TA_BLOCK_MAX).floats * sizeof(float));
    if (st != TA_OK) return st;
    return ta_cuda_fwd_launch(kernel, smem, plan, &t, a, ws, stream);
}
