#!/usr/bin/env bash
# On a GPU machine (the device tool's nvidia-h200-x4 and friends): build, test, time.
#
#   tools/gpu-bench.sh BUILD build            make (no flex/bison needed: BUILD carries
#                                             the generated parser from a CPU machine)
#   tools/gpu-bench.sh BUILD smoke            2 ranks sharing GPU 0, both modes, 2 algorithms
#   tools/gpu-bench.sh BUILD jit              cold and warm JIT of ring and allpairs (N=4)
#   tools/gpu-bench.sh BUILD perf OUTDIR      allreduce bf16 under CUDA graphs, 1K..1G:
#                                             allpairs (LL), twoshot (Simple and LL), ring,
#                                             at several instance counts, NCCL in the same
#                                             run; tables in OUTDIR
#   tools/gpu-bench.sh BUILD port OUTDIR      port-channel algorithms (copy engines driven
#                                             by the host proxy) next to their SM twins
#                                             and NCCL, bf16, 16M..1G, every GPU
#
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0); libccl never uses it.
set -u
build=${1:?usage: tools/gpu-bench.sh BUILD build|smoke|jit|perf [OUTDIR]}
what=${2:?}
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CCL_CACHE_DIR=${CCL_CACHE_DIR:-/tmp/ccl-cache}
mpiflags=(); [ "$(id -u)" = 0 ] && mpiflags=(--allow-run-as-root)

case $what in
build)
    # The carried generated files are up to date by construction; never rerun bison/flex.
    make -k -j"$(nproc)" BUILD="$build" -o "$build/ccl.tab.c" -o "$build/ccl.tab.h" -o "$build/lex.yy.c" \
        -o "$build/lex.yy.h" all >"$build/make.log" 2>&1
    for b in cclc ccl-perf tests/gpu/gpu_test tests/gpu/jit_time; do
        [ -x "$build/$b" ] || { echo "build: $build/$b missing"; tail -30 "$build/make.log"; exit 1; }
    done
    echo "build: ok ($(nvidia-smi -L | head -1); $(nvidia-smi -L | wc -l) GPU(s))"
    ;;
smoke)
    "$build/tests/gpu/gpu_test" --ranks 2 algorithms/allreduce/allpairs.ccl algorithms/allreduce/ring.ccl \
        algorithms/allgather/direct.ccl
    mpirun -np 2 "${mpiflags[@]}" -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR "$build/tests/gpu/gpu_test" --procs \
        algorithms/allreduce/allpairs.ccl algorithms/allreduce/ring.ccl
    ;;
jit)
    for a in allreduce/allpairs allreduce/ring reduce_scatter/direct; do
        "$build/tests/gpu/jit_time" "algorithms/$a.ccl" 4 0 bf16
    done
    ;;
perf)
    out=${3:?perf needs OUTDIR}
    mkdir -p "$out"
    nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    export CCL_NCCL_LIB=${CCL_NCCL_LIB:-$nccl/lib/libnccl.so.2}
    run() { # name, env..., -- ccl-perf args
        local name=$1; shift
        local envs=()
        while [ "$1" != -- ]; do envs+=("$1"); shift; done
        shift
        echo "== $name: ${envs[*]} ccl-perf $*"
        env "${envs[@]}" "$build/ccl-perf" "$@" --csv "$out/$name.csv" 2>&1 | tee "$out/$name.txt"
    }
    run allpairs_i1 CCL_GPU_INSTANCES=1 -- -c allreduce --algo algorithms/allreduce/allpairs.ccl -d bf16 \
        -b 1K -e 64K -f 4 --graph --check --compare nccl
    run allpairs_i4 CCL_GPU_INSTANCES=4 -- -c allreduce --algo algorithms/allreduce/allpairs.ccl -d bf16 \
        -b 16K -e 1M -f 4 --graph --check
    run allpairs_i16 CCL_GPU_INSTANCES=16 -- -c allreduce --algo algorithms/allreduce/allpairs.ccl -d bf16 \
        -b 64K -e 1M -f 4 --graph --check
    run twoshot_ll_i8 CCL_GPU_INSTANCES=8 CCL_GPU_PROTOCOL=ll -- -c allreduce --algo algorithms/allreduce/twoshot.ccl \
        -d bf16 -b 64K -e 4M -f 4 --graph --check
    run twoshot_i16 CCL_GPU_INSTANCES=16 -- -c allreduce --algo algorithms/allreduce/twoshot.ccl -d bf16 \
        -b 256K -e 64M -f 4 --graph --check
    run ring_i32 CCL_GPU_INSTANCES=32 -- -c allreduce --algo algorithms/allreduce/ring.ccl -d bf16 \
        -b 1M -e 1G -f 4 --graph --compare nccl
    ;;
port)
    out=${3:?port needs OUTDIR}
    mkdir -p "$out"
    nccl=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    export CCL_NCCL_LIB=${CCL_NCCL_LIB:-$nccl/lib/libnccl.so.2}
    np=$(nvidia-smi -L | grep -c '^GPU ')
    for pair in allreduce:ring_port:ring allgather:ring_port:ring alltoall:pairwise_port:pairwise \
        allreduce:hybrid:twoshot allgather:hybrid:direct alltoall:hybrid:direct reduce_scatter:hybrid:direct; do
        IFS=: read -r coll port twin <<<"$pair"
        for run in "$port 1" "$port 4" "$twin 1" "$twin 32"; do
            read -r name inst <<<"$run"
            echo "== $coll $name, $inst instance(s), $np ranks"
            CCL_GPU_INSTANCES=$inst mpirun -np "$np" "${mpiflags[@]}" -x CCL_GPU_INSTANCES -x CCL_NCCL_LIB \
                -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR "$build/ccl-perf" -c "$coll" --algo "algorithms/$coll/$name.ccl" \
                -d bf16 -b 16M -e 1G -f 4 --graph --check --compare nccl --csv "$out/$coll-$name-i$inst.csv" 2>&1 |
                tee "$out/$coll-$name-i$inst.txt"
        done
    done
    ;;
*)
    echo "unknown step '$what'"; exit 2 ;;
esac
