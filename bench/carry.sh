#!/usr/bin/env bash
# What a device call needs from a build, copied into .carry/BUILD (ignored by git; name it
# in the device tool's carry): the tools, libccl.so and libccl_nccl.so, the GPU tests and
# the examples. The device machines have no Flex or Bison, so everything is built here first.
#
#   bench/carry.sh [BUILD]     (default build; make first)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
dest=.carry/$build
rm -rf "$dest"
mkdir -p "$dest/tests/gpu" "$dest/examples"
cp -P "$build"/cclc "$build"/ccl-perf "$build"/ccl-tune "$build"/libccl.so* "$build"/libccl_nccl.so* "$build"/commit.txt \
    "$dest/"
find "$build/tests/gpu" -maxdepth 1 -type f -perm -u+x -exec cp {} "$dest/tests/gpu/" \;
find "$build/examples" -maxdepth 1 -type f -perm -u+x -exec cp {} "$dest/examples/" \;
du -sh "$dest"
