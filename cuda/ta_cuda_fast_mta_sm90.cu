/*
 * CUDA MTA forward, TA_PRECISION_FAST, f16 / bf16, sm_90a: the fold's
 * attention (kernel 3 of cuda/ta_cuda_fast_mta.cu, whose header has the
 * formulas) on Hopper's warpgroup MMA. tile_config 5 of the fast MTA table;
 * kernels 1 (kf) and 2 (diag, edge) are the same as for the other candidates.
 * docs/cuda.md section 7, "Fast MTA". Below it, the fast MTA backward's dq
 * and dk/dv kernels on warpgroup MMA (kernels 5 and 6 of
 * cuda/ta_cuda_fast_mta_bwd.cu; tile_config 5, and 0 on sm_90).
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
#include "ta_cuda_fast_mta_bwd.cuh"

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
    if constexpr (TA_MWG_THREADS % CH == 0) {
        /* each thread one column ch, rows r0, r0 + RPP, ..: rows of the
         * slice by a stride, history rows and the padding through q_row */
        constexpr int RPP = TA_MWG_THREADS / CH;
        const int ch = (int)threadIdx.x % CH, r0 = (int)threadIdx.x / CH;
        const uint16_t *q = static_cast<const uint16_t *>(p.q) + c.q + 8 * ch;
        const int64_t seq = p.lay.q.seq;
        uint32_t dst = region + (uint32_t)ch * (TA_MWG_QROWS * 16u) + (uint32_t)r0 * 16u;
        for (int rho = r0; rho < rows; rho += RPP, dst += RPP * 16u) {
            const int32_t r = first + rho;
            const uint16_t *src;
            if (r >= 0 && r < p.t.seq_q) {
                src = q + (int64_t)r * seq;
            } else {
                src = ta_fast_mta_q_row(p, c, r);
                if (src) src += 8 * ch;
            }
            ta_fast_cp16(dst, src ? src : p.q, src ? 16 : 0);
        }
    } else {
        for (int i = (int)threadIdx.x; i < rows * CH; i += TA_MWG_THREADS) {
            const int rho = i / CH, ch = i % CH;
            const uint16_t *src = ta_fast_mta_q_row(p, c, first + rho);
            ta_fast_cp16(region + (uint32_t)ch * (TA_MWG_QROWS * 16u) + (uint32_t)rho * 16u,
                         src ? src + 8 * ch : p.q, src ? 16 : 0);
        }
    }
}

/* Issue s (+)= q(rows from `row` of the q region) kf^T over D in k-steps of
 * 16 (not committed): A without swizzle (two 8-feature columns per k-step,
 * Q_COL bytes apart), B the chunk buffer, K-major; the first k-step of the
 * tile's first chunk overwrites s. */
template <int D, int BN, bool BF16>
TA_FAST_FN void ta_mwg_qkf(float (&s)[BN / 2], uint32_t sq, int row, uint32_t buf, bool first) {
    constexpr uint32_t QC = TA_MWG_QROWS * 16u;
    const uint64_t qd = ta_wg_desc_plain(sq + (uint32_t)row * 16u, QC, 128u),
                   kd = ta_wg_desc(buf, 16u, 1024u);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        ta_wg_ss<BF16>(s, ta_wg_desc_add(qd, (uint32_t)(2 * kk) * QC),
                       ta_wg_desc_add(kd, (uint32_t)((kk >> 2) * (BN * 128) + (kk & 3) * 32)),
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
    /* the warpgroup, warp-uniform for the compiler (descriptors in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), tq = lane & 3;
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
                ta_mwg_qkf<D, BN, BF16>(s, sq, 64 * wg + part, buf, part == 0);
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

/* ---- the backward's dq on wgmma (kernel 5 of cuda/ta_cuda_fast_mta_bwd.cu) ---- */

#define TA_MDQ_BM 128 /* score rows of a block: 2 warpgroups x 64 */
#define TA_MDQ_BN 64  /* keys per K tile */

/* Shared memory (1024-byte aligned regions):
 *   q    [D/8][QROWS][8]    rows row0 - (c_q-1) .., without swizzle (the forward's)
 *   dO   [DB][128][64]      rows row0 .., swizzled (K-major A of dp = dO v^T)
 *   dC   2 x [BN/8][QROWS][8]  the K tiles' dC by parity, without swizzle, rows row0 ..
 *        (a start r rows down is dC from row r on: dq's shifted A operand);
 *        rows 128 .. QROWS - 1 zero (read only for output rows past the tile's)
 *   ring [NB][DB][BN][64]   the chunks, swizzled */
template <int D, int NB> struct ta_mdq_traits {
    static constexpr int DB = (D + 63) / 64;
    static constexpr uint32_t COL = TA_MWG_QROWS * 16; /* bytes per 8-column of q and dC */
    static constexpr uint32_t Q_BYTES = ((D / 8) * COL + 1023u) & ~1023u;
    static constexpr uint32_t DO_BYTES = DB * TA_MDQ_BM * 128;
    static constexpr uint32_t C_BYTES = ((TA_MDQ_BN / 8) * COL + 1023u) & ~1023u;
    static constexpr uint32_t CH_BYTES = DB * TA_MDQ_BN * 128;
    static constexpr size_t SMEM =
        1024 + Q_BYTES + DO_BYTES + 2 * (size_t)C_BYTES + (size_t)NB * CH_BYTES;
    enum { NT = TA_MDQ_BN / 8 };
    static_assert(NB >= 3, "a ring of at least three chunks (NB - 2 ahead)");
    static_assert(SMEM <= 227 * 1024, "the ring must fit an sm_90 block");
};

/*
 * One block of 2 warpgroups per (batch, query head, Q tile): score rows
 * row0 .. row0 + 127 (warpgroup w rows 64 w ..), dq of the first
 * 128 - (c_q - 1) of them (dq_r reads dC rows r .. r + c_q - 1; the tiles
 * overlap by c_q - 1 score rows). K tiles of 64 keys, those any of the 128
 * rows sees. The chunks of K tile t (the ring, as the forward's):
 *   S(t, a)  kf_a:  s (+)= q(rows shifted by a - (c_q-1)) kf_a^T  (SS, K-major)
 *   V(t)     v:     dp = dO v^T                                     (SS, K-major)
 *   Q(t, a)  kf_a:  dq += dC_t(rows shifted by c_q-1-a) kf_a         (SS: dC plain, kf N-major)
 * in the order S(t, *), V(t), Q(t - 1, *) (the last tile's Q chunks after
 * all), one commit group per chunk. dC_t (the direct entries from diag and
 * edge, P, dC = scale P (dp - D), 0 at the direct entries, rounded to the
 * storage type) is made after the second Q chunk is issued (the first with
 * c_q = 1; right after V(0) for t = 0), behind a wait_group 0: every issued
 * product has completed, so there is no overlap within a warpgroup here
 * (wait_group 1 would let Q(t - 1, a)'s last chain run on, but ptxas then
 * serialises the warpgroup's wgmma (C7514): it cannot tell which group
 * retired). dC_t goes into dC buffer t % 2 (Q(t - 1, *) reads the other;
 * Q(t - 2, *), the last readers of this one, have completed). Then dq + dq_band stored (F32: in
 * f32, the rotary stage). The same dC, kf and order of keys as the mma.sync kernel, its products
 * accumulated in wgmma's order: the bits differ (the same bound).
 */
template <int D, int NB, bool BF16, bool F32>
__global__ void __launch_bounds__(TA_MWG_THREADS, 1)
    ta_fast_mta_dq_wg_kernel(const __grid_constant__ ta_fmb_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_mdq_traits<D, NB> T;
    constexpr int BN = TA_MDQ_BN;
    constexpr int AHEAD = NB - 2; /* chunks loading ahead of chunk g */
    extern __shared__ float4 ta_mwg_dyn_smem[];
    const uint32_t smem0 = ta_fast_smem_addr(ta_mwg_dyn_smem);
    const uint32_t sq = (smem0 + 1023u) & ~1023u;
    const uint32_t sdo = sq + T::Q_BYTES, sdc = sdo + T::DO_BYTES, ring = sdc + 2 * T::C_BYTES;
    unsigned char *gdc = reinterpret_cast<unsigned char *>(ta_mwg_dyn_smem) + (sdc - smem0);
    const int32_t cq = p.conv_q, n_ch = 2 * cq + 1, out_rows = TA_MDQ_BM - (cq - 1);
    const int32_t q_first = cq > 1 ? 1 : 0; /* the Q chunk after which dC is made */
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    /* the warpgroup, warp-uniform for the compiler (descriptors in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float scale_log2 = p.scale * TA_LOG2E;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    /* dC rows 128 .. QROWS - 1 of both buffers: zeros, once */
    for (int i = (int)threadIdx.x; i < 2 * (BN / 8) * (TA_MWG_QROWS - TA_MDQ_BM);
         i += TA_MWG_THREADS) {
        const int b = i / ((BN / 8) * (TA_MWG_QROWS - TA_MDQ_BM)),
                  r = i % ((BN / 8) * (TA_MWG_QROWS - TA_MDQ_BM));
        *reinterpret_cast<uint4 *>(
            gdc + b * T::C_BYTES + (r / (TA_MWG_QROWS - TA_MDQ_BM)) * T::COL +
            (TA_MDQ_BM + r % (TA_MWG_QROWS - TA_MDQ_BM)) * 16) = make_uint4(0u, 0u, 0u, 0u);
    }

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * out_rows, wrow0 = row0 + 64 * wg + 16 * (warp & 3);
        const int32_t ra = wrow0 + (lane >> 2); /* this lane's rows: ra, ra + 8 */
        const int64_t head = (int64_t)(p.batch_begin + at.b_local) * p.heads_q + at.h;
        const int64_t kf_off = head * t.seq_k * cq * D;
        const float *diag = p.band > 0 ? p.diag + head * t.seq_q * p.band : nullptr;
        const float *edge = p.edge_n > 0 ? p.edge + head * t.seq_q * p.edge_n : nullptr;
        int32_t lo[2], hi[2], kt0 = 0, n_kt = 0;
        float lse2[2], dl[2], dq[D / 2], s[BN / 2], dp[BN / 2];
        ta_fmb_lane_rows(p, t, c, ra, lo, hi, lse2, dl);
        { /* the K tiles any of the 128 rows sees (lo and hi grow with the row) */
            int32_t l0, h0, l1, h1;
            const int32_t last = (row0 + TA_MDQ_BM < t.seq_q ? row0 + TA_MDQ_BM : t.seq_q) - 1;
            ta_tile_row_keys(&t, row0, c.key_len, &l0, &h0);
            ta_tile_row_keys(&t, last, c.key_len, &l1, &h1);
            if (h1 > l0) {
                kt0 = l0 / BN;
                n_kt = (h1 - 1) / BN + 1 - kt0;
            }
        }
#pragma unroll
        for (int i = 0; i < D / 2; ++i)
            dq[i] = 0.0f;
        const int32_t total = n_kt * n_ch;
        /* chunk g -> its step t (S(t, *), V(t), Q(t - 1, *)) and part (a < c_q:
         * S, c_q: V, c_q + 1 + a: Q) */
        struct chunk_cur {
            int32_t x, step, part; /* x = step n_ch + part */
        };
        /* cursor k of chunk g -> chunk g + 1's (no division: the parts step
         * by one but for the skipped Q chunks of step 0 and the last step's
         * missing S and V chunks) */
        auto advance = [&](chunk_cur &k, int32_t g) {
            int32_t y = g + 1 <= cq ? g + 1 : g + 1 + cq; /* step 0 has no Q chunks */
            if (y >= total) y += cq + 1;                  /* the last step has only them */
            k.part += y - k.x;
            k.x = y;
            while (k.part >= n_ch) {
                k.part -= n_ch;
                ++k.step;
            }
        };
        chunk_cur lc = {0, 0, 0}, mc = {0, 0, 0}; /* the next chunk to load, to use */
        auto load_chunk = [&](int32_t g) {
            const int32_t step = lc.step, part = lc.part;
            advance(lc, g);
            const int32_t col0 = (kt0 + step - (part > cq ? 1 : 0)) * BN;
            const uint32_t dst = ring + (uint32_t)(g % NB) * T::CH_BYTES;
            const int32_t a = part < cq ? part : part - cq - 1;
            if (part == cq)
                ta_wg_load_rows<D, BN, TA_MWG_THREADS>(dst, v, c.v, p.lay.v.seq, col0, c.key_len);
            else
                ta_wg_load_rows<D, BN, TA_MWG_THREADS>(dst, p.kf, kf_off + (int64_t)a * D,
                                                       (int64_t)cq * D, col0, t.seq_k);
        };
        /* dC of step tt's K tile from s and dp (complete) into buffer tt % 2 */
        auto make_dc = [&](int32_t tt) {
            const int32_t col0 = (kt0 + tt) * BN, col1 = col0 + BN - 1;
            const bool near = ta_fmb_near(p, t, diag, edge, wrow0, col0, col1);
            unsigned char *dst = gdc + (tt & 1) * T::C_BYTES +
                                 (64 * wg + 16 * (warp & 3) + (lane >> 2)) * 16 + 4 * tq;
            /* element pairs (2 i, 2 i + 1): row ra + 8 (i & 1), keys from 8 (i >> 1) + 2 tq
             * (s and dp are only read: a pending product may not have its
             * accumulators defined by other instructions, or ptxas serializes) */
            /* every key of the tile inside both rows' ranges and no direct entry:
             * ta_fmb_p_dc's arithmetic without its tests */
            const bool inner =
                !near && col0 >= lo[0] && col1 < hi[0] && col0 >= lo[1] && col1 < hi[1];
#pragma unroll
            for (int i = 0; i < BN / 4; ++i) {
                const int r = i & 1;
                const int32_t row = ra + 8 * r;
                float x[2], pr;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (inner)
                        x[e] = p.scale *
                               ta_fast_exp2(__fmaf_rn(s[2 * i + e], scale_log2, -lse2[r])) *
                               (dp[2 * i + e] - dl[r]);
                    else
                        ta_fmb_p_dc(p, diag, edge, near, row, col0 + 8 * (i >> 1) + 2 * tq + e,
                                    lo[r], hi[r], s[2 * i + e], dp[2 * i + e], lse2[r], dl[r],
                                    scale_log2, &pr, &x[e]);
                }
                *reinterpret_cast<uint32_t *>(dst + (i >> 1) * T::COL + (i & 1) * 128) =
                    ta_fast_pack<BF16>(x[0], x[1]);
            }
        };

        __syncthreads(); /* the previous tile is done with shared memory */
        if (total > 0) {
            /* prologue: q (with its halo), dO and chunk 0 as group 0, chunks
             * 1 .. AHEAD - 1 one group each (empty past the last chunk) */
            ta_mwg_load_q<D>(sq, p, c, row0 - (cq - 1), TA_MDQ_BM + cq - 1);
            ta_wg_load_rows<D, TA_MDQ_BM, TA_MWG_THREADS>(sdo, d_o, c.d_o, p.lay.d_o.seq, row0,
                                                          t.seq_q);
            for (int32_t g = 0; g < AHEAD; ++g) {
                if (g < total) load_chunk(g);
                ta_fast_cp_commit();
            }
        }
        for (int32_t g = 0; g < total; ++g) {
            if (g > 0) advance(mc, g - 1);
            const int32_t step = mc.step, part = mc.part;
            const uint32_t buf = ring + (uint32_t)(g % NB) * T::CH_BYTES;
            ta_wg_wait<1>(); /* chunk g - 2's products are done */
            ta_fast_cp_wait<AHEAD - 1>();
            ta_wg_proxy_fence(); /* also orders this thread's dC stores before wgmma reads */
            __syncthreads();     /* chunk g and dC visible; every warp is past chunk g - 2 */
            if (g + AHEAD < total) load_chunk(g + AHEAD); /* into chunk g - 2's buffer */
            ta_fast_cp_commit();
            ta_wg_fence();
            if (part < cq) {
                ta_mwg_qkf<D, BN, BF16>(s, sq, 64 * wg + part, buf, part == 0);
                ta_wg_commit();
            } else if (part == cq) {
                {
                    const uint64_t od = ta_wg_desc(sdo + (uint32_t)(64 * wg) * 128u, 16u, 1024u),
                                   vd = ta_wg_desc(buf, 16u, 1024u);
#pragma unroll
                    for (int kk = 0; kk < D / 16; ++kk)
                        ta_wg_ss<BF16>(
                            dp,
                            ta_wg_desc_add(
                                od, (uint32_t)((kk >> 2) * (TA_MDQ_BM * 128) + (kk & 3) * 32)),
                            ta_wg_desc_add(vd, (uint32_t)((kk >> 2) * (BN * 128) + (kk & 3) * 32)),
                            kk > 0);
                }
                ta_wg_commit();
                if (step == 0) {
                    ta_wg_wait<0>();
                    ta_wg_keep(s);
                    ta_wg_keep(dp);
                    make_dc(0);
                }
            } else {
                const int32_t a = part - cq - 1;
                const uint32_t dcb = sdc + (uint32_t)((step - 1) & 1) * T::C_BYTES +
                                     (uint32_t)(64 * wg + cq - 1 - a) * 16u;
                const uint64_t cd = ta_wg_desc_plain(dcb, T::COL, 128u),
                               fd = ta_wg_desc(buf, BN * 128u, 1024u);
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
                    ta_wg_sst<BF16>(dq, ta_wg_desc_add(cd, (uint32_t)(2 * kk) * T::COL),
                                    ta_wg_desc_add(fd, (uint32_t)(kk * 2048)), 1);
                ta_wg_commit();
                if (a == q_first && step < n_kt) {
                    ta_wg_wait<0>(); /* s and dp of step's tile */
                    ta_wg_keep(s);
                    ta_wg_keep(dp);
                    make_dc(step);
                }
            }
        }
        ta_wg_wait<0>();
        ta_wg_keep(dq);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int32_t row = ra + 8 * r;
            if (row >= t.seq_q || row - row0 >= out_rows) continue;
            /* the band's share (none when E = 0: no band kernel ran) */
            const float *bq = p.band > 0 ? p.dq_band + (head * t.seq_q + row) * D : nullptr;
#pragma unroll
            for (int d = 0; d < D / 8; ++d) {
                const int32_t col = 8 * d + 2 * tq;
                const float2 b =
                    bq ? *reinterpret_cast<const float2 *>(bq + col) : make_float2(0.0f, 0.0f);
                const float x0 = dq[4 * d + 2 * r] + b.x, x1 = dq[4 * d + 2 * r + 1] + b.y;
                if constexpr (F32)
                    *reinterpret_cast<float2 *>(static_cast<float *>(p.dq) + c.dq +
                                                (int64_t)row * p.lay.dq.seq + col) =
                        make_float2(x0, x1);
                else
                    *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(p.dq) + c.dq +
                                                  (int64_t)row * p.lay.dq.seq + col) =
                        ta_fast_pack<BF16>(x0, x1);
            }
        }
    }
#else
    (void)p;
#endif
}

/* ---- the backward's dk/dv on wgmma (kernel 6 of cuda/ta_cuda_fast_mta_bwd.cu) ---- */

#define TA_MKV_BM 128 /* query rows per Q tile: 2 warpgroups x 64 */
#define TA_MKV_BK 32  /* keys per block */

/* Shared memory (1024-byte aligned regions):
 *   kf   [c_q][DB][32][64]   the block's keys' kf_a, swizzled (K-major B of s)
 *   v    [DB][32][64]        swizzled (K-major B of dp = dO v^T)
 *   NBQ Q tile buffers, each
 *     q  [D/8][QROWS][8]     rows row0 - (c_q-1) .., without swizzle (the forward's):
 *                            K-major A of s (a start a rows down: q shifted by a),
 *                            MN-major A of dkf_a^T (M = features, K = rows, the same start)
 *     dO [DB][128][64]       swizzled: K-major A of dp, MN-major A of dv^T
 *   P, dC [32/8][128][8]     the tile's, rounded, without swizzle: MN-major B
 *                            (N = keys, K = rows) of dv^T and dkf_a^T */
template <int D, int NBQ> struct ta_mkv_traits {
    static constexpr int DB = D / 64;
    static constexpr uint32_t QC = TA_MWG_QROWS * 16; /* bytes per 8-feature column of q */
    static constexpr uint32_t Q_BYTES = ((D / 8) * QC + 1023u) & ~1023u;
    static constexpr uint32_t DO_BYTES = DB * TA_MKV_BM * 128;
    static constexpr uint32_t QB_BYTES = Q_BYTES + DO_BYTES;
    static constexpr uint32_t KF_BYTES = DB * TA_MKV_BK * 128;
    static constexpr uint32_t PC = TA_MKV_BM * 16;            /* bytes per 8 keys of P, dC */
    static constexpr uint32_t P_BYTES = (TA_MKV_BK / 8) * PC; /* 8 KB */
    /* k-step kk's start in a swizzled K-major region of 32 rows */
    __host__ __device__ static constexpr uint32_t kmaj(int kk) {
        return (uint32_t)(kk >> 2) * (TA_MKV_BK * 128u) + (uint32_t)(kk & 3) * 32u;
    }
    /* accumulator units (64 features x 32 keys, 16 registers) per warpgroup,
     * part u = 0 dv, 1 + x dkf of a = a0 + x; D = 128: warpgroup w the
     * features 64 w .. over all 128 rows; D = 64: all features over the rows
     * 64 w .. (KR rows of K), the two sums added at each head's end */
    static constexpr int NU = D == 128 ? 7 : 8, AG = NU - 1, KR = D == 128 ? TA_MKV_BM : 64;
    static size_t smem(int32_t cq) {
        return 1024 + (size_t)(cq + 1) * KF_BYTES + (size_t)NBQ * QB_BYTES + 2u * P_BYTES;
    }
    static_assert(D == 64 || D == 128, "the wgmma dk/dv kernel: D in {64, 128}");
    /* (also the one use of KR in the sm_80 pass, where the kernel body is empty:
     * nvcc's unused-member warning is an error there) */
    static_assert(KR % 16 == 0 && NU <= 8, "K in whole k-steps; 16 NU accumulator registers");
};

/*
 * One block of 2 warpgroups per (batch, kv head, 32 keys m0 .., a group of
 * AG a's), as the mma.sync kernel: for each query head of the GQA group
 * ascending, each Q tile of 128 rows that sees a key of the block ascending:
 *   S  warpgroup w, rows 64 w .. 64 w + 63 of the tile (M = rows, N = 32 keys):
 *        s = sum_a q(rows shifted by a - (c_q-1)) kf_a^T, dp = dO v^T   (SS, K-major)
 *      then the direct entries (diag, edge), P, dC = scale P (dp - D) (0 at the
 *      direct entries), both rounded into shared memory;
 *   A  each warpgroup's units (M = 64 features, N = 32 keys, K = the 128 rows):
 *        dv^T += dO^T P,  dkf_a^T += q(rows shifted by a)^T dC         (SS, MN-major)
 * The accumulators are transposed (features x keys: 16 registers per unit),
 * so a block holds AG + 1 outputs (D = 128: 6 a's, as the mma.sync kernel;
 * D = 64: 7, each warpgroup summing half the rows, added at the head's end;
 * the 6 x 11 and 7 x 7 kernels take one pass). Per tile: the tile's bytes and a block barrier, S
 * issued and waited (wait_group 0: the previous tile's A products are done too), a block barrier
 * (both warpgroups' A are done with P and dC), P and dC stored, a block barrier, the next tile's
 * loads (NBQ = 2: into the other buffer, whose last readers were the previous A), A issued (it runs
 * under the next tile's loads and first S products). At each head's end dkf_a (f32) of the block's
 * a's is stored, at the end (a group 0 only) dv. The same P, dC and rows as
 * the mma.sync kernel, accumulated in wgmma's order: the bits differ (the
 * same bound).
 */
template <int D, int NBQ, bool BF16>
__global__ void __launch_bounds__(TA_MWG_THREADS, 1)
    ta_fast_mta_kv_wg_kernel(const __grid_constant__ ta_fmb_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_mkv_traits<D, NBQ> T;
    extern __shared__ float4 ta_mwg_dyn_smem[];
    const uint32_t smem0 = ta_fast_smem_addr(ta_mwg_dyn_smem);
    const int32_t cq = p.conv_q, n_ag = (cq + T::AG - 1) / T::AG;
    const uint32_t skf = (smem0 + 1023u) & ~1023u;
    const uint32_t sv = skf + (uint32_t)cq * T::KF_BYTES, qb0 = sv + T::KF_BYTES;
    const uint32_t sp = qb0 + NBQ * T::QB_BYTES, sdc = sp + T::P_BYTES;
    unsigned char *gp = reinterpret_cast<unsigned char *>(ta_mwg_dyn_smem) + (sp - smem0);
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    /* the warpgroup, warp-uniform for the compiler (descriptors in uniform registers) */
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), tq = lane & 3;
    const int rl = 64 * wg + 16 * (warp & 3) + (lane >> 2); /* S: this lane's rows rl, rl + 8 */
    const int32_t n_kt = t.num_k_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt * n_ag;
    const float scale_log2 = p.scale * TA_LOG2E;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, n_ag);
        const int32_t m0 = at.kt * TA_MKV_BK, a0 = at.fg * T::AG;
        const int32_t na = cq - a0 < T::AG ? cq - a0 : T::AG;
        const bool with_dv = at.fg == 0;
        float acc[T::NU][16];
        ta_tile_ctx c;
#pragma unroll
        for (int u = 0; u < T::NU; ++u)
#pragma unroll
            for (int e = 0; e < 16; ++e)
                acc[u][e] = 0.0f;
        for (int32_t gi = 0; gi < p.group; ++gi) {
            const int32_t h = at.h_kv * p.group + gi;
            const int64_t head = (int64_t)(p.batch_begin + at.b_local) * p.heads_q + h;
            const float *diag = p.band > 0 ? p.diag + head * t.seq_q * p.band : nullptr;
            const float *edge = p.edge_n > 0 ? p.edge + head * t.seq_q * p.edge_n : nullptr;
            int32_t q_begin, q_end;
            c = ta_cuda_context(p, at.b_local, h, 0);
            ta_tile_k_rows(&t, at.kt, c.key_len, &q_begin, &q_end);
            /* Q tile qt -> buffer x: q, dO by cp.async (no commit) */
            auto load_q_tile = [&](int32_t qt, int x) {
                const uint32_t bq = qb0 + (uint32_t)x * T::QB_BYTES;
                const int32_t row0 = qt * TA_MKV_BM;
                ta_mwg_load_q<D>(bq, p, c, row0 - (cq - 1), TA_MKV_BM + cq - 1);
                ta_wg_load_rows<D, TA_MKV_BM, TA_MWG_THREADS>(bq + T::Q_BYTES, d_o, c.d_o,
                                                              p.lay.d_o.seq, row0, t.seq_q);
            };
            ta_wg_wait<0>();
            __syncthreads(); /* the previous head / tile is done with shared memory */
            for (int32_t a = 0; a < cq; ++a)
                ta_wg_load_rows<D, TA_MKV_BK, TA_MWG_THREADS>(
                    skf + (uint32_t)a * T::KF_BYTES, p.kf, head * t.seq_k * cq * D + (int64_t)a * D,
                    (int64_t)cq * D, m0, t.seq_k);
            ta_wg_load_rows<D, TA_MKV_BK, TA_MWG_THREADS>(sv, v, c.v, p.lay.v.seq, m0, c.key_len);
            if (NBQ == 2 && q_begin < q_end) load_q_tile(q_begin, 0);
            ta_fast_cp_commit();
            for (int32_t qt = q_begin; qt < q_end; ++qt) {
                const int x = NBQ == 2 ? (qt - q_begin) & 1 : 0;
                const uint32_t sq = qb0 + (uint32_t)x * T::QB_BYTES, sdo = sq + T::Q_BYTES;
                const int32_t row0 = qt * TA_MKV_BM, ra = row0 + rl;
                const int32_t wrow0 = row0 + 64 * wg + 16 * (warp & 3);
                float s[16], dp[16], lse2[2], dl[2];
                int32_t lo[2], hi[2];
                if (NBQ == 1) {
                    ta_wg_wait<0>();
                    __syncthreads(); /* every warpgroup's A products are done with the buffer */
                    load_q_tile(qt, 0);
                    ta_fast_cp_commit();
                }
                ta_fast_cp_wait<0>();
                ta_wg_proxy_fence();
                __syncthreads(); /* this tile's q and dO are visible */
                ta_wg_fence();
                { /* base descriptors, then one add per k-step (ta_wg_desc_add) */
                    const uint64_t qd =
                        ta_wg_desc_plain(sq + (uint32_t)(64 * wg) * 16u, T::QC, 128u);
                    const uint64_t kd = ta_wg_desc(skf, 16u, 1024u);
                    for (int32_t a = 0; a < cq; ++a) {
                        const uint64_t qa = ta_wg_desc_add(qd, (uint32_t)a * 16u),
                                       ka = ta_wg_desc_add(kd, (uint32_t)a * T::KF_BYTES);
#pragma unroll
                        for (int kk = 0; kk < D / 16; ++kk)
                            ta_wg_ss<BF16>(s, ta_wg_desc_add(qa, (uint32_t)(2 * kk) * T::QC),
                                           ta_wg_desc_add(ka, T::kmaj(kk)), a > 0 || kk > 0);
                    }
                    const uint64_t od = ta_wg_desc(sdo + (uint32_t)(64 * wg) * 128u, 16u, 1024u),
                                   vd = ta_wg_desc(sv, 16u, 1024u);
#pragma unroll
                    for (int kk = 0; kk < D / 16; ++kk)
                        ta_wg_ss<BF16>(
                            dp, ta_wg_desc_add(od, (kk >> 2) * (TA_MKV_BM * 128u) + (kk & 3) * 32u),
                            ta_wg_desc_add(vd, T::kmaj(kk)), kk > 0);
                }
                ta_wg_commit();
                ta_fmb_lane_rows(p, t, c, ra, lo, hi, lse2, dl);
                ta_wg_wait<0>(); /* s, dp (and the previous tile's A products) */
                ta_wg_keep(s);
                ta_wg_keep(dp);
                __syncthreads(); /* both warpgroups' previous A products are done with P, dC */
                {
                    const int32_t col1 = m0 + TA_MKV_BK - 1;
                    const bool near = ta_fmb_near(p, t, diag, edge, wrow0, m0, col1);
                    unsigned char *dst = gp + rl * 16 + 4 * tq;
                    /* inner: every key of the block inside both rows' ranges and no
                     * direct entry, ta_fmb_p_dc's arithmetic without its tests; element
                     * pairs (2 i, 2 i + 1): row ra + 8 (i & 1), keys from 8 (i >> 1) + 2 tq */
                    const bool inner =
                        !near && m0 >= lo[0] && col1 < hi[0] && m0 >= lo[1] && col1 < hi[1];
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const int r = i & 1;
                        const int32_t row = ra + 8 * r;
                        float pp[2], xc[2];
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            if (inner) {
                                pp[e] = ta_fast_exp2(__fmaf_rn(s[2 * i + e], scale_log2, -lse2[r]));
                                xc[e] = p.scale * pp[e] * (dp[2 * i + e] - dl[r]);
                            } else {
                                ta_fmb_p_dc(p, diag, edge, near, row,
                                            m0 + 8 * (i >> 1) + 2 * tq + e, lo[r], hi[r],
                                            s[2 * i + e], dp[2 * i + e], lse2[r], dl[r], scale_log2,
                                            &pp[e], &xc[e]);
                            }
                        }
                        const uint32_t off = (uint32_t)(i >> 1) * T::PC + (uint32_t)(i & 1) * 128u;
                        *reinterpret_cast<uint32_t *>(dst + off) = ta_fast_pack<BF16>(pp[0], pp[1]);
                        *reinterpret_cast<uint32_t *>(dst + T::P_BYTES + off) =
                            ta_fast_pack<BF16>(xc[0], xc[1]);
                    }
                }
                ta_wg_proxy_fence();              /* the P, dC stores before wgmma reads them */
                __syncthreads();                  /* P, dC of all 128 rows */
                if (NBQ == 2 && qt + 1 < q_end) { /* the next tile into the other buffer */
                    load_q_tile(qt + 1, x ^ 1);
                    ta_fast_cp_commit();
                }
                ta_wg_fence();
#pragma unroll
                for (int u = 0; u < T::NU; ++u) { /* part u: 0 dv, 1 + x dkf of a0 + x */
                    if (u == 0 ? !with_dv : u - 1 >= na) continue;
                    /* D = 128: features 64 wg .., all rows; D = 64: all
                     * features, rows 64 wg .. (T::KR of K) */
                    const uint32_t r0 = T::DB == 2 ? 0u : 64u * (uint32_t)wg;
                    const uint64_t bd =
                        ta_wg_desc_plain((u == 0 ? sp : sdc) + r0 * 16u, 128u, T::PC);
                    const uint64_t ad =
                        u == 0
                            ? ta_wg_desc(
                                  sdo + (T::DB == 2 ? (uint32_t)wg * (TA_MKV_BM * 128) : r0 * 128u),
                                  TA_MKV_BM * 128u, 1024u)
                            : ta_wg_desc_plain(sq + (T::DB == 2 ? (uint32_t)(8 * wg) * T::QC : 0u) +
                                                   ((uint32_t)(a0 + u - 1) + r0) * 16u,
                                               128u, T::QC);
#pragma unroll
                    for (int kk = 0; kk < T::KR / 16; ++kk)
                        ta_wg_stt<BF16>(acc[u],
                                        ta_wg_desc_add(ad, (uint32_t)kk * (u == 0 ? 2048u : 256u)),
                                        ta_wg_desc_add(bd, (uint32_t)kk * 256u), 1);
                }
                ta_wg_commit();
            }
            ta_wg_wait<0>();
#pragma unroll
            for (int u = 0; u < T::NU; ++u)
                ta_wg_keep(acc[u]);
            /* D = 64: warpgroup 1's sums (its 64 rows) into warpgroup 0's,
             * through P and dC, two units a round (dv only at the end) */
            if (T::DB == 1) {
                float4 *xs = reinterpret_cast<float4 *>(gp) + 4 * (threadIdx.x & 127);
                const bool last = gi + 1 == p.group;
#pragma unroll
                for (int u0 = 0; u0 < T::NU; u0 += 2) {
                    __syncthreads(); /* the previous round's (or A's) readers are done */
#pragma unroll
                    for (int u = u0; u < u0 + 2 && u < T::NU; ++u)
                        if (wg == 1 && (u == 0 ? with_dv && last : u - 1 < na))
#pragma unroll
                            for (int e = 0; e < 4; ++e)
                                xs[512 * (u - u0) + e] =
                                    make_float4(acc[u][4 * e], acc[u][4 * e + 1], acc[u][4 * e + 2],
                                                acc[u][4 * e + 3]);
                    __syncthreads();
#pragma unroll
                    for (int u = u0; u < u0 + 2 && u < T::NU; ++u)
                        if (wg == 0 && (u == 0 ? with_dv && last : u - 1 < na))
#pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const float4 y = xs[512 * (u - u0) + e];
                                acc[u][4 * e] += y.x;
                                acc[u][4 * e + 1] += y.y;
                                acc[u][4 * e + 2] += y.z;
                                acc[u][4 * e + 3] += y.w;
                            }
                }
            }
            /* this head's dkf of the block's a's (zeros if no row sees the keys);
             * element pairs (2 i, 2 i + 1): feature f0 + 8 (i & 1), keys 8 (i >> 1) + 2 tq .. */
            const int f0 = (T::DB == 2 ? 64 * wg : 0) + 16 * (warp & 3) + (lane >> 2);
#pragma unroll
            for (int u = 1; u < T::NU; ++u) {
                if (u - 1 >= na) continue;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int f = f0 + 8 * (i & 1);
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int32_t j = m0 + 8 * (i >> 1) + 2 * tq + e;
                        if ((T::DB == 2 || wg == 0) && j < t.seq_k)
                            p.dkf[((head * t.seq_k + j) * cq + a0 + u - 1) * D + f] =
                                acc[u][2 * i + e];
                        acc[u][2 * i + e] = 0.0f;
                    }
                }
            }
        }
        if (!with_dv || (T::DB == 1 && wg == 1)) continue;
        { /* dv: unit 0 (D = 64: warpgroup 0's, the sum) */
            const int f0 = (T::DB == 2 ? 64 * wg : 0) + 16 * (warp & 3) + (lane >> 2);
            uint16_t *dv = static_cast<uint16_t *>(p.dv) + c.dv;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int f = f0 + 8 * (i & 1);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int32_t j = m0 + 8 * (i >> 1) + 2 * tq + e;
                    if (j < t.seq_k)
                        dv[(int64_t)j * p.lay.dv.seq + f] =
                            (uint16_t)(ta_fast_pack<BF16>(acc[0][2 * i + e], 0.0f) & 0xFFFFu);
                }
            }
        }
    }
#else
    (void)p;
#endif
}

template <int D, int NB, bool BF16, bool F32> static int ta_mdq_of(ta_cuda_fast_mta_wg *w) {
    w->kernel = reinterpret_cast<const void *>(&ta_fast_mta_dq_wg_kernel<D, NB, BF16, F32>);
    w->smem = ta_mdq_traits<D, NB>::SMEM;
    w->threads = TA_MWG_THREADS;
    w->block_m = TA_MDQ_BM;
    w->block_n = TA_MDQ_BN;
    return 1;
}

template <bool BF16, bool F32> static int ta_mdq_for(int32_t d, ta_cuda_fast_mta_wg *w) {
    switch (d) {
    case 64: return ta_mdq_of<64, 16, BF16, F32>(w);
    case 96: return ta_mdq_of<96, 7, BF16, F32>(w);
    case 128: return ta_mdq_of<128, 7, BF16, F32>(w);
    default: return 0;
    }
}

template <int D, int NBQ, bool BF16>
static int ta_mkv_of(int32_t cq, ta_cuda_fast_mta_wg *w, int32_t *a_group) {
    w->kernel = reinterpret_cast<const void *>(&ta_fast_mta_kv_wg_kernel<D, NBQ, BF16>);
    w->smem = ta_mkv_traits<D, NBQ>::smem(cq);
    w->threads = TA_MWG_THREADS;
    w->block_m = TA_MKV_BM;
    w->block_n = TA_MKV_BK;
    *a_group = ta_mkv_traits<D, NBQ>::AG;
    return 1;
}

template <int D, bool BF16>
static int ta_mkv_for(int32_t cq, int nbq, ta_cuda_fast_mta_wg *w, int32_t *a_group) {
    return nbq == 2 ? ta_mkv_of<D, 2, BF16>(cq, w, a_group) : ta_mkv_of<D, 1, BF16>(cq, w, a_group);
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

/* (cuda/ta_cuda_fast_mta_bwd.cuh) */
int ta_cuda_fast_mta_dq_wg_launch(int32_t d, int bf16, int f32, ta_cuda_fast_mta_wg *w) {
    if (bf16) return f32 ? ta_mdq_for<true, true>(d, w) : ta_mdq_for<true, false>(d, w);
    return f32 ? ta_mdq_for<false, true>(d, w) : ta_mdq_for<false, false>(d, w);
}

/* (cuda/ta_cuda_fast_mta_bwd.cuh) */
int ta_cuda_fast_mta_kv_wg_launch(int32_t d, int32_t cq, int bf16, int nbq, ta_cuda_fast_mta_wg *w,
                                  int32_t *a_group) {
    switch (d) {
    case 64:
        return bf16 ? ta_mkv_for<64, true>(cq, nbq, w, a_group)
                    : ta_mkv_for<64, false>(cq, nbq, w, a_group);
    case 128:
        return bf16 ? ta_mkv_for<128, true>(cq, nbq, w, a_group)
                    : ta_mkv_for<128, false>(cq, nbq, w, a_group);
    default: return 0;
    }
}
