#!/usr/bin/env bash
# x4 call A: the library against NCCL on ccl_mem_alloc and plain buffers (82a479f).
set -u
res=$OUT/res; mkdir -p $res
pack() { tar -C "$OUT" -czf "$OUT/res.tgz" res; }
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache CCL_ALGORITHM_DIR=$PWD/algorithms
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
[ -n "$nccl" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
nvidia-smi -L > $res/gpus.txt; nvidia-smi topo -m >> $res/gpus.txt 2>&1
np=$(nvidia-smi -L | grep -c '^GPU ')
b=.carry/build
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 ))s)"; }
mp() { timeout "$1" mpirun -np $np --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR -x NCCL_NVLS_ENABLE -x CCL_NCCL_LIB "${@:2}"; }
for buf in symmetric plain; do
  d=$res/sweep-$buf; mkdir -p $d
  for c in allreduce allgather reduce_scatter alltoall broadcast reduce sendrecv alltoallv allgatherv; do
    f=4; case $c in sendrecv|alltoallv|allgatherv) f=16;; esac
    [ $buf = plain ] && case $c in sendrecv) continue;; esac
    mp 100 $b/ccl-perf -c $c -d bf16 -b 1K -e 1G -f $f --graph -n 10 --repeats 5 --compare nccl --buffers $buf --csv $d/$c.csv > $d/$c.txt 2>&1
    echo "sweep $buf $c rc=$? $(el)"; pack
  done
done
