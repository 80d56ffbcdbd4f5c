#!/usr/bin/env python3
"""ncu_summary.py: where a CUDA forward pass's time goes, from an Nsight Compute CSV (raw page,
metric gpu__time_duration.sum, written by scripts/bench/gpu-profile.sh). The kernels are in launch order;
each forward pass begins with embed_kernel, so the CSV splits into passes. For the passes asked for
(default: the last two, the timed decode steps) it prints each kernel name's count, total and mean
time, and each pass's sum of kernel times: set that beside the step time `inflight bench` measured
without the profiler, and the difference is what the GPU spent waiting between kernels.

usage: ncu_summary.py CSV [--passes last|largest|all] [--top N]"""
import argparse
import csv
import re
import sys


def read_kernels(path):
    """[(name, grid, block, ns)] in launch order; ncu's own '==PROF==' lines are skipped."""
    with open(path, newline="", errors="replace") as f:
        lines = [ln for ln in f if not ln.startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no CSV header (a line starting with \"ID\") in ncu's output")
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    try:
        c_name, c_dur = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    except ValueError as e:
        sys.exit(f"{path}: column missing: {e}")
    c_grid = head.index("Grid Size") if "Grid Size" in head else None
    c_block = head.index("Block Size") if "Block Size" in head else None
    unit = rows[1][c_dur] if len(rows) > 1 else ""
    scale = {"ns": 1.0, "nsecond": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}.get(unit, None)
    out = []
    for r in rows[1:]:
        if len(r) <= c_dur:
            continue
        try:
            v = float(r[c_dur].replace(",", ""))
        except ValueError:
            continue  # the units row
        if scale is None:
            sys.exit(f"{path}: unknown unit {unit!r} of gpu__time_duration.sum")
        out.append((r[c_name], r[c_grid] if c_grid is not None else "",
                    r[c_block] if c_block is not None else "", v * scale))
    return out


def short(name):
    """A kernel's name without its argument list and template clutter, cut to 60 characters."""
    n = re.sub(r"\(.*$", "", name)
    n = re.sub(r"^void ", "", n)
    return n[:60]


def split_passes(kernels):
    passes, cur = [], []
    for k in kernels:
        if "embed_kernel" in k[0] and cur:
            passes.append(cur)
            cur = []
        cur.append(k)
    if cur:
        passes.append(cur)
    return passes


def report(p, label, top):
    total = sum(k[3] for k in p)
    print(f"  {label}: {len(p)} kernels, {total / 1e3:.1f} us of kernel time")
    agg = {}
    for name, grid, block, ns in p:
        key = short(name)
        a = agg.setdefault(key, [0, 0.0, grid, block])
        a[0] += 1
        a[1] += ns
    print(f"    {'kernel':60s} {'n':>4s} {'total us':>9s} {'mean us':>8s} {'share':>6s}  grid / block (first)")
    for key, (n, ns, grid, block) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"    {key:60s} {n:4d} {ns / 1e3:9.1f} {ns / n / 1e3:8.2f} {100 * ns / total:5.1f}%  {grid} / {block}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--passes", default="last", choices=["last", "largest", "all"])
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    ks = read_kernels(a.csv)
    passes = split_passes(ks)
    sums = [sum(k[3] for k in p) / 1e3 for p in passes]
    print(f"{a.csv}: {len(ks)} kernels in {len(passes)} forward passes; kernel time per pass (us): "
          + " ".join(f"{s:.0f}" for s in sums))
    if not passes:
        return 1
    if a.passes == "last":
        chosen = [(len(passes) - 1, passes[-1])]
        if len(passes) > 1:
            chosen.insert(0, (len(passes) - 2, passes[-2]))
    elif a.passes == "largest":
        i = max(range(len(passes)), key=lambda j: sums[j])
        chosen = [(i, passes[i])]
    else:
        chosen = list(enumerate(passes))
    for i, p in chosen:
        report(p, f"pass {i}", a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
