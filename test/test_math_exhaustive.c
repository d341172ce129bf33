/*
 * Exhaustive accuracy of ta_exp and ta_log: all 2^32 float inputs against
 * double-precision exp/log (docs/design.md 3.4, docs/exactness.md).
 *
 *   normal outputs     max error in ulp of the exact result, must be <= 2
 *   subnormal outputs  max error in units of 2^-149, must be <= 1
 *   specials           NaN, +-inf, 0, overflow/underflow and x < 0 must give
 *                      exactly the bits docs/exactness.md defines: 0 mismatches
 *
 * Usage: test_math_exhaustive [--stride N] [--generic] [--vector]
 *   --stride N  check every N-th input only, for quick runs (CTest runs all)
 *   --generic   do not use the target("fma") copy described below
 *   --vector    instead of the accuracy scan: the lane-wise AVX2 and AVX-512
 *               versions of the CPU backend (src/cpu/ta_cpu_vmath_*.h) must
 *               return the scalar functions' bits on every input (each path
 *               the CPU runs; exit 77, skipped, when it runs none)
 * Threads: OpenMP (OMP_NUM_THREADS).
 *
 * Speed: without -mfma every fmaf in ta_math.h is a libm call. On x86-64 CPUs
 * with FMA the scan runs a copy compiled with target("fma"), where fmaf is one
 * instruction. fmaf is correctly rounded either way, so both copies compute the
 * same bits; the test checks that on a sample of inputs.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TA_SCAN_FMA_CLONE 1
/* force ta_math.h into the caller, so that it is compiled for the caller's ISA */
#define TA_MATH_FN     static inline __attribute__((always_inline))
#define TA_SCAN_INLINE static inline __attribute__((always_inline))
#else
#define TA_SCAN_FMA_CLONE 0
#define TA_SCAN_INLINE    static inline
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/ta_cpu_vmath_avx2.h"
#include "cpu/ta_cpu_vmath_avx512.h"
#include "ta_math.h"
#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#define TA_OMP(directive) _Pragma(directive)
#else
#define TA_OMP(directive)
#endif

#define CHUNK_BITS 16u /* inputs per work item: 2^16 */
#define N_CHUNKS   (1u << (32u - CHUNK_BITS))
#define MAX_REPORT 8

enum { FN_EXP = 0, FN_LOG = 1 };
static const char *const fn_name[2] = {"ta_exp", "ta_log"};

/* Per-function results of a scan (merged over threads). */
typedef struct scan_stats {
    uint64_t checked;
    uint64_t normal_outputs;    /* exact result in [2^-126, FLT_MAX] (or rounds to it) */
    uint64_t subnormal_outputs; /* exact result below 2^-126, including results that round to 0 */
    uint64_t not_cr;            /* result != correctly rounded result */
    uint64_t over_1ulp;         /* normal outputs with error > 1 ulp */
    uint64_t special_mismatch;  /* NaN / inf / zero / overflow bits differ from the definition */
    double max_ulp;
    uint32_t max_ulp_x;
    double max_sub;
    uint32_t max_sub_x;
} scan_stats;

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void stats_init(scan_stats *s) { memset(s, 0, sizeof *s); }

static void stats_merge(scan_stats *into, const scan_stats *from) {
    into->checked += from->checked;
    into->normal_outputs += from->normal_outputs;
    into->subnormal_outputs += from->subnormal_outputs;
    into->not_cr += from->not_cr;
    into->over_1ulp += from->over_1ulp;
    into->special_mismatch += from->special_mismatch;
    if (from->max_ulp > into->max_ulp ||
        (from->max_ulp == into->max_ulp && from->max_ulp_x < into->max_ulp_x)) {
        into->max_ulp = from->max_ulp;
        into->max_ulp_x = from->max_ulp_x;
    }
    if (from->max_sub > into->max_sub ||
        (from->max_sub == into->max_sub && from->max_sub_x < into->max_sub_x)) {
        into->max_sub = from->max_sub;
        into->max_sub_x = from->max_sub_x;
    }
}

/*
 * The bits ta_exp / ta_log must return where the result is not an ordinary
 * finite approximation: writes them to *bits and returns 1, else returns 0.
 * This is the definition from docs/exactness.md, restated independently.
 */
TA_SCAN_INLINE int special_result(int fn, uint32_t ux, uint32_t *bits) {
    if ((ux & 0x7fffffffu) > 0x7f800000u) { /* NaN in: same NaN, quieted */
        *bits = ux | 0x00400000u;
        return 1;
    }
    if (fn == FN_EXP) {
        /* +-inf and the overflow/underflow thresholds are checked by the scan
         * against double exp(), through exp_threshold_ok() */
        if (ux == 0u || ux == 0x80000000u) {
            *bits = 0x3f800000u;
            return 1;
        } /* exp(+-0) = 1 */
        return 0;
    }
    if ((ux & 0x7fffffffu) == 0u) {
        *bits = 0xff800000u;
        return 1;
    } /* log(+-0) = -inf */
    if (ux >> 31) {
        *bits = 0x7fc00000u;
        return 1;
    } /* log(x<0) = NaN */
    if (ux == 0x7f800000u) {
        *bits = 0x7f800000u;
        return 1;
    } /* log(inf) = inf */
    if (ux == 0x3f800000u) {
        *bits = 0u;
        return 1;
    } /* log(1) = +0 */
    return 0;
}

/*
 * exp's thresholds are tight: x > TA_EXP_HI exactly where e^x rounds to +inf,
 * x < TA_EXP_LO exactly where it rounds to 0, and ta_exp gives +inf / +0 there.
 */
TA_SCAN_INLINE int exp_threshold_ok(float x, float y, double ref) {
    const float cr = (float)ref;
    if ((x > TA_EXP_HI) != (ta_f32_bits(cr) == 0x7f800000u)) return 0;
    if ((x < TA_EXP_LO) != (ta_f32_bits(cr) == 0u)) return 0;
    if (x > TA_EXP_HI) return ta_f32_bits(y) == 0x7f800000u;
    if (x < TA_EXP_LO) return ta_f32_bits(y) == 0u;
    return 1;
}

/* Error bookkeeping of one ordinary input: y = ta result, ref = double result. */
TA_SCAN_INLINE void account(scan_stats *s, uint32_t ux, float y, double ref) {
    const float cr = (float)ref; /* correctly rounded (double rounding is harmless at 2 ulp) */
    const double aref = fabs(ref);
    s->checked++;
    if (ta_f32_bits(y) != ta_f32_bits(cr)) s->not_cr++;
    if (!isfinite(y) || !isfinite(cr)) {
        /* overflow must be exactly where double exp overflows float, and only there */
        if (ta_f32_bits(y) != ta_f32_bits(cr)) s->special_mismatch++;
        return;
    }
    if (aref < 0x1p-126) {
        const double err = fabs((double)y - ref) * 0x1p149;
        s->subnormal_outputs++;
        if (err > s->max_sub || (err == s->max_sub && ux < s->max_sub_x)) {
            s->max_sub = err;
            s->max_sub_x = ux;
        }
    } else {
        int k;
        double err;
        (void)frexp(aref, &k); /* aref = m 2^k, m in [0.5, 1): ulp = 2^(k-24) */
        err = ldexp(fabs((double)y - ref), 24 - k);
        s->normal_outputs++;
        if (err > 1.0) s->over_1ulp++;
        if (err > s->max_ulp || (err == s->max_ulp && ux < s->max_ulp_x)) {
            s->max_ulp = err;
            s->max_ulp_x = ux;
        }
    }
}

/* Scans inputs [first, first + count) with the given stride. */
TA_SCAN_INLINE void scan_body(int fn, uint64_t first, uint64_t count, uint32_t stride,
                              scan_stats *s) {
    uint64_t i;
    for (i = 0; i < count; i += stride) {
        const uint32_t ux = (uint32_t)(first + i);
        const float x = ta_f32_from_bits(ux);
        const float y = fn == FN_EXP ? ta_exp(x) : ta_log(x);
        uint32_t want;
        if (special_result(fn, ux, &want)) {
            s->checked++;
            if (ta_f32_bits(y) != want) s->special_mismatch++;
            continue;
        }
        if (fn == FN_EXP) {
            const double ref = exp((double)x);
            if (!exp_threshold_ok(x, y, ref)) s->special_mismatch++;
            account(s, ux, y, ref);
        } else {
            account(s, ux, y, log((double)x));
        }
    }
}

/* Bits of f(x) for a sample, to compare the two compiled copies. */
TA_SCAN_INLINE uint32_t eval_bits(int fn, uint32_t ux) {
    const float x = ta_f32_from_bits(ux);
    return ta_f32_bits(fn == FN_EXP ? ta_exp(x) : ta_log(x));
}

static void scan_generic(int fn, uint64_t first, uint64_t count, uint32_t stride, scan_stats *s) {
    scan_body(fn, first, count, stride, s);
}
static uint32_t eval_generic(int fn, uint32_t ux) { return eval_bits(fn, ux); }

#if TA_SCAN_FMA_CLONE
__attribute__((target("fma"))) static void scan_fma(int fn, uint64_t first, uint64_t count,
                                                    uint32_t stride, scan_stats *s) {
    scan_body(fn, first, count, stride, s);
}
__attribute__((target("fma"))) static uint32_t eval_fma(int fn, uint32_t ux) {
    return eval_bits(fn, ux);
}
static int cpu_has_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") ? 1 : 0;
}
#else
static int cpu_has_fma(void) { return 0; }
#endif

static void scan(int fn, int use_fma, uint32_t stride, scan_stats *total) {
    int64_t c;
    stats_init(total);
    TA_OMP("omp parallel") {
        scan_stats mine;
        stats_init(&mine);
        TA_OMP("omp for schedule(dynamic, 16)")
        for (c = 0; c < (int64_t)N_CHUNKS; ++c) {
            const uint64_t first = (uint64_t)c << CHUNK_BITS;
            /* keep the stride pattern global: start at the first multiple of stride */
            const uint64_t skip = (stride - first % stride) % stride;
            const uint64_t count = (1ull << CHUNK_BITS);
            if (skip >= count) continue;
#if TA_SCAN_FMA_CLONE
            if (use_fma) {
                scan_fma(fn, first + skip, count - skip, stride, &mine);
                continue;
            }
#endif
            (void)use_fma;
            scan_generic(fn, first + skip, count - skip, stride, &mine);
        }
        TA_OMP("omp critical")
        stats_merge(total, &mine);
    }
}

/* Both copies give the same bits on every 4099-th input (about 2^20 inputs
 * spread over all exponents, NaNs and infinities included). */
static uint64_t cross_check_copies(int fn) {
    uint64_t mismatches = 0;
#if TA_SCAN_FMA_CLONE
    uint64_t u;
    for (u = 0; u <= 0xffffffffull; u += 4099u) {
        const uint32_t ux = (uint32_t)u;
        if (eval_generic(fn, ux) != eval_fma(fn, ux)) {
            if (mismatches++ < MAX_REPORT)
                fprintf(stderr, "%s(0x%08x): generic 0x%08x, fma 0x%08x\n", fn_name[fn], ux,
                        eval_generic(fn, ux), eval_fma(fn, ux));
        }
    }
#else
    (void)fn;
    (void)eval_generic;
#endif
    return mismatches;
}

/* ---------------------------------------------------------------------- */
/* --vector: lane-wise versions == scalar functions, bit for bit            */
/* ---------------------------------------------------------------------- */

enum { ISA_AVX2 = 0, ISA_AVX512 = 1, N_VISA = 2 };
static const char *const visa_name[N_VISA] = {"avx2", "avx512"};

/* The vector results of one chunk [first, first + 2^CHUNK_BITS) into out
 * (a vector holds consecutive inputs). */
#if defined(TA_HAVE_VMATH_AVX2)
__attribute__((target("avx2,fma"))) static void vec_chunk_avx2(int fn, uint32_t first, float *out) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    uint32_t i;
    for (i = 0; i < (1u << CHUNK_BITS); i += 8) {
        const __m256 v =
            _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32((int32_t)(first + i)), iota));
        _mm256_storeu_ps(out + i, fn == FN_EXP ? ta_avx2_exp(v) : ta_avx2_log(v));
    }
}
/* The scalar results of the chunk. The functions are inlined here, so fmaf
 * is the FMA instruction: the same bits as the libm call (see the header). */
__attribute__((target("avx2,fma"))) static void scalar_chunk_fma(int fn, uint32_t first,
                                                                 float *out) {
    uint32_t i;
    if (fn == FN_EXP) {
        for (i = 0; i < (1u << CHUNK_BITS); ++i)
            out[i] = ta_exp(ta_f32_from_bits(first + i));
    } else {
        for (i = 0; i < (1u << CHUNK_BITS); ++i)
            out[i] = ta_log(ta_f32_from_bits(first + i));
    }
}
#endif
#if defined(TA_HAVE_VMATH_AVX512)
__attribute__((target("avx512f,avx2,fma"))) static void vec_chunk_avx512(int fn, uint32_t first,
                                                                         float *out) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    uint32_t i;
    for (i = 0; i < (1u << CHUNK_BITS); i += 16) {
        const __m512 v =
            _mm512_castsi512_ps(_mm512_add_epi32(_mm512_set1_epi32((int32_t)(first + i)), iota));
        _mm512_storeu_ps(out + i, fn == FN_EXP ? ta_avx512_exp(v) : ta_avx512_log(v));
    }
}
#endif

/* Inputs of the chunk where got differs from want, bitwise (first few printed). */
static uint64_t vec_compare(int fn, int isa, uint32_t first, const float *got, const float *want) {
    uint64_t bad = 0;
    uint32_t i;
    for (i = 0; i < (1u << CHUNK_BITS); ++i) {
        if (ta_f32_bits(got[i]) == ta_f32_bits(want[i])) continue;
        if (bad++ < 4)
            fprintf(stderr, "%s %s(0x%08x) = 0x%08x, scalar 0x%08x\n", fn_name[fn], visa_name[isa],
                    first + i, ta_f32_bits(got[i]), ta_f32_bits(want[i]));
    }
    return bad;
}

/* Which vector paths this CPU runs. */
static int vec_isa_runs(int isa) {
#if defined(TA_HAVE_VMATH_AVX2)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    if (isa == ISA_AVX512) return __builtin_cpu_supports("avx512f") ? 1 : 0;
    return 1;
#else
    (void)isa;
    return 0;
#endif
}

/* One function, every stride-th chunk of 2^CHUNK_BITS inputs (all of them
 * for stride 1): the scalar results once, then each vector path that runs. */
static void vec_scan(int fn, uint32_t stride, const int *runs, uint64_t *bad) {
    uint64_t bad0 = 0, bad1 = 0;
    int64_t c;
    (void)fn;
    (void)runs;
    TA_OMP("omp parallel reduction(+ : bad0, bad1)") {
        float *want = (float *)malloc(sizeof(float) << CHUNK_BITS);
        float *got = (float *)malloc(sizeof(float) << CHUNK_BITS);
        TA_OMP("omp for schedule(dynamic, 16)")
        for (c = 0; c < (int64_t)N_CHUNKS; c += stride) {
            const uint32_t first = (uint32_t)c << CHUNK_BITS;
            (void)first;
#if defined(TA_HAVE_VMATH_AVX2)
            scalar_chunk_fma(fn, first, want);
            if (runs[ISA_AVX2]) {
                vec_chunk_avx2(fn, first, got);
                bad0 += vec_compare(fn, ISA_AVX2, first, got, want);
            }
#endif
#if defined(TA_HAVE_VMATH_AVX512)
            if (runs[ISA_AVX512]) {
                vec_chunk_avx512(fn, first, got);
                bad1 += vec_compare(fn, ISA_AVX512, first, got, want);
            }
#endif
        }
        free(want);
        free(got);
    }
    bad[ISA_AVX2] = bad0;
    bad[ISA_AVX512] = bad1;
}

/* --vector: returns the exit status (77 when no vector path runs here). */
static int vector_main(uint32_t stride) {
    int runs[N_VISA], isa, fn, any = 0;
    uint64_t bad[N_VISA];
    for (isa = 0; isa < N_VISA; ++isa) {
        runs[isa] = vec_isa_runs(isa);
        any |= runs[isa];
    }
    printf("test_math_exhaustive --vector: lane-wise exp/log == scalar on %s; paths:%s%s\n",
           stride == 1 ? "all 2^32 inputs" : "every stride-th chunk of 2^16 inputs",
           runs[ISA_AVX2] ? " avx2" : "", runs[ISA_AVX512] ? " avx512" : "");
    if (!any) {
        printf("  skipped: this CPU runs no vector path (AVX2 + FMA)\n");
        return TA_TEST_SKIP;
    }
    for (fn = FN_EXP; fn <= FN_LOG; ++fn) {
        const double t0 = now_s();
        vec_scan(fn, stride, runs, bad);
        for (isa = 0; isa < N_VISA; ++isa) {
            if (!runs[isa]) continue;
            printf("  %-7s %-7s %llu mismatches\n", visa_name[isa], fn_name[fn],
                   (unsigned long long)bad[isa]);
            TA_CHECK(bad[isa] == 0, "%s %s: %llu inputs where the vector bits differ",
                     visa_name[isa], fn_name[fn], (unsigned long long)bad[isa]);
        }
        printf("  %s: %.1f s\n", fn_name[fn], now_s() - t0);
    }
    return ta_test_finish("test_math_exhaustive --vector");
}

static void parse_args(int argc, char **argv, uint32_t *stride, int *generic, int *vector) {
    int i;
    *stride = 1;
    *generic = 0;
    *vector = 0;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--stride") == 0 && i + 1 < argc) {
            const unsigned long v = strtoul(argv[++i], NULL, 0);
            *stride = v >= 1 && v <= 0xffffffffu ? (uint32_t)v : 1u;
        } else if (strcmp(argv[i], "--generic") == 0) {
            *generic = 1;
        } else if (strcmp(argv[i], "--vector") == 0) {
            *vector = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--stride N] [--generic] [--vector]\n"
                    "  --stride N  check every N-th input only (quick runs)\n"
                    "  --generic   never use the target(\"fma\") copy\n"
                    "  --vector    vector exp/log (src/cpu) == scalar, bitwise\n",
                    argv[0]);
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    uint32_t stride;
    int generic, use_fma, vector;
    scan_stats st[2];
    double secs[2];
    uint64_t copy_mismatch[2];
    int fn, threads = 1;
    parse_args(argc, argv, &stride, &generic, &vector);
    if (vector) return vector_main(stride);
    use_fma = generic ? 0 : cpu_has_fma();
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("test_math_exhaustive: every %u-th of 2^32 inputs, %d thread(s), fmaf as %s\n", stride,
           threads, use_fma ? "FMA instruction (target(\"fma\") copy)" : "libm call");
    for (fn = FN_EXP; fn <= FN_LOG; ++fn) {
        const double t0 = now_s();
        scan(fn, use_fma, stride, &st[fn]);
        secs[fn] = now_s() - t0;
        copy_mismatch[fn] = use_fma ? cross_check_copies(fn) : 0;
    }

    printf("\n%-7s %11s %9s %-12s %11s %-12s %11s %10s %9s %7s\n", "fn", "checked", "max ulp",
           "at x", "max sub", "at x", "not c.r.", ">1 ulp", "specials", "time");
    printf("%-7s %11s %9s %-12s %11s %-12s %11s %10s %9s %7s\n", "", "", "(normal)", "", "[2^-149]",
           "", "", "", "mismatch", "[s]");
    for (fn = FN_EXP; fn <= FN_LOG; ++fn) {
        const scan_stats *s = &st[fn];
        printf("%-7s %11llu %9.4f 0x%08x   %11.4f 0x%08x   %11llu %10llu %9llu %7.1f\n",
               fn_name[fn], (unsigned long long)s->checked, s->max_ulp, s->max_ulp_x, s->max_sub,
               s->max_sub_x, (unsigned long long)s->not_cr, (unsigned long long)s->over_1ulp,
               (unsigned long long)s->special_mismatch, secs[fn]);
    }
    printf("\n");
    for (fn = FN_EXP; fn <= FN_LOG; ++fn) {
        const scan_stats *s = &st[fn];
        printf("%s: max ulp at x = %.9g, max subnormal error at x = %.9g, "
               "%llu normal and %llu subnormal outputs\n",
               fn_name[fn], (double)ta_f32_from_bits(s->max_ulp_x),
               (double)ta_f32_from_bits(s->max_sub_x), (unsigned long long)s->normal_outputs,
               (unsigned long long)s->subnormal_outputs);
        TA_CHECK(s->max_ulp <= 2.0, "%s: max error %.4f ulp > 2", fn_name[fn], s->max_ulp);
        TA_CHECK(s->max_sub <= 1.0, "%s: max subnormal error %.4f * 2^-149 > 1", fn_name[fn],
                 s->max_sub);
        TA_CHECK(s->special_mismatch == 0, "%s: %llu special-value mismatches", fn_name[fn],
                 (unsigned long long)s->special_mismatch);
        TA_CHECK(copy_mismatch[fn] == 0, "%s: %llu generic/fma copy mismatches", fn_name[fn],
                 (unsigned long long)copy_mismatch[fn]);
    }
    return ta_test_finish("test_math_exhaustive");
}
