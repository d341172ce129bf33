/*
 * CUDA MTA forward, TA_PRECISION_FAST, f16 / bf16, sm_90a: the fold's
 * attention (kernel 3 of cuda/ta_cuda_fast_mta.cu, whose header has the
 * formulas) on Hopper's warpgroup MMA. tile_config 5 of the fast MTA table;
 * kernels 1 (kf) and 2 (diag, edge) are the same as for the other candidates.
 * docs/cuda.md section 7, "Fast MTA".
 *
 * One block of 2 warpgroups (256 threads) per (batch, query head, Q tile of
 * 128 rows); warpgroup w owns rows 64 w .. 64 w + 63, its warp i rows 16 i ..
 * 16 i + 15 of those (the accumulator layout of m64nN is the mma.sync one per
 * warp, so the softmax, the diag entries and the store are the shared
 * helpers). K tiles of BN = 128 keys, k_begin .. k_end - 1; per K tile:
 *   1. s = sum_a q(rows shifted by a - (c_q-1)) kf_a^T   c_q wgmma chains,
 *      q and kf_a from shared memory
 *   1b. s = diag next to the diagonal, edge from the window's start
 *   2-3. mask, online softmax (ta_fast_softmax_tile)
 *   4. o += p v                                         wgmma, p from registers
 *   5. o / l and lse (ta_fast_store_rows)
 *
 * The shifted q operand. wgmma reads a shared-memory A operand as 8-row core
 * matrices; with the 128-byte swizzle a start a rows down (a not a multiple
 * of 8) is not a core-matrix boundary, so q is kept without swizzle as
 * [D / 8][QROWS][8] elements: every row 16 bytes after the previous one
 * within a column of 8 features, the columns QROWS x 16 bytes apart (the
 * descriptor's leading offset; stride offset 128 bytes = 8 rows). A start
 * a x 16 bytes further is then exactly q from row a on. q region row rho holds
 * query row row0 - (c_q - 1) + rho (history rows from q_hist, zeros outside
 * [-q_history, S_q)), so chunk a's operand for warpgroup w starts at row
 * 64 w + a.
 *
 * Pipeline. A K tile's chunks (c_q of kf, then v: the mma.sync kernel's
 * sequence g = 0 .. total - 1) stream through a ring of NB swizzled buffers
 * ([DB][BN][64], kf K-major, v N-major) loaded by cp.async, NB - 2 chunks
 * ahead; one wgmma commit group per chunk. Per chunk g: wait until at most
 * one of this warpgroup's groups is pending (chunk g - 2's products, which
 * read the buffer chunk g + NB - 2 takes, are done), wait for chunk g's
 * bytes, one block barrier, issue chunk g + NB - 2's loads, then chunk g's
 * products: a kf chunk adds its chain to s (the first with accumulate off);
 * the v chunk waits for s, replaces the direct entries, runs the softmax,
 * rescales o and issues o += p v, which then runs under the next tile's
 * first kf chains.
 *
 * Measured and dropped (H200, 2026-12-02, bench/results/fast_mta_fwd_h200_
 * 2026-12-02.log, tile_config 6 there): warpgroup 1 one chunk behind
 * warpgroup 0, so that one's softmax runs under the other's chains (two
 * chunks ahead instead of three; the same bits, checked as twins): 4-14 %
 * slower on all 12 shapes (6 x 11, D = 128, S = 4096: 0.887 against 0.831 ms).
 *
 * Shared memory (1024-byte aligned): q [D/8][QROWS][8] (QROWS = 128 + 16, the
 * halo of c_q <= 16), then the ring [NB][DB][BN][64]: 197 KB at D = 96 and
 * 128 (NB = 5), 180 KB at D = 64 (NB = 10).
 *
 * Deterministic (no atomics, fixed orders); the products accumulate in
 * wgmma's order, so the bits differ from the mma.sync candidates' (each
 * within the same bound: docs/exactness.md section 9).
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_wg.cuh"
#include "ta_cuda_fast_mta.cuh"

namespace {

#define TA_MWG_BM      128 /* Q tile rows: 2 warpgroups x 64 */
#define TA_MWG_THREADS 256
#define TA_MWG_QROWS   144 /* BM + the halo of c_q <= 16, a multiple of 8 */
#define TA_MWG_BN      128

template <int D, int NB> struct ta_mwg_traits {
    static constexpr int DB = (D + 63) / 64;             /* 64-feature blocks of a ring buffer */
    static constexpr uint32_t Q_COL = TA_MWG_QROWS * 16; /* bytes per 8-feature column */
    static constexpr uint32_t Q_BYTES = ((D / 8) * Q_COL + 1023u) & ~1023u;
    static constexpr uint32_t CH_BYTES = DB * TA_MWG_BN * 128;             /* one chunk buffer */
    static constexpr size_t SMEM = 1024 + Q_BYTES + (size_t)NB * CH_BYTES; /* + alignment */
    enum { NT = TA_MWG_BN / 8, NO = D / 8 };
    static_assert(D % 16 == 0 && D <= 128, "fast MTA: D in {64, 96, 128}");
    static_assert(NB >= 3, "a ring of at least three chunks (NB - 2 ahead)");
    static_assert(SMEM <= 227 * 1024, "the ring must fit an sm_90 block");
};

#ifdef TA_WG_ENABLED
/* q rows [first, first + rows) -> the plain [D/8][QROWS][8] region (NULL
 * sources: zeros), by the block's threads with cp.async */
template <int D>
TA_FAST_FN void ta_mwg_load_q(uint32_t region, const ta_fast_mta_params &p, const ta_tile_ctx &c,
                              int32_t first, int32_t rows) {
    constexpr int CH = D / 8;
    for (int i = (int)threadIdx.x; i < rows * CH; i += TA_MWG_THREADS) {
        const int rho = i / CH, ch = i % CH;
        const uint16_t *src = ta_fast_mta_q_row(p, c, first + rho);
        ta_fast_cp16(region + (uint32_t)ch * (TA_MWG_QROWS * 16u) + (uint32_t)rho * 16u,
                     src ? src + 8 * ch : p.q, src ? 16 : 0);
    }
}

/* Issue s (+)= q(rows from `row` of the q region) kf^T over D in k-steps of
 * 16 (not committed): A without swizzle (two 8-feature columns per k-step,
 * Q_COL bytes apart), B the chunk buffer, K-major; the first k-step of the
 * tile's first chunk overwrites s. */
template <int D, bool BF16>
TA_FAST_FN void ta_mwg_qkf(float (&s)[TA_MWG_BN / 2], uint32_t sq, int row, uint32_t buf,
                           bool first) {
    constexpr uint32_t QC = TA_MWG_QROWS * 16u;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        ta_wg_ss<BF16>(
            s, ta_wg_desc_plain(sq + (uint32_t)(2 * kk) * QC + (uint32_t)row * 16u, QC, 128u),
            ta_wg_desc(buf + (uint32_t)((kk >> 2) * (TA_MWG_BN * 128) + (kk & 3) * 32), 16u, 1024u),
            first && kk == 0 ? 0 : 1);
}
#endif

template <int D, int NB, bool BF16>
__global__ void __launch_bounds__(TA_MWG_THREADS, 1)
    ta_fast_mta_fwd_wg_kernel(const __grid_constant__ ta_fast_mta_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_mwg_traits<D, NB> T;
    constexpr int BN = TA_MWG_BN;
    constexpr int AHEAD = NB - 2; /* chunks loading ahead of chunk g */
    extern __shared__ float4 ta_mwg_dyn_smem[];
    const uint32_t sq = (ta_fast_smem_addr(ta_mwg_dyn_smem) + 1023u) & ~1023u;
    const uint32_t ring = sq + T::Q_BYTES;
    const int32_t cq = p.conv_q, n_ch = cq + 1;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int wg = warp >> 2, tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * TA_MWG_BM, wrow0 = row0 + 64 * wg + 16 * (warp & 3);
        const int32_t ra = wrow0 + (lane >> 2); /* this lane's rows: ra, ra + 8 */
        const ta_fast_mta_regions rg = ta_fast_mta_regions_of(p, at);
        const int32_t total = (c.k_end - c.k_begin) * n_ch;
        int32_t lo[2], hi[2];
        float o[4 * T::NO], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        float s[4 * T::NT];
        uint32_t pa[BN / 16][4];
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::NO; ++i)
            o[i] = 0.0f;

        __syncthreads(); /* the previous tile is done with shared memory */
        if (total <= 0) {
            ta_fast_store_rows<BF16, T::NO>(p, c, ra, tq, o, m, l);
            continue;
        }
        /* chunk g: K tile k_begin + g / n_ch, part g % n_ch (a < c_q: kf_a;
         * c_q: v), into ring buffer g % NB */
        auto load_chunk = [&](int32_t g) {
            const int32_t part = g % n_ch, col0 = (c.k_begin + g / n_ch) * BN;
            const uint32_t dst = ring + (uint32_t)(g % NB) * T::CH_BYTES;
            if (part < cq)
                ta_wg_load_rows<D, BN, TA_MWG_THREADS>(dst, p.kf, rg.kf_off + part * D,
                                                       (int64_t)cq * D, col0, c.key_len);
            else
                ta_wg_load_rows<D, BN, TA_MWG_THREADS>(dst, v, c.v, p.lay.v.seq, col0, c.key_len);
        };
        /* prologue: q (with its halo) and chunk 0 as group 0, chunks 1 ..
         * AHEAD - 1 one group each (empty past the last chunk) */
        ta_mwg_load_q<D>(sq, p, c, row0 - (cq - 1), TA_MWG_BM + cq - 1);
        for (int32_t g = 0; g < AHEAD; ++g) {
            if (g < total) load_chunk(g);
            ta_fast_cp_commit();
        }
        for (int32_t g = 0; g < total; ++g) {
            const int32_t part = g % n_ch, col0 = (c.k_begin + g / n_ch) * BN;
            const uint32_t buf = ring + (uint32_t)(g % NB) * T::CH_BYTES;
            ta_wg_wait<1>(); /* chunk g - 2's products are done */
            ta_fast_cp_wait<AHEAD - 1>();
            ta_wg_proxy_fence();
            __syncthreads(); /* chunk g visible; every warp is past chunk g - 2 */
            if (g + AHEAD < total) load_chunk(g + AHEAD); /* into chunk g - 2's buffer */
            ta_fast_cp_commit();
            if (part < cq) { /* step 1 */
                ta_wg_fence();
                ta_mwg_qkf<D, BF16>(s, sq, 64 * wg + part, buf, part == 0);
                ta_wg_commit();
                continue;
            }
            ta_wg_wait<0>(); /* s done, and the previous tile's o += p v */
            ta_wg_keep(s);
            ta_wg_keep(o);
            ta_wg_keep_u(pa);
            ta_fast_mta_direct_tile<T::NT>(s, p, rg, wrow0, ra, col0, tq); /* step 1b */
            {                                                              /* steps 2-3 */
                float cr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, cr);
                ta_fast_rescale<T::NO>(o, cr);
            }
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
            ta_wg_fence(); /* step 4 */
            ta_wg_rs_rows<D, BN, BF16>(o, pa, buf);
            ta_wg_commit();
        }
        ta_wg_wait<0>();
        ta_wg_keep(o);
        ta_wg_keep_u(pa);
        ta_fast_store_rows<BF16, T::NO>(p, c, ra, tq, o, m, l); /* step 5 */
    }
#else
    (void)p;
#endif
}

template <int D, int NB, bool BF16> static int ta_mwg_of(ta_cuda_fast_mta_wg *w) {
    w->kernel = reinterpret_cast<const void *>(&ta_fast_mta_fwd_wg_kernel<D, NB, BF16>);
    w->smem = ta_mwg_traits<D, NB>::SMEM;
    w->threads = TA_MWG_THREADS;
    w->block_m = TA_MWG_BM;
    w->block_n = TA_MWG_BN;
    return 1;
}

} /* namespace */

/* (cuda/ta_cuda_fast_mta.cuh) */
int ta_cuda_fast_mta_wg_launch(int32_t d, int bf16, ta_cuda_fast_mta_wg *w) {
    switch (d) {
    case 64: return bf16 ? ta_mwg_of<64, 10, true>(w) : ta_mwg_of<64, 10, false>(w);
    case 96: return bf16 ? ta_mwg_of<96, 5, true>(w) : ta_mwg_of<96, 5, false>(w);
    case 128: return bf16 ? ta_mwg_of<128, 5, true>(w) : ta_mwg_of<128, 5, false>(w);
    default: return 0;
    }
}
