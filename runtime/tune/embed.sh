#!/bin/sh
# embed.sh TABLE...: prints a C file defining ccl__tune_texts, libccl's built-in tuning
# tables (runtime/tune/*.tbl, docs/tuner.md) as {path, text} pairs in the order given,
# ended by {0, 0}, and ccl__tune_ntexts, their number. Each text is the file's bytes,
# unchanged, as a NUL-terminated char array written with od and sed (no xxd needed; as
# compiler/cuda/embed.sh does for the CUDA prelude).
set -e
echo "/* Generated from $* by runtime/tune/embed.sh: do not edit. */"
echo '#include <stddef.h>'
echo
echo '#include "internal.h"'
i=0
for f in "$@"; do
    case $f in
    *[!A-Za-z0-9_./-]*) echo "embed.sh: '$f': a table's path may hold only letters, digits, '_', '.', '/' and '-'" >&2; exit 1 ;;
    esac
    echo "static const char text$i[] = {"
    od -An -v -tx1 "$f" | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'
    echo '0};'
    i=$((i + 1))
done
echo 'const CclTuneText ccl__tune_texts[] = {'
i=0
for f in "$@"; do
    echo "    {\"$f\", text$i},"
    i=$((i + 1))
done
echo '    {NULL, NULL},'
echo '};'
echo "const int ccl__tune_ntexts = $#;"
