/* nvtx.c: CCL_NVTX=1 (docs/api.md, "Debug output").
 *
 * The test builds a stand-in libnvToolsExt (nvtxRangePushA and nvtxRangePop that write
 * what they are given to stderr; with the compiler that builds the tests, skipped with
 * a note where there is none) and runs itself again as a child: with CCL_NVTX=1 and
 * CCL_NVTX_LIBRARY naming it, every API call that does work is one range named after the
 * function, pushes and pops balanced; without CCL_NVTX nothing is loaded or said; with a
 * library that does not exist, the calls still work, and CCL_DEBUG=WARN says why there
 * are no ranges. libccl links no NVTX library: it loads it with dlopen. */
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
        printf("ok nvtx: %s\n", what);
    else {
        printf("FAIL nvtx: %s: %.2000s\n", what, detail);
        failures++;
    }
}

static const char fake_nvtx[] =
    "#include <stdio.h>\n"
    "int nvtxRangePushA(const char *m) { fprintf(stderr, \"nvtx push %s\\n\", m); return 0; }\n"
    "int nvtxRangePop(void) { fprintf(stderr, \"nvtx pop\\n\"); return 0; }\n";

static int child(void)
{
    ccl_comm_t *comms[2];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 8 << 20};
    if (ccl_comm_init_all(comms, 2, NULL, &cfg) != CCL_OK)
        return 1;
    ccl_algorithm_t *alg[2];
    float in[4] = {1, 2, 3, 4}, out[4];
    for (int r = 0; r < 2; r++)
        if (ccl_algorithm_load(comms[r], RING, 0, &alg[r]) != CCL_OK)
            return 1;
    for (int r = 0; r < 2; r++)
        if (ccl_algorithm_run(alg[r], in, out, 4, CCL_F32, CCL_SUM, NULL) != CCL_OK)
            return 1;
    ccl_group_start();
    ccl_send(in, 1, CCL_F32, 1, comms[0], NULL);
    ccl_recv(out, 1, CCL_F32, 0, comms[1], NULL);
    if (ccl_group_end() != CCL_OK)
        return 1;
    for (int r = 0; r < 2; r++)
        if (ccl_comm_synchronize(comms[r]) != CCL_OK)
            return 1;
    for (int r = 0; r < 2; r++)
        ccl_comm_destroy(comms[r]);
    return out[0] == 1 ? 0 : 1;
}

static char self[4096];

/* Runs the child with the environment `env` ("A=1 B=2"): its exit code, stderr in out. */
static int run_child(const char *env, char *out, size_t len)
{
    char path[] = "/tmp/ccl-nvtx-out-XXXXXX";
    int fd = mkstemp(path);
    pid_t p = fork();
    if (p == 0) {
        dup2(fd, 2);
        unsetenv("CCL_NVTX");
        unsetenv("CCL_NVTX_LIBRARY");
        unsetenv("CCL_DEBUG");
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save))
            putenv(strdup(kv));
        execl(self, self, "child", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, len - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "child"))
        return child();
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0)
        return 1;
    self[k] = 0;
    char dir[] = "/tmp/ccl-nvtx-XXXXXX", src[512], lib[512], cmd[2048];
    if (!mkdtemp(dir))
        return 1;
    snprintf(src, sizeof src, "%s/fake.c", dir);
    snprintf(lib, sizeof lib, "%s/libnvToolsExt.so.1", dir);
    FILE *f = fopen(src, "w");
    fputs(fake_nvtx, f);
    fclose(f);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    snprintf(cmd, sizeof cmd, "%s -shared -fPIC -o '%s' '%s' 2>/dev/null", cc, lib, src);
    static char out[1 << 16], env[1024];
    if (system(cmd) != 0) {
        printf("ok nvtx: skipped the ranges' check: no C compiler ('%s') to build a stand-in libnvToolsExt\n", cc);
    } else {
        snprintf(env, sizeof env, "CCL_NVTX=1 CCL_NVTX_LIBRARY=%s", lib);
        int rc = run_child(env, out, sizeof out);
        int pushes = count(out, "nvtx push "), pops = count(out, "nvtx pop");
        char detail[sizeof out + 64];
        snprintf(detail, sizeof detail, "exit %d, %d pushes, %d pops:\n%s", rc, pushes, pops, out);
        check("CCL_NVTX=1: a range per API call, named after it, pushes and pops balanced",
              rc == 0 && pushes == pops && count(out, "nvtx push ccl_comm_init_all") == 2 &&
              count(out, "nvtx push ccl_algorithm_load") == 2 && count(out, "nvtx push ccl_algorithm_run") == 2 &&
              count(out, "nvtx push ccl_send") == 1 && count(out, "nvtx push ccl_recv") == 1 &&
              count(out, "nvtx push ccl_group_end") == 1 && count(out, "nvtx push ccl_comm_synchronize") == 2,
              detail);
        snprintf(env, sizeof env, "CCL_NVTX_LIBRARY=%s", lib);
        rc = run_child(env, out, sizeof out);
        check("without CCL_NVTX: no ranges, nothing said", rc == 0 && out[0] == 0, out);
    }
    int rc = run_child("CCL_NVTX=1 CCL_NVTX_LIBRARY=/nonexistent/libnvToolsExt.so.1 CCL_DEBUG=WARN", out, sizeof out);
    check("CCL_NVTX=1 without the library: the calls work; WARN says why there are no ranges",
          rc == 0 && count(out, "CCL_NVTX=1, but libnvToolsExt cannot be loaded") == 1 && !strstr(out, "nvtx push"),
          out);
    unlink(lib);
    unlink(src);
    rmdir(dir);
    return failures != 0;
}
