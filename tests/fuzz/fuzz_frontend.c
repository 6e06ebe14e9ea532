/* fuzz_frontend.c: libFuzzer target for the whole compiler pipeline.
 *
 * Any byte string is a source file; the first byte picks N in 1..16 (and the root) so
 * expansion, verification and scheduling see many shapes. The contract under test: no
 * input crashes, hangs, leaks or trips a sanitizer; each either compiles or yields
 * diagnostics. Run with `make fuzz` (FUZZ_SECONDS=N). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cclc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int nranks = 4, root = 0;
    if (size > 0) {
        nranks = 1 + data[0] % 16;
        root = (data[0] / 16) % nranks;
        data++;
        size--;
    }
    Compilation c;
    cclc_compile_source(&c, "fuzz.ccl", (const char *)data, size, nranks, root);
    cclc_compilation_free(&c);
    return 0;
}
