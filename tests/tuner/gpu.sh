#!/usr/bin/env bash
# The tuner on GPUs (not part of `make check`; for the GPU machines, see docs/tuner.md):
#   1. ccl-tune over 1 KB..1 MB allreduce on every visible GPU (few calls per sample);
#   2. ccl_all_reduce follows that table, on device buffers, with exact results;
#   3. without a table file, on 4 or 2 H200s, calls follow the built-in table;
#   4. ccl-perf --check with the table: the library's choice per size is correct in
#      and out of place (the twoshot in-place question of docs/perf/gpu-first).
# Prints "ok NAME" or "FAIL NAME: why" per test; skips cleanly without a GPU.
#
#   tests/tuner/gpu.sh BUILD [OUTDIR]
set -u
build=${1:?usage: tests/tuner/gpu.sh BUILD [OUTDIR]}
out=${2:-$(mktemp -d)}
cd "$(dirname "$0")/../.."
export CCL_ALGORITHM_DIR=$PWD/algorithms NCCL_NVLS_ENABLE=0
export CCL_CACHE_DIR=${CCL_CACHE_DIR:-/tmp/ccl-cache}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "ok tuner.gpu # skip: no GPU"
    exit 0
fi
n=$(nvidia-smi -L | wc -l)
mkdir -p "$out"
if "$build/ccl-tune" --backend gpu -c allreduce -b 1K -e 1M --iters 5 --reps 3 -o "$out/gpu.tbl" -v \
        >"$out/ccl-tune.txt" 2>&1; then
    echo "ok tuner.gpu.ccl-tune ($n GPUs; $out/ccl-tune.txt)"
    "$build/tests/tuner/tuner" --use "$out/gpu.tbl" "$n" --gpu | sed 's/^\(ok\|FAIL\) tuner\./\1 tuner.gpu./'
    CCL_TUNE_FILE=$out/gpu.tbl "$build/ccl-perf" -c allreduce -d bf16 -b 1K -e 1M -f 2 --graph --check \
        >"$out/ccl-perf-table.txt" 2>&1 && echo "ok tuner.gpu.ccl-perf-check" ||
        echo "FAIL tuner.gpu.ccl-perf-check: $(tail -3 "$out/ccl-perf-table.txt" | tr '\n' '|')"
else
    echo "FAIL tuner.gpu.ccl-tune: $(tail -5 "$out/ccl-tune.txt" | tr '\n' '|')"
fi
# The built-in table: no table file anywhere.
empty=$(mktemp -d)
CCL_CACHE_DIR=$empty "$build/tests/tuner/tuner" --builtin "$n" --gpu | sed 's/^\(ok\|FAIL\) tuner\./\1 tuner.gpu./'
CCL_CACHE_DIR=$empty "$build/ccl-perf" -c allreduce -d bf16 -b 1K -e 64M -f 4 --graph --check \
    >"$out/ccl-perf-builtin.txt" 2>&1 && echo "ok tuner.gpu.builtin-check" ||
    echo "FAIL tuner.gpu.builtin-check: $(tail -3 "$out/ccl-perf-builtin.txt" | tr '\n' '|')"
rm -rf "$empty"
exit 0
