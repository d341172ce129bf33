/*
 * CUDA SDPA forward, TA_PRECISION_FAST, f16 / bf16, on Hopper's warpgroup MMA
 * (wgmma.mma_async, sm_90a only): the default fast forward for D = D_v in
 * {64, 96, 128} on an sm_90 device (cuda/ta_cuda_fast_fwd.cu picks it; its
 * candidates there). docs/cuda.md section 7.
 *
 * Same numerics and determinism as the mma.sync forward (cuda/ta_cuda_fast.cuh:
 * the online softmax, p fragments and output store are shared), other tiles:
 * one block of 2 warpgroups (256 threads) per (batch, head, Q tile of 128
 * rows); warpgroup w owns rows 64 w .. 64 w + 63, its warp i rows 16 i .. 16 i
 * + 15 of those (the accumulator layout of m64nN is the mma one per warp). K
 * tiles of 128 keys, the per-tile context's [k_begin, k_end), ascending; per K
 * tile:
 *   1. s = q k^T          wgmma m64n128k16, q and k from shared memory
 *   2-3. mask, online softmax (ta_fast_softmax_tile)
 *   4. o += p v           wgmma m64nDk16, p from registers (rounded to the
 *                         storage type), v from shared memory (N-major)
 * and the same step 5. Loads are cp.async by all 256 threads into two stages,
 * so tile j+1's k and v arrive while tile j computes.
 *
 * Shared memory (1024-byte aligned regions; every region is [rows][64]
 * elements of 128-byte rows per 64-feature block, 16-byte chunk c of row r
 * stored at chunk c ^ (r % 8): the 128-byte swizzle wgmma reads):
 *
 *   +---------------------+--------------------------+--------------------------+
 *   | q [DB][128][64]     | stage 0: k, v [DB][128][64] | stage 1: k, v [DB][128][64] |
 *   +---------------------+--------------------------+--------------------------+
 *   DB = ceil(D / 64) feature blocks.
 *
 * Descriptors (PTX ISA, "Matrix Descriptor Format" and the canonical layouts):
 * q and k are K-major (the feature dim is contiguous): start = block (f / 64)
 * + row group + 32 bytes per 16 features, stride offset 1024 (8 rows of 128
 * bytes), leading offset unused. v is N-major for o += p v (keys are K, the
 * contiguous feature dim is N): start = 2048 bytes per 16 keys, stride offset
 * 1024 (8 keys), leading offset = one feature block (128 keys x 128 bytes).
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"

namespace {

#define TA_WG_BM 128     /* Q tile rows: 2 warpgroups x 64 */
#define TA_WG_BN 128     /* keys per K tile */
#define TA_WG_THREADS 256

template <int D> struct ta_wg_traits {
    static constexpr int DB = (D + 63) / 64;              /* 64-feature blocks */
    static constexpr uint32_t Q_BYTES = DB * TA_WG_BM * 128;
    static constexpr uint32_t KV_BYTES = DB * TA_WG_BN * 128; /* one of k, v in a stage */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    static constexpr size_t SMEM = 1024 + Q_BYTES + 2 * STAGE_BYTES; /* + alignment slack */
    enum { NT = TA_WG_BN / 8, NO = D / 8 }; /* 8-key blocks of s, 8-feature blocks of o */
    static_assert(D % 16 == 0 && D <= 128, "wgmma forward: D in {64, 96, 128}");
};

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TA_WG_ENABLED 1
#include "ta_cuda_wgmma.inc"

/* The 64-bit shared-memory matrix descriptor: start address, leading and
 * stride byte offsets (16-byte units, 14 bits each), 128-byte swizzle. */
TA_FAST_FN uint64_t ta_wg_desc(uint32_t addr, uint32_t lead, uint32_t stride) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lead & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((stride & 0x3FFFFu) >> 4) << 32) | ((uint64_t)1 << 62);
}

TA_FAST_FN void ta_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TA_FAST_FN void ta_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
TA_FAST_FN void ta_wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* cp.async (generic proxy) writes, then wgmma (async proxy) reads */
TA_FAST_FN void ta_wg_proxy_fence() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keep a register's value (and its use) on this side of the surrounding asm:
 * wgmma reads its operands and writes its accumulators asynchronously until
 * the wait, so nothing may move across it. */
template <int N> TA_FAST_FN void ta_wg_keep(float (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(x[i])::"memory");
}
template <int N> TA_FAST_FN void ta_wg_keep_u(uint32_t (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(x[i][e])::"memory");
}

template <bool BF16>
TA_FAST_FN void ta_wg_ss(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_ss_n128_bf16(d, a, b, acc);
    else
        ta_wg_ss_n128_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n64_bf16(d, a, b);
    else
        ta_wg_rs_n64_f16(d, a, b);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[48], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n96_bf16(d, a, b);
    else
        ta_wg_rs_n96_f16(d, a, b);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n128_bf16(d, a, b);
    else
        ta_wg_rs_n128_f16(d, a, b);
}

/* rows [row0, row0 + R) of a slice -> the swizzled region at `region`
 * ([DB][R][64]); rows at or past n_valid read zeros. */
template <int D, int R>
TA_FAST_FN void ta_wg_load_rows(uint32_t region, const uint16_t *base, int64_t off, int64_t seq,
                                int32_t row0, int32_t n_valid) {
    constexpr int CH = D / 8;
    for (int i = (int)threadIdx.x; i < R * CH; i += TA_WG_THREADS) {
        const int r = i / CH, c = i % CH;
        const int32_t row = row0 + r;
        const bool ok = row < n_valid;
        const uint16_t *src = ok ? base + off + (int64_t)row * seq + 8 * c : base;
        ta_fast_cp16(region + (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4)),
                     src, ok ? 16 : 0);
    }
}
#endif

template <int D, bool BF16>
__global__ void __launch_bounds__(TA_WG_THREADS, 1)
    ta_cuda_fast_fwd_sm90_kernel(const __grid_constant__ ta_cuda_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_wg_traits<D> T;
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
            const uint32_t st0 = sq + T::Q_BYTES;
            ta_wg_load_rows<D, TA_WG_BM>(sq, q, c.q, p.lay.q.seq, row0, t.seq_q);
            ta_wg_load_rows<D, TA_WG_BN>(st0, k, c.k, p.lay.k.seq, c.k_begin * TA_WG_BN,
                                         c.key_len);
            ta_wg_load_rows<D, TA_WG_BN>(st0 + T::KV_BYTES, v, c.v, p.lay.v.seq,
                                         c.k_begin * TA_WG_BN, c.key_len);
            ta_fast_cp_commit();
        }
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t col0 = kt * TA_WG_BN;
            const uint32_t sk = sq + T::Q_BYTES + (uint32_t)((kt - c.k_begin) & 1) * T::STAGE_BYTES;
            const uint32_t sv = sk + T::KV_BYTES;
            float s[4 * T::NT];
            uint32_t pa[TA_WG_BN / 16][4];
            /* prefetch tile j+1 into the other stage, then wait for tile j */
            if (kt + 1 < c.k_end) {
                const uint32_t nk = sq + T::Q_BYTES +
                                    (uint32_t)((kt + 1 - c.k_begin) & 1) * T::STAGE_BYTES;
                ta_wg_load_rows<D, TA_WG_BN>(nk, k, c.k, p.lay.k.seq, col0 + TA_WG_BN,
                                             c.key_len);
                ta_wg_load_rows<D, TA_WG_BN>(nk + T::KV_BYTES, v, c.v, p.lay.v.seq,
                                             col0 + TA_WG_BN, c.key_len);
                ta_fast_cp_commit();
                ta_fast_cp_wait<1>();
            } else {
                ta_fast_cp_wait<0>();
            }
            ta_wg_proxy_fence();
            __syncthreads();
            /* step 1: s = q k^T, D / 16 k-steps of this warpgroup's 64 rows */
            ta_wg_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
                ta_wg_ss<BF16>(s,
                               ta_wg_desc(sq + (uint32_t)((kk >> 2) * (TA_WG_BM * 128) +
                                                          wg * (64 * 128) + (kk & 3) * 32),
                                          16u, 1024u),
                               ta_wg_desc(sk + (uint32_t)((kk >> 2) * (TA_WG_BN * 128) +
                                                          (kk & 3) * 32),
                                          16u, 1024u),
                               kk > 0);
            ta_wg_commit();
            ta_wg_wait_all();
            ta_wg_keep(s);
            /* steps 2-3 */
            ta_fast_softmax_tile<T::NT, T::NO>(s, o, m, l, lo, hi, col0, tq, scale_log2);
            /* step 4: o += p v over the tile's keys, 16 at a time */
#pragma unroll
            for (int kk = 0; kk < TA_WG_BN / 16; ++kk) ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
            ta_wg_keep(o);
            ta_wg_fence();
#pragma unroll
            for (int kk = 0; kk < TA_WG_BN / 16; ++kk)
                ta_wg_rs<BF16>(o, pa[kk],
                               ta_wg_desc(sv + (uint32_t)(kk * 2048), TA_WG_BN * 128u, 1024u));
            ta_wg_commit();
            ta_wg_wait_all();
            ta_wg_keep(o);
            ta_wg_keep_u(pa);
            __syncthreads(); /* every warpgroup is done with this stage */
        }
        ta_fast_store_rows<BF16, T::NO>(p, c, ra, tq, o, m, l);
    }
#else
    (void)p;
#endif
}

template <int D, bool BF16> static ta_fast_launch ta_wg_launch_of() {
    ta_fast_launch l;
    l.kernel = reinterpret_cast<const void *>(&ta_cuda_fast_fwd_sm90_kernel<D, BF16>);
    l.smem = ta_wg_traits<D>::SMEM;
    l.threads = TA_WG_THREADS;
    l.block_m = TA_WG_BM;
    l.block_n = TA_WG_BN;
    return l;
}

} /* namespace */

int ta_cuda_fast_sm90_launch(int32_t d, int bf16, ta_fast_launch *l) {
    switch (d) {
    case 64: *l = bf16 ? ta_wg_launch_of<64, true>() : ta_wg_launch_of<64, false>(); return 1;
    case 96: *l = bf16 ? ta_wg_launch_of<96, true>() : ta_wg_launch_of<96, false>(); return 1;
    case 128: *l = bf16 ? ta_wg_launch_of<128, true>() : ta_wg_launch_of<128, false>(); return 1;
    default: return 0;
    }
}
