/* driver.c: NCCL for ccl-perf, loaded with dlopen so the tool links nothing but libccl
 * (the CUDA driver is the harness's: tools/common/cuda.c). tests/perf/run.sh compiles
 * this file with CCL_TOOLS_CHECK_PROTOTYPES and the real nccl.h, so the hand-written
 * prototypes (perf.h) are checked against it.
 *
 * Every symbol of PERF_NCCL_SYMS is required. Those of PERF_NCCL_WINDOW_SYMS (NCCL
 * 2.27+'s registered windows, for its symmetric kernels) are optional: a library without
 * them, or older than 2.27, is compared in the plain mode only, and NcclStatus.sym_why
 * says why. */
#include "perf.h"

#define PERF_NCCL_SYMS(X)                                                                 \
    X(GetVersion, "ncclGetVersion") X(GetUniqueId, "ncclGetUniqueId")                      \
    X(CommInitRank, "ncclCommInitRank") X(CommDestroy, "ncclCommDestroy")                  \
    X(AllReduce, "ncclAllReduce") X(AllGather, "ncclAllGather")                            \
    X(ReduceScatter, "ncclReduceScatter") X(Broadcast, "ncclBroadcast")                    \
    X(Reduce, "ncclReduce") X(Send, "ncclSend") X(Recv, "ncclRecv")                        \
    X(GroupStart, "ncclGroupStart") X(GroupEnd, "ncclGroupEnd")                            \
    X(GetErrorString, "ncclGetErrorString")

#define PERF_NCCL_WINDOW_SYMS(X)                                                          \
    X(MemAlloc, "ncclMemAlloc") X(MemFree, "ncclMemFree")                                  \
    X(CommWindowRegister, "ncclCommWindowRegister")                                       \
    X(CommWindowDeregister, "ncclCommWindowDeregister")

#ifdef CCL_TOOLS_CHECK_PROTOTYPES
#define PERF_SAME_TYPE(field, fn)                                                        \
    _Static_assert(__builtin_types_compatible_p(__typeof__(((NcclApi *)0)->field), __typeof__(&fn)), \
                   #fn " does not match nccl.h");
PERF_SAME_TYPE(GetVersion, ncclGetVersion) PERF_SAME_TYPE(GetUniqueId, ncclGetUniqueId)
PERF_SAME_TYPE(CommInitRank, ncclCommInitRank) PERF_SAME_TYPE(CommDestroy, ncclCommDestroy)
PERF_SAME_TYPE(AllReduce, ncclAllReduce) PERF_SAME_TYPE(AllGather, ncclAllGather)
PERF_SAME_TYPE(ReduceScatter, ncclReduceScatter) PERF_SAME_TYPE(Broadcast, ncclBroadcast)
PERF_SAME_TYPE(Reduce, ncclReduce) PERF_SAME_TYPE(Send, ncclSend) PERF_SAME_TYPE(Recv, ncclRecv)
PERF_SAME_TYPE(GroupStart, ncclGroupStart) PERF_SAME_TYPE(GroupEnd, ncclGroupEnd)
PERF_SAME_TYPE(GetErrorString, ncclGetErrorString)
PERF_SAME_TYPE(MemAlloc, ncclMemAlloc) PERF_SAME_TYPE(MemFree, ncclMemFree)
PERF_SAME_TYPE(CommWindowRegister, ncclCommWindowRegister)
PERF_SAME_TYPE(CommWindowDeregister, ncclCommWindowDeregister)
_Static_assert(PERF_NCCL_WIN_COLL_SYMMETRIC == NCCL_WIN_COLL_SYMMETRIC, "window flags");
_Static_assert(sizeof(NcclUniqueId) == 128, "unique id");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4, "ops");
_Static_assert(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 && ncclInt64 == 4 &&
               ncclUint64 == 5 && ncclFloat16 == 6 && ncclFloat32 == 7 && ncclFloat64 == 8 && ncclBfloat16 == 9 &&
               ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11, "dtypes");
#undef PERF_SAME_TYPE
#endif

NcclApi perf_nccl;

/* NCCL's dtype and op numbers (nccl.h; checked against it above). Every ccl_dtype_t has
 * one: ncclInt8 is 0, so an entry left out would silently time int8. */
NcclDataType perf_nccl_dtype(ccl_dtype_t t)
{
    static const int map[] = {[CCL_F32] = 7, [CCL_F64] = 8, [CCL_F16] = 6, [CCL_BF16] = 9, [CCL_I32] = 2,
        [CCL_I64] = 4, [CCL_U8] = 1, [CCL_FP8_E4M3] = 10, [CCL_FP8_E5M2] = 11, [CCL_I8] = 0, [CCL_U32] = 3,
        [CCL_U64] = 5};
    _Static_assert(sizeof map / sizeof map[0] == CCL_NUM_DTYPES, "a ccl_dtype_t without its NCCL number");
    return (NcclDataType)map[t];
}
NcclRedOp perf_nccl_op(ccl_op_t op)
{
    static const int map[CCL_NUM_OPS] = {[CCL_SUM] = 0, [CCL_PROD] = 1, [CCL_MAX] = 2, [CCL_MIN] = 3, [CCL_AVG] = 4};
    return (NcclRedOp)map[op];
}

/* Finds libnccl: $CCL_NCCL_LIB, the nvidia-nccl Python package (PyTorch's environment on
 * the GPU machines), the loader's path, then the CUDA toolkit. */
static void *nccl_open(char *path, size_t len, char *tried, size_t tlen)
{
    const char *env = getenv("CCL_NCCL_LIB");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            snprintf(path, len, "%s", env);
            return h;
        }
        /* Say so, then search as usual: the header names the library that was used. */
        if (!tool_quiet_rank())
            fprintf(stderr, "ccl-perf: note: CCL_NCCL_LIB=%s cannot be loaded (%s); searching the usual places\n", env,
                    dlerror());
    }
    char cand[4][PATH_MAX];
    int nc = 0;
    FILE *py = popen("python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null", "r");
    if (py) {
        char dir[PATH_MAX - 32];
        if (fgets(dir, sizeof dir, py)) {
            dir[strcspn(dir, "\n")] = 0;
            snprintf(cand[nc++], PATH_MAX, "%s/lib/libnccl.so.2", dir);
        }
        pclose(py);
    }
    snprintf(cand[nc++], PATH_MAX, "libnccl.so.2");
    snprintf(cand[nc++], PATH_MAX, "/usr/local/cuda/lib64/libnccl.so.2");
    snprintf(cand[nc++], PATH_MAX, "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
    size_t used = 0;
    tried[0] = 0;
    for (int i = 0; i < nc; i++) {
        void *h = dlopen(cand[i], RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            /* Report the file the loader picked, not just the name we asked for. */
            Dl_info info;
            void *sym = dlsym(h, "ncclGetVersion");
            if (sym && dladdr(sym, &info) && info.dli_fname)
                snprintf(path, len, "%s", info.dli_fname);
            else
                snprintf(path, len, "%.*s", (int)len - 1, cand[i]);
            return h;
        }
        if (used < tlen)
            used += (size_t)snprintf(tried + used, tlen - used, "%s%s", i ? ", " : "", cand[i]);
    }
    return NULL;
}

void perf_nccl_load(NcclStatus *st)
{
    char tried[1024];
    void *lib = nccl_open(st->path, sizeof st->path, tried, sizeof tried);
    if (!lib) {
        snprintf(st->why, sizeof st->why, "libnccl.so.2 not found (tried %.400s; set CCL_NCCL_LIB to its path)", tried);
        return;
    }
    struct { void **slot; const char *name; } syms[] = {
#define PERF_SYM(field, name) {(void **)&perf_nccl.field, name},
        PERF_NCCL_SYMS(PERF_SYM)
#undef PERF_SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].slot = dlsym(lib, syms[i].name))) {
            snprintf(st->why, sizeof st->why, "%.400s lacks %s", st->path, syms[i].name);
            return;
        }
    perf_nccl.GetVersion(&st->version);
    st->available = 1;

    /* The window symbols: all of them, or the plain mode only. */
    struct { void **slot; const char *name; } wsyms[] = {
#define PERF_SYM(field, name) {(void **)&perf_nccl.field, name},
        PERF_NCCL_WINDOW_SYMS(PERF_SYM)
#undef PERF_SYM
    };
    const char *missing = NULL;
    for (size_t i = 0; i < sizeof wsyms / sizeof wsyms[0]; i++)
        if (!(*wsyms[i].slot = dlsym(lib, wsyms[i].name)) && !missing)
            missing = wsyms[i].name;
    st->sym_lib = perf_nccl_sym_check(st->version, st->path, missing, st->sym_why, sizeof st->sym_why);
    if (!st->sym_lib)
        for (size_t i = 0; i < sizeof wsyms / sizeof wsyms[0]; i++)
            *wsyms[i].slot = NULL;
}

/* Whether a library of this version (ncclGetVersion's code) whose first missing window
 * symbol is `missing` (NULL: none) has symmetric windows; if not, why, in `why`. The
 * version is checked first: a 2.26 library that happens to export ncclMemAlloc (2.19+)
 * still has no windows, and saying so names the fix (a newer NCCL). */
int perf_nccl_sym_check(int version, const char *path, const char *missing, char *why, size_t len)
{
    /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before. */
    int major = version >= 10000 ? version / 10000 : version / 1000;
    int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
    int patch = version % 100;
    if (version < PERF_NCCL_SYM_VERSION) {
        snprintf(why, len, "NCCL %d.%d.%d has no symmetric windows (ncclCommWindowRegister came in 2.27)", major,
                 minor, patch);
        return 0;
    }
    if (missing) {
        snprintf(why, len, "NCCL %d.%d.%d (%.300s) lacks %s", major, minor, patch, path, missing);
        return 0;
    }
    why[0] = 0;
    return 1;
}

/* The modes that will run, from what --nccl-mode asks for and what the library has:
 * sets plain and sym, and sym_why when sym is off. With --nccl-mode sym and a library
 * without windows nothing is left: available is cleared, and why says so. */
void perf_nccl_modes(NcclStatus *st, int mode)
{
    st->plain = st->sym = 0;
    if (!st->available)
        return;
    st->plain = mode != PERF_NCCL_SYM;
    st->sym = mode != PERF_NCCL_PLAIN && st->sym_lib;
    if (mode == PERF_NCCL_PLAIN)
        snprintf(st->sym_why, sizeof st->sym_why, "not asked for (--nccl-mode plain)");
    if (mode == PERF_NCCL_SYM && !st->sym_lib) {
        snprintf(st->why, sizeof st->why, "--nccl-mode sym, but %.450s", st->sym_why);
        st->available = 0;
    }
}
