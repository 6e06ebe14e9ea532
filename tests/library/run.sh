#!/usr/bin/env bash
# Library suite (seconds): what libccl shows a program that links it.
#   - libccl.so exports exactly the functions ccl.h declares (runtime/libccl.map), under
#     the soname libccl.so.MAJOR, and a program linked against it runs;
#   - ccl_version() agrees with the header, linked statically and dynamically;
#   - every global symbol libccl.a or libccl.so defines is one of ccl.h's functions or
#     carries an internal prefix: ccl__ (the runtime), cclc_ (the compiler, its parser
#     cclc_yy), so none can clash with a user's own names.
# Prints "ok NAME" or "FAIL NAME: why" per test.
#
#   tests/library/run.sh BUILD
set -u
build=${1:?usage: tests/library/run.sh BUILD}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
so=$build/libccl.so

if [ ! -e "$so" ]; then
    echo "FAIL library: $so not built"
    exit 0
fi

# The functions ccl.h declares: every "ccl_name(" at the start of a declaration's name.
grep -o '\bccl_[a-z0-9_]*(' runtime/include/ccl.h | tr -d '(' | sort -u >"$tmp/api"
nm -D --defined-only "$so" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u >"$tmp/exported"
if diff -u "$tmp/api" "$tmp/exported" >"$tmp/diff"; then
    echo "ok so.exports"
else
    echo "FAIL so.exports: libccl.so's exports differ from ccl.h's functions (- only in ccl.h, + only exported):"
    sed -n '3,$p' "$tmp/diff" | grep '^[-+]' | sed 's/^/    /'
fi

# Global symbols outside the allowed names, per library ("NAME (where)" lines).
stray() {
    nm -g --defined-only "$@" 2>/dev/null | awk 'NF == 3 && $2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u |
        grep -v -x -F -f "$tmp/api" | grep -v -E '^(ccl__|cclc_)' || true
}
for lib in "$build/libccl.a" "$so"; do
    name=prefixes.${lib##*.}
    bad=$(stray "$lib")
    if [ -z "$bad" ]; then
        echo "ok $name"
    else
        echo "FAIL $name: $lib defines $(echo "$bad" | wc -l) global symbols that are neither ccl.h's nor prefixed ccl__ or cclc_:" \
            $(echo "$bad" | head -40)
    fi
done

major=$(sed -n 's/^#define CCL_VERSION_MAJOR \([0-9]*\)$/\1/p' runtime/include/ccl.h)
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')
if [ "$soname" = "libccl.so.$major" ] && [ -e "$build/$soname" ]; then
    echo "ok so.soname"
else
    echo "FAIL so.soname: libccl.so's soname is '$soname', expected libccl.so.$major (next to it in $build)"
fi

if readelf -d "$so" | grep -q TEXTREL; then
    echo "FAIL so.pic: libccl.so has text relocations (an object built without -fPIC)"
else
    echo "ok so.pic"
fi

"$build/tests/library/version" version.static || true
if cc -std=c11 -Iruntime/include -o "$tmp/version" tests/library/version.c -L"$build" -lccl 2>"$tmp/cc.log"; then
    LD_LIBRARY_PATH=$build "$tmp/version" version.shared || true
else
    echo "FAIL version.shared: linking against $so failed: $(head -c 2000 "$tmp/cc.log")"
fi
exit 0
