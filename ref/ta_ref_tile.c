/*
 * Tile loading and the raw score tile, shared by the reference forward and
 * backward. The backward recomputes the forward's scores with exactly these
 * functions, so both passes see bit-identical S[r][j] (a function of the
 * absolute (r, j) only, whatever tile computes it).
 */
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"
#include "ta_rope_load.h"

/* ta_ref_load_rows with row r of the slice at its paged pool row (pages: the
 * batch entry's block table row; NULL = row r itself, ta_tile_kv_row). */
static void ta_ref_load_rows_paged(float *dst, const void *src, ta_dtype dt, int64_t slice,
                                   int64_t row_stride, const int32_t *pages, int32_t page_size,
                                   int32_t seq, int32_t first, int32_t count, int32_t dim) {
    int32_t r, d;
    for (r = first; r < first + count; ++r) {
        float *dst_row = dst + ta_ref_off(first, r, dim); /* [dim] */
        const int in_seq = r >= 0 && r < seq;
        const size_t src_first =
            in_seq ? (size_t)(slice + ta_tile_kv_row(pages, page_size, r) * row_stride) : 0;
        for (d = 0; d < dim; ++d)
            dst_row[d] = in_seq ? ta_load(src, dt, src_first + (size_t)d) : 0.0f;
    }
}

void ta_ref_load_rows(float *dst, const void *src, ta_dtype dt, int64_t slice, int64_t row_stride,
                      int32_t seq, int32_t first, int32_t count, int32_t dim) {
    ta_ref_load_rows_paged(dst, src, dt, slice, row_stride, NULL, 0, seq, first, count, dim);
}

void ta_ref_load_q(const ta_plan *plan, const void *q, const void *q_hist, const ta_tiling *t,
                   float *dst, const ta_ref_step *st) {
    const int32_t dim = plan->p.head_dim, first = st->row_load_begin;
    int32_t r, d;
    ta_ref_load_rows(dst, q, plan->p.dtype, st->ctx.q, plan->layout.q.seq, plan->p.seq_q, first,
                     st->rows_load, dim);
    /* the history rows [-q_history, 0) inside the loaded rows (zero above them;
     * zero too when their scores come from the score ring: ta_ref_fwd) */
    for (r = ta_tiling_max_i32(first, -t->q_history);
         !plan->ring_read && r < 0 && r < first + st->rows_load; ++r) {
        float *dst_row = dst + ta_ref_off(first, r, dim); /* [dim] */
        int in_hist;
        const size_t src_first = (size_t)ta_tile_q_row(t, &plan->layout, &st->ctx, r, &in_hist);
        for (d = 0; d < dim; ++d)
            dst_row[d] = ta_load(q_hist, plan->p.dtype, src_first + (size_t)d);
    }
}

void ta_ref_load_q_lat(const ta_plan *plan, const void *q, const void *q_hist, const float *w_qlat,
                       const ta_tiling *t, float *dst, float *raw, const ta_ref_step *st) {
    const int32_t dim = plan->p.head_dim, lat = plan->p.latent_dim;
    const float *w; /* [D, L] of query head st->ctx.head */
    int32_t r, l, d;
    if (lat == 0) {
        ta_ref_load_q(plan, q, q_hist, t, dst, st);
        return;
    }
    w = w_qlat + (size_t)st->ctx.head * (size_t)dim * (size_t)lat;
    ta_ref_load_q(plan, q, q_hist, t, raw, st);
    for (r = 0; r < st->rows_load; ++r) {
        const float *x = raw + (size_t)r * (size_t)dim; /* [D] */
        float *y = dst + (size_t)r * (size_t)lat;       /* [L] */
        for (l = 0; l < lat; ++l) {
            float acc = 0.0f;
            for (d = 0; d < dim; ++d)
                acc = TA_FMAF(x[d], w[(size_t)d * (size_t)lat + (size_t)l], acc);
            y[l] = acc;
        }
    }
}

void ta_ref_rope_rows(const ta_plan *plan, float *tile, int side, const ta_ref_step *st,
                      int32_t first, int32_t count) {
    const int32_t seq = side == TA_ROPE_SIDE_Q ? plan->p.seq_q : plan->p.seq_k;
    /* the q side's first row: the forward's query history rows turn too, by
     * row 0's table row - i (ta_rope_token_row) */
    const int32_t lo = side == TA_ROPE_SIDE_Q ? -plan->p.q_history : 0;
    const int32_t dim = plan->p.head_dim;
    int32_t r;
    if (plan->stages.load != TA_LOAD_ROPE) return;
    for (r = first; r < first + count; ++r)
        if (r >= lo && r < seq) /* zero padding stays zero */
            ta_rope_plan_row(plan, tile + ta_ref_off(first, r, dim), 1, side, st->ctx.batch,
                             st->ctx.head_kv, r, 0);
}

void ta_ref_rope_grad(const ta_plan *plan, float *row, int side, const ta_ref_step *st, int32_t r) {
    if (plan->stages.load == TA_LOAD_ROPE)
        ta_rope_plan_row(plan, row, 1, side, st->ctx.batch, st->ctx.head_kv, r, 1);
}

void ta_ref_load_kv(const ta_plan *plan, const void *k, const void *v, float *k_tile, float *v_tile,
                    const ta_ref_step *st) {
    const ta_problem *p = &plan->p;
    const ta_layout *lay = &plan->layout;
    const int32_t *pages = ta_plan_pages(plan, st->ctx.batch); /* paged KV, or NULL */
    ta_ref_load_rows_paged(k_tile, k, p->dtype, st->ctx.k, lay->k.seq, pages, p->kv_page_size,
                           p->seq_k, st->col_load_begin, st->cols_load, plan->dim_k);
    ta_ref_rope_rows(plan, k_tile, TA_ROPE_SIDE_K, st, st->col_load_begin, st->cols_load);
    ta_ref_load_rows_paged(v_tile, v, p->dtype, st->ctx.v, lay->v.seq, pages, p->kv_page_size,
                           p->seq_k, st->col_load_begin, st->cols_load, plan->dim_v);
}

void ta_ref_scores(const ta_ref_tile *s, const float *q_tile, const float *k_tile, int32_t dim,
                   float scale, const ta_tiling *t, const ta_ref_step *st) {
    const int32_t r_end = st->row_load_begin + st->rows_load;
    const int32_t j_end = st->col_load_begin + st->cols_load;
    int32_t r, j;
    for (r = st->row_load_begin; r < r_end; ++r) {
        const float *q_row = q_tile + ta_ref_off(st->row_load_begin, r, dim); /* [dim] */
        for (j = st->col_load_begin; j < j_end; ++j) {
            const float *k_row = k_tile + ta_ref_off(st->col_load_begin, j, dim); /* [dim] */
            *ta_ref_at(s, r, j) =
                ta_ref_visible(t, st, r, j) ? scale * ta_ref_dot(q_row, k_row, dim) : 0.0f;
        }
    }
}
