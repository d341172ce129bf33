/*
 * Split-K forward and ta_merge (docs/api.md, "Split-K and merge";
 * docs/exactness.md section 10), REF and CPU.
 *
 *   1. random problems (fresh seed, printed; replay with TA_SEED=...): SDPA
 *      and MTA, causal or not (MTA causal), seqlens_k, sliding windows, GQA,
 *      S_q != S_k, decode shapes (S_q <= 4), head dims 1..128, every dtype,
 *      small and default key tiles, one in six in the [B, S, H, D] layout
 *      (strides). For num_splits in {1, 2, 3, 7, key tiles + 5,
 *      TA_SPLITS_AUTO}:
 *        - REF with num_splits = 1 is memcmp-equal to num_splits = 0;
 *        - CPU (one and two threads) memcmp-equal to REF, same num_splits;
 *        - a count past the key tiles equal to num_splits = the key tiles;
 *        - REF within tolerance of the float64 oracle (o, lse);
 *        - ta_bwd ignores num_splits: the same bytes with 3 as with 0;
 *        - for 2 and TA_SPLITS_AUTO, lse = NULL gives the same o (REF, CPU).
 *      outputs poisoned, workspace poisoned or random.
 *   2. ta_merge: random parts (some rows -inf in some parts, some in all):
 *      REF == CPU bitwise, and with lse = NULL the same o; within tolerance
 *      of the merge formula in double;
 *      one part gives back its own bits; rows empty everywhere give 0, -inf;
 *      two forwards over the two halves of the keys (strides), merged, equal
 *      a forward over all keys within tolerance (and the oracle).
 *   3. GQA decode, the CPU's packed heads (ta_cpu_head_pack: a kv group's
 *      query heads as one block of rows) and the decode path with lanes over
 *      keys (tasks of at most 32 rows): groups of 1 to 32 query heads per
 *      kv head, S_q 1..16 new rows (MTA, a third: 1..4 or 5..48) against 1..700 keys,
 *      causal or not, seqlens_k, windows, every dtype, head dims up to 128,
 *      one in six strided; num_splits 0, 3 and TA_SPLITS_AUTO; CPU on every ISA path
 *      this machine has, 1 to 3 threads, memcmp-equal to REF (o, lse).
 *      Then MTA 6x11 with 16 new rows and 4 query heads per kv head (64
 *      packed rows, 84 loaded; the default tiles), the same checks.
 *      Counts the runs that packed more than one head (must be some).
 * Usage: test_splitk [--quick]
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ta_cpu.h"
#include "oracle_check.h"
#include "ta_internal.h"
#include "ta_math.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

/* o, lse against the oracle: the forward's gate (test_oracle_sdpa) */
static const double tol_fwd[TA_OC_TENSORS] = {2e-6, 2e-6, 0.0, 0.0, 0.0, 0.0};
static err_max worst_split[3];
/* split runs whose bits differ from num_splits = 0 (the splits did change the rescale points) */
static long n_split_runs, n_split_differ, n_ws_short;

/* ---------------------------------------------------------------------- */
/* Buffers in the [B, S, H, D] layout                                      */
/* ---------------------------------------------------------------------- */

/* dst [B, S, H, dim] = src [B, H, S, dim] (to = 1), or back (to = 0). */
static void bshd_copy(void *dst, const void *src, size_t eb, int32_t nb, int32_t nh, int32_t ns,
                      int32_t dim, int to) {
    int32_t b, h, s;
    for (b = 0; b < nb; ++b)
        for (h = 0; h < nh; ++h)
            for (s = 0; s < ns; ++s) {
                const size_t bhsd =
                    (((size_t)b * (size_t)nh + (size_t)h) * (size_t)ns + (size_t)s) * (size_t)dim;
                const size_t bshd =
                    (((size_t)b * (size_t)ns + (size_t)s) * (size_t)nh + (size_t)h) * (size_t)dim;
                memcpy((char *)dst + (to ? bshd : bhsd) * eb,
                       (const char *)src + (to ? bhsd : bshd) * eb, (size_t)dim * eb);
            }
}

/* One forward on backend be: o, lse (poisoned first; lse may be NULL) in the
 * contiguous layout; bshd: every tensor passed as [B, S, H, D] through strides. */
static ta_status run_fwd(ta_backend be, ta_rng *r, const tcase *tc, const ta_problem *p, void *o,
                         float *lse, int bshd) {
    const ta_problem *q = &tc->p;
    size_t bytes = 0;
    void *ws, *qb = NULL, *kb = NULL, *vb = NULL, *ob = NULL;
    ta_fwd_args fa;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    ta_poison(o, tc->n_o * tc->eb);
    if (lse) ta_poison(lse, tc->n_lse * sizeof(float));
    if ((st = ta_fwd_workspace_size(p, be, &bytes)) != TA_OK) return st;
    fa.q = tc->q, fa.k = tc->k, fa.v = tc->v, fa.o = o, fa.lse = lse;
    fa.seqlens_k = tc->seqlens, fa.conv_w = p->conv_q ? tc->conv_w : NULL;
    if (bshd) {
        qb = ta_test_alloc(tc->n_q * tc->eb), kb = ta_test_alloc(tc->n_k * tc->eb);
        vb = ta_test_alloc(tc->n_v * tc->eb), ob = ta_test_alloc(tc->n_o * tc->eb);
        bshd_copy(qb, tc->q, tc->eb, q->batch, q->heads_q, q->seq_q, q->head_dim, 1);
        bshd_copy(kb, tc->k, tc->eb, q->batch, q->heads_kv, q->seq_k, q->head_dim, 1);
        bshd_copy(vb, tc->v, tc->eb, q->batch, q->heads_kv, q->seq_k, q->head_dim_v, 1);
        ta_poison(ob, tc->n_o * tc->eb);
        fa.q = qb, fa.k = kb, fa.v = vb, fa.o = ob;
        fa.q_strides = ta_test_strides_bshd(q->heads_q, q->seq_q, q->head_dim);
        fa.k_strides = ta_test_strides_bshd(q->heads_kv, q->seq_k, q->head_dim);
        fa.v_strides = ta_test_strides_bshd(q->heads_kv, q->seq_k, q->head_dim_v);
        fa.o_strides = ta_test_strides_bshd(q->heads_q, q->seq_q, q->head_dim_v);
    }
    ws = ta_oc_workspace(r, bytes, ta_rng_int(r, 0, 1));
    st = ta_fwd(p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
    if (bshd) {
        if (st == TA_OK) bshd_copy(o, ob, tc->eb, q->batch, q->heads_q, q->seq_q, q->head_dim_v, 0);
        ta_test_free(qb), ta_test_free(kb), ta_test_free(vb), ta_test_free(ob);
    }
    return st;
}

/* ---------------------------------------------------------------------- */
/* 1. Random problems                                                      */
/* ---------------------------------------------------------------------- */

static void random_problem(ta_rng *r, tcase *tc, int mta) {
    static const int32_t dim_cuts[3] = {40, 80, 100};
    ta_problem *p = &tc->p;
    const int decode = ta_rng_int(r, 0, 2) == 0;
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    if (p->head_dim > 128) p->head_dim = 128;
    if (p->head_dim_v > 128) p->head_dim_v = 128;
    p->seq_q = decode ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 1, 90);
    p->seq_k = ta_rng_int(r, 0, 3) == 0 ? p->seq_q : ta_rng_int(r, 1, 400);
    p->flags = mta || ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (mta) {
        const int32_t c = ta_rng_int(r, 0, 2);
        p->conv_q = c == 0 ? 6 : ta_rng_int(r, 1, 5);
        p->conv_k = c == 0 ? 11 : 2 * ta_rng_int(r, 0, 4) + 1;
    }
    /* small key tiles give many of them: several per split */
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 40);
    if (mta && p->block_k && p->block_k < 4 * ((p->conv_k - 1) / 2) + 1) p->block_k = 0;
    p->block_q = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 16, 80);
    if (mta && p->block_q && p->block_q < 2 * (p->conv_q - 1) + 1) p->block_q = 0;
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 30);
}

static void fill_kernel(ta_rng *r, tcase *tc) {
    size_t i;
    const float a = 1.0f / sqrtf((float)(tc->p.conv_q * tc->p.conv_k));
    for (i = 0; i < tc->n_w; ++i)
        tc->conv_w[i] = ta_rng_uniform(r, -a, a);
    for (i = 0; i < (size_t)tc->p.heads_q; ++i)
        tc->conv_w[i * (size_t)(tc->p.conv_q * tc->p.conv_k) +
                   (size_t)((tc->p.conv_q - 1) * tc->p.conv_k + (tc->p.conv_k - 1) / 2)] += 1.0f;
    tc->ow = ta_oracle_widen(tc->conv_w, TA_F32, tc->n_w);
}

static int same(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* First differing element of two dt buffers, for the failure message. */
static size_t first_diff(const void *a, const void *b, size_t eb, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (memcmp((const char *)a + i * eb, (const char *)b + i * eb, eb) != 0) return i;
    return n;
}

static void check_problem(ta_rng *r, int mta, long *n_runs) {
    static const int32_t fixed[4] = {1, 2, 3, 7};
    tcase tc;
    ta_tiling t;
    char desc[256];
    void *o0, *o1, *o2;
    float *l0, *l1, *l2;
    int bshd, i;
    ta_problem p;
    random_problem(r, &tc, mta);
    ta_oc_make_buffers(r, &tc);
    if (mta) fill_kernel(r, &tc);
    bshd = ta_rng_int(r, 0, 5) == 0;
    ta_oc_describe(&tc, desc, sizeof desc);
    o0 = ta_test_alloc(tc.n_o * tc.eb), o1 = ta_test_alloc(tc.n_o * tc.eb);
    o2 = ta_test_alloc(tc.n_o * tc.eb);
    l0 = (float *)ta_test_alloc(tc.n_lse * 4), l1 = (float *)ta_test_alloc(tc.n_lse * 4);
    l2 = (float *)ta_test_alloc(tc.n_lse * 4);
    p = tc.p;
    {
        int32_t bq = p.block_q, bk = p.block_k;
        if (!bq || !bk) {
            int32_t dq, dk;
            ta_tiling_default_blocks(p.conv_q, p.conv_k, &dq, &dk);
            bq = bq ? bq : dq, bk = bk ? bk : dk;
        }
        TA_CHECK(ta_oc_make_tiling(&p, bq, bk, TA_TILING_FWD, &t) == TA_OK, "tiling: %s", desc);
    }
    /* the forward as before: num_splits = 0 */
    TA_CHECK(run_fwd(TA_BACKEND_REF, r, &tc, &p, o0, l0, bshd) == TA_OK, "ref 0: %s", desc);
    ta_oc_run_oracle(&tc, o0);
    for (i = 0; i < 6; ++i) {
        const int32_t n = i < 4 ? fixed[i] : i == 4 ? t.num_k_tiles + 5 : TA_SPLITS_AUTO;
        int th;
        p.num_splits = n;
        p.num_threads = 0;
        TA_CHECK(run_fwd(TA_BACKEND_REF, r, &tc, &p, o1, l1, bshd) == TA_OK, "ref %d: %s", n, desc);
        if (n == 1)
            TA_CHECK(same(o0, o1, tc.n_o * tc.eb) && same(l0, l1, tc.n_lse * 4),
                     "num_splits 1 != 0 (REF): %s", desc);
        if (n == t.num_k_tiles + 5) { /* clamped: the bits of num_splits = key tiles */
            p.num_splits = t.num_k_tiles;
            TA_CHECK(run_fwd(TA_BACKEND_REF, r, &tc, &p, o2, l2, 0) == TA_OK, "ref kt: %s", desc);
            TA_CHECK(same(o2, o1, tc.n_o * tc.eb) && same(l2, l1, tc.n_lse * 4),
                     "num_splits %d != key tiles %d: %s", n, t.num_k_tiles, desc);
            p.num_splits = n;
        }
        if (n != 1) { /* the oracle: o, lse within the forward's gate */
            ++n_split_runs;
            n_split_differ += !same(o0, o1, tc.n_o * tc.eb) || !same(l0, l1, tc.n_lse * 4);
            run_out out;
            err_max e;
            memset(&out, 0, sizeof out);
            memset(&e, 0, sizeof e);
            out.o = o1, out.lse = l1;
            ta_oc_compare_all(&tc, &out, 1, 0, tol_fwd, 1, &e);
            ta_oc_fold(&worst_split[p.dtype], &e);
        }
        for (th = 1; th <= 2; ++th) { /* CPU, one and two threads */
            p.num_threads = th;
            TA_CHECK(run_fwd(TA_BACKEND_CPU, r, &tc, &p, o2, l2, bshd) == TA_OK, "cpu %d: %s", n,
                     desc);
            TA_CHECK(same(o1, o2, tc.n_o * tc.eb),
                     "CPU o != REF, num_splits %d, %d threads, "
                     "element %zu of %zu: %s",
                     n, th, first_diff(o1, o2, tc.eb, tc.n_o), tc.n_o, desc);
            TA_CHECK(same(l1, l2, tc.n_lse * 4), "CPU lse != REF, num_splits %d, element %zu: %s",
                     n, first_diff(l1, l2, 4, tc.n_lse), desc);
            ++*n_runs;
        }
        if (i == 1 || i == 5) { /* lse = NULL: o alone, the same bits (REF, CPU) */
            TA_CHECK(run_fwd(TA_BACKEND_REF, r, &tc, &p, o2, NULL, bshd) == TA_OK &&
                         same(o1, o2, tc.n_o * tc.eb),
                     "REF without lse: status or o differs, num_splits %d: %s", n, desc);
            TA_CHECK(run_fwd(TA_BACKEND_CPU, r, &tc, &p, o2, NULL, bshd) == TA_OK &&
                         same(o1, o2, tc.n_o * tc.eb),
                     "CPU without lse: status or o differs, num_splits %d: %s", n, desc);
        }
    }
    /* the workspace query includes the parts: num_splits 2 on num_splits 1's
     * workspace (when it needs more) is refused, outputs untouched */
    p.num_splits = 2;
    p.num_threads = 0;
    {
        size_t need_1 = 0, need_2 = 0;
        ta_problem p1 = p;
        p1.num_splits = 1;
        TA_CHECK(ta_fwd_workspace_size(&p1, TA_BACKEND_CPU, &need_1) == TA_OK &&
                     ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &need_2) == TA_OK,
                 "size queries: %s", desc);
        if (need_2 > need_1) {
            ta_fwd_args fa;
            void *ws = ta_oc_workspace(r, need_2, 0); /* the overlap checks see need_2 */
            memset(&fa, 0, sizeof fa);
            fa.q = tc.q, fa.k = tc.k, fa.v = tc.v, fa.o = o2, fa.lse = l2;
            fa.seqlens_k = tc.seqlens, fa.conv_w = p.conv_q ? tc.conv_w : NULL;
            ta_poison(o2, tc.n_o * tc.eb), ta_poison(l2, tc.n_lse * 4);
            memcpy(o0, o2, tc.n_o * tc.eb);
            const ta_status st = ta_fwd(&p, TA_BACKEND_CPU, &fa, ws, need_1, NULL);
            TA_CHECK(st == TA_ERR_WORKSPACE_SIZE && same(o0, o2, tc.n_o * tc.eb),
                     "split-K on a one-split workspace (%zu < %zu bytes): %s, o %s: %s", need_1,
                     need_2, ta_status_string(st),
                     same(o0, o2, tc.n_o * tc.eb) ? "untouched" : "written", desc);
            ta_test_free(ws);
            ++n_ws_short;
        }
    }
    /* the backward ignores num_splits: from the split forward's o, lse */
    if (ta_rng_int(r, 0, 2) == 0) {
        run_out a, b;
        ta_problem p0 = tc.p, p3 = tc.p;
        p3.num_splits = 3;
        ta_oc_alloc_out(&tc, &a), ta_oc_alloc_out(&tc, &b);
        TA_CHECK(ta_oc_run_bwd_on(TA_BACKEND_REF, r, &tc, &p3, o1, l1, &a, 0, NULL) == TA_OK,
                 "bwd 3: %s", desc);
        TA_CHECK(ta_oc_run_bwd_on(TA_BACKEND_REF, r, &tc, &p0, o1, l1, &b, 1, NULL) == TA_OK,
                 "bwd 0: %s", desc);
        TA_CHECK(ta_oc_same_dqkv(&tc, &a, &b), "ta_bwd depends on num_splits: %s", desc);
        ta_oc_free_out(&a), ta_oc_free_out(&b);
    }
    ta_test_free(o0), ta_test_free(o1), ta_test_free(o2);
    ta_test_free(l0), ta_test_free(l1), ta_test_free(l2);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */
/* 2. ta_merge                                                             */
/* ---------------------------------------------------------------------- */

/* Random parts: o in [-1, 1), lse in [-4, 4) (a wider spread now and then),
 * -inf for some (row, part) pairs and every part of some rows. */
static void check_merge_random(ta_rng *r) {
    ta_problem p;
    ta_merge_args a;
    const int32_t k = ta_rng_int(r, 1, 9);
    size_t n_rows, n_o, eb, i;
    void *parts, *o_ref, *o_cpu;
    float *lse_parts, *lse_ref, *lse_cpu;
    double worst = 0.0;
    int32_t s;
    const float spread = ta_rng_int(r, 0, 3) == 0 ? 60.0f : 4.0f;
    memset(&p, 0, sizeof p);
    p.batch = ta_rng_int(r, 1, 3), p.heads_kv = ta_rng_int(r, 1, 2);
    p.heads_q = p.heads_kv * ta_rng_int(r, 1, 2);
    p.seq_q = ta_rng_int(r, 1, 40), p.seq_k = ta_rng_int(r, 1, 40);
    p.head_dim = ta_rng_int(r, 1, 64), p.head_dim_v = ta_rng_int(r, 1, 130);
    p.dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    eb = ta_dtype_size(p.dtype);
    n_rows = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_o = n_rows * (size_t)p.head_dim_v;
    parts = ta_test_alloc(n_o * (size_t)k * eb);
    lse_parts = (float *)ta_test_alloc(n_rows * (size_t)k * 4);
    o_ref = ta_test_alloc(n_o * eb), o_cpu = ta_test_alloc(n_o * eb);
    lse_ref = (float *)ta_test_alloc(n_rows * 4), lse_cpu = (float *)ta_test_alloc(n_rows * 4);
    ta_fill_uniform(r, parts, p.dtype, n_o * (size_t)k, -1.0f, 1.0f);
    for (i = 0; i < n_rows * (size_t)k; ++i)
        lse_parts[i] = ta_rng_int(r, 0, 5) == 0 ? -INFINITY : ta_rng_uniform(r, -spread, spread);
    for (i = 0; i < n_rows; i += 7) /* every part empty */
        for (s = 0; s < k; ++s)
            lse_parts[(size_t)s * n_rows + i] = -INFINITY;
    memset(&a, 0, sizeof a);
    a.num_parts = k, a.o_parts = parts, a.lse_parts = lse_parts;
    a.o = o_ref, a.lse = lse_ref;
    ta_poison(o_ref, n_o * eb), ta_poison(lse_ref, n_rows * 4);
    TA_CHECK(ta_merge(&p, TA_BACKEND_REF, &a, NULL) == TA_OK, "ta_merge REF");
    a.o = o_cpu, a.lse = lse_cpu;
    ta_poison(o_cpu, n_o * eb), ta_poison(lse_cpu, n_rows * 4);
    TA_CHECK(ta_merge(&p, TA_BACKEND_CPU, &a, NULL) == TA_OK, "ta_merge CPU");
    TA_CHECK(same(o_ref, o_cpu, n_o * eb) && same(lse_ref, lse_cpu, n_rows * 4),
             "ta_merge CPU != REF (K %d)", k);
    { /* lse = NULL: o alone, the same bits */
        ta_backend be;
        a.lse = NULL;
        for (be = TA_BACKEND_REF; be <= TA_BACKEND_CPU; be = (ta_backend)(be + 1)) {
            a.o = o_cpu;
            ta_poison(o_cpu, n_o * eb);
            TA_CHECK(ta_merge(&p, be, &a, NULL) == TA_OK && same(o_ref, o_cpu, n_o * eb),
                     "ta_merge without lse (backend %d): status or o differs (K %d)", (int)be, k);
        }
        a.o = o_cpu, a.lse = lse_cpu;
    }
    /* against the formula in double: |o - o_exact| <= u_dt |o_exact| + 8 2^-24 max |o_s| */
    for (i = 0; i < n_rows; ++i) {
        double m = -(double)INFINITY, l = 0.0, lse_x;
        int32_t d;
        for (s = 0; s < k; ++s)
            m = fmax(m, (double)lse_parts[(size_t)s * n_rows + i]);
        if (m == -(double)INFINITY) {
            TA_CHECK(lse_ref[i] == -INFINITY, "empty row %zu: lse %g", i, (double)lse_ref[i]);
            for (d = 0; d < p.head_dim_v; ++d)
                TA_CHECK(ta_get(o_ref, p.dtype, i * (size_t)p.head_dim_v + (size_t)d) == 0.0 &&
                             !signbit(ta_get(o_ref, p.dtype, i * (size_t)p.head_dim_v + (size_t)d)),
                         "empty row %zu: o not +0", i);
            continue;
        }
        for (s = 0; s < k; ++s)
            l += exp((double)lse_parts[(size_t)s * n_rows + i] - m);
        lse_x = m + log(l);
        TA_CHECK(fabs((double)lse_ref[i] - lse_x) <= 4e-7 * (fabs(m) + 1.0),
                 "row %zu lse %.9g vs %.9g", i, (double)lse_ref[i], lse_x);
        for (d = 0; d < p.head_dim_v; ++d) {
            double acc = 0.0, err;
            const double u = p.dtype == TA_F32 ? 0x1p-24 : p.dtype == TA_F16 ? 0x1p-11 : 0x1p-8;
            for (s = 0; s < k; ++s)
                acc +=
                    exp((double)lse_parts[(size_t)s * n_rows + i] - m) *
                    ta_get(parts, p.dtype, (size_t)s * n_o + i * (size_t)p.head_dim_v + (size_t)d);
            acc /= l;
            err = fabs(ta_get(o_ref, p.dtype, i * (size_t)p.head_dim_v + (size_t)d) - acc);
            worst = fmax(worst, err);
            TA_CHECK(err <= u * fabs(acc) + 16 * 0x1p-24 * (fabs(m) + 1.0) + 0x1p-24,
                     "row %zu feature %d: o %.9g vs %.9g (K %d)", i, d,
                     ta_get(o_ref, p.dtype, i * (size_t)p.head_dim_v + (size_t)d), acc, k);
        }
    }
    /* one part: its own bits back (no -0 and no NaN among the random parts) */
    a.num_parts = 1, a.o = o_ref, a.lse = lse_ref;
    TA_CHECK(ta_merge(&p, TA_BACKEND_CPU, &a, NULL) == TA_OK, "ta_merge K=1");
    for (i = 0; i < n_rows; ++i)
        if (lse_parts[i] != -INFINITY)
            TA_CHECK(same((char *)o_ref + i * (size_t)p.head_dim_v * eb,
                          (char *)parts + i * (size_t)p.head_dim_v * eb,
                          (size_t)p.head_dim_v * eb) &&
                         ta_f32_bits(lse_ref[i]) == ta_f32_bits(lse_parts[i]),
                     "K = 1 changed row %zu", i);
    ta_test_free(parts), ta_test_free(lse_parts), ta_test_free(o_ref), ta_test_free(o_cpu);
    ta_test_free(lse_ref), ta_test_free(lse_cpu);
}

/* Two forwards over keys [0, h) and [h, S_k), merged, against one forward over
 * all keys and the oracle, causal or not: the first with the full tensors and
 * seqlens_k = h, the second with k, v moved by h rows (the full tensors'
 * strides) and seq_k = S_k - h, so the bottom-right causal alignment puts every
 * row where it sits in the full key range. */
static void check_merge_halves(ta_rng *r, double *worst) {
    tcase tc;
    ta_problem ph;
    ta_fwd_args fa;
    ta_merge_args ma;
    ta_backend be = ta_rng_int(r, 0, 1) ? TA_BACKEND_CPU : TA_BACKEND_REF;
    void *o_full, *parts, *o_m, *ws;
    float *l_full, *l_parts, *l_m;
    size_t bytes = 0, i;
    int32_t half, part, *seqlens;
    char desc[256];
    memset(&tc, 0, sizeof tc);
    tc.p.batch = ta_rng_int(r, 1, 2), tc.p.heads_kv = ta_rng_int(r, 1, 2);
    tc.p.heads_q = tc.p.heads_kv * ta_rng_int(r, 1, 2);
    tc.p.seq_q = ta_rng_int(r, 1, 50), tc.p.seq_k = ta_rng_int(r, 2, 300);
    tc.p.head_dim = ta_rng_int(r, 1, 64), tc.p.head_dim_v = ta_rng_int(r, 1, 64);
    tc.p.dtype = ta_rng_int(r, 0, 1) ? TA_F32 : (ta_dtype)ta_rng_int(r, 1, 2);
    tc.p.flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    ta_oc_make_buffers(r, &tc);
    ta_oc_describe(&tc, desc, sizeof desc);
    half = ta_rng_int(r, 1, tc.p.seq_k - 1);
    o_full = ta_test_alloc(tc.n_o * tc.eb), o_m = ta_test_alloc(tc.n_o * tc.eb);
    parts = ta_test_alloc(2 * tc.n_o * tc.eb);
    l_full = (float *)ta_test_alloc(tc.n_lse * 4), l_m = (float *)ta_test_alloc(tc.n_lse * 4);
    l_parts = (float *)ta_test_alloc(2 * tc.n_lse * 4);
    TA_CHECK(run_fwd(be, r, &tc, &tc.p, o_full, l_full, 0) == TA_OK, "full: %s", desc);
    seqlens = (int32_t *)malloc((size_t)tc.p.batch * sizeof(int32_t));
    for (part = 0; part < tc.p.batch; ++part)
        seqlens[part] = half;
    for (part = 0; part < 2; ++part) {
        const int32_t k0 = part ? half : 0;
        ph = tc.p;
        ph.seq_k = tc.p.seq_k - k0;
        memset(&fa, 0, sizeof fa);
        fa.seqlens_k = part ? NULL : seqlens;
        fa.q = tc.q;
        fa.k = (const char *)tc.k + (size_t)k0 * (size_t)tc.p.head_dim * tc.eb;
        fa.v = (const char *)tc.v + (size_t)k0 * (size_t)tc.p.head_dim_v * tc.eb;
        fa.k_strides = ta_strides_contiguous(tc.p.heads_kv, tc.p.seq_k, tc.p.head_dim);
        fa.v_strides = ta_strides_contiguous(tc.p.heads_kv, tc.p.seq_k, tc.p.head_dim_v);
        fa.o = (char *)parts + (size_t)part * tc.n_o * tc.eb;
        fa.lse = l_parts + (size_t)part * tc.n_lse;
        TA_CHECK(ta_fwd_workspace_size(&ph, be, &bytes) == TA_OK, "size");
        ws = ta_oc_workspace(r, bytes, 0);
        TA_CHECK(ta_fwd(&ph, be, &fa, ws, bytes, NULL) == TA_OK, "half %d: %s", part, desc);
        ta_test_free(ws);
    }
    memset(&ma, 0, sizeof ma);
    ma.num_parts = 2, ma.o_parts = parts, ma.lse_parts = l_parts, ma.o = o_m, ma.lse = l_m;
    ta_poison(o_m, tc.n_o * tc.eb);
    TA_CHECK(ta_merge(&tc.p, be, &ma, NULL) == TA_OK, "merge halves: %s", desc);
    ta_oc_run_oracle(&tc, o_full);
    {
        run_out out;
        err_max e;
        /* the parts are rounded to the storage dtype once more than o: twice the gate's rounding */
        const double tol[TA_OC_TENSORS] = {
            tc.p.dtype == TA_F32 ? 4e-6 : (tc.p.dtype == TA_F16 ? 0x1p-11 : 0x1p-8),
            4e-6,
            0,
            0,
            0,
            0};
        memset(&out, 0, sizeof out), memset(&e, 0, sizeof e);
        out.o = o_m, out.lse = l_m;
        ta_oc_compare_all(&tc, &out, 1, 0, tol, 1, &e);
        *worst = fmax(*worst, e.cond[T_O]);
    }
    for (i = 0; i < tc.n_lse; ++i)
        TA_CHECK(
            (l_m[i] == -INFINITY && l_full[i] == -INFINITY) ||
                fabs((double)l_m[i] - (double)l_full[i]) <= 1e-5 * (fabs((double)l_full[i]) + 1),
            "halves lse row %zu: %.9g vs %.9g: %s", i, (double)l_m[i], (double)l_full[i], desc);
    ta_test_free(o_full), ta_test_free(o_m), ta_test_free(parts);
    ta_test_free(l_full), ta_test_free(l_m), ta_test_free(l_parts);
    free(seqlens);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */
/* 3. GQA decode: packed heads                                             */
/* ---------------------------------------------------------------------- */

static void check_packed(ta_rng *r, int mta, long *n_runs, long *n_packed) {
    static const int32_t groups[6] = {1, 2, 4, 8, 16, 32};
    static const int32_t splits[3] = {0, 3, TA_SPLITS_AUTO};
    const ta_cpu_isa best = ta_cpu_isa_best();
    tcase tc;
    ta_problem *p = &tc.p;
    char desc[256];
    void *o_ref, *o_cpu;
    float *l_ref, *l_cpu;
    int bshd, i, isa;
    memset(&tc, 0, sizeof tc);
    p->batch = ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 3);
    p->heads_q = p->heads_kv * groups[ta_rng_int(r, 0, 5)];
    p->head_dim = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 128) : 64 * ta_rng_int(r, 1, 2);
    p->head_dim_v = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 128) : p->head_dim;
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->seq_q = ta_rng_int(r, 1, 16);
    p->seq_k = ta_rng_int(r, 0, 4) == 0 ? ta_rng_int(r, 1, 40) : ta_rng_int(r, 1, 700);
    if (p->seq_k < p->seq_q) p->seq_k = p->seq_q;
    p->flags = mta || ta_rng_int(r, 0, 3) ? TA_CAUSAL : 0u;
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 64);
    p->block_q = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 8, 80) : 0;
    if (mta) { /* MTA packs into its lanes-over-keys path (at most 64 rows) */
        const int32_t c = mta == 2 ? 0 : ta_rng_int(r, 0, 1);
        p->seq_q = ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 5, 48);
        if (mta == 2) { /* 16 new rows of 4 heads per kv head: 64 packed rows */
            p->heads_q = 4 * p->heads_kv;
            p->seq_q = 16;
            p->block_q = 0;
            if (p->seq_k < 40) p->seq_k = ta_rng_int(r, 40, 700);
        }
        if (p->seq_k < p->seq_q) p->seq_k = p->seq_q;
        p->conv_q = c == 0 ? 6 : ta_rng_int(r, 1, 5);
        p->conv_k = c == 0 ? 11 : 2 * ta_rng_int(r, 0, 4) + 1;
        if (p->block_k && p->block_k < 4 * ((p->conv_k - 1) / 2) + 1) p->block_k = 0;
        if (p->block_q && p->block_q < 2 * (p->conv_q - 1) + 1) p->block_q = 0;
    }
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, &tc);
    ta_test_random_window(r, p, 25);
    ta_oc_make_buffers(r, &tc);
    if (mta) fill_kernel(r, &tc);
    bshd = ta_rng_int(r, 0, 5) == 0;
    ta_oc_describe(&tc, desc, sizeof desc);
    o_ref = ta_test_alloc(tc.n_o * tc.eb), o_cpu = ta_test_alloc(tc.n_o * tc.eb);
    l_ref = (float *)ta_test_alloc(tc.n_lse * 4), l_cpu = (float *)ta_test_alloc(tc.n_lse * 4);
    for (i = 0; i < 3; ++i) {
        ta_problem q = *p;
        int th;
        q.num_splits = splits[i];
        q.num_threads = 0;
        TA_CHECK(run_fwd(TA_BACKEND_REF, r, &tc, &q, o_ref, l_ref, bshd) == TA_OK, "ref %d: %s",
                 splits[i], desc);
        for (isa = TA_CPU_ISA_SCALAR; isa <= (int)best; ++isa)
            for (th = 1; th <= 3; ++th) {
                ta_plan plan;
                q.num_threads = th;
                setenv("TA_CPU_ISA", ta_cpu_isa_name((ta_cpu_isa)isa), 1);
                TA_CHECK(run_fwd(TA_BACKEND_CPU, r, &tc, &q, o_cpu, l_cpu, bshd) == TA_OK,
                         "cpu %d: %s", splits[i], desc);
                TA_CHECK(same(o_ref, o_cpu, tc.n_o * tc.eb),
                         "packed decode: CPU o != REF, num_splits %d, %s, %d threads, element "
                         "%zu of %zu: %s",
                         splits[i], ta_cpu_isa_name((ta_cpu_isa)isa), th,
                         first_diff(o_ref, o_cpu, tc.eb, tc.n_o), tc.n_o, desc);
                TA_CHECK(same(l_ref, l_cpu, tc.n_lse * 4),
                         "packed decode: CPU lse != REF, num_splits %d, %s, %d threads, element "
                         "%zu: %s",
                         splits[i], ta_cpu_isa_name((ta_cpu_isa)isa), th,
                         first_diff(l_ref, l_cpu, 4, tc.n_lse), desc);
                ++*n_runs;
                if (ta_plan_make(&q, TA_BACKEND_CPU, &plan, NULL) == TA_OK &&
                    ta_cpu_head_pack(&plan, th) > 1)
                    ++*n_packed;
            }
        unsetenv("TA_CPU_ISA");
    }
    ta_test_free(o_ref), ta_test_free(o_cpu), ta_test_free(l_ref), ta_test_free(l_cpu);
    ta_oc_free_case(&tc);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const uint64_t seed = ta_test_seed("test_splitk");
    const int n_problems = quick ? 6 : 60, n_merge = quick ? 4 : 40;
    double worst_halves = 0.0;
    long n_runs = 0;
    ta_rng r;
    int i;
    ta_rng_seed(&r, seed);
    for (i = 0; i < n_problems; ++i)
        check_problem(&r, i % 3 == 2, &n_runs);
    printf("split-K: %d problems (a third MTA), %ld CPU runs bit-identical to REF\n", n_problems,
           n_runs);
    printf("split runs (num_splits != 1): %ld, of which %ld differ from num_splits = 0 in some "
           "bit; %ld short workspaces refused\n",
           n_split_runs, n_split_differ, n_ws_short);
    ta_oc_print_table("split-K forward vs oracle (max cond = error / magnitude)", worst_split, 2, 1,
                      NULL);
    {
        const int n_packed_problems = quick ? 4 : 40;
        long n_packed_runs = 0, n_packed = 0;
        for (i = 0; i < n_packed_problems; ++i)
            check_packed(&r, i % 3 == 2, &n_packed_runs, &n_packed);
        for (i = 0; i < (quick ? 1 : 4); ++i) /* MTA 6x11, 16 rows x 4 heads packed */
            check_packed(&r, 2, &n_packed_runs, &n_packed);
        printf("GQA decode (packed heads): %d problems (a third MTA) and %d of MTA 6x11 with 16 "
               "rows x 4 heads, %ld CPU runs bit-identical to REF, %ld of them packed several "
               "heads\n",
               n_packed_problems, quick ? 1 : 4, n_packed_runs, n_packed);
        /* the share of packed runs depends on the draws (group 1 never packs,
         * a group of 2 packs only with one thread): --quick's 4 problems gave
         * 36 of 72 with seed 1795533746326169753, so "more than half" was a
         * coin toss; what must hold is that the packed path ran at all */
        TA_CHECK(n_packed > 0, "packing ran in none of %ld runs", n_packed_runs);
    }
    for (i = 0; i < n_merge; ++i) {
        check_merge_random(&r);
        check_merge_halves(&r, &worst_halves);
    }
    printf("ta_merge: %d random merges REF == CPU; %d merges of two key halves, worst o error / "
           "magnitude %.3e\n",
           n_merge, n_merge, worst_halves);
    return ta_test_finish("test_splitk");
}
