/*
 * CUDA SDPA forward, TA_PRECISION_FAST, f16 / bf16 storage: tensor cores through
 * mma.sync.m16n8k16 (sm_80 and later; the path of sm_80/86/89, and of sm_90 in
 * a build without sm_90a code or when tile_config names it); the table of
 * candidates and the launcher for both this kernel and the wgmma one
 * (cuda/ta_cuda_fast_fwd_sm90.cu), in two halves (ta_cuda_fast_table,
 * ta_cuda_fast_run) that ta_tune_fwd's timing (cuda/ta_cuda_fast_tune.cu)
 * shares. docs/cuda.md section 7 ("Fast mode").
 *
 * Not bit-identical to REF: the products run on tensor cores (f32 accumulate in
 * the hardware's order), the softmax uses ex2.approx, and p is rounded to the
 * storage type before p V (as FlashAttention-2 does). Deterministic: no atomics,
 * one block per (batch, head, Q tile), every sum in a fixed order, so the bits
 * depend only on the problem and the tile configuration (ta_cuda_fast_cfg),
 * never on the SM count or launch order. Error bound: docs/exactness.md.
 *
 * One block of NW warps per (batch b, query head h, Q tile of BM = 16 NW rows);
 * warp w owns rows 16w .. 16w+15 of the tile, and each lane holds, in the mma
 * accumulator layout, rows g = lane/4 and g + 8 and columns 2 (lane%4) + {0,1}
 * of every 8-column block. The K tiles are the per-tile context's
 * [k_begin, k_end) of the tiling BM x BN (ta_cuda_tiling: causal bottom-right,
 * seqlens_k, window), ascending; per K tile:
 *   1. s = q k^T             mma, q fragments from shared memory (ldmatrix)
 *   2. mask                  s = -inf outside each row's key interval [lo, hi)
 *                            (ta_tile_row_keys; skipped when the warp's rows
 *                            all see the whole tile)
 *   3. online softmax        in base 2: x = s * scale * log2(e); m_new =
 *                            max(m, rowmax x); c = 2^(m - m_new); p = 2^(x - m_new);
 *                            l = l c + sum p; o = o c (row max over the 4 lanes
 *                            of a row by shuffles)
 *   4. o += p v              p rounded to the storage type, as the A operand
 * then o = o / l, lse = (m + log2 l) ln 2; a row that sees no key: o = 0,
 * lse = -inf.
 *
 * Shared memory (storage type; rows of LD = D elements swizzled where D is a
 * multiple of 64, else padded to LD = D + 8, so that the 8 rows of an
 * ldmatrix fall in 8 distinct 16-byte bank groups: ta_fast_row_at):
 *
 *   +-------------------+-------------------+-------------------+
 *   | q  [BM][LD]       | k  [BN][LD]       | v  [BN][LD]       |
 *   +-------------------+-------------------+-------------------+
 *
 * Loads are cp.async (16 bytes, rows past the key length or S_q zero-filled).
 * Pipeline (as FlashAttention-2): v of tile j loads while s = q k_j^T runs,
 * k of tile j+1 loads while o += p v_j runs. The multi-stage schedule
 * (ST >= 2 buffers of k and v, tile j + ST - 1 loading while tile j
 * computes) gives the same bits; on an H100 it wins
 * with 8 warps (one block per SM either way: 10-16 %) and loses with 4,
 * where the one-buffer kernel fits more blocks per SM (docs/cuda.md
 * section 7, "Configurations").
 *
 * Layout: any strides whose rows are 16-byte aligned (ta_cuda_fast_fwd checks,
 * else TA_ERR_UNSUPPORTED); row r of a slice is at the context's offset + r *
 * its seq stride.
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

/* ---- the kernel ---- */

/* ST: buffers of k and v (1: ta_cuda_fast_fwd_kernel's schedule). */
template <int D, int NW, int BN, int ST, bool BF16> struct ta_fast_fwd_traits {
    /* swizzled shared rows where D is a multiple of 64 (ta_fast_row_at in
     * cuda/ta_cuda_fast.cuh), else padded ones */
    static constexpr bool SW = D % 64 == 0;
    static constexpr int LD = SW ? D : D + 8; /* shared row, elements */
    static constexpr int BM = 16 * NW;     /* Q tile rows */
    static constexpr int THREADS = 32 * NW;
    static constexpr int NT = BN / 8;      /* 8-key column blocks of s */
    static constexpr int DT = D / 8;       /* 8-feature column blocks of o */
    static constexpr size_t SMEM = (size_t)(BM + 2 * ST * BN) * LD * 2;
    static_assert(D % 16 == 0 && BN % 16 == 0, "mma k-steps of 16");
};

/* ST = 1, as FlashAttention-2: one buffer of k and v; v of tile j loads while
 * s = q k_j^T runs, k of tile j+1 while o += p v_j runs; two block barriers
 * per K tile. (ta_cuda_fast_fwd_pipe_kernel shares its preamble: one kernel
 * with both loops behind `if constexpr` moved ptxas to 4-32 bytes of spills
 * in three of these instantiations.) */
template <int D, int NW, int BN, bool BF16>
__global__ void __launch_bounds__(32 * NW)
    ta_cuda_fast_fwd_kernel(const __grid_constant__ ta_cuda_params p) {
    typedef ta_fast_fwd_traits<D, NW, BN, 1, BF16> T;
    extern __shared__ float4 ta_fast_dyn_smem[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fast_dyn_smem);
    uint16_t *sk = sq + T::BM * T::LD;
    uint16_t *sv = sk + BN * T::LD;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int32_t n_split = t.num_splits; /* split-K: parts per Q tile (1: none) */
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);
    const uint16_t *k = static_cast<const uint16_t *>(p.k);
    const uint16_t *v = static_cast<const uint16_t *>(p.v);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const ta_tile_ctx c = ta_cuda_fast_context(p, at, split);
        const int32_t row0 = at.qt * T::BM;
        const int32_t ra = row0 + 16 * warp + (lane >> 2); /* this lane's rows: ra, ra + 8 */
        int32_t lo[2], hi[2];
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;

        __syncthreads(); /* the previous tile is done with shared memory */
        if (c.k_begin < c.k_end) {
            ta_fast_load_rows<D, T::BM, T::THREADS, false, T::SW>(sq, q, c.q, p.lay.q.seq, row0,
                                                                  t.seq_q);
            ta_fast_load_rows<D, BN, T::THREADS, false, T::SW>(sk, k, c.k, p.lay.k.seq,
                                                               c.k_begin * BN, c.key_len);
            ta_fast_cp_commit();
        }
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t col0 = kt * BN;
            float s[4 * T::NT];
            /* k_j (and q) have landed; every warp is done with v_{j-1} */
            ta_fast_cp_wait<0>();
            __syncthreads();
            ta_fast_load_rows<D, BN, T::THREADS, false, T::SW>(sv, v, c.v, p.lay.v.seq, col0,
                                                               c.key_len);
            ta_fast_cp_commit();
            ta_fast_qk<T, D, BN, BF16>(s, sq, sk, lane, warp); /* step 1 */
            /* steps 2-3: mask, scale to base 2, online softmax per row */
            {
                float corr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, corr);
                ta_fast_rescale<T::DT>(o, corr);
            }
            /* v_j has landed; every warp is done with k_j: fetch k_{j+1} */
            ta_fast_cp_wait<0>();
            __syncthreads();
            if (kt + 1 < c.k_end) {
                ta_fast_load_rows<D, BN, T::THREADS, false, T::SW>(sk, k, c.k, p.lay.k.seq,
                                                                   col0 + BN, c.key_len);
                ta_fast_cp_commit();
            }
            ta_fast_pv<T, D, BN, BF16>(o, s, sv, lane); /* step 4 */
        }
        /* step 5: o / l and lse */
        ta_fast_store_part<BF16, T::DT>(p, c, split, ra, tq, o, m, l);
    }
}

/* ST >= 2 buffers of k and v (sk, sv: [ST][BN][LD]): K tile j + ST - 1's k
 * and v load (one cp.async group per K tile) while tile j computes, so a
 * warp waits on memory only when ST - 1 tiles of loads take longer than one
 * tile's products; one block barrier per K tile instead of two. The products,
 * softmax and store are the one-buffer kernel's, in the same order: equal
 * (NW, BN), equal bits (test_cuda_fast checks). */
template <int D, int NW, int BN, int ST, bool BF16, bool PAGED>
__global__ void __launch_bounds__(32 * NW)
    ta_cuda_fast_fwd_pipe_kernel(const __grid_constant__ ta_cuda_params p) {
    typedef ta_fast_fwd_traits<D, NW, BN, ST, BF16> T;
    static_assert(ST >= 2, "the one-buffer schedule is ta_cuda_fast_fwd_kernel");
    extern __shared__ float4 ta_fast_dyn_smem[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fast_dyn_smem);
    uint16_t *sk = sq + T::BM * T::LD;   /* [ST][BN][LD] */
    uint16_t *sv = sk + ST * BN * T::LD; /* [ST][BN][LD] */
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int32_t n_split = t.num_splits; /* split-K: parts per Q tile (1: none) */
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt * n_split;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    const uint16_t *q = static_cast<const uint16_t *>(p.q);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile / n_split, n_qt);
        const ta_tile_ctx c = ta_cuda_fast_context(p, at, split);
        const int32_t row0 = at.qt * T::BM;
        const int32_t ra = row0 + 16 * warp + (lane >> 2); /* this lane's rows: ra, ra + 8 */
        /* paged KV (PAGED: a kernel of its own, so the others carry no cost) */
        const ta_cuda_pages pg =
            PAGED ? ta_cuda_pages_of(p, p.batch_begin + at.b_local) : ta_cuda_pages{};
        int32_t lo[2], hi[2];
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;

        /* the previous tile is done with shared memory (its loads all waited
         * for: only empty groups can still be pending) */
        __syncthreads();
        if (c.k_begin >= c.k_end) {
            ta_fast_store_part<BF16, T::DT>(p, c, split, ra, tq, o, m, l);
            continue;
        }
        /* prologue: q with K tile k_begin (group 0), then tiles k_begin + 1 ..
         * k_begin + ST - 2, one group each (empty past k_end) */
        ta_fast_load_rows<D, T::BM, T::THREADS, false, T::SW>(sq, q, c.q, p.lay.q.seq, row0,
                                                              t.seq_q);
#pragma unroll
        for (int st = 0; st < ST - 1; ++st) {
            const int32_t kt = c.k_begin + st;
            if (kt < c.k_end)
                ta_fast_load_kv<D, BN, T::THREADS, T::SW>(sk + st * BN * T::LD,
                                                          sv + st * BN * T::LD, p, c, kt, pg);
            ta_fast_cp_commit();
        }
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t j = kt - c.k_begin, col0 = kt * BN;
            const uint16_t *skj = sk + (j % ST) * BN * T::LD;
            const uint16_t *svj = sv + (j % ST) * BN * T::LD;
            float s[4 * T::NT];
            /* tile j's group has landed (at most ST - 2 younger ones pending);
             * every warp is done with tile j - 1, whose buffer tile j + ST - 1
             * takes */
            ta_fast_cp_wait<ST - 2>();
            __syncthreads();
            {
                const int32_t kn = kt + ST - 1;
                const int bn = (j + ST - 1) % ST;
                if (kn < c.k_end)
                    ta_fast_load_kv<D, BN, T::THREADS, T::SW>(sk + bn * BN * T::LD,
                                                              sv + bn * BN * T::LD, p, c, kn, pg);
                ta_fast_cp_commit(); /* empty past k_end: the count stays per tile */
            }
            ta_fast_qk<T, D, BN, BF16>(s, sq, skj, lane, warp); /* step 1 */
            {                                                   /* steps 2-3 */
                float corr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, corr);
                ta_fast_rescale<T::DT>(o, corr);
            }
            ta_fast_pv<T, D, BN, BF16>(o, s, svj, lane); /* step 4 */
        }
        /* step 5: o / l and lse */
        ta_fast_store_part<BF16, T::DT>(p, c, split, ra, tq, o, m, l);
    }
}

/* ---- configurations: one table (docs/cuda.md section 7) ----
 * Per head dim, the candidates ta_problem.tile_config = k >= 1 names (k - 1
 * here). Candidate 1 is the wgmma forward (sm_90 only,
 * cuda/ta_cuda_fast_fwd_sm90.cu); the others are this file's mma.sync kernel
 * as (NW warps: a Q tile of 16 NW rows; BN keys per K tile). tile_config = 0:
 * candidate 1 on an sm_90 device, else the first mma.sync candidate.
 * Measured choices: docs/benchmarks.md. */
template <int D, int NW, int BN, int ST, bool BF16> static ta_fast_launch ta_fast_launch_of() {
    typedef ta_fast_fwd_traits<D, NW, BN, ST, BF16> T;
    const void *k, *kp;
    if constexpr (ST == 1) {
        k = reinterpret_cast<const void *>(&ta_cuda_fast_fwd_kernel<D, NW, BN, BF16>);
        kp = nullptr; /* paged KV: the multi-stage kernels only */
    } else {
        k = reinterpret_cast<const void *>(
            &ta_cuda_fast_fwd_pipe_kernel<D, NW, BN, ST, BF16, false>);
        kp = reinterpret_cast<const void *>(
            &ta_cuda_fast_fwd_pipe_kernel<D, NW, BN, ST, BF16, true>);
    }
    return ta_fast_mma_launch(k, kp, T::SMEM, T::THREADS, T::BM, BN);
}

/* The one-buffer mma.sync candidates of head dim d into c[0 ..]: how many. */
template <bool BF16> static int ta_fast_mma_candidates(int32_t d, ta_fast_launch *c) {
    switch (d) {
    case 64:
        c[0] = ta_fast_launch_of<64, 4, 64, 1, BF16>();
        c[1] = ta_fast_launch_of<64, 8, 64, 1, BF16>();
        c[2] = ta_fast_launch_of<64, 4, 128, 1, BF16>();
        return 3;
    case 96:
        c[0] = ta_fast_launch_of<96, 4, 64, 1, BF16>();
        c[1] = ta_fast_launch_of<96, 8, 64, 1, BF16>();
        return 2;
    case 128:
        c[0] = ta_fast_launch_of<128, 4, 64, 1, BF16>();
        c[1] = ta_fast_launch_of<128, 8, 64, 1, BF16>();
        c[2] = ta_fast_launch_of<128, 4, 128, 1, BF16>();
        return 3;
    case 256:
        c[0] = ta_fast_launch_of<256, 4, 64, 1, BF16>();
        c[1] = ta_fast_launch_of<256, 4, 32, 1, BF16>();
        c[2] = ta_fast_launch_of<256, 8, 32, 1, BF16>();
        return 3;
    default: return 0;
    }
}

/* The multi-stage mma.sync candidates of head dim d into c[0 ..]: how many.
 * Shared memory (BM + 2 ST BN) LD 2 bytes: the first of each head dim fits
 * the 99 KB a block may take on sm_86 and sm_89 (D = 256: 98304 bytes); the
 * others want an A100's or an H100's 163 / 227 KB. */
template <bool BF16> static int ta_fast_pipe_candidates(int32_t d, ta_fast_launch *c) {
    switch (d) {
    case 64:
        c[0] = ta_fast_launch_of<64, 4, 64, 2, BF16>();
        c[1] = ta_fast_launch_of<64, 4, 64, 3, BF16>();
        return 2;
    case 96:
        c[0] = ta_fast_launch_of<96, 4, 64, 2, BF16>();
        return 1;
    case 128:
        c[0] = ta_fast_launch_of<128, 4, 64, 2, BF16>();
        c[1] = ta_fast_launch_of<128, 8, 64, 2, BF16>();
        return 2;
    case 256:
        c[0] = ta_fast_launch_of<256, 4, 32, 2, BF16>();
        c[1] = ta_fast_launch_of<256, 8, 32, 2, BF16>();
        return 2;
    default: return 0;
    }
}

/* The candidates of head dim d, in tile_config order: the wgmma forward, the
 * one-buffer mma.sync ones, the warp-specialised TMA forwards, the
 * multi-stage mma.sync ones (each group appended after the earlier ones, so
 * that earlier tile_config values keep their kernels); how many (0: d not in
 * the table; ta_cuda_fast_cfg_count in cuda/ta_cuda_layout.c says the same
 * without CUDA, and ta_cuda_fast_cfg_default names tile_config 0's pick). */
template <bool BF16>
static int ta_fast_candidates(int32_t d, ta_fast_launch c[TA_CUDA_FAST_CFG_MAX]) {
    int n = ta_cuda_fast_sm90_launch(d, BF16, &c[0]);
    const int n_mma = ta_fast_mma_candidates<BF16>(d, &c[n]);
    if (n_mma == 0) return 0;
    n += n_mma;
    n += ta_cuda_fast_ws_launch(d, BF16, &c[n]);
    n += ta_fast_pipe_candidates<BF16>(d, &c[n]);
    return n + ta_cuda_fast_decode_launch(d, BF16, &c[n]);
}

} /* namespace */

/* (cuda/ta_cuda_fast.cuh) */
int ta_cuda_fast_is_sm90(void) {
#ifndef TA_CUDA_HAVE_SM90A
    return 0;
#else
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return major == 9 && minor == 0;
#endif
}

/* 1 if stride st of a dimension of n entries keeps 16-byte rows: a multiple
 * of 8 elements, or unused (n == 1). */
static int ta_cuda_fast_stride_ok(int64_t st, int32_t n) { return n == 1 || st % 8 == 0; }

/* (cuda/ta_cuda_fast.cuh) */
int ta_cuda_fast_rows_aligned(const ta_problem *pr, const void *ptr, const ta_strides *st,
                              int kv_side) {
    const int32_t heads = kv_side ? pr->heads_kv : pr->heads_q;
    const int32_t seq = kv_side ? pr->seq_k : pr->seq_q;
    return (uintptr_t)ptr % 16u == 0 && ta_cuda_fast_stride_ok(st->seq, seq) &&
           ta_cuda_fast_stride_ok(st->head, heads) && ta_cuda_fast_stride_ok(st->batch, pr->batch);
}

/* 1 if every row of q, k, v and o starts on 16 bytes. */
static int ta_cuda_fast_aligned(const ta_plan *plan, const ta_fwd_args *a) {
    const ta_problem *pr = &plan->p;
    return ta_cuda_fast_rows_aligned(pr, a->q, &plan->layout.q, 0) &&
           ta_cuda_fast_rows_aligned(pr, a->k, &plan->layout.k, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->v, &plan->layout.v, 1) &&
           ta_cuda_fast_rows_aligned(pr, a->o, &plan->layout.o, 0);
}


ta_status ta_cuda_fast_table(const ta_plan *plan, const ta_fwd_args *a, ta_fast_table *tb) {
    const ta_problem *pr = &plan->p;
    const void *ptrs[5] = {a->q, a->k, a->v, a->o, a->lse};
    const void *rope[4] = {plan->rope.cos, plan->rope.sin, plan->rope.pos_q, plan->rope.pos_k};
    int split;
    ta_status st;
    /* device pointers first (TA_ERR_BAD_ARG; the rotary tables and positions
     * too, NULL without the stage), then what this path needs */
    if ((st = ta_cuda_check_pointers(ptrs, 5)) != TA_OK) return st;
    if ((st = ta_cuda_check_pointers(rope, 4)) != TA_OK) return st;
    if (pr->head_dim != pr->head_dim_v || !ta_cuda_fast_aligned(plan, a)) return TA_ERR_UNSUPPORTED;
    tb->n = pr->dtype == TA_BF16 ? ta_fast_candidates<true>(pr->head_dim, tb->cand)
                                 : ta_fast_candidates<false>(pr->head_dim, tb->cand);
    if (tb->n == 0) return TA_ERR_UNSUPPORTED;
    if ((tb->sm90 = ta_cuda_fast_is_sm90()) < 0) return TA_ERR_DEVICE;
    /* split-K or paged: the mma.sync kernels; with at most 16 query rows per
     * head (after GQA packing: this is the packed plan) the decode-shaped one */
    split = plan->fwd.num_splits > 1 || pr->kv_page_size > 0;
    if (split && pr->seq_q <= TA_CUDA_DEC_ROWS) split = 2;
    tb->pick0 = ta_cuda_fast_cfg_default(pr->head_dim, (pr->flags & TA_CAUSAL) != 0, tb->sm90,
                                         split) -
                1;
    return TA_OK;
}

ta_status ta_cuda_fast_run(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           const ta_fast_launch *fl, void *stream) {
    ta_tiling t;
    ta_fast_tma_params prm; /* a kernel without TMA takes its base part alone */
    const void *kernel = plan->p.kv_page_size > 0 ? fl->kernel_paged : fl->kernel;
    ta_cuda_params *const base = &prm;
    ta_cuda_launch_desc launch;
    ta_status st;
    /* the configuration's tiles, the plan's mask */
    st = ta_cuda_tiling(plan, fl->block_m, fl->block_n, TA_TILING_FWD, &t);
    if (st != TA_OK) return st;
    /* split-K: the mma.sync kernels only; paged KV: the multi-stage ones */
    if (t.num_splits > 1 && (fl->sm90 || fl->tma)) return TA_ERR_UNSUPPORTED;
    if (!kernel) return TA_ERR_UNSUPPORTED;
    if ((st = ta_cuda_smem_opt_in(kernel, fl->smem, fl->smem)) != TA_OK) return st;
    ta_cuda_params_fwd(base, plan, &t, a, ws);
    if (fl->tma && (st = ta_cuda_fast_tma_maps(plan, a, fl, &prm)) != TA_OK) return st;
    launch = fl->tma ? ta_cuda_launch_of(kernel, &prm, (int64_t)plan->p.heads_q * t.num_q_tiles,
                                         0, fl->smem)
                     : ta_cuda_launch_of(kernel, base,
                                         (int64_t)plan->p.heads_q * t.num_q_tiles * t.num_splits,
                                         0, fl->smem);
    launch.threads = fl->threads;
    if ((st = ta_cuda_launch_batches(&launch, 1, a->seqlens_k, plan->p.batch, stream)) != TA_OK)
        return st;
    return ta_cuda_merge_splits(plan, t.num_splits, a, ws, stream);
}

/* 1 if q's (or o's) rows can be addressed as one head of G S_q rows per kv
 * head: S_q == 1, or a head's rows evenly spaced (head stride = S_q x seq). */
static int ta_cuda_fast_packs(const ta_strides *st, int32_t seq_q) {
    return seq_q == 1 || st->head == (int64_t)seq_q * st->seq;
}

/* Split-K's plan (no rotary stage): the fast split count, and with GQA decode
 * packing (ta_cuda_fast_pack) the packed shape: H_kv heads of G S_q rows,
 * head h_kv's row g S_q + r being query head h_kv G + g's row r (q and o
 * strides: head G x head, seq the head stride when S_q == 1), no causal mask
 * (with S_q == 1 it hides nothing). lse [B, H, S_q] reads the same as
 * [B, H_kv, G S_q]. Where the strides do not allow it, only the count. */
static void ta_cuda_fast_pack_plan(const ta_plan *plan, ta_plan *sub) {
    const ta_problem *pr = &plan->p;
    const int32_t g = ta_cuda_fast_pack(plan);
    *sub = *plan;
    sub->fwd.num_splits = sub->stages.num_splits = ta_cuda_fast_splits(plan);
    if (g == 1 || !ta_cuda_fast_packs(&plan->layout.q, pr->seq_q) ||
        !ta_cuda_fast_packs(&plan->layout.o, pr->seq_q))
        return;
    sub->p.heads_q = pr->heads_kv;
    sub->p.seq_q = g * pr->seq_q;
    sub->p.flags &= ~(uint32_t)TA_CAUSAL;
    sub->fwd.causal = 0;
    sub->group = 1;
    sub->layout.q.seq = pr->seq_q == 1 ? plan->layout.q.head : plan->layout.q.seq;
    sub->layout.q.head = (int64_t)g * plan->layout.q.head;
    sub->layout.o.seq = pr->seq_q == 1 ? plan->layout.o.head : plan->layout.o.seq;
    sub->layout.o.head = (int64_t)g * plan->layout.o.head;
}

ta_status ta_cuda_fast_view(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                            ta_plan *sub, ta_fwd_args *a2, const ta_plan **pl,
                            const ta_fwd_args **aa) {
    const void *ptrs[2] = {a->q, a->k};
    ta_status st;
    *pl = plan;
    *aa = a;
    if (plan->stages.load != TA_LOAD_ROPE) {
        /* split-K: the fast count, and GQA decode packing where it applies */
        if (ta_cuda_fast_splits(plan) > 1) {
            ta_cuda_fast_pack_plan(plan, sub);
            *pl = sub;
        }
        return TA_OK;
    }
    if ((st = ta_cuda_check_pointers(ptrs, 2)) != TA_OK) return st;
    if (!ta_cuda_fast_rows_aligned(&plan->p, a->q, &plan->layout.q, 0) ||
        !ta_cuda_fast_rows_aligned(&plan->p, a->k, &plan->layout.k, 1))
        return TA_ERR_UNSUPPORTED;
    ta_cuda_fast_rope_plan(plan, sub);
    *a2 = *a;
    a2->q = ws->rot_q;
    a2->k = ws->rot_k;
    *pl = sub;
    *aa = a2;
    return TA_OK;
}

ta_status ta_cuda_fast_turn(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                            void *stream) {
    if (plan->stages.load != TA_LOAD_ROPE) return TA_OK;
    return ta_cuda_fast_rope_turn(plan, a->q, a->k, ws->rot_q, ws->rot_k, stream);
}

extern "C" ta_status ta_cuda_fast_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                      const ta_cuda_fwd_ws *ws, void *stream) {
    const int32_t cfg = plan->p.tile_config;
    const ta_plan *pl;
    const ta_fwd_args *aa;
    ta_plan sub;
    ta_fwd_args a2;
    ta_fast_table tb;
    int pick;
    ta_status st;
    /* the rotary stage: the un-rotated kernels on q and k turned once */
    if ((st = ta_cuda_fast_view(plan, a, ws, &sub, &a2, &pl, &aa)) != TA_OK) return st;
    if ((st = ta_cuda_fast_table(pl, aa, &tb)) != TA_OK) return st;
    if (cfg < 0 || cfg > tb.n) return TA_ERR_UNSUPPORTED;
    /* 0: the default of (head dim, causal, device class) */
    pick = cfg > 0 ? cfg - 1 : tb.pick0;
    if (!ta_fast_table_runs(&tb, pick)) return TA_ERR_UNSUPPORTED; /* wgmma: sm_90 only */
    if ((st = ta_cuda_fast_turn(plan, a, ws, stream)) != TA_OK) return st;
    st = ta_cuda_fast_run(pl, aa, ws, &tb.cand[pick], stream);
    /* the default does not refuse what the cp.async wgmma kernel runs: a
     * layout the TMA maps cannot describe falls back to it (nothing was
     * launched: ta_cuda_fast_run refuses before any launch) */
    if (st == TA_ERR_UNSUPPORTED && cfg == 0 && tb.cand[pick].tma)
        st = ta_cuda_fast_run(pl, aa, ws, &tb.cand[0], stream);
    return st;
}
