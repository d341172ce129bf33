/*
 * A real-time training loop on tileattn: plan once, then an MTA forward and
 * backward every step, with no allocation anywhere.
 *
 * Every buffer is static (sized at compile time for this problem), and the
 * workspace is a static arena checked against the size queries once, at
 * start-up: the step itself only calls ta_fwd and ta_bwd on memory it already
 * owns. The CPU backend runs on a fixed thread count (an OpenMP runtime
 * allocates its thread pool on the first parallel region and again when the
 * team size changes), so the first step is a warm-up outside the timed loop.
 *
 * The two marker lines TA_NOALLOC_BEGIN / TA_NOALLOC_END around the loop let
 * CTest run this program under valgrind and check that nothing between them
 * allocates (test/check_valgrind_noalloc.cmake); a program of yours needs none.
 *
 * Each step also takes a gradient step on the conv kernel (conv_w -= lr * dconv_w),
 * as a training loop would. Exit status 0 iff every call returned TA_OK and the
 * outputs are finite.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <tileattn.h>

/* The problem: one sequence, 2 heads, 64 tokens, head dim 32, the MTA paper's 6 x 11 conv. */
enum { B = 1, H = 2, S = 64, D = 32, CQ = 6, CK = 11, THREADS = 2, STEPS = 8 };
#define N_QKV ((size_t)B * H * S * D)
#define N_LSE ((size_t)B * H * S)
#define N_W ((size_t)H * CQ * CK)
#define ARENA_BYTES ((size_t)4 << 20) /* sized offline; checked against the queries */

static float q[N_QKV], k[N_QKV], v[N_QKV], o[N_QKV], d_o[N_QKV]; /* [B, H, S, D] */
static float dq[N_QKV], dk[N_QKV], dv[N_QKV];                    /* [B, H, S, D] */
static float lse[N_LSE];                                         /* [B, H, S] */
static float conv_w[N_W], dconv_w[N_W];                          /* [H, CQ, CK] */
static _Alignas(TA_WORKSPACE_ALIGN) unsigned char arena[ARENA_BYTES];

static void fill(float *x, size_t n, uint32_t *state) {
    size_t i;
    for (i = 0; i < n; ++i) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)(*state >> 8) * (2.0f / 16777216.0f) - 1.0f; /* [-1, 1) */
    }
}

static void marker(const char *line) { /* write(2): no stdio buffer, no allocation */
    (void)!write(2, line, strlen(line));
}

/* One training step: forward, backward, kernel update. TA_OK or the first error. */
static ta_status step(const ta_problem *p, size_t ws_bytes) {
    const ta_fwd_args fa = {.q = q, .k = k, .v = v, .conv_w = conv_w, .o = o, .lse = lse};
    const ta_bwd_args ba = {.q = q, .k = k, .v = v, .o = o, .d_o = d_o, .lse = lse,
                            .conv_w = conv_w, .dq = dq, .dk = dk, .dv = dv, .dconv_w = dconv_w};
    ta_status st = ta_fwd(p, TA_BACKEND_CPU, &fa, arena, ws_bytes, NULL);
    size_t i;
    if (st != TA_OK) return st;
    st = ta_bwd(p, TA_BACKEND_CPU, &ba, arena, ws_bytes, NULL);
    if (st != TA_OK) return st;
    for (i = 0; i < N_W; ++i)
        conv_w[i] -= 1e-3f * dconv_w[i];
    return TA_OK;
}

int main(void) {
    ta_problem p;
    size_t fwd_bytes = 0, bwd_bytes = 0, ws_bytes, i;
    uint32_t state = 7u;
    ta_status st, loop_st = TA_OK;
    int s, bad = 0;

    /* 1. plan once: the problem, and the workspace both passes need */
    memset(&p, 0, sizeof p);
    p.batch = B;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL; /* the MTA conv is causal */
    p.conv_q = CQ;
    p.conv_k = CK;
    p.num_threads = THREADS; /* fixed: the queries and the calls see the same count */
    if ((st = ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &fwd_bytes)) != TA_OK ||
        (st = ta_bwd_workspace_size(&p, TA_BACKEND_CPU, &bwd_bytes)) != TA_OK) {
        fprintf(stderr, "realtime_loop: size query: %s\n", ta_status_string(st));
        return 1;
    }
    ws_bytes = fwd_bytes > bwd_bytes ? fwd_bytes : bwd_bytes;
    if (ws_bytes > ARENA_BYTES) {
        fprintf(stderr, "realtime_loop: the arena holds %zu bytes, the plan needs %zu\n",
                ARENA_BYTES, ws_bytes);
        return 1;
    }
    fill(q, N_QKV, &state);
    fill(k, N_QKV, &state);
    fill(v, N_QKV, &state);
    fill(d_o, N_QKV, &state);
    for (i = 0; i < N_W; ++i) /* identity kernel (causal SDPA) plus a little noise */
        conv_w[i] = 0.0f;
    for (i = 0; i < H; ++i)
        conv_w[(i * CQ + (CQ - 1)) * CK + (CK - 1) / 2] = 1.0f;
    printf("realtime_loop: tileattn %s, workspace %zu bytes of a %zu-byte arena\n",
           ta_version_string(), ws_bytes, ARENA_BYTES);

    /* 2. warm-up step: the OpenMP runtime creates its thread pool here */
    if ((st = step(&p, ws_bytes)) != TA_OK) {
        fprintf(stderr, "realtime_loop: warm-up step: %s\n", ta_status_string(st));
        return 1;
    }

    /* 3. the loop: nothing in it allocates */
    marker("TA_NOALLOC_BEGIN\n");
    for (s = 0; s < STEPS && loop_st == TA_OK; ++s)
        loop_st = step(&p, ws_bytes);
    marker("TA_NOALLOC_END\n");

    if (loop_st != TA_OK) {
        fprintf(stderr, "realtime_loop: step %d: %s\n", s, ta_status_string(loop_st));
        return 1;
    }
    for (i = 0; i < N_QKV; ++i)
        bad += !isfinite(o[i]) || !isfinite(dq[i]) || !isfinite(dk[i]) || !isfinite(dv[i]);
    for (i = 0; i < N_W; ++i)
        bad += !isfinite(conv_w[i]);
    printf("realtime_loop: %d steps, o[0] = %g, conv_w[h0, c_q-1, P] = %.6f: %s\n", STEPS,
           (double)o[0], (double)conv_w[(CQ - 1) * CK + (CK - 1) / 2], bad ? "BAD" : "ok");
    return bad ? 1 : 0;
}
