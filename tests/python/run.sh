#!/usr/bin/env bash
# Python suite: the `ccl` package (python/) over BUILD's libccl.so, with pytest.
#
#   tests/python/run.sh BUILD          CPU tests (make check): numpy, threads and process
#                                      mode, errors; the torch tests too where torch is
#                                      importable; and `pip install ./python` followed by
#                                      the README's Python example
#   tests/python/run.sh BUILD gpu      the GPU tests only (tests/run-gpu.sh: make check-gpu)
#
# The interpreter: $CCL_PYTHON (one with torch, say), else a venv in BUILD/pyenv with
# tests/python/requirements.txt (numpy, pytest) and, where it installs, mpi4py from PyPI,
# made on first use. torch is not
# installed here: PyPI serves it only with its CUDA libraries (about 5 GB, 3 minutes),
# so CI tests numpy and the GPU machines, which have torch, test torch (docs/python.md).
# Without a network (the GPU machines) the system's python3 is used where it has numpy,
# and pytest may come from BUILD/pydeps (below).
# Prints "ok NAME" / "FAIL NAME: why" per test, "skip NAME (why)" for skipped ones.
set -u
build=${1:?usage: tests/python/run.sh BUILD [gpu]}
mode=${2:-cpu}
cd "$(dirname "$0")/../.."
root=$PWD
case $build in /*) ;; *) build=$root/$build ;; esac
so=$build/libccl.so
[ -e "$so" ] || { echo "FAIL python: $so not built"; exit 0; }

py=${CCL_PYTHON:-}
offline=0
if [ -z "$py" ]; then
    py=$build/pyenv/bin/python
    if ! "$py" -c 'import numpy, pytest' 2>/dev/null; then
        rm -rf "$build/pyenv"
        if ! out=$(python3 -m venv "$build/pyenv" 2>&1 &&
                   "$py" -m pip install -q --disable-pip-version-check -r tests/python/requirements.txt 2>&1); then
            # No PyPI (the GPU machines): the system's python3 will do if it has numpy,
            # with pytest from it or from BUILD/pydeps (below).
            rm -rf "$build/pyenv"
            if ! PYTHONPATH=$build/pydeps python3 -c 'import numpy, pytest' 2>/dev/null; then
                echo "FAIL python: cannot make the test venv $build/pyenv (python3-venv and PyPI: make deps), and" \
                     "python3 lacks numpy or pytest: $(tail -3 <<<"$out" | tr '\n' ' ')"
                exit 0
            fi
            echo "   (python: no venv without PyPI; testing with $(command -v python3), which has numpy)"
            py=python3
            offline=1
        else
            # mpi4py only for its bootstrap's test (skipped without it): best effort.
            "$py" -m pip install -q --disable-pip-version-check mpi4py >/dev/null 2>&1 || true
        fi
    fi
fi

# A machine without a network (the GPU machines) whose interpreter lacks pytest: pytest
# from BUILD/pydeps, made where there is one (python3 -m pip install --target
# BUILD/pydeps pytest) and carried with the build folder.
pydeps=""
if ! "$py" -c 'import pytest' 2>/dev/null; then
    [ -d "$build/pydeps" ] && pydeps=$build/pydeps
    if ! PYTHONPATH=$pydeps "$py" -c 'import pytest' 2>/dev/null; then
        echo "FAIL python: $py has no pytest: pip install pytest, or without a network make BUILD/pydeps elsewhere" \
             "(python3 -m pip install --target $build/pydeps pytest) and carry it"
        exit 0
    fi
fi
export CCL_LIBRARY=$so
export CCL_ALGORITHM_DIR=$root/algorithms
export PYTHONPATH=$root/python/src${pydeps:+:$pydeps}${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ "$mode" = gpu ]; then
    export CCL_BACKEND=gpu
    # Rank threads share a GPU here: a lazy module load (the first use of a torch kernel)
    # would wait for a peer's running collective, which waits for this rank (docs/python.md).
    export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
    marks=gpu
    files=tests/python/test_gpu.py   # needs torch only (the CPU tests import numpy)
else
    export CCL_BACKEND=cpu
    marks="not gpu"
    files=tests/python
fi
# One line per test ("path::name PASSED"), turned into the suites' ok/FAIL lines.
timeout 900 "$py" -m pytest $files -m "$marks" -p no:cacheprovider -v -rs --tb=short >"$log" 2>&1
rc=$?
sed -n -E 's#^tests/python/([^ ]+) PASSED.*#ok python/\1#p;
           s#^tests/python/([^ ]+) (FAILED|ERROR).*#FAIL python/\1: see the pytest output above#p' "$log"
if grep -qE ' (FAILED|ERROR)' "$log" || { [ $rc -ne 0 ] && [ $rc -ne 5 ]; }; then
    sed -n '/= FAILURES =\|= ERRORS =/,$p' "$log" | head -150
    grep -qE ' (FAILED|ERROR)' "$log" || echo "FAIL python: pytest exited $rc: $(tail -5 "$log" | tr '\n' ' ')"
fi
grep -E '^SKIPPED' "$log" | sed -E 's/^SKIPPED \[[0-9]+\] /skip python: /'
tail -1 "$log"
[ "$mode" = gpu ] && exit 0
if [ "$offline" = 1 ]; then
    echo "skip python/pip-install+readme-example (pip builds the package in an isolated env from PyPI, unreachable here)"
    exit 0
fi

# pip install from the repository (reusing BUILD's make), then the README's example in a
# folder outside the tree, with no CCL_* variable: the bundled library and algorithms.
pkg=$build/pyenv-pkg
rm -rf "$pkg"   # a fresh venv each time: nothing left from an earlier install
out=$(python3 -m venv "$pkg" 2>&1 &&
      CCL_BUILD=$build "$pkg/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall \
          --no-deps "$root/python" 2>&1 &&
      "$pkg/bin/python" -m pip install -q --disable-pip-version-check numpy 2>&1 &&
      cd / && env -u CCL_LIBRARY -u CCL_ALGORITHM_DIR -u PYTHONPATH \
          "$pkg/bin/python" "$root/tests/python/readme_example.py" 2>&1)
if [ $? -eq 0 ] && grep -q "^\[6\. 6\. 6\." <<<"$out"; then
    echo "ok python/pip-install+readme-example"
else
    echo "FAIL python/pip-install+readme-example: $(tail -5 <<<"$out" | tr '\n' ' ' | cut -c1-800)"
fi
# The bundled programs as console scripts in the venv's bin (python/pyproject.toml):
# cclc proves a shipped algorithm from the bundled library, ccl-tune answers --help.
out=$(cd / && env -u CCL_LIBRARY -u CCL_ALGORITHM_DIR -u PYTHONPATH PATH="$pkg/bin:$PATH" bash -c \
      'cclc --version && cclc check "$(python -c "import ccl; print(ccl.algorithm_dir())")/allreduce/ring.ccl" \
       --ranks 4 && ccl-tune --help | head -1' 2>&1)
if [ $? -eq 0 ] && grep -q "^cclc " <<<"$out" && grep -q "^usage: ccl-tune" <<<"$out" && \
        [ "$(command -v "$pkg/bin/cclc")" = "$pkg/bin/cclc" ]; then
    echo "ok python/console-scripts"
else
    echo "FAIL python/console-scripts: $(tail -5 <<<"$out" | tr '\n' ' ' | cut -c1-800)"
fi
# The wheel pip built is tagged for any Python 3 (ctypes, no extension module) on any
# Linux whose glibc is as new as the bundled binaries need (python/setup.py,
# PlatformWheel): py3-none-manylinux_2_N_ARCH, N the newest GLIBC_2.N that objdump finds
# in them (at least 17), not cp311-cp311-linux_x86_64.
tag=$(sed -n 's/^Tag: //p' "$pkg"/lib/python3*/site-packages/ccl-*.dist-info/WHEEL 2>/dev/null)
native=("$pkg"/lib/python3*/site-packages/ccl/_native)
if command -v objdump >/dev/null; then
    n=$(objdump -T "$native"/lib/libccl.so "$native"/bin/* | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1)
    want=py3-none-manylinux_2_$(( ${n:-0} > 17 ? ${n:-0} : 17 ))_$(uname -m)
else
    want="py3-none-manylinux_2_*_$(uname -m) (no objdump here to tell N)"
fi
# shellcheck disable=SC2053 # want is a pattern only without objdump
if [[ $tag == ${want% (*} ]]; then
    echo "ok python/wheel-tag ($tag)"
else
    echo "FAIL python/wheel-tag: the installed wheel is tagged '$tag', want $want"
fi
# auditwheel (PyPA's checker of the manylinux policy), where it installs: the wheel
# itself is consistent with its tag.
whl=$(mktemp -d)
if "$pkg/bin/python" -m pip install -q --disable-pip-version-check auditwheel >/dev/null 2>&1; then
    out=$(CCL_BUILD=$build "$pkg/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$whl" \
              "$root/python" 2>&1 && "$pkg/bin/auditwheel" show "$whl"/ccl-*.whl 2>&1)
    if [ $? -eq 0 ] && grep -q "consistent with the" <<<"$out" && grep -q "\"${tag#py3-none-}\"" <<<"$out" &&
        [ "$(basename "$whl"/ccl-*.whl)" = "ccl-$(sed -n 's/^Version: //p' \
              "$pkg"/lib/python3*/site-packages/ccl-*.dist-info/METADATA)-$tag.whl" ]; then
        echo "ok python/wheel-auditwheel (consistent with ${tag#py3-none-})"
    else
        echo "FAIL python/wheel-auditwheel: $(tr '\n' ' ' <<<"$out" | cut -c1-800)"
    fi
else
    echo "skip python/wheel-auditwheel (auditwheel does not install here)"
fi
rm -rf "$whl"
exit 0
