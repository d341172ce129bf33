/*
 * The rotary load stage on the CUDA backend's fast path (docs/rope.md,
 * docs/cuda.md section 7): SDPA forward and backward, f16 and bf16, D in
 * {64, 96, 128, 256}, both pair conventions, positions or token rows, one
 * table or one per kv head, GQA, causal, seqlens_k, any length.
 *
 * The fast path turns q and k once into the workspace (ta_rope_pair in f32,
 * rounded back to the storage type), runs the un-rotated kernels on the
 * copies, and the backward turns dq and dk back as it stores them. So, per
 * random problem (seed printed; TA_SEED replays):
 *   1. forward: o and lse with the rotary stage == o and lse of the same
 *      configuration without it on q, k turned on the host by the same
 *      arithmetic, bit for bit, for tile_config 0 and every candidate this
 *      device runs (a candidate refused without the stage must be refused
 *      with it);
 *   2. backward (sm_90): dv bit for bit equal to the un-rotated backward's on
 *      the turned q, k; dq and dk turned back: within the storage type's
 *      rounding of R^T applied (in double) to the un-rotated backward's:
 *      |dq - R^T dq_rot| <= u (|dq| + 2 (|dq_rot,a| + |dq_rot,b|)) + tiny
 *      (the un-rotated backward is itself checked against the float64 oracle
 *      by test_cuda_fast); off sm_90 the backward refuses the stage;
 *   3. identity tables (cos = 1, sin = 0): o, lse, dq, dk, dv bit for bit the
 *      un-rotated call's on the same q, k.
 * Plus: the workspace holds the turned copies (|q| + |k| more bytes); the
 * size queries need no device: the fast path refuses rope_pairs that do not
 * fill 16-byte chunks and split-K, the exact kernels (also f32, and the MTA
 * conv in fast mode with such pairs; with whole chunks fast MTA runs its own
 * kernels on turned copies, test_cuda_fast_mta) accept any (test_cuda_equiv
 * compares them bitwise with REF). Outputs are poisoned (NaN bytes) first.
 *
 *   test_cuda_rope [--count N]     TA_SEED replays a run.
 * Without a CUDA device: "no CUDA device: skipped", exit 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_math.h"
#include "ta_rope_load.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"


/* the head dims of the fast table (test_cuda_util.h: their candidates) */
static const int32_t k_dims[4] = {64, 96, 128, 256};

static int g_sm90;
static double g_worst_dq, g_worst_dk; /* worst error / allowance */
static int g_configs, g_problems;

/* One problem and its host tensors (contiguous [B, heads, S, D]). */
typedef struct rspec {
    ta_problem p;
    int32_t seqlens[8];
    int has_seqlens;
    float *cos, *sin;       /* [tables][rows][row_stride] */
    int32_t *pos_q, *pos_k; /* NULL or [B][S] */
    size_t n_tab;
    void *q, *k, *v, *d_o, *q_rot, *k_rot;
    size_t nq, nk, no, eb;
} rspec;

/* A non-negative int32 as a size. */
static size_t zs(int32_t x) { return (size_t)x; }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

static float get_f(const void *buf, ta_dtype dt, size_t i) {
    const uint16_t h = ((const uint16_t *)buf)[i];
    return dt == TA_BF16 ? ta_bf16_to_f32(h) : ta_f16_to_f32(h);
}
static void set_f(void *buf, ta_dtype dt, size_t i, float x) {
    ((uint16_t *)buf)[i] = dt == TA_BF16 ? ta_f32_to_bf16(x) : ta_f32_to_f16(x);
}

/* The table entry (floats from cos / sin) of token t of head h (a q head:
 * kv_side 0, its table is kv head h / group's; a kv head: 1) of batch entry b. */
static size_t tab_off(const rspec *s, int kv_side, int32_t b, int32_t h, int32_t t) {
    const ta_problem *p = &s->p;
    const int32_t seq = kv_side ? p->seq_k : p->seq_q;
    const int32_t *pos = kv_side ? s->pos_k : s->pos_q;
    const int32_t g = kv_side ? h : h / (p->heads_q / p->heads_kv);
    const int32_t tr = pos ? pos[zs(b) * zs(seq) + zs(t)] : t;
    return zs(g) * zs(p->rope_head_stride) + zs(tr) * zs(p->rope_row_stride);
}

/* dst = src with every row turned as the kernels do: widen, ta_rope_row (f32),
 * round to the storage type; q side (kv_side 0: heads_q, table of h / group)
 * or k side. */
static void rotate_host(const rspec *s, int kv_side, const void *src, void *dst) {
    const ta_problem *p = &s->p;
    const int32_t heads = kv_side ? p->heads_kv : p->heads_q;
    const int32_t seq = kv_side ? p->seq_k : p->seq_q;
    const int32_t d = p->head_dim;
    float row[256];
    int32_t b, h, t, f;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (t = 0; t < seq; ++t) {
                const size_t at = ((zs(b) * zs(heads) + zs(h)) * zs(seq) + zs(t)) * zs(d);
                const size_t off = tab_off(s, kv_side, b, h, t);
                for (f = 0; f < d; ++f)
                    row[f] = get_f(src, p->dtype, at + zs(f));
                ta_rope_row(row, 1, s->cos + off, s->sin + off, p->rope_pairs,
                            p->rope == TA_ROPE_HALF, 0);
                for (f = 0; f < d; ++f)
                    set_f(dst, p->dtype, at + zs(f), row[f]);
            }
}

static void random_spec(uint64_t seed, int idx, int identity, rspec *s) {
    ta_problem *p = &s->p;
    ta_rng r;
    int32_t rows, tables, b, t, i;
    memset(s, 0, sizeof *s);
    ta_rng_seed(&r, seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(idx + 1)));
    p->dtype = ta_rng_int(&r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->head_dim = p->head_dim_v = k_dims[ta_rng_int(&r, 0, 3)];
    p->batch = ta_rng_int(&r, 1, 2);
    p->heads_kv = ta_rng_int(&r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(&r, 1, 3);
    p->seq_q = ta_rng_int(&r, 1, 3) == 1 ? ta_rng_int(&r, 1, 40) : ta_rng_int(&r, 100, 400);
    p->seq_k = ta_rng_int(&r, 1, 3) == 1 ? ta_rng_int(&r, 1, 40) : ta_rng_int(&r, 100, 400);
    p->flags = ta_rng_int(&r, 0, 1) ? TA_CAUSAL : 0u;
    p->scale = 1.0f / sqrtf((float)p->head_dim);
    p->rope = ta_rng_int(&r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    {
        const int32_t unit = p->rope == TA_ROPE_HALF ? 8 : 4;
        p->rope_pairs = unit * ta_rng_int(&r, 1, p->head_dim / 2 / unit);
    }
    p->rope_row_stride = p->rope_pairs + ta_rng_int(&r, 0, 3) * 4;
    rows = (p->seq_q > p->seq_k ? p->seq_q : p->seq_k) + ta_rng_int(&r, 0, 64);
    p->rope_rows = rows;
    tables = ta_rng_int(&r, 0, 1) ? p->heads_kv : 1;
    p->rope_head_stride = tables > 1 ? rows * p->rope_row_stride + ta_rng_int(&r, 0, 2) * 4 : 0;
    s->n_tab = (size_t)(tables - 1) * (size_t)p->rope_head_stride +
               (size_t)rows * (size_t)p->rope_row_stride;
    s->cos = xmalloc(s->n_tab * sizeof(float));
    s->sin = xmalloc(s->n_tab * sizeof(float));
    for (i = 0; i < (int32_t)s->n_tab; ++i) {
        const float a = ta_rng_uniform(&r, -3.2f, 3.2f);
        s->cos[i] = identity ? 1.0f : (float)cos((double)a);
        s->sin[i] = identity ? 0.0f : (float)sin((double)a);
    }
    if (ta_rng_int(&r, 0, 1)) {
        s->pos_q = xmalloc((size_t)p->batch * (size_t)p->seq_q * sizeof(int32_t));
        s->pos_k = xmalloc((size_t)p->batch * (size_t)p->seq_k * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            for (t = 0; t < p->seq_q; ++t)
                s->pos_q[zs(b) * zs(p->seq_q) + zs(t)] = ta_rng_int(&r, 0, rows - 1);
            for (t = 0; t < p->seq_k; ++t)
                s->pos_k[zs(b) * zs(p->seq_k) + zs(t)] = ta_rng_int(&r, 0, rows - 1);
        }
    }
    s->has_seqlens = ta_rng_int(&r, 0, 2) == 0;
    for (b = 0; b < p->batch; ++b)
        s->seqlens[b] = ta_rng_int(&r, 0, p->seq_k);
    s->eb = 2;
    s->nq = zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * zs(p->head_dim);
    s->nk = zs(p->batch) * zs(p->heads_kv) * zs(p->seq_k) * zs(p->head_dim);
    s->no = s->nq;
    s->q = xmalloc(s->nq * 2);
    s->k = xmalloc(s->nk * 2);
    s->v = xmalloc(s->nk * 2);
    s->d_o = xmalloc(s->no * 2);
    s->q_rot = xmalloc(s->nq * 2);
    s->k_rot = xmalloc(s->nk * 2);
    ta_fill_uniform(&r, s->q, p->dtype, s->nq, -2.0f, 2.0f);
    ta_fill_uniform(&r, s->k, p->dtype, s->nk, -2.0f, 2.0f);
    ta_fill_uniform(&r, s->v, p->dtype, s->nk, -1.0f, 1.0f);
    ta_fill_uniform(&r, s->d_o, p->dtype, s->no, -1.0f, 1.0f);
    rotate_host(s, 0, s->q, s->q_rot);
    rotate_host(s, 1, s->k, s->k_rot);
}

static void spec_free(rspec *s) {
    free(s->cos);
    free(s->sin);
    free(s->pos_q);
    free(s->pos_k);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->d_o);
    free(s->q_rot);
    free(s->k_rot);
}

static void *upload(const void *src, size_t bytes) {
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    if (src && bytes) CUDA_OK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Device buffers of one problem: both q/k sets, the tables, the outputs. */
typedef struct dbufs {
    void *q, *k, *q_rot, *k_rot, *v, *d_o, *o, *dq, *dk, *dv, *ws;
    float *lse, *cos, *sin;
    int32_t *pos_q, *pos_k;
    size_t ws_bytes;
} dbufs;

static void dbufs_make(dbufs *d, const rspec *s) {
    const ta_problem *p = &s->p;
    size_t fw = 0, bw = 0;
    ta_problem plain = *p;
    memset(d, 0, sizeof *d);
    d->q = upload(s->q, s->nq * 2);
    d->k = upload(s->k, s->nk * 2);
    d->q_rot = upload(s->q_rot, s->nq * 2);
    d->k_rot = upload(s->k_rot, s->nk * 2);
    d->v = upload(s->v, s->nk * 2);
    d->d_o = upload(s->d_o, s->no * 2);
    d->o = upload(NULL, s->no * 2);
    d->dq = upload(NULL, s->nq * 2);
    d->dk = upload(NULL, s->nk * 2);
    d->dv = upload(NULL, s->nk * 2);
    d->lse = upload(NULL, zs(p->batch) * zs(p->heads_q) * zs(p->seq_q) * sizeof(float));
    d->cos = upload(s->cos, s->n_tab * sizeof(float));
    d->sin = upload(s->sin, s->n_tab * sizeof(float));
    if (s->pos_q) {
        d->pos_q = upload(s->pos_q, zs(p->batch) * zs(p->seq_q) * sizeof(int32_t));
        d->pos_k = upload(s->pos_k, zs(p->batch) * zs(p->seq_k) * sizeof(int32_t));
    }
    plain.rope = plain.rope_pairs = plain.rope_rows = 0;
    plain.rope_row_stride = plain.rope_head_stride = 0;
    TA_CHECK(ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &fw) == TA_OK, "fwd size query");
    TA_CHECK(ta_bwd_workspace_size(p, TA_BACKEND_CUDA, &bw) == TA_OK, "bwd size query");
    {
        size_t pf = 0, pb = 0;
        const size_t turned = (s->nq + s->nk) * 2;
        TA_CHECK(ta_fwd_workspace_size(&plain, TA_BACKEND_CUDA, &pf) == TA_OK &&
                     ta_bwd_workspace_size(&plain, TA_BACKEND_CUDA, &pb) == TA_OK &&
                     fw >= pf + turned && fw <= pf + turned + 128 && bw >= pb + turned &&
                     bw <= pb + turned + 128,
                 "workspace: the turned q and k (%zu bytes) on top of %zu / %zu; got %zu / %zu",
                 turned, pf, pb, fw, bw);
    }
    d->ws_bytes = fw > bw ? fw : bw;
    d->ws = upload(NULL, d->ws_bytes);
}

static void dbufs_free(dbufs *d) {
    void *all[] = {d->q,  d->k,  d->q_rot, d->k_rot, d->v,   d->d_o, d->o,     d->dq,
                   d->dk, d->dv, d->ws,    d->lse,   d->cos, d->sin, d->pos_q, d->pos_k};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i)
        cudaFree(all[i]);
}

/* Host results of one call. */
typedef struct hout {
    void *o, *dq, *dk, *dv;
    float *lse;
} hout;

static void hout_make(hout *h, const rspec *s) {
    h->o = xmalloc(s->no * 2);
    h->dq = xmalloc(s->nq * 2);
    h->dk = xmalloc(s->nk * 2);
    h->dv = xmalloc(s->nk * 2);
    h->lse = xmalloc(zs(s->p.batch) * zs(s->p.heads_q) * zs(s->p.seq_q) * sizeof(float));
}
static void hout_free(hout *h) {
    free(h->o);
    free(h->dq);
    free(h->dk);
    free(h->dv);
    free(h->lse);
}

/* One forward (and, bwd, the backward after it) with the rotary stage (rot:
 * on q, k) or without (on q_rot, k_rot; or on q, k when `raw`). Outputs
 * poisoned first; results into h. Returns the first failing status. */
static ta_status run(const rspec *s, dbufs *d, int rot, int raw, int32_t cfg, int bwd, hout *h) {
    ta_problem p = s->p;
    ta_fwd_args fa;
    ta_bwd_args ba;
    const size_t nlse = zs(p.batch) * zs(p.heads_q) * zs(p.seq_q);
    ta_status st;
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    p.tile_config = cfg;
    if (!rot) p.rope = p.rope_pairs = p.rope_rows = p.rope_row_stride = p.rope_head_stride = 0;
    fa.q = ba.q = rot || raw ? d->q : d->q_rot;
    fa.k = ba.k = rot || raw ? d->k : d->k_rot;
    fa.v = ba.v = d->v;
    fa.o = d->o;
    fa.lse = d->lse;
    fa.seqlens_k = ba.seqlens_k = s->has_seqlens ? s->seqlens : NULL;
    if (rot) {
        fa.rope.cos = ba.rope.cos = d->cos;
        fa.rope.sin = ba.rope.sin = d->sin;
        fa.rope.pos_q = ba.rope.pos_q = d->pos_q;
        fa.rope.pos_k = ba.rope.pos_k = d->pos_k;
    }
    CUDA_OK(cudaMemset(d->o, 0xff, s->no * 2));
    CUDA_OK(cudaMemset(d->lse, 0xff, nlse * sizeof(float)));
    st = ta_fwd(&p, TA_BACKEND_CUDA, &fa, d->ws, d->ws_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    if (st != TA_OK) return st;
    CUDA_OK(cudaMemcpy(h->o, d->o, s->no * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->lse, d->lse, nlse * sizeof(float), cudaMemcpyDeviceToHost));
    if (!bwd) return TA_OK;
    ba.o = d->o;
    ba.lse = d->lse;
    ba.d_o = d->d_o;
    ba.dq = d->dq;
    ba.dk = d->dk;
    ba.dv = d->dv;
    CUDA_OK(cudaMemset(d->dq, 0xff, s->nq * 2));
    CUDA_OK(cudaMemset(d->dk, 0xff, s->nk * 2));
    CUDA_OK(cudaMemset(d->dv, 0xff, s->nk * 2));
    st = ta_bwd(&p, TA_BACKEND_CUDA, &ba, d->ws, d->ws_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    if (st != TA_OK) return st;
    CUDA_OK(cudaMemcpy(h->dq, d->dq, s->nq * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->dk, d->dk, s->nk * 2, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h->dv, d->dv, s->nk * 2, cudaMemcpyDeviceToHost));
    return TA_OK;
}

/* got (with the rotary stage) against R^T applied in double to ref (the
 * un-rotated backward's gradient on rotated inputs): side 0 = dq, 1 = dk. */
static void check_turned_back(const rspec *s, int kv_side, const void *got, const void *ref,
                              const char *what, double *worst) {
    const ta_problem *p = &s->p;
    const int32_t heads = kv_side ? p->heads_kv : p->heads_q;
    const int32_t seq = kv_side ? p->seq_k : p->seq_q;
    const int32_t n = p->rope_pairs, d = p->head_dim;
    const double u = p->dtype == TA_BF16 ? 0x1p-8 : 0x1p-11;
    const double tiny = p->dtype == TA_BF16 ? 0x1p-120 : 0x1p-23;
    int32_t b, h, t, f;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (t = 0; t < seq; ++t) {
                const size_t at = ((zs(b) * zs(heads) + zs(h)) * zs(seq) + zs(t)) * zs(d);
                const size_t off = tab_off(s, kv_side, b, h, t);
                for (f = 0; f < d; ++f) {
                    const double x = (double)get_f(got, p->dtype, at + zs(f));
                    double want, ra = 0.0, rb = 0.0, allow, c, sn;
                    int32_t i = -1, fa = f, fb = f;
                    int is_b = 0;
                    if (f < 2 * n) {
                        if (p->rope != TA_ROPE_HALF) {
                            i = f / 2;
                            fa = 2 * i;
                            fb = 2 * i + 1;
                            is_b = f & 1;
                        } else {
                            i = f < n ? f : f - n;
                            fa = i;
                            fb = i + n;
                            is_b = f >= n;
                        }
                    }
                    if (i < 0) {
                        want = (double)get_f(ref, p->dtype, at + zs(f));
                        allow = 0.0;
                    } else {
                        c = (double)s->cos[off + (size_t)i];
                        sn = (double)s->sin[off + (size_t)i];
                        ra = (double)get_f(ref, p->dtype, at + zs(fa));
                        rb = (double)get_f(ref, p->dtype, at + zs(fb));
                        /* transpose: g'_a = g_a c + g_b s, g'_b = g_b c - g_a s */
                        want = is_b ? rb * c - ra * sn : ra * c + rb * sn;
                        allow = u * (fabs(x) + 2.0 * (fabs(ra) + fabs(rb))) + tiny;
                    }
                    if (!(fabs(x - want) <= allow)) {
                        TA_CHECK(0,
                                 "%s[%d][%d][%d][%d] = %.8g, R^T of the un-rotated %.8g "
                                 "(allowed %.3g)",
                                 what, b, h, t, f, x, want, allow);
                        return;
                    }
                    if (allow > 0.0 && fabs(x - want) / allow > *worst)
                        *worst = fabs(x - want) / allow;
                }
            }
}

static void describe(const rspec *s, int idx) {
    const ta_problem *p = &s->p;
    printf("  problem %d: %s D=%d B=%d H=%d/%d S=%d/%d%s%s %s pairs=%d rows=%d %s%s\n", idx,
           p->dtype == TA_BF16 ? "bf16" : "f16", p->head_dim, p->batch, p->heads_q, p->heads_kv,
           p->seq_q, p->seq_k, (p->flags & TA_CAUSAL) ? " causal" : "",
           s->has_seqlens ? " seqlens" : "", p->rope == TA_ROPE_HALF ? "half" : "interleaved",
           p->rope_pairs, p->rope_rows, s->pos_q ? "positions" : "token rows",
           p->rope_head_stride ? " per-head tables" : "");
}

static void check_problem(uint64_t seed, int idx, int identity) {
    rspec s;
    dbufs d;
    hout a, b;
    int32_t cfg, n_cand;
    random_spec(seed, idx, identity, &s);
    n_cand = ta_test_fast_candidates(s.p.head_dim);
    if (idx < 4 || identity) describe(&s, idx);
    dbufs_make(&d, &s);
    hout_make(&a, &s);
    hout_make(&b, &s);
    for (cfg = 0; cfg <= n_cand; ++cfg) {
        const int bwd = cfg == 0 && g_sm90; /* one backward configuration per head dim */
        const ta_status st = run(&s, &d, 1, 0, cfg, bwd, &a);
        const ta_status st_plain = run(&s, &d, 0, identity, cfg, bwd, &b);
        TA_CHECK(st == st_plain, "problem %d cfg %d: status %d (%s) with the stage, %d without",
                 idx, cfg, (int)st, ta_status_string(st), (int)st_plain);
        if (st != TA_OK || st_plain != TA_OK) continue;
        ++g_configs;
        TA_CHECK(memcmp(a.o, b.o, s.no * 2) == 0 &&
                     memcmp(a.lse, b.lse,
                            zs(s.p.batch) * zs(s.p.heads_q) * zs(s.p.seq_q) * sizeof(float)) == 0,
                 "problem %d cfg %d: o/lse differ from the un-rotated kernel on %s q, k", idx, cfg,
                 identity ? "the same" : "host-turned");
        if (!bwd) continue;
        TA_CHECK(memcmp(a.dv, b.dv, s.nk * 2) == 0, "problem %d: dv differs", idx);
        if (identity) {
            TA_CHECK(memcmp(a.dq, b.dq, s.nq * 2) == 0 && memcmp(a.dk, b.dk, s.nk * 2) == 0,
                     "problem %d: identity tables: dq/dk differ from the un-rotated call", idx);
        } else {
            check_turned_back(&s, 0, a.dq, b.dq, "dq", &g_worst_dq);
            check_turned_back(&s, 1, a.dk, b.dk, "dk", &g_worst_dk);
        }
    }
    if (!g_sm90) /* the backward refuses the stage off sm_90 */
        TA_CHECK(run(&s, &d, 1, 0, 0, 1, &a) == TA_ERR_UNSUPPORTED,
                 "problem %d: a backward with the stage ran off sm_90", idx);
    ++g_problems;
    hout_free(&a);
    hout_free(&b);
    dbufs_free(&d);
    spec_free(&s);
}

/* The refusals that need no device: the size queries. */
static void check_size_refusals(void) {
    ta_problem p;
    size_t bytes = 0;
    memset(&p, 0, sizeof p);
    p.dtype = TA_BF16;
    p.precision = TA_PRECISION_FAST;
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seq_q = p.seq_k = 64;
    p.head_dim = p.head_dim_v = 128;
    p.scale = 0.125f;
    p.rope = TA_ROPE_HALF;
    p.rope_pairs = 64;
    p.rope_rows = 64;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK, "fast, half, 64 pairs");
    p.rope_pairs = 60; /* not a multiple of 8 */
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
             "fast, half, 60 pairs: refused");
    p.rope = TA_ROPE_INTERLEAVED; /* 60 = 15 x 4 */
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
             "fast, interleaved, 60 pairs");
    p.rope_pairs = 62;
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
             "fast, interleaved, 62 pairs: refused");
    p.rope_pairs = 64;
    p.num_splits = 2; /* split-K with the stage: not yet (16 key tiles: not clamped to 1) */
    p.seq_q = p.seq_k = p.rope_rows = 1024;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED &&
                 ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
             "fast with split-K: refused");
    p.num_splits = 0;
    p.seq_q = p.seq_k = p.rope_rows = 64;
    /* the exact kernels turn q and k as they load them: any pair count, every
     * dtype, SDPA and MTA, split-K (test_cuda_equiv compares them with REF) */
    p.precision = TA_PRECISION_EXACT;
    p.rope_pairs = 61;
    p.num_splits = 3;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK &&
                 ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
             "exact CUDA kernels: the rotary stage with 61 pairs and split-K");
    p.num_splits = 0;
    p.conv_q = 3;
    p.conv_k = 3;
    p.flags = TA_CAUSAL;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK &&
                 ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
             "exact CUDA kernels: the rotary stage with the MTA conv");
    /* fast mode, MTA, 61 pairs (not whole 16-byte chunks): the exact kernels
     * (whole chunks run the fast MTA kernels on turned copies: test_cuda_fast_mta) */
    p.precision = TA_PRECISION_FAST;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
             "fast mode, MTA: the exact kernels' rotary stage");
    p.conv_q = p.conv_k = 0;
    p.flags = 0;
    p.dtype = TA_F32;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK &&
                 ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
             "fast mode, f32: the exact kernels' rotary stage");
}

/* A NULL position array whose sequence passes the table (S > rope_rows) is
 * TA_ERR_BAD_ARG on CUDA too (no position is read for that check; the
 * kernels would clamp every token past the table to its last row), forward
 * and backward, with o and dq untouched (poisoned). */
static void check_null_pos_refusal(void) {
    ta_problem p;
    ta_fwd_args fa;
    ta_bwd_args ba;
    const size_t n = 2 * 80 * 64, tab = 64 * 32;
    void *q = upload(NULL, n * 2), *k = upload(NULL, n * 2), *v = upload(NULL, n * 2);
    void *o = upload(NULL, n * 2), *dq = upload(NULL, n * 2), *dk = upload(NULL, n * 2);
    void *dv = upload(NULL, n * 2), *ws;
    float *lse = (float *)upload(NULL, 2 * 80 * 4), *cs = (float *)upload(NULL, tab * 4);
    float *sn = (float *)upload(NULL, tab * 4);
    uint16_t *h = (uint16_t *)xmalloc(n * 2);
    size_t wf = 0, wb = 0, i;
    int pass;
    CUDA_OK(cudaMemset(q, 0, n * 2));
    CUDA_OK(cudaMemset(k, 0, n * 2));
    CUDA_OK(cudaMemset(v, 0, n * 2));
    CUDA_OK(cudaMemset(lse, 0, 2 * 80 * 4));
    CUDA_OK(cudaMemset(cs, 0, tab * 4));
    CUDA_OK(cudaMemset(sn, 0, tab * 4));
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = p.heads_kv = 2;
    p.seq_q = p.seq_k = 80; /* rows 64 .. 79 past the 64-row table */
    p.head_dim = p.head_dim_v = 64;
    p.dtype = TA_BF16;
    p.precision = TA_PRECISION_FAST;
    p.rope = TA_ROPE_HALF;
    p.rope_pairs = 32;
    p.rope_rows = 64;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &wf) == TA_OK &&
                 (!g_sm90 || ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &wb) == TA_OK),
             "NULL positions: the size queries (which read no positions) refused");
    ws = upload(NULL, wf > wb ? wf : wb);
    for (pass = 0; pass < (g_sm90 ? 2 : 1); ++pass) { /* the backward's stage: sm_90 */
        ta_status st;
        CUDA_OK(cudaMemset(o, 0xFF, n * 2));
        CUDA_OK(cudaMemset(dq, 0xFF, n * 2));
        if (pass == 0) {
            memset(&fa, 0, sizeof fa);
            fa.q = q;
            fa.k = k;
            fa.v = v;
            fa.o = o;
            fa.lse = lse;
            fa.rope.cos = cs;
            fa.rope.sin = sn;
            st = ta_fwd(&p, TA_BACKEND_CUDA, &fa, ws, wf, NULL);
        } else {
            memset(&ba, 0, sizeof ba);
            ba.q = q;
            ba.k = k;
            ba.v = v;
            ba.o = v;
            ba.d_o = k;
            ba.lse = lse;
            ba.dq = dq;
            ba.dk = dk;
            ba.dv = dv;
            ba.rope.cos = cs;
            ba.rope.sin = sn;
            st = ta_bwd(&p, TA_BACKEND_CUDA, &ba, ws, wb, NULL);
        }
        CUDA_OK(cudaDeviceSynchronize());
        TA_CHECK(st == TA_ERR_BAD_ARG, "NULL positions past rope_rows on CUDA (%s): status %d",
                 pass ? "backward" : "forward", (int)st);
        CUDA_OK(cudaMemcpy(h, pass ? dq : o, n * 2, cudaMemcpyDeviceToHost));
        for (i = 0; i < n && h[i] == 0xFFFFu; ++i) {
        }
        TA_CHECK(i == n, "NULL positions past rope_rows on CUDA (%s): output written",
                 pass ? "backward" : "forward");
    }
    free(h);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(lse);
    cudaFree(cs);
    cudaFree(sn);
    cudaFree(ws);
}

int main(int argc, char **argv) {
    int count = 24, i, dev_count = 0;
    uint64_t seed;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: test_cuda_rope [--count N]\n");
            return 2;
        }
    }
    check_size_refusals();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_rope") : TA_TEST_SKIP;
    }
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        fprintf(stderr, "FAIL: a CUDA device is present but TA_BACKEND_CUDA is unavailable\n");
        return 1;
    }
    {
        int major = 0, minor = 0;
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
        g_sm90 = major == 9 && minor == 0;
    }
    seed = ta_test_seed("test_cuda_rope");
    printf("%s device\n", g_sm90 ? "sm_90" : "not an sm_90 (the backward refuses the stage)");
    check_null_pos_refusal();
    for (i = 0; i < count; ++i)
        check_problem(seed, i, 0);
    for (i = 0; i < 4; ++i)
        check_problem(seed, count + i, 1);
    printf("%d problems, %d (problem, configuration) pairs bit-identical to the un-rotated "
           "kernels on rotated q, k (4 with identity tables: on the same q, k)\n",
           g_problems, g_configs);
    printf("backward turned back: worst |dq - R^T dq_rot| %.3f, dk %.3f of the allowance\n",
           g_worst_dq, g_worst_dk);
    return ta_test_finish("test_cuda_rope");
}
