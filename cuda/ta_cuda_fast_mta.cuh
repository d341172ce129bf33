/*
 * The fast MTA kernels' shared pieces (cuda/ta_cuda_fast_mta.cu, the forward;
 * cuda/ta_cuda_fast_mta_bwd.cu, the backward): the parameter struct of the
 * fold's workspace regions, the staging helpers, and the two prep kernels
 * both passes run first (kf, the filtered keys; diag / edge, the convolved
 * scores computed directly next to the diagonal and the window's start).
 * The formulas are in cuda/ta_cuda_fast_mta.cu's header and docs/cuda.md
 * section 7, "Fast MTA". Not installed; each including file gets its own
 * copy (an anonymous namespace).
 */
#ifndef TA_CUDA_FAST_MTA_CUH
#define TA_CUDA_FAST_MTA_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

/* The sm_90a attention kernel of the fast MTA forward (tile_config 5;
 * cuda/ta_cuda_fast_mta_sm90.cu): its launch shape, filled by
 * ta_cuda_fast_mta_wg_launch for head dim d (0: none). The kernel exists only
 * in sm_90a code; the host launches it only on an sm_90 device of a build
 * that holds that code (ta_cuda_fast_is_sm90). */
struct ta_cuda_fast_mta_wg {
    const void *kernel;
    size_t smem;
    int threads, block_m, block_n;
};
int ta_cuda_fast_mta_wg_launch(int32_t d, int bf16, ta_cuda_fast_mta_wg *w);

namespace {

/* The base, and the workspace regions the three kernels share. */
struct ta_fast_mta_params : ta_cuda_params {
    uint16_t *kf;   /* [B, H, S_k, c_q, D] storage type */
    float *diag;    /* [B, H, S_q, band] f32: C next to the diagonal; NULL when band == 0 */
    float *edge;    /* [B, H, S_q, edge_n] f32: C from the window's start; NULL without */
    int32_t band;   /* E = P + c_q - 1 */
    int32_t edge_n; /* P with a left window bound, else 0 */
};

/* s = vals[row][idx] at this lane's entries with 0 <= idx < n: idx = row + off
 * - j (EDGE false: the E keys left of the diagonal, from diag) or j - (row +
 * off - window_left) (EDGE true: the P keys from the window's start on, from
 * edge). The caller skips tiles where no row of the warp has one. */
template <int NT, bool EDGE>
__device__ __forceinline__ void ta_fast_mta_direct(float (&s)[4 * NT], const float *vals, int32_t n,
                                                   int32_t anchor, int32_t seq_q, int32_t ra,
                                                   int32_t col0, int tq) {
#pragma unroll
    for (int i = 0; i < 4 * NT; ++i) {
        const int32_t row = ra + 8 * ((i >> 1) & 1);
        const int32_t j = col0 + 8 * (i / 4) + 2 * tq + (i & 1);
        const int32_t idx = EDGE ? j - (row + anchor) : row + anchor - j;
        if (row < seq_q && idx >= 0 && idx < n) s[i] = vals[(int64_t)row * n + idx];
    }
}

/* A Q tile's share of the fold's regions (both forward attention kernels:
 * cuda/ta_cuda_fast_mta.cu, cuda/ta_cuda_fast_mta_sm90.cu). */
struct ta_fast_mta_regions {
    int64_t kf_off;           /* kf of the tile's (batch, query head): elements into p.kf */
    const float *diag, *edge; /* its [S_q][band] and [S_q][edge_n], or NULL */
    int32_t lo_off;           /* lo(r) = r + lo_off, the window's start (edge_n > 0) */
};

__device__ __forceinline__ ta_fast_mta_regions ta_fast_mta_regions_of(const ta_fast_mta_params &p,
                                                                      const ta_cuda_q_tile &at) {
    const int64_t head = (int64_t)(p.batch_begin + at.b_local) * p.heads_q + at.h;
    ta_fast_mta_regions g;
    g.kf_off = head * p.t.seq_k * p.conv_q * p.head_dim;
    g.diag = p.diag ? p.diag + head * p.t.seq_q * p.band : nullptr;
    g.edge = p.edge ? p.edge + head * p.t.seq_q * p.edge_n : nullptr;
    g.lo_off = p.edge_n > 0 ? p.t.diag_offset - p.t.window_left : 0;
    return g;
}

/* Step 1b of a K tile of 8 NT keys from col0 for a warp's 16 rows from wrow0
 * (this lane's ra, ra + 8): s = diag where a row reaches within E of the
 * tile's keys, s = edge where (a left window bound) a row's window starts
 * within P of them; both tests warp-uniform. */
template <int NT>
__device__ __forceinline__ void ta_fast_mta_direct_tile(float (&s)[4 * NT],
                                                        const ta_fast_mta_params &p,
                                                        const ta_fast_mta_regions &g, int32_t wrow0,
                                                        int32_t ra, int32_t col0, int tq) {
    const int32_t col1 = col0 + 8 * NT - 1;
    if (g.diag && wrow0 + p.t.diag_offset - col1 < p.band)
        ta_fast_mta_direct<NT, false>(s, g.diag, p.band, p.t.diag_offset, p.t.seq_q, ra, col0, tq);
    if (g.edge && col0 < wrow0 + 15 + g.lo_off + p.edge_n && col1 >= wrow0 + g.lo_off)
        ta_fast_mta_direct<NT, true>(s, g.edge, p.edge_n, g.lo_off, p.t.seq_q, ra, col0, tq);
}

/* ---- the prep kernels' pieces ---- */

constexpr int PREP_THREADS = 256;
constexpr int KF_ROWS = 64;   /* keys per block of the kf kernel */
constexpr int DIAG_ROWS = 32; /* query rows per block of the diag kernel */

/* A block's (batch entry, query head, row block) of a prep grid
 * [batch_count][heads_q][n_blocks]. */
struct ta_fast_mta_prep_tile {
    int32_t b_local, h, blk;
};

__device__ __forceinline__ ta_fast_mta_prep_tile ta_fast_mta_prep_at(const ta_fast_mta_params &p,
                                                                     int64_t tile,
                                                                     int32_t n_blocks) {
    ta_fast_mta_prep_tile x;
    x.blk = (int32_t)(tile % n_blocks);
    x.h = (int32_t)((tile / n_blocks) % p.heads_q);
    x.b_local = (int32_t)(tile / n_blocks / p.heads_q);
    return x;
}

/* Query row r of the (batch, head) slice, -q_history <= r < S_q (the history
 * rows from q_hist), or NULL for the zero padding. */
__device__ __forceinline__ const uint16_t *ta_fast_mta_q_row(const ta_fast_mta_params &p,
                                                             const ta_tile_ctx &c, int32_t r) {
    int in_hist;
    int64_t at;
    if (r < -p.t.q_history || r >= p.t.seq_q) return nullptr;
    at = ta_tile_q_row(&p.t, &p.lay, &c, r, &in_hist);
    return static_cast<const uint16_t *>(in_hist ? p.q_hist : p.q) + at;
}

/* Key row j of the kv slice, 0 <= j < L, or NULL outside. */
__device__ __forceinline__ const uint16_t *ta_fast_mta_k_row(const ta_fast_mta_params &p,
                                                             const ta_tile_ctx &c, int32_t j) {
    if (j < 0 || j >= c.key_len) return nullptr;
    return static_cast<const uint16_t *>(p.k) + c.k + (int64_t)j * p.lay.k.seq;
}

/* rows [first, first + n) -> shared [n][D + 8] storage elements, 16 bytes per
 * step; a row whose source is NULL (q: ta_fast_mta_q_row; else k) reads zeros. */
template <bool Q_SIDE>
__device__ __forceinline__ void ta_fast_mta_stage(uint16_t *dst, const ta_fast_mta_params &p,
                                                  const ta_tile_ctx &c, int32_t first, int32_t n) {
    const int32_t ch_n = p.head_dim / 8, ld = p.head_dim + 8;
    for (int i = (int)threadIdx.x; i < n * ch_n; i += PREP_THREADS) {
        const int32_t r = i / ch_n, ch = i % ch_n;
        const uint16_t *src =
            Q_SIDE ? ta_fast_mta_q_row(p, c, first + r) : ta_fast_mta_k_row(p, c, first + r);
        *reinterpret_cast<uint4 *>(dst + r * ld + 8 * ch) =
            src ? *reinterpret_cast<const uint4 *>(src + 8 * ch) : make_uint4(0, 0, 0, 0);
    }
}

/* 8 storage elements (16 bytes) -> f32 (exact). */
template <bool BF16> __device__ __forceinline__ void ta_fast_mta_widen8(uint4 x, float (&f)[8]) {
    ta_fast_unpack<BF16>(x.x, &f[0], &f[1]);
    ta_fast_unpack<BF16>(x.y, &f[2], &f[3]);
    ta_fast_unpack<BF16>(x.z, &f[4], &f[5]);
    ta_fast_unpack<BF16>(x.w, &f[6], &f[7]);
}

/* ---- 1. kf ---- */

/* kf[b, h, j, a, :] = sum_{b' ascending} w[h][a][b'] k[j + b' - P] (keys outside
 * [0, L) are zeros: fmaf(w, 0, acc), as the exact kernels visit masked terms),
 * f32 fmaf from 0, rounded once to the storage type. A block stages its
 * KF_ROWS keys with their halos, k rows [j0 - P, j0 + KF_ROWS + P), and w[h]
 * in shared memory; a thread makes 4 consecutive keys x 8 features for each
 * a, reading each staged row once for the 4 (row r feeds key jj with b' = r -
 * jj, so each key's terms still come b' ascending). Dynamic shared memory:
 * ta_fast_mta_kf_smem. Grid: [batch_count][heads_q][ceil(S_k / KF_ROWS)]. */
template <bool BF16>
__global__ void __launch_bounds__(PREP_THREADS)
    ta_fast_mta_kf_kernel(const __grid_constant__ ta_fast_mta_params p) {
    extern __shared__ float4 ta_fast_mta_prep_smem[];
    const int32_t D = p.head_dim, cq = p.conv_q, ck = p.conv_k, half = (ck - 1) / 2;
    const int32_t n_jb = (p.t.seq_k + KF_ROWS - 1) / KF_ROWS, ch_n = D / 8, ld = D + 8;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_jb;
    uint16_t *rows = reinterpret_cast<uint16_t *>(ta_fast_mta_prep_smem);
    float *w = reinterpret_cast<float *>(rows + (KF_ROWS + ck - 1) * ld);
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_fast_mta_prep_tile x = ta_fast_mta_prep_at(p, tile, n_jb);
        const ta_tile_ctx c = ta_cuda_context(p, x.b_local, x.h, 0);
        const int32_t j0 = x.blk * KF_ROWS;
        const int64_t kf_head =
            ((int64_t)(p.batch_begin + x.b_local) * p.heads_q + x.h) * p.t.seq_k;
        __syncthreads(); /* the previous tile is done with the staged rows */
        ta_fast_mta_stage<false>(rows, p, c, j0 - half, KF_ROWS + ck - 1);
        for (int i = (int)threadIdx.x; i < cq * ck; i += PREP_THREADS)
            w[i] = p.conv_w[(int64_t)x.h * cq * ck + i];
        __syncthreads();
        for (int i = (int)threadIdx.x; i < KF_ROWS / 4 * ch_n; i += PREP_THREADS) {
            const int32_t jl = 4 * (i / ch_n), ch = i % ch_n; /* keys j0 + jl .. + 3 */
            for (int32_t a = 0; a < cq; ++a) {
                float acc[4][8];
#pragma unroll
                for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        acc[jj][e] = 0.0f;
                for (int32_t r = 0; r < ck + 3; ++r) { /* staged row jl + r */
                    float f[8];
                    ta_fast_mta_widen8<BF16>(
                        *reinterpret_cast<const uint4 *>(rows + (jl + r) * ld + 8 * ch), f);
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj) {
                        const int32_t bb = r - jj;
                        if (bb < 0 || bb >= ck) continue;
                        const float wv = w[a * ck + bb];
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            acc[jj][e] = __fmaf_rn(wv, f[e], acc[jj][e]);
                    }
                }
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    const int32_t j = j0 + jl + jj;
                    if (j < p.t.seq_k)
                        *reinterpret_cast<uint4 *>(p.kf + ((kf_head + j) * cq + a) * D + 8 * ch) =
                            make_uint4(ta_fast_pack<BF16>(acc[jj][0], acc[jj][1]),
                                       ta_fast_pack<BF16>(acc[jj][2], acc[jj][3]),
                                       ta_fast_pack<BF16>(acc[jj][4], acc[jj][5]),
                                       ta_fast_pack<BF16>(acc[jj][6], acc[jj][7]));
                }
            }
        }
    }
}

/* ---- 2. diag (and edge) ---- */

/* Key rows the band's product reads from kbase: row tiles of 16 over the n_q
 * rows, tile rt reading the 16 ceil((15 + ns) / 16) keys from 16 rt on. */
__host__ __device__ __forceinline__ int32_t ta_fast_mta_band_keys(int32_t n_q, int32_t ns) {
    return 16 * ((n_q + 15) / 16 - 1) + 16 * ((30 + ns) / 16);
}

/* band[rho][s] = the raw score S~ of q row rfirst + rho (staged in sq) with
 * key kbase + rho + s, for rho < n_q, s < ns: 0 where the pair is not
 * visible (ta_tiling_visible: the sequence, causal, the window); else the dot
 * product on the tensor cores (mma.sync m16n8k16, f32 accumulate): a warp per
 * (16 rows, 16 keys) block of the rows' band, the entries outside the band
 * dropped. The keys [kbase, kbase + ta_fast_mta_band_keys(n_q, ns)) are
 * staged into sk here; the product also reads sq rows up to 16 ceil(n_q /
 * 16) (past n_q: the caller's sk region follows sq, and those rows' entries
 * are dropped). Ends with a block barrier. */
template <bool BF16>
__device__ __forceinline__ void ta_fast_mta_band(float *band, int32_t ns, const uint16_t *sq,
                                                 uint16_t *sk, const ta_fast_mta_params &p,
                                                 const ta_tile_ctx &c, int32_t rfirst, int32_t n_q,
                                                 int32_t kbase) {
    const int32_t D = p.head_dim, ld = D + 8, n_rt = (n_q + 15) / 16, n_kg = (30 + ns) / 16;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    ta_fast_mta_stage<false>(sk, p, c, kbase, ta_fast_mta_band_keys(n_q, ns));
    __syncthreads();
    for (int job = warp; job < n_rt * n_kg; job += PREP_THREADS / 32) {
        const int32_t rt = job / n_kg, kg = job % n_kg;
        const uint32_t a0 = ta_fast_smem_addr(sq + (16 * rt + (lane & 15)) * ld + (lane >> 4) * 8);
        const uint32_t b0 = ta_fast_smem_addr(
            sk + (16 * (rt + kg) + (lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8);
        float acc[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
            acc[e] = 0.0f;
        for (int32_t ks = 0; ks < D / 16; ++ks) {
            uint32_t af[4], bf[4];
            ta_fast_ldm_x4(af, a0 + 32u * (uint32_t)ks);
            ta_fast_ldm_x4(bf, b0 + 32u * (uint32_t)ks);
            ta_fast_mma<BF16>(&acc[0], af, bf[0], bf[1]);
            ta_fast_mma<BF16>(&acc[4], af, bf[2], bf[3]);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) { /* the accumulator layout of cuda/ta_cuda_fast.cuh */
            const int32_t row = (lane >> 2) + 8 * ((i >> 1) & 1);
            const int32_t rho = 16 * rt + row,
                          s = 16 * kg + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1) - row;
            if (rho < n_q && s >= 0 && s < ns)
                band[rho * ns + s] =
                    ta_tiling_visible(&p.t, rfirst + rho, kbase + rho + s, c.key_len) ? acc[i]
                                                                                      : 0.0f;
        }
    }
    __syncthreads();
}

/* Shared memory of the diag kernel, in floats from its base: the two bands,
 * each rounded up to 16 bytes (the staged rows after them are read 16 bytes
 * at a time), then q [n_q][D + 8] and k [ta_fast_mta_band_keys(n_q, max(NE, NF))][D + 8]. */
struct ta_fast_mta_diag_layout {
    int32_t n_q, ne, nf, band2, rows; /* float offsets: band 0, band2; q at rows */
};

__host__ __device__ __forceinline__ ta_fast_mta_diag_layout ta_fast_mta_diag_at(int32_t cq,
                                                                                int32_t ck,
                                                                                int32_t band,
                                                                                int32_t edge) {
    ta_fast_mta_diag_layout l;
    l.n_q = DIAG_ROWS + cq - 1;
    l.ne = 2 * band;
    l.nf = edge > 0 ? 3 * ((ck - 1) / 2) + cq - 1 : 0;
    l.band2 = (l.n_q * l.ne + 3) / 4 * 4;
    l.rows = l.band2 + (l.n_q * l.nf + 3) / 4 * 4;
    return l;
}

/* For the rows [r0, r0 + DIAG_ROWS) of a block (the header's formulas):
 * diag[b, h, i, delta], delta < E, from band[r][e] = S~[r][r + off + e] for e
 * = 1 - 2E .. 0 (every term of these entries: e <= 0); with a left window
 * bound (window_left = wl >= 0) also edge[b, h, i, g], g < P (key j = lo(i) +
 * g, lo(i) = i + off - wl), from band2[r][f] = S~[r][r + off - wl + f], f =
 * -P .. 2P + c_q - 2. Each entry sums its terms a ascending, b ascending,
 * fmaf from 0 (the hidden ones are 0 in the bands). Grid:
 * [batch_count][heads_q][ceil(S_q / DIAG_ROWS)]; dynamic shared memory:
 * ta_fast_mta_diag_smem. */
template <bool BF16>
__global__ void __launch_bounds__(PREP_THREADS)
    ta_fast_mta_diag_kernel(const __grid_constant__ ta_fast_mta_params p) {
    extern __shared__ float4 ta_fast_mta_prep_smem[];
    const int32_t cq = p.conv_q, ck = p.conv_k, half = (ck - 1) / 2, ld = p.head_dim + 8;
    const int32_t E = p.band, P = p.edge_n, off = p.t.diag_offset, halo = cq - 1;
    const ta_fast_mta_diag_layout L = ta_fast_mta_diag_at(cq, ck, E, P);
    const int32_t n_rb = (p.t.seq_q + DIAG_ROWS - 1) / DIAG_ROWS;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_rb;
    float *band = reinterpret_cast<float *>(ta_fast_mta_prep_smem); /* [n_q][NE] */
    float *band2 = band + L.band2;                                  /* [n_q][NF] */
    uint16_t *sq = reinterpret_cast<uint16_t *>(band + L.rows);     /* [n_q][ld] */
    uint16_t *sk = sq + L.n_q * ld;
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_fast_mta_prep_tile x = ta_fast_mta_prep_at(p, tile, n_rb);
        const ta_tile_ctx c = ta_cuda_context(p, x.b_local, x.h, 0);
        const float *w = p.conv_w + (int64_t)x.h * cq * ck;
        const int32_t r0 = x.blk * DIAG_ROWS;
        const int64_t rows0 = ((int64_t)(p.batch_begin + x.b_local) * p.heads_q + x.h) * p.t.seq_q;
        __syncthreads(); /* the previous tile is done with shared memory */
        ta_fast_mta_stage<true>(sq, p, c, r0 - halo, L.n_q);
        ta_fast_mta_band<BF16>(band, L.ne, sq, sk, p, c, r0 - halo, L.n_q,
                               r0 - halo + off + 1 - L.ne);
        if (P > 0)
            ta_fast_mta_band<BF16>(band2, L.nf, sq, sk, p, c, r0 - halo, L.n_q,
                                   r0 - halo + off - p.t.window_left - P);
        for (int i = (int)threadIdx.x; i < DIAG_ROWS * E; i += PREP_THREADS) {
            const int32_t ri = i / E, delta = i % E, row = r0 + ri;
            float acc = 0.0f;
            if (row >= p.t.seq_q) continue;
            for (int32_t a = 0; a < cq; ++a) {
                /* e = b - P + c_q - 1 - a - delta <= 0: b <= b_last */
                const int32_t b_last = delta + half + a - (cq - 1);
                for (int32_t bb = 0; bb < ck && bb <= b_last; ++bb) {
                    const int32_t e = bb - half + cq - 1 - a - delta;
                    acc = __fmaf_rn(w[a * ck + bb], band[(ri + a) * L.ne + e + L.ne - 1], acc);
                }
            }
            p.diag[(rows0 + row) * E + delta] = acc;
        }
        for (int i = (int)threadIdx.x; i < DIAG_ROWS * P; i += PREP_THREADS) {
            const int32_t ri = i / P, g = i % P, row = r0 + ri;
            float acc = 0.0f;
            if (row >= p.t.seq_q) continue;
            for (int32_t a = 0; a < cq; ++a)
                for (int32_t bb = 0; bb < ck; ++bb) /* f + P = g + b + c_q - 1 - a */
                    acc = __fmaf_rn(w[a * ck + bb], band2[(ri + a) * L.nf + g + bb + cq - 1 - a],
                                    acc);
            p.edge[(rows0 + row) * P + g] = acc;
        }
    }
}

/* Dynamic shared memory of the prep kernels (bytes). */
inline size_t ta_fast_mta_kf_smem(const ta_problem *pr) {
    return (size_t)(KF_ROWS + pr->conv_k - 1) * (size_t)(pr->head_dim + 8) * 2u +
           4u * (size_t)pr->conv_q * (size_t)pr->conv_k;
}
inline size_t ta_fast_mta_diag_smem(const ta_problem *pr, int32_t band, int32_t edge) {
    const ta_fast_mta_diag_layout l = ta_fast_mta_diag_at(pr->conv_q, pr->conv_k, band, edge);
    const int32_t nk = ta_fast_mta_band_keys(l.n_q, l.ne > l.nf ? l.ne : l.nf);
    return (size_t)l.rows * 4u + (size_t)(l.n_q + nk) * (size_t)(pr->head_dim + 8) * 2u;
}

/* Query rows [first, first + rows) -> shared [rows][D + 8] by cp.async (no
 * commit): a Q tile with its halo above (history rows from q_hist, zeros
 * outside [-q_history, S_q)). */
template <int D, int THREADS>
__device__ __forceinline__ void ta_fast_mta_load_q(uint16_t *dst, const ta_fast_mta_params &p,
                                                   const ta_tile_ctx &c, int32_t first,
                                                   int32_t rows) {
    constexpr int LD = D + 8, CH = D / 8;
    for (int i = (int)threadIdx.x; i < rows * CH; i += THREADS) {
        const int rho = i / CH, ch = i % CH;
        const uint16_t *src = ta_fast_mta_q_row(p, c, first + rho);
        ta_fast_cp16(ta_fast_smem_addr(dst + rho * LD + 8 * ch), src ? src + 8 * ch : p.q,
                     src ? 16 : 0);
    }
}

} /* namespace */

#endif /* TA_CUDA_FAST_MTA_CUH */
