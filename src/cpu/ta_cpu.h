/*
 * CPU backend internals (docs/cpu.md): the per-thread tile buffers, their one
 * layout routine, and the table of tile tasks each instruction set provides.
 *
 *   ta_cpu.c           entry points, workspace layout, ISA dispatch, OpenMP loops
 *   the algorithm, written once over a small vector layer; each piece
 *   includes only the pieces below it:
 *     ta_cpu_tile.inc    tile I/O: load, widen, store rows; visible keys per row
 *     ta_cpu_micro.inc   micro-kernels k1, k2, k3 and the D_i row dots
 *     ta_cpu_stages.inc  stages SDPA and MTA share (forward softmax and store)
 *     ta_cpu_sdpa.inc    SDPA tasks: forward, dk/dv, dq
 *     ta_cpu_mta.inc     MTA tasks (the conv, dconv_w): forward, dk/dv, dq, one-pass backward
 *   compiled three times, each ISA file defining the vector layer, including
 *   the tasks and building its own ta_cpu_kernels table:
 *     ta_cpu_scalar.c    1 lane  (portable, no ISA flags: the fallback)
 *     ta_cpu_avx2.c      8 lanes (-mavx2 -mfma)
 *     ta_cpu_avx512.c    16 lanes (-mavx512f -mavx2 -mfma)
 *
 * All three produce the bits of TA_BACKEND_REF (docs/design.md 3): lanes run over
 * independent outputs only, and every lane performs the reference's scalar
 * operation sequence.
 */
#ifndef TA_CPU_H
#define TA_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "ta_internal.h"

/* Every padded tile dimension is a multiple of this many floats (64 bytes:
 * one AVX-512 vector), whatever ISA runs, so the workspace size does not
 * depend on the ISA chosen at call time. */
#define TA_CPU_PAD 16

/* Instruction sets, in increasing order. */
typedef enum ta_cpu_isa {
    TA_CPU_ISA_SCALAR = 0,
    TA_CPU_ISA_AVX2 = 1,
    TA_CPU_ISA_AVX512 = 2
} ta_cpu_isa;

/* Most Q tiles one forward or dq task holds (see ta_cpu_q_group). */
#define TA_CPU_Q_GROUP_MAX 4
/* Most query heads of one kv group a forward task packs into its rows
 * (ta_cpu_head_pack). */
#define TA_CPU_HEAD_PACK_MAX 64
/* A forward task of at most this many rows (decode) runs its scores and
 * softmax with lanes over keys (K^T per tile; docs/cpu.md section 3d). */
#define TA_CPU_KEYLANE_ROWS 32
/* ... and an MTA forward task of at most this many effective rows (its conv
 * with lanes over keys runs in blocks of TA_RB rows of one head that share
 * each raw-score load; above, the lanes-over-rows path; the default prefill
 * tile, 59 rows, stays there). Measured: docs/cpu.md section 3d. */
#define TA_CPU_KEYLANE_MTA_ROWS 48
/* ... or of at most this many effective rows when it packs several query
 * heads of a kv group (GQA: 16 new rows x 4 heads), with at most
 * TA_CPU_KEYLANE_MTA_LOADED loaded rows (history rows included): the rows of
 * an MTA slab's qr and srm tiles (sr: TA_CPU_KEYLANE_MTA_PACK_ROWS). */
#define TA_CPU_KEYLANE_MTA_PACK_ROWS 64
#define TA_CPU_KEYLANE_MTA_LOADED 96
/* The decode path's softmax with lanes over keys for at most this many
 * rows; above, the tile is moved to [key][row] (cpu_fwd_sr_to_st) for the
 * softmax with lanes over rows. Measured: docs/cpu.md section 3d. */
#define TA_CPU_KEYLANE_SOFTMAX_ROWS 4
_Static_assert(TA_CPU_KEYLANE_MTA_PACK_ROWS >= TA_CPU_KEYLANE_ROWS &&
                   TA_CPU_KEYLANE_MTA_PACK_ROWS >= TA_CPU_KEYLANE_MTA_ROWS &&
                   TA_CPU_KEYLANE_MTA_LOADED >= TA_CPU_KEYLANE_ROWS + 16 &&
                   TA_CPU_KEYLANE_MTA_LOADED >= TA_CPU_KEYLANE_MTA_ROWS + 16,
               "an MTA slab's lanes-over-keys tiles hold the SDPA path's rows too");

/* Rows per block of the band's T (cpu_lat_rband_scores: one k1 block of
 * TA_RB = 6 rows; the union of their band keys is W + 6 keys at most). */
#define TA_CPU_RBAND_ROWS 6

/* Padded dims of one task's tiles (from the plan; ISA-independent). */
typedef struct ta_cpu_dims {
    int32_t d, dv;         /* D, D_v of the attention core (L, L with the fused projections) */
    int32_t lat_w;         /* the projections: max(head_dim, head_dim_v, L); 0 without */
    size_t d_pad, dv_pad;  /* D, D_v rounded up to TA_CPU_PAD */
    int32_t rows_max;      /* query rows one task holds: q_group x block_q */
    int32_t block_k;       /* key columns of one K tile */
    size_t bq_pad, bk_pad; /* rows_max, block_k rounded up to TA_CPU_PAD */
} ta_cpu_dims;

/*
 * Forward tiles of one thread (one task at a time: a group of q_group Q tiles
 * of one (b, h), R = rows_max rows; B_q below stands for R).
 * Scores run with lanes across query rows, so Q is held transposed and the
 * score/probability tile is [key][row]:
 *
 *   +-------------+-------------+--------------+-------------+--------------+
 *   | qt          | k           | v            | st          | acc          |
 *   | D x ld      | B_k x d_pad | B_k x dv_pad | B_k x ld    | B_q x dv_pad |
 *   +-------------+-------------+--------------+-------------+--------------+
 *   | m | l | alpha | nvis | lse (bq_pad each) | sraw (conv only: B_k x ld_sraw) |
 *   | nlo (bq_pad) | row_lo | row_hi (bq_pad each; ld_sraw each with a conv) |
 *   | acc_lo B_q x dv_pad | part B_q x dv_pad | l_lo bq_pad |
 *   | lat_in, lat_out pad(lat_w) |  (the fused projections only)
 *   | qlat B_k x d_pad | qlat_t D x bk_pad | k_rows R x d_pad | tvec R x bk_pad |
 *   (the band only; R = TA_CPU_RBAND_ROWS)
 *   | kt d_pad x bk_pad | qr R'' x d_pad | sr R' x bk_pad |
 *   | srm R'' x (bk_pad + 16) |  (conv only)
 *   (R' = TA_CPU_KEYLANE_ROWS, R'' = R' + 16; with a conv R' =
 *   TA_CPU_KEYLANE_MTA_PACK_ROWS, R'' = TA_CPU_KEYLANE_MTA_LOADED)
 *   (the interval arrays, then the pairs' lo words and the P V partial, come
 *   last, so the other regions keep the offsets they had before windows and
 *   the compensated sums: no change of L1 set placement to measure)
 */
typedef struct ta_cpu_fwd_ws {
    ta_cpu_dims dm; /* the padded dims these buffers were carved for */
    float *qt;      /* [D, ld]         Q tile transposed (pad lanes 0) */
    float *k;       /* [B_k, d_pad]    K tile rows, widened (f16/bf16, or f32 with D % 16 != 0) */
    float *v;       /* [B_k, dv_pad]   V tile rows, widened and zero padded */
    float *st;      /* [B_k, ld]       scores s[i,j] at st[j][i], then p */
    float *acc;     /* [B_q, dv_pad]   unnormalised output: the pair's hi word (src/ta_sum2.h) */
    float *m;       /* [bq_pad]        running max; -inf until a key is seen */
    float *l;       /* [bq_pad]        running sum: the pair's hi word */
    float *alpha;   /* [bq_pad]        this K tile's rescale factor (1 for rows it skips) */
    int32_t *nlo;   /* [bq_pad]        visible keys of this K tile per row: [nlo, nvis), */
    int32_t *nvis;  /* [bq_pad]        from the tile's first column (cpu_fill_vis) */
    float *lse;     /* [bq_pad]        lse of the tile's rows before the store */
    float *acc_lo;  /* [B_q, dv_pad]   acc's lo word */
    float *part;    /* [B_q, dv_pad]   this K tile's P V, from +0 (k2) */
    float *l_lo;    /* [bq_pad]        l's lo word */
    /* [bq_pad; ld_sraw with a conv] the task's rows' visible keys (absolute; with a
     * conv: of the loaded rows, lane = sraw lane) */
    int32_t *row_lo, *row_hi;
    size_t ld; /* lane stride of qt and st: bq_pad, + 16 if even in 64-byte lines */
    /* MTA only (NULL / 0 without a conv): raw scores S on the loaded region,
     * held transposed [loaded key][loaded row]; st then holds the convolved
     * C^T [effective key][effective row]. ld_sraw = bq_pad + TA_CPU_PAD: the
     * conv reads lane x + a (a < c_q <= 16) for every lane x of a vector. */
    float *sraw; /* [B_k, ld_sraw]  S^T, lane 0 = loaded row row_eff_begin - (c_q-1) */
    size_t ld_sraw;
    /* the fused projections (NULL without): a raw q row or ctx~ [lat_w], a q~
     * or o row [lat_w] (cpu_lat_gemv's input and output) */
    float *lat_in, *lat_out;
    /* the band (NULL without): the q~ (q) rows of a K tile's band keys [B_k,
     * d_pad], transposed [D, bk_pad]; a block of rows' k rows [R, d_pad] and
     * T [R, bk_pad] (R = TA_CPU_RBAND_ROWS; cpu_lat_rband_scores) */
    float *qlat, *qlat_t, *k_rows, *tvec;
    /* split-K (n = plan->fwd.num_splits > 1; else 1 and NULL): every forward
     * unit's parts in the call's workspace after the slabs (one task per part,
     * ta_cpu_carve_splits), shared by all threads: part s of unit u
     * (ta_cpu_split_unit) for lane x at part_o + ((u n + s) part_rows + x)
     * dv_pad (f32, normalised) and part_lse + (u n + s) part_rows + x; merged
     * by src/ta_merge.h (kern->fwd.merge) once the unit's n parts are in */
    int32_t n_splits;
    size_t part_rows; /* lanes of one part: head_pack x min(rows_eff, S_q) */
    float *part_o;    /* [units, n, part_rows, dv_pad] */
    float *part_lse;  /* [units, n, part_rows] */
    /* GQA packing (ta_cpu_head_pack; 1: none): the task's query heads h, h +
     * 1, ..., h + head_pack - 1 (one kv group), head h + g's rows at lanes
     * [g r, (g + 1) r) (r: the Q tile's rows); MTA: its loaded rows at Q^T
     * lanes [g n, (g + 1) n), n = r + c_q - 1, the effective rows as SDPA */
    int32_t head_pack;
    /* lanes over keys (tasks of at most R = TA_CPU_KEYLANE_ROWS effective
     * rows; MTA: R = TA_CPU_KEYLANE_MTA_PACK_ROWS): K^T of a tile [d_pad,
     * bk_pad], the task's (loaded) Q rows [R'', d_pad] (R'' = R + 16; MTA:
     * TA_CPU_KEYLANE_MTA_LOADED), their scores (MTA: the conv's output) [R,
     * bk_pad] */
    float *kt, *qr, *sr;
    /* MTA only (NULL without a conv): the raw scores of the loaded rows,
     * row-major [R'', ld_srm], ld_srm = bk_pad + 16 (the conv's reach) */
    float *srm;
    size_t ld_srm;
} ta_cpu_fwd_ws;

/*
 * The fused latent projections' and the band's backward stages (NULL
 * without either), carved last in the dk/dv and the dq slab
 * (ta_cpu_carve_lat). L below stands for the core's widths: L with the
 * projections, else D (q, k rows) or D_v (dO, v rows); w = lat_w, or max(D,
 * D_v) without the projections (wt then empty):
 *
 *   | wt lat_w x lat_w | lat_in, lat_out pad(w) | qlat, xq, xdo B_k x pad(L) |
 *   | yq, ydo 64 x pad(L) | ydelta, ylse 64 | x_delta, x_lse pad(B_k) | bt 3 x L x 64 | adl 64 |
 *   | qlat_t L x pad(B_k) | k_rows R x pad(L) | tvec R x pad(B_k) |  (R = TA_CPU_RBAND_ROWS)
 *   dq slab only: | ctx_hi, ctx_lo, ctx_part B_q x pad(L) |
 */
typedef struct ta_cpu_lat_ws {
    float *wt;               /* a head's weight transposed: W_vup[h]^T [D_v, L] (dctx~ on dO's
                                load) or W_qlat[h]^T [L, D] (dq at the store), row-major */
    float *lat_in, *lat_out; /* [pad(lat_w)] cpu_lat_gemv's input and output rows */
    float *qlat;             /* [B_k, pad(L)] the band: q~ of a K tile's band keys */
    float *xq, *xdo;         /* [B_k, pad(L)] the band's transposed term: q~, dctx~ of its rows x */
    float *yq, *ydo;         /* [64, pad(L)] ... and of one 64-row block of the other rows y */
    float *ydelta, *ylse;    /* [64] D_y, lse_y of that block */
    float *x_delta, *x_lse;  /* [pad(B_k)] D_x, lse_x of the rows x */
    float *bt;               /* [3, L, 64] the block's rows y transposed: three dot operands */
    float *adl;              /* [64] alpha dl of one row x's entries in the block */
    float *qlat_t;           /* [L, pad(B_k)] qlat transposed: the band's T, lanes over keys */
    float *k_rows;           /* [R, pad(L)] the k rows of a block of R = TA_CPU_RBAND_ROWS rows */
    float *tvec;             /* [R, pad(B_k)] their T of a K tile's band keys */
    float *ctx_hi, *ctx_lo, *ctx_part; /* dq: [B_q, pad(L)] ctx~ = sum_j P v, chunked pairs */
} ta_cpu_lat_ws;

/* K tiles one dk/dv task holds at most (see ta_cpu_dkdv_group). */
#define TA_CPU_DKDV_GROUP_MAX 4

/*
 * Backward pass 1 (dk, dv) tiles of one thread: one task is a group of up to
 * TA_CPU_DKDV_GROUP_MAX consecutive K tiles of one (b, kv head), so that each
 * Q-side tile (Q, dO, O rows, lse, D_i) is loaded once for the whole group.
 * Lanes across keys: K and V held transposed, P and dS are [row][key].
 *
 *   | q B_q x d_pad | d_o B_q x dv_pad | o B_q x dv_pad | p B_q x bk_pad | ds B_q x bk_pad |
 *   | lse | delta | nlo | nvis | row_lo | row_hi (bq_pad each) |
 *   then per K tile of the group (group slots):
 *   | kt D x bk_pad | vt D_v x bk_pad | dk_acc B_k x d_pad | dv_acc B_k x dv_pad |
 *   then per slot the pairs' lo words and the current row chunk's partials
 *   (src/ta_sum2.h):
 *   | dk_lo, dk_part B_k x d_pad | dv_lo, dv_part B_k x dv_pad | (x group) |
 */
typedef struct ta_cpu_dkdv_ws {
    ta_cpu_dims dm;
    int32_t group;      /* K tiles per task (slots carved) */
    float *q, *d_o, *o; /* [B_q, d_pad], [B_q, dv_pad] x2: Q, dO, O rows (widened) */
    float *p, *ds;      /* [B_q, bk_pad] P, then dP overwritten by dS */
    float *lse, *delta; /* [bq_pad] */
    /* [bq_pad] live keys [nlo, nvis) of the K tile per row (0, 0: none, or lse = -inf);
     * the Q tile's rows' visible keys [row_lo, row_hi) (absolute) */
    int32_t *nlo, *nvis, *row_lo, *row_hi;
    float *kt[TA_CPU_DKDV_GROUP_MAX], *vt[TA_CPU_DKDV_GROUP_MAX]; /* [D | D_v, bk_pad] K, V^T */
    float *dk_acc[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, d_pad] the pairs' hi words */
    float *dv_acc[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, dv_pad] */
    float *dk_lo[TA_CPU_DKDV_GROUP_MAX];   /* [B_k, d_pad] their lo words */
    float *dv_lo[TA_CPU_DKDV_GROUP_MAX];   /* [B_k, dv_pad] */
    float *dk_part[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, d_pad] the row chunk's partials */
    float *dv_part[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, dv_pad] */
    ta_cpu_lat_ws lat; /* the fused projections (pointers NULL without) */
} ta_cpu_dkdv_ws;

/*
 * Backward pass 2 (dq) tiles of one thread: one task is a group of q_group
 * Q tiles of one (b, h) (B_q below stands for rows_max). Lanes across query
 * rows, as the forward.
 *
 *   | qt D x ld | dot D_v x ld | ot D_v x ld | k B_k x d_pad | v B_k x dv_pad |
 *   | st B_k x ld | dpt B_k x ld | lse | delta | nlo | nvis | row_lo | row_hi (bq_pad each) |
 *   | dq_acc B_q x d_pad | dq_lo B_q x d_pad | dq_part B_q x d_pad | seg_lo, seg_n bq_pad |
 *   with the reciprocal band, last: | tt B_k x ld | da_hi, da_lo, da_part bq_pad |
 */
typedef struct ta_cpu_dq_ws {
    ta_cpu_dims dm;
    float *qt, *dot, *ot; /* [D | D_v, ld] transposed Q, dO, O tiles */
    float *k, *v;         /* [B_k, d_pad], [B_k, dv_pad] K, V rows */
    float *st, *dpt;      /* [B_k, ld] scores; dP overwritten by dS */
    float *lse, *delta;   /* [bq_pad] */
    /* [bq_pad] live keys [nlo, nvis) of the K tile per row; the task's rows' visible
     * keys [row_lo, row_hi) (absolute) */
    int32_t *nlo, *nvis, *row_lo, *row_hi;
    float *dq_acc;  /* [B_q, d_pad] the pair's hi word (src/ta_sum2.h) */
    float *dq_lo;   /* [B_q, d_pad] its lo word */
    float *dq_part; /* [B_q, d_pad] the current key chunk's partials */
    int32_t *seg_lo, *seg_n; /* [bq_pad] the rows' live keys clipped to a key chunk */
    size_t ld;      /* lane stride of qt, dot, ot, st, dpt: as ta_cpu_fwd_ws.ld */
    /* the reciprocal band (NULL without): T of the band's entries of a K tile,
     * and each row's d_alpha pair and key-chunk partial (the task's rows'
     * shares of the call's d_alpha, which ta_cpu.c adds in REF's order) */
    float *tt;                      /* [B_k, ld] */
    float *da_hi, *da_lo, *da_part; /* [bq_pad] */
    ta_cpu_lat_ws lat; /* the fused projections (pointers NULL without); dq~ is left in
                          dq_acc and ctx~ in lat.ctx_hi for the weight gradients */
} ta_cpu_dq_ws;

/*
 * MTA backward tiles of one thread (both passes: a thread runs one task at a
 * time; one Q tile x one K tile of plan->bwd per step). Everything score-like
 * is held transposed, [key][row], lanes across rows, with lane stride ld =
 * pad(B_q) + TA_CPU_PAD (the conv and the dconv_w partial read lane x + a,
 * a < c_q <= 16, for every lane x of a vector). Regions of one tile pair
 * (docs/mta.md): loaded L (rows r0-(c_q-1) .. r1+(c_q-1), keys c0-2P ..
 * c1+2P), gradient G (rows r0 .. r1+(c_q-1), keys c0-P .. c1+P), effective E.
 *
 *   | qt D x ld | dot D_v x ld | q B_q x d_pad | d_o, o B_q x dv_pad |
 *   | k B_k x d_pad | v B_k x dv_pad | st, ct, dct, dst  B_k x ld each |
 *   | lse, delta, nlo, nvis, row_lo, row_hi  ld each | dq_acc B_q x d_pad |
 *   | dw_part, dw_sum, dw_sum_lo c_q c_k | then per K tile of a pass-1 group: dk_acc B_k x d_pad | dv_acc B_k
 * x dv_pad |
 *   | dq_lo, dq_part B_q x d_pad | seg_lo, seg_n ld | per slot dk_lo, dk_part, dv_lo, dv_part (the sums' pairs) |
 */
typedef struct ta_cpu_mta_bwd_ws {
    ta_cpu_dims dm;     /* rows_max = B_q, block_k = B_k (plan->bwd) */
    size_t ld;          /* lane stride of the [key][row] tiles */
    int32_t group;      /* K tiles per pass-1 task (slots carved) */
    float *qt;          /* [D, ld]   Q^T, lane x = L row r0-(c_q-1)+x (zero outside [0, S_q)) */
    float *dot;         /* [D_v, ld] dO^T, lane g = G row r0+g */
    float *q;           /* [B_q, d_pad] Q rows of E (pass 1, when not read in place) */
    float *d_o, *o;     /* [B_q, dv_pad] dO, O rows of G (when not read in place) */
    float *k, *v;       /* [B_k, d_pad], [B_k, dv_pad] K rows (L keys), V rows (G keys) */
    float *st;          /* [B_k, ld] S^T on L (+0 where not visible) */
    float *ct;          /* [B_k, ld] C^T on G, overwritten by P^T */
    float *dct;         /* [B_k, ld] dP^T on G, overwritten by dC^T (+0 where not live) */
    float *dst;         /* [B_k, ld] dS^T on E */
    float *lse, *delta; /* [ld] of G rows (lse -inf outside [0, S_q)) */
    /* [ld] live keys [nlo, nvis) of the K tile per E row; visible keys [row_lo,
     * row_hi) (absolute) of L row r0-(c_q-1)+x */
    int32_t *nlo, *nvis, *row_lo, *row_hi;
    float *dq_acc;  /* [B_q, d_pad] pass 2 */
    float *dw_part; /* [c_q c_k] pass 2: one pair's dconv_w partial */
    float *dw_sum;    /* [c_q c_k] pass 2: R(b, qt), the Q tile's sum of partials (hi) */
    float *dw_sum_lo; /* [c_q c_k] pass 2: its lo word (src/ta_sum2.h) */
    float *dk_acc[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, d_pad] pass 1, per K tile of the group */
    float *dv_acc[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, dv_pad] */
    /* the pairs of src/ta_sum2.h: dq_acc, dk_acc, dv_acc are the hi words */
    float *dq_lo, *dq_part;  /* [B_q, d_pad] pass 2: lo word, the key chunk's partials */
    int32_t *seg_lo, *seg_n; /* [ld] pass 2: the rows' live keys clipped to a key chunk */
    float *dk_lo[TA_CPU_DKDV_GROUP_MAX];   /* [B_k, d_pad] pass 1 lo words */
    float *dv_lo[TA_CPU_DKDV_GROUP_MAX];   /* [B_k, dv_pad] */
    float *dk_part[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, d_pad] the row chunk's partials */
    float *dv_part[TA_CPU_DKDV_GROUP_MAX]; /* [B_k, dv_pad] */
    /* [B_q, lds] S on L row-major (the dconv_w partial's copy of st, keys
     * from P: cpu_mta_dw), lds = bk_pad + TA_CPU_PAD */
    float *srm;
    size_t lds;
    /* The one-pass backward (ta_cpu_mta_one_pass; NULL, 0 in the two-pass
     * one, which carves the slots above instead), carved last: the dk, dv
     * pairs and row-chunk partials of every key of a (b, kv head), key j at
     * row j; each K tile's current row chunk; R(b, qt) of one head's Q tiles
     * (hi words) and whether each tile sees a K tile:
     *   | dk_all, dk_all_lo, dk_all_part S_k x d_pad | dv_all, ... S_k x dv_pad |
     *   | kv_chunk n_k | dw_r n_q x c_q c_k | dw_r_add n_q | */
    int32_t one_pass;
    float *dk_all, *dk_all_lo, *dk_all_part; /* [S_k, d_pad] */
    float *dv_all, *dv_all_lo, *dv_all_part; /* [S_k, dv_pad] */
    int64_t *kv_chunk;                       /* [n_k] -1: none yet */
    float *dw_r;                             /* [n_q, c_q c_k] */
    int32_t *dw_r_add;                       /* [n_q] */
} ta_cpu_mta_bwd_ws;

/* One thread's tiles from a cursor (size mode when the cursor has no base). */
void ta_cpu_dims_of(const ta_plan *plan, const ta_tiling *t, int32_t q_group, ta_cpu_dims *dm);
/* Consecutive Q tiles one forward or dq task holds as one block of rows, for
 * this plan and thread count: up to TA_CPU_Q_GROUP_MAX tiles and 256 rows,
 * while there are at least two tasks per thread. Each K tile is then loaded
 * once for all of them. Rows are independent and row tiling is free
 * (docs/design.md 3.5), so this changes no bit; it is part of the workspace layout
 * (query and call compute the same value). A split-K forward takes one Q tile
 * per task (its parts are cut per row, the same for every Q tile, but a task's
 * parts are held per Q tile). */
int32_t ta_cpu_q_group(const ta_plan *plan, const ta_tiling *t, int32_t n_threads);
/* GQA packing: consecutive query heads of one kv group a forward task holds
 * as one block of rows (head after head), so that each K and V row is
 * loaded, widened and broadcast once for all of them (docs/cpu.md section
 * 3d). 1 (none) unless the task holds one Q tile (q_group 1: decode, split-K)
 * of a plain SDPA forward (no band, projections or history rows) or an MTA
 * forward without the rotary stage; else the largest divisor of the group
 * with at most 256 rows (MTA: TA_CPU_KEYLANE_MTA_PACK_ROWS, and at most
 * TA_CPU_KEYLANE_MTA_LOADED loaded rows) and TA_CPU_HEAD_PACK_MAX heads that
 * leaves at least one task per thread. Rows are independent, so this
 * changes no bit; part of the workspace layout. */
int32_t ta_cpu_head_pack(const ta_plan *plan, int32_t n_threads);
/* conv: 1 carves the MTA raw-score tile (sraw) too; band: 1 and dm->lat_w >
 * 0 the projected q~ rows (qlat). The split-K parts are the call's, not a
 * thread's (ta_cpu_fwd_ws.part_o). */
void ta_cpu_carve_fwd(const ta_cpu_dims *dm, int conv, int band, ta_ws_cursor *c,
                      ta_cpu_fwd_ws *ws);
/* Split-K's unit of a forward task: (b, head pack, Q tile), numbered
 * (b (H / head_pack) + h / head_pack) n_q + qt (h: the pack's first head). */
static inline int64_t ta_cpu_split_unit(const ta_plan *plan, int32_t head_pack, int32_t b,
                                        int32_t h, int32_t qt) {
    const int64_t n_hp = plan->p.heads_q / head_pack;
    return ((int64_t)b * n_hp + h / head_pack) * plan->fwd.num_q_tiles + qt;
}
/* MTA backward tiles for a c_q x c_k conv (dims of plan->bwd, q_group 1):
 * two passes (one_pass 0) with `group` K tiles per pass-1 task
 * (ta_cpu_dkdv_group), or the one-pass task's sums over all of plan->bwd's
 * keys and tiles (one_pass 1; group unused). */
void ta_cpu_carve_mta_bwd(const ta_plan *plan, const ta_cpu_dims *dm, int32_t group, int one_pass,
                          ta_ws_cursor *c, ta_cpu_mta_bwd_ws *ws);
/* Whether the OpenMP path runs this MTA backward in one pass (one task per
 * (b, kv head)) rather than two (docs/cpu.md section 9): a function of the
 * problem and the thread count only; the size query and the call agree. */
int ta_cpu_mta_one_pass(const ta_plan *plan, int32_t n_threads);
void ta_cpu_carve_dkdv(const ta_cpu_dims *dm, int32_t group, int band, ta_ws_cursor *c,
                       ta_cpu_dkdv_ws *ws);
/* K tiles per dk/dv task for this plan and thread count: up to
 * TA_CPU_DKDV_GROUP_MAX while there are at least two tasks per thread. Part of
 * the workspace layout (query and call compute the same value); never part of
 * the result (each K tile's sums keep the reference's order). */
int32_t ta_cpu_dkdv_group(const ta_plan *plan, int32_t n_threads);
/* band: 1 carves the reciprocal band's tt and d_alpha rows too. Both
 * backward slabs carve the band's and the projections' stages
 * (ta_cpu_lat_ws) last with the band or when dm->lat_w > 0. */
void ta_cpu_carve_dq(const ta_cpu_dims *dm, int band, ta_ws_cursor *c, ta_cpu_dq_ws *ws);

/* The projections' weight gradients, the call's sums after the slabs: the
 * lo words of the pairs (dw_qlat, dw_vup hold the hi words) and the current
 * 64-row chunk's partials, which a dq task's rows continue in REF's (b, h,
 * row) order (ta_cpu_kernels.lat_dw). */
typedef struct ta_cpu_lat_sums {
    float *dwq_lo;   /* [H, D, L] */
    float *dwv_lo;   /* [H, L, D_v] */
    float *dwq_part; /* [D, L] */
    float *dwv_part; /* [L, D_v] */
} ta_cpu_lat_sums;

/* The tile tasks of one instruction set, one group per stage of a call, each
 * with its SDPA and its MTA (plan->has_conv) variant; ta_cpu.c picks the
 * variant. Each task writes only its own output rows (o, lse rows of (b, h,
 * qt in [qt_begin, qt_end)); dk, dv rows of (b, h_kv, kt in [kt_begin,
 * kt_end)); dq rows of (b, h, qt in [qt_begin, qt_end))), so tasks run in any
 * order on any thread with the same bits. Every ISA file
 * (ta_cpu_scalar.c, ...) builds its own table from its ta_cpu_sdpa.inc and
 * ta_cpu_mta.inc tasks. */
typedef struct ta_cpu_kernels {
    const char *name;
    /* Forward of Q tiles [qt_begin, qt_end) of (b, h); MTA: ws carved with
     * conv = 1. split < 0: the whole forward (one part, stored in o, lse);
     * split s >= 0 (split-K, one Q tile): part s into its unit's slot of
     * ws->part_o, part_lse. merge: a split-K unit's parts merged in
     * ascending order and stored (SDPA and MTA alike). */
    struct {
        void (*sdpa)(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws, int32_t b,
                     int32_t h, int32_t qt_begin, int32_t qt_end, int32_t split);
        void (*mta)(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws, int32_t b,
                    int32_t h, int32_t qt_begin, int32_t qt_end, int32_t split);
        void (*merge)(const ta_plan *plan, const ta_fwd_args *a, const ta_cpu_fwd_ws *ws, int32_t b,
                      int32_t h, int32_t qt);
    } fwd;
    /* Backward pass 1 (dk, dv) of K tiles [kt_begin, kt_end) of (b, h_kv). */
    struct {
        void (*sdpa)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dkdv_ws *ws, int32_t b,
                     int32_t h_kv, int32_t kt_begin, int32_t kt_end);
        void (*mta)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                    int32_t b, int32_t h_kv, int32_t kt_begin, int32_t kt_end);
    } dkdv;
    /* Backward pass 2 (dq). SDPA: Q tiles [qt_begin, qt_end) of (b, h). MTA:
     * Q tile qt of (b, h), which also leaves ws->dw_sum [c_q, c_k] = R(b, qt),
     * the tile's dconv_w sum over its K tiles (a pair's hi word), and returns
     * 1 if the tile sees a K tile (the merge adds R(b, qt) only then). */
    struct {
        void (*sdpa)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dq_ws *ws, int32_t b,
                     int32_t h, int32_t qt_begin, int32_t qt_end);
        int (*mta)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                   int32_t b, int32_t h, int32_t qt);
    } dq;
    /* The MTA backward in one pass (ws carved with one_pass 1), query head g
     * of kv head h_kv's group of batch b: dq of every Q tile, R(b, qt) into
     * ws->dw_r (ws->dw_r_add: 1 if the tile sees a K tile), dk and dv
     * accumulated over the heads g = 0, 1, ... (started at g = 0, stored
     * after the group's last head). */
    void (*mta_bwd1)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_mta_bwd_ws *ws,
                     int32_t b, int32_t h_kv, int32_t g);
    /* The fused projections: the rows of the dq task just run in ws (Q tiles
     * [qt_begin, qt_end) of (b, h)) into the weight gradients, REF's
     * ta_ref_bwd_dw_lat per row; only in the tasks' (b, h, Q tile) order. */
    void (*lat_dw)(const ta_plan *plan, const ta_bwd_args *a, const ta_cpu_dq_ws *ws,
                   const ta_cpu_lat_sums *sums, int32_t b, int32_t h, int32_t qt_begin,
                   int32_t qt_end);
    /* ... and as caller-run tasks (phase 1): head h's weight gradients
     * (overwritten) from every row's dq~ and ctx~ (g, cx [B, H, S_q, L],
     * left by phase 0's dq tasks), per weight REF's sequence. */
    void (*lat_dw_head)(const ta_plan *plan, const ta_bwd_args *a, const float *g,
                        const float *cx, int32_t h);
} ta_cpu_kernels;

extern const ta_cpu_kernels ta_cpu_kernels_scalar;
#if defined(TA_CPU_X86)
extern const ta_cpu_kernels ta_cpu_kernels_avx2;
extern const ta_cpu_kernels ta_cpu_kernels_avx512;
#endif

/* The best instruction set this CPU (and this build) runs. */
ta_cpu_isa ta_cpu_isa_best(void);
/* The instruction set a call uses now: ta_cpu_isa_best(), lowered by the
 * environment variable TA_CPU_ISA = scalar | avx2 | avx512 (read once per
 * call; a value the CPU cannot run is lowered to what it can; anything else,
 * or unset, means the best). Tests use it to report the path they forced. */
ta_cpu_isa ta_cpu_isa_resolve(void);
const char *ta_cpu_isa_name(ta_cpu_isa isa);

/* ---- Caller-run tasks (ta_cpu.c; docs/cpu.md section 3a) ----
 * The plan of a caller-run call (backward: 0 or 1): phases, tasks, the
 * shared workspace and the scratch of one task. TA_ERR_OVERFLOW if a size
 * overflows. */
ta_status ta_cpu_tasks_plan(const ta_plan *plan, int backward, ta_task_plan *out);
/* Records a validated call (fa for the forward, else ba; ex: the tensors'
 * extents under plan->layout) in shared, which holds at least the plan's
 * shared_bytes. Writes nothing else. */
void ta_cpu_tasks_prepare(const ta_plan *plan, const ta_fwd_args *fa, const ta_bwd_args *ba,
                          const ta_extents *ex, void *shared);
/* ta_task_run: the checks of include/tileattn.h, then the task. */
ta_status ta_cpu_task_run(void *shared, int32_t phase, int64_t task, void *scratch,
                          size_t scratch_bytes);

#endif /* TA_CPU_H */
