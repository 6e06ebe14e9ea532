/* fuzz_frontend.c: libFuzzer target for the whole compiler pipeline.
 *
 * Any byte string is a source file; the first byte picks N in 1..16 (and the root) so
 * expansion, verification and scheduling see many shapes. An input whose first byte is
 * 0xff is instead a recipe for a large program (gen_program): each following byte pair
 * picks a statement template and how many times to repeat it, so small inputs reach the
 * expander and the verifier with thousands of statements, deep loops, long expressions
 * and many declarations, which mutations of small files rarely build. The contract under
 * test: no input crashes, hangs, leaks or trips a sanitizer; each either compiles or
 * yields diagnostics. Run with `make fuzz` (FUZZ_SECONDS=N). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Statement templates of a valid-looking allreduce body; %d is the repeat index. */
static const char *const templates[] = {
    "  put stage@next[%d %% N] <- in[r]\n  signal next\n  wait prev\n",
    "  reduce out[(r + %d) %% N] <- in[(r + %d) %% N], stage[0]\n",
    "  let x%d = (r * 7 + %d) %% N\n",
    "  for k in 0..N { copy out[k] <- in[(k + %d) %% N] }\n",
    "  if r %% 2 == %d %% 2 { signal next } else { wait prev }\n",
    "  copy out[r] <- in[(r + N - %d %% N) %% N]\n",
    "  for a in 0..2 { for b in 0..2 { let y = a * b + %d } }\n",
    "  wait prev\n  signal next\n  put out@next[(r + %d) %% N] <- out[r]\n",
};

/* A program from a recipe: header, then per byte pair (template, repeats 1..256). */
static char *gen_program(const uint8_t *data, size_t size, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    int scratch = size ? 1 + data[0] % 64 : 1;
    n += (size_t)snprintf(s, cap, "algorithm gen : allreduce\nranks N in 2..16\nchunks N\nscratch stage[%d]\n", scratch);
    for (int i = 0; size > 1 && i < data[1] % 8; i++)
        n += (size_t)snprintf(s + n, cap - n, "scratch extra%d[N]\n", i);
    n += (size_t)snprintf(s + n, cap - n, "for r in 0..N on r tb 0 {\n  let next = (r + 1) %% N\n  let prev = (r - 1) %% N\n");
    for (size_t i = 2; i + 1 < size && n < (4u << 20); i += 2) {
        const char *t = templates[data[i] % (sizeof templates / sizeof templates[0])];
        for (int k = 0; k <= data[i + 1]; k++) {
            if (cap - n < 256) {
                char *m = realloc(s, cap *= 2);
                if (!m) {
                    free(s);
                    return NULL;
                }
                s = m;
            }
            n += (size_t)snprintf(s + n, cap - n, t, k, k);
        }
    }
    n += (size_t)snprintf(s + n, cap - n, "}\n");
    *len = n;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int nranks = 4, root = 0;
    Compilation c;
    if (size > 0 && data[0] == 0xff) {
        size_t len = 0;
        char *src = gen_program(data + 1, size - 1, &len);
        if (src) {
            nranks = size > 1 ? 2 + data[1] % 15 : 4;
            cclc_compile_source(&c, "gen.ccl", src, len, nranks, 0);
            cclc_compilation_free(&c);
            free(src);
        }
        return 0;
    }
    if (size > 0) {
        nranks = 1 + data[0] % 16;
        root = (data[0] / 16) % nranks;
        data++;
        size--;
    }
    cclc_compile_source(&c, "fuzz.ccl", (const char *)data, size, nranks, root);
    cclc_compilation_free(&c);
    return 0;
}
