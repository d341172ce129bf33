/*
 * Latent attention in fast mode on CUDA (issue 14; cuda/ta_cuda_fast_latent.cu,
 * cuda/ta_cuda_latent.cu; docs/exactness.md section 9, "Latent attention in
 * fast mode"), label cuda:
 *
 *  1. without a GPU: the size queries of fast-mode f16 / bf16 latent problems
 *     (L = 64, 96, 128) exceed exact mode's by the fast regions; f32 and
 *     other widths (the exact kernels) ask the same in both precisions.
 *  2. on a device, random problems (fresh seed, printed; replay with
 *     TA_SEED=...): the band, the projections or both; f16 / bf16; L 64, 96
 *     or 128; one kv head or GQA-like; S up to 300, W from 0 to past S, alpha 0,
 *     negative or random; decode-like forwards (history rows); the
 *     projections alone causal or not, with windows and key lengths; [B, S,
 *     H, D] strides for a quarter. Forward o, lse and (S_q = S_k) backward
 *     dq, dk, dv, d_alpha, dw_qlat, dw_vup against the float64 oracle
 *     (test/oracle_rband.h): |x - oracle| - slack <= bound u magnitude, u the
 *     storage type's unit roundoff; each call run twice, bit-identical
 *     (deterministic). Outputs poisoned (0xFF) first.
 *  3. a k whose rows are not on 16 bytes: the exact kernels run (equal to
 *     exact mode's bytes).
 *
 *   test_cuda_fast_latent [--count N]      (N problems, default 60)
 *
 * Without a CUDA device: part 1, then "no CUDA device: skipped", exit 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle.h"
#include "oracle_rband.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

/* Bounds in units of the storage type's u (docs/exactness.md section 9,
 * "Latent attention in fast mode"): q~, p, dl and the keys below the band's
 * o are rounded to the storage type before they are used again. Measured on
 * an H100 (40 problems, seed 1795528943181163930): worst o 1.0u, lse 0.30u,
 * dq 0.033u, dk 0.012u, dv 0.17u, d_alpha 7e-5u, dw_qlat 0.0012u, dw_vup
 * 0.035u of their magnitudes; the bounds keep 4x to 10x of room. */
#define FL_U(dt)     ((dt) == TA_BF16 ? 0x1p-8 : 0x1p-11)
#define FL_BOUND_O   4.0
#define FL_BOUND_LSE 2.0
#define FL_BOUND_G   2.0
/* Absolute slack: f16 results below its normal range round to steps of 2^-24 */
#define FL_SLACK(dt) ((dt) == TA_F16 ? 0x1p-24 : 1e-30)

enum { FL_O, FL_LSE, FL_DQ, FL_DK, FL_DV, FL_DA, FL_DWQ, FL_DWV, FL_N };
static const char *const fl_names[FL_N] = {"o",  "lse",     "dq",      "dk",
                                           "dv", "d_alpha", "dw_qlat", "dw_vup"};
static double g_worst[2][FL_N]; /* [bf16][quantity], units of u */
static int g_wild;              /* forwards with windows or key lengths (vs exact mode) */

static size_t zs(int32_t x) { return (size_t)x; }

typedef struct fl_case {
    ta_problem p;
    int strided;
    int32_t *seqlens;
    size_t nq, nh, nk, no, nl, nwq, nwv, eb;
    void *q, *hist, *k, *v, *d_o;       /* host */
    float *wq, *wv;                     /* host, NULL without projections */
    double *oq, *ohist, *ok, *ov, *odo, *owq, *owv;
    void *gq, *ghist, *gk, *gv, *gdo;   /* device */
    float *gwq, *gwv;
} fl_case;

static void *fl_dev(const void *src, size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes && src) CUDA_OK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    if (!src) CUDA_OK(cudaMemset(d, 0xFF, bytes ? bytes : 1));
    return d;
}

static void *fl_host(const void *d, size_t bytes) {
    void *h = ta_test_alloc(bytes ? bytes : 1);
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

static void *fl_tensor(ta_rng *r, ta_dtype dt, size_t n, double **wide) {
    void *x = ta_test_alloc((n ? n : 1) * ta_dtype_size(dt));
    ta_fill_uniform(r, x, dt, n, -1.0f, 1.0f);
    *wide = ta_oracle_widen(x, dt, n);
    return x;
}

static float *fl_weights(ta_rng *r, size_t n, float a, double **wide) {
    float *w = (float *)ta_test_alloc((n ? n : 1) * sizeof(float));
    size_t i;
    for (i = 0; i < n; ++i) w[i] = ta_rng_uniform(r, -a, a);
    *wide = ta_oracle_widen(w, TA_F32, n);
    return w;
}

/* kind: 0 the band, 1 the projections, 2 both; bwd: S_q = S_k */
static void fl_draw(ta_rng *r, fl_case *c, int kind, int bwd) {
    ta_problem *p = &c->p;
    const int band = kind != 1, proj = kind != 0;
    const int32_t lat = ta_rng_int(r, 0, 3) ? 64 : ta_rng_int(r, 0, 1) ? 96 : 128;
    const int32_t prefix = band && !bwd && ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 70) : 0;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 0, 2) ? 1 : 2;
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 4);
    p->seq_q = ta_rng_int(r, 0, 5) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 5, 300);
    p->seq_k = p->seq_q + prefix;
    p->dtype = ta_rng_int(r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->head_dim = p->head_dim_v = lat;
    p->flags = TA_CAUSAL;
    if (band) {
        const int32_t wk = ta_rng_int(r, 0, 3);
        p->flags |= TA_RBAND;
        p->rband_width = wk == 0   ? ta_rng_int(r, 0, 2)
                         : wk == 1 ? p->seq_k + ta_rng_int(r, 0, 3)
                                   : ta_rng_int(r, 0, p->seq_k < 150 ? p->seq_k : 150);
        p->rband_alpha = ta_rng_int(r, 0, 6) == 0 ? 0.0f : ta_rng_uniform(r, -1.5f, 1.5f);
        p->q_history = prefix < p->rband_width ? prefix : p->rband_width;
    }
    if (proj) {
        p->latent_dim = lat;
        p->head_dim = ta_rng_int(r, 0, 2) == 0 ? 64 : 8 * ta_rng_int(r, 2, 12);
        p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? 64 : 8 * ta_rng_int(r, 2, 12);
    }
    if (proj && !band) {
        if (ta_rng_int(r, 0, 1)) p->flags = 0;
        ta_test_random_window(r, p, 25);
        if (ta_rng_int(r, 0, 3) == 0) {
            int32_t b;
            c->seqlens = (int32_t *)ta_test_alloc(zs(p->batch) * sizeof(int32_t));
            for (b = 0; b < p->batch; ++b) c->seqlens[b] = ta_rng_int(r, 0, p->seq_k);
        }
    }
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.05f, 0.3f);
    c->strided = ta_rng_int(r, 0, 3) == 0;
    c->eb = ta_dtype_size(p->dtype);
    c->nq = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim);
    c->nh = zs(p->batch) * zs(p->heads_q) * zs(p->q_history) * zs(p->head_dim);
    c->nk = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k) * zs(lat);
    c->no = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim_v);
    c->nl = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q);
    c->q = fl_tensor(r, p->dtype, c->nq, &c->oq);
    c->hist = fl_tensor(r, p->dtype, c->nh, &c->ohist);
    c->k = fl_tensor(r, p->dtype, c->nk, &c->ok);
    c->v = fl_tensor(r, p->dtype, c->nk, &c->ov);
    c->d_o = fl_tensor(r, p->dtype, c->no, &c->odo);
    if (proj) {
        c->nwq = zs(p->heads_q) * zs(p->head_dim) * zs(lat);
        c->nwv = zs(p->heads_q) * zs(lat) * zs(p->head_dim_v);
        c->wq = fl_weights(r, c->nwq, 1.5f / sqrtf((float)p->head_dim), &c->owq);
        c->wv = fl_weights(r, c->nwv, 1.0f / sqrtf((float)lat), &c->owv);
    }
    c->gq = fl_dev(c->q, c->nq * c->eb), c->ghist = fl_dev(c->hist, c->nh * c->eb);
    c->gk = fl_dev(c->k, c->nk * c->eb), c->gv = fl_dev(c->v, c->nk * c->eb);
    c->gdo = fl_dev(c->d_o, c->no * c->eb);
    c->gwq = (float *)fl_dev(c->wq, c->nwq * sizeof(float));
    c->gwv = (float *)fl_dev(c->wv, c->nwv * sizeof(float));
}

static void fl_free(fl_case *c) {
    ta_test_free(c->q), ta_test_free(c->hist), ta_test_free(c->k), ta_test_free(c->v);
    ta_test_free(c->d_o), ta_test_free(c->wq), ta_test_free(c->wv), ta_test_free(c->seqlens);
    free(c->oq), free(c->ohist), free(c->ok), free(c->ov), free(c->odo), free(c->owq);
    free(c->owv);
    cudaFree(c->gq), cudaFree(c->ghist), cudaFree(c->gk), cudaFree(c->gv), cudaFree(c->gdo);
    cudaFree(c->gwq), cudaFree(c->gwv);
}

static void fl_describe(const fl_case *c, char *buf, size_t n) {
    const ta_problem *p = &c->p;
    snprintf(buf, n,
             "%s B %d H %d/%d S %d/%d D %d Dv %d L %d flags %u W %d alpha %g hist %d win %d/%d "
             "seqlens %s strided %d scale %g",
             p->dtype == TA_F16 ? "f16" : "bf16", p->batch, p->heads_q, p->heads_kv, p->seq_q,
             p->seq_k, p->head_dim, p->head_dim_v, p->latent_dim, p->flags, p->rband_width,
             (double)p->rband_alpha, p->q_history, p->window_left, p->window_right,
             c->seqlens ? "yes" : "no", c->strided, (double)p->scale);
}

static void fl_strides(const fl_case *c, ta_strides *q, ta_strides *kv, ta_strides *o) {
    const ta_problem *p = &c->p;
    const int32_t lat = p->latent_dim > 0 ? p->latent_dim : p->head_dim;
    memset(q, 0, sizeof *q), memset(kv, 0, sizeof *kv), memset(o, 0, sizeof *o);
    if (!c->strided) return;
    *q = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim);
    *kv = ta_test_strides_bshd(p->heads_kv, p->seq_k, lat);
    *o = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim_v);
}

/* Forward on the device into o, lse (poisoned first); k may be overridden. */
static ta_status fl_fwd(const fl_case *c, const ta_problem *p, const void *k, void *o, float *lse) {
    ta_fwd_args fa;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    fa.q = c->gq, fa.k = k ? k : c->gk, fa.v = c->gv, fa.q_hist = c->ghist;
    fa.o = o, fa.lse = lse, fa.seqlens_k = c->seqlens;
    fa.w_qlat = c->gwq, fa.w_vup = c->gwv;
    fl_strides(c, &fa.q_strides, &fa.k_strides, &fa.o_strides);
    fa.v_strides = fa.k_strides;
    CUDA_OK(cudaMemset(o, 0xFF, c->no * c->eb));
    CUDA_OK(cudaMemset(lse, 0xFF, c->nl * sizeof(float)));
    if ((st = ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &bytes)) != TA_OK) return st;
    ws = fl_dev(NULL, bytes);
    st = ta_fwd(p, TA_BACKEND_CUDA, &fa, ws, bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(ws);
    return st;
}

typedef struct fl_grads {
    void *dq, *dk, *dv;
    float *d_alpha, *dwq, *dwv;
} fl_grads;

static void fl_grads_alloc(const fl_case *c, fl_grads *g) {
    g->dq = fl_dev(NULL, c->nq * c->eb), g->dk = fl_dev(NULL, c->nk * c->eb);
    g->dv = fl_dev(NULL, c->nk * c->eb), g->d_alpha = (float *)fl_dev(NULL, sizeof(float));
    g->dwq = c->wq ? (float *)fl_dev(NULL, c->nwq * sizeof(float)) : NULL;
    g->dwv = c->wq ? (float *)fl_dev(NULL, c->nwv * sizeof(float)) : NULL;
}

static void fl_grads_free(fl_grads *g) {
    cudaFree(g->dq), cudaFree(g->dk), cudaFree(g->dv), cudaFree(g->d_alpha);
    cudaFree(g->dwq), cudaFree(g->dwv);
}

static ta_status fl_bwd(const fl_case *c, const void *o, const float *lse, const fl_grads *g) {
    ta_bwd_args ba;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    memset(&ba, 0, sizeof ba);
    ba.q = c->gq, ba.k = c->gk, ba.v = c->gv, ba.o = o, ba.lse = lse, ba.d_o = c->gdo;
    ba.seqlens_k = c->seqlens;
    ba.dq = g->dq, ba.dk = g->dk, ba.dv = g->dv, ba.d_alpha = g->d_alpha;
    ba.w_qlat = c->gwq, ba.w_vup = c->gwv, ba.dw_qlat = g->dwq, ba.dw_vup = g->dwv;
    fl_strides(c, &ba.q_strides, &ba.k_strides, &ba.o_strides);
    ba.v_strides = ba.dk_strides = ba.dv_strides = ba.k_strides;
    ba.d_o_strides = ba.o_strides, ba.dq_strides = ba.q_strides;
    if ((st = ta_bwd_workspace_size(&c->p, TA_BACKEND_CUDA, &bytes)) != TA_OK) return st;
    ws = fl_dev(NULL, bytes);
    st = ta_bwd(&c->p, TA_BACKEND_CUDA, &ba, ws, bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(ws);
    return st;
}

static double *fl_d(size_t n) { return (double *)calloc(n ? n : 1, sizeof(double)); }

/* Element i of a [B, H, S, D] array as it sits in [B, S, H, D] order (the
 * strided problems' layout of q, k, v, o, dO, dq, dk, dv). */
static size_t fl_bshd(size_t i, int32_t heads, int32_t seq, int32_t dim) {
    const size_t d = i % zs(dim), s = i / zs(dim) % zs(seq), h = i / zs(dim) / zs(seq) % zs(heads);
    const size_t b = i / zs(dim) / zs(seq) / zs(heads);
    return ((b * zs(seq) + s) * zs(heads) + h) * zs(dim) + d;
}

/* A [B, S, H, D] array re-ordered to [B, H, S, D] in place (the oracle's). */
static void fl_to_bhsd(double *x, size_t n, int32_t heads, int32_t seq, int32_t dim) {
    double *t = fl_d(n);
    size_t i;
    for (i = 0; i < n; ++i) t[i] = x[fl_bshd(i, heads, seq, dim)];
    memcpy(x, t, n * sizeof(double));
    free(t);
}

/* Device result `dev` (dtype dt, n elements) against the oracle: the count of
 * elements out of bound (first three reported); the worst error kept. */
static size_t fl_compare(const fl_case *c, int what, const void *dev, ta_dtype dt, size_t n,
                         const double *orc, const double *mag, const char *desc) {
    /* the strided tensors' [B, S, H, dim] order, their heads and width */
    const ta_problem *p = &c->p;
    const int32_t lat = p->latent_dim > 0 ? p->latent_dim : p->head_dim;
    const int bshd = c->strided && (what == FL_O || what == FL_DQ || what == FL_DK || what == FL_DV);
    const int32_t heads = what == FL_DK || what == FL_DV ? p->heads_kv : p->heads_q;
    const int32_t seq = what == FL_DK || what == FL_DV ? p->seq_k : p->seq_q;
    const int32_t dim = what == FL_O ? p->head_dim_v : what == FL_DQ ? p->head_dim : lat;
    const double u = FL_U(c->p.dtype);
    const double bound = what == FL_O ? FL_BOUND_O : what == FL_LSE ? FL_BOUND_LSE : FL_BOUND_G;
    const int ti = c->p.dtype == TA_BF16;
    void *x = fl_host(dev, n * ta_dtype_size(dt));
    size_t i, bad = 0;
    for (i = 0; i < n; ++i) {
        const double xi = ta_get(x, dt, bshd ? fl_bshd(i, heads, seq, dim) : i);
        double e;
        if (mag[i] == 0.0) {
            if (!(xi == orc[i] || (what == FL_LSE && xi == -HUGE_VAL && orc[i] == -HUGE_VAL)) &&
                bad++ < 3)
                TA_CHECK(0, "%s: %s[%zu] = %g, want %g (no visible pair)", desc, fl_names[what], i,
                         xi, orc[i]);
            continue;
        }
        e = fabs(xi - orc[i]) - FL_SLACK(dt);
        e = (e < 0.0 ? 0.0 : e) / mag[i] / u;
        if (!(e <= bound) && bad++ < 3)
            TA_CHECK(0, "%s: %s[%zu] = %.8g, oracle %.8g, error %.3g u of %g", desc, fl_names[what],
                     i, xi, orc[i], e, mag[i]);
        if (e > g_worst[ti][what] || e != e) g_worst[ti][what] = e;
    }
    ta_test_free(x);
    return bad;
}

/* Device buffers a and b equal byte for byte. */
static int fl_same(const void *a, const void *b, size_t bytes) {
    void *x = fl_host(a, bytes), *y = fl_host(b, bytes);
    const int same = memcmp(x, y, bytes) == 0;
    ta_test_free(x), ta_test_free(y);
    return same;
}

/* Part 2, one problem. Returns 1 if it passed. */
static int fl_check(ta_rng *r, int t, int *n_bwd) {
    const int kind = t % 3, bwd = ta_rng_int(r, 0, 2) != 0;
    fl_case c;
    char desc[400];
    ta_rb_in in;
    ta_rb_out out;
    double *o, *o_mag, *lse, *lse_mag;
    void *go, *go2;
    float *glse, *glse2;
    size_t bad = 0;
    ta_status st;
    fl_draw(r, &c, kind, bwd);
    fl_describe(&c, desc, sizeof desc);
    if (c.strided) { /* the device reads the host buffers in [B, S, H, D] order */
        const int32_t lat = c.p.latent_dim > 0 ? c.p.latent_dim : c.p.head_dim;
        fl_to_bhsd(c.oq, c.nq, c.p.heads_q, c.p.seq_q, c.p.head_dim);
        fl_to_bhsd(c.ok, c.nk, c.p.heads_kv, c.p.seq_k, lat);
        fl_to_bhsd(c.ov, c.nk, c.p.heads_kv, c.p.seq_k, lat);
        fl_to_bhsd(c.odo, c.no, c.p.heads_q, c.p.seq_q, c.p.head_dim_v);
    }
    memset(&in, 0, sizeof in);
    in.p = &c.p;
    in.scale = c.p.latent_dim > 0 ? ta_rb_scale_lat(&c.p) : ta_rb_scale(&c.p);
    in.alpha = (double)c.p.rband_alpha;
    in.q = c.oq, in.q_hist = c.nh ? c.ohist : NULL, in.k = c.ok, in.v = c.ov, in.d_o = c.odo;
    o = fl_d(c.no), o_mag = fl_d(c.no), lse = fl_d(c.nl), lse_mag = fl_d(c.nl);
    memset(&out, 0, sizeof out);
    out.o = o, out.o_mag = o_mag, out.lse = lse, out.lse_mag = lse_mag;
    go = fl_dev(NULL, c.no * c.eb), go2 = fl_dev(NULL, c.no * c.eb);
    glse = (float *)fl_dev(NULL, c.nl * 4), glse2 = (float *)fl_dev(NULL, c.nl * 4);
    if (c.seqlens || (c.p.flags & TA_WINDOW)) {
        /* the oracle has no window or key length: exact mode's result instead */
        ta_problem exact = c.p;
        double *x;
        void *xh, *xl;
        exact.precision = TA_PRECISION_EXACT;
        st = fl_fwd(&c, &exact, NULL, go2, glse2);
        TA_CHECK(st == TA_OK, "exact forward: %s: %s", ta_status_string(st), desc);
        xh = fl_host(go2, c.no * c.eb);
        x = ta_oracle_widen(xh, c.p.dtype, c.no);
        ta_test_free(xh);
        if (c.strided) fl_to_bhsd(x, c.no, c.p.heads_q, c.p.seq_q, c.p.head_dim_v);
        xl = fl_host(glse2, c.nl * 4);
        for (size_t e = 0; e < c.no; ++e) o[e] = x[e], o_mag[e] = 1.0;
        for (size_t e = 0; e < c.nl; ++e)
            lse[e] = (double)((float *)xl)[e], lse_mag[e] = lse[e] == -HUGE_VAL ? 0.0 : 1.0 + fabs(lse[e]);
        free(x), ta_test_free(xl);
        ++g_wild;
    } else {
        TA_CHECK((c.p.latent_dim > 0 ? ta_rb_oracle_lat(&in, c.owq, c.owv, &out)
                                     : ta_rb_oracle(&in, &out)) == 0,
                 "oracle: %s", desc);
    }
    st = fl_fwd(&c, &c.p, NULL, go, glse);
    TA_CHECK(st == TA_OK, "forward: %s: %s", ta_status_string(st), desc);
    if (st == TA_OK) {
        bad += fl_compare(&c, FL_O, go, c.p.dtype, c.no, o, o_mag, desc);
        bad += fl_compare(&c, FL_LSE, glse, TA_F32, c.nl, lse, lse_mag, desc);
        TA_CHECK(fl_fwd(&c, &c.p, NULL, go2, glse2) == TA_OK, "second forward: %s", desc);
        if (!fl_same(go, go2, c.no * c.eb) || !fl_same(glse, glse2, c.nl * 4))
        {
            ++bad;
            TA_CHECK(0, "forward not deterministic: %s", desc);
        }
    }
    if (st == TA_OK && c.p.seq_q == c.p.seq_k && c.p.q_history == 0 && !c.seqlens &&
        !(c.p.flags & TA_WINDOW)) {
        double *g[FL_N], *gm[FL_N];
        fl_grads a, b;
        int i;
        for (i = 0; i < FL_N; ++i) g[i] = gm[i] = NULL;
        g[FL_DQ] = fl_d(c.nq), g[FL_DK] = fl_d(c.nk), g[FL_DV] = fl_d(c.nk), g[FL_DA] = fl_d(1);
        g[FL_DWQ] = fl_d(c.nwq), g[FL_DWV] = fl_d(c.nwv);
        for (i = FL_DQ; i < FL_N; ++i) gm[i] = fl_d(i == FL_DQ ? c.nq : c.nk > c.nwq ? c.nk : c.nwq);
        gm[FL_DWV] = fl_d(c.nwv), gm[FL_DA] = fl_d(1);
        memset(&out, 0, sizeof out);
        out.dq = g[FL_DQ], out.dk = g[FL_DK], out.dv = g[FL_DV], out.d_alpha = g[FL_DA];
        out.dq_mag = gm[FL_DQ], out.dk_mag = gm[FL_DK], out.dv_mag = gm[FL_DV];
        out.d_alpha_mag = gm[FL_DA];
        if (c.wq) {
            out.dw_qlat = g[FL_DWQ], out.dw_vup = g[FL_DWV];
            out.dw_qlat_mag = gm[FL_DWQ], out.dw_vup_mag = gm[FL_DWV];
        }
        TA_CHECK((c.p.latent_dim > 0 ? ta_rb_oracle_lat(&in, c.owq, c.owv, &out)
                                     : ta_rb_oracle(&in, &out)) == 0,
                 "oracle backward: %s", desc);
        fl_grads_alloc(&c, &a), fl_grads_alloc(&c, &b);
        st = fl_bwd(&c, go, glse, &a);
        TA_CHECK(st == TA_OK, "backward: %s: %s", ta_status_string(st), desc);
        if (st == TA_OK) {
            bad += fl_compare(&c, FL_DQ, a.dq, c.p.dtype, c.nq, g[FL_DQ], gm[FL_DQ], desc);
            bad += fl_compare(&c, FL_DK, a.dk, c.p.dtype, c.nk, g[FL_DK], gm[FL_DK], desc);
            bad += fl_compare(&c, FL_DV, a.dv, c.p.dtype, c.nk, g[FL_DV], gm[FL_DV], desc);
            if (c.p.flags & TA_RBAND)
                bad += fl_compare(&c, FL_DA, a.d_alpha, TA_F32, 1, g[FL_DA], gm[FL_DA], desc);
            if (c.wq) {
                bad += fl_compare(&c, FL_DWQ, a.dwq, TA_F32, c.nwq, g[FL_DWQ], gm[FL_DWQ], desc);
                bad += fl_compare(&c, FL_DWV, a.dwv, TA_F32, c.nwv, g[FL_DWV], gm[FL_DWV], desc);
            }
            TA_CHECK(fl_bwd(&c, go, glse, &b) == TA_OK, "second backward: %s", desc);
            if (!fl_same(a.dq, b.dq, c.nq * c.eb) || !fl_same(a.dk, b.dk, c.nk * c.eb) ||
                !fl_same(a.dv, b.dv, c.nk * c.eb) ||
                ((c.p.flags & TA_RBAND) && !fl_same(a.d_alpha, b.d_alpha, 4)) ||
                (c.wq && (!fl_same(a.dwq, b.dwq, c.nwq * 4) || !fl_same(a.dwv, b.dwv, c.nwv * 4))))
            {
                ++bad;
                TA_CHECK(0, "backward not deterministic: %s", desc);
            }
            ++*n_bwd;
        }
        fl_grads_free(&a), fl_grads_free(&b);
        for (i = 0; i < FL_N; ++i) free(g[i]), free(gm[i]);
    }
    if (st != TA_OK || bad) fprintf(stderr, "problem %d failed: %s\n", t, desc);
    free(o), free(o_mag), free(lse), free(lse_mag);
    cudaFree(go), cudaFree(go2), cudaFree(glse), cudaFree(glse2);
    fl_free(&c);
    return st == TA_OK && bad == 0;
}

/* Part 3: k rows off 16 bytes (the base one element past an aligned one):
 * fast mode runs the exact kernels, so its bytes equal exact mode's. */
static void fl_fallback(ta_rng *r) {
    int t, same = 0;
    for (t = 0; t < 4; ++t) {
        fl_case c;
        ta_problem exact;
        void *k1, *o1, *o2;
        float *l1, *l2;
        char desc[400];
        fl_draw(r, &c, t % 3, 0);
        fl_describe(&c, desc, sizeof desc);
        c.strided = 0;
        k1 = fl_dev(NULL, (c.nk + 1) * c.eb);
        CUDA_OK(cudaMemcpy((char *)k1 + c.eb, c.k, c.nk * c.eb, cudaMemcpyHostToDevice));
        o1 = fl_dev(NULL, c.no * c.eb), o2 = fl_dev(NULL, c.no * c.eb);
        l1 = (float *)fl_dev(NULL, c.nl * 4), l2 = (float *)fl_dev(NULL, c.nl * 4);
        exact = c.p;
        exact.precision = TA_PRECISION_EXACT;
        TA_CHECK(fl_fwd(&c, &c.p, (char *)k1 + c.eb, o1, l1) == TA_OK &&
                     fl_fwd(&c, &exact, (char *)k1 + c.eb, o2, l2) == TA_OK,
                 "fallback forwards: %s", desc);
        if (fl_same(o1, o2, c.no * c.eb) && fl_same(l1, l2, c.nl * 4))
            ++same;
        else
            TA_CHECK(0, "k off 16 bytes: fast != exact: %s", desc);
        cudaFree(k1), cudaFree(o1), cudaFree(o2), cudaFree(l1), cudaFree(l2);
        fl_free(&c);
    }
    printf("k rows off 16 bytes: %d of 4 fast forwards equal exact mode's bytes\n", same);
}

/* Part 1: size queries without a GPU. */
static void fl_sizes(void) {
    int dt, kind, lat;
    for (dt = 0; dt < 3; ++dt)
        for (kind = 0; kind < 3; ++kind)
            for (lat = 32; lat <= 128; lat *= 2) {
                ta_problem p;
                size_t fe = 0, ff = 0, be = 0, bf = 0;
                const int fast = dt != TA_F32 && lat >= 64;
                memset(&p, 0, sizeof p);
                p.batch = 2, p.heads_q = 4, p.heads_kv = 1, p.seq_q = p.seq_k = 200;
                p.head_dim = p.head_dim_v = lat, p.dtype = (ta_dtype)dt, p.flags = TA_CAUSAL;
                if (kind != 1) p.flags |= TA_RBAND, p.rband_alpha = 0.5f, p.rband_width = 8;
                if (kind != 0) p.latent_dim = lat, p.head_dim = 48;
                TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fe) == TA_OK &&
                             ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &be) == TA_OK,
                         "exact size queries (dtype %d, kind %d, L %d)", dt, kind, lat);
                p.precision = TA_PRECISION_FAST;
                TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &ff) == TA_OK &&
                             ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bf) == TA_OK,
                         "fast size queries (dtype %d, kind %d, L %d)", dt, kind, lat);
                TA_CHECK(fast ? ff > fe && bf > be : ff == fe && bf == be,
                         "dtype %d kind %d L %d: fwd %zu -> %zu, bwd %zu -> %zu bytes", dt, kind,
                         lat, fe, ff, be, bf);
            }
    printf("size queries on CUDA without a device: fast f16/bf16 L 64, 96, 128 add regions; f32 and "
           "L 32 ask exact mode's\n");
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_fast_latent");
    int dev_count = 0, i, count = 60, passed = 0, n_bwd = 0;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 0)
            count = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_cuda_fast_latent [--count N]\n");
            return 2;
        }
    }
    ta_rng_seed(&r, seed);
    fl_sizes();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0 ||
        !ta_backend_available(TA_BACKEND_CUDA)) {
        (void)cudaGetLastError();
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_fast_latent") : TA_TEST_SKIP;
    }
    for (i = 0; i < count; ++i) passed += fl_check(&r, i, &n_bwd);
    printf("%d of %d problems within bounds and deterministic (%d backwards; %d forwards with "
           "windows or key lengths against exact mode, the others against the oracle)\n",
           passed, count, n_bwd, g_wild);
    for (i = 0; i < 2; ++i) {
        int w;
        printf("worst error (units of u), %s:", i ? "bf16" : "f16");
        for (w = 0; w < FL_N; ++w) printf(" %s %.3g", fl_names[w], g_worst[i][w]);
        printf("\n");
    }
    fl_fallback(&r);
    return ta_test_finish("test_cuda_fast_latent");
}
