/*
 * Latent attention with a reciprocal band (TA_RBAND; docs/api.md, "Latent
 * attention and the reciprocal band"; issue 14).
 *
 *   1. bad input: every new field of ta_problem, ta_fwd_args and ta_bwd_args
 *      out of range or in a combination not built yet gives its documented
 *      status, ta_explain_fwd / _bwd name the field, the outputs stay
 *      untouched; CUDA sizes the band's and the fused projections' workspace
 *      (test_cuda_latent runs them on a GPU), CPU runs both passes (its
 *      caller-run tasks too).
 *   2. the float64 oracle of the definition (test/oracle_rband.c): its
 *      gradients dq, dk, dv and d_alpha against central finite differences of
 *      L = sum <dO, o> on small random problems (GQA, every band width from 0
 *      to past S, alpha 0 included); a control: alpha moves the output.
 *   3. REF forward against the oracle: random problems (fresh seed, printed;
 *      replay with TA_SEED=...), f32 / f16 / bf16, latent shapes (one kv
 *      head) and GQA-like head counts, tiles that are not powers of two and
 *      lengths that are not tile multiples, every band width from 0 to past
 *      S, alpha 0 included, and decode-like calls (S_q < S_k, the band's
 *      history rows from a separate tensor). Outputs poisoned first.
 *      Errors are normalised by the oracle's magnitudes (plus half an ulp of
 *      the storage type at the store). Control: the same call without the
 *      band differs.
 *   4. REF backward against the oracle (S_q = S_k): dq, dk, dv and d_alpha
 *      of the REF forward's o and lse (the oracle's D_i from that stored o),
 *      the same random problems; gradients poisoned first. The backward's
 *      bits depend on no tile size (every long sum is chunked by absolute
 *      index): a second tiling of the same (o, lse) gives the same bits.
 *   5. decode through the query history (ta_problem.q_history = min(a, W),
 *      args.q_hist, as MTA decode): a sequence run in chunks (prefill
 *      pieces, then one to three tokens at a time) against a KV cache that
 *      grows, each chunk reading q, k, v, o in place through strides and its
 *      history rows in place (q_hist = q - n rows) or from a copy, a random
 *      block_q per chunk, a third with the fused projections (the history
 *      rows projected on load too): o and lse equal the full forward's bit
 *      for bit.
 *      Outputs poisoned first. Control: a chunk whose (copied) history rows
 *      are replaced by other values gives other lse bits (some must).
 *   6. the fused projections (latent_dim): REF forward against the oracle
 *      (q projected by W_qlat on load, the output up-projected by W_vup),
 *      with and without the band, causal or not, every dtype, GQA-like
 *      heads; the projections' argument checks are in section 1. The
 *      backward: the oracle's dq, dk, dv, dw_qlat, dw_vup and d_alpha by
 *      finite differences (section 2), then REF's against the oracle and a
 *      second tiling's bits (section 4 with the projections).
 *   7. the CPU backend's forward with the band == REF bit for bit (o, lse):
 *      every ISA path this machine has (TA_CPU_ISA), one to three threads,
 *      and through the caller-run tasks; decode-like calls included. Then
 *      the same with the fused projections (with and without the band,
 *      causal or not; decode-like calls through projected history rows).
 *   8. the CPU backend's backward with the band == REF bit for bit (dq, dk,
 *      dv, d_alpha) from the same (o, lse): the random problems of section 4
 *      (f32 / f16 / bf16, GQA-like heads, alpha 0 and negative, W from 0 to
 *      past S) and forced edges (S = 1, W = 0, W >= S, alpha = 0, alpha < 0),
 *      every ISA path this machine has (TA_CPU_ISA), one to four threads;
 *      gradients poisoned first (patterns that differ between the two calls,
 *      so an unwritten element fails). Then the same with the fused
 *      projections (dw_qlat, dw_vup too; a third without the band, causal or
 *      not).
 * Usage: test_rband [--quick]
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "oracle_rband.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

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
    /* the valid band: CPU runs its forward and backward (caller-run tasks
     * too); CUDA sizes both passes (test_cuda_latent runs them) */
    {
        const ta_problem p = bi_problem();
        ta_task_plan tp;
        ta_test_expect_fwd(&p, TA_BACKEND_CPU, &b.fa, b.ws, b.ws_bytes, TA_OK, "ok", "band on CPU");
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &n) == TA_OK && n > 0 &&
                     ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &n) == TA_OK && n > 0,
                 "band: CUDA size queries");
        bi_expect_bwd(&p, TA_BACKEND_CPU, &b, &b.ba, TA_OK, "ok", "bwd on CPU");
        TA_CHECK(ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp) == TA_OK, "band: CPU forward task plan");
        TA_CHECK(ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp) == TA_OK && tp.num_phases == 2 &&
                     tp.num_tasks[1] == 1,
                 "band: CPU backward task plan");
    }
    { /* REF runs the band's forward; not with key lengths */
        const ta_problem p = bi_problem();
        ta_fwd_args fa = b.fa;
        int32_t seqlens[BI_B] = {BI_S, BI_S};
        fa.seqlens_k = seqlens;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_UNSUPPORTED,
                           "args.seqlens_k", "band with seqlens_k");
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &b.fa, b.ws, b.ws_bytes, TA_OK, "ok", "band on REF");
    }
    /* the REF backward's own checks on the band's arguments */
    {
        ta_problem p = bi_problem();
        ta_bwd_args ba = b.ba;
        int32_t seqlens[BI_B] = {BI_S, BI_S};
        ba.seqlens_k = seqlens;
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_UNSUPPORTED, "args.seqlens_k",
                      "bwd: band with seqlens_k");
        ba = b.ba;
        ba.d_alpha = NULL;
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_NULL_ARG, "args.d_alpha",
                      "bwd: d_alpha NULL");
        ba.d_alpha = b.dq + 3; /* inside dq */
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_BAD_ARG, "args.d_alpha",
                      "bwd: d_alpha overlapping dq");
        ba.d_alpha = (float *)((char *)b.d_alpha + 1);
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_BAD_ARG, "args.d_alpha",
                      "bwd: d_alpha misaligned");
        ba.d_alpha = b.k + 1; /* an input */
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_BAD_ARG, "args.d_alpha",
                      "bwd: d_alpha overlapping k");
        /* decode-like forward (history rows) is valid; its backward is not */
        p.seq_q = BI_S - 8, p.q_history = 5;
        ba = b.ba;
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_UNSUPPORTED, "q_history",
                      "bwd: band with history rows");
        /* W = 0 needs no history rows, yet the backward wants seq_q == seq_k */
        p.rband_width = 0, p.q_history = 0;
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_UNSUPPORTED, "seq_q",
                      "bwd: band with seq_q < seq_k");
        /* without the flag d_alpha is ignored (NULL is fine) */
        p = bi_problem();
        p.flags = TA_CAUSAL, p.rband_alpha = 0.0f, p.rband_width = 0;
        ba.d_alpha = NULL;
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_OK, "ok", "bwd without the band");
        ba.d_alpha = b.dq; /* ignored: may even overlap */
        bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_OK, "ok", "bwd: d_alpha ignored");
    }
    /* the fused projections: REF runs the forward; its checks */
    {
        ta_problem p = bi_problem();
        ta_fwd_args fa = b.fa;
        float *w = bi_alloc(r, (size_t)BI_H * BI_L * 8 * 2);
        p.latent_dim = 8; /* q, o [., 16]; k, v [., 8]: fit the buffers */
        fa.w_qlat = w, fa.w_vup = w + BI_H * BI_L * 8;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_OK, "ok",
                           "projections on REF");
        ta_test_expect_fwd(&p, TA_BACKEND_CPU, &fa, b.ws, b.ws_bytes, TA_OK, "ok",
                           "projections on CPU");
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &n) == TA_OK && n > 0 &&
                     ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &n) == TA_OK && n > 0,
                 "projections: CUDA size queries");
        fa.w_qlat = NULL;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_NULL_ARG,
                           "args.w_qlat", "w_qlat NULL");
        fa.w_qlat = w, fa.w_vup = NULL;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_NULL_ARG,
                           "args.w_vup", "w_vup NULL");
        fa.w_vup = b.o + 5; /* an input inside the output */
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_BAD_ARG, "args.w_vup",
                           "w_vup overlapping o");
        fa.w_vup = (const float *)((const char *)(w + BI_H * BI_L * 8) + 2);
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_BAD_ARG, "args.w_vup",
                           "w_vup misaligned");
        fa.w_vup = w + BI_H * BI_L * 8;
        p.num_splits = 2;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_UNSUPPORTED,
                           "num_splits", "projections with split-K");
        p.num_splits = 0, p.flags = TA_CAUSAL, p.rband_alpha = 0.0f, p.rband_width = 0;
        p.conv_q = 2, p.conv_k = 3;
        ta_test_expect_fwd(&p, TA_BACKEND_REF, &fa, b.ws, b.ws_bytes, TA_ERR_UNSUPPORTED, "conv_q",
                           "projections with the MTA conv");
        p.conv_q = p.conv_k = 0;
        { /* the backward's weights and weight gradients */
            ta_bwd_args ba = b.ba;
            float *dw = bi_alloc(r, (size_t)BI_H * BI_L * 8 * 2);
            ba.w_qlat = w, ba.w_vup = w + BI_H * BI_L * 8;
            ba.dw_qlat = dw, ba.dw_vup = dw + BI_H * BI_L * 8;
            bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_OK, "ok", "bwd with projections");
            bi_expect_bwd(&p, TA_BACKEND_CPU, &b, &ba, TA_OK, "ok", "bwd with projections on CPU");
            {
                ta_task_plan tp;
                TA_CHECK(ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp) == TA_OK,
                         "projections: CPU forward task plan");
                TA_CHECK(ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp) == TA_OK &&
                             tp.num_phases == 2 &&
                             tp.num_tasks[1] == p.heads_q + ((p.flags & TA_RBAND) ? 1 : 0),
                         "projections: CPU backward task plan");
            }
            ba.dw_qlat = NULL;
            bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_NULL_ARG, "args.dw_qlat",
                          "bwd: dw_qlat NULL");
            ba.dw_qlat = dw, ba.w_vup = NULL;
            bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_NULL_ARG, "args.w_vup",
                          "bwd: w_vup NULL");
            ba.w_vup = w + BI_H * BI_L * 8, ba.dw_vup = b.dq + 1;
            bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_BAD_ARG, "args.dw_vup",
                          "bwd: dw_vup overlapping dq");
            ba.dw_vup = dw + BI_H * BI_L * 8, ba.dw_qlat = w + 3; /* over an input weight */
            bi_expect_bwd(&p, TA_BACKEND_REF, &b, &ba, TA_ERR_BAD_ARG, "args.dw_qlat",
                          "bwd: dw_qlat overlapping w_qlat");
            ta_test_free(dw);
        }
        ta_test_free(w);
    }
    bi_free(&b);
}

/* ---------------------------------------------------------------------- */
/* 2. The oracle's gradients by finite differences                         */
/* ---------------------------------------------------------------------- */

/* The fused projections' weights of the finite-difference problem, or NULL. */
static const double *fd_wq, *fd_wv;

/* L = sum <dO, o> of the oracle's forward (with fd_wq, fd_wv: the projections'). */
static double fd_loss(const ta_rb_in *in, double *o, size_t n_o) {
    ta_rb_out out;
    double l = 0.0;
    size_t i;
    memset(&out, 0, sizeof out);
    out.o = o;
    if ((fd_wq ? ta_rb_oracle_lat(in, fd_wq, fd_wv, &out) : ta_rb_oracle(in, &out)) != 0)
        return (double)NAN;
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

/* The same for the oracle with the fused projections: dq (width D), dk, dv
 * (width L), dw_qlat, dw_vup and d_alpha against central differences. */
static void test_oracle_fd_lat(ta_rng *r) {
    const int n_problems = quick ? 4 : 20;
    double worst = 0.0;
    int t;
    for (t = 0; t < n_problems; ++t) {
        ta_problem p;
        ta_rb_in in;
        ta_rb_out out;
        size_t nq, nk, nv, no, nwq, nwv, i;
        double *q, *k, *v, *d_o, *o, *dq, *dk, *dv, *wq, *wv, *dwq, *dwv, d_alpha = 0.0;
        memset(&p, 0, sizeof p);
        p.batch = ta_rng_int(r, 1, 2);
        p.heads_kv = 1;
        p.heads_q = ta_rng_int(r, 1, 3);
        p.seq_q = p.seq_k = ta_rng_int(r, 1, 7);
        p.head_dim = ta_rng_int(r, 1, 4), p.latent_dim = ta_rng_int(r, 1, 3);
        p.head_dim_v = ta_rng_int(r, 1, 3);
        p.flags = TA_CAUSAL | TA_RBAND;
        p.rband_width = ta_rng_int(r, 0, p.seq_q);
        p.rband_alpha = ta_rng_uniform(r, -1.5f, 1.5f);
        nq = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q * (size_t)p.head_dim;
        nk = nv = (size_t)p.batch * (size_t)p.seq_k * (size_t)p.latent_dim;
        no = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q * (size_t)p.head_dim_v;
        nwq = (size_t)p.heads_q * (size_t)p.head_dim * (size_t)p.latent_dim;
        nwv = (size_t)p.heads_q * (size_t)p.latent_dim * (size_t)p.head_dim_v;
        q = fd_random(r, nq), k = fd_random(r, nk), v = fd_random(r, nv), d_o = fd_random(r, no);
        wq = fd_random(r, nwq), wv = fd_random(r, nwv);
        o = (double *)malloc(no * sizeof(double)), dq = (double *)malloc(nq * sizeof(double));
        dk = (double *)malloc(nk * sizeof(double)), dv = (double *)malloc(nv * sizeof(double));
        dwq = (double *)malloc(nwq * sizeof(double)), dwv = (double *)malloc(nwv * sizeof(double));
        memset(&in, 0, sizeof in);
        in.p = &p, in.scale = 0.9, in.alpha = (double)p.rband_alpha;
        in.q = q, in.k = k, in.v = v, in.d_o = d_o;
        memset(&out, 0, sizeof out);
        out.dq = dq, out.dk = dk, out.dv = dv, out.d_alpha = &d_alpha;
        out.dw_qlat = dwq, out.dw_vup = dwv;
        TA_CHECK(ta_rb_oracle_lat(&in, wq, wv, &out) == 0, "oracle backward failed");
        fd_wq = wq, fd_wv = wv;
        for (i = 0; i < nq; ++i)
            fd_check(&in, q, i, dq[i], o, no, "lat dq", &worst);
        for (i = 0; i < nk; ++i)
            fd_check(&in, k, i, dk[i], o, no, "lat dk", &worst);
        for (i = 0; i < nv; ++i)
            fd_check(&in, v, i, dv[i], o, no, "lat dv", &worst);
        for (i = 0; i < nwq; ++i)
            fd_check(&in, wq, i, dwq[i], o, no, "dw_qlat", &worst);
        for (i = 0; i < nwv; ++i)
            fd_check(&in, wv, i, dwv[i], o, no, "dw_vup", &worst);
        fd_check(&in, &in.alpha, 0, d_alpha, o, no, "lat d_alpha", &worst);
        fd_wq = fd_wv = NULL;
        free(q), free(k), free(v), free(d_o), free(o), free(dq), free(dk), free(dv);
        free(wq), free(wv), free(dwq), free(dwv);
    }
    printf("oracle finite differences with the fused projections: %d problems, worst relative "
           "error %.3g\n", n_problems, worst);
}

/* ---------------------------------------------------------------------- */
/* 3. REF forward against the oracle                                       */
/* ---------------------------------------------------------------------- */

/* One random band problem with its tensors, in the storage dtype and widened. */
typedef struct rb_case {
    ta_problem p;
    size_t nq, nh, nk, nv, no, nl;
    void *q, *hist, *k, *v, *d_o;
    double *oq, *ohist, *ok, *ov, *odo;
    float *wq, *wv;     /* fused projections: [H, D, L], [H, L, D_v]; else NULL */
    double *owq, *owv;
} rb_case;

static const char *dtype_name(ta_dtype dt) {
    return dt == TA_F32 ? "f32" : dt == TA_F16 ? "f16" : "bf16";
}

/* Half an ulp of the storage type, relative (the store's one rounding). */
static double store_u(ta_dtype dt) {
    return dt == TA_F32 ? ldexp(1.0, -24) : dt == TA_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
}

static void *rb_tensor(ta_rng *r, ta_dtype dt, size_t n, double **wide) {
    void *x = ta_test_alloc((n ? n : 1) * ta_dtype_size(dt));
    ta_fill_uniform(r, x, dt, n, -1.0f, 1.0f);
    *wide = ta_oracle_widen(x, dt, n);
    return x;
}

/* bwd: S_q = S_k (the backward's domain); else a quarter are decode-like.
 * lat: with the fused projections (and a third without the band). */
static int32_t rb_seq_override; /* > 0: the next rb_random's S_q (section 8's edges) */

static void rb_random(ta_rng *r, rb_case *c, int bwd, int lat) {
    ta_problem *p = &c->p;
    const int32_t prefix = !bwd && ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 60) : 0;
    memset(c, 0, sizeof *c);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 0, 2) ? 1 : ta_rng_int(r, 2, 3); /* latent: one kv head */
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 4);
    p->head_dim = ta_rng_int(r, 0, 3) ? ta_rng_int(r, 1, 40) : 64;
    p->head_dim_v = ta_rng_int(r, 0, 1) ? p->head_dim : ta_rng_int(r, 1, 40);
    p->seq_q = ta_rng_int(r, 0, 5) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 1, quick ? 60 : 130);
    if (rb_seq_override > 0) p->seq_q = rb_seq_override;
    p->seq_k = p->seq_q + prefix;
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->flags = TA_CAUSAL | TA_RBAND;
    p->rband_width = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 0, 2) : ta_rng_int(r, 0, p->seq_k + 3);
    p->rband_alpha = ta_rng_int(r, 0, 6) == 0 ? 0.0f : ta_rng_uniform(r, -1.5f, 1.5f);
    p->q_history = prefix < p->rband_width ? prefix : p->rband_width;
    p->block_q = ta_rng_int(r, 0, 3) == 0 ? 0 : ta_rng_int(r, 8, 50);
    p->block_k = ta_rng_int(r, 0, 3) == 0 ? 0 : ta_rng_int(r, 8, 50);
    if (ta_rng_int(r, 0, 2) == 0) p->scale = ta_rng_uniform(r, 0.05f, 0.6f);
    if (lat) {
        p->latent_dim = ta_rng_int(r, 0, 3) ? ta_rng_int(r, 1, 40) : 64;
        p->head_dim_v = ta_rng_int(r, 1, 48);
        if (ta_rng_int(r, 0, 2) == 0) { /* latent attention without the band */
            p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
            p->rband_alpha = 0.0f, p->rband_width = 0, p->q_history = 0;
            p->seq_k = p->seq_q = rb_seq_override > 0 ? rb_seq_override : ta_rng_int(r, 1, 90);
        }
    }
    {
        const int32_t wk = lat ? p->latent_dim : p->head_dim, wv = lat ? p->latent_dim : p->head_dim_v;
        c->nk = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)wk;
        c->nv = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)wv;
    }
    if (lat) {
        const size_t n_wq = (size_t)p->heads_q * (size_t)p->head_dim * (size_t)p->latent_dim;
        const size_t n_wv = (size_t)p->heads_q * (size_t)p->latent_dim * (size_t)p->head_dim_v;
        const float aq = 1.5f / sqrtf((float)p->head_dim), av = 1.0f / sqrtf((float)p->latent_dim);
        size_t i;
        c->wq = (float *)ta_test_alloc(n_wq * sizeof(float));
        c->wv = (float *)ta_test_alloc(n_wv * sizeof(float));
        for (i = 0; i < n_wq; ++i)
            c->wq[i] = ta_rng_uniform(r, -aq, aq);
        for (i = 0; i < n_wv; ++i)
            c->wv[i] = ta_rng_uniform(r, -av, av);
        c->owq = ta_oracle_widen(c->wq, TA_F32, n_wq);
        c->owv = ta_oracle_widen(c->wv, TA_F32, n_wv);
    }
    c->nq = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->head_dim;
    c->nh = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->q_history * (size_t)p->head_dim;
    c->no = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->head_dim_v;
    c->nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    c->q = rb_tensor(r, p->dtype, c->nq, &c->oq);
    c->hist = rb_tensor(r, p->dtype, c->nh, &c->ohist);
    c->k = rb_tensor(r, p->dtype, c->nk, &c->ok);
    c->v = rb_tensor(r, p->dtype, c->nv, &c->ov);
    c->d_o = rb_tensor(r, p->dtype, c->no, &c->odo);
}

static void rb_free(rb_case *c) {
    ta_test_free(c->q), ta_test_free(c->hist), ta_test_free(c->k), ta_test_free(c->v);
    ta_test_free(c->d_o);
    free(c->oq), free(c->ohist), free(c->ok), free(c->ov), free(c->odo);
    ta_test_free(c->wq), ta_test_free(c->wv), free(c->owq), free(c->owv);
}

static void rb_describe(const rb_case *c, char *buf, size_t n) {
    const ta_problem *p = &c->p;
    snprintf(buf, n,
             "%s B %d H %d/%d S %d/%d D %d Dv %d lat %d flags %u W %d alpha %g hist %d tiles %d x %d",
             dtype_name(p->dtype), p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k,
             p->head_dim, p->head_dim_v, p->latent_dim, p->flags, p->rband_width,
             (double)p->rband_alpha, p->q_history, p->block_q, p->block_k);
}

/* The forward of c on backend be into o (dtype) and lse. */
static ta_status rb_fwd(const ta_problem *p, const rb_case *c, ta_backend be, void *o, float *lse) {
    ta_fwd_args fa;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    fa.q = c->q, fa.k = c->k, fa.v = c->v, fa.o = o, fa.lse = lse;
    fa.q_hist = c->hist;
    fa.w_qlat = c->wq, fa.w_vup = c->wv;
    if ((st = ta_fwd_workspace_size(p, be, &bytes)) != TA_OK) return st;
    ws = ta_test_alloc(bytes ? bytes : 1);
    ta_poison(ws, bytes);
    st = ta_fwd(p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

/* max over i of (|x_i - y_i| - u |y_i|) / mag_i (0 where mag is 0 and x == y):
 * the error beyond the store's rounding, in units of the magnitude. */
static double rb_err(const void *x, ta_dtype dt, const double *y, const double *mag, size_t n,
                     size_t *at) {
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double xi = ta_get(x, dt, i);
        /* f16 subnormals: half of the smallest step, 2^-25, absolute */
        double e = fabs(xi - y[i]) - store_u(dt) * fabs(y[i]) - (dt == TA_F16 ? ldexp(1.0, -25) : 0.0);
        if (e < 0.0) e = 0.0;
        e = mag[i] > 0.0 ? e / mag[i] : (xi == y[i] ? 0.0 : (double)INFINITY);
        if (!(e <= worst)) worst = e, *at = i; /* NaN wins */
    }
    return worst;
}

static ta_rb_in rb_oracle_in(const rb_case *c) {
    ta_rb_in in;
    memset(&in, 0, sizeof in);
    in.p = &c->p, in.scale = ta_rb_scale(&c->p), in.alpha = (double)c->p.rband_alpha;
    in.q = c->oq, in.q_hist = c->nh ? c->ohist : NULL, in.k = c->ok, in.v = c->ov;
    in.d_o = c->odo;
    return in;
}

/* The REF forward of c into ro, rlse (poisoned first) against the oracle
 * (with the projections: ta_rb_oracle_lat); the worst errors, in units of the
 * magnitude, kept in worst[0] (o) and worst[1] (lse). Returns the status. */
static ta_status rb_fwd_vs_oracle(const rb_case *c, const char *desc, void *ro, float *rlse,
                                  double *worst) {
    double *o = (double *)malloc(c->no * sizeof(double)), *lse = (double *)malloc(c->nl * 8);
    double *o_mag = (double *)malloc(c->no * sizeof(double)), *lse_mag = (double *)malloc(c->nl * 8);
    ta_rb_in in = rb_oracle_in(c);
    ta_rb_out out;
    size_t at = 0;
    double e;
    ta_status st;
    memset(&out, 0, sizeof out);
    out.o = o, out.lse = lse, out.o_mag = o_mag, out.lse_mag = lse_mag;
    if (c->p.latent_dim > 0) {
        in.scale = ta_rb_scale_lat(&c->p);
        TA_CHECK(ta_rb_oracle_lat(&in, c->owq, c->owv, &out) == 0, "oracle failed: %s", desc);
    } else {
        TA_CHECK(ta_rb_oracle(&in, &out) == 0, "oracle failed: %s", desc);
    }
    ta_poison(ro, c->no * ta_dtype_size(c->p.dtype));
    ta_poison(rlse, c->nl * sizeof(float));
    st = rb_fwd(&c->p, c, TA_BACKEND_REF, ro, rlse);
    TA_CHECK(st == TA_OK, "REF forward: %s: %s", ta_status_string(st), desc);
    if (st == TA_OK) {
        e = rb_err(ro, c->p.dtype, o, o_mag, c->no, &at);
        TA_CHECK(e <= 1e-6, "o[%zu]: error %.3g of the magnitude: %s", at, e, desc);
        if (e > worst[0]) worst[0] = e;
        e = rb_err(rlse, TA_F32, lse, lse_mag, c->nl, &at);
        TA_CHECK(e <= 1e-6, "lse[%zu]: error %.3g of the magnitude: %s", at, e, desc);
        if (e > worst[1]) worst[1] = e;
    }
    free(o), free(o_mag), free(lse), free(lse_mag);
    return st;
}

static void test_ref_fwd(ta_rng *r) {
    const int n_problems = quick ? 40 : 200;
    double worst[2] = {0.0, 0.0};
    int t, n_differ = 0, n_control = 0, n_hist = 0;
    for (t = 0; t < n_problems; ++t) {
        rb_case c;
        void *ro, *ro2;
        float *rlse, *rlse2;
        char desc[220];
        ta_status st;
        ta_problem plain;
        rb_random(r, &c, 0, 0);
        rb_describe(&c, desc, sizeof desc);
        n_hist += c.p.q_history > 0;
        ro = ta_test_alloc(c.no * ta_dtype_size(c.p.dtype));
        ro2 = ta_test_alloc(c.no * ta_dtype_size(c.p.dtype));
        rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
        rlse2 = (float *)ta_test_alloc(c.nl * sizeof(float));
        st = rb_fwd_vs_oracle(&c, desc, ro, rlse, worst);
        /* control: without the band (history rows dropped) the output differs */
        if (st == TA_OK && c.p.rband_alpha != 0.0f && c.p.q_history == 0) {
            plain = c.p;
            plain.flags = TA_CAUSAL, plain.rband_alpha = 0.0f, plain.rband_width = 0;
            ta_poison(ro2, c.no * ta_dtype_size(c.p.dtype));
            TA_CHECK(rb_fwd(&plain, &c, TA_BACKEND_REF, ro2, rlse2) == TA_OK, "plain: %s", desc);
            ++n_control;
            n_differ += memcmp(rlse, rlse2, c.nl * sizeof(float)) != 0;
        }
        ta_test_free(ro), ta_test_free(ro2), ta_test_free(rlse), ta_test_free(rlse2);
        rb_free(&c);
    }
    TA_CHECK(n_differ == n_control && n_control > 0, "control: %d of %d band calls equal the plain one",
             n_control - n_differ, n_control);
    TA_CHECK(n_hist > 0, "no decode-like problem drawn");
    printf("REF forward vs oracle: %d problems (%d with history rows), worst o %.3g, lse %.3g "
           "(of the magnitude)\n", n_problems, n_hist, worst[0], worst[1]);
}

/* ---------------------------------------------------------------------- */
/* 4. REF backward against the oracle                                      */
/* ---------------------------------------------------------------------- */

typedef struct rb_grads {
    void *dq, *dk, *dv;
    float *dwq, *dwv;  /* the projections' weight gradients, or NULL */
    float d_alpha[2]; /* [1] is a guard: never written */
} rb_grads;

static void rb_grads_alloc(const rb_case *c, rb_grads *g) {
    const size_t eb = ta_dtype_size(c->p.dtype);
    const size_t n_wq = c->wq ? (size_t)c->p.heads_q * (size_t)c->p.head_dim * (size_t)c->p.latent_dim : 0;
    const size_t n_wv = c->wq ? (size_t)c->p.heads_q * (size_t)c->p.latent_dim * (size_t)c->p.head_dim_v : 0;
    g->dq = ta_test_alloc(c->nq * eb), g->dk = ta_test_alloc(c->nk * eb);
    g->dv = ta_test_alloc(c->nv * eb);
    ta_poison(g->dq, c->nq * eb), ta_poison(g->dk, c->nk * eb), ta_poison(g->dv, c->nv * eb);
    ta_poison(g->d_alpha, sizeof g->d_alpha);
    g->dwq = g->dwv = NULL;
    if (c->wq) {
        g->dwq = (float *)ta_test_alloc(n_wq * sizeof(float));
        g->dwv = (float *)ta_test_alloc(n_wv * sizeof(float));
        ta_poison(g->dwq, n_wq * sizeof(float)), ta_poison(g->dwv, n_wv * sizeof(float));
    }
}

static void rb_grads_free(rb_grads *g) {
    ta_test_free(g->dq), ta_test_free(g->dk), ta_test_free(g->dv);
    ta_test_free(g->dwq), ta_test_free(g->dwv);
}

static ta_status rb_bwd_on(const ta_problem *p, ta_backend be, const rb_case *c, const void *o,
                           const float *lse, rb_grads *g) {
    ta_bwd_args ba;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    memset(&ba, 0, sizeof ba);
    ba.q = c->q, ba.k = c->k, ba.v = c->v, ba.o = o, ba.d_o = c->d_o, ba.lse = lse;
    ba.dq = g->dq, ba.dk = g->dk, ba.dv = g->dv, ba.d_alpha = g->d_alpha;
    ba.w_qlat = c->wq, ba.w_vup = c->wv, ba.dw_qlat = g->dwq, ba.dw_vup = g->dwv;
    if ((st = ta_bwd_workspace_size(p, be, &bytes)) != TA_OK) return st;
    ws = ta_test_alloc(bytes ? bytes : 1);
    ta_poison(ws, bytes);
    st = ta_bwd(p, be, &ba, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

/* The same backward on the CPU's caller-run tasks (ta_test_bwd_tasks). */
static ta_status rb_bwd_tasks(const ta_problem *p, const rb_case *c, const void *o,
                              const float *lse, rb_grads *g) {
    ta_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.q = c->q, ba.k = c->k, ba.v = c->v, ba.o = o, ba.d_o = c->d_o, ba.lse = lse;
    ba.dq = g->dq, ba.dk = g->dk, ba.dv = g->dv, ba.d_alpha = g->d_alpha;
    ba.w_qlat = c->wq, ba.w_vup = c->wv, ba.dw_qlat = g->dwq, ba.dw_vup = g->dwv;
    return ta_test_bwd_tasks(p, &ba);
}

static ta_status rb_bwd(const ta_problem *p, const rb_case *c, const void *o, const float *lse,
                        rb_grads *g) {
    return rb_bwd_on(p, TA_BACKEND_REF, c, o, lse, g);
}

static int rb_same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* lat: with the fused projections (then dw_qlat and dw_vup too). */
static void test_ref_bwd(ta_rng *r, int lat) {
    enum { N_OUT = 6 };
    const int n_problems = quick ? 30 : 150;
    double worst[N_OUT] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    static const char *const names[N_OUT] = {"dq", "dk", "dv", "d_alpha", "dw_qlat", "dw_vup"};
    /* of the magnitude; measured about 20x below (dw_qlat's magnitude is the
     * loosest: dq~'s exponent factors times |q|) */
    static const double tol[N_OUT] = {1e-6, 1e-6, 1e-6, 2e-7, 1e-7, 1e-6};
    int t, k, n_retiled = 0;
    for (t = 0; t < n_problems; ++t) {
        rb_case c;
        ta_rb_in in;
        ta_rb_out out;
        rb_grads g, g2;
        double *x[N_OUT], *mag[N_OUT], *o_wide, da = 0.0, da_mag = 0.0;
        size_t n[N_OUT], at = 0;
        const int n_out = lat ? 6 : 4;
        void *ro;
        float *rlse;
        char desc[220];
        ta_status st;
        ta_problem p2;
        rb_random(r, &c, 1, lat);
        rb_describe(&c, desc, sizeof desc);
        n[0] = c.nq, n[1] = c.nk, n[2] = c.nv, n[3] = 1;
        n[4] = lat ? (size_t)c.p.heads_q * (size_t)c.p.head_dim * (size_t)c.p.latent_dim : 0;
        n[5] = lat ? (size_t)c.p.heads_q * (size_t)c.p.latent_dim * (size_t)c.p.head_dim_v : 0;
        ro = ta_test_alloc(c.no * ta_dtype_size(c.p.dtype));
        rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
        st = rb_fwd(&c.p, &c, TA_BACKEND_REF, ro, rlse);
        TA_CHECK(st == TA_OK, "REF forward: %s: %s", ta_status_string(st), desc);
        for (k = 0; k < N_OUT; ++k) {
            if (k == 3) continue;
            x[k] = (double *)malloc((n[k] + 1) * sizeof(double));
            mag[k] = (double *)malloc((n[k] + 1) * sizeof(double));
        }
        x[3] = &da, mag[3] = &da_mag;
        in = rb_oracle_in(&c);
        in.o = o_wide = ta_oracle_widen(ro, c.p.dtype, c.no);
        memset(&out, 0, sizeof out);
        out.dq = x[0], out.dk = x[1], out.dv = x[2], out.d_alpha = &da;
        out.dq_mag = mag[0], out.dk_mag = mag[1], out.dv_mag = mag[2], out.d_alpha_mag = &da_mag;
        if (lat) {
            out.dw_qlat = x[4], out.dw_vup = x[5], out.dw_qlat_mag = mag[4], out.dw_vup_mag = mag[5];
            in.scale = ta_rb_scale_lat(&c.p);
            TA_CHECK(ta_rb_oracle_lat(&in, c.owq, c.owv, &out) == 0, "oracle failed: %s", desc);
        } else {
            TA_CHECK(ta_rb_oracle(&in, &out) == 0, "oracle failed: %s", desc);
        }
        rb_grads_alloc(&c, &g);
        st = rb_bwd(&c.p, &c, ro, rlse, &g);
        TA_CHECK(st == TA_OK, "REF backward: %s: %s", ta_status_string(st), desc);
        if (st == TA_OK) {
            const void *got[N_OUT] = {g.dq, g.dk, g.dv, g.d_alpha, g.dwq, g.dwv};
            const int band = (c.p.flags & TA_RBAND) != 0;
            for (k = 0; k < n_out; ++k) {
                const ta_dtype dt = k >= 3 ? TA_F32 : c.p.dtype;
                double e;
                if (k == 3 && !band) continue; /* d_alpha: only with the band */
                e = rb_err(got[k], dt, x[k], mag[k], n[k], &at);
                TA_CHECK(e <= tol[k],
                         "%s[%zu]: error %.3g of the magnitude (got %g, oracle %g): %s", names[k], at,
                         e, ta_get(got[k], dt, at), x[k][at], desc);
                if (e > worst[k]) worst[k] = e;
            }
            TA_CHECK(isnan(g.d_alpha[1]) && (band || isnan(g.d_alpha[0])),
                     "d_alpha: written past it, or without the band: %s", desc);
        }
        /* another tiling of the same (o, lse): the same bits */
        p2 = c.p;
        p2.block_q = ta_rng_int(r, 8, 50), p2.block_k = ta_rng_int(r, 8, 50);
        rb_grads_alloc(&c, &g2);
        if (st == TA_OK && rb_bwd(&p2, &c, ro, rlse, &g2) == TA_OK) {
            const size_t eb = ta_dtype_size(c.p.dtype);
            ++n_retiled;
            TA_CHECK(rb_same_bits(g.dq, g2.dq, c.nq * eb) && rb_same_bits(g.dk, g2.dk, c.nk * eb) &&
                         rb_same_bits(g.dv, g2.dv, c.nv * eb) &&
                         rb_same_bits(g.d_alpha, g2.d_alpha, sizeof g.d_alpha) &&
                         (!lat || (rb_same_bits(g.dwq, g2.dwq, n[4] * sizeof(float)) &&
                                   rb_same_bits(g.dwv, g2.dwv, n[5] * sizeof(float)))),
                     "tiles %d x %d: other bits than %d x %d: %s", p2.block_q, p2.block_k,
                     c.p.block_q, c.p.block_k, desc);
        }
        rb_grads_free(&g), rb_grads_free(&g2);
        for (k = 0; k < N_OUT; ++k)
            if (k != 3) free(x[k]), free(mag[k]);
        free(o_wide);
        ta_test_free(ro), ta_test_free(rlse);
        rb_free(&c);
    }
    TA_CHECK(n_retiled > 0, "no retiled backward ran");
    printf("REF backward%s vs oracle: %d problems, worst dq %.3g, dk %.3g, dv %.3g, d_alpha %.3g",
           lat ? " with the fused projections" : "", n_problems, worst[0], worst[1], worst[2],
           worst[3]);
    if (lat) printf(", dw_qlat %.3g, dw_vup %.3g", worst[4], worst[5]);
    printf(" (of the magnitude); %d retiled, same bits\n", n_retiled);
}

/* ---------------------------------------------------------------------- */
/* 5. Decode: chunks through the query history == the full forward          */
/* ---------------------------------------------------------------------- */

/* hist [B, H, n, L] = rows a - n .. a - 1 of q [B, H, S, L] (contiguous). */
static void copy_hist(void *hist, const void *q, const ta_problem *p, int32_t a, int32_t n,
                      size_t eb) {
    const size_t row = (size_t)p->head_dim * eb;
    int32_t b, h, i;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (i = 0; i < n; ++i) {
                const size_t bh = (size_t)b * (size_t)p->heads_q + (size_t)h;
                memcpy((char *)hist + (bh * (size_t)n + (size_t)i) * row,
                       (const char *)q + (bh * (size_t)p->seq_q + (size_t)(a - n + i)) * row, row);
            }
}

/* Rows [a, a + len) of every (b, h) of two [B, H, S] lse arrays equal bit for bit. */
static int rows_equal(const float *x, const float *y, const ta_problem *p, int32_t a, int32_t len) {
    int32_t bh;
    for (bh = 0; bh < p->batch * p->heads_q; ++bh) {
        const size_t at = (size_t)bh * (size_t)p->seq_q + (size_t)a;
        if (memcmp(x + at, y + at, (size_t)len * sizeof(float)) != 0) return 0;
    }
    return 1;
}

static void test_decode(ta_rng *r) {
    const int n_seqs = quick ? 12 : 50;
    long n_chunks = 0, n_hist = 0, n_control = 0, n_control_differ = 0, n_lat = 0;
    int t;
    for (t = 0; t < n_seqs; ++t) {
        rb_case c;
        const ta_problem *p = &c.p;
        size_t eb, n_o, n_l;
        void *o_full, *o_chunks, *hist_copy;
        float *lse_full, *lse_chunks, *lse_part, *lse_control;
        char desc[200];
        int32_t a = 0, b, h, bb;
        rb_random(r, &c, 1, t % 3 == 2); /* S_q = S_k = S: the whole sequence */
        c.p.flags |= TA_CAUSAL; /* a decode is causal (projected problems may draw none) */
        n_lat += c.p.latent_dim > 0;
        eb = ta_dtype_size(p->dtype);
        rb_describe(&c, desc, sizeof desc);
        n_o = c.no, n_l = c.nl;
        o_full = ta_test_alloc(n_o * eb), o_chunks = ta_test_alloc(n_o * eb);
        lse_full = (float *)ta_test_alloc(n_l * sizeof(float));
        lse_chunks = (float *)ta_test_alloc(n_l * sizeof(float));
        lse_part = (float *)ta_test_alloc(n_l * sizeof(float));
        lse_control = (float *)ta_test_alloc(n_l * sizeof(float));
        hist_copy = ta_test_alloc(c.nq * eb + 1);
        ta_poison(o_full, n_o * eb), ta_poison(o_chunks, n_o * eb);
        ta_poison(lse_full, n_l * sizeof(float)), ta_poison(lse_chunks, n_l * sizeof(float));
        TA_CHECK(rb_fwd(p, &c, TA_BACKEND_REF, o_full, lse_full) == TA_OK, "full: %s", desc);
        while (a < p->seq_q) {
            const int32_t len = a < p->seq_q / 2 && ta_rng_int(r, 0, 1)
                                    ? ta_rng_int(r, 1, p->seq_q - a)
                                    : ta_rng_int(r, 1, ta_tiling_min_i32(3, p->seq_q - a));
            const int32_t s_full = p->seq_q, dim = p->head_dim, dv = p->head_dim_v;
            const int32_t kdim = p->latent_dim ? p->latent_dim : dim;  /* k, v widths */
            const int32_t vdim = p->latent_dim ? p->latent_dim : dv;
            const int in_place = ta_rng_int(r, 0, 1);
            ta_problem pc = *p;
            ta_fwd_args fa;
            size_t bytes = 0;
            void *ws;
            int rep;
            b = a + len;
            pc.seq_q = len, pc.seq_k = b;
            pc.q_history = ta_tiling_min_i32(a, p->rband_width);
            pc.block_q = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 8, 40); /* rows: any tiles */
            memset(&fa, 0, sizeof fa);
            fa.q = (const char *)c.q + (size_t)a * (size_t)dim * eb;
            fa.q_strides.batch = (int64_t)p->heads_q * s_full * dim;
            fa.q_strides.head = (int64_t)s_full * dim, fa.q_strides.seq = dim;
            fa.k = c.k, fa.v = c.v; /* the cache: the first b keys of each head */
            fa.k_strides.batch = (int64_t)p->heads_kv * s_full * kdim;
            fa.k_strides.head = (int64_t)s_full * kdim, fa.k_strides.seq = kdim;
            fa.v_strides.batch = (int64_t)p->heads_kv * s_full * vdim;
            fa.v_strides.head = (int64_t)s_full * vdim, fa.v_strides.seq = vdim;
            fa.w_qlat = c.wq, fa.w_vup = c.wv;
            fa.o = (char *)o_chunks + (size_t)a * (size_t)dv * eb;
            fa.o_strides.batch = (int64_t)p->heads_q * s_full * dv;
            fa.o_strides.head = (int64_t)s_full * dv, fa.o_strides.seq = dv;
            fa.lse = lse_part;
            if (pc.q_history > 0) {
                ++n_hist;
                if (in_place) { /* the rows just above: q's own buffer and strides */
                    fa.q_hist = (const char *)fa.q - (size_t)pc.q_history * (size_t)dim * eb;
                    fa.q_hist_strides = fa.q_strides;
                } else { /* a contiguous copy [B, H, n, L] */
                    fa.q_hist = hist_copy;
                }
            }
            TA_CHECK(ta_fwd_workspace_size(&pc, TA_BACKEND_REF, &bytes) == TA_OK, "size: %s", desc);
            ws = ta_test_alloc(bytes ? bytes : 1);
            /* rep 0, control (a copied history only): other history rows; rep 1: the call */
            for (rep = pc.q_history > 0 && !in_place ? 0 : 1; rep < 2; ++rep) {
                ta_status st;
                if (fa.q_hist == hist_copy && rep == 0)
                    ta_fill_uniform(r, hist_copy, p->dtype,
                                    (size_t)p->batch * (size_t)p->heads_q * (size_t)pc.q_history *
                                        (size_t)dim,
                                    -1.0f, 1.0f);
                if (fa.q_hist == hist_copy && rep == 1)
                    copy_hist(hist_copy, c.q, p, a, pc.q_history, eb);
                ta_poison(ws, bytes);
                st = ta_fwd(&pc, TA_BACKEND_REF, &fa, ws, bytes, NULL);
                TA_CHECK(st == TA_OK, "chunk [%d, %d): %s: %s", a, b, ta_status_string(st), desc);
                for (bb = 0; bb < p->batch; ++bb)
                    for (h = 0; h < p->heads_q; ++h) {
                        const size_t row0 = ((size_t)bb * (size_t)p->heads_q + (size_t)h);
                        const size_t full_at = row0 * (size_t)s_full + (size_t)a;
                        float *dst = rep == 1 ? lse_chunks + full_at : lse_control + full_at;
                        memcpy(dst, lse_part + row0 * (size_t)len, (size_t)len * sizeof(float));
                    }
                if (rep == 1) continue;
                ++n_control;
                n_control_differ += !rows_equal(lse_full, lse_control, p, a, len);
            }
            ta_test_free(ws);
            ++n_chunks;
            a = b;
        }
        TA_CHECK(memcmp(o_full, o_chunks, n_o * eb) == 0, "chunks' o differ from the full forward: %s",
                 desc);
        TA_CHECK(memcmp(lse_full, lse_chunks, n_l * sizeof(float)) == 0,
                 "chunks' lse differ from the full forward: %s", desc);
        ta_test_free(o_full), ta_test_free(o_chunks), ta_test_free(lse_full);
        ta_test_free(lse_chunks), ta_test_free(lse_part), ta_test_free(hist_copy);
        ta_test_free(lse_control);
        rb_free(&c);
    }
    TA_CHECK(n_hist > 0, "no chunk with history rows");
    TA_CHECK(n_control == 0 || n_control_differ > 0,
             "control: %ld chunks with other history rows, none differs", n_control);
    printf("decode: %d sequences (%ld with the fused projections), %ld chunks (%ld with history "
           "rows) == the full forward; control %ld of %ld differ\n",
           n_seqs, n_lat, n_chunks, n_hist, n_control_differ, n_control);
}

/* ---------------------------------------------------------------------- */
/* 6. The fused projections: REF forward against the oracle                 */
/* ---------------------------------------------------------------------- */

static void test_ref_fwd_lat(ta_rng *r) {
    const int n_problems = quick ? 30 : 150;
    double worst[2] = {0.0, 0.0};
    int t, n_band = 0, n_noncausal = 0;
    for (t = 0; t < n_problems; ++t) {
        rb_case c;
        void *ro;
        float *rlse;
        char desc[220];
        rb_random(r, &c, 0, 1);
        rb_describe(&c, desc, sizeof desc);
        n_band += (c.p.flags & TA_RBAND) != 0;
        n_noncausal += c.p.flags == 0;
        ro = ta_test_alloc(c.no * ta_dtype_size(c.p.dtype));
        rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
        rb_fwd_vs_oracle(&c, desc, ro, rlse, worst);
        ta_test_free(ro), ta_test_free(rlse);
        rb_free(&c);
    }
    TA_CHECK(n_band > 0, "no band problem drawn");
    printf("REF forward with the fused projections vs oracle: %d problems (%d with the band, %d "
           "not causal), worst o %.3g, lse %.3g (of the magnitude)\n",
           n_problems, n_band, n_noncausal, worst[0], worst[1]);
}

/* ---------------------------------------------------------------------- */
/* 7. CPU forward == REF                                                    */
/* ---------------------------------------------------------------------- */

/* lat: with the fused projections. */
static void test_cpu_fwd(ta_rng *r, int lat) {
    static const char *const isas[3] = {"scalar", "avx2", "avx512"};
    const int n_problems = quick ? 20 : 80;
    long n_calls = 0, n_tasks = 0;
    int t, i;
    for (t = 0; t < n_problems; ++t) {
        rb_case c;
        size_t bo;
        void *ro, *co;
        float *rlse, *clse;
        char desc[220];
        rb_random(r, &c, 0, lat);
        rb_describe(&c, desc, sizeof desc);
        bo = c.no * ta_dtype_size(c.p.dtype);
        ro = ta_test_alloc(bo), co = ta_test_alloc(bo);
        rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
        clse = (float *)ta_test_alloc(c.nl * sizeof(float));
        ta_poison(ro, bo), ta_poison(rlse, c.nl * sizeof(float));
        TA_CHECK(rb_fwd(&c.p, &c, TA_BACKEND_REF, ro, rlse) == TA_OK, "REF: %s", desc);
        for (i = 0; i < 3; ++i) {
            ta_problem p = c.p;
            ta_status st;
            setenv("TA_CPU_ISA", isas[i], 1);
            p.num_threads = ta_rng_int(r, 1, 3);
            ta_poison(co, bo), ta_poison(clse, c.nl * sizeof(float));
            st = rb_fwd(&p, &c, TA_BACKEND_CPU, co, clse);
            TA_CHECK(st == TA_OK, "CPU %s: %s: %s", isas[i], ta_status_string(st), desc);
            TA_CHECK(memcmp(ro, co, bo) == 0 && memcmp(rlse, clse, c.nl * sizeof(float)) == 0,
                     "CPU %s (%d threads) != REF: %s", isas[i], p.num_threads, desc);
            ++n_calls;
        }
        unsetenv("TA_CPU_ISA");
        { /* the caller-run tasks */
            ta_fwd_args fa;
            ta_problem p = c.p;
            memset(&fa, 0, sizeof fa);
            fa.q = c.q, fa.k = c.k, fa.v = c.v, fa.o = co, fa.lse = clse, fa.q_hist = c.hist;
            fa.w_qlat = c.wq, fa.w_vup = c.wv;
            p.num_threads = ta_rng_int(r, 1, 4);
            ta_poison(co, bo), ta_poison(clse, c.nl * sizeof(float));
            TA_CHECK(ta_test_fwd_tasks(&p, &fa) == TA_OK, "CPU tasks: %s", desc);
            TA_CHECK(memcmp(ro, co, bo) == 0 && memcmp(rlse, clse, c.nl * sizeof(float)) == 0,
                     "CPU tasks != REF: %s", desc);
            ++n_tasks;
        }
        ta_test_free(ro), ta_test_free(co), ta_test_free(rlse), ta_test_free(clse);
        rb_free(&c);
    }
    printf("CPU forward%s == REF bit for bit: %d problems, %ld calls over the ISA paths, %ld "
           "through caller-run tasks\n",
           lat ? " with the fused projections" : "", n_problems, n_calls, n_tasks);
}

/* ---------------------------------------------------------------------- */
/* 8. CPU backward == REF                                                   */
/* ---------------------------------------------------------------------- */

/* Problem t's forced edge (t % 8 < 5), else the random problem as drawn. */
static void cb_edge(ta_problem *p, int t, const char **edge) {
    switch (t % 8) {
    case 0: *edge = "S = 1"; break; /* rb_seq_override */
    case 1: p->rband_width = 0, *edge = "W = 0"; break;
    case 2: p->rband_width = p->seq_k + (t % 3), *edge = "W >= S"; break;
    case 3: p->rband_alpha = 0.0f, *edge = "alpha = 0"; break;
    case 4: p->rband_alpha = -fabsf(p->rband_alpha) - 0.25f, *edge = "alpha < 0"; break;
    default: *edge = "random"; break;
    }
}

/* The backward of c on CPU (n_threads) against REF's g bit for bit: CPU's
 * gradients poisoned with another pattern (0x7b bytes) than REF's
 * (ta_poison), so an element neither writes still differs. Returns 1 on a
 * match. */
static int cb_same(const rb_case *c, const ta_problem *p, const void *ro, const float *rlse,
                   const rb_grads *g, int lat, const char *desc, int tasks) {
    const size_t eb = ta_dtype_size(c->p.dtype);
    const size_t n_wq = lat ? (size_t)p->heads_q * (size_t)p->head_dim * (size_t)p->latent_dim : 0;
    const size_t n_wv =
        lat ? (size_t)p->heads_q * (size_t)p->latent_dim * (size_t)p->head_dim_v : 0;
    rb_grads h;
    ta_status st;
    int same;
    rb_grads_alloc(c, &h);
    memset(h.dq, 0x7b, c->nq * eb), memset(h.dk, 0x7b, c->nk * eb), memset(h.dv, 0x7b, c->nv * eb);
    memset(h.d_alpha, 0x7b, sizeof h.d_alpha);
    if (lat) memset(h.dwq, 0x7b, n_wq * sizeof(float)), memset(h.dwv, 0x7b, n_wv * sizeof(float));
    st = tasks ? rb_bwd_tasks(p, c, ro, rlse, &h) : rb_bwd_on(p, TA_BACKEND_CPU, c, ro, rlse, &h);
    TA_CHECK(st == TA_OK, "CPU backward%s: %s: %s", tasks ? " (tasks)" : "", ta_status_string(st),
             desc);
    same = st == TA_OK && rb_same_bits(g->dq, h.dq, c->nq * eb) &&
           rb_same_bits(g->dk, h.dk, c->nk * eb) && rb_same_bits(g->dv, h.dv, c->nv * eb) &&
           (!(p->flags & TA_RBAND) || rb_same_bits(g->d_alpha, h.d_alpha, sizeof(float))) &&
           (!lat || (rb_same_bits(g->dwq, h.dwq, n_wq * sizeof(float)) &&
                     rb_same_bits(g->dwv, h.dwv, n_wv * sizeof(float))));
    TA_CHECK(st != TA_OK || same, "CPU backward (%d threads%s) != REF: %s", p->num_threads,
             tasks ? ", caller-run tasks" : "", desc);
    {
        uint32_t guard; /* d_alpha[1]: never written */
        memcpy(&guard, &h.d_alpha[1], sizeof guard);
        TA_CHECK(guard == 0x7b7b7b7bu, "CPU backward wrote past d_alpha: %s", desc);
    }
    rb_grads_free(&h);
    return same;
}

/* lat: with the fused projections (dw_qlat, dw_vup compared too). long_seq:
 * S_q = S_k in [130, 420] (several 64-row chunks and Q-tile groups per (b,
 * h), bands spanning several 64-row blocks), fewer problems. */
static void test_cpu_bwd(ta_rng *r, int lat, int long_seq) {
    static const char *const isas[3] = {"scalar", "avx2", "avx512"};
    const int n_problems = long_seq ? (quick ? 2 : 16) : quick ? 24 : 96;
    long n_calls = 0, n_tasks = 0;
    int t, k;
    for (t = 0; t < n_problems; ++t) {
        rb_case c;
        rb_grads g;
        const char *edge = "random";
        void *ro;
        float *rlse;
        char desc[260];
        ta_status st;
        rb_seq_override = long_seq ? ta_rng_int(r, 130, quick ? 200 : 420) : t % 8 == 0 ? 1 : 0;
        rb_random(r, &c, 1, lat);
        rb_seq_override = 0;
        if (c.p.flags & TA_RBAND) cb_edge(&c.p, long_seq ? t % 7 + 1 : t, &edge); /* S = 1: not here */
        rb_describe(&c, desc, sizeof desc);
        strncat(desc, " edge: ", sizeof desc - strlen(desc) - 1);
        strncat(desc, edge, sizeof desc - strlen(desc) - 1);
        ro = ta_test_alloc(c.no * ta_dtype_size(c.p.dtype));
        rlse = (float *)ta_test_alloc(c.nl * sizeof(float));
        st = rb_fwd(&c.p, &c, TA_BACKEND_REF, ro, rlse);
        TA_CHECK(st == TA_OK, "REF forward: %s: %s", ta_status_string(st), desc);
        rb_grads_alloc(&c, &g);
        st = rb_bwd(&c.p, &c, ro, rlse, &g);
        TA_CHECK(st == TA_OK, "REF backward: %s: %s", ta_status_string(st), desc);
        for (k = 0; st == TA_OK && k < 3; ++k) { /* every ISA path this machine has */
            ta_problem p = c.p;
            setenv("TA_CPU_ISA", isas[k], 1);
            p.num_threads = k == 0 ? 1 : ta_rng_int(r, 2, 4);
            (void)cb_same(&c, &p, ro, rlse, &g, lat, desc, 0);
            ++n_calls;
        }
        unsetenv("TA_CPU_ISA");
        if (st == TA_OK) { /* the caller-run tasks (phase 1: the call sums) */
            ta_problem p = c.p;
            p.num_threads = ta_rng_int(r, 1, 4);
            (void)cb_same(&c, &p, ro, rlse, &g, lat, desc, 1);
            ++n_tasks;
        }
        rb_grads_free(&g);
        ta_test_free(ro), ta_test_free(rlse);
        rb_free(&c);
    }
    printf("CPU backward%s == REF bit for bit: %d problems (%s; with the band W = 0, W >= S, alpha "
           "= 0, alpha < 0 in 4 of 8), %ld calls over the ISA paths, 1-4 threads, %ld through "
           "caller-run tasks\n",
           lat ? " with the fused projections" : "", n_problems,
           long_seq ? (quick ? "S in [130, 200]" : "S in [130, 420]") : "S = 1 forced in 1 of 8", n_calls, n_tasks);
}

int main(int argc, char **argv) {
    ta_rng r;
    const uint64_t seed = ta_test_seed("test_rband");
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    ta_rng_seed(&r, seed);
    test_bad_input(&r);
    test_oracle_fd(&r);
    test_oracle_fd_lat(&r);
    test_ref_fwd(&r);
    test_ref_bwd(&r, 0);
    test_decode(&r);
    test_ref_fwd_lat(&r);
    test_ref_bwd(&r, 1);
    test_cpu_fwd(&r, 0);
    test_cpu_fwd(&r, 1);
    test_cpu_bwd(&r, 0, 0);
    test_cpu_bwd(&r, 0, 1);
    test_cpu_bwd(&r, 1, 0);
    test_cpu_bwd(&r, 1, 1);
    return ta_test_finish("test_rband");
}
