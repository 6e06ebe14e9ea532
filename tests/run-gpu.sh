#!/usr/bin/env bash
# GPU tests (make check-gpu): every shipped algorithm on 2 and 4 GPUs (as many as the
# machine has), in both communicator modes (one process driving every GPU; one process
# per GPU under mpirun), every output element checked (tests/gpu/gpu_test.c). Reducing
# algorithms of allreduce also run every op and dtype (--full).
#
#   tests/run-gpu.sh BUILD [ALG.ccl...]
#
# Prints "skipped: no GPU" and exits 0 where no GPU (or driver) is present. NVLink
# multicast is never used by libccl; NCCL_NVLS_ENABLE=0 is kept for any NCCL in the process.
set -u
build=${1:?usage: tests/run-gpu.sh BUILD [ALG.ccl...]}
shift
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
export CCL_CACHE_DIR=${CCL_CACHE_DIR:-$HOME/.cache/ccl}
# GPU_TEST_NS="2 4" picks the rank counts; ranks beyond the GPU count share GPUs.
ns=${GPU_TEST_NS:-2 4}
bin=$build/tests/gpu/gpu_test
[ -x "$bin" ] || { echo "FAIL gpu: $bin not built"; exit 1; }
algs=("$@")
[ ${#algs[@]} -eq 0 ] && algs=(algorithms/*/*.ccl)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${ngpu:-0}" -eq 0 ]; then
    echo "skipped: no GPU"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mpi=(mpirun -np)
[ "$(id -u)" = 0 ] && mpiflags=(--allow-run-as-root) || mpiflags=()
full=()
for a in "${algs[@]}"; do case $a in */allreduce/ring.ccl|*/allreduce/allpairs.ccl|*/reduce_scatter/ring.ccl|*/reduce/direct.ccl) full+=("$a");; esac; done
for n in $ns; do
    [ "$n" -le "$ngpu" ] || [ -n "${GPU_TEST_NS:-}" ] || { echo "   (N=$n: only $ngpu GPUs, skipped)"; continue; }
    echo "== gpu N=$n, one process"
    start=$(date +%s)
    "$bin" --ranks "$n" "${algs[@]}" 2>&1 | tee -a "$log"
    [ ${#full[@]} -gt 0 ] && "$bin" --ranks "$n" --full "${full[@]}" 2>&1 | tee -a "$log"
    # Simple programs forced onto LL lines (a tuning choice the runtime offers).
    CCL_GPU_PROTOCOL=ll "$bin" --ranks "$n" algorithms/allreduce/ring.ccl algorithms/allreduce/twoshot.ccl \
        algorithms/allgather/ring.ccl algorithms/reduce_scatter/ring.ccl 2>&1 | tee -a "$log"
    echo "   ($(( $(date +%s) - start ))s)"
    if command -v mpirun >/dev/null; then
        echo "== gpu N=$n, one process per GPU (mpirun)"
        start=$(date +%s)
        "${mpi[@]}" "$n" "${mpiflags[@]}" -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR "$bin" --procs "${algs[@]}" 2>&1 | tee -a "$log"
        echo "   ($(( $(date +%s) - start ))s)"
    else
        echo "   (no mpirun: process mode skipped)"
    fi
done
echo "== gpu: a dead peer times out with a useful message"
"$bin" --timeout-test algorithms/allreduce/ring.ccl algorithms/allreduce/allpairs.ccl 2>&1 | tee -a "$log"
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo
grep '^FAIL ' "$log" | sed 's/^/  /'
echo "gpu: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
