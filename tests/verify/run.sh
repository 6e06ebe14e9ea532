#!/usr/bin/env bash
# The verifier's tests: each tests/verify/NAME.ccl is checked with
#   cclc check tests/verify/NAME.ccl --ranks N [--root R]
# and its stderr must equal NAME.expected exactly. Wrong programs (each rejected for the
# reason its name and first comment give) expect their diagnostics and exit status 1;
# programs named ok_* expect an empty .expected and exit status 0, and where a
# NAME.explain file exists, `--explain` must print exactly it.
# The first line may say `# ranks: N` (default 4), `root: R` and `nodes: M` (default 1).
#
#   tests/verify/run.sh BUILD          run the tests
#   UPDATE_GOLDEN=1 tests/verify/run.sh BUILD   rewrite the .expected files
set -u
build=${1:?usage: tests/verify/run.sh BUILD}
cd "$(dirname "$0")/../.."
cclc=$build/cclc
if [ ! -x "$cclc" ]; then
    echo "FAIL verify: $cclc is not built"
    exit 0
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

for src in tests/verify/*.ccl; do
    name=$(basename "$src" .ccl)
    expected=${src%.ccl}.expected
    first=$(head -n 1 "$src")
    n=$(sed -n 's/^#.*ranks: *\([0-9][0-9]*\).*/\1/p' <<<"$first")
    root=$(sed -n 's/^#.*root: *\([0-9][0-9]*\).*/\1/p' <<<"$first")
    nodes=$(sed -n 's/^#.*nodes: *\([0-9][0-9]*\).*/\1/p' <<<"$first")
    args=(check "$src" --ranks "${n:-4}" --nodes "${nodes:-1}")
    [ -n "$root" ] && args+=(--root "$root")
    "$cclc" "${args[@]}" >/dev/null 2>"$tmp"
    rc=$?
    if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$tmp" "$expected"
        [ -f "${src%.ccl}.explain" ] && "$cclc" "${args[@]}" --explain >"${src%.ccl}.explain" 2>/dev/null
    fi
    want_rc=1
    case $name in ok_*) want_rc=0 ;; esac
    if [ ! -f "$expected" ]; then
        echo "FAIL $name: $expected is missing"
    elif [ "$rc" -ne "$want_rc" ]; then
        echo "FAIL $name: cclc exited with $rc, expected $want_rc"
        sed 's/^/    /' "$tmp" | head -n 20
    elif ! diff -u "$expected" "$tmp" >/dev/null; then
        echo "FAIL $name: diagnostics differ from $expected"
        diff -u "$expected" "$tmp" | sed 's/^/    /' | head -n 40
    elif [ -f "${src%.ccl}.explain" ] && ! "$cclc" "${args[@]}" --explain 2>/dev/null | diff -u "${src%.ccl}.explain" - >"$tmp"; then
        echo "FAIL $name: --explain differs from ${src%.ccl}.explain"
        sed 's/^/    /' "$tmp" | head -n 40
    else
        echo "ok $name"
    fi
done

# Speed: the proofs of the larger correct programs stay well under a second at N = 64.
for t in ok_ring ok_allpairs; do
    start=$(date +%s%N)
    if ! "$cclc" check "tests/verify/$t.ccl" --ranks 64 >/dev/null 2>"$tmp"; then
        echo "FAIL speed_$t: cclc check --ranks 64 failed"
        sed 's/^/    /' "$tmp" | head -n 10
        continue
    fi
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    if [ "$ms" -gt 1000 ]; then
        echo "FAIL speed_$t: cclc check --ranks 64 took ${ms} ms (limit 1000)"
    else
        echo "ok speed_$t (${ms} ms at N = 64)"
    fi
done
exit 0
