/*
 * Hopper warpgroup MMA (wgmma.mma_async, sm_90a) building blocks shared by the
 * fast-mode kernels cuda/ta_cuda_fast_fwd_sm90.cu (forward) and
 * cuda/ta_cuda_fast_bwd_sm90.cu (backward). Not installed.
 *
 * Everything below exists in sm_90a device code only (TA_WG_ENABLED); a
 * kernel's body is wrapped in #ifdef TA_WG_ENABLED and is an empty stand-in in
 * the other targets, which the host never launches (TA_CUDA_HAVE_SM90A).
 *
 * Shared memory operands: a region of R rows and D features is [DB][R][64]
 * elements, DB = ceil(D / 64) blocks of 64 features, each row 128 bytes, the
 * 16-byte chunk c of row r stored at chunk c ^ (r % 8) (the 128-byte swizzle
 * wgmma reads), regions 1024-byte aligned and R a multiple of 8. One region
 * serves both ways (PTX ISA, "Matrix Descriptor Format" and the canonical
 * layouts):
 *   K-major (the features are the reduction dim, as q and k in s = q k^T):
 *     start = block (f / 64) + row + 32 bytes per 16 features, stride offset
 *     1024 (8 rows of 128 bytes), leading offset unused;
 *   N-major (the rows are the reduction dim, as v in o += p v): start = 2048
 *     bytes per 16 rows, stride offset 1024 (8 rows), leading offset = one
 *     feature block (R rows x 128 bytes).
 */
#ifndef TA_CUDA_WG_CUH
#define TA_CUDA_WG_CUH

#include <stddef.h>
#include <stdint.h>

#include "ta_cuda_fast.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TA_WG_ENABLED 1
#include "ta_cuda_wgmma.inc"

/* The 64-bit shared-memory matrix descriptor: start address, leading and
 * stride byte offsets (16-byte units, 14 bits each), 128-byte swizzle. */
TA_FAST_FN uint64_t ta_wg_desc(uint32_t addr, uint32_t lead, uint32_t stride) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lead & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((stride & 0x3FFFFu) >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The same without swizzle (layout type 0): 8 x 16-byte core matrices,
 * `lead` bytes between the two of a k-step (K direction), `stride` bytes
 * between those of rows r and r + 8; a start on any 16 bytes. The fast MTA
 * forward's q (cuda/ta_cuda_fast_mta_sm90.cu) is [D / 8][rows][8] elements,
 * so its rows are 16 bytes apart and a start one row down shifts every row
 * of the operand by one. */
TA_FAST_FN uint64_t ta_wg_desc_plain(uint32_t addr, uint32_t lead, uint32_t stride) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lead & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((stride & 0x3FFFFu) >> 4) << 32);
}

/* A descriptor whose start is `bytes` further (a multiple of 16, staying
 * inside shared memory): only the start field, in the low word, changes, so
 * a k-step's descriptor is one add from its product's base. */
TA_FAST_FN uint64_t ta_wg_desc_add(uint64_t d, uint32_t bytes) {
    return (d & 0xFFFFFFFF00000000ull) | (uint64_t)((uint32_t)d + (bytes >> 4));
}

TA_FAST_FN void ta_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TA_FAST_FN void ta_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> TA_FAST_FN void ta_wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* cp.async (generic proxy) writes, then wgmma (async proxy) reads */
TA_FAST_FN void ta_wg_proxy_fence() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keep a register's value (and its use) on this side of the surrounding asm:
 * wgmma reads its operands and writes its accumulators asynchronously until
 * the wait, so nothing may move across it. */
template <int N> TA_FAST_FN void ta_wg_keep(float (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(x[i])::"memory");
}
/* Named barrier 1 + wg over warpgroup wg's 128 threads (barrier 0 is
 * __syncthreads). */
TA_FAST_FN void ta_wg_bar(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }
TA_FAST_FN void ta_wg_keep_row(float m[2], float l[2], float corr[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
        asm volatile("" : "+f"(m[r]), "+f"(l[r]), "+f"(corr[r])::"memory");
}
template <int N> TA_FAST_FN void ta_wg_keep_u(uint32_t (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            asm volatile("" : "+r"(x[i][e])::"memory");
}

/* ---- warp specialisation (cuda/ta_cuda_fast_fwd_ws.cu) ---- */

/* Named barriers beyond ta_wg_bar's: bar.sync / bar.arrive of `n` threads
 * (a multiple of 32) on barrier `id`. */
TA_FAST_FN void ta_bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
TA_FAST_FN void ta_bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* The warpgroup's register budget from here on (a multiple of 8 in [24, 256];
 * every warp of the warpgroup executes it): a producer gives registers back,
 * the consumers take them. */
template <int N> TA_FAST_FN void ta_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> TA_FAST_FN void ta_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* mbarrier objects (8 bytes of shared memory at `bar`): init with an arrival
 * count (one thread, then ta_mb_init_fence and a block barrier), arrive (with
 * or without a transaction count that TMA copies complete), and wait for the
 * phase of parity `parity` to complete. */
TA_FAST_FN void ta_mb_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
TA_FAST_FN void ta_mb_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
TA_FAST_FN void ta_mb_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
TA_FAST_FN void ta_mb_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
TA_FAST_FN void ta_mb_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n"
                 ".reg .pred P1;\n"
                 "TA_MB_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@P1 bra TA_MB_DONE;\n"
                 "bra TA_MB_WAIT;\n"
                 "TA_MB_DONE:\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* TMA: the box at coordinates (c0 .. c3) of the 4-d tensor map `map` (the
 * generic address of a __grid_constant__ parameter) -> shared memory at dst;
 * its bytes complete the transaction count of mbarrier `bar`. */
TA_FAST_FN void ta_tma_load4(uint32_t dst, const void *map, uint32_t bar, int32_t c0, int32_t c1,
                             int32_t c2, int32_t c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

/* ---- one wgmma by accumulator size (N = 2 x the registers) ---- */

template <bool BF16> TA_FAST_FN void ta_wg_ss(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_ss_n128_bf16(d, a, b, acc);
    else
        ta_wg_ss_n128_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_ss(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_ss_n64_bf16(d, a, b, acc);
    else
        ta_wg_ss_n64_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_ss(float (&d)[16], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_ss_n32_bf16(d, a, b, acc);
    else
        ta_wg_ss_n32_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n64_bf16(d, a, b);
    else
        ta_wg_rs_n64_f16(d, a, b);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[48], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n96_bf16(d, a, b);
    else
        ta_wg_rs_n96_f16(d, a, b);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n128_bf16(d, a, b);
    else
        ta_wg_rs_n128_f16(d, a, b);
}
template <bool BF16> TA_FAST_FN void ta_wg_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
    if (BF16)
        ta_wg_rs_n256_bf16(d, a, b);
    else
        ta_wg_rs_n256_f16(d, a, b);
}

/* a K-major (the fast MTA backward's dC without swizzle), b N-major */
template <bool BF16> TA_FAST_FN void ta_wg_sst(float (&d)[32], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_sst_n64_bf16(d, a, b, acc);
    else
        ta_wg_sst_n64_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_sst(float (&d)[48], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_sst_n96_bf16(d, a, b, acc);
    else
        ta_wg_sst_n96_f16(d, a, b, acc);
}
template <bool BF16> TA_FAST_FN void ta_wg_sst(float (&d)[64], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_sst_n128_bf16(d, a, b, acc);
    else
        ta_wg_sst_n128_f16(d, a, b, acc);
}

/* both MN-major (the fast MTA backward's dkf_a^T += q^T dC, dv^T += dO^T P) */
template <bool BF16> TA_FAST_FN void ta_wg_stt(float (&d)[16], uint64_t a, uint64_t b, int acc) {
    if (BF16)
        ta_wg_stt_n32_bf16(d, a, b, acc);
    else
        ta_wg_stt_n32_f16(d, a, b, acc);
}

/* ---- products over a whole reduction dim (issued, not committed) ---- */

/* acc = a b^T over D features, both K-major: a = the 64 rows from a_row0 of a
 * region of RA rows, b = all RB rows of a region (N = RB). The forward's
 * s = q k^T, the backward's s^T = k q^T, dp = do v^T, dp^T = v do^T. */
template <int D, int RA, int RB, bool BF16>
TA_FAST_FN void ta_wg_ss_rows(float (&acc)[RB / 2], uint32_t a, int a_row0, uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        ta_wg_ss<BF16>(
            acc,
            ta_wg_desc(a + (uint32_t)((kk >> 2) * (RA * 128) + a_row0 * 128 + (kk & 3) * 32), 16u,
                       1024u),
            ta_wg_desc(b + (uint32_t)((kk >> 2) * (RB * 128) + (kk & 3) * 32), 16u, 1024u), kk > 0);
}

/* acc += x b over the R rows of b (N-major: N = the D features), x in
 * registers as R / 16 A fragments (ta_fast_p_fragment). The forward's o += p v,
 * the backward's dv += p^T do, dk += ds^T q, dq += ds k. */
template <int D, int R, bool BF16>
TA_FAST_FN void ta_wg_rs_rows(float (&acc)[D / 2], const uint32_t (&x)[R / 16][4], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk)
        ta_wg_rs<BF16>(acc, x[kk], ta_wg_desc(b + (uint32_t)(kk * 2048), R * 128u, 1024u));
}

/* rows [row0, row0 + R) of a slice -> the swizzled region at `region`
 * ([DB][R][64]) by the block's THREADS threads; rows at or past n_valid read
 * zeros. When the threads cover whole rows (D = 64, 128, 256), each thread
 * keeps one chunk column and steps its source and destination by constants
 * (the swizzle phase r % 8 does not change between passes); D = 96 takes the
 * general loop. */
template <int D, int R, int THREADS>
TA_FAST_FN void ta_wg_load_rows(uint32_t region, const uint16_t *base, int64_t off, int64_t seq,
                                int32_t row0, int32_t n_valid) {
    constexpr int CH = D / 8;
    if (THREADS % CH == 0 && R % (THREADS / CH) == 0) {
        constexpr int RPP = THREADS / CH; /* rows per pass */
        const int c = (int)threadIdx.x % CH, r0 = (int)threadIdx.x / CH;
        const uint32_t dst =
            region + (uint32_t)((c >> 3) * (R * 128) + r0 * 128 + (((c & 7) ^ (r0 & 7)) << 4));
        const uint16_t *src = base + off + (int64_t)(row0 + r0) * seq + 8 * c;
#pragma unroll
        for (int j = 0; j < R / RPP; ++j) {
            const bool ok = row0 + r0 + j * RPP < n_valid;
            ta_fast_cp16(dst + (uint32_t)(j * RPP * 128), ok ? src + (int64_t)j * RPP * seq : base,
                         ok ? 16 : 0);
        }
    } else {
        for (int i = (int)threadIdx.x; i < R * CH; i += THREADS) {
            const int r = i / CH, c = i % CH;
            const int32_t row = row0 + r;
            const bool ok = row < n_valid;
            const uint16_t *src = ok ? base + off + (int64_t)row * seq + 8 * c : base;
            ta_fast_cp16(
                region + (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4)),
                src, ok ? 16 : 0);
        }
    }
}
#endif /* sm_90a */

#endif /* TA_CUDA_WG_CUH */
