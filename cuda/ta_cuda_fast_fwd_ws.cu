/*
 * CUDA SDPA forward, TA_PRECISION_FAST, f16 / bf16, sm_90a: the warp-
 * specialised form of the wgmma forward (cuda/ta_cuda_fast_fwd_sm90.cu), with
 * TMA loads. Candidates appended to the fast table (cuda/ta_cuda_fast_fwd.cu);
 * docs/cuda.md section 7.
 *
 * One block of three warpgroups (384 threads) per (batch, head, Q tile of 128
 * rows):
 *   - warpgroup 0, the producer, gives its registers back (setmaxnreg 40); its
 *     warp 0 loads: q once per Q tile, then k and v of every K tile into a ring
 *     of two stages each, by TMA (cp.async.bulk.tensor, 64-feature boxes of the
 *     128-byte swizzle wgmma reads; rows past S_q or S_k are filled with zeros
 *     by the copy engine). A K tile that holds keys past a seqlens_k shorter
 *     than S_k is loaded by the warp's 32 lanes with zero-filling cp.async
 *     instead, so that no key row past seqlens_k is ever read (the contract:
 *     docs/api.md).
 *   - warpgroups 1 and 2, the consumers (setmaxnreg 232), own rows 0-63 and
 *     64-127 of the Q tile and run exactly the products and the softmax of the
 *     wgmma forward, in the same order per row: s = q k_j+1^T and o += p_j v_j
 *     issued together, the softmax of tile j+1 while o += p v runs. So for the
 *     same BN the bits are the wgmma forward's (test_cuda_fast checks it).
 *     With PP (ping-pong, as FlashAttention-3), the two consumer warpgroups
 *     take turns to issue their products (named barriers 3 and 4), so one's
 *     softmax runs while the other's products occupy the tensor cores.
 * Synchronisation: mbarriers, full (the producer's arrival with the TMA's byte
 * count, or a plain arrival after cp.async) and empty (one arrival per
 * consumer warp once its products have read the stage) per stage of k and v,
 * and one full barrier for q; phases follow a ring counter that both sides
 * advance over the same K tiles. One barrier of all 384 threads per Q tile
 * keeps q's buffer until both consumers are done with it.
 *
 * Shared memory (1024-byte aligned): q [DB][128][64], k [2][DB][BN][64],
 * v [2][DB][BN][64], then the 9 mbarriers; DB = ceil(D / 64).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "ta_cuda_wg.cuh"

namespace {

#define TA_WS_BM 128      /* Q tile rows: 2 consumer warpgroups x 64 */
#define TA_WS_THREADS 384 /* producer + 2 consumers */

template <int D, int BN> struct ta_ws_traits {
    static constexpr int DB = (D + 63) / 64;
    static constexpr uint32_t Q_BYTES = DB * TA_WS_BM * 128;
    static constexpr uint32_t KV_BYTES = DB * BN * 128; /* one stage of k or v */
    static constexpr uint32_t BAR_OFF = Q_BYTES + 4 * KV_BYTES;
    static constexpr size_t SMEM = 1024 + BAR_OFF + 128; /* alignment slack, barriers */
    enum { NT = BN / 8, NO = D / 8 };
    static_assert(D % 16 == 0 && D <= 256, "D in {64, 96, 128, 256}");
    static_assert(BN == 64 || BN == 128, "s = q k^T: m64n64 or m64n128");
};

#ifdef TA_WG_ENABLED
/* The mbarriers at `bars`: q full, then per stage st in {0, 1}: k full, v full,
 * k empty, v empty. */
TA_FAST_FN uint32_t ta_ws_bar(uint32_t bars, int which, uint32_t st) {
    return bars + 8u * (1u + 4u * st + (uint32_t)which);
}
enum { TA_WS_K_FULL = 0, TA_WS_V_FULL = 1, TA_WS_K_EMPTY = 2, TA_WS_V_EMPTY = 3 };

/* Stage st of k (v: 1) after q. */
template <int D, int BN> TA_FAST_FN uint32_t ta_ws_buf(uint32_t sq, int v, uint32_t st) {
    typedef ta_ws_traits<D, BN> T;
    return sq + T::Q_BYTES + (uint32_t)(2 * v + (int)st) * T::KV_BYTES;
}

/* K tile rows [row0, row0 + BN) of a slice -> the swizzled stage at `region`
 * by the 32 lanes of the producer's warp 0 with cp.async, rows at or past
 * n_valid zero-filled (never read); then visible to wgmma. Only for the K
 * tile that a seqlens_k shorter than S_k cuts. */
template <int D, int BN>
TA_FAST_FN void ta_ws_cp_rows(uint32_t region, const uint16_t *base, int64_t off, int64_t seq,
                              int32_t row0, int32_t n_valid, int lane) {
    constexpr int CH = D / 8;
#pragma unroll 1
    for (int i = lane; i < BN * CH; i += 32) {
        const int r = i / CH, c = i % CH;
        const int32_t row = row0 + r;
        const bool ok = row < n_valid;
        const uint16_t *src = ok ? base + off + (int64_t)row * seq + 8 * c : base;
        ta_fast_cp16(
            region + (uint32_t)((c >> 3) * (BN * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4)), src,
            ok ? 16 : 0);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    ta_wg_proxy_fence();
    __syncwarp();
}

/* One consumer warp's release of a stage: its warpgroup's products that read
 * it have completed (the caller waited). */
TA_FAST_FN void ta_ws_release(uint32_t bar, int lane) {
    __syncwarp();
    if (lane == 0) ta_mb_arrive(bar);
}
#endif

template <int D, int BN, bool BF16, bool PP>
__global__ void __launch_bounds__(TA_WS_THREADS, 1)
    ta_cuda_fast_fwd_ws_kernel(const __grid_constant__ ta_fast_tma_params p) {
#ifdef TA_WG_ENABLED
    typedef ta_ws_traits<D, BN> T;
    extern __shared__ float4 ta_ws_dyn_smem[];
    const uint32_t sq = (ta_fast_smem_addr(ta_ws_dyn_smem) + 1023u) & ~1023u;
    const uint32_t bars = sq + T::BAR_OFF;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int wg = warp >> 2;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    uint32_t ring = 0, n_q = 0; /* K tiles and Q tiles through the buffers so far */

    if (threadIdx.x == 0) {
        ta_mb_init(bars, 1);
        for (uint32_t st = 0; st < 2; ++st) {
            ta_mb_init(ta_ws_bar(bars, TA_WS_K_FULL, st), 1);
            ta_mb_init(ta_ws_bar(bars, TA_WS_V_FULL, st), 1);
            ta_mb_init(ta_ws_bar(bars, TA_WS_K_EMPTY, st), 8); /* one per consumer warp */
            ta_mb_init(ta_ws_bar(bars, TA_WS_V_EMPTY, st), 8);
        }
        ta_mb_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* ---- producer ---- */
        ta_setmaxnreg_dec<40>();
        for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
            const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
            ta_bar_sync(5, TA_WS_THREADS); /* both consumers are done with q */
            if (c.k_begin >= c.k_end || warp != 0) continue;
            if (lane == 0) {
                ta_mb_expect_tx(bars, T::Q_BYTES);
                for (int fb = 0; fb < T::DB; ++fb)
                    ta_tma_load4(sq + (uint32_t)fb * (TA_WS_BM * 128), &p.tq, bars, 64 * fb,
                                 at.qt * TA_WS_BM, c.head, c.batch);
            }
            for (int32_t kt = c.k_begin; kt < c.k_end; ++kt, ++ring) {
                const uint32_t st = ring & 1u, ph = ((ring >> 1) & 1u) ^ 1u;
                const bool cut = c.key_len < t.seq_k && (kt + 1) * BN > c.key_len;
                for (int v = 0; v < 2; ++v) {
                    const uint32_t full = ta_ws_bar(bars, v ? TA_WS_V_FULL : TA_WS_K_FULL, st);
                    const uint32_t dst = ta_ws_buf<D, BN>(sq, v, st);
                    ta_mb_wait(ta_ws_bar(bars, v ? TA_WS_V_EMPTY : TA_WS_K_EMPTY, st), ph);
                    if (!cut) {
                        if (lane == 0) {
                            ta_mb_expect_tx(full, T::KV_BYTES);
                            for (int fb = 0; fb < T::DB; ++fb)
                                ta_tma_load4(dst + (uint32_t)fb * (BN * 128), v ? &p.tv : &p.tk,
                                             full, 64 * fb, kt * BN, c.head_kv, c.batch);
                        }
                    } else {
                        ta_ws_cp_rows<D, BN>(dst, static_cast<const uint16_t *>(v ? p.v : p.k),
                                             v ? c.v : c.k, v ? p.lay.v.seq : p.lay.k.seq,
                                             kt * BN, c.key_len, lane);
                        if (lane == 0) ta_mb_arrive(full);
                    }
                }
            }
        }
    } else { /* ---- consumers ---- */
        ta_setmaxnreg_inc<232>();
        const int cw = wg - 1, tq = lane & 3;
        const float scale_log2 = p.scale * 1.4426950408889634f;
        for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
            const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
            const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
            const int32_t ra = at.qt * TA_WS_BM + 64 * cw + 16 * (warp & 3) + (lane >> 2);
            int32_t lo[2], hi[2];
            float o[4 * T::NO], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
            ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
            for (int i = 0; i < 4 * T::NO; ++i) o[i] = 0.0f;
            ta_bar_sync(5, TA_WS_THREADS);
            if (c.k_begin < c.k_end) {
                float s[4 * T::NT], corr[2];
                uint32_t pa[BN / 16][4];
                const int32_t kb = c.k_begin;
                uint32_t st = ring & 1u;
                /* the first K tile: s = q k^T, its softmax, p in pa */
                ta_mb_wait(bars, n_q & 1u);
                ta_mb_wait(ta_ws_bar(bars, TA_WS_K_FULL, st), (ring >> 1) & 1u);
                if (PP) {
                    if (cw == 1) ta_bar_arrive(3, 256); /* warpgroup 0 issues first */
                    ta_bar_sync(3 + cw, 256);
                }
                ta_wg_fence();
                ta_wg_ss_rows<D, TA_WS_BM, BN, BF16>(s, sq, 64 * cw, ta_ws_buf<D, BN>(sq, 0, st));
                ta_wg_commit();
                if (PP && !(cw == 1 && kb + 1 == c.k_end)) ta_bar_arrive(3 + (cw ^ 1), 256);
                ta_wg_wait<0>();
                ta_wg_keep(s);
                ta_ws_release(ta_ws_bar(bars, TA_WS_K_EMPTY, st), lane);
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, kb * BN, tq, scale_log2, corr);
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
                for (int32_t kt = kb; kt + 1 < c.k_end; ++kt) {
                    /* tile kt (ring position r0) has p in pa; kt + 1 is at r1 */
                    const uint32_t r0 = ring + (uint32_t)(kt - kb), r1 = r0 + 1;
                    ta_mb_wait(ta_ws_bar(bars, TA_WS_K_FULL, r1 & 1u), (r1 >> 1) & 1u);
                    ta_mb_wait(ta_ws_bar(bars, TA_WS_V_FULL, r0 & 1u), (r0 >> 1) & 1u);
                    if (PP) ta_bar_sync(3 + cw, 256);
                    ta_wg_keep(o);
                    ta_wg_fence();
                    ta_wg_ss_rows<D, TA_WS_BM, BN, BF16>(s, sq, 64 * cw,
                                                         ta_ws_buf<D, BN>(sq, 0, r1 & 1u));
                    ta_wg_commit();
                    ta_wg_rs_rows<D, BN, BF16>(o, pa, ta_ws_buf<D, BN>(sq, 1, r0 & 1u));
                    ta_wg_commit();
                    if (PP && !(cw == 1 && kt + 2 == c.k_end)) ta_bar_arrive(3 + (cw ^ 1), 256);
                    ta_wg_wait<1>(); /* s done; o += p v may still run */
                    ta_wg_keep(s);
                    ta_ws_release(ta_ws_bar(bars, TA_WS_K_EMPTY, r1 & 1u), lane);
                    ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, (kt + 1) * BN, tq, scale_log2,
                                                corr);
                    /* as in the wgmma forward: pin the softmax before the wait */
                    ta_wg_keep(s);
                    ta_wg_keep_row(m, l, corr);
                    ta_wg_bar(cw);
                    ta_wg_wait<0>();
                    ta_wg_keep(o);
                    ta_wg_keep_u(pa);
                    ta_ws_release(ta_ws_bar(bars, TA_WS_V_EMPTY, r0 & 1u), lane);
                    ta_fast_rescale<T::NO>(o, corr);
#pragma unroll
                    for (int kk = 0; kk < BN / 16; ++kk)
                        ta_fast_p_fragment<BF16, T::NT>(pa[kk], s, kk);
                }
                /* the last tile: o += p v */
                {
                    const uint32_t r0 = ring + (uint32_t)(c.k_end - 1 - kb);
                    ta_mb_wait(ta_ws_bar(bars, TA_WS_V_FULL, r0 & 1u), (r0 >> 1) & 1u);
                    ta_wg_keep(o);
                    ta_wg_fence();
                    ta_wg_rs_rows<D, BN, BF16>(o, pa, ta_ws_buf<D, BN>(sq, 1, r0 & 1u));
                    ta_wg_commit();
                    ta_wg_wait<0>();
                    ta_wg_keep(o);
                    ta_wg_keep_u(pa);
                    ta_ws_release(ta_ws_bar(bars, TA_WS_V_EMPTY, r0 & 1u), lane);
                }
                ring += (uint32_t)(c.k_end - kb);
                ++n_q;
            }
            ta_fast_store_rows<BF16, T::NO>(p, c, ra, tq, o, m, l);
        }
    }
#else
    (void)p;
#endif
}

template <int D, int BN, bool BF16, bool PP> static ta_fast_launch ta_ws_launch_of() {
    ta_fast_launch l;
    l.kernel = reinterpret_cast<const void *>(&ta_cuda_fast_fwd_ws_kernel<D, BN, BF16, PP>);
    l.kernel_paged = nullptr; /* paged KV: the multi-stage mma.sync kernels only */
    l.smem = ta_ws_traits<D, BN>::SMEM;
    l.threads = TA_WS_THREADS;
    l.block_m = TA_WS_BM;
    l.block_n = BN;
    l.sm90 = 1;
    l.tma = 1;
    return l;
}

template <bool BF16> static int ta_ws_launches(int32_t d, ta_fast_launch *l) {
    switch (d) {
    case 64: l[0] = ta_ws_launch_of<64, 128, BF16, true>(); return 1;
    case 96: l[0] = ta_ws_launch_of<96, 128, BF16, true>(); return 1;
    case 128:
        l[0] = ta_ws_launch_of<128, 128, BF16, true>();
        l[1] = ta_ws_launch_of<128, 128, BF16, false>();
        return 2;
    case 256: l[0] = ta_ws_launch_of<256, 64, BF16, true>(); return 1;
    default: return 0;
    }
}

/* A stride in bytes for the tensor map: the tensor's own where the dimension
 * has more than one entry, else (never stepped) `fallback`. */
static cuuint64_t ta_ws_stride(int64_t elems, int32_t n, cuuint64_t fallback) {
    return n > 1 ? (cuuint64_t)elems * 2u : fallback;
}

typedef CUresult (*ta_ws_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* One tensor [batch][heads][seq][d] of 16-bit elements at base, strides st
 * (elements), boxes of 64 features x rows. */
static ta_status ta_ws_map(ta_ws_encode_fn enc, CUtensorMap *m, const void *base, int32_t d,
                           int32_t seq, int32_t heads, int32_t batch, const ta_strides *st,
                           int32_t rows) {
    cuuint64_t dims[4], strides[3];
    const cuuint32_t box[4] = {64u, (cuuint32_t)rows, 1u, 1u}, step[4] = {1u, 1u, 1u, 1u};
    dims[0] = (cuuint64_t)d;
    dims[1] = (cuuint64_t)seq;
    dims[2] = (cuuint64_t)heads;
    dims[3] = (cuuint64_t)batch;
    strides[0] = ta_ws_stride(st->seq, seq, 16u * (cuuint64_t)((d + 7) / 8));
    strides[1] = ta_ws_stride(st->head, heads, strides[0] * (cuuint64_t)seq);
    strides[2] = ta_ws_stride(st->batch, batch, strides[1] * (cuuint64_t)heads);
    if (enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void *>(base), dims, strides, box, step,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return TA_ERR_UNSUPPORTED;
    return TA_OK;
}

} /* namespace */

int ta_cuda_fast_ws_launch(int32_t d, int bf16, ta_fast_launch *l) {
    return bf16 ? ta_ws_launches<true>(d, l) : ta_ws_launches<false>(d, l);
}

ta_status ta_cuda_fast_tma_maps(const ta_plan *plan, const ta_fwd_args *a, const ta_fast_launch *fl,
                                ta_fast_tma_params *tp) {
    const ta_problem *pr = &plan->p;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    ta_ws_encode_fn enc;
    ta_status st;
    /* the driver's entry point through the runtime: no -lcuda (the call is
     * CUDA 12.5's; an older toolkit builds a table whose warp-specialised
     * candidates refuse, and the default runs candidate 1) */
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || fn == NULL) {
        (void)cudaGetLastError();
        return TA_ERR_UNSUPPORTED;
    }
#else
    (void)q;
    return TA_ERR_UNSUPPORTED;
#endif
    enc = reinterpret_cast<ta_ws_encode_fn>(fn);
    if ((st = ta_ws_map(enc, &tp->tq, a->q, pr->head_dim, pr->seq_q, pr->heads_q, pr->batch,
                        &plan->layout.q, fl->block_m)) != TA_OK)
        return st;
    if ((st = ta_ws_map(enc, &tp->tk, a->k, pr->head_dim, pr->seq_k, pr->heads_kv, pr->batch,
                        &plan->layout.k, fl->block_n)) != TA_OK)
        return st;
    return ta_ws_map(enc, &tp->tv, a->v, pr->head_dim_v, pr->seq_k, pr->heads_kv, pr->batch,
                     &plan->layout.v, fl->block_n);
}
