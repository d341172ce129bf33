/*
 * The fast MTA backward's parameters and the direct-entry test, shared by
 * cuda/ta_cuda_fast_mta_bwd.cu (the kernels, the launcher) and
 * cuda/ta_cuda_fast_mta_sm90.cu (the dq kernel on warpgroup MMA). Not
 * installed; each translation unit has its own copy (an anonymous
 * namespace), the host fills the struct and the kernels read it by value.
 */
#ifndef TA_CUDA_FAST_MTA_BWD_CUH
#define TA_CUDA_FAST_MTA_BWD_CUH

#include <stddef.h>
#include <stdint.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_fast_mta.cuh"

/* The sm_90a dq kernel of the fast MTA backward (cuda/ta_cuda_fast_mta_sm90.cu):
 * its launch shape for head dim d (0: none); F32 nonzero: the kernel that
 * stores dq in f32 (the rotary stage). block_m is the score rows of a block
 * (the Q tile: block_m - (c_q - 1) output rows), block_n the keys per K tile;
 * smem the bytes. The host launches it only on an sm_90 device of a build
 * that holds sm_90a code (ta_cuda_fast_is_sm90). */
int ta_cuda_fast_mta_dq_wg_launch(int32_t d, int bf16, int f32, ta_cuda_fast_mta_wg *w);
/* Its dk/dv kernel likewise, for head dim d (64 or 128; 0: none) and c_q,
 * with nbq (1 or 2) Q tile buffers: block_m the rows of a Q tile, block_n the
 * keys of a block, *a_group the a's of a block (n_ag = ceil(c_q / a_group)
 * blocks per key tile); smem the bytes at this c_q. */
int ta_cuda_fast_mta_kv_wg_launch(int32_t d, int32_t cq, int bf16, int nbq, ta_cuda_fast_mta_wg *w,
                                  int32_t *a_group);

namespace {

/* The forward's regions (kf, diag: the base) and the backward's own. */
struct ta_fmb_params : ta_fast_mta_params {
    float *g;       /* [B, H, S_q, E]: dC at the direct entries (0 where hidden) */
    float *dsb;     /* [B, H, S_q, NE]: dS~ of the band, NE = 2E */
    float *dq_band; /* [B, H, S_q, D]: the band's share of dq */
    float *dkf;     /* [B, H, S_k, c_q, D]: the gradient of kf */
    float *dw_fold; /* [B, H, n_kb, c_q c_k]: the fold's dw per 32 keys */
    float *dw_band; /* [B, H, n_rb, c_q c_k]: the band's dw per 32 rows (n_rb = 0 when E = 0) */
    float *g_edge;  /* [B, H, S_q, P] with a binding window start (edge_n = P > 0): dC at the
                       edge entries (0 where hidden, or where the entry is a diag one) */
    float *dsb2;    /* [B, H, S_q, NF]: dS~ of the window-start band, NF = 3P + c_q - 1 */
    int32_t ne, n_kb, n_rb, batch_total, nf;
};

constexpr float TA_LOG2E = 1.4426950408889634f;

/* The direct entry of a lane's score (row, j), if any: 1 = a diag entry
 * (delta = row + off - j < E), 2 = an edge entry (j - lo(row) < P with a
 * binding window start, not a diag one), 0 = folded; *val its convolved
 * score (from diag or edge; rows past S_q are never asked). */
__device__ __forceinline__ int ta_fmb_direct(const ta_fmb_params &p, int32_t row, int32_t j) {
    const int32_t delta = row + p.t.diag_offset - j;
    if (delta >= 0 && delta < p.band) return 1;
    if (p.edge_n > 0) {
        const int32_t ge = j - (row + p.t.diag_offset - p.t.window_left);
        if (ge >= 0 && ge < p.edge_n) return 2;
    }
    return 0;
}

__device__ __forceinline__ float ta_fmb_direct_val(const ta_fmb_params &p, const float *diag,
                                                   const float *edge, int kind, int32_t row,
                                                   int32_t j) {
    return kind == 1
               ? diag[(int64_t)row * p.band + row + p.t.diag_offset - j]
               : edge[(int64_t)row * p.edge_n + j - (row + p.t.diag_offset - p.t.window_left)];
}

/* A lane's two score rows ra, ra + 8: their keys [lo, hi), lse2 = lse log2 e
 * and D (both 0 for a row past S_q or that sees no key). */
__device__ __forceinline__ void ta_fmb_lane_rows(const ta_fmb_params &p, const ta_tiling &t,
                                                 const ta_tile_ctx &c, int32_t ra, int32_t lo[2],
                                                 int32_t hi[2], float lse2[2], float dl[2]) {
    ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        const bool in = row < t.seq_q && lo[r] < hi[r];
        lse2[r] = in ? p.lse[c.lse + row] * TA_LOG2E : 0.0f;
        dl[r] = in ? p.delta[c.lse + row] : 0.0f;
    }
}

/* Whether a warp's 16 rows from wrow0 may hold a direct entry among the keys
 * [col0, col1]: a diag one (delta < E) or an edge one (the window start's P
 * keys); false lets the caller skip ta_fmb_direct. */
__device__ __forceinline__ bool ta_fmb_near(const ta_fmb_params &p, const ta_tiling &t,
                                            const float *diag, const float *edge, int32_t wrow0,
                                            int32_t col0, int32_t col1) {
    const int32_t lo_off = t.diag_offset - t.window_left;
    return (diag && wrow0 + t.diag_offset - col1 < p.band) ||
           (edge && col0 < wrow0 + 15 + lo_off + p.edge_n && col1 >= wrow0 + lo_off);
}

/* One score's P and dC at (row, j), from its folded score s and dp:
 * inside the row's keys [lo, hi) the direct entry's value (diag or edge; looked
 * for only when `near`: the caller's tile may hold one) replaces s, and
 * P = 2^(s scale log2 e - lse2); dC = scale P (dp - D), 0 at the direct
 * entries (the band kernel takes those). */
__device__ __forceinline__ void ta_fmb_p_dc(const ta_fmb_params &p, const float *diag,
                                            const float *edge, bool near, int32_t row, int32_t j,
                                            int32_t lo, int32_t hi, float s, float dp, float lse2,
                                            float dl, float scale_log2, float *pr, float *dc) {
    const int direct = near ? ta_fmb_direct(p, row, j) : 0;
    float x = 0.0f;
    if (j >= lo && j < hi) {
        if (direct) s = ta_fmb_direct_val(p, diag, edge, direct, row, j);
        x = ta_fast_exp2(__fmaf_rn(s, scale_log2, -lse2));
    }
    *pr = x;
    *dc = direct ? 0.0f : p.scale * x * (dp - dl);
}

} /* namespace */

#endif /* TA_CUDA_FAST_MTA_BWD_CUH */
