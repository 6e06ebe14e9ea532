/* data.c: ccl-perf's exactly verifiable data: per dtype and op, inputs whose reduction is
 * one exact bit pattern in any order (see perf.c, "Exactness"), as pattern tables. */
#include "perf.h"

/* ===== exactly verifiable data ===== */

/* The largest M such that every integer in 0..M is exact in the dtype (capped at 2^20:
 * the patterns never need more). */
static uint64_t exact_max(ccl_dtype_t t)
{
    switch (t) {
    case CCL_F16: return 2048;
    case CCL_BF16: return 256;
    case CCL_FP8_E4M3: return 16;
    case CCL_FP8_E5M2: return 8;
    case CCL_U8: return 200;       /* below 255, so the 0xff poison is never expected */
    default: return 1 << 20;
    }
}

/* Encodes the non-negative integer v (exact in t by construction) as one element. */
static void encode(void *dst, uint64_t v, ccl_dtype_t t)
{
    int mbits = 0, bias = 0, bytes = 0;
    switch (t) {
    case CCL_F32: { float f = (float)v; memcpy(dst, &f, 4); return; }
    case CCL_F64: { double d = (double)v; memcpy(dst, &d, 8); return; }
    case CCL_I32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); return; }
    case CCL_I64: { int64_t x = (int64_t)v; memcpy(dst, &x, 8); return; }
    case CCL_U8: *(uint8_t *)dst = (uint8_t)v; return;
    case CCL_F16: mbits = 10, bias = 15, bytes = 2; break;
    case CCL_BF16: mbits = 7, bias = 127, bytes = 2; break;
    case CCL_FP8_E4M3: mbits = 3, bias = 7, bytes = 1; break;
    case CCL_FP8_E5M2: mbits = 2, bias = 15, bytes = 1; break;
    default: return;
    }
    uint32_t bits = 0;
    if (v) {
        int e = 63 - __builtin_clzll(v);
        uint64_t frac = v - (1ull << e);
        bits = (uint32_t)(e + bias) << mbits | (uint32_t)(e >= mbits ? frac >> (e - mbits) : frac << (mbits - e));
    }
    if (bytes == 2) {
        uint16_t h = (uint16_t)bits;
        memcpy(dst, &h, 2);
    } else {
        *(uint8_t *)dst = (uint8_t)bits;
    }
}

/* The value of element j (j < PERF_PERIOD) of rank r's input. Sums and averages: every
 * rank holds k(j) plus or minus s (pairs of ranks cancel), so the sum is N*k(j), a
 * multiple of N (avg is exact too) and every partial sum is at most N*cap <= M. Products:
 * ones and twos (powers of two are exact; at most 2^8 in all). Min, max and data movement:
 * any value up to min(M, 255) that depends on rank and position. */
static uint64_t gen_value(int r, int j, int n, ccl_op_t op, int reduces, ccl_dtype_t t)
{
    uint64_t M = exact_max(t), small = M < 255 ? M : 255;
    if (!reduces || op == CCL_MIN || op == CCL_MAX)
        return ((uint64_t)r * 37 + (uint64_t)j * 11 + 1) % (small + 1);
    if (op == CCL_PROD)
        return (r < 8 && (r + j) % 3 == 0) ? 2 : 1;
    uint64_t cap = M / (uint64_t)n;
    if (cap == 0)
        return r == 0;             /* too many ranks for the dtype: only rank 0 counts */
    if (cap == 1)
        return 1;
    uint64_t k = 1 + (uint64_t)j * 7 % (cap - 1);
    int pair = r / 2;
    if (n % 2 && r == n - 1)
        return k;
    uint64_t s = (uint64_t)((j + pair) % 3 != 0);
    return r % 2 == 0 ? k + s : k - s;
}

/* The reduction of column j over all ranks, in integers (u8 wraps as the dtype does). */
static uint64_t reduced_value(int j, int n, ccl_op_t op, ccl_dtype_t t)
{
    uint64_t acc = gen_value(0, j, n, op, 1, t);
    for (int r = 1; r < n; r++) {
        uint64_t v = gen_value(r, j, n, op, 1, t);
        switch (op) {
        case CCL_PROD: acc *= v; break;
        case CCL_MIN: acc = v < acc ? v : acc; break;
        case CCL_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == CCL_AVG)
        acc /= (uint64_t)n;
    if (t == CCL_U8)
        acc &= 0xff;
    return acc;
}

void pattern_init(Pattern *p, int n, Collective c, ccl_op_t op, ccl_dtype_t t)
{
    p->esize = ccl_dtype_size(t);
    p->tab_in = calloc((size_t)n, sizeof *p->tab_in);
    p->tab_red = malloc(PERF_PERIOD * p->esize);
    if (!p->tab_in || !p->tab_red) {
        fprintf(stderr, "ccl-perf: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < n; r++) {
        p->tab_in[r] = malloc(PERF_PERIOD * p->esize);
        if (!p->tab_in[r]) {
            fprintf(stderr, "ccl-perf: out of memory\n");
            exit(1);
        }
        for (int j = 0; j < PERF_PERIOD; j++)
            encode(p->tab_in[r] + (size_t)j * p->esize, gen_value(r, j, n, op, colls[c].reduces, t), t);
    }
    for (int j = 0; j < PERF_PERIOD; j++)
        encode(p->tab_red + (size_t)j * p->esize, colls[c].reduces ? reduced_value(j, n, op, t) : 0, t);
}

void pattern_fini(Pattern *p, int n)
{
    for (int r = 0; r < n; r++)
        free(p->tab_in[r]);
    free(p->tab_in);
    free(p->tab_red);
}

void pattern_fill(unsigned char *dst, size_t pos0, size_t n, const unsigned char *tab, size_t es)
{
    size_t j = pos0 % PERF_PERIOD;
    while (n) {
        size_t m = PERF_PERIOD - j < n ? PERF_PERIOD - j : n;
        memcpy(dst, tab + j * es, m * es);
        dst += m * es, n -= m, j = 0;
    }
}

/* Elements of buf[0..n) that differ from the pattern (bitwise). */
long long pattern_wrong(const unsigned char *buf, size_t pos0, size_t n, const unsigned char *tab, size_t es)
{
    long long wrong = 0;
    size_t j = pos0 % PERF_PERIOD;
    while (n) {
        size_t m = PERF_PERIOD - j < n ? PERF_PERIOD - j : n;
        if (memcmp(buf, tab + j * es, m * es) != 0)
            for (size_t e = 0; e < m; e++)
                wrong += memcmp(buf + e * es, tab + (j + e) * es, es) != 0;
        buf += m * es, n -= m, j = 0;
    }
    return wrong;
}
