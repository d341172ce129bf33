/*
 * CUDA MTA forward, TA_PRECISION_FAST, f16 / bf16 storage: the key-query
 * convolution on tensor cores by folding its key direction into k (docs/cuda.md
 * section 7, "Fast MTA"; docs/mta.md holds the operation).
 *
 * The convolved score of a visible (i, j) is (i'_a = i - (c_q-1-a), j'_b =
 * j + b - P, S~ the raw score where (i', j') is visible, else 0)
 *
 *   C[i][j] = sum_a sum_b w[a][b] S~[i'_a][j'_b].
 *
 * Where every term's pair is visible this is sum_a q_{i'_a} . kf_a[j] scale
 * with kf_a[j] = sum_b w[a][b] k_{j'_b}: c_q products of a shifted q tile
 * with c_q filtered k tensors, on tensor cores, in place of the conv. Rows
 * outside [-q_history, S_q) and keys outside [0, L) are zero in q and k, as
 * S~ is there, so the fold is exact in the padding too; it differs from C
 * only by the terms of pairs the causal mask hides (j'_b > i'_a + off), which
 * exist only for outputs within E = P + c_q - 1 keys of the diagonal
 * (0 <= delta = i + off - j < E). There, F minus those terms would cancel
 * (F's rounding, relative to |kf|, is relative to the hidden terms too), so
 * those E entries per row are computed directly instead:
 *
 *   C[i][j] = F[i][j] = sum_a q_{i'_a} . kf_a[j]           delta >= E   (raw, unscaled)
 *   C[i][j] = diag[i][delta] = sum over (a, b) with e = b - P + c_q - 1 - a - delta <= 0
 *             of w[a][b] band[i'_a][e],  band[r][e] = q_r . k_{r + off + e}   delta < E
 *
 * Three kernels per call, in this order on the stream:
 *   1. ta_fast_mta_kf_kernel:   kf [B, H, S_k, c_q, D] (storage type, f32
 *      sums b ascending, rounded once), one kf row per (query head, key):
 *      the kernels are per query head, also under GQA;
 *   2. ta_fast_mta_diag_kernel: diag [B, H, S_q, E] f32 and, with a window's
 *      left bound, edge [B, H, S_q, P] (band rows in shared memory, f32 dot
 *      products over d ascending; terms a, b ascending);
 *   3. ta_fast_mta_fwd_kernel:  the attention, SDPA's mma.sync forward
 *      (cuda/ta_cuda_fast_fwd.cu) with step 1 over c_q chunks: s += q(shifted
 *      a rows) kf_a^T, then s = diag near the diagonal (and edge next to the
 *      window's start), then its steps 2-5.
 *
 * Cost (6 x 11, D = 128): c_q + 1 = 7 products of D per score where SDPA has
 * 2 (3.5x its tensor-core work); kf is c_q times k's bytes, read by every Q
 * tile (so Q tiles of 128 rows). Error: the fold rounds kf to the storage type
 * (relative 2^-8 for bf16, 2^-11 for f16, of |kf|), on top of SDPA fast mode's
 * p rounding; the bound and the measured errors: docs/exactness.md.
 *
 * A sliding window's left bound wl hides the pairs left of their own row's
 * window start too: they exist only for the P = (c_k - 1)/2 keys from each
 * row's start lo(i) = i + off - wl on (0 <= g = j - lo(i) < P), whose scores
 * are computed directly as well (edge[i][g], kernel 2).
 *
 * Deterministic (no atomics, fixed orders), not bit-identical to REF.
 * Problems it takes: ta_cuda_fast_mta_path (cuda/ta_cuda_layout.c): causal
 * (MTA always is), sliding windows, seqlens_k (host or device), GQA, S_q !=
 * S_k, q_history, strides with 16-byte rows; the launcher gives the rest (rows not on 16
 * bytes) to the exact kernels, whose bits satisfy any fast bound.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_fast_mta.cuh"
#include "ta_cuda_host.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

/* ---- 3. the attention (1. kf and 2. diag: cuda/ta_cuda_fast_mta.cuh) ---- */

/* NB: chunk buffers of [BN][LD] in the ring (a K tile's c_q kf chunks, then
 * its v). Shared memory (storage type):
 *
 *   +-----------------------------+------------------------------+
 *   | q [BM + c_q - 1][LD]        | ring [NB][BN][LD]            |
 *   +-----------------------------+------------------------------+
 *
 * q row rho holds query row row0 - (c_q - 1) + rho (history rows from q_hist,
 * zeros outside [-q_history, S_q)), so chunk a's A operand is q from row a on. */
template <int D, int NW, int BN, int NB, int G> struct ta_fast_mta_traits {
    static constexpr int LD = D + 8;
    static constexpr int BM = 16 * NW;
    static constexpr int THREADS = 32 * NW;
    static constexpr int NT = BN / 8;
    static constexpr int DT = D / 8;
    static constexpr int NS = NB / G; /* stages of G chunks */
    static_assert(D % 16 == 0 && BN % 16 == 0, "mma k-steps of 16");
    static_assert(NB % G == 0 && NS >= 2, "a ring of at least two stages");
    /* shared memory = SMEM_BASE + c_q SMEM_PER_CQ bytes: q's BM + c_q - 1
     * rows, the ring's NB BN */
    static constexpr size_t SMEM_PER_CQ = (size_t)LD * 2;
    static constexpr size_t SMEM_BASE = ((size_t)(BM - 1) + (size_t)NB * BN) * SMEM_PER_CQ;
};

/* One block of NW warps per (batch b, query head h, Q tile of BM = 16 NW
 * rows), as the SDPA kernel; per K tile of BN keys (k_begin .. k_end - 1):
 *   1. s = sum_a q(rows shifted by a - (c_q-1)) kf_a^T   c_q mma chunks
 *   1b. s = diag near the diagonal                        (the header)
 *   2-5. mask, online softmax, o += p v, o / l and lse    as SDPA
 * The chunks (c_q of kf, one of v per K tile) stream through a ring of NB
 * buffers in stages of G chunks: stage n + NS - 1 loads (one cp.async group)
 * while stage n computes; one block barrier per stage. MINB: blocks per SM
 * the registers are held to (__launch_bounds__). */
template <int D, int NW, int BN, int NB, int G, int MINB, bool BF16>
__global__ void __launch_bounds__(32 * NW, MINB)
    ta_fast_mta_fwd_kernel(const __grid_constant__ ta_fast_mta_params p) {
    typedef ta_fast_mta_traits<D, NW, BN, NB, G> T;
    extern __shared__ float4 ta_fast_mta_smem[];
    const int32_t cq = p.conv_q, n_ch = cq + 1;
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fast_mta_smem);
    uint16_t *ring = sq + (T::BM + cq - 1) * T::LD;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * T::BM, wrow0 = row0 + 16 * warp;
        const int32_t ra = wrow0 + (lane >> 2); /* this lane's rows: ra, ra + 8 */
        const ta_fast_mta_regions rg = ta_fast_mta_regions_of(p, at);
        const int32_t total = (c.k_end - c.k_begin) * n_ch;
        int32_t lo[2], hi[2];
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        float s[4 * T::NT];
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i)
            o[i] = 0.0f;

        __syncthreads(); /* the previous tile is done with shared memory */
        if (total <= 0) {
            ta_fast_store_rows<BF16, T::DT>(p, c, ra, tq, o, m, l);
            continue;
        }
        /* chunk g of this Q tile: K tile k_begin + g / n_ch, part g % n_ch
         * (a < c_q: kf_a; c_q: v), into ring buffer g % NB */
        auto load_chunk = [&](int32_t g) {
            const int32_t part = g % n_ch, col0 = (c.k_begin + g / n_ch) * BN;
            uint16_t *dst = ring + (g % NB) * BN * T::LD;
            if (part < cq)
                ta_fast_load_rows<D, BN, T::THREADS>(dst, p.kf, rg.kf_off + part * D,
                                                     (int64_t)cq * D, col0, c.key_len);
            else
                ta_fast_load_rows<D, BN, T::THREADS>(dst, v, c.v, p.lay.v.seq, col0, c.key_len);
        };
        /* prologue: q (with its halo) and stage 0 as group 0, stages 1 ..
         * NS - 2 one group each (empty past the last chunk) */
        ta_fast_mta_load_q<D, T::THREADS>(sq, p, c, row0 - (cq - 1), T::BM + cq - 1);
        for (int32_t g = 0; g < (T::NS - 1) * G; ++g) {
            if (g < total) load_chunk(g);
            if (g % G == G - 1) ta_fast_cp_commit();
        }
        for (int32_t g0 = 0; g0 < total; g0 += G) {
            /* stage g0 / G has landed; every warp is done with the previous
             * stage, whose buffers stage g0 / G + NS - 1 takes */
            ta_fast_cp_wait<T::NS - 2>();
            __syncthreads();
#pragma unroll
            for (int cc = 0; cc < G; ++cc)
                if (g0 + (T::NS - 1) * G + cc < total) load_chunk(g0 + (T::NS - 1) * G + cc);
            ta_fast_cp_commit();
#pragma unroll
            for (int cc = 0; cc < G; ++cc) {
                const int32_t g = g0 + cc, part = g % n_ch, col0 = (c.k_begin + g / n_ch) * BN;
                const uint16_t *buf = ring + (g % NB) * BN * T::LD;
                if (g >= total) break;
                if (part < cq) { /* step 1 */
                    if (part == 0) {
#pragma unroll
                        for (int i = 0; i < 4 * T::NT; ++i)
                            s[i] = 0.0f;
                    }
                    ta_fast_qk_add<T, D, BN, BF16>(s, sq + part * T::LD, buf, lane, warp);
                    continue;
                }
                ta_fast_mta_direct_tile<T::NT>(s, p, rg, wrow0, ra, col0, tq); /* step 1b */
                { /* steps 2-3 */
                    float cr[2];
                    ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, cr);
                    ta_fast_rescale<T::DT>(o, cr);
                }
                ta_fast_pv<T, D, BN, BF16>(o, s, buf, lane); /* step 4 */
            }
        }
        ta_fast_store_rows<BF16, T::DT>(p, c, ra, tq, o, m, l); /* step 5 */
    }
}

/* ---- host ---- */

/* A configuration: the attention kernel and its tile. */
struct ta_fast_mta_cfg {
    const void *kernel;
    int threads, block_m, block_n;
    size_t smem_base, smem_per_cq; /* shared memory: smem_base + c_q smem_per_cq bytes */
    int sm90;                      /* the wgmma kernel: an sm_90 device only */
};

template <int D, int NW, int BN, int NB, int G, int MINB, bool BF16>
static ta_fast_mta_cfg ta_fast_mta_cfg_of() {
    typedef ta_fast_mta_traits<D, NW, BN, NB, G> T;
    ta_fast_mta_cfg c;
    c.kernel =
        reinterpret_cast<const void *>(&ta_fast_mta_fwd_kernel<D, NW, BN, NB, G, MINB, BF16>);
    c.threads = T::THREADS;
    c.block_m = T::BM;
    c.block_n = BN;
    c.smem_base = T::SMEM_BASE;
    c.smem_per_cq = T::SMEM_PER_CQ;
    c.sm90 = 0;
    return c;
}

/* The candidates (tile_config k = 1 .. TA_CUDA_FAST_MTA_CFGS names c[k - 1]),
 * as (NW warps: Q tiles of 16 NW rows; BN keys; NB buffers; G chunks per
 * stage; MINB blocks per SM). Measured on an H100 (bf16, B = 1, H = 16, S =
 * 1k .. 8k, 6 x 11 and 7 x 7; docs/cuda.md section 7, "Fast MTA"):
 *   1 (4, 128, 2, 1, 2), the default off sm_90: fastest of 1-4 on all 12 shapes, by 2-16 %
 *     over the next (two blocks of 4 warps per SM, 238 registers; 128-key
 *     tiles halve the barriers per product);
 *   2 (4, 64, 3, 1, 3): three blocks per SM, registers held to 168;
 *   3 (8, 64, 4, 2, 2): 128-row tiles, half the kf traffic of 2 (100 bytes of
 *     spills at D = 128);
 *   4 (4, 64, 4, 1, 1): two blocks per SM, one barrier per chunk.
 * 2, 3 and 4 give the same bits (64-key tiles: the online softmax rescales at
 * the same keys); 1 rescales every 128 keys. Measured and dropped (at S = 4k
 * and 8k): 8 warps with one block per SM (G = 1 or 2, NB = 4 or 8: 16-26 %
 * slower than 2); 4 warps with NB = 8, G = 2 (15-59 % slower than 2) and with
 * NB = 4, G = 2, two blocks (11-17 % slower than 2); 4 warps, NB = 2, three
 * blocks (within 2 % of 2); 8 warps with 32-key tiles (26-44 % slower than 2).
 *   5: the wgmma kernel (cuda/ta_cuda_fast_mta_sm90.cu; 2 warpgroups, 128-row
 *     Q tiles, 128-key tiles, one block per SM), sm_90 devices only
 *     (TA_ERR_UNSUPPORTED elsewhere); its own bits; 1.18-1.68x faster than 1
 *     on all 12 shapes (H200, 2026-12-02, bench/results/fast_mta_fwd_h200_
 *     2026-12-02{_wg,}.log; a variant with its warpgroups a chunk apart was
 *     4-14 % slower: the kernel's header).
 * tile_config 0 is 5 on an sm_90 device (of a build with sm_90a code), else 1. */
template <int D, bool BF16> static int ta_fast_mta_fill(ta_fast_mta_cfg *c) {
    ta_cuda_fast_mta_wg w;
    c[0] = ta_fast_mta_cfg_of<D, 4, 128, 2, 1, 2, BF16>();
    c[1] = ta_fast_mta_cfg_of<D, 4, 64, 3, 1, 3, BF16>();
    c[2] = ta_fast_mta_cfg_of<D, 8, 64, 4, 2, 2, BF16>();
    c[3] = ta_fast_mta_cfg_of<D, 4, 64, 4, 1, 1, BF16>();
    if (!ta_cuda_fast_mta_wg_launch(D, BF16, &w)) return 4;
    c[4].kernel = w.kernel;
    c[4].threads = w.threads;
    c[4].block_m = w.block_m;
    c[4].block_n = w.block_n;
    c[4].smem_base = w.smem; /* q's region holds the halo of any c_q <= 16 */
    c[4].smem_per_cq = 0;
    c[4].sm90 = 1;
    return 5;
}

template <bool BF16> static int ta_fast_mta_candidates(int32_t d, ta_fast_mta_cfg *c) {
    switch (d) {
    case 64: return ta_fast_mta_fill<64, BF16>(c);
    case 96: return ta_fast_mta_fill<96, BF16>(c);
    case 128: return ta_fast_mta_fill<128, BF16>(c);
    default: return 0;
    }
}

} /* namespace */

/* (cuda/ta_cuda_fast.cuh) */
int ta_cuda_fast_mta_aligned(const ta_plan *plan, const ta_fwd_args *a) {
    const ta_problem *pr = &plan->p;
    ta_problem hist = *pr;
    hist.seq_q = pr->q_history;
    return ta_cuda_fast_rows_aligned(pr, a->q, &plan->layout.q, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->k, &plan->layout.k, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->v, &plan->layout.v, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->o, &plan->layout.o, 0) &&
           (pr->q_history == 0 ||
            ta_cuda_fast_rows_aligned(&hist, a->q_hist, &plan->layout.q_hist, 0));
}

/* (cuda/ta_cuda_fast.cuh) */
ta_status ta_cuda_fast_mta_rope_view(const ta_plan *plan, const ta_fwd_args *a,
                                     const ta_cuda_fwd_ws *ws, ta_plan *sub, ta_fwd_args *a2,
                                     const ta_plan **pl, const ta_fwd_args **aa) {
    ta_status st;
    *pl = plan;
    *aa = a;
    if (plan->stages.load != TA_LOAD_ROPE) return TA_OK;
    if ((st = ta_cuda_check_rope(plan)) != TA_OK) return st;
    ta_cuda_fast_mta_rope_plan(plan, 0, sub);
    *a2 = *a;
    a2->q = ws->rot_q;
    a2->k = ws->rot_k;
    if (plan->p.q_history > 0) a2->q_hist = ws->rot_qh;
    if (plan->p.kv_page_size > 0) {
        a2->v = ws->rot_v;
        a2->block_table = NULL;
    }
    *pl = sub;
    *aa = a2;
    return TA_OK;
}

ta_status ta_cuda_fast_mta_rope_fwd_turn(const ta_plan *plan, const ta_fwd_args *a,
                                         const ta_cuda_fwd_ws *ws, void *stream) {
    if (plan->stages.load != TA_LOAD_ROPE) return TA_OK;
    return ta_cuda_fast_mta_rope_turn(plan, a->q, a->k, a->q_hist, a->v, a->block_table,
                                      ws->rot_q, ws->rot_k,
                                      plan->p.q_history > 0 ? ws->rot_qh : NULL,
                                      plan->p.kv_page_size > 0 ? ws->rot_v : NULL, stream);
}

extern "C" ta_status ta_cuda_fast_mta_fwd(const ta_plan *plan0, const ta_fwd_args *a0,
                                          const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan0->p;
    const void *ptrs[7] = {
        a0->q, a0->k, a0->v, a0->o, a0->lse, a0->conv_w, pr->q_history > 0 ? a0->q_hist : NULL};
    const int bf16 = pr->dtype == TA_BF16;
    ta_fast_mta_cfg cand[TA_CUDA_FAST_MTA_CFGS];
    ta_fast_mta_params prm;
    ta_cuda_launch_desc launch[3];
    ta_tiling t;
    ta_plan sub;
    ta_fwd_args a2;
    const ta_plan *plan;
    const ta_fwd_args *a;
    size_t smem;
    int n, nl = 0, pick;
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 7)) != TA_OK) return st;
    /* rows off 16 bytes: the exact kernels (nothing launched yet; with the
     * rotary stage they turn q and k as they load them) */
    if (!ta_cuda_fast_mta_aligned(plan0, a0)) return ta_cuda_mta_fwd(plan0, a0, ws, stream);
    /* the rotary stage: the kernels below on the turned copies (plan, a) */
    if ((st = ta_cuda_fast_mta_rope_view(plan0, a0, ws, &sub, &a2, &plan, &a)) != TA_OK)
        return st;
    n = bf16 ? ta_fast_mta_candidates<true>(pr->head_dim, cand)
             : ta_fast_mta_candidates<false>(pr->head_dim, cand);
    if (n == 0 || pr->tile_config > n) return TA_ERR_UNSUPPORTED;
    /* tile_config 0: the wgmma kernel (5) where it runs, else 1 */
    {
        const int sm90 = ta_cuda_fast_is_sm90();
        if (sm90 < 0) return TA_ERR_DEVICE;
        pick = pr->tile_config > 0 ? pr->tile_config - 1 : sm90 && n >= 5 ? 4 : 0;
        if (cand[pick].sm90 && !sm90) return TA_ERR_UNSUPPORTED;
    }
    const ta_fast_mta_cfg &cf = cand[pick];
    smem = cf.smem_base + (size_t)pr->conv_q * cf.smem_per_cq;
    if ((st = ta_cuda_smem_opt_in(cf.kernel, smem, smem)) != TA_OK) return st;
    /* SDPA's tiles (the fold needs no conv halos) with the plan's mask, history
     * and one split, as every CUDA launcher makes its tiling */
    {
        ta_plan no_halo = *plan;
        no_halo.p.conv_q = no_halo.p.conv_k = 0;
        if ((st = ta_cuda_tiling(&no_halo, cf.block_m, cf.block_n, TA_TILING_FWD, &t)) != TA_OK)
            return st;
    }
    ta_cuda_params_fwd(&prm, plan, &t, a, ws);
    prm.kf = static_cast<uint16_t *>(ws->mta_kf);
    prm.diag = ws->mta_diag;
    prm.band = ta_cuda_fast_mta_band(plan);
    prm.edge = ws->mta_edge;
    prm.edge_n = ta_cuda_fast_mta_edge(plan);
    {
        const size_t kf_smem = ta_fast_mta_kf_smem(pr);
        const void *kk = bf16 ? reinterpret_cast<const void *>(&ta_fast_mta_kf_kernel<true>)
                              : reinterpret_cast<const void *>(&ta_fast_mta_kf_kernel<false>);
        if ((st = ta_cuda_smem_opt_in(kk, kf_smem, kf_smem)) != TA_OK) return st;
        launch[nl++] = ta_cuda_launch_of(
            kk, &prm, (int64_t)pr->heads_q * ((pr->seq_k + KF_ROWS - 1) / KF_ROWS), 0, kf_smem);
    }
    if (prm.band > 0) {
        const size_t band_smem = ta_fast_mta_diag_smem(pr, prm.band, prm.edge_n);
        const void *kc = bf16 ? reinterpret_cast<const void *>(&ta_fast_mta_diag_kernel<true>)
                              : reinterpret_cast<const void *>(&ta_fast_mta_diag_kernel<false>);
        if ((st = ta_cuda_smem_opt_in(kc, band_smem, band_smem)) != TA_OK) return st;
        launch[nl++] = ta_cuda_launch_of(
            kc, &prm, (int64_t)pr->heads_q * ((pr->seq_q + DIAG_ROWS - 1) / DIAG_ROWS), 0,
            band_smem);
    }
    launch[nl] = ta_cuda_launch_of(cf.kernel, &prm, (int64_t)pr->heads_q * t.num_q_tiles, 0, smem);
    launch[nl].threads = cf.threads;
    for (int i = 0; i < nl; ++i)
        launch[i].threads = PREP_THREADS;
    if ((st = ta_cuda_fast_mta_rope_fwd_turn(plan0, a0, ws, stream)) != TA_OK) return st;
    return ta_cuda_launch_batches(launch, nl + 1, a->seqlens_k, pr->batch, stream);
}
