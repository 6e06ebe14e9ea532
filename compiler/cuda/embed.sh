#!/bin/sh
# embed.sh SYMBOL SOURCE INCLUDE...: prints a C file defining SYMBOL, the text of SOURCE
# (compiler/cuda/prelude.cuh, runtime/src/gpu/p2p.cu) with each INCLUDE (abi.h, copy.cuh)
# inlined at its `#include "NAME"` (NAME: the INCLUDE's file name), since NVRTC compiles
# with no include path, and each file's opening comment left out. A NUL-terminated char
# array written with awk, od and sed (no xxd needed).
set -e
symbol=$1 source=$2
shift 2
echo "/* Generated from $source and $* by compiler/cuda/embed.sh: do not edit. */"
echo "extern const char $symbol[];"
echo "const char $symbol[] = {"
awk -v source="$source" -v includes="$*" '
    function put(file,    line, n, head, name) {
        while ((getline line < file) > 0) {
            if (++n == 1 && line ~ /^\/\*/) head = 1
            if (head) {
                if (line ~ /\*\//) head = 0
                continue
            }
            name = line
            if (sub(/^#include "/, "", name) && sub(/"$/, "", name) && name in path) put(path[name])
            else print line
        }
        close(file)
    }
    BEGIN {
        k = split(includes, list, " ")
        for (i = 1; i <= k; i++) { name = list[i]; sub(/.*\//, "", name); path[name] = list[i] }
        put(source)
    }' | od -An -v -tx1 | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo '0};'
