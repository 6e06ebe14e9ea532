#!/usr/bin/env bash
# NCCL suite (seconds): libccl_nccl.so, NCCL's API over libccl (docs/nccl.md), on
# libccl's CPU backend, the test mode (host buffers, CCL_BACKEND=cpu).
#   - the library: its soname, what it needs (libccl.so.MAJOR next to it, no libnccl,
#     no CUDA), its exports (exactly runtime/nccl/libccl_nccl.map: every function of
#     NCCL 2.28's nccl.h, NVIDIA's where the toolkit has it, under both names);
#   - the headers: runtime/nccl/nccl.h and NVIDIA's agree on every value and layout
#     (abi_dump built against each);
#   - colls, comms, procs (tests/nccl/*.c, CCL_NCCL_ROUTE=ccl): every collective, dtype
#     and operator; inits, splits, aborts, errors; processes meeting through a unique id;
#   - register (CCL_NCCL_ROUTE=ccl): ncclCommRegister and windows on libccl's
#     ccl_mem_register, from a thread per rank and from one thread in groups, refusals
#     only warned; each registration made and undone once (CCL_DEBUG=INFO's lines), none
#     with CCL_NCCL_REGISTER=0;
#   - the routing summary (CCL_NCCL_SUMMARY=1, CCL_DEBUG=INFO);
#   - routes.c with a stand-in for the real NCCL (tests/nccl/fake/fake_nccl.c, on host
#     memory): CCL_NCCL_ROUTE's choices, auto's fallback, the real id through the
#     rendezvous; the real-library search refusing libccl_nccl itself and a copy of it;
#   - LD_PRELOAD: a program linked against NVIDIA's libnccl runs on libccl with
#     libccl_nccl preloaded, and the shim finds the libnccl the program loaded;
#   - tests/nccl/gpu_torch.sh and gpu_torch.py (the GPU machine's test) and
#     bench/torch_nccl_bench.sh and .py parse.
# NVIDIA's NCCL itself needs a GPU: its route is skipped here, saying so.
# Prints "ok NAME" or "FAIL NAME: why" per test.
#
#   tests/nccl/run.sh BUILD
set -u
build=${1:?usage: tests/nccl/run.sh BUILD}
cd "$(dirname "$0")/../.." || exit 1
build=$(cd "$build" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CCL_BACKEND=cpu CCL_TIMEOUT_MS=${CCL_TIMEOUT_MS:-20000} CCL_ALGORITHM_DIR=$PWD/algorithms
unset CCL_NCCL_ROUTE CCL_NCCL_LIB CCL_NCCL_SUMMARY CCL_NCCL_REAL_ON_CPU CCL_DEBUG
so=$build/libccl_nccl.so
cuda=${CUDA:-/usr/local/cuda}

if [ ! -e "$so" ]; then
    echo "FAIL nccl: $so not built"
    exit 0
fi
t=$build/tests/nccl
major=$(sed -n 's/^#define CCL_VERSION_MAJOR \([0-9]*\)$/\1/p' runtime/include/ccl.h)

# ---- the library ----
dyn=$(readelf -d "$so")
soname=$(sed -n 's/.*Library soname: \[\(.*\)\]/\1/p' <<<"$dyn")
needed=$(sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' <<<"$dyn" | xargs)
runpath=$(sed -n 's/.*Library runpath: \[\(.*\)\]/\1/p' <<<"$dyn")
if [ "$soname" != "libccl_nccl.so.$major" ]; then
    echo "FAIL nccl.so.soname: '$soname', expected libccl_nccl.so.$major"
elif ! grep -qw "libccl.so.$major" <<<"$needed" || grep -q 'nccl\|cuda' <<<"$needed"; then
    echo "FAIL nccl.so.needed: it needs '$needed' (libccl.so.$major, and neither libnccl nor CUDA)"
elif [ "$runpath" != '$ORIGIN' ]; then
    echo "FAIL nccl.so.runpath: '$runpath', expected \$ORIGIN (libccl.so next to it)"
else
    echo "ok nccl.so.soname-needed-runpath"
fi

# Exports: exactly the map's, which are nccl.h's functions under both names.
header_functions() { # FILE: the functions an nccl.h declares (every pnccl/ncclName before a '(' outside comments)
    perl -0777 -pe 's{/\*.*?\*/}{}gs; s{//[^\n]*}{}g' "$1" | tr '\n' ' ' |
        grep -oE '\bp?nccl[A-Z][A-Za-z0-9]*[[:space:]]*\(' | grep -oE 'p?nccl[A-Za-z0-9]+' | sort -u
}
nm -D --defined-only "$so" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u >"$tmp/exported"
sed -n 's/^ *\(p\{0,1\}nccl[A-Za-z]*\);$/\1/p' runtime/nccl/libccl_nccl.map | sort -u >"$tmp/map"
header_functions runtime/nccl/nccl.h | sed 's/^p//' | sort -u | sed 'p;s/^/p/' | sort -u >"$tmp/own"
if ! diff -q "$tmp/exported" "$tmp/map" >/dev/null; then
    echo "FAIL nccl.so.exports: the library's exports differ from libccl_nccl.map:" \
        $(diff "$tmp/map" "$tmp/exported" | grep '^[<>]' | head -10)
elif ! diff -q "$tmp/map" "$tmp/own" >/dev/null; then
    echo "FAIL nccl.so.exports: libccl_nccl.map and runtime/nccl/nccl.h (each function, and its pnccl name) differ:" \
        $(diff "$tmp/map" "$tmp/own" | grep '^[<>]' | head -10)
else
    echo "ok nccl.so.exports ($(wc -l <"$tmp/map") symbols)"
fi
if [ -f "$cuda/include/nccl.h" ]; then
    header_functions "$cuda/include/nccl.h" >"$tmp/nvidia"
    missing=$(comm -23 "$tmp/nvidia" "$tmp/exported" | xargs)
    [ -z "$missing" ] && echo "ok nccl.so.exports-nvidia-nccl.h ($(wc -l <"$tmp/nvidia") functions of $cuda/include/nccl.h)" ||
        echo "FAIL nccl.so.exports-nvidia-nccl.h: $cuda/include/nccl.h declares what the library lacks: $missing"
    if cmp -s <("$t/abi_dump") <("$t/abi_dump_own"); then
        echo "ok nccl.abi.headers-agree"
    else
        echo "FAIL nccl.abi.headers-agree: NVIDIA's nccl.h (<) and runtime/nccl/nccl.h (>) differ:" \
            $(diff <("$t/abi_dump") <("$t/abi_dump_own") | grep '^[<>]' | head -8)
    fi
else
    echo "skip nccl.abi: no NVIDIA nccl.h at $cuda/include (set CUDA=): runtime/nccl/nccl.h not compared"
fi

# ---- the C tests, on libccl only ----
# run_test NAME CMD...: the program prints ok/FAIL lines itself; a crash or a hang is a
# FAIL of its own.
run_test() {
    local name=$1 rc
    shift
    timeout 300 "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    cat "$tmp/out"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/out"; then
        echo "FAIL $name: exit $rc: $(tail -5 "$tmp/err" | tr '\n' ' ' | cut -c1-600)"
    fi
}
export CCL_NCCL_ROUTE=ccl
run_test nccl.colls "$t/colls"
run_test nccl.comms "$t/comms"
run_test nccl.procs "$t/procs"
# libccl's part of each registration, by CCL_DEBUG=INFO's lines: made and undone 12 times
# (threads: 3 ranks x a registration and a window; one thread: 3 windows in a group, then
# 3 more registered and deregistered in one group) with CCL_NCCL_REGISTER=1, and never
# with CCL_NCCL_REGISTER=0.
CCL_NCCL_REGISTER=1 CCL_DEBUG=INFO run_test nccl.register "$t/register"
made=$(grep -c '\[nccl\]: ncclComm\(Window\)\{0,1\}Register: comm 0x[0-9a-f]*: [0-9]* bytes at 0x[0-9a-f]* registered with libccl (' "$tmp/err")
undone=$(grep -c '\[nccl\]: ncclComm\(Window\)\{0,1\}Deregister: comm 0x[0-9a-f]*: deregistered with libccl$' "$tmp/err")
[ "$made" = 12 ] && [ "$undone" = 12 ] && echo "ok nccl.register.libccl-made-and-undone" ||
    echo "FAIL nccl.register.libccl-made-and-undone: $made registrations made and $undone undone, expected 12 and 12"
CCL_NCCL_REGISTER=0 CCL_DEBUG=INFO run_test nccl.register.off "$t/register" off
made=$(grep -c 'registered with libccl (' "$tmp/err")
said=$(grep -c 'are not registered with libccl, which stages them: CCL_NCCL_REGISTER=0$' "$tmp/err")
[ "$made" = 0 ] && [ "$said" = 12 ] && echo "ok nccl.register.off-said" ||
    echo "FAIL nccl.register.off-said: $made registrations made (expected none), $said said why not (expected 12)"
# By default windows alone reach libccl: ncclCommRegister's buffers are left to NCCL,
# saying why.
CCL_DEBUG=INFO run_test nccl.register.default "$t/register" default
made=$(grep -c '\[nccl\]: ncclCommRegister: comm 0x[0-9a-f]*: [0-9]* bytes at 0x[0-9a-f]* registered with libccl (' "$tmp/err")
windows=$(grep -c '\[nccl\]: ncclCommWindowRegister: comm 0x[0-9a-f]*: [0-9]* bytes at 0x[0-9a-f]* registered with libccl (' "$tmp/err")
said=$(grep -c "are not registered with libccl, which stages them: NCCL's ncclCommRegister does not wait" "$tmp/err")
[ "$made" = 0 ] && [ "$windows" -gt 0 ] && [ "$said" -gt 0 ] && echo "ok nccl.register.default-windows-only" ||
    echo "FAIL nccl.register.default-windows-only: $made ncclCommRegister and $windows windows registered with libccl (expected 0 and some), $said said why (expected some)"

# The routing summary: at destroy with CCL_NCCL_SUMMARY=1, and at CCL_DEBUG=INFO.
CCL_NCCL_SUMMARY=1 "$t/colls" 2 >/dev/null 2>"$tmp/err"
if grep -q '^ccl-nccl: rank 1 of 2: routing summary: allreduce [0-9]* ccl 0 nccl, .* sendrecv [0-9]* ccl 0 nccl, in all [0-9]* ccl 0 nccl$' "$tmp/err"; then
    echo "ok nccl.summary"
else
    echo "FAIL nccl.summary: no routing summary line for rank 1: $(head -c 600 "$tmp/err")"
fi
CCL_DEBUG=INFO "$t/colls" 2 >/dev/null 2>"$tmp/err"
if grep -q 'ccl INFO .* rank 0 \[nccl\]: ncclCommInitAll: comm 0x[0-9a-f]* ready: rank 0 of 2, device 0, libccl.s cpu backend; the real NCCL: not used .*; routes: ccl for every call' "$tmp/err" &&
   grep -q 'ccl INFO .* rank 1 \[nccl\]: ncclCommDestroy: comm 0x[0-9a-f]*: routing summary: allreduce' "$tmp/err"; then
    echo "ok nccl.debug-info"
else
    echo "FAIL nccl.debug-info: CCL_DEBUG=INFO did not say the init and the summary: $(grep '\[nccl\]' "$tmp/err" | head -3)"
fi
unset CCL_NCCL_ROUTE

# ---- routes, with a stand-in for the real NCCL ----
fake=$t/libfake_nccl.so
route() { # ROUTE SCENARIO [VAR=VALUE...]
    local r=$1 s=$2
    shift 2
    run_test "nccl.route.$s" env CCL_NCCL_REAL_ON_CPU=1 CCL_NCCL_LIB="$fake" ${r:+CCL_NCCL_ROUTE=$r} "$@" "$t/routes" "$s"
}
route nccl nccl
route allreduce:ccl,allgather:nccl,default:ccl mixed
route auto auto
route nccl missing CCL_NCCL_LIB=none
route nccl split
route auto limit CCL_NCCL_AUTO_LIMIT=allreduce:12,default:none
CCL_NCCL_AUTO_LIMIT=12Q "$t/routes" limit >"$tmp/out" 2>&1
grep -q "ncclCommInitAll: CCL_NCCL_AUTO_LIMIT='12Q' is not a size" "$tmp/out" && echo "ok nccl.route.auto.limit-refused" ||
    echo "FAIL nccl.route.auto.limit-refused: no refusal of CCL_NCCL_AUTO_LIMIT=12Q: $(head -c 300 "$tmp/out")"
mkdir -p "$tmp/algs" && cp -r algorithms/allreduce "$tmp/algs/"
route "" fallback CCL_ALGORITHM_DIR="$tmp/algs" CCL_DEBUG=INFO
n=$(grep -c '\[nccl\]: ncclAllGather: libccl refused allgather of datatype 7 (no loaded algorithm' "$tmp/err")
[ "$n" = 2 ] && echo "ok nccl.route.fallback-said-once-per-rank" ||
    echo "FAIL nccl.route.fallback-said-once-per-rank: said $n times for 2 ranks x 2 calls (expected once per rank)"

# The search for the real library refuses libccl_nccl itself, and a copy of it.
mkdir -p "$tmp/copy" && cp "$build/libccl_nccl.so.$major".* "$tmp/copy/libnccl.so.2"
for c in "self $so it is libccl_nccl itself (recursion refused)" \
         "copy $tmp/copy/libnccl.so.2 it is a library over libccl, not NVIDIA's NCCL (recursion refused)"; do
    read -r what lib why <<<"$c"
    env CCL_NCCL_REAL_ON_CPU=1 CCL_NCCL_LIB="$lib" CCL_NCCL_ROUTE=nccl LD_LIBRARY_PATH="$build" "$t/routes" nccl \
        >"$tmp/out" 2>&1
    if grep -qF "CCL_NCCL_ROUTE sends allreduce to NCCL, but CCL_NCCL_LIB=$lib cannot be used: $lib ($why)" "$tmp/out"; then
        echo "ok nccl.real.refuses-$what"
    else
        echo "FAIL nccl.real.refuses-$what: $(grep -m1 FAIL "$tmp/out" | cut -c1-400)"
    fi
done

# ---- LD_PRELOAD over NVIDIA's libnccl ----
real=$(ls "$cuda"/lib64/libnccl.so.2 "$cuda"/lib/libnccl.so.2 2>/dev/null | head -1)

# NVIDIA's libnccl calls some of its exported functions by name; with the shim preloaded
# those calls land in it. Each one the shim exports must be one that the shim passes back
# to the real library (registry.c) or serves alike (ncclMemAlloc, ncclGetErrorString):
# a new one in a later NCCL would fail there with ncclInvalidArgument, as
# ncclCommGetAsyncError did for every call to NCCL before.
passed_back="ncclCommGetAsyncError ncclAllReduce ncclAllGather ncclReduceScatter ncclBroadcast ncclBcast ncclReduce
ncclAlltoAll ncclGather ncclScatter ncclSend ncclRecv ncclCommRegister ncclCommDeregister ncclCommWindowRegister
ncclCommWindowDeregister ncclGetUniqueId ncclMemAlloc ncclMemFree ncclGetVersion ncclGetErrorString ncclResetDebugInit"
if [ -n "$real" ] && command -v readelf >/dev/null; then
    own=$(readelf -rW "$real" | awk '$3 ~ /JUMP_SLOT|GLOB_DAT/ {print $5}' | grep '^nccl[A-Z]' | sort -u)
    exported=$(readelf -W --dyn-syms "$so" | awk '$7 != "UND" {print $8}' | sort -u)
    bad=$(for f in $own; do grep -qx "$f" <<<"$exported" && ! grep -qw "$f" <<<"$passed_back" && echo "$f"; done)
    [ -z "$bad" ] && echo "ok nccl.real-calls-itself ($(wc -w <<<"$own") names: $(echo $own | cut -c1-200))" ||
        echo "FAIL nccl.real-calls-itself: $real calls $(echo $bad) by name, which the shim exports but does not pass back"
else
    echo "skip nccl.real-calls-itself: no NVIDIA libnccl.so.2 under $cuda, or no readelf"
fi
if ldd "$so" | grep -q 'libasan\|libubsan'; then
    echo "skip nccl.preload: this libccl_nccl is built with sanitizers, which cannot be preloaded into a program built without"
elif [ -n "$real" ] && [ -f "$cuda/include/nccl.h" ]; then
    rdir=$(dirname "$real")
    if cc -std=c11 -D_GNU_SOURCE -isystem "$cuda/include" -o "$tmp/colls_nvidia" tests/nccl/colls.c \
           -L"$rdir" -l:libnccl.so.2 -Wl,-rpath,"$rdir" -lm -pthread 2>"$tmp/cc.err"; then
        if ! ldd "$tmp/colls_nvidia" | grep -q "libnccl.so.2 => $rdir"; then
            echo "FAIL nccl.preload: the program does not link NVIDIA's libnccl: $(ldd "$tmp/colls_nvidia" | grep nccl)"
        else
            env LD_PRELOAD="$so" CCL_NCCL_ROUTE=ccl CCL_NCCL_SUMMARY=1 "$tmp/colls_nvidia" 3 >"$tmp/out" 2>"$tmp/err"
            if grep -q '^FAIL' "$tmp/out" || [ "$(grep -c '^ok' "$tmp/out")" -lt 20 ] ||
               ! grep -q '^ccl-nccl: rank 2 of 3: routing summary' "$tmp/err"; then
                echo "FAIL nccl.preload: a program linked against $real, with libccl_nccl preloaded:" \
                    $(grep -m3 FAIL "$tmp/out") $(head -c 300 "$tmp/err")
            else
                echo "ok nccl.preload ($(grep -c '^ok' "$tmp/out") checks of a program linked against $real)"
            fi
        fi
        # The shim finds the libnccl the program loaded (the GPU route's library; it
        # fails here, having no GPU, which the shim reports with NCCL's own message).
        printf '#include <nccl.h>\n#include <stdio.h>\nint main(void) { void *p; ncclResult_t r = ncclMemAlloc(&p, 4096);\n printf("%%d %%s\\n", (int)r, ncclGetLastError(NULL)); return 0; }\n' >"$tmp/probe.c"
        cc -std=c11 -isystem "$cuda/include" -o "$tmp/probe" "$tmp/probe.c" -L"$rdir" -l:libnccl.so.2 -Wl,-rpath,"$rdir"
        out=$(env -u CCL_BACKEND LD_PRELOAD="$so" CCL_DEBUG=INFO "$tmp/probe" 2>&1)
        if grep -q "\[nccl\]: the real NCCL: $(readlink -f "$real" | sed 's/[.]/[.]/g')\|\[nccl\]: the real NCCL: $real" <<<"$out" &&
           grep -q "ncclMemAlloc: the real NCCL's failed for 4096 bytes" <<<"$out"; then
            echo "ok nccl.preload.finds-loaded-libnccl"
        else
            echo "FAIL nccl.preload.finds-loaded-libnccl: $(head -c 600 <<<"$out")"
        fi
    else
        echo "FAIL nccl.preload: cannot build against $real: $(head -3 "$tmp/cc.err")"
    fi
else
    echo "skip nccl.preload: no NVIDIA libnccl.so.2 under $cuda (set CUDA=)"
fi

# ---- the GPU machine's test and benchmark parse ----
for f in tests/nccl/gpu_torch.sh bench/torch_nccl_bench.sh; do
    bash -n "$f" 2>"$tmp/err" && echo "ok nccl.$(basename "$f")-parses" ||
        echo "FAIL nccl.$(basename "$f")-parses: $(head -3 "$tmp/err")"
done
if command -v python3 >/dev/null; then
    for f in tests/nccl/gpu_torch.py bench/torch_nccl_bench.py; do
        python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$f" 2>"$tmp/err" &&
            echo "ok nccl.$(basename "$f")-parses" || echo "FAIL nccl.$(basename "$f")-parses: $(tail -3 "$tmp/err")"
    done
fi
exit 0
