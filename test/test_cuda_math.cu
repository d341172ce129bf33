/*
 * Device math equals host math, bit for bit (docs/design.md 3.4), label cuda.
 *
 * Kernels evaluate ta_exp, ta_log, f32 -> f16 and f32 -> bf16 on all 2^32
 * float inputs (in chunks) and f16 -> f32, bf16 -> f32 on all 2^16 inputs; the
 * host evaluates the same functions from the same header and compares the bits.
 * Every mismatch counts (NaN payloads included): must be 0.
 *
 * Without a CUDA device: prints "no CUDA device: skipped" and exits 77.
 * The host side checks chunk c while the device computes chunk c+1, on all
 * CPU cores (POSIX threads where the C library has them in libc).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "ta_math.h"

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#include <pthread.h>
#define HAVE_THREADS 1 /* pthread_create is in libc: no -lpthread needed */
#else
#define HAVE_THREADS 0
#endif

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        const cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHUNK_BITS   24u /* 2^24 inputs per chunk: 192 MiB of results per buffer */
#define CHUNK        (1u << CHUNK_BITS)
#define N_CHUNKS     (1u << (32u - CHUNK_BITS))
#define MAX_THREADS  64
#define MAX_EXAMPLES 4

enum { FN_EXP, FN_LOG, FN_F16, FN_BF16, FN_F16_F32, FN_BF16_F32, N_FN };
static const char *const fn_name[N_FN] = {"ta_exp",         "ta_log",        "ta_f32_to_f16",
                                          "ta_f32_to_bf16", "ta_f16_to_f32", "ta_bf16_to_f32"};

/* ------------------------------------------------------------------------- */
/* kernels                                                                    */
/* ------------------------------------------------------------------------- */

/* out_*[i] = f(x) for x with bits first + i, i < n. Results stored as bits. */
__global__ void k_f32_inputs(uint32_t first, uint32_t n, uint32_t *out_exp, uint32_t *out_log,
                             uint16_t *out_f16, uint16_t *out_bf16) {
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t step = gridDim.x * blockDim.x;
    for (; i < n; i += step) {
        const float x = ta_f32_from_bits(first + i);
        out_exp[i] = ta_f32_bits(ta_exp(x));
        out_log[i] = ta_f32_bits(ta_log(x));
        out_f16[i] = ta_f32_to_f16(x);
        out_bf16[i] = ta_f32_to_bf16(x);
    }
}

/* out_*[h] = widen(h) for every 16-bit pattern h. */
__global__ void k_16_inputs(uint32_t *out_f16, uint32_t *out_bf16) {
    const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h < 65536u) {
        out_f16[h] = ta_f32_bits(ta_f16_to_f32((uint16_t)h));
        out_bf16[h] = ta_f32_bits(ta_bf16_to_f32((uint16_t)h));
    }
}

/* ------------------------------------------------------------------------- */
/* host comparison                                                            */
/* ------------------------------------------------------------------------- */

typedef struct mismatch_log {
    uint64_t count[N_FN];
    uint32_t n_examples[N_FN];
    uint32_t x[N_FN][MAX_EXAMPLES], host[N_FN][MAX_EXAMPLES], dev[N_FN][MAX_EXAMPLES];
} mismatch_log;

static void note(mismatch_log *m, int fn, uint32_t x, uint32_t host, uint32_t dev) {
    if (m->n_examples[fn] < MAX_EXAMPLES) {
        const uint32_t k = m->n_examples[fn]++;
        m->x[fn][k] = x;
        m->host[fn][k] = host;
        m->dev[fn][k] = dev;
    }
    m->count[fn]++;
}

static void merge(mismatch_log *into, const mismatch_log *from) {
    int fn;
    uint32_t k;
    for (fn = 0; fn < N_FN; ++fn) {
        for (k = 0; k < from->n_examples[fn] && into->n_examples[fn] < MAX_EXAMPLES; ++k) {
            const uint32_t j = into->n_examples[fn]++;
            into->x[fn][j] = from->x[fn][k];
            into->host[fn][j] = from->host[fn][k];
            into->dev[fn][j] = from->dev[fn][k];
        }
        into->count[fn] += from->count[fn];
    }
}

/* One host worker: compares inputs [lo, hi) of a chunk. */
typedef struct work {
    uint32_t first, lo, hi;
    const uint32_t *dev_exp, *dev_log;
    const uint16_t *dev_f16, *dev_bf16;
    mismatch_log log;
} work;

static void compare_range(work *w) {
    uint32_t i;
    for (i = w->lo; i < w->hi; ++i) {
        const uint32_t ux = w->first + i;
        const float x = ta_f32_from_bits(ux);
        const uint32_t e = ta_f32_bits(ta_exp(x)), l = ta_f32_bits(ta_log(x));
        const uint16_t h = ta_f32_to_f16(x), b = ta_f32_to_bf16(x);
        if (e != w->dev_exp[i]) note(&w->log, FN_EXP, ux, e, w->dev_exp[i]);
        if (l != w->dev_log[i]) note(&w->log, FN_LOG, ux, l, w->dev_log[i]);
        if (h != w->dev_f16[i]) note(&w->log, FN_F16, ux, h, w->dev_f16[i]);
        if (b != w->dev_bf16[i]) note(&w->log, FN_BF16, ux, b, w->dev_bf16[i]);
    }
}

#if HAVE_THREADS
static void *compare_thread(void *arg) {
    compare_range((work *)arg);
    return NULL;
}
#endif

/* Compares one chunk of n results on n_threads host threads; adds to *total. */
static void compare_chunk(uint32_t first, uint32_t n, const uint32_t *dev_exp,
                          const uint32_t *dev_log, const uint16_t *dev_f16,
                          const uint16_t *dev_bf16, int n_threads, mismatch_log *total) {
    static work w[MAX_THREADS];
    int t;
    for (t = 0; t < n_threads; ++t) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].first = first;
        w[t].lo = (uint32_t)((uint64_t)n * (uint64_t)t / (uint64_t)n_threads);
        w[t].hi = (uint32_t)((uint64_t)n * (uint64_t)(t + 1) / (uint64_t)n_threads);
        w[t].dev_exp = dev_exp;
        w[t].dev_log = dev_log;
        w[t].dev_f16 = dev_f16;
        w[t].dev_bf16 = dev_bf16;
    }
#if HAVE_THREADS
    {
        pthread_t tid[MAX_THREADS];
        int started[MAX_THREADS];
        for (t = 0; t < n_threads; ++t)
            started[t] = pthread_create(&tid[t], NULL, compare_thread, &w[t]) == 0;
        for (t = 0; t < n_threads; ++t) {
            if (started[t])
                pthread_join(tid[t], NULL);
            else
                compare_range(&w[t]); /* could not start a thread: do it here */
        }
    }
#else
    for (t = 0; t < n_threads; ++t)
        compare_range(&w[t]);
#endif
    for (t = 0; t < n_threads; ++t)
        merge(total, &w[t].log);
}

static int host_threads(void) {
#if HAVE_THREADS
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
#else
    return 1;
#endif
}

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------- */
/* the two sweeps                                                             */
/* ------------------------------------------------------------------------- */

static void sweep_16(mismatch_log *mm) {
    uint32_t *d_out = NULL, *h_out = NULL;
    uint32_t h;
    CUDA_CHECK(cudaMalloc((void **)&d_out, 2u * 65536u * sizeof(uint32_t)));
    h_out = (uint32_t *)malloc(2u * 65536u * sizeof(uint32_t));
    if (!h_out) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    k_16_inputs<<<256, 256>>>(d_out, d_out + 65536u);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(h_out, d_out, 2u * 65536u * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    for (h = 0; h < 65536u; ++h) {
        const uint32_t f = ta_f32_bits(ta_f16_to_f32((uint16_t)h));
        const uint32_t b = ta_f32_bits(ta_bf16_to_f32((uint16_t)h));
        if (f != h_out[h]) note(mm, FN_F16_F32, h, f, h_out[h]);
        if (b != h_out[65536u + h]) note(mm, FN_BF16_F32, h, b, h_out[65536u + h]);
    }
    free(h_out);
    CUDA_CHECK(cudaFree(d_out));
}

/* Device buffers and pinned host buffers of one chunk, double buffered. */
typedef struct chunk_buf {
    uint32_t *d_exp, *d_log, *h_exp, *h_log;
    uint16_t *d_f16, *d_bf16, *h_f16, *h_bf16;
    cudaStream_t stream;
} chunk_buf;

static void chunk_buf_init(chunk_buf *b) {
    CUDA_CHECK(cudaMalloc((void **)&b->d_exp, CHUNK * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc((void **)&b->d_log, CHUNK * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc((void **)&b->d_f16, CHUNK * sizeof(uint16_t)));
    CUDA_CHECK(cudaMalloc((void **)&b->d_bf16, CHUNK * sizeof(uint16_t)));
    CUDA_CHECK(cudaMallocHost((void **)&b->h_exp, CHUNK * sizeof(uint32_t)));
    CUDA_CHECK(cudaMallocHost((void **)&b->h_log, CHUNK * sizeof(uint32_t)));
    CUDA_CHECK(cudaMallocHost((void **)&b->h_f16, CHUNK * sizeof(uint16_t)));
    CUDA_CHECK(cudaMallocHost((void **)&b->h_bf16, CHUNK * sizeof(uint16_t)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
}

static void chunk_buf_free(chunk_buf *b) {
    CUDA_CHECK(cudaStreamDestroy(b->stream));
    CUDA_CHECK(cudaFree(b->d_exp));
    CUDA_CHECK(cudaFree(b->d_log));
    CUDA_CHECK(cudaFree(b->d_f16));
    CUDA_CHECK(cudaFree(b->d_bf16));
    CUDA_CHECK(cudaFreeHost(b->h_exp));
    CUDA_CHECK(cudaFreeHost(b->h_log));
    CUDA_CHECK(cudaFreeHost(b->h_f16));
    CUDA_CHECK(cudaFreeHost(b->h_bf16));
}

/* Queues chunk c on buffer b: kernel, then copies back. */
static void launch_chunk(chunk_buf *b, uint32_t c, int n_blocks) {
    k_f32_inputs<<<n_blocks, 256, 0, b->stream>>>(c << CHUNK_BITS, CHUNK, b->d_exp, b->d_log,
                                                  b->d_f16, b->d_bf16);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(b->h_exp, b->d_exp, CHUNK * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                               b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_log, b->d_log, CHUNK * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                               b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_f16, b->d_f16, CHUNK * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                               b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_bf16, b->d_bf16, CHUNK * sizeof(uint16_t),
                               cudaMemcpyDeviceToHost, b->stream));
}

static void sweep_32(mismatch_log *mm, int n_threads, int n_sm) {
    chunk_buf buf[2];
    uint32_t c;
    const int n_blocks = n_sm * 8;
    chunk_buf_init(&buf[0]);
    chunk_buf_init(&buf[1]);
    launch_chunk(&buf[0], 0, n_blocks);
    for (c = 0; c < N_CHUNKS; ++c) {
        chunk_buf *cur = &buf[c & 1u];
        if (c + 1 < N_CHUNKS) launch_chunk(&buf[(c + 1) & 1u], c + 1, n_blocks);
        CUDA_CHECK(cudaStreamSynchronize(cur->stream));
        compare_chunk(c << CHUNK_BITS, CHUNK, cur->h_exp, cur->h_log, cur->h_f16, cur->h_bf16,
                      n_threads, mm);
        if ((c + 1) % 32u == 0) fprintf(stderr, "  %u/%u chunks\n", c + 1, N_CHUNKS);
    }
    chunk_buf_free(&buf[0]);
    chunk_buf_free(&buf[1]);
}

int main(void) {
    int n_dev = 0, dev = 0, n_threads, fn;
    cudaError_t err = cudaGetDeviceCount(&n_dev);
    cudaDeviceProp prop;
    mismatch_log mm;
    double t0, t16, t32;
    uint64_t total = 0;
    if (err != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: skipped (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "device count 0");
        return 77;
    }
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    n_threads = host_threads();
    printf("test_cuda_math: %s (sm_%d%d, %d SMs), host comparison on %d thread(s)\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, n_threads);
    memset(&mm, 0, sizeof mm);

    t0 = now_s();
    sweep_16(&mm);
    t16 = now_s() - t0;
    t0 = now_s();
    sweep_32(&mm, n_threads, prop.multiProcessorCount);
    t32 = now_s() - t0;
    CUDA_CHECK(cudaDeviceSynchronize());

    printf("\n%-16s %12s %12s\n", "function", "inputs", "mismatches");
    for (fn = 0; fn < N_FN; ++fn) {
        const uint64_t inputs = fn >= FN_F16_F32 ? 65536ull : 4294967296ull;
        uint32_t k;
        printf("%-16s %12llu %12llu\n", fn_name[fn], (unsigned long long)inputs,
               (unsigned long long)mm.count[fn]);
        for (k = 0; k < mm.n_examples[fn]; ++k)
            fprintf(stderr, "  %s(0x%08x): host 0x%08x, device 0x%08x\n", fn_name[fn], mm.x[fn][k],
                    mm.host[fn][k], mm.dev[fn][k]);
        total += mm.count[fn];
    }
    printf("\n2^16 sweep %.2f s, 2^32 sweep %.1f s\n", t16, t32);
    if (total) {
        fprintf(stderr, "test_cuda_math: FAILED (%llu mismatches)\n", (unsigned long long)total);
        return 1;
    }
    printf("test_cuda_math: passed\n");
    return 0;
}
