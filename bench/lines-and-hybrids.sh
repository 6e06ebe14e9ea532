#!/usr/bin/env bash
# One short device call on a multi-GPU machine (made for nvidia-h200-x2, 2026-11-24, with
# about 8 minutes of device time left): whether LL128 lines cross NVLink whole, LL128's
# correctness with one GPU per rank, LL against LL128 against NCCL (both modes) for the
# one-shot and two-shot all-reduce at 4 KB-16 MB, and the hybrid all-gather and
# all-to-all against NCCL at 64 MB-1 GB. Results land in $OUT as they come.
#   bench/lines-and-hybrids.sh BUILD
set -u
build=${1:?usage: bench/lines-and-hybrids.sh BUILD}
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
find "$build" -exec touch {} +
np=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi -L >"$OUT/gpus.txt"
nvcc -arch=sm_90 -O2 -o /tmp/ll128_probe bench/ll128_probe.cu && timeout 60 /tmp/ll128_probe 2000 1 | tee "$OUT/probe.txt"
CCL_GPU_PROTOCOL=ll128 timeout 120 "$build/tests/gpu/gpu_test" --ranks "$np" algorithms/allreduce/allpairs.ccl \
    algorithms/allreduce/twoshot.ccl algorithms/reduce_scatter/ring.ccl algorithms/allgather/direct_ll.ccl \
    >"$OUT/gpu-test-ll128.txt" 2>&1
echo "gpu_test ll128: $(grep -c '^ok' "$OUT/gpu-test-ll128.txt") ok, $(grep -c '^FAIL' "$OUT/gpu-test-ll128.txt") failed"
perf() { # NAME PROTOCOL CCL-PERF-ARGS...: one process per GPU, CUDA graphs of 10 ops, 5 replays
    local name=$1 proto=$2
    shift 2
    CCL_GPU_PROTOCOL=$proto timeout 90 mpirun -np "$np" --allow-run-as-root -x CCL_GPU_PROTOCOL -x CCL_NCCL_LIB \
        -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR "$build/ccl-perf" "$@" --graph -n 10 --repeats 5 -d bf16 --check \
        --compare nccl --csv "$OUT/$name.csv" >"$OUT/$name.txt" 2>&1 </dev/null
    echo "== $name rc=$?"
    grep -E '^ +[0-9]' "$OUT/$name.txt" | cut -c1-150
}
for p in ll ll128; do
    perf "allreduce-allpairs-$p" $p -c allreduce --algo algorithms/allreduce/allpairs.ccl -b 4K -e 16M -f 4
done
perf allreduce-twoshot-ll128 ll128 -c allreduce --algo algorithms/allreduce/twoshot.ccl -b 64K -e 16M -f 4
perf allgather-hybrid simple -c allgather --algo algorithms/allgather/hybrid.ccl -b 64M -e 1G -f 4
perf alltoall-hybrid simple -c alltoall --algo algorithms/alltoall/hybrid.ccl -b 64M -e 1G -f 4
