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
#include "ta_cuda_rb.cuh"
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

/* A row tile's start in both forwards of this file: a barrier (the previous
 * tile is done with shared memory), its context into ctx_s, a barrier, then
 * m = -inf, l = (0, 0) and the visible keys [key_lo, key_hi) of each of its
 * rows (threads < 64; no barrier after). */
TA_CUDA_DEV void ta_cuda_fwd_tile_begin(const ta_cuda_params &p, const ta_tiling &t,
                                        const ta_cuda_q_tile &at, int32_t row0, int32_t rows,
                                        ta_tile_ctx &ctx_s, float *m_run, float *l_run,
                                        float *l_lo, int32_t *key_lo, int32_t *key_hi) {
    const int tid = (int)threadIdx.x;
    __syncthreads();
    if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, at.qt);
    __syncthreads();
    if (tid < TA_CUDA_TILE) {
        m_run[tid] = ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
        l_run[tid] = l_lo[tid] = 0.0f;
        ta_cuda_row_keys(&t, tid < rows ? row0 + tid : -1, ctx_s.key_len, &key_lo[tid],
                         &key_hi[tid]);
    }
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
        ta_cuda_fwd_tile_begin(p, t, at, row0, rows, ctx_s, m_run, l_run, l_lo, key_lo, key_hi);
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

/* ------------------------------------------------------------------------- */
/* The register-blocked forward (issue 17): f32, the common SDPA problems     */
/* ------------------------------------------------------------------------- */

/*
 * The same arithmetic as ta_cuda_fwd_kernel, element for element (so the same
 * bits as REF), organised for the f32 FMA pipes (docs/cuda.md section 2,
 * "The register-blocked forward"):
 *   - the Q tile is resident in shared memory for the whole row tile, row
 *     major [64][ldq]; K and V tiles land by cp.async, K of the next k tile
 *     and V of this one in flight while the present one computes;
 *   - scores: thread (ty, tx) owns rows 4ty + r and keys tx + 16c (r, c < 4),
 *     fmaf over f ascending, 4 features per pair of 16-byte loads each side;
 *   - the row max of the tile from those registers (the 16 lanes of a row
 *     group by shuffles: the maximum, or a NaN, of the visible scores, which is
 *     the sequential ta_max_nan scan's value up to the sign of a zero and the
 *     NaN's payload, neither of which changes a result bit: e = +0 or -0 gives
 *     the same x - e for every x, ta_exp(+-0) = 1, and m + log(l) with l >= 1
 *     is the same sum), then p = exp(s - e) in registers, written to st once;
 *   - l's per-tile sum stays one thread per row, j ascending, from st;
 *   - P V: a tile whose 64 rows all see all its columns ("full") runs the
 *     FMAs without per-entry selects; others select as ta_cuda_softmax_pv_tile.
 * Requirements (ta_cuda_fwd_rb_ok): f32 storage, D = D_v in {32, 64, 96,
 * 128} (a template parameter: every shared-memory offset of the inner loops
 * is an immediate), q, k, v rows on 16 bytes, block_k <= 64, no rotary
 * stage, latent band, paged KV or query history.
 */
typedef struct ta_cuda_rb_smem {
    int32_t m_run, l_run, l_lo, m_new, alpha, key_lo, key_hi, q, k, v, st;
    int32_t ldq, ldv, floats;
} ta_cuda_rb_smem;

/* DB: K and V tiles double-buffered (two of each, k then v, TA_CUDA_TILE
 * rows apart; ta_cuda_fwd_rb_kernel's DB). */
static __host__ __device__ __forceinline__ ta_cuda_rb_smem ta_cuda_rb_smem_make(int32_t d,
                                                                                int32_t d_v,
                                                                                bool db) {
    ta_cuda_rb_smem m;
    int32_t end = 0;
    /* rows of q and k ldq floats apart: 8 consecutive rows (one phase of a
     * 16-byte load) hit 32 different banks when ldq = 4 mod 8 (d = 0 mod 8) */
    m.ldq = d + 4;
    m.ldv = (d_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT * TA_CUDA_SLOT;
    m.m_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.l_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.l_lo = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.m_new = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.alpha = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.key_lo = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.key_hi = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.q = ta_cuda_smem_take(&end, TA_CUDA_TILE * m.ldq);
    m.k = ta_cuda_smem_take(&end, (db ? 2 : 1) * TA_CUDA_TILE * m.ldq);
    m.v = ta_cuda_smem_take(&end, (db ? 2 : 1) * TA_CUDA_TILE * m.ldv);
    m.st = ta_cuda_smem_take(&end, TA_CUDA_TILE * TA_CUDA_LDT);
    m.floats = end;
    return m;
}

/* One 16-lane row group's maximum (ta_max_nan over the lanes; see above). */
TA_CUDA_DEV float ta_cuda_rb_group_max(float m) {
#pragma unroll
    for (int o = 1; o < 16; o <<= 1)
        m = ta_max_nan(__shfl_xor_sync(0xffffffffu, m, o), m);
    return m;
}

/* Steps 2-3 on the registers of one k tile: s = scale * dot, the row max of
 * the visible columns (FULL: all 64) over the row group, m_new and alpha
 * (each lane computes row 4ty + (tx & 3)'s, lanes tx < 4 write them), then
 * s = p = exp(s - e) on the visible entries (others 0). */
template <bool FULL>
TA_CUDA_DEV void ta_cuda_rb_softmax(float (&s)[4][4], float scale, const int32_t (&rb)[4],
                                    const int32_t (&re)[4], const float *m_run, float *m_new,
                                    float *alpha) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
    float mo[4], mn[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        float mt = ta_f32_from_bits(TA_CUDA_NEG_INF_BITS), e;
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            const int32_t j = tx + 16 * cc;
            s[r][cc] = scale * s[r][cc];
            if (FULL || (j >= rb[r] && j < re[r])) mt = ta_max_nan(s[r][cc], mt);
        }
        mt = ta_cuda_rb_group_max(mt);
        mo[r] = m_run[4 * ty + r];
        mn[r] = ta_max_nan(mo[r], mt);
        e = ta_cuda_exp_base(mn[r]);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
            const int32_t j = tx + 16 * cc;
            s[r][cc] = FULL || (j >= rb[r] && j < re[r]) ? ta_cuda_exp_sel(s[r][cc] - e) : 0.0f;
        }
    }
    {
        const int r = tx & 3;
        const float a_mo = r == 0 ? mo[0] : r == 1 ? mo[1] : r == 2 ? mo[2] : mo[3];
        const float a_mn = r == 0 ? mn[0] : r == 1 ? mn[1] : r == 2 ? mn[2] : mn[3];
        const bool has = r == 0   ? rb[0] < re[0]
                         : r == 1 ? rb[1] < re[1]
                         : r == 2 ? rb[2] < re[2]
                                  : rb[3] < re[3];
        const float al = ta_cuda_exp_sel(a_mo - ta_cuda_exp_base(a_mn));
        if (tx < 4 && has) {
            m_new[4 * ty + tx] = a_mn;
            alpha[4 * ty + tx] = al;
        }
    }
}

/* Step 4 of one k tile for row `row` (its visible columns [jb, je) of the
 * tile): l_t = l_t + p_j from +0, j ascending, then (l, l_lo) = (l, l_lo) *
 * alpha + l_t (ta_sum2_add) and m = m_new; a row that sees no key of the tile
 * keeps its state. */
template <bool WL>
TA_CUDA_DEV void ta_cuda_rb_row_sum(int32_t row, int32_t col0, int32_t cols, const float *st,
                                    const int32_t *key_lo, const int32_t *key_hi, float *m_run,
                                    float *l_run, float *l_lo, const float *m_new,
                                    const float *alpha) {
    int32_t jb, je;
    ta_cuda_tile_cols(ta_cuda_lo<WL>(key_lo, row), key_hi[row], col0, cols, &jb, &je);
    if (jb < je) {
        float l = 0.0f;
        for (int32_t j = jb; j < je; ++j)
            l = l + st[j * TA_CUDA_LDT + row];
        ta_sum2_add(&l_run[row], &l_lo[row], alpha[row], l);
        m_run[row] = m_new[row];
    }
}

/*
 * Two blocks per SM up to D = 64 (128 registers); one above (D = 128), with
 * the registers that frees. DB (double-buffered K and V; the launcher's
 * choice at D <= 64 where the device's shared memory holds it: 104 KB at
 * D = 64): K and V of tile kt + 1 land while tile kt computes,
 * and one barrier per k tile suffices, because everything else a warp reads
 * in a tile is its own: thread (ty, tx) reads p, m_new and alpha of rows 4ty
 * + r only, which lanes of its own warp wrote (rows 8w .. 8w + 7 of warp w),
 * so the row sums (step 4) run in each warp after a __syncwarp, one lane per
 * row, beside the other warps' work. Without DB (smaller devices: 70 KB at
 * D = 64): next K and this V in flight, three barriers per tile, step 4 by
 * threads 0..63 after the second.
 */
template <int D, bool WL, bool DB>
__global__ void __launch_bounds__(TA_CUDA_THREADS, D <= 64 ? 2 : 1)
    ta_cuda_fwd_rb_kernel(const __grid_constant__ ta_cuda_params p) {
    constexpr int NS = (D + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    constexpr int LDQ = D + 4, LDV = NS * TA_CUDA_SLOT; /* as ta_cuda_rb_smem_make(D, D, DB) */
    extern __shared__ float4 ta_cuda_rb_dyn_smem[];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const int32_t n_qt = t.num_q_tiles, n_split = t.num_splits;
    const ta_cuda_rb_smem sm = ta_cuda_rb_smem_make(D, D, DB);
    float *base = reinterpret_cast<float *>(ta_cuda_rb_dyn_smem);
    float *sq = base + sm.q, *st = base + sm.st;
    float *m_run = base + sm.m_run, *l_run = base + sm.l_run, *l_lo = base + sm.l_lo;
    float *m_new = base + sm.m_new, *alpha = base + sm.alpha;
    int32_t *key_lo = reinterpret_cast<int32_t *>(base + sm.key_lo);
    int32_t *key_hi = reinterpret_cast<int32_t *>(base + sm.key_hi);
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const ta_tile_ctx &c = ctx_s;
        const int32_t row0 = ta_tile_row_eff_begin(&t, at.qt);
        const int32_t rows = ta_tile_row_eff_end(&t, at.qt) - row0;
        float acc[4][NS][4], acc_lo[4][NS][4];
        int32_t kt, k_first, k_last;
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(acc_lo);
        ta_cuda_fwd_tile_begin(p, t, at, row0, rows, ctx_s, m_run, l_run, l_lo, key_lo, key_hi);
        ta_tile_split_visit(&t, c.key_len, split, c.k_begin, c.k_end, &k_first, &k_last);
        /* the Q tile and the first K tile (DB: and its V) in flight */
        ta_cuda_rb_load<D, LDQ>(sq, p.q, c.q, p.lay.q.seq, row0, rows);
        if (k_first < k_last) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, k_first);
            const int32_t cols = ta_tile_col_eff_end(&t, k_first) - col0;
            ta_cuda_rb_load<D, LDQ>(base + sm.k, p.k, c.k, p.lay.k.seq, col0, cols);
            if (DB) ta_cuda_rb_load<D, LDV>(base + sm.v, p.v, c.v, p.lay.v.seq, col0, cols);
        }
        ta_fast_cp_commit();
        for (kt = k_first; kt < k_last; ++kt) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, kt);
            const int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
            const int buf = DB ? (kt - k_first) & 1 : 0;
            const float *sk = base + sm.k + buf * TA_CUDA_TILE * LDQ;
            const float *sv = base + sm.v + buf * TA_CUDA_TILE * LDV;
            float s[4][4];
            int32_t rb[4], re[4];
            bool full = cols == TA_CUDA_TILE;
            ta_fast_cp_wait<0>();
            /* K (DB: and V) landed; every warp is done with the last tile
             * (DB: with the buffers the next loads overwrite) */
            __syncthreads();
            if (DB) {
                if (kt + 1 < k_last) {
                    const int32_t c1 = ta_tile_col_eff_begin(&t, kt + 1);
                    const int32_t n1 = ta_tile_col_eff_end(&t, kt + 1) - c1;
                    const int nb = (kt + 1 - k_first) & 1;
                    ta_cuda_rb_load<D, LDQ>(base + sm.k + nb * TA_CUDA_TILE * LDQ, p.k, c.k,
                                            p.lay.k.seq, c1, n1);
                    ta_cuda_rb_load<D, LDV>(base + sm.v + nb * TA_CUDA_TILE * LDV, p.v, c.v,
                                            p.lay.v.seq, c1, n1);
                }
                ta_fast_cp_commit();
            } else {
                ta_cuda_rb_load<D, LDV>(base + sm.v, p.v, c.v, p.lay.v.seq, col0, cols);
                ta_fast_cp_commit();
            }
            /* step 1: s = dot(q_i, k_j), f ascending */
            ta_cuda_rb_dot<D, LDQ>(s, sq, sk);
            if (!DB) {
                __syncthreads(); /* every thread is done with sk */
                if (kt + 1 < k_last)
                    ta_cuda_rb_load<D, LDQ>(base + sm.k, p.k, c.k, p.lay.k.seq,
                                            ta_tile_col_eff_begin(&t, kt + 1),
                                            ta_tile_col_eff_end(&t, kt + 1) -
                                                ta_tile_col_eff_begin(&t, kt + 1));
                ta_fast_cp_commit();
            }
            /* steps 2-3: rows 4ty+r's visible columns [rb, re) of the tile; a
             * warp whose 8 rows all see the whole 64-column tile is FULL
             * (rows past the tile see nothing and are never stored) */
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int32_t i = 4 * ty + r;
                ta_cuda_tile_cols(ta_cuda_lo<WL>(key_lo, i), key_hi[i], col0, cols, &rb[r],
                                  &re[r]);
                full = full && (i >= rows || (rb[r] == 0 && re[r] == cols));
            }
            full = __all_sync(0xffffffffu, full);
            if (full)
                ta_cuda_rb_softmax<true>(s, p.scale, rb, re, m_run, m_new, alpha);
            else
                ta_cuda_rb_softmax<false>(s, p.scale, rb, re, m_run, m_new, alpha);
#pragma unroll
            for (int cc = 0; cc < 4; ++cc)
                *reinterpret_cast<float4 *>(st + (tx + 16 * cc) * TA_CUDA_LDT + 4 * ty) =
                    make_float4(s[0][cc], s[1][cc], s[2][cc], s[3][cc]);
            if (DB) {
                __syncwarp(); /* the warp's rows of st, m_new, alpha */
            } else {
                ta_fast_cp_wait<1>(); /* V of this tile (the next K may still fly) */
                __syncthreads();      /* st, sv, m_new, alpha published */
                /* step 4: one thread per row */
                if (tid < TA_CUDA_TILE)
                    ta_cuda_rb_row_sum<WL>(tid, col0, cols, st, key_lo, key_hi, m_run, l_run,
                                           l_lo, m_new, alpha);
            }
            /* step 5: the tile's P V, then (acc, acc_lo) = (acc, acc_lo) *
             * alpha + part on the rows that saw a key of it */
            {
                float part[4][NS][4];
                if (full)
                    ta_cuda_rb_pv<NS, LDV, WL, true>(part, st, sv, cols, rb, re);
                else
                    ta_cuda_rb_pv<NS, LDV, WL, false>(part, st, sv, cols, rb, re);
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    if (rb[r] < re[r]) {
                        const float al = alpha[4 * ty + r];
#pragma unroll
                        for (int sl = 0; sl < NS; ++sl)
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                ta_sum2_add(&acc[r][sl][e], &acc_lo[r][sl][e], al, part[r][sl][e]);
                    }
                }
            }
            /* DB: step 4 in the warp, lane tx < 4 of each half its row 4ty + tx
             * (m_run is read again only after the next barrier) */
            if (DB && tx < 4)
                ta_cuda_rb_row_sum<WL>(4 * ty + tx, col0, cols, st, key_lo, key_hi, m_run, l_run,
                                       l_lo, m_new, alpha);
        }
        ta_fast_cp_wait<0>(); /* nothing in flight past the tile (no k tile: the Q load) */
        /* step 6 as ta_cuda_fwd_kernel's */
        __syncthreads();
        ta_cuda_fwd_store_part<TA_F32, NS>(p, c, split, row0, rows, acc, m_run, l_run);
    }
}

/* 1 if the register-blocked forward runs this call (its requirements above). */
static int ta_cuda_fwd_rb_ok(const ta_plan *plan, const ta_fwd_args *a, const ta_tiling *t) {
    const ta_problem *pr = &plan->p;
    return pr->dtype == TA_F32 && plan->stages.load != TA_LOAD_ROPE &&
           !ta_cuda_latent_plan(plan) && pr->kv_page_size == 0 && t->q_history == 0 &&
           t->block_k <= TA_CUDA_TILE && pr->head_dim == pr->head_dim_v &&
           (pr->head_dim == 32 || pr->head_dim == 64 || pr->head_dim == 96 ||
            pr->head_dim == 128) &&
           ta_cuda_rb_rows_aligned(pr, a->q, &plan->layout.q, 0) &&
           ta_cuda_rb_rows_aligned(pr, a->k, &plan->layout.k, 1) &&
           ta_cuda_rb_rows_aligned(pr, a->v, &plan->layout.v, 1);
}

template <int D, bool DB> static const void *ta_cuda_fwd_rb_at(bool wl) {
    return wl ? reinterpret_cast<const void *>(&ta_cuda_fwd_rb_kernel<D, true, DB>)
              : reinterpret_cast<const void *>(&ta_cuda_fwd_rb_kernel<D, false, DB>);
}

/* The instantiation for head dim d (one of 32, 64, 96, 128; ta_cuda_fwd_rb_ok);
 * db: the double-buffered one (D <= 64 only: at D = 96 and 128, one block
 * per SM, it measured 0-6% slower with the fully unrolled loops and the same
 * within 1% since, so the smaller single-buffered kernel stays there). */
static const void *ta_cuda_fwd_rb_pick(int32_t d, bool wl, bool db) {
    if (db) return d == 32 ? ta_cuda_fwd_rb_at<32, true>(wl) : ta_cuda_fwd_rb_at<64, true>(wl);
    return d == 32   ? ta_cuda_fwd_rb_at<32, false>(wl)
           : d == 64 ? ta_cuda_fwd_rb_at<64, false>(wl)
           : d == 96 ? ta_cuda_fwd_rb_at<96, false>(wl)
                     : ta_cuda_fwd_rb_at<128, false>(wl);
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
    if (ta_cuda_fwd_rb_ok(plan, a, &t)) {
        /* the register-blocked forward, double-buffered at D <= 64 where the
         * device's shared memory holds it (104 KB at D = 64: not sm_86 / sm_89's
         * 99 KB), else single-buffered; past that (D = 128 on sm_86 / sm_89)
         * the general kernel below */
        int db;
        for (db = pr->head_dim <= 64; db >= 0; --db) {
            const ta_cuda_rb_smem sm = ta_cuda_rb_smem_make(pr->head_dim, pr->head_dim_v, db);
            const void *rb =
                ta_cuda_fwd_rb_pick(pr->head_dim, ta_cuda_left_bounded(plan) != 0, db != 0);
            smem = (size_t)sm.floats * sizeof(float);
            st = ta_cuda_smem_opt_in(rb, smem, smem);
            if (st == TA_OK) return ta_cuda_fwd_launch(rb, smem, plan, &t, a, ws, stream);
            if (st != TA_ERR_UNSUPPORTED) return st;
        }
    }
    /* block_k's need (36,352 B at <= 64 .. 88,576 B at <= 256); the opt-in is
     * the largest block_k's, capped at the device's limit */
    smem = (size_t)ta_cuda_sdpa_fwd_smem(ta_cuda_fwd_cols_cap(&t)).floats * sizeof(float);
    st = ta_cuda_smem_opt_in(kernel, smem,
                             (size_t)ta_cuda_sdpa_fwd_smem(TA_BLOCK_MAX).floats * sizeof(float));
    if (st != TA_OK) return st;
    return ta_cuda_fwd_launch(kernel, smem, plan, &t, a, ws, stream);
}
