/**
 * @file
 * @brief tileattn tiling descriptor: the tile schedule every backend runs.
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
 *
 *       forward : halo_q_top = c_q-1, halo_q_bottom = 0,     halo_k = P_k
 *       backward: halo_q_top = c_q-1, halo_q_bottom = c_q-1, halo_k = 2 P_k
 *
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
#define TA_HD /**< `__host__ __device__` under nvcc, nothing in C */
#endif
#define TA_TILING_FN static inline TA_HD /**< how every helper below is declared */

#ifdef __cplusplus
extern "C" {
#endif

/** Which halos: the forward pass, or the backward (both halos doubled). @{ */
#define TA_TILING_FWD 0
#define TA_TILING_BWD 1
/** @} */

/** Default tile size when ta_problem.block_q/block_k is 0. */
#define TA_BLOCK_DEFAULT 64

/** The tile schedule of one pass, filled by ta_tiling_make (and ta_tiling_set_window). */
typedef struct ta_tiling {
    /** S_q, S_k @{ */
    int32_t seq_q, seq_k;
    /** @} */
    /** loaded tile: B_q rows, B_k columns @{ */
    int32_t block_q, block_k;
    /** @} */
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
    int32_t window_left;       /**< row r sees keys j >= r + diag_offset - window_left; -1: no bound */
    int32_t window_right;      /**< and j <= r + diag_offset + window_right; -1: no bound */
    int32_t q_history;         /**< query rows [-q_history, 0) exist (ta_problem.q_history):
                                    they are visible like any row; rows further up are
                                    zero padding. 0 after ta_tiling_make. */
    int32_t key_begin;         /**< the output keys [key_begin, key_end): K tiles outside
                                    are not visited (ta_tile_k_begin); keys outside
                                    remain raw scores of the conv. 0, S_k after
                                    ta_tiling_make (ta_tiling_set_keys) @{ */
    int32_t key_end;
    /** @} */
    int32_t row_begin;         /**< the backward's output rows [row_begin, row_end): Q
                                    tiles outside are not visited by either pass
                                    (ta_tile_q_in_range); rows outside remain the
                                    conv's halo. 0, S_q after ta_tiling_make
                                    (ta_tiling_set_rows) @{ */
    int32_t row_end;
    /** @} */
} ta_tiling;

/** The smaller, the larger of two int32.
 *  @param[in] a, b  any values
 *  @return min(a, b), max(a, b)
 *  @{ */
TA_TILING_FN int32_t ta_tiling_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
TA_TILING_FN int32_t ta_tiling_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
/** @} */

/** 1 if b is a tile size the library accepts: any integer in [TA_BLOCK_MIN,
 *  TA_BLOCK_MAX]. Not only powers of two: the identity-kernel MTA equals SDPA
 *  with block_k = B_k - 2P (54 for the default 6 x 11 conv), and backends need
 *  effective widths that are not powers of two. Whether the halos leave an
 *  effective row and column is checked by ta_tiling_make.
 *  @param[in] b  a block_q or block_k, any value
 *  @return 1 or 0 */
TA_TILING_FN int ta_tiling_is_block_size(int32_t b) {
    return b >= TA_BLOCK_MIN && b <= TA_BLOCK_MAX;
}

/** Halos of a pass for a c_q x c_k conv (0,0 = no conv).
 *  @param[in]  conv_q  c_q, in [0, TA_CONV_Q_MAX]
 *  @param[in]  conv_k  c_k, 0 or odd in [1, TA_CONV_K_MAX]
 *  @param[in]  pass    TA_TILING_FWD or TA_TILING_BWD
 *  @param[out] top     halo_q_top: c_q - 1 (0 without a conv)
 *  @param[out] bottom  halo_q_bottom: c_q - 1 in the backward, else 0
 *  @param[out] side    halo_k: P_k = (c_k - 1) / 2 in the forward, 2 P_k in the backward */
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
 * @param[in]  conv_q, conv_k  the conv, as for ta_tiling_halos
 * @param[out] block_q, block_k  the default B_q, B_k: powers of two in
 *                               [TA_BLOCK_DEFAULT, TA_BLOCK_MAX]
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
 * The window is left unbounded (ta_tiling_set_window sets it).
 * @param[out] t                the tiling; written only on TA_OK
 * @param[in]  seq_q, seq_k     S_q, S_k, in [1, TA_SEQ_MAX]
 * @param[in]  block_q, block_k B_q, B_k, in [TA_BLOCK_MIN, TA_BLOCK_MAX]
 * @param[in]  conv_q, conv_k   the conv, as for ta_tiling_halos
 * @param[in]  causal           nonzero: the causal mask
 * @param[in]  pass             TA_TILING_FWD or TA_TILING_BWD
 * @param[in]  num_splits       split-K partitions, >= 1
 * @return TA_OK, the statuses above, or TA_ERR_BAD_SHAPE for S < 1
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
    t->window_left = -1;
    t->window_right = -1;
    t->q_history = 0;
    t->key_begin = 0;
    t->key_end = seq_k;
    t->row_begin = 0;
    t->row_end = seq_q;
    return TA_OK;
}

/* ---- Query (row) direction: effective rows are owned; loaded rows may be < 0. */
/** Rows of Q tile qt: effective [row_eff_begin, row_eff_end), loaded
 *  [row_load_begin, row_load_end) (the drawing at the top of this file).
 *  The load bounds may lie outside [0, S_q): zero padding.
 *  @param[in] t   the tiling
 *  @param[in] qt  Q tile, in [0, t->num_q_tiles)
 *  @return the row; the ends are exclusive
 *  @{ */
TA_TILING_FN int32_t ta_tile_row_eff_begin(const ta_tiling *t, int32_t qt) {
    return qt * t->rows_eff;
}
TA_TILING_FN int32_t ta_tile_row_eff_end(const ta_tiling *t, int32_t qt) {
    return ta_tiling_min_i32(qt * t->rows_eff + t->rows_eff, t->seq_q);
}
TA_TILING_FN int32_t ta_tile_row_load_begin(const ta_tiling *t, int32_t qt) {
    return qt * t->rows_eff - t->halo_q_top;
}
/* Exclusive; may exceed S_q by halo_q_bottom (zero padding). */
TA_TILING_FN int32_t ta_tile_row_load_end(const ta_tiling *t, int32_t qt) {
    return ta_tile_row_eff_end(t, qt) + t->halo_q_bottom;
}
/** @} */

/* ---- Key (column) direction. */
/** Columns of K tile kt: effective [col_eff_begin, col_eff_end), loaded
 *  [col_load_begin, col_load_end), halo_k on each side. The load bounds may
 *  lie outside [0, S_k): zero padding.
 *  @param[in] t   the tiling
 *  @param[in] kt  K tile, in [0, t->num_k_tiles)
 *  @return the column; the ends are exclusive
 *  @{ */
TA_TILING_FN int32_t ta_tile_col_eff_begin(const ta_tiling *t, int32_t kt) {
    return kt * t->cols_eff;
}
TA_TILING_FN int32_t ta_tile_col_eff_end(const ta_tiling *t, int32_t kt) {
    return ta_tiling_min_i32(kt * t->cols_eff + t->cols_eff, t->seq_k);
}
TA_TILING_FN int32_t ta_tile_col_load_begin(const ta_tiling *t, int32_t kt) {
    return kt * t->cols_eff - t->halo_k;
}
/* Exclusive; may exceed S_k by halo_k (zero padding). */
TA_TILING_FN int32_t ta_tile_col_load_end(const ta_tiling *t, int32_t kt) {
    return ta_tile_col_eff_end(t, kt) + t->halo_k;
}
/** @} */

/* ---- The mask: one visible key interval per query row. ----
 *
 * Query row r sits at absolute position pos = r + diag_offset (bottom-right
 * alignment, diag_offset = S_k - S_q) and sees the keys j in [lo, hi):
 *
 *     hi = key_len                                   (S_k, or seqlens_k[b])
 *     hi = min(hi, pos + 1)                          causal
 *     hi = min(hi, pos + window_right + 1)           window_right >= 0
 *     lo = max(0, pos - window_left)                 window_left  >= 0
 *
 * clamped so that 0 <= lo <= hi <= key_len (an empty row has lo == hi). Both
 * bounds are non-decreasing in r, so the rows of a tile see one contiguous key
 * range and a key is seen by one contiguous row range: the K tiles a Q tile
 * visits, and the Q tiles a K tile meets, are intervals. Without TA_WINDOW the
 * window bounds are -1 (unbounded) and this is the causal/seqlens mask.
 */

/** Set the sliding window of t (ta_tiling_make leaves both unbounded, -1).
 *  Negative = unbounded; any non-negative int32 is accepted.
 *  @param[in,out] t             the tiling; its window fields are set
 *  @param[in]     window_left   row r sees keys j >= r + diag_offset - window_left;
 *                               < 0: no bound
 *  @param[in]     window_right  and j <= r + diag_offset + window_right; < 0: no bound */
TA_TILING_FN void ta_tiling_set_window(ta_tiling *t, int32_t window_left, int32_t window_right) {
    t->window_left = window_left < 0 ? -1 : window_left;
    t->window_right = window_right < 0 ? -1 : window_right;
}

/** Let the query rows [-q_history, 0) exist (ta_tiling_make leaves none): they
 *  sit at positions diag_offset - q_history .. diag_offset - 1 and are visible
 *  like any row (ta_tiling_visible), so their raw scores enter the conv.
 *  @param[in,out] t          the tiling; its q_history is set
 *  @param[in]     q_history  rows, in [0, halo_q_top] */
TA_TILING_FN void ta_tiling_set_history(ta_tiling *t, int32_t q_history) {
    t->q_history = q_history;
}

/** Move the query rows and cut the output keys (ta_problem.q_offset,
 *  key_begin, key_end; ta_tiling_make leaves 0, [0, S_k)): every row's
 *  position moves by q_offset (diag_offset = S_k - S_q + q_offset), and only
 *  the K tiles of [key_begin, key_end) are visited. The caller has checked
 *  that the range lies on K tile boundaries (key_begin a multiple of cols_eff,
 *  key_end one or S_k): a visited tile then holds no key outside the range.
 *  @param[in,out] t                  the tiling
 *  @param[in]     q_offset           |S_k - S_q + q_offset| <= TA_SEQ_MAX
 *  @param[in]     key_begin, key_end 0 <= key_begin < key_end <= S_k */
TA_TILING_FN void ta_tiling_set_keys(ta_tiling *t, int32_t q_offset, int32_t key_begin,
                                     int32_t key_end) {
    t->diag_offset = t->seq_k - t->seq_q + q_offset;
    t->key_begin = key_begin;
    t->key_end = key_end;
}

/** Cut the output rows (ta_problem.row_begin, row_end; the backward only;
 *  ta_tiling_make leaves [0, S_q)): only the Q tiles of [row_begin, row_end)
 *  are visited, by pass 2 (ta_tile_q_in_range) and pass 1 (ta_tile_k_rows).
 *  The caller has checked that the range lies on Q tile boundaries (row_begin
 *  a multiple of rows_eff, row_end one or S_q).
 *  @param[in,out] t                  the tiling
 *  @param[in]     row_begin, row_end 0 <= row_begin < row_end <= S_q */
TA_TILING_FN void ta_tiling_set_rows(ta_tiling *t, int32_t row_begin, int32_t row_end) {
    t->row_begin = row_begin;
    t->row_end = row_end;
}

/** 1 if Q tile qt lies in the output rows [row_begin, row_end), K tile kt in
 *  the output keys [key_begin, key_end) (both on tile boundaries: a tile is
 *  inside or outside as a whole). A backward writes the gradients of the
 *  tiles inside only.
 *  @param[in] t       the tiling
 *  @param[in] qt, kt  Q tile in [0, num_q_tiles), K tile in [0, num_k_tiles)
 *  @return 1 or 0
 *  @{ */
TA_TILING_FN int ta_tile_q_in_range(const ta_tiling *t, int32_t qt) {
    const int32_t r0 = qt * t->rows_eff;
    return r0 >= t->row_begin && r0 < t->row_end;
}
TA_TILING_FN int ta_tile_k_in_range(const ta_tiling *t, int32_t kt) {
    const int32_t c0 = kt * t->cols_eff;
    return c0 >= t->key_begin && c0 < t->key_end;
}
/** @} */

/** 1 if t has a finite right bound besides key_len (causal or window_right).
 *  @param[in] t  the tiling
 *  @return 1 or 0 */
TA_TILING_FN int ta_tiling_right_bounded(const ta_tiling *t) {
    return t->causal || t->window_right >= 0;
}

/** pos + 1 + (the right reach of the mask): hi of row r before the key_len
 *  cut, in 64 bits (no overflow for any int32 window). Only meaningful when
 *  ta_tiling_right_bounded(t).
 *  @param[in] t  the tiling
 *  @param[in] r  query row, any int32
 *  @return the right bound (exclusive) before the key_len cut; may be <= 0 */
TA_TILING_FN int64_t ta_tiling_row_hi_uncut(const ta_tiling *t, int32_t r) {
    /* causal caps the reach at 0, and window_right >= 0 never goes below it */
    const int64_t reach = t->causal ? 0 : (int64_t)t->window_right;
    return (int64_t)r + t->diag_offset + reach + 1;
}

/** The visible keys [*lo, *hi) of query row r (-q_history <= r < S_q) for key length
 *  key_len (0 <= key_len <= S_k): the one definition of the mask.
 *  @param[in]  t        the tiling
 *  @param[in]  r        query row, in [-q_history, S_q)
 *  @param[in]  key_len  keys of this batch entry, in [0, S_k]
 *  @param[out] lo, hi   the interval: 0 <= *lo <= *hi <= key_len; empty: *lo == *hi */
TA_TILING_FN void ta_tile_row_keys(const ta_tiling *t, int32_t r, int32_t key_len, int32_t *lo,
                                   int32_t *hi) {
    int64_t h = key_len, l = 0;
    if (ta_tiling_right_bounded(t)) {
        const int64_t cut = ta_tiling_row_hi_uncut(t, r);
        if (cut < h) h = cut;
    }
    if (t->window_left >= 0) l = (int64_t)r + t->diag_offset - t->window_left;
    if (h < 0) h = 0;
    if (l < 0) l = 0;
    if (l > h) l = h;
    *lo = (int32_t)l;
    *hi = (int32_t)h;
}

/** 1 if key j is visible from query row r (both absolute; either may lie
 *  outside the sequence, which is never visible; rows [-q_history, 0) are
 *  history rows, inside it): the one masking predicate.
 *  @param[in] t        the tiling
 *  @param[in] r        query row, any int32
 *  @param[in] j        key, any int32
 *  @param[in] key_len  keys of this batch entry, in [0, S_k]
 *  @return 1 or 0 */
TA_TILING_FN int ta_tiling_visible(const ta_tiling *t, int32_t r, int32_t j, int32_t key_len) {
    int32_t lo, hi;
    if (j < 0 || j >= key_len || r < -t->q_history || r >= t->seq_q) return 0;
    ta_tile_row_keys(t, r, key_len, &lo, &hi);
    return j >= lo && j < hi;
}

/** The keys [*lo, *hi) seen by any effective row of Q tile qt: the union of the
 *  rows' intervals, which is contiguous (see above). Empty: *lo == *hi == 0.
 *  @param[in]  t        the tiling
 *  @param[in]  qt       Q tile, in [0, t->num_q_tiles)
 *  @param[in]  key_len  keys of this batch entry, in [0, S_k]
 *  @param[out] lo, hi   the union, within [0, key_len] */
TA_TILING_FN void ta_tile_q_keys(const ta_tiling *t, int32_t qt, int32_t key_len, int32_t *lo,
                                 int32_t *hi) {
    const int32_t row_end = ta_tile_row_eff_end(t, qt);
    int32_t l, h, unused;
    *lo = *hi = 0;
    /* lo is non-decreasing, so the first row's lo starts the union. A first row
     * that sees nothing because its right bound is <= 0 gives lo = 0, and so
     * does the first row that sees a key after it (its position is <= 0). */
    ta_tile_row_keys(t, ta_tile_row_eff_begin(t, qt), key_len, &l, &unused);
    ta_tile_row_keys(t, row_end - 1, key_len, &unused, &h);
    /* the last row's hi is the union's end: if that row is empty because its lo
     * passed key_len, an earlier row already reached key_len (the bounds move by
     * at most one key per row and every interval is at least one key wide) */
    if (l >= h) return;
    *lo = l;
    *hi = h;
}

/** Last key (inclusive) any effective row of Q tile qt may see, given the key
 *  length key_len (S_k, or seqlens_k[b] <= S_k); -1 if none. With the MTA conv,
 *  a masked raw score is a constant 0 and a masked convolved score is -inf, so
 *  columns outside the rows' intervals contribute nothing to the forward nor to
 *  any gradient.
 *  @param[in] t        the tiling
 *  @param[in] qt       Q tile, in [0, t->num_q_tiles)
 *  @param[in] key_len  keys of this batch entry, in [0, S_k]
 *  @return the key, in [-1, key_len) */
TA_TILING_FN int32_t ta_tile_last_visible_col(const ta_tiling *t, int32_t qt, int32_t key_len) {
    int32_t lo, hi;
    ta_tile_q_keys(t, qt, key_len, &lo, &hi);
    return hi - 1;
}

/** K tiles Q tile qt visits: [ta_tile_k_begin, ta_tile_k_end) ascending; the
 *  others hold only masked columns, or keys outside the output range
 *  [t->key_begin, t->key_end), and are skipped. Empty (begin == end == 0)
 *  when every row is masked. ta_tile_q_out_keys: the union of the rows'
 *  visible keys (ta_tile_q_keys) cut to the output range (may be empty).
 *  @param[in] t        the tiling
 *  @param[in] qt       Q tile, in [0, t->num_q_tiles)
 *  @param[in] key_len  keys of this batch entry, in [0, S_k]
 *  @return the first K tile, the end (exclusive); within [0, t->num_k_tiles]
 *  @{ */
TA_TILING_FN void ta_tile_q_out_keys(const ta_tiling *t, int32_t qt, int32_t key_len,
                                     int32_t *lo, int32_t *hi) {
    if (!ta_tile_q_in_range(t, qt)) { /* outside the output rows: nothing */
        *lo = *hi = 0;
        return;
    }
    ta_tile_q_keys(t, qt, key_len, lo, hi);
    *lo = ta_tiling_max_i32(*lo, t->key_begin);
    *hi = ta_tiling_min_i32(*hi, t->key_end);
}
TA_TILING_FN int32_t ta_tile_k_begin(const ta_tiling *t, int32_t qt, int32_t key_len) {
    int32_t lo, hi;
    ta_tile_q_out_keys(t, qt, key_len, &lo, &hi);
    return hi > lo ? lo / t->cols_eff : 0;
}
TA_TILING_FN int32_t ta_tile_k_end(const ta_tiling *t, int32_t qt, int32_t key_len) {
    int32_t lo, hi;
    ta_tile_q_out_keys(t, qt, key_len, &lo, &hi);
    return hi > lo ? (hi - 1) / t->cols_eff + 1 : 0;
}
/** @} */

/** Q tiles that see a key of K tile kt (the transpose, for the dk/dv pass):
 *  [ta_tile_q_begin, ta_tile_q_end) ascending, within the output rows; empty
 *  (begin == end == num_q_tiles) when none does, or when kt lies outside the
 *  output keys.
 *  @param[in]  t                the tiling
 *  @param[in]  kt               K tile, in [0, t->num_k_tiles)
 *  @param[in]  key_len          keys of this batch entry, in [0, S_k]
 *  @param[out] q_begin, q_end   the Q tiles, within [0, t->num_q_tiles] */
TA_TILING_FN void ta_tile_k_rows(const ta_tiling *t, int32_t kt, int32_t key_len, int32_t *q_begin,
                                 int32_t *q_end) {
    const int32_t c0 = ta_tile_col_eff_begin(t, kt);
    const int32_t c1 = ta_tiling_min_i32(ta_tile_col_eff_end(t, kt), key_len); /* keys [c0, c1) */
    int64_t r_min = 0, r_max = (int64_t)t->seq_q - 1; /* rows that see some key of [c0, c1) */
    *q_begin = *q_end = t->num_q_tiles;
    if (c0 >= c1 || !ta_tile_k_in_range(t, kt)) return;
    /* the output rows only (ta_tiling_set_rows) */
    if (t->row_begin > r_min) r_min = t->row_begin;
    if ((int64_t)t->row_end - 1 < r_max) r_max = (int64_t)t->row_end - 1;
    /* hi(r) > c0: r + diag + reach + 1 > c0 (rows before see nothing of the tile) */
    if (ta_tiling_right_bounded(t)) {
        const int64_t need = (int64_t)c0 - (ta_tiling_row_hi_uncut(t, 0) - 1);
        if (need > r_min) r_min = need;
    }
    /* lo(r) < c1: r + diag - window_left < c1 */
    if (t->window_left >= 0) {
        const int64_t last = (int64_t)c1 - 1 + t->window_left - t->diag_offset;
        if (last < r_max) r_max = last;
    }
    if (r_min > r_max) return;
    *q_begin = (int32_t)(r_min / t->rows_eff);
    *q_end = (int32_t)(r_max / t->rows_eff) + 1;
}
/** ta_tile_k_rows, one bound at a time.
 *  @param[in] t        the tiling
 *  @param[in] kt       K tile, in [0, t->num_k_tiles)
 *  @param[in] key_len  keys of this batch entry, in [0, S_k]
 *  @return *q_begin, *q_end of ta_tile_k_rows
 *  @{ */
TA_TILING_FN int32_t ta_tile_q_begin(const ta_tiling *t, int32_t kt, int32_t key_len) {
    int32_t b, e;
    ta_tile_k_rows(t, kt, key_len, &b, &e);
    return b;
}
TA_TILING_FN int32_t ta_tile_q_end(const ta_tiling *t, int32_t kt, int32_t key_len) {
    int32_t b, e;
    ta_tile_k_rows(t, kt, key_len, &b, &e);
    return e;
}
/** @} */

/** Split-K: k tiles [k_begin, k_end) cut into num_splits contiguous, ascending,
 *  possibly empty parts; part `split` is [*begin, *end). Merged in ascending order.
 *  The forward cuts [0, n) with ta_tile_split_keys, the same for every row.
 *  @param[in]  t             the tiling (its num_splits)
 *  @param[in]  split         the part, in [0, t->num_splits)
 *  @param[in]  k_begin, k_end  the K tiles to cut, k_begin <= k_end
 *  @param[out] begin, end    the part's K tiles, within [k_begin, k_end] */
TA_TILING_FN void ta_tile_split_range(const ta_tiling *t, int32_t split, int32_t k_begin,
                                      int32_t k_end, int32_t *begin, int32_t *end) {
    const int64_t n = (int64_t)k_end - k_begin;
    *begin = k_begin + (int32_t)(n * split / t->num_splits);
    *end = k_begin + (int32_t)(n * (split + 1) / t->num_splits);
}

/** The split-K cut of the forward: the K tiles of part `split` for key length
 *  key_len, the part of [0, n) given by ta_tile_split_range, n the K tiles that
 *  hold a key below key_len. It depends on the key length and the K tiling
 *  only, never on the rows, so a backend may tile rows as it likes and every
 *  row still sees the same parts; a Q tile visits the intersection with its own
 *  [k_begin, k_end) (ta_tile_split_visit). With num_splits >= n every non-empty
 *  part is one K tile, whatever num_splits is.
 *  @param[in]  t           the tiling (its num_splits, cols_eff)
 *  @param[in]  key_len     keys of this batch entry, in [0, S_k]
 *  @param[in]  split       the part, in [0, t->num_splits)
 *  @param[out] begin, end  the part's K tiles, within [0, n] */
TA_TILING_FN void ta_tile_split_keys(const ta_tiling *t, int32_t key_len, int32_t split,
                                     int32_t *begin, int32_t *end) {
    const int32_t len = ta_tiling_min_i32(key_len, t->key_end);
    const int32_t n = len > 0 ? (len - 1) / t->cols_eff + 1 : 0;
    const int32_t b = ta_tiling_min_i32(t->key_begin / t->cols_eff, n);
    ta_tile_split_range(t, split, b, n, begin, end);
}

/** The K tiles a Q tile with context K tiles [k_begin, k_end) visits in part
 *  `split`: [*begin, *end) = [k_begin, k_end) cut to the part (empty: *begin ==
 *  *end). With num_splits 1 it is [k_begin, k_end) itself.
 *  @param[in]  t               the tiling
 *  @param[in]  key_len         keys of this batch entry, in [0, S_k]
 *  @param[in]  split           the part, in [0, t->num_splits)
 *  @param[in]  k_begin, k_end  the Q tile's K tiles (ta_tile_ctx)
 *  @param[out] begin, end      the tiles to visit, ascending */
TA_TILING_FN void ta_tile_split_visit(const ta_tiling *t, int32_t key_len, int32_t split,
                                      int32_t k_begin, int32_t k_end, int32_t *begin,
                                      int32_t *end) {
    int32_t b = k_begin, e = k_end;
    if (t->num_splits > 1) {
        ta_tile_split_keys(t, key_len, split, &b, &e);
        b = ta_tiling_max_i32(b, k_begin);
        e = ta_tiling_min_i32(e, k_end);
    }
    *begin = b;
    *end = e > b ? e : b;
}

/** TA_SPLITS_AUTO's target: row blocks (B H ceil(S_q / 64)) times splits. */
#define TA_SPLITS_AUTO_BLOCKS 256
/** TA_SPLITS_AUTO's fewest keys per split. */
#define TA_SPLITS_AUTO_MIN_KEYS 512
/** TA_SPLITS_AUTO's most splits. */
#define TA_SPLITS_AUTO_MAX 64

/** The split count ta_problem.num_splits = TA_SPLITS_AUTO stands for, from the
 *  problem's sizes alone (never the device, so every backend and machine picks
 *  the same count and the same bits): enough splits that the row blocks of 64
 *  rows times the splits reach TA_SPLITS_AUTO_BLOCKS, but no split under
 *  TA_SPLITS_AUTO_MIN_KEYS keys and at most TA_SPLITS_AUTO_MAX splits:
 *
 *      blocks = B H ceil(S_q / 64)
 *      n = min(ceil(TA_SPLITS_AUTO_BLOCKS / blocks), S_k / TA_SPLITS_AUTO_MIN_KEYS,
 *              TA_SPLITS_AUTO_MAX), at least 1
 *
 *  (the plan then clamps n to the key tiles, as any count). Decode (a few rows,
 *  a long cache) gets many splits; a prefill with enough row blocks gets 1.
 *  @param[in] batch, heads_q, seq_q, seq_k  B, H, S_q, S_k, each >= 1
 *  @return the count, in [1, TA_SPLITS_AUTO_MAX] */
TA_TILING_FN int32_t ta_tiling_splits_auto(int32_t batch, int32_t heads_q, int32_t seq_q,
                                           int32_t seq_k) {
    const int64_t blocks = (int64_t)batch * heads_q * (((int64_t)seq_q + 63) / 64);
    int64_t n = (TA_SPLITS_AUTO_BLOCKS + blocks - 1) / blocks;
    if (n > seq_k / TA_SPLITS_AUTO_MIN_KEYS) n = seq_k / TA_SPLITS_AUTO_MIN_KEYS;
    if (n > TA_SPLITS_AUTO_MAX) n = TA_SPLITS_AUTO_MAX;
    return n < 1 ? 1 : (int32_t)n;
}

/* ---- The operation: the stages of the one forward and one backward pipeline. ----
 *
 * Every backend runs one pipeline per pass:
 *
 *   for each (batch, head, Q tile):                        context (ta_tile_context)
 *     load Q rows          -> load transform   (q rows)    stages.load
 *     for K tile in [k_begin, k_end) (per split):          stages.num_splits
 *       load K, V rows     -> load transform   (k rows)    stages.load
 *       S = scale Q K^T    on the loaded region (masked by the row intervals)
 *       C = score transform(S) on the effective region     stages.score
 *       online softmax over C, P V                          (the row intervals)
 *     store o, lse
 *
 * and the backward mirrors it (recompute S, C, P; dC; dS = transform^T(dC)).
 * An operation is a choice of stages, never a new pipeline. Today: the rotary
 * load transform (or none), the MTA conv or the reciprocal band (TA_RBAND) as the
 * score transform, and ta_problem.num_splits
 * key splits (ta_tile_split_visit) merged by the ta_merge arithmetic.
 */
#define TA_LOAD_NONE 0       /**< q, k rows as stored (widened to f32) */
#define TA_LOAD_ROPE 1       /**< q, k rows widened, then rotated (ta_problem.rope) */
#define TA_SCORE_NONE 0      /**< C = S */
#define TA_SCORE_MTA_CONV 1  /**< C = the MTA key-query conv of S (docs/mta.md) */
#define TA_SCORE_RBAND 2     /**< C_ij = fmaf(alpha, S_ji, S_ij) on the reciprocal band
                                  0 <= p_i - j <= W, C = S elsewhere (TA_RBAND) */

/** The stages an operation picks in the one pipeline of each pass (TA_LOAD_*,
 *  TA_SCORE_*); the pipeline is drawn in the comment above this struct. */
typedef struct ta_stages {
    int32_t load;       /**< TA_LOAD_*: transform of q/k rows as they are loaded */
    int32_t score;      /**< TA_SCORE_*: transform of the raw score tile */
    int32_t num_splits; /**< key splits per row (plan->fwd.num_splits; 1 = none) */
} ta_stages;

/* ---- Layout: element strides of every tensor, and the per-tile context. ---- */

/** Resolved element strides of every tensor a pass touches (none zero-as-default:
 *  the core fills contiguous strides in where the caller passed zeros). lse is
 *  always contiguous [B, H, S_q]. */
typedef struct ta_layout {
    /** forward and backward @{ */
    ta_strides q, k, v, o;
    /** @} */
    /** backward only (forward: unused) @{ */
    ta_strides d_o, dq, dk, dv;
    /** @} */
    ta_strides q_hist; /**< forward with q_history > 0: the history rows [B, H, n, D] */
} ta_layout;

/** The contiguous strides of a [batch, heads, seq, dim] tensor.
 *  @param[in] heads, seq, dim  the tensor's extents, >= 1
 *  @return {heads * seq * dim, seq * dim, dim} */
TA_TILING_FN ta_strides ta_strides_contiguous(int32_t heads, int32_t seq, int32_t dim) {
    ta_strides s;
    s.seq = dim;
    s.head = (int64_t)seq * dim;
    s.batch = s.head * heads;
    return s;
}

/** Element offset of row 0 of slice (b, h) of a tensor with strides s.
 *  @param[in] s  the tensor's strides
 *  @param[in] b  batch entry, in [0, B)
 *  @param[in] h  head, in [0, the tensor's heads)
 *  @return b * s->batch + h * s->head */
TA_TILING_FN int64_t ta_strides_slice(const ta_strides *s, int32_t b, int32_t h) {
    return (int64_t)b * s->batch + (int64_t)h * s->head;
}

/** What one (batch, query head, Q tile) step reads from the plan: the key
 *  length, the K tiles to visit, and the element offsets of its slices (row or
 *  key 0; row r of q is at q + r * layout.q.seq). Backends take these from
 *  ta_tile_context and derive none of them. */
typedef struct ta_tile_ctx {
    /** batch entry; head: the query head; head_kv = head / group @{ */
    int32_t batch, head, head_kv;
    /** @} */
    int32_t q_tile;  /**< Q tile of the tiling the context was made for */
    int32_t key_len; /**< seqlens_k[batch], or S_k */
    /** K tiles [k_begin, k_end) hold a visible entry @{ */
    int32_t k_begin, k_end;
    /** @} */
    /** element offsets of the slices of query head `head` @{ */
    int64_t q, o, d_o, dq, lse;
    /** @} */
    /** element offsets of the slices of kv head `head_kv` @{ */
    int64_t k, v, dk, dv;
    /** @} */
    int64_t q_hist; /**< element offset of the history slice of query head `head`
                         (its row 0 is query row -q_history; ta_tile_q_row) */
} ta_tile_ctx;

/** Key length of batch entry b: seqlens_k[b] (HOST memory), or seq_k if NULL.
 *  @param[in] t          the tiling (its seq_k)
 *  @param[in] seqlens_k  [B] host memory, each in [0, S_k] (validated by the API); or NULL
 *  @param[in] b          batch entry, in [0, B)
 *  @return the key length, in [0, S_k] */
TA_TILING_FN int32_t ta_tiling_key_len(const ta_tiling *t, const int32_t *seqlens_k, int32_t b) {
    return seqlens_k ? seqlens_k[b] : t->seq_k;
}

/** Fill c for (batch b, query head h, Q tile qt) of tiling t. heads_q = H,
 *  group = H / H_kv. Offsets of the backward-only tensors are filled too (the
 *  forward's layout carries contiguous strides for them; harmless).
 *  @param[out] c        the context
 *  @param[in]  t        the tiling of this pass
 *  @param[in]  lay      the resolved strides of every tensor
 *  @param[in]  heads_q  H
 *  @param[in]  group    H / H_kv, >= 1
 *  @param[in]  key_len  ta_tiling_key_len(t, seqlens_k, b)
 *  @param[in]  b        batch entry, in [0, B)
 *  @param[in]  h        query head, in [0, H)
 *  @param[in]  qt       Q tile, in [0, t->num_q_tiles) */
TA_TILING_FN void ta_tile_context(ta_tile_ctx *c, const ta_tiling *t, const ta_layout *lay,
                                  int32_t heads_q, int32_t group, int32_t key_len, int32_t b,
                                  int32_t h, int32_t qt) {
    c->batch = b;
    c->head = h;
    c->head_kv = h / group; /* GQA: query head h reads kv head h / group */
    c->q_tile = qt;
    c->key_len = key_len;
    c->k_begin = ta_tile_k_begin(t, qt, key_len);
    c->k_end = ta_tile_k_end(t, qt, key_len);
    c->q = ta_strides_slice(&lay->q, b, h);
    c->o = ta_strides_slice(&lay->o, b, h);
    c->d_o = ta_strides_slice(&lay->d_o, b, h);
    c->dq = ta_strides_slice(&lay->dq, b, h);
    c->lse = ((int64_t)b * heads_q + h) * t->seq_q;
    c->k = ta_strides_slice(&lay->k, b, c->head_kv);
    c->v = ta_strides_slice(&lay->v, b, c->head_kv);
    c->dk = ta_strides_slice(&lay->dk, b, c->head_kv);
    c->dv = ta_strides_slice(&lay->dv, b, c->head_kv);
    c->q_hist = ta_strides_slice(&lay->q_hist, b, h);
}

/** The row of key j in a paged KV pool (ta_problem.kv_page_size > 0): page
 *  pages[j / page_size], slot j % page_size, i.e. pool row
 *  pages[j / page_size] * page_size + j % page_size; the element of (row,
 *  kv head h, feature d) is (row * H_kv + h) * dim + d. Without pages
 *  (pages NULL) key j is row j of its slice.
 *  @param[in] pages      the batch entry's block table row, or NULL
 *  @param[in] page_size  keys per page (>= 1 with pages)
 *  @param[in] j          key, in [0, S_k)
 *  @return the row, in the units of the k/v layout's seq stride */
TA_TILING_FN int64_t ta_tile_kv_row(const int32_t *pages, int32_t page_size, int32_t j) {
    if (!pages) return j;
    return (int64_t)pages[j / page_size] * page_size + j % page_size;
}

/** Where query row r of context c lives: rows [0, S_q) in q (the returned
 *  element offset of q), history rows [-t->q_history, 0) in the history tensor
 *  (*in_hist = 1; an offset of args.q_hist). Other rows are zero padding and
 *  must not be asked for.
 *  @param[in]  t        the tiling (its q_history)
 *  @param[in]  lay      the resolved strides (q, q_hist)
 *  @param[in]  c        the context (its q, q_hist slice offsets)
 *  @param[in]  r        query row, in [-t->q_history, S_q)
 *  @param[out] in_hist  1 if the row is a history row, else 0
 *  @return the element offset of the row's feature 0 */
TA_TILING_FN int64_t ta_tile_q_row(const ta_tiling *t, const ta_layout *lay, const ta_tile_ctx *c,
                                   int32_t r, int *in_hist) {
    *in_hist = r < 0;
    if (r < 0) return c->q_hist + (int64_t)(r + t->q_history) * lay->q_hist.seq;
    return c->q + (int64_t)r * lay->q.seq;
}

#ifdef __cplusplus
}
#endif

#endif /* TILEATTN_TILING_H */
