/*
 * Rotary embeddings in the load stage (docs/rope.md): a Llama-style layer on
 * the CPU backend, f32.
 *
 *   1. A 1-D table (ta_rope_table_1d, base 500000, 64 rows of 16 pairs).
 *   2. Prefill: 48 tokens, causal, q and k rotated as they are loaded
 *      (TA_ROPE_HALF, positions NULL: token t uses row t). k stays unrotated
 *      in the cache.
 *   3. The same attention with q and k rotated outside, as PyTorch models
 *      write it (x * cos + rotate_half(x) * sin), then a plain ta_fwd: the
 *      same bits, because the load stage does the same f32 operations
 *      (this file, like the library, is compiled with -ffp-contract=off: a
 *      compiler that fused x * c + y * s into an FMA would change the bits).
 *   4. Decode: the last token alone (seq_q = 1) against the 48 cached keys,
 *      its absolute position in pos_q: the same bits as row 47 of the prefill.
 *
 * Exit status 0 iff every call returned TA_OK and both comparisons hold.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tileattn.h>

enum { S = 48, H = 4, H_KV = 2, D = 32, PAIRS = D / 2, ROWS = 64 };

static float q[H][S][D], k[H_KV][S][D], v[H_KV][S][D]; /* [B = 1, heads, S, D] */
static float q_rot[H][S][D], k_rot[H_KV][S][D];        /* step 3 only */
static float o_fused[H][S][D], o_outside[H][S][D], o_decode[H][1][D];
static float cos_t[ROWS][PAIRS], sin_t[ROWS][PAIRS];
static _Alignas(64) unsigned char workspace[1 << 20];

/* rotate_half form, f32: y = x * cos + rotate_half(x) * sin, pairs (i, i + PAIRS) */
static void rotate_outside(const float *x, float *y, int32_t t) {
    int32_t i;
    for (i = 0; i < PAIRS; ++i) {
        const float c = cos_t[t][i], s = sin_t[t][i];
        const float xa = x[i], xb = x[i + PAIRS];
        y[i] = xa * c + (-xb) * s;
        y[i + PAIRS] = xb * c + xa * s;
    }
}

static ta_problem problem(int32_t seq_q, int rope) {
    ta_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1;
    p.heads_q = H;
    p.heads_kv = H_KV;
    p.seq_q = seq_q;
    p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL;
    p.num_threads = 1;
    if (rope) {
        p.rope = TA_ROPE_HALF; /* GPT-NeoX / Llama pairs */
        p.rope_pairs = PAIRS;
        p.rope_rows = ROWS;
    }
    return p;
}

static ta_status forward(const ta_problem *p, const void *qq, const void *kk, void *o,
                         const int32_t *pos_q) {
    ta_fwd_args a;
    size_t need = 0;
    ta_status st = ta_fwd_workspace_size(p, TA_BACKEND_CPU, &need);
    if (st != TA_OK) return st;
    if (need > sizeof workspace) return TA_ERR_WORKSPACE_SIZE;
    memset(&a, 0, sizeof a);
    a.q = qq;
    a.k = kk;
    a.v = v;
    a.o = o;
    if (p->rope) {
        a.rope.cos = &cos_t[0][0];
        a.rope.sin = &sin_t[0][0];
        a.rope.pos_q = pos_q; /* keys: NULL, cache slot t is position t */
    }
    return ta_fwd(p, TA_BACKEND_CPU, &a, workspace, sizeof workspace, NULL);
}

int main(void) {
    ta_rope_1d cfg;
    ta_problem p;
    ta_status st;
    uint32_t seed = 12345u;
    int32_t h, t, ok = 1;
    const int32_t pos_last[1] = {S - 1};
    float *all[3] = {&q[0][0][0], &k[0][0][0], &v[0][0][0]};
    const size_t n_all[3] = {sizeof q / 4, sizeof k / 4, sizeof v / 4};
    size_t i, j;
    for (j = 0; j < 3; ++j) /* inputs in [-1, 1) from a fixed LCG */
        for (i = 0; i < n_all[j]; ++i) {
            seed = seed * 1664525u + 1013904223u;
            all[j][i] = (float)(seed >> 8) * (1.0f / 8388608.0f) - 1.0f;
        }
    /* 1. the table */
    memset(&cfg, 0, sizeof cfg);
    cfg.n_pairs = PAIRS;
    cfg.rows = ROWS;
    cfg.base = 500000.0;
    if ((st = ta_rope_table_1d(&cfg, &cos_t[0][0], &sin_t[0][0])) != TA_OK) goto fail;
    /* 2. prefill, fused */
    p = problem(S, 1);
    if ((st = forward(&p, q, k, o_fused, NULL)) != TA_OK) goto fail;
    /* 3. rotated outside, then plain attention */
    for (h = 0; h < H; ++h)
        for (t = 0; t < S; ++t)
            rotate_outside(q[h][t], q_rot[h][t], t);
    for (h = 0; h < H_KV; ++h)
        for (t = 0; t < S; ++t)
            rotate_outside(k[h][t], k_rot[h][t], t);
    p = problem(S, 0);
    if ((st = forward(&p, q_rot, k_rot, o_outside, NULL)) != TA_OK) goto fail;
    if (memcmp(o_fused, o_outside, sizeof o_fused) != 0) {
        printf("rope_decode: fused and outside rotation differ\n");
        ok = 0;
    }
    /* 4. decode the last token at its absolute position */
    p = problem(1, 1);
    {
        static float q_last[H][1][D]; /* the new token's query, [B, H, 1, D] */
        for (h = 0; h < H; ++h)
            memcpy(q_last[h][0], q[h][S - 1], sizeof q_last[h][0]);
        if ((st = forward(&p, q_last, k, o_decode, pos_last)) != TA_OK) goto fail;
        for (h = 0; h < H; ++h)
            if (memcmp(o_decode[h][0], o_fused[h][S - 1], sizeof o_decode[h][0]) != 0) {
                printf("rope_decode: decode row of head %d differs from the prefill's\n", (int)h);
                ok = 0;
            }
    }
    printf("rope_decode: fused == rotated outside: %s; decode == prefill's last row: %s\n",
           memcmp(o_fused, o_outside, sizeof o_fused) == 0 ? "bit for bit" : "NO",
           ok ? "bit for bit" : "NO");
    return ok ? 0 : 1;
fail:
    printf("rope_decode: %s\n", ta_status_string(st));
    return 1;
}
