#!/usr/bin/env python3
"""SDPA and MTA forward and backward on the GPU: tileattn's CUDA backend in
exact mode (TA_PRECISION_EXACT, f32, bit-identical to the reference) against
PyTorch in the same process, on the same tensors and the same stream:

- SDPA: PyTorch's SDPA memory-efficient backend in f32 (TF32 off: CUDA
  cores, the fastest f32 baseline, not bit-exact) and its math backend; for
  context also the flash and cuDNN backends in bf16 (forward
  only; tensor cores, not exact; tileattn's FAST mode is what compares with
  them: bench/cuda_fast_bench.py).
- MTA (pre-softmax key-query conv, causal): an eager PyTorch MTA in f32 as in
  the paper's released code (materialised scores, zero mask, F.pad, F.conv2d
  with groups = heads, -inf mask, softmax, matmul), TF32 off.

    python3 bench/cuda_bench.py --lib BUILD/libtileattn_bench.so [--quick] [--reps N]
                                [--only sdpa|mta] [--csv PATH]

--csv writes every printed row (both tables; column `op` = sdpa or mta) for
bench/plot_mta.py, which draws the MTA rows against the eager MTA.

The library is the CUDA archive linked whole into a shared object with the
core's public objects, which bench/cuda_check.sh builds:
    gcc -shared -o libtileattn_bench.so -Wl,--whole-archive libtileattn_cuda.a \
        -Wl,--no-whole-archive -Wl,-u,ta_fwd -Wl,-u,ta_status_string libtileattn.a \
        -lcudart -lm -fopenmp

Times are CUDA-event medians of --reps calls after --warmup calls; the inputs
are uniform in [-1, 1) (never zeros). Before timing, each problem checks
tileattn's o against PyTorch's (max abs difference, printed) as a sanity check
(PyTorch's math backend is not bit-exact to anything; the bit-exactness
tests are test/test_cuda_equiv). GFLOP/s count useful work only: forward
4 B H S_q S_k D (halved under the causal mask), backward 2.5x that
(bench/README.md's count with D = D_v); MTA adds 2 c_q c_k flops per visible
score in the forward and 4 c_q c_k in the backward (the transposed conv and the
dconv_w sums), as tileattn-bench counts them: halo work and the recomputed
forward conv are overhead, not work.
The hardware-limit column is the GPU's f32 FMA (CUDA-core) peak, SMs x 128
lanes x 2 flops x the maximum SM clock (about 67 TFLOP/s on an H100/H200 SXM):
exact mode cannot use tensor cores.
"""
import argparse
import csv
import ctypes
import os
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The ctypes mirror of include/tileattn.h and the eager MTA baseline have one home,
# the Python package (python/tileattn); imported from the source tree, no install
# needed (the package loads no library at import).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from tileattn._lib import BwdArgs, FwdArgs, Problem, Strides  # noqa: E402,F401
from tileattn.reference import eager_mta  # noqa: E402

TA_BACKEND_CUDA = 2
TA_F32 = 0
TA_CAUSAL = 1
F32_PEAK_TFLOPS = 0.0  # set in main from the device


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    for name in ("ta_fwd_workspace_size", "ta_bwd_workspace_size"):
        getattr(lib, name).argtypes = [ctypes.POINTER(Problem), ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_size_t)]
        getattr(lib, name).restype = ctypes.c_int
    lib.ta_fwd.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.POINTER(FwdArgs),
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.ta_bwd.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.POINTER(BwdArgs),
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.ta_fwd.restype = lib.ta_bwd.restype = ctypes.c_int
    lib.ta_status_string.argtypes = [ctypes.c_int]
    lib.ta_status_string.restype = ctypes.c_char_p
    lib.ta_backend_available.argtypes = [ctypes.c_int]
    return lib


def check(lib, st, what):
    if st != 0:
        raise RuntimeError(f"{what}: {lib.ta_status_string(st).decode()}")


def f32_peak_tflops():
    """SMs x 128 FP32 lanes x 2 flops x the maximum SM clock (nvidia-smi)."""
    try:
        mhz = float(subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True).stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        mhz = 1980.0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return sms * 128 * 2 * mhz * 1e6 / 1e12


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernel_table(fn, reps, label):
    """Per-kernel device time of fn (torch.profiler, mean over reps calls), in
    the order of the first launch, with each kernel's share."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    tot, order = {}, []
    for e in prof.events():
        if str(e.device_type).endswith("CUDA") and "memcpy" not in e.name.lower() \
                and "memset" not in e.name.lower():
            if e.name not in tot:
                tot[e.name] = [0.0, 0]
                order.append(e.name)
            dt = getattr(e, "device_time", None)
            if dt is None:
                dt = e.cuda_time
            tot[e.name][0] += dt
            tot[e.name][1] += 1
    all_us = sum(v[0] for v in tot.values()) / reps
    print(f"  kernels of {label} (torch.profiler, mean of {reps} calls, {all_us:.0f} us of kernels"
          " per call):")
    for name in order:
        us, n = tot[name]
        short = name.replace("(anonymous namespace)::", "").split("(ta_")[0][:90]
        print(f"    {us / reps:>9.1f} us {100 * us / reps / all_us:>5.1f} %  x{n // reps:<3} {short}")


def run(lib, b, h, s, d, causal, warmup, reps):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234 + s + d + h)

    def rand(*shape):
        return torch.rand(*shape, device=dev, generator=gen, dtype=torch.float32) * 2 - 1

    q, k, v, d_o = (rand(b, h, s, d) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d, head_dim_v=d,
                dtype=TA_F32, precision=0, flags=TA_CAUSAL if causal else 0)
    n_fwd, n_bwd = ctypes.c_size_t(), ctypes.c_size_t()
    check(lib, lib.ta_fwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(n_fwd)),
          "fwd size")
    check(lib, lib.ta_bwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(n_bwd)),
          "bwd size")
    ws = torch.empty(max(n_fwd.value, n_bwd.value, 1), device=dev, dtype=torch.uint8)
    fa = FwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                 lse=lse.data_ptr())
    ba = BwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                 d_o=d_o.data_ptr(), lse=lse.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(),
                 dv=dv.data_ptr())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def ta_fwd():
        check(lib, lib.ta_fwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(fa), ws.data_ptr(),
                              ws.numel(), stream), "ta_fwd")

    def ta_bwd():
        check(lib, lib.ta_bwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(ba), ws.data_ptr(),
                              ws.numel(), stream), "ta_bwd")

    # PyTorch: math backend, f32, no TF32
    qt, kt, vt = (x.clone().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        def torch_fwd():
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        out = torch_fwd()
        ta_fwd()
        ta_bwd()
        torch.cuda.synchronize()
        grads = torch.autograd.grad(out, (qt, kt, vt), d_o, retain_graph=True)
        err_o = (o - out).abs().max().item()
        err_g = max((a - g).abs().max().item() for a, g in zip((dq, dk, dv), grads))

        def torch_bwd():
            torch.autograd.grad(out, (qt, kt, vt), d_o, retain_graph=True)

        t = {
            "ta_fwd": median_ms(ta_fwd, warmup, reps),
            "ta_bwd": median_ms(ta_bwd, warmup, reps),
            "pt_fwd": median_ms(lambda: torch_fwd(), warmup, reps),
            "pt_bwd": median_ms(torch_bwd, warmup, reps),
        }
    # PyTorch: memory-efficient backend, f32 (CUDA cores with TF32 off; not exact)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        out_e = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        t["eff_fwd"] = median_ms(
            lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal), warmup, reps)
        t["eff_bwd"] = median_ms(
            lambda: torch.autograd.grad(out_e, (qt, kt, vt), d_o, retain_graph=True), warmup, reps)
        del out_e
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    del out, grads, qt, kt, vt
    torch.cuda.empty_cache()
    return t, flops, err_o, err_g


def run_mta(lib, b, h, s, d, c_q, c_k, warmup, reps):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(4321 + s + d + h)

    def rand(*shape):
        return torch.rand(*shape, device=dev, generator=gen, dtype=torch.float32) * 2 - 1

    q, k, v, d_o = (rand(b, h, s, d) for _ in range(4))
    w = rand(h, c_q, c_k) * 0.3
    w[:, c_q - 1, (c_k - 1) // 2] += 1.0  # near the identity: a softmax that is not flat
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dw = torch.empty_like(w)
    p = Problem(batch=b, heads_q=h, heads_kv=h, seq_q=s, seq_k=s, head_dim=d, head_dim_v=d,
                dtype=TA_F32, precision=0, flags=TA_CAUSAL, conv_q=c_q, conv_k=c_k)
    n_fwd, n_bwd = ctypes.c_size_t(), ctypes.c_size_t()
    check(lib, lib.ta_fwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(n_fwd)),
          "fwd size")
    check(lib, lib.ta_bwd_workspace_size(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(n_bwd)),
          "bwd size")
    ws = torch.empty(max(n_fwd.value, n_bwd.value, 1), device=dev, dtype=torch.uint8)
    fa = FwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), conv_w=w.data_ptr(),
                 o=o.data_ptr(), lse=lse.data_ptr())
    ba = BwdArgs(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                 d_o=d_o.data_ptr(), lse=lse.data_ptr(), conv_w=w.data_ptr(), dq=dq.data_ptr(),
                 dk=dk.data_ptr(), dv=dv.data_ptr(), dconv_w=dw.data_ptr())
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def ta_fwd():
        check(lib, lib.ta_fwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(fa), ws.data_ptr(),
                              ws.numel(), stream), "ta_fwd")

    def ta_bwd():
        check(lib, lib.ta_bwd(ctypes.byref(p), TA_BACKEND_CUDA, ctypes.byref(ba), ws.data_ptr(),
                              ws.numel(), stream), "ta_bwd")

    scale = 1.0 / d ** 0.5
    qt, kt, vt, wt = (x.clone().requires_grad_(True) for x in (q, k, v, w))
    out = eager_mta(qt, kt, vt, wt, scale)
    ta_fwd()
    ta_bwd()
    torch.cuda.synchronize()
    grads = torch.autograd.grad(out, (qt, kt, vt, wt), d_o, retain_graph=True)
    err_o = (o - out).abs().max().item()
    err_g = max((a - g).abs().max().item() for a, g in zip((dq, dk, dv), grads[:3]))
    err_w = ((dw - grads[3]).abs().max() / grads[3].abs().max()).item()
    del grads

    def torch_bwd():
        torch.autograd.grad(out, (qt, kt, vt, wt), d_o, retain_graph=True)

    t = {
        "ta_fwd": median_ms(ta_fwd, warmup, reps),
        "ta_bwd": median_ms(ta_bwd, warmup, reps),
        "pt_fwd": median_ms(lambda: eager_mta(qt, kt, vt, wt, scale), warmup, reps),
        "pt_bwd": median_ms(torch_bwd, warmup, reps),
    }
    vis = b * h * s * (s + 1) / 2.0
    flops_fwd = vis * (4.0 * d + 2.0 * c_q * c_k)
    flops_bwd = vis * (10.0 * d + 4.0 * c_q * c_k)
    peak = torch.cuda.max_memory_allocated() / 2**30
    del out, qt, kt, vt, wt
    torch.cuda.empty_cache()
    ws_gib = max(n_fwd.value, n_bwd.value) / 2**30
    return t, flops_fwd, flops_bwd, err_o, err_g, err_w, peak, ws_gib


def lowp_sdpa_ms(b, h, s, d, causal, backend, warmup, reps):
    """PyTorch SDPA forward in bf16 on one backend (context only: not exact)."""
    dev = torch.device("cuda")
    q, k, v = (torch.rand(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    try:
        with sdpa_kernel(backend):
            return median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                             warmup, reps)
    except RuntimeError:
        return float("nan")


def sdpa_table(lib, args, rows):
    problems = [(4, 16, 1024, 64, False), (4, 16, 1024, 64, True), (2, 16, 2048, 64, True),
                (2, 16, 4096, 64, True), (2, 16, 4096, 128, True), (1, 16, 8192, 128, True),
                (1, 16, 4096, 256, False)]
    if args.quick:
        problems = problems[:3]
    print("\nSDPA, f32: tileattn CUDA exact vs PyTorch SDPA memory-efficient and math backends "
          "(f32, TF32 off)")
    head = (f"{'B':>2} {'H':>3} {'S':>5} {'D':>4} {'mask':>6} | {'ours fwd':>9} {'eff fwd':>9} "
            f"{'ratio':>5} {'math fwd':>9} | {'ours bwd':>9} {'eff bwd':>9} {'ratio':>5} "
            f"{'math bwd':>9} | {'fwd TF/s':>8} {'% peak':>6} | {'bwd TF/s':>8} {'% peak':>6} | "
            f"{'flash bf16':>10} {'cuDNN bf16':>10} | max|o-o_pt| max|dx-dx_pt|")
    print(head)
    print("-" * len(head))
    for (b, h, s, d, causal) in problems:
        t, flops, err_o, err_g = run(lib, b, h, s, d, causal, args.warmup, args.reps)
        fl = lowp_sdpa_ms(b, h, s, d, causal, SDPBackend.FLASH_ATTENTION, args.warmup, args.reps)
        cu = lowp_sdpa_ms(b, h, s, d, causal, SDPBackend.CUDNN_ATTENTION, args.warmup, args.reps)
        tf_fwd, tf_bwd = flops / t['ta_fwd'] / 1e9, 2.5 * flops / t['ta_bwd'] / 1e9
        rows.append(dict(op="sdpa", B=b, H=h, S=s, D=d, mask="causal" if causal else "full",
                         conv="", ours_fwd_ms=t['ta_fwd'], base_fwd_ms=t['eff_fwd'],
                         ours_bwd_ms=t['ta_bwd'], base_bwd_ms=t['eff_bwd'], ours_fwd_tflops=tf_fwd,
                         ours_bwd_tflops=tf_bwd, base_gib="", ours_ws_gib="",
                         baseline="torch efficient f32", math_fwd_ms=t['pt_fwd'],
                         math_bwd_ms=t['pt_bwd']))
        print(f"{b:>2} {h:>3} {s:>5} {d:>4} {'causal' if causal else 'full':>6} | "
              f"{t['ta_fwd']:>6.3f} ms {t['eff_fwd']:>6.3f} ms {t['ta_fwd'] / t['eff_fwd']:>5.2f} "
              f"{t['pt_fwd']:>6.3f} ms | "
              f"{t['ta_bwd']:>6.3f} ms {t['eff_bwd']:>6.3f} ms {t['ta_bwd'] / t['eff_bwd']:>5.2f} "
              f"{t['pt_bwd']:>6.3f} ms | "
              f"{tf_fwd:>8.2f} {100 * tf_fwd / F32_PEAK_TFLOPS:>5.1f}% | "
              f"{tf_bwd:>8.2f} {100 * tf_bwd / F32_PEAK_TFLOPS:>5.1f}% | "
              f"{fl:>7.3f} ms {cu:>7.3f} ms | {err_o:.2e}  {err_g:.2e}", flush=True)
    print("ratio = tileattn time / PyTorch efficient time (below 1: tileattn faster); math: "
          "PyTorch's math backend; flash/cuDNN: bf16 forward times, tensor cores, for context "
          "only; % peak: of the f32 FMA peak")


def mta_table(lib, args, rows):
    problems = [(1, 8, 1024, 64, 6, 11), (1, 8, 2048, 64, 6, 11), (1, 8, 4096, 64, 6, 11),
                (1, 8, 4096, 128, 6, 11), (1, 8, 8192, 64, 6, 11), (1, 8, 2048, 64, 3, 3)]
    if args.quick:
        problems = problems[:2]
    print("\nMTA (causal, pre-softmax key-query conv), f32: tileattn CUDA exact vs eager PyTorch "
          "MTA (f32, TF32 off)")
    head = (f"{'B':>2} {'H':>3} {'S':>5} {'D':>4} {'conv':>5} | {'tileattn fwd':>12} "
            f"{'eager fwd':>10} {'ratio':>6} | {'tileattn bwd':>12} {'eager bwd':>10} "
            f"{'ratio':>6} | {'ta fwd TF/s':>11} {'ta bwd TF/s':>11} {'% f32 peak':>10} | "
            f"{'eager GiB':>9} | max|o-o_pt| max|dx-dx_pt| rel|dw-dw_pt|")
    print(head)
    print("-" * len(head))
    for (b, h, s, d, c_q, c_k) in problems:
        torch.cuda.reset_peak_memory_stats()
        try:
            t, f_fwd, f_bwd, err_o, err_g, err_w, gib, ws_gib = run_mta(
                lib, b, h, s, d, c_q, c_k, args.warmup, args.reps)
        except RuntimeError as e:  # tileattn not supporting it yet, or torch out of memory
            print(f"{b:>2} {h:>3} {s:>5} {d:>4} {c_q:>2}x{c_k:<2} | failed: {e}", flush=True)
            torch.cuda.empty_cache()
            continue
        tf_fwd, tf_bwd = f_fwd / t['ta_fwd'] / 1e9, f_bwd / t['ta_bwd'] / 1e9
        rows.append(dict(op="mta", B=b, H=h, S=s, D=d, mask="causal", conv=f"{c_q}x{c_k}",
                         ours_fwd_ms=t['ta_fwd'], base_fwd_ms=t['pt_fwd'],
                         ours_bwd_ms=t['ta_bwd'], base_bwd_ms=t['pt_bwd'],
                         ours_fwd_tflops=tf_fwd, ours_bwd_tflops=tf_bwd, base_gib=gib,
                         ours_ws_gib=ws_gib, baseline="eager torch MTA f32"))
        print(f"{b:>2} {h:>3} {s:>5} {d:>4} {c_q:>2}x{c_k:<2} | "
              f"{t['ta_fwd']:>9.3f} ms {t['pt_fwd']:>7.3f} ms {t['ta_fwd'] / t['pt_fwd']:>6.2f} | "
              f"{t['ta_bwd']:>9.3f} ms {t['pt_bwd']:>7.3f} ms {t['ta_bwd'] / t['pt_bwd']:>6.2f} | "
              f"{tf_fwd:>11.2f} {tf_bwd:>11.2f} "
              f"{100 * max(tf_fwd, tf_bwd) / F32_PEAK_TFLOPS:>9.1f}% | {gib:>9.2f} | "
              f"{err_o:.2e}  {err_g:.2e}  {err_w:.2e}", flush=True)
    print("ratio = tileattn time / eager PyTorch MTA time (below 1: tileattn faster); eager GiB: "
          "peak GPU memory of the process during the row (the eager MTA materialises B*H*S^2 "
          "scores several times; tileattn's workspace is O(B*H*S))")


CSV_FIELDS = ("device", "op", "B", "H", "S", "D", "mask", "conv", "ours_fwd_ms", "base_fwd_ms",
              "ours_bwd_ms", "base_bwd_ms", "ours_fwd_tflops", "ours_bwd_tflops", "base_gib",
              "ours_ws_gib", "baseline", "math_fwd_ms", "math_bwd_ms")


def write_csv(path, rows, device):
    """The rows of both tables, one CSV (bench/plot_mta.py reads it)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, device=device))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", choices=("sdpa", "mta"))
    ap.add_argument("--csv", help="also write the rows of both tables to this CSV")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lib = load(args.lib)
    if not lib.ta_backend_available(TA_BACKEND_CUDA):
        print("TA_BACKEND_CUDA unavailable (no device?)")
        return 1
    global F32_PEAK_TFLOPS
    F32_PEAK_TFLOPS = f32_peak_tflops()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"f32 FMA peak {F32_PEAK_TFLOPS:.1f} TFLOP/s")
    rows = []
    if args.only != "mta":
        sdpa_table(lib, args, rows)
    if args.only != "sdpa":
        mta_table(lib, args, rows)
    if args.csv:
        write_csv(args.csv, rows, torch.cuda.get_device_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
