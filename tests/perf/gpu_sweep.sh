#!/usr/bin/env bash
# The GPU machines' tables (docs/perf/README.md): ccl-perf under mpirun for every
# collective, the library's choice and every shipped algorithm, each dtype, with CUDA
# graphs, --check and NCCL side by side. Not part of `make check` (it needs GPUs).
#
#   tests/perf/gpu_sweep.sh BUILD OUTDIR NP
#
# Writes OUTDIR/COLL-NAME-DTYPE.{txt,csv,json,svg} (NAME: "library" or the algorithm's
# file name), OUTDIR/summary.txt (per run: at how many sizes we are faster than NCCL, in
# the faster of its two modes, and our worst ratio) and OUTDIR/README.md (the same as a table with links, and the
# commands). Algorithms that do not admit NP ranks (exit 2) are listed as
# skipped. Knobs (environment): SIZES ("-b 1K -e 1G -f 2"), DTYPES ("bf16 f32"),
# COLLS (the six collectives; alltoallv and sendrecv too, with ALGOS=library: ccl-perf
# runs no alltoallv file and sendrecv has none), CHECK ("--check"; empty to skip), METHOD ("--graph"; empty: eager),
# ALGOS ("library" plus every algorithms/COLL/*.ccl; "library" alone for a quick pass;
# "files" for the files alone),
# HINT ("--hint-range": an algorithm file is timed only at the sizes its `sizes` hint
# names; empty: the whole sweep), MPIRUN ("mpirun"), EXTRA (more ccl-perf options).
set -u
build=${1:?usage: tests/perf/gpu_sweep.sh BUILD OUTDIR NP}
out=${2:?usage: tests/perf/gpu_sweep.sh BUILD OUTDIR NP}
np=${3:?usage: tests/perf/gpu_sweep.sh BUILD OUTDIR NP}
cd "$(dirname "$0")/../.."
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
export CCL_ALGORITHM_DIR=${CCL_ALGORITHM_DIR:-$PWD/algorithms}
# Rows accumulate across invocations into one OUTDIR (a sweep split over several device
# calls, e.g. COLLS=... per call): rows.md and summary.txt are appended to, and the
# README is rebuilt from all rows each time (delete rows.md and summary.txt to start over).
summary=$out/summary.txt
rows=$out/rows.md
touch "$rows"
device=
# The build's own record (make writes it) over the tree's .git, which a copy of the tree
# on another machine may carry stale.
commit=$(cat "$build/commit.txt" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')
echo "# ccl-perf sweep, $np ranks, $(date -u +%Y-%m-%dT%H:%MZ): faster = sizes where our time < NCCL's (out-of-place / in-place)" >>"$summary"

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
            base=$out/$c-$name-$d
            echo "== $c $name $d"
            "${mpirun[@]}" -np "$np" "$build/ccl-perf" -c "$c" "${algo[@]}" "${sizes[@]}" -d "$d" "${method[@]}" \
                "${check[@]}" --compare nccl "${extra[@]}" --csv "$base.csv" --json "$base.json" --plot "$base.svg" \
                >"$base.txt" 2>"$base.err"
            rc=$?
            if [ $rc -eq 2 ]; then
                why=$(grep -m1 '^ccl-perf' "$base.err" || head -1 "$base.err")
                echo "$c $name $d: skipped: $why" | tee -a "$summary"
                rm -f "$base.txt" "$base.err" "$base.csv" "$base.json" "$base.svg"
                continue
            fi
            cat "$base.txt"
            [ -s "$base.err" ] || rm -f "$base.err"
            if [ $rc -ne 0 ]; then
                echo "$c $name $d: FAILED (exit $rc): $(head -c 300 "$base.err" 2>/dev/null; grep '^# \(FAILED\|REFUSED\)' "$base.txt")" | tee -a "$summary"
                continue
            fi
            # From the CSV's ccl lines: sizes faster than NCCL per placement, the worst ratio.
            read -r f0 n0 f1 n1 w0 at0 w1 at1 < <(awk -F, '
                NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                $col["impl"] == "ccl" && $col["ratio_vs_nccl"] != "" {
                    p = ($col["placement"] == "in-place"); r = $col["ratio_vs_nccl"] + 0
                    n[p]++; if (r < 1) f[p]++
                    if (!(p in worst) || r > worst[p]) { worst[p] = r; at[p] = $col["bytes"] }
                }
                END { printf "%d %d %d %d %.2f %s %.2f %s\n", f[0], n[0], f[1], n[1], worst[0], at[0] ? at[0] : "-",
                             worst[1], at[1] ? at[1] : "-" }' "$base.csv")
            [ -n "$device" ] || device=$(sed -n 's/.*"device": "\([^"]*\)".*/\1/p' "$base.json" | head -1)
            rel=$(basename "$base")
            if [ "$n0" -eq 0 ] && [ "$n1" -eq 0 ]; then
                echo "$c $name $d: no NCCL numbers (see the header of $rel.txt)" | tee -a "$summary"
                echo "| $c | $name | $d | no NCCL numbers | | | [svg]($rel.svg) [txt]($rel.txt) [csv]($rel.csv) |" >>"$rows"
            else
                echo "$c $name $d: faster at $f0/$n0 out-of-place, $f1/$n1 in-place; worst ratio $w0 at $at0 B (out), $w1 at $at1 B (in)" | tee -a "$summary"
                echo "| $c | $name | $d | $f0/$n0 | $f1/$n1 | $w0 at $at0 B | [svg]($rel.svg) [txt]($rel.txt) [csv]($rel.csv) |" >>"$rows"
            fi
        done
    done
done

# An index for docs/: what ran, how, and where we are faster than NCCL.
{
    echo "# ccl-perf: $np ranks${device:+, $device}"
    echo
    echo "Made $(date -u +%Y-%m-%d) by \`tests/perf/gpu_sweep.sh $build $out $np\` (build of commit $commit):"
    echo "every run is \`${mpirun[*]} -np $np $build/ccl-perf -c COLL [--algo algorithms/COLL/NAME.ccl ${hint[*]}] ${sizes[*]} -d DTYPE ${method[*]} ${check[*]} --compare nccl ${extra[*]}\`."
    echo "NCCL is timed on plain buffers and on symmetric windows (ncclMemAlloc + ncclCommWindowRegister, NCCL 2.27+; EXTRA=\"--nccl-mode plain\" for the first alone) and the faster of the two is the bar:"
    echo "faster = sizes where our time per op is below NCCL's; ratio = our time / NCCL's in its faster mode (below 1: faster); worst = the largest ratio."
    echo
    echo "| collective | ours | dtype | faster, out-of-place | faster, in-place | worst ratio (out-of-place) | files |"
    echo "|---|---|---|---|---|---|---|"
    cat "$rows"
    grep -E ': (skipped|FAILED)' "$summary" | sed 's/^/- /'
} >"$out/README.md"
echo "summary: $summary, index: $out/README.md"
