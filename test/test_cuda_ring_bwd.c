/*
 * The backward over key and query ranges on CUDA (docs/api.md, "Backward over
 * key and query ranges"; issue 18 item 1): the same sequence of accumulating
 * ta_bwd calls (args.accumulate = TA_BWD_ACCUMULATE) on REF and on CUDA, then
 * ta_bwd_finish on each, for random problems:
 *
 *   - the sequence's queries cut into ranges [q0, q1) and its keys into
 *     ranges [k0, k1) (multiples of 64 or anywhere), every visible (query
 *     range, key range) pair one call on views of the full tensors (the
 *     pointers moved by q0 / k0 rows, the full strides; causal pairs by the
 *     bottom-right alignment, as test_ring_bwd), in a random order that keeps
 *     each query range's key ranges and each key range's query ranges
 *     ascending; one order, run on both backends;
 *   - causal or not, GQA, one or two batch entries, f32 and bf16, contiguous
 *     or [B, S, H, D] strides (the pairs too), head dims that take the
 *     register-blocked kernels (f32, D in {32, 64, 96, 128}, 16-byte rows)
 *     and the general ones (D = 80, D = 160 with two dk/dv feature groups,
 *     bf16, or every tensor moved by one element: rows off 16 bytes);
 *   - CUDA's pairs (hi and lo words of dq, dk, dv) == REF's, bit for bit;
 *     ta_bwd_finish on CUDA (the hi words gathered contiguous, the gradients
 *     under the call's strides, poisoned first) == ta_bwd_finish on REF;
 *   - with the key cut on multiples of 64, the finished dq == one plain CUDA
 *     ta_bwd's dq (and dk, dv too with the query cut on multiples of 64 and
 *     H = H_kv), bit for bit;
 *   - fast mode (bf16, D = 64): the accumulating calls run the exact kernels,
 *     so the same pairs as REF; the refusals that remain (accumulate = 2,
 *     the MTA conv without dconv_w_lo, pageable host memory for a lo buffer;
 *     the MTA conv's accumulating calls themselves: test_cuda_ring_mta).
 *
 * Fresh seed per run, printed; TA_SEED replays. Without a CUDA device: "no
 * CUDA device: skipped", exit 77.
 *
 *   test_cuda_ring_bwd [--quick] [--count N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ring_cuts.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

#define MAX_CUTS TA_RING_MAX_CUTS

typedef struct cr_case {
    int32_t b, h, hkv, s, d;
    ta_dtype dt;
    int causal, bshd, mis; /* mis: device tensors moved by one element */
    int offset;            /* CUDA's causal pairs by q_offset (REF's by seqlens_k) */
    int q_aligned, k_aligned;
    int precision;
    int32_t nq, nk;
    int32_t qcut[MAX_CUTS + 1], kcut[MAX_CUTS + 1];
    size_t eb, nq_el, nk_el; /* element size; elements of q-side, k-side tensors */
    ta_strides sq, sk;       /* strides of q-side, k-side tensors (pairs too) */
    /* host tensors (REF) and their device copies (CUDA, moved by mis) */
    void *q, *k, *v, *d_o, *o;
    float *lse;
    void *q_d, *k_d, *v_d, *d_o_d, *o_d;
} cr_case;

static ta_problem full_problem(const cr_case *c) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c->b;
    p.heads_q = c->h;
    p.heads_kv = c->hkv;
    p.seq_q = p.seq_k = c->s;
    p.head_dim = p.head_dim_v = c->d;
    p.dtype = c->dt;
    p.flags = c->causal ? TA_CAUSAL : 0;
    p.precision = (ta_precision)c->precision;
    return p;
}

/* Pair (query range a, key range b): 0 if nothing is visible; else its
 * problem and seqlens_k value (-1: none). test_ring_bwd's rule. */
static int pair_problem(const cr_case *c, int offset, int32_t a, int32_t b, ta_problem *p,
                        int32_t *seqlen) {
    *p = full_problem(c);
    return ta_ring_pair(c->qcut, c->kcut, c->causal, offset, a, b, p, seqlen);
}

static int32_t pair_order(const cr_case *c, ta_rng *r, int32_t *order) {
    return ta_ring_order(c->qcut, c->nq, c->kcut, c->nk, c->causal, r, order);
}

/* The six words' buffers: host (REF) or device (CUDA). */
typedef struct cr_pairs {
    float *w[6]; /* dq, dq_lo, dk, dk_lo, dv, dv_lo */
} cr_pairs;

static size_t words_of(const cr_case *c, int i) { return i < 2 ? c->nq_el : c->nk_el; }

static void pairs_host(const cr_case *c, cr_pairs *g) {
    int i;
    for (i = 0; i < 6; ++i) {
        g->w[i] = calloc(words_of(c, i), sizeof(float));
        if (!g->w[i]) exit(1);
    }
}

static void pairs_dev(const cr_case *c, cr_pairs *g) {
    int i;
    for (i = 0; i < 6; ++i) {
        CUDA_OK(cudaMalloc((void **)&g->w[i], words_of(c, i) * sizeof(float)));
        CUDA_OK(cudaMemset(g->w[i], 0, words_of(c, i) * sizeof(float))); /* the contract */
    }
}

static void *dev_copy(const void *h, size_t bytes, size_t pad) {
    char *d;
    CUDA_OK(cudaMalloc((void **)&d, bytes + pad));
    CUDA_OK(cudaMemcpy(d + pad, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* The lse rows of query range a, [B, H, q1 - q0], host; and on the device. */
static float *range_lse(const cr_case *c, int32_t a) {
    const int32_t q0 = c->qcut[a], n = c->qcut[a + 1] - q0;
    float *l = malloc((size_t)c->b * (size_t)c->h * (size_t)n * sizeof(float));
    int32_t bh;
    if (!l) exit(1);
    for (bh = 0; bh < c->b * c->h; ++bh)
        memcpy(l + (size_t)bh * (size_t)n, c->lse + (size_t)bh * (size_t)c->s + (size_t)q0,
               (size_t)n * sizeof(float));
    return l;
}

/* The calls of `order` on backend be into g (host words for REF, device
 * words for CUDA). */
static void run_ranges(const cr_case *c, ta_backend be, const int32_t *order, int32_t n,
                       const cr_pairs *g) {
    const int dev = be == TA_BACKEND_CUDA;
    const size_t pad = dev && c->mis ? c->eb : 0;
    int32_t i;
    for (i = 0; i < n; ++i) {
        const int32_t a = order[i] / MAX_CUTS, b = order[i] % MAX_CUTS;
        const size_t q0 = (size_t)((int64_t)c->qcut[a] * c->sq.seq);
        const size_t k0 = (size_t)((int64_t)c->kcut[b] * c->sk.seq);
        int32_t seqlen, seqlens[2];
        ta_problem p;
        ta_bwd_args ba;
        float *lse = range_lse(c, a), *lse_d = NULL;
        size_t wb = 0;
        void *ws = NULL;
        ta_status st;
        pair_problem(c, c->offset && dev, a, b, &p, &seqlen);
        memset(&ba, 0, sizeof ba);
        ba.q = (const char *)(dev ? c->q_d : c->q) + pad + q0 * c->eb;
        ba.o = (const char *)(dev ? c->o_d : c->o) + pad + q0 * c->eb;
        ba.d_o = (const char *)(dev ? c->d_o_d : c->d_o) + pad + q0 * c->eb;
        ba.k = (const char *)(dev ? c->k_d : c->k) + pad + k0 * c->eb;
        ba.v = (const char *)(dev ? c->v_d : c->v) + pad + k0 * c->eb;
        if (dev) {
            lse_d = dev_copy(lse, (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q * 4, 0);
            ba.lse = lse_d;
        } else {
            ba.lse = lse;
        }
        seqlens[0] = seqlens[1] = seqlen;
        ba.seqlens_k = seqlen >= 0 ? seqlens : NULL; /* host memory on every backend */
        ba.q_strides = ba.o_strides = ba.d_o_strides = ba.dq_strides = c->sq;
        ba.k_strides = ba.v_strides = ba.dk_strides = ba.dv_strides = c->sk;
        ba.accumulate = TA_BWD_ACCUMULATE;
        ba.dq = g->w[0] + q0;
        ba.dq_lo = g->w[1] + q0;
        ba.dk = g->w[2] + k0;
        ba.dk_lo = g->w[3] + k0;
        ba.dv = g->w[4] + k0;
        ba.dv_lo = g->w[5] + k0;
        TA_CHECK(ta_bwd_workspace_size(&p, be, &wb) == TA_OK, "bwd size");
        if (dev)
            CUDA_OK(cudaMalloc(&ws, wb ? wb : 1));
        else
            ws = ta_test_alloc(wb ? wb : 64);
        st = ta_bwd(&p, be, &ba, ws, wb, NULL);
        TA_CHECK(st == TA_OK, "pair (%d, %d) on backend %d: %s", (int)a, (int)b, (int)be,
                 ta_status_string(st));
        if (dev) {
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaFree(ws));
            CUDA_OK(cudaFree(lse_d));
        } else {
            ta_test_free(ws);
        }
        free(lse);
    }
}

/* Contiguous copy of words laid out by st ([B, heads, S, D]). */
static void gather(const cr_case *c, const float *src, const ta_strides *st, int32_t heads,
                   float *dst) {
    int32_t b, h, r;
    size_t at = 0;
    for (b = 0; b < c->b; ++b)
        for (h = 0; h < heads; ++h)
            for (r = 0; r < c->s; ++r, at += (size_t)c->d)
                memcpy(dst + at, src + (b * st->batch + h * st->head + r * st->seq),
                       (size_t)c->d * sizeof(float));
}

/* ta_bwd_finish on be of the hi words his (host), the gradients (host
 * results, poisoned first) under the case's strides. */
static void finish(const cr_case *c, ta_backend be, float *const his[3], void *out[3]) {
    const ta_problem p = full_problem(c);
    const size_t n[3] = {c->nq_el, c->nk_el, c->nk_el};
    ta_bwd_finish_args f;
    void *hd[3] = {NULL, NULL, NULL}, *gd[3] = {NULL, NULL, NULL};
    float *hc[3];
    int i;
    for (i = 0; i < 3; ++i) {
        hc[i] = malloc(n[i] * sizeof(float));
        if (!hc[i]) exit(1);
        gather(c, his[i], i == 0 ? &c->sq : &c->sk, i == 0 ? c->h : c->hkv, hc[i]);
        ta_poison(out[i], n[i] * c->eb);
    }
    memset(&f, 0, sizeof f);
    f.dq_strides = c->sq;
    f.dk_strides = f.dv_strides = c->sk;
    if (be == TA_BACKEND_CUDA) {
        for (i = 0; i < 3; ++i) {
            hd[i] = dev_copy(hc[i], n[i] * sizeof(float), 0);
            gd[i] = dev_copy(out[i], n[i] * c->eb, 0); /* poisoned */
        }
        f.dq_hi = hd[0], f.dk_hi = hd[1], f.dv_hi = hd[2];
        f.dq = gd[0], f.dk = gd[1], f.dv = gd[2];
    } else {
        f.dq_hi = hc[0], f.dk_hi = hc[1], f.dv_hi = hc[2];
        f.dq = out[0], f.dk = out[1], f.dv = out[2];
    }
    TA_CHECK(ta_bwd_finish(&p, be, &f, NULL) == TA_OK, "finish on backend %d", (int)be);
    for (i = 0; i < 3; ++i) {
        if (be == TA_BACKEND_CUDA) {
            CUDA_OK(cudaMemcpy(out[i], gd[i], n[i] * c->eb, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaFree(hd[i]));
            CUDA_OK(cudaFree(gd[i]));
        }
        free(hc[i]);
    }
}

/* One plain CUDA ta_bwd over the whole problem: gradients to host (poisoned first). */
static void cuda_full_bwd(const cr_case *c, void *out[3]) {
    const ta_problem p = full_problem(c);
    const size_t pad = c->mis ? c->eb : 0;
    const size_t n[3] = {c->nq_el, c->nk_el, c->nk_el};
    ta_bwd_args ba;
    void *gd[3], *ws;
    float *lse_d = dev_copy(c->lse, (size_t)c->b * (size_t)c->h * (size_t)c->s * 4, 0);
    size_t wb = 0;
    int i;
    for (i = 0; i < 3; ++i) {
        ta_poison(out[i], n[i] * c->eb);
        gd[i] = dev_copy(out[i], n[i] * c->eb, 0);
    }
    memset(&ba, 0, sizeof ba);
    ba.q = (const char *)c->q_d + pad;
    ba.k = (const char *)c->k_d + pad;
    ba.v = (const char *)c->v_d + pad;
    ba.o = (const char *)c->o_d + pad;
    ba.d_o = (const char *)c->d_o_d + pad;
    ba.lse = lse_d;
    ba.q_strides = ba.o_strides = ba.d_o_strides = ba.dq_strides = c->sq;
    ba.k_strides = ba.v_strides = ba.dk_strides = ba.dv_strides = c->sk;
    ba.dq = gd[0], ba.dk = gd[1], ba.dv = gd[2];
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wb) == TA_OK, "full bwd size");
    CUDA_OK(cudaMalloc(&ws, wb ? wb : 1));
    TA_CHECK(ta_bwd(&p, TA_BACKEND_CUDA, &ba, ws, wb, NULL) == TA_OK, "full CUDA bwd");
    for (i = 0; i < 3; ++i) {
        CUDA_OK(cudaMemcpy(out[i], gd[i], n[i] * c->eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaFree(gd[i]));
    }
    CUDA_OK(cudaFree(ws));
    CUDA_OK(cudaFree(lse_d));
}

static size_t count_diff(const void *x, const void *y, size_t n, size_t eb) {
    size_t i, diff = 0;
    for (i = 0; i < n; ++i)
        diff += memcmp((const char *)x + i * eb, (const char *)y + i * eb, eb) != 0;
    return diff;
}

static int g_problems, g_identical, g_rb, g_full_checked;

/* Problem idx of the run; fast: the fast-mode case (bf16, D = 64). */
static void check_one(uint64_t seed, int idx, int fast) {
    static const int32_t dims[6] = {32, 64, 96, 128, 80, 160};
    cr_case c;
    ta_rng r;
    ta_problem p;
    ta_fwd_args fa;
    int32_t order[MAX_CUTS * MAX_CUTS], n;
    cr_pairs gr, gd;
    cr_pairs gh; /* CUDA's words copied back */
    void *fin_r[3], *fin_c[3], *full_c[3];
    size_t wb, diff_pairs = 0, diff_fin = 0;
    void *ws;
    int i, rb;
    ta_rng_seed(&r, seed + 7919u * (uint64_t)(idx + 1));
    memset(&c, 0, sizeof c);
    c.b = ta_rng_int(&r, 0, 3) == 0 ? 2 : 1;
    c.hkv = ta_rng_int(&r, 1, 2);
    c.h = c.hkv * ta_rng_int(&r, 1, 2);
    c.d = dims[ta_rng_int(&r, 0, 5)];
    c.dt = ta_rng_int(&r, 0, 2) == 0 ? TA_BF16 : TA_F32;
    c.causal = ta_rng_int(&r, 0, 2) != 0;
    c.bshd = ta_rng_int(&r, 0, 2) == 0;
    c.offset = ta_rng_int(&r, 0, 1);
    c.mis = c.dt == TA_F32 && c.d <= 128 && ta_rng_int(&r, 0, 4) == 0;
    c.q_aligned = ta_rng_int(&r, 0, 2) != 0;
    c.k_aligned = ta_rng_int(&r, 0, 2) != 0;
    if (fast) {
        c.dt = TA_BF16;
        c.d = 64;
        c.mis = 0;
        c.precision = TA_PRECISION_FAST;
    }
    c.s = c.q_aligned || c.k_aligned ? 64 * ta_rng_int(&r, 2, 5) : ta_rng_int(&r, 90, 300);
    c.nq = ta_ring_make_cut(&r, c.s, c.q_aligned, c.qcut);
    c.nk = ta_ring_make_cut(&r, c.s, c.k_aligned, c.kcut);
    c.eb = ta_dtype_size(c.dt);
    c.nq_el = (size_t)c.b * (size_t)c.h * (size_t)c.s * (size_t)c.d;
    c.nk_el = (size_t)c.b * (size_t)c.hkv * (size_t)c.s * (size_t)c.d;
    c.sq = c.bshd ? ta_test_strides_bshd(c.h, c.s, c.d) : ta_test_strides_bhsd(c.h, c.s, c.d);
    c.sk = c.bshd ? ta_test_strides_bshd(c.hkv, c.s, c.d) : ta_test_strides_bhsd(c.hkv, c.s, c.d);
    rb = c.dt == TA_F32 && c.d <= 128 && c.d != 80 && !c.mis;
    c.q = malloc(c.nq_el * c.eb);
    c.o = malloc(c.nq_el * c.eb);
    c.d_o = malloc(c.nq_el * c.eb);
    c.k = malloc(c.nk_el * c.eb);
    c.v = malloc(c.nk_el * c.eb);
    c.lse = malloc((size_t)c.b * (size_t)c.h * (size_t)c.s * sizeof(float));
    if (!c.q || !c.o || !c.d_o || !c.k || !c.v || !c.lse) exit(1);
    for (i = 0; i < 3; ++i) {
        const size_t n_i = (i == 0 ? c.nq_el : c.nk_el) * c.eb;
        fin_r[i] = malloc(n_i);
        fin_c[i] = malloc(n_i);
        full_c[i] = malloc(n_i);
        if (!fin_r[i] || !fin_c[i] || !full_c[i]) exit(1);
    }
    /* wide scores (as test_ring_bwd): the order of the additions shows in the words */
    ta_fill_uniform(&r, c.q, c.dt, c.nq_el, -8.0f, 8.0f);
    ta_fill_uniform(&r, c.k, c.dt, c.nk_el, -2.0f, 2.0f);
    ta_fill_uniform(&r, c.v, c.dt, c.nk_el, -1.0f, 1.0f);
    ta_fill_uniform(&r, c.d_o, c.dt, c.nq_el, -1.0f, 1.0f);
    /* the forward over everything (REF), its o and lse the backward's inputs */
    p = full_problem(&c);
    p.precision = TA_PRECISION_EXACT;
    memset(&fa, 0, sizeof fa);
    fa.q = c.q, fa.k = c.k, fa.v = c.v, fa.o = c.o, fa.lse = c.lse;
    fa.q_strides = fa.o_strides = c.sq;
    fa.k_strides = fa.v_strides = c.sk;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &wb) == TA_OK, "fwd size");
    ws = ta_test_alloc(wb ? wb : 64);
    TA_CHECK(ta_fwd(&p, TA_BACKEND_REF, &fa, ws, wb, NULL) == TA_OK, "fwd");
    ta_test_free(ws);
    {
        const size_t pad = c.mis ? c.eb : 0;
        c.q_d = dev_copy(c.q, c.nq_el * c.eb, pad);
        c.o_d = dev_copy(c.o, c.nq_el * c.eb, pad);
        c.d_o_d = dev_copy(c.d_o, c.nq_el * c.eb, pad);
        c.k_d = dev_copy(c.k, c.nk_el * c.eb, pad);
        c.v_d = dev_copy(c.v, c.nk_el * c.eb, pad);
    }
    n = pair_order(&c, &r, order);
    pairs_host(&c, &gr);
    pairs_host(&c, &gh);
    pairs_dev(&c, &gd);
    run_ranges(&c, TA_BACKEND_REF, order, n, &gr);
    run_ranges(&c, TA_BACKEND_CUDA, order, n, &gd);
    for (i = 0; i < 6; ++i) {
        CUDA_OK(cudaMemcpy(gh.w[i], gd.w[i], words_of(&c, i) * sizeof(float),
                           cudaMemcpyDeviceToHost));
        diff_pairs += count_diff(gh.w[i], gr.w[i], words_of(&c, i), sizeof(float));
    }
    {
        float *his_r[3] = {gr.w[0], gr.w[2], gr.w[4]}, *his_c[3] = {gh.w[0], gh.w[2], gh.w[4]};
        finish(&c, TA_BACKEND_REF, his_r, fin_r);
        finish(&c, TA_BACKEND_CUDA, his_c, fin_c);
    }
    for (i = 0; i < 3; ++i)
        diff_fin += count_diff(fin_c[i], fin_r[i], i == 0 ? c.nq_el : c.nk_el, c.eb);
    printf("  problem %d: B=%d H=%d/%d D=%d S=%d %s %s%s%s%s, %d q ranges (%s), %d k ranges "
           "(%s), %d pairs, %s kernels: %zu pair words and %zu gradients != REF\n",
           idx, (int)c.b, (int)c.h, (int)c.hkv, (int)c.d, (int)c.s,
           c.dt == TA_F32 ? "f32" : "bf16",
           c.causal ? (c.offset ? "causal (CUDA: q_offset)" : "causal") : "full",
           c.bshd ? " bshd" : "",
           c.mis ? " moved" : "", fast ? " fast" : "", (int)c.nq, c.q_aligned ? "x64" : "any",
           (int)c.nk, c.k_aligned ? "x64" : "any", (int)n, rb ? "register-blocked" : "general",
           diff_pairs, diff_fin);
    TA_CHECK(diff_pairs == 0, "problem %d: CUDA pairs != REF pairs (%zu words)", idx, diff_pairs);
    TA_CHECK(diff_fin == 0, "problem %d: CUDA finish != REF finish (%zu elements)", idx, diff_fin);
    ++g_problems;
    g_identical += diff_pairs == 0 && diff_fin == 0;
    g_rb += rb;
    /* one plain CUDA ta_bwd: the ranges' dq where the key cut is on 64 (dk,
     * dv too with the query cut on 64 and H = H_kv) */
    if (c.k_aligned || (c.q_aligned && c.h == c.hkv)) {
        const int prec = c.precision;
        c.precision = TA_PRECISION_EXACT; /* fast mode's plain ta_bwd is other bits */
        cuda_full_bwd(&c, full_c);
        c.precision = prec;
        ++g_full_checked;
        if (c.k_aligned)
            TA_CHECK(memcmp(fin_c[0], full_c[0], c.nq_el * c.eb) == 0,
                     "problem %d: ranges' dq != one CUDA ta_bwd (%zu elements)", idx,
                     count_diff(fin_c[0], full_c[0], c.nq_el, c.eb));
        if (c.q_aligned && c.h == c.hkv)
            TA_CHECK(memcmp(fin_c[1], full_c[1], c.nk_el * c.eb) == 0 &&
                         memcmp(fin_c[2], full_c[2], c.nk_el * c.eb) == 0,
                     "problem %d: ranges' dk/dv != one CUDA ta_bwd (%zu, %zu elements)", idx,
                     count_diff(fin_c[1], full_c[1], c.nk_el, c.eb),
                     count_diff(fin_c[2], full_c[2], c.nk_el, c.eb));
    }
    for (i = 0; i < 6; ++i) {
        free(gr.w[i]);
        free(gh.w[i]);
        CUDA_OK(cudaFree(gd.w[i]));
    }
    for (i = 0; i < 3; ++i) {
        free(fin_r[i]);
        free(fin_c[i]);
        free(full_c[i]);
    }
    CUDA_OK(cudaFree(c.q_d));
    CUDA_OK(cudaFree(c.o_d));
    CUDA_OK(cudaFree(c.d_o_d));
    CUDA_OK(cudaFree(c.k_d));
    CUDA_OK(cudaFree(c.v_d));
    free(c.q), free(c.o), free(c.d_o), free(c.k), free(c.v), free(c.lse);
}

/* The refusals that remain on CUDA: accumulate = 2, the MTA conv without
 * dconv_w_lo (the conv itself is accepted, as on REF and CPU), a lo buffer in
 * pageable host memory; nothing written. */
static void check_refusals(void) {
    ta_problem p;
    ta_bwd_args a;
    ta_bwd_finish_args f;
    const int32_t s = 70, d = 16, h = 2;
    const size_t n = (size_t)h * (size_t)s * (size_t)d;
    void *buf[12];
    float *host_lo = malloc(n * sizeof(float)), *canary = malloc(n * sizeof(float));
    float conv_w[3] = {0.0f, 1.0f, 0.0f};
    float *conv_d, *dconv_d;
    size_t wb = 0;
    void *ws;
    int i;
    if (!host_lo || !canary) exit(1);
    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads_q = p.heads_kv = h, p.seq_q = p.seq_k = s;
    p.head_dim = p.head_dim_v = d, p.dtype = TA_F32, p.flags = TA_CAUSAL;
    ta_canary_fill(canary, n * sizeof(float));
    for (i = 0; i < 12; ++i)
        buf[i] = dev_copy(canary, n * sizeof(float), 0);
    conv_d = dev_copy(conv_w, sizeof conv_w, 0);
    dconv_d = dev_copy(conv_w, sizeof conv_w, 0);
    memset(&a, 0, sizeof a);
    a.q = buf[0], a.k = buf[1], a.v = buf[2], a.o = buf[3], a.d_o = buf[4];
    a.lse = buf[5]; /* [1, 2, 70] f32 < its n floats */
    a.dq = buf[6], a.dk = buf[7], a.dv = buf[8];
    a.dq_lo = buf[9], a.dk_lo = buf[10], a.dv_lo = host_lo; /* pageable: refused */
    a.accumulate = TA_BWD_ACCUMULATE;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wb) == TA_OK, "size");
    CUDA_OK(cudaMalloc(&ws, wb ? wb : 1));
    TA_CHECK(ta_bwd(&p, TA_BACKEND_CUDA, &a, ws, wb, NULL) == TA_ERR_BAD_ARG,
             "a pageable host lo buffer: not refused");
    a.accumulate = 2;
    TA_CHECK(ta_bwd(&p, TA_BACKEND_CUDA, &a, ws, wb, NULL) == TA_ERR_BAD_ARG,
             "accumulate 2: not refused");
    a.accumulate = TA_BWD_ACCUMULATE;
    a.dv_lo = (float *)buf[11];
    p.conv_q = 1, p.conv_k = 3;
    a.conv_w = conv_d, a.dconv_w = dconv_d;
    {
        size_t wbc = 0;
        void *wsc;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wbc) == TA_OK, "conv size");
        CUDA_OK(cudaMalloc(&wsc, wbc ? wbc : 1));
        TA_CHECK(ta_bwd(&p, TA_BACKEND_CUDA, &a, wsc, wbc, NULL) == TA_ERR_NULL_ARG,
                 "accumulate with the conv, no dconv_w_lo, on CUDA: not TA_ERR_NULL_ARG");
        CUDA_OK(cudaFree(wsc));
    }
    memset(&f, 0, sizeof f);
    p.conv_q = p.conv_k = 0;
    f.dq_hi = host_lo; /* pageable host memory */
    TA_CHECK(ta_bwd_finish(&p, TA_BACKEND_CUDA, &f, NULL) == TA_ERR_BAD_ARG,
             "ta_bwd_finish of pageable host words on CUDA: not refused");
    CUDA_OK(cudaDeviceSynchronize());
    for (i = 6; i < 12; ++i) { /* the outputs: untouched */
        CUDA_OK(cudaMemcpy(host_lo, buf[i], n * sizeof(float), cudaMemcpyDeviceToHost));
        TA_CHECK(ta_canary_intact(host_lo, n * sizeof(float)), "refused call wrote buffer %d", i);
    }
    for (i = 0; i < 12; ++i)
        CUDA_OK(cudaFree(buf[i]));
    CUDA_OK(cudaFree(conv_d));
    CUDA_OK(cudaFree(dconv_d));
    CUDA_OK(cudaFree(ws));
    free(host_lo);
    free(canary);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_ring_bwd");
    int count = 24, dev_count = 0, i;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) count = 8;
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) count = atoi(argv[++i]);
    }
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0 ||
        !ta_backend_available(TA_BACKEND_CUDA)) {
        (void)cudaGetLastError();
        printf("no CUDA device: skipped\n");
        return TA_TEST_SKIP;
    }
    check_refusals();
    for (i = 0; i < count; ++i)
        check_one(seed, i, 0);
    for (i = 0; i < 2; ++i)
        check_one(seed, count + i, 1);
    printf("test_cuda_ring_bwd: %d of %d problems bit-identical to REF (pairs and finished "
           "gradients; %d on the register-blocked kernels), %d checked against one CUDA ta_bwd\n",
           g_identical, g_problems, g_rb, g_full_checked);
    return ta_test_finish("test_cuda_ring_bwd");
}
