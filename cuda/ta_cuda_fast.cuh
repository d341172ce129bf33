/*
 * Fast mode (TA_PRECISION_FAST) building blocks shared by the tensor-core SDPA
 * forwards: cuda/ta_cuda_fast_fwd.cu (mma.sync, sm_80+) and
 * cuda/ta_cuda_fast_fwd_sm90.cu (wgmma, sm_90a). Not installed.
 *
 * Both kernels hold scores and outputs in the mma accumulator layout: a warp
 * owns 16 rows; lane = 4 g + tq holds rows g and g + 8, and in every block of 8
 * columns the columns 2 tq and 2 tq + 1: element e of block n is
 *   acc[4 n + e]:  row g + 8 (e / 2),  column 8 n + 2 tq + (e % 2).
 * (wgmma's m64nN accumulator is this, per warp of the warpgroup.) The online
 * softmax, the p fragments and the output store below work on that layout, so
 * the two kernels differ only in how products are computed and operands staged.
 */
#ifndef TA_CUDA_FAST_CUH
#define TA_CUDA_FAST_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap (the type only: no driver library is linked) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ta_cuda_params.cuh"

extern "C" {
#include "ta_cuda.h" /* ta_plan, ta_fwd_args, TA_CUDA_FAST_CFG_MAX */
}

/* ---- host: one launchable configuration ---- */

/* A kernel of the fast configuration table and what its launch needs. */
typedef struct ta_fast_launch {
    const void *kernel;
    const void *kernel_paged; /* the same with a paged k / v (NULL: none) */
    size_t smem;             /* dynamic shared memory, bytes */
    int threads;             /* per block */
    int32_t block_m, block_n; /* Q tile rows, keys per K tile */
    int sm90;                 /* 1: a wgmma kernel (runs on an sm_90 device only) */
    int tma;                  /* 1: its parameter is a ta_fast_tma_params (TMA loads) */
} ta_fast_launch;

/* An mma.sync configuration (no wgmma, no TMA: runs on every sm_80+ device):
 * its kernels (the paged one NULL if none), shared memory, threads, tile. */
static inline ta_fast_launch ta_fast_mma_launch(const void *kernel, const void *kernel_paged,
                                                size_t smem, int threads, int32_t block_m,
                                                int32_t block_n) {
    ta_fast_launch l;
    l.kernel = kernel;
    l.kernel_paged = kernel_paged;
    l.smem = smem;
    l.threads = threads;
    l.block_m = block_m;
    l.block_n = block_n;
    l.sm90 = 0;
    l.tma = 0;
    return l;
}

/* The parameters of a kernel that loads q, k and v by TMA: the base, then one
 * 4-d tensor map of each (dims D, S, heads, B; boxes of 64 features by the
 * kernel's tile rows, 128-byte swizzle), made on the host per call by
 * ta_cuda_fast_tma_maps. */
struct ta_fast_tma_params : ta_cuda_params {
    CUtensorMap tq, tk, tv;
};

/* The warp-specialised TMA forwards (sm_90a) of head dim d for the storage
 * type into l[0 ..]: how many (0 if none for d) (cuda/ta_cuda_fast_fwd_ws.cu). */
int ta_cuda_fast_ws_launch(int32_t d, int bf16, ta_fast_launch *l);

/* The tensor maps of tp for configuration fl (its base parameters filled):
 * TA_ERR_UNSUPPORTED if the driver cannot make them (a stride TMA cannot
 * take, no cuTensorMapEncodeTiled): nothing launched. */
ta_status ta_cuda_fast_tma_maps(const ta_plan *plan, const ta_fwd_args *a, const ta_fast_launch *fl,
                                ta_fast_tma_params *tp);

/* The decode-shaped mma.sync forwards of head dim d for the storage type
 * into l[0 ..]: how many (0 if none for d) (cuda/ta_cuda_fast_decode.cu). */
int ta_cuda_fast_decode_launch(int32_t d, int bf16, ta_fast_launch *l);

/* The wgmma forward (sm_90a) of head dim d for the storage type: 1 and *l
 * set, or 0 if there is none for d (cuda/ta_cuda_fast_fwd_sm90.cu). */
int ta_cuda_fast_sm90_launch(int32_t d, int bf16, ta_fast_launch *l);

/* 1 if the wgmma kernels can run: the build holds sm_90a code
 * (TA_CUDA_HAVE_SM90A, set by CMake when CMAKE_CUDA_ARCHITECTURES has 90a;
 * otherwise they are empty stand-ins) and the current device is compute
 * capability 9.0; -1 if a CUDA call fails (cuda/ta_cuda_fast_fwd.cu). */
int ta_cuda_fast_is_sm90(void);

/* 1 if every row of a tensor of the q side (kv_side 0: [B, H, S_q, *]) or the
 * kv side (1: [B, H_kv, S_k, *]) starts on 16 bytes: the base address, and
 * every stride of a dimension with more than one entry a multiple of 8
 * elements (cp.async moves 16-byte chunks). */
int ta_cuda_fast_rows_aligned(const ta_problem *pr, const void *ptr, const ta_strides *st,
                              int kv_side);

/* 1 if every row of q, k, v, o and (q_history > 0) q_hist starts on 16
 * bytes: what the fast MTA kernels need (cuda/ta_cuda_fast_mta.cu; the
 * fold and the decode-shaped kernel run the exact kernels otherwise). */
int ta_cuda_fast_mta_aligned(const ta_plan *plan, const ta_fwd_args *a);

/* The rotary stage of the fast MTA forwards (cuda/ta_cuda_fast_mta.cu; the
 * fold and the decode-shaped kernel): ta_cuda_fast_mta_rope_view points *pl,
 * *aa at what the kernels run: the plan and args themselves without the
 * stage; with it the tables' pointers checked (TA_ERR_BAD_ARG), *sub =
 * ta_cuda_fast_mta_rope_plan's (forward) and *a2 = *a with q, k, q_hist
 * (and with pages v, no block table) at the workspace's copies; nothing
 * launched. The caller has checked the rows of the plan's q, k, v, o and
 * q_hist on 16 bytes (ta_cuda_fast_mta_aligned: the turn reads them in
 * 16-byte chunks). ta_cuda_fast_mta_rope_fwd_turn launches the turn
 * (nothing without the stage). */
ta_status ta_cuda_fast_mta_rope_view(const ta_plan *plan, const ta_fwd_args *a,
                                     const ta_cuda_fwd_ws *ws, ta_plan *sub, ta_fwd_args *a2,
                                     const ta_plan **pl, const ta_fwd_args **aa);
ta_status ta_cuda_fast_mta_rope_fwd_turn(const ta_plan *plan, const ta_fwd_args *a,
                                         const ta_cuda_fwd_ws *ws, void *stream);

/* The configuration table for one call (cuda/ta_cuda_fast_fwd.cu): the
 * candidates of the plan's head dim and storage type, as tile_config = k
 * names them (cand[k - 1]), and what this device runs of them. */
typedef struct ta_fast_table {
    ta_fast_launch cand[TA_CUDA_FAST_CFG_MAX];
    int n;         /* candidates: tile_config in [1, n] */
    int pick0;      /* index of tile_config 0's pick (ta_cuda_fast_cfg_default) */
    int sm90;       /* 1 if the wgmma candidates run here (sm_90 device, sm_90a code) */
} ta_fast_table;

/* 1 if candidate index i (tile_config i + 1) of tb can run on this device. */
static inline int ta_fast_table_runs(const ta_fast_table *tb, int i) {
    return !tb->cand[i].sm90 || tb->sm90;
}

/* The launcher's first half (cuda/ta_cuda_fast_fwd.cu): the device pointers
 * (TA_ERR_BAD_ARG), the 16-byte rows and the head dim (TA_ERR_UNSUPPORTED),
 * then the table for the plan and the device (TA_ERR_DEVICE if the device
 * query fails). Nothing launched. */
ta_status ta_cuda_fast_table(const ta_plan *plan, const ta_fwd_args *a, ta_fast_table *tb);

/* The rotary stage (plan->stages.load == TA_LOAD_ROPE) of the fast forward
 * (cuda/ta_cuda_fast_fwd.cu): ta_cuda_fast_view points *pl, *aa at what the
 * un-rotated kernels run, the plan and args themselves without the stage;
 * with it, the caller's q and k checked (device pointers: TA_ERR_BAD_ARG;
 * 16-byte rows: TA_ERR_UNSUPPORTED), *sub = ta_cuda_fast_rope_plan's and *a2 =
 * *a with q and k at the workspace's turned copies; nothing launched.
 * ta_cuda_fast_turn launches the turn (nothing without the stage). */
ta_status ta_cuda_fast_view(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                            ta_plan *sub, ta_fwd_args *a2, const ta_plan **pl,
                            const ta_fwd_args **aa);
ta_status ta_cuda_fast_turn(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                            void *stream);

/* The second half: one forward of configuration fl on stream (shared-memory
 * opt-in: TA_ERR_UNSUPPORTED beyond the device's limit, nothing launched).
 * Split-K (plan->fwd.num_splits > 1): the mma.sync candidates only (the wgmma
 * and warp-specialised ones: TA_ERR_UNSUPPORTED, nothing launched), each
 * part into ws's parts, then the merge kernel into a->o and a->lse. */
ta_status ta_cuda_fast_run(const ta_plan *plan, const ta_fwd_args *a, const ta_cuda_fwd_ws *ws,
                           const ta_fast_launch *fl, void *stream);

/* 1 if every row of q, k, v, o, dO, dq, dk and dv starts on 16 bytes: what
 * the fast backwards' loads and stores need (cuda/ta_cuda_fast_bwd_sm90.cu). */
int ta_cuda_fast_bwd_aligned(const ta_plan *plan, const ta_bwd_args *a);

/* D_i = <dO_i, o_i> (f32, 8 lanes per row) of [B, H, S_q] into delta on
 * stream, for the fast backwards (cuda/ta_cuda_fast_bwd_sm90.cu); o and dO
 * rows on 16 bytes. */
ta_status ta_cuda_fast_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta,
                             void *stream);

/* ---- device ---- */

#define TA_FAST_FN static __device__ __forceinline__

TA_FAST_FN uint32_t ta_fast_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; src_bytes = 0 zero-fills (src is not read). */
TA_FAST_FN void ta_fast_cp16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
TA_FAST_FN void ta_fast_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> TA_FAST_FN void ta_fast_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- mma.sync and ldmatrix (sm_80+) ---- */

TA_FAST_FN void ta_fast_ldm_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
TA_FAST_FN void ta_fast_ldm_x4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* c += a b, a: 16 x 16 (row), b: 16 x 8 (col), f32 accumulate. */
template <bool BF16>
TA_FAST_FN void ta_fast_mma(float *c, const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Shared rows. A tile of rows of D elements lives in shared memory either
 * padded (rows of LD = D + 8 elements: the 16 bytes of padding put the eight
 * rows an ldmatrix reads on distinct banks) or, where a kernel's traits say
 * SW = true (D a multiple of 64), swizzled: rows of LD = D elements, the
 * 16-byte chunk c of row r stored at chunk c ^ (r & 7) of the row (the eight
 * rows of an ldmatrix on distinct banks again). Padding costs bandwidth: a
 * quarter-warp's cp.async of one 128-byte line lands on two 128-byte spans of
 * shared memory in seven rows of eight, and the L2 then serves 2.6 requests
 * per line and half the lines' sectors twice (H200, bench/cuda_rows_bench.cu:
 * 4.20 TB/s streamed through padded rows, 4.46 through swizzled ones;
 * docs/cuda.md section 7, "Shared rows"). A swizzled tile must start on 128
 * bytes and be addressed at row offsets that are multiples of 8. Element
 * offset of (row, 16-byte chunk) in a tile: */
template <int D, bool SW> TA_FAST_FN int ta_fast_row_at(int row, int chunk) {
    static_assert(!SW || D % 64 == 0, "swizzled rows: whole 128-byte lines");
    return SW ? row * D + 8 * (chunk ^ (row & 7)) : row * (D + 8) + 8 * chunk;
}

/* SW of a traits class T (false where T has none). */
template <class T> __host__ __device__ constexpr auto ta_fast_sw_(int) -> decltype(T::SW, bool()) {
    return T::SW;
}
template <class T> __host__ __device__ constexpr bool ta_fast_sw_(long) { return false; }
template <class T> __host__ __device__ constexpr bool ta_fast_swizzled() {
    return ta_fast_sw_<T>(0);
}

/* rows [row0, row0 + R) of a slice (element offset `off`, row stride `seq`;
 * with pages (a paged k / v, cuda/ta_cuda_params.cuh), row j at its pool row
 * ta_cuda_page_row) -> shared [R][LD] (SW: swizzled rows, LD = D; else
 * padded, LD = D + 8); rows at or past n_valid (and with NEG, rows below 0)
 * read zeros. */
template <int D, int R, int THREADS, bool NEG = false, bool SW = false>
TA_FAST_FN void ta_fast_load_rows(uint16_t *dst, const uint16_t *base, int64_t off, int64_t seq,
                                  int32_t row0, int32_t n_valid,
                                  const ta_cuda_pages &pg = ta_cuda_pages{}) {
    constexpr int LD = SW ? D : D + 8, CH = D / 8;
    if constexpr (THREADS % CH == 0) {
        /* Without pages a thread's chunks are one column c of rows r0,
         * r0 + RS, ...: the row offset steps by RS rows, so each chunk costs
         * a compare and an add, not the division and 64-bit product of the
         * general loop below (which was a third of the MTA decode kernel's
         * instructions; ncu, bench/results/decode_mta_ncu_h100_2026-11-25b.log).
         * Same chunks, same thread for each. */
        if (!pg.pages) {
            constexpr int RS = THREADS / CH, NS = (R + RS - 1) / RS;
            const int c = (int)threadIdx.x % CH, r0 = (int)threadIdx.x / CH;
            /* chunk k (row row0 + r0 + k RS) is valid iff k RS in [lo, hi) */
            const int32_t hi = n_valid - row0 - r0, lo = NEG ? -(row0 + r0) : INT32_MIN;
            /* byte addresses in unsigned arithmetic: a row outside the slice
             * gets an address (never read) without pointer overflow */
            uintptr_t src = reinterpret_cast<uintptr_t>(base) +
                            2u * (uint64_t)(off + (int64_t)(row0 + r0) * seq + 8 * c);
            const uintptr_t step = 2u * (uint64_t)((int64_t)RS * seq);
            uint32_t d = ta_fast_smem_addr(dst + r0 * LD + 8 * c);
            const uint32_t d0 = ta_fast_smem_addr(dst);
#pragma unroll
            for (int k = 0; k < NS; ++k) {
                if (R % RS == 0 || r0 + k * RS < R) {
                    const bool ok = k * RS >= lo && k * RS < hi;
                    /* swizzled: the chunk's place depends on its row */
                    const uint32_t dk =
                        SW ? d0 + 2u * (uint32_t)ta_fast_row_at<D, SW>(r0 + k * RS, c) : d;
                    ta_fast_cp16(dk, ok ? reinterpret_cast<const uint16_t *>(src) : base,
                                 ok ? 16 : 0);
                }
                src += step;
                d += (uint32_t)(RS * LD * 2);
            }
            return;
        }
    }
    for (int i = (int)threadIdx.x; i < R * CH; i += THREADS) {
        const int r = i / CH, c = i % CH;
        const int32_t row = row0 + r;
        const bool ok = (!NEG || row >= 0) && row < n_valid;
        int64_t at = row;
        if (pg.pages && ok) at = ta_cuda_page_row(pg, row);
        const uint16_t *src = ok ? base + off + at * seq + 8 * c : base;
        ta_fast_cp16(ta_fast_smem_addr(dst + ta_fast_row_at<D, SW>(r, c)), src, ok ? 16 : 0);
    }
}

/* K tile kt (BN keys from kt BN on) of k and v -> shared sk, sv [BN][LD]:
 * one ta_fast_load_rows each (no commit). */
template <int D, int BN, int THREADS, bool SW = false>
TA_FAST_FN void ta_fast_load_kv(uint16_t *sk, uint16_t *sv, const ta_cuda_params &p,
                                const ta_tile_ctx &c, int32_t kt, const ta_cuda_pages &pg) {
    ta_fast_load_rows<D, BN, THREADS, false, SW>(sk, static_cast<const uint16_t *>(p.k), c.k,
                                                 p.lay.k.seq, kt * BN, c.key_len, pg);
    ta_fast_load_rows<D, BN, THREADS, false, SW>(sv, static_cast<const uint16_t *>(p.v), c.v,
                                                 p.lay.v.seq, kt * BN, c.key_len, pg);
}

/* 2^x, flushing denormal results to zero (p below 2^-126 of the row max is
 * lost to any storage type anyway); one MUFU.EX2, where the non-ftz form
 * adds a range fix-up around it. */
TA_FAST_FN float ta_fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two f32 -> one register of two storage elements (lo in the low half), RNE. */
template <bool BF16> TA_FAST_FN uint32_t ta_fast_pack(float lo, float hi) {
    uint32_t u;
    if (BF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &h, sizeof u);
    } else {
        const __half2 h = __floats2half2_rn(lo, hi);
        memcpy(&u, &h, sizeof u);
    }
    return u;
}

/* One register of two storage elements -> two f32 (exact widening). */
template <bool BF16> TA_FAST_FN void ta_fast_unpack(uint32_t u, float *lo, float *hi) {
    if (BF16) {
        *lo = __uint_as_float(u << 16);
        *hi = __uint_as_float(u & 0xffff0000u);
    } else {
        __half2 h;
        memcpy(&h, &u, sizeof u);
        const float2 f = __half22float2(h);
        *lo = f.x;
        *hi = f.y;
    }
}

TA_FAST_FN float ta_fast_neg_inf() { return __int_as_float((int)0xff800000u); }

/* A lane's two rows (ra = its first, ra + 8 the second) and their key
 * intervals [lo, hi) (ta_tile_row_keys); rows past S_q see nothing. */
TA_FAST_FN void ta_fast_row_keys(const ta_tiling &t, int32_t ra, int32_t key_len, int32_t lo[2],
                                 int32_t hi[2]) {
    lo[0] = hi[0] = lo[1] = hi[1] = 0;
    if (ra < t.seq_q) ta_tile_row_keys(&t, ra, key_len, &lo[0], &hi[0]);
    if (ra + 8 < t.seq_q) ta_tile_row_keys(&t, ra + 8, key_len, &lo[1], &hi[1]);
}

/*
 * Steps 2-3 of a K tile of NT * 8 keys from col0 on, for a lane's two rows:
 * mask (s = -inf outside [lo, hi); skipped when every row of the warp sees the
 * whole tile), scale to base 2 (x = s * scale log2 e), m_new = max(m, rowmax x)
 * over the 4 lanes of a row, c = 2^(m - m_new), p = 2^(x - m_new) in place of s,
 * l = l c + sum p (this lane's share). The caller rescales o by corr = c
 * (ta_fast_rescale; the wgmma forward does it once its p v of the previous
 * tile has completed). A row that has seen nothing keeps m = -inf and uses 0
 * as its base, so p = 0 and no NaN appears.
 */
template <int NT>
TA_FAST_FN void ta_fast_softmax_tile(float (&s)[4 * NT], float m[2], float l[2],
                                     const int32_t lo[2], const int32_t hi[2], int32_t col0,
                                     int tq, float scale_log2, float corr[2]) {
    const float neg_inf = ta_fast_neg_inf();
    const int32_t col1 = col0 + 8 * NT;
    const bool whole = lo[0] <= col0 && hi[0] >= col1 && lo[1] <= col0 && hi[1] >= col1;
    const bool need_mask = __any_sync(0xffffffffu, !whole);
    /* x = s * sl: a positive scale commutes with the max, so the scores stay
     * raw and the scale goes into one fma per element below; any other scale
     * is applied first (sl = 1) */
    const bool pos = scale_log2 > 0.0f;
    const float sl = pos ? scale_log2 : 1.0f;
    float mt[2] = {neg_inf, neg_inf};
    if (need_mask) { /* warp-uniform: tiles every row sees whole skip the compares */
#pragma unroll
        for (int i = 0; i < 4 * NT; ++i) {
            const int32_t j = col0 + 8 * (i / 4) + 2 * tq + (i & 1);
            const int r = (i >> 1) & 1;
            s[i] = j < lo[r] || j >= hi[r] ? neg_inf : pos ? s[i] : s[i] * scale_log2;
        }
    } else if (!pos) {
#pragma unroll
        for (int i = 0; i < 4 * NT; ++i) s[i] *= scale_log2;
    }
#pragma unroll
    for (int i = 0; i < 4 * NT; ++i) mt[(i >> 1) & 1] = fmaxf(mt[(i >> 1) & 1], s[i]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mn, base, sum = 0.0f;
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
        mn = fmaxf(m[r], mt[r] * sl); /* -inf * sl = -inf */
        base = mn == neg_inf ? 0.0f : mn; /* nothing seen yet: p = 0, no NaN */
        corr[r] = ta_fast_exp2(m[r] - base);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            s[4 * n + 2 * r] = ta_fast_exp2(__fmaf_rn(s[4 * n + 2 * r], sl, -base));
            s[4 * n + 2 * r + 1] = ta_fast_exp2(__fmaf_rn(s[4 * n + 2 * r + 1], sl, -base));
            sum += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
        }
        l[r] = l[r] * corr[r] + sum;
        m[r] = mn;
    }
}

/* o *= corr per row (the accumulator layout: elements 0, 1 of a block are
 * row g, 2, 3 row g + 8). */
template <int NO> TA_FAST_FN void ta_fast_rescale(float (&o)[4 * NO], const float corr[2]) {
#pragma unroll
    for (int i = 0; i < 4 * NO; ++i) o[i] *= corr[(i >> 1) & 1];
}

/* The same, skipped (warp-uniform) while no row of the warp has a factor
 * other than 1: o * 1 changes no bit, and in a long cache a row's max rarely
 * moves (the decode-shaped kernels: 64 multiplies a lane per K tile). */
template <int NO> TA_FAST_FN void ta_fast_rescale_moved(float (&o)[4 * NO], const float corr[2]) {
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) ta_fast_rescale<NO>(o, corr);
}

/* The A fragment (16 rows x 16 keys) of p for keys 16 kk .. 16 kk + 15 of the
 * tile, rounded to the storage type: the accumulator layout of two 8-key
 * blocks is the mma A layout. */
template <bool BF16, int NT>
TA_FAST_FN void ta_fast_p_fragment(uint32_t (&a)[4], const float (&p)[4 * NT], int kk) {
    a[0] = ta_fast_pack<BF16>(p[8 * kk + 0], p[8 * kk + 1]);
    a[1] = ta_fast_pack<BF16>(p[8 * kk + 2], p[8 * kk + 3]);
    a[2] = ta_fast_pack<BF16>(p[8 * kk + 4], p[8 * kk + 5]);
    a[3] = ta_fast_pack<BF16>(p[8 * kk + 6], p[8 * kk + 7]);
}

/* Step 1 of a K tile, accumulating: s += q k^T over D in k-steps of 16 for
 * this warp's 16 rows; q [.][LD] and k [BN][LD] in shared memory, the warp's
 * first row at sq + 16 warp LD (the MTA forward passes sq shifted by whole
 * rows: cuda/ta_cuda_fast_mta.cu). The (k-step, 16-key block) pairs run in
 * order, each pair's fragments loaded one pair ahead (two register sets), so
 * an mma does not wait for the ldmatrix just before it (the asm statements
 * keep their written order); the products and their order are those of the
 * plain loop. */
template <class T, int D, int BN, bool BF16>
TA_FAST_FN void ta_fast_qk_add(float (&s)[4 * T::NT], const uint16_t *sq, const uint16_t *sk,
                               int lane, int warp) {
    constexpr int KK = D / 16, NN = BN / 16;
    constexpr bool SW = ta_fast_swizzled<T>();
    const uint32_t a0 =
        ta_fast_smem_addr(sq + (16 * warp + (lane & 15)) * T::LD + (lane >> 4) * 8);
    const uint32_t b0 = ta_fast_smem_addr(sk + ((lane & 7) + ((lane >> 4) << 3)) * T::LD +
                                          ((lane >> 3) & 1) * 8);
    /* swizzled rows: k-step kn's chunk of a lane's row r (r & 7 = lane & 7) */
    const uint32_t ar = ta_fast_smem_addr(sq + (16 * warp + (lane & 15)) * T::LD);
    const uint32_t br = ta_fast_smem_addr(sk + ((lane & 7) + ((lane >> 4) << 3)) * T::LD);
    const int x = lane & 7, ca = lane >> 4, cb = (lane >> 3) & 1;
    auto at_a = [&](int kn) {
        return SW ? ar + 16u * (uint32_t)((ca + 2 * kn) ^ x) : a0 + 32u * (uint32_t)kn;
    };
    auto at_b = [&](int kn, int nn) {
        return SW ? br + 2u * (uint32_t)(16 * nn * T::LD) + 16u * (uint32_t)((cb + 2 * kn) ^ x)
                  : b0 + 2u * (uint32_t)(16 * nn * T::LD + 16 * kn);
    };
    uint32_t a[2][4], b[2][4];
    ta_fast_ldm_x4(a[0], at_a(0));
    ta_fast_ldm_x4(b[0], at_b(0, 0));
#pragma unroll
    for (int i = 0; i < KK * NN; ++i) {
        const int kk = i / NN, nn = i % NN;
        if (i + 1 < KK * NN) { /* the next pair's fragments (element offsets x 2 bytes) */
            const int kn = (i + 1) / NN, nnn = (i + 1) % NN;
            if (nnn == 0) ta_fast_ldm_x4(a[kn & 1], at_a(kn));
            ta_fast_ldm_x4(b[(i + 1) & 1], at_b(kn, nnn));
        }
        ta_fast_mma<BF16>(&s[8 * nn], a[kk & 1], b[i & 1][0], b[i & 1][1]);
        ta_fast_mma<BF16>(&s[8 * nn + 4], a[kk & 1], b[i & 1][2], b[i & 1][3]);
    }
}

/* Step 1 of a K tile: s = q k^T (ta_fast_qk_add from zero). */
template <class T, int D, int BN, bool BF16>
TA_FAST_FN void ta_fast_qk(float (&s)[4 * T::NT], const uint16_t *sq, const uint16_t *sk, int lane,
                           int warp) {
#pragma unroll
    for (int i = 0; i < 4 * T::NT; ++i) s[i] = 0.0f;
    ta_fast_qk_add<T, D, BN, BF16>(s, sq, sk, lane, warp);
}

/* Step 4 of a K tile: o += p v, p (the softmax's s, this warp's rows) as the
 * A operand (the accumulator layout is the A layout), v [BN][LD] in shared
 * memory by ldmatrix.trans, each (key step, 16-feature block)'s fragment
 * loaded one pair ahead as in ta_fast_qk_add. */
template <class T, int D, int BN, bool BF16>
TA_FAST_FN void ta_fast_pv(float (&o)[4 * T::DT], const float (&s)[4 * T::NT], const uint16_t *sv,
                           int lane) {
    constexpr int KK = BN / 16, NN = D / 16;
    constexpr bool SW = ta_fast_swizzled<T>();
    const uint32_t b0 = ta_fast_smem_addr(sv + (lane & 15) * T::LD + (lane >> 4) * 8);
    /* swizzled rows: feature block dn's chunk of a lane's row (r & 7 = lane & 7) */
    const uint32_t br = ta_fast_smem_addr(sv + (lane & 15) * T::LD);
    const int x = lane & 7, cv = lane >> 4;
    auto at_b = [&](int kn, int dn) {
        return SW ? br + 2u * (uint32_t)(16 * kn * T::LD) + 16u * (uint32_t)((cv + 2 * dn) ^ x)
                  : b0 + 2u * (uint32_t)(16 * kn * T::LD + 16 * dn);
    };
    uint32_t a[4], b[2][4];
    ta_fast_ldm_x4_t(b[0], at_b(0, 0));
#pragma unroll
    for (int i = 0; i < KK * NN; ++i) {
        const int kk = i / NN, dn = i % NN;
        if (dn == 0) ta_fast_p_fragment<BF16, T::NT>(a, s, kk);
        if (i + 1 < KK * NN) {
            const int kn = (i + 1) / NN, dnn = (i + 1) % NN;
            ta_fast_ldm_x4_t(b[(i + 1) & 1], at_b(kn, dnn));
        }
        ta_fast_mma<BF16>(&o[8 * dn], a, b[i & 1][0], b[i & 1][1]);
        ta_fast_mma<BF16>(&o[8 * dn + 4], a, b[i & 1][2], b[i & 1][3]);
    }
}

/* Step 5 for a lane's two rows: the row sums gather the 4 lanes of a row;
 * o / l stored in the storage type (rows past S_q skipped), lse = (m + log2 l)
 * ln 2 by lane tq = 0 (if lse is wanted); a row that saw nothing: o = 0,
 * lse = -inf. */
template <bool BF16, int NO>
TA_FAST_FN void ta_fast_store_rows(const ta_cuda_params &p, const ta_tile_ctx &c, int32_t ra,
                                   int tq, const float (&o)[4 * NO], const float m[2], float l[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        float inv;
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        if (row >= p.t.seq_q) continue;
        inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        {
            uint16_t *orow = static_cast<uint16_t *>(p.o) + c.o + (int64_t)row * p.lay.o.seq;
#pragma unroll
            for (int d = 0; d < NO; ++d)
                *reinterpret_cast<uint32_t *>(orow + 8 * d + 2 * tq) =
                    ta_fast_pack<BF16>(o[4 * d + 2 * r] * inv, o[4 * d + 2 * r + 1] * inv);
        }
        if (p.lse && tq == 0)
            p.lse[c.lse + row] =
                l[r] > 0.0f ? (m[r] + __log2f(l[r])) * 0.6931471805599453f : ta_fast_neg_inf();
    }
}

/* Split-K (p.t.num_splits > 1): the context of Q tile `at` with its K tiles
 * cut to part `split` (ta_tile_split_visit, the exact kernels' cut); with one
 * split, ta_cuda_context's. The K loops visit [k_begin, k_end). */
TA_FAST_FN ta_tile_ctx ta_cuda_fast_context(const ta_cuda_params &p, const ta_cuda_q_tile &at,
                                            int32_t split) {
    ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
    int32_t first, last;
    ta_tile_split_visit(&p.t, c.key_len, split, c.k_begin, c.k_end, &first, &last);
    c.k_begin = first;
    c.k_end = last;
    return c;
}

/* The store of a K-split part: with one split ta_fast_store_rows; else part
 * `split` of the rows, f32, into the workspace (o / l and lse, as the exact
 * kernels' parts: ta_cuda_params.part_o, part_lse), which the merge kernel
 * combines in ascending part order. */
template <bool BF16, int NO>
TA_FAST_FN void ta_fast_store_part(const ta_cuda_params &p, const ta_tile_ctx &c, int32_t split,
                                   int32_t ra, int tq, const float (&o)[4 * NO], const float m[2],
                                   float l[2]) {
    if (p.t.num_splits == 1) {
        ta_fast_store_rows<BF16, NO>(p, c, ra, tq, o, m, l);
        return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int32_t row = ra + 8 * r;
        float inv;
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        if (row >= p.t.seq_q) continue;
        inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        {
            const int64_t part = (int64_t)split * p.n_rows + c.lse + row;
            float *orow = p.part_o + part * p.head_dim_v;
#pragma unroll
            for (int d = 0; d < NO; ++d)
                *reinterpret_cast<float2 *>(orow + 8 * d + 2 * tq) =
                    make_float2(o[4 * d + 2 * r] * inv, o[4 * d + 2 * r + 1] * inv);
            if (tq == 0)
                p.part_lse[part] =
                    l[r] > 0.0f ? (m[r] + __log2f(l[r])) * 0.6931471805599453f : ta_fast_neg_inf();
        }
    }
}

#endif /* TA_CUDA_FAST_CUH */
