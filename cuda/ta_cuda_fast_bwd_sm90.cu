/*
 * CUDA SDPA backward, TA_PRECISION_FAST, f16 / bf16, on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a only), D = D_v in {64, 96, 128, 256}; and its
 * launcher ta_cuda_fast_bwd, which runs the exact kernels where these cannot
 * run (docs/cuda.md section 7).
 *
 * Deterministic without atomics: three kernels, each output element summed by
 * one thread in a fixed order.
 *   delta  D_i = <dO_i, o_i> in f32, from the stored o (8 lanes per row)
 *   dk/dv  one block of 2 warpgroups per (batch, kv head, 128 keys); warpgroup
 *          w owns keys 64 w .. 64 w + 63 and sums over the query heads of the
 *          kv group ascending, then their Q tiles of QM rows ascending (those
 *          that meet the key tile: ta_tile_k_rows):
 *            1. s^T  = k q^T         wgmma m64nQMk16, both from shared memory
 *            2. dp^T = v dO^T        (dk wanted)
 *            3. p^T  = exp(scale s^T - lse), 0 outside each row's keys
 *            4. dv  += p^T dO        p^T rounded to the storage type, from registers
 *            5. ds^T = p^T (dp^T - D), dk += ds^T q   ds^T rounded likewise
 *          then dk * scale and dv stored in the storage type.
 *   dq     one block of 2 warpgroups per (batch, query head, 128 rows), K tiles
 *          of BN keys ascending (the per-tile context's [k_begin, k_end)):
 *            s = q k^T, dp = dO v^T, p, ds = p (dp - D), dq += ds k
 *          then dq * scale stored.
 * Products accumulate in f32 on the tensor cores in the hardware's order; p
 * uses ex2.approx (base 2, the scale folded into one fma); p and ds are
 * rounded to the storage type before their products (as FlashAttention does).
 * The bits depend on the problem and the tiles below, never on the SM count
 * or launch order. Error bound: docs/exactness.md section 9.
 *
 * Tiles per head dim (ta_wgb_set_for, measured on an H100: docs/cuda.md
 * section 7): dk/dv Q tiles of QM rows, dq K tiles of BN keys
 *   D = 64:       QM = 128, BN = 128 (two q / dO buffers: the three-buffer
 *                 overlap below needs registers D = 64 at QM = 128 has not)
 *   D = 96, 128:  QM = 64, BN = 64
 *   D = 256:      QM = 32, BN = 32; the dk/dv accumulators (128 registers each
 *                 per thread) do not fit together, so the dk/dv pass runs as
 *                 two kernels, one per output; the dv one skips steps 2 and 5,
 *                 holds no v and takes QM = 64 (two buffers)
 *
 * Shared memory (regions as cuda/ta_cuda_wg.cuh: [DB][rows][64], 128-byte
 * swizzle, 1024-byte aligned; DB = ceil(D / 64)):
 *   dk/dv  | k [128] | v [128] | q [NB][QM] | dO [NB][QM] | rows [NB] |
 *          rows = lse2, delta, lo, hi of the Q tile's QM rows (16 QM bytes);
 *          NB = 3 (2 at D = 64 and in the dv kernel of D = 256); 164 KB at
 *          D = 128, 226.5 KB at D = 256 (the dv kernel: 195 KB)
 *   dq     | q [128] | dO [128] | k [3][BN] | v [3][BN] |
 *          161 KB at D = 128, 225 KB at D = 256
 * Loads are cp.async by all 256 threads, one tile ahead (the next Q tile for
 * dk/dv, the next K tile for dq). With three buffers the last products of a
 * tile (dv, dk += ...; dq += ds k) stay in flight while the next tile's
 * barrier, loads and first products are issued (measured: dq -5 %, dk/dv
 * -2..-8 % at D = 128, 256).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_host.cuh"
#include "ta_cuda_wg.cuh"
#include "ta_rope_load.h"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

#define TA_WGB_THREADS 256
#define TA_WGB_KEYS    128 /* dk/dv kernel: keys per block, 2 warpgroups x 64 */
#define TA_WGB_ROWS    128 /* dq kernel: query rows per block, 2 warpgroups x 64 */

/* Which outputs a dk/dv kernel computes. */
enum { TA_WGB_DKDV = 0, TA_WGB_DK = 1, TA_WGB_DV = 2 };

template <int D, int QM, int NB, bool HAS_V> struct ta_wgb_kv_traits {
    static constexpr int DB = (D + 63) / 64;
    static constexpr uint32_t KV_BYTES = DB * TA_WGB_KEYS * 128; /* the k or v tile */
    static constexpr uint32_t QT_BYTES = DB * QM * 128;          /* one q or dO buffer */
    static constexpr uint32_t ROW_BYTES = 16 * QM;               /* lse2, delta, lo, hi */
    /* k | v | q [NB] | dO [NB] | rows [NB]  (no v in the dv-only kernel) */
    static constexpr uint32_t Q0 = (HAS_V ? 2 : 1) * KV_BYTES, DO0 = Q0 + NB * QT_BYTES,
                              ROWS0 = DO0 + NB * QT_BYTES;
    static constexpr size_t SMEM = 1024 + ROWS0 + NB * ROW_BYTES; /* + alignment slack */
    static_assert(QM == 32 || QM == 64 || QM == 128, "s^T = k q^T: m64nQM");
    static_assert(SMEM <= 227 * 1024, "sm_90 opt-in shared memory");
    static_assert(D % 16 == 0 && D <= 256, "D in {64, 96, 128, 256}");
};

template <int D, int BN> struct ta_wgb_q_traits {
    static constexpr int DB = (D + 63) / 64;
    static constexpr uint32_t Q_BYTES = DB * TA_WGB_ROWS * 128; /* q or dO */
    static constexpr uint32_t KV_BYTES = DB * BN * 128;         /* one k or v buffer */
    static constexpr uint32_t K0 = 2 * Q_BYTES, V0 = K0 + 3 * KV_BYTES; /* 3 buffers each */
    static constexpr size_t SMEM = 1024 + V0 + 3 * KV_BYTES;
    static_assert(BN == 32 || BN == 64 || BN == 128, "s = q k^T: m64nBN");
    static_assert(SMEM <= 227 * 1024, "sm_90 opt-in shared memory");
};

#ifdef TA_WG_ENABLED
TA_FAST_FN float ta_wgb_pos_inf() { return __int_as_float(0x7f800000); }

/* lse in base 2 for p = 2^(s scale log2 e - lse2); a row that saw nothing
 * (lse = -inf) gets +inf, so its p is 0 and never NaN. */
TA_FAST_FN float ta_wgb_lse2(float lse) {
    return lse == ta_fast_neg_inf() ? ta_wgb_pos_inf() : lse * 1.4426950408889634f;
}

/* f32 rows of the rotary epilogue in shared memory: [128][D + 4] */
template <int D> struct ta_wgb_rope_tile {
    static constexpr int LD = D + 4;
    static constexpr uint32_t BYTES = 128u * LD * 4u;
};

/*
 * The rotary stage's epilogue for dq (kv_side 0) or dk (1): this thread's
 * accumulators (rows ra, ra + 8 of the block's 128, the mma layout) into the
 * f32 tile at `tile`, then (after the barrier) rows [row0, row0 + 128) below
 * n_valid turned back by the transpose (ta_rope_pair_t, one element each: the
 * same products as the pair's), times scale, stored in the storage type at
 * out + off + row * seq. The caller has waited for its products and
 * barriered the block before (the tile overwrites operand buffers).
 */
template <int D, bool BF16>
TA_FAST_FN void ta_wgb_rope_store(float *tile, const float (&acc)[D / 2], int ra_local, int tq,
                                  const ta_cuda_params &p, int kv_side, int32_t batch,
                                  int32_t head_kv, uint16_t *out, int64_t off, int64_t seq,
                                  int32_t row0, int32_t n_valid) {
    constexpr int LD = ta_wgb_rope_tile<D>::LD;
    const bool half = p.rope == TA_ROPE_HALF;
    const int32_t n = p.rope_pairs;
    const int32_t *pos = kv_side ? p.rope_args.pos_k : p.rope_args.pos_q;
    const int64_t pos0 = (int64_t)batch * (kv_side ? p.t.seq_k : p.t.seq_q);
    const int64_t tab = (int64_t)head_kv * p.rope_head_stride;
    /* (a version with two threads per row, and one with every row's position
     * loaded first, measured slower on the H100 ViT shape: 3.76 and 3.59 ms
     * against 3.27 ms forward + backward) */
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int d = 0; d < D / 8; ++d)
            *reinterpret_cast<float2 *>(tile + (ra_local + 8 * r) * LD + 8 * d + 2 * tq) =
                make_float2(acc[4 * d + 2 * r], acc[4 * d + 2 * r + 1]);
    __syncthreads();
#pragma unroll 1
    for (int i = (int)threadIdx.x; i < 128 * (D / 2); i += TA_WGB_THREADS) {
        const int rl = i / (D / 2), w = i % (D / 2);
        const int32_t row = row0 + rl;
        const float *x = tile + rl * LD;
        float y[2];
        int32_t tr;
        if (row >= n_valid) continue;
        tr = pos ? __ldg(pos + pos0 + row) : row;
        tr = tr < 0 ? 0 : tr >= p.rope_rows ? p.rope_rows - 1 : tr;
        {
            const float *cs = p.rope_args.cos + tab + (int64_t)tr * p.rope_row_stride;
            const float *sn = p.rope_args.sin + tab + (int64_t)tr * p.rope_row_stride;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = 2 * w + e;
                float a, b;
                y[e] = x[col];
                if (col >= 2 * n) continue; /* past the rotated dims */
                if (!half) {
                    a = x[col & ~1];
                    b = x[col | 1];
                    ta_rope_pair_t(&a, &b, __ldg(cs + col / 2), __ldg(sn + col / 2));
                    y[e] = (col & 1) ? b : a;
                } else if (col < n) {
                    a = x[col];
                    b = x[col + n];
                    ta_rope_pair_t(&a, &b, __ldg(cs + col), __ldg(sn + col));
                    y[e] = a;
                } else {
                    a = x[col - n];
                    b = x[col];
                    ta_rope_pair_t(&a, &b, __ldg(cs + col - n), __ldg(sn + col - n));
                    y[e] = b;
                }
            }
            *reinterpret_cast<uint32_t *>(out + off + (int64_t)row * seq + 2 * w) =
                ta_fast_pack<BF16>(y[0] * p.scale, y[1] * p.scale);
        }
    }
}
#endif

#ifdef TA_WG_ENABLED
/* Step 3 of the dk/dv kernel: p^T = 2^(s^T sl - lse2) in place, the lane's
 * columns (query rows) 8 n + 2 tq + e of the row arrays at rl (lse2 [QM],
 * delta [QM]) and rk (lo [QM], hi [QM]); MASK: 0 where key kj (+ 8 for the
 * second accumulator row) is outside the row's interval. Two instantiations
 * so that the unmasked one holds no compare and no load of rk (a per-element
 * test of the tile flag compiled to a branch per element). */
template <int NC, bool MASK>
TA_FAST_FN void ta_wgb_pt(float (&st)[4 * NC], const float *rl, const int32_t *rk, int qm,
                          int32_t kj, int tq, float sl) {
#pragma unroll
    for (int n = 0; n < NC; ++n) {
        const int col = 8 * n + 2 * tq;
        const float2 l2 = *reinterpret_cast<const float2 *>(rl + col);
        int2 lo = make_int2(0, 0), hi = make_int2(0, 0);
        if (MASK) {
            lo = *reinterpret_cast<const int2 *>(rk + col);
            hi = *reinterpret_cast<const int2 *>(rk + qm + col);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int e = i & 1;
            const int32_t j = kj + 8 * (i >> 1);
            const float x = ta_fast_exp2(__fmaf_rn(st[4 * n + i], sl, -(e ? l2.y : l2.x)));
            st[4 * n + i] =
                !MASK || (j >= (e ? lo.y : lo.x) && j < (e ? hi.y : hi.x)) ? x : 0.0f;
        }
    }
}
#endif

/*
 * delta_i = <dO_i, o_i> (f32, from the stored o) for the fast backward: 8
 * lanes per row, each summing the 16-byte chunks lane, lane + 8, ... of the
 * row's D_v features in order, then the 8 partial sums by a fixed shuffle tree
 * (the exact pass's delta kernel reads one element at a time: 6 % of the
 * backward at D = 128). Rows of [B, H, S_q]; o and dO rows 16-byte aligned.
 */
template <bool BF16>
__global__ void __launch_bounds__(TA_WGB_THREADS)
    ta_cuda_fast_delta_kernel(const void *o, const void *d_o, float *delta, int64_t n_rows,
                              int32_t head_dim_v, int32_t heads_q, int32_t seq_q, ta_strides o_st,
                              ta_strides d_o_st) {
    const int lane = (int)threadIdx.x & 31, sub = lane & 7;
    const int64_t n_warps = (int64_t)gridDim.x * (TA_WGB_THREADS / 32);
    for (int64_t w = (int64_t)blockIdx.x * (TA_WGB_THREADS / 32) + (threadIdx.x >> 5);
         4 * w < n_rows; w += n_warps) {
        const int64_t row = 4 * w + (lane >> 3);
        float acc = 0.0f;
        if (row < n_rows) {
            const int32_t si = (int32_t)(row % seq_q);
            const int32_t h = (int32_t)(row / seq_q % heads_q);
            const int32_t b = (int32_t)(row / seq_q / heads_q);
            const uint4 *orow = reinterpret_cast<const uint4 *>(
                static_cast<const uint16_t *>(o) + ta_strides_slice(&o_st, b, h) +
                (int64_t)si * o_st.seq);
            const uint4 *grow = reinterpret_cast<const uint4 *>(
                static_cast<const uint16_t *>(d_o) + ta_strides_slice(&d_o_st, b, h) +
                (int64_t)si * d_o_st.seq);
            for (int c = sub; c < head_dim_v / 8; c += 8) {
                const uint4 a = orow[c], g = grow[c];
                const uint32_t av[4] = {a.x, a.y, a.z, a.w}, gv[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float2 x, y;
                    if (BF16) {
                        x = make_float2(__uint_as_float(av[e] << 16), __uint_as_float(av[e] & 0xffff0000u));
                        y = make_float2(__uint_as_float(gv[e] << 16), __uint_as_float(gv[e] & 0xffff0000u));
                    } else {
                        __half2 ha, hg;
                        memcpy(&ha, &av[e], sizeof ha);
                        memcpy(&hg, &gv[e], sizeof hg);
                        x = __half22float2(ha);
                        y = __half22float2(hg);
                    }
                    acc = __fmaf_rn(x.x, y.x, acc);
                    acc = __fmaf_rn(x.y, y.y, acc);
                }
            }
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 4);
        if (row < n_rows && sub == 0) delta[row] = acc;
    }
}

/*
 * dk, dv of one block of 128 keys (see the top). OUT: TA_WGB_DKDV, _DK or _DV.
 */
template <int D, int QM, int OUT, bool OVL, bool BF16, bool ROPE>
__global__ void __launch_bounds__(TA_WGB_THREADS, 1)
    ta_cuda_fast_dkdv_sm90_kernel(const __grid_constant__ ta_cuda_params p) {
#ifdef TA_WG_ENABLED
    constexpr int NB = OVL ? 3 : 2; /* q / dO buffers */
    constexpr bool DK = OUT != TA_WGB_DV, DV = OUT != TA_WGB_DK;
    typedef ta_wgb_kv_traits<D, QM, NB, DK> T;
    constexpr int NC = QM / 8; /* 8-column blocks of s^T */
    static_assert(!ROPE || ta_wgb_rope_tile<D>::BYTES + 1024 <= T::SMEM, "rotary epilogue tile");
    extern __shared__ float4 ta_wgb_dyn_smem[];
    const uint32_t smem0 = ta_fast_smem_addr(ta_wgb_dyn_smem);
    const uint32_t sb = (smem0 + 1023u) & ~1023u;
    char *const gb = reinterpret_cast<char *>(ta_wgb_dyn_smem) + (sb - smem0);
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int wg = warp >> 2, tq = lane & 3, tid = (int)threadIdx.x;
    const int32_t n_kt = t.num_k_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt;
    const float sl = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);
    const uint16_t *k = static_cast<const uint16_t *>(p.k);
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, 1);
        const int32_t col0 = at.kt * TA_WGB_KEYS;
        /* this lane's keys: kj, kj + 8 (the accumulator rows) */
        const int32_t kj = col0 + 64 * wg + 16 * (warp & 3) + (lane >> 2);
        int32_t key_len, batch, q_begin, q_end, n_it;
        float dk[D / 2], dv[D / 2]; /* the one not wanted is dead code */
#pragma unroll
        for (int i = 0; i < D / 2; ++i)
            dk[i] = dv[i] = 0.0f;
        {
            const ta_tile_ctx kc = ta_cuda_context(p, at.b_local, at.h_kv * p.group, 0);
            key_len = kc.key_len;
            batch = kc.batch;
            ta_tile_k_rows(&t, at.kt, key_len, &q_begin, &q_end);
            n_it = p.group * (q_end - q_begin); /* (query head, Q tile) pairs */
            __syncthreads();                    /* the previous tile is done with shared memory */
            if (n_it > 0) {
                ta_wg_load_rows<D, TA_WGB_KEYS, TA_WGB_THREADS>(sb, k, kc.k, p.lay.k.seq, col0,
                                                                key_len);
                if (DK)
                    ta_wg_load_rows<D, TA_WGB_KEYS, TA_WGB_THREADS>(sb + T::KV_BYTES, v, kc.v,
                                                                    p.lay.v.seq, col0, key_len);
            }
        }
        /* Issue the loads of iteration it (query head h_kv group + it / nq, Q
         * tile q_begin + it % nq) into buffer it % NB: q and dO by cp.async, the
         * row arrays by plain stores (visible after the next barrier); returns
         * whether this thread's row sees every key of the tile. */
        auto issue = [&](int32_t it) -> int {
            const int32_t nq = q_end - q_begin;
            const int32_t h = at.h_kv * p.group + it / nq, qt = q_begin + it % nq;
            const int32_t row0 = qt * QM;
            const int buf = (int)(it % NB);
            const int64_t lse_off = ((int64_t)batch * p.heads_q + h) * t.seq_q;
            int whole = 1;
            ta_wg_load_rows<D, QM, TA_WGB_THREADS>(sb + T::Q0 + buf * T::QT_BYTES, q,
                                                   ta_strides_slice(&p.lay.q, batch, h),
                                                   p.lay.q.seq, row0, t.seq_q);
            ta_wg_load_rows<D, QM, TA_WGB_THREADS>(sb + T::DO0 + buf * T::QT_BYTES, d_o,
                                                   ta_strides_slice(&p.lay.d_o, batch, h),
                                                   p.lay.d_o.seq, row0, t.seq_q);
            ta_fast_cp_commit();
            if (tid < QM) {
                float *rl = reinterpret_cast<float *>(gb + T::ROWS0 + buf * T::ROW_BYTES);
                int32_t *rk = reinterpret_cast<int32_t *>(rl + 2 * QM);
                const int32_t r = row0 + tid;
                int32_t lo = 0, hi = 0;
                float l2 = ta_wgb_pos_inf(), dl = 0.0f;
                if (r < t.seq_q) {
                    l2 = ta_wgb_lse2(p.lse[lse_off + r]);
                    dl = p.delta[lse_off + r];
                    ta_tile_row_keys(&t, r, key_len, &lo, &hi);
                }
                rl[tid] = l2;
                rl[QM + tid] = dl;
                rk[tid] = lo;
                rk[QM + tid] = hi;
                whole = lo <= col0 && hi >= col0 + TA_WGB_KEYS;
            }
            return whole;
        };
        /* Iteration it in buffer it % NB, loaded one iteration ahead. OVL (three
         * buffers): dv += p^T dO and dk += ds^T q of iteration it stay in flight
         * until the wait for s^T of iteration it + 1 (the buffer loaded at
         * iteration it was last read two iterations before: free once every
         * warpgroup has passed that wait, which the barrier says). Without OVL
         * (two buffers) they finish within their iteration. */
        if (n_it > 0) {
            uint32_t pa[QM / 16][4], da[QM / 16][4]; /* operands of the products in flight */
            int whole_next = issue(0);
            for (int32_t it = 0; it < n_it; ++it) {
                const int buf = (int)(it % NB);
                const uint32_t sqb = sb + T::Q0 + buf * T::QT_BYTES;
                const uint32_t sdo = sb + T::DO0 + buf * T::QT_BYTES;
                const float *rl =
                    reinterpret_cast<const float *>(gb + T::ROWS0 + buf * T::ROW_BYTES);
                const int32_t *rk = reinterpret_cast<const int32_t *>(rl + 2 * QM);
                float st[QM / 2], dpt[QM / 2];
                int whole;
                ta_fast_cp_wait<0>();
                ta_wg_proxy_fence();
                /* this iteration's q, dO, rows visible; the next buffer is free */
                whole = __syncthreads_and(whole_next);
                if (it + 1 < n_it) whole_next = issue(it + 1);

                /* steps 1-2 */
                ta_wg_fence();
                ta_wg_ss_rows<D, TA_WGB_KEYS, QM, BF16>(st, sb, 64 * wg, sqb);
                ta_wg_commit();
                if (DK) {
                    ta_wg_ss_rows<D, TA_WGB_KEYS, QM, BF16>(dpt, sb + T::KV_BYTES, 64 * wg, sdo);
                    ta_wg_commit();
                    ta_wg_wait<1>(); /* the previous products and s^T are done */
                } else {
                    ta_wg_wait<0>();
                }
                ta_wg_keep(st);
                ta_wg_keep(dk);
                ta_wg_keep(dv);
                ta_wg_keep_u(pa);
                ta_wg_keep_u(da);
                /* step 3: p^T; lane columns (query rows) 8 n + 2 tq + e; the mask
                 * only where a row of the tile misses a key (block-uniform) */
                if (whole)
                    ta_wgb_pt<NC, false>(st, rl, rk, QM, kj, tq, sl);
                else
                    ta_wgb_pt<NC, true>(st, rl, rk, QM, kj, tq, sl);
                /* step 4: dv += p^T dO */
                if (DV) {
#pragma unroll
                    for (int kk = 0; kk < QM / 16; ++kk)
                        ta_fast_p_fragment<BF16, NC>(pa[kk], st, kk);
                    ta_wg_fence();
                    ta_wg_rs_rows<D, QM, BF16>(dv, pa, sdo);
                    ta_wg_commit();
                }
                /* step 5: ds^T = p^T (dp^T - D), dk += ds^T q */
                if (DK) {
                    if (DV)
                        ta_wg_wait<1>();
                    else
                        ta_wg_wait<0>();
                    ta_wg_keep(dpt);
#pragma unroll
                    for (int n = 0; n < NC; ++n) {
                        const float2 dl =
                            *reinterpret_cast<const float2 *>(rl + QM + 8 * n + 2 * tq);
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            dpt[4 * n + i] =
                                st[4 * n + i] * (dpt[4 * n + i] - ((i & 1) ? dl.y : dl.x));
                    }
#pragma unroll
                    for (int kk = 0; kk < QM / 16; ++kk)
                        ta_fast_p_fragment<BF16, NC>(da[kk], dpt, kk);
                    ta_wg_fence();
                    ta_wg_rs_rows<D, QM, BF16>(dk, da, sqb);
                    ta_wg_commit();
                }
                if (!OVL) { /* two buffers: the products finish in their iteration */
                    ta_wg_wait<0>();
                    ta_wg_keep(dk);
                    ta_wg_keep(dv);
                    ta_wg_keep_u(pa);
                    ta_wg_keep_u(da);
                }
            }
            ta_wg_wait<0>();
            ta_wg_keep(dk);
            ta_wg_keep(dv);
            ta_wg_keep_u(pa);
            ta_wg_keep_u(da);
        }
        /* step 6: dk * scale, dv in the storage type; keys past S_k skipped
         * (the rotary stage: dk turned back through shared memory) */
        {
            const ta_tile_ctx kc = ta_cuda_context(p, at.b_local, at.h_kv * p.group, 0);
            if (ROPE && DK) {
                __syncthreads(); /* every warpgroup's products are done with the buffers */
                ta_wgb_rope_store<D, BF16>(reinterpret_cast<float *>(gb), dk,
                                           64 * wg + 16 * (warp & 3) + (lane >> 2), tq, p, 1,
                                           kc.batch, at.h_kv, static_cast<uint16_t *>(p.dk),
                                           kc.dk, p.lay.dk.seq, col0, t.seq_k);
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int32_t j = kj + 8 * r;
                if (j >= t.seq_k) continue;
                if (DK && !ROPE && p.kv_out_f32) { /* the multi-query copies */
                    float *row = static_cast<float *>(p.dk) + kc.dk + (int64_t)j * p.lay.dk.seq;
#pragma unroll
                    for (int d = 0; d < D / 8; ++d)
                        *reinterpret_cast<float2 *>(row + 8 * d + 2 * tq) = make_float2(
                            dk[4 * d + 2 * r] * p.scale, dk[4 * d + 2 * r + 1] * p.scale);
                } else if (DK && !ROPE) {
                    uint16_t *row =
                        static_cast<uint16_t *>(p.dk) + kc.dk + (int64_t)j * p.lay.dk.seq;
#pragma unroll
                    for (int d = 0; d < D / 8; ++d)
                        *reinterpret_cast<uint32_t *>(row + 8 * d + 2 * tq) = ta_fast_pack<BF16>(
                            dk[4 * d + 2 * r] * p.scale, dk[4 * d + 2 * r + 1] * p.scale);
                }
                if (DV && p.kv_out_f32) {
                    float *row = static_cast<float *>(p.dv) + kc.dv + (int64_t)j * p.lay.dv.seq;
#pragma unroll
                    for (int d = 0; d < D / 8; ++d)
                        *reinterpret_cast<float2 *>(row + 8 * d + 2 * tq) =
                            make_float2(dv[4 * d + 2 * r], dv[4 * d + 2 * r + 1]);
                } else if (DV) {
                    uint16_t *row =
                        static_cast<uint16_t *>(p.dv) + kc.dv + (int64_t)j * p.lay.dv.seq;
#pragma unroll
                    for (int d = 0; d < D / 8; ++d)
                        *reinterpret_cast<uint32_t *>(row + 8 * d + 2 * tq) =
                            ta_fast_pack<BF16>(dv[4 * d + 2 * r], dv[4 * d + 2 * r + 1]);
                }
            }
        }
    }
#else
    (void)p;
#endif
}

/*
 * Multi-query attention (one kv head): the dk/dv kernel ran once per query
 * head into src [B, H, S_k, dim] (f32, contiguous); dst's element (b, 0, j,
 * e) = the heads' values summed in f32, h ascending, rounded once. One
 * thread per element pair.
 */
template <bool BF16>
__global__ void __launch_bounds__(TA_WGB_THREADS)
    ta_cuda_fast_mqa_sum_kernel(const float *src, void *dst, ta_strides dst_st, int64_t n2,
                                int32_t heads, int32_t seq_k, int32_t dim) {
    const int32_t dim2 = dim / 2;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n2;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t e = 2 * (int32_t)(i % dim2), j = (int32_t)(i / dim2 % seq_k);
        const int32_t b = (int32_t)(i / dim2 / seq_k);
        float x0 = 0.0f, x1 = 0.0f;
        for (int32_t h = 0; h < heads; ++h) {
            const float2 y = *reinterpret_cast<const float2 *>(
                src + (((int64_t)b * heads + h) * seq_k + j) * dim + e);
            x0 += y.x;
            x1 += y.y;
        }
        *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(dst) + (int64_t)b * dst_st.batch +
                                      (int64_t)j * dst_st.seq + e) = ta_fast_pack<BF16>(x0, x1);
    }
}

/*
 * The same for dk with the rotary stage: one thread per (b, key j, pair i)
 * of the rotation (interleaved: elements 2i, 2i + 1; half-split: i, i + n;
 * past the n rotated pairs, two unrotated elements), each summed over the
 * heads in f32, h ascending, then turned back once by the key's table row
 * (ta_rope_pair_t; one kv head: table 0), rounded once.
 */
template <bool BF16>
__global__ void __launch_bounds__(TA_WGB_THREADS)
    ta_cuda_fast_mqa_sum_rope_kernel(const float *src, void *dst, ta_strides dst_st, int64_t n2,
                                     int32_t heads, int32_t seq_k, int32_t dim,
                                     const ta_cuda_params p) {
    const int32_t dim2 = dim / 2, n = p.rope_pairs;
    const bool half = p.rope == TA_ROPE_HALF;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n2;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int32_t i = (int32_t)(x % dim2), j = (int32_t)(x / dim2 % seq_k);
        const int32_t b = (int32_t)(x / dim2 / seq_k);
        const bool turn = i < n;
        const int32_t ea = half ? (turn ? i : 2 * n + 2 * (i - n)) : 2 * i;
        const int32_t eb = half ? (turn ? i + n : ea + 1) : 2 * i + 1;
        uint16_t *row = static_cast<uint16_t *>(dst) + (int64_t)b * dst_st.batch +
                        (int64_t)j * dst_st.seq;
        float a = 0.0f, c = 0.0f;
        for (int32_t h = 0; h < heads; ++h) {
            const float *y = src + (((int64_t)b * heads + h) * seq_k + j) * dim;
            a += y[ea];
            c += y[eb];
        }
        if (turn) {
            int32_t tr = p.rope_args.pos_k ? __ldg(p.rope_args.pos_k + (int64_t)b * seq_k + j) : j;
            tr = tr < 0 ? 0 : tr >= p.rope_rows ? p.rope_rows - 1 : tr;
            ta_rope_pair_t(&a, &c, __ldg(p.rope_args.cos + (int64_t)tr * p.rope_row_stride + i),
                           __ldg(p.rope_args.sin + (int64_t)tr * p.rope_row_stride + i));
        }
        {
            const uint32_t u = ta_fast_pack<BF16>(a, c);
            row[ea] = (uint16_t)(u & 0xffffu);
            row[eb] = (uint16_t)(u >> 16);
        }
    }
}

/*
 * dq of one block of 128 query rows (see the top).
 */
template <int D, int BN, bool BF16, bool ROPE>
__global__ void __launch_bounds__(TA_WGB_THREADS, 1)
    ta_cuda_fast_dq_sm90_kernel(const __grid_constant__ ta_cuda_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_wgb_q_traits<D, BN> T;
    constexpr int NT = BN / 8; /* 8-key blocks of s */
    static_assert(!ROPE || ta_wgb_rope_tile<D>::BYTES + 1024 <= T::SMEM, "rotary epilogue tile");
    extern __shared__ float4 ta_wgb_dyn_smem[];
    const uint32_t sb = (ta_fast_smem_addr(ta_wgb_dyn_smem) + 1023u) & ~1023u;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int wg = warp >> 2, tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float sl = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);
    const uint16_t *k = static_cast<const uint16_t *>(p.k);
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * TA_WGB_ROWS;
        const int32_t ra = row0 + 64 * wg + 16 * (warp & 3) + (lane >> 2); /* rows ra, ra + 8 */
        int32_t lo[2], hi[2];
        float l2[2], dl[2], dq[D / 2];
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const bool in = ra + 8 * r < t.seq_q;
            l2[r] = in ? ta_wgb_lse2(p.lse[c.lse + ra + 8 * r]) : ta_wgb_pos_inf();
            dl[r] = in ? p.delta[c.lse + ra + 8 * r] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < D / 2; ++i)
            dq[i] = 0.0f;

        __syncthreads(); /* the previous tile is done with shared memory */
        if (c.k_begin < c.k_end) {
            ta_wg_load_rows<D, TA_WGB_ROWS, TA_WGB_THREADS>(sb, q, c.q, p.lay.q.seq, row0, t.seq_q);
            ta_wg_load_rows<D, TA_WGB_ROWS, TA_WGB_THREADS>(sb + T::Q_BYTES, d_o, c.d_o,
                                                            p.lay.d_o.seq, row0, t.seq_q);
            ta_wg_load_rows<D, BN, TA_WGB_THREADS>(sb + T::K0, k, c.k, p.lay.k.seq, c.k_begin * BN,
                                                   c.key_len);
            ta_wg_load_rows<D, BN, TA_WGB_THREADS>(sb + T::V0, v, c.v, p.lay.v.seq, c.k_begin * BN,
                                                   c.key_len);
            ta_fast_cp_commit();
        }
        /* K tile kt in buffer (kt - k_begin) % 3, loaded one tile ahead; dq += ds k
         * of tile kt stays in flight until the wait for s of tile kt + 1 (so the
         * buffer loaded at tile kt, last read two tiles before, is free once every
         * warpgroup has passed that wait: the barrier) */
        uint32_t da[BN / 16][4]; /* ds of the tile whose dq += ds k is in flight */
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int buf = (int)((kt - c.k_begin) % 3), nbuf = buf == 2 ? 0 : buf + 1;
            const uint32_t skb = sb + T::K0 + buf * T::KV_BYTES;
            const uint32_t svb = sb + T::V0 + buf * T::KV_BYTES;
            const int32_t col0 = kt * BN;
            float s[BN / 2], dp[BN / 2];
            ta_fast_cp_wait<0>();
            ta_wg_proxy_fence();
            __syncthreads(); /* k_kt, v_kt visible; buffer nbuf is free */
            if (kt + 1 < c.k_end) {
                ta_wg_load_rows<D, BN, TA_WGB_THREADS>(sb + T::K0 + nbuf * T::KV_BYTES, k, c.k,
                                                       p.lay.k.seq, col0 + BN, c.key_len);
                ta_wg_load_rows<D, BN, TA_WGB_THREADS>(sb + T::V0 + nbuf * T::KV_BYTES, v, c.v,
                                                       p.lay.v.seq, col0 + BN, c.key_len);
                ta_fast_cp_commit();
            }

            /* s = q k^T, dp = dO v^T */
            ta_wg_fence();
            ta_wg_ss_rows<D, TA_WGB_ROWS, BN, BF16>(s, sb, 64 * wg, skb);
            ta_wg_commit();
            ta_wg_ss_rows<D, TA_WGB_ROWS, BN, BF16>(dp, sb + T::Q_BYTES, 64 * wg, svb);
            ta_wg_commit();
            ta_wg_wait<1>(); /* the previous tile's dq += ds k and s are done */
            ta_wg_keep(s);
            ta_wg_keep(dq);
            ta_wg_keep_u(da);
            /* p = 2^(s scale log2 e - lse2), 0 outside the row's keys (compares
             * skipped when every row of the warp sees the whole tile) */
            {
                const bool whole =
                    lo[0] <= col0 && hi[0] >= col0 + BN && lo[1] <= col0 && hi[1] >= col0 + BN;
                const bool need_mask = __any_sync(0xffffffffu, !whole);
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) {
                    const int r = (i >> 1) & 1;
                    const int32_t j = col0 + 8 * (i / 4) + 2 * tq + (i & 1);
                    const float x = ta_fast_exp2(__fmaf_rn(s[i], sl, -l2[r]));
                    s[i] = need_mask && (j < lo[r] || j >= hi[r]) ? 0.0f : x;
                }
            }
            ta_wg_wait<0>();
            ta_wg_keep(dp);
            /* ds = p (dp - D); dq += ds k */
#pragma unroll
            for (int i = 0; i < BN / 2; ++i)
                dp[i] = s[i] * (dp[i] - dl[(i >> 1) & 1]);
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                ta_fast_p_fragment<BF16, NT>(da[kk], dp, kk);
            ta_wg_fence();
            ta_wg_rs_rows<D, BN, BF16>(dq, da, skb);
            ta_wg_commit();
        }
        ta_wg_wait<0>();
        ta_wg_keep(dq);
        ta_wg_keep_u(da);
        /* dq * scale in the storage type; rows past S_q skipped (the rotary
         * stage: turned back through shared memory) */
        if (ROPE) {
            __syncthreads(); /* every warpgroup's products are done with the buffers */
            ta_wgb_rope_store<D, BF16>(
                reinterpret_cast<float *>(reinterpret_cast<char *>(ta_wgb_dyn_smem) +
                                          (sb - ta_fast_smem_addr(ta_wgb_dyn_smem))),
                dq, 64 * wg + 16 * (warp & 3) + (lane >> 2), tq, p, 0, c.batch, c.head_kv,
                static_cast<uint16_t *>(p.dq), c.dq, p.lay.dq.seq, row0, t.seq_q);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int32_t row = ra + 8 * r;
            if (ROPE || row >= t.seq_q) continue;
            uint16_t *out = static_cast<uint16_t *>(p.dq) + c.dq + (int64_t)row * p.lay.dq.seq;
#pragma unroll
            for (int d = 0; d < D / 8; ++d)
                *reinterpret_cast<uint32_t *>(out + 8 * d + 2 * tq) = ta_fast_pack<BF16>(
                    dq[4 * d + 2 * r] * p.scale, dq[4 * d + 2 * r + 1] * p.scale);
        }
    }
#else
    (void)p;
#endif
}

/* ---- host ---- */

/* A dk/dv kernel and its Q tile rows. */
typedef struct ta_wgb_kv_kernel {
    const void *kernel;
    size_t smem;
    int32_t qm;
} ta_wgb_kv_kernel;

template <int D, int QM, int OUT, bool OVL, bool BF16, bool ROPE>
static ta_wgb_kv_kernel ta_wgb_kv_of() {
    ta_wgb_kv_kernel k;
    k.kernel = reinterpret_cast<const void *>(
        &ta_cuda_fast_dkdv_sm90_kernel<D, QM, OUT, OVL, BF16, ROPE>);
    k.smem = ta_wgb_kv_traits<D, QM, OVL ? 3 : 2, OUT != TA_WGB_DV>::SMEM;
    k.qm = QM;
    return k;
}

/* The kernels of one head dim and storage type. */
typedef struct ta_wgb_set {
    ta_wgb_kv_kernel kv[2]; /* dk/dv kernels (D = 256: the dk one, then the dv one) */
    int n_kv;
    const void *dq;
    size_t dq_smem;
    int32_t dq_bn; /* keys per K tile of the dq kernel */
} ta_wgb_set;

/* D < 256: one dk/dv kernel of Q tiles QM (OVL: three buffers); D = 256: a
 * dk kernel of Q tiles QM and a dv kernel of 64 (no v, two buffers). */
template <int D, int QM, bool OVL, int BN, bool BF16, bool ROPE> static ta_wgb_set ta_wgb_set_of() {
    ta_wgb_set s;
    if constexpr (D == 256) {
        s.kv[0] = ta_wgb_kv_of<D, QM, TA_WGB_DK, OVL, BF16, ROPE>();
        s.kv[1] = ta_wgb_kv_of<D, 64, TA_WGB_DV, false, BF16, false>(); /* no dk: no epilogue */
        s.n_kv = 2;
    } else {
        s.kv[0] = ta_wgb_kv_of<D, QM, TA_WGB_DKDV, OVL, BF16, ROPE>();
        s.kv[1] = s.kv[0];
        s.n_kv = 1;
    }
    s.dq = reinterpret_cast<const void *>(&ta_cuda_fast_dq_sm90_kernel<D, BN, BF16, ROPE>);
    s.dq_smem = ta_wgb_q_traits<D, BN>::SMEM;
    s.dq_bn = BN;
    return s;
}

template <bool BF16, bool ROPE> static int ta_wgb_set_for(int32_t d, ta_wgb_set *s) {
    switch (d) {
    case 64: *s = ta_wgb_set_of<64, 128, false, 128, BF16, ROPE>(); return 1;
    case 96: *s = ta_wgb_set_of<96, 64, true, 64, BF16, ROPE>(); return 1;
    case 128: *s = ta_wgb_set_of<128, 64, true, 64, BF16, ROPE>(); return 1;
    case 256: *s = ta_wgb_set_of<256, 32, true, 32, BF16, ROPE>(); return 1;
    default: return 0;
    }
}

/* The kernel set of head dim d for the storage type, with the rotary stage
 * or without: 1, or 0 if d has none. */
static int ta_wgb_set_pick(int32_t d, int bf16, int rope, ta_wgb_set *s) {
    if (rope) return bf16 ? ta_wgb_set_for<true, true>(d, s) : ta_wgb_set_for<false, true>(d, s);
    return bf16 ? ta_wgb_set_for<true, false>(d, s) : ta_wgb_set_for<false, false>(d, s);
}

/* The fast delta kernel on stream, 8 lanes per row of [B, H, S_q], at most
 * 65,536 blocks (grid-stride beyond). */
static ta_status ta_wgb_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta,
                              void *stream) {
    const int64_t rows_per_block = TA_WGB_THREADS / 8;
    const int64_t blocks = ((int64_t)plan->n_lse + rows_per_block - 1) / rows_per_block;
    const void *kernel = plan->p.dtype == TA_BF16
                             ? reinterpret_cast<const void *>(&ta_cuda_fast_delta_kernel<true>)
                             : reinterpret_cast<const void *>(&ta_cuda_fast_delta_kernel<false>);
    int64_t n_rows = (int64_t)plan->n_lse;
    int32_t dv = plan->p.head_dim_v, heads_q = plan->p.heads_q, seq_q = plan->p.seq_q;
    ta_strides o_st = plan->layout.o, d_o_st = plan->layout.d_o;
    const void *o = a->o, *d_o = a->d_o;
    void *args[9] = {&o, &d_o, &delta, &n_rows, &dv, &heads_q, &seq_q, &o_st, &d_o_st};
    return ta_cuda_launch_threads(kernel, blocks < 65536 ? blocks : 65536, TA_WGB_THREADS, 0, args,
                                  stream);
}

} /* namespace */

int ta_cuda_fast_bwd_aligned(const ta_plan *plan, const ta_bwd_args *a) {
    const ta_problem *pr = &plan->p;
    const ta_layout *l = &plan->layout;
    return ta_cuda_fast_rows_aligned(pr, a->q, &l->q, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->o, &l->o, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->k, &l->k, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->v, &l->v, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->d_o, &l->d_o, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->dq, &l->dq, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->dk, &l->dk, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->dv, &l->dv, 1);
}

ta_status ta_cuda_fast_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta,
                             void *stream) {
    return ta_wgb_delta(plan, a, delta, stream);
}

extern "C" ta_status ta_cuda_fast_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                      const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const void *ptrs[10] = {a->q, a->k, a->v, a->o, a->d_o, a->lse, a->dq, a->dk, a->dv, ws->delta};
    ta_wgb_set ks, ks_mqa;
    ta_tiling t_kv[2], t_q;
    ta_cuda_params prm_kv[2], prm_q;
    ta_cuda_launch_desc launch[3];
    /* the rotary stage: q and k turned once into the workspace, the kernels
     * read the copies (sub: their plan) and turn dq and dk back as they store */
    const int rope = plan->stages.load == TA_LOAD_ROPE;
    const void *rope_ptrs[4] = {plan->rope.cos, plan->rope.sin, plan->rope.pos_q,
                                plan->rope.pos_k};
    const ta_plan *pl = plan;
    const ta_bwd_args *aa = a;
    ta_plan sub, mqa;
    ta_bwd_args a2, a3;
    int sm90, n = 0, i;
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 10)) != TA_OK) return st;
    if ((st = ta_cuda_check_pointers(rope_ptrs, 4)) != TA_OK) return st; /* NULL: none */
    if (pr->head_dim != pr->head_dim_v || pr->tile_config < 0 ||
        !ta_wgb_set_pick(pr->head_dim, pr->dtype == TA_BF16, rope, &ks))
        return TA_ERR_UNSUPPORTED;
    if ((sm90 = ta_cuda_fast_is_sm90()) < 0) return TA_ERR_DEVICE;
    /* one backward configuration per head dim: tile_config picks the forward's
     * (a tuned pick, ta_tune_fwd, must not send the backward elsewhere); off
     * sm_90 the exact kernels run: bit-identical to REF, inside every fast
     * bound, deterministic */
    if (pr->tile_config == 1 && !sm90) return TA_ERR_UNSUPPORTED; /* as the forward */
    if (!sm90 && rope) return TA_ERR_UNSUPPORTED; /* the rotary epilogue: wgmma kernels only */
    if (!sm90) return ta_cuda_sdpa_bwd(plan, a, ws, stream);
    if (!ta_cuda_fast_bwd_aligned(plan, a)) return TA_ERR_UNSUPPORTED;
    if (rope) {
        ta_cuda_fast_rope_plan(plan, &sub);
        a2 = *a;
        a2.q = ws->rot_q;
        a2.k = ws->rot_k;
        pl = &sub;
        aa = &a2;
    }
    /* one kv head (the workspace holds the copies: ta_cuda_fast_mqa): the
     * dk/dv kernel per query head, on the plan with H kv heads whose k and
     * v head strides are 0, into the f32 copies; then their sum, h
     * ascending, rounded once (storage-type copies, rounded per head,
     * erred by far more than one rounding where the heads' shares cancel:
     * test_cuda_rope; one block per 128 keys walking H query heads left all
     * but a few SMs idle: at B 1, H 12, S 4096, D 64 the dk/dv kernel took
     * 858 us, the whole backward 1.0 ms; this way 0.31 ms, H100) */
    if (ws->mqa_dk) {
        /* with the rotary stage the dk/dv kernels store the rotated side's
         * sums; the sum kernel turns them back (ta_cuda_fast_mqa_sum_rope_kernel) */
        if (rope && !ta_wgb_set_pick(pr->head_dim, pr->dtype == TA_BF16, 0, &ks_mqa))
            return TA_ERR_UNSUPPORTED;
        if (rope)
            for (i = 0; i < ks.n_kv; ++i) ks.kv[i] = ks_mqa.kv[i];
        mqa = *pl;
        mqa.p.heads_kv = pr->heads_q;
        mqa.group = 1;
        mqa.layout.k.head = mqa.layout.v.head = 0;
        mqa.layout.dk = ta_strides_contiguous(pr->heads_q, pr->seq_k, pr->head_dim);
        mqa.layout.dv = ta_strides_contiguous(pr->heads_q, pr->seq_k, pr->head_dim_v);
        a3 = *aa;
        a3.dk = ws->mqa_dk;
        a3.dv = ws->mqa_dv;
        pl = &mqa;
        aa = &a3;
    }
    for (i = 0; i < ks.n_kv; ++i)
        if ((st = ta_cuda_tiling(pl, ks.kv[i].qm, TA_WGB_KEYS, TA_TILING_BWD, &t_kv[i])) !=
                TA_OK ||
            (st = ta_cuda_smem_opt_in(ks.kv[i].kernel, ks.kv[i].smem, ks.kv[i].smem)) != TA_OK)
            return st;
    if ((st = ta_cuda_tiling(pl, TA_WGB_ROWS, ks.dq_bn, TA_TILING_BWD, &t_q)) != TA_OK)
        return st;
    if ((st = ta_cuda_smem_opt_in(ks.dq, ks.dq_smem, ks.dq_smem)) != TA_OK) return st;
    if (rope && (st = ta_cuda_fast_rope_turn(plan, a->q, a->k, ws->rot_q, ws->rot_k, stream)) !=
                    TA_OK)
        return st;
    if ((st = ta_wgb_delta(pl, aa, ws->delta, stream)) != TA_OK) return st;
    ta_cuda_params_bwd(&prm_q, pl, &t_q, aa, ws);
    for (i = 0; i < ks.n_kv; ++i) {
        ta_cuda_params_bwd(&prm_kv[i], pl, &t_kv[i], aa, ws);
        prm_kv[i].kv_out_f32 = ws->mqa_dk != NULL;
        launch[n] = ta_cuda_launch_of(ks.kv[i].kernel, &prm_kv[i],
                                      (int64_t)pl->p.heads_kv * t_kv[i].num_k_tiles, 0,
                                      ks.kv[i].smem);
        launch[n++].threads = TA_WGB_THREADS;
    }
    launch[n] =
        ta_cuda_launch_of(ks.dq, &prm_q, (int64_t)pr->heads_q * t_q.num_q_tiles, 0, ks.dq_smem);
    launch[n++].threads = TA_WGB_THREADS;
    if ((st = ta_cuda_launch_batches(launch, n, a->seqlens_k, pr->batch, stream)) != TA_OK ||
        !ws->mqa_dk)
        return st;
    {
        const void *kernel = pr->dtype == TA_BF16
                                 ? reinterpret_cast<const void *>(&ta_cuda_fast_mqa_sum_kernel<true>)
                                 : reinterpret_cast<const void *>(&ta_cuda_fast_mqa_sum_kernel<false>);
        const void *kernel_rope =
            pr->dtype == TA_BF16
                ? reinterpret_cast<const void *>(&ta_cuda_fast_mqa_sum_rope_kernel<true>)
                : reinterpret_cast<const void *>(&ta_cuda_fast_mqa_sum_rope_kernel<false>);
        int32_t heads = pr->heads_q, seq_k = pr->seq_k;
        for (i = 0; i < 2; ++i) {
            const float *src = static_cast<const float *>(i ? ws->mqa_dv : ws->mqa_dk);
            void *dst = i ? a->dv : a->dk;
            ta_strides dst_st = i ? plan->layout.dv : plan->layout.dk;
            int32_t dim = i ? pr->head_dim_v : pr->head_dim;
            int64_t n2 = (int64_t)pr->batch * seq_k * dim / 2, blocks = (n2 + 255) / 256;
            void *args[8] = {&src, &dst, &dst_st, &n2, &heads, &seq_k, &dim, &prm_q};
            if ((st = ta_cuda_launch_threads(rope && i == 0 ? kernel_rope : kernel,
                                             blocks < 65536 ? blocks : 65536, TA_WGB_THREADS, 0,
                                             args, stream)) != TA_OK)
                return st;
        }
    }
    return TA_OK;
}
