/*
 * Consumer of an installed tileattn: plan, then run, on the reference backend.
 * Built by test/check_install_consumer.cmake through find_package
 * (tileattn::tileattn, and tileattn::cuda when the package has it) and through
 * pkg-config (`pkg-config --cflags --libs tileattn`, and tileattn-cuda).
 * Exit status 0 iff the calls succeed and the output is finite and plausible.
 * It also prints whether TA_BACKEND_CUDA is available and its workspace size
 * (the size query works without the CUDA component and without a GPU); the
 * check reads the binary's symbols to tell which CUDA table was linked.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tileattn.h>
#include <tileattn_tiling.h> /* installed too, and must compile on its own */

/* A fixed pseudo-random sequence in [-1, 1). */
static float next_value(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

static float *filled(size_t n, uint32_t *state) {
    float *p = (float *)malloc(n * sizeof(float));
    size_t i;
    if (!p) return NULL;
    for (i = 0; i < n; ++i)
        p[i] = next_value(state);
    return p;
}

int main(void) {
    enum { B = 1, H = 2, HKV = 1, SQ = 9, SK = 13, D = 16, DV = 8 };
    ta_problem p;
    ta_fwd_args a;
    size_t bytes = 0, cuda_bytes = 0, i;
    uint32_t state = 12345u;
    float *q, *k, *v, *o, *lse, vmin = INFINITY, vmax = -INFINITY;
    void *ws;
    ta_status st;
    int bad = 0;

    /* the installed header and the linked archive come from one build */
    if (ta_version() != TA_VERSION) {
        fprintf(stderr, "consumer: header version %d, library %u\n", TA_VERSION,
                (unsigned)ta_version());
        return 1;
    }
    memset(&p, 0, sizeof p);
    p.batch = B;
    p.heads_q = H;
    p.heads_kv = HKV;
    p.seq_q = SQ;
    p.seq_k = SK;
    p.head_dim = D;
    p.head_dim_v = DV;
    p.flags = TA_CAUSAL;

    /* 1. plan: the workspace size needs no buffers */
    st = ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes);
    if (st != TA_OK) {
        fprintf(stderr, "consumer: ta_fwd_workspace_size: %s\n", ta_status_string(st));
        return 1;
    }
    st = ta_fwd_workspace_size(&p, TA_BACKEND_CUDA, &cuda_bytes);
    if (st != TA_OK) {
        fprintf(stderr, "consumer: CUDA size query: %s\n", ta_status_string(st));
        return 1;
    }
    /* 2. the caller owns every buffer: a 64-byte aligned workspace, tensors */
    ws = aligned_alloc(TA_WORKSPACE_ALIGN, bytes ? (bytes + TA_WORKSPACE_ALIGN - 1) /
                                                       TA_WORKSPACE_ALIGN * TA_WORKSPACE_ALIGN
                                                 : TA_WORKSPACE_ALIGN);
    q = filled((size_t)B * H * SQ * D, &state);
    k = filled((size_t)B * HKV * SK * D, &state);
    v = filled((size_t)B * HKV * SK * DV, &state);
    o = (float *)malloc((size_t)B * H * SQ * DV * sizeof(float));
    lse = (float *)malloc((size_t)B * H * SQ * sizeof(float));
    if (!ws || !q || !k || !v || !o || !lse) {
        fprintf(stderr, "consumer: out of memory\n");
        bad = 1;
        goto done;
    }
    for (i = 0; i < (size_t)B * H * SQ * DV; ++i)
        o[i] = NAN; /* poison */
    for (i = 0; i < (size_t)B * HKV * SK * DV; ++i) {
        vmin = v[i] < vmin ? v[i] : vmin;
        vmax = v[i] > vmax ? v[i] : vmax;
    }

    /* 3. run */
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    st = ta_fwd(&p, TA_BACKEND_REF, &a, ws, bytes, NULL);
    if (st != TA_OK) {
        fprintf(stderr, "consumer: ta_fwd: %s\n", ta_status_string(st));
        bad = 1;
        goto done;
    }
    /* every output is a convex combination of rows of v: finite, within v's range */
    for (i = 0; i < (size_t)B * H * SQ * DV; ++i)
        if (!isfinite(o[i]) || o[i] < vmin - 1e-5f || o[i] > vmax + 1e-5f) ++bad;
    for (i = 0; i < (size_t)B * H * SQ; ++i)
        if (!isfinite(lse[i])) ++bad;
    printf("consumer: tileattn %s, workspace %zu bytes, o[0] = %g, lse[0] = %g, "
           "CUDA available %d (workspace %zu bytes): %s\n",
           ta_version_string(), bytes, (double)o[0], (double)lse[0],
           ta_backend_available(TA_BACKEND_CUDA), cuda_bytes, bad ? "BAD" : "ok");
done:
    free(ws);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    return bad ? 1 : 0;
}
