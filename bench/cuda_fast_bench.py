#!/usr/bin/env python3
"""Fast mode (TA_PRECISION_FAST, tensor cores) SDPA forward and backward on the
GPU against PyTorch SDPA's flash and cuDNN backends, bf16, in the same process,
on the same tensors and stream (issue 10's benchmark):

    python3 bench/cuda_fast_bench.py --lib BUILD/libtileattn_bench.so
        [--pass fwd|bwd|both] [--dims 64,128,256] [--seqs 512,1024,...]
        [--tokens 16384] [--hidden 2048] [--reps N] [--warmup N] [--csv FILE]
        [--quick] [--sweep]

Shapes: B * S = --tokens (16k) tokens, H = --hidden / D heads (2048), S from
--seqs, causal and not. [B, H, S, D] tensors for tileattn; PyTorch gets the
same storage. Times are CUDA-event medians of --reps calls after --warmup
calls; inputs (and the backward's d_o) uniform in [-1, 1).

--pass fwd (the default): ta_fwd against F.scaled_dot_product_attention; each
row also checks tileattn's o against flash's (max abs difference, printed:
both are bf16 approximations).

--pass bwd: ta_bwd (fast mode, on o and lse from one ta_fwd call) against
torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True) on each backend's
forward output, run once outside the timed region: the times are the
backward's alone. Before timing, tileattn's dq, dk, dv are checked against
flash's (cuDNN's where flash is unavailable): the largest max abs difference
of the three is printed. Until the tensor-core backward lands, fast mode's
backward runs the exact kernels (CUDA cores, far slower: use --quick).

--pass both: the forward table, then the backward table.

TFLOP/s count 4 B H S^2 D for the forward, halved under the causal mask (as
FlashAttention reports), and 2.5 times that for the backward. The
hardware-limit column is the dense bf16 tensor-core peak of the device's data
sheet (989 TFLOP/s for an H100/H200 SXM; --peak overrides). Ratios are
tileattn's speed over the baseline's (> 1: tileattn faster). The CSV has one
row per (pass, shape), its first column `pass` (fwd or bwd).
--sweep also times every tile configuration of the table (config_ms), for the
pass or passes chosen.
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
from cuda_bench import BwdArgs, FwdArgs, Problem, check, load, median_ms  # noqa: E402

TA_BACKEND_CUDA = 2
TA_BF16 = 2
TA_PRECISION_FAST = 1
TA_CAUSAL = 1
BWD_FLOPS = 2.5  # the backward's work over the forward's (bench/README.md's count)
BASELINES = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def bf16_peak_tflops():
    name = torch.cuda.get_device_name(0)
    if "H100" in name or "H200" in name or "H800" in name or "H20" in name:
        return 989.4, name
    if "A100" in name:
        return 312.0, name
    return float("nan"), name


N_CANDIDATES = {64: 7, 96: 5, 128: 8, 256: 7}  # docs/cuda.md section 7, "Configurations"


class Case:
    """One shape's tensors, problem, workspace and tileattn calls (both passes)."""

    def __init__(self, lib, b, h, s, d, causal):
        dev = torch.device("cuda")
        gen = torch.Generator(device=dev).manual_seed(4321 + s + d + h)
        self.q, self.k, self.v = ((torch.rand(b, h, s, d, device=dev, generator=gen) * 2 - 1)
                                  .to(torch.bfloat16) for _ in range(3))
        self.o = torch.empty_like(self.q)
        self.lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        self.lib, self.d, self.causal = lib, d, causal
        self.p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d,
                         head_dim_v=d, dtype=TA_BF16, precision=TA_PRECISION_FAST,
                         flags=TA_CAUSAL if causal else 0)
        self.fa = FwdArgs(q=self.q.data_ptr(), k=self.k.data_ptr(), v=self.v.data_ptr(),
                          o=self.o.data_ptr(), lse=self.lse.data_ptr())
        self.stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.ws = self.workspace(lib.ta_fwd_workspace_size, "fwd size")
        self.flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)

    def workspace(self, query, what):
        n = ctypes.c_size_t()
        check(self.lib, query(ctypes.byref(self.p), TA_BACKEND_CUDA, ctypes.byref(n)), what)
        return torch.empty(max(n.value, 1), device=self.q.device, dtype=torch.uint8)

    def ta_fwd(self):
        check(self.lib, self.lib.ta_fwd(ctypes.byref(self.p), TA_BACKEND_CUDA,
                                        ctypes.byref(self.fa), self.ws.data_ptr(),
                                        self.ws.numel(), self.stream), "ta_fwd")

    def sweep(self, fn, warmup, reps):
        """ms of fn for every candidate of the table (tile_config k >= 1; NaN where the
        library refuses one); tile_config is 0 again afterwards."""
        cfg_ms = []
        for cfg in range(1, N_CANDIDATES[self.d] + 1):
            self.p.tile_config = cfg
            try:
                cfg_ms.append(median_ms(fn, warmup, reps))
            except RuntimeError as e:  # e.g. the wgmma candidate off sm_90
                print(f"  tile_config {cfg}: {e}", file=sys.stderr)
                cfg_ms.append(float("nan"))
        self.p.tile_config = 0
        return cfg_ms


def run_fwd(case, warmup, reps, sweep):
    q, k, v, causal = case.q, case.k, case.v, case.causal
    t = {"ta": median_ms(case.ta_fwd, warmup, reps)}
    cfg_ms = case.sweep(case.ta_fwd, warmup, reps) if sweep else []
    ref = None
    for name, be in BASELINES:
        try:
            with sdpa_kernel(be):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                if ref is None:
                    ref = out
                t[name] = median_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                    warmup, reps)
        except RuntimeError as e:  # backend not available for this shape
            print(f"  {name}: unavailable ({str(e).splitlines()[0][:80]})", file=sys.stderr)
            t[name] = float("nan")
    case.ta_fwd()
    torch.cuda.synchronize()
    err = (case.o.float() - ref.float()).abs().max().item() if ref is not None else float("nan")
    return t, case.flops, err, cfg_ms


def baseline_bwd(case, be, d_o):
    """The backend's forward on q, k, v (leaves that share their storage), once;
    returns the timed backward call and its gradients."""
    qt, kt, vt = (x.detach().requires_grad_(True) for x in (case.q, case.k, case.v))
    with sdpa_kernel(be):
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=case.causal)

    def grad():
        return torch.autograd.grad(out, (qt, kt, vt), d_o, retain_graph=True)

    return grad, grad()


def run_bwd(case, warmup, reps, sweep):
    gen = torch.Generator(device=case.q.device).manual_seed(8765 + case.q.shape[2] + case.d)
    d_o = (torch.rand(case.q.shape, device=case.q.device, generator=gen) * 2 - 1).to(
        torch.bfloat16)
    dq, dk, dv = (torch.empty_like(x) for x in (case.q, case.k, case.v))
    ws = case.workspace(case.lib.ta_bwd_workspace_size, "bwd size")
    ba = BwdArgs(q=case.q.data_ptr(), k=case.k.data_ptr(), v=case.v.data_ptr(),
                 o=case.o.data_ptr(), d_o=d_o.data_ptr(), lse=case.lse.data_ptr(),
                 dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr())

    def ta_bwd():
        check(case.lib, case.lib.ta_bwd(ctypes.byref(case.p), TA_BACKEND_CUDA, ctypes.byref(ba),
                                        ws.data_ptr(), ws.numel(), case.stream), "ta_bwd")

    case.ta_fwd()  # o and lse of the default configuration, outside the timed region
    ta_bwd()
    calls, ref = {}, None
    for name, be in BASELINES:  # each baseline's forward once; gradients checked first
        try:
            calls[name], grads = baseline_bwd(case, be, d_o)
            ref = grads if ref is None else ref
        except RuntimeError as e:  # backend not available for this shape
            print(f"  {name} backward: unavailable ({str(e).splitlines()[0][:80]})",
                  file=sys.stderr)
    torch.cuda.synchronize()
    err = (max((a.float() - r.float()).abs().max().item() for a, r in zip((dq, dk, dv), ref))
           if ref is not None else float("nan"))
    del ref
    t = {"ta": median_ms(ta_bwd, warmup, reps)}
    cfg_ms = case.sweep(ta_bwd, warmup, reps) if sweep else []
    for name, _ in BASELINES:
        t[name] = median_ms(calls[name], warmup, reps) if name in calls else float("nan")
    return t, BWD_FLOPS * case.flops, err, cfg_ms


def table(lib, a, pass_, peak, dims, seqs):
    """Runs and prints one pass's table; returns its CSV rows."""
    what = {"fwd": "forward", "bwd": "backward (torch.autograd.grad for PyTorch)"}[pass_]
    print("\nfast-mode SDPA %s, bf16, B*S = %d tokens, hidden %d (H = hidden / D)"
          % (what, a.tokens, a.hidden))
    print("pass   D  causal      S   B   H |  ours ms  flash ms  cudnn ms | ours TF/s flash TF/s "
          "cudnn TF/s | ours/flash ours/cudnn | ours %%peak | max|%s-flash|"
          % ("o" if pass_ == "fwd" else "dx"))
    run = run_fwd if pass_ == "fwd" else run_bwd
    rows = []
    for d in dims:
        h = a.hidden // d
        for causal in (False, True):
            for s in seqs:
                b = max(1, a.tokens // s)
                t, flops, err, cfg_ms = run(Case(lib, b, h, s, d, causal), a.warmup, a.reps,
                                            a.sweep)
                tf = {kk: flops / (ms * 1e-3) / 1e12 for kk, ms in t.items()}
                row = {"pass": pass_, "D": d, "causal": int(causal), "S": s, "B": b, "H": h,
                       "ours_ms": t["ta"], "flash_ms": t["flash"], "cudnn_ms": t["cudnn"],
                       "ours_tflops": tf["ta"], "flash_tflops": tf["flash"],
                       "cudnn_tflops": tf["cudnn"], "vs_flash": t["flash"] / t["ta"],
                       "vs_cudnn": t["cudnn"] / t["ta"], "peak_frac": tf["ta"] / peak,
                       "max_abs_diff": err}
                rows.append(row)
                print("%-4s %3d  %6s %6d %3d %3d | %8.3f  %8.3f  %8.3f | %9.1f %10.1f %10.1f | "
                      "%10.3f %10.3f | %9.1f%% | %.2e"
                      % (pass_, d, "yes" if causal else "no", s, b, h, t["ta"], t["flash"],
                         t["cudnn"], tf["ta"], tf["flash"], tf["cudnn"], row["vs_flash"],
                         row["vs_cudnn"], 100 * row["peak_frac"], err), flush=True)
                if cfg_ms:
                    row["config_ms"] = " ".join("%.3f" % x for x in cfg_ms)
                    best = min(range(len(cfg_ms)), key=lambda i: (cfg_ms[i] != cfg_ms[i],
                                                                  cfg_ms[i]))
                    print("        tile_config 1..%d: %s ms (best %d: %.1f TFLOP/s)"
                          % (len(cfg_ms), row["config_ms"], 1 + best,
                             flops / (cfg_ms[best] * 1e-3) / 1e12), flush=True)
                torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "both"), default="fwd",
                    help="forward, backward, or both tables (default fwd)")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peak", type=float, default=0.0)
    ap.add_argument("--csv", default="")
    ap.add_argument("--quick", action="store_true", help="D=128, S=1024 and 4096 only")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every tile configuration of the table (ms per candidate)")
    a = ap.parse_args()
    lib = load(a.lib)
    peak, name = bf16_peak_tflops()
    if a.peak > 0:
        peak = a.peak
    dims = [128] if a.quick else [int(x) for x in a.dims.split(",")]
    seqs = [1024, 4096] if a.quick else [int(x) for x in a.seqs.split(",")]
    print(f"device: {name}; torch {torch.__version__}; bf16 dense peak {peak:.0f} TFLOP/s")
    rows = []
    for pass_ in (("fwd", "bwd") if a.pass_ == "both" else (a.pass_,)):
        rows += table(lib, a, pass_, peak, dims, seqs)
    if a.csv:
        fields = list(dict.fromkeys(k for r in rows for k in r))  # config_ms only with --sweep
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
