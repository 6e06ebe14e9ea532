#!/usr/bin/env bash
# One device call on any GPU machine, one GPU enough: the README's two commands and
# make check-gpu (ranks sharing the GPU where there are fewer GPUs than ranks), with the
# shared-GPU probe first. The build folder comes carried (no Flex/Bison there, and no
# network to install them: INSTALL_DEPS=: skips make's deps step); its files are made
# newer than the sources so make rebuilds nothing. Logs land in $OUT.
#   bench/one-gpu-session.sh [probe] [demo] [check] [check-gpu] [ll128]
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 CCL_CACHE_DIR=/tmp/ccl-cache
find build -exec touch {} +
nvidia-smi -L | tee "$OUT/gpus.txt"
# The MPI example needs mpicc, which the CPU machine may lack.
mpicc -std=c11 -O2 -Iruntime/include examples/allreduce_mpi.c build/libccl.a -o build/examples/allreduce_mpi \
    -pthread -ldl -lm -lrt 2>&1 | tail -3
for step in "$@"; do
    start=$(date +%s)
    case $step in
    probe)
        cc -std=c11 -O2 -I/usr/local/cuda/include bench/shared_gpu_probe.c -o /tmp/shared_gpu_probe \
            -L/usr/local/cuda/lib64/stubs -L/usr/local/cuda/lib64 -lcuda -lnvrtc &&
            /tmp/shared_gpu_probe 2>&1 | tee "$OUT/probe.txt" ;;
    demo) make demo INSTALL_DEPS=: 2>&1 | tee "$OUT/demo.log" | tail -4 ;;
    check) make check INSTALL_DEPS=: 2>&1 | tee "$OUT/check.log" | tail -4 ;;
    check-gpu) make check-gpu 2>&1 | tee "$OUT/check-gpu.log" | grep -v '^ok ' ;;
    ll128)
        # LL128 lines: whether a warp's 128-byte line arrives whole within the GPU
        # (bench/ll128_probe.cu), then tests/run-gpu.sh's LL128 cases (every element
        # checked; ranks sharing the GPU run LL128 programs with LL lines).
        nvcc -arch=sm_90 -O2 -o /tmp/ll128_probe bench/ll128_probe.cu && /tmp/ll128_probe 2000 0 | tee "$OUT/ll128-probe.txt"
        {
            for n in 2 4; do
                CCL_GPU_PROTOCOL=ll128 build/tests/gpu/gpu_test --ranks "$n" algorithms/allreduce/ring.ccl \
                    algorithms/allreduce/allpairs.ccl algorithms/allgather/direct_ll.ccl algorithms/alltoall/direct_ll.ccl \
                    algorithms/broadcast/direct_ll.ccl algorithms/reduce/direct_ll.ccl algorithms/reduce_scatter/ring.ccl \
                    algorithms/allgatherv/direct_ll.ccl
            done
        } 2>&1 | tee "$OUT/ll128-check.log" | grep -v '^ok '
        echo "ll128 checks: $(grep -c '^ok ' "$OUT/ll128-check.log") passed, $(grep -c '^FAIL' "$OUT/ll128-check.log") failed" ;;
    esac
    echo "== $step: $(( $(date +%s) - start ))s"
done
