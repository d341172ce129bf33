/*
 * CUDA fast mode (TA_PRECISION_FAST) of f16 / bf16 SDPA problems, label cuda:
 * the tensor-core forward (cuda/ta_cuda_fast_fwd.cu) and ta_bwd in fast mode
 * (the exact kernels until the tensor-core backward lands; the checks hold for
 * both):
 *
 *  1. accuracy: random problems (f16 and bf16; D = D_v in {64, 96, 128, 256};
 *     causal or not; seqlens_k (0, partial, full); sliding windows; GQA;
 *     S_q != S_k, odd and prime lengths; default and explicit scales, negative
 *     too; [B, H, S, D] or, one problem in four, [B, S, H, D] tensors; each
 *     draws its tile_config, every candidate of the table) against the float64
 *     oracle. Every o element's error, divided by the oracle's magnitude o_mag
 *     (oracle.h), must stay under TA_FAST_O_BOUND(dtype), lse's (over lse_mag)
 *     under TA_FAST_LSE_BOUND; a row that sees no key must give o = 0 exactly
 *     and lse = -inf.
 *     Backward, on the problems whose oracle is cheap enough (B H_q S_q S_k D
 *     <= TA_FAST_BWD_MAX_WORK, most of them): random d_o (drawn after the
 *     inputs: the seed replays it), ta_bwd on the library's own o and lse, dq,
 *     dk, dv poisoned with NaN bytes and the workspace (of the queried size)
 *     with another pattern first. Every gradient element's error, less its
 *     underflow slack (TA_FAST_TINY), over the oracle's magnitude
 *     (ta_oracle_bwd_mag; D_i from the stored o on both sides) must stay under
 *     TA_FAST_DQ_BOUND, TA_FAST_DK_BOUND, TA_FAST_DV_BOUND; an element with no
 *     visible pair must be 0 exactly (dk = dv = 0 for keys at or past
 *     seqlens_k or seen by no row, dq = 0 for rows that see no key).
 *     The largest errors of both passes are printed per dtype and head dim
 *     (docs/exactness.md quotes them).
 *  2. determinism: one problem run 10 times (outputs poisoned with another
 *     pattern each time): identical bytes; and without lse: the same o. Its
 *     backward likewise (dq, dk, dv and the workspace poisoned anew): identical
 *     bytes; with a workspace one byte short of ta_bwd_workspace_size's answer
 *     TA_ERR_WORKSPACE_SIZE, dq, dk, dv untouched.
 *  3. CUDA graphs: ta_fwd captured on a created stream (global capture mode),
 *     the graph replayed twice: the bytes of a direct call; ta_bwd likewise.
 *  4. unsupported in fast mode: D = 80 and a tile_config past each head dim's
 *     candidates (both passes' size queries say TA_ERR_UNSUPPORTED, also
 *     without a GPU; -1 is TA_ERR_BAD_ARG), a q row stride that is not a
 *     multiple of 8 elements, a q base off 16 bytes, split-K on a
 *     warp-specialised candidate: TA_ERR_UNSUPPORTED with o and lse untouched.
 *  Part 1's problems include split-K ones (a fifth: 2..6 parts or
 *  TA_SPLITS_AUTO, on the mma.sync candidates, merged by the merge kernel).
 *
 *   test_cuda_fast [--count N] [--problem N]     TA_SEED replays a run.
 * Without a CUDA device: prints "no CUDA device: skipped" (after part 4's size
 * queries) and exits 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "oracle.h"
#include "test_cuda_util.h"
#include "test_util.h"
#include "tileattn.h"

/* Bounds (docs/exactness.md): o errs by p's rounding to the storage type (one
 * unit roundoff u of each term of sum_j p_ij v_j) and o's own rounding (u |o|),
 * so 2u of the magnitude; lse by f32 arithmetic only. */
#define TA_FAST_U(dt)       ((dt) == TA_BF16 ? 0x1p-8 : 0x1p-11)
#define TA_FAST_O_BOUND(dt) (2.0 * TA_FAST_U(dt))
#define TA_FAST_LSE_BOUND   1e-5

/* Backward bounds, one per gradient: each element's error over the oracle's
 * magnitude (ta_oracle_bwd_mag: P weighted by the size of its exponent, |dP|
 * and |D| instead of dP - D), once its underflow slack is taken off. The model
 * allows a u for P and one for dS (each rounded to the storage type before its
 * product, as in FlashAttention), the gradient's own rounding and D_i from the
 * stored o; the magnitude overstates what that costs dq and dk (its exponent
 * weights), less so dv. Measured on an H100 (wgmma backward, 169 problems,
 * docs/exactness.md section 9): at most 0.03u for dq and dk, 0.2u for dv; the
 * bounds keep about 8x and 5x of room. */
#define TA_FAST_DQ_BOUND(dt) (0.25 * TA_FAST_U(dt))
#define TA_FAST_DK_BOUND(dt) (0.25 * TA_FAST_U(dt))
#define TA_FAST_DV_BOUND(dt) (1.0 * TA_FAST_U(dt))
/* The underflow slack (grad_underflow): below 2^-14 an f16 rounding errs by up
 * to half a subnormal step, 2^-25, absolutely instead of by u relatively, for P,
 * dS and the gradient alike; bf16 keeps f32's range, where ex2.approx.ftz drops
 * a P below 2^-126. So each term of a gradient sum may err by TA_FAST_TINY times
 * its other factor beyond the relative model. A key that every row weighs below
 * f16's normal range fails a relative bound without it: a CPU emulation of such
 * a backward (P and dS rounded to the storage type; not in the tree), on 40
 * problems of seed 1795410683262481773, reached 4.0u on an f16 dv, 0.1u with
 * the slack. */
#define TA_FAST_TINY(dt) ((dt) == TA_BF16 ? 0x1p-126 : 0x1p-25)
/* Part 1 runs the backward where its float64 oracle is cheap enough: B H_q S_q
 * S_k D at most this (155-170 of the 200 problems in six seeds). On one core of
 * an AMD EPYC build machine, seed 1795410683262481773: the oracle's gradients,
 * their magnitudes and the slack took about 40 s for its 160 such problems,
 * the forward's oracle and magnitudes 113 s for all 200. */
#define TA_FAST_BWD_MAX_WORK 100000000u


static const int32_t k_dims[4] = {64, 96, 128, 256};
/* The warp-specialised TMA candidates per head dim, k_first_ws .. k_last_ws
 * (cuda/ta_cuda_fast_fwd_ws.cu; sm_90 only, as candidate 1); the multi-stage
 * mma.sync ones follow, up to ta_test_fast_candidates. */
static const int32_t k_first_ws[4] = {5, 4, 5, 5};
static const int32_t k_last_ws[4] = {5, 4, 6, 5};
/* The first decode-shaped candidate per head dim (cuda/ta_cuda_fast_decode.cu;
 * the last ones of the table, up to ta_test_fast_candidates). */
static const int32_t k_first_dec[4] = {8, 6, 9, 8};
/* Twins: k_twin[di][cfg] = the tile_config whose bytes candidate cfg must give
 * (0: none): a warp-specialised kernel whose K tile matches candidate 1's (D =
 * 96, 128, 256) computes candidate 1's products and softmax in its order; a
 * multi-stage mma.sync kernel computes those of the one-buffer candidate with
 * its (warps, K tile); the decode-shaped kernels (the last of each head dim,
 * cuda/ta_cuda_fast_decode.cu) those of the other with the same K tile. */
static const int32_t k_twin[4][11] = {
    {0, 0, 0, 0, 0, 0, 2, 2, 0, 8, 0}, /* D = 64: 6, 7 -> 2; 9 -> 8 (decode) */
    {0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0}, /* D = 96: 4 -> 1, 5 -> 2 */
    {0, 0, 0, 0, 0, 1, 1, 2, 3, 0, 0}, /* D = 128: 5, 6 -> 1, 7 -> 2, 8 -> 3 */
    {0, 0, 0, 0, 0, 1, 3, 4, 0, 0, 0}, /* D = 256: 5 -> 1, 6 -> 3, 7 -> 4 */
};

/* The index of head dim d in k_dims (3 if d is none of the first three). */
static int dim_index(int32_t d) {
    int i = 0;
    while (i < 3 && k_dims[i] != d)
        ++i;
    return i;
}

/* 1 if the device is compute capability 9.0 (the wgmma candidates run). */
static int g_sm90;

/* Largest normalised errors, by dtype (0 f16, 1 bf16) and head dim index. */
static double g_err_o[2][4], g_err_lse[2][4];
/* The backward's: dq, dk, dv; problems it ran on; gradient elements checked for 0. */
static double g_err_grad[3][2][4];
static int g_bwd_count[2][4], g_bwd_failed;
static size_t g_bwd_exact;
/* Problems whose warp-specialised forward matched candidate 1 bitwise. */
static int g_twins;

/* One problem: p, seqlens, the [B,S,H,D] choice. */
typedef struct fspec {
    ta_problem p;
    int32_t seqlens[4];
    int has_seqlens, bshd;
} fspec;

static int32_t pick_len(ta_rng *r) {
    switch (ta_rng_int(r, 0, 5)) {
    case 0: return ta_rng_int(r, 1, 17);
    case 1: return 127 + 2 * ta_rng_int(r, 0, 3); /* odd, around a tile edge */
    case 2: return 257;                           /* prime */
    default: return ta_rng_int(r, 1, 700);
    }
}

static void random_fspec(uint64_t seed, int idx, fspec *s) {
    ta_rng r;
    ta_problem *p = &s->p;
    int32_t group, b;
    int decode;
    memset(s, 0, sizeof *s);
    ta_rng_seed(&r, seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(idx + 1)));
    p->dtype = ta_rng_int(&r, 0, 1) ? TA_BF16 : TA_F16;
    p->precision = TA_PRECISION_FAST;
    p->flags = ta_rng_int(&r, 0, 1) ? TA_CAUSAL : 0u;
    p->batch = ta_rng_int(&r, 1, 3);
    p->heads_kv = ta_rng_int(&r, 1, 3);
    group = ta_rng_int(&r, 0, 2) == 0 ? 1 : ta_rng_int(&r, 1, 4);
    p->heads_q = p->heads_kv * group;
    p->head_dim = p->head_dim_v = k_dims[ta_rng_int(&r, 0, 3)];
    p->seq_q = pick_len(&r);
    p->seq_k = ta_rng_int(&r, 0, 2) == 0 ? p->seq_q : pick_len(&r);
    /* a fifth of the problems are decode-shaped: 1..16 query rows against a
     * cache of up to 5000 keys, split-K (below) */
    decode = ta_rng_int(&r, 0, 4) == 0;
    if (decode) {
        p->seq_q = ta_rng_int(&r, 1, 16);
        p->seq_k = ta_rng_int(&r, 0, 1) ? ta_rng_int(&r, 1000, 5000) : pick_len(&r);
    }
    if (ta_rng_int(&r, 0, 4) == 0) p->scale = ta_rng_uniform(&r, -0.3f, 0.3f);
    s->has_seqlens = ta_rng_int(&r, 0, 9) < 3;
    for (b = 0; b < p->batch; ++b) {
        const int k = ta_rng_int(&r, 0, 3);
        s->seqlens[b] = k == 0 ? 0 : k == 1 ? p->seq_k : ta_rng_int(&r, 1, p->seq_k);
    }
    ta_test_random_window(&r, p, 30);
    s->bshd = ta_rng_int(&r, 0, 3) == 0;
    /* every candidate of the table (cuda/ta_cuda_fast_fwd.cu): 0 = default;
     * 1 and the warp-specialised ones run on an sm_90 device only (elsewhere
     * this test takes candidate 2 instead); a third of the problems take one
     * of the appended ones (warp-specialised or multi-stage) */
    {
        const int di = dim_index(p->head_dim);
        p->tile_config = ta_rng_int(&r, 0, 2) == 0
                             ? ta_rng_int(&r, k_first_ws[di], ta_test_fast_candidates(k_dims[di]))
                             : ta_rng_int(&r, 0, ta_test_fast_candidates(k_dims[di]));
        if ((p->tile_config == 1 ||
             (p->tile_config >= k_first_ws[di] && p->tile_config <= k_last_ws[di])) &&
            !g_sm90)
            p->tile_config = 2;
        /* a fifth of the problems split the keys (2..6 parts, or the library's
         * count), on an mma.sync candidate (the others refuse split-K: part 4) */
        if (ta_rng_int(&r, 0, 4) == 0) {
            p->num_splits = ta_rng_int(&r, 0, 3) == 0 ? TA_SPLITS_AUTO : ta_rng_int(&r, 2, 6);
            if (p->tile_config == 1 ||
                (p->tile_config >= k_first_ws[di] && p->tile_config <= k_last_ws[di]))
                p->tile_config = 2;
        }
        /* decode-shaped: the default (the decode-shaped kernel for split-K
         * or paged problems of at most 16 packed rows) or a decode candidate */
        if (decode) {
            p->num_splits = ta_rng_int(&r, 0, 2) == 0 ? TA_SPLITS_AUTO : ta_rng_int(&r, 1, 8);
            p->tile_config = ta_rng_int(&r, 0, 1)
                                 ? 0
                                 : ta_rng_int(&r, k_first_dec[di],
                                              ta_test_fast_candidates(k_dims[di]));
        }
    }
}

/* The tile_config whose bytes candidate cfg of head dim index di must give
 * (k_twin; cfg 0 is the warp-specialised default on an sm_90 device), 0 if
 * none or if the twin cannot run here. */
static int32_t twin_of(int di, int32_t cfg, int split) {
    /* cfg 0 with split-K: the plan may clamp the split count to 1, which
     * changes the default: no twin */
    const int32_t t = cfg != 0 ? k_twin[di][cfg]
                      : split  ? 0
                      : g_sm90 ? di != 0
                               : (di == 1) * 2;
    return t == 1 && !g_sm90 ? 0 : t;
}

static void describe(const fspec *s, char *buf, size_t n) {
    const ta_problem *p = &s->p;
    snprintf(buf, n,
             "%s B=%d H=%d/%d S=%d/%d D=%d cfg=%d splits=%d %s%s%swin=%d/%d scale=%g",
             p->dtype == TA_BF16 ? "bf16" : "f16", p->batch, p->heads_q, p->heads_kv, p->seq_q,
             p->seq_k, p->head_dim, p->tile_config, p->num_splits,
             p->flags & TA_CAUSAL ? "causal " : "",
             s->has_seqlens ? "seqlens " : "", s->bshd ? "bshd " : "",
             p->flags & TA_WINDOW ? p->window_left : 0, p->flags & TA_WINDOW ? p->window_right : 0,
             (double)p->scale);
}

/* Element count of a [B, heads, S, dim] tensor. */
static size_t count4(int32_t b, int32_t h, int32_t s, int32_t d) {
    return (size_t)b * (size_t)h * (size_t)s * (size_t)d;
}

/* to = 1: dst ([B,S,H,D] if bshd, else a copy) = the contiguous [B,H,S,D] src;
 * to = 0: the inverse. */
static void permute(void *dst, const void *src, int32_t nb, int32_t nh, int32_t ns, int32_t d,
                    int bshd, size_t eb, int to) {
    const size_t b_n = (size_t)nb, h_n = (size_t)nh, s_n = (size_t)ns, row = (size_t)d * eb;
    size_t b, h, i;
    if (!bshd) {
        memcpy(dst, src, b_n * h_n * s_n * row);
        return;
    }
    for (b = 0; b < b_n; ++b)
        for (h = 0; h < h_n; ++h)
            for (i = 0; i < s_n; ++i) {
                const size_t bhsd = ((b * h_n + h) * s_n + i) * row;
                const size_t bshd_at = ((b * s_n + i) * h_n + h) * row;
                if (to)
                    memcpy((char *)dst + bshd_at, (const char *)src + bhsd, row);
                else
                    memcpy((char *)dst + bhsd, (const char *)src + bshd_at, row);
            }
}

/* A device copy of the contiguous [B, heads, S, dim] host tensor src, held as
 * [B, S, heads, dim] if bshd (cudaFree). */
static void *upload(const void *src, int32_t nb, int32_t nh, int32_t ns, int32_t d, int bshd,
                    size_t eb) {
    const size_t bytes = count4(nb, nh, ns, d) * eb;
    void *stage = malloc(bytes), *dev = NULL;
    if (!stage) exit(1);
    permute(stage, src, nb, nh, ns, d, bshd, eb, 1);
    CUDA_OK(cudaMalloc(&dev, bytes));
    CUDA_OK(cudaMemcpy(dev, stage, bytes, cudaMemcpyHostToDevice));
    free(stage);
    return dev;
}

/* A problem's device buffers and call arguments. */
typedef struct fcall {
    ta_fwd_args a;
    void *q_dev, *k_dev, *v_dev, *o_dev, *ws; /* device memory */
    float *lse_dev;
    size_t nq, nk, nv, no, nlse, eb, ws_bytes;
} fcall;

static void call_make(fcall *c, const fspec *s, const void *q, const void *k, const void *v) {
    const ta_problem *p = &s->p;
    memset(c, 0, sizeof *c);
    c->eb = ta_dtype_size(p->dtype);
    c->nq = count4(p->batch, p->heads_q, p->seq_q, p->head_dim);
    c->nk = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim);
    c->nv = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim_v);
    c->no = count4(p->batch, p->heads_q, p->seq_q, p->head_dim_v);
    c->nlse = count4(p->batch, p->heads_q, p->seq_q, 1);
    c->q_dev = upload(q, p->batch, p->heads_q, p->seq_q, p->head_dim, s->bshd, c->eb);
    c->k_dev = upload(k, p->batch, p->heads_kv, p->seq_k, p->head_dim, s->bshd, c->eb);
    c->v_dev = upload(v, p->batch, p->heads_kv, p->seq_k, p->head_dim_v, s->bshd, c->eb);
    CUDA_OK(cudaMalloc(&c->o_dev, c->no * c->eb));
    CUDA_OK(cudaMalloc((void **)&c->lse_dev, c->nlse * sizeof(float)));
    c->a.q = c->q_dev;
    c->a.k = c->k_dev;
    c->a.v = c->v_dev;
    c->a.o = c->o_dev;
    c->a.lse = c->lse_dev;
    c->a.seqlens_k = s->has_seqlens ? s->seqlens : NULL;
    if (s->bshd) {
        c->a.q_strides = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim);
        c->a.k_strides = ta_test_strides_bshd(p->heads_kv, p->seq_k, p->head_dim);
        c->a.v_strides = ta_test_strides_bshd(p->heads_kv, p->seq_k, p->head_dim_v);
        c->a.o_strides = ta_test_strides_bshd(p->heads_q, p->seq_q, p->head_dim_v);
    }
    if (ta_fwd_workspace_size(p, TA_BACKEND_CUDA, &c->ws_bytes) != TA_OK) c->ws_bytes = 0;
    CUDA_OK(cudaMalloc(&c->ws, c->ws_bytes ? c->ws_bytes : 64));
}

static void call_free(fcall *c) {
    cudaFree(c->q_dev);
    cudaFree(c->k_dev);
    cudaFree(c->v_dev);
    cudaFree(c->o_dev);
    cudaFree(c->lse_dev);
    cudaFree(c->ws);
}

/* Poison o and lse with `byte`, run the call on stream, copy o (as stored)
 * and lse back. */
static ta_status call_run(fcall *c, const ta_problem *p, int byte, void *stream, void *o_host,
                          float *lse_host) {
    ta_status st;
    CUDA_OK(cudaMemset(c->o_dev, byte, c->no * c->eb));
    CUDA_OK(cudaMemset(c->lse_dev, byte, c->nlse * sizeof(float)));
    st = ta_fwd(p, TA_BACKEND_CUDA, &c->a, c->ws, c->ws_bytes, stream);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o_host, c->o_dev, c->no * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(lse_host, c->lse_dev, c->nlse * sizeof(float), cudaMemcpyDeviceToHost));
    return st;
}

/* The contiguous [B, heads, S, dim] host tensor dst = the device tensor src,
 * held as [B, S, heads, dim] if bshd. */
static void download(void *dst, const void *src, int32_t nb, int32_t nh, int32_t ns, int32_t d,
                     int bshd, size_t eb) {
    const size_t bytes = count4(nb, nh, ns, d) * eb;
    void *stage = malloc(bytes);
    if (!stage) exit(1);
    CUDA_OK(cudaMemcpy(stage, src, bytes, cudaMemcpyDeviceToHost));
    permute(dst, stage, nb, nh, ns, d, bshd, eb, 0);
    free(stage);
}

/* A problem's backward buffers and call arguments: q, k, v, o and lse are the
 * forward's (fcall: o and lse as its last call left them), d_o is uploaded in
 * the same layout, dq, dk, dv take the layouts of q, k, v. */
typedef struct bcall {
    ta_bwd_args a;
    void *do_dev, *dq_dev, *dk_dev, *dv_dev, *ws; /* device memory */
    size_t ws_bytes;                              /* ta_bwd_workspace_size's answer */
} bcall;

/* Host copies of dq, dk, dv as stored. */
typedef struct bgrads {
    void *dq, *dk, *dv;
} bgrads;

/* Returns the backward size query's status; the buffers exist only on TA_OK. */
static ta_status bcall_make(bcall *b, const fcall *c, const fspec *s, const void *d_o) {
    const ta_problem *p = &s->p;
    ta_status st;
    memset(b, 0, sizeof *b);
    st = ta_bwd_workspace_size(p, TA_BACKEND_CUDA, &b->ws_bytes);
    if (st != TA_OK) return st;
    b->do_dev = upload(d_o, p->batch, p->heads_q, p->seq_q, p->head_dim_v, s->bshd, c->eb);
    CUDA_OK(cudaMalloc(&b->dq_dev, c->nq * c->eb));
    CUDA_OK(cudaMalloc(&b->dk_dev, c->nk * c->eb));
    CUDA_OK(cudaMalloc(&b->dv_dev, c->nv * c->eb));
    CUDA_OK(cudaMalloc(&b->ws, b->ws_bytes ? b->ws_bytes : 64));
    b->a.q = c->a.q;
    b->a.k = c->a.k;
    b->a.v = c->a.v;
    b->a.o = c->a.o;
    b->a.lse = c->a.lse;
    b->a.seqlens_k = c->a.seqlens_k;
    b->a.d_o = b->do_dev;
    b->a.dq = b->dq_dev;
    b->a.dk = b->dk_dev;
    b->a.dv = b->dv_dev;
    b->a.q_strides = b->a.dq_strides = c->a.q_strides;
    b->a.k_strides = b->a.dk_strides = c->a.k_strides;
    b->a.v_strides = b->a.dv_strides = c->a.v_strides;
    b->a.o_strides = b->a.d_o_strides = c->a.o_strides;
    return TA_OK;
}

static void bcall_free(bcall *b) {
    cudaFree(b->do_dev);
    cudaFree(b->dq_dev);
    cudaFree(b->dk_dev);
    cudaFree(b->dv_dev);
    cudaFree(b->ws);
}

/* dq, dk, dv filled with `byte` (never 0: the call must write every element),
 * the workspace with byte ^ 0x33. */
static void bcall_poison(bcall *b, const fcall *c, int byte) {
    CUDA_OK(cudaMemset(b->dq_dev, byte, c->nq * c->eb));
    CUDA_OK(cudaMemset(b->dk_dev, byte, c->nk * c->eb));
    CUDA_OK(cudaMemset(b->dv_dev, byte, c->nv * c->eb));
    CUDA_OK(cudaMemset(b->ws, byte ^ 0x33, b->ws_bytes ? b->ws_bytes : 64));
}

static void bgrads_alloc(bgrads *g, const fcall *c) {
    g->dq = malloc(c->nq * c->eb);
    g->dk = malloc(c->nk * c->eb);
    g->dv = malloc(c->nv * c->eb);
    if (!g->dq || !g->dk || !g->dv) exit(1);
}

static void bgrads_free(bgrads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

/* g = dq, dk, dv as stored on the device. */
static void bcall_fetch(const bcall *b, const fcall *c, bgrads *g) {
    CUDA_OK(cudaMemcpy(g->dq, b->dq_dev, c->nq * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g->dk, b->dk_dev, c->nk * c->eb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(g->dv, b->dv_dev, c->nv * c->eb, cudaMemcpyDeviceToHost));
}

static int bgrads_equal(const bgrads *x, const bgrads *y, const fcall *c) {
    return memcmp(x->dq, y->dq, c->nq * c->eb) == 0 && memcmp(x->dk, y->dk, c->nk * c->eb) == 0 &&
           memcmp(x->dv, y->dv, c->nv * c->eb) == 0;
}

/* Poison (bcall_poison), run ta_bwd with the queried workspace size on stream,
 * fetch dq, dk, dv into g. */
static ta_status bcall_run(bcall *b, const fcall *c, const ta_problem *p, int byte, void *stream,
                           bgrads *g) {
    ta_status st;
    bcall_poison(b, c, byte);
    st = ta_bwd(p, TA_BACKEND_CUDA, &b->a, b->ws, b->ws_bytes, stream);
    CUDA_OK(cudaDeviceSynchronize());
    bcall_fetch(b, c, g);
    return st;
}

/* The underflow slack of the backward bounds, per gradient element: tiny *
 * (1 + the sum, over the element's visible (row, key) pairs, of the other
 * factor's magnitude): |k_jd| over the keys row i sees for dq_id; |q_id| over
 * the rows (every query head of the group) that see key j for dk_jd; |dO_id|
 * for dv_jd. Layouts as oracle.h's; in->d_o must be set. */
static void grad_underflow(const ta_problem *p, const ta_oracle_in *in, double tiny, double *uq,
                           double *uk, double *uv) {
    const size_t d_qk = (size_t)p->head_dim, d_v = (size_t)p->head_dim_v;
    const size_t n_rows = count4(p->batch, p->heads_q, p->seq_q, 1);
    const size_t n_keys = count4(p->batch, p->heads_kv, p->seq_k, 1);
    const int32_t group = p->heads_q / p->heads_kv;
    int32_t b, h, i, j;
    size_t d, x;
    memset(uq, 0, n_rows * d_qk * sizeof(double));
    memset(uk, 0, n_keys * d_qk * sizeof(double));
    memset(uv, 0, n_keys * d_v * sizeof(double));
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads_q; ++h)
            for (i = 0; i < p->seq_q; ++i) {
                const int32_t key_len = in->seqlens_k ? in->seqlens_k[b] : p->seq_k;
                const size_t row =
                    count4(b, p->heads_q, p->seq_q, 1) + count4(1, h, p->seq_q, 1) + (size_t)i;
                const size_t key0 =
                    count4(b, p->heads_kv, p->seq_k, 1) + count4(1, h / group, p->seq_k, 1);
                for (j = 0; j < p->seq_k; ++j) {
                    const size_t key = key0 + (size_t)j;
                    if (!ta_oracle_sees(p, key_len, i, j)) continue;
                    for (d = 0; d < d_qk; ++d) {
                        uq[row * d_qk + d] += fabs(in->k[key * d_qk + d]);
                        uk[key * d_qk + d] += fabs(in->q[row * d_qk + d]);
                    }
                    for (d = 0; d < d_v; ++d)
                        uv[key * d_v + d] += fabs(in->d_o[row * d_v + d]);
                }
            }
    for (x = 0; x < n_rows * d_qk; ++x)
        uq[x] = tiny * (1.0 + uq[x]);
    for (x = 0; x < n_keys * d_qk; ++x)
        uk[x] = tiny * (1.0 + uk[x]);
    for (x = 0; x < n_keys * d_v; ++x)
        uv[x] = tiny * (1.0 + uv[x]);
}

/* One gradient of a problem, every tensor a contiguous [B, heads, S, dim]: the
 * library's, the oracle's, its magnitude and its underflow slack. */
typedef struct gcheck {
    const char *name;
    void *got;
    double *orc, *mag, *under;
    size_t n, dim;
    double bound;
} gcheck;

/* g[0..2] = dq, dk, dv of problem p. */
static void gcheck_alloc(gcheck *g, const ta_problem *p, size_t eb) {
    static const char *const names[3] = {"dq", "dk", "dv"};
    int t;
    g[0].n = count4(p->batch, p->heads_q, p->seq_q, p->head_dim);
    g[1].n = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim);
    g[2].n = count4(p->batch, p->heads_kv, p->seq_k, p->head_dim_v);
    g[0].dim = g[1].dim = (size_t)p->head_dim;
    g[2].dim = (size_t)p->head_dim_v;
    g[0].bound = TA_FAST_DQ_BOUND(p->dtype);
    g[1].bound = TA_FAST_DK_BOUND(p->dtype);
    g[2].bound = TA_FAST_DV_BOUND(p->dtype);
    for (t = 0; t < 3; ++t) {
        g[t].name = names[t];
        g[t].got = malloc(g[t].n * eb);
        g[t].orc = (double *)malloc(g[t].n * sizeof(double));
        g[t].mag = (double *)malloc(g[t].n * sizeof(double));
        g[t].under = (double *)malloc(g[t].n * sizeof(double));
        if (!g[t].got || !g[t].orc || !g[t].mag || !g[t].under) exit(1);
    }
}

static void gcheck_free(gcheck *g) {
    int t;
    for (t = 0; t < 3; ++t) {
        free(g[t].got);
        free(g[t].orc);
        free(g[t].mag);
        free(g[t].under);
    }
}

/* g against the oracle. An element whose magnitude is 0 has no visible pair (a
 * key at or past seqlens_k or seen by no row, a row that sees no key) and must
 * be 0 exactly; any other may err by g->bound * mag once its underflow slack is
 * taken off. Returns the elements that fail; *worst takes the largest
 * normalised error, *n_exact counts the elements checked for 0. */
static size_t gcheck_compare(const gcheck *g, const char *what, ta_dtype dt, double *worst,
                             size_t *n_exact) {
    size_t i, bad = 0;
    for (i = 0; i < g->n; ++i) {
        const double x = ta_get(g->got, dt, i);
        double e;
        if (g->mag[i] == 0.0) {
            ++*n_exact;
            if (!(x == 0.0) && bad++ < 3)
                TA_CHECK(0, "%s: %s[%zu][%zu] = %g, want 0 (no visible pair)", what, g->name,
                         i / g->dim, i % g->dim, x);
            continue;
        }
        e = fabs(x - g->orc[i]) - g->under[i]; /* NaN stays NaN */
        if (e < 0.0) e = 0.0;
        e /= g->mag[i];
        if (!(e <= g->bound) && bad++ < 3)
            TA_CHECK(0, "%s: %s[%zu][%zu] = %.8g, oracle %.8g, error %.3g of %g", what, g->name,
                     i / g->dim, i % g->dim, x, g->orc[i], e, g->mag[i]);
        if (e > *worst || e != e) *worst = e;
    }
    return bad;
}

/* Part 1, backward, for a problem after its forward: c holds its inputs and
 * the forward's o and lse; in its widened q, k, v and seqlens_k; o_got its o
 * (contiguous). Random d_o from r, ta_bwd in fast mode, dq, dk, dv against the
 * oracle, whose D_i takes the library's stored o as the library does. Returns
 * 1 if every element is within its bound. */
static int check_problem_bwd(const fspec *s, const char *what, ta_rng *r, fcall *c, ta_oracle_in in,
                             const void *o_got) {
    const ta_problem *p = &s->p;
    const int ti = p->dtype == TA_BF16;
    void *d_o = malloc(c->no * c->eb);
    double *wdo, *wo;
    gcheck g[3];
    bcall b;
    size_t bad = 0;
    int di, t;
    ta_status st;
    di = dim_index(p->head_dim);
    if (!d_o) exit(1);
    ta_fill_uniform(r, d_o, p->dtype, c->no, -1.0f, 1.0f);
    st = bcall_make(&b, c, s, d_o);
    TA_CHECK(st == TA_OK, "%s: ta_bwd_workspace_size: %s", what, ta_status_string(st));
    if (st == TA_OK) {
        bcall_poison(&b, c, 0xFF); /* NaN in f16 and bf16 */
        st = ta_bwd(p, TA_BACKEND_CUDA, &b.a, b.ws, b.ws_bytes, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        TA_CHECK(st == TA_OK, "%s: ta_bwd: %s", what, ta_status_string(st));
    }
    if (st != TA_OK) {
        if (b.ws) bcall_free(&b);
        free(d_o);
        return 0;
    }
    gcheck_alloc(g, p, c->eb);
    download(g[0].got, b.dq_dev, p->batch, p->heads_q, p->seq_q, p->head_dim, s->bshd, c->eb);
    download(g[1].got, b.dk_dev, p->batch, p->heads_kv, p->seq_k, p->head_dim, s->bshd, c->eb);
    download(g[2].got, b.dv_dev, p->batch, p->heads_kv, p->seq_k, p->head_dim_v, s->bshd, c->eb);
    in.d_o = wdo = ta_oracle_widen(d_o, p->dtype, c->no);
    in.o = wo = ta_oracle_widen(o_got, p->dtype, c->no);
    if (!wdo || !wo || ta_oracle_bwd(p, &in, g[0].orc, g[1].orc, g[2].orc) != 0 ||
        ta_oracle_bwd_mag(p, &in, g[0].mag, g[1].mag, g[2].mag) != 0)
        exit(1);
    grad_underflow(p, &in, TA_FAST_TINY(p->dtype), g[0].under, g[1].under, g[2].under);
    for (t = 0; t < 3; ++t)
        bad += gcheck_compare(&g[t], what, p->dtype, &g_err_grad[t][ti][di], &g_bwd_exact);
    ++g_bwd_count[ti][di];
    if (bad) fprintf(stderr, "%s: backward: %zu elements out of bound\n", what, bad);
    gcheck_free(g);
    bcall_free(&b);
    free(d_o);
    free(wdo);
    free(wo);
    return bad == 0;
}

/* Part 1 for problem idx: returns 1 if every element is within its bound. */
static int check_problem(uint64_t seed, int idx) {
    fspec s;
    ta_problem *p;
    ta_rng r;
    fcall c;
    ta_oracle_in in;
    void *q, *k, *v, *o_got, *o_stage;
    float *lse_got;
    double *o_ref, *lse_ref, *o_mag, *lse_mag, *wq, *wk, *wv;
    double worst_o = 0.0, worst_lse = 0.0;
    size_t i, bad = 0;
    char desc[256];
    int di, ok;
    ta_status st;
    random_fspec(seed, idx, &s);
    p = &s.p;
    describe(&s, desc, sizeof desc);
    di = dim_index(p->head_dim);
    ta_rng_seed(&r, seed + UINT64_C(0x51ed27) * (uint64_t)(idx + 7));
    memset(&c, 0, sizeof c);
    c.eb = ta_dtype_size(p->dtype);
    q = malloc(count4(p->batch, p->heads_q, p->seq_q, p->head_dim) * c.eb);
    k = malloc(count4(p->batch, p->heads_kv, p->seq_k, p->head_dim) * c.eb);
    v = malloc(count4(p->batch, p->heads_kv, p->seq_k, p->head_dim_v) * c.eb);
    if (!q || !k || !v) exit(1);
    ta_fill_uniform(&r, q, p->dtype, count4(p->batch, p->heads_q, p->seq_q, p->head_dim), -2.0f,
                    2.0f);
    ta_fill_uniform(&r, k, p->dtype, count4(p->batch, p->heads_kv, p->seq_k, p->head_dim), -2.0f,
                    2.0f);
    ta_fill_uniform(&r, v, p->dtype, count4(p->batch, p->heads_kv, p->seq_k, p->head_dim_v),
                    -1.0f, 1.0f);
    call_make(&c, &s, q, k, v);
    o_got = malloc(c.no * c.eb);
    o_stage = malloc(c.no * c.eb);
    lse_got = (float *)malloc(c.nlse * sizeof(float));
    o_ref = (double *)malloc(c.no * sizeof(double));
    o_mag = (double *)malloc(c.no * sizeof(double));
    lse_ref = (double *)malloc(c.nlse * sizeof(double));
    lse_mag = (double *)malloc(c.nlse * sizeof(double));
    if (!o_got || !o_stage || !lse_got || !o_ref || !o_mag || !lse_ref || !lse_mag) exit(1);
    wq = ta_oracle_widen(q, p->dtype, c.nq);
    wk = ta_oracle_widen(k, p->dtype, c.nk);
    wv = ta_oracle_widen(v, p->dtype, c.nv);
    memset(&in, 0, sizeof in);
    in.q = wq;
    in.k = wk;
    in.v = wv;
    in.seqlens_k = c.a.seqlens_k;
    if (ta_oracle_fwd(p, &in, o_ref, lse_ref) != 0 || ta_oracle_fwd_mag(p, &in, o_mag, lse_mag) != 0)
        exit(1);
    st = call_run(&c, p, 0xFF, NULL, o_stage, lse_got);
    TA_CHECK(st == TA_OK, "problem %d (%s): ta_fwd: %s", idx, desc, ta_status_string(st));
    permute(o_got, o_stage, p->batch, p->heads_q, p->seq_q, p->head_dim_v, s.bshd, c.eb, 0);
    for (i = 0; st == TA_OK && i < c.nlse; ++i) {
        const size_t dv = (size_t)p->head_dim_v;
        size_t d;
        if (isinf(lse_ref[i])) { /* sees no key: o = 0 exactly, lse = -inf */
            int zero = isinf(lse_got[i]) && lse_got[i] < 0;
            for (d = 0; d < dv; ++d) zero = zero && ta_get(o_got, p->dtype, i * dv + d) == 0.0;
            if (!zero && bad++ < 3)
                TA_CHECK(0, "problem %d (%s): row %zu sees no key but o/lse = %g/%g", idx, desc,
                         i, ta_get(o_got, p->dtype, i * dv), (double)lse_got[i]);
            continue;
        }
        for (d = 0; d < dv; ++d) {
            const double got = ta_get(o_got, p->dtype, i * dv + d);
            const double e = fabs(got - o_ref[i * dv + d]) / fmax(o_mag[i * dv + d], 1e-300);
            if (!(e <= TA_FAST_O_BOUND(p->dtype)) && bad++ < 3)
                TA_CHECK(0, "problem %d (%s): o[%zu][%zu] = %.8g, oracle %.8g, error %.3g of %g",
                         idx, desc, i, d, got, o_ref[i * dv + d], e, o_mag[i * dv + d]);
            if (e > worst_o || e != e) worst_o = e;
        }
        {
            const double e = fabs((double)lse_got[i] - lse_ref[i]) / fmax(lse_mag[i], 1e-300);
            if (!(e <= TA_FAST_LSE_BOUND) && bad++ < 3)
                TA_CHECK(0, "problem %d (%s): lse[%zu] = %.9g, oracle %.9g, error %.3g", idx,
                         desc, i, (double)lse_got[i], lse_ref[i], e);
            if (e > worst_lse || e != e) worst_lse = e;
        }
    }
    {
        const int ti = p->dtype == TA_BF16;
        if (worst_o > g_err_o[ti][di]) g_err_o[ti][di] = worst_o;
        if (worst_lse > g_err_lse[ti][di]) g_err_lse[ti][di] = worst_lse;
    }
    if (st == TA_OK && twin_of(di, p->tile_config, p->num_splits != 0) > 0) {
        /* a warp-specialised or multi-stage kernel against its twin: bitwise */
        ta_problem p1 = *p;
        void *o_twin = malloc(c.no * c.eb);
        float *lse_twin = (float *)malloc(c.nlse * sizeof(float));
        ta_status st1;
        if (!o_twin || !lse_twin) exit(1);
        p1.tile_config = twin_of(di, p->tile_config, p->num_splits != 0);
        st1 = call_run(&c, &p1, 0x7F, NULL, o_twin, lse_twin);
        TA_CHECK(st1 == TA_OK && memcmp(o_twin, o_stage, c.no * c.eb) == 0 &&
                     memcmp(lse_twin, lse_got, c.nlse * sizeof(float)) == 0,
                 "problem %d (%s): tile_config %d differs from its twin %d (%s)", idx, desc,
                 (int)p->tile_config, (int)p1.tile_config, ta_status_string(st1));
        if (st1 != TA_OK || memcmp(o_twin, o_stage, c.no * c.eb) != 0 ||
            memcmp(lse_twin, lse_got, c.nlse * sizeof(float)) != 0)
            ++bad;
        else
            ++g_twins;
        free(o_twin);
        free(lse_twin);
    }
    ok = st == TA_OK && bad == 0;
    if (!ok) fprintf(stderr, "problem %d (%s): %zu elements out of bound\n", idx, desc, bad);
    if (st == TA_OK && count4(p->batch, p->heads_q, p->seq_q, p->seq_k) * (size_t)p->head_dim <=
                           TA_FAST_BWD_MAX_WORK) {
        char what[300];
        snprintf(what, sizeof what, "problem %d (%s)", idx, desc);
        g_bwd_failed += !check_problem_bwd(&s, what, &r, &c, in, o_got);
    }
    call_free(&c);
    free(q);
    free(k);
    free(v);
    free(o_got);
    free(o_stage);
    free(lse_got);
    free(o_ref);
    free(o_mag);
    free(lse_ref);
    free(lse_mag);
    free(wq);
    free(wk);
    free(wv);
    return ok;
}

/* Bytes of buf that differ from byte. */
static size_t bytes_not(const void *buf, size_t n, int byte) {
    const unsigned char *x = (const unsigned char *)buf;
    size_t i, count = 0;
    for (i = 0; i < n; ++i)
        count += x[i] != (unsigned char)byte;
    return count;
}

/* Part 3 for the backward: one call captured on a created stream (global
 * capture mode), the graph replayed twice (outputs and workspace poisoned
 * anew each time): each replay gives want's bytes. */
static void check_bwd_graph(bcall *b, const fcall *c, const ta_problem *p, const bgrads *want,
                            bgrads *got) {
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ta_status st;
    int run;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    st = ta_bwd(p, TA_BACKEND_CUDA, &b->a, b->ws, b->ws_bytes, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    TA_CHECK(st == TA_OK, "backward graph: ta_bwd under capture: %s", ta_status_string(st));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (run = 0; run < 2; ++run) {
        bcall_poison(b, c, 0x5A + run);
        /* the memsets ran on the legacy stream, which a non-blocking one ignores */
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        bcall_fetch(b, c, got);
        TA_CHECK(bgrads_equal(want, got, c),
                 "backward graph: replay %d differs from the direct call", run);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
}

/* Parts 2 and 3 for the backward of big_spec's problem, after its forward (c
 * holds its o and lse), with random d_o from r: 10 runs, dq, dk, dv and the
 * workspace poisoned with another pattern each time, give identical bytes; a
 * workspace one byte short of the size query's answer is refused
 * (TA_ERR_WORKSPACE_SIZE) with dq, dk, dv untouched; then the graph. */
static void check_bwd_determinism_and_graph(const fspec *s, const fcall *c, ta_rng *r) {
    const ta_problem *p = &s->p;
    void *d_o = malloc(c->no * c->eb);
    bgrads g0, g1;
    bcall b;
    ta_status st;
    int run;
    if (!d_o) exit(1);
    ta_fill_uniform(r, d_o, p->dtype, c->no, -1.0f, 1.0f);
    st = bcall_make(&b, c, s, d_o);
    TA_CHECK(st == TA_OK, "backward: ta_bwd_workspace_size: %s", ta_status_string(st));
    free(d_o);
    if (st != TA_OK) return;
    bgrads_alloc(&g0, c);
    bgrads_alloc(&g1, c);
    st = bcall_run(&b, c, p, 0xFF, NULL, &g0);
    TA_CHECK(st == TA_OK, "backward determinism: first call: %s", ta_status_string(st));
    for (run = 1; run < 10; ++run) {
        TA_CHECK(bcall_run(&b, c, p, run * 17, NULL, &g1) == TA_OK, "backward determinism: call %d",
                 run);
        TA_CHECK(bgrads_equal(&g0, &g1, c), "backward determinism: run %d differs from run 0", run);
    }
    if (b.ws_bytes > 0) {
        size_t touched;
        bcall_poison(&b, c, 0xA5);
        st = ta_bwd(p, TA_BACKEND_CUDA, &b.a, b.ws, b.ws_bytes - 1, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        bcall_fetch(&b, c, &g1);
        touched = bytes_not(g1.dq, c->nq * c->eb, 0xA5) + bytes_not(g1.dk, c->nk * c->eb, 0xA5) +
                  bytes_not(g1.dv, c->nv * c->eb, 0xA5);
        TA_CHECK(st == TA_ERR_WORKSPACE_SIZE && touched == 0,
                 "backward, workspace of %zu bytes (the query said %zu): %s, %zu output bytes "
                 "written; want TA_ERR_WORKSPACE_SIZE, none",
                 b.ws_bytes - 1, b.ws_bytes, ta_status_string(st), touched);
    }
    check_bwd_graph(&b, c, p, &g0, &g1);
    printf("backward (big problem, workspace %zu bytes): 10 runs identical, graph replay, "
           "short workspace: checked\n",
           b.ws_bytes);
    bgrads_free(&g0);
    bgrads_free(&g1);
    bcall_free(&b);
}

/* A larger problem for parts 2 and 3. */
static void big_spec(fspec *s) {
    memset(s, 0, sizeof *s);
    s->p.dtype = TA_BF16;
    s->p.precision = TA_PRECISION_FAST;
    s->p.flags = TA_CAUSAL;
    s->p.batch = 2;
    s->p.heads_q = 8;
    s->p.heads_kv = 4;
    s->p.seq_q = 1000;
    s->p.seq_k = 1100;
    s->p.head_dim = s->p.head_dim_v = 128;
}

/* Part 5: GQA decode packing (ta_cuda_fast_pack: a kv head's query heads run
 * as one head of G S_q rows) changes the grid, not the bits: a GQA split-K
 * forward equals, bit for bit, the MHA forward on K and V with every kv head
 * repeated G times (never packed), for the same split count and candidate;
 * S_q = 1 causal and S_q = 5 unmasked (packed), S_q = 5 as [B, S, H, D]
 * (not packed: its head stride is not S_q rows), seqlens_k. */
static void check_gqa_pack(uint64_t seed) {
    static const int32_t seq_q[3] = {1, 5, 5}, cfgs[3] = {0, 2, 7};
    const int32_t b_n = 2, h = 8, h_kv = 2, g = 4, s_k = 3000, d = 128;
    ta_rng r;
    int i, ok = 0;
    ta_rng_seed(&r, seed ^ UINT64_C(0x5eed9ac4));
    for (i = 0; i < 3; ++i) {
        fspec sg, sm;
        fcall cg, cm;
        const size_t eb = 2, row = count4(1, 1, s_k, d) * eb;
        const size_t nq = count4(b_n, h, seq_q[i], d), nk = count4(b_n, h_kv, s_k, d);
        unsigned char *q = (unsigned char *)malloc(nq * eb), *k = (unsigned char *)malloc(nk * eb);
        unsigned char *v = (unsigned char *)malloc(nk * eb);
        unsigned char *ke = (unsigned char *)malloc(nk * (size_t)g * eb);
        unsigned char *ve = (unsigned char *)malloc(nk * (size_t)g * eb);
        unsigned char *og = (unsigned char *)malloc(nq * eb), *om = (unsigned char *)malloc(nq * eb);
        float *lg = (float *)malloc(count4(b_n, h, seq_q[i], 1) * sizeof(float));
        float *lm = (float *)malloc(count4(b_n, h, seq_q[i], 1) * sizeof(float));
        size_t b, hh;
        ta_status st_g, st_m;
        if (!q || !k || !v || !ke || !ve || !og || !om || !lg || !lm) exit(1);
        ta_fill_uniform(&r, q, TA_BF16, nq, -2.0f, 2.0f);
        ta_fill_uniform(&r, k, TA_BF16, nk, -2.0f, 2.0f);
        ta_fill_uniform(&r, v, TA_BF16, nk, -1.0f, 1.0f);
        for (b = 0; b < (size_t)b_n; ++b) /* kv head hh / g's rows under query head hh */
            for (hh = 0; hh < (size_t)h; ++hh) {
                const size_t dst = (b * (size_t)h + hh) * row;
                const size_t src = (b * (size_t)h_kv + hh / (size_t)g) * row;
                memcpy(ke + dst, k + src, row);
                memcpy(ve + dst, v + src, row);
            }
        memset(&sg, 0, sizeof sg);
        sg.p.dtype = TA_BF16;
        sg.p.precision = TA_PRECISION_FAST;
        sg.p.flags = seq_q[i] == 1 ? TA_CAUSAL : 0u;
        sg.p.batch = b_n;
        sg.p.heads_q = h;
        sg.p.heads_kv = h_kv;
        sg.p.seq_q = seq_q[i];
        sg.p.seq_k = s_k;
        sg.p.head_dim = sg.p.head_dim_v = d;
        sg.p.num_splits = 6;
        sg.p.tile_config = cfgs[i];
        sg.has_seqlens = 1;
        sg.seqlens[0] = s_k;
        sg.seqlens[1] = ta_rng_int(&r, 1, s_k - 1);
        sg.bshd = i == 2;
        sm = sg;
        sm.p.heads_kv = h;
        call_make(&cg, &sg, q, k, v);
        call_make(&cm, &sm, q, ke, ve);
        st_g = call_run(&cg, &sg.p, 0xA5, NULL, og, lg);
        st_m = call_run(&cm, &sm.p, 0x5A, NULL, om, lm);
        TA_CHECK(st_g == TA_OK && st_m == TA_OK, "GQA packing %d: %s / %s", i,
                 ta_status_string(st_g), ta_status_string(st_m));
        if (st_g == TA_OK && st_m == TA_OK) {
            const int same = memcmp(og, om, cg.no * eb) == 0 &&
                             memcmp(lg, lm, cg.nlse * sizeof(float)) == 0;
            TA_CHECK(same, "GQA packing %d (S_q %d, %s): o/lse differ from MHA on repeated K, V",
                     i, (int)seq_q[i], sg.bshd ? "bshd" : "bhsd");
            ok += same;
        }
        call_free(&cg);
        call_free(&cm);
        free(q);
        free(k);
        free(v);
        free(ke);
        free(ve);
        free(og);
        free(om);
        free(lg);
        free(lm);
    }
    printf("GQA decode packing: %d of 3 split-K forwards bit-identical to MHA on repeated K, V\n",
           ok);
}

/* Parts 2 and 3. */
static void check_determinism_and_graph(uint64_t seed) {
    fspec s;
    fcall c;
    ta_rng r;
    void *q, *k, *v, *o0, *o1;
    float *l0, *l1;
    int run;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ta_status st = TA_OK;
    big_spec(&s);
    ta_rng_seed(&r, seed ^ UINT64_C(0xde7e));
    q = malloc(count4(2, 8, 1000, 128) * 2);
    k = malloc(count4(2, 4, 1100, 128) * 2);
    v = malloc(count4(2, 4, 1100, 128) * 2);
    if (!q || !k || !v) exit(1);
    ta_fill_uniform(&r, q, TA_BF16, count4(2, 8, 1000, 128), -2.0f, 2.0f);
    ta_fill_uniform(&r, k, TA_BF16, count4(2, 4, 1100, 128), -2.0f, 2.0f);
    ta_fill_uniform(&r, v, TA_BF16, count4(2, 4, 1100, 128), -1.0f, 1.0f);
    call_make(&c, &s, q, k, v);
    o0 = malloc(c.no * c.eb);
    o1 = malloc(c.no * c.eb);
    l0 = (float *)malloc(c.nlse * sizeof(float));
    l1 = (float *)malloc(c.nlse * sizeof(float));
    if (!o0 || !o1 || !l0 || !l1) exit(1);
    TA_CHECK(call_run(&c, &s.p, 0xFF, NULL, o0, l0) == TA_OK, "determinism: first call");
    for (run = 1; run < 10; ++run) {
        TA_CHECK(call_run(&c, &s.p, run * 17, NULL, o1, l1) == TA_OK, "determinism: call %d", run);
        TA_CHECK(memcmp(o0, o1, c.no * c.eb) == 0 && memcmp(l0, l1, c.nlse * sizeof(float)) == 0,
                 "determinism: run %d differs from run 0", run);
    }
    /* without lse: the same o */
    {
        float *keep = c.a.lse;
        c.a.lse = NULL;
        TA_CHECK(call_run(&c, &s.p, 0x3C, NULL, o1, l1) == TA_OK, "lse = NULL: call");
        TA_CHECK(memcmp(o0, o1, c.no * c.eb) == 0, "lse = NULL: o differs from the call with lse");
        c.a.lse = keep;
    }
    /* part 3: capture one call on a created stream, replay twice */
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (run = 0; run < 2; ++run) {
        CUDA_OK(cudaMemset(c.o_dev, 0x5A + run, c.no * c.eb));
        CUDA_OK(cudaMemset(c.lse_dev, 0x5A + run, c.nlse * sizeof(float)));
        /* the memsets ran on the legacy stream, which a non-blocking one ignores */
        CUDA_OK(cudaDeviceSynchronize());
        if (run == 0) {
            CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
            st = ta_fwd(&s.p, TA_BACKEND_CUDA, &c.a, c.ws, c.ws_bytes, stream);
            CUDA_OK(cudaStreamEndCapture(stream, &graph));
            TA_CHECK(st == TA_OK, "graph: ta_fwd under capture: %s", ta_status_string(st));
            CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        }
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(o1, c.o_dev, c.no * c.eb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(l1, c.lse_dev, c.nlse * sizeof(float), cudaMemcpyDeviceToHost));
        TA_CHECK(memcmp(o0, o1, c.no * c.eb) == 0 && memcmp(l0, l1, c.nlse * sizeof(float)) == 0,
                 "graph: replay %d differs from the direct call", run);
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    check_bwd_determinism_and_graph(&s, &c, &r);
    call_free(&c);
    free(q);
    free(k);
    free(v);
    free(o0);
    free(o1);
    free(l0);
    free(l1);
}

/* Part 4 on the device: the call refuses, o and lse keep their poison. */
static void check_refused(const char *what, fcall *c, const ta_problem *p) {
    unsigned char *o = (unsigned char *)malloc(c->no * c->eb);
    float *l = (float *)malloc(c->nlse * sizeof(float));
    size_t i, touched = 0;
    ta_status st;
    if (!o || !l) exit(1);
    st = call_run(c, p, 0xA5, NULL, o, l);
    for (i = 0; i < c->no * c->eb; ++i) touched += o[i] != 0xA5;
    for (i = 0; i < c->nlse * sizeof(float); ++i) touched += ((unsigned char *)l)[i] != 0xA5;
    TA_CHECK(st == TA_ERR_UNSUPPORTED, "%s: status %s, want TA_ERR_UNSUPPORTED", what,
             ta_status_string(st));
    TA_CHECK(touched == 0, "%s: %zu output bytes written", what, touched);
    free(o);
    free(l);
}

static void check_unsupported_device(void) {
    fspec s;
    fcall c;
    void *buf;
    big_spec(&s);
    s.p.seq_q = s.p.seq_k = 100;
    buf = calloc(count4(2, 8, 100, 128), 2);
    if (!buf) exit(1);
    call_make(&c, &s, buf, buf, buf);
    /* q rows 136 elements apart: valid strides, not 16-byte rows */
    c.a.q_strides.seq = 129;
    c.a.q_strides.head = 129 * 100;
    c.a.q_strides.batch = 129 * 100 * 4; /* q's buffer holds 2*8*100*128: use 4 heads' room */
    s.p.heads_q = 4;
    s.p.heads_kv = 4;
    c.nlse = count4(2, 4, 100, 1);
    c.no = count4(2, 4, 100, 128);
    check_refused("q seq stride 129", &c, &s.p);
    memset(&c.a.q_strides, 0, sizeof c.a.q_strides);
    c.a.q = (const char *)c.q_dev + 8; /* 4 elements in: 8-byte aligned rows */
    s.p.seq_q = 50;
    c.nlse = count4(2, 4, 50, 1);
    c.no = count4(2, 4, 50, 128);
    check_refused("q base off 16 bytes", &c, &s.p);
    call_free(&c);
    /* split-K on a warp-specialised candidate (sm_90): refused before any
     * launch (S_k = 100: two K tiles, so the two splits stay two) */
    if (g_sm90) {
        big_spec(&s);
        s.p.seq_q = s.p.seq_k = 100;
        s.p.num_splits = 2;
        s.p.tile_config = k_first_ws[dim_index(s.p.head_dim)];
        call_make(&c, &s, buf, buf, buf);
        check_refused("split-K on a warp-specialised candidate", &c, &s.p);
        call_free(&c);
    }
    free(buf);
}

/* A one-head bf16 fast-mode problem, S_q = S_k = seq, D = D_v = d. */
static void small_fast_problem(ta_problem *p, int32_t seq, int32_t d) {
    memset(p, 0, sizeof *p);
    p->batch = p->heads_q = p->heads_kv = 1;
    p->seq_q = p->seq_k = seq;
    p->head_dim = p->head_dim_v = d;
    p->dtype = TA_BF16;
    p->precision = TA_PRECISION_FAST;
}

/* Part 4, host side (no GPU needed), for the forward's and the backward's size
 * queries alike: a head dim outside the table, the table's candidate counts (the
 * last is accepted, the one past it not), tile_config = -1. */
static void check_size_queries(void) {
    static const char *const names[2] = {"forward", "backward"};
    ta_problem p;
    size_t bytes = 0;
    int pass, di;
    for (pass = 0; pass < 2; ++pass) {
        ta_status (*const query)(const ta_problem *, ta_backend, size_t *) =
            pass ? ta_bwd_workspace_size : ta_fwd_workspace_size;
        small_fast_problem(&p, 64, 80);
        TA_CHECK(query(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
                 "%s: fast bf16 D = 80: the size query must say TA_ERR_UNSUPPORTED", names[pass]);
        p.precision = TA_PRECISION_EXACT;
        TA_CHECK(query(&p, TA_BACKEND_CUDA, &bytes) == TA_OK, "%s: exact bf16 D = 80 is supported",
                 names[pass]);
        p.precision = TA_PRECISION_FAST;
        for (di = 0; di < 4; ++di) {
            p.head_dim = p.head_dim_v = k_dims[di];
            p.tile_config = ta_test_fast_candidates(k_dims[di]);
            TA_CHECK(query(&p, TA_BACKEND_CUDA, &bytes) == TA_OK,
                     "%s: fast D = %d: tile_config %d is in the table", names[pass], k_dims[di],
                     ta_test_fast_candidates(k_dims[di]));
            p.tile_config = ta_test_fast_candidates(k_dims[di]) + 1;
            TA_CHECK(query(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_UNSUPPORTED,
                     "%s: fast D = %d: tile_config %d is past the table", names[pass], k_dims[di],
                     ta_test_fast_candidates(k_dims[di]) + 1);
        }
        p.tile_config = -1;
        TA_CHECK(query(&p, TA_BACKEND_CUDA, &bytes) == TA_ERR_BAD_ARG,
                 "%s: tile_config = -1: TA_ERR_BAD_ARG", names[pass]);
    }
}

/* On a compute capability 9.0 device: 1 if the wgmma candidate (tile_config =
 * 1) runs, 0 if the library refuses it (a build without sm_90a code). */
static int probe_wgmma(void) {
    ta_problem p;
    ta_fwd_args a;
    void *buf = NULL, *ws = NULL;
    size_t bytes = 0;
    ta_status st;
    small_fast_problem(&p, 16, 64);
    memset(&a, 0, sizeof a);
    p.tile_config = 1;
    CUDA_OK(cudaMalloc(&buf, 4 * 16 * 64 * 2));
    CUDA_OK(cudaMemset(buf, 0, 4 * 16 * 64 * 2));
    if (ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &bytes) != TA_OK) return 0;
    CUDA_OK(cudaMalloc(&ws, bytes ? bytes : 64));
    a.q = buf;
    a.k = (char *)buf + 16 * 64 * 2;
    a.v = (char *)buf + 2 * 16 * 64 * 2;
    a.o = (char *)buf + 3 * 16 * 64 * 2;
    st = ta_fwd(&p, TA_BACKEND_CUDA, &a, ws, bytes, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(buf);
    cudaFree(ws);
    TA_CHECK(st == TA_OK || st == TA_ERR_UNSUPPORTED, "wgmma probe: %s", ta_status_string(st));
    return st == TA_OK;
}

/* Part 1's backward summary, in the forward table's style. */
static void print_bwd_table(void) {
    int ti, di, runs = 0;
    for (ti = 0; ti < 2; ++ti)
        for (di = 0; di < 4; ++di)
            runs += g_bwd_count[ti][di];
    printf("backward: %d of %d problems within bound (B H_q S_q S_k D <= %g; dq, dk: %.3g "
           "bf16, %.3g f16, dv: %.3g bf16, %.3g f16 of the magnitude after the underflow "
           "slack); %zu gradient elements with no visible pair checked for 0\n",
           runs - g_bwd_failed, runs, (double)TA_FAST_BWD_MAX_WORK, TA_FAST_DQ_BOUND(TA_BF16),
           TA_FAST_DQ_BOUND(TA_F16), TA_FAST_DV_BOUND(TA_BF16), TA_FAST_DV_BOUND(TA_F16),
           g_bwd_exact);
    printf("largest backward errors (normalised by the oracle magnitude):\n"
           "  dtype  D    dq         dk         dv          problems\n");
    for (ti = 0; ti < 2; ++ti)
        for (di = 0; di < 4; ++di)
            printf("  %-5s %3d  %.3e  %.3e  %.3e  %d\n", ti ? "bf16" : "f16", k_dims[di],
                   g_err_grad[0][ti][di], g_err_grad[1][ti][di], g_err_grad[2][ti][di],
                   g_bwd_count[ti][di]);
}

int main(int argc, char **argv) {
    int count = 200, only = -1, i, n_ok = 0, dev_count = 0, ti, di;
    uint64_t seed;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = atoi(argv[++i]);
        else if (strcmp(argv[i], "--problem") == 0 && i + 1 < argc)
            only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_cuda_fast [--count N] [--problem N]\n");
            return 2;
        }
    }
    check_size_queries();
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("no CUDA device: skipped\n");
        return ta_test_failures ? ta_test_finish("test_cuda_fast") : TA_TEST_SKIP;
    }
    if (!ta_backend_available(TA_BACKEND_CUDA)) {
        fprintf(stderr, "FAIL: a CUDA device is present but TA_BACKEND_CUDA is unavailable\n");
        return 1;
    }
    {
        int major = 0, minor = 0;
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
        g_sm90 = major == 9 && minor == 0 && probe_wgmma();
        printf("device compute capability %d.%d: the wgmma forward %s\n", major, minor,
               g_sm90 ? "runs (tile_config 1; 0 = the warp-specialised one)"
               : major == 9 && minor == 0 ? "is refused: this build holds no sm_90a code"
                                          : "is not used");
    }
    seed = ta_test_seed("test_cuda_fast");
    for (i = 0; i < count; ++i) {
        if (only >= 0 && i != only) continue;
        n_ok += check_problem(seed, i);
    }
    printf("accuracy: %d of %d problems within bound (o: %.3g bf16, %.3g f16 of o_mag; lse: "
           "%.3g of lse_mag)\n",
           n_ok, only >= 0 ? 1 : count, TA_FAST_O_BOUND(TA_BF16), TA_FAST_O_BOUND(TA_F16),
           TA_FAST_LSE_BOUND);
    printf("largest errors (normalised by the oracle magnitude):\n  dtype  D    o          lse\n");
    for (ti = 0; ti < 2; ++ti)
        for (di = 0; di < 4; ++di)
            printf("  %-5s %3d  %.3e  %.3e\n", ti ? "bf16" : "f16", k_dims[di], g_err_o[ti][di],
                   g_err_lse[ti][di]);
    printf("twins: %d problems bit-identical to their twin candidate (warp-specialised = 1, "
           "multi-stage = its one-buffer one)\n",
           g_twins);
    print_bwd_table();
    if (only < 0) {
        check_determinism_and_graph(seed);
        check_unsupported_device();
        check_gqa_pack(seed);
        printf("determinism (10 runs), CUDA graph replay, unsupported cases: checked\n");
    }
    return ta_test_finish("test_cuda_fast");
}
