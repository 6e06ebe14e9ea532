#!/usr/bin/env bash
# Runtime suite: every shipped algorithm run end to end on the CPU backend by `cclc run`
# (threads mode and under mpirun), the C tests of tests/runtime/*.c, and the examples.
#
#   tests/runtime/run.sh BUILD
#
# The matrix covers every class without multiplying every dimension (2 cores, a few
# minutes):
#   A. every algorithm x N in {2,3,4,5,8} (where admitted) x count {0,1,7,1001} x
#      in/out-of-place, dtype and op rotating through all of them;
#   B. every dtype x every op on every reducing algorithm (N=4), and at N=5 on one
#      algorithm per reducing collective;
#   C. count 1000003 for every algorithm at N=4 and at N=8 or 3, and ring all-reduce at N=8;
#   D. host (staged) buffers for every algorithm, in and out of place;
#   K. host buffers larger than a 3 MiB heap: every algorithm runs in pieces, in and
#      out of place (and four under mpirun); heap buffers in pieces (reduce_scatter);
#   E. mpirun -np 4 (one process per rank, shm heaps): every algorithm admitting 4;
#   F. the C tests (API misuse, timeouts, dead peers, dtype rounding, notes between ranks)
#      and examples;
#   G. tests/runtime/*.ccl: instances x slices x several blocks with barriers;
#   J. faults: a rank killed mid-run, a rank that never joins (cclc run, processes);
#   I. back to back: every algorithm (and a copy with `instances 4`) enqueues 48 calls
#      with no synchronization in between, each with its own data and size (cclc run
#      --back-to-back), so a rank's next call overlaps its peers' current one and any
#      cross-call race (scratch, staging, outputs overwritten too early) shows.
#   V. allgatherv and alltoallv (algorithms/ and tests/runtime/v/): N in {2,3,4,5,8} x
#      seeded counts (uneven, a quarter zero), explicit counts with zeros, all zero,
#      large segments, host buffers, 48 calls back to back with counts changing every
#      call, 4 instances, and under mpirun; the C test vcoll (section F) adds
#      mismatched counts and argument errors.
# Prints "ok NAME" or "FAIL NAME: why" per test.
set -u
build=${1:?usage: tests/runtime/run.sh BUILD}
cd "$(dirname "$0")/../.."
cclc=$build/cclc
export CCL_ALGORITHM_DIR=$PWD/algorithms
export CCL_TIMEOUT_MS=${CCL_TIMEOUT_MS:-20000}

if [ ! -x "$cclc" ]; then
    echo "FAIL runtime: $cclc not built"
    exit 0
fi

dtypes=(f32 f64 f16 bf16 i32 i64 u8 fp8_e4m3 fp8_e5m2 i8 u32 u64)
ops=(sum prod min max avg)
# The fixed-size algorithms; allgatherv and alltoallv (no in-place form, counts per
# rank) have section V of their own.
# Programs for several nodes (a `nodes` line) run under mpirun in tests/multinode.
node_algs=$(grep -l '^nodes ' algorithms/*/*.ccl)
algs=($(ls algorithms/*/*.ccl | grep -v -e /allgatherv/ -e /alltoallv/ | grep -vxF "$node_algs"))
valgs=(algorithms/allgatherv/*.ccl algorithms/alltoallv/*.ccl)
declare -A ran            # algorithm -> how many runs were admitted

# run_case NAME ARGS...: one `cclc run`; exit 2 with "does not admit" is not applicable
# (returns 3, prints nothing).
run_case() {
    local name=$1
    shift
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && grep -q "does not admit" <<<"$out"; then
        return 3
    fi
    if [ $rc -eq 0 ]; then
        echo "ok $name"
        ran[$f]=$(( ${ran[$f]:-0} + 1 ))
    else
        echo "FAIL $name: exit $rc: $(head -c 600 <<<"$out" | tr '\n' ' ')"
    fi
}

# A. algorithms x N x counts x in/out-of-place, dtype/op rotating.
i=0
for f in "${algs[@]}"; do
    for n in 2 3 4 5 8; do
        for c in 0 1 7 1001; do
            for ip in "" --inplace; do
                dt=${dtypes[$(( i % ${#dtypes[@]} ))]}
                op=${ops[$(( (i / ${#dtypes[@]}) % 5 ))]}
                i=$((i + 1))
                run_case "run $f N=$n count=$c $dt $op ${ip:-out-of-place}" \
                    "$cclc" run "$f" --ranks $n --count $c --dtype $dt --op $op --iters 2 --seed $i $ip
            done
        done
    done
    if [ "${ran[$f]:-0}" -eq 0 ]; then
        echo "FAIL run $f: admits none of N = 2 3 4 5 8"
    fi
done

# B. every dtype x op on every reducing algorithm (N=4, root 2), and at N=5 on one
#    algorithm per reducing collective.
for f in algorithms/allreduce/*.ccl algorithms/reduce_scatter/*.ccl algorithms/reduce/*.ccl; do
    grep -qxF "$f" <<<"$node_algs" && continue
    for dt in "${dtypes[@]}"; do
        for op in "${ops[@]}"; do
            run_case "run $f N=4 count=1003 $dt $op" "$cclc" run "$f" --ranks 4 --count 1003 --dtype $dt --op $op --iters 2 --root 2
        done
    done
done
for f in algorithms/allreduce/ring.ccl algorithms/reduce_scatter/ring.ccl algorithms/reduce/tree.ccl; do
    [ -f "$f" ] || { echo "FAIL dtype-op matrix: $f missing"; continue; }
    for dt in "${dtypes[@]}"; do
        for op in "${ops[@]}"; do
            run_case "run $f N=5 count=1003 $dt $op" "$cclc" run "$f" --ranks 5 --count 1003 --dtype $dt --op $op --iters 2 --root 2
        done
    done
done

# C. a million elements (plus a tail): every algorithm once, dtypes alternating.
i=0
for f in "${algs[@]}"; do
    dt=$([ $((i % 2)) -eq 0 ] && echo bf16 || echo f32)
    i=$((i + 1))
    run_case "run $f N=4 count=1000003 $dt" "$cclc" run "$f" --ranks 4 --count 1000003 --dtype $dt --op sum --iters 2
done
run_case "run ring N=8 count=1000003 f16 avg in-place" "$cclc" run algorithms/allreduce/ring.ccl --ranks 8 \
    --count 1000003 --dtype f16 --op avg --iters 2 --inplace
# ... and at N=8 (one-unit collectives) or N=3 (N-unit ones, whose buffers are N times larger).
for f in "${algs[@]}"; do
    case $f in
    */allreduce/* | */broadcast/* | */reduce/*) n=8 ;;
    *) n=3 ;;
    esac
    run_case "run $f N=$n count=1000003 i32" "$cclc" run "$f" --ranks $n --count 1000003 --dtype i32 --op max --iters 1
done

# D. host buffers (staged through the heap or privately), in and out of place.
for f in "${algs[@]}"; do
    for ip in "" --inplace; do
        run_case "run $f N=3 host buffers ${ip:-out-of-place}" "$cclc" run "$f" --ranks 3 --count 777 --dtype i32 \
            --op max --iters 2 --host-buffers $ip
        run_case "run $f N=4 host buffers ${ip:-out-of-place}" "$cclc" run "$f" --ranks 4 --count 777 --dtype i32 \
            --op max --iters 2 --host-buffers $ip
    done
done

# K. pieces: host buffers larger than a 3 MiB heap (each rank's 2.4 MB a unit, 9.6 MB
#    for the N-unit buffers), whose staging and scratch do not fit, so every call runs in
#    pieces (runtime/src/call.c, "Pieces"), in and out of place; under mpirun in
#    section E.
for f in "${algs[@]}"; do
    for ip in "" --inplace; do
        run_case "run $f N=4 pieces (3 MiB heap) ${ip:-out-of-place}" env CCL_HEAP_BYTES=3M "$cclc" run "$f" \
            --ranks 4 --count 600001 --dtype i32 --op sum --iters 2 --host-buffers $ip
    done
done
# ... and back to back, one algorithm per collective: calls of sizes up to 300001, some
# whole and some in pieces, the staging regions growing between them.
for f in algorithms/allreduce/ring.ccl algorithms/allgather/ring.ccl algorithms/reduce_scatter/ring.ccl \
    algorithms/alltoall/pairwise.ccl algorithms/broadcast/tree.ccl algorithms/reduce/tree.ccl; do
    run_case "back-to-back $f N=4 pieces (3 MiB heap)" env CCL_HEAP_BYTES=3M "$cclc" run "$f" --ranks 4 \
        --back-to-back --iters 24 --count 300001 --root 1 --host-buffers --dtype i32 --op max
    run_case "back-to-back $f N=4 pieces (3 MiB heap) in place" env CCL_HEAP_BYTES=3M "$cclc" run "$f" --ranks 4 \
        --back-to-back --iters 16 --count 300001 --root 1 --host-buffers --dtype i32 --op max --inplace
done
# ... and with room in the heap for a second staging out (32 MiB, regions of 1 MiB): the
# pieces take turns at the two (runtime/src/call.c, "Pieces"; the GPU copies one out
# beside the next), which the log says; once back to back.
# log_case NAME PATTERN MISSING CMD...: CMD, with CCL_DEBUG=info, exits 0 and its log has
# a line matching PATTERN; else FAIL saying "exit RC, or MISSING".
log_case() {
    local name=$1 pattern=$2 missing=$3 out rc
    shift 3
    out=$(env CCL_DEBUG=info "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && grep -q "$pattern" <<<"$out"; then
        echo "ok $name"
    else
        echo "FAIL $name: exit $rc, or $missing: $(grep -v ' INFO ' <<<"$out" | head -c 600 | tr '\n' ' ')"
    fi
}
turns_case() {
    local name="$1 N=4 pieces taking turns at two staged outs $2"
    shift 2
    log_case "$name" "second staging out region" "no second staging out" env CCL_HEAP_BYTES=32M CCL_REGION_BYTES=1M "$@"
}
for f in algorithms/allgather/direct.ccl algorithms/alltoall/direct.ccl algorithms/allreduce/ring.ccl \
    algorithms/broadcast/chain.ccl; do
    for ip in "" --inplace; do
        turns_case "run $f" "${ip:-out-of-place}" "$cclc" run "$f" --ranks 4 --count 600001 --dtype i32 --op sum \
            --iters 3 --root 1 --host-buffers $ip
    done
done
turns_case "back-to-back algorithms/allgather/ring.ccl" "" "$cclc" run algorithms/allgather/ring.ccl --ranks 4 \
    --back-to-back --iters 12 --count 300001 --host-buffers --dtype i32
# ... and on heap buffers whose scratch takes more than the regions' 1 MiB: reduce_scatter's
# in, strided in the user's buffer, read there in place by each piece (no staging).
for f in algorithms/reduce_scatter/ring.ccl algorithms/reduce_scatter/direct.ccl; do
    for ip in "" --inplace; do
        log_case "run $f N=4 pieces on heap buffers ${ip:-out-of-place}" "runs in [0-9]* pieces" "not in pieces" \
            env CCL_HEAP_BYTES=64M CCL_REGION_BYTES=1M "$cclc" run "$f" --ranks 4 --count 600001 --dtype i32 --op sum \
            --iters 2 $ip
    done
done

# E. one process per rank under mpirun.
mpirun_cmd=()
# Containers often forbid the cross-memory attach Open MPI's shared-memory transport
# uses for large messages (only the MPI example sends any); plain copies work anywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
if command -v mpirun >/dev/null; then
    mpirun_cmd=(mpirun -np 4 --oversubscribe)
    [ "$(id -u)" -eq 0 ] && mpirun_cmd+=(--allow-run-as-root)
    i=0
    for f in "${algs[@]}"; do
        dt=${dtypes[$(( i % ${#dtypes[@]} ))]}
        ip=$([ $((i % 3)) -eq 1 ] && echo --inplace)
        hb=$([ $((i % 4)) -eq 2 ] && echo --host-buffers)
        i=$((i + 1))
        run_case "mpirun -np 4 $f $dt ${ip:-out-of-place} ${hb:-symmetric}" timeout 120 "${mpirun_cmd[@]}" \
            "$cclc" run "$f" --count 10007 --dtype $dt --op sum --iters 2 $ip $hb
    done
    f=algorithms/allreduce/ring.ccl
    run_case "mpirun -np 4 ring bf16 avg" timeout 120 "${mpirun_cmd[@]}" "$cclc" run $f --count 100003 --dtype bf16 --op avg --iters 3
    for f in algorithms/allgather/ring.ccl algorithms/reduce_scatter/direct.ccl algorithms/alltoall/pairwise.ccl \
        algorithms/allreduce/allpairs.ccl; do
        for ip in "" --inplace; do
            run_case "mpirun -np 4 $f pieces (3 MiB heap) ${ip:-out-of-place}" timeout 120 env CCL_HEAP_BYTES=3M \
                "${mpirun_cmd[@]}" -x CCL_HEAP_BYTES "$cclc" run "$f" --count 600001 --dtype f32 --op sum --iters 2 \
                --host-buffers $ip
        done
    done
else
    echo "skip mpirun runs: mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)"
fi

# G. test programs that stress the layout rules: instances, slices, many blocks, barriers.
for f in tests/runtime/*.ccl; do
    for n in 2 3 5; do
        for c in 0 7 1001 100003; do
            for ip in "" --inplace; do
                run_case "run $f N=$n count=$c ${ip:-out-of-place}" "$cclc" run "$f" --ranks $n --count $c --dtype f16 \
                    --op sum --iters 3 $ip
            done
        done
    done
done

# I. back to back (see the header). N=4 and N=3 (N=8 where 3 is not admitted), 48 calls,
#    a count with a tail; then each algorithm with 4 instances per block at N=4; then
#    in place (16 calls, the most it allows), staged host buffers, and under mpirun.
b2b=(--back-to-back --iters 48 --count 1001 --root 1)
i4dir=$(mktemp -d)
for f in "${algs[@]}"; do
    run_case "back-to-back $f N=4" "$cclc" run "$f" --ranks 4 --dtype bf16 "${b2b[@]}"
    run_case "back-to-back $f N=3" "$cclc" run "$f" --ranks 3 --dtype i32 --op max "${b2b[@]}" ||
        run_case "back-to-back $f N=8" "$cclc" run "$f" --ranks 8 --dtype i32 --op max "${b2b[@]}"

    # The same program with 4 physical blocks per logical block (docs/internals.md).
    i4=$i4dir/$(basename "$(dirname "$f")")_$(basename "$f")
    sed -e '/^instances /d' -e 's/^protocol .*/&\ninstances 4/' "$f" >"$i4"
    run_case "back-to-back $f instances 4 N=4" "$cclc" run "$i4" --ranks 4 --dtype f32 "${b2b[@]}"
done
rm -rf "$i4dir"
for f in tests/runtime/*.ccl; do    # instances x slices x blocks with barriers
    run_case "back-to-back $f N=3" "$cclc" run "$f" --ranks 3 --count 100003 --dtype f16 --back-to-back --iters 48
done
for f in algorithms/allreduce/ring.ccl algorithms/allgather/ring.ccl algorithms/reduce_scatter/direct_ll.ccl; do
    run_case "back-to-back $f N=4 in-place" "$cclc" run "$f" --ranks 4 --back-to-back --iters 16 --count 1001 --inplace
    run_case "back-to-back $f N=4 host buffers" "$cclc" run "$f" --ranks 4 "${b2b[@]}" --host-buffers
done
# Many calls back to back, sizes changing every call: a rank publishes its next call's
# identity while a peer still compares the current one's (a ring of entries, each
# written sequence-last); an entry read torn would report a false "the ranks disagree".
for f in algorithms/broadcast/direct.ccl algorithms/allgather/ring.ccl; do
    bad=
    for seed in 1 2 3 4 5 6 7 8 9 10 11 12; do
        out=$("$cclc" run "$f" --ranks 4 --back-to-back --iters 1000 --count 1001 --root 1 --seed $seed 2>&1)
        grep -q ": ok," <<<"$out" || { bad=$out; break; }
    done
    [ -z "$bad" ] && echo "ok back-to-back $f N=4 1000 calls x 12" ||
        echo "FAIL back-to-back $f N=4 1000 calls (seed $seed): $(head -c 600 <<<"$bad" | tr '\n' ' ')"
done
if [ ${#mpirun_cmd[@]} -gt 0 ]; then
    for f in algorithms/allreduce/allpairs.ccl algorithms/alltoall/pairwise.ccl; do
        run_case "back-to-back mpirun -np 4 $f" timeout 120 "${mpirun_cmd[@]}" "$cclc" run "$f" "${b2b[@]}"
    done
fi

# H. cclc run's own contract: exit codes and the summary line.
expect_exit() {
    local name=$1 want=$2 pattern=$3
    shift 3
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -eq "$want" ] && grep -q -- "$pattern" <<<"$out"; then
        echo "ok cclc run: $name"
    else
        echo "FAIL cclc run: $name: exit $rc (want $want), output lacks '$pattern': $(head -c 400 <<<"$out" | tr '\n' ' ')"
    fi
}
# The bootstrap segment of process mode is made by rank 0 alone, exclusively, mode 0600;
# planted or foreign segments are refused, and a rank whose rank 0 never comes leaves none.
job=cclplanted$$
seg=/dev/shm/ccl-boot-$(id -u)-$job
as_rank() { env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK="$1" CCL_JOB_ID=$job "${@:2}"; }
touch "$seg" && chmod 666 "$seg"
expect_exit "a planted bootstrap segment is refused by rank 0" 1 "already exists" \
    as_rank 0 "$cclc" run algorithms/allreduce/ring.ccl --backend cpu --timeout-ms 300
rm -f "$seg"
if [ "$(id -u)" = 0 ]; then
    install -m 600 -o 65534 /dev/null "$seg"
    expect_exit "another user's bootstrap segment is refused" 1 "belongs to uid 65534" \
        as_rank 1 "$cclc" run algorithms/allreduce/ring.ccl --backend cpu --timeout-ms 300
    rm -f "$seg"
fi
expect_exit "a rank whose rank 0 never comes times out" 1 "rank 0 did not set up segment" \
    as_rank 1 "$cclc" run algorithms/allreduce/ring.ccl --backend cpu --timeout-ms 100
if [ -e "$seg" ]; then echo "FAIL cclc run: the late rank left $seg"; rm -f "$seg"; else echo "ok cclc run: a late rank leaves no segment"; fi

bad=$(mktemp --suffix=.ccl)
printf 'algorithm bad : allreduce\nranks N in 2..8\nfor r in 0..N on r tb 0 { copy out[0] <- in[0] }\n' >"$bad"
expect_exit "summary line" 0 "ring (allreduce) N=3 threads backend=cpu dtype=i64 op=min count=99 iters=2 in-place: ok" \
    "$cclc" run algorithms/allreduce/ring.ccl --ranks 3 --count 99 --dtype i64 --op min --iters 2 --inplace
expect_exit "unknown option" 2 "unknown option '--frobnicate'" "$cclc" run algorithms/allreduce/ring.ccl --ranks 2 --frobnicate
expect_exit "missing --ranks" 2 "--ranks N is required" "$cclc" run algorithms/allreduce/ring.ccl
expect_exit "bad dtype" 2 "--dtype f17: unknown dtype" "$cclc" run algorithms/allreduce/ring.ccl --ranks 2 --dtype f17
expect_exit "root not below ranks" 2 "--root 4 is not below --ranks 4" "$cclc" run algorithms/broadcast/tree.ccl --ranks 4 --root 4
expect_exit "N not admitted" 2 "does not admit this communicator's size N=3" "$cclc" run algorithms/allreduce/halving_doubling.ccl --ranks 3
expect_exit "program that does not prove" 1 "does not compile for N=2" "$cclc" run "$bad" --ranks 2
expect_exit "missing file" 2 "cannot read" "$cclc" run /nonexistent.ccl --ranks 2
expect_exit "back-to-back summary" 0 "N=3 threads backend=cpu dtype=f32 op=sum count=99 iters=5 out-of-place back-to-back: ok" \
    "$cclc" run algorithms/allreduce/ring.ccl --ranks 3 --count 99 --iters 5 --back-to-back
expect_exit "back-to-back in place, too many calls" 2 "at most 16 calls (--iters 17)" \
    "$cclc" run algorithms/allreduce/ring.ccl --ranks 2 --iters 17 --back-to-back --inplace
rm -f "$bad"

# J. faults in process mode (cclc run, one process per rank through the environment
#    bootstrap, no mpirun, which would kill the job itself): a rank killed mid-run makes
#    every survivor exit within about a second, naming it (its pid in the bootstrap
#    segment and the heaps); a rank that never joins is named once the timeout passes.
#    The figures go to docs/api.md's reliability section.
# fault_run N VICTIM MODE TIMEOUT_MS LIMIT_MS NEEDLE: MODE kill (SIGKILL 1.5 s in) or
# absent (never started); each survivor must exit non-zero within LIMIT_MS of the kill
# (or of the start) with NEEDLE in its output.
fault_run() {
    local n=$1 victim=$2 mode=$3 tmo=$4 limit=$5 needle=$6 dir pids=() r t0 bad=0 worst=0
    dir=$(mktemp -d)
    for ((r = 0; r < n; r++)); do
        if [ "$mode" = absent ] && [ $r -eq "$victim" ]; then pids+=(0); continue; fi
        OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n CCL_JOB_ID="fault$$_$mode" CCL_BACKEND=cpu \
            "$cclc" run algorithms/allreduce/ring.ccl --count 4096 --iters 1000000 --timeout-ms "$tmo" \
            >"$dir/out.$r" 2>&1 &
        pids+=($!)
    done
    t0=$(date +%s%N)
    if [ "$mode" = kill ]; then
        disown "${pids[$victim]}" # no "Killed" report from the shell
        sleep 1.5
        t0=$(date +%s%N)
        kill -9 "${pids[$victim]}"
    fi
    for ((r = 0; r < n; r++)); do
        [ "${pids[$r]}" = 0 ] || [ $r -eq "$victim" ] && continue
        local left=$(( limit + 5000 )) rc
        # Poll rather than wait: a survivor that hangs must not hang the suite.
        while kill -0 "${pids[$r]}" 2>/dev/null && [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt $left ]; do sleep 0.02; done
        local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        if kill -0 "${pids[$r]}" 2>/dev/null; then kill -9 "${pids[$r]}"; fi
        wait "${pids[$r]}"; rc=$?
        [ $ms -gt $worst ] && worst=$ms
        if [ $rc -eq 0 ] || [ $ms -gt "$limit" ] || ! grep -q "$needle" "$dir/out.$r"; then
            echo "FAIL fault $mode rank $victim of $n: survivor $r exit $rc after $ms ms (limit $limit): $(head -c 500 "$dir/out.$r" | tr '\n' ' ')"
            bad=1
        fi
    done
    [ $bad -eq 0 ] && echo "ok fault $mode rank $victim of $n: every survivor exits naming it, the last after $worst ms"
    rm -rf "$dir"
}
fault_run 4 2 kill 20000 3000 "rank 2 (pid [0-9]*) is gone"
fault_run 3 1 absent 1500 4000 "rank 1 never joined"

# V. allgatherv and alltoallv (see the header).
i=0
for f in "${valgs[@]}" tests/runtime/v/*.ccl; do
    case $f in *allgatherv* | */ring_slices.ccl) kind=gather ;; *) kind=toall ;; esac
    for n in 2 3 4 5 8; do
        dt=${dtypes[$(( i % ${#dtypes[@]} ))]}
        i=$((i + 1))
        run_case "run $f N=$n seeded counts $dt" "$cclc" run "$f" --ranks $n --count 1001 --dtype $dt --iters 3 --seed $i
        if [ $kind = gather ]; then flag=--counts; m=$n; else flag=--counts-matrix; m=$((n * n)); fi
        zeros=$(printf '0,%.0s' $(seq $m))
        run_case "run $f N=$n all-zero counts" "$cclc" run "$f" --ranks $n --iters 2 $flag "${zeros%,}"
    done
    if [ $kind = gather ]; then
        run_case "run $f N=4 counts 3,0,7,1" "$cclc" run "$f" --ranks 4 --counts 3,0,7,1 --dtype bf16
    else
        run_case "run $f N=3 counts-matrix with zeros" "$cclc" run "$f" --ranks 3 --dtype bf16 \
            --counts-matrix 3,0,7,0,0,0,1,1000,5
    fi
    run_case "run $f N=4 large segments" "$cclc" run "$f" --ranks 4 --count 1000003 --dtype f32 --iters 2
    run_case "run $f N=3 host buffers" "$cclc" run "$f" --ranks 3 --count 777 --dtype i32 --iters 2 --host-buffers
    run_case "back-to-back $f N=4" "$cclc" run "$f" --ranks 4 --count 1001 --dtype bf16 --back-to-back --iters 48
    run_case "back-to-back $f N=3 host buffers" "$cclc" run "$f" --ranks 3 --count 1001 --back-to-back --iters 48 \
        --host-buffers
    i4=$(mktemp --suffix=.ccl)
    sed -e '/^instances /d' -e 's/^ranks .*/&\ninstances 4/' "$f" >"$i4"
    run_case "back-to-back $f instances 4 N=4" "$cclc" run "$i4" --ranks 4 --count 1001 --back-to-back --iters 48
    rm -f "$i4"
    if [ ${#mpirun_cmd[@]} -gt 0 ]; then
        run_case "mpirun -np 4 $f" timeout 120 "${mpirun_cmd[@]}" "$cclc" run "$f" --count 10007 --iters 3
        run_case "mpirun -np 4 $f host buffers back-to-back" timeout 120 "${mpirun_cmd[@]}" "$cclc" run "$f" \
            --count 1001 --host-buffers --back-to-back --iters 16
    fi
done

# F. C tests and examples.
for t in "$build"/tests/runtime/*; do
    [ -x "$t" ] || continue
    out=$(timeout 300 "$t" 2>&1)
    rc=$?
    echo "$out" | grep -E '^(ok|FAIL) '
    if [ $rc -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
        echo "FAIL $(basename "$t"): exit $rc: $(tail -c 400 <<<"$out" | tr '\n' ' ')"
    fi
done

example() {
    local name=$1
    shift
    local out rc
    out=$(timeout 120 "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok example $name"
    else
        echo "FAIL example $name: exit $rc: $(tail -c 400 <<<"$out" | tr '\n' ' ')"
    fi
}
if [ -x "$build/examples/allreduce_threads" ]; then
    example allreduce_threads "$build/examples/allreduce_threads" 4
else
    echo "FAIL example allreduce_threads: not built"
fi
if [ -x "$build/examples/sparse_allreduce" ]; then
    example sparse_allreduce "$build/examples/sparse_allreduce" 3
else
    echo "FAIL example sparse_allreduce: not built"
fi
if [ -x "$build/examples/alltoallv_threads" ]; then
    example alltoallv_threads "$build/examples/alltoallv_threads" 4
else
    echo "FAIL example alltoallv_threads: not built"
fi
if [ -x "$build/examples/custom_algorithm" ]; then
    example custom_algorithm "$build/examples/custom_algorithm" examples/star.ccl 4
else
    echo "FAIL example custom_algorithm: not built"
fi
if [ -x "$build/examples/allreduce_mpi" ] && [ ${#mpirun_cmd[@]} -gt 0 ]; then
    # Open MPI's own allocations at exit are not ours to report (sanitizer builds).
    ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 example "allreduce_mpi (mpirun -np 4)" "${mpirun_cmd[@]}" \
        "$build/examples/allreduce_mpi"
elif [ ${#mpirun_cmd[@]} -gt 0 ]; then
    echo "FAIL example allreduce_mpi: not built (needs mpicc)"
fi
exit 0
