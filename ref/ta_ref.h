/*
 * Pieces shared by the reference forward and backward: where a step of a pass
 * stands (tile bounds from the tiling descriptor), tensor indexing, 2-D tile
 * views addressed by absolute (row, column), tile loading (widening, zero
 * padding), the dot product, the score tile and the MTA key-query conv.
 *
 *   ref/ta_ref_tile.c   loading Q/K/V tiles, the raw score tile
 *   ref/ta_ref_conv.c   the MTA conv: forward, transposed (gradient), dconv_w partial
 *   ref/ta_ref_fwd.c    forward pass (SDPA, and MTA when plan->has_conv)
 *   ref/ta_ref_bwd.c    backward passes (dk/dv, then dq and dconv_w)
 *   ref/ta_ref_rband.c  the reciprocal band's score stage (TA_SCORE_RBAND)
 *   ref/ta_ref_ops.c    the backend's entry-point table
 *
 * Plain SDPA is the special case with no halos: loaded region = effective
 * region, and the convolved scores are the raw scores (the conv steps are
 * skipped and the same buffer is used), so one code path serves both.
 *
 * Scalar C11 only: no threads, no intrinsics, no libm beyond fmaf (TA_FMAF,
 * correctly rounded). Arithmetic order is the specification (docs/reference.md,
 * docs/mta.md).
 */
#ifndef TA_REF_H
#define TA_REF_H

#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"

/* Entry points (ref/ta_ref_fwd.c, ref/ta_ref_bwd.c). */
ta_status ta_ref_fwd_workspace_size(const ta_plan *plan, size_t *bytes);
ta_status ta_ref_bwd_workspace_size(const ta_plan *plan, size_t *bytes);
ta_status ta_ref_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace, void *stream);
ta_status ta_ref_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace, void *stream);

/* Where one step of a pass stands: which (batch, head) slice, which Q tile and
 * which K tile, filled from the tiling descriptor. All indices are absolute
 * (row of [0, S_q), column of [0, S_k)); loaded ranges may stick out of the
 * sequence (zero padding):
 *   effective rows [row_begin, row_begin + rows)            owned by this tile
 *   loaded rows    [row_load_begin, row_load_begin + rows_load)
 *   and the same for columns. Without a conv, loaded = effective. */
typedef struct ta_ref_step {
    ta_tile_ctx ctx; /* the descriptor's context: batch, heads, key_len, K tiles, slices */
    int32_t q_tile, row_begin, rows, row_load_begin, rows_load;
    int32_t k_tile, col_begin, cols, col_load_begin, cols_load;
} ta_ref_step;

/* A rectangle of absolute positions: rows [row_begin, row_end), columns
 * [col_begin, col_end). */
typedef struct ta_ref_region {
    int32_t row_begin, row_end, col_begin, col_end;
} ta_ref_region;

/* A 2-D f32 tile addressed by absolute (row, column): element (r, j) lives at
 * data[(r - row0) * ld + (j - col0)]. Every score-like tile (S, C, P, dC, dS)
 * is one of these, so the conv reads S[i - (c_q-1-a)][j + b - P] as written. */
typedef struct ta_ref_tile {
    float *data;
    int32_t row0, col0; /* absolute position of data[0] */
    int32_t ld;         /* row stride, elements */
} ta_ref_tile;

/* The MTA kernel of one query head: w [c_q, c_k] row-major (conv_w + h c_q c_k),
 * half_k = P = (c_k - 1) / 2. */
typedef struct ta_ref_conv {
    const float *w;
    int32_t c_q, c_k, half_k;
} ta_ref_conv;

/* Element offset of row r of a tensor slice that starts at `slice` with row
 * stride `seq` (ta_tile_ctx offsets, ta_layout strides). */
static inline size_t ta_ref_row(int64_t slice, int64_t seq, int32_t r) {
    return (size_t)(slice + (int64_t)r * seq);
}

/* Set the Q-tile fields of st from tiling t. */
static inline void ta_ref_step_rows(const ta_tiling *t, ta_ref_step *st, int32_t qt) {
    st->q_tile = qt;
    st->row_begin = ta_tile_row_eff_begin(t, qt);
    st->rows = ta_tile_row_eff_end(t, qt) - st->row_begin;
    st->row_load_begin = ta_tile_row_load_begin(t, qt);
    st->rows_load = ta_tile_row_load_end(t, qt) - st->row_load_begin;
}

/* Set the K-tile fields of st from tiling t. */
static inline void ta_ref_step_cols(const ta_tiling *t, ta_ref_step *st, int32_t kt) {
    st->k_tile = kt;
    st->col_begin = ta_tile_col_eff_begin(t, kt);
    st->cols = ta_tile_col_eff_end(t, kt) - st->col_begin;
    st->col_load_begin = ta_tile_col_load_begin(t, kt);
    st->cols_load = ta_tile_col_load_end(t, kt) - st->col_load_begin;
}

/* Point st at Q tile qt of (batch b, query head h) under tiling t: the
 * descriptor's context, then the tile's rows. */
static inline void ta_ref_step_q(const ta_plan *plan, const ta_tiling *t, const int32_t *seqlens_k,
                                 int32_t b, int32_t h, int32_t qt, ta_ref_step *st) {
    ta_plan_context(plan, t, seqlens_k, b, h, qt, &st->ctx);
    ta_ref_step_rows(t, st, qt);
}

/* Point st at K tile kt of (batch b, kv head h_kv) under tiling t: the context
 * of the group's first query head (its k, v, dk, dv slices and key length);
 * the dk/dv pass re-points the query side per head and Q tile. */
static inline void ta_ref_step_k(const ta_plan *plan, const ta_tiling *t, const int32_t *seqlens_k,
                                 int32_t b, int32_t h_kv, int32_t kt, ta_ref_step *st) {
    ta_plan_context(plan, t, seqlens_k, b, h_kv * plan->group, 0, &st->ctx);
    ta_ref_step_cols(t, st, kt);
}

/* The effective region of step st. */
static inline ta_ref_region ta_ref_effective(const ta_ref_step *st) {
    ta_ref_region r;
    r.row_begin = st->row_begin;
    r.row_end = st->row_begin + st->rows;
    r.col_begin = st->col_begin;
    r.col_end = st->col_begin + st->cols;
    return r;
}

/* 1 if key j is visible from query row r (absolute indices, either may lie
 * outside the sequence): the one masking predicate, ta_tiling_visible. */
static inline int ta_ref_visible(const ta_tiling *t, const ta_ref_step *st, int32_t r, int32_t j) {
    return ta_tiling_visible(t, r, j, st->ctx.key_len);
}

/* Element (r, j) of tile view v. */
static inline float *ta_ref_at(const ta_ref_tile *v, int32_t r, int32_t j) {
    return v->data + (size_t)(r - v->row0) * (size_t)v->ld + (size_t)(j - v->col0);
}

/* Offset of row r in a [rows, dim] tile whose first row is absolute row
 * `first` (r >= first): tile + ta_ref_off(first, r, dim) is row r. */
static inline size_t ta_ref_off(int32_t first, int32_t r, int32_t dim) {
    return (size_t)(r - first) * (size_t)dim;
}

/* <a, b> over n features: one accumulator from +0, fmaf, d ascending. */
static inline float ta_ref_dot(const float *a, const float *b, int32_t n) {
    float acc = 0.0f;
    int32_t d;
    for (d = 0; d < n; ++d)
        acc = TA_FMAF(a[d], b[d], acc);
    return acc;
}

/* ---- ref/ta_ref_bwd.c: the backward's steps (pass 1 per K tile, pass 2 per Q tile, the call sums) ---- */

/* The buffers of the backward (the diagram in ref/ta_ref_bwd.c). The shared
 * ones (dw_lo, da_g, dwq_part, dwv_part, dwq_lo, dwv_lo: the call's sums) are
 * touched only by ta_ref_bwd_begin, ta_ref_bwd_q_tile_merge and ta_ref_bwd_end;
 * every other buffer belongs to one step at a time. */
typedef struct ta_ref_bwd_ws {
    float *q;        /* [B_q, D]    Q tile: loaded rows, widened, zero outside [0, S_q) */
    float *d_o;      /* [B_q, D_v]  dO tile: loaded rows */
    float *k;        /* [B_k, D]    K tile: loaded columns, zero outside [0, S_k) */
    float *v;        /* [B_k, D_v]  V tile: loaded columns */
    float *s;        /* [B_q, B_k]  raw scores S on the loaded region (ld B_k) */
    float *ds;       /* [B_r, B_c]  dS on the effective region (ld B_c) */
    float *lse;      /* [B_q]       lse of the loaded rows; -inf outside [0, S_q) */
    float *delta;    /* [B_q]       D_i = <dO_i, o_i> of the loaded rows; 0 outside */
    float *dk_acc;   /* [B_c, D]    pass 1: sum_(h, i) dS_ij q_i, the pair's hi word */
    float *dv_acc;   /* [B_c, D_v]  pass 1: sum_(h, i) P_ij dO_i, the pair's hi word */
    float *dq_acc;   /* [B_r, D]    pass 2: sum_j dS_ij k_j, the pair's hi word */
    float *dk_lo;    /* [B_c, D]    their lo words (src/ta_sum2.h) */
    float *dv_lo;    /* [B_c, D_v] */
    float *dq_lo;    /* [B_r, D] */
    float *dk_part;  /* [B_c, D]    pass 1: the current row chunk's partials */
    float *dv_part;  /* [B_c, D_v] */
    float *dq_part;  /* [B_r, D]    pass 2: the current key chunk's partials */
    float *p;        /* [G_r, G_c]  conv: C, overwritten by P, on the gradient region; else s */
    float *dc;       /* [G_r, G_c]  conv: dC on the gradient region; else ds */
    float *dw_tile;  /* [c_q, c_k]  conv: dconv_w partial of one tile pair */
    float *dw_qtile; /* [c_q, c_k]  conv: R(b, qt), the Q tile's sum of its pairs' partials (hi) */
    float *dw_qtile_lo; /* [c_q, c_k]     conv: its lo word (src/ta_sum2.h) */
    float *dw_lo;       /* [H, c_q, c_k]  conv: the lo words of dconv_w's pairs (hi: dconv_w) */
    /* the reciprocal band (TA_SCORE_RBAND; every tile buffer above then has
     * B_m = max(B_q, B_k) rows and columns: a transposed block's rows are a K
     * tile's positions, its columns a Q tile's) */
    float *kt;       /* [B_m, D]    k rows at the step's row positions */
    float *qt;       /* [B_m, D]    q rows at the step's column positions */
    float *tt;       /* [B_m, B_m]  T of the band's entries (ld B_m) */
    float *da_hi, *da_lo, *da_part; /* [B_m] pass 2: each row's d_alpha pair and chunk partial */
    float *da_g;     /* [2]         the call's d_alpha pair (hi, lo) */
    int32_t ld_s, ld_ds; /* row strides of s and ds: B_k and B_c, or B_m with the band */
    /* the fused projections (latent_dim L > 0; D above is then L, D_v is L; D_q =
     * head_dim, D_o = head_dim_v the widths of q and o in memory; B_x = max(B_q, B_k)) */
    float *qraw;     /* [B_x, D_q]  raw q rows (the load stage's scratch) */
    float *doraw;    /* [B_x, D_o]  raw dO rows (D_i and dW_vup read them) */
    float *ctx_hi, *ctx_lo, *ctx_part; /* [B_r, L] pass 2: ctx~ = sum_j P v, chunked */
    float *dwq_part; /* [D_q, L]    the current row chunk's dW_qlat partial */
    float *dwv_part; /* [L, D_o]    the current row chunk's dW_vup partial */
    float *dwq_lo;   /* [H, D_q, L] lo words of dW_qlat's pairs (hi: args.dw_qlat) */
    float *dwv_lo;   /* [H, L, D_o] lo words of dW_vup's pairs (hi: args.dw_vup) */
} ta_ref_bwd_ws;

/* One step's buffers (ws's tile fields) and the call's sums (ws's shared
 * fields), from a cursor (size mode when it has no base). REF carves both
 * once; the CPU backend carves the tiles once per thread. */
void ta_ref_bwd_carve_tiles(const ta_plan *plan, ta_ws_cursor *c, ta_ref_bwd_ws *ws);
void ta_ref_bwd_carve_shared(const ta_plan *plan, ta_ws_cursor *c, ta_ref_bwd_ws *ws);

/* The call's sums to zero (dconv_w, d_alpha's pair, dw_qlat and dw_vup with
 * their lo words and partials); before any step. */
void ta_ref_bwd_begin(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws);

/* Pass 1 for one (b, kv head, K tile) (st from ta_ref_step_k): dk and dv of
 * its keys, written; reads and writes only step buffers. */
void ta_ref_bwd_k_tile(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                       ta_ref_step *st);

/* Pass 2 for one (b, h, Q tile) (st from ta_ref_step_q): dq of its rows,
 * written, and its shares of the call's sums left in the step buffers
 * (dw_qtile, da_hi, dq~ in dq_acc and ctx~ in ctx_hi). Step buffers only. */
void ta_ref_bwd_q_tile_dq(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                          ta_ref_step *st);

/* Those shares into the call's sums; the same step's buffers as the
 * ta_ref_bwd_q_tile_dq just before, and the (b, h, Q tile) steps in ascending
 * order (b, then h, then Q tile): that order is the sums' specification. */
void ta_ref_bwd_q_tile_merge(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws,
                             const ta_ref_step *st);

/* After every step: d_alpha = its pair's hi word (band); accumulate with the conv:
 * dconv_w's lo words back into args.dconv_w_lo. */
void ta_ref_bwd_end(const ta_plan *plan, const ta_bwd_args *a, const ta_ref_bwd_ws *ws);

/* ---- ref/ta_ref_tile.c ---- */

/* dst [count, dim] = rows [first, first + count) of the [seq, dim] slice of src
 * (storage dtype) that starts at element `slice` with row stride `row_stride`,
 * widened to f32; rows outside [0, seq) are zero padding and never read. */
void ta_ref_load_rows(float *dst, const void *src, ta_dtype dt, int64_t slice, int64_t row_stride,
                      int32_t seq, int32_t first, int32_t count, int32_t dim);

/* The Q tile [rows_load, D] of step st under tiling t: ta_ref_load_rows of q,
 * then the history rows [-t->q_history, 0) it covers from q_hist (docs/mta.md
 * section 2a); rows above them stay zero padding. */
void ta_ref_load_q(const ta_plan *plan, const void *q, const void *q_hist, const ta_tiling *t,
                   float *dst, const ta_ref_step *st);

/* The Q tile of step st through the load stage of the fused projections
 * (latent_dim L > 0): ta_ref_load_q into raw [rows_load, D], then each row
 * projected by W_qlat[h] (w_qlat [H, D, L], h = st->ctx.head) into dst
 * [rows_load, L]: q~[l] = sum_d fmaf(q[d], W[d][l], acc) from +0, d
 * ascending. Without the projections ta_ref_load_q into dst (raw unused). */
void ta_ref_load_q_lat(const ta_plan *plan, const void *q, const void *q_hist, const float *w_qlat,
                       const ta_tiling *t, float *dst, float *raw, const ta_ref_step *st);

/* The rotary load stage (src/ta_rope_load.h) on a [count, D] tile whose rows
 * are tokens [first, first + count) of side TA_ROPE_SIDE_Q or _K of step st's
 * batch entry and kv head: each row inside its sequence (the q side: and
 * the forward's query history rows [-q_history, 0), by row 0's table row
 * - i: ta_rope_token_row) rotated in place; nothing without the stage. */
void ta_ref_rope_rows(const ta_plan *plan, float *tile, int side, const ta_ref_step *st,
                      int32_t first, int32_t count);

/* Its transpose on one f32 gradient row [D] of token r (dq_acc, dk_acc rows
 * before the final scale): the gradient with respect to the stored q or k. */
void ta_ref_rope_grad(const ta_plan *plan, float *row, int side, const ta_ref_step *st, int32_t r);

/* K tile [cols_load, D] and V tile [cols_load, D_v] of step st: the loaded
 * columns of kv head st->ctx.head_kv, zero padded outside [0, S_k), K rows
 * through the load stage (ta_ref_rope_rows). */
void ta_ref_load_kv(const ta_plan *plan, const void *k, const void *v, float *k_tile, float *v_tile,
                    const ta_ref_step *st);

/* Raw score tile of step st on its loaded region:
 *   S[r][j] = scale * dot(q_r, k_j, dim)   if ta_ref_visible(t, st, r, j)
 *           = 0                             otherwise (masked, or outside the sequence)
 * q_tile [rows_load, dim] (first row row_load_begin), k_tile [cols_load, dim]
 * (first column col_load_begin), s: a view covering the loaded region. */
void ta_ref_scores(const ta_ref_tile *s, const float *q_tile, const float *k_tile, int32_t dim,
                   float scale, const ta_tiling *t, const ta_ref_step *st);

/* ---- ref/ta_ref_conv.c (docs/mta.md, Specification) ---- */

/* Kernel of query head h, or w = NULL when the plan has no conv. */
ta_ref_conv ta_ref_conv_of(const ta_plan *plan, const float *conv_w, int32_t h);

/* Convolved scores on region g, visible entries only (others untouched):
 *   C[i][j] = sum_{a asc, b asc} fmaf(w[a][b], S[i-(c_q-1-a)][j+b-P], .) from +0 */
void ta_ref_conv_scores(const ta_ref_tile *c, const ta_ref_tile *s, const ta_ref_conv *cv,
                        const ta_tiling *t, const ta_ref_step *st, const ta_ref_region *g);

/* Raw-score gradient on region g (the transposed conv):
 *   dS[r][j] = sum_{a asc, b asc} fmaf(w[a][b], dC[r+(c_q-1-a)][j-(b-P)], .) from +0
 * for visible (r, j); 0 otherwise. */
void ta_ref_conv_grad(const ta_ref_tile *ds, const ta_ref_tile *dc, const ta_ref_conv *cv,
                      const ta_tiling *t, const ta_ref_step *st, const ta_ref_region *g);

/* dconv_w partial of one tile pair over region g, part [c_q, c_k] overwritten:
 *   part[a][b] = sum_{i asc, then j asc} fmaf(dC[i][j], S[i-(c_q-1-a)][j+b-P], .) from +0 */
void ta_ref_conv_dw_tile(float *part, const ta_ref_tile *dc, const ta_ref_tile *s,
                         const ta_ref_conv *cv, const ta_ref_region *g);

/* ---- ref/ta_ref_rband.c (docs/exactness.md section 13) ---- */

/* 1 if some effective (r, j) of step st lies in the band 0 <= p_r - j <= W. */
int ta_ref_rband_meets(const ta_plan *plan, const ta_ref_step *st);

/* kt [rows, L] = the k rows at the positions p_r = r + S_k - S_q of the
 * step's effective rows (kv head st->ctx.head_kv), widened. */
void ta_ref_rband_load_kt(const ta_plan *plan, const void *k, const ta_ref_step *st, float *kt);

/* The band on the score tile s of step st (effective region; S already
 * there): qt [cols, L] loaded with the q rows row(j) = j - (S_k - S_q) of the
 * step's columns (q_hist for rows < 0; projected by w_qlat with the fused
 * projections, raw [cols, D] their scratch), then for every visible (r, j) with
 * p_r - j <= W: T = scale * dot(qt_j, kt_r), s[r][j] = fmaf(alpha, T, s[r][j]),
 * and tt[r][j] = T when tt is not NULL (other entries untouched). */
void ta_ref_rband_scores(const ta_plan *plan, const void *q, const void *q_hist,
                         const float *w_qlat, float *raw, const ta_tiling *t, const ta_ref_step *st,
                         const float *kt, float *qt, const ta_ref_tile *s, const ta_ref_tile *tt);

#endif /* TA_REF_H */
