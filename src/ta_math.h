/*
 * Shared scalar math: the library's own exp and log, and the storage-dtype
 * conversions. One source, compiled for the host (C11) and the device (CUDA):
 * every backend that needs these calls exactly these operation sequences, so
 * results are bit-identical (DESIGN.md section 3).
 *
 * Rules for this file: only IEEE-754 single operations with a correctly rounded
 * result (+, -, *, /, fmaf), comparisons and integer bit manipulation. No libm
 * transcendental, no contraction (the build passes -ffp-contract=off and
 * -fmad=false), no reliance on flush-to-zero. Vector versions (AVX2, AVX-512)
 * must follow the same sequence lane by lane.
 */
#ifndef TA_MATH_H
#define TA_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TA_MATH_FN static inline __host__ __device__
#define TA_FMAF(a, b, c) fmaf((a), (b), (c))
#else
#include <math.h> /* fmaf only: correctly rounded by C11 (7.12.13.1) */
#define TA_MATH_FN static inline
#define TA_FMAF(a, b, c) fmaf((a), (b), (c))
#endif

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

/* ------------------------------------------------------------------------- */
/* exp                                                                        */
/* ------------------------------------------------------------------------- */

/*
 * ta_exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln2 (Cody-Waite, two
 * fmaf steps), p = degree-7 Taylor polynomial of e^r on |r| <= ln2/2 (truncation
 * < 6e-9 relative, under 0.1 ulp), Horner with fmaf. The scale by 2^n is split
 * in two exact-or-once-rounded multiplies so results in the subnormal range
 * and near overflow round once.
 *   x NaN -> NaN (same payload, quieted), x > TA_EXP_HI -> +inf, x < TA_EXP_LO -> +0,
 *   -inf -> +0, +inf -> +inf.
 */
#define TA_EXP_HI 88.72283935546875f /* largest x with finite e^x, 0x42b17217 */
#define TA_EXP_LO -103.97283935546875f /* e^x < 2^-150 below: rounds to +0 */

TA_MATH_FN float ta_exp(float x) {
    const float log2e = 1.44269502162933349609375f;   /* 0x3fb8aa3b */
    const float ln2_hi = 0.693145751953125f;          /* 0x3f317200, 15 significant bits */
    const float ln2_lo = 1.428606765330187045e-06f;   /* 0x35bfbe8e, ln2 - ln2_hi */
    const float shifter = 12582912.0f;                /* 1.5 * 2^23: rounds to integer */
    float t, n, r, p;
    int32_t ni, n1, n2;
    if (!(x == x)) return x + x;                      /* NaN: quiet, keep payload */
    if (x > TA_EXP_HI) return ta_f32_from_bits(0x7f800000u);
    if (x < TA_EXP_LO) return 0.0f;
    /* step 1: n = nearest integer to x*log2e (ties to even via the shifter) */
    t = x * log2e + shifter;
    n = t - shifter;
    ni = (int32_t)n;
    /* step 2: r = x - n*ln2, |r| <= ~0.3466 */
    r = TA_FMAF(-n, ln2_hi, x);
    r = TA_FMAF(-n, ln2_lo, r);
    /* step 3: p = e^r, Taylor to degree 7 */
    p = 1.98412701138295233249664306640625e-04f;  /* 1/5040 */
    p = TA_FMAF(p, r, 1.38888892251998186111450195312500e-03f); /* 1/720 */
    p = TA_FMAF(p, r, 8.33333376795053482055664062500000e-03f); /* 1/120 */
    p = TA_FMAF(p, r, 4.16666679084300994873046875000000e-02f); /* 1/24 */
    p = TA_FMAF(p, r, 1.66666671633720397949218750000000e-01f); /* 1/6 */
    p = TA_FMAF(p, r, 0.5f);
    p = TA_FMAF(p, r, 1.0f);
    p = TA_FMAF(p, r, 1.0f);
    /* step 4: scale by 2^n = 2^n1 * 2^n2, each factor a normal power of two */
    n1 = ni / 2;
    n2 = ni - n1;
    p = p * ta_f32_from_bits((uint32_t)(n1 + 127) << 23);
    return p * ta_f32_from_bits((uint32_t)(n2 + 127) << 23);
}

/* ------------------------------------------------------------------------- */
/* log                                                                        */
/* ------------------------------------------------------------------------- */

/*
 * ta_log(x) = e ln2 + log1p(f), x = 2^e (1+f), 1+f in [sqrt(1/2), sqrt(2)).
 * log1p(f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f/(2+f), where R is the
 * Taylor series of 2 atanh(s)/s - 2 - ... truncated after s^12 (the classic
 * decomposition that keeps the leading term f exact). ln2 is split hi/lo.
 *   x NaN -> NaN, x < 0 -> NaN, +-0 -> -inf, +inf -> +inf; subnormals scaled by 2^23.
 */
TA_MATH_FN float ta_log(float x) {
    const float ln2_hi = 0.693145751953125f;        /* 0x3f317200 */
    const float ln2_lo = 1.428606765330187045e-06f; /* 0x35bfbe8e */
    uint32_t ix = ta_f32_bits(x);
    int32_t e = 0;
    float f, s, z, w, r, hfsq, ef;
    if (!(x == x)) return x + x;
    if (x == 0.0f) return ta_f32_from_bits(0xff800000u);
    if (ix >> 31) return ta_f32_from_bits(0x7fc00000u);
    if (ix == 0x7f800000u) return x;
    if (ix < 0x00800000u) { /* subnormal: scale by 2^23 exactly */
        x = x * 8388608.0f;
        ix = ta_f32_bits(x);
        e = -23;
    }
    /* step 1: split off the exponent so that the mantissa m lies in [sqrt(1/2), sqrt(2)) */
    ix += 0x3f800000u - 0x3f3504f3u;
    e += (int32_t)(ix >> 23) - 127;
    ix = (ix & 0x007fffffu) + 0x3f3504f3u;
    f = ta_f32_from_bits(ix) - 1.0f; /* exact (Sterbenz) */
    /* step 2: s = f / (2 + f), series in z = s^2 */
    s = f / (2.0f + f);
    z = s * s;
    w = 1.53846156597137451171875e-01f;         /* 2/13 */
    w = TA_FMAF(w, z, 1.81818187236785888671875e-01f); /* 2/11 */
    w = TA_FMAF(w, z, 2.22222223877906799316406e-01f); /* 2/9 */
    w = TA_FMAF(w, z, 2.85714298486709594726562e-01f); /* 2/7 */
    w = TA_FMAF(w, z, 4.00000005960464477539062e-01f); /* 2/5 */
    w = TA_FMAF(w, z, 6.66666686534881591796875e-01f); /* 2/3 */
    r = w * z;
    /* step 3: log1p(f) = f - hfsq + s*(hfsq + R), plus e*ln2 split in two */
    hfsq = 0.5f * f * f;
    ef = (float)e;
    return ef * ln2_hi + ((s * (hfsq + r) + ef * ln2_lo) - hfsq + f);
}

/* ------------------------------------------------------------------------- */
/* Storage conversions: widening is exact; narrowing rounds to nearest even.  */
/* NaN narrows to a quiet NaN of the same sign; overflow rounds to +-inf.     */
/* ------------------------------------------------------------------------- */

TA_MATH_FN float ta_bf16_to_f32(uint16_t h) { return ta_f32_from_bits((uint32_t)h << 16); }

TA_MATH_FN uint16_t ta_f32_to_bf16(float x) {
    const uint32_t u = ta_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TA_MATH_FN float ta_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t expo = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (expo == 0x1fu) return ta_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (expo != 0) return ta_f32_from_bits(sign | ((expo + 112u) << 23) | (mant << 13));
    if (mant == 0) return ta_f32_from_bits(sign);
    {   /* subnormal half: value = mant * 2^-24, exact in f32 */
        int32_t e = -1;
        do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
        return ta_f32_from_bits(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13));
    }
}

TA_MATH_FN uint16_t ta_f32_to_f16(float x) {
    const uint32_t u = ta_f32_bits(x);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    uint32_t expo, mant, shift, half, rest, q;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: rounds to inf */
    expo = a >> 23;
    if (expo >= 113) { /* normal half: drop 13 bits with round-to-nearest-even */
        q = a - (112u << 23);
        q = q + 0x0fffu + ((q >> 13) & 1u);
        return (uint16_t)(sign | (q >> 13));
    }
    if (expo < 102) return (uint16_t)sign; /* < 2^-25: rounds to +-0 */
    /* subnormal half: value = (1.mant) * 2^(expo-127), unit 2^-24 */
    mant = (a & 0x7fffffu) | 0x800000u;
    shift = 126u - expo; /* in [14, 24] */
    q = mant >> shift;
    rest = mant & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
}

#ifdef __cplusplus
}
#endif

#endif /* TA_MATH_H */
