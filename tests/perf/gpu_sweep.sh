#!/usr/bin/env bash
# The GPU machines' tables (docs/perf/README.md): ccl-perf under mpirun, one process per
# GPU, for every collective, the library's choice and every shipped algorithm, each
# dtype and each kind of buffers, with CUDA graphs, --check and NCCL side by side. Not
# part of `make check` (it needs GPUs; without one it says so and exits 0).
#
#   tests/perf/gpu_sweep.sh BUILD OUTDIR [NP]
#
# NP: the ranks, one per GPU (default: every GPU nvidia-smi lists). Writes
# OUTDIR/COLL-NAME-DTYPE-BUFFERS.{txt,csv,json,svg} (NAME: "library" or the algorithm's
# file name; BUFFERS: "symmetric", "plain" or "registered", ccl-perf's --buffers), OUTDIR/summary.txt
# (per run: at how many sizes we are faster than NCCL, in the faster of its two modes,
# and our worst ratio) and OUTDIR/README.md (the same as a table with links, the
# commands, and per collective and buffer kind the sizes where our time is at or below
# NCCL's best, which the script also prints at the end). Algorithms that do not admit
# NP ranks (exit 2) are listed as skipped, and a run that outlives TIMEOUT as timed out.
# Knobs (environment): SIZES ("-b 1K -e 1G -f 2"), DTYPES ("bf16 f32"),
# COLLS (the six collectives; alltoallv, allgatherv and sendrecv too, with
# ALGOS=library: ccl-perf runs no v-collective file and sendrecv has none; for the
# v-collectives' Zipf counts EXTRA="--v-counts zipf", into an OUTDIR of their own, since
# file names do not say the counts; the CSVs' v_counts column does), BUFFERS
# ("symmetric plain registered": CCL's heap, ordinary cuMemAlloc memory that CCL
# stages, as a framework's tensors, and cuMemCreate memory as PyTorch's expandable
# segments make it, registered with ccl_mem_register; NCCL's plain mode runs on the same
# buffers), CHECK ("--check"; empty to skip), METHOD
# ("--graph"; empty: eager), ALGOS ("library" plus every algorithms/COLL/*.ccl;
# "library" alone for a quick pass; "files" for the files alone),
# HINT ("--hint-range": an algorithm file is timed only at the sizes its `sizes` hint
# names; empty: the whole sweep), TIMEOUT (seconds per ccl-perf run, 300), MPIRUN
# ("mpirun"), EXTRA (more ccl-perf options). NCCL_NVLS_ENABLE is 0; CCL_NCCL_LIB, when
# unset, is the libnccl of python's nvidia.nccl package where there is one (as
# bench/gpu-session.sh finds it).
set -u
usage="usage: tests/perf/gpu_sweep.sh BUILD OUTDIR [NP]"
build=${1:?$usage}
out=${2:?$usage}
cd "$(dirname "$0")/../.." || exit 1

# One process per GPU: no GPU, nothing to time.
if ! command -v nvidia-smi >/dev/null; then
    echo "gpu_sweep: no nvidia-smi on this machine, so no GPU to time on; nothing timed"
    exit 0
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$gpus" -eq 0 ]; then
    echo "gpu_sweep: nvidia-smi -L lists no GPU; nothing timed"
    exit 0
fi
np=${3:-$gpus}
read -r -a buffers <<<"${BUFFERS:-symmetric plain registered}"
for b in "${buffers[@]}"; do
    case $b in
    symmetric | plain | registered) ;;
    *) echo "gpu_sweep: BUFFERS=\"$BUFFERS\": '$b' is no kind of buffers (expected symmetric, plain or registered)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
read -r -a sizes <<<"${SIZES:--b 1K -e 1G -f 2}"
read -r -a dtypes <<<"${DTYPES:-bf16 f32}"
read -r -a colls <<<"${COLLS:-allreduce allgather reduce_scatter alltoall broadcast reduce}"
read -r -a check <<<"${CHECK---check}"
read -r -a method <<<"${METHOD---graph}"
read -r -a extra <<<"${EXTRA:-}"
read -r -a hint <<<"${HINT---hint-range}"
read -r -a mpirun <<<"${MPIRUN:-mpirun}"
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
tmo=${TIMEOUT:-300}
export CCL_ALGORITHM_DIR=${CCL_ALGORITHM_DIR:-$PWD/algorithms}
export NCCL_NVLS_ENABLE=0
if [ -z "${CCL_NCCL_LIB:-}" ]; then
    nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    [ -n "$nccl" ] && [ -f "$nccl/lib/libnccl.so.2" ] && export CCL_NCCL_LIB=$nccl/lib/libnccl.so.2
fi
# Rows accumulate across invocations into one OUTDIR (a sweep split over several device
# calls, e.g. COLLS=... per call): rows.md, atmost.md and summary.txt are appended to, and
# the README is rebuilt from all rows each time (delete them to start over).
summary=$out/summary.txt
rows=$out/rows.md
atmost=$out/atmost.md
touch "$rows" "$atmost"
device=
# The build's own record (make writes it) over the tree's .git, which a copy of the tree
# on another machine may carry stale.
commit=$(cat "$build/commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')
echo "# ccl-perf sweep, $np ranks, $(date -u +%Y-%m-%dT%H:%MZ), buffers ${buffers[*]}: faster = sizes where our time < NCCL's (out-of-place / in-place)" >>"$summary"

# From a run's CSV, its ccl lines with a ratio, per placement: how many sizes are faster
# than NCCL's best and how many were compared, the worst ratio and its size; then the
# sizes where ours is at or below NCCL's best (ratio <= 1) as ranges of consecutive
# sizes of the sweep ("1K-256K, 1G", or "-"; a size not compared ends a range), with
# how many of how many. Columns are found by name, so older CSVs (without the buffers
# column) read the same.
compare() {
    awk -F, '
        function human(b,   u, i) {
            split("K M G T", u, " ")
            for (i = 0; b >= 1024 && b % 1024 == 0 && i < 4; i++) b /= 1024
            return b (i ? u[i] : "")
        }
        function ranges(p,   i, s, first, prev) {
            s = ""; first = ""
            for (i = 1; i <= nsizes; i++) {
                if ((p, sizes[i]) in le) {
                    if (first == "") first = sizes[i]
                    prev = sizes[i]
                }
                if (first != "" && (!((p, sizes[i]) in le) || i == nsizes)) {
                    s = s (s == "" ? "" : ", ") human(first) (prev != first ? "-" human(prev) : "")
                    first = ""
                }
            }
            return s == "" ? "-" : s
        }
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        !($col["bytes"] in seen) { seen[$col["bytes"]] = 1; sizes[++nsizes] = $col["bytes"] }
        $col["impl"] == "ccl" && $col["ratio_vs_nccl"] != "" {
            p = ($col["placement"] == "in-place"); r = $col["ratio_vs_nccl"] + 0
            n[p]++
            if (r <= 1) { le[p, $col["bytes"]] = 1; leq[p]++ }
            if (r < 1) f[p]++
            if (!(p in worst) || r > worst[p]) { worst[p] = r; at[p] = $col["bytes"] }
        }
        END {
            printf "%d %d %d %d %.2f %s %.2f %s\t%s (%d/%d)\t%s (%d/%d)\n", f[0], n[0], f[1], n[1], worst[0],
                   at[0] ? at[0] : "-", worst[1], at[1] ? at[1] : "-", ranges(0), leq[0], n[0], ranges(1), leq[1], n[1]
        }' "$1"
}

for c in "${colls[@]}"; do
    if [ -n "${ALGOS:-}" ] && [ "$ALGOS" != files ]; then
        read -r -a names <<<"$ALGOS"
    else
        names=(library)
        [ "${ALGOS:-}" = files ] && names=()
        for f in algorithms/"$c"/*.ccl; do
            [ -e "$f" ] && names+=("$(basename "$f" .ccl)")
        done
    fi
    for name in "${names[@]}"; do
        algo=()
        [ "$name" = library ] || algo=(--algo "algorithms/$c/$name.ccl" "${hint[@]}")
        for d in "${dtypes[@]}"; do
            for b in "${buffers[@]}"; do
                base=$out/$c-$name-$d-$b
                run="$c $name $d $b"
                echo "== $run"
                # mpirun reads stdin: it gets none. timeout ends a hung run (TERM, which
                # mpirun passes to its ranks, then KILL 30 s later).
                timeout -k 30 "$tmo" "${mpirun[@]}" -np "$np" "$build/ccl-perf" -c "$c" "${algo[@]}" "${sizes[@]}" \
                    -d "$d" "${method[@]}" "${check[@]}" --compare nccl --buffers "$b" "${extra[@]}" \
                    --csv "$base.csv" --json "$base.json" --plot "$base.svg" >"$base.txt" 2>"$base.err" </dev/null
                rc=$?
                if [ $rc -eq 2 ]; then
                    why=$(grep -m1 '^ccl-perf' "$base.err" || head -1 "$base.err")
                    echo "$run: skipped: $why" | tee -a "$summary"
                    rm -f "$base.txt" "$base.err" "$base.csv" "$base.json" "$base.svg"
                    continue
                fi
                cat "$base.txt"
                [ -s "$base.err" ] || rm -f "$base.err"
                if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                    echo "$run: TIMED OUT after ${tmo}s (TIMEOUT; the sizes it finished are in $(basename "$base").txt)" |
                        tee -a "$summary"
                    continue
                fi
                if [ $rc -ne 0 ]; then
                    echo "$run: FAILED (exit $rc): $(head -c 300 "$base.err" 2>/dev/null; grep '^# \(FAILED\|REFUSED\)' "$base.txt")" | tee -a "$summary"
                    continue
                fi
                if [ ! -s "$base.csv" ]; then
                    echo "$run: FAILED: exit 0 but no $(basename "$base").csv" | tee -a "$summary"
                    continue
                fi
                IFS=$'\t' read -r counts le_out le_in < <(compare "$base.csv")
                read -r f0 n0 f1 n1 w0 at0 w1 at1 <<<"$counts"
                [ -n "$device" ] || device=$(sed -n 's/.*"device": "\([^"]*\)".*/\1/p' "$base.json" | head -1)
                rel=$(basename "$base")
                files="[svg]($rel.svg) [txt]($rel.txt) [csv]($rel.csv)"
                if [ "$n0" -eq 0 ] && [ "$n1" -eq 0 ]; then
                    echo "$run: no NCCL numbers (see the header of $rel.txt)" | tee -a "$summary"
                    echo "| $c | $name | $d | $b | no NCCL numbers | | | $files |" >>"$rows"
                else
                    echo "$run: faster at $f0/$n0 out-of-place, $f1/$n1 in-place; worst ratio $w0 at $at0 B (out), $w1 at $at1 B (in); at or below NCCL's best: $le_out out-of-place, $le_in in-place" | tee -a "$summary"
                    echo "| $c | $name | $d | $b | $f0/$n0 | $f1/$n1 | $w0 at $at0 B | $files |" >>"$rows"
                    echo "| $c | $name | $d | $b | $le_out | $le_in |" >>"$atmost"
                fi
            done
        done
    done
done

# An index for docs/: what ran, how, and where we are faster than NCCL. Rows of sweeps
# from before the buffers column (seven cells) were all symmetric.
{
    echo "# ccl-perf: $np ranks${device:+, $device}"
    echo
    echo "Made $(date -u +%Y-%m-%d) by \`tests/perf/gpu_sweep.sh $build $out $np\` (build of commit $commit):"
    echo "every run is \`${mpirun[*]} -np $np $build/ccl-perf -c COLL [--algo algorithms/COLL/NAME.ccl ${hint[*]}] ${sizes[*]} -d DTYPE ${method[*]} ${check[*]} --compare nccl --buffers BUFFERS ${extra[*]}\`."
    echo "NCCL is timed on plain buffers (ours: CCL's heap with \`--buffers symmetric\`, ordinary cuMemAlloc memory with \`--buffers plain\`, cuMemCreate memory registered with ccl_mem_register with \`--buffers registered\`) and on symmetric windows (ncclMemAlloc + ncclCommWindowRegister, NCCL 2.27+; EXTRA=\"--nccl-mode plain\" for the first alone) and the faster of the two is the bar:"
    echo "faster = sizes where our time per op is below NCCL's; ratio = our time / NCCL's in its faster mode (below 1: faster); worst = the largest ratio."
    echo
    echo "| collective | ours | dtype | buffers | faster, out-of-place | faster, in-place | worst ratio (out-of-place) | files |"
    echo "|---|---|---|---|---|---|---|---|"
    awk 'BEGIN { FS = OFS = "|" } NF == 9 { $4 = $4 "| symmetric " } { print }' "$rows"
    grep -E ': (skipped|FAILED|TIMED OUT)' "$summary" | sed 's/^/- /'
    echo
    echo "## Sizes where our time is at or below NCCL's best"
    echo
    echo "| collective | ours | dtype | buffers | out-of-place | in-place |"
    echo "|---|---|---|---|---|---|"
    cat "$atmost"
} >"$out/README.md"
echo
echo "Sizes where our time is at or below NCCL's best (every run in $out):"
column -t -s '|' "$atmost" 2>/dev/null || cat "$atmost"
echo "summary: $summary, index: $out/README.md"
