/*
 * CUDA latent attention in fast mode (TA_PRECISION_FAST, f16 / bf16): the
 * reciprocal band's kernels on tensor cores (mma.sync, sm_80+), and the
 * gradient sums around them. The launcher is ta_cuda_fast_latent_fwd / _bwd
 * in cuda/ta_cuda_latent.cu; docs/cuda.md, "Latent attention in fast mode",
 * has the plan and the numbers.
 *
 * The band splits each row's keys in two: the keys below the band (j <= p_i
 * - W - 1) are plain latent attention, which the fast SDPA kernels compute
 * as a causal problem over the first S_k - W - 1 keys (bottom-right aligned,
 * row i sees exactly those keys); the band keys p_i - W .. p_i are what the
 * kernels here add. Per block of 64 query rows [r0, r0 + 64) the band keys
 * lie in [p_r0 - W, p_r0 + 63], taken in chunks of 64 keys:
 *
 *   forward  (ta_fast_band_fwd_kernel), per chunk J:
 *     1. s = q~_I k_J^T, t = k_P(I) q~_row(J)^T           mma, 16 rows per warp
 *     2. l = fma(alpha, t, s), masked to the band; online softmax (base 2)
 *     3. o += p v_J
 *     then merged with the keys below the band: (o_main, lse_main) in the
 *     fast SDPA's output, lse = logaddexp, o = both parts rescaled.
 *   backward (ta_fast_band_bwd_kernel; S_q == S_k), per chunk J, with the
 *   final lse and delta D_i:
 *     1. s, t as above, dp = dO~_I v_J^T
 *     2. p = exp(scale l - lse), dl = p (dp - D), 0 outside the band;
 *        each row's d_alpha share sum dl T
 *     3. dq~_I += dl k_J, dk_P(I) += dl q~_row(J)          (registers)
 *     4. dk_J = dl^T q~_I, dq~_row(J) = dl^T k_P(I),       (per chunk, to
 *        dv_J = p^T dO~_I                                  the partials)
 *   every product's operands rounded to the storage type (p, dl as
 *   FlashAttention rounds p, ds), accumulation in f32.
 *
 * No atomics: each block writes its partial sums into its own workspace
 * slots; ta_fast_band_sum_kernel adds them per output element in a fixed
 * order (the main part's value, then the blocks ascending; dk, dv over the
 * query heads of the kv group ascending first), so the bits depend only on
 * the problem.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_host.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

#define TA_FLB_ROWS    64  /* query rows per block */
#define TA_FLB_KEYS    64  /* band keys per chunk */
#define TA_FLB_THREADS 128 /* 4 warps, 16 rows each */

/* Tile geometry of latent width L: rows of LD = L + 8 elements (16 bytes of
 * padding keep ldmatrix's eight rows on distinct banks). NT: 8-key blocks
 * per chunk, DT: 8-feature blocks of L (the names ta_cuda_fast.cuh reads). */
template <int L> struct ta_flb_traits {
    static constexpr int LD = L + 8;
    static constexpr int NT = TA_FLB_KEYS / 8;
    static constexpr int DT = L / 8;
    static constexpr int LDP = TA_FLB_KEYS + 8; /* the p / dl tiles [64][LDP] */
    static constexpr uint32_t TILE = TA_FLB_ROWS * LD; /* elements of a 64-row tile */
    static_assert(L % 16 == 0 && L <= 128, "latent width: mma k-steps of 16");
};

/* Byte size of the forward's shared memory (q~_I, k_P(I), then two chunk
 * buffers of k_J, v_J, q~_row(J): the next chunk loads while one is used)
 * and the backward's (the same plus dO~_I and the p, dl tiles). */
template <int L> constexpr size_t ta_flb_fwd_smem() {
    return 8u * ta_flb_traits<L>::TILE * 2u;
}
template <int L> constexpr size_t ta_flb_bwd_smem() {
    return 9u * ta_flb_traits<L>::TILE * 2u + 2u * TA_FLB_ROWS * ta_flb_traits<L>::LDP * 2u;
}

} /* namespace */

/* Forward kernel parameters (the host fills them: ta_cuda_fast_band_fwd). */
struct ta_flb_fwd_params {
    const uint16_t *q;         /* q~ [B, H, n + S_q, L], strides q_st, n history rows first */
    const uint16_t *k, *v;     /* the call's, strides k_st, v_st */
    const uint16_t *o_main;    /* [B, H, S_q, L] contiguous, the keys below the band; NULL: none */
    const float *lse_main;     /* [B, H, S_q] */
    uint16_t *o;               /* out, strides o_st (NULL: none) */
    float *ctx;                /* out f32 [B, H, S_q, L] contiguous (NULL: none) */
    float *lse;                /* out [B, H, S_q] (may be lse_main) */
    ta_strides q_st, k_st, v_st, o_st;
    int32_t heads, group, seq_q, seq_k, hist, width, n_blocks, n_chunks;
    float scale, alpha;
};

/* Backward kernel parameters (ta_cuda_fast_band_bwd): S_q == S_k, no history. */
struct ta_flb_bwd_params {
    const uint16_t *q;     /* q~ [B, H, S, L], strides q_st */
    const uint16_t *k, *v; /* the call's, strides k_st, v_st */
    const uint16_t *d_o;   /* dctx~ (or dO), strides d_o_st */
    const float *lse, *delta;
    float *part_dq, *part_dk, *part_dv, *da_rows;
    ta_strides q_st, k_st, v_st, d_o_st;
    int32_t heads, group, seq, width, n_blocks, n_chunks;
    float scale, alpha;
};

namespace {

/* Element offset of (b, h, row 0) under strides st. */
TA_FAST_FN int64_t ta_flb_at(const ta_strides &st, int32_t b, int32_t h) {
    return (int64_t)b * st.batch + (int64_t)h * st.head;
}

/* 64 rows of latent queries from row0 (relative to the head's first row,
 * history rows first; rows outside [0, n_rows) read zeros) into dst. */
template <int L>
TA_FAST_FN void ta_flb_load_q(uint16_t *dst, const uint16_t *q, const ta_strides &st, int32_t b,
                              int32_t h, int32_t row0, int32_t n_rows) {
    ta_fast_load_rows<L, TA_FLB_ROWS, TA_FLB_THREADS, true>(dst, q, ta_flb_at(st, b, h), st.seq,
                                                            row0, n_rows);
}

/* A lane's two rows' band intervals [lo, hi) in keys: p - W .. p, clipped at
 * 0; rows past S_q see nothing. */
TA_FAST_FN void ta_flb_band(int32_t ra, int32_t seq_q, int32_t off, int32_t width, int32_t lo[2],
                            int32_t hi[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r, p = row + off;
        lo[r] = row < seq_q ? (p - width > 0 ? p - width : 0) : 0;
        hi[r] = row < seq_q ? p + 1 : 0;
    }
}

/* s = fma(alpha, t, s): the band's logits before the scale. */
template <int N> TA_FAST_FN void ta_flb_logits(float (&s)[N], const float (&t)[N], float alpha) {
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = __fmaf_rn(alpha, t[i], s[i]);
}

/*
 * Forward: one block per (b, h, 64 query rows); warp w owns rows 16 w ..
 * 16 w + 15 of the block. Shared: q~_I | k_P(I) | k_J | v_J | q~_row(J).
 */
template <int L, bool BF16>
__global__ void __launch_bounds__(TA_FLB_THREADS) ta_fast_band_fwd_kernel(const ta_flb_fwd_params p) {
    using T = ta_flb_traits<L>;
    extern __shared__ __align__(16) uint16_t ta_flb_smem[];
    uint16_t *s_qi = ta_flb_smem, *s_kp = s_qi + T::TILE, *s_buf = s_kp + T::TILE;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int32_t blk = (int32_t)(blockIdx.x % (uint32_t)p.n_blocks);
    const int32_t bh = (int32_t)(blockIdx.x / (uint32_t)p.n_blocks);
    const int32_t h = bh % p.heads, b = bh / p.heads, h_kv = h / p.group;
    const int32_t r0 = blk * TA_FLB_ROWS, off = p.seq_k - p.seq_q, ra = r0 + 16 * warp + g;
    /* chunk c's keys, values and latent queries at their positions -> buffer c % 2 */
    auto load_chunk = [&](int32_t c) {
        const int32_t j0 = r0 + off - p.width + c * TA_FLB_KEYS;
        uint16_t *kj = s_buf + (c & 1) * 3 * T::TILE;
        ta_fast_load_rows<L, TA_FLB_KEYS, TA_FLB_THREADS, true>(
            kj, p.k, ta_flb_at(p.k_st, b, h_kv), p.k_st.seq, j0, p.seq_k);
        ta_fast_load_rows<L, TA_FLB_KEYS, TA_FLB_THREADS, true>(
            kj + T::TILE, p.v, ta_flb_at(p.v_st, b, h_kv), p.v_st.seq, j0, p.seq_k);
        ta_flb_load_q<L>(kj + 2 * T::TILE, p.q, p.q_st, b, h, p.hist + j0 - off,
                         p.hist + p.seq_q);
        ta_fast_cp_commit();
    };
    const int64_t k_head = ta_flb_at(p.k_st, b, h_kv);
    const float scale_log2 = p.scale * 1.4426950408889634f;
    float o[4 * T::DT], m[2], l[2];
    int32_t lo[2], hi[2];
    ta_flb_band(ra, p.seq_q, off, p.width, lo, hi);
    /* q~_I: rows r0 .. (history rows come first); k_P(I): keys p_r0 .. */
    ta_flb_load_q<L>(s_qi, p.q, p.q_st, b, h, p.hist + r0, p.hist + p.seq_q);
    ta_fast_load_rows<L, TA_FLB_ROWS, TA_FLB_THREADS>(s_kp, p.k, k_head, p.k_st.seq, r0 + off,
                                                      p.seq_k);
    load_chunk(0); /* one group with q~_I and k_P(I) */
#pragma unroll
    for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;
    m[0] = m[1] = ta_fast_neg_inf();
    l[0] = l[1] = 0.0f;
    for (int32_t c = 0; c < p.n_chunks; ++c) {
        const int32_t j0 = r0 + off - p.width + c * TA_FLB_KEYS;
        const uint16_t *s_kj = s_buf + (c & 1) * 3 * T::TILE, *s_vj = s_kj + T::TILE;
        const uint16_t *s_qj = s_vj + T::TILE;
        float s[4 * T::NT], t[4 * T::NT], corr[2];
        /* 1. the next chunk loads while this one is used */
        if (c + 1 < p.n_chunks) {
            load_chunk(c + 1);
            ta_fast_cp_wait<1>();
        } else {
            ta_fast_cp_wait<0>();
        }
        __syncthreads();
        ta_fast_qk<T, L, TA_FLB_KEYS, BF16>(s, s_qi, s_kj, lane, warp);
        ta_fast_qk<T, L, TA_FLB_KEYS, BF16>(t, s_kp, s_qj, lane, warp);
        /* 2. l = s + alpha t in the band, online softmax; 3. o += p v */
        ta_flb_logits(s, t, p.alpha);
        ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, j0, tq, scale_log2, corr);
        ta_fast_rescale<T::DT>(o, corr);
        ta_fast_pv<T, L, TA_FLB_KEYS, BF16>(o, s, s_vj, lane);
        __syncthreads();
    }
    /* the merge with the keys below the band, per row (natural log units);
     * lse_main is read by the row's four lanes before any lane stores lse
     * (which may be the same array) */
    float lse_main[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        lse_main[r] = p.o_main && row < p.seq_q ? p.lse_main[(int64_t)bh * p.seq_q + row]
                                                : ta_fast_neg_inf();
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    __syncwarp(0xffffffffu);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        const int64_t at = (int64_t)bh * p.seq_q + row;
        const float lse_m = lse_main[r];
        float lse_b, lse, wb, wm;
        if (row >= p.seq_q) continue;
        lse_b = l[r] > 0.0f ? (m[r] + __log2f(l[r])) * 0.6931471805599453f : ta_fast_neg_inf();
        lse = fmaxf(lse_b, lse_m);
        if (lse != ta_fast_neg_inf())
            lse += log1pf(__expf(fminf(lse_b, lse_m) - lse));
        wb = lse_b == ta_fast_neg_inf() ? 0.0f : __expf(lse_b - lse) / l[r];
        wm = lse_m == ta_fast_neg_inf() ? 0.0f : __expf(lse_m - lse);
#pragma unroll
        for (int d = 0; d < T::DT; ++d) {
            const int32_t col = 8 * d + 2 * tq;
            float x0 = o[4 * d + 2 * r] * wb, x1 = o[4 * d + 2 * r + 1] * wb;
            if (wm != 0.0f) {
                float m0, m1;
                ta_fast_unpack<BF16>(
                    *reinterpret_cast<const uint32_t *>(p.o_main + at * L + col), &m0, &m1);
                x0 = __fmaf_rn(m0, wm, x0);
                x1 = __fmaf_rn(m1, wm, x1);
            }
            if (p.ctx) *reinterpret_cast<float2 *>(p.ctx + at * L + col) = make_float2(x0, x1);
            if (p.o) {
                uint16_t *orow = p.o + ta_flb_at(p.o_st, b, h) + (int64_t)row * p.o_st.seq + col;
                const uint32_t u = ta_fast_pack<BF16>(x0, x1);
                orow[0] = (uint16_t)(u & 0xffffu);
                orow[1] = (uint16_t)(u >> 16);
            }
        }
        if (tq == 0) p.lse[at] = lse;
    }
}

/* Warp product into c (16 keys x L of the warp, accumulator layout): c =
 * x^T y over the 64 rows of the block, x [64][LDP] (rows = query rows,
 * columns = the chunk's keys, the warp's keys from column 16 warp) by
 * ldmatrix.trans, y [64][LD] (rows = query rows) by ldmatrix.trans. */
template <int L, bool BF16>
TA_FAST_FN void ta_flb_xty(float (&c)[4 * ta_flb_traits<L>::DT], const uint16_t *x,
                           const uint16_t *y, int lane, int warp) {
    using T = ta_flb_traits<L>;
    const uint32_t a0 = ta_fast_smem_addr(x + (((lane >> 4) & 1) * 8 + (lane & 7)) * T::LDP +
                                          16 * warp + ((lane >> 3) & 1) * 8);
    const uint32_t b0 = ta_fast_smem_addr(y + (lane & 15) * T::LD + (lane >> 4) * 8);
#pragma unroll
    for (int i = 0; i < 4 * T::DT; ++i) c[i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < TA_FLB_ROWS / 16; ++kk) {
        uint32_t a[4];
        ta_fast_ldm_x4_t(a, a0 + 2u * (uint32_t)(16 * kk * T::LDP));
#pragma unroll
        for (int dn = 0; dn < L / 16; ++dn) {
            uint32_t bb[4];
            ta_fast_ldm_x4_t(bb, b0 + 2u * (uint32_t)(16 * kk * T::LD + 16 * dn));
            ta_fast_mma<BF16>(&c[8 * dn], a, bb[0], bb[1]);
            ta_fast_mma<BF16>(&c[8 * dn + 4], a, bb[2], bb[3]);
        }
    }
}

/* The warp's 16 rows of c (accumulator layout) times mul, plus (with_add)
 * add times add_mul, into rows 16 warp .. of a partial slot [64][L] (f32).
 * add by reference, not by pointer: the accumulators stay in registers. */
template <int L>
TA_FAST_FN void ta_flb_store_part(float *slot, const float (&c)[4 * ta_flb_traits<L>::DT],
                                  float mul, bool with_add,
                                  const float (&add)[4 * ta_flb_traits<L>::DT], float add_mul,
                                  int lane, int warp) {
    const int g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int d = 0; d < L / 8; ++d)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int e = 4 * d + 2 * r;
            float x0 = c[e] * mul, x1 = c[e + 1] * mul;
            if (with_add) {
                x0 = __fmaf_rn(add[e], add_mul, x0);
                x1 = __fmaf_rn(add[e + 1], add_mul, x1);
            }
            *reinterpret_cast<float2 *>(slot + (16 * warp + g + 8 * r) * L + 8 * d + 2 * tq) =
                make_float2(x0, x1);
        }
}

/* A lane's accumulator elements as storage-type pairs into a [64][LDP] tile
 * (rows of the warp, the chunk's keys as columns). */
template <int L, bool BF16>
TA_FAST_FN void ta_flb_store_tile(uint16_t *tile, const float (&x)[4 * ta_flb_traits<L>::NT],
                                  int lane, int warp) {
    using T = ta_flb_traits<L>;
    const int g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int n = 0; n < T::NT; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r)
            *reinterpret_cast<uint32_t *>(tile + (16 * warp + g + 8 * r) * T::LDP + 8 * n +
                                          2 * tq) =
                ta_fast_pack<BF16>(x[4 * n + 2 * r], x[4 * n + 2 * r + 1]);
}

/*
 * Backward: one block per (b, h, 64 rows) [r0, r0 + 64). The band keys of
 * its rows lie in the 64-key blocks blk - cw .. blk (cw = ceil(W / 64)),
 * taken as chunks c = 0 .. cw (chunk c: the keys of block blk - cw + c, the
 * last one the block's own). Partial slots per block, f32 [64][L] each,
 * slot c for the rows (keys) of block blk - cw + c (ta_cuda_fast_band_bwd's
 * layout): dq~ slot c < cw = the transposed term at the rows of chunk c's
 * keys; slot cw = the rows' own direct term plus the transposed term of
 * chunk cw; dk likewise (direct term at chunk c's keys; slot cw adds the
 * transposed term at the rows' own positions); dv slot c = chunk c's keys.
 */
template <int L, bool BF16>
__global__ void __launch_bounds__(TA_FLB_THREADS) ta_fast_band_bwd_kernel(const ta_flb_bwd_params p) {
    using T = ta_flb_traits<L>;
    extern __shared__ __align__(16) uint16_t ta_flb_smem[];
    uint16_t *s_qi = ta_flb_smem, *s_kp = s_qi + T::TILE, *s_doi = s_kp + T::TILE;
    uint16_t *s_buf = s_doi + T::TILE; /* two chunk buffers of k_J, v_J, q~_row(J) */
    uint16_t *s_p = s_buf + 6 * T::TILE, *s_dl = s_p + TA_FLB_ROWS * T::LDP;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int32_t blk = (int32_t)(blockIdx.x % (uint32_t)p.n_blocks);
    const int32_t bh = (int32_t)(blockIdx.x / (uint32_t)p.n_blocks);
    const int32_t h = bh % p.heads, b = bh / p.heads, h_kv = h / p.group;
    const int32_t r0 = blk * TA_FLB_ROWS, ra = r0 + 16 * warp + g, cw = p.n_chunks - 1;
    const int64_t k_head = ta_flb_at(p.k_st, b, h_kv), v_head = ta_flb_at(p.v_st, b, h_kv);
    const int64_t slots = (int64_t)TA_FLB_ROWS * L;
    const int64_t group0 = ((int64_t)bh * p.n_blocks + blk) * p.n_chunks * slots;
    const float scale_log2 = p.scale * 1.4426950408889634f, t_scale = p.alpha * p.scale;
    float dq[4 * T::DT], dkp[4 * T::DT], lse2[2], delta[2], da[2] = {0.0f, 0.0f};
    int32_t lo[2], hi[2];
    ta_flb_band(ra, p.seq, 0, p.width, lo, hi);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        const float x = row < p.seq ? p.lse[(int64_t)bh * p.seq + row] : ta_fast_neg_inf();
        /* a row that saw nothing: +inf, so p = 0 (never NaN) */
        lse2[r] = x == ta_fast_neg_inf() ? __int_as_float(0x7f800000) : x * 1.4426950408889634f;
        delta[r] = row < p.seq ? p.delta[(int64_t)bh * p.seq + row] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4 * T::DT; ++i) dq[i] = dkp[i] = 0.0f;
    ta_flb_load_q<L>(s_qi, p.q, p.q_st, b, h, r0, p.seq);
    ta_fast_load_rows<L, TA_FLB_ROWS, TA_FLB_THREADS>(s_kp, p.k, k_head, p.k_st.seq, r0, p.seq);
    ta_fast_load_rows<L, TA_FLB_ROWS, TA_FLB_THREADS>(s_doi, p.d_o, ta_flb_at(p.d_o_st, b, h),
                                                      p.d_o_st.seq, r0, p.seq);
    /* chunks before the sequence's first key are skipped (their slots are
     * never read): the first is chunk c0 */
    const int32_t c0 = cw > blk ? cw - blk : 0;
    auto load_chunk = [&](int32_t c) {
        const int32_t j0 = r0 + (c - cw) * TA_FLB_KEYS;
        uint16_t *kj = s_buf + (c & 1) * 3 * T::TILE;
        ta_fast_load_rows<L, TA_FLB_KEYS, TA_FLB_THREADS>(kj, p.k, k_head, p.k_st.seq, j0, p.seq);
        ta_fast_load_rows<L, TA_FLB_KEYS, TA_FLB_THREADS>(kj + T::TILE, p.v, v_head, p.v_st.seq,
                                                          j0, p.seq);
        ta_flb_load_q<L>(kj + 2 * T::TILE, p.q, p.q_st, b, h, j0, p.seq);
        ta_fast_cp_commit();
    };
    load_chunk(c0);
    for (int32_t c = c0; c <= cw; ++c) {
        const int32_t j0 = r0 + (c - cw) * TA_FLB_KEYS;
        const uint16_t *s_kj = s_buf + (c & 1) * 3 * T::TILE, *s_vj = s_kj + T::TILE;
        const uint16_t *s_qj = s_vj + T::TILE;
        float s[4 * T::NT], t[4 * T::NT], dp[4 * T::NT], part[4 * T::DT];
        if (c < cw) {
            load_chunk(c + 1);
            ta_fast_cp_wait<1>();
        } else {
            ta_fast_cp_wait<0>();
        }
        __syncthreads();
        /* 1. s, t, dp */
        ta_fast_qk<T, L, TA_FLB_KEYS, BF16>(s, s_qi, s_kj, lane, warp);
        ta_fast_qk<T, L, TA_FLB_KEYS, BF16>(t, s_kp, s_qj, lane, warp);
        ta_fast_qk<T, L, TA_FLB_KEYS, BF16>(dp, s_doi, s_vj, lane, warp);
        /* 2. p (in s) and dl (in dp), 0 outside the band; d_alpha's share */
#pragma unroll
        for (int i = 0; i < 4 * T::NT; ++i) {
            const int r = (i >> 1) & 1;
            const int32_t j = j0 + 8 * (i / 4) + 2 * tq + (i & 1);
            const bool in = j >= lo[r] && j < hi[r];
            const float x = __fmaf_rn(p.alpha, t[i], s[i]);
            const float pr = in ? ta_fast_exp2(__fmaf_rn(x, scale_log2, -lse2[r])) : 0.0f;
            const float dl = pr * (dp[i] - delta[r]);
            da[r] = __fmaf_rn(dl, t[i], da[r]);
            s[i] = pr;
            dp[i] = dl;
        }
        /* 3. dq~_I += dl k_J, dk_P(I) += dl q~_row(J) (dl as the A operand) */
        ta_fast_pv<T, L, TA_FLB_KEYS, BF16>(dq, dp, s_kj, lane);
        ta_fast_pv<T, L, TA_FLB_KEYS, BF16>(dkp, dp, s_qj, lane);
        ta_flb_store_tile<L, BF16>(s_p, s, lane, warp);
        ta_flb_store_tile<L, BF16>(s_dl, dp, lane, warp);
        __syncthreads();
        /* 4. the chunk's keys: dk_J, dq~_row(J), dv_J (warp: 16 keys); the
         * last chunk's keys are the rows' own, where dq, dkp add in */
        ta_flb_xty<L, BF16>(part, s_dl, s_qi, lane, warp);
        ta_flb_store_part<L>(p.part_dk + group0 + c * slots, part, p.scale, c == cw, dkp,
                             t_scale, lane, warp);
        ta_flb_xty<L, BF16>(part, s_dl, s_kp, lane, warp);
        ta_flb_store_part<L>(p.part_dq + group0 + c * slots, part, t_scale, c == cw, dq,
                             p.scale, lane, warp);
        ta_flb_xty<L, BF16>(part, s_p, s_doi, lane, warp);
        ta_flb_store_part<L>(p.part_dv + group0 + c * slots, part, 1.0f, false, part, 0.0f, lane,
                             warp);
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        da[r] += __shfl_xor_sync(0xffffffffu, da[r], 1);
        da[r] += __shfl_xor_sync(0xffffffffu, da[r], 2);
        if (row < p.seq && tq == 0) p.da_rows[(int64_t)bh * p.seq + row] = da[r] * p.scale;
    }
}

/* Sum parameters: one output tensor (dq~, dk or dv) of [B, n_heads, S, L]. */
struct ta_flb_sum_params {
    const uint16_t *main;   /* the fast SDPA's share [B, n_heads, S, L] contiguous, rows <
                               main_rows (NULL: none) */
    const float *part;      /* the band kernel's slots */
    void *out;              /* storage type (strides out_st), or f32 contiguous (out_f32) */
    ta_strides out_st;
    int64_t n4;             /* B n_heads S L / 4 */
    int32_t n_heads, group, seq, main_rows, n_blocks, n_chunks;
    int32_t out_f32;
};

/* One thread per 4 consecutive features of an output row m (block bm):
 * the main share, then for each query head of the group (dk, dv; dq~ its
 * own head) the blocks bm .. bm + cw ascending, block bm + c's slot cw - c. */
template <int L, bool BF16>
__global__ void __launch_bounds__(TA_CUDA_THREADS) ta_fast_band_sum_kernel(const ta_flb_sum_params p) {
    constexpr int L4 = L / 4;
    const int64_t slots = (int64_t)TA_FLB_ROWS * L;
    const int32_t cw = p.n_chunks - 1;
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < p.n4;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int32_t f = 4 * (int32_t)(idx % L4);
        const int64_t row_all = idx / L4; /* (b, hh, row) */
        const int32_t row = (int32_t)(row_all % p.seq), bm = row / TA_FLB_ROWS;
        const int64_t bhh = row_all / p.seq;
        const int32_t hh = (int32_t)(bhh % p.n_heads), b = (int32_t)(bhh / p.n_heads);
        const int64_t in_slot = (int64_t)(row % TA_FLB_ROWS) * L + f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (p.main && row < p.main_rows) {
            constexpr int DT = BF16 ? TA_BF16 : TA_F16;
            const size_t at = (size_t)(row_all * L + f);
            acc = make_float4(ta_cuda_load<DT>(p.main, at), ta_cuda_load<DT>(p.main, at + 1),
                              ta_cuda_load<DT>(p.main, at + 2), ta_cuda_load<DT>(p.main, at + 3));
        }
        for (int32_t gh = 0; gh < p.group; ++gh) {
            const int64_t bh = ((int64_t)b * p.n_heads + hh) * p.group + gh;
            for (int32_t c = cw; c >= 0 && bm + cw - c < p.n_blocks; --c) {
                const int64_t blk = bm + cw - c;
                const float4 x = *reinterpret_cast<const float4 *>(
                    p.part + ((bh * p.n_blocks + blk) * p.n_chunks + c) * slots + in_slot);
                acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
            }
        }
        if (p.out_f32) {
            *reinterpret_cast<float4 *>(static_cast<float *>(p.out) + row_all * L + f) = acc;
        } else {
            constexpr int DT = BF16 ? TA_BF16 : TA_F16;
            const size_t at = (size_t)((int64_t)b * p.out_st.batch + (int64_t)hh * p.out_st.head +
                                       (int64_t)row * p.out_st.seq + f);
            ta_cuda_store<DT>(p.out, at, acc.x);
            ta_cuda_store<DT>(p.out, at + 1, acc.y);
            ta_cuda_store<DT>(p.out, at + 2, acc.z);
            ta_cuda_store<DT>(p.out, at + 3, acc.w);
        }
    }
}

/* d_alpha: the rows' shares summed by one block in a fixed order (thread t
 * the rows t, t + 256, ... ascending, then a tree over the threads). */
__global__ void __launch_bounds__(256) ta_fast_band_da_kernel(const float *rows, int64_t n,
                                                              float *d_alpha) {
    __shared__ float sum[256];
    float acc = 0.0f;
    int64_t i;
    for (i = threadIdx.x; i < n; i += 256) acc += rows[i];
    sum[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sum[threadIdx.x] += sum[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *d_alpha = sum[0];
}

/* The kernels of latent width L and the storage type. */
struct ta_flb_kernels {
    const void *fwd, *bwd, *sum;
    size_t fwd_smem, bwd_smem;
};

template <int L, bool BF16> ta_flb_kernels ta_flb_kernels_of() {
    ta_flb_kernels k;
    k.fwd = reinterpret_cast<const void *>(&ta_fast_band_fwd_kernel<L, BF16>);
    k.bwd = reinterpret_cast<const void *>(&ta_fast_band_bwd_kernel<L, BF16>);
    k.sum = reinterpret_cast<const void *>(&ta_fast_band_sum_kernel<L, BF16>);
    k.fwd_smem = ta_flb_fwd_smem<L>();
    k.bwd_smem = ta_flb_bwd_smem<L>();
    return k;
}

int ta_flb_pick(int32_t lat, int bf16, ta_flb_kernels *k) {
    switch (lat) {
    case 64: *k = bf16 ? ta_flb_kernels_of<64, true>() : ta_flb_kernels_of<64, false>(); return 1;
    case 96: *k = bf16 ? ta_flb_kernels_of<96, true>() : ta_flb_kernels_of<96, false>(); return 1;
    case 128: *k = bf16 ? ta_flb_kernels_of<128, true>() : ta_flb_kernels_of<128, false>(); return 1;
    default: return 0;
    }
}

int32_t ta_flb_blocks(int32_t seq_q) { return (seq_q + TA_FLB_ROWS - 1) / TA_FLB_ROWS; }
/* Forward: chunks of 64 keys from p_r0 - W; backward: the key blocks blk -
 * ceil(W / 64) .. blk. */
int32_t ta_flb_chunks(int32_t width) { return (width + TA_FLB_ROWS + TA_FLB_KEYS - 1) / TA_FLB_KEYS; }
int32_t ta_flb_bwd_chunks(int32_t width) { return (width + TA_FLB_KEYS - 1) / TA_FLB_KEYS + 1; }
/* The band's width as the kernels take it: W, or S_k - 1 when W reaches
 * past the first key (the same band: p_i - W <= 0 either way), so the chunk
 * counts (and the backward's slots) stay within the sequence. */
int32_t ta_flb_width(const ta_plan *plan) { return ta_cuda_rband_w1(plan) - 1; }

/* The fields both band kernels' parameters share, from the plan. */
template <class P>
void ta_flb_fill(P *prm, const ta_plan *plan, const void *q, ta_strides q_st, const void *k,
                 const void *v, int32_t n_chunks) {
    const ta_problem *pr = &plan->p;
    prm->q = static_cast<const uint16_t *>(q);
    prm->k = static_cast<const uint16_t *>(k);
    prm->v = static_cast<const uint16_t *>(v);
    prm->q_st = q_st;
    prm->k_st = plan->layout.k;
    prm->v_st = plan->layout.v;
    prm->heads = pr->heads_q;
    prm->group = plan->group;
    prm->width = ta_flb_width(plan);
    prm->n_blocks = ta_flb_blocks(pr->seq_q);
    prm->n_chunks = n_chunks;
    prm->scale = pr->scale;
    prm->alpha = pr->rband_alpha;
}

} /* namespace */

ta_status ta_cuda_fast_band_prepare(const ta_plan *plan, int bwd) {
    ta_flb_kernels ks;
    if (!ta_flb_pick(plan->dim_k, plan->p.dtype == TA_BF16, &ks)) return TA_ERR_UNSUPPORTED;
    return bwd ? ta_cuda_smem_opt_in(ks.bwd, ks.bwd_smem, ks.bwd_smem)
               : ta_cuda_smem_opt_in(ks.fwd, ks.fwd_smem, ks.fwd_smem);
}

ta_status ta_cuda_fast_band_fwd(const ta_plan *plan, const ta_cuda_fast_band_fwd_args *a,
                                void *stream) {
    const ta_problem *pr = &plan->p;
    ta_flb_kernels ks;
    ta_flb_fwd_params prm;
    void *args[1] = {&prm};
    if (!ta_flb_pick(plan->dim_k, pr->dtype == TA_BF16, &ks)) return TA_ERR_UNSUPPORTED;
    memset(&prm, 0, sizeof prm);
    ta_flb_fill(&prm, plan, a->q, a->q_st, a->k, a->v, ta_flb_chunks(ta_flb_width(plan)));
    prm.o_main = static_cast<const uint16_t *>(a->o_main);
    prm.lse_main = a->lse_main;
    prm.o = static_cast<uint16_t *>(a->o);
    prm.ctx = a->ctx;
    prm.lse = a->lse;
    prm.o_st = a->o_st;
    prm.seq_q = pr->seq_q;
    prm.seq_k = pr->seq_k;
    prm.hist = a->hist;
    return ta_cuda_launch_threads(ks.fwd, (int64_t)pr->batch * pr->heads_q * prm.n_blocks,
                                  TA_FLB_THREADS, ks.fwd_smem, args, stream);
}

ta_status ta_cuda_fast_band_bwd(const ta_plan *plan, const ta_cuda_fast_band_bwd_args *a,
                                void *stream) {
    const ta_problem *pr = &plan->p;
    ta_flb_kernels ks;
    ta_flb_bwd_params prm;
    ta_status st;
    if (!ta_flb_pick(plan->dim_k, pr->dtype == TA_BF16, &ks)) return TA_ERR_UNSUPPORTED;
    memset(&prm, 0, sizeof prm);
    ta_flb_fill(&prm, plan, a->q, a->q_st, a->k, a->v, ta_flb_bwd_chunks(ta_flb_width(plan)));
    prm.d_o = static_cast<const uint16_t *>(a->d_o);
    prm.lse = a->lse;
    prm.delta = a->delta;
    prm.part_dq = a->part_dq;
    prm.part_dk = a->part_dk;
    prm.part_dv = a->part_dv;
    prm.da_rows = a->da_rows;
    prm.d_o_st = a->d_o_st;
    prm.seq = pr->seq_q;
    {
        void *args[1] = {&prm};
        if ((st = ta_cuda_launch_threads(ks.bwd, (int64_t)pr->batch * pr->heads_q * prm.n_blocks,
                                         TA_FLB_THREADS, ks.bwd_smem, args, stream)) != TA_OK)
            return st;
    }
    {
        const float *rows = a->da_rows;
        int64_t n = (int64_t)plan->n_lse;
        float *d_alpha = a->d_alpha;
        void *args[3] = {&rows, &n, &d_alpha};
        return ta_cuda_launch_threads(reinterpret_cast<const void *>(&ta_fast_band_da_kernel), 1,
                                      256, 0, args, stream);
    }
}

ta_status ta_cuda_fast_band_sum(const ta_plan *plan, const ta_cuda_fast_band_sum_args *a,
                                void *stream) {
    const ta_problem *pr = &plan->p;
    ta_flb_kernels ks;
    ta_flb_sum_params prm;
    const int64_t per_thread_blocks = 65536;
    void *args[1] = {&prm};
    int64_t blocks;
    if (!ta_flb_pick(plan->dim_k, pr->dtype == TA_BF16, &ks)) return TA_ERR_UNSUPPORTED;
    memset(&prm, 0, sizeof prm);
    prm.main = static_cast<const uint16_t *>(a->main);
    prm.part = a->part;
    prm.out = a->out;
    prm.out_st = a->out_st;
    prm.out_f32 = a->out_f32;
    prm.n_heads = a->which == 0 ? pr->heads_q : pr->heads_kv;
    prm.group = a->which == 0 ? 1 : plan->group;
    prm.seq = pr->seq_q;
    prm.main_rows = a->main_rows;
    prm.n_blocks = ta_flb_blocks(pr->seq_q);
    prm.n_chunks = ta_flb_bwd_chunks(ta_flb_width(plan));
    prm.n4 = (int64_t)pr->batch * prm.n_heads * pr->seq_q * plan->dim_k / 4;
    blocks = (prm.n4 + TA_CUDA_THREADS - 1) / TA_CUDA_THREADS;
    return ta_cuda_launch_args(ks.sum, blocks < per_thread_blocks ? blocks : per_thread_blocks, 0,
                               args, stream);
}

/* ---------------------------------------------------------------------------- */
/* the projections in fast mode: per-head products with a weight matrix          */
/* ---------------------------------------------------------------------------- */

namespace {

#define TA_FLP_TILE 64 /* output rows x columns per block */
#define TA_FLP_K    32 /* k-chunk */

/* c[b, h, r, n] = sum_k a[b, h, r, k] w[h][k][n] (BT: w[h][n][k]) in f32,
 * rounded once to CT. One block of 256 threads per (b, h, 64 rows, 64
 * columns), each thread a 4 x 4 micro-tile; a and w staged per 32-k chunk in
 * shared memory as f32 (a transposed, so a thread's four rows are adjacent). */
template <int AT, int CT, bool BT>
__global__ void __launch_bounds__(256) ta_fast_proj_kernel(const ta_cuda_fast_proj_args p) {
    __shared__ __align__(16) float sa[TA_FLP_K][TA_FLP_TILE + 4];
    __shared__ __align__(16) float sw[TA_FLP_K][TA_FLP_TILE + 4];
    const int tid = (int)threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int32_t row_tiles = (p.rows + TA_FLP_TILE - 1) / TA_FLP_TILE;
    const int32_t col_tiles = (p.n_dim + TA_FLP_TILE - 1) / TA_FLP_TILE;
    const int64_t blk = blockIdx.x;
    const int32_t ct = (int32_t)(blk % col_tiles), rt = (int32_t)(blk / col_tiles % row_tiles);
    const int32_t bh = (int32_t)(blk / col_tiles / row_tiles);
    const int32_t h = bh % p.heads, b = bh / p.heads;
    const int32_t r0 = rt * TA_FLP_TILE, n0 = ct * TA_FLP_TILE;
    const int64_t a_off = (int64_t)b * p.a_st.batch + (int64_t)h * p.a_st.head;
    const float *w = p.w + (int64_t)h * p.k_dim * p.n_dim;
    float acc[4][4];
    int32_t k0;
    int i, c;
    for (i = 0; i < 4; ++i)
        for (c = 0; c < 4; ++c) acc[i][c] = 0.0f;
    for (k0 = 0; k0 < p.k_dim; k0 += TA_FLP_K) {
        for (i = tid; i < TA_FLP_K * TA_FLP_TILE; i += 256) {
            /* a: consecutive threads along k (the row's contiguous features) */
            const int kk = i % TA_FLP_K, rr = i / TA_FLP_K;
            const int32_t k = k0 + kk, r = r0 + rr;
            sa[kk][rr] = k < p.k_dim && r < p.rows
                             ? ta_cuda_load<AT>(p.a, (size_t)(a_off + (int64_t)r * p.a_st.seq + k))
                             : 0.0f;
        }
        for (i = tid; i < TA_FLP_K * TA_FLP_TILE; i += 256) {
            /* w: consecutive threads along its contiguous dimension */
            const int kk = BT ? i % TA_FLP_K : i / TA_FLP_TILE;
            const int nn = BT ? i / TA_FLP_K : i % TA_FLP_TILE;
            const int32_t k = k0 + kk, n = n0 + nn;
            sw[kk][nn] = k < p.k_dim && n < p.n_dim
                             ? w[BT ? (int64_t)n * p.k_dim + k : (int64_t)k * p.n_dim + n]
                             : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TA_FLP_K; ++kk) {
            const float4 av = *reinterpret_cast<const float4 *>(&sa[kk][4 * ty]);
            const float4 wv = *reinterpret_cast<const float4 *>(&sw[kk][4 * tx]);
            const float ar[4] = {av.x, av.y, av.z, av.w}, wr[4] = {wv.x, wv.y, wv.z, wv.w};
            for (i = 0; i < 4; ++i)
                for (c = 0; c < 4; ++c) acc[i][c] = __fmaf_rn(ar[i], wr[c], acc[i][c]);
        }
        __syncthreads();
    }
    for (i = 0; i < 4; ++i) {
        const int32_t r = r0 + 4 * ty + i;
        if (r >= p.rows) continue;
        for (c = 0; c < 4; ++c) {
            const int32_t n = n0 + 4 * tx + c;
            if (n < p.n_dim)
                ta_cuda_store<CT>(p.c, (size_t)(p.c_off + (int64_t)b * p.c_st.batch +
                                                (int64_t)h * p.c_st.head +
                                                (int64_t)r * p.c_st.seq + n),
                                  acc[i][c]);
        }
    }
}

template <int AT, int CT> const void *ta_flp_of(int bt) {
    return bt ? reinterpret_cast<const void *>(&ta_fast_proj_kernel<AT, CT, true>)
              : reinterpret_cast<const void *>(&ta_fast_proj_kernel<AT, CT, false>);
}

/* The instantiation of (a's type, c's type, bt): storage types f16 / bf16
 * and f32 as they occur (q, dO: storage -> storage; ctx~, dq~: f32 or
 * storage -> storage). */
const void *ta_flp_pick(ta_dtype at, ta_dtype ct, int bt) {
    if (ct == TA_BF16) return at == TA_F32 ? ta_flp_of<TA_F32, TA_BF16>(bt) : ta_flp_of<TA_BF16, TA_BF16>(bt);
    if (ct == TA_F16) return at == TA_F32 ? ta_flp_of<TA_F32, TA_F16>(bt) : ta_flp_of<TA_F16, TA_F16>(bt);
    return NULL;
}

} /* namespace */

ta_status ta_cuda_fast_proj(const ta_cuda_fast_proj_args *a, void *stream) {
    const void *k = ta_flp_pick(a->a_dt, a->c_dt, a->bt);
    const int64_t blocks = (int64_t)a->batch * a->heads *
                           ((a->rows + TA_FLP_TILE - 1) / TA_FLP_TILE) *
                           ((a->n_dim + TA_FLP_TILE - 1) / TA_FLP_TILE);
    ta_cuda_fast_proj_args p = *a;
    void *args[1] = {&p};
    if (!k) return TA_ERR_UNSUPPORTED;
    return ta_cuda_launch_threads(k, blocks, 256, 0, args, stream);
}
