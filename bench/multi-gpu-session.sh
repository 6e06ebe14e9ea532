#!/usr/bin/env bash
# One device call on a multi-GPU machine, in steps; everything lands in $OUT/res.tgz (the
# device tool returns few files), each step's log also in $OUT/res/ as it goes.
#
#   bench/multi-gpu-session.sh BUILD STEP...
#
# BUILD holds what was built on the CPU machine and carried: cclc, ccl-perf, libccl.so,
# tests/gpu/*, examples/*; .ab holds bench/ab.sh's two sides. Steps:
#   check       make check-gpu's runs at N = the GPU count (GPU_TEST_NS to change), with
#               the mismatch classes in process mode
#   check-quick gpu_test on ALGS only (threads and one process per GPU), the mismatch
#               classes, the control tests, and ALGS_LL128 / ALGS_LL forced onto lines
#   ab          bench/ab.sh AB_BASE AB_HEAD (its COLLS and ROUNDS from the environment, SIZES
#               from AB_SIZES; AB_TIMEOUT_ALL bounds it)
#   torch       bench/torch_bench.py under torchrun, one process per GPU (TORCH_SIZES,
#               TORCH_COLLS, TORCH_BUFFERS: its --buffers, torch,symmetric,pool,registered)
#   sweep       tests/perf/gpu_sweep.sh BUILD (BUFFERS, SWEEP_COLLS), where it exists
#   inst        ccl-perf on one algorithm at several instance counts (INST_SPECS, INST_LIST)
set -u
build=${1:?usage: bench/multi-gpu-session.sh BUILD STEP...}
shift
cd "$(dirname "$0")/.."
res=${OUT:-/tmp}/res
mkdir -p "$res"
np=$(nvidia-smi -L | grep -c '^GPU ')
# The shipped algorithms: a carried build's binaries do not sit where libccl looks.
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache PYTHONUNBUFFERED=1 CCL_ALGORITHM_DIR=$PWD/algorithms
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
[ -n "$nccl" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
nvidia-smi -L >"$res/gpus.txt"
nvidia-smi topo -m >>"$res/gpus.txt" 2>&1
pack() { tar -C "$res/.." -czf "${OUT:-/tmp}/res.tgz" res; }
for step in "$@"; do
    start=$(date +%s)
    echo "== $step ($np GPUs)"
    case $step in
    check)
        GPU_TEST_NS=${GPU_TEST_NS:-$np} timeout "${CHECK_TIMEOUT:-420}" tests/run-gpu.sh "$build" >"$res/check-gpu.log" 2>&1
        grep -E '^FAIL|passed|failed' "$res/check-gpu.log" | tail -15 ;;
    check-quick)
        t=$build/tests/gpu/gpu_test
        read -r -a algs <<<"${ALGS:?set ALGS}"
        {
            timeout 150 "$t" --ranks "$np" "${algs[@]}"
            timeout 90 mpirun -np "$np" --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR "$t" --procs "${algs[@]}"
            timeout 60 mpirun -np 2 --allow-run-as-root -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR "$t" --mismatch-procs
            timeout 60 "$t" --control-tests
            [ -n "${ALGS_LL128:-}" ] && CCL_GPU_PROTOCOL=ll128 timeout 90 "$t" --ranks "$np" $ALGS_LL128
            [ -n "${ALGS_LL:-}" ] && CCL_GPU_PROTOCOL=ll timeout 90 "$t" --ranks "$np" $ALGS_LL
        } >"$res/check-quick.log" 2>&1
        echo "$(grep -c '^ok' "$res/check-quick.log") ok, $(grep -c '^FAIL' "$res/check-quick.log") FAIL"
        grep '^FAIL' "$res/check-quick.log" | cut -c1-300 | head -20 ;;
    ab)
        AB_OUT=$res/ab SIZES=${AB_SIZES:-${SIZES:-}} timeout "${AB_TIMEOUT_ALL:-540}" bench/ab.sh "${AB_BASE:?set AB_BASE}" "${AB_HEAD:-WORKTREE}" >"$res/ab.log" 2>&1
        tail -60 "$res/ab.log" ;;
    torch)
        CCL_LIBRARY=$build/libccl.so PYTHONPATH=python/src CCL_HEAP_BYTES=${CCL_HEAP_BYTES:-4294967296} \
            timeout 300 torchrun --nproc_per_node="$np" bench/torch_bench.py --sizes "${TORCH_SIZES:-1K,64K,1M,16M,128M}" \
            --colls "${TORCH_COLLS:-all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,reduce}" \
            --buffers "${TORCH_BUFFERS:-torch,symmetric}" \
            --csv "$res/torch.csv" --md "$res/torch.md" >"$res/torch.log" 2>&1
        tail -40 "$res/torch.log" ;;
    sweep)
        if [ -x tests/perf/gpu_sweep.sh ]; then
            SIZES=${SWEEP_SIZES:-${SIZES:-}} timeout "${SWEEP_TIMEOUT:-560}" tests/perf/gpu_sweep.sh "$build" "$res/sweep" >"$res/sweep.log" 2>&1
            tail -40 "$res/sweep.log"
        else
            echo "   (no tests/perf/gpu_sweep.sh)"
        fi ;;
    inst)
        # One algorithm at several instance counts (CCL_GPU_INSTANCES), one process, CUDA
        # graphs; NCCL beside the first count. INST_SPECS: COLL[:FILE] ... (no FILE: the
        # library's choice, as for the v-collectives, which ccl-perf does not run from a
        # file); INST_LIST, INST_SIZES, INST_VCOUNTS (the v-collectives' count patterns),
        # INST_BUFFERS.
        for spec in ${INST_SPECS:?set INST_SPECS}; do
            c=${spec%%:*} f=
            [ "$spec" = "$c" ] || f=${spec#*:}
            algo=()
            [ -n "$f" ] && algo=(--algo "$f")
            vc=fixed
            case $c in allgatherv|alltoallv) vc=${INST_VCOUNTS:-proportional} ;; esac
            for v in $vc; do
                va=()
                [ "$v" = fixed ] || va=(--v-counts "$v")
                cmp=(--compare nccl)
                for i in ${INST_LIST:-1 4 16}; do
                    name=inst-$c-$(basename "${f:-library}" .ccl)-$v-i$i
                    CCL_GPU_INSTANCES=$i timeout "${INST_TIMEOUT:-150}" "$build/ccl-perf" -c "$c" "${algo[@]}" -d bf16 \
                        ${INST_SIZES:--b 1K -e 1G -f 4} --graph -n 10 --repeats 5 --buffers "${INST_BUFFERS:-symmetric}" \
                        "${cmp[@]}" "${va[@]}" \
                        --csv "$res/$name.csv" >"$res/$name.log" 2>&1
                    echo "-- $name (rc $?)"
                    tail -15 "$res/$name.log"
                    cmp=()
                done
            done
        done ;;
    *) echo "unknown step $step" ;;
    esac
    echo "   ($step: $(( $(date +%s) - start ))s)"
    pack
done
