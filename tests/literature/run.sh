#!/usr/bin/env bash
# The literature folder: well-known algorithms from papers, written as their authors
# describe them (algorithms/literature/COLL/NAME.ccl; the folder below literature/ is
# the collective). Each must name its paper in its header comment (authors, title,
# venue and year), be proved by `cclc check` for every N in 2..16 that it admits (every
# root, for broadcast and reduce), admit at least one, and run on the CPU backend with
# real data (3 back-to-back calls, out of place and in place, the last rank as root) at
# up to three admitted N: the smallest, one that is not a power of two, and the largest
# up to 8.
#
# The runtime's library does not load these (it reads algorithms/COLL/*.ccl only, one
# folder deep), so they never replace a shipped default.
#
#   tests/literature/run.sh BUILD
set -u
build=${1:?usage: tests/literature/run.sh BUILD}
cd "$(dirname "$0")/../.."
cclc=$build/cclc
[ -x "$cclc" ] || { echo "FAIL literature: $cclc not built"; exit 0; }
count=0
for src in algorithms/literature/*/*.ccl; do
    [ -e "$src" ] || continue
    count=$((count + 1))
    coll=$(basename "$(dirname "$src")")
    name=literature/$coll/$(basename "$src" .ccl)
    header=$(grep -m1 '^algorithm' "$src")
    if ! grep -qE "^algorithm [A-Za-z0-9_]+ : $coll\$" <<<"$header"; then
        echo "FAIL $name: its header ('$header') does not name the collective of its folder, $coll"
        continue
    fi
    # The paper: a comment line before the header with a year in it.
    if ! sed -n '1,/^algorithm/p' "$src" | grep -qE '^#.*(19|20)[0-9][0-9]'; then
        echo "FAIL $name: the header comment names no paper (authors, title, venue, year)"
    fi
    admitted=()
    failed=0
    for n in $(seq 2 16); do
        roots=0
        [ "$coll" = broadcast ] || [ "$coll" = reduce ] && roots=$(seq 0 $((n - 1)))
        for root in $roots; do
            msg=$(timeout 60 "$cclc" check "$src" --ranks "$n" --root "$root" 2>&1)
            status=$?
            if [ "$status" = 2 ] && grep -qE "is for .* in .*, not|requires this for" <<<"$msg"; then
                break
            fi
            if [ "$status" != 0 ]; then
                echo "FAIL $name: cclc check --ranks $n --root $root exited $status"
                sed 's/^/    /' <<<"$msg" | head -12
                failed=1
                break 2
            fi
            [ "$root" = 0 ] && admitted+=("$n")
        done
    done
    [ "$failed" = 1 ] && continue
    if [ ${#admitted[@]} -eq 0 ]; then
        echo "FAIL $name: admits no N in 2..16"
        continue
    fi
    echo "ok $name: proved for N = ${admitted[*]}"
    # Runs: the smallest admitted N, one that is not a power of two, the largest <= 8.
    runs=("${admitted[0]}")
    for n in "${admitted[@]}"; do
        if [ $((n & (n - 1))) != 0 ] && [[ " ${runs[*]} " != *" $n "* ]]; then runs+=("$n"); break; fi
    done
    big=""
    for n in "${admitted[@]}"; do [ "$n" -le 8 ] && big=$n; done
    [ -n "$big" ] && [[ " ${runs[*]} " != *" $big "* ]] && runs+=("$big")
    for n in "${runs[@]}"; do
        for mode in "" --inplace; do
            got=$(timeout 120 "$cclc" run "$src" --ranks "$n" --backend cpu --iters 3 --count 1001 \
                  --dtype bf16 --root $((n - 1)) $mode 2>&1)
            if [ $? = 0 ]; then
                echo "ok $name run n=$n${mode:+ in-place}"
            else
                echo "FAIL $name run n=$n${mode:+ in-place}"
                sed 's/^/    /' <<<"$got" | tail -8
            fi
        done
    done
done
[ "$count" -ge 6 ] || echo "FAIL literature: $count algorithms, at least 6 expected"
# A .ccl directly in algorithms/literature/ would be one folder deep, where the runtime's
# library loads defaults from (runtime/src/library.c): keep them a folder deeper.
stray=$(ls algorithms/literature/*.ccl 2>/dev/null)
if [ -n "$stray" ]; then
    echo "FAIL literature: $stray would be loaded by the library as a default; move it to algorithms/literature/COLL/"
else
    echo "ok literature: none in the library's default set"
fi
exit 0
