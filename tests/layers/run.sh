#!/usr/bin/env bash
# The layers: includes and calls only go down the table of tests/layers/layers.txt, no
# files call or include each other in a loop, no source file is over the table's limit
# (tests/layers/check.py says how it reads the graph: `#include` lines checked against
# `cc -MM`, and `nm` of the build's object files). First the checker's own test: small
# trees, compiled here, with an upward call, an upward include, a loop, an exception that
# is not needed and a file in no layer, each of which it must report; and one clean tree
# it must pass.
#
#   tests/layers/run.sh BUILD
set -u
build=${1:?usage: tests/layers/run.sh BUILD}
cd "$(dirname "$0")/../.."
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A tree of four files in two layers: top.c and top.h over low.c and low.h; `extra`
# adds text to low.c, `table_extra` lines to the table, `top` replaces the top layer's
# patterns.
fixture() {
    local dir=$1 extra=$2 table_extra=$3 top=${4:-lib/top.c lib/top.h}
    mkdir -p "$dir/src/lib" "$dir/build/lib"
    printf 'int low_f(void);\n' >"$dir/src/lib/low.h"
    printf 'int top_f(void);\n' >"$dir/src/lib/top.h"
    printf '#include "low.h"\n#include "top.h"\nint top_f(void) { return low_f(); }\n' >"$dir/src/lib/top.c"
    printf '#include "low.h"\n%b\nint low_f(void) { return 1; }\n' "$extra" >"$dir/src/lib/low.c"
    printf 'scan lib\nlimit 20\nlayer top %s\nlayer low lib/low.c lib/low.h\n%b' "$top" "$table_extra" \
        >"$dir/layers.txt"
    echo "$cc -std=c11 -Ilib (fixture)" >"$dir/build/cflags.txt"
    for f in top low; do
        (cd "$dir/src" && $cc -std=c11 -Ilib -c -o "../build/lib/$f.o" "lib/$f.c") || return 1
    done
}

# Runs the checker on a fixture: it must exit `want` and print `text` (a fixed string).
selftest() {
    local name=$1 want=$2 text=$3 extra=$4 table_extra=$5 top=${6:-} dir=$tmp/$1
    if ! fixture "$dir" "$extra" "$table_extra" $top 2>"$dir.err"; then
        echo "FAIL layers/selftest-$name: the fixture does not compile: $(cat "$dir.err")"
        return
    fi
    local out rc
    out=$(python3 tests/layers/check.py --root "$dir/src" --build "$dir/build" --table "$dir/layers.txt" --cc "$cc" 2>&1)
    rc=$?
    if [ $rc != "$want" ]; then
        echo "FAIL layers/selftest-$name: exit $rc, expected $want: $out"
    elif ! grep -qF -- "$text" <<<"$out"; then
        echo "FAIL layers/selftest-$name: the report lacks '$text': $out"
    else
        echo "ok layers/selftest-$name"
    fi
}

selftest clean 0 "ok layers/loops" "" ""
selftest upward-call 1 "FAIL layers/upward-call: lib/low.c (layer low) -> lib/top.c (layer top, above it): calls top_f there" \
    'int top_f(void);\nint low_g(void) { return top_f(); }' ""
selftest loop 1 "FAIL layers/loops: a loop between 2 files: lib/low.c -> lib/top.c" \
    'int top_f(void);\nint low_g(void) { return top_f(); }' ""
selftest upward-include 1 "FAIL layers/upward-include: lib/low.c (layer low) -> lib/top.h (layer top, above it): includes it" \
    '#include "top.h"' ""
selftest stale-exception 1 "FAIL layers/exceptions: the table excepts lib/top.c -> lib/low.c, which goes down" \
    "" 'except lib/top.c -> lib/low.c: no reason\n'
selftest granted 0 "ok layers/exceptions" \
    'int top_f(void);\nint low_g(void) { return top_f(); }' 'except lib/low.c -> lib/top.c: the fixture says so\n'
selftest unplaced 1 "FAIL layers/placed: lib/top.h is in no layer" "" "" lib/top.c
selftest too-long 1 "FAIL layers/sizes: lib/low.c has" "$(printf '/* %s */\\n' $(seq 1 25))" ""

# The tree itself.
out=$(python3 tests/layers/check.py --root . --build "$build" --table tests/layers/layers.txt --cc "$cc" 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || grep -q '^FAIL ' <<<"$out" || echo "FAIL layers/check: check.py exited $rc: $out"
exit 0
