/*
 * The MTA decode score ring (ta_fwd_args.score_ring, score_ring_slots,
 * score_ring_strides; docs/mta.md section 2a): a decode step reads the history
 * rows' raw scores from the ring instead of recomputing them from q_hist.
 * REF and CPU.
 *
 *   1. Chunks with the ring == one full forward, bit for bit. Random MTA
 *      problems (fresh seed, printed; replay with TA_SEED=...): c_q in 2..7,
 *      odd c_k in 1..11, head dims across [1, 256], f32/f16/bf16, GQA,
 *      sometimes seqlens_k, a sliding window, the rotary load stage (absolute
 *      positions as a decode loop passes them), split-K (2 or 3 parts), keys
 *      before the first query row (a prefix without queries), keys after the
 *      last row with q_offset = -extra (rows where they were), a paged KV
 *      cache (3 in 4 calls of those sequences), random key tiles (block_k
 *      fixed per sequence) and query tiles (per call). The expected rows come
 *      from one REF forward over the whole sequence (S_q = T, S_k = K =
 *      prefix + T + extra); with split-K, whose cuts follow each call's key length,
 *      from the same call on REF recomputing the history from q_hist without
 *      a ring ("exact mode then gives the bits of recomputing them"). The
 *      sequence is then run in pieces against a growing cache (S_k = prefix +
 *      rows so far + extra; k, v the full buffers' prefix with their strides,
 *      copies, or the pages; q in place or a copy): a first prefill chunk (q_history 0), maybe a second
 *      one with q_hist given (the history recomputed, the ring written), then
 *      decode steps of 1 .. slots - q_history rows with q_hist = NULL and
 *      q_history = min(c_q - 1, rows before) (the history read from the ring),
 *      now and then another prefill chunk with q_hist given. Every call gets
 *      the ring with explicit strides {H slots cap, slots cap, cap} (cap = K,
 *      sometimes a few entries more; a sixth of the sequences with gaps after
 *      each head and batch entry, a sixth slot-major [B, slots, H, cap]),
 *      slots in [c_q, c_q + 8]. The ring starts
 *      as a signalling NaN pattern, so a read of an entry never written turns
 *      the output into NaN. Every call's o and lse rows are compared bitwise
 *      with the expected ones. Run on REF, CPU with 1 and 2 threads, and CPU
 *      through the caller-run tasks (plan, prepare, every task on this thread).
 *      Control: one decode step per sequence (REF) rerun with its history
 *      slots poisoned must change (some must: the ring is really read).
 *   2. The ring's contents: a model of the spec (the entries the last
 *      min(S_q, c_q - 1) rows of each call see, the last writer of each entry)
 *      says which entries hold a score and which must still be the poison;
 *      REF's written entries are checked against a float64 raw score
 *      scale <q_r, k_j> (q, k turned in double with the rotary stage), and
 *      every CPU ring is bitwise equal to REF's, poison included (the
 *      layout's gaps too: never written).
 *   3. Refusals: the status, ta_explain_fwd's line naming the field, o, lse and
 *      the ring untouched (canaries), the caller-run prepare's status: a ring
 *      with SDPA, slots < c_q, q_history + S_q > slots when reading, a slot
 *      stride below S_k, a negative stride, a misaligned ring, a ring
 *      overlapping o, lse, k, q_hist or the workspace, a key range, CUDA; and
 *      the boundaries that are accepted; a NULL ring with q_history > 0 and
 *      q_hist NULL: TA_ERR_NULL_ARG naming q_hist.
 * Usage: test_score_ring [--count N] [--quick]   (N sequences, default 250; --quick: 6)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

/* The ring's poison: a signalling NaN (quiet bit clear), distinctive bits. */
#define RING_POISON 0x7FA5A5A5u

enum { CALL_FIRST = 0, CALL_PREFILL = 1, CALL_DECODE = 2 };
static const char *const kind_name[3] = {"first prefill", "prefill with q_hist",
                                         "decode (history from the ring)"};
static const char *const dtype_name[3] = {"f32", "f16", "bf16"};

typedef struct variant {
    ta_backend be;
    int32_t threads; /* ta_problem.num_threads (tasks: drawn per call) */
    int tasks;       /* the caller-run tasks */
    const char *name;
} variant;
#define N_VARIANTS 4
static const variant g_variants[N_VARIANTS] = {{TA_BACKEND_REF, 1, 0, "REF"},
                                               {TA_BACKEND_CPU, 1, 0, "CPU 1 thread"},
                                               {TA_BACKEND_CPU, 2, 0, "CPU 2 threads"},
                                               {TA_BACKEND_CPU, 0, 1, "CPU caller-run tasks"}};

static long n_seq, n_calls, n_read_calls, n_hist_calls, n_split_seq, n_rope_seq, n_win_seq,
    n_seqlens_seq, n_prefix_seq, n_offset_seq, n_paged_seq, n_control, n_control_differ,
    n_refusals;
static long long n_written, n_masked_kept, n_never;

/* One sequence: the whole problem, its inputs, the chunking, the ring model. */
typedef struct seq {
    ta_problem p; /* the full forward: S_q = T, S_k = K, causal, the conv, rope fields,
                     q_offset = -extra */
    int32_t T, cap, slots;
    int32_t prefix, extra, K; /* keys before row 0 (no queries), after the last row (seen by
                                 none: q_offset = -extra puts row t at prefix + t); K keys */
    int32_t paged;            /* a paged copy of k, v exists (calls use it 3 in 4) */
    void *kpool, *vpool;      /* [kv_num_pages, page, H_kv, D], [.., D_v]; poison elsewhere */
    int32_t *table;           /* [B, kv_max_blocks] */
    int32_t page, n_pages, max_blocks;
    ta_strides rst; /* the ring's strides (batch, head, slot): explicit, never zero */
    size_t ring_n;  /* floats of one ring: its extent */
    int ring_layout; /* 0 {H slots cap, slots cap, cap}, 1 the same with gaps, 2 [B, slots, H, cap] */
    size_t eb;
    void *q, *k, *v;        /* [B, H, T, D], [B, H_kv, K, D], [B, H_kv, K, D_v] */
    float *w;               /* [H, c_q, c_k] */
    int32_t *seqlens;       /* [B] or NULL: the full lengths */
    float *cos, *sin;       /* the rotary tables (p.rope != 0) */
    size_t n_tab;           /* floats of each table */
    int32_t *pos_q, *pos_k; /* [B, T]: off_b + prefix + t; [B, K]: off_b + j, or NULL = j */
    int32_t n_calls;
    int32_t *ends; /* [n_calls + 1]: call c covers rows [ends[c], ends[c + 1]) */
    int *kind;     /* [n_calls] CALL_* */
    int32_t ctl;   /* the control call (a decode step), or -1 */
    int32_t *writer; /* [B, slots, cap]: the position whose row last wrote the entry, -1 none */
    float *ring_ref; /* REF's ring after the sequence */
} seq;

static int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

static int32_t pick_dim(ta_rng *r) {
    static const int32_t common[] = {32, 64, 96, 128};
    const int32_t c = ta_rng_int(r, 0, 99);
    if (c < 40) return ta_rng_int(r, 1, 16);
    if (c < 80) return common[ta_rng_int(r, 0, 3)];
    if (c < 96) return ta_rng_int(r, 17, 128);
    return ta_rng_int(r, 0, 1) ? 256 : 255;
}

/* A block_q valid for both passes of the conv (or 0 = the default). */
static int32_t random_block_q(ta_rng *r, int32_t conv_q) {
    const int32_t bq = ta_rng_int(r, 0, 1) ? 0 : ta_rng_int(r, 8, 80);
    return bq && bq < 2 * (conv_q - 1) + 1 ? 0 : bq;
}

static ta_strides ring_strides(const seq *s) { return s->rst; }

static size_t ring_floats(const seq *s) { return s->ring_n; }

/* The ring's layout: the decode loop's {H slots cap, slots cap, cap}, the
 * same with gaps after each head and batch entry, or slot-major
 * [B, slots, H, cap]. */
static void random_ring_layout(ta_rng *r, seq *s) {
    const int64_t H = s->p.heads_q, n = s->slots, cap = s->cap;
    const int c = ta_rng_int(r, 0, 5);
    ta_strides *st = &s->rst;
    s->ring_layout = c < 4 ? 0 : c - 3;
    if (s->ring_layout == 2) {
        st->head = cap;
        st->seq = H * cap;
        st->batch = n * H * cap + ta_rng_int(r, 0, 3);
    } else {
        st->seq = cap;
        st->head = n * cap + (s->ring_layout ? ta_rng_int(r, 1, 9) : 0);
        st->batch = H * st->head + (s->ring_layout ? ta_rng_int(r, 0, 9) : 0);
    }
    s->ring_n = (size_t)((int64_t)(s->p.batch - 1) * st->batch + (H - 1) * st->head +
                         (n - 1) * st->seq + cap);
}

static void ring_poison(float *ring, size_t n) {
    const uint32_t bits = RING_POISON;
    size_t i;
    for (i = 0; i < n; ++i)
        memcpy(ring + i, &bits, sizeof bits);
}

static int is_poison(const float *x) {
    uint32_t bits;
    memcpy(&bits, x, sizeof bits);
    return bits == RING_POISON;
}

/* Whether the row at position pos sees key j in a call with S_k = sk keys
 * (causal, the call's seqlens_k = the full one cut at sk, the window). */
static int visible(const seq *s, int32_t bb, int32_t pos, int32_t j, int32_t sk) {
    const ta_problem *p = &s->p;
    int32_t len = sk;
    if (j < 0 || j > pos || j >= sk) return 0;
    if (s->seqlens && s->seqlens[bb] < len) len = s->seqlens[bb];
    if (j >= len) return 0;
    if (p->flags & TA_WINDOW) {
        if (p->window_left >= 0 && j < pos - p->window_left) return 0;
        if (p->window_right >= 0 && j > pos + p->window_right) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------- */
/* A random sequence                                                       */
/* ---------------------------------------------------------------------- */

static void random_rope(ta_rng *r, seq *s) {
    ta_problem *p = &s->p;
    const int32_t half_d = p->head_dim / 2, T = s->T, K = s->K;
    int32_t rows, stride, tables, g, t, i, b, off_max = 0, *off;
    if (half_d < 1 || ta_rng_int(r, 0, 99) >= 30) return;
    p->rope = ta_rng_int(r, 0, 1) ? TA_ROPE_HALF : TA_ROPE_INTERLEAVED;
    p->rope_pairs = ta_rng_int(r, 0, 1) ? half_d : ta_rng_int(r, 1, half_d);
    off = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
    s->pos_q = (int32_t *)malloc((size_t)p->batch * (size_t)T * sizeof(int32_t));
    if (ta_rng_int(r, 0, 1)) /* keys at positions off_b + j */
        s->pos_k = (int32_t *)malloc((size_t)p->batch * (size_t)K * sizeof(int32_t));
    for (b = 0; b < p->batch; ++b) {
        off[b] = s->pos_k ? ta_rng_int(r, 0, 30) : 0;
        off_max = off[b] > off_max ? off[b] : off_max;
    }
    rows = off_max + K + ta_rng_int(r, 0, 5);
    stride = ta_rng_int(r, 0, 2) == 0 ? p->rope_pairs + ta_rng_int(r, 1, 5) : 0;
    p->rope_rows = rows;
    p->rope_row_stride = stride;
    if (stride == 0) stride = p->rope_pairs;
    p->rope_head_stride = ta_rng_int(r, 0, 2) == 0 ? rows * stride + ta_rng_int(r, 0, 7) : 0;
    tables = p->rope_head_stride ? p->heads_kv : 1;
    s->n_tab = (size_t)(tables - 1) * (size_t)p->rope_head_stride + (size_t)rows * (size_t)stride;
    s->cos = (float *)ta_test_alloc(s->n_tab * sizeof(float));
    s->sin = (float *)ta_test_alloc(s->n_tab * sizeof(float));
    memset(s->cos, 0xFF, s->n_tab * sizeof(float)); /* NaN: entries no one may read */
    memset(s->sin, 0xFF, s->n_tab * sizeof(float));
    for (g = 0; g < tables; ++g)
        for (t = 0; t < rows; ++t)
            for (i = 0; i < p->rope_pairs; ++i) {
                const size_t at = (size_t)g * (size_t)p->rope_head_stride +
                                  (size_t)t * (size_t)stride + (size_t)i;
                const double angle = (double)ta_rng_uniform(r, -40.0f, 40.0f);
                s->cos[at] = (float)cos(angle);
                s->sin[at] = (float)sin(angle);
            }
    for (b = 0; b < p->batch; ++b) {
        for (t = 0; t < T; ++t)
            s->pos_q[(size_t)b * (size_t)T + (size_t)t] = off[b] + s->prefix + t;
        for (t = 0; s->pos_k && t < K; ++t)
            s->pos_k[(size_t)b * (size_t)K + (size_t)t] = off[b] + t;
    }
    free(off);
}

static void push_call(seq *s, int kind, int32_t len, int32_t *at) {
    if (*at + len > s->T) len = s->T - *at;
    *at += len;
    s->kind[s->n_calls] = kind;
    s->ends[++s->n_calls] = *at;
}

/* The chunking: a first prefill chunk, maybe a second with q_hist, then
 * decode steps reading the ring (now and then a prefill chunk with q_hist). */
static void random_plan(ta_rng *r, seq *s) {
    const int32_t T = s->T, cq = s->p.conv_q;
    int32_t at = 0, n_dec = 0, c;
    s->ends = (int32_t *)malloc(((size_t)T + 2) * sizeof(int32_t));
    s->kind = (int *)malloc(((size_t)T + 1) * sizeof(int));
    s->ends[0] = 0;
    s->n_calls = 0;
    push_call(s, CALL_FIRST,
              ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, imin(T, cq)) : ta_rng_int(r, 1, imin(T, 40)),
              &at);
    if (at < T && ta_rng_int(r, 0, 1)) push_call(s, CALL_PREFILL, ta_rng_int(r, 1, imin(T - at, 40)), &at);
    while (at < T) {
        const int32_t n = imin(cq - 1, at);
        if (ta_rng_int(r, 0, 9) == 0)
            push_call(s, CALL_PREFILL, ta_rng_int(r, 1, imin(T - at, 24)), &at);
        else
            push_call(s, CALL_DECODE, ta_rng_int(r, 1, s->slots - n), &at);
    }
    for (c = 0; c < s->n_calls; ++c)
        n_dec += s->kind[c] == CALL_DECODE;
    s->ctl = -1;
    if (n_dec) { /* the n-th decode step */
        int32_t pick = ta_rng_int(r, 0, n_dec - 1);
        for (c = 0; c < s->n_calls; ++c)
            if (s->kind[c] == CALL_DECODE && pick-- == 0) s->ctl = c;
    }
}

static void fill_kernel(ta_rng *r, seq *s) {
    const ta_problem *p = &s->p;
    const size_t n_w = (size_t)p->heads_q * (size_t)(p->conv_q * p->conv_k);
    const float a = 1.0f / sqrtf((float)(p->conv_q * p->conv_k));
    size_t i;
    s->w = (float *)ta_test_alloc(n_w * sizeof(float));
    for (i = 0; i < n_w; ++i)
        s->w[i] = ta_rng_uniform(r, -a, a);
    for (i = 0; i < (size_t)p->heads_q; ++i) /* near the identity: softmax stays lively */
        s->w[i * (size_t)(p->conv_q * p->conv_k) +
             (size_t)((p->conv_q - 1) * p->conv_k + (p->conv_k - 1) / 2)] += 1.0f;
}

/* The paged copy of x ([B, H_kv, K, dim]): pool [n_pages, page, H_kv, dim],
 * key j of entry b at page table[b][j / page], slot j % page; the rest poison. */
static void *scatter_pages(const seq *s, const void *x, int32_t dim) {
    const size_t ps = (size_t)s->page, hk = (size_t)s->p.heads_kv, eb = s->eb;
    const size_t pool = (size_t)s->n_pages * ps * hk * (size_t)dim;
    void *dst = ta_test_alloc(pool * eb);
    int32_t b, h, j;
    ta_poison(dst, pool * eb);
    for (b = 0; b < s->p.batch; ++b)
        for (h = 0; h < s->p.heads_kv; ++h)
            for (j = 0; j < s->K; ++j) {
                const size_t pg = (size_t)s->table[(size_t)b * (size_t)s->max_blocks + (size_t)j / ps];
                const size_t row = (pg * ps + (size_t)j % ps) * hk + (size_t)h;
                const size_t from = (((size_t)b * hk + (size_t)h) * (size_t)s->K + (size_t)j) * (size_t)dim;
                memcpy((char *)dst + row * (size_t)dim * eb, (const char *)x + from * eb,
                       (size_t)dim * eb);
            }
    return dst;
}

/* With probability 1/4: a paged copy of the cache, every needed block of every
 * entry a distinct page of a pool with spare pages, in a random order. */
static void random_pages(ta_rng *r, seq *s) {
    const int32_t B = s->p.batch;
    int32_t need, i, b, at = 0, *perm;
    if (ta_rng_int(r, 0, 3) != 0) return;
    s->paged = 1;
    s->page = ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 4) : ta_rng_int(r, 5, 40);
    need = (s->K + s->page - 1) / s->page;
    s->max_blocks = need + ta_rng_int(r, 0, 2);
    s->n_pages = B * need + ta_rng_int(r, 0, 5);
    perm = (int32_t *)malloc((size_t)s->n_pages * sizeof(int32_t));
    s->table = (int32_t *)malloc((size_t)B * (size_t)s->max_blocks * sizeof(int32_t));
    for (i = 0; i < s->n_pages; ++i)
        perm[i] = i;
    for (i = s->n_pages - 1; i > 0; --i) { /* Fisher-Yates */
        const int32_t j = ta_rng_int(r, 0, i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (b = 0; b < B; ++b)
        for (i = 0; i < s->max_blocks; ++i)
            s->table[(size_t)b * (size_t)s->max_blocks + (size_t)i] = i < need ? perm[at++] : -1;
    free(perm);
    s->kpool = scatter_pages(s, s->k, s->p.head_dim);
    s->vpool = scatter_pages(s, s->v, s->p.head_dim_v);
}

static void random_seq(ta_rng *r, seq *s) {
    ta_problem *p = &s->p;
    int32_t b, P;
    float range;
    size_t n_q, n_k, n_v;
    memset(s, 0, sizeof *s);
    p->batch = ta_rng_int(r, 0, 9) == 0 ? 3 : ta_rng_int(r, 1, 2);
    p->heads_kv = ta_rng_int(r, 1, 2);
    p->heads_q = p->heads_kv * ta_rng_int(r, 1, 3);
    p->head_dim = pick_dim(r);
    p->head_dim_v = ta_rng_int(r, 0, 2) == 0 ? pick_dim(r) : p->head_dim;
    p->dtype = (ta_dtype)ta_rng_int(r, 0, 2);
    p->conv_q = ta_rng_int(r, 2, 7);
    p->conv_k = 2 * ta_rng_int(r, 0, 5) + 1;
    {
        const int32_t c = ta_rng_int(r, 0, 9); /* short, medium, several K tiles */
        s->T = c < 2 ? ta_rng_int(r, 2, 12) : c < 7 ? ta_rng_int(r, 12, 64) : ta_rng_int(r, 65, 180);
    }
    s->prefix = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 1, 40) : 0;
    s->extra = ta_rng_int(r, 0, 5) == 0 ? ta_rng_int(r, 1, 20) : 0;
    s->K = s->prefix + s->T + s->extra;
    p->seq_q = s->T;
    p->seq_k = s->K;
    p->q_offset = -s->extra;
    p->flags = TA_CAUSAL;
    if (ta_rng_int(r, 0, 9) < 3) {
        const int32_t c = ta_rng_int(r, 0, 4);
        p->flags |= TA_WINDOW;
        p->window_left = c == 0 ? -1 : c == 1 ? 0 : c < 4 ? ta_rng_int(r, 1, 8) : ta_rng_int(r, 1, s->K);
        p->window_right = ta_rng_int(r, 0, 2) == 0 ? -1 : ta_rng_int(r, 0, 4);
    }
    if (ta_rng_int(r, 0, 9) < 3) /* explicit scale, sometimes negative */
        p->scale = ta_rng_uniform(r, ta_rng_int(r, 0, 9) == 0 ? -2.0f : 0.25f, 2.0f) /
                   sqrtf((float)p->head_dim);
    P = (p->conv_k - 1) / 2;
    p->block_k = ta_rng_int(r, 0, 2) == 0 ? 0 : ta_rng_int(r, 8, 48);
    if (p->block_k && p->block_k < 4 * P + 1) p->block_k = 0;
    p->num_splits = ta_rng_int(r, 0, 3) == 0 ? ta_rng_int(r, 2, 3) : 0;
    if (ta_rng_int(r, 0, 99) < 35) {
        s->seqlens = (int32_t *)malloc((size_t)p->batch * sizeof(int32_t));
        for (b = 0; b < p->batch; ++b) {
            const int32_t c = ta_rng_int(r, 0, 99);
            s->seqlens[b] = c < 10 ? 0 : c < 35 ? s->K : ta_rng_int(r, 1, s->K);
        }
    }
    s->slots = p->conv_q + ta_rng_int(r, 0, 8);
    s->cap = s->K + (ta_rng_int(r, 0, 2) == 0 ? ta_rng_int(r, 1, 5) : 0);
    random_ring_layout(r, s);
    s->eb = ta_dtype_size(p->dtype);
    n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)s->T * (size_t)p->head_dim;
    n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)s->K * (size_t)p->head_dim;
    n_v = (size_t)p->batch * (size_t)p->heads_kv * (size_t)s->K * (size_t)p->head_dim_v;
    s->q = ta_test_alloc(n_q * s->eb);
    s->k = ta_test_alloc(n_k * s->eb);
    s->v = ta_test_alloc(n_v * s->eb);
    range = ta_rng_uniform(r, 0.5f, 2.5f);
    ta_fill_uniform(r, s->q, p->dtype, n_q, -range, range);
    ta_fill_uniform(r, s->k, p->dtype, n_k, -range, range);
    ta_fill_uniform(r, s->v, p->dtype, n_v, -1.0f, 1.0f);
    fill_kernel(r, s);
    random_rope(r, s);
    random_pages(r, s);
    random_plan(r, s);
}

static void free_seq(seq *s) {
    ta_test_free(s->q), ta_test_free(s->k), ta_test_free(s->v), ta_test_free(s->w);
    ta_test_free(s->cos), ta_test_free(s->sin);
    free(s->seqlens), free(s->pos_q), free(s->pos_k), free(s->ends), free(s->kind);
    ta_test_free(s->kpool), ta_test_free(s->vpool), free(s->table);
    free(s->writer);
    ta_test_free(s->ring_ref);
    memset(s, 0, sizeof *s);
}

static void describe(const seq *s, char *buf, size_t n) {
    const ta_problem *p = &s->p;
    size_t used;
    int32_t c;
    snprintf(buf, n,
             "B=%d H=%d Hkv=%d T=%d prefix=%d extra=%d (q_offset %d) D=%d Dv=%d %s conv=%dx%d "
             "bk=%d scale=%g splits=%d slots=%d cap=%d ring_layout=%d",
             p->batch, p->heads_q, p->heads_kv, s->T, s->prefix, s->extra, p->q_offset,
             p->head_dim, p->head_dim_v,
             dtype_name[p->dtype], p->conv_q, p->conv_k, p->block_k, (double)p->scale,
             p->num_splits, s->slots, s->cap, s->ring_layout);
    used = strlen(buf);
    if (p->flags & TA_WINDOW)
        used += (size_t)snprintf(buf + used, n - used, " win(%d,%d)", p->window_left,
                                 p->window_right);
    if (s->paged)
        used += (size_t)snprintf(buf + used, n - used, " pages(size %d, %d pages, %d blocks)",
                                 s->page, s->n_pages, s->max_blocks);
    if (s->seqlens && used < n) {
        used += (size_t)snprintf(buf + used, n - used, " seqlens=");
        for (c = 0; c < p->batch && used < n; ++c)
            used += (size_t)snprintf(buf + used, n - used, "%s%d", c ? "," : "", s->seqlens[c]);
    }
    if (p->rope && used < n)
        used += (size_t)snprintf(buf + used, n - used,
                                 " rope=%s pairs=%d rows=%d row_stride=%d head_stride=%d pos_k=%s",
                                 p->rope == TA_ROPE_HALF ? "half" : "interleaved", p->rope_pairs,
                                 p->rope_rows, p->rope_row_stride, p->rope_head_stride,
                                 s->pos_k ? "given" : "NULL");
    if (used < n) used += (size_t)snprintf(buf + used, n - used, " calls(end:kind)=");
    for (c = 0; c < s->n_calls && used < n; ++c)
        used += (size_t)snprintf(buf + used, n - used, "%s%d:%c", c ? "," : "", s->ends[c + 1],
                                 "FPD"[s->kind[c]]);
}

/* ---------------------------------------------------------------------- */
/* The ring model                                                          */
/* ---------------------------------------------------------------------- */

/* writer[b][slot][j] after the whole plan, as the spec says: each call writes
 * the entries its last min(S_q, c_q - 1) rows see, nothing else (row t of the
 * sequence at position prefix + t, slot position % slots; the call's keys
 * S_k = prefix + rows so far + extra). Also checks the plan itself: every
 * decode step's history entries are written by then. */
static void build_model(seq *s, const char *desc) {
    const ta_problem *p = &s->p;
    const size_t n = (size_t)p->batch * (size_t)s->slots * (size_t)s->cap;
    int32_t c, x, bb, j;
    size_t i;
    s->writer = (int32_t *)malloc(n * sizeof(int32_t));
    for (i = 0; i < n; ++i)
        s->writer[i] = -1;
    for (c = 0; c < s->n_calls; ++c) {
        const int32_t a = s->ends[c], b = s->ends[c + 1], sk = s->prefix + b + s->extra;
        const int32_t hist = imin(p->conv_q - 1, a), w0 = b - imin(b - a, p->conv_q - 1);
        if (s->kind[c] == CALL_DECODE) {
            long missing = 0;
            TA_CHECK(hist + b - a <= s->slots, "test plan: call %d reads %d + %d rows, %d slots",
                     c, hist, b - a, s->slots);
            for (x = a - hist; x < a; ++x) {
                const int32_t pos = s->prefix + x;
                for (bb = 0; bb < p->batch; ++bb)
                    for (j = 0; j < sk; ++j)
                        if (visible(s, bb, pos, j, sk))
                            missing += s->writer[((size_t)bb * (size_t)s->slots +
                                                  (size_t)(pos % s->slots)) *
                                                     (size_t)s->cap +
                                                 (size_t)j] != pos;
            }
            TA_CHECK(missing == 0, "test plan: call %d's history has %ld entries not written: %s",
                     c, missing, desc);
        }
        for (x = w0; x < b; ++x) {
            const int32_t pos = s->prefix + x;
            for (bb = 0; bb < p->batch; ++bb)
                for (j = 0; j < sk; ++j)
                    if (visible(s, bb, pos, j, sk))
                        s->writer[((size_t)bb * (size_t)s->slots + (size_t)(pos % s->slots)) *
                                      (size_t)s->cap +
                                  (size_t)j] = pos;
        }
    }
}

/* Row t of q (or key t of k) in float64, turned by the rotary stage as its
 * table row says; mag[d] = the magnitude the turned value is bounded by. */
static void load_row(const seq *s, int is_q, int32_t bb, int32_t h, int32_t t, double *x,
                     double *mag) {
    const ta_problem *p = &s->p;
    const int32_t D = p->head_dim, group = p->heads_q / p->heads_kv;
    const int32_t g = is_q ? h / group : h, heads = is_q ? p->heads_q : p->heads_kv;
    const int32_t len = is_q ? s->T : s->K; /* rows of q, keys of k */
    const size_t at =
        (((size_t)bb * (size_t)heads + (size_t)h) * (size_t)len + (size_t)t) * (size_t)D;
    int32_t d, i;
    for (d = 0; d < D; ++d) {
        x[d] = ta_get(is_q ? s->q : s->k, p->dtype, at + (size_t)d);
        mag[d] = fabs(x[d]);
    }
    if (p->rope) {
        const int32_t n = p->rope_pairs;
        const int32_t stride = p->rope_row_stride ? p->rope_row_stride : n;
        const int32_t row = is_q ? s->pos_q[(size_t)bb * (size_t)len + (size_t)t]
                                 : s->pos_k ? s->pos_k[(size_t)bb * (size_t)len + (size_t)t] : t;
        const size_t base =
            (size_t)g * (size_t)p->rope_head_stride + (size_t)row * (size_t)stride;
        for (i = 0; i < n; ++i) {
            const int32_t ia = p->rope == TA_ROPE_HALF ? i : 2 * i;
            const int32_t ib = p->rope == TA_ROPE_HALF ? i + n : 2 * i + 1;
            const double c = (double)s->cos[base + (size_t)i], sn = (double)s->sin[base + (size_t)i];
            const double xa = x[ia], xb = x[ib], m = fabs(xa) + fabs(xb);
            x[ia] = xa * c - xb * sn;
            x[ib] = xb * c + xa * sn;
            mag[ia] = mag[ib] = m;
        }
    }
}

/* The ring of one variant against the model: poison exactly where no row
 * wrote; REF (values != 0) also against the float64 raw score. */
static void check_ring(const seq *s, const float *ring, const char *name, int values,
                       const char *desc) {
    const ta_problem *p = &s->p;
    const ta_strides st = ring_strides(s);
    const int32_t group = p->heads_q / p->heads_kv, D = p->head_dim;
    const double scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)D);
    double qx[TA_HEAD_DIM_MAX], qm[TA_HEAD_DIM_MAX], kx[TA_HEAD_DIM_MAX], km[TA_HEAD_DIM_MAX];
    long long written = 0, kept = 0, never = 0, bad_written = 0, bad_unwritten = 0, bad_value = 0;
    long long slots_written = 0, slots_all_poison = 0, live_total = 0, live_any = 0;
    size_t e;
    int32_t bb, h, sl, j, d, wr_pos = -1, first_bad[4] = {-1, -1, -1, -1};
    double worst = 0.0;
    for (bb = 0; bb < p->batch; ++bb)
        for (h = 0; h < p->heads_q; ++h)
            for (sl = 0; sl < s->slots; ++sl) {
                const int32_t *wr =
                    s->writer + ((size_t)bb * (size_t)s->slots + (size_t)sl) * (size_t)s->cap;
                const float *row = ring + bb * st.batch + h * st.head + sl * st.seq;
                int32_t any = 0, live = 0, q_loaded = -1;
                long long poison_here = 0;
                for (j = 0; j < s->cap; ++j) {
                    const int poison = is_poison(row + j);
                    if (wr[j] >= 0) any = 1;
                    if (!poison) live = 1, ++live_total;
                    if (wr[j] < 0 && !poison) {
                        if (!bad_written++ && !bad_unwritten && !bad_value)
                            first_bad[0] = bb, first_bad[1] = h, first_bad[2] = sl,
                            first_bad[3] = j, wr_pos = -1;
                    } else if (wr[j] >= 0 && poison) {
                        if (!bad_unwritten++ && !bad_written && !bad_value)
                            first_bad[0] = bb, first_bad[1] = h, first_bad[2] = sl,
                            first_bad[3] = j, wr_pos = wr[j];
                    }
                    if (wr[j] < 0) {
                        poison_here += poison;
                        continue;
                    }
                    ++written;
                    if (!values || poison) continue;
                    if (q_loaded != wr[j]) { /* the writer's query row */
                        load_row(s, 1, bb, h, wr[j] - s->prefix, qx, qm);
                        q_loaded = wr[j];
                    }
                    load_row(s, 0, bb, h / group, j, kx, km);
                    {
                        double acc = 0.0, m = 0.0, want, err, tol;
                        for (d = 0; d < D; ++d) {
                            acc += qx[d] * kx[d];
                            m += qm[d] * km[d];
                        }
                        want = scale * acc;
                        tol = (double)(D + 8) * 2.0 * 1.1920928955078125e-07 * fabs(scale) * m *
                                  (p->rope ? 4.0 : 1.0) +
                              1e-30;
                        err = fabs((double)row[j] - want);
                        if (!(err <= tol)) {
                            if (!bad_value++ && !bad_written && !bad_unwritten)
                                first_bad[0] = bb, first_bad[1] = h, first_bad[2] = sl,
                                first_bad[3] = j, wr_pos = wr[j];
                            if (!(err <= worst)) worst = err;
                        }
                    }
                }
                slots_written += any;
                slots_all_poison += any && !live;
                if (any) /* a written slot: the keys its rows did not see */
                    kept += poison_here;
                else
                    never += poison_here;
            }
    TA_CHECK(bad_written == 0 && bad_unwritten == 0 && bad_value == 0,
             "%s ring: %lld entries written that no row of the model sees, %lld entries a row "
             "saw still poison, %lld values off the raw score (worst error %.3g); first at "
             "b=%d h=%d slot=%d key=%d (writer position %d): %s",
             name, bad_written, bad_unwritten, bad_value, worst, first_bad[0], first_bad[1],
             first_bad[2], first_bad[3], wr_pos, desc);
    for (e = 0; e < ring_floats(s); ++e) /* the gaps of the layout: never touched */
        live_any += !is_poison(ring + e);
    TA_CHECK(live_any == live_total, "%s ring: %lld entries in the layout's gaps written: %s",
             name, live_any - live_total, desc);
    TA_CHECK(slots_all_poison == 0, "%s ring: %lld of %lld written slots still all poison: %s",
             name, slots_all_poison, slots_written, desc);
    if (values) {
        n_written += written;
        n_masked_kept += kept;
        n_never += never;
    }
}

/* ---------------------------------------------------------------------- */
/* One call                                                                */
/* ---------------------------------------------------------------------- */

/* A copy of rows [r0, r0 + rows) of every (batch, head) of x ([n_bh, S, dim]). */
static void *copy_rows(const void *x, size_t n_bh, int32_t S, int32_t dim, int32_t r0,
                       int32_t rows, size_t eb) {
    const size_t row_bytes = (size_t)rows * (size_t)dim * eb;
    char *dst = (char *)ta_test_alloc(n_bh * row_bytes);
    size_t i;
    for (i = 0; i < n_bh; ++i)
        memcpy(dst + i * row_bytes,
               (const char *)x + (i * (size_t)S + (size_t)r0) * (size_t)dim * eb, row_bytes);
    return dst;
}

/* Rows [a, b) of the sequence as one call on variant vr: S_k = prefix + b +
 * extra keys (q_offset = -extra), q_history = min(c_q - 1, a). hist_given: q_hist passed (in place or a
 * copy), else NULL (read from the ring). ring NULL: no ring. Outputs: o
 * [B, H, b - a, D_v] and lse (or NULL), contiguous. */
static ta_status run_call(ta_rng *r, const seq *s, int32_t a, int32_t b, int hist_given,
                          float *ring, const variant *vr, void *o, float *lse) {
    const ta_problem *full = &s->p;
    const int32_t B = full->batch, H = full->heads_q, Hkv = full->heads_kv, T = s->T, K = s->K;
    const int32_t D = full->head_dim, Dv = full->head_dim_v, sk = s->prefix + b + s->extra;
    const int32_t n = imin(full->conv_q - 1, a);
    const size_t eb = s->eb;
    ta_problem p = *full;
    ta_fwd_args fa;
    void *qc = NULL, *kc = NULL, *vc = NULL, *qh = NULL, *ws;
    int32_t *seql = NULL, *pq = NULL, *pk = NULL, bb, t;
    size_t bytes = 0;
    ta_status st;
    p.seq_q = b - a;
    p.seq_k = sk;
    p.q_history = n;
    p.block_q = random_block_q(r, p.conv_q);
    p.num_threads = vr->tasks ? ta_rng_int(r, 1, 3) : vr->threads;
    memset(&fa, 0, sizeof fa);
    if (ta_rng_int(r, 0, 1)) { /* q in place: the full buffer's rows [a, b) */
        fa.q = (const char *)s->q + (size_t)a * (size_t)D * eb;
        fa.q_strides = ta_strides_contiguous(H, T, D);
    } else {
        fa.q = qc = copy_rows(s->q, (size_t)B * (size_t)H, T, D, a, b - a, eb);
    }
    if (s->paged && ta_rng_int(r, 0, 3) != 0) { /* the paged cache: the table's first blocks */
        p.kv_page_size = s->page, p.kv_num_pages = s->n_pages, p.kv_max_blocks = s->max_blocks;
        fa.k = s->kpool, fa.v = s->vpool, fa.block_table = s->table;
    } else if (ta_rng_int(r, 0, 1)) { /* the cache: a prefix of the full-capacity buffers */
        fa.k = s->k, fa.v = s->v;
        fa.k_strides = ta_strides_contiguous(Hkv, K, D);
        fa.v_strides = ta_strides_contiguous(Hkv, K, Dv);
    } else {
        fa.k = kc = copy_rows(s->k, (size_t)B * (size_t)Hkv, K, D, 0, sk, eb);
        fa.v = vc = copy_rows(s->v, (size_t)B * (size_t)Hkv, K, Dv, 0, sk, eb);
    }
    fa.conv_w = s->w;
    fa.o = o;
    fa.lse = lse;
    if (s->seqlens) { /* the cache holds sk keys: the full lengths cut there */
        seql = (int32_t *)malloc((size_t)B * sizeof(int32_t));
        for (bb = 0; bb < B; ++bb)
            seql[bb] = imin(s->seqlens[bb], sk);
        fa.seqlens_k = seql;
    }
    if (n > 0 && hist_given) {
        if (ta_rng_int(r, 0, 1)) { /* the rows just above in the full q */
            fa.q_hist = (const char *)s->q + (size_t)(a - n) * (size_t)D * eb;
            fa.q_hist_strides = ta_strides_contiguous(H, T, D);
        } else {
            fa.q_hist = qh = copy_rows(s->q, (size_t)B * (size_t)H, T, D, a - n, n, eb);
        }
    }
    if (ring) {
        fa.score_ring = ring;
        fa.score_ring_slots = s->slots;
        fa.score_ring_strides = ring_strides(s);
    }
    if (p.rope) { /* the call's rows' positions, its keys' */
        fa.rope.cos = s->cos, fa.rope.sin = s->sin;
        pq = (int32_t *)malloc((size_t)B * (size_t)(b - a) * sizeof(int32_t));
        for (bb = 0; bb < B; ++bb)
            for (t = a; t < b; ++t)
                pq[(size_t)bb * (size_t)(b - a) + (size_t)(t - a)] =
                    s->pos_q[(size_t)bb * (size_t)T + (size_t)t];
        fa.rope.pos_q = pq;
        if (s->pos_k) {
            pk = (int32_t *)malloc((size_t)B * (size_t)sk * sizeof(int32_t));
            for (bb = 0; bb < B; ++bb)
                memcpy(pk + (size_t)bb * (size_t)sk, s->pos_k + (size_t)bb * (size_t)K,
                       (size_t)sk * sizeof(int32_t));
            fa.rope.pos_k = pk;
        }
    }
    if (vr->tasks) {
        st = ta_test_fwd_tasks(&p, &fa);
    } else if ((st = ta_fwd_workspace_size(&p, vr->be, &bytes)) == TA_OK) {
        ws = ta_test_alloc(bytes);
        ta_poison(ws, bytes);
        st = ta_fwd(&p, vr->be, &fa, ws, bytes, NULL);
        ta_test_free(ws);
    }
    ta_test_free(qc), ta_test_free(kc), ta_test_free(vc), ta_test_free(qh);
    free(seql), free(pq), free(pk);
    return st;
}

/* First element (in eb-byte units) where a and b differ, or n. */
static size_t first_diff(const void *a, const void *b, size_t eb, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (memcmp((const char *)a + i * eb, (const char *)b + i * eb, eb) != 0) return i;
    return n;
}

/* Call c's o (and lse, when given) against the expected rows. */
static int compare_call(const seq *s, const char *name, int32_t c, const void *o, const float *lse,
                        const void *eo, const float *el, const char *desc) {
    const ta_problem *p = &s->p;
    const int32_t a = s->ends[c], b = s->ends[c + 1], sq = b - a, Dv = p->head_dim_v;
    const size_t n_l = (size_t)p->batch * (size_t)p->heads_q * (size_t)sq;
    const size_t n_o = n_l * (size_t)Dv;
    const size_t io = first_diff(o, eo, s->eb, n_o);
    const size_t il = lse ? first_diff(lse, el, sizeof(float), n_l) : n_l;
    TA_CHECK(io == n_o, "%s call %d (%s, rows [%d, %d), q_history %d): o differs at (b*H+h %zu, "
             "row %zu, d %zu): %.9g, want %.9g: %s",
             name, c, kind_name[s->kind[c]], a, b, imin(p->conv_q - 1, a),
             io / ((size_t)sq * (size_t)Dv), io / (size_t)Dv % (size_t)sq, io % (size_t)Dv,
             io < n_o ? ta_get(o, p->dtype, io) : 0.0, io < n_o ? ta_get(eo, p->dtype, io) : 0.0,
             desc);
    TA_CHECK(il == n_l, "%s call %d (%s, rows [%d, %d)): lse differs at (b*H+h %zu, row %zu): "
             "%.9g, want %.9g: %s",
             name, c, kind_name[s->kind[c]], a, b, il / (size_t)sq, il % (size_t)sq,
             il < n_l ? (double)lse[il] : 0.0, il < n_l ? (double)el[il] : 0.0, desc);
    return io == n_o && il == n_l;
}

/* Where float `at` of the ring lies: (b, h, slot, key) or a gap. */
static void ring_where(const seq *s, size_t at, char *buf, size_t n) {
    const ta_strides st = ring_strides(s);
    int32_t bb, h, sl;
    snprintf(buf, n, "a gap of the layout");
    for (bb = 0; bb < s->p.batch; ++bb)
        for (h = 0; h < s->p.heads_q; ++h)
            for (sl = 0; sl < s->slots; ++sl) {
                const size_t row = (size_t)(bb * st.batch + h * st.head + sl * st.seq);
                if (at >= row && at < row + (size_t)s->cap)
                    snprintf(buf, n, "b=%d h=%d slot=%d key=%zu", bb, h, sl, at - row);
            }
}

/* The control: call c on REF with the history slots of a copy of the ring
 * poisoned in full; its output must differ from the expected one (counted). */
static void run_control(ta_rng *r, const seq *s, int32_t c, const float *ring, const void *eo) {
    const ta_problem *p = &s->p;
    const int32_t a = s->ends[c], b = s->ends[c + 1], n = imin(p->conv_q - 1, a);
    const ta_strides st = ring_strides(s);
    const size_t n_o = (size_t)p->batch * (size_t)p->heads_q * (size_t)(b - a) *
                       (size_t)p->head_dim_v;
    float *ctl = (float *)ta_test_alloc(ring_floats(s) * sizeof(float));
    void *o = ta_test_alloc(n_o * s->eb);
    int32_t i, bb, h;
    ta_status stt;
    memcpy(ctl, ring, ring_floats(s) * sizeof(float));
    for (i = 1; i <= n; ++i)
        for (bb = 0; bb < p->batch; ++bb)
            for (h = 0; h < p->heads_q; ++h)
                ring_poison(ctl + bb * st.batch + h * st.head +
                                ((s->prefix + a - i) % s->slots) * st.seq,
                            (size_t)s->cap);
    ta_poison(o, n_o * s->eb);
    stt = run_call(r, s, a, b, 0, ctl, &g_variants[0], o, NULL);
    TA_CHECK(stt == TA_OK, "control call %d: %s", c, ta_status_string(stt));
    ++n_control;
    n_control_differ += stt == TA_OK && memcmp(o, eo, n_o * s->eb) != 0;
    ta_test_free(ctl);
    ta_test_free(o);
}

static void check_sequence(ta_rng *r) {
    seq s;
    char desc[1024];
    void **eo;
    float **el;
    int32_t c, vi;
    size_t i;
    int ok = 1;
    random_seq(r, &s);
    describe(&s, desc, sizeof desc);
    build_model(&s, desc);
    ++n_seq;
    n_split_seq += s.p.num_splits > 1;
    n_rope_seq += s.p.rope != 0;
    n_win_seq += (s.p.flags & TA_WINDOW) != 0;
    n_seqlens_seq += s.seqlens != NULL;
    n_prefix_seq += s.prefix > 0;
    n_offset_seq += s.extra > 0;
    n_paged_seq += s.paged;
    /* the expected rows of every call */
    eo = (void **)calloc((size_t)s.n_calls, sizeof(void *));
    el = (float **)calloc((size_t)s.n_calls, sizeof(float *));
    for (c = 0; c < s.n_calls; ++c) {
        const size_t rows = (size_t)(s.ends[c + 1] - s.ends[c]);
        const size_t n_l = (size_t)s.p.batch * (size_t)s.p.heads_q * rows;
        eo[c] = ta_test_alloc(n_l * (size_t)s.p.head_dim_v * s.eb);
        el[c] = (float *)ta_test_alloc(n_l * sizeof(float));
        ta_poison(eo[c], n_l * (size_t)s.p.head_dim_v * s.eb);
        ta_poison(el[c], n_l * sizeof(float));
    }
    if (s.p.num_splits <= 1) { /* one REF forward over the whole sequence, cut into the calls */
        const size_t n_bh = (size_t)s.p.batch * (size_t)s.p.heads_q, Dv = (size_t)s.p.head_dim_v;
        void *o_full = ta_test_alloc(n_bh * (size_t)s.T * Dv * s.eb);
        float *l_full = (float *)ta_test_alloc(n_bh * (size_t)s.T * sizeof(float));
        const ta_status st =
            run_call(r, &s, 0, s.T, 1, NULL, &g_variants[0], o_full, l_full);
        TA_CHECK(st == TA_OK, "full forward: %s: %s", ta_status_string(st), desc);
        ok = st == TA_OK;
        for (c = 0; ok && c < s.n_calls; ++c) {
            const size_t a = (size_t)s.ends[c], rows = (size_t)s.ends[c + 1] - a;
            for (i = 0; i < n_bh; ++i) {
                memcpy((char *)eo[c] + i * rows * Dv * s.eb,
                       (const char *)o_full + (i * (size_t)s.T + a) * Dv * s.eb, rows * Dv * s.eb);
                memcpy(el[c] + i * rows, l_full + i * (size_t)s.T + a, rows * sizeof(float));
            }
        }
        ta_test_free(o_full), ta_test_free(l_full);
    } else { /* split-K: the same call recomputing its history, no ring */
        for (c = 0; ok && c < s.n_calls; ++c) {
            const ta_status st = run_call(r, &s, s.ends[c], s.ends[c + 1], 1, NULL,
                                          &g_variants[0], eo[c], el[c]);
            TA_CHECK(st == TA_OK, "call %d recomputed without a ring: %s: %s", c,
                     ta_status_string(st), desc);
            ok = st == TA_OK;
        }
    }
    for (vi = 0; ok && vi < N_VARIANTS; ++vi) {
        const variant *vr = &g_variants[vi];
        float *ring = (float *)ta_test_alloc(ring_floats(&s) * sizeof(float));
        ring_poison(ring, ring_floats(&s));
        for (c = 0; ok && c < s.n_calls; ++c) {
            const int32_t a = s.ends[c], b = s.ends[c + 1];
            const size_t n_l = (size_t)s.p.batch * (size_t)s.p.heads_q * (size_t)(b - a);
            const size_t o_bytes = n_l * (size_t)s.p.head_dim_v * s.eb;
            void *o = ta_test_alloc(o_bytes);
            float *lse = ta_rng_int(r, 0, 9) == 0 ? NULL : (float *)ta_test_alloc(n_l * 4);
            ta_status st;
            if (vi == 0 && c == s.ctl) run_control(r, &s, c, ring, eo[c]);
            ta_poison(o, o_bytes);
            if (lse) ta_poison(lse, n_l * 4);
            st = run_call(r, &s, a, b, s.kind[c] != CALL_DECODE, ring, vr, o, lse);
            TA_CHECK(st == TA_OK, "%s call %d (%s, rows [%d, %d)): %s: %s", vr->name, c,
                     kind_name[s.kind[c]], a, b, ta_status_string(st), desc);
            ok = st == TA_OK && compare_call(&s, vr->name, c, o, lse, eo[c], el[c], desc);
            ++n_calls;
            n_read_calls += s.kind[c] == CALL_DECODE;
            n_hist_calls += s.kind[c] == CALL_PREFILL && a > 0;
            ta_test_free(o), ta_test_free(lse);
        }
        if (ok) check_ring(&s, ring, vr->name, vi == 0, desc);
        if (vi == 0) {
            s.ring_ref = ring;
        } else {
            if (ok) {
                const size_t at = first_diff(ring, s.ring_ref, sizeof(float), ring_floats(&s));
                char where[96];
                ring_where(&s, at, where, sizeof where);
                TA_CHECK(at == ring_floats(&s), "%s ring != REF's at float %zu (%s): %.9g, REF %.9g: %s",
                         vr->name, at, where, at < ring_floats(&s) ? (double)ring[at] : 0.0,
                         at < ring_floats(&s) ? (double)s.ring_ref[at] : 0.0, desc);
            }
            ta_test_free(ring);
        }
    }
    for (c = 0; c < s.n_calls; ++c)
        ta_test_free(eo[c]), ta_test_free(el[c]);
    free(eo), free(el);
    free_seq(&s);
}

/* ---------------------------------------------------------------------- */
/* 3. Refusals                                                             */
/* ---------------------------------------------------------------------- */

enum { RB = 1, RH = 2, RHKV = 1, RD = 8, RSK_MAX = 30, RCAP = 32, RSLOTS_MAX = 8 };
enum { R_O_FLOATS = 1024, R_L_FLOATS = 256 };
static float r_q[RB * RH * 4 * RD], r_qh[RB * RH * 4 * RD + RB * RH * RSLOTS_MAX * RCAP];
static float r_k[RB * RHKV * RSK_MAX * RD + RB * RH * RSLOTS_MAX * RCAP], r_v[RB * RHKV * RSK_MAX * RD];
static float r_w[RH * 4 * 3], r_o[R_O_FLOATS], r_lse[R_L_FLOATS + RB * RH * RSLOTS_MAX * RCAP];
static float r_ring[RB * RH * RSLOTS_MAX * RCAP + 64];

/* A workspace for p on REF and CPU (the larger size; 64 bytes when the
 * problem is refused by the size query). */
static void *ws_for(const ta_problem *p, size_t *bytes, size_t extra) {
    size_t b0 = 0, b1 = 0;
    void *ws;
    if (ta_fwd_workspace_size(p, TA_BACKEND_REF, &b0) != TA_OK) b0 = 0;
    if (ta_fwd_workspace_size(p, TA_BACKEND_CPU, &b1) != TA_OK) b1 = 0;
    *bytes = (b0 > b1 ? b0 : b1) + extra;
    ws = ta_test_alloc(*bytes ? *bytes : 64);
    return ws;
}

/* A forward call that must end with `want` on REF and CPU: ta_fwd's status,
 * ta_explain_fwd's (the same, its line naming `field`), the caller-run
 * prepare's (CPU), and on a refusal o, lse (canaries) and the bytes
 * [keep, keep + keep_bytes) (the ring, or what it overlaps) untouched. */
static void expect_t(const ta_problem *p, const ta_fwd_args *a, void *ws, size_t ws_bytes,
                     ta_status want, const char *field, const void *keep, size_t keep_bytes,
                     int tasks, const char *what) {
    const size_t o_bytes = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q *
                           (size_t)p->head_dim_v * sizeof(float);
    const size_t l_bytes = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * sizeof(float);
    unsigned char *snap = (unsigned char *)malloc(keep_bytes ? keep_bytes : 1);
    char why[320];
    int bi;
    for (bi = 0; bi < 2; ++bi) {
        const ta_backend be = bi ? TA_BACKEND_CPU : TA_BACKEND_REF;
        const char *bn = bi ? "CPU" : "REF";
        ta_status st, ex;
        ta_canary_fill(a->o, o_bytes);
        if (a->lse) ta_canary_fill(a->lse, l_bytes);
        if (keep_bytes) memcpy(snap, keep, keep_bytes);
        why[0] = '\0';
        st = ta_fwd(p, be, a, ws, ws_bytes, NULL);
        ex = ta_explain_fwd(p, be, a, ws, ws_bytes, NULL, why, sizeof why);
        TA_CHECK(st == want, "%s on %s: ta_fwd gave %s, want %s (explain: %s)", what, bn,
                 ta_status_string(st), ta_status_string(want), why);
        TA_CHECK(ex == st, "%s on %s: explain gave %s, ta_fwd %s", what, bn,
                 ta_status_string(ex), ta_status_string(st));
        TA_CHECK(strstr(why, field) != NULL, "%s on %s: explanation \"%s\" does not name %s",
                 what, bn, why, field);
        if (want != TA_OK) {
            TA_CHECK(ta_canary_intact(a->o, o_bytes), "%s on %s: o written on error", what, bn);
            TA_CHECK(!a->lse || ta_canary_intact(a->lse, l_bytes), "%s on %s: lse written on error",
                     what, bn);
            TA_CHECK(!keep_bytes || memcmp(snap, keep, keep_bytes) == 0,
                     "%s on %s: the ring (or what it overlaps) written on error", what, bn);
        }
        if (be == TA_BACKEND_CPU && tasks) { /* the caller-run prepare: the same checks */
            ta_task_plan tp;
            if (ta_fwd_task_plan(p, TA_BACKEND_CPU, &tp) == TA_OK) {
                void *shared = ta_test_alloc(tp.shared_bytes);
                ta_status sp, ep;
                if (keep_bytes) memcpy(snap, keep, keep_bytes);
                ta_canary_fill(a->o, o_bytes);
                sp = ta_fwd_tasks_prepare(p, TA_BACKEND_CPU, a, shared, tp.shared_bytes);
                ep = ta_explain_fwd_tasks_prepare(p, TA_BACKEND_CPU, a, shared, tp.shared_bytes,
                                                  why, sizeof why);
                TA_CHECK(sp == want && ep == sp && strstr(why, field) != NULL,
                         "%s: tasks prepare gave %s (explain %s: %s), want %s naming %s", what,
                         ta_status_string(sp), ta_status_string(ep), why,
                         ta_status_string(want), field);
                TA_CHECK(ta_canary_intact(a->o, o_bytes), "%s: tasks prepare wrote o", what);
                TA_CHECK(!keep_bytes || memcmp(snap, keep, keep_bytes) == 0,
                         "%s: tasks prepare wrote the ring", what);
                ta_test_free(shared);
            }
        }
    }
    ++n_refusals;
    free(snap);
}

static void expect(const ta_problem *p, const ta_fwd_args *a, void *ws, size_t ws_bytes,
                   ta_status want, const char *field, const void *keep, size_t keep_bytes,
                   const char *what) {
    expect_t(p, a, ws, ws_bytes, want, field, keep, keep_bytes, 1, what);
}

static ta_strides rs_make(int32_t heads, int32_t slots, int32_t ld) {
    ta_strides st;
    st.seq = ld;
    st.head = (int64_t)slots * ld;
    st.batch = (int64_t)heads * st.head;
    return st;
}

static void check_refusals(void) {
    const size_t ring_bytes = (size_t)RB * RH * 5 * RCAP * sizeof(float);
    ta_problem p = {0}, bad;
    ta_fwd_args fa, a;
    size_t bytes, i;
    void *ws;
    char why[320];
    ta_status st;
    for (i = 0; i < sizeof r_q / sizeof r_q[0]; ++i)
        r_q[i] = (float)(i % 7) * 0.1f;
    for (i = 0; i < sizeof r_qh / sizeof r_qh[0]; ++i)
        r_qh[i] = 0.3f;
    for (i = 0; i < sizeof r_k / sizeof r_k[0]; ++i)
        r_k[i] = (float)(i % 5) * 0.1f;
    for (i = 0; i < sizeof r_v / sizeof r_v[0]; ++i)
        r_v[i] = (float)(i % 3) * 0.2f;
    for (i = 0; i < sizeof r_w / sizeof r_w[0]; ++i)
        r_w[i] = 0.05f;
    ring_poison(r_ring, sizeof r_ring / sizeof r_ring[0]);
    /* a decode step: 2 new rows, 3 history rows read from a ring of 5 slots */
    p.batch = RB, p.heads_q = RH, p.heads_kv = RHKV, p.seq_q = 2, p.seq_k = 10;
    p.head_dim = p.head_dim_v = RD, p.flags = TA_CAUSAL, p.conv_q = 4, p.conv_k = 3;
    p.q_history = 3;
    memset(&fa, 0, sizeof fa);
    fa.q = r_q, fa.k = r_k, fa.v = r_v, fa.o = r_o, fa.lse = r_lse, fa.conv_w = r_w;
    fa.score_ring = r_ring, fa.score_ring_slots = 5;
    fa.score_ring_strides = rs_make(RH, 5, RCAP);
    ws = ws_for(&p, &bytes, 0);
    expect(&p, &fa, ws, bytes, TA_OK, "ok", NULL, 0, "valid decode step reading the ring");
    a = fa, a.score_ring_strides.batch = a.score_ring_strides.head = a.score_ring_strides.seq = 0;
    expect(&p, &a, ws, bytes, TA_OK, "ok", NULL, 0, "zero ring strides (contiguous, ld = S_k)");
    a = fa, a.score_ring_strides = rs_make(RH, 5, p.seq_k);
    expect(&p, &a, ws, bytes, TA_OK, "ok", NULL, 0, "ring slot stride = S_k");
    a = fa, a.q_hist = r_qh;
    expect(&p, &a, ws, bytes, TA_OK, "ok", NULL, 0, "ring with q_hist given (write only)");
    bad = p, bad.q_history = 0;
    expect(&bad, &fa, ws, bytes, TA_OK, "ok", NULL, 0, "ring without history rows");
    /* a ring on SDPA */
    bad = p, bad.conv_q = bad.conv_k = 0, bad.q_history = 0;
    expect(&bad, &fa, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "a ring without the MTA conv");
    /* slots < c_q (q_history 1 + S_q 1 <= 3: only the slot count is wrong) */
    bad = p, bad.q_history = 1, bad.seq_q = 1;
    a = fa, a.score_ring_slots = 3, a.score_ring_strides = rs_make(RH, 3, RCAP);
    expect(&bad, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "score_ring_slots < conv_q");
    a.score_ring_slots = 4, a.score_ring_strides = rs_make(RH, 4, RCAP);
    expect(&bad, &a, ws, bytes, TA_OK, "ok", NULL, 0, "score_ring_slots = conv_q");
    a.score_ring_slots = -1;
    expect(&bad, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "negative score_ring_slots");
    /* reading: q_history + S_q > slots */
    a = fa, a.score_ring_slots = 4, a.score_ring_strides = rs_make(RH, 4, RCAP);
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "q_history + S_q > score_ring_slots, reading the ring");
    a.q_hist = r_qh; /* recomputed: only written, any slot count >= c_q */
    expect(&p, &a, ws, bytes, TA_OK, "ok", NULL, 0,
           "q_history + S_q > score_ring_slots with q_hist given");
    /* the slot stride below S_k, a negative stride */
    a = fa, a.score_ring_strides = rs_make(RH, 5, p.seq_k - 1);
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "score_ring_strides.seq = S_k - 1");
    a = fa, a.score_ring_strides.seq = -RCAP;
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "negative score_ring_strides.seq");
    a = fa, a.score_ring_strides.head = a.score_ring_strides.seq; /* heads alias slots */
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes,
           "aliasing score_ring_strides");
    /* a misaligned ring */
    a = fa, a.score_ring = (float *)(void *)((char *)r_ring + 2);
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_ring, ring_bytes + 8,
           "misaligned score_ring");
    /* overlaps: o, lse, k, q_hist, the workspace */
    a = fa, a.score_ring = r_o + 8; /* o's rows are r_o[0 .. 32) */
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", NULL, 0, "score_ring overlapping o");
    a = fa, a.score_ring = r_lse;
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", NULL, 0,
           "score_ring overlapping lse");
    a = fa, a.score_ring = r_k + 16;
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_k, sizeof r_k,
           "score_ring overlapping k");
    a = fa, a.q_hist = r_qh, a.score_ring = r_qh + 8;
    expect(&p, &a, ws, bytes, TA_ERR_BAD_ARG, "score_ring", r_qh, sizeof r_qh,
           "score_ring overlapping q_hist");
    { /* the ring inside the workspace (the caller-run prepare takes its own shared) */
        size_t wb;
        void *big = ws_for(&p, &wb, ring_bytes + 64);
        a = fa, a.score_ring = (float *)big;
        expect_t(&p, &a, big, wb, TA_ERR_BAD_ARG, "score_ring", NULL, 0, 0,
                 "score_ring overlapping the workspace");
        ta_test_free(big);
    }
    /* CUDA: no ring (or no CUDA at all) */
    {
        const int have = ta_backend_available(TA_BACKEND_CUDA);
        const ta_status want = have ? TA_ERR_UNSUPPORTED : TA_ERR_BACKEND_UNAVAILABLE;
        st = ta_fwd(&p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL);
        TA_CHECK(st == want, "CUDA with a ring: %s, want %s", ta_status_string(st),
                 ta_status_string(want));
        if (have) {
            const ta_status ex = ta_explain_fwd(&p, TA_BACKEND_CUDA, &fa, NULL, 0, NULL, why,
                                                sizeof why);
            TA_CHECK(ex == st && strstr(why, "score_ring"), "CUDA explain: %s", why);
        }
        ++n_refusals;
    }
    /* key ranges: valid ones (key_begin a multiple of block_k - (c_k - 1) = 14)
     * run without the ring, refused with it */
    bad = p, bad.q_history = 0, bad.seq_k = RSK_MAX, bad.block_k = 16, bad.key_begin = 14;
    ta_test_free(ws);
    ws = ws_for(&bad, &bytes, 0);
    a = fa, a.score_ring = NULL;
    expect(&bad, &a, ws, bytes, TA_OK, "ok", NULL, 0, "key_begin 14 without a ring");
    expect(&bad, &fa, ws, bytes, TA_ERR_UNSUPPORTED, "score_ring", r_ring, ring_bytes,
           "a ring with key_begin > 0");
    bad.key_begin = 0, bad.key_end = 14;
    expect(&bad, &a, ws, bytes, TA_OK, "ok", NULL, 0, "key_end 14 without a ring");
    expect(&bad, &fa, ws, bytes, TA_ERR_UNSUPPORTED, "score_ring", r_ring, ring_bytes,
           "a ring with key_end < S_k");
    bad.key_end = RSK_MAX;
    expect(&bad, &fa, ws, bytes, TA_OK, "ok", NULL, 0, "a ring with key_end = S_k");
    /* no ring: q_history > 0 needs q_hist (the old rule) */
    ta_test_free(ws);
    ws = ws_for(&p, &bytes, 0);
    a = fa, a.score_ring = NULL;
    expect(&p, &a, ws, bytes, TA_ERR_NULL_ARG, "q_hist", NULL, 0,
           "no ring, q_history > 0 and q_hist NULL");
    a.score_ring_slots = 1; /* ignored without a ring */
    a.q_hist = r_qh;
    expect(&p, &a, ws, bytes, TA_OK, "ok", NULL, 0, "no ring, score_ring_slots ignored");
    ta_test_free(ws);
}

int main(int argc, char **argv) {
    const uint64_t seed = ta_test_seed("test_score_ring");
    int count = 250, i;
    ta_rng r;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0)
            count = 6;
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_score_ring [--count N] [--quick]\n");
            return 2;
        }
    }
    ta_rng_seed(&r, seed);
    check_refusals();
    for (i = 0; i < count && ta_test_failures == 0; ++i)
        check_sequence(&r);
    printf("test_score_ring: %ld sequences (%ld split-K, %ld rotary, %ld windowed, %ld with "
           "seqlens_k, %ld with a key prefix, %ld with q_offset, %ld paged), %ld calls (%ld "
           "reading the history from the ring, %ld later prefill chunks with q_hist) on REF, CPU "
           "(1, 2 threads) and caller-run tasks: every row equal to the expected forward, every "
           "ring equal to REF's; %ld refusals passed\n",
           n_seq, n_split_seq, n_rope_seq, n_win_seq, n_seqlens_seq, n_prefix_seq, n_offset_seq,
           n_paged_seq, n_calls, n_read_calls, n_hist_calls, n_refusals);
    printf("  REF rings: %lld entries written (each its raw score), %lld in written slots unseen "
           "by their rows kept the poison, %lld in slots never written; control: %ld of %ld "
           "decode steps changed with their history slots poisoned\n",
           n_written, n_masked_kept, n_never, n_control_differ, n_control);
    TA_CHECK(n_control < 4 || n_control_differ > 0,
             "no control step changed: the ring's history is never read");
    TA_CHECK(n_seq == 0 || n_written > 0, "no ring entry was ever written");
    return ta_test_finish("test_score_ring");
}
