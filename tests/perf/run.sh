#!/usr/bin/env bash
# ccl-perf on the CPU backend: small sweeps of every collective with --check (sendrecv,
# alltoallv and allgatherv too: uneven and zero-size segments, proportional and Zipf
# counts, one rank, every dtype; i8, u32 and u64 in every collective with every op), the
# CSV,
# JSON and SVG outputs, every kind of buffers (--buffers symmetric, plain and registered:
# every collective checked, in place and out of place, threads and processes; registered
# memory's registrations made and released, and its refusal across processes), one process
# per rank under mpirun, the checker's own test (an
# injected wrong result must be counted exactly and fail the run), a refusal by the
# library (simulated: the row says so, the run goes on and exits 1), --compare nccl
# without a GPU (a clear note, no crash), and bad arguments (exact message, exit 2).
# Also compiles ccl-perf once more against cuda.h and nccl.h, where present, so the
# hand-written driver and NCCL prototypes are checked against the real ones; and builds
# tests/perf/unit/report_test.c, which checks NCCL's two modes (plain and symmetric
# windows) as far as that goes without a GPU: which mode a ratio is against, which modes
# run, why the symmetric one is absent (on stand-in libnccl builds), and the table, CSV,
# JSON and SVG made from given timings (goldens in tests/perf/unit; UPDATE_GOLDEN=1).
#
#   tests/perf/run.sh BUILD
set -u
build=${1:?usage: tests/perf/run.sh BUILD}
cd "$(dirname "$0")/../.."
perf=$build/ccl-perf
[ -x "$perf" ] || { echo "FAIL perf: $perf not built"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CCL_ALGORITHM_DIR=$PWD/algorithms
quick=(-n 3 -w 1 --backend cpu)

ok() { echo "ok perf $1"; }
fail() { echo "FAIL perf $1: $2"; }

# A sweep: exit 0, every size present (data rows), zero wrong elements.
sweep() {
    local name=$1 rows=$2
    shift 2
    local out=$tmp/$name.out
    "$perf" "$@" >"$out" 2>"$tmp/$name.err"
    local rc=$?
    local got
    got=$(grep -cv '^#' "$out")
    if [ $rc -ne 0 ]; then
        fail "$name" "exit $rc: $(head -c 400 "$tmp/$name.err")"
    elif [ "$got" -ne "$rows" ]; then
        fail "$name" "$got size rows, expected $rows"
    elif ! grep -q '^# wrong elements: 0$' "$out"; then
        fail "$name" "$(grep '^# wrong' "$out")"
    else
        ok "$name"
    fi
}

for c in allreduce allgather reduce_scatter alltoall broadcast reduce alltoallv allgatherv sendrecv; do
    sweep "sweep-$c-4" 7 -c "$c" -b 1K -e 64K --ranks 4 -d bf16 --check "${quick[@]}"
    sweep "sweep-$c-3" 3 -c "$c" -b 3K -e 48K -f 4 --ranks 3 -d f32 --check "${quick[@]}"
done
# alltoallv from one element per rank (most segments empty) to 256K, on 5 and 2 ranks;
# sendrecv to itself on one rank; both in every dtype (data movement: every bit checked).
sweep "alltoallv-tiny-5" 7 -c alltoallv -b 2 -e 512K -f 8 --ranks 5 -d bf16 --check "${quick[@]}"
sweep "alltoallv-2" 3 -c alltoallv -b 4 -e 64K -f 128 --ranks 2 --check "${quick[@]}"
sweep "sendrecv-1" 2 -c sendrecv -b 1K -e 2K --ranks 1 --check "${quick[@]}"
for d in f16 fp8_e4m3 u8 i64 f64; do
    sweep "alltoallv-$d" 2 -c alltoallv -b 1K -e 8K -f 8 --ranks 3 -d "$d" --check "${quick[@]}"
    sweep "allgatherv-$d" 2 -c allgatherv -b 1K -e 8K -f 8 --ranks 3 -d "$d" --check "${quick[@]}"
    sweep "sendrecv-$d" 2 -c sendrecv -b 1K -e 8K -f 8 --ranks 3 -d "$d" --check "${quick[@]}"
done
# The exchanges as point-to-point messages on one node (CCL_EXCHANGE=p2p: the GPU's
# route, vcoll.c), the algorithm column saying so; plain buffers too, 2 and 5 ranks.
for k in proportional zipf; do
    for c in alltoallv allgatherv; do
        CCL_EXCHANGE=p2p sweep "p2p-$k-$c-5" 4 -c $c -b 4 -e 256K -f 32 --ranks 5 -d bf16 --v-counts $k --check "${quick[@]}"
        CCL_EXCHANGE=p2p sweep "p2p-$k-$c-2-plain" 3 -c $c -b 1K -e 64K -f 8 --ranks 2 --buffers plain --v-counts $k \
            --check "${quick[@]}"
    done
done
CCL_EXCHANGE=p2p sweep "p2p-alltoall-5" 4 -c alltoall -b 5K -e 320K -f 4 --ranks 5 -d bf16 --check "${quick[@]}"
CCL_EXCHANGE=p2p sweep "p2p-alltoall-2-plain" 3 -c alltoall -b 1K -e 64K -f 8 --ranks 2 --buffers plain --check "${quick[@]}"
for f in p2p-zipf-alltoallv-5 p2p-alltoall-5; do
    if [ "$(grep -v '^#' "$tmp/$f.out" | awk '{print $6}' | sort -u)" != "send/recv" ]; then
        fail "$f-algorithm-column" "under CCL_EXCHANGE=p2p: $(grep -v '^#' "$tmp/$f.out" | head -2)"
    else
        ok "$f-algorithm-column"
    fi
done
if CCL_EXCHANGE=sometimes "$perf" -c alltoallv -b 1K -e 1K --ranks 2 "${quick[@]}" >/dev/null 2>"$tmp/exchange.err" ||
    ! grep -q "CCL_EXCHANGE='sometimes' is not auto, p2p or programs" "$tmp/exchange.err"; then
    fail "exchange-env" "$(head -c 300 "$tmp/exchange.err")"
else
    ok "exchange-env"
fi
# --v-counts: both kinds for both v-collectives, from sizes smaller than a 16-byte unit
# per rank (whole segments empty, the rest on the most loaded peer) up, on 2 to 8 ranks.
for k in proportional zipf; do
    for c in alltoallv allgatherv; do
        sweep "vcounts-$k-$c-tiny-5" 7 -c $c -b 2 -e 512K -f 8 --ranks 5 -d bf16 --v-counts $k --check "${quick[@]}"
        sweep "vcounts-$k-$c-2" 3 -c $c -b 4 -e 64K -f 128 --ranks 2 --v-counts $k --check "${quick[@]}"
        sweep "vcounts-$k-$c-8" 4 -c $c -b 1K -e 64K -f 4 --ranks 8 -d u8 --v-counts $k --check "${quick[@]}"
        sweep "vcounts-$k-$c-1" 2 -c $c -b 1K -e 2K --ranks 1 --v-counts $k --check "${quick[@]}"
    done
    out=$tmp/vcounts-$k-allgatherv-2.out
    if [ "$(grep -c "^# sizes: bytes = the receive buffer, rank p's part of it proportional to $([ $k = zipf ] &&
            echo '1/(k+1)^1.2' || echo '1 + (2p mod (n+1))')" "$out")" -ne 1 ] ||
        ! grep -q '^# in-place: not run (allgatherv has no in-place form)$' "$out"; then
        fail "vcounts-$k-header" "$(grep '^# sizes\|^# in-place' "$out")"
    else
        ok "vcounts-$k-header"
    fi
done
# Out-of-place only: the in-place cells read n/a, the header says why, and the footer
# averages nothing in-place.
out=$tmp/sweep-sendrecv-4.out
if grep -q '^# in-place: not run (sendrecv has no in-place form)$' "$out" &&
    grep -q '^# average busbw: [0-9.]* GB/s out-of-place, n/a in-place$' "$out" &&
    [ "$(grep -v '^#' "$out" | grep -c ' send/recv  *[0-9.]*  *[0-9.]*  *[0-9.]*  *0  *n/a  *n/a  *n/a  *n/a$')" -eq 7 ] &&
    grep -q '^# sizes: bytes = the message each rank sends (to rank r+1) and receives (from rank r-1); busbw = algbw$' "$out"; then
    ok sendrecv-table
else
    fail sendrecv-table "$(grep -v '^#  ' "$out" | head -20)"
fi
for d in f16 fp8_e4m3 fp8_e5m2 u8 i32 i64 f64; do
    for op in sum prod min max avg; do
        sweep "dtype-$d-$op" 2 -c allreduce -b 1K -e 2K --ranks 3 -d "$d" -o "$op" --check "${quick[@]}"
    done
done
# The dtypes i8, u32 and u64 (NCCL's ncclInt8, ncclUint32, ncclUint64) in every collective
# with every op it takes: their data has negative elements (i8) and elements with the top
# bit set (u32, u64), so min and max are checked in the dtype's own order.
for d in i8 u32 u64; do
    for c in allreduce reduce_scatter reduce; do
        for op in sum prod min max avg; do
            sweep "dtype-$d-$c-$op" 2 -c "$c" -b 3K -e 6K --ranks 3 -d "$d" -o "$op" --check "${quick[@]}"
        done
    done
    for c in allgather alltoall broadcast alltoallv allgatherv sendrecv; do
        sweep "dtype-$d-$c" 2 -c "$c" -b 3K -e 6K --ranks 3 -d "$d" --check "${quick[@]}"
    done
    sweep "dtype-$d-avg-4" 2 -c allreduce -b 1K -e 2K --ranks 4 -d "$d" -o avg --check "${quick[@]}"
done
sweep "reduce-root" 2 -c reduce -b 1K -e 2K --ranks 4 -r 3 -o max --check "${quick[@]}"
sweep "broadcast-root" 2 -c broadcast -b 1K -e 2K --ranks 4 -r 2 --check "${quick[@]}"
sweep "reduce_scatter-avg-8" 2 -c reduce_scatter -b 1K -e 2K --ranks 8 -d bf16 -o avg --check "${quick[@]}"
sweep "algo-file" 3 --algo algorithms/allreduce/ring.ccl -b 3K -e 12K --ranks 3 --check "${quick[@]}"
# v programs from a file (ccl_algorithm_run_v), proportional and Zipf counts.
sweep "algo-file-alltoallv" 2 --algo algorithms/alltoallv/pairwise.ccl -b 3K -e 6K --ranks 3 --check "${quick[@]}"
sweep "algo-file-allgatherv-zipf" 2 --algo algorithms/allgatherv/ring.ccl -b 3K -e 6K --ranks 4 --v-counts zipf \
    --check "${quick[@]}"
# --hint-range keeps 1K..256K of allpairs' `sizes 1..256K` (the dispatch's bytes: count x 4).
sweep "hint-range" 5 --algo algorithms/allreduce/allpairs.ccl -b 1K -e 4M -f 4 --hint-range --ranks 2 --check "${quick[@]}"

# Outputs: CSV (a header and one line per size, placement and implementation), JSON
# (parses, the fields tools rely on), SVG (well-formed XML with both panels).
"$perf" -c allgather -b 1K -e 16K --ranks 4 -d bf16 --check "${quick[@]}" \
    --csv "$tmp/r.csv" --json "$tmp/r.json" --plot "$tmp/r.svg" >"$tmp/out.txt" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    fail outputs "exit $rc: $(tail -3 "$tmp/out.txt")"
else
    # The older columns keep their places; buffers, then v_counts, came last.
    hdr='collective,dtype,op,root,nranks,backend,method,impl,algorithm,placement,bytes,count,time_us,algbw_GBs,busbw_GBs,wrong,ratio_vs_nccl,ratio_vs_nccl_mode,buffers,v_counts'
    if [ "$(head -1 "$tmp/r.csv")" != "$hdr" ]; then
        fail csv "header: $(head -1 "$tmp/r.csv")"
    elif [ "$(wc -l <"$tmp/r.csv")" -ne 11 ]; then
        fail csv "$(wc -l <"$tmp/r.csv") lines, expected 11 (header + 5 sizes x 2 placements)"
    elif ! grep -Eq '^allgather,bf16,none,-1,4,cpu,host-clock,ccl,[a-z_]+,in-place,16384,2048,' "$tmp/r.csv"; then
        fail csv "no in-place 16K line: $(tail -1 "$tmp/r.csv")"
    elif [ "$(grep -c ',,,symmetric,none$' "$tmp/r.csv")" -ne 10 ]; then
        fail csv "not every line ends in ',,,symmetric,none' (no NCCL: empty ratio columns): $(tail -1 "$tmp/r.csv")"
    else
        ok csv
    fi
    if command -v python3 >/dev/null; then
        msg=$(python3 - "$tmp/r.json" "$tmp/r.svg" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
assert d["collective"] == "allgather" and d["nranks"] == 4 and d["dtype"] == "bf16", d
assert d["timing"]["method"] == "host-clock" and d["check"] is True and d["buffers"] == "symmetric", d
assert d["v_counts"] == "none", d
assert d["nccl"]["compared"] is False and d["nccl"]["mode"] == "best", d["nccl"]
assert d["nccl"]["plain"] is False and d["nccl"]["sym"] is False and d["nccl"]["sym_why_not"] == "not requested", d["nccl"]
r = d["results"]
assert len(r) == 10, len(r)
assert [x["bytes"] for x in r[::2]] == [1024, 2048, 4096, 8192, 16384]
for x in r:
    c = x["ccl"]
    assert c["time_us"] > 0 and c["wrong"] == 0 and x["nccl"] is None and x["nccl_sym"] is None, x
    assert x["ratio_vs_nccl"] is None and x["ratio_vs_nccl_mode"] is None, x
    assert x["algorithm"] in ("direct", "direct_ll", "ring", "ring_port"), x["algorithm"]
    assert abs(c["busbw_GBs"] - c["algbw_GBs"] * 3 / 4) < 1e-3, x
    assert x["count"] == x["bytes"] // 2 // 4
svg = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
texts = " ".join(t.text or "" for t in svg.iter(ns + "text"))
for want in ("busbw (GB/s)", "time (us, log scale)", "ccl out-of-place", "ccl in-place", "1K", "16K"):
    assert want in texts, want
assert len(list(svg.iter(ns + "polyline"))) == 4
print("ok")
EOF
)
        [ "$msg" = ok ] && ok json-svg || fail json-svg "$msg"
    else
        echo "skip perf json-svg: no python3"
    fi
fi

# --buffers: every collective on every kind, checked, in place and out of place (the
# exchanges: out of place only). plain buffers are malloc'd, outside CCL's heap, so CCL
# stages them where its algorithm reaches them from a peer: CCL_DEBUG's trace shows it
# does at the larger sizes ("staging out": allgather's, alltoall's and alltoallv's
# programs there write into peers' outputs; on symmetric buffers none of them does).
# registered buffers are malloc'd too and registered with ccl_mem_register, which on the
# CPU backend records them only: staged all the same, and each rank's two registrations
# are made before the sweep and released after it.
for b in symmetric plain registered; do
    for c in allreduce allgather reduce_scatter alltoall broadcast reduce alltoallv allgatherv sendrecv; do
        CCL_DEBUG=1 sweep "buffers-$b-$c" 6 -c "$c" -b 1K -e 1M -f 4 --ranks 4 -d bf16 --check --buffers "$b" \
            "${quick[@]}"
        out=$tmp/buffers-$b-$c.out
        if ! grep -q "^# buffers: $b (" "$out"; then
            fail "buffers-$b-$c-header" "$(grep '^# buffers' "$out" || echo 'no # buffers line')"
        fi
        # The heap: sized to the sweep for symmetric buffers, libccl's default (what a
        # user who sizes nothing gets) for the others.
        want="sized to the sweep, regions as large (--heap fit)"
        [ $b = symmetric ] || want="libccl's default (--heap default: "
        grep -q "^# heap: .*$want" "$out" || fail "buffers-$b-$c-heap" "$(grep '^# heap' "$out" || echo 'no # heap line')"
        if [ $b = symmetric ] || [ $c = sendrecv ]; then
            continue
        fi
        # Which ones stage depends on the library's choice; these three do here.
        case $c in allgather | alltoall | alltoallv)
            grep -q ', staging out$' "$tmp/buffers-$b-$c.err" ||
                fail "buffers-$b-$c-staged" "no staging in CCL_DEBUG's trace" ;;
        esac
        [ $b = registered ] || continue
        made=$(grep -c 'ccl_mem_register: registration [01]: .* bytes at 0x[0-9a-f]*, memory peers cannot map (recorded only)$' \
            "$tmp/buffers-$b-$c.err")
        gone=$(grep -c 'ccl_mem_deregister: registration [01] (' "$tmp/buffers-$b-$c.err")
        if [ "$made" -ne 8 ] || [ "$gone" -ne 8 ]; then
            fail "buffers-$b-$c-registrations" "$made registrations made and $gone released, expected 8 and 8 (4 ranks x 2 buffers)"
        fi
    done
done
# An --algo file (ccl_algorithm_run) stages the same way.
sweep buffers-plain-algo 3 --algo algorithms/allgather/direct.ccl -b 3K -e 12K --ranks 3 --check --buffers plain \
    "${quick[@]}"
out=$tmp/buffers-plain-allreduce.out
if [ "$(grep -cx '# buffers: plain (malloc, not in CCL.s heap; CCL stages them where its algorithm needs symmetric memory)' "$out")" -eq 1 ] &&
    [ "$(grep -cx '# buffers: symmetric (ccl_mem_alloc, CCL.s heap, used in place)' "$tmp/buffers-symmetric-allreduce.out")" -eq 1 ] &&
    [ "$(grep -cx '# buffers: registered (malloc, registered with ccl_mem_register once per buffer before timing; on the CPU backend a registration is recorded only, so CCL stages them where its algorithm needs symmetric memory)' "$tmp/buffers-registered-allreduce.out")" -eq 1 ]; then
    ok buffers-header
else
    fail buffers-header "$(grep '^# buffers' "$out" "$tmp/buffers-symmetric-allreduce.out" "$tmp/buffers-registered-allreduce.out")"
fi
# The CSV's buffers column and the JSON's field.
"$perf" -c alltoallv -b 1K -e 4K --ranks 3 --check --buffers plain "${quick[@]}" --csv "$tmp/plain.csv" \
    --json "$tmp/plain.json" >"$tmp/plain.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    fail buffers-outputs "exit $rc: $(tail -3 "$tmp/plain.out")"
elif [ "$(head -1 "$tmp/plain.csv" | awk -F, '{ print $(NF - 1) }')" != buffers ] ||
    [ "$(tail -n +2 "$tmp/plain.csv" | awk -F, '$(NF - 1) == "plain" && $NF == "proportional"' | wc -l)" -ne 3 ] ||
    [ "$(wc -l <"$tmp/plain.csv")" -ne 4 ]; then
    fail buffers-outputs "CSV: $(cat "$tmp/plain.csv")"
elif ! grep -q '"buffers": "plain"' "$tmp/plain.json"; then
    fail buffers-outputs "JSON: $(grep -m1 check "$tmp/plain.json")"
else
    ok buffers-outputs
fi
"$perf" -c reduce_scatter -b 3K -e 12K --ranks 3 --check --buffers registered "${quick[@]}" --csv "$tmp/reg.csv" \
    --json "$tmp/reg.json" >"$tmp/reg.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    fail buffers-outputs-registered "exit $rc: $(tail -3 "$tmp/reg.out")"
elif [ "$(tail -n +2 "$tmp/reg.csv" | awk -F, '$(NF - 1) == "registered" && $NF == "none"' | wc -l)" -ne 6 ] ||
    [ "$(wc -l <"$tmp/reg.csv")" -ne 7 ]; then
    fail buffers-outputs-registered "CSV: $(cat "$tmp/reg.csv")"
elif ! grep -q '"buffers": "registered"' "$tmp/reg.json"; then
    fail buffers-outputs-registered "JSON: $(grep -m1 check "$tmp/reg.json")"
else
    ok buffers-outputs-registered
fi
# The CSV's v_counts column, the JSON's field and the plot's title under --v-counts zipf.
"$perf" -c allgatherv -b 1K -e 4K --ranks 3 --check --v-counts zipf "${quick[@]}" --csv "$tmp/zipf.csv" \
    --json "$tmp/zipf.json" --plot "$tmp/zipf.svg" >"$tmp/zipf.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    fail vcounts-outputs "exit $rc: $(tail -3 "$tmp/zipf.out")"
elif [ "$(head -1 "$tmp/zipf.csv" | awk -F, '{ print $NF }')" != v_counts ] ||
    [ "$(tail -n +2 "$tmp/zipf.csv" | awk -F, '$1 == "allgatherv" && $(NF - 1) == "symmetric" && $NF == "zipf"' | wc -l)" -ne 3 ] ||
    [ "$(wc -l <"$tmp/zipf.csv")" -ne 4 ]; then
    fail vcounts-outputs "CSV: $(cat "$tmp/zipf.csv")"
elif ! grep -q '"buffers": "symmetric", "v_counts": "zipf"' "$tmp/zipf.json"; then
    fail vcounts-outputs "JSON: $(grep -m1 check "$tmp/zipf.json")"
elif ! grep -q 'allgatherv (zipf counts) f32, 3 ranks' "$tmp/zipf.svg"; then
    fail vcounts-outputs "SVG title: $(grep -m1 -o 'ccl-perf: [^<]*' "$tmp/zipf.svg")"
else
    ok vcounts-outputs
fi
if "$perf" --help | grep -q -- '^      --buffers B      symmetric (ccl_mem_alloc: CCL.s heap) or plain (ordinary memory, as$' &&
    "$perf" --help | grep -q -- '^                       registered (the user.s memory, registered with ccl_mem_register once$'; then
    ok help-buffers
else
    fail help-buffers "$("$perf" --help | grep -A2 -- --buffers)"
fi

# One process per rank under mpirun: the same table as the threads.
if command -v mpirun >/dev/null; then
    mpi=(mpirun -np 2)
    [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
    mpi+=(--oversubscribe)
    "${mpi[@]}" "$perf" -c alltoall -b 1K -e 8K --check "${quick[@]}" >"$tmp/mpi.out" 2>"$tmp/mpi.err"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail mpirun "exit $rc: $(head -c 400 "$tmp/mpi.err")"
    elif ! grep -q '^# ccl-perf .*: alltoall, f32, 2 ranks (one process per rank), backend cpu' "$tmp/mpi.out"; then
        fail mpirun "header: $(head -1 "$tmp/mpi.out")"
    elif [ "$(grep -cv '^#' "$tmp/mpi.out")" -ne 4 ] || ! grep -q '^# wrong elements: 0$' "$tmp/mpi.out"; then
        fail mpirun "$(cat "$tmp/mpi.out")"
    else
        ok mpirun
    fi
    # The new exchanges across processes: alltoallv's and allgatherv's counts (both
    # kinds: every process computes the same matrix) and sendrecv's ring.
    mpi3=("${mpi[@]}")
    mpi3[2]=3
    for ck in alltoallv:proportional alltoallv:zipf allgatherv:proportional allgatherv:zipf sendrecv:; do
        c=${ck%:*} k=${ck#*:}
        "${mpi3[@]}" "$perf" -c "$c" -b 1K -e 8K --check ${k:+--v-counts $k} "${quick[@]}" >"$tmp/mpi-$c.out" \
            2>"$tmp/mpi-$c.err"
        rc=$?
        if [ $rc -ne 0 ]; then
            fail "mpirun-$c${k:+-$k}" "exit $rc: $(head -c 400 "$tmp/mpi-$c.err")"
        elif ! grep -q "^# ccl-perf .*: $c, f32, 3 ranks (one process per rank), backend cpu" "$tmp/mpi-$c.out" ||
            [ "$(grep -cv '^#' "$tmp/mpi-$c.out")" -ne 4 ] || ! grep -q '^# wrong elements: 0$' "$tmp/mpi-$c.out"; then
            fail "mpirun-$c${k:+-$k}" "$(cat "$tmp/mpi-$c.out")"
        else
            ok "mpirun-$c${k:+-$k}"
        fi
    done
    # A new dtype across processes: u64's unsigned max, i8's signed min.
    for dop in u64:max i8:min; do
        d=${dop%:*} op=${dop#*:}
        "${mpi3[@]}" "$perf" -c allreduce -b 3K -e 12K -d "$d" -o "$op" --check "${quick[@]}" \
            >"$tmp/mpi-$d.out" 2>"$tmp/mpi-$d.err"
        rc=$?
        if [ $rc -ne 0 ]; then
            fail "mpirun-$d-$op" "exit $rc: $(head -c 400 "$tmp/mpi-$d.err")"
        elif [ "$(grep -cv '^#' "$tmp/mpi-$d.out")" -ne 3 ] || ! grep -q '^# wrong elements: 0$' "$tmp/mpi-$d.out"; then
            fail "mpirun-$d-$op" "$(cat "$tmp/mpi-$d.out")"
        else
            ok "mpirun-$d-$op"
        fi
    done
    # Plain buffers across processes: private memory of each, staged into the shared heap.
    for c in allgather alltoallv; do
        "${mpi3[@]}" "$perf" -c "$c" -b 3K -e 768K -f 16 -d bf16 --check --buffers plain "${quick[@]}" \
            >"$tmp/mpi-plain-$c.out" 2>"$tmp/mpi-plain-$c.err"
        rc=$?
        if [ $rc -ne 0 ]; then
            fail "mpirun-plain-$c" "exit $rc: $(head -c 400 "$tmp/mpi-plain-$c.err")"
        elif ! grep -q '^# buffers: plain (malloc' "$tmp/mpi-plain-$c.out" ||
            [ "$(grep -cv '^#' "$tmp/mpi-plain-$c.out")" -ne 3 ] || ! grep -q '^# wrong elements: 0$' "$tmp/mpi-plain-$c.out"; then
            fail "mpirun-plain-$c" "$(cat "$tmp/mpi-plain-$c.out")"
        else
            ok "mpirun-plain-$c"
        fi
    done
    # Registered buffers across processes on the CPU backend: a process's malloc memory is
    # private, which libccl cannot register, so the run is refused before it starts.
    "${mpi[@]}" "$perf" -c allreduce --buffers registered "${quick[@]}" >"$tmp/mpi-reg.out" 2>"$tmp/mpi-reg.err"
    rc=$?
    want='ccl-perf: error: --buffers registered is not available on the CPU backend with one process per rank: '
    if [ $rc -eq 0 ] || [ "$(grep -c "^$want" "$tmp/mpi-reg.err")" -ne 1 ] || grep -q '^#' "$tmp/mpi-reg.out"; then
        fail mpirun-registered-refused "exit $rc: $(head -c 400 "$tmp/mpi-reg.err")"
    else
        ok mpirun-registered-refused
    fi
else
    echo "skip perf mpirun: no mpirun"
fi

# A heap smaller than the sweep needs: allpairs' scratch (2 x N x the message) outgrows a
# 3 MiB heap after a few sizes, and those calls run in pieces (runtime/src/call.c,
# "Pieces"); they once failed every rank with "needs N bytes of scratch ... more than
# the heap has left". Every size must run and check exact, nothing said on stderr.
# Threads (the library's allpairs, and 4 instances per block) and processes.
small_heap() {
    local name=$1
    shift
    CCL_HEAP_BYTES=3M "$@" --check -b 1K -e 512K -n 2 -w 1 --backend cpu >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    local other
    other=$(grep -v -e '^--*$' -e '^$' -e 'mpirun\|exit code\|Process name\|Exit code\|job\|^  ' "$tmp/$name.err" | head -3)
    if [ $rc -ne 0 ]; then
        fail "$name" "exit $rc: $(head -c 400 "$tmp/$name.err")"
    elif [ -n "$other" ]; then
        fail "$name" "unexpected output: $other"
    elif [ "$(grep -cv '^#' "$tmp/$name.out")" -ne 10 ] || ! grep -q '^# wrong elements: 0$' "$tmp/$name.out"; then
        fail "$name" "not every size of 1K..512K ran exact: $(grep -v '^# [a-z]*:' "$tmp/$name.out" | tail -4)"
    else
        ok "$name"
    fi
}
small_heap heap-small-threads "$perf" --algo algorithms/allreduce/allpairs.ccl --ranks 4
small_heap heap-small-instances "$perf" --algo tests/perf/allpairs_instances.ccl --ranks 8
if command -v mpirun >/dev/null; then
    small_heap heap-small-mpirun "${mpi[@]}" -x CCL_HEAP_BYTES "$perf" --algo tests/perf/allpairs_instances.ccl
fi

# The checker itself: rank 0 spoils 3 elements of each checked result; 2 sizes x 2
# placements x 4 ops = 16 checked results = 48 wrong elements, and exit 1.
CCL_PERF_INJECT_WRONG=3 "$perf" -c reduce_scatter -b 1K -e 2K --ranks 4 --check -n 4 -w 1 --backend cpu \
    >"$tmp/inj.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q '^# FAILED: 48 wrong elements$' "$tmp/inj.out"; then
    ok check-catches-wrong
else
    fail check-catches-wrong "exit $rc: $(grep -E '^#.*(wrong|FAILED)' "$tmp/inj.out")"
fi

# The same for alltoallv's and allgatherv's segments and sendrecv's message: 2 sizes x
# out-of-place only x 4 ops x 3 = 24.
for c in alltoallv allgatherv sendrecv; do
    CCL_PERF_INJECT_WRONG=3 "$perf" -c $c -b 1K -e 2K --ranks 4 --check -n 4 -w 1 --backend cpu >"$tmp/inj-$c.out" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q '^# FAILED: 24 wrong elements$' "$tmp/inj-$c.out"; then
        ok "check-catches-wrong-$c"
    else
        fail "check-catches-wrong-$c" "exit $rc: $(grep -E '^#.*(wrong|FAILED)' "$tmp/inj-$c.out")"
    fi
done

# A size the library refuses (CCL_ERR_UNSUPPORTED, as a backend may),
# simulated with CCL_PERF_INJECT_UNSUPPORTED=4096 (ours at 4K and up acts refused): the
# sizes below are timed and checked, the refused ones read "refused" and are left out of
# the CSV and null in the JSON, the footer quotes the refusal, and the run exits 1 with
# nothing on stderr.
for c in sendrecv alltoallv allgatherv; do
    CCL_PERF_INJECT_UNSUPPORTED=4096 "$perf" -c $c -b 1K -e 16K --ranks 3 --check "${quick[@]}" \
        --csv "$tmp/refused-$c.csv" --json "$tmp/refused-$c.json" >"$tmp/refused-$c.out" 2>"$tmp/refused-$c.err"
    rc=$?
    case $c in sendrecv) name='ccl_send/ccl_recv group' ;; alltoallv) name=ccl_all_to_all_v ;; *) name=ccl_all_gather_v ;; esac
    want="# REFUSED: the library refused ours at 3 of 5 sizes (not timed): $name: CCL_PERF_INJECT_UNSUPPORTED=4096: ccl-perf refuses ops of this size itself (a test)"
    if [ $rc -ne 1 ] || [ -s "$tmp/refused-$c.err" ]; then
        fail "refused-$c" "exit $rc, expected 1: $(head -c 400 "$tmp/refused-$c.err")"
    elif [ "$(grep -v '^#' "$tmp/refused-$c.out" | grep -c '  refused  *-  *-  *-  *n/a')" -ne 3 ] ||
        [ "$(grep -v '^#' "$tmp/refused-$c.out" | grep -c ' 0  *n/a  *n/a  *n/a  *n/a$')" -ne 2 ] ||
        [ "$(grep -cx "$want" "$tmp/refused-$c.out")" -ne 1 ] || ! grep -q '^# wrong elements: 0$' "$tmp/refused-$c.out"; then
        fail "refused-$c" "$(grep -v '^#  ' "$tmp/refused-$c.out" | tail -8)"
    elif [ "$(wc -l <"$tmp/refused-$c.csv")" -ne 3 ]; then
        fail "refused-$c" "CSV: $(wc -l <"$tmp/refused-$c.csv") lines, expected 3 (header + 2 timed sizes)"
    elif command -v python3 >/dev/null && ! python3 - "$tmp/refused-$c.json" "$c" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["collective"] == sys.argv[2], d["collective"]
assert "CCL_PERF_INJECT_UNSUPPORTED=4096" in d["ccl_refused"], d["ccl_refused"]
r = d["results"]
assert len(r) == 10, len(r)
for x in r:
    timed = x["placement"] == "out-of-place" and x["bytes"] < 4096
    assert (x["ccl"] is not None) == timed, x
EOF
    then
        fail "refused-$c" "JSON: see above"
    else
        ok "refused-$c"
    fi
done

# --compare nccl where there is no GPU: a note in the header, a normal run.
"$perf" -c allreduce -b 1K -e 1K --ranks 2 --compare nccl "${quick[@]}" >"$tmp/nccl.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '^# nccl: not compared: NCCL needs the GPU backend; this run uses the CPU backend' "$tmp/nccl.out"; then
    ok compare-nccl-no-gpu
else
    fail compare-nccl-no-gpu "exit $rc: $(grep -i nccl "$tmp/nccl.out" | head -3)"
fi

# --nccl-mode is accepted with --compare nccl (and without a GPU changes nothing); --help
# names it.
"$perf" -c allreduce -b 1K -e 1K --ranks 2 --compare nccl --nccl-mode=sym "${quick[@]}" >"$tmp/mode.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '^# nccl: not compared: NCCL needs the GPU backend' "$tmp/mode.out" &&
    "$perf" --help | grep -q -- '--nccl-mode M *plain (NCCL on our buffers), sym (on its symmetric windows, 2.27+)'; then
    ok nccl-mode
else
    fail nccl-mode "exit $rc: $(grep -i nccl "$tmp/mode.out" | head -3)"
fi

# --help describes the three exchanges, the v counts of both kinds and their refusals.
help=$("$perf" --help)
if grep -q -- '-c, --collective C   allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce,$' <<<"$help" &&
    grep -q '^ *alltoallv, allgatherv or sendrecv (below)$' <<<"$help" &&
    grep -q '^sendrecv: every rank r sends S bytes (each size of the sweep) to rank (r+1)%N and$' <<<"$help" &&
    grep -q '^  to 1 + ((q + 2p) mod (N+1)), rounded down, the remainder one element each to the first$' <<<"$help" &&
    grep -q '^allgatherv: ccl_all_gather_v; S bytes is the receive buffer, rank p.s part of it$' <<<"$help" &&
    grep -q '^  allgatherv: one ncclBroadcast per rank in a group, as PyTorch does); busbw = algbw x (N-1)/N.$' <<<"$help" &&
    grep -q '^--v-counts zipf: instead, rank q.s k-th most loaded peer (a permutation of its own) gets$' <<<"$help" &&
    grep -q -- '^      --v-counts K     alltoallv.s and allgatherv.s counts: proportional or zipf (below)$' <<<"$help" &&
    grep -q '^All three: out-of-place only. A size the library refuses (CCL_ERR_UNSUPPORTED) shows$' <<<"$help"; then
    ok help-p2p
else
    fail help-p2p "$(grep -A20 '^sendrecv' <<<"$help" | head -20)"
fi

# --heap SIZE: that heap with libccl's regions, said in the header; ordinary buffers
# whose staging passes the regions (1 MiB of a 4 MiB heap) run in pieces, checked.
sweep heap-size 4 -c allgather -b 16K -e 2M -f 4 --ranks 4 --check --buffers plain --heap 4M "${quick[@]}"
if grep -q "^# heap: 4194304 bytes (--heap), regions a quarter of it$" "$tmp/heap-size.out"; then
    ok heap-size-header
else
    fail heap-size-header "$(grep '^# heap' "$tmp/heap-size.out" || echo 'no # heap line')"
fi

# Bad arguments: exactly this first line on stderr, exit 2.
bad() {
    local name=$1 want=$2
    shift 2
    env ${BAD_LIB:+LD_LIBRARY_PATH=$BAD_LIB} "$perf" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    local rc=$?
    local got
    got=$(head -1 "$tmp/bad.err")
    if [ $rc -ne 2 ]; then
        fail "bad-$name" "exit $rc, expected 2 ($got)"
    elif [ "$got" != "$want" ]; then
        fail "bad-$name" "got '$got', expected '$want'"
    else
        ok "bad-$name"
    fi
}
bad unknown-collective "ccl-perf: error: -c foo: unknown collective (expected allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce, alltoallv, allgatherv or sendrecv)" -c foo
bad no-collective "ccl-perf: error: -c COLLECTIVE is required (allreduce, allgather, reduce_scatter, alltoall, broadcast, reduce, alltoallv, allgatherv or sendrecv)" -b 1K
bad min-over-max "ccl-perf: error: -b 64K is larger than -e 1K" -c allreduce -b 64K -e 1K
bad v-collective-other-c "ccl-perf: error: --algo algorithms/alltoallv/pairwise.ccl implements alltoallv, but -c says allgatherv" --algo algorithms/alltoallv/pairwise.ccl -c allgatherv --ranks 2
bad v-counts-algo-allreduce "ccl-perf: error: --v-counts: only alltoallv and allgatherv take counts, not allreduce (--algo algorithms/allreduce/ring.ccl)" --algo algorithms/allreduce/ring.ccl --v-counts zipf --ranks 2
bad v-counts "ccl-perf: error: --v-counts skewed: expected proportional or zipf" -c alltoallv --v-counts skewed
bad v-counts-allreduce "ccl-perf: error: --v-counts zipf: only alltoallv and allgatherv take counts, not allreduce" -c allreduce --v-counts zipf
bad v-counts-missing "ccl-perf: error: --v-counts needs a value" -c allgatherv --v-counts
bad op-allgatherv "ccl-perf: error: -o sum: allgatherv does not reduce" -c allgatherv -o sum
bad element-size-allgatherv "ccl-perf: error: size 6 (6 bytes) is not a whole number of f32 elements (4 bytes each)" -c allgatherv -b 6 -e 6 --backend cpu
bad not-a-size "ccl-perf: error: -e 1X: not a size (a number of bytes, optionally with K, M or G)" -c allreduce -e 1X
bad zero-size "ccl-perf: error: -b 0: sizes must be at least one element" -c allreduce -b 0
bad step "ccl-perf: error: -f 1: expected an integer in 2..1048576" -c allreduce -f 1
bad dtype "ccl-perf: error: -d f33: unknown dtype (expected f32, f64, f16, bf16, i32, i64, u8, fp8_e4m3, fp8_e5m2, i8, u32 or u64)" -c allreduce -d f33
bad op "ccl-perf: error: -o mean: unknown reduction op (expected sum, prod, min, max or avg)" -c allreduce -o mean
bad op-no-reduce "ccl-perf: error: -o max: allgather does not reduce" -c allgather -o max
bad root-no-root "ccl-perf: error: -r 1: allreduce has no root" -c allreduce -r 1
bad op-sendrecv "ccl-perf: error: -o sum: sendrecv does not reduce" -c sendrecv -o sum
bad root-alltoallv "ccl-perf: error: -r 0: alltoallv has no root" -c alltoallv -r 0
bad algo-sendrecv "ccl-perf: error: --algo algorithms/allreduce/ring.ccl implements allreduce, but -c says sendrecv" -c sendrecv --algo algorithms/allreduce/ring.ccl --ranks 4 --backend cpu
bad element-size-alltoallv "ccl-perf: error: size 6 (6 bytes) is not a whole number of f32 elements (4 bytes each)" -c alltoallv -b 6 -e 6 --backend cpu
bad graph-cpu-sendrecv "ccl-perf: error: --graph needs the GPU backend (CUDA graphs); this run uses the CPU backend" -c sendrecv --graph --backend cpu
bad root-range "ccl-perf: error: -r 4: the root must be a rank, 0..3" -c broadcast -r 4 --ranks 4 --backend cpu
bad element-size "ccl-perf: error: size 1022 (1022 bytes) is not a whole number of f32 elements (4 bytes each)" -c allreduce -b 1022 -e 1022 --backend cpu
bad divisible "ccl-perf: error: size 1K (1024 bytes): allgather on 3 ranks needs sizes divisible by 6 bytes (ranks x bf16 size)" -c allgather -d bf16 -b 1K -e 4K --ranks 3 --backend cpu
bad divisible-a2a "ccl-perf: error: size 2K (2048 bytes): alltoall on 3 ranks needs sizes divisible by 12 bytes (ranks x f32 size)" -c alltoall -b 2K -e 8K --ranks 3 --backend cpu
bad graph-cpu "ccl-perf: error: --graph needs the GPU backend (CUDA graphs); this run uses the CPU backend" -c allreduce --graph --backend cpu
bad large-ops-no-graph "ccl-perf: error: --large-ops 10: the ops per CUDA graph from 16 MB; it needs --graph" -c allreduce --large-ops 10 --backend cpu
bad large-ops-zero "ccl-perf: error: --large-ops 0: expected an integer in 1..10000" -c allreduce --graph --large-ops 0
# Sizes are decimal (010 is ten, never octal) and take K, KB, KiB in any case.
bad decimal-size "ccl-perf: error: size 10 (10 bytes) is not a whole number of f32 elements (4 bytes each)" -c allreduce -b 010 -e 010 --backend cpu
if "$perf" -c allreduce -b 4kb -e 8KiB "${quick[@]}" --ranks 2 >"$tmp/sizes.out" 2>&1 && grep -q '^ *8192 ' "$tmp/sizes.out"; then
    ok size-suffixes
else
    fail size-suffixes "$(tail -3 "$tmp/sizes.out" | tr '\n' '|')"
fi
bad unknown-option "ccl-perf: error: unknown option '--fast' (see ccl-perf --help)" -c allreduce --fast
bad missing-value "ccl-perf: error: -b needs a value" -c allreduce -b
bad compare "ccl-perf: error: --compare mpi: only 'nccl' can be compared" -c allreduce --compare mpi
bad nccl-mode "ccl-perf: error: --nccl-mode fast: expected plain, sym or best" -c allreduce --compare nccl --nccl-mode fast
bad nccl-mode-alone "ccl-perf: error: --nccl-mode sym needs --compare nccl" -c allreduce --nccl-mode sym
bad buffers "ccl-perf: error: --buffers heap: expected symmetric, plain or registered" -c allreduce --buffers heap
bad heap "ccl-perf: error: --heap large: expected fit, default or a size in bytes (K, M, G suffixes)" -c allreduce --heap large
bad buffers-missing "ccl-perf: error: --buffers needs a value" -c allreduce --buffers
bad plot-name "ccl-perf: error: --plot out.png: the plot is an SVG file; name it *.svg" -c allreduce --plot out.png
bad backend "ccl-perf: error: --backend tpu: expected cpu, gpu or auto" -c allreduce --backend tpu
bad algo-missing "ccl-perf: error: --algo $tmp/none.ccl: cannot read: No such file or directory" --algo "$tmp/none.ccl"
bad algo-unproved "ccl-perf: error: --algo tests/perf/unproved.ccl is not proved for 4 ranks: tests/perf/unproved.ccl:12:3: error: postcondition fails: out@0[0] holds in@0[0] twice + in@1[0] + in@2[0] + in@3[0]; in@0[0] is double-counted (written last here, on rank 0); this statement leaves 3 more out chunks wrong" --algo tests/perf/unproved.ccl --ranks 4 --backend cpu
bad algo-not-admitted "ccl-perf: error: --algo tests/perf/unproved.ccl does not admit N = 1: tests/perf/unproved.ccl:4:1: error: algorithm 'double_own' is for N in 2..16, not N = 1" --algo tests/perf/unproved.ccl --ranks 1 --backend cpu
bad hint-no-algo "ccl-perf: error: --hint-range needs --algo FILE" -c allreduce --hint-range --backend cpu
bad hint-empty "ccl-perf: error: --hint-range: no size of the sweep is inside algorithms/allreduce/allpairs.ccl's \`sizes\` hint (1..262144 bytes per rank's count)" --algo algorithms/allreduce/allpairs.ccl -b 1M -e 4M --hint-range --ranks 2 --backend cpu
bad algo-collective "ccl-perf: error: --algo algorithms/allreduce/ring.ccl implements allreduce, but -c says allgather" -c allgather --algo algorithms/allreduce/ring.ccl --ranks 4 --backend cpu

# The CUDA toolkit's stub driver has every symbol ccl-perf loads (so none is misspelled)
# and no device: --backend gpu must say so, and NCCL must be found but not compared.
stub=${CUDA:-/usr/local/cuda}/lib64/stubs/libcuda.so
if [ -f "$stub" ]; then
    mkdir -p "$tmp/stub" && ln -sf "$stub" "$tmp/stub/libcuda.so.1"
    BAD_LIB=$tmp/stub bad stub-driver "ccl-perf: error: --backend gpu: cuInit failed: CUDA error 34" -c allreduce --backend gpu
    LD_LIBRARY_PATH=$tmp/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$perf" -c allreduce -b 1K -e 1K --ranks 2 \
        --compare nccl -n 2 -w 1 >"$tmp/stub.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^# nccl: not compared: NCCL needs the GPU backend; this run uses the CPU backend (cuInit failed: CUDA error 34)$' "$tmp/stub.out"; then
        ok stub-driver-fallback
    else
        fail stub-driver-fallback "exit $rc: $(grep -m1 nccl "$tmp/stub.out")"
    fi
else
    echo "skip perf stub-driver: no $stub"
fi

# The hand-written CUDA driver (the harness's, tools/common/cuda.c) and NCCL (ccl-perf's)
# prototypes match the real headers.
cuda=${CUDA:-/usr/local/cuda}
if [ -f "$cuda/include/cuda.h" ] && [ -f "$cuda/include/nccl.h" ]; then
    if (for f in tools/common/cuda.c tools/perf/driver.c; do
            ${CC:-cc} -std=c11 -fsyntax-only -D_GNU_SOURCE -DCCL_TOOLS_CHECK_PROTOTYPES -Icompiler -Iruntime/include \
                -Iruntime/src -Itools/common -I"$build" -I"$cuda/include" "$f" || exit 1
        done) 2>"$tmp/proto.err"; then
        ok prototypes
    else
        fail prototypes "$(grep -m3 error "$tmp/proto.err")"
    fi
else
    echo "skip perf prototypes: no cuda.h/nccl.h under $cuda/include"
fi

# NCCL's two modes without a GPU (tests/perf/unit/report_test.c), built here with the
# flags the build's objects were made with, against report.c, driver.c and data.c and
# three stand-in libnccl builds (tests/perf/unit/fake_nccl.c).
golden() {
    local name=$1 got=$2 want=$3
    if [ -n "${UPDATE_GOLDEN:-}" ]; then
        cp "$got" "$want" && ok "$name (golden updated)"
    elif diff -u "$want" "$got" >"$tmp/$name.diff"; then
        ok "$name"
    else
        fail "$name" "differs from $want (UPDATE_GOLDEN=1 rewrites it): $(head -12 "$tmp/$name.diff")"
    fi
}
unit=tests/perf/unit
flags=$(sed 's/ (library objects: -fPIC)$//' "$build/cflags.txt" 2>/dev/null)
mkdir -p "$tmp/fake" "$tmp/unit"
fakes=("2.26 -DFAKE_VERSION=22605 -DFAKE_MEMALLOC" "nowin -DFAKE_VERSION=22809 -DFAKE_MEMALLOC"
       "2.28 -DFAKE_VERSION=22809 -DFAKE_MEMALLOC -DFAKE_WINDOWS")
if [ -z "$flags" ]; then
    fail unit-build "no $build/cflags.txt (build first)"
elif ! (for f in "${fakes[@]}"; do
            read -r name defs <<<"$f"
            # shellcheck disable=SC2086
            ${CC:-cc} -shared -fPIC $defs -o "$tmp/fake/libnccl-$name.so" $unit/fake_nccl.c || exit 1
        done
        # shellcheck disable=SC2086
        $flags -Itools/common -Itools/perf -o "$tmp/report_test" $unit/report_test.c tools/perf/report.c \
            tools/perf/driver.c tools/perf/data.c "$build/libtools.a" "$build/libccl.a" -pthread -ldl -lm -lrt
       ) >"$tmp/unit-build.err" 2>&1; then
    fail unit-build "$(grep -m3 -e error -e undefined "$tmp/unit-build.err")"
else
    # The toolkit's real libnccl too, where there is one (it loads without a GPU).
    real=${CUDA:-/usr/local/cuda}/lib64/libnccl.so.2
    [ -f "$real" ] || real=
    env -i NCCL_NVLS_ENABLE=0 REAL_NCCL="$real" "$tmp/report_test" "$tmp/unit" "$tmp/fake" \
        >"$tmp/unit/report.txt" 2>"$tmp/unit.err"
    rc=$?
    grep -v '^ok \|^FAIL \|^skip ' "$tmp/unit.err" | head -5
    grep '^ok \|^FAIL \|^skip ' "$tmp/unit.err"
    [ $rc -eq 0 ] || grep -q '^FAIL ' "$tmp/unit.err" || fail unit "exit $rc: $(head -c 400 "$tmp/unit.err")"
    golden unit-table "$tmp/unit/report.txt" $unit/report.golden
    golden unit-csv "$tmp/unit/report.csv" $unit/report.csv.golden
    if command -v python3 >/dev/null; then
        msg=$(python3 - "$tmp/unit/report.json" "$tmp/unit/report.svg" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
n = d["nccl"]
assert n["compared"] and n["mode"] == "best" and n["plain"] and n["sym"] and n["sym_why_not"] == "", n
assert n["version"] == 22809, n
r = d["results"]
assert len(r) == 8, len(r)
want = [  # bytes, placement, ratio, against
    (1024, "out-of-place", 8 / 6, "sym"), (1024, "in-place", 8.5 / 6.5, "sym"),
    (65536, "out-of-place", 10 / 10.5, "sym"), (65536, "in-place", 10 / 11, "plain"),
    (1048576, "out-of-place", 20 / 25, "plain"), (1048576, "in-place", 21 / 25, "plain"),
    (16777216, "out-of-place", 100 / 90, "plain"), (16777216, "in-place", 101 / 90, "plain")]
for x, (b, p, ratio, m) in zip(r, want):
    assert (x["bytes"], x["placement"], x["ratio_vs_nccl_mode"]) == (b, p, m), x
    assert abs(x["ratio_vs_nccl"] - ratio) < 1e-4, x
    assert x["nccl"]["time_us"] > 0, x
    assert x["nccl_sym"] is None if (b, p) == (65536, "in-place") else x["nccl_sym"]["time_us"] > 0, x
    best = min(s["time_us"] for s in (x["nccl"], x["nccl_sym"]) if s)
    assert abs(x["ccl"]["time_us"] / best - x["ratio_vs_nccl"]) < 1e-4, x
svg = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
texts = " ".join(t.text or "" for t in svg.iter(ns + "text"))
for want_text in ("ccl out-of-place", "NCCL out-of-place", "NCCL sym out-of-place", "NCCL sym in-place"):
    assert want_text in texts, want_text
assert len(list(svg.iter(ns + "polyline"))) == 12  # 3 series x 2 placements x 2 panels
print("ok")
EOF
)
        [ "$msg" = ok ] && ok unit-json-svg || fail unit-json-svg "$msg"
    else
        echo "skip perf unit-json-svg: no python3"
    fi
fi
exit 0
