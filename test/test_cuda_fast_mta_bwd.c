/*
 * CUDA fast mode of the MTA backward (cuda/ta_cuda_fast_mta_bwd.cu: the
 * fold's gradients on tensor cores), label cuda:
 *
 *  1. accuracy: random problems (f16 and bf16; D = D_v in {64, 96, 128}; c_q
 *     in [1, 16], odd c_k in [1, 31], 6 x 11, 7 x 7, 1 x 1 and 16 x 31 often,
 *     the identity kernel sometimes; GQA; S_q != S_k; seqlens_k; sliding
 *     windows in three problems of ten, the fast backward's edge entries
 *     next to a binding window start included): the fast
 *     forward gives o and lse, then ta_bwd in fast mode (dq, dk, dv, dconv_w
 *     and the workspace poisoned) against the float64 oracle with D_i from
 *     the stored o. Each element's error over its magnitude
 *     (ta_oracle_bwd_grads_mag) must stay under TA_FAST_MTA_BWD_BOUND (dv:
 *     TA_FAST_MTA_DV_BOUND); an element with no visible pair must be 0. The
 *     worst errors per dtype and gradient are printed (docs/exactness.md
 *     quotes them).
 *  1b. the entries next to a window start (--count / 4 + 4 problems): a
 *     window start at least E keys left of the diagonal, scale 0.02 and a
 *     kernel near the identity, so the softmax is flat and those entries'
 *     gradients weigh (random kernels make it peaked: with the window
 *     start's band phase removed, part 1 still passed on seed
 *     1795504722334244704, only its determinism check noticed).
 *  2. determinism: each problem's backward run again (outputs and workspace
 *     poisoned with other bytes): the same bytes.
 *  3. the size query counts the fast backward's regions (no GPU needed).
 *  4. the rotary stage (--count / 2 + 4 problems of part 1's kinds with
 *     random tables, positions, one table or one per kv head, both pair
 *     conventions; one in five identity tables): the fast forward and
 *     backward on q, k turned once (dq, dk of the turned tensors in f32,
 *     turned back, rounded once) against the oracle on q, k turned in
 *     double and rounded to the storage type as the copies are (the inputs
 *     the kernels read), its dq, dk turned back in double (magnitudes |c| m_a
 *     + |s| m_b), the same bounds; dv and dconv_w bit for bit the call's without the stage
 *     on q, k turned on the host as the copies are (the fast kernels ran on
 *     them: exact mode's dv differs, and the test fails if it never does);
 *     identity tables: every gradient that call's on the same q, k.
 *
 * Each problem's tile_config (forward, dq and dk/dv kernels) is 0, 1 (the
 * mma.sync dq and dk/dv kernels) or, on an sm_90 device, 5 (the wgmma ones,
 * dk/dv at D = 64 and 128: 0 is 5 there) in turn.
 *
 *   test_cuda_fast_mta_bwd [--count N] [--cfg N]     TA_SEED replays a run.
 * Without a CUDA device: prints "no CUDA device: skipped" (after part 3) and
 * exits 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle.h"
#include "test_cuda_rope_util.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

/* Bounds (docs/exactness.md section 9, "Fast MTA backward"), in units of the
 * storage type's u: dC, P and kf are rounded to it once each before a
 * tensor-core product. */
#define TA_FAST_U(dt)             ((dt) == TA_BF16 ? 0x1p-8 : 0x1p-11)
#define TA_FAST_MTA_BWD_BOUND(dt) (4.0 * TA_FAST_U(dt))
#define TA_FAST_MTA_DV_BOUND(dt)  (2.0 * TA_FAST_U(dt))
/* Absolute slack before the relative bound: a gradient that lands below
 * f16's normal range (2^-14) is rounded to a subnormal step of 2^-24 (half
 * of it at the store, the rest from dC rounded there too; seed
 * 1795501215082283957 problem 1, f16 S_q = 1, S_k = 257: dk near 1e-7 erred
 * by 2.2e-8 .. 2.8e-8, 5.97u of a magnitude of 1e-5 without it); bf16 and
 * dw's f32 keep f32's range, where only p below 2^-126 is flushed. */
#define TA_FAST_MTA_SLACK(dt) ((dt) == TA_F16 ? 0x1p-24 : 1e-30)

/* worst errors in units of u: [bf16][dq, dk, dv, dw]; g_rope_worst: part 4's */
static double g_worst[2][4], g_rope_worst[2][4];
/* problems with a window start inside the keys (the edge entries' path) */
static int g_edge_problems;
/* an sm_90 device: tile_config 5 (the wgmma forward and dq kernels) is drawn;
 * g_cfg >= 0: every problem's tile_config (--cfg) */
static int g_sm90, g_cfg = -1;
/* problems per tile_config drawn: 0, 1 (mma.sync dq), 5 */
static int g_cfg_count[3];

/* A problem: host inputs, device buffers. */
typedef struct bcase {
    ta_problem p;
    int32_t seqlens[4];
    int use_seqlens, identity, flat;
    size_t eb, n[4], nw, no, nlse; /* n: q, k, v, (unused); elements */
    void *h_q, *h_k, *h_v, *h_do;
    float *h_w;
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *w, *lse, *dw;
    size_t ws_bytes, fws_bytes;
    /* the rotary stage (p.rope != 0): host tables and positions, their
     * device copies; rope_id: identity tables */
    ta_trope tr;
    int rope_id;
    float *dcos, *dsin;
    int32_t *dpos_q, *dpos_k;
} bcase;

static size_t cnt(int32_t b, int32_t h, int32_t s, int32_t d) {
    return (size_t)b * (size_t)h * (size_t)s * (size_t)d;
}

static void *dmalloc(size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 64));
    return d;
}

static void *dcopy(const void *src, size_t bytes) {
    void *d = dmalloc(bytes);
    CUDA_OK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

static int32_t any_len(ta_rng *r) {
    static const int32_t lens[] = {1, 5, 16, 31, 64, 65, 100, 127, 128, 129, 200, 257};
    return ta_rng_int(r, 0, 3) == 0
               ? ta_rng_int(r, 1, 300)
               : lens[ta_rng_int(r, 0, (int32_t)(sizeof lens / sizeof *lens) - 1)];
}

/* Problem idx of the seed: shape, conv, inputs. flat: a problem for the
 * entries next to a window start, whose gradients a peaked softmax hides
 * (most random kernels make one): a window start at least E keys left of
 * the diagonal inside the keys, a small scale and a kernel near the
 * identity, so that every visible entry carries weight. */
static void make_case(bcase *c, ta_rng *r, int flat, int rope) {
    static const int32_t dims[3] = {64, 96, 128};
    ta_problem *p = &c->p;
    const int32_t kind = ta_rng_int(r, 0, 5);
    size_t i;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = p->head_dim_v = dims[ta_rng_int(r, 0, 2)];
    p->seq_k = any_len(r);
    p->seq_q = ta_rng_int(r, 0, 2) == 0 ? any_len(r) : p->seq_k;
    p->dtype = ta_rng_int(r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->flags = TA_CAUSAL;
    ta_test_mta_conv(r, kind, p);
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.02f, 0.3f);
    ta_test_random_window(r, p, 30);
    c->use_seqlens = ta_rng_int(r, 0, 3) == 0;
    ta_test_seqlens(r, p, c->seqlens);
    c->identity = ta_rng_int(r, 0, 4) == 0;
    if (flat) {
        const int32_t e = (p->conv_k - 1) / 2 + p->conv_q - 1;
        p->seq_k = p->seq_k < e + 40 ? e + 40 : p->seq_k;
        p->flags |= TA_WINDOW;
        p->window_left = ta_rng_int(r, e, p->seq_k - 2);
        p->window_right = -1;
        p->scale = 0.02f;
        c->identity = 0;
        c->flat = 1;
    }
    c->eb = ta_dtype_size(p->dtype);
    c->n[0] = cnt(p->batch, p->heads_q, p->seq_q, p->head_dim);
    c->n[1] = cnt(p->batch, p->heads_kv, p->seq_k, p->head_dim);
    c->n[2] = cnt(p->batch, p->heads_kv, p->seq_k, p->head_dim_v);
    c->no = cnt(p->batch, p->heads_q, p->seq_q, p->head_dim_v);
    c->nlse = cnt(p->batch, p->heads_q, p->seq_q, 1);
    c->nw = (size_t)p->heads_q * (size_t)(p->conv_q * p->conv_k);
    c->h_q = malloc(c->n[0] * c->eb);
    c->h_k = malloc(c->n[1] * c->eb);
    c->h_v = malloc(c->n[2] * c->eb);
    c->h_do = malloc(c->no * c->eb);
    c->h_w = (float *)malloc(c->nw * sizeof(float));
    if (!c->h_q || !c->h_k || !c->h_v || !c->h_do || !c->h_w) exit(1);
    ta_fill_uniform(r, c->h_q, p->dtype, c->n[0], -2.0f, 2.0f);
    ta_fill_uniform(r, c->h_k, p->dtype, c->n[1], -2.0f, 2.0f);
    ta_fill_uniform(r, c->h_v, p->dtype, c->n[2], -1.0f, 1.0f);
    ta_fill_uniform(r, c->h_do, p->dtype, c->no, -1.0f, 1.0f);
    for (i = 0; i < c->nw; ++i) { /* identity: w[h][c_q - 1][P] = 1 */
        const float id = (float)((int32_t)(i % (size_t)(p->conv_q * p->conv_k)) ==
                                 (p->conv_q - 1) * p->conv_k + (p->conv_k - 1) / 2);
        c->h_w[i] = c->identity ? id
                    : c->flat   ? id + ta_rng_uniform(r, -0.1f, 0.1f)
                                : ta_rng_uniform(r, -0.6f, 0.6f);
    }
    if (rope) { /* drawn last: the problems without the stage keep their draws */
        c->rope_id = ta_rng_int(r, 0, 4) == 0;
        ta_trope_make(r, p, c->rope_id, &c->tr);
    }
}

static void describe(const bcase *c, char *buf, size_t n) {
    const ta_problem *p = &c->p;
    snprintf(buf, n,
             "%s B=%d H=%d/%d S_q=%d S_k=%d D=%d conv %dx%d%s%s scale %g window %d/%d cfg %d",
             p->dtype == TA_BF16 ? "bf16" : "f16", (int)p->batch, (int)p->heads_q, (int)p->heads_kv,
             (int)p->seq_q, (int)p->seq_k, (int)p->head_dim, (int)p->conv_q, (int)p->conv_k,
             c->identity ? " identity" : "", c->use_seqlens ? " seqlens" : "", (double)p->scale,
             (int)p->window_left, (int)p->window_right, (int)p->tile_config);
    if (p->rope)
        snprintf(buf + strlen(buf), n - strlen(buf), " rope %s pairs %d rows %d hs %d pos %s/%s%s",
                 p->rope == TA_ROPE_HALF ? "half" : "interleaved", (int)p->rope_pairs,
                 (int)p->rope_rows, (int)p->rope_head_stride, c->tr.pos_q ? "given" : "NULL",
                 c->tr.pos_k ? "given" : "NULL", c->rope_id ? " identity" : "");
}

/* The forward (fast) into c->o, c->lse on the device. */
static ta_status run_fwd(bcase *c) {
    ta_fwd_args a;
    void *ws;
    ta_status st = ta_fwd_workspace_size(&c->p, TA_BACKEND_CUDA, &c->fws_bytes);
    if (st != TA_OK) return st;
    ws = dmalloc(c->fws_bytes);
    memset(&a, 0, sizeof a);
    a.q = c->q;
    a.k = c->k;
    a.v = c->v;
    a.o = c->o;
    a.lse = c->lse;
    a.conv_w = c->w;
    a.seqlens_k = c->use_seqlens ? c->seqlens : NULL;
    if (c->p.rope) {
        a.rope.cos = c->dcos;
        a.rope.sin = c->dsin;
        a.rope.pos_q = c->dpos_q;
        a.rope.pos_k = c->dpos_k;
    }
    st = ta_fwd(&c->p, TA_BACKEND_CUDA, &a, ws, c->fws_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(ws);
    return st;
}

/* The backward (fast) with outputs poisoned to `byte` and the workspace to
 * ~byte; the gradients copied into out[0..3] (dq, dk, dv, dw). */
static ta_status run_bwd(bcase *c, int byte, void *out[4]) {
    ta_bwd_args a;
    ta_status st;
    CUDA_OK(cudaMemset(c->dq, byte, c->n[0] * c->eb));
    CUDA_OK(cudaMemset(c->dk, byte, c->n[1] * c->eb));
    CUDA_OK(cudaMemset(c->dv, byte, c->n[2] * c->eb));
    CUDA_OK(cudaMemset(c->dw, byte, c->nw * sizeof(float)));
    CUDA_OK(cudaMemset(c->ws, ~byte & 0xFF, c->ws_bytes ? c->ws_bytes : 64));
    memset(&a, 0, sizeof a);
    a.q = c->q;
    a.k = c->k;
    a.v = c->v;
    a.o = c->o;
    a.d_o = c->d_o;
    a.lse = c->lse;
    a.conv_w = c->w;
    a.dq = c->dq;
    a.dk = c->dk;
    a.dv = c->dv;
    a.dconv_w = c->dw;
    a.seqlens_k = c->use_seqlens ? c->seqlens : NULL;
    if (c->p.rope) {
        a.rope.cos = c->dcos;
        a.rope.sin = c->dsin;
        a.rope.pos_q = c->dpos_q;
        a.rope.pos_k = c->dpos_k;
    }
    st = ta_bwd(&c->p, TA_BACKEND_CUDA, &a, c->ws, c->ws_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out[0], c->dq, c->n[0] * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out[1], c->dk, c->n[1] * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out[2], c->dv, c->n[2] * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out[3], c->dw, c->nw * sizeof(float), cudaMemcpyDeviceToHost));
    return st;
}

/* Gradient t of the run (storage type, or f32 for dw) against the oracle. */
static size_t compare(const bcase *c, int t, const void *got, const double *orc, const double *mag,
                      size_t n, const char *desc) {
    static const char *const names[4] = {"dq", "dk", "dv", "dconv_w"};
    const ta_dtype dt = t == 3 ? TA_F32 : c->p.dtype;
    const double u = TA_FAST_U(c->p.dtype);
    const double bound =
        t == 2 ? TA_FAST_MTA_DV_BOUND(c->p.dtype) : TA_FAST_MTA_BWD_BOUND(c->p.dtype);
    const int ti = c->p.dtype == TA_BF16;
    size_t i, bad = 0;
    for (i = 0; i < n; ++i) {
        const double x = ta_get(got, dt, i);
        double e;
        if (mag[i] == 0.0) {
            if (!(x == 0.0) && bad++ < 3)
                TA_CHECK(0, "%s: %s[%zu] = %g, want 0 (no visible pair)", desc, names[t], i, x);
            continue;
        }
        e = fabs(x - orc[i]) - TA_FAST_MTA_SLACK(dt);
        e = (e < 0.0 ? 0.0 : e) / mag[i];
        if (!(e <= bound) && bad++ < 3)
            TA_CHECK(0, "%s: %s[%zu] = %.8g, oracle %.8g, error %.3g u of %g", desc, names[t], i, x,
                     orc[i], e / u, mag[i]);
        if (e / u > g_worst[ti][t] || e != e) g_worst[ti][t] = e / u;
        if (c->p.rope && (e / u > g_rope_worst[ti][t] || e != e)) g_rope_worst[ti][t] = e / u;
    }
    return bad;
}

/* Problem p's forward and backward on the host inputs hq, hk (c's others),
 * the gradients into out[0..3] as run_bwd; c's device q, k, o, lse are
 * overwritten (q, k restored from c's host inputs after). */
static ta_status rerun(bcase *c, const ta_problem *p, const void *hq, const void *hk,
                       void *out[4]) {
    const ta_problem keep = c->p;
    void *const keep_ws = c->ws;
    const size_t keep_bytes = c->ws_bytes;
    ta_status st;
    c->p = *p;
    CUDA_OK(cudaMemcpy(c->q, hq, c->n[0] * c->eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c->k, hk, c->n[1] * c->eb, cudaMemcpyHostToDevice));
    st = run_fwd(c);
    if (st == TA_OK) st = ta_bwd_workspace_size(&c->p, TA_BACKEND_CUDA, &c->ws_bytes);
    if (st == TA_OK) {
        c->ws = dmalloc(c->ws_bytes);
        st = run_bwd(c, 0x5E, out);
        cudaFree(c->ws);
    }
    c->p = keep;
    c->ws = keep_ws;
    c->ws_bytes = keep_bytes;
    CUDA_OK(cudaMemcpy(c->q, c->h_q, c->n[0] * c->eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c->k, c->h_k, c->n[1] * c->eb, cudaMemcpyHostToDevice));
    return st;
}

/* Part 4's problems (the rotary stage): problems whose fast dv differs from
 * exact mode's (the check that the fast kernels ran must be able to fail),
 * and their count. */
static int g_rope_vs_exact, g_rope_problems;

/* Part 4 for a problem with the rotary stage, after part 1 (got: its
 * gradients): (a) dv and dconv_w bit for bit those of the call without the
 * stage on q, k turned on the host as the fast path turns its copies (so
 * the fast kernels ran on the copies: the exact kernels' bits differ, which
 * g_rope_vs_exact counts); (b) identity tables: every gradient bit for bit
 * the call's without the stage on the same q, k (up to the sign of a zero). */
static void check_rope_extra(bcase *c, void *const got[4], const char *desc) {
    const size_t bytes[4] = {c->n[0] * c->eb, c->n[1] * c->eb, c->n[2] * c->eb,
                             c->nw * sizeof(float)};
    void *alt[4], *tq = malloc(bytes[0] ? bytes[0] : 1), *tk = malloc(bytes[1] ? bytes[1] : 1);
    ta_problem p2 = c->p, px = c->p;
    ta_status st;
    int t;
    if (!tq || !tk) exit(1);
    for (t = 0; t < 4; ++t)
        if (!(alt[t] = malloc(bytes[t] ? bytes[t] : 1))) exit(1);
    p2.rope = p2.rope_pairs = p2.rope_rows = p2.rope_row_stride = p2.rope_head_stride = 0;
    memcpy(tq, c->h_q, bytes[0]);
    memcpy(tk, c->h_k, bytes[1]);
    ta_trope_turn_store(&c->p, &c->tr, 0, tq, c->p.seq_q, 0);
    ta_trope_turn_store(&c->p, &c->tr, 1, tk, c->p.seq_k, 0);
    st = rerun(c, &p2, tq, tk, alt);
    TA_CHECK(st == TA_OK && memcmp(got[2], alt[2], bytes[2]) == 0 &&
                 memcmp(got[3], alt[3], bytes[3]) == 0,
             "%s: dv / dconv_w differ from the call without the stage on q, k turned on the "
             "host (%s)",
             desc, ta_status_string(st));
    if (c->rope_id) {
        st = rerun(c, &p2, c->h_q, c->h_k, alt);
        for (t = 0; t < 4; ++t)
            TA_CHECK(st == TA_OK && ta_trope_same(got[t], alt[t], bytes[t] / (t == 3 ? 4 : c->eb),
                                                  t == 3 ? 4 : c->eb),
                     "%s: identity tables: gradient %d differs from the call without the stage "
                     "(%s)",
                     desc, t, ta_status_string(st));
    }
    px.precision = TA_PRECISION_EXACT;
    st = rerun(c, &px, c->h_q, c->h_k, alt);
    TA_CHECK(st == TA_OK, "%s: exact mode: %s", desc, ta_status_string(st));
    if (st == TA_OK && memcmp(got[2], alt[2], bytes[2]) != 0) ++g_rope_vs_exact;
    if (g_rope_problems++ < 2) printf("rope problem: %s\n", desc);
    for (t = 0; t < 4; ++t)
        free(alt[t]);
    free(tq);
    free(tk);
}

/* Parts 1 and 2 for problem idx (flat: make_case's; rope: with the rotary
 * stage, and part 4): returns 1 if it passed. */
static int check_problem(uint64_t seed, int idx, int flat, int rope) {
    bcase c;
    ta_rng r;
    char desc[256];
    void *got[4], *again[4];
    double *orc[4], *mag[4], *wq, *wk, *wv, *wdo, *wo, *ww;
    size_t ns[4], bad = 0, i;
    ta_oracle_in in;
    ta_oracle_grads g, gm;
    ta_problem p0;
    ta_status st;
    int t;
    ta_rng_seed(&r, seed + UINT64_C(0x51ed27) * (uint64_t)(idx + 1));
    make_case(&c, &r, flat, rope);
    /* tile_config (no draw from r: a seed's problems stay as they were): 0,
     * 1 (the mma.sync dq kernel) and, on sm_90, 5 (the wgmma one; 0 is 5
     * there) in turn */
    c.p.tile_config = g_cfg >= 0 ? g_cfg : idx % 3 == 1 ? 1 : idx % 3 == 2 && g_sm90 ? 5 : 0;
    ++g_cfg_count[c.p.tile_config == 5 ? 2 : c.p.tile_config == 1 ? 1 : 0];
    if ((c.p.flags & TA_WINDOW) && c.p.window_left >= 0 && c.p.window_left < c.p.seq_k)
        ++g_edge_problems;
    describe(&c, desc, sizeof desc);
    snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " #%d", idx);
    c.q = dcopy(c.h_q, c.n[0] * c.eb);
    c.k = dcopy(c.h_k, c.n[1] * c.eb);
    c.v = dcopy(c.h_v, c.n[2] * c.eb);
    c.d_o = dcopy(c.h_do, c.no * c.eb);
    c.w = (float *)dcopy(c.h_w, c.nw * sizeof(float));
    c.o = dmalloc(c.no * c.eb);
    c.lse = (float *)dmalloc(c.nlse * sizeof(float));
    c.dq = dmalloc(c.n[0] * c.eb);
    c.dk = dmalloc(c.n[1] * c.eb);
    c.dv = dmalloc(c.n[2] * c.eb);
    c.dw = (float *)dmalloc(c.nw * sizeof(float));
    if (rope) {
        c.dcos = (float *)dcopy(c.tr.cos, c.tr.n_tab * sizeof(float));
        c.dsin = (float *)dcopy(c.tr.sin, c.tr.n_tab * sizeof(float));
        if (c.tr.pos_q)
            c.dpos_q = (int32_t *)dcopy(c.tr.pos_q, cnt(c.p.batch, 1, c.p.seq_q, 4));
        if (c.tr.pos_k)
            c.dpos_k = (int32_t *)dcopy(c.tr.pos_k, cnt(c.p.batch, 1, c.p.seq_k, 4));
    }
    ns[0] = c.n[0];
    ns[1] = c.n[1];
    ns[2] = c.n[2];
    ns[3] = c.nw;
    for (t = 0; t < 4; ++t) {
        const size_t bytes = ns[t] * (t == 3 ? sizeof(float) : c.eb);
        got[t] = malloc(bytes ? bytes : 1);
        again[t] = malloc(bytes ? bytes : 1);
        orc[t] = (double *)malloc((ns[t] ? ns[t] : 1) * sizeof(double));
        mag[t] = (double *)malloc((ns[t] ? ns[t] : 1) * sizeof(double));
        if (!got[t] || !again[t] || !orc[t] || !mag[t]) exit(1);
    }
    st = run_fwd(&c);
    TA_CHECK(st == TA_OK, "%s: ta_fwd: %s", desc, ta_status_string(st));
    if (st == TA_OK) {
        st = ta_bwd_workspace_size(&c.p, TA_BACKEND_CUDA, &c.ws_bytes);
        TA_CHECK(st == TA_OK, "%s: ta_bwd_workspace_size: %s", desc, ta_status_string(st));
    }
    if (st == TA_OK) {
        c.ws = dmalloc(c.ws_bytes);
        st = run_bwd(&c, 0xFF, got); /* NaN in every dtype */
        TA_CHECK(st == TA_OK, "%s: ta_bwd: %s", desc, ta_status_string(st));
    }
    if (st == TA_OK) {
        void *ho = malloc(c.no * c.eb);
        if (!ho) exit(1);
        CUDA_OK(cudaMemcpy(ho, c.o, c.no * c.eb, cudaMemcpyDeviceToHost));
        wq = ta_oracle_widen(c.h_q, c.p.dtype, c.n[0]);
        wk = ta_oracle_widen(c.h_k, c.p.dtype, c.n[1]);
        wv = ta_oracle_widen(c.h_v, c.p.dtype, c.n[2]);
        wdo = ta_oracle_widen(c.h_do, c.p.dtype, c.no);
        wo = ta_oracle_widen(ho, c.p.dtype, c.no);
        ww = ta_oracle_widen(c.h_w, TA_F32, c.nw);
        if (!wq || !wk || !wv || !wdo || !wo || !ww) exit(1);
        p0 = c.p;
        if (rope) { /* the oracle on q, k turned in double and rounded as the copies are */
            ta_trope_turn_double(&c.p, &c.tr, 0, wq, c.p.seq_q, 0, 0);
            ta_trope_turn_double(&c.p, &c.tr, 1, wk, c.p.seq_k, 0, 0);
            ta_trope_round(wq, c.n[0], c.p.dtype);
            ta_trope_round(wk, c.n[1], c.p.dtype);
            p0.rope = p0.rope_pairs = p0.rope_rows = p0.rope_row_stride = p0.rope_head_stride = 0;
        }
        memset(&in, 0, sizeof in);
        in.q = wq;
        in.k = wk;
        in.v = wv;
        in.d_o = wdo;
        in.o = wo;
        in.conv_w = ww;
        in.seqlens_k = c.use_seqlens ? c.seqlens : NULL;
        g.dq = orc[0];
        g.dk = orc[1];
        g.dv = orc[2];
        g.dconv_w = orc[3];
        gm.dq = mag[0];
        gm.dk = mag[1];
        gm.dv = mag[2];
        gm.dconv_w = mag[3];
        if (ta_oracle_bwd_grads(&p0, &in, &g) != 0 || ta_oracle_bwd_grads_mag(&p0, &in, &gm) != 0)
            exit(1);
        if (rope) { /* dq, dk of the stored q, k: R^T of the turned ones', and their magnitudes */
            ta_trope_turn_double(&c.p, &c.tr, 0, orc[0], c.p.seq_q, 0, 1);
            ta_trope_turn_double(&c.p, &c.tr, 1, orc[1], c.p.seq_k, 0, 1);
            ta_trope_turn_double(&c.p, &c.tr, 0, mag[0], c.p.seq_q, 0, 2);
            ta_trope_turn_double(&c.p, &c.tr, 1, mag[1], c.p.seq_k, 0, 2);
        }
        for (t = 0; t < 4; ++t)
            bad += compare(&c, t, got[t], orc[t], mag[t], ns[t], desc);
        /* part 2: again, other poison: the same bytes */
        st = run_bwd(&c, 0x7F, again);
        TA_CHECK(st == TA_OK, "%s: second ta_bwd: %s", desc, ta_status_string(st));
        for (t = 0; t < 4 && st == TA_OK; ++t)
            TA_CHECK(memcmp(got[t], again[t], ns[t] * (t == 3 ? sizeof(float) : c.eb)) == 0,
                     "%s: gradient %d differs between two runs", desc, t);
        if (rope && st == TA_OK) check_rope_extra(&c, got, desc);
        free(ho);
        free(wq);
        free(wk);
        free(wv);
        free(wdo);
        free(wo);
        free(ww);
    }
    if (bad) fprintf(stderr, "%s: %zu elements out of bound\n", desc, bad);
    if (idx < 3) printf("problem %d: %s\n", idx, desc);
    cudaFree(c.q);
    cudaFree(c.k);
    cudaFree(c.v);
    cudaFree(c.d_o);
    cudaFree(c.w);
    cudaFree(c.o);
    cudaFree(c.lse);
    cudaFree(c.dq);
    cudaFree(c.dk);
    cudaFree(c.dv);
    cudaFree(c.dw);
    cudaFree(c.ws);
    cudaFree(c.dcos);
    cudaFree(c.dsin);
    cudaFree(c.dpos_q);
    cudaFree(c.dpos_k);
    ta_trope_free(&c.tr);
    for (i = 0; i < 4; ++i) {
        free(got[i]);
        free(again[i]);
        free(orc[i]);
        free(mag[i]);
    }
    free(c.h_q);
    free(c.h_k);
    free(c.h_v);
    free(c.h_do);
    free(c.h_w);
    return st == TA_OK && bad == 0;
}

/* Part 3 (no GPU needed): the fast backward's workspace holds the exact
 * backward's regions and its own: kf (storage type), diag, g (E per row),
 * dsb (2E per row), dq_band (D per row), dkf (c_q D per key), the dw
 * partials (c_q c_k per 32 keys and per 32 rows); f32 but kf. */
static void check_size_query(void) {
    ta_problem p;
    size_t fast = 0, exact = 0, want;
    const size_t bh = 2 * 8, s = 1000, d = 128, e = 5 + 5, ncw = 6 * 11;
    memset(&p, 0, sizeof p);
    p.batch = 2;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.seq_q = p.seq_k = 1000;
    p.head_dim = p.head_dim_v = 128;
    p.dtype = TA_BF16;
    p.flags = TA_CAUSAL;
    p.conv_q = 6;
    p.conv_k = 11;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &exact) == TA_OK, "exact size query");
    p.precision = TA_PRECISION_FAST;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &fast) == TA_OK, "fast size query");
    want = bh * s * 6 * d * 2 + bh * s * e * 4 * 4 + bh * s * d * 4 + bh * s * 6 * d * 4 +
           bh * ((s + 31) / 32) * ncw * 4 * 2;
    TA_CHECK(fast >= exact + want && fast <= exact + want + 8 * 64,
             "fast MTA backward workspace %zu, want %zu + %zu (+ alignment)", fast, exact, want);
    { /* the rotary stage: the turned q, k (storage type) and the f32 dq, dk
         before the turn back */
        size_t rot = 0;
        const size_t nq = bh * s * d, nk = (size_t)2 * 2 * s * d;
        p.rope = TA_ROPE_INTERLEAVED;
        p.rope_pairs = 16;
        p.rope_rows = 1000;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &rot) == TA_OK, "rope size query");
        want = fast + (nq + nk) * (2 + 4);
        TA_CHECK(rot >= want && rot <= want + 4 * 64,
                 "fast MTA backward workspace with the stage %zu, want %zu (+ alignment)", rot,
                 want);
    }
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_fast_mta_bwd");
    int count = 40, i, failed = 0, n_dev = 0;
    for (i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--count") == 0)
            count = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cfg") == 0)
            g_cfg = atoi(argv[++i]);
    check_size_query();
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_fast_mta_bwd") : TA_TEST_SKIP;
    }
    {
        int major = 0, minor = 0;
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
        g_sm90 = major == 9 && minor == 0;
        printf("device compute capability %d.%d: tile_config 5 (the wgmma dq, dk/dv kernels) %s\n",
               major, minor, g_sm90 ? "drawn" : "not drawn (sm_90 only)");
    }
    for (i = 0; i < count; ++i)
        failed += !check_problem(seed, i, 0, 0);
    for (i = 0; i < count / 4 + 4; ++i) /* part 1b: the window start's entries, flat */
        failed += !check_problem(seed, 100000 + i, 1, 0);
    for (i = 0; i < count / 2 + 4; ++i) /* part 4: the rotary stage */
        failed += !check_problem(seed, 200000 + i, 0, 1);
    TA_CHECK(g_rope_vs_exact > 0,
             "rope: all %d problems gave exact mode's dv: the check that the fast kernels ran "
             "cannot fail",
             g_rope_problems);
    printf("rope: %d problems, %d of them differ from exact mode's dv; worst errors (units of u) "
           "dq dk dv dconv_w: f16 %.3g %.3g %.3g %.3g, bf16 %.3g %.3g %.3g %.3g\n",
           g_rope_problems, g_rope_vs_exact, g_rope_worst[0][0], g_rope_worst[0][1],
           g_rope_worst[0][2], g_rope_worst[0][3], g_rope_worst[1][0], g_rope_worst[1][1],
           g_rope_worst[1][2], g_rope_worst[1][3]);
    printf("%d problems with a window start inside the keys\n", g_edge_problems);
    printf("tile_config drawn: 0 %d, 1 %d, 5 %d\n", g_cfg_count[0], g_cfg_count[1], g_cfg_count[2]);
    printf("%d problems and %d flat ones, %d failed; worst errors (units of u) dq dk dv dconv_w: "
           "f16 %.3g %.3g %.3g "
           "%.3g, bf16 %.3g %.3g %.3g %.3g (bounds %g, dv %g)\n",
           count, count / 4 + 4, failed, g_worst[0][0], g_worst[0][1], g_worst[0][2], g_worst[0][3],
           g_worst[1][0], g_worst[1][1], g_worst[1][2], g_worst[1][3], 4.0, 2.0);
    return ta_test_finish("test_cuda_fast_mta_bwd");
}
