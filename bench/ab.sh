#!/usr/bin/env bash
# A/B timing of two commits in one device call: the regression guard every change to
# device code passes before it lands (compiler/cuda, emit_cuda.c, runtime/src/gpu).
#
#   bench/ab.sh BASE [HEAD]        HEAD defaults to the work tree as it is (uncommitted too)
#
# Where Flex and Bison are (the CPU machine), it builds each side that is not built yet
# into .ab/NAME/ (ccl-perf, which links libccl statically, and the algorithms folder it
# finds beside itself): BASE from a temporary git worktree, the work tree with `make`.
# Where a GPU is (the device machine; carry .ab), it times both sides alternately, one
# process per GPU: for each collective, ROUNDS rounds of BASE then HEAD (the order
# flips every round), ccl-perf with CUDA graphs on the same sizes, and prints per size the
# median time of each side and HEAD/BASE, out of place and in place. Results land in
# ${AB_OUT:-$OUT/ab or .ab/results}: the CSVs, ab.md (the tables) and ab.csv.
#
# Environment: COLLS (allreduce allgather reduce_scatter alltoall broadcast reduce),
# SIZES ("-b 1K -e 1G -f 4"), ROUNDS (3), BUFFERS (symmetric; plain where ccl-perf has
# --buffers), AB_EXTRA (more ccl-perf arguments, e.g. --algo FILE), AB_TIMEOUT (seconds
# per ccl-perf run, 120), AB_ENV (NAME=VALUE ... set for every rank of both sides, e.g.
# CCL_HEAP_BYTES=256M), AB_NP (ranks: every GPU by default; with AB_NP=2
# AB_ENV=CUDA_VISIBLE_DEVICES=0,1 two GPUs of a larger machine).
set -u
cd "$(dirname "$0")/.."
base=${1:?usage: bench/ab.sh BASE [HEAD]}
head=${2:-WORKTREE}

# The folder name of a side: the commit's short hash, or "worktree". Without git (the
# device machine gets the work tree only) the one folder of .ab whose name starts so.
side_name() {
    local found
    if [ "$1" = WORKTREE ]; then echo worktree; return; fi
    git rev-parse --short=10 "$1^{commit}" 2>/dev/null && return
    found=$(cd .ab 2>/dev/null && ls -d "$1"* 2>/dev/null | head -1)
    echo "${found:-$1}"
}
A=$(side_name "$base")
B=$(side_name "$head")

build_side() {
    local rev=$1 name=$2 dest=.ab/$2
    if [ -x "$dest/ccl-perf" ] && [ "$name" != worktree ]; then return 0; fi
    if ! command -v bison >/dev/null || ! command -v flex >/dev/null; then
        echo "ab: .ab/$name is not built and Flex/Bison are missing here: build on the CPU machine and carry .ab" >&2
        return 1
    fi
    local src=.
    if [ "$rev" != WORKTREE ]; then
        src=$(mktemp -d)/src
        git worktree add --detach "$src" "$rev" >/dev/null 2>&1 || { echo "ab: cannot check out $rev" >&2; return 1; }
    fi
    echo "ab: building $name"
    if ! make -C "$src" -j"$(nproc)" build/ccl-perf >".ab/build-$name.log" 2>&1; then
        echo "ab: building $name failed: .ab/build-$name.log" >&2
        return 1
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    cp "$src/build/ccl-perf" "$dest/"
    cp -r "$src/algorithms" "$dest/"
    git -C "$src" rev-parse HEAD >"$dest/commit.txt"
    if [ "$rev" = WORKTREE ] && ! git diff --quiet HEAD -- . 2>/dev/null; then
        echo "(plus uncommitted changes)" >>"$dest/commit.txt"
    fi
    [ "$rev" != WORKTREE ] && git worktree remove --force "$src" >/dev/null 2>&1
    return 0
}

mkdir -p .ab
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    build_side "$base" "$A" && build_side "$head" "$B" || exit 1
    echo "ab: built .ab/$A and .ab/$B; no GPU here: carry .ab to the GPU machine and run bench/ab.sh $base $head there"
    exit 0
fi
for s in "$A" "$B"; do
    [ -x ".ab/$s/ccl-perf" ] || { echo "ab: .ab/$s/ccl-perf missing: run bench/ab.sh on the CPU machine first" >&2; exit 1; }
done

out=${AB_OUT:-${OUT:-.ab}/ab}
mkdir -p "$out"
np=${AB_NP:-$(nvidia-smi -L | grep -c '^GPU ')}
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=${CCL_CACHE_DIR:-/tmp/ccl-cache}
colls=${COLLS:-allreduce allgather reduce_scatter alltoall broadcast reduce}
rounds=${ROUNDS:-3}
read -r -a sizes <<<"${SIZES:--b 1K -e 1G -f 4}"
read -r -a extra <<<"${AB_EXTRA:-}"
bufs=()
[ -n "${BUFFERS:-}" ] && bufs=(--buffers "$BUFFERS")
envs=()
for kv in ${AB_ENV:-}; do
    export "${kv?}"
    envs+=(-x "${kv%%=*}")
done
echo "ab: $np GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)), base $A, head $B, $rounds rounds"
for c in $colls; do
    for ((r = 1; r <= rounds; r++)); do
        order=("$A" "$B")
        (( r % 2 == 0 )) && order=("$B" "$A")
        for s in "${order[@]}"; do
            CCL_ALGORITHM_DIR=$PWD/.ab/$s/algorithms timeout "${AB_TIMEOUT:-120}" mpirun -np "$np" --allow-run-as-root \
                -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR "${envs[@]}" \
                ".ab/$s/ccl-perf" -c "$c" -d bf16 "${sizes[@]}" --graph -n 10 --repeats 5 "${bufs[@]}" "${extra[@]}" \
                --csv "$out/$c-$s-r$r.csv" >"$out/$c-$s-r$r.txt" 2>&1 </dev/null
            echo "ab: $c $s round $r: rc=$?"
        done
    done
done
python3 - "$out" "$A" "$B" "$colls" <<'EOF'
# Median time per (collective, placement, bytes) and side over the rounds, then HEAD/BASE.
import csv, glob, os, statistics, sys
out, a, b, colls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
t = {}
for c in colls:
    for side in (a, b):
        for path in glob.glob(f"{out}/{c}-{side}-r*.csv"):
            with open(path) as f:
                for row in csv.DictReader(f):
                    if row["impl"] == "ccl":
                        t.setdefault((c, row["placement"], int(row["bytes"]), side), []).append(float(row["time_us"]))
lines, table = ["collective,placement,bytes,base_us,head_us,ratio"], []
for c in colls:
    for place in ("out-of-place", "in-place"):
        keys = sorted({k[2] for k in t if k[0] == c and k[1] == place})
        if not keys:
            continue
        table.append(f"\n### {c}, {place}\n\n| bytes | base us | head us | head/base |\n|---:|---:|---:|---:|")
        for n in keys:
            x, y = t.get((c, place, n, a)), t.get((c, place, n, b))
            if not x or not y:
                continue
            mx, my = statistics.median(x), statistics.median(y)
            lines.append(f"{c},{place},{n},{mx:.3f},{my:.3f},{my / mx:.4f}")
            mark = "**" if my / mx > 1.02 else ""
            table.append(f"| {n} | {mx:.2f} | {my:.2f} | {mark}{my / mx:.3f}{mark} |")
open(f"{out}/ab.csv", "w").write("\n".join(lines) + "\n")
open(f"{out}/ab.md", "w").write(f"base {a}, head {b}; medians over rounds; bold: head more than 2% slower\n"
                                 + "\n".join(table) + "\n")
print(open(f"{out}/ab.md").read())
EOF
