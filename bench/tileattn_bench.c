/*
 * tileattn-bench: run one attention problem on every available backend, check
 * each against the reference backend, time it and print a table (and CSV).
 *
 * What one row is: one backend, one pass (fwd or bwd). The pass runs
 * --warmup untimed calls, then --reps timed calls; the time is the median of
 * the timed calls (clock_gettime(CLOCK_MONOTONIC) around the library call and
 * the buffer provider's sync). Before every call the outputs are poisoned
 * (0xFF bytes: a NaN in f32, f16 and bf16); after every call, warm-up
 * included, the outputs are compared with TA_BACKEND_REF's:
 *   - REF itself: its first run *is* the reference; every later run must be
 *     bit-identical to it (run-to-run determinism), and the reference may hold
 *     no NaN (a NaN means an output was left unwritten: poison survived).
 *   - other backends: bit-identical to REF (TA_PRECISION_EXACT, docs/design.md 3),
 *     else MISMATCH with the max abs difference.
 * Every backward gets the same inputs: REF's forward o and lse, a random d_o.
 *
 * FLOP count (useful work only, per visible (row, key) pair, summed over batch
 * and query heads; a pair is visible if the key is inside seqlens_k[b] and, with
 * --causal, j <= r + S_k - S_q):
 *   forward : 2 (D + D_v)      two matmuls, S = Q K^T and O = P V
 *   backward: 2 (3 D + 2 D_v)  five matmuls: S = Q K^T (recomputed), dP = dO V^T,
 *                              dV = P^T dO, dQ = dS K, dK = dS^T Q;
 *                              = 2.5x the forward when D = D_v
 *   MTA conv: + 2 c_q c_k per pair forward, + 4 c_q c_k backward (transposed conv
 *             and kernel gradient). Softmax, exp, halo recomputation and masked
 *             work are not counted: they are overhead, not work.
 *
 * Memory goes through a "buffer provider" per backend (struct bench_mem,
 * bench/bench_mem.h): host memory for REF and CPU, device memory for CUDA
 * (bench/bench_mem_cuda.c, built with TILEATTN_CUDA; the CUDA rows' times
 * include a cudaStreamSynchronize after each call).
 *
 * A backend that does not implement the problem yet (its size query returns
 * TA_ERR_UNSUPPORTED) is 'unavailable' for this run.
 * Exit status: 0 all rows ok (unavailable backends allowed under --backend all),
 * 1 an error, mismatch, NaN, or explicitly requested backend unavailable,
 * 2 a bad command line or a problem the library rejects.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_mem.h"
#include "ta_math.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

#ifndef TA_BENCH_COMMIT
#define TA_BENCH_COMMIT "unknown"
#endif

/* Default problem: B=1, H=4, S=512, D=64, causal, f32, with the MTA key-query
 * conv of the paper's models (c_q=6, c_k=11; --sdpa for plain SDPA). About 0.5M
 * visible pairs: 0.20 GFLOP forward, 0.47 GFLOP backward, about 7 s for the
 * scalar REF on one core with the default reps (plain SDPA: about 4 s); D=64
 * and a causal mask are the most common LLM configuration; S=512 spans 9-12
 * tiles of the default 64 (54 x 44 effective in the backward). */
#define BENCH_MTA_CONV_Q     6 /* the paper's models */
#define BENCH_MTA_CONV_K     11
#define BENCH_DEFAULT_CONV_Q BENCH_MTA_CONV_Q
#define BENCH_DEFAULT_CONV_K BENCH_MTA_CONV_K

#define BENCH_NUM_BACKENDS         3
#define BENCH_MAX_SHOWN_MISMATCHES 5
#define BENCH_POISON_BYTE          0xFF
#define BENCH_NOTE_LEN             200
#define BENCH_PROGRESS_PERIOD_S    5.0 /* stderr not a terminal: one line this often */

/* The check of a TA_PRECISION_FAST row that is not bit-identical to REF:
 * |got - ref| <= atol + rtol |ref| per element, by storage dtype. Only CUDA's
 * tensor-core paths differ from REF today: the f16/bf16 SDPA forward and
 * (sm_90) backward, and the f16/bf16 MTA forward; the library's bounds for
 * them are 2u and 4u of the oracle magnitude (docs/exactness.md section 9,
 * checked by test/test_cuda_fast.c and test/test_cuda_fast_mta.c). These tolerances are the
 * bench's own, looser, since it compares with REF, not with the float64
 * oracle. */
static const double bench_fast_tol[3] = {2e-3, 4e-3, 2e-2}; /* f32, f16, bf16: atol = rtol */

/* ------------------------------------------------------------------------- */
/* Options                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct bench_opts {
    int32_t batch, heads, heads_kv, seq, seq_q, seq_k, dim, dim_v; /* 0: derived default */
    ta_dtype dtype;
    int causal;
    int32_t conv_q, conv_k, block_q, block_k;
    const char *seqlens_k; /* "N" or "N,N,..." (one per batch); NULL = full */
    unsigned backends;     /* bit (1 << ta_backend) */
    int backends_explicit; /* --backend named them: unavailable is a failure */
    int fwd_only;
    int check;             /* compare with REF (0: --no-check) */
    ta_precision precision;
    int32_t threads; /* CPU backend threads; 0 = the library's default */
    int32_t reps, warmup;
    uint64_t seed;
    const char *csv;
    int progress; /* -1 auto (a line rewritten in place on a terminal stderr,
                     else a line every BENCH_PROGRESS_PERIOD_S), 0 never, 1 always */
} bench_opts;

static const char *const help_lines[] = {
    "usage: tileattn-bench [options]",
    "",
    "Runs one attention problem on every available backend, checks each against",
    "the reference backend (REF), and prints backend, direction (fwd/bwd), result,",
    "median time, GFLOP/s, workspace bytes and 'bit-identical' or the max abs diff",
    "vs REF, then one verdict line: how many rows are bit-identical (or, with",
    "--precision fast, within the bound) and why any row failed.",
    "",
    "Problem (default: B=1 H=4 S=512 D=64, causal, f32, MTA conv 6x11):",
    "  --batch N          batch size B                                  [1]",
    "  --heads N          query heads H                                 [4]",
    "  --heads-kv N       kv heads H_kv, divides H (GQA/MQA)            [H]",
    "  --seq N            S_q = S_k = N                                 [512]",
    "  --seq-q N          query length S_q (overrides --seq)",
    "  --seq-k N          key length S_k (overrides --seq)",
    "  --dim N            head dim D of q and k, 1..256                 [64]",
    "  --dim-v N          head dim D_v of v and o, 1..256               [D]",
    "  --dtype T          storage dtype: f32, f16 or bf16               [f32]",
    "  --causal           causal mask, aligned bottom-right             [on]",
    "  --no-causal        no causal mask",
    "  --seqlens-k L      keys per batch, each in [0, S_k]: N (every batch) or",
    "                     N,N,... (one per batch)                       [S_k]",
    "  --conv-q N         MTA key-query conv rows c_q, 1..16, and       [6]",
    "  --conv-k N         its columns c_k, odd, 1..31 (set both)        [11]",
    "  --mta              MTA conv with the paper's c_q=6, c_k=11       [on]",
    "  --sdpa             plain SDPA (no conv: c_q = c_k = 0)",
    "  --block-q N        Q tile rows, 8..256                           [library]",
    "  --block-k N        K tile columns, 8..256                        [library]",
    "  --precision P      exact (bit-identical to REF) or fast          [exact]",
    "  --threads N        CPU backend threads, 0 = library default      [0]",
    "",
    "Run:",
    "  --backend B        ref, cpu, cuda, all, or a list like ref,cpu   [all]",
    "  --fwd-only         skip the backward",
    "  --reps N           timed repetitions per pass; time = median     [5]",
    "  --warmup N         untimed calls before them                     [1]",
    "  --seed N           PRNG seed for the inputs                      [1]",
    "  --no-check         time only: no REF run, no comparison (the backward of",
    "                     each backend takes its own forward's o and lse)",
    "  --csv FILE         append one row per backend and direction (header if new)",
    "  --progress         always show progress on stderr",
    "  --no-progress      never show it (default: after a second, a line rewritten",
    "                     in place when stderr is a terminal, else one line every 5 s)",
    "  --help             this text",
    "",
    "Checks: outputs are poisoned (NaN bytes) before every call and compared with",
    "REF's after every call. A non-REF backend passes if bit-identical to REF",
    "(TA_PRECISION_EXACT), or with --precision fast if every element is within",
    "atol + rtol |ref| (atol = rtol = 2e-3 f32, 4e-3 f16, 2e-2 bf16). REF's first",
    "run is the reference; its later runs must be bit-identical to it and it may",
    "contain no NaN. The backward of every backend takes REF's forward o and lse.",
    "",
    "FLOPs, per visible (row, key) pair (causal mask and --seqlens-k applied),",
    "summed over batch and query heads:",
    "  forward   2 (D + D_v)        (S = QK^T, O = PV)",
    "  backward  2 (3 D + 2 D_v)    (5 matmuls; = 2.5x forward when D = D_v)",
    "  MTA conv  + 2 c_q c_k forward, + 4 c_q c_k backward",
    "Softmax, exp and halo recomputation are not counted.",
    "",
    "Memory is host memory for ref and cpu and device memory (cudaMalloc) for cuda;",
    "cuda times include a cudaStreamSynchronize after each call.",
    "",
    "A backend that cannot run reports 'unavailable' and says why: built without",
    "CUDA, no CUDA device, a CUDA driver error, or the problem is not implemented",
    "by that backend (TA_ERR_UNSUPPORTED).",
    "",
    "Exit status: 0 all ok; 1 an error, mismatch or NaN (or a backend named by",
    "--backend is unavailable); 2 a bad command line or a problem the library rejects.",
};

static void print_help(FILE *f) {
    size_t i;
    for (i = 0; i < sizeof help_lines / sizeof help_lines[0]; ++i) {
        fputs(help_lines[i], f);
        fputc('\n', f);
    }
}

static void opts_default(bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = 1;
    o->heads = 4;
    o->seq = 512;
    o->dim = 64;
    o->dtype = TA_F32;
    o->causal = 1;
    o->conv_q = BENCH_DEFAULT_CONV_Q;
    o->conv_k = BENCH_DEFAULT_CONV_K;
    o->backends = (1u << TA_BACKEND_REF) | (1u << TA_BACKEND_CPU) | (1u << TA_BACKEND_CUDA);
    o->check = 1;
    o->precision = TA_PRECISION_EXACT;
    o->reps = 5;
    o->warmup = 1;
    o->seed = 1;
    o->progress = -1;
}

/* Print "tileattn-bench: <fmt with a1, a2>" and a pointer to --help; returns 2. */
static int usage_error(const char *fmt, const char *a1, const char *a2) {
    fprintf(stderr, "tileattn-bench: ");
    fprintf(stderr, fmt, a1, a2);
    fprintf(stderr, "\n(try --help)\n");
    return 2;
}

/* Parse a decimal int32 in [lo, hi]; 0 on success. */
static int parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < (long)lo || v > (long)hi) return -1;
    *out = (int32_t)v;
    return 0;
}

static int parse_backends(const char *s, unsigned *mask) {
    const char *p = s;
    *mask = 0;
    while (*p) {
        const size_t n = strcspn(p, ",");
        if (n == 3 && strncmp(p, "all", 3) == 0)
            *mask |= (1u << TA_BACKEND_REF) | (1u << TA_BACKEND_CPU) | (1u << TA_BACKEND_CUDA);
        else if (n == 3 && strncmp(p, "ref", 3) == 0)
            *mask |= 1u << TA_BACKEND_REF;
        else if (n == 3 && strncmp(p, "cpu", 3) == 0)
            *mask |= 1u << TA_BACKEND_CPU;
        else if (n == 4 && strncmp(p, "cuda", 4) == 0)
            *mask |= 1u << TA_BACKEND_CUDA;
        else
            return -1;
        p += n;
        if (*p == ',') ++p;
    }
    return *mask ? 0 : -1;
}

/* Options that take an int32 value: name, target, range. */
typedef struct int_opt {
    const char *name;
    int32_t *target;
    int32_t lo, hi;
} int_opt;

/* Options without a value. Returns 1 if handled. */
static int parse_flag(bench_opts *o, const char *arg) {
    if (strcmp(arg, "--causal") == 0) {
        o->causal = 1;
    } else if (strcmp(arg, "--no-causal") == 0) {
        o->causal = 0;
    } else if (strcmp(arg, "--mta") == 0) {
        o->conv_q = BENCH_MTA_CONV_Q;
        o->conv_k = BENCH_MTA_CONV_K;
    } else if (strcmp(arg, "--sdpa") == 0) {
        o->conv_q = 0;
        o->conv_k = 0;
    } else if (strcmp(arg, "--fwd-only") == 0) {
        o->fwd_only = 1;
    } else if (strcmp(arg, "--no-check") == 0) {
        o->check = 0;
    } else if (strcmp(arg, "--progress") == 0) {
        o->progress = 1;
    } else if (strcmp(arg, "--no-progress") == 0) {
        o->progress = 0;
    } else {
        return 0;
    }
    return 1;
}

/* Options with a value that is not an int32. Returns 1 handled, -1 bad value, 0 unknown. */
static int parse_other(bench_opts *o, const char *name, const char *val) {
    if (strcmp(name, "--dtype") == 0) {
        if (strcmp(val, "f32") == 0)
            o->dtype = TA_F32;
        else if (strcmp(val, "f16") == 0)
            o->dtype = TA_F16;
        else if (strcmp(val, "bf16") == 0)
            o->dtype = TA_BF16;
        else
            return -1;
    } else if (strcmp(name, "--precision") == 0) {
        if (strcmp(val, "exact") == 0)
            o->precision = TA_PRECISION_EXACT;
        else if (strcmp(val, "fast") == 0)
            o->precision = TA_PRECISION_FAST;
        else
            return -1;
    } else if (strcmp(name, "--backend") == 0) {
        if (parse_backends(val, &o->backends) != 0) return -1;
        o->backends_explicit = strcmp(val, "all") != 0;
    } else if (strcmp(name, "--seed") == 0) {
        char *end = NULL;
        errno = 0;
        o->seed = (uint64_t)strtoull(val, &end, 0);
        if (errno != 0 || end == val || *end != '\0' || val[0] == '-') return -1;
    } else if (strcmp(name, "--csv") == 0) {
        o->csv = val;
    } else if (strcmp(name, "--seqlens-k") == 0) {
        o->seqlens_k = val;
    } else {
        return 0;
    }
    return 1;
}

/* Returns 0 to run, 1 for --help (printed), 2 for a usage error (printed). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    const int_opt ints[] = {
        {"--batch", &o->batch, 1, INT32_MAX},       {"--heads", &o->heads, 1, INT32_MAX},
        {"--heads-kv", &o->heads_kv, 1, INT32_MAX}, {"--seq", &o->seq, 1, INT32_MAX},
        {"--seq-q", &o->seq_q, 1, INT32_MAX},       {"--seq-k", &o->seq_k, 1, INT32_MAX},
        {"--dim", &o->dim, 1, INT32_MAX},           {"--dim-v", &o->dim_v, 1, INT32_MAX},
        {"--conv-q", &o->conv_q, 0, INT32_MAX},     {"--conv-k", &o->conv_k, 0, INT32_MAX},
        {"--block-q", &o->block_q, 0, INT32_MAX},   {"--block-k", &o->block_k, 0, INT32_MAX},
        {"--reps", &o->reps, 1, 1000000},           {"--warmup", &o->warmup, 0, 1000000},
        {"--threads", &o->threads, 0, INT32_MAX},
    };
    int i;
    for (i = 1; i < argc; ++i) {
        char name[64];
        const char *arg = argv[i], *val, *eq = strchr(arg, '=');
        size_t j, n = eq ? (size_t)(eq - arg) : strlen(arg);
        int r;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(stdout);
            return 1;
        }
        if (!eq && parse_flag(o, arg)) continue;
        if (strncmp(arg, "--", 2) != 0 || n >= sizeof name)
            return usage_error("unknown argument '%s'%s", arg, "");
        memcpy(name, arg, n);
        name[n] = '\0';
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return usage_error("option '%s' needs a value%s", name, "");
        for (j = 0; j < sizeof ints / sizeof ints[0]; ++j)
            if (strcmp(name, ints[j].name) == 0) break;
        if (j < sizeof ints / sizeof ints[0]) {
            if (parse_i32(val, ints[j].lo, ints[j].hi, ints[j].target) != 0)
                return usage_error("bad value '%s' for %s (an integer in its range: see --help)",
                                   val, name);
            continue;
        }
        r = parse_other(o, name, val);
        if (r == 0) return usage_error("unknown option '%s'%s", name, "");
        if (r < 0) return usage_error("bad value '%s' for %s", val, name);
    }
    return 0;
}

static void problem_from_opts(const bench_opts *o, ta_problem *p) {
    memset(p, 0, sizeof *p);
    p->batch = o->batch;
    p->heads_q = o->heads;
    p->heads_kv = o->heads_kv ? o->heads_kv : o->heads;
    p->seq_q = o->seq_q ? o->seq_q : o->seq;
    p->seq_k = o->seq_k ? o->seq_k : o->seq;
    p->head_dim = o->dim;
    p->head_dim_v = o->dim_v ? o->dim_v : o->dim;
    p->dtype = o->dtype;
    p->precision = o->precision;
    p->flags = o->causal ? TA_CAUSAL : 0u;
    p->scale = 0.0f;
    p->conv_q = o->conv_q;
    p->conv_k = o->conv_k;
    p->block_q = o->block_q;
    p->block_k = o->block_k;
    p->num_threads = o->threads;
}

/* "--seqlens-k" into [batch] values, each in [0, seq_k]. 0 ok. */
static int parse_seqlens(const char *s, int32_t batch, int32_t seq_k, int32_t *out) {
    int32_t n = 0, b;
    const char *p = s;
    char item[32];
    while (*p) {
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || n >= batch) return -1;
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_i32(item, 0, seq_k, &out[n++]) != 0) return -1;
        p += len;
        if (*p == ',' && *++p == '\0') return -1;
    }
    if (n == 1)
        for (b = 1; b < batch; ++b)
            out[b] = out[0];
    else if (n != batch)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* PRNG (xorshift64*, seeded through one splitmix step) and input fills      */
/* ------------------------------------------------------------------------- */

typedef struct bench_rng {
    uint64_t state;
} bench_rng;

static void rng_seed(bench_rng *r, uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    r->state = z ? z : 0x2545f4914f6cdd1dull; /* xorshift state must not be 0 */
}

static uint64_t rng_next(bench_rng *r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi) from the top 24 bits. */
static float rng_uniform(bench_rng *r, float lo, float hi) {
    const float u = (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
}

/* ------------------------------------------------------------------------- */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------- */

/* clang-format off */
enum {
    T_Q, T_K, T_V, T_CONV_W, T_SEQLENS, T_DO, /* inputs */
    T_O, T_LSE,                               /* forward outputs (backward inputs) */
    T_DQ, T_DK, T_DV, T_DCONV_W,              /* backward outputs */
    T_COUNT
};
/* clang-format on */

typedef enum { PASS_FWD = 0, PASS_BWD = 1 } bench_pass;
static const char *const pass_names[2] = {"fwd", "bwd"};

/* Element kind: a storage-dtype tensor, f32 or int32. */
typedef enum { EK_DTYPE, EK_F32, EK_I32 } elem_kind;

typedef struct tensor_info {
    const char *name;
    elem_kind kind;
    size_t elems, bytes; /* bytes == 0: not used in this run */
    int32_t dims[4];     /* for printing an index; trailing 1s */
} tensor_info;

static size_t elem_bytes(elem_kind k, ta_dtype dt) {
    return k == EK_DTYPE ? (dt == TA_F32 ? 4u : 2u) : 4u;
}

static void tensor_set(tensor_info *t, const char *name, elem_kind kind, ta_dtype dt, int32_t d0,
                       int32_t d1, int32_t d2, int32_t d3) {
    t->name = name;
    t->kind = kind;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->dims[2] = d2;
    t->dims[3] = d3;
    t->elems = (size_t)d0 * (size_t)d1 * (size_t)d2 * (size_t)d3;
    t->bytes = t->elems * elem_bytes(kind, dt);
}

/* Shapes of every tensor (docs/design.md 2). Called after the library validated p, so
 * the products fit size_t (it checks them). Unused tensors get 0 bytes. */
static void tensors_describe(const ta_problem *p, int has_seqlens, int fwd_only, tensor_info *t) {
    const int32_t B = p->batch, H = p->heads_q, Hk = p->heads_kv, Sq = p->seq_q, Sk = p->seq_k;
    const int32_t D = p->head_dim, Dv = p->head_dim_v, cq = p->conv_q, ck = p->conv_k;
    const ta_dtype dt = p->dtype;
    tensor_set(&t[T_Q], "q", EK_DTYPE, dt, B, H, Sq, D);
    tensor_set(&t[T_K], "k", EK_DTYPE, dt, B, Hk, Sk, D);
    tensor_set(&t[T_V], "v", EK_DTYPE, dt, B, Hk, Sk, Dv);
    tensor_set(&t[T_CONV_W], "conv_w", EK_F32, dt, cq ? H : 0, cq, ck, 1);
    tensor_set(&t[T_SEQLENS], "seqlens_k", EK_I32, dt, has_seqlens ? B : 0, 1, 1, 1);
    tensor_set(&t[T_DO], "d_o", EK_DTYPE, dt, fwd_only ? 0 : B, H, Sq, Dv);
    tensor_set(&t[T_O], "o", EK_DTYPE, dt, B, H, Sq, Dv);
    tensor_set(&t[T_LSE], "lse", EK_F32, dt, B, H, Sq, 1);
    tensor_set(&t[T_DQ], "dq", EK_DTYPE, dt, fwd_only ? 0 : B, H, Sq, D);
    tensor_set(&t[T_DK], "dk", EK_DTYPE, dt, fwd_only ? 0 : B, Hk, Sk, D);
    tensor_set(&t[T_DV], "dv", EK_DTYPE, dt, fwd_only ? 0 : B, Hk, Sk, Dv);
    tensor_set(&t[T_DCONV_W], "dconv_w", EK_F32, dt, (cq && !fwd_only) ? H : 0, cq, ck, 1);
}

/* Outputs of each pass. */
static const int fwd_outputs[] = {T_O, T_LSE};
static const int bwd_outputs[] = {T_DQ, T_DK, T_DV, T_DCONV_W};

static float elem_get(const tensor_info *t, ta_dtype dt, const void *buf, size_t i) {
    if (t->kind == EK_F32 || (t->kind == EK_DTYPE && dt == TA_F32)) return ((const float *)buf)[i];
    if (dt == TA_F16) return ta_f16_to_f32(((const uint16_t *)buf)[i]);
    return ta_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static void fill_uniform(bench_rng *r, const tensor_info *t, ta_dtype dt, void *buf, float lo,
                         float hi) {
    size_t i;
    for (i = 0; i < t->elems; ++i) {
        const float x = rng_uniform(r, lo, hi);
        if (t->kind == EK_F32 || dt == TA_F32)
            ((float *)buf)[i] = x;
        else if (dt == TA_F16)
            ((uint16_t *)buf)[i] = ta_f32_to_f16(x);
        else
            ((uint16_t *)buf)[i] = ta_f32_to_bf16(x);
    }
}

/* MTA kernel: identity (w[h, c_q-1, P] = 1) plus uniform noise in [-0.25, 0.25):
 * mixed signs, every tap nonzero, attention still close to causal SDPA. */
static void fill_conv(bench_rng *r, const tensor_info *t, float *w) {
    const int32_t H = t->dims[0], cq = t->dims[1], ck = t->dims[2];
    int32_t h;
    fill_uniform(r, t, TA_F32, w, -0.25f, 0.25f);
    for (h = 0; h < H; ++h) {
        const size_t centre = ((size_t)h * (size_t)cq + (size_t)(cq - 1)) * (size_t)ck;
        w[centre + (size_t)((ck - 1) / 2)] += 1.0f; /* w[h, c_q-1, P] */
    }
}

/* ------------------------------------------------------------------------- */
/* Buffer providers: where a backend's tensors and workspace live             */
/* ------------------------------------------------------------------------- */

/* One provider per memory space (bench/bench_mem.h): host memory here, serving
 * REF and CPU; device memory in bench/bench_mem_cuda.c, serving CUDA. */

static void *host_alloc(size_t bytes) {
    const size_t a = TA_WORKSPACE_ALIGN;
    if (bytes > SIZE_MAX - a) return NULL;
    return aligned_alloc(a, (bytes + a - 1) / a * a); /* size a multiple of the alignment */
}
static void host_release(void *ptr) { free(ptr); }
static int host_copy(void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
    return 0;
}
static int host_fill(void *dst, int byte, size_t bytes) {
    memset(dst, byte, bytes);
    return 0;
}
static int host_sync(void) { return 0; }

static const bench_mem host_mem = {"host",    host_alloc, host_release, host_copy,
                                   host_copy, host_fill,  host_sync,    NULL};

typedef struct bench_backend {
    ta_backend id;
    const char *name;
    const bench_mem *mem; /* NULL: built without CUDA (no device provider) */
} bench_backend;

/* REF first: it produces the reference every other backend is checked against. */
static const bench_backend bench_backends[BENCH_NUM_BACKENDS] = {
    {TA_BACKEND_REF, "ref", &host_mem},
    {TA_BACKEND_CPU, "cpu", &host_mem},
#ifdef TA_BENCH_HAVE_CUDA
    {TA_BACKEND_CUDA, "cuda", &bench_cuda_mem},
#else
    {TA_BACKEND_CUDA, "cuda", NULL},
#endif
};

/* Why the CUDA backend cannot run here (into why[n]), or NULL if it can: the
 * bench's build, then the device (the bench asks cudart itself, so "no device"
 * and a driver error read differently), then the library. */
static const char *cuda_unavailable_reason(char *why, size_t n) {
#ifdef TA_BENCH_HAVE_CUDA
    if (bench_cuda_probe(why, n) != 0) return why;
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        snprintf(why, n, "a CUDA device is present but the library's CUDA backend is not "
                         "linked (link tileattn::cuda)");
        return why;
    }
    return NULL;
#else
    snprintf(why, n, "built without CUDA (TILEATTN_CUDA=OFF, or no nvcc at configure time)");
    return why;
#endif
}

/* Why a backend cannot run here (into why[n]), or NULL if it can. */
static const char *backend_unavailable_reason(const bench_backend *be, char *why, size_t n) {
    if (be->id == TA_BACKEND_CUDA) return cuda_unavailable_reason(why, n);
    if (!ta_backend_available(be->id)) {
        snprintf(why, n, "not implemented in this library build");
        return why;
    }
    return NULL;
}

/* One backend's copies of the tensors, in its memory space. */
typedef struct bench_bufs {
    const bench_mem *mem;
    void *dev[T_COUNT];
} bench_bufs;

static void bufs_free(bench_bufs *b) {
    int i;
    for (i = 0; i < T_COUNT; ++i)
        if (b->dev[i]) b->mem->release(b->dev[i]);
    memset(b->dev, 0, sizeof b->dev);
}

/* ------------------------------------------------------------------------- */
/* Time and progress                                                          */
/* ------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct bench_progress {
    int enabled;      /* may be shown at all */
    int lines;        /* stderr is not a terminal: whole lines, one per period */
    double start;     /* bench start, s */
    double last_line; /* when the last whole line was written, s since start */
    int shown;        /* a rewritable line is on the terminal now */
    int width;        /* its length, to clear it */
} bench_progress;

/* Show "label: warm-up i/W" or "label: rep i/N" once the bench has run for
 * more than a second or this call is expected to take that long: on a terminal
 * a line rewritten in place, else (a pipe, a log file) a whole line at most
 * every BENCH_PROGRESS_PERIOD_S, so a long run is never silent. */
static void progress_show(bench_progress *pg, const char *label, int32_t run, int32_t warmup,
                          int32_t reps, double expect_s) {
    const double t = now_s() - pg->start;
    const int in_warmup = run < warmup;
    const int i = (int)(in_warmup ? run + 1 : run - warmup + 1);
    const int of = (int)(in_warmup ? warmup : reps);
    int n;
    if (!pg->enabled || (t < 1.0 && expect_s < 1.0)) return;
    if (pg->lines) {
        if (pg->last_line > 0.0 && t - pg->last_line < BENCH_PROGRESS_PERIOD_S) return;
        fprintf(stderr, "tileattn-bench: [%.1f s] %s: %s %d/%d (~%.2f s per call)\n", t, label,
                in_warmup ? "warm-up" : "rep", i, of, expect_s);
        fflush(stderr);
        pg->last_line = t;
        return;
    }
    n = fprintf(stderr, "\r[%.1f s] %s: %s %d/%d (~%.2f s per call)   ", t, label,
                in_warmup ? "warm-up" : "rep", i, of, expect_s);
    fflush(stderr);
    pg->shown = 1;
    if (n > pg->width) pg->width = n;
}

static void progress_clear(bench_progress *pg) {
    if (!pg->shown) return;
    fprintf(stderr, "\r%*s\r", pg->width, "");
    fflush(stderr);
    pg->shown = 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_sorted(const double *v, int32_t n) {
    return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------------- */
/* FLOPs                                                                      */
/* ------------------------------------------------------------------------- */

/* sum over a in [lo, hi] of clamp(a, 0, len): the visible keys of rows whose
 * causal limit (keys j < a) runs from lo to hi, with len keys present. */
static int64_t clamped_sum(int64_t lo, int64_t hi, int64_t len) {
    const int64_t a0 = lo > 1 ? lo : 1, a1 = hi < len ? hi : len; /* the part where a counts */
    const int64_t full_from = lo > len + 1 ? lo : len + 1;        /* the part capped at len */
    int64_t sum = 0;
    if (a1 >= a0) sum += (a0 + a1) * (a1 - a0 + 1) / 2;
    if (hi >= full_from) sum += (hi - full_from + 1) * len;
    return sum;
}

/* Visible (row, key) pairs summed over batch and query heads: key j < seqlens_k[b]
 * and, if causal, j <= r + S_k - S_q (bottom-right aligned), i.e. row r sees
 * clamp(r + S_k - S_q + 1, 0, len) keys. */
static double visible_pairs(const ta_problem *p, const int32_t *seqlens) {
    const int64_t off = (int64_t)p->seq_k - p->seq_q;
    double total = 0.0;
    int32_t b;
    for (b = 0; b < p->batch; ++b) {
        const int64_t len = seqlens ? seqlens[b] : p->seq_k;
        if (p->flags & TA_CAUSAL)
            total += (double)clamped_sum(off + 1, off + p->seq_q, len);
        else
            total += (double)len * (double)p->seq_q;
    }
    return total * (double)p->heads_q;
}

static double flops_per_pair(const ta_problem *p, bench_pass pass) {
    const double D = (double)p->head_dim, Dv = (double)p->head_dim_v;
    const double taps = (double)p->conv_q * (double)p->conv_k;
    if (pass == PASS_FWD) return 2.0 * (D + Dv) + 2.0 * taps;
    return 2.0 * (3.0 * D + 2.0 * Dv) + 4.0 * taps;
}

/* ------------------------------------------------------------------------- */
/* Results                                                                    */
/* ------------------------------------------------------------------------- */

typedef enum {
    ROW_OK,
    ROW_MISMATCH,   /* differs from REF (or REF differs run to run) */
    ROW_INVALID,    /* REF's output holds NaN: poison survived, an element was unwritten */
    ROW_ERROR,      /* a library or bench call failed */
    ROW_UNCHECKED,  /* ran, but there was no reference to compare with */
    ROW_SKIPPED,    /* not run: its inputs are missing */
    ROW_UNAVAILABLE /* backend cannot run here */
} row_status;

static const char *const row_status_names[] = {"ok",        "MISMATCH", "INVALID",    "ERROR",
                                               "UNCHECKED", "skipped",  "unavailable"};

typedef struct bench_row {
    const char *backend;
    const char *pass;   /* direction: "fwd", "bwd" or "-" */
    int is_ref, hidden; /* REF row; hidden: reference-only run, not in CSV */
    row_status status;
    ta_status err;  /* the failing library status, for ROW_ERROR from a ta_* call */
    char note[BENCH_NOTE_LEN]; /* why, for anything but ok */
    int32_t timed;  /* timed runs done */
    double median_ms, min_ms, gflops;
    size_t workspace_bytes;
    int have_ws;     /* the workspace size query succeeded */
    int o_check;     /* the run compares with REF (not --no-check) */
    int compared;    /* at least one run was compared */
    int identical;   /* every compared run was bit-identical */
    int within;      /* every compared element was identical or within the FAST
                        bound (only a FAST non-REF row may pass that way) */
    double max_diff; /* max abs diff over compared runs (NaN/inf possible) */
    const char *max_diff_tensor;
} bench_row;

/* Short name of a status ("TA_ERR_UNSUPPORTED"), into buf. */
static const char *status_name(ta_status s, char *buf, size_t n) {
    const char *full = ta_status_string(s);
    size_t len = strcspn(full, ":");
    if (len >= n) len = n - 1;
    memcpy(buf, full, len);
    buf[len] = '\0';
    return buf;
}

/* ------------------------------------------------------------------------- */
/* The run: context, checks, phases                                           */
/* ------------------------------------------------------------------------- */

typedef struct bench_ctx {
    const bench_opts *o;
    ta_problem prob;
    int32_t *seqlens; /* [B] host, or NULL */
    tensor_info t[T_COUNT];
    void *host[T_COUNT]; /* inputs; for outputs, REF's results once have_ref */
    void *got[T_COUNT];  /* outputs read back from the backend under test */
    int have_ref[2];     /* per pass */
    double pairs, flops[2];
    bench_progress progress;
} bench_ctx;

/* Print "name[i0,i1,...]" for a flat index. */
static void print_index(FILE *f, const tensor_info *t, size_t i) {
    size_t rest = i, stride = t->elems;
    int d, nd = 4;
    while (nd > 1 && t->dims[nd - 1] == 1)
        --nd;
    fprintf(f, "%s[", t->name);
    for (d = 0; d < nd; ++d) {
        stride /= (size_t)t->dims[d];
        fprintf(f, "%s%zu", d ? "," : "", rest / stride);
        rest %= stride;
    }
    fputc(']', f);
}

/* Compare one output with the reference: update row, print the first mismatches
 * (with a FAST bound: the first elements outside it). */
static void compare_tensor(const bench_ctx *c, int ti, bench_row *row, int *shown) {
    const tensor_info *t = &c->t[ti];
    const ta_dtype dt = c->prob.dtype;
    const int fast = !row->is_ref && c->prob.precision == TA_PRECISION_FAST;
    const double tol = bench_fast_tol[dt];
    size_t i, n_diff = 0, n_outside = 0;
    if (memcmp(c->got[ti], c->host[ti], t->bytes) == 0) return;
    row->identical = 0;
    for (i = 0; i < t->elems; ++i) {
        const float g = elem_get(t, dt, c->got[ti], i), r = elem_get(t, dt, c->host[ti], i);
        double d;
        int outside;
        if (ta_f32_bits(g) == ta_f32_bits(r)) continue; /* widening is injective */
        d = fabs((double)g - (double)r);
        if (isnan(d)) d = (double)INFINITY;               /* NaN on one side, or inf - inf */
        if (!row->max_diff_tensor || d > row->max_diff) { /* d = 0: a zero's sign differs */
            row->max_diff = d;
            row->max_diff_tensor = t->name;
        }
        ++n_diff;
        outside = !fast || !(d <= tol + tol * fabs((double)r));
        if (!outside) continue;
        ++n_outside;
        row->within = 0;
        if (*shown < BENCH_MAX_SHOWN_MISMATCHES) {
            ++*shown;
            fprintf(stderr, "  %s %s mismatch at ", row->backend, row->pass);
            print_index(stderr, t, i);
            fprintf(stderr, ": got %.9g, ref %.9g\n", (double)g, (double)r);
        }
    }
    if (*shown < INT_MAX && n_outside > 0)
        fprintf(stderr, "  %s %s: %zu of %zu elements of %s differ%s\n", row->backend, row->pass,
                n_outside, t->elems, t->name, fast ? " beyond the FAST bound" : "");
    (void)n_diff;
}

/* A NaN in a REF output means an element was never written (poison). */
static int count_nan(const bench_ctx *c, int ti, size_t *first) {
    const tensor_info *t = &c->t[ti];
    size_t i;
    int n = 0;
    for (i = 0; i < t->elems; ++i)
        if (isnan(elem_get(t, c->prob.dtype, c->host[ti], i)) && n++ == 0) *first = i;
    return n;
}

/* After a successful call: read outputs back; the first REF run becomes the
 * reference, every other run is compared with it. 0 ok, -1 provider failure. */
static int check_outputs(bench_ctx *c, const bench_bufs *b, bench_pass pass, bench_row *row,
                         int *shown) {
    const int *outs = pass == PASS_FWD ? fwd_outputs : bwd_outputs;
    const int n = pass == PASS_FWD ? 2 : 4;
    int k;
    for (k = 0; k < n; ++k) {
        const int ti = outs[k];
        if (c->t[ti].bytes && b->mem->download(c->got[ti], b->dev[ti], c->t[ti].bytes) != 0)
            return -1;
    }
    if (!c->have_ref[pass]) {
        if (!row->is_ref) return 0; /* nothing to compare with: row stays unchecked */
        for (k = 0; k < n; ++k) {
            const int ti = outs[k];
            size_t first = 0;
            int nan;
            if (!c->t[ti].bytes) continue;
            memcpy(c->host[ti], c->got[ti], c->t[ti].bytes);
            if ((nan = count_nan(c, ti, &first)) > 0 && row->status == ROW_OK) {
                row->status = ROW_INVALID;
                snprintf(row->note, sizeof row->note, "%d NaN in REF's %s (unwritten?)", nan,
                         c->t[ti].name);
                fprintf(stderr, "  ref %s: %d NaN in %s, first at ", row->pass, nan, c->t[ti].name);
                print_index(stderr, &c->t[ti], first);
                fputc('\n', stderr);
            }
        }
        c->have_ref[pass] = 1;
        return 0;
    }
    row->compared = 1;
    for (k = 0; k < n; ++k)
        if (c->t[outs[k]].bytes) compare_tensor(c, outs[k], row, shown);
    if (!row->within) *shown = INT_MAX; /* print the first mismatching run only */
    return 0;
}

/* One library call of pass on backend be; seconds through *dt. */
static ta_status call_once(const bench_ctx *c, const bench_backend *be, const bench_bufs *b,
                           bench_pass pass, void *ws, size_t ws_bytes, double *dt) {
    void *const *d = b->dev;
    double t0;
    ta_status st;
    if (pass == PASS_FWD) {
        const ta_fwd_args a = {.q = d[T_Q],
                               .k = d[T_K],
                               .v = d[T_V],
                               .conv_w = (const float *)d[T_CONV_W],
                               .seqlens_k = (const int32_t *)d[T_SEQLENS],
                               .o = d[T_O],
                               .lse = (float *)d[T_LSE],
                               .trace = NULL};
        t0 = now_s();
        st = ta_fwd(&c->prob, be->id, &a, ws, ws_bytes, b->mem->stream);
    } else {
        const ta_bwd_args a = {.q = d[T_Q],
                               .k = d[T_K],
                               .v = d[T_V],
                               .o = d[T_O],
                               .d_o = d[T_DO],
                               .lse = (const float *)d[T_LSE],
                               .conv_w = (const float *)d[T_CONV_W],
                               .seqlens_k = (const int32_t *)d[T_SEQLENS],
                               .dq = d[T_DQ],
                               .dk = d[T_DK],
                               .dv = d[T_DV],
                               .dconv_w = (float *)d[T_DCONV_W],
                               .trace = NULL};
        t0 = now_s();
        st = ta_bwd(&c->prob, be->id, &a, ws, ws_bytes, b->mem->stream);
    }
    if (b->mem->sync() != 0 && st == TA_OK) st = TA_ERR_DEVICE;
    *dt = now_s() - t0;
    return st;
}

static void row_error(bench_row *row, const char *call, ta_status st) {
    char name[48];
    row->status = ROW_ERROR;
    row->err = st;
    snprintf(row->note, sizeof row->note, "%s: %s", call, status_name(st, name, sizeof name));
}

/* Poison a pass's outputs (before every call). */
static int poison_outputs(const bench_ctx *c, const bench_bufs *b, bench_pass pass) {
    const int *outs = pass == PASS_FWD ? fwd_outputs : bwd_outputs;
    const int n = pass == PASS_FWD ? 2 : 4;
    int k;
    for (k = 0; k < n; ++k)
        if (c->t[outs[k]].bytes &&
            b->mem->fill(b->dev[outs[k]], BENCH_POISON_BYTE, c->t[outs[k]].bytes) != 0)
            return -1;
    return 0;
}

/* warmup + reps calls, each poisoned, timed, checked. Fills row's timing. */
static void run_calls(bench_ctx *c, const bench_backend *be, const bench_bufs *b, bench_pass pass,
                      void *ws, int32_t warmup, int32_t reps, bench_row *row) {
    const int32_t runs = warmup + reps;
    double *times = (double *)malloc((size_t)reps * sizeof *times), expect;
    char label[32];
    int32_t run;
    int shown = 0;
    if (!times) {
        row->status = ROW_ERROR;
        snprintf(row->note, sizeof row->note, "out of host memory");
        return;
    }
    snprintf(label, sizeof label, "%s %s", be->name, row->pass);
    expect = c->flops[pass] * 1e-9; /* first guess: 1 GFLOP/s */
    for (run = 0; run < runs; ++run) {
        double dt = 0.0;
        ta_status st;
        if (poison_outputs(c, b, pass) != 0) {
            row->status = ROW_ERROR;
            snprintf(row->note, sizeof row->note, "buffer provider: poison failed");
            break;
        }
        if (b->mem->sync() != 0) { /* the poison is in place before the clock starts */
            row_error(row, "buffer provider sync", TA_ERR_DEVICE);
            break;
        }
        progress_show(&c->progress, label, run, warmup, reps, expect);
        st = call_once(c, be, b, pass, ws, row->workspace_bytes, &dt);
        progress_clear(&c->progress); /* mismatch lines may follow on stderr */
        if (st != TA_OK) {
            row_error(row, pass == PASS_FWD ? "ta_fwd" : "ta_bwd", st);
            break;
        }
        expect = dt;
        if (run >= warmup) times[row->timed++] = dt;
        if (c->o->check && check_outputs(c, b, pass, row, &shown) != 0) {
            row->status = ROW_ERROR;
            snprintf(row->note, sizeof row->note, "buffer provider: read-back failed");
            break;
        }
    }
    if (row->timed > 0) {
        qsort(times, (size_t)row->timed, sizeof *times, cmp_double);
        row->median_ms = 1e3 * median_sorted(times, row->timed);
        row->min_ms = 1e3 * times[0];
        row->gflops = row->median_ms > 0.0 ? c->flops[pass] / (row->median_ms * 1e6) : 0.0;
    }
    free(times);
}

/* One pass on one backend: size query, workspace, calls, verdict. */
static void run_pass(bench_ctx *c, const bench_backend *be, const bench_bufs *b, bench_pass pass,
                     int32_t warmup, int32_t reps, bench_row *row) {
    void *ws = NULL;
    ta_status st;
    row->pass = pass_names[pass];
    row->identical = 1;
    row->within = 1;
    st = pass == PASS_FWD ? ta_fwd_workspace_size(&c->prob, be->id, &row->workspace_bytes)
                          : ta_bwd_workspace_size(&c->prob, be->id, &row->workspace_bytes);
    if (st != TA_OK) {
        row_error(row, pass == PASS_FWD ? "ta_fwd_workspace_size" : "ta_bwd_workspace_size", st);
        return;
    }
    row->have_ws = 1;
    if (row->workspace_bytes > 0 && !(ws = b->mem->alloc(row->workspace_bytes))) {
        row->status = ROW_ERROR;
        snprintf(row->note, sizeof row->note, "cannot allocate %zu workspace bytes (%s)",
                 row->workspace_bytes, b->mem->name);
        return;
    }
    run_calls(c, be, b, pass, ws, warmup, reps, row);
    if (ws) b->mem->release(ws);
    if (row->status != ROW_OK) return;
    if (!c->o->check) {
        snprintf(row->note, sizeof row->note, "not checked (--no-check)");
    } else if (!c->have_ref[pass] || (!row->compared && !row->is_ref)) {
        row->status = ROW_UNCHECKED;
        snprintf(row->note, sizeof row->note, "no REF %s output to compare with", row->pass);
    } else if (!row->within) {
        row->status = ROW_MISMATCH;
        snprintf(row->note, sizeof row->note, "%s",
                 row->is_ref ? "REF is not repeatable: a later run differs from its first"
                             : "differs from REF; first mismatches were printed on stderr");
    }
}

/* Allocate a backend's tensors and upload the inputs. 0 ok, else note set. */
static int bufs_setup(const bench_ctx *c, const bench_mem *mem, bench_bufs *b, bench_row *row) {
    static const int inputs[] = {T_Q, T_K, T_V, T_CONV_W, T_SEQLENS, T_DO};
    size_t k;
    int i;
    memset(b, 0, sizeof *b);
    b->mem = mem;
    for (i = 0; i < T_COUNT; ++i) {
        if (!c->t[i].bytes) continue;
        if (!(b->dev[i] = mem->alloc(c->t[i].bytes))) {
            snprintf(row->note, sizeof row->note, "cannot allocate %s (%zu bytes, %s)",
                     c->t[i].name, c->t[i].bytes, mem->name);
            return -1;
        }
    }
    for (k = 0; k < sizeof inputs / sizeof inputs[0]; ++k) {
        const int ti = inputs[k];
        if (c->t[ti].bytes && mem->upload(b->dev[ti], c->host[ti], c->t[ti].bytes) != 0) {
            snprintf(row->note, sizeof row->note, "cannot upload %s (%s)", c->t[ti].name,
                     mem->name);
            return -1;
        }
    }
    return 0;
}

/* The backward's o and lse inputs: REF's forward outputs, for every backend. */
static int upload_bwd_inputs(const bench_ctx *c, const bench_bufs *b) {
    if (b->mem->upload(b->dev[T_O], c->host[T_O], c->t[T_O].bytes) != 0) return -1;
    return b->mem->upload(b->dev[T_LSE], c->host[T_LSE], c->t[T_LSE].bytes);
}

/* 1 if a backend other than REF does not implement this problem yet (its size
 * query says TA_ERR_UNSUPPORTED, e.g. the MTA conv before that backend has it):
 * the row reads 'unavailable', as for a backend missing from this build, which
 * fails the run only when --backend names it. REF must run every problem
 * (validate_problem). */
static int backend_lacks_problem(const bench_ctx *c, const bench_backend *be) {
    size_t bytes = 0;
    ta_status st;
    if (be->id == TA_BACKEND_REF) return 0;
    st = ta_fwd_workspace_size(&c->prob, be->id, &bytes);
    if (st == TA_OK && !c->o->fwd_only) st = ta_bwd_workspace_size(&c->prob, be->id, &bytes);
    return st == TA_ERR_UNSUPPORTED;
}

/* Run the selected passes of one backend into rows[0..1]; returns rows used. */
static int run_backend(bench_ctx *c, const bench_backend *be, int32_t warmup, int32_t reps,
                       int hidden, bench_row *rows) {
    char why_buf[BENCH_NOTE_LEN];
    const char *why = backend_unavailable_reason(be, why_buf, sizeof why_buf);
    if (!why && backend_lacks_problem(c, be))
        why = c->prob.conv_q ? "does not implement the MTA conv yet (TA_ERR_UNSUPPORTED)"
                             : "does not implement this problem yet (TA_ERR_UNSUPPORTED)";
    bench_bufs b;
    int n = 0;
    memset(rows, 0, 2 * sizeof *rows);
    rows[0].backend = rows[1].backend = be->name;
    rows[0].is_ref = rows[1].is_ref = be->id == TA_BACKEND_REF;
    rows[0].hidden = rows[1].hidden = hidden;
    rows[0].o_check = rows[1].o_check = c->o->check;
    if (why) {
        rows[0].pass = "-";
        rows[0].status = ROW_UNAVAILABLE;
        snprintf(rows[0].note, sizeof rows[0].note, "%s", why);
        return 1;
    }
    if (bufs_setup(c, be->mem, &b, &rows[0]) != 0) {
        rows[0].pass = "-";
        rows[0].status = ROW_ERROR;
        bufs_free(&b);
        return 1;
    }
    run_pass(c, be, &b, PASS_FWD, warmup, reps, &rows[n++]);
    if (!c->o->fwd_only) {
        bench_row *row = &rows[n++];
        row->pass = pass_names[PASS_BWD];
        if (!c->o->check) {
            /* o and lse on the device are this backend's last forward outputs */
            if (rows[0].status == ROW_OK) {
                run_pass(c, be, &b, PASS_BWD, warmup, reps, row);
            } else {
                row->status = ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "needs this backend's forward o and lse");
            }
        } else if (!c->have_ref[PASS_FWD]) {
            row->status = ROW_SKIPPED;
            snprintf(row->note, sizeof row->note, "needs REF's forward o and lse");
        } else if (upload_bwd_inputs(c, &b) != 0) {
            row->status = ROW_ERROR;
            snprintf(row->note, sizeof row->note, "cannot upload o/lse (%s)", be->mem->name);
        } else {
            run_pass(c, be, &b, PASS_BWD, warmup, reps, row);
        }
    }
    bufs_free(&b);
    return n;
}

/* ------------------------------------------------------------------------- */
/* Output: header, table, notes, CSV                                          */
/* ------------------------------------------------------------------------- */

static const char *dtype_name(ta_dtype dt) {
    return dt == TA_F16 ? "f16" : dt == TA_BF16 ? "bf16" : "f32";
}

/* Tile sizes the library will use (its defaults when 0). */
static void effective_blocks(const ta_problem *p, int32_t *bq, int32_t *bk) {
    ta_tiling_default_blocks(p->conv_q, p->conv_k, bq, bk);
    if (p->block_q) *bq = p->block_q;
    if (p->block_k) *bk = p->block_k;
}

static void print_header(const bench_ctx *c) {
    const ta_problem *p = &c->prob;
    int32_t bq, bk;
    effective_blocks(p, &bq, &bk);
    printf("tileattn-bench: library %s, commit %s\n", ta_version_string(), TA_BENCH_COMMIT);
    printf("problem: B=%d H=%d H_kv=%d S_q=%d S_k=%d D=%d D_v=%d %s %s", (int)p->batch,
           (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q, (int)p->seq_k, (int)p->head_dim,
           (int)p->head_dim_v, dtype_name(p->dtype),
           (p->flags & TA_CAUSAL) ? "causal" : "non-causal");
    if (p->conv_q)
        printf(" MTA conv %dx%d", (int)p->conv_q, (int)p->conv_k);
    else
        printf(" SDPA");
    printf(" block_q=%d block_k=%d%s\n", (int)bq, (int)bk, c->seqlens ? " seqlens_k set" : "");
    printf("work: %.0f visible (row,key) pairs; fwd %.4g GFLOP", c->pairs, c->flops[0] * 1e-9);
    if (!c->o->fwd_only) printf(", bwd %.4g GFLOP", c->flops[1] * 1e-9);
    printf("\ntiming: median of %d reps after %d warm-up, seed %llu; precision %s; CPU threads ",
           (int)c->o->reps, (int)c->o->warmup, (unsigned long long)c->o->seed,
           p->precision == TA_PRECISION_FAST ? "fast" : "exact");
    if (p->num_threads)
        printf("%d", (int)p->num_threads);
    else
        printf("library default");
    printf("; check: %s\n\n", !c->o->check ? "none (--no-check)"
                              : p->precision == TA_PRECISION_FAST ? "vs REF, FAST bound"
                                                                  : "vs REF, bit for bit");
}

/* Last column: the verdict against REF, or why there is none. */
static void format_verdict(const bench_row *r, char *buf, size_t n) {
    const char *where = r->max_diff_tensor ? r->max_diff_tensor : "?";
    if (r->status == ROW_UNAVAILABLE || r->status == ROW_SKIPPED || r->status == ROW_ERROR ||
        r->status == ROW_UNCHECKED)
        snprintf(buf, n, "%s", r->note);
    else if (!r->o_check)
        snprintf(buf, n, "%s", r->note);
    else if (!r->identical)
        snprintf(buf, n, "%s%smax|diff| %.3g (%s)", r->is_ref ? "runs differ: " : "",
                 r->within ? "within the FAST bound, " : "", r->max_diff, where);
    else if (r->status == ROW_INVALID)
        snprintf(buf, n, "%s", r->note);
    else if (r->is_ref)
        snprintf(buf, n, r->compared ? "reference (runs identical)" : "reference");
    else
        snprintf(buf, n, "bit-identical");
}

static void print_table(const bench_row *rows, int n) {
    int i;
    printf("%-7s %-9s %-11s %11s %11s %9s %12s  %s\n", "backend", "direction", "result",
           "median_ms", "min_ms", "GFLOP/s", "workspace_B", "check vs REF (or why not run)");
    printf("%-7s %-9s %-11s %11s %11s %9s %12s  %s\n", "-------", "---------", "-----------",
           "---------", "------", "-------", "-----------", "-----------------------------");
    for (i = 0; i < n; ++i) {
        const bench_row *r = &rows[i];
        char diff[sizeof r->note], t_med[24] = "-", t_min[24] = "-", gf[24] = "-", ws[24] = "-";
        format_verdict(r, diff, sizeof diff);
        if (r->timed > 0) {
            snprintf(t_med, sizeof t_med, "%.3f", r->median_ms);
            snprintf(t_min, sizeof t_min, "%.3f", r->min_ms);
            snprintf(gf, sizeof gf, "%.3f", r->gflops);
        }
        if (r->have_ws) snprintf(ws, sizeof ws, "%zu", r->workspace_bytes);
        printf("%-7s %-9s %-11s %11s %11s %9s %12s  %s%s\n", r->backend, r->pass,
               row_status_names[r->status], t_med, t_min, gf, ws, diff,
               r->hidden ? " [reference only]" : "");
    }
}

/* 1 if the tile sizes (the library's defaults where 0) leave an effective row
 * and column for the conv's halos in both passes (ta_tiling_make's rule). */
static int mta_tiles_fit(const ta_problem *p) {
    int32_t bq, bk, pass;
    effective_blocks(p, &bq, &bk);
    for (pass = TA_TILING_FWD; pass <= TA_TILING_BWD; ++pass) {
        int32_t top, bottom, side;
        ta_tiling_halos(p->conv_q, p->conv_k, pass, &top, &bottom, &side);
        if (bq - top - bottom < 1 || bk - 2 * side < 1) return 0;
    }
    return 1;
}

/* What a rejected problem most likely means (NULL: nothing to add). */
static const char *problem_hint(ta_status st, const ta_problem *p) {
    if (st == TA_ERR_BAD_ARG && (p->conv_q == 0) != (p->conv_k == 0))
        return "--conv-q and --conv-k go together (or use --mta / --sdpa)";
    if (st == TA_ERR_BAD_ARG && p->conv_k > 0 && p->conv_k % 2 == 0) return "--conv-k must be odd";
    if (st != TA_ERR_UNSUPPORTED) return NULL;
    if (p->conv_q && !(p->flags & TA_CAUSAL))
        return "the MTA conv is causal only: drop --no-causal, or run --sdpa";
    if (p->conv_q > TA_CONV_Q_MAX || p->conv_k > TA_CONV_K_MAX)
        return "MTA conv sizes: --conv-q in [1, 16], --conv-k odd in [1, 31]";
    if (p->head_dim > TA_HEAD_DIM_MAX || p->head_dim_v > TA_HEAD_DIM_MAX)
        return "head dims must be <= 256";
    if ((p->block_q && !ta_tiling_is_block_size(p->block_q)) ||
        (p->block_k && !ta_tiling_is_block_size(p->block_k)))
        return "tile sizes must be in [8, 256]";
    if (p->conv_q && !mta_tiles_fit(p))
        return "these tile sizes leave no effective rows/columns for the MTA conv's halos: "
               "the backward needs --block-q > 2 (c_q - 1) and --block-k > 2 (c_k - 1) "
               "(the forward half of that); or leave both to the library";
    if (p->conv_q) return "this backend does not implement the MTA key-query conv; --sdpa runs "
                          "plain SDPA";
    return "the backend does not implement this operation yet";
}

/* Details for the rows that fail the run: full status text, hints, mismatch notes. */
static void print_notes(const bench_ctx *c, const bench_row *rows, int n) {
    int i, any = 0;
    for (i = 0; i < n; ++i) {
        const bench_row *r = &rows[i];
        if (r->status == ROW_UNAVAILABLE && c->o->backends_explicit) {
            if (!any++) printf("\nnotes:\n");
            printf("  %s: named by --backend but unavailable (exit status 1)\n", r->backend);
            continue;
        }
        if (r->status != ROW_ERROR && r->status != ROW_MISMATCH && r->status != ROW_INVALID)
            continue;
        if (!any++) printf("\nnotes:\n");
        printf("  %s %s: %s\n", r->backend, r->pass, r->note);
        if (r->status == ROW_ERROR && r->err != TA_OK) {
            const char *hint = problem_hint(r->err, &c->prob);
            printf("      %s\n", ta_status_string(r->err));
            if (hint) printf("      hint: %s\n", hint);
        }
    }
}

/* Append "text" to list[n] after a ", " separator (truncating quietly). */
static void list_append(char *list, size_t n, const char *text) {
    const size_t len = strlen(list);
    if (len + 1 < n) snprintf(list + len, n - len, "%s%s", len ? ", " : "", text);
}

/* The last line: PASS or FAIL (the exit status), how many rows were compared
 * and how many of them are bit-identical (or within the FAST bound), which rows
 * failed, which backends could not run and why. */
static void print_verdict(const bench_ctx *c, const bench_row *rows, int n, int exit_status) {
    char failed[256] = "", unavailable[512] = "", item[BENCH_NOTE_LEN + 32];
    int i, ran = 0, compared = 0, identical = 0, within = 0;
    for (i = 0; i < n; ++i) {
        const bench_row *r = &rows[i];
        if (r->hidden) continue;
        if (r->status == ROW_UNAVAILABLE) {
            snprintf(item, sizeof item, "%s (%s)", r->backend, r->note);
            list_append(unavailable, sizeof unavailable, item);
            continue;
        }
        ++ran;
        if (r->status != ROW_OK) {
            snprintf(item, sizeof item, "%s %s %s", r->backend, r->pass,
                     row_status_names[r->status]);
            list_append(failed, sizeof failed, item);
        }
        if (!r->compared || (r->status != ROW_OK && r->status != ROW_MISMATCH)) continue;
        ++compared;
        identical += r->identical;
        within += !r->identical && r->within;
    }
    printf("\nverdict: %s: ", exit_status == 0 ? "PASS" : "FAIL");
    if (!c->o->check) {
        printf("%d rows ran, not checked against REF (--no-check)", ran);
    } else {
        printf("%d of %d checked rows bit-identical to REF", identical, compared);
        if (c->prob.precision == TA_PRECISION_FAST)
            printf(", %d more within the FAST bound", within);
    }
    if (failed[0]) printf("; failed: %s", failed);
    if (unavailable[0]) printf("; unavailable: %s", unavailable);
    printf("\n");
}

static const char csv_header[] =
    "date,commit,backend,direction,result,batch,heads,heads_kv,seq_q,seq_k,dim,dim_v,dtype,causal,"
    "conv_q,conv_k,block_q,block_k,seqlens_k,visible_pairs,reps,warmup,seed,time_ms,min_ms,"
    "gflops,workspace_bytes,max_abs_diff,identical";

/* Open FILE for appending; write the header if new, refuse a different header. */
static FILE *csv_open(const char *path) {
    FILE *f = fopen(path, "r");
    char line[512];
    if (f) {
        const int has = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        if (has) {
            line[strcspn(line, "\r\n")] = '\0';
            if (strcmp(line, csv_header) != 0) {
                fprintf(stderr, "tileattn-bench: %s has a different CSV header; use a new file\n",
                        path);
                return NULL;
            }
        }
    }
    if (!(f = fopen(path, "a"))) {
        fprintf(stderr, "tileattn-bench: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0) fprintf(f, "%s\n", csv_header);
    return f;
}

static void csv_write(FILE *f, const bench_ctx *c, const bench_row *rows, int n) {
    const ta_problem *p = &c->prob;
    const time_t now = time(NULL);
    struct tm tm_utc;
    char date[32] = "unknown";
    int32_t bq, bk;
    int i;
    if (gmtime_r(&now, &tm_utc)) strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
    effective_blocks(p, &bq, &bk);
    for (i = 0; i < n; ++i) {
        const bench_row *r = &rows[i];
        if (r->hidden || r->status == ROW_UNAVAILABLE) continue;
        fprintf(f, "%s,%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%d,%s,%.0f,%d,%d,%llu,",
                date, TA_BENCH_COMMIT, r->backend, r->pass, row_status_names[r->status],
                (int)p->batch, (int)p->heads_q, (int)p->heads_kv, (int)p->seq_q, (int)p->seq_k,
                (int)p->head_dim, (int)p->head_dim_v, dtype_name(p->dtype),
                (p->flags & TA_CAUSAL) ? 1 : 0, (int)p->conv_q, (int)p->conv_k, (int)bq, (int)bk,
                c->seqlens ? "custom" : "full", c->pairs, (int)c->o->reps, (int)c->o->warmup,
                (unsigned long long)c->o->seed);
        if (r->timed > 0)
            fprintf(f, "%.6f,%.6f,%.6f,", r->median_ms, r->min_ms, r->gflops);
        else
            fprintf(f, ",,,");
        if (r->have_ws) fprintf(f, "%zu", r->workspace_bytes);
        fputc(',', f);
        if (r->status == ROW_OK || r->status == ROW_MISMATCH || r->status == ROW_INVALID)
            fprintf(f, "%.9g,%d\n", r->identical ? 0.0 : r->max_diff, r->identical);
        else
            fprintf(f, ",\n");
    }
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */

/* Validate the problem through the library before allocating anything: a
 * problem REF rejects is a command-line error. 0 ok. */
static int validate_problem(const bench_ctx *c) {
    size_t bytes = 0;
    const char *hint;
    ta_status st = ta_fwd_workspace_size(&c->prob, TA_BACKEND_REF, &bytes);
    if (st == TA_OK && !c->o->fwd_only)
        st = ta_bwd_workspace_size(&c->prob, TA_BACKEND_REF, &bytes);
    if (st == TA_OK || st == TA_ERR_BACKEND_UNAVAILABLE) return 0;
    fprintf(stderr, "tileattn-bench: the library rejects this problem: %s\n", ta_status_string(st));
    if ((hint = problem_hint(st, &c->prob)) != NULL) fprintf(stderr, "hint: %s\n", hint);
    return -1;
}

/* Bytes the bench holds at once: host tensors, read-back outputs, one backend's copies. */
static double host_bytes_needed(const bench_ctx *c) {
    double total = 0.0;
    int i;
    for (i = 0; i < T_COUNT; ++i)
        total += (double)c->t[i].bytes * (i >= T_O ? 3.0 : 2.0);
    return total;
}

/* Host copies of every tensor; inputs filled from the seeded PRNG. 0 ok. */
static int host_setup(bench_ctx *c) {
    static const int random_inputs[] = {T_Q, T_K, T_V, T_DO};
    bench_rng rng;
    size_t k;
    int i;
    for (i = 0; i < T_COUNT; ++i) {
        if (!c->t[i].bytes) continue;
        if (!(c->host[i] = host_alloc(c->t[i].bytes))) return -1;
        if (i >= T_O && !(c->got[i] = host_alloc(c->t[i].bytes))) return -1;
    }
    rng_seed(&rng, c->o->seed);
    for (k = 0; k < sizeof random_inputs / sizeof random_inputs[0]; ++k)
        if (c->t[random_inputs[k]].bytes)
            fill_uniform(&rng, &c->t[random_inputs[k]], c->prob.dtype, c->host[random_inputs[k]],
                         -1.0f, 1.0f);
    if (c->t[T_CONV_W].bytes) fill_conv(&rng, &c->t[T_CONV_W], (float *)c->host[T_CONV_W]);
    if (c->seqlens) memcpy(c->host[T_SEQLENS], c->seqlens, c->t[T_SEQLENS].bytes);
    return 0;
}

/* Run every selected backend; rows out. Returns rows used. */
static int run_all(bench_ctx *c, bench_row *rows) {
    const bench_opts *o = c->o;
    int n = 0, i, need_ref = 0;
    char why[BENCH_NOTE_LEN];
    for (i = 1; i < BENCH_NUM_BACKENDS; ++i)
        if (o->check && (o->backends >> bench_backends[i].id & 1u) &&
            !backend_unavailable_reason(&bench_backends[i], why, sizeof why))
            need_ref = 1;
    for (i = 0; i < BENCH_NUM_BACKENDS; ++i) {
        const bench_backend *be = &bench_backends[i];
        if (o->backends >> be->id & 1u)
            n += run_backend(c, be, o->warmup, o->reps, 0, &rows[n]);
        else if (be->id == TA_BACKEND_REF && need_ref)
            n += run_backend(c, be, 0, 1, 1, &rows[n]); /* reference only: one run */
    }
    return n;
}

static int exit_code(const bench_opts *o, const bench_row *rows, int n) {
    int i;
    for (i = 0; i < n; ++i) {
        if (rows[i].status == ROW_OK) continue;
        if (rows[i].status == ROW_UNAVAILABLE && !o->backends_explicit) continue;
        return 1;
    }
    return 0;
}

static void ctx_free(bench_ctx *c) {
    int i;
    for (i = 0; i < T_COUNT; ++i) {
        free(c->host[i]);
        free(c->got[i]);
    }
    free(c->seqlens);
}

/* Everything after option parsing; returns the exit status. */
static int bench_main(bench_ctx *c, const bench_opts *o) {
    bench_row rows[2 * BENCH_NUM_BACKENDS];
    FILE *csv = NULL;
    int n, status;
    if (o->seqlens_k) {
        char seq_k_text[16];
        snprintf(seq_k_text, sizeof seq_k_text, "%d", (int)c->prob.seq_k);
        if (!(c->seqlens = (int32_t *)calloc((size_t)o->batch, sizeof *c->seqlens))) return 1;
        if (parse_seqlens(o->seqlens_k, o->batch, c->prob.seq_k, c->seqlens) != 0)
            return usage_error("bad --seqlens-k '%s': N or one value per batch, each in [0, %s]",
                               o->seqlens_k, seq_k_text);
    }
    if (validate_problem(c) != 0) return 2;
    if (o->csv && !(csv = csv_open(o->csv))) return 2;
    tensors_describe(&c->prob, c->seqlens != NULL, o->fwd_only, c->t);
    c->pairs = visible_pairs(&c->prob, c->seqlens);
    c->flops[PASS_FWD] = c->pairs * flops_per_pair(&c->prob, PASS_FWD);
    c->flops[PASS_BWD] = c->pairs * flops_per_pair(&c->prob, PASS_BWD);
    c->progress.enabled = o->progress != 0;
    c->progress.lines = !isatty(fileno(stderr));
    c->progress.start = now_s();
    if (host_setup(c) != 0) {
        fprintf(stderr,
                "tileattn-bench: out of host memory (the bench keeps inputs, REF outputs "
                "and one backend's copies: %.3g GB in all)\n",
                host_bytes_needed(c) * 1e-9);
        if (csv) fclose(csv);
        return 1;
    }
    print_header(c);
    fflush(stdout);
    n = run_all(c, rows);
    progress_clear(&c->progress);
    print_table(rows, n);
    print_notes(c, rows, n);
    status = exit_code(o, rows, n);
    print_verdict(c, rows, n, status);
    if (csv) {
        csv_write(csv, c, rows, n);
        if (fclose(csv) != 0) {
            fprintf(stderr, "tileattn-bench: error writing %s\n", o->csv);
            return 1;
        }
    }
    return status;
}

int main(int argc, char **argv) {
    bench_opts o;
    bench_ctx c;
    int r;
    opts_default(&o);
    if ((r = parse_args(argc, argv, &o)) != 0) return r == 1 ? 0 : 2;
    memset(&c, 0, sizeof c);
    c.o = &o;
    problem_from_opts(&o, &c.prob);
    r = bench_main(&c, &o);
    ctx_free(&c);
    return r;
}
