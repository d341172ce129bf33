/*
 * CUDA backend, TA_PRECISION_EXACT: bit-identical to TA_BACKEND_REF (docs/design.md 3),
 * label cuda.
 *
 * For every problem: fresh random inputs (replayable: the run's seed and the
 * problem's index), REF forward and backward on the host, CUDA forward and
 * backward on the device, and memcmp of o, lse, dq, dk, dv (and, for the MTA
 * conv, dconv_w). The backward of both
 * backends takes REF's o and lse, so it is compared on equal inputs. Device
 * outputs are poisoned before every call (0xFF bytes, a NaN in every dtype;
 * then another pattern for a second run, which must give the same bytes: run
 * to run determinism), and the workspace is poisoned too. A forward without lse
 * must give the same o.
 *
 * The default run: 320 random SDPA problems covering every dtype, causal or not,
 * seqlens_k (NULL, partial, 0, full), GQA, S_q != S_k both ways, S = 1, odd and
 * prime lengths, D and D_v in [1, 256], default and explicit block sizes in
 * [8, 256] (not only powers of two), default, positive and negative scales,
 * the NULL and a created stream; plus fixed large problems (S up to 16384, and
 * more than 512 batch entries with seqlens_k, which the backend splits into
 * several launches); 320 random MTA problems (causal; c_q 1..16, odd c_k
 * 1..31, 6x11 and 3x3 often; explicit blocks that leave at least one effective
 * row/column in the backward; conv weights with mixed signs and exact zeros)
 * and fixed large MTA problems (S_k = 16384, S = 16384 with short seqlens_k,
 * S = 4096 at 6x11, the largest kernel, 600 batch entries). About 30% of the
 * random problems (SDPA and MTA) have a sliding window (TA_WINDOW; each bound
 * -1, 0, small, around the length or past it), and about 25% run on strided
 * device tensors: each of q, k, v, o, d_o, dq, dk, dv gets a [B, H, S, D] or
 * [B, S, H, D] layout with random gaps after each row, head and batch entry
 * (REF runs the contiguous call on the same values; the gathered device
 * elements must equal it bitwise, and every gap byte of a device output must
 * still hold the run's poison; input gaps hold NaN). Fixed windowed and
 * strided problems too (S = 16384 causal local, both-sided windows, MTA).
 * The REF side of the problems runs in parallel on the host
 * (OpenMP); each host thread drives the GPU on its own stream.
 * Split-K (docs/api.md, "Split-K and merge"): about 30% of the random problems
 * (SDPA and MTA; --splits: all) set num_splits to 1, 2, 3, 7, 1000 (past the key
 * tiles) or TA_SPLITS_AUTO, drawn from their own stream (the other draws of a
 * seed are unchanged), and REF runs the same num_splits; fixed decode problems
 * (S_q 1 to 16, S_k up to 16384, GQA, an MTA one) and four quick problems split
 * too. Then ta_merge: random parts (some rows -inf in some or every part), f32,
 * f16 and bf16, contiguous or [B, S, H, D] o, lse or none; CUDA's o and lse
 * memcmp-equal to REF's, device outputs poisoned first, gap bytes of a strided
 * o untouched; a pageable host part is TA_ERR_BAD_ARG with the outputs untouched.
 * Then MTA decode and chunked prefill with query history rows (docs/mta.md
 * section 2a): random MTA sequences run on CUDA in random chunks (q_history,
 * q_hist in place or a device copy, growing key range, seqlens, windows, GQA,
 * every dtype) give REF's full forward bit for bit; a pageable q_hist is
 * TA_ERR_BAD_ARG. Then 40 more (--quick: 3) with the rotary load
 * stage: each chunk passes its rows' absolute positions and the history rows
 * turn by row 0's table row - i (docs/rope.md), a quarter in fast mode (which
 * runs the exact kernels with the stage; the problems the fast MTA kernels
 * would take run in exact mode); pos_q NULL with history rows is
 * TA_ERR_BAD_ARG.
 * The rotary load stage (docs/rope.md): about 25% of the random problems (SDPA
 * and MTA; --rope: all), drawn from their own stream, turn q and k:
 * interleaved or half-split pairs, all or some of D / 2, tables from
 * ta_rope_table_1d (every frequency scaling) or ta_rope_table_2d (a grid, CLS
 * rows), random cos / sin or identity rows, NULL, random or decode-like
 * positions, padded row strides and per-kv-head tables (gaps of the tables
 * hold NaN); REF gets host copies, CUDA device copies; fixed rotary problems
 * too (the ViT geometry with a 2-D table, decode at S_k 4096, D 256 with D_v
 * 64, D 192, f32 with a window, MTA with Q tiles past 64 rows), and six of the
 * quick ones.
 * Then device bad-input cases: pageable host pointers (TA_ERR_BAD_ARG, outputs
 * untouched), mapped pinned host memory and managed memory (accepted, same
 * bits), workspace too small or misaligned, conv and trace (unsupported), and
 * the size queries. Then the non-finite cases of test/nonfinite.h (NaN and
 * +-inf scores, SDPA and MTA, issue 15's repro and random ones): CUDA == REF
 * but NaN payloads, and the documented rules (docs/exactness.md section 8).
 *
 *   test_cuda_equiv [--quick] [--problem N] [--count N] [--count-mta N] [--count-rb N]
 *                   [--mta | --sdpa] [--fwd-only | --bwd-only] [--window] [--strided]
 *                   [--splits] [--rope] [--rb-only]
 *
 * --quick: 18 small problems (10 SDPA, 4 MTA, then 2 SDPA and 2 MTA with a
 * window, 3 of them strided; 6 with the rotary stage) and the bad-input cases
 * (for compute-sanitizer).
 * --problem N: only problem N of the run (with TA_SEED to replay a failure).
 * --count N, --count-mta N: random SDPA / MTA problems (default 320 each).
 * --count-rb N: random SDPA problems in the register-blocked forward's domain
 * (f32, D = D_v in {32, 64, 96, 128}, block_k <= 64, no rotary stage;
 * random_rb_spec), default 60, after the others (not with --quick).
 * --rb-only: only the --count-rb problems, without the fixed problems and the
 *   extra cases (bad input, merge, history, non-finite): short sanitizer runs
 *   of the register-blocked kernels (compute-sanitizer --tool racecheck).
 * --mta, --sdpa: only the MTA / only the SDPA problems (and no bad-input cases).
 * --fwd-only, --bwd-only: compare only the forward / only the backward outputs.
 * --window, --strided: every random problem has a window / strided tensors.
 * --splits: every random problem has num_splits != 0.
 * --rope: every random problem with D >= 2 has the rotary stage.
 * Without a CUDA device: prints "no CUDA device: skipped" and exits 77.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "nonfinite.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

#define N_DEFAULT 320
#define N_RB_DEFAULT 60 /* --count-rb */

/* What to compare (--fwd-only, --bwd-only); set once in main. */
static int g_check_fwd = 1, g_check_bwd = 1;
/* Share of random problems with a window / strided tensors, percent (--window,
 * --strided: 100); set once in main. */
static int g_window_pct = 30, g_strided_pct = 25;
/* Share of random problems with split-K (--splits: 100); set once in main. */
static int g_splits_pct = 30;
/* Share of random problems with the rotary load stage (--rope: 100); set once in main. */
static int g_rope_pct = 25;

/* ---- Failure accounting, safe from several host threads ---- */
#ifdef _OPENMP
#define TA_OMP(x) _Pragma(x)
#else
#define TA_OMP(x)
#endif
static int g_fail;
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        int n_;                                                                                    \
        TA_OMP("omp atomic capture") n_ = g_fail++;                                                \
        if (n_ < 40) {                                                                             \
            TA_OMP("omp critical(print)") {                                                        \
                fprintf(stderr, "FAIL: ");                                                         \
                fprintf(stderr, __VA_ARGS__);                                                      \
                fputc('\n', stderr);                                                               \
            }                                                                                      \
        }                                                                                          \
    } while (0)


/* ---- Problems ---- */
typedef struct spec {
    ta_problem p;
    int seqlens_mode; /* 0: NULL, 1: random in [0, S_k], 2: all S_k, 3: random in [1, 300] */
    int use_stream;   /* 1: the thread's created stream, 0: NULL */
    int strided;      /* 1: device tensors in random strided layouts */
    float lo, hi;     /* input range */
    char tag[24];     /* what the problem is for */
    /* the rotary load stage (p.rope != 0): the table (ROPE_TAB_*), positions
     * (ROPE_POS_*), the 2-D grid's width and the tables' identity rows */
    int rope_table, rope_pos;
    int32_t rope_grid_w, rope_identity;
} spec;

enum { ROPE_TAB_1D = 1, ROPE_TAB_2D, ROPE_TAB_RANDOM, ROPE_TAB_IDENTITY };
enum { ROPE_POS_NONE, ROPE_POS_RANDOM, ROPE_POS_DECODE };

static const int32_t k_dims[] = {1,   2,   3,   4,   5,   7,   8,   15,  16,  17,  31,
                                 32,  33,  48,  63,  64,  65,  80,  96,  100, 112, 127,
                                 128, 129, 160, 191, 192, 193, 200, 224, 255, 256};
static const int32_t k_lens[] = {1,   2,   3,   5,   7,   8,   13,  17,  31,  37,
                                 61,  63,  64,  65,  97,  100, 127, 128, 129, 191,
                                 200, 251, 256, 257, 311, 383, 509, 520};
#define N_DIMS ((int32_t)(sizeof k_dims / sizeof k_dims[0]))
#define N_LENS ((int32_t)(sizeof k_lens / sizeof k_lens[0]))

static int32_t pick_len(ta_rng *r) {
    return ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 520) : k_lens[ta_rng_int(r, 0, N_LENS - 1)];
}
static int32_t pick_dim(ta_rng *r) {
    return ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 256) : k_dims[ta_rng_int(r, 0, N_DIMS - 1)];
}
static int32_t pick_block(ta_rng *r) {
    static const int32_t special[] = {8,  9,   13,  16,  31,  32,  54,  63, 64,
                                      65, 100, 127, 128, 129, 200, 255, 256};
    const int32_t k = ta_rng_int(r, 0, 9);
    if (k < 4) return 0; /* default */
    if (k < 7) return special[ta_rng_int(r, 0, (int32_t)(sizeof special / sizeof special[0]) - 1)];
    return ta_rng_int(r, TA_BLOCK_MIN, TA_BLOCK_MAX);
}

static double work(const ta_problem *p) {
    return (double)p->batch * p->heads_q * p->seq_q * p->seq_k * (p->head_dim + p->head_dim_v);
}

/* Split-K of random problem idx (salt: SDPA or MTA), from its own stream so the
 * problem's other draws stay those of the seed without split-K: with
 * probability g_splits_pct, num_splits 1, 2, 3, 7, 1000 or TA_SPLITS_AUTO. */
static void random_splits(uint64_t seed, int idx, uint64_t salt, spec *s) {
    static const int32_t k_splits[] = {1, 2, 3, 7, 1000, TA_SPLITS_AUTO};
    ta_rng r;
    ta_rng_seed(&r, seed ^ salt ^ (UINT64_C(0x94d049bb133111eb) * (uint64_t)(idx + 11)));
    if (ta_rng_int(&r, 0, 99) < g_splits_pct)
        s->p.num_splits = k_splits[ta_rng_int(&r, 0, (int32_t)(sizeof k_splits / 4) - 1)];
}

/* The rotary load stage of random problem idx (salt: SDPA or MTA), from its
 * own stream as split-K's: with probability g_rope_pct (and D >= 2), either
 * pair convention, all or some of D / 2 pairs, a table from ta_rope_table_1d
 * (a random frequency scaling), ta_rope_table_2d (a grid wide enough for the
 * longer side), random cos / sin values or identity rows; positions NULL
 * (token t: row t), random rows for both sides, or decode-like (q at
 * S_k - S_q + t, k NULL); a padded row stride and per-kv-head tables at
 * random. The tables are built in run_problem (rope_tables). */
static void random_rope(uint64_t seed, int idx, uint64_t salt, spec *s) {
    ta_problem *p = &s->p;
    const int32_t half_d = p->head_dim / 2;
    const int32_t seq_max = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    int32_t rs;
    ta_rng r;
    ta_rng_seed(&r, seed ^ salt ^ (UINT64_C(0xd6e8feb86659fd93) * (uint64_t)(idx + 5)));
    if (half_d < 1 || ta_rng_int(&r, 0, 99) >= g_rope_pct) return;
    p->rope = ta_rng_int(&r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    p->rope_pairs = ta_rng_int(&r, 0, 1) ? half_d : ta_rng_int(&r, 1, half_d);
    s->rope_table = ta_rng_int(&r, ROPE_TAB_1D, ROPE_TAB_IDENTITY);
    if (s->rope_table == ROPE_TAB_2D && (p->rope_pairs < 2 || p->rope_pairs % 2 != 0))
        s->rope_table = ROPE_TAB_1D; /* 2-D tables need an even pair count */
    s->rope_pos = ta_rng_int(&r, ROPE_POS_NONE, ROPE_POS_DECODE);
    s->rope_identity = ta_rng_int(&r, 0, 2); /* CLS / register rows */
    if (s->rope_table == ROPE_TAB_2D) {
        const int32_t patches = seq_max > s->rope_identity ? seq_max - s->rope_identity : 1;
        s->rope_grid_w = ta_rng_int(&r, 1, 32);
        p->rope_rows =
            s->rope_identity + (patches + s->rope_grid_w - 1) / s->rope_grid_w * s->rope_grid_w;
    } else {
        p->rope_rows = seq_max + ta_rng_int(&r, 0, 40);
    }
    p->rope_row_stride = ta_rng_int(&r, 0, 2) == 0 ? p->rope_pairs + ta_rng_int(&r, 1, 5) : 0;
    rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    p->rope_head_stride = ta_rng_int(&r, 0, 2) == 0 ? p->rope_rows * rs + ta_rng_int(&r, 0, 7) : 0;
}

/* Random problem number idx of the run (deterministic in seed and idx). */
static void random_spec(uint64_t seed, int idx, spec *s) {
    ta_rng r;
    ta_problem *p = &s->p;
    int32_t group;
    memset(s, 0, sizeof *s);
    ta_rng_seed(&r, seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(idx + 1)));
    do {
        p->dtype = (ta_dtype)ta_rng_int(&r, 0, 2);
        /* fast mode runs the exact kernels for f32 SDPA (f16/bf16 SDPA takes the
         * tensor-core forward: test_cuda_fast) */
        p->precision = ta_rng_int(&r, 0, 9) == 0 && p->dtype == TA_F32 ? TA_PRECISION_FAST
                                                                        : TA_PRECISION_EXACT;
        p->flags = ta_rng_int(&r, 0, 1) ? TA_CAUSAL : 0u;
        p->batch = ta_rng_int(&r, 1, 3);
        p->heads_kv = ta_rng_int(&r, 1, 3);
        group = ta_rng_int(&r, 0, 2) == 0 ? 1 : ta_rng_int(&r, 1, 4);
        p->heads_q = p->heads_kv * group;
        p->seq_q = pick_len(&r);
        p->seq_k = ta_rng_int(&r, 0, 3) == 0 ? p->seq_q : pick_len(&r);
        p->head_dim = pick_dim(&r);
        p->head_dim_v = ta_rng_int(&r, 0, 2) == 0 ? p->head_dim : pick_dim(&r);
        p->block_q = pick_block(&r);
        p->block_k = pick_block(&r);
        p->scale = ta_rng_int(&r, 0, 2) == 0 ? ta_rng_uniform(&r, -2.0f, 2.0f) : 0.0f;
    } while (work(p) > 2.5e7);
    s->seqlens_mode = ta_rng_int(&r, 0, 2);
    s->use_stream = ta_rng_int(&r, 0, 2) != 0;
    ta_test_random_window(&r, p, g_window_pct);
    s->strided = ta_rng_int(&r, 0, 99) < g_strided_pct;
    s->lo = -1.0f;
    s->hi = 1.0f;
    if (ta_rng_int(&r, 0, 4) == 0) { /* peaky softmax: exp underflows to 0 for some keys */
        s->lo = -4.0f;
        s->hi = 4.0f;
    }
    snprintf(s->tag, sizeof s->tag, "random");
    random_splits(seed, idx, 0, s);
    random_rope(seed, idx, 0, s);
}

/* Random problem idx moved into the register-blocked forward's domain
 * (cuda/ta_cuda_sdpa_fwd.cu, ta_cuda_fwd_rb_ok): f32, exact, D = D_v in {32,
 * 64, 96, 128}, block_k 0 (the default, 64) or in [8, 64], no rotary stage;
 * the mask, GQA, seqlens_k, windows, split-K and strides stay random_spec's
 * draws (strided layouts off 16 bytes run the general kernel). */
static void random_rb_spec(uint64_t seed, int idx, spec *s) {
    static const int32_t dims[] = {32, 64, 96, 128};
    ta_problem *p = &s->p;
    ta_rng r;
    random_spec(seed, 100000 + idx, s);
    ta_rng_seed(&r, seed ^ (UINT64_C(0x5851f42d4c957f2d) * (uint64_t)(idx + 3)));
    p->dtype = TA_F32;
    p->precision = TA_PRECISION_EXACT;
    p->head_dim = p->head_dim_v = dims[ta_rng_int(&r, 0, 3)];
    p->block_k = ta_rng_int(&r, 0, 1) ? 0 : ta_rng_int(&r, 8, 64);
    p->rope = p->rope_pairs = p->rope_rows = p->rope_row_stride = p->rope_head_stride = 0;
    s->rope_table = s->rope_pos = 0;
    while (work(p) > 2.5e7) {
        p->seq_q = p->seq_q / 2 + 1;
        p->seq_k = p->seq_k / 2 + 1;
    }
    snprintf(s->tag, sizeof s->tag, "register-blocked");
}

/* An MTA tile size: 0 (the default), or one in [TA_BLOCK_MIN, TA_BLOCK_MAX]
 * with more than `halo` (both sides of the backward's halo) so that every
 * backward tile has an effective row/column. */
static int32_t pick_mta_block(ta_rng *r, int32_t halo) {
    static const int32_t special[] = {64, 100, 128, 129, 200, 256};
    int32_t lo = halo + 1;
    const int32_t k = ta_rng_int(r, 0, 9);
    lo = lo < TA_BLOCK_MIN ? TA_BLOCK_MIN : lo;
    if (k < 4) return 0;
    if (k < 6) {
        const int32_t b =
            special[ta_rng_int(r, 0, (int32_t)(sizeof special / sizeof special[0]) - 1)];
        if (b >= lo) return b;
    }
    return ta_rng_int(r, lo, lo + 60 < TA_BLOCK_MAX ? lo + 60 : TA_BLOCK_MAX);
}

/* Random MTA problem number idx of the run (deterministic in seed and idx):
 * causal, conv c_q 1..16, odd c_k 1..31 (6x11 and 3x3 often). */
static void random_mta_spec(uint64_t seed, int idx, spec *s) {
    ta_rng r;
    ta_problem *p = &s->p;
    int32_t group, c;
    memset(s, 0, sizeof *s);
    ta_rng_seed(&r, seed ^ (UINT64_C(0xc2b2ae3d27d4eb4f) * (uint64_t)(idx + 1)));
    do {
        p->dtype = (ta_dtype)ta_rng_int(&r, 0, 2);
        p->precision = ta_rng_int(&r, 0, 9) == 0 ? TA_PRECISION_FAST : TA_PRECISION_EXACT;
        p->flags = TA_CAUSAL;
        p->batch = ta_rng_int(&r, 1, 3);
        p->heads_kv = ta_rng_int(&r, 1, 3);
        group = ta_rng_int(&r, 0, 2) == 0 ? 1 : ta_rng_int(&r, 1, 4);
        p->heads_q = p->heads_kv * group;
        c = ta_rng_int(&r, 0, 9);
        if (c < 3) {
            p->conv_q = 6, p->conv_k = 11;
        } else if (c < 5) {
            p->conv_q = 3, p->conv_k = 3;
        } else if (c < 6) {
            p->conv_q = ta_rng_int(&r, 0, 1) ? 1 : TA_CONV_Q_MAX;
            p->conv_k = ta_rng_int(&r, 0, 1) ? 1 : TA_CONV_K_MAX;
        } else {
            p->conv_q = ta_rng_int(&r, 1, TA_CONV_Q_MAX);
            p->conv_k = 2 * ta_rng_int(&r, 0, (TA_CONV_K_MAX - 1) / 2) + 1;
        }
        p->seq_q = pick_len(&r);
        p->seq_k = ta_rng_int(&r, 0, 3) == 0 ? p->seq_q : pick_len(&r);
        p->head_dim = pick_dim(&r);
        p->head_dim_v = ta_rng_int(&r, 0, 2) == 0 ? p->head_dim : pick_dim(&r);
        p->block_q = pick_mta_block(&r, 2 * (p->conv_q - 1));
        p->block_k = pick_mta_block(&r, 4 * ((p->conv_k - 1) / 2));
        p->scale = ta_rng_int(&r, 0, 2) == 0 ? ta_rng_uniform(&r, -2.0f, 2.0f) : 0.0f;
    } while (work(p) * (1.0 + p->conv_q * p->conv_k / 32.0) > 1.5e7);
    s->seqlens_mode = ta_rng_int(&r, 0, 2);
    s->use_stream = ta_rng_int(&r, 0, 2) != 0;
    ta_test_random_window(&r, p, g_window_pct);
    s->strided = ta_rng_int(&r, 0, 99) < g_strided_pct;
    s->lo = -1.0f;
    s->hi = 1.0f;
    if (ta_rng_int(&r, 0, 4) == 0) {
        s->lo = -3.0f;
        s->hi = 3.0f;
    }
    snprintf(s->tag, sizeof s->tag, "mta");
    random_splits(seed, idx, UINT64_C(0x5bd1e995), s);
    random_rope(seed, idx, UINT64_C(0x5bd1e995), s);
    /* the fast MTA kernels take f16 / bf16 with D = D_v in {64, 96, 128}, no
     * rotary stage or pairs in whole 16-byte chunks (not bit-identical to
     * REF: test_cuda_fast_mta checks them); those run in exact mode here */
    if (p->precision == TA_PRECISION_FAST && p->dtype != TA_F32 && p->head_dim == p->head_dim_v &&
        (p->head_dim == 64 || p->head_dim == 96 || p->head_dim == 128) &&
        (p->rope == TA_ROPE_NONE || p->rope_pairs % (p->rope == TA_ROPE_HALF ? 8 : 4) == 0))
        p->precision = TA_PRECISION_EXACT;
}

/* A fixed problem: the tables below. */
typedef struct fixed_problem {
    int32_t b, h, hkv, sq, sk, d, dv, bq, bk, cq, ck;
    ta_dtype dt;
    uint32_t flags;
    int seqlens; /* spec.seqlens_mode */
    float scale;
    const char *tag;
} fixed_problem;

/* Specs from a table; the created stream on every other one. Returns n. */
static int specs_from_table(const fixed_problem *k, int n, spec *out) {
    int i;
    for (i = 0; i < n; ++i) {
        spec *s = &out[i];
        memset(s, 0, sizeof *s);
        s->p.batch = k[i].b;
        s->p.heads_q = k[i].h;
        s->p.heads_kv = k[i].hkv;
        s->p.seq_q = k[i].sq;
        s->p.seq_k = k[i].sk;
        s->p.head_dim = k[i].d;
        s->p.head_dim_v = k[i].dv;
        s->p.block_q = k[i].bq;
        s->p.block_k = k[i].bk;
        s->p.conv_q = k[i].cq;
        s->p.conv_k = k[i].ck;
        s->p.dtype = k[i].dt;
        s->p.flags = k[i].flags;
        s->p.scale = k[i].scale;
        s->seqlens_mode = k[i].seqlens;
        s->use_stream = i % 2;
        s->lo = -1.0f;
        s->hi = 1.0f;
        snprintf(s->tag, sizeof s->tag, "%s", k[i].tag);
    }
    return n;
}
#define SPECS_FROM(table, out) specs_from_table(table, (int)(sizeof table / sizeof table[0]), out)

/* The window bounds and layout of table specs: row i of `win` is
 * {window_left, window_right, strided} for out[i] (whose flags carry TA_WINDOW). */
static void specs_set_windows(spec *out, const int32_t (*win)[3], int n) {
    int i;
    for (i = 0; i < n; ++i) {
        out[i].p.window_left = win[i][0];
        out[i].p.window_right = win[i][1];
        out[i].strided = win[i][2];
    }
}

/* Fixed windowed and strided problems: causal local attention at S = 16384,
 * both-sided windows with seqlens_k and GQA, the MTA conv with a window. */
static int special_window_specs(spec *out, int with_sdpa, int with_mta) {
    static const fixed_problem k_sdpa[] = {
        {1, 2, 1, 16384, 16384, 64, 64, 0, 0, 0, 0, TA_BF16, TA_CAUSAL | TA_WINDOW, 0, 0.0f,
         "S 16k causal window"},
        {2, 4, 2, 3000, 2000, 96, 64, 0, 100, 0, 0, TA_F16, TA_WINDOW, 1, 0.0f,
         "window both sides"},
    };
    static const int32_t w_sdpa[][3] = {{256, -1, 0}, {100, 50, 1}};
    static const fixed_problem k_mta[] = {
        {1, 2, 1, 4096, 4096, 32, 32, 0, 0, 6, 11, TA_F32, TA_CAUSAL | TA_WINDOW, 0, 0.0f,
         "MTA S 4k window"},
        {2, 4, 2, 700, 900, 96, 64, 0, 0, 6, 11, TA_F16, TA_CAUSAL | TA_WINDOW, 1, 0.0f,
         "MTA GQA window"},
    };
    static const int32_t w_mta[][3] = {{200, -1, 1}, {37, 3, 1}};
    int n = 0;
    if (with_sdpa) {
        specs_set_windows(out + n, w_sdpa, SPECS_FROM(k_sdpa, out + n));
        n += 2;
    }
    if (with_mta) {
        specs_set_windows(out + n, w_mta, SPECS_FROM(k_mta, out + n));
        n += 2;
    }
    return n;
}

/* Large and special MTA problems (S_k up to 16384; the REF side is slow, so
 * the long ones are narrow or see few keys). */
static int special_mta_specs(spec *out) {
    static const fixed_problem k[] = {
        {1, 2, 1, 64, 16384, 16, 16, 0, 0, 6, 11, TA_F32, TA_CAUSAL, 0, 0.0f, "MTA S_k 16k"},
        {1, 1, 1, 16384, 16384, 8, 8, 0, 0, 6, 11, TA_BF16, TA_CAUSAL, 3, 0.0f,
         "MTA S 16k seqlens<=300"},
        {1, 1, 1, 4096, 4096, 32, 32, 0, 0, 6, 11, TA_F32, TA_CAUSAL, 0, 0.0f, "MTA S 4k 6x11"},
        {1, 1, 1, 1024, 1024, 128, 128, 0, 0, 16, 31, TA_BF16, TA_CAUSAL, 1, 0.0f, "MTA 16x31"},
        {2, 4, 2, 700, 900, 96, 64, 0, 0, 6, 11, TA_F16, TA_CAUSAL, 1, 0.0f, "MTA GQA D 96"},
        {1, 2, 2, 512, 512, 256, 256, 256, 256, 6, 11, TA_F32, TA_CAUSAL, 0, 0.0f,
         "MTA D 256 block 256"},
        {600, 1, 1, 5, 7, 8, 8, 0, 0, 2, 3, TA_F32, TA_CAUSAL, 1, 0.0f, "MTA B 600 seqlens"},
    };
    return SPECS_FROM(k, out);
}

/* Split-K decode and chunk problems: a few query rows against long keys, GQA,
 * seqlens_k, causal, the MTA conv; num_splits TA_SPLITS_AUTO or fixed. */
static int special_splitk_specs(spec *out, int with_sdpa, int with_mta) {
    static const fixed_problem k_sdpa[] = {
        {1, 32, 8, 1, 16384, 128, 128, 0, 0, 0, 0, TA_BF16, 0, 0, 0.0f, "decode split auto"},
        {2, 8, 2, 16, 8192, 128, 128, 0, 0, 0, 0, TA_F16, TA_CAUSAL, 1, 0.0f, "16 q split 16"},
        {3, 4, 4, 3, 5000, 64, 96, 0, 100, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f, "3 q split 7"},
    };
    static const int32_t n_sdpa[] = {TA_SPLITS_AUTO, 16, 7};
    static const fixed_problem k_mta[] = {
        {1, 4, 2, 8, 4096, 64, 64, 0, 0, 6, 11, TA_BF16, TA_CAUSAL, 1, 0.0f, "MTA decode split 8"},
    };
    int n = 0, i;
    if (with_sdpa) {
        SPECS_FROM(k_sdpa, out);
        for (i = 0; i < 3; ++i)
            out[i].p.num_splits = n_sdpa[i];
        n += 3;
    }
    if (with_mta) {
        SPECS_FROM(k_mta, out + n);
        out[n].p.num_splits = 8;
        n += 1;
    }
    return n;
}

/* The rotary stage of a fixed problem: convention, pairs, table kind,
 * positions, identity rows, the 2-D grid's width (its rows cover the longer
 * side) and per-kv-head tables (a padded head stride). */
static void spec_set_rope(spec *s, int32_t rope, int32_t pairs, int table, int pos,
                          int32_t identity, int32_t grid_w, int per_head) {
    ta_problem *p = &s->p;
    const int32_t seq_max = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    p->rope = rope;
    p->rope_pairs = pairs;
    s->rope_table = table;
    s->rope_pos = pos;
    s->rope_identity = identity;
    s->rope_grid_w = grid_w;
    if (table == ROPE_TAB_2D) {
        const int32_t patches = seq_max > identity ? seq_max - identity : 1;
        p->rope_rows = identity + (patches + grid_w - 1) / grid_w * grid_w;
    } else {
        p->rope_rows = seq_max + 3;
    }
    p->rope_head_stride = per_head ? p->rope_rows * pairs + 1 : 0;
}

/* Fixed rotary problems: the ViT shape's geometry (197 tokens, a 14 x 14
 * grid after a CLS row, interleaved, 2-D table), decode against 4k keys
 * (half-split, Llama's base, positions), D = 256 with D_v = 64 (the dk/dv
 * kernel's four dk slots in one group), D = 192 half-split, f32 with per-head
 * tables and a window; MTA with Q tiles past 64 rows (the dq kernel's
 * groups of whole row units) and a 2-D table. */
static int special_rope_specs(spec *out, int with_sdpa, int with_mta) {
    static const fixed_problem k_sdpa[] = {
        {2, 6, 6, 197, 197, 64, 64, 0, 0, 0, 0, TA_BF16, 0, 0, 0.0f, "rope ViT 2-D"},
        {2, 8, 2, 4, 4096, 128, 128, 0, 0, 0, 0, TA_F16, TA_CAUSAL, 1, 0.0f, "rope decode"},
        {1, 2, 1, 130, 150, 256, 64, 0, 0, 0, 0, TA_BF16, TA_CAUSAL, 1, 0.0f, "rope D 256 D_v 64"},
        {1, 3, 3, 100, 77, 192, 192, 0, 100, 0, 0, TA_F16, 0, 0, -0.3f, "rope D 192 half"},
        {2, 4, 2, 300, 300, 40, 24, 0, 0, 0, 0, TA_F32, TA_CAUSAL | TA_WINDOW, 1, 0.0f,
         "rope f32 window"},
    };
    static const fixed_problem k_mta[] = {
        {1, 2, 1, 300, 300, 160, 64, 200, 0, 6, 11, TA_F32, TA_CAUSAL, 1, 0.0f, "rope MTA bq 200"},
        {1, 2, 2, 260, 260, 128, 32, 256, 0, 3, 3, TA_BF16, TA_CAUSAL, 0, 0.0f, "rope MTA bq 256"},
        {2, 2, 1, 197, 197, 64, 64, 0, 0, 6, 11, TA_F16, TA_CAUSAL, 0, 0.0f, "rope MTA 2-D"},
    };
    int n = 0;
    if (with_sdpa) {
        SPECS_FROM(k_sdpa, out);
        spec_set_rope(&out[0], TA_ROPE_INTERLEAVED, 32, ROPE_TAB_2D, ROPE_POS_NONE, 1, 14, 0);
        spec_set_rope(&out[1], TA_ROPE_HALF, 64, ROPE_TAB_1D, ROPE_POS_DECODE, 0, 0, 0);
        spec_set_rope(&out[2], TA_ROPE_HALF, 128, ROPE_TAB_1D, ROPE_POS_RANDOM, 0, 0, 1);
        spec_set_rope(&out[3], TA_ROPE_HALF, 90, ROPE_TAB_RANDOM, ROPE_POS_NONE, 0, 0, 1);
        spec_set_rope(&out[4], TA_ROPE_INTERLEAVED, 17, ROPE_TAB_1D, ROPE_POS_RANDOM, 2, 0, 1);
        out[4].p.window_left = 50;
        out[4].p.window_right = 7;
        out[4].strided = 1;
        n += 5;
    }
    if (with_mta) {
        SPECS_FROM(k_mta, out + n);
        spec_set_rope(&out[n], TA_ROPE_HALF, 48, ROPE_TAB_1D, ROPE_POS_RANDOM, 0, 0, 1);
        spec_set_rope(&out[n + 1], TA_ROPE_INTERLEAVED, 60, ROPE_TAB_RANDOM, ROPE_POS_DECODE, 0, 0,
                      0);
        spec_set_rope(&out[n + 2], TA_ROPE_INTERLEAVED, 32, ROPE_TAB_2D, ROPE_POS_NONE, 1, 14, 1);
        out[n + 2].strided = 1;
        n += 3;
    }
    return n;
}

/* Large and special problems, first in the schedule (the REF side is slow). */
static int special_specs(spec *out) {
    static const fixed_problem k[] = {
        {1, 1, 1, 16384, 16384, 8, 8, 0, 0, 0, 0, TA_F32, TA_CAUSAL, 0, 0.0f, "S 16k causal"},
        {1, 1, 1, 16384, 4096, 4, 4, 0, 200, 0, 0, TA_BF16, 0, 1, 0.0f, "S_q 16k x S_k 4k"},
        {1, 4, 2, 1, 16384, 64, 64, 0, 0, 0, 0, TA_F16, 0, 1, 0.0f, "decode S_k 16k"},
        {1, 2, 1, 16384, 37, 32, 16, 0, 13, 0, 0, TA_F16, TA_CAUSAL, 0, 0.0f, "S_q 16k x S_k 37"},
        {1, 1, 1, 8192, 8192, 16, 24, 64, 100, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f,
         "S 8k causal seqlens"},
        {1, 1, 1, 2048, 2048, 256, 256, 256, 256, 0, 0, TA_BF16, TA_CAUSAL, 1, 0.0f,
         "D 256 block 256"},
        {600, 1, 1, 3, 5, 8, 8, 0, 0, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f, "B 600 seqlens"},
        {1100, 2, 1, 2, 9, 4, 3, 0, 8, 0, 0, TA_F16, 0, 1, 0.0f, "B 1100 seqlens"},
    };
    return SPECS_FROM(k, out);
}

/* --quick: small problems that still touch every feature (10 SDPA, 4 MTA,
 * then 2 SDPA and 2 MTA with windows, 3 of them strided). */
static int quick_specs(spec *out) {
    static const fixed_problem k[] = {
        {2, 4, 2, 37, 53, 16, 8, 0, 0, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f, "quick"},
        {1, 2, 2, 70, 33, 64, 64, 16, 16, 0, 0, TA_F16, 0, 1, 0.0f, "quick"},
        {1, 3, 1, 65, 129, 96, 80, 32, 100, 0, 0, TA_BF16, TA_CAUSAL, 0, -0.7f, "quick"},
        {2, 1, 1, 1, 77, 1, 1, 0, 8, 0, 0, TA_F32, 0, 0, 0.0f, "quick"},
        {1, 2, 1, 129, 20, 3, 5, 9, 13, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f, "quick"},
        {1, 1, 1, 40, 300, 256, 256, 64, 256, 0, 0, TA_BF16, TA_CAUSAL, 1, 0.0f, "quick"},
        {1, 2, 2, 64, 64, 200, 130, 0, 0, 0, 0, TA_F16, 0, 2, 1.5f, "quick"},
        {3, 2, 2, 17, 17, 33, 31, 8, 31, 0, 0, TA_F32, TA_CAUSAL, 1, 0.0f, "quick"},
        {1, 1, 1, 100, 100, 128, 128, 0, 0, 0, 0, TA_F32, TA_CAUSAL, 0, 0.0f, "quick"},
        {2, 4, 4, 50, 90, 192, 64, 0, 63, 0, 0, TA_F16, TA_CAUSAL, 1, 0.0f, "quick"},
        {2, 4, 2, 37, 53, 16, 8, 0, 0, 6, 11, TA_F32, TA_CAUSAL, 1, 0.0f, "quick mta"},
        {1, 2, 1, 70, 40, 64, 48, 13, 29, 3, 3, TA_BF16, TA_CAUSAL, 0, -0.5f, "quick mta"},
        {1, 1, 1, 45, 45, 8, 8, 31, 61, 16, 31, TA_F16, TA_CAUSAL, 2, 0.0f, "quick mta"},
        {3, 2, 2, 9, 130, 33, 33, 0, 8, 1, 1, TA_F32, TA_CAUSAL, 1, 0.0f, "quick mta"},
        {2, 4, 2, 70, 90, 40, 24, 0, 16, 0, 0, TA_F32, TA_CAUSAL | TA_WINDOW, 1, 0.0f,
         "quick window"},
        {1, 2, 1, 100, 60, 64, 130, 32, 24, 0, 0, TA_BF16, TA_WINDOW, 0, 0.0f, "quick window"},
        {2, 2, 1, 80, 96, 32, 16, 0, 0, 6, 11, TA_F16, TA_CAUSAL | TA_WINDOW, 1, 0.0f,
         "quick mta window"},
        {1, 2, 2, 50, 50, 8, 8, 0, 0, 3, 3, TA_F32, TA_CAUSAL | TA_WINDOW, 0, 0.0f,
         "quick mta window"},
    };
    static const int32_t win[][3] = {{5, -1, 1}, {7, 3, 1}, {20, 0, 1}, {0, -1, 0}};
    const int n = SPECS_FROM(k, out);
    specs_set_windows(out + n - 4, win, 4);
    out[0].p.num_splits = 3;               /* split-K: SDPA, a window, MTA */
    out[3].p.num_splits = 7;               /* decode row, 10 key tiles */
    out[10].p.num_splits = TA_SPLITS_AUTO; /* (1 here: too few keys) */
    out[14].p.num_splits = 2;
    out[16].p.num_splits = 1000;
    /* the rotary stage: SDPA f16 / bf16 / f32 (split-K, window), MTA bf16 / f16 */
    spec_set_rope(&out[1], TA_ROPE_INTERLEAVED, 32, ROPE_TAB_1D, ROPE_POS_RANDOM, 1, 0, 1);
    spec_set_rope(&out[2], TA_ROPE_HALF, 40, ROPE_TAB_2D, ROPE_POS_NONE, 1, 8, 0);
    spec_set_rope(&out[7], TA_ROPE_HALF, 16, ROPE_TAB_RANDOM, ROPE_POS_DECODE, 0, 0, 0);
    spec_set_rope(&out[14], TA_ROPE_INTERLEAVED, 20, ROPE_TAB_IDENTITY, ROPE_POS_NONE, 0, 0, 0);
    spec_set_rope(&out[11], TA_ROPE_HALF, 32, ROPE_TAB_1D, ROPE_POS_NONE, 0, 0, 1);
    spec_set_rope(&out[16], TA_ROPE_INTERLEAVED, 16, ROPE_TAB_2D, ROPE_POS_RANDOM, 2, 5, 1);
    return n;
}

static void describe(const spec *s, int idx, char *buf, size_t n) {
    const ta_problem *p = &s->p;
    static const char *const dt[] = {"f32", "f16", "bf16"};
    snprintf(buf, n,
             "#%d [%s] B=%d H=%d H_kv=%d S_q=%d S_k=%d D=%d D_v=%d %s %s window=%s(%d,%d) "
             "conv=%dx%d seqlens=%d bq=%d bk=%d scale=%g stream=%d strided=%d range=%g "
             "num_splits=%d rope=%d pairs=%d rows=%d row_stride=%d head_stride=%d table=%d "
             "pos=%d",
             idx, s->tag, (int)p->batch, (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q,
             (int)p->seq_k, (int)p->head_dim, (int)p->head_dim_v, dt[p->dtype],
             (p->flags & TA_CAUSAL) ? "causal" : "full", (p->flags & TA_WINDOW) ? "on" : "off",
             (int)p->window_left, (int)p->window_right, (int)p->conv_q, (int)p->conv_k,
             s->seqlens_mode, (int)p->block_q, (int)p->block_k, (double)p->scale, s->use_stream,
             s->strided, (double)s->hi, (int)p->num_splits, (int)p->rope, (int)p->rope_pairs,
             (int)p->rope_rows, (int)p->rope_row_stride, (int)p->rope_head_stride, s->rope_table,
             s->rope_pos);
}

/* ---- One problem ---- */

/* Element counts of the tensors. */
typedef struct sizes {
    size_t q, k, v, o, lse, eb;
    size_t w; /* conv_w / dconv_w: H * c_q * c_k (0 without a conv) */
} sizes;

static sizes sizes_of(const ta_problem *p) {
    sizes z;
    const size_t bh = (size_t)p->batch * (size_t)p->heads_q;
    const size_t bhkv = (size_t)p->batch * (size_t)p->heads_kv;
    z.lse = bh * (size_t)p->seq_q;
    z.q = z.lse * (size_t)p->head_dim;
    z.o = z.lse * (size_t)p->head_dim_v;
    z.k = bhkv * (size_t)p->seq_k * (size_t)p->head_dim;
    z.v = bhkv * (size_t)p->seq_k * (size_t)p->head_dim_v;
    z.eb = ta_dtype_size(p->dtype);
    z.w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    return z;
}

/* memcmp of a device result (copied to host) with REF; prints the first
 * differing elements. Returns 1 if equal. */
static int same_bytes(const char *what, const char *desc, const void *ref, const void *got,
                      size_t n, size_t eb) {
    size_t i, shown = 0, count = 0;
    if (memcmp(ref, got, n * eb) == 0) return 1;
    for (i = 0; i < n; ++i) {
        if (memcmp((const char *)ref + i * eb, (const char *)got + i * eb, eb) == 0) continue;
        ++count;
        if (shown < 4) {
            uint32_t a = 0, b = 0;
            memcpy(&a, (const char *)ref + i * eb, eb);
            memcpy(&b, (const char *)got + i * eb, eb);
            FAIL("%s: %s element %zu: ref bits 0x%08x, cuda bits 0x%08x", desc, what, i,
                 (unsigned)a, (unsigned)b);
            ++shown;
        }
    }
    FAIL("%s: %s differs in %zu of %zu elements", desc, what, count, n);
    return 0;
}

typedef struct dev_bufs {
    void *q, *k, *v, *d_o, *o, *o_in, *dq, *dk, *dv, *ws;
    float *lse, *lse_in, *w, *dw; /* w, dw: MTA only (NULL otherwise) */
} dev_bufs;

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

/* ---- Device layouts ---- */

/* The tensors of a call; X_O serves the forward's o and the backward's o input. */
enum { X_Q, X_K, X_V, X_O, X_DO, X_DQ, X_DK, X_DV, X_COUNT };

/* The device buffer dev (x's layout) = the contiguous host tensor src; gaps
 * hold 0xFF bytes (NaN in every dtype: reading one would show). stage:
 * extent * eb bytes of host scratch. */
static void upload(void *dev, const void *src, const ta_test_layout *x, size_t eb, void *stage) {
    memset(stage, 0xFF, x->extent * eb);
    ta_test_layout_scatter(stage, src, x, eb);
    CUDA_OK(cudaMemcpy(dev, stage, x->extent * eb, cudaMemcpyHostToDevice));
}

/* Copy the device output dev (x's layout, filled with the byte `poison`
 * before the call) back: every gap byte must still be the poison, and the
 * gathered elements must equal ref bit for bit. stage: extent * eb bytes,
 * got: the contiguous tensor's bytes. Returns 1 if both hold. */
static int check_output(const char *what, const char *desc, const void *ref, const void *dev,
                        const ta_test_layout *x, size_t eb, int poison, void *stage, void *got) {
    const size_t n = (size_t)x->n_b * (size_t)x->n_h * (size_t)x->n_s * (size_t)x->dim;
    size_t bad;
    CUDA_OK(cudaMemcpy(stage, dev, x->extent * eb, cudaMemcpyDeviceToHost));
    bad = ta_test_layout_bad_gaps(stage, x, eb, poison);
    if (bad) FAIL("%s: %s: %zu gap bytes between the elements were written", desc, what, bad);
    ta_test_layout_gather(got, stage, x, eb);
    return same_bytes(what, desc, ref, got, n, eb) && bad == 0;
}

/* ---- The rotary load stage's tables and positions ---- */

/* Host tables and positions of a problem with p.rope (or device copies). */
typedef struct rope_bufs {
    float *cos, *sin;       /* [tables][rope_rows][row_stride]; gaps hold NaN */
    int32_t *pos_q, *pos_k; /* [B, S_q], [B, S_k] or NULL */
    size_t n_tab;           /* floats of each table array */
} rope_bufs;

/* The tables of kv head g's slice (tables: one per kv head with a head
 * stride), by s->rope_table; the builders must accept their configuration. */
static void rope_fill_table(const spec *s, ta_rng *r, int32_t g, float *c, float *sn,
                            const char *desc) {
    const ta_problem *p = &s->p;
    const int32_t rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    int32_t t, i;
    ta_status st = TA_OK;
    if (s->rope_table == ROPE_TAB_1D) {
        static const double bases[] = {0.0, 100.0, 10000.0, 500000.0};
        ta_rope_1d cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_pairs = p->rope_pairs;
        cfg.rows = p->rope_rows;
        cfg.row_stride = p->rope_row_stride;
        cfg.identity_rows = s->rope_identity < p->rope_rows ? s->rope_identity : p->rope_rows;
        cfg.base = bases[ta_rng_int(r, 0, 3)] * (double)(g + 1);
        cfg.pos_scale = ta_rng_int(r, 0, 3) == 0 ? 0.5 : 0.0;
        cfg.pos_offset = ta_rng_int(r, 0, 3) == 0 ? (double)ta_rng_int(r, -5, 100) : (double)g;
        cfg.scaling = ta_rng_int(r, TA_ROPE_SCALE_NONE, TA_ROPE_SCALE_YARN);
        if (cfg.scaling == TA_ROPE_SCALE_NTK && cfg.n_pairs < 2) cfg.scaling = TA_ROPE_SCALE_NONE;
        cfg.factor = cfg.scaling != TA_ROPE_SCALE_NONE ? (double)ta_rng_int(r, 1, 8) : 0.0;
        cfg.orig_max_pos = ta_rng_int(r, 16, 4096);
        st = ta_rope_table_1d(&cfg, c, sn);
    } else if (s->rope_table == ROPE_TAB_2D) {
        ta_rope_2d cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_pairs = p->rope_pairs;
        cfg.grid_w = s->rope_grid_w;
        cfg.grid_h = (p->rope_rows - s->rope_identity) / s->rope_grid_w;
        cfg.row_stride = p->rope_row_stride;
        cfg.identity_rows = s->rope_identity;
        cfg.y_first = ta_rng_int(r, 0, 1);
        cfg.base = ta_rng_int(r, 0, 1) ? 0.0 : 10000.0 + 10.0 * g;
        cfg.scale_h = cfg.scale_w = ta_rng_int(r, 0, 2) == 0 ? 0.75 : 0.0;
        st = ta_rope_table_2d(&cfg, c, sn);
    } else {
        for (t = 0; t < p->rope_rows; ++t)
            for (i = 0; i < p->rope_pairs; ++i) {
                const size_t at = (size_t)t * (size_t)rs + (size_t)i;
                const int id = s->rope_table == ROPE_TAB_IDENTITY;
                c[at] = id ? 1.0f : ta_rng_uniform(r, -1.5f, 1.5f);
                sn[at] = id ? 0.0f : ta_rng_uniform(r, -1.5f, 1.5f);
            }
    }
    if (st != TA_OK) FAIL("%s: rope table %d: %s", desc, s->rope_table, ta_status_string(st));
}

/* Host tables and positions of s (p.rope != 0) from r. */
static void rope_make(const spec *s, ta_rng *r, rope_bufs *h, const char *desc) {
    const ta_problem *p = &s->p;
    const int32_t rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    const int32_t tables = p->rope_head_stride ? p->heads_kv : 1;
    const size_t nq = (size_t)p->batch * (size_t)p->seq_q, nk = (size_t)p->batch * (size_t)p->seq_k;
    int32_t g;
    size_t i;
    memset(h, 0, sizeof *h);
    h->n_tab =
        (size_t)(tables - 1) * (size_t)p->rope_head_stride + (size_t)p->rope_rows * (size_t)rs;
    h->cos = (float *)malloc(h->n_tab * sizeof(float));
    h->sin = (float *)malloc(h->n_tab * sizeof(float));
    if (!h->cos || !h->sin) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    memset(h->cos, 0xFF, h->n_tab * sizeof(float)); /* NaN: entries no kernel may read */
    memset(h->sin, 0xFF, h->n_tab * sizeof(float));
    for (g = 0; g < tables; ++g)
        rope_fill_table(s, r, g, h->cos + (size_t)g * (size_t)p->rope_head_stride,
                        h->sin + (size_t)g * (size_t)p->rope_head_stride, desc);
    if (s->rope_pos == ROPE_POS_NONE) return;
    h->pos_q = (int32_t *)malloc(nq * sizeof(int32_t));
    if (s->rope_pos == ROPE_POS_RANDOM) h->pos_k = (int32_t *)malloc(nk * sizeof(int32_t));
    if (!h->pos_q || (s->rope_pos == ROPE_POS_RANDOM && !h->pos_k)) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (i = 0; i < nq; ++i) {
        const int32_t t = (int32_t)(i % (size_t)p->seq_q), at = p->seq_k - p->seq_q + t;
        h->pos_q[i] = s->rope_pos == ROPE_POS_RANDOM ? ta_rng_int(r, 0, p->rope_rows - 1)
                      : at < 0                       ? 0
                      : at >= p->rope_rows           ? p->rope_rows - 1
                                                     : at;
    }
    for (i = 0; h->pos_k && i < nk; ++i)
        h->pos_k[i] = ta_rng_int(r, 0, p->rope_rows - 1);
}

/* Device copies of h's arrays (NULL stays NULL). */
static void rope_upload(const rope_bufs *h, const ta_problem *p, rope_bufs *d) {
    const size_t nq = (size_t)p->batch * (size_t)p->seq_q, nk = (size_t)p->batch * (size_t)p->seq_k;
    memset(d, 0, sizeof *d);
    d->n_tab = h->n_tab;
    d->cos = (float *)dev_alloc(h->n_tab * sizeof(float));
    d->sin = (float *)dev_alloc(h->n_tab * sizeof(float));
    CUDA_OK(cudaMemcpy(d->cos, h->cos, h->n_tab * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d->sin, h->sin, h->n_tab * sizeof(float), cudaMemcpyHostToDevice));
    if (h->pos_q) {
        d->pos_q = (int32_t *)dev_alloc(nq * sizeof(int32_t));
        CUDA_OK(cudaMemcpy(d->pos_q, h->pos_q, nq * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
    if (h->pos_k) {
        d->pos_k = (int32_t *)dev_alloc(nk * sizeof(int32_t));
        CUDA_OK(cudaMemcpy(d->pos_k, h->pos_k, nk * sizeof(int32_t), cudaMemcpyHostToDevice));
    }
}

static ta_rope_args rope_args_of(const rope_bufs *b) {
    const ta_rope_args a = {b->cos, b->sin, b->pos_q, b->pos_k};
    return a;
}

static void rope_free(rope_bufs *b, int dev) {
    void *x[4];
    int i;
    x[0] = b->cos;
    x[1] = b->sin;
    x[2] = b->pos_q;
    x[3] = b->pos_k;
    for (i = 0; i < 4; ++i) {
        if (dev && x[i]) CUDA_OK(cudaFree(x[i]));
        if (!dev) free(x[i]);
    }
    memset(b, 0, sizeof *b);
}

/* Runs problem s; returns 1 if every check passed. */
static int run_problem(const spec *s, int idx, uint64_t seed, cudaStream_t thread_stream) {
    const ta_problem *p = &s->p;
    const sizes z = sizes_of(p);
    const cudaStream_t st = s->use_stream ? thread_stream : (cudaStream_t)0;
    char desc[520];
    int32_t *seqlens = NULL;
    void *q, *k, *v, *d_o, *o_ref, *dq_ref, *dk_ref, *dv_ref, *ws_host, *got, *stage = NULL;
    float *lse_ref, *lse_got, *w = NULL, *dw_ref = NULL, *dw_got = NULL;
    size_t fwd_ref_bytes = 0, bwd_ref_bytes = 0, fwd_bytes = 0, bwd_bytes = 0, ws_bytes, max_n;
    size_t max_extent = 0;
    ta_test_layout lay[X_COUNT];
    dev_bufs d;
    rope_bufs rope_h, rope_d; /* the rotary stage's (p.rope != 0), host and device */
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_rng r;
    ta_status stt;
    int ok = 1, run;
    describe(s, idx, desc, sizeof desc);
    ta_rng_seed(&r, seed + UINT64_C(0x51ed27) * (uint64_t)(idx + 7));

    /* host inputs and REF outputs */
    q = malloc(z.q * z.eb);
    k = malloc(z.k * z.eb);
    v = malloc(z.v * z.eb);
    d_o = malloc(z.o * z.eb);
    o_ref = malloc(z.o * z.eb);
    dq_ref = malloc(z.q * z.eb);
    dk_ref = malloc(z.k * z.eb);
    dv_ref = malloc(z.v * z.eb);
    lse_ref = (float *)malloc(z.lse * sizeof(float));
    lse_got = (float *)malloc(z.lse * sizeof(float));
    max_n = z.q > z.k ? z.q : z.k;
    max_n = max_n > z.v ? max_n : z.v;
    max_n = max_n > z.o ? max_n : z.o;
    got = malloc(max_n * z.eb);
    if (!q || !k || !v || !d_o || !o_ref || !dq_ref || !dk_ref || !dv_ref || !lse_ref || !lse_got ||
        !got) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    ta_fill_uniform(&r, q, p->dtype, z.q, s->lo, s->hi);
    ta_fill_uniform(&r, k, p->dtype, z.k, s->lo, s->hi);
    ta_fill_uniform(&r, v, p->dtype, z.v, -1.0f, 1.0f);
    ta_fill_uniform(&r, d_o, p->dtype, z.o, -1.0f, 1.0f);
    if (z.w) { /* conv weights: mixed signs, some exact zeros */
        size_t i;
        w = (float *)malloc(z.w * sizeof(float));
        dw_ref = (float *)malloc(z.w * sizeof(float));
        dw_got = (float *)malloc(z.w * sizeof(float));
        if (!w || !dw_ref || !dw_got) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        ta_fill_uniform(&r, w, TA_F32, z.w, -1.0f, 1.0f);
        for (i = 0; i < z.w / 8; ++i)
            w[(size_t)ta_rng_u64(&r) % z.w] = 0.0f;
    }
    if (s->seqlens_mode) {
        int32_t b;
        seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(&r, 0, 5);
            seqlens[b] = s->seqlens_mode == 2   ? p->seq_k
                         : s->seqlens_mode == 3 ? ta_rng_int(&r, 1, p->seq_k < 300 ? p->seq_k : 300)
                         : c == 0               ? 0
                         : c == 1               ? p->seq_k
                                                : ta_rng_int(&r, 0, p->seq_k);
        }
    }

    memset(&rope_h, 0, sizeof rope_h);
    memset(&rope_d, 0, sizeof rope_d);
    if (p->rope != TA_ROPE_NONE) { /* from its own stream: the draws above stay the seed's */
        ta_rng rr;
        ta_rng_seed(&rr, seed ^ (UINT64_C(0x726f7065) * (uint64_t)(idx + 9)));
        rope_make(s, &rr, &rope_h, desc);
    }

    /* REF */
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    stt = ta_fwd_workspace_size(p, TA_BACKEND_REF, &fwd_ref_bytes);
    if (stt == TA_OK) stt = ta_bwd_workspace_size(p, TA_BACKEND_REF, &bwd_ref_bytes);
    if (stt != TA_OK) {
        FAIL("%s: REF size query: %s", desc, ta_status_string(stt));
        return 0;
    }
    ws_host = ta_test_alloc(fwd_ref_bytes > bwd_ref_bytes ? fwd_ref_bytes : bwd_ref_bytes);
    fa.q = q;
    fa.k = k;
    fa.v = v;
    fa.seqlens_k = seqlens;
    fa.conv_w = w;
    fa.o = o_ref;
    fa.lse = lse_ref;
    fa.rope = rope_args_of(&rope_h);
    stt = ta_fwd(p, TA_BACKEND_REF, &fa, ws_host, fwd_ref_bytes, NULL);
    if (stt != TA_OK) FAIL("%s: REF fwd: %s", desc, ta_status_string(stt));
    ba.q = q;
    ba.k = k;
    ba.v = v;
    ba.o = o_ref;
    ba.d_o = d_o;
    ba.lse = lse_ref;
    ba.seqlens_k = seqlens;
    ba.dq = dq_ref;
    ba.dk = dk_ref;
    ba.dv = dv_ref;
    ba.conv_w = w;
    ba.dconv_w = dw_ref;
    ba.rope = rope_args_of(&rope_h);
    if (stt == TA_OK) stt = ta_bwd(p, TA_BACKEND_REF, &ba, ws_host, bwd_ref_bytes, NULL);
    if (stt != TA_OK) FAIL("%s: REF bwd: %s", desc, ta_status_string(stt));
    ta_test_free(ws_host);
    if (stt != TA_OK) ok = 0;

    /* CUDA: size queries, device buffers */
    if (ok) {
        stt = ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &fwd_bytes);
        if (stt == TA_OK) stt = ta_bwd_workspace_size(p, TA_BACKEND_CUDA, &bwd_bytes);
        if (stt != TA_OK) {
            FAIL("%s: CUDA size query: %s", desc, ta_status_string(stt));
            ok = 0;
        }
    }
    if (ok) { /* the device layouts: a random strided one per tensor, or contiguous */
        ta_rng rl;
        int x;
        ta_rng_seed(&rl, seed ^ (UINT64_C(0x2545f4914f6cdd1d) * (uint64_t)(idx + 3)));
        ta_test_layout_make(&rl, &lay[X_Q], p->batch, p->heads_q, p->seq_q, p->head_dim, s->strided);
        ta_test_layout_make(&rl, &lay[X_K], p->batch, p->heads_kv, p->seq_k, p->head_dim, s->strided);
        ta_test_layout_make(&rl, &lay[X_V], p->batch, p->heads_kv, p->seq_k, p->head_dim_v, s->strided);
        ta_test_layout_make(&rl, &lay[X_O], p->batch, p->heads_q, p->seq_q, p->head_dim_v, s->strided);
        ta_test_layout_make(&rl, &lay[X_DO], p->batch, p->heads_q, p->seq_q, p->head_dim_v, s->strided);
        ta_test_layout_make(&rl, &lay[X_DQ], p->batch, p->heads_q, p->seq_q, p->head_dim, s->strided);
        ta_test_layout_make(&rl, &lay[X_DK], p->batch, p->heads_kv, p->seq_k, p->head_dim, s->strided);
        ta_test_layout_make(&rl, &lay[X_DV], p->batch, p->heads_kv, p->seq_k, p->head_dim_v, s->strided);
        for (x = 0; x < X_COUNT; ++x)
            if (lay[x].extent > max_extent) max_extent = lay[x].extent;
        stage = malloc(max_extent * z.eb);
        if (!stage) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
    }
    if (ok) {
        ws_bytes = fwd_bytes > bwd_bytes ? fwd_bytes : bwd_bytes;
        d.q = dev_alloc(lay[X_Q].extent * z.eb);
        d.k = dev_alloc(lay[X_K].extent * z.eb);
        d.v = dev_alloc(lay[X_V].extent * z.eb);
        d.d_o = dev_alloc(lay[X_DO].extent * z.eb);
        d.o = dev_alloc(lay[X_O].extent * z.eb);
        d.o_in = dev_alloc(lay[X_O].extent * z.eb);
        d.dq = dev_alloc(lay[X_DQ].extent * z.eb);
        d.dk = dev_alloc(lay[X_DK].extent * z.eb);
        d.dv = dev_alloc(lay[X_DV].extent * z.eb);
        d.ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
        d.lse = (float *)dev_alloc(z.lse * sizeof(float));
        d.lse_in = (float *)dev_alloc(z.lse * sizeof(float));
        d.w = z.w ? (float *)dev_alloc(z.w * sizeof(float)) : NULL;
        d.dw = z.w ? (float *)dev_alloc(z.w * sizeof(float)) : NULL;
        if (z.w) CUDA_OK(cudaMemcpy(d.w, w, z.w * sizeof(float), cudaMemcpyHostToDevice));
        upload(d.q, q, &lay[X_Q], z.eb, stage);
        upload(d.k, k, &lay[X_K], z.eb, stage);
        upload(d.v, v, &lay[X_V], z.eb, stage);
        upload(d.d_o, d_o, &lay[X_DO], z.eb, stage);
        upload(d.o_in, o_ref, &lay[X_O], z.eb, stage);
        CUDA_OK(cudaMemcpy(d.lse_in, lse_ref, z.lse * sizeof(float), cudaMemcpyHostToDevice));
        if (p->rope != TA_ROPE_NONE) rope_upload(&rope_h, p, &rope_d);

        /* two runs with different poison; each must equal REF (so also each other) */
        for (run = 0; run < 2 && ok; ++run) {
            const int poison = run == 0 ? 0xFF : 0x7F;
            if (g_check_fwd) {
                memset(&fa, 0, sizeof fa);
                fa.q = d.q;
                fa.k = d.k;
                fa.v = d.v;
                fa.seqlens_k = seqlens;
                fa.conv_w = d.w;
                fa.o = d.o;
                fa.lse = d.lse;
                fa.q_strides = lay[X_Q].arg;
                fa.k_strides = lay[X_K].arg;
                fa.v_strides = lay[X_V].arg;
                fa.o_strides = lay[X_O].arg;
                fa.rope = rope_args_of(&rope_d);
                CUDA_OK(cudaMemsetAsync(d.o, poison, lay[X_O].extent * z.eb, st));
                CUDA_OK(cudaMemsetAsync(d.lse, poison, z.lse * sizeof(float), st));
                if (d.ws) CUDA_OK(cudaMemsetAsync(d.ws, poison ^ 0x5A, ws_bytes, st));
                stt = ta_fwd(p, TA_BACKEND_CUDA, &fa, d.ws, ws_bytes, (void *)st);
                if (stt != TA_OK) {
                    FAIL("%s: CUDA fwd: %s", desc, ta_status_string(stt));
                    ok = 0;
                    break;
                }
                CUDA_OK(cudaStreamSynchronize(st));
                ok &= check_output(run ? "o (run 2)" : "o", desc, o_ref, d.o, &lay[X_O], z.eb,
                                   poison, stage, got);
                CUDA_OK(cudaMemcpy(lse_got, d.lse, z.lse * sizeof(float), cudaMemcpyDeviceToHost));
                ok &= same_bytes(run ? "lse (run 2)" : "lse", desc, lse_ref, lse_got, z.lse,
                                 sizeof(float));
                if (run == 1) { /* without lse: the same o */
                    fa.lse = NULL;
                    CUDA_OK(cudaMemsetAsync(d.o, 0xFF, lay[X_O].extent * z.eb, st));
                    stt = ta_fwd(p, TA_BACKEND_CUDA, &fa, d.ws, ws_bytes, (void *)st);
                    if (stt != TA_OK)
                        FAIL("%s: CUDA fwd, lse NULL: %s", desc, ta_status_string(stt));
                    CUDA_OK(cudaStreamSynchronize(st));
                    ok &= check_output("o (lse NULL)", desc, o_ref, d.o, &lay[X_O], z.eb, 0xFF,
                                       stage, got);
                }
            }

            if (!g_check_bwd) continue;
            memset(&ba, 0, sizeof ba);
            ba.q = d.q;
            ba.k = d.k;
            ba.v = d.v;
            ba.o = d.o_in;
            ba.d_o = d.d_o;
            ba.lse = d.lse_in;
            ba.seqlens_k = seqlens;
            ba.dq = d.dq;
            ba.dk = d.dk;
            ba.dv = d.dv;
            ba.conv_w = d.w;
            ba.dconv_w = d.dw;
            ba.q_strides = lay[X_Q].arg;
            ba.k_strides = lay[X_K].arg;
            ba.v_strides = lay[X_V].arg;
            ba.o_strides = lay[X_O].arg;
            ba.d_o_strides = lay[X_DO].arg;
            ba.dq_strides = lay[X_DQ].arg;
            ba.dk_strides = lay[X_DK].arg;
            ba.dv_strides = lay[X_DV].arg;
            ba.rope = rope_args_of(&rope_d);
            if (d.dw) CUDA_OK(cudaMemsetAsync(d.dw, poison, z.w * sizeof(float), st));
            CUDA_OK(cudaMemsetAsync(d.dq, poison, lay[X_DQ].extent * z.eb, st));
            CUDA_OK(cudaMemsetAsync(d.dk, poison, lay[X_DK].extent * z.eb, st));
            CUDA_OK(cudaMemsetAsync(d.dv, poison, lay[X_DV].extent * z.eb, st));
            if (d.ws) CUDA_OK(cudaMemsetAsync(d.ws, poison ^ 0x33, ws_bytes, st));
            stt = ta_bwd(p, TA_BACKEND_CUDA, &ba, d.ws, ws_bytes, (void *)st);
            if (stt != TA_OK) {
                FAIL("%s: CUDA bwd: %s", desc, ta_status_string(stt));
                ok = 0;
                break;
            }
            CUDA_OK(cudaStreamSynchronize(st));
            ok &= check_output(run ? "dq (run 2)" : "dq", desc, dq_ref, d.dq, &lay[X_DQ], z.eb,
                               poison, stage, got);
            ok &= check_output(run ? "dk (run 2)" : "dk", desc, dk_ref, d.dk, &lay[X_DK], z.eb,
                               poison, stage, got);
            ok &= check_output(run ? "dv (run 2)" : "dv", desc, dv_ref, d.dv, &lay[X_DV], z.eb,
                               poison, stage, got);
            if (z.w) {
                CUDA_OK(cudaMemcpy(dw_got, d.dw, z.w * sizeof(float), cudaMemcpyDeviceToHost));
                ok &= same_bytes(run ? "dconv_w (run 2)" : "dconv_w", desc, dw_ref, dw_got, z.w,
                                 sizeof(float));
            }
        }
        CUDA_OK(cudaFree(d.q));
        CUDA_OK(cudaFree(d.k));
        CUDA_OK(cudaFree(d.v));
        CUDA_OK(cudaFree(d.d_o));
        CUDA_OK(cudaFree(d.o));
        CUDA_OK(cudaFree(d.o_in));
        CUDA_OK(cudaFree(d.dq));
        CUDA_OK(cudaFree(d.dk));
        CUDA_OK(cudaFree(d.dv));
        if (d.ws) CUDA_OK(cudaFree(d.ws));
        CUDA_OK(cudaFree(d.lse));
        CUDA_OK(cudaFree(d.lse_in));
        if (d.w) CUDA_OK(cudaFree(d.w));
        if (d.dw) CUDA_OK(cudaFree(d.dw));
        rope_free(&rope_d, 1);
    }
    rope_free(&rope_h, 0);
    if (stage) {
        int x;
        for (x = 0; x < X_COUNT; ++x)
            ta_test_layout_free(&lay[x]);
        free(stage);
    }
    free(q);
    free(k);
    free(v);
    free(d_o);
    free(o_ref);
    free(dq_ref);
    free(dk_ref);
    free(dv_ref);
    free(lse_ref);
    free(lse_got);
    free(got);
    free(seqlens);
    free(w);
    free(dw_ref);
    free(dw_got);
    return ok;
}

/* ---- Bad input on the device ---- */

/* A small valid problem, its device buffers (canary-filled outputs) and args. */
typedef struct bad_ctx {
    ta_problem p;
    sizes z;
    dev_bufs d;
    size_t fwd_bytes, bwd_bytes;
    ta_fwd_args fa;
    ta_bwd_args ba;
} bad_ctx;

static void bad_setup(bad_ctx *c, ta_rng *r) {
    void *h;
    size_t n;
    memset(c, 0, sizeof *c);
    c->p.batch = 2;
    c->p.heads_q = 4;
    c->p.heads_kv = 2;
    c->p.seq_q = 19;
    c->p.seq_k = 23;
    c->p.head_dim = 8;
    c->p.head_dim_v = 6;
    c->p.flags = TA_CAUSAL;
    c->z = sizes_of(&c->p);
    if (ta_fwd_workspace_size(&c->p, TA_BACKEND_CUDA, &c->fwd_bytes) != TA_OK ||
        ta_bwd_workspace_size(&c->p, TA_BACKEND_CUDA, &c->bwd_bytes) != TA_OK) {
        FAIL("bad-input set-up: size query");
        return;
    }
    c->d.q = dev_alloc(c->z.q * 4);
    c->d.k = dev_alloc(c->z.k * 4);
    c->d.v = dev_alloc(c->z.v * 4);
    c->d.d_o = dev_alloc(c->z.o * 4);
    c->d.o = dev_alloc(c->z.o * 4);
    c->d.o_in = dev_alloc(c->z.o * 4);
    c->d.dq = dev_alloc(c->z.q * 4);
    c->d.dk = dev_alloc(c->z.k * 4);
    c->d.dv = dev_alloc(c->z.v * 4);
    c->d.ws = dev_alloc(c->bwd_bytes + 4096); /* room for the MTA cases too */
    c->d.lse = (float *)dev_alloc(c->z.lse * 4);
    c->d.lse_in = (float *)dev_alloc(c->z.lse * 4);
    n = c->z.q > c->z.k ? c->z.q : c->z.k;
    h = malloc(n * 4 > c->z.o * 4 ? n * 4 : c->z.o * 4);
    ta_fill_uniform(r, h, TA_F32, c->z.q, -1.0f, 1.0f);
    CUDA_OK(cudaMemcpy(c->d.q, h, c->z.q * 4, cudaMemcpyHostToDevice));
    ta_fill_uniform(r, h, TA_F32, c->z.k, -1.0f, 1.0f);
    CUDA_OK(cudaMemcpy(c->d.k, h, c->z.k * 4, cudaMemcpyHostToDevice));
    ta_fill_uniform(r, h, TA_F32, c->z.v, -1.0f, 1.0f);
    CUDA_OK(cudaMemcpy(c->d.v, h, c->z.v * 4, cudaMemcpyHostToDevice));
    ta_fill_uniform(r, h, TA_F32, c->z.o, -1.0f, 1.0f);
    CUDA_OK(cudaMemcpy(c->d.d_o, h, c->z.o * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c->d.o_in, h, c->z.o * 4, cudaMemcpyHostToDevice));
    ta_fill_uniform(r, h, TA_F32, c->z.lse, 0.0f, 2.0f);
    CUDA_OK(cudaMemcpy(c->d.lse_in, h, c->z.lse * 4, cudaMemcpyHostToDevice));
    free(h);
    c->fa.q = c->d.q;
    c->fa.k = c->d.k;
    c->fa.v = c->d.v;
    c->fa.o = c->d.o;
    c->fa.lse = c->d.lse;
    c->ba.q = c->d.q;
    c->ba.k = c->d.k;
    c->ba.v = c->d.v;
    c->ba.o = c->d.o_in;
    c->ba.d_o = c->d.d_o;
    c->ba.lse = c->d.lse_in;
    c->ba.dq = c->d.dq;
    c->ba.dk = c->d.dk;
    c->ba.dv = c->d.dv;
}

static void bad_free(bad_ctx *c) {
    void *all[] = {c->d.q,  c->d.k,  c->d.v,  c->d.d_o, c->d.o,   c->d.o_in,
                   c->d.dq, c->d.dk, c->d.dv, c->d.ws,  c->d.lse, c->d.lse_in};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]) CUDA_OK(cudaFree(all[i]));
}

/* Canary-fill every device output (after the previous case's work, which may
 * run on a non-blocking stream, is done); check they are intact afterwards. */
static void canary_outputs(const bad_ctx *c) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemset(c->d.o, TA_CANARY_BYTE, c->z.o * 4));
    CUDA_OK(cudaMemset(c->d.lse, TA_CANARY_BYTE, c->z.lse * 4));
    CUDA_OK(cudaMemset(c->d.dq, TA_CANARY_BYTE, c->z.q * 4));
    CUDA_OK(cudaMemset(c->d.dk, TA_CANARY_BYTE, c->z.k * 4));
    CUDA_OK(cudaMemset(c->d.dv, TA_CANARY_BYTE, c->z.v * 4));
}
static int outputs_intact(const bad_ctx *c) {
    const void *bufs[] = {c->d.o, c->d.lse, c->d.dq, c->d.dk, c->d.dv};
    const size_t n[] = {c->z.o * 4, c->z.lse * 4, c->z.q * 4, c->z.k * 4, c->z.v * 4};
    int i, ok = 1;
    CUDA_OK(cudaDeviceSynchronize());
    for (i = 0; i < 5; ++i) {
        void *h = malloc(n[i]);
        CUDA_OK(cudaMemcpy(h, bufs[i], n[i], cudaMemcpyDeviceToHost));
        ok &= ta_canary_intact(h, n[i]);
        free(h);
    }
    return ok;
}

#define EXPECT(name, expect, expr)                                                                 \
    do {                                                                                           \
        ta_status st_;                                                                             \
        canary_outputs(&c);                                                                        \
        st_ = (expr);                                                                              \
        if (st_ != (expect))                                                                       \
            FAIL("bad input '%s': got %s, expected %s", name, ta_status_string(st_),               \
                 ta_status_string(expect));                                                        \
        if ((expect) != TA_OK && !outputs_intact(&c))                                              \
            FAIL("bad input '%s': an output was written", name);                                   \
        ++n_cases;                                                                                 \
    } while (0)

/* The same call on host-mapped pinned memory or managed memory must succeed
 * and give the same bits as on device memory. */
static void check_other_memory(bad_ctx *c, int managed) {
    const size_t nq = c->z.q * 4;
    void *q2 = NULL, *o_dev = malloc(c->z.o * 4), *o_alt = malloc(c->z.o * 4);
    ta_fwd_args fa = c->fa;
    ta_status st;
    if (managed)
        CUDA_OK(cudaMallocManaged(&q2, nq, cudaMemAttachGlobal));
    else
        CUDA_OK(cudaHostAlloc(&q2, nq, cudaHostAllocMapped));
    CUDA_OK(cudaMemcpy(q2, c->d.q, nq, cudaMemcpyDefault));
    st = ta_fwd(&c->p, TA_BACKEND_CUDA, &c->fa, c->d.ws, c->fwd_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_dev, c->d.o, c->z.o * 4, cudaMemcpyDeviceToHost));
    fa.q = q2;
    CUDA_OK(cudaMemset(c->d.o, 0xFF, c->z.o * 4));
    if (st == TA_OK) st = ta_fwd(&c->p, TA_BACKEND_CUDA, &fa, c->d.ws, c->fwd_bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_alt, c->d.o, c->z.o * 4, cudaMemcpyDeviceToHost));
    if (st != TA_OK)
        FAIL("q in %s memory: %s", managed ? "managed" : "mapped pinned host",
             ta_status_string(st));
    else if (memcmp(o_dev, o_alt, c->z.o * 4) != 0)
        FAIL("q in %s memory: o differs from device memory's", managed ? "managed" : "pinned");
    if (managed)
        CUDA_OK(cudaFree(q2));
    else
        CUDA_OK(cudaFreeHost(q2));
    free(o_dev);
    free(o_alt);
}

static void bad_input_cases(ta_rng *r) {
    bad_ctx c;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_problem pc;
    ta_trace tr;
    ta_trace_entry entries[4];
    size_t bytes = 0;
    int n_cases = 0;
    float *host_q;
    cudaStream_t s;
    bad_setup(&c, r);
    host_q = (float *)malloc(c.z.q * 4);
    ta_fill_uniform(r, host_q, TA_F32, c.z.q, -1.0f, 1.0f);
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* size queries: the forward needs no device workspace, the backward D_i */
    if (c.fwd_bytes != 0) FAIL("fwd workspace %zu bytes, expected 0", c.fwd_bytes);
    if (c.bwd_bytes != (c.z.lse * 4 + 63) / 64 * 64)
        FAIL("bwd workspace %zu bytes, expected %zu", c.bwd_bytes, (c.z.lse * 4 + 63) / 64 * 64);

    /* valid calls: NULL stream and a created stream */
    EXPECT("valid fwd, NULL stream", TA_OK, ta_fwd(&c.p, TA_BACKEND_CUDA, &c.fa, NULL, 0, NULL));
    EXPECT("valid fwd, created stream", TA_OK,
           ta_fwd(&c.p, TA_BACKEND_CUDA, &c.fa, NULL, 0, (void *)s));
    EXPECT("valid bwd, created stream", TA_OK,
           ta_bwd(&c.p, TA_BACKEND_CUDA, &c.ba, c.d.ws, c.bwd_bytes, (void *)s));

    /* pageable host memory where device memory is required */
    fa = c.fa;
    fa.q = host_q;
    EXPECT("fwd q in pageable host memory", TA_ERR_BAD_ARG,
           ta_fwd(&c.p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
    fa = c.fa;
    fa.o = malloc(c.z.o * 4);
    EXPECT("fwd o in pageable host memory", TA_ERR_BAD_ARG,
           ta_fwd(&c.p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
    free(fa.o);
    fa = c.fa;
    fa.lse = (float *)malloc(c.z.lse * 4);
    EXPECT("fwd lse in pageable host memory", TA_ERR_BAD_ARG,
           ta_fwd(&c.p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
    free(fa.lse);
    ba = c.ba;
    ba.lse = host_q; /* at least B*H*S_q floats */
    EXPECT("bwd lse in pageable host memory", TA_ERR_BAD_ARG,
           ta_bwd(&c.p, TA_BACKEND_CUDA, &ba, c.d.ws, c.bwd_bytes, NULL));
    ba = c.ba;
    {
        void *ws_host = ta_test_alloc(c.bwd_bytes);
        EXPECT("bwd workspace in pageable host memory", TA_ERR_BAD_ARG,
               ta_bwd(&c.p, TA_BACKEND_CUDA, &ba, ws_host, c.bwd_bytes, NULL));
        ta_test_free(ws_host);
    }
    /* the rotary stage on the exact kernels: the same workspace; its tables must
     * be device memory too (pageable: TA_ERR_BAD_ARG, outputs untouched) */
    {
        float host_tab[23 * 4]; /* rope_rows = S_k = 23, 4 pairs (D = 8) */
        float *dev_tab = (float *)dev_alloc(sizeof host_tab);
        size_t i;
        for (i = 0; i < sizeof host_tab / sizeof host_tab[0]; ++i)
            host_tab[i] = ta_rng_uniform(r, -1.0f, 1.0f);
        CUDA_OK(cudaMemcpy(dev_tab, host_tab, sizeof host_tab, cudaMemcpyHostToDevice));
        pc = c.p;
        pc.rope = TA_ROPE_INTERLEAVED;
        pc.rope_pairs = 4;
        pc.rope_rows = 23;
        EXPECT("rope fwd size query", TA_OK, ta_fwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes));
        if (bytes != c.fwd_bytes)
            FAIL("rope fwd workspace %zu bytes, expected %zu", bytes, c.fwd_bytes);
        EXPECT("rope bwd size query", TA_OK, ta_bwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes));
        if (bytes != c.bwd_bytes)
            FAIL("rope bwd workspace %zu bytes, expected %zu", bytes, c.bwd_bytes);
        fa = c.fa;
        fa.rope.cos = host_tab;
        fa.rope.sin = dev_tab;
        EXPECT("rope fwd cos in pageable host memory", TA_ERR_BAD_ARG,
               ta_fwd(&pc, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
        fa.rope.cos = dev_tab;
        EXPECT("rope fwd, device tables", TA_OK, ta_fwd(&pc, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
        ba = c.ba;
        ba.rope.cos = dev_tab;
        ba.rope.sin = host_tab;
        EXPECT("rope bwd sin in pageable host memory", TA_ERR_BAD_ARG,
               ta_bwd(&pc, TA_BACKEND_CUDA, &ba, c.d.ws, c.bwd_bytes, NULL));
        ba.rope.sin = dev_tab;
        EXPECT("rope bwd, device tables", TA_OK,
               ta_bwd(&pc, TA_BACKEND_CUDA, &ba, c.d.ws, c.bwd_bytes, NULL));
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaFree(dev_tab));
    }
    /* workspace */
    EXPECT("bwd workspace one byte short", TA_ERR_WORKSPACE_SIZE,
           ta_bwd(&c.p, TA_BACKEND_CUDA, &c.ba, c.d.ws, c.bwd_bytes - 1, NULL));
    EXPECT("bwd workspace NULL", TA_ERR_NULL_ARG,
           ta_bwd(&c.p, TA_BACKEND_CUDA, &c.ba, NULL, c.bwd_bytes, NULL));
    EXPECT("bwd workspace misaligned", TA_ERR_WORKSPACE_ALIGN,
           ta_bwd(&c.p, TA_BACKEND_CUDA, &c.ba, (char *)c.d.ws + 16, c.bwd_bytes, NULL));
    /* the MTA conv: size queries (no GPU needed), then weights in pageable host memory */
    pc = c.p;
    pc.conv_q = 2;
    pc.conv_k = 3;
    EXPECT("conv fwd size query", TA_OK, ta_fwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes));
    if (bytes != 0) FAIL("conv fwd workspace %zu bytes, expected 0", bytes);
    EXPECT("conv bwd size query", TA_OK, ta_bwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes));
    { /* delta, then one 2x3 dconv_w row sum per (batch, head, bwd Q tile): S_q = 19 is one
         tile of the default 64 rows; then dconv_w's lo words, one 2x3 per head */
        const size_t want = (c.z.lse * 4 + 63) / 64 * 64 + (2 * 4 * 1 * 6 * 4 + 63) / 64 * 64 +
                            (4 * 6 * 4 + 63) / 64 * 64;
        if (bytes != want) FAIL("conv bwd workspace %zu bytes, expected %zu", bytes, want);
    }
    pc.flags = 0u;
    EXPECT("conv without TA_CAUSAL", TA_ERR_UNSUPPORTED,
           ta_fwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes));
    pc.flags = TA_CAUSAL;
    {
        float *w_host = (float *)malloc(4 * 2 * 3 * sizeof(float));
        float *w_dev = (float *)dev_alloc(4 * 2 * 3 * sizeof(float));
        float *dw_dev = (float *)dev_alloc(4 * 2 * 3 * sizeof(float));
        size_t wsb = 0;
        ta_fill_uniform(r, w_host, TA_F32, 4 * 2 * 3, -1.0f, 1.0f);
        CUDA_OK(cudaMemcpy(w_dev, w_host, 4 * 2 * 3 * sizeof(float), cudaMemcpyHostToDevice));
        (void)ta_bwd_workspace_size(&pc, TA_BACKEND_CUDA, &wsb);
        fa = c.fa;
        fa.conv_w = w_host;
        EXPECT("MTA fwd conv_w in pageable host memory", TA_ERR_BAD_ARG,
               ta_fwd(&pc, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
        fa.conv_w = NULL;
        EXPECT("MTA fwd conv_w NULL", TA_ERR_NULL_ARG,
               ta_fwd(&pc, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
        ba = c.ba;
        ba.conv_w = w_dev;
        ba.dconv_w = (float *)malloc(4 * 2 * 3 * sizeof(float));
        if (wsb <= c.bwd_bytes + 4096) {
            EXPECT("MTA bwd dconv_w in pageable host memory", TA_ERR_BAD_ARG,
                   ta_bwd(&pc, TA_BACKEND_CUDA, &ba, c.d.ws, wsb, NULL));
            free(ba.dconv_w);
            ba.dconv_w = dw_dev;
            EXPECT("MTA bwd workspace one byte short", TA_ERR_WORKSPACE_SIZE,
                   ta_bwd(&pc, TA_BACKEND_CUDA, &ba, c.d.ws, wsb - 1, NULL));
        } else {
            free(ba.dconv_w);
            FAIL("MTA bwd workspace %zu bytes: larger than the set-up's buffer", wsb);
        }
        free(w_host);
        CUDA_OK(cudaFree(w_dev));
        CUDA_OK(cudaFree(dw_dev));
    }
    /* unsupported: a trace (REF only) */
    tr.entries = entries;
    tr.capacity = 4;
    tr.count = 0;
    fa = c.fa;
    fa.trace = &tr;
    EXPECT("trace on CUDA", TA_ERR_UNSUPPORTED, ta_fwd(&c.p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL));
    /* mapped pinned host and managed memory are device-readable: accepted */
    check_other_memory(&c, 0);
    check_other_memory(&c, 1);
    n_cases += 2;
    CUDA_OK(cudaStreamDestroy(s));
    free(host_q);
    bad_free(&c);
    printf("test_cuda_equiv: %d device bad-input cases\n", n_cases);
}

/* One line per feature: how many problems of the run have it. */
/* ---- ta_merge: CUDA == REF ---- */

/* Merges with 250 to 300 parts (past 256: the per-element merge kernel). */
static int g_merge_many;

/* One random merge (docs/api.md, "Split-K and merge"); returns 1 if it passed. */
static int merge_case(ta_rng *r, int idx) {
    ta_problem p;
    ta_merge_args a;
    ta_test_layout lo;
    /* 1 in 8: more parts than the row kernel stages (TA_MERGE_ROW_PARTS =
     * 256 in cuda/ta_cuda_merge.cu: the per-element kernel), on few rows */
    const int32_t k = ta_rng_int(r, 0, 7) == 0 ? ta_rng_int(r, 250, 300) : ta_rng_int(r, 1, 9);
    const int with_lse = ta_rng_int(r, 0, 3) != 0;
    size_t n_rows, n_o, eb, i;
    void *parts, *o_ref, *d_parts, *d_o, *stage, *got;
    float *lse_parts, *lse_ref, *lse_got, *d_lse_parts, *d_lse = NULL;
    char desc[200];
    int ok = 1;
    int32_t s;
    ta_status st;
    memset(&p, 0, sizeof p);
    p.batch = ta_rng_int(r, 1, 3), p.heads_kv = ta_rng_int(r, 1, 3);
    p.heads_q = p.heads_kv * ta_rng_int(r, 1, 3);
    g_merge_many += k > 9;
    p.seq_q = ta_rng_int(r, 1, k > 9 ? 6 : 300), p.seq_k = ta_rng_int(r, 1, 300);
    p.head_dim = pick_dim(r), p.head_dim_v = pick_dim(r);
    p.dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    eb = ta_dtype_size(p.dtype);
    n_rows = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_o = n_rows * (size_t)p.head_dim_v;
    ta_test_layout_make(r, &lo, p.batch, p.heads_q, p.seq_q, p.head_dim_v, ta_rng_int(r, 0, 1));
    snprintf(desc, sizeof desc, "merge #%d K=%d B=%d H=%d S_q=%d D_v=%d dtype=%d strided=%d lse=%d",
             idx, (int)k, (int)p.batch, (int)p.heads_q, (int)p.seq_q, (int)p.head_dim_v,
             (int)p.dtype, lo.is_elem != NULL, with_lse);
    parts = malloc(n_o * (size_t)k * eb);
    lse_parts = (float *)malloc(n_rows * (size_t)k * sizeof(float));
    o_ref = malloc(n_o * eb), got = malloc(n_o * eb), stage = malloc(lo.extent * eb);
    lse_ref = (float *)malloc(n_rows * sizeof(float));
    lse_got = (float *)malloc(n_rows * sizeof(float));
    if (!parts || !lse_parts || !o_ref || !got || !stage || !lse_ref || !lse_got) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    ta_fill_uniform(r, parts, p.dtype, n_o * (size_t)k, -1.0f, 1.0f);
    for (i = 0; i < n_rows * (size_t)k; ++i)
        lse_parts[i] = ta_rng_int(r, 0, 5) == 0 ? -INFINITY : ta_rng_uniform(r, -30.0f, 30.0f);
    for (i = 0; i < n_rows; i += 5) /* rows with every part empty */
        for (s = 0; s < k; ++s)
            lse_parts[(size_t)s * n_rows + i] = -INFINITY;
    /* REF, contiguous o */
    memset(&a, 0, sizeof a);
    a.num_parts = k, a.o_parts = parts, a.lse_parts = lse_parts, a.o = o_ref, a.lse = lse_ref;
    st = ta_merge(&p, TA_BACKEND_REF, &a, NULL);
    if (st != TA_OK) {
        FAIL("%s: REF ta_merge: %s", desc, ta_status_string(st));
        ok = 0;
    }
    /* CUDA: parts uploaded, outputs poisoned (0xFF), o in lo's layout */
    d_parts = dev_alloc(n_o * (size_t)k * eb);
    d_lse_parts = (float *)dev_alloc(n_rows * (size_t)k * sizeof(float));
    d_o = dev_alloc(lo.extent * eb);
    if (with_lse) d_lse = (float *)dev_alloc(n_rows * sizeof(float));
    CUDA_OK(cudaMemcpy(d_parts, parts, n_o * (size_t)k * eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_lse_parts, lse_parts, n_rows * (size_t)k * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_o, 0xFF, lo.extent * eb));
    if (d_lse) CUDA_OK(cudaMemset(d_lse, 0xFF, n_rows * sizeof(float)));
    a.o_parts = d_parts, a.lse_parts = d_lse_parts, a.o = d_o, a.lse = d_lse;
    a.o_strides = lo.arg;
    /* a pageable host part first: refused, device outputs untouched */
    a.lse_parts = lse_parts;
    st = ta_merge(&p, TA_BACKEND_CUDA, &a, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    if (st != TA_ERR_BAD_ARG) {
        FAIL("%s: pageable lse_parts: %s, expected TA_ERR_BAD_ARG", desc, ta_status_string(st));
        ok = 0;
    }
    CUDA_OK(cudaMemcpy(stage, d_o, lo.extent * eb, cudaMemcpyDeviceToHost));
    for (i = 0; i < lo.extent * eb; ++i)
        if (((unsigned char *)stage)[i] != 0xFF) {
            FAIL("%s: a refused ta_merge wrote o (byte %zu)", desc, i);
            ok = 0;
            break;
        }
    a.lse_parts = d_lse_parts;
    st = ta_merge(&p, TA_BACKEND_CUDA, &a, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    if (st != TA_OK) {
        FAIL("%s: CUDA ta_merge: %s", desc, ta_status_string(st));
        ok = 0;
    } else if (ok) {
        ok &= check_output("merge o", desc, o_ref, d_o, &lo, eb, 0xFF, stage, got);
        if (d_lse) {
            CUDA_OK(cudaMemcpy(lse_got, d_lse, n_rows * sizeof(float), cudaMemcpyDeviceToHost));
            ok &= same_bytes("merge lse", desc, lse_ref, lse_got, n_rows, sizeof(float));
        }
    }
    CUDA_OK(cudaFree(d_parts));
    CUDA_OK(cudaFree(d_lse_parts));
    CUDA_OK(cudaFree(d_o));
    if (d_lse) CUDA_OK(cudaFree(d_lse));
    free(parts), free(lse_parts), free(o_ref), free(got), free(stage), free(lse_ref);
    free(lse_got);
    ta_test_layout_free(&lo);
    return ok;
}

static void merge_cases(ta_rng *r, int n) {
    int i, n_ok = 0;
    for (i = 0; i < n; ++i)
        n_ok += merge_case(r, i);
    printf("test_cuda_equiv: ta_merge %d of %d random merges bit-identical to REF (%d of them "
           "with 250 to 300 parts)\n",
           n_ok, n, g_merge_many);
}

/* ---- MTA decode / chunked prefill with query history rows: CUDA == REF ---- */

/* The rotary stage of a history case (docs/rope.md; history row -i turns by
 * row 0's table row - i): either pair convention, all or some of D / 2
 * pairs, a padded row stride and per-kv-head tables at random, a 1-D table
 * (ta_rope_table_1d) or random values (gaps NaN); absolute positions as a
 * decode loop passes them: pos_q[b][t] = off_b + prefix + t, and pos_k[b][j]
 * = off_b + j, or NULL (off_b = 0). Sets p's rope fields; h: host arrays. */
static void history_rope(ta_rng *r, ta_problem *p, int32_t prefix, rope_bufs *h, const char *desc) {
    spec s;
    const int keys_pos = ta_rng_int(r, 0, 1);
    int32_t off[2] = {0, 0}, off_max = 0, rs, b, t; /* B <= 2 in history_case */
    p->rope = ta_rng_int(r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    p->rope_pairs = ta_rng_int(r, 0, 1) ? p->head_dim / 2 : ta_rng_int(r, 1, p->head_dim / 2);
    for (b = 0; b < p->batch; ++b) {
        off[b] = keys_pos ? ta_rng_int(r, 0, 50) : 0;
        off_max = off[b] > off_max ? off[b] : off_max;
    }
    p->rope_rows = off_max + p->seq_k + ta_rng_int(r, 0, 9);
    p->rope_row_stride = ta_rng_int(r, 0, 2) == 0 ? p->rope_pairs + ta_rng_int(r, 1, 5) : 0;
    rs = p->rope_row_stride ? p->rope_row_stride : p->rope_pairs;
    p->rope_head_stride = ta_rng_int(r, 0, 2) == 0 ? p->rope_rows * rs + ta_rng_int(r, 0, 7) : 0;
    memset(&s, 0, sizeof s);
    s.p = *p;
    s.rope_table = ta_rng_int(r, 0, 1) ? ROPE_TAB_1D : ROPE_TAB_RANDOM;
    s.rope_pos = ROPE_POS_NONE; /* the tables only: the positions are the decode loop's */
    rope_make(&s, r, h, desc);
    h->pos_q = (int32_t *)malloc((size_t)p->batch * (size_t)p->seq_q * sizeof(int32_t));
    h->pos_k =
        keys_pos ? (int32_t *)malloc((size_t)p->batch * (size_t)p->seq_k * sizeof(int32_t)) : NULL;
    if (!h->pos_q || (keys_pos && !h->pos_k)) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (b = 0; b < p->batch; ++b) {
        for (t = 0; t < p->seq_q; ++t)
            h->pos_q[(size_t)b * (size_t)p->seq_q + (size_t)t] = off[b] + prefix + t;
        for (t = 0; keys_pos && t < p->seq_k; ++t)
            h->pos_k[(size_t)b * (size_t)p->seq_k + (size_t)t] = off[b] + t;
    }
}

/* The device positions of chunk [a0, a1) (keys [0, seq_k)) cut from the
 * sequence's host positions h into d_pos_q [B, a1 - a0] and d_pos_k [B,
 * seq_k] through the host scratch buf; *ra: the chunk's rotary arguments
 * (tables dt, pos_k NULL when h has none). */
static void history_rope_chunk(const ta_problem *p, const rope_bufs *h, const rope_bufs *dt,
                               int32_t a0, int32_t a1, int32_t seq_k, int32_t *buf,
                               int32_t *d_pos_q, int32_t *d_pos_k, ta_rope_args *ra) {
    const size_t rows = (size_t)(a1 - a0);
    int32_t b;
    for (b = 0; b < p->batch; ++b)
        memcpy(buf + (size_t)b * rows, h->pos_q + (size_t)b * (size_t)p->seq_q + (size_t)a0,
               rows * sizeof(int32_t));
    CUDA_OK(cudaMemcpy(d_pos_q, buf, (size_t)p->batch * rows * sizeof(int32_t),
                       cudaMemcpyHostToDevice));
    for (b = 0; h->pos_k && b < p->batch; ++b)
        memcpy(buf + (size_t)b * (size_t)seq_k, h->pos_k + (size_t)b * (size_t)p->seq_k,
               (size_t)seq_k * sizeof(int32_t));
    if (h->pos_k)
        CUDA_OK(cudaMemcpy(d_pos_k, buf, (size_t)p->batch * (size_t)seq_k * sizeof(int32_t),
                           cudaMemcpyHostToDevice));
    ra->cos = dt->cos, ra->sin = dt->sin, ra->pos_q = d_pos_q;
    ra->pos_k = h->pos_k ? d_pos_k : NULL;
}

/* A chunk call that must be refused with TA_ERR_BAD_ARG (what: the fault).
 * Returns 1 if it was. */
static int history_refused(const ta_problem *pc, const ta_fwd_args *bad, void *ws, size_t bytes,
                           const char *what, const char *desc) {
    const ta_status st = ta_fwd(pc, TA_BACKEND_CUDA, bad, ws, bytes, NULL);
    if (st == TA_ERR_BAD_ARG) return 1;
    FAIL("%s: %s: %s, expected TA_ERR_BAD_ARG", desc, what, ta_status_string(st));
    return 0;
}

/* One random MTA sequence (docs/mta.md section 2a): REF's full forward on the
 * host; then CUDA runs it in random chunks (prefill pieces, then 1..3 rows at
 * a time) against the growing key range, each with q_history = min(c_q - 1,
 * rows before) and the rows read in place (q - n rows) or from a device copy;
 * the gathered o and lse must equal REF's full forward bit for bit. A
 * pageable host q_hist is TA_ERR_BAD_ARG. with_rope: the rotary stage
 * (history_rope; a quarter in TA_PRECISION_FAST, which runs the exact
 * kernels with the stage, except the fast MTA kernels' problems: those in
 * exact mode), each chunk with its rows' absolute positions;
 * pos_q NULL with history rows is TA_ERR_BAD_ARG on CUDA too. Returns 1 if
 * it passed. */
static int history_case(ta_rng *r, int idx, int with_rope) {
    ta_problem p, pc;
    ta_fwd_args fa;
    int32_t prefix, *seqlens = NULL, *seql_c, *ends, n_ends = 0, at = 0, c, b, h;
    int32_t *pos_c = NULL, *d_pos_q = NULL, *d_pos_k = NULL;
    size_t n_q, n_k, n_v, n_o, n_lse, n_w, eb, bytes, i;
    void *q, *k, *v, *o_ref, *o_got, *d_q, *d_k, *d_v, *d_o, *d_hist, *ws = NULL;
    float *w, *lse_ref, *lse_got, *lse_c, *d_w, *d_lse;
    rope_bufs hr, dr; /* the rotary stage's host arrays; device tables */
    char desc[360];
    int ok = 1, refused_pageable = 0, refused_null_pos = 0;
    ta_status st;
    memset(&hr, 0, sizeof hr), memset(&dr, 0, sizeof dr);
    memset(&p, 0, sizeof p);
    p.batch = ta_rng_int(r, 1, 2), p.heads_kv = ta_rng_int(r, 1, 2);
    p.heads_q = p.heads_kv * ta_rng_int(r, 1, 3);
    p.head_dim = pick_dim(r), p.head_dim_v = pick_dim(r);
    p.dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p.conv_q = ta_rng_int(r, 0, 2) == 0 ? 6 : ta_rng_int(r, 1, 8);
    p.conv_k = p.conv_q == 6 ? 11 : 2 * ta_rng_int(r, 0, 7) + 1;
    p.seq_q = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 8) : ta_rng_int(r, 1, 200);
    prefix = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 100) : 0;
    p.seq_k = prefix + p.seq_q;
    p.flags = TA_CAUSAL;
    p.block_k = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 4 * ((p.conv_k - 1) / 2) + 1, 128);
    if (p.block_k < TA_BLOCK_MIN && p.block_k) p.block_k = TA_BLOCK_MIN;
    ta_test_random_window(r, &p, 25);
    if (with_rope) {
        if (p.head_dim < 2) p.head_dim = 2 * ta_rng_int(r, 1, 64);
        p.precision = ta_rng_int(r, 0, 3) == 0 ? TA_PRECISION_FAST : TA_PRECISION_EXACT;
    }
    eb = ta_dtype_size(p.dtype);
    n_lse = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_q = n_lse * (size_t)p.head_dim, n_o = n_lse * (size_t)p.head_dim_v;
    n_k = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k * (size_t)p.head_dim;
    n_v = n_k / (size_t)p.head_dim * (size_t)p.head_dim_v;
    n_w = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k;
    snprintf(desc, sizeof desc,
             "history #%d B=%d H=%d/%d S=%d prefix=%d D=%d/%d conv=%dx%d dtype=%d bk=%d win=%d,%d",
             idx, (int)p.batch, (int)p.heads_q, (int)p.heads_kv, (int)p.seq_q, (int)prefix,
             (int)p.head_dim, (int)p.head_dim_v, (int)p.conv_q, (int)p.conv_k, (int)p.dtype,
             (int)p.block_k, (int)p.window_left, (int)p.window_right);
    if (with_rope) {
        const size_t used = strlen(desc);
        history_rope(r, &p, prefix, &hr, desc);
        /* the fast MTA kernels take f16 / bf16, D = D_v in {64, 96, 128} with
         * pairs in whole 16-byte chunks (on turned copies, not bit-identical
         * to REF: test_cuda_fast_mta checks them); those run in exact mode */
        if (p.precision == TA_PRECISION_FAST && p.dtype != TA_F32 && p.head_dim == p.head_dim_v &&
            (p.head_dim == 64 || p.head_dim == 96 || p.head_dim == 128) &&
            p.rope_pairs % (p.rope == TA_ROPE_HALF ? 8 : 4) == 0)
            p.precision = TA_PRECISION_EXACT;
        snprintf(desc + used, sizeof desc - used,
                 " rope=%d pairs=%d rows=%d row_stride=%d head_stride=%d pos_k=%s precision=%d",
                 (int)p.rope, (int)p.rope_pairs, (int)p.rope_rows, (int)p.rope_row_stride,
                 (int)p.rope_head_stride, hr.pos_k ? "given" : "NULL", (int)p.precision);
    }
    q = malloc(n_q * eb), k = malloc(n_k * eb), v = malloc(n_v * eb);
    o_ref = malloc(n_o * eb), o_got = malloc(n_o * eb);
    w = (float *)malloc(n_w * 4), lse_ref = (float *)malloc(n_lse * 4);
    lse_got = (float *)malloc(n_lse * 4), lse_c = (float *)malloc(n_lse * 4);
    ends = (int32_t *)malloc(((size_t)p.seq_q + 2) * sizeof(int32_t));
    seql_c = (int32_t *)malloc((size_t)p.batch * sizeof(int32_t));
    if (!q || !k || !v || !o_ref || !o_got || !w || !lse_ref || !lse_got || !lse_c || !ends ||
        !seql_c) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    ta_fill_uniform(r, q, p.dtype, n_q, -1.5f, 1.5f);
    ta_fill_uniform(r, k, p.dtype, n_k, -1.5f, 1.5f);
    ta_fill_uniform(r, v, p.dtype, n_v, -1.0f, 1.0f);
    for (i = 0; i < n_w; ++i)
        w[i] = ta_rng_uniform(r, -0.3f, 0.3f) + (i % (size_t)(p.conv_q * p.conv_k) ==
                                                         (size_t)((p.conv_q - 1) * p.conv_k +
                                                                  (p.conv_k - 1) / 2)
                                                     ? 1.0f
                                                     : 0.0f);
    if (ta_rng_int(r, 0, 9) < 4) {
        seqlens = (int32_t *)malloc((size_t)p.batch * sizeof(int32_t));
        for (b = 0; b < p.batch; ++b)
            seqlens[b] = ta_rng_int(r, 0, p.seq_k);
    }
    /* REF: the full forward */
    memset(&fa, 0, sizeof fa);
    fa.q = q, fa.k = k, fa.v = v, fa.o = o_ref, fa.lse = lse_ref, fa.conv_w = w;
    fa.seqlens_k = seqlens;
    if (with_rope) fa.rope = rope_args_of(&hr);
    if ((st = ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes)) == TA_OK) {
        void *hws = ta_test_alloc(bytes);
        st = ta_fwd(&p, TA_BACKEND_REF, &fa, hws, bytes, NULL);
        ta_test_free(hws);
    }
    if (st != TA_OK) {
        FAIL("%s: REF full forward: %s", desc, ta_status_string(st));
        ok = 0;
    }
    /* CUDA: the chunks */
    d_q = dev_alloc(n_q * eb), d_k = dev_alloc(n_k * eb), d_v = dev_alloc(n_v * eb);
    d_o = dev_alloc(n_o * eb), d_w = (float *)dev_alloc(n_w * 4);
    d_lse = (float *)dev_alloc(n_lse * 4);
    d_hist = dev_alloc((size_t)p.batch * (size_t)p.heads_q * (size_t)p.conv_q *
                       (size_t)p.head_dim * eb);
    CUDA_OK(cudaMemcpy(d_q, q, n_q * eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_k, k, n_k * eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_v, v, n_v * eb, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_w, w, n_w * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_o, 0xFF, n_o * eb));
    memset(lse_got, 0xFF, n_lse * 4);
    if (with_rope) { /* device tables; the chunks' positions are cut per chunk */
        rope_bufs tables = hr;
        tables.pos_q = tables.pos_k = NULL;
        rope_upload(&tables, &p, &dr);
        pos_c = (int32_t *)malloc((size_t)p.batch * (size_t)p.seq_k * sizeof(int32_t));
        d_pos_q = (int32_t *)dev_alloc((size_t)p.batch * (size_t)p.seq_q * sizeof(int32_t));
        d_pos_k = (int32_t *)dev_alloc((size_t)p.batch * (size_t)p.seq_k * sizeof(int32_t));
        if (!pos_c) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
    }
    ends[n_ends++] = 0;
    while (at < p.seq_q) {
        int32_t len = n_ends <= 3 && ta_rng_int(r, 0, 1) ? ta_rng_int(r, 1, p.seq_q)
                                                        : ta_rng_int(r, 1, 3);
        at = at + len > p.seq_q ? p.seq_q : at + len;
        ends[n_ends++] = at;
    }
    for (c = 0; ok && c + 1 < n_ends; ++c) {
        const int32_t a0 = ends[c], a1 = ends[c + 1];
        const int32_t n = a0 < p.conv_q - 1 ? a0 : p.conv_q - 1;
        const int in_place = ta_rng_int(r, 0, 1);
        const size_t rows_c = (size_t)(a1 - a0);
        pc = p;
        pc.seq_q = a1 - a0, pc.seq_k = prefix + a1, pc.q_history = n;
        memset(&fa, 0, sizeof fa);
        fa.q = (const char *)d_q + (size_t)a0 * (size_t)p.head_dim * eb;
        fa.q_strides = (ta_strides){(int64_t)p.heads_q * p.seq_q * p.head_dim,
                                    (int64_t)p.seq_q * p.head_dim, p.head_dim};
        fa.k = d_k, fa.v = d_v, fa.conv_w = d_w, fa.lse = d_lse;
        fa.k_strides = (ta_strides){(int64_t)p.heads_kv * p.seq_k * p.head_dim,
                                    (int64_t)p.seq_k * p.head_dim, p.head_dim};
        fa.v_strides = (ta_strides){(int64_t)p.heads_kv * p.seq_k * p.head_dim_v,
                                    (int64_t)p.seq_k * p.head_dim_v, p.head_dim_v};
        fa.o = (char *)d_o + (size_t)a0 * (size_t)p.head_dim_v * eb;
        fa.o_strides = (ta_strides){(int64_t)p.heads_q * p.seq_q * p.head_dim_v,
                                    (int64_t)p.seq_q * p.head_dim_v, p.head_dim_v};
        if (seqlens) {
            for (b = 0; b < p.batch; ++b)
                seql_c[b] = seqlens[b] < pc.seq_k ? seqlens[b] : pc.seq_k;
            fa.seqlens_k = seql_c;
        }
        if (with_rope)
            history_rope_chunk(&p, &hr, &dr, a0, a1, pc.seq_k, pos_c, d_pos_q, d_pos_k, &fa.rope);
        if (n > 0 && in_place) {
            fa.q_hist = (const char *)d_q + (size_t)(a0 - n) * (size_t)p.head_dim * eb;
            fa.q_hist_strides = fa.q_strides;
        } else if (n > 0) { /* a contiguous device copy [B, H, n, D] */
            for (b = 0; b < p.batch; ++b)
                for (h = 0; h < p.heads_q; ++h)
                    CUDA_OK(cudaMemcpy(
                        (char *)d_hist + (((size_t)b * (size_t)p.heads_q + (size_t)h) * (size_t)n *
                                          (size_t)p.head_dim) * eb,
                        (const char *)d_q + ((((size_t)b * (size_t)p.heads_q + (size_t)h) *
                                                  (size_t)p.seq_q + (size_t)(a0 - n)) *
                                             (size_t)p.head_dim) * eb,
                        (size_t)n * (size_t)p.head_dim * eb, cudaMemcpyDeviceToDevice));
            fa.q_hist = d_hist;
        }
        if ((st = ta_fwd_workspace_size(&pc, TA_BACKEND_CUDA, &bytes)) != TA_OK) {
            FAIL("%s: chunk [%d, %d) size: %s", desc, (int)a0, (int)a1, ta_status_string(st));
            ok = 0;
            break;
        }
        if (ws) CUDA_OK(cudaFree(ws));
        ws = bytes ? dev_alloc(bytes) : NULL;
        if (n > 0 && !refused_pageable) { /* a pageable host q_hist: refused, nothing written */
            ta_fwd_args bad = fa;
            bad.q_hist = q, bad.q_hist_strides = fa.q_strides;
            ok &= history_refused(&pc, &bad, ws, bytes, "pageable q_hist", desc);
            refused_pageable = 1;
        }
        if (with_rope && n > 0 && !refused_null_pos) { /* history rows need positions */
            ta_fwd_args bad = fa;
            bad.rope.pos_q = NULL;
            ok &= history_refused(&pc, &bad, ws, bytes, "rope with history, pos_q NULL", desc);
            refused_null_pos = 1;
        }
        st = ta_fwd(&pc, TA_BACKEND_CUDA, &fa, ws, bytes, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        if (st != TA_OK) {
            FAIL("%s: chunk [%d, %d): %s", desc, (int)a0, (int)a1, ta_status_string(st));
            ok = 0;
            break;
        }
        CUDA_OK(cudaMemcpy(lse_c, d_lse, (size_t)p.batch * (size_t)p.heads_q * rows_c * 4,
                           cudaMemcpyDeviceToHost));
        for (i = 0; i < (size_t)p.batch * (size_t)p.heads_q; ++i)
            memcpy(lse_got + i * (size_t)p.seq_q + (size_t)a0, lse_c + i * rows_c, rows_c * 4);
    }
    if (ok) {
        CUDA_OK(cudaMemcpy(o_got, d_o, n_o * eb, cudaMemcpyDeviceToHost));
        ok &= same_bytes("history o", desc, o_ref, o_got, n_o, eb);
        ok &= same_bytes("history lse", desc, lse_ref, lse_got, n_lse, 4);
    }
    if (ws) CUDA_OK(cudaFree(ws));
    {
        void *const dev[] = {d_q, d_k, d_v, d_o, d_w, d_lse, d_hist};
        for (i = 0; i < sizeof dev / sizeof dev[0]; ++i)
            CUDA_OK(cudaFree(dev[i]));
    }
    free(q), free(k), free(v), free(o_ref), free(o_got), free(w), free(lse_ref), free(lse_got);
    free(lse_c), free(ends), free(seql_c), free(seqlens);
    if (with_rope) {
        rope_free(&hr, 0);
        rope_free(&dr, 1);
        free(pos_c);
        CUDA_OK(cudaFree(d_pos_q));
        CUDA_OK(cudaFree(d_pos_k));
    }
    return ok;
}

/* n chunked sequences, then n_rope with the rotary stage (after them, so
 * the first n draw what they drew without the stage). */
static void history_cases(ta_rng *r, int n, int n_rope) {
    int i, n_ok = 0, n_ok_rope = 0;
    for (i = 0; i < n; ++i)
        n_ok += history_case(r, i, 0);
    for (i = 0; i < n_rope; ++i)
        n_ok_rope += history_case(r, n + i, 1);
    printf("test_cuda_equiv: MTA query history %d of %d chunked sequences bit-identical to "
           "REF's full forward; with the rotary stage %d of %d\n",
           n_ok, n, n_ok_rope, n_rope);
}

static void print_coverage(const spec *specs, int n) {
    int i, dt[3] = {0, 0, 0}, causal = 0, seql = 0, gqa = 0, neq = 0, s1 = 0, d_small = 0;
    int d_big = 0, d_ne = 0, bk_set = 0, bk_odd = 0, bq_set = 0, scale_set = 0, scale_neg = 0;
    int stream = 0, fast = 0, big_s = 0, mta = 0, c611 = 0, c_max = 0, c_1x1 = 0, c_other = 0;
    int win = 0, win_mta = 0, win_left = 0, win_right = 0, win_causal = 0, strided = 0;
    int strided_mta = 0, splits = 0, splits_mta = 0, rope = 0, rope_mta = 0, rope_half = 0;
    int rope_tab[5] = {0, 0, 0, 0, 0}, rope_pos = 0, rope_heads = 0, rb = 0, rb_strided = 0;
    int32_t max_sq = 0, max_sk = 0;
    for (i = 0; i < n; ++i) {
        const ta_problem *p = &specs[i].p;
        dt[p->dtype]++;
        causal += (p->flags & TA_CAUSAL) != 0;
        seql += specs[i].seqlens_mode != 0;
        gqa += p->heads_q != p->heads_kv;
        neq += p->seq_q != p->seq_k;
        s1 += p->seq_q == 1 || p->seq_k == 1;
        big_s += p->seq_q >= 4096 || p->seq_k >= 4096;
        d_small += p->head_dim <= 8 || p->head_dim_v <= 8;
        d_big += p->head_dim > 128 || p->head_dim_v > 128;
        d_ne += p->head_dim != p->head_dim_v;
        bk_set += p->block_k != 0;
        bk_odd += p->block_k != 0 && (p->block_k & (p->block_k - 1)) != 0;
        bq_set += p->block_q != 0;
        scale_set += p->scale != 0.0f;
        scale_neg += p->scale < 0.0f;
        stream += specs[i].use_stream;
        fast += p->precision == TA_PRECISION_FAST;
        strided += specs[i].strided;
        strided_mta += specs[i].strided && p->conv_q;
        splits += p->num_splits != 0 && p->num_splits != 1;
        splits_mta += p->num_splits != 0 && p->num_splits != 1 && p->conv_q;
        if (p->rope != TA_ROPE_NONE) {
            ++rope;
            rope_mta += p->conv_q != 0;
            rope_half += p->rope == TA_ROPE_HALF;
            rope_tab[specs[i].rope_table]++;
            rope_pos += specs[i].rope_pos != ROPE_POS_NONE;
            rope_heads += p->rope_head_stride != 0;
        }
        if (p->flags & TA_WINDOW) {
            ++win;
            win_mta += p->conv_q != 0;
            win_left += p->window_left >= 0;
            win_right += p->window_right >= 0;
            win_causal += (p->flags & TA_CAUSAL) != 0;
        }
        if (p->conv_q) {
            ++mta;
            c611 += p->conv_q == 6 && p->conv_k == 11;
            c_1x1 += p->conv_q == 1 && p->conv_k == 1;
            c_max += p->conv_q == TA_CONV_Q_MAX || p->conv_k == TA_CONV_K_MAX;
            c_other += !(p->conv_q == 6 && p->conv_k == 11) && !(p->conv_q == 3 && p->conv_k == 3);
        }
        if (p->seq_q > max_sq) max_sq = p->seq_q;
        if (p->seq_k > max_sk) max_sk = p->seq_k;
        /* the register-blocked forward's problems (ta_cuda_fwd_rb_ok less the
         * 16-byte rows, which strided layouts may miss; TA_BLOCK_DEFAULT 64) */
        if (p->dtype == TA_F32 && !p->conv_q && p->rope == TA_ROPE_NONE &&
            p->head_dim == p->head_dim_v && p->head_dim % 32 == 0 && p->head_dim <= 128 &&
            p->block_k <= 64) {
            ++rb;
            rb_strided += specs[i].strided;
        }
    }
    printf("coverage of %d problems: f32 %d, f16 %d, bf16 %d; causal %d; seqlens_k %d; GQA %d; "
           "S_q != S_k %d; S = 1 %d; S >= 4096 %d (max S_q %d, S_k %d); D or D_v <= 8 %d, "
           "> 128 %d, D != D_v %d; block_k set %d (not a power of two %d), block_q set %d; "
           "scale set %d (negative %d); created stream %d; TA_PRECISION_FAST %d; MTA %d (6x11 "
           "%d, 1x1 %d, c_q = 16 or c_k = 31 %d, not 6x11 or 3x3 %d); window %d (MTA %d; "
           "left bound %d, right bound %d, with TA_CAUSAL %d); strided %d (MTA %d); split-K %d "
           "(MTA %d); rope %d (MTA %d, half-split %d; tables 1-D %d, 2-D %d, random %d, "
           "identity %d; positions %d; per-head %d); register-blocked forward's domain %d "
           "(strided %d)\n",
           n, dt[0], dt[1], dt[2], causal, seql, gqa, neq, s1, big_s, (int)max_sq, (int)max_sk,
           d_small, d_big, d_ne, bk_set, bk_odd, bq_set, scale_set, scale_neg, stream, fast, mta,
           c611, c_1x1, c_max, c_other, win, win_mta, win_left, win_right, win_causal, strided,
           strided_mta, splits, splits_mta, rope, rope_mta, rope_half, rope_tab[ROPE_TAB_1D],
           rope_tab[ROPE_TAB_2D], rope_tab[ROPE_TAB_RANDOM], rope_tab[ROPE_TAB_IDENTITY], rope_pos,
           rope_heads, rb, rb_strided);
}

/* ---- main ---- */

/* ---- Non-finite scores (docs/exactness.md section 8; test/nonfinite.h) ---- */

static void *dev_upload(const void *src, size_t bytes) {
    void *d = dev_alloc(bytes);
    if (src) CUDA_OK(cudaMemcpy(d, src, bytes ? bytes : 1, cudaMemcpyHostToDevice));
    return d;
}

/* Forward and backward (from REF's o and lse) of c on the device into out. */
static ta_status nf_run_cuda(const nf_case *c, const nf_out *ref, nf_out *out) {
    const size_t eb = c->eb;
    void *q = dev_upload(c->q, c->n_q * eb), *k = dev_upload(c->k, c->n_k * eb);
    void *v = dev_upload(c->v, c->n_v * eb), *d_o = dev_upload(c->d_o, c->n_o * eb);
    void *o_in = dev_upload(ref->o, c->n_o * eb);
    float *lse_in = (float *)dev_upload(ref->lse, c->n_lse * sizeof(float));
    float *w = c->n_w ? (float *)dev_upload(c->w, c->n_w * sizeof(float)) : NULL;
    void *o = dev_upload(out->o, c->n_o * eb), *dq = dev_upload(out->dq, c->n_q * eb);
    void *dk = dev_upload(out->dk, c->n_k * eb), *dv = dev_upload(out->dv, c->n_v * eb);
    float *lse = (float *)dev_upload(out->lse, c->n_lse * sizeof(float));
    float *dw = c->n_w ? (float *)dev_upload(out->dw, c->n_w * sizeof(float)) : NULL;
    size_t fb = 0, bb = 0;
    void *ws = NULL;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_status st;
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = q, fa.k = k, fa.v = v, fa.conv_w = w, fa.seqlens_k = c->seqlens, fa.o = o, fa.lse = lse;
    ba.q = q, ba.k = k, ba.v = v, ba.conv_w = w, ba.seqlens_k = c->seqlens, ba.o = o_in;
    ba.lse = lse_in, ba.d_o = d_o, ba.dq = dq, ba.dk = dk, ba.dv = dv, ba.dconv_w = dw;
    st = ta_fwd_workspace_size(&c->p, TA_BACKEND_CUDA, &fb);
    if (st == TA_OK) st = ta_bwd_workspace_size(&c->p, TA_BACKEND_CUDA, &bb);
    if (st == TA_OK) {
        ws = dev_alloc(fb > bb ? fb : bb);
        CUDA_OK(cudaMemset(ws, 0xFF, fb > bb ? fb : bb));
        st = ta_fwd(&c->p, TA_BACKEND_CUDA, &fa, ws, fb, NULL);
    }
    if (st == TA_OK) st = ta_bwd(&c->p, TA_BACKEND_CUDA, &ba, ws, bb, NULL);
    if (st == TA_OK) {
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(out->o, o, c->n_o * eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out->lse, lse, c->n_lse * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out->dq, dq, c->n_q * eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out->dk, dk, c->n_k * eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out->dv, dv, c->n_v * eb, cudaMemcpyDeviceToHost));
        if (dw) CUDA_OK(cudaMemcpy(out->dw, dw, c->n_w * sizeof(float), cudaMemcpyDeviceToHost));
    }
    {
        void *const bufs[] = {q, k, v, d_o, o_in, lse_in, w, o, dq, dk, dv, lse, dw, ws};
        size_t b;
        for (b = 0; b < sizeof bufs / sizeof bufs[0]; ++b)
            CUDA_OK(cudaFree(bufs[b]));
    }
    return st;
}

/* The fixed non-finite cases and n_random random ones: CUDA == REF (NaN
 * positions, every other bit), and the documented rules on CUDA's outputs. */
static void nonfinite_cases(ta_rng *r, int n_random) {
    size_t payload = 0, nan_rows = 0, empty_rows = 0;
    int i, n_ok = 0, n = nf_fixed_count() + n_random;
    for (i = 0; i < n; ++i) {
        nf_case c;
        nf_out ref, dev;
        ta_status st;
        const int before = g_fail + ta_test_failures;
        if (i < nf_fixed_count())
            nf_make_fixed(i, r, &c);
        else
            nf_make_random(r, &c, i % 3 == 2);
        nf_alloc_out(&c, &ref);
        nf_alloc_out(&c, &dev);
        st = nf_run_host(TA_BACKEND_REF, r, &c, &ref, NULL, NULL);
        if (st == TA_OK) st = nf_run_cuda(&c, &ref, &dev);
        if (st != TA_OK)
            FAIL("nonfinite %s: status %d", c.name, (int)st);
        else {
            (void)nf_same_all("cuda", &c, &ref, &dev, &payload);
            (void)nf_check_rules(&c, &dev, &nan_rows, &empty_rows);
        }
        n_ok += g_fail + ta_test_failures == before;
        nf_free_out(&ref);
        nf_free_out(&dev);
        nf_free_case(&c);
    }
    printf("nonfinite: %d of %d problems equal to REF but NaN payloads (%zu NaN rows, %zu rows "
           "of -inf only, %zu NaN pairs with other payload bits)\n",
           n_ok, n, nan_rows, empty_rows, payload);
}

int main(int argc, char **argv) {
    int quick = 0, only = -1, count = N_DEFAULT, count_mta = N_DEFAULT, n_specs = 0, i;
    int count_rb = N_RB_DEFAULT, rb_only = 0, extras;
    int n_ok = 0, dev_count = 0, want_sdpa = 1, want_mta = 1;
    uint64_t seed;
    spec *specs;
    ta_rng r;
    double t0;
    struct timespec ts;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--problem") == 0 && i + 1 < argc)
            only = atoi(argv[++i]);
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = atoi(argv[++i]);
        else if (strcmp(argv[i], "--count-mta") == 0 && i + 1 < argc)
            count_mta = atoi(argv[++i]);
        else if (strcmp(argv[i], "--count-rb") == 0 && i + 1 < argc)
            count_rb = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mta") == 0)
            want_sdpa = 0;
        else if (strcmp(argv[i], "--sdpa") == 0)
            want_mta = 0;
        else if (strcmp(argv[i], "--fwd-only") == 0)
            g_check_bwd = 0;
        else if (strcmp(argv[i], "--bwd-only") == 0)
            g_check_fwd = 0;
        else if (strcmp(argv[i], "--window") == 0)
            g_window_pct = 100;
        else if (strcmp(argv[i], "--strided") == 0)
            g_strided_pct = 100;
        else if (strcmp(argv[i], "--splits") == 0)
            g_splits_pct = 100;
        else if (strcmp(argv[i], "--rope") == 0)
            g_rope_pct = 100;
        else if (strcmp(argv[i], "--rb-only") == 0) /* sanitizer runs: nothing else */
            rb_only = 1;
        else {
            fprintf(stderr, "usage: test_cuda_equiv [--quick] [--problem N] [--count N] "
                            "[--count-mta N] [--count-rb N] [--mta | --sdpa] "
                            "[--fwd-only | --bwd-only] "
                            "[--window] [--strided] [--splits] [--rope] [--rb-only]\n");
            return 2;
        }
    }
    if (count < 0 || count_mta < 0 || count_rb < 0 || (!want_sdpa && !want_mta) ||
        (!g_check_fwd && !g_check_bwd) || (rb_only && (quick || !want_sdpa))) {
        fprintf(stderr, "test_cuda_equiv: conflicting or negative options\n");
        return 2;
    }
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("no CUDA device: skipped\n");
        return TA_TEST_SKIP;
    }
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        fprintf(stderr, "FAIL: a CUDA device is present but TA_BACKEND_CUDA is unavailable\n");
        return 1;
    }
    seed = ta_test_seed("test_cuda_equiv");
    specs = (spec *)calloc((size_t)count + (size_t)count_mta + (size_t)count_rb + 64, sizeof(spec));
    if (!specs) return 1;
    if (rb_only) { /* the register-blocked domain's random problems alone */
        for (i = 0; i < count_rb; ++i)
            random_rb_spec(seed, i, &specs[n_specs++]);
    } else if (quick) {
        const int n = quick_specs(specs);
        for (i = 0; i < n; ++i) /* keep the ones the filter wants */
            if (specs[i].p.conv_q ? want_mta : want_sdpa) specs[n_specs++] = specs[i];
    } else {
        if (want_mta) n_specs += special_mta_specs(specs + n_specs);
        if (want_sdpa) n_specs += special_specs(specs + n_specs);
        n_specs += special_window_specs(specs + n_specs, want_sdpa, want_mta);
        n_specs += special_splitk_specs(specs + n_specs, want_sdpa, want_mta);
        n_specs += special_rope_specs(specs + n_specs, want_sdpa, want_mta);
        for (i = 0; want_mta && i < count_mta; ++i)
            random_mta_spec(seed, i, &specs[n_specs++]);
        for (i = 0; want_sdpa && i < count; ++i)
            random_spec(seed, i, &specs[n_specs++]);
        for (i = 0; want_sdpa && i < count_rb; ++i)
            random_rb_spec(seed, i, &specs[n_specs++]);
    }
    if (only < 0) print_coverage(specs, n_specs);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;

    TA_OMP("omp parallel reduction(+ : n_ok)") {
        cudaStream_t s;
        int j;
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        TA_OMP("omp for schedule(dynamic, 1)")
        for (j = 0; j < n_specs; ++j) {
            if (only >= 0 && j != only) continue;
            n_ok += run_problem(&specs[j], j, seed, s);
        }
        CUDA_OK(cudaStreamDestroy(s));
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("test_cuda_equiv: %d of %d problems bit-identical to REF (%s; two runs each) in "
           "%.1f s\n",
           n_ok, only >= 0 ? 1 : n_specs,
           !g_check_bwd   ? "forward: o, lse"
           : !g_check_fwd ? "backward: dq, dk, dv, dconv_w"
                          : "o, lse, dq, dk, dv, dconv_w",
           (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - t0);
    extras = only < 0 && !rb_only; /* the cases below: not with --rb-only */
    if (extras && want_sdpa && want_mta && g_check_fwd && g_check_bwd) {
        ta_rng_seed(&r, seed ^ UINT64_C(0xbad));
        bad_input_cases(&r);
    }
    if (extras) {
        ta_rng_seed(&r, seed ^ UINT64_C(0x3e6e));
        merge_cases(&r, quick ? 6 : 40);
    }
    if (extras && want_mta && g_check_fwd) { /* MTA decode / chunked prefill */
        ta_rng_seed(&r, seed ^ UINT64_C(0x4157));
        history_cases(&r, quick ? 4 : 60, quick ? 3 : 40);
    }
    if (extras && g_check_fwd && g_check_bwd) {
        ta_rng_seed(&r, seed ^ UINT64_C(0x4e614e));
        nonfinite_cases(&r, quick ? 8 : 120);
    }
    free(specs);
    ta_test_failures += g_fail;
    return ta_test_finish("test_cuda_equiv");
}
