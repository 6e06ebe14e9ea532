/* data.c: exactly verifiable data (see harness.h). ccl-perf and cclc run choose inputs
 * whose every partial reduction is an integer the dtype holds exactly, so the expected
 * output is one bit pattern whatever the reduction order; both take the bound and the
 * encoding from here. */
#include <string.h>

#include "harness.h"
#include "internal.h"

int64_t tool_exact_max(ccl_dtype_t t)
{
    switch (t) {
    case CCL_FP8_E5M2: return 8;
    case CCL_FP8_E4M3: return 16;
    case CCL_BF16: return 256;
    case CCL_F16: return 2048;
    case CCL_U8: return 255;
    case CCL_I8: return 127;
    default: return 1 << 20;
    }
}

int tool_dtype_unsigned(ccl_dtype_t t)
{
    return t == CCL_U8 || t == CCL_U32 || t == CCL_U64;
}

int tool_dtype_integer(ccl_dtype_t t)
{
    return tool_dtype_unsigned(t) || t == CCL_I8 || t == CCL_I32 || t == CCL_I64;
}

void tool_store_int(void *buf, size_t idx, int64_t v, ccl_dtype_t t)
{
    char *p = (char *)buf + idx * ccl_dtype_size(t);
    switch (t) {
    case CCL_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case CCL_F64: { double d = (double)v; memcpy(p, &d, 8); break; }
    case CCL_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case CCL_I64: memcpy(p, &v, 8); break;
    case CCL_U8: *(uint8_t *)p = (uint8_t)v; break;
    case CCL_I8: *(int8_t *)p = (int8_t)v; break;
    case CCL_U32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    case CCL_U64: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    /* f16, bf16 and fp8: v is exact, so rounding it keeps it. */
    default: ccl__from_float(p, (float)v, t); break;
    }
}
