#!/usr/bin/env bash
# Kernels as lean as hand-written ones: every shipped algorithm's kernel (N = 4, ranks 0
# and 1, bf16 sum, its own protocol) compiled by nvcc for sm_90 has no stack frame and no
# spill. A program that still has one is listed in tests/cuda/spills.known with its
# numbers and the reason; it fails if its numbers grow, and once it is clean (so the list
# only ever shrinks). Prints "ok NAME" / "FAIL NAME: why"; says so and skips without nvcc.
#
#   tests/cuda/spills.sh BUILD
set -u
build=${1:?usage: tests/cuda/spills.sh BUILD}
cd "$(dirname "$0")/../.."
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$nvcc" ]; then
    echo "   cuda.spills: skipped, no nvcc at $nvcc"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One kernel: its ptxas line "S bytes stack frame, T bytes spill stores, U bytes spill
# loads" reduced to "S T U" in $tmp/NAME.out.
one() {
    local name=$1 file=$2 rank=$3
    if "$build/cclc" cuda "$file" --ranks 4 --rank "$rank" --dtype bf16 --op sum >"$tmp/$name.cu" 2>"$tmp/$name.err" &&
        "$nvcc" -arch=sm_90 --cubin -Xptxas -v -o "$tmp/$name.cubin" "$tmp/$name.cu" >"$tmp/$name.log" 2>&1; then
        grep -A1 "Function properties for ccl_kernel" "$tmp/$name.log" | tail -1 |
            sed -E 's/^ *([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads.*/\1 \2 \3/' \
            >"$tmp/$name.out"
    else
        echo "error" >"$tmp/$name.out"
    fi
}
names=()
for f in algorithms/*/*.ccl; do
    grep -q "^nodes " "$f" && continue   # several nodes: no CUDA emission yet (docs/multinode.md)
    alg=${f#algorithms/}
    alg=${alg%.ccl}
    for r in 0 1; do
        name="${alg//\//_}_r$r"
        names+=("$name:$alg:$r")
        one "$name" "$f" "$r" &
        if (( $(jobs -r | wc -l) >= 2 )); then wait -n; fi
    done
done
wait
for entry in "${names[@]}"; do
    IFS=: read -r name alg r <<<"$entry"
    got=$(cat "$tmp/$name.out")
    known=$(awk -v a="$alg" -v r="$r" '$1 == a && $2 == r { print $3, $4, $5 }' tests/cuda/spills.known)
    if [ "$got" = error ] || [ -z "$got" ]; then
        echo "FAIL cuda.spills/$alg rank $r: no ptxas report: $(head -c 400 "$tmp/$name.log" "$tmp/$name.err")"
    elif [ "$got" = "0 0 0" ] && [ -n "$known" ]; then
        echo "FAIL cuda.spills/$alg rank $r: clean now; remove it from tests/cuda/spills.known"
    elif [ "$got" = "0 0 0" ]; then
        echo "ok cuda.spills/$alg rank $r"
    elif [ -z "$known" ]; then
        read -r s t u <<<"$got"
        echo "FAIL cuda.spills/$alg rank $r: $s bytes stack frame, $t bytes spill stores, $u bytes spill loads"
    else
        read -r s t u <<<"$got"
        read -r ks kt ku <<<"$known"
        if (( s > ks || t > kt || u > ku )); then
            echo "FAIL cuda.spills/$alg rank $r: $s/$t/$u bytes of frame/spill stores/loads, more than the known $ks/$kt/$ku"
        else
            echo "ok cuda.spills/$alg rank $r (known: $s/$t/$u bytes, tests/cuda/spills.known)"
        fi
    fi
done
