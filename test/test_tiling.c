/*
 * Invariants of the tiling descriptor (include/tileattn_tiling.h), checked
 * exhaustively over the supported domain (docs/design.md section 5, docs/tiling.md).
 *
 *   A. make      ta_tiling_make accepts exactly the valid geometries, with the
 *                documented status otherwise, and writes nothing when it refuses.
 *   B. rows      every tile size 8..256 (all 249), conv and pass for every S_q in
 *                1..300 (plus sampled sizes up to 2^20, windowed), and a subset of
 *                12 tile sizes for every S_q in 1..1100 (plus 64 sampled sizes):
 *                effective rows partition [0, S_q) once, ascending and contiguous;
 *                each loaded Q tile covers the rows its effective rows need (fwd
 *                r-(c_q-1)..r, bwd r-(c_q-1)..r+(c_q-1)) within block_q rows; every
 *                index equals its value computed in int64.
 *   C. columns   the same for keys (fwd j-P..j+P, bwd j-2P..j+2P, P = (c_k-1)/2).
 *   D. cross     every (block_q, block_k, c_q, c_k, pass, causal) at once for a few
 *                (S_q, S_k), tiles from the subset: each direction depends on its
 *                own parameters only.
 *   E. skip      tile pair (qt, kt) holds a visible (effective row, effective key)
 *                pair iff k_begin(qt) <= kt < k_end(qt) iff q_begin(kt) <= qt < q_end(kt);
 *                ta_tile_row_keys is the spec's interval of every row, ta_tile_q_keys
 *                the union over a Q tile's rows; by brute force over every S_q, S_k <= 256
 *                (literally, pair by pair, and for every key length, up to 32), sampled
 *                pairs up to 2^20, and every pair of the 249 tile sizes on a few size
 *                pairs. E5-E7 do the same with sliding windows (left and right bounds
 *                from -1, 0, 1, 2, small, around S, beyond S, INT32_MAX).
 *   F. split     split-K parts partition [k_begin, k_end) contiguously, ascending.
 *   G. defaults  ta_tiling_default_blocks gives a valid geometry for every conv.
 *   H. edges     windowed B, C, E checks at S = TA_SEQ_MAX and neighbours (E also
 *                with sliding windows).
 *   I. context   ta_tile_context: slice offsets from random layouts, kv head, key
 *                length and K tile range for random (batch, head, Q tile).
 *
 * The expected values come from the test's own statement of the rules (the
 * spec_* functions, written from docs/design.md sections 2 and 5), never from the
 * header's arithmetic. Usage: test_tiling [--quick]   (seconds; sanitizer builds)
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

#ifdef _OPENMP
#include <omp.h>
#define TA_OMP(x) _Pragma(#x)
#else
#define TA_OMP(x)
#endif

#if defined(__GNUC__)
#define TA_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TA_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Checks: named, counted per thread, merged; the first failures are printed. */

enum {
    CK_MAKE_STATUS,  /* ta_tiling_make's status for valid and invalid geometries */
    CK_MAKE_NOWRITE, /* a refused make leaves the struct untouched */
    CK_FIELDS,       /* struct fields equal the spec (halos, effective sizes, counts) */
    CK_INDEX_I64,    /* each tile index equals its int64 value (no overflow) */
    CK_PARTITION,    /* effective ranges partition [0, S) once, ascending, contiguous */
    CK_HALO_ROWS,    /* loaded rows cover r-(c_q-1)..r (+ (c_q-1) below in bwd) */
    CK_HALO_COLS,    /* loaded columns cover j-P..j+P (bwd j-2P..j+2P) */
    CK_LOAD_EXTENT,  /* loaded extent <= block size */
    CK_CROSS,        /* a direction's geometry ignores the other direction's parameters */
    CK_VISIBLE,      /* ta_tiling_visible equals the spec mask */
    CK_ROW_KEYS,     /* ta_tile_row_keys is the spec's visible interval of the row */
    CK_Q_KEYS,       /* ta_tile_q_keys is the union of the tile's row intervals */
    CK_LAST_VISIBLE, /* ta_tile_last_visible_col is the last key any effective row sees */
    CK_K_RANGE,      /* k_begin(qt) <= kt < k_end(qt) iff the pair holds a visible (row, key) */
    CK_Q_RANGE,      /* q_begin(kt) <= qt < q_end(kt) iff the pair holds a visible (row, key) */
    CK_TRANSPOSE,    /* kt in [k_begin(qt), k_end(qt)) iff qt in [q_begin(kt), q_end(kt)) */
    CK_SPLIT,        /* split ranges partition [k_begin, k_end) */
    CK_DEFAULTS,     /* default blocks: valid for both passes, smallest by the rule */
    CK_CONTEXT,      /* ta_tile_context: offsets, heads, key length, K tile range */
    CK_COUNT
};
static const char *const k_check_names[CK_COUNT] = {
    "make-status", "make-nowrite", "fields",       "index-int64", "partition",
    "halo-rows",   "halo-cols",    "load-extent",  "cross",       "visible",
    "row-keys",    "q-keys",       "last-visible", "k-range",     "q-range",
    "transpose",   "split",        "defaults",     "context"};

typedef struct tally {
    uint64_t evals[CK_COUNT];
    uint64_t fails[CK_COUNT];
} tally;

static tally g_tally;       /* merged under omp critical(ta_tally) */
static int g_printed_total; /* under omp critical(ta_report) */
static int g_printed[CK_COUNT];
#define MAX_PRINT_PER_CHECK 4
#define MAX_PRINT_TOTAL     40

static void tally_merge(const tally *tl) {
    TA_OMP(omp critical(ta_tally)) {
        int c;
        for (c = 0; c < CK_COUNT; ++c) {
            g_tally.evals[c] += tl->evals[c];
            g_tally.fails[c] += tl->fails[c];
        }
    }
}

static void report(tally *tl, int check, int line, const char *fmt, ...) TA_PRINTF(4, 5);
static void report(tally *tl, int check, int line, const char *fmt, ...) {
    tl->fails[check]++;
    TA_OMP(omp critical(ta_report)) {
        if (g_printed[check] < MAX_PRINT_PER_CHECK && g_printed_total < MAX_PRINT_TOTAL) {
            va_list ap;
            g_printed[check]++;
            g_printed_total++;
            fprintf(stderr, "test_tiling.c:%d: [%s] ", line, k_check_names[check]);
            va_start(ap, fmt);
            vfprintf(stderr, fmt, ap);
            va_end(ap);
            fputc('\n', stderr);
        }
    }
}

#define CHECK(tl, ck, cond, ...)                                                                   \
    do {                                                                                           \
        (tl)->evals[ck]++;                                                                         \
        if (!(cond)) report((tl), (ck), __LINE__, __VA_ARGS__);                                    \
    } while (0)

/* ------------------------------------------------------------------------ */
/* The supported domain and the spec (docs/design.md 2 and 5), independent of the header. */

/* Tile sizes: every integer in [8, 256] (docs/api.md), 249 values, not only powers of
 * two. The densest checks (B/C to S = 1100, D, E2) run on a representative subset:
 * the powers of two, their neighbours, and widths a conv makes effective (54 = 64 - 2*5
 * is the identity-MTA's SDPA block_k for a 6 x 11 conv), and the two ends. */
#define SPEC_BLOCK_MIN 8
#define SPEC_BLOCK_MAX 256
#define N_BLOCKS_ALL   (SPEC_BLOCK_MAX - SPEC_BLOCK_MIN + 1)
static const int32_t k_blocks[] = {8, 9, 16, 32, 54, 63, 64, 65, 100, 128, 255, 256};
#define N_BLOCKS 12
#define N_CONV_Q 17 /* c_q: 0 (no conv), 1..16 */
#define N_CONV_K 17 /* c_k: 0 (no conv), 1, 3, ..., 31 */
static int32_t conv_q_at(int i) { return i; }
static int32_t conv_k_at(int i) { return i == 0 ? 0 : 2 * i - 1; }

static int spec_is_block(int64_t b) { return b >= SPEC_BLOCK_MIN && b <= SPEC_BLOCK_MAX; }
static int in_subset(int32_t b) {
    int i;
    for (i = 0; i < N_BLOCKS; ++i)
        if (b == k_blocks[i]) return 1;
    return 0;
}
/* An effective row r needs rows [r - rows_before, r + rows_after]: the conv looks
 * back c_q-1 rows; the backward's transposed conv looks the same distance ahead. */
static int32_t spec_rows_before(int32_t cq) { return cq > 0 ? cq - 1 : 0; }
static int32_t spec_rows_after(int32_t cq, int32_t pass) {
    return pass == TA_TILING_BWD ? spec_rows_before(cq) : 0;
}
/* An effective column j needs columns [j - side, j + side]: P = (c_k-1)/2 in the
 * forward, 2P in the backward. */
static int32_t spec_cols_side(int32_t ck, int32_t pass) {
    const int32_t p = ck > 0 ? (ck - 1) / 2 : 0;
    return pass == TA_TILING_BWD ? 2 * p : p;
}
static int64_t spec_rows_eff(int64_t bq, int32_t cq, int32_t pass) {
    return bq - spec_rows_before(cq) - spec_rows_after(cq, pass);
}
static int64_t spec_cols_eff(int64_t bk, int32_t ck, int32_t pass) {
    return bk - 2 * (int64_t)spec_cols_side(ck, pass);
}
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* wl, wr: the sliding window (-1, -1: none; make() leaves ta_tiling_make's
 * default then, and calls ta_tiling_set_window for anything else). */
typedef struct geom {
    int32_t sq, sk, bq, bk, cq, ck, causal, pass, splits, wl, wr;
} geom;
#define NO_WINDOW -1, -1

static const char *pass_name(int32_t pass) { return pass == TA_TILING_BWD ? "bwd" : "fwd"; }

/* "S_q=.. S_k=.. B_q=.. B_k=.. conv=cqxck bwd causal" for failure messages */
static const char *geom_str(const geom *g, char *buf, size_t n) {
    snprintf(buf, n, "S_q=%d S_k=%d B_q=%d B_k=%d conv=%dx%d %s%s splits=%d window=%d,%d",
             (int)g->sq, (int)g->sk, (int)g->bq, (int)g->bk, (int)g->cq, (int)g->ck,
             pass_name(g->pass), g->causal ? " causal" : "", (int)g->splits, (int)g->wl,
             (int)g->wr);
    return buf;
}
#define GSTR(g) geom_str((g), gbuf, sizeof gbuf)

/* Expected status of ta_tiling_make when one thing at a time is wrong. */
static int spec_make_status(const geom *g) {
    if (g->sq < 1 || g->sk < 1) return TA_ERR_BAD_SHAPE;
    if (g->sq > TA_SEQ_MAX || g->sk > TA_SEQ_MAX) return TA_ERR_OVERFLOW;
    if (!spec_is_block(g->bq) || !spec_is_block(g->bk)) return TA_ERR_UNSUPPORTED;
    if (g->splits < 1) return TA_ERR_BAD_ARG;
    if (spec_rows_eff(g->bq, g->cq, g->pass) < 1 || spec_cols_eff(g->bk, g->ck, g->pass) < 1)
        return TA_ERR_UNSUPPORTED;
    return TA_OK;
}

static int make(const geom *g, ta_tiling *t) {
    const int st =
        ta_tiling_make(t, g->sq, g->sk, g->bq, g->bk, g->cq, g->ck, g->causal, g->pass, g->splits);
    if (st == TA_OK && (g->wl != -1 || g->wr != -1)) ta_tiling_set_window(t, g->wl, g->wr);
    return st;
}

/* The window bounds the mask uses: a negative bound is no bound (-1). */
static int64_t spec_wl(const geom *g) { return g->wl < 0 ? -1 : g->wl; }
static int64_t spec_wr(const geom *g) { return g->wr < 0 ? -1 : g->wr; }

/* The mask (docs/design.md 2, with sliding windows): query row r sits at absolute
 * position pos = r + S_k - S_q and sees key j iff 0 <= j < key_len (seqlens_k[b] <= S_k),
 * and (causal) j <= pos, and (window_left >= 0) j >= pos - window_left, and
 * (window_right >= 0) j <= pos + window_right. Rows outside [0, S_q) see nothing.
 * window_left = window_right = -1 is the causal/seqlens mask. In int64: no overflow. */
static int spec_mask(int64_t sq, int64_t sk, int causal, int64_t window_left, int64_t window_right,
                     int64_t key_len, int64_t r, int64_t j) {
    const int64_t pos = r + sk - sq;
    if (r < 0 || r >= sq || j < 0 || j >= key_len || j >= sk) return 0;
    if (causal && j > pos) return 0;
    if (window_left >= 0 && j < pos - window_left) return 0;
    if (window_right >= 0 && j > pos + window_right) return 0;
    return 1;
}
static int spec_visible(const geom *g, int64_t r, int64_t j, int64_t key_len) {
    return spec_mask(g->sq, g->sk, g->causal, spec_wl(g), spec_wr(g), key_len, r, j);
}
/* The keys row r sees form one interval [lo, hi): lo the first visible key, hi the
 * last + 1, read off the four conditions of spec_mask (checked against spec_mask
 * point by point in E0, E1 and E5). Returns 0 (and lo = hi = 0) for a row that sees
 * no key. */
static int spec_row_keys(const geom *g, int64_t r, int64_t key_len, int64_t *lo, int64_t *hi) {
    const int64_t pos = r + (int64_t)g->sk - g->sq;
    int64_t l = 0, h = min64(key_len, g->sk);
    *lo = *hi = 0;
    if (r < 0 || r >= g->sq) return 0;
    if (g->causal) h = min64(h, pos + 1);                    /* j <= pos */
    if (spec_wr(g) >= 0) h = min64(h, pos + spec_wr(g) + 1); /* j <= pos + window_right */
    if (spec_wl(g) >= 0) l = max64(l, pos - spec_wl(g));     /* j >= pos - window_left */
    if (l >= h) return 0;
    *lo = l;
    *hi = h;
    return 1;
}

/* Window bounds the window checks combine, for sizes S_q, S_k: unbounded (-1), 0, 1, 2,
 * small (3..7), around S (S_q - 1, S_k - 1, S_k, |S_k - S_q|), beyond S (max + 1, about
 * twice), INT32_MAX - 1 and INT32_MAX (pos + window must not overflow). */
#define N_WIN 13
static int32_t window_at(int i, int32_t sq, int32_t sk) {
    const int64_t s = max64(sq, sk);
    switch (i) {
    case 0: return -1;
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3 + (int32_t)(((int64_t)sq + 2 * (int64_t)sk) % 5);
    case 5: return sq - 1;
    case 6: return sk - 1;
    case 7: return sk;
    case 8: return (int32_t)(sk > sq ? (int64_t)sk - sq : (int64_t)sq - sk);
    case 9: return (int32_t)(s + 1);
    case 10: return (int32_t)min64(2 * s + 3, INT32_MAX - 2);
    case 11: return INT32_MAX - 1;
    default: return INT32_MAX;
    }
}

/* Valid (block, conv) per pass, per direction: g_*_cfg over every block 8..256,
 * g_*_dense over the k_blocks subset. */
typedef struct axis_cfg {
    int32_t block, conv;
} axis_cfg;
#define MAX_CFG (N_BLOCKS_ALL * N_CONV_Q)
static axis_cfg g_row_cfg[2][MAX_CFG], g_col_cfg[2][MAX_CFG];
static int g_n_row[2], g_n_col[2];
static axis_cfg g_row_dense[2][N_BLOCKS * N_CONV_Q], g_col_dense[2][N_BLOCKS * N_CONV_K];
static int g_n_row_dense[2], g_n_col_dense[2];
/* The configurations of g_*_cfg with at most SMALL_EFF effective rows (columns): many
 * tiles at small S, for the window checks. */
#define SMALL_EFF 16
static axis_cfg g_row_small[2][MAX_CFG], g_col_small[2][MAX_CFG];
static int g_n_row_small[2], g_n_col_small[2];

static void add_cfgs(int32_t pass, int32_t block, axis_cfg *rows, int *n_rows, axis_cfg *cols,
                     int *n_cols) {
    int c;
    for (c = 0; c < N_CONV_Q; ++c)
        if (spec_rows_eff(block, conv_q_at(c), pass) >= 1)
            rows[(*n_rows)++] = (axis_cfg){block, conv_q_at(c)};
    for (c = 0; c < N_CONV_K; ++c)
        if (spec_cols_eff(block, conv_k_at(c), pass) >= 1)
            cols[(*n_cols)++] = (axis_cfg){block, conv_k_at(c)};
}

static void build_cfgs(void) {
    int32_t pass, b;
    for (pass = 0; pass < 2; ++pass) {
        g_n_row[pass] = g_n_col[pass] = g_n_row_dense[pass] = g_n_col_dense[pass] = 0;
        for (b = SPEC_BLOCK_MIN; b <= SPEC_BLOCK_MAX; ++b)
            add_cfgs(pass, b, g_row_cfg[pass], &g_n_row[pass], g_col_cfg[pass], &g_n_col[pass]);
        for (b = 0; b < N_BLOCKS; ++b)
            add_cfgs(pass, k_blocks[b], g_row_dense[pass], &g_n_row_dense[pass], g_col_dense[pass],
                     &g_n_col_dense[pass]);
        g_n_row_small[pass] = g_n_col_small[pass] = 0;
        for (b = 0; b < g_n_row[pass]; ++b)
            if (spec_rows_eff(g_row_cfg[pass][b].block, g_row_cfg[pass][b].conv, pass) <= SMALL_EFF)
                g_row_small[pass][g_n_row_small[pass]++] = g_row_cfg[pass][b];
        for (b = 0; b < g_n_col[pass]; ++b)
            if (spec_cols_eff(g_col_cfg[pass][b].block, g_col_cfg[pass][b].conv, pass) <= SMALL_EFF)
                g_col_small[pass][g_n_col_small[pass]++] = g_col_cfg[pass][b];
    }
}

/* ------------------------------------------------------------------------ */
/* One direction (rows or columns) of a tiling, seen through the header's accessors. */

typedef int32_t (*tile_fn)(const ta_tiling *, int32_t);
typedef struct axis {
    const char *name;                       /* "row" or "col" */
    int halo_check;                         /* CK_HALO_ROWS or CK_HALO_COLS */
    int64_t seq, block, eff, before, after; /* from the spec */
    int64_t tiles;                          /* ceil(seq / eff) */
    int32_t tiles_desc;                     /* the descriptor's count */
    tile_fn eff_begin, eff_end, load_begin, load_end;
} axis;

static void axis_rows(axis *ax, const ta_tiling *t, const geom *g) {
    ax->name = "row";
    ax->halo_check = CK_HALO_ROWS;
    ax->seq = g->sq;
    ax->block = g->bq;
    ax->before = spec_rows_before(g->cq);
    ax->after = spec_rows_after(g->cq, g->pass);
    ax->eff = spec_rows_eff(g->bq, g->cq, g->pass);
    ax->tiles = ceil_div(ax->seq, ax->eff);
    ax->tiles_desc = t->num_q_tiles;
    ax->eff_begin = ta_tile_row_eff_begin;
    ax->eff_end = ta_tile_row_eff_end;
    ax->load_begin = ta_tile_row_load_begin;
    ax->load_end = ta_tile_row_load_end;
}

static void axis_cols(axis *ax, const ta_tiling *t, const geom *g) {
    ax->name = "col";
    ax->halo_check = CK_HALO_COLS;
    ax->seq = g->sk;
    ax->block = g->bk;
    ax->before = ax->after = spec_cols_side(g->ck, g->pass);
    ax->eff = spec_cols_eff(g->bk, g->ck, g->pass);
    ax->tiles = ceil_div(ax->seq, ax->eff);
    ax->tiles_desc = t->num_k_tiles;
    ax->eff_begin = ta_tile_col_eff_begin;
    ax->eff_end = ta_tile_col_eff_end;
    ax->load_begin = ta_tile_col_load_begin;
    ax->load_end = ta_tile_col_load_end;
}

/* Every struct field against the spec. */
static void check_fields(tally *tl, const ta_tiling *t, const geom *g) {
    char gbuf[160];
    const int32_t top = spec_rows_before(g->cq), bottom = spec_rows_after(g->cq, g->pass);
    const int32_t side = spec_cols_side(g->ck, g->pass);
    const int64_t re = spec_rows_eff(g->bq, g->cq, g->pass),
                  ce = spec_cols_eff(g->bk, g->ck, g->pass);
    CHECK(tl, CK_FIELDS,
          t->seq_q == g->sq && t->seq_k == g->sk && t->block_q == g->bq && t->block_k == g->bk,
          "%s: sizes/blocks copied wrong", GSTR(g));
    CHECK(tl, CK_FIELDS, t->halo_q_top == top && t->halo_q_bottom == bottom && t->halo_k == side,
          "%s: halos top/bottom/side = %d/%d/%d, spec %d/%d/%d", GSTR(g), (int)t->halo_q_top,
          (int)t->halo_q_bottom, (int)t->halo_k, (int)top, (int)bottom, (int)side);
    CHECK(tl, CK_FIELDS, t->rows_eff == re && t->cols_eff == ce,
          "%s: rows_eff/cols_eff = %d/%d, spec %lld/%lld", GSTR(g), (int)t->rows_eff,
          (int)t->cols_eff, (long long)re, (long long)ce);
    CHECK(tl, CK_FIELDS,
          t->num_q_tiles == ceil_div(g->sq, re) && t->num_k_tiles == ceil_div(g->sk, ce),
          "%s: tiles %d x %d, spec %lld x %lld", GSTR(g), (int)t->num_q_tiles, (int)t->num_k_tiles,
          (long long)ceil_div(g->sq, re), (long long)ceil_div(g->sk, ce));
    CHECK(tl, CK_FIELDS,
          t->causal == (g->causal ? 1 : 0) && t->diag_offset == (int64_t)g->sk - g->sq &&
              t->num_splits == g->splits && t->pass == g->pass,
          "%s: causal/diag_offset/num_splits/pass = %d/%d/%d/%d", GSTR(g), (int)t->causal,
          (int)t->diag_offset, (int)t->num_splits, (int)t->pass);
    CHECK(tl, CK_FIELDS, t->window_left == spec_wl(g) && t->window_right == spec_wr(g),
          "%s: window_left/window_right = %d/%d, spec %lld/%lld", GSTR(g), (int)t->window_left,
          (int)t->window_right, (long long)spec_wl(g), (long long)spec_wr(g));
}

/* One tile: its int64 indices, the halo its effective indices need, its extent.
 * per_index: check every effective index; else the two ends of the effective
 * range, which is equivalent since index i needs the interval [i-before, i+after]. */
static void check_tile(tally *tl, const ta_tiling *t, const axis *ax, const geom *g, int32_t i,
                       int per_index) {
    char gbuf[160];
    const int32_t eb = ax->eff_begin(t, i), ee = ax->eff_end(t, i);
    const int32_t lb = ax->load_begin(t, i), le = ax->load_end(t, i);
    const int64_t eb64 = (int64_t)i * ax->eff, ee64 = min64(eb64 + ax->eff, ax->seq);
    int64_t x, step;
    CHECK(tl, CK_INDEX_I64,
          eb == eb64 && ee == ee64 && lb == eb64 - ax->before && le == ee64 + ax->after,
          "%s: %s tile %d: eff [%d,%d) load [%d,%d), int64 eff [%lld,%lld) load [%lld,%lld)",
          GSTR(g), ax->name, (int)i, (int)eb, (int)ee, (int)lb, (int)le, (long long)eb64,
          (long long)ee64, (long long)(eb64 - ax->before), (long long)(ee64 + ax->after));
    CHECK(tl, CK_LOAD_EXTENT, (int64_t)le - lb <= ax->block && lb <= eb && ee <= le,
          "%s: %s tile %d loads [%d,%d) = %lld > block %lld, or does not contain eff [%d,%d)",
          GSTR(g), ax->name, (int)i, (int)lb, (int)le, (long long)((int64_t)le - lb),
          (long long)ax->block, (int)eb, (int)ee);
    if (ee <= eb) return; /* reported by the partition check */
    step = per_index ? 1 : max64((int64_t)ee - 1 - eb, 1);
    for (x = eb; x < ee; x += step) {
        const int64_t need_lo = x - ax->before, need_hi = x + ax->after;
        CHECK(tl, ax->halo_check, lb <= need_lo && need_hi < le,
              "%s: %s tile %d: effective %s %lld needs [%lld,%lld], loaded [%d,%d)", GSTR(g),
              ax->name, (int)i, ax->name, (long long)x, (long long)need_lo, (long long)need_hi,
              (int)lb, (int)le);
    }
}

enum { MODE_PER_INDEX, MODE_ALL_TILES, MODE_WINDOW };
#define WINDOW 48

/* Partition, halos, extent and int64 indices of one direction. MODE_PER_INDEX also
 * counts the owner of every index (owner: scratch of ax->seq bytes). MODE_WINDOW
 * (huge S) checks the first and last WINDOW tiles and WINDOW random ones. */
static void check_axis(tally *tl, const ta_tiling *t, const axis *ax, const geom *g, int mode,
                       unsigned char *owner, ta_rng *rng) {
    char gbuf[160];
    int64_t i;
    CHECK(tl, CK_FIELDS, ax->tiles_desc == ax->tiles, "%s: %s tiles %d, spec %lld", GSTR(g),
          ax->name, (int)ax->tiles_desc, (long long)ax->tiles);
    if (ax->tiles_desc != ax->tiles || ax->eff < 1) return;
    if (mode == MODE_PER_INDEX && owner) memset(owner, 0, (size_t)ax->seq);
    for (i = 0; i < ax->tiles; ++i) {
        int32_t eb, ee, prev_end;
        if (mode == MODE_WINDOW && i == WINDOW && ax->tiles > 2 * WINDOW) {
            int k;
            for (k = 0; k < WINDOW; ++k) { /* random interior tiles and their successors */
                const int32_t r = ta_rng_int(rng, WINDOW, (int32_t)(ax->tiles - WINDOW - 1));
                check_tile(tl, t, ax, g, r, 0);
                CHECK(tl, CK_PARTITION, ax->eff_end(t, r) == ax->eff_begin(t, r + 1),
                      "%s: %s tiles %d and %d not contiguous", GSTR(g), ax->name, (int)r,
                      (int)r + 1);
            }
            i = ax->tiles - WINDOW;
        }
        eb = ax->eff_begin(t, (int32_t)i);
        ee = ax->eff_end(t, (int32_t)i);
        prev_end = i == 0 ? 0 : ax->eff_end(t, (int32_t)(i - 1));
        CHECK(tl, CK_PARTITION, eb == prev_end && eb < ee && ee <= ax->seq,
              "%s: %s tile %lld owns [%d,%d); previous tile ended at %d", GSTR(g), ax->name,
              (long long)i, (int)eb, (int)ee, (int)prev_end);
        if (mode == MODE_PER_INDEX && owner) {
            int32_t x;
            for (x = eb; x < ee; ++x)
                if (x >= 0 && x < ax->seq) owner[x]++;
        }
        check_tile(tl, t, ax, g, (int32_t)i, mode == MODE_PER_INDEX);
    }
    CHECK(tl, CK_PARTITION, ax->eff_end(t, (int32_t)(ax->tiles - 1)) == ax->seq,
          "%s: last %s tile ends at %d, not S = %lld", GSTR(g), ax->name,
          (int)ax->eff_end(t, (int32_t)(ax->tiles - 1)), (long long)ax->seq);
    if (mode == MODE_PER_INDEX && owner) {
        int64_t x;
        for (x = 0; x < ax->seq; ++x)
            CHECK(tl, CK_PARTITION, owner[x] == 1, "%s: %s %lld owned by %d tiles", GSTR(g),
                  ax->name, (long long)x, (int)owner[x]);
    }
}

/* ------------------------------------------------------------------------ */
/* E. the skip (causal and windowed) and its transpose. */

/* ta_tile_row_keys of row r against the spec's interval [l, h) (seen = 0: the row sees
 * no key; then any lo == hi in [0, key_len] will do). */
static void check_row_keys(tally *tl, const ta_tiling *t, const geom *g, int32_t r, int64_t key_len,
                           int seen, int64_t l, int64_t h) {
    char gbuf[160];
    int32_t hl = INT32_MIN, hh = INT32_MIN;
    ta_tile_row_keys(t, r, (int32_t)key_len, &hl, &hh);
    CHECK(tl, CK_ROW_KEYS, seen ? hl == l && hh == h : hl == hh && hl >= 0 && hl <= key_len,
          "%s key_len=%lld: row %d keys [%d,%d), spec %s[%lld,%lld)", GSTR(g), (long long)key_len,
          (int)r, (int)hl, (int)hh, seen ? "" : "none ", (long long)l, (long long)h);
}

/* The keys the effective rows of Q tile qt see, from the spec's row intervals; with
 * check_rows, ta_tile_row_keys is checked against the spec on every row. [*lo, *hi) is
 * the hull of the rows' intervals (that it is their union, i.e. contiguous, is checked
 * key by key in the literal pass); returns 0 (lo = hi = 0) if no row sees a key. */
static int tile_keys(tally *tl, const ta_tiling *t, const geom *g, int32_t qt, int64_t key_len,
                     int check_rows, int64_t *lo, int64_t *hi) {
    const int32_t rb = ta_tile_row_eff_begin(t, qt), re = ta_tile_row_eff_end(t, qt);
    int32_t r;
    int any = 0;
    *lo = *hi = 0;
    if (!check_rows) {
        /* spec_row_keys of every row, unrolled (the hot loop of E2/E4: branch-free; equal
         * to the loop below, checked in the literal pass) */
        const int64_t diag = (int64_t)g->sk - g->sq, cap = min64(key_len, g->sk);
        const int64_t wl = spec_wl(g), wr = spec_wr(g);
        const int64_t reach = g->causal ? 0 : wr >= 0 ? wr : INT64_MAX / 4;
        int64_t l_min = INT64_MAX, h_max = INT64_MIN;
        for (r = rb < 0 ? 0 : rb; r < re && r < g->sq; ++r) {
            const int64_t pos = r + diag;
            const int64_t h = min64(cap, pos + reach + 1);
            const int64_t l = wl >= 0 ? max64(0, pos - wl) : 0;
            l_min = l < h ? min64(l_min, l) : l_min;
            h_max = l < h ? max64(h_max, h) : h_max;
        }
        if (h_max == INT64_MIN) return 0;
        *lo = l_min;
        *hi = h_max;
        return 1;
    }
    for (r = rb; r < re; ++r) {
        int64_t l, h;
        const int seen = spec_row_keys(g, r, key_len, &l, &h);
        check_row_keys(tl, t, g, r, key_len, seen, l, h);
        if (!seen) continue;
        if (!any || l < *lo) *lo = l;
        if (!any || h > *hi) *hi = h;
        any = 1;
    }
    return any;
}

/* Literally: does tile pair (qt, kt) hold a visible (row, key) pair? Sets bit j of
 * *seen_keys for each key j it sees (keys < MAX_KEYS_LIT). */
static int pair_needed_literal(const ta_tiling *t, const geom *g, int32_t qt, int32_t kt,
                               int64_t key_len, uint64_t *seen_keys, tally *tl) {
    char gbuf[160];
    const int32_t rb = ta_tile_row_eff_begin(t, qt), re = ta_tile_row_eff_end(t, qt);
    const int32_t cb = ta_tile_col_eff_begin(t, kt), ce = ta_tile_col_eff_end(t, kt);
    const int64_t sq = g->sq, sk = g->sk, wl = spec_wl(g), wr = spec_wr(g); /* hoisted */
    const int causal = g->causal;
    uint64_t seen = 0;
    int32_t r, j;
    int any = 0;
    for (r = rb; r < re; ++r)
        for (j = cb; j < ce; ++j) {
            const int v = spec_mask(sq, sk, causal, wl, wr, key_len, r, j);
            CHECK(tl, CK_VISIBLE, ta_tiling_visible(t, r, j, (int32_t)key_len) == v,
                  "%s key_len=%lld: visible(%d,%d) = %d, spec %d", GSTR(g), (long long)key_len,
                  (int)r, (int)j, ta_tiling_visible(t, r, j, (int32_t)key_len), v);
            any |= v;
            seen |= (uint64_t)v << j;
        }
    *seen_keys |= seen;
    return any;
}

/* Q tile qt against the union [ulo, uhi) of its rows' intervals (any = 0: no row sees
 * a key): ta_tile_q_keys, ta_tile_last_visible_col, and the shape of [k_begin, k_end)
 * (within [0, num_k_tiles]; (0, 0) when empty). */
static void check_q_tile(tally *tl, const ta_tiling *t, const geom *g, int32_t qt, int64_t key_len,
                         int any, int64_t ulo, int64_t uhi, int32_t *k_begin, int32_t *k_end) {
    char gbuf[160];
    const int32_t kl = (int32_t)key_len, nk = t->num_k_tiles;
    const int32_t last = ta_tile_last_visible_col(t, qt, kl);
    int32_t lo = INT32_MIN, hi = INT32_MIN;
    ta_tile_q_keys(t, qt, kl, &lo, &hi);
    *k_begin = ta_tile_k_begin(t, qt, kl);
    *k_end = ta_tile_k_end(t, qt, kl);
    CHECK(tl, CK_Q_KEYS, any ? lo == ulo && hi == uhi : lo == 0 && hi == 0,
          "%s key_len=%lld: q tile %d keys [%d,%d), union of its rows %s[%lld,%lld)", GSTR(g),
          (long long)key_len, (int)qt, (int)lo, (int)hi, any ? "" : "none ", (long long)ulo,
          (long long)uhi);
    CHECK(tl, CK_LAST_VISIBLE, last == (any ? uhi - 1 : -1),
          "%s key_len=%lld: q tile %d last visible col %d, brute force %lld", GSTR(g),
          (long long)key_len, (int)qt, (int)last, (long long)(any ? uhi - 1 : -1));
    CHECK(tl, CK_K_RANGE,
          *k_begin >= 0 && *k_begin <= *k_end && *k_end <= nk &&
              (*k_begin < *k_end || *k_begin == 0),
          "%s key_len=%lld: q tile %d: k tiles [%d,%d) outside [0, %d] or empty but not (0, 0)",
          GSTR(g), (long long)key_len, (int)qt, (int)*k_begin, (int)*k_end, (int)nk);
}

/* K tile kt: [q_begin, q_end) from ta_tile_k_rows, within [0, num_q_tiles];
 * (num_q_tiles, num_q_tiles) when empty. wrappers: ta_tile_q_begin and ta_tile_q_end
 * equal to it (left out of the hot unwindowed E2/E4 loops: time). */
static void k_tile_rows(tally *tl, const ta_tiling *t, const geom *g, int32_t kt, int64_t key_len,
                        int wrappers, int32_t *q_begin, int32_t *q_end) {
    char gbuf[160];
    const int32_t kl = (int32_t)key_len, nq = t->num_q_tiles;
    int32_t b = INT32_MIN, e = INT32_MIN;
    ta_tile_k_rows(t, kt, kl, &b, &e);
    *q_begin = wrappers ? ta_tile_q_begin(t, kt, kl) : b;
    *q_end = wrappers ? ta_tile_q_end(t, kt, kl) : e;
    CHECK(tl, CK_Q_RANGE,
          b == *q_begin && e == *q_end && *q_begin >= 0 && *q_begin <= *q_end && *q_end <= nq &&
              (*q_begin < *q_end || *q_begin == nq),
          "%s key_len=%lld: k tile %d: q tiles [%d,%d) (k_rows [%d,%d)) outside [0, %d] or "
          "empty but not (%d, %d)",
          GSTR(g), (long long)key_len, (int)kt, (int)*q_begin, (int)*q_end, (int)b, (int)e, (int)nq,
          (int)nq, (int)nq);
}

/* The three skip checks for one pair, given whether it is needed. */
static void check_pair(tally *tl, const geom *g, int64_t key_len, int32_t qt, int32_t kt,
                       int needed, int32_t k_begin, int32_t k_end, int32_t q_begin, int32_t q_end) {
    char gbuf[160];
    const int k_keeps = k_begin <= kt && kt < k_end, q_keeps = q_begin <= qt && qt < q_end;
    CHECK(tl, CK_K_RANGE, needed == k_keeps,
          "%s key_len=%lld: q tile %d k tile %d %s, but k tiles [%d,%d) %s it", GSTR(g),
          (long long)key_len, (int)qt, (int)kt,
          needed ? "holds a visible pair" : "holds only masked entries", (int)k_begin, (int)k_end,
          k_keeps ? "keep" : "skip");
    CHECK(tl, CK_Q_RANGE, needed == q_keeps,
          "%s key_len=%lld: k tile %d q tile %d %s, but q tiles [%d,%d) %s it", GSTR(g),
          (long long)key_len, (int)kt, (int)qt,
          needed ? "holds a visible pair" : "holds only masked entries", (int)q_begin, (int)q_end,
          q_keeps ? "keep" : "skip");
    CHECK(tl, CK_TRANSPOSE, k_keeps == q_keeps,
          "%s key_len=%lld: (q tile %d, k tile %d): k tiles [%d,%d) but q tiles [%d,%d)", GSTR(g),
          (long long)key_len, (int)qt, (int)kt, (int)k_begin, (int)k_end, (int)q_begin, (int)q_end);
}

/* Does the union [ulo, uhi) meet the effective keys of K tile kt? */
static int union_meets(const ta_tiling *t, int any, int64_t ulo, int64_t uhi, int32_t kt) {
    return any && ulo < ta_tile_col_eff_end(t, kt) && uhi > ta_tile_col_eff_begin(t, kt);
}

#define MAX_TILES_EXH 512
#define MAX_KEYS_LIT  64

/* Every tile pair of a small tiling. literal: needed by scanning every (r, j), and the
 * union of a Q tile's row intervals compared with the keys it sees, key by key; else
 * from the row intervals (the keys a Q tile's rows see are their union). full (the window
 * groups): also ta_tile_row_keys on every row, the q_begin/q_end wrappers, and (literal)
 * the test's fast union against its row by row one. E1/E2/E4 leave those out (time):
 * without a window E0 checks ta_tile_row_keys on every row of the same sizes as E1, and
 * the sampled groups the rest. */
static void check_skip_all(tally *tl, const ta_tiling *t, const geom *g, int64_t key_len,
                           int literal, int full) {
    char gbuf[160];
    int32_t q_begin[MAX_TILES_EXH], q_end[MAX_TILES_EXH];
    uint64_t seen = 0; /* literal: bit j = some row of the Q tile sees key j */
    const int32_t nq = t->num_q_tiles, nk = t->num_k_tiles;
    int32_t qt, kt;
    if (nq > MAX_TILES_EXH || nk > MAX_TILES_EXH || (literal && g->sk > MAX_KEYS_LIT)) {
        report(tl, CK_FIELDS, __LINE__, "%s: %d x %d tiles exceed the test's scratch", GSTR(g),
               (int)nq, (int)nk);
        return;
    }
    for (kt = 0; kt < nk; ++kt)
        k_tile_rows(tl, t, g, kt, key_len, full, &q_begin[kt], &q_end[kt]);
    for (qt = 0; qt < nq; ++qt) {
        int64_t ulo, uhi;
        int32_t k_begin, k_end, j;
        const int any = tile_keys(tl, t, g, qt, key_len, full, &ulo, &uhi);
        check_q_tile(tl, t, g, qt, key_len, any, ulo, uhi, &k_begin, &k_end);
        if (literal && full) { /* the test's fast union (unchecked rows) equals the slow one */
            int64_t flo, fhi;
            const int fany = tile_keys(tl, t, g, qt, key_len, 0, &flo, &fhi);
            CHECK(tl, CK_Q_KEYS, fany == any && flo == ulo && fhi == uhi,
                  "%s key_len=%lld: q tile %d: the test's fast union %d [%lld,%lld) differs from "
                  "its row by row union %d [%lld,%lld)",
                  GSTR(g), (long long)key_len, (int)qt, fany, (long long)flo, (long long)fhi, any,
                  (long long)ulo, (long long)uhi);
        }
        seen = 0;
        for (kt = 0; kt < nk; ++kt) {
            const int needed = literal ? pair_needed_literal(t, g, qt, kt, key_len, &seen, tl)
                                       : union_meets(t, any, ulo, uhi, kt);
            check_pair(tl, g, key_len, qt, kt, needed, k_begin, k_end, q_begin[kt], q_end[kt]);
        }
        if (literal) { /* the keys seen, as bits, against the bits of [ulo, uhi) */
            uint64_t hull = 0;
            for (j = 0; j < g->sk; ++j)
                hull |= (uint64_t)(any && j >= ulo && j < uhi) << j;
            CHECK(tl, CK_Q_KEYS, seen == hull,
                  "%s key_len=%lld: q tile %d sees the keys %#llx (bit j: key j), but the union "
                  "of its rows' intervals is [%lld,%lld)",
                  GSTR(g), (long long)key_len, (int)qt, (unsigned long long)seen, (long long)ulo,
                  (long long)uhi);
        }
    }
}

static int32_t clamp_row(const geom *g, int64_t r) {
    return (int32_t)min64(max64(r, 0), (int64_t)g->sq - 1);
}
static int32_t key_tile(const ta_tiling *t, const geom *g, int64_t j) {
    return (int32_t)(min64(max64(j, 0), (int64_t)g->sk - 1) / t->cols_eff);
}

/* 1 if x is one of list[0..n). */
static int seen_before(const int32_t *list, int n, int32_t x) {
    int i;
    for (i = 0; i < n; ++i)
        if (list[i] == x) return 1;
    return 0;
}

/* Rows where a bound of the mask crosses an end of the keys, clamped to [0, S_q):
 * pos = 0 and pos = key_len - 1 (causal), pos - window_left = 0 and = key_len, and
 * pos + window_right = 0 and = key_len - 1. */
static void boundary_rows(const geom *g, int64_t key_len, int32_t rows[6]) {
    const int64_t diag = (int64_t)g->sk - g->sq, wl = spec_wl(g), wr = spec_wr(g);
    rows[0] = clamp_row(g, -diag);
    rows[1] = clamp_row(g, key_len - 1 - diag);
    rows[2] = clamp_row(g, wl - diag);
    rows[3] = clamp_row(g, key_len + wl - diag);
    rows[4] = clamp_row(g, -wr - diag);
    rows[5] = clamp_row(g, key_len - 1 - wr - diag);
}

/* Sampled pairs of a big tiling: around k_begin/k_end(qt) and q_begin/q_end(kt), the
 * tiles where the mask's bounds cross the ends of the keys, plus random ones; and the
 * mask point by point at the ends of the intervals of the boundary rows. */
static void check_skip_sampled(tally *tl, const ta_tiling *t, const geom *g, int64_t key_len,
                               ta_rng *rng) {
    char gbuf[160];
    const int32_t nq = t->num_q_tiles, nk = t->num_k_tiles, kl = (int32_t)key_len;
    int32_t rows[6], qts[14], kts[10];
    int s, u;
    boundary_rows(g, key_len, rows);
    for (s = 0; s < 8; ++s) {
        const int32_t r0 = s < 6 ? rows[s] : ta_rng_int(rng, 0, g->sq - 1);
        int64_t r;
        for (r = max64(r0 - 1, 0); r <= min64((int64_t)r0 + 1, g->sq - 1); ++r) {
            int64_t l, h;
            spec_row_keys(g, r, key_len, &l, &h);
            {
                const int64_t js[8] = {l - 1, l,           h - 1,   h,
                                       0,     key_len - 1, key_len, ta_rng_int(rng, 0, g->sk - 1)};
                for (u = 0; u < 8; ++u) {
                    const int v = spec_visible(g, r, js[u], key_len);
                    const int hv = ta_tiling_visible(t, (int32_t)r, (int32_t)js[u], kl);
                    CHECK(tl, CK_VISIBLE, hv == v,
                          "%s key_len=%lld: visible(%lld,%lld) = %d, spec %d", GSTR(g),
                          (long long)key_len, (long long)r, (long long)js[u], hv, v);
                }
            }
        }
    }
    /* q tiles: ends, the tiles of the boundary rows, random */
    qts[0] = 0;
    qts[1] = nq - 1;
    qts[2] = nq > 1 ? 1 : 0;
    qts[3] = nq > 1 ? nq - 2 : 0;
    for (s = 0; s < 6; ++s)
        qts[4 + s] = rows[s] / t->rows_eff;
    for (s = 10; s < 14; ++s)
        qts[s] = ta_rng_int(rng, 0, nq - 1);
    for (s = 0; s < 14; ++s) {
        const int32_t qt = qts[s];
        int64_t ulo, uhi;
        int32_t k_begin, k_end;
        int any;
        if (seen_before(qts, s, qt)) continue;
        any = tile_keys(tl, t, g, qt, key_len, s < 10, &ulo, &uhi);
        check_q_tile(tl, t, g, qt, key_len, any, ulo, uhi, &k_begin, &k_end);
        {
            const int32_t cand[9] = {0,           k_begin - 1, k_begin,
                                     k_begin + 1, k_end - 1,   k_end,
                                     k_end + 1,   nk - 1,      ta_rng_int(rng, 0, nk - 1)};
            for (u = 0; u < 9; ++u) {
                const int32_t kt = cand[u];
                int32_t q_begin, q_end;
                if (kt < 0 || kt >= nk || seen_before(cand, u, kt)) continue;
                k_tile_rows(tl, t, g, kt, key_len, 1, &q_begin, &q_end);
                check_pair(tl, g, key_len, qt, kt, union_meets(t, any, ulo, uhi, kt), k_begin,
                           k_end, q_begin, q_end);
            }
        }
    }
    /* k tiles: ends, the first key of the diagonal, the last key, the first key of the
     * first row and the last of the last row, random; then the pairs either side of
     * q_begin and q_end */
    kts[0] = 0;
    kts[1] = nk - 1;
    kts[2] = nk > 1 ? 1 : 0;
    kts[3] = key_tile(t, g, (int64_t)g->sk - g->sq);
    kts[4] = key_tile(t, g, key_len - 1);
    {
        int64_t l, h;
        spec_row_keys(g, 0, key_len, &l, &h);
        kts[5] = key_tile(t, g, l);
        spec_row_keys(g, g->sq - 1, key_len, &l, &h);
        kts[6] = key_tile(t, g, h - 1);
    }
    for (s = 7; s < 10; ++s)
        kts[s] = ta_rng_int(rng, 0, nk - 1);
    for (s = 0; s < 10; ++s) {
        const int32_t kt = kts[s];
        int32_t q_begin, q_end;
        if (seen_before(kts, s, kt)) continue;
        k_tile_rows(tl, t, g, kt, key_len, 1, &q_begin, &q_end);
        {
            const int32_t cand[4] = {q_begin - 1, q_begin, q_end - 1, q_end};
            for (u = 0; u < 4; ++u) {
                const int32_t qt = cand[u];
                int64_t ulo, uhi;
                int any;
                if (qt < 0 || qt >= nq || seen_before(cand, u, qt)) continue;
                any = tile_keys(tl, t, g, qt, key_len, 0, &ulo, &uhi);
                check_pair(tl, g, key_len, qt, kt, union_meets(t, any, ulo, uhi, kt),
                           ta_tile_k_begin(t, qt, kl), ta_tile_k_end(t, qt, kl), q_begin, q_end);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The groups. */

typedef struct limits {
    int32_t s_exh;     /* B, C on the block subset: every S in 1..s_exh, per index */
    int32_t s_exh_all; /* B, C on every block: every S in 1..s_exh_all, per index */
    int32_t pair_max;  /* E2: every S_q, S_k in 1..pair_max */
    int32_t pair_lit;  /* E1: literal pairs, every key length */
    int n_sampled;     /* B, C (subset), E3: sampled sizes up to 2^20 */
    int n_sampled_all; /* B, C (every block): the first n_sampled_all of them, windowed */
    int n_edge_cfg;    /* H: row configs per edge pair, spread over every block */
    int64_t split_n;   /* F: range lengths 0..split_n */
    int n_all_pairs;   /* E4: size pairs for every block pair */
    int32_t win_pred;  /* E0: every pair of window bounds for S_q, S_k <= win_pred */
    int32_t win_lit;   /* E5: windows, literal pairs, every key length and bound pair */
    int32_t win_max;   /* E6: windows, every S_q, S_k in 1..win_max */
    int win_pairs;     /* E6: window bound pairs per (S_q, S_k, causal, key length) */
    int n_win_sampled; /* E7: random windowed geometries up to 2^20 */
    int n_edge_win;    /* H: windowed geometries per edge pair */
    int n_context;     /* I: random layouts */
} limits;

/* B and C: the configurations and sizes one sweep of a direction covers. */
typedef struct axis_domain {
    const axis_cfg *row_cfg[2], *col_cfg[2]; /* valid (block, conv) per pass */
    const int *n_row, *n_col;                /* [2] */
    int32_t s_exh;                           /* every S in 1..s_exh, per index */
    const int32_t *sampled;                  /* then these sizes (> s_exh) */
    int n_sampled;
    int32_t all_tiles_max; /* sampled S up to this: every tile; above: windowed */
} axis_domain;

/* A. make's status over blocks, convs, sizes and split counts. */
static void group_make(tally *tl) {
    static const int32_t odd_blocks[] = {INT32_MIN, INT32_MIN + 1, -256,    -64,       -8,  -1, 512,
                                         1024,      4096,          1 << 30, INT32_MAX, 255, 257};
    static const int32_t bad_seq[] = {0, -1, -600, INT32_MIN, TA_SEQ_MAX + 1, INT32_MAX};
    static const int32_t bad_splits[] = {0, -1, INT32_MIN};
    static const int32_t good_splits[] = {1, 2, 16, 1000, INT32_MAX};
    char gbuf[160];
    int32_t b, pass;
    int c, dir, i;
    size_t n_odd = sizeof odd_blocks / sizeof odd_blocks[0];
    for (pass = 0; pass < 2; ++pass)
        for (dir = 0; dir < 2; ++dir)
            for (c = 0; c < N_CONV_Q; ++c)
                for (i = 0; i < 600 + (int)n_odd; ++i) {
                    geom g = {37, 41, 64, 64, 0, 0, 1, pass, 1, NO_WINDOW};
                    ta_tiling t, before;
                    int st;
                    b = i < 600 ? i - 1 : odd_blocks[i - 600];
                    if (dir == 0) {
                        g.bq = b;
                        g.cq = conv_q_at(c);
                    } else {
                        g.bk = b;
                        g.ck = conv_k_at(c);
                    }
                    memset(&t, 0xA5, sizeof t);
                    before = t;
                    st = make(&g, &t);
                    CHECK(tl, CK_MAKE_STATUS, st == spec_make_status(&g),
                          "%s: ta_tiling_make = %d, expected %d", GSTR(&g), st,
                          spec_make_status(&g));
                    if (st != TA_OK)
                        CHECK(tl, CK_MAKE_NOWRITE, memcmp(&t, &before, sizeof t) == 0,
                              "%s: refused (%d) but wrote the struct", GSTR(&g), st);
                }
    for (i = 0; i < (int)(sizeof bad_seq / sizeof bad_seq[0]); ++i)
        for (dir = 0; dir < 2; ++dir) {
            geom g = {100, 100, 64, 64, 0, 0, 1, TA_TILING_FWD, 1, NO_WINDOW};
            ta_tiling t, before;
            int st;
            if (dir == 0)
                g.sq = bad_seq[i];
            else
                g.sk = bad_seq[i];
            memset(&t, 0x5A, sizeof t);
            before = t;
            st = make(&g, &t);
            CHECK(tl, CK_MAKE_STATUS, st == spec_make_status(&g) && st != TA_OK,
                  "%s: ta_tiling_make = %d, expected %d", GSTR(&g), st, spec_make_status(&g));
            CHECK(tl, CK_MAKE_NOWRITE, memcmp(&t, &before, sizeof t) == 0,
                  "%s: refused but wrote the struct", GSTR(&g));
        }
    for (i = 0; i < 3; ++i) {
        geom g = {100, 100, 64, 64, 0, 0, 1, TA_TILING_BWD, bad_splits[i], NO_WINDOW};
        ta_tiling t;
        const int st = make(&g, &t);
        CHECK(tl, CK_MAKE_STATUS, st == TA_ERR_BAD_ARG, "%s: ta_tiling_make = %d, expected %d",
              GSTR(&g), st, (int)TA_ERR_BAD_ARG);
    }
    for (i = 0; i < 5; ++i) {
        geom g = {100, 100, 64, 64, 3, 5, 1, TA_TILING_BWD, good_splits[i], NO_WINDOW};
        ta_tiling t;
        const int st = make(&g, &t);
        CHECK(tl, CK_MAKE_STATUS, st == TA_OK, "%s: ta_tiling_make = %d", GSTR(&g), st);
        if (st == TA_OK) check_fields(tl, &t, &g);
    }
    /* every pair of the 249 blocks, both passes: with every conv pair when both
     * blocks are in the subset, else with 4 rotating conv pairs; accepted iff the
     * spec says (the loop above has every block with every conv, per direction) */
    for (pass = 0; pass < 2; ++pass)
        for (i = 0; i < N_BLOCKS_ALL * N_BLOCKS_ALL; ++i) {
            const int32_t bq = SPEC_BLOCK_MIN + i / N_BLOCKS_ALL;
            const int32_t bk = SPEC_BLOCK_MIN + i % N_BLOCKS_ALL;
            const int all_convs = in_subset(bq) && in_subset(bk);
            const int n_conv = all_convs ? N_CONV_Q * N_CONV_K : 4;
            for (c = 0; c < n_conv; ++c) {
                const int cc =
                    all_convs
                        ? c
                        : (int)(((uint32_t)i * 37u + (uint32_t)c * 71u + (uint32_t)pass * 5u) %
                                (uint32_t)(N_CONV_Q * N_CONV_K));
                geom g = {9, 9,    bq, bk,       conv_q_at(cc / N_CONV_K), conv_k_at(cc % N_CONV_K),
                          1, pass, 1,  NO_WINDOW};
                const int want = spec_make_status(&g);
                ta_tiling t;
                int st;
                memset(&t, 0, sizeof t);
                st = make(&g, &t);
                CHECK(tl, CK_MAKE_STATUS, st == want, "%s: ta_tiling_make = %d, expected %d",
                      GSTR(&g), st, want);
                if (st == TA_OK && want == TA_OK) check_fields(tl, &t, &g);
            }
        }
}

/* B and C: one direction over every S in 1..s_exh (per index) and sampled sizes,
 * for every configuration of the domain. The other direction's parameters rotate
 * through its valid configurations. */
static void group_axis(int rows, const axis_domain *dom, uint64_t seed) {
    const int32_t n_sizes = dom->s_exh + dom->n_sampled;
    int32_t si;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (si = 0; si < n_sizes; ++si) {
        tally tl;
        ta_rng rng;
        const int32_t s = si < dom->s_exh ? si + 1 : dom->sampled[si - dom->s_exh];
        const int mode = s <= dom->s_exh           ? MODE_PER_INDEX
                         : s <= dom->all_tiles_max ? MODE_ALL_TILES
                                                   : MODE_WINDOW;
        unsigned char *owner = mode == MODE_PER_INDEX ? (unsigned char *)malloc((size_t)s) : NULL;
        int32_t pass;
        int c;
        memset(&tl, 0, sizeof tl);
        ta_rng_seed(&rng, seed ^ ((uint64_t)s * UINT64_C(0x9E3779B97F4A7C15)) ^ (uint64_t)rows);
        for (pass = 0; pass < 2; ++pass) {
            const int n_own = rows ? dom->n_row[pass] : dom->n_col[pass];
            const int n_other = rows ? dom->n_col[pass] : dom->n_row[pass];
            for (c = 0; c < n_own; ++c) {
                const axis_cfg own = rows ? dom->row_cfg[pass][c] : dom->col_cfg[pass][c];
                const axis_cfg other = rows ? dom->col_cfg[pass][(s * 7 + c) % n_other]
                                            : dom->row_cfg[pass][(s * 7 + c) % n_other];
                const int32_t s_other = 1 + (int32_t)((s * 13 + c * 5) % 700);
                geom g;
                ta_tiling t;
                axis ax;
                int st;
                char gbuf[160];
                g.sq = rows ? s : s_other;
                g.sk = rows ? s_other : s;
                g.bq = rows ? own.block : other.block;
                g.bk = rows ? other.block : own.block;
                g.cq = rows ? own.conv : other.conv;
                g.ck = rows ? other.conv : own.conv;
                g.causal = (s + c) & 1;
                g.pass = pass;
                g.splits = 1 + (c % 16);
                g.wl = g.wr = -1;
                st = make(&g, &t);
                CHECK(&tl, CK_MAKE_STATUS, st == TA_OK, "%s: ta_tiling_make = %d", GSTR(&g), st);
                if (st != TA_OK) continue;
                check_fields(&tl, &t, &g);
                if (rows)
                    axis_rows(&ax, &t, &g);
                else
                    axis_cols(&ax, &t, &g);
                check_axis(&tl, &t, &ax, &g, mode, owner, &rng);
            }
        }
        free(owner);
        tally_merge(&tl);
    }
}

/* D. every combination for a few size pairs: fields and both directions. */
static void group_cross(const limits *lim) {
    static const int32_t pairs[][2] = {{1, 1}, {600, 7}, {7, 600}, {257, 255}, {1000, 999}};
    const int n_pairs = lim->s_exh >= 600 ? 5 : 2;
    const int n_combo = 2 * 2 * N_BLOCKS * N_BLOCKS;
    int32_t ci;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (ci = 0; ci < n_pairs * n_combo; ++ci) {
        tally tl;
        ta_rng rng;
        const int pi = ci / n_combo, combo = ci % n_combo;
        int c;
        memset(&tl, 0, sizeof tl);
        ta_rng_seed(&rng, (uint64_t)ci);
        for (c = 0; c < N_CONV_Q * N_CONV_K; ++c) {
            geom g, gr, gc;
            ta_tiling t, tr, tc;
            axis ax;
            char gbuf[160];
            g.sq = pairs[pi][0];
            g.sk = pairs[pi][1];
            g.pass = combo & 1;
            g.causal = (combo >> 1) & 1;
            g.bq = k_blocks[(combo >> 2) / N_BLOCKS];
            g.bk = k_blocks[(combo >> 2) % N_BLOCKS];
            g.cq = conv_q_at(c / N_CONV_K);
            g.ck = conv_k_at(c % N_CONV_K);
            g.splits = 1 + c % 16;
            g.wl = g.wr = -1;
            if (spec_make_status(&g) != TA_OK) continue;
            CHECK(&tl, CK_MAKE_STATUS, make(&g, &t) == TA_OK, "%s: refused", GSTR(&g));
            check_fields(&tl, &t, &g);
            axis_rows(&ax, &t, &g);
            check_axis(&tl, &t, &ax, &g, MODE_ALL_TILES, NULL, &rng);
            axis_cols(&ax, &t, &g);
            check_axis(&tl, &t, &ax, &g, MODE_ALL_TILES, NULL, &rng);
            /* the same rows with the column parameters changed, and vice versa */
            gr = g;
            gr.sk = 1;
            gr.bk = TA_BLOCK_MAX;
            gr.ck = 0;
            gr.causal = !g.causal;
            gc = g;
            gc.sq = 1;
            gc.bq = TA_BLOCK_MAX;
            gc.cq = 0;
            gc.causal = !g.causal;
            if (make(&gr, &tr) != TA_OK || make(&gc, &tc) != TA_OK) {
                report(&tl, CK_CROSS, __LINE__, "%s: partner geometry refused", GSTR(&g));
                continue;
            }
            CHECK(&tl, CK_CROSS,
                  t.rows_eff == tr.rows_eff && t.num_q_tiles == tr.num_q_tiles &&
                      t.halo_q_top == tr.halo_q_top && t.halo_q_bottom == tr.halo_q_bottom &&
                      ta_tile_row_load_begin(&t, t.num_q_tiles - 1) ==
                          ta_tile_row_load_begin(&tr, t.num_q_tiles - 1) &&
                      ta_tile_row_load_end(&t, t.num_q_tiles - 1) ==
                          ta_tile_row_load_end(&tr, t.num_q_tiles - 1),
                  "%s: row geometry changes with the column parameters", GSTR(&g));
            CHECK(&tl, CK_CROSS,
                  t.cols_eff == tc.cols_eff && t.num_k_tiles == tc.num_k_tiles &&
                      t.halo_k == tc.halo_k &&
                      ta_tile_col_load_begin(&t, t.num_k_tiles - 1) ==
                          ta_tile_col_load_begin(&tc, t.num_k_tiles - 1) &&
                      ta_tile_col_load_end(&t, t.num_k_tiles - 1) ==
                          ta_tile_col_load_end(&tc, t.num_k_tiles - 1),
                  "%s: column geometry changes with the row parameters", GSTR(&g));
        }
        tally_merge(&tl);
    }
}

/* A rotating choice of conv geometries for a size pair: (row cfg, col cfg, pass). */
static void rotating_conv_geom(geom *g, uint64_t k) {
    const int32_t pass = (int32_t)(k & 1);
    const axis_cfg rc = g_row_cfg[pass][(k / 2) % (uint64_t)g_n_row[pass]];
    const axis_cfg cc = g_col_cfg[pass][(k / 2 * 7 + 3) % (uint64_t)g_n_col[pass]];
    g->pass = pass;
    g->bq = rc.block;
    g->cq = rc.conv;
    g->bk = cc.block;
    g->ck = cc.conv;
}

#define N_ROTATING 6
#define E2_SHARE   4 /* E2 (not literal) runs 1/E2_SHARE of the subset's block pairs */

/* E1 + E2: every S_q, S_k <= pair_max; E1 (<= pair_lit) literally, every key length,
 * every block pair of the subset; E2 a quarter of those pairs, rotating with the
 * sizes, so each pair meets a quarter of the size pairs. Both add rotating convs
 * over every block. */
static void group_skip_exhaustive(const limits *lim) {
    int32_t sq;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (sq = 1; sq <= lim->pair_max; ++sq) {
        tally tl;
        int32_t sk, causal;
        memset(&tl, 0, sizeof tl);
        for (sk = 1; sk <= lim->pair_max; ++sk) {
            const int literal = sq <= lim->pair_lit && sk <= lim->pair_lit;
            const int32_t n_keylen = literal ? sk + 1 : 2;
            for (causal = 0; causal < 2; ++causal) {
                int32_t kl;
                for (kl = 0; kl < n_keylen; ++kl) {
                    /* key lengths: all of 0..S_k when literal; else S_k and one that rotates */
                    const int64_t key_len = literal   ? kl
                                            : kl == 0 ? sk
                                                      : (sq * 31 + sk * 7) % (sk + 1);
                    const int n_bp = literal ? N_BLOCKS * N_BLOCKS : N_BLOCKS * N_BLOCKS / E2_SHARE;
                    const int rot = (int)((sq + 3 * sk + 5 * kl + 7 * causal) % E2_SHARE);
                    int c;
                    for (c = 0; c < n_bp + N_ROTATING; ++c) {
                        geom g = {sq, sk, 0, 0, 0, 0, causal, TA_TILING_FWD, 1, NO_WINDOW};
                        ta_tiling t;
                        char gbuf[160];
                        if (c < n_bp) {
                            const int bp = literal ? c : c * E2_SHARE + rot;
                            g.bq = k_blocks[bp / N_BLOCKS];
                            g.bk = k_blocks[bp % N_BLOCKS];
                        } else {
                            rotating_conv_geom(&g, (uint64_t)sq * 7919u + (uint64_t)sk * 104729u +
                                                       (uint64_t)(kl * 2 + causal) * 31u +
                                                       (uint64_t)c);
                        }
                        if (make(&g, &t) != TA_OK) {
                            report(&tl, CK_MAKE_STATUS, __LINE__, "%s: refused", GSTR(&g));
                            continue;
                        }
                        check_fields(&tl, &t, &g);
                        check_skip_all(&tl, &t, &g, key_len, literal, 0);
                    }
                }
            }
        }
        tally_merge(&tl);
    }
}

/* A rotating tile geometry for the window checks: three in four with at most SMALL_EFF
 * effective rows and columns (many tiles at small S), one in four from every block and
 * conv; both passes. */
static void window_tile_geom(geom *g, uint64_t k) {
    const int32_t pass = (int32_t)(k & 1);
    const int all = (k >> 1) % 4 == 3;
    const uint64_t i = k >> 3;
    const axis_cfg rc = all ? g_row_cfg[pass][i % (uint64_t)g_n_row[pass]]
                            : g_row_small[pass][i % (uint64_t)g_n_row_small[pass]];
    const axis_cfg cc = all ? g_col_cfg[pass][(i * 7 + 3) % (uint64_t)g_n_col[pass]]
                            : g_col_small[pass][(i * 7 + 3) % (uint64_t)g_n_col_small[pass]];
    g->pass = pass;
    g->bq = rc.block;
    g->cq = rc.conv;
    g->bk = cc.block;
    g->ck = cc.conv;
}

/* E5 + E6: sliding windows over every S_q, S_k <= win_max, causal or not. E5 (S_q, S_k
 * <= win_lit) literally, pair by pair, with every key length 0..S_k and every pair of
 * window bounds (N_WIN x N_WIN); E6 with key length S_k and one that rotates, and
 * win_pairs bound pairs rotating with the sizes so that each pair meets about
 * win_pairs / (N_WIN x N_WIN) of the size pairs. Tile geometries rotate
 * (window_tile_geom). */
static void group_skip_windows(const limits *lim) {
    int32_t sq;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (sq = 1; sq <= lim->win_max; ++sq) {
        tally tl;
        int32_t sk, causal;
        memset(&tl, 0, sizeof tl);
        for (sk = 1; sk <= lim->win_max; ++sk) {
            const int literal = sq <= lim->win_lit && sk <= lim->win_lit;
            const int32_t n_keylen = literal ? sk + 1 : 2;
            const int n_w = literal ? N_WIN * N_WIN : lim->win_pairs;
            const int stride = N_WIN * N_WIN / lim->win_pairs;
            for (causal = 0; causal < 2; ++causal) {
                int32_t kl;
                for (kl = 0; kl < n_keylen; ++kl) {
                    const int64_t key_len = literal   ? kl
                                            : kl == 0 ? sk
                                                      : (sq * 17 + sk * 5 + causal) % (sk + 1);
                    const int rot = (int)((sq * 7 + sk * 3 + kl * 11 + causal * 5) % stride);
                    int w;
                    for (w = 0; w < n_w; ++w) {
                        const int wp = literal ? w : (w * stride + rot) % (N_WIN * N_WIN);
                        geom g = {sq, sk, 0, 0, 0, 0, causal, TA_TILING_FWD, 1, NO_WINDOW};
                        ta_tiling t;
                        char gbuf[160];
                        g.wl = window_at(wp / N_WIN, sq, sk);
                        g.wr = window_at(wp % N_WIN, sq, sk);
                        window_tile_geom(&g, (uint64_t)sq * 7919u + (uint64_t)sk * 104729u +
                                                 (uint64_t)(kl * 2 + causal) * 31u +
                                                 (uint64_t)w * 1009u);
                        if (make(&g, &t) != TA_OK) {
                            report(&tl, CK_MAKE_STATUS, __LINE__, "%s: refused", GSTR(&g));
                            continue;
                        }
                        check_fields(&tl, &t, &g);
                        check_skip_all(&tl, &t, &g, key_len, literal, 1);
                    }
                }
            }
        }
        tally_merge(&tl);
    }
}

/* E4: every pair of the 249 block sizes, causal or not, with no conv and with a
 * rotating conv, for a few size pairs (from the row intervals, every tile pair). */
static void group_skip_all_blocks(const limits *lim) {
    static const int32_t sizes[][2] = {
        {300, 300}, {257, 131}, {131, 257}, {61, 300}, {1, 97},   {97, 1}, {256, 255}, {255, 256},
        {54, 54},   {65, 63},   {512, 509}, {500, 17}, {17, 500}, {8, 9},  {9, 8},     {100, 100}};
    int32_t bi;
    TA_OMP(omp parallel for schedule(dynamic, 4))
    for (bi = 0; bi < N_BLOCKS_ALL * N_BLOCKS_ALL; ++bi) {
        tally tl;
        const int32_t bq = SPEC_BLOCK_MIN + bi / N_BLOCKS_ALL;
        const int32_t bk = SPEC_BLOCK_MIN + bi % N_BLOCKS_ALL;
        int si, v;
        memset(&tl, 0, sizeof tl);
        for (si = 0; si < lim->n_all_pairs; ++si)
            for (v = 0; v < 4; ++v) {
                const int32_t sq = sizes[si][0], sk = sizes[si][1];
                geom g = {sq, sk, bq, bk, 0, 0, v & 1, TA_TILING_FWD, 1, NO_WINDOW};
                ta_tiling t;
                char gbuf[160];
                if (v >= 2) { /* a conv these blocks admit, rotating with the pair */
                    const uint32_t k = (uint32_t)bi * 31u + (uint32_t)si;
                    g.pass = (int32_t)(k & 1u);
                    g.cq = 1 + (int32_t)(k % 16u);
                    g.ck = 1 + 2 * (int32_t)((k / 16u) % 16u);
                    while (spec_rows_eff(bq, g.cq, g.pass) < 1)
                        --g.cq;
                    while (spec_cols_eff(bk, g.ck, g.pass) < 1)
                        g.ck -= 2;
                }
                if (make(&g, &t) != TA_OK) {
                    report(&tl, CK_MAKE_STATUS, __LINE__, "%s: refused", GSTR(&g));
                    continue;
                }
                check_fields(&tl, &t, &g);
                check_skip_all(&tl, &t, &g, v == 0 ? sk : (sq * 13 + bi) % (sk + 1), 0, 0);
            }
        tally_merge(&tl);
    }
}

/* The spec mask vs ta_tiling_visible on every (r, j) around a small problem, the
 * interval shape the other checks rely on (spec_row_keys equals spec_mask point by
 * point), and ta_tile_row_keys on every row. No window for S_q, S_k <= pair_lit; every
 * pair of window bounds (N_WIN x N_WIN) for S_q, S_k <= win_pred, where the unbounded
 * side takes -1, -2 or INT32_MIN (any negative is no bound). */
static void group_visible(const limits *lim) {
    int32_t sq;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (sq = 1; sq <= lim->pair_lit; ++sq) {
        tally tl;
        int32_t sk, causal, kl, r, j;
        memset(&tl, 0, sizeof tl);
        for (sk = 1; sk <= lim->pair_lit; ++sk)
            for (causal = 0; causal < 2; ++causal)
                for (kl = 0; kl <= sk; ++kl) {
                    const int n_w = sq <= lim->win_pred && sk <= lim->win_pred ? N_WIN * N_WIN : 1;
                    int w;
                    for (w = 0; w < n_w; ++w) {
                        static const int32_t negs[3] = {-1, -2, INT32_MIN};
                        geom g = {sq, sk, 8, 8, 0, 0, causal, TA_TILING_FWD, 1, NO_WINDOW};
                        ta_tiling t;
                        char gbuf[160];
                        if (w > 0) {
                            g.wl = window_at(w / N_WIN, sq, sk);
                            g.wr = window_at(w % N_WIN, sq, sk);
                            if (g.wl < 0) g.wl = negs[(kl + w) % 3];
                            if (g.wr < 0) g.wr = negs[(kl + 2 * w) % 3];
                        }
                        if (make(&g, &t) != TA_OK) {
                            report(&tl, CK_MAKE_STATUS, __LINE__, "%s: refused", GSTR(&g));
                            continue;
                        }
                        if (w > 0) check_fields(&tl, &t, &g);
                        for (r = -2; r < sq + 2; ++r) {
                            int64_t l, h;
                            const int seen = spec_row_keys(&g, r, kl, &l, &h);
                            if (r >= 0 && r < sq) check_row_keys(&tl, &t, &g, r, kl, seen, l, h);
                            for (j = -2; j < sk + 2; ++j) {
                                const int v = spec_visible(&g, r, j, kl);
                                CHECK(&tl, CK_VISIBLE, ta_tiling_visible(&t, r, j, kl) == v,
                                      "%s key_len=%d: visible(%d,%d) = %d, spec %d", GSTR(&g),
                                      (int)kl, (int)r, (int)j, ta_tiling_visible(&t, r, j, kl), v);
                                CHECK(&tl, CK_VISIBLE, v == (seen && j >= l && j < h),
                                      "%s key_len=%d: row %d is not the interval [%lld,%lld) the "
                                      "test assumes",
                                      GSTR(&g), (int)kl, (int)r, (long long)l, (long long)h);
                            }
                        }
                    }
                }
        tally_merge(&tl);
    }
}

/* Log-uniform size in [lo, hi]. */
static int32_t rng_size(ta_rng *rng, int32_t lo, int32_t hi) {
    int32_t bits_hi = 0, bits;
    while (bits_hi < 30 && ((int64_t)2 << bits_hi) <= hi)
        ++bits_hi;
    bits = ta_rng_int(rng, 0, bits_hi);
    const int64_t top = min64(hi, ((int64_t)2 << bits) - 1);
    const int64_t bot = max64(lo, (int64_t)1 << bits);
    return bot > top ? lo : ta_rng_int(rng, (int32_t)bot, (int32_t)top);
}

/* A random valid geometry with sizes in [1, s_hi]. */
static void random_geom(geom *g, ta_rng *rng, int32_t s_hi) {
    const int32_t pass = ta_rng_int(rng, 0, 1);
    const axis_cfg rc = g_row_cfg[pass][ta_rng_int(rng, 0, g_n_row[pass] - 1)];
    const axis_cfg cc = g_col_cfg[pass][ta_rng_int(rng, 0, g_n_col[pass] - 1)];
    g->sq = rng_size(rng, 1, s_hi);
    g->sk = ta_rng_int(rng, 0, 3) == 0 ? g->sq : rng_size(rng, 1, s_hi);
    g->bq = rc.block;
    g->cq = rc.conv;
    g->bk = cc.block;
    g->ck = cc.conv;
    g->causal = ta_rng_int(rng, 0, 3) != 0;
    g->pass = pass;
    g->splits = ta_rng_int(rng, 1, 16);
    g->wl = g->wr = -1;
}

/* A random window bound for sizes S_q, S_k: one of window_at's, or log-uniform up to
 * twice the larger size. */
static int32_t random_window_bound(ta_rng *rng, int32_t sq, int32_t sk) {
    if (ta_rng_int(rng, 0, 2) != 0) return window_at(ta_rng_int(rng, 0, N_WIN - 1), sq, sk);
    return rng_size(rng, 1, (int32_t)min64(2 * max64(sq, sk), INT32_MAX));
}

/* One big geometry: fields, windowed directions (axes), sampled skip pairs, several key
 * lengths. */
static void check_big(tally *tl, const geom *g, ta_rng *rng, int axes) {
    char gbuf[160];
    ta_tiling t;
    axis ax;
    int st = make(g, &t), k;
    CHECK(tl, CK_MAKE_STATUS, st == TA_OK, "%s: ta_tiling_make = %d", GSTR(g), st);
    if (st != TA_OK) return;
    check_fields(tl, &t, g);
    if (axes) {
        axis_rows(&ax, &t, g);
        check_axis(tl, &t, &ax, g, MODE_WINDOW, NULL, rng);
        axis_cols(&ax, &t, g);
        check_axis(tl, &t, &ax, g, MODE_WINDOW, NULL, rng);
    }
    if (t.num_q_tiles != ceil_div(g->sq, t.rows_eff) || t.rows_eff < 1 || t.cols_eff < 1) return;
    for (k = 0; k < 4; ++k) {
        const int64_t key_len = k == 0   ? g->sk
                                : k == 1 ? 0
                                : k == 2 ? g->sk - 1
                                         : ta_rng_int(rng, 0, g->sk);
        check_skip_sampled(tl, &t, g, key_len, rng);
    }
}

/* E3: random geometries up to 2^20 (E7: with random windows, skip checks only). */
static void group_skip_sampled(int n, uint64_t seed, int windows) {
    int i;
    TA_OMP(omp parallel for schedule(dynamic, 4))
    for (i = 0; i < n; ++i) {
        tally tl;
        ta_rng rng;
        geom g;
        memset(&tl, 0, sizeof tl);
        ta_rng_seed(&rng, seed + (uint64_t)i * UINT64_C(0x632BE59BD9B4E019));
        random_geom(&g, &rng, 1 << 20);
        if (windows) {
            g.wl = random_window_bound(&rng, g.sq, g.sk);
            g.wr = random_window_bound(&rng, g.sq, g.sk);
        }
        check_big(&tl, &g, &rng, !windows);
        tally_merge(&tl);
    }
}

/* H. TA_SEQ_MAX and neighbours, against small and big partners. */
static void group_edges(const limits *lim, uint64_t seed) {
    static const int32_t sizes[] = {
        TA_SEQ_MAX, TA_SEQ_MAX - 1, TA_SEQ_MAX - 255, (1 << 29) + 3, 1, 2, 600};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    int32_t pi;
    TA_OMP(omp parallel for schedule(dynamic, 1))
    for (pi = 0; pi < n * n * 4; ++pi) {
        tally tl;
        ta_rng rng;
        const int32_t sq = sizes[pi / (n * 4)], sk = sizes[(pi / 4) % n];
        const int32_t causal = pi & 1, pass = (pi >> 1) & 1;
        int c, n_cfg;
        memset(&tl, 0, sizeof tl);
        ta_rng_seed(&rng, seed ^ (uint64_t)pi);
        if (sq < 1000 && sk < 1000) { /* covered by the exhaustive groups */
            tally_merge(&tl);
            continue;
        }
        n_cfg = g_n_row[pass] < lim->n_edge_cfg ? g_n_row[pass] : lim->n_edge_cfg;
        for (c = 0; c < n_cfg; ++c) { /* spread over every block and conv */
            const axis_cfg rc = g_row_cfg[pass][(int64_t)c * g_n_row[pass] / n_cfg];
            const axis_cfg cc = g_col_cfg[pass][(c * 11 + pi) % g_n_col[pass]];
            const geom g = {sq,      sk,     rc.block, cc.block,   rc.conv,
                            cc.conv, causal, pass,     1 + c % 16, NO_WINDOW};
            check_big(&tl, &g, &rng, 1);
            if (c < lim->n_edge_win) { /* the same with a window (skip checks only) */
                const int wp = (c * 5 + pi) % (N_WIN * N_WIN);
                geom gw = g;
                gw.wl = window_at(wp / N_WIN, sq, sk);
                gw.wr = window_at(wp % N_WIN, sq, sk);
                check_big(&tl, &gw, &rng, 0);
            }
        }
        tally_merge(&tl);
    }
}

/* F. split-K ranges. */
static void check_split(tally *tl, const ta_tiling *t, int32_t kb, int32_t ke) {
    int32_t s, prev = kb;
    for (s = 0; s < t->num_splits; ++s) {
        int32_t b = INT32_MIN, e = INT32_MIN;
        ta_tile_split_range(t, s, kb, ke, &b, &e);
        CHECK(tl, CK_SPLIT, b == prev && b <= e && e <= ke,
              "splits=%d range [%d,%d): part %d = [%d,%d), previous part ended at %d",
              (int)t->num_splits, (int)kb, (int)ke, (int)s, (int)b, (int)e, (int)prev);
        prev = e;
    }
    CHECK(tl, CK_SPLIT, prev == ke, "splits=%d range [%d,%d): parts end at %d, not %d",
          (int)t->num_splits, (int)kb, (int)ke, (int)prev, (int)ke);
}

static void group_split(const limits *lim) {
    tally tl;
    int32_t ns, kb;
    int64_t n;
    memset(&tl, 0, sizeof tl);
    for (ns = 1; ns <= 16; ++ns) {
        /* the largest tile counts: S = TA_SEQ_MAX with 2 effective columns per tile */
        const geom g = {TA_SEQ_MAX, TA_SEQ_MAX, 8, 8, 0, 7, 1, TA_TILING_FWD, ns, NO_WINDOW};
        ta_tiling t;
        static const int32_t big_begin[] = {0, 1, (1 << 28) - 3, (1 << 29) - 1};
        int i;
        if (make(&g, &t) != TA_OK) {
            report(&tl, CK_SPLIT, __LINE__, "splits=%d: make refused", (int)ns);
            continue;
        }
        for (kb = 0; kb <= 8; ++kb)
            for (n = 0; n <= lim->split_n; ++n)
                check_split(&tl, &t, kb, kb + (int32_t)n);
        CHECK(&tl, CK_FIELDS, t.num_k_tiles == (1 << 29), "splits=%d: %d k tiles, expected 2^29",
              (int)ns, (int)t.num_k_tiles);
        for (i = 0; i < 4; ++i) {
            const int32_t ends[3] = {t.num_k_tiles, t.num_k_tiles - 1, big_begin[i] + ns - 1};
            int e;
            for (e = 0; e < 3; ++e)
                if (big_begin[i] <= ends[e]) check_split(&tl, &t, big_begin[i], ends[e]);
        }
    }
    tally_merge(&tl);
}

/* G. defaults for every conv size the library accepts. */
static void group_defaults(void) {
    tally tl;
    int c;
    memset(&tl, 0, sizeof tl);
    for (c = 0; c <= (N_CONV_Q - 1) * (N_CONV_K - 1); ++c) {
        const int32_t cq = c == 0 ? 0 : conv_q_at(1 + (c - 1) / (N_CONV_K - 1));
        const int32_t ck = c == 0 ? 0 : conv_k_at(1 + (c - 1) % (N_CONV_K - 1));
        /* rule: the smallest power of two >= TA_BLOCK_DEFAULT whose backward
         * effective size is at least half the tile (capped at TA_BLOCK_MAX) */
        const int64_t halo_q = spec_rows_before(cq) + spec_rows_after(cq, TA_TILING_BWD);
        const int64_t halo_k = 2 * (int64_t)spec_cols_side(ck, TA_TILING_BWD);
        int32_t bq = -1, bk = -1, pass;
        int64_t want_q = TA_BLOCK_DEFAULT, want_k = TA_BLOCK_DEFAULT;
        while (want_q < TA_BLOCK_MAX && want_q - halo_q < want_q / 2)
            want_q *= 2;
        while (want_k < TA_BLOCK_MAX && want_k - halo_k < want_k / 2)
            want_k *= 2;
        ta_tiling_default_blocks(cq, ck, &bq, &bk);
        CHECK(&tl, CK_DEFAULTS, spec_is_block(bq) && spec_is_block(bk),
              "conv %dx%d: default blocks %d, %d not supported", (int)cq, (int)ck, (int)bq,
              (int)bk);
        CHECK(&tl, CK_DEFAULTS, bq == want_q && bk == want_k,
              "conv %dx%d: default blocks %d, %d; the rule gives %lld, %lld", (int)cq, (int)ck,
              (int)bq, (int)bk, (long long)want_q, (long long)want_k);
        for (pass = 0; pass < 2; ++pass) {
            const geom g = {1000, 999, bq, bk, cq, ck, 1, pass, 1, NO_WINDOW};
            ta_tiling t;
            char gbuf[160];
            const int st = make(&g, &t);
            CHECK(&tl, CK_DEFAULTS, st == TA_OK && t.rows_eff >= 1 && t.cols_eff >= 1,
                  "%s: default geometry refused (%d)", GSTR(&g), st);
        }
    }
    tally_merge(&tl);
}

/* I. the per-tile context. */

/* Strides of a [batch, heads, seq, dim] tensor, one of: contiguous (stated here, not
 * taken from the header), [B, S, H, D], padded, or arbitrary values up to 2^40 (the
 * context only multiplies; int32 truncation would show). */
static ta_strides random_strides(ta_rng *rng, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides s;
    const int64_t pad = ta_rng_int(rng, 1, 100);
    switch (ta_rng_int(rng, 0, 3)) {
    case 0:
        s.seq = dim;
        s.head = (int64_t)seq * dim;
        s.batch = s.head * heads;
        break;
    case 1:
        s.head = dim;
        s.seq = (int64_t)heads * dim;
        s.batch = s.seq * seq;
        break;
    case 2:
        s.seq = dim + pad;
        s.head = s.seq * seq + 3 * pad;
        s.batch = s.head * heads + 7 * pad;
        break;
    default:
        s.seq = (int64_t)(ta_rng_u64(rng) >> 24);
        s.head = (int64_t)(ta_rng_u64(rng) >> 24);
        s.batch = (int64_t)(ta_rng_u64(rng) >> 24);
        break;
    }
    return s;
}

static int64_t spec_slice(const ta_strides *s, int64_t b, int64_t h) {
    return b * s->batch + h * s->head;
}

/* Random geometries (half with a window), random GQA shapes and layouts, key lengths
 * from seqlens_k or S_k: for random and extreme (batch, query head, Q tile), every field
 * of ta_tile_context against the spec: offsets b*stride.batch + h*stride.head (kv head
 * h / group for k, v, dk, dv), lse (b*H + h)*S_q, and the K tile range equal to
 * ta_tile_k_begin/ta_tile_k_end. Also ta_strides_contiguous and ta_tiling_key_len. */
static void group_context(int n, uint64_t seed) {
    int i;
    TA_OMP(omp parallel for schedule(dynamic, 16))
    for (i = 0; i < n; ++i) {
        tally tl;
        ta_rng rng;
        geom g;
        ta_tiling t;
        ta_layout lay;
        int32_t seqlens[64];
        char gbuf[160];
        int s, use_seqlens, st;
        int32_t heads_kv, group, heads, batch, dim, dim_v;
        memset(&tl, 0, sizeof tl);
        ta_rng_seed(&rng, seed ^ ((uint64_t)i * UINT64_C(0xD1B54A32D192ED03)));
        random_geom(&g, &rng, 1 << 20);
        if (i & 1) {
            g.wl = random_window_bound(&rng, g.sq, g.sk);
            g.wr = random_window_bound(&rng, g.sq, g.sk);
        }
        st = make(&g, &t);
        CHECK(&tl, CK_MAKE_STATUS, st == TA_OK, "%s: ta_tiling_make = %d", GSTR(&g), st);
        if (st != TA_OK) {
            tally_merge(&tl);
            continue;
        }
        heads_kv = ta_rng_int(&rng, 1, 16);
        group = ta_rng_int(&rng, 1, 8);
        heads = heads_kv * group;
        batch = ta_rng_int(&rng, 1, 64);
        dim = ta_rng_int(&rng, 1, 512);
        dim_v = ta_rng_int(&rng, 1, 512);
        {
            const ta_strides cs = ta_strides_contiguous(heads, g.sq, dim);
            CHECK(&tl, CK_CONTEXT,
                  cs.seq == dim && cs.head == (int64_t)g.sq * dim &&
                      cs.batch == (int64_t)heads * g.sq * dim,
                  "ta_strides_contiguous(%d, %d, %d) = {%lld, %lld, %lld}", (int)heads, (int)g.sq,
                  (int)dim, (long long)cs.batch, (long long)cs.head, (long long)cs.seq);
        }
        lay.q = random_strides(&rng, heads, g.sq, dim);
        lay.k = random_strides(&rng, heads_kv, g.sk, dim);
        lay.v = random_strides(&rng, heads_kv, g.sk, dim_v);
        lay.o = random_strides(&rng, heads, g.sq, dim_v);
        lay.d_o = random_strides(&rng, heads, g.sq, dim_v);
        lay.dq = random_strides(&rng, heads, g.sq, dim);
        lay.dk = random_strides(&rng, heads_kv, g.sk, dim);
        lay.dv = random_strides(&rng, heads_kv, g.sk, dim_v);
        lay.q_hist = random_strides(&rng, heads, 4, dim); /* the MTA query history rows */
        use_seqlens = ta_rng_int(&rng, 0, 1);
        for (s = 0; s < batch; ++s)
            seqlens[s] = ta_rng_int(&rng, 0, 3) == 0 ? g.sk : ta_rng_int(&rng, 0, g.sk);
        for (s = 0; s < 8; ++s) {
            /* the first draws take the extremes: last batch entry, last head, last tile */
            const int32_t b = s == 0 ? batch - 1 : s == 1 ? 0 : ta_rng_int(&rng, 0, batch - 1);
            const int32_t h = s == 0 ? heads - 1 : s == 1 ? 0 : ta_rng_int(&rng, 0, heads - 1);
            const int32_t qt = s == 0   ? t.num_q_tiles - 1
                               : s == 1 ? 0
                                        : ta_rng_int(&rng, 0, t.num_q_tiles - 1);
            const int32_t hk = h / group; /* query head h reads kv head h / (H / H_kv) */
            const int32_t key_len = ta_tiling_key_len(&t, use_seqlens ? seqlens : NULL, b);
            ta_tile_ctx c;
            CHECK(&tl, CK_CONTEXT, key_len == (use_seqlens ? seqlens[b] : g.sk),
                  "%s: ta_tiling_key_len(b=%d) = %d, expected %d", GSTR(&g), (int)b, (int)key_len,
                  (int)(use_seqlens ? seqlens[b] : g.sk));
            memset(&c, 0xA5, sizeof c);
            ta_tile_context(&c, &t, &lay, heads, group, key_len, b, h, qt);
            CHECK(&tl, CK_CONTEXT,
                  c.batch == b && c.head == h && c.head_kv == hk && c.q_tile == qt &&
                      c.key_len == key_len,
                  "%s: context (b=%d h=%d qt=%d, group %d): batch/head/head_kv/q_tile/key_len "
                  "= %d/%d/%d/%d/%d, expected head_kv %d, key_len %d",
                  GSTR(&g), (int)b, (int)h, (int)qt, (int)group, (int)c.batch, (int)c.head,
                  (int)c.head_kv, (int)c.q_tile, (int)c.key_len, (int)hk, (int)key_len);
            CHECK(&tl, CK_CONTEXT,
                  c.k_begin == ta_tile_k_begin(&t, qt, key_len) &&
                      c.k_end == ta_tile_k_end(&t, qt, key_len),
                  "%s key_len=%d: context of q tile %d has k tiles [%d,%d), the functions [%d,%d)",
                  GSTR(&g), (int)key_len, (int)qt, (int)c.k_begin, (int)c.k_end,
                  (int)ta_tile_k_begin(&t, qt, key_len), (int)ta_tile_k_end(&t, qt, key_len));
            CHECK(&tl, CK_CONTEXT,
                  c.q == spec_slice(&lay.q, b, h) && c.o == spec_slice(&lay.o, b, h) &&
                      c.d_o == spec_slice(&lay.d_o, b, h) && c.dq == spec_slice(&lay.dq, b, h) &&
                      c.q_hist == spec_slice(&lay.q_hist, b, h),
                  "%s: context (b=%d h=%d): q/o/d_o/dq/q_hist offsets %lld/%lld/%lld/%lld/%lld, "
                  "expected %lld/%lld/%lld/%lld/%lld",
                  GSTR(&g), (int)b, (int)h, (long long)c.q, (long long)c.o, (long long)c.d_o,
                  (long long)c.dq, (long long)c.q_hist, (long long)spec_slice(&lay.q, b, h),
                  (long long)spec_slice(&lay.o, b, h), (long long)spec_slice(&lay.d_o, b, h),
                  (long long)spec_slice(&lay.dq, b, h), (long long)spec_slice(&lay.q_hist, b, h));
            CHECK(&tl, CK_CONTEXT,
                  c.k == spec_slice(&lay.k, b, hk) && c.v == spec_slice(&lay.v, b, hk) &&
                      c.dk == spec_slice(&lay.dk, b, hk) && c.dv == spec_slice(&lay.dv, b, hk),
                  "%s: context (b=%d h=%d kv head %d): k/v/dk/dv offsets %lld/%lld/%lld/%lld, "
                  "expected %lld/%lld/%lld/%lld",
                  GSTR(&g), (int)b, (int)h, (int)hk, (long long)c.k, (long long)c.v,
                  (long long)c.dk, (long long)c.dv, (long long)spec_slice(&lay.k, b, hk),
                  (long long)spec_slice(&lay.v, b, hk), (long long)spec_slice(&lay.dk, b, hk),
                  (long long)spec_slice(&lay.dv, b, hk));
            CHECK(&tl, CK_CONTEXT, c.lse == ((int64_t)b * heads + h) * g.sq,
                  "%s: context (b=%d h=%d, H=%d): lse offset %lld, expected %lld", GSTR(&g), (int)b,
                  (int)h, (int)heads, (long long)c.lse,
                  (long long)(((int64_t)b * heads + h) * g.sq));
        }
        tally_merge(&tl);
    }
}

/* ------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void timed(const char *name, double *t0) {
    const double t1 = now_s();
    printf("  %-40s %7.2f s\n", name, t1 - *t0);
    fflush(stdout);
    *t0 = t1;
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    /* s_exh s_exh_all pair_max pair_lit n_sampled n_sampled_all n_edge_cfg split_n n_all_pairs
     * win_pred win_lit win_max win_pairs n_win_sampled n_edge_win n_context */
    const limits full = {1100, 300, 256, 32, 64, 16,    500, 300,
                         16,   12,  16,  96, 13, 20000, 60,  20000};
    const limits small = {600, 100, 100, 16, 16, 4, 64, 64, 2, 8, 10, 40, 13, 2000, 16, 2000};
    const limits *lim = quick ? &small : &full;
    static const int32_t mid_sizes[] = {301, 384, 509, 600, 777, 1000};
    int32_t sampled[96], sampled_all[96];
    int n_sampled = 0, n_sampled_all = 0, k, c;
    axis_domain dense, every;
    uint64_t seed;
    ta_rng rng;
    double t0 = now_s(), start = t0;
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
        return 2;
    }
    seed = ta_test_seed("test_tiling");
    ta_rng_seed(&rng, seed);
    build_cfgs();
    /* sampled sizes: powers of two and neighbours, primes, log-uniform random */
    for (k = 10; k <= 20 && n_sampled + 3 <= lim->n_sampled; k += quick ? 5 : 1) {
        sampled[n_sampled++] = (1 << k) - 1;
        sampled[n_sampled++] = 1 << k;
        sampled[n_sampled++] = (1 << k) + 1;
    }
    sampled[n_sampled++] = 65521;
    sampled[n_sampled++] = 1048573;
    while (n_sampled < lim->n_sampled)
        sampled[n_sampled++] = rng_size(&rng, lim->s_exh + 1, 1 << 20);
    for (k = 0; k < n_sampled; ++k)
        if (sampled[k] <= lim->s_exh) sampled[k] = lim->s_exh + 1 + k;
    /* every block: sizes between the two exhaustive ranges, then every 4th sample */
    for (k = 0; k < (int)(sizeof mid_sizes / sizeof mid_sizes[0]); ++k)
        if (mid_sizes[k] > lim->s_exh_all) sampled_all[n_sampled_all++] = mid_sizes[k];
    for (k = 0; k < n_sampled && k / 4 < lim->n_sampled_all; k += 4)
        sampled_all[n_sampled_all++] = sampled[k];
    dense = (axis_domain){{g_row_dense[0], g_row_dense[1]},
                          {g_col_dense[0], g_col_dense[1]},
                          g_n_row_dense,
                          g_n_col_dense,
                          lim->s_exh,
                          sampled,
                          n_sampled,
                          1 << 16};
    every = (axis_domain){{g_row_cfg[0], g_row_cfg[1]},
                          {g_col_cfg[0], g_col_cfg[1]},
                          g_n_row,
                          g_n_col,
                          lim->s_exh_all,
                          sampled_all,
                          n_sampled_all,
                          0};
#ifdef _OPENMP
    printf("test_tiling: %s mode, %d OpenMP threads\n", quick ? "quick" : "full",
           omp_get_max_threads());
#else
    printf("test_tiling: %s mode, no OpenMP\n", quick ? "quick" : "full");
#endif
    printf("  rows/cols: every block 8..256: every S in 1..%d, %d sampled sizes up to 2^20 "
           "(windowed);\n  block subset:",
           (int)lim->s_exh_all, n_sampled_all);
    for (k = 0; k < N_BLOCKS; ++k)
        printf(" %d", (int)k_blocks[k]);
    printf(": every S in 1..%d, %d sampled sizes up to 2^20;\n  pairs: S_q,S_k <= %d "
           "(literal, every key length, <= %d)\n  windows: %d x %d bound pairs, S_q,S_k <= %d "
           "(literal, every key length and bound pair, <= %d; predicate <= %d)\n",
           (int)lim->s_exh, n_sampled, (int)lim->pair_max, (int)lim->pair_lit, N_WIN, N_WIN,
           (int)lim->win_max, (int)lim->win_lit, (int)lim->win_pred);
    {
        tally tl;
        memset(&tl, 0, sizeof tl);
        group_make(&tl);
        tally_merge(&tl);
    }
    timed("A. make: status and no-write", &t0);
    group_axis(1, &every, seed);
    timed("B1. rows, every block", &t0);
    group_axis(1, &dense, seed);
    timed("B2. rows, block subset, larger S", &t0);
    group_axis(0, &every, seed);
    timed("C1. cols, every block", &t0);
    group_axis(0, &dense, seed);
    timed("C2. cols, block subset, larger S", &t0);
    group_cross(lim);
    timed("D. cross: block subset x convs x passes", &t0);
    group_visible(lim);
    timed("E0. visibility predicate (+ windows)", &t0);
    group_skip_exhaustive(lim);
    timed("E1/E2. causal skip + transpose, all pairs", &t0);
    group_skip_sampled(quick ? 2000 : 20000, seed, 0);
    timed("E3. causal skip, sampled up to 2^20", &t0);
    group_skip_all_blocks(lim);
    timed("E4. causal skip, every block pair", &t0);
    group_skip_windows(lim);
    timed("E5/E6. windows, all pairs", &t0);
    group_skip_sampled(lim->n_win_sampled, seed ^ UINT64_C(0x5851F42D4C957F2D), 1);
    timed("E7. windows, sampled up to 2^20", &t0);
    group_split(lim);
    timed("F. split-K ranges", &t0);
    group_defaults();
    timed("G. default blocks", &t0);
    group_edges(lim, seed);
    timed("H. TA_SEQ_MAX edges (+ windows)", &t0);
    group_context(lim->n_context, seed);
    timed("I. per-tile context", &t0);
    printf("  %-14s %14s %10s\n", "check", "evaluations", "failures");
    for (c = 0; c < CK_COUNT; ++c) {
        printf("  %-14s %14llu %10llu\n", k_check_names[c], (unsigned long long)g_tally.evals[c],
               (unsigned long long)g_tally.fails[c]);
        TA_CHECK(g_tally.fails[c] == 0, "%llu failures of [%s]",
                 (unsigned long long)g_tally.fails[c], k_check_names[c]);
        TA_CHECK(g_tally.evals[c] > 0, "[%s] never evaluated", k_check_names[c]);
    }
    printf("  total %.2f s\n", now_s() - start);
    return ta_test_finish("test_tiling");
}
