#!/usr/bin/env bash
# Replays the fuzzing corpus (tests/fuzz/corpus: seeds and inputs that once crashed or
# hung) through `cclc check` for a few N. Every input must end with status 0, 1 or 2
# within the time limit: no crash, no sanitizer report, no hang. Under `make asan` this
# is the front end's memory-safety regression test.
set -u
build=$1
cd "$(dirname "$0")/../.."
bad=0
n=0
# Generated inputs too large to keep in the tree: a 1 MB line, deep nesting.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{ printf 'algorithm a : allreduce\nranks N in 2..8\nlet '; head -c 1048576 /dev/zero | tr '\0' x; printf ' = 1\n'; } >"$tmp/long_line"
{ printf 'algorithm a : allreduce\nranks N in 2..8\n'; for i in $(seq 3000); do printf 'if 1 { '; done; } >"$tmp/deep_blocks"
# 12000 steps that reach the verifier (puts, signals, waits and reduces on every rank).
{
    printf 'algorithm gen : allreduce\nranks N in 2..16\nchunks N\nscratch stage[N]\nfor r in 0..N on r tb 0 {\n'
    printf '  let next = (r + 1) %% N\n  let prev = (r - 1) %% N\n'
    for i in $(seq 3000); do
        printf '  put stage@next[%d %% N] <- in[r]\n  signal next\n  wait prev\n' "$i"
        printf '  reduce out[(r + %d) %% N] <- in[(r + %d) %% N], stage[%d %% N]\n' "$i" "$i" "$i"
    done
    printf '}\n'
} >"$tmp/many_steps"
for f in tests/fuzz/corpus/* tests/diag/*.ccl "$tmp"/*; do
    for ranks in 1 3 4; do
        n=$((n + 1))
        out=$(timeout 20 "$build/cclc" check "$f" --ranks $ranks 2>&1 >/dev/null)
        status=$?
        if [ $status -gt 2 ] || grep -q 'Sanitizer\|runtime error' <<<"$out"; then
            echo "FAIL fuzz/$(basename "$f") --ranks $ranks: status $status"
            printf '%s\n' "$out" | head -20 | sed 's/^/    /'
            bad=1
        fi
    done
done
[ $bad = 0 ] && echo "ok fuzz/corpus ($n runs)"
