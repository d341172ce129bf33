#!/usr/bin/env python3
"""Fast mode (TA_PRECISION_FAST) MTA forward on the GPU (issue 11's benchmark):
tileattn's tensor-core MTA (the conv's key direction folded into filtered keys,
cuda/ta_cuda_fast_mta.cu) against, in the same process, on the same bf16
tensors and stream:

- PyTorch SDPA's flash backend, causal, on the same shape without the conv
  (the issue's yardstick: "within 3x of flash");
- an eager PyTorch MTA in bf16 (python/tileattn/reference.py: materialised
  scores, conv2d with groups = heads, softmax, matmul), as the released models
  run it;
- tileattn's exact f32 MTA forward (the CUDA exact kernels) for context.

    python3 bench/cuda_fast_mta_bench.py --lib BUILD/libtileattn_bench.so
        [--quick] [--reps N] [--warmup N] [--csv FILE] [--configs] [--bwd]

Shapes: MTA 6 x 11 with D = 64 and 128, and 7 x 7 with D = 64, all B = 1,
H = 16, S = 1k .. 8k, causal (MTA always is). Inputs uniform in [-1, 1); the
kernels 0.3 * uniform(-1, 1) plus 1 at the identity tap, so that the softmax is
not flat. Times are CUDA-event medians of --reps calls after --warmup calls.

Columns: times; `x flash` = ours / flash (time over time: the issue's target is
at most 3, its goal 2); `eager/ours` = eager time over ours (> 1: tileattn
faster); TFLOP/s of useful work, B H S (S + 1) / 2 visible scores times
(4 D + 2 c_q c_k) (as bench/cuda_bench.py counts MTA); `tc TF/s`, the tensor-core
work tileattn actually runs, B H S^2 / 2 times 2 D (c_q + 1) (c_q products of
D for the folded scores, one for p v), and its fraction of the dense bf16 peak
(989 TFLOP/s on an H100/H200 SXM; --peak overrides); the workspace against the
eager MTA's peak memory (both GiB); max |o - o_eager|.
--configs also times every tile_config (the table of cuda/ta_cuda_fast_mta.cu).
--kernels prints, per shape, where ours spends its time: torch.profiler's
device time per kernel (mean over --reps calls; the kernels of one call in
launch order, with their share of the call's kernel time).

--bwd times the backward instead (cuda/ta_cuda_fast_mta_bwd.cu, issue 11's
second target: within 4x of flash's backward): ta_bwd in fast mode on the
forward's o and lse (dq, dk, dv, dconv_w) against flash's causal backward
(torch.autograd.grad of SDPA flash, no conv) and the eager MTA's backward
(autograd through it, grads of q, k, v and the kernel), each timed alone
after its forward; `tc TF/s` counts the tensor-core work the fast backward
runs, B H S^2 / 2 times 2 D (3 c_q + 2) for the score rows, the kernels' dq
and dkf products and dv (plus 2 D c_q for the dq kernel's recomputed scores:
not counted); eager peak memory is the backward's.
"""
import argparse
import csv
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_bench import BwdArgs, FwdArgs, Problem, check, kernel_table, load, median_ms  # noqa: E402
from cuda_fast_bench import bf16_peak_tflops  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tileattn.reference import eager_mta  # noqa: E402

TA_BACKEND_CUDA = 2
TA_F32 = 0
TA_BF16 = 2
TA_PRECISION_FAST = 1
TA_CAUSAL = 1
N_CONFIGS = 5  # TA_CUDA_FAST_MTA_CFGS


class MtaCase:
    def __init__(self, lib, b, h, s, d, c_q, c_k, dtype, precision, q, k, v, w):
        self.lib = lib
        self.o = torch.empty_like(q)
        self.lse = torch.empty(b, h, s, device=q.device, dtype=torch.float32)
        self.p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d,
                         head_dim_v=d, dtype=dtype, precision=precision, flags=TA_CAUSAL,
                         conv_q=c_q, conv_k=c_k)
        self.keep = (q, k, v, w)
        self.fa = FwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), conv_w=w.data_ptr(),
                          o=self.o.data_ptr(), lse=self.lse.data_ptr())
        n = ctypes.c_size_t()
        check(lib, lib.ta_fwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                             ctypes.byref(n)), "fwd size")
        self.ws_bytes = n.value
        self.ws = torch.empty(max(n.value, 1), device=q.device, dtype=torch.uint8)
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def __call__(self):
        check(self.lib, self.lib.ta_fwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.fa), self.ws.data_ptr(),
                                        self.ws.numel(), self.stream), "ta_fwd")

    def bwd_setup(self, d_o):
        """The backward's buffers (after a forward filled o and lse)."""
        q, k, v, w = self.keep
        self.grads = [torch.empty_like(x) for x in (q, k, v, w)]
        self.d_o = d_o
        self.ba = BwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=self.o.data_ptr(),
                          d_o=d_o.data_ptr(), lse=self.lse.data_ptr(), conv_w=w.data_ptr(),
                          dq=self.grads[0].data_ptr(), dk=self.grads[1].data_ptr(),
                          dv=self.grads[2].data_ptr(), dconv_w=self.grads[3].data_ptr())
        n = ctypes.c_size_t()
        check(self.lib, self.lib.ta_bwd_workspace_size(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                                       ctypes.byref(n)), "bwd size")
        self.bws = torch.empty(max(n.value, 1), device=q.device, dtype=torch.uint8)
        return n.value

    def bwd(self):
        check(self.lib, self.lib.ta_bwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.ba), self.bws.data_ptr(),
                                        self.bws.numel(), self.stream), "ta_bwd")


def inputs(b, h, s, d, c_q, c_k, seed, n):
    """n bf16 tensors [b, h, s, d] uniform in [-1, 1), then the kernel w:
    0.3 uniform(-1, 1) plus 1 at the identity tap."""
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(seed)
    xs = [(torch.rand(b, h, s, d, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)
          for _ in range(n)]
    w = (torch.rand(h, c_q, c_k, device=dev, generator=gen) * 2 - 1) * 0.3
    w[:, c_q - 1, (c_k - 1) // 2] += 1.0
    return xs + [w]


def run(lib, b, h, s, d, c_q, c_k, a):
    q, k, v, w = inputs(b, h, s, d, c_q, c_k, 2468 + s + d + c_q, 3)
    fast = MtaCase(lib, b, h, s, d, c_q, c_k, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
    t = {"ours": median_ms(fast, a.warmup, a.reps)}
    cfg = []
    if a.configs:
        for c in range(1, N_CONFIGS + 1):
            fast.p.tile_config = c
            cfg.append(median_ms(fast, a.warmup, a.reps))
        fast.p.tile_config = 0
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        t["flash"] = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               a.warmup, a.reps)
    scale = 1.0 / d ** 0.5
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = eager_mta(q, k, v, w.to(torch.bfloat16), scale)
        torch.cuda.synchronize()
        eager_gib = (torch.cuda.max_memory_allocated() - base) / 2**30
        fast()
        torch.cuda.synchronize()
        err = (fast.o.float() - out.float()).abs().max().item()
        del out
        t["eager"] = median_ms(lambda: eager_mta(q, k, v, w.to(torch.bfloat16), scale),
                               a.warmup, max(3, a.reps // 4))
    if a.exact:
        qf, kf, vf = (x.float() for x in (q, k, v))
        exact = MtaCase(lib, b, h, s, d, c_q, c_k, TA_F32, 0, qf, kf, vf, w)
        t["exact"] = median_ms(exact, 1, 3)
        del exact, qf, kf, vf
    else:
        t["exact"] = float("nan")
    torch.cuda.empty_cache()
    return t, cfg, err, fast.ws_bytes / 2**30, eager_gib


def run_bwd(lib, b, h, s, d, c_q, c_k, a):
    """Backward times: ours (fast), flash (no conv), eager MTA; workspace and
    eager's peak (GiB); max |dq - dq_eager| over max |dq_eager|."""
    q, k, v, d_o, w = inputs(b, h, s, d, c_q, c_k, 1357 + s + d + c_q, 4)
    fast = MtaCase(lib, b, h, s, d, c_q, c_k, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
    fast()
    ws = fast.bwd_setup(d_o)
    t = {"ours": median_ms(fast.bwd, a.warmup, a.reps), "cfg1": float("nan")}
    if a.configs:  # tile_config 1: the mma.sync dq kernel (0 is the wgmma one on sm_90)
        fast.p.tile_config = 1
        t["cfg1"] = median_ms(fast.bwd, a.warmup, a.reps)
        fast.p.tile_config = 0
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
        t["flash"] = median_ms(
            lambda: torch.autograd.grad(out, (qg, kg, vg), d_o, retain_graph=True),
            a.warmup, a.reps)
    del out
    scale = 1.0 / d ** 0.5
    wg = w.to(torch.bfloat16).detach().requires_grad_()
    out = eager_mta(qg, kg, vg, wg, scale)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ge = torch.autograd.grad(out, (qg, kg, vg, wg), d_o, retain_graph=True)
    torch.cuda.synchronize()
    eager_gib = (torch.cuda.max_memory_allocated() - base) / 2**30
    fast.bwd()
    torch.cuda.synchronize()
    err = ((fast.grads[0].float() - ge[0].float()).abs().max() /
           ge[0].float().abs().max()).item()
    del ge
    t["eager"] = median_ms(
        lambda: torch.autograd.grad(out, (qg, kg, vg, wg), d_o, retain_graph=True),
        1, max(3, a.reps // 4))
    del out
    torch.cuda.empty_cache()
    return t, err, ws / 2**30, eager_gib


def tc_tflops(b, h, s, d, c_q, ms, bwd):
    """The tensor-core TFLOP/s the fast MTA runs in `ms`: B H S^2 / 2 pairs
    times 2 D (c_q + 1) forward, 2 D (3 c_q + 2) backward (module docstring)."""
    per_pair = 2.0 * d * ((3 * c_q + 2) if bwd else (c_q + 1))
    return b * h * s * s / 2.0 * per_pair / (ms * 1e-3) / 1e12


def write_csv(path, rows):
    if path and rows:
        with open(path, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)


def main_bwd(lib, a, peak, name, shapes):
    print("fast-mode MTA backward, bf16, causal; flash = PyTorch SDPA flash causal backward, "
          "same shape, no conv; eager = autograd through the PyTorch MTA in bf16")
    head = ("  B  H     S   D  conv |  ours ms flash ms eager ms | x flash eager/ours | "
            "tc TF/s %peak | ws GiB eager GiB | dq rel err | cfg 1 ms cfg1/ours")
    print(head)
    print("-" * len(head))
    rows = []
    for (b, h, s, d, cq, ck) in shapes:
        t, err, ws_gib, eager_gib = run_bwd(lib, b, h, s, d, cq, ck, a)
        if a.kernels:
            q, k, v, d_o, w = inputs(b, h, s, d, cq, ck, 1357 + s + d + cq, 4)
            fast = MtaCase(lib, b, h, s, d, cq, ck, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
            fast()
            fast.bwd_setup(d_o)
            kernel_table(fast.bwd, max(3, a.reps // 2), f"ours, {d=} {cq}x{ck} {s=}")
            if a.configs:
                fast.p.tile_config = 1
                kernel_table(fast.bwd, max(3, a.reps // 2), f"tile_config 1, {d=} {cq}x{ck} {s=}")
            del fast, q, k, v, d_o, w
            torch.cuda.empty_cache()
        tc = tc_tflops(b, h, s, d, cq, t["ours"], True)
        row = dict(device=name, B=b, H=h, S=s, D=d, conv=f"{cq}x{ck}", ours_ms=t["ours"],
                   flash_ms=t["flash"], eager_ms=t["eager"], x_flash=t["ours"] / t["flash"],
                   eager_over_ours=t["eager"] / t["ours"], tc_tflops=tc, peak_frac=tc / peak,
                   ws_gib=ws_gib, eager_gib=eager_gib, dq_rel_err=err, cfg1_ms=t["cfg1"])
        rows.append(row)
        print(f"{b:>3} {h:>2} {s:>5} {d:>3} {cq:>2}x{ck:<2}| {t['ours']:>8.3f} {t['flash']:>8.3f} "
              f"{t['eager']:>8.3f} | {row['x_flash']:>7.2f} {row['eager_over_ours']:>10.1f} | "
              f"{tc:>6.1f} {100 * tc / peak:>5.1f} | {ws_gib:>6.3f} {eager_gib:>9.2f} | "
              f"{err:.2e}  | {t['cfg1']:>8.3f} {t['cfg1'] / t['ours']:>8.2f}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak", type=float, default=0.0)
    ap.add_argument("--csv", default="")
    ap.add_argument("--quick", action="store_true", help="S = 1024 and 4096 only")
    ap.add_argument("--configs", action="store_true", help="also time every tile_config")
    ap.add_argument("--bwd", action="store_true", help="time the backward instead")
    ap.add_argument("--kernels", action="store_true",
                    help="per shape, ours' device time per kernel (torch.profiler)")
    ap.add_argument("--exact", action="store_true",
                    help="also time the exact f32 MTA forward (CUDA cores)")
    a = ap.parse_args()
    lib = load(a.lib)
    peak, name = bf16_peak_tflops()
    if a.peak > 0:
        peak = a.peak
    seqs = (1024, 4096) if a.quick else (1024, 2048, 4096, 8192)
    shapes = [(1, 16, s, d, cq, ck) for (d, cq, ck) in ((64, 6, 11), (128, 6, 11), (64, 7, 7))
              for s in seqs]
    print(f"device: {name}; torch {torch.__version__}; bf16 dense peak {peak:.0f} TFLOP/s")
    if a.bwd:
        write_csv(a.csv, main_bwd(lib, a, peak, name, shapes))
        return
    print("fast-mode MTA forward, bf16, causal; flash = PyTorch SDPA flash causal, same shape, "
          "no conv; eager = PyTorch MTA in bf16; exact = tileattn exact f32 (CUDA cores)")
    head = ("  B  H     S   D  conv |  ours ms flash ms eager ms exact ms | x flash eager/ours | "
            "TF/s tc TF/s %peak | ws GiB eager GiB | max|o-eager|")
    print(head)
    print("-" * len(head))
    rows = []
    for (b, h, s, d, cq, ck) in shapes:
        t, cfg, err, ws_gib, eager_gib = run(lib, b, h, s, d, cq, ck, a)
        if a.kernels:
            q, k, v, w = inputs(b, h, s, d, cq, ck, 2468 + s + d + cq, 3)
            fast = MtaCase(lib, b, h, s, d, cq, ck, TA_BF16, TA_PRECISION_FAST, q, k, v, w)
            kernel_table(fast, max(3, a.reps // 2), f"ours, {d=} {cq}x{ck} {s=}")
            del fast, q, k, v, w
            torch.cuda.empty_cache()
        vis = b * h * s * (s + 1) / 2.0
        tf = vis * (4.0 * d + 2.0 * cq * ck) / (t["ours"] * 1e-3) / 1e12
        tc = tc_tflops(b, h, s, d, cq, t["ours"], False)
        row = dict(device=name, B=b, H=h, S=s, D=d, conv=f"{cq}x{ck}", ours_ms=t["ours"],
                   flash_ms=t["flash"], eager_ms=t["eager"], exact_ms=t["exact"],
                   x_flash=t["ours"] / t["flash"], eager_over_ours=t["eager"] / t["ours"],
                   tflops=tf, tc_tflops=tc, peak_frac=tc / peak, ws_gib=ws_gib,
                   eager_gib=eager_gib, max_abs_diff=err,
                   config_ms=" ".join("%.3f" % x for x in cfg))
        rows.append(row)
        print(f"{b:>3} {h:>2} {s:>5} {d:>3} {cq:>2}x{ck:<2}| {t['ours']:>8.3f} {t['flash']:>8.3f} "
              f"{t['eager']:>8.3f} {t['exact']:>8.3f} | {row['x_flash']:>7.2f} "
              f"{row['eager_over_ours']:>10.1f} | {tf:>5.1f} {tc:>6.1f} {100 * tc / peak:>5.1f} | "
              f"{ws_gib:>6.3f} {eager_gib:>9.2f} | {err:.2e}"
              + (f"   cfg 1..{N_CONFIGS}: {row['config_ms']} ms" if cfg else ""), flush=True)
    write_csv(a.csv, rows)


if __name__ == "__main__":
    main()
