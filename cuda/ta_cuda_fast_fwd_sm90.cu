/*
 * CUDA SDPA forward, TA_PRECISION_FAST, f16 / bf16, on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a only): the default fast forward on an sm_90 device
 * for every head dim of the table, D = D_v in {64, 96, 128, 256}
 * (cuda/ta_cuda_fast_fwd.cu picks it; its candidates there). docs/cuda.md
 * section 7.
 *
 * Same numerics and determinism as the mma.sync forward (cuda/ta_cuda_fast.cuh:
 * the online softmax, p fragments and output store are shared), other tiles:
 * one block of 2 warpgroups (256 threads) per (batch, head, Q tile of 128
 * rows); warpgroup w owns rows 64 w .. 64 w + 63, its warp i rows 16 i .. 16 i
 * + 15 of those (the accumulator layout of m64nN is the mma one per warp). K
 * tiles of BN keys (128; 64 for D = 64 and 256), the per-tile context's [k_begin,
 * k_end), ascending; per K tile:
 *   1. s = q k^T          wgmma m64nBNk16, q and k from shared memory
 *   2-3. mask, online softmax (ta_fast_softmax_tile)
 *   4. o += p v           wgmma m64nDk16, p from registers (rounded to the
 *                         storage type), v from shared memory (N-major)
 * and the same step 5. Loads are cp.async by all 256 threads, two buffers
 * each of k and v. Pipeline per tile j (p_j already in registers): one block
 * barrier (k_j+1 and v_j have landed), then the loads of k_j+2 and v_j+1, then
 * s = q k_j+1^T and o += p_j v_j issued together; the softmax of tile j+1 runs
 * once s is done while o += p v still runs (a warpgroup barrier keeps ptxas
 * from sinking it past the second wait); then o is rescaled and p_j+1 formed.
 *
 * Shared memory (1024-byte aligned regions; every region is [rows][64]
 * elements of 128-byte rows per 64-feature block, 16-byte chunk c of row r
 * stored at chunk c ^ (r % 8): the 128-byte swizzle wgmma reads):
 *
 *   +---------------------+--------------------------+--------------------------+
 *   | q [DB][128][64]     | k [2][DB][BN][64]        | v [2][DB][BN][64]        |
 *   +---------------------+--------------------------+--------------------------+
 *   DB = ceil(D / 64) feature blocks; 161 KB at D = 128, 193 KB at D = 256.
 *
 * Descriptors (PTX ISA, "Matrix Descriptor Format" and the canonical layouts):
 * q and k are K-major (the feature dim is contiguous): start = block (f / 64)
 * + row group + 32 bytes per 16 features, stride offset 1024 (8 rows of 128
 * bytes), leading offset unused. v is N-major for o += p v (keys are K, the
 * contiguous feature dim is N): start = 2048 bytes per 16 keys, stride offset
 * 1024 (8 keys), leading offset = one feature block (BN keys x 128 bytes).
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_wg.cuh"

namespace {

#define TA_WG_BM 128     /* Q tile rows: 2 warpgroups x 64 */
#define TA_WG_THREADS 256

/* BN keys per K tile: 128 for D = 96, 128; 64 for D = 256 (o's 128 registers
 * per thread leave room for a 64-key s only) and for D = 64, where 64-key tiles
 * need 120 registers and two blocks share an SM (__launch_bounds__ below): the
 * two blocks' softmax and products interleave, which one block's lockstep
 * warpgroups do not (measured on an H100: 1.08-1.23x PyTorch flash, against
 * 0.86-1.03x with one block of 128-key tiles). */
template <int D, int BN> struct ta_wg_traits {
    static constexpr int DB = (D + 63) / 64;              /* 64-feature blocks */
    static constexpr uint32_t Q_BYTES = DB * TA_WG_BM * 128;
    static constexpr uint32_t KV_BYTES = DB * BN * 128; /* one k or v buffer */
    static constexpr size_t SMEM = 1024 + Q_BYTES + 4 * KV_BYTES; /* + alignment slack */
    enum { NT = BN / 8, NO = D / 8 }; /* 8-key blocks of s, 8-feature blocks of o */
    static_assert(D % 16 == 0 && D <= 256, "wgmma forward: D in {64, 96, 128, 256}");
    static_assert(BN == 64 || BN == 128, "s = q k^T: m64n64 or m64n128");
};

#ifdef TA_WG_ENABLED
/* The k and v buffers of K tile j (two of each, by parity):
 * q | k[0] | k[1] | v[0] | v[1]. */
template <int D, int BN> TA_FAST_FN uint32_t ta_wg_kbuf(uint32_t sq, int32_t j) {
    typedef ta_wg_traits<D, BN> T;
    return sq + T::Q_BYTES + (uint32_t)(j & 1) * T::KV_BYTES;
}
template <int D, int BN> TA_FAST_FN uint32_t ta_wg_vbuf(uint32_t sq, int32_t j) {
    typedef ta_wg_traits<D, BN> T;
    return sq + T::Q_BYTES + (uint32_t)(2 + (j & 1)) * T::KV_BYTES;
}

/* rows [row0, row0 + R) of a slice -> a swizzled region, by the block's threads */
template <int D, int R>
TA_FAST_FN void ta_wg_load(uint32_t region, const uint16_t *base, int64_t off, int64_t seq,
                           int32_t row0, int32_t n_valid) {
    ta_wg_load_rows<D, R, TA_WG_THREADS>(region, base, off, seq, row0, n_valid);
}

/* Issue s = q k^T for warpgroup wg's 64 rows: D / 16 k-steps (not committed). */
template <int D, int BN, bool BF16>
TA_FAST_FN void ta_wg_qk(float (&s)[BN / 2], uint32_t sq, uint32_t sk, int wg) {
    ta_wg_ss_rows<D, TA_WG_BM, BN, BF16>(s, sq, 64 * wg, sk);
}

/* Issue o += p v over the tile's keys, 16 at a time (not committed). */
template <int D, int BN, bool BF16>
TA_FAST_FN void ta_wg_pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4], uint32_t sv) {
    ta_wg_rs_rows<D, BN, BF16>(o, pa, sv);
}
#endif

template <int D, int BN, bool BF16>
__global__ void __launch_bounds__(TA_WG_THREADS, (D == 64 && BN == 64) ? 2 : 1)
    ta_cuda_fast_fwd_sm90_kernel(const __grid_constant__ ta_cuda_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_wg_traits<D, BN> T;
    extern __shared__ float4 ta_wg_dyn_smem[];
    const uint32_t sq = (ta_fast_smem_addr(ta_wg_dyn_smem) + 1023u) & ~1023u;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int wg = warp >> 2, tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);
    const uint16_t *k = static_cast<const uint16_t *>(p.k);
    const uint16_t *v = static_cast<const uint16_t *>(p.v);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * TA_WG_BM;
        const int32_t ra = row0 + 64 * wg + 16 * (warp & 3) + (lane >> 2); /* rows ra, ra + 8 */
        int32_t lo[2], hi[2];
        float o[4 * T::NO], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::NO; ++i) o[i] = 0.0f;

        __syncthreads(); /* the previous tile is done with shared memory */
        if (c.k_begin < c.k_end) {
            float s[4 * T::NT], corr[2];
            uint32_t pa[BN / 16][4];
            const int32_t kb = c.k_begin;
            /* prologue: q, k_kb; then k_kb+1 and v_kb in flight; s = q k_kb^T and
             * its softmax, p of tile kb in pa */
            ta_wg_load<D, TA_WG_BM>(sq, q, c.q, p.lay.q.seq, row0, t.seq_q);
            ta_wg_load<D, BN>(ta_wg_kbuf<D, BN>(sq, kb), k, c.k, p.lay.k.seq, kb * BN,
                                         c.key_len);
            ta_fast_cp_commit();
            if (kb + 1 < c.k_end)
                ta_wg_load<D, BN>(ta_wg_kbuf<D, BN>(sq, kb + 1), k, c.k, p.lay.k.seq,
                                             (kb + 1) * BN, c.key_len);
            ta_wg_load<D, BN>(ta_wg_vbuf<D, BN>(sq, kb), v, c.v, p.lay.v.seq,
                                         kb * BN, c.key_len);
            ta_fast_cp_commit();
            ta_fast_cp_wait<1>();
            ta_wg_proxy_fence();
            __syncthreads();
            ta_wg_fence();
            ta_wg_qk<D, BN, BF16>(s, sq, ta_wg_kbuf<D, BN>(sq, kb), wg);
            ta_wg_commit();
            ta_wg_wait<0>();
            ta_wg_keep(s);
            ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, kb * BN, tq, scale_log2, corr);
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
            /* tile kt < k_end - 1: p_kt is in pa; k_kt+1 and v_kt are in flight */
            for (int32_t kt = kb; kt + 1 < c.k_end; ++kt) {
                ta_fast_cp_wait<0>();
                ta_wg_proxy_fence();
                __syncthreads(); /* k_kt+1, v_kt visible; everyone is past tile kt-1's
                                    s = q k_kt^T and o += p v_kt-1 */
                if (kt + 2 < c.k_end)
                    ta_wg_load<D, BN>(ta_wg_kbuf<D, BN>(sq, kt + 2), k, c.k, p.lay.k.seq,
                                                 (kt + 2) * BN, c.key_len);
                ta_wg_load<D, BN>(ta_wg_vbuf<D, BN>(sq, kt + 1), v, c.v, p.lay.v.seq,
                                             (kt + 1) * BN, c.key_len);
                ta_fast_cp_commit();
                /* s = q k_kt+1^T and o += p_kt v_kt in flight together; the softmax of
                 * tile kt+1 runs while o += p v does */
                ta_wg_keep(o);
                ta_wg_fence();
                ta_wg_qk<D, BN, BF16>(s, sq, ta_wg_kbuf<D, BN>(sq, kt + 1), wg);
                ta_wg_commit();
                ta_wg_pv<D, BN, BF16>(o, pa, ta_wg_vbuf<D, BN>(sq, kt));
                ta_wg_commit();
                ta_wg_wait<1>(); /* s done; o += p v may still run */
                ta_wg_keep(s);
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, (kt + 1) * BN, tq, scale_log2,
                                            corr);
                /* the softmax finishes before the wait: ptxas would otherwise sink
                 * it past the wait (which costs it nothing in its model) and lose the
                 * overlap; it does not move instructions across a barrier, so a
                 * barrier of this warpgroup's 128 threads pins it */
                ta_wg_keep(s);
                ta_wg_keep_row(m, l, corr);
                ta_wg_bar(wg);
                ta_wg_wait<0>();
                ta_wg_keep(o);
                ta_wg_keep_u(pa);
                ta_fast_rescale<T::NO>(o, corr);
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
                    ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
            }
            /* the last tile: o += p v */
            ta_fast_cp_wait<0>();
            ta_wg_proxy_fence();
            __syncthreads();
            ta_wg_keep(o);
            ta_wg_fence();
            ta_wg_pv<D, BN, BF16>(o, pa, ta_wg_vbuf<D, BN>(sq, c.k_end - 1));
            ta_wg_commit();
            ta_wg_wait<0>();
            ta_wg_keep(o);
            ta_wg_keep_u(pa);
        }
        ta_fast_store_rows<BF16, T::NO>(p, c, ra, tq, o, m, l);
    }
#else
    (void)p;
#endif
}

template <int D, int BN, bool BF16> static ta_fast_launch ta_wg_launch_of() {
    ta_fast_launch l;
    l.kernel = reinterpret_cast<const void *>(&ta_cuda_fast_fwd_sm90_kernel<D, BN, BF16>);
    l.kernel_paged = nullptr; /* paged KV: the multi-stage mma.sync kernels only */
    l.smem = ta_wg_traits<D, BN>::SMEM;
    l.threads = TA_WG_THREADS;
    l.block_m = TA_WG_BM;
    l.block_n = BN;
    l.sm90 = 1;
    l.tma = 0;
    return l;
}

} /* namespace */

int ta_cuda_fast_sm90_launch(int32_t d, int bf16, ta_fast_launch *l) {
    switch (d) {
    case 64: *l = bf16 ? ta_wg_launch_of<64, 64, true>() : ta_wg_launch_of<64, 64, false>(); return 1;
    case 96: *l = bf16 ? ta_wg_launch_of<96, 128, true>() : ta_wg_launch_of<96, 128, false>(); return 1;
    case 128:
        *l = bf16 ? ta_wg_launch_of<128, 128, true>() : ta_wg_launch_of<128, 128, false>();
        return 1;
    case 256:
        *l = bf16 ? ta_wg_launch_of<256, 64, true>() : ta_wg_launch_of<256, 64, false>();
        return 1;
    default: return 0;
    }
}
