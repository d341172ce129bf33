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
 * batch entry and kv head: each row inside its sequence rotated in place;
 * nothing without the stage. */
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
