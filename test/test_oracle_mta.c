/*
 * Reference MTA key-query conv (forward and backward) against the float64 oracle.
 *
 *   1. finite differences check the oracle's conv gradients (double): dconv_w,
 *      and dq, dk, dv through the conv, on small problems with masked rows,
 *      seqlens_k 0 and partial, GQA, S_q != S_k both ways, kernels wider and
 *      taller than the sequence
 *   2. many random MTA problems (fresh seed, printed): odd and prime lengths,
 *      S = 1, S smaller than the kernel, S not a multiple of the tile, S_q != S_k
 *      both ways, seqlens_k (0, partial, full), GQA, c_q 1..16, odd c_k 1..31
 *      (weighted to the typical 6 x 11 and 3 x 3), every dtype, default and
 *      explicit tiles (non-powers of two, and the smallest the halos allow),
 *      random kernels with mixed signs. Per problem:
 *        - outputs poisoned (NaN bytes), workspace from the size query, poisoned
 *        - forward (o, lse) and backward (dq, dk, dv, dconv_w) vs the oracle:
 *          max|ref - oracle| / max|oracle| per tensor (reported) and, per element,
 *          |ref - oracle| <= storage rounding + tol * magnitude (gated); see tol
 *        - fully masked rows: o = 0, lse = -inf, dq = 0; unseen keys: dk = dv = 0
 *        - determinism: a second run with other workspace garbage is memcmp-equal
 *        - the tile trace: the forward ran exactly the ta_tile_k_end schedule of
 *          the conv's forward tiling; the backward ran exactly the pairs its
 *          tiling keeps (every pass, every pair at least once, nothing else)
 *        - a third of them with other tiles: another block_q leaves the forward
 *          bitwise unchanged; the backward from the same o, lse leaves dq, dk, dv
 *          bitwise unchanged under any tiles (dconv_w's partial cuts move, so it
 *          may change bits but must still agree with the oracle)
 *   3. identity kernel (w[h][c_q-1][P] = 1, all else 0) against causal SDPA:
 *      o and lse bitwise equal to SDPA with block_k = B_k - 2P (the forward's
 *      effective columns, where its online softmax rescales) and the same
 *      block_q; dq, dk, dv bitwise equal to SDPA's backward (tiling-independent);
 *      dconv_w against the oracle.
 *   4. the maxima per dtype and tensor are printed at the end.
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

enum { T_COUNT = TA_OC_TENSORS }; /* o lse dq dk dv dconv_w */

/*
 * Error measures, as test_oracle_sdpa (docs/reference.md):
 *   rel  = max_i |ref_i - oracle_i| / max(max_i |oracle_i|, tiny)   (reported)
 *   cond = max_i (|ref_i - oracle_i| - rounding_i) / mag_i           (gated)
 * mag_i is the oracle's magnitude (oracle.h: every sum over absolute values,
 * through the conv with |w|). Gate per element:
 *     |ref_i - oracle_i| <= u_dt |oracle_i| + floor_dt + tol[tensor] * mag_i
 * and elements with mag_i = 0 (masked) must be exactly equal. lse and dconv_w
 * are f32 outputs (no storage rounding). The gate of o .. dv is test_oracle_sdpa's
 * (2e-6 = 34 u): the conv's c_q*c_k-term fmaf chains (C, dS) err by a few u of
 * the magnitude their |w| sums give. dconv_w sums up to B_r*B_c products per
 * tile partial in one accumulator; terms of one sign give an error of about
 * u sqrt(n/3) * magnitude (n up to 65536: 150 u), so its gate is 1e-5. Seen over
 * 20 default runs (about 4800 problems): cond <= 2.2e-7 for o .. dv, 1.0e-7 for
 * dconv_w.
 */
static const double tol_arith[T_COUNT] = {2e-6, 2e-6, 2e-6, 2e-6, 2e-6, 1e-5};
static err_max worst[3], worst_blocks[3], worst_identity[3];
static long n_problems[3], n_identity[3], n_block_runs, n_block_fwd_changed, n_block_dw_changed;
static long n_unsupported;
static double worst_fd;

/* What the random problems covered (printed, so a run shows its domain). */
typedef struct coverage {
    long s1, below_kernel, ragged, sq_ne_sk, seqlens, seqlens0, gqa, conv_6x11, conv_3x3;
    long block_default, block_min, block_pow2, block_other, multi_tile;
    int32_t max_s, max_cq, max_ck;
} coverage;
static coverage g_cov;

/* ---------------------------------------------------------------------- */
/* Geometry helpers                                                        */
/* ---------------------------------------------------------------------- */

/* The tile sizes the library resolves (its default when 0). */
static void resolved_blocks(const ta_problem *p, int32_t *bq, int32_t *bk) {
    ta_tiling_default_blocks(p->conv_q, p->conv_k, bq, bk);
    if (p->block_q) *bq = p->block_q;
    if (p->block_k) *bk = p->block_k;
}

static int make_tiling(const ta_problem *p, int pass, ta_tiling *t) {
    int32_t bq, bk;
    resolved_blocks(p, &bq, &bk);
    return ta_oc_make_tiling(p, bq, bk, pass, t);
}

static int32_t key_len_of(const tcase *tc, int32_t b) {
    return tc->seqlens ? tc->seqlens[b] : tc->p.seq_k;
}

/* Loaded extent of a tile, clamped to the sequence (the reference computes
 * scores only there; the rest is zero padding). */
static double clamped(int32_t begin, int32_t end, int32_t len) {
    const int32_t b = begin < 0 ? 0 : begin, e = end > len ? len : end;
    return e > b ? (double)(e - b) : 0.0;
}

/* Scalar work of one pass, in multiply-adds: per computed tile pair, its loaded
 * rows x columns x (D + D_v + c_q c_k), summed (halo recomputation included). */
static double pass_work(const ta_problem *p, const ta_tiling *t, double per_pair) {
    double sum = 0.0;
    int32_t qt, kt;
    for (qt = 0; qt < t->num_q_tiles; ++qt) {
        const double rows =
            clamped(ta_tile_row_load_begin(t, qt), ta_tile_row_load_end(t, qt), p->seq_q);
        const int32_t k_end = ta_tile_k_end(t, qt, p->seq_k);
        for (kt = 0; kt < k_end; ++kt)
            sum += rows *
                   clamped(ta_tile_col_load_begin(t, kt), ta_tile_col_load_end(t, kt), p->seq_k) *
                   per_pair;
    }
    return sum;
}

/* Estimated reference work of a forward + backward (one backward is roughly
 * twice a forward's pairs, with twice the matmuls). */
static double problem_work(const ta_problem *p) {
    ta_tiling tf, tb;
    const double per_pair =
        (double)p->head_dim + (double)p->head_dim_v + (double)p->conv_q * (double)p->conv_k;
    if (make_tiling(p, TA_TILING_FWD, &tf) != TA_OK || make_tiling(p, TA_TILING_BWD, &tb) != TA_OK)
        return 1e30;
    return (double)p->batch * (double)p->heads_q *
           (pass_work(p, &tf, per_pair) + 4.0 * pass_work(p, &tb, per_pair));
}

/* ---------------------------------------------------------------------- */
/* Comparison                                                              */
/* ---------------------------------------------------------------------- */

/* Compare a run with the oracle; fold the errors into acc. fwd/bwd: which
 * tensors (a forward-only or backward-only rerun compares its part). */
static void compare_all(const tcase *tc, const run_out *out, int fwd, int bwd, err_max *acc) {
    ta_oc_compare_all(tc, out, fwd, bwd, tol_arith, 1, acc);
}

/* ---------------------------------------------------------------------- */
/* Random problems                                                         */
/* ---------------------------------------------------------------------- */

/* c_q 1..16 and odd c_k 1..31, weighted to the paper's 6 x 11 and to 3 x 3. */
static void pick_conv(ta_rng *r, int32_t *cq, int32_t *ck) {
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 25) {
        *cq = 6, *ck = 11;
    } else if (c < 40) {
        *cq = 3, *ck = 3;
    } else if (c < 50) { /* small kernels, including the 1-wide ones */
        *cq = ta_rng_int(r, 1, 3), *ck = 2 * ta_rng_int(r, 0, 2) + 1;
    } else {
        *cq = ta_rng_int(r, 1, 16), *ck = 2 * ta_rng_int(r, 0, 15) + 1;
    }
}

/* Prime lengths pick_len draws from. */
static const int32_t primes[] = {2, 3, 5, 7, 11, 13, 17, 31, 53, 61, 67, 127, 131, 251, 257};

/* A length: 1, primes, shorter than the kernel, small, or long enough for
 * several tiles (up to max_len). */
static int32_t pick_len(ta_rng *r, int32_t max_len, int32_t kernel) {
    const int32_t c = ta_rng_int(r, 0, 99);
    int32_t len;
    if (c < 8) return 1;
    if (c < 22) {
        len = primes[ta_rng_int(r, 0, (int32_t)(sizeof primes / sizeof primes[0]) - 1)];
    } else if (c < 34) {
        len = ta_rng_int(r, 1, kernel > 1 ? kernel : 2); /* within the kernel's reach */
    } else if (c < 42) {
        len = ta_rng_int(r, 2, 24);
    } else {
        len = ta_rng_int(r, 25, max_len > 25 ? max_len : 25);
    }
    return len < max_len ? len : max_len;
}

/* A tile size >= min_b (the smallest the backward halos allow, or 8): the
 * default, the minimum, a power of two, or any other integer (mostly not a
 * power of two). */
static int32_t pick_block(ta_rng *r, int32_t min_b) {
    const int32_t c = ta_rng_int(r, 0, 99);
    int32_t b;
    if (min_b < TA_BLOCK_MIN) min_b = TA_BLOCK_MIN;
    if (c < 30) return 0;
    if (c < 45) return min_b;
    if (c < 60) {
        for (b = 8; b < min_b; b *= 2) {
        }
        return b > TA_BLOCK_MAX ? TA_BLOCK_MAX : b;
    }
    if (c < 85) return ta_rng_int(r, min_b, min_b + 40 < TA_BLOCK_MAX ? min_b + 40 : TA_BLOCK_MAX);
    return ta_rng_int(r, min_b, TA_BLOCK_MAX);
}

/* Smallest block_q / block_k both passes accept for the conv. */
static int32_t min_block_q(int32_t cq) { return 2 * (cq - 1) + 1; }
static int32_t min_block_k(int32_t ck) { return 4 * ((ck - 1) / 2) + 1; }

/* Random problem whose estimated reference work stays under `work`; small_tiles:
 * the smallest tiles the halos allow (several tiles even for short sequences). */
static void random_problem(ta_rng *r, tcase *tc, double work, int small_tiles) {
    ta_problem *p = &tc->p;
    const int32_t max_len = 300;
    static const int32_t dim_cuts[3] = {50, 75, 95};
    int32_t tries;
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    p->flags = TA_CAUSAL; /* MTA is causal */
    pick_conv(r, &p->conv_q, &p->conv_k);
    p->block_q = pick_block(r, min_block_q(p->conv_q));
    p->block_k = pick_block(r, min_block_k(p->conv_k));
    if (small_tiles) {
        p->block_q = min_block_q(p->conv_q) > TA_BLOCK_MIN ? min_block_q(p->conv_q) : TA_BLOCK_MIN;
        p->block_k = min_block_k(p->conv_k) > TA_BLOCK_MIN ? min_block_k(p->conv_k) : TA_BLOCK_MIN;
    }
    ta_oc_random_scale(r, p);
    p->seq_q = pick_len(r, max_len, p->conv_q);
    p->seq_k = ta_rng_int(r, 0, 9) < 3 ? p->seq_q : pick_len(r, max_len, p->conv_k);
    for (tries = 0; tries < 60 && problem_work(p) > work; ++tries) {
        /* over the work budget: narrower heads first (they do not change the
         * tiling), then shorter sequences */
        if (tries % 2 == 0 && (p->head_dim > 1 || p->head_dim_v > 1)) {
            p->head_dim = (p->head_dim + 1) / 2;
            p->head_dim_v = (p->head_dim_v + 1) / 2;
        } else {
            p->seq_q = p->seq_q * 3 / 4 > 1 ? p->seq_q * 3 / 4 : 1;
            p->seq_k = p->seq_k * 3 / 4 > 1 ? p->seq_k * 3 / 4 : 1;
        }
    }
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 25);
}

/* A kernel with mixed signs: uniform in [-a, a] (a scaled to the kernel's size,
 * so the convolved scores spread like raw ones, sometimes wider), or a near
 * identity (the centre tap of the last row near 1, small taps elsewhere). */
static void fill_kernel(ta_rng *r, tcase *tc) {
    const ta_problem *p = &tc->p;
    const int32_t cq = p->conv_q, ck = p->conv_k;
    const int kind = ta_rng_int(r, 0, 3);
    const float a = ta_rng_uniform(r, 0.3f, kind == 1 ? 4.0f : 1.5f) / sqrtf((float)(cq * ck));
    size_t h, i;
    for (h = 0; h < (size_t)p->heads_q; ++h) {
        float *w = tc->conv_w + h * (size_t)(cq * ck);
        for (i = 0; i < (size_t)(cq * ck); ++i)
            w[i] = ta_rng_uniform(r, -a, a) * (kind == 3 ? 0.2f : 1.0f);
        if (kind == 3) w[(cq - 1) * ck + (ck - 1) / 2] += ta_rng_uniform(r, 0.7f, 1.3f);
    }
}

/* The identity kernel: w[h][c_q-1][P] = 1, all else 0 (docs/design.md 2). */
static void identity_kernel(tcase *tc) {
    const int32_t cq = tc->p.conv_q, ck = tc->p.conv_k;
    size_t h;
    memset(tc->conv_w, 0, tc->n_w * sizeof(float));
    for (h = 0; h < (size_t)tc->p.heads_q; ++h)
        tc->conv_w[h * (size_t)(cq * ck) + (size_t)((cq - 1) * ck + (ck - 1) / 2)] = 1.0f;
}

/* Allocate and fill the inputs (kernel included); widen them for the oracle. */
static void make_buffers(ta_rng *r, tcase *tc, int identity) {
    ta_oc_make_buffers(r, tc);
    if (identity)
        identity_kernel(tc);
    else
        fill_kernel(r, tc);
    tc->ow = ta_oracle_widen(tc->conv_w, TA_F32, tc->n_w);
}

/* ---------------------------------------------------------------------- */
/* Structural checks                                                       */
/* ---------------------------------------------------------------------- */

/* Forward trace: exactly (b, h, qt, kt < k_end(qt)) of the conv's forward
 * tiling, in loop order (docs/mta.md). Backward: every entry is a pair its
 * tiling keeps (kt < k_end(qt) of the backward tiling), and every kept pair is
 * visited by each pass that appears (whatever the pass structure, none of the
 * backward's work may be skipped or done on a skipped pair). */
static void check_traces(const tcase *tc, const ta_trace *tf, const ta_trace *tb) {
    const ta_problem *p = &tc->p;
    ta_tiling t, u;
    int32_t b, h, qt, kt;
    size_t i, cells, kept = 0;
    unsigned *grid;
    unsigned passes = 0;
    if (make_tiling(p, TA_TILING_FWD, &t) != TA_OK || make_tiling(p, TA_TILING_BWD, &u) != TA_OK) {
        TA_CHECK(0, "ta_tiling_make refused an accepted problem");
        return;
    }
    (void)ta_oc_check_fwd_trace(tc, &t, tf);
    cells = (size_t)p->batch * (size_t)p->heads_q * (size_t)u.num_q_tiles * (size_t)u.num_k_tiles;
    grid = (unsigned *)calloc(cells, sizeof(unsigned));
    for (i = 0; i < tb->count; ++i) {
        const ta_trace_entry *e = &tb->entries[i];
        size_t c;
        if (e->batch < 0 || e->batch >= p->batch || e->head < 0 || e->head >= p->heads_q ||
            e->q_tile < 0 || e->q_tile >= u.num_q_tiles || e->k_tile < 0 ||
            e->k_tile < ta_tile_k_begin(&u, e->q_tile, key_len_of(tc, e->batch)) ||
            e->k_tile >= ta_tile_k_end(&u, e->q_tile, key_len_of(tc, e->batch)) ||
            (e->pass != TA_PASS_BWD_DKDV && e->pass != TA_PASS_BWD_DQ)) {
            TA_CHECK(0, "bwd trace entry %zu (b=%d h=%d qt=%d kt=%d pass=%d) is not a kept pair", i,
                     e->batch, e->head, e->q_tile, e->k_tile, e->pass);
            continue;
        }
        c = ta_oc_cell(p, &u, e->batch, e->head, e->q_tile, e->k_tile);
        grid[c] |= 1u << e->pass;
        passes |= 1u << e->pass;
    }
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (qt = 0; qt < u.num_q_tiles; ++qt)
                for (kt = ta_tile_k_begin(&u, qt, key_len_of(tc, b));
                     kt < ta_tile_k_end(&u, qt, key_len_of(tc, b)); ++kt, ++kept) {
                    const size_t c = ta_oc_cell(p, &u, b, h, qt, kt);
                    TA_CHECK(grid[c] == passes, "bwd pair b=%d h=%d qt=%d kt=%d: passes %x of %x",
                             b, h, qt, kt, grid[c], passes);
                }
    TA_CHECK(kept == 0 || passes != 0, "bwd trace empty");
    free(grid);
}

/* Other tiles (docs/design.md 3.5, docs/mta.md): rows are independent, so another
 * block_q leaves the forward's bits alone; dq, dk, dv sum over full ranges in
 * one accumulator, so from the same o and lse they are bitwise the same under
 * any tiles; dconv_w's partials are cut per tile pair and the forward's online
 * softmax rescales per effective key tile, so those may change bits (and must
 * still agree with the oracle). */
static void check_other_blocks(ta_rng *r, tcase *tc, run_out *out2, const run_out *out) {
    const int32_t min_q = min_block_q(tc->p.conv_q), min_k = min_block_k(tc->p.conv_k);
    int32_t bq, bk;
    ta_problem p2 = tc->p;
    ta_status st;
    resolved_blocks(&tc->p, &bq, &bk);
    /* step 1: another block_q only: forward bits unchanged */
    do
        p2.block_q = ta_rng_int(r, min_q > TA_BLOCK_MIN ? min_q : TA_BLOCK_MIN, TA_BLOCK_MAX);
    while (p2.block_q == bq && min_q < TA_BLOCK_MAX);
    st = ta_oc_run_fwd(r, tc, &p2, out2, 1, NULL);
    TA_CHECK(st == TA_OK && ta_oc_same_fwd(tc, out, out2),
             "forward bits depend on block_q (%d -> %d)", bq, p2.block_q);
    /* step 2: other tiles, backward from the same o and lse */
    p2.block_k = ta_rng_int(r, min_k > TA_BLOCK_MIN ? min_k : TA_BLOCK_MIN, TA_BLOCK_MAX);
    st = ta_oc_run_bwd(r, tc, &p2, out->o, out->lse, out2, 1, NULL);
    TA_CHECK(st == TA_OK && ta_oc_same_dqkv(tc, out, out2),
             "backward dq/dk/dv bits depend on the tiles (same o, lse)");
    n_block_dw_changed += memcmp(out->dw, out2->dw, tc->n_w * sizeof(float)) != 0;
    compare_all(tc, out2, 0, 1, &worst_blocks[tc->p.dtype]);
    /* step 3: the forward with the other tiles: agreement with the oracle */
    st = ta_oc_run_fwd(r, tc, &p2, out2, 1, NULL);
    TA_CHECK(st == TA_OK, "forward with other tiles: %s", ta_status_string(st));
    n_block_fwd_changed += !ta_oc_same_fwd(tc, out, out2);
    compare_all(tc, out2, 1, 0, &worst_blocks[tc->p.dtype]);
    n_block_runs++;
}

#define TRACE_CAP ((size_t)1 << 18)
static ta_trace_entry *g_trace_fwd, *g_trace_bwd;

static int is_pow2(int32_t x) { return x > 0 && (x & (x - 1)) == 0; }

static void count_block(int32_t b, int32_t min_b) {
    if (b == 0)
        g_cov.block_default++;
    else if (b == (min_b > TA_BLOCK_MIN ? min_b : TA_BLOCK_MIN))
        g_cov.block_min++;
    else if (is_pow2(b))
        g_cov.block_pow2++;
    else
        g_cov.block_other++;
}

static void count_coverage(const tcase *tc) {
    const ta_problem *p = &tc->p;
    ta_tiling tf, tb;
    int32_t b;
    g_cov.s1 += p->seq_q == 1 || p->seq_k == 1;
    g_cov.below_kernel += p->seq_q < p->conv_q || p->seq_k < p->conv_k;
    g_cov.sq_ne_sk += p->seq_q != p->seq_k;
    g_cov.gqa += p->heads_q != p->heads_kv;
    g_cov.conv_6x11 += p->conv_q == 6 && p->conv_k == 11;
    g_cov.conv_3x3 += p->conv_q == 3 && p->conv_k == 3;
    if (tc->seqlens) {
        g_cov.seqlens++;
        for (b = 0; b < p->batch; ++b)
            if (tc->seqlens[b] == 0) {
                g_cov.seqlens0++;
                break;
            }
    }
    count_block(p->block_q, min_block_q(p->conv_q));
    count_block(p->block_k, min_block_k(p->conv_k));
    if (make_tiling(p, TA_TILING_FWD, &tf) == TA_OK &&
        make_tiling(p, TA_TILING_BWD, &tb) == TA_OK) {
        g_cov.ragged += p->seq_q % tf.rows_eff != 0 || p->seq_k % tf.cols_eff != 0;
        g_cov.multi_tile += tb.num_q_tiles > 1 && tb.num_k_tiles > 1;
    }
    if (p->seq_q > g_cov.max_s) g_cov.max_s = p->seq_q;
    if (p->seq_k > g_cov.max_s) g_cov.max_s = p->seq_k;
    if (p->conv_q > g_cov.max_cq) g_cov.max_cq = p->conv_q;
    if (p->conv_k > g_cov.max_ck) g_cov.max_ck = p->conv_k;
}

/* One random problem: reference vs oracle and the structural checks. */
static void run_case(ta_rng *r, tcase *tc, int extra) {
    run_out out, out2;
    ta_trace tf, tb;
    ta_status st;
    char desc[256];
    memset(&tf, 0, sizeof tf);
    memset(&tb, 0, sizeof tb);
    tf.entries = g_trace_fwd, tb.entries = g_trace_bwd;
    tf.capacity = tb.capacity = TRACE_CAP;
    ta_oc_alloc_out(tc, &out);
    ta_oc_alloc_out(tc, &out2);
    /* step 1: reference (traced; poisoned workspace), oracle, comparison */
    st = ta_oc_run_step(r, tc, &tc->p, &out, 0, &tf, &tb);
    if (st != TA_OK) {
        ta_oc_describe(tc, desc, sizeof desc);
        TA_CHECK(0, "reference step: %s [%s]", ta_status_string(st), desc);
        n_unsupported += st == TA_ERR_UNSUPPORTED;
        ta_oc_free_out(&out);
        ta_oc_free_out(&out2);
        return;
    }
    ta_oc_run_oracle(tc, out.o);
    compare_all(tc, &out, 1, 1, &worst[tc->p.dtype]);
    n_problems[tc->p.dtype]++;
    count_coverage(tc);
    ta_oc_check_masked(tc, &out);
    if (tf.count <= tf.capacity && tb.count <= tb.capacity) check_traces(tc, &tf, &tb);
    /* step 2: determinism, other workspace garbage, no trace */
    st = ta_oc_run_step(r, tc, &tc->p, &out2, 1, NULL, NULL);
    TA_CHECK(st == TA_OK && ta_oc_same_outputs(tc, &out, &out2),
             "second run differs (determinism / workspace garbage)");
    /* step 3: other tiles */
    if (extra) check_other_blocks(r, tc, &out2, &out);
    ta_oc_free_out(&out);
    ta_oc_free_out(&out2);
}

/* ---------------------------------------------------------------------- */
/* Identity kernel == causal SDPA, bit for bit                             */
/* ---------------------------------------------------------------------- */

/* An MTA problem with the identity kernel and its SDPA twin: block_k of the
 * SDPA problem is the MTA forward's effective width B_k - 2P (>= 8, so B_k is
 * chosen >= 2P + 8), block_q the same. */
static void identity_problem(ta_rng *r, tcase *tc, double work, ta_problem *sdpa) {
    int32_t bq, bk, half;
    random_problem(r, tc, work, 0);
    half = (tc->p.conv_k - 1) / 2;
    if (ta_rng_int(r, 0, 3) == 0) {
        tc->p.block_q = tc->p.block_k = 0; /* the defaults: 64 x 64 for 6 x 11, SDPA 54 */
    } else {
        const int32_t lo =
            min_block_k(tc->p.conv_k) > 2 * half + 8 ? min_block_k(tc->p.conv_k) : 2 * half + 8;
        tc->p.block_k = ta_rng_int(r, 0, 3) == 0 ? lo : ta_rng_int(r, lo, TA_BLOCK_MAX);
    }
    resolved_blocks(&tc->p, &bq, &bk);
    if (bk - 2 * half < TA_BLOCK_MIN) tc->p.block_k = bk = 2 * half + TA_BLOCK_MIN;
    *sdpa = tc->p;
    sdpa->conv_q = sdpa->conv_k = 0;
    sdpa->block_q = bq;
    sdpa->block_k = bk - 2 * half;
}

static void run_identity(ta_rng *r, tcase *tc, const ta_problem *sdpa) {
    run_out mta, ref;
    ta_status st;
    char desc[256];
    ta_oc_alloc_out(tc, &mta);
    ta_oc_alloc_out(tc, &ref);
    ta_oc_describe(tc, desc, sizeof desc);
    st = ta_oc_run_step(r, tc, &tc->p, &mta, 0, NULL, NULL);
    TA_CHECK(st == TA_OK, "identity MTA: %s [%s]", ta_status_string(st), desc);
    if (st == TA_OK) {
        st = ta_oc_run_step(r, tc, sdpa, &ref, 1, NULL, NULL);
        TA_CHECK(st == TA_OK, "identity twin SDPA: %s [%s]", ta_status_string(st), desc);
        TA_CHECK(ta_oc_same_fwd(tc, &mta, &ref),
                 "identity MTA forward != SDPA with block_k %d [%s]", sdpa->block_k, desc);
        TA_CHECK(ta_oc_same_dqkv(tc, &mta, &ref), "identity MTA dq/dk/dv != SDPA [%s]", desc);
        ta_oc_run_oracle(tc, mta.o);
        compare_all(tc, &mta, 1, 1, &worst_identity[tc->p.dtype]);
        n_identity[tc->p.dtype]++;
    } else {
        n_unsupported += st == TA_ERR_UNSUPPORTED;
    }
    ta_oc_free_out(&mta);
    ta_oc_free_out(&ref);
}

/* ---------------------------------------------------------------------- */
/* Finite differences on the oracle's conv gradients                       */
/* ---------------------------------------------------------------------- */

static void fd_check(ta_rng *r, const ta_problem *p, const int32_t *seqlens) {
    double e[4];
    int t;
    ta_oc_fd_check(r, p, seqlens, e);
    for (t = 0; t < 4; ++t) {
        TA_CHECK(e[t] < 1e-6, "finite differences: %s relative error %.3g (conv %dx%d Sq=%d Sk=%d)",
                 t < 3 ? ta_oc_tensor_name[T_DQ + t] : "dconv_w", e[t], p->conv_q, p->conv_k,
                 p->seq_q, p->seq_k);
        if (e[t] > worst_fd) worst_fd = e[t];
    }
}

/* Small problems: masked rows (S_q > S_k), seqlens 0 and partial, GQA, kernels
 * taller / wider than the sequence, S_q < S_k. */
static int fd_suite(ta_rng *r, int quick) {
    static const int32_t shapes[][9] = {/* B, H, H_kv, S_q, S_k, D, D_v, c_q, c_k */
                                        {1, 2, 1, 5, 5, 3, 2, 3, 3}, {2, 2, 2, 7, 4, 2, 3, 2, 5},
                                        {1, 3, 1, 3, 8, 4, 1, 4, 3}, {2, 2, 1, 6, 6, 2, 2, 6, 11},
                                        {1, 1, 1, 4, 4, 3, 2, 1, 1}, {1, 2, 2, 2, 9, 2, 2, 5, 7}};
    const int n = quick ? 1 : (int)(sizeof shapes / sizeof shapes[0]);
    int i;
    for (i = 0; i < n; ++i) {
        ta_problem p;
        int32_t seqlens[2];
        ta_oc_shape_problem(&p, shapes[i], 1);
        p.flags = TA_CAUSAL;
        p.scale = i == 2 ? -1.3f : 0.0f;
        seqlens[0] = p.seq_k - 1 - i % 2;
        seqlens[1] = i == 1 ? 0 : p.seq_k;
        fd_check(r, &p, i % 2 ? seqlens : NULL);
    }
    return n;
}

/* ---------------------------------------------------------------------- */

static void print_table(const char *title, const err_max *e, int cond, const long *counts) {
    ta_oc_print_table(title, e, T_COUNT, cond, counts);
}

static void print_coverage(void) {
    const coverage *c = &g_cov;
    printf("random problems covered: S=1 %ld, S below the kernel %ld, S not a multiple of the "
           "tile %ld, S_q != S_k %ld, seqlens_k %ld (a 0 in %ld), GQA %ld, 6x11 %ld, 3x3 %ld, "
           ">1 x >1 backward tiles %ld; largest S %d, c_q %d, c_k %d\n"
           "  tiles (block_q and block_k): default %ld, smallest the halos allow %ld, other "
           "powers of two %ld, other sizes %ld\n",
           c->s1, c->below_kernel, c->ragged, c->sq_ne_sk, c->seqlens, c->seqlens0, c->gqa,
           c->conv_6x11, c->conv_3x3, c->multi_tile, c->max_s, c->max_cq, c->max_ck,
           c->block_default, c->block_min, c->block_pow2, c->block_other);
}

static void print_summary(int n_fd, double seconds) {
    print_coverage();
    printf("finite differences on the oracle: %d problems (dq, dk, dv, dconv_w), max relative "
           "error %.3g\n",
           n_fd, worst_fd);
    printf("errors vs the float64 oracle (maxima over all problems):\n");
    print_table("max|ref - oracle| / max|oracle|, per tensor:", worst, 0, n_problems);
    print_table("max (|ref - oracle| - storage rounding) / magnitude, per element (gated):", worst,
                1, n_problems);
    printf("  other tiles (%ld runs; forward bits changed in %ld, dconv_w bits in %ld):\n",
           n_block_runs, n_block_fwd_changed, n_block_dw_changed);
    print_table("max|ref - oracle| / max|oracle|:", worst_blocks, 0, NULL);
    print_table("max (|ref - oracle| - storage rounding) / magnitude (gated):", worst_blocks, 1,
                NULL);
    printf("identity kernel == causal SDPA (o, lse, dq, dk, dv bitwise): %ld problems\n",
           n_identity[0] + n_identity[1] + n_identity[2]);
    print_table("identity: max (|ref - oracle| - rounding) / magnitude (gated):", worst_identity, 1,
                n_identity);
    if (n_unsupported)
        printf("%ld problems returned TA_ERR_UNSUPPORTED (MTA not in the reference yet?)\n",
               n_unsupported);
    printf("time %.2f s\n", seconds);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const int count = quick ? 6 : 240, identities = quick ? 3 : 60;
    const double work = quick ? 1e6 : 3e7;
    const clock_t t0 = clock();
    ta_rng rng;
    int i, n_fd;
    ta_rng_seed(&rng, ta_test_seed("test_oracle_mta"));
    g_trace_fwd = (ta_trace_entry *)malloc(TRACE_CAP * sizeof(ta_trace_entry));
    g_trace_bwd = (ta_trace_entry *)malloc(TRACE_CAP * sizeof(ta_trace_entry));
    n_fd = fd_suite(&rng, quick);
    for (i = 0; i < count; ++i) {
        tcase tc;
        random_problem(&rng, &tc, work, quick && i % 2 == 0);
        if (quick) tc.p.dtype = (ta_dtype)(i % 3);
        make_buffers(&rng, &tc, 0);
        run_case(&rng, &tc, i % 3 == 0);
        ta_oc_free_case(&tc);
    }
    for (i = 0; i < identities; ++i) {
        tcase tc;
        ta_problem sdpa;
        identity_problem(&rng, &tc, work, &sdpa);
        if (quick) tc.p.dtype = sdpa.dtype = (ta_dtype)(i % 3);
        make_buffers(&rng, &tc, 1);
        run_identity(&rng, &tc, &sdpa);
        ta_oc_free_case(&tc);
    }
    free(g_trace_fwd);
    free(g_trace_bwd);
    print_summary(n_fd, (double)(clock() - t0) / CLOCKS_PER_SEC);
    return ta_test_finish("test_oracle_mta");
}
