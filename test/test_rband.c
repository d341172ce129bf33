/*
 * Latent attention with a reciprocal band (TA_RBAND; docs/api.md, "Latent
 * attention and the reciprocal band"; issue 14).
 *
 *   1. bad input: every new field of ta_problem, ta_fwd_args and ta_bwd_args
 *      out of range or in a combination not built yet gives its documented
 *      status, ta_explain_fwd / _bwd name the field, the outputs stay
 *      untouched; the CPU and CUDA backends refuse the band (and every
 *      backend the fused projections) with TA_ERR_UNSUPPORTED.
 *   2. the float64 oracle of the definition (test/oracle_rband.c): its
 *      gradients dq, dk, dv and d_alpha against central finite differences of
 *      L = sum <dO, o> on small random problems (GQA, every band width from 0
 *      to past S, alpha 0 included); a control: alpha moves the output.
 * Usage: test_rband [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_rband.h"
#include "test_util.h"
#include "tileattn.h"

static int quick;

/* ---------------------------------------------------------------------- */
/* 1. Bad input                                                            */
/* ---------------------------------------------------------------------- */

enum { BI_B = 2, BI_H = 4, BI_S = 24, BI_L = 16 };

/* A valid band problem: latent attention (one kv head of width L), causal,
 * S_q = S_k, W = 5, alpha = 0.5. */
static ta_problem bi_problem(void) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = BI_B, p.heads_q = BI_H, p.heads_kv = 1;
    p.seq_q = p.seq_k = BI_S;
    p.head_dim = p.head_dim_v = BI_L;
    p.flags = TA_CAUSAL | TA_RBAND;
    p.rband_alpha = 0.5f;
    p.rband_width = 5;
    return p;
}

typedef struct bi_bufs {
    float *q, *k, *v, *o, *lse, *d_o, *dq, *dk, *dv, *d_alpha, *hist;
    void *ws;
    size_t ws_bytes;
    ta_fwd_args fa;
    ta_bwd_args ba;
} bi_bufs;

static float *bi_alloc(ta_rng *r, size_t n) {
    float *x = (float *)ta_test_alloc(n * sizeof(float));
    ta_fill_uniform(r, x, TA_F32, n, -1.0f, 1.0f);
    return x;
}

static void bi_make(ta_rng *r, bi_bufs *b) {
    const size_t nq = (size_t)BI_B * BI_H * BI_S * BI_L, nk = (size_t)BI_B * BI_S * BI_L;
    memset(b, 0, sizeof *b);
    b->q = bi_alloc(r, nq), b->o = bi_alloc(r, nq), b->d_o = bi_alloc(r, nq);
    b->dq = bi_alloc(r, nq), b->hist = bi_alloc(r, nq);
    b->k = bi_alloc(r, nk), b->v = bi_alloc(r, nk), b->dk = bi_alloc(r, nk);
    b->dv = bi_alloc(r, nk);
    b->lse = bi_alloc(r, (size_t)BI_B * BI_H * BI_S);
    b->d_alpha = bi_alloc(r, 2);
    b->ws_bytes = (size_t)1 << 20;
    b->ws = ta_test_alloc(b->ws_bytes);
    b->fa.q = b->q, b->fa.k = b->k, b->fa.v = b->v, b->fa.o = b->o, b->fa.lse = b->lse;
    b->ba.q = b->q, b->ba.k = b->k, b->ba.v = b->v, b->ba.o = b->o, b->ba.lse = b->lse;
    b->ba.d_o = b->d_o, b->ba.dq = b->dq, b->ba.dk = b->dk, b->ba.dv = b->dv;
    b->ba.d_alpha = b->d_alpha;
}

static void bi_free(bi_bufs *b) {
    float *const all[] = {b->q, b->k, b->v, b->o, b->lse, b->d_o, b->dq, b->dk, b->dv, b->d_alpha,
                          b->hist};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i)
        ta_test_free(all[i]);
    ta_test_free(b->ws);
}

/* ta_bwd refuses with want and explain names field; dq, dk, dv, d_alpha untouched. */
static void bi_expect_bwd(const ta_problem *p, ta_backend be, bi_bufs *b, const ta_bwd_args *a,
                          ta_status want, const char *field, const char *what) {
    const size_t nq = (size_t)BI_B * BI_H * BI_S * BI_L, nk = (size_t)BI_B * BI_S * BI_L;
    char why[256];
    ta_status st, ex;
    ta_canary_fill(b->dq, nq * 4), ta_canary_fill(b->dk, nk * 4), ta_canary_fill(b->dv, nk * 4);
    ta_canary_fill(b->d_alpha, 8);
    st = ta_bwd(p, be, a, b->ws, b->ws_bytes, NULL);
    ex = ta_explain_bwd(p, be, a, b->ws, b->ws_bytes, NULL, why, sizeof why);
    TA_CHECK(st == want, "%s: ta_bwd gave %s, want %s", what, ta_status_string(st),
             ta_status_string(want));
    TA_CHECK(ex == st, "%s: explain gave %s, ta_bwd %s", what, ta_status_string(ex),
             ta_status_string(st));
    TA_CHECK(strstr(why, field) != NULL, "%s: explanation \"%s\" does not name %s", what, why,
             field);
    TA_CHECK(st == TA_OK || (ta_canary_intact(b->dq, nq * 4) && ta_canary_intact(b->dk, nk * 4) &&
                             ta_canary_intact(b->dv, nk * 4) && ta_canary_intact(b->d_alpha, 8)),
             "%s: an output written on error", what);
}

/* One problem mutation: the forward (and the size queries) refuse it. */
typedef struct bi_case {
    const char *what;
    int which; /* mutation number, see bi_mutate */
    ta_status want;
    const char *field;
} bi_case;

static void bi_mutate(ta_problem *p, int which) {
    switch (which) {
    case 0: p->flags = TA_CAUSAL, p->rband_width = 0; break;           /* alpha without flag */
    case 1: p->flags = TA_CAUSAL, p->rband_alpha = 0.0f; break;        /* width without flag */
    case 2: p->rband_alpha = NAN; break;
    case 3: p->rband_alpha = -INFINITY; break;
    case 4: p->rband_width = -1; break;
    case 5: p->flags = TA_RBAND; break;                                 /* not causal */
    case 6: p->seq_q = BI_S, p->seq_k = BI_S - 1; break;                /* seq_q > seq_k */
    case 7: p->seq_q = BI_S - 8, p->q_history = 4; break;              /* needs 5 */
    case 8: p->q_history = 1; break;                                    /* needs 0 */
    case 9: p->conv_q = 1, p->conv_k = 1; break;
    case 10: p->flags |= TA_WINDOW, p->window_left = 3; break;
    case 11: p->rope = TA_ROPE_HALF, p->rope_pairs = 2, p->rope_rows = BI_S; break;
    case 12: p->kv_page_size = 8, p->kv_num_pages = 3, p->kv_max_blocks = 3; break;
    case 13: p->num_splits = 2; break;
    case 14: p->num_splits = TA_SPLITS_AUTO; break;
    case 15: p->latent_dim = -1; break;
    case 16: p->latent_dim = TA_HEAD_DIM_MAX + 1; break;
    case 17: p->flags = TA_CAUSAL, p->rband_alpha = 0.0f, p->rband_width = 0, p->latent_dim = 8;
        break; /* the projections alone: no backend yet */
    case 18: p->flags = TA_CAUSAL, p->rband_alpha = -0.0f, p->rband_width = 1; break;
    default: break;
    }
}

static const bi_case bi_cases[] = {
    {"rband_alpha without TA_RBAND", 0, TA_ERR_BAD_ARG, "rband_alpha"},
    {"rband_width without TA_RBAND", 1, TA_ERR_BAD_ARG, "rband_width"},
    {"rband_alpha NaN", 2, TA_ERR_BAD_ARG, "rband_alpha"},
    {"rband_alpha -inf", 3, TA_ERR_BAD_ARG, "rband_alpha"},
    {"rband_width -1", 4, TA_ERR_BAD_ARG, "rband_width"},
    {"band without TA_CAUSAL", 5, TA_ERR_BAD_ARG, "flags"},
    {"band with seq_q > seq_k", 6, TA_ERR_BAD_ARG, "seq_q"},
    {"band with too few history rows", 7, TA_ERR_BAD_ARG, "q_history"},
    {"band with history rows it does not read", 8, TA_ERR_BAD_ARG, "q_history"},
    {"band with the MTA conv", 9, TA_ERR_UNSUPPORTED, "conv_q"},
    {"band with a window", 10, TA_ERR_UNSUPPORTED, "flags"},
    {"band with rope", 11, TA_ERR_UNSUPPORTED, "rope"},
    {"band with paged KV", 12, TA_ERR_UNSUPPORTED, "kv_page_size"},
    {"band with split-K", 13, TA_ERR_UNSUPPORTED, "num_splits"},
    {"band with split-K auto", 14, TA_ERR_UNSUPPORTED, "num_splits"},
    {"latent_dim -1", 15, TA_ERR_BAD_ARG, "latent_dim"},
    {"latent_dim 257", 16, TA_ERR_UNSUPPORTED, "latent_dim"},
    {"fused projections (no backend yet)", 17, TA_ERR_UNSUPPORTED, "backend"},
    {"rband_width with -0 alpha, no flag", 18, TA_ERR_BAD_ARG, "rband_width"},
};

static void test_bad_input(ta_rng *r) {
    static const ta_backend bes[3] = {TA_BACKEND_REF, TA_BACKEND_CPU, TA_BACKEND_CUDA};
    static const char *const be_names[3] = {"REF", "CPU", "CUDA"};
    char what[160];
    bi_bufs b;
    size_t i, n;
    int e;
    bi_make(r, &b);
    for (i = 0; i < sizeof bi_cases / sizeof bi_cases[0]; ++i)
        for (e = 0; e < 3; ++e) {
            const bi_case *c = &bi_cases[i];
            ta_problem p = bi_problem();
            char why[256];
            bi_mutate(&p, c->which);
            snprintf(what, sizeof what, "%s (%s)", c->what, be_names[e]);
            /* backend refusals: every backend; problem refusals come first */
            ta_test_expect_fwd(&p, bes[e], &b.fa, b.ws, b.ws_bytes, c->want, c->field, what);
            TA_CHECK(ta_fwd_workspace_size(&p, bes[e], &n) == c->want, "%s: fwd size query", what);
            TA_CHECK(ta_explain_bwd_workspace_size(&p, bes[e], why, sizeof why) == c->want &&
                         strstr(why, c->field),
                     "%s: bwd size query: %s", what, why);
        }
    /* the valid band: CPU and CUDA refuse it (not implemented there yet) */
    {
        const ta_problem p = bi_problem();
        ta_test_expect_fwd(&p, TA_BACKEND_CPU, &b.fa, b.ws, b.ws_bytes, TA_ERR_UNSUPPORTED,
                           "backend", "band on CPU");
        ta_test_expect_fwd(&p, TA_BACKEND_CUDA, &b.fa, b.ws, b.ws_bytes, TA_ERR_UNSUPPORTED,
                           "backend", "band on CUDA");
        bi_expect_bwd(&p, TA_BACKEND_CPU, &b, &b.ba, TA_ERR_UNSUPPORTED, "backend", "bwd on CPU");
        bi_expect_bwd(&p, TA_BACKEND_CUDA, &b, &b.ba, TA_ERR_UNSUPPORTED, "backend", "bwd on CUDA");
        TA_CHECK(ta_fwd_task_plan(&p, TA_BACKEND_CPU, &(ta_task_plan){0}) == TA_ERR_UNSUPPORTED,
                 "band: CPU task plan");
    }
    bi_free(&b);
}

/* ---------------------------------------------------------------------- */
/* 2. The oracle's gradients by finite differences                         */
/* ---------------------------------------------------------------------- */

/* L = sum <dO, o> of the oracle's forward. */
static double fd_loss(const ta_rb_in *in, double *o, size_t n_o) {
    ta_rb_out out;
    double l = 0.0;
    size_t i;
    memset(&out, 0, sizeof out);
    out.o = o;
    if (ta_rb_oracle(in, &out) != 0) return NAN;
    for (i = 0; i < n_o; ++i)
        l += in->d_o[i] * o[i];
    return l;
}

/* Central difference of L along x[i] against the analytic g. */
static void fd_check(ta_rb_in *in, double *x, size_t i, double g, double *o, size_t n_o,
                     const char *name, double *worst) {
    const double h = 1e-6, x0 = x[i];
    double lp, lm, fd, err;
    x[i] = x0 + h;
    lp = fd_loss(in, o, n_o);
    x[i] = x0 - h;
    lm = fd_loss(in, o, n_o);
    x[i] = x0;
    fd = (lp - lm) / (2.0 * h);
    err = fabs(fd - g) / (1e-3 + fabs(g));
    if (err > *worst) *worst = err;
    TA_CHECK(err < 1e-5, "%s[%zu]: finite difference %.12g, oracle gradient %.12g", name, i, fd, g);
}

static double *fd_random(ta_rng *r, size_t n) {
    double *x = (double *)malloc((n ? n : 1) * sizeof(double));
    size_t i;
    for (i = 0; i < n; ++i)
        x[i] = (double)ta_rng_uniform(r, -1.0f, 1.0f);
    return x;
}

static void test_oracle_fd(ta_rng *r) {
    const int n_problems = quick ? 6 : 30;
    double worst = 0.0, moved = 0.0;
    int t;
    for (t = 0; t < n_problems; ++t) {
        ta_problem p;
        ta_rb_in in;
        ta_rb_out out;
        size_t nq, nk, nv, no, i;
        double *q, *k, *v, *d_o, *o, *dq, *dk, *dv, d_alpha = 0.0, a0;
        memset(&p, 0, sizeof p);
        p.batch = ta_rng_int(r, 1, 2);
        p.heads_kv = ta_rng_int(r, 1, 2);
        p.heads_q = p.heads_kv * ta_rng_int(r, 1, 2);
        p.seq_q = p.seq_k = ta_rng_int(r, 1, 9);
        p.head_dim = ta_rng_int(r, 1, 4);
        p.head_dim_v = ta_rng_int(r, 1, 3);
        p.flags = TA_CAUSAL | TA_RBAND;
        p.rband_width = ta_rng_int(r, 0, p.seq_q + 1);
        p.rband_alpha = t % 5 == 0 ? 0.0f : ta_rng_uniform(r, -1.5f, 1.5f);
        nq = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q * (size_t)p.head_dim;
        nk = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k * (size_t)p.head_dim;
        nv = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k * (size_t)p.head_dim_v;
        no = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q * (size_t)p.head_dim_v;
        q = fd_random(r, nq), k = fd_random(r, nk), v = fd_random(r, nv), d_o = fd_random(r, no);
        o = (double *)malloc(no * sizeof(double));
        dq = (double *)malloc(nq * sizeof(double));
        dk = (double *)malloc(nk * sizeof(double));
        dv = (double *)malloc(nv * sizeof(double));
        memset(&in, 0, sizeof in);
        in.p = &p, in.scale = 1.7 / sqrt((double)p.head_dim), in.alpha = (double)p.rband_alpha;
        in.q = q, in.k = k, in.v = v, in.d_o = d_o;
        memset(&out, 0, sizeof out);
        out.dq = dq, out.dk = dk, out.dv = dv, out.d_alpha = &d_alpha;
        TA_CHECK(ta_rb_oracle(&in, &out) == 0, "oracle backward failed");
        for (i = 0; i < nq; ++i)
            fd_check(&in, q, i, dq[i], o, no, "dq", &worst);
        for (i = 0; i < nk; ++i)
            fd_check(&in, k, i, dk[i], o, no, "dk", &worst);
        for (i = 0; i < nv; ++i)
            fd_check(&in, v, i, dv[i], o, no, "dv", &worst);
        { /* d alpha: alpha is a double of the oracle's input */
            const double h = 1e-6;
            double lp, lm, fd, err;
            a0 = in.alpha;
            in.alpha = a0 + h;
            lp = fd_loss(&in, o, no);
            in.alpha = a0 - h;
            lm = fd_loss(&in, o, no);
            in.alpha = a0;
            fd = (lp - lm) / (2.0 * h);
            err = fabs(fd - d_alpha) / (1e-3 + fabs(d_alpha));
            if (err > worst) worst = err;
            TA_CHECK(err < 1e-5, "d_alpha: finite difference %.12g, oracle %.12g (W %d, S %d)",
                     fd, d_alpha, p.rband_width, p.seq_q);
            if (fabs(d_alpha) > moved) moved = fabs(d_alpha);
        }
        free(q), free(k), free(v), free(d_o), free(o), free(dq), free(dk), free(dv);
    }
    /* control: the band matters (some problem's loss moves with alpha) */
    TA_CHECK(moved > 1e-3, "d_alpha never above 1e-3 (max %g): the band is not exercised", moved);
    printf("oracle finite differences: %d problems, worst relative error %.3g, max |d_alpha| %.3g\n",
           n_problems, worst, moved);
}

int main(int argc, char **argv) {
    ta_rng r;
    const uint64_t seed = ta_test_seed("test_rband");
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    ta_rng_seed(&r, seed);
    test_bad_input(&r);
    test_oracle_fd(&r);
    return ta_test_finish("test_rband");
}
