/*
 * Float64 oracle of the reciprocal band (see oracle_rband.h). Per (b, h), full
 * [S_q, S_k] matrices: logits and their magnitudes, probabilities, then the
 * output, and with a d_o the backward in the order of the header.
 */
#include "oracle_rband.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One (b, h) slice's matrices. */
typedef struct ta_rb_slice {
    const ta_rb_in *in;
    int32_t b, h, hk, n, m, off, dim, dv;
    double *l, *lm, *t, *tm, *pr; /* [n, m]: logits, |l|, T (band only), |T|, P */
    double *lse, *lse_mag, *d, *d_mag; /* [n] */
    unsigned char *vis, *band;         /* [n, m] */
} ta_rb_slice;

double ta_rb_scale_lat(const ta_problem *p) {
    const float s = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->latent_dim);
    return (double)s;
}

/* y [n, L] = rows of x [n, D] times w [D, L] (one head's), and y_mag = |x| |w|. */
static void ta_rb_project(const double *x, const double *w, size_t n, int32_t dim, int32_t lat,
                          double *y, double *y_mag) {
    size_t r;
    int32_t l, d;
    for (r = 0; r < n; ++r)
        for (l = 0; l < lat; ++l) {
            double acc = 0.0, mag = 0.0;
            for (d = 0; d < dim; ++d) {
                acc += x[r * (size_t)dim + (size_t)d] * w[(size_t)d * (size_t)lat + (size_t)l];
                mag += fabs(x[r * (size_t)dim + (size_t)d] * w[(size_t)d * (size_t)lat + (size_t)l]);
            }
            y[r * (size_t)lat + (size_t)l] = acc;
            y_mag[r * (size_t)lat + (size_t)l] = mag;
        }
}

/* The backward of ta_rb_oracle_lat: li is the latent problem's input (q~),
 * ctx~ and its magnitudes from the forward. */
static int ta_rb_lat_backward(const ta_rb_in *in, ta_rb_in *li, const double *w_qlat,
                              const double *w_vup, const double *qt, const double *qt_mag,
                              const double *ctx, const double *ctx_mag, const ta_rb_out *out) {
    const ta_problem *p = in->p;
    const int32_t lat = p->latent_dim, dim = p->head_dim, dv = p->head_dim_v;
    const size_t nq = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    double *buf = (double *)malloc((4 * nq * (size_t)lat + 2 * nq + 1) * sizeof(double));
    double *dctx, *dctx_mag, *g, *g_mag, *delta, *delta_mag;
    ta_rb_out lo;
    size_t i;
    int32_t l, e, d, rc;
    (void)qt_mag;
    if (!buf) return -1;
    dctx = buf, dctx_mag = dctx + nq * (size_t)lat, g = dctx_mag + nq * (size_t)lat;
    g_mag = g + nq * (size_t)lat, delta = g_mag + nq * (size_t)lat, delta_mag = delta + nq;
    for (i = 0; i < nq; ++i) { /* dctx~ = W_vup dO; D_i from the stored o */
        const size_t h = i / (size_t)p->seq_q % (size_t)p->heads_q;
        const double *w = w_vup + h * (size_t)lat * (size_t)dv, *dout = in->d_o + i * (size_t)dv;
        double acc = 0.0, mag = 0.0;
        for (l = 0; l < lat; ++l) {
            double x = 0.0, xm = 0.0;
            for (e = 0; e < dv; ++e) {
                x += w[(size_t)l * (size_t)dv + (size_t)e] * dout[e];
                xm += fabs(w[(size_t)l * (size_t)dv + (size_t)e] * dout[e]);
            }
            dctx[i * (size_t)lat + (size_t)l] = x;
            dctx_mag[i * (size_t)lat + (size_t)l] = xm;
        }
        for (e = 0; in->o && e < dv; ++e) {
            acc += dout[e] * in->o[i * (size_t)dv + (size_t)e];
            mag += fabs(dout[e] * in->o[i * (size_t)dv + (size_t)e]);
        }
        delta[i] = acc, delta_mag[i] = mag;
    }
    li->d_o = dctx, li->d_o_mag = dctx_mag;
    li->delta = in->o ? delta : NULL, li->delta_mag = in->o ? delta_mag : NULL;
    memset(&lo, 0, sizeof lo);
    lo.dq = g, lo.dq_mag = g_mag, lo.dk = out->dk, lo.dk_mag = out->dk_mag;
    lo.dv = out->dv, lo.dv_mag = out->dv_mag, lo.d_alpha = out->d_alpha;
    lo.d_alpha_mag = out->d_alpha_mag;
    rc = ta_rb_oracle(li, &lo);
    if (out->dw_qlat) memset(out->dw_qlat, 0, (size_t)p->heads_q * (size_t)dim * (size_t)lat * 8);
    if (out->dw_qlat_mag)
        memset(out->dw_qlat_mag, 0, (size_t)p->heads_q * (size_t)dim * (size_t)lat * 8);
    if (out->dw_vup) memset(out->dw_vup, 0, (size_t)p->heads_q * (size_t)lat * (size_t)dv * 8);
    if (out->dw_vup_mag) memset(out->dw_vup_mag, 0, (size_t)p->heads_q * (size_t)lat * (size_t)dv * 8);
    for (i = 0; rc == 0 && i < nq; ++i) {
        const size_t h = i / (size_t)p->seq_q % (size_t)p->heads_q;
        const double *wq = w_qlat + h * (size_t)dim * (size_t)lat;
        const double *gi = g + i * (size_t)lat, *gm = g_mag + i * (size_t)lat;
        const double *x = in->q + i * (size_t)dim, *dout = in->d_o + i * (size_t)dv;
        for (d = 0; d < dim; ++d) {
            double acc = 0.0, mag = 0.0;
            for (l = 0; l < lat; ++l) {
                const double w_dl = wq[(size_t)d * (size_t)lat + (size_t)l];
                const size_t at = (h * (size_t)dim + (size_t)d) * (size_t)lat + (size_t)l;
                acc += w_dl * gi[l];
                mag += fabs(w_dl) * (gm[l] + fabs(gi[l]));
                if (out->dw_qlat) out->dw_qlat[at] += x[d] * gi[l];
                if (out->dw_qlat_mag) out->dw_qlat_mag[at] += fabs(x[d]) * (gm[l] + fabs(gi[l]));
            }
            if (out->dq) out->dq[i * (size_t)dim + (size_t)d] = acc;
            if (out->dq_mag) out->dq_mag[i * (size_t)dim + (size_t)d] = mag;
        }
        for (l = 0; l < lat; ++l)
            for (e = 0; e < dv; ++e) {
                const size_t at = (h * (size_t)lat + (size_t)l) * (size_t)dv + (size_t)e;
                const double c = ctx[i * (size_t)lat + (size_t)l];
                if (out->dw_vup) out->dw_vup[at] += c * dout[e];
                if (out->dw_vup_mag)
                    out->dw_vup_mag[at] +=
                        (ctx_mag[i * (size_t)lat + (size_t)l] + fabs(c)) * fabs(dout[e]);
            }
    }
    (void)qt;
    free(buf);
    return rc;
}

int ta_rb_oracle_lat(const ta_rb_in *in, const double *w_qlat, const double *w_vup,
                     const ta_rb_out *out) {
    const ta_problem *p = in->p;
    const int32_t lat = p->latent_dim, dim = p->head_dim, dv = p->head_dim_v;
    const size_t n_bh = (size_t)p->batch * (size_t)p->heads_q;
    const size_t nq = n_bh * (size_t)p->seq_q, nh = n_bh * (size_t)p->q_history;
    ta_problem pl = *p;
    ta_rb_in li = *in;
    ta_rb_out lo;
    double *qt = (double *)malloc((2 * (nq + nh) * (size_t)lat + 2 * nq * (size_t)lat + 1) *
                                  sizeof(double));
    double *qt_mag, *ht, *ht_mag, *ctx, *ctx_mag;
    size_t bh, i;
    int32_t l, e, rc;
    if (!qt) return -1;
    qt_mag = qt + nq * (size_t)lat, ht = qt_mag + nq * (size_t)lat;
    ht_mag = ht + nh * (size_t)lat, ctx = ht_mag + nh * (size_t)lat;
    ctx_mag = ctx + nq * (size_t)lat;
    for (bh = 0; bh < n_bh; ++bh) {
        const double *w = w_qlat + (bh % (size_t)p->heads_q) * (size_t)dim * (size_t)lat;
        const size_t sq = (size_t)p->seq_q, sh = (size_t)p->q_history;
        ta_rb_project(in->q + bh * sq * (size_t)dim, w, sq, dim, lat, qt + bh * sq * (size_t)lat,
                      qt_mag + bh * sq * (size_t)lat);
        if (sh)
            ta_rb_project(in->q_hist + bh * sh * (size_t)dim, w, sh, dim, lat,
                          ht + bh * sh * (size_t)lat, ht_mag + bh * sh * (size_t)lat);
    }
    pl.head_dim = pl.head_dim_v = lat;
    pl.latent_dim = 0;
    li.p = &pl, li.q = qt, li.q_mag = qt_mag;
    li.q_hist = nh ? ht : NULL, li.q_hist_mag = nh ? ht_mag : NULL;
    li.o = NULL;
    memset(&lo, 0, sizeof lo);
    lo.o = ctx, lo.o_mag = ctx_mag, lo.lse = out->lse, lo.lse_mag = out->lse_mag;
    rc = ta_rb_oracle(&li, &lo);
    if (rc == 0 && (out->dq || out->dw_qlat || out->dw_vup || out->dk || out->dv || out->d_alpha))
        rc = ta_rb_lat_backward(in, &li, w_qlat, w_vup, qt, qt_mag, ctx, ctx_mag, out);
    for (i = 0; rc == 0 && i < nq; ++i) {
        const double *w = w_vup + (i / (size_t)p->seq_q % (size_t)p->heads_q) * (size_t)lat *
                                      (size_t)dv;
        for (e = 0; e < dv; ++e) {
            double acc = 0.0, mag = 0.0;
            for (l = 0; l < lat; ++l) {
                const double w_le = w[(size_t)l * (size_t)dv + (size_t)e];
                acc += ctx[i * (size_t)lat + (size_t)l] * w_le;
                mag += (ctx_mag[i * (size_t)lat + (size_t)l] +
                        fabs(ctx[i * (size_t)lat + (size_t)l])) * fabs(w_le);
            }
            if (out->o) out->o[i * (size_t)dv + (size_t)e] = acc;
            if (out->o_mag) out->o_mag[i * (size_t)dv + (size_t)e] = mag;
        }
    }
    free(qt);
    return rc;
}

double ta_rb_scale(const ta_problem *p) {
    const float s = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    return (double)s;
}

/* Latent query of row r of the slice, r in [-q_history, S_q) (mag: its
 * magnitude stand-in, or NULL when there is none). */
static const double *ta_rb_q_of(const ta_rb_slice *sl, int32_t r, int mag) {
    const ta_problem *p = sl->in->p;
    const size_t bh = (size_t)sl->b * (size_t)p->heads_q + (size_t)sl->h;
    const double *q = mag ? sl->in->q_mag : sl->in->q;
    const double *hist = mag ? sl->in->q_hist_mag : sl->in->q_hist;
    if (!q) return NULL;
    if (r >= 0) return q + (bh * (size_t)p->seq_q + (size_t)r) * (size_t)sl->dim;
    return hist + (bh * (size_t)p->q_history + (size_t)(r + p->q_history)) * (size_t)sl->dim;
}

static const double *ta_rb_q(const ta_rb_slice *sl, int32_t r) { return ta_rb_q_of(sl, r, 0); }

/* |q_r[d]| as a gradient's magnitude takes it: the query's own magnitude where
 * it has one (a latent query q~ = W^T q rounds with an error relative to sum
 * |W| |q|, not to |q~|), else |q_r[d]|. */
static double ta_rb_q_abs(const ta_rb_slice *sl, int32_t r, int32_t d) {
    const double *m = ta_rb_q_of(sl, r, 1);
    return m ? m[d] : fabs(ta_rb_q(sl, r)[d]);
}

static const double *ta_rb_k(const ta_rb_slice *sl, int32_t j) {
    const size_t bh = (size_t)sl->b * (size_t)sl->in->p->heads_kv + (size_t)sl->hk;
    return sl->in->k + (bh * (size_t)sl->m + (size_t)j) * (size_t)sl->dim;
}

static const double *ta_rb_v(const ta_rb_slice *sl, int32_t j) {
    const size_t bh = (size_t)sl->b * (size_t)sl->in->p->heads_kv + (size_t)sl->hk;
    return sl->in->v + (bh * (size_t)sl->m + (size_t)j) * (size_t)sl->dv;
}

/* Element offset of row i of a [B, H, S_q, w] tensor in this slice. */
static size_t ta_rb_qrow(const ta_rb_slice *sl, int32_t i, int32_t w) {
    const size_t bh = (size_t)sl->b * (size_t)sl->in->p->heads_q + (size_t)sl->h;
    return (bh * (size_t)sl->n + (size_t)i) * (size_t)w;
}

static size_t ta_rb_krow(const ta_rb_slice *sl, int32_t j, int32_t w) {
    const size_t bh = (size_t)sl->b * (size_t)sl->in->p->heads_kv + (size_t)sl->hk;
    return (bh * (size_t)sl->m + (size_t)j) * (size_t)w;
}

/* scale <a, b> and |scale| sum |a_mag b| (a_mag NULL: |a|) */
static void ta_rb_dot(const ta_rb_slice *sl, const double *a, const double *a_mag, const double *b,
                      double *x, double *x_mag) {
    double acc = 0.0, mag = 0.0;
    int32_t d;
    for (d = 0; d < sl->dim; ++d) {
        acc += a[d] * b[d];
        mag += (a_mag ? a_mag[d] : fabs(a[d])) * fabs(b[d]);
    }
    *x = sl->in->scale * acc;
    *x_mag = fabs(sl->in->scale) * mag;
}

/* Logits, softmax, output and the forward magnitudes of the slice. */
static void ta_rb_forward(ta_rb_slice *sl, const ta_rb_out *out) {
    const ta_rb_in *in = sl->in;
    const int32_t w = in->p->rband_width;
    const int causal = (in->p->flags & TA_CAUSAL) != 0, band = (in->p->flags & TA_RBAND) != 0;
    int32_t i, j, d;
    for (i = 0; i < sl->n; ++i) {
        const int32_t pi = i + sl->off;
        double mx = -(double)INFINITY, mx_mag = 0.0, sum = 0.0;
        double *o_row = NULL, *o_mag_row = NULL;
        for (j = 0; j < sl->m; ++j) {
            const size_t ij = (size_t)i * (size_t)sl->m + (size_t)j;
            double s, s_mag;
            sl->vis[ij] = (unsigned char)(!causal || j <= pi);
            sl->band[ij] = (unsigned char)(band && j <= pi && pi - j <= w);
            sl->t[ij] = sl->tm[ij] = sl->l[ij] = sl->lm[ij] = 0.0;
            if (!sl->vis[ij]) continue;
            ta_rb_dot(sl, ta_rb_q(sl, i), ta_rb_q_of(sl, i, 1), ta_rb_k(sl, j), &s, &s_mag);
            if (sl->band[ij])
                ta_rb_dot(sl, ta_rb_q(sl, j - sl->off), ta_rb_q_of(sl, j - sl->off, 1),
                          ta_rb_k(sl, pi), &sl->t[ij], &sl->tm[ij]);
            sl->l[ij] = s + in->alpha * sl->t[ij];
            sl->lm[ij] = s_mag + fabs(in->alpha) * sl->tm[ij];
            if (sl->l[ij] > mx) mx = sl->l[ij];
            if (sl->lm[ij] > mx_mag) mx_mag = sl->lm[ij];
        }
        for (j = 0; j < sl->m; ++j)
            if (sl->vis[(size_t)i * (size_t)sl->m + (size_t)j])
                sum += exp(sl->l[(size_t)i * (size_t)sl->m + (size_t)j] - mx);
        sl->lse[i] = mx + log(sum);
        sl->lse_mag[i] = mx_mag + log(sum);
        for (j = 0; j < sl->m; ++j) {
            const size_t ij = (size_t)i * (size_t)sl->m + (size_t)j;
            sl->pr[ij] = sl->vis[ij] ? exp(sl->l[ij] - sl->lse[i]) : 0.0;
        }
        if (out->lse) out->lse[ta_rb_qrow(sl, i, 1)] = sl->lse[i];
        if (out->lse_mag) out->lse_mag[ta_rb_qrow(sl, i, 1)] = sl->lse_mag[i];
        if (out->o) o_row = out->o + ta_rb_qrow(sl, i, sl->dv);
        if (out->o_mag) o_mag_row = out->o_mag + ta_rb_qrow(sl, i, sl->dv);
        for (d = 0; d < sl->dv; ++d) {
            double acc = 0.0, mag = 0.0;
            for (j = 0; j < sl->m; ++j) { /* P = 0 where masked */
                const double pij = sl->pr[(size_t)i * (size_t)sl->m + (size_t)j];
                acc += pij * ta_rb_v(sl, j)[d];
            }
            for (j = 0; j < sl->m; ++j) {
                const size_t ij = (size_t)i * (size_t)sl->m + (size_t)j;
                const double av = fabs(ta_rb_v(sl, j)[d]);
                mag += sl->pr[ij] * (av + sl->lm[ij] * (av + fabs(acc)));
            }
            if (o_row) o_row[d] = acc;
            if (o_mag_row) o_mag_row[d] = mag;
        }
    }
}

/* The backward of the slice (S_q = S_k): accumulates into out's gradients. */
static void ta_rb_backward(ta_rb_slice *sl, const ta_rb_out *out) {
    const ta_rb_in *in = sl->in;
    const double sc = in->scale, asc = fabs(in->scale), al = in->alpha;
    int32_t i, j, d;
    for (i = 0; i < sl->n; ++i) { /* D_i and |D|_i */
        const double *do_row = in->d_o + ta_rb_qrow(sl, i, sl->dv);
        double acc = 0.0, mag = 0.0;
        if (in->delta) {
            acc = in->delta[ta_rb_qrow(sl, i, 1)];
            mag = in->delta_mag[ta_rb_qrow(sl, i, 1)];
        } else if (in->o) {
            const double *o_row = in->o + ta_rb_qrow(sl, i, sl->dv);
            for (d = 0; d < sl->dv; ++d) {
                acc += do_row[d] * o_row[d];
                mag += fabs(do_row[d] * o_row[d]);
            }
        } else {
            for (j = 0; j < sl->m; ++j) {
                const double pij = sl->pr[(size_t)i * (size_t)sl->m + (size_t)j];
                double dp = 0.0, dp_mag = 0.0;
                for (d = 0; d < sl->dv; ++d) {
                    dp += do_row[d] * ta_rb_v(sl, j)[d];
                    dp_mag += fabs(do_row[d] * ta_rb_v(sl, j)[d]);
                }
                acc += pij * dp;
                mag += pij * dp_mag;
            }
        }
        sl->d[i] = acc;
        sl->d_mag[i] = mag;
    }
    for (i = 0; i < sl->n; ++i) {
        const double *do_row = in->d_o + ta_rb_qrow(sl, i, sl->dv);
        const double *dom = in->d_o_mag ? in->d_o_mag + ta_rb_qrow(sl, i, sl->dv) : NULL;
        for (j = 0; j < sl->m; ++j) {
            const size_t ij = (size_t)i * (size_t)sl->m + (size_t)j;
            const double pij = sl->pr[ij];
            const double wij = pij * (1.0 + sl->lm[ij] + sl->lse_mag[i]);
            double dp = 0.0, dp_mag = 0.0, dl, dl_mag;
            if (!sl->vis[ij]) continue;
            for (d = 0; d < sl->dv; ++d) {
                dp += do_row[d] * ta_rb_v(sl, j)[d];
                const double ado = dom ? dom[d] : fabs(do_row[d]);
                dp_mag += ado * fabs(ta_rb_v(sl, j)[d]);
                if (out->dv) out->dv[ta_rb_krow(sl, j, sl->dv) + (size_t)d] += pij * do_row[d];
                if (out->dv_mag) out->dv_mag[ta_rb_krow(sl, j, sl->dv) + (size_t)d] += wij * ado;
            }
            dl = pij * (dp - sl->d[i]);
            dl_mag = wij * (dp_mag + sl->d_mag[i]);
            for (d = 0; d < sl->dim; ++d) {
                const size_t qi = ta_rb_qrow(sl, i, sl->dim) + (size_t)d;
                const size_t kj = ta_rb_krow(sl, j, sl->dim) + (size_t)d;
                if (out->dq) out->dq[qi] += sc * dl * ta_rb_k(sl, j)[d];
                if (out->dk) out->dk[kj] += sc * dl * ta_rb_q(sl, i)[d];
                if (out->dq_mag) out->dq_mag[qi] += asc * dl_mag * fabs(ta_rb_k(sl, j)[d]);
                if (out->dk_mag) out->dk_mag[kj] += asc * dl_mag * ta_rb_q_abs(sl, i, d);
            }
            if (!sl->band[ij]) continue;
            /* T_ij = scale <q_j, k_i> (S_q = S_k: row(j) = j, p_i = i) */
            for (d = 0; d < sl->dim; ++d) {
                const size_t qj = ta_rb_qrow(sl, j, sl->dim) + (size_t)d;
                const size_t ki = ta_rb_krow(sl, i, sl->dim) + (size_t)d;
                if (out->dq) out->dq[qj] += al * sc * dl * ta_rb_k(sl, i)[d];
                if (out->dk) out->dk[ki] += al * sc * dl * ta_rb_q(sl, j)[d];
                if (out->dq_mag)
                    out->dq_mag[qj] += fabs(al) * asc * dl_mag * fabs(ta_rb_k(sl, i)[d]);
                if (out->dk_mag)
                    out->dk_mag[ki] += fabs(al) * asc * dl_mag * ta_rb_q_abs(sl, j, d);
            }
            if (out->d_alpha) *out->d_alpha += dl * sl->t[ij];
            if (out->d_alpha_mag) *out->d_alpha_mag += dl_mag * sl->tm[ij] + fabs(dl * sl->t[ij]);
        }
    }
}

int ta_rb_oracle(const ta_rb_in *in, const ta_rb_out *out) {
    const ta_problem *p = in->p;
    const size_t n = (size_t)p->seq_q, m = (size_t)p->seq_k;
    const int bwd = out->dq || out->dk || out->dv || out->d_alpha || out->dq_mag ||
                    out->dk_mag || out->dv_mag || out->d_alpha_mag;
    const size_t nq = (size_t)p->batch * (size_t)p->heads_q * n * (size_t)p->head_dim;
    const size_t nk = (size_t)p->batch * (size_t)p->heads_kv * m * (size_t)p->head_dim;
    const size_t nv = (size_t)p->batch * (size_t)p->heads_kv * m * (size_t)p->head_dim_v;
    ta_rb_slice sl;
    int32_t b, h;
    if (bwd && n != m) return -1;
    memset(&sl, 0, sizeof sl);
    sl.in = in, sl.n = p->seq_q, sl.m = p->seq_k, sl.off = p->seq_k - p->seq_q;
    sl.dim = p->head_dim, sl.dv = p->head_dim_v;
    sl.l = (double *)malloc(5 * n * m * sizeof(double));
    sl.lse = (double *)malloc(4 * n * sizeof(double));
    sl.vis = (unsigned char *)malloc(2 * n * m);
    if (!sl.l || !sl.lse || !sl.vis) {
        free(sl.l), free(sl.lse), free(sl.vis);
        return -1;
    }
    sl.lm = sl.l + n * m, sl.t = sl.lm + n * m, sl.tm = sl.t + n * m, sl.pr = sl.tm + n * m;
    sl.lse_mag = sl.lse + n, sl.d = sl.lse_mag + n, sl.d_mag = sl.d + n;
    sl.band = sl.vis + n * m;
    {
        double *const zero_q[2] = {out->dq, out->dq_mag}, *const zero_k[2] = {out->dk, out->dk_mag};
        double *const zero_v[2] = {out->dv, out->dv_mag};
        int z;
        for (z = 0; z < 2; ++z) {
            if (zero_q[z]) memset(zero_q[z], 0, nq * sizeof(double));
            if (zero_k[z]) memset(zero_k[z], 0, nk * sizeof(double));
            if (zero_v[z]) memset(zero_v[z], 0, nv * sizeof(double));
        }
        if (out->d_alpha) *out->d_alpha = 0.0;
        if (out->d_alpha_mag) *out->d_alpha_mag = 0.0;
    }
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h) {
            sl.b = b, sl.h = h, sl.hk = h / (p->heads_q / p->heads_kv);
            ta_rb_forward(&sl, out);
            if (bwd) ta_rb_backward(&sl, out);
        }
    free(sl.l), free(sl.lse), free(sl.vis);
    return 0;
}
