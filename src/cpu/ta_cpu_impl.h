/*
 * The CPU backend's tiled SDPA, forward and backward, written once over a
 * small vector layer and included by ta_cpu_scalar.c (1 lane), ta_cpu_avx2.c
 * (8 lanes) and ta_cpu_avx512.c (16 lanes). docs/cpu.md explains the design;
 * docs/reference.md fixes the arithmetic, which this file reproduces bit for
 * bit: every lane runs over an independent output and performs the scalar
 * reference's operation sequence (fmaf over the reduction index ascending,
 * one accumulator), so the lane count never changes a bit.
 *
 * The including file defines, before including this one:
 *   TA_VW             lanes per vector (1, 8, 16)
 *   TA_RB, TA_NV      register block: TA_RB rows (or keys) x TA_NV vectors
 *   TA_CPU_KERNELS    the name of the task table (ta_cpu_kernels_avx2, ...)
 *   ta_v, ta_m        vector and mask types
 *   TA_VFN            function attributes for the vector layer
 *   v_zero v_set1 v_load v_store v_bcast v_fma v_mul v_add v_sub v_div
 *   v_max(a, b)       a > b ? a : b (the reference's max update)
 *   m_lt m_gt m_ne    ordered <, >, and C's != (true on NaN)
 *   v_sel(m, a, b)    m ? a : b, lane-wise
 *   v_exp v_log       lane-wise ta_exp / ta_log (bit-identical)
 *   v_i32f(p)         TA_VW int32 at p, converted to float (exact: |n| <= 256)
 *   v_f16 v_bf16      TA_VW halves at p, widened exactly (ta_f16_to_f32, ...)
 *   TA_ISA_NAME       "scalar", "avx2", "avx512"
 *
 * Three micro-kernels do the arithmetic (each with TA_RB x TA_NV accumulators
 * held in registers):
 *   k1  dot tile   out[r][c] = sum_d R[r][d] * T[d][c]   lanes over c (T held transposed)
 *   k2  row acc    out[i][f] = out[i][f] (* alpha_i) + sum_{j < n_i} C[j][i] X[j][f]   lanes over f
 *   k3  col acc    out[j][f] += sum_{i : j < n_i} C[i][j] Y[i][f]                      lanes over f
 * Every visible set is a prefix of the tile's keys for each row (key_len and
 * the causal diagonal both cut from the right), so "live" is one count n_i per
 * row and masked entries are skipped, never multiplied by zero.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ta_cpu.h"
#include "ta_internal.h"
#include "ta_math.h"

#define TA_KFN     static inline __attribute__((always_inline))
#define TA_UNROLL  _Pragma("GCC unroll 16")
#define TA_NVEC(n) (((n) + TA_VW - 1) / TA_VW)

/* ---------------------------------------------------------------------- */
/* Tile loading                                                            */
/* ---------------------------------------------------------------------- */

/* Element idx of a dtype buffer, widened (ta_load, inlined). */
static inline float cpu_elem(const void *src, ta_dtype dt, size_t idx) {
    switch (dt) {
    case TA_F16: return ta_f16_to_f32(((const uint16_t *)src)[idx]);
    case TA_BF16: return ta_bf16_to_f32(((const uint16_t *)src)[idx]);
    case TA_F32: break;
    }
    return ((const float *)src)[idx];
}

/* dst[0, n) = src[first, first + n) widened; dst[n, n_pad) = 0. */
static void cpu_widen_row(float *dst, const void *src, ta_dtype dt, size_t first, int32_t n,
                          size_t n_pad) {
    int32_t x = 0;
    size_t z;
    switch (dt) {
    case TA_F32: {
        const float *s = (const float *)src + first;
        for (; x + TA_VW <= n; x += TA_VW)
            v_store(dst + x, v_load(s + x));
        for (; x < n; ++x)
            dst[x] = s[x];
        break;
    }
    case TA_F16: {
        const uint16_t *s = (const uint16_t *)src + first;
        for (; x + TA_VW <= n; x += TA_VW)
            v_store(dst + x, v_f16(s + x));
        for (; x < n; ++x)
            dst[x] = ta_f16_to_f32(s[x]);
        break;
    }
    case TA_BF16: {
        const uint16_t *s = (const uint16_t *)src + first;
        for (; x + TA_VW <= n; x += TA_VW)
            v_store(dst + x, v_bf16(s + x));
        for (; x < n; ++x)
            dst[x] = ta_bf16_to_f32(s[x]);
        break;
    }
    }
    for (z = (size_t)n; z < n_pad; ++z)
        dst[z] = 0.0f;
}

/*
 * Rows [row0, row0 + rows) of a [*, dim] tensor as f32 rows. f32 rows are used
 * in place when the reader needs no padding (broadcast reads d < dim only) or
 * dim is a multiple of TA_CPU_PAD; otherwise they are widened into buf with
 * stride ld_buf, zero padded (vector reads over the padded dim see zeros).
 */
static const float *cpu_rows_view(float *buf, size_t ld_buf, const void *src, ta_dtype dt,
                                  size_t row0, int32_t rows, int32_t dim, int need_pad,
                                  size_t *ld) {
    int32_t r;
    if (dt == TA_F32 && (!need_pad || dim % TA_CPU_PAD == 0)) {
        *ld = (size_t)dim;
        return (const float *)src + row0 * (size_t)dim;
    }
    for (r = 0; r < rows; ++r)
        cpu_widen_row(buf + (size_t)r * ld_buf, src, dt, (row0 + (size_t)r) * (size_t)dim, dim,
                      ld_buf);
    *ld = ld_buf;
    return buf;
}

/* dst[d][i] = src row (row0 + i), feature d, widened: a tile held transposed
 * ([dim, ld]), lanes [rows, ld) zero. Once per tile that stays resident. */
static void cpu_load_t(float *dst, size_t ld, const void *src, ta_dtype dt, size_t row0,
                       int32_t rows, int32_t dim) {
    int32_t i, d;
    size_t z;
    for (d = 0; d < dim; ++d)
        for (z = (size_t)rows; z < ld; ++z)
            dst[(size_t)d * ld + z] = 0.0f;
    for (i = 0; i < rows; ++i) {
        const size_t first = (row0 + (size_t)i) * (size_t)dim;
        for (d = 0; d < dim; ++d)
            dst[(size_t)d * ld + (size_t)i] = cpu_elem(src, dt, first + (size_t)d);
    }
}

/* dst[first, first + n) = src[0, n) rounded once to the storage dtype. */
static void cpu_store_row(void *dst, ta_dtype dt, size_t first, const float *src, int32_t n) {
    int32_t x = 0;
    switch (dt) {
    case TA_F32: {
        float *o = (float *)dst + first;
        for (; x + TA_VW <= n; x += TA_VW)
            v_store(o + x, v_load(src + x));
        for (; x < n; ++x)
            o[x] = src[x];
        break;
    }
    case TA_F16:
        for (; x < n; ++x)
            ((uint16_t *)dst)[first + (size_t)x] = ta_f32_to_f16(src[x]);
        break;
    case TA_BF16:
        for (; x < n; ++x)
            ((uint16_t *)dst)[first + (size_t)x] = ta_f32_to_bf16(src[x]);
        break;
    }
}

/* Keys of the tile [col0, col0 + cols) that row r sees: a prefix, of this
 * length (ta_tiling_visible: j < key_len, and j <= r + diag_offset if causal). */
static inline int32_t cpu_visible_count(const ta_tiling *t, int32_t r, int32_t col0, int32_t cols,
                                        int32_t key_len) {
    int32_t last = key_len - 1, n;
    if (t->causal && r + t->diag_offset < last) last = r + t->diag_offset;
    n = last + 1 - col0;
    return n < 0 ? 0 : (n > cols ? cols : n);
}

/* nvis[i] for the tile's rows (0 where lse[i] = -inf if lse is given: that
 * row saw no key in the forward and is not live), 0 for the pad lanes up to
 * ld; returns the largest count. */
static int32_t cpu_fill_nvis(int32_t *nvis, size_t ld, const ta_tiling *t, int32_t row0,
                             int32_t rows, int32_t col0, int32_t cols, int32_t key_len,
                             const float *lse) {
    int32_t i, n_max = 0;
    size_t z;
    for (i = 0; i < rows; ++i) {
        int32_t n = cpu_visible_count(t, row0 + i, col0, cols, key_len);
        if (lse && lse[i] == -INFINITY) n = 0;
        nvis[i] = n;
        if (n > n_max) n_max = n;
    }
    for (z = (size_t)rows; z < ld; ++z)
        nvis[z] = 0;
    return n_max;
}

/* ---------------------------------------------------------------------- */
/* k1: dot tile, lanes over the transposed operand                         */
/* ---------------------------------------------------------------------- */

/* out[r][c] = (scale *) dot(R[r][0..dim), T[0..dim)[c]) for rb rows, nv vectors
 * of c: per lane acc = fmaf(R[r][d], T[d][c], acc) from +0, d ascending (the
 * reference's ta_ref_dot; fmaf's product is exact, so operand order is free),
 * then one multiply by scale. */
TA_KFN void cpu_k1_block(const int rb, const int nv, const float *T, size_t ldt, const float *R,
                         size_t ldr, int32_t dim, float scale, int scaled, float *out, size_t ldo) {
    ta_v acc[TA_RB][TA_NV];
    int r, k;
    int32_t d;
    TA_UNROLL
    for (r = 0; r < rb; ++r) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            acc[r][k] = v_zero();
        }
    }
    for (d = 0; d < dim; ++d) {
        const float *t_row = T + (size_t)d * ldt;
        ta_v tv[TA_NV];
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            tv[k] = v_load(t_row + k * TA_VW);
        }
        TA_UNROLL
        for (r = 0; r < rb; ++r) {
            const ta_v b = v_bcast(R + (size_t)r * ldr + (size_t)d);
            TA_UNROLL
            for (k = 0; k < nv; ++k) {
                acc[r][k] = v_fma(b, tv[k], acc[r][k]);
            }
        }
    }
    TA_UNROLL
    for (r = 0; r < rb; ++r) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            float *dst = out + (size_t)r * ldo + (size_t)(k * TA_VW);
            v_store(dst, scaled ? v_mul(v_set1(scale), acc[r][k]) : acc[r][k]);
        }
    }
}

/* Each block size is its own out-of-line function: the block needs all but a
 * few vector registers, and inlined into the loops around it the compiler
 * spilled one of the T vectors to the stack. */
_Static_assert(TA_RB == 6, "cpu_k1_panel and TA_K1_FN instantiate blocks of 1..6 rows");
#define TA_K1_FN(rb, nv)                                                                           \
    static __attribute__((noinline)) void cpu_k1_b##rb##_##nv(                                     \
        const float *T, size_t ldt, const float *R, size_t ldr, int32_t dim, float scale,          \
        int scaled, float *out, size_t ldo) {                                                      \
        cpu_k1_block(rb, nv, T, ldt, R, ldr, dim, scale, scaled, out, ldo);                        \
    }
TA_K1_FN(1, 1)
TA_K1_FN(2, 1)
TA_K1_FN(3, 1)
TA_K1_FN(4, 1)
TA_K1_FN(5, 1)
TA_K1_FN(6, 1)
TA_K1_FN(1, TA_NV)
TA_K1_FN(2, TA_NV)
TA_K1_FN(3, TA_NV)
TA_K1_FN(4, TA_NV)
TA_K1_FN(5, TA_NV)
TA_K1_FN(6, TA_NV)
#undef TA_K1_FN

typedef void (*cpu_k1_fn)(const float *, size_t, const float *, size_t, int32_t, float, int,
                          float *, size_t);

/* One column of key blocks: R rows [0, nr) against the lane vectors at T
 * (TA_NV of them if wide, else one). */
static void cpu_k1_panel(int wide, const float *T, size_t ldt, const float *R, size_t ldr,
                         int32_t nr, int32_t dim, float scale, int scaled, float *out, size_t ldo) {
    int32_t r0 = 0;
    cpu_k1_fn fn;
    for (; r0 < nr; r0 += TA_RB) {
        switch (nr - r0) {
        case 1: fn = wide ? cpu_k1_b1_TA_NV : cpu_k1_b1_1; break;
        case 2: fn = wide ? cpu_k1_b2_TA_NV : cpu_k1_b2_1; break;
        case 3: fn = wide ? cpu_k1_b3_TA_NV : cpu_k1_b3_1; break;
        case 4: fn = wide ? cpu_k1_b4_TA_NV : cpu_k1_b4_1; break;
        case 5: fn = wide ? cpu_k1_b5_TA_NV : cpu_k1_b5_1; break;
        default: fn = wide ? cpu_k1_b6_TA_NV : cpu_k1_b6_1; break; /* TA_RB = 6 rows */
        }
        fn(T, ldt, R + (size_t)r0 * ldr, ldr, dim, scale, scaled, out + (size_t)r0 * ldo, ldo);
    }
}

/* The whole tile: R rows [0, nr), nvec lane vectors of T. Panels of TA_NV
 * vectors outer, key blocks of TA_RB rows of R inner: one panel of T (dim x
 * TA_NV vectors) serves every block, so it stays in L1. */
static void cpu_k1(const float *T, size_t ldt, int32_t nvec, const float *R, size_t ldr, int32_t nr,
                   int32_t dim, float scale, int scaled, float *out, size_t ldo) {
    int32_t v = 0;
    for (; v + TA_NV <= nvec; v += TA_NV)
        cpu_k1_panel(1, T + v * TA_VW, ldt, R, ldr, nr, dim, scale, scaled, out + v * TA_VW, ldo);
    for (; v < nvec; ++v)
        cpu_k1_panel(0, T + v * TA_VW, ldt, R, ldr, nr, dim, scale, scaled, out + v * TA_VW, ldo);
}

/* k1 for the forward's scores, only where they are read: per panel of lane
 * vectors (query rows), keys [0, max n_i over the panel's rows); panels whose
 * rows see no key of the tile are skipped (the softmax and k2 read s_ij only
 * for j < n_i). */
static void cpu_k1_visible(const float *T, size_t ldt, int32_t nvec, const int32_t *nvis,
                           const float *R, size_t ldr, int32_t dim, float scale, int scaled,
                           float *out, size_t ldo) {
    int32_t v = 0, w, n, x;
    for (; v < nvec; v += w) {
        w = v + TA_NV <= nvec ? TA_NV : 1;
        n = 0;
        for (x = v * TA_VW; x < (v + w) * TA_VW; ++x)
            n = nvis[x] > n ? nvis[x] : n;
        if (n > 0)
            cpu_k1_panel(w == TA_NV, T + v * TA_VW, ldt, R, ldr, n, dim, scale, scaled,
                         out + v * TA_VW, ldo);
    }
}

/* ---------------------------------------------------------------------- */
/* k2: row accumulate over a per-row key prefix, lanes over features      */
/* ---------------------------------------------------------------------- */

/* For rb rows, nv feature vectors: acc = out (* alpha[r] if alpha), then for
 * j in [j_begin, j_end) ascending: acc = fmaf(C[j][r], X[j][f], acc); store.
 * C points at the block's first row (C[j * ldc + r]). */
TA_KFN void cpu_k2_block(const int rb, const int nv, float *out, size_t ldo, const float *alpha,
                         const float *C, size_t ldc, const float *X, size_t ldx, int32_t j_begin,
                         int32_t j_end) {
    ta_v acc[TA_RB][TA_NV];
    int r, k;
    int32_t j;
    TA_UNROLL
    for (r = 0; r < rb; ++r) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            acc[r][k] = v_load(out + (size_t)r * ldo + (size_t)(k * TA_VW));
            if (alpha) acc[r][k] = v_mul(acc[r][k], v_set1(alpha[r]));
        }
    }
    for (j = j_begin; j < j_end; ++j) {
        const float *x_row = X + (size_t)j * ldx;
        const float *c_row = C + (size_t)j * ldc;
        ta_v xv[TA_NV];
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            xv[k] = v_load(x_row + k * TA_VW);
        }
        TA_UNROLL
        for (r = 0; r < rb; ++r) {
            const ta_v c = v_bcast(c_row + r);
            TA_UNROLL
            for (k = 0; k < nv; ++k) {
                acc[r][k] = v_fma(c, xv[k], acc[r][k]);
            }
        }
    }
    TA_UNROLL
    for (r = 0; r < rb; ++r) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            v_store(out + (size_t)r * ldo + (size_t)(k * TA_VW), acc[r][k]);
        }
    }
}

TA_KFN void cpu_k2_cols(const int rb, float *out, size_t ldo, const float *alpha, const float *C,
                        size_t ldc, const float *X, size_t ldx, int32_t nvec, int32_t j_begin,
                        int32_t j_end) {
    int32_t v0 = 0;
    for (; v0 + TA_NV <= nvec; v0 += TA_NV)
        cpu_k2_block(rb, TA_NV, out + v0 * TA_VW, ldo, alpha, C, ldc, X + v0 * TA_VW, ldx, j_begin,
                     j_end);
    for (; v0 < nvec; ++v0)
        cpu_k2_block(rb, 1, out + v0 * TA_VW, ldo, alpha, C, ldc, X + v0 * TA_VW, ldx, j_begin,
                     j_end);
}

/* rb rows from r0: keys [0, min n) for the whole block (scaling by alpha on
 * load), then each row's own remainder [min n, n_r) with a one-row block.
 * Per element: scale first, then keys ascending, as the reference. */
TA_KFN void cpu_k2_rows(const int rb, float *out, size_t ldo, const float *alpha, const float *C,
                        size_t ldc, const float *X, size_t ldx, const int32_t *nvis, int32_t nvec) {
    int32_t j_min = nvis[0];
    int r;
    for (r = 1; r < rb; ++r)
        j_min = nvis[r] < j_min ? nvis[r] : j_min;
    cpu_k2_cols(rb, out, ldo, alpha, C, ldc, X, ldx, nvec, 0, j_min);
    for (r = 0; r < rb; ++r)
        if (nvis[r] > j_min)
            cpu_k2_cols(1, out + (size_t)r * ldo, ldo, NULL, C + r, ldc, X, ldx, nvec, j_min,
                        nvis[r]);
}

/* The whole tile: out [rows, ldo], C [keys, ldc] (C[j][i]), X [keys, ldx]. */
static void cpu_k2(float *out, size_t ldo, const float *alpha, const float *C, size_t ldc,
                   const float *X, size_t ldx, const int32_t *nvis, int32_t rows, int32_t nvec) {
    int32_t r0 = 0;
    for (; r0 + TA_RB <= rows; r0 += TA_RB)
        cpu_k2_rows(TA_RB, out + (size_t)r0 * ldo, ldo, alpha ? alpha + r0 : NULL, C + r0, ldc, X,
                    ldx, nvis + r0, nvec);
#define TA_K2_TAIL(n)                                                                              \
    cpu_k2_rows((n), out + (size_t)r0 * ldo, ldo, alpha ? alpha + r0 : NULL, C + r0, ldc, X, ldx,  \
                nvis + r0, nvec)
    switch (rows - r0) {
    case 0: break;
    case 1: TA_K2_TAIL(1); break;
    case 2: TA_K2_TAIL(2); break;
    case 3: TA_K2_TAIL(3); break;
    case 4: TA_K2_TAIL(4); break;
    default: TA_K2_TAIL(5); break;
    }
#undef TA_K2_TAIL
}

/* ---------------------------------------------------------------------- */
/* k3: column accumulate over rows, lanes over features                    */
/* ---------------------------------------------------------------------- */

/* For cb keys from j0, nv feature vectors: for rows i ascending, the keys
 * j < nvis[i] get acc_j = fmaf(C[i][j], Y[i][f], acc_j). C points at key j0
 * of row 0 (C[i * ldc + c * ldk]: ldk = 1 for [row][key], the row stride of
 * a [key][row] tile for one held transposed). */
TA_KFN void cpu_k3_block(const int cb, const int nv, float *out, size_t ldo, const float *C,
                         size_t ldc, size_t ldk, const float *Y, size_t ldy, const int32_t *nvis,
                         int32_t rows, int32_t j0) {
    ta_v acc[TA_RB][TA_NV];
    int c, k;
    int32_t i;
    TA_UNROLL
    for (c = 0; c < cb; ++c) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            acc[c][k] = v_load(out + (size_t)c * ldo + (size_t)(k * TA_VW));
        }
    }
    for (i = 0; i < rows; ++i) {
        const int32_t live = nvis[i] - j0; /* keys of this block row i sees: [0, live) */
        const float *c_row = C + (size_t)i * ldc;
        ta_v yv[TA_NV];
        if (live <= 0) continue;
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            yv[k] = v_load(Y + (size_t)i * ldy + (size_t)(k * TA_VW));
        }
        TA_UNROLL
        for (c = 0; c < cb; ++c) {
            /* all cb keys (the common case), else only the first `live` */
            if (live >= cb || c < live) {
                const ta_v b = v_bcast(c_row + (size_t)c * ldk);
                TA_UNROLL
                for (k = 0; k < nv; ++k) {
                    acc[c][k] = v_fma(b, yv[k], acc[c][k]);
                }
            }
        }
    }
    TA_UNROLL
    for (c = 0; c < cb; ++c) {
        TA_UNROLL
        for (k = 0; k < nv; ++k) {
            v_store(out + (size_t)c * ldo + (size_t)(k * TA_VW), acc[c][k]);
        }
    }
}

TA_KFN void cpu_k3_cols(const int cb, float *out, size_t ldo, const float *C, size_t ldc,
                        size_t ldk, const float *Y, size_t ldy, const int32_t *nvis, int32_t rows,
                        int32_t j0, int32_t nvec) {
    int32_t v0 = 0;
    for (; v0 + TA_NV <= nvec; v0 += TA_NV)
        cpu_k3_block(cb, TA_NV, out + v0 * TA_VW, ldo, C, ldc, ldk, Y + v0 * TA_VW, ldy, nvis, rows,
                     j0);
    for (; v0 < nvec; ++v0)
        cpu_k3_block(cb, 1, out + v0 * TA_VW, ldo, C, ldc, ldk, Y + v0 * TA_VW, ldy, nvis, rows,
                     j0);
}

/* The whole tile: out [keys, ldo], keys [0, n_keys); C [rows, ldc] (key
 * stride ldk); Y [rows, ldy]. */
TA_KFN void cpu_k3_strided(float *out, size_t ldo, const float *C, size_t ldc, size_t ldk,
                           const float *Y, size_t ldy, const int32_t *nvis, int32_t rows,
                           int32_t n_keys, int32_t nvec) {
    int32_t j0 = 0;
    for (; j0 + TA_RB <= n_keys; j0 += TA_RB)
        cpu_k3_cols(TA_RB, out + (size_t)j0 * ldo, ldo, C + (size_t)j0 * ldk, ldc, ldk, Y, ldy,
                    nvis, rows, j0, nvec);
#define TA_K3_TAIL(n)                                                                              \
    cpu_k3_cols((n), out + (size_t)j0 * ldo, ldo, C + (size_t)j0 * ldk, ldc, ldk, Y, ldy, nvis,    \
                rows, j0, nvec)
    switch (n_keys - j0) {
    case 0: break;
    case 1: TA_K3_TAIL(1); break;
    case 2: TA_K3_TAIL(2); break;
    case 3: TA_K3_TAIL(3); break;
    case 4: TA_K3_TAIL(4); break;
    default: TA_K3_TAIL(5); break;
    }
#undef TA_K3_TAIL
}

/* k3 on a [row][key] C (key stride 1). */
static void cpu_k3(float *out, size_t ldo, const float *C, size_t ldc, const float *Y, size_t ldy,
                   const int32_t *nvis, int32_t rows, int32_t n_keys, int32_t nvec) {
    cpu_k3_strided(out, ldo, C, ldc, 1, Y, ldy, nvis, rows, n_keys, nvec);
}

/* k3 on a C held transposed, [key][row] with row stride ld (element (i, j) at
 * C[j * ld + i]): the MTA backward's P^T and dS^T, read in place. */
static void cpu_k3_t(float *out, size_t ldo, const float *C, size_t ld, const float *Y, size_t ldy,
                     const int32_t *nvis, int32_t rows, int32_t n_keys, int32_t nvec) {
    cpu_k3_strided(out, ldo, C, 1, ld, Y, ldy, nvis, rows, n_keys, nvec);
}

/* ---------------------------------------------------------------------- */
/* Forward                                                                  */
/* ---------------------------------------------------------------------- */

/*
 * Online softmax over one K tile, lanes across rows (docs/reference.md 2.2).
 * Per row i with n_i = nvis[i] visible keys (a prefix; rows with n_i = 0 are
 * left unchanged and get alpha = 1, which leaves acc bit-identical):
 *   m_tile = max_{j < n_i} s_ij       (from -inf: s > m ? s : m, as the reference)
 *   m_new  = m > m_tile ? m : m_tile;  alpha = exp(m - m_new)
 *   l      = l * alpha; then l = l + p_j, p_j = exp(s_ij - m_new), j ascending
 * st[j][i] holds s_ij on entry and p_ij on return.
 */
static void cpu_fwd_softmax(const ta_cpu_fwd_ws *ws, int32_t rows) {
    const size_t ld = ws->ld;
    const int32_t nvec = TA_NVEC(rows);
    int32_t v, j, x;
    for (v = 0; v < nvec; ++v) {
        const size_t c0 = (size_t)v * TA_VW;
        const ta_v nf = v_i32f(ws->nvis + c0);
        const ta_v m_old = v_load(ws->m + c0), l_old = v_load(ws->l + c0);
        ta_v m_tile = v_set1(-INFINITY), m_new, alpha, l;
        ta_m any;
        int32_t j_max = 0, j_min = ws->nvis[c0];
        for (x = 0; x < TA_VW; ++x) {
            j_max = ws->nvis[c0 + (size_t)x] > j_max ? ws->nvis[c0 + (size_t)x] : j_max;
            j_min = ws->nvis[c0 + (size_t)x] < j_min ? ws->nvis[c0 + (size_t)x] : j_min;
        }
        /* step a: the tile's max over each row's visible keys (keys below
         * j_min are visible to every lane: no selection needed) */
        for (j = 0; j < j_min; ++j)
            m_tile = v_max(v_load(ws->st + (size_t)j * ld + c0), m_tile);
        for (; j < j_max; ++j) {
            const ta_m vis = m_lt(v_set1((float)j), nf);
            m_tile = v_sel(vis, v_max(v_load(ws->st + (size_t)j * ld + c0), m_tile), m_tile);
        }
        /* step b: new max and the rescale factor (rows without keys: unchanged, 1) */
        any = m_lt(v_zero(), nf);
        m_new = v_sel(any, v_sel(m_gt(m_old, m_tile), m_old, m_tile), m_old);
        alpha = v_sel(any, v_exp(v_sub(m_old, m_new)), v_set1(1.0f));
        /* step c: l = l * alpha + p_j, keys ascending */
        l = v_sel(any, v_mul(l_old, alpha), l_old);
        for (j = 0; j < j_min; ++j) {
            float *s = ws->st + (size_t)j * ld + c0;
            const ta_v p = v_exp(v_sub(v_load(s), m_new));
            l = v_add(l, p);
            v_store(s, p);
        }
        for (; j < j_max; ++j) {
            float *s = ws->st + (size_t)j * ld + c0;
            const ta_v p = v_exp(v_sub(v_load(s), m_new));
            l = v_sel(m_lt(v_set1((float)j), nf), v_add(l, p), l);
            v_store(s, p);
        }
        v_store(ws->m + c0, m_new);
        v_store(ws->l + c0, l);
        v_store(ws->alpha + c0, alpha);
    }
}

/* Step 3: o_i = acc_i / l_i (IEEE division), lse_i = m_i + log(l_i); a row
 * that saw no key (m = -inf) stores o = 0 and lse = -inf. */
static void cpu_fwd_store(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws,
                          size_t q_row0, int32_t rows) {
    const ta_problem *p = &plan->p;
    const int32_t dv = p->head_dim_v, nvec = TA_NVEC(dv);
    int32_t i, v;
    for (i = 0; i < rows; ++i) {
        float *acc = ws->acc + (size_t)i * ws->dm.dv_pad;
        const ta_v l = v_set1(ws->l[i]);
        const int seen = ws->m[i] != -INFINITY;
        for (v = 0; v < nvec; ++v)
            v_store(acc + v * TA_VW, seen ? v_div(v_load(acc + v * TA_VW), l) : v_zero());
        cpu_store_row(a->o, p->dtype, (q_row0 + (size_t)i) * (size_t)dv, acc, dv);
    }
    if (!a->lse) return;
    for (v = 0; v < TA_NVEC(rows); ++v) {
        const size_t c0 = (size_t)v * TA_VW;
        const ta_v m = v_load(ws->m + c0);
        const ta_v lse = v_add(m, v_log(v_load(ws->l + c0)));
        v_store(ws->lse + c0, v_sel(m_ne(m, v_set1(-INFINITY)), lse, v_set1(-INFINITY)));
    }
    memcpy(a->lse + q_row0, ws->lse, (size_t)rows * sizeof(float));
}

/*
 * Forward of Q tiles [qt_begin, qt_end) of one (b, h) (docs/reference.md 2),
 * held as one block of rows (rows are independent: each row still sees the
 * K tiles of plan->fwd in ascending order, and a K tile past its own Q tile's
 * ta_tile_k_end holds no key it sees, so it is skipped for that row):
 *   1. the rows' Q transposed [D, bq_pad]; m = -inf, l = 0, acc = 0
 *   2. K tiles [0, ta_tile_k_end(last Q tile)) ascending; per tile, with n_i
 *      visible keys per row: scores s = scale * Q K^T (k1, lanes over rows)
 *      for keys [0, max n_i); online softmax; acc = acc * alpha + P V (k2)
 *   3. normalise and store
 */
static void cpu_fwd_task(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws,
                         int32_t b, int32_t h, int32_t qt_begin, int32_t qt_end) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->fwd;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t row0 = ta_tile_row_eff_begin(t, qt_begin);
    const int32_t rows = ta_tile_row_eff_end(t, qt_end - 1) - row0;
    const int32_t k_end = ta_tile_k_end(t, qt_end - 1, key_len); /* the group's largest */
    const size_t q_row0 =
        ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)row0;
    const size_t k_base =
        ((size_t)b * (size_t)p->heads_kv + (size_t)(h / plan->group)) * (size_t)p->seq_k;
    int32_t kt;
    size_t z;
    /* step 1 */
    cpu_load_t(ws->qt, ws->ld, a->q, p->dtype, q_row0, rows, p->head_dim);
    for (z = 0; z < dm->bq_pad; ++z) {
        ws->m[z] = -INFINITY;
        ws->l[z] = 0.0f;
    }
    memset(ws->acc, 0, (size_t)rows * dm->dv_pad * sizeof(float));
    /* step 2 */
    for (kt = 0; kt < k_end; ++kt) {
        const int32_t col0 = ta_tile_col_eff_begin(t, kt);
        const int32_t cols = ta_tile_col_eff_end(t, kt) - col0;
        const int32_t n_max =
            cpu_fill_nvis(ws->nvis, dm->bq_pad, t, row0, rows, col0, cols, key_len, NULL);
        const float *k_rows, *v_rows;
        size_t ldk, ldv;
        if (n_max == 0) continue; /* no row sees a key of this tile: nothing changes */
        k_rows = cpu_rows_view(ws->k, dm->d_pad, a->k, p->dtype, k_base + (size_t)col0, n_max,
                               p->head_dim, 0, &ldk);
        v_rows = cpu_rows_view(ws->v, dm->dv_pad, a->v, p->dtype, k_base + (size_t)col0, n_max,
                               p->head_dim_v, 1, &ldv);
        cpu_k1_visible(ws->qt, ws->ld, TA_NVEC(rows), ws->nvis, k_rows, ldk, p->head_dim, p->scale,
                       1, ws->st, ws->ld);
        cpu_fwd_softmax(ws, rows);
        cpu_k2(ws->acc, dm->dv_pad, ws->alpha, ws->st, ws->ld, v_rows, ldv, ws->nvis, rows,
               TA_NVEC(p->head_dim_v));
    }
    /* step 3 */
    cpu_fwd_store(plan, a, ws, q_row0, rows);
}

/* ---------------------------------------------------------------------- */
/* Backward                                                                 */
/* ---------------------------------------------------------------------- */

/* D_i = dot(dO_i, O_i) over D_v, fmaf from +0, d ascending, for each row:
 * a reduction over features, so lanes cannot help; eight rows at a time as
 * independent scalar chains (held in registers). */
TA_KFN void cpu_delta_block(const int n, float *delta, const float *d_o, size_t ld_do,
                            const float *o, size_t ld_o, int32_t dv) {
    float acc[8];
    int r;
    int32_t d;
    TA_UNROLL
    for (r = 0; r < n; ++r) {
        acc[r] = 0.0f;
    }
    for (d = 0; d < dv; ++d) {
        TA_UNROLL
        for (r = 0; r < n; ++r) {
            const float x = d_o[(size_t)r * ld_do + (size_t)d], y = o[(size_t)r * ld_o + (size_t)d];
            acc[r] = TA_FMAF(x, y, acc[r]);
        }
    }
    TA_UNROLL
    for (r = 0; r < n; ++r) {
        delta[r] = acc[r];
    }
}

static void cpu_delta_rows(float *delta, const float *d_o, size_t ld_do, const float *o,
                           size_t ld_o, int32_t rows, int32_t dv) {
    int32_t i0 = 0;
    for (; i0 + 8 <= rows; i0 += 8)
        cpu_delta_block(8, delta + i0, d_o + (size_t)i0 * ld_do, ld_do, o + (size_t)i0 * ld_o, ld_o,
                        dv);
    for (; i0 < rows; ++i0)
        cpu_delta_block(1, delta + i0, d_o + (size_t)i0 * ld_do, ld_do, o + (size_t)i0 * ld_o, ld_o,
                        dv);
}

/* Pass 1, per live row i (lanes over keys j < n_i): P = exp(s - lse_i) in p,
 * dS = P * (dP - D_i) in ds (which holds dP on entry). */
static void cpu_dkdv_probs(const ta_cpu_dkdv_ws *ws, int32_t i_lo, int32_t rows) {
    const size_t ld = ws->dm.bk_pad;
    int32_t i, v;
    for (i = i_lo; i < rows; ++i) {
        const ta_v lse = v_set1(ws->lse[i]), delta = v_set1(ws->delta[i]);
        float *p_row = ws->p + (size_t)i * ld, *ds_row = ws->ds + (size_t)i * ld;
        for (v = 0; v < TA_NVEC(ws->nvis[i]); ++v) {
            const ta_v pv = v_exp(v_sub(v_load(p_row + v * TA_VW), lse));
            v_store(p_row + v * TA_VW, pv);
            v_store(ds_row + v * TA_VW, v_mul(pv, v_sub(v_load(ds_row + v * TA_VW), delta)));
        }
    }
}

/* The Q side of one (query head, Q tile) in pass 1, loaded once for every
 * K tile of the task's group: rows [row0, row0 + rows), their Q and dO rows
 * (views), and D_i for rows [delta_lo, rows). */
typedef struct cpu_qside {
    size_t q_row0;
    int32_t row0, rows, delta_lo; /* delta_lo = rows: not loaded yet */
    const float *q, *d_o, *o;
    size_t ldq, ld_do, ld_o;
} cpu_qside;

/* Make sure rows [i_lo, rows) of the Q side are loaded and have their D_i. */
static void cpu_qside_need(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dkdv_ws *ws,
                           cpu_qside *qs, int32_t i_lo) {
    const ta_problem *p = &plan->p;
    if (qs->delta_lo == qs->rows) {
        qs->q = cpu_rows_view(ws->q, ws->dm.d_pad, a->q, p->dtype, qs->q_row0, qs->rows,
                              p->head_dim, 1, &qs->ldq);
        qs->d_o = cpu_rows_view(ws->d_o, ws->dm.dv_pad, a->d_o, p->dtype, qs->q_row0, qs->rows,
                                p->head_dim_v, 1, &qs->ld_do);
        qs->o = cpu_rows_view(ws->o, ws->dm.dv_pad, a->o, p->dtype, qs->q_row0, qs->rows,
                              p->head_dim_v, 0, &qs->ld_o);
    }
    if (i_lo < qs->delta_lo) {
        cpu_delta_rows(ws->delta + i_lo, qs->d_o + (size_t)i_lo * qs->ld_do, qs->ld_do,
                       qs->o + (size_t)i_lo * qs->ld_o, qs->ld_o, qs->delta_lo - i_lo,
                       p->head_dim_v);
        qs->delta_lo = i_lo;
    }
}

/*
 * Pass 1 for one (query head, Q tile) and one K tile (group slot `slot`,
 * keys [col0, col0 + cols)): recompute P and dS for the live entries and
 * accumulate dv += P^T dO, dk += dS^T Q (k3; each accumulator over rows
 * ascending, continuing the previous heads and Q tiles).
 */
static void cpu_dkdv_tile(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dkdv_ws *ws,
                          cpu_qside *qs, int32_t slot, int32_t col0, int32_t cols,
                          int32_t key_len) {
    const ta_problem *p = &plan->p;
    const ta_cpu_dims *dm = &ws->dm;
    const size_t ldp = dm->bk_pad;
    int32_t n_max, i_lo = 0, nk;
    n_max = cpu_fill_nvis(ws->nvis, (size_t)qs->rows, &plan->bwd, qs->row0, qs->rows, col0, cols,
                          key_len, ws->lse);
    if (n_max == 0) return; /* nothing live in this pair */
    while (ws->nvis[i_lo] == 0)
        ++i_lo; /* rows before the first live one contribute nothing */
    cpu_qside_need(plan, a, ws, qs, i_lo);
    nk = qs->rows - i_lo;
    cpu_k1(ws->kt[slot], ldp, TA_NVEC(n_max), qs->q + (size_t)i_lo * qs->ldq, qs->ldq, nk,
           p->head_dim, p->scale, 1, ws->p + (size_t)i_lo * ldp, ldp);
    cpu_k1(ws->vt[slot], ldp, TA_NVEC(n_max), qs->d_o + (size_t)i_lo * qs->ld_do, qs->ld_do, nk,
           p->head_dim_v, 0.0f, 0, ws->ds + (size_t)i_lo * ldp, ldp);
    cpu_dkdv_probs(ws, i_lo, qs->rows);
    cpu_k3(ws->dv_acc[slot], dm->dv_pad, ws->p + (size_t)i_lo * ldp, ldp,
           qs->d_o + (size_t)i_lo * qs->ld_do, qs->ld_do, ws->nvis + i_lo, nk, n_max,
           TA_NVEC(p->head_dim_v));
    cpu_k3(ws->dk_acc[slot], dm->d_pad, ws->ds + (size_t)i_lo * ldp, ldp,
           qs->q + (size_t)i_lo * qs->ldq, qs->ldq, ws->nvis + i_lo, nk, n_max,
           TA_NVEC(p->head_dim));
}

/* Step 3 of pass 1 for one K tile: dk = store(scale * dk_acc), dv = store(dv_acc). */
static void cpu_dkdv_store(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dkdv_ws *ws,
                           int32_t slot, size_t k_row0, int32_t cols) {
    const ta_problem *p = &plan->p;
    const ta_v scale = v_set1(p->scale);
    int32_t j, v;
    for (j = 0; j < cols; ++j) {
        float *dk = ws->dk_acc[slot] + (size_t)j * ws->dm.d_pad;
        for (v = 0; v < TA_NVEC(p->head_dim); ++v)
            v_store(dk + v * TA_VW, v_mul(scale, v_load(dk + v * TA_VW)));
        cpu_store_row(a->dk, p->dtype, (k_row0 + (size_t)j) * (size_t)p->head_dim, dk, p->head_dim);
        cpu_store_row(a->dv, p->dtype, (k_row0 + (size_t)j) * (size_t)p->head_dim_v,
                      ws->dv_acc[slot] + (size_t)j * ws->dm.dv_pad, p->head_dim_v);
    }
}

/*
 * Pass 1 of K tiles [kt_begin, kt_end) of one (b, kv head) (docs/reference.md
 * 3, pass 1), each K tile in its own slot with its own accumulators:
 *   1. K, V tiles transposed; dk_acc = dv_acc = 0
 *   2. query heads of the group ascending, Q tiles ascending from the first
 *      that sees the group; each Q side is loaded once, then every K tile
 *      that this Q tile reaches (qt >= ta_tile_q_begin(kt)) accumulates
 *   3. dk = store(scale * dk_acc), dv = store(dv_acc)
 * Each accumulator sees exactly the reference's sequence: heads ascending,
 * Q tiles ascending, rows ascending.
 */
static void cpu_dkdv_task(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dkdv_ws *ws,
                          int32_t b, int32_t h_kv, int32_t kt_begin, int32_t kt_end) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t n_slots = kt_end - kt_begin;
    const size_t k_base = ((size_t)b * (size_t)p->heads_kv + (size_t)h_kv) * (size_t)p->seq_k;
    int32_t col0[TA_CPU_DKDV_GROUP_MAX], cols[TA_CPU_DKDV_GROUP_MAX];
    int32_t q_begin[TA_CPU_DKDV_GROUP_MAX];
    int32_t s, g, qt;
    /* step 1 */
    for (s = 0; s < n_slots; ++s) {
        col0[s] = ta_tile_col_eff_begin(t, kt_begin + s);
        cols[s] = ta_tile_col_eff_end(t, kt_begin + s) - col0[s];
        q_begin[s] = ta_tile_q_begin(t, kt_begin + s, key_len); /* ascending in s */
        cpu_load_t(ws->kt[s], ws->dm.bk_pad, a->k, p->dtype, k_base + (size_t)col0[s], cols[s],
                   p->head_dim);
        cpu_load_t(ws->vt[s], ws->dm.bk_pad, a->v, p->dtype, k_base + (size_t)col0[s], cols[s],
                   p->head_dim_v);
        memset(ws->dk_acc[s], 0, (size_t)cols[s] * ws->dm.d_pad * sizeof(float));
        memset(ws->dv_acc[s], 0, (size_t)cols[s] * ws->dm.dv_pad * sizeof(float));
    }
    /* step 2 */
    for (g = 0; g < plan->group; ++g) {
        const int32_t h = h_kv * plan->group + g;
        for (qt = q_begin[0]; qt < t->num_q_tiles; ++qt) {
            cpu_qside qs;
            memset(&qs, 0, sizeof qs);
            qs.row0 = ta_tile_row_eff_begin(t, qt);
            qs.rows = ta_tile_row_eff_end(t, qt) - qs.row0;
            qs.delta_lo = qs.rows;
            qs.q_row0 =
                ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)qs.row0;
            memcpy(ws->lse, a->lse + qs.q_row0, (size_t)qs.rows * sizeof(float));
            for (s = 0; s < n_slots && qt >= q_begin[s]; ++s)
                cpu_dkdv_tile(plan, a, ws, &qs, s, col0[s], cols[s], key_len);
        }
    }
    /* step 3 */
    for (s = 0; s < n_slots; ++s)
        cpu_dkdv_store(plan, a, ws, s, k_base + (size_t)col0[s], cols[s]);
}

/* Pass 2, lanes over rows: for keys j < max n_i, P = exp(s - lse_i) and
 * dS = P * (dP - D_i) into dpt (which holds dP^T on entry). */
static void cpu_dq_probs(const ta_cpu_dq_ws *ws, int32_t rows) {
    const size_t ld = ws->ld;
    int32_t v, j, x;
    for (v = 0; v < TA_NVEC(rows); ++v) {
        const size_t c0 = (size_t)v * TA_VW;
        const ta_v lse = v_load(ws->lse + c0), delta = v_load(ws->delta + c0);
        int32_t j_max = 0;
        for (x = 0; x < TA_VW; ++x)
            j_max = ws->nvis[c0 + (size_t)x] > j_max ? ws->nvis[c0 + (size_t)x] : j_max;
        for (j = 0; j < j_max; ++j) {
            const ta_v pv = v_exp(v_sub(v_load(ws->st + (size_t)j * ld + c0), lse));
            float *ds = ws->dpt + (size_t)j * ld + c0;
            v_store(ds, v_mul(pv, v_sub(v_load(ds), delta)));
        }
    }
}

/* Pass 2 step 1: Q, dO, O tiles transposed; lse; D_i (lanes over rows). */
static void cpu_dq_load(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dq_ws *ws,
                        size_t q_row0, int32_t rows) {
    const ta_problem *p = &plan->p;
    const size_t ld = ws->ld;
    int32_t v, d;
    size_t z;
    cpu_load_t(ws->qt, ld, a->q, p->dtype, q_row0, rows, p->head_dim);
    cpu_load_t(ws->dot, ld, a->d_o, p->dtype, q_row0, rows, p->head_dim_v);
    cpu_load_t(ws->ot, ld, a->o, p->dtype, q_row0, rows, p->head_dim_v);
    for (z = 0; z < ws->dm.bq_pad; ++z)
        ws->lse[z] = z < (size_t)rows ? a->lse[q_row0 + z] : 0.0f;
    for (v = 0; v < TA_NVEC(rows); ++v) {
        ta_v acc = v_zero();
        for (d = 0; d < p->head_dim_v; ++d)
            acc = v_fma(v_load(ws->dot + (size_t)d * ld + (size_t)(v * TA_VW)),
                        v_load(ws->ot + (size_t)d * ld + (size_t)(v * TA_VW)), acc);
        v_store(ws->delta + v * TA_VW, acc);
    }
}

/*
 * Pass 2 of Q tiles [qt_begin, qt_end) of one (b, h), held as one block of
 * rows as in the forward (docs/reference.md 3, pass 2):
 *   1. Q, dO, O transposed, lse, D_i; dq_acc = 0
 *   2. K tiles [0, ta_tile_k_end(last Q tile)) ascending: s (k1), dP (k1),
 *      P and dS, dq_acc += dS K over each row's live keys ascending (k2)
 *   3. dq = store(scale * dq_acc)
 */
static void cpu_dq_task(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dq_ws *ws,
                        int32_t b, int32_t h, int32_t qt_begin, int32_t qt_end) {
    const ta_problem *p = &plan->p;
    const ta_tiling *t = &plan->bwd;
    const ta_cpu_dims *dm = &ws->dm;
    const int32_t key_len = a->seqlens_k ? a->seqlens_k[b] : p->seq_k;
    const int32_t row0 = ta_tile_row_eff_begin(t, qt_begin);
    const int32_t rows = ta_tile_row_eff_end(t, qt_end - 1) - row0;
    const int32_t k_end = ta_tile_k_end(t, qt_end - 1, key_len); /* the group's largest */
    const size_t q_row0 =
        ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)row0;
    const size_t k_base =
        ((size_t)b * (size_t)p->heads_kv + (size_t)(h / plan->group)) * (size_t)p->seq_k;
    const ta_v scale = v_set1(p->scale);
    int32_t kt, i, v;
    /* step 1 */
    cpu_dq_load(plan, a, ws, q_row0, rows);
    memset(ws->dq_acc, 0, (size_t)rows * dm->d_pad * sizeof(float));
    /* step 2 */
    for (kt = 0; kt < k_end; ++kt) {
        const int32_t col0 = ta_tile_col_eff_begin(t, kt);
        const int32_t cols = ta_tile_col_eff_end(t, kt) - col0;
        const int32_t n_max =
            cpu_fill_nvis(ws->nvis, dm->bq_pad, t, row0, rows, col0, cols, key_len, ws->lse);
        const float *k_rows, *v_rows;
        size_t ldk, ldv;
        if (n_max == 0) continue;
        k_rows = cpu_rows_view(ws->k, dm->d_pad, a->k, p->dtype, k_base + (size_t)col0, n_max,
                               p->head_dim, 1, &ldk);
        v_rows = cpu_rows_view(ws->v, dm->dv_pad, a->v, p->dtype, k_base + (size_t)col0, n_max,
                               p->head_dim_v, 0, &ldv);
        cpu_k1_visible(ws->qt, ws->ld, TA_NVEC(rows), ws->nvis, k_rows, ldk, p->head_dim,
                       p->scale, 1, ws->st, ws->ld);
        cpu_k1_visible(ws->dot, ws->ld, TA_NVEC(rows), ws->nvis, v_rows, ldv, p->head_dim_v, 0.0f,
                       0, ws->dpt, ws->ld);
        cpu_dq_probs(ws, rows);
        cpu_k2(ws->dq_acc, dm->d_pad, NULL, ws->dpt, ws->ld, k_rows, ldk, ws->nvis, rows,
               TA_NVEC(p->head_dim));
    }
    /* step 3 */
    for (i = 0; i < rows; ++i) {
        float *dq = ws->dq_acc + (size_t)i * dm->d_pad;
        for (v = 0; v < TA_NVEC(p->head_dim); ++v)
            v_store(dq + v * TA_VW, v_mul(scale, v_load(dq + v * TA_VW)));
        cpu_store_row(a->dq, p->dtype, (q_row0 + (size_t)i) * (size_t)p->head_dim, dq, p->head_dim);
    }
}

#include "ta_cpu_mta_impl.h"

const ta_cpu_kernels TA_CPU_KERNELS = {TA_ISA_NAME,    cpu_fwd_task,     cpu_dkdv_task,
                                       cpu_dq_task,    cpu_mta_fwd_task, cpu_mta_dkdv_task,
                                       cpu_mta_dq_task};
