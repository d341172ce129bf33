// C++ use of tileattn (a C11 library; the header is extern "C"): grouped-query
// SDPA forward on the CPU backend, buffers owned by std::vector, the workspace
// sized by the query and aligned to TA_WORKSPACE_ALIGN.
#include <tileattn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace {

struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
};

std::vector<float> random_tensor(size_t n, unsigned &state) {
    std::vector<float> x(n);
    for (float &e : x) {
        state = state * 1664525u + 1013904223u;
        e = static_cast<float>(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    return x;
}

}  // namespace

int main() {
    ta_problem p{};  // zero = defaults; the sizes below are required
    p.batch = 2;
    p.heads_q = 8;
    p.heads_kv = 2;  // GQA: 4 query heads per kv head
    p.seq_q = p.seq_k = 128;
    p.head_dim = p.head_dim_v = 64;
    p.flags = TA_CAUSAL;
    const size_t n_q = size_t(p.batch) * p.heads_q * p.seq_q * p.head_dim;
    const size_t n_kv = size_t(p.batch) * p.heads_kv * p.seq_k * p.head_dim;

    size_t bytes = 0;
    ta_status st = ta_fwd_workspace_size(&p, TA_BACKEND_CPU, &bytes);
    if (st != TA_OK) {
        std::fprintf(stderr, "sdpa_cpp: %s\n", ta_status_string(st));
        return 1;
    }
    const size_t rounded = (bytes + TA_WORKSPACE_ALIGN - 1) / TA_WORKSPACE_ALIGN * TA_WORKSPACE_ALIGN;
    std::unique_ptr<void, FreeDeleter> ws(
        std::aligned_alloc(TA_WORKSPACE_ALIGN, rounded ? rounded : TA_WORKSPACE_ALIGN));

    unsigned state = 1u;
    std::vector<float> q = random_tensor(n_q, state), k = random_tensor(n_kv, state),
                       v = random_tensor(n_kv, state), o(n_q),
                       lse(size_t(p.batch) * p.heads_q * p.seq_q);
    ta_fwd_args a{};
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.lse = lse.data();
    st = ta_fwd(&p, TA_BACKEND_CPU, &a, ws.get(), bytes, nullptr);
    if (st != TA_OK) {
        std::fprintf(stderr, "sdpa_cpp: ta_fwd: %s\n", ta_status_string(st));
        return 1;
    }
    int bad = 0;
    for (float x : o) bad += !std::isfinite(x) || std::fabs(x) > 1.0f;  // a mean of rows of v
    std::printf("sdpa_cpp: tileattn %s, GQA %d/%d heads, o[0] = %g: %s\n", ta_version_string(),
                p.heads_q, p.heads_kv, double(o[0]), bad ? "BAD" : "ok");
    return bad ? 1 : 0;
}
