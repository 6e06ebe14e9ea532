#!/usr/bin/env bash
# The shipped algorithm library: every algorithms/COLL/NAME.ccl must be proved by
# `cclc check` for every N in 2..8 that it admits (and, for broadcast and reduce, for
# every root), and its plan must match the golden files.
#
#   tests/algorithms/run.sh BUILD
#
# Admission: `cclc check` exits 2 with "is for N in ..." or "requires this for N = ..."
# when the `ranks`/`where` lines exclude N; any other exit-2 message is a failure.
# Each algorithm must admit at least one N in 2..8.
#
# Properties: at every admitted N, `cclc check --explain` must report the algorithm
# deterministic, pipeline-safe and valid in place (or in-place not applicable).
#
# Runs: at the same N as the golden plans, `cclc run` on the CPU backend (3 back-to-back
# calls, out of place and in place) must check every element.
#
# Golden plans: `cclc plan FILE --ranks N` for N = 4 and one more admitted N (3 when
# admitted, else 8, else 2) is compared with tests/algorithms/golden/COLL-NAME.nN.plan.
# UPDATE_GOLDEN=1 rewrites them (and removes goldens of algorithms that are gone).
#
# Programs for several nodes (a `nodes M x L` line: docs/multinode.md) are proved instead
# for every M in 2..8 and L in 1..8 (`--ranks M*L --nodes M`; broadcast and reduce for
# every root too: 1,260 checks each, about 5 s of CPU) with the same properties, and their golden
# plans are 2 x 2 and 3 x 2 (COLL-NAME.m2l2.plan); they run end to end
# under mpirun in tests/multinode, not here.
set -u
build=${1:?usage: tests/algorithms/run.sh BUILD}
cd "$(dirname "$0")/../.."
cclc=$build/cclc
golden=tests/algorithms/golden
[ -x "$cclc" ] || { echo "FAIL algorithms: $cclc not built"; exit 0; }
mkdir -p "$golden"

wanted_goldens=()
# golden_plan LABEL FILE GOT: GOT (a `cclc plan` output) against the golden FILE, which
# UPDATE_GOLDEN=1 rewrites; says ok or FAIL with LABEL.
golden_plan() {
    local label=$1 file=$2 got=$3
    wanted_goldens+=("$file")
    [ "${UPDATE_GOLDEN:-}" = 1 ] && printf '%s\n' "$got" >"$file"
    if [ ! -f "$file" ]; then
        echo "FAIL $label: $file is missing (make update-golden writes it)"
    elif [ "$got" != "$(cat "$file")" ]; then
        echo "FAIL $label: differs from $file"
        diff <(printf '%s\n' "$got") "$file" | head -20 | sed 's/^/    /'
    else
        echo "ok $label"
    fi
}
# The properties' lines of `cclc check --explain` (never its first line), matched in the
# shell: the multi-node grid runs some 5,000 checks, and a grep each would double its time.
re_deterministic=$'\n *deterministic: *yes'
re_pipeline=$'\n *pipeline-safe: *yes'
re_inplace=$'\n *in-place: *(yes|not applicable)'
for src in algorithms/*/*.ccl; do
    coll=$(basename "$(dirname "$src")")
    name=$coll/$(basename "$src" .ccl)
    gname=$coll-$(basename "$src" .ccl)
    admitted=()
    failed=0
    if grep -q '^nodes ' "$src"; then
        bad=""
        rooted=""
        [ "$coll" = broadcast ] || [ "$coll" = reduce ] && rooted=1
        for m in 2 3 4 5 6 7 8; do
            for l in 1 2 3 4 5 6 7 8; do
                roots=0
                [ -n "$rooted" ] && roots=$(seq 0 $((m * l - 1)))
                for root in $roots; do
                    explain=$(timeout 60 "$cclc" check "$src" --ranks $((m * l)) --nodes $m --root "$root" --explain 2>&1)
                    status=$?
                    why=""
                    [ "$status" = 0 ] || why="cclc check exited $status"
                    [[ $explain =~ $re_deterministic ]] || why="${why:+$why, }not deterministic"
                    [[ $explain =~ $re_pipeline ]] || why="${why:+$why, }not pipeline-safe"
                    [[ $explain =~ $re_inplace ]] || why="${why:+$why, }not valid in place"
                    if [ -n "$why" ]; then
                        bad="$bad ${m}x$l${rooted:+/root$root}"
                        [ "$(wc -w <<<"$bad")" -le 1 ] && { echo "    ${m}x$l root $root: $why"; head -5 <<<"$explain" | sed 's/^/    /'; }
                    fi
                done
            done
        done
        if [ -n "$bad" ]; then
            echo "FAIL $name: not proved with its properties for M x L =$bad"
        else
            echo "ok $name: proved for M x L = 2..8 x 1..8${rooted:+ and every root}, deterministic, pipeline-safe, in-place valid"
        fi
        for ml in 2:2 3:2; do
            m=${ml%:*} l=${ml#*:}
            golden_plan "$name plan ${m}x$l" "$golden/$gname.m${m}l$l.plan" \
                "$("$cclc" plan "$src" --ranks $((m * l)) --nodes "$m" 2>&1)"
        done
        continue
    fi
    for n in 2 3 4 5 6 7 8; do
        roots=0
        [ "$coll" = broadcast ] || [ "$coll" = reduce ] && roots=$(seq 0 $((n - 1)))
        for root in $roots; do
            msg=$(timeout 60 "$cclc" check "$src" --ranks "$n" --root "$root" 2>&1)
            status=$?
            if [ "$status" = 2 ] && grep -qE "is for .* in .*, not|requires this for" <<<"$msg"; then
                break  # not admitted: the same for every root
            fi
            if [ "$status" != 0 ]; then
                echo "FAIL $name: cclc check --ranks $n --root $root exited $status"
                sed 's/^/    /' <<<"$msg" | head -20
                failed=1
                break
            fi
            [ "$root" = 0 ] && admitted+=("$n")
        done
    done
    if [ ${#admitted[@]} -eq 0 ] && [ "$failed" = 0 ]; then
        echo "FAIL $name: admits no N in 2..8"
        continue
    fi
    [ "$failed" = 0 ] && echo "ok $name: proved for N = ${admitted[*]}"

    # The library's promises beyond correctness, at every admitted N: the same bits on
    # every rank (deterministic), slicing allowed (pipeline-safe), and in-place calls
    # valid wherever the collective has an in-place form.
    props_ok=1
    for n in "${admitted[@]}"; do
        explain=$("$cclc" check "$src" --ranks "$n" --explain 2>&1)
        why=""
        grep -q "^ *deterministic: *yes" <<<"$explain" || why="not deterministic"
        grep -q "^ *pipeline-safe: *yes" <<<"$explain" || why="${why:+$why, }not pipeline-safe"
        grep -qE "^ *in-place: *(yes|not applicable)" <<<"$explain" || why="${why:+$why, }not valid in place"
        if [ -n "$why" ]; then
            echo "FAIL $name properties n=$n: $why"
            props_ok=0
            grep -E "deterministic|pipeline-safe|in-place" <<<"$explain" | sed 's/^/    /'
        fi
    done
    [ "$props_ok" = 1 ] && [ ${#admitted[@]} -gt 0 ] && echo "ok $name: deterministic, pipeline-safe, in-place valid"

    # Golden plans for N = 4 and one more admitted N.
    plan_ns=()
    for n in 4 3 8 2; do
        if [[ " ${admitted[*]} " == *" $n "* ]] && [ ${#plan_ns[@]} -lt 2 ]; then
            plan_ns+=("$n")
        fi
    done
    # End to end on the CPU backend: real data, back-to-back calls, every element
    # checked; an uneven count exercises short tail chunks, the last rank as root a
    # tree that is not rooted at 0.
    # allgatherv and alltoallv have no in-place form: seeded uneven counts (zeros
    # included), synchronized and back to back.
    modes=("" --inplace)
    case $coll in allgatherv | alltoallv) modes=("" --back-to-back) ;; esac
    for n in "${plan_ns[@]}"; do
        for mode in "${modes[@]}"; do
            got=$(timeout 120 "$cclc" run "$src" --ranks "$n" --backend cpu --iters 3 --count 1001 \
                  --dtype bf16 --root $((n - 1)) $mode 2>&1)
            status=$?
            if [ "$status" = 0 ]; then
                echo "ok $name run n=$n${mode:+ $mode}"
            else
                echo "FAIL $name run n=$n${mode:+ $mode}: cclc run exited $status"
                sed 's/^/    /' <<<"$got" | tail -10
            fi
        done
    done

    for n in "${plan_ns[@]}"; do
        file=$golden/$gname.n$n.plan
        got=$("$cclc" plan "$src" --ranks "$n" 2>&1)
        status=$?
        if [ "$status" != 0 ]; then
            wanted_goldens+=("$file")
            echo "FAIL $name plan n=$n: cclc plan exited $status"
            sed 's/^/    /' <<<"$got" | head -10
            continue
        fi
        golden_plan "$name plan n=$n" "$file" "$got"
    done
done

# The complete programs in docs/language.md (fenced blocks that start with `algorithm`
# and have an `on`) must stay true: each is checked for N = 4. A program followed by a
# `$ cclc check ...` block that shows an error must fail with that first error (file
# name aside); any other must be proved.
tmp=$(mktemp -d)
awk -v dir="$tmp" '/^```/ { if (f) { n++; printf "%s", buf > (dir "/block" sprintf("%03d", n));
                                      print start > (dir "/line" sprintf("%03d", n)) }
                           f = !f; buf = ""; start = NR + 1; next }
                   f { buf = buf $0 "\n" }' docs/language.md
nexamples=0
for block in "$tmp"/block*; do
    head -1 "$block" | grep -q '^algorithm' && grep -qE '[[:space:]]on[[:space:]]' "$block" || continue
    nexamples=$((nexamples + 1))
    label="docs/language.md example $nexamples (line $(cat "${block/block/line}"))"
    next=$(ls "$tmp"/block* | awk -v b="$block" 'found { print; exit } $0 == b { found = 1 }')
    want=""
    if [ -n "$next" ] && head -1 "$next" | grep -q '^\$ cclc check'; then
        want=$(grep -m1 ': error: ' "$next" | sed 's/^[^ ]*\.ccl:/FILE:/')
    fi
    cp "$block" "$tmp/example.ccl"
    msg=$("$cclc" check "$tmp/example.ccl" --ranks 4 2>&1)
    status=$?
    got=$(grep -m1 ': error: ' <<<"$msg" | sed 's/^[^ ]*\.ccl:/FILE:/')
    if [ -z "$want" ] && [ "$status" = 0 ]; then
        echo "ok $label: proved"
    elif [ -n "$want" ] && [ "$status" = 1 ] && [ "$got" = "$want" ]; then
        echo "ok $label: fails as the text shows"
    elif [ -n "$want" ]; then
        echo "FAIL $label: the text shows an error that cclc no longer prints"
        echo "    text: $want"
        echo "    cclc: ${got:-exit status $status, no error}"
    else
        echo "FAIL $label: not proved for N = 4"
        sed 's/^/    /' <<<"$msg" | head -10
    fi
done
[ "$nexamples" -gt 0 ] || echo "FAIL docs/language.md: no complete example program found"
rm -rf "$tmp"

# Goldens of algorithms that no longer exist would silently rot.
for file in "$golden"/*.plan; do
    [ -e "$file" ] || continue
    if [[ " ${wanted_goldens[*]} " != *" $file "* ]]; then
        if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
            rm -f "$file"
        else
            echo "FAIL algorithms golden: $file belongs to no algorithm (make update-golden removes it)"
        fi
    fi
done
exit 0
