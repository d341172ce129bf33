#!/usr/bin/env python3
"""Plot a bench/cuda_fast_mta_bench.py CSV: forward time (ms, log axis) against
S (log2 axis) for tileattn's fast MTA, PyTorch flash causal SDPA on the same
shape without the conv, the eager bf16 MTA and tileattn's exact f32 MTA; one
panel per (D, conv). The dashed line is 3x flash's time, issue 11's target.

    python3 bench/plot_fast_mta.py bench/results/fast_mta_fwd_h100_2026-11-24.csv \\
        [--out docs/img/fast_mta_fwd.png] [--title TEXT] [--dpi N]

Needs matplotlib (not a dependency of the library or its tests).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_util import finish, panels, read_args  # noqa: E402

SERIES = (  # CSV column, legend label, line style
    ("ours_ms", "tileattn fast MTA (bf16)", dict(color="tab:blue", marker="o")),
    ("flash_ms", "PyTorch flash, causal, no conv", dict(color="tab:orange", marker="s")),
    ("eager_ms", "eager PyTorch MTA (bf16)", dict(color="tab:red", marker="^")),
    ("exact_ms", "tileattn exact MTA (f32)", dict(color="tab:green", marker="x")),
)


def main():
    a, rows = read_args(__doc__, "docs/img/fast_mta_fwd.png")
    keys = list(dict.fromkeys((int(r["D"]), r["conv"]) for r in rows))
    fig, axes = panels(len(keys))
    for ax, (d, conv) in zip(axes, keys):
        sel = sorted((r for r in rows if int(r["D"]) == d and r["conv"] == conv),
                     key=lambda r: int(r["S"]))
        xs = [int(r["S"]) for r in sel]
        for col, label, style in SERIES:
            ys = [float(r[col]) for r in sel]
            if all(y == y for y in ys):  # a column of NaN (not measured) is left out
                ax.plot(xs, ys, label=label, **style)
        ax.plot(xs, [3.0 * float(r["flash_ms"]) for r in sel], color="tab:orange",
                linestyle="--", label="3x flash (target)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("S (B = %s, H = %s)" % (sel[0]["B"], sel[0]["H"]))
        ax.set_ylabel("forward ms")
        ax.set_title("MTA %s, D = %d" % (conv, d))
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    finish(fig, a)


if __name__ == "__main__":
    main()
