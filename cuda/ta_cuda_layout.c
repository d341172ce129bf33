/*
 * CUDA backend: what the core knows of it without CUDA. Plain C, in the core
 * archive (libtileattn.a): which plans the backend runs and the one layout
 * routine per pass of its device workspace. The size query works on a machine
 * without a GPU and in a program that does not link the CUDA component (a
 * planner may size device memory anywhere); the entry-point tables that use
 * these are cuda/ta_cuda_ops.c (libtileattn_cuda.a) and cuda/ta_cuda_absent.c
 * (the core). docs/cuda.md, "Packaging", says how one of the two is chosen.
 *
 * Supported: SDPA and the MTA conv (causal only, as everywhere), forward and
 * backward, every dtype, causal or not (SDPA), seqlens_k, sliding windows,
 * strided tensors, GQA, S_q != S_k, D and D_v in [1, 256], every conv size and
 * block size the library accepts; a paged KV cache in the forward.
 *
 * TA_PRECISION_FAST: the SDPA forward and backward of f16 / bf16 problems run
 * on tensor cores (cuda/ta_cuda_fast_fwd.cu, cuda/ta_cuda_fast_bwd_sm90.cu;
 * D = D_v in {64, 96, 128, 256}, other head dims TA_ERR_UNSUPPORTED in fast
 * mode; the backward on sm_90 only, elsewhere the exact kernels); the MTA
 * forward and backward of f16 / bf16 problems with D = D_v in {64, 96, 128}
 * too (cuda/ta_cuda_fast_mta.cu, cuda/ta_cuda_fast_decode.cu,
 * cuda/ta_cuda_fast_mta_bwd.cu: ta_cuda_fast_mta_path and its siblings below;
 * with the rotary stage on turned copies); f32 problems and the other MTA
 * problems run the exact kernels (bit-identical results satisfy any FAST
 * bound).
 */
#include <stddef.h>

#include "ta_cuda.h"
#include "ta_internal.h"

/* A split-K forward (num_splits > 1) in fast mode runs the mma.sync kernels
 * with the merge kernel (cuda/ta_cuda_fast_fwd.cu); the fast backward
 * ignores num_splits, as every backward. */
int ta_cuda_fast_path(const ta_plan *plan) {
    return plan->p.precision == TA_PRECISION_FAST && plan->p.dtype != TA_F32 && !plan->has_conv &&
           !ta_cuda_latent_plan(plan) && !ta_plan_keys_cut(plan);
}

int ta_cuda_fast_mqa(const ta_plan *plan) {
    return plan->p.heads_kv == 1 && plan->p.heads_q > 1;
}

/* Latent attention: the exact kernels on f32 copies (cuda/ta_cuda_latent.cu),
 * in either precision (no fast kernels yet: exact bits satisfy its bound). */
int ta_cuda_latent_plan(const ta_plan *plan) {
    return plan->stages.score == TA_SCORE_RBAND || plan->p.latent_dim > 0;
}

int ta_cuda_fast_lat_path(const ta_plan *plan) {
    return ta_cuda_latent_plan(plan) && plan->p.precision == TA_PRECISION_FAST &&
           plan->p.dtype != TA_F32 &&
           (plan->dim_k == 64 || plan->dim_k == 96 || plan->dim_k == 128);
}

int32_t ta_cuda_lat_dw_chunks(const ta_plan *plan, int32_t *rows_per) {
    const int64_t rows = (int64_t)plan->p.batch * plan->p.seq_q;
    int64_t per = (rows + 31) / 32;
    per = per < 256 ? 256 : (per + 15) / 16 * 16;
    *rows_per = (int32_t)per;
    return (int32_t)((rows + per - 1) / per);
}

size_t ta_cuda_fast_band_part_count(const ta_plan *plan) {
    const ta_problem *p = &plan->p;
    const size_t blocks = ((size_t)p->seq_q + 63u) / 64u;
    /* the kernels' width: W, at most S_k - 1 */
    const size_t chunks = ((size_t)ta_cuda_rband_w1(plan) - 1u + 63u) / 64u + 1u;
    size_t n = 0;
    if (!ta_mul_size((size_t)p->batch * (size_t)p->heads_q, blocks, &n) ||
        !ta_mul_size(n, chunks, &n) || !ta_mul_size(n, 64u * (size_t)plan->dim_k, &n))
        return (size_t)-1;
    return n;
}

int32_t ta_cuda_rband_w1(const ta_plan *plan) {
    const int32_t w = plan->p.rband_width, last = plan->p.seq_k - 1;
    return plan->stages.score == TA_SCORE_RBAND ? (w < last ? w : last) + 1 : 1;
}

/* The rotary stage's pairs in whole 16-byte chunks of the turned copies
 * (cuda/ta_cuda_fast_rope.cu): rope_pairs a multiple of 4 (interleaved) or 8
 * (half-split). */
static int ta_cuda_fast_rope_pairs_ok(const ta_plan *plan) {
    return plan->p.rope_pairs % (plan->p.rope == TA_ROPE_HALF ? 8 : 4) == 0;
}

/* The fast MTA kernels' problems: fast, f16 / bf16, the conv, D = D_v in
 * {64, 96, 128}, no load stage or the rotary stage with pairs in whole
 * chunks (the kernels then run on turned copies: cuda/ta_cuda_fast_rope.cu;
 * other pairs run the exact kernels, which turn any); the fold
 * (cuda/ta_cuda_fast_mta.cu) for prefill, the decode-shaped kernel
 * (cuda/ta_cuda_fast_decode.cu) for a few rows, split-K or pages. */
static int ta_cuda_fast_mta_any(const ta_plan *plan) {
    const ta_problem *p = &plan->p;
    const int32_t d = p->head_dim;
    return p->precision == TA_PRECISION_FAST && p->dtype != TA_F32 && plan->has_conv &&
           d == p->head_dim_v && (d == 64 || d == 96 || d == 128) &&
           (plan->stages.load == TA_LOAD_NONE ||
            (plan->stages.load == TA_LOAD_ROPE && ta_cuda_fast_rope_pairs_ok(plan))) &&
           !ta_plan_keys_cut(plan);
}

/* 1 if the plan runs the fast MTA kernels on turned copies (either pass). */
static int ta_cuda_fast_mta_rope(const ta_plan *plan) {
    return plan->stages.load == TA_LOAD_ROPE && ta_cuda_fast_mta_any(plan);
}

int ta_cuda_fast_mta_dec_path(const ta_plan *plan) {
    return ta_cuda_fast_mta_any(plan) &&
           (plan->p.seq_q <= TA_CUDA_DEC_ROWS || plan->fwd.num_splits > 1 ||
            plan->p.kv_page_size > 0);
}

int ta_cuda_fast_mta_path(const ta_plan *plan) {
    return ta_cuda_fast_mta_any(plan) && !ta_cuda_fast_mta_dec_path(plan);
}

int32_t ta_cuda_fast_mta_dec_pack(const ta_plan *plan) {
    const ta_problem *pr = &plan->p;
    const int64_t g = plan->group;
    if (!ta_cuda_fast_mta_dec_path(plan) || g < 2) return 1;
    return g * pr->seq_q <= TA_CUDA_DEC_ROWS &&
                   g * (pr->seq_q + pr->conv_q - 1) <= TA_CUDA_DEC_RAW_ROWS &&
                   g * pr->conv_q * pr->conv_k <= TA_CUDA_DEC_W_MAX
               ? (int32_t)g
               : 1;
}

/* TA_SPLITS_AUTO's rule with a target of `target` blocks of `blocks` row
 * blocks (>= 1): ceil(target / blocks), at most S_k / TA_SPLITS_AUTO_MIN_KEYS
 * and TA_SPLITS_AUTO_MAX, at least 1. */
static int32_t ta_cuda_splits_for(int64_t target, int64_t blocks, int32_t seq_k) {
    int64_t m = (target + blocks - 1) / blocks;
    if (m > seq_k / TA_SPLITS_AUTO_MIN_KEYS) m = seq_k / TA_SPLITS_AUTO_MIN_KEYS;
    if (m > TA_SPLITS_AUTO_MAX) m = TA_SPLITS_AUTO_MAX;
    return m < 1 ? 1 : (int32_t)m;
}

int32_t ta_cuda_fast_mta_dec_splits(const ta_plan *plan) {
    const ta_problem *p = &plan->p;
    int32_t n;
    if (ta_cuda_fast_mta_dec_pack(plan) == 1 || p->num_splits != TA_SPLITS_AUTO)
        return plan->fwd.num_splits;
    n = ta_cuda_splits_for(TA_SPLITS_AUTO_BLOCKS / 2, (int64_t)p->batch * p->heads_kv, p->seq_k);
    return n < plan->fwd.num_k_tiles ? n : plan->fwd.num_k_tiles; /* the plan's clamp */
}

int32_t ta_cuda_fast_mta_band(const ta_plan *plan) {
    return (plan->p.conv_k - 1) / 2 + plan->p.conv_q - 1;
}

int ta_cuda_fast_mta_bwd_path(const ta_plan *plan) { return ta_cuda_fast_mta_any(plan); }

int32_t ta_cuda_fast_mta_edge(const ta_plan *plan) {
    /* a window start hides a term only if some row's start is past key 0:
     * i' + S_k - S_q - window_left > 0 for a row i' < S_q */
    const int32_t wl = plan->fwd.window_left;
    return wl >= 0 && wl < plan->p.seq_k ? (plan->p.conv_k - 1) / 2 : 0;
}

/* The fast forward's configuration table (docs/cuda.md section 7,
 * "Configurations"): per head dim, the candidates tile_config = k names
 * (cuda/ta_cuda_fast_fwd.cu holds their kernels, in this order: 1 the wgmma
 * forward, then the one-buffer mma.sync ones, the warp-specialised TMA ones,
 * the multi-stage mma.sync ones, the decode-shaped ones of
 * cuda/ta_cuda_fast_decode.cu), and tile_config 0's pick per (causal,
 * device class), chosen by measurement (docs/benchmarks.md). */
typedef struct ta_cuda_fast_cfgs {
    int32_t head_dim;
    int32_t count;      /* candidates: tile_config in [1, count] */
    int32_t pick[2][2]; /* [causal][sm90]: tile_config 0's candidate */
    int32_t split;      /* tile_config 0's candidate with split-K or paged KV (mma.sync) */
    int32_t decode[2];  /* [sm90]: the same with at most 16 (packed) query rows per head */
} ta_cuda_fast_cfgs;

/* H100, bf16, 16k tokens, S = 1k, 4k, 16k (bench/results/
 * fast_sweep_pipe_h100_2026-11-23.csv): on sm_90 the warp-specialised
 * forward is fastest or within noise everywhere; the column "other" is the
 * fastest mma.sync candidate timed on the same H100 (no sm_80/86/89 device
 * has run them): the one-buffer (4 warps, 64 keys) kernel, except D = 96,
 * where its multi-stage twin won 5 of 6 shapes by 2-7 %. ta_tune_fwd picks
 * per device where this table's guess is not good enough. */
static const ta_cuda_fast_cfgs k_fast_cfgs[4] = {
    /* D   n    non-causal: other, sm90   causal: other, sm90   split-K  decode: other, sm90 */
    {64, 9, {{2, 5}, {2, 5}}, 6, {9, 8}},
    {96, 7, {{5, 4}, {5, 4}}, 5, {7, 6}},
    {128, 10, {{2, 5}, {2, 5}}, 7, {10, 9}},
    {256, 8, {{2, 5}, {2, 5}}, 6, {6, 8}},
};

static const ta_cuda_fast_cfgs *ta_cuda_fast_cfgs_of(int32_t d) {
    for (size_t i = 0; i < sizeof k_fast_cfgs / sizeof k_fast_cfgs[0]; ++i)
        if (k_fast_cfgs[i].head_dim == d) return &k_fast_cfgs[i];
    return NULL;
}

int32_t ta_cuda_fast_cfg_count(int32_t d) {
    const ta_cuda_fast_cfgs *c = ta_cuda_fast_cfgs_of(d);
    return c ? c->count : 0;
}

int32_t ta_cuda_fast_cfg_default(int32_t d, int causal, int sm90, int split) {
    const ta_cuda_fast_cfgs *c = ta_cuda_fast_cfgs_of(d);
    return !c            ? 0
           : split == 2 ? c->decode[sm90 != 0]
           : split      ? c->split
                        : c->pick[causal != 0][sm90 != 0];
}

/* The head dims of the fast table (TA_ERR_UNSUPPORTED for any other, and for
 * a tile_config past the head dim's candidates; the launcher also refuses the
 * wgmma candidates on a device that is not sm_90). */
static int ta_cuda_fast_table_has(const ta_plan *plan) {
    const int32_t d = plan->p.head_dim;
    return d == plan->p.head_dim_v && plan->p.tile_config <= ta_cuda_fast_cfg_count(d) &&
           ta_cuda_fast_cfg_count(d) > 0;
}

/* The rotary load stage on the fast path (docs/rope.md): pairs in whole
 * 16-byte chunks, rope_pairs a multiple of 4 (interleaved) or 8 (half-split),
 * and one split. */
static int ta_cuda_fast_rope_ok(const ta_plan *plan) {
    /* split-K with the stage: not yet (the turned copies and the parts have
     * not been made to share a workspace), in either pass (the plan is one) */
    return ta_cuda_fast_rope_pairs_ok(plan) && plan->fwd.num_splits == 1;
}

/* Every operation of the plan: SDPA and the MTA conv, any mask (causal,
 * seqlens_k, sliding window) and any validated layout (ta_strides); on the
 * fast path, the head dims and tile_config of the fast table. The rotary load
 * stage: the exact kernels (every dtype, SDPA and MTA, both passes) turn q and
 * k as they load them; the fast path (SDPA, f16/bf16) only with
 * ta_cuda_fast_rope_ok (the forward on every device, the backward on sm_90:
 * its launcher refuses elsewhere). */
int ta_cuda_supports(const ta_plan *plan) {
    if (plan->stages.load != TA_LOAD_NONE && ta_cuda_fast_path(plan) && !ta_cuda_fast_rope_ok(plan))
        return 0;
    /* paged KV (the forward; the backward refuses pages before asking): the
     * exact kernels with everything they run (SDPA, MTA, query history rows,
     * split-K, the rotary stage), the fast forward (mma.sync kernels) without
     * the rotary stage */
    if (plan->p.kv_page_size > 0 && ta_cuda_fast_path(plan) && plan->stages.load != TA_LOAD_NONE)
        return 0;
    /* latent attention (the band, the fused projections): the exact kernels */
    if (ta_cuda_latent_plan(plan)) return 1;
    if (ta_cuda_fast_path(plan)) return ta_cuda_fast_table_has(plan);
    if (ta_cuda_fast_mta_path(plan) || ta_cuda_fast_mta_dec_path(plan))
        return plan->p.tile_config <= TA_CUDA_FAST_MTA_CFGS;
    return 1;
}

int32_t ta_cuda_fast_pack(const ta_plan *plan) {
    const ta_problem *p = &plan->p;
    if (!ta_cuda_fast_path(plan) || plan->group < 2 || plan->has_window ||
        plan->stages.load != TA_LOAD_NONE)
        return 1;
    if (p->num_splits != TA_SPLITS_AUTO && p->num_splits < 2) return 1; /* not split-K */
    if (p->seq_q > 1 && (p->flags & TA_CAUSAL)) return 1; /* rows of a head differ */
    return plan->group;
}

int32_t ta_cuda_fast_splits(const ta_plan *plan) {
    const ta_problem *p = &plan->p;
    const int32_t g = ta_cuda_fast_pack(plan);
    int64_t rows;
    int32_t n;
    if (g == 1 || p->num_splits != TA_SPLITS_AUTO) return plan->fwd.num_splits;
    rows = (int64_t)g * p->seq_q; /* a group's rows, one head of the packed grid */
    if (rows <= TA_CUDA_DEC_ROWS) {
        /* the decode-shaped kernel (one block per SM at D = 128): half
         * TA_SPLITS_AUTO_BLOCKS, one wave on an H100 (GQA 32 / 8 heads, one
         * query: 16 splits beat 32 by 3-22 % at S_k = 8k .. 256k,
         * bench/results/decode_h100_2026-11-24_deckernel.log) */
        n = ta_cuda_splits_for(TA_SPLITS_AUTO_BLOCKS / 2, (int64_t)p->batch * p->heads_kv,
                               p->seq_k);
    } else {
        n = ta_tiling_splits_auto(p->batch, p->heads_kv,
                                  rows < TA_SEQ_MAX ? (int32_t)rows : TA_SEQ_MAX, p->seq_k);
    }
    return n < plan->fwd.num_k_tiles ? n : plan->fwd.num_k_tiles; /* the plan's clamp */
}

/* The fast path's rotary stage: q and k turned once, in the storage type
 * (ta_cuda_fast_rope_turn, ta_cuda_fast_mta_rope_turn), at the front of
 * either pass's workspace (n_k counts the keys of a paged cache too: its k
 * is gathered into the copy). */
static void ta_cuda_rope_take(const ta_plan *plan, ta_ws_cursor *c, void **rot_q, void **rot_k) {
    if (plan->stages.load != TA_LOAD_ROPE ||
        !(ta_cuda_fast_path(plan) || ta_cuda_fast_mta_rope(plan)))
        return;
    *rot_q = ta_ws_take(c, plan->n_q, plan->elem_bytes);
    *rot_k = ta_ws_take(c, plan->n_k, plan->elem_bytes);
}

/* The fast MTA forward's other copies with the stage: the history rows
 * turned, and v of a paged cache gathered. */
static ta_status ta_cuda_mta_rope_fwd_take(const ta_plan *plan, ta_ws_cursor *c,
                                           ta_cuda_fwd_ws *ws) {
    const ta_problem *p = &plan->p;
    size_t n_h = 0;
    if (!ta_cuda_fast_mta_rope(plan)) return TA_OK;
    if (!ta_mul_size((size_t)p->batch * (size_t)p->heads_q, (size_t)p->q_history, &n_h) ||
        !ta_mul_size(n_h, (size_t)p->head_dim, &n_h))
        return TA_ERR_OVERFLOW;
    if (n_h > 0) ws->rot_qh = ta_ws_take(c, n_h, plan->elem_bytes);
    if (p->kv_page_size > 0) ws->rot_v = ta_ws_take(c, plan->n_v, plan->elem_bytes);
    return TA_OK;
}

/* The fast MTA forward's regions (ta_cuda.h draws them), which the backward
 * takes first too: the filtered keys kf, c_q per key per query head, the
 * convolved scores next to the diagonal, E per query row, and with a left
 * window bound those next to it, P per row. */
static ta_status ta_cuda_fast_mta_take(const ta_plan *plan, ta_ws_cursor *c, void **kf,
                                       float **diag, float **edge_vals) {
    const ta_problem *p = &plan->p;
    const size_t heads = (size_t)p->batch * (size_t)p->heads_q;
    const int32_t band = ta_cuda_fast_mta_band(plan), edge = ta_cuda_fast_mta_edge(plan);
    size_t n_kf = 0, n_diag = 0, n_edge = 0;
    if (!ta_mul_size(heads, (size_t)p->seq_k, &n_kf) ||
        !ta_mul_size(n_kf, (size_t)p->conv_q * (size_t)p->head_dim, &n_kf) ||
        !ta_mul_size(heads, (size_t)p->seq_q, &n_diag) ||
        !ta_mul_size(n_diag, (size_t)band, &n_diag) ||
        !ta_mul_size(heads * (size_t)p->seq_q, (size_t)edge, &n_edge))
        return TA_ERR_OVERFLOW;
    *kf = ta_ws_take(c, n_kf, plan->elem_bytes);
    if (band > 0) *diag = TA_WS_TAKE(c, float, n_diag);
    if (edge > 0) *edge_vals = TA_WS_TAKE(c, float, n_edge);
    return TA_OK;
}

/* Latent attention's regions (ta_cuda.h lists them): the f32 copies the
 * exact kernels run on. The backward has no history rows (refused). */
static ta_status ta_cuda_latent_take(const ta_plan *plan, ta_ws_cursor *c, int bwd, float **lat_q,
                                     float **lat_k, float **lat_v, float **lat_t, size_t *n_rows_l,
                                     size_t *n_band) {
    const ta_problem *p = &plan->p;
    const size_t heads = (size_t)p->batch * (size_t)p->heads_q, lat = (size_t)plan->dim_k;
    const size_t hist = bwd ? 0u : (size_t)p->q_history;
    size_t n_q = 0;
    if (!ta_mul_size(heads, hist + (size_t)p->seq_q, &n_q) || !ta_mul_size(n_q, lat, &n_q) ||
        !ta_mul_size(plan->n_lse, (size_t)ta_cuda_rband_w1(plan), n_band) ||
        !ta_mul_size(plan->n_lse, lat, n_rows_l))
        return TA_ERR_OVERFLOW;
    *lat_q = TA_WS_TAKE(c, float, n_q);
    if (p->dtype != TA_F32) {
        *lat_k = TA_WS_TAKE(c, float, plan->n_k);
        *lat_v = TA_WS_TAKE(c, float, plan->n_v);
    }
    if (plan->stages.score == TA_SCORE_RBAND) *lat_t = TA_WS_TAKE(c, float, *n_band);
    return TA_OK;
}

static ta_status ta_cuda_latent_fwd_take(const ta_plan *plan, ta_ws_cursor *c, ta_cuda_fwd_ws *ws) {
    size_t n_rows_l = 0, n_band = 0; /* [B, H, S_q, L], [B, H, S_q, W1] */
    const ta_status st = ta_cuda_latent_take(plan, c, 0, &ws->lat_q, &ws->lat_k, &ws->lat_v,
                                             &ws->lat_t, &n_rows_l, &n_band);
    if (st != TA_OK) return st;
    if (plan->p.latent_dim > 0 || plan->p.dtype != TA_F32)
        ws->lat_o = TA_WS_TAKE(c, float, n_rows_l);
    if (plan->p.latent_dim > 0) ws->lat_lse = TA_WS_TAKE(c, float, plan->n_lse);
    return TA_OK;
}

/* Fast mode's regions (ta_cuda.h lists them), after the exact ones. */
static ta_status ta_cuda_fast_lat_fwd_take(const ta_plan *plan, ta_ws_cursor *c,
                                           ta_cuda_fwd_ws *ws) {
    const ta_problem *p = &plan->p;
    const size_t lat = (size_t)plan->dim_k;
    size_t n_q = 0, n_o = 0;
    if (!ta_mul_size((size_t)p->batch * (size_t)p->heads_q,
                     (size_t)p->q_history + (size_t)p->seq_q, &n_q) ||
        !ta_mul_size(n_q, lat, &n_q) || !ta_mul_size(plan->n_lse, lat, &n_o))
        return TA_ERR_OVERFLOW;
    ws->fl_q = ta_ws_take(c, n_q, plan->elem_bytes);
    ws->fl_o = ta_ws_take(c, n_o, plan->elem_bytes);
    ws->fl_lse = TA_WS_TAKE(c, float, plan->n_lse);
    if (p->latent_dim > 0 && plan->stages.score == TA_SCORE_RBAND)
        ws->fl_ctx = TA_WS_TAKE(c, float, n_o);
    return TA_OK;
}

static ta_status ta_cuda_fast_lat_bwd_take(const ta_plan *plan, ta_ws_cursor *c,
                                           ta_cuda_bwd_ws *ws) {
    const ta_problem *p = &plan->p;
    const int proj = p->latent_dim > 0, band = plan->stages.score == TA_SCORE_RBAND;
    const size_t lat = (size_t)plan->dim_k;
    size_t n_o = 0, n_dw = 0, dw_q = 0, dw_v = 0;
    int32_t rows_per = 0;
    const int32_t n_chunks = ta_cuda_lat_dw_chunks(plan, &rows_per);
    if (!ta_mul_size(plan->n_lse, lat, &n_o) ||
        !ta_mul_size((size_t)p->head_dim, lat, &dw_q) ||
        !ta_mul_size((size_t)p->head_dim_v, lat, &dw_v) ||
        !ta_mul_size((size_t)p->heads_q * (size_t)n_chunks, dw_q > dw_v ? dw_q : dw_v, &n_dw))
        return TA_ERR_OVERFLOW;
    ws->fl_q = ta_ws_take(c, n_o, plan->elem_bytes);
    ws->fl_dq = ta_ws_take(c, n_o, plan->elem_bytes);
    if (ta_cuda_fast_mqa(plan)) { /* the keys below the band's multi-query copies */
        size_t n_kh = 0;
        if (!ta_mul_size(plan->n_k, (size_t)p->heads_q, &n_kh)) return TA_ERR_OVERFLOW;
        ws->mqa_dk = TA_WS_TAKE(c, float, n_kh);
        ws->mqa_dv = TA_WS_TAKE(c, float, n_kh);
    }
    if (band) {
        ws->fl_dk = ta_ws_take(c, plan->n_k, plan->elem_bytes);
        ws->fl_dv = ta_ws_take(c, plan->n_v, plan->elem_bytes);
        ws->fl_pdq = TA_WS_TAKE(c, float, ta_cuda_fast_band_part_count(plan));
        ws->fl_pdk = TA_WS_TAKE(c, float, ta_cuda_fast_band_part_count(plan));
        ws->fl_pdv = TA_WS_TAKE(c, float, ta_cuda_fast_band_part_count(plan));
        ws->fl_da = TA_WS_TAKE(c, float, plan->n_lse);
    }
    if (proj) {
        ws->fl_do = ta_ws_take(c, n_o, plan->elem_bytes);
        ws->fl_ctxs = ta_ws_take(c, n_o, plan->elem_bytes);
        ws->fl_lse = TA_WS_TAKE(c, float, plan->n_lse);
        ws->fl_dw = TA_WS_TAKE(c, float, n_dw);
        if (band) {
            ws->fl_o = ta_ws_take(c, n_o, plan->elem_bytes);
            ws->fl_ctx = TA_WS_TAKE(c, float, n_o);
            ws->fl_dqf = TA_WS_TAKE(c, float, n_o);
        }
    }
    return TA_OK;
}

static ta_status ta_cuda_latent_bwd_take(const ta_plan *plan, ta_ws_cursor *c, ta_cuda_bwd_ws *ws) {
    const int proj = plan->p.latent_dim > 0, wide = plan->p.dtype != TA_F32;
    size_t n_rows_l = 0, n_band = 0;
    const ta_status st = ta_cuda_latent_take(plan, c, 1, &ws->lat_q, &ws->lat_k, &ws->lat_v,
                                             &ws->lat_t, &n_rows_l, &n_band);
    if (st != TA_OK) return st;
    if (plan->stages.score == TA_SCORE_RBAND) {
        ws->lat_dl = TA_WS_TAKE(c, float, n_band);
        ws->lat_da = TA_WS_TAKE(c, float, plan->n_lse);
    }
    if (proj || wide) {
        ws->lat_do = TA_WS_TAKE(c, float, n_rows_l);
        ws->lat_dq = TA_WS_TAKE(c, float, n_rows_l);
    }
    if (wide) {
        ws->lat_dk = TA_WS_TAKE(c, float, plan->n_k);
        ws->lat_dv = TA_WS_TAKE(c, float, plan->n_v);
    }
    if (proj) ws->lat_ctx = TA_WS_TAKE(c, float, n_rows_l);
    return TA_OK;
}

/* The one forward layout routine: sizes (base NULL) and carves (base set)
 * (ta_cuda.h draws the regions). */
ta_status ta_cuda_fwd_layout(const ta_plan *plan, void *base, ta_cuda_fwd_ws *ws, size_t *bytes) {
    /* the fast path's split count (GQA decode packing may count more parts) */
    const int32_t n_split = ta_cuda_fast_path(plan)           ? ta_cuda_fast_splits(plan)
                            : ta_cuda_fast_mta_dec_path(plan) ? ta_cuda_fast_mta_dec_splits(plan)
                                                              : plan->fwd.num_splits;
    ta_ws_cursor c;
    ta_status st;
    ta_ws_begin(&c, base);
    ws->part_o = ws->part_lse = NULL;
    ws->rot_q = ws->rot_k = ws->rot_qh = ws->rot_v = ws->mta_kf = NULL;
    ws->mta_diag = ws->mta_edge = NULL;
    ws->lat_q = ws->lat_k = ws->lat_v = ws->lat_t = ws->lat_o = ws->lat_lse = NULL;
    ws->fl_q = ws->fl_o = NULL;
    ws->fl_lse = ws->fl_ctx = NULL;
    ta_cuda_rope_take(plan, &c, &ws->rot_q, &ws->rot_k);
    if ((st = ta_cuda_mta_rope_fwd_take(plan, &c, ws)) != TA_OK) return st;
    if (ta_cuda_latent_plan(plan) && (st = ta_cuda_latent_fwd_take(plan, &c, ws)) != TA_OK)
        return st;
    if (ta_cuda_fast_lat_path(plan) && (st = ta_cuda_fast_lat_fwd_take(plan, &c, ws)) != TA_OK)
        return st;
    if (n_split > 1) {
        size_t n_o = 0, n_lse = 0;
        if (!ta_mul_size(plan->n_o, (size_t)n_split, &n_o) ||
            !ta_mul_size(plan->n_lse, (size_t)n_split, &n_lse))
            return TA_ERR_OVERFLOW;
        ws->part_o = TA_WS_TAKE(&c, float, n_o);
        ws->part_lse = TA_WS_TAKE(&c, float, n_lse);
    }
    if (ta_cuda_fast_mta_path(plan) &&
        (st = ta_cuda_fast_mta_take(plan, &c, &ws->mta_kf, &ws->mta_diag, &ws->mta_edge)) != TA_OK)
        return st;
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

/* The fast MTA backward's regions (ta_cuda.h lists them): the forward's (kf,
 * diag, edge), then the direct entries' dC and the band's dS~ and dq share,
 * dkf, the dw partials of 32 keys (the fold) and 32 rows (the band), and with
 * a binding window start the edge entries' dC and band. */
static ta_status ta_cuda_fast_mta_bwd_take(const ta_plan *plan, ta_ws_cursor *c,
                                           ta_cuda_bwd_ws *ws) {
    const ta_problem *p = &plan->p;
    const size_t heads = (size_t)p->batch * (size_t)p->heads_q;
    const size_t band = (size_t)ta_cuda_fast_mta_band(plan);
    const size_t edge = (size_t)ta_cuda_fast_mta_edge(plan);
    const size_t ncw = plan->n_conv / (size_t)p->heads_q;
    const size_t n_kb = ((size_t)p->seq_k + 31) / 32, n_rb = ((size_t)p->seq_q + 31) / 32;
    size_t n_kf = 0, n_rows = 0, n_e = 0, n_dq = 0, n_fold = 0, n_bandw = 0, n_edge = 0;
    size_t n_band2 = 0;
    ta_status st;
    if ((st = ta_cuda_fast_mta_take(plan, c, &ws->mta_kf, &ws->mta_diag, &ws->mta_edge)) != TA_OK)
        return st;
    if (!ta_mul_size(heads, (size_t)p->seq_k, &n_kf) ||
        !ta_mul_size(n_kf, (size_t)p->conv_q * (size_t)p->head_dim, &n_kf) ||
        !ta_mul_size(heads, (size_t)p->seq_q, &n_rows) || !ta_mul_size(n_rows, band, &n_e) ||
        !ta_mul_size(n_rows, (size_t)p->head_dim, &n_dq) ||
        !ta_mul_size(heads * n_kb, ncw, &n_fold) || !ta_mul_size(heads * n_rb, ncw, &n_bandw) ||
        !ta_mul_size(n_rows, edge, &n_edge) ||
        !ta_mul_size(n_rows, 3 * edge + (size_t)p->conv_q - 1, &n_band2))
        return TA_ERR_OVERFLOW;
    if (band > 0) {
        ws->mta_g = TA_WS_TAKE(c, float, n_e);
        ws->mta_dsb = TA_WS_TAKE(c, float, 2 * n_e);
        ws->mta_dw_band = TA_WS_TAKE(c, float, n_bandw);
        ws->mta_dq_band = TA_WS_TAKE(c, float, n_dq);
    }
    ws->mta_dkf = TA_WS_TAKE(c, float, n_kf);
    ws->mta_dw_fold = TA_WS_TAKE(c, float, n_fold);
    if (edge > 0) {
        ws->mta_g_edge = TA_WS_TAKE(c, float, n_edge);
        ws->mta_dsb2 = TA_WS_TAKE(c, float, n_band2);
    }
    return TA_OK;
}

/*
 * The one backward layout routine (device memory, 64-byte aligned regions):
 *
 *   base
 *   +------------------------------------+
 *   | delta   [B, H, S_q] f32            |
 *   +------------------------------------+
 *   | dw_rows [B, H, n_q, c_q, c_k] f32  |  MTA only (n_q = plan->bwd.num_q_tiles)
 *   +------------------------------------+
 *   | dw_lo   [H, c_q, c_k] f32          |  MTA only: lo words of dconv_w's pairs
 *   +------------------------------------+
 *
 *   bytes = round_up(4 * B * H * S_q, 64) [+ round_up(4 * B * H * n_q * c_q * c_k, 64)
 *           + round_up(4 * H * c_q * c_k, 64)]
 */
ta_status ta_cuda_bwd_layout(const ta_plan *plan, void *base, ta_cuda_bwd_ws *ws, size_t *bytes) {
    ta_ws_cursor c;
    ta_status st;
    ta_ws_begin(&c, base);
    ws->mta_kf = NULL;
    ws->mta_diag = ws->mta_g = ws->mta_dsb = ws->mta_dq_band = NULL;
    ws->mta_dkf = ws->mta_dw_fold = ws->mta_dw_band = NULL;
    ws->mta_edge = ws->mta_g_edge = ws->mta_dsb2 = NULL;
    ws->delta = TA_WS_TAKE(&c, float, plan->n_lse);
    ws->dw_rows = ws->dw_lo = NULL;
    ws->rot_q = ws->rot_k = NULL;
    ws->rot_dq = ws->rot_dk = NULL;
    ws->lat_q = ws->lat_k = ws->lat_v = ws->lat_t = ws->lat_dl = ws->lat_da = NULL;
    ws->lat_do = ws->lat_dq = ws->lat_dk = ws->lat_dv = ws->lat_ctx = NULL;
    ws->fl_q = ws->fl_dq = ws->fl_dk = ws->fl_dv = ws->fl_do = ws->fl_ctxs = ws->fl_o = NULL;
    ws->fl_lse = ws->fl_ctx = ws->fl_dqf = ws->fl_pdq = ws->fl_pdk = ws->fl_pdv = NULL;
    ws->fl_da = ws->fl_dw = NULL;
    ws->mqa_dk = ws->mqa_dv = NULL;
    ta_cuda_rope_take(plan, &c, &ws->rot_q, &ws->rot_k);
    if (ta_cuda_fast_mta_rope(plan)) { /* dq, dk of the turned q, k, f32, before the turn back */
        ws->rot_dq = TA_WS_TAKE(&c, float, plan->n_q);
        ws->rot_dk = TA_WS_TAKE(&c, float, plan->n_k);
    }
    if (ta_cuda_latent_plan(plan) && (st = ta_cuda_latent_bwd_take(plan, &c, ws)) != TA_OK)
        return st;
    if (ta_cuda_fast_lat_path(plan) && (st = ta_cuda_fast_lat_bwd_take(plan, &c, ws)) != TA_OK)
        return st;
    if (plan->has_conv) {
        size_t n = 0;
        if (!ta_mul_size(plan->n_lse / (size_t)plan->p.seq_q, (size_t)plan->bwd.num_q_tiles,
                         &n) ||
            !ta_mul_size(n, plan->n_conv / (size_t)plan->p.heads_q, &n))
            return TA_ERR_OVERFLOW;
        ws->dw_rows = TA_WS_TAKE(&c, float, n);
        ws->dw_lo = TA_WS_TAKE(&c, float, plan->n_conv);
    }
    if (ta_cuda_fast_mta_bwd_path(plan) && (st = ta_cuda_fast_mta_bwd_take(plan, &c, ws)) != TA_OK)
        return st;
    if (ta_cuda_fast_path(plan) && ta_cuda_fast_mqa(plan)) {
        size_t n_dk = 0, n_dv = 0;
        if (!ta_mul_size(plan->n_k, (size_t)plan->p.heads_q, &n_dk) ||
            !ta_mul_size(plan->n_v, (size_t)plan->p.heads_q, &n_dv))
            return TA_ERR_OVERFLOW;
        ws->mqa_dk = TA_WS_TAKE(&c, float, n_dk);
        ws->mqa_dv = TA_WS_TAKE(&c, float, n_dv);
    }
    if (c.overflow) return TA_ERR_OVERFLOW;
    *bytes = c.used;
    return TA_OK;
}

ta_status ta_cuda_fwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_fwd_ws ws;
    return ta_cuda_fwd_layout(plan, NULL, &ws, bytes);
}

ta_status ta_cuda_bwd_size(const ta_plan *plan, size_t *bytes) {
    ta_cuda_bwd_ws ws;
    return ta_cuda_bwd_layout(plan, NULL, &ws, bytes);
}
