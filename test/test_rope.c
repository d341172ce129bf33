/*
 * test_rope: the rotary load stage (ta_problem.rope, ta_*_args.rope; docs/rope.md
 * "The load stage") on REF and CPU, forward and backward, SDPA and MTA.
 *
 *   1. REF against the float64 oracle (test/oracle.c) fed with q and k rotated
 *      explicitly in double from the same f32 tables; dq and dk are the
 *      oracle's gradients with respect to the rotated q, k rotated back
 *      (R^T g). Random problems: both pair conventions, position arrays or
 *      none, per-head tables or one, f32/f16/bf16, GQA, causal, windows,
 *      seqlens_k, [B, S, H, D] strides on q/k/dq/dk, split-K, MTA convs.
 *      Errors are |lib - oracle| / max |oracle| per tensor, against a bound
 *      per dtype (output rounding and f32 arithmetic; a wrong rotation
 *      gives errors of order 1: --self-check turns the oracle's sin around
 *      and expects every case to fail).
 *   2. CPU == REF bit for bit on every ISA path of the machine (TA_CPU_ISA),
 *      with 1 and 3 threads, and through caller-run tasks (one thread,
 *      tasks in order): o, lse, dq, dk, dv, dconv_w; a task scratch on a
 *      table is refused.
 *   3. A table of identity rows (cos = 1, sin = 0), with random positions,
 *      gives the bits of the same call without rotation, REF and CPU.
 *   4. Bad input: every refusal of the stage with its status, outputs
 *      (canary-filled) untouched.
 *
 * Fresh random inputs each run; the seed is printed (TA_SEED replays it);
 * outputs poisoned before every call.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ta_cpu.h"
#include "oracle.h"
#include "test_util.h"
#include "tileattn.h"

static int self_check; /* --self-check: the oracle turns the other way */

/* One random problem with everything the library and the oracle need. */
typedef struct rcase {
    ta_problem p;
    int strided;            /* q, k, dq, dk as [B, S, H, D] */
    int32_t *seqlens;       /* [B] or NULL */
    int32_t *pos_q, *pos_k; /* [B, S_q], [B, S_k] or NULL */
    float *cos_t, *sin_t;   /* tables, n_tab floats each */
    size_t n_tab;
    float *conv_w; /* [H, c_q, c_k] or NULL */
    size_t n_q, n_k, n_v, n_o, n_lse, n_w, eb;
    void *q, *k, *v, *d_o; /* contiguous [B, H, S, D] storage */
    void *q_lib, *k_lib;   /* what the library reads (strided copies, or q, k) */
} rcase;

typedef struct rout {
    void *o, *dq, *dk, *dv; /* dq, dk in the library's layout */
    float *lse, *dw;
} rout;

static void *xalloc(size_t n) {
    void *p = ta_test_alloc(n < 64 ? 64 : n);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* Element offset of (b, h, s) of a [B, heads, S, dim] tensor, BHSD or BSHD. */
static size_t at(int strided, int32_t heads, int32_t seq, int32_t dim, int32_t b, int32_t h,
                 int32_t s) {
    if (strided)
        return (((size_t)b * (size_t)seq + (size_t)s) * (size_t)heads + (size_t)h) * (size_t)dim;
    return (((size_t)b * (size_t)heads + (size_t)h) * (size_t)seq + (size_t)s) * (size_t)dim;
}

/* dst (layout `strided`) = contiguous src, or back (to_contig). */
static void relayout(void *dst, const void *src, size_t eb, int32_t nb, int32_t nh, int32_t ns,
                     int32_t dim, int to_contig) {
    int32_t b, h, s;
    for (b = 0; b < nb; ++b)
        for (h = 0; h < nh; ++h)
            for (s = 0; s < ns; ++s) {
                const size_t c = at(0, nh, ns, dim, b, h, s), x = at(1, nh, ns, dim, b, h, s);
                if (to_contig)
                    memcpy((char *)dst + c * eb, (const char *)src + x * eb, (size_t)dim * eb);
                else
                    memcpy((char *)dst + x * eb, (const char *)src + c * eb, (size_t)dim * eb);
            }
}

static ta_strides bshd(const ta_problem *p, int32_t heads, int32_t seq, int32_t dim) {
    (void)p;
    return ta_test_strides_bshd(heads, seq, dim);
}

/* ---- the case ---------------------------------------------------------- */

static void fill_tables(ta_rng *r, rcase *c, int identity) {
    size_t i;
    for (i = 0; i < c->n_tab; ++i) {
        const double a = (double)ta_rng_uniform(r, -40.0f, 40.0f);
        c->cos_t[i] = identity ? 1.0f : (float)cos(a);
        c->sin_t[i] = identity ? 0.0f : (float)sin(a);
    }
}

/* Random problem; mta: with a conv. Returns 0 if the library refuses the
 * geometry (the caller draws again). */
static int make_case(ta_rng *r, rcase *c, int mta) {
    static const int32_t blocks[] = {8, 16, 24, 32, 64};
    ta_problem *p = &c->p;
    int32_t group, rows_need, tables;
    size_t bq, bb;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 3);
    group = ta_rng_int(r, 1, 3);
    p->heads_q = p->heads_kv * group;
    p->seq_q = ta_rng_int(r, 1, 3) == 1 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 1, 70);
    p->seq_k = ta_rng_int(r, 1, 4) == 1 ? p->seq_q : ta_rng_int(r, 1, 90);
    p->head_dim = ta_rng_int(r, 1, 4) == 1 ? 64 : ta_rng_int(r, 2, 72);
    p->head_dim_v = ta_rng_int(r, 1, 40);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, -0.6f, 0.6f);
    if (mta) {
        p->flags = TA_CAUSAL;
        p->conv_q = ta_rng_int(r, 1, 4);
        p->conv_k = 2 * ta_rng_int(r, 0, 2) + 1;
    } else {
        p->block_q = blocks[ta_rng_int(r, 0, 4)];
        p->block_k = blocks[ta_rng_int(r, 0, 4)];
        p->num_splits = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 2, 3) : 0;
    }
    ta_test_random_window(r, p, 25);
    p->rope = ta_rng_int(r, 0, 1) ? TA_ROPE_INTERLEAVED : TA_ROPE_HALF;
    p->rope_pairs = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, p->head_dim / 2) : p->head_dim / 2;
    p->rope_row_stride = ta_rng_int(r, 0, 1) ? 0 : p->rope_pairs + ta_rng_int(r, 0, 5);
    c->strided = ta_rng_int(r, 0, 3) == 0;
    /* positions: given (rows free) or not (rows cover the sequences) */
    rows_need = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    if (ta_rng_int(r, 0, 1)) {
        size_t i;
        p->rope_rows = ta_rng_int(r, 1, 120);
        c->pos_q = (int32_t *)xalloc((size_t)p->batch * (size_t)p->seq_q * 4);
        c->pos_k = (int32_t *)xalloc((size_t)p->batch * (size_t)p->seq_k * 4);
        for (i = 0; i < (size_t)p->batch * (size_t)p->seq_q; ++i)
            c->pos_q[i] = ta_rng_int(r, 0, p->rope_rows - 1);
        for (i = 0; i < (size_t)p->batch * (size_t)p->seq_k; ++i)
            c->pos_k[i] = ta_rng_int(r, 0, p->rope_rows - 1);
        if (ta_rng_int(r, 0, 3) == 0) { /* decode-like: only q given */
            ta_test_free(c->pos_k);
            c->pos_k = NULL;
            if (p->rope_rows < p->seq_k) p->rope_rows = p->seq_k;
        }
    } else {
        p->rope_rows = rows_need + ta_rng_int(r, 0, 4);
    }
    {
        const int32_t rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
        const int32_t one = p->rope_rows * rs;
        p->rope_head_stride = ta_rng_int(r, 0, 1) ? one + ta_rng_int(r, 0, 3) : 0;
        tables = p->rope_head_stride ? p->heads_kv : 1;
        c->n_tab = (size_t)(tables - 1) * (size_t)p->rope_head_stride + (size_t)one;
    }
    if (ta_fwd_workspace_size(p, TA_BACKEND_REF, &bq) != TA_OK ||
        ta_bwd_workspace_size(p, TA_BACKEND_REF, &bb) != TA_OK) {
        ta_test_free(c->pos_q);
        ta_test_free(c->pos_k);
        c->pos_q = c->pos_k = NULL;
        return 0;
    }
    c->cos_t = (float *)xalloc(c->n_tab * 4);
    c->sin_t = (float *)xalloc(c->n_tab * 4);
    fill_tables(r, c, 0);
    c->eb = ta_dtype_size(p->dtype);
    c->n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    c->n_q = c->n_lse * (size_t)p->head_dim;
    c->n_o = c->n_lse * (size_t)p->head_dim_v;
    c->n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
    c->n_v = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim_v;
    c->q = xalloc(c->n_q * c->eb);
    c->k = xalloc(c->n_k * c->eb);
    c->v = xalloc(c->n_v * c->eb);
    c->d_o = xalloc(c->n_o * c->eb);
    ta_fill_uniform(r, c->q, p->dtype, c->n_q, -1.5f, 1.5f);
    ta_fill_uniform(r, c->k, p->dtype, c->n_k, -1.5f, 1.5f);
    ta_fill_uniform(r, c->v, p->dtype, c->n_v, -1.0f, 1.0f);
    ta_fill_uniform(r, c->d_o, p->dtype, c->n_o, -1.0f, 1.0f);
    c->q_lib = c->q;
    c->k_lib = c->k;
    if (c->strided) {
        c->q_lib = xalloc(c->n_q * c->eb);
        c->k_lib = xalloc(c->n_k * c->eb);
        relayout(c->q_lib, c->q, c->eb, p->batch, p->heads_q, p->seq_q, p->head_dim, 0);
        relayout(c->k_lib, c->k, c->eb, p->batch, p->heads_kv, p->seq_k, p->head_dim, 0);
    }
    if (ta_rng_int(r, 0, 3) == 0) {
        int32_t b;
        c->seqlens = (int32_t *)xalloc((size_t)p->batch * 4);
        for (b = 0; b < p->batch; ++b)
            c->seqlens[b] = ta_rng_int(r, 0, p->seq_k);
    }
    if (mta) {
        size_t i;
        c->n_w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
        c->conv_w = (float *)xalloc(c->n_w * 4);
        for (i = 0; i < c->n_w; ++i)
            c->conv_w[i] = ta_rng_uniform(r, -0.7f, 0.7f);
    }
    return 1;
}

static void free_case(rcase *c) {
    if (c->q_lib != c->q) ta_test_free(c->q_lib);
    if (c->k_lib != c->k) ta_test_free(c->k_lib);
    ta_test_free(c->q);
    ta_test_free(c->k);
    ta_test_free(c->v);
    ta_test_free(c->d_o);
    ta_test_free(c->seqlens);
    ta_test_free(c->pos_q);
    ta_test_free(c->pos_k);
    ta_test_free(c->cos_t);
    ta_test_free(c->sin_t);
    ta_test_free(c->conv_w);
    memset(c, 0, sizeof *c);
}

static void alloc_out(const rcase *c, rout *o) {
    o->o = xalloc(c->n_o * c->eb);
    o->dq = xalloc(c->n_q * c->eb);
    o->dk = xalloc(c->n_k * c->eb);
    o->dv = xalloc(c->n_v * c->eb);
    o->lse = (float *)xalloc(c->n_lse * 4);
    o->dw = c->n_w ? (float *)xalloc(c->n_w * 4) : NULL;
}

static void free_out(rout *o) {
    ta_test_free(o->o);
    ta_test_free(o->dq);
    ta_test_free(o->dk);
    ta_test_free(o->dv);
    ta_test_free(o->lse);
    ta_test_free(o->dw);
}

static ta_rope_args rope_args(const rcase *c) {
    ta_rope_args a;
    a.cos = c->cos_t;
    a.sin = c->sin_t;
    a.pos_q = c->pos_q;
    a.pos_k = c->pos_k;
    return a;
}

static ta_fwd_args fwd_args(const rcase *c, const rout *o) {
    ta_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = c->q_lib;
    a.k = c->k_lib;
    a.v = c->v;
    a.conv_w = c->conv_w;
    a.seqlens_k = c->seqlens;
    a.o = o->o;
    a.lse = o->lse;
    if (c->strided) {
        a.q_strides = bshd(&c->p, c->p.heads_q, c->p.seq_q, c->p.head_dim);
        a.k_strides = bshd(&c->p, c->p.heads_kv, c->p.seq_k, c->p.head_dim);
    }
    a.rope = rope_args(c);
    return a;
}

static ta_bwd_args bwd_args(const rcase *c, const rout *o, const void *o_in, const float *lse_in) {
    ta_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = c->q_lib;
    a.k = c->k_lib;
    a.v = c->v;
    a.o = o_in;
    a.d_o = c->d_o;
    a.lse = lse_in;
    a.conv_w = c->conv_w;
    a.seqlens_k = c->seqlens;
    a.dq = o->dq;
    a.dk = o->dk;
    a.dv = o->dv;
    a.dconv_w = o->dw;
    if (c->strided) {
        a.q_strides = a.dq_strides = bshd(&c->p, c->p.heads_q, c->p.seq_q, c->p.head_dim);
        a.k_strides = a.dk_strides = bshd(&c->p, c->p.heads_kv, c->p.seq_k, c->p.head_dim);
    }
    a.rope = rope_args(c);
    return a;
}

static void poison_out(const rcase *c, rout *o) {
    ta_poison(o->o, c->n_o * c->eb);
    ta_poison(o->dq, c->n_q * c->eb);
    ta_poison(o->dk, c->n_k * c->eb);
    ta_poison(o->dv, c->n_v * c->eb);
    ta_poison(o->lse, c->n_lse * 4);
    if (o->dw) ta_poison(o->dw, c->n_w * 4);
}

/* Forward then backward (from this run's o, lse) of problem p on be. */
static ta_status run(ta_backend be, ta_rng *r, const rcase *c, const ta_problem *p, rout *o) {
    ta_fwd_args fa = fwd_args(c, o);
    ta_bwd_args ba;
    size_t fb = 0, bb = 0;
    void *ws;
    ta_status st;
    poison_out(c, o);
    if ((st = ta_fwd_workspace_size(p, be, &fb)) != TA_OK) return st;
    if ((st = ta_bwd_workspace_size(p, be, &bb)) != TA_OK) return st;
    ws = xalloc(fb);
    ta_fill_uniform(r, ws, TA_F32, fb / 4, -9.0f, 9.0f); /* garbage */
    st = ta_fwd(p, be, &fa, ws, fb, NULL);
    ta_test_free(ws);
    if (st != TA_OK) return st;
    ba = bwd_args(c, o, o->o, o->lse);
    ws = xalloc(bb);
    ta_fill_uniform(r, ws, TA_F32, bb / 4, -9.0f, 9.0f);
    st = ta_bwd(p, be, &ba, ws, bb, NULL);
    ta_test_free(ws);
    return st;
}

/* The same through caller-run tasks, one thread, tasks in order. */
static ta_status run_tasks(const rcase *c, const ta_problem *p, rout *o) {
    ta_fwd_args fa = fwd_args(c, o);
    ta_bwd_args ba;
    ta_task_plan tp;
    ta_status st;
    int pass;
    poison_out(c, o);
    for (pass = 0; pass < 2; ++pass) {
        void *shared, *scratch;
        int32_t ph;
        int64_t t;
        st = pass ? ta_bwd_task_plan(p, TA_BACKEND_CPU, &tp)
                  : ta_fwd_task_plan(p, TA_BACKEND_CPU, &tp);
        if (st != TA_OK) return st;
        shared = xalloc(tp.shared_bytes);
        scratch = xalloc(tp.scratch_bytes);
        if (pass) ba = bwd_args(c, o, o->o, o->lse);
        st = pass ? ta_bwd_tasks_prepare(p, TA_BACKEND_CPU, &ba, shared, tp.shared_bytes)
                  : ta_fwd_tasks_prepare(p, TA_BACKEND_CPU, &fa, shared, tp.shared_bytes);
        /* a scratch on a rotary table is refused (the table is an input) */
        if (st == TA_OK) {
            const ta_status bad =
                ta_task_run(shared, 0, 0, (void *)(uintptr_t)c->cos_t, tp.scratch_bytes);
            TA_CHECK(bad == TA_ERR_BAD_ARG, "task scratch over rope cos: %s",
                     ta_status_string(bad));
        }
        for (ph = 0; st == TA_OK && ph < tp.num_phases; ++ph)
            for (t = 0; st == TA_OK && t < tp.num_tasks[ph]; ++t)
                st = ta_task_run(shared, ph, t, scratch, tp.scratch_bytes);
        ta_test_free(shared);
        ta_test_free(scratch);
        if (st != TA_OK) return st;
    }
    return TA_OK;
}

/* ---- 1. REF against the oracle -------------------------------------------- */

/* x (double [B, heads, S, D], contiguous) rotated in place as the stage does,
 * or by the transpose (back). */
static void rotate_oracle(const rcase *c, double *x, int32_t heads, int32_t seq, const int32_t *pos,
                          int back) {
    const ta_problem *p = &c->p;
    const int32_t group = heads == p->heads_q ? p->heads_q / p->heads_kv : 1;
    const int32_t rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    const double sgn = self_check ? -1.0 : 1.0;
    int32_t b, h, s, i;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (s = 0; s < seq; ++s) {
                double *row = x + at(0, heads, seq, p->head_dim, b, h, s);
                const int32_t tr = pos ? pos[(size_t)b * (size_t)seq + (size_t)s] : s;
                const size_t base =
                    (size_t)(h / group) * (size_t)p->rope_head_stride + (size_t)tr * (size_t)rs;
                for (i = 0; i < p->rope_pairs; ++i) {
                    const int32_t ia = p->rope == TA_ROPE_HALF ? i : 2 * i;
                    const int32_t ib = p->rope == TA_ROPE_HALF ? i + p->rope_pairs : 2 * i + 1;
                    const double cs = (double)c->cos_t[base + (size_t)i];
                    const double sn = sgn * (double)c->sin_t[base + (size_t)i];
                    const double xa = row[ia], xb = row[ib];
                    row[ia] = back ? xa * cs + xb * sn : xa * cs - xb * sn;
                    row[ib] = back ? xb * cs - xa * sn : xb * cs + xa * sn;
                }
            }
}

static double max_err[3][6]; /* [dtype][o, lse, dq, dk, dv, dw] */
static long n_oracle_cases[2];

/* max |lib - orc| / max(max |orc|, tiny) over n finite oracle entries; lib
 * in dtype dt (layout strided when a [B,S,H,D] lib tensor is given back as
 * contiguous by the caller). */
static double norm_err(const void *lib, ta_dtype dt, const double *orc, size_t n) {
    double m = 0.0, e = 0.0;
    size_t i;
    for (i = 0; i < n; ++i)
        if (isfinite(orc[i]) && fabs(orc[i]) > m) m = fabs(orc[i]);
    for (i = 0; i < n; ++i) {
        const double x = ta_get(lib, dt, i);
        double d;
        if (!isfinite(orc[i])) {
            if (!(x == orc[i])) return (double)INFINITY; /* -inf lse must match */
            continue;
        }
        d = fabs(x - orc[i]);
        if (!(d <= e)) e = d; /* NaN -> becomes NaN, then fails below */
    }
    return e / (m > 1e-30 ? m : 1e-30);
}

static void check_oracle(ta_rng *r, rcase *c, int index) {
    const ta_problem *p = &c->p;
    static const double bound[3] = {2e-5, 4e-3, 3e-2}; /* f32, f16, bf16 */
    ta_problem p0 = *p;
    ta_oracle_in in;
    double *oq, *ok, *ov, *odo, *ow = NULL, *o, *lse, *dq, *dk, *dv, *dw = NULL;
    double *o_stored = NULL; /* the library's o, widened (f16 / bf16) */
    ta_oracle_grads g;
    rout out;
    ta_status st;
    double e[6] = {0, 0, 0, 0, 0, 0};
    int t, dt = (int)p->dtype, bad = 0;
    alloc_out(c, &out);
    st = run(TA_BACKEND_REF, r, c, p, &out);
    TA_CHECK(st == TA_OK, "case %d: REF: %s", index, ta_status_string(st));
    if (st != TA_OK) {
        free_out(&out);
        return;
    }
    /* the oracle's problem: no rotary stage (it gets rotated inputs), one split */
    p0.rope = 0;
    p0.rope_pairs = p0.rope_rows = p0.rope_row_stride = p0.rope_head_stride = 0;
    p0.num_splits = 0;
    oq = ta_oracle_widen(c->q, p->dtype, c->n_q);
    ok = ta_oracle_widen(c->k, p->dtype, c->n_k);
    ov = ta_oracle_widen(c->v, p->dtype, c->n_v);
    odo = ta_oracle_widen(c->d_o, p->dtype, c->n_o);
    rotate_oracle(c, oq, p->heads_q, p->seq_q, c->pos_q, 0);
    rotate_oracle(c, ok, p->heads_kv, p->seq_k, c->pos_k, 0);
    if (c->conv_w) {
        size_t i;
        ow = (double *)malloc(c->n_w * sizeof(double));
        for (i = 0; i < c->n_w; ++i)
            ow[i] = (double)c->conv_w[i];
        dw = (double *)malloc(c->n_w * sizeof(double));
    }
    o = (double *)malloc(c->n_o * sizeof(double));
    lse = (double *)malloc(c->n_lse * sizeof(double));
    dq = (double *)malloc(c->n_q * sizeof(double));
    dk = (double *)malloc(c->n_k * sizeof(double));
    dv = (double *)malloc(c->n_v * sizeof(double));
    memset(&in, 0, sizeof in);
    in.q = oq, in.k = ok, in.v = ov, in.seqlens_k = c->seqlens, in.conv_w = ow, in.d_o = odo;
    g.dq = dq, g.dk = dk, g.dv = dv, g.dconv_w = dw;
    /* the backward's D_i = <dO_i, o_i> from the o the library stored (rounded
     * to f16 / bf16), as the library computes it: with the exact o instead, a
     * row whose dP_ij nearly equal D_i turns o's rounding into a large error
     * of dq, dk relative to their size (seed 1795469517443957226, case 13:
     * dk 0.074 of max |dk| at bf16) */
    if (p->dtype != TA_F32) o_stored = ta_oracle_widen(out.o, p->dtype, c->n_o);
    in.o = o_stored;
    if (ta_oracle_fwd(&p0, &in, o, lse) != 0 || ta_oracle_bwd_grads(&p0, &in, &g) != 0) {
        fprintf(stderr, "oracle failed\n");
        exit(1);
    }
    rotate_oracle(c, dq, p->heads_q, p->seq_q, c->pos_q, 1);
    rotate_oracle(c, dk, p->heads_kv, p->seq_k, c->pos_k, 1);
    if (c->strided) { /* the library's dq, dk back to [B, H, S, D] */
        void *tmp = xalloc(c->n_q * c->eb);
        relayout(tmp, out.dq, c->eb, p->batch, p->heads_q, p->seq_q, p->head_dim, 1);
        ta_test_free(out.dq);
        out.dq = tmp;
        tmp = xalloc(c->n_k * c->eb);
        relayout(tmp, out.dk, c->eb, p->batch, p->heads_kv, p->seq_k, p->head_dim, 1);
        ta_test_free(out.dk);
        out.dk = tmp;
    }
    e[0] = norm_err(out.o, p->dtype, o, c->n_o);
    e[1] = norm_err(out.lse, TA_F32, lse, c->n_lse);
    e[2] = norm_err(out.dq, p->dtype, dq, c->n_q);
    e[3] = norm_err(out.dk, p->dtype, dk, c->n_k);
    e[4] = norm_err(out.dv, p->dtype, dv, c->n_v);
    if (dw) e[5] = norm_err(out.dw, TA_F32, dw, c->n_w);
    for (t = 0; t < 6; ++t) {
        /* lse and dw are f32 whatever the storage: the inputs' rounding is
         * the oracle's too, so only f32 arithmetic remains; the backward
         * reads the rounded o */
        const double b = (t == 1) ? 2e-5 : bound[dt] * (t >= 2 ? 2.0 : 1.0);
        if (!(e[t] <= b)) bad = 1;
        if (!self_check && e[t] > max_err[dt][t]) max_err[dt][t] = e[t];
    }
    if (self_check) {
        /* a turned-around oracle must disagree (unless nothing rotates
         * visibly: every pair's sine tiny, or no row sees a key) */
        n_oracle_cases[bad]++;
    } else {
        TA_CHECK(!bad,
                 "case %d (%s, %s, B%d H%d/%d S%d/%d D%d/%d pairs %d rows %d hs %d pos %s/%s "
                 "strided %d conv %dx%d splits %d): errors o %.3g lse %.3g dq %.3g dk %.3g "
                 "dv %.3g dw %.3g",
                 index, p->rope == TA_ROPE_HALF ? "half" : "interleaved",
                 dt == 0   ? "f32"
                 : dt == 1 ? "f16"
                           : "bf16",
                 p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
                 p->rope_pairs, p->rope_rows, p->rope_head_stride, c->pos_q ? "given" : "NULL",
                 c->pos_k ? "given" : "NULL", c->strided, p->conv_q, p->conv_k, p->num_splits, e[0],
                 e[1], e[2], e[3], e[4], e[5]);
        n_oracle_cases[p->conv_q > 0]++;
    }
    free(oq), free(ok), free(ov), free(odo), free(ow), free(o), free(lse), free(dq), free(dk),
        free(dv), free(dw), free(o_stored);
    free_out(&out);
}

/* ---- 2, 3. bitwise comparisons -------------------------------------------- */

static long n_bitwise, n_identity;

static int same_out(const rcase *c, const rout *a, const rout *b, const char *what, int index) {
    const size_t n[6] = {c->n_o * c->eb, c->n_lse * 4,   c->n_q * c->eb,
                         c->n_k * c->eb, c->n_v * c->eb, c->n_w * 4};
    const void *x[6] = {a->o, a->lse, a->dq, a->dk, a->dv, a->dw};
    const void *y[6] = {b->o, b->lse, b->dq, b->dk, b->dv, b->dw};
    static const char *const names[6] = {"o", "lse", "dq", "dk", "dv", "dconv_w"};
    int t, ok = 1;
    for (t = 0; t < 6; ++t) {
        if (n[t] == 0) continue;
        ++n_bitwise;
        if (memcmp(x[t], y[t], n[t]) != 0) {
            TA_CHECK(0, "case %d: %s: %s differs", index, what, names[t]);
            ok = 0;
        }
    }
    return ok;
}

static void check_cpu(ta_rng *r, rcase *c, int index) {
    rout ref, cpu;
    ta_status st;
    int isa, th;
    char what[80];
    alloc_out(c, &ref);
    alloc_out(c, &cpu);
    st = run(TA_BACKEND_REF, r, c, &c->p, &ref);
    TA_CHECK(st == TA_OK, "case %d: REF: %s", index, ta_status_string(st));
    for (isa = TA_CPU_ISA_SCALAR; st == TA_OK && isa <= (int)ta_cpu_isa_best(); ++isa)
        for (th = 1; th <= 3; th += 2) {
            ta_problem p = c->p;
            p.num_threads = th;
            setenv("TA_CPU_ISA", ta_cpu_isa_name((ta_cpu_isa)isa), 1);
            snprintf(what, sizeof what, "CPU %s, %d thread(s)", ta_cpu_isa_name((ta_cpu_isa)isa),
                     th);
            st = run(TA_BACKEND_CPU, r, c, &p, &cpu);
            TA_CHECK(st == TA_OK, "case %d: %s: %s", index, what, ta_status_string(st));
            if (st == TA_OK) same_out(c, &ref, &cpu, what, index);
        }
    unsetenv("TA_CPU_ISA");
    if (st == TA_OK && c->p.num_splits <= 1) { /* tasks run the unsplit forward only */
        st = run_tasks(c, &c->p, &cpu);
        TA_CHECK(st == TA_OK, "case %d: tasks: %s", index, ta_status_string(st));
        if (st == TA_OK) same_out(c, &ref, &cpu, "CPU caller-run tasks", index);
    }
    free_out(&ref);
    free_out(&cpu);
}

/* Identity rows: the bits of the problem without rotation, REF and CPU. */
static void check_identity(ta_rng *r, rcase *c, int index) {
    ta_problem p0 = c->p;
    rout plain, rot;
    ta_backend be;
    ta_status st;
    fill_tables(r, c, 1);
    p0.rope = 0;
    p0.rope_pairs = p0.rope_rows = p0.rope_row_stride = p0.rope_head_stride = 0;
    alloc_out(c, &plain);
    alloc_out(c, &rot);
    for (be = TA_BACKEND_REF; be <= TA_BACKEND_CPU; be = (ta_backend)(be + 1)) {
        st = run(be, r, c, &p0, &plain);
        TA_CHECK(st == TA_OK, "case %d: plain: %s", index, ta_status_string(st));
        st = st == TA_OK ? run(be, r, c, &c->p, &rot) : st;
        TA_CHECK(st == TA_OK, "case %d: identity rope: %s", index, ta_status_string(st));
        if (st == TA_OK && same_out(c, &plain, &rot, "identity table", index)) ++n_identity;
    }
    free_out(&plain);
    free_out(&rot);
    fill_tables(r, c, 0);
}

/* ---- 4. bad input ----------------------------------------------------------- */

static long n_bad;

/* A call (fwd and bwd, REF and CPU) on c with problem p and rope args ra must
 * return want and leave every output untouched. */
static void expect_status(const rcase *c, const ta_problem *p, const ta_rope_args *ra,
                          const rout *o_over, ta_status want, const char *what) {
    rout out;
    ta_backend be;
    if (o_over)
        out = *o_over;
    else
        alloc_out(c, &out);
    for (be = TA_BACKEND_REF; be <= TA_BACKEND_CPU; be = (ta_backend)(be + 1)) {
        ta_fwd_args fa = fwd_args(c, &out);
        ta_bwd_args ba = bwd_args(c, &out, c->d_o, out.lse);
        const size_t ws_bytes = (size_t)64 << 20;
        void *ws = xalloc(ws_bytes);
        ta_status st;
        char line[256];
        fa.rope = *ra;
        ba.rope = *ra;
        ba.o = c->d_o; /* any valid input of o's shape */
        ta_canary_fill(out.o, c->n_o * c->eb);
        ta_canary_fill(out.lse, c->n_lse * 4);
        ta_canary_fill(out.dq, c->n_q * c->eb);
        ta_canary_fill(out.dk, c->n_k * c->eb);
        ta_canary_fill(out.dv, c->n_v * c->eb);
        st = ta_fwd(p, be, &fa, ws, ws_bytes, NULL);
        TA_CHECK(st == want, "%s: fwd on %d: %s, want %s", what, (int)be, ta_status_string(st),
                 ta_status_string(want));
        (void)ta_explain_fwd(p, be, &fa, ws, ws_bytes, NULL, line, sizeof line);
        if (be == TA_BACKEND_REF) printf("  %-36s %s\n", what, line);
        TA_CHECK(ta_canary_intact(out.o, c->n_o * c->eb) && ta_canary_intact(out.lse, c->n_lse * 4),
                 "%s: fwd wrote an output", what);
        /* the backward reads lse: give it a valid one */
        {
            float *lse_in = (float *)xalloc(c->n_lse * 4);
            size_t i;
            for (i = 0; i < c->n_lse; ++i)
                lse_in[i] = 0.5f;
            ba.lse = lse_in;
            st = ta_bwd(p, be, &ba, ws, ws_bytes, NULL);
            TA_CHECK(st == want, "%s: bwd on %d: %s, want %s", what, (int)be, ta_status_string(st),
                     ta_status_string(want));
            TA_CHECK(ta_canary_intact(out.dq, c->n_q * c->eb) &&
                         ta_canary_intact(out.dk, c->n_k * c->eb) &&
                         ta_canary_intact(out.dv, c->n_v * c->eb),
                     "%s: bwd wrote an output", what);
            ta_test_free(lse_in);
        }
        ta_test_free(ws);
        ++n_bad;
    }
    if (!o_over) free_out(&out);
}

static void check_bad_input(ta_rng *r) {
    rcase c;
    ta_problem p;
    ta_rope_args ra;
    size_t bytes;
    rout over;
    while (!make_case(r, &c, 0) || c.p.heads_kv < 2)
        if (c.q) free_case(&c);
    if (c.p.num_splits > 1) c.p.num_splits = 0;
    ra = rope_args(&c);
    printf("bad input (REF and CPU, fwd and bwd; REF's ta_explain_fwd line):\n");
    p = c.p;
    p.rope = 3;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope = 3");
    p = c.p;
    p.rope = -1;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope = -1");
    p = c.p;
    p.rope = 0;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope_pairs without rope");
    p = c.p;
    p.rope_pairs = p.head_dim / 2 + 1;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "2 rope_pairs > head_dim");
    p = c.p;
    p.rope_pairs = 0;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope_pairs = 0");
    p = c.p;
    p.rope_rows = 0;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope_rows = 0");
    p = c.p;
    p.rope_row_stride = p.rope_pairs - 1 > 0 ? p.rope_pairs - 1 : -1;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope_row_stride < rope_pairs");
    p = c.p;
    p.rope_head_stride = -4;
    expect_status(&c, &p, &ra, NULL, TA_ERR_BAD_ARG, "rope_head_stride < 0");
    p = c.p;
    p.rope_rows = INT32_MAX; /* (H_kv - 1) head_stride + (rows - 1) row_stride floats */
    p.rope_row_stride = INT32_MAX;
    p.rope_head_stride = INT32_MAX;
    p.heads_kv = p.heads_q = 8; /* refused at the problem, before any pointer is read */
    expect_status(&c, &p, &ra, NULL, TA_ERR_OVERFLOW, "table span overflows");
    {
        ta_rope_args x = ra;
        x.cos = NULL;
        expect_status(&c, &c.p, &x, NULL, TA_ERR_NULL_ARG, "cos NULL");
        x = ra;
        x.sin = NULL;
        expect_status(&c, &c.p, &x, NULL, TA_ERR_NULL_ARG, "sin NULL");
        x = ra;
        x.cos = (const float *)((const char *)ra.cos + 2);
        expect_status(&c, &c.p, &x, NULL, TA_ERR_BAD_ARG, "cos misaligned");
        if (ra.pos_q) {
            int32_t *pq = c.pos_q, keep = pq[0];
            pq[0] = c.p.rope_rows;
            expect_status(&c, &c.p, &ra, NULL, TA_ERR_BAD_ARG, "pos_q[0] = rope_rows");
            pq[0] = -1;
            expect_status(&c, &c.p, &ra, NULL, TA_ERR_BAD_ARG, "pos_q[0] = -1");
            pq[0] = keep;
        }
        x = ra;
        x.pos_q = x.pos_k = NULL;
        p = c.p;
        p.rope_rows = (c.p.seq_q > c.p.seq_k ? c.p.seq_q : c.p.seq_k) - 1;
        if (p.rope_rows >= 1)
            expect_status(&c, &p, &x, NULL, TA_ERR_BAD_ARG, "no positions, rows < S");
    }
    /* outputs overlapping the tables: o = cos (forward), dq = sin (backward) */
    alloc_out(&c, &over);
    {
        rout o2 = over;
        float *big = (float *)xalloc((c.n_o * c.eb + c.n_q * c.eb + c.n_tab * 4) * 2 + 256);
        ta_rope_args x = ra;
        memcpy(big, c.cos_t, c.n_tab * 4);
        x.cos = big;
        o2.o = big;  /* o overlaps cos */
        o2.dq = big; /* dq overlaps cos */
        expect_status(&c, &c.p, &x, &o2, TA_ERR_BAD_ARG, "o / dq overlap cos");
        ta_test_free(big);
    }
    free_out(&over);
    /* CUDA refuses the stage (with or without the CUDA component) */
    {
        const ta_status st = ta_fwd_workspace_size(&c.p, TA_BACKEND_CUDA, &bytes);
        TA_CHECK(st == TA_ERR_UNSUPPORTED || st == TA_ERR_BACKEND_UNAVAILABLE,
                 "CUDA size query with rope: %s", ta_status_string(st));
        TA_CHECK(ta_bwd_workspace_size(&c.p, TA_BACKEND_CUDA, &bytes) == st,
                 "CUDA bwd size query with rope differs");
        ++n_bad;
    }
    free_case(&c);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_rope");
    int n_cases = 60, i, dt, t;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--self-check") == 0) self_check = 1;
        if (strcmp(argv[i], "--quick") == 0) n_cases = 12;
    }
    ta_rng_seed(&r, seed);
    for (i = 0; i < n_cases; ++i) {
        rcase c;
        const int mta = i % 3 == 2;
        while (!make_case(&r, &c, mta)) {
        }
        check_oracle(&r, &c, i);
        if (!self_check) {
            check_cpu(&r, &c, i);
            if (i % 2 == 0) check_identity(&r, &c, i);
        }
        free_case(&c);
    }
    if (self_check) {
        printf("self-check: %ld of %d cases fail against the turned-around oracle\n",
               n_oracle_cases[1], n_cases);
        TA_CHECK(n_oracle_cases[1] >= n_cases * 8 / 10,
                 "the oracle check did not notice a wrong rotation often enough");
        return ta_test_finish("test_rope --self-check");
    }
    check_bad_input(&r);
    printf("oracle: %ld SDPA + %ld MTA cases; max error / max|oracle| per dtype "
           "(o, lse, dq, dk, dv, dconv_w):\n",
           n_oracle_cases[0], n_oracle_cases[1]);
    for (dt = 0; dt < 3; ++dt) {
        printf("  %-4s", dt == 0 ? "f32" : dt == 1 ? "f16" : "bf16");
        for (t = 0; t < 6; ++t)
            printf(" %9.3g", max_err[dt][t]);
        printf("\n");
    }
    printf("bitwise: %ld tensor comparisons (REF == CPU on ISA paths scalar..%s, 1 and 3 "
           "threads, caller-run tasks; identity tables == no rotation); %ld identity runs; %ld "
           "refused calls\n",
           n_bitwise, ta_cpu_isa_name(ta_cpu_isa_best()), n_identity, n_bad);
    return ta_test_finish("test_rope");
}
