/*
 * Pieces shared by the reference forward and backward (ref/ta_ref_sdpa_*.c):
 * tensor indexing, tile loading (widening to f32), the dot product and the
 * score tile. The backward recomputes the forward's scores with exactly these
 * functions, so both passes see bit-identical s_ij.
 *
 * Scalar C11 only: no threads, no intrinsics, no libm beyond fmaf (TA_FMAF,
 * correctly rounded). Arithmetic order is the specification (docs/reference.md).
 */
#ifndef TA_REF_H
#define TA_REF_H

#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"

/* Entry points (ref/ta_ref_sdpa_fwd.c, ref/ta_ref_sdpa_bwd.c); the ops table
 * is in ref/ta_ref_ops.c. */
ta_status ta_ref_fwd_workspace_size(const ta_plan *plan, size_t *bytes);
ta_status ta_ref_bwd_workspace_size(const ta_plan *plan, size_t *bytes);
ta_status ta_ref_fwd(const ta_plan *plan, const ta_fwd_args *a, void *workspace, void *stream);
ta_status ta_ref_bwd(const ta_plan *plan, const ta_bwd_args *a, void *workspace, void *stream);

/* Where one step of a pass stands: which (batch, head) slice, which Q tile
 * (effective rows [row_begin, row_begin + rows)) and which K tile (effective
 * columns [col_begin, col_begin + cols)). Filled from the tiling descriptor. */
typedef struct ta_ref_step {
    int32_t batch, head, head_kv; /* head is the query head; head_kv = head / group */
    int32_t key_len;              /* seqlens_k[batch], or S_k */
    int32_t q_tile, row_begin, rows;
    int32_t k_tile, col_begin, cols;
} ta_ref_step;

/* Key length of a batch entry: keys at or past it are masked. */
static inline int32_t ta_ref_key_len(const ta_plan *plan, const int32_t *seqlens_k, int32_t b) {
    return seqlens_k ? seqlens_k[b] : plan->p.seq_k;
}

/* Row index of query row r of (b, h) in the [B, H, S_q] grid: times D for q,
 * times D_v for o / d_o, as is for lse. */
static inline size_t ta_ref_q_row(const ta_plan *plan, int32_t b, int32_t h, int32_t r) {
    const ta_problem *p = &plan->p;
    return ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)r;
}

/* Row index of key j of (b, h_kv) in the [B, H_kv, S_k] grid: times D for k,
 * times D_v for v. */
static inline size_t ta_ref_k_row(const ta_plan *plan, int32_t b, int32_t h_kv, int32_t j) {
    const ta_problem *p = &plan->p;
    return ((size_t)b * (size_t)p->heads_kv + (size_t)h_kv) * (size_t)p->seq_k + (size_t)j;
}

/* Set the Q-tile fields of st from tiling t (effective rows only: the halos
 * are 0 for plain SDPA). */
static inline void ta_ref_step_rows(const ta_tiling *t, ta_ref_step *st, int32_t qt) {
    st->q_tile = qt;
    st->row_begin = ta_tile_row_eff_begin(t, qt);
    st->rows = ta_tile_row_eff_end(t, qt) - st->row_begin;
}

/* Set the K-tile fields of st from tiling t (effective columns only). */
static inline void ta_ref_step_cols(const ta_tiling *t, ta_ref_step *st, int32_t kt) {
    st->k_tile = kt;
    st->col_begin = ta_tile_col_eff_begin(t, kt);
    st->cols = ta_tile_col_eff_end(t, kt) - st->col_begin;
}

/* 1 if tile entry (i, j) of step st is visible: the one masking predicate
 * (ta_tiling_visible) applied to absolute row and column. */
static inline int ta_ref_visible(const ta_tiling *t, const ta_ref_step *st, int32_t i, int32_t j) {
    return ta_tiling_visible(t, st->row_begin + i, st->col_begin + j, st->key_len);
}

/* dst[0 .. count) = src[first .. first + count) widened to f32 (exact). Rows
 * of a [S, dim] slice are contiguous, so a tile of rows is one range. */
static inline void ta_ref_widen(float *dst, const void *src, ta_dtype dt, size_t first,
                                size_t count) {
    size_t n;
    for (n = 0; n < count; ++n)
        dst[n] = ta_load(src, dt, first + n);
}

/* <a, b> over n features: one accumulator from +0, fmaf, d ascending. */
static inline float ta_ref_dot(const float *a, const float *b, int32_t n) {
    float acc = 0.0f;
    int32_t d;
    for (d = 0; d < n; ++d)
        acc = TA_FMAF(a[d], b[d], acc);
    return acc;
}

/*
 * Score tile of step st: s[i, j] = scale * <q_i, k_j> for every visible entry
 * (dot by ta_ref_dot, then one multiply by scale). Masked entries are not
 * computed; their slots are left as they are and never read (every reader
 * tests ta_ref_visible again).
 *   q_tile [rows, dim]   k_tile [cols, dim]   s [rows, ld_s]
 */
static inline void ta_ref_scores(float *s, int32_t ld_s, const float *q_tile, const float *k_tile,
                                 int32_t dim, float scale, const ta_tiling *t,
                                 const ta_ref_step *st) {
    int32_t i, j;
    for (i = 0; i < st->rows; ++i) {
        const float *q_row = q_tile + (size_t)i * (size_t)dim; /* [dim] */
        float *s_row = s + (size_t)i * (size_t)ld_s;           /* [cols] */
        for (j = 0; j < st->cols; ++j) {
            if (!ta_ref_visible(t, st, i, j)) continue;
            s_row[j] = scale * ta_ref_dot(q_row, k_tile + (size_t)j * (size_t)dim, dim);
        }
    }
}

/* Load the K tile [cols, D] and the V tile [cols, D_v] of step st, widened. */
static inline void ta_ref_load_kv(const ta_plan *plan, const void *k, const void *v, float *k_tile,
                                  float *v_tile, const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const size_t first = ta_ref_k_row(plan, st->batch, st->head_kv, st->col_begin);
    ta_ref_widen(k_tile, k, p->dtype, first * (size_t)p->head_dim,
                 (size_t)st->cols * (size_t)p->head_dim);
    ta_ref_widen(v_tile, v, p->dtype, first * (size_t)p->head_dim_v,
                 (size_t)st->cols * (size_t)p->head_dim_v);
}

#endif /* TA_REF_H */
