/*
 * CUDA SDPA forward, TA_PRECISION_FAST, f16 / bf16: the decode-shaped
 * mma.sync kernel (sm_80+), candidates of the fast table appended after the
 * multi-stage ones (docs/cuda.md section 7, "Decode").
 *
 * A decode step has a few query rows (1..16, or a kv head's G query heads
 * packed as one head's rows: cuda/ta_cuda_fast_fwd.cu, ta_cuda_fast_pack_plan)
 * against a long cache cut into key splits. The 64-row Q tile of the other
 * mma.sync kernels leaves three of its four warps without a live row there,
 * so one warp per block does every product while the cache streams. This
 * kernel takes a Q tile of 16 rows, held by all NW = 4 warps, and cuts each
 * K tile of BN keys across the warps instead: warp w computes keys
 * w KW .. w KW + KW - 1 (KW = BN / 4) of every K tile, with its own online
 * softmax state (m, l, o) over its slices; at the end of the Q tile's K
 * tiles the four states are merged in shared memory, warp 0 first:
 *
 *   M = max_w m_w;  c_w = 2^(m_w - M);  L = sum_w l_w c_w;  O = sum_w o_w c_w
 *
 * (w ascending, f32), then o = O / L and lse = (M + log2 L) ln 2 (or the
 * split part: O / L and lse in f32, for the merge kernel). Per slice the
 * steps are those of the other mma.sync kernels (cuda/ta_cuda_fast.cuh:
 * s = q k^T, mask, base-2 online softmax with ex2.approx, p rounded to the
 * storage type, o += p v). Loads: ST buffers of k and v, K tile j + ST - 1
 * loading (cp.async by all 128 threads, one group per K tile) while tile j
 * computes; paged KV through the block table as the multi-stage kernels.
 *
 * Deterministic (fixed slices, fixed merge order, no atomics): the bits
 * depend on the problem, BN and the split count, not on ST, the SM count or
 * launch order (two candidates with equal BN are twins: test_cuda_fast).
 * It runs any problem the multi-stage kernels run (prefill too, where its
 * 16-row Q tiles read k and v four times as often as a 64-row tile); the
 * table's default picks it for split-K or paged problems of at most 16
 * (packed) query rows (ta_cuda_fast_table).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_host.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

template <int D, int BN, int ST> struct ta_fast_dec_traits {
    static constexpr int NW = 4;
    static constexpr int THREADS = 32 * NW;
    static constexpr int BM = 16;        /* Q tile rows, every warp's */
    static constexpr int LD = D + 8;     /* shared row, elements */
    static constexpr int KW = BN / NW;   /* keys per warp per K tile */
    static constexpr int NT = KW / 8;    /* 8-key column blocks of a warp's s */
    static constexpr int DT = D / 8;     /* 8-feature column blocks of o */
    static constexpr int MLD = D + 4;    /* merge rows, floats */
    static constexpr size_t LOADS = (size_t)(BM + 2 * ST * BN) * LD * 2;
    /* the merge: o [NW][BM][MLD], then m, l [NW][BM] (f32), over the loads */
    static constexpr size_t MERGE = (size_t)NW * BM * (MLD + 2) * 4;
    static constexpr size_t SMEM = LOADS > MERGE ? LOADS : MERGE;
    static_assert(KW % 16 == 0 && D % 16 == 0, "a warp's slice: mma k-steps of 16");
    static_assert(ST >= 2, "one K tile loads while another computes");
};

/* Row r (0..15) of the Q tile: the merged state of the four warps from
 * shared memory, columns [c0, c0 + CW), stored as o (one split) or as the
 * part of split `split` (f32 o / l and lse), lse by the thread of c0 = 0. */
template <class T, bool BF16, int CW>
__device__ __forceinline__ void ta_fast_dec_store(const ta_cuda_params &p, const ta_tile_ctx &c,
                                                  int32_t split, int32_t row, const float *so,
                                                  const float *sm, const float *sl, int r,
                                                  int c0) {
    float mx = ta_fast_neg_inf(), coef[T::NW], lsum = 0.0f, inv;
#pragma unroll
    for (int w = 0; w < T::NW; ++w) mx = fmaxf(mx, sm[w * T::BM + r]);
#pragma unroll
    for (int w = 0; w < T::NW; ++w) {
        /* a warp that saw nothing (m = -inf) adds nothing; mx = -inf: all 0 */
        const float mw = sm[w * T::BM + r];
        coef[w] = mw == ta_fast_neg_inf() ? 0.0f : ta_fast_exp2(mw - mx);
        lsum = __fmaf_rn(sl[w * T::BM + r], coef[w], lsum);
    }
    inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    {
        float acc[CW];
#pragma unroll
        for (int i = 0; i < CW; ++i) acc[i] = 0.0f;
#pragma unroll
        for (int w = 0; w < T::NW; ++w) {
            const float *src = so + (w * T::BM + r) * T::MLD + c0;
#pragma unroll
            for (int i = 0; i < CW; ++i) acc[i] = __fmaf_rn(src[i], coef[w], acc[i]);
        }
        const float lse =
            lsum > 0.0f ? (mx + __log2f(lsum)) * 0.6931471805599453f : ta_fast_neg_inf();
        if (p.t.num_splits == 1) {
            uint16_t *orow = static_cast<uint16_t *>(p.o) + c.o + (int64_t)row * p.lay.o.seq + c0;
#pragma unroll
            for (int i = 0; i < CW; i += 2)
                *reinterpret_cast<uint32_t *>(orow + i) =
                    ta_fast_pack<BF16>(acc[i] * inv, acc[i + 1] * inv);
            if (p.lse && c0 == 0) p.lse[c.lse + row] = lse;
        } else {
            const int64_t part = (int64_t)split * p.n_rows + c.lse + row;
            float *orow = p.part_o + part * p.head_dim_v + c0;
#pragma unroll
            for (int i = 0; i < CW; i += 2)
                *reinterpret_cast<float2 *>(orow + i) = make_float2(acc[i] * inv, acc[i + 1] * inv);
            if (c0 == 0) p.part_lse[part] = lse;
        }
    }
}

template <int D, int BN, int ST, bool BF16, bool PAGED>
__global__ void __launch_bounds__(128)
    ta_cuda_fast_decode_kernel(const __grid_constant__ ta_cuda_params p) {
    typedef ta_fast_dec_traits<D, BN, ST> T;
    extern __shared__ float4 ta_fast_dyn_smem[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fast_dyn_smem);
    uint16_t *sk = sq + T::BM * T::LD;   /* [ST][BN][LD] */
    uint16_t *sv = sk + ST * BN * T::LD; /* [ST][BN][LD] */
    float *so = reinterpret_cast<float *>(ta_fast_dyn_smem); /* the merge, after the K tiles */
    float *sm = so + T::NW * T::BM * T::MLD;
    float *sl = sm + T::NW * T::BM;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int32_t n_split = t.num_splits;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const ta_tile_ctx c = ta_cuda_fast_context(p, at, split);
        const int32_t row0 = at.qt * T::BM;
        const int32_t ra = row0 + (lane >> 2); /* this lane's rows: ra, ra + 8 (every warp's) */
        const ta_fast_pages pg = PAGED ? ta_fast_pages_of(p, at.b_local) : ta_fast_pages{};
        int32_t lo[2], hi[2];
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;

        __syncthreads(); /* the previous tile's merge is done with shared memory */
        if (c.k_begin < c.k_end) {
            ta_fast_load_rows<D, T::BM, T::THREADS>(sq, q, c.q, p.lay.q.seq, row0, t.seq_q);
#pragma unroll
            for (int st = 0; st < ST - 1; ++st) {
                const int32_t kt = c.k_begin + st;
                if (kt < c.k_end)
                    ta_fast_load_kv<D, BN, T::THREADS>(sk + st * BN * T::LD,
                                                       sv + st * BN * T::LD, p, c, kt, pg);
                ta_fast_cp_commit();
            }
        }
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t j = kt - c.k_begin, col0 = kt * BN + warp * T::KW;
            const uint16_t *skj = sk + ((j % ST) * BN + warp * T::KW) * T::LD;
            const uint16_t *svj = sv + ((j % ST) * BN + warp * T::KW) * T::LD;
            float s[4 * T::NT];
            ta_fast_cp_wait<ST - 2>();
            __syncthreads();
            {
                const int32_t kn = kt + ST - 1;
                const int bn = (j + ST - 1) % ST;
                if (kn < c.k_end)
                    ta_fast_load_kv<D, BN, T::THREADS>(sk + bn * BN * T::LD, sv + bn * BN * T::LD,
                                                       p, c, kn, pg);
                ta_fast_cp_commit();
            }
            /* this warp's slice: every warp reads the same 16 q rows (warp 0's) */
            ta_fast_qk<T, D, T::KW, BF16>(s, sq, skj, lane, 0);
            {
                float corr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, corr);
                ta_fast_rescale<T::DT>(o, corr);
            }
            ta_fast_pv<T, D, T::KW, BF16>(o, s, svj, lane);
        }
        /* the merge: each warp's (m, l, o) into shared memory (every cp.async
         * group still pending is empty; wait for them anyway), then per row */
        ta_fast_cp_wait<0>();
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int rr = (lane >> 2) + 8 * r;
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            if (tq == 0) {
                sm[warp * T::BM + rr] = m[r];
                sl[warp * T::BM + rr] = l[r];
            }
#pragma unroll
            for (int dn = 0; dn < T::DT; ++dn)
                *reinterpret_cast<float2 *>(so + (warp * T::BM + rr) * T::MLD + 8 * dn + 2 * tq) =
                    make_float2(o[4 * dn + 2 * r], o[4 * dn + 2 * r + 1]);
        }
        __syncthreads();
        {
            /* 8 threads per row, D / 8 columns each */
            const int r = (int)threadIdx.x >> 3, c0 = ((int)threadIdx.x & 7) * (D / 8);
            const int32_t row = row0 + r;
            if (row < t.seq_q)
                ta_fast_dec_store<T, BF16, D / 8>(p, c, split, row, so, sm, sl, r, c0);
        }
    }
}

template <int D, int BN, int ST, bool BF16> static ta_fast_launch ta_fast_dec_launch_of() {
    typedef ta_fast_dec_traits<D, BN, ST> T;
    ta_fast_launch l;
    l.kernel = reinterpret_cast<const void *>(&ta_cuda_fast_decode_kernel<D, BN, ST, BF16, false>);
    l.kernel_paged =
        reinterpret_cast<const void *>(&ta_cuda_fast_decode_kernel<D, BN, ST, BF16, true>);
    l.smem = T::SMEM;
    l.threads = T::THREADS;
    l.block_m = T::BM;
    l.block_n = BN;
    l.sm90 = 0;
    l.tma = 0;
    return l;
}

/* Per head dim: first the candidate for a GPU with 227 KB of shared memory
 * per block (H100), then one that fits the 99 KB of sm_86 / sm_89 (none at
 * D = 256). Equal BN, equal bits. */
template <bool BF16> static int ta_fast_dec_candidates(int32_t d, ta_fast_launch *c) {
    switch (d) {
    case 64:
        c[0] = ta_fast_dec_launch_of<64, 128, 3, BF16>();
        c[1] = ta_fast_dec_launch_of<64, 128, 2, BF16>();
        return 2;
    case 96:
        c[0] = ta_fast_dec_launch_of<96, 128, 3, BF16>();
        c[1] = ta_fast_dec_launch_of<96, 64, 3, BF16>();
        return 2;
    case 128:
        c[0] = ta_fast_dec_launch_of<128, 128, 3, BF16>();
        c[1] = ta_fast_dec_launch_of<128, 64, 2, BF16>();
        return 2;
    case 256:
        c[0] = ta_fast_dec_launch_of<256, 64, 3, BF16>();
        return 1;
    default: return 0;
    }
}

} /* namespace */

int ta_cuda_fast_decode_launch(int32_t d, int bf16, ta_fast_launch *l) {
    return bf16 ? ta_fast_dec_candidates<true>(d, l) : ta_fast_dec_candidates<false>(d, l);
}
