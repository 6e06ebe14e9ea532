#!/bin/sh
# embed.sh SYMBOL SOURCE ABI: prints a C file defining SYMBOL, the text of SOURCE
# (compiler/cuda/prelude.cuh, runtime/src/gpu/p2p.cu) with ABI (abi.h) inlined at its
# `#include "abi.h"`, since NVRTC compiles with no include path, and each file's opening
# comment left out. A NUL-terminated char array written with awk, od and sed (no xxd
# needed).
set -e
echo "/* Generated from $2 and $3 by compiler/cuda/embed.sh: do not edit. */"
echo "extern const char $1[];"
echo "const char $1[] = {"
awk -v source="$2" -v abi="$3" '
    function put(file,    line, n, head) {
        while ((getline line < file) > 0) {
            if (++n == 1 && line ~ /^\/\*/) head = 1
            if (head) {
                if (line ~ /\*\//) head = 0
                continue
            }
            if (file == source && line == "#include \"abi.h\"") put(abi)
            else print line
        }
        close(file)
    }
    BEGIN { put(source) }' | od -An -v -tx1 | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo '0};'
