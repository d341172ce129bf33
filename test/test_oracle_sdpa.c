/*
 * Reference SDPA (forward and backward) against the float64 oracle.
 *
 *   1. finite differences check the oracle's own gradients (double)
 *   2. many random problems (fresh seed, printed): odd and prime lengths, S = 1,
 *      S_q != S_k both ways, causal or not, seqlens_k (0, partial, full), GQA,
 *      head dims 1..256, every dtype, default and explicit tiles. Per problem:
 *        - outputs poisoned, workspace from the size query (64-aligned, poisoned)
 *        - forward and backward vs the oracle: max|ref - oracle| / max|oracle|
 *          per tensor (reported), and elementwise |ref - oracle| <= tol * magnitude
 *          (gated; see tol below)
 *          (f32: oracle on the inputs; f16/bf16: oracle on the rounded inputs
 *          and, for D_i, the stored rounded o: what remains is f32 arithmetic
 *          plus one output rounding)
 *        - fully masked rows: o = 0, lse = -inf, dq = 0; unseen keys: dk = dv = 0
 *        - determinism: a second call, workspace filled with other garbage,
 *          is memcmp-equal; lse = NULL leaves o unchanged
 *        - the tile trace: forward pairs are exactly the k_end schedule; the
 *          backward's dk/dv pass and dq pass visit the same (h, q tile, k tile) set
 *        - another block_q/block_k: bits may change, agreement must not
 *   3. the maxima per dtype and tensor are printed at the end.
 * --quick: a few small problems (valgrind, sanitizers).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracle.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

enum { T_O, T_LSE, T_DQ, T_DK, T_DV, T_COUNT };
static const char *const tensor_name[T_COUNT] = {"o", "lse", "dq", "dk", "dv"};
static const char *const dtype_name[3] = {"f32", "f16", "bf16"};

/*
 * Two error measures per tensor:
 *   rel  = max_i |ref_i - oracle_i| / max(max_i |oracle_i|, tiny)   (reported)
 *   cond = max_i (|ref_i - oracle_i| - rounding_i) / mag_i           (gated)
 * mag_i >= |oracle_i| is the first-order error scale of element i (oracle.h:
 * the same sums over absolute values, probabilities weighted by the size of
 * their exponent). A fixed-order f32 evaluation errs by a modest multiple of
 * u * mag_i, so `cond` stays small however much an element cancels, while
 * `rel` can be large on a tensor whose every entry cancels (a row that sees two
 * keys with dP_0 ~ dP_1, say). rounding_i is the one rounding of the result to
 * the storage type: u_dt |oracle_i| (f16 2^-11, bf16 2^-8; lse is always f32),
 * plus for f16 one subnormal step 2^-24 (below 2^-14 f16 rounds in absolute
 * steps). The gate, per element:
 *     |ref_i - oracle_i| <= u_dt |oracle_i| + floor_dt + tol_arith * mag_i
 * and elements with mag_i = 0 (masked) must be exactly equal.
 */
static const double tol_arith[T_COUNT] = {2e-6, 2e-6, 2e-6, 2e-6, 2e-6}; /* o lse dq dk dv */
static const double u_dtype[3] = {0.0, 4.8828125e-04 /* 2^-11 */, 3.90625e-03 /* 2^-8 */};
static const double floor_dtype[3] = {0.0, 5.9604644775390625e-08 /* 2^-24 */, 0.0};

/* Largest errors seen, per dtype and tensor. */
typedef struct err_max {
    double rel[T_COUNT], cond[T_COUNT];
} err_max;
static err_max worst[3], worst_block_change[3];
static long n_problems[3], n_block_bits_changed, n_block_runs;
/* FNV-1a over every reference output: equal seeds must give equal digests
 * under every compiler and optimisation level (the exactness contract). */
static uint64_t digest = 0xcbf29ce484222325ull;

static void digest_bytes(const void *buf, size_t n) {
    const unsigned char *b = (const unsigned char *)buf;
    size_t i;
    for (i = 0; i < n; ++i)
        digest = (digest ^ b[i]) * 0x100000001b3ull;
}

/* One random problem and its buffers. */
typedef struct tcase {
    ta_problem p;
    int32_t *seqlens; /* [B] or NULL */
    size_t n_q, n_k, n_v, n_o, n_lse, eb;
    void *q, *k, *v, *d_o;                              /* inputs, storage dtype */
    void *o, *dq, *dk, *dv;                             /* outputs */
    float *lse;                                         /* [B, H, S_q] */
    double *oq, *ok, *ov, *odo;                         /* widened inputs for the oracle */
    double *or_o, *or_lse, *or_dq, *or_dk, *or_dv;      /* oracle results */
    double *mag_o, *mag_lse, *mag_dq, *mag_dk, *mag_dv; /* their magnitudes */
} tcase;

/* ---------------------------------------------------------------------- */
/* Comparison                                                              */
/* ---------------------------------------------------------------------- */

static void describe(const tcase *tc, char *buf, size_t n) {
    const ta_problem *p = &tc->p;
    snprintf(buf, n, "B=%d H=%d Hkv=%d Sq=%d Sk=%d D=%d Dv=%d %s %s bq=%d bk=%d scale=%g%s",
             p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k, p->head_dim, p->head_dim_v,
             dtype_name[p->dtype], (p->flags & TA_CAUSAL) ? "causal" : "full", p->block_q,
             p->block_k, (double)p->scale, tc->seqlens ? " seqlens" : "");
}

/* Both measures for one tensor (see tol_arith); prints the first misses. */
static void compare(const tcase *tc, int tensor, const void *ref, ta_dtype dt, const double *orc,
                    const double *mag, size_t n, double *rel, double *cond) {
    const double t = tol_arith[tensor], u = u_dtype[dt], fl = floor_dtype[dt];
    double max_or = 0.0, max_diff = 0.0, max_cond = 0.0;
    size_t i;
    int misses = 0;
    char desc[256];
    for (i = 0; i < n; ++i)
        if (isfinite(orc[i]) && fabs(orc[i]) > max_or) max_or = fabs(orc[i]);
    for (i = 0; i < n; ++i) {
        const double x = ta_get(ref, dt, i), diff = fabs(x - orc[i]);
        const double arith = (diff - u * fabs(orc[i]) - fl) / mag[i];
        if (isinf(orc[i]) || mag[i] == 0.0) { /* masked: exact */
            if (!(x == orc[i]) && misses++ < 3)
                TA_CHECK(0, "%s[%zu] = %g, oracle %g (masked)", tensor_name[tensor], i, x, orc[i]);
            continue;
        }
        if (!(arith <= t) && misses++ < 3) {
            describe(tc, desc, sizeof desc);
            TA_CHECK(0, "%s[%zu]: ref %.9g oracle %.9g magnitude %.3g: error %.3g > %.3g [%s]",
                     tensor_name[tensor], i, x, orc[i], mag[i], arith, t, desc);
        }
        if (!(diff <= max_diff) && !isnan(max_diff)) max_diff = diff; /* NaN sticks */
        if (!(arith <= max_cond) && !isnan(max_cond)) max_cond = arith;
    }
    *rel = max_diff / (max_or > 1e-30 ? max_or : 1e-30);
    *cond = max_cond;
}

/* ---------------------------------------------------------------------- */
/* Random problems                                                         */
/* ---------------------------------------------------------------------- */

static int32_t pick_len(ta_rng *r, int32_t max_len) {
    static const int32_t primes[] = {2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 127, 131, 251, 257, 509};
    const int32_t c = ta_rng_int(r, 0, 99);
    int32_t len;
    if (c < 12) return 1;
    if (c < 32) {
        do
            len = primes[ta_rng_int(r, 0, (int32_t)(sizeof primes / sizeof primes[0]) - 1)];
        while (len > max_len && len > 2);
        return len < max_len ? len : max_len;
    }
    if (c < 52)
        len = ta_rng_int(r, 2, 17);
    else
        len = ta_rng_int(r, 1, max_len);
    return len < max_len ? len : max_len;
}

static int32_t pick_dim(ta_rng *r) {
    static const int32_t common[] = {32, 64, 96, 128};
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 45) return ta_rng_int(r, 1, 16);
    if (c < 65) return common[ta_rng_int(r, 0, 3)];
    if (c < 90) return ta_rng_int(r, 1, 256);
    return ta_rng_int(r, 0, 1) ? 256 : 255;
}

static int32_t pick_block(ta_rng *r) {
    return ta_rng_int(r, 0, 99) < 35 ? 0 : (int32_t)1 << ta_rng_int(r, 3, 8);
}

/* Random problem whose work B*H*S_q*S_k*(D+D_v) stays under `work`. */
static void random_problem(ta_rng *r, tcase *tc, double work) {
    ta_problem *p = &tc->p;
    double max_len;
    int32_t b;
    memset(tc, 0, sizeof *tc);
    p->batch = ta_rng_int(r, 0, 9) == 0 ? 3 : ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = pick_dim(r);
    p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? p->head_dim : pick_dim(r);
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    max_len = sqrt(work / ((double)p->batch * p->heads_q * (p->head_dim + p->head_dim_v)));
    max_len = max_len < 2.0 ? 2.0 : (max_len > 520.0 ? 520.0 : max_len);
    p->seq_q = pick_len(r, (int32_t)max_len);
    p->seq_k = ta_rng_int(r, 0, 9) < 3 ? p->seq_q : pick_len(r, (int32_t)max_len);
    p->block_q = pick_block(r);
    p->block_k = pick_block(r);
    if (ta_rng_int(r, 0, 9) < 3) /* explicit scale, sometimes negative */
        p->scale = ta_rng_uniform(r, ta_rng_int(r, 0, 9) == 0 ? -2.0f : 0.25f, 2.0f) /
                   sqrtf((float)p->head_dim);
    if (ta_rng_int(r, 0, 9) < 4) {
        tc->seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(r, 0, 99);
            tc->seqlens[b] = c < 15 ? 0 : c < 40 ? p->seq_k : ta_rng_int(r, 1, p->seq_k);
        }
    }
}

/* Allocate and fill the inputs; widen them for the oracle. */
static void make_buffers(ta_rng *r, tcase *tc) {
    const ta_problem *p = &tc->p;
    const float a = ta_rng_uniform(r, 0.5f, 2.5f); /* q, k range: score spread */
    tc->eb = ta_dtype_size(p->dtype);
    tc->n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    tc->n_q = tc->n_lse * (size_t)p->head_dim;
    tc->n_o = tc->n_lse * (size_t)p->head_dim_v;
    tc->n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
    tc->n_v = tc->n_k / (size_t)p->head_dim * (size_t)p->head_dim_v;
    tc->q = ta_test_alloc(tc->n_q * tc->eb);
    tc->k = ta_test_alloc(tc->n_k * tc->eb);
    tc->v = ta_test_alloc(tc->n_v * tc->eb);
    tc->d_o = ta_test_alloc(tc->n_o * tc->eb);
    tc->o = ta_test_alloc(tc->n_o * tc->eb);
    tc->dq = ta_test_alloc(tc->n_q * tc->eb);
    tc->dk = ta_test_alloc(tc->n_k * tc->eb);
    tc->dv = ta_test_alloc(tc->n_v * tc->eb);
    tc->lse = (float *)ta_test_alloc(tc->n_lse * sizeof(float));
    ta_fill_uniform(r, tc->q, p->dtype, tc->n_q, -a, a);
    ta_fill_uniform(r, tc->k, p->dtype, tc->n_k, -a, a);
    ta_fill_uniform(r, tc->v, p->dtype, tc->n_v, -1.0f, 1.0f);
    ta_fill_uniform(r, tc->d_o, p->dtype, tc->n_o, -1.0f, 1.0f);
    tc->oq = ta_oracle_widen(tc->q, p->dtype, tc->n_q);
    tc->ok = ta_oracle_widen(tc->k, p->dtype, tc->n_k);
    tc->ov = ta_oracle_widen(tc->v, p->dtype, tc->n_v);
    tc->odo = ta_oracle_widen(tc->d_o, p->dtype, tc->n_o);
    tc->or_o = (double *)malloc(tc->n_o * sizeof(double));
    tc->or_lse = (double *)malloc(tc->n_lse * sizeof(double));
    tc->or_dq = (double *)malloc(tc->n_q * sizeof(double));
    tc->or_dk = (double *)malloc(tc->n_k * sizeof(double));
    tc->or_dv = (double *)malloc(tc->n_v * sizeof(double));
    tc->mag_o = (double *)malloc(tc->n_o * sizeof(double));
    tc->mag_lse = (double *)malloc(tc->n_lse * sizeof(double));
    tc->mag_dq = (double *)malloc(tc->n_q * sizeof(double));
    tc->mag_dk = (double *)malloc(tc->n_k * sizeof(double));
    tc->mag_dv = (double *)malloc(tc->n_v * sizeof(double));
}

static void free_case(tcase *tc) {
    void *const tf[] = {tc->q, tc->k, tc->v, tc->d_o, tc->o, tc->dq, tc->dk, tc->dv, tc->lse};
    double *const df[] = {tc->oq,      tc->ok,     tc->ov,     tc->odo,   tc->or_o,
                          tc->or_lse,  tc->or_dq,  tc->or_dk,  tc->or_dv, tc->mag_o,
                          tc->mag_lse, tc->mag_dq, tc->mag_dk, tc->mag_dv};
    size_t i;
    for (i = 0; i < sizeof tf / sizeof tf[0]; ++i)
        ta_test_free(tf[i]);
    for (i = 0; i < sizeof df / sizeof df[0]; ++i)
        free(df[i]);
    free(tc->seqlens);
}

/* ---------------------------------------------------------------------- */
/* Running the reference                                                   */
/* ---------------------------------------------------------------------- */

/* Outputs of one reference run (forward and backward). */
typedef struct run_out {
    void *o, *dq, *dk, *dv;
    float *lse;
} run_out;

/* Workspace of `bytes` (at least 64), 64-aligned, filled with garbage of the
 * given kind: 0 = 0xFF poison (NaN in every dtype), 1 = random bytes. */
static void *make_workspace(ta_rng *r, size_t bytes, int kind) {
    unsigned char *ws = (unsigned char *)ta_test_alloc(bytes ? bytes : 64);
    size_t i;
    if (kind == 0)
        ta_poison(ws, bytes);
    else
        for (i = 0; i < bytes; ++i)
            ws[i] = (unsigned char)ta_rng_u64(r);
    return ws;
}

/* Forward with problem p (tiles may differ from tc->p) into out->o, out->lse
 * (lse may be NULL), poisoned first. */
static void run_fwd(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                    ta_trace *tr) {
    size_t bytes = 0;
    void *ws;
    ta_fwd_args fa;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    ta_poison(out->o, tc->n_o * tc->eb);
    if (out->lse) ta_poison(out->lse, tc->n_lse * sizeof(float));
    TA_CHECK(ta_fwd_workspace_size(p, TA_BACKEND_REF, &bytes) == TA_OK, "fwd size");
    fa.q = tc->q, fa.k = tc->k, fa.v = tc->v, fa.seqlens_k = tc->seqlens;
    fa.o = out->o, fa.lse = out->lse, fa.trace = tr;
    ws = make_workspace(r, bytes, ws_kind);
    st = ta_fwd(p, TA_BACKEND_REF, &fa, ws, bytes, NULL);
    TA_CHECK(st == TA_OK, "ta_fwd: %s", ta_status_string(st));
    ta_test_free(ws);
}

/* Backward with problem p from the forward outputs o, lse into out->dq, dk, dv,
 * poisoned first. */
static void run_bwd(ta_rng *r, const tcase *tc, const ta_problem *p, const void *o,
                    const float *lse, run_out *out, int ws_kind, ta_trace *tr) {
    size_t bytes = 0;
    void *ws;
    ta_bwd_args ba;
    ta_status st;
    memset(&ba, 0, sizeof ba);
    ta_poison(out->dq, tc->n_q * tc->eb);
    ta_poison(out->dk, tc->n_k * tc->eb);
    ta_poison(out->dv, tc->n_v * tc->eb);
    TA_CHECK(ta_bwd_workspace_size(p, TA_BACKEND_REF, &bytes) == TA_OK, "bwd size");
    ba.q = tc->q, ba.k = tc->k, ba.v = tc->v, ba.o = o, ba.d_o = tc->d_o;
    ba.lse = lse, ba.seqlens_k = tc->seqlens, ba.trace = tr;
    ba.dq = out->dq, ba.dk = out->dk, ba.dv = out->dv;
    ws = make_workspace(r, bytes, ws_kind);
    st = ta_bwd(p, TA_BACKEND_REF, &ba, ws, bytes, NULL);
    TA_CHECK(st == TA_OK, "ta_bwd: %s", ta_status_string(st));
    ta_test_free(ws);
}

/* Forward, then backward from its o and lse: a training step. */
static void run_ref(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                    ta_trace *tr_fwd, ta_trace *tr_bwd) {
    run_fwd(r, tc, p, out, ws_kind, tr_fwd);
    run_bwd(r, tc, p, out->o, out->lse, out, ws_kind, tr_bwd);
}

static void digest_outputs(const tcase *tc, const run_out *out) {
    digest_bytes(out->o, tc->n_o * tc->eb);
    digest_bytes(out->lse, tc->n_lse * sizeof(float));
    digest_bytes(out->dq, tc->n_q * tc->eb);
    digest_bytes(out->dk, tc->n_k * tc->eb);
    digest_bytes(out->dv, tc->n_v * tc->eb);
}

static void alloc_out(const tcase *tc, run_out *out) {
    out->o = ta_test_alloc(tc->n_o * tc->eb);
    out->dq = ta_test_alloc(tc->n_q * tc->eb);
    out->dk = ta_test_alloc(tc->n_k * tc->eb);
    out->dv = ta_test_alloc(tc->n_v * tc->eb);
    out->lse = (float *)ta_test_alloc(tc->n_lse * sizeof(float));
}

static void free_out(run_out *out) {
    ta_test_free(out->o);
    ta_test_free(out->dq);
    ta_test_free(out->dk);
    ta_test_free(out->dv);
    ta_test_free(out->lse);
}

/* Oracle forward on the (rounded) inputs, then backward with D_i from the
 * stored o for f16/bf16 (exact D_i for f32). */
static void run_oracle(tcase *tc) {
    ta_oracle_in in;
    double *o_stored = NULL;
    memset(&in, 0, sizeof in);
    in.q = tc->oq, in.k = tc->ok, in.v = tc->ov, in.seqlens_k = tc->seqlens, in.d_o = tc->odo;
    TA_CHECK(ta_oracle_fwd(&tc->p, &in, tc->or_o, tc->or_lse) == 0, "oracle fwd");
    TA_CHECK(ta_oracle_fwd_mag(&tc->p, &in, tc->mag_o, tc->mag_lse) == 0, "oracle fwd mag");
    if (tc->p.dtype != TA_F32) o_stored = ta_oracle_widen(tc->o, tc->p.dtype, tc->n_o);
    in.o = o_stored;
    TA_CHECK(ta_oracle_bwd(&tc->p, &in, tc->or_dq, tc->or_dk, tc->or_dv) == 0, "oracle bwd");
    TA_CHECK(ta_oracle_bwd_mag(&tc->p, &in, tc->mag_dq, tc->mag_dk, tc->mag_dv) == 0,
             "oracle bwd mag");
    free(o_stored);
}

/* Compare a run with the oracle; fold the errors into acc (max). */
static void compare_all(const tcase *tc, const run_out *out, err_max *acc) {
    const ta_dtype dt = tc->p.dtype;
    err_max e;
    int i;
    compare(tc, T_O, out->o, dt, tc->or_o, tc->mag_o, tc->n_o, &e.rel[T_O], &e.cond[T_O]);
    compare(tc, T_LSE, out->lse, TA_F32, tc->or_lse, tc->mag_lse, tc->n_lse, &e.rel[T_LSE],
            &e.cond[T_LSE]);
    compare(tc, T_DQ, out->dq, dt, tc->or_dq, tc->mag_dq, tc->n_q, &e.rel[T_DQ], &e.cond[T_DQ]);
    compare(tc, T_DK, out->dk, dt, tc->or_dk, tc->mag_dk, tc->n_k, &e.rel[T_DK], &e.cond[T_DK]);
    compare(tc, T_DV, out->dv, dt, tc->or_dv, tc->mag_dv, tc->n_v, &e.rel[T_DV], &e.cond[T_DV]);
    for (i = 0; i < T_COUNT; ++i) {
        if (!(e.rel[i] <= acc->rel[i]) && !isnan(acc->rel[i])) acc->rel[i] = e.rel[i];
        if (!(e.cond[i] <= acc->cond[i]) && !isnan(acc->cond[i])) acc->cond[i] = e.cond[i];
    }
}

/* ---------------------------------------------------------------------- */
/* Structural checks                                                       */
/* ---------------------------------------------------------------------- */

/* Rows that see no key: o = 0, lse = -inf, dq = 0 exactly. Keys no row sees
 * (j >= key_len; under the bottom-right causal mask the last row sees every
 * key below key_len): dk = dv = 0 exactly. */
static void check_masked(const tcase *tc, const run_out *out) {
    const ta_problem *p = &tc->p;
    int32_t b, h, r, j;
    size_t x;
    for (b = 0; b < p->batch; ++b) {
        const int32_t key_len = tc->seqlens ? tc->seqlens[b] : p->seq_k;
        for (h = 0; h < p->heads_q; ++h)
            for (r = 0; r < p->seq_q; ++r) {
                const size_t row =
                    ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)r;
                int zero = 1;
                if (key_len > 0 && !((p->flags & TA_CAUSAL) && r + p->seq_k - p->seq_q < 0))
                    continue;
                for (x = 0; x < (size_t)p->head_dim_v; ++x)
                    zero &= ta_get(out->o, p->dtype, row * (size_t)p->head_dim_v + x) == 0.0;
                for (x = 0; x < (size_t)p->head_dim; ++x)
                    zero &= ta_get(out->dq, p->dtype, row * (size_t)p->head_dim + x) == 0.0;
                TA_CHECK(zero && out->lse[row] == -INFINITY, "masked row b=%d h=%d r=%d", b, h, r);
            }
        for (h = 0; h < p->heads_kv; ++h)
            for (j = key_len; j < p->seq_k; ++j) {
                const size_t row =
                    ((size_t)b * (size_t)p->heads_kv + (size_t)h) * (size_t)p->seq_k + (size_t)j;
                int zero = 1;
                for (x = 0; x < (size_t)p->head_dim; ++x)
                    zero &= ta_get(out->dk, p->dtype, row * (size_t)p->head_dim + x) == 0.0;
                for (x = 0; x < (size_t)p->head_dim_v; ++x)
                    zero &= ta_get(out->dv, p->dtype, row * (size_t)p->head_dim_v + x) == 0.0;
                TA_CHECK(zero, "unseen key b=%d hkv=%d j=%d: dk/dv not 0", b, h, j);
            }
    }
}

static int same_outputs(const tcase *tc, const run_out *a, const run_out *b) {
    return memcmp(a->o, b->o, tc->n_o * tc->eb) == 0 &&
           memcmp(a->lse, b->lse, tc->n_lse * sizeof(float)) == 0 &&
           memcmp(a->dq, b->dq, tc->n_q * tc->eb) == 0 &&
           memcmp(a->dk, b->dk, tc->n_k * tc->eb) == 0 &&
           memcmp(a->dv, b->dv, tc->n_v * tc->eb) == 0;
}

/* Forward trace: exactly the pairs (b, h, qt, kt < k_end) in loop order.
 * Backward: the dk/dv and dq passes visit the same set of (b, h, qt, kt). */
static void check_traces(const tcase *tc, const ta_trace *tf, const ta_trace *tb) {
    const ta_problem *p = &tc->p;
    ta_tiling t;
    int32_t bq, bk, b, h, qt, kt;
    size_t n = 0, i, cells;
    int *grid;
    ta_tiling_default_blocks(0, 0, &bq, &bk);
    if (p->block_q) bq = p->block_q;
    if (p->block_k) bk = p->block_k;
    if (ta_tiling_make(&t, p->seq_q, p->seq_k, bq, bk, 0, 0, (p->flags & TA_CAUSAL) != 0,
                       TA_TILING_FWD, 1) != TA_OK) {
        TA_CHECK(0, "ta_tiling_make failed");
        return;
    }
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (qt = 0; qt < t.num_q_tiles; ++qt)
                for (kt = 0; kt < ta_tile_k_end(&t, qt, tc->seqlens ? tc->seqlens[b] : p->seq_k);
                     ++kt, ++n) {
                    const ta_trace_entry *e = &tf->entries[n];
                    TA_CHECK(n < tf->count && e->batch == b && e->head == h && e->q_tile == qt &&
                                 e->k_tile == kt && e->pass == TA_PASS_FWD,
                             "fwd trace entry %zu", n);
                }
    TA_CHECK(n == tf->count, "fwd trace count %zu, expected %zu", tf->count, n);
    cells = (size_t)p->batch * (size_t)p->heads_q * (size_t)t.num_q_tiles * (size_t)t.num_k_tiles;
    grid = (int *)calloc(cells, sizeof(int));
    TA_CHECK(tb->count <= tb->capacity, "bwd trace overflow");
    for (i = 0; i < tb->count && i < tb->capacity; ++i) {
        const ta_trace_entry *e = &tb->entries[i];
        size_t c;
        if (e->batch < 0 || e->batch >= p->batch || e->head < 0 || e->head >= p->heads_q ||
            e->q_tile < 0 || e->q_tile >= t.num_q_tiles || e->k_tile < 0 ||
            e->k_tile >= t.num_k_tiles) {
            TA_CHECK(0, "bwd trace entry %zu out of range", i);
            continue;
        }
        c = (((size_t)e->batch * (size_t)p->heads_q + (size_t)e->head) * (size_t)t.num_q_tiles +
             (size_t)e->q_tile) *
                (size_t)t.num_k_tiles +
            (size_t)e->k_tile;
        grid[c] += e->pass == TA_PASS_BWD_DKDV ? 1 : e->pass == TA_PASS_BWD_DQ ? 16 : 256;
    }
    for (i = 0; i < cells; ++i)
        TA_CHECK(grid[i] == 0 || grid[i] == 17, "bwd trace cell %zu: %d", i, grid[i]);
    TA_CHECK(tb->count == 2 * n, "bwd trace count %zu, fwd %zu", tb->count, n);
    free(grid);
}

/* ---------------------------------------------------------------------- */
/* One problem                                                             */
/* ---------------------------------------------------------------------- */

/* Other tiles. The contract (DESIGN.md 3.5): only block_k may change bits,
 * and only the forward's (where the online softmax rescales); the backward's
 * sums run over full ranges in one accumulator, so from the same o and lse it
 * is bit-identical under any tiles. Agreement with the oracle must hold. */
static void check_other_blocks(ta_rng *r, tcase *tc, run_out *out2, const run_out *out) {
    const int32_t bk = tc->p.block_k ? tc->p.block_k : TA_BLOCK_DEFAULT;
    const int32_t bq = tc->p.block_q ? tc->p.block_q : TA_BLOCK_DEFAULT;
    ta_problem p2 = tc->p;
    /* step 1: another block_q only: forward bits unchanged */
    p2.block_q = bq == 8 ? 256 : bq / 2;
    run_fwd(r, tc, &p2, out2, 1, NULL);
    TA_CHECK(memcmp(out->o, out2->o, tc->n_o * tc->eb) == 0 &&
                 memcmp(out->lse, out2->lse, tc->n_lse * sizeof(float)) == 0,
             "forward bits depend on block_q");
    /* step 2: other tiles, backward from the same o and lse: bits unchanged */
    do {
        p2.block_q = (int32_t)1 << ta_rng_int(r, 3, 8);
        p2.block_k = (int32_t)1 << ta_rng_int(r, 3, 8);
    } while (p2.block_k == bk);
    run_bwd(r, tc, &p2, out->o, out->lse, out2, 1, NULL);
    TA_CHECK(memcmp(out->dq, out2->dq, tc->n_q * tc->eb) == 0 &&
                 memcmp(out->dk, out2->dk, tc->n_k * tc->eb) == 0 &&
                 memcmp(out->dv, out2->dv, tc->n_v * tc->eb) == 0,
             "backward bits depend on the tiles (same o, lse)");
    /* step 3: the forward with the other block_k: bits may change, agreement
     * may not (out2 now holds this o, lse and step 2's dq, dk, dv, which are
     * out's: the oracle's D_i was taken from out's stored o) */
    run_fwd(r, tc, &p2, out2, 1, NULL);
    compare_all(tc, out2, &worst_block_change[tc->p.dtype]);
    n_block_runs++;
    n_block_bits_changed += !same_outputs(tc, out, out2);
}

static void run_case(ta_rng *r, tcase *tc, int extra) {
    run_out out, out2;
    ta_trace tf, tb;
    out.o = tc->o, out.dq = tc->dq, out.dk = tc->dk, out.dv = tc->dv, out.lse = tc->lse;
    memset(&tf, 0, sizeof tf);
    memset(&tb, 0, sizeof tb);
    tf.capacity = tb.capacity = (size_t)1 << 16;
    tf.entries = (ta_trace_entry *)malloc(tf.capacity * sizeof(ta_trace_entry));
    tb.entries = (ta_trace_entry *)malloc(tb.capacity * sizeof(ta_trace_entry));
    /* step 1: reference (traced; poisoned workspace), oracle, comparison */
    run_ref(r, tc, &tc->p, &out, 0, &tf, &tb);
    run_oracle(tc);
    compare_all(tc, &out, &worst[tc->p.dtype]);
    digest_outputs(tc, &out);
    n_problems[tc->p.dtype]++;
    check_masked(tc, &out);
    if (tf.count <= tf.capacity && tb.count <= tb.capacity) check_traces(tc, &tf, &tb);
    /* step 2: determinism, other workspace garbage, no trace */
    alloc_out(tc, &out2);
    run_ref(r, tc, &tc->p, &out2, 1, NULL, NULL);
    TA_CHECK(same_outputs(tc, &out, &out2), "second run differs (determinism / workspace)");
    /* step 3: lse not wanted: o unchanged */
    {
        run_out no_lse = out2;
        no_lse.lse = NULL;
        run_fwd(r, tc, &tc->p, &no_lse, 1, NULL);
        TA_CHECK(memcmp(out.o, out2.o, tc->n_o * tc->eb) == 0, "o differs with lse = NULL");
    }
    /* step 4: other tiles */
    if (extra) check_other_blocks(r, tc, &out2, &out);
    free_out(&out2);
    free(tf.entries);
    free(tb.entries);
}

/* ---------------------------------------------------------------------- */
/* Finite differences on the oracle                                        */
/* ---------------------------------------------------------------------- */

static double fd_loss(const ta_problem *p, const ta_oracle_in *in, double *o) {
    const size_t n =
        (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->head_dim_v;
    double l = 0.0;
    size_t i;
    ta_oracle_fwd(p, in, o, NULL);
    for (i = 0; i < n; ++i)
        l += o[i] * in->d_o[i];
    return l;
}

/* Central differences of L = <dO, o> w.r.t. every element of x, against g. */
static double fd_tensor(const ta_problem *p, ta_oracle_in *in, double *x, const double *g, size_t n,
                        double *o) {
    const double step = 1e-5;
    double max_g = 0.0, max_err = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double x0 = x[i];
        double lp, lm, err;
        x[i] = x0 + step;
        lp = fd_loss(p, in, o);
        x[i] = x0 - step;
        lm = fd_loss(p, in, o);
        x[i] = x0;
        err = fabs((lp - lm) / (2.0 * step) - g[i]);
        if (err > max_err) max_err = err;
        if (fabs(g[i]) > max_g) max_g = fabs(g[i]);
    }
    return max_err / (max_g > 1e-30 ? max_g : 1e-30);
}

static void fd_check(ta_rng *r, const ta_problem *p, const int32_t *seqlens, double *worst_fd) {
    const size_t n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const size_t nq = n_lse * (size_t)p->head_dim, no = n_lse * (size_t)p->head_dim_v;
    const size_t nk = n_k * (size_t)p->head_dim, nv = n_k * (size_t)p->head_dim_v;
    double *q = (double *)malloc(nq * sizeof(double)), *k = (double *)malloc(nk * sizeof(double));
    double *v = (double *)malloc(nv * sizeof(double)), *d_o = (double *)malloc(no * sizeof(double));
    double *o = (double *)malloc(no * sizeof(double)), *dq = (double *)malloc(nq * sizeof(double));
    double *dk = (double *)malloc(nk * sizeof(double)), *dv = (double *)malloc(nv * sizeof(double));
    double e[3];
    ta_oracle_in in;
    size_t i;
    int t;
    for (i = 0; i < nq; ++i)
        q[i] = (double)ta_rng_uniform(r, -1.5f, 1.5f);
    for (i = 0; i < nk; ++i)
        k[i] = (double)ta_rng_uniform(r, -1.5f, 1.5f);
    for (i = 0; i < nv; ++i)
        v[i] = (double)ta_rng_uniform(r, -1.0f, 1.0f);
    for (i = 0; i < no; ++i)
        d_o[i] = (double)ta_rng_uniform(r, -1.0f, 1.0f);
    memset(&in, 0, sizeof in);
    in.q = q, in.k = k, in.v = v, in.d_o = d_o, in.seqlens_k = seqlens;
    TA_CHECK(ta_oracle_bwd(p, &in, dq, dk, dv) == 0, "oracle bwd");
    e[0] = fd_tensor(p, &in, q, dq, nq, o);
    e[1] = fd_tensor(p, &in, k, dk, nk, o);
    e[2] = fd_tensor(p, &in, v, dv, nv, o);
    for (t = 0; t < 3; ++t) {
        TA_CHECK(e[t] < 1e-6, "finite differences: d%c relative error %.3g", "qkv"[t], e[t]);
        if (e[t] > *worst_fd) *worst_fd = e[t];
    }
    free(q), free(k), free(v), free(d_o), free(o), free(dq), free(dk), free(dv);
}

/* Small problems: masked rows (S_q > S_k causal), seqlens 0 and partial, GQA. */
static void fd_suite(ta_rng *r, int quick) {
    static const int32_t shapes[][7] = {/* B, H, H_kv, S_q, S_k, D, D_v */
                                        {1, 2, 1, 4, 6, 3, 2},
                                        {2, 2, 2, 5, 3, 2, 3},
                                        {1, 3, 1, 3, 7, 4, 1},
                                        {2, 4, 2, 6, 6, 2, 2}};
    const int n = quick ? 1 : 4;
    double worst_fd = 0.0;
    int i, causal;
    for (i = 0; i < n; ++i)
        for (causal = 0; causal < 2; ++causal) {
            ta_problem p;
            int32_t seqlens[2] = {0, 0};
            memset(&p, 0, sizeof p);
            p.batch = shapes[i][0], p.heads_q = shapes[i][1], p.heads_kv = shapes[i][2];
            p.seq_q = shapes[i][3], p.seq_k = shapes[i][4];
            p.head_dim = shapes[i][5], p.head_dim_v = shapes[i][6];
            p.flags = causal ? TA_CAUSAL : 0u;
            p.scale = i == 2 ? 1.3f : 0.0f;
            seqlens[0] = p.seq_k - 1 - i % 2;
            seqlens[1] = i == 1 ? 0 : p.seq_k;
            fd_check(r, &p, (i % 2 || causal) ? seqlens : NULL, &worst_fd);
        }
    printf("finite differences on the oracle: %d problems, max relative error %.3g\n", 2 * n,
           worst_fd);
}

/* ---------------------------------------------------------------------- */

/* One row per dtype: cases (when counts is given), then the five tensors. */
static void print_table(const char *title, const err_max *e, int cond, const long *counts) {
    int dt, t;
    printf("  %s\n  %-5s %6s", title, "dtype", counts ? "cases" : "");
    for (t = 0; t < T_COUNT; ++t)
        printf(" %10s", tensor_name[t]);
    printf("\n");
    for (dt = 0; dt < 3; ++dt) {
        if (counts)
            printf("  %-5s %6ld", dtype_name[dt], counts[dt]);
        else
            printf("  %-5s %6s", dtype_name[dt], "");
        for (t = 0; t < T_COUNT; ++t)
            printf(" %10.3g", cond ? e[dt].cond[t] : e[dt].rel[t]);
        printf("\n");
    }
}

static void print_summary(double seconds) {
    printf("errors vs the float64 oracle (maxima over all problems):\n");
    print_table("max|ref - oracle| / max|oracle|, per tensor:", worst, 0, n_problems);
    print_table("max (|ref - oracle| - storage rounding) / magnitude, per element (gated):", worst,
                1, n_problems);
    printf("  forward with another block_k (%ld runs, %ld with different bits):\n", n_block_runs,
           n_block_bits_changed);
    print_table("max|ref - oracle| / max|oracle|:", worst_block_change, 0, NULL);
    print_table("max (|ref - oracle| - storage rounding) / magnitude (gated):", worst_block_change,
                1, NULL);
    printf("reference output digest %016llx (equal seeds: equal on every compiler)\n",
           (unsigned long long)digest);
    printf("time %.2f s\n", seconds);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int count = quick ? 6 : 300;
    const double work = quick ? 2e4 : 3e6;
    const clock_t t0 = clock();
    ta_rng rng;
    int i;
    ta_rng_seed(&rng, ta_test_seed("test_oracle_sdpa"));
    fd_suite(&rng, quick);
    for (i = 0; i < count; ++i) {
        tcase tc;
        random_problem(&rng, &tc, work);
        if (quick) { /* every dtype, both masks, in a handful of problems */
            tc.p.dtype = (ta_dtype)(i % 3);
            tc.p.flags = (i / 3) % 2 ? TA_CAUSAL : 0u;
        }
        make_buffers(&rng, &tc);
        run_case(&rng, &tc, i % 3 == 0);
        free_case(&tc);
    }
    print_summary((double)(clock() - t0) / CLOCKS_PER_SEC);
    return ta_test_finish("test_oracle_sdpa");
}
