/*
 * CUDA fast mode of the MTA forward (cuda/ta_cuda_fast_mta.cu: the conv's key
 * direction folded into filtered keys on tensor cores), label cuda:
 *
 *  1. accuracy: random problems (f16 and bf16; D = D_v in {64, 96, 128};
 *     c_q in [1, 16], odd c_k in [1, 31], the paper's 6 x 11 and the identity
 *     kernel often; GQA; S_q != S_k, odd and prime lengths; seqlens_k (0,
 *     partial, full); sliding windows (three in ten); every tile_config)
 *     against the float64 oracle. Every o
 *     element's error over the oracle's magnitude o_mag must stay under
 *     TA_FAST_MTA_O_BOUND(dtype), lse's over lse_mag under
 *     TA_FAST_MTA_LSE_BOUND; a row that sees no key gives o = 0 and lse = -inf.
 *     The largest errors are printed per dtype (docs/exactness.md quotes them).
 *     Each problem also runs with its twin tile_config
 *     (ta_test_fast_mta_twin): the same bytes (configurations with the same
 *     K tile compute a row's products, chunks and softmax alike).
 *  2. query history: the last rows of a sequence as one call with q_history
 *     = c_q - 1 rows passed in q_hist, against the oracle's rows of the full
 *     sequence.
 *  3. determinism: one problem run 5 times (outputs poisoned anew): identical
 *     bytes; a CUDA graph of the call replayed twice: the same bytes.
 *  4. what the fast kernels do not take runs the exact kernels: D = 32, and
 *     q rows that are not on 16 bytes, give exact mode's bytes;
 *     a tile_config past the table: TA_ERR_UNSUPPORTED (size query and
 *     call), o untouched.
 *  5. the workspace query counts the filtered keys and the scores next to
 *     the diagonal.
 * A quarter of part 1's problems are decode-shaped (1..16 query rows against
 * up to 3000 keys, split-K), part 2 runs one-row and 16-row chunks with
 * splits too: those run the decode-shaped kernel (cuda/ta_cuda_fast_decode.cu,
 * ta_cuda_fast_mta_dec_path), whose tile_configs name its candidates
 * (ta_test_fast_mdec_twin: 0 and the default give the same bytes).
 *  6. paged KV: decode-shaped problems (history rows, splits, seqlens) with k
 *     and v in shuffled pages of a pool equal the contiguous call bit for bit,
 *     also with the rotary stage (8 problems: k gathered and turned, v
 *     gathered into the workspace).
 *  7. the rotary stage (--count / 2 + 4 problems of part 1's kinds, half of
 *     those with c_q > 1 with query history rows; check_rope says what is
 *     checked: the oracle on q, k turned in double, the same bounds; the
 *     bytes of the call without the stage on q, k turned on the host, which
 *     shows the fast kernels ran; identity tables).
 *
 *   test_cuda_fast_mta [--count N]     TA_SEED replays a run.
 * Without a CUDA device: prints "no CUDA device: skipped" (after part 5) and
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

/* Bounds (docs/exactness.md section 9, "Fast MTA"): SDPA fast mode's 2u of
 * o_mag (p and o rounded to the storage type), plus the filtered keys'
 * rounding: kf_a[j] errs by u |kf_a[j]| <= u sum_b |w_ab| |k_j'|, so a
 * convolved score by u of its magnitude |C|, which o_mag weighs (a score's
 * error moves its p by that much relatively) and which lse_mag holds. */
#define TA_FAST_U(dt)             ((dt) == TA_BF16 ? 0x1p-8 : 0x1p-11)
#define TA_FAST_MTA_O_BOUND(dt)   (4.0 * TA_FAST_U(dt))
#define TA_FAST_MTA_LSE_BOUND(dt) (2.0 * TA_FAST_U(dt))

static double g_err_o[2], g_err_lse[2]; /* [bf16] worst errors over the bounds' units */
static double g_rope_err_o[2], g_rope_err_lse[2]; /* the same over part 7's problems */
static int g_sm90;     /* an sm_90 device: tile_config 5 (the wgmma kernel) is drawn */
static int g_cfg = -1; /* --cfg N: part 1's problems all take tile_config N */

/* One problem and its host inputs. */
typedef struct mcase {
    ta_problem p;
    void *q, *k, *v, *q_hist; /* q_hist: [B, H, q_history, D] or NULL */
    float *w;
    int32_t seqlens[4];
    int use_seqlens;
    size_t eb, nq, nk, nv, no, nlse, nw, nh;
} mcase;

static size_t count4(int32_t b, int32_t h, int32_t s, int32_t d) {
    return (size_t)b * (size_t)h * (size_t)s * (size_t)d;
}

static void mcase_fill(mcase *m, ta_rng *r, int identity) {
    const ta_problem *p = &m->p;
    size_t i;
    m->eb = ta_dtype_size(p->dtype);
    m->nq = count4(p->batch, p->heads_q, p->seq_q, p->head_dim);
    m->nk = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim);
    m->nv = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim_v);
    m->no = count4(p->batch, p->heads_q, p->seq_q, p->head_dim_v);
    m->nlse = count4(p->batch, p->heads_q, p->seq_q, 1);
    m->nw = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    m->nh = count4(p->batch, p->heads_q, p->q_history, p->head_dim);
    m->q = malloc(m->nq * m->eb);
    m->k = malloc(m->nk * m->eb);
    m->v = malloc(m->nv * m->eb);
    m->w = (float *)malloc(m->nw * sizeof(float));
    m->q_hist = m->nh ? malloc(m->nh * m->eb) : NULL;
    if (!m->q || !m->k || !m->v || !m->w || (m->nh && !m->q_hist)) exit(1);
    ta_fill_uniform(r, m->q, p->dtype, m->nq, -2.0f, 2.0f);
    ta_fill_uniform(r, m->k, p->dtype, m->nk, -2.0f, 2.0f);
    ta_fill_uniform(r, m->v, p->dtype, m->nv, -1.0f, 1.0f);
    if (m->nh) ta_fill_uniform(r, m->q_hist, p->dtype, m->nh, -2.0f, 2.0f);
    for (i = 0; i < m->nw; ++i) /* identity: w[h][c_q - 1][P] = 1, all else 0 */
        m->w[i] = identity ? (float)((int32_t)(i % (size_t)(p->conv_q * p->conv_k)) ==
                                     (p->conv_q - 1) * p->conv_k + (p->conv_k - 1) / 2)
                           : ta_rng_uniform(r, -0.6f, 0.6f);
}

static void mcase_free(mcase *m) {
    free(m->q);
    free(m->k);
    free(m->v);
    free(m->w);
    free(m->q_hist);
}

static void *dev_copy(const void *src, size_t bytes) {
    void *d = NULL;
    if (bytes == 0) return NULL;
    CUDA_OK(cudaMalloc(&d, bytes));
    if (src) CUDA_OK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Device copies of a case and an output pair. */
typedef struct mdev {
    ta_fwd_args a;
    void *ws, *q, *k, *v, *w, *q_hist; /* the inputs' device copies (a's, writable) */
    size_t ws_bytes;
} mdev;

static ta_status mdev_make(mdev *d, const mcase *m, const ta_problem *p) {
    ta_status st;
    memset(d, 0, sizeof *d);
    st = ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &d->ws_bytes);
    if (st != TA_OK) return st;
    d->ws = dev_copy(NULL, d->ws_bytes ? d->ws_bytes : 64);
    d->a.q = d->q = dev_copy(m->q, m->nq * m->eb);
    d->a.k = d->k = dev_copy(m->k, m->nk * m->eb);
    d->a.v = d->v = dev_copy(m->v, m->nv * m->eb);
    d->w = dev_copy(m->w, m->nw * sizeof(float));
    d->a.conv_w = (const float *)d->w;
    d->a.q_hist = d->q_hist = m->nh ? dev_copy(m->q_hist, m->nh * m->eb) : NULL;
    d->a.o = dev_copy(NULL, m->no * m->eb);
    d->a.lse = (float *)dev_copy(NULL, m->nlse * sizeof(float));
    d->a.seqlens_k = m->use_seqlens ? m->seqlens : NULL;
    return TA_OK;
}

static void mdev_free(mdev *d) {
    cudaFree(d->ws);
    cudaFree(d->q);
    cudaFree(d->k);
    cudaFree(d->v);
    cudaFree(d->w);
    cudaFree(d->q_hist);
    cudaFree(d->a.o);
    cudaFree(d->a.lse);
}

/* The rotary stage's device tables and positions of t for d->a (freed by
 * mrope_free). */
typedef struct mrope {
    float *cos, *sin;
    int32_t *pos_q, *pos_k;
} mrope;

static void mrope_make(mrope *r, mdev *d, const ta_trope *t, const ta_problem *p) {
    r->cos = (float *)dev_copy(t->cos, t->n_tab * sizeof(float));
    r->sin = (float *)dev_copy(t->sin, t->n_tab * sizeof(float));
    r->pos_q = t->pos_q ? (int32_t *)dev_copy(t->pos_q, (size_t)p->batch * (size_t)p->seq_q * 4)
                        : NULL;
    r->pos_k = t->pos_k ? (int32_t *)dev_copy(t->pos_k, (size_t)p->batch * (size_t)p->seq_k * 4)
                        : NULL;
    d->a.rope.cos = r->cos;
    d->a.rope.sin = r->sin;
    d->a.rope.pos_q = r->pos_q;
    d->a.rope.pos_k = r->pos_k;
}

static void mrope_free(mrope *r) {
    cudaFree(r->cos);
    cudaFree(r->sin);
    cudaFree(r->pos_q);
    cudaFree(r->pos_k);
}

/* ta_fwd on CUDA with o, lse and the workspace poisoned (bytes `byte`, ~byte)
 * first; the outputs copied back. */
static ta_status mdev_run(mdev *d, const mcase *m, const ta_problem *p, int byte, void *o,
                          float *lse) {
    ta_status st;
    CUDA_OK(cudaMemset(d->a.o, byte, m->no * m->eb));
    CUDA_OK(cudaMemset(d->a.lse, byte, m->nlse * sizeof(float)));
    CUDA_OK(cudaMemset(d->ws, ~byte & 0xFF, d->ws_bytes ? d->ws_bytes : 64));
    st = ta_fwd(p, TA_BACKEND_CUDA, &d->a, d->ws, d->ws_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o, d->a.o, m->no * m->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse, d->a.lse, m->nlse * sizeof(float), cudaMemcpyDeviceToHost));
    return st;
}

static int32_t pick_len(ta_rng *r) {
    static const int32_t lens[] = {1, 2, 7, 31, 64, 65, 97, 127, 128, 129, 191, 257};
    return ta_rng_int(r, 0, 3) == 0
               ? ta_rng_int(r, 1, 300)
               : lens[ta_rng_int(r, 0, (int32_t)(sizeof lens / sizeof *lens) - 1)];
}

/* Problem idx of a seed: its shape, conv, dtype, tile_config, key lengths. */
static int random_case(uint64_t seed, int idx, mcase *m, ta_rng *r) {
    ta_problem *p = &m->p;
    static const int32_t dims[3] = {64, 96, 128};
    const int32_t conv = ta_rng_int(r, 0, 5);
    int32_t g;
    memset(m, 0, sizeof *m);
    (void)seed;
    (void)idx;
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    g = ta_rng_int(r, 1, 3);
    p->heads_q = p->heads_kv * g;
    p->head_dim = p->head_dim_v = dims[ta_rng_int(r, 0, 2)];
    p->seq_k = pick_len(r);
    p->seq_q = ta_rng_int(r, 0, 2) == 0 ? pick_len(r) : p->seq_k;
    p->dtype = ta_rng_int(r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->flags = TA_CAUSAL;
    p->tile_config = ta_rng_int(r, 0, TA_TEST_FAST_MTA_CFGS);
    if (g_cfg >= 0) p->tile_config = g_cfg;                 /* --cfg */
    if (p->tile_config == 5 && !g_sm90) p->tile_config = 1; /* the wgmma kernel: sm_90 only */
    if (ta_rng_int(r, 0, 3) == 0) { /* decode-shaped */
        p->seq_q = ta_rng_int(r, 1, 16);
        p->seq_k = ta_rng_int(r, 0, 1) ? ta_rng_int(r, 300, 3000) : pick_len(r);
        p->num_splits = ta_rng_int(r, 0, 2) == 0   ? 0
                        : ta_rng_int(r, 0, 1) == 0 ? TA_SPLITS_AUTO
                                                   : ta_rng_int(r, 2, 6);
    }
    /* 6 x 11 (the paper's), 7 x 7, 1 x 1, 16 x 31 (the largest), or any */
    ta_test_mta_conv(r, conv, p);
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.02f, 0.3f);
    ta_test_random_window(r, p, 30);
    m->use_seqlens = ta_rng_int(r, 0, 3) == 0;
    ta_test_seqlens(r, p, m->seqlens);
    return ta_rng_int(r, 0, 4) == 0; /* identity kernel */
}

static void describe(const mcase *m, char *buf, size_t n) {
    const ta_problem *p = &m->p;
    snprintf(buf, n,
             "%s B=%d H=%d/%d S_q=%d S_k=%d D=%d conv %dx%d cfg %d%s scale %g hist %d window %d/%d "
             "splits %d",
             p->dtype == TA_BF16 ? "bf16" : "f16", (int)p->batch, (int)p->heads_q, (int)p->heads_kv,
             (int)p->seq_q, (int)p->seq_k, (int)p->head_dim, (int)p->conv_q, (int)p->conv_k,
             (int)p->tile_config, m->use_seqlens ? " seqlens" : "", (double)p->scale,
             (int)p->q_history, (int)p->window_left, (int)p->window_right, (int)p->num_splits);
}

static double *widen_f32(const float *w, size_t n) {
    double *x = (double *)malloc((n ? n : 1) * sizeof(double));
    size_t i;
    if (!x) exit(1);
    for (i = 0; i < n; ++i)
        x[i] = (double)w[i];
    return x;
}

/* o, lse of the run m, rows [row0, row0 + S_q), against the oracle's rows of
 * the case fc (m itself, or the same problem over more rows: row r of m is row
 * row0 + r of fc), whose inputs it widens. With the rotary stage (tr set: m's
 * tables and positions) the widened q and k are turned in double first, fc's
 * q row r as token r - row0 of m (its history rows: tokens -1, -2, ...),
 * then rounded to the storage type as the fast path's turned copies are (the
 * same inputs the kernels read, so part 1's bounds hold as they do there). */
static size_t compare_oracle(const mcase *m, const mcase *fc, int32_t row0, const void *o,
                             const float *lse, const char *desc, const ta_trope *tr) {
    const ta_problem *p = &m->p;
    ta_problem full_p = fc->p;
    const ta_problem *full = &full_p;
    double *wq = ta_oracle_widen(fc->q, full->dtype, fc->nq);
    double *wk = ta_oracle_widen(fc->k, full->dtype, fc->nk);
    double *wv = ta_oracle_widen(fc->v, full->dtype, fc->nv);
    double *ww = widen_f32(fc->w, fc->nw);
    const size_t dv = (size_t)p->head_dim_v,
                 n_full = count4(full->batch, full->heads_q, full->seq_q, 1);
    double *o_ref = (double *)malloc(n_full * dv * sizeof(double));
    double *o_mag = (double *)malloc(n_full * dv * sizeof(double));
    double *lse_ref = (double *)malloc(n_full * sizeof(double));
    double *lse_mag = (double *)malloc(n_full * sizeof(double));
    const int ti = p->dtype == TA_BF16;
    const double u = TA_FAST_U(p->dtype);
    ta_oracle_in in;
    size_t i, bad = 0;
    if (!o_ref || !o_mag || !lse_ref || !lse_mag) exit(1);
    if (tr) { /* the oracle turns in double, rounds as the copies are, runs without the stage */
        ta_trope_turn_double(p, tr, 0, wq, full->seq_q, -row0, 0);
        ta_trope_turn_double(p, tr, 1, wk, full->seq_k, 0, 0);
        ta_trope_round(wq, fc->nq, full->dtype);
        ta_trope_round(wk, fc->nk, full->dtype);
        full_p.rope = full_p.rope_pairs = full_p.rope_rows = 0;
        full_p.rope_row_stride = full_p.rope_head_stride = 0;
    }
    memset(&in, 0, sizeof in);
    in.q = wq;
    in.k = wk;
    in.v = wv;
    in.conv_w = ww;
    in.seqlens_k = m->use_seqlens ? m->seqlens : NULL;
    if (ta_oracle_fwd(full, &in, o_ref, lse_ref) != 0 ||
        ta_oracle_fwd_mag(full, &in, o_mag, lse_mag) != 0)
        exit(1);
    for (i = 0; i < m->nlse; ++i) {
        const size_t bh = i / (size_t)p->seq_q, r = i % (size_t)p->seq_q;
        const size_t f = bh * (size_t)full->seq_q + (size_t)row0 + r;
        size_t d;
        if (isinf(lse_ref[f])) {
            int zero = isinf(lse[i]) && lse[i] < 0;
            for (d = 0; d < dv; ++d)
                zero = zero && ta_get(o, p->dtype, i * dv + d) == 0.0;
            if (!zero && bad++ < 3)
                TA_CHECK(0, "%s: row %zu sees no key but o/lse = %g/%g", desc, i,
                         ta_get(o, p->dtype, i * dv), (double)lse[i]);
            continue;
        }
        for (d = 0; d < dv; ++d) {
            const double got = ta_get(o, p->dtype, i * dv + d);
            const double e = fabs(got - o_ref[f * dv + d]) / fmax(o_mag[f * dv + d], 1e-300);
            if (!(e <= TA_FAST_MTA_O_BOUND(p->dtype)) && bad++ < 3)
                TA_CHECK(0, "%s: o[%zu][%zu] = %.8g, oracle %.8g, error %.3g u of %g", desc, i, d,
                         got, o_ref[f * dv + d], e / u, o_mag[f * dv + d]);
            if (e / u > g_err_o[ti] || e != e) g_err_o[ti] = e / u;
            if (tr && (e / u > g_rope_err_o[ti] || e != e)) g_rope_err_o[ti] = e / u;
        }
        {
            const double e = fabs((double)lse[i] - lse_ref[f]) / fmax(lse_mag[f], 1e-300);
            if (!(e <= TA_FAST_MTA_LSE_BOUND(p->dtype)) && bad++ < 3)
                TA_CHECK(0, "%s: lse[%zu] = %.9g, oracle %.9g, error %.3g u", desc, i,
                         (double)lse[i], lse_ref[f], e / u);
            if (e / u > g_err_lse[ti] || e != e) g_err_lse[ti] = e / u;
            if (tr && (e / u > g_rope_err_lse[ti] || e != e)) g_rope_err_lse[ti] = e / u;
        }
    }
    free(o_ref);
    free(o_mag);
    free(lse_ref);
    free(lse_mag);
    free(wq);
    free(wk);
    free(wv);
    free(ww);
    return bad;
}

/* Part 1: one random problem against the oracle. */
static int check_problem(uint64_t seed, int idx) {
    mcase m;
    mdev d;
    ta_rng r;
    char desc[256];
    void *o;
    float *lse;
    size_t bad;
    ta_status st;
    ta_rng_seed(&r, seed + UINT64_C(0x9e3779b9) * (uint64_t)(idx + 1));
    mcase_fill(&m, &r, random_case(seed, idx, &m, &r));
    describe(&m, desc, sizeof desc);
    o = malloc(m.no * m.eb);
    lse = (float *)malloc(m.nlse * sizeof(float));
    if (!o || !lse) exit(1);
    st = mdev_make(&d, &m, &m.p);
    TA_CHECK(st == TA_OK, "problem %d (%s): size query: %s", idx, desc, ta_status_string(st));
    if (st == TA_OK) st = mdev_run(&d, &m, &m.p, 0xFF, o, lse);
    TA_CHECK(st == TA_OK, "problem %d (%s): ta_fwd: %s", idx, desc, ta_status_string(st));
    snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " #%d", idx);
    bad = st == TA_OK ? compare_oracle(&m, &m, 0, o, lse, desc, NULL) : 1;
    if (st == TA_OK) { /* twins compute each row alike: the same bytes */
        ta_problem p2 = m.p;
        void *o2 = malloc(m.no * m.eb);
        float *lse2 = (float *)malloc(m.nlse * sizeof(float));
        ta_status st2;
        if (!o2 || !lse2) exit(1);
        /* at most 16 rows: the decode-shaped kernel (all problems here
         * with more rows have one split and no pages: the fold) */
        p2.tile_config = m.p.seq_q <= 16 ? ta_test_fast_mdec_twin(m.p.tile_config, m.p.seq_q)
                                         : ta_test_fast_mta_twin(m.p.tile_config, g_sm90);
        st2 = mdev_run(&d, &m, &p2, 0x7F, o2, lse2);
        TA_CHECK(st2 == TA_OK && memcmp(o, o2, m.no * m.eb) == 0 &&
                     memcmp(lse, lse2, m.nlse * sizeof(float)) == 0,
                 "problem %d (%s): tile_config %d differs from %d (%s)", idx, desc,
                 (int)p2.tile_config, (int)m.p.tile_config, ta_status_string(st2));
        free(o2);
        free(lse2);
    }
    if (bad) fprintf(stderr, "problem %d (%s): %zu elements out of bound\n", idx, desc, bad);
    if (st == TA_OK) mdev_free(&d);
    free(o);
    free(lse);
    mcase_free(&m);
    return bad == 0;
}

/* Part 2: the last n_rows rows of a sequence of S, one call with q_history
 * = c_q - 1, against the oracle's rows of the whole. */
static void check_history(uint64_t seed, ta_dtype dt, int32_t s_full, int32_t n_rows,
                          int32_t splits) {
    mcase full, part;
    mdev d;
    ta_rng r;
    char desc[256];
    void *o;
    float *lse;
    size_t bh, t;
    ta_status st;
    memset(&full, 0, sizeof full);
    ta_rng_seed(&r, seed ^ UINT64_C(0x5bd1e995));
    full.p.batch = 2;
    full.p.heads_q = 4;
    full.p.heads_kv = 2;
    full.p.seq_q = full.p.seq_k = s_full;
    full.p.head_dim = full.p.head_dim_v = 64;
    full.p.dtype = dt;
    full.p.precision = TA_PRECISION_FAST;
    full.p.flags = TA_CAUSAL;
    full.p.conv_q = 6;
    full.p.conv_k = 11;
    mcase_fill(&full, &r, 0);
    /* the chunk: rows [s_full - n_rows, s_full) of q, the c_q - 1 rows above
     * them as history */
    part = full;
    part.p.seq_q = n_rows;
    part.p.q_history = full.p.conv_q - 1;
    part.p.num_splits = splits;
    part.eb = full.eb;
    part.nq = count4(2, 4, n_rows, 64);
    part.no = count4(2, 4, n_rows, 64);
    part.nlse = count4(2, 4, n_rows, 1);
    part.nh = count4(2, 4, part.p.q_history, 64);
    part.q = malloc(part.nq * part.eb);
    part.q_hist = malloc(part.nh * part.eb);
    if (!part.q || !part.q_hist) exit(1);
    for (bh = 0; bh < 8; ++bh) {
        const char *src = (const char *)full.q + bh * (size_t)s_full * 64 * full.eb;
        const size_t first = (size_t)(s_full - n_rows), nh = (size_t)part.p.q_history;
        memcpy((char *)part.q + bh * (size_t)n_rows * 64 * part.eb, src + first * 64 * part.eb,
               (size_t)n_rows * 64 * part.eb);
        memcpy((char *)part.q_hist + bh * nh * 64 * part.eb, src + (first - nh) * 64 * part.eb,
               nh * 64 * part.eb);
    }
    describe(&part, desc, sizeof desc);
    o = malloc(part.no * part.eb);
    lse = (float *)malloc(part.nlse * sizeof(float));
    if (!o || !lse) exit(1);
    st = mdev_make(&d, &part, &part.p);
    if (st == TA_OK) st = mdev_run(&d, &part, &part.p, 0xEE, o, lse);
    TA_CHECK(st == TA_OK, "history (%s): %s", desc, ta_status_string(st));
    t = st == TA_OK ? compare_oracle(&part, &full, s_full - n_rows, o, lse, desc, NULL) : 1;
    TA_CHECK(t == 0, "history (%s): %zu elements out of bound", desc, t);
    if (st == TA_OK) mdev_free(&d);
    free(o);
    free(lse);
    free(part.q);
    free(part.q_hist);
    mcase_free(&full);
}

/* A fixed mid-size problem: bf16, B = 2, H = 4 / 2, S = 200, D = 128, 6 x 11. */
static void mid_case(mcase *m, ta_rng *r) {
    memset(m, 0, sizeof *m);
    m->p.batch = 2;
    m->p.heads_q = 4;
    m->p.heads_kv = 2;
    m->p.seq_q = m->p.seq_k = 200;
    m->p.head_dim = m->p.head_dim_v = 128;
    m->p.dtype = TA_BF16;
    m->p.precision = TA_PRECISION_FAST;
    m->p.flags = TA_CAUSAL;
    m->p.conv_q = 6;
    m->p.conv_k = 11;
    mcase_fill(m, r, 0);
}

/* Part 3: determinism, and a graph of the call. */
static void check_determinism(uint64_t seed) {
    mcase m;
    mdev d;
    ta_rng r;
    void *o0, *o1;
    float *l0, *l1;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    int i;
    ta_status st;
    ta_rng_seed(&r, seed ^ UINT64_C(0xdeadbeef));
    mid_case(&m, &r);
    o0 = malloc(m.no * m.eb);
    o1 = malloc(m.no * m.eb);
    l0 = (float *)malloc(m.nlse * 4);
    l1 = (float *)malloc(m.nlse * 4);
    if (!o0 || !o1 || !l0 || !l1) exit(1);
    st = mdev_make(&d, &m, &m.p);
    TA_CHECK(st == TA_OK, "determinism: size query %s", ta_status_string(st));
    if (st != TA_OK) exit(1);
    st = mdev_run(&d, &m, &m.p, 0x11, o0, l0);
    TA_CHECK(st == TA_OK, "determinism: %s", ta_status_string(st));
    for (i = 0; i < 4; ++i) {
        st = mdev_run(&d, &m, &m.p, 0x22 + 0x11 * i, o1, l1);
        TA_CHECK(st == TA_OK && memcmp(o0, o1, m.no * m.eb) == 0 && memcmp(l0, l1, m.nlse * 4) == 0,
                 "determinism: run %d differs (%s)", i + 2, ta_status_string(st));
    }
    /* graph: poison, capture, replay twice */
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaMemset(d.a.o, 0x77, m.no * m.eb));
    CUDA_OK(cudaMemset(d.a.lse, 0x77, m.nlse * 4));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    st = ta_fwd(&m.p, TA_BACKEND_CUDA, &d.a, d.ws, d.ws_bytes, s);
    CUDA_OK(cudaStreamEndCapture(s, &g));
    TA_CHECK(st == TA_OK, "graph: capture %s", ta_status_string(st));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (i = 0; i < 2; ++i) {
        CUDA_OK(cudaGraphLaunch(ge, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(o1, d.a.o, m.no * m.eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(l1, d.a.lse, m.nlse * 4, cudaMemcpyDeviceToHost));
        TA_CHECK(memcmp(o0, o1, m.no * m.eb) == 0 && memcmp(l0, l1, m.nlse * 4) == 0,
                 "graph: replay %d differs from the direct call", i + 1);
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaStreamDestroy(s));
    mdev_free(&d);
    free(o0);
    free(o1);
    free(l0);
    free(l1);
    mcase_free(&m);
}

/* Part 4: a problem the fast kernels do not take gives exact mode's bytes;
 * q_st: q's strides (NULL: contiguous). */
static void check_exact_fallback(const char *what, mcase *m, const ta_problem *p,
                                 const ta_strides *q_st) {
    ta_problem px = *p;
    mdev d;
    void *o0 = malloc(m->no * m->eb), *o1 = malloc(m->no * m->eb);
    float *l0 = (float *)malloc(m->nlse * 4), *l1 = (float *)malloc(m->nlse * 4);
    ta_status s0, s1;
    if (!o0 || !o1 || !l0 || !l1) exit(1);
    px.precision = TA_PRECISION_EXACT;
    s0 = mdev_make(&d, m, p);
    TA_CHECK(s0 == TA_OK, "%s: size query %s", what, ta_status_string(s0));
    if (s0 != TA_OK) exit(1);
    if (q_st) d.a.q_strides = *q_st;
    s0 = mdev_run(&d, m, p, 0x33, o0, l0);
    s1 = mdev_run(&d, m, &px, 0x44, o1, l1);
    TA_CHECK(s0 == TA_OK && s1 == TA_OK && memcmp(o0, o1, m->no * m->eb) == 0 &&
                 memcmp(l0, l1, m->nlse * 4) == 0,
             "%s: fast mode (%s) differs from exact mode (%s)", what, ta_status_string(s0),
             ta_status_string(s1));
    mdev_free(&d);
    free(o0);
    free(o1);
    free(l0);
    free(l1);
}

static void check_fallbacks_and_refusals(uint64_t seed) {
    mcase m;
    ta_rng r;
    ta_problem p;
    mdev d;
    size_t bytes = 0;
    ta_status st;
    ta_rng_seed(&r, seed ^ UINT64_C(0xfeedface));
    mid_case(&m, &r);
    /* a head dim the fast MTA path does not take (D = 32) */
    {
        mcase m32;
        ta_rng r32;
        ta_rng_seed(&r32, seed ^ UINT64_C(0x32));
        memset(&m32, 0, sizeof m32);
        m32.p = m.p;
        m32.p.head_dim = m32.p.head_dim_v = 32;
        mcase_fill(&m32, &r32, 0);
        check_exact_fallback("D = 32", &m32, &m32.p, NULL);
        mcase_free(&m32);
    }
    /* q rows 8 bytes apart from 16: the q buffer read with row stride D + 4 */
    {
        const size_t rows = count4(m.p.batch, m.p.heads_q, m.p.seq_q, 1), dq = 128, dp = 132;
        char *wide = (char *)calloc(rows * dp, m.eb);
        void *q0 = m.q;
        ta_strides st_wide;
        size_t i;
        if (!wide) exit(1);
        for (i = 0; i < rows; ++i)
            memcpy(wide + i * dp * m.eb, (char *)q0 + i * dq * m.eb, dq * m.eb);
        m.q = wide;
        m.nq = rows * dp; /* the device copy holds the padded rows */
        st_wide.seq = (int64_t)dp;
        st_wide.head = (int64_t)dp * m.p.seq_q;
        st_wide.batch = (int64_t)dp * m.p.seq_q * m.p.heads_q;
        check_exact_fallback("q rows off 16 bytes", &m, &m.p, &st_wide);
        m.q = q0;
        m.nq = rows * dq;
        free(wide);
    }
    /* tile_config past the fast MTA table */
    p = m.p;
    p.tile_config = TA_TEST_FAST_MTA_CFGS;
    st = mdev_make(&d, &m, &p);
    TA_CHECK(st == TA_OK, "last tile_config: size query %s", ta_status_string(st));
    if (st == TA_OK) {
        void *o = malloc(m.no * m.eb);
        float *lse = (float *)malloc(m.nlse * 4);
        unsigned char *back = (unsigned char *)malloc(m.no * m.eb);
        size_t i, changed = 0;
        if (!o || !lse || !back) exit(1);
        p.tile_config = TA_TEST_FAST_MTA_CFGS + 1;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
                 "tile_config past the table: the size query must refuse");
        st = mdev_run(&d, &m, &p, 0x5A, o, lse);
        TA_CHECK(st == TA_ERR_UNSUPPORTED, "tile_config past the table: ta_fwd gave %s",
                 ta_status_string(st));
        memcpy(back, o, m.no * m.eb);
        for (i = 0; i < m.no * m.eb; ++i)
            changed += back[i] != 0x5A;
        TA_CHECK(changed == 0, "tile_config past the table: %zu bytes of o written", changed);
        mdev_free(&d);
        free(o);
        free(lse);
        free(back);
    }
    mcase_free(&m);
}

/* Part 5 (no GPU needed): the workspace holds kf and the corrections. */
static void check_size_query(void) {
    ta_problem p;
    size_t fast = 0, exact = 0, kf, corr;
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
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &exact) == TA_OK, "exact size query");
    p.precision = TA_PRECISION_FAST;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fast) == TA_OK, "fast size query");
    kf = (size_t)2 * 8 * 1000 * 6 * 128 * 2;
    corr = (size_t)2 * 8 * 1000 * (5 + 5) * 4;
    TA_CHECK(fast >= exact + kf + corr && fast <= exact + kf + corr + 256,
             "fast MTA workspace %zu, want %zu + %zu + %zu (+ alignment)", fast, exact, kf, corr);
    p.tile_config = TA_TEST_FAST_MTA_CFGS + 1;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &fast) == TA_ERR_UNSUPPORTED,
             "a tile_config past the table must be refused by the size query");
    p.tile_config = 0;
    { /* the rotary stage: the turned q, k (and history rows; with pages v
         gathered) in front; pairs off whole chunks: the exact kernels */
        size_t plain = 0, rot = 0, want;
        const size_t eb = 2, nq = (size_t)2 * 8 * 1000 * 128, nk = (size_t)2 * 2 * 1000 * 128;
        p.seq_q = 10; /* the decode-shaped kernel, with history rows */
        p.q_history = 5;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &plain) == TA_OK, "size query");
        p.rope = TA_ROPE_HALF;
        p.rope_pairs = 64;
        p.rope_rows = 2000;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &rot) == TA_OK, "rope size query");
        want = plain + (nq / 100 + nk + (size_t)2 * 8 * 5 * 128) * eb;
        TA_CHECK(rot >= want && rot <= want + 3 * 64,
                 "fast MTA workspace with the stage %zu, want %zu (+ alignment)", rot, want);
        p.rope_pairs = 60; /* not a multiple of 8: the exact kernels, their workspace */
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &rot) == TA_OK, "rope size query");
        p.precision = TA_PRECISION_EXACT;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &exact) == TA_OK, "rope size query");
        TA_CHECK(rot == exact, "pairs off whole chunks: workspace %zu, exact mode's %zu", rot,
                 exact);
        p.precision = TA_PRECISION_FAST;
        p.rope_pairs = 64;
        p.q_history = 0;
        p.kv_page_size = 16; /* pages: v gathered too */
        p.kv_max_blocks = 63;
        p.kv_num_pages = 200;
        p.rope = 0;
        p.rope_pairs = p.rope_rows = 0;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &plain) == TA_OK, "paged size query");
        p.rope = TA_ROPE_INTERLEAVED;
        p.rope_pairs = 32;
        p.rope_rows = 2000;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &rot) == TA_OK, "paged rope size");
        want = plain + (nq / 100 + 2 * nk) * eb;
        TA_CHECK(rot >= want && rot <= want + 3 * 64,
                 "paged fast MTA workspace with the stage %zu, want %zu (+ alignment)", rot, want);
    }
}

/* Part 6: decode-shaped problem idx with k and v as pools of shuffled pages
 * (unused slots and pages filled with other values) against the contiguous
 * call: the same bytes. */
static void check_paged(uint64_t seed, int idx, int rope) {
    static const int32_t sizes[4] = {1, 16, 64, 100};
    mcase m;
    mdev dc, dp;
    ta_rng r;
    ta_problem pp;
    char desc[256];
    size_t bh, row, pool_elems, d;
    int32_t *table, *table_d, nb, b, j, h;
    unsigned char *kpool, *vpool, *o1, *o2;
    float *l1, *l2;
    ta_trope tr;
    mrope r1, r2;
    ta_status st1, st2;
    memset(&tr, 0, sizeof tr);
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    ta_rng_seed(&r, seed ^ (UINT64_C(0x7a9e5) * (uint64_t)(idx + 3)));
    memset(&m, 0, sizeof m);
    m.p.batch = ta_rng_int(&r, 1, 3);
    m.p.heads_kv = ta_rng_int(&r, 1, 2);
    m.p.heads_q = m.p.heads_kv * ta_rng_int(&r, 1, 2);
    m.p.head_dim = m.p.head_dim_v = ta_rng_int(&r, 0, 1) ? 64 : 128;
    m.p.seq_q = ta_rng_int(&r, 1, 16);
    m.p.seq_k = ta_rng_int(&r, m.p.seq_q, 2000);
    m.p.dtype = ta_rng_int(&r, 0, 1) ? TA_BF16 : TA_F16;
    m.p.precision = TA_PRECISION_FAST;
    m.p.flags = TA_CAUSAL;
    m.p.conv_q = ta_rng_int(&r, 1, 8);
    m.p.conv_k = 2 * ta_rng_int(&r, 0, 7) + 1;
    m.p.q_history = ta_rng_int(&r, 0, m.p.conv_q - 1);
    m.p.num_splits = ta_rng_int(&r, 0, 1) ? TA_SPLITS_AUTO : ta_rng_int(&r, 0, 4);
    m.use_seqlens = ta_rng_int(&r, 0, 1);
    for (b = 0; b < m.p.batch; ++b)
        m.seqlens[b] = ta_rng_int(&r, 0, m.p.seq_k);
    mcase_fill(&m, &r, 0);
    if (rope) ta_trope_make(&r, &m.p, 0, &tr);
    pp = m.p;
    pp.kv_page_size = sizes[ta_rng_int(&r, 0, 3)];
    nb = (m.p.seq_k + pp.kv_page_size - 1) / pp.kv_page_size;
    pp.kv_max_blocks = nb + ta_rng_int(&r, 0, 2);
    pp.kv_num_pages = m.p.batch * nb + ta_rng_int(&r, 0, 3);
    describe(&m, desc, sizeof desc);
    pool_elems = (size_t)pp.kv_num_pages * (size_t)pp.kv_page_size * (size_t)m.p.heads_kv *
                 (size_t)m.p.head_dim;
    kpool = (unsigned char *)malloc(pool_elems * m.eb);
    vpool = (unsigned char *)malloc(pool_elems * m.eb);
    table = (int32_t *)malloc((size_t)m.p.batch * (size_t)pp.kv_max_blocks * sizeof(int32_t));
    o1 = (unsigned char *)malloc(m.no * m.eb);
    o2 = (unsigned char *)malloc(m.no * m.eb);
    l1 = (float *)malloc(m.nlse * sizeof(float));
    l2 = (float *)malloc(m.nlse * sizeof(float));
    if (!kpool || !vpool || !table || !o1 || !o2 || !l1 || !l2) exit(1);
    ta_fill_uniform(&r, kpool, m.p.dtype, pool_elems, -3.0f, 3.0f); /* unused: other values */
    ta_fill_uniform(&r, vpool, m.p.dtype, pool_elems, -3.0f, 3.0f);
    for (j = 0; j < m.p.batch * pp.kv_max_blocks; ++j) /* unused entries: any page */
        table[j] = ta_rng_int(&r, 0, pp.kv_num_pages - 1);
    for (b = 0; b < m.p.batch; ++b) /* distinct pages for the used blocks */
        for (j = 0; j < nb; ++j)
            table[b * pp.kv_max_blocks + j] = b * nb + j;
    for (j = m.p.batch * nb - 1; j > 0; --j) { /* shuffle the used ones */
        const int32_t i2 = ta_rng_int(&r, 0, j);
        const int32_t bj = j / nb, jj = j % nb, bi = i2 / nb, ii = i2 % nb;
        const int32_t x = table[bj * pp.kv_max_blocks + jj];
        table[bj * pp.kv_max_blocks + jj] = table[bi * pp.kv_max_blocks + ii];
        table[bi * pp.kv_max_blocks + ii] = x;
    }
    for (b = 0; b < m.p.batch; ++b)
        for (h = 0; h < m.p.heads_kv; ++h)
            for (j = 0; j < m.p.seq_k; ++j) {
                const int32_t page = table[b * pp.kv_max_blocks + j / pp.kv_page_size];
                const size_t dst = (((size_t)page * (size_t)pp.kv_page_size +
                                     (size_t)(j % pp.kv_page_size)) *
                                        (size_t)m.p.heads_kv +
                                    (size_t)h) *
                                   (size_t)m.p.head_dim;
                bh = (size_t)b * (size_t)m.p.heads_kv + (size_t)h;
                row = (bh * (size_t)m.p.seq_k + (size_t)j) * (size_t)m.p.head_dim;
                for (d = 0; d < (size_t)m.p.head_dim; ++d) {
                    memcpy(kpool + (dst + d) * m.eb, (unsigned char *)m.k + (row + d) * m.eb, m.eb);
                    memcpy(vpool + (dst + d) * m.eb, (unsigned char *)m.v + (row + d) * m.eb, m.eb);
                }
            }
    st1 = mdev_make(&dc, &m, &m.p);
    if (st1 == TA_OK && rope) mrope_make(&r1, &dc, &tr, &m.p);
    if (st1 == TA_OK) st1 = mdev_run(&dc, &m, &m.p, 0x3C, o1, l1);
    st2 = mdev_make(&dp, &m, &pp);
    if (st2 == TA_OK) {
        cudaFree(dp.k);
        cudaFree(dp.v);
        dp.a.k = dp.k = dev_copy(kpool, pool_elems * m.eb);
        dp.a.v = dp.v = dev_copy(vpool, pool_elems * m.eb);
        table_d = (int32_t *)dev_copy(table, (size_t)m.p.batch * (size_t)pp.kv_max_blocks *
                                                 sizeof(int32_t));
        dp.a.block_table = table_d;
        if (rope) mrope_make(&r2, &dp, &tr, &m.p);
        st2 = mdev_run(&dp, &m, &pp, 0xC3, o2, l2);
        cudaFree(table_d);
    }
    TA_CHECK(st1 == TA_OK && st2 == TA_OK, "paged %d (%s, page %d, rope %d): %s / %s", idx, desc,
             (int)pp.kv_page_size, rope, ta_status_string(st1), ta_status_string(st2));
    if (st1 == TA_OK && st2 == TA_OK)
        TA_CHECK(memcmp(o1, o2, m.no * m.eb) == 0 && memcmp(l1, l2, m.nlse * sizeof(float)) == 0,
                 "paged %d (%s, page %d): o / lse differ from the contiguous call", idx, desc,
                 (int)pp.kv_page_size);
    if (idx == 0 || idx == 100)
        printf("paged %d: %s, page %d%s\n", idx, desc, (int)pp.kv_page_size,
               rope ? ", rotary stage" : "");
    if (rope) {
        mrope_free(&r1);
        mrope_free(&r2);
        ta_trope_free(&tr);
    }
    if (st1 == TA_OK) mdev_free(&dc);
    if (st2 == TA_OK) mdev_free(&dp);
    free(kpool);
    free(vpool);
    free(table);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    mcase_free(&m);
}

/* Part 7: the rotary stage (docs/rope.md, "On CUDA (fast path)"): problem
 * idx of part 1's kinds (fold and decode-shaped, split-K, windows, seqlens,
 * every tile_config), a third with query history rows, with random tables
 * (one in five: identity rows) and positions:
 *   a. o, lse against the float64 oracle on q, k (and the history rows)
 *      turned in double and rounded to the storage type as the copies are,
 *      the same bounds as part 1;
 *   b. the fast kernels ran on the turned copies: the same bytes as the call
 *      without the stage on q, k, q_hist turned on the host by the same
 *      arithmetic (ta_trope_turn_store), which takes the fast path (the
 *      exact kernels turn in f32 without the copies' rounding: their bytes
 *      differ, counted in g_rope_vs_exact, which must not stay 0);
 *   c. identity tables: the bytes of the call without the stage on the same
 *      q, k (up to the sign of a zero). */
static int g_rope_vs_exact, g_rope_problems;

static int check_rope(uint64_t seed, int idx) {
    mcase m, turned, full;
    mdev d, d2;
    mrope rd;
    ta_trope tr;
    ta_rng r;
    char desc[300];
    void *o, *o2;
    float *lse, *lse2;
    size_t bad = 0;
    int identity, kernel_id;
    ta_problem p2;
    ta_status st, st2;
    ta_rng_seed(&r, seed + UINT64_C(0x40be5) * (uint64_t)(idx + 7));
    kernel_id = random_case(seed, idx, &m, &r);
    if (m.p.conv_q > 1 && ta_rng_int(&r, 0, 1) == 0) /* history rows, at most c_q - 1 */
        m.p.q_history = ta_rng_int(&r, 1, m.p.conv_q - 1);
    mcase_fill(&m, &r, kernel_id);
    identity = ta_rng_int(&r, 0, 4) == 0;
    ta_trope_make(&r, &m.p, identity, &tr);
    describe(&m, desc, sizeof desc);
    snprintf(desc + strlen(desc), sizeof desc - strlen(desc),
             " rope %s pairs %d rows %d hs %d pos %s/%s%s #%d",
             m.p.rope == TA_ROPE_HALF ? "half" : "interleaved", (int)m.p.rope_pairs,
             (int)m.p.rope_rows, (int)m.p.rope_head_stride, tr.pos_q ? "given" : "NULL",
             tr.pos_k ? "given" : "NULL", identity ? " identity" : "", idx);
    o = malloc(m.no * m.eb);
    o2 = malloc(m.no * m.eb);
    lse = (float *)malloc(m.nlse * sizeof(float));
    lse2 = (float *)malloc(m.nlse * sizeof(float));
    if (!o || !o2 || !lse || !lse2) exit(1);
    st = mdev_make(&d, &m, &m.p);
    TA_CHECK(st == TA_OK, "rope (%s): size query: %s", desc, ta_status_string(st));
    if (st != TA_OK) exit(1);
    mrope_make(&rd, &d, &tr, &m.p);
    st = mdev_run(&d, &m, &m.p, 0xFF, o, lse);
    TA_CHECK(st == TA_OK, "rope (%s): ta_fwd: %s", desc, ta_status_string(st));
    /* a. the oracle on the whole sequence (history rows first) */
    full = m;
    if (m.p.q_history > 0) {
        const size_t nh = (size_t)m.p.q_history, sq = (size_t)m.p.seq_q, dd = (size_t)m.p.head_dim;
        size_t bh;
        full.p.seq_q = m.p.seq_q + m.p.q_history;
        full.p.q_history = 0;
        full.nq = count4(m.p.batch, m.p.heads_q, full.p.seq_q, m.p.head_dim);
        full.q = malloc(full.nq * m.eb);
        if (!full.q) exit(1);
        for (bh = 0; bh < (size_t)(m.p.batch * m.p.heads_q); ++bh) {
            char *dst = (char *)full.q + bh * (nh + sq) * dd * m.eb;
            memcpy(dst, (const char *)m.q_hist + bh * nh * dd * m.eb, nh * dd * m.eb);
            memcpy(dst + nh * dd * m.eb, (const char *)m.q + bh * sq * dd * m.eb, sq * dd * m.eb);
        }
    }
    if (st == TA_OK) bad = compare_oracle(&m, &full, m.p.q_history, o, lse, desc, &tr);
    if (full.q != m.q) free(full.q);
    /* b. the call without the stage on the host-turned inputs */
    turned = m;
    turned.q = malloc(m.nq * m.eb);
    turned.k = malloc(m.nk * m.eb);
    turned.q_hist = m.nh ? malloc(m.nh * m.eb) : NULL;
    if (!turned.q || !turned.k || (m.nh && !turned.q_hist)) exit(1);
    memcpy(turned.q, m.q, m.nq * m.eb);
    memcpy(turned.k, m.k, m.nk * m.eb);
    if (m.nh) memcpy(turned.q_hist, m.q_hist, m.nh * m.eb);
    ta_trope_turn_store(&m.p, &tr, 0, turned.q, m.p.seq_q, 0);
    ta_trope_turn_store(&m.p, &tr, 1, turned.k, m.p.seq_k, 0);
    if (m.nh) ta_trope_turn_store(&m.p, &tr, 0, turned.q_hist, m.p.q_history, -m.p.q_history);
    p2 = m.p;
    p2.rope = p2.rope_pairs = p2.rope_rows = p2.rope_row_stride = p2.rope_head_stride = 0;
    st2 = mdev_make(&d2, &turned, &p2);
    if (st2 == TA_OK) st2 = mdev_run(&d2, &turned, &p2, 0x5C, o2, lse2);
    TA_CHECK(st == TA_OK && st2 == TA_OK && memcmp(o, o2, m.no * m.eb) == 0 &&
                 memcmp(lse, lse2, m.nlse * sizeof(float)) == 0,
             "rope (%s): o / lse differ from the call without the stage on q, k turned on the "
             "host (%s)",
             desc, ta_status_string(st2));
    if (st2 == TA_OK) mdev_free(&d2);
    free(turned.q);
    free(turned.k);
    free(turned.q_hist);
    /* c. identity tables: the call without the stage on the same q, k */
    if (identity) {
        st2 = mdev_make(&d2, &m, &p2);
        if (st2 == TA_OK) st2 = mdev_run(&d2, &m, &p2, 0x6D, o2, lse2);
        TA_CHECK(st2 == TA_OK && ta_trope_same(o, o2, m.no, m.eb) &&
                     ta_trope_same(lse, lse2, m.nlse, sizeof(float)),
                 "rope (%s): identity tables differ from the call without the stage (%s)", desc,
                 ta_status_string(st2));
        if (st2 == TA_OK) mdev_free(&d2);
    }
    { /* the exact kernels' bytes (which part b must tell apart) */
        ta_problem px = m.p;
        mdev dx;
        mrope rx;
        px.precision = TA_PRECISION_EXACT;
        st2 = mdev_make(&dx, &m, &px);
        if (st2 == TA_OK) {
            mrope_make(&rx, &dx, &tr, &m.p);
            st2 = mdev_run(&dx, &m, &px, 0x2B, o2, lse2);
            mrope_free(&rx);
            mdev_free(&dx);
        }
        TA_CHECK(st2 == TA_OK, "rope (%s): exact mode: %s", desc, ta_status_string(st2));
        if (st2 == TA_OK && memcmp(o, o2, m.no * m.eb) != 0) ++g_rope_vs_exact;
    }
    if (bad) fprintf(stderr, "rope (%s): %zu elements out of bound\n", desc, bad);
    if (g_rope_problems++ < 2) printf("rope problem: %s\n", desc);
    mrope_free(&rd);
    mdev_free(&d);
    free(o);
    free(o2);
    free(lse);
    free(lse2);
    ta_trope_free(&tr);
    mcase_free(&m);
    return bad == 0;
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_cuda_fast_mta");
    int count = 60, i, failed = 0, n_dev = 0;
    for (i = 1; i + 1 < argc; ++i) {
        if (strcmp(argv[i], "--count") == 0)
            count = atoi(argv[++i]);
        else if (strcmp(argv[i], "--cfg") == 0)
            g_cfg = atoi(argv[++i]);
    }
    check_size_query();
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_fast_mta") : TA_TEST_SKIP;
    }
    {
        int major = 0, minor = 0;
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
        g_sm90 = major == 9 && minor == 0;
        printf("device compute capability %d.%d: tile_config 5 (the wgmma kernel) %s\n", major,
               minor, g_sm90 ? "drawn" : "not drawn (sm_90 only)");
    }
    for (i = 0; i < count; ++i)
        failed += !check_problem(seed, i);
    check_history(seed, TA_BF16, 300, 77, 0);
    check_history(seed, TA_F16, 129, 1, 0);
    check_history(seed, TA_BF16, 2100, 1, TA_SPLITS_AUTO);
    check_history(seed, TA_F16, 1500, 16, 5);
    check_history(seed, TA_BF16, 700, 3, 0);
    for (i = 0; i < 12; ++i)
        check_paged(seed, i, 0);
    for (i = 0; i < 8; ++i) /* the rotary stage over pages: k gathered and turned, v gathered */
        check_paged(seed, 100 + i, 1);
    for (i = 0; i < count / 2 + 4; ++i)
        failed += !check_rope(seed, 1000 + i);
    TA_CHECK(g_rope_vs_exact > 0, "rope: all %d problems gave exact mode's bytes: the check "
             "that the fast kernels ran cannot fail", g_rope_problems);
    printf("rope: %d problems, %d of them differ from exact mode's bytes; worst errors (units of "
           "u): f16 o %.3g lse %.3g, bf16 o %.3g lse %.3g\n",
           g_rope_problems, g_rope_vs_exact, g_rope_err_o[0], g_rope_err_lse[0], g_rope_err_o[1],
           g_rope_err_lse[1]);
    check_determinism(seed);
    check_fallbacks_and_refusals(seed);
    printf("%d problems, %d failed; worst errors (units of u): f16 o %.3g lse %.3g, bf16 o %.3g "
           "lse %.3g (bounds: o %g, lse %g)\n",
           count, failed, g_err_o[0], g_err_lse[0], g_err_o[1], g_err_lse[1], 4.0, 2.0);
    return ta_test_finish("test_cuda_fast_mta");
}
