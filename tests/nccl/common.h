/* common.h: what tests/nccl's programs share: results printed as "ok NAME" or "FAIL NAME:
 * what", NCCL calls checked with both sides of a failure printed, and exact element
 * values in every NCCL datatype (small integers, which every datatype holds exactly).
 * Header-only: each test is one program, written against nccl.h alone. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

static int failures;

static inline void say(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void say(int ok, const char *name, const char *fmt, ...)
{
    if (ok) {
        printf("ok %s\n", name);
    } else {
        va_list ap;
        va_start(ap, fmt);
        printf("FAIL %s: ", name);
        vprintf(fmt, ap);
        printf("\n");
        va_end(ap);
        failures++;
    }
    fflush(stdout);
}

/* A call that must succeed: on failure, prints the result and the last error and
 * returns from the calling function with -1. */
#define NCCL_OK(name, call)                                                                                    \
    do {                                                                                                      \
        ncclResult_t r_ = (call);                                                                             \
        if (r_ != ncclSuccess) {                                                                              \
            say(0, name, "%s returned %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
            return -1;                                                                                        \
        }                                                                                                     \
    } while (0)

/* A call that must fail with `want`, its last error containing `text`. */
static inline void expect_fail(const char *name, ncclResult_t got, ncclResult_t want, ncclComm_t comm, const char *text)
{
    const char *msg = ncclGetLastError(comm);
    if (got != want)
        say(0, name, "returned %d (%s), expected %d (%s); last error: %s", (int)got, ncclGetErrorString(got), (int)want,
            ncclGetErrorString(want), msg);
    else if (text && !strstr(msg, text))
        say(0, name, "the last error does not say '%s': %s", text, msg);
    else
        say(1, name, " ");
}

static const char *const dtype_names[ncclNumTypes] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                                      "float16", "float32", "float64", "bfloat16", "e4m3", "e5m2"};

static inline size_t dtype_size(ncclDataType_t t)
{
    static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return sizes[t];
}

/* Small binary floats (exponent bits, mantissa bits, bias), for the values below. */
typedef struct {
    int e, m, bias;
} Fmt;

static inline Fmt fmt_of(ncclDataType_t t)
{
    return t == ncclFloat16 ? (Fmt){5, 10, 15} : t == ncclBfloat16 ? (Fmt){8, 7, 127}
         : t == ncclFloat8e4m3 ? (Fmt){4, 3, 7} : (Fmt){5, 2, 15};
}

/* An integer-valued v (|v| < 2^m of the format, or a power of two) as a small float. */
static inline uint32_t small_encode(double v, Fmt f)
{
    uint32_t sign = v < 0 ? 1u << (f.e + f.m) : 0;
    double a = fabs(v);
    if (a == 0)
        return sign;
    int ex;
    double frac = frexp(a, &ex); /* a = frac * 2^ex, frac in [0.5, 1) */
    uint32_t man = (uint32_t)llround((frac * 2 - 1) * (1 << f.m));
    return sign | (uint32_t)(ex - 1 + f.bias) << f.m | man;
}

static inline double small_decode(uint32_t bits, Fmt f)
{
    uint32_t ex = bits >> f.m & ((1u << f.e) - 1), man = bits & ((1u << f.m) - 1);
    double v = ex ? ldexp(man | 1u << f.m, (int)ex - f.bias - f.m) : ldexp(man, 1 - f.bias - f.m);
    return bits >> (f.e + f.m) & 1 ? -v : v;
}

static inline void put(void *buf, size_t i, ncclDataType_t t, double v)
{
    char *p = (char *)buf + i * dtype_size(t);
    switch (t) {
    case ncclInt8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    case ncclFloat32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case ncclFloat64: memcpy(p, &v, 8); break;
    default: {
        uint32_t x = small_encode(v, fmt_of(t));
        memcpy(p, &x, dtype_size(t));
    }
    }
}

static inline double get(const void *buf, size_t i, ncclDataType_t t)
{
    const char *p = (const char *)buf + i * dtype_size(t);
    switch (t) {
    case ncclInt8: { int8_t x; memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclUint64: { uint64_t x; memcpy(&x, p, 8); return (double)x; }
    case ncclFloat32: { float x; memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; memcpy(&x, p, 8); return x; }
    default: {
        uint32_t x = 0;
        memcpy(&x, p, dtype_size(t));
        return small_decode(x, fmt_of(t));
    }
    }
}
