#!/usr/bin/env bash
# CUDA emission suite (CPU only, no GPU needed):
#  - every shipped algorithm, at N=4 and N=2, every rank's generated kernel compiles
#    through NVRTC for sm_90 (bf16/sum, the default protocol);
#  - the kernels' integer arithmetic (wrap-around, signed and unsigned order) equals the
#    CPU backend's for every op, with or without NVRTC (tests/cuda/int_ops.c);
#  - one algorithm compiles for every dtype and every op, and for older archs; the
#    v-collectives for several dtypes, as LL, and at N = 8;
#  - LL128 lines for every element size, Simple and LL programs forced onto them;
#  - the LL exit check past 64 ranks (tests/cuda/ll_wide.ccl: no 64-bit mask there);
#  - golden files: the generated CUDA of eight kernels (one-shot, ring, port ring; LL
#    all-to-all with transfers at once, LL reduce's root with fence-free signals; a
#    Simple allgatherv ring and an LL alltoallv, chunks sized by segment tables; the
#    one-shot on LL128 lines),
#    without the prelude they all share (cclc cuda --kernel-only), matches
#    tests/cuda/golden/*.cu byte for byte (UPDATE_GOLDEN=1 rewrites them);
#  - the prelude, compiler/cuda/prelude.cuh, compiles alone with nvcc (where installed;
#    also as v kernels see it, and the GPU-only tests of its pieces build),
#    and so does the GPU backend's point-to-point kernel (runtime/src/gpu/p2p.cu), with
#    no stack frame or spill;
#  - the kernel cache trusts only its own folder and its entries' full keys;
#  - every shipped kernel compiles with no stack frame or spill (tests/cuda/spills.sh).
# Prints "ok NAME" / "FAIL NAME: why"; skips (ok-less, says why) where NVRTC is missing.
set -u
build=${1:?usage: tests/cuda/run.sh BUILD}
cd "$(dirname "$0")/../.."
bin=$build/tests/cuda/nvrtc_compile
[ -x "$bin" ] || { echo "FAIL cuda: $bin not built"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One job: name, then the nvrtc_compile arguments. Output goes to $tmp/NAME.log.
job() {
    local name=$1
    shift
    "$bin" "$@" >"$tmp/$name.log" 2>&1
    echo $? >"$tmp/$name.rc"
}
report() {
    local name=$1 rc
    rc=$(cat "$tmp/$name.rc")
    case $rc in
        0) echo "ok cuda/$name" ;;
        77) echo "   cuda/$name: $(grep -m1 '^skipped' "$tmp/$name.log")" ;;
        *) echo "FAIL cuda/$name: $(grep -m1 -A12 '^FAIL' "$tmp/$name.log" | head -20)" ;;
    esac
}

# The kernels' integer arithmetic (tests/cuda/int_ops.c): the element definitions cclc
# emits for each integer dtype with wrap-around and each op, compiled as C around the
# prelude's way of reducing, against the CPU backend's reductions.
gen=$tmp/int_ops.gen.h
: >"$gen"
table=
for t in i8 u8 u32 u64; do
    for o in sum prod min max avg; do
        f=reduce_${t}_$o
        { echo "static void $f(const void *src, int ns, int stepwise, int avg, void *out)"; echo "{"
          "$build/cclc" cuda algorithms/allreduce/allpairs.ccl --ranks 2 --rank 0 --kernel-only --dtype "$t" --op "$o" |
              grep -E '^(typedef .* ccl_(t|acc);|#define CCL_(LOAD|STORE|OP)\()'
          echo "REDUCE_BODY"; echo "#undef CCL_LOAD"; echo "#undef CCL_STORE"; echo "#undef CCL_OP"; echo "}"
        } >>"$gen"
        T=$(tr a-z A-Z <<<"$t")
        O=$(tr a-z A-Z <<<"$o")
        table+="    {\"$t\", \"$o\", CCL_$T, CCL_$O, $f},"$'\n'
    done
done
printf 'static const Variant variants[] = {\n%s};\n' "$table" >>"$gen"
if cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread -Iruntime/include -Iruntime/src -Icompiler \
    -I"$build" -I"$tmp" -o "$tmp/int_ops" tests/cuda/int_ops.c "$build/libccl.a" -ldl -lm -lrt >"$tmp/int_ops.log" 2>&1; then
    "$tmp/int_ops"
else
    echo "FAIL cuda/int-ops: tests/cuda/int_ops.c does not build over cclc's definitions: $(head -c 600 "$tmp/int_ops.log")"
fi

names=()
run_bg() { names+=("$1"); job "$@" & if (( $(jobs -r | wc -l) >= 2 )); then wait -n; fi; }

if ! "$bin" algorithms/allreduce/allpairs.ccl 2 >"$tmp/probe.log" 2>&1 && grep -q '^skipped' "$tmp/probe.log"; then
    echo "skipped: $(cat "$tmp/probe.log")"
    exit 0
fi
# The kernel cache: trusted folders only, full keys (tests/cuda/jit_cache.c).
mkdir -p "$tmp/jit"
"$build/tests/cuda/jit_cache" "$tmp/jit" 2>&1 | grep -E '^(ok|FAIL) ' || echo "FAIL cuda/jit-cache: no result"
for f in algorithms/*/*.ccl; do
    grep -q '^nodes ' "$f" && continue   # several nodes: CPU backend only (docs/multinode.md)
    alg=${f#algorithms/}
    alg=${alg%.ccl}
    for n in 4 2; do run_bg "${alg//\//_}_N$n" "$f" "$n"; done
done
for t in f32 f64 f16 i32 i64 u8 fp8_e4m3 fp8_e5m2 i8 u32 u64; do
    run_bg "allpairs_N2_${t}_sum" algorithms/allreduce/allpairs.ccl 2 --dtype "$t" --op sum
done
for o in prod min max avg; do
    run_bg "allpairs_N2_bf16_$o" algorithms/allreduce/allpairs.ccl 2 --dtype bf16 --op "$o"
done
# The integer dtypes NCCL has beyond the others (int8, uint32, uint64), each with another
# op on another protocol: LL128 lines, a Simple ring, LL with avg's division (the ops
# differ only in CCL_OP, whose arithmetic tests/cuda/int_ops.c checks for every one).
run_bg reduce_scatter_ring_N2_ll128_i8_prod algorithms/reduce_scatter/ring.ccl 2 --protocol ll128 --dtype i8 --op prod
run_bg ring_N2_u32_max algorithms/allreduce/ring.ccl 2 --dtype u32 --op max
run_bg allpairs_N2_u64_avg algorithms/allreduce/allpairs.ccl 2 --dtype u64 --op avg
for a in 75 80 89; do run_bg "ring_N2_sm$a" algorithms/allreduce/ring.ccl 2 --arch "$a"; done
# v-collectives: several dtypes (the chunk stride's alignment is per element size), a
# Simple program forced onto LL lines, N = 8 (larger tables in shared memory), sm_75, and
# two chunks per segment (tests/cuda/alltoallv_k2.ccl).
for t in f32 f64 u8; do run_bg "allgatherv_ring_N2_$t" algorithms/allgatherv/ring.ccl 2 --dtype "$t"; done
run_bg alltoallv_pairwise_N4_ll algorithms/alltoallv/pairwise.ccl 4 --protocol ll
run_bg allgatherv_direct_ll_N8 algorithms/allgatherv/direct_ll.ccl 8
run_bg alltoallv_direct_ll_N2_sm75 algorithms/alltoallv/direct_ll.ccl 2 --arch 75
run_bg alltoallv_k2_N4 tests/cuda/alltoallv_k2.ccl 4
# LL128 lines: LL programs and Simple ones forced onto them, every element size (the
# line's 15 data words hold 120, 60, 30 or 15 elements), an older arch, and a
# v-collective (which gets LL's lines).
for t in f32 f64 u8; do run_bg "allpairs_N4_ll128_$t" algorithms/allreduce/allpairs.ccl 4 --protocol ll128 --dtype "$t"; done
run_bg ring_N4_ll128 algorithms/allreduce/ring.ccl 4 --protocol ll128
run_bg alltoall_direct_ll_N2_ll128_sm75 algorithms/alltoall/direct_ll.ccl 2 --protocol ll128 --arch 75
run_bg allgatherv_direct_ll_N4_ll128 algorithms/allgatherv/direct_ll.ccl 4 --protocol ll128
wait
for name in "${names[@]}"; do report "$name"; done

# Golden files: the generated source is deterministic and reviewed when it changes.
golden() {
    local name=$1 file=$2 n=$3 rank=$4
    shift 4
    local want=tests/cuda/golden/$name.cu
    "$build/cclc" cuda "$file" --ranks "$n" --rank "$rank" --kernel-only "$@" >"$tmp/$name.cu" 2>&1
    if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then
        mkdir -p tests/cuda/golden && cp "$tmp/$name.cu" "$want" && echo "ok golden/$name (updated)"
    elif cmp -s "$tmp/$name.cu" "$want"; then
        echo "ok golden/$name"
    else
        echo "FAIL golden/$name: generated CUDA differs from $want (UPDATE_GOLDEN=1 to accept):"
        diff "$want" "$tmp/$name.cu" | head -20
    fi
}
golden allpairs_N4_r1_bf16_sum algorithms/allreduce/allpairs.ccl 4 1 --dtype bf16 --op sum
golden ring_N4_r2_f32_max algorithms/allreduce/ring.ccl 4 2 --dtype f32 --op max
golden ring_port_N4_r1_bf16_sum algorithms/allreduce/ring_port.ccl 4 1 --dtype bf16 --op sum
golden alltoall_direct_ll_N4_r0_bf16 algorithms/alltoall/direct_ll.ccl 4 0 --dtype bf16
golden reduce_direct_ll_N4_r0_bf16_sum algorithms/reduce/direct_ll.ccl 4 0 --dtype bf16 --op sum
golden allgatherv_ring_N4_r1_bf16 algorithms/allgatherv/ring.ccl 4 1 --dtype bf16
golden alltoallv_direct_ll_N4_r0_f32 algorithms/alltoallv/direct_ll.ccl 4 0 --dtype f32
golden allpairs_ll128_N4_r1_bf16_sum algorithms/allreduce/allpairs.ccl 4 1 --dtype bf16 --op sum --protocol ll128

# The prelude alone, as CUDA: nvcc compiles compiler/cuda/prelude.cuh after the
# definitions emit_cuda.c puts before it (bf16, sum), where nvcc is installed.
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ -x "$nvcc" ]; then
    printf '%s\n' 'typedef unsigned short ccl_t;' 'typedef float ccl_acc;' '#define CCL_LOAD(x) ccl_bf2f(x)' \
        '#define CCL_STORE(x) ccl_f2bf(x)' '#define CCL_OP(a, b) ((a) + (b))' '#define CCL_NRANKS 4' \
        '#define CCL_RANK 0' '#include "prelude.cuh"' >"$tmp/lint.cu"
    # And as a v-collective kernel sees it (its shifted copies: emit_cuda.c).
    for v in "" 4; do
        if "$nvcc" -arch=sm_90 -c -x cu -Werror all-warnings -Icompiler/cuda ${v:+-DCCL_SHIFTED_COPIES=$v} \
            -o "$tmp/lint.o" "$tmp/lint.cu" >"$tmp/lint.log" 2>&1; then
            echo "ok cuda.prelude-lint${v:+-shifted}"
        else
            echo "FAIL cuda.prelude-lint${v:+-shifted}: nvcc rejects compiler/cuda/prelude.cuh:"
            head -20 "$tmp/lint.log"
        fi
    done
    # The prelude's tests that only a GPU runs (tests/run-gpu.sh) build here.
    for t in ll128_lines xfer_copy; do
        if "$nvcc" -arch=sm_90 -c -Icompiler/cuda -DCCL_SHIFTED_COPIES=4 -o "$tmp/$t.o" "tests/cuda/$t.cu" \
            >"$tmp/$t.log" 2>&1; then
            echo "ok cuda.builds/$t"
        else
            echo "FAIL cuda.builds/$t: nvcc rejects tests/cuda/$t.cu:"
            head -20 "$tmp/$t.log"
        fi
    done
    # The GPU backend's point-to-point kernel, for every arch it may meet, with no stack
    # frame and no spill in any of its functions (ptxas's report).
    for a in 75 90; do
        if "$nvcc" -arch=sm_$a -c -x cu -Werror all-warnings -Xptxas -v -Icompiler/cuda -o "$tmp/p2p.o" \
            runtime/src/gpu/p2p.cu >"$tmp/p2p.log" 2>&1; then
            frames=$(grep 'bytes stack frame' "$tmp/p2p.log" | grep -vc '0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads')
            if [ "$frames" -eq 0 ]; then
                echo "ok cuda.p2p-kernel-sm$a"
            else
                echo "FAIL cuda.p2p-kernel-sm$a: runtime/src/gpu/p2p.cu has stack frames or spills:"
                grep -B1 'bytes stack frame' "$tmp/p2p.log" | head -20
            fi
        else
            echo "FAIL cuda.p2p-kernel-sm$a: nvcc rejects runtime/src/gpu/p2p.cu:"
            head -20 "$tmp/p2p.log"
        fi
    done
else
    echo "   cuda.prelude-lint: skipped, no $nvcc"
fi

# Transfers at once: tests/cuda/ll_runs.ccl's 3 puts are one run, nothing else is.
"$bin" tests/cuda/ll_runs.ccl 4 --emit 0 >"$tmp/ll_runs.cu" 2>&1
runs=$(grep -o '[0-9]* independent transfers at once:' "$tmp/ll_runs.cu" | tr '\n' ' ')
if [ "$runs" = "3 independent transfers at once: " ]; then
    echo "ok cuda/ll_runs"
else
    echo "FAIL cuda/ll_runs: want one run of 3 transfers, got: ${runs:-none} (tests/cuda/ll_runs.ccl)"
fi
# The LL exit check past 64 ranks (tests/cuda/ll_wide.ccl): at N = 64 the last rank
# records whose lines came in a 64-bit mask; at N = 100 no mask is emitted, the first
# block awaits every peer, and the kernel compiles.
"$bin" tests/cuda/ll_wide.ccl 64 --emit 63 >"$tmp/wide64.cu" 2>&1
"$bin" tests/cuda/ll_wide.ccl 100 --emit 70 >"$tmp/wide100.cu" 2>&1
if ! grep -q 'heard = ~0x7fffffffffffffffull' "$tmp/wide64.cu"; then
    echo "FAIL cuda/ll_wide: N = 64, rank 63 does not record peers 0..62 in its heard mask"
elif grep -q '__shared__ u64 heard' "$tmp/wide100.cu" || ! grep -q 'if (first) ccl_await_peers(a, launch);' "$tmp/wide100.cu"; then
    echo "FAIL cuda/ll_wide: N = 100 must await every peer at the exit, with no heard mask"
elif [ -x "$nvcc" ] && ! "$nvcc" -arch=sm_90 --cubin -o "$tmp/wide100.cubin" "$tmp/wide100.cu" >"$tmp/wide100.log" 2>&1; then
    echo "FAIL cuda/ll_wide: nvcc rejects the N = 100 kernel: $(head -5 "$tmp/wide100.log")"
else
    echo "ok cuda/ll_wide"
fi
# Stack frames and spills of every shipped kernel (tests/cuda/spills.sh says how).
tests/cuda/spills.sh "$build"
exit 0
