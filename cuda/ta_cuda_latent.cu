/*
 * CUDA latent attention (issue 14; docs/api.md, "Latent attention and the
 * reciprocal band"; docs/exactness.md section 13): the reciprocal band
 * (TA_RBAND) and the fused latent projections (latent_dim = L > 0), forward
 * and backward, bit-identical to REF (ref/ta_ref_rband.c, ref/ta_ref_fwd.c,
 * ref/ta_ref_bwd.c) in either precision.
 *
 * The attention itself is SDPA's: the exact kernels (cuda/ta_cuda_sdpa_fwd.cu,
 * cuda/ta_cuda_sdpa_bwd.cu) run on a sub-plan (ta_cuda_latent_sub) whose
 * operands are f32 copies in the workspace, so one instantiation (f32, width
 * L) serves every storage type: widening is exact and every dot product runs
 * the same fmaf sequence on the same values. Around them, small kernels, one
 * thread per output element, each the reference's loop:
 *
 *   forward                                 backward
 *   1. lat_q = q~ (W_qlat^T q, history      1. delta D_i = <dO_i, o_i> (D_v, the call's o)
 *      rows too; else q widened)            2. lat_q, lat_k, lat_v as the forward's;
 *   2. lat_k, lat_v: k, v widened              lat_do = dctx~ (W_vup dO) or dO widened
 *      (f16 / bf16)                         3. band: lat_t; lat_dl = dl of every band
 *   3. band: lat_t[r][w] = T of row r,         entry; each row's d_alpha pair (lat_da);
 *      key p_r - w                             d_alpha = the rows' pairs in (b, h, r) order
 *   4. the SDPA forward kernel (its band     4. the SDPA dk/dv and dq kernels (their band
 *      step reads lat_t) into o, or            step reads lat_t; the transposed terms
 *      lat_o (f32)                             read lat_dl after each sum's own chunks)
 *   5. o = W_vup^T ctx~ (projections) or    5. projections: the dq kernel again,
 *      lat_o rounded (f16 / bf16)              recomputing ctx~ = sum_j P v_j; dq =
 *                                              W_qlat dq~; dW_qlat, dW_vup summed per
 *                                              head over (b, 64-row chunks)
 *                                           6. dq, dk, dv rounded (f16 / bf16)
 *
 * Every sum is the reference's order: one accumulator from +0, fmaf, index
 * ascending; the long ones in 64-index chunks whose partials enter a (hi, lo)
 * pair (src/ta_sum2.h). No atomics. The d_alpha sum over rows is one thread's
 * loop (B H S_q pair additions; REF's order is sequential).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_bwd_common.cuh"
#include "ta_cuda_fast.cuh"
#include "ta_cuda_host.cuh"
#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
#include "ta_math.h"
#include "ta_sum2.h"
#include "ta_validate.h"
}

namespace {

#define TA_LAT_DEV static __device__ __forceinline__

/* Element (b, h, r, 0) of a [B, heads, S, dim] tensor under strides st. */
TA_LAT_DEV int64_t ta_lat_at(const ta_strides &st, int32_t b, int32_t h, int32_t r) {
    return (int64_t)b * st.batch + (int64_t)h * st.head + (int64_t)r * st.seq;
}

/* Element idx of a contiguous [B, heads, seq, dim] array: its feature f,
 * row (b, h, r) and the row's flat index. */
struct ta_lat_elem {
    int64_t row;
    int32_t f, r, h, b;
};

TA_LAT_DEV ta_lat_elem ta_lat_decode(int64_t idx, int32_t dim, int32_t seq, int32_t heads) {
    ta_lat_elem x;
    x.f = (int32_t)(idx % dim);
    x.row = idx / dim;
    x.r = (int32_t)(x.row % seq);
    x.h = (int32_t)(x.row / seq % heads);
    x.b = (int32_t)(x.row / seq / heads);
    return x;
}

/* dot(x, y) over n: one accumulator from +0, fmaf, ascending (ta_ref_dot). */
TA_LAT_DEV float ta_lat_dot(const float *x, const float *y, int32_t n) {
    float acc = 0.0f;
    int32_t i;
    for (i = 0; i < n; ++i)
        acc = fmaf(x[i], y[i], acc);
    return acc;
}

/* A [B, heads, S, dim] tensor the kernels read or write: its base and strides. */
struct ta_lat_tensor {
    const void *base;
    ta_strides st;
};

/*
 * 1. The latent queries, one thread per element of lat_q [B, H, n + S_q, L]:
 * row x < n is history row x - n (q_hist), the others q's rows;
 *   q~_l = sum_d fmaf(q_d, W_qlat[h][d][l], .) from +0, d ascending
 * (ta_ref_load_q_lat), or q_l widened without the projections (w NULL);
 * stored as OT (f32; fast mode: the storage type, rounded once).
 */
template <int DT, int OT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_q_kernel(ta_lat_tensor q, ta_lat_tensor q_hist, const float *w, void *dst, int64_t n,
                    int32_t heads, int32_t hist, int32_t seq_q, int32_t dim, int32_t lat) {
    const int32_t rows = hist + seq_q;
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, lat, rows, heads);
        const int32_t l = x_.f, r = x_.r - hist, h = x_.h, b = x_.b;
        const bool in_hist = r < 0;
        const void *src = in_hist ? q_hist.base : q.base;
        const int64_t first =
            in_hist ? ta_lat_at(q_hist.st, b, h, r + hist) : ta_lat_at(q.st, b, h, r);
        float acc = 0.0f;
        int32_t d;
        if (!w) {
            ta_cuda_store<OT>(dst, (size_t)idx, ta_cuda_load<DT>(src, (size_t)(first + l)));
            continue;
        }
        for (d = 0; d < dim; ++d)
            acc = fmaf(ta_cuda_load<DT>(src, (size_t)(first + d)),
                       w[((int64_t)h * dim + d) * lat + l], acc);
        ta_cuda_store<OT>(dst, (size_t)idx, acc);
    }
}

/* 2. A tensor widened into a contiguous f32 copy [B, heads, S, dim]. */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_widen_kernel(ta_lat_tensor src, float *dst, int64_t n, int32_t heads, int32_t seq,
                        int32_t dim) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, dim, seq, heads);
        const int32_t f = x_.f, r = x_.r, h = x_.h, b = x_.b;
        dst[idx] = ta_cuda_load<DT>(src.base, (size_t)(ta_lat_at(src.st, b, h, r) + f));
    }
}

/* The last step: a contiguous f32 [B, heads, S, dim] rounded once into the
 * call's tensor (dtype DT, its strides). */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_round_kernel(const float *src, void *dst, ta_strides st, int64_t n, int32_t heads,
                        int32_t seq, int32_t dim) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, dim, seq, heads);
        const int32_t f = x_.f, r = x_.r, h = x_.h, b = x_.b;
        ta_cuda_store<DT>(dst, (size_t)(ta_lat_at(st, b, h, r) + f), src[idx]);
    }
}

/*
 * 3. The band's transposed scores, one thread per (b, h, r, w) of lat_t
 * [B, H, S_q, W1]: with p_r = r + S_k - S_q and key j = p_r - w >= 0,
 *   T = scale * dot(q~_(j - off), k_(p_r), L)      (ta_ref_rband_scores)
 * q~ from lat_q (its n history rows first), k from the sub-plan's f32 k.
 * Entries with j < 0 are never read; they hold +0.
 */
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_t_kernel(const float *lat_q, int32_t hist, ta_lat_tensor k, float *t, int64_t n,
                    int32_t heads, int32_t group, int32_t seq_q, int32_t seq_k, int32_t lat,
                    int32_t w1, float scale) {
    const int32_t off = seq_k - seq_q;
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int32_t w = (int32_t)(idx % w1);
        const int64_t row = idx / w1, bh = row / seq_q;
        const int32_t r = (int32_t)(row % seq_q), h = (int32_t)(bh % heads);
        const int32_t b = (int32_t)(bh / heads), pr = r + off;
        const float *q_row = lat_q + (bh * (hist + seq_q) + hist + r - w) * lat;
        const float *k_row = static_cast<const float *>(k.base) + ta_lat_at(k.st, b, h / group, pr);
        t[idx] = pr - w < 0 ? 0.0f : scale * ta_lat_dot(q_row, k_row, lat);
    }
}

/*
 * 5. The fused up-projection, one thread per element of o [B, H, S_q, D_v]:
 *   o_e = sum_l fmaf(ctx~_l, W_vup[h][l][e], .) from +0, l ascending,
 * rounded once; a row that saw no key (lse = -inf) stores +0
 * (ta_ref_fwd_store_vup). ctx~ = lat_o, the sub-plan's normalised output.
 */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_vup_kernel(const float *ctx, const float *lse, const float *w, void *o, ta_strides o_st,
                      int64_t n, int32_t heads, int32_t seq_q, int32_t lat, int32_t dv) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, dv, seq_q, heads);
        const int32_t e = x_.f, r = x_.r, h = x_.h, b = x_.b;
        const int64_t row = x_.row;
        float acc = 0.0f;
        int32_t l;
        if (lse[row] != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS))
            for (l = 0; l < lat; ++l)
                acc = fmaf(ctx[row * lat + l], w[((int64_t)h * lat + l) * dv + e], acc);
        ta_cuda_store<DT>(o, (size_t)(ta_lat_at(o_st, b, h, r) + e), acc);
    }
}

/*
 * Backward 2. The latent output's gradient, one thread per element of
 * lat_do [B, H, S_q, L]:
 *   dctx~_l = sum_e fmaf(dO_e, W_vup[h][l][e], .) from +0, e ascending
 * (ta_ref_bwd_dctx).
 */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_dctx_kernel(ta_lat_tensor d_o, const float *w, float *dst, int64_t n, int32_t heads,
                       int32_t seq_q, int32_t lat, int32_t dv) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, lat, seq_q, heads);
        const int32_t l = x_.f, r = x_.r, h = x_.h, b = x_.b;
        const int64_t first = ta_lat_at(d_o.st, b, h, r);
        float acc = 0.0f;
        int32_t e;
        for (e = 0; e < dv; ++e)
            acc = fmaf(ta_cuda_load<DT>(d_o.base, (size_t)(first + e)),
                       w[((int64_t)h * lat + l) * dv + e], acc);
        dst[idx] = acc;
    }
}

/*
 * Backward 3. dl of every band entry, one thread per (b, h, r, w) of lat_dl
 * (S_q = S_k: key j = r - w): for a live entry (j >= 0, lse_r > -inf), the
 * reference's recomputation (ta_ref_bwd_recompute, ta_ref_bwd_probs):
 *   l  = fmaf(alpha, T, scale * dot(q~_r, k_j))     P = exp(l - lse_r)
 *   dl = P * (dot(dctx~_r, v_j) - D_r)
 * (+0 elsewhere, never read).
 */
struct ta_lat_dl_args {
    const float *lat_q, *t, *lse, *delta;
    ta_lat_tensor k, v, d_o; /* f32, the sub-plan's */
    float *dl;
    int64_t n;
    int32_t heads, group, seq, lat, w1;
    float scale, alpha;
};

__global__ void __launch_bounds__(TA_CUDA_THREADS) ta_lat_dl_kernel(const ta_lat_dl_args a) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < a.n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int32_t w = (int32_t)(idx % a.w1);
        const int64_t row = idx / a.w1, bh = row / a.seq;
        const int32_t r = (int32_t)(row % a.seq), j = r - w;
        const int32_t h_kv = (int32_t)(bh % a.heads) / a.group, b = (int32_t)(bh / a.heads);
        const float lse = a.lse[row];
        const float *do_row = static_cast<const float *>(a.d_o.base) +
                              ta_lat_at(a.d_o.st, b, (int32_t)(bh % a.heads), r);
        float s, l, p;
        if (j < 0 || lse == ta_f32_from_bits(TA_CUDA_NEG_INF_BITS)) {
            a.dl[idx] = 0.0f;
            continue;
        }
        s = a.scale *
            ta_lat_dot(a.lat_q + row * a.lat,
                       static_cast<const float *>(a.k.base) + ta_lat_at(a.k.st, b, h_kv, j), a.lat);
        l = fmaf(a.alpha, a.t[idx], s);
        p = ta_exp(l - lse);
        a.dl[idx] =
            p * (ta_lat_dot(do_row,
                            static_cast<const float *>(a.v.base) + ta_lat_at(a.v.st, b, h_kv, j),
                            a.lat) -
                 a.delta[row]);
    }
}

/*
 * Backward 3. Each row's d_alpha, one thread per row of [B, H, S_q]: over its
 * band keys j = max(0, r - W) .. r ascending, fmaf(dl_rj, T_rj, part), a key
 * starting a 64-key chunk first adding the partial into the row's pair
 * (ta_ref_bwd_accum_da); the pair's hi word (0 for a row with lse = -inf).
 * Then one thread adds the rows' words into the call's pair in (b, h, r)
 * order (ta_ref_bwd_q_tile_merge) and stores its hi word.
 */
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_da_rows_kernel(const float *dl, const float *t, const float *lse, float *da, int64_t n,
                          int32_t seq, int32_t w1) {
    int64_t row;
    for (row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < n;
         row += (int64_t)gridDim.x * blockDim.x) {
        const int32_t r = (int32_t)(row % seq);
        float hi = 0.0f, lo = 0.0f, part = 0.0f;
        int32_t j;
        if (lse[row] != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS)) {
            for (j = r - w1 + 1 > 0 ? r - w1 + 1 : 0; j <= r; ++j) {
                if (j % TA_SUM2_CHUNK == 0) {
                    ta_sum2_add(&hi, &lo, 1.0f, part);
                    part = 0.0f;
                }
                part = fmaf(dl[row * w1 + (r - j)], t[row * w1 + (r - j)], part);
            }
            ta_sum2_add(&hi, &lo, 1.0f, part);
        }
        da[row] = hi;
    }
}

__global__ void ta_lat_da_sum_kernel(const float *da, int64_t n, float *d_alpha) {
    float hi = 0.0f, lo = 0.0f;
    int64_t row;
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (row = 0; row < n; ++row)
        ta_sum2_add(&hi, &lo, 1.0f, da[row]);
    *d_alpha = hi;
}

/*
 * Backward 5. dq from dq~ (lat_dq: scale * the dq pair's hi word, f32), one
 * thread per element of dq [B, H, S_q, D]:
 *   dq_d = sum_l fmaf(W_qlat[h][d][l], dq~_l, .) from +0, l ascending,
 * rounded once (ta_ref_bwd_store_dq_lat).
 */
template <int DT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_dq_kernel(const float *dqt, const float *w, void *dq, ta_strides dq_st, int64_t n,
                     int32_t heads, int32_t seq_q, int32_t dim, int32_t lat) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const ta_lat_elem x_ = ta_lat_decode(idx, dim, seq_q, heads);
        const int32_t d = x_.f, r = x_.r, h = x_.h, b = x_.b;
        const int64_t row = x_.row;
        float acc = 0.0f;
        int32_t l;
        for (l = 0; l < lat; ++l)
            acc = fmaf(w[((int64_t)h * dim + d) * lat + l], dqt[row * lat + l], acc);
        ta_cuda_store<DT>(dq, (size_t)(ta_lat_at(dq_st, b, h, r) + d), acc);
    }
}

/*
 * Backward 5. A projection's weight gradient, one thread per element
 * dw[h][i][c] of [H, a_dim, c_dim]: over batch entries b ascending, rows r
 * ascending, fmaf(x_(b,h,r,i), y_(b,h,r,c), part), a row starting a 64-row
 * chunk (and the end of each (b, h)) adding the partial into the element's
 * pair; dw = the pair's hi word (ta_ref_bwd_dw_lat: dW_qlat from x = q,
 * y = dq~; dW_vup from x = ctx~, y = dO). XT, YT: the operands' dtypes.
 */
template <int XT, int YT>
__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_dw_kernel(ta_lat_tensor x, int32_t x_dim, ta_lat_tensor y, int32_t y_dim, float *dw,
                     int32_t batch, int32_t heads, int32_t seq_q) {
    const int64_t n = (int64_t)heads * x_dim * y_dim;
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int32_t c = (int32_t)(idx % y_dim), i = (int32_t)(idx / y_dim % x_dim);
        const int32_t h = (int32_t)(idx / y_dim / x_dim);
        float hi = 0.0f, lo = 0.0f;
        int32_t b, r;
        for (b = 0; b < batch; ++b) {
            float part = 0.0f;
            for (r = 0; r < seq_q; ++r) {
                if (r % TA_SUM2_CHUNK == 0) {
                    ta_sum2_add(&hi, &lo, 1.0f, part);
                    part = 0.0f;
                }
                part = fmaf(ta_cuda_load<XT>(x.base, (size_t)(ta_lat_at(x.st, b, h, r) + i)),
                            ta_cuda_load<YT>(y.base, (size_t)(ta_lat_at(y.st, b, h, r) + c)), part);
            }
            ta_sum2_add(&hi, &lo, 1.0f, part);
        }
        dw[idx] = hi;
    }
}

/*
 * Fast mode: a projection's weight gradient dw[h] = sum_(b, r) x_r^T y_r
 * ([x_dim] x [y_dim] per head) as a tiled product. Pass 1: one block of 256
 * threads per (head, 64 x 64 output tile, chunk of rows_per rows of the
 * flattened (b, r)); 16-row slabs of x and y staged in shared memory (f32),
 * each thread a 4 x 4 micro-tile summed in row order; the chunk's partial
 * into part [H, n_chunks, x_dim, y_dim]. Pass 2: one thread per element adds
 * the chunks ascending. Deterministic: no atomics, a fixed order.
 */
#define TA_LAT_DW_TILE 64
#define TA_LAT_DW_SLAB 16

template <int XT, int YT>
__global__ void __launch_bounds__(256)
    ta_lat_dw_part_kernel(ta_lat_tensor x, int32_t x_dim, ta_lat_tensor y, int32_t y_dim,
                          float *part, int32_t batch, int32_t heads, int32_t seq_q,
                          int32_t rows_per, int32_t n_chunks) {
    __shared__ float sx[TA_LAT_DW_SLAB][TA_LAT_DW_TILE], sy[TA_LAT_DW_SLAB][TA_LAT_DW_TILE];
    const int tid = (int)threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int32_t tiles_y = (y_dim + TA_LAT_DW_TILE - 1) / TA_LAT_DW_TILE;
    const int32_t tiles_x = (x_dim + TA_LAT_DW_TILE - 1) / TA_LAT_DW_TILE;
    int64_t blk = blockIdx.x;
    const int32_t chunk = (int32_t)(blk % n_chunks), ti = (int32_t)(blk / n_chunks % tiles_x);
    const int32_t tc = (int32_t)(blk / n_chunks / tiles_x % tiles_y);
    const int32_t h = (int32_t)(blk / n_chunks / tiles_x / tiles_y);
    const int64_t rows = (int64_t)batch * seq_q, first = (int64_t)chunk * rows_per;
    const int64_t last = first + rows_per < rows ? first + rows_per : rows;
    float acc[4][4];
    int64_t r0;
    int i, c;
    (void)heads;
    for (i = 0; i < 4; ++i)
        for (c = 0; c < 4; ++c) acc[i][c] = 0.0f;
    for (r0 = first; r0 < last; r0 += TA_LAT_DW_SLAB) {
        for (i = tid; i < TA_LAT_DW_SLAB * TA_LAT_DW_TILE; i += 256) {
            const int rr = i / TA_LAT_DW_TILE, cc = i % TA_LAT_DW_TILE;
            const int64_t row = r0 + rr;
            const int32_t b = (int32_t)(row / seq_q), r = (int32_t)(row % seq_q);
            const int32_t xi = ti * TA_LAT_DW_TILE + cc, yc = tc * TA_LAT_DW_TILE + cc;
            sx[rr][cc] = row < last && xi < x_dim
                             ? ta_cuda_load<XT>(x.base, (size_t)(ta_lat_at(x.st, b, h, r) + xi))
                             : 0.0f;
            sy[rr][cc] = row < last && yc < y_dim
                             ? ta_cuda_load<YT>(y.base, (size_t)(ta_lat_at(y.st, b, h, r) + yc))
                             : 0.0f;
        }
        __syncthreads();
        for (int rr = 0; rr < TA_LAT_DW_SLAB; ++rr)
            for (i = 0; i < 4; ++i)
                for (c = 0; c < 4; ++c)
                    acc[i][c] = fmaf(sx[rr][4 * ty + i], sy[rr][4 * tx + c], acc[i][c]);
        __syncthreads();
    }
    for (i = 0; i < 4; ++i)
        for (c = 0; c < 4; ++c) {
            const int32_t xi = ti * TA_LAT_DW_TILE + 4 * ty + i;
            const int32_t yc = tc * TA_LAT_DW_TILE + 4 * tx + c;
            if (xi < x_dim && yc < y_dim)
                part[(((int64_t)h * n_chunks + chunk) * x_dim + xi) * y_dim + yc] = acc[i][c];
        }
}

__global__ void __launch_bounds__(TA_CUDA_THREADS)
    ta_lat_dw_sum_kernel(const float *part, float *dw, int64_t n, int32_t per_head,
                         int32_t n_chunks) {
    int64_t idx;
    for (idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t h = idx / per_head, e = idx % per_head;
        float acc = 0.0f;
        int32_t c;
        for (c = 0; c < n_chunks; ++c) acc += part[(h * n_chunks + c) * per_head + e];
        dw[idx] = acc;
    }
}

/* ---------------------------------------------------------------------------- */
/* host                                                                           */
/* ---------------------------------------------------------------------------- */

/* Blocks for n elements, one per thread, at most 65,536 (grid-stride beyond). */
int64_t ta_lat_blocks(int64_t n) {
    const int64_t b = (n + TA_CUDA_THREADS - 1) / TA_CUDA_THREADS;
    return b < 65536 ? b : 65536;
}

/* A kernel template instantiated per storage dtype: the one of dt. */
template <template <int> class K> const void *ta_lat_pick(ta_dtype dt) {
    return dt == TA_F16 ? K<TA_F16>::ptr() : dt == TA_BF16 ? K<TA_BF16>::ptr() : K<TA_F32>::ptr();
}
/* ta_lat_pick's table entry K<DT>::ptr() for the kernel template `kernel`. */
#define TA_LAT_PICKER(name, ...)                                                                   \
    template <int DT> struct name {                                                                \
        static const void *ptr() { return reinterpret_cast<const void *>(&__VA_ARGS__); }          \
    }
TA_LAT_PICKER(ta_lat_q_k, ta_lat_q_kernel<DT, TA_F32>);
TA_LAT_PICKER(ta_lat_q_fast_k, ta_lat_q_kernel<DT, DT>);
TA_LAT_PICKER(ta_lat_widen_k, ta_lat_widen_kernel<DT>);
TA_LAT_PICKER(ta_lat_round_k, ta_lat_round_kernel<DT>);
TA_LAT_PICKER(ta_lat_vup_k, ta_lat_vup_kernel<DT>);
TA_LAT_PICKER(ta_lat_dctx_k, ta_lat_dctx_kernel<DT>);
TA_LAT_PICKER(ta_lat_dq_k, ta_lat_dq_kernel<DT>);
/* dW_qlat: x = q (the storage type), y = dq~ (f32); dW_vup: x = ctx~ (f32), y = dO. */
TA_LAT_PICKER(ta_lat_dwq_k, ta_lat_dw_kernel<DT, TA_F32>);
TA_LAT_PICKER(ta_lat_dwv_k, ta_lat_dw_kernel<TA_F32, DT>);

ta_lat_tensor ta_lat_of(const void *base, ta_strides st) {
    ta_lat_tensor x;
    x.base = base;
    x.st = st;
    return x;
}

/* The widening copy of a [B, heads, S, dim] tensor under strides st into dst. */
ta_status ta_lat_widen(ta_dtype dt, const void *src, ta_strides st, float *dst, int32_t batch,
                       int32_t heads, int32_t seq, int32_t dim, void *stream) {
    ta_lat_tensor s = ta_lat_of(src, st);
    int64_t n = (int64_t)batch * heads * seq * dim;
    void *args[6] = {&s, &dst, &n, &heads, &seq, &dim};
    return ta_cuda_launch_args(ta_lat_pick<ta_lat_widen_k>(dt), ta_lat_blocks(n), 0, args, stream);
}

/* The rounding of a contiguous f32 [B, heads, S, dim] into dst (dtype, strides). */
ta_status ta_lat_round(ta_dtype dt, const float *src, void *dst, ta_strides st, int32_t batch,
                       int32_t heads, int32_t seq, int32_t dim, void *stream) {
    int64_t n = (int64_t)batch * heads * seq * dim;
    void *args[7] = {&src, &dst, &st, &n, &heads, &seq, &dim};
    return ta_cuda_launch_args(ta_lat_pick<ta_lat_round_k>(dt), ta_lat_blocks(n), 0, args, stream);
}

/*
 * The sub-plan the SDPA kernels run: f32, width L (head_dim = head_dim_v =
 * L), no projections, no history rows (their q~ are in lat_q, read by the
 * band's T only); the band's fields stay (the kernels' band step). q is
 * lat_q past its history rows; k, v, o, d_o, dq, dk, dv the f32 copies the
 * caller names (contiguous) or, for f32 tensors that need none, the call's
 * own under its strides.
 */
typedef struct ta_lat_sub_tensors {
    int k, v, o, d_o, dq, dk, dv; /* 1: a contiguous f32 copy, 0: the call's tensor */
} ta_lat_sub_tensors;

void ta_lat_sub_plan(const ta_plan *plan, const ta_lat_sub_tensors *cp, ta_plan *sub) {
    const ta_problem *pr = &plan->p;
    const int32_t lat = plan->dim_k, hist = pr->q_history;
    const ta_strides rows_q = ta_strides_contiguous(pr->heads_q, pr->seq_q, lat);
    const ta_strides rows_kv = ta_strides_contiguous(pr->heads_kv, pr->seq_k, lat);
    *sub = *plan;
    sub->p.dtype = TA_F32;
    sub->elem_bytes = sizeof(float);
    sub->p.latent_dim = 0;
    sub->p.head_dim = sub->p.head_dim_v = lat;
    sub->dim_k = sub->dim_v = lat;
    sub->n_q = sub->n_o = plan->n_lse * (size_t)lat;
    sub->n_wq = sub->n_wv = 0;
    sub->p.q_history = 0;
    ta_tiling_set_history(&sub->fwd, 0);
    sub->layout.q = ta_strides_contiguous(pr->heads_q, hist + pr->seq_q, lat);
    if (cp->k) sub->layout.k = rows_kv;
    if (cp->v) sub->layout.v = rows_kv;
    if (cp->o) sub->layout.o = rows_q;
    if (cp->d_o) sub->layout.d_o = rows_q;
    if (cp->dq) sub->layout.dq = rows_q;
    if (cp->dk) sub->layout.dk = rows_kv;
    if (cp->dv) sub->layout.dv = rows_kv;
}

/* Steps 1-3 of either pass: lat_q (n history rows first), k and v widened
 * (f16 / bf16), the band's T (needs the sub-plan's k). */
ta_status ta_lat_prepare(const ta_plan *plan, const ta_plan *sub, const void *q, const void *q_hist,
                         const float *w_qlat, const void *k, const void *v, float *lat_q,
                         float *lat_k, float *lat_v, float *lat_t, const void *sub_k,
                         void *stream) {
    const ta_problem *pr = &plan->p;
    ta_lat_tensor tq = ta_lat_of(q, plan->layout.q), th = ta_lat_of(q_hist, plan->layout.q_hist);
    int32_t heads = pr->heads_q, hist = pr->q_history, seq_q = pr->seq_q, dim = pr->head_dim;
    int32_t lat = plan->dim_k;
    int64_t n = (int64_t)pr->batch * heads * (hist + seq_q) * lat;
    ta_status st;
    {
        void *args[10] = {&tq, &th, &w_qlat, &lat_q, &n, &heads, &hist, &seq_q, &dim, &lat};
        if ((st = ta_cuda_launch_args(ta_lat_pick<ta_lat_q_k>(pr->dtype), ta_lat_blocks(n), 0, args,
                                      stream)) != TA_OK)
            return st;
    }
    if (pr->dtype != TA_F32) {
        if ((st = ta_lat_widen(pr->dtype, k, plan->layout.k, lat_k, pr->batch, pr->heads_kv,
                               pr->seq_k, lat, stream)) != TA_OK ||
            (st = ta_lat_widen(pr->dtype, v, plan->layout.v, lat_v, pr->batch, pr->heads_kv,
                               pr->seq_k, lat, stream)) != TA_OK)
            return st;
    }
    if (plan->stages.score == TA_SCORE_RBAND) {
        ta_lat_tensor tk = ta_lat_of(sub_k, sub->layout.k);
        int32_t group = plan->group, seq_k = pr->seq_k, w1 = ta_cuda_rband_w1(plan);
        float scale = pr->scale;
        int64_t nt = (int64_t)plan->n_lse * w1;
        void *args[12] = {&lat_q, &hist,  &tk,    &lat_t, &nt, &heads,
                          &group, &seq_q, &seq_k, &lat,   &w1, &scale};
        return ta_cuda_launch_args(reinterpret_cast<const void *>(&ta_lat_t_kernel),
                                   ta_lat_blocks(nt), 0, args, stream);
    }
    return TA_OK;
}

/* Backward 3: dl of the band entries, each row's d_alpha, the call's d_alpha. */
ta_status ta_lat_band_bwd(const ta_plan *plan, const ta_plan *sub, const ta_bwd_args *sa,
                          const ta_cuda_bwd_ws *ws, float *d_alpha, void *stream) {
    const ta_problem *pr = &plan->p;
    ta_lat_dl_args da;
    int64_t n_rows = (int64_t)plan->n_lse;
    int32_t seq = pr->seq_q, w1 = ta_cuda_rband_w1(plan);
    ta_status st;
    memset(&da, 0, sizeof da);
    da.lat_q = ws->lat_q;
    da.t = ws->lat_t;
    da.lse = sa->lse;
    da.delta = ws->delta;
    da.k = ta_lat_of(sa->k, sub->layout.k);
    da.v = ta_lat_of(sa->v, sub->layout.v);
    da.d_o = ta_lat_of(sa->d_o, sub->layout.d_o);
    da.dl = ws->lat_dl;
    da.n = n_rows * w1;
    da.heads = pr->heads_q;
    da.group = plan->group;
    da.seq = seq;
    da.lat = plan->dim_k;
    da.w1 = w1;
    da.scale = pr->scale;
    da.alpha = pr->rband_alpha;
    {
        void *args[1] = {&da};
        if ((st = ta_cuda_launch_args(reinterpret_cast<const void *>(&ta_lat_dl_kernel),
                                      ta_lat_blocks(da.n), 0, args, stream)) != TA_OK)
            return st;
    }
    {
        const float *dl = ws->lat_dl, *t = ws->lat_t, *lse = sa->lse;
        float *rows = ws->lat_da;
        void *args[7] = {&dl, &t, &lse, &rows, &n_rows, &seq, &w1};
        if ((st = ta_cuda_launch_args(reinterpret_cast<const void *>(&ta_lat_da_rows_kernel),
                                      ta_lat_blocks(n_rows), 0, args, stream)) != TA_OK)
            return st;
    }
    {
        const float *rows = ws->lat_da;
        void *args[3] = {&rows, &n_rows, &d_alpha};
        return ta_cuda_launch_threads(reinterpret_cast<const void *>(&ta_lat_da_sum_kernel), 1, 32,
                                      0, args, stream);
    }
}

/* Backward 5 with the projections: ctx~ recomputed, dq = W_qlat dq~, dW_qlat, dW_vup. */
ta_status ta_lat_proj_bwd(const ta_plan *plan, const ta_plan *sub, const ta_bwd_args *a,
                          const ta_bwd_args *sa, const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const ta_strides rows_l = ta_strides_contiguous(pr->heads_q, pr->seq_q, plan->dim_k);
    int32_t heads = pr->heads_q, seq_q = pr->seq_q, dim = pr->head_dim, lat = plan->dim_k;
    int32_t dv = pr->head_dim_v, batch = pr->batch;
    int64_t n = (int64_t)plan->n_lse * dim;
    ta_status st;
    if ((st = ta_cuda_sdpa_bwd_kernels(sub, sa, ws, ws->lat_ctx, stream)) != TA_OK) return st;
    {
        const float *dqt = ws->lat_dq, *w = a->w_qlat;
        void *dq = a->dq;
        ta_strides dq_st = plan->layout.dq;
        void *args[9] = {&dqt, &w, &dq, &dq_st, &n, &heads, &seq_q, &dim, &lat};
        if ((st = ta_cuda_launch_args(ta_lat_pick<ta_lat_dq_k>(pr->dtype), ta_lat_blocks(n), 0,
                                      args, stream)) != TA_OK)
            return st;
    }
    {
        ta_lat_tensor x = ta_lat_of(a->q, plan->layout.q), y = ta_lat_of(ws->lat_dq, rows_l);
        float *dw = a->dw_qlat;
        void *args[8] = {&x, &dim, &y, &lat, &dw, &batch, &heads, &seq_q};
        if ((st = ta_cuda_launch_args(ta_lat_pick<ta_lat_dwq_k>(pr->dtype),
                                      ta_lat_blocks((int64_t)heads * dim * lat), 0, args,
                                      stream)) != TA_OK)
            return st;
    }
    {
        ta_lat_tensor x = ta_lat_of(ws->lat_ctx, rows_l), y = ta_lat_of(a->d_o, plan->layout.d_o);
        float *dw = a->dw_vup;
        void *args[8] = {&x, &lat, &y, &dv, &dw, &batch, &heads, &seq_q};
        return ta_cuda_launch_args(ta_lat_pick<ta_lat_dwv_k>(pr->dtype),
                                   ta_lat_blocks((int64_t)heads * lat * dv), 0, args, stream);
    }
}

/* The device pointers of a latent call (TA_ERR_BAD_ARG unless the device
 * can read them): the tensors, the history rows, the weights, d_alpha. */
ta_status ta_lat_check_fwd_ptrs(const ta_plan *plan, const ta_fwd_args *a) {
    const int proj = plan->p.latent_dim > 0;
    const void *ptrs[8] = {a->q,    a->k,
                           a->v,    a->o,
                           a->lse,  plan->p.q_history > 0 ? a->q_hist : NULL,
                           proj ? a->w_qlat : NULL, proj ? a->w_vup : NULL};
    return ta_cuda_check_pointers(ptrs, 8);
}

ta_status ta_lat_check_bwd_ptrs(const ta_plan *plan, const ta_bwd_args *a,
                                const ta_cuda_bwd_ws *ws) {
    const int proj = plan->p.latent_dim > 0, band = plan->stages.score == TA_SCORE_RBAND;
    const void *ptrs[15] = {a->q,  a->k,  a->v,  a->o,  a->d_o, a->lse, a->dq, a->dk, a->dv,
                            ws->delta,
                            band ? a->d_alpha : NULL,
                            proj ? a->w_qlat : NULL,
                            proj ? a->w_vup : NULL,
                            proj ? a->dw_qlat : NULL,
                            proj ? a->dw_vup : NULL};
    return ta_cuda_check_pointers(ptrs, 15);
}

} /* namespace */

extern "C" ta_status ta_cuda_latent_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                        const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int proj = pr->latent_dim > 0, wide = pr->dtype != TA_F32;
    ta_lat_sub_tensors cp;
    ta_plan sub;
    ta_fwd_args sa;
    ta_status st;
    if ((st = ta_lat_check_fwd_ptrs(plan, a)) != TA_OK) return st;
    memset(&cp, 0, sizeof cp);
    cp.k = cp.v = wide;
    cp.o = proj || wide;
    ta_lat_sub_plan(plan, &cp, &sub);
    sa = *a;
    sa.q = ws->lat_q + (size_t)pr->q_history * (size_t)plan->dim_k;
    sa.q_hist = NULL;
    sa.k = wide ? ws->lat_k : a->k;
    sa.v = wide ? ws->lat_v : a->v;
    sa.o = cp.o ? static_cast<void *>(ws->lat_o) : a->o;
    sa.lse = proj && !a->lse ? ws->lat_lse : a->lse;
    sa.w_qlat = sa.w_vup = NULL;
    /* steps 1-3, then 4: the SDPA forward kernel */
    if ((st = ta_lat_prepare(plan, &sub, a->q, a->q_hist, proj ? a->w_qlat : NULL, a->k, a->v,
                             ws->lat_q, ws->lat_k, ws->lat_v, ws->lat_t, sa.k, stream)) != TA_OK ||
        (st = ta_cuda_sdpa_fwd(&sub, &sa, ws, stream)) != TA_OK)
        return st;
    /* step 5 */
    if (proj) {
        const float *ctx = ws->lat_o, *lse = sa.lse, *w = a->w_vup;
        void *o = a->o;
        ta_strides o_st = plan->layout.o;
        int64_t n = (int64_t)plan->n_o;
        int32_t heads = pr->heads_q, seq_q = pr->seq_q, lat = plan->dim_k, dv = pr->head_dim_v;
        void *args[10] = {&ctx, &lse, &w, &o, &o_st, &n, &heads, &seq_q, &lat, &dv};
        return ta_cuda_launch_args(ta_lat_pick<ta_lat_vup_k>(pr->dtype), ta_lat_blocks(n), 0, args,
                                   stream);
    }
    if (wide)
        return ta_lat_round(pr->dtype, ws->lat_o, a->o, plan->layout.o, pr->batch, pr->heads_q,
                            pr->seq_q, plan->dim_v, stream);
    return TA_OK;
}

extern "C" ta_status ta_cuda_latent_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                        const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int proj = pr->latent_dim > 0, wide = pr->dtype != TA_F32;
    const int band = plan->stages.score == TA_SCORE_RBAND;
    ta_lat_sub_tensors cp;
    ta_plan sub;
    ta_bwd_args sa;
    ta_status st;
    if ((st = ta_lat_check_bwd_ptrs(plan, a, ws)) != TA_OK) return st;
    memset(&cp, 0, sizeof cp);
    cp.k = cp.v = cp.dk = cp.dv = wide;
    cp.d_o = cp.dq = proj || wide;
    ta_lat_sub_plan(plan, &cp, &sub);
    sa = *a;
    sa.q = ws->lat_q;
    sa.k = wide ? ws->lat_k : a->k;
    sa.v = wide ? ws->lat_v : a->v;
    sa.d_o = cp.d_o ? ws->lat_do : a->d_o;
    sa.dq = cp.dq ? static_cast<void *>(ws->lat_dq) : a->dq;
    sa.dk = wide ? static_cast<void *>(ws->lat_dk) : a->dk;
    sa.dv = wide ? static_cast<void *>(ws->lat_dv) : a->dv;
    sa.w_qlat = sa.w_vup = NULL;
    sa.dw_qlat = sa.dw_vup = NULL;
    /* 1. delta from the call's o and dO (D_v wide); 2. the f32 operands */
    if ((st = ta_cuda_bwd_delta(plan, a, ws->delta, stream)) != TA_OK ||
        (st = ta_lat_prepare(plan, &sub, a->q, NULL, proj ? a->w_qlat : NULL, a->k, a->v, ws->lat_q,
                             ws->lat_k, ws->lat_v, ws->lat_t, sa.k, stream)) != TA_OK)
        return st;
    if (proj) {
        ta_lat_tensor d_o = ta_lat_of(a->d_o, plan->layout.d_o);
        const float *w = a->w_vup;
        float *dst = ws->lat_do;
        int64_t n = (int64_t)plan->n_lse * plan->dim_k;
        int32_t heads = pr->heads_q, seq_q = pr->seq_q, lat = plan->dim_k, dv = pr->head_dim_v;
        void *args[8] = {&d_o, &w, &dst, &n, &heads, &seq_q, &lat, &dv};
        if ((st = ta_cuda_launch_args(ta_lat_pick<ta_lat_dctx_k>(pr->dtype), ta_lat_blocks(n), 0,
                                      args, stream)) != TA_OK)
            return st;
    } else if (wide &&
               (st = ta_lat_widen(pr->dtype, a->d_o, plan->layout.d_o, ws->lat_do, pr->batch,
                                  pr->heads_q, pr->seq_q, plan->dim_v, stream)) != TA_OK) {
        return st;
    }
    /* 3. the band's dl and d_alpha; 4. the SDPA kernels */
    if (band && (st = ta_lat_band_bwd(plan, &sub, &sa, ws, a->d_alpha, stream)) != TA_OK) return st;
    if ((st = ta_cuda_sdpa_bwd_kernels(&sub, &sa, ws, NULL, stream)) != TA_OK) return st;
    /* 5. the projections; 6. the roundings */
    if (proj && (st = ta_lat_proj_bwd(plan, &sub, a, &sa, ws, stream)) != TA_OK) return st;
    if (wide && !proj &&
        (st = ta_lat_round(pr->dtype, ws->lat_dq, a->dq, plan->layout.dq, pr->batch, pr->heads_q,
                           pr->seq_q, plan->dim_k, stream)) != TA_OK)
        return st;
    if (wide && ((st = ta_lat_round(pr->dtype, ws->lat_dk, a->dk, plan->layout.dk, pr->batch,
                                    pr->heads_kv, pr->seq_k, plan->dim_k, stream)) != TA_OK ||
                 (st = ta_lat_round(pr->dtype, ws->lat_dv, a->dv, plan->layout.dv, pr->batch,
                                    pr->heads_kv, pr->seq_k, plan->dim_v, stream)) != TA_OK))
        return st;
    return TA_OK;
}

/* ---------------------------------------------------------------------------- */
/* fast mode (docs/cuda.md, "Latent attention in fast mode")                      */
/* ---------------------------------------------------------------------------- */

extern "C" ta_status ta_cuda_fast_lat_main_plan(const ta_plan *plan, ta_plan *sub) {
    const ta_problem *pr = &plan->p;
    const int32_t lat = plan->dim_k;
    ta_problem sp = *pr; /* the defaults filled in: scale 1/sqrt(L), the blocks */
    ta_diag d;
    ta_status st;
    if (plan->stages.score == TA_SCORE_RBAND) sp.seq_k = pr->seq_k - pr->rband_width - 1;
    if (sp.seq_k < 1) return TA_ERR_UNSUPPORTED;
    sp.flags &= ~(uint32_t)TA_RBAND;
    sp.rband_alpha = 0.0f;
    sp.rband_width = 0;
    sp.latent_dim = 0;
    sp.head_dim = sp.head_dim_v = lat;
    sp.q_history = 0;
    memset(&d, 0, sizeof d);
    if ((st = ta_plan_make(&sp, TA_BACKEND_CUDA, sub, &d)) != TA_OK) return st;
    sub->layout.k = plan->layout.k;
    sub->layout.v = plan->layout.v;
    sub->layout.q = ta_strides_contiguous(pr->heads_q, pr->q_history + pr->seq_q, lat);
    sub->layout.dk = sub->layout.dv = ta_strides_contiguous(pr->heads_kv, pr->seq_k, lat);
    return TA_OK;
}

namespace {

/* The latent queries the fast kernels read: the call's q (no projections, no
 * history rows, rows on 16 bytes) or fl_q [B, H, n + S_q, L] in the storage
 * type (q~ = W_qlat^T q in f32 rounded once, or q copied), n history rows
 * first. */
typedef struct ta_fl_queries {
    const void *q;
    ta_strides st;
    int32_t hist;
} ta_fl_queries;

/* One projection product of the fast path (ta_cuda_fast_proj). */
ta_status ta_fl_proj(const ta_plan *plan, const void *a, ta_dtype a_dt, ta_strides a_st,
                     int32_t rows, const float *w, int bt, int32_t k_dim, int32_t n_dim, void *c,
                     ta_strides c_st, int64_t c_off, void *stream) {
    ta_cuda_fast_proj_args x;
    memset(&x, 0, sizeof x);
    x.a = a, x.a_dt = a_dt, x.a_st = a_st, x.w = w, x.bt = bt;
    x.c = c, x.c_dt = plan->p.dtype, x.c_st = c_st, x.c_off = c_off;
    x.batch = plan->p.batch, x.heads = plan->p.heads_q, x.rows = rows;
    x.k_dim = k_dim, x.n_dim = n_dim;
    return ta_cuda_fast_proj(&x, stream);
}

ta_status ta_fl_make_queries(const ta_plan *plan, const void *q, const void *q_hist,
                             const float *w, int32_t hist, void *fl_q, ta_fl_queries *out,
                             void *stream) {
    const ta_problem *pr = &plan->p;
    const int32_t lat = plan->dim_k, rows = hist + pr->seq_q;
    const ta_strides st = ta_strides_contiguous(pr->heads_q, rows, lat);
    ta_status st_;
    out->q = fl_q;
    out->st = st;
    out->hist = hist;
    if (w) { /* q~ = W_qlat^T q: the history rows, then the call's */
        if (hist > 0 && (st_ = ta_fl_proj(plan, q_hist, pr->dtype, plan->layout.q_hist, hist, w,
                                          0, pr->head_dim, lat, fl_q, st, 0, stream)) != TA_OK)
            return st_;
        return ta_fl_proj(plan, q, pr->dtype, plan->layout.q, pr->seq_q, w, 0, pr->head_dim, lat,
                          fl_q, st, (int64_t)hist * lat, stream);
    }
    if (hist == 0 && ta_cuda_fast_rows_aligned(pr, q, &plan->layout.q, 0)) {
        out->q = q; /* read in place */
        out->st = plan->layout.q;
        return TA_OK;
    }
    {
        ta_lat_tensor tq = ta_lat_of(q, plan->layout.q), th = ta_lat_of(q_hist, plan->layout.q_hist);
        const float *none = NULL;
        int32_t heads = pr->heads_q, seq_q = pr->seq_q, dim = pr->head_dim, lt = lat, hh = hist;
        int64_t n = (int64_t)pr->batch * heads * rows * lat;
        void *args[10] = {&tq, &th, &none, &fl_q, &n, &heads, &hh, &seq_q, &dim, &lt};
        return ta_cuda_launch_args(ta_lat_pick<ta_lat_q_fast_k>(pr->dtype), ta_lat_blocks(n), 0,
                                   args, stream);
    }
}

/* The forward's attention over the latent queries: the fast SDPA on the
 * keys below the band (into o_main, lse_main), then the band kernel merging
 * its keys in (into o / ctx, lse); without the band the fast SDPA alone,
 * into o_main (contiguous) and lse. */
typedef struct ta_fl_attn {
    ta_fl_queries q;
    void *o_main;
    float *lse_main;
    void *o; /* band: the storage-type output (o_st) or NULL */
    ta_strides o_st;
    float *ctx, *lse; /* band: f32 ctx~ or NULL; the final lse */
} ta_fl_attn;

/* The plan of the keys below the band (ta_cuda_fast_lat_main_plan) into
 * *sub, *main_plan = sub; or *main_plan = NULL when no key lies below it. */
ta_status ta_fl_main_plan(const ta_plan *plan, ta_plan *sub, const ta_plan **main_plan) {
    const ta_status st = ta_cuda_fast_lat_main_plan(plan, sub);
    *main_plan = st == TA_OK ? sub : NULL;
    return st == TA_ERR_UNSUPPORTED ? TA_OK : st;
}

ta_status ta_fl_attention(const ta_plan *plan, const ta_plan *main_plan, const ta_fwd_args *a,
                          const ta_fl_attn *x, void *stream) {
    const int band = plan->stages.score == TA_SCORE_RBAND;
    ta_fwd_args sa;
    ta_cuda_fwd_ws sws;
    ta_status st;
    if (!main_plan && !band) return TA_ERR_UNSUPPORTED; /* every key is a main key */
    if (main_plan) {
        ta_plan sub = *main_plan;
        memset(&sws, 0, sizeof sws);
        sub.layout.q = x->q.st;
        sa = *a;
        sa.q = static_cast<const char *>(x->q.q) +
               (size_t)x->q.hist * (size_t)x->q.st.seq * plan->elem_bytes;
        sa.q_hist = NULL;
        sa.o = x->o_main;
        sa.lse = band ? x->lse_main : x->lse;
        sa.w_qlat = sa.w_vup = NULL;
        if ((st = ta_cuda_fast_fwd(&sub, &sa, &sws, stream)) != TA_OK) return st;
    }
    if (band) {
        ta_cuda_fast_band_fwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.q = x->q.q;
        ba.q_st = x->q.st;
        ba.hist = x->q.hist;
        ba.k = a->k;
        ba.v = a->v;
        ba.o_main = main_plan ? x->o_main : NULL;
        ba.lse_main = x->lse_main;
        ba.o = x->o;
        ba.o_st = x->o_st;
        ba.ctx = x->ctx;
        ba.lse = x->lse;
        return ta_cuda_fast_band_fwd(plan, &ba, stream);
    }
    return TA_OK;
}

/* o = W_vup^T ctx~ (ctx f32 with the band, else the storage type; contiguous). */
ta_status ta_fl_vup(const ta_plan *plan, const void *ctx, int ctx_f32, const float *w, void *o,
                    void *stream) {
    const ta_problem *pr = &plan->p;
    return ta_fl_proj(plan, ctx, ctx_f32 ? TA_F32 : pr->dtype,
                      ta_strides_contiguous(pr->heads_q, pr->seq_q, plan->dim_k), pr->seq_q, w, 0,
                      plan->dim_k, pr->head_dim_v, o, plan->layout.o, 0, stream);
}

/* 1 if the fast path can read k and v (and, given, dO) rows by 16 bytes. */
int ta_fl_aligned(const ta_plan *plan, const void *k, const void *v, const void *d_o) {
    const ta_problem *pr = &plan->p;
    return ta_cuda_fast_rows_aligned(pr, k, &plan->layout.k, 1) &&
           ta_cuda_fast_rows_aligned(pr, v, &plan->layout.v, 1) &&
           (!d_o || ta_cuda_fast_rows_aligned(pr, d_o, &plan->layout.d_o, 0));
}

/* A projection's weight gradient (fast mode): the tiled partials, then the
 * ordered sum of the chunks. x: [B, H, S_q, x_dim] of type xt, y likewise. */
ta_status ta_fl_dw(const ta_plan *plan, ta_dtype xt, ta_lat_tensor x, int32_t x_dim, ta_dtype yt,
                   ta_lat_tensor y, int32_t y_dim, float *part, float *dw, void *stream) {
    const ta_problem *pr = &plan->p;
    int32_t rows_per = 0, n_chunks = ta_cuda_lat_dw_chunks(plan, &rows_per);
    int32_t batch = pr->batch, heads = pr->heads_q, seq_q = pr->seq_q;
    const int64_t tiles = (int64_t)((x_dim + TA_LAT_DW_TILE - 1) / TA_LAT_DW_TILE) *
                          ((y_dim + TA_LAT_DW_TILE - 1) / TA_LAT_DW_TILE);
    const int bf = pr->dtype == TA_BF16;
    const void *k;
    ta_status st;
    if (xt == TA_F32)
        k = bf ? reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_F32, TA_BF16>)
               : reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_F32, TA_F16>);
    else if (yt == TA_F32)
        k = bf ? reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_BF16, TA_F32>)
               : reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_F16, TA_F32>);
    else
        k = bf ? reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_BF16, TA_BF16>)
               : reinterpret_cast<const void *>(&ta_lat_dw_part_kernel<TA_F16, TA_F16>);
    {
        void *args[10] = {&x, &x_dim, &y, &y_dim, &part, &batch, &heads, &seq_q, &rows_per,
                          &n_chunks};
        if ((st = ta_cuda_launch_threads(k, (int64_t)heads * tiles * n_chunks, 256, 0, args,
                                         stream)) != TA_OK)
            return st;
    }
    {
        int64_t n = (int64_t)heads * x_dim * y_dim;
        int32_t per_head = x_dim * y_dim;
        void *args[5] = {&part, &dw, &n, &per_head, &n_chunks};
        return ta_cuda_launch_args(reinterpret_cast<const void *>(&ta_lat_dw_sum_kernel),
                                   ta_lat_blocks(n), 0, args, stream);
    }
}

} /* namespace */

extern "C" ta_status ta_cuda_fast_latent_fwd(const ta_plan *plan, const ta_fwd_args *a,
                                             const ta_cuda_fwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int proj = pr->latent_dim > 0, band = plan->stages.score == TA_SCORE_RBAND;
    ta_fl_attn x;
    ta_plan sub;
    const ta_plan *main_plan;
    ta_status st;
    if ((st = ta_lat_check_fwd_ptrs(plan, a)) != TA_OK) return st;
    /* rows cp.async cannot read, a band kernel the device has no room for:
     * the exact kernels (bit-identical to REF) */
    if (!ta_fl_aligned(plan, a->k, a->v, NULL)) return ta_cuda_latent_fwd(plan, a, ws, stream);
    if (band && (st = ta_cuda_fast_band_prepare(plan, 0)) != TA_OK)
        return st == TA_ERR_UNSUPPORTED ? ta_cuda_latent_fwd(plan, a, ws, stream) : st;
    memset(&x, 0, sizeof x);
    x.o_main = ws->fl_o;
    x.lse_main = ws->fl_lse;
    x.o = proj ? NULL : a->o;
    x.o_st = plan->layout.o;
    x.ctx = proj ? ws->fl_ctx : NULL;
    x.lse = a->lse ? a->lse : ws->fl_lse;
    /* 1. the latent queries; 2. the attention; 3. o = W_vup^T ctx~ */
    if ((st = ta_fl_main_plan(plan, &sub, &main_plan)) != TA_OK ||
        (st = ta_fl_make_queries(plan, a->q, a->q_hist, proj ? a->w_qlat : NULL, pr->q_history,
                                 ws->fl_q, &x.q, stream)) != TA_OK ||
        (st = ta_fl_attention(plan, main_plan, a, &x, stream)) != TA_OK)
        return st;
    if (!proj) return TA_OK;
    return ta_fl_vup(plan, band ? static_cast<const void *>(ws->fl_ctx) : ws->fl_o, band,
                     a->w_vup, a->o, stream);
}

/* The backward's sums of the band's partials (and the main part's shares)
 * into dq~ (f32 fl_dqf with the projections, else the call's dq), dk, dv. */
ta_status ta_fl_band_sums(const ta_plan *plan, const ta_bwd_args *a, const ta_cuda_bwd_ws *ws,
                          int32_t main_keys, void *stream) {
    const int proj = plan->p.latent_dim > 0;
    ta_cuda_fast_band_sum_args su;
    ta_status st;
    memset(&su, 0, sizeof su);
    su.main = main_keys > 0 ? ws->fl_dq : NULL;
    su.main_rows = plan->p.seq_q;
    su.part = ws->fl_pdq;
    su.out = proj ? static_cast<void *>(ws->fl_dqf) : a->dq;
    su.out_st = plan->layout.dq;
    su.which = 0;
    su.out_f32 = proj;
    if ((st = ta_cuda_fast_band_sum(plan, &su, stream)) != TA_OK) return st;
    su.main = main_keys > 0 ? ws->fl_dk : NULL;
    su.main_rows = main_keys;
    su.part = ws->fl_pdk;
    su.out = a->dk;
    su.out_st = plan->layout.dk;
    su.which = 1;
    su.out_f32 = 0;
    if ((st = ta_cuda_fast_band_sum(plan, &su, stream)) != TA_OK) return st;
    su.main = main_keys > 0 ? ws->fl_dv : NULL;
    su.part = ws->fl_pdv;
    su.out = a->dv;
    su.out_st = plan->layout.dv;
    su.which = 2;
    return ta_cuda_fast_band_sum(plan, &su, stream);
}

extern "C" ta_status ta_cuda_fast_latent_bwd(const ta_plan *plan, const ta_bwd_args *a,
                                             const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan->p;
    const int proj = pr->latent_dim > 0, band = plan->stages.score == TA_SCORE_RBAND;
    const int32_t seq = pr->seq_q, lat = plan->dim_k;
    const ta_strides rows_l = ta_strides_contiguous(pr->heads_q, seq, lat);
    ta_plan sub;
    ta_bwd_args sa;
    ta_cuda_bwd_ws sws;
    ta_fl_queries fq;
    const ta_plan *main_plan;
    const void *d_o = proj ? ws->fl_do : a->d_o;
    const ta_strides d_o_st = proj ? rows_l : plan->layout.d_o;
    int32_t main_keys = 0;
    ta_status st;
    if ((st = ta_lat_check_bwd_ptrs(plan, a, ws)) != TA_OK) return st;
    if (!ta_fl_aligned(plan, a->k, a->v, proj ? NULL : a->d_o) ||
        (!proj && !ta_cuda_fast_rows_aligned(pr, a->o, &plan->layout.o, 0)) ||
        (!band && (!ta_cuda_fast_rows_aligned(pr, a->dk, &plan->layout.dk, 1) ||
                   !ta_cuda_fast_rows_aligned(pr, a->dv, &plan->layout.dv, 1))))
        return ta_cuda_latent_bwd(plan, a, ws, stream);
    if (band && ((st = ta_cuda_fast_band_prepare(plan, 0)) != TA_OK ||
                 (st = ta_cuda_fast_band_prepare(plan, 1)) != TA_OK))
        return st == TA_ERR_UNSUPPORTED ? ta_cuda_latent_bwd(plan, a, ws, stream) : st;
    /* 1. the latent queries; dctx~ = W_vup dO (projections) */
    if ((st = ta_fl_main_plan(plan, &sub, &main_plan)) != TA_OK ||
        (st = ta_fl_make_queries(plan, a->q, NULL, proj ? a->w_qlat : NULL, 0, ws->fl_q, &fq,
                                 stream)) != TA_OK)
        return st;
    if (main_plan) main_keys = main_plan->p.seq_k;
    if (proj) {
        ta_fl_attn x;
        ta_fwd_args fa;
        if ((st = ta_fl_proj(plan, a->d_o, pr->dtype, plan->layout.d_o, seq, a->w_vup, 1,
                             pr->head_dim_v, lat, ws->fl_do, rows_l, 0, stream)) != TA_OK)
            return st;
        /* 2. ctx~ recomputed (the forward's attention): f32 for dW_vup and
         * the storage type for the backward's delta */
        memset(&fa, 0, sizeof fa);
        fa.k = a->k;
        fa.v = a->v;
        fa.k_strides = a->k_strides;
        fa.v_strides = a->v_strides;
        fa.seqlens_k = a->seqlens_k;
        memset(&x, 0, sizeof x);
        x.q = fq;
        x.o_main = band ? ws->fl_o : ws->fl_ctxs;
        x.lse_main = ws->fl_lse;
        x.o = ws->fl_ctxs;
        x.o_st = rows_l;
        x.ctx = ws->fl_ctx;
        x.lse = ws->fl_lse;
        if ((st = ta_fl_attention(plan, main_plan, &fa, &x, stream)) != TA_OK) return st;
    }
    /* 3. the keys below the band: the fast SDPA backward with the final lse */
    memset(&sws, 0, sizeof sws);
    sws.delta = ws->delta;
    sws.mqa_dk = ws->mqa_dk; /* one kv head: the dk/dv kernel per query head */
    sws.mqa_dv = ws->mqa_dv;
    sa = *a;
    sa.q = fq.q;
    sa.o = proj ? ws->fl_ctxs : a->o;
    sa.d_o = d_o;
    sa.dq = band || proj ? ws->fl_dq : a->dq;
    sa.dk = band ? ws->fl_dk : a->dk;
    sa.dv = band ? ws->fl_dv : a->dv;
    sa.w_qlat = sa.w_vup = NULL;
    sa.dw_qlat = sa.dw_vup = NULL;
    if (main_keys > 0) {
        sub.layout.q = fq.st;
        sub.layout.o = proj ? rows_l : plan->layout.o;
        sub.layout.d_o = d_o_st;
        if (!band) {
            sub.layout.dk = plan->layout.dk;
            sub.layout.dv = plan->layout.dv;
        }
        if ((st = ta_cuda_fast_bwd(&sub, &sa, &sws, stream)) != TA_OK) return st;
    } else {
        ta_plan dp = *plan; /* delta alone: <dO~_i, ctx~_i> over L */
        dp.p.head_dim_v = lat;
        dp.layout.o = proj ? rows_l : plan->layout.o;
        dp.layout.d_o = d_o_st;
        if ((st = ta_cuda_fast_delta(&dp, &sa, ws->delta, stream)) != TA_OK) return st;
    }
    /* 4. the band's shares and d_alpha; 5. the sums into dq~ (or dq), dk, dv */
    if (band) {
        ta_cuda_fast_band_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.q = fq.q;
        ba.q_st = fq.st;
        ba.k = a->k;
        ba.v = a->v;
        ba.d_o = d_o;
        ba.d_o_st = d_o_st;
        ba.lse = a->lse;
        ba.delta = ws->delta;
        ba.part_dq = ws->fl_pdq;
        ba.part_dk = ws->fl_pdk;
        ba.part_dv = ws->fl_pdv;
        ba.da_rows = ws->fl_da;
        ba.d_alpha = a->d_alpha;
        if ((st = ta_cuda_fast_band_bwd(plan, &ba, stream)) != TA_OK ||
            (st = ta_fl_band_sums(plan, a, ws, main_keys, stream)) != TA_OK)
            return st;
    }
    if (!proj) return TA_OK;
    /* 6. dq = W_qlat dq~, dW_qlat = sum q dq~^T, dW_vup = sum ctx~ dO^T */
    {
        const void *dqt = band ? static_cast<const void *>(ws->fl_dqf) : ws->fl_dq;
        const ta_dtype dqt_dt = band ? TA_F32 : pr->dtype;
        if ((st = ta_fl_proj(plan, dqt, dqt_dt, rows_l, seq, a->w_qlat, 1, lat, pr->head_dim,
                             a->dq, plan->layout.dq, 0, stream)) != TA_OK ||
            (st = ta_fl_dw(plan, pr->dtype, ta_lat_of(a->q, plan->layout.q), pr->head_dim, dqt_dt,
                           ta_lat_of(dqt, rows_l), lat, ws->fl_dw, a->dw_qlat, stream)) != TA_OK)
            return st;
    }
    return ta_fl_dw(plan, band ? TA_F32 : pr->dtype,
                    ta_lat_of(band ? static_cast<const void *>(ws->fl_ctx) : ws->fl_ctxs, rows_l),
                    lat, pr->dtype, ta_lat_of(a->d_o, plan->layout.d_o), pr->head_dim_v, ws->fl_dw,
                    a->dw_vup, stream);
}
