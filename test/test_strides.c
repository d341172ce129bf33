/*
 * Strided layouts (ta_strides) on the host backends: a call on strided tensors
 * returns, bit for bit, what the contiguous call returns on the same values.
 *
 * For many random problems (fresh seed, printed; replay with TA_SEED=...):
 * SDPA and MTA, every dtype, causal or not, seqlens_k, GQA, sliding windows.
 *   1. the reference runs forward and backward on contiguous [B, H, S, D]
 *      tensors: the expected bits;
 *   2. every tensor (q, k, v, o, d_o, dq, dk, dv) gets its own layout: [B, H, S, D]
 *      or [B, S, H, D] (the layout of PyTorch's usual tensors and of
 *      FlashAttention's API), with random gaps after each row, head and batch
 *      entry. Inputs are scattered into their strided buffers; every byte of the
 *      strided buffers that is no element (the gaps), and every output byte, starts
 *      as a canary;
 *   3. each host backend (REF, CPU) runs forward and backward on the strided
 *      tensors: the gathered o, lse, dq, dk, dv, dconv_w must be memcmp-equal to
 *      step 1, and every gap byte must still hold its canary.
 * A backend that refuses strides (TA_ERR_UNSUPPORTED) is reported, and the test
 * fails unless TA_STRIDES_ALLOW_UNSUPPORTED=1 (no silent pass).
 * Usage: test_strides [--quick] [--problems N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"

enum { X_Q, X_K, X_V, X_O, X_DO, X_DQ, X_DK, X_DV, X_COUNT };
static const char *const x_name[X_COUNT] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};

/* One tensor in a strided buffer: its layout (test_util.h) and the bytes. */
typedef struct strided {
    ta_test_layout lay;
    unsigned char *buf; /* [lay.extent * eb], gaps hold the canary */
} strided;

static void make_strided(ta_rng *r, strided *x, int32_t n_b, int32_t n_h, int32_t n_s,
                         int32_t dim, size_t eb) {
    ta_test_layout_make(r, &x->lay, n_b, n_h, n_s, dim, 1);
    x->buf = (unsigned char *)ta_test_alloc(x->lay.extent * eb);
    ta_canary_fill(x->buf, x->lay.extent * eb);
}

static void free_strided(strided *x) {
    ta_test_free(x->buf);
    ta_test_layout_free(&x->lay);
}

/* Every byte of a gap still holds the canary. */
static int gaps_intact(const strided *x, size_t eb) {
    return ta_test_layout_bad_gaps(x->buf, &x->lay, eb, TA_CANARY_BYTE) == 0;
}

static int g_unsupported, g_ran_backend[2];

/* Steps 2-3 for one backend: 1 on a refusal it is allowed to make. */
static void run_backend(ta_rng *r, const tcase *tc, ta_backend be, const run_out *want) {
    const ta_problem *p = &tc->p;
    const size_t eb = tc->eb;
    const int32_t B = p->batch, H = p->heads_q, Hk = p->heads_kv;
    strided x[X_COUNT];
    const size_t n_qo = tc->n_q > tc->n_o ? tc->n_q : tc->n_o;
    const size_t n_kv = tc->n_k > tc->n_v ? tc->n_k : tc->n_v;
    void *dense = ta_test_alloc((n_qo > n_kv ? n_qo : n_kv) * eb);
    float *lse = (float *)ta_test_alloc(tc->n_lse * sizeof(float));
    float *dw = tc->n_w ? (float *)ta_test_alloc(tc->n_w * sizeof(float)) : NULL;
    size_t ws_bytes = 0, ws2 = 0;
    void *ws;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_status st;
    char desc[200];
    int i;
    ta_oc_describe(tc, desc, sizeof desc);
    make_strided(r, &x[X_Q], B, H, p->seq_q, p->head_dim, eb);
    make_strided(r, &x[X_K], B, Hk, p->seq_k, p->head_dim, eb);
    make_strided(r, &x[X_V], B, Hk, p->seq_k, p->head_dim_v, eb);
    make_strided(r, &x[X_O], B, H, p->seq_q, p->head_dim_v, eb);
    make_strided(r, &x[X_DO], B, H, p->seq_q, p->head_dim_v, eb);
    make_strided(r, &x[X_DQ], B, H, p->seq_q, p->head_dim, eb);
    make_strided(r, &x[X_DK], B, Hk, p->seq_k, p->head_dim, eb);
    make_strided(r, &x[X_DV], B, Hk, p->seq_k, p->head_dim_v, eb);
    ta_test_layout_scatter(x[X_Q].buf, tc->q, &x[X_Q].lay, eb);
    ta_test_layout_scatter(x[X_K].buf, tc->k, &x[X_K].lay, eb);
    ta_test_layout_scatter(x[X_V].buf, tc->v, &x[X_V].lay, eb);
    ta_test_layout_scatter(x[X_DO].buf, tc->d_o, &x[X_DO].lay, eb);
    (void)ta_fwd_workspace_size(p, be, &ws_bytes);
    (void)ta_bwd_workspace_size(p, be, &ws2);
    ws = ta_test_alloc((ws_bytes > ws2 ? ws_bytes : ws2) + 64);

    /* forward on strided q, k, v into a strided o */
    memset(&fa, 0, sizeof fa);
    fa.q = x[X_Q].buf, fa.k = x[X_K].buf, fa.v = x[X_V].buf, fa.o = x[X_O].buf;
    fa.lse = lse, fa.conv_w = tc->conv_w, fa.seqlens_k = tc->seqlens;
    fa.q_strides = x[X_Q].lay.st, fa.k_strides = x[X_K].lay.st, fa.v_strides = x[X_V].lay.st;
    fa.o_strides = x[X_O].lay.st;
    ta_poison(lse, tc->n_lse * sizeof(float));
    st = ta_fwd(p, be, &fa, ws, ws_bytes, NULL);
    if (st == TA_ERR_UNSUPPORTED && be != TA_BACKEND_REF) {
        g_unsupported++;
        goto done;
    }
    g_ran_backend[be == TA_BACKEND_REF ? 0 : 1]++;
    TA_CHECK(st == TA_OK, "%s fwd on %s: %s", be == TA_BACKEND_REF ? "REF" : "CPU", desc,
             ta_status_string(st));
    if (st != TA_OK) goto done;
    ta_test_layout_gather(dense, x[X_O].buf, &x[X_O].lay, eb);
    TA_CHECK(memcmp(dense, want->o, tc->n_o * eb) == 0, "%s strided o != contiguous o: %s",
             be == TA_BACKEND_REF ? "REF" : "CPU", desc);
    TA_CHECK(memcmp(lse, want->lse, tc->n_lse * sizeof(float)) == 0,
             "%s strided lse != contiguous lse: %s", be == TA_BACKEND_REF ? "REF" : "CPU", desc);
    TA_CHECK(gaps_intact(&x[X_O], eb), "%s fwd wrote into o's gaps: %s",
             be == TA_BACKEND_REF ? "REF" : "CPU", desc);

    /* backward on strided q, k, v, o, d_o into strided dq, dk, dv */
    memset(&ba, 0, sizeof ba);
    ba.q = x[X_Q].buf, ba.k = x[X_K].buf, ba.v = x[X_V].buf, ba.o = x[X_O].buf;
    ba.d_o = x[X_DO].buf, ba.lse = lse, ba.conv_w = tc->conv_w, ba.seqlens_k = tc->seqlens;
    ba.dq = x[X_DQ].buf, ba.dk = x[X_DK].buf, ba.dv = x[X_DV].buf, ba.dconv_w = dw;
    ba.q_strides = x[X_Q].lay.st, ba.k_strides = x[X_K].lay.st, ba.v_strides = x[X_V].lay.st;
    ba.o_strides = x[X_O].lay.st, ba.d_o_strides = x[X_DO].lay.st, ba.dq_strides = x[X_DQ].lay.st;
    ba.dk_strides = x[X_DK].lay.st, ba.dv_strides = x[X_DV].lay.st;
    if (dw) ta_poison(dw, tc->n_w * sizeof(float));
    st = ta_bwd(p, be, &ba, ws, ws2, NULL);
    TA_CHECK(st == TA_OK, "bwd on %s: %s", desc, ta_status_string(st));
    if (st != TA_OK) goto done;
    ta_test_layout_gather(dense, x[X_DQ].buf, &x[X_DQ].lay, eb);
    TA_CHECK(memcmp(dense, want->dq, tc->n_q * eb) == 0, "strided dq differs: %s", desc);
    ta_test_layout_gather(dense, x[X_DK].buf, &x[X_DK].lay, eb);
    TA_CHECK(memcmp(dense, want->dk, tc->n_k * eb) == 0, "strided dk differs: %s", desc);
    ta_test_layout_gather(dense, x[X_DV].buf, &x[X_DV].lay, eb);
    TA_CHECK(memcmp(dense, want->dv, tc->n_v * eb) == 0, "strided dv differs: %s", desc);
    if (dw)
        TA_CHECK(memcmp(dw, want->dw, tc->n_w * sizeof(float)) == 0, "dconv_w differs: %s",
                 desc);
    for (i = 0; i < X_COUNT; ++i)
        TA_CHECK(gaps_intact(&x[i], eb), "gaps of %s written (%s layout): %s", x_name[i],
                 x[i].lay.bshd ? "BSHD" : "BHSD", desc);
done:
    for (i = 0; i < X_COUNT; ++i)
        free_strided(&x[i]);
    ta_test_free(dense);
    ta_test_free(lse);
    ta_test_free(dw);
    ta_test_free(ws);
}

/* Contiguous reference outputs of tc (step 1). */
static int run_reference(const tcase *tc, run_out *out) {
    const ta_problem *p = &tc->p;
    size_t fb = 0, bb = 0;
    void *ws;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_status st;
    (void)ta_fwd_workspace_size(p, TA_BACKEND_REF, &fb);
    (void)ta_bwd_workspace_size(p, TA_BACKEND_REF, &bb);
    ws = ta_test_alloc((fb > bb ? fb : bb) + 64);
    memset(&fa, 0, sizeof fa);
    fa.q = tc->q, fa.k = tc->k, fa.v = tc->v, fa.o = out->o, fa.lse = out->lse;
    fa.conv_w = tc->conv_w, fa.seqlens_k = tc->seqlens;
    st = ta_fwd(p, TA_BACKEND_REF, &fa, ws, fb, NULL);
    if (st == TA_OK) {
        memset(&ba, 0, sizeof ba);
        ba.q = tc->q, ba.k = tc->k, ba.v = tc->v, ba.o = out->o, ba.d_o = tc->d_o;
        ba.lse = out->lse, ba.conv_w = tc->conv_w, ba.seqlens_k = tc->seqlens;
        ba.dq = out->dq, ba.dk = out->dk, ba.dv = out->dv, ba.dconv_w = out->dw;
        st = ta_bwd(p, TA_BACKEND_REF, &ba, ws, bb, NULL);
    }
    ta_test_free(ws);
    TA_CHECK(st == TA_OK, "reference: %s", ta_status_string(st));
    return st == TA_OK;
}

static void random_problem(ta_rng *r, tcase *tc) {
    ta_problem *p = &tc->p;
    static const int32_t dim_cuts[3] = {40, 70, 90};
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    if (p->batch > 3) p->batch = 3;
    if (p->head_dim > 96) p->head_dim = 96;
    if (p->head_dim_v > 96) p->head_dim_v = 96;
    p->seq_q = ta_rng_int(r, 0, 5) == 0 ? 1 : ta_rng_int(r, 1, 90);
    p->seq_k = ta_rng_int(r, 0, 3) == 0 ? p->seq_q : ta_rng_int(r, 1, 90);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (ta_rng_int(r, 0, 3) == 0) { /* MTA: causal, small conv, tiles that fit its halos */
        p->flags = TA_CAUSAL;
        p->conv_q = ta_rng_int(r, 1, 4);
        p->conv_k = 2 * ta_rng_int(r, 0, 3) + 1;
        p->block_q = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 2 * p->conv_q + 8, 40);
        p->block_k = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 2 * p->conv_k + 8, 40);
    } else if (ta_rng_int(r, 0, 1)) {
        p->block_q = ta_rng_int(r, TA_BLOCK_MIN, 40);
        p->block_k = ta_rng_int(r, TA_BLOCK_MIN, 40);
    }
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 30);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_strides");
    int n_problems = 200, i, quick = 0;
    const char *allow = getenv("TA_STRIDES_ALLOW_UNSUPPORTED");
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1, n_problems = 12;
        if (strcmp(argv[i], "--problems") == 0 && i + 1 < argc) n_problems = atoi(argv[++i]);
    }
    (void)quick;
    ta_rng_seed(&r, seed);
    for (i = 0; i < n_problems; ++i) {
        tcase tc;
        run_out want;
        random_problem(&r, &tc);
        ta_oc_make_buffers(&r, &tc);
        if (tc.conv_w) ta_fill_uniform(&r, tc.conv_w, TA_F32, tc.n_w, -0.4f, 0.4f);
        ta_oc_alloc_out(&tc, &want);
        if (run_reference(&tc, &want)) {
            run_backend(&r, &tc, TA_BACKEND_REF, &want);
            run_backend(&r, &tc, TA_BACKEND_CPU, &want);
        }
        ta_oc_free_out(&want);
        ta_oc_free_case(&tc);
    }
    printf("test_strides: %d problems; strided runs REF %d, CPU %d; CPU refused %d\n", n_problems,
           g_ran_backend[0], g_ran_backend[1], g_unsupported);
    TA_CHECK(g_ran_backend[0] == n_problems, "REF ran %d of %d", g_ran_backend[0], n_problems);
    TA_CHECK(g_unsupported == 0 || (allow && strcmp(allow, "1") == 0),
             "the CPU backend refused %d strided problems", g_unsupported);
    return ta_test_finish("test_strides");
}
