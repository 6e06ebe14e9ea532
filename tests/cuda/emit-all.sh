#!/bin/sh
# emit-all.sh CCLC DIR: emits every shipped algorithm's kernels into DIR, one file per
# (algorithm, N, rank, protocol, dtype), at N = 2 and 4, every rank, protocols simple,
# ll and ll128 where cclc admits them (an algorithm or N it refuses writes no file),
# dtypes f32 and bf16; kernels only (--kernel-only), then the prelude once. Compare two
# trees' emission with `diff -r`: a change meant for some programs must leave every
# other kernel byte for byte as it was.
set -u
cclc=$1 dir=$2
mkdir -p "$dir"
find algorithms -name '*.ccl' | sort | while read -r f; do
    name=$(echo "$f" | sed 's|^algorithms/||; s|\.ccl$||; s|/|_|g')
    for n in 2 4; do
        r=0
        while [ "$r" -lt "$n" ]; do
            for proto in simple ll ll128; do
                for dt in f32 bf16; do
                    out="$dir/$name.n$n.r$r.$proto.$dt.cu"
                    "$cclc" cuda "$f" --ranks "$n" --rank "$r" --protocol "$proto" --dtype "$dt" --kernel-only \
                        >"$out" 2>/dev/null || rm -f "$out"
                done
            done
            r=$((r + 1))
        done
    done
done
"$cclc" cuda algorithms/allreduce/ring.ccl --ranks 2 --rank 0 | sed '/^extern "C" __global__ void __launch_bounds__/,$d' \
    >"$dir/prelude.cu"
