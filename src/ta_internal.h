/*
 * Internal interface shared by the core (validation, workspace, dispatch) and
 * the backends. Not installed.
 */
#ifndef TA_INTERNAL_H
#define TA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tileattn.h"
#include "tileattn_tiling.h"

/* ---- Validated, derived view of a problem: what every backend reads. ---- */
typedef struct ta_plan {
    ta_problem p;        /* copy with defaults filled in (scale, block_q, block_k) */
    ta_stages stages;    /* the operation: load and score transforms, key splits */
    int has_conv;        /* stages.score == TA_SCORE_MTA_CONV (conv_q, conv_k > 0) */
    int group;           /* heads_q / heads_kv: query heads per kv head */
    size_t elem_bytes;   /* storage dtype size */
    size_t n_q, n_k, n_v, n_o, n_lse, n_conv; /* element counts of each tensor */
    ta_tiling fwd;       /* forward-pass tiling */
    ta_tiling bwd;       /* backward-pass tiling (doubled halos) */
    int has_window;      /* TA_WINDOW set (both tilings carry the bounds) */
    ta_layout layout;    /* element strides of every tensor: contiguous after
                            ta_plan_make; the caller's after ta_plan_set_*_layout */
    int strided;         /* 1 if any tensor of the call is not contiguous */
    ta_rope_args rope;   /* the call's rotary tables and positions (stages.load ==
                            TA_LOAD_ROPE; src/ta_rope_load.h); zero otherwise */
    size_t n_rope;       /* floats a table spans (cos, sin each): (tables - 1)
                            head_stride + (rows - 1) row_stride + pairs */
    const int32_t *block_table; /* paged KV (p.kv_page_size > 0): the call's
                                   [B, kv_max_blocks] table; NULL otherwise */
    int32_t dim_k, dim_v; /* widths of the k and v rows the attention core runs on:
                             head_dim, head_dim_v; latent_dim L (both) with the
                             fused projections (q [., head_dim] projected to L on
                             load, the output [., L] up-projected to head_dim_v) */
    size_t n_wq, n_wv;    /* fused projections: elements of w_qlat [H, D, L] and
                             w_vup [H, L, D_v]; 0 without */
    /* The MTA decode score ring (ta_fwd_args.score_ring, docs/mta.md 2a):
     * f32 [B, H, ring_slots, >= S_k] by ring_strides (the caller's, or the
     * contiguous ones); NULL without one (and in the backward). */
    float *ring;
    int32_t ring_slots;
    int ring_read;        /* 1: the history rows' scores are read from the ring
                             (q_history > 0, q_hist NULL); 0: recomputed */
    ta_strides ring_strides;
} ta_plan;

/* The ring's element offset of query row r's entry 0 (history rows r < 0
 * too): slot (r + diag_offset) mod ring_slots of (b, h), the position taken
 * as the forward tiling places the row (ta_tiling_visible). */
static inline size_t ta_plan_ring_row(const ta_plan *plan, int32_t b, int32_t h, int32_t r) {
    const int64_t n = plan->ring_slots, pos = (int64_t)r + plan->fwd.diag_offset;
    const int64_t slot = ((pos % n) + n) % n;
    return (size_t)b * (size_t)plan->ring_strides.batch +
           (size_t)h * (size_t)plan->ring_strides.head + (size_t)slot * (size_t)plan->ring_strides.seq;
}

/* Row r of the call is one whose scores the ring receives: the last
 * min(S_q, c_q - 1) rows (what the next call's history needs). */
static inline int ta_plan_ring_writes(const ta_plan *plan, int32_t r) {
    const int32_t n = plan->p.conv_q - 1 < plan->p.seq_q ? plan->p.conv_q - 1 : plan->p.seq_q;
    return plan->ring != NULL && r >= plan->p.seq_q - n && r < plan->p.seq_q;
}

/* The block table row of batch entry b (paged KV), or NULL: ta_tile_kv_row's
 * pages argument. */
static inline const int32_t *ta_plan_pages(const ta_plan *plan, int32_t b) {
    return plan->block_table ? plan->block_table + (size_t)b * (size_t)plan->p.kv_max_blocks
                             : NULL;
}

struct ta_diag; /* the first failed check (src/ta_validate.h) */

/* Checks the problem alone (no pointers) and fills plan (contiguous layout).
 * A failure is recorded in *d (never NULL). */
ta_status ta_plan_make(const ta_problem *p, ta_backend be, ta_plan *plan, struct ta_diag *d);

/* Byte extent of each tensor of a call under plan->layout: the span from its
 * base to one past its last element (the overlap checks use it). */
typedef struct ta_extents {
    size_t q, k, v, o, d_o, dq, dk, dv;
    size_t q_hist; /* forward with q_history > 0; else 0 */
    size_t ring;   /* forward with a score ring; else 0 */
} ta_extents;

/* Take a call's strides into plan->layout (zeros = contiguous), validate them
 * (negative, aliasing, overflow: TA_ERR_BAD_ARG / TA_ERR_OVERFLOW) and give
 * every tensor's byte extent. Forward: q, k, v, o, q_hist, and the score
 * ring into plan->ring (its rules: ta_validate.c, ta_plan_set_score_ring). */
ta_status ta_plan_set_fwd_layout(ta_plan *plan, const ta_fwd_args *a, ta_extents *ext,
                                 struct ta_diag *d);
ta_status ta_plan_set_bwd_layout(ta_plan *plan, const ta_bwd_args *a, ta_extents *ext,
                                 struct ta_diag *d);
/* Take a call's rotary arguments into plan->rope (nothing when the problem has
 * no rotary stage): the tables required (TA_ERR_NULL_ARG), and pos_q with
 * query history rows (TA_ERR_BAD_ARG: ta_rope_token_row). Their alignment and
 * overlaps are checked with the other buffers, the positions' values last
 * (ta_check_rope_pos). */
ta_status ta_plan_set_rope(ta_plan *plan, const ta_rope_args *r, struct ta_diag *d);

/* The step context of (b, h, qt) under tiling t (forward or backward) of plan:
 * ta_tile_context with the plan's layout, heads and key length. */
static inline void ta_plan_context(const ta_plan *plan, const ta_tiling *t,
                                   const int32_t *seqlens_k, int32_t b, int32_t h, int32_t qt,
                                   ta_tile_ctx *c) {
    ta_tile_context(c, t, &plan->layout, plan->p.heads_q, plan->group,
                    ta_tiling_key_len(t, seqlens_k, b), b, h, qt);
}

/* 1 if the call covers a key range of its keys, moves its rows or (the
 * backward) covers a row range of its rows (ta_problem.key_begin, key_end,
 * q_offset, row_begin, row_end; docs/api.md, "Key ranges and the query
 * offset", "The backward over row and key ranges"): only the exact kernels
 * take them (CUDA's fast mode runs those, whose bits satisfy its bound). */
static inline int ta_plan_keys_cut(const ta_plan *plan) {
    return plan->p.q_offset != 0 || plan->fwd.key_begin != 0 || plan->fwd.key_end != plan->p.seq_k ||
           plan->bwd.row_begin != 0 || plan->bwd.row_end != plan->p.seq_q;
}

/* ---- Workspace: one cursor both sizes and carves (zstd cwksp-style). ----
 *
 *   base (64-aligned)
 *   +--------------+---pad---+--------------+---pad---+-- ...
 *   | region 0     |         | region 1     |         |
 *   +--------------+---------+--------------+---------+-- ...
 *
 * Every region starts on a TA_WORKSPACE_ALIGN boundary. With base == NULL the
 * cursor only counts bytes (the size query); with a base it also hands out
 * pointers (the call). The same layout routine runs in both modes, so the
 * query and the carving cannot disagree. */
typedef struct ta_ws_cursor {
    unsigned char *base; /* NULL: size only */
    size_t used;         /* bytes consumed so far, aligned */
    int overflow;        /* a size computation overflowed size_t */
} ta_ws_cursor;

void ta_ws_begin(ta_ws_cursor *c, void *base);
/* Reserve count elements of elem_bytes; returns the region (NULL in size mode). */
void *ta_ws_take(ta_ws_cursor *c, size_t count, size_t elem_bytes);
#define TA_WS_TAKE(c, type, count) ((type *)ta_ws_take((c), (count), sizeof(type)))

/* Checked size arithmetic: returns 0 on overflow (and leaves *out unchanged). */
int ta_mul_size(size_t a, size_t b, size_t *out);

/* ---- Element access in the storage dtype (f32 arithmetic everywhere). ---- */
float ta_load(const void *base, ta_dtype dt, size_t idx);
void ta_store(void *base, ta_dtype dt, size_t idx, float x);

/* ---- The backward's pairs (ta_bwd_args.accumulate; docs/api.md, "Backward
 * over key and query ranges"): f32 hi and lo words in two buffers of one
 * layout (plan->layout's dq, dk, dv strides, in f32 elements). ---- */

/* Rows [r0, r0 + rows), w words each, of the slice at element offset slice
 * (row stride seq) of hi_buf, lo_buf -> hi, lo [rows][ld]. */
static inline void ta_pairs_get(const float *hi_buf, const float *lo_buf, int64_t slice,
                                int64_t seq, int32_t r0, int32_t rows, int32_t w, float *hi,
                                float *lo, size_t ld) {
    int32_t i;
    for (i = 0; i < rows; ++i) {
        const size_t at = (size_t)(slice + (int64_t)(r0 + i) * seq);
        memcpy(hi + (size_t)i * ld, hi_buf + at, (size_t)w * sizeof(float));
        memcpy(lo + (size_t)i * ld, lo_buf + at, (size_t)w * sizeof(float));
    }
}

/* The reverse: hi, lo [rows][ld] -> those rows of hi_buf, lo_buf. */
static inline void ta_pairs_put(float *hi_buf, float *lo_buf, int64_t slice, int64_t seq,
                                int32_t r0, int32_t rows, int32_t w, const float *hi,
                                const float *lo, size_t ld) {
    int32_t i;
    for (i = 0; i < rows; ++i) {
        const size_t at = (size_t)(slice + (int64_t)(r0 + i) * seq);
        memcpy(hi_buf + at, hi + (size_t)i * ld, (size_t)w * sizeof(float));
        memcpy(lo_buf + at, lo + (size_t)i * ld, (size_t)w * sizeof(float));
    }
}

/* ta_bwd_finish on host memory (ref/ta_ref_bwd.c; REF's and CPU's entry:
 * one pass over the hi words): dq = store(scale hi), dk = store(scale hi),
 * dv = store(hi) into plan->layout's gradients. stream: NULL (validated). */
ta_status ta_ref_bwd_finish(const ta_plan *plan, const ta_bwd_finish_args *a, void *stream);

/* ---- Trace (tests): append one entry; count keeps counting past capacity. */
void ta_trace_add(ta_trace *tr, int32_t pass, int32_t batch, int32_t head, int32_t q_tile,
                  int32_t k_tile);

/* ---- Backends. ----
 * Each backend is one const table of entry points (no mutable state). Each
 * backend sizes and carves its workspace with one static layout routine over a
 * ta_ws_cursor (size mode for the query, carve mode inside the call); the
 * layout is plain C so the size query works without the backend's hardware.
 * Compute entry points see fully validated inputs only (src/ta_api.c). */
typedef struct ta_backend_ops {
    /* 1 if the backend can run now (compiled in, implemented, device present). */
    int (*available)(void);
    /* 1 if the plan is an operation this backend implements (e.g. the MTA conv);
     * else the query and the call return TA_ERR_UNSUPPORTED. */
    int (*supports)(const ta_plan *plan);
    ta_status (*fwd_size)(const ta_plan *plan, size_t *bytes);
    ta_status (*bwd_size)(const ta_plan *plan, size_t *bytes);
    ta_status (*fwd)(const ta_plan *plan, const ta_fwd_args *a, void *workspace, void *stream);
    ta_status (*bwd)(const ta_plan *plan, const ta_bwd_args *a, void *workspace, void *stream);
    int host_memory; /* 1: tensors, workspace and stream-less calls are host; 0: device
                        memory and a stream. seqlens_k is host memory on every
                        backend: it is validated before any launch. */
    /* ta_tune_fwd after ta_fwd's validation (reps in range, out non-NULL):
     * time the plan's forward configurations into *out; NULL: the backend has
     * none (TA_ERR_UNSUPPORTED). */
    ta_status (*tune_fwd)(const ta_plan *plan, const ta_fwd_args *a, void *workspace, void *stream,
                          int32_t reps, ta_tune_result *out);
    /* ta_merge after validation (plan->layout.o: o's strides): the parts into
     * o and lse, by the arithmetic of src/ta_merge.h. */
    ta_status (*merge)(const ta_plan *plan, const ta_merge_args *a, void *stream);
    /* ta_bwd_finish after validation (plan->layout's dq, dk, dv: the
     * gradients' strides): each requested gradient from its hi words. */
    ta_status (*bwd_finish)(const ta_plan *plan, const ta_bwd_finish_args *a, void *stream);
} ta_backend_ops;

/* ta_merge on host memory (ref/ta_ref_fwd.c): REF's entry, and CPU's (the
 * merge is one pass over the parts; the CPU backend runs the same loop). */
ta_status ta_ref_merge(const ta_plan *plan, const ta_merge_args *a, void *stream);

extern const ta_backend_ops ta_ref_ops;  /* ref/ */
extern const ta_backend_ops ta_cpu_ops;  /* src/cpu/ */
extern const ta_backend_ops ta_cuda_ops; /* cuda/ta_cuda_ops.c in the CUDA component
                                            (libtileattn_cuda.a), else the core's
                                            cuda/ta_cuda_absent.c: docs/cuda.md,
                                            "Packaging" */

/* CUDA probes (cuda/ta_cuda.cu, CUDA component only). */
int ta_cuda_compiled(void);
int ta_cuda_device_present(void);

#endif /* TA_INTERNAL_H */
