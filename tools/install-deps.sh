#!/usr/bin/env bash
# Installs what building and testing CCL needs on a fresh Debian/Ubuntu machine:
# Flex and Bison (the front end), Open MPI (multi-process tests), clang's libFuzzer
# runtime (make fuzz). The CUDA toolkit (nvcc, NVRTC headers) is expected under
# /usr/local/cuda; without it the GPU pieces are skipped, never faked.
set -eu
need=()
command -v flex >/dev/null || need+=(flex)
command -v bison >/dev/null || need+=(bison)
command -v mpirun >/dev/null || need+=(openmpi-bin libopenmpi-dev)
command -v clang >/dev/null || need+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
echo "installing: ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
