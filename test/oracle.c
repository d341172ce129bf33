/*
 * Float64 naive oracle (see oracle.h). Per (b, h), with full matrices:
 *
 *   forward                                    backward (L = sum <dO, o>)
 *   1. S[i,j] = scale <q_i, k_j>, raw mask     5. dP[i,j] = <dO_i, v_j>;  dV_j += P[i,j] dO_i
 *   2. C = T(S), transformed mask              6. dC[i,j] = P[i,j] (dP[i,j] - D_i)
 *   3. P = softmax_j over visible C, lse       7. dS = T^T(dC); dw += dC (x) S (conv)
 *   4. o_i = sum_j P[i,j] v_j                  8. dQ_i += scale sum_j dS[i,j] k_j,
 *                                                 dK_j += scale sum_i dS[i,j] q_i
 *
 * Plain doubles, libm exp/log: this is the mathematical definition, not the
 * library's arithmetic. In magnitude mode (sl->mag) the same pipeline runs
 * with every term replaced by its absolute value (oracle.h).
 */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ta_math.h"

/* Geometry of one (b, h) slice and its matrices. */
typedef struct ta_oracle_slice {
    const ta_problem *p;
    const ta_oracle_in *in;
    int mag; /* 1: magnitude mode */
    int32_t b, h, h_kv, key_len;
    double scale;
    size_t q0, k0;        /* first row of the slice in the [B,H,S_q] / [B,H_kv,S_k] grids */
    double *s;            /* [S_q, S_k] raw scores S, 0 where masked */
    double *s_mag;        /* [S_q, S_k] |scale| sum_d |q_id k_jd| */
    double *c;            /* [S_q, S_k] transformed scores C */
    double *c_mag;        /* [S_q, S_k] their magnitudes |C| (oracle.h) */
    double *pr;           /* [S_q, S_k] probabilities P (0 where masked) */
    double *dc;           /* [S_q, S_k] backward: dC, then dS */
    double *ds;           /* [S_q, S_k] backward scratch: dS = T^T(dC) */
    double *dw;           /* [c_q, c_k] backward: dconv_w[h] accumulates here, or NULL */
    double *lse_row;      /* [S_q] */
    unsigned char *vis_s; /* [S_q, S_k] raw-score mask (1 = visible) */
    unsigned char *vis_c; /* [S_q, S_k] softmax mask */
} ta_oracle_slice;

double ta_oracle_scale(const ta_problem *p) {
    const float s = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    return (double)s;
}

double *ta_oracle_widen(const void *buf, ta_dtype dt, size_t n) {
    double *out = (double *)malloc((n ? n : 1) * sizeof(double));
    size_t i;
    if (!out) return NULL;
    for (i = 0; i < n; ++i) {
        switch (dt) {
        case TA_F16: out[i] = (double)ta_f16_to_f32(((const uint16_t *)buf)[i]); break;
        case TA_BF16: out[i] = (double)ta_bf16_to_f32(((const uint16_t *)buf)[i]); break;
        case TA_F32: out[i] = (double)((const float *)buf)[i]; break;
        }
    }
    return out;
}

/* |x| in magnitude mode, x otherwise. */
static double ta_oracle_term(const ta_oracle_slice *sl, double x) { return sl->mag ? fabs(x) : x; }

/* docs/design.md 2: query row r sits at pos = r + S_k - S_q; causal sees j <= pos;
 * keys at or past key_len are masked; a window (TA_WINDOW) keeps
 * pos - window_left <= j <= pos + window_right, a negative bound being none. */
static int ta_oracle_visible(const ta_problem *p, int32_t key_len, int32_t r, int32_t j) {
    const int64_t pos = (int64_t)r + p->seq_k - p->seq_q;
    if (j >= key_len) return 0;
    if ((p->flags & TA_CAUSAL) && (int64_t)j > pos) return 0;
    if ((p->flags & TA_WINDOW) && p->window_left >= 0 && (int64_t)j < pos - p->window_left)
        return 0;
    if ((p->flags & TA_WINDOW) && p->window_right >= 0 && (int64_t)j > pos + p->window_right)
        return 0;
    return 1;
}

int ta_oracle_sees(const ta_problem *p, int32_t key_len, int32_t r, int32_t j) {
    return ta_oracle_visible(p, key_len, r, j);
}

/* Step 1: raw scores, their magnitudes and their mask. */
static void ta_oracle_scores(ta_oracle_slice *sl) {
    const ta_problem *p = sl->p;
    const int32_t d_qk = p->head_dim;
    int32_t i, j, d;
    for (i = 0; i < p->seq_q; ++i) {
        const double *q_row = sl->in->q + (sl->q0 + (size_t)i) * (size_t)d_qk;
        for (j = 0; j < p->seq_k; ++j) {
            const double *k_row = sl->in->k + (sl->k0 + (size_t)j) * (size_t)d_qk;
            const size_t ij = (size_t)i * (size_t)p->seq_k + (size_t)j;
            double dot = 0.0, dot_mag = 0.0;
            sl->vis_s[ij] = (unsigned char)ta_oracle_visible(p, sl->key_len, i, j);
            if (sl->vis_s[ij])
                for (d = 0; d < d_qk; ++d) {
                    dot += q_row[d] * k_row[d];
                    dot_mag += fabs(q_row[d] * k_row[d]);
                }
            sl->s[ij] = sl->scale * dot;
            sl->s_mag[ij] = fabs(sl->scale) * dot_mag;
        }
    }
}

static int ta_oracle_has_conv(const ta_problem *p) { return p->conv_q != 0 || p->conv_k != 0; }

/* x[r, j] of a [S_q, S_k] matrix, 0 outside it (the conv's zero padding). */
static double ta_oracle_at(const ta_problem *p, const double *x, int64_t r, int64_t j) {
    if (r < 0 || r >= p->seq_q || j < 0 || j >= p->seq_k) return 0.0;
    return x[(size_t)r * (size_t)p->seq_k + (size_t)j];
}

/* Step 2, MTA (docs/design.md 2): C[i,j] = sum_{a,b} w[a,b] S[i-(c_q-1-a), j+b-P] on
 * the visible (i, j), with S already 0 wherever its own (row, column) pair is
 * masked (step 1); |C| likewise from |w| and |S|. The softmax mask after the
 * conv is the same predicate at (i, j): causal and key length. */
static void ta_oracle_conv_fwd(ta_oracle_slice *sl) {
    const ta_problem *p = sl->p;
    const int32_t cq = p->conv_q, ck = p->conv_k, half = (ck - 1) / 2;
    const double *w = sl->in->conv_w + (size_t)sl->h * (size_t)cq * (size_t)ck;
    int32_t i, j, a, b;
    for (i = 0; i < p->seq_q; ++i)
        for (j = 0; j < p->seq_k; ++j) {
            const size_t ij = (size_t)i * (size_t)p->seq_k + (size_t)j;
            double acc = 0.0, acc_mag = 0.0;
            sl->vis_c[ij] = sl->vis_s[ij];
            if (sl->vis_c[ij])
                for (a = 0; a < cq; ++a)
                    for (b = 0; b < ck; ++b) {
                        const int64_t r = (int64_t)i - (cq - 1 - a), col = (int64_t)j + b - half;
                        const double w_ab = w[a * ck + b];
                        acc += w_ab * ta_oracle_at(p, sl->s, r, col);
                        acc_mag += fabs(w_ab) * ta_oracle_at(p, sl->s_mag, r, col);
                    }
            sl->c[ij] = acc;
            sl->c_mag[ij] = acc_mag;
        }
}

/* Step 2: C = T(S): the identity for plain SDPA, the MTA conv otherwise. */
static int ta_oracle_transform_fwd(ta_oracle_slice *sl) {
    const size_t n = (size_t)sl->p->seq_q * (size_t)sl->p->seq_k;
    if (ta_oracle_has_conv(sl->p)) {
        if (!sl->in->conv_w || sl->p->conv_q < 1 || sl->p->conv_k < 1 || sl->p->conv_k % 2 == 0)
            return -1;
        ta_oracle_conv_fwd(sl);
        return 0;
    }
    memcpy(sl->c, sl->s, n * sizeof(double));
    memcpy(sl->c_mag, sl->s_mag, n * sizeof(double));
    memcpy(sl->vis_c, sl->vis_s, n);
    return 0;
}

/* Step 7, MTA: the transpose of step 2. C[i,j] reads S[i-(c_q-1-a), j+b-P] with
 * weight w[a,b], so S[r,j] receives dC[r+(c_q-1-a), j-(b-P)] w[a,b]; only the
 * visible raw scores carry it on to q and k (a masked S is the constant 0). And
 * dw[a,b] = sum_{i,j} dC[i,j] S[i-(c_q-1-a), j+b-P]. dC is 0 wherever C is
 * masked (P = 0 there). Magnitude mode: |w|, dC_mag, |S| (oracle.h). */
static void ta_oracle_conv_bwd(ta_oracle_slice *sl) {
    const ta_problem *p = sl->p;
    const int32_t cq = p->conv_q, ck = p->conv_k, half = (ck - 1) / 2;
    const double *w = sl->in->conv_w + (size_t)sl->h * (size_t)cq * (size_t)ck;
    const double *s = sl->mag ? sl->s_mag : sl->s;
    int32_t r, j, a, b;
    for (r = 0; r < p->seq_q; ++r)
        for (j = 0; j < p->seq_k; ++j) {
            const size_t rj = (size_t)r * (size_t)p->seq_k + (size_t)j;
            double acc = 0.0;
            if (sl->vis_s[rj])
                for (a = 0; a < cq; ++a)
                    for (b = 0; b < ck; ++b)
                        acc += ta_oracle_term(sl, w[a * ck + b]) *
                               ta_oracle_at(p, sl->dc, (int64_t)r + (cq - 1 - a),
                                            (int64_t)j - (b - half));
            sl->ds[rj] = acc;
        }
    if (sl->dw)
        for (a = 0; a < cq; ++a)
            for (b = 0; b < ck; ++b) {
                double acc = 0.0;
                for (r = 0; r < p->seq_q; ++r)
                    for (j = 0; j < p->seq_k; ++j) {
                        const double g = sl->dc[(size_t)r * (size_t)p->seq_k + (size_t)j];
                        if (g != 0.0)
                            acc += g * ta_oracle_at(p, s, (int64_t)r - (cq - 1 - a),
                                                    (int64_t)j + b - half);
                    }
                sl->dw[a * ck + b] += acc;
            }
    memcpy(sl->dc, sl->ds, (size_t)p->seq_q * (size_t)p->seq_k * sizeof(double));
}

/* Step 7: dS = T^T(dC), in place in sl->dc (and dw with the conv). Identity for
 * plain SDPA. */
static int ta_oracle_transform_bwd(ta_oracle_slice *sl) {
    if (ta_oracle_has_conv(sl->p)) ta_oracle_conv_bwd(sl);
    return 0;
}

/* Step 3: P = softmax over the visible entries of each row of C; lse (in
 * magnitude mode: max_j |C|_ij + log sum, the size of lse's two terms). */
static void ta_oracle_softmax(ta_oracle_slice *sl) {
    const ta_problem *p = sl->p;
    int32_t i, j;
    for (i = 0; i < p->seq_q; ++i) {
        const size_t r0 = (size_t)i * (size_t)p->seq_k;
        double m = -(double)INFINITY, m_mag = 0.0, sum = 0.0;
        for (j = 0; j < p->seq_k; ++j) {
            if (!sl->vis_c[r0 + (size_t)j]) continue;
            if (sl->c[r0 + (size_t)j] > m) m = sl->c[r0 + (size_t)j];
            if (sl->c_mag[r0 + (size_t)j] > m_mag) m_mag = sl->c_mag[r0 + (size_t)j];
        }
        for (j = 0; j < p->seq_k; ++j) {
            const size_t ij = r0 + (size_t)j;
            sl->pr[ij] = sl->vis_c[ij] ? exp(sl->c[ij] - m) : 0.0;
            sum += sl->pr[ij];
        }
        for (j = 0; j < p->seq_k; ++j)
            if (sum > 0.0) sl->pr[r0 + (size_t)j] /= sum;
        if (sum <= 0.0)
            sl->lse_row[i] = sl->mag ? 0.0 : -(double)INFINITY;
        else
            sl->lse_row[i] = sl->mag ? m_mag + log(sum) : m + log(sum);
    }
}

static int ta_oracle_slice_alloc(ta_oracle_slice *sl, const ta_problem *p, const ta_oracle_in *in,
                                 int mag) {
    const size_t n = (size_t)p->seq_q * (size_t)p->seq_k;
    memset(sl, 0, sizeof *sl);
    sl->p = p;
    sl->in = in;
    sl->mag = mag;
    sl->scale = ta_oracle_scale(p);
    sl->s = (double *)malloc(n * sizeof(double));
    sl->s_mag = (double *)malloc(n * sizeof(double));
    sl->c = (double *)malloc(n * sizeof(double));
    sl->c_mag = (double *)malloc(n * sizeof(double));
    sl->pr = (double *)malloc(n * sizeof(double));
    sl->dc = (double *)malloc(n * sizeof(double));
    sl->ds = (double *)malloc(n * sizeof(double));
    sl->lse_row = (double *)malloc((size_t)p->seq_q * sizeof(double));
    sl->vis_s = (unsigned char *)malloc(n);
    sl->vis_c = (unsigned char *)malloc(n);
    return (sl->s && sl->s_mag && sl->c && sl->c_mag && sl->pr && sl->dc && sl->ds && sl->lse_row &&
            sl->vis_s && sl->vis_c)
               ? 0
               : -1;
}

static void ta_oracle_slice_free(ta_oracle_slice *sl) {
    free(sl->s);
    free(sl->s_mag);
    free(sl->c);
    free(sl->c_mag);
    free(sl->pr);
    free(sl->dc);
    free(sl->ds);
    free(sl->lse_row);
    free(sl->vis_s);
    free(sl->vis_c);
}

/* Steps 1-3 for (b, h). */
static int ta_oracle_slice_fwd(ta_oracle_slice *sl, int32_t b, int32_t h) {
    const ta_problem *p = sl->p;
    sl->b = b;
    sl->h = h;
    sl->h_kv = h / (p->heads_q / p->heads_kv);
    sl->key_len = sl->in->seqlens_k ? sl->in->seqlens_k[b] : p->seq_k;
    sl->q0 = ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q;
    sl->k0 = ((size_t)b * (size_t)p->heads_kv + (size_t)sl->h_kv) * (size_t)p->seq_k;
    ta_oracle_scores(sl);
    if (ta_oracle_transform_fwd(sl) != 0) return -1;
    ta_oracle_softmax(sl);
    return 0;
}

/* Step 4 for (b, h): o_i = sum_j P_ij v_j; lse copied out. Magnitude mode
 * (oracle.h): o_mag_i = sum_j P_ij (|v_j| + |C|_ij (|v_j| + |o_i|)). */
static void ta_oracle_output(const ta_oracle_slice *sl, double *o, double *lse) {
    const ta_problem *p = sl->p;
    const int32_t dv = p->head_dim_v;
    int32_t i, j, d;
    for (i = 0; i < p->seq_q; ++i) {
        double *o_row = o + (sl->q0 + (size_t)i) * (size_t)dv;
        const double *p_row = sl->pr + (size_t)i * (size_t)p->seq_k;
        const double *sm_row = sl->c_mag + (size_t)i * (size_t)p->seq_k;
        for (d = 0; d < dv; ++d) {
            double o_id = 0.0, mag = 0.0;
            for (j = 0; j < p->seq_k; ++j)
                if (p_row[j] != 0.0)
                    o_id += p_row[j] * sl->in->v[(sl->k0 + (size_t)j) * (size_t)dv + (size_t)d];
            for (j = 0; j < p->seq_k && sl->mag; ++j) {
                const double v_jd = fabs(sl->in->v[(sl->k0 + (size_t)j) * (size_t)dv + (size_t)d]);
                if (p_row[j] != 0.0) mag += p_row[j] * (v_jd + sm_row[j] * (v_jd + fabs(o_id)));
            }
            o_row[d] = sl->mag ? mag : o_id;
        }
        if (lse) lse[sl->q0 + (size_t)i] = sl->lse_row[i];
    }
}

static int ta_oracle_fwd_mode(const ta_problem *p, const ta_oracle_in *in, double *o, double *lse,
                              int mag) {
    ta_oracle_slice sl;
    int32_t b, h;
    int rc = ta_oracle_slice_alloc(&sl, p, in, mag);
    for (b = 0; b < p->batch && rc == 0; ++b)
        for (h = 0; h < p->heads_q && rc == 0; ++h)
            if ((rc = ta_oracle_slice_fwd(&sl, b, h)) == 0) ta_oracle_output(&sl, o, lse);
    ta_oracle_slice_free(&sl);
    return rc;
}

int ta_oracle_fwd(const ta_problem *p, const ta_oracle_in *in, double *o, double *lse) {
    return ta_oracle_fwd_mode(p, in, o, lse, 0);
}

int ta_oracle_fwd_mag(const ta_problem *p, const ta_oracle_in *in, double *o_mag, double *lse_mag) {
    return ta_oracle_fwd_mode(p, in, o_mag, lse_mag, 1);
}

/* P_ij, or in magnitude mode P_ij (1 + |C|_ij + lse_mag_i): the backward's
 * P = exp(C - lse) errs relatively by u times the size of the exponent. */
static double ta_oracle_prob_weight(const ta_oracle_slice *sl, int32_t i, int32_t j) {
    const size_t ij = (size_t)i * (size_t)sl->p->seq_k + (size_t)j;
    if (!sl->mag) return sl->pr[ij];
    return sl->pr[ij] * (1.0 + sl->c_mag[ij] + sl->lse_row[i]);
}

/* Steps 5-6 for (b, h): dv += P^T dO; dc = P (dP - D), with D_i exact
 * (sum_j P_ij dP_ij) or from the stored o. Magnitude mode: dc = P (|dP| + |D|). */
static void ta_oracle_softmax_bwd(const ta_oracle_slice *sl, double *dv) {
    const ta_problem *p = sl->p;
    const int32_t d_v = p->head_dim_v;
    int32_t i, j, d;
    for (i = 0; i < p->seq_q; ++i) {
        const double *do_row = sl->in->d_o + (sl->q0 + (size_t)i) * (size_t)d_v;
        double *dc_row = sl->dc + (size_t)i * (size_t)p->seq_k;
        const double *p_row = sl->pr + (size_t)i * (size_t)p->seq_k;
        double delta = 0.0;
        for (j = 0; j < p->seq_k; ++j) {
            const double *v_row = sl->in->v + (sl->k0 + (size_t)j) * (size_t)d_v;
            double *dv_row = dv + (sl->k0 + (size_t)j) * (size_t)d_v;
            const double w = ta_oracle_prob_weight(sl, i, j);
            double dp = 0.0;
            for (d = 0; d < d_v; ++d)
                dp += ta_oracle_term(sl, do_row[d] * v_row[d]);
            dc_row[j] = dp; /* dP for now */
            delta += p_row[j] * dp;
            for (d = 0; d < d_v; ++d)
                dv_row[d] += w * ta_oracle_term(sl, do_row[d]);
        }
        if (sl->in->o) { /* D_i from the stored output, as the library computes it */
            const double *o_row = sl->in->o + (sl->q0 + (size_t)i) * (size_t)d_v;
            delta = 0.0;
            for (d = 0; d < d_v; ++d)
                delta += ta_oracle_term(sl, do_row[d] * o_row[d]);
        }
        for (j = 0; j < p->seq_k; ++j)
            dc_row[j] = sl->mag ? ta_oracle_prob_weight(sl, i, j) * (dc_row[j] + delta)
                                : p_row[j] * (dc_row[j] - delta);
    }
}

/* Step 8: dq, dk from dS (only raw-visible entries carry gradient to q, k). */
static void ta_oracle_scores_bwd(const ta_oracle_slice *sl, double *dq, double *dk) {
    const ta_problem *p = sl->p;
    const int32_t d_qk = p->head_dim;
    int32_t i, j, d;
    for (i = 0; i < p->seq_q; ++i) {
        const double *q_row = sl->in->q + (sl->q0 + (size_t)i) * (size_t)d_qk;
        double *dq_row = dq + (sl->q0 + (size_t)i) * (size_t)d_qk;
        for (j = 0; j < p->seq_k; ++j) {
            const size_t ij = (size_t)i * (size_t)p->seq_k + (size_t)j;
            const double g = ta_oracle_term(sl, sl->scale) * sl->dc[ij];
            const double *k_row = sl->in->k + (sl->k0 + (size_t)j) * (size_t)d_qk;
            double *dk_row = dk + (sl->k0 + (size_t)j) * (size_t)d_qk;
            if (!sl->vis_s[ij]) continue;
            for (d = 0; d < d_qk; ++d) {
                dq_row[d] += g * ta_oracle_term(sl, k_row[d]);
                dk_row[d] += g * ta_oracle_term(sl, q_row[d]);
            }
        }
    }
}

static int ta_oracle_bwd_mode(const ta_problem *p, const ta_oracle_in *in, const ta_oracle_grads *g,
                              int mag) {
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const size_t n_w = ta_oracle_has_conv(p) ? (size_t)p->conv_q * (size_t)p->conv_k : 0;
    ta_oracle_slice sl;
    int32_t b, h;
    int rc = ta_oracle_slice_alloc(&sl, p, in, mag);
    memset(g->dq, 0, n_q * (size_t)p->head_dim * sizeof(double));
    memset(g->dk, 0, n_k * (size_t)p->head_dim * sizeof(double));
    memset(g->dv, 0, n_k * (size_t)p->head_dim_v * sizeof(double));
    if (g->dconv_w && n_w > 0) memset(g->dconv_w, 0, (size_t)p->heads_q * n_w * sizeof(double));
    for (b = 0; b < p->batch && rc == 0; ++b)
        for (h = 0; h < p->heads_q && rc == 0; ++h) {
            if ((rc = ta_oracle_slice_fwd(&sl, b, h)) != 0) break;
            sl.dw = g->dconv_w && n_w > 0 ? g->dconv_w + (size_t)h * n_w : NULL;
            ta_oracle_softmax_bwd(&sl, g->dv);
            if ((rc = ta_oracle_transform_bwd(&sl)) != 0) break;
            ta_oracle_scores_bwd(&sl, g->dq, g->dk);
        }
    ta_oracle_slice_free(&sl);
    return rc;
}

int ta_oracle_bwd_grads(const ta_problem *p, const ta_oracle_in *in, const ta_oracle_grads *g) {
    return ta_oracle_bwd_mode(p, in, g, 0);
}

int ta_oracle_bwd_grads_mag(const ta_problem *p, const ta_oracle_in *in, const ta_oracle_grads *g) {
    return ta_oracle_bwd_mode(p, in, g, 1);
}

int ta_oracle_bwd(const ta_problem *p, const ta_oracle_in *in, double *dq, double *dk, double *dv) {
    const ta_oracle_grads g = {dq, dk, dv, NULL};
    return ta_oracle_bwd_mode(p, in, &g, 0);
}

int ta_oracle_bwd_mag(const ta_problem *p, const ta_oracle_in *in, double *dq_mag, double *dk_mag,
                      double *dv_mag) {
    const ta_oracle_grads g = {dq_mag, dk_mag, dv_mag, NULL};
    return ta_oracle_bwd_mode(p, in, &g, 1);
}
