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

/* the tasks (each piece includes the ones below it) */
#include "ta_cpu_sdpa.inc"

#include "ta_cpu_mta.inc"

const ta_cpu_kernels ta_cpu_kernels_avx2 = {
    .name = "avx2",
    .fwd = {.sdpa = cpu_sdpa_fwd_task, .mta = cpu_mta_fwd_task},
    .dkdv = {.sdpa = cpu_sdpa_dkdv_task, .mta = cpu_mta_dkdv_task},
    .dq = {.sdpa = cpu_sdpa_dq_task, .mta = cpu_mta_dq_task},
    .mta_bwd1 = cpu_mta_bwd1_task,
    .lat_dw = cpu_lat_dw_task,
    .lat_dw_head = cpu_lat_dw_head,
};

#else
typedef int ta_cpu_avx2_unavailable; /* not an x86 AVX2 build: ta_cpu.c never selects it */
#endif
