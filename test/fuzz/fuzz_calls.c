/*
 * libFuzzer harness: small full calls, REF against CPU bit for bit.
 *
 * Each input gives a small problem (B <= 2, H <= 4, S <= 40, D <= 40, every dtype,
 * causal, windows, seqlens_k, MTA conv, tile sizes, [B,S,H,D] strides, 1-3 CPU
 * threads) and a seed for the input values (finite, |x| <= 2: the NaN and
 * overflow semantics of issue 15 items 1-2 are still open, so this harness stays
 * inside the finite range where bit-identity is specified). Then:
 *   - REF and CPU size queries agree on the status;
 *   - ta_fwd on REF and on CPU, then ta_bwd on both (from REF's o and lse):
 *     o, lse, dq, dk, dv, dconv_w equal bit for bit;
 *   - the same forward and backward as caller-run CPU tasks (ta_*_task_plan,
 *     ta_*_tasks_prepare, ta_task_run on this thread, each phase's tasks in an
 *     order shuffled from the seed, one scratch buffer between canaries with
 *     random contents): equal bit for bit to ta_fwd / ta_bwd on CPU;
 *   - the backward over key and query ranges (SDPA problems: no conv; a window
 *     only with the causal mask): 1-3 query and 1-3 key ranges cut from the
 *     bytes, each visible (query range, key range) pair one ta_bwd with
 *     args.accumulate = TA_BWD_ACCUMULATE on views of the full tensors (the
 *     full problem's bottom-right alignment and key lengths kept), adding into
 *     zeroed f32 (hi, lo) pairs, on REF and on CPU (ta_bwd or caller-run tasks)
 *     each in its own random order of the documented kind (every query range's
 *     key ranges ascending, every key range's query ranges ascending), then
 *     ta_bwd_finish on each: both words and the finished gradients REF == CPU
 *     bit for bit; one key range: dq == ta_bwd's; one query range with
 *     H = H_kv: dk, dv == ta_bwd's (S <= 40, so a cut on multiples of 64 is
 *     one range);
 *   - the forward again with num_splits from the bytes (0, 2-4, TA_SPLITS_AUTO):
 *     REF == CPU (ta_fwd or caller-run tasks: the parts as tasks); the same keys in a paged KV cache (page size 1-8, pages in a
 *     shuffled order, spare pages, unused table entries -1) on REF and CPU (or
 *     caller-run tasks) == the contiguous forward bit for bit; without the
 *     conv, two forwards over key shares [0, k1), [k1, S_k) merged by ta_merge:
 *     REF == CPU, and one part merged is its own bits;
 *   - MTA problems as a chunked prefill: 1-3 chunks of the queries from the
 *     bytes, each with min(c_q - 1, c0) query history rows (args.q_hist) and
 *     the keys cut at its cache length, on REF and CPU (or caller-run tasks):
 *     o and lse == the one forward's bit for bit (docs/mta.md section 2a); a
 *     third of them with a score ring per backend (the history read from it
 *     instead of q_hist half the time): the same bits, and REF's ring == CPU's;
 *   - half of the problems with head_dim >= 2 again with the rotary stage
 *     (pairing, pairs, table rows, row and head strides, positions from the
 *     bytes): forward and backward REF == CPU == caller-run tasks bit for bit;
 *   - key shares with halos (ta_problem.key_begin, key_end, q_offset; docs/api.md,
 *     "Key ranges and the query offset"), MTA and SDPA, windows too: the keys cut
 *     into 2-3 shares where split-K with that count cuts them (K tiles of a
 *     block_k drawn so that there are at least two), each share one ta_fwd over
 *     views of its halo'd keys [k0 - E, k1 + R) (E: 0-2 whole tiles, at least
 *     one with the conv; R: P_k to P_k + 2 keys, fewer at the end) with every
 *     query row at its place; every share REF == CPU (or caller-run tasks), the
 *     shares merged in key order (ta_merge) REF == CPU and, in f32, == one ta_fwd
 *     with num_splits = the share count bit for bit (seqlens_k kept when every
 *     batch entry has the same length, else left out of this check);
 *   - a third of the problems again with a random key range on the K tiles and
 *     q_offset (small, or at |S_k - S_q + q_offset| = TA_SEQ_MAX), num_splits 0,
 *     2, 3 or auto: REF == CPU (or caller-run tasks) bit for bit;
 *   - every buffer sits between canaries that stay intact, inputs stay unchanged,
 *     and the workspace starts with random contents (results do not depend on it).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

enum {
    B_Q,
    B_K,
    B_V,
    B_CONV,
    B_SEQL,
    B_DO,
    B_N_IN, /* inputs */
    B_O = B_N_IN,
    B_LSE,
    B_DQ,
    B_DK,
    B_DV,
    B_DCONV,
    B_WS,
    B_SCRATCH, /* caller-run tasks */
    B_N
};
typedef struct bufs {
    fz_buf b[B_N];
} bufs;

static void make_problem(fz *f, ta_problem *p, ta_strides *bshd) {
    fz_small_problem(f, p, 40, 40);
    if (fz_range(f, 0, 3) == 0) p->scale = (float)fz_range(f, -40, 40) / 16.0f;
    *bshd = fz_range(f, 0, 3) == 0 ? (ta_strides){1, 1, 1} : (ta_strides){0, 0, 0};
}

/* [B, S, H, D] strides of a [B, heads, S, dim] tensor (no gaps), or zeros. */
static ta_strides strides_of(const ta_strides *bshd, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides s = {0, 0, 0};
    if (bshd->batch) {
        s.batch = (int64_t)seq * heads * dim;
        s.head = dim;
        s.seq = (int64_t)heads * dim;
    }
    return s;
}

static void fill(uint64_t *seed, void *buf, ta_dtype dt, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        /* a float in [-2, 2), rounded to dt by truncating its bits (still finite) */
        const float x = (float)((int64_t)(fz_mix(seed) >> 40) - (1 << 23)) / (float)(1 << 22);
        uint32_t u;
        memcpy(&u, &x, 4);
        if (dt == TA_F32)
            memcpy((float *)buf + i, &x, 4);
        else if (dt == TA_BF16)
            ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        else { /* f16 from the value's sign and a small exponent/mantissa */
            const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
            ((uint16_t *)buf)[i] = (uint16_t)(sign | (uint16_t)(fz_mix(seed) % 0x4000u));
        }
    }
}

static int all_guards(const bufs *bs) {
    int i;
    for (i = 0; i < B_N; ++i)
        if (bs->b[i].raw && !fz_guards_intact(&bs->b[i])) return i;
    return -1;
}

static void bufs_free(bufs *bs) {
    int i;
    for (i = 0; i < B_N; ++i)
        fz_buf_free(&bs->b[i]);
}

static void fill_random(unsigned char *buf, size_t bytes, uint64_t *s) {
    size_t i;
    for (i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t r = fz_mix(s);
        memcpy(buf + i, &r, 8);
    }
}

/* Every task of the call prepared in shared (plan tp), phase by phase, each
 * phase's tasks in an order shuffled from *s (Fisher-Yates). */
static ta_status run_tasks(const ta_task_plan *tp, void *shared, void *scratch, uint64_t *s) {
    int32_t ph;
    for (ph = 0; ph < tp->num_phases; ++ph) {
        const int64_t n = tp->num_tasks[ph];
        int64_t *order = (int64_t *)malloc((size_t)n * sizeof(int64_t) + 8), i;
        FZ_CHECK(order != NULL, "out of memory");
        for (i = 0; i < n; ++i)
            order[i] = i;
        for (i = n - 1; i > 0; --i) {
            const int64_t j = (int64_t)(fz_mix(s) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j], order[j] = t;
        }
        for (i = 0; i < n; ++i) {
            const ta_status st = ta_task_run(shared, ph, order[i], scratch, tp->scratch_bytes);
            if (st != TA_OK) {
                free(order);
                return st;
            }
        }
        free(order);
    }
    return TA_OK;
}

/* One backend's forward then backward (from the given o and lse, else its own).
 * tp (CPU only): the forward's and the backward's task plans, run as caller-run
 * tasks (ws is then the shared workspace); NULL: ta_fwd and ta_bwd. rope: the
 * rotary tables and positions (ta_problem.rope), or NULL. */
static void run_backend(const ta_problem *p, ta_backend be, const bufs *in, const ta_strides *bshd,
                        const void *o_in, const float *lse_in, size_t ws_bytes, uint64_t ws_seed,
                        const ta_task_plan *tp, bufs *out, size_t eb, const ta_rope_args *rope,
                        ta_status *st_f, ta_status *st_b) {
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const size_t n_conv = (size_t)p->heads_q * (size_t)p->conv_q * (size_t)p->conv_k;
    ta_fwd_args fa;
    ta_bwd_args ba;
    uint64_t s = ws_seed;
    unsigned char *ws;
    memset(out, 0, sizeof *out);
    memset(fz_buf_alloc(&out->b[B_O], n_q * (size_t)p->head_dim_v * eb), 0xFF,
           n_q * (size_t)p->head_dim_v * eb);
    memset(fz_buf_alloc(&out->b[B_LSE], n_q * 4), 0xFF, n_q * 4);
    memset(fz_buf_alloc(&out->b[B_DQ], n_q * (size_t)p->head_dim * eb), 0xFF,
           n_q * (size_t)p->head_dim * eb);
    memset(fz_buf_alloc(&out->b[B_DK], n_k * (size_t)p->head_dim * eb), 0xFF,
           n_k * (size_t)p->head_dim * eb);
    memset(fz_buf_alloc(&out->b[B_DV], n_k * (size_t)p->head_dim_v * eb), 0xFF,
           n_k * (size_t)p->head_dim_v * eb);
    memset(fz_buf_alloc(&out->b[B_DCONV], n_conv * 4), 0xFF, n_conv * 4);
    ws = (unsigned char *)fz_buf_alloc(&out->b[B_WS], ws_bytes);
    fill_random(ws, ws_bytes, &s);
    if (tp) {
        const size_t n = tp[0].scratch_bytes > tp[1].scratch_bytes ? tp[0].scratch_bytes
                                                                   : tp[1].scratch_bytes;
        fill_random((unsigned char *)fz_buf_alloc(&out->b[B_SCRATCH], n), n, &s);
    }
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    if (rope) fa.rope = ba.rope = *rope;
    fa.q = ba.q = fz_data(&in->b[B_Q]);
    fa.k = ba.k = fz_data(&in->b[B_K]);
    fa.v = ba.v = fz_data(&in->b[B_V]);
    fa.conv_w = ba.conv_w = p->conv_q ? (const float *)fz_data(&in->b[B_CONV]) : NULL;
    fa.seqlens_k = ba.seqlens_k =
        in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    fa.o = fz_data(&out->b[B_O]);
    fa.lse = (float *)fz_data(&out->b[B_LSE]);
    fa.q_strides = ba.q_strides = ba.dq_strides =
        strides_of(bshd, p->heads_q, p->seq_q, p->head_dim);
    fa.k_strides = ba.k_strides = ba.dk_strides =
        strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim);
    fa.v_strides = ba.v_strides = ba.dv_strides =
        strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
    fa.o_strides = ba.o_strides = ba.d_o_strides =
        strides_of(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    if (tp) {
        *st_f = ta_fwd_tasks_prepare(p, be, &fa, ws, ws_bytes);
        if (*st_f == TA_OK) *st_f = run_tasks(&tp[0], ws, fz_data(&out->b[B_SCRATCH]), &s);
    } else {
        *st_f = ta_fwd(p, be, &fa, ws, ws_bytes, NULL);
    }
    ba.o = o_in ? o_in : fa.o;
    ba.lse = lse_in ? lse_in : fa.lse;
    ba.d_o = fz_data(&in->b[B_DO]);
    ba.dq = fz_data(&out->b[B_DQ]);
    ba.dk = fz_data(&out->b[B_DK]);
    ba.dv = fz_data(&out->b[B_DV]);
    ba.dconv_w = p->conv_q ? (float *)fz_data(&out->b[B_DCONV]) : NULL;
    if (*st_f != TA_OK) {
        *st_b = *st_f;
    } else if (tp) {
        *st_b = ta_bwd_tasks_prepare(p, be, &ba, ws, ws_bytes);
        if (*st_b == TA_OK) *st_b = run_tasks(&tp[1], ws, fz_data(&out->b[B_SCRATCH]), &s);
    } else {
        *st_b = ta_bwd(p, be, &ba, ws, ws_bytes, NULL);
    }
}

static void compare(const bufs *a, const bufs *b, int which, const char *name,
                    const char *what) {
    FZ_CHECK(memcmp(fz_data(&a->b[which]), fz_data(&b->b[which]), a->b[which].bytes) == 0,
             "%s differ in %s", what, name);
}

static void compare_all(const bufs *a, const bufs *b, int conv, const char *what) {
    compare(a, b, B_O, "o", what);
    compare(a, b, B_LSE, "lse", what);
    compare(a, b, B_DQ, "dq", what);
    compare(a, b, B_DK, "dk", what);
    compare(a, b, B_DV, "dv", what);
    if (conv) compare(a, b, B_DCONV, "dconv_w", what);
}

/* ---- The backward over key and query ranges (docs/api.md, "Backward over key
 * and query ranges"): accumulating pair calls on views, then ta_bwd_finish. ---- */
#define RG_MAX 3 /* ranges per cut */

typedef struct ranges {
    int32_t nq, nk;
    int32_t qcut[RG_MAX + 1], kcut[RG_MAX + 1]; /* range r: [cut[r], cut[r + 1]) */
} ranges;

/* 1 to RG_MAX ranges of [0, s), cut points from the bytes (duplicates merged). */
static int32_t make_cut(fz *f, int32_t s, int32_t *cut) {
    const int32_t want = fz_range(f, 1, RG_MAX);
    int32_t n = 1, i, j;
    cut[0] = 0;
    for (i = 1; i < want && s > 1; ++i) {
        const int32_t c = fz_range(f, 1, s - 1);
        for (j = n; j > 1 && cut[j - 1] > c; --j) /* insert sorted */
            cut[j] = cut[j - 1];
        if (cut[j - 1] == c) { /* a duplicate: undo the shift */
            for (; j < n; ++j)
                cut[j] = cut[j + 1];
            continue;
        }
        cut[j] = c;
        ++n;
    }
    cut[n] = s;
    return n;
}

/* The problem of pair (query range a, key range b) of the full problem p, with
 * the key lengths of each batch entry (full: sl_full, NULL = seq_k): 0 if the
 * pair cannot see a key (causal, its keys all after its rows). The pair's key
 * view starts at key k0 and keeps the full problem's bottom-right alignment
 * (row r of the range at key position r + q0 + S_k - S_q - k0): causal,
 * seq_k = q1 + S_k - S_q - k0 (keys past it are after every row); no causal
 * mask, seq_k = k1 - k0. sl[b]: the keys of the range the entry has, clamped
 * to the view; *has_sl: seqlens_k needed. Windows only with TA_CAUSAL (a
 * window without it may reach past the view). */
static int pair_problem(const ta_problem *p, const ranges *r, int32_t a, int32_t b,
                        const int32_t *sl_full, ta_problem *pp, int32_t *sl, int *has_sl) {
    const int32_t q0 = r->qcut[a], q1 = r->qcut[a + 1], k0 = r->kcut[b], k1 = r->kcut[b + 1];
    int32_t i;
    *pp = *p;
    pp->seq_q = q1 - q0;
    pp->seq_k = (p->flags & TA_CAUSAL) ? q1 + p->seq_k - p->seq_q - k0 : k1 - k0;
    if (pp->seq_k <= 0) return 0;
    *has_sl = sl_full != NULL;
    for (i = 0; i < p->batch; ++i) {
        int32_t hi = sl_full ? sl_full[i] : p->seq_k;
        hi = (hi < k1 ? hi : k1) - k0;
        sl[i] = hi < 0 ? 0 : hi > pp->seq_k ? pp->seq_k : hi;
        if (sl[i] != pp->seq_k) *has_sl = 1;
    }
    return 1;
}

/* A random order (from *s) of the visible pairs, codes a * RG_MAX + b, in
 * which each query range's key ranges and each key range's query ranges come
 * ascending (the documented order; any such schedule gives the same bits). */
static int32_t pair_order(const ta_problem *p, const ranges *r, const int32_t *sl_full, uint64_t *s,
                          int32_t *order) {
    int32_t next_b[RG_MAX] = {0}, next_a[RG_MAX] = {0}, n = 0, total = 0, a, b, sl[2];
    int vis[RG_MAX][RG_MAX], has_sl;
    ta_problem pp;
    for (a = 0; a < r->nq; ++a)
        for (b = 0; b < r->nk; ++b)
            total += vis[a][b] = pair_problem(p, r, a, b, sl_full, &pp, sl, &has_sl);
    for (;;) {
        int32_t ready[RG_MAX], nr = 0, pick;
        for (a = 0; a < r->nq; ++a)
            while (next_b[a] < r->nk && !vis[a][next_b[a]])
                ++next_b[a];
        for (b = 0; b < r->nk; ++b)
            while (next_a[b] < r->nq && !vis[next_a[b]][b])
                ++next_a[b];
        for (a = 0; a < r->nq; ++a)
            if (next_b[a] < r->nk && next_a[next_b[a]] == a) ready[nr++] = a * RG_MAX + next_b[a];
        if (nr == 0) break;
        pick = ready[fz_mix(s) % (uint64_t)nr];
        order[n++] = pick;
        ++next_b[pick / RG_MAX];
        ++next_a[pick % RG_MAX];
    }
    FZ_CHECK(n == total, "pair order: %d of %d pairs", (int)n, (int)total);
    return n;
}

enum { W_DQ, W_DQ_LO, W_DK, W_DK_LO, W_DV, W_DV_LO, W_GQ, W_GK, W_GV, W_N };
typedef struct words {
    fz_buf b[W_N]; /* f32 (hi, lo) pairs [B, H(_kv), S, D], contiguous; finished gradients */
} words;

/* [B, heads, seq, dim] strides of the full tensor (the harness's layout) in elements. */
static ta_strides full_strides(const ta_strides *bshd, int32_t heads, int32_t seq, int32_t dim) {
    ta_strides s = strides_of(bshd, heads, seq, dim);
    if (!bshd->batch) {
        s.seq = dim;
        s.head = (int64_t)seq * dim;
        s.batch = (int64_t)heads * s.head;
    }
    return s;
}

/* The pairs of r in `order` on backend be (CPU: ta_bwd or caller-run tasks,
 * from *s) adding into w, then ta_bwd_finish on be into w's gradients. */
static void run_ranges(const ta_problem *p, ta_backend be, const bufs *in, const ta_strides *bshd,
                       const void *o, const float *lse, const ranges *r, const int32_t *order,
                       int32_t n, uint64_t *s, words *w, size_t eb) {
    const int32_t *sl_full = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    const ta_strides sq = full_strides(bshd, p->heads_q, p->seq_q, p->head_dim),
                     sk = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim),
                     sv = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim_v),
                     so = full_strides(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    const ta_strides none = {0, 0, 0};
    const ta_strides wq = full_strides(&none, p->heads_q, p->seq_q, p->head_dim),
                     wk = full_strides(&none, p->heads_kv, p->seq_k, p->head_dim),
                     wv = full_strides(&none, p->heads_kv, p->seq_k, p->head_dim_v);
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t n_k = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    const size_t sizes[W_N] = {n_q * (size_t)p->head_dim * 4,   n_q * (size_t)p->head_dim * 4,
                               n_k * (size_t)p->head_dim * 4,   n_k * (size_t)p->head_dim * 4,
                               n_k * (size_t)p->head_dim_v * 4, n_k * (size_t)p->head_dim_v * 4,
                               n_q * (size_t)p->head_dim * eb,  n_k * (size_t)p->head_dim * eb,
                               n_k * (size_t)p->head_dim_v * eb};
    ta_bwd_finish_args fa;
    ta_status st;
    int32_t i, j;
    memset(w, 0, sizeof *w);
    for (i = 0; i < W_N; ++i) /* both words zeroed, the gradients poisoned */
        memset(fz_buf_alloc(&w->b[i], sizes[i]), i < W_GQ ? 0 : 0xFF, sizes[i]);
    for (i = 0; i < n; ++i) {
        const int32_t a = order[i] / RG_MAX, b = order[i] % RG_MAX;
        const int32_t q0 = r->qcut[a], k0 = r->kcut[b], nr = r->qcut[a + 1] - q0;
        const int32_t bh = p->batch * p->heads_q;
        ta_problem pp;
        ta_bwd_args ba;
        ta_task_plan tp;
        fz_buf lb, sb, wb, scr;
        int32_t sl[2];
        int has_sl, tasks = be == TA_BACKEND_CPU && (fz_mix(s) % 3u) == 0;
        size_t ws_bytes = 0;
        float *pl;
        FZ_CHECK(pair_problem(p, r, a, b, sl_full, &pp, sl, &has_sl), "an invisible pair ran");
        pl = (float *)fz_buf_alloc(&lb, (size_t)bh * (size_t)nr * 4); /* lse rows [B, H, nr] */
        for (j = 0; j < bh; ++j)
            memcpy(pl + (size_t)j * (size_t)nr, lse + (size_t)j * (size_t)p->seq_q + (size_t)q0,
                   (size_t)nr * 4);
        memcpy(fz_buf_alloc(&sb, sizeof sl), sl, sizeof sl);
        memset(&ba, 0, sizeof ba);
        ba.q = (const char *)fz_data(&in->b[B_Q]) + (size_t)q0 * (size_t)sq.seq * eb;
        ba.o = (const char *)o + (size_t)q0 * (size_t)so.seq * eb;
        ba.d_o = (const char *)fz_data(&in->b[B_DO]) + (size_t)q0 * (size_t)so.seq * eb;
        ba.k = (const char *)fz_data(&in->b[B_K]) + (size_t)k0 * (size_t)sk.seq * eb;
        ba.v = (const char *)fz_data(&in->b[B_V]) + (size_t)k0 * (size_t)sv.seq * eb;
        ba.lse = pl;
        ba.seqlens_k = has_sl ? (const int32_t *)fz_data(&sb) : NULL;
        ba.q_strides = sq;
        ba.k_strides = sk;
        ba.v_strides = sv;
        ba.o_strides = ba.d_o_strides = so;
        ba.dq_strides = wq;
        ba.dk_strides = wk;
        ba.dv_strides = wv;
        ba.accumulate = TA_BWD_ACCUMULATE;
        ba.dq = (float *)fz_data(&w->b[W_DQ]) + (size_t)q0 * (size_t)p->head_dim;
        ba.dq_lo = (float *)fz_data(&w->b[W_DQ_LO]) + (size_t)q0 * (size_t)p->head_dim;
        ba.dk = (float *)fz_data(&w->b[W_DK]) + (size_t)k0 * (size_t)p->head_dim;
        ba.dk_lo = (float *)fz_data(&w->b[W_DK_LO]) + (size_t)k0 * (size_t)p->head_dim;
        ba.dv = (float *)fz_data(&w->b[W_DV]) + (size_t)k0 * (size_t)p->head_dim_v;
        ba.dv_lo = (float *)fz_data(&w->b[W_DV_LO]) + (size_t)k0 * (size_t)p->head_dim_v;
        if (tasks) {
            FZ_CHECK(ta_bwd_task_plan(&pp, be, &tp) == TA_OK, "pair task plan refused");
            ws_bytes = tp.shared_bytes;
        } else {
            FZ_CHECK(ta_bwd_workspace_size(&pp, be, &ws_bytes) == TA_OK, "pair size query refused");
        }
        fill_random((unsigned char *)fz_buf_alloc(&wb, ws_bytes), ws_bytes, s);
        if (tasks) {
            fill_random((unsigned char *)fz_buf_alloc(&scr, tp.scratch_bytes), tp.scratch_bytes, s);
            st = ta_bwd_tasks_prepare(&pp, be, &ba, fz_data(&wb), ws_bytes);
            if (st == TA_OK) st = run_tasks(&tp, fz_data(&wb), fz_data(&scr), s);
            FZ_CHECK(fz_guards_intact(&scr), "pair tasks wrote past their scratch");
            fz_buf_free(&scr);
        } else {
            st = ta_bwd(&pp, be, &ba, fz_data(&wb), ws_bytes, NULL);
        }
        FZ_CHECK(st == TA_OK, "pair (%d, %d) [%d, %d) x [%d, %d) refused on backend %d%s: %s",
                 (int)a, (int)b, (int)q0, (int)r->qcut[a + 1], (int)k0, (int)r->kcut[b + 1],
                 (int)be, tasks ? " (tasks)" : "", ta_status_string(st));
        FZ_CHECK(fz_guards_intact(&lb) && fz_guards_intact(&sb) && fz_guards_intact(&wb),
                 "pair call wrote past its lse, seqlens or workspace");
        fz_buf_free(&lb);
        fz_buf_free(&sb);
        fz_buf_free(&wb);
    }
    memset(&fa, 0, sizeof fa);
    fa.dq_hi = (const float *)fz_data(&w->b[W_DQ]);
    fa.dk_hi = (const float *)fz_data(&w->b[W_DK]);
    fa.dv_hi = (const float *)fz_data(&w->b[W_DV]);
    fa.dq = fz_data(&w->b[W_GQ]);
    fa.dk = fz_data(&w->b[W_GK]);
    fa.dv = fz_data(&w->b[W_GV]);
    fa.dq_strides = strides_of(bshd, p->heads_q, p->seq_q, p->head_dim);
    fa.dk_strides = strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim);
    fa.dv_strides = strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
    st = ta_bwd_finish(p, be, &fa, NULL);
    FZ_CHECK(st == TA_OK, "ta_bwd_finish refused on backend %d: %s", (int)be, ta_status_string(st));
    for (i = 0; i < W_N; ++i)
        FZ_CHECK(fz_guards_intact(&w->b[i]), "backend %d: ranges wrote past word buffer %d",
                 (int)be, (int)i);
}

/* The ranges' backward on REF and on CPU (each in its own admissible order)
 * from REF's o and lse: REF == CPU for both words and the finished gradients;
 * one key range: dq == ta_bwd's (ref); one query range and H = H_kv: dk, dv
 * == ta_bwd's (the documented conditions with S <= 40 < 64). */
static void check_ranges(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                         const bufs *ref, uint64_t seed, size_t eb) {
    const int32_t *sl_full = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    const void *o = fz_data(&ref->b[B_O]);
    const float *lse = (const float *)fz_data(&ref->b[B_LSE]);
    ranges r;
    words w[2];
    int32_t order[2][RG_MAX * RG_MAX], n[2];
    uint64_t s = seed ^ UINT64_C(0x0123456789abcdef);
    int i;
    r.nq = make_cut(f, p->seq_q, r.qcut);
    r.nk = make_cut(f, p->seq_k, r.kcut);
    n[0] = pair_order(p, &r, sl_full, &s, order[0]);
    n[1] = pair_order(p, &r, sl_full, &s, order[1]);
    run_ranges(p, TA_BACKEND_REF, in, bshd, o, lse, &r, order[0], n[0], &s, &w[0], eb);
    run_ranges(p, TA_BACKEND_CPU, in, bshd, o, lse, &r, order[1], n[1], &s, &w[1], eb);
    for (i = 0; i < W_N; ++i)
        FZ_CHECK(memcmp(fz_data(&w[0].b[i]), fz_data(&w[1].b[i]), w[0].b[i].bytes) == 0,
                 "ranges (%d query x %d key): REF and CPU differ in word buffer %d", (int)r.nq,
                 (int)r.nk, i);
    if (r.nk == 1)
        FZ_CHECK(memcmp(fz_data(&w[0].b[W_GQ]), fz_data(&ref->b[B_DQ]), ref->b[B_DQ].bytes) == 0,
                 "one key range, %d query ranges: dq differs from ta_bwd's", (int)r.nq);
    if (r.nq == 1 && p->heads_q == p->heads_kv) {
        FZ_CHECK(memcmp(fz_data(&w[0].b[W_GK]), fz_data(&ref->b[B_DK]), ref->b[B_DK].bytes) == 0,
                 "one query range, %d key ranges: dk differs from ta_bwd's", (int)r.nk);
        FZ_CHECK(memcmp(fz_data(&w[0].b[W_GV]), fz_data(&ref->b[B_DV]), ref->b[B_DV].bytes) == 0,
                 "one query range, %d key ranges: dv differs from ta_bwd's", (int)r.nk);
    }
    for (i = 0; i < W_N; ++i) {
        fz_buf_free(&w[0].b[i]);
        fz_buf_free(&w[1].b[i]);
    }
}

/* ---- Forward variants: split-K, a paged KV cache, ta_merge ---- */

/* One forward on be into fa's o and lse from a random workspace (tasks: as
 * caller-run CPU tasks, each phase shuffled from *s). */
static ta_status run_fwd(const ta_problem *p, ta_backend be, const ta_fwd_args *fa, int tasks,
                         uint64_t *s) {
    fz_buf wb, scr;
    ta_task_plan tp;
    size_t bytes = 0;
    ta_status st = tasks ? ta_fwd_task_plan(p, be, &tp) : ta_fwd_workspace_size(p, be, &bytes);
    if (st != TA_OK) return st;
    if (tasks) bytes = tp.shared_bytes;
    fill_random((unsigned char *)fz_buf_alloc(&wb, bytes), bytes, s);
    if (tasks) {
        fill_random((unsigned char *)fz_buf_alloc(&scr, tp.scratch_bytes), tp.scratch_bytes, s);
        st = ta_fwd_tasks_prepare(p, be, fa, fz_data(&wb), bytes);
        if (st == TA_OK) st = run_tasks(&tp, fz_data(&wb), fz_data(&scr), s);
        FZ_CHECK(fz_guards_intact(&scr), "forward tasks wrote past their scratch");
        fz_buf_free(&scr);
    } else {
        st = ta_fwd(p, be, fa, fz_data(&wb), bytes, NULL);
    }
    FZ_CHECK(fz_guards_intact(&wb), "a forward wrote past its workspace");
    fz_buf_free(&wb);
    return st;
}

/* o and lse of a forward, poisoned, between canaries. */
typedef struct fwd_out {
    fz_buf o, lse;
} fwd_out;
static void fwd_out_alloc(fwd_out *r, size_t o_bytes, size_t lse_bytes) {
    memset(fz_buf_alloc(&r->o, o_bytes), 0xFF, o_bytes);
    memset(fz_buf_alloc(&r->lse, lse_bytes), 0xFF, lse_bytes);
}
static void fwd_out_same(const fwd_out *a, const fwd_out *b, const char *what) {
    FZ_CHECK(fz_guards_intact(&a->o) && fz_guards_intact(&a->lse) && fz_guards_intact(&b->o) &&
                 fz_guards_intact(&b->lse),
             "%s: a forward wrote past o or lse", what);
    FZ_CHECK(memcmp(fz_data(&a->o), fz_data(&b->o), a->o.bytes) == 0, "%s: o differs", what);
    FZ_CHECK(memcmp(fz_data(&a->lse), fz_data(&b->lse), a->lse.bytes) == 0, "%s: lse differs",
             what);
}
static void fwd_out_free(fwd_out *r) {
    fz_buf_free(&r->o);
    fz_buf_free(&r->lse);
}

/* The forward's tensors from the harness's buffers (o, lse: the caller's). */
static ta_fwd_args fwd_args(const ta_problem *p, const bufs *in, const ta_strides *bshd) {
    ta_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.q = fz_data(&in->b[B_Q]);
    fa.k = fz_data(&in->b[B_K]);
    fa.v = fz_data(&in->b[B_V]);
    fa.conv_w = p->conv_q ? (const float *)fz_data(&in->b[B_CONV]) : NULL;
    fa.seqlens_k = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    fa.q_strides = strides_of(bshd, p->heads_q, p->seq_q, p->head_dim);
    fa.k_strides = strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim);
    fa.v_strides = strides_of(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
    fa.o_strides = strides_of(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    return fa;
}

/* k or v ([B, H_kv, S_k, dim] in the harness's layout) copied into a pool of
 * pages [pages, page, H_kv, dim] through the block table (the other slots
 * keep their finite random values). */
static void gather_pages(const ta_problem *p, const ta_strides *bshd, const void *src, int32_t dim,
                         const int32_t *table, int32_t max_blocks, int32_t page, void *pool,
                         size_t eb) {
    const ta_strides st = full_strides(bshd, p->heads_kv, p->seq_k, dim);
    int32_t b, h, j;
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_kv; ++h)
            for (j = 0; j < p->seq_k; ++j) {
                const int64_t row = (int64_t)table[b * max_blocks + j / page] * page + j % page;
                memcpy((char *)pool + (size_t)((row * p->heads_kv + h) * dim) * eb,
                       (const char *)src + (size_t)(b * st.batch + h * st.head + j * st.seq) * eb,
                       (size_t)dim * eb);
            }
}

/* Every input's forward again: with num_splits from the bytes (0, 2-4 or
 * TA_SPLITS_AUTO) REF == CPU; the same keys in a paged KV cache (page size
 * 1-8, pages shuffled, spare pages, unused table entries -1) on REF and CPU ==
 * the contiguous forward bit for bit; without the conv, ta_merge of two
 * forwards over the key shares [0, k1) and [k1, S_k) (docs/api.md, "Split-K
 * and merge") REF == CPU, and one part merged gives back its own bits. */
static void check_fwd_variants(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                               const bufs *ref, uint64_t seed, size_t eb) {
    static const int32_t splits[] = {0, 2, 3, 4, TA_SPLITS_AUTO};
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t o_bytes = n_q * (size_t)p->head_dim_v * eb, lse_bytes = n_q * 4;
    const int32_t *sl = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    ta_problem ps = *p, pp;
    ta_fwd_args fa = fwd_args(p, in, bshd);
    fwd_out r[4];
    fz_buf pool_k, pool_v, table;
    uint64_t s = seed ^ UINT64_C(0xfeedfacecafebeef);
    int32_t page, n_blk, n_pages, max_blocks, i, *tb, *perm;
    int tasks;
    ps.num_splits = splits[fz_range(f, 0, 4)];
    tasks = (int)(fz_mix(&s) & 1u); /* CPU: OpenMP or caller-run tasks (split-K too) */
    /* split-K (or none): REF == CPU */
    for (i = 0; i < 2; ++i) {
        fwd_out_alloc(&r[i], o_bytes, lse_bytes);
        fa.o = fz_data(&r[i].o);
        fa.lse = (float *)fz_data(&r[i].lse);
        FZ_CHECK(run_fwd(&ps, (ta_backend)i, &fa, i == 1 && tasks, &s) == TA_OK,
                 "forward with num_splits %d refused on backend %d", (int)ps.num_splits, i);
    }
    fwd_out_same(&r[0], &r[1], "split-K forward, REF and CPU");
    if (ps.num_splits == 0)
        FZ_CHECK(memcmp(fz_data(&r[0].o), fz_data(&ref->b[B_O]), o_bytes) == 0,
                 "the forward is not the forward of before");
    /* the same keys in pages */
    page = fz_range(f, 1, 8);
    n_blk = (p->seq_k + page - 1) / page;
    max_blocks = n_blk + fz_range(f, 0, 2);
    n_pages = p->batch * n_blk + fz_range(f, 0, 3);
    perm = (int32_t *)malloc((size_t)n_pages * sizeof(int32_t));
    FZ_CHECK(perm != NULL, "out of memory");
    for (i = 0; i < n_pages; ++i)
        perm[i] = i;
    for (i = n_pages - 1; i > 0; --i) {
        const int32_t j = (int32_t)(fz_mix(&s) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    tb = (int32_t *)fz_buf_alloc(&table, (size_t)p->batch * (size_t)max_blocks * 4);
    for (i = 0; i < p->batch * max_blocks; ++i)
        tb[i] = i % max_blocks < n_blk ? perm[(i / max_blocks) * n_blk + i % max_blocks] : -1;
    free(perm);
    {
        const size_t rows = (size_t)n_pages * (size_t)page * (size_t)p->heads_kv;
        uint64_t fs = fz_mix(&s);
        fill(&fs, fz_buf_alloc(&pool_k, rows * (size_t)p->head_dim * eb), p->dtype,
             rows * (size_t)p->head_dim);
        fill(&fs, fz_buf_alloc(&pool_v, rows * (size_t)p->head_dim_v * eb), p->dtype,
             rows * (size_t)p->head_dim_v);
    }
    gather_pages(p, bshd, fz_data(&in->b[B_K]), p->head_dim, tb, max_blocks, page, fz_data(&pool_k),
                 eb);
    gather_pages(p, bshd, fz_data(&in->b[B_V]), p->head_dim_v, tb, max_blocks, page,
                 fz_data(&pool_v), eb);
    pp = ps;
    pp.kv_page_size = page;
    pp.kv_num_pages = n_pages;
    pp.kv_max_blocks = max_blocks;
    fa.k = fz_data(&pool_k);
    fa.v = fz_data(&pool_v);
    memset(&fa.k_strides, 0, sizeof fa.k_strides);
    memset(&fa.v_strides, 0, sizeof fa.v_strides);
    fa.block_table = tb;
    for (i = 2; i < 4; ++i) {
        fwd_out_alloc(&r[i], o_bytes, lse_bytes);
        fa.o = fz_data(&r[i].o);
        fa.lse = (float *)fz_data(&r[i].lse);
        FZ_CHECK(run_fwd(&pp, (ta_backend)(i - 2), &fa, i == 3 && tasks, &s) == TA_OK,
                 "paged forward (page %d, %d pages) refused on backend %d", (int)page, (int)n_pages,
                 i - 2);
    }
    fwd_out_same(&r[0], &r[2], "paged forward on REF and the contiguous forward");
    fwd_out_same(&r[0], &r[3], "paged forward on CPU and the contiguous forward");
    FZ_CHECK(fz_guards_intact(&pool_k) && fz_guards_intact(&pool_v) && fz_guards_intact(&table),
             "a paged forward wrote past the pools or the table");
    fz_buf_free(&pool_k);
    fz_buf_free(&pool_v);
    fz_buf_free(&table);
    for (i = 0; i < 4; ++i)
        fwd_out_free(&r[i]);
    /* ta_merge of two key shares (not for the conv: a share's edge keys
     * would need the conv's halo past it) */
    if (p->conv_q == 0 && p->seq_k > 1) {
        const int32_t k1 = fz_range(f, 1, p->seq_k - 1);
        const ta_strides sk = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim),
                         sv = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
        fz_buf parts_o, parts_l, lens;
        int32_t *ln = (int32_t *)fz_buf_alloc(&lens, 2 * 4);
        ta_merge_args ma;
        int be;
        memset(fz_buf_alloc(&parts_o, 2 * o_bytes), 0xFF, 2 * o_bytes);
        memset(fz_buf_alloc(&parts_l, 2 * lse_bytes), 0xFF, 2 * lse_bytes);
        for (i = 0; i < 2; ++i) {
            const int32_t k0 = i ? k1 : 0;
            int32_t b;
            ta_status st;
            fa = fwd_args(p, in, bshd);
            pp = *p;
            pp.seq_k = p->seq_k - k0;
            fa.k = (const char *)fz_data(&in->b[B_K]) + (size_t)k0 * (size_t)sk.seq * eb;
            fa.v = (const char *)fz_data(&in->b[B_V]) + (size_t)k0 * (size_t)sv.seq * eb;
            fa.k_strides = sk;
            fa.v_strides = sv;
            memset(&fa.o_strides, 0, sizeof fa.o_strides); /* parts: contiguous */
            fa.o = (char *)fz_data(&parts_o) + (size_t)i * o_bytes;
            fa.lse = (float *)fz_data(&parts_l) + (size_t)i * n_q;
            for (b = 0; b < p->batch; ++b) { /* the share's keys of each entry */
                const int32_t hi = (sl ? sl[b] : p->seq_k) < (i ? p->seq_k : k1)
                                       ? (sl ? sl[b] : p->seq_k)
                                       : (i ? p->seq_k : k1);
                ln[b] = hi - k0 < 0 ? 0 : hi - k0;
            }
            fa.seqlens_k = i == 0 || sl ? ln : NULL;
            st = run_fwd(&pp, TA_BACKEND_REF, &fa, 0, &s);
            FZ_CHECK(st == TA_OK, "share %d of the keys [%d, %d) refused: %s", i, (int)k0,
                     (int)(i ? p->seq_k : k1), ta_status_string(st));
        }
        memset(&ma, 0, sizeof ma);
        ma.num_parts = 2;
        ma.o_parts = fz_data(&parts_o);
        ma.lse_parts = (const float *)fz_data(&parts_l);
        ma.o_strides = strides_of(bshd, p->heads_q, p->seq_q, p->head_dim_v);
        for (be = 0; be < 2; ++be) {
            fwd_out_alloc(&r[be], o_bytes, lse_bytes);
            ma.o = fz_data(&r[be].o);
            ma.lse = (float *)fz_data(&r[be].lse);
            FZ_CHECK(ta_merge(p, (ta_backend)be, &ma, NULL) == TA_OK, "merge refused on %d", be);
        }
        fwd_out_same(&r[0], &r[1], "ta_merge of two key shares, REF and CPU");
        /* one part: its own bits */
        ma.num_parts = 1;
        ma.lse_parts = (const float *)fz_data(&parts_l) + (fz_mix(&s) & 1u) * n_q;
        ma.o_parts =
            (const char *)fz_data(&parts_o) + (size_t)(ma.lse_parts != fz_data(&parts_l)) * o_bytes;
        memset(&ma.o_strides, 0, sizeof ma.o_strides);
        memset(fz_data(&r[0].o), 0xFF, o_bytes);
        memset(fz_data(&r[0].lse), 0xFF, lse_bytes);
        ma.o = fz_data(&r[0].o);
        ma.lse = (float *)fz_data(&r[0].lse);
        FZ_CHECK(ta_merge(p, (ta_backend)(fz_mix(&s) & 1u), &ma, NULL) == TA_OK,
                 "one-part merge refused");
        FZ_CHECK(memcmp(fz_data(&r[0].o), ma.o_parts, o_bytes) == 0 &&
                     memcmp(fz_data(&r[0].lse), ma.lse_parts, lse_bytes) == 0,
                 "one part merged is not its own bits");
        FZ_CHECK(fz_guards_intact(&parts_o) && fz_guards_intact(&parts_l) &&
                     fz_guards_intact(&lens) && fz_guards_intact(&r[0].o) &&
                     fz_guards_intact(&r[0].lse),
                 "a share's forward or ta_merge wrote past a buffer");
        fz_buf_free(&parts_o);
        fz_buf_free(&parts_l);
        fz_buf_free(&lens);
        fwd_out_free(&r[0]);
        fwd_out_free(&r[1]);
    }
}

/* ---- MTA chunked prefill: query history rows (docs/mta.md section 2a) ---- */

/* For MTA problems: the queries cut into 1-3 chunks from the bytes, each one
 * forward over its rows with n = min(c_q - 1, c0) history rows (q_hist: the n
 * rows above it, q's strides), the keys cut at the chunk's cache length
 * (c1 + S_k - S_q: the full problem's alignment; seqlens_k cut there too), a
 * block_q of its own; on REF and on CPU (or caller-run tasks): o and lse ==
 * the one forward's bit for bit. Chunks whose rows are all above the keys
 * (cache length <= 0) see no key: their rows must be the empty rows (o = 0,
 * lse = -inf) of the one forward and are not called. */
static void check_chunks(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                         const bufs *ref, uint64_t seed, size_t eb) {
    const ta_strides sq = full_strides(bshd, p->heads_q, p->seq_q, p->head_dim),
                     so = full_strides(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t o_bytes = n_q * (size_t)p->head_dim_v * eb;
    const int32_t *sl = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    const int32_t bh = p->batch * p->heads_q;
    int32_t cut[5], n_chunks, c, j, be, slots, longest = 0;
    uint64_t s = seed ^ UINT64_C(0x0c0ffee0c0ffee00);
    /* a third of the runs pass one score ring per backend to every chunk
     * (docs/mta.md 2a, "The score ring"; no key range here), slots for the
     * longest chunk and its history rows, f32 [B, H, slots, S_k] poisoned */
    const int use_ring = (fz_mix(&s) % 3u) == 0 && p->key_begin == 0 && p->key_end == 0;
    fz_buf ring[2];
    size_t n_ring;
    n_chunks = make_cut(f, p->seq_q, cut);
    for (c = 0; c < n_chunks; ++c)
        longest = cut[c + 1] - cut[c] > longest ? cut[c + 1] - cut[c] : longest;
    slots = p->conv_q - 1 + longest < p->conv_q ? p->conv_q : p->conv_q - 1 + longest;
    n_ring = (size_t)bh * (size_t)slots * (size_t)p->seq_k;
    memset(ring, 0, sizeof ring);
    for (be = 0; use_ring && be < 2; ++be)
        memset(fz_buf_alloc(&ring[be], n_ring * 4), 0xFF, n_ring * 4);
    for (be = 0; be < 2; ++be) {
        fz_buf o, lse, lens;
        int32_t *ln = (int32_t *)fz_buf_alloc(&lens, 2 * 4);
        float *l = (float *)fz_buf_alloc(&lse, n_q * 4);
        memset(fz_buf_alloc(&o, o_bytes), 0xFF, o_bytes);
        memset(l, 0xFF, n_q * 4);
        for (c = 0; c < n_chunks; ++c) {
            const int32_t c0 = cut[c], c1 = cut[c + 1], n = c0 < p->conv_q - 1 ? c0 : p->conv_q - 1;
            const int tasks = be == 1 && (fz_mix(&s) % 3u) == 0;
            ta_problem pc = *p;
            ta_fwd_args fa = fwd_args(p, in, bshd);
            fz_buf cl;
            float *chunk_lse;
            ta_status st;
            size_t bytes;
            pc.seq_q = c1 - c0;
            pc.seq_k = c1 + p->seq_k - p->seq_q;
            pc.q_history = n;
            if (pc.seq_k <= 0) { /* no key for these rows in the one forward either */
                for (j = 0; j < bh; ++j) {
                    int32_t r;
                    for (r = c0; r < c1; ++r)
                        l[(size_t)j * (size_t)p->seq_q + (size_t)r] = -(float)INFINITY;
                }
                for (j = 0; j < bh; ++j) { /* o rows: 0 */
                    const int32_t b = j / p->heads_q, h = j % p->heads_q;
                    int32_t r;
                    for (r = c0; r < c1; ++r)
                        memset((char *)fz_data(&o) +
                                   (size_t)(b * so.batch + h * so.head + r * so.seq) * eb,
                               0, (size_t)p->head_dim_v * eb);
                }
                continue;
            }
            pc.block_q = fz_range(f, 0, 1) ? fz_range(f, TA_BLOCK_MIN, 64) : p->block_q;
            if (ta_fwd_workspace_size(&pc, (ta_backend)be, &bytes) != TA_OK)
                pc.block_q = p->block_q;
            fa.q = (const char *)fz_data(&in->b[B_Q]) + (size_t)c0 * (size_t)sq.seq * eb;
            fa.q_strides = sq;
            fa.q_hist = (const char *)fa.q - (size_t)n * (size_t)sq.seq * eb;
            fa.q_hist_strides = sq;
            if (!n) fa.q_hist = NULL;
            if (use_ring) { /* written by every chunk; read (no q_hist) half the time */
                fa.score_ring = (float *)fz_data(&ring[be]);
                fa.score_ring_slots = slots;
                fa.score_ring_strides = (ta_strides){(int64_t)p->heads_q * slots * p->seq_k,
                                                     (int64_t)slots * p->seq_k, p->seq_k};
                if (n > 0 && fz_mix(&s) % 2u) fa.q_hist = NULL;
            }
            fa.k_strides = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim);
            fa.v_strides = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
            fa.o = (char *)fz_data(&o) + (size_t)c0 * (size_t)so.seq * eb;
            fa.o_strides = so;
            chunk_lse = (float *)fz_buf_alloc(&cl, (size_t)bh * (size_t)pc.seq_q * 4);
            fa.lse = chunk_lse;
            if (sl) {
                for (j = 0; j < p->batch; ++j)
                    ln[j] = sl[j] < pc.seq_k ? sl[j] : pc.seq_k;
                fa.seqlens_k = ln;
            }
            st = run_fwd(&pc, (ta_backend)be, &fa, tasks, &s);
            FZ_CHECK(st == TA_OK, "chunk [%d, %d) with %d history rows refused on %d%s: %s",
                     (int)c0, (int)c1, (int)n, be, tasks ? " (tasks)" : "", ta_status_string(st));
            FZ_CHECK(fz_guards_intact(&cl), "a chunk wrote past its lse");
            for (j = 0; j < bh; ++j)
                memcpy(l + (size_t)j * (size_t)p->seq_q + (size_t)c0,
                       chunk_lse + (size_t)j * (size_t)pc.seq_q, (size_t)pc.seq_q * 4);
            fz_buf_free(&cl);
        }
        FZ_CHECK(fz_guards_intact(&o) && fz_guards_intact(&lse) && fz_guards_intact(&lens),
                 "chunks wrote past o, lse or their key lengths");
        FZ_CHECK(memcmp(fz_data(&o), fz_data(&ref->b[B_O]), o_bytes) == 0,
                 "%d chunks on backend %d: o differs from the one forward's", (int)n_chunks, be);
        FZ_CHECK(memcmp(l, fz_data(&ref->b[B_LSE]), n_q * 4) == 0,
                 "%d chunks on backend %d: lse differs from the one forward's", (int)n_chunks, be);
        fz_buf_free(&o);
        fz_buf_free(&lse);
        fz_buf_free(&lens);
    }
    if (use_ring) { /* the same entries written, the same poison left */
        FZ_CHECK(fz_guards_intact(&ring[0]) && fz_guards_intact(&ring[1]),
                 "chunks wrote past the score ring");
        FZ_CHECK(memcmp(fz_data(&ring[0]), fz_data(&ring[1]), n_ring * 4) == 0,
                 "%d chunks: REF's and CPU's score rings differ", (int)n_chunks);
        fz_buf_free(&ring[0]);
        fz_buf_free(&ring[1]);
    }
}

/* ---- The rotary load stage (docs/rope.md) ---- */

/* Half of the problems with head_dim >= 2 again with the rotary stage (the
 * pairing, rope_pairs, table rows, row and head strides and positions from
 * the bytes; random finite tables): the forward and the backward on REF, on
 * CPU and as caller-run CPU tasks, bit for bit, as the main check. */
static void check_rope(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                       uint64_t seed, size_t eb) {
    const int32_t smax = p->seq_q > p->seq_k ? p->seq_q : p->seq_k;
    ta_problem pr = *p;
    ta_rope_args ra;
    ta_task_plan tp[2];
    fz_buf cs, sn, pq, pk;
    bufs r[3];
    size_t ws[2], floats;
    ta_status st[3][2];
    int32_t stride, n_tables, i, use_pos;
    int be;
    if (p->head_dim < 2 || !fz_range(f, 0, 1)) return;
    pr.rope = fz_range(f, TA_ROPE_INTERLEAVED, TA_ROPE_HALF);
    pr.rope_pairs = fz_range(f, 1, p->head_dim / 2);
    use_pos = fz_range(f, 0, 1);
    pr.rope_rows = use_pos ? fz_range(f, 1, 48) : smax + fz_range(f, 0, 3);
    pr.rope_row_stride = fz_range(f, 0, 1) ? 0 : pr.rope_pairs + fz_range(f, 0, 2);
    stride = pr.rope_row_stride ? pr.rope_row_stride : pr.rope_pairs;
    pr.rope_head_stride = fz_range(f, 0, 1) ? 0 : pr.rope_rows * stride + fz_range(f, 0, 2);
    n_tables = pr.rope_head_stride ? p->heads_kv : 1;
    floats = (size_t)(n_tables - 1) * (size_t)pr.rope_head_stride +
             (size_t)pr.rope_rows * (size_t)stride;
    memset(&ra, 0, sizeof ra);
    ra.cos = (const float *)fz_buf_alloc(&cs, floats * 4);
    ra.sin = (const float *)fz_buf_alloc(&sn, floats * 4);
    fill(&seed, fz_data(&cs), TA_F32, floats);
    fill(&seed, fz_data(&sn), TA_F32, floats);
    memset(&pq, 0, sizeof pq);
    memset(&pk, 0, sizeof pk);
    if (use_pos) {
        int32_t *q_pos = (int32_t *)fz_buf_alloc(&pq, (size_t)p->batch * (size_t)p->seq_q * 4);
        int32_t *k_pos = (int32_t *)fz_buf_alloc(&pk, (size_t)p->batch * (size_t)p->seq_k * 4);
        for (i = 0; i < p->batch * p->seq_q; ++i)
            q_pos[i] = (int32_t)(fz_mix(&seed) % (uint64_t)pr.rope_rows);
        for (i = 0; i < p->batch * p->seq_k; ++i)
            k_pos[i] = (int32_t)(fz_mix(&seed) % (uint64_t)pr.rope_rows);
        ra.pos_q = q_pos;
        ra.pos_k = k_pos;
    }
    for (be = 0; be < 2; ++be) {
        size_t wf = 0, wb = 0;
        FZ_CHECK(ta_fwd_workspace_size(&pr, (ta_backend)be, &wf) == TA_OK &&
                     ta_bwd_workspace_size(&pr, (ta_backend)be, &wb) == TA_OK,
                 "rope: size queries refused on backend %d", be);
        ws[be] = wf > wb ? wf : wb;
    }
    FZ_CHECK(ta_fwd_task_plan(&pr, TA_BACKEND_CPU, &tp[0]) == TA_OK &&
                 ta_bwd_task_plan(&pr, TA_BACKEND_CPU, &tp[1]) == TA_OK,
             "rope: task plans refused");
    run_backend(&pr, TA_BACKEND_REF, in, bshd, NULL, NULL, ws[0], seed, NULL, &r[0], eb, &ra,
                &st[0][0], &st[0][1]);
    run_backend(&pr, TA_BACKEND_CPU, in, bshd, fz_data(&r[0].b[B_O]),
                (const float *)fz_data(&r[0].b[B_LSE]), ws[1], ~seed, NULL, &r[1], eb, &ra,
                &st[1][0], &st[1][1]);
    run_backend(&pr, TA_BACKEND_CPU, in, bshd, fz_data(&r[0].b[B_O]),
                (const float *)fz_data(&r[0].b[B_LSE]),
                tp[0].shared_bytes > tp[1].shared_bytes ? tp[0].shared_bytes : tp[1].shared_bytes,
                seed ^ 0x5a5a5a5a5a5a5a5aull, tp, &r[2], eb, &ra, &st[2][0], &st[2][1]);
    for (i = 0; i < 3; ++i)
        FZ_CHECK(st[i][0] == TA_OK && st[i][1] == TA_OK,
                 "rope (%d pairs, pairing %d): run %d refused: %d, %d", (int)pr.rope_pairs,
                 (int)pr.rope, (int)i, (int)st[i][0], (int)st[i][1]);
    compare_all(&r[0], &r[1], p->conv_q > 0, "rope: REF and CPU");
    compare_all(&r[1], &r[2], p->conv_q > 0, "rope: CPU calls and caller-run tasks");
    for (i = 0; i < 3; ++i)
        FZ_CHECK(all_guards(&r[i]) < 0, "rope: run %d wrote past a buffer", (int)i);
    FZ_CHECK(fz_guards_intact(&cs) && fz_guards_intact(&sn) &&
                 (!use_pos || (fz_guards_intact(&pq) && fz_guards_intact(&pk))),
             "rope: a call wrote past the tables or positions");
    for (i = 0; i < 3; ++i)
        bufs_free(&r[i]);
    fz_buf_free(&cs);
    fz_buf_free(&sn);
    fz_buf_free(&pq);
    fz_buf_free(&pk);
}

/* ---- Key ranges and the query offset (docs/api.md, "Key ranges and the
 * query offset") ---- */

/* A value in [lo, hi] from the bytes while they last, then from *s (so an
 * input whose bytes ran out still varies with its seed). */
static int32_t pick(fz *f, uint64_t *s, int32_t lo, int32_t hi) {
    if (f->n > 0) return fz_range(f, lo, hi);
    return hi <= lo ? lo : (int32_t)((int64_t)lo + (int64_t)(fz_mix(s) % (uint64_t)(hi - lo + 1)));
}

/* The forward's effective K tile width for block_k bk (0 = the default). */
static int32_t cols_eff_of(const ta_problem *p, int32_t bk) {
    const int32_t pk = p->conv_k > 0 ? (p->conv_k - 1) / 2 : 0;
    if (bk == 0) {
        int32_t bq;
        ta_tiling_default_blocks(p->conv_q, p->conv_k, &bq, &bk);
    }
    return bk - 2 * pk;
}

/* Key shares as a ring's devices hold them: the keys cut on the forward's K
 * tiles (B_c, from a block_k drawn here) where split-K with N = 2-3 parts cuts
 * them (part s: the tiles [floor(n s / N), floor(n (s+1) / N)) of the n below
 * the key length), each share [k0, k1) one ta_fwd over the halo'd keys
 * [k0 - E, k1 + R) of views of k and v (E: one or two whole tiles, at least
 * one with the conv and k0 > 0, at most k0; R: at least P_k, at most the
 * keys past k1), key_begin = E, key_end = E + (k1 - k0) (0 when that is the
 * share's S_k, sometimes), every query row at its place in the whole problem
 * (q_offset = S_k - k1 - R: row r at key position r + S_k - S_q), seqlens_k
 * moved with the view. Checked: every share REF == CPU (CPU sometimes as
 * caller-run tasks); ta_merge of the shares in key order REF == CPU; one ta_fwd
 * over every key with num_splits = N REF == CPU and, in f32, == the merged
 * shares bit for bit (in f16/bf16 the shares' o are rounded before the merge).
 * With seqlens_k the shares follow the cut of a key length all batch entries
 * share; entries of different lengths: the check runs without seqlens_k. */
static void check_key_shares(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                             uint64_t seed, size_t eb) {
    const int32_t pk = p->conv_k > 0 ? (p->conv_k - 1) / 2 : 0;
    const int32_t bk_min = 4 * pk + 1 > TA_BLOCK_MIN ? 4 * pk + 1 : TA_BLOCK_MIN;
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t o_bytes = n_q * (size_t)p->head_dim_v * eb, lse_bytes = n_q * 4;
    const ta_strides sk = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim),
                     sv = full_strides(bshd, p->heads_kv, p->seq_k, p->head_dim_v);
    const int32_t *sl = in->b[B_SEQL].raw ? (const int32_t *)fz_data(&in->b[B_SEQL]) : NULL;
    uint64_t s = seed ^ UINT64_C(0x6b657973686172ee);
    ta_problem pf = *p;
    fz_buf parts_o[2], parts_l[2], lens;
    fwd_out full[2], merged[2];
    ta_merge_args ma;
    int32_t key_len = p->seq_k, ce, n, n_sh, cut[4], i, b, be;
    int32_t *ln;
    if (sl) { /* one key length for every entry, or none */
        for (b = 1; b < p->batch && sl[b] == sl[0]; ++b) {
        }
        if (b == p->batch)
            key_len = sl[0];
        else
            sl = NULL;
    }
    if (key_len < 2 || bk_min - 2 * pk > key_len - 1) return; /* fewer than two tiles */
    ce = pick(f, &s, bk_min - 2 * pk, key_len - 1);
    n = (key_len - 1) / ce + 1;
    n_sh = pick(f, &s, 2, 3);
    if (n_sh > n) n_sh = n;
    pf.block_k = ce + 2 * pk;
    pf.num_splits = n_sh;
    for (i = 0; i <= n_sh; ++i) { /* split-K's cut, in keys */
        const int32_t t = (int32_t)((int64_t)n * i / n_sh);
        cut[i] = i == n_sh || t * ce > p->seq_k ? p->seq_k : t * ce;
    }
    for (be = 0; be < 2; ++be) {
        memset(fz_buf_alloc(&parts_o[be], (size_t)n_sh * o_bytes), 0xFF, (size_t)n_sh * o_bytes);
        memset(fz_buf_alloc(&parts_l[be], (size_t)n_sh * lse_bytes), 0xFF,
               (size_t)n_sh * lse_bytes);
    }
    ln = (int32_t *)fz_buf_alloc(&lens, 2 * 4);
    for (i = 0; i < n_sh; ++i) {
        const int32_t k0 = cut[i], k1 = cut[i + 1];
        const int32_t e_lo = p->conv_q > 0 && k0 > 0 ? 1 : 0, e_hi = k0 / ce < 2 ? k0 / ce : 2;
        const int32_t e = ce * pick(f, &s, e_lo, e_hi);
        const int32_t r_lo = pk < p->seq_k - k1 ? pk : p->seq_k - k1;
        const int32_t r = pick(f, &s, r_lo, r_lo + 2 < p->seq_k - k1 ? r_lo + 2 : p->seq_k - k1);
        ta_problem ps = *p;
        ta_fwd_args fa = fwd_args(p, in, bshd);
        FZ_CHECK(k0 < k1 && k0 % ce == 0 && e % ce == 0 && e <= k0, "share %d: [%d, %d), E %d",
                 (int)i, (int)k0, (int)k1, (int)e);
        ps.block_k = pf.block_k;
        ps.seq_k = e + (k1 - k0) + r;
        ps.key_begin = e;
        ps.key_end = e + (k1 - k0);
        if (ps.key_end == ps.seq_k && pick(f, &s, 0, 1)) ps.key_end = 0;
        ps.q_offset = p->seq_k - k1 - r;
        fa.k = (const char *)fz_data(&in->b[B_K]) + (size_t)(k0 - e) * (size_t)sk.seq * eb;
        fa.v = (const char *)fz_data(&in->b[B_V]) + (size_t)(k0 - e) * (size_t)sv.seq * eb;
        fa.k_strides = sk;
        fa.v_strides = sv;
        memset(&fa.o_strides, 0, sizeof fa.o_strides); /* parts: contiguous */
        fa.seqlens_k = NULL;
        if (sl) { /* the view's keys of each entry */
            for (b = 0; b < p->batch; ++b) {
                const int32_t l = sl[b] - (k0 - e);
                ln[b] = l < 0 ? 0 : l > ps.seq_k ? ps.seq_k : l;
            }
            fa.seqlens_k = ln;
        }
        for (be = 0; be < 2; ++be) {
            const int tasks = be == 1 && (fz_mix(&s) % 3u) == 0;
            ta_status st;
            fa.o = (char *)fz_data(&parts_o[be]) + (size_t)i * o_bytes;
            fa.lse = (float *)fz_data(&parts_l[be]) + (size_t)i * n_q;
            st = run_fwd(&ps, (ta_backend)be, &fa, tasks, &s);
            FZ_CHECK(st == TA_OK,
                     "share %d of %d, keys [%d, %d) as [%d, %d) of %d (q_offset %d, B_c %d) "
                     "refused on backend %d%s: %s",
                     (int)i, (int)n_sh, (int)k0, (int)k1, (int)ps.key_begin, (int)(e + (k1 - k0)),
                     (int)ps.seq_k, (int)ps.q_offset, (int)ce, be, tasks ? " (tasks)" : "",
                     ta_status_string(st));
        }
        FZ_CHECK(memcmp((char *)fz_data(&parts_o[0]) + (size_t)i * o_bytes,
                        (char *)fz_data(&parts_o[1]) + (size_t)i * o_bytes, o_bytes) == 0 &&
                     memcmp((float *)fz_data(&parts_l[0]) + (size_t)i * n_q,
                            (float *)fz_data(&parts_l[1]) + (size_t)i * n_q, lse_bytes) == 0,
                 "share %d of %d, keys [%d, %d) (E %d, R %d, B_c %d): REF and CPU differ", (int)i,
                 (int)n_sh, (int)k0, (int)k1, (int)e, (int)r, (int)ce);
    }
    /* the shares merged in key order; one forward with N splits */
    memset(&ma, 0, sizeof ma);
    ma.num_parts = n_sh;
    ma.o_strides = strides_of(bshd, p->heads_q, p->seq_q, p->head_dim_v);
    for (be = 0; be < 2; ++be) {
        ta_fwd_args fa = fwd_args(p, in, bshd);
        ta_status st;
        fwd_out_alloc(&merged[be], o_bytes, lse_bytes);
        ma.o_parts = fz_data(&parts_o[be]);
        ma.lse_parts = (const float *)fz_data(&parts_l[be]);
        ma.o = fz_data(&merged[be].o);
        ma.lse = (float *)fz_data(&merged[be].lse);
        FZ_CHECK(ta_merge(p, (ta_backend)be, &ma, NULL) == TA_OK, "merge of the shares refused");
        fwd_out_alloc(&full[be], o_bytes, lse_bytes);
        fa.o = fz_data(&full[be].o);
        fa.lse = (float *)fz_data(&full[be].lse);
        fa.seqlens_k = sl;
        st = run_fwd(&pf, (ta_backend)be, &fa, 0, &s);
        FZ_CHECK(st == TA_OK, "one forward with %d splits (block_k %d) refused on %d: %s",
                 (int)n_sh, (int)pf.block_k, be, ta_status_string(st));
    }
    fwd_out_same(&merged[0], &merged[1], "the key shares merged, REF and CPU");
    fwd_out_same(&full[0], &full[1], "the forward the key shares are cut from, REF and CPU");
    if (p->dtype == TA_F32) {
        char what[160];
        snprintf(what, sizeof what,
                 "key shares cut at %d%s%.0d (of %d keys; B_c %d, key length %d%s) merged vs one "
                 "forward with %d splits",
                 (int)cut[1], n_sh == 3 ? ", " : "", n_sh == 3 ? (int)cut[2] : 0, (int)p->seq_k,
                 (int)ce, (int)key_len, sl ? ", seqlens_k" : "", (int)n_sh);
        fwd_out_same(&merged[0], &full[0], what);
    }
    for (be = 0; be < 2; ++be) {
        FZ_CHECK(fz_guards_intact(&parts_o[be]) && fz_guards_intact(&parts_l[be]),
                 "a share wrote past its part");
        fz_buf_free(&parts_o[be]);
        fz_buf_free(&parts_l[be]);
        fwd_out_free(&merged[be]);
        fwd_out_free(&full[be]);
    }
    FZ_CHECK(fz_guards_intact(&lens), "a share wrote past its key lengths");
    fz_buf_free(&lens);
}

/* A third of the problems: one forward with a random q_offset (small, or at
 * the bound |S_k - S_q + q_offset| = TA_SEQ_MAX) and a key range on the K
 * tiles of the problem's own block_k (key_end on a tile boundary, S_k or 0),
 * num_splits 0, 2, 3 or TA_SPLITS_AUTO, seqlens_k as drawn: REF == CPU (or
 * caller-run tasks) bit for bit; the whole range with q_offset 0 spelled out
 * == the plain forward. No oracle for the values. */
static void check_key_range_fast(fz *f, const ta_problem *p, const bufs *in, const ta_strides *bshd,
                                 const bufs *ref, uint64_t seed, size_t eb) {
    static const int32_t splits[] = {0, 2, 3, TA_SPLITS_AUTO};
    const size_t n_q = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    const size_t o_bytes = n_q * (size_t)p->head_dim_v * eb, lse_bytes = n_q * 4;
    const int32_t ce = cols_eff_of(p, p->block_k), n = (p->seq_k - 1) / ce + 1;
    const int64_t base = (int64_t)p->seq_k - p->seq_q;
    uint64_t s = seed ^ UINT64_C(0x71306f6666736574);
    ta_problem pr = *p;
    ta_fwd_args fa = fwd_args(p, in, bshd);
    fwd_out r[2];
    int32_t kb, ke, how, be;
    int tasks;
    if (pick(f, &s, 0, 2) != 0) return;
    kb = pick(f, &s, 0, n - 1);
    ke = pick(f, &s, kb + 1, n + 1); /* n: S_k, n + 1: 0 */
    pr.key_begin = kb * ce;
    pr.key_end = ke == n + 1 ? 0 : ke == n ? p->seq_k : ke * ce;
    how = pick(f, &s, 0, 5);
    pr.q_offset = how == 0   ? 0
                  : how == 1 ? (int32_t)((int64_t)TA_SEQ_MAX - base)
                  : how == 2 ? (int32_t)(-(int64_t)TA_SEQ_MAX - base)
                             : pick(f, &s, -2 * p->seq_k - 2, 2 * p->seq_k + 2);
    pr.num_splits = splits[pick(f, &s, 0, 3)];
    tasks = (int)(fz_mix(&s) & 1u);
    for (be = 0; be < 2; ++be) {
        ta_status st;
        fwd_out_alloc(&r[be], o_bytes, lse_bytes);
        fa.o = fz_data(&r[be].o);
        fa.lse = (float *)fz_data(&r[be].lse);
        st = run_fwd(&pr, (ta_backend)be, &fa, be == 1 && tasks, &s);
        FZ_CHECK(st == TA_OK,
                 "keys [%d, %d) of %d (B_c %d), q_offset %d, %d splits refused on %d%s: %s",
                 (int)pr.key_begin, (int)pr.key_end, (int)p->seq_k, (int)ce, (int)pr.q_offset,
                 (int)pr.num_splits, be, be == 1 && tasks ? " (tasks)" : "", ta_status_string(st));
    }
    {
        char what[160];
        snprintf(what, sizeof what, "keys [%d, %d) of %d (B_c %d), q_offset %d, %d splits%s",
                 (int)pr.key_begin, (int)pr.key_end, (int)p->seq_k, (int)ce, (int)pr.q_offset,
                 (int)pr.num_splits, tasks ? " (CPU tasks)" : "");
        fwd_out_same(&r[0], &r[1], what);
    }
    if (pr.key_begin == 0 && (pr.key_end == 0 || pr.key_end == p->seq_k) && pr.q_offset == 0 &&
        pr.num_splits == 0)
        FZ_CHECK(memcmp(fz_data(&r[0].o), fz_data(&ref->b[B_O]), o_bytes) == 0 &&
                     memcmp(fz_data(&r[0].lse), fz_data(&ref->b[B_LSE]), lse_bytes) == 0,
                 "key_end %d (every key) is not the plain forward", (int)pr.key_end);
    fwd_out_free(&r[0]);
    fwd_out_free(&r[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    ta_problem p;
    ta_strides bshd;
    bufs in, pristine, ref, cpu, tsk;
    ta_task_plan tp[2];
    size_t ws_f[2] = {0, 0}, ws_b[2] = {0, 0}, ws_bytes, eb, n_q, n_k, n_conv;
    ta_status st[3][2], sq[2][2];
    uint64_t seed;
    int be, i, bad;
    make_problem(&f, &p, &bshd);
    seed = fz_bits(&f, 8);
    for (be = 0; be < 2; ++be) {
        sq[be][0] = ta_fwd_workspace_size(&p, (ta_backend)be, &ws_f[be]);
        sq[be][1] = ta_bwd_workspace_size(&p, (ta_backend)be, &ws_b[be]);
    }
    FZ_CHECK(sq[0][0] == sq[1][0] && sq[0][1] == sq[1][1], "REF and CPU size queries disagree");
    if (sq[0][0] != TA_OK) return 0; /* a refused geometry (blocks too small for the conv) */
    eb = p.dtype == TA_F32 ? 4u : 2u;
    n_q = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_k = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k;
    n_conv = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k;
    memset(&in, 0, sizeof in);
    fill(&seed, fz_buf_alloc(&in.b[B_Q], n_q * (size_t)p.head_dim * eb), p.dtype,
         n_q * (size_t)p.head_dim);
    fill(&seed, fz_buf_alloc(&in.b[B_K], n_k * (size_t)p.head_dim * eb), p.dtype,
         n_k * (size_t)p.head_dim);
    fill(&seed, fz_buf_alloc(&in.b[B_V], n_k * (size_t)p.head_dim_v * eb), p.dtype,
         n_k * (size_t)p.head_dim_v);
    fill(&seed, fz_buf_alloc(&in.b[B_DO], n_q * (size_t)p.head_dim_v * eb), p.dtype,
         n_q * (size_t)p.head_dim_v);
    fill(&seed, fz_buf_alloc(&in.b[B_CONV], n_conv * 4 + 4), TA_F32, n_conv + 1);
    if (fz_range(&f, 0, 1)) {
        int32_t *sl = (int32_t *)fz_buf_alloc(&in.b[B_SEQL], (size_t)p.batch * 4);
        for (i = 0; i < p.batch; ++i)
            sl[i] = fz_range(&f, 0, p.seq_k);
    }
    memset(&pristine, 0, sizeof pristine);
    for (i = 0; i < B_N_IN; ++i)
        if (in.b[i].raw) {
            memcpy(fz_buf_alloc(&pristine.b[i], in.b[i].bytes), fz_data(&in.b[i]), in.b[i].bytes);
        }
    ws_bytes = ws_f[0] > ws_b[0] ? ws_f[0] : ws_b[0];
    run_backend(&p, TA_BACKEND_REF, &in, &bshd, NULL, NULL, ws_bytes, seed, NULL, &ref, eb, NULL,
                &st[0][0], &st[0][1]);
    ws_bytes = ws_f[1] > ws_b[1] ? ws_f[1] : ws_b[1];
    /* the CPU backward takes REF's o and lse, as a training step would take its forward's */
    run_backend(&p, TA_BACKEND_CPU, &in, &bshd, fz_data(&ref.b[B_O]),
                (const float *)fz_data(&ref.b[B_LSE]), ws_bytes, ~seed, NULL, &cpu, eb, NULL,
                &st[1][0], &st[1][1]);
    /* the same as caller-run tasks (fz_small_problem leaves num_splits 0;
     * check_fwd_variants runs split-K forwards as tasks) */
    FZ_CHECK(ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp[0]) == TA_OK &&
                 ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp[1]) == TA_OK,
             "task plans refused a problem ta_fwd accepts");
    ws_bytes = tp[0].shared_bytes > tp[1].shared_bytes ? tp[0].shared_bytes : tp[1].shared_bytes;
    run_backend(&p, TA_BACKEND_CPU, &in, &bshd, fz_data(&ref.b[B_O]),
                (const float *)fz_data(&ref.b[B_LSE]), ws_bytes, seed ^ 0x5a5a5a5a5a5a5a5aull, tp,
                &tsk, eb, NULL, &st[2][0], &st[2][1]);
    FZ_CHECK(st[0][0] == TA_OK && st[1][0] == TA_OK, "forward refused: REF %d, CPU %d",
             (int)st[0][0], (int)st[1][0]);
    FZ_CHECK(st[0][1] == TA_OK && st[1][1] == TA_OK, "backward refused: REF %d, CPU %d",
             (int)st[0][1], (int)st[1][1]);
    FZ_CHECK(st[2][0] == TA_OK && st[2][1] == TA_OK, "caller-run tasks refused: fwd %d, bwd %d",
             (int)st[2][0], (int)st[2][1]);
    compare_all(&ref, &cpu, p.conv_q > 0, "REF and CPU");
    compare_all(&cpu, &tsk, p.conv_q > 0, "CPU calls and caller-run tasks");
    /* the ranges' backward: SDPA only (no conv); a window only with the causal
     * mask (pair_problem) */
    if (p.conv_q == 0 && (!(p.flags & TA_WINDOW) || (p.flags & TA_CAUSAL)))
        check_ranges(&f, &p, &in, &bshd, &ref, seed, eb);
    check_fwd_variants(&f, &p, &in, &bshd, &ref, seed, eb);
    if (p.conv_q > 0) check_chunks(&f, &p, &in, &bshd, &ref, seed, eb);
    check_rope(&f, &p, &in, &bshd, seed, eb);
    check_key_shares(&f, &p, &in, &bshd, seed, eb);
    check_key_range_fast(&f, &p, &in, &bshd, &ref, seed, eb);
    FZ_CHECK((bad = all_guards(&ref)) < 0, "REF wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&cpu)) < 0, "CPU wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&tsk)) < 0, "caller-run tasks wrote past buffer %d", bad);
    FZ_CHECK((bad = all_guards(&in)) < 0, "an input's guard was written (%d)", bad);
    for (i = 0; i < B_N_IN; ++i)
        FZ_CHECK(!in.b[i].raw ||
                     memcmp(fz_data(&in.b[i]), fz_data(&pristine.b[i]), in.b[i].bytes) == 0,
                 "input %d changed", i);
    bufs_free(&in);
    bufs_free(&pristine);
    bufs_free(&ref);
    bufs_free(&cpu);
    bufs_free(&tsk);
    return 0;
}
