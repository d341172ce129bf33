/*
 * CPU backend, AVX2 + FMA instantiation: 8 lanes, register blocks of 6 rows
 * (or keys) x 2 vectors (12 accumulators of the 16 ymm registers). Compiled
 * with -mavx2 -mfma (CMakeLists.txt); run only after ta_cpu_isa_best() saw
 * AVX2 and FMA. The algorithm is the
 * ta_cpu_*.inc pieces (tile I/O, micro-kernels, SDPA and MTA tasks).
 */
#include "ta_cpu_vmath_avx2.h"

#if defined(TA_HAVE_VMATH_AVX2) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define TA_VW  8
#define TA_RB  6
#define TA_NV  2
#define TA_VFN static inline __attribute__((always_inline))

typedef __m256 ta_v;
typedef __m256 ta_m;

TA_VFN ta_v v_zero(void) { return _mm256_setzero_ps(); }
TA_VFN ta_v v_set1(float x) { return _mm256_set1_ps(x); }
TA_VFN ta_v v_load(const float *p) { return _mm256_loadu_ps(p); }
TA_VFN void v_store(float *p, ta_v x) { _mm256_storeu_ps(p, x); }
TA_VFN ta_v v_bcast(const float *p) { return _mm256_broadcast_ss(p); }
TA_VFN ta_v v_fma(ta_v a, ta_v b, ta_v c) { return _mm256_fmadd_ps(a, b, c); }
TA_VFN ta_v v_mul(ta_v a, ta_v b) { return _mm256_mul_ps(a, b); }
TA_VFN ta_v v_add(ta_v a, ta_v b) { return _mm256_add_ps(a, b); }
TA_VFN ta_v v_sub(ta_v a, ta_v b) { return _mm256_sub_ps(a, b); }
TA_VFN ta_v v_div(ta_v a, ta_v b) { return _mm256_div_ps(a, b); }
/* maxps returns its second operand unless a > b: exactly a > b ? a : b */
TA_VFN ta_v v_max(ta_v a, ta_v b) { return _mm256_max_ps(a, b); }
TA_VFN ta_m m_lt(ta_v a, ta_v b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
TA_VFN ta_m m_ne(ta_v a, ta_v b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
TA_VFN ta_v v_sel(ta_m m, ta_v a, ta_v b) { return _mm256_blendv_ps(b, a, m); }
TA_VFN ta_v v_exp(ta_v x) { return ta_avx2_exp(x); }
TA_VFN ta_v v_log(ta_v x) { return ta_avx2_log(x); }
TA_VFN ta_v v_i32f(const int32_t *p) {
    return _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
TA_VFN ta_v v_f16(const uint16_t *p) { return ta_avx2_f16_to_f32(p); }
TA_VFN ta_v v_bf16(const uint16_t *p) { return ta_avx2_bf16_to_f32(p); }
/* r[x][c] <-> r[c][x] for 8 vectors (moves only: no value changes). After
 * the ps unpacks t[2i], t[2i + 1] hold rows 2i, 2i + 1 interleaved; after the
 * pd unpacks u[4i + k]'s 128-bit lane l holds column 4l + k of rows 4i ..
 * 4i + 3; the lane permutes join the two halves of each column. */
TA_VFN void v_transpose(ta_v *r) {
    __m256 t[8], u[8];
    int i, k;
    for (i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 2; ++i) {
        const __m256d a = _mm256_castps_pd(t[4 * i]), b = _mm256_castps_pd(t[4 * i + 1]);
        const __m256d c = _mm256_castps_pd(t[4 * i + 2]), d = _mm256_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    for (k = 0; k < 4; ++k) {
        r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
        r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
}

/* the tasks (each piece includes the ones below it) */
#include "ta_cpu_sdpa.inc"

#include "ta_cpu_mta.inc"

const ta_cpu_kernels ta_cpu_kernels_avx2 = {
    .name = "avx2",
    .fwd = {.sdpa = cpu_sdpa_fwd_task, .mta = cpu_mta_fwd_task, .merge = cpu_fwd_merge_task},
    .dkdv = {.sdpa = cpu_sdpa_dkdv_task, .mta = cpu_mta_dkdv_task},
    .dq = {.sdpa = cpu_sdpa_dq_task, .mta = cpu_mta_dq_task},
    .mta_bwd1 = cpu_mta_bwd1_task,
    .lat_dw = cpu_lat_dw_task,
    .lat_dw_head = cpu_lat_dw_head,
};

#else
typedef int ta_cpu_avx2_unavailable; /* not an x86 AVX2 build: ta_cpu.c never selects it */
#endif
