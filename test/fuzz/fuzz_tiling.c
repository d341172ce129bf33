/*
 * libFuzzer harness: the tiling descriptor's invariants (docs/design.md 5,
 * docs/tiling.md) for one geometry the bytes choose: lengths up to TA_SEQ_MAX,
 * any tile size, conv, pass, causal, window and key length, each compared with
 * this file's own statement of the rules (int64 arithmetic, never the header's):
 *   A. ta_tiling_make accepts exactly the valid geometries;
 *   B. effective rows (C. columns) partition [0, S) ascending, contiguous,
 *      non-empty; loaded tiles cover the halos;
 *   D. every row's key interval is the spec's, and the intervals are monotone;
 *   E. tile pair (qt, kt) holds a visible (row, key) pair iff k_begin(qt) <= kt <
 *      k_end(qt) iff q_begin(kt) <= qt < q_end(kt) (brute force over the rows);
 *   F. split-K parts partition [k_begin, k_end).
 * Long sequences are checked on a window of tiles around the start, the diagonal
 * and the end (the brute force is O(rows x K tiles)). UBSan reports any int32
 * overflow in the header's arithmetic.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

typedef struct geom {
    int32_t seq_q, seq_k, block_q, block_k, conv_q, conv_k, causal, pass, key_len;
    int32_t window_left, window_right, num_splits;
} geom;

/* The spec's interval of row r (docs/api.md, "The mask"), in int64. */
static void spec_row_keys(const geom *g, int64_t r, int64_t *lo, int64_t *hi) {
    const int64_t pos = r + g->seq_k - g->seq_q;
    int64_t h = g->key_len, l = 0;
    if (g->causal && pos + 1 < h) h = pos + 1;
    if (g->window_right >= 0 && pos + g->window_right + 1 < h) h = pos + g->window_right + 1;
    if (g->window_left >= 0 && pos - g->window_left > l) l = pos - g->window_left;
    if (h < 0) h = 0;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

static int spec_valid(const geom *g, int64_t *top, int64_t *bottom, int64_t *side) {
    const int64_t pq = g->conv_q > 0 ? g->conv_q - 1 : 0,
                  pk = g->conv_k > 0 ? (g->conv_k - 1) / 2 : 0;
    *top = pq;
    *bottom = g->pass == TA_TILING_BWD ? pq : 0;
    *side = g->pass == TA_TILING_BWD ? 2 * pk : pk;
    return g->block_q >= TA_BLOCK_MIN && g->block_q <= TA_BLOCK_MAX && g->block_k >= TA_BLOCK_MIN &&
           g->block_k <= TA_BLOCK_MAX && g->block_q - *top - *bottom >= 1 &&
           g->block_k - 2 * *side >= 1 && g->num_splits >= 1;
}

/* The tiles of [0, n) to check, from t on: all when few, else three windows of w
 * tiles (the start, the middle, the end). Returns the first checked tile >= t. */
static int64_t next_checked(int64_t t, int64_t n, int64_t w) {
    const int64_t mid = n / 2 - w / 2;
    if (n <= 3 * w || t < w || t >= n - w || (t >= mid && t < mid + w)) return t;
    return t < mid ? mid : n - w;
}

/* One direction's tiles (rows or columns): n tiles of eff effective indices
 * partition [0, len); tile i loads [begin - halo_lo, end + halo_hi). */
typedef int32_t (*tile_fn)(const ta_tiling *, int32_t);
static void check_axis(const ta_tiling *t, const char *what, int64_t len, int64_t eff,
                       int64_t halo_lo, int64_t halo_hi, tile_fn eff_begin, tile_fn eff_end,
                       tile_fn load_begin, tile_fn load_end) {
    const int64_t n = (len + eff - 1) / eff;
    int64_t i;
    for (i = next_checked(0, n, 64); i < n; i = next_checked(i + 1, n, 64)) {
        const int64_t b = i * eff, e = b + eff < len ? b + eff : len;
        FZ_CHECK(eff_begin(t, (int32_t)i) == b && eff_end(t, (int32_t)i) == e && b < e,
                 "%s tile %lld: [%d, %d), spec [%lld, %lld)", what, (long long)i,
                 eff_begin(t, (int32_t)i), eff_end(t, (int32_t)i), (long long)b, (long long)e);
        FZ_CHECK(load_begin(t, (int32_t)i) == b - halo_lo && load_end(t, (int32_t)i) == e + halo_hi,
                 "%s tile %lld loads", what, (long long)i);
    }
}

static void check_rows_cols(const ta_tiling *t, const geom *g, int64_t top, int64_t bottom,
                            int64_t side) {
    const int64_t rows_eff = g->block_q - top - bottom, cols_eff = g->block_k - 2 * side;
    const int64_t nq = (g->seq_q + rows_eff - 1) / rows_eff,
                  nk = (g->seq_k + cols_eff - 1) / cols_eff;
    FZ_CHECK(t->rows_eff == rows_eff && t->cols_eff == cols_eff, "effective sizes");
    FZ_CHECK(t->num_q_tiles == nq && t->num_k_tiles == nk, "tile counts %d %d, spec %lld %lld",
             t->num_q_tiles, t->num_k_tiles, (long long)nq, (long long)nk);
    check_axis(t, "row", g->seq_q, rows_eff, top, bottom, ta_tile_row_eff_begin,
               ta_tile_row_eff_end, ta_tile_row_load_begin, ta_tile_row_load_end);
    check_axis(t, "column", g->seq_k, cols_eff, side, side, ta_tile_col_eff_begin,
               ta_tile_col_eff_end, ta_tile_col_load_begin, ta_tile_col_load_end);
}

/* D and E on the checked Q tiles: rows' intervals, then the tile pairs. */
static void check_mask(const ta_tiling *t, const geom *g) {
    const int64_t nq = t->num_q_tiles, nk = t->num_k_tiles, rows_eff = t->rows_eff;
    const int64_t kcheck = nk <= 512 ? nk : 0; /* the transposes: few K tiles only */
    int64_t qt, kt;
    for (qt = next_checked(0, nq, 8); qt < nq; qt = next_checked(qt + 1, nq, 8)) {
        const int64_t r0 = qt * rows_eff, r1 = r0 + rows_eff < g->seq_q ? r0 + rows_eff : g->seq_q;
        int64_t r, u_lo = INT64_MAX, u_hi = -1, prev_lo = 0, prev_hi = 0;
        int32_t lo32, hi32;
        for (r = r0; r < r1; ++r) {
            int64_t lo, hi;
            spec_row_keys(g, r, &lo, &hi);
            ta_tile_row_keys(t, (int32_t)r, g->key_len, &lo32, &hi32);
            FZ_CHECK(lo32 == lo && hi32 == hi, "row %lld keys [%d, %d), spec [%lld, %lld)",
                     (long long)r, lo32, hi32, (long long)lo, (long long)hi);
            FZ_CHECK(r == r0 || (lo >= prev_lo && hi >= prev_hi),
                     "row intervals not monotone at %lld", (long long)r);
            prev_lo = lo;
            prev_hi = hi;
            if (lo < hi) {
                if (lo < u_lo) u_lo = lo;
                if (hi > u_hi) u_hi = hi;
            }
        }
        {
            const int32_t kb = ta_tile_k_begin(t, (int32_t)qt, g->key_len);
            const int32_t ke = ta_tile_k_end(t, (int32_t)qt, g->key_len);
            if (u_hi < 0) {
                FZ_CHECK(kb == 0 && ke == 0, "fully masked Q tile %lld visits [%d, %d)",
                         (long long)qt, kb, ke);
            } else {
                FZ_CHECK(kb == u_lo / t->cols_eff && ke == (u_hi - 1) / t->cols_eff + 1,
                         "Q tile %lld visits [%d, %d), spec keys [%lld, %lld)", (long long)qt, kb,
                         ke, (long long)u_lo, (long long)u_hi);
            }
            /* the transpose: q_begin(kt) <= qt < q_end(kt) iff kt is visited */
            for (kt = 0; kt < kcheck; ++kt) {
                const int visited = kt >= kb && kt < ke;
                int32_t qb, qe;
                ta_tile_k_rows(t, (int32_t)kt, g->key_len, &qb, &qe);
                FZ_CHECK(visited == (qt >= qb && qt < qe),
                         "pair (%lld, %lld): visited %d, k_rows [%d, %d)", (long long)qt,
                         (long long)kt, visited, qb, qe);
            }
            /* F: split parts partition [kb, ke) */
            if (t->num_splits > 1) {
                int32_t s, b, e, at = kb;
                for (s = 0; s < t->num_splits; ++s) {
                    ta_tile_split_range(t, s, kb, ke, &b, &e);
                    FZ_CHECK(b == at && e >= b, "split %d [%d, %d) after %d", s, b, e, at);
                    at = e;
                }
                FZ_CHECK(at == ke, "splits end at %d, not %d", at, ke);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    geom g;
    ta_tiling t, before;
    int64_t top, bottom, side;
    int st;
    const int big = fz_range(&f, 0, 3) == 0;
    g.seq_q = big ? fz_range(&f, 1, TA_SEQ_MAX) : fz_range(&f, 1, 700);
    g.seq_k = big ? fz_range(&f, 1, TA_SEQ_MAX) : fz_range(&f, 1, 700);
    if (fz_range(&f, 0, 7) == 0) g.seq_q = g.seq_k = TA_SEQ_MAX - fz_range(&f, 0, 2);
    g.block_q = fz_range(&f, 0, 7) == 0 ? fz_size(&f, 0, 300) : fz_range(&f, 8, 256);
    g.block_k = fz_range(&f, 0, 7) == 0 ? fz_size(&f, 0, 300) : fz_range(&f, 8, 256);
    g.conv_q = fz_range(&f, 0, 1) ? fz_range(&f, 1, TA_CONV_Q_MAX) : 0;
    g.conv_k = g.conv_q ? 2 * fz_range(&f, 0, TA_CONV_K_MAX / 2) + 1 : 0;
    g.causal = fz_range(&f, 0, 1);
    g.pass = fz_range(&f, 0, 1) ? TA_TILING_BWD : TA_TILING_FWD;
    g.num_splits = fz_range(&f, 0, 7) == 0 ? fz_range(&f, -1, 9) : 1;
    g.window_left = fz_range(&f, 0, 1) ? fz_size(&f, -1, 64) : -1;
    g.window_right = fz_range(&f, 0, 1) ? fz_size(&f, -1, 64) : -1;
    if (g.window_left < 0) g.window_left = -1;
    if (g.window_right < 0) g.window_right = -1;
    g.key_len = fz_range(&f, 0, 1) ? g.seq_k : fz_range(&f, 0, g.seq_k);

    memset(&t, 0x5A, sizeof t);
    before = t;
    st = ta_tiling_make(&t, g.seq_q, g.seq_k, g.block_q, g.block_k, g.conv_q, g.conv_k, g.causal,
                        g.pass, g.num_splits);
    if (!spec_valid(&g, &top, &bottom, &side)) {
        FZ_CHECK(st != TA_OK, "accepted an invalid geometry (blocks %d x %d, conv %d x %d)",
                 g.block_q, g.block_k, g.conv_q, g.conv_k);
        FZ_CHECK(memcmp(&t, &before, sizeof t) == 0, "a refused make wrote the descriptor");
        return 0;
    }
    FZ_CHECK(st == TA_OK, "refused a valid geometry: %d", st);
    ta_tiling_set_window(&t, g.window_left, g.window_right);
    check_rows_cols(&t, &g, top, bottom, side);
    check_mask(&t, &g);
    return 0;
}
