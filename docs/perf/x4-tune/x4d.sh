#!/usr/bin/env bash
# x4 call D (b59936e, the new x4 table): the changed collectives checked and timed;
# allreduce 1-4 MB tuned with every timing; make check-gpu's N=4 half.
set -u
res=$OUT/res; mkdir -p $res
pack() { tar -C "$OUT" -czf "$OUT/res.tgz" res; }
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache CCL_ALGORITHM_DIR=$PWD/algorithms PYTHONUNBUFFERED=1
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
[ -n "$nccl" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
nvidia-smi -L > $res/gpus.txt
np=$(nvidia-smi -L | grep -c '^GPU ')
b=.carry/build
cat $b/commit.txt > $res/commit.txt
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 ))s)"; }
mp() { timeout "$1" mpirun -np $np --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR -x NCCL_NVLS_ENABLE -x CCL_NCCL_LIB "${@:2}"; }
for buf in symmetric plain; do
  d=$res/sweep-$buf; mkdir -p $d
  for c in reduce broadcast allgather; do
    mp 45 $b/ccl-perf -c $c -d bf16 -b 1K -e 1G -f 4 --graph -n 10 --repeats 3 --check --compare nccl --buffers $buf --csv $d/$c.csv > $d/$c.txt 2>&1
    echo "sweep $buf $c rc=$? $(el)"; pack
  done
done
mp 80 $b/ccl-tune -v -c allreduce -b 1M -e 4M --instances 16,32,64 --slices 1,2 --iters 10 --reps 3 -o $res/tune-allreduce.tbl > $res/tune-allreduce.log 2>&1
echo "tune allreduce rc=$? $(el)"; pack
CCL_LIBRARY=$b/libccl.so PYTHONPATH=python/src CCL_HEAP_BYTES=4294967296 timeout 60 torchrun --nproc_per_node=$np bench/torch_bench.py \
  --sizes 4M,64M,256M --colls broadcast,reduce,all_gather --buffers torch,symmetric --csv $res/torch.csv --md $res/torch.md > $res/torch.log 2>&1
echo "torch rc=$? $(el)"; pack
left=$(( 580 - ($(date +%s) - t0) )); echo "check-gpu bound ${left}s"
GPU_TEST_NS=4 timeout $left tests/run-gpu.sh $b > $res/check-gpu.log 2>&1
echo "check-gpu rc=$? $(el)"; grep -E '^==|\([0-9]+s\)|^FAIL|passed|failed' $res/check-gpu.log | tail -30; pack
