/* real.c: the real libnccl, found and loaded once, by dlopen.
 *
 * Where to look, first found wins:
 *   1. CCL_NCCL_LIB (a path or a file name; "none": no real library at all), the only
 *      place tried when it is set;
 *   2. a libnccl already loaded in the process (torch's libtorch_cuda.so needs one, so
 *      under LD_PRELOAD it is there before the first call);
 *   3. libnccl.so.2 of torch's nvidia.nccl package, next to a loaded libtorch
 *      (site-packages/torch/lib/ -> site-packages/nvidia/nccl/lib/);
 *   4. libnccl.so.2 on the loader's path.
 * A candidate that is libccl_nccl itself (CCL_NCCL_LIB naming it, or libccl_nccl
 * installed as libnccl.so.2 and preloaded) or another library over libccl is refused:
 * its ncclAllReduce would call back into libccl instead of NCCL. The real library is
 * called through its profiling names (pncclAllReduce), its implementations, so that
 * the shim's calls into it never resolve back to the preloaded shim. The real library's
 * own calls of its exported names (NCCL's ncclCommEnsureReady calls
 * ncclCommGetAsyncError) do resolve to the shim, as NVIDIA links them interposable:
 * registry.c knows the real comms, and those calls go straight back. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static ShimReal real;
static int real_ok;
static char real_why[1024];
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

/* The functions without which the real library is of no use; the others are NULL in an
 * older NCCL, and a call that needs one says so. */
static const char *const required[] = {"GetVersion", "GetUniqueId", "CommInitRankConfig", "CommInitAll",
                                       "CommDestroy", "CommAbort", "CommSplit", "GetLastError",
                                       "CommGetAsyncError", "CommCount", "CommUserRank", "CommCuDevice",
                                       "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send",
                                       "Recv", "GroupStart", "GroupEnd", "RedOpCreatePreMulSum", "RedOpDestroy",
                                       "CommRegister", "CommDeregister"};

typedef struct {
    char (*paths)[1024];
    int n, max;
} Candidates;

static void add_candidate(Candidates *c, const char *path)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->paths[i], path))
            return;
    if (c->n < c->max)
        snprintf(c->paths[c->n++], sizeof c->paths[0], "%s", path);
}

/* Loaded objects: a libnccl (not this library), and torch's package folder. */
static int scan_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    Candidates *c = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name)
        return 0;
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    if (!strncmp(base, "libnccl.so", 10))
        add_candidate(c, name);
    const char *torch = strstr(name, "/torch/lib/libtorch");
    if (torch) {
        char path[1024];
        snprintf(path, sizeof path, "%.*s/nvidia/nccl/lib/libnccl.so.2", (int)(torch - name), name);
        add_candidate(c, path);
    }
    return 0;
}

/* Whether the library behind handle h is this one or another library over libccl. */
static const char *not_real(void *h)
{
    Dl_info self, other;
    void *sym = dlsym(h, "ncclGetVersion");
    if (!sym)
        return "it has no ncclGetVersion";
    if (dladdr((void *)shim_real, &self) && dladdr(sym, &other) && self.dli_fbase == other.dli_fbase)
        return "it is libccl_nccl itself (recursion refused)";
    if (dlsym(h, "ccl_version"))
        return "it is a library over libccl, not NVIDIA's NCCL (recursion refused)";
    return NULL;
}

static int try_open(const char *path, char *tried, size_t len)
{
    size_t used = strlen(tried);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *why = h ? not_real(h) : NULL;
    if (!h || why) {
        const char *err = h ? why : dlerror();
        snprintf(tried + used, len - used, "%s%s (%s)", used ? "; " : "", path, err ? err : "cannot be loaded");
        if (h)
            dlclose(h);
        return 0;
    }
#define SHIM_REAL_LOOKUP(name, ret, params)                                                \
    if (!(*(void **)&real.name = dlsym(h, "pnccl" #name)))                                 \
        *(void **)&real.name = dlsym(h, "nccl" #name);
    SHIM_REAL_FUNCS(SHIM_REAL_LOOKUP)
#undef SHIM_REAL_LOOKUP
    struct {
        const char *name;
        void *fn;
    } have[] = {
#define SHIM_REAL_ENTRY(name, ret, params) {#name, *(void **)&real.name},
        SHIM_REAL_FUNCS(SHIM_REAL_ENTRY)
#undef SHIM_REAL_ENTRY
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        for (size_t j = 0; j < sizeof have / sizeof have[0]; j++)
            if (!strcmp(have[j].name, required[i]) && !have[j].fn) {
                snprintf(tried + used, len - used, "%s%s (it lacks nccl%s)", used ? "; " : "", path, required[i]);
                memset(&real, 0, sizeof real);
                dlclose(h);
                return 0;
            }
    Dl_info info;
    snprintf(real.path, sizeof real.path, "%s",
             dladdr(*(void **)&real.GetVersion, &info) && info.dli_fname ? info.dli_fname : path);
    if (real.GetVersion(&real.version) != ncclSuccess)
        real.version = 0;
    return 1;
}

static int real_find(void)
{
    char tried[sizeof real_why - 64] = "";
    const char *env = getenv("CCL_NCCL_LIB");
    if (env && *env) {
        if (!strcmp(env, "none")) {
            snprintf(real_why, sizeof real_why, "CCL_NCCL_LIB=none");
            return 0;
        }
        if (try_open(env, tried, sizeof tried))
            return 1;
        snprintf(real_why, sizeof real_why, "CCL_NCCL_LIB=%s cannot be used: %s", env, tried);
        return 0;
    }
    char paths[16][1024];
    Candidates c = {paths, 0, 16};
    dl_iterate_phdr(scan_loaded, &c);
    add_candidate(&c, "libnccl.so.2");
    for (int i = 0; i < c.n; i++)
        if (try_open(paths[i], tried, sizeof tried))
            return 1;
    snprintf(real_why, sizeof real_why, "no real libnccl found (tried %s; set CCL_NCCL_LIB to its path)", tried);
    return 0;
}

static void real_load(void)
{
    int ok = real_find();
    if (ok)
        shim_log(SHIM_LOG_INFO, -1, "the real NCCL: %s (version %d)", real.path, real.version);
    else
        shim_log(SHIM_LOG_INFO, -1, "no real NCCL: %s", real_why);
    __atomic_store_n(&real_ok, ok, __ATOMIC_RELEASE);
}

const ShimReal *shim_real(void)
{
    pthread_once(&real_once, real_load);
    return real_ok ? &real : NULL;
}

const ShimReal *shim_real_loaded(void)
{
    /* Set once, with release, after the table is complete. */
    return __atomic_load_n(&real_ok, __ATOMIC_ACQUIRE) ? &real : NULL;
}

const char *shim_real_why(void)
{
    pthread_once(&real_once, real_load);
    return real_ok ? "" : real_why;
}

const char *shim_real_error(ncclComm_t realcomm)
{
    const char *e = real_ok && real.GetLastError ? real.GetLastError(realcomm) : NULL;
    return e && *e ? e : "no message from NCCL";
}
