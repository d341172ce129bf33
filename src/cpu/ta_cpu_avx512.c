/*
 * CPU backend, AVX-512F instantiation: 16 lanes, register blocks of 6 rows
 * (or keys) x 4 vectors (24 accumulators of the 32 zmm registers). Compiled
 * with -mavx512f -mavx2 -mfma (CMakeLists.txt); run only after
 * ta_cpu_isa_best() saw AVX512F, AVX2 and FMA. The algorithm is the
 * ta_cpu_*.inc pieces (tile I/O, micro-kernels, SDPA and MTA tasks).
 */
#include "ta_cpu_vmath_avx512.h"

#if defined(TA_HAVE_VMATH_AVX512) && defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>

#define TA_VW  16
#define TA_RB  6
#define TA_NV  4
#define TA_VFN static inline __attribute__((always_inline))

typedef __m512 ta_v;
typedef __mmask16 ta_m;

TA_VFN ta_v v_zero(void) { return _mm512_setzero_ps(); }
TA_VFN ta_v v_set1(float x) { return _mm512_set1_ps(x); }
TA_VFN ta_v v_load(const float *p) { return _mm512_loadu_ps(p); }
TA_VFN void v_store(float *p, ta_v x) { _mm512_storeu_ps(p, x); }
TA_VFN ta_v v_bcast(const float *p) { return _mm512_set1_ps(*p); }
TA_VFN ta_v v_fma(ta_v a, ta_v b, ta_v c) { return _mm512_fmadd_ps(a, b, c); }
TA_VFN ta_v v_mul(ta_v a, ta_v b) { return _mm512_mul_ps(a, b); }
TA_VFN ta_v v_add(ta_v a, ta_v b) { return _mm512_add_ps(a, b); }
TA_VFN ta_v v_sub(ta_v a, ta_v b) { return _mm512_sub_ps(a, b); }
TA_VFN ta_v v_div(ta_v a, ta_v b) { return _mm512_div_ps(a, b); }
/* vmaxps returns its second operand unless a > b: exactly a > b ? a : b */
TA_VFN ta_v v_max(ta_v a, ta_v b) { return _mm512_max_ps(a, b); }
TA_VFN ta_m m_lt(ta_v a, ta_v b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
TA_VFN ta_m m_ne(ta_v a, ta_v b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
TA_VFN ta_v v_sel(ta_m m, ta_v a, ta_v b) { return _mm512_mask_blend_ps(m, b, a); }
TA_VFN ta_v v_exp(ta_v x) { return ta_avx512_exp(x); }
TA_VFN ta_v v_log(ta_v x) { return ta_avx512_log(x); }
TA_VFN ta_v v_i32f(const int32_t *p) { return _mm512_cvtepi32_ps(_mm512_loadu_si512(p)); }
TA_VFN ta_v v_f16(const uint16_t *p) { return ta_avx512_f16_to_f32(p); }
TA_VFN ta_v v_bf16(const uint16_t *p) { return ta_avx512_bf16_to_f32(p); }
/* r[x][c] <-> r[c][x] for 16 vectors (moves only: no value changes). After
 * the ps unpacks t[2i], t[2i + 1] hold rows 2i, 2i + 1 interleaved; after the
 * pd unpacks u[4i + k]'s 128-bit lane l holds column 4l + k of rows 4i ..
 * 4i + 3; two rounds of 128-bit lane shuffles gather each column's four
 * quarters (0x88: lanes 0, 2 of each operand; 0xdd: lanes 1, 3). */
TA_VFN void v_transpose(ta_v *r) {
    __m512 t[16], u[16];
    int i, k;
    for (i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (k = 0; k < 4; ++k) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
        r[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        r[4 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
}

/* the tasks (each piece includes the ones below it) */
#include "ta_cpu_sdpa.inc"

#include "ta_cpu_mta.inc"

const ta_cpu_kernels ta_cpu_kernels_avx512 = {
    .name = "avx512",
    .fwd = {.sdpa = cpu_sdpa_fwd_task, .mta = cpu_mta_fwd_task, .merge = cpu_fwd_merge_task},
    .dkdv = {.sdpa = cpu_sdpa_dkdv_task, .mta = cpu_mta_dkdv_task},
    .dq = {.sdpa = cpu_sdpa_dq_task, .mta = cpu_mta_dq_task},
    .mta_bwd1 = cpu_mta_bwd1_task,
    .lat_dw = cpu_lat_dw_task,
    .lat_dw_head = cpu_lat_dw_head,
};

#else
typedef int ta_cpu_avx512_unavailable; /* not an x86 AVX-512 build: never selected */
#endif
