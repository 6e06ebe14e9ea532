/* mem.c: ncclMemAlloc and ncclMemFree, buffer registration and windows.
 *
 * ncclMemAlloc belongs to no communicator, so it cannot be libccl's ccl_mem_alloc
 * (symmetric memory, allocated collectively on one comm). It is the real NCCL's where
 * there is one (cuMem memory that NCCL's registration and symmetric kernels want), else
 * the CUDA runtime's or driver's device memory, else (no CUDA at all, or CCL_BACKEND=cpu:
 * the test mode) page-aligned host memory; ncclMemFree gives each back to where it came
 * from. libccl has no registration of user buffers (it stages ordinary buffers), so
 * ncclCommRegister and ncclCommWindowRegister register with the real NCCL comm where
 * there is one and otherwise only hand out a handle: either way a later call with the
 * buffer works, and the handle is checked when it comes back. */
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

/* ---- registration ---- */

/* What ncclCommRegister hands out, and what ncclWindow_t points to. Live ones are in a
 * list, so that a handle coming back is looked up, never read before it is known. */
typedef struct Reg {
    ncclComm_t comm;
    int window;
    void *real_handle; /* the real NCCL's handle or window, or NULL */
    struct Reg *next;
} Reg;

struct ncclWindow_vidmem {
    Reg reg;
};

static pthread_mutex_t regs_mu = PTHREAD_MUTEX_INITIALIZER;
static Reg *regs;

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
    if (comm->real && real && window && real->CommWindowRegister)
        r = real->CommWindowRegister(comm->real, buff, size, (ncclWindow_t *)&g->real_handle, flags);
    else if (comm->real && real && !window && real->CommRegister)
        r = real->CommRegister(comm->real, buff, size, &g->real_handle);
    if (r != ncclSuccess) {
        free(w);
        return shim_fail(comm, r, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
    }
    pthread_mutex_lock(&regs_mu);
    g->next = regs;
    regs = g;
    pthread_mutex_unlock(&regs_mu);
    *out = w;
    return ncclSuccess;
}

static ncclResult_t reg_free(ncclComm_t comm, void *handle, int window, const char *fn)
{
    Reg *g = NULL;
    pthread_mutex_lock(&regs_mu);
    for (Reg **p = &regs; *p; p = &(*p)->next)
        if ((void *)*p == handle && (*p)->comm == comm && (*p)->window == window) {
            g = *p;
            *p = g->next;
            break;
        }
    pthread_mutex_unlock(&regs_mu);
    if (!g)
        return shim_fail(comm, ncclInvalidArgument, "%s: argument '%s' (%p) is not a live %s of this communicator",
                         fn, window ? "win" : "handle", handle,
                         window ? "window from ncclCommWindowRegister" : "handle from ncclCommRegister");
    ncclResult_t r = ncclSuccess;
    const ShimReal *real = shim_real_loaded();
    if (g->real_handle && real) {
        r = window ? real->CommWindowDeregister(comm->real, (ncclWindow_t)g->real_handle)
                   : real->CommDeregister(comm->real, g->real_handle);
        if (r != ncclSuccess)
            r = shim_fail(comm, r, "%s: the real NCCL's failed: %s", fn, shim_real_error(comm->real));
    }
    free(g);
    return r;
}
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
    const char *fn = "ncclCommRegister";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
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
    ncclResult_t r = shim_comm_get(comm, "ncclCommDeregister");
    if (r != ncclSuccess)
        return r;
    r = reg_free(comm, handle, 0, "ncclCommDeregister");
    shim_comm_put(comm);
    return r;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags)
{
    const char *fn = "ncclCommWindowRegister";
    ncclResult_t r = shim_comm_get(comm, fn);
    if (r != ncclSuccess)
        return r;
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
    ncclResult_t r = shim_comm_get(comm, "ncclCommWindowDeregister");
    if (r != ncclSuccess)
        return r;
    r = reg_free(comm, win, 1, "ncclCommWindowDeregister");
    shim_comm_put(comm);
    return r;
}

void shim_regs_drop(ncclComm_t comm)
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
