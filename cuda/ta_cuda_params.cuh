/*
 * The kernel parameter base of the CUDA backend: what every kernel of every
 * pass reads about the problem, filled in one place (ta_cuda_params_fwd /
 * ta_cuda_params_bwd in cuda/ta_cuda.cu), and the device helpers that turn it
 * into a tile's slice offsets. A kernel's parameter struct is this base, by
 * value (__grid_constant__), or a struct derived from it that adds the
 * kernel's own fields (feature groups, shared-memory offset table, ...).
 * Not installed.
 *
 * What a kernel derives from it, it takes from the tiling descriptor
 * (include/tileattn_tiling.h): the per-tile context (ta_cuda_context: key
 * length, K tile range, element offsets of every slice under the call's
 * layout), the row intervals of the mask (ta_cuda_row_keys in
 * cuda/ta_cuda_tile.cuh) and the dk/dv pass's Q tile range (ta_tile_k_rows).
 * The tiling `t` is the one the kernel runs (its own row tiles, the plan's
 * key cut where the contract needs it) and carries the plan's mask: causal,
 * diag_offset and the sliding window.
 *
 * Strides: `lay` holds the call's resolved element strides (int64, in the
 * parameter space). Kernels form a tile's slice offset once per tile (the
 * context) and address row r of a tensor as offset + r * lay.X.seq, the
 * product in 64 bits (a stride times a row can pass 2^31; ta_cuda_row in
 * cuda/ta_cuda_tile.cuh). The strides are
 * read where they are used, from the parameter space, so they hold no
 * register across the hot loops (ptxas figures: docs/cuda.md section 3).
 */
#ifndef TA_CUDA_PARAMS_CUH
#define TA_CUDA_PARAMS_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "ta_internal.h"
}

/* seqlens_k entries per launch, passed by value in the kernel parameters
 * (problems with more batch entries take several launches). 2 KB of the 4 KB
 * parameter space every CUDA version allows. */
#define TA_CUDA_BATCH_CHUNK 512

struct ta_cuda_params {
    /* tensors: ta_fwd_args / ta_bwd_args, NULL where the pass has none */
    const void *q, *k, *v; /* [B,H,S_q,D], [B,H_kv,S_k,D], [B,H_kv,S_k,D_v] */
    const void *q_hist;    /* [B,H,q_history,D]: the MTA forward's query history rows
                              (t.q_history > 0, lay.q_hist strides); else NULL */
    const void *d_o;       /* [B,H,S_q,D_v] (backward) */
    void *o;               /* [B,H,S_q,D_v]: forward writes, backward reads */
    float *lse;            /* [B,H,S_q] f32: forward writes (or NULL), backward reads */
    const float *conv_w;   /* [H, c_q, c_k] f32 (MTA) */
    void *dq, *dk, *dv;    /* shaped as q, k, v (backward) */
    float *dconv_w;        /* [H, c_q, c_k] f32 (MTA backward) */
    float *delta;          /* [B, H, S_q] f32, workspace (backward) */
    float *dw_rows;        /* [B, H, n_q, c_q, c_k] f32, workspace (MTA backward) */
    /* the tiling this kernel runs (each launcher picks its tile sizes); holds
     * S_q, S_k, the mask (causal, diag_offset, window) and the halos */
    ta_tiling t;
    ta_layout lay; /* element strides of q, k, v, o, d_o, dq, dk, dv (plan->layout) */
    int32_t heads_q, heads_kv, group; /* group = H / H_kv: query head h reads kv head h / group */
    int32_t head_dim, head_dim_v;     /* D, D_v */
    int32_t conv_q, conv_k;           /* c_q, c_k; 0, 0 without a conv */
    float scale;
    /* this launch's batch entries [batch_begin, batch_begin + batch_count)
     * (ta_cuda_launch_batches sets them) */
    int32_t batch_begin, batch_count;
    /* split-K forward (t.num_splits > 1): part s of row (b, h, r) at
     * part_o + ((s n_rows + (b H + h) S_q + r) D_v and part_lse + s n_rows +
     * (b H + h) S_q + r, n_rows = B H S_q (ta_cuda_fwd_ws); NULL otherwise */
    float *part_o, *part_lse;
    int64_t n_rows;
    /* rotary load stage (plan->stages.load == TA_LOAD_ROPE; docs/rope.md):
     * the call's tables and positions (device memory), the problem's pairing
     * (rope = 0: none), pairs, rows and strides (floats) */
    ta_rope_args rope_args;
    int32_t rope, rope_pairs, rope_rows, rope_row_stride, rope_head_stride;
    /* 0: no seqlens_k; 1: seqlens_k (host memory) by value in seqlens_k
     * below, [batch_count]; 2: TA_SEQLENS_DEVICE, seqlens_dev [B] in device
     * memory, read (and clamped) when the kernel runs */
    /* paged KV (kv_page_size > 0; the forwards, fast and exact): block_table
     * [B, kv_max_blocks] int32 in device memory, entries clamped into
     * [0, kv_num_pages) when read (ta_cuda_page_row); k and v are pools
     * (plan->layout); NULL without pages */
    const int32_t *block_table;
    int32_t kv_page_size, kv_num_pages, kv_max_blocks;
    /* latent attention's reciprocal band (plan->stages.score == TA_SCORE_RBAND;
     * cuda/ta_cuda_latent.cu): rb_t [B, H, S_q, rb_w1] f32 holds T of row r
     * and key p_r - w at (r, w) (p_r = r + S_k - S_q, rb_w1 = min(W, S_k - 1)
     * + 1), rb_dl the backward's dl of the same entries; alpha, W. NULL, 0
     * without the band */
    const float *rb_t, *rb_dl;
    float rb_alpha;
    int32_t rb_width, rb_w1;
    /* the dq kernel run as the fused projections' recomputation of the
     * latent output ctx~_r = sum_j P_rj v_j (docs/exactness.md section 13):
     * ctx_out [B, H, S_q, D_v] f32, contiguous; NULL: the kernel computes dq */
    float *ctx_out;
    /* the fast dk/dv kernel (cuda/ta_cuda_fast_bwd_sm90.cu) stores dk, dv in
     * f32 (its multi-query copies: ta_cuda_fast_mqa) instead of the storage
     * type; 0 otherwise */
    int32_t kv_out_f32;
    int32_t has_seqlens;
    const int32_t *seqlens_dev;
    int32_t seqlens_k[TA_CUDA_BATCH_CHUNK];
};

#define TA_CUDA_PARAMS_FN static __device__ __forceinline__

/* Keys of batch entry batch_begin + b_local: seqlens_k (by value, or read
 * from device memory and clamped into [0, S_k]) or S_k. */
TA_CUDA_PARAMS_FN int32_t ta_cuda_key_len(const ta_cuda_params &p, int32_t b_local) {
    if (p.has_seqlens == 2) {
        const int32_t n = p.seqlens_dev[p.batch_begin + b_local];
        return n < 0 ? 0 : n > p.t.seq_k ? p.t.seq_k : n;
    }
    return p.has_seqlens ? p.seqlens_k[b_local] : p.t.seq_k;
}

/* A paged k / v (ta_problem.kv_page_size > 0; docs/api.md, "Paged KV
 * cache"): batch entry b's row of the block table (device memory; NULL
 * without pages), the page size and the pool's page count. */
struct ta_cuda_pages {
    const int32_t *pages;
    int32_t page_size, num_pages;
};

/* The pages of batch entry `batch` (absolute: batch_begin + the launch's
 * local entry); pages NULL without a block table. */
TA_CUDA_PARAMS_FN ta_cuda_pages ta_cuda_pages_of(const ta_cuda_params &p, int32_t batch) {
    ta_cuda_pages pg;
    pg.pages = p.block_table ? p.block_table + (int64_t)batch * p.kv_max_blocks : nullptr;
    pg.page_size = p.kv_page_size;
    pg.num_pages = p.kv_num_pages;
    return pg;
}

/* The pool row of key j (in [0, S_k)) of a paged k / v: slot j % page_size
 * of page pages[j / page_size], the entry clamped into [0, num_pages) (the
 * host never read the table: a bad entry reads some page of the pool, never
 * memory outside it). ta_tile_kv_row's row, in the units of the pool's seq
 * stride. */
TA_CUDA_PARAMS_FN int64_t ta_cuda_page_row(const ta_cuda_pages &pg, int32_t j) {
    const int32_t at = pg.pages[j / pg.page_size];
    const int32_t page = at < 0 ? 0 : at >= pg.num_pages ? pg.num_pages - 1 : at;
    return (int64_t)page * pg.page_size + j % pg.page_size;
}

/*
 * The per-tile context of (batch entry batch_begin + b_local, query head h,
 * Q tile qt) of the kernel's tiling p.t: the key length, the K tiles
 * [k_begin, k_end) that hold a visible entry, the kv head, and the element
 * offsets of the slices (row 0) of every tensor under p.lay (ta_tile_context).
 * Fields a kernel does not read cost nothing (inlined, dead code).
 */
TA_CUDA_PARAMS_FN ta_tile_ctx ta_cuda_context(const ta_cuda_params &p, int32_t b_local, int32_t h,
                                              int32_t qt) {
    ta_tile_ctx c;
    ta_tile_context(&c, &p.t, &p.lay, p.heads_q, p.group, ta_cuda_key_len(p, b_local),
                    p.batch_begin + b_local, h, qt);
    return c;
}

/* (Batch entry, query head) slices per group of the query-side tile order. */
#define TA_CUDA_Q_GROUP 8

/* A block's tile of a query-side grid of batch_count * heads_q * n_qt tiles
 * (SDPA and MTA forward, dq). The slices (batch entry, head), b_local major,
 * are taken in groups of TA_CUDA_Q_GROUP (the last one may be smaller); a
 * group's tiles come Q tile descending (the longest under the causal mask
 * first), its slices ascending within each Q tile: the hardware hands the
 * blocks out in this order, so the short tiles of a group fill in behind the
 * long ones of all its slices (8 slices of 34 tiles on 132 SMs: 1.01x the
 * even share of work instead of 1.26x with each slice's tiles together),
 * while the blocks in flight read the keys of few slices (L2). Any order is
 * correct: the tiles are independent. The split-K forward's grid holds
 * num_splits blocks per tile: tile / num_splits is the tile's number here,
 * tile % num_splits its part. */
typedef struct ta_cuda_q_tile {
    int32_t b_local, h, qt;
} ta_cuda_q_tile;

TA_CUDA_PARAMS_FN ta_cuda_q_tile ta_cuda_q_tile_at(const ta_cuda_params &p, int64_t tile,
                                                   int32_t n_qt) {
    const int64_t n_bh = (int64_t)p.batch_count * p.heads_q;
    const int64_t grp = tile / ((int64_t)TA_CUDA_Q_GROUP * n_qt);
    const int64_t in = tile - grp * TA_CUDA_Q_GROUP * n_qt, g0 = grp * TA_CUDA_Q_GROUP;
    const int64_t gn = n_bh - g0 < TA_CUDA_Q_GROUP ? n_bh - g0 : TA_CUDA_Q_GROUP;
    const int64_t bh = g0 + in % gn;
    ta_cuda_q_tile q;
    q.qt = n_qt - 1 - (int32_t)(in / gn);
    q.h = (int32_t)(bh % p.heads_q);
    q.b_local = (int32_t)(bh / p.heads_q);
    return q;
}

/* A block's tile of a dk/dv grid of batch_count * heads_kv * n_kt * n_groups
 * tiles (SDPA and MTA): feature group fastest; the kv slices (batch entry,
 * kv head), b_local major, in groups of TA_CUDA_Q_GROUP as the query side's,
 * a group's K tiles ascending (the longest under the causal mask first: key
 * tile 0 is seen by every row), its slices ascending within each K tile. */
typedef struct ta_cuda_kv_tile {
    int32_t b_local, h_kv, kt, fg;
} ta_cuda_kv_tile;

TA_CUDA_PARAMS_FN ta_cuda_kv_tile ta_cuda_kv_tile_at(const ta_cuda_params &p, int64_t tile,
                                                     int32_t n_kt, int32_t n_groups) {
    const int64_t t = tile / n_groups, n_bh = (int64_t)p.batch_count * p.heads_kv;
    const int64_t grp = t / ((int64_t)TA_CUDA_Q_GROUP * n_kt);
    const int64_t in = t - grp * TA_CUDA_Q_GROUP * n_kt, g0 = grp * TA_CUDA_Q_GROUP;
    const int64_t gn = n_bh - g0 < TA_CUDA_Q_GROUP ? n_bh - g0 : TA_CUDA_Q_GROUP;
    const int64_t bh = g0 + in % gn;
    ta_cuda_kv_tile k;
    k.fg = (int32_t)(tile % n_groups);
    k.kt = (int32_t)(in / gn);
    k.h_kv = (int32_t)(bh % p.heads_kv);
    k.b_local = (int32_t)(bh / p.heads_kv);
    return k;
}

#endif /* TA_CUDA_PARAMS_CUH */
