/*
 * Device building blocks of the MTA key-query conv (docs/mta.md, Specification)
 * for the exact-mode CUDA kernels: the raw score tile on a loaded region and
 * the forward conv of it. Used by cuda/ta_cuda_mta_fwd.cu; the backward
 * (cuda/ta_cuda_mta_bwd.cu) may use them too. Not installed. Built on
 * cuda/ta_cuda_tile.cuh (same 256-thread blocks, 16 x 16 thread grid, dtype
 * access, shared-memory convention: every phase that writes a shared buffer
 * starts with __syncthreads()).
 *
 * Exactness (docs/design.md 3): every output is one register of one thread running
 * the reference's scalar sequence:
 *   raw score  S[r][j] = scale * dot(q_r, k_j, D)   (ta_ref_scores: +0, fmaf, d
 *              ascending, then one multiply)  if visible, else +0
 *   conv       C[x][e] = +0; a ascending, b ascending:
 *              fmaf(w[a][b], S[x + a][e + b], C)   (ta_ref_conv_at)
 * so a tile's values depend on the absolute (row, column) only, never on the
 * tile or thread that computes them.
 *
 * Layouts (all f32, shared memory):
 *   S tile   s[x][jl], row stride lds: loaded row x (absolute row row_load0 + x),
 *            loaded column jl (absolute column col_load0 + jl). lds % 4 == 0;
 *            lds / 4 odd keeps the conv's float4 reads of 8 consecutive rows on
 *            distinct banks (ta_cuda_mta_s_ld picks it).
 *   kernel   w_s[a][b], row stride w_ld = ta_cuda_mta_w_ld(c_k) (c_k rounded up
 *            to 4), zero past c_k; TA_CUDA_MTA_W_BUF floats hold any kernel.
 *
 * The conv's geometry: output (x, e) reads S rows x .. x + c_q - 1 and columns
 * e .. e + c_k - 1 of the tile it is given. For the forward's effective region
 * that is the loaded S tile itself (loaded row x + a = effective row x's
 * (c_q-1-a)-th row above; loaded column e + b = effective column e shifted by
 * b - P). For the backward's gradient region G (rows [r0, r1 + c_q - 1),
 * columns [c0 - P, c1 + P)) it is again the loaded tile with its halos
 * (docs/mta.md: C on G reads S on Lr), G's (0, 0) at loaded (0, 0).
 */
#ifndef TA_CUDA_MTA_CUH
#define TA_CUDA_MTA_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_internal.h"
#include "ta_math.h"
}

/* Row stride of a conv kernel in shared memory: c_k rounded up to 4. */
#define TA_CUDA_MTA_W_LD_MAX ((TA_CONV_K_MAX + 3) / 4 * 4)
/* Floats of a shared conv-kernel buffer that holds any c_q x c_k kernel. */
#define TA_CUDA_MTA_W_BUF (TA_CONV_Q_MAX * TA_CUDA_MTA_W_LD_MAX)
/*
 * Floats an S row must have past its loaded columns. A conv thread's window
 * for outputs e0 .. e0+3 (e0 % 4 == 0, e0 < cols) spans columns
 * e0 .. e0 + 4 ceil(c_k/4) + 3 <= cols + c_k + 5 = cols_load + 6, where
 * cols_load = cols + c_k - 1 are the columns the outputs need. The values
 * there reach discarded lanes only, but must be readable shared memory.
 */
#define TA_CUDA_MTA_S_SLACK 8

static_assert(TA_CUDA_MTA_W_LD_MAX % 4 == 0, "float4 rows of the conv kernel");

TA_CUDA_DEV int32_t ta_cuda_mta_w_ld(int32_t c_k) { return (c_k + 3) / 4 * 4; }

/*
 * Row stride of an S tile with at most cols_load loaded columns: at least
 * cols_load + TA_CUDA_MTA_S_SLACK, a multiple of 4 with stride / 4 odd
 * (conflict-free float4 reads of 8 consecutive rows). Host and device (a
 * launcher sizes shared memory with it).
 */
static __host__ __device__ __forceinline__ int32_t ta_cuda_mta_s_ld(int32_t cols_load) {
    int32_t ld = (cols_load + TA_CUDA_MTA_S_SLACK + 3) / 4 * 4;
    if ((ld / 4) % 2 == 0) ld += 4;
    return ld;
}

/*
 * Conv kernel of query head h into shared memory: w_s[a * w_ld + b] =
 * conv_w[(h * c_q + a) * c_k + b] for b < c_k, 0 for c_k <= b < w_ld
 * (w_ld = ta_cuda_mta_w_ld(c_k)). conv_w: [H, c_q, c_k] f32, device memory.
 * Starts and ends with __syncthreads() (w_s is readable on return).
 */
TA_CUDA_DEV void ta_cuda_mta_load_w(float *w_s, const float *conv_w, int32_t h, int32_t c_q,
                                    int32_t c_k) {
    const int32_t w_ld = ta_cuda_mta_w_ld(c_k);
    const float *w_h = conv_w + (size_t)h * (size_t)c_q * (size_t)c_k;
    __syncthreads(); /* the previous phase is done with w_s */
    for (int e = (int)threadIdx.x; e < c_q * w_ld; e += TA_CUDA_THREADS) {
        const int a = e / w_ld, b = e % w_ld;
        w_s[e] = b < c_k ? w_h[a * c_k + b] : 0.0f;
    }
    __syncthreads();
}

/* A loaded region of the score matrix, absolute indices (docs/tiling.md):
 * rows [row_load0, row_load0 + rows_load), columns [col_load0, col_load0 +
 * cols_load); either may stick out of the sequence (zero padding). */
typedef struct ta_cuda_mta_region {
    int32_t row_load0, rows_load; /* rows_load <= 64 (one band of a taller tile per call) */
    int32_t col_load0, cols_load; /* cols_load <= TA_BLOCK_MAX */
} ta_cuda_mta_region;

/*
 * Raw scores of one 64-row band of a loaded region (docs/mta.md forward
 * step 1, ta_ref_scores):
 *
 *   s[x][jl] = scale * dot(q_r, k_j, dim)   if key_lo[x] <= j < key_hi[x]
 *            = +0                            otherwise
 *   r = g.row_load0 + x, j = g.col_load0 + jl,  x < 64, jl < round_up(cols_load, 64)
 *
 * (+0 also for x >= rows_load and jl >= cols_load.) key_lo, key_hi [64]: each
 * loaded row's visible keys (ta_cuda_row_keys; (0, 0) for rows outside the
 * sequence), written before the call (WL = false: key_lo is not read, every
 * row's lo is 0). q, k: the (batch, head) slices; q_hist: the query history
 * rows (t->q_history of them; its slice placed so that row -q_history is its
 * first), read for loaded rows in [-q_history, 0). Rows
 * and keys outside the sequence are never read. rope: the rotary stage's
 * (q rows side_a, k rows side_b; NULL: none). k_pages: k is a paged pool
 * (ta_cuda_kv_row when ta_cuda_paged).
 * s: [64][lds] with lds >= round_up(cols_load, 64); other columns untouched.
 * 64 columns per dot tile (ta_cuda_dot_tile_range, through stage[TA_CUDA_DOT_BUF]).
 * Ends without a barrier: __syncthreads() before reading s.
 */
template <int DT, bool WL>
TA_CUDA_DEV void ta_cuda_mta_scores(float *s, int32_t lds, const ta_cuda_rows &q,
                                    const ta_cuda_rows &q_hist, const ta_cuda_rows &k, int32_t dim,
                                    float scale, const ta_tiling *t, const int32_t *key_lo,
                                    const int32_t *key_hi, ta_cuda_mta_region g, float *stage,
                                    const ta_cuda_rope_src *rope = nullptr,
                                    const ta_cuda_kv_pages &k_pages = ta_cuda_kv_pages{}) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
    /* loaded rows inside [0, S_q): x in [a_lo, a_hi); the query history rows
     * [-q_history, 0): x in [h_lo, a_lo) */
    const int32_t a_lo = ta_tiling_max_i32(0, -g.row_load0);
    const int32_t a_hi = ta_tiling_min_i32(g.rows_load, t->seq_q - g.row_load0);
    const int32_t h_lo =
        ta_tiling_min_i32(ta_tiling_max_i32(0, -t->q_history - g.row_load0), a_lo);
    for (int32_t c0 = 0; c0 < g.cols_load; c0 += TA_CUDA_TILE) {
        const int32_t j0 = g.col_load0 + c0; /* absolute column of chunk column 0 */
        /* chunk columns y inside [0, S_k) and the loaded range: [b_lo, b_hi) */
        const int32_t b_lo = ta_tiling_max_i32(0, -j0);
        const int32_t b_hi = ta_tiling_min_i32(ta_tiling_min_i32(TA_CUDA_TILE, g.cols_load - c0),
                                               t->seq_k - j0);
        float acc[4][4];
        if (h_lo < a_lo) /* history rows: the first Q tile of a call with q_history > 0 */
            ta_cuda_dot_tile_range<DT, true>(acc, q, g.row_load0, a_lo, a_hi, k, j0, b_lo, b_hi,
                                             dim, stage, &q_hist, h_lo, rope, k_pages);
        else
            ta_cuda_dot_tile_range<DT>(acc, q, g.row_load0, a_lo, a_hi, k, j0, b_lo, b_hi, dim,
                                       stage, nullptr, 0, rope, k_pages);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int32_t lo = ta_cuda_lo<WL>(key_lo, 4 * ty + r), hi = key_hi[4 * ty + r];
            float v[4];
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int32_t y = 4 * tx + c, j = j0 + y;
                const bool vis = c0 + y < g.cols_load && ta_cuda_in<WL>(j, lo, hi);
                v[c] = vis ? scale * acc[r][c] : 0.0f;
            }
            *reinterpret_cast<float4 *>(s + (size_t)(4 * ty + r) * (size_t)lds + (size_t)(c0 + 4 * tx)) =
                make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

/* The 16 fused multiply-adds of one 4-wide chunk of kernel columns: for bb
 * ascending, acc[c] = fmaf(w[bb], win[bb + c], acc[c]), only bb < n_b. */
TA_CUDA_DEV void ta_cuda_mta_conv_chunk(float acc[4], const float4 w4, const float4 lo,
                                        const float4 hi, int n_b) {
    const float w[4] = {w4.x, w4.y, w4.z, w4.w};
    const float win[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int bb = 0; bb < 4; ++bb) {
        if (bb < n_b) {
#pragma unroll
            for (int c = 0; c < 4; ++c)
                acc[c] = fmaf(w[bb], win[bb + c], acc[c]);
        }
    }
}

/*
 * Forward conv of an S tile (docs/mta.md forward step 2, ta_ref_conv_at):
 *
 *   out[x * out_row_stride + e * out_col_stride] =
 *       +0; for a = 0 .. c_q-1, b = 0 .. c_k-1 ascending: fmaf(w_s[a][b], s[x + a][e + b], .)
 *
 * for x < rows and out_lo[x] <= e < out_hi[x] (the row's visible columns,
 * [rows] each in shared memory, 0 <= lo <= hi <= cols; NULL: every e < cols;
 * WL = false: out_lo is all 0 and not read).
 * Nothing else of out is written. Every term is visited (masked raw scores
 * are the zeros s holds), as the reference does.
 *
 * Threads own (x, 4 consecutive e): consecutive threads take consecutive rows
 * x (conflict-free float4 reads of s with ta_cuda_mta_s_ld strides, and
 * conflict-free transposed stores when out_row_stride == 1). The S row window
 * slides along b in float4 steps: per 4 kernel columns one float4 of s, one
 * (broadcast) float4 of w_s and 16 fmaf.
 *
 * s: 16-byte aligned, lds % 4 == 0, rows x + a < its rows, and at least
 * cols + c_k - 1 + TA_CUDA_MTA_S_SLACK readable floats per row
 * (lds >= ta_cuda_mta_s_ld(cols + c_k - 1)). w_s as
 * ta_cuda_mta_load_w leaves it. Reads s, w_s, out_lo, out_hi; the caller puts a
 * __syncthreads() between their writes and this call and between this call
 * and reads of out.
 */
template <bool WL>
TA_CUDA_DEV void ta_cuda_mta_conv(const float *s, int32_t lds, const float *w_s, int32_t c_q,
                                  int32_t c_k, int32_t rows, int32_t cols, const int32_t *out_lo,
                                  const int32_t *out_hi, float *out, int32_t out_row_stride,
                                  int32_t out_col_stride) {
    const int32_t w_ld = ta_cuda_mta_w_ld(c_k);
    const int32_t n_full = c_k / 4, n_tail = c_k % 4; /* 4-column chunks of the kernel */
    const int32_t groups = (cols + 3) / 4;
    const int32_t items = rows * groups;
    for (int32_t it = (int32_t)threadIdx.x; it < items; it += TA_CUDA_THREADS) {
        const int32_t x = it % rows, e0 = 4 * (it / rows);
        const int32_t lo_x = WL && out_lo ? out_lo[x] : 0, hi_x = out_hi ? out_hi[x] : cols;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (e0 >= hi_x || e0 + 4 <= lo_x) continue; /* none of e0 .. e0+3 visible */
        for (int32_t a = 0; a < c_q; ++a) {
            const float *s_row = s + (size_t)(x + a) * (size_t)lds + (size_t)e0; /* window start */
            const float *w_row = w_s + (size_t)a * (size_t)w_ld;
            float4 lo = *reinterpret_cast<const float4 *>(s_row);
            int32_t b0 = 0;
            for (int32_t ch = 0; ch < n_full; ++ch, b0 += 4) {
                const float4 hi = *reinterpret_cast<const float4 *>(s_row + b0 + 4);
                ta_cuda_mta_conv_chunk(acc, *reinterpret_cast<const float4 *>(w_row + b0), lo, hi,
                                       4);
                lo = hi;
            }
            if (n_tail > 0) {
                const float4 hi = *reinterpret_cast<const float4 *>(s_row + b0 + 4);
                ta_cuda_mta_conv_chunk(acc, *reinterpret_cast<const float4 *>(w_row + b0), lo, hi,
                                       n_tail);
            }
        }
#pragma unroll
        for (int c = 0; c < 4; ++c)
            if (e0 + c >= lo_x && e0 + c < hi_x)
                out[(size_t)x * (size_t)out_row_stride + (size_t)(e0 + c) * (size_t)out_col_stride] =
                    acc[c];
    }
}

#endif /* TA_CUDA_MTA_CUH */
