/*
 * CUDA SDPA backward, TA_PRECISION_EXACT: bit-identical to ref/ta_ref_sdpa_bwd.c
 * (docs/reference.md section 3). Three kernels, no atomics:
 *
 *   delta  one thread per query row: D_i = dot(dO_i, o_i, D_v) from the stored o
 *   dk/dv  one block per (b, kv head, 64-key tile, feature group); threads over
 *          (key j, feature d); each accumulator sums over (query head of the
 *          group ascending, row ascending), the Q tiles [q_begin, q_end) that
 *          meet the key tile (ta_tile_k_rows)
 *   dq     one block per (b, query head, 64-row tile); threads over (row i,
 *          feature d); each accumulator sums over keys ascending, the
 *          context's k tiles [k_begin, k_end)
 *
 * Both the dk/dv and the dq kernel recompute, for every live entry (visible and
 * lse_i > -inf), exactly the reference's
 *   s = scale * dot(q_i, k_j, D), P = exp(s - lse_i), dP = dot(dO_i, v_j, D_v),
 *   dS = P * (dP - D_i).
 * An entry is live iff its key is in the row's interval [lo, hi)
 * (ta_cuda_row_keys: causal, seqlens_k, window) and the row saw a key in the
 * forward (lse > -inf); other entries are skipped, never added as zeros.
 * The backward's bits depend on no tile size (every sum runs over the whole
 * index range in ascending order, in partials of the absolute 64-index chunks
 * of src/ta_sum2.h), so these kernels run their own 64 x 64 tiling, made by
 * ta_cuda_tiling(plan, 64, 64) (the plan's mask): each of its key tiles is one
 * dq chunk, each of its Q tiles (per query head) one dk/dv chunk. acc holds
 * the chunk's partial (from +0), which then enters the pair (hi, lo) by
 * ta_sum2_add with alpha = 1; the store reads hi. Slices come from the
 * per-tile context (ta_cuda_context) under the call's layout.
 *
 * Feature groups (dk/dv): the output features of a key tile are D of dk and D_v
 * of dv, in slots of 64; a block holds at most 4 slots of accumulators (64
 * registers per thread), so D + D_v > 256 takes two groups, each recomputing P
 * (and dS when it holds dk slots). Slot order: dk slots, then dv slots. With
 * the rotary stage every dk slot is in group 0 (D > 192 with D_v <= 128 takes
 * four slots there): the turn back of a dk row pairs features across slots.
 *
 * Where the MTA conv goes: dS on the loaded region, the transposed conv to the
 * effective region, and the dconv_w partials per (b, plan bwd Q tile, K tile)
 * (docs/mta.md) would follow the recomputation step of each kernel.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_bwd_common.cuh"
#include "ta_cuda_host.cuh"
#include "ta_cuda_rb.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
#include "ta_math.h"
}

/* The base (t: 64 x 64), the dk/dv kernel's feature groups and the lo
 * words of the accumulating mode (ta_bwd_args.accumulate; the kernels'
 * template parameter ACC): then dq, dk, dv of the base are the f32 hi words
 * of the caller's (hi, lo) pairs and dq_lo, dk_lo, dv_lo their lo words,
 * both under the gradients' strides (p.lay, f32 elements); NULL otherwise. */
struct ta_cuda_bwd_params : ta_cuda_params {
    int32_t n_groups; /* dk/dv feature groups per key tile */
    float *dq_lo, *dk_lo, *dv_lo;
    /* the output rows [rg_row0, rg_row1) and keys [rg_key0, rg_key1) (the
     * call's ranges, plan->bwd; [0, S_q), [0, S_k) without): the general
     * kernels cut their tiles to them (ta_cuda_cut_range) */
    int32_t rg_row0, rg_row1, rg_key0, rg_key1;
};

/* ---------------------------------------------------------------------------- */
/* delta                                                                          */
/* ---------------------------------------------------------------------------- */

/* delta[row] = dot(dO_row, o_row, D_v): +0, fmaf, d ascending (ta_ref_bwd_load_q),
 * for every row (b, h, s) of [B, H, S_q]; delta is contiguous, o and d_o are
 * addressed by their strides. */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_cuda_delta_kernel(const void *o, const void *d_o, float *delta, size_t n_rows,
                         int32_t head_dim_v, int32_t heads_q, int32_t seq_q, ta_strides o_st,
                         ta_strides d_o_st) {
    size_t row;
    for (row = (size_t)blockIdx.x * TA_CUDA_THREADS + threadIdx.x; row < n_rows;
         row += (size_t)gridDim.x * TA_CUDA_THREADS) {
        const int32_t s = (int32_t)(row % (size_t)seq_q);
        const int32_t h = (int32_t)(row / (size_t)seq_q % (size_t)heads_q);
        const int32_t b = (int32_t)(row / (size_t)seq_q / (size_t)heads_q);
        const int64_t o_first = ta_cuda_row(ta_strides_slice(&o_st, b, h), o_st.seq, s);
        const int64_t do_first = ta_cuda_row(ta_strides_slice(&d_o_st, b, h), d_o_st.seq, s);
        float acc = 0.0f;
        int32_t d;
        for (d = 0; d < head_dim_v; ++d)
            acc = fmaf(ta_cuda_load<DT>(d_o, (size_t)(do_first + d)),
                       ta_cuda_load<DT>(o, (size_t)(o_first + d)), acc);
        delta[row] = acc;
    }
}

/* Row arrays of one 64-row tile, rows row0 + x of the lse / delta slice at
 * lse_slice ([B, H, S_q], contiguous): lse, delta, and the live keys [lo, hi)
 * (the row's visible interval, or (0, 0) for a row past the tile or with
 * lse = -inf: such a row has no live entry). */
TA_CUDA_DEV void ta_cuda_bwd_rows(const ta_cuda_bwd_params &p, const ta_tiling *t,
                                  int64_t lse_slice, int32_t row0, int32_t rows, int32_t key_len,
                                  float *lse_s, float *delta_s, int2 *keys) {
    const int tid = (int)threadIdx.x;
    int32_t lo = 0, hi = 0;
    float l = 0.0f, d = 0.0f;
    if (tid >= TA_CUDA_TILE) return;
    if (tid < rows) {
        l = p.lse[lse_slice + row0 + tid];
        d = p.delta[lse_slice + row0 + tid];
        if (l != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS))
            ta_cuda_row_keys(t, row0 + tid, key_len, &lo, &hi);
    }
    lse_s[tid] = l;
    delta_s[tid] = d;
    keys[tid] = make_int2(lo, hi);
}

/* The slices of query head h in a kv tile's context kc (the group's first
 * head): q, d_o and lse of ta_cuda_context(batch kc.batch, head h). kc is
 * read from shared memory inside the head loop, so the per-batch products are
 * formed per head, never hoisted out of the loop into registers (measured:
 * eight 64-bit batch offsets spilled). */
typedef struct ta_cuda_head_slices {
    int64_t q, d_o, lse;
} ta_cuda_head_slices;

TA_CUDA_DEV ta_cuda_head_slices ta_cuda_head_of(const ta_cuda_params &p, const ta_tile_ctx &kc,
                                                int32_t h) {
    const ta_tile_ctx c = ta_cuda_context(p, kc.batch - p.batch_begin, h, 0);
    ta_cuda_head_slices s;
    s.q = c.q;
    s.d_o = c.d_o;
    s.lse = c.lse;
    return s;
}

/* The logit of live entry (row r, key j) of the (b, h) slice lse_slice:
 * scale * dot(q_r, k_j) (ta_ref_scores), with latent attention's band its
 * term where it applies (ta_cuda_rband_logit). */
template <bool LAT>
TA_CUDA_DEV float ta_cuda_bwd_logit(const ta_cuda_params &p, int64_t lse_slice, int32_t r,
                                    int32_t j, float dot_qk) {
    const float s = p.scale * dot_qk;
    return LAT && p.rb_t ? ta_cuda_rband_logit(p, lse_slice, r, j, s) : s;
}

/* P and dS of one live entry from its logit: the reference's ta_ref_bwd_probs. */
TA_CUDA_DEV void ta_cuda_probs(float logit, float dot_dov, float lse, float delta, float *p_out,
                               float *ds_out) {
    const float pr = ta_exp(logit - lse);
    *p_out = pr;
    *ds_out = pr * (dot_dov - delta);
}

/* One row of a register block's chunk partials into its pairs (ta_cuda_acc_sum2). */
template <int NS>
TA_CUDA_DEV void ta_cuda_row_sum2(float (&hi)[NS][4], float (&lo)[NS][4], float (&part)[NS][4]) {
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            ta_sum2_add(&hi[s][e], &lo[s][e], 1.0f, part[s][e]);
            part[s][e] = 0.0f;
        }
}

/*
 * Accumulating mode (ta_bwd_args.accumulate): a register block's pairs (rows
 * row0 + 4ty + r < rows, features s*64 + 4tx + e < row_len, ta_cuda_store_block's
 * mapping) from the caller's words (get: hi_buf, lo_buf at slice + row * ld,
 * f32 elements), the entries outside the block (+0, +0); or back into them
 * (put), unscaled and unrounded. A pair is one thread's, so nothing is shared.
 */
template <int NS>
TA_CUDA_DEV void ta_cuda_pairs_get(int32_t row0, int32_t rows, int32_t row_len,
                                   float (&hi)[4][NS][4], float (&lo)[4][NS][4],
                                   const float *hi_buf, const float *lo_buf, int64_t slice,
                                   int64_t ld) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        const int64_t first = ta_cuda_row(slice, ld, row0 + x);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                const bool in = x < rows && f < row_len;
                hi[r][s][e] = in ? hi_buf[first + f] : 0.0f;
                lo[r][s][e] = in ? lo_buf[first + f] : 0.0f;
            }
    }
}

template <int NS>
TA_CUDA_DEV void ta_cuda_pairs_put(int32_t row0, int32_t rows, int32_t row_len,
                                   const float (&hi)[4][NS][4], const float (&lo)[4][NS][4],
                                   float *hi_buf, float *lo_buf, int64_t slice, int64_t ld) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        if (x >= rows) continue;
        const int64_t first = ta_cuda_row(slice, ld, row0 + x);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                if (f >= row_len) continue;
                hi_buf[first + f] = hi[r][s][e];
                lo_buf[first + f] = lo[r][s][e];
            }
    }
}

/*
 * Latent attention's band, the transposed term of dk for query head h (its
 * slices hc), after the head's row chunks (ref/ta_ref_bwd.c,
 * ta_ref_bwd_rband_dk; S_q = S_k in the backward, so key n sits at query row
 * n): key n of the thread's keys col0 + 4ty + r adds
 *   dk_n += (alpha * dl_nj) q~_j     keys j = max(0, n - W) .. n ascending
 * (dl from p.rb_dl, q~ the pass's q rows), a key j starting a 64-key chunk
 * first flushing n's partial, and flushes after. Only dk slots (slot0 + s < nk)
 * take terms; a row with lse = -inf has none.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_rband_dk(const ta_cuda_bwd_params &p, const ta_cuda_head_slices &hc,
                                  int32_t col0, int32_t cols, int32_t slot0, int32_t nk,
                                  float (&acc)[4][NS][4], float (&hi)[4][NS][4],
                                  float (&lo)[4][NS][4]) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int32_t n = col0 + 4 * ty + r;
        int32_t j;
        if (4 * ty + r >= cols || p.lse[hc.lse + n] == ta_f32_from_bits(TA_CUDA_NEG_INF_BITS))
            continue;
        for (j = n > p.rb_width ? n - p.rb_width : 0; j <= n; ++j) {
            const float a_dl = p.rb_alpha * p.rb_dl[(hc.lse + n) * p.rb_w1 + (n - j)];
            const int64_t q_row = ta_cuda_row(hc.q, p.lay.q.seq, j);
            if (j % TA_SUM2_CHUNK == 0) ta_cuda_row_sum2<NS>(hi[r], lo[r], acc[r]);
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int32_t f = (slot0 + s) * TA_CUDA_SLOT + 4 * tx + e;
                    if (slot0 + s < nk && f < p.head_dim)
                        acc[r][s][e] =
                            fmaf(a_dl, ta_cuda_load<DT>(p.q, (size_t)(q_row + f)), acc[r][s][e]);
                }
        }
        ta_cuda_row_sum2<NS>(hi[r], lo[r], acc[r]);
    }
}

/*
 * Latent attention's band, the transposed term of dq after the key chunks
 * (ta_ref_bwd_rband_dq; S_q = S_k): row m of the thread's rows row0 + 4ty + r
 * adds
 *   dq_m += (alpha * dl_im) k_i      rows i = m .. min(m + W, S_q - 1) ascending
 * over the live rows i (lse_i > -inf), a row i starting a 64-row chunk first
 * flushing m's partial, and flushes after.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_rband_dq(const ta_cuda_params &p, const ta_tile_ctx &c, int32_t row0,
                                  int32_t rows, float (&acc)[4][NS][4], float (&hi)[4][NS][4],
                                  float (&lo)[4][NS][4]) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int32_t m = row0 + 4 * ty + r;
        const int32_t last =
            (int32_t)(p.t.seq_q - 1 < (int64_t)m + p.rb_width ? p.t.seq_q - 1
                                                              : (int64_t)m + p.rb_width);
        int32_t i;
        if (4 * ty + r >= rows) continue;
        for (i = m; i <= last; ++i) {
            const int64_t k_row = ta_cuda_row(c.k, p.lay.k.seq, i);
            float a_dl;
            if (i % TA_SUM2_CHUNK == 0) ta_cuda_row_sum2<NS>(hi[r], lo[r], acc[r]);
            if (p.lse[c.lse + i] == ta_f32_from_bits(TA_CUDA_NEG_INF_BITS)) continue;
            a_dl = p.rb_alpha * p.rb_dl[(c.lse + i) * p.rb_w1 + (i - m)];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                    if (f < p.head_dim)
                        acc[r][s][e] =
                            fmaf(a_dl, ta_cuda_load<DT>(p.k, (size_t)(k_row + f)), acc[r][s][e]);
                }
        }
        ta_cuda_row_sum2<NS>(hi[r], lo[r], acc[r]);
    }
}

/*
 * Dynamic shared memory of the dk/dv (has_p = 1) and dq (has_p = 0) kernels,
 * offsets in floats:
 *
 *   +--------------------------+-----------------+-----------------+-----------+
 *   | lse, delta [64] f32,     | p [64][LDT]     | ds [64][LDT]    | stage     |
 *   | keys [64] int2 (lo, hi)  | dk/dv: P[i][j]  | dk/dv: dS[i][j] | STAGE_BUF |
 *   |                          | dq: none        | dq: dS[j][i]    |           |
 *   +--------------------------+-----------------+-----------------+-----------+
 *
 * The row arrays first (offsets that do not depend on has_p: one base
 * register). dk/dv 53,248 B, dq 35,840 B.
 */
typedef struct ta_cuda_bwd_smem {
    int32_t lse, delta, keys, p, ds, stage;
    int32_t floats; /* total */
} ta_cuda_bwd_smem;

static __host__ __device__ __forceinline__ ta_cuda_bwd_smem ta_cuda_bwd_smem_make(int32_t has_p) {
    ta_cuda_bwd_smem m;
    int32_t end = 0;
    m.lse = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.delta = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.keys = ta_cuda_smem_take(&end, 2 * TA_CUDA_TILE);
    m.p = ta_cuda_smem_take(&end, has_p ? TA_CUDA_TILE * TA_CUDA_LDT : 0);
    m.ds = ta_cuda_smem_take(&end, TA_CUDA_TILE * TA_CUDA_LDT);
    m.stage = ta_cuda_smem_take(&end, TA_CUDA_STAGE_BUF);
    m.floats = end;
    return m;
}

/* ---------------------------------------------------------------------------- */
/* dk, dv                                                                         */
/* ---------------------------------------------------------------------------- */

template <int DT, int NS, bool WL, bool ROPE, bool LAT, bool ACC, bool RNG>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_dkdv_kernel(const __grid_constant__ ta_cuda_bwd_params p) {
    extern __shared__ float4 ta_cuda_dkdv_dyn_smem[];
    __shared__ ta_cuda_slot slots[TA_CUDA_SLOTS];
    __shared__ ta_tile_ctx kctx_s;         /* the key side */
    __shared__ ta_cuda_head_slices head_s; /* the current query head's slices */
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const ta_cuda_bwd_smem sm = ta_cuda_bwd_smem_make(1);
    float *base = reinterpret_cast<float *>(ta_cuda_dkdv_dyn_smem);
    float *ps = base + sm.p, *dss = base + sm.ds, *stage = base + sm.stage;
    float *lse_s = base + sm.lse, *delta_s = base + sm.delta;
    int2 *keys = reinterpret_cast<int2 *>(base + sm.keys);
    const int32_t n_kt = t.num_k_tiles;
    const int32_t nk = (p.head_dim + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT; /* dk slots */
    const int32_t n_slots_all = nk + (p.head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt * p.n_groups;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, p.n_groups);
        const int32_t fg = at.fg, kt = at.kt, h_kv = at.h_kv;
        const ta_tile_ctx &kc = kctx_s;         /* made once, read where used */
        const ta_cuda_head_slices &hc = head_s; /* likewise, per query head */
        int32_t col0 = ta_tile_col_eff_begin(&t, kt);
        int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
        const int32_t slot0 = fg * NS; /* this group's first slot */
        const int32_t n_slots = ta_tiling_min_i32(NS, n_slots_all - slot0);
        const bool need_ds = slot0 < nk; /* the group holds dk slots */
        float acc[4][NS][4]; /* acc[key 4ty+r][slot s feature 4tx+e]: the chunk's partial */
        float hi[4][NS][4], lo[4][NS][4]; /* the running pairs (src/ta_sum2.h) */
        int32_t g, q_begin, q_end;
        if (RNG) { /* the output keys */
            ta_cuda_cut_range(p.rg_key0, p.rg_key1, &col0, &cols);
            if (cols <= 0) continue; /* none of the tile's keys is an output: nothing written */
        }
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(hi);
        ta_cuda_acc_zero<NS>(lo);
        /* the key side: the context of the kv group's first query head (its k,
         * v, dk, dv slices and key length, as the reference's) */
        __syncthreads(); /* the previous tile is done with kctx_s */
        if (tid == 0) kctx_s = ta_cuda_context(p, at.b_local, h_kv * p.group, 0);
        __syncthreads();
        if (ACC) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_GET>(p, kc, col0, cols, slot0, nk, n_slots, hi, lo);
        ta_tile_k_rows(&t, kt, kc.key_len, &q_begin, &q_end); /* Q tiles that meet the key tile */
        /* step 1: the kv group's query heads ascending, then Q tiles ascending */
        for (g = 0; g < p.group; ++g) {
            const int32_t h = h_kv * p.group + g;
            int32_t qt;
            /* head h's slices; this group's slots: dk slots take features of q,
             * dv slots of dO (the q-tile loop's first barrier publishes them) */
            __syncthreads(); /* the previous head is done with head_s and slots */
            if (tid == 0) head_s = ta_cuda_head_of(p, kc, h);
            if (tid < NS) {
                const ta_cuda_head_slices hd = ta_cuda_head_of(p, kc, h);
                const int32_t u = slot0 + tid;
                if (tid >= n_slots) /* unused: every feature is padding */
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.q, hd.q, p.lay.q.seq), 0, 0);
                else if (u < nk)
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.q, hd.q, p.lay.q.seq),
                                                 p.head_dim, u * TA_CUDA_SLOT);
                else
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.d_o, hd.d_o, p.lay.d_o.seq),
                                                 p.head_dim_v, (u - nk) * TA_CUDA_SLOT);
            }
            for (qt = q_begin; qt < q_end; ++qt) {
                int32_t row0 = ta_tile_row_eff_begin(&t, qt);
                int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
                if (RNG) { /* the output rows */
                    ta_cuda_cut_range(p.rg_row0, p.rg_row1, &row0, &rows);
                    if (rows <= 0) continue; /* uniform: the block skips the Q tile */
                }
                /* the rotary stage's rows: k (A), q (B); the q slots (the group's
                 * first nk - slot0) as side_a of the staging; kv head kc.head_kv */
                const ta_cuda_rope_src rope =
                    ta_cuda_rope_of(p, kc, TA_CUDA_ROPE_K, TA_CUDA_ROPE_Q);
                const ta_cuda_rope_src rope_q =
                    ta_cuda_rope_of(p, kc, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_OFF, nk - slot0);
                float s_t[4][4], dp_t[4][4]; /* [key 4ty+a][row 4tx+c] */
                int32_t i0;
                __syncthreads(); /* the previous Q tile is done with the row arrays */
                ta_cuda_bwd_rows(p, &t, hc.lse, row0, rows, kc.key_len, lse_s, delta_s, keys);
                /* step 2: recompute S^T and dP^T for the tile (threads over (j, i)) */
                ta_cuda_dot_tile<DT>(s_t, ta_cuda_rows_of(p.k, kc.k, p.lay.k.seq), col0, cols,
                                     ta_cuda_rows_of(p.q, hc.q, p.lay.q.seq), row0, rows,
                                     p.head_dim, stage, ROPE ? &rope : nullptr);
                if (need_ds)
                    ta_cuda_dot_tile<DT>(dp_t, ta_cuda_rows_of(p.v, kc.v, p.lay.v.seq), col0, cols,
                                         ta_cuda_rows_of(p.d_o, hc.d_o, p.lay.d_o.seq), row0, rows,
                                         p.head_dim_v, stage);
                else
#pragma unroll
                    for (int a = 0; a < 4; ++a)
#pragma unroll
                        for (int c = 0; c < 4; ++c)
                            dp_t[a][c] = 0.0f;
                /* step 3: P and dS of the live entries into ps[i][j], dss[i][j] */
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int i = 4 * tx + c;
                    const int2 kv = keys[i]; /* row i's live keys [lo, hi) */
                    float pw[4], dw[4];
#pragma unroll
                    for (int a = 0; a < 4; ++a) {
                        const int32_t j = col0 + 4 * ty + a;
                        pw[a] = 0.0f;
                        dw[a] = 0.0f;
                        if (ta_cuda_in<WL>(j, kv.x, kv.y))
                            ta_cuda_probs(ta_cuda_bwd_logit<LAT>(p, hc.lse, row0 + i, j, s_t[a][c]),
                                          dp_t[a][c], lse_s[i], delta_s[i], &pw[a], &dw[a]);
                    }
                    *reinterpret_cast<float4 *>(ps + i * TA_CUDA_LDT + 4 * ty) =
                        make_float4(pw[0], pw[1], pw[2], pw[3]);
                    *reinterpret_cast<float4 *>(dss + i * TA_CUDA_LDT + 4 * ty) =
                        make_float4(dw[0], dw[1], dw[2], dw[3]);
                }
                /* step 4: dv_j = fmaf(P_ij, dO_i, dv_j), dk_j = fmaf(dS_ij, q_i, dk_j),
                 * rows i ascending, live entries only */
                for (i0 = 0; i0 < rows; i0 += TA_CUDA_RCHUNK) {
                    const int in = (int)ta_tiling_min_i32(TA_CUDA_RCHUNK, rows - i0);
                    ta_cuda_stage_rows<DT, NS>(stage, slots, row0 + i0, in,
                                               ROPE ? &rope_q : nullptr);
                    for (int ii = 0; ii < in; ++ii) {
                        const int i = i0 + ii;
                        const int2 kv = keys[i]; /* row i's live keys [lo, hi) */
                        /* ... as slots of this thread's keys 4ty + r: live iff lo <= r < hi */
                        const int32_t lo = kv.x - (col0 + 4 * ty), hi = kv.y - (col0 + 4 * ty);
                        const float4 p4 =
                            *reinterpret_cast<const float4 *>(ps + i * TA_CUDA_LDT + 4 * ty);
                        const float4 d4 =
                            *reinterpret_cast<const float4 *>(dss + i * TA_CUDA_LDT + 4 * ty);
                        const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
                        const float dv[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
                        for (int s = 0; s < NS; ++s) {
                            const bool is_dk = slot0 + s < nk;
                            const float4 x4 = *reinterpret_cast<const float4 *>(
                                stage + ii * (NS * TA_CUDA_SLOT) + s * TA_CUDA_SLOT + 4 * tx);
                            const float xv[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
                            for (int r = 0; r < 4; ++r) {
                                const bool live = (!WL || r >= lo) && r < hi; /* lo <= 0 if !WL */
                                const float coef = is_dk ? dv[r] : pv[r];
#pragma unroll
                                for (int e = 0; e < 4; ++e)
                                    acc[r][s][e] =
                                        live ? fmaf(coef, xv[e], acc[r][s][e]) : acc[r][s][e];
                            }
                        }
                    }
                }
                /* the Q tile is one row chunk of head h: its partial into the pairs */
                ta_cuda_acc_sum2<NS>(hi, lo, acc);
            }
            /* latent attention's band: head h's transposed term, after its chunks */
            if (LAT && p.rb_dl && need_ds)
                ta_cuda_rband_dk<DT, NS>(p, hc, col0, cols, slot0, nk, acc, hi, lo);
        }
        /* step 5: dk = store(scale * hi), dv = store(hi), keys < cols only; with the
         * rotary stage, dk's rows turned back first (group 0 holds every dk slot:
         * the launcher sees to it) */
        if (ROPE && need_ds)
            ta_cuda_rope_grad_block<NS>(p, stage, hi, p.head_dim, TA_CUDA_ROPE_K, kc, col0, cols);
        if (ACC) /* the pairs back, unscaled (SDPA only: validated) */
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_PUT>(p, kc, col0, cols, slot0, nk, n_slots, hi, lo);
        else
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_STORE>(p, kc, col0, cols, slot0, nk, n_slots, hi,
                                                      lo);
    }
}

/* ---------------------------------------------------------------------------- */
/* dq                                                                             */
/* ---------------------------------------------------------------------------- */

template <int DT, int NS, bool WL, bool ROPE, bool LAT, bool ACC, bool RNG>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_dq_kernel(const __grid_constant__ ta_cuda_bwd_params p) {
    extern __shared__ float4 ta_cuda_dq_dyn_smem[];
    __shared__ ta_cuda_slot k_slots[TA_CUDA_SLOTS];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const ta_cuda_bwd_smem sm = ta_cuda_bwd_smem_make(0);
    float *base = reinterpret_cast<float *>(ta_cuda_dq_dyn_smem);
    float *dst = base + sm.ds, *stage = base + sm.stage; /* dst: dS transposed, dst[j][i] */
    float *lse_s = base + sm.lse, *delta_s = base + sm.delta;
    int2 *keys = reinterpret_cast<int2 *>(base + sm.keys);
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt); /* longest (causal) first */
        const int32_t qt = at.qt;
        const ta_tile_ctx &c = ctx_s; /* the tile's context: made once, read where used */
        int32_t row0 = ta_tile_row_eff_begin(&t, qt);
        int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
        float acc[4][NS][4]; /* acc[row 4ty+r][feature s*64 + 4tx + e]: the chunk's partial */
        float hi[4][NS][4], lo[4][NS][4]; /* the running pairs (src/ta_sum2.h) */
        int2 row_keys[4];    /* live keys [lo, hi) of rows 4ty+r (NS < 3; else read from keys) */
        int32_t kt;
        if (RNG) { /* the output rows */
            ta_cuda_cut_range(p.rg_row0, p.rg_row1, &row0, &rows);
            if (rows <= 0) continue; /* none of the tile's rows is an output: nothing written */
        }
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(hi);
        ta_cuda_acc_zero<NS>(lo);
        /* step 1: the context; lse, D, live key intervals of the tile's rows; the
         * K slots on this tile's kv slice */
        __syncthreads(); /* the previous tile is done with the row arrays, ctx_s, slots */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, qt);
        __syncthreads();
        if (ACC) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_pairs_get<NS>(row0, rows, p.head_dim, hi, lo, static_cast<const float *>(p.dq),
                                  p.dq_lo, c.dq, p.lay.dq.seq);
        ta_cuda_bwd_rows(p, &t, c.lse, row0, rows, c.key_len, lse_s, delta_s, keys);
        if (tid < NS) /* the recomputation of ctx~ (p.ctx_out) sums v rows instead */
            k_slots[tid] = LAT && p.ctx_out
                               ? ta_cuda_slot_of(ta_cuda_rows_of(p.v, c.v, p.lay.v.seq),
                                                 p.head_dim_v, tid * TA_CUDA_SLOT)
                               : ta_cuda_slot_of(ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), p.head_dim,
                                                 tid * TA_CUDA_SLOT);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            row_keys[r] = NS < 3 ? keys[4 * ty + r] : make_int2(0, 0);
        }
        /* step 2: the context's k tiles [k_begin, k_end) ascending */
        for (kt = c.k_begin; kt < c.k_end; ++kt) {
            int32_t col0 = ta_tile_col_eff_begin(&t, kt);
            int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
            if (RNG) { /* the output keys */
                ta_cuda_cut_range(p.rg_key0, p.rg_key1, &col0, &cols);
                if (cols <= 0) continue; /* uniform: the block skips the k tile */
            }
            /* the rotary stage's rows: q (A), k (B); every k slot */
            const ta_cuda_rope_src rope = ta_cuda_rope_of(p, c, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_K);
            const ta_cuda_rope_src rope_k =
                ta_cuda_rope_of(p, c, TA_CUDA_ROPE_K, TA_CUDA_ROPE_OFF, TA_CUDA_SLOTS);
            float s_t[4][4], dp_t[4][4]; /* [row 4ty+r][key 4tx+c] */
            int32_t j0;
            ta_cuda_dot_tile<DT>(s_t, ta_cuda_rows_of(p.q, c.q, p.lay.q.seq), row0, rows,
                                 ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), col0, cols, p.head_dim,
                                 stage, ROPE ? &rope : nullptr);
            if (!(LAT && p.ctx_out))
                ta_cuda_dot_tile<DT>(dp_t, ta_cuda_rows_of(p.d_o, c.d_o, p.lay.d_o.seq), row0, rows,
                                     ta_cuda_rows_of(p.v, c.v, p.lay.v.seq), col0, cols,
                                     p.head_dim_v, stage);
            else
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int cc = 0; cc < 4; ++cc)
                        dp_t[r][cc] = 0.0f;
                        /* dS of the live entries into dst[j][i] (P when recomputing ctx~) */
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const int j = 4 * tx + cc;
                float dw[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int i = 4 * ty + r;
                    float pr;
                    dw[r] = 0.0f;
                    const int2 kv = NS < 3 ? row_keys[r] : keys[i];
                    if (ta_cuda_in<WL>(col0 + j, kv.x, kv.y)) {
                        ta_cuda_probs(
                            ta_cuda_bwd_logit<LAT>(p, c.lse, row0 + i, col0 + j, s_t[r][cc]),
                            dp_t[r][cc], lse_s[i], delta_s[i], &pr, &dw[r]);
                        if (LAT && p.ctx_out) dw[r] = pr;
                    }
                }
                *reinterpret_cast<float4 *>(dst + j * TA_CUDA_LDT + 4 * ty) =
                    make_float4(dw[0], dw[1], dw[2], dw[3]);
            }
            /* dq_i = fmaf(dS_ij, k_j, dq_i), keys j ascending, live entries only */
            for (j0 = 0; j0 < cols; j0 += TA_CUDA_RCHUNK) {
                const int jn = (int)ta_tiling_min_i32(TA_CUDA_RCHUNK, cols - j0);
                ta_cuda_stage_rows<DT, NS>(stage, k_slots, col0 + j0, jn, ROPE ? &rope_k : nullptr);
                for (int jj = 0; jj < jn; ++jj) {
                    const int32_t j = j0 + jj;
                    const float4 d4 =
                        *reinterpret_cast<const float4 *>(dst + j * TA_CUDA_LDT + 4 * ty);
                    const float dv[4] = {d4.x, d4.y, d4.z, d4.w};
                    bool live[4]; /* key col0 + j is live for row 4ty+r */
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        /* NS >= 3: the bounds from shared memory, registers go to acc */
                        const int2 kv = NS < 3 ? row_keys[r] : keys[4 * ty + r];
                        live[r] = ta_cuda_in<WL>(col0 + j, kv.x, kv.y);
                    }
#pragma unroll
                    for (int s = 0; s < NS; ++s) {
                        const float4 k4 = *reinterpret_cast<const float4 *>(
                            stage + jj * (NS * TA_CUDA_SLOT) + s * TA_CUDA_SLOT + 4 * tx);
                        const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                        for (int r = 0; r < 4; ++r)
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                acc[r][s][e] =
                                    live[r] ? fmaf(dv[r], kv[e], acc[r][s][e]) : acc[r][s][e];
                    }
                }
            }
            /* the k tile is one key chunk: its partial into the pairs */
            ta_cuda_acc_sum2<NS>(hi, lo, acc);
        }
        /* the recomputed ctx~ = hi (f32), for the projections' weight gradients */
        if (LAT && p.ctx_out) {
            ta_cuda_store_block<TA_F32, NS>(row0, rows, p.head_dim_v, hi, 0, 1.0f, p.ctx_out,
                                            c.lse * p.head_dim_v, p.head_dim_v);
            continue;
        }
        /* latent attention's band: the transposed term, after the key chunks */
        if (LAT && p.rb_dl) ta_cuda_rband_dq<DT, NS>(p, c, row0, rows, acc, hi, lo);
        /* step 3: dq = store(scale * hi); with the rotary stage, the rows turned back first */
        if (ROPE)
            ta_cuda_rope_grad_block<NS>(p, stage, hi, p.head_dim, TA_CUDA_ROPE_Q, c, row0, rows);
        if (ACC) /* the pairs back, unscaled (SDPA only: validated) */
            ta_cuda_pairs_put<NS>(row0, rows, p.head_dim, hi, lo, static_cast<float *>(p.dq),
                                  p.dq_lo, c.dq, p.lay.dq.seq);
        else
            ta_cuda_store_block<DT, NS>(row0, rows, p.head_dim, hi, 1, p.scale, p.dq, c.dq,
                                        p.lay.dq.seq);
    }
}

/* ---------------------------------------------------------------------------- */
/* dq, register-blocked (issue 17)                                               */
/* ---------------------------------------------------------------------------- */

/*
 * The dq kernel's arithmetic, element for element (so REF's bits), organised
 * as the register-blocked forward (cuda/ta_cuda_rb.cuh): f32 SDPA, D = D_v in
 * {32, 64, 96, 128}, q, k, v, d_o rows on 16 bytes, no rotary stage and no
 * latent steps (ta_cuda_dq_rb_ok). Per 64-row tile: q and dO resident, K tiles
 * double-buffered and the V tile by cp.async; for each k tile (one 64-key
 * chunk) S = q K^T and dP = dO V^T in registers (rows 4ty + r, keys tx + 16c),
 * P and dS of the live entries (ta_cuda_probs' operations) into dst[j][i], then
 * dq_i = fmaf(dS_ij, k_j, dq_i) over the tile's keys ascending from +0 (a
 * warp whose rows all see the whole tile: no selects) and the chunk's
 * partial into the (hi, lo) pairs; dq = store(scale * hi).
 * Shared memory (floats): lse, delta [64], keys [64] int2, q, dO [64][LDQ],
 * K [2][64][LDQ], V [64][LDQ], dst [64][LDT].
 */
typedef struct ta_cuda_dq_rb_smem {
    int32_t lse, delta, keys, q, d_o, k, v, ds, floats;
} ta_cuda_dq_rb_smem;

static __host__ __device__ __forceinline__ ta_cuda_dq_rb_smem ta_cuda_dq_rb_smem_make(int32_t d) {
    ta_cuda_dq_rb_smem m;
    int32_t end = 0;
    const int32_t tile = TA_CUDA_TILE * (d + 4);
    m.lse = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.delta = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.keys = ta_cuda_smem_take(&end, 2 * TA_CUDA_TILE);
    m.q = ta_cuda_smem_take(&end, tile);
    m.d_o = ta_cuda_smem_take(&end, tile);
    m.k = ta_cuda_smem_take(&end, 2 * tile);
    m.v = ta_cuda_smem_take(&end, tile);
    m.ds = ta_cuda_smem_take(&end, TA_CUDA_TILE * TA_CUDA_LDT);
    m.floats = end;
    return m;
}

/* Two blocks per SM up to D = 64 (106 KB of shared memory at 64), one above. */
template <int D, bool WL, bool ACC>
__global__ void __launch_bounds__(TA_CUDA_THREADS, D <= 64 ? 2 : 1)
    ta_cuda_dq_rb_kernel(const __grid_constant__ ta_cuda_bwd_params p) {
    constexpr int NS = (D + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT, LDQ = D + 4;
    extern __shared__ float4 ta_cuda_dq_rb_dyn_smem[];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const ta_cuda_dq_rb_smem sm = ta_cuda_dq_rb_smem_make(D);
    float *base = reinterpret_cast<float *>(ta_cuda_dq_rb_dyn_smem);
    float *sq = base + sm.q, *sdo = base + sm.d_o, *sv = base + sm.v, *dst = base + sm.ds;
    float *lse_s = base + sm.lse, *delta_s = base + sm.delta;
    int2 *keys = reinterpret_cast<int2 *>(base + sm.keys);
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt); /* longest (causal) first */
        const ta_tile_ctx &c = ctx_s;
        const int32_t row0 = ta_tile_row_eff_begin(&t, at.qt);
        const int32_t rows = ta_tile_row_eff_end(&t, at.qt) - row0;
        float acc[4][NS][4], hi[4][NS][4], lo[4][NS][4];
        int32_t kt;
        ta_cuda_acc_zero<NS>(hi);
        ta_cuda_acc_zero<NS>(lo);
        __syncthreads(); /* the previous tile is done with shared memory */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, at.qt);
        __syncthreads();
        if (ACC) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_pairs_get<NS>(row0, rows, D, hi, lo, static_cast<const float *>(p.dq), p.dq_lo,
                                  c.dq, p.lay.dq.seq);
        ta_cuda_bwd_rows(p, &t, c.lse, row0, rows, c.key_len, lse_s, delta_s, keys);
        /* q, dO and the first K and V tiles in flight */
        ta_cuda_rb_load<D, LDQ>(sq, p.q, c.q, p.lay.q.seq, row0, rows);
        ta_cuda_rb_load<D, LDQ>(sdo, p.d_o, c.d_o, p.lay.d_o.seq, row0, rows);
        if (c.k_begin < c.k_end) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, c.k_begin);
            const int32_t cols = ta_tile_col_eff_end(&t, c.k_begin) - col0;
            ta_cuda_rb_load<D, LDQ>(base + sm.k, p.k, c.k, p.lay.k.seq, col0, cols);
            ta_cuda_rb_load<D, LDQ>(sv, p.v, c.v, p.lay.v.seq, col0, cols);
        }
        ta_fast_cp_commit();
        for (kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t col0 = ta_tile_col_eff_begin(&t, kt);
            const int32_t cols = ta_tile_col_eff_end(&t, kt) - col0;
            const float *sk = base + sm.k + ((kt - c.k_begin) & 1) * TA_CUDA_TILE * LDQ;
            float s[4][4], dp[4][4];
            int32_t rb[4], re[4];
            bool full = cols == TA_CUDA_TILE;
            ta_fast_cp_wait<0>();
            __syncthreads(); /* K, V landed; the last tile is done with dst and the other K */
            if (kt + 1 < c.k_end) {
                const int32_t c1 = ta_tile_col_eff_begin(&t, kt + 1);
                ta_cuda_rb_load<D, LDQ>(base + sm.k + ((kt + 1 - c.k_begin) & 1) * TA_CUDA_TILE * LDQ,
                                        p.k, c.k, p.lay.k.seq, c1,
                                        ta_tile_col_eff_end(&t, kt + 1) - c1);
            }
            ta_fast_cp_commit();
            /* S = q K^T and dP = dO V^T, f ascending */
            ta_cuda_rb_dot<D, LDQ>(s, sq, sk);
            ta_cuda_rb_dot<D, LDQ>(dp, sdo, sv);
            __syncthreads(); /* every thread is done with sv */
            if (kt + 1 < c.k_end) {
                const int32_t c1 = ta_tile_col_eff_begin(&t, kt + 1);
                ta_cuda_rb_load<D, LDQ>(sv, p.v, c.v, p.lay.v.seq, c1,
                                        ta_tile_col_eff_end(&t, kt + 1) - c1);
            }
            ta_fast_cp_commit();
            /* P and dS of the live entries (rows 4ty + r: keys [rb, re) of the
             * tile) into dst[j][i]; the others 0 */
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int32_t i = 4 * ty + r;
                const int2 kv = keys[i];
                ta_cuda_tile_cols(kv.x, kv.y, col0, cols, &rb[r], &re[r]);
                full = full && (i >= rows || (rb[r] == 0 && re[r] == cols));
#pragma unroll
                for (int cc = 0; cc < 4; ++cc) {
                    const int32_t j = tx + 16 * cc;
                    float pr = 0.0f, dw = 0.0f;
                    if (j >= rb[r] && j < re[r]) {
                        pr = ta_cuda_exp_sel(p.scale * s[r][cc] - lse_s[i]);
                        dw = pr * (dp[r][cc] - delta_s[i]);
                    }
                    s[r][cc] = dw;
                }
            }
#pragma unroll
            for (int cc = 0; cc < 4; ++cc)
                *reinterpret_cast<float4 *>(dst + (tx + 16 * cc) * TA_CUDA_LDT + 4 * ty) =
                    make_float4(s[0][cc], s[1][cc], s[2][cc], s[3][cc]);
            full = __all_sync(0xffffffffu, full);
            /* dst published to the warp: thread (ty, tx) reads rows 4ty + r of
             * it only, which lanes of its own warp wrote */
            __syncwarp();
            /* dq_i = fmaf(dS_ij, k_j, dq_i), keys ascending from +0 (the tile
             * is one 64-key chunk), then into the pairs */
            if (full)
                ta_cuda_rb_pv<NS, LDQ, WL, true>(acc, dst, sk, cols, rb, re);
            else
                ta_cuda_rb_pv<NS, LDQ, WL, false>(acc, dst, sk, cols, rb, re);
            ta_cuda_acc_sum2<NS>(hi, lo, acc);
        }
        ta_fast_cp_wait<0>(); /* nothing in flight past the tile */
        /* dq = store(scale * hi) (accumulating: the pairs back, unscaled) */
        if (ACC)
            ta_cuda_pairs_put<NS>(row0, rows, D, hi, lo, static_cast<float *>(p.dq), p.dq_lo, c.dq,
                                  p.lay.dq.seq);
        else
            ta_cuda_store_block<TA_F32, NS>(row0, rows, D, hi, 1, p.scale, p.dq, c.dq,
                                            p.lay.dq.seq);
    }
}

template <int D> static const void *ta_cuda_dq_rb_at(bool wl, bool acc) {
    if (acc)
        return wl ? reinterpret_cast<const void *>(&ta_cuda_dq_rb_kernel<D, true, true>)
                  : reinterpret_cast<const void *>(&ta_cuda_dq_rb_kernel<D, false, true>);
    return wl ? reinterpret_cast<const void *>(&ta_cuda_dq_rb_kernel<D, true, false>)
              : reinterpret_cast<const void *>(&ta_cuda_dq_rb_kernel<D, false, false>);
}


/* ---------------------------------------------------------------------------- */
/* dk, dv, register-blocked (issue 17)                                            */
/* ---------------------------------------------------------------------------- */

/*
 * The dk/dv kernel's arithmetic, element for element (REF's bits), for the
 * register-blocked problems with D = D_v in {32, 64} (ta_cuda_dkdv_rb_pick;
 * one feature group holds dk and dv). Per 64-key tile: k and v resident; for
 * the kv group's query heads ascending, their Q tiles ascending (each one
 * 64-row chunk), the q and dO tiles double-buffered by cp.async; S^T = K q^T
 * and dP^T = V dO^T in registers (keys 4ty + r, rows tx + 16c), P and dS of
 * the live entries into ps[i][j], dss[i][j]; then rows i ascending
 * dv_j = fmaf(P_ij, dO_i, dv_j) and dk_j = fmaf(dS_ij, q_i, dk_j) from +0
 * (a warp whose 8 keys every row of a full 64-row tile sees: no selects), the
 * chunk's partials into the (hi, lo) pairs; dk = store(scale * hi), dv =
 * store(hi). One block per SM (140 KB of shared memory at D = 64; 221 KB
 * for one part at D = 128).
 */
typedef struct ta_cuda_dkdv_rb_smem {
    int32_t lse, delta, keys, bounds, q, d_o, k, v, p, ds, floats;
} ta_cuda_dkdv_rb_smem;

static __host__ __device__ __forceinline__ ta_cuda_dkdv_rb_smem
ta_cuda_dkdv_rb_smem_make(int32_t d, int32_t part) {
    ta_cuda_dkdv_rb_smem m;
    int32_t end = 0;
    const int32_t tile = TA_CUDA_TILE * (d + 4);
    m.lse = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.delta = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.keys = ta_cuda_smem_take(&end, 2 * TA_CUDA_TILE);
    m.bounds = ta_cuda_smem_take(&end, 4);
    m.q = ta_cuda_smem_take(&end, 2 * tile); /* two buffers; the rows' reads past */
    m.d_o = ta_cuda_smem_take(&end, 2 * tile); /* D (features never stored) stay inside */
    m.k = ta_cuda_smem_take(&end, tile);
    m.v = ta_cuda_smem_take(&end, tile);
    m.p = ta_cuda_smem_take(&end, TA_CUDA_TILE * TA_CUDA_LDT);
    /* one part (dk or dv) needs dS or P only: one region (221 KB at D = 128) */
    m.ds = part == 0 ? ta_cuda_smem_take(&end, TA_CUDA_TILE * TA_CUDA_LDT) : m.p;
    m.floats = end;
    return m;
}

/* The (head, Q tile) pair number `it` of a key tile's loop: heads of the kv
 * group ascending, then Q tiles [q_begin, q_begin + nq) ascending; its q and
 * dO rows into buffer `buf` by cp.async (not committed). */
template <int D>
TA_CUDA_DEV void ta_cuda_dkdv_rb_load(const ta_cuda_bwd_params &p, const ta_tiling &t,
                                      const ta_tile_ctx &kc, int32_t h_kv, int32_t q_begin,
                                      int32_t nq, int32_t it, float *sq, float *sdo) {
    constexpr int LDQ = D + 4;
    const ta_cuda_head_slices hd = ta_cuda_head_of(p, kc, h_kv * p.group + it / nq);
    const int32_t qt = q_begin + it % nq;
    const int32_t row0 = ta_tile_row_eff_begin(&t, qt);
    const int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
    ta_cuda_rb_load<D, LDQ>(sq, p.q, hd.q, p.lay.q.seq, row0, rows);
    ta_cuda_rb_load<D, LDQ>(sdo, p.d_o, hd.d_o, p.lay.d_o.seq, row0, rows);
}

/* One pair's accumulation of the dk/dv kernel: rows i ascending (FULL: all
 * 64, no selects; else the tile's rows, entries live for row i's keys
 * keys[i] only), dv_j = fmaf(P_ij, dO_i, dv_j) (DV) and dk_j = fmaf(dS_ij,
 * q_i, dk_j) (DK) for this thread's keys col0 + 4ty + r and features
 * s*64 + 4tx + e; P, dS from ps, dss [i][j], q and dO rows LDQ apart. */
template <int NS, int LDQ, bool WL, bool DK, bool DV, bool FULL>
TA_CUDA_DEV void ta_cuda_dkdv_rb_acc(float (&acc_k)[4][NS][4], float (&acc_v)[4][NS][4],
                                     const float *ps, const float *dss, const float *sq,
                                     const float *sdo, const int2 *keys, int32_t col0,
                                     int32_t rows) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
    constexpr int unroll = FULL ? 4 : 1; /* (a pragma expands no macro) */
#pragma unroll(unroll)
    for (int32_t i = 0; i < (FULL ? TA_CUDA_TILE : rows); ++i) {
        const float4 p4 = *reinterpret_cast<const float4 *>(ps + i * TA_CUDA_LDT + 4 * ty);
        const float4 d4 = *reinterpret_cast<const float4 *>(dss + i * TA_CUDA_LDT + 4 * ty);
        const float pv[4] = {p4.x, p4.y, p4.z, p4.w}, dv[4] = {d4.x, d4.y, d4.z, d4.w};
        bool live[4];
        if (!FULL) {
            const int2 kv = keys[i];
#pragma unroll
            for (int r = 0; r < 4; ++r)
                live[r] = ta_cuda_in<WL>(col0 + 4 * ty + r, kv.x, kv.y);
        }
#pragma unroll
        for (int sl = 0; sl < NS; ++sl) {
            const float4 x4 =
                *reinterpret_cast<const float4 *>(sq + i * LDQ + sl * TA_CUDA_SLOT + 4 * tx);
            const float4 y4 =
                *reinterpret_cast<const float4 *>(sdo + i * LDQ + sl * TA_CUDA_SLOT + 4 * tx);
            const float xv[4] = {x4.x, x4.y, x4.z, x4.w}, yv[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (DV)
                        acc_v[r][sl][e] = FULL || live[r] ? fmaf(pv[r], yv[e], acc_v[r][sl][e])
                                                          : acc_v[r][sl][e];
                    if (DK)
                        acc_k[r][sl][e] = FULL || live[r] ? fmaf(dv[r], xv[e], acc_k[r][sl][e])
                                                          : acc_k[r][sl][e];
                }
        }
    }
}

/* PART: 0 dk and dv (D <= 64), 1 dk only, 2 dv only (D = 96, 128: two
 * launches, so that one block's accumulators and pairs fit its registers;
 * the dv part computes S and P alone, the dk part S, dP and dS). */
template <int D, bool WL, int PART, bool ACC>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 1)
    ta_cuda_dkdv_rb_kernel(const __grid_constant__ ta_cuda_bwd_params p) {
    constexpr int NS = (D + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT, LDQ = D + 4;
    constexpr bool DK = PART != 2, DV = PART != 1;
    extern __shared__ float4 ta_cuda_dkdv_rb_dyn_smem[];
    __shared__ ta_tile_ctx kctx_s;
    const ta_tiling t = p.t;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const int warp = tid / 32;
    const ta_cuda_dkdv_rb_smem sm = ta_cuda_dkdv_rb_smem_make(D, PART);
    float *base = reinterpret_cast<float *>(ta_cuda_dkdv_rb_dyn_smem);
    float *sk = base + sm.k, *sv = base + sm.v, *ps = base + sm.p, *dss = base + sm.ds;
    float *lse_s = base + sm.lse, *delta_s = base + sm.delta;
    int2 *keys = reinterpret_cast<int2 *>(base + sm.keys);
    int32_t *bounds = reinterpret_cast<int32_t *>(base + sm.bounds);
    const int32_t n_kt = t.num_k_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, 1);
        const ta_tile_ctx &kc = kctx_s;
        const int32_t col0 = ta_tile_col_eff_begin(&t, at.kt);
        const int32_t cols = ta_tile_col_eff_end(&t, at.kt) - col0;
        const int32_t kw = col0 + 8 * warp; /* this warp's first key (keys 4ty + r) */
        float acc_k[4][NS][4], acc_v[4][NS][4];
        float hi_k[4][NS][4], lo_k[4][NS][4], hi_v[4][NS][4], lo_v[4][NS][4];
        int32_t q_begin, q_end, nq, n_it, it;
        ta_cuda_acc_zero<NS>(hi_k);
        ta_cuda_acc_zero<NS>(lo_k);
        ta_cuda_acc_zero<NS>(hi_v);
        ta_cuda_acc_zero<NS>(lo_v);
        __syncthreads(); /* the previous tile is done with shared memory */
        if (tid == 0) kctx_s = ta_cuda_context(p, at.b_local, at.h_kv * p.group, 0);
        __syncthreads();
        if (ACC && DK) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_pairs_get<NS>(col0, cols, D, hi_k, lo_k, static_cast<const float *>(p.dk),
                                  p.dk_lo, kc.dk, p.lay.dk.seq);
        if (ACC && DV)
            ta_cuda_pairs_get<NS>(col0, cols, D, hi_v, lo_v, static_cast<const float *>(p.dv),
                                  p.dv_lo, kc.dv, p.lay.dv.seq);
        ta_tile_k_rows(&t, at.kt, kc.key_len, &q_begin, &q_end);
        nq = q_end - q_begin;
        n_it = nq > 0 ? p.group * nq : 0;
        /* k, v and the first pair's q, dO in flight */
        ta_cuda_rb_load<D, LDQ>(sk, p.k, kc.k, p.lay.k.seq, col0, cols);
        if (DK) ta_cuda_rb_load<D, LDQ>(sv, p.v, kc.v, p.lay.v.seq, col0, cols);
        if (n_it > 0)
            ta_cuda_dkdv_rb_load<D>(p, t, kc, at.h_kv, q_begin, nq, 0, base + sm.q, base + sm.d_o);
        ta_fast_cp_commit();
        for (it = 0; it < n_it; ++it) {
            const int32_t qt = q_begin + it % nq;
            const int32_t row0 = ta_tile_row_eff_begin(&t, qt);
            const int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
            const float *sq = base + sm.q + (it & 1) * TA_CUDA_TILE * LDQ;
            const float *sdo = base + sm.d_o + (it & 1) * TA_CUDA_TILE * LDQ;
            float s[4][4], dp[4][4];
            bool full;
            ta_fast_cp_wait<0>();
            __syncthreads(); /* this pair's rows landed; the last pair is done with the rest */
            if (it + 1 < n_it)
                ta_cuda_dkdv_rb_load<D>(p, t, kc, at.h_kv, q_begin, nq, it + 1,
                                        base + sm.q + ((it + 1) & 1) * TA_CUDA_TILE * LDQ,
                                        base + sm.d_o + ((it + 1) & 1) * TA_CUDA_TILE * LDQ);
            ta_fast_cp_commit();
            /* lse, D and the live keys of the tile's rows; the largest first
             * and smallest end key over the rows (warps 0 and 1) */
            ta_cuda_bwd_rows(p, &t, ta_cuda_head_of(p, kc, at.h_kv * p.group + it / nq).lse, row0,
                             rows, kc.key_len, lse_s, delta_s, keys);
            if (tid < TA_CUDA_TILE) {
                const int2 kv = keys[tid];
                const int32_t lo_max = __reduce_max_sync(0xffffffffu, kv.x);
                const int32_t hi_min = __reduce_min_sync(0xffffffffu, kv.y);
                if ((tid & 31) == 0) {
                    bounds[2 * warp] = lo_max;
                    bounds[2 * warp + 1] = hi_min;
                }
            }
            /* S^T = K q^T and dP^T = V dO^T, f ascending */
            ta_cuda_rb_dot<D, LDQ>(s, sk, sq);
            if (DK) ta_cuda_rb_dot<D, LDQ>(dp, sv, sdo);
            __syncthreads(); /* the row arrays and bounds published */
            /* P and dS of the live entries (key col0 + 4ty + r, row tx + 16c)
             * into ps[i][j], dss[i][j]; the others 0 */
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int32_t i = tx + 16 * c;
                const int2 kv = keys[i];
                const float lse_i = lse_s[i], d_i = delta_s[i];
                float pw[4], dw[4];
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    pw[r] = dw[r] = 0.0f;
                    if (ta_cuda_in<WL>(col0 + 4 * ty + r, kv.x, kv.y)) {
                        pw[r] = ta_cuda_exp_sel(p.scale * s[r][c] - lse_i);
                        if (DK) dw[r] = pw[r] * (dp[r][c] - d_i);
                    }
                }
                if (DV)
                    *reinterpret_cast<float4 *>(ps + i * TA_CUDA_LDT + 4 * ty) =
                        make_float4(pw[0], pw[1], pw[2], pw[3]);
                if (DK)
                    *reinterpret_cast<float4 *>(dss + i * TA_CUDA_LDT + 4 * ty) =
                        make_float4(dw[0], dw[1], dw[2], dw[3]);
            }
            full = rows == TA_CUDA_TILE &&
                   (bounds[0] > bounds[2] ? bounds[0] : bounds[2]) <= kw &&
                   (bounds[1] < bounds[3] ? bounds[1] : bounds[3]) >= kw + 8;
            __syncthreads(); /* ps, dss published */
            /* rows i ascending: dv += P dO, dk += dS q, from +0 */
            ta_cuda_acc_zero<NS>(acc_k);
            ta_cuda_acc_zero<NS>(acc_v);
            if (full)
                ta_cuda_dkdv_rb_acc<NS, LDQ, WL, DK, DV, true>(acc_k, acc_v, ps, dss, sq, sdo, keys,
                                                               col0, rows);
            else
                ta_cuda_dkdv_rb_acc<NS, LDQ, WL, DK, DV, false>(acc_k, acc_v, ps, dss, sq, sdo,
                                                                keys, col0, rows);
            /* the Q tile is one row chunk of its head: the partials into the pairs */
            if (DK) ta_cuda_acc_sum2<NS>(hi_k, lo_k, acc_k);
            if (DV) ta_cuda_acc_sum2<NS>(hi_v, lo_v, acc_v);
        }
        ta_fast_cp_wait<0>(); /* nothing in flight past the tile */
        /* dk = store(scale * hi), dv = store(hi), keys < cols (accumulating:
         * the pairs back, unscaled) */
        if (ACC && DK)
            ta_cuda_pairs_put<NS>(col0, cols, D, hi_k, lo_k, static_cast<float *>(p.dk), p.dk_lo,
                                  kc.dk, p.lay.dk.seq);
        if (ACC && DV)
            ta_cuda_pairs_put<NS>(col0, cols, D, hi_v, lo_v, static_cast<float *>(p.dv), p.dv_lo,
                                  kc.dv, p.lay.dv.seq);
        if (!ACC && DK)
            ta_cuda_store_block<TA_F32, NS>(col0, cols, D, hi_k, 1, p.scale, p.dk, kc.dk,
                                            p.lay.dk.seq);
        if (!ACC && DV)
            ta_cuda_store_block<TA_F32, NS>(col0, cols, D, hi_v, 0, 1.0f, p.dv, kc.dv, p.lay.dv.seq);
    }
}

template <int D, int PART> static const void *ta_cuda_dkdv_rb_at(bool wl, bool acc) {
    if (acc)
        return wl ? reinterpret_cast<const void *>(&ta_cuda_dkdv_rb_kernel<D, true, PART, true>)
                  : reinterpret_cast<const void *>(&ta_cuda_dkdv_rb_kernel<D, false, PART, true>);
    return wl ? reinterpret_cast<const void *>(&ta_cuda_dkdv_rb_kernel<D, true, PART, false>)
              : reinterpret_cast<const void *>(&ta_cuda_dkdv_rb_kernel<D, false, PART, false>);
}

/* 1 if the register-blocked backward kernels may run this call (their
 * requirements above; lat: the latent kernels run). */
static bool ta_cuda_bwd_rb_ok(const ta_plan *plan, const ta_bwd_args *a, bool lat) {
    const ta_problem *pr = &plan->p;
    const int32_t d = pr->head_dim;
    /* a row or key range: the general kernels, which cut their tiles to it */
    return !lat && !ta_cuda_bwd_ranged(plan) && pr->dtype == TA_F32 &&
           plan->stages.load != TA_LOAD_ROPE &&
           pr->head_dim_v == d && (d == 32 || d == 64 || d == 96 || d == 128) &&
           ta_cuda_rb_rows_aligned(pr, a->q, &plan->layout.q, 0) &&
           ta_cuda_rb_rows_aligned(pr, a->d_o, &plan->layout.d_o, 0) &&
           ta_cuda_rb_rows_aligned(pr, a->k, &plan->layout.k, 1) &&
           ta_cuda_rb_rows_aligned(pr, a->v, &plan->layout.v, 1);
}

/* The register-blocked dq kernel for this call, or NULL. */
static const void *ta_cuda_dq_rb_pick(const ta_plan *plan, const ta_bwd_args *a, bool lat) {
    const int32_t d = plan->p.head_dim;
    const bool wl = ta_cuda_left_bounded(plan), acc = a->accumulate != 0;
    if (!ta_cuda_bwd_rb_ok(plan, a, lat)) return NULL;
    return d == 32 ? ta_cuda_dq_rb_at<32>(wl, acc)
           : d == 64 ? ta_cuda_dq_rb_at<64>(wl, acc)
           : d == 96 ? ta_cuda_dq_rb_at<96>(wl, acc)
                     : ta_cuda_dq_rb_at<128>(wl, acc);
}

/* The register-blocked dk/dv kernels for this call into k[0..n): one (D 32,
 * 64: dk and dv) or two (D 96, 128: the dk part, then the dv part); n = 0:
 * the general kernel runs. */
static int ta_cuda_dkdv_rb_pick(const ta_plan *plan, const ta_bwd_args *a, bool lat,
                                const void *k[2]) {
    const int32_t d = plan->p.head_dim;
    const bool wl = ta_cuda_left_bounded(plan), acc = a->accumulate != 0;
    if (!ta_cuda_bwd_rb_ok(plan, a, lat)) return 0;
    if (d <= 64) {
        k[0] = d == 32 ? ta_cuda_dkdv_rb_at<32, 0>(wl, acc) : ta_cuda_dkdv_rb_at<64, 0>(wl, acc);
        return 1;
    }
    k[0] = d == 96 ? ta_cuda_dkdv_rb_at<96, 1>(wl, acc) : ta_cuda_dkdv_rb_at<128, 1>(wl, acc);
    k[1] = d == 96 ? ta_cuda_dkdv_rb_at<96, 2>(wl, acc) : ta_cuda_dkdv_rb_at<128, 2>(wl, acc);
    return 2;
}

/* ---------------------------------------------------------------------------- */
/* launch                                                                         */
/* ---------------------------------------------------------------------------- */

/* The instantiations, by dtype, slot count, left bound (WL,
 * ta_cuda_left_bounded) and the rotary stage (ROPE): dq 1..4 (ceil(D / 64));
 * dk/dv 2..4 (D + D_v >= 2 features, so a group holds 2, 3 or 4 slots, see
 * the top). */
template <bool WL, bool ROPE> struct ta_cuda_dq_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dq_kernel<DT, NS, WL, ROPE, false, false, false>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_dkdv_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dkdv_kernel<DT, NS, WL, ROPE, false, false, false>);
    }
};
/* The accumulating mode's (ACC: the pairs loaded and stored, SDPA only, so
 * never the rotary stage: ROPE is ignored, the pick never asks for it), which
 * the others compile out (their registers and spills stay as they were). */
template <bool WL, bool ROPE> struct ta_cuda_dq_acc_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dq_kernel<DT, NS, WL, false, false, true, false>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_dkdv_acc_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dkdv_kernel<DT, NS, WL, false, false, true, false>);
    }
};
/* Latent attention's (cuda/ta_cuda_latent.cu): f32, no rotary stage, with the
 * band's steps and the recomputation of ctx~ (LAT), which the others compile
 * out (their registers and spills stay as they were). */
template <bool WL> struct ta_cuda_dq_lat_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dq_kernel<DT, NS, WL, false, true, false, false>);
    }
};
template <bool WL> struct ta_cuda_dkdv_lat_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dkdv_kernel<DT, NS, WL, false, true, false, false>);
    }
};
/* A call with a row or key range (RNG: the tiles cut to the ranges,
 * ta_cuda_cut_range), plain (with or without the rotary stage) or
 * accumulating (never the rotary stage: ROPE ignored). Always with the left
 * bound (WL true is right for every mask, a row's lo is 0 without a window),
 * so each dtype and count has two plain twins and one accumulating one; the
 * others compile the cut out (their registers and spills stay as they were). */
template <bool WL, bool ROPE> struct ta_cuda_dq_rng_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dq_kernel<DT, NS, true, ROPE, false, false, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_dkdv_rng_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dkdv_kernel<DT, NS, true, ROPE, false, false, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_dq_acc_rng_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dq_kernel<DT, NS, true, false, false, true, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_dkdv_acc_rng_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_dkdv_kernel<DT, NS, true, false, false, true, true>);
    }
};

/* The delta kernel of plan's dtype, one thread per row of [B, H, S_q], at
 * most 65,536 blocks (grid-stride beyond); shared with the MTA backward
 * (cuda/ta_cuda_bwd_common.cuh). */
ta_status ta_cuda_bwd_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta, void *stream) {
    const int64_t grid_cap = 65536;
    const int64_t blocks = (int64_t)((plan->n_lse + TA_CUDA_THREADS - 1) / TA_CUDA_THREADS);
    const void *kernel = reinterpret_cast<const void *>(&ta_cuda_delta_kernel<TA_F32>);
    size_t n_rows = plan->n_lse;
    int32_t dv = plan->p.head_dim_v, heads_q = plan->p.heads_q, seq_q = plan->p.seq_q;
    ta_strides o_st = plan->layout.o, d_o_st = plan->layout.d_o;
    const void *o = a->o, *d_o = a->d_o;
    void *args[9];
    if (plan->p.dtype == TA_F16)
        kernel = reinterpret_cast<const void *>(&ta_cuda_delta_kernel<TA_F16>);
    if (plan->p.dtype == TA_BF16)
        kernel = reinterpret_cast<const void *>(&ta_cuda_delta_kernel<TA_BF16>);
    args[0] = &o;
    args[1] = &d_o;
    args[2] = &delta;
    args[3] = &n_rows;
    args[4] = &dv;
    args[5] = &heads_q;
    args[6] = &seq_q;
    args[7] = &o_st;
    args[8] = &d_o_st;
    return ta_cuda_launch_args(kernel, blocks < grid_cap ? blocks : grid_cap, 0, args, stream);
}

extern "C" ta_status ta_cuda_sdpa_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                      const ta_cuda_bwd_ws *ws, void *stream) {
    const void *ptrs[13] = {a->q,   a->k,   a->v,   a->o,   a->d_o,
                            a->lse, a->dq,  a->dk,  a->dv,  ws->delta,
                            a->accumulate ? a->dq_lo : NULL,
                            a->accumulate ? a->dk_lo : NULL,
                            a->accumulate ? a->dv_lo : NULL};
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 13)) != TA_OK) return st;
    if ((st = ta_cuda_check_rope(plan)) != TA_OK) return st;
    if ((st = ta_cuda_bwd_delta(plan, a, ws->delta, stream)) != TA_OK) return st;
    return ta_cuda_sdpa_bwd_kernels(plan, a, ws, NULL, stream);
}

extern "C" ta_status ta_cuda_sdpa_bwd_kernels(const ta_plan *plan, const ta_bwd_args *a,
                                              const ta_cuda_bwd_ws *ws, float *ctx_out,
                                              void *stream) {
    const ta_problem *pr = &plan->p;
    const int nk = (pr->head_dim + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int nv = (pr->head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int n_groups = (nk + nv + TA_CUDA_SLOTS - 1) / TA_CUDA_SLOTS;
    /* the rotary stage turns a dk row back across its slots: all in one group */
    const int ns_even = (nk + nv + n_groups - 1) / n_groups;
    const int ns_dkdv = plan->stages.load == TA_LOAD_ROPE && nk > ns_even ? nk : ns_even;
    /* the band's steps or the recomputation of ctx~: the latent kernels (a
     * sub-plan of the projections alone has neither stage nor latent_dim) */
    const bool lat = ctx_out != NULL || ta_cuda_latent_plan(plan);
    const bool ranged = ta_cuda_bwd_ranged(plan); /* a row or key range */
    const void *k_rb[2] = {NULL, NULL};
    int n_rb = ta_cuda_dkdv_rb_pick(plan, a, lat, k_rb);
    const void *k_dq = ta_cuda_dq_rb_pick(plan, a, lat), *k_dkdv;
    size_t smem_dkdv, smem_dq;
    ta_tiling t;
    ta_cuda_bwd_params prm;
    ta_cuda_launch_desc launch[3]; /* dk/dv (one or two), then dq */
    int n = 0;
    ta_status st;
    memset(&prm, 0, sizeof prm);
    /* the backward's own 64 x 64 tiles (its bits depend on no tile size), the plan's mask */
    if ((st = ta_cuda_tiling(plan, TA_CUDA_TILE, TA_CUDA_TILE, TA_TILING_BWD, &t)) != TA_OK)
        return st;
    /* one size per kernel: need and opt-in are the same. A register-blocked
     * kernel past the device's shared memory (D = 128 on sm_80's 163 KB)
     * leaves the call to the general one */
    if (n_rb) {
        smem_dkdv = (size_t)ta_cuda_dkdv_rb_smem_make(pr->head_dim, n_rb == 2).floats * sizeof(float);
        for (int i = 0; i < n_rb; ++i)
            if ((st = ta_cuda_smem_opt_in(k_rb[i], smem_dkdv, smem_dkdv)) != TA_OK) {
                if (st != TA_ERR_UNSUPPORTED) return st;
                n_rb = 0;
                break;
            }
    }
    if (k_dq) {
        smem_dq = (size_t)ta_cuda_dq_rb_smem_make(pr->head_dim).floats * sizeof(float);
        if ((st = ta_cuda_smem_opt_in(k_dq, smem_dq, smem_dq)) != TA_OK) {
            if (st != TA_ERR_UNSUPPORTED) return st;
            k_dq = NULL;
        }
    }
    if (n_rb) {
        k_dkdv = k_rb[0];
    } else if (ranged) { /* the tiles cut to the ranges (never latent: validated) */
        k_dkdv = a->accumulate ? ta_cuda_pick_plan<ta_cuda_dkdv_acc_rng_family, 2>(plan, ns_dkdv)
                               : ta_cuda_pick_plan<ta_cuda_dkdv_rng_family, 2>(plan, ns_dkdv);
        smem_dkdv = (size_t)ta_cuda_bwd_smem_make(1).floats * sizeof(float);
        if ((st = ta_cuda_smem_opt_in(k_dkdv, smem_dkdv, smem_dkdv)) != TA_OK) return st;
    } else {
        k_dkdv = a->accumulate
                     ? ta_cuda_pick_plan<ta_cuda_dkdv_acc_family, 2>(plan, ns_dkdv)
                     : ta_cuda_pick_plan_lat<ta_cuda_dkdv_family, ta_cuda_dkdv_lat_family, 2>(
                           plan, ns_dkdv, lat);
        smem_dkdv = (size_t)ta_cuda_bwd_smem_make(1).floats * sizeof(float);
        if ((st = ta_cuda_smem_opt_in(k_dkdv, smem_dkdv, smem_dkdv)) != TA_OK) return st;
    }
    if (!k_dq) {
        k_dq = ranged && a->accumulate ? ta_cuda_pick_plan<ta_cuda_dq_acc_rng_family, 1>(plan, nk)
               : ranged                ? ta_cuda_pick_plan<ta_cuda_dq_rng_family, 1>(plan, nk)
               : a->accumulate
                   ? ta_cuda_pick_plan<ta_cuda_dq_acc_family, 1>(plan, nk)
                   : ta_cuda_pick_plan_lat<ta_cuda_dq_family, ta_cuda_dq_lat_family, 1>(plan, nk,
                                                                                       lat);
        smem_dq = (size_t)ta_cuda_bwd_smem_make(0).floats * sizeof(float);
        if ((st = ta_cuda_smem_opt_in(k_dq, smem_dq, smem_dq)) != TA_OK) return st;
    }
    ta_cuda_params_bwd(&prm, plan, &t, a, ws);
    prm.n_groups = n_rb ? 1 : n_groups; /* the register-blocked kernels: one group each */
    /* accumulating (SDPA only, validated): every kernel picked above is an ACC one */
    prm.dq_lo = a->accumulate ? a->dq_lo : NULL;
    prm.dk_lo = a->accumulate ? a->dk_lo : NULL;
    prm.dv_lo = a->accumulate ? a->dv_lo : NULL;
    /* the output ranges (the RNG kernels read them; the whole sequence without
     * ranges, when the register-blocked kernels may run) */
    prm.rg_row0 = plan->bwd.row_begin;
    prm.rg_row1 = plan->bwd.row_end;
    prm.rg_key0 = plan->bwd.key_begin;
    prm.rg_key1 = plan->bwd.key_end;
    prm.ctx_out = ctx_out;
    /* the recomputation of ctx~: the dq kernel alone */
    if (!ctx_out) {
        launch[n++] = ta_cuda_launch_of(k_dkdv, &prm,
                                        (int64_t)pr->heads_kv * t.num_k_tiles * prm.n_groups, 0,
                                        smem_dkdv);
        if (n_rb == 2)
            launch[n++] = ta_cuda_launch_of(k_rb[1], &prm, (int64_t)pr->heads_kv * t.num_k_tiles,
                                            0, smem_dkdv);
    }
    launch[n++] = ta_cuda_launch_of(k_dq, &prm, (int64_t)pr->heads_q * t.num_q_tiles, 0, smem_dq);
    return ta_cuda_launch_batches(launch, n, a->seqlens_k, pr->batch, stream);
}

/* ---------------------------------------------------------------------------- */
/* ta_bwd_finish                                                                  */
/* ---------------------------------------------------------------------------- */

/* One gradient of ta_bwd_finish: element e of the contiguous hi words
 * [B, heads, seq, dim] into out (dtype DT, strides st): store(mul * hi[e])
 * (scaled: dq, dk) or store(hi[e]) (dv), the kernels' own store
 * (ta_cuda_store_block), so ta_ref_bwd_finish's bits. Grid-stride. */
struct ta_cuda_finish_params {
    const float *hi;
    void *out;
    ta_strides st;
    int64_t n; /* B heads seq dim */
    int32_t heads, seq, dim, scaled;
    float mul;
};

template <int DT>
__global__ void __launch_bounds__(256)
    ta_cuda_finish_kernel(const __grid_constant__ ta_cuda_finish_params p) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < p.n;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = e / p.dim;
        const int32_t d = (int32_t)(e % p.dim);
        const int32_t r = (int32_t)(row % p.seq);
        const int32_t h = (int32_t)(row / p.seq % p.heads);
        const int32_t b = (int32_t)(row / p.seq / p.heads);
        const float x = p.hi[e];
        ta_cuda_store<DT>(p.out, (size_t)(ta_cuda_row(ta_strides_slice(&p.st, b, h), p.st.seq, r) + d),
                          p.scaled ? p.mul * x : x);
    }
}

/* One gradient's launch (hi NULL: not requested, nothing launched). */
static ta_status ta_cuda_finish_one(const ta_plan *plan, const float *hi, void *out,
                                    const ta_strides *st, int32_t heads, int32_t seq, int32_t dim,
                                    int32_t scaled, void *stream) {
    const int64_t threads = 256, blocks_max = 65536;
    const void *kernel = reinterpret_cast<const void *>(&ta_cuda_finish_kernel<TA_F32>);
    ta_cuda_finish_params prm;
    void *args[1];
    int64_t blocks;
    if (!hi) return TA_OK;
    if (plan->p.dtype == TA_F16)
        kernel = reinterpret_cast<const void *>(&ta_cuda_finish_kernel<TA_F16>);
    if (plan->p.dtype == TA_BF16)
        kernel = reinterpret_cast<const void *>(&ta_cuda_finish_kernel<TA_BF16>);
    prm.hi = hi;
    prm.out = out;
    prm.st = *st;
    prm.n = (int64_t)plan->p.batch * heads * seq * dim;
    prm.heads = heads;
    prm.seq = seq;
    prm.dim = dim;
    prm.scaled = scaled;
    prm.mul = plan->p.scale;
    blocks = (prm.n + threads - 1) / threads;
    args[0] = &prm;
    return ta_cuda_launch_threads(kernel, blocks < blocks_max ? blocks : blocks_max, (int)threads,
                                  0, args, stream);
}

extern "C" ta_status ta_cuda_bwd_finish(const ta_plan *plan, const ta_bwd_finish_args *a,
                                        void *stream) {
    const ta_problem *pr = &plan->p;
    const ta_layout *lay = &plan->layout;
    const void *ptrs[6] = {a->dq_hi, a->dk_hi, a->dv_hi, a->dq, a->dk, a->dv};
    ta_status st = ta_cuda_check_pointers(ptrs, 6);
    if (st == TA_OK)
        st = ta_cuda_finish_one(plan, a->dq_hi, a->dq, &lay->dq, pr->heads_q, pr->seq_q,
                                plan->dim_k, 1, stream);
    if (st == TA_OK)
        st = ta_cuda_finish_one(plan, a->dk_hi, a->dk, &lay->dk, pr->heads_kv, pr->seq_k,
                                plan->dim_k, 1, stream);
    if (st == TA_OK)
        st = ta_cuda_finish_one(plan, a->dv_hi, a->dv, &lay->dv, pr->heads_kv, pr->seq_k,
                                plan->dim_v, 0, stream);
    return st;
}
