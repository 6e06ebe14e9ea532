/* debug_log.c: CCL_DEBUG levels, CCL_DEBUG_SUBSYS, CCL_DEBUG_FILE (docs/api.md,
 * "Debug output").
 *
 * The test runs itself again as a child under each setting and reads what the child
 * wrote. The child makes a failing call before any communicator exists, a failing call
 * on one (a bad dtype), a successful all-reduce, and a call that times out (a failure
 * found asynchronously). Checks: silent by default; WARN gives a line for each failure,
 * with host and pid first, and nothing else (before the fix any value, WARN too, turned
 * on full tracing and failures were never logged); INFO and TRACE add their lines; the
 * subsystem filter keeps and drops what it names; the file sink gets the lines, %h and
 * %p expanded, and stderr none. And backend auto that finds no GPU says once per process
 * that it runs on the CPU (WARN; before, it said nothing), while asking for the CPU says
 * nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "ring_source.h"

static int failures;

static void check(const char *what, int ok, const char *detail)
{
    if (ok)
        printf("ok debug_log: %s\n", what);
    else {
        printf("FAIL debug_log: %s: %.1500s\n", what, detail);
        failures++;
    }
}

static int child(void)
{
    ccl_comm_t *comms[2];
    ccl_comm_init_all(comms, 0, NULL, NULL); /* fails: no comm yet */
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20, .timeout_ms = 300};
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK)
        return 1;
    float in[8] = {0}, out[8];
    ccl_all_reduce(in, out, 8, (ccl_dtype_t)99, CCL_SUM, comms[0], NULL); /* fails: dtype */
    ccl_algorithm_t *alg[2];
    for (int r = 0; r < 2; r++)
        if (ccl_algorithm_load(comms[r], RING, 0, &alg[r]) != CCL_OK)
            return 1;
    for (int r = 0; r < 2; r++)
        ccl_algorithm_run(alg[r], in, out, 8, CCL_F32, CCL_SUM, NULL);
    for (int r = 0; r < 2; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            return 1;
    ccl_algorithm_run(alg[0], in, out, 8, CCL_F32, CCL_SUM, NULL); /* rank 1 never joins: times out */
    ccl_comm_synchronize(comms[0]);
    for (int r = 0; r < 2; r++)
        ccl_comm_destroy(comms[r]);
    return 0;
}

/* Two communicators of backend auto, one of the CPU asked for; prints the first's backend. */
static int child_auto(void)
{
    unsetenv("CCL_BACKEND");
    ccl_comm_t *comms[2];
    ccl_backend_t be = CCL_BACKEND_AUTO;
    for (int i = 0; i < 3; i++) {
        ccl_config_t cfg = {.backend = i < 2 ? CCL_BACKEND_AUTO : CCL_BACKEND_CPU, .heap_bytes = 8 << 20};
        if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK)
            return 1;
        if (i == 0)
            ccl_comm_backend(comms[0], &be);
        for (int r = 0; r < 2; r++)
            ccl_comm_destroy(comms[r]);
    }
    printf("backend %s\n", be == CCL_BACKEND_CPU ? "cpu" : "gpu");
    return 0;
}

static char self[4096];

/* Runs the child with `env` (NAME=VALUE pairs, space-separated, or ""): its stderr and
 * stdout into *out (malloc'd), its pid into *pid. */
static void run_child(const char *env, char **out, long *pid)
{
    char path[] = "/tmp/ccl-debug-log-XXXXXX";
    int fd = mkstemp(path);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        unsetenv("CCL_DEBUG");
        unsetenv("CCL_DEBUG_SUBSYS");
        unsetenv("CCL_DEBUG_FILE");
        char buf[512];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save))
            putenv(strdup(kv));
        execl(self, self, getenv("DEBUG_LOG_CHILD") ? getenv("DEBUG_LOG_CHILD") : "child", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    *pid = (long)p;
    FILE *f = fopen(path, "r");
    size_t cap = 1 << 20, n = 0;
    *out = calloc(cap, 1);
    if (f) {
        n = fread(*out, 1, cap - 1, f);
        fclose(f);
    }
    (*out)[n] = 0;
    close(fd);
    unlink(path);
}

/* Lines of text containing every needle (NULL-terminated list). */
static int count_lines(const char *text, const char *a, const char *b)
{
    int n = 0;
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        char buf[4096];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
        n += strstr(buf, a) && (!b || strstr(buf, b));
        line += len + (line[len] == '\n');
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child"))
        return child();
    if (argc > 1 && !strcmp(argv[1], "child-auto"))
        return child_auto();
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) {
        printf("FAIL debug_log: cannot find this program\n");
        return 1;
    }
    self[k] = 0;
    char host[64] = "?", prefix[128];
    gethostname(host, sizeof host);
    char *out;
    long pid;

    run_child("", &out, &pid);
    check("silent by default: nothing printed, failures included", out[0] == 0, out);
    free(out);

    run_child("CCL_DEBUG=WARN", &out, &pid);
    snprintf(prefix, sizeof prefix, "%s:%ld ccl WARN ", host, pid);
    check("WARN: a line for the failure before any comm, host and pid first",
          count_lines(out, prefix, "rank ?: ccl_comm_init_all: argument 'nranks'") == 1, out);
    check("WARN: a line for a failing call on a comm", count_lines(out, prefix, "rank 0: ccl_all_reduce: argument 'dtype'")
          == 1, out);
    check("WARN: a line for a failure found asynchronously (a timeout), as it happens",
          count_lines(out, prefix, "timeout: rank 0") >= 1, out);
    check("WARN: nothing but WARN lines", count_lines(out, " ccl INFO ", NULL) == 0 &&
          count_lines(out, " ccl TRACE ", NULL) == 0, out);
    free(out);

    run_child("CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=INIT", &out, &pid);
    check("INFO with CCL_DEBUG_SUBSYS=INIT: init lines, no others, WARN still",
          count_lines(out, " ccl INFO ", "[init]: ccl_comm_init_all: communicator") == 2 &&
          count_lines(out, " ccl INFO ", "[compile]") == 0 && count_lines(out, " ccl TRACE ", NULL) == 0 &&
          count_lines(out, " ccl WARN ", "argument 'dtype'") == 1, out);
    free(out);

    run_child("CCL_DEBUG=TRACE CCL_DEBUG_SUBSYS=^INIT", &out, &pid);
    check("TRACE with CCL_DEBUG_SUBSYS=^INIT: call and load lines, no init lines",
          count_lines(out, " ccl TRACE ", "[call]: call 0 of <string>") == 2 &&
          count_lines(out, " ccl INFO ", "[compile]") == 2 && count_lines(out, "[init]", NULL) == 0, out);
    free(out);

    run_child("CCL_DEBUG=yes", &out, &pid);
    check("an unknown level says so and means WARN", count_lines(out, " ccl WARN ", "CCL_DEBUG='yes' is not") == 1 &&
          count_lines(out, " ccl WARN ", "argument 'dtype'") == 1 && count_lines(out, " ccl INFO ", NULL) == 0, out);
    free(out);

    run_child("CCL_DEBUG=WARN DEBUG_LOG_CHILD=child-auto", &out, &pid);
    if (strstr(out, "backend gpu"))
        printf("   debug_log: backend auto found a GPU here: no CPU fallback to report\n");
    else
        check("backend auto without a GPU says once that it runs on the CPU (WARN)",
              strstr(out, "backend cpu") && count_lines(out, " ccl WARN ", "backend auto: no usable GPU backend") == 1 &&
                  count_lines(out, " ccl WARN ", "run on the CPU backend") == 1, out);
    free(out);

    char dir[] = "/tmp/ccl-debug-dir-XXXXXX", env[256], file[512];
    if (!mkdtemp(dir)) {
        check("file sink: a temporary folder", 0, "mkdtemp failed");
        return 1;
    }
    snprintf(env, sizeof env, "CCL_DEBUG=WARN CCL_DEBUG_FILE=%s/ccl.%%h.%%p.log", dir);
    run_child(env, &out, &pid);
    snprintf(file, sizeof file, "%s/ccl.%s.%ld.log", dir, host, pid);
    FILE *f = fopen(file, "r");
    char text[65536] = "";
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f)
        fclose(f);
    char detail[70000];
    snprintf(detail, sizeof detail, "stderr '%s'; %s: '%s'", out, file, f ? text : "(missing)");
    check("CCL_DEBUG_FILE: the lines go to the file (%h, %p expanded), none to stderr",
          out[0] == 0 && count_lines(text, " ccl WARN ", "argument 'dtype'") == 1, detail);
    free(out);
    unlink(file);
    rmdir(dir);
    return failures != 0;
}
