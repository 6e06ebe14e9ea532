#!/usr/bin/env bash
# Tuner suite (seconds): the table format, the built-in H200 tables (runtime/tune/*.tbl) and dispatch through
# a table on the CPU backend (tests/tuner/tuner.c); then ccl-tune on 4 ranks (threads)
# over a few small sizes, whose table the runtime then loads and follows
# (tuner --use), and that ccl-tune times and reports the incumbent (libccl's choice before
# its table); last, that the library's choice by `sizes` hints never names a hybrid
# (ccl-perf on the CPU, 4 KB .. 256 MB). Prints "ok NAME" or "FAIL NAME: why" per test.
#
#   tests/tuner/run.sh BUILD
set -u
build=${1:?usage: tests/tuner/run.sh BUILD}
cd "$(dirname "$0")/../.."
export CCL_ALGORITHM_DIR=$PWD/algorithms
export CCL_TIMEOUT_MS=${CCL_TIMEOUT_MS:-20000}
# Tables in the user's cache folder must not steer these tests.
export CCL_CACHE_DIR=$(mktemp -d)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$CCL_CACHE_DIR"' EXIT

if [ ! -x "$build/tests/tuner/tuner" ]; then
    echo "FAIL tuner: $build/tests/tuner/tuner not built"
    exit 0
fi
unset CCL_TUNE_FILE
"$build/tests/tuner/tuner" || true
"$build/tests/tuner/tuner" --builtin 4 || true     # skips (says so) off H200s

# use_table MODE FILE NAME: tuner MODE (--use or --use-sym) on FILE, 4 ranks, its
# tuner.use lines named tuner.NAME.
use_table() {
    "$build/tests/tuner/tuner" "$1" "$2" 4 | sed "s/^ok tuner\.use/ok tuner.$3/; s/^FAIL tuner\.use/FAIL tuner.$3/" || true
}

if [ -x "$build/ccl-tune" ]; then
    if out=$("$build/ccl-tune" --backend cpu --ranks 4 -c allreduce,allgather -b 1K -e 16K --instances 1,2 --iters 3 --reps 2 \
                 -o "$tmp/cpu.tbl" 2>&1); then
        echo "ok ccl-tune.cpu.run"
        if grep -q '^allreduce 16384 ' "$tmp/cpu.tbl" && grep -q '^allgather 1024 ' "$tmp/cpu.tbl" &&
           grep -q '^device cpu$' "$tmp/cpu.tbl" && grep -q '^ranks 4$' "$tmp/cpu.tbl"; then
            echo "ok ccl-tune.cpu.table"
        else
            echo "FAIL ccl-tune.cpu.table: $(tr '\n' '|' <"$tmp/cpu.tbl")"
        fi
        use_table --use "$tmp/cpu.tbl" use
        use_table --use-sym "$tmp/cpu.tbl" use-sym
        # --buffers plain over that table in force: its rows kept, rows for ordinary
        # buffers added; malloc buffers then follow those, ccl_mem_alloc ones the others.
        if out=$(CCL_TUNE_FILE="$tmp/cpu.tbl" "$build/ccl-tune" --backend cpu --ranks 4 -c allreduce -b 1K -e 4K \
                     --instances 1,2 --iters 3 --reps 2 --buffers plain -o "$tmp/plain.tbl" 2>&1) &&
           grep -q '^allreduce:plain 4096 ' "$tmp/plain.tbl" && grep -q '^allreduce 16384 ' "$tmp/plain.tbl" &&
           grep -q '^# buffers: plain' <<<"$out"; then
            echo "ok ccl-tune.cpu.plain"
            use_table --use "$tmp/plain.tbl" use-plain
            use_table --use-sym "$tmp/plain.tbl" use-plain-sym
        else
            echo "FAIL ccl-tune.cpu.plain: $(echo "$out" | tail -5 | tr '\n' '|') table: $(tr '\n' '|' <"$tmp/plain.tbl" 2>/dev/null | cut -c1-600)"
        fi
    else
        echo "FAIL ccl-tune.cpu.run: $(echo "$out" | tail -5 | tr '\n' '|')"
    fi
    # A program no line protocol can carry (pull reads peers' memory), though it asks
    # for ll, is timed and labelled as the Simple it runs as.
    mkdir -p "$tmp/lib/allreduce"
    sed 's/^algorithm pull : allreduce/algorithm pull_ll : allreduce/; s/^protocol simple/protocol ll/' \
        algorithms/allreduce/pull.ccl >"$tmp/lib/allreduce/pull_ll.ccl"
    out=$(CCL_ALGORITHM_DIR="$tmp/lib" "$build/ccl-tune" --backend cpu --model gpu --ranks 4 -c allreduce -b 1M -e 1M \
              --protocols ll --dry-run 2>&1)
    if echo "$out" | grep -q 'allreduce/pull_ll.ccl I=[0-9]* T=- S=1 simple' &&
       ! echo "$out" | grep -q 'allreduce/pull_ll.ccl I=[0-9]* T=- S=1 ll'; then
        echo "ok ccl-tune.non-line-label"
    else
        echo "FAIL ccl-tune.non-line-label: $(echo "$out" | tail -3 | tr '\n' '|' | cut -c1-400)"
    fi
    # The incumbent: what libccl runs today (here a CCL_TUNE_FILE row: ring with 2
    # instances at 1 and 2 KB; at 4 KB, no row: the sizes hints) is timed beside the
    # model's candidates, though the model keeps one shape only (pull), and named with
    # its time in the summary and each row's comment; every written row is the fastest
    # of the timed ones. --no-incumbent times the model's candidate alone.
    grep -E '^(ccl-tune-table|device|ranks|topology|version) ' "$tmp/cpu.tbl" >"$tmp/inc.tbl"
    printf 'allreduce 1K allreduce/ring.ccl 2 - 1 -\nallreduce 2K allreduce/ring.ccl 2 - 1 -\n' >>"$tmp/inc.tbl"
    few=(--backend cpu --ranks 4 -c allreduce -b 1K -e 4K --keep 1 --per-algo 1 --slack 1 --iters 2 --reps 1 --warmup 1 -v)
    out=$(CCL_TUNE_FILE="$tmp/inc.tbl" "$build/ccl-tune" "${few[@]}" -o "$tmp/inc-out.tbl" 2>&1)
    why=$(echo "$out" | awk -v tbl="$tmp/inc.tbl" -v written="$tmp/inc-out.tbl" '
        # -v timings: "  allreduce BYTES  FILE I=.. T=.. S=.. PROTO  TIME us"
        /^  allreduce [0-9]+  / { t = $(NF - 1); if (!($2 in best) || t + 0 < best[$2] + 0) best[$2] = t
                                  if ($3 == "allreduce/ring.ccl" && $4 == "I=2") ring[$2] = 1 }
        /^# incumbent: / { head = index($0, "the entries of " tbl ", else the sizes hints") > 0 }
        /^allreduce +[0-9]+  / { sum[$2] = $0 }
        END {
            for (s = 1024; s <= 4096; s *= 2) {
                if (s < 4096 && !ring[s]) { print s ": the incumbent ring I=2 was not timed"; exit }
                if (s < 4096 && sum[s] !~ /allreduce\/ring\.ccl I=2 .*\(the incumbent, kept\)$/ &&
                    sum[s] !~ /\(incumbent allreduce\/ring\.ccl I=2 T=- S=1 [a-z0-9]+: [0-9.]+ us\)$/) {
                    print s ": the summary does not name the incumbent ring I=2 and its time: " sum[s]; exit }
                if (s == 4096 && sum[s] !~ /\((the incumbent, kept|incumbent allreduce\/[a-z_]+\.ccl I=[0-9]+ T=- S=[0-9]+ [a-z0-9]+: [0-9.]+ us)\)$/) {
                    print s ": the summary does not name the hints incumbent: " sum[s]; exit }
                # The row written: the fastest timed, its comment naming the incumbent.
                cmd = "grep \"^allreduce " s " \" " written; row = ""; cmd | getline row; close(cmd)
                if (row !~ "# " best[s] " us \\((the incumbent, kept|incumbent .*: [0-9.]+ us)\\)$") {
                    print s ": the row is not the fastest timed (" best[s] " us) with the incumbent noted: " row; exit }
            }
            if (!head) print "no header line naming " tbl " as the incumbent"
        }')
    if [ -z "$why" ]; then
        echo "ok ccl-tune.incumbent"
    else
        echo "FAIL ccl-tune.incumbent: $why | $(echo "$out" | tail -4 | tr '\n' '|' | cut -c1-600)"
    fi
    out=$(CCL_TUNE_FILE="$tmp/inc.tbl" "$build/ccl-tune" "${few[@]}" --no-incumbent -o "$tmp/inc-out.tbl" 2>&1)
    if ! echo "$out" | grep -q 'allreduce/ring\.ccl I=2' && ! grep -q 'incumbent' "$tmp/inc-out.tbl" <(echo "$out") &&
       [ "$(grep -c '^allreduce ' "$tmp/inc-out.tbl")" -eq 3 ]; then
        echo "ok ccl-tune.no-incumbent"
    else
        echo "FAIL ccl-tune.no-incumbent: $(echo "$out" | tail -4 | tr '\n' '|' | cut -c1-600)"
    fi
    # Rows this run does not measure (another collective; a size outside -b..-e) are the
    # table in force's, kept: a table file replaces that table whole, so without them the
    # new file would send those calls back to the sizes hints.
    printf 'allgather 1K allgather/ring.ccl 2 - 1 -\nallreduce 64K allreduce/ring.ccl 4 - 1 -\n' >>"$tmp/inc.tbl"
    out=$(CCL_TUNE_FILE="$tmp/inc.tbl" "$build/ccl-tune" "${few[@]}" -o "$tmp/keep-out.tbl" 2>&1)
    if grep -q '^allgather 1024 allgather/ring.ccl 2 - 1 -  # kept from the table in force$' "$tmp/keep-out.tbl" &&
       grep -q '^allreduce 65536 allreduce/ring.ccl 4 - 1 -  # kept from the table in force$' "$tmp/keep-out.tbl" &&
       [ "$(grep -c '^allreduce [0-9]* .*# [0-9.]* us' "$tmp/keep-out.tbl")" -eq 3 ]; then
        echo "ok ccl-tune.keeps-rows"
    else
        echo "FAIL ccl-tune.keeps-rows: $(grep -v '^#' "$tmp/keep-out.tbl" | tr '\n' '|' | cut -c1-600)"
    fi
    # The table ccl-tune writes by default is the one libccl reads (the cache folder's):
    # a second run's incumbents are the first run's rows, read before it writes its own.
    mkdir -m 700 "$tmp/cache"
    for run in 1 2; do
        out=$(CCL_CACHE_DIR="$tmp/cache" "$build/ccl-tune" "${few[@]}" 2>&1)
    done
    cached="$tmp/cache/tune-cpu-4.tbl"
    if echo "$out" | grep -qF "# incumbent: libccl's choice today: the entries of $cached, else the sizes hints" &&
       [ "$(echo "$out" | grep '^  incumbent: allreduce ' | grep -cF " from $cached:")" -eq 3 ]; then
        echo "ok ccl-tune.incumbent.cache"
    else
        echo "FAIL ccl-tune.incumbent.cache: $(echo "$out" | grep incumbent | tr '\n' '|' | cut -c1-600)"
    fi
    # Bad arguments are usage errors (exit 2) with one line saying which.
    "$build/ccl-tune" --instances 0 >"$tmp/err" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -q 'instances' "$tmp/err"; then
        echo "ok ccl-tune.usage"
    else
        echo "FAIL ccl-tune.usage: exit $rc: $(head -2 "$tmp/err" | tr '\n' '|')"
    fi
    # Lists of integers are read by the harness (tool_int_list): each item as every tool
    # reads a number, one message naming the option and the list as written.
    for bad in "--instances 1,,2" "--instances 1,x" "--slices 65" "--threads 32,1K"; do
        "$build/ccl-tune" $bad >"$tmp/err" 2>&1
        rc=$?
        if [ $rc -eq 2 ] && grep -qF "ccl-tune: error: $bad: not a list of at most 16 integers in" "$tmp/err"; then
            echo "ok ccl-tune.list ${bad// /=}"
        else
            echo "FAIL ccl-tune.list $bad: exit $rc: $(head -2 "$tmp/err" | tr '\n' '|')"
        fi
    done
else
    echo "FAIL ccl-tune: $build/ccl-tune not built"
fi

# Without a table the library picks by `sizes` hints (the narrowest that holds the size).
# The hybrids (algorithms/*/hybrid.ccl) are untimed on several GPUs, so no hint choice
# may name them: their hints are wider than every sibling's. 4 KB .. 256 MB reaches
# the port programs' hint ranges (64 MB and up), allreduce at N = 3 (at 4,
# halving_doubling's narrower hint holds 256 MB); reduce_scatter has no port program.
if [ -x "$build/ccl-perf" ]; then
    for run in "allreduce 3" "allgather 4" "alltoall 4" "reduce_scatter 4"; do
        read -r coll n <<<"$run"
        picks=$("$build/ccl-perf" --backend cpu --ranks "$n" -c "$coll" -d u8 -b 4K -e 256M -f 16 -n 1 -w 1 2>&1 |
                awk '/^ +[0-9]/ { printf "%s:%s ", $1, $6 }')
        if [ -z "$picks" ]; then
            echo "FAIL library.hints.no-hybrid.$coll: ccl-perf printed no results"
        elif grep -q hybrid <<<"$picks"; then
            echo "FAIL library.hints.no-hybrid.$coll: the library picked a hybrid by its hint (size:algorithm): $picks"
        else
            echo "ok library.hints.no-hybrid.$coll"
        fi
    done
else
    echo "FAIL library.hints: $build/ccl-perf not built"
fi
exit 0
