#!/usr/bin/env bash
# One device call on any GPU machine, one GPU enough: the README's two commands and
# make check-gpu (ranks sharing the GPU where there are fewer GPUs than ranks), with the
# shared-GPU probe first. The build folder comes carried (no Flex/Bison there, and no
# network to install them: INSTALL_DEPS=: skips make's deps step); its files are made
# newer than the sources so make rebuilds nothing. Logs land in $OUT.
#   bench/one-gpu-session.sh [probe] [demo] [check] [check-gpu]
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
    esac
    echo "== $step: $(( $(date +%s) - start ))s"
done
