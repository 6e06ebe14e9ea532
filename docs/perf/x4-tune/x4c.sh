#!/usr/bin/env bash
# x4 call C (82a479f): ccl-tune where the x4 sweep lost, then the merged table timed.
set -u
res=$OUT/res; mkdir -p $res/tune
pack() { tar -C "$OUT" -czf "$OUT/res.tgz" res; }
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache CCL_ALGORITHM_DIR=$PWD/algorithms
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
[ -n "$nccl" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
nvidia-smi -L > $res/gpus.txt
np=$(nvidia-smi -L | grep -c '^GPU ')
b=.carry/build
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 ))s)"; }
mp() { timeout "$1" mpirun -np $np --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR -x NCCL_NVLS_ENABLE -x CCL_NCCL_LIB -x CCL_TUNE_FILE "${@:2}"; }
tune() { local cap=$1 name=$2; shift 2
  timeout $cap mpirun -np $np --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR -x NCCL_NVLS_ENABLE $b/ccl-tune -o $res/tune/$name.tbl "$@" > $res/tune/$name.log 2>&1
  echo "tune $name rc=$? $(el)"; tail -3 $res/tune/$name.log; pack; }
tune 130 reduce -c reduce -b 1M -e 1G --instances 32,64 --slices 1,2,4,8,16 --iters 10 --reps 3
tune 130 broadcast -c broadcast -b 1M -e 1G --instances 32,64 --slices 1,2,4,8,16 --iters 10 --reps 3
tune 75 allgather -c allgather -b 1K -e 16M --slices 1,2,4 --iters 10 --reps 3
tune 60 allreduce -c allreduce -b 512K -e 8M --instances 16,32,64 --slices 1,2,4 --iters 10 --reps 3
tune 55 reduce_scatter -c reduce_scatter -b 1K -e 2M --slices 1,2,4 --iters 10 --reps 3
python3 .carry/merge_tbl.py runtime/tune/h200x4.tbl $res/tune/merged.tbl $res/tune/{reduce,broadcast,allgather,allreduce,reduce_scatter}.tbl
export CCL_TUNE_FILE=$res/tune/merged.tbl
d=$res/sweep-tuned; mkdir -p $d
for c in reduce broadcast allgather allreduce reduce_scatter; do
  mp 40 $b/ccl-perf -c $c -d bf16 -b 1K -e 1G -f 4 --graph -n 10 --repeats 3 --compare nccl --csv $d/$c.csv > $d/$c.txt 2>&1
  echo "sweep tuned $c rc=$? $(el)"; pack
done
for c in reduce broadcast; do
  mp 30 $b/ccl-perf -c $c -d bf16 -b 1M -e 1G -f 4 --graph -n 10 --repeats 3 --compare nccl --buffers plain --csv $d/$c-plain.csv > $d/$c-plain.txt 2>&1
  echo "sweep tuned plain $c rc=$? $(el)"; pack
done
