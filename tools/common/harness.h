/* harness.h: what ccl-perf, ccl-tune and `cclc run` share to drive libccl from the
 * command line. One section per file of tools/common/:
 *
 *   options.c  the command line: one reader of options ("-b 1K", "-b1K", "--minbytes=1K"),
 *              one parser of sizes and counts (ccl__parse_size's syntax), and the values
 *              every tool takes (--ranks, --dtype, --op, --iters, --timeout-ms, --backend),
 *              each with one message.
 *
 * The tools link this folder's archive (libtools.a) before libccl; nothing in runtime/ or compiler/ calls
 * back into them. Names carry the prefix tool_. */
#ifndef CCL_TOOLS_HARNESS_H
#define CCL_TOOLS_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "ccl.h"

/* ===== options.c ===== */

/* Names the tool for its messages ("ccl-perf", "cclc run"), where its options are listed
 * ("ccl-perf --help"), and, where not NULL, a usage text printed after every usage error.
 * Call first. */
void tool_init(const char *name, const char *help_cmd, const char *usage_text);
const char *tool_name(void);

/* Under a launcher (mpirun, srun) only the process of rank 0 prints usage errors; the
 * others exit as quietly. 1 in those others. */
int tool_quiet_rank(void);

/* "NAME: error: MESSAGE" on stderr (and the usage text), then exit 2. */
_Noreturn void tool_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads argv[1..] word by word. After tool_next returns 1: arg is the word as written;
 * flag the option's name, split from a value written into it ("--minbytes=1K" and "-b1K"
 * give "--minbytes" and "-b"); a word not starting with '-' (a FILE) has flag == arg. */
typedef struct {
    int argc;
    char **argv;
    int i;
    const char *arg, *flag, *inline_val;
    char name[64];
} ToolArgs;

ToolArgs tool_args(int argc, char **argv, int first);
int tool_next(ToolArgs *a);
/* 1 when the option is spelled s or l (l may be NULL). */
int tool_is(const ToolArgs *a, const char *s, const char *l);
/* The option's value: the part written into it, else the next word ("FLAG needs a value"). */
const char *tool_value(ToolArgs *a);
/* A flag that takes no value: an error when one is written into it ("--check=1"). */
void tool_no_value(const ToolArgs *a);
_Noreturn void tool_unknown(const ToolArgs *a);

/* Values, each checked with one message naming the option and the value as written. */
uint64_t tool_size(const char *flag, const char *val);          /* bytes, "64KB" */
uint64_t tool_count(const char *flag, const char *val, uint64_t hi); /* elements, "1M" */
int tool_int(const char *flag, const char *val, int lo, int hi);
ccl_dtype_t tool_dtype(const char *flag, const char *val);
ccl_op_t tool_op(const char *flag, const char *val);
ccl_backend_t tool_backend(const char *flag, const char *val);

#endif
