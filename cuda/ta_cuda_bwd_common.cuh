/*
 * Pieces of the CUDA backward shared by the SDPA and the MTA launch code
 * (cuda/ta_cuda_sdpa_bwd.cu defines them, cuda/ta_cuda_mta_bwd.cu uses them).
 * Not installed.
 */
#ifndef TA_CUDA_BWD_COMMON_CUH
#define TA_CUDA_BWD_COMMON_CUH

#include "ta_cuda_tile.cuh"

extern "C" {
#include "ta_internal.h"
}

/*
 * Enqueue the delta kernel on stream: delta[row] = dot(dO_row, o_row, D_v)
 * (o and d_o addressed by the plan's layout, delta contiguous [B, H, S_q])
 * (+0, fmaf, d ascending, o read from the stored forward output) for every row
 * of [B, H, S_q], the reference's D_i (ta_ref_bwd_load_q). TA_ERR_DEVICE if the
 * launch fails.
 */
ta_status ta_cuda_bwd_delta(const ta_plan *plan, const ta_bwd_args *a, float *delta, void *stream);

/* 1 if the call covers a row or key range of its rows and keys (ta_problem.
 * row_begin, row_end, key_begin, key_end in ta_bwd; docs/mta.md 2b): the
 * backward's tiling plan->bwd then holds the ranges. */
static inline bool ta_cuda_bwd_ranged(const ta_plan *plan) {
    const ta_tiling *t = &plan->bwd;
    return t->row_begin != 0 || t->row_end != plan->p.seq_q || t->key_begin != 0 ||
           t->key_end != plan->p.seq_k;
}

/* A kernel's own tile [*first, *first + *n) cut to the output range [lo, hi)
 * (rows or keys of the call's ranges; the whole sequence without them). The
 * kernels that run their own tiling (the ranges lie on plan->bwd's tiles, not
 * on theirs) visit the cut tile: every value of an entry is a function of its
 * absolute (row, key), and the long sums run over absolute 64-index chunks,
 * so a tile cut to the range sums exactly the entries REF's tiles inside the
 * range do, in the same order, and stores only the range's gradients.
 * *n <= 0: nothing of the tile is in the range (the block skips it). */
static __device__ __forceinline__ void ta_cuda_cut_range(int32_t lo, int32_t hi, int32_t *first,
                                                        int32_t *n) {
    const int32_t b = *first > lo ? *first : lo;
    const int32_t e = *first + *n < hi ? *first + *n : hi;
    *first = b;
    *n = e - b;
}

/* A dk/dv kernel's outputs (the general SDPA one's, the MTA one's; P their
 * parameters, with dk_lo, dv_lo), keys col0 + 4ty + r < cols of the context
 * kc's slices, slot slot0 + s (s < n_slots): dk's features below nk slots,
 * then dv's. MODE
 * TA_CUDA_KV_STORE: dk = store(scale * hi), dv = store(hi) in dtype DT (step
 * 5); the accumulating mode's pairs: TA_CUDA_KV_GET from the caller's f32
 * words (the entries outside keep their (+0, +0)), TA_CUDA_KV_PUT back into
 * them, unscaled. */
enum { TA_CUDA_KV_STORE, TA_CUDA_KV_GET, TA_CUDA_KV_PUT };

template <int DT, int NS, int MODE, typename P>
TA_CUDA_DEV void ta_cuda_dkdv_out(const P &p, const ta_tile_ctx &kc, int32_t col0,
                                  int32_t cols, int32_t slot0, int32_t nk, int32_t n_slots,
                                  float (&hi)[4][NS][4], float (&lo)[4][NS][4]) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int s = 0; s < NS; ++s) {
        const int32_t u = slot0 + s;
        const bool is_dk = u < nk;
        const int32_t len = is_dk ? p.head_dim : p.head_dim_v;
        const int32_t f0 = (is_dk ? u : u - nk) * TA_CUDA_SLOT + 4 * tx;
        void *dst = is_dk ? p.dk : p.dv;
        float *lb = is_dk ? p.dk_lo : p.dv_lo;
        const int64_t slice = is_dk ? kc.dk : kc.dv;
        const int64_t ld = is_dk ? p.lay.dk.seq : p.lay.dv.seq;
        if (s >= n_slots) continue;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int j = 4 * ty + r;
            if (j >= cols) continue;
            const int64_t first = ta_cuda_row(slice, ld, col0 + j);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t at = first + f0 + e;
                if (f0 + e >= len) continue;
                if (MODE == TA_CUDA_KV_STORE) {
                    ta_cuda_store<DT>(dst, (size_t)at, is_dk ? p.scale * hi[r][s][e] : hi[r][s][e]);
                } else if (MODE == TA_CUDA_KV_PUT) {
                    static_cast<float *>(dst)[at] = hi[r][s][e];
                    lb[at] = lo[r][s][e];
                } else {
                    hi[r][s][e] = static_cast<const float *>(dst)[at];
                    lo[r][s][e] = lb[at];
                }
            }
        }
    }
}

#endif /* TA_CUDA_BWD_COMMON_CUH */
