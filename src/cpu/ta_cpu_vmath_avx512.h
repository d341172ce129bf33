/*
 * Lane-wise AVX-512F versions of the shared scalar math (src/ta_math.h):
 * ta_exp, ta_log and the f16/bf16 widening, 16 lanes at a time. The same
 * operation sequence as ta_cpu_vmath_avx2.h (and as the scalar functions, lane
 * by lane), with mask registers for the selections; see that file for the
 * rules. Only AVX512F instructions (no DQ/BW/VL), so any AVX-512 CPU runs it.
 * test_math_exhaustive --vector checks every lane against the scalar function
 * on all 2^32 inputs. Callers must check the CPU (AVX512F, AVX2, FMA) first.
 */
#ifndef TA_CPU_VMATH_AVX512_H
#define TA_CPU_VMATH_AVX512_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TA_HAVE_VMATH_AVX512 1

#include <immintrin.h>
#include <stdint.h>

#include "ta_math.h"

/* exp's easy range, |x| <= 86 (0x42ac0000): no special case, and e^x is a
 * normal float (|n| <= 124) reached by one exact scaling of p. */
#ifndef TA_EXP_EASY_BITS
#define TA_EXP_EASY_BITS 0x42ac0000u
#endif

#define TA_AVX512_FN static inline __attribute__((target("avx512f,avx2,fma"), always_inline))

TA_AVX512_FN __m512i ta_avx512_i32(int32_t x) { return _mm512_set1_epi32(x); }
TA_AVX512_FN __m512 ta_avx512_f32_bits(uint32_t u) {
    return _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)u));
}
/* NaN lanes: (bits & 0x7fffffff) > 0x7f800000, as ta_isnan_bits. */
TA_AVX512_FN __mmask16 ta_avx512_isnan_mask(__m512i ux) {
    return _mm512_cmpgt_epi32_mask(_mm512_and_si512(ux, ta_avx512_i32(0x7fffffff)),
                                   ta_avx512_i32((int32_t)TA_F32_INF_BITS));
}
TA_AVX512_FN __m512 ta_avx512_quiet(__m512i ux) {
    return _mm512_castsi512_ps(_mm512_or_si512(ux, ta_avx512_i32((int32_t)TA_F32_QNAN_BIT)));
}

/* ta_exp, lane by lane (steps as in ta_math.h). */
TA_AVX512_FN __m512 ta_avx512_exp(__m512 x) {
    const __m512i ux = _mm512_castps_si512(x);
    const __m512 shifter = _mm512_set1_ps(TA_EXP_SHIFTER);
    __m512 t, n, neg_n, r, p, res;
    __m512i ni, n1, n2;
    /* step 1: n = round(x * log2e) */
    t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(TA_EXP_LOG2E)), shifter);
    n = _mm512_sub_ps(t, shifter);
    ni = _mm512_cvttps_epi32(n);
    /* step 2: Cody-Waite with -n (exact sign flip) */
    neg_n = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(n), ta_avx512_i32((int32_t)0x80000000u)));
    r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(TA_LN2_HI), x);
    r = _mm512_fmadd_ps(neg_n, _mm512_set1_ps(TA_LN2_LO), r);
    /* step 3: Horner */
    p = _mm512_set1_ps(TA_EXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TA_EXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TA_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TA_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TA_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* step 4, when every lane has |x| <= TA_EXP_EASY (no special case; see
     * ta_cpu_vmath_avx2.h): p * 2^n in one exact scaling */
    if (_mm512_cmple_epu32_mask(_mm512_and_si512(ux, ta_avx512_i32(0x7fffffff)),
                                ta_avx512_i32((int32_t)TA_EXP_EASY_BITS)) == 0xffff)
        return _mm512_scalef_ps(p, n);
    /* step 4: n1 = ni / 2 (C truncation), n2 = ni - n1 */
    n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1);
    n2 = _mm512_sub_epi32(ni, n1);
    p = _mm512_mul_ps(
        p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, ta_avx512_i32(127)), 23)));
    res = _mm512_mul_ps(
        p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, ta_avx512_i32(127)), 23)));
    /* step 0 in reverse order */
    res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(TA_EXP_LO), _CMP_LT_OQ), res,
                               _mm512_setzero_ps());
    res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(TA_EXP_HI), _CMP_GT_OQ), res,
                               ta_avx512_f32_bits(TA_F32_INF_BITS));
    return _mm512_mask_blend_ps(ta_avx512_isnan_mask(ux), res, ta_avx512_quiet(ux));
}

/* ta_log, lane by lane (steps as in ta_math.h). */
TA_AVX512_FN __m512 ta_avx512_log(__m512 x) {
    const __m512i ux = _mm512_castps_si512(x);
    const __mmask16 sub = _mm512_cmpgt_epi32_mask(ta_avx512_i32(0x00800000), ux);
    __m512i ix, e;
    __m512 f, s, z, w, r, hfsq, ef, res;
    /* subnormal: scale by 2^23 (exact), e starts at -23 */
    ix = _mm512_castps_si512(_mm512_mask_mul_ps(x, sub, x, _mm512_set1_ps(TA_LOG_TWO23)));
    e = _mm512_maskz_mov_epi32(sub, ta_avx512_i32(-23));
    /* step 1 */
    ix = _mm512_add_epi32(ix, ta_avx512_i32((int32_t)(0x3f800000u - TA_LOG_SQRTHALF_BITS)));
    e = _mm512_add_epi32(e, _mm512_sub_epi32(_mm512_srli_epi32(ix, 23), ta_avx512_i32(127)));
    ix = _mm512_add_epi32(_mm512_and_si512(ix, ta_avx512_i32(0x007fffff)),
                          ta_avx512_i32((int32_t)TA_LOG_SQRTHALF_BITS));
    f = _mm512_sub_ps(_mm512_castsi512_ps(ix), _mm512_set1_ps(1.0f));
    /* step 2 */
    s = _mm512_div_ps(f, _mm512_add_ps(_mm512_set1_ps(2.0f), f));
    z = _mm512_mul_ps(s, s);
    w = _mm512_set1_ps(TA_LOG_C13);
    w = _mm512_fmadd_ps(w, z, _mm512_set1_ps(TA_LOG_C11));
    w = _mm512_fmadd_ps(w, z, _mm512_set1_ps(TA_LOG_C9));
    w = _mm512_fmadd_ps(w, z, _mm512_set1_ps(TA_LOG_C7));
    w = _mm512_fmadd_ps(w, z, _mm512_set1_ps(TA_LOG_C5));
    w = _mm512_fmadd_ps(w, z, _mm512_set1_ps(TA_LOG_C3));
    r = _mm512_mul_ps(w, z);
    /* step 3 */
    hfsq = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), f), f);
    ef = _mm512_cvtepi32_ps(e);
    res = _mm512_add_ps(_mm512_mul_ps(s, _mm512_add_ps(hfsq, r)),
                        _mm512_mul_ps(ef, _mm512_set1_ps(TA_LN2_LO)));
    res = _mm512_add_ps(_mm512_sub_ps(res, hfsq), f);
    res = _mm512_add_ps(_mm512_mul_ps(ef, _mm512_set1_ps(TA_LN2_HI)), res);
    /* step 0 in reverse order: +inf; x < 0; +-0; NaN */
    res = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(ux, ta_avx512_i32((int32_t)TA_F32_INF_BITS)),
                               res, x);
    res = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(_mm512_setzero_si512(), ux), res,
                               ta_avx512_f32_bits(TA_F32_DEFAULT_NAN_BITS));
    res = _mm512_mask_blend_ps(
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(ux, ta_avx512_i32(0x7fffffff)),
                                _mm512_setzero_si512()),
        res, ta_avx512_f32_bits(0x80000000u | TA_F32_INF_BITS));
    return _mm512_mask_blend_ps(ta_avx512_isnan_mask(ux), res, ta_avx512_quiet(ux));
}

/* ta_f16_to_f32 on 16 halves (unaligned), integer operations as the scalar one. */
TA_AVX512_FN __m512 ta_avx512_f16_to_f32(const uint16_t *src) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)src));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, ta_avx512_i32(0x8000)), 16);
    const __m512i expo = _mm512_and_si512(_mm512_srli_epi32(h, 10), ta_avx512_i32(0x1f));
    const __m512i mant = _mm512_and_si512(h, ta_avx512_i32(0x3ff));
    const __m512i mant13 = _mm512_slli_epi32(mant, 13);
    const __m512i normal = _mm512_or_si512(
        sign,
        _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(expo, ta_avx512_i32(112)), 23), mant13));
    const __m512i quiet =
        _mm512_maskz_mov_epi32(_mm512_cmpneq_epi32_mask(mant, _mm512_setzero_si512()),
                               ta_avx512_i32((int32_t)TA_F32_QNAN_BIT));
    const __m512i infnan =
        _mm512_or_si512(_mm512_or_si512(sign, ta_avx512_i32((int32_t)TA_F32_INF_BITS)),
                        _mm512_or_si512(mant13, quiet));
    const __m512i subn = _mm512_or_si512(
        sign, _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(mant),
                                                _mm512_set1_ps(5.9604644775390625e-08f))));
    __m512i res = _mm512_mask_blend_epi32(_mm512_cmpneq_epi32_mask(expo, _mm512_setzero_si512()),
                                          subn, normal);
    res = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(expo, ta_avx512_i32(0x1f)), res, infnan);
    return _mm512_castsi512_ps(res);
}

/* ta_bf16_to_f32 on 16 bf16 values (unaligned). */
TA_AVX512_FN __m512 ta_avx512_bf16_to_f32(const uint16_t *src) {
    const __m512i u = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)src)), 16);
    return _mm512_mask_blend_ps(ta_avx512_isnan_mask(u), _mm512_castsi512_ps(u),
                                ta_avx512_quiet(u));
}

#endif /* x86 with GCC or clang */
#endif /* TA_CPU_VMATH_AVX512_H */
