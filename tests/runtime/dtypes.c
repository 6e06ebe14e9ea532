/* dtypes.c: the host conversions of the half and fp8 types round to nearest even.
 *
 * For every pair of neighbouring finite values a < b of each small type: both convert
 * back to themselves, the midpoint goes to the one with the even mantissa, and values
 * just off the midpoint go to the nearer one. Plus names, sizes and parsing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static int failures;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            failures++;                                         \
            if (failures < 20) {                                \
                printf("FAIL dtypes: %s:%d: ", __FILE__, __LINE__); \
                printf(__VA_ARGS__);                            \
                printf("\n");                                   \
            }                                                   \
        }                                                       \
    } while (0)

static uint32_t bits_of(float f, ccl_dtype_t t)
{
    uint32_t b = 0;
    ccl__from_float(&b, f, t);
    return ccl_dtype_size(t) == 1 ? (b & 0xff) : (b & 0xffff);
}

static void check_type(ccl_dtype_t t, uint32_t nbits)
{
    uint32_t n = 1u << nbits, sign = n >> 1;
    /* Positive finite values in increasing order are the bit patterns 0..; negative the same with the sign. */
    for (uint32_t h = 0; h + 1 < sign; h++) {
        float a = ccl__to_float(&h, t);
        uint32_t h2 = h + 1;
        float b = ccl__to_float(&h2, t);
        if (isnan(a) || isnan(b) || isinf(b))
            break;
        CHECK(bits_of(a, t) == h, "%s: %g -> %#x, expected %#x", ccl_dtype_name(t), a, bits_of(a, t), h);
        uint32_t neg = h | sign;
        CHECK(a == 0 || bits_of(-a, t) == neg, "%s: %g -> %#x, expected %#x", ccl_dtype_name(t), -a, bits_of(-a, t), neg);
        double mid = ((double)a + b) / 2;
        if ((float)mid != mid)
            continue; /* not exact in float: cannot test the tie through a float */
        uint32_t even = (h & 1) ? h2 : h;
        CHECK(bits_of((float)mid, t) == even, "%s: tie %g between %#x and %#x -> %#x", ccl_dtype_name(t), mid, h, h2,
              bits_of((float)mid, t));
        float below = nextafterf((float)mid, a), above = nextafterf((float)mid, b);
        CHECK(bits_of(below, t) == h, "%s: %g just below a tie -> %#x, expected %#x", ccl_dtype_name(t), below,
              bits_of(below, t), h);
        CHECK(bits_of(above, t) == h2, "%s: %g just above a tie -> %#x, expected %#x", ccl_dtype_name(t), above,
              bits_of(above, t), h2);
    }
    uint32_t nanb = bits_of(NAN, t);
    CHECK(isnan(ccl__to_float(&nanb, t)), "%s: NaN does not stay NaN (%#x)", ccl_dtype_name(t), nanb);
}

int main(void)
{
    check_type(CCL_F16, 16);
    check_type(CCL_BF16, 16);
    check_type(CCL_FP8_E4M3, 8);
    check_type(CCL_FP8_E5M2, 8);
    /* Known values. */
    CHECK(bits_of(448.0f, CCL_FP8_E4M3) == 0x7e, "e4m3 max");
    CHECK(bits_of(57344.0f, CCL_FP8_E5M2) == 0x7b, "e5m2 max");
    CHECK(bits_of(65504.0f, CCL_F16) == 0x7bff, "f16 max");
    CHECK(bits_of(1e6f, CCL_F16) == 0x7c00, "f16 overflow to inf");
    CHECK(bits_of(1.0f, CCL_BF16) == 0x3f80, "bf16 one");
    /* Names and parsing round-trip. */
    for (int t = 0; t < CCL_NUM_DTYPES; t++) {
        ccl_dtype_t back;
        CHECK(ccl_dtype_parse(ccl_dtype_name((ccl_dtype_t)t), &back) == 0 && back == (ccl_dtype_t)t, "dtype %d name", t);
        CHECK(ccl_dtype_size((ccl_dtype_t)t) > 0, "dtype %d size", t);
    }
    for (int op = 0; op < CCL_NUM_OPS; op++) {
        ccl_op_t back;
        CHECK(ccl_op_parse(ccl_op_name((ccl_op_t)op), &back) == 0 && back == (ccl_op_t)op, "op %d name", op);
    }
    ccl_dtype_t t;
    CHECK(ccl_dtype_parse("f17", &t) == -1, "unknown dtype parses");
    CHECK(ccl_dtype_size((ccl_dtype_t)99) == 0 && !strcmp(ccl_dtype_name((ccl_dtype_t)99), "?"), "bad dtype");
    CHECK(!strcmp(ccl_result_string(CCL_ERR_TIMEOUT), "a wait timed out (a peer is dead, slow or the plan is wrong)"), "result string");
    /* Reductions in each type: 3 operands, every op, against doubles. */
    for (int ti = 0; ti < CCL_NUM_DTYPES; ti++) {
        ccl_dtype_t dt = (ccl_dtype_t)ti;
        for (int op = 0; op < CCL_NUM_OPS; op++) {
            unsigned char a[64], b[64], c[64], d[64];
            int vals[3][4] = {{1, -2, 3, 2}, {2, 2, -1, 1}, {-1, 1, 2, 2}};
            if (dt == CCL_U8 || dt == CCL_U32 || dt == CCL_U64)
                for (int i = 0; i < 3; i++)
                    for (int e = 0; e < 4; e++)
                        vals[i][e] = vals[i][e] < 0 ? -vals[i][e] : vals[i][e];
            size_t es = ccl_dtype_size(dt);
            for (int e = 0; e < 4; e++) {
                ccl__from_float(a + e * es, (float)vals[0][e], dt);
                ccl__from_float(b + e * es, (float)vals[1][e], dt);
                ccl__from_float(c + e * es, (float)vals[2][e], dt);
            }
            const void *srcs[3] = {a, b, c};
            ccl__reduce(d, srcs, 3, 4, dt, (ccl_op_t)op);
            for (int e = 0; e < 4; e++) {
                double x = vals[0][e], y = vals[1][e], z = vals[2][e], want;
                switch (op) {
                case CCL_PROD: want = x * y * z; break;
                case CCL_MIN: want = fmin(x, fmin(y, z)); break;
                case CCL_MAX: want = fmax(x, fmax(y, z)); break;
                default: want = x + y + z; break;
                }
                double got = ccl__load_double(d + e * es, dt);
                CHECK(got == want, "reduce %s %s element %d: got %g, expected %g", ccl_dtype_name(dt),
                      ccl_op_name((ccl_op_t)op), e, got, want);
            }
        }
    }
    /* The integers NCCL has beyond ours (ncclInt8, ncclUint32, ncclUint64): sizes, names,
     * and wrap-around in their own width, min and max as the type. */
    static const struct { ccl_dtype_t t; const char *name, *alias; size_t size; } more[] = {
        {CCL_I8, "i8", "int8", 1}, {CCL_U32, "u32", "uint32", 4}, {CCL_U64, "u64", "uint64", 8}};
    for (size_t i = 0; i < 3; i++) {
        ccl_dtype_t back = CCL_F32, alias = CCL_F32;
        CHECK(ccl_dtype_size(more[i].t) == more[i].size && !strcmp(ccl_dtype_name(more[i].t), more[i].name) &&
              ccl_dtype_parse(more[i].name, &back) == 0 && back == more[i].t &&
              ccl_dtype_parse(more[i].alias, &alias) == 0 && alias == more[i].t, "%s: size, name, parse", more[i].name);
    }
    {
        int8_t a[3] = {100, -100, -128}, b[3] = {100, -100, 1}, d[3];
        const void *s2[2] = {a, b};
        ccl__reduce(d, s2, 2, 3, CCL_I8, CCL_SUM);
        CHECK(d[0] == -56 && d[1] == 56 && d[2] == -127, "i8 sum wraps: %d %d %d", d[0], d[1], d[2]);
        ccl__reduce(d, s2, 2, 3, CCL_I8, CCL_MIN);
        CHECK(d[0] == 100 && d[1] == -100 && d[2] == -128, "i8 min is signed: %d %d %d", d[0], d[1], d[2]);
        ccl__reduce(d, s2, 2, 3, CCL_I8, CCL_PROD);
        CHECK(d[0] == 16 && d[1] == 16 && d[2] == -128, "i8 prod wraps: %d %d %d", d[0], d[1], d[2]);
        int8_t avg[2] = {-7, 9};
        ccl__divide(avg, 2, CCL_I8, 2);
        CHECK(avg[0] == -3 && avg[1] == 4, "i8 avg truncates: %d %d", avg[0], avg[1]);
    }
    {
        uint32_t a[2] = {4000000000u, 7}, b[2] = {500000000u, 3000000000u}, d[2];
        const void *s2[2] = {a, b};
        ccl__reduce(d, s2, 2, 2, CCL_U32, CCL_SUM);
        CHECK(d[0] == 205032704u && d[1] == 3000000007u, "u32 sum wraps: %u %u", d[0], d[1]);
        ccl__reduce(d, s2, 2, 2, CCL_U32, CCL_MAX);
        CHECK(d[0] == 4000000000u && d[1] == 3000000000u, "u32 max is unsigned: %u %u", d[0], d[1]);
    }
    {
        uint64_t a[2] = {UINT64_MAX, 1ull << 63}, b[2] = {2, 1ull << 63}, d[2];
        const void *s2[2] = {a, b};
        ccl__reduce(d, s2, 2, 2, CCL_U64, CCL_SUM);
        CHECK(d[0] == 1 && d[1] == 0, "u64 sum wraps: %llu %llu", (unsigned long long)d[0], (unsigned long long)d[1]);
        ccl__reduce(d, s2, 2, 2, CCL_U64, CCL_MIN);
        CHECK(d[0] == 2 && d[1] == 1ull << 63, "u64 min is unsigned: %llu", (unsigned long long)d[0]);
    }
    if (!failures)
        printf("ok dtypes: round to nearest even for f16, bf16, fp8 e4m3/e5m2; names; reductions; i8, u32, u64\n");
    return failures != 0;
}
