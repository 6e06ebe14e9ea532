#!/usr/bin/env bash
# x4 call B (82a479f): make check-gpu; torch's tensors against torch.distributed's NCCL;
# registered buffers and Zipf v counts against NCCL; torch through libccl_nccl.
set -u
res=$OUT/res; mkdir -p $res
pack() { tar -C "$OUT" -czf "$OUT/res.tgz" res; }
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache CCL_ALGORITHM_DIR=$PWD/algorithms PYTHONUNBUFFERED=1
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
[ -n "$nccl" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
nvidia-smi -L > $res/gpus.txt
np=$(nvidia-smi -L | grep -c '^GPU ')
b=.carry/build
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 ))s)"; }
mp() { timeout "$1" mpirun -np $np --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR -x NCCL_NVLS_ENABLE -x CCL_NCCL_LIB "${@:2}"; }
CCL_LIBRARY=$b/libccl.so PYTHONPATH=python/src CCL_HEAP_BYTES=4294967296 timeout 170 torchrun --nproc_per_node=$np bench/torch_bench.py \
  --sizes 1K,16K,256K,4M,64M,256M --buffers torch,symmetric,pool,registered --csv $res/torch.csv --md $res/torch.md > $res/torch.log 2>&1
echo "torch rc=$? $(el)"; pack
d=$res/sweep-registered; mkdir -p $d
for c in allreduce allgather reduce_scatter alltoall broadcast reduce alltoallv allgatherv; do
  f=4; case $c in alltoallv|allgatherv) f=16;; esac
  mp 60 $b/ccl-perf -c $c -d bf16 -b 1K -e 1G -f $f --graph -n 10 --repeats 3 --compare nccl --buffers registered --csv $d/$c.csv > $d/$c.txt 2>&1
  echo "sweep registered $c rc=$? $(el)"; pack
done
d=$res/sweep-zipf; mkdir -p $d
for c in alltoallv allgatherv; do
  mp 60 $b/ccl-perf -c $c -d bf16 -b 1K -e 1G -f 16 --graph -n 10 --repeats 3 --compare nccl --v-counts zipf --csv $d/$c.csv > $d/$c.txt 2>&1
  echo "sweep zipf $c rc=$? $(el)"; pack
done
GPU_TEST_NS="2 4" timeout 290 tests/run-gpu.sh $b > $res/check-gpu.log 2>&1
echo "check-gpu rc=$? $(el)"; grep -E '^FAIL|passed|failed' $res/check-gpu.log | tail -12; pack
