/* int_ops.c: the CUDA emitter's integer arithmetic against the CPU backend's.
 *
 *   int_ops        (built by tests/cuda/run.sh, not by make: it needs cclc's output)
 *
 * For every integer dtype and op, `cclc cuda --kernel-only` writes the kernel's element
 * definitions (typedefs ccl_t and ccl_acc, CCL_LOAD, CCL_STORE, CCL_OP), which for
 * integers are C as well as CUDA. tests/cuda/run.sh puts each set into a function of
 * int_ops.gen.h around REDUCE_BODY below, which reduces the way the device prelude does
 * (compiler/cuda/prelude.cuh: one accumulator loaded from the first operand, CCL_OP with
 * each further one, one CCL_STORE; or stored after every operand, as a chain of two-
 * operand steps across a ring's steps; avg divides the stored sum by N as ccl_avg does).
 * Operands are random bit patterns of the element's width with the extremes mixed in
 * (so sums and products wrap, and signed and unsigned orders differ); every result must
 * equal runtime/src/reduce.c's (ccl__reduce, ccl__divide for avg), which the CPU backend
 * runs and whose wrap-around is docs/api.md's contract. Prints "ok cuda/int-ops/T/OP" or
 * "FAIL cuda/int-ops/T/OP: operands, both results". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

/* The emitted definitions in scope: ns operands (each one element) into out. */
#define REDUCE_BODY                                                              \
    {                                                                            \
        const ccl_t *s = (const ccl_t *)src;                                     \
        ccl_t r;                                                                 \
        if (stepwise) {                                                          \
            r = s[0];                                                            \
            for (int k = 1; k < ns; k++)                                         \
                r = CCL_STORE(CCL_OP(CCL_LOAD(r), CCL_LOAD(s[k])));              \
        } else {                                                                 \
            ccl_acc x = CCL_LOAD(s[0]);                                          \
            for (int k = 1; k < ns; k++)                                         \
                x = CCL_OP(x, CCL_LOAD(s[k]));                                   \
            r = CCL_STORE(x);                                                    \
        }                                                                        \
        if (avg)                                                                 \
            r = CCL_STORE(CCL_LOAD(r) / (ccl_acc)ns);                            \
        memcpy(out, &r, sizeof r);                                               \
    }

typedef struct {
    const char *dtype_name, *op_name;
    ccl_dtype_t dtype;
    ccl_op_t op;
    void (*reduce)(const void *src, int ns, int stepwise, int avg, void *out);
} Variant;

#include "int_ops.gen.h" /* static const Variant variants[]; made by tests/cuda/run.sh */

enum { MAXNS = 8, VECTORS = 4000 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A random element of es bytes, now and then an extreme (0, 1, the largest, the
 * smallest, -1 as bits, the sign bit alone). */
static void operand(void *e, size_t es)
{
    uint64_t bits = next(), top = 1ull << (8 * es - 1);
    switch (next() % 8) {
    case 0: bits = 0; break;
    case 1: bits = 1; break;
    case 2: bits = top - 1; break;
    case 3: bits = top; break;
    case 4: bits = ~0ull; break;
    default: break;
    }
    memcpy(e, &bits, es); /* the low bytes: little-endian */
}

static void hex(char *buf, size_t len, const void *e, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, e, es);
    snprintf(buf, len, "0x%llx", (unsigned long long)v);
}

int main(void)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const Variant *v = &variants[i];
        size_t es = ccl_dtype_size(v->dtype);
        int bad = 0;
        for (int n = 0; n < VECTORS && !bad; n++) {
            int ns = 1 + n % MAXNS, stepwise = n / MAXNS % 2;
            unsigned char src[MAXNS * 8], got[8] = {0}, want[8] = {0};
            const void *srcs[MAXNS];
            for (int k = 0; k < ns; k++) {
                operand(src + (size_t)k * es, es);
                srcs[k] = src + (size_t)k * es;
            }
            v->reduce(src, ns, stepwise, v->op == CCL_AVG, got);
            ccl__reduce(want, srcs, ns, 1, v->dtype, v->op);
            if (v->op == CCL_AVG)
                ccl__divide(want, 1, v->dtype, ns);
            if (memcmp(got, want, es) != 0) {
                char g[32], w[32], o[MAXNS * 24] = "";
                hex(g, sizeof g, got, es);
                hex(w, sizeof w, want, es);
                for (int k = 0; k < ns; k++) {
                    char one[32];
                    hex(one, sizeof one, src + (size_t)k * es, es);
                    snprintf(o + strlen(o), sizeof o - strlen(o), "%s%s", k ? " " : "", one);
                }
                printf("FAIL cuda/int-ops/%s/%s: operands %s (%s): the kernel's code gives %s, the CPU backend %s\n",
                       v->dtype_name, v->op_name, o, stepwise ? "stored after each" : "one accumulator", g, w);
                bad = 1;
            }
        }
        if (!bad)
            printf("ok cuda/int-ops/%s/%s (%d operand vectors of 1..%d, wrapping and extremes)\n", v->dtype_name,
                   v->op_name, VECTORS, MAXNS);
        failures += bad;
    }
    return failures != 0;
}
