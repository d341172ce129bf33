/*
 * Unit test of the shared math (src/ta_math.h), label unit:
 *   1. every constant has the bit pattern docs/exactness.md gives;
 *   2. f16 -> f32 and bf16 -> f32 on all 2^16 inputs, against an ldexp decode;
 *   3. f32 -> f16 and f32 -> bf16 (nearest even) against a search over the
 *      storage format's values in double (and gcc's _Float16 where present),
 *      on every value, neighbour and midpoint +-1 ulp, specials, random floats;
 *   4. special values of ta_exp / ta_log, bit for bit;
 *   5. sampled accuracy of ta_exp / ta_log against double exp / log;
 *   6. the exact bits of ta_exp / ta_log pinned by a hash over 17M inputs.
 * The exhaustive 2^32 accuracy scan is test_math_exhaustive.
 *
 * Usage: test_math [--quick]   (--quick: 1/16 of the random samples, for
 * valgrind and sanitizer runs). Seed: $TA_SEED, else the clock (printed).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ta_math.h"
#include "test_util.h"

#if defined(__FLT16_MANT_DIG__) && !defined(TA_TEST_NO_FLOAT16)
#define HAVE_NATIVE_F16 1
__extension__ typedef _Float16 native_f16;
#else
#define HAVE_NATIVE_F16 0
#endif

static int quick = 0;

static uint32_t f2u(float x) { return ta_f32_bits(x); }
static float u2f(uint32_t u) { return ta_f32_from_bits(u); }
static int is_nan_u32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* ------------------------------------------------------------------------- */
/* 1. constants                                                               */
/* ------------------------------------------------------------------------- */

static void check_constant(const char *name, float value, uint32_t bits, double rational) {
    TA_CHECK(f2u(value) == bits, "%s: bits 0x%08x, documented 0x%08x", name, f2u(value), bits);
    if (rational != 0.0)
        TA_CHECK(f2u(value) == f2u((float)rational), "%s: 0x%08x is not the float nearest %.17g",
                 name, f2u(value), rational);
}

static void test_constants(void) {
    check_constant("TA_EXP_HI", TA_EXP_HI, 0x42b17217u, 0.0);
    check_constant("TA_EXP_LO", TA_EXP_LO, 0xc2cff1b4u, 0.0);
    check_constant("TA_EXP_LOG2E", TA_EXP_LOG2E, 0x3fb8aa3bu, 1.4426950408889634);
    check_constant("TA_EXP_SHIFTER", TA_EXP_SHIFTER, 0x4b400000u, 12582912.0);
    check_constant("TA_LN2_HI", TA_LN2_HI, 0x3f317200u, 0.0);
    check_constant("TA_LN2_LO", TA_LN2_LO, 0x35bfbe8eu, 0.6931471805599453 - 0.693145751953125);
    check_constant("TA_EXP_C7", TA_EXP_C7, 0x39500d01u, 1.0 / 5040.0);
    check_constant("TA_EXP_C6", TA_EXP_C6, 0x3ab60b61u, 1.0 / 720.0);
    check_constant("TA_EXP_C5", TA_EXP_C5, 0x3c088889u, 1.0 / 120.0);
    check_constant("TA_EXP_C4", TA_EXP_C4, 0x3d2aaaabu, 1.0 / 24.0);
    check_constant("TA_EXP_C3", TA_EXP_C3, 0x3e2aaaabu, 1.0 / 6.0);
    check_constant("TA_LOG_TWO23", TA_LOG_TWO23, 0x4b000000u, 8388608.0);
    check_constant("TA_LOG_C13", TA_LOG_C13, 0x3e1d89d9u, 2.0 / 13.0);
    check_constant("TA_LOG_C11", TA_LOG_C11, 0x3e3a2e8cu, 2.0 / 11.0);
    check_constant("TA_LOG_C9", TA_LOG_C9, 0x3e638e39u, 2.0 / 9.0);
    check_constant("TA_LOG_C7", TA_LOG_C7, 0x3e924925u, 2.0 / 7.0);
    check_constant("TA_LOG_C5", TA_LOG_C5, 0x3ecccccdu, 2.0 / 5.0);
    check_constant("TA_LOG_C3", TA_LOG_C3, 0x3f2aaaabu, 2.0 / 3.0);
    /* LN2_HI has 15 significant bits, so n*LN2_HI is exact for |n| <= 2^8 */
    TA_CHECK((f2u(TA_LN2_HI) & 0x1ffu) == 0, "TA_LN2_HI has more than 15 significant bits");
    /* the thresholds bracket the points where e^x crosses the float range */
    TA_CHECK(exp((double)TA_EXP_HI) < 0x1p128 * (1.0 - 0x1p-25) &&
                 exp((double)u2f(0x42b17218u)) > 0x1p128 * (1.0 - 0x1p-25),
             "TA_EXP_HI is not the last x before overflow");
    TA_CHECK(exp((double)TA_EXP_LO) > 0x1p-150 && exp((double)u2f(0xc2cff1b5u)) < 0x1p-150,
             "TA_EXP_LO is not the first x whose e^x rounds to nonzero");
    TA_CHECK(TA_LOG_SQRTHALF_BITS == 0x3f3504f3u && (double)u2f(TA_LOG_SQRTHALF_BITS) < sqrt(0.5) &&
                 (double)u2f(TA_LOG_SQRTHALF_BITS + 1u) > sqrt(0.5),
             "TA_LOG_SQRTHALF_BITS is not the float just below sqrt(1/2)");
}

/* ------------------------------------------------------------------------- */
/* 2. widening, all 2^16 inputs                                               */
/* ------------------------------------------------------------------------- */

/* A 16-bit float with `ebits` exponent bits and `mbits` mantissa bits, decoded
 * in double (exact); NaN and inf give the f32 bit pattern by the policy. */
static uint32_t decode16_bits(uint16_t h, int ebits, int mbits) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t e = ((uint32_t)h >> mbits) & ((1u << ebits) - 1u);
    const uint32_t m = (uint32_t)h & ((1u << mbits) - 1u);
    double v;
    if (e == (1u << ebits) - 1u) /* inf, or NaN: payload to the top of the f32 mantissa, quieted */
        return sign | 0x7f800000u | (m << (23 - mbits)) | (m ? 0x00400000u : 0u);
    if (e == 0)
        v = ldexp((double)m, 1 - bias - mbits);
    else
        v = ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
    return sign | f2u((float)v); /* exact: every 16-bit value is a float */
}

static void test_widen_all(void) {
    uint32_t i;
    int bad_f16 = 0, bad_bf16 = 0;
    for (i = 0; i < 65536u; ++i) {
        const uint16_t h = (uint16_t)i;
        const uint32_t got16 = f2u(ta_f16_to_f32(h)), want16 = decode16_bits(h, 5, 10);
        const uint32_t gotb = f2u(ta_bf16_to_f32(h)), wantb = decode16_bits(h, 8, 7);
        if (got16 != want16 && bad_f16++ < 5)
            TA_CHECK(0, "f16 0x%04x -> 0x%08x, want 0x%08x", i, got16, want16);
        if (gotb != wantb && bad_bf16++ < 5)
            TA_CHECK(0, "bf16 0x%04x -> 0x%08x, want 0x%08x", i, gotb, wantb);
#if HAVE_NATIVE_F16
        {
            native_f16 nh;
            memcpy(&nh, &h, sizeof nh);
            const uint32_t native = f2u((float)nh);
            if (!is_nan_u32(want16))
                TA_CHECK(got16 == native, "f16 0x%04x: _Float16 gives 0x%08x", i, native);
            else /* NaN: same sign, and quiet */
                TA_CHECK(is_nan_u32(native) && (native >> 31) == (got16 >> 31) &&
                             (native & 0x00400000u),
                         "f16 NaN 0x%04x: _Float16 gives 0x%08x", i, native);
        }
#endif
        /* round trip: narrowing a widened value gives it back (NaN: quieted) */
        if (!is_nan_u32(want16))
            TA_CHECK(ta_f32_to_f16(ta_f16_to_f32(h)) == h, "f16 0x%04x does not round-trip", i);
        else
            TA_CHECK(ta_f32_to_f16(ta_f16_to_f32(h)) == (h | 0x0200u),
                     "f16 NaN 0x%04x round-trips to 0x%04x", i, ta_f32_to_f16(ta_f16_to_f32(h)));
        if (!is_nan_u32(wantb))
            TA_CHECK(ta_f32_to_bf16(ta_bf16_to_f32(h)) == h, "bf16 0x%04x does not round-trip", i);
        else
            TA_CHECK(ta_f32_to_bf16(ta_bf16_to_f32(h)) == (h | 0x0040u),
                     "bf16 NaN 0x%04x round-trips to 0x%04x", i, ta_f32_to_bf16(ta_bf16_to_f32(h)));
    }
    printf("  widening: 65536 f16 and 65536 bf16 inputs checked\n");
}

/* ------------------------------------------------------------------------- */
/* 3. narrowing against a nearest-even search in double                       */
/* ------------------------------------------------------------------------- */

/* Sorted values of the non-negative finite patterns 0 .. max_finite of one
 * 16-bit format, plus the first pattern past them (inf) standing for the next
 * power of two: IEEE rounds to inf exactly where it would round to that. */
typedef struct format16 {
    const char *name;
    int ebits, mbits;
    uint16_t inf; /* positive infinity pattern */
    double values[0x7f81];
} format16;

static void format16_init(format16 *f, const char *name, int ebits, int mbits) {
    uint32_t p;
    f->name = name;
    f->ebits = ebits;
    f->mbits = mbits;
    f->inf = (uint16_t)(((1u << ebits) - 1u) << mbits);
    for (p = 0; p < f->inf; ++p)
        f->values[p] = (double)u2f(decode16_bits((uint16_t)p, ebits, mbits));
    /* inf stands for 2^(emax+1) */
    f->values[f->inf] = ldexp(1.0, 1 << (ebits - 1));
}

/* Nearest-even rounding of x to the format by binary search over its values. */
static uint16_t round_by_search(const format16 *f, float x) {
    const uint32_t u = f2u(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const double a = fabs((double)x);
    uint32_t lo = 0, hi = f->inf, pick;
    if (is_nan_u32(u)) return 0xffffu; /* caller checks NaNs separately */
    if (a >= f->values[f->inf]) return (uint16_t)(sign | f->inf);
    while (hi - lo > 1) { /* invariant: values[lo] <= a < values[hi] */
        const uint32_t mid = lo + (hi - lo) / 2;
        if (f->values[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    if (a - f->values[lo] < f->values[hi] - a)
        pick = lo;
    else if (a - f->values[lo] > f->values[hi] - a)
        pick = hi;
    else
        pick = (lo & 1u) ? hi : lo; /* tie: even pattern */
    return (uint16_t)(sign | pick);
}

typedef struct narrow_stats {
    uint64_t checked, bad;
} narrow_stats;

static uint16_t narrow(const format16 *f, float x) {
    return f->mbits == 10 ? ta_f32_to_f16(x) : ta_f32_to_bf16(x);
}

static void check_narrow(const format16 *f, float x, narrow_stats *st) {
    const uint32_t u = f2u(x);
    const uint16_t got = narrow(f, x);
    st->checked++;
    if (is_nan_u32(u)) {
        /* quiet NaN, same sign, top payload bits kept */
        const uint16_t qbit = (uint16_t)(1u << (f->mbits - 1));
        const uint16_t want = (uint16_t)(((u >> 16) & 0x8000u) | f->inf | qbit |
                                         ((u & 0x7fffffu) >> (23 - f->mbits)));
        if (got != want && st->bad++ < 5)
            TA_CHECK(0, "%s(NaN 0x%08x) = 0x%04x, want 0x%04x", f->name, u, got, want);
        return;
    }
    {
        const uint16_t want = round_by_search(f, x);
        if (got != want && st->bad++ < 5)
            TA_CHECK(0, "%s(%.9g = 0x%08x) = 0x%04x, want 0x%04x", f->name, (double)x, u, got,
                     want);
    }
#if HAVE_NATIVE_F16
    if (f->mbits == 10) {
        const native_f16 nh = (native_f16)x;
        uint16_t nb;
        memcpy(&nb, &nh, sizeof nb);
        if (got != nb && st->bad++ < 5)
            TA_CHECK(0, "f16(%.9g = 0x%08x) = 0x%04x, _Float16 gives 0x%04x", (double)x, u, got,
                     nb);
    }
#endif
}

/* x and its f32 neighbours at distance 1 and 2 ulp on both sides */
static void check_around(const format16 *f, float x, narrow_stats *st) {
    const uint32_t u = f2u(x);
    int d;
    for (d = -2; d <= 2; ++d) {
        const uint32_t v = u + (uint32_t)d;
        if ((v & 0x7fffffffu) > 0x7f800000u || (v ^ u) >> 31) continue; /* stay finite, same sign */
        check_narrow(f, u2f(v), st);
    }
}

static void test_narrow_format(const format16 *f, ta_rng *rng) {
    narrow_stats st = {0, 0};
    uint32_t p, i;
    const uint32_t n_random = quick ? 100000u : 1500000u;
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u,
        0x80000001u, 0x007fffffu, 0x00800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
        0x7fbfffffu, 0x7fffffffu, 0xffffffffu, 0x7fc00001u, 0x7f802000u, 0x7fa00000u, 0xff812345u,
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u, /* f16 65504..65536 */
        0x33000000u, 0x33000001u, 0x32ffffffu, 0x33800000u, 0x33c00000u, /* f16 2^-25, 2^-24 */
        0x387fc000u, 0x387fe000u, 0x387fffffu, 0x38800000u,              /* f16 normal boundary */
        0x7f7f8000u, 0x7f7f7fffu, 0x7f7f8001u,                           /* bf16 overflow edge */
    };
    /* specials */
    for (i = 0; i < sizeof specials / sizeof specials[0]; ++i)
        check_around(f, u2f(specials[i]), &st);
    /* every value of the format, its neighbours, and each midpoint +- 1 and 2 ulp */
    for (p = 0; p < f->inf; ++p) {
        const double v = f->values[p], mid = 0.5 * (f->values[p] + f->values[p + 1]);
        check_around(f, (float)v, &st);
        check_around(f, -(float)v, &st);
        check_around(f, (float)mid, &st); /* exact: midpoints have one more bit */
        check_around(f, -(float)mid, &st);
    }
    /* random bit patterns (all exponents, NaNs too) */
    for (i = 0; i < n_random; ++i)
        check_narrow(f, u2f((uint32_t)ta_rng_u64(rng)), &st);
    /* random values inside the format's finite range */
    for (i = 0; i < n_random / 3; ++i) {
        const int e = ta_rng_int(rng, -f->mbits - (1 << (f->ebits - 1)) - 1, 1 << (f->ebits - 1));
        const float m = ta_rng_uniform(rng, 1.0f, 2.0f);
        const float x = (float)ldexp((double)m, e);
        check_narrow(f, (i & 1u) ? -x : x, &st);
    }
    printf("  %s: %llu inputs checked%s, %llu wrong\n", f->name, (unsigned long long)st.checked,
           HAVE_NATIVE_F16 && f->mbits == 10 ? " (also against _Float16)" : "",
           (unsigned long long)st.bad);
}

static void test_narrow(ta_rng *rng) {
    format16 *f = (format16 *)malloc(sizeof *f);
    TA_CHECK(f != NULL, "out of memory");
    if (!f) return;
    format16_init(f, "f32->f16", 5, 10);
    TA_CHECK(f->values[0x7bff] == 65504.0, "f16 table: max %g", f->values[0x7bff]);
    test_narrow_format(f, rng);
    format16_init(f, "f32->bf16", 8, 7);
    TA_CHECK(f->values[0x7f7f] == (double)u2f(0x7f7f0000u), "bf16 table: max %g",
             f->values[0x7f7f]);
    test_narrow_format(f, rng);
    free(f);
    /* a few fixed cases, written out */
    TA_CHECK(ta_f32_to_f16(65519.996f) == 0x7bffu, "65519.996 -> f16 max");
    TA_CHECK(ta_f32_to_f16(65520.0f) == 0x7c00u, "65520 -> f16 inf");
    TA_CHECK(ta_f32_to_f16(-65520.0f) == 0xfc00u, "-65520 -> f16 -inf");
    TA_CHECK(ta_f32_to_f16(-0.0f) == 0x8000u, "-0 -> f16 -0");
    TA_CHECK(ta_f32_to_f16(0x1p-25f) == 0x0000u, "2^-25 -> f16 +0 (tie to even)");
    TA_CHECK(ta_f32_to_f16(u2f(0x33000001u)) == 0x0001u, "2^-25 (1+2^-23) -> f16 2^-24");
    TA_CHECK(ta_f32_to_f16(0x1.8p-24f) == 0x0002u, "1.5 * 2^-24 -> f16 2 * 2^-24 (tie to even)");
    TA_CHECK(ta_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00u, "1 + 2^-11 -> 1 (tie to even)");
    TA_CHECK(ta_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02u, "1 + 3*2^-11 -> 1 + 2^-9 (tie to even)");
    TA_CHECK(ta_f32_to_bf16(u2f(0x3f808000u)) == 0x3f80u, "bf16 tie to even (down)");
    TA_CHECK(ta_f32_to_bf16(u2f(0x3f818000u)) == 0x3f82u, "bf16 tie to even (up)");
    TA_CHECK(ta_f32_to_bf16(u2f(0x7f7fffffu)) == 0x7f80u, "FLT_MAX -> bf16 inf");
    TA_CHECK(ta_f32_to_bf16(u2f(0xff800000u)) == 0xff80u, "-inf -> bf16 -inf");
    TA_CHECK(ta_f32_to_bf16(u2f(0x7f800001u)) == 0x7fc0u, "sNaN -> bf16 quiet NaN");
    TA_CHECK(ta_f32_to_bf16(u2f(0xff810000u)) == 0xffc1u, "-sNaN -> bf16 -qNaN, payload kept");
    TA_CHECK(ta_f32_to_f16(u2f(0xff802000u)) == 0xfe01u, "-sNaN -> f16 -qNaN, payload kept");
}

/* ------------------------------------------------------------------------- */
/* 4. exp / log special values                                                */
/* ------------------------------------------------------------------------- */

static void check_bits(const char *what, uint32_t x, float got, uint32_t want) {
    TA_CHECK(f2u(got) == want, "%s(0x%08x = %.9g) = 0x%08x, want 0x%08x", what, x, (double)u2f(x),
             f2u(got), want);
}
#define CHECK_EXP(xbits, want) check_bits("ta_exp", (xbits), ta_exp(u2f(xbits)), (want))
#define CHECK_LOG(xbits, want) check_bits("ta_log", (xbits), ta_log(u2f(xbits)), (want))

static void test_specials(void) {
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                    0x7fbfffffu, 0x7fffffffu, 0xffc12345u, 0x7fa5a5a5u};
    size_t i;
    for (i = 0; i < sizeof nans / sizeof nans[0]; ++i) { /* NaN: same NaN, quieted */
        CHECK_EXP(nans[i], nans[i] | 0x00400000u);
        CHECK_LOG(nans[i], nans[i] | 0x00400000u);
    }
    CHECK_EXP(0x00000000u, 0x3f800000u); /* exp(+0) = 1 */
    CHECK_EXP(0x80000000u, 0x3f800000u); /* exp(-0) = 1 */
    CHECK_EXP(0x00000001u, 0x3f800000u); /* exp(tiny) = 1 */
    CHECK_EXP(0x80000001u, 0x3f800000u);
    CHECK_EXP(0x7f800000u, 0x7f800000u); /* exp(+inf) = +inf */
    CHECK_EXP(0xff800000u, 0x00000000u); /* exp(-inf) = +0 */
    CHECK_EXP(0x7f7fffffu, 0x7f800000u);
    CHECK_EXP(0xff7fffffu, 0x00000000u);
    CHECK_EXP(0x42b17218u, 0x7f800000u); /* first overflowing input */
    TA_CHECK(f2u(ta_exp(TA_EXP_HI)) < 0x7f800000u, "ta_exp(TA_EXP_HI) overflows");
    TA_CHECK(ta_exp(TA_EXP_HI) > 3.4e38f, "ta_exp(TA_EXP_HI) too small");
    CHECK_EXP(0xc2cff1b4u, 0x00000001u); /* TA_EXP_LO -> 2^-149 */
    CHECK_EXP(0xc2cff1b5u, 0x00000000u); /* just below -> +0 */
    CHECK_EXP(0x3f800000u, 0x402df854u); /* exp(1) = e, correctly rounded */

    CHECK_LOG(0x00000000u, 0xff800000u); /* log(+0) = -inf */
    CHECK_LOG(0x80000000u, 0xff800000u); /* log(-0) = -inf */
    CHECK_LOG(0x3f800000u, 0x00000000u); /* log(1) = +0 exactly */
    CHECK_LOG(0x7f800000u, 0x7f800000u); /* log(+inf) = +inf */
    CHECK_LOG(0xff800000u, 0x7fc00000u); /* log(-inf) = NaN */
    CHECK_LOG(0xbf800000u, 0x7fc00000u); /* log(-1) = NaN */
    CHECK_LOG(0x80000001u, 0x7fc00000u); /* log(-tiny) = NaN */
    CHECK_LOG(0xff7fffffu, 0x7fc00000u);
    CHECK_LOG(0x40000000u, 0x3f317218u); /* log(2) = ln2, correctly rounded */
    /* finite everywhere on (0, inf): min subnormal and max float */
    TA_CHECK(fabs((double)ta_log(u2f(0x00000001u)) - log(0x1p-149)) < 1e-5, "log(2^-149)");
    TA_CHECK(fabs((double)ta_log(u2f(0x7f7fffffu)) - log((double)FLT_MAX)) < 1e-5, "log(FLT_MAX)");
}

/* ------------------------------------------------------------------------- */
/* 5. sampled accuracy                                                        */
/* ------------------------------------------------------------------------- */

typedef struct acc_stats {
    uint64_t checked;
    double max_ulp, max_sub; /* normal outputs in ulp; subnormal outputs in 2^-149 */
    uint32_t max_ulp_x, max_sub_x;
} acc_stats;

/* y = ta result for input bits ux, ref = double result (finite, nonzero or
 * exactly representable). */
static void account(acc_stats *s, uint32_t ux, float y, double ref) {
    const double aref = fabs(ref);
    s->checked++;
    if (!isfinite(y) || !isfinite((float)ref)) {
        TA_CHECK(f2u(y) == f2u((float)ref), "x = 0x%08x: got 0x%08x, rounded double 0x%08x", ux,
                 f2u(y), f2u((float)ref));
        return;
    }
    if (aref < 0x1p-126) {
        const double err = fabs((double)y - ref) * 0x1p149;
        if (err > s->max_sub) {
            s->max_sub = err;
            s->max_sub_x = ux;
        }
    } else {
        int k;
        double err;
        (void)frexp(aref, &k);
        err = ldexp(fabs((double)y - ref), 24 - k);
        if (err > s->max_ulp) {
            s->max_ulp = err;
            s->max_ulp_x = ux;
        }
    }
}

static void report_acc(const char *name, const acc_stats *s) {
    printf("  %s: %llu samples, max %.4f ulp (x = 0x%08x), max %.4f * 2^-149 on subnormal "
           "outputs (x = 0x%08x)\n",
           name, (unsigned long long)s->checked, s->max_ulp, s->max_ulp_x, s->max_sub,
           s->max_sub_x);
    TA_CHECK(s->max_ulp <= 2.0, "%s: %.4f ulp > 2", name, s->max_ulp);
    TA_CHECK(s->max_sub <= 1.0, "%s: %.4f * 2^-149 > 1 on a subnormal output", name, s->max_sub);
}

static void test_accuracy(ta_rng *rng) {
    acc_stats se, sl;
    uint32_t i;
    const uint32_t n = quick ? 125000u : 2000000u;
    memset(&se, 0, sizeof se);
    memset(&sl, 0, sizeof sl);
    for (i = 0; i < n; ++i) {
        /* exp: uniform over [-105, 90] (the whole finite-output domain and a bit
         * past it), and uniform over the bits of [-1, 1] */
        const float xe = (i & 1u) ? ta_rng_uniform(rng, -105.0f, 90.0f)
                                  : u2f((uint32_t)(ta_rng_u64(rng) & 0xbf7fffffu));
        /* log: uniform over the bits of (0, inf), and uniform near 1 */
        const float xl = (i & 1u) ? u2f(1u + (uint32_t)(ta_rng_u64(rng) % 0x7f7fffffu))
                                  : ta_rng_uniform(rng, 0.5f, 2.0f);
        if (xe != 0.0f) account(&se, f2u(xe), ta_exp(xe), exp((double)xe));
        if (xl != 1.0f) account(&sl, f2u(xl), ta_log(xl), log((double)xl));
    }
    report_acc("ta_exp", &se);
    report_acc("ta_log", &sl);
    /* near-1 inputs of log, where the result is smallest: every float in
     * [1 - 2^-10, 1 + 2^-9] (about 2^14 + 2^14 values) */
    memset(&sl, 0, sizeof sl);
    for (i = f2u(1.0f - 0x1p-10f); i <= f2u(1.0f + 0x1p-9f); ++i)
        if (i != 0x3f800000u) account(&sl, i, ta_log(u2f(i)), log((double)u2f(i)));
    report_acc("ta_log near 1", &sl);
}

/* ------------------------------------------------------------------------- */
/* 6. the exact bits of exp/log, pinned                                       */
/* ------------------------------------------------------------------------- */

/* FNV-1a 64 over the result bits of ta_exp and ta_log on every input bit pattern
 * u = i * stride (i = 0, 1, ...; all signs, exponents, NaNs and infinities, and
 * mantissas of every residue), in that order. The 2-ulp gate and the special
 * values would let a changed last bit through; these hashes would not. The
 * vector and CUDA versions equal the scalar ones on all 2^32 inputs
 * (test_math_exhaustive --vector, test_cuda_math), so this pins them too.
 * A change here is a change of the library's bits: regenerate with the printed
 * values and say why in the commit (docs/exactness.md). */
#define PIN_STRIDE_FULL  251u  /* 17,111,424 inputs */
#define PIN_STRIDE_QUICK 4093u /* 1,049,345 inputs (--quick: valgrind, sanitizers) */
#define PIN_EXP_FULL     UINT64_C(0xa72e6879938af6ca)
#define PIN_LOG_FULL     UINT64_C(0x40e04b13fc038294)
#define PIN_EXP_QUICK    UINT64_C(0xc8b0ff00e2aeb5fa)
#define PIN_LOG_QUICK    UINT64_C(0xe911e892ceb57d96)

static uint64_t fnv1a_u32(uint64_t h, uint32_t v) {
    int b;
    for (b = 0; b < 4; ++b)
        h = (h ^ ((v >> (8 * b)) & 0xffu)) * UINT64_C(0x100000001b3);
    return h;
}

static void test_pinned_bits(void) {
    const uint32_t stride = quick ? PIN_STRIDE_QUICK : PIN_STRIDE_FULL;
    const uint64_t want_exp = quick ? PIN_EXP_QUICK : PIN_EXP_FULL;
    const uint64_t want_log = quick ? PIN_LOG_QUICK : PIN_LOG_FULL;
    uint64_t h_exp = UINT64_C(0xcbf29ce484222325), h_log = h_exp, n = 0, u;
    for (u = 0; u <= UINT32_MAX; u += stride, ++n) {
        h_exp = fnv1a_u32(h_exp, f2u(ta_exp(u2f((uint32_t)u))));
        h_log = fnv1a_u32(h_log, f2u(ta_log(u2f((uint32_t)u))));
    }
    printf("  %llu inputs (stride %u): exp %016llx, log %016llx\n", (unsigned long long)n, stride,
           (unsigned long long)h_exp, (unsigned long long)h_log);
    TA_CHECK(h_exp == want_exp, "ta_exp bits changed: hash %016llx, pinned %016llx",
             (unsigned long long)h_exp, (unsigned long long)want_exp);
    TA_CHECK(h_log == want_log, "ta_log bits changed: hash %016llx, pinned %016llx",
             (unsigned long long)h_log, (unsigned long long)want_log);
}

int main(int argc, char **argv) {
    ta_rng rng;
    int i;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    ta_rng_seed(&rng, ta_test_seed("test_math"));
    printf("1. constants\n");
    test_constants();
    printf("2. widening f16/bf16 -> f32\n");
    test_widen_all();
    printf("3. narrowing f32 -> f16/bf16 (nearest even)\n");
    test_narrow(&rng);
    printf("4. exp/log special values\n");
    test_specials();
    printf("5. exp/log sampled accuracy\n");
    test_accuracy(&rng);
    printf("6. exp/log bits pinned by hash\n");
    test_pinned_bits();
    return ta_test_finish("test_math");
}
