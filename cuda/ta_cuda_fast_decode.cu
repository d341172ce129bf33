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
    static constexpr int BM = TA_CUDA_DEC_ROWS; /* Q tile rows, every warp's */
    /* swizzled shared rows where D is a multiple of 64 (ta_fast_row_at in
     * cuda/ta_cuda_fast.cuh: 8 % more of the HBM bandwidth than padded ones) */
    static constexpr bool SW = D % 64 == 0;
    static constexpr int LD = SW ? D : D + 8; /* shared row, elements */
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
    static_assert(BM == 16, "one m16 tile of rows, every warp's");
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

/* The end of a Q tile: each warp's (m, l, o) into shared memory (from its
 * base: the loads are done; every cp.async group still pending is empty, but
 * waited for anyway), then per row the merge in warp order and the store
 * (ta_fast_dec_store: 8 threads per row, D / 8 columns each). */
template <class T, bool BF16>
__device__ __forceinline__ void ta_fast_dec_finish(const ta_cuda_params &p, const ta_tile_ctx &c,
                                                   int32_t split, int32_t row0,
                                                   const float (&o)[4 * T::DT], const float m[2],
                                                   float l[2], int lane, int warp,
                                                   int32_t pack = 1, int32_t or1 = 0,
                                                   ta_cuda_q_tile at = ta_cuda_q_tile{}) {
    extern __shared__ float4 ta_fast_dyn_smem[];
    float *so = reinterpret_cast<float *>(ta_fast_dyn_smem);
    float *sm = so + T::NW * T::BM * T::MLD;
    float *sl = sm + T::NW * T::BM;
    const int tq = lane & 3;
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
        /* 8 threads per row, D / 8 columns each; threads past 8 BM idle.
         * Packed (pack > 1): row r is query head at.h + r / or1's row r % or1 */
        const int r = (int)threadIdx.x >> 3, c0 = ((int)threadIdx.x & 7) * (T::DT);
        if (pack > 1) {
            if (r < pack * or1) {
                const ta_tile_ctx ch = ta_cuda_context(p, at.b_local, at.h + r / or1, at.qt);
                ta_fast_dec_store<T, BF16, T::DT>(p, ch, split, r % or1, so, sm, sl, r, c0);
            }
        } else if (r < T::BM && row0 + r < p.t.seq_q) {
            ta_fast_dec_store<T, BF16, T::DT>(p, c, split, row0 + r, so, sm, sl, r, c0);
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
        const ta_cuda_pages pg =
            PAGED ? ta_cuda_pages_of(p, p.batch_begin + at.b_local) : ta_cuda_pages{};
        int32_t lo[2], hi[2];
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
        ta_fast_row_keys(t, ra, c.key_len, lo, hi);
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;

        __syncthreads(); /* the previous tile's merge is done with shared memory */
        if (c.k_begin < c.k_end) {
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
                    ta_fast_load_kv<D, BN, T::THREADS, T::SW>(sk + bn * BN * T::LD,
                                                              sv + bn * BN * T::LD, p, c, kn, pg);
                ta_fast_cp_commit();
            }
            /* this warp's slice: every warp reads the same 16 q rows (warp 0's) */
            ta_fast_qk<T, D, T::KW, BF16>(s, sq, skj, lane, 0);
            {
                float corr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, corr);
                ta_fast_rescale_moved<T::DT>(o, corr);
            }
            ta_fast_pv<T, D, T::KW, BF16>(o, s, svj, lane);
        }
        ta_fast_dec_finish<T, BF16>(p, c, split, row0, o, m, l, lane, warp);
    }
}

template <int D, int BN, int ST, bool BF16> static ta_fast_launch ta_fast_dec_launch_of() {
    typedef ta_fast_dec_traits<D, BN, ST> T;
    return ta_fast_mma_launch(
        reinterpret_cast<const void *>(&ta_cuda_fast_decode_kernel<D, BN, ST, BF16, false>),
        reinterpret_cast<const void *>(&ta_cuda_fast_decode_kernel<D, BN, ST, BF16, true>),
        T::SMEM, T::THREADS, T::BM, BN);
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


/* ---- MTA: the key-query conv in the decode-shaped kernel ----
 *
 * Q tiles of 16 output rows again; a tile's convolved scores need the raw
 * scores of its rows and the c_q - 1 rows above (query history rows from
 * args.q_hist, or zero padding), RM = 16 MT raw rows (MT = 1 where
 * S_q + c_q - 1 <= 16, G times that packed, else 2), and of P = (c_k - 1) / 2 keys
 * on each side of every warp's key slice: HALO = 8 NH >= P extra keys each
 * side (NH = 1 for c_k <= 17, else 2), so a K buffer holds BN + 2 HALO key
 * rows (the halo rows of the neighbouring K tiles read again). Per K tile and
 * warp:
 *   1. S  = q k^T             raw, RM rows x (KW + 2 HALO) keys, mma (f32)
 *   2. S~ = S where (r, j) is visible, else 0 (the row's [lo, hi): causal,
 *      window, key length), into the warp's region of shared memory (f32)
 *   3. C[i][j] = sum_a sum_b w[a][b] S~[i - (c_q-1-a)][j + b - P], a then b
 *      ascending, f32 fma, for the warp's KW = 16 keys of each live row i:
 *      (row, 4 adjacent keys) quads dealt to the lanes in turn (lane e takes
 *      quads e, e + 32, ...; a quad's keys share each raw-score load), into
 *      shared memory, whence each lane takes its entries in the accumulator
 *      layout; w of the tile's head
 *   4. the softmax / p v / merge / store of the SDPA kernel above.
 * No fold, no rounding of filtered keys: C is the f32 conv of f32 products
 * of storage-type operands (docs/exactness.md section 9). One configuration
 * per head dim: 8 warps (KW = 16 keys each: more warps to hide the conv's
 * shared-memory latency than the SDPA kernel's 4), BN = 128 keys, ST = 3
 * buffers at D = 64, 2 at 96 and 128.
 * Runs any fast MTA problem the fold cannot serve well (ta_cuda_fast_mta_dec_path:
 * at most 16 query rows, split-K, or a paged cache). GQA packing
 * (ta_cuda_fast_mta_dec_pack): a kv head's G query heads share a block when
 * their G S_q output rows, G (S_q + c_q - 1) raw rows (MT = 1 if at most 16)
 * and G c_q c_k weights fit; head slot s owns its rows of each, its weights,
 * history rows and output addresses (its own tile context); the conv never
 * reads across slots. */
template <int D, int MT, int NH, int NW_, int ST_, bool TC_, bool SR_ = false>
struct ta_fast_mdec_traits {
    static constexpr int NW = NW_, THREADS = 32 * NW, BM = TA_CUDA_DEC_ROWS, KW = 16, BN = KW * NW;
    static constexpr int ST = ST_;
    static constexpr bool TC = TC_;          /* the conv on tensor cores (tf32 mma) */
    /* the raw scores shared by the block (one region of KR columns: each
     * key's raw scores computed once), or per warp (its KW keys and both
     * halos: RC columns, the halos computed again by the neighbours) */
    static constexpr bool SR = SR_;
    /* swizzled shared rows where D is a multiple of 64 (as the SDPA decode
     * kernel's; every row offset the kernel takes is a multiple of 8) */
    static constexpr bool SW = D % 64 == 0;
    static constexpr int LD = SW ? D : D + 8;
    static constexpr int HALO = 8 * NH;
    static constexpr int RC = KW + 2 * HALO; /* raw score columns per warp */
    static constexpr int KR = BN + 2 * HALO; /* key rows per K buffer */
    static constexpr int RM = 16 * MT;       /* raw score rows */
    static constexpr int MTILES = MT;        /* m16 tiles of raw rows */
    static_assert(16 * 2 == TA_CUDA_DEC_RAW_ROWS && BM == 16,
                  "MT = 2 holds the raw rows the host admits; one m16 tile of output rows");
    /* a raw score row in shared memory, floats. CUDA cores: RLD = 1 mod 32
     * (per warp) or 17 (shared: KR = 144 or 160), so the conv's lanes (8 rows
     * x 4 key quads) meet at most 2 to a bank; tensor cores: RLD = 4 mod 32
     * (RC = 32; shared, KR = 160) or 20 mod 32 (RC = 48; shared, KR = 144),
     * so the A fragment's loads (8 rows x 4 columns) meet no two in a bank. */
    static constexpr int RLD = (SR ? KR : RC) + (TC ? 4 : 1);
    static constexpr int NT = KW / 8;        /* the softmax / p v view: a warp's KW keys */
    static constexpr int DT = D / 8;
    static constexpr int MLD = D + 4;
    static constexpr int W_MAX = TA_CUDA_DEC_W_MAX; /* c_q c_k <= 16 x 31 */
    static constexpr int CLD = KW + 1;       /* a convolved row in shared memory, floats */
    struct QK {                              /* the raw score view: RC keys */
        static constexpr int NT = RC / 8;
        static constexpr bool SW = ta_fast_mdec_traits::SW;
        static constexpr int LD = ta_fast_mdec_traits::LD;
    };
    struct QK16 { /* a 16-key unit of the shared raw scores */
        static constexpr int NT = 2;
        static constexpr bool SW = ta_fast_mdec_traits::SW;
        static constexpr int LD = ta_fast_mdec_traits::LD;
    };
    static constexpr size_t LOADS = (size_t)(RM + ST * KR + ST * BN) * LD * 2;
    static constexpr size_t SMEM =
        LOADS + (size_t)((SR ? 1 : NW) * RM * RLD + W_MAX + (TC ? 0 : NW * BM * CLD)) * 4;
    static_assert((size_t)NW * BM * (MLD + 2) * 4 <= LOADS, "the merge fits over the loads");
    static_assert(LOADS % 16 == 0, "f32 regions on 16 bytes");
    static_assert(ST >= 2, "one K tile loads while another computes");
};

/* Output row r of a Q tile: its head slot (r / or1, or1 output rows per
 * slot) and the first of its raw rows (r1 raw rows per slot; unpacked:
 * or1 = 16, r1 = RM, so row r). */
TA_FAST_FN int32_t ta_fast_mdec_raw_row(int32_t r, int32_t or1, int32_t r1) {
    return (r / or1) * r1 + r % or1;
}

/* Step 3 on CUDA cores, one (row, key): sum over a in [a0, a1), then b
 * ascending, of w[a][b] S~[rb + a][col + b] (col: the key's first raw
 * column; raw rows RLD floats apart), one fma chain. */
TA_FAST_FN float ta_fast_mdec_conv1(const float *col, const float *ws, int rld, int32_t rb,
                                    int32_t a0, int32_t a1, int32_t ck) {
    float acc = 0.0f;
    for (int32_t a = a0; a < a1; ++a) {
        const float *srow = col + (rb + a) * rld, *wrow = ws + a * ck;
#pragma unroll 4
        for (int32_t b = 0; b < ck; ++b) acc = __fmaf_rn(wrow[b], srow[b], acc);
    }
    return acc;
}

/* The same for four adjacent keys (c[0..3] += ...), sharing each raw-score
 * load: the window slides by one column per b. */
TA_FAST_FN void ta_fast_mdec_conv4(const float *col, const float *ws, int rld, int32_t rb,
                                   int32_t a0, int32_t a1, int32_t ck, float c[4]) {
    for (int32_t a = a0; a < a1; ++a) {
        const float *srow = col + (rb + a) * rld, *wrow = ws + a * ck;
        float x0 = srow[0], x1 = srow[1], x2 = srow[2];
#pragma unroll 4
        for (int32_t b = 0; b < ck; ++b) {
            const float x3 = srow[b + 3], w = wrow[b];
            c[0] = __fmaf_rn(w, x0, c[0]);
            c[1] = __fmaf_rn(w, x1, c[1]);
            c[2] = __fmaf_rn(w, x2, c[2]);
            c[3] = __fmaf_rn(w, x3, c[3]);
            x0 = x1;
            x1 = x2;
            x2 = x3;
        }
    }
}

/* f32 -> tf32 (round to nearest, ties away), as the mma's operand bits. */
TA_FAST_FN uint32_t ta_fast_tf32(float x) {
    uint32_t u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return u;
}

/* c += a b, a: 16 x 8 (row), b: 8 x 8 (col), tf32 operands, f32 accumulate. */
TA_FAST_FN void ta_fast_mma_tf32(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                 uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One tf32 product term of the conv: c += A B with A (4 values of a lane)
 * and B (2 values) split into tf32 parts: one product (PASSES = 1: both
 * operands rounded to tf32, relative 2^-11 each; A_TF32: the A values are
 * tf32 already, rounded when the raw scores were stored) or three (hi hi,
 * hi lo, lo hi: the dropped lo lo term is about 2^-22 relative, f32-like). */
template <int PASSES, bool A_TF32>
TA_FAST_FN void ta_fast_conv_mma(float *c, const float a[4], float b0, float b1) {
    const uint32_t ah0 = A_TF32 ? __float_as_uint(a[0]) : ta_fast_tf32(a[0]);
    const uint32_t ah1 = A_TF32 ? __float_as_uint(a[1]) : ta_fast_tf32(a[1]);
    const uint32_t ah2 = A_TF32 ? __float_as_uint(a[2]) : ta_fast_tf32(a[2]);
    const uint32_t ah3 = A_TF32 ? __float_as_uint(a[3]) : ta_fast_tf32(a[3]);
    const uint32_t bh0 = ta_fast_tf32(b0), bh1 = ta_fast_tf32(b1);
    if (PASSES == 3) {
        const uint32_t bl0 = ta_fast_tf32(b0 - __uint_as_float(bh0));
        const uint32_t bl1 = ta_fast_tf32(b1 - __uint_as_float(bh1));
        ta_fast_mma_tf32(c, ta_fast_tf32(a[0] - __uint_as_float(ah0)),
                         ta_fast_tf32(a[1] - __uint_as_float(ah1)),
                         ta_fast_tf32(a[2] - __uint_as_float(ah2)),
                         ta_fast_tf32(a[3] - __uint_as_float(ah3)), bh0, bh1);
        ta_fast_mma_tf32(c, ah0, ah1, ah2, ah3, bl0, bl1);
    }
    ta_fast_mma_tf32(c, ah0, ah1, ah2, ah3, bh0, bh1);
}

/* The raw scores as the tensor-core conv wants them stored: bf16 problems
 * (one tf32 pass) round them to tf32 once here; f16 ones keep f32 (split
 * into two tf32 parts at the product). */
template <class T, bool BF16> TA_FAST_FN float ta_fast_mdec_raw(float v) {
    if constexpr (T::TC && BF16) return __uint_as_float(ta_fast_tf32(v));
    return v;
}

/* Step 2 for the 8-column blocks nb0 .. nb0 + NB - 1 of an accumulator tile
 * sr of NT blocks (raw m-tile mt; its column 0 is key j0): the raw scores
 * masked to the rows' intervals [rlo, rhi) when `mask`, to region wr (column
 * 0 there is key j0 - x0: the block's columns at x0 + 8 nb0 .. on). */
template <class T, bool BF16, int NT>
TA_FAST_FN void ta_fast_mdec_raw_store(float *wr, const float (&sr)[4 * NT], int nb0, int nb1,
                                       int mt, int x0, int32_t j0, const int32_t rlo[2],
                                       const int32_t rhi[2], bool mask, int g, int tq) {
#pragma unroll
    for (int i = 0; i < 4 * NT; i += 2) {
        if (i / 4 < nb0 || i / 4 >= nb1) continue;
        const int r = (i >> 1) & 1;
        const int32_t jj = j0 + 8 * (i / 4) + 2 * tq;
        float v0 = ta_fast_mdec_raw<T, BF16>(sr[i]);
        float v1 = ta_fast_mdec_raw<T, BF16>(sr[i + 1]);
        if (mask) {
            v0 = jj >= rlo[r] && jj < rhi[r] ? v0 : 0.0f;
            v1 = jj + 1 >= rlo[r] && jj + 1 < rhi[r] ? v1 : 0.0f;
        }
        float *dst = wr + (16 * mt + g + 8 * r) * T::RLD + x0 + 8 * (i / 4) + 2 * tq;
        dst[0] = v0;
        dst[1] = v1;
    }
}

/* The products of one head slot's weights ws: acc[nb][a & 1] += S~_a T_a
 * over k-steps ks0 .. ks1; rb: the lane's rows' first raw rows; SEL: the A
 * rows of other slots (on0 / on1 false) read as zero. */
template <class T, bool BF16, bool SEL>
TA_FAST_FN void ta_fast_mdec_conv_tc_slot(float (&acc)[2][2][4], const float *wr, const float *ws,
                                          int32_t cq, int32_t ck, int32_t off, int32_t ks0,
                                          int32_t ks1, const int32_t rb[2], bool on0, bool on1,
                                          int g, int tq) {
    constexpr int PASSES = BF16 ? 1 : 3; /* f16's u = 2^-11: the conv keeps f32's accuracy */
    for (int32_t a = 0; a < cq; a += 2) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int32_t aa = a + e;
            if (aa < cq) {
                const float *p0 = wr + (rb[0] + aa) * T::RLD + tq;
                const float *p1 = wr + (rb[1] + aa) * T::RLD + tq;
                for (int32_t ks = ks0; ks <= ks1; ++ks) {
                    const int32_t b0 = 8 * ks + tq - g - off, b1 = b0 + 4;
                    const float w0 = b0 >= 0 && b0 < ck ? ws[aa * ck + b0] : 0.0f;
                    const float w1 = b1 >= 0 && b1 < ck ? ws[aa * ck + b1] : 0.0f;
#pragma unroll
                    for (int nb = 0; nb < 2; ++nb) {
                        const int32_t col = 8 * nb + 8 * ks;
                        float av[4] = {p0[col], p1[col], p0[col + 4], p1[col + 4]};
                        if (SEL) {
                            av[0] = on0 ? av[0] : 0.0f;
                            av[1] = on1 ? av[1] : 0.0f;
                            av[2] = on0 ? av[2] : 0.0f;
                            av[3] = on1 ? av[3] : 0.0f;
                        }
                        ta_fast_conv_mma<PASSES, BF16>(acc[nb][e], av, w0, w1);
                    }
                }
            }
        }
    }
}

/*
 * Step 3 on tensor cores: the warp's 16 output rows x KW = 16 keys as
 * C = sum_a S~_a T_a, S~_a the raw rows a below each output row's first raw
 * row (16 x RC, from shared memory), T_a the banded Toeplitz matrix of
 * w[a][.]: T_a[x][n] = w[a][x - n - (HALO - P)] (0 outside [0, c_k)), for
 * raw column x of key n's window. Per 8-key block nb and k-step ks (raw
 * columns 8 nb + 8 ks .. + 7) one m16n8k8 product; only the k-steps where
 * T_a has a nonzero entry run (ks0 .. ks1, the same for both blocks). Packed
 * heads have their own w: one pass per head slot, the A rows of the other
 * slots zero. Rows past `live` compute garbage from row 0 (finite: every
 * raw score in the region was written this tile) that the caller drops.
 * Accumulators for even and odd a are separate (two chains), added at the
 * end: deterministic, in the tensor cores' order within each product.
 */
template <class T, bool BF16>
TA_FAST_FN void ta_fast_mdec_conv_tc(float (&s)[4 * T::NT], const float *wr, const float *sw,
                                     int32_t cq, int32_t ck, int32_t pk, int32_t live,
                                     int32_t pack, int32_t or1, int32_t r1, int g, int tq) {
    const int32_t off = T::HALO - pk;    /* raw column of key 0's b = 0 term */
    const int32_t ks0 = off / 8, ks1 = (off + ck + 6) / 8;
    int32_t rb[2], slot[2];
    float acc[2][2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t i = g + 8 * r;
        slot[r] = i < live ? i / or1 : -1;
        rb[r] = i < live ? ta_fast_mdec_raw_row(i, or1, r1) : 0;
    }
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nb][e][i] = 0.0f;
    if (pack == 1)
        ta_fast_mdec_conv_tc_slot<T, BF16, false>(acc, wr, sw, cq, ck, off, ks0, ks1, rb, true,
                                                  true, g, tq);
    else
        for (int32_t sl = 0; sl < pack; ++sl)
            ta_fast_mdec_conv_tc_slot<T, BF16, true>(acc, wr, sw + sl * cq * ck, cq, ck, off, ks0,
                                                     ks1, rb, slot[0] == sl, slot[1] == sl, g, tq);
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[4 * nb + i] = acc[nb][0][i] + acc[nb][1][i];
}

/* The base, and how many query heads of a kv head one block takes. */
struct ta_fast_mdec_params : ta_cuda_params {
    int32_t pack; /* G = H / H_kv when packed (one Q tile of G S_q rows), else 1 */
};

template <class T, int D, bool BF16>
__global__ void __launch_bounds__(T::THREADS, 1) /* one block per SM: its shared memory */
    ta_cuda_fast_mta_decode_kernel(const __grid_constant__ ta_fast_mdec_params p) {
    typedef typename T::QK QK;
    constexpr int MT = T::MTILES;
    extern __shared__ float4 ta_fast_dyn_smem[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fast_dyn_smem); /* [RM][LD] raw rows */
    uint16_t *sk = sq + T::RM * T::LD;                             /* [ST][KR][LD] */
    uint16_t *sv = sk + T::ST * T::KR * T::LD;                     /* [ST][BN][LD] */
    float *sraw = reinterpret_cast<float *>(sv + T::ST * T::BN * T::LD); /* [NW or 1][RM][RLD] */
    float *sw = sraw + (T::SR ? 1 : T::NW) * T::RM * T::RLD;            /* [c_q][c_k] */
    float *sconv = sw + T::W_MAX;                                        /* [NW][BM][CLD] */
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int tq = lane & 3, g = lane >> 2;
    const int32_t cq = p.conv_q, ck = p.conv_k, pk = (p.conv_k - 1) / 2;
    const int32_t n_qt = t.num_q_tiles, n_split = t.num_splits;
    /* packed (G > 1, one Q tile): the tile's rows are G heads' S_q rows, its
     * raw rows G heads' S_q + c_q - 1 rows, head slot s = row / rows-per-head */
    const int32_t pack = p.pack, n_hg = p.heads_q / pack;
    const int32_t r1 = pack > 1 ? t.seq_q + cq - 1 : T::RM; /* raw rows per head slot */
    const int32_t or1 = pack > 1 ? t.seq_q : T::BM;         /* output rows per head slot */
    const int64_t n_tiles = (int64_t)p.batch_count * n_hg * n_qt * n_split;
    const float scale_log2 = p.scale * 1.4426950408889634f;
    /* the warp's raw scores: column 0 is key col0 - HALO (shared: the
     * block's region, whose column 0 is key kt BN - HALO) */
    float *wr = sraw + (T::SR ? warp * T::KW : warp * T::RM * T::RLD);
    float *wc = sconv + warp * T::BM * T::CLD;

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const int32_t split = (int32_t)(tile % n_split);
        const int64_t rest = tile / n_split;
        ta_cuda_q_tile at; /* as ta_cuda_q_tile_at over n_hg head groups */
        at.qt = n_qt - 1 - (int32_t)(rest % n_qt);
        at.h = (int32_t)((rest / n_qt) % n_hg) * pack; /* head slot 0's query head */
        at.b_local = (int32_t)(rest / n_qt / n_hg);
        const ta_tile_ctx c = ta_cuda_fast_context(p, at, split); /* slot 0: keys, k, v */
        const int32_t row0 = at.qt * T::BM, raw0 = row0 - (cq - 1); /* raw row 0 */
        /* output rows of the tile (all slots), and the raw rows' count */
        const int32_t live = pack > 1 ? pack * t.seq_q
                                      : (t.seq_q - row0 < T::BM ? t.seq_q - row0 : T::BM);
        const int32_t n_raw = pack > 1 ? pack * r1 : T::RM;
        const ta_cuda_pages pg = ta_cuda_pages_of(p, p.batch_begin + at.b_local); /* NULL: none */
        int32_t lo[2], hi[2], rlo[MT][2], rhi[MT][2];
        bool rzero[MT][2]; /* the raw row's q is zero-filled: its raw scores are 0 */
        float o[4 * T::DT], m[2] = {ta_fast_neg_inf(), ta_fast_neg_inf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; ++r) { /* the lane's output rows g, g + 8 */
            const int32_t e = g + 8 * r;
            lo[r] = hi[r] = 0;
            if (e < live) ta_tile_row_keys(&t, row0 + e % or1, c.key_len, &lo[r], &hi[r]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int32_t e = 16 * mt + g + 8 * r, rr = raw0 + e % r1;
                rlo[mt][r] = rhi[mt][r] = 0;
                rzero[mt][r] = !(e < n_raw && rr >= -t.q_history && rr < t.seq_q);
                if (!rzero[mt][r]) ta_tile_row_keys(&t, rr, c.key_len, &rlo[mt][r], &rhi[mt][r]);
            }
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i) o[i] = 0.0f;

        __syncthreads(); /* the previous tile's merge is done with shared memory */
        for (int i = (int)threadIdx.x; i < pack * cq * ck; i += T::THREADS)
            sw[i] = p.conv_w[(int64_t)at.h * cq * ck + i]; /* the slots' heads, consecutive */
        if (c.k_begin < c.k_end) {
            /* the raw rows: history rows from q_hist, padding zero-filled */
            for (int i = (int)threadIdx.x; i < T::RM * (D / 8); i += T::THREADS) {
                const int r = i / (D / 8), ch = i % (D / 8);
                const int32_t row = raw0 + r % r1;
                const bool ok = r < n_raw && row >= -t.q_history && row < t.seq_q;
                const uint16_t *src = static_cast<const uint16_t *>(p.q);
                if (ok) {
                    int in_hist;
                    const ta_tile_ctx ch_ctx =
                        pack > 1 ? ta_cuda_context(p, at.b_local, at.h + r / r1, at.qt) : c;
                    const int64_t at_row = ta_tile_q_row(&t, &p.lay, &ch_ctx, row, &in_hist);
                    src = static_cast<const uint16_t *>(in_hist ? p.q_hist : p.q) + at_row + 8 * ch;
                }
                ta_fast_cp16(ta_fast_smem_addr(sq + ta_fast_row_at<D, T::SW>(r, ch)), src,
                             ok ? 16 : 0);
            }
#pragma unroll
            for (int st = 0; st < T::ST - 1; ++st) {
                const int32_t kt = c.k_begin + st;
                if (kt < c.k_end) {
                    ta_fast_load_rows<D, T::KR, T::THREADS, true, T::SW>(
                        sk + st * T::KR * T::LD, static_cast<const uint16_t *>(p.k), c.k,
                        p.lay.k.seq, kt * T::BN - T::HALO, c.key_len, pg);
                    ta_fast_load_rows<D, T::BN, T::THREADS, false, T::SW>(
                        sv + st * T::BN * T::LD, static_cast<const uint16_t *>(p.v), c.v,
                        p.lay.v.seq, kt * T::BN, c.key_len, pg);
                }
                ta_fast_cp_commit();
            }
        }
        for (int32_t kt = c.k_begin; kt < c.k_end; ++kt) {
            const int32_t j = kt - c.k_begin, col0 = kt * T::BN + warp * T::KW;
            const uint16_t *skj = sk + ((j % T::ST) * T::KR + warp * T::KW) * T::LD;
            const uint16_t *svj = sv + ((j % T::ST) * T::BN + warp * T::KW) * T::LD;
            float s[4 * T::NT];
            ta_fast_cp_wait<T::ST - 2>();
            __syncthreads();
            {
                const int32_t kn = kt + T::ST - 1;
                const int bn = (j + T::ST - 1) % T::ST;
                if (kn < c.k_end) {
                    ta_fast_load_rows<D, T::KR, T::THREADS, true, T::SW>(
                        sk + bn * T::KR * T::LD, static_cast<const uint16_t *>(p.k), c.k,
                        p.lay.k.seq, kn * T::BN - T::HALO, c.key_len, pg);
                    ta_fast_load_rows<D, T::BN, T::THREADS, false, T::SW>(
                        sv + bn * T::BN * T::LD, static_cast<const uint16_t *>(p.v), c.v,
                        p.lay.v.seq, kn * T::BN, c.key_len, pg);
                }
                ta_fast_cp_commit();
            }
            /* steps 1-2: raw scores of the warp's keys and halos, masked, to
             * shared memory (the previous tile's conv reads are done: the
             * block barrier above). Keys outside [0, key_len) load as zeros
             * and so do the q rows of rzero: the mask is skipped when every
             * other raw row of the warp sees the slice's keys in that range
             * (warp-uniform; most K tiles of a long cache) */
            bool raw_mask;
            {
                /* the keys this warp stores: its slice and halos, or (shared)
                 * its slice */
                constexpr int XH = T::SR ? 0 : T::HALO;
                const int32_t c_lo = col0 - XH > 0 ? col0 - XH : 0;
                const int32_t c_hi = col0 + T::KW + XH < c.key_len ? col0 + T::KW + XH
                                                                    : c.key_len;
                bool whole = true;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        whole = whole && (rzero[mt][r] ||
                                          (rlo[mt][r] <= c_lo && rhi[mt][r] >= c_hi));
                raw_mask = __any_sync(0xffffffffu, !whole);
            }
            if constexpr (!T::SR) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float sr[4 * QK::NT];
                    ta_fast_qk<QK, D, T::RC, BF16>(sr, sq + 16 * mt * T::LD, skj, lane, 0);
                    ta_fast_mdec_raw_store<T, BF16, QK::NT>(wr, sr, 0, QK::NT, mt, 0,
                                                            col0 - T::HALO, rlo[mt], rhi[mt],
                                                            raw_mask, g, tq);
                }
                __syncwarp();
            } else {
                /* shared: the warp's own 16 keys (K rows HALO on in its
                 * slice), then edge units: 16 K rows at either end of the
                 * buffer, of which the HALO keys outside the tile are stored
                 * (always masked); edge e (left for even e, m-tile e / 2) on
                 * warp ta_fast_mdec_edge_warp. Each raw score's products are
                 * those of the per-warp view, in the same order. */
                typedef typename T::QK16 Q16;
                constexpr int HB = T::HALO / 8; /* 8-column blocks of a halo */
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float sr[4 * Q16::NT];
                    ta_fast_qk<Q16, D, 16, BF16>(sr, sq + 16 * mt * T::LD,
                                                 skj + T::HALO * T::LD, lane, 0);
                    ta_fast_mdec_raw_store<T, BF16, Q16::NT>(wr, sr, 0, 2, mt, T::HALO, col0,
                                                             rlo[mt], rhi[mt], raw_mask, g, tq);
                }
#pragma unroll
                for (int e = 0; e < 2 * MT; ++e) {
                    if (warp != (e * T::NW) / (2 * MT) + (e & 1)) continue;
                    const int mt = e / 2, right = e & 1;
                    const int x = right ? T::KR - 16 : 0; /* the unit's first K row / column */
                    float sr[4 * Q16::NT];
                    ta_fast_qk<Q16, D, 16, BF16>(sr, sq + 16 * mt * T::LD,
                                                 sk + (j % T::ST) * T::KR * T::LD + x * T::LD,
                                                 lane, 0);
                    ta_fast_mdec_raw_store<T, BF16, Q16::NT>(
                        sraw, sr, right ? 2 - HB : 0, right ? 2 : HB, mt, x,
                        kt * T::BN - T::HALO + x, rlo[mt], rhi[mt], true, g, tq);
                }
                __syncthreads();
            }
            /* step 3: the conv, on tensor cores (ta_fast_mdec_conv_tc) or
             * on CUDA cores: lanes take (row, 4 adjacent keys) quads */
            if constexpr (T::TC) {
                ta_fast_mdec_conv_tc<T, BF16>(s, wr, sw, cq, ck, pk, live, pack, or1, r1, g, tq);
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    if (g + 8 * r >= live)
#pragma unroll
                        for (int n = 0; n < T::NT; ++n) s[4 * n + 2 * r] = s[4 * n + 2 * r + 1] = 0.0f;
            } else {
                if (live == 1) {
                    /* one live row: one key per lane, lanes 16-31 over the
                     * second half of the a range, added to the first half's
                     * sum by lanes 0-15 (quads would leave 28 lanes idle) */
                    const int32_t kc = lane & 15, ah = (cq + 1) / 2;
                    float acc = ta_fast_mdec_conv1(wr + kc + T::HALO - pk, sw, T::RLD, 0,
                                                   lane < 16 ? 0 : ah, lane < 16 ? ah : cq, ck);
                    acc += __shfl_down_sync(0xffffffffu, acc, 16);
                    if (lane < 16) wc[kc] = acc;
                } else if (live <= 4) {
                    /* 2-4 rows: their (row, 4 keys) quads on lanes 0-15, the
                     * second half of the a range on lanes 16-31, added */
                    const int32_t e = lane & 15, ah = (cq + 1) / 2;
                    const int32_t r = e / (T::KW / 4), kc = 4 * (e % (T::KW / 4));
                    const int32_t slot = r / or1, rb = ta_fast_mdec_raw_row(r, or1, r1);
                    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    if (r < live)
                        ta_fast_mdec_conv4(wr + kc + T::HALO - pk, sw + slot * cq * ck, T::RLD,
                                           rb, lane < 16 ? 0 : ah, lane < 16 ? ah : cq, ck, c);
#pragma unroll
                    for (int i = 0; i < 4; ++i) c[i] += __shfl_down_sync(0xffffffffu, c[i], 16);
                    if (lane < 16 && r < live)
#pragma unroll
                        for (int i = 0; i < 4; ++i) wc[r * T::CLD + kc + i] = c[i];
                } else {
                    /* (row, 4 adjacent keys) quads dealt to the lanes in turn;
                     * output row r is slot r / or1's row r % or1, whose raw
                     * rows start at slot r1 rows in */
                    for (int32_t e = lane; e < live * (T::KW / 4); e += 32) {
                        const int32_t r = e / (T::KW / 4), kc = 4 * (e % (T::KW / 4));
                        const int32_t slot = r / or1, rb = ta_fast_mdec_raw_row(r, or1, r1);
                        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        ta_fast_mdec_conv4(wr + kc + T::HALO - pk, sw + slot * cq * ck, T::RLD,
                                           rb, 0, cq, ck, c);
#pragma unroll
                        for (int i = 0; i < 4; ++i) wc[r * T::CLD + kc + i] = c[i];
                    }
                }
                __syncwarp();
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const bool ok = g + 8 * r < live;
#pragma unroll
                    for (int n = 0; n < T::NT; ++n) {
                        const float *src = wc + (g + 8 * r) * T::CLD + 8 * n + 2 * tq;
                        s[4 * n + 2 * r] = ok ? src[0] : 0.0f;
                        s[4 * n + 2 * r + 1] = ok ? src[1] : 0.0f;
                    }
                }
            }
            { /* step 4 */
                float corr[2];
                ta_fast_softmax_tile<T::NT>(s, m, l, lo, hi, col0, tq, scale_log2, corr);
                ta_fast_rescale_moved<T::DT>(o, corr);
            }
            ta_fast_pv<T, D, T::KW, BF16>(o, s, svj, lane);
        }
        ta_fast_dec_finish<T, BF16>(p, c, split, row0, o, m, l, lane, warp, pack, or1, at);
    }
}

template <int D, int MT, int NH, int NW, int ST, bool TC, bool SR, bool BF16>
static ta_fast_launch ta_fast_mdec_launch_of() {
    typedef ta_fast_mdec_traits<D, MT, NH, NW, ST, TC, SR> T;
    const void *k = reinterpret_cast<const void *>(&ta_cuda_fast_mta_decode_kernel<T, D, BF16>);
    /* pages: the same kernel, reading through the block table when it is set */
    return ta_fast_mma_launch(k, k, T::SMEM, T::THREADS, T::BM, T::BN);
}

/* Candidate cfg (1 .. TA_CUDA_FAST_MTA_CFGS) of the raw-row tiles and halo:
 *   1: 8 warps, 128-key tiles, 3 buffers at D = 64 (2 above), the conv on
 *      CUDA cores, each warp's raw scores (its keys and halos) its own
 *   2: as 1, the conv on tensor cores (ta_fast_mdec_conv_tc)
 *   3, 4: as 1, 2 with the raw scores shared by the block (each key's
 *      computed once, the tile's edge halos by four warps, one more block
 *      barrier per tile): the same products per raw score, so the bits of
 *      1, 2 (twins), with up to 44 % fewer raw-score products
 * (a pair of warps per 16-key slice, 16 warps, each with half the raw score
 * units, one 8-key conv block and half of o's features: the bits of 2, but
 * 10-12 % slower at 16 queries on an H100, run 16 of 2026-11-25; not kept)
 * (4 warps with 64-key tiles and 4 buffers, either conv, measured 1.7-2.3x
 * slower on an H100: each warp's tile is a latency-bound chain, and half the
 * warps hide half as much: bench/results/decode_mta_cands_h100_2026-11-25.log) */
template <int D, int MT, int NH, bool BF16> static ta_fast_launch ta_fast_mdec_cand(int cfg) {
    constexpr int ST8 = D <= 64 ? 3 : 2;
    switch (cfg) {
    case 1: return ta_fast_mdec_launch_of<D, MT, NH, 8, ST8, false, false, BF16>();
    case 2: return ta_fast_mdec_launch_of<D, MT, NH, 8, ST8, true, false, BF16>();
    case 3: return ta_fast_mdec_launch_of<D, MT, NH, 8, ST8, false, true, BF16>();
    default: return ta_fast_mdec_launch_of<D, MT, NH, 8, ST8, true, true, BF16>();
    }
}

template <int D, bool BF16> static ta_fast_launch ta_fast_mdec_pick(int mt, int nh, int cfg) {
    return mt == 1 ? (nh == 1 ? ta_fast_mdec_cand<D, 1, 1, BF16>(cfg)
                              : ta_fast_mdec_cand<D, 1, 2, BF16>(cfg))
                   : (nh == 1 ? ta_fast_mdec_cand<D, 2, 1, BF16>(cfg)
                              : ta_fast_mdec_cand<D, 2, 2, BF16>(cfg));
}

/* tile_config 0's candidate (docs/cuda.md section 7, "Decode"): the conv on
 * tensor cores for more than 4 query rows per head, where the CUDA-core conv
 * needs a lane per 4 keys of a row (H100, S_q = 16: 5 % faster before the
 * tf32 rounding moved to the raw-score store), with the raw scores shared by
 * the block (4: 4-8 % faster than 2 at 16 queries, H100 run 17 of
 * 2026-11-25); on CUDA cores with each warp's raw scores for up to 4, where
 * the tensor-core conv's fixed 36 products per 16 keys (6 x 11) cost more
 * than one row's (one query: 1.5x slower) and sharing the raw scores gains
 * nothing (1 vs 3: within 3 %, the step is bound by the cache's bytes). */
#define TA_FAST_MDEC_TC_ROWS 4

/* The MTA decode kernel for the plan: 1 and *l, or 0 (a head dim it lacks). */
template <bool BF16> static int ta_fast_mdec_for(const ta_plan *plan, ta_fast_launch *l) {
    const ta_problem *pr = &plan->p;
    const int32_t g = ta_cuda_fast_mta_dec_pack(plan);
    const int mt = (int64_t)g * (pr->seq_q + pr->conv_q - 1) <= 16 ? 1 : 2; /* m16 tiles */
    const int nh = (pr->conv_k - 1) / 2 <= 8 ? 1 : 2;
    /* tile_config 5 names the fold's wgmma kernel: decode problems keep 0's */
    const int cfg = pr->tile_config > 0 && pr->tile_config <= 4 ? (int)pr->tile_config
                    : pr->seq_q > TA_FAST_MDEC_TC_ROWS          ? 4
                                                                : 1;
    switch (pr->head_dim) {
    case 64: *l = ta_fast_mdec_pick<64, BF16>(mt, nh, cfg); return 1;
    case 96: *l = ta_fast_mdec_pick<96, BF16>(mt, nh, cfg); return 1;
    case 128: *l = ta_fast_mdec_pick<128, BF16>(mt, nh, cfg); return 1;
    default: return 0;
    }
}

} /* namespace */

int ta_cuda_fast_decode_launch(int32_t d, int bf16, ta_fast_launch *l) {
    return bf16 ? ta_fast_dec_candidates<true>(d, l) : ta_fast_dec_candidates<false>(d, l);
}

extern "C" ta_status ta_cuda_fast_mta_dec_fwd(const ta_plan *plan0, const ta_fwd_args *a0,
                                              const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan0->p;
    const void *ptrs[7] = {
        a0->q, a0->k, a0->v, a0->o, a0->lse, a0->conv_w, pr->q_history > 0 ? a0->q_hist : NULL};
    ta_fast_launch fl;
    ta_fast_mdec_params prm;
    ta_cuda_launch_desc launch;
    ta_tiling t;
    ta_plan sub;
    ta_fwd_args a2;
    const ta_plan *plan;
    const ta_fwd_args *a;
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 7)) != TA_OK) return st;
    if (pr->tile_config > TA_CUDA_FAST_MTA_CFGS) return TA_ERR_UNSUPPORTED;
    /* rows off 16 bytes: the exact kernels (pages included; with the rotary
     * stage they turn q and k as they load them) */
    if (!ta_cuda_fast_mta_aligned(plan0, a0)) return ta_cuda_mta_fwd(plan0, a0, ws, stream);
    /* the rotary stage: the kernel on the turned (and with pages gathered)
     * copies (plan, a), whose path and split rules are plan0's */
    if ((st = ta_cuda_fast_mta_rope_view(plan0, a0, ws, &sub, &a2, &plan, &a)) != TA_OK)
        return st;
    if (!(pr->dtype == TA_BF16 ? ta_fast_mdec_for<true>(plan, &fl)
                               : ta_fast_mdec_for<false>(plan, &fl)))
        return TA_ERR_UNSUPPORTED;
    if ((st = ta_cuda_smem_opt_in(fl.kernel, fl.smem, fl.smem)) != TA_OK) return st;
    /* output tiles of 16 rows by 128 keys, the plan's mask, history and
     * splits, no conv halos (the kernel loads its own) */
    {
        ta_plan no_halo = *plan;
        no_halo.p.conv_q = no_halo.p.conv_k = 0;
        no_halo.fwd.num_splits = no_halo.stages.num_splits = ta_cuda_fast_mta_dec_splits(plan);
        if ((st = ta_cuda_tiling(&no_halo, fl.block_m, fl.block_n, TA_TILING_FWD, &t)) != TA_OK)
            return st;
    }
    ta_cuda_params_fwd(&prm, plan, &t, a, ws);
    prm.pack = ta_cuda_fast_mta_dec_pack(plan);
    launch = ta_cuda_launch_of(fl.kernel, &prm,
                               (int64_t)(pr->heads_q / prm.pack) * t.num_q_tiles * t.num_splits,
                               0, fl.smem);
    launch.threads = fl.threads;
    if ((st = ta_cuda_fast_mta_rope_fwd_turn(plan0, a0, ws, stream)) != TA_OK) return st;
    if ((st = ta_cuda_launch_batches(&launch, 1, a->seqlens_k, pr->batch, stream)) != TA_OK)
        return st;
    return ta_cuda_merge_splits(plan, t.num_splits, a, ws, stream);
}
