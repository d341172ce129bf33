/*
 * MTA decode with a KV cache (docs/mta.md section 2a): a Multi-Token Attention
 * layer (6 x 11 key-query conv, causal, GQA) on the CPU backend, bf16.
 *
 *   1. The reference: one forward over all S = 40 tokens.
 *   2. The same sequence as an engine runs it: a prefill in two pieces (16,
 *      then 9 tokens), then one token at a time. The KV cache holds every key
 *      so far (seq_k grows; the cache is allocated for S keys, so its strides
 *      stay those of S rows). Each call passes the last c_q - 1 = 5 query rows
 *      before its first one (fewer at the start) as q_hist, copied from a small
 *      history buffer the loop keeps per layer, the way a decoder keeps only
 *      what the next step needs.
 *   3. Every output row of the chunks equals the reference's bit for bit; a
 *      decode step run without its history differs (the conv's window
 *      reaches into the rows before it).
 * Then all of it again with rotary embeddings (docs/rope.md: a 1-D table,
 * half-split pairs, as Llama): the full forward needs no positions (token t
 * is table row t), each chunk passes its tokens' absolute positions in
 * args.rope.pos_q, and the history rows turn by the positions just before
 * (row -i by pos_q[0] - i); q and k are stored unrotated.
 * Then both again with the score ring (docs/mta.md 2a, "The score ring"):
 * every call also passes a ring of raw scores (c_q slots of S keys per
 * head); the prefill pieces still pass q_hist (their history is recomputed,
 * the ring only written), the decode steps pass none and read the history
 * rows' scores from the ring instead of recomputing them, on the CPU and
 * on the reference backend.
 *
 * The workspace is sized once, for the largest call (the size depends on the
 * tiles, not on S). Exit status 0 iff every call returned TA_OK and both
 * comparisons hold.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tileattn.h>

enum { S = 40, H = 4, H_KV = 2, D = 32, C_Q = 6, C_K = 11, HIST = C_Q - 1 };

static uint16_t q[H][S][D], k[H_KV][S][D], v[H_KV][S][D]; /* bf16 [B = 1, heads, S, D] */
static uint16_t o_full[H][S][D], o_steps[H][S][D];
static uint16_t hist[H][HIST][D]; /* the last query rows, [B = 1, H, n, D] */
static float conv_w[H][C_Q][C_K];
static float cos_t[S][D / 2], sin_t[S][D / 2]; /* the rotary table: S positions, D / 2 pairs */
static float ring[H][C_Q][S]; /* the score ring: c_q slots of S keys per head */
static int g_rope;            /* the pass with rotary embeddings */
static int g_ring;            /* the passes with the score ring */
static ta_backend g_be = TA_BACKEND_CPU;
static _Alignas(64) unsigned char workspace[1 << 20];

/* A float rounded to bf16 by truncation (inputs only: any bits will do). */
static uint16_t bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

static void fill_inputs(void) {
    uint32_t s = 12345u;
    int32_t h, t, d, a, b;
    for (h = 0; h < H; ++h)
        for (t = 0; t < S; ++t)
            for (d = 0; d < D; ++d) {
                s = s * 1664525u + 1013904223u;
                q[h][t][d] = bf16((float)(s >> 8) / 16777216.0f - 0.5f);
                if (h < H_KV) {
                    k[h][t][d] = bf16((float)((s * 7u) >> 8) / 16777216.0f - 0.5f);
                    v[h][t][d] = bf16((float)((s * 13u) >> 8) / 16777216.0f - 0.5f);
                }
            }
    for (h = 0; h < H; ++h) /* near the identity kernel: o stays close to causal SDPA */
        for (a = 0; a < C_Q; ++a)
            for (b = 0; b < C_K; ++b)
                conv_w[h][a][b] = (a == C_Q - 1 && b == C_K / 2) ? 1.0f : 0.02f * (float)(a - b);
}

static ta_problem problem(int32_t seq_q, int32_t seq_k, int32_t q_history) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = H;
    p.heads_kv = H_KV;
    p.seq_q = seq_q;
    p.seq_k = seq_k;
    p.head_dim = p.head_dim_v = D;
    p.dtype = TA_BF16;
    p.flags = TA_CAUSAL;
    p.conv_q = C_Q;
    p.conv_k = C_K;
    p.num_threads = 1;
    p.q_history = q_history;
    if (g_rope) {
        p.rope = TA_ROPE_HALF; /* GPT-NeoX / Llama's rotate_half */
        p.rope_pairs = D / 2;
        p.rope_rows = S;
    }
    return p;
}

/* Tokens [t0, t1) against the cache of t1 keys; with_hist: the history rows.
 * Writes rows [t0, t1) of o_steps. */
static ta_status step(int32_t t0, int32_t t1, int with_hist) {
    const int32_t n = with_hist ? (t0 < HIST ? t0 : HIST) : 0;
    const ta_problem p = problem(t1 - t0, t1, n);
    ta_fwd_args a;
    int32_t pos[S], h, t;
    memset(&a, 0, sizeof a);
    for (t = t0; t < t1; ++t) /* the tokens' absolute positions (keys: slot j is position j) */
        pos[t - t0] = t;
    a.rope.cos = &cos_t[0][0], a.rope.sin = &sin_t[0][0], a.rope.pos_q = pos;
    a.q = &q[0][t0][0];
    a.q_strides = (ta_strides){(int64_t)H * S * D, (int64_t)S * D, D}; /* rows of q[H][S][D] */
    a.k = k, a.v = v;                                                  /* the cache: S rows */
    a.k_strides = a.v_strides = (ta_strides){(int64_t)H_KV * S * D, (int64_t)S * D, D};
    a.o = &o_steps[0][t0][0];
    a.o_strides = a.q_strides;
    a.conv_w = &conv_w[0][0][0];
    for (h = 0; h < H; ++h) /* the engine's history buffer: the n rows before t0 */
        memcpy(hist[h], q[h][t0 - n], (size_t)n * D * sizeof(uint16_t));
    a.q_hist = hist;
    a.q_hist_strides = (ta_strides){(int64_t)H * HIST * D, (int64_t)HIST * D, D};
    if (g_ring) { /* decode steps read the history's scores; the prefill's recompute them */
        a.score_ring = &ring[0][0][0];
        a.score_ring_slots = C_Q;
        a.score_ring_strides = (ta_strides){(int64_t)H * C_Q * S, (int64_t)C_Q * S, S};
        if (t1 - t0 == 1) a.q_hist = NULL;
    }
    return ta_fwd(&p, g_be, &a, workspace, sizeof workspace, NULL);
}

/* Steps 1-3; returns 0 if they held. */
static int run(void) {
    static const int32_t prefill[] = {0, 16, 25}; /* two pieces, then decode */
    const ta_problem full = problem(S, S, 0);
    char name[64];
    ta_fwd_args a;
    size_t need = 0;
    ta_status st;
    int32_t i, t, h, differ;
    snprintf(name, sizeof name, "mta_decode%s%s%s", g_rope ? " (rope)" : "",
             g_ring ? " (score ring)" : "", g_be == TA_BACKEND_REF ? " (REF)" : "");
    memset(ring, 0xFF, sizeof ring); /* NaN: an entry read before it is written shows */
    st = ta_fwd_workspace_size(&full, g_be, &need);
    if (st != TA_OK || need > sizeof workspace) {
        printf("%s: workspace %zu bytes: %s\n", name, need, ta_status_string(st));
        return 1;
    }
    /* 1. one forward over the whole sequence */
    memset(&a, 0, sizeof a);
    a.q = q, a.k = k, a.v = v, a.o = o_full, a.conv_w = &conv_w[0][0][0];
    a.rope.cos = &cos_t[0][0], a.rope.sin = &sin_t[0][0]; /* no positions: token t, row t */
    if ((st = ta_fwd(&full, g_be, &a, workspace, sizeof workspace, NULL)) != TA_OK) {
        printf("%s: full forward: %s\n", name, ta_status_string(st));
        return 1;
    }
    /* 2. prefill in pieces, then token by token */
    memset(o_steps, 0xFF, sizeof o_steps);
    for (i = 0; i + 1 < (int32_t)(sizeof prefill / sizeof prefill[0]); ++i)
        if ((st = step(prefill[i], prefill[i + 1], 1)) != TA_OK) break;
    for (t = prefill[2]; st == TA_OK && t < S; ++t)
        st = step(t, t + 1, 1);
    if (st != TA_OK) {
        printf("%s: chunk: %s\n", name, ta_status_string(st));
        return 1;
    }
    /* 3. every row equal; a step without its history is not */
    if (memcmp(o_steps, o_full, sizeof o_full) != 0) {
        printf("%s: FAILED: the chunked rows differ from the full forward\n", name);
        return 1;
    }
    if ((st = step(S - 1, S, 0)) != TA_OK) {
        printf("%s: control step: %s\n", name, ta_status_string(st));
        return 1;
    }
    for (h = 0, differ = 0; h < H; ++h)
        differ |= memcmp(o_steps[h][S - 1], o_full[h][S - 1], sizeof o_full[h][S - 1]) != 0;
    if (!differ) {
        printf("%s: FAILED: a decode step without its history rows gave the same row\n", name);
        return 1;
    }
    printf("%s: prefill 16 + 9 tokens, then %d decode steps with %d history rows: "
           "all %d rows equal one full forward bit for bit; without the history the last "
           "row differs\n",
           name, S - prefill[2], HIST, S);
    return 0;
}

int main(void) {
    ta_rope_1d cfg;
    ta_status st;
    fill_inputs();
    memset(&cfg, 0, sizeof cfg);
    cfg.n_pairs = D / 2;
    cfg.rows = S;
    cfg.base = 10000.0;
    if ((st = ta_rope_table_1d(&cfg, &cos_t[0][0], &sin_t[0][0])) != TA_OK) {
        printf("mta_decode: rope table: %s\n", ta_status_string(st));
        return 1;
    }
    for (g_ring = 0; g_ring < 2; ++g_ring)
        for (g_rope = 0; g_rope < 2; ++g_rope)
            if (run() != 0) return 1;
    g_ring = 1, g_be = TA_BACKEND_REF;
    for (g_rope = 0; g_rope < 2; ++g_rope)
        if (run() != 0) return 1;
    return 0;
}
