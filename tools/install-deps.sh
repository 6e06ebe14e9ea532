#!/usr/bin/env bash
# Installs what building and testing CCL needs on a Debian/Ubuntu machine: only what is
# missing, only what the named targets need, and it says what it installs. `make deps`
# runs it; `make demo`, `make check`, `make asan` and `make fuzz` run it themselves, so a
# fresh machine needs no other step. A plain `make` never installs anything.
#
#   tools/install-deps.sh [FOR...]        FOR: build, demo, check, asan, fuzz (default: check)
#
#   build, demo   Flex and Bison (the front end)
#   check, asan   the same, Open MPI (mpicc, mpirun: the MPI example and the
#                 process-mode tests) and pkg-config (tests/install builds a program
#                 against the installed ccl.pc); check also Python 3 with venv and pip
#                 (the Python package's tests: tests/python/run.sh makes a venv with numpy
#                 and pytest from PyPI)
#   fuzz          Flex and Bison, and clang with its libFuzzer runtime (make fuzz)
#
# The CUDA toolkit (cuda.h, NVRTC) is never installed: it is expected under /usr/local/cuda
# (make CUDA=...); without it the GPU backend is not built and the GPU tests are skipped,
# never faked.
set -eu

[ $# -eq 0 ] && set -- check
want_mpi=0 want_fuzz=0 want_python=0
for w in "$@"; do
    case $w in
        build | demo | all) ;;
        check) want_mpi=1 want_python=1 ;;
        asan) want_mpi=1 ;;
        fuzz) want_fuzz=1 ;;
        *) echo "install-deps.sh: unknown '$w' (build, demo, check, asan, fuzz)" >&2; exit 2 ;;
    esac
done

have() { command -v "$1" >/dev/null 2>&1; }
fuzzer_runtime() {
    have clang || return 1
    local dir
    dir=$(clang -print-resource-dir 2>/dev/null) || return 1
    # The layout before clang 15, then the per-target one.
    ls "$dir"/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
        ls "$dir"/lib/*/libclang_rt.fuzzer.a >/dev/null 2>&1
}

# What is missing, as "package (why)" lines for the message and packages for apt-get.
need=() why=()
missing() { need+=("$1"); why+=("$1 ($2)"); }
have flex || missing flex "the lexer generator, for make"
have bison || missing bison "the parser generator, for make"
if [ $want_mpi = 1 ]; then
    have mpicc || missing libopenmpi-dev "mpicc, for examples/allreduce_mpi"
    have mpirun || missing openmpi-bin "mpirun, for the process-mode tests"
    have pkg-config || missing pkg-config "for tests/install, which builds against the installed ccl.pc"
fi
if [ $want_python = 1 ]; then
    have python3 || missing python3 "the Python package's tests"
    # ensurepip is what `python3 -m venv` needs to put pip into the venv (Debian splits it off).
    python3 -c 'import venv, ensurepip' 2>/dev/null || missing python3-venv "venvs with pip, for tests/python"
fi
if [ $want_fuzz = 1 ]; then
    have clang || missing clang "the compiler make fuzz uses"
fi

install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    printf 'install-deps.sh: installing %s\n' "$@"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
}

if [ ${#need[@]} -gt 0 ]; then
    install "${why[@]}"
elif [ $want_fuzz = 0 ] || fuzzer_runtime; then
    echo "install-deps.sh ($*): nothing missing"
fi
# libFuzzer's runtime ships per clang version: known only once clang is there.
if [ $want_fuzz = 1 ] && ! fuzzer_runtime; then
    v=$(clang -dumpversion | cut -d. -f1)
    need=("libclang-rt-$v-dev") why=("libclang-rt-$v-dev (libFuzzer's runtime, for make fuzz)")
    install "${why[@]}"
    fuzzer_runtime || { echo "install-deps.sh: libFuzzer's runtime is still missing for clang $v" >&2; exit 1; }
fi
exit 0
