/*
 * Lane-wise AVX2 (+FMA) versions of the shared scalar math (src/ta_math.h):
 * ta_exp, ta_log and the f16/bf16 widening, 8 lanes at a time.
 *
 * Each lane performs exactly the operation sequence of the scalar function
 * (docs/exactness.md section 8): the main path runs on every lane, the special
 * results are selected afterwards in the scalar order of tests; _mm256_fmadd_ps
 * stands exactly where the scalar code calls TA_FMAF (both are the correctly
 * rounded a*b+c), every other multiply and add is separate (the build passes
 * -ffp-contract=off, so nothing is fused behind our back), the division is
 * IEEE (_mm256_div_ps), and exponent arithmetic is integer. So every lane
 * returns the scalar function's bits: test_math_exhaustive --vector checks
 * this on all 2^32 inputs.
 *
 * The functions carry target("avx2,fma") so that a file compiled for the
 * baseline ISA (a test) can call them from a function with the same target;
 * the library's AVX2 translation unit is compiled with -mavx2 -mfma anyway.
 * Callers must check the CPU (AVX2 and FMA) first.
 */
#ifndef TA_CPU_VMATH_AVX2_H
#define TA_CPU_VMATH_AVX2_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TA_HAVE_VMATH_AVX2 1

#include <immintrin.h>
#include <stdint.h>

#include "ta_math.h"

/* exp's easy range, |x| <= 86 (0x42ac0000): no special case, and e^x is a
 * normal float (|n| <= 124) reached by one exact scaling of p. */
#ifndef TA_EXP_EASY_BITS
#define TA_EXP_EASY_BITS 0x42ac0000u
#endif

#define TA_AVX2_FN static inline __attribute__((target("avx2,fma"), always_inline))

TA_AVX2_FN __m256i ta_avx2_i32(int32_t x) { return _mm256_set1_epi32(x); }
TA_AVX2_FN __m256 ta_avx2_f32_bits(uint32_t u) {
    return _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)u));
}
/* All-ones lanes where a is a NaN: (bits & 0x7fffffff) > 0x7f800000, as
 * ta_isnan_bits (both sides are non-negative as int32). */
TA_AVX2_FN __m256i ta_avx2_isnan_mask(__m256i ux) {
    return _mm256_cmpgt_epi32(_mm256_and_si256(ux, ta_avx2_i32(0x7fffffff)),
                              ta_avx2_i32((int32_t)TA_F32_INF_BITS));
}
/* mask ? a : b (mask lanes all-ones or all-zero) */
TA_AVX2_FN __m256 ta_avx2_sel(__m256i mask, __m256 a, __m256 b) {
    return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(mask));
}

/* ta_exp, lane by lane (steps as in ta_math.h). */
TA_AVX2_FN __m256 ta_avx2_exp(__m256 x) {
    const __m256i ux = _mm256_castps_si256(x);
    const __m256 shifter = _mm256_set1_ps(TA_EXP_SHIFTER);
    __m256 t, n, neg_n, r, p, res;
    __m256i ni, n1, n2;
    /* step 1: n = round(x * log2e), one multiply and one add, each rounded */
    t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(TA_EXP_LOG2E)), shifter);
    n = _mm256_sub_ps(t, shifter);
    ni = _mm256_cvttps_epi32(n); /* n is integral: truncation is exact */
    /* step 2: r = fmaf(-n, LN2_HI, x); r = fmaf(-n, LN2_LO, r) (-n: exact sign flip) */
    neg_n = _mm256_xor_ps(n, ta_avx2_f32_bits(0x80000000u));
    r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(TA_LN2_HI), x);
    r = _mm256_fmadd_ps(neg_n, _mm256_set1_ps(TA_LN2_LO), r);
    /* step 3: Horner, one fmaf per coefficient */
    p = _mm256_set1_ps(TA_EXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TA_EXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TA_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TA_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TA_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* step 4, when every lane has |x| <= TA_EXP_EASY (the common case): no
     * special case applies, |n| <= 125 and p is in [0.7, 1.42], so p * 2^n1 *
     * 2^n2 = p * 2^n is a normal float and both multiplies are exact; adding
     * n to p's exponent field gives the same bits in one step. */
    if (_mm256_movemask_ps(_mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_and_si256(ux, ta_avx2_i32(0x7fffffff)),
                               ta_avx2_i32((int32_t)TA_EXP_EASY_BITS)))) == 0)
        return _mm256_castsi256_ps(
            _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(ni, 23)));
    /* step 4: n1 = ni / 2 truncated toward zero (add the sign bit, then shift
     * arithmetically), n2 = ni - n1; p * 2^n1 * 2^n2 */
    n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);
    n2 = _mm256_sub_epi32(ni, n1);
    p = _mm256_mul_ps(
        p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, ta_avx2_i32(127)), 23)));
    res = _mm256_mul_ps(
        p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, ta_avx2_i32(127)), 23)));
    /* step 0, applied last in reverse order so that the first test wins:
     * NaN -> quieted NaN; x > HI -> +inf; x < LO -> +0 */
    res = _mm256_blendv_ps(res, _mm256_setzero_ps(),
                           _mm256_cmp_ps(x, _mm256_set1_ps(TA_EXP_LO), _CMP_LT_OQ));
    res = _mm256_blendv_ps(res, ta_avx2_f32_bits(TA_F32_INF_BITS),
                           _mm256_cmp_ps(x, _mm256_set1_ps(TA_EXP_HI), _CMP_GT_OQ));
    return ta_avx2_sel(
        ta_avx2_isnan_mask(ux),
        _mm256_castsi256_ps(_mm256_or_si256(ux, ta_avx2_i32((int32_t)TA_F32_QNAN_BIT))), res);
}

/* ta_log, lane by lane (steps as in ta_math.h). */
TA_AVX2_FN __m256 ta_avx2_log(__m256 x) {
    const __m256i ux = _mm256_castps_si256(x);
    __m256i ix, e, sub;
    __m256 f, s, z, w, r, hfsq, ef, res;
    /* subnormal (as int32: below 0x00800000; zero and negative lanes too, they
     * are replaced below): scale by 2^23, exact, and start e at -23 */
    sub = _mm256_cmpgt_epi32(ta_avx2_i32(0x00800000), ux);
    ix = _mm256_castps_si256(ta_avx2_sel(sub, _mm256_mul_ps(x, _mm256_set1_ps(TA_LOG_TWO23)), x));
    e = _mm256_and_si256(sub, ta_avx2_i32(-23));
    /* step 1: e += (ix >> 23) - 127 after the shift to [sqrt(1/2), sqrt(2)) */
    ix = _mm256_add_epi32(ix, ta_avx2_i32((int32_t)(0x3f800000u - TA_LOG_SQRTHALF_BITS)));
    e = _mm256_add_epi32(e, _mm256_sub_epi32(_mm256_srli_epi32(ix, 23), ta_avx2_i32(127)));
    ix = _mm256_add_epi32(_mm256_and_si256(ix, ta_avx2_i32(0x007fffff)),
                          ta_avx2_i32((int32_t)TA_LOG_SQRTHALF_BITS));
    f = _mm256_sub_ps(_mm256_castsi256_ps(ix), _mm256_set1_ps(1.0f));
    /* step 2: s = f / (2 + f), z = s^2, r = z * poly(z) */
    s = _mm256_div_ps(f, _mm256_add_ps(_mm256_set1_ps(2.0f), f));
    z = _mm256_mul_ps(s, s);
    w = _mm256_set1_ps(TA_LOG_C13);
    w = _mm256_fmadd_ps(w, z, _mm256_set1_ps(TA_LOG_C11));
    w = _mm256_fmadd_ps(w, z, _mm256_set1_ps(TA_LOG_C9));
    w = _mm256_fmadd_ps(w, z, _mm256_set1_ps(TA_LOG_C7));
    w = _mm256_fmadd_ps(w, z, _mm256_set1_ps(TA_LOG_C5));
    w = _mm256_fmadd_ps(w, z, _mm256_set1_ps(TA_LOG_C3));
    r = _mm256_mul_ps(w, z);
    /* step 3: ef*LN2_HI + (((s*(hfsq + r) + ef*LN2_LO) - hfsq) + f) */
    hfsq = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), f), f);
    ef = _mm256_cvtepi32_ps(e);
    res = _mm256_add_ps(_mm256_mul_ps(s, _mm256_add_ps(hfsq, r)),
                        _mm256_mul_ps(ef, _mm256_set1_ps(TA_LN2_LO)));
    res = _mm256_add_ps(_mm256_sub_ps(res, hfsq), f);
    res = _mm256_add_ps(_mm256_mul_ps(ef, _mm256_set1_ps(TA_LN2_HI)), res);
    /* step 0 in reverse order: +inf -> +inf; x < 0 -> 0x7fc00000; +-0 -> -inf; NaN */
    res = ta_avx2_sel(_mm256_cmpeq_epi32(ux, ta_avx2_i32((int32_t)TA_F32_INF_BITS)), x, res);
    res = ta_avx2_sel(_mm256_cmpgt_epi32(_mm256_setzero_si256(), ux),
                      ta_avx2_f32_bits(TA_F32_DEFAULT_NAN_BITS), res);
    res = ta_avx2_sel(
        _mm256_cmpeq_epi32(_mm256_and_si256(ux, ta_avx2_i32(0x7fffffff)), _mm256_setzero_si256()),
        ta_avx2_f32_bits(0x80000000u | TA_F32_INF_BITS), res);
    return ta_avx2_sel(
        ta_avx2_isnan_mask(ux),
        _mm256_castsi256_ps(_mm256_or_si256(ux, ta_avx2_i32((int32_t)TA_F32_QNAN_BIT))), res);
}

/* ta_f16_to_f32 on 8 halves (unaligned). Integer operations, as the scalar
 * function: normal, inf/NaN (quieted), zero/subnormal (mant * 2^-24, exact). */
TA_AVX2_FN __m256 ta_avx2_f16_to_f32(const uint16_t *src) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)src));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, ta_avx2_i32(0x8000)), 16);
    const __m256i expo = _mm256_and_si256(_mm256_srli_epi32(h, 10), ta_avx2_i32(0x1f));
    const __m256i mant = _mm256_and_si256(h, ta_avx2_i32(0x3ff));
    const __m256i mant13 = _mm256_slli_epi32(mant, 13);
    const __m256i normal = _mm256_or_si256(
        sign,
        _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(expo, ta_avx2_i32(112)), 23), mant13));
    const __m256i quiet = _mm256_andnot_si256(_mm256_cmpeq_epi32(mant, _mm256_setzero_si256()),
                                              ta_avx2_i32((int32_t)TA_F32_QNAN_BIT));
    const __m256i infnan =
        _mm256_or_si256(_mm256_or_si256(sign, ta_avx2_i32((int32_t)TA_F32_INF_BITS)),
                        _mm256_or_si256(mant13, quiet));
    const __m256i subn = _mm256_or_si256(
        sign, _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mant),
                                                _mm256_set1_ps(5.9604644775390625e-08f))));
    __m256i res = _mm256_blendv_epi8(
        subn, normal,
        _mm256_xor_si256(_mm256_cmpeq_epi32(expo, _mm256_setzero_si256()), ta_avx2_i32(-1)));
    res = _mm256_blendv_epi8(res, infnan, _mm256_cmpeq_epi32(expo, ta_avx2_i32(0x1f)));
    return _mm256_castsi256_ps(res);
}

/* ta_bf16_to_f32 on 8 bf16 values (unaligned): the top half of an f32, NaN quieted. */
TA_AVX2_FN __m256 ta_avx2_bf16_to_f32(const uint16_t *src) {
    const __m256i u = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)src)), 16);
    const __m256i q =
        _mm256_and_si256(ta_avx2_isnan_mask(u), ta_avx2_i32((int32_t)TA_F32_QNAN_BIT));
    return _mm256_castsi256_ps(_mm256_or_si256(u, q));
}

#endif /* x86 with GCC or clang */
#endif /* TA_CPU_VMATH_AVX2_H */
