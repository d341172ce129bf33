/*
 * CUDA MTA backward, TA_PRECISION_FAST, f16 / bf16 storage: the gradients of
 * the fold (cuda/ta_cuda_fast_mta.cu's header has the forward and its
 * notation; docs/cuda.md section 7, "Fast MTA: the backward").
 *
 * The forward computed each visible convolved score (raw, unscaled; the
 * softmax takes scale C) one of two ways:
 *
 *   fold    C[i][j] = sum_a q_{i'_a} . kf_a[j],  kf_a[j] = sum_b w[a][b] k_{j'_b}   delta >= E
 *   direct  C[i][j] = diag[i][delta] = sum of w[a][b] S~[i'_a][j'_b] over the
 *           visible terms (S~ = q . k)                                           delta < E
 *
 * (delta = i + off - j, E = P + c_q - 1, i'_a = i - (c_q-1-a), j'_b = j + b - P).
 * With dC = scale P (dP - D) (dP = dO v^T, D_i = <dO_i, o_i>) the gradient of
 * each entry flows back through the formula that made it:
 *
 *   fold:    dq_r     += sum_a sum_j dC[r + c_q-1-a][j] kf_a[j]
 *            dkf_a[j] += sum_i dC[i][j] q_{i'_a}
 *            then dk_m = sum_a sum_b w[a][b] dkf_a[m - b + P],
 *                 dw[a][b] = sum_j dkf_a[j] . k_{j'_b}
 *   direct:  g[i][delta] = dC there; dS~[r][m] = sum w[a][b] g[...] over the
 *            entries whose terms read the visible pair (r, m) (a band of 2E
 *            keys left of each row's diagonal), then dq_r += sum_m dS~ k_m,
 *            dk_m += sum_r dS~ q_r, dw[a][b] += sum g S~[i'_a][j'_b].
 *
 * Kernels, in order on the stream (per batch chunk; the last one after all):
 *   0. delta (the fast SDPA backward's, cuda/ta_cuda_fast_bwd_sm90.cu);
 *   1. kf and 2. diag: the forward's (cuda/ta_cuda_fast_mta.cuh);
 *   3. ta_fmb_g_kernel: g [B, H, S_q, E] f32 (one thread per entry), and
 *      with a binding window start (edge_n = P > 0) g_edge [B, H, S_q, P],
 *      dC at the P entries from each row's window start on (the forward's
 *      edge entries; an entry that is also a diag one stays in g);
 *   4. ta_fmb_band_kernel: dsb [B, H, S_q, 2E] f32 (dS~ of the band, key
 *      r + off + s - (2E - 1) for s < 2E), dq_band [B, H, S_q, D] f32 and the
 *      band's dw partials per 32-row block; with a window start the same for
 *      the window start's band (dsb2 [B, H, S_q, 3P + c_q - 1], keys from
 *      r + off - wl - P), added into dq_band and the partials;
 *   5. ta_fmb_dq_kernel: per 64-row Q tile, the fold's scores (c_q mma
 *      products with kf), P and dC for the tile's rows and the 16 below
 *      (a fifth warp: dq_r reads dC rows r .. r + c_q - 1), dC in shared
 *      memory, dq += dC(rows shifted) kf_a on mma.sync, + dq_band, stored;
 *   6. ta_fmb_kv_kernel: per 32 keys (and a group of a's), the heads of the
 *      GQA group and the Q tiles that see the keys ascending: s^T, P^T, dC^T
 *      (transposed scores), then dv += P^T dO and dkf_a += dC^T q(shifted) on
 *      mma.sync; dkf [B, H, S_k, c_q, D] f32, dv stored. On sm_90 (tile_config
 *      5, and 0) at D = 64 and 128 ta_fast_mta_kv_wg_kernel instead
 *      (cuda/ta_cuda_fast_mta_sm90.cu): the same per 32 keys and Q tiles of
 *      128 rows on wgmma, the accumulators transposed (features x keys);
 *   7. ta_fmb_dk_kernel: dk from dkf (the key-direction conv) and dsb, dsb2 (the
 *      band), summed over the group's heads; the fold's dw partials per 32
 *      keys;
 *   8. ta_fmb_dw_kernel: dconv_w = the partials summed in a fixed order.
 * Deterministic (no atomics, every sum in a fixed order), not bit-identical to
 * REF. Problems: ta_cuda_fast_mta_bwd_path (cuda/ta_cuda_layout.c); rows off
 * 16 bytes or a kernel's shared memory past the device's limit run the exact
 * kernels (the workspace holds their regions too).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_fast_mta.cuh"
#include "ta_cuda_fast_mta_bwd.cuh"
#include "ta_cuda_host.cuh"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

/* ---- warp-level products on mma.sync (operands in shared memory) ---- */

/* acc[16 x 8 NB] += A B^T: A 16 rows x 16 KS (row-major from a, row stride
 * lda elements), B 8 NB rows x 16 KS (row-major from b, ldb). NB even. */
template <int KS, int NB, bool BF16>
TA_FAST_FN void ta_fmb_mma_nt(float (&acc)[4 * NB], const uint16_t *a, int lda, const uint16_t *b,
                              int ldb, int lane) {
    const uint32_t a0 = ta_fast_smem_addr(a + (lane & 15) * lda + (lane >> 4) * 8);
    const uint32_t b0 =
        ta_fast_smem_addr(b + ((lane & 7) + ((lane >> 4) << 3)) * ldb + ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t af[4];
        ta_fast_ldm_x4(af, a0 + 32u * (uint32_t)ks);
#pragma unroll
        for (int nn = 0; nn < NB / 2; ++nn) {
            uint32_t bf[4];
            ta_fast_ldm_x4(bf, b0 + 2u * (uint32_t)(16 * nn * ldb + 16 * ks));
            ta_fast_mma<BF16>(&acc[8 * nn], af, bf[0], bf[1]);
            ta_fast_mma<BF16>(&acc[8 * nn + 4], af, bf[2], bf[3]);
        }
    }
}

/* acc[16 x 8 NB] += A B: A as above, B 16 KS rows (k) x 8 NB columns
 * row-major from b (ldb), by ldmatrix.trans. NB even. */
template <int KS, int NB, bool BF16>
TA_FAST_FN void ta_fmb_mma_nn(float (&acc)[4 * NB], const uint16_t *a, int lda, const uint16_t *b,
                              int ldb, int lane) {
    const uint32_t a0 = ta_fast_smem_addr(a + (lane & 15) * lda + (lane >> 4) * 8);
    const uint32_t b0 = ta_fast_smem_addr(b + (lane & 15) * ldb + (lane >> 4) * 8);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t af[4];
        ta_fast_ldm_x4(af, a0 + 32u * (uint32_t)ks);
#pragma unroll
        for (int dn = 0; dn < NB / 2; ++dn) {
            uint32_t bf[4];
            ta_fast_ldm_x4_t(bf, b0 + 2u * (uint32_t)(16 * ks * ldb + 16 * dn));
            ta_fast_mma<BF16>(&acc[8 * dn], af, bf[0], bf[1]);
            ta_fast_mma<BF16>(&acc[8 * dn + 4], af, bf[2], bf[3]);
        }
    }
}

/* A warp's 16 x 8 NB accumulator (the layout of cuda/ta_cuda_fast.cuh) ->
 * shared [16][ld] from dst, rounded to the storage type. */
template <int NB, bool BF16>
TA_FAST_FN void ta_fmb_store_acc(uint16_t *dst, int ld, const float (&acc)[4 * NB], int lane) {
#pragma unroll
    for (int i = 0; i < 2 * NB; ++i) { /* element pairs (2 i, 2 i + 1) */
        const int row = (lane >> 2) + 8 * (i & 1), col = 8 * (i >> 1) + 2 * (lane & 3);
        *reinterpret_cast<uint32_t *>(dst + row * ld + col) =
            ta_fast_pack<BF16>(acc[2 * i], acc[2 * i + 1]);
    }
}

/* ---- 3. g: dC at the direct entries ---- */

/* scale P (dP - D_i) of the visible entry (row, j) whose convolved score is x,
 * from the entry's dO row and v row (global or staged): P = 2^(x scale log2 e
 * - lse log2 e), dP = <dO_row, v_j> (f32 fmaf, d ascending). */
template <bool BF16>
__device__ __forceinline__ float ta_fmb_dc_rows(const ta_fmb_params &p, const ta_tile_ctx &c,
                                                int32_t row, const uint16_t *dor,
                                                const uint16_t *vr, float x) {
    const float pr = ta_fast_exp2(__fmaf_rn(x, p.scale * TA_LOG2E, -p.lse[c.lse + row] * TA_LOG2E));
    float dp = 0.0f;
    for (int32_t ch = 0; ch < p.head_dim / 8; ++ch) {
        float fo[8], fv[8];
        ta_fast_mta_widen8<BF16>(*reinterpret_cast<const uint4 *>(dor + 8 * ch), fo);
        ta_fast_mta_widen8<BF16>(*reinterpret_cast<const uint4 *>(vr + 8 * ch), fv);
#pragma unroll
        for (int e = 0; e < 8; ++e)
            dp = __fmaf_rn(fo[e], fv[e], dp);
    }
    return p.scale * pr * (dp - p.delta[c.lse + row]);
}

/* ta_fmb_dc_rows with the rows read from global memory. */
template <bool BF16>
__device__ __forceinline__ float ta_fmb_dc_entry(const ta_fmb_params &p, const ta_tile_ctx &c,
                                                 int32_t row, int32_t j, float x) {
    return ta_fmb_dc_rows<BF16>(
        p, c, row, static_cast<const uint16_t *>(p.d_o) + c.d_o + (int64_t)row * p.lay.d_o.seq,
        static_cast<const uint16_t *>(p.v) + c.v + (int64_t)j * p.lay.v.seq, x);
}

/* The sum of x over the warp's lanes by a fixed xor butterfly (every lane
 * ends with the same bits). */
__device__ __forceinline__ float ta_fmb_warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Shared memory of the g kernel: dO rows [DIAG_ROWS][D + 8] and v rows
 * [DIAG_ROWS + E - 1][D + 8] (storage). */
static size_t ta_fmb_g_smem(const ta_problem *pr, int32_t band) {
    return (size_t)(2 * DIAG_ROWS + band - 1) * (size_t)(pr->head_dim + 8) * 2u;
}

/* g[b, h, i, delta] = ta_fmb_dc_entry's value for key j = i + off - delta
 * with the diag value when (i, j) is visible, else 0; with a binding window
 * start also g_edge[b, h, i, g] for key j = i + off - wl + g with the edge
 * value (0 when hidden, or when delta = wl - g < E: a diag entry, whose g
 * holds it). The diag entries read the block's dO rows and the v rows they
 * reach (r0 + off - (E - 1) ..) staged in shared memory by whole rows
 * (ta_fmb_dc_rows; the rarer edge entries read global memory:
 * ta_fmb_dc_entry). Grid: [batch_count][heads_q][ceil(S_q / DIAG_ROWS)], a
 * thread per entry; dynamic shared memory: ta_fmb_g_smem. */
template <bool BF16>
__global__ void __launch_bounds__(PREP_THREADS)
    ta_fmb_g_kernel(const __grid_constant__ ta_fmb_params p) {
    extern __shared__ float4 ta_fmb_prep_smem[];
    const int32_t E = p.band, EP = p.edge_n, off = p.t.diag_offset, wl = p.t.window_left;
    const int32_t n_rb = (p.t.seq_q + DIAG_ROWS - 1) / DIAG_ROWS, ch_n = p.head_dim / 8;
    const int32_t ld = p.head_dim + 8, nv = DIAG_ROWS + E - 1;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_rb;
    uint16_t *sdo = reinterpret_cast<uint16_t *>(ta_fmb_prep_smem), *sv = sdo + DIAG_ROWS * ld;
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_fast_mta_prep_tile x = ta_fast_mta_prep_at(p, tile, n_rb);
        const ta_tile_ctx c = ta_cuda_context(p, x.b_local, x.h, 0);
        const int64_t rows0 = ((int64_t)(p.batch_begin + x.b_local) * p.heads_q + x.h) * p.t.seq_q;
        const int32_t r0 = x.blk * DIAG_ROWS, kb = r0 + off - (E - 1);
        __syncthreads(); /* the previous tile is done with the staged rows */
        for (int i = (int)threadIdx.x; i < (DIAG_ROWS + nv) * ch_n; i += PREP_THREADS) {
            const int32_t r = i / ch_n, ch = i % ch_n;
            const uint16_t *src = nullptr;
            if (r < DIAG_ROWS) {
                if (r0 + r < p.t.seq_q)
                    src = static_cast<const uint16_t *>(p.d_o) + c.d_o +
                          (int64_t)(r0 + r) * p.lay.d_o.seq;
            } else if (kb + r - DIAG_ROWS >= 0 && kb + r - DIAG_ROWS < c.key_len) {
                src = static_cast<const uint16_t *>(p.v) + c.v +
                      (int64_t)(kb + r - DIAG_ROWS) * p.lay.v.seq;
            }
            *reinterpret_cast<uint4 *>(sdo + r * ld + 8 * ch) =
                src ? *reinterpret_cast<const uint4 *>(src + 8 * ch) : make_uint4(0, 0, 0, 0);
        }
        __syncthreads();
        for (int i = (int)threadIdx.x; i < DIAG_ROWS * E; i += PREP_THREADS) {
            const int32_t ri = i / E, delta = i % E, row = r0 + ri, j = row + off - delta;
            if (row >= p.t.seq_q) continue;
            p.g[(rows0 + row) * E + delta] =
                ta_tiling_visible(&p.t, row, j, c.key_len)
                    ? ta_fmb_dc_rows<BF16>(p, c, row, sdo + ri * ld, sv + (ri + E - 1 - delta) * ld,
                                           p.diag[(rows0 + row) * E + delta])
                    : 0.0f;
        }
        for (int i = (int)threadIdx.x; i < DIAG_ROWS * EP; i += PREP_THREADS) {
            const int32_t row = r0 + i / EP, ge = i % EP, j = row + off - wl + ge;
            const bool diag_entry = wl - ge >= 0 && wl - ge < E;
            if (row >= p.t.seq_q) continue;
            p.g_edge[(rows0 + row) * EP + ge] =
                !diag_entry && ta_tiling_visible(&p.t, row, j, c.key_len)
                    ? ta_fmb_dc_entry<BF16>(p, c, row, j, p.edge[(rows0 + row) * EP + ge])
                    : 0.0f;
        }
    }
}

/* ---- 4. the band: dsb, dq_band, dw partials ---- */

/* Shared memory of the band kernel, in floats from its base: band [n_q][NW],
 * g rows [DIAG_ROWS + c_q - 1][GW], dS~ rows [DIAG_ROWS][NW], the dw row
 * groups' sums [RG][c_q c_k] (each rounded up to 16 bytes), then q [n_q][D +
 * 8] and k [ta_fast_mta_band_keys(n_q, NW)][D + 8] (storage);
 * NW = max(2E, NF), GW = max(E, P): the diagonal's band, then (a binding
 * window start) the window start's, use the same regions in turn. RG =
 * ta_fmb_band_rg: the block's rows split into RG groups so that RG c_q c_k
 * threads share the dw terms. */
struct ta_fmb_band_layout {
    int32_t n_q, nw, gw, gs, ds, dwp, rows;
};

__host__ __device__ __forceinline__ int32_t ta_fmb_band_rg(int32_t ncw) {
    const int32_t rg = PREP_THREADS / ncw;
    return rg < 1 ? 1 : rg > 8 ? 8 : rg;
}

__host__ __device__ __forceinline__ ta_fmb_band_layout ta_fmb_band_at(int32_t cq, int32_t ck,
                                                                      int32_t band, int32_t edge) {
    const int32_t nf = edge > 0 ? 3 * ((ck - 1) / 2) + cq - 1 : 0;
    ta_fmb_band_layout l;
    l.n_q = DIAG_ROWS + cq - 1;
    l.nw = 2 * band > nf ? 2 * band : nf;
    l.gw = band > edge ? band : edge;
    l.gs = (l.n_q * l.nw + 3) / 4 * 4;
    l.ds = l.gs + ((DIAG_ROWS + cq - 1) * l.gw + 3) / 4 * 4;
    l.dwp = l.ds + (DIAG_ROWS * l.nw + 3) / 4 * 4;
    l.rows = l.dwp + (ta_fmb_band_rg(cq * ck) * cq * ck + 3) / 4 * 4;
    return l;
}

static size_t ta_fmb_band_smem(const ta_problem *pr, int32_t band, int32_t edge) {
    const ta_fmb_band_layout l = ta_fmb_band_at(pr->conv_q, pr->conv_k, band, edge);
    return (size_t)l.rows * 4u +
           (size_t)(l.n_q + ta_fast_mta_band_keys(l.n_q, l.nw)) * (size_t)(pr->head_dim + 8) * 2u;
}

/* One band of the rows [r0, r0 + DIAG_ROWS) (EDGE false: the diagonal's, W =
 * 2E keys from r + off - (2E - 1); true: the window start's, W = NF keys from
 * r + off - wl - P): band[rho][s] = S~ of q row r0 - (c_q-1) + rho with the
 * band's key s (the forward's diag kernel's bands; 0 where hidden), then
 *   dS~[r][s]  = sum_{a, b ascending} w[a][b] g[r + c_q-1-a][x] over the
 *                entries x whose term (a, b) reads the pair (diag: x = delta =
 *                c_q-1-a - e + b - P, e = s - (2E-1); edge: x = s - b - c_q
 *                + 1 + a), when the pair is visible, else 0 -> dsb / dsb2;
 *   dq_band[r] (+)= sum_{s ascending} dS~[r][s] k_s;
 *   dw[a][b]  += sum_{i, then x ascending} g[i][x] band[i'_a][s(a, b, x)].
 * Starts and ends with a block barrier. */
template <bool EDGE, bool BF16>
__device__ __forceinline__ void
ta_fmb_band_phase(const ta_fmb_params &p, const ta_tile_ctx &c, const ta_fmb_band_layout &L,
                  float *smem, const float *w, int32_t r0, int64_t head, float (&dw)[2]) {
    const int32_t cq = p.conv_q, ck = p.conv_k, half = (ck - 1) / 2, D = p.head_dim, ld = D + 8;
    const int32_t off = p.t.diag_offset, halo = cq - 1, ncw = cq * ck;
    const int32_t W = EDGE ? p.nf : 2 * p.band, G = EDGE ? p.edge_n : p.band;
    const int64_t rows0 = head * p.t.seq_q;
    const float *gsrc = EDGE ? p.g_edge : p.g;
    float *dsb = EDGE ? p.dsb2 : p.dsb;
    float *band = smem, *gs = smem + L.gs, *ds = smem + L.ds;
    const uint16_t *sq = reinterpret_cast<const uint16_t *>(smem + L.rows);
    uint16_t *sk = reinterpret_cast<uint16_t *>(smem + L.rows) + L.n_q * ld;
    const int32_t kbase = EDGE ? r0 - halo + off - p.t.window_left - half : r0 - halo + off + 1 - W;
    __syncthreads(); /* the previous phase is done with the regions */
    for (int i = (int)threadIdx.x; i < (DIAG_ROWS + cq - 1) * G; i += PREP_THREADS) {
        const int32_t row = r0 + i / G;
        gs[i] = row < p.t.seq_q ? gsrc[(rows0 + row) * G + i % G] : 0.0f;
    }
    /* stages k, fills band; ends with a barrier (gs ready too) */
    ta_fast_mta_band<BF16>(band, W, sq, sk, p, c, r0 - halo, L.n_q, kbase);
    for (int i = (int)threadIdx.x; i < DIAG_ROWS * W; i += PREP_THREADS) {
        const int32_t ri = i / W, s = i % W, row = r0 + ri;
        float acc = 0.0f;
        if (row < p.t.seq_q && ta_tiling_visible(&p.t, row, kbase + ri + halo + s, c.key_len))
            for (int32_t a = 0; a < cq; ++a) {
                /* x = base - b (EDGE) or base + b; only the b with 0 <= x < G */
                const int32_t base = EDGE ? s - cq + 1 + a : cq - 1 - a - (s - (W - 1)) - half;
                const int32_t b_lo =
                    EDGE ? (base - G + 1 > 0 ? base - G + 1 : 0) : (-base > 0 ? -base : 0);
                const int32_t b_hi =
                    EDGE ? (base + 1 < ck ? base + 1 : ck) : (G - base < ck ? G - base : ck);
                const float *ga = gs + (ri + cq - 1 - a) * G;
                for (int32_t bb = b_lo; bb < b_hi; ++bb)
                    acc = __fmaf_rn(w[a * ck + bb], ga[EDGE ? base - bb : base + bb], acc);
            }
        ds[ri * W + s] = acc;
        if (row < p.t.seq_q) dsb[(rows0 + row) * W + s] = acc;
    }
    __syncthreads();
    for (int i = (int)threadIdx.x; i < DIAG_ROWS * (D / 8); i += PREP_THREADS) {
        const int32_t ri = i / (D / 8), ch = i % (D / 8), row = r0 + ri;
        float4 *dst;
        float acc[8];
        if (row >= p.t.seq_q) continue;
        dst = reinterpret_cast<float4 *>(p.dq_band + (rows0 + row) * D + 8 * ch);
        if (EDGE) { /* the diagonal's share first, this thread's own element */
            const float4 x0 = dst[0], x1 = dst[1];
            acc[0] = x0.x, acc[1] = x0.y, acc[2] = x0.z, acc[3] = x0.w;
            acc[4] = x1.x, acc[5] = x1.y, acc[6] = x1.z, acc[7] = x1.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e)
                acc[e] = 0.0f;
        }
        for (int32_t s = 0; s < W; ++s) { /* the band's key s: staged ri + halo + s */
            const float d = ds[ri * W + s];
            float f[8];
            ta_fast_mta_widen8<BF16>(
                *reinterpret_cast<const uint4 *>(sk + (ri + halo + s) * ld + 8 * ch), f);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                acc[e] = __fmaf_rn(d, f[e], acc[e]);
        }
        dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    { /* dw: item (group rg, weight a, b) sums its rows ascending, x ascending */
        const int32_t rg_n = ta_fmb_band_rg(ncw), n_rows = p.t.seq_q - r0;
        float *dwp = smem + L.dwp;
        for (int i = (int)threadIdx.x; i < rg_n * ncw; i += PREP_THREADS) {
            const int32_t rg = i / ncw, a = (i % ncw) / ck, bb = i % ck;
            const int32_t ri_lo = rg * DIAG_ROWS / rg_n, ri_end = (rg + 1) * DIAG_ROWS / rg_n;
            const int32_t ri_hi = ri_end < n_rows ? ri_end : n_rows;
            /* the diagonal's band: sb <= W - 1 for x >= bb - half + c_q - 1 - a */
            const int32_t x_lo =
                EDGE ? 0 : (bb - half + cq - 1 - a > 0 ? bb - half + cq - 1 - a : 0);
            const int32_t sb0 = EDGE ? bb + cq - 1 - a : bb - half + cq - 1 - a + W - 1;
            float acc = 0.0f;
            for (int32_t ri = ri_lo; ri < ri_hi; ++ri) {
                const float *gr = gs + ri * G, *br = band + (ri + a) * W + sb0;
#pragma unroll 4
                for (int32_t x = x_lo; x < G; ++x)
                    acc = __fmaf_rn(gr[x], br[EDGE ? x : -x], acc);
            }
            dwp[i] = acc;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 2; ++k) { /* the groups in order into the thread's weights */
            const int i = (int)threadIdx.x + PREP_THREADS * k;
            if (i < ncw)
                for (int32_t rg = 0; rg < rg_n; ++rg)
                    dw[k] += dwp[rg * ncw + i];
        }
    }
    __syncthreads();
}

/* The band kernel: for the rows [r0, r0 + DIAG_ROWS) of a block, the
 * diagonal's band (dsb, dq_band, the band's dw terms) and, with a binding
 * window start, the window start's (dsb2, dq_band +=, dw +=), then the
 * block's dw partial. Grid: [batch_count][heads_q][n_rb]. */
template <bool BF16>
__global__ void __launch_bounds__(PREP_THREADS)
    ta_fmb_band_kernel(const __grid_constant__ ta_fmb_params p) {
    extern __shared__ float4 ta_fmb_prep_smem[];
    const int32_t cq = p.conv_q, ncw = cq * p.conv_k, n_rb = p.n_rb;
    const ta_fmb_band_layout L = ta_fmb_band_at(cq, p.conv_k, p.band, p.edge_n);
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_rb;
    float *smem = reinterpret_cast<float *>(ta_fmb_prep_smem);
    uint16_t *sq = reinterpret_cast<uint16_t *>(smem + L.rows);
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_fast_mta_prep_tile x = ta_fast_mta_prep_at(p, tile, n_rb);
        const ta_tile_ctx c = ta_cuda_context(p, x.b_local, x.h, 0);
        const float *w = p.conv_w + (int64_t)x.h * ncw;
        const int32_t r0 = x.blk * DIAG_ROWS;
        const int64_t head = (int64_t)(p.batch_begin + x.b_local) * p.heads_q + x.h;
        float dw[2] = {0.0f, 0.0f};
        __syncthreads(); /* the previous tile is done with shared memory */
        ta_fast_mta_stage<true>(sq, p, c, r0 - (cq - 1), L.n_q);
        ta_fmb_band_phase<false, BF16>(p, c, L, smem, w, r0, head, dw);
        if (p.edge_n > 0) ta_fmb_band_phase<true, BF16>(p, c, L, smem, w, r0, head, dw);
        for (int k = 0; k < 2; ++k) {
            const int i = (int)threadIdx.x + PREP_THREADS * k;
            if (i < ncw) p.dw_band[(head * n_rb + x.blk) * ncw + i] = dw[k];
        }
    }
}

/* ---- 5. dq ---- */

constexpr int DQ_BM = 64;            /* output rows per block (4 warps) */
constexpr int DQ_RW = DQ_BM + 16;    /* score rows: the fifth warp's 16 below */
constexpr int DQ_WARPS = DQ_RW / 16; /* 5 */
constexpr int DQ_THREADS = 32 * DQ_WARPS;
constexpr int DQ_BN = 64; /* keys per K tile */
constexpr int DQ_NB = 3;  /* ring buffers of a K tile's chunks */

/* Shared memory (storage type):
 *   q  [DQ_RW + c_q - 1][LD]  rows row0 - (c_q-1) ..
 *   dO [DQ_RW][LD]            rows row0 ..
 *   ring [DQ_NB][DQ_BN][LD]   a K tile's chunks: kf_0 .. kf_{c_q-1}, v, kf_0 .. kf_{c_q-1}
 *   dC [DQ_RW][LDC]           the tile's dC (rounded), rows row0 .. */
template <int D> struct ta_fmb_dq_traits {
    static constexpr int LD = D + 8, LDC = DQ_BN + 8, NT = DQ_BN / 8, DT = D / 8;
    static size_t smem(int32_t cq) {
        return ((size_t)(2 * DQ_RW + cq - 1 + DQ_NB * DQ_BN) * LD + (size_t)DQ_RW * LDC) * 2;
    }
};

/* One block of 5 warps per (batch b, query head h, Q tile of 64 rows): warp w
 * makes the scores, P and dC of rows row0 + 16 w .. + 15 (w = 4: the 16 rows
 * below the tile, whose dC the tile's last c_q - 1 rows read); warps 0 .. 3
 * then sum dq of their rows. Per K tile of 64 keys (those any of the 80 rows
 * sees), chunk by chunk through the ring (one barrier per chunk):
 *   kf_a (a < c_q):  s += q(rows shifted by a - (c_q-1)) kf_a^T
 *   v:               s = diag at the direct entries; P; dp = dO v^T;
 *                    dC = scale P (dp - D), 0 at the direct entries -> shared
 *   kf_a again:      dq += dC(rows shifted by c_q-1-a) kf_a     (warps 0 .. 3)
 * then dq + dq_band stored in the storage type (F32: in f32, for the rotary
 * stage's turn back, cuda/ta_cuda_fast_rope.cu). */
template <int D, bool BF16, bool F32 = false>
__global__ void __launch_bounds__(DQ_THREADS, 2)
    ta_fmb_dq_kernel(const __grid_constant__ ta_fmb_params p) {
    typedef ta_fmb_dq_traits<D> T;
    extern __shared__ float4 ta_fmb_smem[];
    const int32_t cq = p.conv_q, n_ch = 2 * cq + 1, E = p.band;
    uint16_t *sq = reinterpret_cast<uint16_t *>(ta_fmb_smem);
    uint16_t *sdo = sq + (DQ_RW + cq - 1) * T::LD;
    uint16_t *ring = sdo + DQ_RW * T::LD;
    uint16_t *sdc = ring + DQ_NB * DQ_BN * T::LD;
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, tq = lane & 3;
    const int32_t n_qt = t.num_q_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_q * n_qt;
    const float scale_log2 = p.scale * TA_LOG2E;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_q_tile at = ta_cuda_q_tile_at(p, tile, n_qt);
        const ta_tile_ctx c = ta_cuda_context(p, at.b_local, at.h, at.qt);
        const int32_t row0 = at.qt * DQ_BM, ra = row0 + 16 * warp + (lane >> 2);
        const int64_t head = (int64_t)(p.batch_begin + at.b_local) * p.heads_q + at.h;
        const int64_t kf_off = head * t.seq_k * cq * D;
        const float *diag = E > 0 ? p.diag + head * t.seq_q * E : nullptr;
        const float *edge = p.edge_n > 0 ? p.edge + head * t.seq_q * p.edge_n : nullptr;
        int32_t lo[2], hi[2], kt0 = 0, kt1 = 0;
        float lse2[2], dl[2], dq[4 * T::DT], s[4 * T::NT];
        ta_fmb_lane_rows(p, t, c, ra, lo, hi, lse2, dl);
        { /* the K tiles any of the 80 rows sees (lo and hi grow with the row) */
            int32_t l0, h0, l1, h1;
            const int32_t last = (row0 + DQ_RW < t.seq_q ? row0 + DQ_RW : t.seq_q) - 1;
            ta_tile_row_keys(&t, row0, c.key_len, &l0, &h0);
            ta_tile_row_keys(&t, last, c.key_len, &l1, &h1);
            if (h1 > l0) {
                kt0 = l0 / DQ_BN;
                kt1 = (h1 - 1) / DQ_BN + 1;
            }
        }
#pragma unroll
        for (int i = 0; i < 4 * T::DT; ++i)
            dq[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4 * T::NT; ++i)
            s[i] = 0.0f;
        const int32_t total = (kt1 - kt0) * n_ch;
        __syncthreads(); /* the previous tile is done with shared memory */
        auto load_chunk = [&](int32_t g) {
            const int32_t part = g % n_ch, col0 = (kt0 + g / n_ch) * DQ_BN;
            uint16_t *dst = ring + (g % DQ_NB) * DQ_BN * T::LD;
            if (part == cq)
                ta_fast_load_rows<D, DQ_BN, DQ_THREADS>(dst, v, c.v, p.lay.v.seq, col0, c.key_len);
            else
                ta_fast_load_rows<D, DQ_BN, DQ_THREADS>(
                    dst, p.kf, kf_off + (int64_t)(part < cq ? part : part - cq - 1) * D,
                    (int64_t)cq * D, col0, t.seq_k);
        };
        if (total > 0) {
            ta_fast_mta_load_q<D, DQ_THREADS>(sq, p, c, row0 - (cq - 1), DQ_RW + cq - 1);
            ta_fast_load_rows<D, DQ_RW, DQ_THREADS>(sdo, d_o, c.d_o, p.lay.d_o.seq, row0, t.seq_q);
            for (int32_t g = 0; g < DQ_NB - 1; ++g) {
                if (g < total) load_chunk(g);
                ta_fast_cp_commit();
            }
        }
        for (int32_t g = 0; g < total; ++g) {
            const int32_t part = g % n_ch, col0 = (kt0 + g / n_ch) * DQ_BN;
            const uint16_t *buf = ring + (g % DQ_NB) * DQ_BN * T::LD;
            ta_fast_cp_wait<DQ_NB - 2>();
            __syncthreads(); /* chunk g landed; chunk g - 1's buffer and dC readers done */
            if (g + DQ_NB - 1 < total) load_chunk(g + DQ_NB - 1);
            ta_fast_cp_commit();
            if (part < cq) {
                if (part == 0) {
#pragma unroll
                    for (int i = 0; i < 4 * T::NT; ++i)
                        s[i] = 0.0f;
                }
                ta_fmb_mma_nt<D / 16, T::NT, BF16>(s, sq + (16 * warp + part) * T::LD, T::LD, buf,
                                                   T::LD, lane);
            } else if (part == cq) {
                float dp[4 * T::NT];
#pragma unroll
                for (int i = 0; i < 4 * T::NT; ++i)
                    dp[i] = 0.0f;
                ta_fmb_mma_nt<D / 16, T::NT, BF16>(dp, sdo + 16 * warp * T::LD, T::LD, buf, T::LD,
                                                   lane);
#pragma unroll
                for (int i = 0; i < 4 * T::NT; ++i) {
                    const int r = (i >> 1) & 1;
                    const int32_t row = ra + 8 * r, j = col0 + 8 * (i / 4) + 2 * tq + (i & 1);
                    float pr;
                    ta_fmb_p_dc(p, diag, edge, true, row, j, lo[r], hi[r], s[i], dp[i], lse2[r],
                                dl[r], scale_log2, &pr, &s[i]);
                }
                ta_fmb_store_acc<T::NT, BF16>(sdc + 16 * warp * T::LDC, T::LDC, s, lane);
            } else if (warp < DQ_WARPS - 1) {
                const int32_t a = part - cq - 1;
                ta_fmb_mma_nn<DQ_BN / 16, T::DT, BF16>(dq, sdc + (16 * warp + cq - 1 - a) * T::LDC,
                                                       T::LDC, buf, T::LD, lane);
            }
        }
        if (warp < DQ_WARPS - 1) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int32_t row = ra + 8 * r;
                if (row >= t.seq_q) continue;
                /* the band's share (none when E = 0: no band kernel ran) */
                const float *bq = E > 0 ? p.dq_band + (head * t.seq_q + row) * D : nullptr;
                if constexpr (F32) {
                    float *dst = static_cast<float *>(p.dq) + c.dq + (int64_t)row * p.lay.dq.seq;
#pragma unroll
                    for (int d = 0; d < T::DT; ++d) {
                        const int32_t col = 8 * d + 2 * tq;
                        const float2 b = bq ? *reinterpret_cast<const float2 *>(bq + col)
                                            : make_float2(0.0f, 0.0f);
                        *reinterpret_cast<float2 *>(dst + col) =
                            make_float2(dq[4 * d + 2 * r] + b.x, dq[4 * d + 2 * r + 1] + b.y);
                    }
                    continue;
                }
                uint16_t *dst = static_cast<uint16_t *>(p.dq) + c.dq + (int64_t)row * p.lay.dq.seq;
#pragma unroll
                for (int d = 0; d < T::DT; ++d) {
                    const int32_t col = 8 * d + 2 * tq;
                    const float2 b =
                        bq ? *reinterpret_cast<const float2 *>(bq + col) : make_float2(0.0f, 0.0f);
                    *reinterpret_cast<uint32_t *>(dst + col) =
                        ta_fast_pack<BF16>(dq[4 * d + 2 * r] + b.x, dq[4 * d + 2 * r + 1] + b.y);
                }
            }
        }
    }
}

/* ---- 6. dkf and dv ---- */

constexpr int KV_KEYS = 32; /* keys per block: two groups of 16 */
constexpr int KV_ROWS = 64; /* rows per Q tile */
constexpr int KV_WARPS = 8;
constexpr int KV_THREADS = 32 * KV_WARPS;

/* A block's a's (the filtered-key chunks whose gradient it sums; the others'
 * blocks recompute the scores) and its accumulators: per 16-key group, units
 * of 16 keys x 16 features, part 0 dv, part 1 + x dkf of a = a0 + x, spread
 * over the group's four warps (MAXU per warp).
 * Shared memory (storage type unless said):
 *   kf [c_q][32][LD] (the block's keys), v [32][LD], q [64 + c_q - 1][LD],
 *   dO [64][LD], P^T and dC^T [32][LDP] each, lse2 and D [64] f32, lo and hi
 *   [64] int32. */
template <int D, int NBQ> struct ta_fmb_kv_traits {
    static constexpr int LD = D + 8, LDP = KV_ROWS + 8, DB = D / 16;
    static constexpr int AG = D == 128 ? 6 : D == 96 ? 8 : 13;
    static constexpr int UNITS = (AG + 1) * DB, MAXU = (UNITS + 3) / 4;
    /* one Q tile's buffer: q [64 + c_q - 1][LD], dO [64][LD] (storage), then
     * lse2, D [64] f32 and lo, hi [64] int32 */
    __host__ __device__ static size_t qbuf(int32_t cq) {
        return (size_t)(2 * KV_ROWS + cq - 1) * LD * 2 + 16u * KV_ROWS;
    }
    static size_t smem(int32_t cq) {
        return ((size_t)(cq + 1) * KV_KEYS * LD + 2u * KV_KEYS * LDP) * 2 + NBQ * qbuf(cq);
    }
};

/* acc[16 x 8 NB] += A B, A's fragments in registers (KS k-steps, as
 * ta_fmb_mma_nn loads them), B as there. */
template <int KS, int NB, bool BF16>
TA_FAST_FN void ta_fmb_mma_rn(float (&acc)[4 * NB], const uint32_t (&af)[KS][4], const uint16_t *b,
                              int ldb, int lane) {
    const uint32_t b0 = ta_fast_smem_addr(b + (lane & 15) * ldb + (lane >> 4) * 8);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int dn = 0; dn < NB / 2; ++dn) {
            uint32_t bf[4];
            ta_fast_ldm_x4_t(bf, b0 + 2u * (uint32_t)(16 * ks * ldb + 16 * dn));
            ta_fast_mma<BF16>(&acc[8 * dn], af[ks], bf[0], bf[1]);
            ta_fast_mma<BF16>(&acc[8 * dn + 4], af[ks], bf[2], bf[3]);
        }
}

/* One block per (batch b, kv head, 32 keys m0 .., a group): for each query
 * head of the GQA group ascending, each Q tile that sees a key of the block
 * ascending (ta_tile_k_rows):
 *   warp (kg, rg) = (w % 2, w / 2): keys 16 kg .., rows 16 rg .. of the tile:
 *     s^T = sum_a kf_a q(shifted)^T, diag at the direct entries, P^T,
 *     dp^T = v dO^T, dC^T = scale P^T (dp^T - D) (0 at the direct entries),
 *     both rounded into shared memory;
 *   then each warp's units: dv += P^T dO, dkf_a += dC^T q(rows shifted by a)
 *   (dC^T's fragments loaded once per tile).
 * With NBQ = 2 the next Q tile's q, dO and row data load while the units of
 * this one run. At each head's end dkf_a of the block's a's (f32) is stored;
 * at the end (group 0 only) dv in the storage type. */
template <int D, int NBQ, bool BF16>
__global__ void __launch_bounds__(KV_THREADS)
    ta_fmb_kv_kernel(const __grid_constant__ ta_fmb_params p) {
    typedef ta_fmb_kv_traits<D, NBQ> T;
    extern __shared__ float4 ta_fmb_smem[];
    const int32_t cq = p.conv_q, E = p.band, n_ag = (cq + T::AG - 1) / T::AG;
    uint16_t *skf = reinterpret_cast<uint16_t *>(ta_fmb_smem);
    uint16_t *sv = skf + cq * KV_KEYS * T::LD;
    uint16_t *sp = sv + KV_KEYS * T::LD;
    uint16_t *sdc = sp + KV_KEYS * T::LDP;
    unsigned char *qb0 = reinterpret_cast<unsigned char *>(sdc + KV_KEYS * T::LDP);
    const size_t qbuf = T::qbuf(cq);
    const ta_tiling t = p.t;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, tq = lane & 3;
    const int kg = warp & 1, rg = warp >> 1;
    const int32_t n_kt = t.num_k_tiles;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * n_kt * n_ag;
    const float scale_log2 = p.scale * TA_LOG2E;
    const uint16_t *v = static_cast<const uint16_t *>(p.v);
    const uint16_t *d_o = static_cast<const uint16_t *>(p.d_o);

    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, n_kt, n_ag);
        const int32_t m0 = at.kt * KV_KEYS, a0 = at.fg * T::AG;
        const int32_t na = cq - a0 < T::AG ? cq - a0 : T::AG;
        const bool with_dv = at.fg == 0;
        float acc[T::MAXU][8];
        ta_tile_ctx c;
#pragma unroll
        for (int u = 0; u < T::MAXU; ++u)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                acc[u][e] = 0.0f;
        for (int32_t gi = 0; gi < p.group; ++gi) {
            const int32_t h = at.h_kv * p.group + gi;
            const int64_t head = (int64_t)(p.batch_begin + at.b_local) * p.heads_q + h;
            const float *diag = E > 0 ? p.diag + head * t.seq_q * E : nullptr;
            const float *edge = p.edge_n > 0 ? p.edge + head * t.seq_q * p.edge_n : nullptr;
            int32_t q_begin, q_end;
            c = ta_cuda_context(p, at.b_local, h, 0);
            ta_tile_k_rows(&t, at.kt, c.key_len, &q_begin, &q_end);
            /* Q tile qt -> buffer x: q, dO by cp.async (no commit), row data by plain stores */
            auto load_q_tile = [&](int32_t qt, int x) {
                unsigned char *base = qb0 + (size_t)x * qbuf;
                uint16_t *bq = reinterpret_cast<uint16_t *>(base);
                uint16_t *bdo = bq + (KV_ROWS + cq - 1) * T::LD;
                float *rl2 = reinterpret_cast<float *>(bdo + KV_ROWS * T::LD);
                int32_t *rlo = reinterpret_cast<int32_t *>(rl2 + 2 * KV_ROWS);
                const int32_t row0 = qt * KV_ROWS;
                ta_fast_mta_load_q<D, KV_THREADS>(bq, p, c, row0 - (cq - 1), KV_ROWS + cq - 1);
                ta_fast_load_rows<D, KV_ROWS, KV_THREADS>(bdo, d_o, c.d_o, p.lay.d_o.seq, row0,
                                                          t.seq_q);
                for (int i = (int)threadIdx.x; i < KV_ROWS; i += KV_THREADS) {
                    const int32_t row = row0 + i;
                    int32_t l = 0, hh = 0;
                    if (row < t.seq_q) ta_tile_row_keys(&t, row, c.key_len, &l, &hh);
                    rlo[i] = l;
                    rlo[KV_ROWS + i] = hh;
                    rl2[i] = l < hh ? p.lse[c.lse + row] * TA_LOG2E : 0.0f;
                    rl2[KV_ROWS + i] = l < hh ? p.delta[c.lse + row] : 0.0f;
                }
            };
            /* a head or tile whose keys no Q tile sees left its kf and v copies
             * in flight (no tile waited): they land before these are issued
             * (racecheck reported the two copies to one address otherwise) */
            ta_fast_cp_wait<0>();
            __syncthreads(); /* the previous head / tile is done with shared memory */
            for (int32_t a = 0; a < cq; ++a)
                ta_fast_load_rows<D, KV_KEYS, KV_THREADS>(skf + a * KV_KEYS * T::LD, p.kf,
                                                          head * t.seq_k * cq * D + (int64_t)a * D,
                                                          (int64_t)cq * D, m0, t.seq_k);
            ta_fast_load_rows<D, KV_KEYS, KV_THREADS>(sv, v, c.v, p.lay.v.seq, m0, c.key_len);
            if (NBQ == 2 && q_begin < q_end) load_q_tile(q_begin, 0);
            ta_fast_cp_commit();
            for (int32_t qt = q_begin; qt < q_end; ++qt) {
                const int x = NBQ == 2 ? (qt - q_begin) & 1 : 0;
                const unsigned char *base = qb0 + (size_t)x * qbuf;
                const uint16_t *sq = reinterpret_cast<const uint16_t *>(base);
                const uint16_t *sdo = sq + (KV_ROWS + cq - 1) * T::LD;
                const float *rl2 = reinterpret_cast<const float *>(sdo + KV_ROWS * T::LD);
                const float *rdl = rl2 + KV_ROWS;
                const int32_t *rlo = reinterpret_cast<const int32_t *>(rl2 + 2 * KV_ROWS);
                const int32_t *rhi = rlo + KV_ROWS;
                const int32_t row0 = qt * KV_ROWS;
                float st[8], dpt[8];
                if (NBQ == 1) {
                    __syncthreads(); /* the previous Q tile's readers are done */
                    load_q_tile(qt, 0);
                    ta_fast_cp_commit();
                }
                ta_fast_cp_wait<0>();
                __syncthreads(); /* this tile landed; the previous tile's units are done */
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    st[e] = dpt[e] = 0.0f;
                for (int32_t a = 0; a < cq; ++a)
                    ta_fmb_mma_nt<D / 16, 2, BF16>(st, skf + (a * KV_KEYS + 16 * kg) * T::LD, T::LD,
                                                   sq + (16 * rg + a) * T::LD, T::LD, lane);
                ta_fmb_mma_nt<D / 16, 2, BF16>(dpt, sv + 16 * kg * T::LD, T::LD,
                                               sdo + 16 * rg * T::LD, T::LD, lane);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int32_t kl = 16 * kg + (lane >> 2) + 8 * ((e >> 1) & 1);
                    const int32_t rl = 16 * rg + 8 * (e >> 2) + 2 * tq + (e & 1);
                    const int32_t j = m0 + kl, row = row0 + rl;
                    ta_fmb_p_dc(p, diag, edge, true, row, j, rlo[rl], rhi[rl], st[e], dpt[e],
                                rl2[rl], rdl[rl], scale_log2, &st[e], &dpt[e]);
                }
                ta_fmb_store_acc<2, BF16>(sp + 16 * kg * T::LDP + 16 * rg, T::LDP, st, lane);
                ta_fmb_store_acc<2, BF16>(sdc + 16 * kg * T::LDP + 16 * rg, T::LDP, dpt, lane);
                __syncthreads(); /* P^T, dC^T stored; every warp is past the score phase */
                if (NBQ == 2 && qt + 1 < q_end) { /* the next tile into the other buffer */
                    load_q_tile(qt + 1, x ^ 1);
                    ta_fast_cp_commit();
                }
                {
                    uint32_t af[KV_ROWS / 16][4]; /* dC^T of the warp's keys, k-steps of 16 rows */
                    const uint32_t a0s =
                        ta_fast_smem_addr(sdc + (16 * kg + (lane & 15)) * T::LDP + (lane >> 4) * 8);
#pragma unroll
                    for (int ks = 0; ks < KV_ROWS / 16; ++ks)
                        ta_fast_ldm_x4(af[ks], a0s + 32u * (uint32_t)ks);
#pragma unroll
                    for (int u = 0; u < T::MAXU; ++u) {
                        const int unit = rg + 4 * u, part = unit / T::DB, db = unit % T::DB;
                        if (unit >= T::UNITS) break;
                        if (part == 0) {
                            if (with_dv)
                                ta_fmb_mma_nn<KV_ROWS / 16, 2, BF16>(acc[u], sp + 16 * kg * T::LDP,
                                                                     T::LDP, sdo + 16 * db, T::LD,
                                                                     lane);
                        } else if (part - 1 < na) {
                            ta_fmb_mma_rn<KV_ROWS / 16, 2, BF16>(
                                acc[u], af, sq + (a0 + part - 1) * T::LD + 16 * db, T::LD, lane);
                        }
                    }
                }
            }
            /* this head's dkf of the block's a's (zeros if no row sees the keys) */
#pragma unroll
            for (int u = 0; u < T::MAXU; ++u) {
                const int unit = rg + 4 * u, part = unit / T::DB, db = unit % T::DB;
                if (unit >= T::UNITS) break;
                if (part == 0 || part - 1 >= na) continue;
#pragma unroll
                for (int i = 0; i < 4; ++i) { /* element pairs (2 i, 2 i + 1) */
                    const int32_t j = m0 + 16 * kg + (lane >> 2) + 8 * (i & 1);
                    const int32_t col = 16 * db + 8 * (i >> 1) + 2 * tq;
                    if (j < t.seq_k)
                        *reinterpret_cast<float2 *>(
                            p.dkf + ((head * t.seq_k + j) * cq + a0 + part - 1) * D + col) =
                            make_float2(acc[u][2 * i], acc[u][2 * i + 1]);
                    acc[u][2 * i] = acc[u][2 * i + 1] = 0.0f;
                }
            }
        }
        if (!with_dv) continue;
#pragma unroll
        for (int u = 0; u < T::MAXU; ++u) {
            const int unit = rg + 4 * u, part = unit / T::DB, db = unit % T::DB;
            if (unit >= T::UNITS) break;
            if (part != 0) continue;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int32_t j = m0 + 16 * kg + (lane >> 2) + 8 * (i & 1);
                const int32_t col = 16 * db + 8 * (i >> 1) + 2 * tq;
                if (j < t.seq_k)
                    *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(p.dv) + c.dv +
                                                  (int64_t)j * p.lay.dv.seq + col) =
                        ta_fast_pack<BF16>(acc[u][2 * i], acc[u][2 * i + 1]);
            }
        }
    }
}

/* ---- 7. dk and the fold's dw partials ---- */

constexpr int DK_KEYS = 32;

/* Keys per thread of the dk kernel (4 consecutive; 2 at D = 64, so that 16
 * feature chunks x 16 key groups fill the block), the key groups and the
 * threads that work: D / 4 feature chunks x DK_KEYS / KPG groups (D = 96:
 * 192 of the 256, six whole warps). */
template <int D> struct ta_fmb_dk_shape {
    static constexpr int CH4 = D / 4, KPG = D == 64 ? 2 : 4, NG = DK_KEYS / KPG;
    static constexpr int ACTIVE = NG * CH4, WARPS = ACTIVE / 32;
    static_assert(ACTIVE <= PREP_THREADS && ACTIVE % 32 == 0, "whole warps of the block");
};

/* Floats of the dk kernel's regions after its three row buffers: w of one
 * head (c_q c_k), then the warps' dw sums [8][c_k], each rounded up to 4. */
__host__ __device__ constexpr int32_t ta_fmb_dk_wn(int32_t cq, int32_t ck) {
    return (cq * ck + 3) / 4 * 4;
}
__host__ __device__ constexpr int32_t ta_fmb_dk_red(int32_t ck) {
    return (PREP_THREADS / 32 * ck + 3) / 4 * 4;
}

/* Shared memory: two buffers of dkf_a rows [DK_KEYS + 2P][D] f32 (a + 1
 * loads by cp.async while a computes), the k rows [DK_KEYS + 2P][D] widened
 * to f32, w of the current head, the warps' dw sums. */
static size_t ta_fmb_dk_smem(const ta_problem *pr) {
    const size_t rows = (size_t)DK_KEYS + (size_t)pr->conv_k - 1, d = (size_t)pr->head_dim;
    return (3u * rows * d + (size_t)ta_fmb_dk_wn(pr->conv_q, pr->conv_k) +
            (size_t)ta_fmb_dk_red(pr->conv_k)) *
           4u;
}

/* dkf_a rows [m0 - P, m0 + DK_KEYS + P) of head `head` -> dst (f32, D per
 * row) by cp.async, keys outside [0, key_len) zero-filled. */
template <int D>
__device__ __forceinline__ void ta_fmb_dk_stage(float *dst, const ta_fmb_params &p, int64_t head,
                                                int32_t a, int32_t first, int32_t rows,
                                                int32_t key_len) {
    constexpr int CH4 = D / 4;
    for (int i = (int)threadIdx.x; i < rows * CH4; i += PREP_THREADS) {
        const int32_t r = i / CH4, ch = i % CH4, j = first + r;
        const bool in = j >= 0 && j < key_len;
        const float *src =
            in ? p.dkf + ((head * p.t.seq_k + j) * p.conv_q + a) * D + 4 * ch : p.dkf;
        ta_fast_cp16(ta_fast_smem_addr(dst + r * D + 4 * ch), src, in ? 16 : 0);
    }
}

/* One block per (batch b, kv head, 32 keys m0 ..); a thread takes feature
 * chunk ch (4 features) of KPG consecutive keys ml0 .. (ta_fmb_dk_shape).
 * For each query head of the group ascending, for each a ascending (dkf_a
 * rows m0 - P .. staged, double-buffered; keys outside [0, key_len) as zeros):
 *   dk_m   += sum_{b ascending} w[a][b] dkf_a[m - b + P]: the staged rows
 *             visited once each, descending, each feeding the KPG keys with
 *             the taps they take (a register window of w; taps outside
 *             [0, c_k) weigh 0), so each key's terms still come b ascending
 *   dw_fold[blk][a][b] = sum_{j, d} dkf_a[j][d] k_{j + b - P}[d]: each
 *             thread's part (its keys ascending, 4 features each) in a
 *             window of KPG running parts, the k rows (f32) visited once
 *             each, ascending; a finished part's 32 lanes summed by a fixed
 *             xor butterfly, the warps' sums in order
 * then the band: dk_m += sum_{s ascending} dsb[r][s] q_r, r = m - off - (s -
 * (NE-1)) in [0, S_q), rows visited once each, descending. dk stored (0 at
 * keys past key_len; F32: in f32, for the rotary stage's turn back). */
template <int D, bool BF16, bool F32 = false>
__global__ void __launch_bounds__(PREP_THREADS, 3) /* 3 blocks per SM (shared memory's limit) */
    ta_fmb_dk_kernel(const __grid_constant__ ta_fmb_params p) {
    extern __shared__ float4 ta_fmb_prep_smem[];
    typedef ta_fmb_dk_shape<D> S;
    constexpr int KPG = S::KPG;
    const int32_t cq = p.conv_q, ck = p.conv_k, half = (ck - 1) / 2, ncw = cq * ck;
    const int32_t NE = p.ne, off = p.t.diag_offset, rows = DK_KEYS + 2 * half;
    const int64_t n_tiles = (int64_t)p.batch_count * p.heads_kv * p.n_kb;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool active = tid < S::ACTIVE; /* warp-uniform */
    const int32_t ch = tid % S::CH4, ml0 = (tid / S::CH4) * KPG;
    float *sdkf = reinterpret_cast<float *>(ta_fmb_prep_smem); /* [2][rows][D] */
    float *sk = sdkf + 2 * rows * D;                           /* [rows][D] */
    float *sw = sk + rows * D;                                 /* [c_q][c_k] */
    float *red = sw + ta_fmb_dk_wn(cq, ck);                    /* [warps][c_k] */
    const int32_t n_u = p.group * cq;
    for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
        const ta_cuda_kv_tile at = ta_cuda_kv_tile_at(p, tile, p.n_kb, 1);
        const int32_t blk = at.kt, h_kv = at.h_kv, b_local = at.b_local, m0 = blk * DK_KEYS;
        ta_tile_ctx c = ta_cuda_context(p, b_local, h_kv * p.group, 0);
        const int64_t head0 = (int64_t)(p.batch_begin + b_local) * p.heads_q + h_kv * p.group;
        float acc[KPG][4];
#pragma unroll
        for (int i = 0; i < KPG; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[i][e] = 0.0f;
        __syncthreads(); /* the previous tile is done with shared memory */
        ta_fmb_dk_stage<D>(sdkf, p, head0, 0, m0 - half, rows, c.key_len);
        ta_fast_cp_commit();
        for (int i = tid; i < rows * (D / 8); i += PREP_THREADS) { /* k rows, widened */
            const int32_t r = i / (D / 8), c8 = i % (D / 8);
            const uint16_t *src = ta_fast_mta_k_row(p, c, m0 - half + r);
            float f[8];
            ta_fast_mta_widen8<BF16>(
                src ? *reinterpret_cast<const uint4 *>(src + 8 * c8) : make_uint4(0, 0, 0, 0), f);
            *reinterpret_cast<float4 *>(sk + r * D + 8 * c8) = make_float4(f[0], f[1], f[2], f[3]);
            *reinterpret_cast<float4 *>(sk + r * D + 8 * c8 + 4) =
                make_float4(f[4], f[5], f[6], f[7]);
        }
        for (int32_t u = 0; u < n_u; ++u) {
            const int32_t gi = u / cq, a = u % cq, h = h_kv * p.group + gi;
            const int64_t head = head0 + gi;
            const float *buf = sdkf + (u & 1) * rows * D;
            if (u + 1 < n_u) {
                ta_fmb_dk_stage<D>(sdkf + ((u + 1) & 1) * rows * D, p, head0 + (u + 1) / cq,
                                   (u + 1) % cq, m0 - half, rows, c.key_len);
                ta_fast_cp_commit();
            }
            if (a == 0)
                for (int i = tid; i < ncw; i += PREP_THREADS)
                    sw[i] = p.conv_w[(int64_t)h * ncw + i];
            if (u + 1 < n_u)
                ta_fast_cp_wait<1>();
            else
                ta_fast_cp_wait<0>();
            __syncthreads(); /* buf, sk and sw ready; red free */
            if (active) {
                const float *wa = sw + a * ck;
                { /* the conv: rows ml0 + rr, rr descending; key i takes tap i + 2P - rr */
                    float wv[KPG];
#pragma unroll
                    for (int i = 0; i < KPG; ++i)
                        wv[i] = 0.0f;
                    wv[KPG - 1] = wa[0];
#pragma unroll 4
                    for (int32_t rr = KPG - 1 + 2 * half; rr >= 0; --rr) {
                        const float4 x =
                            *reinterpret_cast<const float4 *>(buf + (ml0 + rr) * D + 4 * ch);
#pragma unroll
                        for (int i = 0; i < KPG; ++i) {
                            acc[i][0] = __fmaf_rn(wv[i], x.x, acc[i][0]);
                            acc[i][1] = __fmaf_rn(wv[i], x.y, acc[i][1]);
                            acc[i][2] = __fmaf_rn(wv[i], x.z, acc[i][2]);
                            acc[i][3] = __fmaf_rn(wv[i], x.w, acc[i][3]);
                        }
                        const int32_t bn = KPG + 2 * half - rr; /* the tap key KPG - 1 takes next */
#pragma unroll
                        for (int i = 0; i < KPG - 1; ++i)
                            wv[i] = wv[i + 1];
                        wv[KPG - 1] = bn < ck ? wa[bn] : 0.0f;
                    }
                }
                { /* dw: k rows ml0 + kr ascending; part[b] runs in slot kr - b */
                    float4 f[KPG];
                    float pw[KPG];
#pragma unroll
                    for (int i = 0; i < KPG; ++i) {
                        f[i] =
                            *reinterpret_cast<const float4 *>(buf + (ml0 + i + half) * D + 4 * ch);
                        pw[i] = 0.0f;
                    }
                    for (int32_t kr = 0; kr < KPG + 2 * half; ++kr) {
                        const float4 y =
                            *reinterpret_cast<const float4 *>(sk + (ml0 + kr) * D + 4 * ch);
#pragma unroll
                        for (int i = 0; i < KPG; ++i) {
                            pw[i] = __fmaf_rn(f[i].x, y.x, pw[i]);
                            pw[i] = __fmaf_rn(f[i].y, y.y, pw[i]);
                            pw[i] = __fmaf_rn(f[i].z, y.z, pw[i]);
                            pw[i] = __fmaf_rn(f[i].w, y.w, pw[i]);
                        }
                        const int32_t b = kr - (KPG - 1); /* slot KPG - 1's part is whole */
                        if (b >= 0) {
                            const float sum = ta_fmb_warp_sum(pw[KPG - 1]);
                            if (lane == 0) red[warp * ck + b] = sum;
                        }
#pragma unroll
                        for (int i = KPG - 1; i > 0; --i)
                            pw[i] = pw[i - 1];
                        pw[0] = 0.0f;
                    }
                }
                if (a == cq - 1 && NE > 0) { /* the band(s) of head h */
                    c = ta_cuda_context(p, b_local, h, 0);
                    const int64_t rows0 = head * p.t.seq_q;
                    const int32_t mb = m0 + ml0;
                    for (int32_t band2 = 0; band2 < (p.edge_n > 0 ? 2 : 1); ++band2) {
                        const int32_t W = band2 ? p.nf : NE;
                        const float *dsb = band2 ? p.dsb2 : p.dsb;
                        /* key m's tap s reads row m + c0 - s */
                        const int32_t c0 = band2 ? -off + p.t.window_left + half : -off + NE - 1;
                        for (int32_t r = mb + KPG - 1 + c0; r > mb + c0 - W; --r) {
                            if (r < 0 || r >= p.t.seq_q) continue;
                            const uint2 qv = *reinterpret_cast<const uint2 *>(
                                static_cast<const uint16_t *>(p.q) + c.q +
                                (int64_t)r * p.lay.q.seq + 4 * ch);
                            float qf[4];
                            ta_fast_unpack<BF16>(qv.x, &qf[0], &qf[1]);
                            ta_fast_unpack<BF16>(qv.y, &qf[2], &qf[3]);
#pragma unroll
                            for (int i = 0; i < KPG; ++i) {
                                const int32_t s = mb + i + c0 - r;
                                if (s < 0 || s >= W) continue;
                                const float d = dsb[(rows0 + r) * W + s];
#pragma unroll
                                for (int e = 0; e < 4; ++e)
                                    acc[i][e] = __fmaf_rn(d, qf[e], acc[i][e]);
                            }
                        }
                    }
                }
            }
            __syncthreads(); /* red whole; buf free for u + 2 */
            if (tid < ck) {
                float sum = 0.0f;
                for (int32_t wp = 0; wp < S::WARPS; ++wp)
                    sum += red[wp * ck + tid];
                p.dw_fold[(head * p.n_kb + blk) * ncw + a * ck + tid] = sum;
            }
        }
        if (!active) continue;
#pragma unroll
        for (int i = 0; i < KPG; ++i) {
            const int32_t m = m0 + ml0 + i;
            const bool in = m < c.key_len;
            if (m >= p.t.seq_k) continue;
            if constexpr (F32)
                *reinterpret_cast<float4 *>(static_cast<float *>(p.dk) + c.dk +
                                            (int64_t)m * p.lay.dk.seq + 4 * ch) =
                    make_float4(in ? acc[i][0] : 0.0f, in ? acc[i][1] : 0.0f, in ? acc[i][2] : 0.0f,
                                in ? acc[i][3] : 0.0f);
            else
                *reinterpret_cast<uint2 *>(static_cast<uint16_t *>(p.dk) + c.dk +
                                           (int64_t)m * p.lay.dk.seq + 4 * ch) =
                    make_uint2(ta_fast_pack<BF16>(in ? acc[i][0] : 0.0f, in ? acc[i][1] : 0.0f),
                               ta_fast_pack<BF16>(in ? acc[i][2] : 0.0f, in ? acc[i][3] : 0.0f));
        }
    }
}

/* ---- 8. dconv_w ---- */

/* dconv_w[h][ab] = the sum of the partials of (h, ab): for each batch entry
 * ascending the band's (row blocks ascending) then the fold's (key blocks
 * ascending), a sequence of n = batch_total (n_rb + n_kb) terms. One warp per
 * (h, ab): lane l adds terms l, l + 32, .. in order from 0, then the 32 lane
 * sums by a fixed xor butterfly (every lane ends with the same bits; lane 0
 * stores). Fixed order, no atomics. */
__global__ void __launch_bounds__(PREP_THREADS)
    ta_fmb_dw_kernel(const __grid_constant__ ta_fmb_params p) {
    const int32_t ncw = p.conv_q * p.conv_k, nb = p.n_rb + p.n_kb;
    const int64_t n = (int64_t)p.heads_q * ncw, terms = (int64_t)p.batch_total * nb;
    const int lane = (int)threadIdx.x & 31;
    for (int64_t i = (int64_t)blockIdx.x * (PREP_THREADS / 32) + (threadIdx.x >> 5); i < n;
         i += (int64_t)gridDim.x * (PREP_THREADS / 32)) {
        const int32_t h = (int32_t)(i / ncw), ab = (int32_t)(i % ncw);
        float sum = 0.0f;
        for (int64_t t = lane; t < terms; t += 32) {
            const int32_t b = (int32_t)(t / nb), r = (int32_t)(t % nb);
            const int64_t head = (int64_t)b * p.heads_q + h;
            sum += r < p.n_rb ? p.dw_band[(head * p.n_rb + r) * ncw + ab]
                              : p.dw_fold[(head * p.n_kb + (r - p.n_rb)) * ncw + ab];
        }
        sum = ta_fmb_warp_sum(sum);
        if (lane == 0) p.dconv_w[i] = sum;
    }
}

/* ---- host ---- */

/* The kernels of one head dim and storage type. */
struct ta_fmb_kernels {
    const void *kf, *diag, *g, *band, *dq, *kv, *kv2, *dk;
    size_t (*dq_smem)(int32_t), (*kv_smem)(int32_t), (*kv2_smem)(int32_t);
    int32_t a_group; /* a's per dk/dv block (ta_fmb_kv_traits::AG) */
};

/* F32: the dq and dk kernels that store f32 (the rotary stage). */
template <int D, bool BF16> static ta_fmb_kernels ta_fmb_kernels_of(bool f32) {
    ta_fmb_kernels k;
    k.kf = reinterpret_cast<const void *>(&ta_fast_mta_kf_kernel<BF16>);
    k.diag = reinterpret_cast<const void *>(&ta_fast_mta_diag_kernel<BF16>);
    k.g = reinterpret_cast<const void *>(&ta_fmb_g_kernel<BF16>);
    k.band = reinterpret_cast<const void *>(&ta_fmb_band_kernel<BF16>);
    k.dq = f32 ? reinterpret_cast<const void *>(&ta_fmb_dq_kernel<D, BF16, true>)
               : reinterpret_cast<const void *>(&ta_fmb_dq_kernel<D, BF16>);
    k.kv = reinterpret_cast<const void *>(&ta_fmb_kv_kernel<D, 1, BF16>);
    k.kv2 = reinterpret_cast<const void *>(&ta_fmb_kv_kernel<D, 2, BF16>);
    k.dk = f32 ? reinterpret_cast<const void *>(&ta_fmb_dk_kernel<D, BF16, true>)
               : reinterpret_cast<const void *>(&ta_fmb_dk_kernel<D, BF16>);
    k.dq_smem = &ta_fmb_dq_traits<D>::smem;
    k.kv_smem = &ta_fmb_kv_traits<D, 1>::smem;
    k.kv2_smem = &ta_fmb_kv_traits<D, 2>::smem;
    k.a_group = ta_fmb_kv_traits<D, 1>::AG;
    return k;
}

template <bool BF16> static int ta_fmb_kernels_for(int32_t d, bool f32, ta_fmb_kernels *k) {
    switch (d) {
    case 64: *k = ta_fmb_kernels_of<64, BF16>(f32); return 1;
    case 96: *k = ta_fmb_kernels_of<96, BF16>(f32); return 1;
    case 128: *k = ta_fmb_kernels_of<128, BF16>(f32); return 1;
    default: return 0;
    }
}

} /* namespace */

extern "C" ta_status ta_cuda_fast_mta_bwd(const ta_plan *plan0, const ta_bwd_args *a0,
                                          const ta_cuda_bwd_ws *ws, void *stream) {
    const ta_problem *pr = &plan0->p;
    const void *ptrs[12] = {a0->q,  a0->k,  a0->v,  a0->o,      a0->d_o,     a0->lse,
                            a0->dq, a0->dk, a0->dv, a0->conv_w, a0->dconv_w, ws->delta};
    const int bf16 = pr->dtype == TA_BF16;
    /* the rotary stage: the kernels on q and k turned once (the forward's
     * copies, bit for bit), dq and dk of the turned tensors in f32, turned
     * back and rounded once (ta_cuda_fast_mta_rope_back) */
    const bool rope = plan0->stages.load == TA_LOAD_ROPE;
    const int32_t band = ta_cuda_fast_mta_band(plan0), edge_n = ta_cuda_fast_mta_edge(plan0);
    ta_fmb_kernels k;
    ta_fmb_params prm, prm_dq, prm_kv;
    ta_tiling t_dq, t_dqw, t_kv;
    ta_cuda_fast_mta_wg dqw, kvw;
    int dq_wg, kv_wg = 0;
    ta_cuda_launch_desc launch[7];
    ta_plan sub;
    ta_bwd_args a2;
    const ta_plan *plan = plan0;
    const ta_bwd_args *a = a0;
    size_t sm[7];
    int nl = 0, i;
    ta_status st;
    if ((st = ta_cuda_check_pointers(ptrs, 12)) != TA_OK) return st;
    if (rope && (st = ta_cuda_check_rope(plan0)) != TA_OK) return st;
    if (!(bf16 ? ta_fmb_kernels_for<true>(pr->head_dim, rope, &k)
               : ta_fmb_kernels_for<false>(pr->head_dim, rope, &k)))
        return TA_ERR_UNSUPPORTED;
    sm[0] = ta_fast_mta_kf_smem(pr);
    sm[1] = ta_fast_mta_diag_smem(pr, band, edge_n);
    sm[2] = ta_fmb_g_smem(pr, band);
    sm[3] = ta_fmb_band_smem(pr, band, edge_n);
    sm[4] = k.dq_smem(pr->conv_q);
    sm[5] = k.kv_smem(pr->conv_q);
    sm[6] = ta_fmb_dk_smem(pr);
    /* rows off 16 bytes: the exact kernels (their workspace regions are in
     * ours: ta_cuda_bwd_layout; with the rotary stage they turn q and k as
     * they load them and dq, dk back as they store them) */
    if (!ta_cuda_fast_bwd_aligned(plan0, a0)) return ta_cuda_mta_bwd(plan0, a0, ws, stream);
    /* dq on wgmma with the forward's wgmma kernel: tile_config 5, and 0 on an
     * sm_90 device of a build with sm_90a code (5 elsewhere: unsupported, as
     * the forward) */
    {
        const int sm90 = ta_cuda_fast_is_sm90();
        if (sm90 < 0) return TA_ERR_DEVICE;
        if (pr->tile_config == 5 && !sm90) return TA_ERR_UNSUPPORTED;
        dq_wg = sm90 && (pr->tile_config == 0 || pr->tile_config == 5) &&
                ta_cuda_fast_mta_dq_wg_launch(pr->head_dim, bf16, rope, &dqw);
        if (dq_wg) {
            k.dq = dqw.kernel;
            sm[4] = dqw.smem;
            /* dk/dv on wgmma too (D = 64, 128), with two Q tile buffers where
             * the device holds them */
            int32_t ag = 0;
            kv_wg = ta_cuda_fast_mta_kv_wg_launch(pr->head_dim, pr->conv_q, bf16, 2, &kvw, &ag);
            if (kv_wg && (st = ta_cuda_smem_opt_in(kvw.kernel, kvw.smem, kvw.smem)) != TA_OK) {
                if (st != TA_ERR_UNSUPPORTED) return st;
                kv_wg = ta_cuda_fast_mta_kv_wg_launch(pr->head_dim, pr->conv_q, bf16, 1, &kvw, &ag);
            }
            if (kv_wg) {
                k.kv = kvw.kernel;
                sm[5] = kvw.smem;
                k.a_group = ag;
            }
        }
    }
    if (rope) { /* the kernels below on the copies: plan, a */
        ta_cuda_fast_mta_rope_plan(plan0, 1, &sub);
        a2 = *a0;
        a2.q = ws->rot_q;
        a2.k = ws->rot_k;
        a2.dq = ws->rot_dq;
        a2.dk = ws->rot_dk;
        plan = &sub;
        a = &a2;
    }
    /* the mma.sync dk/dv kernel with two Q tile buffers where the device
     * holds them (3-4 % faster on an H100, docs/cuda.md; the same bits: only
     * the loads move) */
    if (!kv_wg) {
        if ((st = ta_cuda_smem_opt_in(k.kv2, k.kv2_smem(pr->conv_q), k.kv2_smem(pr->conv_q))) ==
            TA_OK) {
            k.kv = k.kv2;
            sm[5] = k.kv2_smem(pr->conv_q);
        } else if (st != TA_ERR_UNSUPPORTED) {
            return st;
        }
    }
    { /* a tile the device cannot hold (ta_cuda_smem_opt_in's policy): the exact kernels */
        const void *ks[7] = {k.kf, k.diag, k.g, k.band, k.dq, k.kv, k.dk};
        for (i = 0; i < 7; ++i)
            if (sm[i] > 0 && (st = ta_cuda_smem_opt_in(ks[i], sm[i], sm[i])) != TA_OK)
                return st == TA_ERR_UNSUPPORTED ? ta_cuda_mta_bwd(plan0, a0, ws, stream) : st;
    }
    {
        ta_plan no_halo = *plan;
        no_halo.p.conv_q = no_halo.p.conv_k = 0;
        /* the wgmma dq kernel's tiles: 128 score rows, the first 128 - (c_q - 1) output */
        if ((dq_wg && (st = ta_cuda_tiling(&no_halo, dqw.block_m - (pr->conv_q - 1), dqw.block_n,
                                           TA_TILING_BWD, &t_dqw)) != TA_OK) ||
            (st = ta_cuda_tiling(&no_halo, DQ_BM, DQ_BN, TA_TILING_BWD, &t_dq)) != TA_OK ||
            (st = ta_cuda_tiling(&no_halo, kv_wg ? kvw.block_m : KV_ROWS,
                                 kv_wg ? kvw.block_n : KV_KEYS, TA_TILING_BWD, &t_kv)) != TA_OK)
            return st;
    }
    if (rope && (st = ta_cuda_fast_mta_rope_turn(plan0, a0->q, a0->k, NULL, NULL, NULL, ws->rot_q,
                                                 ws->rot_k, NULL, NULL, stream)) != TA_OK)
        return st;
    if ((st = ta_cuda_fast_delta(plan, a, ws->delta, stream)) != TA_OK) return st;
    memset(&prm, 0, sizeof prm);
    ta_cuda_params_bwd(&prm, plan, &t_dq, a, ws);
    prm.kf = static_cast<uint16_t *>(ws->mta_kf);
    prm.diag = ws->mta_diag;
    prm.band = band;
    prm.edge = ws->mta_edge;
    prm.edge_n = edge_n;
    prm.g_edge = ws->mta_g_edge;
    prm.dsb2 = ws->mta_dsb2;
    prm.nf = edge_n > 0 ? 3 * edge_n + pr->conv_q - 1 : 0;
    prm.g = ws->mta_g;
    prm.dsb = ws->mta_dsb;
    prm.dq_band = ws->mta_dq_band;
    prm.dkf = ws->mta_dkf;
    prm.dw_fold = ws->mta_dw_fold;
    prm.dw_band = ws->mta_dw_band;
    prm.ne = 2 * band;
    prm.n_kb = (pr->seq_k + DK_KEYS - 1) / DK_KEYS;
    prm.n_rb = band > 0 ? (pr->seq_q + DIAG_ROWS - 1) / DIAG_ROWS : 0;
    prm.batch_total = pr->batch;
    prm_kv = prm_dq = prm;
    prm_kv.t = t_kv; /* the dk/dv kernel's tiles (ta_tile_k_rows) */
    if (dq_wg) prm_dq.t = t_dqw;
    {
        const int64_t kf_blocks = (int64_t)pr->heads_q * ((pr->seq_k + KF_ROWS - 1) / KF_ROWS);
        const int64_t row_blocks = (int64_t)pr->heads_q * ((pr->seq_q + DIAG_ROWS - 1) / DIAG_ROWS);
        const int64_t n_ag = (pr->conv_q + k.a_group - 1) / k.a_group;
        launch[nl] = ta_cuda_launch_of(k.kf, &prm, kf_blocks, 0, sm[0]);
        launch[nl++].threads = PREP_THREADS;
        if (band > 0) {
            launch[nl] = ta_cuda_launch_of(k.diag, &prm, row_blocks, 0, sm[1]);
            launch[nl++].threads = PREP_THREADS;
            launch[nl] = ta_cuda_launch_of(k.g, &prm, row_blocks, 0, sm[2]);
            launch[nl++].threads = PREP_THREADS;
            launch[nl] = ta_cuda_launch_of(k.band, &prm, row_blocks, 0, sm[3]);
            launch[nl++].threads = PREP_THREADS;
        }
        launch[nl] =
            ta_cuda_launch_of(k.dq, &prm_dq, (int64_t)pr->heads_q * prm_dq.t.num_q_tiles, 0, sm[4]);
        launch[nl++].threads = dq_wg ? dqw.threads : DQ_THREADS;
        launch[nl] = ta_cuda_launch_of(k.kv, &prm_kv,
                                       (int64_t)pr->heads_kv * t_kv.num_k_tiles * n_ag, 0, sm[5]);
        launch[nl++].threads = kv_wg ? kvw.threads : KV_THREADS;
        launch[nl] = ta_cuda_launch_of(k.dk, &prm, (int64_t)pr->heads_kv * prm.n_kb, 0, sm[6]);
        launch[nl++].threads = PREP_THREADS;
    }
    if ((st = ta_cuda_launch_batches(launch, nl, a->seqlens_k, pr->batch, stream)) != TA_OK)
        return st;
    { /* dconv_w: every batch entry's partials, after all chunks */
        ta_cuda_launch_desc d = ta_cuda_launch_of(
            reinterpret_cast<const void *>(&ta_fmb_dw_kernel), &prm, 0,
            ((int64_t)pr->heads_q * pr->conv_q * pr->conv_k + PREP_THREADS / 32 - 1) /
                (PREP_THREADS / 32),
            0);
        d.threads = PREP_THREADS;
        if ((st = ta_cuda_launch_batches(&d, 1, NULL, pr->batch, stream)) != TA_OK) return st;
    }
    if (!rope) return TA_OK;
    return ta_cuda_fast_mta_rope_back(plan0, ws->rot_dq, ws->rot_dk, a0->dq, a0->dk, stream);
}
