/*
 * Reference SDPA (forward and backward) against the float64 oracle.
 *
 *   1. finite differences check the oracle's own gradients (double)
 *   2. many random problems (fresh seed, printed): odd and prime lengths, S = 1,
 *      S_q != S_k both ways, causal or not, seqlens_k (0, partial, full), GQA,
 *      head dims 1..256, every dtype, default and explicit tiles (powers of two and
 *      any other integer in [8, 256], e.g. 100: a tenth of the problems at least).
 *      Per problem:
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
 *   4. rows whose first visited K tile holds only -inf scores (check_overflowing_rows).
 * --quick: a few small problems (valgrind, sanitizers).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracle.h"
#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

enum { T_COUNT = T_DV + 1 }; /* o lse dq dk dv: no dconv_w */

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
/* o lse dq dk dv (no dconv_w; u_dt and floor_dt are in oracle_check.c) */
static const double tol_arith[TA_OC_TENSORS] = {2e-6, 2e-6, 2e-6, 2e-6, 2e-6, 0.0};

/* Largest errors seen, per dtype and tensor. */
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

/* ---------------------------------------------------------------------- */
/* Random problems                                                         */
/* ---------------------------------------------------------------------- */

/* Prime lengths pick_len draws from. */
static const int32_t primes[] = {2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 127, 131, 251, 257, 509};

static int32_t pick_len(ta_rng *r, int32_t max_len) {
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

/* Tile sizes: the default, a power of two, or any integer in [8, 256] (the
 * contract holds for every one; 100 and 54 are no powers of two). */
static long n_non_pow2; /* problems run with a tile size that is no power of two */
static int32_t pick_block(ta_rng *r) {
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 30) return 0;
    if (c < 65) return (int32_t)1 << ta_rng_int(r, 3, 8);
    return ta_rng_int(r, TA_BLOCK_MIN, TA_BLOCK_MAX);
}
static int is_pow2(int32_t b) { return b > 0 && (b & (b - 1)) == 0; }

/* Random problem whose work B*H*S_q*S_k*(D+D_v) stays under `work`. */
static void random_problem(ta_rng *r, tcase *tc, double work) {
    ta_problem *p = &tc->p;
    double max_len;
    static const int32_t dim_cuts[3] = {45, 65, 90};
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    p->flags = ta_rng_int(r, 0, 1) ? TA_CAUSAL : 0u;
    max_len = sqrt(work / ((double)p->batch * p->heads_q * (p->head_dim + p->head_dim_v)));
    max_len = max_len < 2.0 ? 2.0 : (max_len > 520.0 ? 520.0 : max_len);
    p->seq_q = pick_len(r, (int32_t)max_len);
    p->seq_k = ta_rng_int(r, 0, 9) < 3 ? p->seq_q : pick_len(r, (int32_t)max_len);
    p->block_q = pick_block(r);
    p->block_k = pick_block(r);
    n_non_pow2 += (p->block_q && !is_pow2(p->block_q)) || (p->block_k && !is_pow2(p->block_k));
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 30);
}

/* ---------------------------------------------------------------------- */
/* Running the reference                                                   */
/* ---------------------------------------------------------------------- */

/* Forward with problem p (tiles may differ from tc->p) into out->o, out->lse
 * (lse may be NULL), poisoned first. */
static void run_fwd(ta_rng *r, const tcase *tc, const ta_problem *p, run_out *out, int ws_kind,
                    ta_trace *tr) {
    const ta_status st = ta_oc_run_fwd(r, tc, p, out, ws_kind, tr);
    TA_CHECK(st == TA_OK, "ta_fwd: %s", ta_status_string(st));
}

/* Backward with problem p from the forward outputs o, lse into out->dq, dk, dv,
 * poisoned first. */
static void run_bwd(ta_rng *r, const tcase *tc, const ta_problem *p, const void *o,
                    const float *lse, run_out *out, int ws_kind, ta_trace *tr) {
    const ta_status st = ta_oc_run_bwd(r, tc, p, o, lse, out, ws_kind, tr);
    TA_CHECK(st == TA_OK, "ta_bwd: %s", ta_status_string(st));
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

/* Compare a run with the oracle; fold the errors into acc (max). */
static void compare_all(const tcase *tc, const run_out *out, err_max *acc) {
    ta_oc_compare_all(tc, out, 1, 1, tol_arith, 0, acc);
}

/* ---------------------------------------------------------------------- */
/* Structural checks                                                       */
/* ---------------------------------------------------------------------- */

/* Forward trace: exactly the pairs (b, h, qt, kt < k_end) in loop order.
 * Backward: the dk/dv and dq passes visit the same set of (b, h, qt, kt). */
static void check_traces(const tcase *tc, const ta_trace *tf, const ta_trace *tb) {
    const ta_problem *p = &tc->p;
    ta_tiling t;
    int32_t bq, bk;
    size_t n, i, cells;
    int *grid;
    ta_tiling_default_blocks(0, 0, &bq, &bk);
    if (p->block_q) bq = p->block_q;
    if (p->block_k) bk = p->block_k;
    if (ta_oc_make_tiling(p, bq, bk, TA_TILING_FWD, &t) != TA_OK) {
        TA_CHECK(0, "ta_tiling_make failed");
        return;
    }
    n = ta_oc_check_fwd_trace(tc, &t, tf);
    cells = (size_t)p->batch * (size_t)p->heads_q * (size_t)t.num_q_tiles * (size_t)t.num_k_tiles;
    grid = (int *)calloc(cells, sizeof(int));
    TA_CHECK(tb->count <= tb->capacity, "bwd trace overflow");
    for (i = 0; i < tb->count && i < tb->capacity; ++i) {
        const ta_trace_entry *e = &tb->entries[i];
        if (e->batch < 0 || e->batch >= p->batch || e->head < 0 || e->head >= p->heads_q ||
            e->q_tile < 0 || e->q_tile >= t.num_q_tiles || e->k_tile < 0 ||
            e->k_tile >= t.num_k_tiles) {
            TA_CHECK(0, "bwd trace entry %zu out of range", i);
            continue;
        }
        grid[ta_oc_cell(p, &t, e->batch, e->head, e->q_tile, e->k_tile)] +=
            e->pass == TA_PASS_BWD_DKDV ? 1
            : e->pass == TA_PASS_BWD_DQ ? 16
                                        : 256;
    }
    for (i = 0; i < cells; ++i)
        TA_CHECK(grid[i] == 0 || grid[i] == 17, "bwd trace cell %zu: %d", i, grid[i]);
    TA_CHECK(tb->count == 2 * n, "bwd trace count %zu, fwd %zu", tb->count, n);
    free(grid);
}

/* ---------------------------------------------------------------------- */
/* One problem                                                             */
/* ---------------------------------------------------------------------- */

/* Other tiles. The contract (docs/design.md 3.5): only block_k may change bits,
 * and only the forward's (where the online softmax rescales); the backward's
 * sums run over full ranges in one accumulator, so from the same o and lse it
 * is bit-identical under any tiles. Agreement with the oracle must hold. */
static void check_other_blocks(ta_rng *r, tcase *tc, run_out *out2, const run_out *out) {
    const int32_t bk = tc->p.block_k ? tc->p.block_k : TA_BLOCK_DEFAULT;
    const int32_t bq = tc->p.block_q ? tc->p.block_q : TA_BLOCK_DEFAULT;
    ta_problem p2 = tc->p;
    /* step 1: another block_q only: forward bits unchanged */
    p2.block_q = bq / 2 < TA_BLOCK_MIN ? TA_BLOCK_MAX : bq / 2; /* bq may be 9..15 */
    run_fwd(r, tc, &p2, out2, 1, NULL);
    TA_CHECK(ta_oc_same_fwd(tc, out, out2), "forward bits depend on block_q");
    /* step 2: other tiles, backward from the same o and lse: bits unchanged */
    do {
        p2.block_q = ta_rng_int(r, TA_BLOCK_MIN, TA_BLOCK_MAX);
        p2.block_k = ta_rng_int(r, 0, 1) ? (int32_t)1 << ta_rng_int(r, 3, 8)
                                         : ta_rng_int(r, TA_BLOCK_MIN, TA_BLOCK_MAX);
    } while (p2.block_k == bk);
    run_bwd(r, tc, &p2, out->o, out->lse, out2, 1, NULL);
    TA_CHECK(ta_oc_same_dqkv(tc, out, out2), "backward bits depend on the tiles (same o, lse)");
    /* step 3: the forward with the other block_k: bits may change, agreement
     * may not (out2 now holds this o, lse and step 2's dq, dk, dv, which are
     * out's: the oracle's D_i was taken from out's stored o) */
    run_fwd(r, tc, &p2, out2, 1, NULL);
    compare_all(tc, out2, &worst_block_change[tc->p.dtype]);
    n_block_runs++;
    n_block_bits_changed += !ta_oc_same_outputs(tc, out, out2);
}

static void run_case(ta_rng *r, tcase *tc, int extra) {
    run_out out, out2;
    ta_trace tf, tb;
    memset(&tf, 0, sizeof tf);
    memset(&tb, 0, sizeof tb);
    tf.capacity = tb.capacity = (size_t)1 << 16;
    tf.entries = (ta_trace_entry *)malloc(tf.capacity * sizeof(ta_trace_entry));
    tb.entries = (ta_trace_entry *)malloc(tb.capacity * sizeof(ta_trace_entry));
    ta_oc_alloc_out(tc, &out);
    ta_oc_alloc_out(tc, &out2);
    /* step 1: reference (traced; poisoned workspace), oracle, comparison */
    run_ref(r, tc, &tc->p, &out, 0, &tf, &tb);
    ta_oc_run_oracle(tc, out.o);
    compare_all(tc, &out, &worst[tc->p.dtype]);
    digest_outputs(tc, &out);
    n_problems[tc->p.dtype]++;
    ta_oc_check_masked(tc, &out);
    if (tf.count <= tf.capacity && tb.count <= tb.capacity) check_traces(tc, &tf, &tb);
    /* step 2: determinism, other workspace garbage, no trace */
    run_ref(r, tc, &tc->p, &out2, 1, NULL, NULL);
    TA_CHECK(ta_oc_same_outputs(tc, &out, &out2), "second run differs (determinism / workspace)");
    /* step 3: lse not wanted: o unchanged */
    {
        run_out no_lse = out2;
        no_lse.lse = NULL;
        run_fwd(r, tc, &tc->p, &no_lse, 1, NULL);
        TA_CHECK(memcmp(out.o, out2.o, tc->n_o * tc->eb) == 0, "o differs with lse = NULL");
    }
    /* step 4: other tiles */
    if (extra) check_other_blocks(r, tc, &out2, &out);
    ta_oc_free_out(&out);
    ta_oc_free_out(&out2);
    free(tf.entries);
    free(tb.entries);
}

/* ---------------------------------------------------------------------- */
/* Finite differences on the oracle                                        */
/* ---------------------------------------------------------------------- */

static void fd_check(ta_rng *r, const ta_problem *p, const int32_t *seqlens, double *worst_fd) {
    double e[4];
    int t;
    ta_oc_fd_check(r, p, seqlens, e);
    for (t = 0; t < 3; ++t) {
        TA_CHECK(e[t] < 1e-6, "finite differences: d%c relative error %.3g", "qkv"[t], e[t]);
        if (e[t] > *worst_fd) *worst_fd = e[t];
    }
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
            ta_oc_shape_problem(&p, shapes[i], 0);
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

static void print_table(const char *title, const err_max *e, int cond, const long *counts) {
    ta_oc_print_table(title, e, T_COUNT, cond, counts);
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

/*
 * Part 4: rows whose first visited K tile holds only -inf scores (issue 15,
 * item 1). B = H = 1, S_q = 4, S_k = 16, D = 1, D_v = 2, f32, scale = 3e38,
 * q = 1, k[0..7] = -2 (scores -6e38: -inf), k[8..15] = 0 (scores 0): with
 * block_k = 8 the first tile is all -inf. The specified result (docs/
 * exactness.md, "Scores that overflow"): weights exp(-inf) = 0, never NaN, so
 * o = the mean of v[8..15] and lse = log 8; also causal with block_k 8 and 16.
 * On REF and the CPU backend, which must agree bit for bit.
 */
static void check_overflowing_rows(ta_rng *r) {
    const ta_backend be[2] = {TA_BACKEND_REF, TA_BACKEND_CPU};
    float q[4], k[16], v[32], o[2][8], lse[2][4];
    int32_t bk, causal, b, i, j;
    for (i = 0; i < 4; ++i) q[i] = 1.0f;
    for (j = 0; j < 16; ++j) k[j] = j < 8 ? -2.0f : 0.0f;
    ta_fill_uniform(r, v, TA_F32, 32, -1.0f, 1.0f);
    for (bk = 8; bk <= 16; bk += 8)
        for (causal = 0; causal < 2; ++causal) {
            ta_problem p;
            memset(&p, 0, sizeof p);
            p.batch = p.heads_q = p.heads_kv = 1;
            p.seq_q = 4;
            p.seq_k = 16;
            p.head_dim = 1;
            p.head_dim_v = 2;
            p.dtype = TA_F32;
            p.scale = 3e38f;
            p.block_k = bk;
            p.flags = causal ? TA_CAUSAL : 0u;
            for (b = 0; b < 2; ++b) {
                ta_fwd_args a;
                size_t bytes = 0;
                void *ws;
                ta_status st;
                if (!ta_backend_available(be[b])) continue;
                memset(&a, 0, sizeof a);
                a.q = q;
                a.k = k;
                a.v = v;
                a.o = o[b];
                a.lse = lse[b];
                memset(o[b], 0xFF, sizeof o[b]); /* NaN poison */
                memset(lse[b], 0xFF, sizeof lse[b]);
                TA_CHECK(ta_fwd_workspace_size(&p, be[b], &bytes) == TA_OK, "overflow: size");
                ws = bytes ? aligned_alloc(TA_WORKSPACE_ALIGN,
                                           (bytes + TA_WORKSPACE_ALIGN - 1) /
                                               TA_WORKSPACE_ALIGN * TA_WORKSPACE_ALIGN)
                           : NULL;
                st = ta_fwd(&p, be[b], &a, ws, bytes, NULL);
                free(ws);
                TA_CHECK(st == TA_OK, "overflow: ta_fwd on backend %d: %s", (int)be[b],
                         ta_status_string(st));
                for (i = 0; i < 4; ++i) {
                    /* row i sees keys [0, 16) (causal: [0, i + 12 + 1)); of those,
                     * keys 8.. carry weight 1 each */
                    const int32_t hi = causal ? i + 13 : 16;
                    double mean[2] = {0.0, 0.0};
                    int d;
                    for (j = 8; j < hi; ++j)
                        for (d = 0; d < 2; ++d) mean[d] += (double)v[2 * j + d];
                    for (d = 0; d < 2; ++d) {
                        const double want = mean[d] / (hi - 8), got = (double)o[b][2 * i + d];
                        TA_CHECK(fabs(got - want) <= 1e-6 * (1.0 + fabs(want)),
                                 "overflow (block_k %d, causal %d, backend %d): o[%d][%d] = %.9g, "
                                 "want %.9g",
                                 bk, causal, (int)be[b], i, d, got, want);
                    }
                    TA_CHECK(fabs((double)lse[b][i] - log((double)(hi - 8))) <= 1e-6,
                             "overflow (block_k %d, causal %d, backend %d): lse[%d] = %.9g, "
                             "want log %d",
                             bk, causal, (int)be[b], i, (double)lse[b][i], hi - 8);
                }
            }
            if (ta_backend_available(TA_BACKEND_CPU))
                TA_CHECK(memcmp(o[0], o[1], sizeof o[0]) == 0 &&
                             memcmp(lse[0], lse[1], sizeof lse[0]) == 0,
                         "overflow (block_k %d, causal %d): CPU differs from REF", bk, causal);
        }
    printf("rows whose first K tile is all -inf: o, lse as specified on REF and CPU\n");
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
    check_overflowing_rows(&rng);
    for (i = 0; i < count; ++i) {
        tcase tc;
        random_problem(&rng, &tc, work);
        if (quick) { /* every dtype, both masks, in a handful of problems */
            tc.p.dtype = (ta_dtype)(i % 3);
            tc.p.flags = ((i / 3) % 2 ? TA_CAUSAL : 0u) | (tc.p.flags & TA_WINDOW);
        }
        ta_oc_make_buffers(&rng, &tc);
        run_case(&rng, &tc, i % 3 == 0);
        ta_oc_free_case(&tc);
    }
    print_summary((double)(clock() - t0) / CLOCKS_PER_SEC);
    printf("%ld problems with a tile size that is no power of two (every problem's second "
           "tiles may be one too)\n",
           n_non_pow2);
    TA_CHECK(quick || n_non_pow2 >= count / 10, "only %ld problems with non-power-of-two tiles",
             n_non_pow2);
    return ta_test_finish("test_oracle_sdpa");
}
