#!/usr/bin/env bash
# Install suite (seconds): `make install` into a temporary PREFIX, as a user outside the
# tree would find it.
#   - layout: the programs, headers, libccl.so (its soname link too) and libccl.a,
#     ccl.pc and every shipped algorithm, with modes libccl's trust rules accept;
#   - pkg-config reads ccl.pc (--cflags --libs, and --static adding libccl.a's needs);
#   - DESTDIR stages the same files under it, with PREFIX's paths in ccl.pc;
#   - make uninstall removes every file it installed.
# Prints "ok NAME" or "FAIL NAME: why" per test.
#
#   tests/install/run.sh BUILD
set -u
build=${1:?usage: tests/install/run.sh BUILD}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

if ! command -v pkg-config >/dev/null; then
    echo "FAIL install: pkg-config is missing (make deps installs it)"
    exit 0
fi

# make_in NAME ARGS...: make install (or uninstall) into the build folder's objects;
# its output is shown only when it fails. A make running this suite passes its flags
# (BUILD, OPT) down through MAKEFLAGS.
make_in() {
    local name=$1
    shift
    if make --no-print-directory BUILD="$build" INSTALL_DEPS=: "$@" >"$tmp/make.log" 2>&1; then
        return 0
    fi
    echo "FAIL $name: make $* failed:"
    tail -20 "$tmp/make.log" | sed 's/^/    /'
    return 1
}

# The files make install must put under a prefix, as "MODE PATH" sorted; links as "link PATH -> TARGET".
expected() {
    local major version
    major=$(sed -n 's/^#define CCL_VERSION_MAJOR \([0-9]*\)$/\1/p' runtime/include/ccl.h)
    version=$major.$(sed -n 's/^#define CCL_VERSION_MINOR \([0-9]*\)$/\1/p' runtime/include/ccl.h)
    version=$version.$(sed -n 's/^#define CCL_VERSION_PATCH \([0-9]*\)$/\1/p' runtime/include/ccl.h)
    {
        for p in cclc ccl-perf ccl-tune; do echo "755 bin/$p"; done
        echo "644 include/ccl.h"
        echo "644 include/ccl_mpi.h"
        echo "644 lib/libccl.a"
        echo "755 lib/libccl.so.$version"
        echo "link lib/libccl.so.$major -> libccl.so.$version"
        echo "link lib/libccl.so -> libccl.so.$major"
        echo "644 lib/pkgconfig/ccl.pc"
        for d in algorithms/*/; do echo "755 share/ccl/${d%/}"; done
        echo "755 share/ccl/algorithms"
        for f in algorithms/*/*.ccl; do echo "644 share/ccl/$f"; done
    } | sort
}
# What is under a prefix, in the same form (folders that hold no file of ours left out).
found() {
    (cd "$1" && find . -mindepth 1 \( -type l -printf 'link %P -> %l\n' \) -o \( -type f -printf '%m %P\n' \) \
        -o \( -type d -path './share/ccl/algorithms*' -printf '%m %P\n' \)) | sort
}

expected >"$tmp/expected"
if make_in install install PREFIX="$prefix"; then
    found "$prefix" >"$tmp/found"
    if diff -u "$tmp/expected" "$tmp/found" >"$tmp/diff"; then
        echo "ok install.layout"
    else
        echo "FAIL install.layout: the installed files differ (- expected, + installed):"
        sed -n '3,$p' "$tmp/diff" | grep '^[-+]' | sed 's/^/    /'
    fi

    export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
    got=$(pkg-config --cflags --libs ccl 2>&1 | xargs)
    want="-I$prefix/include -L$prefix/lib -lccl"
    [ "$got" = "$want" ] && echo "ok install.pkg-config" ||
        echo "FAIL install.pkg-config: pkg-config --cflags --libs ccl gives '$got', expected '$want'"
    got=$(pkg-config --static --libs ccl 2>&1 | xargs)
    want="-L$prefix/lib -lccl -pthread -ldl -lm -lrt"
    [ "$got" = "$want" ] && echo "ok install.pkg-config.static" ||
        echo "FAIL install.pkg-config.static: pkg-config --static --libs ccl gives '$got', expected '$want'"
    got=$(pkg-config --variable=algorithmdir ccl)
    [ "$got" = "$prefix/share/ccl/algorithms" ] && echo "ok install.pkg-config.algorithmdir" ||
        echo "FAIL install.pkg-config.algorithmdir: '$got', expected '$prefix/share/ccl/algorithms'"
    unset PKG_CONFIG_PATH

    if make_in uninstall uninstall PREFIX="$prefix"; then
        left=$(cd "$prefix" && find . -mindepth 1 ! -type d -printf '%P\n'; find . -path './share/ccl*' -printf '%P\n')
        [ -z "$left" ] && echo "ok uninstall" || echo "FAIL uninstall: left behind under $prefix:" $left
    fi
fi

# DESTDIR: the files land under it at PREFIX's paths, and ccl.pc names PREFIX.
if make_in install.destdir install DESTDIR="$tmp/stage" PREFIX=/opt/ccl; then
    found "$tmp/stage/opt/ccl" >"$tmp/found"
    if ! diff -q "$tmp/expected" "$tmp/found" >/dev/null; then
        echo "FAIL install.destdir: the files under DESTDIR/PREFIX differ from a plain install's"
    elif ! grep -qx 'libdir=/opt/ccl/lib' "$tmp/stage/opt/ccl/lib/pkgconfig/ccl.pc"; then
        echo "FAIL install.destdir: ccl.pc does not say libdir=/opt/ccl/lib:" $(grep '^libdir' "$tmp/stage/opt/ccl/lib/pkgconfig/ccl.pc")
    else
        echo "ok install.destdir"
    fi
fi
exit 0
