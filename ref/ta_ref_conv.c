/*
 * The MTA key-query convolution (pre-softmax) of the reference backend: the
 * forward conv of the raw scores, its transpose for the raw-score gradient,
 * and the per-tile-pair partial of the kernel gradient. docs/mta.md
 * (Specification) fixes every operation below; every backend reproduces it.
 *
 * Kernel w [c_q, c_k] of one query head, P = (c_k - 1) / 2:
 *
 *     C[i][j] = sum_{a=0}^{c_q-1} sum_{b=0}^{c_k-1} w[a][b] * S[i-(c_q-1-a)][j+b-P]
 *
 * S is the *masked* raw score tile: 0 wherever (row, column) is not visible
 * (ta_ref_scores), so a term contributes only if its own shifted pair is
 * visible. Every term is visited, masked ones included (fmaf(w, 0, acc) leaves
 * acc unchanged): no branch in the inner loops, the same sequence everywhere.
 */
#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"
#include "ta_math.h"
#include "ta_ref.h"

ta_ref_conv ta_ref_conv_of(const ta_plan *plan, const float *conv_w, int32_t h) {
    ta_ref_conv cv;
    const ta_problem *p = &plan->p;
    cv.c_q = p->conv_q;
    cv.c_k = p->conv_k;
    cv.half_k = p->conv_k > 0 ? (p->conv_k - 1) / 2 : 0;
    cv.w = plan->has_conv ? conv_w + (size_t)h * (size_t)p->conv_q * (size_t)p->conv_k : NULL;
    return cv;
}

/* One convolved score: acc = 0; a ascending, b ascending:
 * acc = fmaf(w[a][b], S[i-(c_q-1-a)][j+b-P], acc). Reads S rows i-(c_q-1) .. i,
 * columns j-P .. j+P (the forward halos). */
static float ta_ref_conv_at(const ta_ref_tile *s, const ta_ref_conv *cv, int32_t i, int32_t j) {
    float acc = 0.0f;
    int32_t a, b;
    for (a = 0; a < cv->c_q; ++a) {
        const float *w_row = cv->w + (size_t)a * (size_t)cv->c_k;                 /* [c_k] */
        const float *s_row = ta_ref_at(s, i - (cv->c_q - 1 - a), j - cv->half_k); /* [c_k] */
        for (b = 0; b < cv->c_k; ++b)
            acc = TA_FMAF(w_row[b], s_row[b], acc);
    }
    return acc;
}

void ta_ref_conv_scores(const ta_ref_tile *c, const ta_ref_tile *s, const ta_ref_conv *cv,
                        const ta_tiling *t, const ta_ref_step *st, const ta_ref_region *g) {
    int32_t i, j;
    for (i = g->row_begin; i < g->row_end; ++i)
        for (j = g->col_begin; j < g->col_end; ++j)
            if (ta_ref_visible(t, st, i, j)) *ta_ref_at(c, i, j) = ta_ref_conv_at(s, cv, i, j);
}

/*
 * In the forward, S[r][j'] entered C[i][j] with weight w[a][b] for
 * i = r + (c_q-1-a), j = j' - (b-P). So
 *     dS[r][j'] = sum_{a asc, b asc} fmaf(w[a][b], dC[r+(c_q-1-a)][j'-(b-P)], .)
 * which reads dC rows r .. r+(c_q-1) (descending as a ascends) and columns
 * j'+P .. j'-P (descending as b ascends). A masked raw score was the constant
 * 0, not a function of q and k: its gradient is 0.
 */
void ta_ref_conv_grad(const ta_ref_tile *ds, const ta_ref_tile *dc, const ta_ref_conv *cv,
                      const ta_tiling *t, const ta_ref_step *st, const ta_ref_region *g) {
    int32_t r, j, a, b;
    for (r = g->row_begin; r < g->row_end; ++r) {
        for (j = g->col_begin; j < g->col_end; ++j) {
            float acc = 0.0f;
            if (ta_ref_visible(t, st, r, j)) {
                for (a = 0; a < cv->c_q; ++a) {
                    const float *w_row = cv->w + (size_t)a * (size_t)cv->c_k; /* [c_k] */
                    /* dC row r+(c_q-1-a) at column j+P; b steps left from there */
                    const float *dc_at = ta_ref_at(dc, r + (cv->c_q - 1 - a), j + cv->half_k);
                    for (b = 0; b < cv->c_k; ++b)
                        acc = TA_FMAF(w_row[b], dc_at[-b], acc);
                }
            }
            *ta_ref_at(ds, r, j) = acc;
        }
    }
}

/*
 * C[i][j] = sum_{a,b} w[a][b] S[i-(c_q-1-a)][j+b-P], so dL/dw[a][b] =
 * sum_{i,j} dC[i][j] S[i-(c_q-1-a)][j+b-P]. One tile pair's share, over its
 * effective (i, j): i ascending, then j ascending, one accumulator per (a, b)
 * from +0 (the (a, b) accumulators are independent, so looping (i, j) outside
 * is the same sequence per accumulator).
 */
void ta_ref_conv_dw_tile(float *part, const ta_ref_tile *dc, const ta_ref_tile *s,
                         const ta_ref_conv *cv, const ta_ref_region *g) {
    const size_t n_w = (size_t)cv->c_q * (size_t)cv->c_k;
    size_t n;
    int32_t i, j, a, b;
    for (n = 0; n < n_w; ++n)
        part[n] = 0.0f;
    for (i = g->row_begin; i < g->row_end; ++i) {
        for (j = g->col_begin; j < g->col_end; ++j) {
            const float dc_ij = *ta_ref_at(dc, i, j);
            for (a = 0; a < cv->c_q; ++a) {
                /* part[a][.] [c_k] += dC[i][j] * S[i-(c_q-1-a)][j-P .. j+P] */
                float *part_row = part + (size_t)a * (size_t)cv->c_k;
                const float *s_row = ta_ref_at(s, i - (cv->c_q - 1 - a), j - cv->half_k);
                for (b = 0; b < cv->c_k; ++b)
                    part_row[b] = TA_FMAF(dc_ij, s_row[b], part_row[b]);
            }
        }
    }
}
