/*
 * Latent attention on CUDA (issue 14; docs/api.md, "Latent attention and the
 * reciprocal band"; cuda/ta_cuda_latent.cu), label cuda:
 *
 *  1. without a GPU: both passes' size queries on TA_BACKEND_CUDA for the
 *     band, the fused projections and both, every dtype; the forward's bytes
 *     grow with the band's width (its T) and the backward's with the
 *     projections (dctx~, dq~, ctx~).
 *  2. on a device, random problems (fresh seed, printed; replay with
 *     TA_SEED=...): the band, the projections or both; f32 / f16 / bf16;
 *     one kv head mostly, GQA-like heads too; S up to 300 (several 64-row
 *     chunks per head), W from 0 to past S, alpha 0, negative or random;
 *     decode-like forwards (S_q < S_k, the band's history rows); with the
 *     projections alone causal or not, sliding windows, key lengths; random
 *     scale and block sizes; q, k, v, o, dO, dq, dk, dv in [B, S, H, D]
 *     strides for a quarter; TA_PRECISION_FAST for a quarter of the f32
 *     problems and widths other than 64, 96 and 128 (which run the exact kernels
 *     in fast mode; test_cuda_fast_latent checks the fast kernels).
 *     Forward: CUDA's o and lse equal REF's bit for bit. Backward (S_q =
 *     S_k): from REF's o and lse, CUDA's dq, dk, dv, d_alpha, dw_qlat and
 *     dw_vup equal REF's bit for bit. Outputs poisoned first, differently on
 *     the host (ta_poison) and on the device (0xFF bytes: NaN), so an
 *     element CUDA does not write fails; the device workspace is poisoned
 *     too.
 *
 *   test_cuda_latent [--count N]      (N problems, default 60)
 *
 * Without a CUDA device: part 1, then "no CUDA device: skipped", exit 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

static size_t zs(int32_t x) { return (size_t)x; }

/* One problem, its host tensors and their device copies. */
typedef struct lt_case {
    ta_problem p;
    int strided;      /* [B, S, H, D] strides on every tensor */
    int32_t *seqlens; /* host memory, or NULL */
    size_t nq, nh, nk, nv, no, nl, nwq, nwv, eb;
    void *q, *hist, *k, *v, *d_o;
    float *wq, *wv; /* NULL without the projections */
    void *dq_, *dhist, *dk_, *dv_, *ddo;
    float *dwq, *dwv;
} lt_case;

static void *lt_dev_copy(const void *src, size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) CUDA_OK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void *lt_dev_poisoned(size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    CUDA_OK(cudaMemset(d, 0xFF, bytes ? bytes : 1));
    return d;
}

static void *lt_tensor(ta_rng *r, ta_dtype dt, size_t n) {
    void *x = ta_test_alloc((n ? n : 1) * ta_dtype_size(dt));
    ta_fill_uniform(r, x, dt, n, -1.0f, 1.0f);
    return x;
}

static float *lt_weights(ta_rng *r, size_t n, float a) {
    float *w = (float *)ta_test_alloc((n ? n : 1) * sizeof(float));
    size_t i;
    for (i = 0; i < n; ++i)
        w[i] = ta_rng_uniform(r, -a, a);
    return w;
}

/* kind: 0 the band, 1 the projections, 2 both. bwd: S_q = S_k. */
static void lt_draw(ta_rng *r, lt_case *c, int kind, int bwd) {
    ta_problem *p = &c->p;
    const int band = kind != 1, proj = kind != 0;
    const int32_t lat = ta_rng_int(r, 0, 2) == 0 ? 64 : ta_rng_int(r, 1, 96);
    const int32_t prefix = band && !bwd && ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 70) : 0;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 0, 2) ? 1 : ta_rng_int(r, 2, 3);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 4);
    p->seq_q = ta_rng_int(r, 0, 5) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 5, 300);
    p->seq_k = p->seq_q + prefix;
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    /* fast mode runs the exact kernels only for f32 and widths the fast
     * kernels lack (test_cuda_fast_latent checks the others) */
    p->precision = ta_rng_int(r, 0, 3) == 0 &&
                           (p->dtype == TA_F32 || (lat != 64 && lat != 96 && lat != 128))
                       ? TA_PRECISION_FAST
                       : TA_PRECISION_EXACT;
    p->head_dim = p->head_dim_v = lat;
    p->flags = TA_CAUSAL;
    if (band) {
        const int32_t wk = ta_rng_int(r, 0, 3);
        p->flags |= TA_RBAND;
        p->rband_width = wk == 0   ? ta_rng_int(r, 0, 2)
                         : wk == 1 ? p->seq_k + ta_rng_int(r, 0, 3)
                                   : ta_rng_int(r, 0, p->seq_k < 150 ? p->seq_k : 150);
        p->rband_alpha = ta_rng_int(r, 0, 6) == 0   ? 0.0f
                         : ta_rng_int(r, 0, 5) == 0 ? -ta_rng_uniform(r, 0.25f, 1.5f)
                                                    : ta_rng_uniform(r, -1.5f, 1.5f);
        p->q_history = prefix < p->rband_width ? prefix : p->rband_width;
    }
    if (proj) {
        p->latent_dim = lat;
        p->head_dim = ta_rng_int(r, 0, 3) == 0 ? 64 : ta_rng_int(r, 1, 96);
        p->head_dim_v = ta_rng_int(r, 0, 3) == 0 ? 64 : ta_rng_int(r, 1, 96);
    }
    if (proj && !band) { /* the projections alone: any mask */
        if (ta_rng_int(r, 0, 1)) p->flags = 0;
        ta_test_random_window(r, p, 25);
        if (ta_rng_int(r, 0, 3) == 0) {
            int32_t b;
            c->seqlens = (int32_t *)ta_test_alloc(zs(p->batch) * sizeof(int32_t));
            for (b = 0; b < p->batch; ++b)
                c->seqlens[b] = ta_rng_int(r, 0, p->seq_k);
        }
    }
    p->block_q = ta_rng_int(r, 0, 3) == 0 ? 0 : ta_rng_int(r, 8, 130);
    p->block_k = ta_rng_int(r, 0, 3) == 0 ? 0 : ta_rng_int(r, 8, 130);
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.05f, 0.6f);
    c->strided = ta_rng_int(r, 0, 3) == 0;
    c->eb = ta_dtype_size(p->dtype);
    c->nq = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim);
    c->nh = zs(p->batch) * zs(p->heads_q) * zs(p->q_history) * zs(p->head_dim);
    c->nk = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k) * zs(lat);
    c->nv = c->nk;
    c->no = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim_v);
    c->nl = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q);
    c->q = lt_tensor(r, p->dtype, c->nq);
    c->hist = lt_tensor(r, p->dtype, c->nh);
    c->k = lt_tensor(r, p->dtype, c->nk);
    c->v = lt_tensor(r, p->dtype, c->nv);
    c->d_o = lt_tensor(r, p->dtype, c->no);
    if (proj) {
        c->nwq = zs(p->heads_q) * zs(p->head_dim) * zs(lat);
        c->nwv = zs(p->heads_q) * zs(lat) * zs(p->head_dim_v);
        c->wq = lt_weights(r, c->nwq, 1.5f / (float)sqrt((double)p->head_dim));
        c->wv = lt_weights(r, c->nwv, 1.0f / (float)sqrt((double)lat));
    }
    c->dq_ = lt_dev_copy(c->q, c->nq * c->eb);
    c->dhist = lt_dev_copy(c->hist, c->nh * c->eb);
    c->dk_ = lt_dev_copy(c->k, c->nk * c->eb);
    c->dv_ = lt_dev_copy(c->v, c->nv * c->eb);
    c->ddo = lt_dev_copy(c->d_o, c->no * c->eb);
    c->dwq = (float *)lt_dev_copy(c->wq, c->nwq * sizeof(float));
    c->dwv = (float *)lt_dev_copy(c->wv, c->nwv * sizeof(float));
}

static void lt_free(lt_case *c) {
    ta_test_free(c->q), ta_test_free(c->hist), ta_test_free(c->k), ta_test_free(c->v);
    ta_test_free(c->d_o), ta_test_free(c->wq), ta_test_free(c->wv), ta_test_free(c->seqlens);
    cudaFree(c->dq_), cudaFree(c->dhist), cudaFree(c->dk_), cudaFree(c->dv_), cudaFree(c->ddo);
    cudaFree(c->dwq), cudaFree(c->dwv);
}

static void lt_describe(const lt_case *c, char *buf, size_t n) {
    const ta_problem *p = &c->p;
    snprintf(buf, n,
             "%s %s B %d H %d/%d S %d/%d D %d Dv %d L %d flags %u W %d alpha %g hist %d win %d/%d "
             "seqlens %s strided %d tiles %d x %d scale %g",
             p->dtype == TA_F32   ? "f32"
             : p->dtype == TA_F16 ? "f16"
                                  : "bf16",
             p->precision == TA_PRECISION_FAST ? "fast" : "exact", p->batch, p->heads_q,
             p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v, p->latent_dim, p->flags,
             p->rband_width, (double)p->rband_alpha, p->q_history, p->window_left, p->window_right,
             c->seqlens ? "yes" : "no", c->strided, p->block_q, p->block_k, (double)p->scale);
}

/* [B, S, H, dim] strides of every tensor (the feature dim contiguous, no gaps),
 * or all zero (contiguous). */
static void lt_strides(const lt_case *c, ta_strides *q, ta_strides *kv, ta_strides *o) {
    const ta_problem *p = &c->p;
    const int32_t lat = p->latent_dim > 0 ? p->latent_dim : p->head_dim;
    memset(q, 0, sizeof *q), memset(kv, 0, sizeof *kv), memset(o, 0, sizeof *o);
    if (!c->strided) return;
    *q = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim);
    *kv = ta_test_strides_bshd(p->heads_kv, p->seq_k, lat);
    *o = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim_v);
}

/* A poisoned workspace of `bytes` on the device (dev) or the host, and its release
 * (after the device finished). */
static void *lt_ws_take(int dev, size_t bytes) {
    void *ws;
    if (dev) return lt_dev_poisoned(bytes);
    ws = ta_test_alloc(bytes ? bytes : 1);
    ta_poison(ws, bytes);
    return ws;
}

static void lt_ws_drop(int dev, void *ws) {
    if (!dev) {
        ta_test_free(ws);
        return;
    }
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(ws);
}

/* The forward on be: tensors on the host (REF) or the device (CUDA). */
static ta_status lt_fwd(const lt_case *c, ta_backend be, void *o, float *lse) {
    const int dev = be == TA_BACKEND_CUDA;
    ta_fwd_args fa;
    size_t bytes = 0;
    void *ws = NULL;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    fa.q = dev ? c->dq_ : c->q, fa.k = dev ? c->dk_ : c->k, fa.v = dev ? c->dv_ : c->v;
    fa.q_hist = dev ? c->dhist : c->hist;
    fa.o = o, fa.lse = lse, fa.seqlens_k = c->seqlens;
    fa.w_qlat = dev ? c->dwq : c->wq, fa.w_vup = dev ? c->dwv : c->wv;
    lt_strides(c, &fa.q_strides, &fa.k_strides, &fa.o_strides);
    fa.v_strides = fa.k_strides;
    if ((st = ta_fwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = lt_ws_take(dev, bytes);
    st = ta_fwd(&c->p, be, &fa, ws, bytes, NULL);
    lt_ws_drop(dev, ws);
    return st;
}

typedef struct lt_grads {
    void *dq, *dk, *dv;
    float *dwq, *dwv, *d_alpha;
} lt_grads;

static ta_status lt_bwd(const lt_case *c, ta_backend be, const void *o, const float *lse,
                        const lt_grads *g) {
    const int dev = be == TA_BACKEND_CUDA;
    ta_bwd_args ba;
    size_t bytes = 0;
    void *ws = NULL;
    ta_status st;
    memset(&ba, 0, sizeof ba);
    ba.q = dev ? c->dq_ : c->q, ba.k = dev ? c->dk_ : c->k, ba.v = dev ? c->dv_ : c->v;
    ba.o = o, ba.lse = lse, ba.d_o = dev ? c->ddo : c->d_o, ba.seqlens_k = c->seqlens;
    ba.dq = g->dq, ba.dk = g->dk, ba.dv = g->dv, ba.d_alpha = g->d_alpha;
    ba.w_qlat = dev ? c->dwq : c->wq, ba.w_vup = dev ? c->dwv : c->wv;
    ba.dw_qlat = g->dwq, ba.dw_vup = g->dwv;
    lt_strides(c, &ba.q_strides, &ba.k_strides, &ba.o_strides);
    ba.v_strides = ba.k_strides;
    ba.d_o_strides = ba.o_strides, ba.dq_strides = ba.q_strides;
    ba.dk_strides = ba.dv_strides = ba.k_strides;
    if ((st = ta_bwd_workspace_size(&c->p, be, &bytes)) != TA_OK) return st;
    ws = lt_ws_take(dev, bytes);
    st = ta_bwd(&c->p, be, &ba, ws, bytes, NULL);
    lt_ws_drop(dev, ws);
    return st;
}

/* bytes of the device buffer d equal to the host buffer h */
static int lt_same(const void *h, const void *d, size_t bytes) {
    void *x = ta_test_alloc(bytes ? bytes : 1);
    int same;
    CUDA_OK(cudaMemcpy(x, d, bytes, cudaMemcpyDeviceToHost));
    same = memcmp(h, x, bytes) == 0;
    ta_test_free(x);
    return same;
}

/* Part 2, one problem: forward, then (S_q = S_k) backward. Returns 1 if all equal. */
static int lt_check(ta_rng *r, int t, long *n_bwd) {
    const int kind = t % 3, bwd = ta_rng_int(r, 0, 2) != 0;
    const char *const kinds[3] = {"band", "projections", "band + projections"};
    lt_case c;
    char desc[400];
    void *ro, *co;
    float *rlse, *clse;
    ta_status st;
    int ok = 1;
    lt_draw(r, &c, kind, bwd);
    lt_describe(&c, desc, sizeof desc);
    ro = ta_test_alloc(c.no * c.eb), rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
    ta_poison(ro, c.no * c.eb), ta_poison(rlse, c.nl * sizeof(float));
    co = lt_dev_poisoned(c.no * c.eb), clse = (float *)lt_dev_poisoned(c.nl * sizeof(float));
    st = lt_fwd(&c, TA_BACKEND_REF, ro, rlse);
    TA_CHECK(st == TA_OK, "%s: REF forward: %s: %s", kinds[kind], ta_status_string(st), desc);
    st = st == TA_OK ? lt_fwd(&c, TA_BACKEND_CUDA, co, clse) : st;
    TA_CHECK(st == TA_OK, "%s: CUDA forward: %s: %s", kinds[kind], ta_status_string(st), desc);
    if (st == TA_OK) {
        const int so = lt_same(ro, co, c.no * c.eb), sl = lt_same(rlse, clse, c.nl * sizeof(float));
        TA_CHECK(so && sl, "%s: CUDA forward != REF (o %s, lse %s): %s", kinds[kind],
                 so ? "equal" : "differs", sl ? "equal" : "differs", desc);
        ok = so && sl;
    } else {
        ok = 0;
    }
    if (ok && c.p.seq_q == c.p.seq_k && c.p.q_history == 0) {
        const size_t nwq = c.nwq * sizeof(float), nwv = c.nwv * sizeof(float);
        lt_grads h, d;
        void *o_dev = lt_dev_copy(ro, c.no * c.eb), *lse_dev = lt_dev_copy(rlse, c.nl * 4u);
        h.dq = ta_test_alloc(c.nq * c.eb), h.dk = ta_test_alloc(c.nk * c.eb);
        h.dv = ta_test_alloc(c.nv * c.eb), h.d_alpha = (float *)ta_test_alloc(sizeof(float));
        h.dwq = c.wq ? (float *)ta_test_alloc(nwq) : NULL;
        h.dwv = c.wq ? (float *)ta_test_alloc(nwv) : NULL;
        ta_poison(h.dq, c.nq * c.eb), ta_poison(h.dk, c.nk * c.eb), ta_poison(h.dv, c.nv * c.eb);
        ta_poison(h.d_alpha, sizeof(float));
        if (c.wq) ta_poison(h.dwq, nwq), ta_poison(h.dwv, nwv);
        d.dq = lt_dev_poisoned(c.nq * c.eb), d.dk = lt_dev_poisoned(c.nk * c.eb);
        d.dv = lt_dev_poisoned(c.nv * c.eb), d.d_alpha = (float *)lt_dev_poisoned(sizeof(float));
        d.dwq = c.wq ? (float *)lt_dev_poisoned(nwq) : NULL;
        d.dwv = c.wq ? (float *)lt_dev_poisoned(nwv) : NULL;
        st = lt_bwd(&c, TA_BACKEND_REF, ro, rlse, &h);
        TA_CHECK(st == TA_OK, "%s: REF backward: %s: %s", kinds[kind], ta_status_string(st), desc);
        st = st == TA_OK ? lt_bwd(&c, TA_BACKEND_CUDA, o_dev, (const float *)lse_dev, &d) : st;
        TA_CHECK(st == TA_OK, "%s: CUDA backward: %s: %s", kinds[kind], ta_status_string(st), desc);
        if (st == TA_OK) {
            const int band = (c.p.flags & TA_RBAND) != 0;
            const int sq = lt_same(h.dq, d.dq, c.nq * c.eb), sk = lt_same(h.dk, d.dk, c.nk * c.eb);
            const int sv = lt_same(h.dv, d.dv, c.nv * c.eb);
            const int sa = !band || lt_same(h.d_alpha, d.d_alpha, sizeof(float));
            const int sw = !c.wq || (lt_same(h.dwq, d.dwq, nwq) && lt_same(h.dwv, d.dwv, nwv));
            TA_CHECK(sq && sk && sv && sa && sw,
                     "%s: CUDA backward != REF (dq %d dk %d dv %d d_alpha %d dw %d; 1 = equal): %s",
                     kinds[kind], sq, sk, sv, sa, sw, desc);
            ok = sq && sk && sv && sa && sw;
            ++*n_bwd;
        } else {
            ok = 0;
        }
        ta_test_free(h.dq), ta_test_free(h.dk), ta_test_free(h.dv), ta_test_free(h.d_alpha);
        ta_test_free(h.dwq), ta_test_free(h.dwv);
        cudaFree(d.dq), cudaFree(d.dk), cudaFree(d.dv), cudaFree(d.d_alpha), cudaFree(d.dwq);
        cudaFree(d.dwv), cudaFree(o_dev), cudaFree(lse_dev);
    }
    ta_test_free(ro), ta_test_free(rlse);
    cudaFree(co), cudaFree(clse);
    lt_free(&c);
    return ok;
}

/* Part 1: the size queries without a GPU. */
static void lt_sizes(void) {
    int dt, kind;
    for (dt = 0; dt < 3; ++dt)
        for (kind = 0; kind < 3; ++kind) {
            ta_problem p;
            size_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
            memset(&p, 0, sizeof p);
            p.batch = 2, p.heads_q = 4, p.heads_kv = 1, p.seq_q = p.seq_k = 200;
            p.head_dim = p.head_dim_v = 64, p.dtype = (ta_dtype)dt, p.flags = TA_CAUSAL;
            if (kind != 1) p.flags |= TA_RBAND, p.rband_alpha = 0.5f, p.rband_width = 8;
            if (kind != 0) p.latent_dim = 32;
            TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &f0) == TA_OK &&
                         ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &b0) == TA_OK,
                     "size queries (dtype %d, kind %d)", dt, kind);
            if (kind != 1) { /* a wider band: more T (and dl) */
                p.rband_width = 40;
                TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &f1) == TA_OK && f1 > f0 &&
                             ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &b1) == TA_OK && b1 > b0,
                         "W 8 -> 40: fwd %zu -> %zu, bwd %zu -> %zu bytes", f0, f1, b0, b1);
            }
        }
    printf("size queries on CUDA without a device: band, projections, both; every dtype\n");
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_latent");
    int dev_count = 0, i, count = 60, passed = 0;
    long n_bwd = 0;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc && atoi(argv[i + 1]) >= 0)
            count = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_cuda_latent [--count N]\n");
            return 2;
        }
    }
    ta_rng_seed(&r, seed);
    lt_sizes();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0 ||
        !ta_backend_available(TA_BACKEND_CUDA)) {
        (void)cudaGetLastError();
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_latent") : TA_TEST_SKIP;
    }
    for (i = 0; i < count; ++i)
        passed += lt_check(&r, i, &n_bwd);
    printf("%d of %d problems: CUDA == REF bit for bit (forward o, lse; %ld backwards: dq, dk, dv, "
           "d_alpha, dw_qlat, dw_vup)\n",
           passed, count, n_bwd);
    return ta_test_finish("test_cuda_latent");
}
