/*
 * MTA decode and chunked prefill with query history rows (ta_problem.q_history,
 * ta_fwd_args.q_hist; docs/mta.md section 2a), REF and CPU.
 *
 *   1. random MTA problems (fresh seed, printed; replay with TA_SEED=...):
 *      c_q in 1..6 (often the paper's 6 x 11), odd c_k, causal, GQA,
 *      seqlens_k, sliding windows, a key prefix without queries (S_k > S_q),
 *      every dtype, random key tiles. The full forward (REF) is checked
 *      against the float64 oracle; then the sequence is run in random chunks
 *      (a few prefill pieces, then one to three tokens at a time) against a
 *      KV cache that grows (seq_k = prefix + rows so far), each chunk with
 *      q_history = min(c_q - 1, rows before it), the history rows read in
 *      place (q_hist = q - n rows, q's strides) or from a copy, a random
 *      block_q per chunk and one or two CPU threads (a quarter of the CPU
 *      chunks through the caller-run tasks). The chunks' o and lse,
 *      gathered, must equal the full forward's bit for bit, on REF and CPU.
 *      Outputs poisoned once before the chunks (an unwritten row shows).
 *      Control: a chunk run without its history differs from the full
 *      forward (counted; some must differ, else the test proves nothing).
 *   2. bad history: q_history outside [0, c_q - 1] or without a conv, a NULL
 *      q_hist, o overlapping q_hist, a misaligned q_hist, a negative
 *      q_hist stride, rope with history, the backward with history: the
 *      documented status, ta_explain_fwd / _bwd naming the field, the output
 *      untouched.
 * Usage: test_mta_chunks [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

static const double tol_fwd[TA_OC_TENSORS] = {2e-6, 2e-6, 0.0, 0.0, 0.0, 0.0};
static err_max worst[3];
static long n_chunks, n_hist_chunks, n_inplace, n_control, n_control_differ, n_problems;

/* ---------------------------------------------------------------------- */
/* One sequence                                                            */
/* ---------------------------------------------------------------------- */

/* A random MTA problem: S_q = T query rows, S_k = prefix + T keys. */
static void random_problem(ta_rng *r, tcase *tc, int32_t *prefix) {
    static const int32_t dim_cuts[3] = {40, 80, 100};
    ta_problem *p = &tc->p;
    const int32_t c = ta_rng_int(r, 0, 2);
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    if (p->head_dim > 96) p->head_dim = 96;
    if (p->head_dim_v > 96) p->head_dim_v = 96;
    p->conv_q = c == 0 ? 6 : ta_rng_int(r, 1, 6);
    p->conv_k = c == 0 ? 11 : 2 * ta_rng_int(r, 0, 5) + 1;
    p->seq_q = ta_rng_int(r, 0, 4) == 0 ? ta_rng_int(r, 1, 8) : ta_rng_int(r, 1, 110);
    *prefix = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 40) : 0;
    p->seq_k = *prefix + p->seq_q;
    p->flags = TA_CAUSAL;
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 48);
    if (p->block_k && p->block_k < 4 * ((p->conv_k - 1) / 2) + 1) p->block_k = 0;
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 25);
}

static void fill_kernel(ta_rng *r, tcase *tc) {
    const float a = 1.0f / sqrtf((float)(tc->p.conv_q * tc->p.conv_k));
    size_t i;
    for (i = 0; i < tc->n_w; ++i)
        tc->conv_w[i] = ta_rng_uniform(r, -a, a);
    for (i = 0; i < (size_t)tc->p.heads_q; ++i) /* near the identity: softmax stays lively */
        tc->conv_w[i * (size_t)(tc->p.conv_q * tc->p.conv_k) +
                   (size_t)((tc->p.conv_q - 1) * tc->p.conv_k + (tc->p.conv_k - 1) / 2)] += 1.0f;
    tc->ow = ta_oracle_widen(tc->conv_w, TA_F32, tc->n_w);
}

/* A block_q valid for both passes of the conv (or 0 = the default). */
static int32_t random_block_q(ta_rng *r, int32_t conv_q) {
    const int32_t bq = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 8, 80);
    return bq && bq < 2 * (conv_q - 1) + 1 ? 0 : bq;
}

/* The full forward's (contiguous) problem p run over query rows [a, b) of
 * every (batch, head): the chunk, its outputs written into o_all (rows
 * [a, b) through o's strides) and lse_all (gathered). hist: 0 = no history,
 * 1 = q_hist in place (q - n rows), 2 = a contiguous copy. */
static ta_status run_chunk(ta_backend be, ta_rng *r, const tcase *tc, int32_t prefix, int32_t a,
                           int32_t b, int hist, int32_t threads, void *o_all, float *lse_all) {
    const ta_problem *full = &tc->p;
    const int32_t T = full->seq_q, B = full->batch, H = full->heads_q, D = full->head_dim;
    const int32_t n = hist ? (a < full->conv_q - 1 ? a : full->conv_q - 1) : 0;
    ta_problem p = *full;
    ta_fwd_args fa;
    size_t bytes = 0, i;
    int32_t *seql = NULL, bb, h, s;
    float *lse;
    void *ws, *qh = NULL;
    ta_status st;
    p.seq_q = b - a;
    p.seq_k = prefix + b;
    p.q_history = n;
    p.block_q = random_block_q(r, p.conv_q);
    p.num_threads = threads;
    memset(&fa, 0, sizeof fa);
    fa.q = (const char *)tc->q + (size_t)a * (size_t)D * tc->eb;
    fa.q_strides = ta_strides_contiguous(H, T, D);
    fa.k = tc->k, fa.v = tc->v;
    fa.k_strides = ta_strides_contiguous(full->heads_kv, full->seq_k, D);
    fa.v_strides = ta_strides_contiguous(full->heads_kv, full->seq_k, full->head_dim_v);
    fa.o = (char *)o_all + (size_t)a * (size_t)full->head_dim_v * tc->eb;
    fa.o_strides = ta_strides_contiguous(H, T, full->head_dim_v);
    fa.conv_w = tc->conv_w;
    lse = (float *)ta_test_alloc((size_t)B * (size_t)H * (size_t)p.seq_q * sizeof(float));
    ta_poison(lse, (size_t)B * (size_t)H * (size_t)p.seq_q * sizeof(float));
    fa.lse = lse;
    if (tc->seqlens) { /* the cache holds prefix + b keys: the full lengths cut there */
        seql = (int32_t *)malloc((size_t)B * sizeof(int32_t));
        for (bb = 0; bb < B; ++bb)
            seql[bb] = tc->seqlens[bb] < p.seq_k ? tc->seqlens[bb] : p.seq_k;
        fa.seqlens_k = seql;
    }
    if (n > 0 && hist == 1) { /* the rows just above the chunk in q itself */
        fa.q_hist = (const char *)tc->q + (size_t)(a - n) * (size_t)D * tc->eb;
        fa.q_hist_strides = fa.q_strides;
    } else if (n > 0) { /* a caller's copy [B, H, n, D], contiguous */
        qh = ta_test_alloc((size_t)B * (size_t)H * (size_t)n * (size_t)D * tc->eb);
        for (bb = 0; bb < B; ++bb)
            for (h = 0; h < H; ++h)
                for (s = 0; s < n; ++s)
                    memcpy((char *)qh +
                               ((((size_t)bb * (size_t)H + (size_t)h) * (size_t)n + (size_t)s) *
                                (size_t)D) *
                                   tc->eb,
                           (const char *)tc->q +
                               ((((size_t)bb * (size_t)H + (size_t)h) * (size_t)T +
                                 (size_t)(a - n + s)) *
                                (size_t)D) *
                                   tc->eb,
                           (size_t)D * tc->eb);
        fa.q_hist = qh;
    }
    if (be == TA_BACKEND_CPU && ta_rng_int(r, 0, 3) == 0) {
        st = ta_test_fwd_tasks(&p, &fa); /* the caller-run tasks, in reverse order */
        goto gather;
    }
    if ((st = ta_fwd_workspace_size(&p, be, &bytes)) != TA_OK) goto done;
    ws = ta_oc_workspace(r, bytes, ta_rng_int(r, 0, 1));
    st = ta_fwd(&p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
gather:
    if (st == TA_OK) /* lse rows [a, b) of every (batch, head) */
        for (i = 0; i < (size_t)B * (size_t)H; ++i)
            memcpy(lse_all + i * (size_t)T + (size_t)a, lse + i * (size_t)p.seq_q,
                   (size_t)p.seq_q * sizeof(float));
done:
    ta_test_free(lse);
    ta_test_free(qh);
    free(seql);
    return st;
}

/* Chunk ends: a few prefill pieces, then 1..3 rows at a time; ends[0] = 0. */
static int32_t random_chunks(ta_rng *r, int32_t T, int32_t *ends) {
    int32_t n = 0, at = 0;
    ends[n++] = 0;
    while (at < T) {
        const int prefill = n <= 3 && ta_rng_int(r, 0, 1);
        int32_t len = prefill ? ta_rng_int(r, 1, T) : ta_rng_int(r, 1, 3);
        if (at + len > T) len = T - at;
        at += len;
        ends[n++] = at;
    }
    return n;
}

static size_t first_diff(const void *a, const void *b, size_t eb, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (memcmp((const char *)a + i * eb, (const char *)b + i * eb, eb) != 0) return i;
    return n;
}

static void check_sequence(ta_rng *r) {
    tcase tc;
    char desc[256];
    int32_t prefix, *ends, n_ends, c, be_i;
    void *o_full, *o_chunks;
    float *l_full, *l_chunks;
    run_out out;
    err_max e;
    random_problem(r, &tc, &prefix);
    ta_oc_make_buffers(r, &tc);
    fill_kernel(r, &tc);
    ta_oc_describe(&tc, desc, sizeof desc);
    ++n_problems;
    o_full = ta_test_alloc(tc.n_o * tc.eb), o_chunks = ta_test_alloc(tc.n_o * tc.eb);
    l_full = (float *)ta_test_alloc(tc.n_lse * 4), l_chunks = (float *)ta_test_alloc(tc.n_lse * 4);
    /* the full forward, REF, against the oracle */
    memset(&out, 0, sizeof out);
    out.o = o_full, out.lse = l_full;
    TA_CHECK(ta_oc_run_fwd_on(TA_BACKEND_REF, r, &tc, &tc.p, &out, 0, NULL) == TA_OK, "full: %s",
             desc);
    ta_oc_run_oracle(&tc, o_full);
    memset(&e, 0, sizeof e);
    ta_oc_compare_all(&tc, &out, 1, 0, tol_fwd, 1, &e);
    ta_oc_fold(&worst[tc.p.dtype], &e);
    ends = (int32_t *)malloc(((size_t)tc.p.seq_q + 2) * sizeof(int32_t));
    n_ends = random_chunks(r, tc.p.seq_q, ends);
    for (be_i = 0; be_i < 2; ++be_i) { /* REF, then CPU: the same chunks */
        const ta_backend be = be_i ? TA_BACKEND_CPU : TA_BACKEND_REF;
        ta_poison(o_chunks, tc.n_o * tc.eb);
        ta_poison(l_chunks, tc.n_lse * 4);
        for (c = 0; c + 1 < n_ends; ++c) {
            const int hist = ta_rng_int(r, 1, 2);
            const ta_status st = run_chunk(be, r, &tc, prefix, ends[c], ends[c + 1], hist,
                                           ta_rng_int(r, 1, 2), o_chunks, l_chunks);
            TA_CHECK(st == TA_OK, "%s chunk [%d, %d): %s: %s", be_i ? "CPU" : "REF", ends[c],
                     ends[c + 1], ta_status_string(st), desc);
            n_chunks++;
            n_hist_chunks += ends[c] > 0 && tc.p.conv_q > 1;
            n_inplace += hist == 1 && ends[c] > 0 && tc.p.conv_q > 1;
        }
        TA_CHECK(memcmp(o_chunks, o_full, tc.n_o * tc.eb) == 0,
                 "%s chunks: o != the full forward at element %zu of %zu (%d chunks): %s",
                 be_i ? "CPU" : "REF", first_diff(o_chunks, o_full, tc.eb, tc.n_o), tc.n_o,
                 n_ends - 1, desc);
        TA_CHECK(memcmp(l_chunks, l_full, tc.n_lse * 4) == 0,
                 "%s chunks: lse != the full forward at row %zu: %s", be_i ? "CPU" : "REF",
                 first_diff(l_chunks, l_full, 4, tc.n_lse), desc);
    }
    /* control: one chunk that has rows above it, without its history */
    if (tc.p.conv_q > 1 && n_ends > 2) {
        const int32_t at = ta_rng_int(r, 1, n_ends - 2);
        memcpy(o_chunks, o_full, tc.n_o * tc.eb);
        memcpy(l_chunks, l_full, tc.n_lse * 4);
        TA_CHECK(run_chunk(TA_BACKEND_REF, r, &tc, prefix, ends[at], ends[at + 1], 0, 1, o_chunks,
                           l_chunks) == TA_OK,
                 "control: %s", desc);
        ++n_control;
        n_control_differ += memcmp(o_chunks, o_full, tc.n_o * tc.eb) != 0;
    }
    free(ends);
    ta_test_free(o_full), ta_test_free(o_chunks), ta_test_free(l_full), ta_test_free(l_chunks);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */
/* 2. Bad history                                                          */
/* ---------------------------------------------------------------------- */

/* The bad-input case on REF and CPU (ta_test_expect_fwd). */
static void expect_fwd(const ta_problem *p, const ta_fwd_args *a, void *ws, size_t ws_bytes,
                       ta_status want, const char *field, const char *what) {
    ta_test_expect_fwd(p, TA_BACKEND_REF, a, ws, ws_bytes, want, field, what);
    ta_test_expect_fwd(p, TA_BACKEND_CPU, a, ws, ws_bytes, want, field, what);
}

static void check_bad_input(void) {
    enum { B = 1, H = 2, S = 5, D = 8, N = 3 };
    static float q[B * H * S * D], k[B * H * (S + 4) * D], v[B * H * (S + 4) * D];
    static float hist[B * H * S * D + 64], w[H * 4 * 3]; /* room for o's canary */
    static float o[B * H * S * D + 64];
    static float dq[B * H * S * D], dk[B * H * (S + 4) * D], dv[B * H * (S + 4) * D], dw[H * 4 * 3];
    ta_problem p = {0}, bad;
    ta_fwd_args fa, a;
    ta_bwd_args ba;
    size_t bytes = 0, i;
    void *ws;
    char why[256];
    ta_status st;
    for (i = 0; i < sizeof q / sizeof q[0]; ++i)
        q[i] = (float)(i % 7) * 0.1f;
    for (i = 0; i < sizeof k / sizeof k[0]; ++i)
        k[i] = v[i] = (float)(i % 5) * 0.1f;
    for (i = 0; i < sizeof hist / sizeof hist[0]; ++i)
        hist[i] = 0.3f;
    for (i = 0; i < sizeof w / sizeof w[0]; ++i)
        w[i] = 0.05f;
    p.batch = B, p.heads_q = p.heads_kv = H, p.seq_q = S, p.seq_k = S + 4;
    p.head_dim = p.head_dim_v = D, p.flags = TA_CAUSAL, p.conv_q = 4, p.conv_k = 3;
    p.q_history = N;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK, "size");
    {
        size_t b2 = 0;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &b2) == TA_OK, "size cpu");
        bytes = b2 > bytes ? b2 : bytes;
    }
    ws = ta_test_alloc(bytes);
    memset(&fa, 0, sizeof fa);
    fa.q = q, fa.k = k, fa.v = v, fa.o = o, fa.conv_w = w, fa.q_hist = hist;
    expect_fwd(&p, &fa, ws, bytes, TA_OK, "ok", "valid history");
    bad = p, bad.q_history = 4; /* > c_q - 1 */
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "q_history past c_q - 1");
    bad = p, bad.q_history = -1;
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "negative q_history");
    bad = p, bad.conv_q = bad.conv_k = 0, bad.q_history = 1; /* SDPA */
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "q_history without a conv");
    a = fa, a.q_hist = NULL;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_NULL_ARG, "args.q_hist", "NULL q_hist");
    a = fa, a.o = hist; /* the output over the history rows */
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist", "o overlapping q_hist");
    a = fa, a.q_hist = (const char *)hist + 2; /* not on a float */
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist", "misaligned q_hist");
    a = fa, a.q_hist_strides.seq = -8;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist_strides", "negative stride");
    a = fa, a.q_hist_strides.batch = 1, a.q_hist_strides.head = 1, a.q_hist_strides.seq = 1;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist_strides", "aliasing strides");
    a = fa, a.q_hist = NULL; /* ignored without history */
    bad = p, bad.q_history = 0;
    expect_fwd(&bad, &a, ws, bytes, TA_OK, "ok", "no history, q_hist NULL");
    bad = p, bad.rope = TA_ROPE_HALF, bad.rope_pairs = 2, bad.rope_rows = 64;
    {
        static float cs[64 * 2], sn[64 * 2];
        a = fa, a.rope.cos = cs, a.rope.sin = sn;
        expect_fwd(&bad, &a, ws, bytes, TA_ERR_UNSUPPORTED, "q_history", "rope with history");
    }
    /* the backward: forward only, from the size query on */
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "bwd size with history");
    st = ta_explain_bwd_workspace_size(&p, TA_BACKEND_CPU, why, sizeof why);
    TA_CHECK(st == TA_ERR_UNSUPPORTED && strstr(why, "q_history"), "bwd size explain: %s", why);
    memset(&ba, 0, sizeof ba);
    ba.q = q, ba.k = k, ba.v = v, ba.o = o, ba.d_o = o, ba.lse = w, ba.conv_w = w;
    ba.dq = dq, ba.dk = dk, ba.dv = dv, ba.dconv_w = dw;
    TA_CHECK(ta_bwd(&p, TA_BACKEND_CPU, &ba, ws, bytes, NULL) == TA_ERR_UNSUPPORTED,
             "bwd with history");
    st = ta_explain_bwd(&p, TA_BACKEND_REF, &ba, ws, bytes, NULL, why, sizeof why);
    TA_CHECK(st == TA_ERR_UNSUPPORTED && strstr(why, "q_history"), "bwd explain: %s", why);
    ta_test_free(ws);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const uint64_t seed = ta_test_seed("test_mta_chunks");
    const int n_seq = quick ? 12 : 160;
    ta_rng r;
    int i;
    ta_rng_seed(&r, seed);
    check_bad_input();
    for (i = 0; i < n_seq && ta_test_failures == 0; ++i)
        check_sequence(&r);
    printf("test_mta_chunks: %ld sequences, %ld chunks (%ld with history rows, %ld read in "
           "place), all equal to the full forward on REF and CPU\n",
           n_problems, n_chunks, n_hist_chunks, n_inplace);
    printf("  control: %ld of %ld chunks run without their history differ from the full "
           "forward\n",
           n_control_differ, n_control);
    TA_CHECK(n_control < 8 || n_control_differ > 0, "no control chunk differed: the history is "
                                                    "never needed by these problems");
    ta_oc_print_table("full forward (REF) vs the float64 oracle", worst, 2, 1, NULL);
    return ta_test_finish("test_mta_chunks");
}
