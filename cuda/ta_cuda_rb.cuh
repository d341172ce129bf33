/*
 * The register-blocked exact kernels' pieces (issue 17; docs/cuda.md section
 * 2, "The register-blocked forward and dq"): the forward
 * (cuda/ta_cuda_sdpa_fwd.cu) and the backward's dq kernel
 * (cuda/ta_cuda_sdpa_bwd.cu) for f32 rows on 16 bytes. Tiles are 64 rows in
 * shared memory, row major: q-side and k-side rows LDQ = D + 4 floats apart
 * (D a multiple of 8: one phase of 8 consecutive rows' 16-byte loads meets 32
 * banks), loaded by 16-byte cp.async. Thread (ty, tx) of the 16 x 16 grid
 * owns rows 4ty + r and keys tx + 16c of a 64 x 64 score tile, and rows 4ty +
 * r and features s*64 + 4tx + e of an accumulator tile. Every output keeps
 * the reference's operation sequence (docs/cuda.md section 1).
 */
#ifndef TA_CUDA_RB_CUH
#define TA_CUDA_RB_CUH

#include "ta_cuda_fast.cuh" /* cp.async: ta_fast_cp16, commit, wait */
#include "ta_cuda_tile.cuh"

/* ta_exp with the special cases selected after the main path (docs/
 * exactness.md section 8): the same operations on every x in range, so the
 * same bits, without branches. */
TA_CUDA_DEV float ta_cuda_exp_sel(float x) {
    const uint32_t ux = ta_f32_bits(x);
    /* the main path on x clamped into its domain (the same x where it is in
     * range; NaN gives TA_EXP_LO): no float-to-int conversion out of range */
    float q = ta_exp_main(fminf(fmaxf(x, TA_EXP_LO), TA_EXP_HI));
    q = x < TA_EXP_LO ? 0.0f : q;
    q = x > TA_EXP_HI ? ta_f32_from_bits(TA_F32_INF_BITS) : q;
    return ta_isnan_bits(ux) ? ta_f32_from_bits(ux | TA_F32_QNAN_BIT) : q;
}

/* Rows [row0, row0 + rows) of a slice (element `slice` of base, rows `ld`
 * apart), N floats each (N a multiple of 4), into dst[64][LDD] by 16-byte
 * cp.async; rows past `rows` are zero-filled. Not waited for. */
template <int N, int LDD>
TA_CUDA_DEV void ta_cuda_rb_load(float *dst, const void *base, int64_t slice, int64_t ld,
                                 int32_t row0, int32_t rows) {
    constexpr int per_row = N / 4;
#pragma unroll
    for (int e0 = 0; e0 < TA_CUDA_TILE * per_row; e0 += TA_CUDA_THREADS) {
        const int e = e0 + (int)threadIdx.x, r = e / per_row, ch = e % per_row;
        const bool in = r < rows;
        const float *src = static_cast<const float *>(base) +
                           (in ? ta_cuda_row(slice, ld, row0 + r) + 4 * ch : 0);
        if (TA_CUDA_TILE * per_row % TA_CUDA_THREADS == 0 || e < TA_CUDA_TILE * per_row)
            ta_fast_cp16(ta_fast_smem_addr(dst + r * LDD + 4 * ch), src, in ? 16 : 0);
    }
}

/* s[r][c] = dot(a_{4ty+r}, b_{tx+16c}) over D features from +0, f ascending:
 * 4 features per pair of 16-byte loads on each side (a: rows 4ty + r of sa,
 * the same address across a half-warp; b: rows tx + 16c of sb, 8 consecutive
 * rows per phase), every offset within a 16-feature step an immediate. The
 * f loop is unrolled 4 steps, not fully: the whole-D unroll (with the P V
 * loop's 64) made the kernels' loops overflow the instruction cache; at D =
 * 128 the smaller code ran the forward 13% and the backward 18% faster (H100,
 * same bits), at D = 64 the same. */
template <int D, int LDQ>
TA_CUDA_DEV void ta_cuda_rb_dot(float (&s)[4][4], const float *sa, const float *sb) {
    const float *ar = sa + 4 * ta_cuda_ty() * LDQ, *br = sb + ta_cuda_tx() * LDQ;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            s[r][c] = 0.0f;
#pragma unroll 4
    for (int f = 0; f < D; f += 4) {
        float4 a4[4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
            a4[r] = *reinterpret_cast<const float4 *>(ar + r * LDQ + f);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const float4 b4 = *reinterpret_cast<const float4 *>(br + 16 * c * LDQ + f);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                s[r][c] = fmaf(a4[r].x, b4.x, s[r][c]);
                s[r][c] = fmaf(a4[r].y, b4.y, s[r][c]);
                s[r][c] = fmaf(a4[r].z, b4.z, s[r][c]);
                s[r][c] = fmaf(a4[r].w, b4.w, s[r][c]);
            }
        }
    }
}

/* One k tile's P V (the forward) or dS K (dq) for this thread's rows 4ty+r
 * and features s*64 + 4tx + e: part = fmaf(p_j, v_j, part) from +0, j
 * ascending, p from st[j][row] (TA_CUDA_LDT apart), v rows LDV apart. FULL (a 64-column tile
 * every row of the warp sees whole): no selects, the loop unrolled 16 keys
 * (not 64: the instruction cache, ta_cuda_rb_dot); else the
 * visible columns [rb[r], re[r]) of each row only. */
template <int NS, int LDV, bool WL, bool FULL>
TA_CUDA_DEV void ta_cuda_rb_pv(float (&part)[4][NS][4], const float *st, const float *sv,
                               int32_t cols, const int32_t (&rb)[4], const int32_t (&re)[4]) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
    constexpr int unroll = FULL ? 16 : 1; /* (a pragma expands no macro) */
    ta_cuda_acc_zero<NS>(part);
#pragma unroll(unroll)
    for (int32_t j = 0; j < (FULL ? TA_CUDA_TILE : cols); ++j) {
        const float4 p4 = *reinterpret_cast<const float4 *>(st + j * TA_CUDA_LDT + 4 * ty);
        const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
        bool live[4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
            live[r] = FULL || ta_cuda_in<WL>(j, rb[r], re[r]);
#pragma unroll
        for (int sl = 0; sl < NS; ++sl) {
            const float4 v4 =
                *reinterpret_cast<const float4 *>(sv + j * LDV + sl * TA_CUDA_SLOT + 4 * tx);
            const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    part[r][sl][e] = live[r] ? fmaf(pv[r], vv[e], part[r][sl][e]) : part[r][sl][e];
        }
    }
}

/* 1 if rows of a q-side (kv = 0) or k/v-side tensor start on 16 bytes in f32:
 * the pointer on 16 bytes, each stride of a dimension with more than one entry
 * a multiple of 4 elements. */
static inline int ta_cuda_rb_rows_aligned(const ta_problem *pr, const void *ptr, const ta_strides *s,
                                   int kv) {
    const int32_t heads = kv ? pr->heads_kv : pr->heads_q, seq = kv ? pr->seq_k : pr->seq_q;
    return (uintptr_t)ptr % 16u == 0 && (seq == 1 || s->seq % 4 == 0) &&
           (heads == 1 || s->head % 4 == 0) && (pr->batch == 1 || s->batch % 4 == 0);
}

#endif /* TA_CUDA_RB_CUH */
