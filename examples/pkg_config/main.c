/*
 * An MTA forward on the reference backend, built with pkg-config
 * (examples/pkg_config/Makefile). Prints the status and o[0]; exit status 0 iff
 * the call succeeded and the output is finite.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tileattn.h>

enum { H = 2, S = 48, D = 16, CQ = 6, CK = 11 };

int main(void) {
    static float q[H * S * D], k[H * S * D], v[H * S * D], o[H * S * D], w[H * CQ * CK];
    ta_problem p = {0};
    ta_fwd_args a = {0};
    size_t bytes = 0, i;
    void *ws;
    ta_status st;
    int bad = 0;
    p.batch = 1;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_k = S;
    p.head_dim = p.head_dim_v = D;
    p.flags = TA_CAUSAL;
    p.conv_q = CQ;
    p.conv_k = CK;
    for (i = 0; i < (size_t)H * S * D; ++i) {
        q[i] = (float)((i * 37u) % 17u) / 17.0f - 0.5f;
        k[i] = (float)((i * 11u) % 13u) / 13.0f - 0.5f;
        v[i] = (float)((i * 7u) % 19u) / 19.0f - 0.5f;
    }
    for (i = 0; i < H; ++i) /* the identity tap w[h, c_q-1, (c_k-1)/2] plus a neighbour */
        w[(i * CQ + CQ - 1) * CK + CK / 2] = 1.0f, w[(i * CQ + CQ - 2) * CK + CK / 2] = 0.25f;
    if ((st = ta_fwd_workspace_size(&p, TA_BACKEND_REF, &bytes)) != TA_OK) {
        fprintf(stderr, "mta_pkg_config: %s\n", ta_status_string(st));
        return 1;
    }
    ws = aligned_alloc(TA_WORKSPACE_ALIGN,
                       (bytes + TA_WORKSPACE_ALIGN) / TA_WORKSPACE_ALIGN * TA_WORKSPACE_ALIGN);
    a.q = q;
    a.k = k;
    a.v = v;
    a.conv_w = w;
    a.o = o;
    st = ws ? ta_fwd(&p, TA_BACKEND_REF, &a, ws, bytes, NULL) : TA_ERR_NULL_ARG;
    free(ws);
    for (i = 0; i < (size_t)H * S * D; ++i)
        bad += !isfinite(o[i]);
    printf("mta_pkg_config: tileattn %s: %s, o[0] = %g%s\n", ta_version_string(),
           ta_status_string(st), (double)o[0], bad ? " (non-finite outputs)" : "");
    return st == TA_OK && !bad ? 0 : 1;
}
