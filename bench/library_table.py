#!/usr/bin/env python3
"""The tables of docs/perf/*-sweep/README.md, from ccl-perf's CSVs.

    bench/library_table.py docs/perf/x4-sweep/library bf16 [BUFFERS]
        "library choice": the CSVs of tests/perf/gpu_sweep.sh (ALGOS=library); one row
        per size: our time per op (us, out-of-place), the algorithm where it changes,
        and the ratio to NCCL's time in the same run, bold where NCCL is faster.
        BUFFERS: ccl-perf's --buffers, symmetric (the default) or plain; the sweep names
        its files COLL-library-DTYPE-BUFFERS.csv, and sweeps from before --buffers
        (COLL-library-DTYPE.csv, no buffers column) were symmetric.
    bench/library_table.py --scan docs/perf/x4-sweep/scan
        the instance scan of bench/gpu-session.sh (COLL-iK.csv): one row per collective
        and size, the time at each instance count, the best in bold, and NCCL's."""
import csv
import os
import sys

COLLS = ["allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"]


def size(b):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << shift:
            return f"{b >> shift}{unit}"
    return str(b)


def library_csv(folder, c, dtype, buffers):
    """The sweep's CSV of collective c, or None."""
    names = [f"{folder}/{c}-library-{dtype}-{buffers}.csv"]
    if buffers == "symmetric":
        names.append(f"{folder}/{c}-library-{dtype}.csv")
    return next((n for n in names if os.path.exists(n)), None)


def main(folder, dtype, buffers="symmetric"):
    files = {c: library_csv(folder, c, dtype, buffers) for c in COLLS}
    colls = [c for c in COLLS if files[c]]
    rows = {}
    for c in colls:
        with open(files[c]) as f:
            for r in csv.DictReader(f):
                if r.get("buffers", "symmetric") != buffers:
                    continue
                if r["impl"] == "ccl" and r["placement"] == "out-of-place":
                    rows.setdefault(int(r["bytes"]), {})[c] = r
    print("| bytes | " + " | ".join(f"{c} | ratio" for c in colls) + " |")
    print("|---:|" + "---:|---:|" * len(colls))
    last = {}
    for b in sorted(rows):
        cells = []
        for c in colls:
            r = rows[b].get(c)
            if r is None:
                cells += ["-", ""]
                continue
            algo = r["algorithm"] if last.get(c) != r["algorithm"] else ""
            last[c] = r["algorithm"]
            ratio = float(r["ratio_vs_nccl"])
            cells.append(f"{float(r['time_us']):.2f} {algo}".strip())
            cells.append(f"**{ratio:.2f}**" if ratio >= 1 else f"{ratio:.2f}")
        print(f"| {size(b)} | " + " | ".join(cells) + " |")


def scan(folder):
    counts = (1, 4, 16, 32)
    print("| collective | bytes | library's file | " + " | ".join(map(str, counts)) + " | NCCL |")
    print("|---|---:|---|" + "---:|" * (len(counts) + 1))
    for c in COLLS:
        ours, nccl = {}, {}
        for k in counts:
            with open(f"{folder}/{c}-i{k}.csv") as f:
                for r in csv.DictReader(f):
                    if r["placement"] != "out-of-place":
                        continue
                    b = int(r["bytes"])
                    if r["impl"] in ("nccl", "nccl_sym"):  # the bar: NCCL's faster mode
                        nccl[b] = min(nccl.get(b, float("inf")), float(r["time_us"]))
                    elif r["impl"] == "ccl":
                        ours.setdefault(b, {})[k] = (r["algorithm"], float(r["time_us"]))
        for b in sorted(ours):
            best = min(ours[b], key=lambda k: ours[b][k][1])
            cells = [f"**{ours[b][k][1]:.1f}**" if k == best else f"{ours[b][k][1]:.1f}" for k in counts]
            print(f"| {c} | {size(b)} | {ours[b][1][0]} | " + " | ".join(cells) + f" | {nccl[b]:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--scan":
        scan(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[3] in ("symmetric", "plain"):
        main(sys.argv[1], sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        sys.exit("usage: bench/library_table.py FOLDER DTYPE [symmetric|plain] | --scan FOLDER")
