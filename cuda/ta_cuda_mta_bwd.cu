/*
 * CUDA MTA backward (pre-softmax key-query conv), TA_PRECISION_EXACT:
 * bit-identical to ref/ta_ref_bwd.c + ref/ta_ref_conv.c (docs/mta.md,
 * Specification, backward steps 1-5). Four kernels, no atomics:
 *
 *   delta  the SDPA one (cuda/ta_cuda_bwd_common.cuh): D_i = dot(dO_i, o_i, D_v)
 *   dk/dv  one block per (b, kv head, K tile of its own tiling, feature group);
 *          threads over (key j, feature d); each accumulator sums over (query
 *          head of the group ascending, row ascending), Q tiles from
 *          the Q tiles [q_begin, q_end) that meet the key tile (ta_tile_k_rows).
 *          dk/dv do not depend on the tiling (docs/mta.md step 4), so the
 *          kernel picks tiles that fit its shared memory.
 *   dq+dw  one block per (b, query head, plan->bwd Q tile, dq feature group);
 *          the context's k tiles [k_begin, k_end) of plan->bwd ascending; dq in registers
 *          (threads over (row, feature)), the dconv_w partial part(b, qt, kt)
 *          one register per (a, b') (thread n owns entries n and n + 256), and
 *          R(b, qt) = 0 + part(kt = 0) + part(kt = 1) + ..., a (hi, lo) pair of
 *          registers (ta_sum2_add, alpha = 1), its hi word written to
 *          ws->dw_rows. The plan's tile pairs are the contractual dconv_w cuts.
 *          With one band per tile and c_q c_k <= 128, D <= 128, two pairs'
 *          chains run at once (threads 0..127 and 128..255; "paired").
 *   merge  one thread per (h, a, b'): dconv_w = 0 + R(0, 0) + R(0, 1) + ...
 *          (batch, then Q tile ascending; Q tiles with no k tile skipped), a
 *          pair (dconv_w, ws->dw_lo) carried across the batch chunks.
 *
 * Both gradient kernels run the same recomputation on a *band*: effective rows
 * [row0, row0 + rows) x effective columns [col0, col0 + cols) of one tile pair
 * (a band is the whole pair, or, where the pair's regions would not fit in
 * shared memory, a run of its rows; the sums below then visit the bands in row
 * order, which is the reference's order):
 *
 *   loaded    [row0-(c_q-1), row0+rows+(c_q-1)) x [col0-2P, col0+cols+2P)   S
 *   gradient  [row0, row0+rows+(c_q-1))          x [col0-P,  col0+cols+P)    P, dC
 *   effective [row0, row0+rows)                  x [col0,    col0+cols)      dS
 *
 *   1. S = vis ? scale * dot(q_r, k_j, D) : 0           (dot tile, ta_ref_scores)
 *   2. live: P = ta_exp(C - lse), C = conv_w(S)          (ta_ref_conv_scores)
 *   3. live: dC = P * (dot(dO_i, v_j, D_v) - D_i); else 0 (ta_ref_bwd_probs)
 *   4. vis: dS = conv_w^T(dC); else 0                    (ta_ref_conv_grad)
 *
 * vis: key j is in row r's interval [lo, hi) (ta_cuda_row_keys: causal,
 * seqlens_k, window); live: vis and lse_r > -inf, the interval [lo, live_hi)
 * with live_hi = 0 for a dead row. Entries that are neither are skipped by
 * the sums, never added as zeros. Slices come from the per-tile context
 * (ta_cuda_context) under the call's layout.
 *
 * Every value is a function of its absolute (row, column) alone, so any band
 * gives the reference's bits. Threads split independent outputs only; every
 * sum is one register (or shared word) running the reference's sequence.
 * dq, dk and dv run it in partials of the absolute 64-index chunks of
 * src/ta_sum2.h (dq: keys [64c, 64c + 64); dk, dv: rows [64c, 64c + 64) of a
 * query head): acc holds the chunk's partial from +0, which enters the pair
 * (hi, lo) by ta_sum2_add (alpha = 1) where the next chunk starts, at a head's
 * end and at the end; the store reads hi.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_bwd_common.cuh"
#include "ta_cuda_host.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
#include "ta_math.h"
}

/* Dynamic shared memory every MTA backward kernel is opted in to (always this
 * value, so concurrent callers set the same attribute); the geometry below is
 * chosen to fit it. Under the 99 KB an sm_86/sm_89 block may have. */
#define TA_CUDA_MTA_BWD_SMEM_MAX ((size_t)98 * 1024)
/* Outputs per thread of the conv and the transposed conv: one row, 4 columns. */
#define TA_CUDA_MTA_STRIP 4
/* 64 x 64 (rows x features) dq accumulator blocks per dq block. */
#define TA_CUDA_MTA_ACC_BLOCKS 4
/* Paired dconv_w partials: threads [0, 128) run one tile pair's chains, threads
 * [128, 256) the next pair's, so c_q c_k <= 128. */
#define TA_CUDA_MTA_PAIR_THREADS (TA_CUDA_THREADS / 2)

/* ---------------------------------------------------------------------------- */
/* shared-memory layout of a band (host and device)                              */
/* ---------------------------------------------------------------------------- */

/*
 * Floats, from the (16-byte aligned) base; rows_eff x cols_eff is the largest
 * band, P = (c_k-1)/2, P_q = c_q-1:
 *
 *   +-----------------+----------------------------+----------------------------+
 *   | stage           | s  [rows+2P_q][cols+4P]    | p  [rows+P_q][cols+2P]     |
 *   | STAGE_BUF       | S on the loaded region     | P on the gradient region   |
 *   +-----------------+----------------------------+----------------------------+
 *   | dc [rows+P_q][cols+2P] | ds [rows][cols] | w [c_q c_k] | lse, delta, key_lo, key_hi,     |
 *   |                        |                 |             | live_hi [rows+2P_q]             |
 *   +------------------------+-----------------+-------------+---------------------------------+
 *   | dq, paired: xfer, wdc, ws (ta_cuda_mta_dq_kernel) | dq: r_hi, r_lo [c_q c_k] each      |
 *   +---------------------------------------------------+-------------------------------------+
 *
 * The row arrays hold the band's loaded rows [row0 - P_q, row0 + rows + P_q):
 * loaded row x is gradient row x - P_q and effective row x - P_q.
 */
typedef struct ta_cuda_mta_bwd_smem {
    int32_t lds, ldg, ldd; /* row strides of s, p/dc, ds */
    int32_t off_s, off_p, off_dc, off_ds, off_w, off_lse, off_delta, off_key_lo, off_key_hi,
        off_live_hi;
    int32_t ldw_dc, ldw_s;             /* row strides of the stashed dC and S (dq, paired) */
    int32_t off_xfer, off_wdc, off_ws; /* dq, paired dconv_w partials: see ta_cuda_mta_dq_kernel */
    int32_t off_r_hi, off_r_lo;        /* dq: the pairs R(b, qt), entry n at n */
    int32_t floats;                    /* total */
} ta_cuda_mta_bwd_smem;

static inline __host__ __device__ void ta_cuda_mta_bwd_smem_make(ta_cuda_mta_bwd_smem *m,
                                                                 int32_t rows_eff, int32_t cols_eff,
                                                                 int32_t conv_q, int32_t conv_k,
                                                                 int32_t dq, int32_t paired) {
    const int32_t pq = conv_q - 1, pk = (conv_k - 1) / 2;
    const int32_t g_rows = rows_eff + pq, l_rows = rows_eff + 2 * pq;
    int32_t off = TA_CUDA_STAGE_BUF;
    /* odd strides: a warp's threads walk rows (column strips, see
     * ta_cuda_mta_conv_strip), so odd strides keep them on distinct banks; + 3
     * columns of padding for the last strip of a row (read, never used) */
    m->lds = (cols_eff + 4 * pk + TA_CUDA_MTA_STRIP - 1) | 1;
    m->ldg = (cols_eff + 2 * pk + TA_CUDA_MTA_STRIP - 1) | 1;
    m->ldd = cols_eff | 1;
    m->off_s = off;
    off += (rows_eff + 2 * pq) * m->lds;
    m->off_p = off;
    off += g_rows * m->ldg;
    m->off_dc = off;
    off += g_rows * m->ldg;
    m->off_ds = off;
    off += rows_eff * m->ldd;
    m->off_w = off;
    off += conv_q * conv_k;
    m->off_lse = off;
    off += l_rows;
    m->off_delta = off;
    off += l_rows;
    m->off_key_lo = off;
    off += l_rows;
    m->off_key_hi = off;
    off += l_rows;
    m->off_live_hi = off;
    off += l_rows;
    /* paired dconv_w partials (dq only): one pair's dC on E and the S it reads */
    m->ldw_dc = cols_eff;
    m->ldw_s = (cols_eff + 2 * pk) | 1;
    m->off_xfer = off;
    off += paired ? TA_CUDA_MTA_PAIR_THREADS : 0;
    m->off_wdc = off;
    off += paired ? rows_eff * m->ldw_dc : 0;
    m->off_ws = off;
    off += paired ? g_rows * m->ldw_s : 0;
    /* dq: the pairs R(b, qt) in shared memory rather than registers (the dq
     * kernel is at its register cap; each is touched once per K tile, by the
     * thread that owns its entry) */
    m->off_r_hi = off;
    off += dq ? conv_q * conv_k : 0;
    m->off_r_lo = off;
    off += dq ? conv_q * conv_k : 0;
    m->floats = off;
}

/* ---------------------------------------------------------------------------- */
/* kernel parameters                                                             */
/* ---------------------------------------------------------------------------- */

/* The base (t: dq and merge plan->bwd, dk/dv the kernel's own tiling; dw_rows
 * [B, H, n_q, c_q, c_k], n_q = plan->bwd.num_q_tiles) and each kernel's geometry. */
struct ta_cuda_mta_bwd_params : ta_cuda_params {
    ta_cuda_mta_bwd_smem sm; /* dq, dk/dv: the band's shared-memory offset table */
    int32_t band_rows;       /* dq: effective rows per band, divides 64 */
    int32_t n_groups;        /* dq: accumulator groups; dk/dv: feature groups */
    int32_t n_slots;         /* dq: slots of D, ceil(D / 64) */
    int32_t acc_blocks;      /* dq: ceil(rows_eff / 64) x n_slots accumulator blocks in all */
    int32_t dw_paired; /* dq: dconv_w partials of two tile pairs at once (one band per tile) */
    float *dw_lo;      /* merge: [H, c_q, c_k] lo words of dconv_w's pairs (ws->dw_lo; the
                          caller's args.dconv_w_lo in the accumulating mode) */
    int32_t dw_cont;   /* merge: 1 in the accumulating mode: the first batch chunk
                          continues the caller's pair (dconv_w, dw_lo) instead of (0, 0) */
    /* the accumulating mode (ta_bwd_args.accumulate; the kernels' template
     * parameter ACC): dq, dk, dv of the base are the hi words of the caller's
     * f32 pairs, these their lo words (the gradients' strides); NULL otherwise */
    float *dq_lo, *dk_lo, *dv_lo;
    /* dk/dv: the output rows [rg_row0, rg_row1) and keys [rg_key0, rg_key1)
     * (the call's ranges, on plan->bwd's tiles but not on the kernel's own:
     * it cuts its tiles to them, ta_cuda_cut_range). dq and merge run
     * plan->bwd, which holds the ranges itself. */
    int32_t rg_row0, rg_row1, rg_key0, rg_key1;
};

/* A band: effective rows [row0, row0 + rows), columns [col0, col0 + cols). */
typedef struct ta_cuda_mta_band {
    int32_t row0, rows, col0, cols;
} ta_cuda_mta_band;

/* Shared buffers of a band, carved by ta_cuda_mta_bwd_smem. */
typedef struct ta_cuda_mta_bwd_bufs {
    float *stage, *s, *p, *dc, *ds, *w, *lse, *delta; /* row arrays: [loaded row] */
    int32_t *key_lo, *key_hi, *live_hi;               /* [loaded row] */
    float *xfer, *wdc, *ws; /* dq, paired partials */
    float *r_hi, *r_lo;     /* dq: [c_q c_k] each, the pairs R(b, qt) */
} ta_cuda_mta_bwd_bufs;

TA_CUDA_DEV ta_cuda_mta_bwd_bufs ta_cuda_mta_bwd_carve(float *base, const ta_cuda_mta_bwd_smem &m) {
    ta_cuda_mta_bwd_bufs b;
    b.stage = base;
    b.s = base + m.off_s;
    b.p = base + m.off_p;
    b.dc = base + m.off_dc;
    b.ds = base + m.off_ds;
    b.w = base + m.off_w;
    b.lse = base + m.off_lse;
    b.delta = base + m.off_delta;
    b.key_lo = reinterpret_cast<int32_t *>(base + m.off_key_lo);
    b.key_hi = reinterpret_cast<int32_t *>(base + m.off_key_hi);
    b.live_hi = reinterpret_cast<int32_t *>(base + m.off_live_hi);
    b.xfer = base + m.off_xfer;
    b.wdc = base + m.off_wdc;
    b.ws = base + m.off_ws;
    b.r_hi = base + m.off_r_hi;
    b.r_lo = base + m.off_r_lo;
    return b;
}

/* ---------------------------------------------------------------------------- */
/* device building blocks                                                        */
/* ---------------------------------------------------------------------------- */

/*
 * Dot products of a rectangle: for x < n_a, y < n_b,
 *   epi(x, y, dot(A[a_row0 + x], B[b_row0 + y], n_feat))    (+0, fmaf, f ascending)
 * A row r is row r of the slice a; rows outside [0, a_seq) are zero and never
 * read (likewise B). Covered in 64 x 64 tiles, one ta_cuda_dot_tile_range
 * each; each thread owns a 4 x 4 micro-tile (rows 4ty + r, columns 4tx + c).
 * rope: the rotary stage of A's and B's rows (NULL: none).
 */
template <int DT, typename Epi>
TA_CUDA_DEV void ta_cuda_mta_dot_rect(const ta_cuda_rows &a, int32_t a_seq, int32_t a_row0,
                                      int32_t n_a, const ta_cuda_rows &b, int32_t b_seq,
                                      int32_t b_row0, int32_t n_b, int32_t n_feat, float *stage,
                                      const Epi &epi, const ta_cuda_rope_src *rope = nullptr) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
    for (int32_t ta0 = 0; ta0 < n_a; ta0 += TA_CUDA_TILE) {
        /* tile rows x read A row a_row0 + ta0 + x: x < n_a - ta0, inside [0, a_seq) */
        const int32_t ra0 = a_row0 + ta0;
        const int32_t a_lo = ta_tiling_max_i32(0, -ra0);
        const int32_t a_hi = ta_tiling_min_i32(ta_tiling_min_i32(TA_CUDA_TILE, n_a - ta0),
                                               a_seq - ra0);
        for (int32_t tb0 = 0; tb0 < n_b; tb0 += TA_CUDA_TILE) {
            const int32_t rb0 = b_row0 + tb0;
            const int32_t b_lo = ta_tiling_max_i32(0, -rb0);
            const int32_t b_hi = ta_tiling_min_i32(ta_tiling_min_i32(TA_CUDA_TILE, n_b - tb0),
                                                   b_seq - rb0);
            float acc[4][4];
            ta_cuda_dot_tile_range<DT>(acc, a, ra0, a_lo, a_hi, b, rb0, b_lo, b_hi, n_feat, stage,
                                       nullptr, 0, rope);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int32_t x = ta0 + 4 * ty + r;
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int32_t y = tb0 + 4 * tx + c;
                    if (x < n_a && y < n_b) epi(x, y, acc[r][c]);
                }
            }
        }
    }
}

/*
 * Four convolved scores of one row, columns y0 .. y0+3 of the gradient region
 * (ta_ref_conv_at for each): s0 points at S[x][y0] of the loaded tile (row
 * stride lds), so output o's term (a, b) is s0[a * lds + o + b];
 *   c[o] = +0; a ascending, b ascending: c[o] = fmaf(w[a][b], S[..][o + b], c[o]).
 * Each output keeps its own accumulator and order; the four share the loads
 * of a sliding window (one new S value per b). Reads up to 3 columns past the
 * last output's window (row padding).
 */
TA_CUDA_DEV void ta_cuda_mta_conv_strip(float c[TA_CUDA_MTA_STRIP], const float *s0, int32_t lds,
                                        const float *w, int32_t cq, int32_t ck) {
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (int32_t a = 0; a < cq; ++a) {
        const float *sr = s0 + a * lds, *wr = w + a * ck;
        float v0 = sr[0], v1 = sr[1], v2 = sr[2];
        for (int32_t b = 0; b < ck; ++b) {
            const float v3 = sr[b + 3], wb = wr[b];
            c0 = fmaf(wb, v0, c0);
            c1 = fmaf(wb, v1, c1);
            c2 = fmaf(wb, v2, c2);
            c3 = fmaf(wb, v3, c3);
            v0 = v1;
            v1 = v2;
            v2 = v3;
        }
    }
    c[0] = c0;
    c[1] = c1;
    c[2] = c2;
    c[3] = c3;
}

/*
 * Four raw-score gradients of one row, columns y0 .. y0+3 of the effective
 * region (ta_ref_conv_grad for each): d0 points at dC[r + (c_q-1)][j0 + P] of
 * the gradient tile (row stride ldg), so output o's term (a, b) is
 * d0[-a * ldg + o - b];
 *   d[o] = +0; a ascending, b ascending: d[o] = fmaf(w[a][b], dC[..][o - b], d[o]).
 * The window slides left (one new dC value per b).
 */
TA_CUDA_DEV void ta_cuda_mta_conv_grad_strip(float d[TA_CUDA_MTA_STRIP], const float *d0,
                                             int32_t ldg, const float *w, int32_t cq, int32_t ck) {
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (int32_t a = 0; a < cq; ++a) {
        const float *dr = d0 - a * ldg, *wr = w + a * ck;
        float v1 = dr[1], v2 = dr[2], v3 = dr[3];
        for (int32_t b = 0; b < ck; ++b) {
            const float v0 = dr[-b], wb = wr[b];
            c0 = fmaf(wb, v0, c0);
            c1 = fmaf(wb, v1, c1);
            c2 = fmaf(wb, v2, c2);
            c3 = fmaf(wb, v3, c3);
            v3 = v2;
            v2 = v1;
            v1 = v0;
        }
    }
    d[0] = c0;
    d[1] = c1;
    d[2] = c2;
    d[3] = c3;
}

/*
 * The recomputation of one band (steps 1-4 at the top) for the context c (the
 * query head's q, d_o, lse slices, the kv head's k, v slices, the key length;
 * shared memory, read where used). Needs the head's kernel in bf.w (written
 * before the call). need_dc = 0 stops after P (a dk/dv group without dk
 * slots). Starts and ends with __syncthreads(): afterwards bf.p (P, live
 * entries; 0 elsewhere), bf.dc, bf.ds, bf.s and the row arrays hold the band.
 */
template <int DT, bool WL, bool ROPE>
TA_CUDA_DEV void
ta_cuda_mta_band_recompute(const ta_cuda_mta_bwd_params &p, const ta_tiling &t,
                           const ta_cuda_mta_bwd_smem &m, const ta_cuda_mta_bwd_bufs &bf,
                           const ta_cuda_mta_band &bd, const ta_tile_ctx &c, bool need_dc) {
    const int tid = (int)threadIdx.x;
    const int32_t pq = p.conv_q - 1, pk = (p.conv_k - 1) / 2, ck = p.conv_k, cq = p.conv_q;
    const int32_t g_rows = bd.rows + pq, g_cols = bd.cols + 2 * pk, l_rows = bd.rows + 2 * pq;
    const int32_t lds = m.lds, ldg = m.ldg, ldd = m.ldd;
    const float neg_inf = ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
    const float scale = p.scale;
    float *s = bf.s, *pb = bf.p, *dc = bf.dc, *ds = bf.ds;
    const float *w = bf.w;
    /* the row arrays of gradient row x (loaded row x + pq) */
    const float *lse_g = bf.lse + pq, *delta_g = bf.delta + pq;
    const int32_t *lo_g = bf.key_lo + pq, *hi_g = bf.key_hi + pq, *live_g = bf.live_hi + pq;
    int32_t e;
    __syncthreads(); /* the previous band is done with every buffer */
    /* row arrays of the loaded rows: lse, D, visible keys [lo, hi), live end */
    for (e = tid; e < l_rows; e += TA_CUDA_THREADS) {
        const int32_t i = bd.row0 - pq + e;
        float l = neg_inf, d = 0.0f;
        int32_t lo = 0, hi = 0;
        if (i >= 0 && i < t.seq_q) {
            l = p.lse[c.lse + i];
            d = p.delta[c.lse + i];
            ta_cuda_row_keys(&t, i, c.key_len, &lo, &hi);
        }
        bf.lse[e] = l;
        bf.delta[e] = d;
        bf.key_lo[e] = lo;
        bf.key_hi[e] = hi;
        bf.live_hi[e] = l != neg_inf ? hi : 0; /* live keys: [lo, live_hi) */
    }
    /* 1. S on the loaded region (the dot tiles' barriers publish the row arrays),
     * of turned q and k rows with the rotary stage (p.rope) */
    {
        const int32_t r_first = bd.row0 - pq, j_first = bd.col0 - 2 * pk;
        const ta_cuda_rope_src rope = ta_cuda_rope_of(p, c, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_K);
        ta_cuda_mta_dot_rect<DT>(
            ta_cuda_rows_of(p.q, c.q, p.lay.q.seq), t.seq_q, r_first, l_rows,
            ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), t.seq_k, j_first, bd.cols + 4 * pk, p.head_dim,
            bf.stage,
            [&](int32_t x, int32_t y, float acc) {
                const int32_t j = j_first + y;
                s[x * lds + y] = ta_cuda_in<WL>(j, ta_cuda_lo<WL>(bf.key_lo, x), bf.key_hi[x])
                                     ? scale * acc
                                     : 0.0f;
            },
            ROPE ? &rope : nullptr);
    }
    __syncthreads();
    /* 2. C, then P = exp(C - lse), on the live entries of the gradient region; threads
     * over strips of 4 columns of one row, rows fastest */
    {
        const int32_t n_strips = (g_cols + TA_CUDA_MTA_STRIP - 1) / TA_CUDA_MTA_STRIP;
        for (e = tid; e < g_rows * n_strips; e += TA_CUDA_THREADS) {
            const int32_t x = e % g_rows, y0 = e / g_rows * TA_CUDA_MTA_STRIP;
            const int32_t j0 = bd.col0 - pk + y0, lo = ta_cuda_lo<WL>(lo_g, x), le = live_g[x];
            float cv[TA_CUDA_MTA_STRIP] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (j0 + TA_CUDA_MTA_STRIP > lo && j0 < le) /* some live entry */
                ta_cuda_mta_conv_strip(cv, s + x * lds + y0, lds, w, cq, ck);
#pragma unroll
            for (int o = 0; o < TA_CUDA_MTA_STRIP; ++o)
                if (y0 + o < g_cols)
                    pb[x * ldg + y0 + o] =
                        ta_cuda_in<WL>(j0 + o, lo, le) ? ta_exp(cv[o] - lse_g[x]) : 0.0f;
        }
    }
    if (!need_dc) {
        __syncthreads();
        return;
    }
    /* 3. dP and dC on the gradient region (the dot tile syncs before its epilogue) */
    {
        const int32_t j_first = bd.col0 - pk;
        ta_cuda_mta_dot_rect<DT>(ta_cuda_rows_of(p.d_o, c.d_o, p.lay.d_o.seq), t.seq_q, bd.row0,
                                 g_rows, ta_cuda_rows_of(p.v, c.v, p.lay.v.seq), t.seq_k, j_first,
                                 g_cols, p.head_dim_v, bf.stage,
                                 [&](int32_t x, int32_t y, float acc) {
                                     const int32_t j = j_first + y;
                                     dc[x * ldg + y] =
                                         ta_cuda_in<WL>(j, ta_cuda_lo<WL>(lo_g, x), live_g[x])
                                             ? pb[x * ldg + y] * (acc - delta_g[x])
                                             : 0.0f;
                                 });
    }
    __syncthreads();
    /* 4. dS on the effective region: the transposed conv, visible entries; strips as in 2 */
    {
        const int32_t n_strips = (bd.cols + TA_CUDA_MTA_STRIP - 1) / TA_CUDA_MTA_STRIP;
        for (e = tid; e < bd.rows * n_strips; e += TA_CUDA_THREADS) {
            const int32_t x = e % bd.rows, y0 = e / bd.rows * TA_CUDA_MTA_STRIP;
            const int32_t j0 = bd.col0 + y0, lo = ta_cuda_lo<WL>(lo_g, x), hi = hi_g[x];
            float d[TA_CUDA_MTA_STRIP] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (j0 + TA_CUDA_MTA_STRIP > lo && j0 < hi) /* some visible entry */
                ta_cuda_mta_conv_grad_strip(d, dc + (x + pq) * ldg + y0 + 2 * pk, ldg, w, cq, ck);
#pragma unroll
            for (int o = 0; o < TA_CUDA_MTA_STRIP; ++o)
                if (y0 + o < bd.cols)
                    ds[x * ldd + y0 + o] = ta_cuda_in<WL>(j0 + o, lo, hi) ? d[o] : 0.0f;
        }
    }
    __syncthreads();
}

/* The kernel of query head h into bf.w (after a barrier: the previous head's
 * users are done). */
TA_CUDA_DEV void ta_cuda_mta_bwd_load_w(const ta_cuda_mta_bwd_params &p,
                                        const ta_cuda_mta_bwd_bufs &bf, int32_t h) {
    const int32_t n_w = p.conv_q * p.conv_k;
    __syncthreads();
    for (int32_t n = (int32_t)threadIdx.x; n < n_w; n += TA_CUDA_THREADS)
        bf.w[n] = p.conv_w[(size_t)h * (size_t)n_w + (size_t)n];
}

/* Stage rows [first_row, first_row + rows) (rows <= RCHUNK, inside the
 * sequence) of the slice src (rows of dim features) into dst[RCHUNK][width]
 * (width = 64 n_slots >= dim), 0 past dim or rows; ROT: k rows of the rotary
 * stage, turned (batch entry and kv head of c). */
template <int DT, bool ROT>
TA_CUDA_DEV void ta_cuda_mta_stage_k_of(float *dst, const ta_cuda_params &p, const ta_tile_ctx &c,
                                        const ta_cuda_rows &src, int32_t first_row, int32_t rows,
                                        int32_t dim, int32_t width) {
    for (int32_t e = (int32_t)threadIdx.x; e < TA_CUDA_RCHUNK * width; e += TA_CUDA_THREADS) {
        const int32_t x = e / width, f = e % width;
        float val = 0.0f;
        if (x < rows && f < dim && ROT)
            val =
                ta_cuda_load_row<DT, true>(src.base, ta_cuda_row(src.slice, src.ld, first_row + x),
                                           f, &p, &c, TA_CUDA_ROPE_K, first_row + x);
        else if (x < rows && f < dim)
            val = ta_cuda_load<DT>(src.base,
                                   (size_t)(ta_cuda_row(src.slice, src.ld, first_row + x) + f));
        dst[e] = val;
    }
}

template <int DT, bool ROT>
TA_CUDA_DEV void ta_cuda_mta_stage_k(float *dst, const ta_cuda_params &p, const ta_tile_ctx &c,
                                     const ta_cuda_rows &src, int32_t first_row, int32_t rows,
                                     int32_t dim, int32_t width) {
    __syncthreads(); /* the previous phase is done with dst */
    ta_cuda_mta_stage_k_of<DT, ROT>(dst, p, c, src, first_row, rows, dim, width);
    __syncthreads();
}

/*
 * NC dconv_w partial chains over a band of rows x cols effective entries, i
 * ascending, then j ascending (ta_ref_conv_dw_tile):
 *   part[c] = fmaf(dc[x][y], s_c[x][y], part[c])
 * dc: dC at the band's (row 0, column 0), row stride ld_dc; s_c: S[i-(c_q-1-a)]
 * [j+b'-P] at (0, 0) for chain c's (a, b'), row stride ld_s. The loads of
 * STEPS steps go first (more hide more latency, and cost registers); each
 * chain's fmaf stay in order.
 */
template <int NC, int STEPS>
TA_CUDA_DEV void ta_cuda_mta_dw_chain(float part[NC], const float *dc, int32_t ld_dc,
                                      const float *const s[NC], int32_t ld_s, int32_t rows,
                                      int32_t cols) {
    constexpr int kStep = STEPS; /* steps whose loads go first */
    for (int32_t x = 0; x < rows; ++x) {
        const float *dr = dc + x * ld_dc;
        int32_t y = 0;
        for (; y + kStep <= cols; y += kStep) {
            float dv[kStep], sv[NC][kStep];
#pragma unroll
            for (int u = 0; u < kStep; ++u) {
                dv[u] = dr[y + u];
#pragma unroll
                for (int c = 0; c < NC; ++c)
                    sv[c][u] = s[c][x * ld_s + y + u];
            }
#pragma unroll
            for (int u = 0; u < kStep; ++u)
#pragma unroll
                for (int c = 0; c < NC; ++c)
                    part[c] = fmaf(dv[u], sv[c][u], part[c]);
        }
        for (; y < cols; ++y)
#pragma unroll
            for (int c = 0; c < NC; ++c)
                part[c] = fmaf(dr[y], s[c][x * ld_s + y], part[c]);
    }
}

/*
 * The rotary stage's turn back of the dq rows of one dq block (group fg, NB
 * accumulator blocks hi[u]: row unit blk / n_slots, feature slot blk %
 * n_slots, blk = fg NB + u), a row unit at a time through xbuf
 * (ta_cuda_rope_grad_put / _get, each block as a one-slot block). The
 * launcher makes the groups whole row units, so a row's every slot is here.
 */
template <int NB>
TA_CUDA_DEV void ta_cuda_mta_rope_dq(const ta_cuda_mta_bwd_params &p, float *xbuf,
                                     float (&hi)[NB][4][4], int32_t fg, const ta_tile_ctx &c,
                                     int32_t r0, int32_t r1) {
    const int32_t unit0 = fg * NB / p.n_slots, unit1 = (fg * NB + NB - 1) / p.n_slots;
    for (int32_t unit = unit0; unit <= unit1; ++unit) {
        const int32_t row0 = r0 + unit * TA_CUDA_TILE;
        if (row0 >= r1) break;
        for (int q = 0; q < 4; ++q) {
            const bool mine = (ta_cuda_ty() >> 2) == q;
            __syncthreads(); /* the previous pass (phase) is done with xbuf */
#pragma unroll
            for (int u = 0; u < NB; ++u) {
                const int32_t blk = fg * NB + u;
                if (mine && blk < p.acc_blocks && blk / p.n_slots == unit)
                    ta_cuda_rope_grad_put<1>(xbuf, reinterpret_cast<float(&)[4][1][4]>(hi[u]),
                                             blk % p.n_slots);
            }
            __syncthreads();
#pragma unroll
            for (int u = 0; u < NB; ++u) {
                const int32_t blk = fg * NB + u;
                if (mine && blk < p.acc_blocks && blk / p.n_slots == unit)
                    ta_cuda_rope_grad_get<1>(p, xbuf, reinterpret_cast<float(&)[4][1][4]>(hi[u]),
                                             blk % p.n_slots, p.head_dim, TA_CUDA_ROPE_Q, c, row0,
                                             r1 - row0);
            }
        }
    }
}

/*
 * The accumulating mode's dq pairs of one dq block (group fg, NB accumulator
 * blocks: row unit blk / n_slots, feature slot blk % n_slots, blk = fg NB + u;
 * rows r0 + 64 unit + 4 ty + r < r1, features 64 slot + 4 tx + e < D): from
 * the caller's words (PUT false; the entries outside keep (+0, +0)) or back
 * into them (PUT true), unscaled and unrounded. A pair is one thread's.
 */
template <int NB, bool PUT>
TA_CUDA_DEV void ta_cuda_mta_dq_pairs(const ta_cuda_mta_bwd_params &p, float (&hi)[NB][4][4],
                                      float (&lo)[NB][4][4], int32_t fg, const ta_tile_ctx &c,
                                      int32_t r0, int32_t r1) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int u = 0; u < NB; ++u) {
        const int32_t blk = fg * NB + u;
        if (blk >= p.acc_blocks) continue;
        const int32_t unit = blk / p.n_slots, f0 = (blk % p.n_slots) * TA_CUDA_SLOT + 4 * tx;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int32_t row = r0 + unit * TA_CUDA_TILE + 4 * ty + r;
            if (row >= r1) continue;
            const int64_t first = ta_cuda_row(c.dq, p.lay.dq.seq, row) + f0;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (f0 + e >= p.head_dim) continue;
                if (PUT) {
                    static_cast<float *>(p.dq)[first + e] = hi[u][r][e];
                    p.dq_lo[first + e] = lo[u][r][e];
                } else {
                    hi[u][r][e] = static_cast<const float *>(p.dq)[first + e];
                    lo[u][r][e] = p.dq_lo[first + e];
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------- */
/* dq and the dconv_w partials                                                   */
/* ---------------------------------------------------------------------------- */

/*
 * One block per (b, h, plan->bwd Q tile, accumulator group). The dq
 * accumulators of the tile's rows_eff x D outputs are 64 x 64 blocks (row unit
 * u = block / n_slots, feature slot block % n_slots), NB of them per group
 * (acc[NB][4][4]: rows 64 u + 4 ty + r, features 64 s + 4 tx + e). Group 0 also
 * forms the dconv_w partials (all bands); other groups skip the bands of row
 * units they hold no accumulator of.
 */
template <int DT, int NB, bool WL, bool ROPE, bool ACC, bool RNG>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_mta_dq_kernel(const __grid_constant__ ta_cuda_mta_bwd_params p) {
    extern __shared__ float4 ta_cuda_mta_dq_dyn_smem[];
    __shared__ ta_tile_ctx ctx_s;
    const ta_tiling t = p.t;
    const ta_cuda_mta_bwd_smem m = p.sm;
    const ta_cuda_mta_bwd_bufs bf =
        ta_cuda_mta_bwd_carve(reinterpret_cast<float *>(ta_cuda_mta_dq_dyn_smem), m);
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const int32_t n_qt = t.num_q_tiles, pk = (p.conv_k - 1) / 2, ck = p.conv_k;
    const int32_t n_w = p.conv_q * p.conv_k, width = p.n_slots * TA_CUDA_SLOT;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * p.n_groups;
    /* this thread's dconv_w entries n0 = tid and n1 = tid + 256: (a, b') */
    const int32_t n0 = tid, n1 = tid + TA_CUDA_THREADS;
    constexpr int kDwSteps = NB >= 3 ? 2 : 8; /* NB >= 3: registers go to acc */
    /* paired partials only with NB <= 2 (the host agrees): with 3-4 accumulator
     * blocks their registers would spill the accumulators */
    const bool paired = NB <= 2 && p.dw_paired;
    const int32_t a0 = n0 / ck, b0 = n0 % ck, a1 = n1 / ck, b1 = n1 % ck;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t fg = (int32_t)(tile % p.n_groups); /* then a q-side tile, last first */
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / p.n_groups, n_qt);
        const int32_t qt = at.qt;
        const ta_tile_ctx &c = ctx_s; /* the tile's context: made once, read where used */
        const int32_t r0 = ta_tile_row_eff_begin(&t, qt), r1 = ta_tile_row_eff_end(&t, qt);
        const bool do_dw = fg == 0;
        if (RNG && !ta_tile_q_in_range(&t, qt))
            continue; /* outside the output rows: nothing written (the merge skips its R) */
        float acc[NB][4][4];             /* the key chunk's partials */
        float hi[NB][4][4], lo[NB][4][4]; /* the running pairs (src/ta_sum2.h) */
        /* R(b, qt) of entries n0, n1: pairs (src/ta_sum2.h) in shared memory,
         * (r_hi[n], r_lo[n]) touched only by the thread that owns entry n (no
         * barrier) */
        if (n0 < n_w) bf.r_hi[n0] = bf.r_lo[n0] = 0.0f;
        if (n1 < n_w) bf.r_hi[n1] = bf.r_lo[n1] = 0.0f;
#pragma unroll
        for (int u = 0; u < NB; ++u)
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[u][r][e] = hi[u][r][e] = lo[u][r][e] = 0.0f;
        __syncthreads(); /* the previous tile is done with ctx_s */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, at.h, qt);
        ta_cuda_mta_bwd_load_w(p, bf, at.h); /* its barrier publishes ctx_s */
        if (ACC) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_mta_dq_pairs<NB, false>(p, hi, lo, fg, c, r0, r1);
        /* step 2: the context's k tiles [k_begin, k_end) ascending */
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t c0 = ta_tile_col_eff_begin(&t, kt);
            const int32_t cols = ta_tile_col_eff_end(&t, kt) - c0;
            float part0 = 0.0f, part1 = 0.0f; /* part(b, qt, kt) of entries n0, n1 */
            for (int32_t row0 = r0; row0 < r1; row0 += p.band_rows) {
                const ta_cuda_mta_band bd = {row0, ta_tiling_min_i32(p.band_rows, r1 - row0), c0,
                                             cols};
                const int32_t unit = (row0 - r0) / TA_CUDA_TILE;
                const int32_t slot_off =
                    (row0 - r0) % TA_CUDA_TILE; /* band's first row in the unit */
                bool has = false;
#pragma unroll
                for (int u = 0; u < NB; ++u) {
                    const int32_t blk = fg * NB + u;
                    has = has || (blk < p.acc_blocks && blk / p.n_slots == unit);
                }
                if (!has && !do_dw) continue;
                /* steps 2a-2d: S, P, dC, dS of the band */
                ta_cuda_mta_band_recompute<DT, WL, ROPE>(p, t, m, bf, bd, c, true);
                /* step 2e: dq_r = fmaf(dS_rj, k_j, dq_r), keys j ascending, live only.
                 * The live keys [lo, hi) of this thread's rows 4 ty + r (effective row
                 * x, loaded row x + c_q - 1; hi = 0 for a row outside the band) are
                 * fixed for the band: held in registers, not re-read per key. */
                int32_t live_lo[4], live_end[4];
                bool in_band[4]; /* row 4 ty + r is a row of this band */
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int32_t x = 4 * ty + r - slot_off;
                    in_band[r] = x >= 0 && x < bd.rows;
                    live_lo[r] = in_band[r] ? ta_cuda_lo<WL>(bf.key_lo, x + p.conv_q - 1) : 0;
                    live_end[r] = in_band[r] ? bf.live_hi[x + p.conv_q - 1] : 0;
                }
                for (int32_t j0 = 0; has && j0 < cols; j0 += TA_CUDA_RCHUNK) {
                    const int32_t jn = ta_tiling_min_i32(TA_CUDA_RCHUNK, cols - j0);
                    ta_cuda_mta_stage_k<DT, ROPE>(bf.stage, p, c,
                                                  ta_cuda_rows_of(p.k, c.k, p.lay.k.seq), c0 + j0,
                                                  jn, p.head_dim, width);
                    for (int32_t jj = 0; jj < jn; ++jj) {
                        const int32_t y = j0 + jj, j = c0 + y;
                        float dsv[4];
                        bool live[4];
                        if (j % TA_SUM2_CHUNK == 0) /* a key chunk starts: the band's rows' */
#pragma unroll                                      /* partials into their pairs */
                            for (int u = 0; u < NB; ++u) {
                                const int32_t blk = fg * NB + u;
                                if (blk >= p.acc_blocks || blk / p.n_slots != unit) continue;
#pragma unroll
                                for (int r = 0; r < 4; ++r)
#pragma unroll
                                    for (int e = 0; e < 4; ++e)
                                        if (in_band[r]) {
                                            ta_sum2_add(&hi[u][r][e], &lo[u][r][e], 1.0f,
                                                        acc[u][r][e]);
                                            acc[u][r][e] = 0.0f;
                                        }
                            }
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int32_t x = 4 * ty + r - slot_off;
                            const int32_t xc = x >= 0 && x < bd.rows ? x : 0;
                            live[r] = ta_cuda_in<WL>(j, live_lo[r], live_end[r]);
                            dsv[r] = bf.ds[xc * m.ldd + y];
                        }
#pragma unroll
                        for (int u = 0; u < NB; ++u) {
                            const int32_t blk = fg * NB + u;
                            if (blk >= p.acc_blocks || blk / p.n_slots != unit) continue;
                            const float4 k4 = *reinterpret_cast<const float4 *>(
                                bf.stage + jj * width + (blk % p.n_slots) * TA_CUDA_SLOT + 4 * tx);
                            const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                            for (int r = 0; r < 4; ++r)
#pragma unroll
                                for (int e = 0; e < 4; ++e)
                                    acc[u][r][e] =
                                        live[r] ? fmaf(dsv[r], kv[e], acc[u][r][e]) : acc[u][r][e];
                        }
                    }
                }
                /* step 2f: part[a][b'] = fmaf(dC[i][j], S[i-(c_q-1-a)][j+b'-P], .), i then j
                 * ascending over the pair's effective region (bands in row order) */
                if (do_dw && !paired && n0 < n_w) {
                    const float *dc_e = bf.dc + pk; /* dC[row0][c0] */
                    if (n1 < n_w) {
                        const float *s_ab[2] = {bf.s + a0 * m.lds + b0 + pk,
                                                bf.s + a1 * m.lds + b1 + pk};
                        float parts[2] = {part0, part1};
                        ta_cuda_mta_dw_chain<2, kDwSteps / 2>(parts, dc_e, m.ldg, s_ab, m.lds,
                                                              bd.rows, cols);
                        part0 = parts[0];
                        part1 = parts[1];
                    } else {
                        const float *s_ab[1] = {bf.s + a0 * m.lds + b0 + pk};
                        ta_cuda_mta_dw_chain<1, kDwSteps>(&part0, dc_e, m.ldg, s_ab, m.lds, bd.rows,
                                                          cols);
                    }
                }
                /* paired (one band per tile, c_q c_k <= 128): an even pair (kt - k_begin
                 * even) stashes its dC on E and the S it reads; the odd pair after it runs
                 * both pairs' chains at
                 * once (threads [0, 128): the stashed pair, [128, 256): its own), then
                 * R += part(kt-1), R += part(kt) in order (ta_sum2_add); a last even
                 * pair runs alone. */
                if (do_dw && paired) {
                    const bool odd = ((kt - c.k_begin) & 1) != 0;
                    if (!odd && kt + 1 < c.k_end) {
                        for (int32_t e = tid; e < bd.rows * cols; e += TA_CUDA_THREADS)
                            bf.wdc[e / cols * m.ldw_dc + e % cols] =
                                bf.dc[e / cols * m.ldg + pk + e % cols];
                        for (int32_t e = tid; e < (bd.rows + p.conv_q - 1) * (cols + 2 * pk);
                             e += TA_CUDA_THREADS)
                            bf.ws[e / (cols + 2 * pk) * m.ldw_s + e % (cols + 2 * pk)] =
                                bf.s[e / (cols + 2 * pk) * m.lds + pk + e % (cols + 2 * pk)];
                    } else {
                        const int32_t n_cur = odd ? tid - TA_CUDA_MTA_PAIR_THREADS : tid;
                        float prev = 0.0f, cur = 0.0f;
                        if (odd && tid < n_w) { /* pair kt-1, from the stash (never the
                                                 * last k tile: all cols_eff columns) */
                            const float *s_ab[1] = {bf.ws + a0 * m.ldw_s + b0};
                            ta_cuda_mta_dw_chain<1, kDwSteps>(&prev, bf.wdc, m.ldw_dc, s_ab,
                                                              m.ldw_s, bd.rows, t.cols_eff);
                        } else if (n_cur >= 0 && n_cur < n_w) { /* pair kt */
                            const float *s_ab[1] = {bf.s + (n_cur / ck) * m.lds + n_cur % ck + pk};
                            ta_cuda_mta_dw_chain<1, kDwSteps>(&cur, bf.dc + pk, m.ldg, s_ab, m.lds,
                                                              bd.rows, cols);
                            if (odd) bf.xfer[n_cur] = cur;
                        }
                        if (odd) {
                            __syncthreads(); /* xfer written */
                            if (tid < n_w) {
                                ta_sum2_add(bf.r_hi + tid, bf.r_lo + tid, 1.0f, prev);
                                ta_sum2_add(bf.r_hi + tid, bf.r_lo + tid, 1.0f, bf.xfer[tid]);
                            }
                        } else if (tid < n_w) {
                            ta_sum2_add(bf.r_hi + tid, bf.r_lo + tid, 1.0f, cur);
                        }
                    }
                }
            }
            if (!paired) { /* R(b, qt) = 0 + part(kt=0) + part(kt=1) + ..., pairs */
                if (n0 < n_w) ta_sum2_add(bf.r_hi + n0, bf.r_lo + n0, 1.0f, part0);
                if (n1 < n_w) ta_sum2_add(bf.r_hi + n1, bf.r_lo + n1, 1.0f, part1);
            }
        }
        /* step 3: the last key chunk's partials into the pairs; with the rotary
         * stage the dq rows turned back (ta_cuda_mta_rope_dq); dq = store(scale *
         * hi); R(b, qt)'s hi word to the workspace */
#pragma unroll
        for (int u = 0; u < NB; ++u) {
            const int32_t blk = fg * NB + u;
            if (blk >= p.acc_blocks) continue;
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    ta_sum2_add(&hi[u][r][e], &lo[u][r][e], 1.0f, acc[u][r][e]);
        }
        if (ROPE) ta_cuda_mta_rope_dq<NB>(p, bf.stage, hi, fg, c, r0, r1);
        if (ACC) /* the pairs back, unscaled (no rotary stage: validated) */
            ta_cuda_mta_dq_pairs<NB, true>(p, hi, lo, fg, c, r0, r1);
#pragma unroll
        for (int u = 0; !ACC && u < NB; ++u) {
            const int32_t blk = fg * NB + u;
            if (blk >= p.acc_blocks) continue;
            {
                const int32_t unit = blk / p.n_slots,
                              f0 = (blk % p.n_slots) * TA_CUDA_SLOT + 4 * tx;
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int32_t row = r0 + unit * TA_CUDA_TILE + 4 * ty + r;
                    if (row >= r1) continue;
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (f0 + e < p.head_dim)
                            ta_cuda_store<DT>(
                                p.dq, (size_t)(ta_cuda_row(c.dq, p.lay.dq.seq, row) + f0 + e),
                                p.scale * hi[u][r][e]);
                }
            }
        }
        if (do_dw) {
            float *r_out =
                p.dw_rows + (((size_t)c.batch * (size_t)p.heads_q + (size_t)c.head) * (size_t)n_qt +
                             (size_t)qt) *
                                (size_t)n_w;
            if (n0 < n_w) r_out[n0] = bf.r_hi[n0];
            if (n1 < n_w) r_out[n1] = bf.r_hi[n1];
        }
    }
}

/* ---------------------------------------------------------------------------- */
/* dk, dv                                                                        */
/* ---------------------------------------------------------------------------- */

/*
 * One block per (b, kv head, K tile of p.t, feature group), as the SDPA dk/dv
 * kernel: acc[4][NS][4] holds keys 4 ty + r, slot s features 4 tx + e; slot
 * order dk slots, then dv slots. Each band is one Q tile of p.t (effective
 * rows <= 64, loaded rows <= 64).
 */
template <int DT, int NS, bool WL, bool ROPE, bool ACC, bool RNG>
__global__ void __launch_bounds__(TA_CUDA_THREADS, 2)
    ta_cuda_mta_dkdv_kernel(const __grid_constant__ ta_cuda_mta_bwd_params p) {
    extern __shared__ float4 ta_cuda_mta_dkdv_dyn_smem[];
    __shared__ ta_cuda_slot slots[TA_CUDA_SLOTS];
    __shared__ ta_tile_ctx ctx_s; /* key side, then the current query head's slices */
    const ta_tiling t = p.t;
    const ta_cuda_mta_bwd_smem m = p.sm;
    const ta_cuda_mta_bwd_bufs bf =
        ta_cuda_mta_bwd_carve(reinterpret_cast<float *>(ta_cuda_mta_dkdv_dyn_smem), m);
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    const int32_t n_kt = t.num_k_tiles, pk = (p.conv_k - 1) / 2, pq = p.conv_q - 1;
    const int32_t nk = (p.head_dim + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT; /* dk slots */
    const int32_t n_slots_all = nk + (p.head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt * p.n_groups;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, p.n_groups);
        const int32_t fg = at.fg, kt = at.kt, h_kv = at.h_kv;
        const ta_tile_ctx &c = ctx_s; /* made once per head, read where used */
        int32_t c0 = ta_tile_col_eff_begin(&t, kt);
        int32_t cols = ta_tile_col_eff_end(&t, kt) - c0;
        const int32_t slot0 = fg * NS; /* this group's first slot */
        const int32_t n_slots = ta_tiling_min_i32(NS, n_slots_all - slot0);
        const bool need_ds = slot0 < nk; /* the group holds dk slots */
        int32_t q_begin, q_end;
        float acc[4][NS][4]; /* acc[key 4ty+r][slot s feature 4tx+e]: the row chunk's partial */
        float sum_hi[4][NS][4], sum_lo[4][NS][4]; /* the running pairs (src/ta_sum2.h) */
        if (RNG) { /* the output keys */
            ta_cuda_cut_range(p.rg_key0, p.rg_key1, &c0, &cols);
            if (cols <= 0) continue; /* none of the tile's keys is an output: nothing written */
        }
        ta_cuda_acc_zero<NS>(acc);
        ta_cuda_acc_zero<NS>(sum_hi);
        ta_cuda_acc_zero<NS>(sum_lo);
        /* the key side: the context of the kv group's first query head (its k,
         * v, dk, dv slices and key length, as the reference's) */
        __syncthreads(); /* the previous tile is done with ctx_s */
        if (tid == 0) ctx_s = ta_cuda_context(p, at.b_local, h_kv * p.group, 0);
        __syncthreads();
        if (ACC) /* the caller's pairs (ta_bwd_args.accumulate) */
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_GET>(p, c, c0, cols, slot0, nk, n_slots,
                                                            sum_hi, sum_lo);
        ta_tile_k_rows(&t, kt, c.key_len, &q_begin, &q_end); /* Q tiles that meet the key tile */
        /* step 1: the kv group's query heads ascending (each with its kernel), then Q tiles */
        for (int32_t g = 0; g < p.group; ++g) {
            const int32_t h = h_kv * p.group + g;
            /* head h's context (the same key side) and this group's slots: dk
             * slots take features of q, dv slots of dO; the kernel's barrier
             * publishes them. ctx_s.batch is re-read from shared memory each
             * head, so the per-batch products are not hoisted into registers. */
            {
                const ta_tile_ctx hd = ta_cuda_context(p, c.batch - p.batch_begin, h, 0);
                const int32_t u = slot0 + tid;
                __syncthreads(); /* the previous head is done with ctx_s and slots */
                if (tid == 0) ctx_s = hd;
                if (tid >= n_slots && tid < NS) /* unused: every feature is padding */
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.q, hd.q, p.lay.q.seq), 0, 0);
                else if (tid < NS && u < nk)
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.q, hd.q, p.lay.q.seq),
                                                 p.head_dim, u * TA_CUDA_SLOT);
                else if (tid < NS)
                    slots[tid] = ta_cuda_slot_of(ta_cuda_rows_of(p.d_o, hd.d_o, p.lay.d_o.seq),
                                                 p.head_dim_v, (u - nk) * TA_CUDA_SLOT);
            }
            ta_cuda_mta_bwd_load_w(p, bf, h);
            for (int32_t qt = q_begin; qt < q_end; ++qt) {
                int32_t row0 = ta_tile_row_eff_begin(&t, qt);
                int32_t rows = ta_tile_row_eff_end(&t, qt) - row0;
                if (RNG) { /* the output rows */
                    ta_cuda_cut_range(p.rg_row0, p.rg_row1, &row0, &rows);
                    if (rows <= 0) continue; /* uniform: the block skips the Q tile */
                }
                const ta_cuda_mta_band bd = {row0, rows, c0, cols};
                /* step 2: S, P (and dC, dS) of the tile pair */
                ta_cuda_mta_band_recompute<DT, WL, ROPE>(p, t, m, bf, bd, c, need_ds);
                /* step 3: dv_j = fmaf(P_ij, dO_i, dv_j), dk_j = fmaf(dS_ij, q_i, dk_j), rows
                 * i ascending, live entries only */
                for (int32_t i0 = 0; i0 < bd.rows; i0 += TA_CUDA_RCHUNK) {
                    const int in = (int)ta_tiling_min_i32(TA_CUDA_RCHUNK, bd.rows - i0);
                    /* the rotary stage: the q slots, the group's first nk - slot0 */
                    const ta_cuda_rope_src rope =
                        ta_cuda_rope_of(p, c, TA_CUDA_ROPE_Q, TA_CUDA_ROPE_OFF, nk - slot0);
                    ta_cuda_stage_rows<DT, NS>(bf.stage, slots, row0 + i0, in,
                                               ROPE ? &rope : nullptr);
                    for (int ii = 0; ii < in; ++ii) {
                        const int32_t x = i0 + ii;
                        /* row x's live keys [lo, live_hi) (loaded row x + c_q - 1), as
                         * slots of this thread's keys c0 + 4ty + r: live iff lo <= r < hi */
                        const int32_t lo = ta_cuda_lo<WL>(bf.key_lo, x + pq) - (c0 + 4 * ty);
                        const int32_t hi = bf.live_hi[x + pq] - (c0 + 4 * ty);
                        if ((row0 + x) % TA_SUM2_CHUNK == 0) /* a row chunk starts */
                            ta_cuda_acc_sum2<NS>(sum_hi, sum_lo, acc);
                        float pv[4], dv[4];
                        bool live[4];
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int32_t y = 4 * ty + r;
                            const int32_t yc = y < cols ? y : 0;
                            live[r] = y < cols && (!WL || r >= lo) && r < hi; /* !WL: lo <= 0 */
                            pv[r] = bf.p[x * m.ldg + yc + pk];
                            dv[r] = need_ds ? bf.ds[x * m.ldd + yc] : 0.0f;
                        }
#pragma unroll
                        for (int s = 0; s < NS; ++s) {
                            const bool is_dk = slot0 + s < nk;
                            const float4 x4 = *reinterpret_cast<const float4 *>(
                                bf.stage + ii * (NS * TA_CUDA_SLOT) + s * TA_CUDA_SLOT + 4 * tx);
                            const float xv[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
                            for (int r = 0; r < 4; ++r) {
                                const float coef = is_dk ? dv[r] : pv[r];
#pragma unroll
                                for (int e = 0; e < 4; ++e)
                                    acc[r][s][e] =
                                        live[r] ? fmaf(coef, xv[e], acc[r][s][e]) : acc[r][s][e];
                            }
                        }
                    }
                }
            }
            /* the head's last row chunk (a chunk never spans two heads) */
            ta_cuda_acc_sum2<NS>(sum_hi, sum_lo, acc);
        }
        /* step 4: dk = store(scale * hi), dv = store(hi), keys < cols only; with the
         * rotary stage dk's rows turned back first (every dk slot is in group 0:
         * the launcher sees to it) */
        if (ROPE && need_ds)
            ta_cuda_rope_grad_block<NS>(p, bf.stage, sum_hi, p.head_dim, TA_CUDA_ROPE_K, c, c0,
                                        cols);
        if (ACC) /* the pairs back, unscaled (no rotary stage: validated) */
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_PUT>(p, c, c0, cols, slot0, nk, n_slots,
                                                            sum_hi, sum_lo);
        else
            ta_cuda_dkdv_out<DT, NS, TA_CUDA_KV_STORE>(p, c, c0, cols, slot0, nk,
                                                              n_slots, sum_hi, sum_lo);
    }
}

/* ---------------------------------------------------------------------------- */
/* dconv_w merge                                                                 */
/* ---------------------------------------------------------------------------- */

/*
 * One thread per (h, a, b'): the pair (dconv_w, dw_lo) = (first chunk ? (0, 0)
 * : the previous chunk's pair) + R(b, 0) + R(b, 1) + ... (ta_sum2_add, alpha =
 * 1; src/ta_sum2.h) for the chunk's batch entries ascending, skipping Q tiles
 * with no k tile (the reference adds nothing for them); dconv_w holds the hi
 * words, ws->dw_lo the lo words. Loads go ahead in groups of 8; the adds stay
 * in order.
 */
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_cuda_mta_dw_merge_kernel(const __grid_constant__ ta_cuda_mta_bwd_params p) {
    const ta_tiling t = p.t;
    const int32_t n_w = p.conv_q * p.conv_k, n_qt = t.num_q_tiles;
    const int64_t total = (int64_t)p.heads_q * n_w;
    for (int64_t idx = (int64_t)blockIdx.x * TA_CUDA_THREADS + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * TA_CUDA_THREADS) {
        const int32_t h = (int32_t)(idx / n_w), n = (int32_t)(idx % n_w);
        /* later chunks continue, and the first in the accumulating mode */
        const bool cont = p.batch_begin != 0 || p.dw_cont != 0;
        float acc = cont ? p.dconv_w[idx] : 0.0f;
        float acc_lo = cont ? p.dw_lo[idx] : 0.0f;
        for (int32_t b_local = 0; b_local < p.batch_count; ++b_local) {
            const int32_t b = p.batch_begin + b_local;
            const int32_t key_len = ta_cuda_key_len(p, b_local);
            const float *r_in =
                p.dw_rows +
                ((size_t)b * (size_t)p.heads_q + (size_t)h) * (size_t)n_qt * (size_t)n_w +
                (size_t)n;
            for (int32_t qt0 = 0; qt0 < n_qt; qt0 += 8) {
                float r_val[8];
                bool used[8];
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    const int32_t qt = qt0 + u;
                    used[u] = qt < n_qt && ta_tile_k_end(&t, qt, key_len) > 0;
                    r_val[u] = used[u] ? r_in[(size_t)qt * (size_t)n_w] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; ++u)
                    if (used[u]) ta_sum2_add(&acc, &acc_lo, 1.0f, r_val[u]);
            }
        }
        p.dconv_w[idx] = acc;
        p.dw_lo[idx] = acc_lo;
    }
}

/* ---------------------------------------------------------------------------- */
/* launch                                                                        */
/* ---------------------------------------------------------------------------- */

/* The instantiations, by dtype, count, left bound (WL, ta_cuda_left_bounded)
 * and the rotary stage (ROPE): dq by accumulator blocks NB 1..4; dk/dv by
 * slots 2..4 (D + D_v >= 2 features, as the SDPA kernel). */
template <bool WL, bool ROPE> struct ta_cuda_mta_dq_family {
    template <int DT, int NB> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dq_kernel<DT, NB, WL, ROPE, false, false>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_mta_dkdv_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dkdv_kernel<DT, NS, WL, ROPE, false, false>);
    }
};
/* A call with a row or key range (RNG: Q tiles outside the row range skipped,
 * the dk/dv kernel's tiles cut to the ranges), and the accumulating mode's
 * (ACC: the pairs loaded and stored, and the ranges kept; never the rotary
 * stage, validated, so ROPE is ignored there). Always with the left bound (WL
 * true is right for every mask: a row's lo is 0 without a window), which
 * halves their instantiations; the plain ones compile both out (their
 * registers and spills stay as they were). */
template <bool WL, bool ROPE> struct ta_cuda_mta_dq_rng_family {
    template <int DT, int NB> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dq_kernel<DT, NB, true, ROPE, false, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_mta_dkdv_rng_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dkdv_kernel<DT, NS, true, ROPE, false, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_mta_dq_acc_family {
    template <int DT, int NB> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dq_kernel<DT, NB, true, false, true, true>);
    }
};
template <bool WL, bool ROPE> struct ta_cuda_mta_dkdv_acc_family {
    template <int DT, int NS> static const void *at() {
        return reinterpret_cast<const void *>(
            &ta_cuda_mta_dkdv_kernel<DT, NS, true, false, true, true>);
    }
};

/*
 * dq kernel geometry: the largest band (64, 32, 16, 8 or 4 effective rows, so a
 * band never straddles a 64-row accumulator unit) whose buffers fit
 * TA_CUDA_MTA_BWD_SMEM_MAX. TA_ERR_UNSUPPORTED if none does (not reached for any
 * accepted size: 4 rows at B_k = 256 and the largest conv take about 80 KB).
 */
static ta_status ta_cuda_mta_dq_geometry(const ta_plan *plan, ta_cuda_mta_bwd_params *prm) {
    const ta_tiling *t = &plan->bwd;
    const ta_problem *pr = &plan->p;
    int32_t band;
    /* one band per tile and a small kernel: the paired dconv_w partials, if they fit */
    if (t->rows_eff <= TA_CUDA_TILE && pr->conv_q * pr->conv_k <= TA_CUDA_MTA_PAIR_THREADS &&
        pr->head_dim <= 2 * TA_CUDA_SLOT) {
        ta_cuda_mta_bwd_smem_make(&prm->sm, t->rows_eff, t->cols_eff, pr->conv_q, pr->conv_k, 1,
                                  1);
        if ((size_t)prm->sm.floats * sizeof(float) <= TA_CUDA_MTA_BWD_SMEM_MAX) {
            prm->band_rows = t->rows_eff;
            prm->dw_paired = 1;
            return TA_OK;
        }
    }
    prm->dw_paired = 0;
    for (band = TA_CUDA_TILE; band >= 4; band /= 2) {
        const int32_t rows = ta_tiling_min_i32(band, t->rows_eff);
        ta_cuda_mta_bwd_smem_make(&prm->sm, rows, t->cols_eff, pr->conv_q, pr->conv_k, 1, 0);
        if ((size_t)prm->sm.floats * sizeof(float) <= TA_CUDA_MTA_BWD_SMEM_MAX) {
            prm->band_rows = rows;
            return TA_OK;
        }
    }
    return TA_ERR_UNSUPPORTED;
}

/*
 * dk/dv kernel tiling (free: dk, dv do not depend on it): 64 loaded rows and
 * 64 loaded columns (one dot tile) when the key halo is small (P <= 8, at
 * least 32 effective columns), else 64 effective columns (loaded 64 + 4P <=
 * 124, two dot tiles); rows shrink to 48 loaded when the buffers would not fit.
 */
static ta_status ta_cuda_mta_dkdv_geometry(const ta_plan *plan, ta_cuda_mta_bwd_params *prm) {
    const ta_problem *pr = &plan->p;
    const int32_t pk = (pr->conv_k - 1) / 2;
    const int32_t block_k = pk <= 8 ? TA_CUDA_TILE : TA_CUDA_TILE + 4 * pk;
    int32_t block_q;
    for (block_q = TA_CUDA_TILE; block_q >= 2 * (pr->conv_q - 1) + 1; block_q -= 16) {
        const ta_status st = ta_cuda_tiling(plan, block_q, block_k, TA_TILING_BWD, &prm->t);
        if (st != TA_OK) return st;
        ta_cuda_mta_bwd_smem_make(&prm->sm, prm->t.rows_eff, prm->t.cols_eff, pr->conv_q,
                                  pr->conv_k, 0, 0);
        if ((size_t)prm->sm.floats * sizeof(float) <= TA_CUDA_MTA_BWD_SMEM_MAX) return TA_OK;
    }
    return TA_ERR_UNSUPPORTED;
}

extern "C" ta_status ta_cuda_mta_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                     const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const ta_tiling *tb = &plan->bwd;
    const int nk = (pr->head_dim + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int nv = (pr->head_dim_v + TA_CUDA_SLOT - 1) / TA_CUDA_SLOT;
    const int n_groups_kv = (nk + nv + TA_CUDA_SLOTS - 1) / TA_CUDA_SLOTS;
    /* the rotary stage turns a dk or dq row back across its slots, so a row's
     * slots stay in one block: every dk slot in dk/dv group 0, and dq groups of
     * whole row units (upg units of nk blocks) */
    const bool rope = plan->stages.load == TA_LOAD_ROPE;
    const int ns_even = (nk + nv + n_groups_kv - 1) / n_groups_kv;
    const int ns_dkdv = rope && nk > ns_even ? nk : ns_even;
    const int units = (tb->rows_eff + TA_CUDA_TILE - 1) / TA_CUDA_TILE;
    const int acc_blocks = units * nk;
    const int upg = ta_tiling_min_i32(TA_CUDA_MTA_ACC_BLOCKS / nk, units);
    const int n_groups_dq =
        rope ? (units + upg - 1) / upg
             : (acc_blocks + TA_CUDA_MTA_ACC_BLOCKS - 1) / TA_CUDA_MTA_ACC_BLOCKS;
    const int nb_dq = rope ? upg * nk : (acc_blocks + n_groups_dq - 1) / n_groups_dq;
    const bool acc = a->accumulate != 0, ranged = ta_cuda_bwd_ranged(plan);
    const void *ptrs[18] = {a->q,      a->k,        a->v,      a->o,       a->d_o,
                            a->lse,    a->dq,       a->dk,     a->dv,      ws->delta,
                            a->conv_w, a->dconv_w, ws->dw_rows, ws->dw_lo,
                            acc ? a->dq_lo : NULL, acc ? a->dk_lo : NULL,
                            acc ? a->dv_lo : NULL, acc ? a->dconv_w_lo : NULL};
    const void *k_dq = acc      ? ta_cuda_pick_plan<ta_cuda_mta_dq_acc_family, 1>(plan, nb_dq)
                       : ranged ? ta_cuda_pick_plan<ta_cuda_mta_dq_rng_family, 1>(plan, nb_dq)
                                : ta_cuda_pick_plan<ta_cuda_mta_dq_family, 1>(plan, nb_dq);
    const void *k_dkdv = acc ? ta_cuda_pick_plan<ta_cuda_mta_dkdv_acc_family, 2>(plan, ns_dkdv)
                         : ranged ? ta_cuda_pick_plan<ta_cuda_mta_dkdv_rng_family, 2>(plan, ns_dkdv)
                                  : ta_cuda_pick_plan<ta_cuda_mta_dkdv_family, 2>(plan, ns_dkdv);
    const void *k_merge = reinterpret_cast<const void *>(&ta_cuda_mta_dw_merge_kernel);
    ta_cuda_mta_bwd_params prm_dq, prm_kv;
    ta_cuda_launch_desc launch[3];
    size_t smem_dq, smem_kv;
    int64_t merge_blocks;
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 18)) != TA_OK) return st;
    if ((st = ta_cuda_check_rope(plan)) != TA_OK) return st;
    memset(&prm_dq, 0, sizeof prm_dq);
    memset(&prm_kv, 0, sizeof prm_kv);
    /* dq + dw and merge: the plan's backward tiles (the contractual dconv_w cuts) */
    ta_cuda_params_bwd(&prm_dq, plan, tb, a, ws);
    prm_dq.n_groups = n_groups_dq;
    prm_dq.n_slots = nk;
    prm_dq.acc_blocks = acc_blocks;
    /* accumulating: dconv_w's pair continues the caller's (dconv_w, dconv_w_lo) */
    prm_dq.dw_lo = acc ? a->dconv_w_lo : ws->dw_lo;
    prm_dq.dw_cont = acc ? 1 : 0;
    prm_dq.dq_lo = acc ? a->dq_lo : NULL;
    if ((st = ta_cuda_mta_dq_geometry(plan, &prm_dq)) != TA_OK) return st;
    /* dk/dv: the kernel's own tiles (the geometry replaces t), cut to the
     * call's ranges */
    ta_cuda_params_bwd(&prm_kv, plan, tb, a, ws);
    prm_kv.n_groups = n_groups_kv;
    prm_kv.dk_lo = acc ? a->dk_lo : NULL;
    prm_kv.dv_lo = acc ? a->dv_lo : NULL;
    prm_kv.rg_row0 = tb->row_begin;
    prm_kv.rg_row1 = tb->row_end;
    prm_kv.rg_key0 = tb->key_begin;
    prm_kv.rg_key1 = tb->key_end;
    if ((st = ta_cuda_mta_dkdv_geometry(plan, &prm_kv)) != TA_OK) return st;
    smem_dq = (size_t)prm_dq.sm.floats * sizeof(float);
    smem_kv = (size_t)prm_kv.sm.floats * sizeof(float);
    /* the geometry fits each band into TA_CUDA_MTA_BWD_SMEM_MAX, the opt-in */
    if ((st = ta_cuda_smem_opt_in(k_dq, smem_dq, TA_CUDA_MTA_BWD_SMEM_MAX)) != TA_OK) return st;
    if ((st = ta_cuda_smem_opt_in(k_dkdv, smem_kv, TA_CUDA_MTA_BWD_SMEM_MAX)) != TA_OK) return st;
    if ((st = ta_cuda_bwd_delta(plan, a, ws->delta, stream)) != TA_OK) return st;
    merge_blocks =
        ((int64_t)pr->heads_q * pr->conv_q * pr->conv_k + TA_CUDA_THREADS - 1) / TA_CUDA_THREADS;
    /* per batch chunk: dk/dv, dq + dw partials, then the merge of the chunk's R */
    launch[0] = ta_cuda_launch_of(
        k_dkdv, &prm_kv, (int64_t)pr->heads_kv * prm_kv.t.num_k_tiles * n_groups_kv, 0, smem_kv);
    launch[1] = ta_cuda_launch_of(k_dq, &prm_dq,
                                  (int64_t)pr->heads_q * tb->num_q_tiles * n_groups_dq, 0, smem_dq);
    launch[2] = ta_cuda_launch_of(k_merge, &prm_dq, 0, merge_blocks, 0);
    return ta_cuda_launch_batches(launch, 3, a->seqlens_k, pr->batch, stream);
}
