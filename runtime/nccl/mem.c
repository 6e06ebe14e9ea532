/* mem.c: ncclMemAlloc and ncclMemFree, buffer registration and windows.
 *
 * ncclMemAlloc belongs to no communicator, so it cannot be libccl's ccl_mem_alloc
 * (symmetric memory, allocated collectively on one comm). It is the real NCCL's where
 * there is one (cuMem memory that NCCL's registration and symmetric kernels want), else
 * the CUDA runtime's or driver's device memory, else (no CUDA at all, or CCL_BACKEND=cpu:
 * the test mode) page-aligned host memory; ncclMemFree gives each back to where it came
 * from. ncclCommRegister and ncclCommWindowRegister register with the real NCCL comm
 * where there is one and with libccl (ccl_mem_register) where calls may go there, as
 * "registration" below says; either way a later call with the buffer works (libccl
 * stages a buffer it did not register), and the handle is checked when it comes back. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef enum { MEM_HOST, MEM_REAL, MEM_CUDA } MemKind;

typedef struct Block {
    void *ptr;
    MemKind kind;
    struct Block *next;
} Block;

static pthread_mutex_t blocks_mu = PTHREAD_MUTEX_INITIALIZER;
static Block *blocks;

ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    const char *fn = "ncclMemAlloc";
    if (!ptr)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'ptr' is NULL", fn);
    *ptr = NULL;
    if (size == 0)
        return ncclSuccess;
    Block *b = calloc(1, sizeof *b);
    if (!b)
        return shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
    const ShimReal *real = shim_env_cpu() && !shim_real_on_cpu() ? NULL : shim_real();
    int e = -2;
    if (real && real->MemAlloc) {
        ncclResult_t r = real->MemAlloc(&b->ptr, size);
        if (r != ncclSuccess) {
            free(b);
            return shim_fail(NULL, r, "%s: the real NCCL's failed for %zu bytes: %s", fn, size, shim_real_error(NULL));
        }
        b->kind = MEM_REAL;
    } else if (!shim_env_cpu() && (e = shim_cuda_alloc(&b->ptr, size)) == 0) {
        b->kind = MEM_CUDA;
    } else if (e == -1) {
        free(b);
        return shim_fail(NULL, ncclUnhandledCudaError, "%s: the GPU has no %zu bytes free", fn, size);
    } else {
        b->kind = MEM_HOST;
        if (posix_memalign(&b->ptr, 4096, size) != 0) {
            free(b);
            return shim_fail(NULL, ncclSystemError, "%s: out of host memory for %zu bytes", fn, size);
        }
    }
    pthread_mutex_lock(&blocks_mu);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&blocks_mu);
    *ptr = b->ptr;
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr)
{
    if (!ptr)
        return ncclSuccess;
    pthread_mutex_lock(&blocks_mu);
    Block *b = NULL;
    for (Block **p = &blocks; *p; p = &(*p)->next)
        if ((*p)->ptr == ptr) {
            b = *p;
            *p = b->next;
            break;
        }
    pthread_mutex_unlock(&blocks_mu);
    if (!b)
        return shim_fail(NULL, ncclInvalidArgument, "ncclMemFree: argument 'ptr' (%p) was not allocated by ncclMemAlloc "
                         "(or was freed already)", ptr);
    ncclResult_t r = ncclSuccess;
    const ShimReal *real = shim_real_loaded();
    if (b->kind == MEM_REAL && real && (r = real->MemFree(ptr)) != ncclSuccess)
        r = shim_fail(NULL, r, "ncclMemFree: the real NCCL's failed: %s", shim_real_error(NULL));
    else if (b->kind == MEM_CUDA && shim_cuda_free(ptr) != 0)
        r = shim_fail(NULL, ncclUnhandledCudaError, "ncclMemFree: the CUDA free of %p failed", ptr);
    else if (b->kind == MEM_HOST)
        free(ptr);
    free(b);
    return r;
}

/* ---- registration ----
 *
 * A registration or a window goes to each library the comm's calls may go to:
 *  - the real NCCL's (ncclCommRegister, ncclCommWindowRegister on the real comm) where
 *    the comm has one; its failure is the call's, as it would be without the shim;
 *  - libccl's (ccl_mem_register) where some route sends calls to libccl, so that its
 *    calls on the buffer run zero-copy. libccl's registration is collective (every rank,
 *    the same sizes, in the same order), as NCCL's windows are and its ncclCommRegister
 *    (a local cache) is not. So by default only windows reach libccl: a program may call
 *    ncclCommRegister on one rank alone, which libccl would make wait for its peers until
 *    the timeout; CCL_NCCL_REGISTER=1 sends ncclCommRegister there too (for programs that
 *    register alike on every rank). It is not made where it could not be collective: with
 *    CCL_NCCL_REGISTER=0, for ncclCommRegister on a comm one thread made with its peers
 *    (shared_thread: that thread may drive them all, one call after another), and for a
 *    window of such a comm outside a group. A refusal (memory peers cannot map: cudaMalloc
 *    memory, another GPU's, a process's private memory on the CPU backend; ranks that
 *    register different sizes) only warns, as NCCL's registration is a hint: the call
 *    succeeds and libccl stages the buffer, as any unregistered one.
 * Inside a group libccl's part is held until the group's end (group.c runs each comm's
 * steps on a thread of its own, so one thread may register every rank's window, as NCCL
 * requires). Deregistration mirrors it: ccl_mem_deregister where libccl registered (its
 * failure is the call's: ranks deregistering different registrations), at the group's
 * end inside a group; a comm's destroy releases what is left (ccl_comm_destroy). */

/* What ncclCommRegister hands out, and what ncclWindow_t points to. Live ones are in a
 * list, so that a handle coming back is looked up, never read before it is known. */
typedef struct Reg {
    ncclComm_t comm;
    int window;
    void *real_handle;  /* the real NCCL's handle or window, or NULL */
    ccl_mem_reg_t *ccl; /* libccl's registration, or NULL (libccl stages the buffer) */
    int ccl_held;       /* an open group holds libccl's registration of it */
    struct Reg *next;
} Reg;

struct ncclWindow_vidmem {
    Reg reg;
};

/* A step of libccl's part that a group holds (shim_group_hold). A deregistration
 * owns its Reg, which is out of the list already; a registration's Reg is in it. */
typedef struct {
    Reg *g;
    int deregister;
    void *buff;
    size_t size;
    const char *fn;
} RegStep;

static pthread_mutex_t regs_mu = PTHREAD_MUTEX_INITIALIZER;
static Reg *regs;

/* Why libccl's part of a registration is not made, or NULL when it is: "" for no word
 * (libccl has no part in this comm, or nothing to register), else the reason, for a
 * WARN line where *warn says so (a misuse by NCCL's own rules), else an INFO line. */
static const char *ccl_part_skipped(ncclComm_t comm, int window, size_t size, int *warn)
{
    const char *env = getenv("CCL_NCCL_REGISTER");
    *warn = 0;
    if (!comm->ccl || comm->aborted || size == 0)
        return "";
    if (!shim_routes_want_ccl(comm->routes))
        return "every call of this communicator goes to NCCL (CCL_NCCL_ROUTE)";
    if (env && !strcmp(env, "0"))
        return "CCL_NCCL_REGISTER=0";
    if (!window && !(env && !strcmp(env, "1")))
        return "NCCL's ncclCommRegister does not wait for the other ranks and libccl's registration does: "
               "CCL_NCCL_REGISTER=1 sends it to libccl too, for programs that register alike on every rank";
    if (comm->shared_thread && !window)
        return "libccl's registration waits for every rank (NCCL's ncclCommRegister does not), and one thread made "
               "this communicator with its peers (ncclCommInitAll, or inits of one id in one group), so that thread "
               "may drive them all";
    if (comm->shared_thread && shim_group_depth() == 0) {
        *warn = 1;
        return "a window is registered by every rank at once, and one thread made this communicator with its peers "
               "(ncclCommInitAll, or inits of one id in one group): outside a group the registration would wait for "
               "the ranks that thread has yet to call; register every rank's window between ncclGroupStart and "
               "ncclGroupEnd";
    }
    return NULL;
}

/* libccl's registration, now; a refusal only warns (the buffer is staged). */
static void ccl_register(Reg *g, void *buff, size_t size, const char *fn)
{
    ncclComm_t comm = g->comm;
    ccl_result_t cr = ccl_mem_register(comm->ccl, buff, size, &g->ccl);
    if (cr == CCL_OK) {
        shim_log(SHIM_LOG_INFO, comm->rank, "%s: comm %p: %zu bytes at %p registered with libccl (its calls on them "
                 "run as on its own symmetric memory where the backend maps them)", fn, (void *)comm, size, buff);
        return;
    }
    g->ccl = NULL;
    const char *msg = ccl_comm_last_error(comm->ccl);
    shim_warn(comm, "%s: libccl did not register %zu bytes at %p, so it stages them, as any unregistered buffer (the "
              "call succeeds, as NCCL's registration is a hint): %s (libccl: %s)", fn, size, buff,
              msg && *msg ? msg : "no message", ccl_result_string(cr));
}

/* libccl's deregistration, now: collective, as the registration was. */
static ncclResult_t ccl_deregister(Reg *g, const char *fn)
{
    ncclComm_t comm = g->comm;
    ccl_mem_reg_t *reg = g->ccl;
    g->ccl = NULL;
    ccl_result_t cr = ccl_mem_deregister(comm->ccl, reg);
    if (cr != CCL_OK)
        return shim_fail_ccl(comm, cr, comm->ccl, fn);
    shim_log(SHIM_LOG_INFO, comm->rank, "%s: comm %p: deregistered with libccl", fn, (void *)comm);
    return ncclSuccess;
}

/* Runs a step a group held, at its end (ShimHeldRun), and frees it. A registration
 * that fails only warns; a deregistration's failure is the group's. */
static ncclResult_t run_step(ncclComm_t comm, void *step, int comm_live)
{
    RegStep *st = step;
    Reg *g = st->g;
    ncclResult_t r = ncclSuccess;
    if (!st->deregister) {
        if (comm_live) {    /* else the comm's end freed g (regs_drop) */
            g->ccl_held = 0;
            ccl_register(g, st->buff, st->size, st->fn);
        }
    } else {
        if (comm_live && g->ccl)
            r = ccl_deregister(g, st->fn);
        free(g);
    }
    free(st);
    return r;
}

/* Holds a step of libccl's part until the group's end; 0, or -1 (out of memory, said). */
static int hold_step(Reg *g, int deregister, void *buff, size_t size, const char *fn)
{
    RegStep *st = malloc(sizeof *st);
    if (st)
        *st = (RegStep){g, deregister, buff, size, fn};
    if (!st || shim_group_hold(g->comm, st, run_step) != ncclSuccess) {
        free(st);
        return -1;
    }
    return 0;
}

static void regs_drop(ncclComm_t comm);

static ncclResult_t reg_new(ncclComm_t comm, void *buff, size_t size, int window, int flags, void **out,
                            const char *fn)
{
    struct ncclWindow_vidmem *w = calloc(1, sizeof *w);
    if (!w)
        return shim_fail(comm, ncclSystemError, "%s: out of memory", fn);
    Reg *g = &w->reg;
    g->comm = comm;
    g->window = window;
    const ShimReal *real = shim_real_loaded();
    ncclResult_t r = ncclSuccess;
    if (comm->real && real && window && real->CommWindowRegister) {
        shim_group_real_enter(real);    /* collective in NCCL too: inside the user's group */
        r = real->CommWindowRegister(comm->real, buff, size, (ncclWindow_t *)&g->real_handle, flags);
    } else if (comm->real && real && !window && real->CommRegister) {
        r = real->CommRegister(comm->real, buff, size, &g->real_handle);
    }
    if (r != ncclSuccess) {
        free(w);
        return shim_fail(comm, r, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
    }
    int warn;
    const char *skipped = ccl_part_skipped(comm, window, size, &warn);
    if (skipped && *skipped && warn)
        shim_warn(comm, "%s: %zu bytes at %p are not registered with libccl, which stages them (the call succeeds): %s",
                  fn, size, buff, skipped);
    else if (skipped && *skipped)
        shim_log(SHIM_LOG_INFO, comm->rank, "%s: comm %p: %zu bytes at %p are not registered with libccl, which "
                 "stages them: %s", fn, (void *)comm, size, buff, skipped);
    else if (!skipped && shim_group_depth() > 0)
        g->ccl_held = hold_step(g, 0, buff, size, fn) == 0;
    else if (!skipped)
        ccl_register(g, buff, size, fn);
    pthread_mutex_lock(&regs_mu);
    g->next = regs;
    regs = g;
    comm->drop_regs = regs_drop;
    pthread_mutex_unlock(&regs_mu);
    *out = w;
    return ncclSuccess;
}

static ncclResult_t reg_free(ncclComm_t comm, void *handle, int window, const char *fn)
{
    Reg *g = NULL;
    const char *busy = NULL;
    int grouped = shim_group_depth() > 0;
    pthread_mutex_lock(&regs_mu);
    for (Reg **p = &regs; *p; p = &(*p)->next)
        if ((void *)*p == handle && (*p)->comm == comm && (*p)->window == window) {
            g = *p;
            /* libccl's deregistration would wait for peers this thread may have yet to
             * call, or an open group of another thread still holds the registration. */
            if (!grouped && g->ccl && comm->shared_thread)
                busy = "it is registered with libccl, whose deregistration waits for every rank, and one thread made "
                       "this communicator with its peers: deregister every rank's window between ncclGroupStart and "
                       "ncclGroupEnd, as they were registered";
            else if (!grouped && g->ccl_held)
                busy = "an open group of another thread holds its registration with libccl";
            else
                *p = g->next;
            break;
        }
    pthread_mutex_unlock(&regs_mu);
    if (!g)
        return shim_fail(comm, ncclInvalidArgument, "%s: argument '%s' (%p) is not a live %s of this communicator",
                         fn, window ? "win" : "handle", handle,
                         window ? "window from ncclCommWindowRegister" : "handle from ncclCommRegister");
    if (busy)
        return shim_fail(comm, ncclInvalidUsage, "%s: argument '%s' (%p) cannot be deregistered outside a group: %s",
                         fn, window ? "win" : "handle", handle, busy);
    ncclResult_t r = ncclSuccess;
    const ShimReal *real = shim_real_loaded();
    if (g->real_handle && real) {
        if (window)
            shim_group_real_enter(real);
        r = window ? real->CommWindowDeregister(comm->real, (ncclWindow_t)g->real_handle)
                   : real->CommDeregister(comm->real, g->real_handle);
        if (r != ncclSuccess)
            r = shim_fail(comm, r, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
    }
    if ((g->ccl || g->ccl_held) && grouped) {
        if (hold_step(g, 1, NULL, 0, fn) == 0)
            return r;    /* the step frees g */
        /* Out of memory (said): libccl's registration stays until the comm's destroy. */
    } else if (g->ccl) {
        ncclResult_t cr = ccl_deregister(g, fn);
        r = r != ncclSuccess ? r : cr;
    }
    free(g);
    return r;
}
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    const char *fn = "ncclCommRegister";
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, fn, &pass);
    if (r != ncclSuccess)
        return r;
    if (pass) /* the real library's own call (NCCL 2.28's ncclCommWindowRegister makes it) */
        return pass->CommRegister(comm, buff, size, handle);
    if (!handle)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'handle' is NULL", fn);
    else if (!buff && size)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'buff' is NULL with size %zu", fn, size);
    else
        r = reg_new(comm, buff, size, 0, 0, handle, fn);
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, "ncclCommDeregister", &pass);
    if (r != ncclSuccess)
        return r;
    if (pass) /* the real library's own call (its window deregistration makes it) */
        return pass->CommDeregister(comm, handle);
    r = reg_free(comm, handle, 0, "ncclCommDeregister");
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags)
{
    const char *fn = "ncclCommWindowRegister";
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, fn, &pass);
    if (r != ncclSuccess)
        return r;
    if (pass && !pass->CommWindowRegister)
        return ncclInvalidUsage;
    if (pass) /* the real library's own call */
        return pass->CommWindowRegister(comm, buff, size, win, winFlags);
    void *out = NULL;
    if (!win)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'win' is NULL", fn);
    else if (!buff && size)
        r = shim_fail(comm, ncclInvalidArgument, "%s: argument 'buff' is NULL with size %zu", fn, size);
    else if ((r = reg_new(comm, buff, size, 1, winFlags, &out, fn)) == ncclSuccess)
        *win = out;
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    const ShimReal *pass;
    ncclResult_t r = shim_comm_get_or_real(comm, "ncclCommWindowDeregister", &pass);
    if (r != ncclSuccess)
        return r;
    if (pass && !pass->CommWindowDeregister)
        return ncclInvalidUsage;
    if (pass) /* the real library's own call (its CE collectives' cleanup makes it) */
        return pass->CommWindowDeregister(comm, win);
    r = reg_free(comm, win, 1, "ncclCommWindowDeregister");
    shim_comm_put(comm);
    return r;
}

/* comm's drop_regs: forgets its registrations and windows at its end. */
static void regs_drop(ncclComm_t comm)
{
    pthread_mutex_lock(&regs_mu);
    for (Reg **p = &regs; *p;) {
        Reg *g = *p;
        if (g->comm == comm) {
            *p = g->next;
            free(g);
        } else {
            p = &g->next;
        }
    }
    pthread_mutex_unlock(&regs_mu);
}

/* NCCL's profiling names. */
SHIM_PROFILING_NAME(ncclMemAlloc);
SHIM_PROFILING_NAME(ncclMemFree);
SHIM_PROFILING_NAME(ncclCommRegister);
SHIM_PROFILING_NAME(ncclCommDeregister);
SHIM_PROFILING_NAME(ncclCommWindowRegister);
SHIM_PROFILING_NAME(ncclCommWindowDeregister);
