#!/usr/bin/env bash
# Diagnostics: each tests/diag/NAME.ccl is a wrong program; `cclc check` must print
# exactly tests/diag/NAME.expected on stderr (carets included) and exit with the status
# in its "# exit: E" line (default 1). "# ranks: N" picks N (default 4), "# nodes: M" the
# node count (default 1).
# UPDATE_GOLDEN=1 rewrites the .expected files from the current output.
set -u
build=$1
cd "$(dirname "$0")/../.."
for src in tests/diag/*.ccl; do
    name=$(basename "$src" .ccl)
    ranks=$(sed -n 's/^# ranks: *//p' "$src" | head -1)
    want_exit=$(sed -n 's/^# exit: *//p' "$src" | head -1)
    nodes=$(sed -n 's/^# nodes: *//p' "$src" | head -1)
    got=$(timeout 20 "$build/cclc" check "$src" --ranks "${ranks:-4}" --nodes "${nodes:-1}" 2>&1 >/dev/null)
    status=$?
    expected="tests/diag/$name.expected"
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
        printf '%s\n' "$got" >"$expected"
    fi
    if [ "$status" != "${want_exit:-1}" ]; then
        echo "FAIL diag/$name: exit status $status, expected ${want_exit:-1}"
        printf '%s\n' "$got" | sed 's/^/    /'
    elif [ "$got" != "$(cat "$expected" 2>/dev/null)" ]; then
        echo "FAIL diag/$name: message differs from $expected"
        diff <(printf '%s\n' "$got") "$expected" | sed 's/^/    /'
    else
        echo "ok diag/$name"
    fi
done
