/*
 * The kernel parameter base of the CUDA backend: what every kernel of every
 * pass reads about the problem, filled in one place (ta_cuda_params_fwd /
 * ta_cuda_params_bwd in cuda/ta_cuda.cu), and the device helpers that turn it
 * into a tile's slice offsets. A kernel's parameter struct is this base, by
 * value (__grid_constant__), or a struct derived from it that adds the
 * kernel's own fields (feature groups, shared-memory offset table, ...).
 * Not installed.
 *
 * Where a change of layout goes: every (batch, head) slice offset of every
 * kernel comes from ta_cuda_q_slice / ta_cuda_kv_slice below; visibility from
 * the tiling `t` (causal, diag_offset); the batch chunk from
 * ta_cuda_launch_batches (cuda/ta_cuda_host.cuh). Per-tensor element strides
 * (batch, head, seq) and sliding-window bounds are fields added to this struct,
 * set by the fill and read by those helpers. Not yet: with the contiguous
 * layout the slices follow from the dims, and int64 stride fields read in the
 * helpers cost registers (ptxas, CUDA 13.0: SDPA forward f32 124 -> 128
 * registers and up to 28/28 B of new spills on sm_90a), so they wait for the
 * change that needs them.
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
    const void *d_o;       /* [B,H,S_q,D_v] (backward) */
    void *o;               /* [B,H,S_q,D_v]: forward writes, backward reads */
    float *lse;            /* [B,H,S_q] f32: forward writes (or NULL), backward reads */
    const float *conv_w;   /* [H, c_q, c_k] f32 (MTA) */
    void *dq, *dk, *dv;    /* shaped as q, k, v (backward) */
    float *dconv_w;        /* [H, c_q, c_k] f32 (MTA backward) */
    float *delta;          /* [B, H, S_q] f32, workspace (backward) */
    float *dw_rows;        /* [B, H, n_q, c_q, c_k] f32, workspace (MTA backward) */
    /* the tiling this kernel runs (each launcher picks its tile sizes); holds
     * S_q, S_k, the mask (causal, diag_offset) and the halos */
    ta_tiling t;
    int32_t heads_q, heads_kv, group; /* group = H / H_kv: query head h reads kv head h / group */
    int32_t head_dim, head_dim_v;     /* D, D_v */
    int32_t conv_q, conv_k;           /* c_q, c_k; 0, 0 without a conv */
    float scale;
    /* this launch's batch entries [batch_begin, batch_begin + batch_count)
     * (ta_cuda_launch_batches sets them) */
    int32_t batch_begin, batch_count;
    int32_t has_seqlens;
    int32_t seqlens_k[TA_CUDA_BATCH_CHUNK]; /* [batch_count] when has_seqlens */
};

#define TA_CUDA_PARAMS_FN static __device__ __forceinline__

/* Keys of batch entry batch_begin + b_local: seqlens_k or S_k. */
TA_CUDA_PARAMS_FN int32_t ta_cuda_key_len(const ta_cuda_params &p, int32_t b_local) {
    return p.has_seqlens ? p.seqlens_k[b_local] : p.t.seq_k;
}

/*
 * Row index of row 0 of query head h's slice of batch entry b in the query
 * side's tensors (q, o, d_o, dq with rows of D or D_v features; lse, delta
 * with rows of 1): element (row, f) of a tensor with rows of n features is
 * row * n + f, as every device helper addresses it. Contiguous [B, H, S_q, n].
 */
TA_CUDA_PARAMS_FN size_t ta_cuda_q_slice(const ta_cuda_params &p, int32_t b, int32_t h) {
    return ((size_t)b * (size_t)p.heads_q + (size_t)h) * (size_t)p.t.seq_q;
}

/* Likewise for kv head h_kv in the key side's tensors (k, v, dk, dv),
 * contiguous [B, H_kv, S_k, n]. */
TA_CUDA_PARAMS_FN size_t ta_cuda_kv_slice(const ta_cuda_params &p, int32_t b, int32_t h_kv) {
    return ((size_t)b * (size_t)p.heads_kv + (size_t)h_kv) * (size_t)p.t.seq_k;
}

/* A block's tile of a query-side grid [batch_count][heads_q][n_qt] (SDPA and
 * MTA forward, dq): the last q tiles first, the longest under the causal mask. */
typedef struct ta_cuda_q_tile {
    int32_t b_local, h, qt;
} ta_cuda_q_tile;

TA_CUDA_PARAMS_FN ta_cuda_q_tile ta_cuda_q_tile_at(const ta_cuda_params &p, int64_t tile,
                                                   int32_t n_qt) {
    ta_cuda_q_tile q;
    q.qt = n_qt - 1 - (int32_t)(tile % n_qt);
    q.h = (int32_t)((tile / n_qt) % p.heads_q);
    q.b_local = (int32_t)(tile / n_qt / p.heads_q);
    return q;
}

/* A block's tile of the dk/dv grid [batch_count][heads_kv][n_kt][n_groups]
 * (SDPA and MTA): feature group fastest. */
typedef struct ta_cuda_kv_tile {
    int32_t b_local, h_kv, kt, fg;
} ta_cuda_kv_tile;

TA_CUDA_PARAMS_FN ta_cuda_kv_tile ta_cuda_kv_tile_at(const ta_cuda_params &p, int64_t tile,
                                                     int32_t n_kt, int32_t n_groups) {
    ta_cuda_kv_tile k;
    k.fg = (int32_t)(tile % n_groups);
    k.kt = (int32_t)((tile / n_groups) % n_kt);
    k.h_kv = (int32_t)((tile / n_groups / n_kt) % p.heads_kv);
    k.b_local = (int32_t)(tile / n_groups / n_kt / p.heads_kv);
    return k;
}

#endif /* TA_CUDA_PARAMS_CUH */
