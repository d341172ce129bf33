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

/* Chunk f (features f .. f + 7) of row x turned into row y by table row
 * (c, s): a half-split a chunk with its b chunk at + n, an interleaved chunk
 * of 4 pairs, a chunk past the rotated dims copied (a half-split b chunk:
 * nothing, its a chunk's thread writes it). */
template <bool BF16, class P>
TA_FAST_FN void ta_rope_turn_chunk(const P &p, const uint16_t *x, uint16_t *y, const float *c,
                                   const float *s, int32_t f) {
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

/* Chunk i of a [B, heads, seq, 8 cpr] tensor: its chunk j in the row, the
 * row (b, h, t) and its coordinates. */
struct ta_rope_chunk_pos {
    int64_t row;
    int32_t j, t, h, b;
};

TA_FAST_FN ta_rope_chunk_pos ta_rope_chunk_of(int64_t i, int32_t cpr, int32_t seq, int32_t heads) {
    ta_rope_chunk_pos cp;
    cp.j = (int32_t)(i % cpr);
    cp.row = i / cpr;
    cp.t = (int32_t)(cp.row % seq);
    cp.h = (int32_t)((cp.row / seq) % heads);
    cp.b = (int32_t)(cp.row / seq / heads);
    return cp;
}

template <bool BF16>
__global__ void __launch_bounds__(256) ta_cuda_rope_turn_kernel(const __grid_constant__
                                                                ta_rope_turn_params p) {
    const ta_rope_side &sd = p.side;
    const int32_t cpr = p.d / 8; /* chunks per row */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n_chunks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const ta_rope_chunk_pos cp = ta_rope_chunk_of(i, cpr, sd.seq, sd.heads);
        const int32_t j = cp.j, t = cp.t, h = cp.h, b = cp.b;
        const int64_t row = cp.row; /* (b, h, t) */
        const uint16_t *x = sd.src + b * sd.st.batch + h * sd.st.head + t * sd.st.seq;
        uint16_t *y = sd.dst + row * p.d;
        const int32_t f = 8 * j;
        int32_t tr = sd.pos ? __ldg(sd.pos + (int64_t)b * sd.seq + t) : t;
        const float *c, *s;
        tr = tr < 0 ? 0 : tr >= p.rows ? p.rows - 1 : tr;
        c = p.cos + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        s = p.sin + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        ta_rope_turn_chunk<BF16>(p, x, y, c, s, f);
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

/* The table fields every turn kernel's parameters share, and its launch: one
 * thread per chunk of B heads seq rows of d features (nothing when empty). */
template <class P> void ta_rope_table_of(const ta_plan *plan, int32_t d, int32_t heads,
                                         int32_t seq, P *prm) {
    const ta_problem *pr = &plan->p;
    prm->cos = plan->rope.cos;
    prm->sin = plan->rope.sin;
    prm->d = d;
    prm->n = pr->rope_pairs;
    prm->half = pr->rope == TA_ROPE_HALF;
    prm->rows = pr->rope_rows;
    prm->row_stride = pr->rope_row_stride;
    prm->head_stride = pr->rope_head_stride;
    prm->n_chunks = (int64_t)pr->batch * heads * seq * (d / 8);
}

template <class P>
ta_status ta_rope_launch(const ta_plan *plan, const void *k_bf16, const void *k_f16, P *prm,
                         void *stream) {
    const int64_t blocks = (prm->n_chunks + 255) / 256;
    void *args[1] = {prm};
    if (prm->n_chunks == 0) return TA_OK;
    return ta_cuda_launch_threads(plan->p.dtype == TA_BF16 ? k_bf16 : k_f16,
                                  blocks < 65536 ? blocks : 65536, 256, 0, args, stream);
}

ta_status ta_rope_turn_side(const ta_plan *plan, const ta_rope_side &sd, void *stream) {
    ta_rope_turn_params prm;
    memset(&prm, 0, sizeof prm);
    prm.side = sd;
    ta_rope_table_of(plan, plan->p.head_dim, sd.heads, sd.seq, &prm);
    return ta_rope_launch(plan, reinterpret_cast<const void *>(&ta_cuda_rope_turn_kernel<true>),
                          reinterpret_cast<const void *>(&ta_cuda_rope_turn_kernel<false>), &prm,
                          stream);
}


/* ---- the fast MTA kernels' copies (ta_cuda_fast_mta_rope_*) ----
 *
 * The fast MTA kernels read q, q_hist, k and v; with the stage they read
 * workspace copies instead: q, k turned as above, the query history rows
 * turned by row 0's table row - i (ta_rope_token_row, clamped as
 * ta_cuda_rope_at clamps), and with a paged cache k gathered through the block
 * table (turned) and v gathered (not turned), so the kernels run without pages.
 * A separate kernel from the SDPA one above (which stays as it was). */

/* One tensor of the call: where its rows are and how they turn. */
struct ta_rope_xside {
    const uint16_t *src;
    uint16_t *dst;             /* contiguous [B, heads, seq, d] */
    ta_strides st;             /* the source's element strides (pages: the pool's) */
    const int32_t *pos;        /* [B, pos_seq] or NULL (token t: row t) */
    const int32_t *pages;      /* the block table [B, max_blocks], or NULL */
    int32_t heads, seq, group; /* group: heads per table (q: H / H_kv; k: 1) */
    int32_t pos_seq;           /* the positions' row length (S_q or S_k) */
    int32_t hist;              /* > 0: q_hist's rows, row t is token t - hist */
    int32_t turn;              /* 0: copied only (v) */
    int32_t page_size, num_pages, max_blocks;
};

struct ta_rope_xparams {
    ta_rope_xside side;
    const float *cos, *sin;
    int32_t d, n, half, rows, row_stride, head_stride;
    int64_t n_chunks; /* B heads seq (d / 8) */
};

template <bool BF16>
__global__ void __launch_bounds__(256) ta_cuda_rope_xturn_kernel(const __grid_constant__
                                                                 ta_rope_xparams p) {
    const ta_rope_xside &sd = p.side;
    const int32_t cpr = p.d / 8; /* chunks per row */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n_chunks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const ta_rope_chunk_pos cp = ta_rope_chunk_of(i, cpr, sd.seq, sd.heads);
        const int32_t j = cp.j, t = cp.t, h = cp.h, b = cp.b;
        const int64_t row = cp.row; /* (b, h, t) */
        int64_t at;
        if (sd.pages) { /* ta_cuda_page_row: the entry clamped into the pool */
            int32_t pg = __ldg(sd.pages + (int64_t)b * sd.max_blocks + t / sd.page_size);
            pg = pg < 0 ? 0 : pg >= sd.num_pages ? sd.num_pages - 1 : pg;
            at = ((int64_t)pg * sd.page_size + t % sd.page_size) * sd.st.seq + h * sd.st.head;
        } else {
            at = b * sd.st.batch + h * sd.st.head + t * sd.st.seq;
        }
        const uint16_t *x = sd.src + at;
        uint16_t *y = sd.dst + row * p.d;
        const int32_t f = 8 * j;
        if (!sd.turn) {
            *reinterpret_cast<uint4 *>(y + f) = ta_rope_ld16<BF16>(x + f);
            continue;
        }
        /* the table row as ta_cuda_rope_at finds it: token max(tok, 0)'s row
         * clamped into the table, then a history row's offset, clamped at 0 */
        const int32_t tok = t - sd.hist, t0 = tok < 0 ? 0 : tok;
        int32_t tr = sd.pos ? __ldg(sd.pos + (int64_t)b * sd.pos_seq + t0) : t0;
        const float *c, *s;
        tr = tr < 0 ? 0 : tr >= p.rows ? p.rows - 1 : tr;
        tr = ta_rope_token_row(tr, tok);
        tr = tr < 0 ? 0 : tr;
        c = p.cos + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        s = p.sin + (int64_t)(h / sd.group) * p.head_stride + (int64_t)tr * p.row_stride;
        ta_rope_turn_chunk<BF16>(p, x, y, c, s, f);
    }
}

ta_status ta_rope_xturn_side(const ta_plan *plan, const ta_rope_xside &sd, int32_t d,
                             void *stream) {
    ta_rope_xparams prm;
    memset(&prm, 0, sizeof prm);
    prm.side = sd;
    ta_rope_table_of(plan, d, sd.heads, sd.seq, &prm);
    return ta_rope_launch(plan, reinterpret_cast<const void *>(&ta_cuda_rope_xturn_kernel<true>),
                          reinterpret_cast<const void *>(&ta_cuda_rope_xturn_kernel<false>), &prm,
                          stream);
}

/* One side of the MTA call: the q side (kv 0, hist 0), its history rows
 * (kv 0, hist = q_history) or the k / v side (kv 1; turn 0: v). */
ta_rope_xside ta_rope_xside_of(const ta_plan *plan, int kv, int32_t hist, int turn,
                               const void *src, void *dst, const int32_t *block_table) {
    const ta_problem *pr = &plan->p;
    ta_rope_xside sd;
    memset(&sd, 0, sizeof sd);
    sd.src = static_cast<const uint16_t *>(src);
    sd.dst = static_cast<uint16_t *>(dst);
    sd.st = kv ? (turn ? plan->layout.k : plan->layout.v) : hist ? plan->layout.q_hist
                                                                 : plan->layout.q;
    sd.pos = kv ? plan->rope.pos_k : plan->rope.pos_q;
    sd.heads = kv ? pr->heads_kv : pr->heads_q;
    sd.seq = kv ? pr->seq_k : hist ? hist : pr->seq_q;
    sd.pos_seq = kv ? pr->seq_k : pr->seq_q;
    sd.group = kv ? 1 : plan->group;
    sd.hist = hist;
    sd.turn = turn;
    if (kv && pr->kv_page_size > 0) {
        sd.pages = block_table;
        sd.page_size = pr->kv_page_size;
        sd.num_pages = pr->kv_num_pages;
        sd.max_blocks = pr->kv_max_blocks;
    }
    return sd;
}

/* ---- the fast MTA backward's turn back: dq, dk from f32 copies ---- */

struct ta_rope_back_params {
    const float *src;         /* contiguous [B, heads, seq, d] f32: the rotated side's gradient */
    uint16_t *dst;            /* the caller's dq / dk */
    ta_strides st;            /* dst's element strides */
    const int32_t *pos;       /* [B, seq] or NULL */
    int32_t heads, seq, group;
    const float *cos, *sin;
    int32_t d, n, half, rows, row_stride, head_stride;
    int64_t n_chunks; /* B heads seq (d / 8) */
};

/* 8 f32 (two float4) -> 8 storage-type elements (one uint4), RNE. */
template <bool BF16> TA_FAST_FN uint4 ta_rope_pack8(const float *v) {
    return make_uint4(ta_fast_pack<BF16>(v[0], v[1]), ta_fast_pack<BF16>(v[2], v[3]),
                      ta_fast_pack<BF16>(v[4], v[5]), ta_fast_pack<BF16>(v[6], v[7]));
}

TA_FAST_FN void ta_rope_ld8f(const float *p, float *v) {
    const float4 a = *reinterpret_cast<const float4 *>(p);
    const float4 b = *reinterpret_cast<const float4 *>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* One thread per 8 features of a row (the a chunk and its b chunk for
 * half-split pairs): g' = R^T g by ta_rope_pair_t in f32, rounded once. */
template <bool BF16>
__global__ void __launch_bounds__(256) ta_cuda_rope_back_kernel(const __grid_constant__
                                                                ta_rope_back_params p) {
    const int32_t cpr = p.d / 8;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n_chunks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const ta_rope_chunk_pos cp = ta_rope_chunk_of(i, cpr, p.seq, p.heads);
        const int32_t j = cp.j, t = cp.t, h = cp.h, b = cp.b;
        const int64_t row = cp.row;
        const float *x = p.src + row * p.d;
        uint16_t *y = p.dst + b * p.st.batch + h * p.st.head + t * p.st.seq;
        const int32_t f = 8 * j;
        int32_t tr = p.pos ? __ldg(p.pos + (int64_t)b * p.seq + t) : t;
        const float *c, *s;
        float va[8], vb[8];
        tr = tr < 0 ? 0 : tr >= p.rows ? p.rows - 1 : tr;
        c = p.cos + (int64_t)(h / p.group) * p.head_stride + (int64_t)tr * p.row_stride;
        s = p.sin + (int64_t)(h / p.group) * p.head_stride + (int64_t)tr * p.row_stride;
        if (p.half && f >= p.n && f < 2 * p.n) continue; /* b chunks: their a chunk's thread */
        ta_rope_ld8f(x + f, va);
        if (p.half && f < p.n) {
            ta_rope_ld8f(x + f + p.n, vb);
#pragma unroll
            for (int e = 0; e < 8; ++e)
                ta_rope_pair_t(&va[e], &vb[e], __ldg(c + f + e), __ldg(s + f + e));
            *reinterpret_cast<uint4 *>(y + f + p.n) = ta_rope_pack8<BF16>(vb);
        } else if (!p.half && f < 2 * p.n) {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                ta_rope_pair_t(&va[2 * e], &va[2 * e + 1], __ldg(c + f / 2 + e),
                               __ldg(s + f / 2 + e));
        }
        *reinterpret_cast<uint4 *>(y + f) = ta_rope_pack8<BF16>(va);
    }
}

ta_status ta_rope_back_side(const ta_plan *plan, int kv, const float *src, void *dst,
                            void *stream) {
    const ta_problem *pr = &plan->p;
    ta_rope_back_params prm;
    memset(&prm, 0, sizeof prm);
    prm.src = src;
    prm.dst = static_cast<uint16_t *>(dst);
    prm.st = kv ? plan->layout.dk : plan->layout.dq;
    prm.pos = kv ? plan->rope.pos_k : plan->rope.pos_q;
    prm.heads = kv ? pr->heads_kv : pr->heads_q;
    prm.seq = kv ? pr->seq_k : pr->seq_q;
    prm.group = kv ? 1 : plan->group;
    ta_rope_table_of(plan, pr->head_dim, prm.heads, prm.seq, &prm);
    return ta_rope_launch(plan, reinterpret_cast<const void *>(&ta_cuda_rope_back_kernel<true>),
                          reinterpret_cast<const void *>(&ta_cuda_rope_back_kernel<false>), &prm,
                          stream);
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

extern "C" void ta_cuda_fast_mta_rope_plan(const ta_plan *plan, int bwd, ta_plan *sub) {
    const ta_problem *pr = &plan->p;
    ta_cuda_fast_rope_plan(plan, sub);
    if (bwd) { /* dq, dk: f32 copies [B, H, S_q, D], [B, H_kv, S_k, D] before the turn back */
        sub->layout.dq = sub->layout.q;
        sub->layout.dk = sub->layout.k;
        return;
    }
    /* the history rows' copy [B, H, n, D]; a paged cache: k and v gathered
     * contiguous (kv_page_size stays, so the path and split rules the
     * launchers ask give the plan's answers; the block table goes, so the
     * kernels read no pages) */
    sub->layout.q_hist = ta_strides_contiguous(pr->heads_q, pr->q_history, pr->head_dim);
    if (pr->kv_page_size > 0) {
        sub->block_table = NULL;
        sub->layout.v = ta_strides_contiguous(pr->heads_kv, pr->seq_k, pr->head_dim_v);
    }
}

extern "C" ta_status ta_cuda_fast_mta_rope_turn(const ta_plan *plan, const void *q, const void *k,
                                                const void *q_hist, const void *v,
                                                const int32_t *block_table, void *rot_q,
                                                void *rot_k, void *rot_qh, void *rot_v,
                                                void *stream) {
    const ta_problem *pr = &plan->p;
    ta_status st;
    if ((st = ta_rope_xturn_side(plan, ta_rope_xside_of(plan, 0, 0, 1, q, rot_q, NULL),
                                 pr->head_dim, stream)) != TA_OK ||
        (st = ta_rope_xturn_side(plan, ta_rope_xside_of(plan, 1, 0, 1, k, rot_k, block_table),
                                 pr->head_dim, stream)) != TA_OK)
        return st;
    if (rot_qh &&
        (st = ta_rope_xturn_side(plan,
                                 ta_rope_xside_of(plan, 0, pr->q_history, 1, q_hist, rot_qh, NULL),
                                 pr->head_dim, stream)) != TA_OK)
        return st;
    if (rot_v)
        return ta_rope_xturn_side(plan, ta_rope_xside_of(plan, 1, 0, 0, v, rot_v, block_table),
                                  pr->head_dim_v, stream);
    return TA_OK;
}

extern "C" ta_status ta_cuda_fast_mta_rope_back(const ta_plan *plan, const float *dq32,
                                                const float *dk32, void *dq, void *dk,
                                                void *stream) {
    ta_status st;
    if ((st = ta_rope_back_side(plan, 0, dq32, dq, stream)) != TA_OK) return st;
    return ta_rope_back_side(plan, 1, dk32, dk, stream);
}
