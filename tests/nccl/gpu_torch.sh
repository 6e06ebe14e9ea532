#!/usr/bin/env bash
# GPU test of libccl_nccl under PyTorch (not part of make check: it needs GPUs and torch).
#
#   tests/nccl/gpu_torch.sh BUILD [NPROC]
#
# Runs tests/nccl/gpu_torch.py under torchrun, one process per GPU (NPROC, default every
# GPU, at least 2), with BUILD/libccl_nccl.so preloaded (LD_PRELOAD: torch's
# ProcessGroupNCCL then calls libccl_nccl's NCCL functions instead of its libnccl's):
#   1. colls, for CCL_NCCL_ROUTE=auto, ccl and nccl: every torch.distributed collective
#      (all_reduce sum/max/avg/premul_sum, all_gather, reduce_scatter, broadcast, reduce,
#      all_to_all, a batch_isend_irecv ring, send/recv, a subgroup, barrier) on
#      7 dtypes and 3 sizes, exact; the routing summary (CCL_NCCL_SUMMARY=1) must show
#      calls on libccl for auto and ccl, and none on it for nccl;
#   2. ddp: 5 DDP steps with libccl_nccl (auto) and with torch's own NCCL (no preload);
#      the parameters must agree (to 1e-5: the two may reduce in different orders), and
#      exactly with CCL_NCCL_ROUTE=nccl, where every call is NCCL's;
#   3. graph: two all-reduces captured in a CUDA graph after warm-up, replayed 3 times,
#      for auto and ccl;
#   4. watchdog: the last rank exits after the init; every other rank must fail (torch's
#      watchdog sees ncclCommGetAsyncError's error, or its own 30 s timeout, and aborts),
#      not hang: torchrun must end, non-zero, within WATCHDOG_LIMIT_S (150 s).
# Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" per test; exits 0 (like the CPU
# suites), so read the lines. PYTHON names the interpreter with torch (python3); ROUTES
# the routes of step 1 (default "auto ccl nccl"); MODES the steps to run (default
# "colls ddp graph watchdog"; ddp, graph and watchdog take
# about 3 minutes on 2 GPUs, colls a few more, compiling libccl's kernels on first use).
# Each torchrun is bounded (LIMIT_S, 600 s for colls, 150 s for the others), so the
# script ends unattended whatever hangs.
set -u
build=${1:?usage: tests/nccl/gpu_torch.sh BUILD [NPROC]}
cd "$(dirname "$0")/../.." || exit 1
build=$(cd "$build" && pwd)
so=$build/libccl_nccl.so
py=${PYTHON:-python3}
script=$PWD/tests/nccl/gpu_torch.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -e "$so" ]; then
    echo "FAIL nccl.gpu: $so not built"
    exit 0
fi
if ! gpus=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null); then
    echo "skip nccl.gpu: $py cannot import torch"
    exit 0
fi
nproc=${2:-$gpus}
if [ "$gpus" -lt 2 ] || [ "$nproc" -lt 2 ] || [ "$nproc" -gt "$gpus" ]; then
    echo "skip nccl.gpu: needs 2 GPUs or more ($gpus here, NPROC $nproc)"
    exit 0
fi
export CCL_TIMEOUT_MS=${CCL_TIMEOUT_MS:-60000} CCL_ALGORITHM_DIR=${CCL_ALGORITHM_DIR:-$PWD/algorithms}
port=$((29500 + RANDOM % 1000))
modes=" ${MODES:-colls ddp graph watchdog} "
echo "nccl.gpu: $nproc ranks, torch $("$py" -c 'import torch; v = torch.cuda.nccl.version(); print(torch.__version__, "nccl", ".".join(map(str, v)) if isinstance(v, tuple) else v)' 2>/dev/null), modes:$modes"


# torchrun_with PRELOAD ROUTE LOG ARGS...: one torchrun of gpu_torch.py; its exit status.
torchrun_with() {
    local preload=$1 route=$2 log=$3
    shift 3
    port=$((port + 1))
    env ${preload:+LD_PRELOAD="$preload"} ${route:+CCL_NCCL_ROUTE="$route"} CCL_NCCL_SUMMARY=1 \
        timeout -k 10 "${LIMIT_S:-150}" "$py" -m torch.distributed.run --standalone --nproc_per_node="$nproc" \
        --master_port="$port" "$script" "$@" >"$log" 2>&1
}

# Summary lines "ccl-nccl: rank R of N: routing summary: ... in all C ccl K nccl": the sum of C.
ccl_calls() {
    sed -n 's/.*routing summary:.* in all \([0-9]*\) ccl \([0-9]*\) nccl$/\1/p' "$1" | awk '{s += $1} END {print s + 0}'
}
summaries() {
    grep -c 'ccl-nccl: rank [0-9]* of [0-9]*.*routing summary' "$1"
}

# 1. every collective, each route
for route in ${ROUTES:-auto ccl nccl}; do
    [[ $modes == *" colls "* ]] || break
    log=$tmp/colls-$route.log
    LIMIT_S=${LIMIT_S:-600} torchrun_with "$so" "$route" "$log" colls
    rc=$?
    grep '^ok \|^FAIL ' "$log" | sed "s/^ok torch/ok nccl.gpu.$route.torch/; s/^FAIL torch/FAIL nccl.gpu.$route.torch/"
    n=$(summaries "$log") c=$(ccl_calls "$log")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "FAIL nccl.gpu.$route.colls: torchrun ran past its limit: $(grep -v '^ok ' "$log" | tail -5 | tr '\n' ' ' | cut -c1-800)"
    elif [ $rc -ne 0 ]; then
        echo "FAIL nccl.gpu.$route.colls: torchrun exit $rc: $(grep -v '^ok ' "$log" | tail -5 | tr '\n' ' ' | cut -c1-800)"
    elif [ "$n" -lt "$nproc" ]; then
        echo "FAIL nccl.gpu.$route.preloaded: $n routing summaries for $nproc ranks: libccl_nccl was not used"
    elif { [ "$route" = nccl ] && [ "$c" -ne 0 ]; } || { [ "$route" != nccl ] && [ "$c" -eq 0 ]; }; then
        echo "FAIL nccl.gpu.$route.summary: $c calls went to libccl: $(grep -m2 'routing summary' "$log")"
    else
        echo "ok nccl.gpu.$route.colls ($c calls on libccl, all ranks)"
    fi
done

# 2. DDP against plain NCCL
if [[ $modes == *" ddp "* ]]; then
for route in plain auto nccl; do
    [ $route = plain ] && pre="" r="" || pre=$so r=$route
    if torchrun_with "$pre" "$r" "$tmp/ddp-$route.log" ddp "$tmp/$route.pt"; then
        echo "ok nccl.gpu.ddp.$route (5 steps)"
    else
        echo "FAIL nccl.gpu.ddp.$route: $(tail -3 "$tmp/ddp-$route.log" | tr '\n' ' ' | cut -c1-800)"
    fi
done
cmp_out=$("$py" - "$tmp/plain.pt" "$tmp/auto.pt" "$tmp/nccl.pt" <<'EOF' 2>&1
import sys, torch
plain, auto, nccl = (torch.load(p) for p in sys.argv[1:4])
for k in plain:
    if not torch.allclose(plain[k], auto[k], rtol=1e-5, atol=1e-6):
        print(f"auto: {k} differs by {(plain[k] - auto[k]).abs().max().item()}")
    if not torch.equal(plain[k], nccl[k]):
        print(f"nccl: {k} differs by {(plain[k] - nccl[k]).abs().max().item()}")
EOF
)
[ -z "$cmp_out" ] && echo "ok nccl.gpu.ddp.matches-plain-nccl" ||
    echo "FAIL nccl.gpu.ddp.matches-plain-nccl: $(tail -5 <<<"$cmp_out" | tr '\n' ' ' | cut -c1-800)"
fi

# 3. CUDA graphs
for route in auto ccl; do
    [[ $modes == *" graph "* ]] || break
    torchrun_with "$so" "$route" "$tmp/graph-$route.log" graph
    rc=$?
    grep '^ok \|^FAIL ' "$tmp/graph-$route.log" | sed "s/^ok torch/ok nccl.gpu.$route.torch/; s/^FAIL torch/FAIL nccl.gpu.$route.torch/"
    [ $rc -eq 0 ] || echo "FAIL nccl.gpu.$route.graph: torchrun exit $rc: $(tail -5 "$tmp/graph-$route.log" | tr '\n' ' ' | cut -c1-800)"
done

# 4. a dead rank: the others must fail, not hang
[[ $modes == *" watchdog "* ]] || exit 0
limit=${WATCHDOG_LIMIT_S:-150}
start=$(date +%s)
# torch's timeout and libccl's 30 s each; no flight-recorder dump on the timeout (it
# would wait for it), torch's own abort and teardown otherwise as configured by default.
export WATCHDOG_TIMEOUT_S=30 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_DUMP_ON_TIMEOUT=0 CCL_TIMEOUT_MS=30000
LIMIT_S=$limit torchrun_with "$so" auto "$tmp/watchdog.log" watchdog
rc=$?
took=$(($(date +%s) - start))
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL nccl.gpu.watchdog: the job hung past $limit s with a dead rank: $(tail -5 "$tmp/watchdog.log" | tr '\n' ' ')"
elif [ $rc -eq 0 ] || grep -q '^FAIL' "$tmp/watchdog.log"; then
    echo "FAIL nccl.gpu.watchdog: exit $rc: $(grep -m3 'FAIL\|Error' "$tmp/watchdog.log" | tr '\n' ' ')"
else
    echo "ok nccl.gpu.watchdog (the job ended, exit $rc, after ${took} s: $(grep -m1 -o 'ncclRemoteError\|ncclInvalidUsage\|NCCL error[^.]*\|Watchdog caught[^.]*\|failed after [0-9.]* s' "$tmp/watchdog.log"))"
fi
exit 0
