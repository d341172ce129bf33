/**
 * @file
 * @brief tileattn: exact, IO-aware attention kernels for engines that cannot allocate.
 *
 * One public header (plus tileattn_tiling.h for the tiling descriptor).
 * Everything is plain C11; the CUDA entry points take the stream as void *,
 * so this header never includes CUDA headers.
 *
 * Conventions used throughout:
 *   - Tensors are row-major; contiguous unless the call's ta_strides say otherwise
 *     (the feature dimension is always contiguous):
 *
 *           q   [B, H,    S_q, D ]      k [B, H_kv, S_k, D ]      v [B, H_kv, S_k, D_v]
 *           o   [B, H,    S_q, D_v]   lse [B, H,    S_q]  (always float32)
 *
 *     B = batch, H = heads_q, H_kv = heads_kv, D = head_dim, D_v = head_dim_v.
 *     Query head h reads kv head h / (H / H_kv) (grouped / multi-query attention).
 *   - Storage dtype is f32, f16 or bf16 for q, k, v, o, d_o, dq, dk, dv;
 *     arithmetic is always f32 (see docs/exactness.md).
 *   - The library never allocates: every call takes a caller workspace, sized
 *     beforehand by the matching *_workspace_size query. The workspace is
 *     never resized nor freed by the library. Host memory for TA_BACKEND_REF and
 *     TA_BACKEND_CPU, device memory for TA_BACKEND_CUDA. Alignment: 64 bytes.
 *   - Every function returns ta_status; nothing aborts, asserts or prints.
 *     Every input is validated before any output byte is written: on error
 *     all output buffers are left untouched.
 *   - Reentrant: no global mutable state.
 */
#ifndef TILEATTN_H
#define TILEATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Version of this header (CMakeLists.txt reads the project version from these
 * three lines). Semantic versioning; in the 0.x series a minor release may
 * change the ABI and says so in CHANGELOG.md; docs/api.md ("Versions and ABI")
 * has the policy. ta_version() gives the linked library's.
 * @{
 */
#define TA_VERSION_MAJOR 0
#define TA_VERSION_MINOR 2
#define TA_VERSION_PATCH 0
/** @} */
/** One comparable number: major * 10000 + minor * 100 + patch (0.2.0 -> 200). */
#define TA_VERSION (TA_VERSION_MAJOR * 10000 + TA_VERSION_MINOR * 100 + TA_VERSION_PATCH)

/** Status codes. Stable numbers: never renumbered, only appended. */
typedef enum ta_status {
    TA_OK = 0,                      /**< success */
    TA_ERR_NULL_ARG = -1,           /**< a required pointer is NULL */
    TA_ERR_BAD_SHAPE = -2,          /**< a size is <= 0, or heads_q % heads_kv != 0 */
    TA_ERR_BAD_ARG = -3,            /**< an enum, flag, scale, conv size, window, seqlens
                                         value, stride, pointer alignment or buffer
                                         overlap is invalid,
                                         or (CUDA) a pointer the device cannot read */
    TA_ERR_UNSUPPORTED = -4,        /**< valid but not supported: head_dim > 256, tile
                                         size, conv size, or an operation this backend
                                         does not implement (e.g. a trace on a non-REF
                                         backend) */
    TA_ERR_OVERFLOW = -5,           /**< a tensor or workspace size overflows size_t,
                                         or a length exceeds TA_SEQ_MAX */
    TA_ERR_WORKSPACE_SIZE = -6,     /**< workspace_bytes is smaller than the query said */
    TA_ERR_WORKSPACE_ALIGN = -7,    /**< workspace is not TA_WORKSPACE_ALIGN-aligned */
    TA_ERR_BACKEND_UNAVAILABLE = -8,/**< backend not compiled in, or no device present */
    TA_ERR_DEVICE = -9              /**< a device (CUDA) call failed */
} ta_status;

/** Name of a status, e.g. "TA_ERR_BAD_SHAPE: ...". Never NULL; unknown codes
 *  give "TA_ERR_UNKNOWN". The string is static; do not free it.
 *  @param[in] s  any value, also one outside the enum
 *  @return "NAME: cause" for a ta_status, "TA_ERR_UNKNOWN: not a ta_status value" else */
const char *ta_status_string(ta_status s);

/** Storage dtype of q, k, v, o, d_o, dq, dk, dv. lse and conv weights are always f32. */
typedef enum ta_dtype { TA_F32 = 0, TA_F16 = 1, TA_BF16 = 2 } ta_dtype;

/** Which implementation runs a call; every one takes the same arguments. */
typedef enum ta_backend {
    TA_BACKEND_REF = 0, /**< scalar C11 reference: the executable specification */
    TA_BACKEND_CPU = 1, /**< AVX2/AVX-512 + OpenMP (scalar fallback elsewhere); SDPA and
                             MTA conv, forward and backward; bit-identical to REF */
    TA_BACKEND_CUDA = 2 /**< NVIDIA GPU, sm_80+; SDPA and MTA conv, forward and backward;
                             bit-identical to REF in TA_PRECISION_EXACT */
} ta_backend;

/** ta_problem.precision: exact, or fast within a bound (docs/api.md, "Fast mode"). */
typedef enum ta_precision {
    TA_PRECISION_EXACT = 0, /**< bit-identical to TA_BACKEND_REF (default) */
    TA_PRECISION_FAST = 1   /**< backend may trade bit-identity for speed, within a
                                 documented bound; still run-to-run deterministic */
} ta_precision;

/** Flags for ta_problem.flags. Unknown bits are rejected with TA_ERR_BAD_ARG. */
#define TA_CAUSAL (1u << 0) /**< causal mask, aligned bottom-right: query row r sees
                                 keys j <= r + seq_k - seq_q */
#define TA_WINDOW (1u << 1) /**< sliding window: ta_problem.window_left/window_right apply
                                 (without this flag both must be 0) */
#define TA_SEQLENS_DEVICE (1u << 2) /**< args.seqlens_k is DEVICE memory (CUDA only; a host
                                         backend refuses it with TA_ERR_BAD_ARG): the
                                         kernels read it when they run, so a captured
                                         CUDA graph replays with the lengths the caller
                                         wrote since; the host never reads it, each value
                                         is clamped into [0, S_k] instead of validated.
                                         Without args.seqlens_k it changes nothing. */
#define TA_RBAND (1u << 3)  /**< the reciprocal band of latent attention: ta_problem.rband_alpha
                                 and rband_width apply (without this flag both must be 0;
                                 docs/api.md, "Latent attention and the reciprocal band") */
#define TA_FLAGS_ALL (TA_CAUSAL | TA_WINDOW | TA_SEQLENS_DEVICE | TA_RBAND) /**< every bit this
                                                                               version accepts */

/** Limits of the supported domain (validated). */
#define TA_HEAD_DIM_MAX 256       /**< head_dim and head_dim_v in [1, 256] */
#define TA_SEQ_MAX (1 << 30)      /**< seq_q, seq_k <= 2^30 (index arithmetic stays in int32) */
#define TA_BLOCK_MIN 8            /**< block_q, block_k: any integer in [8, 256] */
#define TA_BLOCK_MAX 256          /**< upper bound of block_q, block_k */
#define TA_CONV_Q_MAX 16          /**< MTA conv_q in [1, 16] */
#define TA_CONV_K_MAX 31          /**< MTA conv_k odd, in [1, 31] */
#define TA_WORKSPACE_ALIGN 64     /**< required alignment of every workspace, bytes */
#define TA_THREADS_MAX 256        /**< num_threads in [0, 256]; 0 = the OpenMP default,
                                       itself capped at 256 */

/**
 * One attention problem. Zero-initialise it (`ta_problem p = {0};`), then set
 * the sizes: every zero in an optional field means "default".
 */
typedef struct ta_problem {
    int32_t batch;      /**< B >= 1 */
    int32_t heads_q;    /**< H >= 1 */
    int32_t heads_kv;   /**< H_kv >= 1, divides H */
    int32_t seq_q;      /**< S_q in [1, TA_SEQ_MAX] */
    int32_t seq_k;      /**< S_k in [1, TA_SEQ_MAX] */
    int32_t head_dim;   /**< D in [1, TA_HEAD_DIM_MAX] */
    int32_t head_dim_v; /**< D_v in [1, TA_HEAD_DIM_MAX] */
    ta_dtype dtype;         /**< storage dtype; default (0) is TA_F32 */
    ta_precision precision; /**< default (0) is TA_PRECISION_EXACT */
    uint32_t flags;         /**< TA_CAUSAL or 0 */
    float scale;            /**< score scale; 0 -> 1/sqrt(head_dim). Finite, else TA_ERR_BAD_ARG */
    int32_t conv_q;         /**< MTA key-query conv rows c_q in [1,16]; 0,0 = no conv */
    int32_t conv_k;         /**< MTA key-query conv columns c_k, odd, in [1,31] */
    int32_t block_q;        /**< Q tile rows B_q, in [8,256]; 0 -> default */
    int32_t block_k;        /**< K tile columns B_k, in [8,256]; 0 -> default.
                                 Part of the exactness contract: equal block_k,
                                 equal bits on every backend. */
    int32_t num_threads;    /**< CPU backend worker threads, in [0, TA_THREADS_MAX]:
                                 0 -> min(omp_get_max_threads(), TA_THREADS_MAX),
                                 read by the size query and again by the call (keep
                                 it fixed in between, or set it). Results never
                                 depend on it. Validated on every backend, used by
                                 CPU only. Negative: TA_ERR_BAD_ARG (there is no
                                 "-1 = default"); above the maximum:
                                 TA_ERR_UNSUPPORTED. */
    int32_t window_left;    /**< with TA_WINDOW: query row r (absolute position
                                 pos = r + S_k - S_q) sees keys j >= pos - window_left;
                                 negative = unbounded on the left. 0 without TA_WINDOW. */
    int32_t window_right;   /**< with TA_WINDOW: row r sees keys j <= pos + window_right;
                                 negative = unbounded. With TA_CAUSAL as well, the
                                 tighter right bound holds. 0 without TA_WINDOW.
                                 Masks every score the causal mask does (with the MTA
                                 conv: the raw scores and the convolved ones, docs/mta.md). */
    int32_t tile_config;    /**< TA_PRECISION_FAST on CUDA: 0 = the default tile
                                 configuration of the problem's head dim; k >= 1 =
                                 candidate k of the backend's table (docs/cuda.md
                                 section 7; the fast MTA forward has its own of 4);
                                 a k past the table: TA_ERR_UNSUPPORTED.
                                 Equal tile_config, equal bits. Ignored elsewhere
                                 (exact mode's tiles are block_q, block_k). >= 0. */
    int32_t num_splits;     /**< split-K forward (docs/api.md, "Split-K and merge"):
                                 0 or 1 = one split (the forward as before, bit for
                                 bit); n > 1 = the key tiles of every row cut into n
                                 contiguous ascending parts (ta_tile_split_keys),
                                 each part's (o, lse) computed into the workspace,
                                 then merged in ascending part order (the ta_merge
                                 arithmetic); TA_SPLITS_AUTO = a count chosen from
                                 the problem's sizes alone, never from the device
                                 (ta_tiling_splits_auto). A count above
                                 the key tiles is clamped to them (same bits: the
                                 extra parts are empty). Other negative values:
                                 TA_ERR_BAD_ARG. ta_bwd validates it and ignores it.
                                 Same num_splits, same bits on every backend. */
    /* ---- Rotary position embeddings in the q/k load (docs/rope.md, "The load
     * stage"); all zero = no rotation, the problem as before. ---- */
    int32_t rope;             /**< ta_rope_pairing: TA_ROPE_NONE (0) = off;
                                   TA_ROPE_INTERLEAVED or TA_ROPE_HALF = q and k rows
                                   rotated as they are loaded, dq and dk rotated back.
                                   Other values: TA_ERR_BAD_ARG. With TA_ROPE_NONE
                                   every rope_* field below must be 0. CUDA fast mode
                                   (f16/bf16 SDPA and MTA) turns q and k once into the
                                   workspace instead (docs/rope.md, "On CUDA"). */
    int32_t rope_pairs;       /**< pairs rotated per row, n >= 1, 2 n <= head_dim
                                   (dims [2 n, head_dim) pass through) */
    int32_t rope_rows;        /**< rows of each table, >= 1; every position used
                                   (args.rope.pos_q/pos_k, or the token index) is in
                                   [0, rope_rows) */
    int32_t rope_row_stride;  /**< floats from one table row to the next, >= rope_pairs;
                                   0 -> rope_pairs */
    int32_t rope_head_stride; /**< floats from kv head g's table to kv head g + 1's, >= 0;
                                   0 = one table for every head. Query head h uses kv
                                   head h / (heads_q / heads_kv)'s table, so q and k of
                                   one attention share their frequencies. */
    int32_t q_history;        /**< MTA decode / chunked prefill (docs/mta.md section 2a):
                                   the query rows just above row 0 that exist, n in
                                   [0, conv_q - 1] (0 without a conv); their rows are
                                   args.q_hist. Row -n .. -1 sit at positions
                                   pos(0) - n .. pos(0) - 1 and their raw scores enter
                                   the conv windows of rows 0 .. n - 1, so a sequence
                                   run in chunks equals one full forward bit for bit.
                                   0 = rows above row 0 are zero padding (as before).
                                   Forward only: ta_bwd (and its size query) refuse
                                   n > 0 with TA_ERR_UNSUPPORTED. With rope, history
                                   row -i turns by table row pos_q[b][0] - i (row 0's
                                   minus i), so args.rope.pos_q is required and
                                   pos_q[b][0] >= n (docs/rope.md, "Positions").
                                   With TA_RBAND: exactly min(seq_k - seq_q,
                                   rband_width), the rows of the band's key
                                   positions above row 0 (their latent queries). */
    /* ---- Paged KV cache (docs/api.md, "Paged KV cache"); all zero = k and v are
     * [B, H_kv, S_k, D] tensors as before. ---- */
    int32_t kv_page_size;     /**< keys per page, >= 1: k is a pool of pages
                                   [kv_num_pages, kv_page_size, H_kv, D] and v
                                   [kv_num_pages, kv_page_size, H_kv, D_v] (the vLLM /
                                   FlashInfer layout; contiguous: k_strides and
                                   v_strides must be zero), key j of batch entry b in
                                   page args.block_table[b][j / kv_page_size], slot
                                   j % kv_page_size. 0 = no pages. Forward only
                                   (ta_bwd refuses it); REF, CPU and CUDA (exact
                                   kernels; fast mode: the f16/bf16 SDPA forward
                                   without the rotary stage, the f16/bf16 MTA
                                   forward with or without it). */
    int32_t kv_num_pages;     /**< pages in the pool, >= 1 with kv_page_size */
    int32_t kv_max_blocks;    /**< entries per batch entry of args.block_table, with
                                   kv_max_blocks * kv_page_size >= seq_k */
    /* ---- Latent attention with a reciprocal band (docs/api.md, "Latent attention
     * and the reciprocal band"); all zero = no band, no projections, as before.
     * Latent attention itself is grouped attention with one shared kv head of
     * width L: heads_kv = 1, head_dim = head_dim_v = L, q = the latent queries. ---- */
    float rband_alpha;        /**< with TA_RBAND: alpha, finite (0 included: the band
                                   is still computed, so d_alpha is its gradient);
                                   the logit of query row i (position p_i) and key j
                                   with 0 <= p_i - j <= rband_width is
                                   fmaf(alpha, S_ji, S_ij). 0 without TA_RBAND. */
    int32_t rband_width;      /**< with TA_RBAND: W >= 0, keys p_i - W .. p_i are in the
                                   band (W = 0: the diagonal only). Needs TA_CAUSAL,
                                   seq_q <= seq_k, q_history = min(seq_k - seq_q, W)
                                   (the query rows at the band's key positions). 0
                                   without TA_RBAND. */
    int32_t latent_dim;       /**< L of the fused projections, in [0, TA_HEAD_DIM_MAX]:
                                   0 = none (q is the latent query, k and v have
                                   head_dim and head_dim_v columns). L >= 1: q is
                                   [B, H, S_q, head_dim], projected on load by
                                   args.w_qlat [H, head_dim, L]; k and v are
                                   [B, H_kv, S_k, L]; o is [B, H, S_q, head_dim_v],
                                   the latent output up-projected by args.w_vup
                                   [H, L, head_dim_v]; scale 0 -> 1/sqrt(L).
                                   Forward and backward on REF, CPU and CUDA
                                   (exact kernels in either precision); not with the conv, rope,
                                   pages or split-K (TA_ERR_UNSUPPORTED). */
    /* ---- A forward over a key range of the keys given, at a chosen position
     * (context parallelism: docs/api.md, "Key ranges and the query offset");
     * all zero = every key, the bottom-right alignment, as before. ---- */
    int32_t q_offset;         /**< added to every query row's position: row r (history
                                   rows included) sits at key position
                                   r + S_k - S_q + q_offset, for the causal mask, the
                                   window and the conv's masks. 0 = the bottom-right
                                   alignment. |S_k - S_q + q_offset| <= TA_SEQ_MAX, else
                                   TA_ERR_BAD_ARG. Forward and backward. */
    int32_t key_begin;        /**< the forward's keys: o and lse cover keys
                                   [key_begin, key_end) of the S_k given; the others
                                   enter only the MTA conv, as raw scores (its halo:
                                   a K tile's P_k keys past each end). 0 <= key_begin
                                   < key_end <= S_k, else TA_ERR_BAD_ARG; key_begin a
                                   multiple of the effective K tile width (block_k,
                                   minus c_k - 1 with the conv) and key_end one or
                                   S_k, else TA_ERR_UNSUPPORTED. In the forward on
                                   the forward's K tiles; in the backward (ta_bwd)
                                   dk, dv are written for the range's keys only, on
                                   the backward's K tiles (block_k, minus
                                   2 (c_k - 1) with the conv): docs/mta.md 2b.
                                   REF, CPU and CUDA (its exact kernels, in either
                                   precision). */
    int32_t key_end;          /**< exclusive; 0 = S_k */
    /* ---- Appended: the backward's row range (docs/api.md, "Key ranges
     * and the query offset"; docs/mta.md section 2b); both zero = every row. ---- */
    int32_t row_begin;        /**< the backward's output rows: dq is written, and dk,
                                   dv, dconv_w are summed, for the query rows
                                   [row_begin, row_end) of the S_q given only; the
                                   other rows enter only as the MTA conv's halo (raw
                                   scores above, dO, o, lse below). 0 <= row_begin <
                                   row_end <= S_q, else TA_ERR_BAD_ARG; row_begin a
                                   multiple of the backward's effective Q tile height
                                   (block_q, minus 2 (c_q - 1) with the conv) and
                                   row_end one or S_q, else TA_ERR_UNSUPPORTED.
                                   Backward only: the forward refuses a row range
                                   (TA_ERR_UNSUPPORTED). REF, CPU and CUDA (its
                                   exact kernels, in either precision); not with
                                   latent attention or the band. */
    int32_t row_end;          /**< exclusive; 0 = S_q */
} ta_problem;

/** ta_problem.rope: the pair convention of the rotary load stage. Pair i in
 *  [0, rope_pairs) of a row x rotates (x_a, x_b) by the angle of table entry i:
 *  y_a = x_a c - x_b s, y_b = x_b c + x_a s (f32, two products and one add each). */
typedef enum ta_rope_pairing {
    TA_ROPE_NONE = 0,        /**< no rotation */
    TA_ROPE_INTERLEAVED = 1, /**< a = 2i, b = 2i + 1 (GPT-J, EVA-02, timm, rope-vit) */
    TA_ROPE_HALF = 2         /**< a = i, b = i + rope_pairs (GPT-NeoX, Llama: rotate_half) */
} ta_rope_pairing;

/** The tables and positions of the rotary load stage (ta_problem.rope != 0);
 *  ignored when ta_problem.rope is TA_ROPE_NONE. Memory of the tensors (host for
 *  REF and CPU, device for CUDA, whose fast path has the stage: docs/rope.md,
 *  "On CUDA"; CUDA cannot read the positions on the host and clamps each into
 *  [0, rope_rows) instead of rejecting it). All read-only: no output may
 *  overlap them. */
typedef struct ta_rope_args {
    const float *cos;     /**< [tables][rope_rows][rope_row_stride] f32, tables = heads_kv
                               with a rope_head_stride (else 1); entries [0, rope_pairs)
                               of a row read; required with rope */
    const float *sin;     /**< as cos; required with rope */
    const int32_t *pos_q; /**< [B, S_q] contiguous: table row of query token (b, t), each
                               in [0, rope_rows); NULL = row t (then S_q <= rope_rows).
                               With ta_problem.q_history = n > 0: required (else
                               TA_ERR_BAD_ARG), history row -i uses row pos_q[b][0] - i,
                               so pos_q[b][0] >= n */
    const int32_t *pos_k; /**< [B, S_k] contiguous: table row of key token (b, t), each
                               in [0, rope_rows); NULL = row t (then S_k <= rope_rows) */
} ta_rope_args;

/** ta_problem.num_splits: let the library choose the split count from the
 *  problem's sizes alone, never from the device (ta_tiling_splits_auto in
 *  tileattn_tiling.h gives the count). */
#define TA_SPLITS_AUTO (-1)

/**
 * Element strides of one [B, heads, S, dim] tensor: element (b, h, s, d) lives at
 * base[b * batch + h * head + s * seq + d] (the feature dimension is contiguous).
 * All three 0 (a zero-initialised struct) = the contiguous layout
 * {heads * S * dim, S * dim, dim}. Otherwise each must be >= 0 and no two
 * distinct elements may share an address (TA_ERR_BAD_ARG); a [B, S, H, D] tensor
 * is {S * H * D, D, H * D}. Gaps between rows are never read nor written.
 */
typedef struct ta_strides {
    /** Elements from one batch entry, head, row to the next; each >= 0. @{ */
    int64_t batch, head, seq;
    /** @} */
} ta_strides;

/** Optional record of the tile schedule a backend ran (for tests). */
typedef struct ta_trace_entry {
    /** The tile pair: batch entry, query head, Q tile, K tile. @{ */
    int32_t batch, head, q_tile, k_tile;
    /** @} */
    int32_t pass; /**< TA_PASS_FWD, TA_PASS_BWD_DKDV or TA_PASS_BWD_DQ */
} ta_trace_entry;

/** ta_trace_entry.pass: the forward, the backward's dk/dv pass, its dq pass. @{ */
#define TA_PASS_FWD 0
#define TA_PASS_BWD_DKDV 1
#define TA_PASS_BWD_DQ 2
/** @} */

/**
 * Caller-owned trace buffer. The backend appends one entry per (q tile, k tile)
 * pair it computes, while count < capacity; `count` keeps counting past the
 * capacity so a too-small buffer is detected. Host memory, REF backend only
 * for now; other backends reject a non-NULL trace with TA_ERR_UNSUPPORTED.
 * The entries and this struct are outputs, checked as every output is:
 * aligned to their types, overlapping no input, output or the workspace
 * (TA_ERR_BAD_ARG); capacity * sizeof(ta_trace_entry) must fit size_t
 * (TA_ERR_OVERFLOW).
 */
typedef struct ta_trace {
    ta_trace_entry *entries; /**< [capacity] */
    size_t capacity;         /**< entries has room for this many */
    size_t count;            /**< set to 0 by the call before tracing */
} ta_trace;

/** Forward arguments. Tensors are host memory for REF/CPU, device memory for
 *  CUDA; seqlens_k and trace are host memory (seqlens_k: device memory with
 *  TA_SEQLENS_DEVICE on CUDA); block_table follows the tensors. */
typedef struct ta_fwd_args {
    const void *q;            /**< [B, H, S_q, D]    dtype; required */
    const void *k;            /**< [B, H_kv, S_k, D] dtype; required */
    const void *v;            /**< [B, H_kv, S_k, D_v] dtype; required */
    const float *conv_w;      /**< [H, c_q, c_k] f32; required iff conv is set, else ignored */
    const int32_t *seqlens_k; /**< [B] keys at or past seqlens_k[b] are masked; each in
                                   [0, S_k]; NULL = all S_k keys. HOST memory on
                                   every backend (validated before any launch),
                                   unless flags has TA_SEQLENS_DEVICE (CUDA: device
                                   memory, read by the kernels, clamped). */
    void *o;                  /**< [B, H, S_q, D_v] dtype; required; written */
    float *lse;               /**< [B, H, S_q] f32; NULL = not wanted; written;
                                   always contiguous */
    ta_trace *trace;          /**< NULL, or a caller trace buffer (REF only) */
    /** Strides of q, k, v, o (ta_strides); zero = contiguous. @{ */
    ta_strides q_strides, k_strides, v_strides, o_strides;
    /** @} */
    ta_rope_args rope; /**< rotary tables and positions (ta_problem.rope) */
    const void *q_hist;       /**< [B, H, q_history, D] dtype, laid out by q_hist_strides:
                                   the q_history query rows before row 0 (row t of it is
                                   query row t - q_history), the rows the previous call
                                   passed last. Required iff ta_problem.q_history > 0,
                                   else ignored; with score_ring it may be NULL (the
                                   history's scores then come from the ring). Read
                                   only: no output may overlap it. */
    ta_strides q_hist_strides; /**< strides of q_hist (ta_strides); zero = contiguous
                                    [B, H, q_history, D]. A caller whose earlier rows sit
                                    just above q in one buffer passes
                                    q_hist = q - q_history rows and q_strides. */
    const int32_t *block_table; /**< [B, kv_max_blocks] int32: the pages of each
                                     sequence (ta_problem.kv_page_size > 0): entries
                                     [0, ceil(S_k / kv_page_size)) of every row in
                                     [0, kv_num_pages); later entries are not read.
                                     HOST memory on REF and CPU (validated before any
                                     write); DEVICE memory on CUDA (read by the
                                     kernels, each entry clamped into the pool).
                                     Required with pages, else ignored. */
    const float *w_qlat;      /**< [H, head_dim, latent_dim] f32: the latent query
                                   projection, q~_i = W_qlat[h]^T q_i. Required iff
                                   ta_problem.latent_dim > 0, else ignored. */
    const float *w_vup;       /**< [H, latent_dim, head_dim_v] f32: the value
                                   up-projection, o_i = W_vup[h]^T ctx~_i. Required iff
                                   latent_dim > 0, else ignored. */
    /**
     * MTA decode: a ring of raw scores kept across the calls of one sequence
     * (docs/mta.md section 2a, "The score ring"), so a decode step reads the
     * history rows' scores instead of recomputing them from q_hist. NULL (the
     * default): none. f32 [B, H, score_ring_slots, ld] by score_ring_strides;
     * query row r (history rows too) at position r + S_k - S_q lives in slot
     * position % score_ring_slots, its entry j = its raw score with key j,
     * scale <q_r, k_j>, the exact value the conv reads. The MTA conv only
     * (else TA_ERR_BAD_ARG), REF and CPU (CUDA: TA_ERR_UNSUPPORTED), not with
     * key ranges (key_begin > 0 or key_end < S_k: TA_ERR_UNSUPPORTED).
     *  - Written: the entries the call's last min(S_q, c_q - 1) rows see
     *    (causal, seqlens_k, window); no other entry is touched.
     *  - Read, iff q_history > 0 and q_hist is NULL: the entries history
     *    rows see, in place of recomputing them. Then q_history + S_q <=
     *    score_ring_slots (TA_ERR_BAD_ARG: the rows read and the rows written
     *    must be distinct slots). The caller guarantees they were written by
     *    earlier calls of the same sequence with the same keys, masks and
     *    rotary positions (a growing cache): exact mode then gives the bits
     *    of recomputing them. With q_hist given, the history is recomputed
     *    and the ring only written (a long prefill chunk).
     * Read and written: no other buffer may overlap it.
     */
    float *score_ring;
    int32_t score_ring_slots;       /**< slots of score_ring, >= c_q (with a ring), at most
                                         TA_SEQ_MAX; ignored without one */
    ta_strides score_ring_strides;  /**< element strides of score_ring (batch, head, slot);
                                         zero = contiguous [B, H, slots, S_k]. A decode loop
                                         whose S_k grows passes {H slots ld, slots ld, ld}
                                         for its capacity ld (seq >= S_k, else
                                         TA_ERR_BAD_ARG) */
} ta_fwd_args;

/** Backward arguments. o and lse are the forward's outputs for the same inputs. */
typedef struct ta_bwd_args {
    /** q, k, v as in ta_fwd_args; required. @{ */
    const void *q, *k, *v;
    /** @} */
    const void *o;            /**< [B, H, S_q, D_v] dtype; required */
    const void *d_o;          /**< [B, H, S_q, D_v] dtype; required */
    const float *lse;         /**< [B, H, S_q] f32; required */
    const float *conv_w;      /**< [H, c_q, c_k] f32; required iff conv is set */
    const int32_t *seqlens_k; /**< as in ta_fwd_args (host memory, or device memory
                                   with TA_SEQLENS_DEVICE on CUDA) */
    void *dq;                 /**< [B, H, S_q, D]      dtype; required; written */
    void *dk;                 /**< [B, H_kv, S_k, D]   dtype; required; written */
    void *dv;                 /**< [B, H_kv, S_k, D_v] dtype; required; written */
    float *dconv_w;           /**< [H, c_q, c_k] f32, summed over batch; required iff conv */
    ta_trace *trace;          /**< NULL, or a caller trace buffer (REF only) */
    /** Strides of q, k, v, o, d_o, dq, dk, dv (ta_strides); zero = contiguous. @{ */
    ta_strides q_strides, k_strides, v_strides, o_strides;
    ta_strides d_o_strides, dq_strides, dk_strides, dv_strides;
    /** @} */
    ta_rope_args rope; /**< as in ta_fwd_args: the forward's tables and positions;
                            dq and dk are the gradients with respect to the
                            stored (unrotated) q and k */
    float *d_alpha;           /**< [1] f32: d L / d rband_alpha, summed over the batch,
                                   heads, rows and band keys in a fixed order
                                   (docs/exactness.md section 13); overwritten.
                                   Required iff TA_RBAND, else ignored. */
    /** As in ta_fwd_args (latent_dim > 0 only; else ignored). @{ */
    const float *w_qlat, *w_vup;
    /** @} */
    float *dw_qlat;           /**< [H, head_dim, latent_dim] f32, summed over batch and
                                   tokens in a fixed order; overwritten. Required iff
                                   latent_dim > 0 */
    float *dw_vup;            /**< [H, latent_dim, head_dim_v] f32, as dw_qlat */
    int32_t accumulate;       /**< 0 (default): dq, dk, dv are written in the storage
                                   dtype, overwritten. TA_BWD_ACCUMULATE (1): the
                                   backward over key and query ranges (docs/api.md,
                                   "Backward over key and query ranges"): dq, dk, dv
                                   and dq_lo, dk_lo, dv_lo are f32 (hi, lo) pairs of
                                   the unscaled gradient sums (src/ta_sum2.h), laid out
                                   by dq_strides, dk_strides, dv_strides in f32
                                   elements (a word and its lo word share one
                                   offset), read and written: the call adds its sums
                                   to them in the order ta_bwd sums, and
                                   ta_bwd_finish turns them into the gradients.
                                   Zero-fill both words before the first call. SDPA
                                   and the MTA conv (then dconv_w too, with
                                   dconv_w_lo); not with rope, the band or the
                                   projections (TA_ERR_UNSUPPORTED). Every backend:
                                   REF, CPU (OpenMP or caller-run tasks) and CUDA
                                   (device memory; the exact kernels, in either
                                   precision), the same words, SDPA and the MTA
                                   conv. Other values: TA_ERR_BAD_ARG. */
    /** With accumulate: the lo words of dq, dk, dv (f32, their hi words' layout);
     *  required then, else ignored. @{ */
    float *dq_lo, *dk_lo, *dv_lo;
    /** @} */
    float *dconv_w_lo;        /**< With accumulate and the MTA conv: the lo words of
                                   dconv_w (f32 [H, c_q, c_k]); required then, else
                                   ignored. (dconv_w, dconv_w_lo) is then a pair the
                                   call adds its sum over its rows and keys to (each
                                   Q tile's sum R(b, qt), b and Q tiles ascending,
                                   docs/mta.md 2b); dconv_w, the hi word, is the
                                   weight gradient (no ta_bwd_finish step). Zero both
                                   before the first call. Appended. */
} ta_bwd_args;

/** ta_bwd_args.accumulate: add the backward's sums into f32 (hi, lo) pair buffers. */
#define TA_BWD_ACCUMULATE 1

/**
 * Workspace bytes ta_fwd needs for problem p on backend be.
 * Needs no device, even for TA_BACKEND_CUDA (a planner may size memory for a
 * GPU from a machine without one). Validates p as ta_fwd would (not the
 * pointers).
 * @param[in]  p      the problem (sizes, dtype, flags, conv, tiles); validated
 *                    in full, as by ta_fwd
 * @param[in]  be     TA_BACKEND_REF, TA_BACKEND_CPU or TA_BACKEND_CUDA; CUDA's
 *                    query works without the CUDA component or a device
 * @param[out] bytes  the size, >= 0 (host memory for REF and CPU, device memory
 *                    for CUDA); written only on TA_OK
 * @return TA_OK; TA_ERR_NULL_ARG for a NULL p or bytes; else the first failed
 *         check on the problem or the backend (docs/api.md, "Statuses and the
 *         order of checks"; ta_explain_fwd_workspace_size names it)
 */
ta_status ta_fwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes);

/**
 * Attention forward: o (and lse if requested).
 * A row that sees no key gives o = 0 and lse = -inf.
 * @param[in]     p         the problem
 * @param[in]     be        backend
 * @param[in,out] a         pointers; outputs o, lse, trace written on TA_OK only
 * @param[in]     workspace TA_WORKSPACE_ALIGN-aligned, at least the queried bytes;
 *                          may be NULL only if the query returned 0. Contents are
 *                          scratch: undefined on return.
 * @param[in]     workspace_bytes  bytes at workspace, at least what
 *                          ta_fwd_workspace_size returned (else TA_ERR_WORKSPACE_SIZE)
 * @param[in]     stream    cudaStream_t for TA_BACKEND_CUDA (NULL = default stream);
 *                          must be NULL for host backends.
 * @return TA_OK, or the status of the first failed check (docs/api.md, "Statuses
 *         and the order of checks"; ta_explain_fwd names it); TA_ERR_DEVICE when
 *         a CUDA call fails
 */
ta_status ta_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream);

/**
 * Workspace bytes ta_bwd needs; as ta_fwd_workspace_size.
 * @param[in]  p      the problem, validated in full
 * @param[in]  be     backend; no device needed, also for TA_BACKEND_CUDA
 * @param[out] bytes  the size, >= 0; written only on TA_OK
 * @return as ta_fwd_workspace_size (ta_explain_bwd_workspace_size names a failure)
 */
ta_status ta_bwd_workspace_size(const ta_problem *p, ta_backend be, size_t *bytes);

/**
 * Attention backward: dq, dk, dv (and dconv_w with the MTA conv), recomputed
 * from q, k, v and lse; no stored probabilities. Arguments as ta_fwd.
 * Rows that saw no key contribute nothing: their dq row is 0.
 * @param[in]     p         the problem of the forward that gave o and lse
 * @param[in]     be        backend
 * @param[in,out] a         pointers: q, k, v, o, d_o, lse, conv_w read; dq, dk, dv,
 *                          dconv_w and the trace written on TA_OK only (the
 *                          gradients overwritten, not accumulated into, unless
 *                          a->accumulate: then dq, dk, dv and their lo words
 *                          are f32 pairs read and added into, and with the
 *                          conv (dconv_w, dconv_w_lo) too; ta_bwd_finish).
 *                          With a row or key range (ta_problem.row_begin,
 *                          key_begin, ...) only the range's dq rows and dk,
 *                          dv keys are written (read and added into), and
 *                          dconv_w sums the range's entries only.
 * @param[in]     workspace as for ta_fwd, at least what ta_bwd_workspace_size
 *                          returned; scratch, undefined on return
 * @param[in]     workspace_bytes  bytes at workspace (else TA_ERR_WORKSPACE_SIZE)
 * @param[in]     stream    as for ta_fwd
 * @return as ta_fwd (ta_explain_bwd names a failed check)
 */
ta_status ta_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *a, void *workspace,
                 size_t workspace_bytes, void *stream);

/** The hi words of accumulating backward calls (ta_bwd_args.accumulate)
 *  and the gradients ta_bwd_finish makes of them. Each (hi, gradient) of dq,
 *  dk, dv is both set or both NULL (that gradient not finished). */
typedef struct ta_bwd_finish_args {
    const float *dq_hi; /**< [B, H, S_q, D] f32, contiguous: the unscaled dq sums */
    const float *dk_hi; /**< [B, H_kv, S_k, D] f32, contiguous */
    const float *dv_hi; /**< [B, H_kv, S_k, D_v] f32, contiguous */
    void *dq;           /**< [B, H, S_q, D] dtype, dq_strides; written */
    void *dk;           /**< [B, H_kv, S_k, D] dtype, dk_strides; written */
    void *dv;           /**< [B, H_kv, S_k, D_v] dtype, dv_strides; written */
    /** Strides of dq, dk, dv (ta_strides); zero = contiguous. @{ */
    ta_strides dq_strides, dk_strides, dv_strides;
    /** @} */
} ta_bwd_finish_args;

/**
 * The gradients of accumulating backward calls: per element, from its hi
 * word x, dq = store(scale * x), dk = store(scale * x), dv = store(x),
 * each rounded once to the storage dtype: the arithmetic with which ta_bwd
 * stores them, so accumulating calls over ranges in ascending order, then
 * this, give one ta_bwd's bits (docs/api.md, "Backward over key and query
 * ranges", for the conditions). No workspace.
 * @param[in]     p       the problem of the backward calls over the whole
 *                        tensors (sizes, dtype, scale), validated as by ta_bwd
 * @param[in]     be      TA_BACKEND_REF or TA_BACKEND_CPU (host memory), or
 *                        TA_BACKEND_CUDA (device memory: one kernel per
 *                        gradient on stream); the same bits on each
 * @param[in,out] a       the hi words and the gradients; written on TA_OK only
 * @param[in]     stream  NULL for the host backends; CUDA: a cudaStream_t
 *                        (NULL = the default stream), nothing synchronised
 * @return TA_OK; TA_ERR_NULL_ARG (p, a); TA_ERR_BAD_ARG (a hi pointer
 *         without its gradient or the reverse, a stride, a misaligned or
 *         overlapping buffer; CUDA: memory the device cannot read); the
 *         problem's and the backend's statuses as for ta_bwd; TA_ERR_DEVICE
 *         when a CUDA call fails (ta_explain_bwd_finish names a failed check)
 */
ta_status ta_bwd_finish(const ta_problem *p, ta_backend be, const ta_bwd_finish_args *a,
                        void *stream);

/**
 * Partial results to merge (ta_merge): K forwards of the same queries over
 * disjoint key ranges, as ta_fwd returns them (o in the problem's dtype, lse
 * f32), stacked along a leading dimension. Host memory for REF and CPU, device
 * memory for CUDA.
 */
typedef struct ta_merge_args {
    int32_t num_parts;       /**< K >= 1 */
    const void *o_parts;     /**< [K, B, H, S_q, D_v] dtype, contiguous; required */
    const float *lse_parts;  /**< [K, B, H, S_q] f32, contiguous; required. A part
                                  with lse = -inf for a row (it saw no key there)
                                  contributes nothing to that row. */
    void *o;                 /**< [B, H, S_q, D_v] dtype, laid out by o_strides;
                                  required; written */
    float *lse;              /**< [B, H, S_q] f32, contiguous; NULL = not wanted;
                                  written */
    ta_strides o_strides;    /**< strides of o (ta_strides); zero = contiguous */
} ta_merge_args;

/**
 * Merges K partial attention results computed over disjoint key ranges into
 * the result over their union (docs/api.md, "Split-K and merge"): per row,
 * in ascending part order, with the arithmetic of docs/exactness.md section
 * 10 (the one split-K's forward uses):
 *
 *     M = max_s lse_s;  w_s = exp(lse_s - M);  L = sum_s w_s
 *     o = (sum_s w_s o_s) / L,  lse = M + log(L)
 *
 * (the library's exp and log; parts with lse_s = -inf skipped; a row where
 * every part has lse = -inf gives o = 0, lse = -inf). Same bits on every
 * backend. The building block of sequence / context parallelism: each device
 * runs ta_fwd on its share of the keys (with lse), the results are gathered
 * in key order, and one ta_merge gives the full attention within a few f32
 * roundings of one ta_fwd over all keys (not bit for bit: the online softmax
 * rescales at other points).
 * @param[in]     p       the problem of the partial forwards, validated as by
 *                        ta_fwd; read: batch, heads_q, seq_q, head_dim_v, dtype
 * @param[in]     be      backend (host memory for REF and CPU, device memory
 *                        for CUDA); no workspace is needed
 * @param[in,out] a       the parts and the outputs; o and lse written on TA_OK only
 * @param[in]     stream  cudaStream_t for TA_BACKEND_CUDA (NULL = default
 *                        stream); must be NULL for host backends
 * @return TA_OK; TA_ERR_NULL_ARG (p, a, o_parts, lse_parts, o); TA_ERR_BAD_ARG
 *         (num_parts < 1, o_strides, a misaligned or overlapping buffer, or
 *         on CUDA a pointer the device cannot read); TA_ERR_OVERFLOW (the
 *         parts' size); the problem's and the backend's statuses as for ta_fwd;
 *         TA_ERR_DEVICE when a CUDA call fails (ta_explain_merge names a
 *         failed check)
 */
ta_status ta_merge(const ta_problem *p, ta_backend be, const ta_merge_args *a, void *stream);

/**
 * @name Diagnostics
 * Which check refuses a call, in words. Each ta_explain_* runs the
 * validation of its entry point (the same code, in the same order; nothing is
 * computed or written but buf) and returns the status that entry point would
 * return before computing. Into buf it writes one line naming the first failed
 * check: the field as the caller spells it, the value found, the allowed range
 * or the overlapping pair, and the status, e.g.
 *   "heads_kv = 0: allowed >= 1 (TA_ERR_BAD_SHAPE)"
 *   "args.o: overlaps args.q (TA_ERR_BAD_ARG)"
 *   "ok: every check passed" (TA_OK)
 * buf gets at most buf_len - 1 characters and a NUL (nothing when buf is NULL or
 * buf_len is 0). No allocation, no global state: callable from any thread, also
 * from a real-time loop. Not predicted: what a backend finds only while running
 * (TA_ERR_DEVICE, a device pointer CUDA cannot access, a GPU's shared-memory
 * limit). The size-query variants explain ta_*_workspace_size (which has no
 * pointers to check but `bytes`, whose NULL they cannot see).
 * @{
 */

/**
 * Explains ta_fwd: its checks, nothing computed (see Diagnostics above).
 * @param[in]  p, be, a, workspace, workspace_bytes, stream  as for ta_fwd; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_fwd would return before computing
 */
ta_status ta_explain_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                         const void *workspace, size_t workspace_bytes, const void *stream,
                         char *buf, size_t buf_len);
/**
 * Explains ta_bwd: its checks, nothing computed.
 * @param[in]  p, be, a, workspace, workspace_bytes, stream  as for ta_bwd; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_bwd would return before computing
 */
ta_status ta_explain_bwd(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                         const void *workspace, size_t workspace_bytes, const void *stream,
                         char *buf, size_t buf_len);
/**
 * Explains ta_merge: its checks, nothing computed.
 * @param[in]  p, be, a, stream  as for ta_merge; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_merge would return before computing
 */
ta_status ta_explain_merge(const ta_problem *p, ta_backend be, const ta_merge_args *a,
                           const void *stream, char *buf, size_t buf_len);
/**
 * Explains ta_bwd_finish: its checks, nothing computed.
 * @param[in]  p, be, a, stream  as for ta_bwd_finish; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_bwd_finish would return before computing
 */
ta_status ta_explain_bwd_finish(const ta_problem *p, ta_backend be, const ta_bwd_finish_args *a,
                                const void *stream, char *buf, size_t buf_len);
/**
 * Explains ta_fwd_workspace_size.
 * @param[in]  p, be    as for ta_fwd_workspace_size
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_fwd_workspace_size would return with a non-NULL bytes
 */
ta_status ta_explain_fwd_workspace_size(const ta_problem *p, ta_backend be, char *buf,
                                        size_t buf_len);
/**
 * Explains ta_bwd_workspace_size.
 * @param[in]  p, be    as for ta_bwd_workspace_size
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_bwd_workspace_size would return with a non-NULL bytes
 */
ta_status ta_explain_bwd_workspace_size(const ta_problem *p, ta_backend be, char *buf,
                                        size_t buf_len);
/**
 * Explains ta_fwd_tasks_prepare (caller-run tasks): its checks, nothing
 * recorded; unlike ta_explain_fwd, it judges shared against the task plan's
 * shared_bytes and names the checks of the task mode (the backend).
 * @param[in]  p, be, a, shared, shared_bytes  as for ta_fwd_tasks_prepare; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_fwd_tasks_prepare would return
 */
ta_status ta_explain_fwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                                       const void *shared, size_t shared_bytes, char *buf,
                                       size_t buf_len);
/**
 * Explains ta_bwd_tasks_prepare; as ta_explain_fwd_tasks_prepare.
 * @param[in]  p, be, a, shared, shared_bytes  as for ta_bwd_tasks_prepare; only read
 * @param[out] buf      the line, NUL-terminated; may be NULL
 * @param[in]  buf_len  bytes at buf; 0 writes nothing
 * @return the status ta_bwd_tasks_prepare would return
 */
ta_status ta_explain_bwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                                       const void *shared, size_t shared_bytes, char *buf,
                                       size_t buf_len);
/** @} */

/** Entries of ta_tune_result.ms: room for the largest candidate table of any
 *  head dim, today 10 (D = 128; docs/cuda.md section 7). */
#define TA_TUNE_MAX_CANDIDATES 12
/** reps of ta_tune_fwd: in [1, TA_TUNE_REPS_MAX] (the medians are taken over
 *  an array on the stack). */
#define TA_TUNE_REPS_MAX 100

/** What ta_tune_fwd measured. Plain data: store it with the problem and set
 *  problem.tile_config = tile_config for every later ta_fwd of that problem. */
typedef struct ta_tune_result {
    int32_t tile_config;    /**< the pick, k >= 1: the candidate with the smallest
                                 median (ties: the smaller k) */
    int32_t num_candidates; /**< candidates of the problem's head dim: tile_config
                                 1 .. num_candidates were timed */
    float ms[TA_TUNE_MAX_CANDIDATES]; /**< ms[k - 1]: median milliseconds of one
                                 forward with tile_config = k; < 0: candidate k
                                 could not run here (the wgmma candidate 1 off
                                 sm_90 or in a build without sm_90a code; shared
                                 memory beyond the device's limit), and every
                                 entry from num_candidates on */
} ta_tune_result;

/**
 * Times the tile configurations of a fast-mode CUDA forward on the caller's
 * buffers and returns the fastest (docs/api.md, "Tuning"). Only for problems
 * whose forward has a configuration table: TA_BACKEND_CUDA, TA_PRECISION_FAST,
 * f16 / bf16 SDPA (D = D_v in {64, 96, 128, 256}); anything else, REF and CPU
 * included, is TA_ERR_UNSUPPORTED. No allocation and no state kept: the pick
 * lives only in *out. A pick changes speed, not meaning: ta_fwd with
 * tile_config = out->tile_config gives the bits an explicit call with that
 * tile_config gives, whether or not this call ran.
 *
 * Candidate k (1 .. num_candidates; p->tile_config is validated as by ta_fwd,
 * then ignored) runs once untimed, then reps times, timed with CUDA events on
 * stream; its entry is the median of the reps (the lower middle one for an
 * even reps). Candidates that cannot run on this device are skipped (ms < 0).
 *
 * Arguments and checks: those of ta_fwd, checked first and in ta_fwd's order
 * (ta_explain_fwd names a failure among them); then out (NULL:
 * TA_ERR_NULL_ARG; not aligned to its type: TA_ERR_BAD_ARG), reps outside
 * [1, TA_TUNE_REPS_MAX] (TA_ERR_BAD_ARG), then the problem (TA_ERR_UNSUPPORTED
 * as above), then, in the launch code, ta_fwd's fast-mode checks (alignment)
 * and a stream under capture (TA_ERR_BAD_ARG).
 *
 * Creates and destroys reps + 1 CUDA events (driver objects, no memory of the
 * caller's); costs (reps + 1) * num_candidates forwards.
 * @param[in]     p, be, workspace, workspace_bytes  as for ta_fwd
 * @param[in,out] a         as for ta_fwd; every forward the call runs writes
 *                          a->o and a->lse: undefined on return, also after an
 *                          error while timing; untouched when a check refuses
 * @param[in]     stream    cudaStream_t (NULL = default stream). The call
 *                          SYNCHRONISES it (cudaEventSynchronize) and cannot be
 *                          captured in a CUDA graph; tune outside capture and
 *                          capture ta_fwd with the pick.
 * @param[in]     reps      timed calls per candidate, in [1, TA_TUNE_REPS_MAX]
 * @param[out]    out       the result; written on TA_OK only
 * @return TA_OK, or the first failed check in the order above; TA_ERR_DEVICE
 *         when a CUDA call fails while timing
 */
ta_status ta_tune_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *a, void *workspace,
                      size_t workspace_bytes, void *stream, int32_t reps, ta_tune_result *out);

/* ---- Rotary position embeddings: table builders (docs/rope.md) ---- */

/** Frequency scaling of a 1-D rotary table (ta_rope_1d.scaling). With R =
 *  2 n_pairs rotated dims, pair i in [0, n_pairs) turns by the angle
 *  pos * f_i, f_i = base^(-2 i / R), unless scaled: */
typedef enum ta_rope_scaling {
    TA_ROPE_SCALE_NONE = 0,   /**< f_i as above */
    TA_ROPE_SCALE_LINEAR = 1, /**< position interpolation: f_i / factor */
    TA_ROPE_SCALE_NTK = 2,    /**< NTK-aware: base replaced by base factor^(R / (R - 2)) */
    TA_ROPE_SCALE_YARN = 3    /**< YaRN: f_i / factor for long wavelengths, f_i for short,
                                   a linear ramp between (beta_fast, beta_slow rotations
                                   over orig_max_pos positions); cos and sin times mscale */
} ta_rope_scaling;

/** A 1-D rotary table: row t of cos/sin holds cos(a_i), sin(a_i) of pair i for
 *  the position of row t. Zero-initialise, then set what you need; zero keeps
 *  each field's default. */
typedef struct ta_rope_1d {
    int32_t n_pairs;       /**< pairs per row, >= 1 (R = 2 n_pairs rotated dims) */
    int32_t rows;          /**< rows written, >= 0 (identity rows included) */
    int32_t row_stride;    /**< floats from one row to the next, >= n_pairs; 0 -> n_pairs */
    int32_t identity_rows; /**< leading rows with cos = 1, sin = 0 (tokens that do not
                                rotate: CLS, registers), in [0, rows] */
    double base;           /**< > 0; 0 -> 10000 */
    double pos_scale;      /**< row t >= identity_rows is at position
                                (t - identity_rows) pos_scale + pos_offset; 0 -> 1 */
    double pos_offset;     /**< see pos_scale; finite */
    int32_t scaling;       /**< ta_rope_scaling */
    int32_t orig_max_pos;  /**< YaRN: the context length the model was trained at, >= 1 */
    double factor;         /**< LINEAR, NTK, YaRN: the extension factor, >= 1 */
    double beta_fast;      /**< YaRN: rotations where the ramp ends (pure f_i); 0 -> 32 */
    double beta_slow;      /**< YaRN: rotations where the ramp starts (pure f_i / factor);
                                0 -> 1; beta_fast > beta_slow */
    double mscale;         /**< YaRN: cos, sin multiplier; 0 -> 0.1 ln(factor) + 1 */
} ta_rope_1d;

/** A 2-D axial rotary table for a grid_h x grid_w patch grid (ViTs): after
 *  identity_rows rows of cos = 1, sin = 0, row identity_rows + y grid_w + x is
 *  patch (y, x) (row-major token order). Half the pairs turn by the column
 *  position x scale_w, the other half by the row position y scale_h, each
 *  half with frequencies f_i = base^(-2 i / n_pairs), i in [0, n_pairs / 2). */
typedef struct ta_rope_2d {
    int32_t n_pairs;       /**< pairs per row, even, >= 2 */
    int32_t grid_h;        /**< patch rows, >= 1 */
    int32_t grid_w;        /**< patch columns, >= 1 */
    int32_t row_stride;    /**< >= n_pairs; 0 -> n_pairs */
    int32_t identity_rows; /**< >= 0 */
    int32_t y_first;       /**< 0: pairs [0, n_pairs / 2) turn with x (the column), the
                                rest with y; 1: y first */
    double base;           /**< > 0; 0 -> 100 */
    double scale_h;        /**< multiplier of the row position y; 0 -> 1 */
    double scale_w;        /**< multiplier of the column position x; 0 -> 1 */
} ta_rope_2d;

/**
 * Fills a 1-D rotary table into the caller's buffers (no allocation). The
 * angles and cos/sin are computed in double precision (the C library's cos,
 * sin, pow, log) and rounded once to float: the same table on every machine
 * whose C library rounds those correctly, which glibc's do in practice but
 * the C standard does not promise (docs/rope.md).
 * @param[in]  cfg  the table; checked as documented in its fields
 * @param[out] cos  [rows][row_stride] floats; entries past n_pairs in a row untouched
 * @param[out] sin  as cos; must not overlap it
 * @return TA_OK; TA_ERR_NULL_ARG (a NULL pointer); TA_ERR_BAD_ARG (a field out
 *         of range, NaN, overlapping tables); TA_ERR_OVERFLOW (rows * row_stride
 *         does not fit); nothing written on error
 */
ta_status ta_rope_table_1d(const ta_rope_1d *cfg, float *cos, float *sin);

/**
 * Fills a 2-D axial rotary table: identity_rows + grid_h grid_w rows of
 * row_stride floats each. As ta_rope_table_1d otherwise.
 * @param[in]  cfg  the table
 * @param[out] cos  [identity_rows + grid_h grid_w][row_stride] floats
 * @param[out] sin  as cos; must not overlap it
 * @return as ta_rope_table_1d
 */
ta_status ta_rope_table_2d(const ta_rope_2d *cfg, float *cos, float *sin);

/**
 * @name Caller-run tasks (CPU backend)
 * For engines that run their own threads (docs/api.md, "Caller-run tasks";
 * docs/cpu.md section 3a): instead of ta_fwd / ta_bwd, which run the CPU
 * backend's tasks on OpenMP threads inside the call, the caller
 *   1. asks ta_fwd_task_plan / ta_bwd_task_plan for the phases, the tasks per
 *      phase and two sizes: the shared workspace of the call and the scratch
 *      each running task needs (no pointers needed: plan at start-up);
 *   2. calls ta_fwd_tasks_prepare / ta_bwd_tasks_prepare once per call with
 *      the arguments ta_fwd / ta_bwd would take: it runs every check of that
 *      call (the same statuses, in the same order; nothing is written on a
 *      failure) and records the validated call in the shared workspace;
 *   3. calls ta_task_run(shared, phase, task, scratch, scratch_bytes) once for
 *      every task of phase 0, in any order, on any threads, at once or not,
 *      each running task with a scratch buffer of its own (a worker can keep
 *      one and reuse it for every task it runs); then, only after every task
 *      of phase 0 has returned, the tasks of phase 1, and so on.
 * The outputs are then bit-identical to ta_fwd / ta_bwd on TA_BACKEND_CPU
 * (any num_threads): every task writes its own output rows and every output
 * element is summed inside one task, in the reference's order.
 * Phases: the forward and the SDPA backward have one; the MTA backward has
 * two (phase 0: dk/dv and dq tasks, each dq task leaving its Q tile's dconv_w
 * sum in the shared workspace; phase 1: one task per head adds those sums
 * into dconv_w in the reference's order). A split-K forward runs one task
 * per part, its part in the shared workspace; the task that finishes the
 * last part of a Q tile merges them in ascending order (still one phase).
 * No allocation, no OpenMP, no lock, no wait inside a task (the OpenMP path's
 * dconv_w merge waits for its turn; the phases replace that wait), nothing
 * printed. ta_problem.num_threads is the number of workers the caller expects
 * (0 = 1): it only sets how finely the work is cut (tasks of up to 4 tiles,
 * smaller while there would be fewer than two tasks per worker), never a bit.
 * Only TA_BACKEND_CPU has this mode; other backends: TA_ERR_UNSUPPORTED.
 * @{
 */

/** Phases a caller-run call can have (ta_task_plan.num_tasks has this many). */
#define TA_TASK_PHASES_MAX 2

/** What a caller-run call consists of; plain data, from the problem alone. */
typedef struct ta_task_plan {
    int32_t num_phases; /**< 1 (forward, SDPA backward) or 2 (MTA backward) */
    int32_t reserved;   /**< 0 */
    int64_t num_tasks[TA_TASK_PHASES_MAX]; /**< tasks of phase ph, numbered 0 ..
                                                num_tasks[ph] - 1; 0 from
                                                num_phases on */
    size_t shared_bytes;  /**< the shared workspace: TA_WORKSPACE_ALIGN-aligned,
                               given to the prepare call and to every task;
                               it holds the validated call (about 2 KiB) and,
                               for the MTA backward, every Q tile's dconv_w sum
                               (4 (c_q c_k + 1) B H n_q bytes, n_q Q tiles of
                               the backward's tiling: grows with S_q); for a
                               split-K forward, its parts (about 4 n B H S_q
                               (D_v + 1) bytes) */
    size_t scratch_bytes; /**< scratch of one running task (one thread's tile
                               buffers; independent of B and S): each task that
                               runs at the same time as another needs its own */
} ta_task_plan;

/**
 * The caller-run plan of ta_fwd for problem p on backend be.
 * @param[in]  p    the problem, validated in full as by ta_fwd_workspace_size
 * @param[in]  be   TA_BACKEND_CPU; REF and CUDA: TA_ERR_UNSUPPORTED
 * @param[out] out  the phases, task counts and sizes; written only on TA_OK
 * @return TA_OK; TA_ERR_NULL_ARG for a NULL p or out; else the first failed
 *         check of ta_fwd_workspace_size, then TA_ERR_UNSUPPORTED for another
 *         backend
 */
ta_status ta_fwd_task_plan(const ta_problem *p, ta_backend be, ta_task_plan *out);

/**
 * The caller-run plan of ta_bwd; as ta_fwd_task_plan.
 * @param[in]  p    the problem, validated in full
 * @param[in]  be   TA_BACKEND_CPU
 * @param[out] out  written only on TA_OK
 * @return as ta_fwd_task_plan
 */
ta_status ta_bwd_task_plan(const ta_problem *p, ta_backend be, ta_task_plan *out);

/**
 * Validates a forward as ta_fwd would (with shared and shared_bytes in the
 * workspace's place, sized by ta_fwd_task_plan's shared_bytes) and records it
 * in shared for ta_task_run. Writes no output. The problem and args structs
 * are copied (they may go out of scope); the tensors they point to, and
 * shared, must stay unchanged until the last task has returned. Preparing
 * again (the same or another call) starts over.
 * @param[in]  p, be, a   as for ta_fwd (be: TA_BACKEND_CPU)
 * @param[out] shared     the shared workspace; its contents are the library's
 *                        until the last task returns, undefined after
 * @param[in]  shared_bytes  bytes at shared
 * @return TA_OK, or the status ta_fwd would return in ta_fwd's order of
 *         checks (judging the workspace against shared_bytes), with
 *         TA_ERR_UNSUPPORTED for a backend other than CPU right after the
 *         backend's own checks (ta_explain_fwd_tasks_prepare names the
 *         failed check); a split-K forward (num_splits > 1) runs one task
 *         per part, in one phase
 */
ta_status ta_fwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_fwd_args *a,
                               void *shared, size_t shared_bytes);

/**
 * Validates a backward as ta_bwd would and records it; as ta_fwd_tasks_prepare.
 * @param[in]  p, be, a   as for ta_bwd (be: TA_BACKEND_CPU)
 * @param[out] shared     the shared workspace, ta_bwd_task_plan's shared_bytes
 * @param[in]  shared_bytes  bytes at shared
 * @return as ta_fwd_tasks_prepare
 */
ta_status ta_bwd_tasks_prepare(const ta_problem *p, ta_backend be, const ta_bwd_args *a,
                               void *shared, size_t shared_bytes);

/**
 * Runs task `task` of phase `phase` of the call prepared in shared. Callable
 * from any thread, concurrently with other tasks of the same phase (each with
 * its own scratch). Checks, in this order, before anything is written:
 * shared NULL (TA_ERR_NULL_ARG), not aligned (TA_ERR_WORKSPACE_ALIGN), not a
 * prepared call (TA_ERR_BAD_ARG); phase outside [0, num_phases), task outside
 * [0, num_tasks[phase]) (TA_ERR_BAD_ARG); a phase started before every task
 * of the phase before it has returned (TA_ERR_BAD_ARG: a counter of finished
 * tasks per phase, which the caller's own synchronisation between the phases
 * makes visible); scratch NULL (TA_ERR_NULL_ARG), smaller than scratch_bytes
 * (TA_ERR_WORKSPACE_SIZE), not aligned (TA_ERR_WORKSPACE_ALIGN), overlapping
 * shared or a tensor of the call (TA_ERR_BAD_ARG). Not detected: two running
 * tasks sharing one scratch, a task run twice, or shared changed by the
 * caller meanwhile.
 * @param[in,out] shared   the workspace of a successful prepare call
 * @param[in]     phase    0 .. num_phases - 1
 * @param[in]     task     0 .. num_tasks[phase] - 1
 * @param[out]    scratch  TA_WORKSPACE_ALIGN-aligned scratch of this task;
 *                         undefined on return
 * @param[in]     scratch_bytes  bytes at scratch, at least scratch_bytes of
 *                         the plan
 * @return TA_OK, or the first failed check above
 */
ta_status ta_task_run(void *shared, int32_t phase, int64_t task, void *scratch,
                      size_t scratch_bytes);
/** @} */

/** 1 if backend be is compiled in and usable now (a device is present for
 *  CUDA) and implements ta_fwd/ta_bwd; 0 otherwise.
 *  @param[in] be  any value; one outside the enum gives 0
 *  @return 1 or 0 */
int ta_backend_available(ta_backend be);

/** Version of the linked library, as TA_VERSION (major * 10000 + minor * 100
 *  + patch). A program compiled against one header and linked against another
 *  library can compare: ta_version() / 100 != TA_VERSION / 100 means another
 *  minor series (see docs/api.md, "Versions and ABI").
 *  @return TA_VERSION of the library's build */
uint32_t ta_version(void);

/** Library version as "major.minor.patch". Static string.
 *  @return e.g. "0.2.0"; never NULL, do not free it */
const char *ta_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* TILEATTN_H */
