/*
 * Bad input: every invalid call gets its exact status and writes nothing.
 *
 * One table of cases. Each case starts from a valid call (a small GQA causal
 * problem with seqlens_k, a trace and a workspace of the queried size), breaks
 * one thing (or, for the ordering cases, two) and names the entry points it
 * applies to: ta_fwd_workspace_size, ta_fwd, ta_bwd_workspace_size, ta_bwd.
 * Every buffer lives in one arena; before each call the outputs (o, lse, dq, dk,
 * dv, dconv_w, trace entries, workspace) are canary-filled and the inputs
 * restored; after it, the canaries must be intact (ta_canary_intact), every
 * input byte unchanged, and the bytes out-parameter and trace count untouched.
 * Each refused call is also explained (ta_explain_*): the same status, a message
 * naming the case's field (and the other party of an overlap), nothing written.
 * Then: ta_status_string names every code, and a valid call still succeeds.
 * Expected statuses and the order of checks: docs/api.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tileattn.h"

/* ---- Entry points ---- */
enum { E_FWS = 1, E_FWD = 2, E_BWS = 4, E_BWD = 8, E_ALL = 15, E_CALLS = E_FWD | E_BWD, E_MRG = 16 };
static const char *entry_name(int e) {
    switch (e) {
    case E_FWS: return "ta_fwd_workspace_size";
    case E_FWD: return "ta_fwd";
    case E_BWS: return "ta_bwd_workspace_size";
    case E_MRG: return "ta_merge";
    default: return "ta_bwd";
    }
}

/* ---- The arena: every buffer a call can see, each 64-aligned with a gap ---- */
enum {
    R_Q,
    R_K,
    R_V,
    R_O_IN,
    R_D_O,
    R_LSE_IN,
    R_SEQLENS,
    R_CONV_W, /* inputs */
    R_O,
    R_LSE,
    R_DQ,
    R_DK,
    R_DV,
    R_DCONV_W,
    R_TRACE,
    R_SPARE,
    R_WS, /* outputs, scratch */
    R_COUNT
};
#define R_FIRST_OUTPUT R_O
static const char *const k_region_names[R_COUNT] = {"q",
                                                    "k",
                                                    "v",
                                                    "o (bwd input)",
                                                    "d_o",
                                                    "lse (bwd input)",
                                                    "seqlens_k",
                                                    "conv_w",
                                                    "o",
                                                    "lse",
                                                    "dq",
                                                    "dk",
                                                    "dv",
                                                    "dconv_w",
                                                    "trace entries",
                                                    "spare (before workspace)",
                                                    "workspace"};

#define GAP       128 /* bytes between regions: room for a pointer moved by a few bytes */
#define TRACE_CAP 64

typedef struct arena {
    unsigned char *base, *pristine;
    size_t bytes;
    size_t off[R_COUNT], len[R_COUNT];
    size_t need_fwd, need_bwd; /* workspace bytes of the base problem */
} arena;
static arena A;

static void *reg(int r) { return A.base + A.off[r]; }
static unsigned char *reg_b(int r) { return A.base + A.off[r]; }

/* ---- The base problem: B=2, H=4, H_kv=2, S_q=5, S_k=7, D=8, D_v=6, f32, causal ---- */
#define B_   2
#define H_   4
#define HKV_ 2
#define SQ_  5
#define SK_  7
#define D_   8
#define DV_  6
static ta_problem base_problem(void) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B_;
    p.heads_q = H_;
    p.heads_kv = HKV_;
    p.seq_q = SQ_;
    p.seq_k = SK_;
    p.head_dim = D_;
    p.head_dim_v = DV_;
    p.dtype = TA_F32;
    p.precision = TA_PRECISION_EXACT;
    p.flags = TA_CAUSAL;
    return p;
}

/* ---- One call: everything an entry point receives ---- */
typedef struct call {
    ta_problem p;
    int null_problem, null_args, null_bytes;
    ta_backend be;
    ta_fwd_args fa;
    ta_bwd_args ba;
    ta_merge_args ma; /* ta_merge: one part (the backward's o and lse inputs) into o, lse */
    void *ws;
    size_t ws_bytes;
    void *stream;
} call;

static ta_trace g_trace;   /* the trace every call carries; count canary-filled */
static size_t g_bytes_out; /* the size queries' out-parameter, canary-filled */

static void base_call(call *c) {
    memset(c, 0, sizeof *c);
    c->p = base_problem();
    c->be = TA_BACKEND_REF;
    c->fa.q = c->ba.q = reg(R_Q);
    c->fa.k = c->ba.k = reg(R_K);
    c->fa.v = c->ba.v = reg(R_V);
    c->fa.seqlens_k = c->ba.seqlens_k = (const int32_t *)reg(R_SEQLENS);
    c->fa.o = reg(R_O);
    c->fa.lse = (float *)reg(R_LSE);
    c->fa.trace = c->ba.trace = &g_trace;
    c->ba.o = reg(R_O_IN);
    c->ba.d_o = reg(R_D_O);
    c->ba.lse = (const float *)reg(R_LSE_IN);
    c->ba.dq = reg(R_DQ);
    c->ba.dk = reg(R_DK);
    c->ba.dv = reg(R_DV);
    c->ws = reg(R_WS);
    c->ws_bytes = A.len[R_WS]; /* generous: only the workspace cases shrink it */
    c->stream = NULL;
    c->ma.num_parts = 1;
    c->ma.o_parts = reg(R_O_IN);
    c->ma.lse_parts = (const float *)reg(R_LSE_IN);
    c->ma.o = reg(R_O);
    c->ma.lse = (float *)reg(R_LSE);
}

static size_t need_of(int entry) { return entry & (E_FWS | E_FWD) ? A.need_fwd : A.need_bwd; }

/* ---- The cases. A mutator breaks a valid call; it returns 0 if it does not
 * apply (then the case is reported as skipped, e.g. a backend that exists). ---- */
typedef int (*mutator)(call *c, int entry);
typedef struct bad_case {
    const char *name;
    int entries; /* E_* mask */
    ta_status expect;
    mutator mutate;
    /* names the explanation (ta_explain_*) must contain, space-separated (the
     * field, the other party of an overlap or divisibility); "fwd|bwd" when the
     * backward entry points name others; NULL: not explainable */
    const char *field;
} bad_case;

#define SET(fn, stmt)                                                                              \
    static int fn(call *c, int entry) {                                                            \
        (void)entry;                                                                               \
        stmt;                                                                                      \
        return 1;                                                                                  \
    }

/* NULL pointers */
SET(m_null_problem, c->null_problem = 1)
SET(m_null_args, c->null_args = 1)
SET(m_null_bytes, c->null_bytes = 1)
SET(m_null_q, c->fa.q = c->ba.q = NULL)
SET(m_null_k, c->fa.k = c->ba.k = NULL)
SET(m_null_v, c->fa.v = c->ba.v = NULL)
SET(m_null_o, c->fa.o = NULL; c->ba.o = NULL)
SET(m_null_d_o, c->ba.d_o = NULL)
SET(m_null_lse_bwd, c->ba.lse = NULL)
SET(m_null_dq, c->ba.dq = NULL)
SET(m_null_dk, c->ba.dk = NULL)
SET(m_null_dv, c->ba.dv = NULL)
/* sizes <= 0 */
SET(m_batch_0, c->p.batch = 0)
SET(m_heads_q_0, c->p.heads_q = 0)
SET(m_heads_kv_0, c->p.heads_kv = 0)
SET(m_seq_q_0, c->p.seq_q = 0)
SET(m_seq_k_0, c->p.seq_k = 0)
SET(m_head_dim_0, c->p.head_dim = 0)
SET(m_head_dim_v_0, c->p.head_dim_v = 0)
SET(m_batch_neg, c->p.batch = -1)
SET(m_heads_q_neg, c->p.heads_q = -4)
SET(m_heads_kv_neg, c->p.heads_kv = -2)
SET(m_seq_q_neg, c->p.seq_q = -5)
SET(m_seq_k_neg, c->p.seq_k = INT32_MIN)
SET(m_head_dim_neg, c->p.head_dim = -8)
SET(m_head_dim_v_neg, c->p.head_dim_v = -1)
/* inconsistent or unsupported sizes */
SET(m_heads_not_divisible, c->p.heads_q = 4; c->p.heads_kv = 3)
SET(m_heads_kv_gt_q, c->p.heads_q = 2; c->p.heads_kv = 4)
SET(m_head_dim_257, c->p.head_dim = TA_HEAD_DIM_MAX + 1)
SET(m_head_dim_v_257, c->p.head_dim_v = TA_HEAD_DIM_MAX + 1)
SET(m_seq_q_over, c->p.seq_q = TA_SEQ_MAX + 1)
SET(m_seq_k_over, c->p.seq_k = INT32_MAX)
/* B*H*S overflows size_t: 2^30 * 2^30 * 2^30 */
SET(m_elems_overflow, c->p.batch = 1 << 30; c->p.heads_q = 1 << 30; c->p.heads_kv = 1;
    c->p.seq_q = TA_SEQ_MAX)
/* k's count overflows (B*H_kv*S_k*D = 2^16 * 2^16 * 2^30 * 2^8) while q's fits */
SET(m_kv_elems_overflow, c->p.batch = 1 << 16; c->p.heads_q = 1 << 16; c->p.heads_kv = 1 << 16;
    c->p.seq_q = 1; c->p.seq_k = TA_SEQ_MAX; c->p.head_dim = TA_HEAD_DIM_MAX)
/* q has 2^19 * 2^16 * 2^20 * 2^8 = 2^63 elements (fits in 64 bits), 2^65 bytes (does not) */
static int m_bytes_overflow(call *c, int entry) {
    (void)entry;
    if (SIZE_MAX != UINT64_MAX) return 0;
    c->p.batch = 1 << 19;
    c->p.heads_q = 1 << 16;
    c->p.heads_kv = 1;
    c->p.seq_q = 1 << 20;
    c->p.seq_k = 1;
    c->p.head_dim = TA_HEAD_DIM_MAX;
    c->p.head_dim_v = 1;
    return 1;
}
/* One size product of each tensor overflowing (issue 15 coverage): each problem
 * passes every check before it. sizes: B, H, H_kv, S_q, S_k, D, D_v. */
static void set_sizes(call *c, int32_t b, int32_t h, int32_t hkv, int32_t sq, int32_t sk,
                      int32_t d, int32_t dv) {
    c->p.batch = b, c->p.heads_q = h, c->p.heads_kv = hkv, c->p.seq_q = sq, c->p.seq_k = sk;
    c->p.head_dim = d, c->p.head_dim_v = dv;
}
/* q: B H S_q = 2^60 fits, times D = 2^8 does not (elements) */
SET(m_q_elems_overflow, set_sizes(c, 1 << 20, 1 << 20, 1, 1 << 20, 1, TA_HEAD_DIM_MAX, 1))
/* o: the same with D = 1, D_v = 256 */
SET(m_o_elems_overflow, set_sizes(c, 1 << 20, 1 << 20, 1, 1 << 20, 1, 1, TA_HEAD_DIM_MAX))
/* v: B H_kv S_k = 2^62 fits (k with D = 1 too), times D_v = 2^8 does not */
SET(m_v_elems_overflow, set_sizes(c, 1 << 16, 1 << 16, 1 << 16, 1, 1 << 30, 1, TA_HEAD_DIM_MAX))
/* k, v, o: 2^63 elements (fit in 64 bits), 2^65 bytes (do not); q's bytes fit */
static int m_k_bytes_overflow(call *c, int entry) {
    (void)entry;
    set_sizes(c, 1 << 19, 1 << 16, 1 << 16, 1, 1 << 20, TA_HEAD_DIM_MAX, 1);
    return SIZE_MAX == UINT64_MAX;
}
static int m_v_bytes_overflow(call *c, int entry) {
    (void)entry;
    set_sizes(c, 1 << 19, 1 << 16, 1 << 16, 1, 1 << 20, 1, TA_HEAD_DIM_MAX);
    return SIZE_MAX == UINT64_MAX;
}
static int m_o_bytes_overflow(call *c, int entry) {
    (void)entry;
    set_sizes(c, 1 << 19, 1 << 16, 1, 1 << 20, 1, 1, TA_HEAD_DIM_MAX);
    return SIZE_MAX == UINT64_MAX;
}
/* enums, flags, scale */
SET(m_dtype_3, c->p.dtype = (ta_dtype)3)
SET(m_dtype_neg, c->p.dtype = (ta_dtype)-1)
SET(m_precision_2, c->p.precision = (ta_precision)2)
SET(m_backend_3, c->be = (ta_backend)3)
SET(m_backend_neg, c->be = (ta_backend)-1)
SET(m_flag_bit4, c->p.flags = TA_CAUSAL | (1u << 4))
SET(m_flag_bit31, c->p.flags = 1u << 31)
SET(m_window_left_no_flag, c->p.window_left = 3)
SET(m_window_right_no_flag, c->p.window_right = -1)
/* strides (element counts; the feature dimension is contiguous) */
SET(m_q_stride_neg, c->fa.q_strides.batch = c->ba.q_strides.batch = -1;
    c->fa.q_strides.head = c->ba.q_strides.head = SQ_ * D_;
    c->fa.q_strides.seq = c->ba.q_strides.seq = D_)
SET(m_k_rows_alias, c->fa.k_strides.batch = c->ba.k_strides.batch = HKV_ * SK_ * D_;
    c->fa.k_strides.head = c->ba.k_strides.head = SK_ * D_;
    c->fa.k_strides.seq = c->ba.k_strides.seq = D_ - 1)
SET(m_dq_heads_alias, c->ba.dq_strides.batch = H_ * SQ_ * D_; c->ba.dq_strides.head = D_;
    c->ba.dq_strides.seq = D_; c->fa.o_strides.batch = H_ * SQ_ * DV_; c->fa.o_strides.head = DV_;
    c->fa.o_strides.seq = DV_)
SET(m_o_strided_overlap, c->fa.o_strides.batch = c->ba.o_strides.batch = 1 << 20;
    c->fa.o_strides.head = c->ba.o_strides.head = SQ_ * DV_;
    c->fa.o_strides.seq = c->ba.o_strides.seq = DV_; c->ba.dq_strides.batch = 1 << 20;
    c->ba.dq_strides.head = SQ_ * D_; c->ba.dq_strides.seq = D_)
SET(m_v_stride_overflow, c->fa.v_strides.batch = c->ba.v_strides.batch = INT64_MAX / 2;
    c->fa.v_strides.head = c->ba.v_strides.head = SK_ * DV_;
    c->fa.v_strides.seq = c->ba.v_strides.seq = DV_)
/* the batch stride alone past 2^62 / (B - 1) (the check before the span's sum) */
SET(m_v_stride_over_bound, c->fa.v_strides.batch = c->ba.v_strides.batch = INT64_MAX;
    c->fa.v_strides.head = c->ba.v_strides.head = SK_ * DV_;
    c->fa.v_strides.seq = c->ba.v_strides.seq = DV_)
/* dk is a [B, H_kv, S_k, D] output; d_o's batch stride reaches over the arena */
SET(m_dk_overlaps_strided_d_o, c->ba.d_o_strides.batch = 1 << 20;
    c->ba.d_o_strides.head = SQ_ * DV_; c->ba.d_o_strides.seq = DV_)
/* batch and head strides 0 with a seq stride: every batch entry and head aliases */
SET(m_q_strides_zero_batch_head, c->fa.q_strides.seq = c->ba.q_strides.seq = D_)
/* the backward's own tensors: negative strides */
SET(m_d_o_stride_neg, c->ba.d_o_strides.seq = -1)
SET(m_dk_stride_neg, c->ba.dk_strides.head = -3)
SET(m_dv_stride_neg, c->ba.dv_strides.batch = -1)
/* a trace on the CPU backend (REF only) */
SET(m_trace_on_cpu, c->be = TA_BACKEND_CPU)
SET(m_order_strides_before_null, c->fa.q = c->ba.q = NULL;
    c->fa.k_strides.seq = c->ba.k_strides.seq = -1)
SET(m_scale_nan, c->p.scale = NAN)
SET(m_scale_inf, c->p.scale = INFINITY)
SET(m_scale_neg_inf, c->p.scale = -INFINITY)
/* MTA conv sizes */
SET(m_conv_q_only, c->p.conv_q = 3; c->p.conv_k = 0)
SET(m_conv_k_only, c->p.conv_q = 0; c->p.conv_k = 3)
SET(m_conv_k_even, c->p.conv_q = 3; c->p.conv_k = 4)
SET(m_conv_neg, c->p.conv_q = -1; c->p.conv_k = -1)
SET(m_conv_q_neg, c->p.conv_q = -3; c->p.conv_k = 3)
SET(m_conv_k_neg, c->p.conv_q = 3; c->p.conv_k = -3)
SET(m_tile_config_neg, c->p.tile_config = -1)
SET(m_conv_q_17, c->p.conv_q = TA_CONV_Q_MAX + 1; c->p.conv_k = 3)
SET(m_conv_k_33, c->p.conv_q = 3; c->p.conv_k = TA_CONV_K_MAX + 2)
SET(m_conv_no_causal, c->p.conv_q = 3; c->p.conv_k = 5; c->p.flags = 0)
/* tile sizes */
SET(m_block_q_neg, c->p.block_q = -64)
SET(m_block_k_neg, c->p.block_k = -1)
SET(m_block_q_257, c->p.block_q = TA_BLOCK_MAX + 1)
SET(m_block_k_4, c->p.block_k = 4)
SET(m_block_q_512, c->p.block_q = 512)
SET(m_block_k_7, c->p.block_k = 7)
/* B_q = 8 with c_q = 5: 4 effective rows forward, 0 backward (halo 4 above + 4 below) */
SET(m_block_q_bwd_halo, c->p.conv_q = 5; c->p.conv_k = 1; c->p.block_q = 8)
/* B_k = 8 with c_k = 5: 4 effective columns forward, 0 backward (halo 4 each side) */
SET(m_block_k_bwd_halo, c->p.conv_q = 1; c->p.conv_k = 5; c->p.block_k = 8)
/* B_q = 8 with c_q = 16: no effective row even forward (halo 15 above) */
SET(m_block_q_fwd_halo, c->p.conv_q = 16; c->p.conv_k = 1; c->p.block_q = 8)
/* workspace */
static int m_ws_null(call *c, int entry) {
    c->ws = NULL;
    c->ws_bytes = need_of(entry);
    return need_of(entry) > 0;
}
static int m_ws_null_zero(call *c, int entry) {
    c->ws = NULL;
    c->ws_bytes = 0;
    return need_of(entry) > 0;
}
static int m_ws_short(call *c, int entry) {
    c->ws_bytes = need_of(entry) - 1;
    return need_of(entry) > 0;
}
static int m_ws_zero(call *c, int entry) {
    c->ws_bytes = 0;
    return need_of(entry) > 0;
}
static int g_misalign; /* set by the loop over 1..63 */
static int m_ws_misaligned(call *c, int entry) {
    c->ws = reg_b(R_WS) + g_misalign;
    c->ws_bytes = need_of(entry);
    return 1;
}
/* streams on a host backend */
static int g_dummy_stream;
SET(m_stream, c->stream = &g_dummy_stream)
/* alignment: each pointer must be aligned to its element */
SET(m_q_odd, c->fa.q = c->ba.q = reg_b(R_Q) + 1)
SET(m_k_plus2, c->fa.k = c->ba.k = reg_b(R_K) + 2)
SET(m_v_f16_odd, c->p.dtype = TA_F16; c->fa.v = c->ba.v = reg_b(R_V) + 1)
SET(m_o_plus2, c->fa.o = reg_b(R_O) + 2; c->ba.o = reg_b(R_O_IN) + 2)
SET(m_lse_odd, c->fa.lse = (float *)(void *)(reg_b(R_LSE) + 1);
    c->ba.lse = (const float *)(const void *)(reg_b(R_LSE_IN) + 1))
SET(m_dq_plus3, c->ba.dq = reg_b(R_DQ) + 3)
SET(m_dk_bf16_odd, c->p.dtype = TA_BF16; c->ba.dk = reg_b(R_DK) + 1)
SET(m_d_o_bf16_odd, c->p.dtype = TA_BF16; c->ba.d_o = reg_b(R_D_O) + 1)
SET(m_seqlens_odd,
    c->fa.seqlens_k = c->ba.seqlens_k = (const int32_t *)(const void *)(reg_b(R_SEQLENS) + 1))
/* overlap: no output may share a byte with an input, another output or the workspace */
SET(m_o_over_q, c->fa.o = reg_b(R_Q) + 16)
SET(m_o_is_q, c->fa.o = reg(R_Q))
SET(m_o_over_k_tail, c->fa.o = reg_b(R_K) + A.len[R_K] - 4)
SET(m_lse_over_o, c->fa.lse = (float *)reg(R_O) + 3)
SET(m_o_over_seqlens, c->fa.o = reg_b(R_SEQLENS) + 4)
/* o ends 4 bytes into the workspace */
SET(m_o_over_ws, c->fa.o = reg_b(R_WS) - A.len[R_O] + 4)
SET(m_lse_over_ws, c->fa.lse = (float *)reg(R_WS) + 8)
SET(m_dq_over_dk, c->ba.dq = reg_b(R_DK) + 8)
SET(m_dv_over_v, c->ba.dv = reg_b(R_V) + 4)
SET(m_dk_over_lse_in, c->ba.dk = reg_b(R_LSE_IN) + 4)
SET(m_dq_over_d_o, c->ba.dq = reg(R_D_O))
SET(m_dv_over_ws, c->ba.dv = reg_b(R_WS) - A.len[R_DV] + 4)
/* seqlens_k values outside [0, S_k] (entry 1 of 2, so every entry is read) */
static const int32_t k_seqlens_neg[B_] = {SK_, -1};
static const int32_t k_seqlens_big[B_] = {SK_, SK_ + 1};
static const int32_t k_seqlens_min[B_] = {INT32_MIN, SK_};
SET(m_seqlens_neg, c->fa.seqlens_k = c->ba.seqlens_k = k_seqlens_neg)
SET(m_seqlens_big, c->fa.seqlens_k = c->ba.seqlens_k = k_seqlens_big)
SET(m_seqlens_min, c->fa.seqlens_k = c->ba.seqlens_k = k_seqlens_min)
/* trace */
static ta_trace g_bad_trace;
SET(m_trace_null_entries, g_bad_trace.entries = NULL; g_bad_trace.capacity = 4;
    g_bad_trace.count = 0; c->fa.trace = c->ba.trace = &g_bad_trace)
/* the trace entries and struct are outputs: aligned, overlapping nothing (issue 15, found 4) */
static ta_trace g_moved_trace;
static int point_trace(call *c, void *entries, size_t capacity) {
    g_moved_trace.entries = (ta_trace_entry *)entries;
    g_moved_trace.capacity = capacity;
    g_moved_trace.count = 0;
    c->fa.trace = c->ba.trace = &g_moved_trace;
    return 1;
}
static int m_trace_is_o(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg(R_O), 4);
}
static int m_trace_is_dq(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg(R_DQ), 4);
}
static int m_trace_in_q(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg_b(R_Q) + 32, 2);
}
static int m_trace_in_ws(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg_b(R_WS) + 64, 4);
}
static int m_trace_misaligned(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg_b(R_TRACE) + 1, 4);
}
static int m_trace_capacity_overflow(call *c, int entry) {
    (void)entry;
    return point_trace(c, reg(R_TRACE), SIZE_MAX / 2);
}
/* lse over the ta_trace struct itself (whose count a call writes) */
SET(m_trace_struct_in_lse, c->fa.lse = (float *)(void *)&g_trace;
    c->ba.lse = (const float *)(const void *)&g_trace)
/* num_threads: [0, TA_THREADS_MAX]; 0 is the default, no negative value means anything */
SET(m_threads_neg1, c->p.num_threads = -1)
SET(m_threads_min, c->p.num_threads = INT32_MIN)
SET(m_threads_over, c->p.num_threads = TA_THREADS_MAX + 1)
SET(m_threads_over_cpu, c->p.num_threads = TA_THREADS_MAX + 1; c->be = TA_BACKEND_CPU;
    c->fa.trace = c->ba.trace = NULL)
/* MTA (conv 3 x 5, causal): conv_w and dconv_w required, aligned, not overlapping */
static void set_conv(call *c) {
    c->p.conv_q = 3;
    c->p.conv_k = 5;
    c->fa.conv_w = c->ba.conv_w = (const float *)reg(R_CONV_W);
    c->ba.dconv_w = (float *)reg(R_DCONV_W);
}
SET(m_mta_conv_w_null, set_conv(c); c->fa.conv_w = c->ba.conv_w = NULL)
SET(m_mta_dconv_w_null, set_conv(c); c->ba.dconv_w = NULL)
SET(m_mta_conv_w_odd, set_conv(c);
    c->fa.conv_w = c->ba.conv_w = (const float *)(const void *)(reg_b(R_CONV_W) + 1))
SET(m_mta_dconv_w_plus2, set_conv(c); c->ba.dconv_w = (float *)(void *)(reg_b(R_DCONV_W) + 2))
SET(m_mta_dconv_w_is_conv_w, set_conv(c); c->ba.dconv_w = (float *)reg(R_CONV_W))
SET(m_mta_dconv_w_over_dv, set_conv(c); c->ba.dconv_w = (float *)reg(R_DV) + 4)
SET(m_mta_o_over_conv_w, set_conv(c); c->fa.o = reg_b(R_CONV_W) + 8)
/* backends not implemented yet (skipped once they are available) */
static int m_backend_cpu(call *c, int entry) {
    (void)entry;
    c->be = TA_BACKEND_CPU;
    c->fa.trace = c->ba.trace = NULL;
    return !ta_backend_available(TA_BACKEND_CPU);
}
static int m_backend_cuda(call *c, int entry) {
    (void)entry;
    c->be = TA_BACKEND_CUDA;
    c->fa.trace = c->ba.trace = NULL; /* a trace is REF-only: keep one fault */
    return !ta_backend_available(TA_BACKEND_CUDA);
}
/* several faults: the first in the documented order wins */
SET(m_order_shape_before_backend, c->p.seq_q = 0; c->be = (ta_backend)9)
SET(m_order_args_before_overflow, c->p.dtype = (ta_dtype)7; c->p.batch = 1 << 30;
    c->p.heads_q = 1 << 30; c->p.heads_kv = 1; c->p.seq_q = TA_SEQ_MAX)
static int m_order_backend_before_stream(call *c, int entry) {
    (void)entry;
    c->be = TA_BACKEND_CPU;
    c->fa.trace = c->ba.trace = NULL;
    c->stream = &g_dummy_stream;
    return !ta_backend_available(TA_BACKEND_CPU);
}
SET(m_order_null_before_ws, c->fa.q = c->ba.q = NULL; c->ws = reg_b(R_WS) + 8)
SET(m_order_ws_before_seqlens, c->ws_bytes = 1; c->fa.seqlens_k = c->ba.seqlens_k = k_seqlens_neg)

/* split-K: num_splits below TA_SPLITS_AUTO */
SET(m_num_splits_neg2, c->p.num_splits = -2)
SET(m_num_splits_min, c->p.num_splits = INT32_MIN)
/* the rotary load stage: 4 interleaved pairs of D = 8, 7 rows, tables read
 * from the conv_w region (60 floats: cos = 0..27, sin = 28..55), positions
 * NULL (S_q, S_k <= 7) unless a case sets them */
static void set_rope(call *c) {
    const float *t = (const float *)reg(R_CONV_W);
    c->p.rope = TA_ROPE_INTERLEAVED;
    c->p.rope_pairs = 4;
    c->p.rope_rows = SK_;
    c->fa.rope.cos = c->ba.rope.cos = t;
    c->fa.rope.sin = c->ba.rope.sin = t + 28;
}
static const int32_t k_pos_q_bad[B_ * SQ_] = {0, 1, 2, 3, 4, 0, 1, 2, 3, SK_};
SET(m_rope_3, set_rope(c); c->p.rope = 3)
SET(m_rope_pairs_alone, c->p.rope_pairs = 4)
SET(m_rope_pairs_over, set_rope(c); c->p.rope_pairs = D_ / 2 + 1)
SET(m_rope_rows_0, set_rope(c); c->p.rope_rows = 0)
SET(m_rope_head_stride_neg, set_rope(c); c->p.rope_head_stride = -1)
SET(m_rope_cos_null, set_rope(c); c->fa.rope.cos = c->ba.rope.cos = NULL)
SET(m_rope_sin_odd, set_rope(c);
    c->fa.rope.sin = c->ba.rope.sin = (const float *)(const void *)(reg_b(R_CONV_W) + 2))
SET(m_rope_o_over_cos, set_rope(c); c->fa.rope.cos = (const float *)reg(R_O) + 3)
SET(m_rope_dq_over_sin, set_rope(c); c->ba.rope.sin = (const float *)reg(R_DQ) + 3)
SET(m_rope_pos_q_bad, set_rope(c); c->fa.rope.pos_q = c->ba.rope.pos_q = k_pos_q_bad)
SET(m_rope_rows_short, set_rope(c); c->p.rope_rows = SK_ - 1)
/* MTA decode with the stage: 2 query history rows (read from the q region,
 * [B, H, 2, D] contiguous) turn by row 0's table row - 1, - 2, so they need
 * pos_q, and pos_q[b][0] >= 2 (forward only: the backward refuses history) */
static void set_rope_hist(call *c) {
    set_conv(c);
    set_rope(c);
    c->p.q_history = 2;
    c->fa.q_hist = reg(R_Q);
}
static const int32_t k_pos_q_hist_low[B_ * SQ_] = {2, 3, 4, 5, 6, 1, 2, 3, 4, 5};
SET(m_rope_hist_no_pos, set_rope_hist(c))
SET(m_rope_hist_pos_low, set_rope_hist(c); c->fa.rope.pos_q = k_pos_q_hist_low)
/* CUDA's fast path turns pairs in whole 16-byte chunks: 30 interleaved pairs
 * are refused there (the same problem without the stage is supported; the
 * exact kernels take any pair count). Size queries only. */
static int m_rope_cuda(call *c, int entry) {
    (void)entry;
    set_rope(c);
    c->be = TA_BACKEND_CUDA;
    c->fa.trace = c->ba.trace = NULL;
    c->p.dtype = TA_F16;
    c->p.precision = TA_PRECISION_FAST;
    c->p.head_dim = c->p.head_dim_v = 64;
    c->p.rope_pairs = 30;
    return 1;
}
/* ta_merge's own arguments */
SET(m_mrg_null_o_parts, c->ma.o_parts = NULL)
SET(m_mrg_null_lse_parts, c->ma.lse_parts = NULL)
SET(m_mrg_null_o, c->ma.o = NULL)
SET(m_mrg_parts_0, c->ma.num_parts = 0)
SET(m_mrg_parts_neg, c->ma.num_parts = -1)
SET(m_mrg_o_is_parts, c->ma.o = reg(R_O_IN))
SET(m_mrg_lse_over_parts, c->ma.lse = (float *)reg(R_LSE_IN) + 2)
SET(m_mrg_lse_odd, c->ma.lse = (float *)(void *)(reg_b(R_LSE) + 1))
SET(m_mrg_parts_f16_odd, c->p.dtype = TA_F16; c->ma.o_parts = reg_b(R_O_IN) + 1)
SET(m_mrg_o_strides_neg, c->ma.o_strides.seq = -1)
/* the parts' byte count overflows size_t: 2^44 rows x 256 features x 2^30 parts */
static int m_mrg_parts_overflow(call *c, int entry) {
    (void)entry;
    if (SIZE_MAX != UINT64_MAX) return 0;
    c->p.batch = 1 << 12;
    c->p.heads_q = 1 << 12;
    c->p.heads_kv = 1;
    c->p.seq_q = 1 << 20;
    c->p.head_dim_v = TA_HEAD_DIM_MAX;
    c->ma.num_parts = 1 << 30;
    return 1;
}

static const bad_case k_cases[] = {
    {"problem NULL", E_ALL, TA_ERR_NULL_ARG, m_null_problem, "problem"},
    {"args NULL", E_CALLS, TA_ERR_NULL_ARG, m_null_args, "args"},
    {"bytes out-parameter NULL", E_FWS | E_BWS, TA_ERR_NULL_ARG, m_null_bytes, NULL},
    {"q NULL", E_CALLS, TA_ERR_NULL_ARG, m_null_q, "args.q"},
    {"k NULL", E_CALLS, TA_ERR_NULL_ARG, m_null_k, "args.k"},
    {"v NULL", E_CALLS, TA_ERR_NULL_ARG, m_null_v, "args.v"},
    {"o NULL", E_CALLS, TA_ERR_NULL_ARG, m_null_o, "args.o"},
    {"d_o NULL", E_BWD, TA_ERR_NULL_ARG, m_null_d_o, "args.d_o"},
    {"lse NULL in backward", E_BWD, TA_ERR_NULL_ARG, m_null_lse_bwd, "args.lse"},
    {"dq NULL", E_BWD, TA_ERR_NULL_ARG, m_null_dq, "args.dq"},
    {"dk NULL", E_BWD, TA_ERR_NULL_ARG, m_null_dk, "args.dk"},
    {"dv NULL", E_BWD, TA_ERR_NULL_ARG, m_null_dv, "args.dv"},
    {"batch 0", E_ALL, TA_ERR_BAD_SHAPE, m_batch_0, "batch"},
    {"heads_q 0", E_ALL, TA_ERR_BAD_SHAPE, m_heads_q_0, "heads_q"},
    {"heads_kv 0", E_ALL, TA_ERR_BAD_SHAPE, m_heads_kv_0, "heads_kv"},
    {"seq_q 0", E_ALL, TA_ERR_BAD_SHAPE, m_seq_q_0, "seq_q"},
    {"seq_k 0", E_ALL, TA_ERR_BAD_SHAPE, m_seq_k_0, "seq_k"},
    {"head_dim 0", E_ALL, TA_ERR_BAD_SHAPE, m_head_dim_0, "head_dim"},
    {"head_dim_v 0", E_ALL, TA_ERR_BAD_SHAPE, m_head_dim_v_0, "head_dim_v"},
    {"batch -1", E_ALL, TA_ERR_BAD_SHAPE, m_batch_neg, "batch"},
    {"heads_q -4", E_ALL, TA_ERR_BAD_SHAPE, m_heads_q_neg, "heads_q"},
    {"heads_kv -2", E_ALL, TA_ERR_BAD_SHAPE, m_heads_kv_neg, "heads_kv"},
    {"seq_q -5", E_ALL, TA_ERR_BAD_SHAPE, m_seq_q_neg, "seq_q"},
    {"seq_k INT32_MIN", E_ALL, TA_ERR_BAD_SHAPE, m_seq_k_neg, "seq_k"},
    {"head_dim -8", E_ALL, TA_ERR_BAD_SHAPE, m_head_dim_neg, "head_dim"},
    {"head_dim_v -1", E_ALL, TA_ERR_BAD_SHAPE, m_head_dim_v_neg, "head_dim_v"},
    {"heads_q 4 % heads_kv 3", E_ALL, TA_ERR_BAD_SHAPE, m_heads_not_divisible, "heads_q heads_kv"},
    {"heads_kv 4 > heads_q 2", E_ALL, TA_ERR_BAD_SHAPE, m_heads_kv_gt_q, "heads_q heads_kv"},
    {"head_dim 257", E_ALL, TA_ERR_UNSUPPORTED, m_head_dim_257, "head_dim"},
    {"head_dim_v 257", E_ALL, TA_ERR_UNSUPPORTED, m_head_dim_v_257, "head_dim_v"},
    {"seq_q TA_SEQ_MAX + 1", E_ALL, TA_ERR_OVERFLOW, m_seq_q_over, "seq_q"},
    {"seq_k INT32_MAX", E_ALL, TA_ERR_OVERFLOW, m_seq_k_over, "seq_k"},
    {"B*H*S_q overflows size_t", E_ALL, TA_ERR_OVERFLOW, m_elems_overflow, "lse"},
    {"B*H_kv*S_k*D overflows size_t", E_ALL, TA_ERR_OVERFLOW, m_kv_elems_overflow, "k"},
    {"q element count fits, byte count overflows", E_ALL, TA_ERR_OVERFLOW, m_bytes_overflow, "q"},
    {"B*H*S_q*D overflows size_t (lse fits)", E_ALL, TA_ERR_OVERFLOW, m_q_elems_overflow, "q"},
    {"B*H*S_q*D_v overflows size_t (q fits)", E_ALL, TA_ERR_OVERFLOW, m_o_elems_overflow, "o"},
    {"B*H_kv*S_k*D_v overflows size_t (k fits)", E_ALL, TA_ERR_OVERFLOW, m_v_elems_overflow, "v"},
    {"k element count fits, byte count overflows", E_ALL, TA_ERR_OVERFLOW, m_k_bytes_overflow,
     "k"},
    {"v element count fits, byte count overflows", E_ALL, TA_ERR_OVERFLOW, m_v_bytes_overflow,
     "v"},
    {"o element count fits, byte count overflows", E_ALL, TA_ERR_OVERFLOW, m_o_bytes_overflow,
     "o"},
    {"dtype 3", E_ALL, TA_ERR_BAD_ARG, m_dtype_3, "dtype"},
    {"dtype -1", E_ALL, TA_ERR_BAD_ARG, m_dtype_neg, "dtype"},
    {"precision 2", E_ALL, TA_ERR_BAD_ARG, m_precision_2, "precision"},
    {"backend 3", E_ALL, TA_ERR_BAD_ARG, m_backend_3, "backend"},
    {"backend -1", E_ALL, TA_ERR_BAD_ARG, m_backend_neg, "backend"},
    {"unknown flag bit 4", E_ALL, TA_ERR_BAD_ARG, m_flag_bit4, "flags"},
    {"window_left without TA_WINDOW", E_ALL, TA_ERR_BAD_ARG, m_window_left_no_flag, "window_left"},
    {"window_right without TA_WINDOW", E_ALL, TA_ERR_BAD_ARG, m_window_right_no_flag,
     "window_right"},
    {"q strides negative", E_CALLS, TA_ERR_BAD_ARG, m_q_stride_neg, "args.q_strides"},
    {"k rows alias (seq stride < D)", E_CALLS, TA_ERR_BAD_ARG, m_k_rows_alias, "args.k_strides"},
    {"dq heads alias rows (head stride = seq stride)", E_CALLS, TA_ERR_BAD_ARG, m_dq_heads_alias,
     "args.o_strides|args.dq_strides"},
    {"o strided into the next region (overlap)", E_CALLS, TA_ERR_BAD_ARG, m_o_strided_overlap,
     "args.o|args.dq"},
    {"v strides overflow", E_CALLS, TA_ERR_OVERFLOW, m_v_stride_overflow, "args.v_strides"},
    {"v batch stride INT64_MAX", E_CALLS, TA_ERR_OVERFLOW, m_v_stride_over_bound,
     "args.v_strides"},
    {"strided d_o overlaps dk", E_BWD, TA_ERR_BAD_ARG, m_dk_overlaps_strided_d_o, "args.d_o"},
    {"q strides {0, 0, D}: batch entries alias", E_CALLS, TA_ERR_BAD_ARG,
     m_q_strides_zero_batch_head, "args.q_strides"},
    {"d_o seq stride -1", E_BWD, TA_ERR_BAD_ARG, m_d_o_stride_neg, "args.d_o_strides"},
    {"dk head stride -3", E_BWD, TA_ERR_BAD_ARG, m_dk_stride_neg, "args.dk_strides"},
    {"dv batch stride -1", E_BWD, TA_ERR_BAD_ARG, m_dv_stride_neg, "args.dv_strides"},
    {"trace on the CPU backend (REF only)", E_CALLS, TA_ERR_UNSUPPORTED, m_trace_on_cpu,
     "args.trace"},
    {"order: strides before NULL pointers", E_CALLS, TA_ERR_BAD_ARG, m_order_strides_before_null,
     "args.k_strides"},
    {"unknown flag bit 31", E_ALL, TA_ERR_BAD_ARG, m_flag_bit31, "flags"},
    {"scale NaN", E_ALL, TA_ERR_BAD_ARG, m_scale_nan, "scale"},
    {"scale +inf", E_ALL, TA_ERR_BAD_ARG, m_scale_inf, "scale"},
    {"scale -inf", E_ALL, TA_ERR_BAD_ARG, m_scale_neg_inf, "scale"},
    {"conv_q without conv_k", E_ALL, TA_ERR_BAD_ARG, m_conv_q_only, "conv_q"},
    {"conv_k without conv_q", E_ALL, TA_ERR_BAD_ARG, m_conv_k_only, "conv_k"},
    {"conv_k even", E_ALL, TA_ERR_BAD_ARG, m_conv_k_even, "conv_k"},
    {"conv -1 x -1", E_ALL, TA_ERR_BAD_ARG, m_conv_neg, "conv_q"},
    {"conv_q -3", E_ALL, TA_ERR_BAD_ARG, m_conv_q_neg, "conv_q"},
    {"conv_k -3 with conv_q 3", E_ALL, TA_ERR_BAD_ARG, m_conv_k_neg, "conv_k"},
    {"tile_config -1", E_ALL, TA_ERR_BAD_ARG, m_tile_config_neg, "tile_config"},
    {"conv_q 17", E_ALL, TA_ERR_UNSUPPORTED, m_conv_q_17, "conv_q"},
    {"conv_k 33", E_ALL, TA_ERR_UNSUPPORTED, m_conv_k_33, "conv_k"},
    {"conv without TA_CAUSAL", E_ALL, TA_ERR_UNSUPPORTED, m_conv_no_causal, "flags"},
    {"block_q -64", E_ALL, TA_ERR_BAD_ARG, m_block_q_neg, "block_q"},
    {"block_k -1", E_ALL, TA_ERR_BAD_ARG, m_block_k_neg, "block_k"},
    {"block_q 257 (just above TA_BLOCK_MAX)", E_ALL, TA_ERR_UNSUPPORTED, m_block_q_257, "block_q"},
    {"block_k 4 (below TA_BLOCK_MIN)", E_ALL, TA_ERR_UNSUPPORTED, m_block_k_4, "block_k"},
    {"block_q 512 (above TA_BLOCK_MAX)", E_ALL, TA_ERR_UNSUPPORTED, m_block_q_512, "block_q"},
    {"block_k 7 (just below TA_BLOCK_MIN)", E_ALL, TA_ERR_UNSUPPORTED, m_block_k_7, "block_k"},
    {"block_q 8 too small for conv 5x1 backward halos", E_ALL, TA_ERR_UNSUPPORTED,
     m_block_q_bwd_halo, "block_q conv_q"},
    {"block_k 8 too small for conv 1x5 backward halos", E_ALL, TA_ERR_UNSUPPORTED,
     m_block_k_bwd_halo, "block_k conv_k"},
    {"block_q 8 too small for conv 16x1", E_ALL, TA_ERR_UNSUPPORTED, m_block_q_fwd_halo,
     "block_q conv_q"},
    {"workspace NULL", E_CALLS, TA_ERR_NULL_ARG, m_ws_null, "workspace"},
    {"workspace NULL, 0 bytes", E_CALLS, TA_ERR_NULL_ARG, m_ws_null_zero, "workspace"},
    {"workspace one byte short", E_CALLS, TA_ERR_WORKSPACE_SIZE, m_ws_short, "workspace_bytes"},
    {"workspace 0 bytes", E_CALLS, TA_ERR_WORKSPACE_SIZE, m_ws_zero, "workspace_bytes"},
    {"workspace misaligned", E_CALLS, TA_ERR_WORKSPACE_ALIGN, m_ws_misaligned, "workspace"},
    {"stream non-NULL on REF", E_CALLS, TA_ERR_BAD_ARG, m_stream, "stream"},
    {"q f32 at an odd address", E_CALLS, TA_ERR_BAD_ARG, m_q_odd, "args.q"},
    {"k f32 at +2 bytes", E_CALLS, TA_ERR_BAD_ARG, m_k_plus2, "args.k"},
    {"v f16 at an odd address", E_CALLS, TA_ERR_BAD_ARG, m_v_f16_odd, "args.v"},
    {"o f32 at +2 bytes", E_CALLS, TA_ERR_BAD_ARG, m_o_plus2, "args.o"},
    {"lse at an odd address", E_CALLS, TA_ERR_BAD_ARG, m_lse_odd, "args.lse"},
    {"dq f32 at +3 bytes", E_BWD, TA_ERR_BAD_ARG, m_dq_plus3, "args.dq"},
    {"dk bf16 at an odd address", E_BWD, TA_ERR_BAD_ARG, m_dk_bf16_odd, "args.dk"},
    {"d_o bf16 at an odd address", E_BWD, TA_ERR_BAD_ARG, m_d_o_bf16_odd, "args.d_o"},
    {"seqlens_k at an odd address", E_CALLS, TA_ERR_BAD_ARG, m_seqlens_odd, "args.seqlens_k"},
    {"o overlaps q", E_FWD, TA_ERR_BAD_ARG, m_o_over_q, "args.o args.q"},
    {"o == q (in place)", E_FWD, TA_ERR_BAD_ARG, m_o_is_q, "args.o args.q"},
    {"o starts in k's last element", E_FWD, TA_ERR_BAD_ARG, m_o_over_k_tail, "args.o args.k"},
    {"lse overlaps o", E_FWD, TA_ERR_BAD_ARG, m_lse_over_o, "args.lse args.o"},
    {"o starts at seqlens_k[1]", E_FWD, TA_ERR_BAD_ARG, m_o_over_seqlens, "args.o args.seqlens_k"},
    {"o ends in the workspace", E_FWD, TA_ERR_BAD_ARG, m_o_over_ws, "args.o workspace"},
    {"lse inside the workspace", E_FWD, TA_ERR_BAD_ARG, m_lse_over_ws, "args.lse workspace"},
    {"dq overlaps dk", E_BWD, TA_ERR_BAD_ARG, m_dq_over_dk, "args.dq args.dk"},
    {"dv overlaps v", E_BWD, TA_ERR_BAD_ARG, m_dv_over_v, "args.dv args.v"},
    {"dk overlaps lse", E_BWD, TA_ERR_BAD_ARG, m_dk_over_lse_in, "args.dk args.lse"},
    {"dq == d_o (in place)", E_BWD, TA_ERR_BAD_ARG, m_dq_over_d_o, "args.dq args.d_o"},
    {"dv ends in the workspace", E_BWD, TA_ERR_BAD_ARG, m_dv_over_ws, "args.dv workspace"},
    {"seqlens_k[1] = -1", E_CALLS, TA_ERR_BAD_ARG, m_seqlens_neg, "args.seqlens_k"},
    {"seqlens_k[1] = seq_k + 1", E_CALLS, TA_ERR_BAD_ARG, m_seqlens_big, "args.seqlens_k"},
    {"seqlens_k[0] = INT32_MIN", E_CALLS, TA_ERR_BAD_ARG, m_seqlens_min, "args.seqlens_k"},
    {"trace entries NULL, capacity 4", E_CALLS, TA_ERR_NULL_ARG, m_trace_null_entries,
     "args.trace->entries"},
    {"trace entries == o", E_FWD, TA_ERR_BAD_ARG, m_trace_is_o, "args.trace->entries args.o"},
    {"trace entries == dq", E_BWD, TA_ERR_BAD_ARG, m_trace_is_dq, "args.trace->entries args.dq"},
    {"trace entries inside q", E_CALLS, TA_ERR_BAD_ARG, m_trace_in_q, "args.trace->entries args.q"},
    {"trace entries inside the workspace", E_CALLS, TA_ERR_BAD_ARG, m_trace_in_ws,
     "args.trace->entries workspace"},
    {"trace entries misaligned by one byte", E_CALLS, TA_ERR_BAD_ARG, m_trace_misaligned,
     "args.trace->entries"},
    {"trace capacity * entry size overflows", E_CALLS, TA_ERR_OVERFLOW, m_trace_capacity_overflow,
     "args.trace->capacity"},
    {"trace struct inside lse", E_CALLS, TA_ERR_BAD_ARG, m_trace_struct_in_lse,
     "args.trace args.lse"},
    {"num_threads -1", E_ALL, TA_ERR_BAD_ARG, m_threads_neg1, "num_threads"},
    {"num_threads INT32_MIN", E_ALL, TA_ERR_BAD_ARG, m_threads_min, "num_threads"},
    {"num_threads TA_THREADS_MAX + 1", E_ALL, TA_ERR_UNSUPPORTED, m_threads_over, "num_threads"},
    {"num_threads TA_THREADS_MAX + 1 on CPU", E_ALL, TA_ERR_UNSUPPORTED, m_threads_over_cpu,
     "num_threads"},
    {"MTA conv_w NULL", E_CALLS, TA_ERR_NULL_ARG, m_mta_conv_w_null, "args.conv_w"},
    {"MTA dconv_w NULL", E_BWD, TA_ERR_NULL_ARG, m_mta_dconv_w_null, "args.dconv_w"},
    {"MTA conv_w at an odd address", E_CALLS, TA_ERR_BAD_ARG, m_mta_conv_w_odd, "args.conv_w"},
    {"MTA dconv_w at +2 bytes", E_BWD, TA_ERR_BAD_ARG, m_mta_dconv_w_plus2, "args.dconv_w"},
    {"MTA dconv_w == conv_w", E_BWD, TA_ERR_BAD_ARG, m_mta_dconv_w_is_conv_w,
     "args.dconv_w args.conv_w"},
    {"MTA dconv_w overlaps dv", E_BWD, TA_ERR_BAD_ARG, m_mta_dconv_w_over_dv,
     "args.dconv_w args.dv"},
    {"MTA o overlaps conv_w", E_FWD, TA_ERR_BAD_ARG, m_mta_o_over_conv_w, "args.o args.conv_w"},
    {"backend CPU (not implemented)", E_ALL, TA_ERR_BACKEND_UNAVAILABLE, m_backend_cpu, "backend"},
    {"backend CUDA without a device (the size queries need none)", E_CALLS,
     TA_ERR_BACKEND_UNAVAILABLE, m_backend_cuda, "backend"},
    {"order: shape before backend enum", E_ALL, TA_ERR_BAD_SHAPE, m_order_shape_before_backend,
     "seq_q"},
    {"order: dtype enum before size overflow", E_ALL, TA_ERR_BAD_ARG, m_order_args_before_overflow,
     "dtype"},
    {"order: backend before stream", E_CALLS, TA_ERR_BACKEND_UNAVAILABLE,
     m_order_backend_before_stream, "backend"},
    {"order: NULL q before misaligned workspace", E_CALLS, TA_ERR_NULL_ARG, m_order_null_before_ws,
     "args.q"},
    {"order: workspace size before seqlens_k", E_CALLS, TA_ERR_WORKSPACE_SIZE,
     m_order_ws_before_seqlens, "workspace_bytes"},
    {"num_splits -2", E_ALL | E_MRG, TA_ERR_BAD_ARG, m_num_splits_neg2, "num_splits"},
    {"num_splits INT32_MIN", E_ALL | E_MRG, TA_ERR_BAD_ARG, m_num_splits_min, "num_splits"},
    {"rope 3", E_ALL, TA_ERR_BAD_ARG, m_rope_3, "rope"},
    {"rope_pairs without rope", E_ALL, TA_ERR_BAD_ARG, m_rope_pairs_alone, "rope_pairs"},
    {"rope_pairs > head_dim / 2", E_ALL, TA_ERR_BAD_ARG, m_rope_pairs_over, "rope_pairs"},
    {"rope_rows 0", E_ALL, TA_ERR_BAD_ARG, m_rope_rows_0, "rope_rows"},
    {"rope_head_stride -1", E_ALL, TA_ERR_BAD_ARG, m_rope_head_stride_neg, "rope_head_stride"},
    {"rope cos NULL", E_CALLS, TA_ERR_NULL_ARG, m_rope_cos_null, "args.rope.cos"},
    {"rope sin misaligned", E_CALLS, TA_ERR_BAD_ARG, m_rope_sin_odd, "args.rope.sin"},
    {"rope: o overlaps cos", E_FWD, TA_ERR_BAD_ARG, m_rope_o_over_cos, "args.o args.rope.cos"},
    {"rope: dq overlaps sin", E_BWD, TA_ERR_BAD_ARG, m_rope_dq_over_sin, "args.dq args.rope.sin"},
    {"rope: pos_q value = rope_rows", E_CALLS, TA_ERR_BAD_ARG, m_rope_pos_q_bad, "args.rope.pos_q"},
    {"rope: no positions, rope_rows < seq_k", E_CALLS, TA_ERR_BAD_ARG, m_rope_rows_short,
     "rope_rows"},
    {"rope on CUDA's fast path, 30 pairs", E_FWS | E_BWS, TA_ERR_UNSUPPORTED, m_rope_cuda,
     "backend"},
    {"rope with query history rows, pos_q NULL", E_FWD, TA_ERR_BAD_ARG, m_rope_hist_no_pos,
     "args.rope.pos_q q_history"},
    {"rope with query history rows, pos_q[5] = 1 < q_history", E_FWD, TA_ERR_BAD_ARG,
     m_rope_hist_pos_low, "args.rope.pos_q[5]"},
    {"merge: problem NULL", E_MRG, TA_ERR_NULL_ARG, m_null_problem, "problem"},
    {"merge: args NULL", E_MRG, TA_ERR_NULL_ARG, m_null_args, "args"},
    {"merge: batch 0", E_MRG, TA_ERR_BAD_SHAPE, m_batch_0, "batch"},
    {"merge: stream on a host backend", E_MRG, TA_ERR_BAD_ARG, m_stream, "stream"},
    {"merge: o_parts NULL", E_MRG, TA_ERR_NULL_ARG, m_mrg_null_o_parts, "args.o_parts"},
    {"merge: lse_parts NULL", E_MRG, TA_ERR_NULL_ARG, m_mrg_null_lse_parts, "args.lse_parts"},
    {"merge: o NULL", E_MRG, TA_ERR_NULL_ARG, m_mrg_null_o, "args.o"},
    {"merge: num_parts 0", E_MRG, TA_ERR_BAD_ARG, m_mrg_parts_0, "args.num_parts"},
    {"merge: num_parts -1", E_MRG, TA_ERR_BAD_ARG, m_mrg_parts_neg, "args.num_parts"},
    {"merge: o is o_parts", E_MRG, TA_ERR_BAD_ARG, m_mrg_o_is_parts, "args.o args.o_parts"},
    {"merge: lse overlaps lse_parts", E_MRG, TA_ERR_BAD_ARG, m_mrg_lse_over_parts,
     "args.lse args.lse_parts"},
    {"merge: lse misaligned", E_MRG, TA_ERR_BAD_ARG, m_mrg_lse_odd, "args.lse"},
    {"merge: f16 o_parts misaligned", E_MRG, TA_ERR_BAD_ARG, m_mrg_parts_f16_odd,
     "args.o_parts"},
    {"merge: o_strides.seq -1", E_MRG, TA_ERR_BAD_ARG, m_mrg_o_strides_neg, "args.o_strides"},
    {"merge: parts' bytes overflow size_t", E_MRG, TA_ERR_OVERFLOW, m_mrg_parts_overflow,
     "args.num_parts"},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* ---- Running and checking one call ---- */

static ta_status invoke(const call *c, int entry) {
    const ta_problem *p = c->null_problem ? NULL : &c->p;
    size_t *bytes = c->null_bytes ? NULL : &g_bytes_out;
    switch (entry) {
    case E_FWS: return ta_fwd_workspace_size(p, c->be, bytes);
    case E_FWD:
        return ta_fwd(p, c->be, c->null_args ? NULL : &c->fa, c->ws, c->ws_bytes, c->stream);
    case E_BWS: return ta_bwd_workspace_size(p, c->be, bytes);
    case E_MRG: return ta_merge(p, c->be, c->null_args ? NULL : &c->ma, c->stream);
    default: return ta_bwd(p, c->be, c->null_args ? NULL : &c->ba, c->ws, c->ws_bytes, c->stream);
    }
}

/* Inputs restored from the pristine copy, outputs and out-parameters canary-filled. */
static void reset_arena(void) {
    int r;
    memcpy(A.base, A.pristine, A.bytes);
    for (r = R_FIRST_OUTPUT; r < R_COUNT; ++r)
        ta_canary_fill(reg(r), A.len[r]);
    ta_canary_fill(&g_bytes_out, sizeof g_bytes_out);
    g_trace.entries = (ta_trace_entry *)reg(R_TRACE);
    g_trace.capacity = TRACE_CAP;
    ta_canary_fill(&g_trace.count, sizeof g_trace.count);
}

/* After a refused call: nothing written anywhere. Returns 1 if all intact.
 * what == NULL: quiet (the self-test below). */
#define UNTOUCHED(cond, ...)                                                                       \
    do {                                                                                           \
        if (what) TA_CHECK(cond, __VA_ARGS__);                                                     \
        ok &= (cond) ? 1 : 0;                                                                      \
    } while (0)
static int check_untouched(const char *what) {
    int r, ok = 1;
    for (r = 0; r < R_COUNT; ++r) {
        const int intact = r >= R_FIRST_OUTPUT
                               ? ta_canary_intact(reg(r), A.len[r])
                               : memcmp(reg(r), A.pristine + A.off[r], A.len[r]) == 0;
        UNTOUCHED(intact, "%s: %s %s was written", what, r >= R_FIRST_OUTPUT ? "output" : "input",
                  k_region_names[r]);
    }
    /* the gaps between regions too */
    for (r = 0; r + 1 < R_COUNT; ++r) {
        const size_t end = A.off[r] + A.len[r];
        const int intact = memcmp(A.base + end, A.pristine + end, A.off[r + 1] - end) == 0;
        UNTOUCHED(intact, "%s: bytes after %s were written", what, k_region_names[r]);
    }
    UNTOUCHED(ta_canary_intact(&g_bytes_out, sizeof g_bytes_out), "%s: bytes out-parameter written",
              what);
    UNTOUCHED(ta_canary_intact(&g_trace.count, sizeof g_trace.count) &&
                  g_trace.entries == (ta_trace_entry *)reg(R_TRACE) &&
                  g_trace.capacity == TRACE_CAP,
              "%s: trace struct written", what);
    return ok;
}

/* The checker sees a single changed byte anywhere: in each region (first and last
 * byte), in a gap, in the bytes out-parameter and in the trace count. */
static void self_test_untouched(void) {
    int r, end;
    reset_arena();
    TA_CHECK(check_untouched(NULL), "self-test: a fresh arena reads as written");
    for (r = 0; r < R_COUNT; ++r)
        for (end = 0; end < 2; ++end) {
            unsigned char *b = reg_b(r) + (end ? A.len[r] - 1 : 0);
            reset_arena();
            *b ^= 0x01;
            TA_CHECK(!check_untouched(NULL), "self-test: a write to %s byte %s not seen",
                     k_region_names[r], end ? "last" : "first");
        }
    reset_arena();
    reg_b(R_Q)[A.len[R_Q]] ^= 0x01; /* first byte of the gap after q */
    TA_CHECK(!check_untouched(NULL), "self-test: a write in a gap not seen");
    reset_arena();
    g_bytes_out = 0;
    TA_CHECK(!check_untouched(NULL), "self-test: a write to the bytes out-parameter not seen");
    reset_arena();
    g_trace.count = 0;
    TA_CHECK(!check_untouched(NULL), "self-test: a write to the trace count not seen");
}

/* ---- Explanations: ta_explain_* on the same call ---- */

static ta_status explain(const call *c, int entry, char *buf, size_t len) {
    const ta_problem *p = c->null_problem ? NULL : &c->p;
    switch (entry) {
    case E_FWS: return ta_explain_fwd_workspace_size(p, c->be, buf, len);
    case E_FWD:
        return ta_explain_fwd(p, c->be, c->null_args ? NULL : &c->fa, c->ws, c->ws_bytes, c->stream,
                              buf, len);
    case E_BWS: return ta_explain_bwd_workspace_size(p, c->be, buf, len);
    case E_MRG:
        return ta_explain_merge(p, c->be, c->null_args ? NULL : &c->ma, c->stream, buf, len);
    default:
        return ta_explain_bwd(p, c->be, c->null_args ? NULL : &c->ba, c->ws, c->ws_bytes, c->stream,
                              buf, len);
    }
}

static int is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* 1 if name occurs in msg as a whole name (not as part of a longer one). */
static int has_name(const char *msg, const char *name, size_t len) {
    const char *at = msg;
    while ((at = strstr(at, name)) != NULL) {
        const char *end = at + len;
        if ((at == msg || !is_name_char(at[-1])) && !is_name_char(*end) &&
            strncmp(end, "->", 2) != 0)
            return 1;
        ++at;
    }
    return 0;
}

/* The first name of want (space-separated) that msg lacks, or NULL if it has all. */
static const char *missing_name(const char *msg, const char *want, char *name, size_t cap) {
    while (*want) {
        size_t n = 0;
        while (want[n] && want[n] != ' ')
            ++n;
        if (n >= cap) n = cap - 1;
        memcpy(name, want, n);
        name[n] = '\0';
        if (!has_name(msg, name, n)) return name;
        want += n;
        while (*want == ' ')
            ++want;
    }
    return NULL;
}

/* The explanation of a refused call: same status, names the case's fields and the
 * status, writes nothing but its buffer (checked by the caller's check_untouched). */
static void check_explanation(const bad_case *k, const call *c, int e, ta_status st,
                              const char *what, int print) {
    char msg[256], name[64], want[128];
    const char *missing, *status_name = ta_status_string(st), *bar;
    const ta_status st_x = explain(c, e, msg, sizeof msg);
    if (!k->field) return; /* NULL bytes out-parameter: the explain calls take none */
    snprintf(want, sizeof want, "%s", k->field);
    bar = strchr(k->field, '|');
    if (bar && (e & (E_BWS | E_BWD))) snprintf(want, sizeof want, "%s", bar + 1);
    if (bar && !(e & (E_BWS | E_BWD))) want[bar - k->field] = '\0';
    TA_CHECK(st_x == st, "%s: ta_explain says %d, the call %d", what, (int)st_x, (int)st);
    missing = missing_name(msg, want, name, sizeof name);
    TA_CHECK(missing == NULL, "%s: explanation \"%s\" does not name %s", what, msg,
             missing ? missing : "");
    TA_CHECK(strncmp(strchr(msg, '(') ? strrchr(msg, '(') + 1 : msg, status_name,
                     (size_t)(strchr(status_name, ':') - status_name)) == 0,
             "%s: explanation \"%s\" does not end with the status name", what, msg);
    if (print) printf("  %-52s %s\n", k->name, msg);
}

/* Runs case k on every entry point it names; returns the number of calls made. */
static int run_case(const bad_case *k, int *skipped) {
    int e, calls = 0;
    for (e = E_FWS; e <= E_MRG; e <<= 1) {
        call c;
        ta_status st;
        char what[200];
        if (!(k->entries & e)) continue;
        reset_arena();
        base_call(&c);
        if (!k->mutate(&c, e)) {
            printf("  skipped: %-48s %s (not applicable here)\n", k->name, entry_name(e));
            ++*skipped;
            continue;
        }
        snprintf(what, sizeof what, "case \"%s\" on %s", k->name, entry_name(e));
        st = invoke(&c, e);
        TA_CHECK(st == k->expect, "%s: got %d (%s), expected %d (%s)", what, (int)st,
                 ta_status_string(st), (int)k->expect, ta_status_string(k->expect));
        check_explanation(k, &c, e, st, what,
                          calls == 0 && (k->mutate != m_ws_misaligned || g_misalign == 1));
        check_untouched(what);
        ++calls;
    }
    return calls;
}

/* ---- Arena set-up ---- */

static size_t round64(size_t n) { return (n + 63u) & ~(size_t)63u; }

static void arena_init(ta_rng *rng) {
    const size_t f = sizeof(float);
    const size_t n_q = (size_t)B_ * H_ * SQ_ * D_, n_k = (size_t)B_ * HKV_ * SK_ * D_;
    const size_t n_v = (size_t)B_ * HKV_ * SK_ * DV_, n_o = (size_t)B_ * H_ * SQ_ * DV_;
    const size_t n_lse = (size_t)B_ * H_ * SQ_;
    size_t need_ws = 0, off = 0, spare, need;
    int r, dt;
    /* the workspace region must hold every dtype's need plus a misalignment of 63 */
    for (dt = 0; dt < 3; ++dt) {
        ta_problem p = base_problem();
        p.dtype = (ta_dtype)dt;
        need = 0;
        TA_CHECK(ta_fwd_workspace_size(&p, TA_BACKEND_REF, &need) == TA_OK, "fwd size query");
        if (need > need_ws) need_ws = need;
        TA_CHECK(ta_bwd_workspace_size(&p, TA_BACKEND_REF, &need) == TA_OK, "bwd size query");
        if (need > need_ws) need_ws = need;
        if (dt == TA_F32) {
            ta_fwd_workspace_size(&p, TA_BACKEND_REF, &A.need_fwd);
            ta_bwd_workspace_size(&p, TA_BACKEND_REF, &A.need_bwd);
        }
    }
    spare = round64(n_o * f > n_v * f ? n_o * f : n_v * f);
    A.len[R_Q] = n_q * f;
    A.len[R_K] = n_k * f;
    A.len[R_V] = n_v * f;
    A.len[R_O_IN] = n_o * f;
    A.len[R_D_O] = n_o * f;
    A.len[R_LSE_IN] = n_lse * f;
    A.len[R_SEQLENS] = B_ * sizeof(int32_t);
    A.len[R_CONV_W] = (size_t)H_ * 3 * 5 * f;
    A.len[R_O] = n_o * f;
    A.len[R_LSE] = n_lse * f;
    A.len[R_DQ] = n_q * f;
    A.len[R_DK] = n_k * f;
    A.len[R_DV] = n_v * f;
    A.len[R_DCONV_W] = A.len[R_CONV_W];
    A.len[R_TRACE] = TRACE_CAP * sizeof(ta_trace_entry);
    A.len[R_SPARE] = spare;
    A.len[R_WS] = round64(need_ws) + 64;
    for (r = 0; r < R_COUNT; ++r) {
        /* the spare region (a multiple of 64 bytes) ends where the workspace starts,
         * so a buffer can end a few bytes into the workspace (overlap cases) */
        A.off[r] = r == R_WS ? off : round64(off + GAP);
        off = A.off[r] + A.len[r];
    }
    A.bytes = round64(off + GAP);
    A.base = (unsigned char *)ta_test_alloc(A.bytes);
    A.pristine = (unsigned char *)ta_test_alloc(A.bytes);
    /* inputs: random values, o and lse as a forward would give them; gaps: a pattern */
    memset(A.base, 0x3C, A.bytes);
    ta_fill_uniform(rng, reg(R_Q), TA_F32, n_q, -1.0f, 1.0f);
    ta_fill_uniform(rng, reg(R_K), TA_F32, n_k, -1.0f, 1.0f);
    ta_fill_uniform(rng, reg(R_V), TA_F32, n_v, -1.0f, 1.0f);
    ta_fill_uniform(rng, reg(R_O_IN), TA_F32, n_o, -1.0f, 1.0f);
    ta_fill_uniform(rng, reg(R_D_O), TA_F32, n_o, -1.0f, 1.0f);
    ta_fill_uniform(rng, reg(R_LSE_IN), TA_F32, n_lse, 0.5f, 2.0f);
    ta_fill_uniform(rng, reg(R_CONV_W), TA_F32, A.len[R_CONV_W] / f, -1.0f, 1.0f);
    ((int32_t *)reg(R_SEQLENS))[0] = SK_;
    ((int32_t *)reg(R_SEQLENS))[1] = 4;
    memcpy(A.pristine, A.base, A.bytes);
}

static void arena_free(void) {
    ta_test_free(A.base);
    ta_test_free(A.pristine);
}

/* ---- ta_status_string ---- */

static void check_status_strings(void) {
    static const struct {
        ta_status s;
        const char *name;
    } codes[] = {{TA_OK, "TA_OK"},
                 {TA_ERR_NULL_ARG, "TA_ERR_NULL_ARG"},
                 {TA_ERR_BAD_SHAPE, "TA_ERR_BAD_SHAPE"},
                 {TA_ERR_BAD_ARG, "TA_ERR_BAD_ARG"},
                 {TA_ERR_UNSUPPORTED, "TA_ERR_UNSUPPORTED"},
                 {TA_ERR_OVERFLOW, "TA_ERR_OVERFLOW"},
                 {TA_ERR_WORKSPACE_SIZE, "TA_ERR_WORKSPACE_SIZE"},
                 {TA_ERR_WORKSPACE_ALIGN, "TA_ERR_WORKSPACE_ALIGN"},
                 {TA_ERR_BACKEND_UNAVAILABLE, "TA_ERR_BACKEND_UNAVAILABLE"},
                 {TA_ERR_DEVICE, "TA_ERR_DEVICE"}};
    static const int unknown[] = {1, 2, -10, -100, 12345, INT32_MIN, INT32_MAX};
    const int n = (int)(sizeof codes / sizeof codes[0]);
    const char *unk = ta_status_string((ta_status)-10);
    int i, j;
    for (i = 0; i < n; ++i) {
        const char *s = ta_status_string(codes[i].s);
        const size_t len = strlen(codes[i].name);
        TA_CHECK(s != NULL, "ta_status_string(%d) is NULL", (int)codes[i].s);
        if (!s) continue;
        TA_CHECK(strncmp(s, codes[i].name, len) == 0 && (s[len] == '\0' || s[len] == ':'),
                 "ta_status_string(%d) = \"%s\" does not start with %s", (int)codes[i].s, s,
                 codes[i].name);
        for (j = 0; j < i; ++j)
            TA_CHECK(strcmp(s, ta_status_string(codes[j].s)) != 0,
                     "ta_status_string(%d) == ta_status_string(%d)", (int)codes[i].s,
                     (int)codes[j].s);
        TA_CHECK(!unk || strcmp(s, unk) != 0, "ta_status_string(%d) equals the unknown string",
                 (int)codes[i].s);
    }
    for (i = 0; i < (int)(sizeof unknown / sizeof unknown[0]); ++i) {
        const char *s = ta_status_string((ta_status)unknown[i]);
        TA_CHECK(s != NULL && strncmp(s, "TA_ERR_UNKNOWN", 14) == 0,
                 "ta_status_string(%d) = \"%s\", expected TA_ERR_UNKNOWN", unknown[i],
                 s ? s : "(null)");
    }
    TA_CHECK(ta_backend_available((ta_backend)3) == 0, "ta_backend_available(3) != 0");
    TA_CHECK(ta_backend_available(TA_BACKEND_REF) == 1, "ta_backend_available(REF) != 1");
}

/* ---- After all the refusals, a valid call still works ---- */

static int all_finite(const float *x, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void check_valid_calls(void) {
    call c;
    ta_status st;
    size_t bytes = 0;
    reset_arena();
    base_call(&c);
    st = ta_fwd_workspace_size(&c.p, TA_BACKEND_REF, &g_bytes_out);
    TA_CHECK(st == TA_OK && g_bytes_out == A.need_fwd, "valid fwd size query: %s, %zu bytes",
             ta_status_string(st), g_bytes_out);
    st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL);
    TA_CHECK(st == TA_OK, "valid ta_fwd: %s", ta_status_string(st));
    if (st == TA_OK) {
        TA_CHECK(all_finite((const float *)reg(R_O), A.len[R_O] / sizeof(float)),
                 "valid ta_fwd: o not finite (or not written)");
        TA_CHECK(all_finite((const float *)reg(R_LSE), A.len[R_LSE] / sizeof(float)),
                 "valid ta_fwd: lse not finite (every row sees a key)");
        TA_CHECK(g_trace.count > 0 && g_trace.count <= TRACE_CAP, "valid ta_fwd: trace count %zu",
                 g_trace.count);
        /* the backward takes the forward's o and lse */
        memcpy(reg(R_O_IN), reg(R_O), A.len[R_O]);
        memcpy(reg(R_LSE_IN), reg(R_LSE), A.len[R_LSE]);
    }
    /* lse is optional in the forward */
    c.fa.lse = NULL;
    st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL);
    TA_CHECK(st == TA_OK, "valid ta_fwd without lse: %s", ta_status_string(st));
    st = ta_bwd_workspace_size(&c.p, TA_BACKEND_REF, &bytes);
    TA_CHECK(st == TA_OK && bytes == A.need_bwd, "valid bwd size query: %s", ta_status_string(st));
    st = ta_bwd(&c.p, TA_BACKEND_REF, &c.ba, c.ws, A.need_bwd, NULL);
    TA_CHECK(st == TA_OK, "valid ta_bwd: %s", ta_status_string(st));
    if (st == TA_OK) {
        TA_CHECK(all_finite((const float *)reg(R_DQ), A.len[R_DQ] / sizeof(float)) &&
                     all_finite((const float *)reg(R_DK), A.len[R_DK] / sizeof(float)) &&
                     all_finite((const float *)reg(R_DV), A.len[R_DV] / sizeof(float)),
                 "valid ta_bwd: dq, dk or dv not finite (or not written)");
    }
    /* split-K: valid counts run (the workspace of num_splits 3 holds its parts);
     * ta_merge of one part gives the part back */
    {
        size_t need = 0;
        int32_t n;
        for (n = -1; n <= 3; ++n) {
            base_call(&c);
            c.p.num_splits = n;
            st = ta_fwd_workspace_size(&c.p, TA_BACKEND_REF, &need);
            TA_CHECK(st == TA_OK && need <= A.len[R_WS], "split-K size query %d: %s", n,
                     ta_status_string(st));
            st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, need, NULL);
            TA_CHECK(st == TA_OK, "valid split-K ta_fwd, num_splits %d: %s", n,
                     ta_status_string(st));
        }
        base_call(&c);
        st = ta_merge(&c.p, TA_BACKEND_REF, &c.ma, NULL);
        TA_CHECK(st == TA_OK && memcmp(reg(R_O), reg(R_O_IN), A.len[R_O]) == 0 &&
                     memcmp(reg(R_LSE), reg(R_LSE_IN), A.len[R_LSE]) == 0,
                 "valid ta_merge of one part: %s, or not the part's bytes", ta_status_string(st));
    }
    /* TA_PRECISION_FAST with a tile_config on REF: ignored (only the CUDA fast
     * kernels read them), so the exact call's bytes (docs/api.md) */
    {
        unsigned char *o_exact = (unsigned char *)malloc(A.len[R_O]);
        TA_CHECK(o_exact != NULL, "malloc");
        if (o_exact) {
            base_call(&c);
            st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL);
            TA_CHECK(st == TA_OK, "exact ta_fwd: %s", ta_status_string(st));
            memcpy(o_exact, reg(R_O), A.len[R_O]);
            memset(reg(R_O), 0x5A, A.len[R_O]);
            c.p.precision = TA_PRECISION_FAST;
            c.p.tile_config = 3;
            st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL);
            TA_CHECK(st == TA_OK && memcmp(o_exact, reg(R_O), A.len[R_O]) == 0,
                     "fast-mode ta_fwd on REF: %s, or not the exact call's bytes",
                     ta_status_string(st));
            free(o_exact);
        }
    }
}

/* ta_explain_* on valid calls says ok; the buffer is cut, terminated, and may be
 * NULL or of length 0 (nothing written); the byte past buf_len is never touched. */
static void check_explain_buffer(void) {
    char msg[64];
    call c;
    ta_status st;
    reset_arena();
    base_call(&c);
    st = ta_explain_fwd(&c.p, c.be, &c.fa, c.ws, A.need_fwd, NULL, msg, sizeof msg);
    TA_CHECK(st == TA_OK && strncmp(msg, "ok", 2) == 0, "valid fwd explained as %d \"%s\"", (int)st,
             msg);
    st = ta_explain_bwd(&c.p, c.be, &c.ba, c.ws, A.need_bwd, NULL, msg, sizeof msg);
    TA_CHECK(st == TA_OK && strncmp(msg, "ok", 2) == 0, "valid bwd explained as %d \"%s\"", (int)st,
             msg);
    TA_CHECK(ta_explain_fwd_workspace_size(&c.p, c.be, msg, sizeof msg) == TA_OK &&
                 ta_explain_bwd_workspace_size(&c.p, c.be, msg, sizeof msg) == TA_OK,
             "valid size queries explained as refused");
    TA_CHECK(check_untouched(NULL), "ta_explain on valid calls wrote an output");
    c.p.heads_kv = 0;
    memset(msg, 'x', sizeof msg);
    st = ta_explain_fwd(&c.p, c.be, &c.fa, c.ws, A.need_fwd, NULL, msg, 9);
    TA_CHECK(st == TA_ERR_BAD_SHAPE && strcmp(msg, "heads_kv") == 0 && msg[9] == 'x',
             "explanation cut to 8 characters: %d \"%.12s\"", (int)st, msg);
    memset(msg, 'x', sizeof msg);
    st = ta_explain_fwd_workspace_size(&c.p, c.be, msg, 1);
    TA_CHECK(st == TA_ERR_BAD_SHAPE && msg[0] == '\0' && msg[1] == 'x',
             "explanation into 1 byte: %d", (int)st);
    st = ta_explain_bwd_workspace_size(&c.p, c.be, msg, 0);
    TA_CHECK(st == TA_ERR_BAD_SHAPE && msg[0] == '\0' && msg[1] == 'x',
             "explanation into 0 bytes wrote: %d", (int)st);
    st = ta_explain_bwd(&c.p, c.be, &c.ba, c.ws, A.need_bwd, NULL, NULL, 100);
    TA_CHECK(st == TA_ERR_BAD_SHAPE, "explanation into NULL: %d", (int)st);
}

/* A trace of capacity 1: one entry written, count keeps counting, and the entry
 * after it (a canary) untouched. */
static void check_trace_capacity_one(void) {
    ta_trace_entry entries[2];
    ta_trace tr;
    call c;
    ta_status st;
    reset_arena();
    base_call(&c);
    ta_canary_fill(entries, sizeof entries);
    tr.entries = entries;
    tr.capacity = 1;
    tr.count = 12345;
    c.fa.trace = c.ba.trace = &tr;
    st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL);
    TA_CHECK(st == TA_OK, "trace capacity 1: ta_fwd %s", ta_status_string(st));
    TA_CHECK(tr.count > 1, "trace capacity 1: count %zu, expected every pair counted", tr.count);
    TA_CHECK(!ta_canary_intact(&entries[0], sizeof entries[0]) && entries[0].pass == TA_PASS_FWD,
             "trace capacity 1: entry 0 not written");
    TA_CHECK(ta_canary_intact(&entries[1], sizeof entries[1]),
             "trace capacity 1: the entry past the capacity was written");
    ta_canary_fill(entries, sizeof entries);
    tr.count = 0;
    st = ta_bwd(&c.p, TA_BACKEND_REF, &c.ba, c.ws, A.need_bwd, NULL);
    TA_CHECK(st == TA_OK && tr.count > 1 && ta_canary_intact(&entries[1], sizeof entries[1]),
             "trace capacity 1 (backward): %s, count %zu, canary %s", ta_status_string(st),
             tr.count, ta_canary_intact(&entries[1], sizeof entries[1]) ? "intact" : "written");
}

/* Tile sizes need not be powers of two: any integer in [TA_BLOCK_MIN, TA_BLOCK_MAX]
 * is accepted. With S_k = 7 every block_k here is one K tile, as the default 64 is,
 * and block_q never changes bits, so o and lse equal the default's bit for bit. */
static void check_non_pow2_blocks(void) {
    static const int32_t blocks[][2] = {
        {9, 54}, {255, 13}, {TA_BLOCK_MIN, TA_BLOCK_MAX}, {100, 63}};
    const size_t n_o = A.len[R_O], n_lse = A.len[R_LSE];
    unsigned char *o_default = (unsigned char *)malloc(n_o + n_lse);
    call c;
    ta_status st;
    size_t bytes = 0, i;
    void *ws;
    reset_arena();
    base_call(&c);
    st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, c.ws_bytes, NULL);
    TA_CHECK(st == TA_OK, "default blocks: ta_fwd %s", ta_status_string(st));
    memcpy(o_default, reg(R_O), n_o);
    memcpy(o_default + n_o, reg(R_LSE), n_lse);
    for (i = 0; i < sizeof blocks / sizeof blocks[0]; ++i) {
        reset_arena();
        base_call(&c);
        c.p.block_q = blocks[i][0];
        c.p.block_k = blocks[i][1];
        /* a workspace of the queried size (larger tiles may need more than the arena's) */
        st = ta_fwd_workspace_size(&c.p, TA_BACKEND_REF, &bytes);
        TA_CHECK(st == TA_OK, "block_q %d block_k %d: fwd size query %s", (int)c.p.block_q,
                 (int)c.p.block_k, ta_status_string(st));
        ws = ta_test_alloc(bytes);
        st = ta_fwd(&c.p, TA_BACKEND_REF, &c.fa, ws, bytes, NULL);
        ta_test_free(ws);
        TA_CHECK(st == TA_OK, "block_q %d block_k %d: ta_fwd %s", (int)c.p.block_q,
                 (int)c.p.block_k, ta_status_string(st));
        TA_CHECK(st != TA_OK || (memcmp(reg(R_O), o_default, n_o) == 0 &&
                                 memcmp(reg(R_LSE), o_default + n_o, n_lse) == 0),
                 "block_q %d block_k %d: o/lse differ from the default tiles'", (int)c.p.block_q,
                 (int)c.p.block_k);
        st = ta_bwd_workspace_size(&c.p, TA_BACKEND_REF, &bytes);
        TA_CHECK(st == TA_OK, "block_q %d block_k %d: bwd size query %s", (int)c.p.block_q,
                 (int)c.p.block_k, ta_status_string(st));
        ws = ta_test_alloc(bytes);
        st = ta_bwd(&c.p, TA_BACKEND_REF, &c.ba, ws, bytes, NULL);
        ta_test_free(ws);
        TA_CHECK(st == TA_OK, "block_q %d block_k %d: ta_bwd %s", (int)c.p.block_q,
                 (int)c.p.block_k, ta_status_string(st));
    }
    free(o_default);
}

/* ta_tune_fwd's own arguments, after ta_fwd's checks pass (docs/api.md, "Tuning"):
 * out NULL or misaligned, reps outside [1, TA_TUNE_REPS_MAX]; then REF has nothing
 * to tune. *out is never written. */
static void check_tune_args(void) {
    static const int32_t bad_reps[4] = {0, -1, TA_TUNE_REPS_MAX + 1, INT32_MAX};
    ta_tune_result res[2];
    unsigned char *misaligned = (unsigned char *)&res[0] + 2;
    call c;
    int i;
    reset_arena();
    base_call(&c);
    memset(res, 0xA5, sizeof res);
    TA_CHECK(ta_tune_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL, 1, NULL) ==
                 TA_ERR_NULL_ARG,
             "ta_tune_fwd out NULL");
    TA_CHECK(ta_tune_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL, 1,
                         (ta_tune_result *)(void *)misaligned) == TA_ERR_BAD_ARG,
             "ta_tune_fwd out misaligned");
    for (i = 0; i < 4; ++i)
        TA_CHECK(ta_tune_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL, bad_reps[i],
                             &res[0]) == TA_ERR_BAD_ARG,
                 "ta_tune_fwd reps %d", (int)bad_reps[i]);
    TA_CHECK(ta_tune_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, A.need_fwd, NULL, TA_TUNE_REPS_MAX,
                         &res[0]) == TA_ERR_UNSUPPORTED,
             "ta_tune_fwd on REF: nothing to tune");
    TA_CHECK(ta_tune_fwd(&c.p, TA_BACKEND_REF, &c.fa, c.ws, 1, NULL, 0, NULL) ==
                 TA_ERR_WORKSPACE_SIZE,
             "ta_tune_fwd: ta_fwd's checks come first");
    for (i = 0; i < (int)sizeof res; ++i)
        TA_CHECK(((unsigned char *)res)[i] == 0xA5, "ta_tune_fwd wrote its out on a refusal");
}

int main(void) {
    ta_rng rng;
    int i, calls = 0, skipped = 0, cases_run = 0;
    ta_rng_seed(&rng, ta_test_seed("test_bad_input"));
    arena_init(&rng);
    self_test_untouched();
    for (i = 0; i < N_CASES; ++i) {
        const int failures_before = ta_test_failures;
        int n;
        if (k_cases[i].mutate == m_ws_misaligned) {
            n = 0;
            for (g_misalign = 1; g_misalign < TA_WORKSPACE_ALIGN; ++g_misalign)
                n += run_case(&k_cases[i], &skipped);
        } else {
            n = run_case(&k_cases[i], &skipped);
        }
        calls += n;
        cases_run += n > 0;
        if (ta_test_failures != failures_before)
            fprintf(stderr, "  FAILED case: %s\n", k_cases[i].name);
    }
    printf("test_bad_input: %d cases (%d run), %d invalid calls, %d skipped; workspace fwd %zu "
           "bytes, bwd %zu bytes\n",
           N_CASES, cases_run, calls, skipped, A.need_fwd, A.need_bwd);
    TA_CHECK(cases_run >= 40, "only %d distinct invalid cases ran", cases_run);
    check_status_strings();
    check_tune_args();
    check_valid_calls();
    check_explain_buffer();
    check_trace_capacity_one();
    check_non_pow2_blocks();
    arena_free();
    return ta_test_finish("test_bad_input");
}
