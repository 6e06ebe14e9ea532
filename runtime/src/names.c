/* names.c: the version, and the names of results, dtypes and ops (ccl.h): what every
 * layer of libccl prints and the tools parse. Part of the base: calls nothing. */
#include <stddef.h>
#include <string.h>

#include "base.h"

#define CCL__STR(x) #x
#define CCL__XSTR(x) CCL__STR(x)

const char *ccl_version(void)
{
    return CCL__XSTR(CCL_VERSION_MAJOR) "." CCL__XSTR(CCL_VERSION_MINOR) "." CCL__XSTR(CCL_VERSION_PATCH);
}

const char *ccl_result_string(ccl_result_t r)
{
    static const char *strings[] = {
#define CCL_RESULT_STRING(name, str) str,
        CCL_RESULTS(CCL_RESULT_STRING)
#undef CCL_RESULT_STRING
    };
    return (unsigned)r < CCL_NUM_RESULTS ? strings[r] : "unknown result";
}

static const struct {
    const char *name;
    size_t size;
} dtypes[CCL_NUM_DTYPES] = {
    [CCL_F32] = {"f32", 4}, [CCL_F64] = {"f64", 8}, [CCL_F16] = {"f16", 2}, [CCL_BF16] = {"bf16", 2},
    [CCL_I32] = {"i32", 4}, [CCL_I64] = {"i64", 8}, [CCL_U8] = {"u8", 1},
    [CCL_FP8_E4M3] = {"fp8_e4m3", 1}, [CCL_FP8_E5M2] = {"fp8_e5m2", 1},
    [CCL_I8] = {"i8", 1}, [CCL_U32] = {"u32", 4}, [CCL_U64] = {"u64", 8},
};

static const char *op_names[CCL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};

size_t ccl_dtype_size(ccl_dtype_t t)
{
    return (unsigned)t < CCL_NUM_DTYPES ? dtypes[t].size : 0;
}

const char *ccl_dtype_name(ccl_dtype_t t)
{
    return (unsigned)t < CCL_NUM_DTYPES ? dtypes[t].name : "?";
}

const char *ccl_op_name(ccl_op_t op)
{
    return (unsigned)op < CCL_NUM_OPS ? op_names[op] : "?";
}

int ccl_dtype_parse(const char *name, ccl_dtype_t *out)
{
    if (!name || !out)
        return -1;
    for (int t = 0; t < CCL_NUM_DTYPES; t++)
        if (!strcmp(name, dtypes[t].name)) {
            *out = (ccl_dtype_t)t;
            return 0;
        }
    /* Common spellings. */
    static const struct { const char *alias; ccl_dtype_t t; } aliases[] = {
        {"float", CCL_F32}, {"float32", CCL_F32}, {"double", CCL_F64}, {"float64", CCL_F64},
        {"half", CCL_F16}, {"float16", CCL_F16}, {"bfloat16", CCL_BF16}, {"int32", CCL_I32},
        {"int64", CCL_I64}, {"uint8", CCL_U8}, {"e4m3", CCL_FP8_E4M3}, {"e5m2", CCL_FP8_E5M2},
        {"int8", CCL_I8}, {"uint32", CCL_U32}, {"uint64", CCL_U64},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcmp(name, aliases[i].alias)) {
            *out = aliases[i].t;
            return 0;
        }
    return -1;
}

int ccl_op_parse(const char *name, ccl_op_t *out)
{
    if (!name || !out)
        return -1;
    for (int op = 0; op < CCL_NUM_OPS; op++)
        if (!strcmp(name, op_names[op])) {
            *out = (ccl_op_t)op;
            return 0;
        }
    return -1;
}
