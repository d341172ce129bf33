/*
 * MTA decode and chunked prefill with query history rows (ta_problem.q_history,
 * ta_fwd_args.q_hist; docs/mta.md section 2a), REF and CPU.
 *
 *   1. random MTA problems (fresh seed, printed; replay with TA_SEED=...):
 *      c_q in 1..6 (often the paper's 6 x 11), odd c_k, causal, GQA,
 *      seqlens_k, sliding windows, a key prefix without queries (S_k > S_q),
 *      every dtype, random key tiles. The full forward (REF) is checked
 *      against the float64 oracle; then the sequence is run in random chunks
 *      (a few prefill pieces, then one to three tokens at a time) against a
 *      KV cache that grows (seq_k = prefix + rows so far), each chunk with
 *      q_history = min(c_q - 1, rows before it), the history rows read in
 *      place (q_hist = q - n rows, q's strides) or from a copy, a random
 *      block_q per chunk and one or two CPU threads (a quarter of the CPU
 *      chunks through the caller-run tasks). The chunks' o and lse,
 *      gathered, must equal the full forward's bit for bit, on REF and CPU.
 *      Outputs poisoned once before the chunks (an unwritten row shows).
 *      Control: a chunk run without its history differs from the full
 *      forward (counted; some must differ, else the test proves nothing).
 *      A third of the sequences (--rope: all) have the rotary load stage
 *      (docs/rope.md): either pair convention, all or some of D / 2 pairs,
 *      a padded row stride, per-kv-head tables, tables of random angles
 *      (NaN in the gaps no one may read), absolute positions as a decode
 *      loop passes them (pos_q = off_b + prefix + t, pos_k = off_b + j or
 *      NULL); each chunk passes its rows' positions, and its history rows
 *      turn by row 0's table row - i. The full forward's oracle gets q and
 *      k turned in double; and for every chunk with history rows the
 *      oracle is run on the chunk alone, its history rows prepended as
 *      query rows and turned explicitly by the chunk's pos_q[b][0] - i,
 *      against the chunk's rows (relative error per dtype).
 *   2. bad history: q_history outside [0, c_q - 1] or without a conv, a NULL
 *      q_hist, o overlapping q_hist, a misaligned q_hist, a negative
 *      q_hist stride, rope with history and no pos_q, a history row's table
 *      row below 0 (pos_q[b][0] < q_history), the backward with history: the
 *      documented status, ta_explain_fwd / _bwd naming the field, the output
 *      untouched.
 * Usage: test_mta_chunks [--quick] [--rope]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle_check.h"
#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

static const double tol_fwd[TA_OC_TENSORS] = {2e-6, 2e-6, 0.0, 0.0, 0.0, 0.0};
static err_max worst[3];
static long n_chunks, n_hist_chunks, n_inplace, n_control, n_control_differ, n_problems;
static long n_rope, n_rope_oracle;
static double worst_chunk_oracle[3]; /* [dtype]: the chunk oracle's relative error of o */
static int g_rope_pct = 33;          /* --rope: 100 */

/* The rotary load stage of a sequence (rope.p.rope != 0): the problem's rope_*
 * fields and the full sequence's tables and absolute positions. */
typedef struct rope_seq {
    ta_problem p;           /* only its rope, rope_* fields are used */
    float *cos, *sin;       /* [tables][rope_rows][row stride]; gaps NaN */
    size_t n_tab;           /* floats of each */
    int32_t *pos_q, *pos_k; /* [B, T]: off_b + prefix + t; [B, S_k]: off_b + j, or NULL */
} rope_seq;

/* ---------------------------------------------------------------------- */
/* One sequence                                                            */
/* ---------------------------------------------------------------------- */

/* A random MTA problem: S_q = T query rows, S_k = prefix + T keys. */
static void random_problem(ta_rng *r, tcase *tc, int32_t *prefix) {
    static const int32_t dim_cuts[3] = {40, 80, 100};
    ta_problem *p = &tc->p;
    const int32_t c = ta_rng_int(r, 0, 2);
    memset(tc, 0, sizeof *tc);
    ta_oc_random_heads(r, p, dim_cuts);
    if (p->head_dim > 96) p->head_dim = 96;
    if (p->head_dim_v > 96) p->head_dim_v = 96;
    p->conv_q = c == 0 ? 6 : ta_rng_int(r, 1, 6);
    p->conv_k = c == 0 ? 11 : 2 * ta_rng_int(r, 0, 5) + 1;
    p->seq_q = ta_rng_int(r, 0, 4) == 0 ? ta_rng_int(r, 1, 8) : ta_rng_int(r, 1, 110);
    *prefix = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 40) : 0;
    p->seq_k = *prefix + p->seq_q;
    p->flags = TA_CAUSAL;
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 48);
    if (p->block_k && p->block_k < 4 * ((p->conv_k - 1) / 2) + 1) p->block_k = 0;
    ta_oc_random_scale(r, p);
    ta_oc_random_seqlens(r, tc);
    ta_test_random_window(r, p, 25);
}

static void fill_kernel(ta_rng *r, tcase *tc) {
    const float a = 1.0f / sqrtf((float)(tc->p.conv_q * tc->p.conv_k));
    size_t i;
    for (i = 0; i < tc->n_w; ++i)
        tc->conv_w[i] = ta_rng_uniform(r, -a, a);
    for (i = 0; i < (size_t)tc->p.heads_q; ++i) /* near the identity: softmax stays lively */
        tc->conv_w[i * (size_t)(tc->p.conv_q * tc->p.conv_k) +
                   (size_t)((tc->p.conv_q - 1) * tc->p.conv_k + (tc->p.conv_k - 1) / 2)] += 1.0f;
    tc->ow = ta_oracle_widen(tc->conv_w, TA_F32, tc->n_w);
}

/* With probability g_rope_pct (and D >= 2), the rotary stage of the
 * sequence tc (prefix keys without queries); else rs->p.rope = 0. */
static void random_rope(ta_rng *r, const tcase *tc, int32_t prefix, rope_seq *rs) {
    const ta_problem *p = &tc->p;
    const int32_t half_d = p->head_dim / 2, T = p->seq_q;
    int32_t rows, stride, tables, g, t, i, b, off_max = 0, *off;
    memset(rs, 0, sizeof *rs);
    if (half_d < 1 || ta_rng_int(r, 0, 99) >= g_rope_pct) return;
    rs->p.rope = ta_rng_int(r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    rs->p.rope_pairs = ta_rng_int(r, 0, 1) ? half_d : ta_rng_int(r, 1, half_d);
    off = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
    rs->pos_q = (int32_t *)malloc((size_t)p->batch * (size_t)T * sizeof(int32_t));
    if (ta_rng_int(r, 0, 1)) /* keys at positions off_b + j */
        rs->pos_k = (int32_t *)malloc((size_t)p->batch * (size_t)p->seq_k * sizeof(int32_t));
    for (b = 0; b < p->batch; ++b) {
        off[b] = rs->pos_k ? ta_rng_int(r, 0, 30) : 0;
        off_max = off[b] > off_max ? off[b] : off_max;
    }
    rows = off_max + p->seq_k + ta_rng_int(r, 0, 5);
    stride = ta_rng_int(r, 0, 2) == 0 ? rs->p.rope_pairs + ta_rng_int(r, 1, 5) : 0;
    rs->p.rope_rows = rows;
    rs->p.rope_row_stride = stride;
    if (stride == 0) stride = rs->p.rope_pairs;
    rs->p.rope_head_stride = ta_rng_int(r, 0, 2) == 0 ? rows * stride + ta_rng_int(r, 0, 7) : 0;
    tables = rs->p.rope_head_stride ? p->heads_kv : 1;
    rs->n_tab =
        (size_t)(tables - 1) * (size_t)rs->p.rope_head_stride + (size_t)rows * (size_t)stride;
    rs->cos = (float *)ta_test_alloc(rs->n_tab * sizeof(float));
    rs->sin = (float *)ta_test_alloc(rs->n_tab * sizeof(float));
    memset(rs->cos, 0xFF, rs->n_tab * sizeof(float)); /* NaN: entries no one may read */
    memset(rs->sin, 0xFF, rs->n_tab * sizeof(float));
    for (g = 0; g < tables; ++g)
        for (t = 0; t < rows; ++t)
            for (i = 0; i < rs->p.rope_pairs; ++i) {
                const size_t at = (size_t)g * (size_t)rs->p.rope_head_stride +
                                  (size_t)t * (size_t)stride + (size_t)i;
                const double angle = (double)ta_rng_uniform(r, -40.0f, 40.0f);
                rs->cos[at] = (float)cos(angle);
                rs->sin[at] = (float)sin(angle);
            }
    for (b = 0; b < p->batch; ++b) {
        for (t = 0; t < T; ++t)
            rs->pos_q[(size_t)b * (size_t)T + (size_t)t] = off[b] + prefix + t;
        for (t = 0; rs->pos_k && t < p->seq_k; ++t)
            rs->pos_k[(size_t)b * (size_t)p->seq_k + (size_t)t] = off[b] + t;
    }
    free(off);
}

static void free_rope(rope_seq *rs) {
    ta_test_free(rs->cos), ta_test_free(rs->sin);
    free(rs->pos_q), free(rs->pos_k);
    memset(rs, 0, sizeof *rs);
}

/* x (double [B, heads, S, D], contiguous: a side's rows) turned in place as
 * the load stage does, row s of batch entry b by table row row_of[b S + s]. */
static void rotate_rows(const rope_seq *rs, const ta_problem *p, double *x, int32_t heads,
                        int32_t seq, const int32_t *row_of) {
    const int32_t group = heads == p->heads_q ? p->heads_q / p->heads_kv : 1;
    const int32_t stride = rs->p.rope_row_stride ? rs->p.rope_row_stride : rs->p.rope_pairs;
    const int32_t n = rs->p.rope_pairs;
    int32_t b, h, t, i;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < heads; ++h)
            for (t = 0; t < seq; ++t) {
                double *row =
                    x + (((size_t)b * (size_t)heads + (size_t)h) * (size_t)seq + (size_t)t) *
                            (size_t)p->head_dim;
                const size_t base =
                    (size_t)(h / group) * (size_t)rs->p.rope_head_stride +
                    (size_t)row_of[(size_t)b * (size_t)seq + (size_t)t] * (size_t)stride;
                for (i = 0; i < n; ++i) {
                    const int32_t ia = rs->p.rope == TA_ROPE_HALF ? i : 2 * i;
                    const int32_t ib = rs->p.rope == TA_ROPE_HALF ? i + n : 2 * i + 1;
                    const double c = (double)rs->cos[base + (size_t)i];
                    const double sn = (double)rs->sin[base + (size_t)i];
                    const double xa = row[ia], xb = row[ib];
                    row[ia] = xa * c - xb * sn;
                    row[ib] = xb * c + xa * sn;
                }
            }
}

/* Table rows of the k side's first `seq` keys: pos_k's, or j. [B, seq] (free()). */
static int32_t *key_rows(const rope_seq *rs, const ta_problem *full, int32_t seq) {
    int32_t *rows = (int32_t *)malloc((size_t)full->batch * (size_t)seq * sizeof(int32_t));
    int32_t b, j;
    for (b = 0; b < full->batch; ++b)
        for (j = 0; j < seq; ++j)
            rows[(size_t)b * (size_t)seq + (size_t)j] =
                rs->pos_k ? rs->pos_k[(size_t)b * (size_t)full->seq_k + (size_t)j] : j;
    return rows;
}

/* A block_q valid for both passes of the conv (or 0 = the default). */
static int32_t random_block_q(ta_rng *r, int32_t conv_q) {
    const int32_t bq = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 8, 80);
    return bq && bq < 2 * (conv_q - 1) + 1 ? 0 : bq;
}

/* The chunk's rotary stage (rs->p.rope != 0): the problem's fields, the
 * tables, and its rows' positions cut from the sequence's, pos_q [B, b - a]
 * (rows [a, b)) and pos_k [B, seq_k] (keys [0, seq_k)), into new arrays
 * (owned: free() them). */
static void chunk_rope(const rope_seq *rs, const ta_problem *full, int32_t a, int32_t b,
                       ta_problem *p, ta_rope_args *ra, int32_t *owned[2]) {
    int32_t bb, t;
    int32_t *pq, *pk = NULL;
    p->rope = rs->p.rope, p->rope_pairs = rs->p.rope_pairs, p->rope_rows = rs->p.rope_rows;
    p->rope_row_stride = rs->p.rope_row_stride, p->rope_head_stride = rs->p.rope_head_stride;
    pq = (int32_t *)malloc((size_t)full->batch * (size_t)(b - a) * sizeof(int32_t));
    for (bb = 0; bb < full->batch; ++bb)
        for (t = a; t < b; ++t)
            pq[(size_t)bb * (size_t)(b - a) + (size_t)(t - a)] =
                rs->pos_q[(size_t)bb * (size_t)full->seq_q + (size_t)t];
    if (rs->pos_k) pk = key_rows(rs, full, p->seq_k);
    ra->cos = rs->cos, ra->sin = rs->sin, ra->pos_q = pq, ra->pos_k = pk;
    owned[0] = pq, owned[1] = pk;
}

/* The full forward's (contiguous) problem p run over query rows [a, b) of
 * every (batch, head): the chunk, its outputs written into o_all (rows
 * [a, b) through o's strides) and lse_all (gathered). hist: 0 = no history,
 * 1 = q_hist in place (q - n rows), 2 = a contiguous copy. rs: the rotary
 * stage (rs->p.rope = 0: none). */
static ta_status run_chunk(ta_backend be, ta_rng *r, const tcase *tc, const rope_seq *rs,
                           int32_t prefix, int32_t a, int32_t b, int hist, int32_t threads,
                           void *o_all, float *lse_all) {
    const ta_problem *full = &tc->p;
    const int32_t T = full->seq_q, B = full->batch, H = full->heads_q, D = full->head_dim;
    const int32_t n = hist ? (a < full->conv_q - 1 ? a : full->conv_q - 1) : 0;
    ta_problem p = *full;
    ta_fwd_args fa;
    size_t bytes = 0, i;
    int32_t *seql = NULL, *pos[2] = {NULL, NULL}, bb, h, s;
    float *lse;
    void *ws, *qh = NULL;
    ta_status st;
    p.seq_q = b - a;
    p.seq_k = prefix + b;
    p.q_history = n;
    p.block_q = random_block_q(r, p.conv_q);
    p.num_threads = threads;
    memset(&fa, 0, sizeof fa);
    if (rs->p.rope) chunk_rope(rs, full, a, b, &p, &fa.rope, pos);
    fa.q = (const char *)tc->q + (size_t)a * (size_t)D * tc->eb;
    fa.q_strides = ta_strides_contiguous(H, T, D);
    fa.k = tc->k, fa.v = tc->v;
    fa.k_strides = ta_strides_contiguous(full->heads_kv, full->seq_k, D);
    fa.v_strides = ta_strides_contiguous(full->heads_kv, full->seq_k, full->head_dim_v);
    fa.o = (char *)o_all + (size_t)a * (size_t)full->head_dim_v * tc->eb;
    fa.o_strides = ta_strides_contiguous(H, T, full->head_dim_v);
    fa.conv_w = tc->conv_w;
    lse = (float *)ta_test_alloc((size_t)B * (size_t)H * (size_t)p.seq_q * sizeof(float));
    ta_poison(lse, (size_t)B * (size_t)H * (size_t)p.seq_q * sizeof(float));
    fa.lse = lse;
    if (tc->seqlens) { /* the cache holds prefix + b keys: the full lengths cut there */
        seql = (int32_t *)malloc((size_t)B * sizeof(int32_t));
        for (bb = 0; bb < B; ++bb)
            seql[bb] = tc->seqlens[bb] < p.seq_k ? tc->seqlens[bb] : p.seq_k;
        fa.seqlens_k = seql;
    }
    if (n > 0 && hist == 1) { /* the rows just above the chunk in q itself */
        fa.q_hist = (const char *)tc->q + (size_t)(a - n) * (size_t)D * tc->eb;
        fa.q_hist_strides = fa.q_strides;
    } else if (n > 0) { /* a caller's copy [B, H, n, D], contiguous */
        qh = ta_test_alloc((size_t)B * (size_t)H * (size_t)n * (size_t)D * tc->eb);
        for (bb = 0; bb < B; ++bb)
            for (h = 0; h < H; ++h)
                for (s = 0; s < n; ++s)
                    memcpy((char *)qh +
                               ((((size_t)bb * (size_t)H + (size_t)h) * (size_t)n + (size_t)s) *
                                (size_t)D) *
                                   tc->eb,
                           (const char *)tc->q +
                               ((((size_t)bb * (size_t)H + (size_t)h) * (size_t)T +
                                 (size_t)(a - n + s)) *
                                (size_t)D) *
                                   tc->eb,
                           (size_t)D * tc->eb);
        fa.q_hist = qh;
    }
    if (be == TA_BACKEND_CPU && ta_rng_int(r, 0, 3) == 0) {
        st = ta_test_fwd_tasks(&p, &fa); /* the caller-run tasks, in reverse order */
        goto gather;
    }
    if ((st = ta_fwd_workspace_size(&p, be, &bytes)) != TA_OK) goto done;
    ws = ta_oc_workspace(r, bytes, ta_rng_int(r, 0, 1));
    st = ta_fwd(&p, be, &fa, ws, bytes, NULL);
    ta_test_free(ws);
gather:
    if (st == TA_OK) /* lse rows [a, b) of every (batch, head) */
        for (i = 0; i < (size_t)B * (size_t)H; ++i)
            memcpy(lse_all + i * (size_t)T + (size_t)a, lse + i * (size_t)p.seq_q,
                   (size_t)p.seq_q * sizeof(float));
done:
    ta_test_free(lse);
    ta_test_free(qh);
    free(seql);
    free(pos[0]), free(pos[1]);
    return st;
}

/* Chunk ends: a few prefill pieces, then 1..3 rows at a time; ends[0] = 0. */
static int32_t random_chunks(ta_rng *r, int32_t T, int32_t *ends) {
    int32_t n = 0, at = 0;
    ends[n++] = 0;
    while (at < T) {
        const int prefill = n <= 3 && ta_rng_int(r, 0, 1);
        int32_t len = prefill ? ta_rng_int(r, 1, T) : ta_rng_int(r, 1, 3);
        if (at + len > T) len = T - at;
        at += len;
        ends[n++] = at;
    }
    return n;
}

static size_t first_diff(const void *a, const void *b, size_t eb, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (memcmp((const char *)a + i * eb, (const char *)b + i * eb, eb) != 0) return i;
    return n;
}

/* max |lib - orc| over rows [a, b) of the sequence's o (lib: [B, H, T, D_v]
 * in the storage dtype) against rows [n, n + b - a) of the chunk oracle's
 * (orc: [B, H, n + b - a, D_v]), relative to max |orc| there; lse likewise
 * (its -inf exactly), relative to max(1, max |lse|). */
static void chunk_errors(const tcase *tc, int32_t a, int32_t b, int32_t n, const void *o_lib,
                         const float *l_lib, const double *o_orc, const double *l_orc, double *e_o,
                         double *e_lse) {
    const ta_problem *p = &tc->p;
    const size_t dv = (size_t)p->head_dim_v, rows = (size_t)(b - a), s_c = (size_t)n + rows;
    double m_o = 0.0, m_l = 1.0, d_o = 0.0, d_l = 0.0;
    size_t bh, x, d;
    for (bh = 0; bh < (size_t)p->batch * (size_t)p->heads_q; ++bh)
        for (x = 0; x < rows; ++x) {
            const size_t lib_row = bh * (size_t)p->seq_q + (size_t)a + x,
                         orc_row = bh * s_c + (size_t)n + x;
            const double lo = l_orc[orc_row], ll = (double)l_lib[lib_row];
            if (isinf(lo)) {
                if (!(ll == lo)) d_l = (double)INFINITY;
            } else {
                m_l = fabs(lo) > m_l ? fabs(lo) : m_l;
                d_l = fabs(ll - lo) > d_l || isnan(ll) ? fabs(ll - lo) : d_l;
            }
            for (d = 0; d < dv; ++d) {
                const double oo = o_orc[orc_row * dv + d];
                const double ol = ta_get(o_lib, p->dtype, lib_row * dv + d);
                m_o = fabs(oo) > m_o ? fabs(oo) : m_o;
                d_o = fabs(ol - oo) > d_o || isnan(ol) ? fabs(ol - oo) : d_o;
            }
        }
    *e_o = d_o / (m_o > 1e-30 ? m_o : 1e-30);
    *e_lse = d_l / m_l;
}

/* The float64 oracle on chunk [a, b) alone (n > 0 history rows): q rows
 * a - n .. b - 1 as the oracle's query rows 0 .. n + b - a - 1 (the history
 * rows prepended), keys [0, prefix + b); with the rotary stage, the chunk's
 * rows turned by their positions and the history rows explicitly by the
 * chunk's pos_q[b][0] - i (docs/rope.md). uq, uk: q and k widened, not
 * turned. Compared with the library's rows [a, b) of o_lib, l_lib. */
static void check_chunk_oracle(const tcase *tc, const rope_seq *rs, const double *uq,
                               const double *uk, int32_t prefix, int32_t a, int32_t b,
                               const void *o_lib, const float *l_lib, const char *desc) {
    static const double bound[3] = {2e-5, 4e-3, 3e-2}; /* o: f32, f16, bf16 */
    const ta_problem *full = &tc->p;
    const int32_t n = a < full->conv_q - 1 ? a : full->conv_q - 1, s_c = n + b - a;
    const int32_t s_k = prefix + b, T = full->seq_q, D = full->head_dim, Dv = full->head_dim_v;
    const size_t bh_q = (size_t)full->batch * (size_t)full->heads_q;
    const size_t bh_k = (size_t)full->batch * (size_t)full->heads_kv;
    ta_problem pc = *full;
    ta_oracle_in in;
    double *q = (double *)malloc(bh_q * (size_t)s_c * (size_t)D * sizeof(double));
    double *k = (double *)malloc(bh_k * (size_t)s_k * (size_t)D * sizeof(double));
    double *v = (double *)malloc(bh_k * (size_t)s_k * (size_t)Dv * sizeof(double));
    double *o = (double *)malloc(bh_q * (size_t)s_c * (size_t)Dv * sizeof(double));
    double *lse = (double *)malloc(bh_q * (size_t)s_c * sizeof(double));
    int32_t *q_rows = (int32_t *)malloc((size_t)full->batch * (size_t)s_c * sizeof(int32_t));
    int32_t *seql = NULL, *k_rows, bb, x;
    size_t i;
    double e_o, e_lse;
    for (i = 0; i < bh_q; ++i)
        memcpy(q + i * (size_t)s_c * (size_t)D, uq + (i * (size_t)T + (size_t)(a - n)) * (size_t)D,
               (size_t)s_c * (size_t)D * sizeof(double));
    for (i = 0; i < bh_k; ++i) {
        memcpy(k + i * (size_t)s_k * (size_t)D, uk + i * (size_t)full->seq_k * (size_t)D,
               (size_t)s_k * (size_t)D * sizeof(double));
        memcpy(v + i * (size_t)s_k * (size_t)Dv, tc->ov + i * (size_t)full->seq_k * (size_t)Dv,
               (size_t)s_k * (size_t)Dv * sizeof(double));
    }
    if (rs->p.rope) {
        for (bb = 0; bb < full->batch; ++bb) {
            const int32_t *pos = rs->pos_q + (size_t)bb * (size_t)T + (size_t)a; /* the chunk's */
            for (x = 0; x < s_c; ++x) /* history row -i = x - n: pos[0] - i */
                q_rows[(size_t)bb * (size_t)s_c + (size_t)x] =
                    x < n ? pos[0] - (n - x) : pos[x - n];
        }
        k_rows = key_rows(rs, full, s_k);
        rotate_rows(rs, full, q, full->heads_q, s_c, q_rows);
        rotate_rows(rs, full, k, full->heads_kv, s_k, k_rows);
        free(k_rows);
    }
    pc.seq_q = s_c, pc.seq_k = s_k;
    memset(&in, 0, sizeof in);
    in.q = q, in.k = k, in.v = v, in.conv_w = tc->ow;
    if (tc->seqlens) {
        seql = (int32_t *)malloc((size_t)full->batch * sizeof(int32_t));
        for (bb = 0; bb < full->batch; ++bb)
            seql[bb] = tc->seqlens[bb] < s_k ? tc->seqlens[bb] : s_k;
        in.seqlens_k = seql;
    }
    TA_CHECK(ta_oracle_fwd(&pc, &in, o, lse) == 0, "chunk oracle");
    chunk_errors(tc, a, b, n, o_lib, l_lib, o, lse, &e_o, &e_lse);
    TA_CHECK(e_o <= bound[full->dtype] && e_lse <= 2e-5,
             "chunk [%d, %d) (%d history rows) vs the chunk oracle: o %.3g lse %.3g: %s", a, b, n,
             e_o, e_lse, desc);
    if (e_o > worst_chunk_oracle[full->dtype]) worst_chunk_oracle[full->dtype] = e_o;
    ++n_rope_oracle;
    free(q), free(k), free(v), free(o), free(lse), free(q_rows), free(seql);
}

static void check_sequence(ta_rng *r) {
    tcase tc;
    rope_seq rs;
    char desc[320];
    int32_t prefix, *ends, n_ends, c, be_i;
    void *o_full, *o_chunks;
    float *l_full, *l_chunks;
    double *uq = NULL, *uk = NULL; /* q, k widened, not turned (rope only) */
    run_out out;
    err_max e;
    random_problem(r, &tc, &prefix);
    ta_oc_make_buffers(r, &tc);
    fill_kernel(r, &tc);
    random_rope(r, &tc, prefix, &rs);
    ta_oc_describe(&tc, desc, sizeof desc);
    if (rs.p.rope) {
        const size_t used = strlen(desc);
        snprintf(desc + used, sizeof desc - used,
                 " rope=%s pairs=%d rows=%d row_stride=%d head_stride=%d pos_k=%s prefix=%d",
                 rs.p.rope == TA_ROPE_HALF ? "half" : "interleaved", rs.p.rope_pairs,
                 rs.p.rope_rows, rs.p.rope_row_stride, rs.p.rope_head_stride,
                 rs.pos_k ? "given" : "NULL", prefix);
        ++n_rope;
    }
    ++n_problems;
    o_full = ta_test_alloc(tc.n_o * tc.eb), o_chunks = ta_test_alloc(tc.n_o * tc.eb);
    l_full = (float *)ta_test_alloc(tc.n_lse * 4), l_chunks = (float *)ta_test_alloc(tc.n_lse * 4);
    /* the full forward, REF (one chunk [0, T) without history), against the
     * oracle (with the rotary stage: on q and k turned in double) */
    memset(&out, 0, sizeof out);
    out.o = o_full, out.lse = l_full;
    ta_poison(o_full, tc.n_o * tc.eb);
    ta_poison(l_full, tc.n_lse * 4);
    TA_CHECK(run_chunk(TA_BACKEND_REF, r, &tc, &rs, prefix, 0, tc.p.seq_q, 0, 1, o_full, l_full) ==
                 TA_OK,
             "full: %s", desc);
    if (rs.p.rope) {
        int32_t *k_rows = key_rows(&rs, &tc.p, tc.p.seq_k);
        uq = ta_oracle_widen(tc.q, tc.p.dtype, tc.n_q);
        uk = ta_oracle_widen(tc.k, tc.p.dtype, tc.n_k);
        rotate_rows(&rs, &tc.p, tc.oq, tc.p.heads_q, tc.p.seq_q, rs.pos_q);
        rotate_rows(&rs, &tc.p, tc.ok, tc.p.heads_kv, tc.p.seq_k, k_rows);
        free(k_rows);
    }
    ta_oc_run_oracle(&tc, o_full);
    memset(&e, 0, sizeof e);
    ta_oc_compare_all(&tc, &out, 1, 0, tol_fwd, 1, &e);
    ta_oc_fold(&worst[tc.p.dtype], &e);
    ends = (int32_t *)malloc(((size_t)tc.p.seq_q + 2) * sizeof(int32_t));
    n_ends = random_chunks(r, tc.p.seq_q, ends);
    for (be_i = 0; be_i < 2; ++be_i) { /* REF, then CPU: the same chunks */
        const ta_backend be = be_i ? TA_BACKEND_CPU : TA_BACKEND_REF;
        ta_poison(o_chunks, tc.n_o * tc.eb);
        ta_poison(l_chunks, tc.n_lse * 4);
        for (c = 0; c + 1 < n_ends; ++c) {
            const int hist = ta_rng_int(r, 1, 2);
            const ta_status st = run_chunk(be, r, &tc, &rs, prefix, ends[c], ends[c + 1], hist,
                                           ta_rng_int(r, 1, 2), o_chunks, l_chunks);
            TA_CHECK(st == TA_OK, "%s chunk [%d, %d): %s: %s", be_i ? "CPU" : "REF", ends[c],
                     ends[c + 1], ta_status_string(st), desc);
            if (st == TA_OK && !be_i && rs.p.rope && ends[c] > 0 && tc.p.conv_q > 1)
                check_chunk_oracle(&tc, &rs, uq, uk, prefix, ends[c], ends[c + 1], o_chunks,
                                   l_chunks, desc);
            n_chunks++;
            n_hist_chunks += ends[c] > 0 && tc.p.conv_q > 1;
            n_inplace += hist == 1 && ends[c] > 0 && tc.p.conv_q > 1;
        }
        TA_CHECK(memcmp(o_chunks, o_full, tc.n_o * tc.eb) == 0,
                 "%s chunks: o != the full forward at element %zu of %zu (%d chunks): %s",
                 be_i ? "CPU" : "REF", first_diff(o_chunks, o_full, tc.eb, tc.n_o), tc.n_o,
                 n_ends - 1, desc);
        TA_CHECK(memcmp(l_chunks, l_full, tc.n_lse * 4) == 0,
                 "%s chunks: lse != the full forward at row %zu: %s", be_i ? "CPU" : "REF",
                 first_diff(l_chunks, l_full, 4, tc.n_lse), desc);
    }
    /* control: one chunk that has rows above it, without its history */
    if (tc.p.conv_q > 1 && n_ends > 2) {
        const int32_t at = ta_rng_int(r, 1, n_ends - 2);
        memcpy(o_chunks, o_full, tc.n_o * tc.eb);
        memcpy(l_chunks, l_full, tc.n_lse * 4);
        TA_CHECK(run_chunk(TA_BACKEND_REF, r, &tc, &rs, prefix, ends[at], ends[at + 1], 0, 1,
                           o_chunks, l_chunks) == TA_OK,
                 "control: %s", desc);
        ++n_control;
        n_control_differ += memcmp(o_chunks, o_full, tc.n_o * tc.eb) != 0;
    }
    free(ends);
    ta_test_free(o_full), ta_test_free(o_chunks), ta_test_free(l_full), ta_test_free(l_chunks);
    free(uq), free(uk);
    free_rope(&rs);
    ta_oc_free_case(&tc);
}

/* ---------------------------------------------------------------------- */
/* 2. Bad history                                                          */
/* ---------------------------------------------------------------------- */

/* The bad-input case on REF and CPU (ta_test_expect_fwd). */
static void expect_fwd(const ta_problem *p, const ta_fwd_args *a, void *ws, size_t ws_bytes,
                       ta_status want, const char *field, const char *what) {
    ta_test_expect_fwd(p, TA_BACKEND_REF, a, ws, ws_bytes, want, field, what);
    ta_test_expect_fwd(p, TA_BACKEND_CPU, a, ws, ws_bytes, want, field, what);
}

static void check_bad_input(void) {
    enum { B = 1, H = 2, S = 5, D = 8, N = 3 };
    static float q[B * H * S * D], k[B * H * (S + 4) * D], v[B * H * (S + 4) * D];
    static float hist[B * H * S * D + 64], w[H * 4 * 3]; /* room for o's canary */
    static float o[B * H * S * D + 64];
    static float dq[B * H * S * D], dk[B * H * (S + 4) * D], dv[B * H * (S + 4) * D], dw[H * 4 * 3];
    ta_problem p = {0}, bad;
    ta_fwd_args fa, a;
    ta_bwd_args ba;
    size_t bytes = 0, i;
    void *ws;
    char why[256];
    ta_status st;
    for (i = 0; i < sizeof q / sizeof q[0]; ++i)
        q[i] = (float)(i % 7) * 0.1f;
    for (i = 0; i < sizeof k / sizeof k[0]; ++i)
        k[i] = v[i] = (float)(i % 5) * 0.1f;
    for (i = 0; i < sizeof hist / sizeof hist[0]; ++i)
        hist[i] = 0.3f;
    for (i = 0; i < sizeof w / sizeof w[0]; ++i)
        w[i] = 0.05f;
    p.batch = B, p.heads_q = p.heads_kv = H, p.seq_q = S, p.seq_k = S + 4;
    p.head_dim = p.head_dim_v = D, p.flags = TA_CAUSAL, p.conv_q = 4, p.conv_k = 3;
    p.q_history = N;
    TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_OK, "size");
    {
        size_t b2 = 0;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &b2) == TA_OK, "size cpu");
        bytes = b2 > bytes ? b2 : bytes;
    }
    ws = ta_test_alloc(bytes);
    memset(&fa, 0, sizeof fa);
    fa.q = q, fa.k = k, fa.v = v, fa.o = o, fa.conv_w = w, fa.q_hist = hist;
    expect_fwd(&p, &fa, ws, bytes, TA_OK, "ok", "valid history");
    bad = p, bad.q_history = 4; /* > c_q - 1 */
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "q_history past c_q - 1");
    bad = p, bad.q_history = -1;
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "negative q_history");
    bad = p, bad.conv_q = bad.conv_k = 0, bad.q_history = 1; /* SDPA */
    expect_fwd(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "q_history", "q_history without a conv");
    a = fa, a.q_hist = NULL;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_NULL_ARG, "args.q_hist", "NULL q_hist");
    a = fa, a.o = hist; /* the output over the history rows */
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist", "o overlapping q_hist");
    a = fa, a.q_hist = (const char *)hist + 2; /* not on a float */
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist", "misaligned q_hist");
    a = fa, a.q_hist_strides.seq = -8;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist_strides", "negative stride");
    a = fa, a.q_hist_strides.batch = 1, a.q_hist_strides.head = 1, a.q_hist_strides.seq = 1;
    expect_fwd(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "args.q_hist_strides", "aliasing strides");
    a = fa, a.q_hist = NULL; /* ignored without history */
    bad = p, bad.q_history = 0;
    expect_fwd(&bad, &a, ws, bytes, TA_OK, "ok", "no history, q_hist NULL");
    bad = p, bad.rope = TA_ROPE_HALF, bad.rope_pairs = 2, bad.rope_rows = 64;
    { /* the rotary stage: history row -i turns by pos_q[b][0] - i, so pos_q is
         required and pos_q[b][0] >= q_history (N = 3) */
        static float cs[64 * 2], sn[64 * 2];
        int32_t pos[B * S] = {3, 4, 5, 6, 7};
        for (i = 0; i < 64 * 2; ++i)
            cs[i] = 0.6f, sn[i] = 0.8f;
        a = fa, a.rope.cos = cs, a.rope.sin = sn, a.rope.pos_q = pos;
        expect_fwd(&bad, &a, ws, bytes, TA_OK, "ok", "rope with history, pos_q[0] = q_history");
        a.rope.pos_q = NULL;
        expect_fwd(&bad, &a, ws, bytes, TA_ERR_BAD_ARG, "args.rope.pos_q",
                   "rope with history, no pos_q");
        pos[0] = 2;
        a.rope.pos_q = pos;
        expect_fwd(&bad, &a, ws, bytes, TA_ERR_BAD_ARG, "args.rope.pos_q[0]",
                   "rope with history, pos_q[0] < q_history");
        pos[0] = 64;
        expect_fwd(&bad, &a, ws, bytes, TA_ERR_BAD_ARG, "args.rope.pos_q[0]",
                   "rope with history, pos_q[0] = rope_rows");
        bad.q_history = 0, pos[0] = 0; /* without history row 0 may be at 0 */
        expect_fwd(&bad, &a, ws, bytes, TA_OK, "ok", "rope without history, pos_q[0] = 0");
    }
    /* the backward: forward only, from the size query on */
    TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &bytes) == TA_ERR_UNSUPPORTED,
             "bwd size with history");
    st = ta_explain_bwd_workspace_size(&p, TA_BACKEND_CPU, why, sizeof why);
    TA_CHECK(st == TA_ERR_UNSUPPORTED && strstr(why, "q_history"), "bwd size explain: %s", why);
    memset(&ba, 0, sizeof ba);
    ba.q = q, ba.k = k, ba.v = v, ba.o = o, ba.d_o = o, ba.lse = w, ba.conv_w = w;
    ba.dq = dq, ba.dk = dk, ba.dv = dv, ba.dconv_w = dw;
    TA_CHECK(ta_bwd(&p, TA_BACKEND_CPU, &ba, ws, bytes, NULL) == TA_ERR_UNSUPPORTED,
             "bwd with history");
    st = ta_explain_bwd(&p, TA_BACKEND_REF, &ba, ws, bytes, NULL, why, sizeof why);
    TA_CHECK(st == TA_ERR_UNSUPPORTED && strstr(why, "q_history"), "bwd explain: %s", why);
    ta_test_free(ws);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_mta_chunks");
    int quick = 0, n_seq, i;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--rope") == 0)
            g_rope_pct = 100;
        else {
            fprintf(stderr, "usage: test_mta_chunks [--quick] [--rope]\n");
            return 2;
        }
    }
    n_seq = quick ? 12 : 160;
    ta_rng_seed(&r, seed);
    check_bad_input();
    for (i = 0; i < n_seq && ta_test_failures == 0; ++i)
        check_sequence(&r);
    printf("test_mta_chunks: %ld sequences, %ld chunks (%ld with history rows, %ld read in "
           "place), all equal to the full forward on REF and CPU\n",
           n_problems, n_chunks, n_hist_chunks, n_inplace);
    printf("  control: %ld of %ld chunks run without their history differ from the full "
           "forward\n",
           n_control_differ, n_control);
    printf("  rotary stage: %ld sequences; %ld chunks with history rows against the chunk "
           "oracle, worst relative error of o: f32 %.3g, f16 %.3g, bf16 %.3g\n",
           n_rope, n_rope_oracle, worst_chunk_oracle[0], worst_chunk_oracle[1],
           worst_chunk_oracle[2]);
    TA_CHECK(n_control < 8 || n_control_differ > 0, "no control chunk differed: the history is "
                                                    "never needed by these problems");
    ta_oc_print_table("full forward (REF) vs the float64 oracle", worst, 2, 1, NULL);
    return ta_test_finish("test_mta_chunks");
}
