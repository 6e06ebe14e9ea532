#!/usr/bin/env bash
# Install suite (seconds): `make install` into a temporary PREFIX, and programs outside
# the tree that use it as a user would.
#   - layout: the programs, headers, libccl.so (its soname link too) and libccl.a,
#     ccl.pc and every shipped algorithm, with modes libccl's trust rules accept;
#   - pkg-config reads ccl.pc (--cflags --libs, and --static adding libccl.a's needs)
#     and ccl-static.pc (libccl.a by its path);
#   - a program built outside the tree (tests/install/prog.c) with
#     `cc prog.c $(pkg-config --cflags --libs ccl)`, and once statically with libccl.a
#     through `pkg-config --cflags --libs ccl-static`, runs an all-reduce on 2-4 CPU ranks with no variable but
#     LD_LIBRARY_PATH: libccl finds the installed algorithms by itself (next to
#     libccl.so, or compiled into the installed libccl.a), also with libccl.a linked
#     into a shared object the program uses (as a Python extension would); the shared
#     one again after the prefix was moved; and it refuses them once others can write
#     their folder;
#   - libccl_nccl.so (NCCL's API over libccl) with its links, ccl_nccl/nccl.h and
#     ccl-nccl.pc: a program written against nccl.h, built outside the tree with
#     `cc prog.c $(pkg-config --cflags --libs ccl-nccl)`, runs collectives on 2 CPU ranks
#     (libccl_nccl finds the installed libccl.so next to it, libccl its algorithms);
#   - make uninstall removes every file it installed;
#   - the build folder's libccl.so, used by a program outside the tree, finds the
#     algorithms of its source tree;
#   - DESTDIR stages the same files under it, with PREFIX's paths in ccl.pc and compiled
#     into the libraries.
# Prints "ok NAME" or "FAIL NAME: why" per test.
#
#   tests/install/run.sh BUILD
set -u
build=${1:?usage: tests/install/run.sh BUILD}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
user=$tmp/user        # the user's folder, outside the tree: their program and its build

if ! command -v pkg-config >/dev/null; then
    echo "FAIL install: pkg-config is missing (make deps installs it)"
    exit 0
fi
if [ ! -e "$build/libccl.so" ]; then
    echo "FAIL install: $build/libccl.so not built"
    exit 0
fi
build_dir=$(cd "$build" && pwd)
mkdir -p "$user"
cp tests/install/prog.c "$user/"

version_part() { sed -n "s/^#define CCL_VERSION_$1 \([0-9]*\)$/\1/p" runtime/include/ccl.h; }
major=$(version_part MAJOR)
version=$major.$(version_part MINOR).$(version_part PATCH)

# make_in NAME ARGS...: make with the build folder's objects; its output is shown only
# when it fails. A make running this suite passes its flags (OPT) down in MAKEFLAGS.
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

# The files make install must put under a prefix, "MODE PATH" (links "link PATH -> TARGET"), sorted.
expected() {
    {
        for p in cclc ccl-perf ccl-tune; do echo "755 bin/$p"; done
        echo "644 include/ccl.h"
        echo "644 include/ccl_mpi.h"
        echo "644 lib/libccl.a"
        echo "755 lib/libccl.so.$version"
        echo "link lib/libccl.so.$major -> libccl.so.$version"
        echo "link lib/libccl.so -> libccl.so.$major"
        echo "644 lib/pkgconfig/ccl.pc"
        echo "644 lib/pkgconfig/ccl-static.pc"
        echo "755 lib/libccl_nccl.so.$version"
        echo "link lib/libccl_nccl.so.$major -> libccl_nccl.so.$version"
        echo "link lib/libccl_nccl.so -> libccl_nccl.so.$major"
        echo "644 include/ccl_nccl/nccl.h"
        echo "644 lib/pkgconfig/ccl-nccl.pc"
        echo "755 share/ccl/algorithms"
        for d in algorithms/*/ algorithms/literature/*/; do echo "755 share/ccl/${d%/}"; done
        for f in algorithms/*/*.ccl algorithms/literature/*/*.ccl; do echo "644 share/ccl/$f"; done
    } | sort
}
# What is under a prefix, in the same form (folders outside share/ccl left out).
found() {
    (cd "$1" && find . -mindepth 1 \( -type l -printf 'link %P -> %l\n' \) -o \( -type f -printf '%m %P\n' \) \
        -o \( -type d -path './share/ccl/algorithms*' -printf '%m %P\n' \)) | sort
}

# build NAME EXE CC-ARGS...: cc prog.c in the user's folder; 0 when it built.
build_prog() {
    local name=$1 exe=$2
    shift 2
    (cd "$user" && cc -std=c11 -Wall -Werror -o "$exe" prog.c "$@") >"$tmp/cc.log" 2>&1 && return 0
    echo "FAIL $name: cc -o $exe prog.c $* failed:"
    head -20 "$tmp/cc.log" | sed 's/^/    /'
    return 1
}

# run_prog NAME EXE NRANKS WANT_DIR [LIBRARY_PATH]: runs the user's program with an empty
# environment (LD_LIBRARY_PATH only); it must print the version, compute the right sum
# and say it ran an all-reduce from WANT_DIR.
run_prog() {
    local name=$1 exe=$2 n=$3 want_dir=$4 out
    if ! out=$(cd "$user" && env -i ${5:+LD_LIBRARY_PATH=$5} "./$exe" "$n" 2>&1); then
        echo "FAIL $name: $exe $n failed:"
        echo "$out" | head -20 | sed 's/^/    /'
    elif ! grep -qx "ccl_version $version" <<<"$out"; then
        echo "FAIL $name: ccl_version() did not print $version:" $out
    elif ! grep -q "every element right; ran allreduce .* -> $want_dir/allreduce/" <<<"$out"; then
        echo "FAIL $name: the algorithm did not come from $want_dir:" $out
    else
        echo "ok $name"
    fi
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

    algs=$prefix/share/ccl/algorithms
    build_prog installed.shared prog $(pkg-config --cflags --libs ccl) &&
        run_prog installed.shared prog 4 "$algs" "$prefix/lib"
    got=$(pkg-config --libs ccl-static 2>&1 | xargs)
    want="$prefix/lib/libccl.a -pthread -ldl -lm -lrt"
    [ "$got" = "$want" ] && echo "ok install.pkg-config.ccl-static" ||
        echo "FAIL install.pkg-config.ccl-static: pkg-config --libs ccl-static gives '$got', expected '$want'"
    # ccl-static: the archive, although libccl.so lies next to it (before, the only way was
    # to rewrite ccl.pc's -lccl by hand: pkg-config --static still linked libccl.so).
    if build_prog installed.static prog_static $(pkg-config --cflags --libs ccl-static); then
        if ldd "$user/prog_static" | grep -q libccl; then
            echo "FAIL installed.static: prog_static links libccl.so, not libccl.a"
        else
            run_prog installed.static prog_static 3 "$algs"
        fi
    fi
    # libccl.a linked into a shared object (as a Python extension would), used by a program.
    if build_prog installed.in-shared-object libuser.so -shared -fPIC -Dmain=user_main \
            $(pkg-config --cflags --libs ccl-static); then
        printf 'int user_main(int, char **);\nint main(int argc, char **argv) { return user_main(argc, argv); }\n' \
            >"$user/main.c"
        if (cd "$user" && cc -std=c11 -o prog_user main.c -L. -luser) >"$tmp/cc.log" 2>&1; then
            run_prog installed.in-shared-object prog_user 2 "$algs" "$user"
        else
            echo "FAIL installed.in-shared-object: linking main.c with libuser.so failed:" $(head -c 2000 "$tmp/cc.log")
        fi
    fi

    # libccl_nccl: NCCL's API, through ccl-nccl.pc, from the installed files alone.
    got=$(pkg-config --cflags --libs ccl-nccl 2>&1 | xargs)
    want="-I$prefix/include/ccl_nccl -L$prefix/lib -lccl_nccl"
    if [ "$got" != "$want" ]; then
        echo "FAIL install.nccl.pkg-config: pkg-config --cflags --libs ccl-nccl gives '$got', expected '$want'"
    else
        cp tests/nccl/colls.c tests/nccl/common.h "$user/"
        if (cd "$user" && cc -std=c11 -Wall -Werror -o nccl_prog colls.c $(pkg-config --cflags --libs ccl-nccl) \
                -lm) >"$tmp/cc.log" 2>&1; then
            out=$(cd "$user" && env -i LD_LIBRARY_PATH="$prefix/lib" CCL_BACKEND=cpu CCL_NCCL_ROUTE=ccl \
                  ./nccl_prog 2 2>&1)
            if [ $? -eq 0 ] && [ "$(grep -c '^ok ' <<<"$out")" -ge 20 ]; then
                echo "ok install.nccl.program"
            else
                echo "FAIL install.nccl.program: a program built with ccl-nccl.pc failed:" $(grep -v '^ok' <<<"$out" | head -5)
            fi
        else
            echo "FAIL install.nccl.program: cc colls.c \$(pkg-config --cflags --libs ccl-nccl) failed:" \
                $(head -c 1000 "$tmp/cc.log")
        fi
    fi
    unset PKG_CONFIG_PATH

    # Others could plant algorithms in a group-writable folder: it is refused, and said so.
    if [ -x "$user/prog" ]; then
        chmod g+w "$algs"
        if out=$(cd "$user" && env -i LD_LIBRARY_PATH="$prefix/lib" ./prog 2 2>&1); then
            echo "FAIL installed.untrusted: ran with a group-writable $algs:" $out
        elif ! grep -q "$algs is writable by other users" <<<"$out"; then
            echo "FAIL installed.untrusted: the message does not name the group-writable folder:" $out
        else
            echo "ok installed.untrusted"
        fi
        chmod g-w "$algs"

        # A moved prefix: libccl.so finds the algorithms next to itself.
        mv "$prefix" "$tmp/moved"
        run_prog installed.moved prog 2 "$tmp/moved/share/ccl/algorithms" "$tmp/moved/lib"
        mv "$tmp/moved" "$prefix"
    fi

    if make_in uninstall uninstall PREFIX="$prefix"; then
        left=$(cd "$prefix" && find . -mindepth 1 ! -type d -printf '%P\n'; find . -path './share/ccl*' -printf '%P\n')
        [ -z "$left" ] && echo "ok uninstall" || echo "FAIL uninstall: left behind under $prefix:" $left
    fi
fi

# The build folder's libccl.so, used from outside the tree, finds the source tree's algorithms.
build_prog build.shared prog_build -I"$PWD/runtime/include" -L"$build_dir" -lccl &&
    run_prog build.shared prog_build 2 "$(cd algorithms && pwd -P)" "$build_dir"

# A build without the CUDA toolkit says once that it leaves the GPU backend out (it said
# nothing), and a build with it says nothing.
n=$(env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make --no-print-directory -n BUILD="$tmp/nogpu" CUDA=/nonexistent all 2>&1 | grep -c 'without the GPU backend')
[ "$n" = 1 ] && echo "ok build.no-cuda-notice" || echo "FAIL build.no-cuda-notice: said $n times, expected once"
if [ -e /usr/local/cuda/include/cuda.h ]; then
    n=$(env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make --no-print-directory -n BUILD="$tmp/nogpu" all 2>&1 | grep -c 'without the GPU backend')
    [ "$n" = 0 ] && echo "ok build.cuda-no-notice" || echo "FAIL build.cuda-no-notice: said $n times"
fi

# DESTDIR: the files land under it at PREFIX's paths, and ccl.pc names PREFIX.
if make_in install.destdir install DESTDIR="$tmp/stage" PREFIX=/opt/ccl; then
    found "$tmp/stage/opt/ccl" >"$tmp/found"
    if ! diff -q "$tmp/expected" "$tmp/found" >/dev/null; then
        echo "FAIL install.destdir: the files under DESTDIR/PREFIX differ from a plain install's"
    elif ! grep -qx 'libdir=/opt/ccl/lib' "$tmp/stage/opt/ccl/lib/pkgconfig/ccl.pc"; then
        echo "FAIL install.destdir: ccl.pc does not say libdir=/opt/ccl/lib:" $(grep '^libdir' "$tmp/stage/opt/ccl/lib/pkgconfig/ccl.pc")
    elif ! grep -q /opt/ccl/share/ccl/algorithms "$tmp/stage/opt/ccl/lib/libccl.a" ||
         ! grep -q /opt/ccl/share/ccl/algorithms "$tmp/stage/opt/ccl/lib/libccl.so.$version"; then
        echo "FAIL install.destdir: the staged libccl.a and libccl.so do not name /opt/ccl/share/ccl/algorithms (datadir.c)"
    else
        echo "ok install.destdir"
    fi
fi
exit 0
