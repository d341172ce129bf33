/*
 * Paged KV cache (ta_problem.kv_page_size, ta_fwd_args.block_table; docs/api.md,
 * "Paged KV cache"), REF and CPU forward.
 *
 *   1. random problems (fresh seed, printed; replay with TA_SEED=...): SDPA
 *      (causal or not) and MTA, GQA, seqlens_k, windows, decode shapes, every
 *      dtype, page sizes 1..40, pools with spare pages, block tables in a
 *      random page order (shared, unused entries -1 past the last needed
 *      block); the keys and values scattered into the pages. The paged
 *      forward (o, lse) is memcmp-equal to the contiguous forward on REF,
 *      and CPU (one or two threads) equal to it too; with the MTA conv also
 *      through query history rows (a decode step) and split-K (same
 *      num_splits on both sides), and the rotary load stage (k rotated by its
 *      logical position); a quarter of the unsplit CPU runs through the
 *      caller-run tasks; a sixth over a key range on the forward's K tiles
 *      (key_begin, key_end: both sides the same range). Outputs poisoned
 *      first.
 *   2. bad input: a table entry outside [0, num_pages), too few blocks for
 *      seq_k, a NULL table, strides given for a paged k, the backward with
 *      pages (every backend): the documented status, the explanation naming
 *      the field, the output untouched; CUDA's exact forward sizes a paged
 *      problem, and refuses host pools (TA_ERR_BAD_ARG) or, without a
 *      device, the call (TA_ERR_BACKEND_UNAVAILABLE).
 * Usage: test_paged_kv [--quick]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

static long n_cases, n_mta, n_hist, n_split, n_rope, n_range;

/* The paged copy of one [B, H_kv, S_k, dim] tensor: pool [num_pages,
 * page_size, H_kv, dim], key j of sequence b at page table[b][j / ps], slot
 * j % ps. Pool bytes not holding a key stay poisoned (never read). */
static void *scatter_pages(const void *src, size_t eb, const ta_problem *p, int32_t dim,
                           const int32_t *table) {
    const size_t ps = (size_t)p->kv_page_size, hk = (size_t)p->heads_kv;
    const size_t pool = (size_t)p->kv_num_pages * ps * hk * (size_t)dim;
    void *dst = ta_test_alloc(pool * eb);
    int32_t b, h, j;
    ta_poison(dst, pool * eb);
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_kv; ++h)
            for (j = 0; j < p->seq_k; ++j) {
                const size_t page =
                    (size_t)table[(size_t)b * (size_t)p->kv_max_blocks + (size_t)j / ps];
                const size_t row = (page * ps + (size_t)j % ps) * hk + (size_t)h;
                const size_t from =
                    (((size_t)b * hk + (size_t)h) * (size_t)p->seq_k + (size_t)j) * (size_t)dim;
                memcpy((char *)dst + row * (size_t)dim * eb, (const char *)src + from * eb,
                       (size_t)dim * eb);
            }
    return dst;
}

/* A block table over a pool with spare pages: every needed block of every
 * sequence a distinct page, in a random order; entries past the needed ones -1. */
static int32_t *random_table(ta_rng *r, const ta_problem *p) {
    const int32_t need = (p->seq_k + p->kv_page_size - 1) / p->kv_page_size;
    const size_t n = (size_t)p->batch * (size_t)p->kv_max_blocks;
    int32_t *perm = (int32_t *)malloc((size_t)p->kv_num_pages * sizeof(int32_t));
    int32_t *table = (int32_t *)malloc(n * sizeof(int32_t));
    int32_t i, b, at = 0;
    for (i = 0; i < p->kv_num_pages; ++i)
        perm[i] = i;
    for (i = p->kv_num_pages - 1; i > 0; --i) { /* Fisher-Yates */
        const int32_t j = ta_rng_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (b = 0; b < p->batch; ++b)
        for (i = 0; i < p->kv_max_blocks; ++i)
            table[(size_t)b * (size_t)p->kv_max_blocks + (size_t)i] = i < need ? perm[at++] : -1;
    free(perm);
    return table;
}

static ta_status run(ta_backend be, ta_rng *r, const ta_problem *p, const ta_fwd_args *a0, void *o,
                     float *lse, size_t o_bytes, size_t lse_bytes) {
    ta_fwd_args a = *a0;
    size_t bytes = 0;
    void *ws;
    ta_status st;
    ta_poison(o, o_bytes);
    ta_poison(lse, lse_bytes);
    a.o = o, a.lse = lse;
    if (be == TA_BACKEND_CPU && p->num_splits < 2 && ta_rng_int(r, 0, 3) == 0)
        return ta_test_fwd_tasks(p, &a); /* the caller-run tasks (one split only) */
    if ((st = ta_fwd_workspace_size(p, be, &bytes)) != TA_OK) return st;
    ws = ta_oc_workspace(r, bytes, ta_rng_int(r, 0, 1));
    st = ta_fwd(p, be, &a, ws, bytes, NULL);
    ta_test_free(ws);
    return st;
}

static void check_case(ta_rng *r) {
    static const int32_t dim_cuts[3] = {40, 80, 100};
    tcase tc;
    ta_problem p, pp;
    ta_fwd_args a, ap;
    char desc[256];
    void *o0, *o1, *kp, *vp, *hist = NULL;
    float *l0, *l1, *rope_cos = NULL, *rope_sin = NULL;
    int32_t *table;
    int mta = ta_rng_int(r, 0, 1), be;
    size_t ob, lb;
    memset(&tc, 0, sizeof tc);
    p = tc.p;
    ta_oc_random_heads(r, &tc.p, dim_cuts);
    p = tc.p;
    if (p.head_dim > 96) p.head_dim = 96;
    if (p.head_dim_v > 96) p.head_dim_v = 96;
    p.seq_q = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 1, 80);
    p.seq_k = ta_rng_int(r, 0, 3) == 0 ? p.seq_q : ta_rng_int(r, 1, 200);
    p.flags = mta || ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    if (mta) {
        p.conv_q = ta_rng_int(r, 0, 1) ? 6 : ta_rng_int(r, 1, 5);
        p.conv_k = p.conv_q == 6 ? 11 : 2 * ta_rng_int(r, 0, 4) + 1;
        /* a decode step that continues a sequence: history rows */
        if (p.conv_q > 1 && ta_rng_int(r, 0, 1)) p.q_history = ta_rng_int(r, 1, p.conv_q - 1);
    }
    p.block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 48);
    if (mta && p.block_k && p.block_k < 4 * ((p.conv_k - 1) / 2) + 1) p.block_k = 0;
    if (ta_rng_int(r, 0, 3) == 0) p.num_splits = ta_rng_int(r, 2, 5);
    if (p.q_history == 0 && p.head_dim >= 2 && ta_rng_int(r, 0, 3) == 0) {
        p.rope = TA_ROPE_HALF; /* k rows rotated by their logical position, not their page's */
        p.rope_pairs = p.head_dim / 2;
        p.rope_rows = p.seq_q > p.seq_k ? p.seq_q : p.seq_k;
    }
    if (p.block_k > 0 && ta_rng_int(r, 0, 2) == 0) {
        /* a key range on the forward's K tiles (docs/api.md, "Key ranges"):
         * both sides take the same range; cleared if the plan's tiles differ */
        const int32_t ce = p.block_k - (mta ? p.conv_k - 1 : 0);
        const int32_t nt = (p.seq_k + ce - 1) / ce;
        if (nt >= 2) {
            const int32_t t0 = ta_rng_int(r, 0, nt - 1), t1 = ta_rng_int(r, t0 + 1, nt);
            size_t bytes;
            p.key_begin = t0 * ce;
            p.key_end = t1 == nt ? p.seq_k : t1 * ce;
            if (ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) != TA_OK)
                p.key_begin = p.key_end = 0;
        }
    }
    tc.p = p;
    ta_oc_random_seqlens(r, &tc);
    ta_test_random_window(r, &tc.p, 25);
    ta_oc_make_buffers(r, &tc);
    if (mta) {
        size_t i;
        for (i = 0; i < tc.n_w; ++i)
            tc.conv_w[i] = ta_rng_uniform(r, -0.3f, 0.3f);
    }
    p = tc.p;
    ta_oc_describe(&tc, desc, sizeof desc);
    if (p.rope) { /* token t uses table row t */
        ta_rope_1d cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_pairs = p.rope_pairs, cfg.rows = p.rope_rows;
        rope_cos = (float *)malloc((size_t)p.rope_rows * (size_t)p.rope_pairs * sizeof(float));
        rope_sin = (float *)malloc((size_t)p.rope_rows * (size_t)p.rope_pairs * sizeof(float));
        TA_CHECK(ta_rope_table_1d(&cfg, rope_cos, rope_sin) == TA_OK, "rope table");
    }
    ob = tc.n_o * tc.eb, lb = tc.n_lse * 4;
    o0 = ta_test_alloc(ob), o1 = ta_test_alloc(ob);
    l0 = (float *)ta_test_alloc(lb), l1 = (float *)ta_test_alloc(lb);
    memset(&a, 0, sizeof a);
    a.q = tc.q, a.k = tc.k, a.v = tc.v, a.conv_w = tc.conv_w, a.seqlens_k = tc.seqlens;
    a.rope.cos = rope_cos, a.rope.sin = rope_sin;
    if (p.q_history > 0) { /* random history rows, contiguous [B, H, n, D] */
        const size_t n =
            (size_t)p.batch * (size_t)p.heads_q * (size_t)p.q_history * (size_t)p.head_dim;
        hist = ta_test_alloc(n * tc.eb);
        ta_fill_uniform(r, hist, p.dtype, n, -1.0f, 1.0f);
        a.q_hist = hist;
    }
    /* the pages */
    pp = p;
    pp.kv_page_size = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 5, 40);
    pp.kv_max_blocks = (p.seq_k + pp.kv_page_size - 1) / pp.kv_page_size + ta_rng_int(r, 0, 2);
    pp.kv_num_pages =
        p.batch * ((p.seq_k + pp.kv_page_size - 1) / pp.kv_page_size) + ta_rng_int(r, 0, 5);
    table = random_table(r, &pp);
    kp = scatter_pages(tc.k, tc.eb, &pp, p.head_dim, table);
    vp = scatter_pages(tc.v, tc.eb, &pp, p.head_dim_v, table);
    ap = a;
    ap.k = kp, ap.v = vp, ap.block_table = table;
    TA_CHECK(run(TA_BACKEND_REF, r, &p, &a, o0, l0, ob, lb) == TA_OK, "contiguous: %s", desc);
    for (be = 0; be < 2; ++be) {
        const ta_backend bk = be ? TA_BACKEND_CPU : TA_BACKEND_REF;
        ta_status st;
        pp.num_threads = be ? ta_rng_int(r, 1, 2) : 0;
        st = run(bk, r, &pp, &ap, o1, l1, ob, lb);
        TA_CHECK(st == TA_OK, "%s paged (page %d): %s: %s", be ? "CPU" : "REF", pp.kv_page_size,
                 ta_status_string(st), desc);
        TA_CHECK(memcmp(o0, o1, ob) == 0 && memcmp(l0, l1, lb) == 0,
                 "%s paged (page %d, %d pages) != contiguous: %s", be ? "CPU" : "REF",
                 pp.kv_page_size, pp.kv_num_pages, desc);
    }
    ++n_cases;
    n_mta += mta;
    n_hist += p.q_history > 0;
    n_rope += p.rope != 0;
    n_split += p.num_splits > 1;
    n_range += p.key_begin != 0 || p.key_end != 0;
    ta_test_free(o0), ta_test_free(o1), ta_test_free(l0), ta_test_free(l1);
    ta_test_free(kp), ta_test_free(vp), ta_test_free(hist);
    free(table), free(rope_cos), free(rope_sin);
    ta_oc_free_case(&tc);
}

/* ---- bad input (ta_test_expect_fwd: status, explanation, canary) ---- */

static void check_bad_input(void) {
    enum { B = 2, H = 2, S = 9, D = 4, PS = 4, NP = 7, MB = 3 };
    static float q[B * H * S * D], pool[NP * PS * H * D], o[B * H * S * D];
    static int32_t table[B * MB] = {0, 1, 2, 3, 4, 5};
    static float dq[B * H * S * D], dk[B * H * S * D], dv[B * H * S * D], lse[B * H * S];
    ta_problem p = {0}, bad;
    ta_fwd_args a, x;
    ta_bwd_args ba;
    size_t bytes = 0, i;
    void *ws;
    char why[256];
    for (i = 0; i < sizeof q / sizeof q[0]; ++i)
        q[i] = (float)(i % 5) * 0.1f;
    for (i = 0; i < sizeof pool / sizeof pool[0]; ++i)
        pool[i] = (float)(i % 3) * 0.2f;
    p.batch = B, p.heads_q = p.heads_kv = H, p.seq_q = p.seq_k = S, p.head_dim = p.head_dim_v = D;
    p.kv_page_size = PS, p.kv_num_pages = NP, p.kv_max_blocks = MB;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &bytes) == TA_OK, "size");
    ws = ta_test_alloc(bytes + 1024);
    bytes += 1024;
    memset(&a, 0, sizeof a);
    a.q = q, a.k = pool, a.v = pool, a.o = o, a.block_table = table;
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &a, ws, bytes, TA_OK, "ok", "valid pages");
    ta_test_expect_fwd(&p, TA_BACKEND_CPU, &a, ws, bytes, TA_OK, "ok", "valid pages (CPU)");
    x = a, x.block_table = NULL;
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &x, ws, bytes, TA_ERR_NULL_ARG, "args.block_table",
                       "NULL table");
    table[4] = NP;
    ta_test_expect_fwd(&p, TA_BACKEND_CPU, &a, ws, bytes, TA_ERR_BAD_ARG, "args.block_table[4]",
                       "entry past the pool");
    table[4] = -1;
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &a, ws, bytes, TA_ERR_BAD_ARG, "args.block_table[4]",
                       "negative entry");
    table[4] = 4;
    bad = p, bad.kv_max_blocks = 2; /* 8 keys < seq_k */
    ta_test_expect_fwd(&bad, TA_BACKEND_REF, &a, ws, bytes, TA_ERR_BAD_ARG, "kv_max_blocks",
                       "too few blocks");
    bad = p, bad.kv_num_pages = 0;
    ta_test_expect_fwd(&bad, TA_BACKEND_REF, &a, ws, bytes, TA_ERR_BAD_ARG, "kv_num_pages",
                       "no pages");
    bad = p, bad.kv_page_size = 0;
    ta_test_expect_fwd(&bad, TA_BACKEND_REF, &a, ws, bytes, TA_ERR_BAD_ARG, "kv_num_pages",
                       "pool sizes without a page size");
    bad = p, bad.kv_page_size = -2;
    ta_test_expect_fwd(&bad, TA_BACKEND_REF, &a, ws, bytes, TA_ERR_BAD_ARG, "kv_page_size",
                       "negative");
    x = a, x.k_strides.seq = D;
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &x, ws, bytes, TA_ERR_BAD_ARG, "args.k_strides",
                       "strides");
    x = a, x.o = pool; /* the output over the pool */
    ta_test_expect_fwd(&p, TA_BACKEND_REF, &x, ws, bytes, TA_ERR_BAD_ARG, "args.k",
                       "o over the pool");
    /* CUDA's exact forward takes pages: sized without a device; a call
     * without one (or without the CUDA component) is TA_ERR_BACKEND_UNAVAILABLE,
     * with one these host pools and table are not device memory:
     * TA_ERR_BAD_ARG, nothing written (test_cuda_seqlens runs it on a GPU) */
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &i) == TA_OK, "CUDA exact paged size");
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        ta_test_expect_fwd(&p, TA_BACKEND_CUDA, &a, ws, bytes, TA_ERR_BACKEND_UNAVAILABLE,
                           "backend", "CUDA without a device");
    } else {
        ta_status st;
        ta_canary_fill(o, sizeof o);
        st = ta_fwd(&p, TA_BACKEND_CUDA, &a, ws, bytes, NULL);
        TA_CHECK(st == TA_ERR_BAD_ARG && ta_canary_intact(o, sizeof o),
                 "CUDA paged on host memory: %s, want TA_ERR_BAD_ARG, o untouched",
                 ta_status_string(st));
    }
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_CUDA, &i) == TA_ERR_UNSUPPORTED,
             "CUDA bwd size with pages");
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &i) == TA_ERR_UNSUPPORTED, "bwd size");
    memset(&ba, 0, sizeof ba);
    ba.q = q, ba.k = pool, ba.v = pool, ba.o = o, ba.d_o = o, ba.lse = lse;
    ba.dq = dq, ba.dk = dk, ba.dv = dv;
    TA_CHECK(ta_explain_bwd(&p, TA_BACKEND_CPU, &ba, ws, bytes, NULL, why, sizeof why) ==
                     TA_ERR_UNSUPPORTED &&
                 strstr(why, "kv_page_size") != NULL,
             "bwd with pages: %s", why);
    ta_test_free(ws);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const uint64_t seed = ta_test_seed("test_paged_kv");
    const int n = quick ? 30 : 400;
    ta_rng r;
    int i;
    ta_rng_seed(&r, seed);
    check_bad_input();
    for (i = 0; i < n && ta_test_failures == 0; ++i)
        check_case(&r);
    printf("test_paged_kv: %ld problems (%ld MTA, %ld with query history rows, %ld split-K, "
           "%ld rotary, %ld over a key range): paged == contiguous on REF and CPU\n",
           n_cases, n_mta, n_hist, n_split, n_rope, n_range);
    if (!quick) TA_CHECK(n_range > 0, "no problem ran over a key range");
    return ta_test_finish("test_paged_kv");
}
