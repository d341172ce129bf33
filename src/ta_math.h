/*
 * Shared scalar math: the library's own exp and log, and the storage-dtype
 * conversions. One source, compiled for the host (C11) and the device (CUDA):
 * every backend that needs these calls exactly these operation sequences, so
 * results are bit-identical (docs/design.md section 3, docs/exactness.md).
 *
 * Rules for this file: only IEEE-754 single operations with a correctly rounded
 * result (+, -, *, /, fmaf, exact int <-> float conversions), comparisons and
 * integer bit manipulation. No libm transcendental, no contraction (the build
 * passes -ffp-contract=off and -fmad=false), no reliance on flush-to-zero, and
 * no floating-point operation whose result could be a NaN: NaN inputs are
 * handled with integer bit operations, because the payload of a NaN produced by
 * arithmetic differs between x86 (operand payload) and NVIDIA GPUs (canonical
 * 0x7fffffff). Vector versions (AVX2, AVX-512) must follow the same sequence
 * lane by lane: compute on every lane, then select the special-case results.
 *
 * Every float constant below is written as its exact decimal value, with its
 * bit pattern in the comment; test_math.c checks each pattern.
 */
#ifndef TA_MATH_H
#define TA_MATH_H

#include <float.h>
#include <stdint.h>
#include <string.h>

/* float expressions must be evaluated in float (no x87 excess precision). */
#if defined(FLT_EVAL_METHOD) && (FLT_EVAL_METHOD == 1 || FLT_EVAL_METHOD == 2)
#error "tileattn needs FLT_EVAL_METHOD == 0 (on 32-bit x86 build with -msse2 -mfpmath=sse)"
#endif

#if !defined(__CUDACC__)
#include <math.h> /* fmaf only: correctly rounded by C11 (7.12.13.1) */
#endif
/* A test may predefine TA_MATH_FN (e.g. to force inlining into a function
 * compiled for another ISA level); the operation sequence does not change. */
#ifndef TA_MATH_FN
#if defined(__CUDACC__)
#define TA_MATH_FN static inline __host__ __device__
#else
#define TA_MATH_FN static inline
#endif
#endif
/* Host: libm fmaf (or the FMA instruction when the compiler may use it);
 * device: fma.rn.f32. All are the correctly rounded a*b+c. */
#define TA_FMAF(a, b, c) fmaf((a), (b), (c))

#ifdef __cplusplus
extern "C" {
#endif

TA_MATH_FN uint32_t ta_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
TA_MATH_FN float ta_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#define TA_F32_INF_BITS         0x7f800000u
#define TA_F32_QNAN_BIT         0x00400000u
#define TA_F32_DEFAULT_NAN_BITS 0x7fc00000u /* what ta_log returns for x < 0 */

/* Nonzero iff x is a NaN (integer test: no floating-point compare needed). */
TA_MATH_FN int ta_isnan_bits(uint32_t u) { return (u & 0x7fffffffu) > TA_F32_INF_BITS; }

/* The online softmax's row max, in which a NaN wins and stays
 * (docs/exactness.md section 8): a if a is a NaN or a > b, else b. From
 * m = -inf, m = ta_max_nan(s, m) over a row's scores gives their maximum, or a
 * NaN as soon as one score is a NaN, and keeps it whatever follows. Which NaN
 * (payload) is not specified. For two non-NaN operands this is the plain
 * a > b ? a : b (equal values, +0 and -0 included, give b). Vector versions:
 * select a where a != a, else the a > b ? a : b maximum (maxps(a, b)). */
TA_MATH_FN float ta_max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

/* ------------------------------------------------------------------------- */
/* exp                                                                        */
/* ------------------------------------------------------------------------- */

/* Domain limits, exact float values: TA_EXP_HI (0x42b17217) is the largest x
 * with finite e^x; TA_EXP_LO (0xc2cff1b4) is the smallest x whose e^x rounds to
 * a nonzero float (2^-149). Below it e^x < 2^-150, which rounds to +0. */
#define TA_EXP_HI 88.72283172607421875f
#define TA_EXP_LO -103.972076416015625f
/* Constants of the exp algorithm. */
#define TA_EXP_LOG2E   1.44269502162933349609375f /* 0x3fb8aa3b, log2(e) rounded */
#define TA_EXP_SHIFTER 12582912.0f                /* 0x4b400000, 1.5 * 2^23 */
#define TA_LN2_HI      0.693145751953125f         /* 0x3f317200, ln2 to 15 significant bits */
#define TA_LN2_LO      1.428606765330187045037746429443359375e-06f /* 0x35bfbe8e, ln2 - LN2_HI */
#define TA_EXP_C7      1.98412701138295233249664306640625e-04f     /* 0x39500d01, 1/5040 */
#define TA_EXP_C6      1.388888922519981861114501953125e-03f       /* 0x3ab60b61, 1/720 */
#define TA_EXP_C5      8.333333767950534820556640625e-03f          /* 0x3c088889, 1/120 */
#define TA_EXP_C4      4.16666679084300994873046875e-02f           /* 0x3d2aaaab, 1/24 */
#define TA_EXP_C3      1.6666667163372039794921875e-01f            /* 0x3e2aaaab, 1/6 */

/*
 * ta_exp(x) = 2^n * p(r):
 *   1. n = nearest integer to x*log2e (the 1.5*2^23 shifter rounds to integer,
 *      ties to even); |n| <= 150.
 *   2. r = x - n*ln2 (Cody-Waite: n*LN2_HI is exact and the first fmaf is exact,
 *      the second rounds once); |r| <= ~0.3466.
 *   3. p = degree-7 Taylor polynomial of e^r, Horner with fmaf (truncation
 *      error < 7e-9 relative, about 0.1 ulp).
 *   4. scale by 2^n = 2^n1 * 2^n2 with n1 = n/2 (C division), n2 = n - n1; both
 *      factors are normal powers of two, p*2^n1 is exact, so the result rounds
 *      once even when it is subnormal or near overflow. (Any split that keeps
 *      both factors normal gives the same bits.)
 * Specials: NaN -> the same NaN, quieted (sign and payload kept); x > TA_EXP_HI
 * (including +inf) -> +inf; x < TA_EXP_LO (including -inf) -> +0; exp(0) = 1.
 */
/* ta_exp_main: steps 1-4 above, for TA_EXP_LO <= x <= TA_EXP_HI only (the
 * float-to-int conversion of step 1 is out of range elsewhere). ta_exp is the
 * special cases, then this; a branch-free version may run it on x clamped
 * into the domain and select the special results afterwards (docs/
 * exactness.md section 8). */
TA_MATH_FN float ta_exp_main(float x) {
    float t, n, r, p;
    int32_t ni, n1, n2;
    /* step 1: n = round(x * log2e) */
    t = x * TA_EXP_LOG2E + TA_EXP_SHIFTER;
    n = t - TA_EXP_SHIFTER;
    ni = (int32_t)n;
    /* step 2: r = x - n ln2 */
    r = TA_FMAF(-n, TA_LN2_HI, x);
    r = TA_FMAF(-n, TA_LN2_LO, r);
    /* step 3: p = e^r */
    p = TA_EXP_C7;
    p = TA_FMAF(p, r, TA_EXP_C6);
    p = TA_FMAF(p, r, TA_EXP_C5);
    p = TA_FMAF(p, r, TA_EXP_C4);
    p = TA_FMAF(p, r, TA_EXP_C3);
    p = TA_FMAF(p, r, 0.5f);
    p = TA_FMAF(p, r, 1.0f);
    p = TA_FMAF(p, r, 1.0f);
    /* step 4: p * 2^n1 * 2^n2 */
    n1 = ni / 2;
    n2 = ni - n1;
    p = p * ta_f32_from_bits((uint32_t)(n1 + 127) << 23);
    return p * ta_f32_from_bits((uint32_t)(n2 + 127) << 23);
}

TA_MATH_FN float ta_exp(float x) {
    const uint32_t ux = ta_f32_bits(x);
    if (ta_isnan_bits(ux)) return ta_f32_from_bits(ux | TA_F32_QNAN_BIT);
    if (x > TA_EXP_HI) return ta_f32_from_bits(TA_F32_INF_BITS);
    if (x < TA_EXP_LO) return 0.0f;
    return ta_exp_main(x);
}

/* ------------------------------------------------------------------------- */
/* log                                                                        */
/* ------------------------------------------------------------------------- */

#define TA_LOG_SQRTHALF_BITS 0x3f3504f3u /* the float just below sqrt(1/2) */
#define TA_LOG_TWO23         8388608.0f  /* 0x4b000000, 2^23: subnormal input scale */
#define TA_LOG_C13           1.5384615957736968994140625e-01f /* 0x3e1d89d9, 2/13 */
#define TA_LOG_C11           1.81818187236785888671875e-01f   /* 0x3e3a2e8c, 2/11 */
#define TA_LOG_C9            2.2222222387790679931640625e-01f /* 0x3e638e39, 2/9 */
#define TA_LOG_C7            2.857142984867095947265625e-01f  /* 0x3e924925, 2/7 */
#define TA_LOG_C5            4.000000059604644775390625e-01f  /* 0x3ecccccd, 2/5 */
#define TA_LOG_C3            6.66666686534881591796875e-01f   /* 0x3f2aaaab, 2/3 */

/*
 * ta_log(x) = e*ln2 + log1p(f):
 *   1. x = 2^e * m with m in [0x3f3504f3, 0x3fb504f3), about [sqrt(1/2),
 *      sqrt(2)), by integer arithmetic on the bits (a subnormal x is first
 *      scaled by 2^23, exactly); f = m - 1 is exact.
 *   2. s = f/(2+f), z = s^2; log1p(f) = 2 atanh(s) = 2s + s*R(z) with
 *      R(z) = z*(2/3 + 2/5 z + ... + 2/13 z^5) (Taylor; |s| < 0.1716, so the
 *      first omitted term is below 1e-12 relative).
 *   3. Since 2s = f - s*f, log1p(f) = f - hfsq + s*(hfsq + R) with
 *      hfsq = f*f/2: the leading term f enters exactly, last. e*ln2 is added
 *      as e*LN2_HI (exact) + e*LN2_LO.
 * Specials: NaN -> the same NaN, quieted; x < 0 (including -inf) -> NaN
 * 0x7fc00000; +-0 -> -inf; +inf -> +inf; log(1) = +0.
 */
TA_MATH_FN float ta_log(float x) {
    uint32_t ix = ta_f32_bits(x);
    int32_t e = 0;
    float f, s, z, w, r, hfsq, ef;
    if (ta_isnan_bits(ix)) return ta_f32_from_bits(ix | TA_F32_QNAN_BIT);
    if ((ix & 0x7fffffffu) == 0) return ta_f32_from_bits(0x80000000u | TA_F32_INF_BITS);
    if (ix >> 31) return ta_f32_from_bits(TA_F32_DEFAULT_NAN_BITS);
    if (ix == TA_F32_INF_BITS) return x;
    if (ix < 0x00800000u) { /* subnormal: scale by 2^23, exact */
        ix = ta_f32_bits(x * TA_LOG_TWO23);
        e = -23;
    }
    /* step 1: exponent e and mantissa m, m in [0x3f3504f3, 0x3fb504f3) */
    ix += 0x3f800000u - TA_LOG_SQRTHALF_BITS;
    e += (int32_t)(ix >> 23) - 127;
    ix = (ix & 0x007fffffu) + TA_LOG_SQRTHALF_BITS;
    f = ta_f32_from_bits(ix) - 1.0f; /* exact (Sterbenz) */
    /* step 2: s = f / (2 + f), R = z * (2/3 + 2/5 z + ... + 2/13 z^5) */
    s = f / (2.0f + f);
    z = s * s;
    w = TA_LOG_C13;
    w = TA_FMAF(w, z, TA_LOG_C11);
    w = TA_FMAF(w, z, TA_LOG_C9);
    w = TA_FMAF(w, z, TA_LOG_C7);
    w = TA_FMAF(w, z, TA_LOG_C5);
    w = TA_FMAF(w, z, TA_LOG_C3);
    r = w * z;
    /* step 3: e*LN2_HI + (((s*(hfsq + R) + e*LN2_LO) - hfsq) + f) */
    hfsq = 0.5f * f * f;
    ef = (float)e;
    return ef * TA_LN2_HI + ((s * (hfsq + r) + ef * TA_LN2_LO) - hfsq + f);
}

/* ------------------------------------------------------------------------- */
/* Storage conversions, integer operations only (no FTZ/DAZ dependence).      */
/* Widening is exact; a NaN keeps its sign and payload and is quieted (as     */
/* IEEE 754 convertFormat and x86 conversions do). Narrowing rounds to        */
/* nearest, ties to even; overflow gives +-inf; a NaN gives a quiet NaN of    */
/* the same sign with the top payload bits.                                    */
/* ------------------------------------------------------------------------- */

TA_MATH_FN float ta_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    return ta_f32_from_bits(ta_isnan_bits(u) ? (u | TA_F32_QNAN_BIT) : u);
}

TA_MATH_FN uint16_t ta_f32_to_bf16(float x) {
    const uint32_t u = ta_f32_bits(x);
    if (ta_isnan_bits(u)) return (uint16_t)((u >> 16) | 0x0040u);
    /* round to nearest even on bit 16; a carry into the exponent is correct
     * (up to +-inf, which maps to itself) */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TA_MATH_FN float ta_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t expo = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (expo == 0x1fu) /* inf, or NaN (quieted) */
        return ta_f32_from_bits(sign | TA_F32_INF_BITS | (mant << 13) |
                                (mant ? TA_F32_QNAN_BIT : 0u));
    if (expo != 0) return ta_f32_from_bits(sign | ((expo + 112u) << 23) | (mant << 13));
    /* zero or subnormal half: mant * 2^-24 (0x33800000), exact and normal in f32 */
    return ta_f32_from_bits(sign | ta_f32_bits((float)mant * 5.9604644775390625e-08f));
}

TA_MATH_FN uint16_t ta_f32_to_f16(float x) {
    const uint32_t u = ta_f32_bits(x);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    uint32_t expo, mant, shift, half, rest, q;
    if (a > TA_F32_INF_BITS) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* |x| >= 65520: +-inf */
    expo = a >> 23;
    if (expo >= 113u) { /* normal half: drop 13 bits, nearest even; carry is correct */
        q = a - (112u << 23);
        q = q + 0x0fffu + ((q >> 13) & 1u);
        return (uint16_t)(sign | (q >> 13));
    }
    if (expo < 102u) return (uint16_t)sign; /* |x| < 2^-25: rounds to +-0 */
    /* subnormal half: |x| = (1.mant) * 2^(expo-127), in units of 2^-24 */
    mant = (a & 0x7fffffu) | 0x800000u;
    shift = 126u - expo; /* in [14, 24] */
    q = mant >> shift;
    rest = mant & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q; /* 0x3ff + 1 = smallest normal */
    return (uint16_t)(sign | q);
}

#ifdef __cplusplus
}
#endif

#endif /* TA_MATH_H */
