/*
 * Stress cases (CTest label stress; issue 15): inputs at the edges of the
 * domain, on a few rows so the scalar reference stays at seconds.
 *
 * Each case runs forward, then backward from its own o and lse, on REF and on
 * the CPU backend (2 threads), and checks
 *   - REF == CPU bit for bit (o, lse, dq, dk, dv, dconv_w);
 *   - no NaN in any output (inputs are finite);
 *   - rows that see no key: o = 0, lse = -inf, dq = 0; keys no row sees:
 *     dk = dv = 0 (ta_oc_check_masked);
 *   - where affordable, the float64 oracle (test/oracle.h), elementwise:
 *       |x - oracle| <= u_dt |oracle| + floor_dt + tol * magnitude + abs_floor
 *     with tol = max(2e-6, S_k 2^-24), a loose gate kept from when the
 *     backward's sums (dq over keys, dk and dv over query rows) added one term
 *     at a time in f32 (an n u bound); the stated bounds grow with the tile
 *     or chunk size instead (docs/exactness.md section 11) and are checked as
 *     such by the long_2p25, long_2p26 and long_bwd cases; the 2e-6 of
 *     test_oracle_* holds for short rows only. abs_floor is 0 except for
 *     the subnormal case: below 2^-126 f32 rounds in absolute steps of 2^-149,
 *     one per rounding, so S_k + 2 of them.
 *
 *   case        what
 *   long        S_k = 65536: S_q = 1..4, D = 1..4, f32 and f16, causal or not; oracle
 *   logits      scores of magnitude up to 1e4 (q, k up to 100; the first K tile
 *               of a row at -1e4): finite, no NaN; oracle
 *   masked      seqlens_k = 0 (also with S_k = 65536), windows that see nothing,
 *               causal rows before the first key: o = 0, lse = -inf, dq = 0; oracle
 *   denormal    subnormal q, k, v (f32 and f16), subnormal scores; oracle
 *   head_dim    D = D_v = 1 and 256 (f32, bf16), D = 256 with D_v = 1; oracle
 *   conv_zero   MTA with all-zero conv kernels (1x1, 3x3, 6x11): uniform weights
 *               over the visible keys, dconv_w compared too; oracle
 *   long_2p25   issue 15 item 3's repro, S_k = 2^25 (S_q = 1, D = 1, uniform weights,
 *               v[j] = j % 2): o = 0.5, lse = 25 ln 2 within the forward's stated
 *               bound (docs/exactness.md section 11; closed form: the oracle would
 *               need gigabytes); fwd and bwd, REF == CPU. Before the compensated
 *               running sums the f32 sums stopped at 2^24 terms: o = 1.0, lse = 24 ln 2.
 *   long_2p26   S_k = 2^26, 2 rows, D = 1, D_v = 2, random weights in [e^-2, 1],
 *               block_k 64 and 8: o and lse within the stated bound of a streaming
 *               float64 softmax of the same f32 scores; forward only, REF == CPU
 *   long_bwd    the backward's long sums (issue 15 item 3): dq over S_k = 2^25 keys
 *               (S_q = 1), dk and dv over S_q = 2^25 query rows (S_k = 2), D = 1,
 *               f32, every term of one sign and the same size, against the exact
 *               sums of the library's own f32 terms within the stated bound
 *               (docs/exactness.md section 11); REF == CPU. One f32 running sum
 *               stops at 2^24 such terms: dq = 0.125 for 0.25, dk = 2^22 for 2^23,
 *               dv = 2^23 for 2^24 before the chunked sums.
 *   long_dw     MTA's dconv_w sums (issue 15 item 3): 1x1 conv (w = 1), D = 1, f32,
 *               8 x 8 tiles, every term of one sign: 2^18 K tiles of one Q tile
 *               (S_q = 1, S_k = 2^21: the R(b, qt) level, equal partials), and
 *               2^18 (b, Q tile) sums of one head (B = 2^17, S_q = S_k = 16: the
 *               merge, two alternating values), each against the exact sum of the
 *               library's own f32 terms within the stated bound (docs/exactness.md
 *               section 11); REF == CPU. One f32 running sum per level (the code
 *               before) is off by about 1e-3 relative at 2^18 such partials.
 *   nan_first_tile  issue 15 item 1's repro: a row whose first visited K tile
 *               overflows to -inf (scale 3e38, k = -2 in keys 0..7, 0 in 8..15,
 *               block_k 8): o = mean of v[8..15], lse = ln 8 (was NaN before the fix).
 *
 * Usage: test_stress [--case NAME]   (no --case: every case but the by-name ones,
 * which CTest runs one by one). Random values come from TA_SEED (printed).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracle_check.h"
#include "ta_internal.h"
#include "ta_math.h"
#include "test_util.h"
#include "tileattn.h"

#define STRESS_THREADS 2

/* One rounding to the storage type (as oracle_check.c): u_dt, and f16's subnormal step. */
static const double u_dtype[3] = {0.0, 4.8828125e-04 /* 2^-11 */, 3.90625e-03 /* 2^-8 */};
static const double floor_dtype[3] = {0.0, 5.9604644775390625e-08 /* 2^-24 */, 0.0};
#define F32_SUBNORMAL_STEP 1.4012984643248171e-45 /* 2^-149 */

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* Running one case                                                        */
/* ---------------------------------------------------------------------- */

/* NaN elements among n of a dt buffer. */
static size_t count_nan(const void *buf, ta_dtype dt, size_t n) {
    size_t i, bad = 0;
    for (i = 0; i < n; ++i)
        bad += isnan(ta_get(buf, dt, i)) != 0;
    return bad;
}

/* Largest (|x - oracle| - u_dt |oracle| - floor_dt - abs_floor) / magnitude of one
 * tensor; failures (> tol, or a masked element not exactly the oracle's) are
 * reported with the case name. */
static double oracle_cond(const char *name, const tcase *tc, int tensor, const void *x, ta_dtype dt,
                          size_t n, double tol, double abs_floor) {
    const double *orc = tc->orc[tensor], *mag = tc->mag[tensor];
    double worst = 0.0;
    size_t i;
    for (i = 0; i < n; ++i) {
        const double xi = ta_get(x, dt, i), diff = fabs(xi - orc[i]);
        double cond;
        if (isinf(orc[i]) || mag[i] == 0.0) {
            TA_CHECK(xi == orc[i], "%s: %s[%zu] = %g, oracle %g (masked)", name,
                     ta_oc_tensor_name[tensor], i, xi, orc[i]);
            continue;
        }
        cond = (diff - u_dtype[dt] * fabs(orc[i]) - floor_dtype[dt] - abs_floor) / mag[i];
        TA_CHECK(cond <= tol, "%s: %s[%zu] = %.9g, oracle %.9g, magnitude %.3g: %.3g > %.3g", name,
                 ta_oc_tensor_name[tensor], i, xi, orc[i], mag[i], cond, tol);
        if (cond > worst) worst = cond;
    }
    return worst;
}

typedef struct stress_opts {
    int oracle;       /* compare with the float64 oracle */
    double abs_floor; /* see the header */
} stress_opts;

/* The per-tensor views of one run: buffer, dtype, element count. */
static void run_views(const tcase *tc, const run_out *out, const void *buf[TA_OC_TENSORS],
                      ta_dtype dt[TA_OC_TENSORS], size_t n[TA_OC_TENSORS]) {
    const ta_dtype d = tc->p.dtype;
    buf[T_O] = out->o, buf[T_LSE] = out->lse, buf[T_DQ] = out->dq;
    buf[T_DK] = out->dk, buf[T_DV] = out->dv, buf[T_DW] = out->dw;
    dt[T_O] = d, dt[T_LSE] = TA_F32, dt[T_DQ] = d, dt[T_DK] = d, dt[T_DV] = d, dt[T_DW] = TA_F32;
    n[T_O] = tc->n_o, n[T_LSE] = tc->n_lse, n[T_DQ] = tc->n_q;
    n[T_DK] = tc->n_k, n[T_DV] = tc->n_v, n[T_DW] = tc->n_w;
}

/* REF and CPU, forward then backward; the checks of the header. */
static void run_case(const char *name, ta_rng *r, tcase *tc, const stress_opts *o) {
    const double t0 = now_s();
    const double tol = fmax(2e-6, (double)tc->p.seq_k * 0x1p-24);
    run_out ref, cpu;
    const void *buf[TA_OC_TENSORS];
    ta_dtype dt[TA_OC_TENSORS];
    size_t n[TA_OC_TENSORS];
    double cond[TA_OC_TENSORS] = {0};
    ta_status st_ref, st_cpu;
    int t;
    tc->p.num_threads = STRESS_THREADS;
    ta_oc_alloc_out(tc, &ref);
    ta_oc_alloc_out(tc, &cpu);
    st_ref = ta_oc_run_step_on(TA_BACKEND_REF, r, tc, &tc->p, &ref, 1);
    st_cpu = ta_oc_run_step_on(TA_BACKEND_CPU, r, tc, &tc->p, &cpu, 1);
    TA_CHECK(st_ref == TA_OK && st_cpu == TA_OK, "%s: status REF %d CPU %d", name, st_ref, st_cpu);
    if (st_ref == TA_OK && st_cpu == TA_OK) {
        TA_CHECK(ta_oc_same_outputs(tc, &ref, &cpu), "%s: CPU differs from REF", name);
        run_views(tc, &ref, buf, dt, n);
        for (t = 0; t < TA_OC_TENSORS; ++t)
            if (t != T_DW || tc->n_w)
                TA_CHECK(count_nan(buf[t], dt[t], n[t]) == 0, "%s: NaN in %s", name,
                         ta_oc_tensor_name[t]);
        ta_oc_check_masked(tc, &ref);
        if (o->oracle) {
            ta_oc_run_oracle(tc, ref.o);
            for (t = 0; t < TA_OC_TENSORS; ++t)
                if (t != T_DW || tc->n_w)
                    cond[t] = oracle_cond(name, tc, t, buf[t], dt[t], n[t], tol, o->abs_floor);
        }
    }
    printf("  %-10s B=%d H=%d S_q=%d S_k=%d D=%d D_v=%d %s%s%s: %.2f s; oracle error/mag "
           "o %.2g lse %.2g dq %.2g dk %.2g dv %.2g dw %.2g (gate %.2g)%s\n",
           name, tc->p.batch, tc->p.heads_q, tc->p.seq_q, tc->p.seq_k, tc->p.head_dim,
           tc->p.head_dim_v, ta_oc_dtype_name[tc->p.dtype],
           tc->p.flags & TA_CAUSAL ? " causal" : "", tc->p.conv_q ? " conv" : "", now_s() - t0,
           cond[T_O], cond[T_LSE], cond[T_DQ], cond[T_DK], cond[T_DV], cond[T_DW], tol,
           o->oracle ? "" : " (no oracle)");
    ta_oc_free_out(&ref);
    ta_oc_free_out(&cpu);
}

/* A problem of one batch and head with these sizes. */
static ta_problem shape(int32_t s_q, int32_t s_k, int32_t d, int32_t d_v, ta_dtype dtype) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads_q = 1, p.heads_kv = 1;
    p.seq_q = s_q, p.seq_k = s_k, p.head_dim = d, p.head_dim_v = d_v, p.dtype = dtype;
    return p;
}

/* Widen the inputs again after a case rewrote them. */
static void rewiden(tcase *tc) {
    const ta_dtype dt = tc->p.dtype;
    free(tc->oq), free(tc->ok), free(tc->ov), free(tc->odo), free(tc->ow);
    tc->oq = ta_oracle_widen(tc->q, dt, tc->n_q);
    tc->ok = ta_oracle_widen(tc->k, dt, tc->n_k);
    tc->ov = ta_oracle_widen(tc->v, dt, tc->n_v);
    tc->odo = ta_oracle_widen(tc->d_o, dt, tc->n_o);
    tc->ow = tc->n_w ? ta_oracle_widen(tc->conv_w, TA_F32, tc->n_w) : NULL;
}

/* Random inputs for p, then run (opts: oracle, no floor). */
static void run_random(const char *name, ta_rng *r, const ta_problem *p) {
    const stress_opts o = {1, 0.0};
    tcase tc;
    memset(&tc, 0, sizeof tc);
    tc.p = *p;
    ta_oc_make_buffers(r, &tc);
    rewiden(&tc);
    run_case(name, r, &tc, &o);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */
/* The cases                                                               */
/* ---------------------------------------------------------------------- */

static void case_long(ta_rng *r) {
    static const int32_t rows[][3] = {{1, 1, 1}, {2, 3, 2}, {4, 4, 4}, {4, 1, 3}}; /* S_q, D, D_v */
    size_t i;
    for (i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
        ta_problem p = shape(rows[i][0], 65536, rows[i][1], rows[i][2], TA_F32);
        run_random("long", r, &p);
        p.flags = TA_CAUSAL, p.dtype = TA_F16;
        run_random("long", r, &p);
    }
}

/* q in +-[50, 100], k in [-100, 100] / D: scores up to 1e4 in magnitude; the
 * first 256 keys of row 0 at about -1e4 (a first tile far below the rest). */
static void case_logits(ta_rng *r) {
    static const ta_dtype dts[2] = {TA_F32, TA_BF16};
    const stress_opts o = {1, 0.0};
    int32_t d, x;
    size_t i;
    for (x = 0; x < 2; ++x)
        for (d = 1; d <= 4; d += 3) {
            tcase tc;
            memset(&tc, 0, sizeof tc);
            tc.p = shape(4, 4096, d, 2, dts[x]);
            tc.p.scale = 1.0f;
            ta_oc_make_buffers(r, &tc);
            for (i = 0; i < tc.n_q; ++i)
                ta_store(tc.q, tc.p.dtype, i,
                         (ta_rng_u64(r) & 1 ? 1.0f : -1.0f) * ta_rng_uniform(r, 50.0f, 100.0f));
            for (i = 0; i < tc.n_k; ++i)
                ta_store(tc.k, tc.p.dtype, i, ta_rng_uniform(r, -100.0f, 100.0f) / (float)d);
            for (i = 0; i < 256 * (size_t)d; ++i) /* keys 0..255 against row 0's sign */
                ta_store(tc.k, tc.p.dtype, i,
                         ta_get(tc.q, tc.p.dtype, i % (size_t)d) > 0 ? -100.0f : 100.0f);
            rewiden(&tc);
            run_case("logits", r, &tc, &o);
            ta_oc_free_case(&tc);
        }
}

/* Rows that see no key, four ways. */
static void case_masked(ta_rng *r) {
    const stress_opts o = {1, 0.0};
    static const int32_t lens[3] = {0, 5, 0};
    tcase tc;
    ta_problem p;
    /* seqlens_k = {0, 5, 0}: batches 0 and 2 see nothing */
    memset(&tc, 0, sizeof tc);
    tc.p = shape(4, 64, 2, 3, TA_F32);
    tc.p.batch = 3, tc.p.heads_q = 2;
    tc.seqlens = (int32_t *)malloc(sizeof lens);
    memcpy(tc.seqlens, lens, sizeof lens);
    ta_oc_make_buffers(r, &tc);
    run_case("masked", r, &tc, &o);
    ta_oc_free_case(&tc);
    /* seqlens_k = 0 on a long row: nothing seen, nothing written but zeros */
    memset(&tc, 0, sizeof tc);
    tc.p = shape(4, 65536, 4, 4, TA_BF16);
    tc.seqlens = (int32_t *)calloc(1, sizeof(int32_t));
    ta_oc_make_buffers(r, &tc);
    run_case("masked", r, &tc, &o);
    ta_oc_free_case(&tc);
    /* a window of width 0 at pos = r - 3: rows 0..2 before the first key see nothing */
    p = shape(6, 3, 2, 2, TA_F32);
    p.flags = TA_WINDOW;
    run_random("masked", r, &p);
    /* a window unbounded on the left, 1 to the right of pos = r - 36: rows 0..34 see nothing */
    p = shape(40, 4, 3, 1, TA_F16);
    p.flags = TA_WINDOW, p.window_left = -1, p.window_right = 1;
    run_random("masked", r, &p);
    /* causal with S_q > S_k: rows 0..5 come before key 0 */
    p = shape(8, 2, 1, 2, TA_F32);
    p.flags = TA_CAUSAL;
    run_random("masked", r, &p);
}

/* Subnormal q, k, v, dO (their products underflow to 0: uniform weights) in f32
 * and f16, and f32 scores that are themselves subnormal. */
static void case_denormal(ta_rng *r) {
    const ta_dtype dts[2] = {TA_F32, TA_F16};
    /* f32: values in [2^-140, 2^-127); f16: [2^-22, 2^-15); scores ~ 2^-130 */
    const float lo[3] = {0x1p-140f, 0x1p-22f, 0x1p-65f}, hi[3] = {0x1p-127f, 0x1p-15f, 0x1p-64f};
    stress_opts o = {1, 0.0};
    int x;
    size_t i;
    for (x = 0; x < 3; ++x) {
        const ta_dtype dt = dts[x == 1];
        tcase tc;
        memset(&tc, 0, sizeof tc);
        tc.p = shape(2, 4096, 3, 2, dt);
        tc.p.scale = 1.0f;
        ta_oc_make_buffers(r, &tc);
        for (i = 0; i < tc.n_q; ++i)
            ta_store(tc.q, dt, i, ta_rng_uniform(r, lo[x], hi[x]));
        for (i = 0; i < tc.n_k; ++i)
            ta_store(tc.k, dt, i,
                     (ta_rng_u64(r) & 1 ? -1.0f : 1.0f) * ta_rng_uniform(r, lo[x], hi[x]));
        if (x != 2) {
            for (i = 0; i < tc.n_v; ++i)
                ta_store(tc.v, dt, i,
                         (ta_rng_u64(r) & 1 ? -1.0f : 1.0f) * ta_rng_uniform(r, lo[x], hi[x]));
            for (i = 0; i < tc.n_o; ++i)
                ta_store(tc.d_o, dt, i, ta_rng_uniform(r, lo[x], hi[x]));
        }
        rewiden(&tc);
        o.abs_floor = dt == TA_F32 ? (double)(tc.p.seq_k + 2) * F32_SUBNORMAL_STEP : 0.0;
        run_case("denormal", r, &tc, &o);
        ta_oc_free_case(&tc);
    }
}

static void case_head_dim(ta_rng *r) {
    ta_problem p = shape(4, 65536, 1, 1, TA_BF16);
    run_random("head_dim", r, &p);
    p = shape(3, 16384, 256, 256, TA_F32);
    run_random("head_dim", r, &p);
    p = shape(2, 8192, 256, 256, TA_BF16);
    p.flags = TA_CAUSAL;
    run_random("head_dim", r, &p);
    p = shape(4, 8192, 256, 1, TA_F32);
    run_random("head_dim", r, &p);
}

/* MTA with an all-zero kernel: every visible convolved score is 0. */
static void case_conv_zero(ta_rng *r) {
    static const int32_t convs[3][2] = {{1, 1}, {3, 3}, {6, 11}};
    const stress_opts o = {1, 0.0};
    int x;
    for (x = 0; x < 3; ++x) {
        tcase tc;
        memset(&tc, 0, sizeof tc);
        tc.p = shape(512, 512, 4, 3, x == 1 ? TA_BF16 : TA_F32);
        tc.p.flags = TA_CAUSAL, tc.p.conv_q = convs[x][0], tc.p.conv_k = convs[x][1];
        ta_oc_make_buffers(r, &tc);
        memset(tc.conv_w, 0, tc.n_w * sizeof(float));
        rewiden(&tc);
        run_case("conv_zero", r, &tc, &o);
        ta_oc_free_case(&tc);
    }
}

/* ---------------------------------------------------------------------- */
/* Long rows: the forward's bound (docs/exactness.md section 11)           */
/* ---------------------------------------------------------------------- */

#define U_F32 5.9604644775390625e-08 /* 2^-24 */

/* Forward (and, with bwd, backward) on REF and CPU; 0 if both ran and agree
 * bit for bit. ref keeps REF's outputs. */
static int run_ref_cpu(ta_rng *r, tcase *tc, run_out *ref, int bwd) {
    run_out cpu;
    ta_status s1, s2;
    int same;
    tc->p.num_threads = STRESS_THREADS;
    ta_oc_alloc_out(tc, ref);
    ta_oc_alloc_out(tc, &cpu);
    if (bwd) {
        s1 = ta_oc_run_step_on(TA_BACKEND_REF, r, tc, &tc->p, ref, 1);
        s2 = ta_oc_run_step_on(TA_BACKEND_CPU, r, tc, &tc->p, &cpu, 1);
    } else {
        s1 = ta_oc_run_fwd_on(TA_BACKEND_REF, r, tc, &tc->p, ref, 1, NULL);
        s2 = ta_oc_run_fwd_on(TA_BACKEND_CPU, r, tc, &tc->p, &cpu, 1, NULL);
    }
    same = s1 == TA_OK && s2 == TA_OK &&
           (bwd ? ta_oc_same_outputs(tc, ref, &cpu) : ta_oc_same_fwd(tc, ref, &cpu));
    TA_CHECK(same, "status REF %d CPU %d, or CPU differs from REF", s1, s2);
    ta_oc_free_out(&cpu);
    return same ? 0 : -1;
}

/*
 * The forward's stated relative bound eps of one row (docs/exactness.md
 * section 11): n visible keys in K tiles of b_c effective columns (T <=
 * ceil(n / b_c) + 1 tiles hold them), R tiles where the running max rose after
 * the first, kappa = sum_j P_j (m - s_j):
 *   eps = (B_c + 3 R + 2 kappa + 3 T u + 3) u
 * Then |o - o*| <= (eps + u) (sum_j P_j |v_j| + |o*|) per element and
 * |lse - lse*| <= eps + 2 u ln L* + u |lse*|, against the exact softmax of the
 * f32 scores (o*, lse*, L* = sum_j exp(s_j - m)).
 */
static double fwd_eps(int32_t b_c, double n_keys, double rescales, double kappa) {
    const double tiles = ceil(n_keys / (double)b_c) + 1.0;
    return ((double)b_c + 3.0 * rescales + 2.0 * kappa + 3.0 * tiles * U_F32 + 3.0) * U_F32;
}

/* Issue 15 item 3's repro: S_k = 2^25, k = 0 (every weight 1), v[j] = j % 2,
 * S_q = D = D_v = 1, block_k 64. Exact: o = 0.5, lse = 25 ln 2; R = kappa = 0
 * (every score is the max). Before the per-tile partials and the compensated
 * running sums, o = 1.0 and lse = ln 2^24: the f32 sums stopped at 2^24. The
 * backward runs too (REF == CPU). */
static void case_long_2p25(ta_rng *r) {
    const int32_t s_k = 1 << 25, b_c = 64;
    const double lse_exact = 25.0 * log(2.0);
    const double eps = fwd_eps(b_c, (double)s_k, 0.0, 0.0);
    tcase tc;
    run_out ref;
    size_t j;
    const double t0 = now_s();
    memset(&tc, 0, sizeof tc);
    tc.p = shape(1, s_k, 1, 1, TA_F32);
    tc.p.block_k = b_c;
    ta_oc_make_buffers(r, &tc);
    for (j = 0; j < tc.n_k; ++j) {
        ta_store(tc.k, TA_F32, j, 0.0f);
        ta_store(tc.v, TA_F32, j, (float)(j % 2));
    }
    if (run_ref_cpu(r, &tc, &ref, 1) == 0) {
        const double o = ta_get(ref.o, TA_F32, 0), lse = (double)ref.lse[0];
        const double o_bound = (eps + U_F32) * (0.5 + 0.5); /* sum P |v| = 0.5, |o*| = 0.5 */
        const double lse_bound = eps + 2.0 * U_F32 * lse_exact + U_F32 * lse_exact; /* m = 0 */
        printf("  long_2p25 S_k=2^25: o = %.9g (exact 0.5, error %.3g, bound %.3g), lse = %.9g "
               "(exact %.9g, error %.3g, bound %.3g); REF == CPU (fwd and bwd); %.1f s\n",
               o, fabs(o - 0.5), o_bound, lse, lse_exact, fabs(lse - lse_exact), lse_bound,
               now_s() - t0);
        TA_CHECK(fabs(o - 0.5) <= o_bound, "long_2p25: o = %.9g, exact 0.5, bound %.3g", o,
                 o_bound);
        TA_CHECK(fabs(lse - lse_exact) <= lse_bound,
                 "long_2p25: lse = %.9g, exact %.9g, bound %.3g", lse, lse_exact, lse_bound);
        ta_oc_free_out(&ref);
    }
    ta_oc_free_case(&tc);
}

/*
 * The backward's stated relative bound of one sum of n terms (docs/exactness.md
 * section 11): partials over chunks of TA_SUM2_CHUNK = C indices from +0, T <=
 * ceil(n / C) + 1 chunks, each added by ta_sum2_add (alpha = 1), hi read alone:
 *   eps_b = (C + 3 T u + 1) u, |x - x*| <= (eps_b + u) sum |terms| + u |x*|
 * (the last u's: the scale's product and the store's rounding).
 */
static double bwd_bound(double n_terms, double sum_abs, double exact) {
    const double c = 64.0, tiles = ceil(n_terms / c) + 1.0;
    const double eps_b = (c + 3.0 * tiles * U_F32 + 1.0) * U_F32;
    return (eps_b + U_F32) * sum_abs + U_F32 * fabs(exact);
}

static void check_bwd_sum(const char *what, double got, double exact, double n_terms,
                          double sum_abs) {
    const double bound = bwd_bound(n_terms, sum_abs, exact), err = fabs(got - exact);
    printf("  long_bwd %s = %.9g (exact %.9g, error %.3g, bound %.3g)\n", what, got, exact, err,
           bound);
    TA_CHECK(err <= bound, "long_bwd: %s = %.9g, exact %.9g, error %.3g > bound %.3g", what, got,
             exact, err, bound);
}

/*
 * The backward's long sums. Part 1, dq over 2^25 keys: S_q = 1, q = 0 (every
 * weight P = exp(0 - lse)), v_j = j % 2, k_j = v_j - 1/2, dO = 1, so dS_j =
 * P (v_j - D) and every term dS_j k_j = P / 4 > 0; dq* = scale sum_j dS_j k_j.
 * Part 2, dk and dv over 2^25 rows: S_k = 2, k = 0, v = (0, 1), q = dO = 1:
 * every row has P = exp(0 - lse) on both keys, dS_i1 = P (1 - D_i) > 0,
 * dS_i0 = -P D_i; dk*_j = scale sum_i dS_ij, dv*_j = sum_i P. The terms are
 * recomputed here from the library's own lse and o (f32, as the reference:
 * P = ta_exp(s - lse), D = fmaf(dO, o, +0)) and summed in double (exact:
 * equal terms).
 */
static void case_long_bwd(ta_rng *r) {
    const int32_t n = 1 << 25;
    const double t0 = now_s();
    tcase tc;
    run_out ref;
    size_t j;
    /* part 1: dq */
    memset(&tc, 0, sizeof tc);
    tc.p = shape(1, n, 1, 1, TA_F32);
    tc.p.scale = 1.0f; /* set: the checks below use it */
    ta_oc_make_buffers(r, &tc);
    ta_store(tc.q, TA_F32, 0, 0.0f);
    ta_store(tc.d_o, TA_F32, 0, 1.0f);
    for (j = 0; j < tc.n_k; ++j) {
        ta_store(tc.k, TA_F32, j, (float)(j % 2) - 0.5f);
        ta_store(tc.v, TA_F32, j, (float)(j % 2));
    }
    if (run_ref_cpu(r, &tc, &ref, 1) == 0) {
        const float p = ta_exp(0.0f - ref.lse[0]), dd = fmaf(1.0f, (float)ta_get(ref.o, TA_F32, 0), 0.0f);
        double sum = 0.0, sum_abs = 0.0;
        for (j = 0; j < 2; ++j) { /* the two kinds of key, n / 2 each */
            const double term = (double)(p * ((float)j - dd)) * ((double)j - 0.5);
            sum += (double)(n / 2) * term;
            sum_abs += (double)(n / 2) * fabs(term);
        }
        check_bwd_sum("dq (S_k = 2^25)", ta_get(ref.dq, TA_F32, 0), (double)tc.p.scale * sum,
                      (double)n, (double)tc.p.scale * sum_abs);
        ta_oc_free_out(&ref);
    }
    ta_oc_free_case(&tc);
    /* part 2: dk, dv */
    memset(&tc, 0, sizeof tc);
    tc.p = shape(n, 2, 1, 1, TA_F32);
    tc.p.scale = 1.0f;
    ta_oc_make_buffers(r, &tc);
    for (j = 0; j < tc.n_q; ++j) {
        ta_store(tc.q, TA_F32, j, 1.0f);
        ta_store(tc.d_o, TA_F32, j, 1.0f);
    }
    for (j = 0; j < 2; ++j) {
        ta_store(tc.k, TA_F32, j, 0.0f);
        ta_store(tc.v, TA_F32, j, (float)j);
    }
    if (run_ref_cpu(r, &tc, &ref, 1) == 0) {
        double dk_sum[2] = {0}, dk_abs[2] = {0}, dv_sum = 0.0;
        size_t i;
        for (i = 0; i < tc.n_q; ++i) {
            const float p = ta_exp(0.0f - ref.lse[i]);
            const float dd = fmaf(1.0f, (float)ta_get(ref.o, TA_F32, i), 0.0f);
            for (j = 0; j < 2; ++j) {
                const double ds = (double)(p * ((float)j - dd)); /* times q_i = 1 */
                dk_sum[j] += ds;
                dk_abs[j] += fabs(ds);
            }
            dv_sum += (double)p;
        }
        for (j = 0; j < 2; ++j) {
            char what[32];
            snprintf(what, sizeof what, "dk[%zu] (S_q = 2^25)", j);
            check_bwd_sum(what, ta_get(ref.dk, TA_F32, j), (double)tc.p.scale * dk_sum[j],
                          (double)n, (double)tc.p.scale * dk_abs[j]);
            snprintf(what, sizeof what, "dv[%zu] (S_q = 2^25)", j);
            check_bwd_sum(what, ta_get(ref.dv, TA_F32, j), dv_sum, (double)n, dv_sum);
        }
        ta_oc_free_out(&ref);
    }
    ta_oc_free_case(&tc);
    printf("  long_bwd: REF == CPU (fwd and bwd); %.1f s\n", now_s() - t0);
}

/*
 * MTA's dconv_w (docs/exactness.md section 11): n terms x_i in partials of at
 * most B_r B_c (one tile pair's, from +0), R(b, qt) a pair over T_k K tiles,
 * dconv_w a pair over the head's N_q (b, Q tile) sums, R read as hi once:
 *   |dw - dw*| <= (B_r B_c + 3 + 3 (T_k + N_q) u) u sum |x_i|
 */
static void check_dw_sum(const char *what, double got, double exact, double sum_abs,
                         double pair_terms, double t_k, double n_q) {
    const double eps = (pair_terms + 3.0 + 3.0 * (t_k + n_q) * U_F32) * U_F32;
    const double bound = eps * sum_abs, err = fabs(got - exact);
    printf("  long_dw %s = %.9g (exact %.9g, error %.3g = %.3g relative, bound %.3g)\n", what,
           got, exact, err, err / fabs(exact), bound);
    TA_CHECK(err <= bound, "long_dw: %s = %.9g, exact %.9g, error %.3g > bound %.3g", what, got,
             exact, err, bound);
}

/*
 * MTA's dconv_w over many partials of one sign. A 1x1 conv, w = 1 (C = S), D
 * = D_v = 1, q = dO = 1, k_j = v_j = j % 2, scale 1 (causal, as MTA is): S_ij
 * = j % 2, so dC_ij = P_ij (v_j - D_i) and the term dC_ij S_ij is 0 for an
 * even key and P_i1 (1 - D_i) > 0 for an odd one, P_i1 = ta_exp(1 - lse_i),
 * D_i = fmaf(1, o_i, +0) (recomputed from the library's lse and o, as the
 * reference does). Part 1: S_q = 1, S_k = 2^21, 8-key tiles: 2^18 equal
 * partials in R(0, 0). Part 2: B = 2^17, S_q = S_k = 16, 8 x 8 tiles: 2^18
 * sums R(b, qt) (two values, one per Q tile) merged into dconv_w.
 */
static void case_long_dw(ta_rng *r) {
    const double t0 = now_s();
    int part;
    for (part = 0; part < 2; ++part) {
        const int32_t batch = part == 0 ? 1 : 1 << 17, s_q = part == 0 ? 1 : 16;
        const int32_t s_k = part == 0 ? 1 << 21 : 16, tile = 8;
        tcase tc;
        run_out ref;
        size_t i, j;
        memset(&tc, 0, sizeof tc);
        tc.p = shape(s_q, s_k, 1, 1, TA_F32);
        tc.p.batch = batch;
        tc.p.scale = 1.0f;
        tc.p.flags = TA_CAUSAL;
        tc.p.conv_q = tc.p.conv_k = 1;
        tc.p.block_q = tc.p.block_k = tile;
        ta_oc_make_buffers(r, &tc);
        tc.conv_w[0] = 1.0f;
        for (i = 0; i < tc.n_q; ++i) {
            ta_store(tc.q, TA_F32, i, 1.0f);
            ta_store(tc.d_o, TA_F32, i, 1.0f);
        }
        for (j = 0; j < tc.n_k; ++j) {
            ta_store(tc.k, TA_F32, j, (float)(j % 2));
            ta_store(tc.v, TA_F32, j, (float)(j % 2));
        }
        rewiden(&tc);
        if (run_ref_cpu(r, &tc, &ref, 1) == 0) {
            double sum = 0.0;
            const double t_k = (double)((s_k + tile - 1) / tile);
            const double n_qt = (double)batch * (double)((s_q + tile - 1) / tile);
            for (i = 0; i < tc.n_lse; ++i) { /* row r sees keys [0, r + S_k - S_q] */
                const int32_t row = (int32_t)(i % (size_t)s_q), odd = (row + s_k - s_q + 1) / 2;
                const float p = ta_exp(1.0f - ref.lse[i]);
                const float dd = fmaf(1.0f, (float)ta_get(ref.o, TA_F32, i), 0.0f);
                if (odd > 0) sum += (double)odd * (double)(p * (1.0f - dd));
            }
            check_dw_sum(part == 0 ? "dconv_w (2^18 K tiles)" : "dconv_w (2^18 (b, Q tile))",
                         (double)ref.dw[0], sum, sum, (double)(tile * tile), t_k, n_qt);
            ta_oc_free_out(&ref);
        }
        ta_oc_free_case(&tc);
    }
    printf("  long_dw: REF == CPU (fwd and bwd); %.1f s\n", now_s() - t0);
}

/* One row's exact softmax over n keys of D = 1, in double, from the f32
 * scores the library computes (s_j = scale * fmaf(q, k_j, +0)): o*[d], lse*,
 * sum_j P_j |v_jd|, kappa and R (tiles of b_c keys where the running max
 * rose after the first), ln L*. Sums are compensated (Kahan) in double. */
typedef struct row_exact {
    double o[2], mag[2], lse, log_l, kappa, rescales;
} row_exact;

static row_exact exact_row(const float *k, const float *v, int32_t d_v, size_t n, float q,
                           float scale, int32_t b_c) {
    row_exact x;
    const double neg_inf = -(double)INFINITY;
    double m = neg_inf, run_max = neg_inf, sum[6] = {0}, comp[6] = {0};
    size_t j;
    int32_t d;
    memset(&x, 0, sizeof x);
    for (j = 0; j < n; ++j) {
        const float s = scale * fmaf(q, k[j], 0.0f);
        if ((double)s > m) m = (double)s;
        if (j % (size_t)b_c == (size_t)b_c - 1 || j == n - 1) { /* a tile ends */
            if (run_max != neg_inf && m > run_max) x.rescales += 1.0;
            run_max = m;
        }
    }
    for (j = 0; j < n; ++j) {
        const double s = (double)(scale * fmaf(q, k[j], 0.0f)), p = exp(s - m);
        double terms[6];
        int t;
        terms[0] = p, terms[1] = p * (m - s);
        for (d = 0; d < d_v; ++d) {
            terms[2 + d] = p * (double)v[j * (size_t)d_v + (size_t)d];
            terms[4 + d] = fabs(terms[2 + d]);
        }
        for (t = 0; t < 2 + 2 * 2; ++t) { /* Kahan */
            const double y = terms[t] - comp[t], z = sum[t] + y;
            comp[t] = (z - sum[t]) - y;
            sum[t] = z;
        }
    }
    for (d = 0; d < d_v; ++d) {
        x.o[d] = sum[2 + d] / sum[0];
        x.mag[d] = sum[4 + d] / sum[0];
    }
    x.kappa = sum[1] / sum[0];
    x.log_l = log(sum[0]);
    x.lse = m + x.log_l;
    return x;
}

/*
 * Beyond 2^25: S_k = 2^26 keys, S_q = 2 rows, D = 1, D_v = 2, f32, forward
 * only, block_k 64 and 8 (2^20 and 2^23 K tiles). Random k in [-1, 1), key 0
 * at 1 (so the first tile holds every row's max: R = 0), q in [0.5, 1], v in
 * [-1, 1), scale 1: weights in [e^-2, 1], each row's l about 2^25, where one
 * running f32 sum loses every term below 2. Checked: REF == CPU bit for bit,
 * and every o and lse within the stated bound of the exact softmax (double).
 */
static void case_long_2p26(ta_rng *r) {
    static const int32_t blocks[2] = {64, 8};
    const size_t s_k = (size_t)1 << 26;
    const int32_t s_q = 2, d_v = 2;
    float *k = (float *)ta_test_alloc(s_k * sizeof(float));
    float *v = (float *)ta_test_alloc(s_k * (size_t)d_v * sizeof(float));
    float q[2], o_ref[4], o_cpu[4], lse_ref[2], lse_cpu[2];
    int x, i, d;
    ta_fill_uniform(r, k, TA_F32, s_k, -1.0f, 1.0f);
    ta_fill_uniform(r, v, TA_F32, s_k * (size_t)d_v, -1.0f, 1.0f);
    ta_fill_uniform(r, q, TA_F32, (size_t)s_q, 0.5f, 1.0f);
    k[0] = 1.0f;
    for (x = 0; x < 2; ++x) {
        const double t0 = now_s();
        ta_problem p = shape(s_q, (int32_t)s_k, 1, d_v, TA_F32);
        ta_fwd_args fa;
        size_t bytes_ref = 0, bytes_cpu = 0;
        void *ws_ref, *ws_cpu;
        ta_status st_ref, st_cpu;
        p.scale = 1.0f, p.block_k = blocks[x], p.num_threads = STRESS_THREADS;
        memset(&fa, 0, sizeof fa);
        fa.q = q, fa.k = k, fa.v = v;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes_ref) == TA_OK &&
                     ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &bytes_cpu) == TA_OK,
                 "long_2p26: workspace size");
        ws_ref = ta_test_alloc(bytes_ref);
        ws_cpu = ta_test_alloc(bytes_cpu);
        ta_poison(o_ref, sizeof o_ref), ta_poison(o_cpu, sizeof o_cpu);
        ta_poison(lse_ref, sizeof lse_ref), ta_poison(lse_cpu, sizeof lse_cpu);
        fa.o = o_ref, fa.lse = lse_ref;
        st_ref = ta_fwd(&p, TA_BACKEND_REF, &fa, ws_ref, bytes_ref, NULL);
        fa.o = o_cpu, fa.lse = lse_cpu;
        st_cpu = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws_cpu, bytes_cpu, NULL);
        ta_test_free(ws_ref);
        ta_test_free(ws_cpu);
        TA_CHECK(st_ref == TA_OK && st_cpu == TA_OK, "long_2p26: status REF %d CPU %d", st_ref,
                 st_cpu);
        if (st_ref != TA_OK || st_cpu != TA_OK) continue;
        TA_CHECK(memcmp(o_ref, o_cpu, sizeof o_ref) == 0 &&
                     memcmp(lse_ref, lse_cpu, sizeof lse_ref) == 0,
                 "long_2p26 block_k %d: CPU differs from REF", blocks[x]);
        for (i = 0; i < s_q; ++i) {
            const row_exact e = exact_row(k, v, d_v, s_k, q[i], p.scale, blocks[x]);
            const double eps = fwd_eps(blocks[x], (double)s_k, e.rescales, e.kappa);
            const double lse_err = fabs((double)lse_ref[i] - e.lse);
            const double lse_bound = eps + 2.0 * U_F32 * e.log_l + U_F32 * fabs(e.lse);
            double worst = lse_err / lse_bound;
            TA_CHECK(e.rescales == 0.0, "long_2p26: R = %g, expected 0", e.rescales);
            TA_CHECK(lse_err <= lse_bound, "long_2p26 block_k %d row %d: lse %.9g, exact %.9g, "
                     "error %.3g > bound %.3g", blocks[x], i, (double)lse_ref[i], e.lse, lse_err,
                     lse_bound);
            for (d = 0; d < d_v; ++d) {
                const double got = (double)o_ref[i * d_v + d], err = fabs(got - e.o[d]);
                const double bound = (eps + U_F32) * (e.mag[d] + fabs(e.o[d]));
                TA_CHECK(err <= bound, "long_2p26 block_k %d row %d: o[%d] = %.9g, exact %.9g, "
                         "error %.3g > bound %.3g", blocks[x], i, d, got, e.o[d], err, bound);
                worst = fmax(worst, err / bound);
            }
            printf("  long_2p26 S_k=2^26 block_k=%d row %d: o = (%.9g, %.9g) exact (%.9g, %.9g), "
                   "lse = %.9g exact %.9g; kappa %.3f, eps %.3g; worst error / bound %.3g\n",
                   blocks[x], i, (double)o_ref[i * d_v], (double)o_ref[i * d_v + 1], e.o[0],
                   e.o[1], (double)lse_ref[i], e.lse, e.kappa, eps, worst);
        }
        printf("  long_2p26 block_k=%d: REF == CPU; %.1f s\n", blocks[x], now_s() - t0);
    }
    ta_test_free(k);
    ta_test_free(v);
}

/* Issue 15 item 1: S_q = 4, S_k = 16, D = 1, D_v = 2, scale 3e38, block_k 8, q = 1,
 * k[0..7] = -2 (scores -6e38: -inf in f32), k[8..15] = 0. Documented: o = the mean
 * of v[8..15], lse = ln 8, every row (it was o = lse = NaN before the fix). */
static void case_nan_first_tile(ta_rng *r) {
    tcase tc;
    run_out ref;
    size_t i, j;
    int documented = 1;
    memset(&tc, 0, sizeof tc);
    tc.p = shape(4, 16, 1, 2, TA_F32);
    tc.p.scale = 3e38f, tc.p.block_k = 8;
    ta_oc_make_buffers(r, &tc);
    for (i = 0; i < 4; ++i)
        ta_store(tc.q, TA_F32, i, 1.0f);
    for (j = 0; j < 16; ++j)
        ta_store(tc.k, TA_F32, j, j < 8 ? -2.0f : 0.0f);
    if (run_ref_cpu(r, &tc, &ref, 0) != 0) {
        ta_oc_free_case(&tc);
        return;
    }
    for (i = 0; i < 4; ++i) {
        for (j = 0; j < 2; ++j) {
            double mean = 0.0, x = ta_get(ref.o, TA_F32, 2 * i + j);
            size_t s;
            for (s = 8; s < 16; ++s)
                mean += ta_get(tc.v, TA_F32, 2 * s + j) / 8.0;
            documented &= fabs(x - mean) <= 1e-6;
        }
        documented &= fabs((double)ref.lse[i] - log(8.0)) <= 1e-6;
    }
    printf("  nan_first_tile: row 0 o = (%g, %g), lse = %g; REF == CPU\n", ta_get(ref.o, TA_F32, 0),
           ta_get(ref.o, TA_F32, 1), (double)ref.lse[0]);
    TA_CHECK(documented, "nan_first_tile: o is not the mean of v[8..15] or lse is not ln 8");
    ta_oc_free_out(&ref);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */

typedef struct named_case {
    const char *name;
    void (*run)(ta_rng *r);
    int by_name; /* run only when named (--case): a CTest entry of its own */
} named_case;

static const named_case cases[] = {
    {"long", case_long, 0},
    {"logits", case_logits, 0},
    {"masked", case_masked, 0},
    {"denormal", case_denormal, 0},
    {"head_dim", case_head_dim, 0},
    {"conv_zero", case_conv_zero, 0},
    {"long_2p25", case_long_2p25, 1},
    {"long_2p26", case_long_2p26, 1},
    {"long_bwd", case_long_bwd, 1},
    {"long_dw", case_long_dw, 1},
    {"nan_first_tile", case_nan_first_tile, 1},
};

int main(int argc, char **argv) {
    const char *only = NULL;
    int a, ran = 0;
    size_t c;
    ta_rng r;
    for (a = 1; a < argc; ++a) {
        if (strcmp(argv[a], "--case") == 0 && a + 1 < argc) {
            only = argv[++a];
        } else {
            fprintf(stderr, "usage: test_stress [--case NAME]\n");
            return 2;
        }
    }
    ta_rng_seed(&r, ta_test_seed("test_stress"));
    for (c = 0; c < sizeof cases / sizeof cases[0]; ++c)
        if (only ? strcmp(only, cases[c].name) == 0 : !cases[c].by_name) {
            printf("case %s\n", cases[c].name);
            cases[c].run(&r);
            ran = 1;
        }
    if (!ran) {
        fprintf(stderr, "test_stress: unknown case %s\n", only);
        return 2;
    }
    return ta_test_finish("test_stress");
}
