/*
 * The rotary load stage of the CUDA fast path (docs/rope.md, docs/cuda.md
 * section 7): q and k turned once per call into the workspace, in the storage
 * type, then the un-rotated fast kernels read the turned copies; the backward
 * turns dq and dk back in its epilogue (cuda/ta_cuda_fast_bwd_sm90.cu).
 *
 * Why once and not in each tile as it streams: a turned K row needs its table
 * row, rope_pairs cosines and sines in f32 (4 D bytes at full rotary width),
 * twice the bytes of the bf16 K row itself, and a K tile is read once per Q
 * tile that sees it. Turning in place in shared memory was built and measured
 * first (H100, bf16): +96 to +312 % on the forward and backward (docs/cuda.md
 * section 7); turning once costs one read and one write of q and k.
 *
 * Each thread takes one 16-byte chunk (8 elements) of a row: a chunk of the a
 * sides (half-split: features [8 j, 8 j + 8) < n pairs, with the chunk at
 * + n of the b sides; interleaved: 4 pairs) is turned by ta_rope_pair in f32,
 * every backend's arithmetic, and rounded back (RNE); chunks past the rotated
 * dims are copied; the b chunks of half-split are written by their a chunk's
 * thread. Needs rope_pairs a multiple of 8 (half-split) or 4 (interleaved):
 * ta_cuda_supports. Positions are device memory the host cannot read: one
 * outside [0, rope_rows) is clamped into it (docs/rope.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "ta_cuda_fast.cuh"
#include "ta_cuda_host.cuh"
#include "ta_rope_load.h"

extern "C" {
#include "ta_cuda.h"
#include "ta_internal.h"
}

namespace {

/* One side of the call: the source tensor and where its table rows come from. */
struct ta_rope_side {
    const uint16_t *src;
    uint16_t *dst;     /* contiguous [B, heads, S, D] */
    ta_strides st;     /* the source's element strides */
    const int32_t *pos; /* [B, S] or NULL (token t: row t) */
    int32_t heads, seq, group; /* group: heads per table (q: H / H_kv; k: 1) */
};

struct ta_rope_turn_params {
    ta_rope_side side;
    const float *cos, *sin;
    int32_t d, n, half, rows, row_stride, head_stride;
    int64_t n_chunks; /* B heads S (D / 8) */
};

template <bool BF16> TA_FAST_FN uint4 ta_rope_ld16(const uint16_t *p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* Turn the four registers of an interleaved chunk (pairs i0 .. i0 + 3). */
template <bool BF16>
TA_FAST_FN void ta_rope_chunk_il(uint4 *x, const float *c, const float *s, int32_t i0) {
    uint32_t w[4] = {x->x, x->y, x->z, x->w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        float a, b;
        ta_fast_unpack<BF16>(w[e], &a, &b);
        ta_rope_pair(&a, &b, __ldg(c + i0 + e), __ldg(s + i0 + e));
        w[e] = ta_fast_pack<BF16>(a, b);
    }
    *x = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Turn a half-split chunk pair: a sides (pairs i0 .. i0 + 7) and b sides. */
template <bool BF16>
TA_FAST_FN void ta_rope_chunk_half(uint4 *xa, uint4 *xb, const float *c, const float *s,
                                   int32_t i0) {
    uint32_t wa[4] = {xa->x, xa->y, xa->z, xa->w}, wb[4] = {xb->x, xb->y, xb->z, xb->w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        float a0, a1, b0, b1;
        ta_fast_unpack<BF16>(wa[e], &a0, &a1);
        ta_fast_unpack<BF16>(wb[e], &b0, &b1);
        ta_rope_pair(&a0, &b0, __ldg(c + i0 + 2 * e), __ldg(s + i0 + 2 * e));
        ta_rope_pair(&a1, &b1, __ldg(c + i0 + 2 * e + 1), __ldg(s + i0 + 2 * e + 1));
        wa[e] = ta_fast_pack<BF16>(a0, a1);
        wb[e] = ta_fast_pack<BF16>(b0, b1);
    }
    *xa = make_uint4(wa[0], wa[1], wa[2], wa[3]);
    *xb = make_uint4(wb[0], wb[1], wb[2], wb[3]);
}

template <bool BF16>
__global__ void __launch_bounds__(256) ta_cuda_rope_turn_kernel(const __grid_constant__
                                                                ta_rope_turn_params p) {
    const ta_rope_side &sd = p.side;
    const int32_t cpr = p.d / 8; /* chunks per row */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n_chunks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t j = (int32_t)(i % cpr);
        const int64_t row = i / cpr; /* (b, h, t) */
        const int32_t t = (int32_t)(row % sd.seq), h = (int32_t)((row / sd.seq) % sd.heads);
        const int32_t b = (int32_t)(row / sd.seq / sd.heads);
        const uint16_t *x = sd.src + b * sd.st.batch + h * sd.st.head + t * sd.st.seq;
        uint16_t *y = sd.dst + row * p.d;
        const int32_t f = 8 * j;
        int32_t tr = sd.pos ? __ldg(sd.pos + (int64_t)b * sd.seq + t) : t;
        const float *c, *s;
        tr = tr < 0 ? 0 : tr >= p.rows ? p.rows - 1 : tr;
        c = p.cos + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        s = p.sin + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        if (p.half) {
            if (f < p.n) { /* an a chunk and its b chunk */
                uint4 xa = ta_rope_ld16<BF16>(x + f), xb = ta_rope_ld16<BF16>(x + f + p.n);
                ta_rope_chunk_half<BF16>(&xa, &xb, c, s, f);
                *reinterpret_cast<uint4 *>(y + f) = xa;
                *reinterpret_cast<uint4 *>(y + f + p.n) = xb;
            } else if (f >= 2 * p.n) { /* past the rotated dims */
                *reinterpret_cast<uint4 *>(y + f) = ta_rope_ld16<BF16>(x + f);
            }
        } else {
            uint4 xa = ta_rope_ld16<BF16>(x + f);
            if (f < 2 * p.n) ta_rope_chunk_il<BF16>(&xa, c, s, f / 2);
            *reinterpret_cast<uint4 *>(y + f) = xa;
        }
    }
}

/* The q side (kv_side 0) or the k side of the call. */
ta_rope_side ta_rope_side_of(const ta_plan *plan, int kv_side, const void *src, void *dst) {
    ta_rope_side sd;
    sd.src = static_cast<const uint16_t *>(src);
    sd.dst = static_cast<uint16_t *>(dst);
    sd.st = kv_side ? plan->layout.k : plan->layout.q;
    sd.pos = kv_side ? plan->rope.pos_k : plan->rope.pos_q;
    sd.heads = kv_side ? plan->p.heads_kv : plan->p.heads_q;
    sd.seq = kv_side ? plan->p.seq_k : plan->p.seq_q;
    sd.group = kv_side ? 1 : plan->group;
    return sd;
}

ta_status ta_rope_turn_side(const ta_plan *plan, const ta_rope_side &sd, void *stream) {
    const ta_problem *pr = &plan->p;
    ta_rope_turn_params prm;
    const void *kernel = pr->dtype == TA_BF16
                             ? reinterpret_cast<const void *>(&ta_cuda_rope_turn_kernel<true>)
                             : reinterpret_cast<const void *>(&ta_cuda_rope_turn_kernel<false>);
    int64_t blocks;
    void *args[1];
    memset(&prm, 0, sizeof prm);
    prm.side = sd;
    prm.cos = plan->rope.cos;
    prm.sin = plan->rope.sin;
    prm.d = pr->head_dim;
    prm.n = pr->rope_pairs;
    prm.half = pr->rope == TA_ROPE_HALF;
    prm.rows = pr->rope_rows;
    prm.row_stride = pr->rope_row_stride;
    prm.head_stride = pr->rope_head_stride;
    prm.n_chunks = (int64_t)pr->batch * sd.heads * sd.seq * (pr->head_dim / 8);
    blocks = (prm.n_chunks + 255) / 256;
    args[0] = &prm;
    return ta_cuda_launch_threads(kernel, blocks < 65536 ? blocks : 65536, 256, 0, args, stream);
}

} /* namespace */

extern "C" void ta_cuda_fast_rope_plan(const ta_plan *plan, ta_plan *sub) {
    const ta_problem *pr = &plan->p;
    /* the plan the un-rotated kernels run: q and k contiguous, no load stage */
    *sub = *plan;
    sub->stages.load = TA_LOAD_NONE;
    sub->layout.q.seq = pr->head_dim;
    sub->layout.q.head = (int64_t)pr->seq_q * pr->head_dim;
    sub->layout.q.batch = (int64_t)pr->heads_q * sub->layout.q.head;
    sub->layout.k.seq = pr->head_dim;
    sub->layout.k.head = (int64_t)pr->seq_k * pr->head_dim;
    sub->layout.k.batch = (int64_t)pr->heads_kv * sub->layout.k.head;
}

extern "C" ta_status ta_cuda_fast_rope_turn(const ta_plan *plan, const void *q, const void *k,
                                            void *rot_q, void *rot_k, void *stream) {
    ta_status st;
    if ((st = ta_rope_turn_side(plan, ta_rope_side_of(plan, 0, q, rot_q), stream)) != TA_OK)
        return st;
    return ta_rope_turn_side(plan, ta_rope_side_of(plan, 1, k, rot_k), stream);
}
