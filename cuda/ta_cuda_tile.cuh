/*
 * Device building blocks of the exact-mode kernels (cuda/ta_cuda_sdpa_*.cu).
 * Not installed. docs/cuda.md has the drawings.
 *
 * Every kernel runs TA_CUDA_THREADS = 256 threads as a 16 x 16 grid,
 * tx = tid % 16, ty = tid / 16. A CUDA tile is 64 x 64 (rows x columns, or
 * columns x rows); each thread owns a 4 x 4 micro-tile of it, so the
 * micro-tile's row slot r is 4*ty + r and its column slot c is 4*tx + c.
 *
 * Exactness (docs/design.md 3): threads split independent outputs only. Every
 * output element is one register (or one shared-memory word) that runs its
 * scalar sequence of the reference alone, in the reference's order:
 *   - ta_cuda_dot_tile: for each (r, c), acc = 0; for f ascending:
 *     acc = fmaf(a[r][f], b[c][f], acc)          (ta_ref_dot)
 *   - the accumulations of the kernels: for each output (x, f), acc_xf =
 *     fmaf(coef_x[j], src[j][f], acc_xf) for j ascending, live j only (a
 *     select keeps acc when j is not live, so masked entries never enter,
 *     whatever bytes they hold).
 * Shared-memory chunking (features in chunks of 32, source rows in chunks of 16)
 * only decides when operands arrive, never the order of any sum.
 *
 * Shared-memory convention: every phase that writes a shared buffer starts
 * with __syncthreads(), so a buffer may be reused by the next phase without
 * the caller synchronising.
 */
#ifndef TA_CUDA_TILE_CUH
#define TA_CUDA_TILE_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "ta_internal.h"
#include "ta_math.h"
}

#define TA_CUDA_THREADS 256 /* 16 x 16 threads per block */
#define TA_CUDA_TILE    64  /* rows / columns of a CUDA tile: 16 threads x 4 */
#define TA_CUDA_FCHUNK  32  /* features per shared-memory chunk of a dot tile */
#define TA_CUDA_LDT     68  /* row stride of a transposed [f][64] tile: 64 + 4 keeps 16-byte rows */
#define TA_CUDA_RCHUNK  16  /* source rows per shared-memory chunk of an accumulation */
#define TA_CUDA_SLOT    64  /* features per register slot: 16 threads x 4 */
#define TA_CUDA_SLOTS   4   /* at most 4 slots: 256 features = TA_HEAD_DIM_MAX */
#define TA_CUDA_NEG_INF_BITS 0xff800000u /* -inf: lse of a row that sees no key, m's start */

/* Floats of the dot-tile staging buffer: a [FCHUNK][LDT] tile for each operand. */
#define TA_CUDA_DOT_BUF (2 * TA_CUDA_FCHUNK * TA_CUDA_LDT)
/* Floats of an accumulation source chunk: [RCHUNK][SLOTS * SLOT]. */
#define TA_CUDA_SRC_BUF (TA_CUDA_RCHUNK * TA_CUDA_SLOTS * TA_CUDA_SLOT)
/* The staging buffer serves both phases. */
#define TA_CUDA_STAGE_BUF (TA_CUDA_DOT_BUF > TA_CUDA_SRC_BUF ? TA_CUDA_DOT_BUF : TA_CUDA_SRC_BUF)

static_assert(TA_CUDA_THREADS == 16 * 16, "16 x 16 thread grid");
static_assert(TA_CUDA_TILE == 16 * 4, "16 threads x 4 slots per tile side");
static_assert(TA_CUDA_LDT % 4 == 0 && TA_CUDA_LDT >= TA_CUDA_TILE, "float4 rows of a tile");
static_assert(TA_CUDA_SLOTS * TA_CUDA_SLOT >= TA_HEAD_DIM_MAX, "slots cover every head dim");

#define TA_CUDA_DEV static __device__ __forceinline__

/*
 * Shared-memory offset tables. A kernel's dynamic shared memory is one float
 * array cut into regions by one __host__ __device__ function per kernel (its
 * table): the launcher calls it to size the launch (and its largest need, for
 * the opt-in, ta_cuda_smem_opt_in), the kernel to carve, so the two cannot
 * disagree. ta_cuda_smem_take hands out the next region of `floats` floats at
 * *end and returns its offset; regions of a multiple of 4 floats keep the
 * next one 16-byte aligned (float4 access).
 */
static __host__ __device__ __forceinline__ int32_t ta_cuda_smem_take(int32_t *end, int32_t floats) {
    const int32_t off = *end;
    *end += floats;
    return off;
}

/*
 * The forwards' table (SDPA and MTA), offsets in floats:
 *
 *   +-------------------+------------------+-----------+---------+------------------------+
 *   | s [s_floats]      | st [cols_cap][LDT] | stage   | w       | m_run l_run m_new alpha |
 *   | MTA: raw S, 0 SDPA| scores / p, st[j][i] | STAGE_BUF | w_floats| vis_end n_vis [64] each |
 *   +-------------------+------------------+-----------+---------+------------------------+
 *
 * s_floats: 64 x s_ld for the MTA's raw scores, 0 for SDPA; w_floats: the
 * MTA's conv kernel (TA_CUDA_MTA_W_BUF), 0 for SDPA. vis_end, n_vis are int32.
 */
typedef struct ta_cuda_fwd_smem {
    int32_t s, st, stage, w, m_run, l_run, m_new, alpha, vis_end, n_vis;
    int32_t floats; /* total */
} ta_cuda_fwd_smem;

static __host__ __device__ __forceinline__ ta_cuda_fwd_smem
ta_cuda_fwd_smem_make(int32_t cols_cap, int32_t s_floats, int32_t w_floats) {
    ta_cuda_fwd_smem m;
    int32_t end = 0;
    m.s = ta_cuda_smem_take(&end, s_floats);
    m.st = ta_cuda_smem_take(&end, cols_cap * TA_CUDA_LDT);
    m.stage = ta_cuda_smem_take(&end, TA_CUDA_STAGE_BUF);
    m.w = ta_cuda_smem_take(&end, w_floats);
    m.m_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.l_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.m_new = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.alpha = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.vis_end = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.n_vis = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.floats = end;
    return m;
}

/* Loaded columns of a forward k tile rounded up to whole dot tiles of 64:
 * the score tile's capacity. */
static __host__ __device__ __forceinline__ int32_t ta_cuda_fwd_cols_cap(const ta_tiling *t) {
    return (t->block_k + TA_CUDA_TILE - 1) / TA_CUDA_TILE * TA_CUDA_TILE;
}

/* ---- Storage dtype access: widening and rounding are the shared ta_math.h ones. */
template <int DT> TA_CUDA_DEV float ta_cuda_load(const void *base, size_t idx) {
    if (DT == TA_F16) return ta_f16_to_f32(static_cast<const uint16_t *>(base)[idx]);
    if (DT == TA_BF16) return ta_bf16_to_f32(static_cast<const uint16_t *>(base)[idx]);
    return static_cast<const float *>(base)[idx];
}

template <int DT> TA_CUDA_DEV void ta_cuda_store(void *base, size_t idx, float x) {
    if (DT == TA_F16)
        static_cast<uint16_t *>(base)[idx] = ta_f32_to_f16(x);
    else if (DT == TA_BF16)
        static_cast<uint16_t *>(base)[idx] = ta_f32_to_bf16(x);
    else
        static_cast<float *>(base)[idx] = x;
}

/*
 * Keys [0, end) are the visible ones from query row r: ta_tiling_visible(t, r,
 * j, key_len) is true exactly for 0 <= j < end (the mask is a prefix in j).
 * 0 for a row outside [0, S_q).
 */
TA_CUDA_DEV int32_t ta_cuda_visible_end(const ta_tiling *t, int32_t r, int32_t key_len) {
    int32_t end = key_len;
    if (r < 0 || r >= t->seq_q) return 0;
    if (t->causal) end = ta_tiling_min_i32(end, r + t->diag_offset + 1);
    return ta_tiling_max_i32(end, 0);
}

/* A thread's register block of a 64 x (NS x 64) accumulator tile (rows or
 * keys 4ty+r, features s*64 + 4tx + e), set to +0. */
template <int NS> TA_CUDA_DEV void ta_cuda_acc_zero(float (&acc)[4][NS][4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[r][s][e] = 0.0f;
}

/* Thread coordinates in the 16 x 16 grid. */
TA_CUDA_DEV int ta_cuda_tx(void) { return (int)(threadIdx.x & 15u); }
TA_CUDA_DEV int ta_cuda_ty(void) { return (int)(threadIdx.x >> 4); }

/* The 16 fused multiply-adds of one feature step of a 4 x 4 micro-tile. */
TA_CUDA_DEV void ta_cuda_fma_4x4(float acc[4][4], const float4 a, const float4 b) {
    const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
}

/*
 * One 64 x 64 tile of dot products over n features, rows in a range:
 *
 *   acc[r][c] = dot(A[4*ty + r], B[4*tx + c], n)      (ta_ref_dot: +0, fmaf, f ascending)
 *
 * A row x (0 <= x < 64) is element (a_first + x) * n + f of tensor a (rows of
 * n features) if a_lo <= x < a_hi; other rows are not read (they give 0 and
 * must not be used; a_first + x may be negative there, as for the MTA halos
 * above row 0). Likewise B with b_first, b_lo, b_hi. Operands are staged
 * through stage[TA_CUDA_DOT_BUF] in chunks of TA_CUDA_FCHUNK features,
 * transposed ([f][row], stride LDT) so a thread reads its 4 rows as one
 * float4. Warps read global memory along f (coalesced); the transposing stores
 * have 4-way bank conflicts, once per element per chunk, against 64 float4
 * reads of it.
 */
template <int DT>
TA_CUDA_DEV void ta_cuda_dot_tile_range(float acc[4][4], const void *a, int64_t a_first,
                                        int32_t a_lo, int32_t a_hi, const void *b, int64_t b_first,
                                        int32_t b_lo, int32_t b_hi, int32_t n, float *stage) {
    float *sa = stage, *sb = stage + TA_CUDA_FCHUNK * TA_CUDA_LDT;
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            acc[r][c] = 0.0f;
    for (int32_t f0 = 0; f0 < n; f0 += TA_CUDA_FCHUNK) {
        const int nf = (int)ta_tiling_min_i32(TA_CUDA_FCHUNK, n - f0);
        __syncthreads(); /* the previous chunk (or phase) is done with stage */
        for (int e = tid; e < TA_CUDA_TILE * TA_CUDA_FCHUNK; e += TA_CUDA_THREADS) {
            const int row = e / TA_CUDA_FCHUNK, f = e % TA_CUDA_FCHUNK;
            float va = 0.0f, vb = 0.0f;
            if (f < nf) {
                if (row >= a_lo && row < a_hi)
                    va = ta_cuda_load<DT>(a, (size_t)(a_first + row) * (size_t)n + (size_t)(f0 + f));
                if (row >= b_lo && row < b_hi)
                    vb = ta_cuda_load<DT>(b, (size_t)(b_first + row) * (size_t)n + (size_t)(f0 + f));
            }
            sa[f * TA_CUDA_LDT + row] = va;
            sb[f * TA_CUDA_LDT + row] = vb;
        }
        __syncthreads();
        if (nf == TA_CUDA_FCHUNK) {
#pragma unroll 8
            for (int f = 0; f < TA_CUDA_FCHUNK; ++f)
                ta_cuda_fma_4x4(acc, *reinterpret_cast<const float4 *>(sa + f * TA_CUDA_LDT + 4 * ty),
                                *reinterpret_cast<const float4 *>(sb + f * TA_CUDA_LDT + 4 * tx));
        } else {
            for (int f = 0; f < nf; ++f)
                ta_cuda_fma_4x4(acc, *reinterpret_cast<const float4 *>(sa + f * TA_CUDA_LDT + 4 * ty),
                                *reinterpret_cast<const float4 *>(sb + f * TA_CUDA_LDT + 4 * tx));
        }
    }
}

/* The common case: rows [0, a_rows) of A and [0, b_rows) of B. */
template <int DT>
TA_CUDA_DEV void ta_cuda_dot_tile(float acc[4][4], const void *a, size_t a_first, int32_t a_rows,
                                  const void *b, size_t b_first, int32_t b_rows, int32_t n,
                                  float *stage) {
    ta_cuda_dot_tile_range<DT>(acc, a, (int64_t)a_first, 0, a_rows, b, (int64_t)b_first, 0, b_rows,
                               n, stage);
}

/* Where the features of register slot s come from: tensor base, row length
 * (D or D_v) and first feature. Features at or past row_len are padding. */
typedef struct ta_cuda_slot {
    const void *base;
    int32_t row_len;
    int32_t feat0;
} ta_cuda_slot;

/*
 * Stage rows [first_row, first_row + rows) (rows <= RCHUNK) of the slots'
 * features into dst[RCHUNK][NS * SLOT]: dst[x][s*64 + f] = slot s's tensor at
 * row first_row + x, feature feat0 + f; 0 past the row length or past rows.
 * Consecutive threads read consecutive features (coalesced).
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_stage_rows(float *dst, const ta_cuda_slot *slots, size_t first_row,
                                    int32_t rows) {
    const int width = NS * TA_CUDA_SLOT;
    __syncthreads(); /* the previous phase is done with dst */
    for (int e = (int)threadIdx.x; e < TA_CUDA_RCHUNK * width; e += TA_CUDA_THREADS) {
        const int x = e / width, col = e % width, s = col / TA_CUDA_SLOT;
        const int32_t f = slots[s].feat0 + col % TA_CUDA_SLOT;
        float val = 0.0f;
        if (x < rows && f < slots[s].row_len)
            val = ta_cuda_load<DT>(slots[s].base, (first_row + (size_t)x) * (size_t)slots[s].row_len +
                                                      (size_t)f);
        dst[e] = val;
    }
    __syncthreads();
}

/*
 * One k tile of the forward's online softmax and P V accumulation over 64
 * rows, the reference's rules (docs/reference.md section 2): the SDPA
 * forward's steps 2-5 and the MTA forward's steps 3-6, on whichever scores the
 * caller left in st.
 *   st       [cols][TA_CUDA_LDT]: the tile's scores, transposed (st[j][i] for
 *            row i, effective column j < cols); overwritten with p on the
 *            visible entries. Published by a barrier before the call.
 *   vis_end  [64]: each row's visible-key end (absolute column); the tile's
 *            visible columns of row i are the prefix j < n_vis[i], written here
 *   m_run, l_run [64]: running max and sum (updated); m_new, alpha [64]: scratch
 *   acc, row_vis: this thread's register block (rows 4ty+r, features s*64+4tx+e),
 *            rescaled by alpha, then acc = fmaf(p_j, v_j, acc) for j ascending,
 *            v_j the row kv_base + col0 + j, staged through stage from v_slots
 * Rows are independent; each row's max, sum and accumulators follow the
 * reference's sequential order. Ends without a barrier.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_softmax_pv_tile(float *st, int32_t col0, int32_t cols,
                                         const int32_t *vis_end, int32_t *n_vis, float *m_run,
                                         float *l_run, float *m_new, float *alpha, float *stage,
                                         const ta_cuda_slot *v_slots, size_t kv_base,
                                         float (&acc)[4][NS][4], int32_t (&row_vis)[4]) {
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    int32_t j0;
    /* per row, the tile's max over the visible columns (exactly the reference's
     * sequential comparison), the new max and alpha */
    if (tid < TA_CUDA_TILE) {
        const int32_t nv =
            ta_tiling_max_i32(0, ta_tiling_min_i32(vis_end[tid] - col0, cols)); /* j < nv */
        n_vis[tid] = nv;
        if (nv > 0) {
            float m_tile = st[tid];
            const float m_old = m_run[tid];
            float m_nw;
            int32_t j;
            for (j = 1; j < nv; ++j) {
                const float x = st[(size_t)j * TA_CUDA_LDT + tid];
                if (x > m_tile) m_tile = x;
            }
            m_nw = m_old > m_tile ? m_old : m_tile;
            m_new[tid] = m_nw;
            alpha[tid] = ta_exp(m_old - m_nw);
        }
    }
    __syncthreads();
    /* p = exp(s - m_new) on every visible entry */
    for (int e = tid; e < TA_CUDA_TILE * cols; e += TA_CUDA_THREADS) {
        const int i = e % TA_CUDA_TILE, j = e / TA_CUDA_TILE;
        if (j < n_vis[i]) {
            float *x = st + (size_t)j * TA_CUDA_LDT + i;
            *x = ta_exp(*x - m_new[i]);
        }
    }
    __syncthreads();
    /* l = l * alpha, then l = l + p_j for j ascending (one thread per row) */
    if (tid < TA_CUDA_TILE && n_vis[tid] > 0) {
        const int32_t nv = n_vis[tid];
        float l = l_run[tid] * alpha[tid];
        int32_t j;
        for (j = 0; j < nv; ++j)
            l = l + st[(size_t)j * TA_CUDA_LDT + tid];
        l_run[tid] = l;
        m_run[tid] = m_new[tid];
    }
    /* acc = acc * alpha, then acc = fmaf(p_j, v_j, acc), j ascending */
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        row_vis[r] = n_vis[4 * ty + r];
        if (row_vis[r] > 0) {
            const float al = alpha[4 * ty + r];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    acc[r][s][e] = acc[r][s][e] * al;
        }
    }
    for (j0 = 0; j0 < cols; j0 += TA_CUDA_RCHUNK) {
        const int jn = (int)ta_tiling_min_i32(TA_CUDA_RCHUNK, cols - j0);
        ta_cuda_stage_rows<DT, NS>(stage, v_slots, kv_base + (size_t)(col0 + j0), jn);
        for (int jj = 0; jj < jn; ++jj) {
            const int32_t j = j0 + jj;
            const float4 p4 =
                *reinterpret_cast<const float4 *>(st + (size_t)j * TA_CUDA_LDT + 4 * ty);
            const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int s = 0; s < NS; ++s) {
                const float4 v4 = *reinterpret_cast<const float4 *>(
                    stage + jj * (NS * TA_CUDA_SLOT) + s * TA_CUDA_SLOT + 4 * tx);
                const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const bool live = j < row_vis[r];
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        acc[r][s][e] = live ? fmaf(pv[r], vv[e], acc[r][s][e]) : acc[r][s][e];
                }
            }
        }
    }
}

/*
 * The forward's last step for 64 rows (after a barrier that published m_run,
 * l_run): o = acc / l (IEEE division) rounded once to the storage dtype, and
 * lse = m + log(l); a row that saw no key (m = -inf) gets o = 0, lse = -inf.
 * Rows x < rows, starting at row q_first of [B, H, S_q]; lse may be NULL.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_fwd_store_rows(void *o, float *lse, size_t q_first, int32_t rows,
                                        int32_t head_dim_v, const float (&acc)[4][NS][4],
                                        const float *m_run, const float *l_run) {
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        if (x >= rows) continue;
        const float m = m_run[x], l = l_run[x];
        const bool seen = m != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                if (f < head_dim_v)
                    ta_cuda_store<DT>(o, (q_first + (size_t)x) * (size_t)head_dim_v + (size_t)f,
                                      seen ? acc[r][s][e] / l : 0.0f);
            }
    }
    if (lse && tid < rows) {
        const float m = m_run[tid];
        lse[q_first + (size_t)tid] = m != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS)
                                         ? m + ta_log(l_run[tid])
                                         : ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
    }
}

/*
 * Store a [4 x-slots][NS slots][4 features] register block: element (r, s, e)
 * goes to row x0 + 4*ty + r, feature s*64 + 4*tx + e of a [*, row_len] tensor
 * starting at row first_row, times `mul` (1 or the softmax scale) when
 * `scaled`, rounded once to the storage dtype. Rows >= rows and features >=
 * row_len are not written.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_store_block(void *dst, size_t first_row, int32_t rows, int32_t row_len,
                                     const float acc[4][NS][4], int scaled, float mul) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        if (x >= rows) continue;
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                if (f < row_len)
                    ta_cuda_store<DT>(dst, (first_row + (size_t)x) * (size_t)row_len + (size_t)f,
                                      scaled ? mul * acc[r][s][e] : acc[r][s][e]);
            }
    }
}

#endif /* TA_CUDA_TILE_CUH */
