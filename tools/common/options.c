/* options.c: the command line of ccl-perf, ccl-tune and every cclc command (see harness.h).
 *
 * Every number an option takes goes through ccl__parse_size, the syntax the tuning tables
 * use too: decimal only (never octal: "--count 010" is ten), with K, M, G or T as powers
 * of 1024, in any case and spelled K, KB or KiB. Errors exit 2 with one line naming the
 * option and the value as written; the tools print nothing else for them. The files a
 * command line names are read whole with tool_read_file. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "internal.h"

static const char *g_name = "ccl", *g_help, *g_usage;

void tool_init(const char *name, const char *help_cmd, const char *usage_text)
{
    g_name = name;
    g_help = help_cmd;
    g_usage = usage_text;
}

const char *tool_name(void) { return g_name; }

int tool_quiet_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s)
            return atoi(s) != 0;
    }
    return 0;
}

void tool_usage_error(const char *fmt, ...)
{
    if (!tool_quiet_rank()) {
        /* One write for the line: under mpirun, the launcher's own lines on the same
         * stream then fall before or after it, never inside. */
        char line[2048];
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(line, sizeof line, "%s: error: ", g_name);
        vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
        va_end(ap);
        strcat(line, "\n");
        fputs(line, stderr);
        if (g_usage)
            fputs(g_usage, stderr);
    }
    exit(2);
}

void *tool_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "%s: out of memory\n", g_name);
        exit(1);
    }
    return p;
}

int tool_flag(ToolArgs *a, const char *name)
{
    if (strcmp(a->flag, name) != 0)
        return 0;
    tool_no_value(a);
    return 1;
}

ToolArgs tool_args(int argc, char **argv, int first, const ToolShared *shared)
{
    return (ToolArgs){.argc = argc, .argv = argv, .i = first - 1, .shared = shared};
}

static int next_word(ToolArgs *a)
{
    if (++a->i >= a->argc)
        return 0;
    const char *w = a->argv[a->i];
    const char *eq = strchr(w, '=');
    a->arg = a->flag = w;
    a->inline_val = NULL;
    if (w[0] == '-' && w[1] == '-' && eq && (size_t)(eq - w) < sizeof a->name) {
        memcpy(a->name, w, (size_t)(eq - w));
        a->name[eq - w] = 0;
        a->flag = a->name;
        a->inline_val = eq + 1;
    } else if (w[0] == '-' && w[1] && w[1] != '-' && w[2]) {
        a->name[0] = '-', a->name[1] = w[1], a->name[2] = 0;
        a->flag = a->name;
        a->inline_val = w + 2;
    }
    return 1;
}

int tool_next(ToolArgs *a)
{
    while (next_word(a))
        if (!a->shared || !tool_shared_option(a, a->shared))
            return 1;
    return 0;
}

int tool_is(const ToolArgs *a, const char *s, const char *l)
{
    return !strcmp(a->flag, s) || (l && !strcmp(a->flag, l));
}

const char *tool_value(ToolArgs *a)
{
    if (a->inline_val)
        return a->inline_val;
    if (a->i + 1 >= a->argc)
        tool_usage_error("%s needs a value", a->flag);
    return a->argv[++a->i];
}

void tool_no_value(const ToolArgs *a)
{
    if (a->inline_val)
        tool_unknown(a);
}

void tool_unknown(const ToolArgs *a)
{
    if (g_help)
        tool_usage_error("unknown option '%s' (see %s)", a->arg, g_help);
    tool_usage_error("unknown option '%s'", a->arg);
}

int tool_operand(const ToolArgs *a, const char **file)
{
    if (a->flag[0] == '-' && a->flag[1])
        return 0;
    if (*file)
        tool_usage_error("unexpected argument '%s' (one FILE per run)", a->arg);
    *file = a->arg;
    return 1;
}

uint64_t tool_size(const char *flag, const char *val)
{
    uint64_t v;
    if (ccl__parse_size(val, &v))
        tool_usage_error("%s %s: not a size (a number of bytes, optionally with K, M or G)", flag, val);
    return v;
}

uint64_t tool_count(const char *flag, const char *val, uint64_t hi)
{
    uint64_t v;
    if (ccl__parse_size(val, &v))
        tool_usage_error("%s %s: not a count (a number of elements, optionally with K, M or G)", flag, val);
    if (v > hi)
        tool_usage_error("%s %s: more than %llu elements", flag, val, (unsigned long long)hi);
    return v;
}

int tool_int(const char *flag, const char *val, int lo, int hi)
{
    uint64_t v;
    if (ccl__parse_size(val, &v) || v < (uint64_t)(lo < 0 ? 0 : lo) || v > (uint64_t)hi)
        tool_usage_error("%s %s: expected an integer in %d..%d", flag, val, lo, hi);
    return (int)v;
}

int tool_int_list(const char *flag, const char *val, int *out, int max, int lo, int hi)
{
    int n = 0;
    const char *p = val;
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        uint64_t v;
        if (len == 0 || len >= sizeof item || n == max)
            break;
        memcpy(item, p, len);
        item[len] = 0;
        if (ccl__parse_size(item, &v) || v < (uint64_t)(lo < 0 ? 0 : lo) || v > (uint64_t)hi)
            break;
        out[n++] = (int)v;
        if (!p[len])
            return n;
        p += len + 1;
    }
    tool_usage_error("%s %s: not a list of at most %d integers in %d..%d", flag, val, max, lo, hi);
}

ccl_dtype_t tool_dtype(const char *flag, const char *val)
{
    ccl_dtype_t d;
    if (ccl_dtype_parse(val, &d) != 0)
        tool_usage_error("%s %s: unknown dtype (expected f32, f64, f16, bf16, i32, i64, u8, fp8_e4m3, fp8_e5m2, i8, u32 or u64)",
                         flag, val);
    return d;
}

ccl_op_t tool_op(const char *flag, const char *val)
{
    ccl_op_t op;
    if (ccl_op_parse(val, &op) != 0)
        tool_usage_error("%s %s: unknown reduction op (expected sum, prod, min, max or avg)", flag, val);
    return op;
}

ccl_backend_t tool_backend(const char *flag, const char *val)
{
    static const char *const names[] = {"cpu", "gpu", "auto"};
    static const ccl_backend_t backends[] = {CCL_BACKEND_CPU, CCL_BACKEND_GPU, CCL_BACKEND_AUTO};
    return backends[tool_choice(flag, val, names, 3)];
}

int tool_choice(const char *flag, const char *val, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(val, names[i]))
            return i;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                                 names[i]);
    tool_usage_error("%s %s: expected %s", flag, val, list);
}

char *tool_read_file(const char *path, size_t max, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        errno = EISDIR;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f) || feof(f))
            break;
        if (n > max) {
            free(buf);
            fclose(f);
            errno = EFBIG;
            return NULL;
        }
        char *nb = realloc(buf, cap *= 2);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int err = !buf ? ENOMEM : ferror(f) ? EIO : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

int tool_shared_option(ToolArgs *a, const ToolShared *s)
{
    if (s->ranks && tool_is(a, "--ranks", NULL)) {
        *s->ranks = tool_int(a->flag, tool_value(a), 1, s->max_ranks);
    } else if (s->backend && tool_is(a, "--backend", NULL)) {
        *s->backend = tool_backend(a->flag, tool_value(a));
    } else if (s->dtype && tool_is(a, "-d", "--dtype")) {
        *s->dtype = tool_dtype(a->flag, tool_value(a));
    } else if (s->op && (tool_is(a, "--op", NULL) || (s->op_short && tool_is(a, s->op_short, NULL)))) {
        *s->op = tool_op(a->flag, tool_value(a));
        if (s->op_given)
            *s->op_given = 1;
    } else if (s->iters && tool_is(a, "-n", "--iters")) {
        *s->iters = tool_int(a->flag, tool_value(a), 1, s->max_iters);
    } else if (s->warmup && tool_is(a, "-w", "--warmup")) {
        *s->warmup = tool_int(a->flag, tool_value(a), 0, s->max_iters);
    } else if (s->timeout_ms && tool_is(a, "--timeout-ms", NULL)) {
        *s->timeout_ms = tool_int(a->flag, tool_value(a), 1, 1 << 30);
    } else {
        return 0;
    }
    return 1;
}
