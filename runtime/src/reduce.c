/* reduce.c: element types and reductions on the host (CPU backend, cclc run's checks).
 *
 * Integers reduce in their own width with wrap-around (sum and prod in unsigned
 * arithmetic, so overflow is defined); f32 in float, f64 in double; f16, bf16 and both
 * fp8 formats decode to float, reduce in float and round to nearest even once on store.
 * Operands combine left to right, so a reduce is deterministic for a given operand
 * order. fp8 e4m3 is the "fn" variant (no infinities; out of range becomes NaN), e5m2
 * is IEEE-like. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base.h"

/* ---- small floats ---- */

typedef struct {
    int ebits, mbits;
    int fn;               /* e4m3fn: the all-ones exponent is finite, only S.1111.111 is NaN */
} SmallFloat;

static const SmallFloat F16 = {5, 10, 0}, E4M3 = {4, 3, 1}, E5M2 = {5, 2, 0};

static float decode_small(uint32_t bits, SmallFloat f)
{
    uint32_t mmask = (1u << f.mbits) - 1, emax = (1u << f.ebits) - 1;
    uint32_t sign = bits >> (f.ebits + f.mbits) & 1, e = bits >> f.mbits & emax, m = bits & mmask;
    int bias = (1 << (f.ebits - 1)) - 1;
    double v;
    if (e == emax && !f.fn)
        v = m ? NAN : INFINITY;
    else if (e == emax && f.fn && m == mmask)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - f.mbits);
    else
        v = ldexp((double)(m | (mmask + 1)), (int)e - bias - f.mbits);
    return (float)(sign ? -v : v);
}

static uint32_t encode_small(float x, SmallFloat f)
{
    uint32_t sign = signbit(x) ? 1u << (f.ebits + f.mbits) : 0;
    uint32_t emax = (1u << f.ebits) - 1, mmask = (1u << f.mbits) - 1;
    uint32_t nan = f.fn ? (emax << f.mbits | mmask) : (emax << f.mbits | (1u << (f.mbits - 1)));
    if (isnan(x))
        return sign | nan;
    uint32_t inf = f.fn ? nan : emax << f.mbits;
    double a = fabs((double)x);
    if (isinf(a))
        return sign | inf;
    if (a == 0)
        return sign;
    int bias = (1 << (f.ebits - 1)) - 1, emin = 1 - bias, e;
    frexp(a, &e);
    e -= 1;                              /* a = 1.xxx * 2^e */
    if (e < emin)
        e = emin;                        /* subnormal: fixed quantum 2^(emin - mbits) */
    uint64_t m = (uint64_t)nearbyint(ldexp(a, f.mbits - e)); /* round to nearest even */
    if (m >> (f.mbits + 1)) {            /* rounding carried into the next binade */
        m >>= 1;
        e++;
    }
    uint32_t ef = m >> f.mbits ? (uint32_t)(e + bias) : 0;
    uint32_t mant = (uint32_t)m & mmask;
    uint32_t elimit = f.fn ? emax : emax - 1;
    if (ef > elimit || (f.fn && ef == emax && mant == mmask))
        return sign | inf;
    return sign | ef << f.mbits | mant;
}

/* f16 from float with round to nearest even, by integer arithmetic (no libm in the
 * reduction's inner loop). Values past the largest half round to infinity. */
static inline uint16_t float_to_f16(float fin)
{
    const uint32_t f32infty = 255u << 23, f16max = (127u + 16) << 23;
    const uint32_t denorm_magic_u = ((127u - 15) + (23 - 10) + 1) << 23;
    float denorm_magic;
    memcpy(&denorm_magic, &denorm_magic_u, 4);
    uint32_t f;
    memcpy(&f, &fin, 4);
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= f16max) {
        o = f > f32infty ? 0x7e00 : 0x7c00;
    } else if (f < (113u << 23)) {
        /* Subnormal half (or zero): let the FPU round by adding a magic number. */
        float ff;
        memcpy(&ff, &f, 4);
        ff += denorm_magic;
        memcpy(&f, &ff, 4);
        o = (uint16_t)(f - denorm_magic_u);
    } else {
        uint32_t mant_odd = (f >> 13) & 1;
        f += ((uint32_t)(15 - 127) << 23) + 0xfff;
        f += mant_odd;
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | sign >> 16);
}

static float f16_table[65536], e4m3_table[256], e5m2_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static _Atomic int tables_ready;

static void tables_init(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        f16_table[i] = decode_small(i, F16);
    for (uint32_t i = 0; i < 256; i++) {
        e4m3_table[i] = decode_small(i, E4M3);
        e5m2_table[i] = decode_small(i, E5M2);
    }
    atomic_store(&tables_ready, 1);
}

/* The decode tables, built once; cheap to call per element. */
static inline void tables(void)
{
    if (!atomic_load_explicit(&tables_ready, memory_order_acquire))
        pthread_once(&tables_once, tables_init);
}

static inline float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(u >> 16 | 0x40);      /* quiet NaN */
    u += 0x7fffu + (u >> 16 & 1);              /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float ccl__to_float(const void *x, ccl_dtype_t t)
{
    tables();
    switch (t) {
    case CCL_F16: return f16_table[*(const uint16_t *)x];
    case CCL_BF16: return bf16_to_float(*(const uint16_t *)x);
    case CCL_FP8_E4M3: return e4m3_table[*(const uint8_t *)x];
    case CCL_FP8_E5M2: return e5m2_table[*(const uint8_t *)x];
    case CCL_F32: return *(const float *)x;
    default: return (float)ccl__load_double(x, t);
    }
}

void ccl__from_float(void *x, float f, ccl_dtype_t t)
{
    switch (t) {
    case CCL_F16: *(uint16_t *)x = float_to_f16(f); break;
    case CCL_BF16: *(uint16_t *)x = float_to_bf16(f); break;
    case CCL_FP8_E4M3: *(uint8_t *)x = (uint8_t)encode_small(f, E4M3); break;
    case CCL_FP8_E5M2: *(uint8_t *)x = (uint8_t)encode_small(f, E5M2); break;
    case CCL_F32: *(float *)x = f; break;
    case CCL_F64: *(double *)x = f; break;
    case CCL_I32: *(int32_t *)x = (int32_t)f; break;
    case CCL_I64: *(int64_t *)x = (int64_t)f; break;
    case CCL_U8: *(uint8_t *)x = (uint8_t)f; break;
    case CCL_I8: *(int8_t *)x = (int8_t)f; break;
    case CCL_U32: *(uint32_t *)x = (uint32_t)f; break;
    case CCL_U64: *(uint64_t *)x = (uint64_t)f; break;
    default: break;
    }
}

double ccl__load_double(const void *x, ccl_dtype_t t)
{
    switch (t) {
    case CCL_F32: return *(const float *)x;
    case CCL_F64: return *(const double *)x;
    case CCL_I32: return *(const int32_t *)x;
    case CCL_I64: return (double)*(const int64_t *)x;
    case CCL_U8: return *(const uint8_t *)x;
    case CCL_I8: return *(const int8_t *)x;
    case CCL_U32: return *(const uint32_t *)x;
    case CCL_U64: return (double)*(const uint64_t *)x;
    default: return ccl__to_float(x, t);
    }
}

/* ---- reductions ---- */

#define MIN_(a, b) ((b) < (a) ? (b) : (a))
#define MAX_(a, b) ((b) > (a) ? (b) : (a))

/* One loop per op so the op switch stays outside the element loop. LOAD(k, e) reads
 * operand k's element e into the accumulator type, STORE(e, v) writes the result. */
#define REDUCE_LOOPS(ACC, LOAD, STORE, SUM, PROD)                                   \
    switch (op) {                                                                  \
    case CCL_SUM:                                                                  \
    case CCL_AVG:                                                                  \
        for (size_t e = 0; e < n; e++) {                                           \
            ACC v = LOAD(0, e);                                                    \
            for (int k = 1; k < nsrc; k++)                                         \
                v = SUM(v, LOAD(k, e));                                            \
            STORE(e, v);                                                           \
        }                                                                          \
        break;                                                                     \
    case CCL_PROD:                                                                 \
        for (size_t e = 0; e < n; e++) {                                           \
            ACC v = LOAD(0, e);                                                    \
            for (int k = 1; k < nsrc; k++)                                         \
                v = PROD(v, LOAD(k, e));                                           \
            STORE(e, v);                                                           \
        }                                                                          \
        break;                                                                     \
    case CCL_MIN:                                                                  \
        for (size_t e = 0; e < n; e++) {                                           \
            ACC v = LOAD(0, e);                                                    \
            for (int k = 1; k < nsrc; k++)                                         \
                v = MIN_(v, LOAD(k, e));                                           \
            STORE(e, v);                                                           \
        }                                                                          \
        break;                                                                     \
    case CCL_MAX:                                                                  \
        for (size_t e = 0; e < n; e++) {                                           \
            ACC v = LOAD(0, e);                                                    \
            for (int k = 1; k < nsrc; k++)                                         \
                v = MAX_(v, LOAD(k, e));                                           \
            STORE(e, v);                                                           \
        }                                                                          \
        break;                                                                     \
    default:                                                                       \
        break;                                                                     \
    }

#define PLAIN_SUM(a, b) ((a) + (b))
#define PLAIN_PROD(a, b) ((a) * (b))

static void reduce_f32(float *d, const float *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
    REDUCE_LOOPS(float, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
}

static void reduce_f64(double *d, const double *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
    REDUCE_LOOPS(double, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
}

static void reduce_i32(int32_t *d, const int32_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
#define SUM32(a, b) (int32_t)((uint32_t)(a) + (uint32_t)(b))
#define PROD32(a, b) (int32_t)((uint32_t)(a) * (uint32_t)(b))
    REDUCE_LOOPS(int32_t, L, S, SUM32, PROD32)
#undef L
#undef S
}

static void reduce_i64(int64_t *d, const int64_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
#define SUM64(a, b) (int64_t)((uint64_t)(a) + (uint64_t)(b))
#define PROD64(a, b) (int64_t)((uint64_t)(a) * (uint64_t)(b))
    REDUCE_LOOPS(int64_t, L, S, SUM64, PROD64)
#undef L
#undef S
}

static void reduce_u8(uint8_t *d, const uint8_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
#define SUM8(a, b) (uint8_t)((unsigned)(a) + (unsigned)(b))
#define PROD8(a, b) (uint8_t)((unsigned)(a) * (unsigned)(b))
    REDUCE_LOOPS(uint8_t, L, S, SUM8, PROD8)
#undef L
#undef S
}

/* i8, u32, u64: wrap around in their width (through the unsigned type of that width,
 * where wrapping is defined); min and max compare as the type. */
static void reduce_i8(int8_t *d, const int8_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
#define SUMI8(a, b) (int8_t)(uint8_t)((unsigned)(uint8_t)(a) + (unsigned)(uint8_t)(b))
#define PRODI8(a, b) (int8_t)(uint8_t)((unsigned)(uint8_t)(a) * (unsigned)(uint8_t)(b))
    REDUCE_LOOPS(int8_t, L, S, SUMI8, PRODI8)
#undef L
#undef S
}

static void reduce_u32(uint32_t *d, const uint32_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
#define SUMU32(a, b) (uint32_t)((uint64_t)(a) + (b))
#define PRODU32(a, b) (uint32_t)((uint64_t)(a) * (b))
    REDUCE_LOOPS(uint32_t, L, S, SUMU32, PRODU32)
#undef L
#undef S
}

static void reduce_u64(uint64_t *d, const uint64_t *const *s, int nsrc, size_t n, ccl_op_t op)
{
#define L(k, e) s[k][e]
#define S(e, v) d[e] = (v)
    REDUCE_LOOPS(uint64_t, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
}

/* The half types through float: 16-bit (f16, bf16) and 8-bit (fp8) storage. */
static void reduce_half16(uint16_t *d, const uint16_t *const *s, int nsrc, size_t n, ccl_op_t op, ccl_dtype_t t)
{
    tables();
    if (t == CCL_BF16) {
#define L(k, e) bf16_to_float(s[k][e])
#define S(e, v) d[e] = float_to_bf16(v)
        REDUCE_LOOPS(float, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
    } else {
#define L(k, e) f16_table[s[k][e]]
#define S(e, v) d[e] = float_to_f16(v)
        REDUCE_LOOPS(float, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
    }
}

static void reduce_fp8(uint8_t *d, const uint8_t *const *s, int nsrc, size_t n, ccl_op_t op, ccl_dtype_t t)
{
    tables();
    const float *tab = t == CCL_FP8_E4M3 ? e4m3_table : e5m2_table;
    SmallFloat f = t == CCL_FP8_E4M3 ? E4M3 : E5M2;
#define L(k, e) tab[s[k][e]]
#define S(e, v) d[e] = (uint8_t)encode_small((v), f)
    REDUCE_LOOPS(float, L, S, PLAIN_SUM, PLAIN_PROD)
#undef L
#undef S
}

void ccl__reduce(void *dst, const void *const *src, int nsrc, size_t n, ccl_dtype_t t, ccl_op_t op)
{
    if (nsrc == 1) {
        if (dst != src[0])
            memmove(dst, src[0], n * ccl_dtype_size(t));
        return;
    }
    switch (t) {
    case CCL_F32: reduce_f32(dst, (const float *const *)src, nsrc, n, op); break;
    case CCL_F64: reduce_f64(dst, (const double *const *)src, nsrc, n, op); break;
    case CCL_I32: reduce_i32(dst, (const int32_t *const *)src, nsrc, n, op); break;
    case CCL_I64: reduce_i64(dst, (const int64_t *const *)src, nsrc, n, op); break;
    case CCL_U8: reduce_u8(dst, (const uint8_t *const *)src, nsrc, n, op); break;
    case CCL_I8: reduce_i8(dst, (const int8_t *const *)src, nsrc, n, op); break;
    case CCL_U32: reduce_u32(dst, (const uint32_t *const *)src, nsrc, n, op); break;
    case CCL_U64: reduce_u64(dst, (const uint64_t *const *)src, nsrc, n, op); break;
    case CCL_F16:
    case CCL_BF16: reduce_half16(dst, (const uint16_t *const *)src, nsrc, n, op, t); break;
    case CCL_FP8_E4M3:
    case CCL_FP8_E5M2: reduce_fp8(dst, (const uint8_t *const *)src, nsrc, n, op, t); break;
    default: break;
    }
}

void ccl__divide(void *x, size_t n, ccl_dtype_t t, int divisor)
{
    size_t es = ccl_dtype_size(t);
    char *p = x;
    switch (t) {
    case CCL_F32: for (size_t e = 0; e < n; e++) ((float *)x)[e] /= (float)divisor; break;
    case CCL_F64: for (size_t e = 0; e < n; e++) ((double *)x)[e] /= divisor; break;
    case CCL_I32: for (size_t e = 0; e < n; e++) ((int32_t *)x)[e] /= divisor; break;
    case CCL_I64: for (size_t e = 0; e < n; e++) ((int64_t *)x)[e] /= divisor; break;
    case CCL_U8: for (size_t e = 0; e < n; e++) ((uint8_t *)x)[e] = (uint8_t)(((uint8_t *)x)[e] / divisor); break;
    case CCL_I8: for (size_t e = 0; e < n; e++) ((int8_t *)x)[e] = (int8_t)(((int8_t *)x)[e] / divisor); break;
    case CCL_U32: for (size_t e = 0; e < n; e++) ((uint32_t *)x)[e] /= (uint32_t)divisor; break;
    case CCL_U64: for (size_t e = 0; e < n; e++) ((uint64_t *)x)[e] /= (uint64_t)divisor; break;
    default:
        for (size_t e = 0; e < n; e++)
            ccl__from_float(p + e * es, ccl__to_float(p + e * es, t) / (float)divisor, t);
        break;
    }
}
