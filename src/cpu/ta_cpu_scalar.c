/*
 * CPU backend, portable instantiation: one lane, compiled for the baseline
 * ISA (no flags). The fallback on CPUs without AVX2 + FMA, and the path
 * TA_CPU_ISA=scalar forces. Same tiling, threading and operation order as the
 * vector paths (the ta_cpu_*.inc pieces); fmaf is the C11 function (a libm call or one
 * instruction, correctly rounded either way).
 */
#include <math.h>
#include <stdint.h>

#include "ta_math.h"

#define TA_VW  1
#define TA_RB  6
#define TA_NV  2
#define TA_VFN static inline

typedef float ta_v;
typedef int ta_m;

TA_VFN ta_v v_zero(void) { return 0.0f; }
TA_VFN ta_v v_set1(float x) { return x; }
TA_VFN ta_v v_load(const float *p) { return *p; }
TA_VFN void v_store(float *p, ta_v x) { *p = x; }
TA_VFN ta_v v_bcast(const float *p) { return *p; }
TA_VFN ta_v v_fma(ta_v a, ta_v b, ta_v c) { return TA_FMAF(a, b, c); }
TA_VFN ta_v v_mul(ta_v a, ta_v b) { return a * b; }
TA_VFN ta_v v_add(ta_v a, ta_v b) { return a + b; }
TA_VFN ta_v v_sub(ta_v a, ta_v b) { return a - b; }
TA_VFN ta_v v_div(ta_v a, ta_v b) { return a / b; }
TA_VFN ta_v v_max(ta_v a, ta_v b) { return a > b ? a : b; }
TA_VFN ta_m m_lt(ta_v a, ta_v b) { return a < b; }
TA_VFN ta_m m_ne(ta_v a, ta_v b) { return a != b; }
TA_VFN ta_v v_sel(ta_m m, ta_v a, ta_v b) { return m ? a : b; }
TA_VFN ta_v v_exp(ta_v x) { return ta_exp(x); }
TA_VFN ta_v v_log(ta_v x) { return ta_log(x); }
TA_VFN ta_v v_i32f(const int32_t *p) { return (float)*p; }
TA_VFN ta_v v_f16(const uint16_t *p) { return ta_f16_to_f32(*p); }
TA_VFN ta_v v_bf16(const uint16_t *p) { return ta_bf16_to_f32(*p); }
/* r[x][c] <-> r[c][x] for TA_VW vectors: one lane, nothing to move */
TA_VFN void v_transpose(ta_v *r) { (void)r; }

/* the tasks (each piece includes the ones below it) */
#include "ta_cpu_sdpa.inc"

#include "ta_cpu_mta.inc"

const ta_cpu_kernels ta_cpu_kernels_scalar = {
    .name = "scalar",
    .fwd = {.sdpa = cpu_sdpa_fwd_task, .mta = cpu_mta_fwd_task, .merge = cpu_fwd_merge_task},
    .dkdv = {.sdpa = cpu_sdpa_dkdv_task, .mta = cpu_mta_dkdv_task},
    .dq = {.sdpa = cpu_sdpa_dq_task, .mta = cpu_mta_dq_task},
    .mta_bwd1 = cpu_mta_bwd1_task,
    .lat_dw = cpu_lat_dw_task,
    .lat_dw_head = cpu_lat_dw_head,
};
