#!/bin/sh
# embed.sh PRELUDE ABI: prints a C file defining ccl__prelude_cuh, the text of PRELUDE
# (compiler/cuda/prelude.cuh) with ABI (abi.h) inlined at its `#include "abi.h"`, since
# NVRTC compiles each kernel with no include path, and each file's opening comment left
# out. A NUL-terminated char array written with awk, od and sed (no xxd needed).
set -e
echo "/* Generated from $1 and $2 by compiler/cuda/embed.sh: do not edit. */"
echo 'extern const char ccl__prelude_cuh[];'
echo 'const char ccl__prelude_cuh[] = {'
awk -v prelude="$1" -v abi="$2" '
    function put(file,    line, n, head) {
        while ((getline line < file) > 0) {
            if (++n == 1 && line ~ /^\/\*/) head = 1
            if (head) {
                if (line ~ /\*\//) head = 0
                continue
            }
            if (file == prelude && line == "#include \"abi.h\"") put(abi)
            else print line
        }
        close(file)
    }
    BEGIN { put(prelude) }' | od -An -v -tx1 | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
echo '0};'
