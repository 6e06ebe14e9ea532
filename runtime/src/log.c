/* log.c: what libccl says when asked to (CCL_DEBUG), and nothing otherwise.
 *
 * The library never prints on its own: with CCL_DEBUG unset (or "0", "NONE") every
 * log call is one branch on a cached level. Asked, it writes one line per event:
 *
 *   node1:4711 ccl WARN     12.345 ms rank 3: ccl_all_reduce: argument 'count' ...
 *   node1:4711 ccl INFO     12.400 ms rank 3 [init]: communicator ready: ...
 *
 * host and pid first (lines of many processes merged into one stream stay apart),
 * then the level, milliseconds since the first line, the rank (? before a comm
 * exists), the subsystem for INFO and TRACE lines, and the text; a message of several
 * lines (compiler diagnostics) repeats the prefix on each. Levels, each including the
 * ones before: WARN (every failure that sets an error: ccl__set_error and
 * ccl__set_async_error), INFO (communicators, loads, tuning choices, allocations),
 * TRACE (every call, launch and synchronize; "1" is TRACE too, as it was). Subsystems
 * (CCL_DEBUG_SUBSYS, a comma list, ALL by default, "^" in front to exclude) filter INFO
 * and TRACE lines; WARN lines always pass. CCL_DEBUG_FILE sends the lines to a file
 * instead of stderr, %h in its name becoming the host name and %p the pid. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base.h"

int ccl__log_level;
unsigned ccl__log_subsys = CCL__SUB_ALL;

static const struct {
    const char *name;
    unsigned bit;
} subsystems[] = {
    {"INIT", CCL__SUB_INIT}, {"CALL", CCL__SUB_CALL}, {"P2P", CCL__SUB_P2P}, {"ALLOC", CCL__SUB_ALLOC},
    {"COMPILE", CCL__SUB_COMPILE}, {"TUNE", CCL__SUB_TUNE}, {"ALL", CCL__SUB_ALL},
};

static double t0;
static FILE *sink;
static char host[64] = "?";
static long pid;
/* What reading the environment found wrong, said once the sink is open. */
static char setup_warning[512];

static unsigned parse_subsys(const char *v)
{
    int exclude = *v == '^';
    unsigned bits = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v + exclude);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof subsystems / sizeof subsystems[0] && strcasecmp(tok, subsystems[i].name) != 0)
            i++;
        if (i < sizeof subsystems / sizeof subsystems[0])
            bits |= subsystems[i].bit;
        else if (!setup_warning[0])
            snprintf(setup_warning, sizeof setup_warning, "CCL_DEBUG_SUBSYS: '%s' is not a subsystem (INIT, CALL, "
                     "P2P, ALLOC, COMPILE, TUNE or ALL): ignored", tok);
    }
    return exclude ? CCL__SUB_ALL & ~bits : bits;
}

/* The file CCL_DEBUG_FILE names, %h and %p expanded; NULL (stderr) when it cannot be
 * opened, saying why. */
static FILE *open_sink(const char *pattern)
{
    char path[4096];
    size_t n = 0;
    for (const char *p = pattern; *p && n + 1 < sizeof path; p++) {
        if (*p == '%' && (p[1] == 'h' || p[1] == 'p' || p[1] == '%')) {
            char part[80];
            snprintf(part, sizeof part, "%s", p[1] == 'h' ? host : p[1] == '%' ? "%" : "");
            if (p[1] == 'p')
                snprintf(part, sizeof part, "%ld", pid);
            n += (size_t)snprintf(path + n, sizeof path - n, "%s", part);
            if (n >= sizeof path)
                n = sizeof path - 1;
            p++;
        } else {
            path[n++] = *p;
        }
    }
    path[n] = 0;
    FILE *f = fopen(path, "w");
    if (!f)
        CCL__FMT(setup_warning, sizeof setup_warning, "CCL_DEBUG_FILE: cannot open '%s': %m; writing to stderr",
                 path);
    return f;
}

int ccl__nvtx;
static int (*nvtx_push)(const char *);
static int (*nvtx_pop)(void);

/* CCL_NVTX=1: libnvToolsExt by dlopen (CCL_NVTX_LIBRARY first); without it, a WARN line
 * (when CCL_DEBUG asks) and no ranges. */
static void nvtx_load(void)
{
    const char *v = getenv("CCL_NVTX");
    if (!v || strcmp(v, "1") != 0)
        return;
    /* A library the user names is the only one tried. */
    const char *named = getenv("CCL_NVTX_LIBRARY");
    const char *names[] = {named && *named ? named : "libnvToolsExt.so.1", named && *named ? NULL : "libnvToolsExt.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        if (names[i])
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
        *(void **)&nvtx_push = dlsym(h, "nvtxRangePushA");
        *(void **)&nvtx_pop = dlsym(h, "nvtxRangePop");
    }
    ccl__nvtx = nvtx_push && nvtx_pop;
    if (!ccl__nvtx)
        ccl__log(CCL__LOG_WARN, CCL__SUB_INIT, -1, "CCL_NVTX=1, but %s: no NVTX ranges (set CCL_NVTX_LIBRARY to "
                 "libnvToolsExt's path)", h ? "libnvToolsExt has no nvtxRangePushA/nvtxRangePop"
                 : "libnvToolsExt cannot be loaded");
}

void ccl__nvtx_push(const char *name)
{
    nvtx_push(name);
}

void ccl__nvtx_pop(void)
{
    nvtx_pop();
}

static void read_env(void)
{
    t0 = ccl__now_ms();
    pid = (long)getpid();
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    const char *v = getenv("CCL_DEBUG");
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "NONE")) {
        nvtx_load();
        return;
    }
    if (!strcasecmp(v, "WARN"))
        ccl__log_level = CCL__LOG_WARN;
    else if (!strcasecmp(v, "INFO"))
        ccl__log_level = CCL__LOG_INFO;
    else if (!strcasecmp(v, "TRACE") || !strcmp(v, "1"))
        ccl__log_level = CCL__LOG_TRACE;
    else {
        ccl__log_level = CCL__LOG_WARN;
        snprintf(setup_warning, sizeof setup_warning, "CCL_DEBUG='%s' is not WARN, INFO or TRACE: using WARN", v);
    }
    const char *s = getenv("CCL_DEBUG_SUBSYS");
    if (s && *s)
        ccl__log_subsys = parse_subsys(s);
    const char *f = getenv("CCL_DEBUG_FILE");
    if (f && *f)
        sink = open_sink(f);
    if (setup_warning[0])
        ccl__log(CCL__LOG_WARN, CCL__SUB_INIT, -1, "%s", setup_warning);
    nvtx_load();
}

void ccl__log_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_env);
}

static const char *subsys_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof subsystems / sizeof subsystems[0]; i++)
        if (subsystems[i].bit == bit)
            return subsystems[i].name;
    return "?";
}

void ccl__log(int level, unsigned subsys, int rank, const char *fmt, ...)
{
    char text[CCL__ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    char prefix[160], who[24], sub[24] = "";
    if (rank >= 0)
        snprintf(who, sizeof who, "%d", rank);
    else
        snprintf(who, sizeof who, "?");
    if (level > CCL__LOG_WARN) {
        snprintf(sub, sizeof sub, " [%s]", subsys_name(subsys));
        for (char *c = sub; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    }
    snprintf(prefix, sizeof prefix, "%s:%ld ccl %-5s %10.3f ms rank %s%s: ", host, pid,
             level == CCL__LOG_WARN ? "WARN" : level == CCL__LOG_INFO ? "INFO" : "TRACE", ccl__now_ms() - t0, who, sub);
    /* One write per event, the prefix on every line, so that ranks' threads and
     * processes interleave whole lines. */
    size_t lines = 1;
    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    size_t cap = strlen(text) + lines * (strlen(prefix) + 1) + 2;
    char *out = malloc(cap);
    FILE *f = sink ? sink : stderr;
    if (!out) {
        fprintf(f, "%s%s\n", prefix, text);
        fflush(f);
        return;
    }
    size_t n = 0;
    const char *line = text;
    for (;;) {
        size_t len = strcspn(line, "\n");
        n += (size_t)snprintf(out + n, cap - n, "%s%.*s\n", prefix, (int)len, line);
        if (!line[len] || !line[len + 1])
            break;
        line += len + 1;
    }
    fwrite(out, 1, n, f);
    fflush(f);
    free(out);
}
