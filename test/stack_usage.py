#!/usr/bin/env python3
"""Worst-case stack depth of every public entry point (docs/safety.md).

Build the library with gcc's per-function stack sizes and call graphs:
    cmake -S . -B build/stack -DTILEATTN_CUDA=OFF -DTILEATTN_TESTS=OFF \
          -DTILEATTN_BENCH=OFF -DCMAKE_C_COMPILER=gcc -DCMAKE_BUILD_TYPE=Release \
          "-DCMAKE_C_FLAGS=-fstack-usage -fcallgraph-info=su"
    cmake --build build/stack --target tileattn
    python3 test/stack_usage.py build/stack
It reads every .ci file (gcc -fcallgraph-info=su: nodes with their frame size,
direct call edges), resolves the library's indirect calls from its own tables
(the backend ops tables, the CPU kernel tables per ISA, the micro-kernel switch
in cpu_k1_panel and the conv switch in cpu_conv_kl, also where gcc inlined them into a caller, the latent backward's weight-gradient slots), adds each OpenMP outlined body under the function that starts the
region, and prints the deepest path from each ta_* entry point. Exit 1 if a
frame is unbounded ("dynamic" without "bounded": a VLA or alloca), if the
graph has a cycle (recursion), or if an indirect call is left unresolved.
Calls into libc/libm/libgomp are leaves of size 0 here (their own stack use is
the runtime's; fmaf, memcpy and memset are leaf functions).
"""
import glob
import os
import re
import sys

NODE = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"(?: label: "([^"]*)")?')
SIZE = re.compile(r'\\n(\d+) bytes \(([^)]*)\)')

# Indirect call targets, by caller (bare function name) -> target names.
# The ops table slots: validation calls the size, supports and available slots;
# only ta_fwd and ta_bwd call the compute slots (the explain calls never do).
VALIDATE_OPS = ["ta_%s_%s" % (b, f) for b in ("ref", "cpu", "cuda")
                for f in ("fwd_workspace_size", "bwd_workspace_size", "fwd_size", "bwd_size",
                          "available", "supports")]
COMPUTE_OPS = {"ta_fwd": ["ta_ref_fwd", "ta_cpu_fwd", "ta_cuda_fwd"],
               "ta_bwd": ["ta_ref_bwd", "ta_cpu_bwd", "ta_cuda_bwd"],
               "ta_tune_fwd": ["ta_cuda_tune_fwd", "ta_cuda_tune_fwd_not_linked"],
               "ta_bwd_finish": ["ta_ref_bwd_finish", "ta_cuda_bwd_finish",
                                 "ta_cuda_finish_not_linked"]}
TASKS = ["cpu_sdpa_fwd_task", "cpu_mta_fwd_task", "cpu_fwd_merge_task", "cpu_sdpa_dkdv_task",
         "cpu_mta_dkdv_task", "cpu_sdpa_dq_task", "cpu_mta_dq_task", "cpu_mta_bwd1_task"]
MICRO = ["cpu_k1_b%d_%s" % (b, w) for b in range(1, 7) for w in ("1", "TA_NV")]
# The MTA decode conv's switch in cpu_conv_kl (ta_cpu_mta.inc), also where gcc inlined it.
CONV_KL = ["cpu_conv_kl_b%d_%s" % (b, w) for b in range(1, 7) for w in ("1", "TA_NV")]
# The public entry points (include/tileattn.h).
ENTRIES = ("ta_fwd", "ta_bwd", "ta_fwd_workspace_size", "ta_bwd_workspace_size", "ta_explain_fwd",
           "ta_explain_bwd", "ta_explain_fwd_workspace_size", "ta_explain_bwd_workspace_size",
           "ta_tune_fwd", "ta_status_string", "ta_backend_available", "ta_version_string",
           "ta_version", "ta_merge", "ta_explain_merge", "ta_fwd_task_plan", "ta_bwd_task_plan",
           "ta_fwd_tasks_prepare", "ta_bwd_tasks_prepare", "ta_explain_fwd_tasks_prepare",
           "ta_explain_bwd_tasks_prepare", "ta_task_run", "ta_rope_table_1d", "ta_rope_table_2d",
           "ta_bwd_finish", "ta_explain_bwd_finish")
# The latent backward's weight-gradient slots of the CPU kernel table.
LATENT = {"ta_cpu_sums_dq_task": ["cpu_lat_dw_task"],
          "ta_cpu_task_sums_merge": ["cpu_lat_dw_head"]}


def bare(title):
    return title.rsplit(":", 1)[-1].split(".")[0]


def main(build):
    frames, kinds, edges, files, sites = {}, {}, {}, {}, {}
    for ci in glob.glob(os.path.join(build, "**", "*.ci"), recursive=True):
        for line in open(ci):
            m = NODE.search(line)
            if m:
                s = SIZE.search(m.group(2))
                if s:
                    frames[m.group(1)] = int(s.group(1))
                    kinds[m.group(1)] = s.group(2)
                    # static functions: "file:name"; extern ones: "name" (file in the label)
                    files[m.group(1)] = (m.group(1).rsplit(":", 1)[0] if ":" in m.group(1)
                                         else m.group(2).split("\\n")[1].split(":")[0])
                continue
            m = EDGE.search(line)
            if m:
                edges.setdefault(m.group(1), []).append(m.group(2))
                if m.group(2) == "__indirect_call" and m.group(3):
                    sites.setdefault(m.group(1), []).append(m.group(3))
    by_name = {}
    for t in frames:
        by_name.setdefault(bare(t), []).append(t)
    problems = [t for t, k in kinds.items() if "dynamic" in k and "bounded" not in k]
    unresolved = set()

    def targets(src):
        out = []
        for dst in edges.get(src, []):
            if dst == "__indirect_call":
                name = bare(src)
                if files[src].endswith("src/ta_api.c"):
                    names = VALIDATE_OPS + COMPUTE_OPS.get(name, [])
                elif name in ("ta_cpu_worker", "ta_cpu_do_task", "ta_cpu_task_run"):
                    names = TASKS
                elif (name in ("cpu_k1", "cpu_k1_visible", "cpu_k1_panel") or
                      all("ta_cpu_micro.inc:" in x for x in sites.get(src, ["-"]))):
                    names = MICRO  # the switch in cpu_k1_panel, also where gcc inlined it
                elif name == "cpu_conv_kl" or all(
                        "ta_cpu_mta.inc:" in x for x in sites.get(src, ["-"])):
                    names = CONV_KL  # cpu_conv_kl's switch, inlined or not
                elif name in LATENT:
                    names = LATENT[name]
                else:
                    unresolved.add(src)
                    continue
                for n in names:  # same file first (static per-ISA copies), else any
                    same = [t for t in by_name.get(n, []) if files[t] == files[src]]
                    out.extend(same or by_name.get(n, []))
            elif dst in frames:
                out.append(dst)
            elif bare(dst) in by_name:
                out.extend(by_name[bare(dst)])
        # OpenMP: the outlined body runs on the calling thread's stack too
        out.extend(t for t in frames
                   if "._omp_fn." in t and bare(t) == bare(src) and files[t] == files[src])
        return out

    memo, onstack, cycles = {}, set(), []

    def depth(t):
        if t in memo:
            return memo[t]
        if t in onstack:
            cycles.append(t)
            return (0, [t])
        onstack.add(t)
        best = (0, [])
        for d in targets(t):
            sub = depth(d)
            if sub[0] > best[0]:
                best = sub
        onstack.discard(t)
        memo[t] = (frames[t] + best[0], [t] + best[1])
        return memo[t]

    entries = sorted(t for t in frames if ":" not in t and t in ENTRIES)
    worst = 0
    for e in entries:
        total, path = depth(e)
        worst = max(worst, total)
        print("%-32s %7d bytes  %s" % (bare(e), total,
              " > ".join("%s(%d)" % (bare(p), frames[p]) for p in path)))
    print("worst entry point: %d bytes" % worst)
    for t in problems:
        print("UNBOUNDED frame: %s (%s)" % (t, kinds[t]))
    for t in sorted(unresolved):
        print("UNRESOLVED indirect call in %s" % t)
    for t in cycles:
        print("RECURSION through %s" % t)
    return 1 if problems or unresolved or cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/stack"))
