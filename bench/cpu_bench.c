/*
 * cpu_bench: throughput of the CPU backend (TA_BACKEND_CPU) against the
 * machine's own FMA peak, measured in the same binary.
 *
 *   1. FMA peak: every thread, pinned to its own CPU (Linux), runs a loop of
 *      independent vector FMAs (24 accumulators for AVX-512, 12 for AVX2: more
 *      than latency x FMA ports) of the widest ISA the CPU has, for at least
 *      0.2 s after a warm-up, timed by itself between two barriers; the peak
 *      is the sum of the threads' own rates (2 flops per lane per FMA). Also
 *      printed: the clock that rate implies at 2 FMA ports (GFLOP/s per thread
 *      / (2 ports x lanes x 2 flops)), to check against the CPU's clock.
 *   2. For each (S, D, causal, threads, pass): median time of --reps calls
 *      after one warm-up, GFLOP/s with the FLOP count of tileattn-bench
 *      (per visible (row, key) pair: forward 2 (D + D_v), backward
 *      2 (3 D + 2 D_v); exp and softmax not counted), and the fraction of the
 *      peak at that thread count. --window L,R adds a sliding window to every
 *      problem; visible pairs are counted from the descriptor's row intervals
 *      (ta_tile_row_keys).
 *   3. MTA (--mta QxK, default 6x11; causal problems only): the same shape
 *      with the conv, its GFLOP/s and the ratio of its time to our SDPA time
 *      of the same pass. FLOPs (mta_flops): forward = 2D per visible entry of
 *      each computed tile pair's loaded region (the raw scores) + 2 c_q c_k
 *      per visible effective entry (the conv) + 2 D_v per visible entry (P V);
 *      backward = the raw scores on the loaded region (2D) + dP on the
 *      gradient region (2 D_v) + the conv C there (2 c_q c_k) per visible
 *      entry, and per visible effective entry dS (2 c_q c_k), dq, dk (2D each),
 *      dv (2 D_v), plus the dconv_w partial (2 c_q c_k per effective entry),
 *      each counted once (the two-pass recomputation is not counted, as for SDPA).
 *   --rope interleaved|half: every problem with the rotary load stage (all
 *   D/2 pairs, a 1-D table of S rows, no positions; kind gets "+rope"), to
 *   compare with the same run without it (docs/rope.md).
 *   --check compares each result with TA_BACKEND_REF once (bitwise; slow for
 *   long sequences: the reference is scalar).
 *
 * Output: a table on stdout, and with --csv one row per measurement:
 *   kind,isa,threads,batch,heads,seq,dim,causal,dtype,pass,ms,gflops,peak_gflops,frac_peak[,vs_sdpa]
 * (kind sdpa, or mta6x11 etc. with the MTA / SDPA time ratio last).
 * bench/cpu_torch.py runs this binary and PyTorch's CPU SDPA side by side.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __linux__
#include <sched.h>
#endif

#include "cpu/ta_cpu.h"
#include "ta_math.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define BENCH_X86 1
#endif

#define MAX_LIST 16

typedef struct opts {
    int32_t seqs[MAX_LIST], n_seqs;
    int32_t dims[MAX_LIST], n_dims;
    int32_t threads[MAX_LIST], n_threads;
    int causal_modes[2], n_causal;
    int32_t batch, heads, reps, block_q, block_k;
    int32_t mta_q, mta_k; /* MTA rows: c_q x c_k (0: none) */
    int window;           /* --window: TA_WINDOW with win_l, win_r (negative: unbounded) */
    int32_t win_l, win_r;
    int32_t rope; /* --rope: ta_rope_pairing (0: none) */
    int32_t decode[MAX_LIST], n_decode; /* --decode: new query rows per step (decode mode) */
    int32_t heads_kv;                   /* --heads-kv (decode mode; 0: = heads) */
    ta_dtype dtype;
    int do_fwd, do_bwd, check, csv;
} opts;

/* Wall clock, or with --cpu-time the process's CPU time (summed over its
 * threads): on a machine shared with other jobs, CPU time of a one-thread
 * run is not inflated by preemption. Only meaningful for one thread. */
static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* FMA peak                                                                 */
/* ---------------------------------------------------------------------- */

static volatile float g_sink;

/* Accumulators per thread: FMA latency (4-5 cycles) x 2 FMA ports = 8-10
 * independent chains saturate a core; 24 (AVX-512, of 32 registers) and 12
 * (AVX2, of 16) leave margin. The compiler keeps them in registers (the
 * loops are fully unrolled: constant trip counts). */
#define PEAK_ACC_512 24
#define PEAK_ACC_256 12

#ifdef BENCH_X86
__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters) {
    __m512 acc[PEAK_ACC_512];
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    int64_t it;
    int k;
    for (k = 0; k < PEAK_ACC_512; ++k)
        acc[k] = _mm512_set1_ps((float)k);
    for (it = 0; it < iters; ++it) {
        _Pragma("GCC unroll 32") for (k = 0; k < PEAK_ACC_512; ++k) acc[k] =
            _mm512_fmadd_ps(acc[k], b, c);
    }
    for (k = 1; k < PEAK_ACC_512; ++k)
        acc[0] = _mm512_add_ps(acc[0], acc[k]);
    return _mm512_reduce_add_ps(acc[0]);
}
__attribute__((target("avx2,fma"))) static float fma_loop_avx2(int64_t iters) {
    __m256 acc[PEAK_ACC_256];
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    float out[8];
    int64_t it;
    int k;
    for (k = 0; k < PEAK_ACC_256; ++k)
        acc[k] = _mm256_set1_ps((float)k);
    for (it = 0; it < iters; ++it) {
        _Pragma("GCC unroll 16") for (k = 0; k < PEAK_ACC_256; ++k) acc[k] =
            _mm256_fmadd_ps(acc[k], b, c);
    }
    for (k = 1; k < PEAK_ACC_256; ++k)
        acc[0] = _mm256_add_ps(acc[0], acc[k]);
    _mm256_storeu_ps(out, acc[0]);
    return out[0];
}
#endif

/* FLOPs per loop iteration per thread, and the loop, of the best ISA. */
static double fma_flops_per_iter(ta_cpu_isa isa) {
    return isa == TA_CPU_ISA_AVX512 ? PEAK_ACC_512 * 16.0 * 2
           : isa == TA_CPU_ISA_AVX2 ? PEAK_ACC_256 * 8.0 * 2
                                    : 8.0 * 2;
}
static int isa_lanes(ta_cpu_isa isa) {
    return isa == TA_CPU_ISA_AVX512 ? 16 : isa == TA_CPU_ISA_AVX2 ? 8 : 1;
}
static float fma_loop(ta_cpu_isa isa, int64_t iters) {
#ifdef BENCH_X86
    if (isa == TA_CPU_ISA_AVX512) return fma_loop_avx512(iters);
    if (isa == TA_CPU_ISA_AVX2) return fma_loop_avx2(iters);
#endif
    {
        /* scalar: 8 independent chains of fmaf (a libm call in a baseline build) */
        float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        int64_t it;
        int k;
        for (it = 0; it < iters; ++it)
            for (k = 0; k < 8; ++k)
                acc[k] = fmaf(acc[k], 0.999999f, 1e-7f);
        return acc[0] + acc[7];
    }
}

/* Pin the calling thread to the tid-th CPU of the process's affinity mask
 * (saved in *saved, to restore); 0 if it cannot. */
#ifdef __linux__
static int pin_thread(int tid, cpu_set_t *saved) {
    cpu_set_t one;
    int cpu, seen = 0;
    if (sched_getaffinity(0, sizeof *saved, saved) != 0) return 0;
    for (cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET((size_t)cpu, saved)) continue;
        if (seen++ == tid) {
            CPU_ZERO(&one);
            CPU_SET((size_t)cpu, &one);
            return sched_setaffinity(0, sizeof one, &one) == 0;
        }
    }
    return 0;
}
#endif

/* One thread's FMA rate (GFLOP/s): pinned, a warm-up, then iterations
 * doubled until the timed loop runs at least 0.2 s; the timed loop starts
 * after a barrier so that all threads run together. */
static double fma_thread_rate(ta_cpu_isa isa, int tid, int *pinned) {
    const double fpi = fma_flops_per_iter(isa);
    int64_t iters = 1000000;
    double secs = 0.0, t0;
#ifdef __linux__
    cpu_set_t saved;
    *pinned = pin_thread(tid, &saved);
#else
    (void)tid;
    *pinned = 0;
#endif
    g_sink = fma_loop(isa, iters); /* warm-up: clocks up, pages in */
    for (;;) {
#ifdef _OPENMP
#pragma omp barrier
#endif
        t0 = now_s();
        g_sink = fma_loop(isa, iters);
        secs = now_s() - t0;
        /* every thread must take the same branch (barrier count): thread 0 decides */
        {
            static volatile int more;
#ifdef _OPENMP
#pragma omp barrier
#pragma omp single
#endif
            more = secs < 0.2;
            if (!more) break;
        }
        iters *= 2;
    }
#ifdef __linux__
    if (*pinned) sched_setaffinity(0, sizeof saved, &saved);
#endif
    return fpi * (double)iters / secs * 1e-9;
}

/* GFLOP/s of `threads` threads running the FMA loop at once: the sum of the
 * threads' own rates (best of 3 runs). */
static double fma_peak(ta_cpu_isa isa, int32_t threads, int *all_pinned) {
    double best = 0.0;
    int rep;
    for (rep = 0; rep < 3; ++rep) {
        double sum = 0.0;
        int n_pinned = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : sum, n_pinned)
        {
            int pinned;
            sum += fma_thread_rate(isa, omp_get_thread_num(), &pinned);
            n_pinned += pinned;
        }
#else
        {
            int pinned;
            sum = fma_thread_rate(isa, 0, &pinned);
            n_pinned = pinned;
        }
#endif
        *all_pinned = n_pinned == threads;
        if (sum > best) best = sum;
    }
    return best;
}

/* ---------------------------------------------------------------------- */
/* Attention                                                                */
/* ---------------------------------------------------------------------- */

/* The mask of p (causal, window) on tiling t: the descriptor's own rows'
 * intervals (ta_tile_row_keys) count the visible pairs below. */
static void bench_set_window(const ta_problem *p, ta_tiling *t) {
    if (p->flags & TA_WINDOW) ta_tiling_set_window(t, p->window_left, p->window_right);
}

/* Visible entries of rows [r_begin, r_end) x columns [c_begin, c_end), both
 * clipped to the sequence, under the mask of t (causal bottom-right, window)
 * with all S_k keys. */
static double visible_in(const ta_tiling *t, int32_t r_begin, int32_t r_end, int32_t c_begin,
                         int32_t c_end) {
    double n = 0.0;
    int32_t r, lo, hi;
    if (r_begin < 0) r_begin = 0;
    if (r_end > t->seq_q) r_end = t->seq_q;
    if (c_begin < 0) c_begin = 0;
    if (c_end > t->seq_k) c_end = t->seq_k;
    for (r = r_begin; r < r_end; ++r) {
        ta_tile_row_keys(t, r, t->seq_k, &lo, &hi);
        lo = lo > c_begin ? lo : c_begin;
        hi = hi < c_end ? hi : c_end;
        if (hi > lo) n += (double)(hi - lo);
    }
    return n;
}

/* Visible (row, key) pairs of one (b, h) slice. */
static double visible_pairs(const ta_problem *p) {
    ta_tiling t;
    if (ta_tiling_make(&t, p->seq_q, p->seq_k, TA_BLOCK_DEFAULT, TA_BLOCK_DEFAULT, 0, 0,
                       (p->flags & TA_CAUSAL) != 0, TA_TILING_FWD, 1) != TA_OK)
        return 0.0;
    bench_set_window(p, &t);
    return visible_in(&t, 0, p->seq_q, 0, p->seq_k);
}

static void fill(void *buf, ta_dtype dt, size_t n, uint64_t *state) {
    size_t i;
    for (i = 0; i < n; ++i) {
        float x;
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        x = (float)(*state >> 40) * (2.0f / 16777216.0f) - 1.0f;
        if (dt == TA_F32)
            ((float *)buf)[i] = x;
        else if (dt == TA_F16)
            ((uint16_t *)buf)[i] = ta_f32_to_f16(x);
        else
            ((uint16_t *)buf)[i] = ta_f32_to_bf16(x);
    }
}

static void *xalloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "cpu_bench: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

typedef struct bufs {
    void *q, *k, *v, *o, *d_o, *dq, *dk, *dv, *ws;
    float *lse;
    const float *conv_w; /* MTA: [H, c_q, c_k]; NULL for SDPA */
    float *dconv_w;      /* MTA backward output */
    float *rope_cos, *rope_sin; /* --rope: [S, D/2] tables; NULL without */
    void *q_hist;               /* q_history > 0: [B, H, q_history, D]; else NULL */
    float *ring;                /* decode "ring" rows: the score ring [B, H, slots, S_k]
                                   (history read from it, q_hist not passed); else NULL */
    int32_t ring_slots;
    size_t n_q, n_o, n_lse, eb, ws_bytes;
} bufs;

static double median(double *t, int n) {
    int i, j;
    for (i = 1; i < n; ++i)
        for (j = i; j > 0 && t[j] < t[j - 1]; --j) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* One call of the pass on backend be; returns its status. */
static ta_status call(const ta_problem *p, ta_backend be, int bwd, bufs *x, void *o, float *lse,
                      void *dq, void *dk, void *dv, void *ws, size_t ws_bytes) {
    if (!bwd) {
        ta_fwd_args a;
        memset(&a, 0, sizeof a);
        a.q = x->q;
        a.k = x->k;
        a.v = x->v;
        a.o = o;
        a.lse = lse;
        a.conv_w = x->conv_w;
        a.rope.cos = x->rope_cos;
        a.rope.sin = x->rope_sin;
        a.q_hist = x->q_hist;
        if (x->ring) { /* docs/mta.md 2a, "The score ring" */
            a.q_hist = NULL;
            a.score_ring = x->ring;
            a.score_ring_slots = x->ring_slots;
        }
        return ta_fwd(p, be, &a, ws, ws_bytes, NULL);
    } else {
        ta_bwd_args a;
        memset(&a, 0, sizeof a);
        a.q = x->q;
        a.k = x->k;
        a.v = x->v;
        a.o = x->o;
        a.d_o = x->d_o;
        a.lse = x->lse;
        a.dq = dq;
        a.dk = dk;
        a.dv = dv;
        a.conv_w = x->conv_w;
        a.dconv_w = x->dconv_w;
        a.rope.cos = x->rope_cos;
        a.rope.sin = x->rope_sin;
        return ta_bwd(p, be, &a, ws, ws_bytes, NULL);
    }
}

/* --check: the reference's result of the same call must be bit-identical. */
static int check_vs_ref(const ta_problem *p, int bwd, bufs *x) {
    ta_problem rp = *p;
    size_t bytes = 0;
    void *ws, *o = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    float *lse = NULL, *dw = NULL, *dw_cpu = x->dconv_w;
    const size_t n_w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    int same;
    if ((bwd ? ta_bwd_workspace_size(&rp, TA_BACKEND_REF, &bytes)
             : ta_fwd_workspace_size(&rp, TA_BACKEND_REF, &bytes)) != TA_OK)
        return 0;
    ws = xalloc(bytes);
    if (!bwd) {
        o = xalloc(x->n_o * x->eb);
        lse = (float *)xalloc(x->n_lse * sizeof(float));
        call(&rp, TA_BACKEND_REF, 0, x, o, lse, NULL, NULL, NULL, ws, bytes);
        same = memcmp(o, x->o, x->n_o * x->eb) == 0 &&
               memcmp(lse, x->lse, x->n_lse * sizeof(float)) == 0;
    } else {
        const size_t n_k =
            (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
        dq = xalloc(x->n_q * x->eb);
        dk = xalloc(n_k * x->eb);
        dv = xalloc(n_k * x->eb);
        if (dw_cpu) x->dconv_w = dw = (float *)xalloc(n_w * sizeof(float));
        call(&rp, TA_BACKEND_REF, 1, x, NULL, NULL, dq, dk, dv, ws, bytes);
        x->dconv_w = dw_cpu;
        same = memcmp(dq, x->dq, x->n_q * x->eb) == 0 && memcmp(dk, x->dk, n_k * x->eb) == 0 &&
               memcmp(dv, x->dv, n_k * x->eb) == 0 &&
               (!dw || memcmp(dw, dw_cpu, n_w * sizeof(float)) == 0);
    }
    free(dw);
    free(ws);
    free(o);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    return same;
}

/* Median seconds of reps calls (after one warm-up); -1 on an error. */
static double time_pass(const ta_problem *p, int bwd, bufs *x, int reps) {
    double t[64] = {0};
    int i;
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    for (i = -1; i < reps; ++i) {
        const double t0 = now_s();
        const ta_status st =
            call(p, TA_BACKEND_CPU, bwd, x, x->o, x->lse, x->dq, x->dk, x->dv, x->ws, x->ws_bytes);
        if (st != TA_OK) {
            fprintf(stderr, "cpu_bench: %s: %s\n", bwd ? "ta_bwd" : "ta_fwd", ta_status_string(st));
            return -1.0;
        }
        if (i >= 0) t[i] = now_s() - t0;
    }
    return median(t, reps);
}

static void setup(const ta_problem *p, bufs *x) {
    const size_t n_k =
        (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k * (size_t)p->head_dim;
    size_t fb = 0, bb = 0;
    uint64_t state = 42;
    x->eb = p->dtype == TA_F32 ? 4u : 2u;
    x->n_lse = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    x->n_q = x->n_lse * (size_t)p->head_dim;
    x->n_o = x->n_lse * (size_t)p->head_dim_v;
    x->q = xalloc(x->n_q * x->eb);
    x->k = xalloc(n_k * x->eb);
    x->v = xalloc(n_k * x->eb);
    x->o = xalloc(x->n_o * x->eb);
    x->d_o = xalloc(x->n_o * x->eb);
    x->dq = xalloc(x->n_q * x->eb);
    x->dk = xalloc(n_k * x->eb);
    x->dv = xalloc(n_k * x->eb);
    x->lse = (float *)xalloc(x->n_lse * sizeof(float));
    fill(x->q, p->dtype, x->n_q, &state);
    fill(x->k, p->dtype, n_k, &state);
    fill(x->v, p->dtype, n_k, &state);
    fill(x->d_o, p->dtype, x->n_o, &state);
    x->q_hist = NULL;
    if (p->q_history > 0) {
        const size_t n_h = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->q_history *
                           (size_t)p->head_dim;
        x->q_hist = xalloc(n_h * x->eb);
        fill(x->q_hist, p->dtype, n_h, &state);
    }
    x->ring = NULL;
    x->ring_slots = 0;
    x->rope_cos = x->rope_sin = NULL;
    if (p->rope) { /* the original RoPE, base 10000, one row per position */
        ta_rope_1d cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_pairs = p->rope_pairs;
        cfg.rows = p->rope_rows;
        x->rope_cos = (float *)xalloc((size_t)cfg.rows * (size_t)cfg.n_pairs * sizeof(float));
        x->rope_sin = (float *)xalloc((size_t)cfg.rows * (size_t)cfg.n_pairs * sizeof(float));
        (void)ta_rope_table_1d(&cfg, x->rope_cos, x->rope_sin);
    }
    ta_fwd_workspace_size(p, TA_BACKEND_CPU, &fb);
    if (p->q_history == 0) ta_bwd_workspace_size(p, TA_BACKEND_CPU, &bb); /* fwd only */
    x->ws_bytes = fb > bb ? fb : bb;
    x->ws = xalloc(x->ws_bytes);
}

static void teardown(bufs *x) {
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->o);
    free(x->d_o);
    free(x->dq);
    free(x->dk);
    free(x->dv);
    free(x->lse);
    free(x->q_hist);
    free(x->ring);
    free(x->ws);
    free(x->rope_cos);
    free(x->rope_sin);
}

static const char *dtype_str(ta_dtype dt) {
    return dt == TA_F32 ? "f32" : dt == TA_F16 ? "f16" : "bf16";
}

/* FLOPs of one (b, h) slice of an MTA pass (header comment, item 3), from the
 * library's own tiling (default or given tiles). */
static double mta_flops(const ta_problem *p, int bwd) {
    const double d = p->head_dim, dv = p->head_dim_v, cc = 2.0 * p->conv_q * p->conv_k;
    const int causal = (p->flags & TA_CAUSAL) != 0;
    int32_t bq = p->block_q, bk = p->block_k, dbq, dbk, qt, kt;
    ta_tiling t;
    double fl = 0.0;
    ta_tiling_default_blocks(p->conv_q, p->conv_k, &dbq, &dbk);
    if (bq == 0) bq = dbq;
    if (bk == 0) bk = dbk;
    if (ta_tiling_make(&t, p->seq_q, p->seq_k, bq, bk, p->conv_q, p->conv_k, causal,
                       bwd ? TA_TILING_BWD : TA_TILING_FWD, 1) != TA_OK)
        return 0.0;
    bench_set_window(p, &t);
    for (qt = 0; qt < t.num_q_tiles; ++qt) {
        const int32_t r0 = ta_tile_row_eff_begin(&t, qt), r1 = ta_tile_row_eff_end(&t, qt);
        for (kt = ta_tile_k_begin(&t, qt, p->seq_k); kt < ta_tile_k_end(&t, qt, p->seq_k); ++kt) {
            const int32_t c0 = ta_tile_col_eff_begin(&t, kt), c1 = ta_tile_col_eff_end(&t, kt);
            const double loaded =
                visible_in(&t, ta_tile_row_load_begin(&t, qt), ta_tile_row_load_end(&t, qt),
                           ta_tile_col_load_begin(&t, kt), ta_tile_col_load_end(&t, kt));
            const double eff = visible_in(&t, r0, r1, c0, c1);
            if (!bwd) {
                fl += 2.0 * d * loaded + (cc + 2.0 * dv) * eff;
            } else {
                const int32_t pq = p->conv_q - 1, pk = (p->conv_k - 1) / 2;
                const double grad = visible_in(&t, r0, r1 + pq, c0 - pk, c1 + pk);
                fl += 2.0 * d * loaded + (2.0 * dv + cc) * grad + (cc + 4.0 * d + 2.0 * dv) * eff +
                      cc * (double)(r1 - r0) * (c1 - c0);
            }
        }
    }
    return fl;
}

/* The passes of one problem at one thread count; sdpa_ms[pass]: our SDPA
 * times of the same shape (an SDPA run stores them, an MTA run prints its
 * ratio to them). */
static int run_problem(const opts *op, ta_problem *p, double peak, ta_cpu_isa isa,
                       double *sdpa_ms) {
    bufs x;
    const int mta = p->conv_q > 0;
    const double pairs = (double)p->batch * p->heads_q * visible_pairs(p);
    char kind[32];
    float *w = NULL, *dw = NULL;
    int bwd, ok = 1;
    if (mta)
        snprintf(kind, sizeof kind, "mta%dx%d%s", (int)p->conv_q, (int)p->conv_k,
                 p->rope ? "+rope" : "");
    else
        snprintf(kind, sizeof kind, p->rope ? "sdpa+rope" : "sdpa");
    setup(p, &x);
    if (mta) { /* a smooth kernel of mixed weights; dconv_w output */
        const size_t n_w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
        size_t i;
        w = (float *)xalloc(n_w * sizeof(float));
        dw = (float *)xalloc(n_w * sizeof(float));
        for (i = 0; i < n_w; ++i)
            w[i] = 0.05f + 0.01f * (float)(i % 7);
    }
    x.conv_w = w;
    x.dconv_w = dw;
    for (bwd = 0; bwd <= 1; ++bwd) {
        const double flops = mta ? (double)p->batch * p->heads_q * mta_flops(p, bwd)
                                 : pairs * 2.0 *
                                       (bwd ? 3.0 * p->head_dim + 2.0 * p->head_dim_v
                                            : (double)p->head_dim + p->head_dim_v);
        double secs;
        if (!bwd && !op->do_fwd && op->do_bwd) {
            /* the backward needs o and lse: one untimed forward */
            if (time_pass(p, 0, &x, 1) < 0) ok = 0;
            continue;
        }
        if (bwd && !op->do_bwd) continue;
        secs = time_pass(p, bwd, &x, op->reps);
        if (secs < 0) {
            ok = 0;
            continue;
        }
        printf("%-8s %-7s %3d  %5d %5d %4d %-6s %-4s %-3s %10.3f %9.1f %9.1f %6.1f%%", kind,
               ta_cpu_isa_name(isa), p->num_threads, p->seq_q, p->head_dim, p->heads_q,
               (p->flags & TA_CAUSAL) ? "causal" : "full", dtype_str(p->dtype), bwd ? "bwd" : "fwd",
               secs * 1e3, flops / secs * 1e-9, peak, 100.0 * flops / secs * 1e-9 / peak);
        if (mta && sdpa_ms[bwd] > 0)
            printf("  %6.2fx", secs * 1e3 / sdpa_ms[bwd]);
        else if (!mta)
            sdpa_ms[bwd] = secs * 1e3;
        if (op->check) {
            const int same = check_vs_ref(p, bwd, &x);
            printf("  %s", same ? "bit-identical" : "MISMATCH");
            if (!same) ok = 0;
        }
        printf("\n");
        if (op->csv) {
            fprintf(stderr, "%s,%s,%d,%d,%d,%d,%d,%d,%s,%s,%.6f,%.3f,%.3f,%.4f", kind,
                    ta_cpu_isa_name(isa), p->num_threads, p->batch, p->heads_q, p->seq_q,
                    p->head_dim, (p->flags & TA_CAUSAL) ? 1 : 0, dtype_str(p->dtype),
                    bwd ? "bwd" : "fwd", secs * 1e3, flops / secs * 1e-9, peak,
                    flops / secs * 1e-9 / peak);
            if (mta && sdpa_ms[bwd] > 0) fprintf(stderr, ",%.4f", secs * 1e3 / sdpa_ms[bwd]);
            fprintf(stderr, "\n");
        }
        fflush(stdout);
    }
    teardown(&x);
    free(w);
    free(dw);
    return ok;
}

/* ---- Decode mode (--decode): GB/s of K and V per step ---- */

/* Median seconds of reps parallel copies of n bytes (threads threads, one
 * contiguous chunk each): the bandwidth a step that reads K and V once
 * could reach, measured in this process. */
static double copy_secs(size_t n, int32_t threads, int reps) {
    unsigned char *src = (unsigned char *)xalloc(n), *dst = (unsigned char *)xalloc(n);
    double t[64] = {0};
    int i;
    memset(src, 1, n);
    memset(dst, 2, n);
    if (reps > 64) reps = 64;
    for (i = -1; i < reps; ++i) {
        const double t0 = now_s();
        int32_t c;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
        for (c = 0; c < threads; ++c) {
            const size_t lo = n / (size_t)threads * (size_t)c;
            const size_t hi = c + 1 == threads ? n : n / (size_t)threads * (size_t)(c + 1);
            memcpy(dst + lo, src + lo, hi - lo);
        }
        if (i >= 0) t[i] = now_s() - t0;
    }
    g_sink = (float)dst[n / 2];
    free(src);
    free(dst);
    return median(t, reps);
}

/* One decode step of p (forward), timed; its GB/s against copy_gbs printed.
 * Returns the step's seconds (-1 on an error). */
static double decode_row(const opts *op, ta_problem *p, ta_cpu_isa isa, double copy_gbs,
                         double sdpa_s, int ring) {
    bufs x;
    const size_t kv_bytes = 2u * (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k *
                            (size_t)p->head_dim * (p->dtype == TA_F32 ? 4u : 2u);
    float *w = NULL;
    double secs;
    char kind[32];
    if (p->conv_q > 0) {
        const size_t n_w = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
        size_t i;
        w = (float *)xalloc(n_w * sizeof(float));
        for (i = 0; i < n_w; ++i) w[i] = 0.05f + 0.01f * (float)(i % 7);
        snprintf(kind, sizeof kind, "mta%dx%d%s", (int)p->conv_q, (int)p->conv_k,
                 ring ? "r" : "");
    } else {
        snprintf(kind, sizeof kind, "sdpa");
    }
    setup(p, &x);
    x.conv_w = w;
    x.dconv_w = NULL;
    if (ring) { /* slots for the history rows read and the new rows written */
        size_t n_r, i;
        x.ring_slots = p->q_history + p->seq_q > p->conv_q ? p->q_history + p->seq_q : p->conv_q;
        n_r = (size_t)p->batch * (size_t)p->heads_q * (size_t)x.ring_slots * (size_t)p->seq_k;
        x.ring = (float *)xalloc(n_r * sizeof(float));
        for (i = 0; i < n_r; ++i)
            x.ring[i] = 0.01f * (float)(i % 97) - 0.4f; /* finite raw scores */
    }
    secs = time_pass(p, 0, &x, op->reps);
    if (secs >= 0) {
        const double gbs = (double)kv_bytes / secs * 1e-9;
        printf("%-8s %-7s %3d  %7d %4d %4d/%-3d %3d %-4s %10.3f %9.1f %9.1f %6.1f%%", kind,
               ta_cpu_isa_name(isa), p->num_threads, p->seq_k, p->seq_q, p->heads_q, p->heads_kv,
               p->head_dim, dtype_str(p->dtype), secs * 1e3, gbs, copy_gbs,
               100.0 * gbs / copy_gbs);
        if (sdpa_s > 0) printf("  %6.2fx", secs / sdpa_s);
        if (op->check) printf("  %s", check_vs_ref(p, 0, &x) ? "bit-identical" : "MISMATCH");
        printf("\n");
        if (op->csv)
            fprintf(stderr, "decode,%s,%s,%d,%d,%d,%d,%d,%d,%s,%.6f,%.3f,%.3f,%.4f,%.4f\n", kind,
                    ta_cpu_isa_name(isa), p->num_threads, p->batch, p->heads_q, p->heads_kv,
                    p->seq_k, p->seq_q, dtype_str(p->dtype), secs * 1e3, gbs, copy_gbs,
                    gbs / copy_gbs, sdpa_s > 0 ? secs / sdpa_s : 0.0);
        fflush(stdout);
    }
    teardown(&x);
    free(w);
    return secs;
}

/* The decode table of one thread count: every (S_k, new rows, D), SDPA and
 * (--mta) the MTA step with its c_q - 1 history rows. Returns 0 on an error. */
static int decode_table(const opts *op, int32_t threads, ta_cpu_isa isa) {
    int is, iq, id, ok = 1;
    printf("%-8s %-7s %3s  %7s %4s %8s %3s %-4s %10s %9s %9s %7s  %s\n", "kind", "isa", "thr",
           "S_k", "S_q", "H/H_kv", "D", "type", "ms", "GB/s", "copy", "of copy", "MTA/SDPA time");
    for (is = 0; is < op->n_seqs; ++is)
        for (id = 0; id < op->n_dims; ++id) {
            ta_problem p;
            double copy_gbs;
            memset(&p, 0, sizeof p);
            p.batch = op->batch;
            p.heads_q = op->heads;
            p.heads_kv = op->heads_kv > 0 ? op->heads_kv : op->heads;
            p.seq_k = op->seqs[is];
            p.head_dim = p.head_dim_v = op->dims[id];
            p.dtype = op->dtype;
            p.flags = TA_CAUSAL;
            p.num_splits = TA_SPLITS_AUTO;
            p.num_threads = threads;
            {
                const size_t kv = 2u * (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k *
                                  (size_t)p.head_dim * (p.dtype == TA_F32 ? 4u : 2u);
                copy_gbs = (double)kv / copy_secs(kv, threads, op->reps) * 1e-9;
            }
            for (iq = 0; iq < op->n_decode; ++iq) {
                double sdpa_s;
                p.seq_q = op->decode[iq] < p.seq_k ? op->decode[iq] : p.seq_k;
                p.conv_q = p.conv_k = 0;
                p.q_history = 0;
                sdpa_s = decode_row(op, &p, isa, copy_gbs, 0.0, 0);
                if (sdpa_s < 0) ok = 0;
                if (op->mta_q > 0) {
                    p.conv_q = op->mta_q;
                    p.conv_k = op->mta_k;
                    p.q_history = p.seq_k - p.seq_q < op->mta_q - 1 ? p.seq_k - p.seq_q
                                                                    : op->mta_q - 1;
                    if (decode_row(op, &p, isa, copy_gbs, sdpa_s, 0) < 0) ok = 0;
                    /* the same step reading its history rows' scores from the ring */
                    if (p.q_history > 0 && decode_row(op, &p, isa, copy_gbs, sdpa_s, 1) < 0)
                        ok = 0;
                }
            }
        }
    return ok;
}

static int parse_list(const char *s, int32_t *out, int *n) {
    char *end;
    *n = 0;
    while (*s && *n < MAX_LIST) {
        const long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > (1L << 30)) return 0;
        out[(*n)++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return *n > 0;
}

static void usage(void) {
    fprintf(
        stderr,
        "usage: cpu_bench [options]\n"
        "  --seq L        sequence lengths S = S_q = S_k, comma list  [512,1024,2048,4096,8192]\n"
        "  --dim L        head dims D = D_v, comma list               [64,128]\n"
        "  --heads N      heads H (= H_kv)                            [8]\n"
        "  --batch N      batch B                                     [1]\n"
        "  --threads L    thread counts; 0 = all (omp_get_max_threads) [1,0]\n"
        "  --causal M     on, off or both                             [both]\n"
        "  --dtype T      f32, f16 or bf16                            [f32]\n"
        "  --pass P       fwd, bwd or both                            [both]\n"
        "  --block-q N, --block-k N   tile sizes                      [library]\n"
        "  --reps N       timed calls per measurement (median)        [3]\n"
        "  --mta QxK      MTA rows (causal shapes) with a c_q x c_k conv, or off [6x11]\n"
        "  --window L,R   sliding window (TA_WINDOW) of L keys left, R right of the\n"
        "                 diagonal on every problem; negative = unbounded  [none]\n"
        "  --rope P       rotary load stage on every problem: interleaved or half  [none]\n"
        "  --decode L     decode mode: L new query rows per step (comma list) against\n"
        "                 S_k = each --seq, causal, TA_SPLITS_AUTO, forward only; GB/s\n"
        "                 of K and V against a parallel copy of as many bytes, and the\n"
        "                 MTA step (--mta, q_history = c_q - 1) against it, then\n"
        "                 the same step with the score ring (kind mta..r: the history\n"
        "                 rows' scores read, not recomputed)\n"
        "  --heads-kv N   kv heads in decode mode (GQA)                [--heads]\n"
        "  --check        compare each result with the reference (slow)\n"
        "  --peak-only    measure the FMA peak and stop\n"
        "  --csv          also write CSV rows to stderr\n"
        "  --cpu-time     time with the process CPU clock (one-thread runs on a\n"
        "                 shared machine; wall clock by default)\n"
        "Set TA_CPU_ISA=scalar|avx2|avx512 to force a path.\n");
}

static int parse_args(int argc, char **argv, opts *op, int *peak_only) {
    int i;
    memset(op, 0, sizeof *op);
    parse_list("512,1024,2048,4096,8192", op->seqs, &op->n_seqs);
    parse_list("64,128", op->dims, &op->n_dims);
    parse_list("1,0", op->threads, &op->n_threads);
    op->causal_modes[0] = 1;
    op->causal_modes[1] = 0;
    op->n_causal = 2;
    op->batch = 1;
    op->heads = 8;
    op->reps = 3;
    op->do_fwd = op->do_bwd = 1;
    op->mta_q = 6;
    op->mta_k = 11;
    *peak_only = 0;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (strcmp(a, "--seq") == 0 && v)
            used = parse_list(v, op->seqs, &op->n_seqs) ? 2 : -1;
        else if (strcmp(a, "--dim") == 0 && v)
            used = parse_list(v, op->dims, &op->n_dims) ? 2 : -1;
        else if (strcmp(a, "--threads") == 0 && v)
            used = parse_list(v, op->threads, &op->n_threads) ? 2 : -1;
        else if (strcmp(a, "--heads") == 0 && v)
            op->heads = atoi(v), used = 2;
        else if (strcmp(a, "--batch") == 0 && v)
            op->batch = atoi(v), used = 2;
        else if (strcmp(a, "--reps") == 0 && v)
            op->reps = atoi(v), used = 2;
        else if (strcmp(a, "--block-q") == 0 && v)
            op->block_q = atoi(v), used = 2;
        else if (strcmp(a, "--block-k") == 0 && v)
            op->block_k = atoi(v), used = 2;
        else if (strcmp(a, "--causal") == 0 && v) {
            used = 2;
            op->n_causal = strcmp(v, "both") == 0 ? 2 : 1;
            op->causal_modes[0] = strcmp(v, "off") == 0 ? 0 : 1;
        } else if (strcmp(a, "--dtype") == 0 && v) {
            used = 2;
            op->dtype = strcmp(v, "f16") == 0 ? TA_F16 : strcmp(v, "bf16") == 0 ? TA_BF16 : TA_F32;
        } else if (strcmp(a, "--pass") == 0 && v) {
            used = 2;
            op->do_fwd = strcmp(v, "bwd") != 0;
            op->do_bwd = strcmp(v, "fwd") != 0;
        } else if (strcmp(a, "--mta") == 0 && v) {
            used = 2;
            if (strcmp(v, "off") == 0)
                op->mta_q = op->mta_k = 0;
            else if (sscanf(v, "%dx%d", &op->mta_q, &op->mta_k) != 2 || op->mta_q < 1 ||
                     op->mta_k < 1 || op->mta_k % 2 == 0)
                used = -1;
        } else if (strcmp(a, "--window") == 0 && v) {
            used = sscanf(v, "%d,%d", &op->win_l, &op->win_r) == 2 ? 2 : -1;
            op->window = 1;
        } else if (strcmp(a, "--rope") == 0 && v) {
            used = 2;
            op->rope = strcmp(v, "interleaved") == 0 ? TA_ROPE_INTERLEAVED
                       : strcmp(v, "half") == 0      ? TA_ROPE_HALF
                                                     : -1;
            if (op->rope < 0) used = -1;
        } else if (strcmp(a, "--decode") == 0 && v)
            used = parse_list(v, op->decode, &op->n_decode) ? 2 : -1;
        else if (strcmp(a, "--heads-kv") == 0 && v)
            op->heads_kv = atoi(v), used = 2;
        else if (strcmp(a, "--check") == 0)
            op->check = 1;
        else if (strcmp(a, "--csv") == 0)
            op->csv = 1;
        else if (strcmp(a, "--peak-only") == 0)
            *peak_only = 1;
        else if (strcmp(a, "--cpu-time") == 0)
            g_clock = CLOCK_PROCESS_CPUTIME_ID;
        else
            used = -1;
        if (used < 0 || op->reps < 1 || op->heads < 1 || op->batch < 1) {
            usage();
            return 0;
        }
        i += used - 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    opts op;
    int peak_only, it, is, id, ic, ok = 1;
    const ta_cpu_isa isa = ta_cpu_isa_resolve();
    int32_t max_threads = 1;
    if (!parse_args(argc, argv, &op, &peak_only)) return 2;
#ifdef _OPENMP
    max_threads = (int32_t)omp_get_max_threads();
#endif
    printf("cpu_bench: tileattn %s, CPU path %s, up to %d threads; FLOPs per visible pair: "
           "fwd 2(D+D_v), bwd 2(3D+2D_v)\n",
           ta_version_string(), ta_cpu_isa_name(isa), (int)max_threads);
    if (op.window)
        printf("every problem with a sliding window: %d keys left, %d right of the diagonal "
               "(negative: unbounded); FLOPs count the visible pairs only\n",
               (int)op.win_l, (int)op.win_r);
    for (it = 0; it < op.n_threads; ++it) {
        const int32_t threads = op.threads[it] ? op.threads[it] : max_threads;
        int pinned;
        const double peak = fma_peak(isa, threads, &pinned);
        printf("FMA peak (%s, %d thread%s%s): %.1f GFLOP/s = %.1f per thread, i.e. %.2f GHz at 2 "
               "FMA ports x %d lanes x 2 flops\n",
               ta_cpu_isa_name(isa), (int)threads, threads == 1 ? "" : "s",
               pinned ? ", pinned" : ", not pinned", peak, peak / threads,
               peak / threads / (2.0 * 2.0 * isa_lanes(isa)), isa_lanes(isa));
        if (op.csv)
            fprintf(stderr, "peak,%s,%d,,,,,,,,,%.3f,%.3f,1\n", ta_cpu_isa_name(isa), threads, peak,
                    peak);
        if (peak_only) continue;
        if (op.n_decode > 0) {
            ok &= decode_table(&op, threads, isa);
            continue;
        }
        printf("%-8s %-7s %3s  %5s %5s %4s %-6s %-4s %-3s %10s %9s %9s %7s  %s\n", "kind", "isa",
               "thr", "S", "D", "H", "mask", "type", "pas", "ms", "GFLOP/s", "peak", "of peak",
               "MTA/SDPA time");
        for (is = 0; is < op.n_seqs; ++is)
            for (id = 0; id < op.n_dims; ++id)
                for (ic = 0; ic < op.n_causal; ++ic) {
                    ta_problem p;
                    memset(&p, 0, sizeof p);
                    p.batch = op.batch;
                    p.heads_q = p.heads_kv = op.heads;
                    p.seq_q = p.seq_k = op.seqs[is];
                    p.head_dim = p.head_dim_v = op.dims[id];
                    p.dtype = op.dtype;
                    p.flags = op.causal_modes[ic] ? TA_CAUSAL : 0u;
                    if (op.window) {
                        p.flags |= TA_WINDOW;
                        p.window_left = op.win_l;
                        p.window_right = op.win_r;
                    }
                    p.block_q = op.block_q;
                    p.block_k = op.block_k;
                    p.num_threads = threads;
                    if (op.rope) {
                        p.rope = op.rope;
                        p.rope_pairs = p.head_dim / 2;
                        p.rope_rows = p.seq_k;
                    }
                    {
                        double sdpa_ms[2] = {0.0, 0.0};
                        ok &= run_problem(&op, &p, peak, isa, sdpa_ms);
                        if (op.mta_q > 0 && (p.flags & TA_CAUSAL)) {
                            p.conv_q = op.mta_q;
                            p.conv_k = op.mta_k;
                            ok &= run_problem(&op, &p, peak, isa, sdpa_ms);
                        }
                    }
                }
    }
    return ok ? 0 : 1;
}
