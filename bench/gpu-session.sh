#!/usr/bin/env bash
# One device call (made for nvidia-h200-x2 on 2026-11-22; any GPU count): port-channel
# timings, the instance scan, make check-gpu, then the ccl-perf sweep of COLLS (ALGOS=
# library for the library rows only) for at most SECONDS_FOR_SWEEP. Ranks = the GPUs.
# Everything lands in $OUT/results.tgz (the device tool returns few files). BUFFERS
# ("symmetric plain" by default) reaches the sweep: each run once per kind of buffers.
#   bench/gpu-session.sh BUILD "COLLS" SECONDS_FOR_SWEEP [port] [portscale] [scan] [ll128] [chain] [probe] [check] [tune]
# docs/perf/x2-sweep/ and x4-sweep/ were made with it (x4-sweep/README.md lists the calls), e.g.
#   bench/gpu-session.sh build-gpu "allreduce allgather reduce_scatter alltoall broadcast reduce" 400 scan check
set -u
build=$1 colls=$2 budget=$3; shift 3
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache
nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
res=$OUT/res; mkdir -p "$res"
np=$(nvidia-smi -L | grep -c '^GPU ')
mpi=(mpirun -np "$np" --allow-run-as-root -x CCL_GPU_INSTANCES -x CCL_NCCL_LIB -x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR)
# perf INSTANCES OUT CCL-PERF-ARGS...: one timed ccl-perf run (CUDA graphs of 10 ops, 5
# replays) with INSTANCES per program, into OUT.txt and OUT.csv. mpirun reads stdin, so
# it gets none (it once ate the rest of a probe list). CCL_TUNE_FILE and
# CCL_GPU_PROTOCOL, when set, travel.
perf() {
    local inst=$1 out=$2 fwd=()
    shift 2
    [ -n "${CCL_TUNE_FILE+set}" ] && fwd=(-x CCL_TUNE_FILE)
    [ -n "${CCL_GPU_PROTOCOL+set}" ] && fwd+=(-x CCL_GPU_PROTOCOL)
    CCL_GPU_INSTANCES=$inst timeout 60 "${mpi[@]}" "${fwd[@]}" "$build/ccl-perf" "$@" --graph -n 10 --repeats 5 \
        --csv "$out.csv" >"$out.txt" 2>&1 </dev/null
}
for step in "$@"; do
    case $step in
    port)
        mkdir -p "$res/port"
        # The hybrids (copy engine and SMs at once) at more instances: their SM blocks
        # need them, as `direct` does.
        for spec in allreduce:ring_port:1,4 allgather:ring_port:1,4 alltoall:pairwise_port:1,4 \
                    allreduce:hybrid:4,16 allgather:hybrid:4,16 alltoall:hybrid:4,16 \
                    reduce_scatter:hybrid:4,16; do
            IFS=: read -r coll name insts <<<"$spec"
            for inst in ${insts//,/ }; do
                echo "== $coll $name, $inst instance(s)"
                perf "$inst" "$res/port/$coll-$name-i$inst" -c "$coll" --algo "algorithms/$coll/$name.ccl" \
                    -d bf16 -b 16M -e 1G -f 4 --check --compare nccl
                grep -E '^ +[0-9]' "$res/port/$coll-$name-i$inst.txt" | cut -c1-140
            done
        done ;;
    scan)
        # Library choice per collective at fixed instance counts: the data behind the
        # built-in tables' instance counts (runtime/tune/*.tbl).
        mkdir -p "$res/scan"
        for coll in allreduce allgather reduce_scatter alltoall broadcast reduce; do
            for inst in 1 4 16 32; do
                cmp=(); [ $inst = 1 ] && cmp=(--compare nccl)
                CCL_TUNE_FILE=none perf "$inst" "$res/scan/$coll-i$inst" -c "$coll" -d bf16 -b 1K -e 1G -f 4 "${cmp[@]}"
                echo "scan $coll i$inst rc=$?"
            done
        done ;;
    portscale)
        mkdir -p "$res/port"
        for inst in 8 16; do
            perf "$inst" "$res/port/allgather-ring_port-i$inst" -c allgather \
                --algo algorithms/allgather/ring_port.ccl -d bf16 -b 64M -e 1G -f 4 --check
            grep -E '^ +[0-9]' "$res/port/allgather-ring_port-i$inst.txt" | cut -c1-120
        done ;;
    probe)
        # One ccl-perf run per line of the file $PROBES (bench/probes/*.txt):
        #   INSTANCES COLL ALGORITHM_FILE MORE_CCL_PERF_ARGS...
        # for measurements the scan cannot make (a program outside its sizes hint, an
        # instance count the scan skips).
        mkdir -p "$res/probe"
        while read -r inst coll file args; do
            case $inst in ''|\#*) continue ;; esac
            name=$coll-$(basename "$file" .ccl)-i$inst-${args//[^0-9A-Za-z]/}
            read -r -a more <<<"$args"
            perf "$inst" "$res/probe/$name" -c "$coll" --algo "$file" -d bf16 --check --compare nccl "${more[@]}"
            echo "probe $name rc=$?"
        done <"${PROBES:?probe: set PROBES to a file of runs, e.g. bench/probes/x4-1.txt}" ;;
    ll128)
        # The three protocols on the programs that may run all of them, 4 KB-64 MB (LL128's
        # range and either side), against both NCCL modes; the data for the tables'
        # protocol column.
        mkdir -p "$res/ll128"
        # Whether a warp's 128-byte line crosses NVLink whole (writer on GPU 0, reader on 1).
        nvcc -arch=sm_90 -O2 -o /tmp/ll128_probe bench/ll128_probe.cu && /tmp/ll128_probe 2000 1 | tee "$res/ll128/probe.txt"
        for pair in allreduce:allpairs allreduce:twoshot allreduce:ring allgather:direct_ll alltoall:direct_ll \
            reduce_scatter:direct_ll broadcast:direct_ll reduce:direct_ll; do
            IFS=: read -r coll name <<<"$pair"
            protos="simple ll ll128"
            [ "${name%_ll}" != "$name" ] && protos="ll ll128"   # never Simple: see gpu_pick_protocol
            for proto in $protos; do
                for inst in 1 8; do
                    CCL_GPU_PROTOCOL=$proto perf "$inst" "$res/ll128/$coll-$name-$proto-i$inst" -c "$coll" \
                        --algo "algorithms/$coll/$name.ccl" -d bf16 -b 4K -e 64M -f 4 --check --compare nccl
                    echo "ll128 $coll $name $proto i$inst rc=$?"
                done
            done
        done ;;
    chain)
        # The streaming chains against NCCL at the sizes where the tree programs lose, at
        # the instance counts the table would use.
        mkdir -p "$res/chain"
        for coll in broadcast reduce; do
            for inst in 1 4 16; do
                perf "$inst" "$res/chain/$coll-chain-i$inst" -c "$coll" --algo "algorithms/$coll/chain.ccl" \
                    -d bf16 -b 1M -e 1G -f 4 --check --compare nccl
                echo "chain $coll i$inst rc=$?"
            done
        done ;;
    tune)
        # ccl-tune, one process per GPU, one collective at a time (a run that times out
        # loses only its own table): tune-COLL.tbl, at most TUNE_SECONDS each (90 by
        # default); TUNE_COLLS picks them (all six), TUNE_ARGS adds options ("-b 1K -e 64M").
        mkdir -p "$res/tune"
        read -r -a more <<<"${TUNE_ARGS:-}"
        for coll in ${TUNE_COLLS:-allreduce allgather reduce_scatter alltoall broadcast reduce}; do
            S=$(date +%s)
            timeout "${TUNE_SECONDS:-90}" "${mpi[@]}" -x CCL_ALGORITHM_DIR="$PWD/algorithms" "$build/ccl-tune" \
                -c "$coll" --iters 10 --reps 3 "${more[@]}" -o "$res/tune/tune-$coll.tbl" \
                >"$res/tune/tune-$coll.log" 2>&1 </dev/null
            echo "tune $coll rc=$? $(( $(date +%s) - S ))s"
        done ;;
    check)
        S=$(date +%s)
        timeout 240 tests/run-gpu.sh "$build" >"$res/check-gpu.log" 2>&1
        echo "check-gpu rc=$? $(( $(date +%s) - S ))s: $(tail -1 "$res/check-gpu.log")"
        grep FAIL "$res/check-gpu.log" | head ;;
    esac
done
if [ "$budget" -gt 0 ]; then
    S=$(date +%s)
    # SWEEP_DIR inside the working tree (say docs/perf/x4-sweep) lets a later call, whose
    # copy of the tree carries the earlier results, append to the same tables.
    sweep=${SWEEP_DIR:-$res/sweep}
    COLLS="$colls" ALGOS="${ALGOS:-}" EXTRA="-n 10 --repeats 5" timeout "$budget" tests/perf/gpu_sweep.sh "$build" "$sweep" "$np" >"$res/sweep.log" 2>&1
    echo "sweep rc=$? $(( $(date +%s) - S ))s"
    cat "$sweep/summary.txt"
    [ "$sweep" = "$res/sweep" ] || cp -r "$sweep" "$res/sweep"
fi
tar czf "$OUT/results.tgz" -C "$res" . && rm -rf "$res"
