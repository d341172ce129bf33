/*
 * tileattn tiling descriptor: the tile schedule every backend runs.
 *
 * Compiles as C11 and as CUDA (helpers are static inline, host+device).
 * The reference, CPU and CUDA backends all take their loops from these
 * functions, so tile bounds, halos and causal skips are the same integers
 * everywhere. See docs/tiling.md for the drawings.
 *
 * Geometry of one pass (fwd or bwd), in the query (row) direction:
 *
 *      loaded rows of Q tile t:  [t*rows_eff - halo_q_top, t*rows_eff + rows_eff + halo_q_bottom)
 *      effective rows (owned):   [t*rows_eff,              min(t*rows_eff + rows_eff, S_q))
 *
 *          row_load_begin -> +---------------------+
 *                            |  halo_q_top rows    |  recomputed, not owned
 *           row_eff_begin -> +---------------------+
 *                            |  rows_eff rows      |  owned: written by this tile only
 *             row_eff_end -> +---------------------+
 *                            |  halo_q_bottom rows |  (backward only)
 *            row_load_end -> +---------------------+
 *
 *   block_q = halo_q_top + rows_eff + halo_q_bottom.
 *   and likewise for keys (columns) with halo_k on both sides:
 *   block_k = halo_k + cols_eff + halo_k.
 *
 * Halos come from the MTA key-query conv (c_q x c_k kernel, P_k = (c_k-1)/2):
 *   forward : halo_q_top = c_q-1, halo_q_bottom = 0,     halo_k = P_k
 *   backward: halo_q_top = c_q-1, halo_q_bottom = c_q-1, halo_k = 2 P_k
 * (the backward maps the convolved-score gradient back through the transposed
 * conv, which needs the same reach again: both halos double in total).
 * Plain SDPA has no halos and this reduces to FlashAttention tiling.
 * Loaded rows/columns outside [0, S) are zero padding.
 *
 * Exactness: the key-direction cut (cols_eff, hence block_k and the conv) fixes
 * where the forward's online softmax rescales; it is part of the contract.
 */
#ifndef TILEATTN_TILING_H
#define TILEATTN_TILING_H

#include <stdint.h>

#include "tileattn.h"

#if defined(__CUDACC__)
#define TA_HD __host__ __device__
#else
#define TA_HD
#endif
#define TA_TILING_FN static inline TA_HD

#ifdef __cplusplus
extern "C" {
#endif

/** Which halos: the forward pass, or the backward (both halos doubled). */
#define TA_TILING_FWD 0
#define TA_TILING_BWD 1

/** Default tile size when ta_problem.block_q/block_k is 0. */
#define TA_BLOCK_DEFAULT 64

typedef struct ta_tiling {
    int32_t seq_q, seq_k;      /**< S_q, S_k */
    int32_t block_q, block_k;  /**< loaded tile: B_q rows, B_k columns */
    int32_t halo_q_top;        /**< rows loaded above the effective rows */
    int32_t halo_q_bottom;     /**< rows loaded below them (backward only) */
    int32_t halo_k;            /**< columns loaded on each side of the effective columns */
    int32_t rows_eff;          /**< B_r = B_q - halo_q_top - halo_q_bottom (>= 1) */
    int32_t cols_eff;          /**< B_c = B_k - 2 halo_k (>= 1) */
    int32_t num_q_tiles;       /**< ceil(S_q / B_r) */
    int32_t num_k_tiles;       /**< ceil(S_k / B_c) */
    int32_t causal;            /**< 1: row r sees keys j <= r + diag_offset */
    int32_t diag_offset;       /**< S_k - S_q (bottom-right aligned causal mask) */
    int32_t num_splits;        /**< split-K partitions of a row's k tiles, >= 1 */
    int32_t pass;              /**< TA_TILING_FWD or TA_TILING_BWD */
} ta_tiling;

TA_TILING_FN int32_t ta_tiling_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
TA_TILING_FN int32_t ta_tiling_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }

/** 1 if b is a tile size the library accepts: any integer in [TA_BLOCK_MIN,
 *  TA_BLOCK_MAX]. Not only powers of two: the identity-kernel MTA equals SDPA
 *  with block_k = B_k - 2P (54 for the default 6 x 11 conv), and backends need
 *  effective widths that are not powers of two. Whether the halos leave an
 *  effective row and column is checked by ta_tiling_make. */
TA_TILING_FN int ta_tiling_is_block_size(int32_t b) {
    return b >= TA_BLOCK_MIN && b <= TA_BLOCK_MAX;
}

/** Halos of a pass for a c_q x c_k conv (0,0 = no conv). */
TA_TILING_FN void ta_tiling_halos(int32_t conv_q, int32_t conv_k, int32_t pass, int32_t *top,
                                  int32_t *bottom, int32_t *side) {
    const int32_t pq = conv_q > 0 ? conv_q - 1 : 0;
    const int32_t pk = conv_k > 0 ? (conv_k - 1) / 2 : 0;
    *top = pq;
    *bottom = pass == TA_TILING_BWD ? pq : 0;
    *side = pass == TA_TILING_BWD ? 2 * pk : pk;
}

/**
 * Default tile sizes for a conv (0,0 = none): the smallest power of two
 * >= TA_BLOCK_DEFAULT whose backward effective size is at least half the tile.
 * The defaults depend only on the conv, never on the backend.
 */
TA_TILING_FN void ta_tiling_default_blocks(int32_t conv_q, int32_t conv_k, int32_t *block_q,
                                           int32_t *block_k) {
    int32_t top, bottom, side, bq = TA_BLOCK_DEFAULT, bk = TA_BLOCK_DEFAULT;
    ta_tiling_halos(conv_q, conv_k, TA_TILING_BWD, &top, &bottom, &side);
    while (bq < TA_BLOCK_MAX && 2 * (top + bottom) > bq) bq *= 2;
    while (bk < TA_BLOCK_MAX && 4 * side > bk) bk *= 2;
    *block_q = bq;
    *block_k = bk;
}

/**
 * Fill t for one pass. Sizes are assumed validated (1 <= S <= TA_SEQ_MAX,
 * conv in range); returns TA_ERR_UNSUPPORTED if a block size is outside
 * [TA_BLOCK_MIN, TA_BLOCK_MAX] or leaves no effective row/column for this
 * pass, TA_ERR_BAD_ARG for num_splits < 1, TA_ERR_OVERFLOW for S > TA_SEQ_MAX.
 */
TA_TILING_FN int ta_tiling_make(ta_tiling *t, int32_t seq_q, int32_t seq_k, int32_t block_q,
                                int32_t block_k, int32_t conv_q, int32_t conv_k, int32_t causal,
                                int32_t pass, int32_t num_splits) {
    int32_t top, bottom, side;
    if (seq_q < 1 || seq_k < 1) return TA_ERR_BAD_SHAPE;
    if (seq_q > TA_SEQ_MAX || seq_k > TA_SEQ_MAX) return TA_ERR_OVERFLOW;
    if (!ta_tiling_is_block_size(block_q) || !ta_tiling_is_block_size(block_k))
        return TA_ERR_UNSUPPORTED;
    if (num_splits < 1) return TA_ERR_BAD_ARG;
    ta_tiling_halos(conv_q, conv_k, pass, &top, &bottom, &side);
    if (block_q - top - bottom < 1 || block_k - 2 * side < 1) return TA_ERR_UNSUPPORTED;
    t->seq_q = seq_q;
    t->seq_k = seq_k;
    t->block_q = block_q;
    t->block_k = block_k;
    t->halo_q_top = top;
    t->halo_q_bottom = bottom;
    t->halo_k = side;
    t->rows_eff = block_q - top - bottom;
    t->cols_eff = block_k - 2 * side;
    t->num_q_tiles = (seq_q - 1) / t->rows_eff + 1;
    t->num_k_tiles = (seq_k - 1) / t->cols_eff + 1;
    t->causal = causal ? 1 : 0;
    t->diag_offset = seq_k - seq_q;
    t->num_splits = num_splits;
    t->pass = pass;
    return TA_OK;
}

/* ---- Query (row) direction: effective rows are owned; loaded rows may be < 0. */
TA_TILING_FN int32_t ta_tile_row_eff_begin(const ta_tiling *t, int32_t qt) {
    return qt * t->rows_eff;
}
TA_TILING_FN int32_t ta_tile_row_eff_end(const ta_tiling *t, int32_t qt) {
    return ta_tiling_min_i32(qt * t->rows_eff + t->rows_eff, t->seq_q);
}
TA_TILING_FN int32_t ta_tile_row_load_begin(const ta_tiling *t, int32_t qt) {
    return qt * t->rows_eff - t->halo_q_top;
}
/** Exclusive; may exceed S_q by halo_q_bottom (zero padding). */
TA_TILING_FN int32_t ta_tile_row_load_end(const ta_tiling *t, int32_t qt) {
    return ta_tile_row_eff_end(t, qt) + t->halo_q_bottom;
}

/* ---- Key (column) direction. */
TA_TILING_FN int32_t ta_tile_col_eff_begin(const ta_tiling *t, int32_t kt) {
    return kt * t->cols_eff;
}
TA_TILING_FN int32_t ta_tile_col_eff_end(const ta_tiling *t, int32_t kt) {
    return ta_tiling_min_i32(kt * t->cols_eff + t->cols_eff, t->seq_k);
}
TA_TILING_FN int32_t ta_tile_col_load_begin(const ta_tiling *t, int32_t kt) {
    return kt * t->cols_eff - t->halo_k;
}
/** Exclusive; may exceed S_k by halo_k (zero padding). */
TA_TILING_FN int32_t ta_tile_col_load_end(const ta_tiling *t, int32_t kt) {
    return ta_tile_col_eff_end(t, kt) + t->halo_k;
}

/**
 * Last key (inclusive) any effective row of Q tile qt may see, given the key
 * length key_len (S_k, or seqlens_k[b] <= S_k); -1 if none. Under the causal
 * mask row r sees keys j <= r + diag_offset; with the MTA conv, a masked raw
 * score is a constant 0 and a masked convolved score is -inf, so columns past
 * this bound contribute nothing to the forward nor to any gradient.
 */
TA_TILING_FN int32_t ta_tile_last_visible_col(const ta_tiling *t, int32_t qt, int32_t key_len) {
    int32_t last = key_len - 1;
    if (t->causal) last = ta_tiling_min_i32(last, ta_tile_row_eff_end(t, qt) - 1 + t->diag_offset);
    return ta_tiling_max_i32(last, -1);
}

/** Number of k tiles Q tile qt needs: k tiles [0, end) in ascending order; later
 *  ones hold only masked columns and are skipped. 0 when every row is masked. */
TA_TILING_FN int32_t ta_tile_k_end(const ta_tiling *t, int32_t qt, int32_t key_len) {
    const int32_t last = ta_tile_last_visible_col(t, qt, key_len);
    return last < 0 ? 0 : last / t->cols_eff + 1;
}

/** First Q tile that needs k tile kt (the transpose of ta_tile_k_end, for the
 *  dk/dv pass); num_q_tiles if none does (kt starts past key_len or the diagonal). */
TA_TILING_FN int32_t ta_tile_q_begin(const ta_tiling *t, int32_t kt, int32_t key_len) {
    const int32_t col = ta_tile_col_eff_begin(t, kt);
    int32_t row;
    if (col >= key_len) return t->num_q_tiles;
    if (!t->causal) return 0;
    /* smallest row r with r + diag_offset >= col, i.e. r >= col - diag_offset */
    row = col - t->diag_offset;
    if (row <= 0) return 0;
    if (row >= t->seq_q) return t->num_q_tiles;
    return row / t->rows_eff;
}

/** Split-K: k tiles [k_begin, k_end) cut into num_splits contiguous, ascending,
 *  possibly empty parts; part `split` is [*begin, *end). Merged in ascending order. */
TA_TILING_FN void ta_tile_split_range(const ta_tiling *t, int32_t split, int32_t k_begin,
                                      int32_t k_end, int32_t *begin, int32_t *end) {
    const int64_t n = (int64_t)k_end - k_begin;
    *begin = k_begin + (int32_t)(n * split / t->num_splits);
    *end = k_begin + (int32_t)(n * (split + 1) / t->num_splits);
}

/** 1 if key j is visible from query row r (both in range) under t's causal
 *  mask and key length; the one masking predicate every backend uses. */
TA_TILING_FN int ta_tiling_visible(const ta_tiling *t, int32_t r, int32_t j, int32_t key_len) {
    if (j < 0 || j >= key_len || r < 0 || r >= t->seq_q) return 0;
    return !t->causal || j <= r + t->diag_offset;
}

#ifdef __cplusplus
}
#endif

#endif /* TILEATTN_TILING_H */
