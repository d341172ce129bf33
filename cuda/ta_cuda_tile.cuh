/*
 * Device building blocks of the exact-mode kernels (cuda/ta_cuda_sdpa_*.cu).
 * Not installed. docs/cuda.md has the drawings.
 *
 * Every kernel runs TA_CUDA_THREADS = 256 threads as a 16 x 16 grid,
 * tx = tid % 16, ty = tid / 16. A CUDA tile is 64 x 64 (rows x columns, or
 * columns x rows); each thread owns a 4 x 4 micro-tile of it, so the
 * micro-tile's row slot r is 4*ty + r and its column slot c is 4*tx + c.
 *
 * Exactness (docs/design.md 3): threads split independent outputs only. Every
 * output element is one register (or one shared-memory word) that runs its
 * scalar sequence of the reference alone, in the reference's order:
 *   - ta_cuda_dot_tile: for each (r, c), acc = 0; for f ascending:
 *     acc = fmaf(a[r][f], b[c][f], acc)          (ta_ref_dot)
 *   - the accumulations of the kernels: for each output (x, f), acc_xf =
 *     fmaf(coef_x[j], src[j][f], acc_xf) for j ascending, live j only (a
 *     select keeps acc when j is not live, so masked entries never enter,
 *     whatever bytes they hold).
 * Shared-memory chunking (features in chunks of 32, source rows in chunks of 16)
 * only decides when operands arrive, never the order of any sum.
 *
 * Shared-memory convention: every phase that writes a shared buffer starts
 * with __syncthreads(), so a buffer may be reused by the next phase without
 * the caller synchronising.
 */
#ifndef TA_CUDA_TILE_CUH
#define TA_CUDA_TILE_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "ta_cuda_params.cuh"
#include "ta_rope_load.h"

extern "C" {
#include "ta_internal.h"
#include "ta_math.h"
#include "ta_sum2.h"
}

#define TA_CUDA_THREADS 256 /* 16 x 16 threads per block */
#define TA_CUDA_TILE    64  /* rows / columns of a CUDA tile: 16 threads x 4 */
#define TA_CUDA_FCHUNK  32  /* features per shared-memory chunk of a dot tile */
#define TA_CUDA_LDT     68  /* row stride of a transposed [f][64] tile: 64 + 4 keeps 16-byte rows */
#define TA_CUDA_RCHUNK  16  /* source rows per shared-memory chunk of an accumulation */
#define TA_CUDA_SLOT    64  /* features per register slot: 16 threads x 4 */
#define TA_CUDA_SLOTS   4   /* at most 4 slots: 256 features = TA_HEAD_DIM_MAX */
#define TA_CUDA_NEG_INF_BITS 0xff800000u /* -inf: lse of a row that sees no key, m's start */
/* Entries of the forwards' key_lo / key_hi row arrays: 64 loaded rows, and
 * room for the MTA forward's effective rows, which start c_q - 1 <= 15 rows
 * further (their entries past the loaded rows are empty intervals). */
#define TA_CUDA_KEY_ROWS (TA_CUDA_TILE + TA_CONV_Q_MAX)

/* Floats of the dot-tile staging buffer: a [FCHUNK][LDT] tile for each operand,
 * then the element offsets of the two operands' tile rows (int64 [2][64],
 * written and read by dot tiles only). */
#define TA_CUDA_DOT_BUF (2 * TA_CUDA_FCHUNK * TA_CUDA_LDT + 2 * 2 * TA_CUDA_TILE)
/* Floats of an accumulation source chunk: [RCHUNK][SLOTS * SLOT]. */
#define TA_CUDA_SRC_BUF (TA_CUDA_RCHUNK * TA_CUDA_SLOTS * TA_CUDA_SLOT)
/* The staging buffer serves both phases. */
#define TA_CUDA_STAGE_BUF (TA_CUDA_DOT_BUF > TA_CUDA_SRC_BUF ? TA_CUDA_DOT_BUF : TA_CUDA_SRC_BUF)

static_assert(TA_CUDA_THREADS == 16 * 16, "16 x 16 thread grid");
static_assert(TA_CUDA_TILE == 16 * 4, "16 threads x 4 slots per tile side");
static_assert(TA_CUDA_LDT % 4 == 0 && TA_CUDA_LDT >= TA_CUDA_TILE, "float4 rows of a tile");
static_assert(TA_CUDA_SLOTS * TA_CUDA_SLOT >= TA_HEAD_DIM_MAX, "slots cover every head dim");
static_assert(TA_CUDA_SRC_BUF <= 2 * TA_CUDA_FCHUNK * TA_CUDA_LDT,
              "row staging stays clear of the dot tile's row offsets");

#define TA_CUDA_DEV static __device__ __forceinline__

/*
 * Shared-memory offset tables. A kernel's dynamic shared memory is one float
 * array cut into regions by one __host__ __device__ function per kernel (its
 * table): the launcher calls it to size the launch (and its largest need, for
 * the opt-in, ta_cuda_smem_opt_in), the kernel to carve, so the two cannot
 * disagree. ta_cuda_smem_take hands out the next region of `floats` floats at
 * *end and returns its offset; regions of a multiple of 4 floats keep the
 * next one 16-byte aligned (float4 access).
 */
static __host__ __device__ __forceinline__ int32_t ta_cuda_smem_take(int32_t *end, int32_t floats) {
    const int32_t off = *end;
    *end += floats;
    return off;
}

/*
 * The forwards' table (SDPA and MTA), offsets in floats:
 *
 *   +-------------------------+-------------------+--------------------+-----------+----------+
 *   | m_run l_run m_new alpha | s [s_floats]      | st [cols_cap][LDT] | stage     | w        |
 *   | [64] each               |                   |                    |           |          |
 *   | key_lo key_hi [80]      | MTA: raw S, 0 SDPA| scores/p, st[j][i] | STAGE_BUF | w_floats |
 *   | tile_lo tile_hi l_lo    |                   |                    |           |          |
 *   +-------------------------+-------------------+--------------------+-----------+----------+
 *
 * The row arrays come first, at offsets that do not depend on block_k: the
 * kernels address them from the one base register (measured: a register per
 * array otherwise). s_floats: 64 x s_ld for the MTA's raw scores, 0 for SDPA;
 * w_floats: the MTA's conv kernel (TA_CUDA_MTA_W_BUF), 0 for SDPA. key_lo,
 * key_hi [TA_CUDA_KEY_ROWS] (a loaded row's visible keys, absolute) and
 * tile_lo, tile_hi [64] (an effective row's visible columns of the current k
 * tile, relative) are int32. l_lo [64]: the lo word of l_run's pair
 * (src/ta_sum2.h).
 */
typedef struct ta_cuda_fwd_smem {
    int32_t s, st, stage, w, m_run, l_run, m_new, alpha, key_lo, key_hi, tile_lo, tile_hi, l_lo;
    int32_t floats; /* total */
} ta_cuda_fwd_smem;

static __host__ __device__ __forceinline__ ta_cuda_fwd_smem
ta_cuda_fwd_smem_make(int32_t cols_cap, int32_t s_floats, int32_t w_floats) {
    ta_cuda_fwd_smem m;
    int32_t end = 0;
    m.m_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.l_run = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.m_new = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.alpha = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.key_lo = ta_cuda_smem_take(&end, TA_CUDA_KEY_ROWS);
    m.key_hi = ta_cuda_smem_take(&end, TA_CUDA_KEY_ROWS);
    m.tile_lo = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.tile_hi = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.l_lo = ta_cuda_smem_take(&end, TA_CUDA_TILE);
    m.s = ta_cuda_smem_take(&end, s_floats);
    m.st = ta_cuda_smem_take(&end, cols_cap * TA_CUDA_LDT);
    m.stage = ta_cuda_smem_take(&end, TA_CUDA_STAGE_BUF);
    m.w = ta_cuda_smem_take(&end, w_floats);
    m.floats = end;
    return m;
}

/* Loaded columns of a forward k tile rounded up to whole dot tiles of 64:
 * the score tile's capacity. */
static __host__ __device__ __forceinline__ int32_t ta_cuda_fwd_cols_cap(const ta_tiling *t) {
    return (t->block_k + TA_CUDA_TILE - 1) / TA_CUDA_TILE * TA_CUDA_TILE;
}

/* ---- Storage dtype access: widening and rounding are the shared ta_math.h ones. */
template <int DT> TA_CUDA_DEV float ta_cuda_load(const void *base, size_t idx) {
    if (DT == TA_F16) return ta_f16_to_f32(static_cast<const uint16_t *>(base)[idx]);
    if (DT == TA_BF16) return ta_bf16_to_f32(static_cast<const uint16_t *>(base)[idx]);
    return static_cast<const float *>(base)[idx];
}

template <int DT> TA_CUDA_DEV void ta_cuda_store(void *base, size_t idx, float x) {
    if (DT == TA_F16)
        static_cast<uint16_t *>(base)[idx] = ta_f32_to_f16(x);
    else if (DT == TA_BF16)
        static_cast<uint16_t *>(base)[idx] = ta_f32_to_bf16(x);
    else
        static_cast<float *>(base)[idx] = x;
}

/*
 * The mask: the visible keys [*lo, *hi) of query row r, the descriptor's
 * ta_tile_row_keys (causal, seqlens_k, sliding window); a row outside
 * [-q_history, S_q) (a halo row above the query history rows, or past the
 * last row) sees none, (0, 0). ta_tiling_visible(t, r, j, key_len)
 * is true exactly for lo <= j < hi.
 */
TA_CUDA_DEV void ta_cuda_row_keys(const ta_tiling *t, int32_t r, int32_t key_len, int32_t *lo,
                                  int32_t *hi) {
    *lo = 0;
    *hi = 0;
    if (r >= -t->q_history && r < t->seq_q) ta_tile_row_keys(t, r, key_len, lo, hi);
}

/*
 * A row's visible columns of the keys [col0, col0 + cols), relative to col0:
 * [*b, *e) = [max(lo, col0), min(hi, col0 + cols)) - col0 for the row's keys
 * [lo, hi); (0, 0) when empty. The entries outside are skipped, never added
 * as zeros (exactly where the reference skips them).
 */
TA_CUDA_DEV void ta_cuda_tile_cols(int32_t lo, int32_t hi, int32_t col0, int32_t cols, int32_t *b,
                                   int32_t *e) {
    const int32_t jb = ta_tiling_max_i32(lo - col0, 0), je = ta_tiling_min_i32(hi - col0, cols);
    *b = jb < je ? jb : 0;
    *e = jb < je ? je : 0;
}

/*
 * Compile-time "no left bound": without a window's left bound (t.window_left
 * < 0) every row's interval starts at key 0 (ta_tile_row_keys), so a kernel
 * instantiated with WL = false takes lo = 0 and tests only hi, as the CPU
 * backend does with nlo = NULL. WL = true reads the stored bound. The launchers
 * pick the instantiation from the tiling (ta_cuda_left_bounded); only the
 * control flow differs, never the arithmetic.
 */
template <bool WL> TA_CUDA_DEV int32_t ta_cuda_lo(const int32_t *lo, int32_t i) {
    return WL ? lo[i] : 0;
}
/* Key j (absolute, any sign) in a row's interval [lo, hi) (0 <= lo <= hi).
 * !WL: lo is 0, so one unsigned compare tests 0 <= j < hi. */
template <bool WL> TA_CUDA_DEV bool ta_cuda_in(int32_t j, int32_t lo, int32_t hi) {
    return WL ? j >= lo && j < hi : (uint32_t)j < (uint32_t)hi;
}

/* Element offset of row r of a slice that starts at `slice`, rows `seq`
 * elements apart (a ta_strides seq stride): the product in 64 bits (a stride
 * times a row can pass 2^31). Only for rows inside the sequence (a halo row
 * may lie outside it and is never addressed). */
TA_CUDA_DEV int64_t ta_cuda_row(int64_t slice, int64_t seq, int32_t r) {
    return slice + (int64_t)r * seq;
}

/*
 * A paged k / v as the exact forwards see it: the parameters (block table,
 * page size, pool pages) and the tile's context (its batch entry), both in
 * memory that costs no register to hold (the parameter space, ctx_s in
 * shared memory) and read where a row is addressed. p NULL: not paged, at
 * compile time (every caller but the forwards' k and v loads passes
 * ta_cuda_kv_pages{} and gets the code it had); p set: paged if
 * p->block_table is, one uniform run-time branch per row, no instantiation
 * of its own.
 */
typedef struct ta_cuda_kv_pages {
    const ta_cuda_params *p;
    const ta_tile_ctx *c;
} ta_cuda_kv_pages;

TA_CUDA_DEV ta_cuda_kv_pages ta_cuda_kv_pages_of(const ta_cuda_params &p, const ta_tile_ctx &c) {
    ta_cuda_kv_pages pg;
    pg.p = &p;
    pg.c = &c;
    return pg;
}

TA_CUDA_DEV bool ta_cuda_paged(const ta_cuda_kv_pages &pg) { return pg.p && pg.p->block_table; }

/* Element offset of key j's row of a k or v slice: ta_cuda_row, or when
 * paged the key's pool row (ta_cuda_page_row; the slice offset is then the
 * kv head's: the pool has no batch stride). */
TA_CUDA_DEV int64_t ta_cuda_kv_row(int64_t slice, int64_t seq, int32_t j,
                                   const ta_cuda_kv_pages &pg) {
    if (!ta_cuda_paged(pg)) return ta_cuda_row(slice, seq, j);
    return slice + ta_cuda_page_row(ta_cuda_pages_of(*pg.p, pg.c->batch), j) * seq;
}

/*
 * Rows of one (batch, head) slice of a tensor: feature f of row r is element
 * slice + r * ld + f of base (ta_tile_ctx offset, ta_layout seq stride; the
 * product in 64 bits, ta_cuda_row). Only rows inside the sequence are
 * addressed.
 */
typedef struct ta_cuda_rows {
    const void *base;
    int64_t slice, ld;
} ta_cuda_rows;

TA_CUDA_DEV ta_cuda_rows ta_cuda_rows_of(const void *base, int64_t slice, int64_t ld) {
    ta_cuda_rows x;
    x.base = base;
    x.slice = slice;
    x.ld = ld;
    return x;
}

/* A thread's register block of a 64 x (NS x 64) accumulator tile (rows or
 * keys 4ty+r, features s*64 + 4tx + e), set to +0. */
template <int NS> TA_CUDA_DEV void ta_cuda_acc_zero(float (&acc)[4][NS][4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[r][s][e] = 0.0f;
}

/* The backward's chunk partials into their pairs (src/ta_sum2.h, alpha = 1):
 * (hi, lo) = (hi, lo) + part, then part = +0, every element. */
template <int NS>
TA_CUDA_DEV void ta_cuda_acc_sum2(float (&hi)[4][NS][4], float (&lo)[4][NS][4],
                                  float (&part)[4][NS][4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                ta_sum2_add(&hi[r][s][e], &lo[r][s][e], 1.0f, part[r][s][e]);
                part[r][s][e] = 0.0f;
            }
}

/* Thread coordinates in the 16 x 16 grid. */
TA_CUDA_DEV int ta_cuda_tx(void) { return (int)(threadIdx.x & 15u); }
TA_CUDA_DEV int ta_cuda_ty(void) { return (int)(threadIdx.x >> 4); }

/*
 * The rotary load stage (docs/rope.md, "The load stage"; docs/cuda.md section
 * 7): q and k rows turn by src/ta_rope_load.h's ta_rope_pair in f32 as they
 * are widened into shared memory, every time a kernel loads them (no turned
 * copy is written), and the f32 dq and dk rows turn back by ta_rope_pair_t
 * before the final scale and the store: REF's ta_ref_rope_rows and
 * ta_ref_rope_grad, the same products and sums on the same values. Decided
 * once per plan: the kernels' ROPE template flag (the launchers pick it from
 * plan->stages.load, ta_cuda_pick_plan) passes a ta_cuda_rope_src to the
 * staging functions, or NULL, which leaves the plain loops, the code of the
 * kernels without the stage.
 *
 * Positions are device memory the host never reads: one outside [0,
 * rope_rows) is clamped into the table (docs/rope.md, "On CUDA").
 */
#define TA_CUDA_ROPE_OFF (-1) /* a row source that does not turn */
#define TA_CUDA_ROPE_Q   0    /* the q side: positions pos_q, S_q */
#define TA_CUDA_ROPE_K   1    /* the k side: positions pos_k, S_k */

/* Where the turned rows of a call come from: the parameters (tables,
 * positions, pairing) and the tile's context (batch entry, kv head: the
 * table every query head of the group shares), in shared memory, read where
 * used; side_a, side_b: the sides of a dot tile's two operands; for
 * ta_cuda_stage_rows, slots [0, slots) hold rows of side_a (the dk/dv
 * kernels' q slots come first; the dq kernel's k slots are all). */
typedef struct ta_cuda_rope_src {
    const ta_cuda_params *p;
    const ta_tile_ctx *c;
    int32_t side_a, side_b, slots;
} ta_cuda_rope_src;

TA_CUDA_DEV ta_cuda_rope_src ta_cuda_rope_of(const ta_cuda_params &p, const ta_tile_ctx &c,
                                             int32_t side_a, int32_t side_b, int32_t slots = 0) {
    ta_cuda_rope_src r;
    r.p = &p;
    r.c = &c;
    r.side_a = side_a;
    r.side_b = side_b;
    r.slots = slots;
    return r;
}

/* Floats from the start of cos (and sin) to the table row of token t of a
 * side of batch entry b, kv head h_kv: pos[b S + t], or t; for a query
 * history row t < 0 (the MTA forward's), row 0's + t (ta_rope_token_row);
 * clamped into the table. */
TA_CUDA_DEV int64_t ta_cuda_rope_at(const ta_cuda_params &p, int32_t side, int32_t b, int32_t h_kv,
                                    int32_t t) {
    const int32_t *pos = side == TA_CUDA_ROPE_K ? p.rope_args.pos_k : p.rope_args.pos_q;
    const int32_t seq = side == TA_CUDA_ROPE_K ? p.t.seq_k : p.t.seq_q;
    const int32_t t0 = t < 0 ? 0 : t;
    int32_t row = pos ? __ldg(pos + (int64_t)b * seq + t0) : t0;
    row = row < 0 ? 0 : row >= p.rope_rows ? p.rope_rows - 1 : row; /* no overflow below */
    row = ta_rope_token_row(row, t);
    row = row < 0 ? 0 : row;
    return (int64_t)h_kv * p.rope_head_stride + (int64_t)row * p.rope_row_stride;
}

/* Feature f's pair: pair index *i, its a and b features (interleaved: 2i,
 * 2i + 1; half-split: i, i + n). f < 2 rope_pairs. */
TA_CUDA_DEV void ta_cuda_rope_pair_of(const ta_cuda_params &p, int32_t f, int32_t *i, int32_t *fa,
                                      int32_t *fb) {
    const int32_t n = p.rope_pairs;
    if (p.rope == TA_ROPE_HALF) {
        *i = f < n ? f : f - n;
        *fa = *i;
        *fb = *i + n;
    } else {
        *i = f >> 1;
        *fa = 2 * *i;
        *fb = *fa + 1;
    }
}

/* Feature f of a row (element `row` of base is its feature 0) as the load
 * stage leaves it: widened, and for f < 2 rope_pairs its pair turned by
 * ta_rope_pair with table row `at`. The partner is read from the row too
 * (global memory: each thread turns the features it stages). */
template <int DT>
TA_CUDA_DEV float ta_cuda_rope_load(const ta_cuda_params &p, const void *base, int64_t row,
                                    int32_t f, int64_t at) {
    int32_t i, fa, fb;
    float a, b;
    if (f >= 2 * p.rope_pairs) return ta_cuda_load<DT>(base, (size_t)(row + f));
    ta_cuda_rope_pair_of(p, f, &i, &fa, &fb);
    a = ta_cuda_load<DT>(base, (size_t)(row + fa));
    b = ta_cuda_load<DT>(base, (size_t)(row + fb));
    ta_rope_pair(&a, &b, __ldg(p.rope_args.cos + at + i), __ldg(p.rope_args.sin + at + i));
    return f == fa ? a : b;
}

/* Feature f of row `row` of base (its feature 0's element) as a kernel
 * stages it: with ROT and a side (TA_CUDA_ROPE_Q, _K), turned
 * (ta_cuda_rope_load; token t of the side, batch entry and kv head of c),
 * else widened. */
template <int DT, bool ROT>
TA_CUDA_DEV float ta_cuda_load_row(const void *base, int64_t row, int32_t f,
                                   const ta_cuda_params *p, const ta_tile_ctx *c, int32_t side,
                                   int32_t t) {
    if (ROT && side != TA_CUDA_ROPE_OFF)
        return ta_cuda_rope_load<DT>(*p, base, row, f,
                                     ta_cuda_rope_at(*p, side, c->batch, c->head_kv, t));
    return ta_cuda_load<DT>(base, (size_t)(row + f));
}

/* Feature f of a gradient row g (f32, shared memory, feature d at g[d])
 * turned back: for f < 2 rope_pairs its pair through ta_rope_pair_t with
 * table row `at`. */
TA_CUDA_DEV float ta_cuda_rope_grad_at(const ta_cuda_params &p, const float *g, int32_t f,
                                       int64_t at) {
    int32_t i, fa, fb;
    float a, b;
    if (f >= 2 * p.rope_pairs) return g[f];
    ta_cuda_rope_pair_of(p, f, &i, &fa, &fb);
    a = g[fa];
    b = g[fb];
    ta_rope_pair_t(&a, &b, __ldg(p.rope_args.cos + at + i), __ldg(p.rope_args.sin + at + i));
    return f == fa ? a : b;
}

/*
 * The backward's turn of 64 gradient rows (dq or dk) before the store, in
 * four passes of 16 rows through xbuf [RCHUNK][SLOTS * SLOT] (the staging
 * buffer's row part: TA_CUDA_SRC_BUF floats, clear of a dot tile's row
 * offsets). A thread holds rows 4ty + r, features 64 slot + 4tx + e of its
 * register blocks; a pair's partner may be in another thread (half-split) or
 * another slot, so every block of the row goes through xbuf first:
 *   pass q: __syncthreads(); the threads of rows [16q, 16q + 16) (ty / 4 == q)
 *   put their blocks (ta_cuda_rope_grad_put, each block with its slot);
 *   __syncthreads(); they read them back turned (ta_cuda_rope_grad_get).
 * Every slot of a row's D features must be put by some block of the CUDA
 * block (the launchers keep a row's dk / dq slots in one block).
 */
TA_CUDA_DEV size_t ta_cuda_rope_xrow(int r) {
    return (size_t)(4 * (ta_cuda_ty() & 3) + r) * (TA_CUDA_SLOTS * TA_CUDA_SLOT);
}

template <int NS>
TA_CUDA_DEV void ta_cuda_rope_grad_put(float *xbuf, const float (&g)[4][NS][4], int32_t slot0) {
    const int tx = ta_cuda_tx();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < NS; ++s)
            *reinterpret_cast<float4 *>(xbuf + ta_cuda_rope_xrow(r) + (slot0 + s) * TA_CUDA_SLOT +
                                        4 * tx) =
                make_float4(g[r][s][0], g[r][s][1], g[r][s][2], g[r][s][3]);
}

/* Rows 4ty + r < rows are token row0 + 4ty + r of `side`; features past dim
 * are left alone. */
template <int NS>
TA_CUDA_DEV void ta_cuda_rope_grad_get(const ta_cuda_params &p, const float *xbuf,
                                       float (&g)[4][NS][4], int32_t slot0, int32_t dim,
                                       int32_t side, const ta_tile_ctx &c, int32_t row0,
                                       int32_t rows) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float *xr = xbuf + ta_cuda_rope_xrow(r);
        int64_t at;
        if (4 * ty + r >= rows) continue;
        at = ta_cuda_rope_at(p, side, c.batch, c.head_kv, row0 + 4 * ty + r);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = (slot0 + s) * TA_CUDA_SLOT + 4 * tx + e;
                if (f < dim) g[r][s][e] = ta_cuda_rope_grad_at(p, xr, f, at);
            }
    }
}

/* The common case: one register block g whose slots s < n_grad (slot0 + s
 * the feature slot) are every slot of the gradient rows. */
template <int NS>
TA_CUDA_DEV void ta_cuda_rope_grad_block(const ta_cuda_params &p, float *xbuf, float (&g)[4][NS][4],
                                         int32_t dim, int32_t side, const ta_tile_ctx &c,
                                         int32_t row0, int32_t rows) {
    for (int q = 0; q < 4; ++q) {
        __syncthreads(); /* the previous phase (pass) is done with xbuf */
        if ((ta_cuda_ty() >> 2) == q) ta_cuda_rope_grad_put<NS>(xbuf, g, 0);
        __syncthreads();
        if ((ta_cuda_ty() >> 2) == q)
            ta_cuda_rope_grad_get<NS>(p, xbuf, g, 0, dim, side, c, row0, rows);
    }
}

/* The 16 fused multiply-adds of one feature step of a 4 x 4 micro-tile. */
TA_CUDA_DEV void ta_cuda_fma_4x4(float acc[4][4], const float4 a, const float4 b) {
    const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
}

/* One feature chunk [f0, f0 + nf) of a dot tile's operands into sa, sb
 * ([FCHUNK][LDT], transposed) with the rotary stage: rows of a side turn
 * (ta_cuda_load_row), the query history rows too (HIST: A's rows a_row0 +
 * row < 0, by row 0's table row + that row, ta_cuda_rope_at). The plain
 * chunk is the loop in ta_cuda_dot_tile_range. */
template <int DT, bool HIST>
TA_CUDA_DEV void
ta_cuda_dot_stage_rope(float *sa, float *sb, const int64_t *offs, const ta_cuda_rows &a,
                       const ta_cuda_rows &b, int32_t f0, int nf, const ta_cuda_rows *a_hist,
                       const ta_cuda_rope_src *rope, int32_t a_row0, int32_t b_row0) {
    for (int e = (int)threadIdx.x; e < TA_CUDA_TILE * TA_CUDA_FCHUNK; e += TA_CUDA_THREADS) {
        const int row = e / TA_CUDA_FCHUNK, f = e % TA_CUDA_FCHUNK;
        const int64_t oa = offs[row], ob = offs[TA_CUDA_TILE + row];
        float va = 0.0f, vb = 0.0f;
        if (f < nf) {
            if (oa >= 0)
                va = ta_cuda_load_row<DT, true>(a.base, oa, f0 + f, rope->p, rope->c, rope->side_a,
                                                a_row0 + row);
            if (HIST && oa < -1)
                va = ta_cuda_load_row<DT, true>(a_hist->base, -2 - oa, f0 + f, rope->p, rope->c,
                                                rope->side_a, a_row0 + row);
            if (ob >= 0)
                vb = ta_cuda_load_row<DT, true>(b.base, ob, f0 + f, rope->p, rope->c, rope->side_b,
                                                b_row0 + row);
        }
        sa[f * TA_CUDA_LDT + row] = va;
        sb[f * TA_CUDA_LDT + row] = vb;
    }
}

/*
 * One 64 x 64 tile of dot products over n features, rows in a range:
 *
 *   acc[r][c] = dot(A[4*ty + r], B[4*tx + c], n)      (ta_ref_dot: +0, fmaf, f ascending)
 *
 * A tile row x (0 <= x < 64) is row a_row0 + x of the slice a if a_lo <= x <
 * a_hi; other rows are not read (they give 0 and must not be used; a_row0 + x
 * may be negative there, as for the MTA halos above row 0). Likewise B with
 * b_row0, b_lo, b_hi. With HIST (the MTA forward's query history rows), A
 * tile rows x in [a_hist_lo, a_lo) are row a_row0 + x of *a_hist instead (a
 * negative row: a_hist's slice is placed so that row -q_history is its first;
 * their offsets are kept as -2 - offset). Operands are staged through stage[TA_CUDA_DOT_BUF] in
 * chunks of TA_CUDA_FCHUNK features,
 * transposed ([f][row], stride LDT) so a thread reads its 4 rows as one
 * float4. Warps read global memory along f (coalesced); the transposing stores
 * have 4-way bank conflicts, once per element per chunk, against 64 float4
 * reads of it. The element offset of each tile row (64-bit: slice + row *
 * stride; with b_pages, B's rows are keys of a paged k, ta_cuda_kv_row) is
 * formed once per call into the staging buffer and read back per chunk:
 * held in registers, the 16 row addresses a thread stages were measured to
 * spill (ptxas, docs/cuda.md section 3).
 */
template <int DT, bool HIST = false>
TA_CUDA_DEV void
ta_cuda_dot_tile_range(float acc[4][4], const ta_cuda_rows &a, int32_t a_row0, int32_t a_lo,
                       int32_t a_hi, const ta_cuda_rows &b, int32_t b_row0, int32_t b_lo,
                       int32_t b_hi, int32_t n, float *stage, const ta_cuda_rows *a_hist = nullptr,
                       int32_t a_hist_lo = 0, const ta_cuda_rope_src *rope = nullptr,
                       const ta_cuda_kv_pages &b_pages = ta_cuda_kv_pages{}) {
    float *sa = stage, *sb = stage + TA_CUDA_FCHUNK * TA_CUDA_LDT;
    /* [2][64]: element of feature 0 of A's, then B's tile rows; -1: not read */
    int64_t *offs = reinterpret_cast<int64_t *>(stage + 2 * TA_CUDA_FCHUNK * TA_CUDA_LDT);
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c)
            acc[r][c] = 0.0f;
    /* offs is touched by dot tiles only (row staging stays below it), and the
     * previous dot tile's last reads of it precede that tile's second
     * barrier: no barrier before these writes; the first chunk's publishes them */
    if (tid < TA_CUDA_TILE) {
        offs[tid] = tid >= a_lo && tid < a_hi ? ta_cuda_row(a.slice, a.ld, a_row0 + tid) : -1;
        if (HIST && tid >= a_hist_lo && tid < a_lo)
            offs[tid] = -2 - ta_cuda_row(a_hist->slice, a_hist->ld, a_row0 + tid);
    } else if (tid < 2 * TA_CUDA_TILE)
        offs[tid] = tid - TA_CUDA_TILE >= b_lo && tid - TA_CUDA_TILE < b_hi
                        ? ta_cuda_kv_row(b.slice, b.ld, b_row0 + tid - TA_CUDA_TILE, b_pages)
                        : -1;
    for (int32_t f0 = 0; f0 < n; f0 += TA_CUDA_FCHUNK) {
        const int nf = (int)ta_tiling_min_i32(TA_CUDA_FCHUNK, n - f0);
        __syncthreads(); /* the previous chunk is done with stage; offs published */
        if (rope) {
            ta_cuda_dot_stage_rope<DT, HIST>(sa, sb, offs, a, b, f0, nf, a_hist, rope, a_row0,
                                             b_row0);
        } else {
            for (int e = tid; e < TA_CUDA_TILE * TA_CUDA_FCHUNK; e += TA_CUDA_THREADS) {
                const int row = e / TA_CUDA_FCHUNK, f = e % TA_CUDA_FCHUNK;
                const int64_t oa = offs[row], ob = offs[TA_CUDA_TILE + row];
                float va = 0.0f, vb = 0.0f;
                if (f < nf) {
                    if (oa >= 0) va = ta_cuda_load<DT>(a.base, (size_t)(oa + f0 + f));
                    if (HIST && oa < -1)
                        va = ta_cuda_load<DT>(a_hist->base, (size_t)(-2 - oa + f0 + f));
                    if (ob >= 0) vb = ta_cuda_load<DT>(b.base, (size_t)(ob + f0 + f));
                }
                sa[f * TA_CUDA_LDT + row] = va;
                sb[f * TA_CUDA_LDT + row] = vb;
            }
        }
        __syncthreads();
        if (nf == TA_CUDA_FCHUNK) {
#pragma unroll 8
            for (int f = 0; f < TA_CUDA_FCHUNK; ++f)
                ta_cuda_fma_4x4(acc, *reinterpret_cast<const float4 *>(sa + f * TA_CUDA_LDT + 4 * ty),
                                *reinterpret_cast<const float4 *>(sb + f * TA_CUDA_LDT + 4 * tx));
        } else {
            for (int f = 0; f < nf; ++f)
                ta_cuda_fma_4x4(acc, *reinterpret_cast<const float4 *>(sa + f * TA_CUDA_LDT + 4 * ty),
                                *reinterpret_cast<const float4 *>(sb + f * TA_CUDA_LDT + 4 * tx));
        }
    }
}

/* The common case: rows [a_row0, a_row0 + a_rows) of A and [b_row0, b_row0 +
 * b_rows) of B, all inside their sequences. */
template <int DT>
TA_CUDA_DEV void ta_cuda_dot_tile(float acc[4][4], const ta_cuda_rows &a, int32_t a_row0,
                                  int32_t a_rows, const ta_cuda_rows &b, int32_t b_row0,
                                  int32_t b_rows, int32_t n, float *stage,
                                  const ta_cuda_rope_src *rope = nullptr,
                                  const ta_cuda_kv_pages &b_pages = ta_cuda_kv_pages{}) {
    ta_cuda_dot_tile_range<DT>(acc, a, a_row0, 0, a_rows, b, b_row0, 0, b_rows, n, stage, nullptr,
                               0, rope, b_pages);
}

/* Where the features of register slot s come from: the rows of a tensor
 * slice, row length (D or D_v) and first feature. Features at or past row_len
 * are padding. Kernels keep their slots in shared memory and re-point them
 * (a new slice) after a barrier. */
typedef struct ta_cuda_slot {
    ta_cuda_rows src;
    int32_t row_len;
    int32_t feat0;
} ta_cuda_slot;

TA_CUDA_DEV ta_cuda_slot ta_cuda_slot_of(const ta_cuda_rows &src, int32_t row_len, int32_t feat0) {
    ta_cuda_slot s;
    s.src = src;
    s.row_len = row_len;
    s.feat0 = feat0;
    return s;
}

/* Element offset of row x of a staged chunk of a slot's slice: row first_row
 * + x, or with pool_row (a paged v) its pool row pool_row[x]. */
TA_CUDA_DEV int64_t ta_cuda_chunk_row(const ta_cuda_rows &src, int32_t first_row, int32_t x,
                                      const int64_t *pool_row) {
    return pool_row ? src.slice + pool_row[x] * src.ld
                    : ta_cuda_row(src.slice, src.ld, first_row + x);
}

/*
 * Stage rows [first_row, first_row + rows) (rows <= RCHUNK, inside the
 * sequence) of the slots' features into dst[RCHUNK][NS * SLOT]: dst[x][s*64 +
 * f] = slot s's slice at row first_row + x (ta_cuda_chunk_row; PAGED: at
 * pool_row[x]), feature feat0 + f; 0 past the row length or past rows; ROT:
 * slots [0, rope->slots) turned as rows of side rope->side_a
 * (ta_cuda_load_row). Consecutive threads read consecutive features
 * (coalesced).
 */
template <int DT, int NS, bool ROT, bool PAGED>
TA_CUDA_DEV void ta_cuda_stage_rows_loop(float *dst, const ta_cuda_slot *slots, int32_t first_row,
                                         int32_t rows, const ta_cuda_rope_src *rope,
                                         const int64_t *pool_row) {
    const int width = NS * TA_CUDA_SLOT;
    for (int e = (int)threadIdx.x; e < TA_CUDA_RCHUNK * width; e += TA_CUDA_THREADS) {
        const int x = e / width, col = e % width, s = col / TA_CUDA_SLOT;
        const int32_t f = slots[s].feat0 + col % TA_CUDA_SLOT;
        float val = 0.0f;
        if (x < rows && f < slots[s].row_len)
            val = ta_cuda_load_row<DT, ROT>(
                slots[s].src.base,
                ta_cuda_chunk_row(slots[s].src, first_row, x, PAGED ? pool_row : nullptr), f,
                ROT ? rope->p : nullptr, ROT ? rope->c : nullptr,
                ROT && s < rope->slots ? rope->side_a : TA_CUDA_ROPE_OFF, first_row + x);
        dst[e] = val;
    }
}

/* ... with the rotary stage on slots [0, rope->slots), rows of side
 * rope->side_a (NULL: none turn); pages: the rows are keys of a paged v when
 * ta_cuda_paged (the forwards' V slots): their pool rows first, one thread
 * per row, into shared memory (a barrier), so that the loop costs one shared
 * load per element, not a table lookup. */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_stage_rows(float *dst, const ta_cuda_slot *slots, int32_t first_row,
                                    int32_t rows, const ta_cuda_rope_src *rope = nullptr,
                                    const ta_cuda_kv_pages &pages = ta_cuda_kv_pages{}) {
    const int64_t *pool_row = nullptr;
    __syncthreads(); /* the previous phase is done with dst (and the pool rows) */
    if (ta_cuda_paged(pages)) {
        __shared__ int64_t pool_rows[TA_CUDA_RCHUNK];
        if ((int)threadIdx.x < rows)
            pool_rows[threadIdx.x] = ta_cuda_kv_row(0, 1, first_row + (int32_t)threadIdx.x, pages);
        __syncthreads();
        pool_row = pool_rows;
    }
    if (rope && pool_row)
        ta_cuda_stage_rows_loop<DT, NS, true, true>(dst, slots, first_row, rows, rope, pool_row);
    else if (rope)
        ta_cuda_stage_rows_loop<DT, NS, true, false>(dst, slots, first_row, rows, rope, nullptr);
    else if (pool_row)
        ta_cuda_stage_rows_loop<DT, NS, false, true>(dst, slots, first_row, rows, nullptr,
                                                     pool_row);
    else
        ta_cuda_stage_rows_loop<DT, NS, false, false>(dst, slots, first_row, rows, nullptr,
                                                      nullptr);
    __syncthreads();
}

/*
 * One k tile of the forward's online softmax and P V accumulation over 64
 * rows, the reference's rules (docs/reference.md section 2): the SDPA
 * forward's steps 2-5 and the MTA forward's steps 3-6, on whichever scores the
 * caller left in st.
 *   st       [cols][TA_CUDA_LDT]: the tile's scores, transposed (st[j][i] for
 *            row i, effective column j < cols); overwritten with p on the
 *            visible entries. Published by a barrier before the call.
 *   key_lo, key_hi [64]: each row's visible keys [lo, hi) (absolute columns,
 *            ta_cuda_row_keys); the tile's visible columns of row i are
 *            [tile_lo[i], tile_hi[i]) (relative to col0, ta_cuda_tile_cols),
 *            written here; the others are skipped, never added as zeros
 *            (WL = false: tile_lo is 0 for every row and is not read back)
 *   m_run, l_run, l_lo [64]: running max and the (hi, lo) pair of the running
 *            sum (updated); m_new, alpha [64]: scratch
 *   acc, acc_lo: this thread's register blocks (rows 4ty+r, features
 *            s*64+4tx+e), the (hi, lo) pairs of the running output: the
 *            tile's part = fmaf(p_j, v_j, part) from +0, j ascending, v_j the
 *            key col0 + j of the v_slots' slice (v_pages: of a paged v,
 *            ta_cuda_kv_row when ta_cuda_paged), staged through stage; then
 *            (acc, acc_lo) = (acc, acc_lo) * alpha + part (src/ta_sum2.h)
 * Rows are independent; each row's max, sum and accumulators follow the
 * reference's sequential order. Ends without a barrier.
 */
/* The exponent base of the online softmax: the row max m, or 0 while m = -inf
 * (every visible score so far is -inf: weights exp(-inf) = 0, never
 * exp(-inf - -inf) = NaN), the reference's e (ref/ta_ref_fwd.c). */
TA_CUDA_DEV float ta_cuda_exp_base(float m) {
    return m == ta_f32_from_bits(TA_CUDA_NEG_INF_BITS) ? 0.0f : m;
}

template <int DT, int NS, bool WL>
TA_CUDA_DEV void ta_cuda_softmax_pv_tile(float *st, int32_t col0, int32_t cols,
                                         const int32_t *key_lo, const int32_t *key_hi,
                                         int32_t *tile_lo, int32_t *tile_hi, float *m_run,
                                         float *l_run, float *l_lo, float *m_new, float *alpha,
                                         float *stage, const ta_cuda_slot *v_slots,
                                         float (&acc)[4][NS][4], float (&acc_lo)[4][NS][4],
                                         const ta_cuda_kv_pages &v_pages = ta_cuda_kv_pages{}) {
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
    int32_t row_b[4], row_e[4]; /* visible columns [row_b, row_e) of rows 4ty+r */
    int32_t j0;
    float part[4][NS][4]; /* this tile's P V, from +0 */
    /* per row, the tile's max over the visible columns (exactly the reference's
     * sequential comparison), the new max and alpha */
    if (tid < TA_CUDA_TILE) {
        int32_t jb, je;
        ta_cuda_tile_cols(ta_cuda_lo<WL>(key_lo, tid), key_hi[tid], col0, cols, &jb, &je);
        tile_lo[tid] = jb;
        tile_hi[tid] = je;
        if (jb < je) {
            float m_tile = st[(size_t)jb * TA_CUDA_LDT + tid];
            const float m_old = m_run[tid];
            float m_nw;
            int32_t j;
            for (j = jb + 1; j < je; ++j) /* a NaN score wins (ta_max_nan) */
                m_tile = ta_max_nan(st[(size_t)j * TA_CUDA_LDT + tid], m_tile);
            m_nw = ta_max_nan(m_old, m_tile); /* a NaN max stays NaN */
            m_new[tid] = m_nw;
            alpha[tid] = ta_exp(m_old - ta_cuda_exp_base(m_nw));
        }
    }
    __syncthreads();
    /* p = exp(s - e) on every visible entry, e = ta_cuda_exp_base(m_new) */
    for (int e = tid; e < TA_CUDA_TILE * cols; e += TA_CUDA_THREADS) {
        const int i = e % TA_CUDA_TILE, j = e / TA_CUDA_TILE;
        if (ta_cuda_in<WL>(j, ta_cuda_lo<WL>(tile_lo, i), tile_hi[i])) {
            float *x = st + (size_t)j * TA_CUDA_LDT + i;
            *x = ta_exp(*x - ta_cuda_exp_base(m_new[i]));
        }
    }
    __syncthreads();
    /* the tile's partial l_t = l_t + p_j from +0, j ascending (one thread per
     * row), then (l, l_lo) = (l, l_lo) * alpha + l_t */
    if (tid < TA_CUDA_TILE && ta_cuda_lo<WL>(tile_lo, tid) < tile_hi[tid]) {
        const int32_t je = tile_hi[tid];
        float l = 0.0f;
        int32_t j;
        for (j = ta_cuda_lo<WL>(tile_lo, tid); j < je; ++j)
            l = l + st[(size_t)j * TA_CUDA_LDT + tid];
        ta_sum2_add(&l_run[tid], &l_lo[tid], alpha[tid], l);
        m_run[tid] = m_new[tid];
    }
    /* part = fmaf(p_j, v_j, part) from +0, j ascending */
    ta_cuda_acc_zero<NS>(part);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        row_b[r] = ta_cuda_lo<WL>(tile_lo, 4 * ty + r);
        row_e[r] = tile_hi[4 * ty + r];
    }
    for (j0 = 0; j0 < cols; j0 += TA_CUDA_RCHUNK) {
        const int jn = (int)ta_tiling_min_i32(TA_CUDA_RCHUNK, cols - j0);
        ta_cuda_stage_rows<DT, NS>(stage, v_slots, col0 + j0, jn, nullptr, v_pages);
        for (int jj = 0; jj < jn; ++jj) {
            const int32_t j = j0 + jj;
            const float4 p4 =
                *reinterpret_cast<const float4 *>(st + (size_t)j * TA_CUDA_LDT + 4 * ty);
            const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
            bool live[4];  /* j is a visible column of row 4ty+r */
            if (NS >= 3 && WL) { /* bounds from shared memory: registers go to acc */
                const int4 b4 = *reinterpret_cast<const int4 *>(tile_lo + 4 * ty);
                const int4 e4 = *reinterpret_cast<const int4 *>(tile_hi + 4 * ty);
                live[0] = j >= b4.x && j < e4.x;
                live[1] = j >= b4.y && j < e4.y;
                live[2] = j >= b4.z && j < e4.z;
                live[3] = j >= b4.w && j < e4.w;
            } else if (NS >= 3) { /* lo = 0: the ends alone */
                const int4 e4 = *reinterpret_cast<const int4 *>(tile_hi + 4 * ty);
                live[0] = j < e4.x;
                live[1] = j < e4.y;
                live[2] = j < e4.z;
                live[3] = j < e4.w;
            } else {
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    live[r] = ta_cuda_in<WL>(j, row_b[r], row_e[r]);
            }
#pragma unroll
            for (int s = 0; s < NS; ++s) {
                const float4 v4 = *reinterpret_cast<const float4 *>(
                    stage + jj * (NS * TA_CUDA_SLOT) + s * TA_CUDA_SLOT + 4 * tx);
                const float vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                for (int r = 0; r < 4; ++r) {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        part[r][s][e] = live[r] ? fmaf(pv[r], vv[e], part[r][s][e]) : part[r][s][e];
                }
            }
        }
    }
    /* (acc, acc_lo) = (acc, acc_lo) * alpha + part, rows that saw a key of the tile */
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        if (row_b[r] < row_e[r]) {
            const float al = alpha[4 * ty + r];
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    ta_sum2_add(&acc[r][s][e], &acc_lo[r][s][e], al, part[r][s][e]);
        }
    }
}

/*
 * The forward's last step for 64 rows (after a barrier that published m_run,
 * l_run): o = acc / l (IEEE division) rounded once to the storage dtype, and
 * lse = m + log(l); a row that saw no key (m = -inf) gets o = 0, lse = -inf.
 * Rows row0 + x, x < rows, of the o slice (element o_slice, rows o_ld apart)
 * and of the lse slice (element lse_slice, contiguous [B, H, S_q]); lse may be
 * NULL.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_fwd_store_rows(int32_t row0, int32_t rows, int32_t head_dim_v,
                                        const float (&acc)[4][NS][4], const float *m_run,
                                        const float *l_run, void *o, int64_t o_slice, int64_t o_ld,
                                        float *lse, int64_t lse_slice) {
    const int tid = (int)threadIdx.x, tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        if (x >= rows) continue;
        const float m = m_run[x], l = l_run[x];
        const bool seen = m != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
        const int64_t first = ta_cuda_row(o_slice, o_ld, row0 + x);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                if (f < head_dim_v)
                    ta_cuda_store<DT>(o, (size_t)(first + f), seen ? acc[r][s][e] / l : 0.0f);
            }
    }
    if (lse && tid < rows) {
        const float m = m_run[tid];
        lse[lse_slice + row0 + tid] = m != ta_f32_from_bits(TA_CUDA_NEG_INF_BITS)
                                          ? m + ta_log(l_run[tid])
                                          : ta_f32_from_bits(TA_CUDA_NEG_INF_BITS);
    }
}

/*
 * Store a [4 x-slots][NS slots][4 features] register block: element (r, s, e)
 * goes to row row0 + 4*ty + r, feature s*64 + 4*tx + e of the slice of dst at
 * element dst_slice (rows dst_ld apart, row_len features), times `mul` (1 or
 * the softmax scale) when `scaled`, rounded once to the storage dtype. Block
 * rows >= rows and features >= row_len are not written.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_store_block(int32_t row0, int32_t rows, int32_t row_len,
                                     const float acc[4][NS][4], int scaled, float mul, void *dst,
                                     int64_t dst_slice, int64_t dst_ld) {
    const int tx = ta_cuda_tx(), ty = ta_cuda_ty();
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int x = 4 * ty + r;
        if (x >= rows) continue;
        const int64_t first = ta_cuda_row(dst_slice, dst_ld, row0 + x);
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int32_t f = s * TA_CUDA_SLOT + 4 * tx + e;
                if (f < row_len)
                    ta_cuda_store<DT>(dst, (size_t)(first + f),
                                      scaled ? mul * acc[r][s][e] : acc[r][s][e]);
            }
    }
}

/*
 * The forwards' store of a tile's rows: into the call's o and lse
 * (ta_cuda_fwd_store_rows in the storage dtype) with one split; with split-K
 * (p.t.num_splits > 1) into part `split` of the workspace, f32, rows D_v
 * apart (ta_cuda_fwd_ws), which the merge kernel reads.
 */
template <int DT, int NS>
TA_CUDA_DEV void ta_cuda_fwd_store_part(const ta_cuda_params &p, const ta_tile_ctx &c,
                                        int32_t split, int32_t row0, int32_t rows,
                                        const float (&acc)[4][NS][4], const float *m_run,
                                        const float *l_run) {
    if (p.t.num_splits > 1) {
        const int64_t part = (int64_t)split * p.n_rows + c.lse; /* row 0 of the slice */
        ta_cuda_fwd_store_rows<TA_F32, NS>(row0, rows, p.head_dim_v, acc, m_run, l_run, p.part_o,
                                           part * p.head_dim_v, p.head_dim_v, p.part_lse, part);
    } else {
        ta_cuda_fwd_store_rows<DT, NS>(row0, rows, p.head_dim_v, acc, m_run, l_run, p.o, c.o,
                                       p.lay.o.seq, p.lse, c.lse);
    }
}

/*
 * The reciprocal band's score stage (latent attention, TA_RBAND; docs/
 * exactness.md section 13): the logit of a visible (row r, key j) with
 * 0 <= p_r - j <= W (p_r = r + S_k - S_q) is fmaf(alpha, T_rj, S_rj), T
 * from p.rb_t (cuda/ta_cuda_latent.cu computes it as ref/ta_ref_rband.c
 * does); other entries keep s. lse_slice: the (b, h) slice of [B, H, S_q].
 */
TA_CUDA_DEV float ta_cuda_rband_logit(const ta_cuda_params &p, int64_t lse_slice, int32_t r,
                                      int32_t j, float s) {
    const int32_t w = r + (p.t.seq_k - p.t.seq_q) - j;
    if (w < 0 || w > p.rb_width) return s;
    return fmaf(p.rb_alpha, p.rb_t[(lse_slice + r) * p.rb_w1 + w], s);
}

/*
 * The band on a forward score tile: st[j][i] (TA_CUDA_LDT apart) holds S of
 * row row0 + i and key col0 + j; every band entry of the tile's rows x cols
 * becomes its logit (ta_cuda_rband_logit), one thread per entry. Tiles that
 * do not meet the band return at once. The caller syncs before and after.
 */
TA_CUDA_DEV void ta_cuda_rband_tile(const ta_cuda_params &p, int64_t lse_slice, float *st,
                                    int32_t row0, int32_t rows, int32_t col0, int32_t cols) {
    const int32_t off = p.t.seq_k - p.t.seq_q;
    int32_t e;
    /* the tile's keys [col0, col0 + cols) against the band's [p_row0 - W, p_last] */
    if (col0 > row0 + rows - 1 + off || (int64_t)col0 + cols - 1 < (int64_t)row0 + off - p.rb_width)
        return;
    for (e = (int32_t)threadIdx.x; e < rows * cols; e += (int32_t)blockDim.x) {
        const int32_t i = e % rows, jj = e / rows;
        float *x = st + (size_t)jj * TA_CUDA_LDT + i;
        *x = ta_cuda_rband_logit(p, lse_slice, row0 + i, col0 + jj, *x);
    }
}

#endif /* TA_CUDA_TILE_CUH */
