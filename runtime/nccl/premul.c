/* premul.c: ncclRedOpCreatePreMulSum's scaling, for libccl's CPU backend.
 *
 * libccl has no pre-multiplied sum. On the CPU backend (host buffers, the test mode) the
 * shim multiplies a rank's input by its scalar on the host and sums that with libccl's
 * sum; on GPUs such calls go to the real NCCL (coll.c). Arithmetic as NCCL's: integers
 * multiply in their own width and wrap around; f32 in float and f64 in double; f16,
 * bf16 and fp8 exactly (the product of two of them fits a double) and rounded to
 * nearest even once, fp8 e4m3 being the "fn" variant (no infinities; out of range is
 * NaN, as libccl's e4m3 arithmetic does) and e5m2 IEEE-like. */
#include <math.h>
#include <string.h>

#include "shim.h"

/* A small binary float: exponent and mantissa bits, bias; fn: no infinities, the
 * all-ones pattern is NaN (e4m3fn). */
typedef struct {
    int e, m, bias, fn;
} Fmt;

static const Fmt F16 = {5, 10, 15, 0}, BF16 = {8, 7, 127, 0}, E4M3 = {4, 3, 7, 1}, E5M2 = {5, 2, 15, 0};

static double decode(uint32_t bits, Fmt f)
{
    uint32_t emax = (1u << f.e) - 1, mmax = (1u << f.m) - 1;
    uint32_t ex = bits >> f.m & emax, man = bits & mmax;
    double v;
    if (f.fn && ex == emax && man == mmax)
        v = NAN;
    else if (!f.fn && ex == emax)
        v = man ? NAN : INFINITY;
    else if (ex == 0)
        v = ldexp(man, 1 - f.bias - f.m);
    else
        v = ldexp(man | 1u << f.m, (int)ex - f.bias - f.m);
    return bits >> (f.e + f.m) & 1 ? -v : v;
}

static uint32_t encode(double v, Fmt f)
{
    uint32_t sign = signbit(v) ? 1u << (f.e + f.m) : 0;
    uint32_t inf = ((1u << f.e) - 1) << f.m;
    uint32_t nan = f.fn ? (1u << (f.e + f.m)) - 1 : inf | 1u << (f.m - 1);
    uint32_t max_code = f.fn ? (1u << (f.e + f.m)) - 2 : inf - 1;
    double a = fabs(v);
    if (isnan(v))
        return sign | nan;
    if (isinf(a))
        return sign | (f.fn ? nan : inf);
    if (a == 0)
        return sign;
    int ex;
    frexp(a, &ex);
    int e = ex - 1, emin = 1 - f.bias;
    /* The value in units of its last mantissa bit, rounded to nearest even. */
    double q = nearbyint(ldexp(a, -((e < emin ? emin : e) - f.m)));
    uint64_t code;
    if (e < emin) {
        code = (uint64_t)q; /* a subnormal; q == 2^m is the smallest normal, encoded alike */
    } else {
        int biased = e + f.bias;
        if (q >= ldexp(1, f.m + 1)) {
            q /= 2;
            biased++;
        }
        code = (uint64_t)biased << f.m | ((uint64_t)q - (1u << f.m));
    }
    return sign | (code > max_code ? (f.fn ? nan : inf) : (uint32_t)code);
}

static void premul_small(void *out, const void *in, size_t count, int bytes, Fmt f, const void *scalar)
{
    uint32_t sbits = 0, x = 0;
    memcpy(&sbits, scalar, (size_t)bytes);
    double s = decode(sbits, f);
    for (size_t i = 0; i < count; i++) {
        memcpy(&x, (const char *)in + i * (size_t)bytes, (size_t)bytes);
        uint32_t y = encode(decode(x, f) * s, f);
        memcpy((char *)out + i * (size_t)bytes, &y, (size_t)bytes);
    }
}

/* Integers of `bytes` bytes, signed or not: the product modulo 2^(8 bytes). Two's
 * complement makes both one computation in uint64_t on the sign-extended values. */
static void premul_int(void *out, const void *in, size_t count, int bytes, int is_signed, const void *scalar)
{
    uint64_t s = 0, x;
    int shift = 64 - 8 * bytes;
    memcpy(&s, scalar, (size_t)bytes);
    if (is_signed && shift)
        s = (uint64_t)((int64_t)(s << shift) >> shift);
    for (size_t i = 0; i < count; i++) {
        x = 0;
        memcpy(&x, (const char *)in + i * (size_t)bytes, (size_t)bytes);
        if (is_signed && shift)
            x = (uint64_t)((int64_t)(x << shift) >> shift);
        uint64_t y = x * s;
        memcpy((char *)out + i * (size_t)bytes, &y, (size_t)bytes); /* little-endian: the low bytes */
    }
}

void shim_premul(void *out, const void *in, size_t count, ncclDataType_t dtype, const void *scalar)
{
    switch (dtype) {
    case ncclFloat32: {
        float s, x;
        memcpy(&s, scalar, sizeof s);
        for (size_t i = 0; i < count; i++) {
            memcpy(&x, (const char *)in + i * sizeof x, sizeof x);
            x *= s;
            memcpy((char *)out + i * sizeof x, &x, sizeof x);
        }
        return;
    }
    case ncclFloat64: {
        double s, x;
        memcpy(&s, scalar, sizeof s);
        for (size_t i = 0; i < count; i++) {
            memcpy(&x, (const char *)in + i * sizeof x, sizeof x);
            x *= s;
            memcpy((char *)out + i * sizeof x, &x, sizeof x);
        }
        return;
    }
    case ncclFloat16:
        premul_small(out, in, count, 2, F16, scalar);
        return;
    case ncclBfloat16:
        premul_small(out, in, count, 2, BF16, scalar);
        return;
    case ncclFloat8e4m3:
        premul_small(out, in, count, 1, E4M3, scalar);
        return;
    case ncclFloat8e5m2:
        premul_small(out, in, count, 1, E5M2, scalar);
        return;
    case ncclInt8:
    case ncclUint8:
        premul_int(out, in, count, 1, dtype == ncclInt8, scalar);
        return;
    case ncclInt32:
    case ncclUint32:
        premul_int(out, in, count, 4, dtype == ncclInt32, scalar);
        return;
    default:
        premul_int(out, in, count, 8, 0, scalar); /* 64 bits: the sign does not matter */
        return;
    }
}
