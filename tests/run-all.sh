#!/usr/bin/env bash
# Runs every CPU test suite (tests/*/run.sh) and prints one closing line: "N passed, N failed".
#
#   tests/run-all.sh BUILD [SUITE...]
#
# Each suite is a script that takes the build folder, prints "ok NAME" or
# "FAIL NAME: why" per test (and anything else it likes), and exits 0.
# UPDATE_GOLDEN=1 makes suites that compare against golden files rewrite them.
set -u
build=${1:?usage: tests/run-all.sh BUILD [SUITE...]}
shift
cd "$(dirname "$0")/.."
# The CPU suites: the same runs on a machine with GPUs (make check-gpu is theirs).
export CCL_BACKEND=cpu
suites=("$@")
if [ ${#suites[@]} -eq 0 ]; then
    for s in tests/*/run.sh; do suites+=("$(basename "$(dirname "$s")")"); done
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for s in "${suites[@]}"; do
    [ -x "tests/$s/run.sh" ] || { echo "FAIL suite $s: tests/$s/run.sh missing"; echo "FAIL suite $s" >>"$log"; continue; }
    echo "== $s"
    start=$(date +%s)
    "tests/$s/run.sh" "$build" 2>&1 | tee -a "$log" | grep -v '^ok ' || true
    echo "   ($s: $(grep -c '^ok ' <(sed -n '/^== /!p' "$log") ) ok so far, $(( $(date +%s) - start ))s)"
done
. tests/summary.sh
ccl_test_summary "$log"
