#!/usr/bin/env python3
"""Plot a bench/cuda_decode_bench.py CSV: achieved GB/s (K and V bytes over the
time) against S_k (log2 axis) for tileattn (split-K and the unsplit fast
forward), PyTorch flash and cuDNN, with the same run's device-to-device copy
bandwidth dashed; one panel per (H_kv, new queries).

    python3 bench/plot_decode.py bench/results/decode_h100_2026-11-23.csv \\
        [--out docs/img/decode_gbs.png] [--title TEXT] [--dpi N]

Needs matplotlib (not a dependency of the library or its tests).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_util import finish, panels, read_args  # noqa: E402

SERIES = (  # CSV column, legend label, line style
    ("split_gbs", "tileattn split-K (TA_SPLITS_AUTO)", dict(color="tab:blue", marker="o")),
    ("fast_gbs", "tileattn fast, unsplit", dict(color="tab:purple", marker="x")),
    ("flash_gbs", "PyTorch flash", dict(color="tab:orange", marker="s")),
    ("cudnn_gbs", "PyTorch cuDNN", dict(color="tab:green", marker="^")),
    ("copy_gbs", "copy (same run)", dict(color="gray", linestyle="--")),
    ("mta_gbs", "tileattn MTA 6x11 decode (--mta runs)", dict(color="tab:red", marker="d")),
)


def main():
    a, rows = read_args(__doc__, "docs/img/decode_gbs.png")
    keys = sorted({(int(r["H_kv"]), int(r["S_q"])) for r in rows}, key=lambda x: (-x[0], x[1]))
    fig, axes = panels(len(keys))
    for ax, (h_kv, s_q) in zip(axes, keys):
        sel = sorted((r for r in rows if int(r["H_kv"]) == h_kv and int(r["S_q"]) == s_q),
                     key=lambda r: int(r["S_k"]))
        xs = [int(r["S_k"]) for r in sel]
        for r in sel:  # the MTA step's K + V bytes over its time (CSVs with mta_ms)
            if r.get("mta_ms") and not r.get("mta_gbs"):
                kv = 2 * int(r["S_k"]) * int(r["H_kv"]) * int(r["D"]) * 2
                r["mta_gbs"] = kv / (float(r["mta_ms"]) * 1e-3) / 1e9
        for col, label, style in SERIES:
            if all(r.get(col) not in (None, "") for r in sel):
                ax.plot(xs, [float(r[col]) for r in sel], label=label, **style)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S_k (keys in the cache)")
        ax.set_ylabel("GB/s (K + V bytes / time)")
        ax.set_title("H = %s, H_kv = %d, %d new quer%s" % (sel[0]["H"], h_kv, s_q,
                                                           "y" if s_q == 1 else "ies"))
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    finish(fig, a)


if __name__ == "__main__":
    main()
