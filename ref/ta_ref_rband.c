/*
 * The reciprocal band's score stage (TA_SCORE_RBAND; docs/api.md, "Latent
 * attention and the reciprocal band"; docs/exactness.md section 13), shared by
 * the reference forward and backward so both see the same logits bit for bit.
 *
 * Query row r sits at position p_r = r + off (off = S_k - S_q); the query row
 * of key position j is row(j) = j - off (rows < 0: the history rows). For a
 * visible (r, j) with 0 <= p_r - j <= W:
 *
 *   T_rj = scale * dot(q~_row(j), k_(p_r))       (ta_ref_dot: fmaf, d ascending)
 *   l_rj = fmaf(alpha, T_rj, S_rj)                (one rounding)
 *
 * T_rj is bit for bit the plain score of query row row(j) and key p_r (the
 * same dot of the same rows), the upper triangle's S_ji. Only tile pairs that
 * meet the band compute the transposed block: its operands are the k rows at
 * the positions of the step's rows (kt, one load per Q tile) and the q rows
 * at the positions of its columns (qt, loaded per band tile).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"

int ta_ref_rband_meets(const ta_plan *plan, const ta_ref_step *st) {
    const int32_t off = plan->p.seq_k - plan->p.seq_q, w = plan->p.rband_width;
    const int32_t p_first = st->row_begin + off, p_last = st->row_begin + st->rows - 1 + off;
    const int32_t c_first = st->col_begin, c_last = st->col_begin + st->cols - 1;
    if (st->rows < 1 || st->cols < 1) return 0;
    /* some column in [p_r - W, p_r] of some row: [c_first, c_last] meets [p_first - W, p_last] */
    return c_first <= p_last && (int64_t)c_last >= (int64_t)p_first - w;
}

void ta_ref_rband_load_kt(const ta_plan *plan, const void *k, const ta_ref_step *st, float *kt) {
    const ta_problem *p = &plan->p;
    ta_ref_load_rows(kt, k, p->dtype, st->ctx.k, plan->layout.k.seq, p->seq_k,
                     st->row_begin + p->seq_k - p->seq_q, st->rows, plan->dim_k);
}

void ta_ref_rband_scores(const ta_plan *plan, const void *q, const void *q_hist,
                         const float *w_qlat, float *raw, const ta_tiling *t, const ta_ref_step *st,
                         const float *kt, float *qt, const ta_ref_tile *s, const ta_ref_tile *tt) {
    const ta_problem *p = &plan->p;
    const int32_t off = p->seq_k - p->seq_q, w = p->rband_width, dim = plan->dim_k;
    const float alpha = p->rband_alpha;
    ta_ref_step qs = *st; /* the query rows at the columns' positions */
    int32_t r, j;
    qs.row_begin = qs.row_load_begin = st->col_begin - off;
    qs.rows = qs.rows_load = st->cols;
    ta_ref_load_q_lat(plan, q, q_hist, w_qlat, t, qt, raw, &qs); /* history rows too */
    for (r = st->row_begin; r < st->row_begin + st->rows; ++r) {
        const int32_t pr = r + off;
        const float *k_row = kt + ta_ref_off(st->row_begin, r, dim); /* [L] k_(p_r) */
        for (j = st->col_begin; j < st->col_begin + st->cols; ++j) {
            const float *q_row = qt + ta_ref_off(st->col_begin, j, dim); /* [L] q~_row(j) */
            float t_rj;
            if (!ta_ref_visible(t, st, r, j) || pr - j > w) continue;
            t_rj = p->scale * ta_ref_dot(q_row, k_row, dim);
            *ta_ref_at(s, r, j) = TA_FMAF(alpha, t_rj, *ta_ref_at(s, r, j));
            if (tt) *ta_ref_at(tt, r, j) = t_rj;
        }
    }
}
