/*
 * The backward over key and query ranges (docs/api.md, "Backward over key and
 * query ranges"; issue 18 item 1): the sequence's queries cut into ranges
 * [q0, q1) and its keys into ranges [k0, k1) (two independent cuts), every
 * (query range, key range) pair that has a visible entry one ta_bwd with
 * args.accumulate = TA_BWD_ACCUMULATE on range-sized views of the full
 * tensors (pointers moved by q0 / k0 rows, the full strides; causal pairs by
 * the bottom-right alignment: seq_k = q1 - k0, seqlens_k = min(k1, q1) - k0),
 * adding into one set of f32 (hi, lo) pairs, then ta_bwd_finish. Checked on
 * REF and CPU (OpenMP and caller-run tasks), f32 / f16 / bf16, causal or not,
 * GQA and two batch entries sometimes:
 *
 *   - the pairs run in a random order that keeps, for every query range, its
 *     key ranges ascending and, for every key range, its query ranges
 *     ascending (any schedule of devices that keeps those two orders); a
 *     second random such order gives the same bits (the result depends on
 *     the orders, not on the timing);
 *   - CPU == REF bit for bit (hi words and gradients);
 *   - one accumulating call over everything, finished, is one ta_bwd's bits;
 *   - with the key cut on multiples of 64 (TA_SUM2_CHUNK), the ranges' dq
 *     pairs (both words) equal that call's, so dq is one ta_bwd's bits; with
 *     the query cut on multiples of 64 and H = H_kv, dk and dv's do too
 *     (docs/exactness.md section 11, "Ranges");
 *   - otherwise within the float64 oracle's gate, as the full ta_bwd is;
 *   - today's recipe (each pair's gradients stored in the storage dtype, then
 *     summed in f32 and rounded again) against the same oracle: the
 *     accumulated result's error is printed beside it, and for bf16 the old
 *     recipe must differ from the full ta_bwd where the new one equals it.
 * Fresh seed per run, printed; TA_SEED replays. Outputs poisoned.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "ring_cuts.h"
#include "test_util.h"
#include "tileattn.h"

#define MAX_CUTS TA_RING_MAX_CUTS

typedef struct rb_case {
    int32_t b, h, hkv, s, d; /* batch, heads, kv heads, sequence, head dim */
    ta_dtype dt;
    int causal, wide;
    int offset;               /* CPU's causal pairs by q_offset (REF's by seqlens_k) */
    int q_aligned, k_aligned; /* the cut's points are multiples of 64 */
    int32_t nq, nk;
    int32_t qcut[MAX_CUTS + 1], kcut[MAX_CUTS + 1]; /* range r: [cut[r], cut[r + 1]) */
    void *q, *k, *v, *d_o, *o;                      /* [H, S, D] / [H_kv, S, D], dtype */
    float *lse;                                     /* [H, S] */
    size_t eb;
} rb_case;

static ta_problem full_problem(const rb_case *c) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c->b;
    p.heads_q = c->h;
    p.heads_kv = c->hkv;
    p.seq_q = p.seq_k = c->s;
    p.head_dim = p.head_dim_v = c->d;
    p.dtype = c->dt;
    p.flags = c->causal ? TA_CAUSAL : 0;
    return p;
}

/* The call of pair (query range a, key range b): 0 if no entry is visible;
 * else p, the seqlens_k value (or -1: none). */
static int pair_problem(const rb_case *c, int offset, int32_t a, int32_t b, ta_problem *p,
                        int32_t *seqlen) {
    *p = full_problem(c);
    return ta_ring_pair(c->qcut, c->kcut, c->causal, offset, a, b, p, seqlen);
}

/* A random order of the visible pairs in which each query range's key ranges
 * and each key range's query ranges come in ascending order. */
static int32_t pair_order(const rb_case *c, ta_rng *r, int32_t *order) {
    return ta_ring_order(c->qcut, c->nq, c->kcut, c->nk, c->causal, r, order);
}

/* The gradients' f32 hi and lo words, [H, S, D] and [H_kv, S, D] each. */
typedef struct rb_pairs {
    float *dq, *dq_lo, *dk, *dk_lo, *dv, *dv_lo;
} rb_pairs;

static void pairs_alloc(const rb_case *c, rb_pairs *g) {
    const size_t nq = (size_t)c->b * (size_t)c->h * (size_t)c->s * (size_t)c->d;
    const size_t nk = (size_t)c->b * (size_t)c->hkv * (size_t)c->s * (size_t)c->d;
    g->dq = calloc(nq, sizeof(float));
    g->dq_lo = calloc(nq, sizeof(float));
    g->dk = calloc(nk, sizeof(float));
    g->dk_lo = calloc(nk, sizeof(float));
    g->dv = calloc(nk, sizeof(float));
    g->dv_lo = calloc(nk, sizeof(float));
    if (!g->dq || !g->dq_lo || !g->dk || !g->dk_lo || !g->dv || !g->dv_lo) exit(1);
}

static void pairs_free(rb_pairs *g) {
    free(g->dq);
    free(g->dq_lo);
    free(g->dk);
    free(g->dk_lo);
    free(g->dv);
    free(g->dv_lo);
}

/* The lse rows of query range a: [B, H, q1 - q0]. */
static float *range_lse(const rb_case *c, int32_t a) {
    const int32_t q0 = c->qcut[a], n = c->qcut[a + 1] - q0;
    float *l = malloc((size_t)c->b * (size_t)c->h * (size_t)n * sizeof(float));
    int32_t h;
    if (!l) exit(1);
    for (h = 0; h < c->b * c->h; ++h) /* (batch, head) rows: [B H, S] */
        memcpy(l + (size_t)h * (size_t)n, c->lse + (size_t)h * (size_t)c->s + (size_t)q0,
               (size_t)n * sizeof(float));
    return l;
}

/* One pair's call: query range a, key range b (order code a * MAX_CUTS + b),
 * its problem, and its args on the full tensors (views from row q0 / k0, the
 * full strides; lse: the range's rows [H, q1 - q0], lse being contiguous);
 * the gradients' pointers are the caller's. */
typedef struct rb_call {
    int32_t a, b, seqlen;
    int32_t seqlens[2]; /* seqlen for each batch entry (B <= 2) */
    size_t q0, k0;      /* element offsets of rows q0, k0 */
    ta_problem p;
    ta_bwd_args ba;
    float *lse;
} rb_call;

static void call_begin(const rb_case *c, ta_backend be, int32_t code, rb_call *cl) {
    cl->a = code / MAX_CUTS;
    cl->b = code % MAX_CUTS;
    cl->q0 = (size_t)c->qcut[cl->a] * (size_t)c->d;
    cl->k0 = (size_t)c->kcut[cl->b] * (size_t)c->d;
    pair_problem(c, c->offset && be != TA_BACKEND_REF, cl->a, cl->b, &cl->p, &cl->seqlen);
    cl->lse = range_lse(c, cl->a);
    memset(&cl->ba, 0, sizeof cl->ba);
    cl->ba.q = (const char *)c->q + cl->q0 * c->eb;
    cl->ba.o = (const char *)c->o + cl->q0 * c->eb;
    cl->ba.d_o = (const char *)c->d_o + cl->q0 * c->eb;
    cl->ba.k = (const char *)c->k + cl->k0 * c->eb;
    cl->ba.v = (const char *)c->v + cl->k0 * c->eb;
    cl->ba.lse = cl->lse;
    cl->seqlens[0] = cl->seqlens[1] = cl->seqlen;
    cl->ba.seqlens_k = cl->seqlen >= 0 ? cl->seqlens : NULL;
    cl->ba.q_strides = cl->ba.o_strides = cl->ba.d_o_strides = cl->ba.dq_strides =
        ta_test_strides_bhsd(c->h, c->s, c->d);
    cl->ba.k_strides = cl->ba.v_strides = cl->ba.dk_strides = cl->ba.dv_strides =
        ta_test_strides_bhsd(c->hkv, c->s, c->d);
}

static void *ws_bwd(const ta_problem *p, ta_backend be, size_t *bytes) {
    TA_CHECK(ta_bwd_workspace_size(p, be, bytes) == TA_OK, "bwd size query");
    return ta_test_alloc(*bytes ? *bytes : 64);
}

/* The accumulating calls in `order` on backend be (CPU: OpenMP or caller-run
 * tasks at random) into g. */
static void run_accumulate(const rb_case *c, ta_backend be, ta_rng *r, const int32_t *order,
                           int32_t n, rb_pairs *g) {
    int32_t i;
    for (i = 0; i < n; ++i) {
        rb_call cl;
        size_t wb;
        void *ws;
        ta_status st;
        call_begin(c, be, order[i], &cl);
        cl.ba.accumulate = TA_BWD_ACCUMULATE;
        cl.ba.dq = g->dq + cl.q0;
        cl.ba.dq_lo = g->dq_lo + cl.q0;
        cl.ba.dk = g->dk + cl.k0;
        cl.ba.dk_lo = g->dk_lo + cl.k0;
        cl.ba.dv = g->dv + cl.k0;
        cl.ba.dv_lo = g->dv_lo + cl.k0;
        ws = ws_bwd(&cl.p, be, &wb);
        if (be == TA_BACKEND_CPU && ta_rng_int(r, 0, 2) == 0)
            st = ta_test_bwd_tasks(&cl.p, &cl.ba);
        else
            st = ta_bwd(&cl.p, be, &cl.ba, ws, wb, NULL);
        TA_CHECK(st == TA_OK, "pair (%d, %d) on backend %d: %s", (int)cl.a, (int)cl.b, (int)be,
                 ta_status_string(st));
        ta_test_free(ws);
        free(cl.lse);
    }
}

/* One accumulating call over the whole problem on REF into g (its hi and
 * lo words are the ones the ranges must reproduce where promised). */
static void run_whole(const rb_case *c, rb_pairs *g) {
    const ta_problem p = full_problem(c);
    ta_bwd_args ba;
    size_t wb;
    void *ws = ws_bwd(&p, TA_BACKEND_REF, &wb);
    memset(&ba, 0, sizeof ba);
    ba.q = c->q;
    ba.k = c->k;
    ba.v = c->v;
    ba.o = c->o;
    ba.d_o = c->d_o;
    ba.lse = c->lse;
    ba.accumulate = TA_BWD_ACCUMULATE;
    ba.dq = g->dq;
    ba.dq_lo = g->dq_lo;
    ba.dk = g->dk;
    ba.dk_lo = g->dk_lo;
    ba.dv = g->dv;
    ba.dv_lo = g->dv_lo;
    TA_CHECK(ta_bwd(&p, TA_BACKEND_REF, &ba, ws, wb, NULL) == TA_OK, "whole accumulating call");
    ta_test_free(ws);
}

/* Both words of n elements equal, bit for bit. */
static int same_pairs(const float *hi, const float *lo, const float *hi2, const float *lo2,
                      size_t n) {
    return memcmp(hi, hi2, n * sizeof(float)) == 0 && memcmp(lo, lo2, n * sizeof(float)) == 0;
}

/* Today's recipe: each pair's gradients in the storage dtype (range-sized
 * temporaries), added in f32 in `order`, then scaled as stored: out = dtype
 * gradients of the f32 sums. */
static void run_rounded(const rb_case *c, const int32_t *order, int32_t n, void *dq, void *dk,
                        void *dv) {
    const size_t nq = (size_t)c->b * (size_t)c->h * (size_t)c->s * (size_t)c->d;
    const size_t nk = (size_t)c->b * (size_t)c->hkv * (size_t)c->s * (size_t)c->d;
    float *sq = calloc(nq, sizeof(float)), *sk = calloc(nk, sizeof(float));
    float *sv = calloc(nk, sizeof(float));
    void *tq = malloc(nq * c->eb), *tk = malloc(nk * c->eb), *tv = malloc(nk * c->eb);
    int32_t i, h, rr, x;
    size_t e;
    if (!sq || !sk || !sv || !tq || !tk || !tv) exit(1);
    for (i = 0; i < n; ++i) {
        rb_call cl;
        size_t wb;
        void *ws;
        call_begin(c, TA_BACKEND_REF, order[i], &cl);
        cl.ba.dq = (char *)tq + cl.q0 * c->eb;
        cl.ba.dk = (char *)tk + cl.k0 * c->eb;
        cl.ba.dv = (char *)tv + cl.k0 * c->eb;
        ws = ws_bwd(&cl.p, TA_BACKEND_REF, &wb);
        TA_CHECK(ta_bwd(&cl.p, TA_BACKEND_REF, &cl.ba, ws, wb, NULL) == TA_OK, "rounded pair");
        ta_test_free(ws);
        free(cl.lse);
        for (h = 0; h < c->b * c->h; ++h) /* (b, h); the pair's q rows [q0, q0 + seq_q) */
            for (rr = 0; rr < cl.p.seq_q; ++rr)
                for (x = 0; x < c->d; ++x) {
                    e = ((size_t)h * (size_t)c->s + (size_t)(c->qcut[cl.a] + rr)) * (size_t)c->d +
                        (size_t)x;
                    sq[e] += (float)ta_get(tq, c->dt, e);
                }
        for (h = 0; h < c->b * c->hkv; ++h) /* (b, kv head); its keys [k0, k0 + seq_k) */
            for (rr = 0; rr < cl.p.seq_k; ++rr)
                for (x = 0; x < c->d; ++x) {
                    e = ((size_t)h * (size_t)c->s + (size_t)(c->kcut[cl.b] + rr)) * (size_t)c->d +
                        (size_t)x;
                    sk[e] += (float)ta_get(tk, c->dt, e);
                    sv[e] += (float)ta_get(tv, c->dt, e);
                }
    }
    { /* round the f32 sums once more: ta_bwd_finish with scale 1 does exactly that */
        ta_problem p = full_problem(c);
        ta_bwd_finish_args fa;
        p.scale = 1.0f;
        memset(&fa, 0, sizeof fa);
        fa.dq_hi = sq;
        fa.dk_hi = sk;
        fa.dv_hi = sv;
        fa.dq = dq;
        fa.dk = dk;
        fa.dv = dv;
        TA_CHECK(ta_bwd_finish(&p, TA_BACKEND_REF, &fa, NULL) == TA_OK, "rounded: finish");
    }
    free(sq);
    free(sk);
    free(sv);
    free(tq);
    free(tk);
    free(tv);
}

static void finish(const rb_case *c, ta_backend be, const rb_pairs *g, void *dq, void *dk,
                   void *dv) {
    const ta_problem p = full_problem(c);
    ta_bwd_finish_args fa;
    memset(&fa, 0, sizeof fa);
    fa.dq_hi = g->dq;
    fa.dk_hi = g->dk;
    fa.dv_hi = g->dv;
    fa.dq = dq;
    fa.dk = dk;
    fa.dv = dv;
    TA_CHECK(ta_bwd_finish(&p, be, &fa, NULL) == TA_OK, "finish on backend %d", (int)be);
}

/* ta_bwd_finish on CPU into [S, H, D]-laid-out dq and dk (strided): element
 * for element the contiguous finish's bits dq, dk. */
static void check_finish_strided(const rb_case *c, const rb_pairs *g, const void *dq,
                                 const void *dk, int idx) {
    const ta_problem p = full_problem(c);
    const size_t nq = (size_t)c->b * (size_t)c->h * (size_t)c->s * (size_t)c->d;
    const size_t nk = (size_t)c->b * (size_t)c->hkv * (size_t)c->s * (size_t)c->d;
    void *sq = malloc(nq * c->eb), *sk = malloc(nk * c->eb);
    ta_bwd_finish_args f;
    int32_t bb, h, r;
    int bad = 0;
    if (!sq || !sk) exit(1);
    ta_poison(sq, nq * c->eb);
    ta_poison(sk, nk * c->eb);
    memset(&f, 0, sizeof f);
    f.dq_hi = g->dq;
    f.dk_hi = g->dk;
    f.dq = sq;
    f.dk = sk;
    f.dq_strides = ta_test_strides_bshd(c->h, c->s, c->d);
    f.dk_strides = ta_test_strides_bshd(c->hkv, c->s, c->d);
    TA_CHECK(ta_bwd_finish(&p, TA_BACKEND_CPU, &f, NULL) == TA_OK, "strided finish");
    for (bb = 0; bb < c->b; ++bb)
        for (h = 0; h < c->h; ++h)
            for (r = 0; r < c->s; ++r) {
                const size_t bsr = (size_t)bb * (size_t)c->s + (size_t)r; /* [B, S, H, D] */
                const size_t at = (bsr * (size_t)c->h + (size_t)h) * (size_t)c->d;
                const size_t ak = (bsr * (size_t)c->hkv + (size_t)h) * (size_t)c->d;
                const size_t cq =
                    (((size_t)bb * (size_t)c->h + (size_t)h) * (size_t)c->s + (size_t)r) *
                    (size_t)c->d;
                const size_t ck =
                    (((size_t)bb * (size_t)c->hkv + (size_t)h) * (size_t)c->s + (size_t)r) *
                    (size_t)c->d;
                bad |= memcmp((char *)sq + at * c->eb, (const char *)dq + cq * c->eb,
                              (size_t)c->d * c->eb) != 0;
                if (h < c->hkv)
                    bad |= memcmp((char *)sk + ak * c->eb, (const char *)dk + ck * c->eb,
                                  (size_t)c->d * c->eb) != 0;
            }
    TA_CHECK(!bad, "problem %d: ta_bwd_finish into strided gradients != contiguous", idx);
    free(sq);
    free(sk);
}

/* Elements of x and y (dtype) that differ in their bits. */
static size_t count_diff(const void *x, const void *y, size_t n, size_t eb) {
    size_t i, diff = 0;
    for (i = 0; i < n; ++i)
        diff += memcmp((const char *)x + i * eb, (const char *)y + i * eb, eb) != 0;
    return diff;
}

/* max over elements of (|x - oracle| - u |oracle| - floor) / mag, mag > 0
 * (masked outputs: x must be 0); the rounding to the storage dtype: u
 * relative, and f16's subnormal spacing 2^-24 (half of it) absolute. */
static double worst(const void *x, ta_dtype dt, const double *orc, const double *mag, size_t n) {
    const double u = dt == TA_F32 ? 0x1p-24 : dt == TA_F16 ? 0x1p-11 : 0x1p-8;
    const double floor_dt = dt == TA_F16 ? 0x1p-25 : 0.0;
    double w = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double e = fabs(ta_get(x, dt, i) - orc[i]) - u * fabs(orc[i]) - floor_dt;
        double r;
        if (mag[i] == 0.0) {
            r = ta_get(x, dt, i) == 0.0 ? 0.0 : 1.0;
        } else {
            r = e / mag[i];
        }
        w = r > w ? r : w;
    }
    return w;
}

static double g_new_max, g_old_max; /* bf16: the worst errors of the two recipes */
static int g_bf16_old_differs, g_bf16_bitwise_cases;

static void check_one(uint64_t seed, int idx) {
    static const int32_t dims[3] = {16, 24, 64};
    static const ta_dtype dts[3] = {TA_F32, TA_F16, TA_BF16};
    const double gate = 2e-5; /* (error - rounding) / magnitude, as the full ta_bwd */
    rb_case c;
    ta_rng r;
    ta_problem p;
    int32_t order[MAX_CUTS * MAX_CUTS], order2[MAX_CUTS * MAX_CUTS], n, n2;
    size_t nq, nk, wb, eb, i;
    rb_pairs gr, gr2, gc, gw;
    void *full[3], *acc_r[3], *acc_c[3], *old[3], *ws;
    double *orc[3], *mag[3], *wq, *wk, *wv, *wdo, *wo;
    ta_oracle_in oin;
    ta_fwd_args fa;
    ta_bwd_args ba;
    int j, dq_bitwise, dkdv_bitwise;
    ta_rng_seed(&r, seed + 104729u * (uint64_t)(idx + 1));
    memset(&c, 0, sizeof c);
    c.b = ta_rng_int(&r, 0, 3) == 0 ? 2 : 1;
    c.hkv = ta_rng_int(&r, 1, 2);
    c.h = c.hkv * ta_rng_int(&r, 1, 2);
    c.d = dims[ta_rng_int(&r, 0, 2)];
    c.dt = dts[idx % 3];
    c.causal = ta_rng_int(&r, 0, 2) != 0;
    c.q_aligned = ta_rng_int(&r, 0, 2) != 0;
    c.k_aligned = ta_rng_int(&r, 0, 2) != 0;
    c.offset = ta_rng_int(&r, 0, 1);
    c.s = c.q_aligned || c.k_aligned ? 64 * ta_rng_int(&r, 2, 5) : ta_rng_int(&r, 90, 300);
    c.nq = ta_ring_make_cut(&r, c.s, c.q_aligned, c.qcut);
    c.nk = ta_ring_make_cut(&r, c.s, c.k_aligned, c.kcut);
    c.eb = eb = ta_dtype_size(c.dt);
    nq = (size_t)c.b * (size_t)c.h * (size_t)c.s * (size_t)c.d;
    nk = (size_t)c.b * (size_t)c.hkv * (size_t)c.s * (size_t)c.d;
    c.q = malloc(nq * eb);
    c.d_o = malloc(nq * eb);
    c.o = malloc(nq * eb);
    c.k = malloc(nk * eb);
    c.v = malloc(nk * eb);
    c.lse = malloc((size_t)c.b * (size_t)c.h * (size_t)c.s * sizeof(float));
    for (j = 0; j < 3; ++j) {
        const size_t n_j = j == 0 ? nq : nk;
        full[j] = malloc(n_j * eb);
        acc_r[j] = malloc(n_j * eb);
        acc_c[j] = malloc(n_j * eb);
        old[j] = malloc(n_j * eb);
        orc[j] = malloc(n_j * sizeof(double));
        mag[j] = malloc(n_j * sizeof(double));
        if (!full[j] || !acc_r[j] || !acc_c[j] || !old[j] || !orc[j] || !mag[j]) exit(1);
        ta_poison(full[j], n_j * eb);
        ta_poison(acc_r[j], n_j * eb);
        ta_poison(acc_c[j], n_j * eb);
        ta_poison(old[j], n_j * eb);
    }
    if (!c.q || !c.d_o || !c.o || !c.k || !c.v || !c.lse) exit(1);
    /* wide: scores over tens of units, so the weights and the chunks' partials
     * span more than the pairs' 48 bits and the order of the additions shows
     * in the words (else the pairs often hold the exact sum in any order) */
    c.wide = ta_rng_int(&r, 0, 1);
    ta_fill_uniform(&r, c.q, c.dt, nq, c.wide ? -12.0f : -2.0f, c.wide ? 12.0f : 2.0f);
    ta_fill_uniform(&r, c.k, c.dt, nk, -2.0f, 2.0f);
    ta_fill_uniform(&r, c.v, c.dt, nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.d_o, c.dt, nq, -1.0f, 1.0f);
    /* the forward over everything, then one full backward (REF) */
    p = full_problem(&c);
    memset(&fa, 0, sizeof fa);
    fa.q = c.q;
    fa.k = c.k;
    fa.v = c.v;
    fa.o = c.o;
    fa.lse = c.lse;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &wb) == TA_OK, "fwd size");
    ws = ta_test_alloc(wb ? wb : 64);
    TA_CHECK(ta_fwd(&p, TA_BACKEND_REF, &fa, ws, wb, NULL) == TA_OK, "fwd");
    ta_test_free(ws);
    memset(&ba, 0, sizeof ba);
    ba.q = c.q;
    ba.k = c.k;
    ba.v = c.v;
    ba.o = c.o;
    ba.d_o = c.d_o;
    ba.lse = c.lse;
    ba.dq = full[0];
    ba.dk = full[1];
    ba.dv = full[2];
    ws = ws_bwd(&p, TA_BACKEND_REF, &wb);
    TA_CHECK(ta_bwd(&p, TA_BACKEND_REF, &ba, ws, wb, NULL) == TA_OK, "full bwd");
    ta_test_free(ws);
    /* the ranges: REF in one order, REF in another, CPU in the first */
    n = pair_order(&c, &r, order);
    n2 = pair_order(&c, &r, order2);
    pairs_alloc(&c, &gr);
    pairs_alloc(&c, &gr2);
    pairs_alloc(&c, &gc);
    pairs_alloc(&c, &gw);
    run_whole(&c, &gw);
    run_accumulate(&c, TA_BACKEND_REF, &r, order, n, &gr);
    run_accumulate(&c, TA_BACKEND_REF, &r, order2, n2, &gr2);
    run_accumulate(&c, TA_BACKEND_CPU, &r, order, n, &gc);
    finish(&c, TA_BACKEND_REF, &gr, acc_r[0], acc_r[1], acc_r[2]);
    finish(&c, TA_BACKEND_CPU, &gc, acc_c[0], acc_c[1], acc_c[2]);
    printf("  problem %d: B=%d H=%d/%d D=%d S=%d %s %s%s, %d q ranges (%s), %d k ranges (%s), %d "
           "pairs\n",
           idx, (int)c.b, (int)c.h, (int)c.hkv, (int)c.d, (int)c.s,
           c.dt == TA_F32   ? "f32"
           : c.dt == TA_F16 ? "f16"
                            : "bf16",
           c.causal ? (c.offset ? "causal (CPU: q_offset)" : "causal") : "full",
           c.wide ? " wide" : "", (int)c.nq,
           c.q_aligned ? "x64" : "any", (int)c.nk, c.k_aligned ? "x64" : "any", (int)n);
    /* order and backend independence: both words */
    TA_CHECK(same_pairs(gr.dq, gr.dq_lo, gr2.dq, gr2.dq_lo, nq) &&
                 same_pairs(gr.dk, gr.dk_lo, gr2.dk, gr2.dk_lo, nk) &&
                 same_pairs(gr.dv, gr.dv_lo, gr2.dv, gr2.dv_lo, nk),
             "problem %d: two admissible orders give other bits", idx);
    TA_CHECK(same_pairs(gr.dq, gr.dq_lo, gc.dq, gc.dq_lo, nq) &&
                 same_pairs(gr.dk, gr.dk_lo, gc.dk, gc.dk_lo, nk) &&
                 same_pairs(gr.dv, gr.dv_lo, gc.dv, gc.dv_lo, nk),
             "problem %d: CPU pairs != REF pairs", idx);
    for (j = 0; j < 3; ++j)
        TA_CHECK(memcmp(acc_r[j], acc_c[j], (j == 0 ? nq : nk) * eb) == 0,
                 "problem %d: CPU gradient %d != REF", idx, j);
    check_finish_strided(&c, &gc, acc_c[0], acc_c[1], idx);
    /* against one ta_bwd: bitwise where promised, both words of the pairs
     * (those of one accumulating call over everything, whose finish is one
     * ta_bwd's bits for every problem) */
    dq_bitwise = c.k_aligned;
    dkdv_bitwise = c.q_aligned && c.h == c.hkv;
    finish(&c, TA_BACKEND_REF, &gw, old[0], old[1], old[2]);
    for (j = 0; j < 3; ++j)
        TA_CHECK(memcmp(old[j], full[j], (j == 0 ? nq : nk) * eb) == 0,
                 "problem %d: one accumulating call + finish != ta_bwd (gradient %d)", idx, j);
    if (dq_bitwise)
        TA_CHECK(same_pairs(gr.dq, gr.dq_lo, gw.dq, gw.dq_lo, nq),
                 "problem %d: the ranges' dq pairs != one accumulating call's", idx);
    if (dkdv_bitwise)
        TA_CHECK(same_pairs(gr.dk, gr.dk_lo, gw.dk, gw.dk_lo, nk) &&
                     same_pairs(gr.dv, gr.dv_lo, gw.dv, gw.dv_lo, nk),
                 "problem %d: the ranges' dk/dv pairs != one accumulating call's", idx);
    if (dq_bitwise)
        TA_CHECK(memcmp(acc_r[0], full[0], nq * eb) == 0,
                 "problem %d: dq != one ta_bwd (%zu elements differ)", idx,
                 count_diff(acc_r[0], full[0], nq, eb));
    if (dkdv_bitwise)
        TA_CHECK(memcmp(acc_r[1], full[1], nk * eb) == 0 && memcmp(acc_r[2], full[2], nk * eb) == 0,
                 "problem %d: dk/dv != one ta_bwd (%zu, %zu elements differ)", idx,
                 count_diff(acc_r[1], full[1], nk, eb), count_diff(acc_r[2], full[2], nk, eb));
    for (j = 0; j < 3; ++j)
        ta_poison(old[j], (j == 0 ? nq : nk) * eb);
    run_rounded(&c, order, n, old[0], old[1], old[2]);
    /* against the oracle (D_i from the stored o, as the library) */
    wq = ta_oracle_widen(c.q, c.dt, nq);
    wk = ta_oracle_widen(c.k, c.dt, nk);
    wv = ta_oracle_widen(c.v, c.dt, nk);
    wdo = ta_oracle_widen(c.d_o, c.dt, nq);
    wo = ta_oracle_widen(c.o, c.dt, nq);
    memset(&oin, 0, sizeof oin);
    oin.q = wq;
    oin.k = wk;
    oin.v = wv;
    oin.d_o = wdo;
    oin.o = wo;
    TA_CHECK(ta_oracle_bwd(&p, &oin, orc[0], orc[1], orc[2]) == 0, "oracle");
    TA_CHECK(ta_oracle_bwd_mag(&p, &oin, mag[0], mag[1], mag[2]) == 0, "oracle mag");
    {
        double w_full = 0.0, w_acc = 0.0, w_old = 0.0;
        size_t d_old = 0, d_acc = 0;
        for (j = 0; j < 3; ++j) {
            const size_t n_j = j == 0 ? nq : nk;
            const double wf = worst(full[j], c.dt, orc[j], mag[j], n_j);
            const double wa = worst(acc_r[j], c.dt, orc[j], mag[j], n_j);
            const double wo2 = worst(old[j], c.dt, orc[j], mag[j], n_j);
            w_full = wf > w_full ? wf : w_full;
            w_acc = wa > w_acc ? wa : w_acc;
            w_old = wo2 > w_old ? wo2 : w_old;
            d_old += count_diff(old[j], full[j], n_j, eb);
            d_acc += count_diff(acc_r[j], full[j], n_j, eb);
        }
        printf("    (error - rounding) / magnitude: one ta_bwd %.3g, accumulated ranges %.3g, "
               "pairs rounded first %.3g; elements != one ta_bwd: accumulated %zu, rounded "
               "first %zu of %zu\n",
               w_full, w_acc, w_old, d_acc, d_old, nq + 2 * nk);
        TA_CHECK(w_full <= gate, "problem %d: one ta_bwd outside the gate (%g)", idx, w_full);
        TA_CHECK(w_acc <= gate, "problem %d: accumulated ranges outside the gate (%g)", idx, w_acc);
        if (c.dt == TA_BF16) {
            g_new_max = w_acc > g_new_max ? w_acc : g_new_max;
            g_old_max = w_old > g_old_max ? w_old : g_old_max;
            if (dq_bitwise) { /* dq equals one ta_bwd: does the old recipe's? */
                ++g_bf16_bitwise_cases;
                g_bf16_old_differs += count_diff(old[0], full[0], nq, eb) > 0;
            }
        }
    }
    for (i = 0; i < 3; ++i) {
        free(full[i]);
        free(acc_r[i]);
        free(acc_c[i]);
        free(old[i]);
        free(orc[i]);
        free(mag[i]);
    }
    free(wq);
    free(wk);
    free(wv);
    free(wdo);
    free(wo);
    pairs_free(&gr);
    pairs_free(&gr2);
    pairs_free(&gc);
    pairs_free(&gw);
    free(c.q);
    free(c.k);
    free(c.v);
    free(c.d_o);
    free(c.o);
    free(c.lse);
}

/* One refused call: ta_bwd and ta_explain_bwd return want, the line names
 * field, and the hi and lo words (canary-filled) are untouched. */
static void expect_bwd(const ta_problem *p, const ta_bwd_args *a, void *ws, size_t wb,
                       const rb_pairs *g, size_t nq, size_t nk, ta_status want, const char *field,
                       const char *what) {
    char line[256];
    const ta_status st = ta_bwd(p, TA_BACKEND_CPU, a, ws, wb, NULL);
    const ta_status ex = ta_explain_bwd(p, TA_BACKEND_CPU, a, ws, wb, NULL, line, sizeof line);
    TA_CHECK(st == want && ex == want, "%s: ta_bwd %d, explain %d, want %d", what, (int)st, (int)ex,
             (int)want);
    TA_CHECK(strstr(line, field) != NULL, "%s: \"%s\" does not name %s", what, line, field);
    TA_CHECK(ta_canary_intact(g->dq, nq * 4) && ta_canary_intact(g->dq_lo, nq * 4) &&
                 ta_canary_intact(g->dk, nk * 4) && ta_canary_intact(g->dk_lo, nk * 4) &&
                 ta_canary_intact(g->dv, nk * 4) && ta_canary_intact(g->dv_lo, nk * 4),
             "%s: a pair buffer was written", what);
}

/* ta_bwd_finish and ta_explain_bwd_finish return want and name field; the
 * gradient dq (canary-filled) is untouched on error. */
static void expect_finish(const ta_problem *p, const ta_bwd_finish_args *f, size_t nq,
                          ta_status want, const char *field, const char *what) {
    char line[256];
    const ta_status ex = ta_explain_bwd_finish(p, TA_BACKEND_REF, f, NULL, line, sizeof line);
    const ta_status st = ta_bwd_finish(p, TA_BACKEND_REF, f, NULL);
    TA_CHECK(st == want && ex == want, "%s: ta_bwd_finish %d, explain %d, want %d", what, (int)st,
             (int)ex, (int)want);
    TA_CHECK(strstr(line, field) != NULL, "%s: \"%s\" does not name %s", what, line, field);
    if (want != TA_OK && f && f->dq)
        TA_CHECK(ta_canary_intact(f->dq, nq * 4), "%s: dq written", what);
}

/* The mode's and ta_bwd_finish's refusals (docs/api.md, "Backward over key
 * and query ranges", Checks); the outputs untouched. */
static void check_bad_input(void) {
    rb_case c;
    ta_problem p;
    ta_bwd_args a;
    ta_bwd_finish_args f;
    rb_pairs g;
    ta_rng r;
    size_t nq, nk, wb;
    float *grad, *conv_w, *dconv_w;
    void *ws;
    ta_rng_seed(&r, 12345);
    memset(&c, 0, sizeof c);
    c.b = 1, c.h = 2, c.hkv = 1, c.d = 16, c.s = 70, c.dt = TA_F32, c.eb = 4, c.causal = 1;
    nq = (size_t)c.b * (size_t)c.h * (size_t)c.s * (size_t)c.d;
    nk = (size_t)c.b * (size_t)c.hkv * (size_t)c.s * (size_t)c.d;
    c.q = malloc(nq * 4), c.d_o = malloc(nq * 4), c.o = malloc(nq * 4);
    c.k = malloc(nk * 4), c.v = malloc(nk * 4);
    c.lse = malloc((size_t)c.b * (size_t)c.h * (size_t)c.s * 4);
    grad = malloc(nq * 4);
    conv_w = calloc(2 * 3, sizeof(float));
    dconv_w = malloc(2 * 3 * sizeof(float));
    if (!c.q || !c.d_o || !c.o || !c.k || !c.v || !c.lse || !grad || !conv_w || !dconv_w) exit(1);
    ta_fill_uniform(&r, c.q, TA_F32, nq, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.d_o, TA_F32, nq, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.o, TA_F32, nq, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.k, TA_F32, nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.v, TA_F32, nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.lse, TA_F32, (size_t)c.b * (size_t)c.h * (size_t)c.s, 1.0f, 2.0f);
    pairs_alloc(&c, &g);
    ta_canary_fill(g.dq, nq * 4);
    ta_canary_fill(g.dq_lo, nq * 4);
    ta_canary_fill(g.dk, nk * 4);
    ta_canary_fill(g.dk_lo, nk * 4);
    ta_canary_fill(g.dv, nk * 4);
    ta_canary_fill(g.dv_lo, nk * 4);
    p = full_problem(&c);
    ws = ws_bwd(&p, TA_BACKEND_CPU, &wb);
    memset(&a, 0, sizeof a);
    a.q = c.q, a.k = c.k, a.v = c.v, a.o = c.o, a.d_o = c.d_o, a.lse = c.lse;
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dq = g.dq, a.dk = g.dk, a.dv = g.dv;
    a.dq_lo = g.dq_lo, a.dk_lo = g.dk_lo, a.dv_lo = g.dv_lo;
    a.accumulate = 2;
    expect_bwd(&p, &a, ws, wb, &g, nq, nk, TA_ERR_BAD_ARG, "args.accumulate", "accumulate 2");
    a.accumulate = -1;
    expect_bwd(&p, &a, ws, wb, &g, nq, nk, TA_ERR_BAD_ARG, "args.accumulate", "accumulate -1");
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dk_lo = NULL;
    expect_bwd(&p, &a, ws, wb, &g, nq, nk, TA_ERR_NULL_ARG, "args.dk_lo", "no dk_lo");
    a.dk_lo = g.dk; /* its hi words */
    expect_bwd(&p, &a, ws, wb, &g, nq, nk, TA_ERR_BAD_ARG, "args.dk_lo", "dk_lo = dk");
    a.dk_lo = g.dk_lo;
    a.dv_lo = (float *)c.v; /* an input */
    expect_bwd(&p, &a, ws, wb, &g, nq, nk, TA_ERR_BAD_ARG, "args.dv_lo", "dv_lo = v");
    a.dv_lo = g.dv_lo;
    a.dq = (char *)g.dq + 2; /* f32 words need 4-byte alignment (f16 would take 2) */
    p.dtype = TA_F16;
    c.eb = 2;
    {
        void *ws16;
        size_t wb16;
        void *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nk * 2);
        void *o16 = malloc(nq * 2), *do16 = malloc(nq * 2);
        ta_bwd_args a16 = a;
        if (!q16 || !k16 || !v16 || !o16 || !do16) exit(1);
        ta_fill_uniform(&r, q16, TA_F16, nq, -1.0f, 1.0f);
        ta_fill_uniform(&r, k16, TA_F16, nk, -1.0f, 1.0f);
        ta_fill_uniform(&r, v16, TA_F16, nk, -1.0f, 1.0f);
        ta_fill_uniform(&r, o16, TA_F16, nq, -1.0f, 1.0f);
        ta_fill_uniform(&r, do16, TA_F16, nq, -1.0f, 1.0f);
        a16.q = q16, a16.k = k16, a16.v = v16, a16.o = o16, a16.d_o = do16;
        ws16 = ws_bwd(&p, TA_BACKEND_CPU, &wb16);
        expect_bwd(&p, &a16, ws16, wb16, &g, nq, nk, TA_ERR_BAD_ARG, "args.dq",
                   "f16 problem, dq 2-byte aligned");
        a16.dq = g.dq; /* the f32 extents: dq's words reach past a 2-byte element's */
        a16.dq_lo = g.dq + nq / 2 + 8;
        expect_bwd(&p, &a16, ws16, wb16, &g, nq, nk, TA_ERR_BAD_ARG, "args.dq",
                   "f16 problem, dq_lo inside dq's f32 words");
        ta_test_free(ws16);
        free(q16), free(k16), free(v16), free(o16), free(do16);
    }
    p.dtype = TA_F32;
    c.eb = 4;
    a.dq = g.dq;
    { /* caller-run tasks: a scratch overlapping a lo buffer is refused */
        ta_task_plan tp;
        void *shared, *big;
        ta_bwd_args at = a;
        TA_CHECK(ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp) == TA_OK, "task plan");
        shared = ta_test_alloc(tp.shared_bytes);
        big = ta_test_alloc(tp.scratch_bytes + nq * 4 + 64);
        at.dq_lo = (float *)((char *)big + tp.scratch_bytes - 64); /* its last 64 bytes */
        TA_CHECK(ta_bwd_tasks_prepare(&p, TA_BACKEND_CPU, &at, shared, tp.shared_bytes) == TA_OK,
                 "tasks prepare with the mode");
        TA_CHECK(ta_task_run(shared, 0, 0, big, tp.scratch_bytes) == TA_ERR_BAD_ARG,
                 "a scratch overlapping args.dq_lo: not refused");
        ta_test_free(big);
        ta_test_free(shared);
    }
    p.conv_q = 1, p.conv_k = 3; /* the MTA conv: dconv_w's lo words required too */
    a.conv_w = conv_w, a.dconv_w = dconv_w;
    {
        void *wsc;
        size_t wbc;
        wsc = ws_bwd(&p, TA_BACKEND_CPU, &wbc);
        expect_bwd(&p, &a, wsc, wbc, &g, nq, nk, TA_ERR_NULL_ARG, "args.dconv_w_lo",
                   "accumulate with the conv, no dconv_w_lo");
        ta_test_free(wsc);
    }
    p.conv_q = p.conv_k = 0;
    a.conv_w = NULL, a.dconv_w = NULL;
    /* ta_bwd_finish */
    memset(&f, 0, sizeof f);
    ta_canary_fill(grad, nq * 4);
    f.dq_hi = g.dq;
    expect_finish(&p, &f, nq, TA_ERR_BAD_ARG, "args.dq", "dq_hi without dq");
    f.dq_hi = NULL;
    f.dq = grad;
    expect_finish(&p, &f, nq, TA_ERR_BAD_ARG, "args.dq_hi", "dq without dq_hi");
    f.dq_hi = grad; /* the output overlaps its input */
    expect_finish(&p, &f, nq, TA_ERR_BAD_ARG, "args.dq", "dq = dq_hi");
    f.dq_hi = g.dq;
    f.dq_strides.seq = -1;
    expect_finish(&p, &f, nq, TA_ERR_BAD_ARG, "args.dq_strides", "a negative stride");
    f.dq_strides.seq = 0;
    p.rope = TA_ROPE_INTERLEAVED, p.rope_pairs = 1, p.rope_rows = p.seq_q + p.seq_k;
    expect_finish(&p, &f, nq, TA_ERR_UNSUPPORTED, "problem", "finish with the rotary stage");
    p.rope = p.rope_pairs = p.rope_rows = 0;
    expect_finish(&p, NULL, nq, TA_ERR_NULL_ARG, "args", "NULL args");
    memset(g.dq, 0, nq * 4); /* hi words 0: dq = +0 */
    expect_finish(&p, &f, nq, TA_OK, "ok", "dq only");
    TA_CHECK(ta_get(grad, TA_F32, 0) == 0.0 && ta_get(grad, TA_F32, nq - 1) == 0.0,
             "finish of zero words: not 0");
    ta_test_free(ws);
    pairs_free(&g);
    free(c.q), free(c.k), free(c.v), free(c.o), free(c.d_o), free(c.lse);
    free(grad), free(conv_w), free(dconv_w);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_ring_bwd");
    const int count = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 6 : 24;
    int i;
    check_bad_input();
    for (i = 0; i < count; ++i)
        check_one(seed, i);
    printf("test_ring_bwd: bf16 worst (error - rounding) / magnitude: accumulated ranges %.3g, "
           "pairs rounded first %.3g; the rounded-first recipe's dq differs from one ta_bwd's in "
           "%d of the %d bf16 problems where the accumulated ranges' dq equals it\n",
           g_new_max, g_old_max, g_bf16_old_differs, g_bf16_bitwise_cases);
    TA_CHECK(g_bf16_bitwise_cases == 0 || g_bf16_old_differs > 0,
             "rounding each pair first never changed a bf16 bit");
    TA_CHECK(g_old_max >= g_new_max,
             "bf16: the rounded-first recipe (%g) is not worse than the "
             "accumulated ranges (%g)",
             g_old_max, g_new_max);
    return ta_test_finish("test_ring_bwd");
}
