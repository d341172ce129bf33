/*
 * libFuzzer harness: validation, the size queries and the explanations.
 *
 * Each input builds one call: a small valid problem with a few fields replaced
 * by edge values, every pointer in one static arena (its own slot, NULL, or an
 * offset the bytes choose: overlapping, misaligned, past the arena), strides,
 * a trace, a workspace and a stream from the bytes. For each entry point:
 *   - ta_explain_* returns what the entry point returns, and its message is
 *     well formed (names a check, ends with the status);
 *   - a refused call writes nothing: the arena, the bytes out-parameter and the
 *     trace struct are unchanged;
 *   - an accepted call is checked independently (non-NULL, aligned, outputs
 *     overlapping nothing, workspace large enough, computed from this file's own
 *     extents) and, when every buffer lies in the arena, run on REF or CPU: it
 *     writes nothing outside its outputs, its trace entries and its workspace.
 * About one backward in five is accumulating (args.accumulate = 1, the lo
 * words placed like the other pointers; docs/api.md, "Backward over key and
 * query ranges"), one in sixteen has an accumulate value neither 0 nor 1.
 * Now and then q_offset, key_begin or key_end is one of the replaced fields.
 * Then per input one valid accumulating ta_bwd and one ta_bwd_finish with one
 * thing broken must give the documented status (check_accumulate_rules), and
 * one problem with q_offset, key_begin, key_end set, valid or broken (off the
 * K tiles, out of bounds, q_offset past TA_SEQ_MAX, two at once, with
 * latent_dim or the band), must give the documented status from the size
 * queries, the task plans, ta_fwd and ta_bwd, writing nothing when refused
 * (check_key_rules; docs/api.md, "Key ranges and the query offset").
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "tileattn.h"
#include "tileattn_tiling.h"

#define ARENA 65536
static _Alignas(64) unsigned char g_arena[ARENA];
static unsigned char g_before[ARENA];

/* ---- The problem: valid and small, then up to three fields replaced. ---- */
static void make_problem(fz *f, ta_problem *p) {
    int n, i;
    fz_small_problem(f, p, 16, 8);
    n = fz_range(f, 0, 3);
    for (i = 0; i < n; ++i) {
        const int32_t v = fz_size(f, -300, 300);
        switch (fz_range(f, 0, 19)) {
        case 0: p->batch = v; break;
        case 1: p->heads_q = v; break;
        case 2: p->heads_kv = v; break;
        case 3: p->seq_q = v; break;
        case 4: p->seq_k = v; break;
        case 5: p->head_dim = v; break;
        case 6: p->head_dim_v = v; break;
        case 7: p->dtype = (ta_dtype)v; break;
        case 8: p->precision = (ta_precision)v; break;
        case 9: p->flags = (uint32_t)v; break;
        case 10: {
            static const float scales[] = {0.0f, 1.0f, -2.5f, 1e30f, 1e-30f, 3e38f};
            const int32_t k = fz_range(f, 0, 8);
            p->scale = k < 6    ? scales[k]
                       : k == 6 ? (float)NAN
                       : k == 7 ? (float)INFINITY
                                : -(float)INFINITY;
            break;
        }
        case 11: p->conv_q = v; break;
        case 12: p->conv_k = v; break;
        case 13: p->block_q = v; break;
        case 14: p->block_k = v; break;
        case 15: p->num_threads = v; break;
        case 16: p->window_left = v; break;
        case 17: p->window_right = v; break;
        case 18: p->q_offset = v; break;
        case 19: *(fz_range(f, 0, 1) ? &p->key_begin : &p->key_end) = v; break;
        default: break;
        }
    }
}

/* ---- Tensors of a call: extents from this file's own arithmetic. ---- */
enum {
    T_Q,
    T_K,
    T_V,
    T_O,
    T_DO,
    T_LSE,
    T_CONV,
    T_SEQL,
    T_DQ,
    T_DK,
    T_DV,
    T_DCONV,
    T_WS,
    T_DQL, /* the lo words of an accumulating backward */
    T_DKL,
    T_DVL,
    T_N
};
typedef struct tensor {
    int64_t n_b, n_h, n_s, dim; /* [n_b, n_h, n_s, dim]; lse: dim 1; conv: [1,H,cq,ck] */
    int64_t eb;                 /* element bytes */
    ta_strides st;              /* the call's (zero = contiguous) */
    void *ptr;
    int64_t extent; /* bytes from ptr to one past the last element; -1 = unknown/huge */
} tensor;

static int64_t extent_of(const tensor *t) {
    int64_t sb = t->st.batch, sh = t->st.head, ss = t->st.seq, last;
    if (t->n_b < 1 || t->n_h < 1 || t->n_s < 1 || t->dim < 1) return -1;
    if (t->n_b > 4096 || t->n_h > 4096 || t->n_s > 4096 || t->dim > 4096) return -1;
    if (sb == 0 && sh == 0 && ss == 0) {
        ss = t->dim;
        sh = t->n_s * ss;
        sb = t->n_h * sh;
    }
    if (sb < 0 || sh < 0 || ss < 0 || sb > ARENA || sh > ARENA || ss > ARENA) return -1;
    last = (t->n_b - 1) * sb + (t->n_h - 1) * sh + (t->n_s - 1) * ss + t->dim;
    return last * t->eb;
}

/* A pointer: NULL, its slot, or an offset the bytes choose (may be misaligned,
 * overlap another buffer, or reach past the arena). */
static void *place(fz *f, size_t *cursor, int64_t extent) {
    const int32_t how = fz_range(f, 0, 15);
    if (how == 0) return NULL;
    if (how == 1) return g_arena + fz_range(f, 0, ARENA - 1);
    if (how == 2) return g_arena + (*cursor > 64 ? *cursor - 64 : 0); /* into the last slot */
    if (extent < 0 || *cursor + (size_t)extent + 128 > ARENA) return g_arena + ARENA - 256;
    {
        unsigned char *p = g_arena + *cursor;
        *cursor = (*cursor + (size_t)extent + 64 + 63) & ~(size_t)63;
        return p;
    }
}

static ta_strides make_strides(fz *f) {
    ta_strides s = {0, 0, 0};
    if (fz_range(f, 0, 7) == 0) {
        s.batch = fz_size(f, 0, 4096);
        s.head = fz_size(f, 0, 512);
        s.seq = fz_size(f, 0, 64);
    }
    return s;
}

static int64_t ws_need(const ta_problem *p, ta_backend be, int bwd) {
    size_t n = 0;
    const ta_status st = bwd ? ta_bwd_workspace_size(p, be, &n) : ta_fwd_workspace_size(p, be, &n);
    return st == TA_OK ? (int64_t)n : -1;
}

/* 1 if [a, a+na) and [b, b+nb) meet (both non-empty). */
static int meet(const void *a, int64_t na, const void *b, int64_t nb) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    if (!a || !b || na <= 0 || nb <= 0) return 0;
    return pa < pb + (uint64_t)nb && pb < pa + (uint64_t)na;
}
static int aligned(const void *p, int64_t a) { return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0; }
static int in_arena(const void *p, int64_t n) {
    return p && n >= 0 && (const unsigned char *)p >= g_arena &&
           (const unsigned char *)p + n <= g_arena + ARENA;
}

typedef struct call {
    ta_problem p;
    ta_backend be;
    tensor t[T_N];
    ta_trace trace, *tr;
    size_t ws_bytes;
    void *stream;
    int32_t acc; /* ta_bwd_args.accumulate */
} call;

static void set_tensor(tensor *t, int64_t n_b, int64_t n_h, int64_t n_s, int64_t dim, int64_t eb) {
    t->n_b = n_b;
    t->n_h = n_h;
    t->n_s = n_s;
    t->dim = dim;
    t->eb = eb;
}

/* acc (from the seed's first byte, so that the bytes keep their meaning):
 * TA_BWD_ACCUMULATE about one call in five, a value neither 0 nor 1 one in
 * sixteen, else 0. With TA_BWD_ACCUMULATE dq, dk, dv and their lo words are
 * f32 (their extents in f32 elements). */
static void make_call(fz *f, call *c, uint64_t seed) {
    static const int32_t bad_acc[] = {2, -1, 3, 256, INT32_MAX, INT32_MIN};
    const uint32_t am = (uint32_t)(seed >> 56);
    const ta_problem *p = &c->p;
    const int64_t eb = p->dtype == TA_F32 ? 4 : 2;
    size_t cursor = 64;
    int i;
    static int dummy_stream;
    c->be = (ta_backend)(fz_range(f, 0, 15) == 0 ? fz_size(f, -2, 4) : fz_range(f, 0, 1));
    memset(c->t, 0, sizeof c->t);
    set_tensor(&c->t[T_Q], p->batch, p->heads_q, p->seq_q, p->head_dim, eb);
    set_tensor(&c->t[T_DQ], p->batch, p->heads_q, p->seq_q, p->head_dim, eb);
    set_tensor(&c->t[T_K], p->batch, p->heads_kv, p->seq_k, p->head_dim, eb);
    set_tensor(&c->t[T_DK], p->batch, p->heads_kv, p->seq_k, p->head_dim, eb);
    set_tensor(&c->t[T_V], p->batch, p->heads_kv, p->seq_k, p->head_dim_v, eb);
    set_tensor(&c->t[T_DV], p->batch, p->heads_kv, p->seq_k, p->head_dim_v, eb);
    set_tensor(&c->t[T_O], p->batch, p->heads_q, p->seq_q, p->head_dim_v, eb);
    set_tensor(&c->t[T_DO], p->batch, p->heads_q, p->seq_q, p->head_dim_v, eb);
    set_tensor(&c->t[T_LSE], p->batch, p->heads_q, p->seq_q, 1, 4);
    set_tensor(&c->t[T_CONV], 1, p->heads_q, p->conv_q, p->conv_k, 4);
    set_tensor(&c->t[T_DCONV], 1, p->heads_q, p->conv_q, p->conv_k, 4);
    set_tensor(&c->t[T_SEQL], 1, 1, 1, p->batch, 4);
    c->acc = am < 48 ? TA_BWD_ACCUMULATE : am < 64 ? bad_acc[am % 6] : 0;
    if (c->acc == TA_BWD_ACCUMULATE) c->t[T_DQ].eb = c->t[T_DK].eb = c->t[T_DV].eb = 4;
    for (i = 0; i < T_WS; ++i) {
        if (i == T_Q || i == T_K || i == T_V || i == T_O || i == T_DO || i == T_DQ || i == T_DK ||
            i == T_DV)
            c->t[i].st = make_strides(f);
        c->t[i].extent = extent_of(&c->t[i]);
        c->t[i].ptr = place(f, &cursor, c->t[i].extent);
    }
    if (fz_range(f, 0, 1)) c->t[T_SEQL].ptr = NULL; /* optional: often absent */
    if (c->t[T_SEQL].ptr && in_arena(c->t[T_SEQL].ptr, c->t[T_SEQL].extent) &&
        ((uintptr_t)c->t[T_SEQL].ptr & 3u) == 0) {
        int32_t *s = (int32_t *)c->t[T_SEQL].ptr;
        for (i = 0; i < p->batch && i < 4096; ++i)
            s[i] = fz_range(f, 0, 7) == 0 ? fz_size(f, -2, 20) : fz_range(f, 0, p->seq_k);
    }
    /* the workspace: its slot (the larger need of both passes), or elsewhere */
    {
        const int64_t need_f = ws_need(p, TA_BACKEND_REF, 0),
                      need_b = ws_need(p, TA_BACKEND_REF, 1);
        const int64_t need = need_f > need_b ? need_f : need_b;
        c->t[T_WS].eb = 1;
        c->t[T_WS].extent = need;
        c->t[T_WS].ptr = place(f, &cursor, need);
        c->ws_bytes = need >= 0 ? (size_t)need : 0;
        switch (fz_range(f, 0, 7)) {
        case 0: c->ws_bytes = (size_t)fz_size(f, 0, 100000); break;
        case 1: c->ws_bytes = c->ws_bytes > 0 ? c->ws_bytes - 1 : 0; break;
        case 2: c->ws_bytes = SIZE_MAX; break;
        default: break;
        }
    }
    /* the trace: none, or entries somewhere with a capacity */
    c->tr = NULL;
    if (fz_range(f, 0, 2) == 0) {
        static const size_t caps[] = {0, 1, 2, 4, 64, SIZE_MAX / 2, SIZE_MAX};
        const size_t cap = caps[fz_range(f, 0, 6)];
        c->trace.capacity = cap;
        c->trace.count = 777;
        c->trace.entries = (ta_trace_entry *)place(
            f, &cursor, cap <= 64 ? (int64_t)(cap * sizeof(ta_trace_entry)) : -1);
        c->tr = &c->trace;
        /* the struct itself inside o (when o is aligned for it: a misaligned struct
         * pointer would be the caller's undefined behaviour, not the library's) */
        if (fz_range(f, 0, 15) == 0 && c->t[T_O].ptr && aligned(c->t[T_O].ptr, 8) &&
            in_arena(c->t[T_O].ptr, (int64_t)sizeof(ta_trace))) {
            c->tr = (ta_trace *)c->t[T_O].ptr;
            memcpy(c->tr, &c->trace, sizeof c->trace); /* a valid struct, in the wrong place */
        }
    }
    c->stream = fz_range(f, 0, 15) == 0 ? (void *)&dummy_stream : NULL;
    /* the lo words last (the bytes before keep their meaning) */
    for (i = T_DQL; i <= T_DVL && c->acc; ++i) {
        const tensor *hi = &c->t[T_DQ + (i - T_DQL)];
        set_tensor(&c->t[i], hi->n_b, hi->n_h, hi->n_s, hi->dim, hi->eb);
        c->t[i].st = hi->st;
        c->t[i].extent = extent_of(&c->t[i]);
        c->t[i].ptr = place(f, &cursor, c->t[i].extent);
    }
}

static void fill_args(const call *c, ta_fwd_args *fa, ta_bwd_args *ba) {
    memset(fa, 0, sizeof *fa);
    memset(ba, 0, sizeof *ba);
    fa->q = ba->q = c->t[T_Q].ptr;
    fa->k = ba->k = c->t[T_K].ptr;
    fa->v = ba->v = c->t[T_V].ptr;
    fa->conv_w = ba->conv_w = (const float *)c->t[T_CONV].ptr;
    fa->seqlens_k = ba->seqlens_k = (const int32_t *)c->t[T_SEQL].ptr;
    fa->o = c->t[T_O].ptr;
    fa->lse = (float *)c->t[T_LSE].ptr;
    fa->trace = ba->trace = c->tr;
    ba->o = c->t[T_O].ptr;
    ba->d_o = c->t[T_DO].ptr;
    ba->lse = (const float *)c->t[T_LSE].ptr;
    ba->dq = c->t[T_DQ].ptr;
    ba->dk = c->t[T_DK].ptr;
    ba->dv = c->t[T_DV].ptr;
    ba->dconv_w = (float *)c->t[T_DCONV].ptr;
    fa->q_strides = ba->q_strides = c->t[T_Q].st;
    fa->k_strides = ba->k_strides = c->t[T_K].st;
    fa->v_strides = ba->v_strides = c->t[T_V].st;
    fa->o_strides = ba->o_strides = c->t[T_O].st;
    ba->d_o_strides = c->t[T_DO].st;
    ba->dq_strides = c->t[T_DQ].st;
    ba->dk_strides = c->t[T_DK].st;
    ba->dv_strides = c->t[T_DV].st;
    ba->accumulate = c->acc;
    ba->dq_lo = (float *)c->t[T_DQL].ptr;
    ba->dk_lo = (float *)c->t[T_DKL].ptr;
    ba->dv_lo = (float *)c->t[T_DVL].ptr;
}

/* ---- An accepted call, checked from this file's extents. ---- */

/* Returns 1 if every buffer of the call lies in the arena (then it may run). */
static int check_accepted(const call *c, int bwd, size_t need) {
    const int conv = c->p.conv_q > 0;
    const int out_fwd[] = {T_O, T_LSE, -1}, out_bwd[] = {T_DQ, T_DK, T_DV, T_DCONV, -1};
    const int out_acc[] = {T_DQ, T_DK, T_DV, T_DCONV, T_DQL, T_DKL, T_DVL, -1};
    const int in_fwd[] = {T_Q, T_K, T_V, T_CONV, T_SEQL, -1};
    const int in_bwd[] = {T_Q, T_K, T_V, T_O, T_DO, T_LSE, T_CONV, T_SEQL, -1};
    const int *outs = !bwd ? out_fwd : c->acc ? out_acc : out_bwd, *ins = bwd ? in_bwd : in_fwd;
    const int64_t tr_bytes =
        c->tr ? (int64_t)(c->tr->capacity * sizeof(ta_trace_entry)) : 0; /* accepted: fits */
    int i, j, all_in = 1;
    FZ_CHECK(!bwd || c->acc == 0 || c->acc == TA_BWD_ACCUMULATE, "accepted accumulate = %d",
             (int)c->acc);
    /* with the conv the mode needs dconv_w_lo, which these calls never set */
    FZ_CHECK(!bwd || !c->acc || !conv, "accepted accumulate with the MTA conv, no dconv_w_lo");
    FZ_CHECK(c->ws_bytes >= need, "accepted a workspace of %zu < %zu bytes", c->ws_bytes, need);
    FZ_CHECK(need == 0 || (c->t[T_WS].ptr && aligned(c->t[T_WS].ptr, TA_WORKSPACE_ALIGN)),
             "accepted a NULL or misaligned workspace");
    for (i = 0; outs[i] >= 0; ++i) {
        const tensor *o = &c->t[outs[i]];
        if ((outs[i] == T_DCONV && !conv) || (outs[i] == T_LSE && !o->ptr && !bwd)) continue;
        FZ_CHECK(o->ptr && aligned(o->ptr, o->eb), "accepted output %d NULL or misaligned",
                 outs[i]);
        if (o->extent < 0) {
            all_in = 0;
            continue;
        }
        all_in &= in_arena(o->ptr, o->extent);
        for (j = 0; ins[j] >= 0; ++j) {
            const tensor *x = &c->t[ins[j]];
            if (ins[j] == T_CONV && !conv) continue;
            FZ_CHECK(!meet(o->ptr, o->extent, x->ptr, x->extent < 0 ? 1 : x->extent),
                     "accepted output %d overlapping input %d", outs[i], ins[j]);
        }
        for (j = 0; j < i; ++j)
            FZ_CHECK(!meet(o->ptr, o->extent, c->t[outs[j]].ptr, c->t[outs[j]].extent),
                     "accepted outputs %d and %d overlapping", outs[i], outs[j]);
        FZ_CHECK(!meet(o->ptr, o->extent, c->t[T_WS].ptr, (int64_t)need),
                 "accepted output %d overlapping the workspace", outs[i]);
        FZ_CHECK(!c->tr || !meet(o->ptr, o->extent, c->tr->entries, tr_bytes),
                 "accepted output %d overlapping the trace entries", outs[i]);
        FZ_CHECK(!c->tr || !meet(o->ptr, o->extent, c->tr, (int64_t)sizeof(ta_trace)),
                 "accepted output %d overlapping the trace struct", outs[i]);
    }
    for (j = 0; ins[j] >= 0; ++j) {
        const tensor *x = &c->t[ins[j]];
        if ((ins[j] == T_CONV && !conv) || !x->ptr) continue;
        FZ_CHECK(aligned(x->ptr, x->eb), "accepted input %d misaligned", ins[j]);
        if (x->extent < 0) all_in = 0;
        all_in &= in_arena(x->ptr, x->extent);
        FZ_CHECK(!c->tr || !meet(c->tr->entries, tr_bytes, x->ptr, x->extent),
                 "accepted trace entries overlapping input %d", ins[j]);
    }
    FZ_CHECK(!c->tr || !meet(c->tr->entries, tr_bytes, c->t[T_WS].ptr, (int64_t)need),
             "accepted trace entries overlapping the workspace");
    if (c->tr) all_in &= (tr_bytes == 0 || in_arena(c->tr->entries, tr_bytes));
    return all_in && (need == 0 || in_arena(c->t[T_WS].ptr, (int64_t)need));
}

/* After a call that ran: nothing outside its outputs, trace entries and workspace
 * moved (the bytes the call may write are copied back from before, then the
 * whole arena must equal its copy from before). */
static void check_writes(const call *c, int bwd, size_t need) {
    static unsigned char after[ARENA];
    const int out_fwd[] = {T_O, T_LSE, -1}, out_bwd[] = {T_DQ, T_DK, T_DV, T_DCONV, -1};
    const int out_acc[] = {T_DQ, T_DK, T_DV, T_DCONV, T_DQL, T_DKL, T_DVL, -1};
    const int *outs = !bwd ? out_fwd : c->acc ? out_acc : out_bwd;
    size_t i, k;
    memcpy(after, g_arena, ARENA);
#define MAY(ptr, n)                                                                                \
    do {                                                                                           \
        if ((ptr) && in_arena((ptr), (int64_t)(n))) {                                              \
            const size_t off_ = (size_t)((const unsigned char *)(ptr)-g_arena);                    \
            memcpy(after + off_, g_before + off_, (size_t)(n));                                    \
        }                                                                                          \
    } while (0)
    for (k = 0; outs[k] >= 0; ++k)
        if (c->t[outs[k]].extent > 0) MAY(c->t[outs[k]].ptr, c->t[outs[k]].extent);
    MAY(c->t[T_WS].ptr, need);
    if (c->tr) MAY(c->tr->entries, c->tr->capacity * sizeof(ta_trace_entry));
    if (c->tr) MAY(c->tr, sizeof(ta_trace));
#undef MAY
    if (memcmp(after, g_before, ARENA) == 0) return;
    for (i = 0; i < ARENA; ++i)
        FZ_CHECK(after[i] == g_before[i], "a call wrote arena byte %zu outside its outputs", i);
}

static void run_entry(call *c, int entry) {
    const int bwd = entry >= 2, query = (entry & 1) == 0;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_trace trace_before;
    char msg[200];
    size_t bytes = 0xC0FFEE, need = 0;
    ta_status st_x, st;
    fill_args(c, &fa, &ba);
    if (c->tr) memcpy(&trace_before, c->tr, sizeof trace_before);
    memcpy(g_before, g_arena, ARENA);
    if (query) {
        st_x = bwd ? ta_explain_bwd_workspace_size(&c->p, c->be, msg, sizeof msg)
                   : ta_explain_fwd_workspace_size(&c->p, c->be, msg, sizeof msg);
        st = bwd ? ta_bwd_workspace_size(&c->p, c->be, &bytes)
                 : ta_fwd_workspace_size(&c->p, c->be, &bytes);
        fz_check_message(msg, sizeof msg, st_x);
        FZ_CHECK(st == st_x, "size query %d, explained as %d: \"%s\"", (int)st, (int)st_x, msg);
        FZ_CHECK(st == TA_OK || bytes == 0xC0FFEE, "a refused size query wrote bytes");
        FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "a size query wrote the arena");
        return;
    }
    st_x = bwd ? ta_explain_bwd(&c->p, c->be, &ba, c->t[T_WS].ptr, c->ws_bytes, c->stream, msg,
                                sizeof msg)
               : ta_explain_fwd(&c->p, c->be, &fa, c->t[T_WS].ptr, c->ws_bytes, c->stream, msg,
                                sizeof msg);
    fz_check_message(msg, sizeof msg, st_x);
    FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "ta_explain wrote the arena");
    if (st_x != TA_OK) {
        st = bwd ? ta_bwd(&c->p, c->be, &ba, c->t[T_WS].ptr, c->ws_bytes, c->stream)
                 : ta_fwd(&c->p, c->be, &fa, c->t[T_WS].ptr, c->ws_bytes, c->stream);
        FZ_CHECK(st == st_x, "call %d, explained as %d: \"%s\"", (int)st, (int)st_x, msg);
        FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "a refused call wrote the arena (%s)", msg);
        FZ_CHECK(!c->tr || memcmp(&trace_before, c->tr, sizeof trace_before) == 0,
                 "a refused call wrote the trace struct");
        return;
    }
    if (bwd)
        FZ_CHECK(ta_bwd_workspace_size(&c->p, c->be, &need) == TA_OK, "size query refused");
    else
        FZ_CHECK(ta_fwd_workspace_size(&c->p, c->be, &need) == TA_OK, "size query refused");
    if (!check_accepted(c, bwd, need)) return;
    st = bwd ? ta_bwd(&c->p, c->be, &ba, c->t[T_WS].ptr, c->ws_bytes, c->stream)
             : ta_fwd(&c->p, c->be, &fa, c->t[T_WS].ptr, c->ws_bytes, c->stream);
    FZ_CHECK(st == TA_OK, "explained as ok, the call returned %d", (int)st);
    check_writes(c, bwd, need);
}

/* ---- The accumulating backward and ta_bwd_finish, status for status ---- */

/* The next 64-aligned slot of n bytes in the arena (a gap of 64 after it);
 * NULL when the arena is full. */
static unsigned char *slot(size_t *cursor, size_t n) {
    unsigned char *p = g_arena + *cursor;
    if (*cursor + n + 128 > ARENA) return NULL;
    *cursor = (*cursor + n + 64 + 63) & ~(size_t)63;
    return p;
}

/* After a call that returned st (expected want, explained as st_x with msg):
 * a refusal wrote nothing; an acceptance wrote only [out[i], out[i] + n[i]). */
static void check_status_and_writes(const char *what, int mut, ta_status st, ta_status st_x,
                                    ta_status want, const char *msg, void *const *out,
                                    const size_t *n, int n_out) {
    static unsigned char after[ARENA];
    int i;
    fz_check_message(msg, 200, st_x);
    FZ_CHECK(st == want && st_x == want,
             "%s, mutation %d: status %d, explained %d (\"%s\"), want %d", what, mut, (int)st,
             (int)st_x, msg, (int)want);
    memcpy(after, g_arena, ARENA);
    for (i = 0; st == TA_OK && i < n_out; ++i)
        if (out[i] && in_arena(out[i], (int64_t)n[i])) {
            const size_t off = (size_t)((unsigned char *)out[i] - g_arena);
            memcpy(after + off, g_before + off, n[i]);
        }
    FZ_CHECK(memcmp(after, g_before, ARENA) == 0, "%s, mutation %d (status %d): wrote outside %s",
             what, mut, (int)st, st == TA_OK ? "its outputs" : "nothing (refused)");
}

/* One valid accumulating backward (docs/api.md, "Backward over key and query
 * ranges") on a small problem drawn from seed, every buffer in its own arena
 * slot, then one thing broken: args.accumulate not 0 or 1 (TA_ERR_BAD_ARG), a
 * lo word NULL (TA_ERR_NULL_ARG), misaligned or overlapping an input, a hi
 * word or the workspace (TA_ERR_BAD_ARG; with the MTA conv dconv_w_lo is a
 * fourth lo word); the rotary stage (TA_ERR_UNSUPPORTED, before every pointer
 * check but the value's). Then
 * ta_bwd_finish likewise: a hi word without its gradient or the reverse, a
 * misaligned or overlapping buffer, a negative stride (TA_ERR_BAD_ARG), a
 * NULL problem or args (TA_ERR_NULL_ARG), rope (TA_ERR_UNSUPPORTED);
 * every (hi, gradient) pair NULL finishes nothing. Each status is ta_bwd's /
 * ta_bwd_finish's and its explanation's; a refusal writes nothing, an
 * accepted call (run on REF or CPU) only its outputs and workspace. */
static void check_accumulate_rules(uint64_t seed) {
    static const int32_t bad_acc[] = {2, -1, 3, 256, INT32_MAX, INT32_MIN};
    uint8_t bytes[64];
    fz g = {bytes, sizeof bytes};
    ta_problem p;
    ta_backend be;
    ta_bwd_args ba;
    ta_bwd_finish_args fa;
    size_t cursor = 64, need = 0, eb, n_q, n_k, n_hi[3], n_g[3], n_lse, n_conv;
    unsigned char *q, *k, *v, *o, *d_o, *lse, *conv, *dconv, *dconv_lo, *hi[3], *lo[3], *ws;
    void *outs[9];
    size_t out_n[9];
    char msg[200];
    ta_status want, st, st_x;
    int32_t mut, j, i, unsup;
    float **lo_of[4];
    for (i = 0; i < (int32_t)sizeof bytes; i += 8) {
        const uint64_t r = fz_mix(&seed);
        memcpy(bytes + i, &r, 8);
    }
    fz_small_problem(&g, &p, 16, 8);
    if (!p.conv_q && p.head_dim >= 2 && fz_range(&g, 0, 3) == 0) {
        p.rope = fz_range(&g, TA_ROPE_INTERLEAVED, TA_ROPE_HALF);
        p.rope_pairs = 1;
        p.rope_rows = 64;
    }
    be = (ta_backend)fz_range(&g, TA_BACKEND_REF, TA_BACKEND_CPU);
    if (ta_bwd_workspace_size(&p, be, &need) != TA_OK) return; /* a refused geometry */
    unsup = p.rope != 0;
    eb = p.dtype == TA_F32 ? 4u : 2u;
    n_q = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_k = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k;
    n_hi[0] = n_q * (size_t)p.head_dim;
    n_hi[1] = n_k * (size_t)p.head_dim;
    n_hi[2] = n_k * (size_t)p.head_dim_v;
    n_lse = n_q * 4;
    n_conv = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k * 4;
    memset(g_arena, 0x3F, ARENA); /* finite in every dtype */
    q = slot(&cursor, n_hi[0] * eb);
    k = slot(&cursor, n_hi[1] * eb);
    v = slot(&cursor, n_hi[2] * eb);
    o = slot(&cursor, n_q * (size_t)p.head_dim_v * eb);
    d_o = slot(&cursor, n_q * (size_t)p.head_dim_v * eb);
    lse = slot(&cursor, n_lse);
    conv = slot(&cursor, n_conv);
    dconv = slot(&cursor, n_conv);
    dconv_lo = slot(&cursor, n_conv);
    for (j = 0; j < 3; ++j) {
        n_g[j] = n_hi[j] * eb;
        n_hi[j] *= 4;
        hi[j] = slot(&cursor, n_hi[j]);
        lo[j] = slot(&cursor, n_hi[j]);
    }
    ws = slot(&cursor, need);
    if (!q || !k || !v || !o || !d_o || !lse || !conv || !dconv || !dconv_lo || !hi[0] ||
        !hi[1] || !hi[2] || !lo[0] || !lo[1] || !lo[2] || !ws)
        return; /* does not fit the arena */
    memset(&ba, 0, sizeof ba);
    ba.q = q, ba.k = k, ba.v = v, ba.o = o, ba.d_o = d_o, ba.lse = (const float *)lse;
    if (p.conv_q) /* the conv: dconv_w is a pair too */
        ba.conv_w = (const float *)conv, ba.dconv_w = (float *)dconv,
        ba.dconv_w_lo = (float *)dconv_lo;
    ba.accumulate = TA_BWD_ACCUMULATE;
    ba.dq = hi[0], ba.dk = hi[1], ba.dv = hi[2];
    ba.dq_lo = (float *)lo[0], ba.dk_lo = (float *)lo[1], ba.dv_lo = (float *)lo[2];
    lo_of[0] = &ba.dq_lo, lo_of[1] = &ba.dk_lo, lo_of[2] = &ba.dv_lo, lo_of[3] = &ba.dconv_w_lo;
    want = unsup ? TA_ERR_UNSUPPORTED : TA_OK;
    mut = fz_range(&g, 0, 7);
    j = fz_range(&g, 0, p.conv_q ? 3 : 2); /* 3: dconv_w_lo */
    switch (mut) {
    case 1:
        ba.accumulate = bad_acc[fz_range(&g, 0, 5)];
        want = TA_ERR_BAD_ARG; /* the value first, then the operations */
        break;
    case 2:
        *lo_of[j] = NULL;
        if (!unsup) want = TA_ERR_NULL_ARG;
        break;
    case 3: /* misaligned, or overlapping an input, a hi word, the workspace */
    case 4:
    case 5:
    case 6: {
        unsigned char *const ins[] = {q, k, v, o, d_o, lse};
        unsigned char *x = mut == 3   ? (j < 3 ? lo[j] : dconv_lo) + fz_range(&g, 1, 3)
                           : mut == 4 ? ins[fz_range(&g, 0, 5)]
                           : mut == 5 ? hi[fz_range(&g, 0, 2)]
                                      : ws;
        if (mut == 6 && need == 0) break; /* no workspace to overlap */
        *lo_of[j] = (float *)x;
        if (!unsup) want = TA_ERR_BAD_ARG;
        break;
    }
    case 7: /* not accumulating: the lo words are ignored */
        if (unsup) return;
        ba.accumulate = 0;
        ba.dq_lo = ba.dk_lo = ba.dv_lo = ba.dconv_w_lo = NULL;
        break;
    default: break;
    }
    memcpy(g_before, g_arena, ARENA);
    st_x = ta_explain_bwd(&p, be, &ba, ws, need, NULL, msg, sizeof msg);
    FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "ta_explain_bwd wrote the arena");
    st = ta_bwd(&p, be, &ba, ws, need, NULL);
    outs[0] = ba.dq, outs[1] = ba.dk, outs[2] = ba.dv;
    outs[3] = ba.dq_lo, outs[4] = ba.dk_lo, outs[5] = ba.dv_lo, outs[6] = ws;
    outs[7] = ba.dconv_w, outs[8] = ba.dconv_w_lo;
    for (i = 0; i < 3; ++i)
        out_n[i] = out_n[i + 3] = n_hi[i];
    out_n[6] = need;
    out_n[7] = out_n[8] = ba.dconv_w ? n_conv : 0;
    check_status_and_writes("accumulating ta_bwd", mut, st, st_x, want, msg, outs, out_n, 9);

    /* ta_bwd_finish: the hi words into gradients in the storage dtype (the lo
     * words' slots) */
    memset(&fa, 0, sizeof fa);
    fa.dq_hi = (const float *)hi[0], fa.dk_hi = (const float *)hi[1],
    fa.dv_hi = (const float *)hi[2];
    fa.dq = lo[0], fa.dk = lo[1], fa.dv = lo[2];
    want = unsup ? TA_ERR_UNSUPPORTED : TA_OK;
    mut = fz_range(&g, 0, 9);
    j = fz_range(&g, 0, 2);
    {
        const float **his[3] = {&fa.dq_hi, &fa.dk_hi, &fa.dv_hi};
        void **grads[3] = {&fa.dq, &fa.dk, &fa.dv};
        ta_strides *strides[3] = {&fa.dq_strides, &fa.dk_strides, &fa.dv_strides};
        const ta_problem *pp = &p;
        const ta_bwd_finish_args *pa = &fa;
        switch (mut) {
        case 1:
            *his[j] = NULL;
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        case 2:
            *grads[j] = NULL;
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        case 3: /* pairs not finished: both NULL */
            for (i = 0; i < 3; ++i)
                if (i == j || fz_range(&g, 0, 1)) *his[i] = NULL, *grads[i] = NULL;
            break;
        case 4:
            *grads[j] = (unsigned char *)*grads[j] + 1;
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        case 5:
            *his[j] =
                (const float *)(const void *)((const unsigned char *)*his[j] + fz_range(&g, 1, 3));
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        case 6:
            *grads[j] = hi[fz_range(&g, 0, 2)];
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        case 7:
            pp = NULL;
            want = TA_ERR_NULL_ARG;
            break;
        case 8:
            pa = NULL;
            want = TA_ERR_NULL_ARG;
            break;
        case 9: /* a negative stride, the others the contiguous ones */
            strides[j]->seq = -1;
            strides[j]->head =
                (j == 0 ? p.seq_q : p.seq_k) * (int64_t)(j == 2 ? p.head_dim_v : p.head_dim);
            strides[j]->batch = strides[j]->head * (j == 0 ? p.heads_q : p.heads_kv);
            if (!unsup) want = TA_ERR_BAD_ARG;
            break;
        default: break;
        }
        memcpy(g_before, g_arena, ARENA);
        st_x = ta_explain_bwd_finish(pp, be, pa, NULL, msg, sizeof msg);
        FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "ta_explain_bwd_finish wrote the arena");
        st = ta_bwd_finish(pp, be, pa, NULL);
        for (i = 0; i < 3; ++i) {
            outs[i] = *grads[i];
            out_n[i] = n_g[i];
        }
        check_status_and_writes("ta_bwd_finish", mut, st, st_x, want, msg, outs, out_n, 3);
    }
}

/* ---- Key ranges and the query offset, status for status ---- */

/* The documented status of a problem that is valid but for q_offset,
 * key_begin, key_end (docs/api.md, "Key ranges and the query offset"), from
 * this file's own arithmetic: with latent_dim or TA_RBAND any non-zero field
 * is TA_ERR_UNSUPPORTED; else the bounds (|S_k - S_q + q_offset| <=
 * TA_SEQ_MAX, 0 <= key_end <= S_k, 0 <= key_begin < key_end or S_k) are
 * TA_ERR_BAD_ARG in that order, then key_begin off the pass's K tiles of
 * width ce (the forward's, or the backward's: block_k minus 2 (c_k - 1)),
 * key_end off them and not S_k, TA_ERR_UNSUPPORTED. *field: the field the
 * explanation names. */
static ta_status key_rules(const ta_problem *p, int32_t ce, int bwd, const char **field) {
    const int64_t diag = (int64_t)p->seq_k - p->seq_q + p->q_offset;
    const int32_t end = p->key_end != 0 ? p->key_end : p->seq_k;
    const char *nonzero = p->q_offset != 0    ? "q_offset"
                          : p->key_begin != 0 ? "key_begin"
                          : p->key_end != 0   ? "key_end"
                                              : NULL;
    *field = nonzero;
    if (p->latent_dim > 0 || (p->flags & TA_RBAND)) return nonzero ? TA_ERR_UNSUPPORTED : TA_OK;
    if (diag < -(int64_t)TA_SEQ_MAX || diag > (int64_t)TA_SEQ_MAX)
        return *field = "q_offset", TA_ERR_BAD_ARG;
    if (p->key_end < 0 || p->key_end > p->seq_k) return *field = "key_end", TA_ERR_BAD_ARG;
    if (p->key_begin < 0 || p->key_begin >= end) return *field = "key_begin", TA_ERR_BAD_ARG;
    if (p->key_begin % ce != 0) return *field = "key_begin", TA_ERR_UNSUPPORTED;
    if (end != p->seq_k && end % ce != 0) return *field = "key_end", TA_ERR_UNSUPPORTED;
    (void)bwd; /* the pass is in ce */
    return TA_OK;
}

/* A key position off the K tiles of width ce (ce >= 2) in [1, hi), or -1 if
 * there is none. */
static int32_t off_tile(fz *g, int32_t ce, int32_t hi) {
    int32_t x;
    if (hi <= 1) return -1;
    x = fz_range(g, 1, hi - 1);
    if (x % ce == 0) x = x + 1 < hi ? x + 1 : x - 1;
    return x % ce != 0 ? x : -1;
}

/* One small valid problem drawn from seed, every buffer in its own arena slot,
 * then q_offset, key_begin, key_end set: on the K tiles (key_end 0, S_k or a
 * tile boundary) with q_offset small or at |S_k - S_q + q_offset| = TA_SEQ_MAX,
 * or one or two things broken: key_begin or key_end off the tiles, out of
 * bounds, q_offset past the bound, a bound and a tile boundary at once (the
 * bound first); sometimes with latent_dim or the band (TA_ERR_UNSUPPORTED for
 * any non-zero field). The size queries, ta_explain_*, ta_fwd and ta_bwd (and
 * the CPU task plans) each return key_rules' status, the explanation names its
 * field; a refusal writes nothing; an accepted forward (run on REF or CPU)
 * writes only o, lse and its workspace. */
static void check_key_rules(uint64_t seed) {
    uint8_t bytes[64];
    fz g = {bytes, sizeof bytes};
    ta_problem p;
    ta_backend be;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_task_plan tp;
    size_t cursor = 64, need_f = 0, need_b = 0, need, eb, n_q, n_k, n_conv, got;
    unsigned char *q, *k, *v, *o, *d_o, *lse, *conv, *dq, *dk, *dv, *dconv, *ws;
    void *outs[3];
    size_t out_n[3];
    char msg[200];
    const char *field;
    ta_status want, st, st_x;
    int64_t base;
    int32_t ce, n_tiles, mut, bq, bk, x, pass;
    int i;
    for (i = 0; i < (int)sizeof bytes; i += 8) {
        const uint64_t r = fz_mix(&seed);
        memcpy(bytes + i, &r, 8);
    }
    fz_small_problem(&g, &p, 16, 8);
    mut = fz_range(&g, 0, 11);
    if (mut >= 10) { /* latent attention (10) or the band (11): no conv */
        p.conv_q = p.conv_k = 0;
        if (mut == 10) {
            p.latent_dim = fz_range(&g, 1, 16);
        } else {
            p.flags = TA_CAUSAL | TA_RBAND;
            p.window_left = p.window_right = 0;
            if (p.seq_q > p.seq_k) p.seq_q = p.seq_k;
            p.rband_alpha = 0.5f;
            p.rband_width = fz_range(&g, 0, 4);
            p.q_history = p.seq_k - p.seq_q < p.rband_width ? p.seq_k - p.seq_q : p.rband_width;
        }
    }
    be = (ta_backend)fz_range(&g, TA_BACKEND_REF, TA_BACKEND_CPU);
    /* a refused geometry; the band's backward needs S_q = S_k (either refuses
     * the fields before that) */
    if (ta_fwd_workspace_size(&p, be, &need_f) != TA_OK ||
        (ta_bwd_workspace_size(&p, be, &need_b) != TA_OK && mut < 10))
        return;
    ta_tiling_default_blocks(p.conv_q, p.conv_k, &bq, &bk);
    ce = (p.block_k ? p.block_k : bk) - (p.conv_k > 0 ? p.conv_k - 1 : 0);
    n_tiles = (p.seq_k - 1) / ce + 1;
    base = (int64_t)p.seq_k - p.seq_q;
    /* a valid range first, then what mut breaks */
    p.key_begin = ce * fz_range(&g, 0, n_tiles - 1);
    x = fz_range(&g, p.key_begin / ce + 1, n_tiles + 1);
    p.key_end = x == n_tiles + 1 ? 0 : x == n_tiles ? p.seq_k : x * ce;
    switch (fz_range(&g, 0, 3)) {
    case 0: p.q_offset = (int32_t)((int64_t)TA_SEQ_MAX - base); break;
    case 1: p.q_offset = (int32_t)(-(int64_t)TA_SEQ_MAX - base); break;
    default: p.q_offset = fz_range(&g, -40, 40); break;
    }
    switch (mut % 10) {
    case 1: /* key_begin off the tiles */
    case 7: /* and key_end out of bounds (the bound first) */
        p.key_end = 0;
        if ((x = off_tile(&g, ce, p.seq_k)) >= 0) p.key_begin = x;
        if (mut == 7) p.key_end = fz_range(&g, 0, 1) ? p.seq_k + fz_range(&g, 1, 40) : -1;
        break;
    case 2: /* key_end off the tiles (not S_k) */
        p.key_begin = 0;
        if ((x = off_tile(&g, ce, p.seq_k)) >= 0) p.key_end = x;
        break;
    case 3: { /* key_end out of bounds */
        static const int32_t ends[] = {-1, -64, INT32_MIN, INT32_MAX};
        const int32_t y = fz_range(&g, 0, 5);
        p.key_end = y < 4 ? ends[y] : p.seq_k + (y == 4 ? 1 : ce);
        break;
    }
    case 4: { /* key_begin out of bounds */
        const int32_t end = p.key_end != 0 ? p.key_end : p.seq_k, y = fz_range(&g, 0, 5);
        p.key_begin = y == 0   ? -1
                      : y == 1 ? -ce
                      : y == 2 ? INT32_MIN
                      : y == 3 ? INT32_MAX
                      : y == 4 ? end
                               : end + ce;
        break;
    }
    case 5: /* q_offset past the bound */
    case 6: /* and key_begin off the tiles (the bound first) */
        switch (fz_range(&g, 0, 3)) {
        case 0: p.q_offset = (int32_t)((int64_t)TA_SEQ_MAX - base + fz_range(&g, 1, 40)); break;
        case 1: p.q_offset = (int32_t)(-(int64_t)TA_SEQ_MAX - base - fz_range(&g, 1, 40)); break;
        case 2: p.q_offset = INT32_MAX; break;
        default: p.q_offset = INT32_MIN; break;
        }
        if (mut == 6) {
            p.key_end = 0;
            if ((x = off_tile(&g, ce, p.seq_k)) >= 0) p.key_begin = x;
        }
        break;
    case 8: p.q_offset = p.key_begin = p.key_end = 0; break; /* the plain problem */
    default: break;                                          /* 0, 9: valid */
    }
    if (mut >= 10 && p.q_offset == 0 && p.key_begin == 0 && p.key_end == 0) p.q_offset = 1;
    eb = p.dtype == TA_F32 ? 4u : 2u;
    n_q = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    n_k = (size_t)p.batch * (size_t)p.heads_kv * (size_t)p.seq_k;
    n_conv = (size_t)p.heads_q * (size_t)p.conv_q * (size_t)p.conv_k * 4;
    {
        const size_t dk_in = (size_t)(p.latent_dim > 0 ? p.latent_dim : p.head_dim);
        const size_t dv_in = (size_t)(p.latent_dim > 0 ? p.latent_dim : p.head_dim_v);
        memset(g_arena, 0x3F, ARENA); /* finite in every dtype */
        q = slot(&cursor, n_q * (size_t)p.head_dim * eb);
        k = slot(&cursor, n_k * dk_in * eb);
        v = slot(&cursor, n_k * dv_in * eb);
        o = slot(&cursor, n_q * (size_t)p.head_dim_v * eb);
        d_o = slot(&cursor, n_q * (size_t)p.head_dim_v * eb);
        lse = slot(&cursor, n_q * 4);
        conv = slot(&cursor, n_conv);
        dconv = slot(&cursor, n_conv);
        dq = slot(&cursor, n_q * (size_t)p.head_dim * eb);
        dk = slot(&cursor, n_k * dk_in * eb);
        dv = slot(&cursor, n_k * dv_in * eb);
    }
    need = need_f > need_b ? need_f : need_b;
    ws = slot(&cursor, need);
    if (!q || !k || !v || !o || !d_o || !lse || !conv || !dconv || !dq || !dk || !dv || !ws)
        return; /* does not fit the arena */
    memset(&fa, 0, sizeof fa);
    memset(&ba, 0, sizeof ba);
    fa.q = ba.q = q, fa.k = ba.k = k, fa.v = ba.v = v;
    fa.o = o, fa.lse = (float *)lse;
    ba.o = o, ba.d_o = d_o, ba.lse = (const float *)lse;
    ba.dq = dq, ba.dk = dk, ba.dv = dv;
    if (p.conv_q) fa.conv_w = ba.conv_w = (const float *)conv, ba.dconv_w = (float *)dconv;
    for (pass = 0; pass < 2; ++pass) {
        /* the backward's K tiles: its halo is twice the forward's */
        want = key_rules(&p, pass ? ce - (p.conv_k > 0 ? p.conv_k - 1 : 0) : ce, pass, &field);
        /* the size query and its explanation */
        got = 0xC0FFEE;
        memcpy(g_before, g_arena, ARENA);
        st_x = pass ? ta_explain_bwd_workspace_size(&p, be, msg, sizeof msg)
                    : ta_explain_fwd_workspace_size(&p, be, msg, sizeof msg);
        st = pass ? ta_bwd_workspace_size(&p, be, &got) : ta_fwd_workspace_size(&p, be, &got);
        check_status_and_writes(pass ? "key fields, ta_bwd_workspace_size"
                                     : "key fields, ta_fwd_workspace_size",
                                mut, st, st_x, want, msg, NULL, NULL, 0);
        FZ_CHECK(st == TA_OK || got == 0xC0FFEE, "a refused size query wrote bytes");
        FZ_CHECK(want == TA_OK || strstr(msg, field) != NULL,
                 "key fields (mutation %d): \"%s\" does not name %s", (int)mut, msg, field);
        st = pass ? ta_bwd_task_plan(&p, TA_BACKEND_CPU, &tp)
                  : ta_fwd_task_plan(&p, TA_BACKEND_CPU, &tp);
        FZ_CHECK(st == want, "key fields (mutation %d): %s task plan %d, want %d", (int)mut,
                 pass ? "backward" : "forward", (int)st, (int)want);
        /* the call (the plain backward is covered elsewhere: not run) */
        if (pass && want == TA_OK) continue;
        memcpy(g_before, g_arena, ARENA);
        st_x = pass ? ta_explain_bwd(&p, be, &ba, ws, need, NULL, msg, sizeof msg)
                    : ta_explain_fwd(&p, be, &fa, ws, need, NULL, msg, sizeof msg);
        FZ_CHECK(memcmp(g_before, g_arena, ARENA) == 0, "ta_explain wrote the arena");
        st = pass ? ta_bwd(&p, be, &ba, ws, need, NULL) : ta_fwd(&p, be, &fa, ws, need, NULL);
        outs[0] = o, outs[1] = lse, outs[2] = ws;
        out_n[0] = n_q * (size_t)p.head_dim_v * eb, out_n[1] = n_q * 4, out_n[2] = need;
        check_status_and_writes(pass ? "key fields, ta_bwd" : "key fields, ta_fwd", mut, st, st_x,
                                want, msg, outs, out_n, 3);
        FZ_CHECK(want == TA_OK || strstr(msg, field) != NULL,
                 "key fields (mutation %d): \"%s\" does not name %s", (int)mut, msg, field);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz f = {data, size};
    call c;
    uint64_t seed = fz_bits(&f, 8);
    int entry;
    /* finite values in every dtype: f32 0.747, f16 1.81, bf16 0.746 (plus the bytes'
     * seed in the first word, so runs differ) */
    memset(g_arena, 0x3F, ARENA);
    memcpy(g_arena, &seed, sizeof seed);
    make_problem(&f, &c.p);
    make_call(&f, &c, seed);
    for (entry = 0; entry < 4; ++entry)
        run_entry(&c, entry);
    check_accumulate_rules(seed ^ UINT64_C(0x5eed5eed5eed5eed));
    check_key_rules(seed ^ UINT64_C(0x6b6579736b657973));
    return 0;
}
