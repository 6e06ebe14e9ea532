#!/usr/bin/env bash
# GPU tests (make check-gpu): every shipped algorithm on N = 2 and 4 ranks, every output
# element checked (tests/gpu/gpu_test.c; allgatherv and alltoallv with uneven, zero and
# disagreeing counts, every gap between segments checked too). One process drives all ranks (threads mode),
# on however many GPUs the machine has: ranks beyond the GPU count share GPUs, so one GPU
# is enough. One process per GPU (mpirun) where the machine has N GPUs; two processes on
# one GPU must be refused at once. Reducing algorithms of allreduce also run every op and
# dtype (--full). Calls larger than a small heap, in pieces (--pieces). Registered memory
# (tests/gpu/register_gpu.c) with 2 GPUs or more, one process and one process per GPU.
# Ordinary receive buffers that a sender in another process writes directly
# (tests/gpu/p2p_ipc_gpu.c), one process per GPU.
# A peer process killed with 2 GPUs
# (tests/gpu/dead_peer_gpu.c). Then the examples and `cclc run` on the GPU backend (with 4
# GPUs, a grid too large for its barrier of all blocks refused at the call).
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
# The library the tests name is this tree's, wherever BUILD is (a build carried to a GPU
# machine has none beside its executables).
export CCL_ALGORITHM_DIR=${CCL_ALGORITHM_DIR:-$PWD/algorithms}
# GPU_TEST_NS="2 4" picks the rank counts. GPU_TEST_PARTS picks what runs of "threads" (one
# process per N), "procs" (one process per GPU per N) and "rest" (everything after them):
# on a cold NVRTC cache the whole takes longer than one call on a lent machine, so a
# session can run it in two calls (threads, then "procs rest") and pass both.
ns=${GPU_TEST_NS:-2 4}
parts=" ${GPU_TEST_PARTS:-threads procs rest} "
has() { [[ $parts == *" $1 "* ]]; }
bin=$build/tests/gpu/gpu_test
[ -x "$bin" ] || { echo "FAIL gpu: $bin not built"; exit 1; }
algs=("$@")
# (Programs for several nodes run on the CPU backend only so far: docs/multinode.md.)
[ ${#algs[@]} -eq 0 ] && algs=($(grep -L '^nodes ' algorithms/*/*.ccl))
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
    shared=""
    [ "$n" -gt "$ngpu" ] && shared=" ($n ranks on $ngpu GPU(s): ranks share GPUs)"
    if has threads; then
        echo "== gpu N=$n, one process$shared"
        start=$(date +%s)
        "$bin" --ranks "$n" "${algs[@]}" 2>&1 | tee -a "$log"
        [ ${#full[@]} -gt 0 ] && "$bin" --ranks "$n" --full "${full[@]}" 2>&1 | tee -a "$log"
        # Two chunks per segment (the shipped v programs have one).
        "$bin" --ranks "$n" tests/cuda/alltoallv_k2.ccl 2>&1 | tee -a "$log"
        # Simple programs forced onto LL lines, and Simple and LL ones onto LL128 lines
        # (tuning choices the runtime offers).
        CCL_GPU_PROTOCOL=ll "$bin" --ranks "$n" algorithms/allreduce/ring.ccl algorithms/allreduce/twoshot.ccl \
            algorithms/allgather/ring.ccl algorithms/reduce_scatter/ring.ccl algorithms/allgatherv/ring.ccl \
            algorithms/alltoallv/pairwise.ccl 2>&1 | tee -a "$log"
        CCL_GPU_PROTOCOL=ll128 "$bin" --ranks "$n" algorithms/allreduce/ring.ccl algorithms/allreduce/twoshot.ccl \
            algorithms/allreduce/allpairs.ccl algorithms/allgather/direct_ll.ccl algorithms/reduce_scatter/ring.ccl \
            algorithms/alltoall/direct_ll.ccl algorithms/broadcast/direct_ll.ccl algorithms/reduce/direct_ll.ccl \
            algorithms/allgatherv/direct_ll.ccl 2>&1 | tee -a "$log"
        CCL_GPU_PROTOCOL=ll128 "$bin" --ranks "$n" --full algorithms/allreduce/allpairs.ccl 2>&1 | tee -a "$log"
        # Calls larger than a 32 MiB heap, in pieces (ordinary and symmetric buffers, a graph).
        "$bin" --ranks "$n" --pieces "${algs[@]}" 2>&1 | tee -a "$log"
        echo "   ($(( $(date +%s) - start ))s)"
    fi
    if ! has procs; then
        :
    elif [ "$n" -gt "$ngpu" ]; then
        echo "   (process mode: N=$n needs $n GPUs, this machine has $ngpu)"
    elif command -v mpirun >/dev/null; then
        echo "== gpu N=$n, one process per GPU (mpirun)"
        start=$(date +%s)
        xs=(-x NCCL_NVLS_ENABLE -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR)
        "${mpi[@]}" "$n" "${mpiflags[@]}" "${xs[@]}" "$bin" --procs "${algs[@]}" 2>&1 | tee -a "$log"
        "${mpi[@]}" "$n" "${mpiflags[@]}" "${xs[@]}" "$bin" --procs --pieces "${algs[@]}" 2>&1 | tee -a "$log"
        echo "   ($(( $(date +%s) - start ))s)"
    else
        echo "   (no mpirun: process mode skipped)"
    fi
done
# What the parts asked for ran: the summary (passed only where something ran and passed).
. tests/summary.sh
summary() { ccl_test_summary "$log" "gpu: "; }
has rest || { summary; exit; }
if command -v mpirun >/dev/null; then
    echo "== gpu: two processes on one GPU are refused at once"
    "${mpi[@]}" 2 "${mpiflags[@]}" "$bin" --shared-procs 2>&1 | tee -a "$log"
fi
echo "== gpu: mismatched calls, ccl_comm_abort, first calls inside a stream capture"
"$bin" --control-tests 2>&1 | tee -a "$log"
if command -v mpirun >/dev/null && [ "$ngpu" -ge 2 ]; then
    echo "== gpu: every class of mismatched call, one process per GPU (2 GPUs)"
    "${mpi[@]}" 2 "${mpiflags[@]}" -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR "$bin" --mismatch-procs 2>&1 | tee -a "$log"
fi
echo "== gpu: LL128 lines alone (tests/cuda/ll128_lines.cu: aligned and misaligned, 32 and 512 threads)"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$nvcc" ]; then
    echo "   (skipped: no nvcc to build it)"
elif "$nvcc" -arch=sm_90 -Icompiler/cuda -o "$log.ll128" tests/cuda/ll128_lines.cu >"$log.nvcc" 2>&1; then
    "$log.ll128" 2>&1 | tee -a "$log"
else
    echo "FAIL gpu/ll128-lines: $nvcc could not build tests/cuda/ll128_lines.cu: $(head -5 "$log.nvcc")" | tee -a "$log"
fi
rm -f "$log.ll128" "$log.nvcc"
echo "== gpu: copies alone (tests/cuda/xfer_copy.cu: every source and destination offset mod 16)"
for shifted in 4 2 ""; do
    if [ ! -x "$nvcc" ]; then
        echo "   (skipped: no nvcc to build it)"
        break
    elif "$nvcc" -arch=sm_90 -Icompiler/cuda ${shifted:+-DCCL_SHIFTED_COPIES=$shifted} -o "$log.xfer" \
        tests/cuda/xfer_copy.cu >"$log.nvcc" 2>&1; then
        "$log.xfer" "${shifted:-no} shifted copies" 2>&1 | tee -a "$log"
    else
        echo "FAIL gpu/xfer-copy: $nvcc could not build tests/cuda/xfer_copy.cu: $(head -5 "$log.nvcc")" | tee -a "$log"
    fi
done
rm -f "$log.xfer" "$log.nvcc"
echo "== gpu: point-to-point groups (tests/gpu/p2p_gpu.c)"
for n in $ns; do "$build/tests/gpu/p2p_gpu" "$n" 2>&1 | tee -a "$log"; done
echo "== gpu: ordinary receive buffers written by another process (tests/gpu/p2p_ipc_gpu.c, 2 GPUs or more)"
if command -v mpirun >/dev/null && [ "$ngpu" -ge 2 ]; then
    for n in $ns; do
        [ "$n" -le "$ngpu" ] && "${mpi[@]}" "$n" "${mpiflags[@]}" -x CCL_CACHE_DIR -x CCL_ALGORITHM_DIR \
            "$build/tests/gpu/p2p_ipc_gpu" 2>&1 | tee -a "$log"
    done
else
    echo "   (skipped: needs mpirun and 2 GPUs, this machine has $ngpu)"
fi
echo "== gpu: registered memory (tests/gpu/register_gpu.c: threads and processes, 2 GPUs or more)"
if [ "$ngpu" -ge 2 ]; then
    rns="2"
    [ "$ngpu" -gt 2 ] && rns="2 $(( ngpu < 4 ? ngpu : 4 ))"
    for rn in $rns; do
        "$build/tests/gpu/register_gpu" --threads "$rn" 2>&1 | tee -a "$log"
        "$build/tests/gpu/register_gpu" --procs "$rn" 2>&1 | tee -a "$log"
    done
else
    echo "   (skipped: needs 2 GPUs, this machine has $ngpu)"
fi
echo "== gpu: a dead peer times out with a useful message"
"$bin" --timeout-test algorithms/allreduce/ring.ccl algorithms/allreduce/allpairs.ccl 2>&1 | tee -a "$log"
# One process per GPU, forked (mpirun would end the job itself): a killed peer stops the
# survivor's waiting kernels and idle comm within a second or two, not at the timeout.
echo "== gpu: a peer process killed (tests/gpu/dead_peer_gpu.c, 2 GPUs)"
if [ "$ngpu" -ge 2 ]; then
    timeout 600 "$build/tests/gpu/dead_peer_gpu" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || grep -q '^FAIL gpu/dead-peer' "$log" || echo "FAIL gpu/dead-peer: exit $rc" | tee -a "$log"
else
    echo "   (skipped: needs 2 GPUs, this machine has $ngpu)"
fi

# A command that must exit 0 and print `want`: "ok NAME" or "FAIL NAME: its output".
expect() {
    local name=$1 want=$2 out
    shift 2
    if out=$("$@" 2>&1) && grep -q "$want" <<<"$out"; then
        echo "ok gpu/$name"
    else
        echo "FAIL gpu/$name: $(tr '\n' ' ' <<<"$out" | cut -c1-600)"
    fi
}
echo "== gpu: the examples and cclc run on the GPU backend"
{
    for n in 2 4; do
        expect "example/allreduce_threads/N$n" "(GPU backend)" "$build/examples/allreduce_threads" "$n"
        expect "cclc-run/allreduce-ring/N$n" ": ok" "$build/cclc" run algorithms/allreduce/ring.ccl --ranks "$n" \
            --backend gpu --count 1000003 --dtype bf16 --iters 3
        expect "cclc-run/alltoall-direct_ll/N$n/back-to-back" ": ok" "$build/cclc" run \
            algorithms/alltoall/direct_ll.ccl --ranks "$n" --backend gpu --count 4099 --back-to-back
        # v-collectives: counts from the seed, new every call (a quarter of them 0).
        for a in allgatherv/ring allgatherv/direct allgatherv/direct_ll alltoallv/pairwise alltoallv/direct \
            alltoallv/direct_ll; do
            expect "cclc-run/${a/\//-}/N$n" ": ok" "$build/cclc" run "algorithms/$a.ccl" --ranks "$n" --backend gpu \
                --count 100000 --dtype bf16 --iters 5
        done
    done
    # One rank: every collective is the driver's copy (nothing in place), eager and
    # captured in a graph, every output element checked.
    for c in allreduce allgather reduce_scatter alltoall broadcast reduce; do
        for g in "" --graph; do
            expect "one-rank/$c${g:+/graph}" "# wrong elements: 0" "$build/ccl-perf" --ranks 1 -c "$c" -d bf16 \
                -b 1K -e 4M -f 64 -n 3 -w 1 --check $g
        done
    done
    # LL128 lines: counts around a line's 60 bf16 elements and a part's 120, split
    # between instances; back-to-back calls, which reuse the same lines.
    for inst in 1 3; do
        for count in 1 59 61 121 4099 1000003; do
            for a in allreduce/allpairs allreduce/ring alltoall/direct_ll; do
                expect "cclc-run/${a/\//-}/N4/ll128/i$inst/count$count" ": ok" env CCL_GPU_PROTOCOL=ll128 \
                    CCL_GPU_INSTANCES=$inst "$build/cclc" run "algorithms/$a.ccl" --ranks 4 --backend gpu \
                    --count "$count" --dtype bf16 --back-to-back
            done
        done
    done
    # A program whose blocks meet at a barrier of all of a rank's blocks needs its grid
    # resident at once: with one rank per GPU a grid larger than 512 / threads blocks a
    # SM is refused at the call, nothing launched (gpu/backend.c, gpu_check_barrier_grid),
    # instead of waiting at the barrier until the timeout. allreduce/hybrid at N = 4 has
    # 6 such blocks: 64 instances are 384 blocks of 512 threads, more than any GPU's SMs.
    # Needs 4 GPUs: at N = 2 the shipped programs with such a barrier have at most 2
    # blocks, 128 with 64 instances, which fit an H100's or H200's 132 SMs; and with
    # fewer GPUs than ranks the ranks share GPUs, which gpu_fit_threads judges instead.
    if [ "$ngpu" -ge 4 ]; then
        expect "cclc-run/allreduce-hybrid/N4/i64/barrier-grid-refused" \
            "384 thread blocks per rank (64 instances) of 512 threads that meet at a barrier of all of them" \
            sh -c "CCL_GPU_INSTANCES=64 '$build/cclc' run algorithms/allreduce/hybrid.ccl --ranks 4 --backend gpu \
                --count 1000003 --dtype bf16 --iters 1; true"
        for inst in "" 16; do
            expect "cclc-run/allreduce-hybrid/N4${inst:+/i$inst}" ": ok" env ${inst:+CCL_GPU_INSTANCES=$inst} \
                "$build/cclc" run algorithms/allreduce/hybrid.ccl --ranks 4 --backend gpu --count 1000003 --dtype bf16 \
                --iters 3
        done
    else
        echo "   (allreduce/hybrid's barrier grid refusal skipped: needs 4 GPUs, one a rank; this machine has $ngpu)"
    fi
    expect "cclc-run/unknown-protocol" "CCL_GPU_PROTOCOL=ll129: expected simple, ll or ll128" \
        sh -c "CCL_GPU_PROTOCOL=ll129 '$build/cclc' run algorithms/allreduce/allpairs.ccl --ranks 2 --backend gpu; true"
    expect example/custom_algorithm/N4 "every element right" "$build/examples/custom_algorithm" examples/star.ccl 4
    expect "cclc-run/allgatherv-ring/N4/counts" "counts=3,0,100001,1 iters=3 out-of-place: ok" "$build/cclc" run \
        algorithms/allgatherv/ring.ccl --ranks 4 --backend gpu --counts 3,0,100001,1 --iters 3
    expect "cclc-run/alltoallv-pairwise/N2/matrix" ": ok" "$build/cclc" run algorithms/alltoallv/pairwise.ccl \
        --ranks 2 --backend gpu --counts-matrix 3,0,0,5 --back-to-back
    # Segments at odd elements, split over instances (ccl_xfer's shifted copies).
    for inst in 1 5; do
        expect "cclc-run/alltoallv-direct/N4/i$inst/odd" ": ok" env CCL_GPU_INSTANCES=$inst "$build/cclc" run \
            algorithms/alltoallv/direct.ccl --ranks 4 --backend gpu --count 300001 --dtype bf16 --iters 4 --back-to-back
        expect "cclc-run/allgatherv-direct/N4/i$inst/counts" ": ok" env CCL_GPU_INSTANCES=$inst "$build/cclc" run \
            algorithms/allgatherv/direct.ccl --ranks 4 --backend gpu --counts 3,0,100001,77 --dtype u8 --iters 3
    done
    if [ -x "$build/examples/allreduce_mpi" ] && command -v mpirun >/dev/null; then
        expect "example/allreduce_mpi/N$ngpu" "every element right" "${mpi[@]}" "$ngpu" "${mpiflags[@]}" \
            "$build/examples/allreduce_mpi"
    fi
} 2>&1 | tee -a "$log"
# The Python package's GPU tests (torch CUDA tensors, graph capture, custom ops, symmetric
# tensors, torchrun): with the interpreter that has torch ($CCL_PYTHON, else python3);
# pytest from it or from BUILD/pydeps (tests/python/run.sh).
echo "== gpu: the Python package (tests/python, -m gpu)"
py=${CCL_PYTHON:-python3}
if "$py" -c 'import torch' 2>/dev/null; then
    CCL_PYTHON=$py tests/python/run.sh "$build" gpu 2>&1 | tee -a "$log"
    # Registration from torch (tests/torch/register_torch.py): expandable segments and
    # ccl.torch.mem_pool, a thread per GPU and a process per GPU.
    if [ "$ngpu" -ge 2 ]; then
        echo "== gpu: torch tensors registered and pool tensors (tests/torch/register_torch.py)"
        bl=$build
        case $bl in /*) ;; *) bl=$PWD/$bl ;; esac
        for how in "--threads 2" "torchrun"; do
            if [ "$how" = torchrun ]; then
                cmd=("$py" -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/register_torch.py)
            else
                cmd=("$py" tests/torch/register_torch.py --threads 2)
            fi
            PYTHONPATH=$PWD/python/src${PYTHONPATH:+:$PYTHONPATH} CCL_LIBRARY=$bl/libccl.so timeout 600 "${cmd[@]}" \
                2>&1 | tee -a "$log" | grep -E '^(ok|FAIL|skipped)'
            rc=${PIPESTATUS[0]}
            [ "$rc" -eq 0 ] || echo "FAIL gpu/torch-register ($how): exit $rc" | tee -a "$log"
        done
    fi
else
    echo "   (skipped: $py has no torch; set CCL_PYTHON to an interpreter with torch)"
fi
summary
