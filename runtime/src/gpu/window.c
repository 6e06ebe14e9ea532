/* gpu/window.c: registered memory on GPUs (CclBackend's reg_* hooks) and the memory
 * that pools hand to frameworks (pool_alloc, pool_free).
 *
 * Every heap's reservation runs win_bytes past the heap (gpu/mem.c): the window. A
 * registration (register.c decides where, the same heap offset on every rank) maps the
 * cuMemCreate allocations a rank's range lies in there:
 *  - reg_inspect holds them (cuMemRetainAllocationHandle, one per allocation: a torch
 *    expandable segment is one per 2 or 20 MiB page), after checking that they are this
 *    rank's GPU's device memory and, where ranks run in several processes, that they
 *    can be exported as POSIX file descriptors; anything else is refused with what it
 *    is and what to do;
 *  - reg_map maps them into this rank's own window at at[me]: an alias of the user's
 *    pages, which every GPU of this process may access, so in one process that one
 *    mapping is every rank's view of it (heap_base[me] is every rank's address of this
 *    heap); for every rank in another process it imports that rank's allocations
 *    (descriptors over gpu/mem.c's sockets) and maps them at at[p] of the reservation
 *    this process made for rank p's heap;
 *  - reg_release unmaps, and lets go of what reg_inspect held.
 * A mapping keeps its physical memory alive: memory freed while registered stays until
 * it is deregistered, and the cache's check (reg_same) sees other memory at the address.
 *
 * Descriptors go in rounds of at most B per sender and receiver, a barrier between
 * rounds, so that no more than about 512 are in flight at once (Linux counts a user's
 * descriptors in flight against RLIMIT_NOFILE) and none is held open longer than its
 * round. cuMemUnmap on deregistration is not parked (every rank synchronized first, and
 * unlike cuMemFree it does not wait for running kernels); at destroy it is, as the
 * heap's mappings are (gpu/device.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"

/* One mapping this process made for a registration. */
typedef struct {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle imported; /* a peer's, released with the mapping; 0: our own */
} GpuMap;

/* A registration's state (CclBackend reg_* `state`). */
typedef struct {
    int n, cap;                      /* this rank's allocations, in address order */
    CUmemGenericAllocationHandle *held;
    size_t *size;
    CUdeviceptr base;                /* the first's address */
    int nmaps, maps_cap;
    GpuMap *maps;
} GpuReg;

static void reg_free(GpuReg *s)
{
    for (int i = 0; i < s->n; i++) ccl__cu.MemRelease(s->held[i]);
    free(s->held);
    free(s->size);
    free(s->maps);
    free(s);
}

static int add_piece(GpuReg *s, CUmemGenericAllocationHandle h, size_t size)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        CUmemGenericAllocationHandle *nh = realloc(s->held, sizeof *nh * (size_t)cap);
        if (nh) s->held = nh;
        size_t *ns = nh ? realloc(s->size, sizeof *ns * (size_t)cap) : NULL;
        if (!ns) return -1;
        s->size = ns;
        s->cap = cap;
    }
    s->held[s->n] = h;
    s->size[s->n++] = size;
    return 0;
}

static int add_map(GpuReg *s, CUdeviceptr va, size_t size, CUmemGenericAllocationHandle imported)
{
    if (s->nmaps == s->maps_cap) {
        int cap = s->maps_cap ? 2 * s->maps_cap : 8;
        GpuMap *nm = realloc(s->maps, sizeof *nm * (size_t)cap);
        if (!nm) return -1;
        s->maps = nm;
        s->maps_cap = cap;
    }
    s->maps[s->nmaps++] = (GpuMap){va, size, imported};
    return 0;
}

/* ---- reg_inspect ---- */

/* What the memory at `at` is, when it is no cuMemCreate mapping, for messages. */
static const char *what_memory(CUdeviceptr at)
{
    unsigned type = 0;
    int managed = 0;
    CUmemoryPool pool = NULL;
    if (ccl__cu.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at) != CUDA_SUCCESS)
        return "host memory the CUDA driver does not know (malloc, a numpy array, a CPU tensor)";
    if (ccl__cu.PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, at) == CUDA_SUCCESS && managed)
        return "managed memory (cudaMallocManaged)";
    if (type == CU_MEMORYTYPE_HOST)
        return "pinned host memory (cudaMallocHost, cudaHostRegister)";
    if (ccl__cu.PointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, at) == CUDA_SUCCESS && pool)
        return "device memory from a stream-ordered pool (cudaMallocAsync; PyTorch with "
               "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)";
    return "device memory from cudaMalloc or cuMemAlloc (PyTorch's caching allocator allocates so unless its "
           "expandable segments are on)";
}

/* What to do instead, the same for every refusal. */
static const char *what_to_do(const GpuComm *g)
{
    /* PyTorch's setting first: the whole text may not fit the error's length. */
    return g->remote ? "In PyTorch (2.5 or later) set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA "
                       "starts, or use tensors made under ccl.torch.mem_pool(comm) or comm.empty; in C, ccl_mem_alloc, "
                       "or cuMemCreate with requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (the ranks "
                       "run in several processes, so peers import it by file descriptor). Unregistered, the buffer "
                       "still works: calls stage it"
                     : "In PyTorch set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts, or use "
                       "tensors made under ccl.torch.mem_pool(comm) or comm.empty; in C, ccl_mem_alloc or cuMemCreate "
                       "memory of this rank's GPU. Unregistered, the buffer still works: calls stage it";
}

static ccl_result_t refuse(ccl_comm_t *comm, const GpuComm *g, const void *ptr, size_t bytes, CUdeviceptr at,
                           CUresult why)
{
    CUdeviceptr start = (CUdeviceptr)(uintptr_t)ptr;
    if (at != start)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "the range %p (%zu bytes) runs past the cuMemCreate memory it starts in: from byte %llu "
                              "on it is no mapped cuMemCreate memory (cuMemRetainAllocationHandle: %s); register only "
                              "memory that is mapped whole", ptr, bytes, (unsigned long long)(at - start),
                              ccl__cuda_error(why));
    return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "the range %p (%zu bytes) is %s, which peers cannot map "
                          "(cuMemRetainAllocationHandle: %s). %s", ptr, bytes, what_memory(at), ccl__cuda_error(why),
                          what_to_do(g));
}

static const char *handle_types(unsigned t)
{
    if (t & CU_MEM_HANDLE_TYPE_FABRIC)
        return "fabric handles only (CU_MEM_HANDLE_TYPE_FABRIC, which libccl does not import yet; newer PyTorch "
               "versions ask for them where the GPU supports them)";
    return t ? "no POSIX file descriptors" : "no handle type at all (requestedHandleTypes 0)";
}

/* One allocation of the range: this rank's GPU's device memory, exportable when peers
 * run in other processes. */
static ccl_result_t check_piece(ccl_comm_t *comm, const GpuComm *g, const void *ptr, size_t bytes,
                                const CUmemAllocationProp *prop, CUdeviceptr base)
{
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "the range %p (%zu bytes) lies in cuMemCreate memory "
                              "on the host (location type %d), which peers' kernels cannot use in place. %s", ptr, bytes,
                              (int)prop->location.type, what_to_do(g));
    if (prop->location.id != comm->device)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "the range %p (%zu bytes) lies on GPU %d, but this rank "
                              "drives GPU %d: register memory of the rank's own GPU (a tensor on another device?)", ptr,
                              bytes, prop->location.id, comm->device);
    if (g->remote && !(prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "the range %p (%zu bytes) lies in a cuMemCreate "
                              "allocation (at %#llx) that allows %s, so the other ranks' processes cannot map it. %s",
                              ptr, bytes, (unsigned long long)base, handle_types((unsigned)prop->requestedHandleTypes),
                              what_to_do(g));
    return CCL_OK;
}

ccl_result_t ccl__gpu_reg_inspect(ccl_comm_t *comm, const void *ptr, size_t bytes, CclRegSpan *span, void **state)
{
    GpuComm *g = gpu_comm(comm);
    *state = NULL;
    ccl__cu.CtxSetCurrent(g->ctx);
    if (!g->win_bytes)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "registration is off: CCL_WINDOW_BYTES=0 left no window to "
                              "map registered memory into");
    GpuReg *s = calloc(1, sizeof *s);
    if (!s) return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)ptr, end = at + bytes;
    uint64_t align = 1;
    ccl_result_t r = CCL_OK;
    while (at < end && r == CCL_OK) {
        CUmemGenericAllocationHandle h = 0;
        CUresult cr = ccl__cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)at);
        if (cr != CUDA_SUCCESS) {
            r = refuse(comm, g, ptr, bytes, at, cr);
            break;
        }
        CUdeviceptr base = 0;
        size_t size = 0, gran = 0;
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        if ((cr = ccl__cu.MemGetAddressRange(&base, &size, at)) != CUDA_SUCCESS ||
            (cr = ccl__cu.MemGetAllocationPropertiesFromHandle(&prop, h)) != CUDA_SUCCESS ||
            (cr = ccl__cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS) {
            ccl__cu.MemRelease(h);
            r = ccl__set_error(comm, CCL_ERR_CUDA, "the range %p (%zu bytes): asking the driver about its allocation "
                               "at %#llx failed: %s", ptr, bytes, (unsigned long long)at, ccl__cuda_error(cr));
            break;
        }
        if (add_piece(s, h, size) != 0) {
            ccl__cu.MemRelease(h);
            r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        if (s->n == 1) s->base = base;
        r = check_piece(comm, g, ptr, bytes, &prop, base);
        align = gran > align ? gran : align;
        at = base + size;
    }
    if (r != CCL_OK) {
        reg_free(s);
        return r;
    }
    *span = (CclRegSpan){.lead = (uint64_t)((CUdeviceptr)(uintptr_t)ptr - s->base), .span = at - s->base,
                         .align = align, .pieces = (uint64_t)s->n};
    *state = s;
    return CCL_OK;
}

/* ---- reg_map ---- */

/* This rank's allocations into its own window at heap offset `at`, for every GPU of
 * this process. */
static ccl_result_t map_own(ccl_comm_t *comm, GpuComm *g, GpuReg *s, size_t at, const CclRegSpan *mine)
{
    CUdeviceptr va = g->own_va + at, off = 0;
    if (va % mine->align)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "rank %d: the registered memory needs %llu-byte alignment, "
                              "more than the window's reservation has", comm->rank, (unsigned long long)mine->align);
    for (int i = 0; i < s->n; i++) {
        CU_CHECK(ccl__cu.MemMap(va + off, s->size[i], 0, s->held[i], 0), "cuMemMap (registered memory, own window)");
        if (add_map(s, va + off, s->size[i], 0) != 0) {
            ccl__cu.MemUnmap(va + off, s->size[i]);
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", comm->rank);
        }
        off += s->size[i];
    }
    CUmemAccessDesc acc[64];
    int nd = g->nproc_devs < 64 ? g->nproc_devs : 64;
    for (int k = 0; k < nd; k++)
        acc[k] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = g->proc_devs[k]},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_CHECK(ccl__cu.MemSetAccess(va, (size_t)off, acc, (size_t)nd), "cuMemSetAccess (registered memory, this "
             "process's GPUs)");
    return CCL_OK;
}

/* The header of one round's message from one sender. */
typedef struct {
    int32_t rank, round, count, ok;
    uint64_t size[CCL__GPU_MAX_FDS];
} FdBatch;

/* Sends allocations [lo, lo + cnt) to every rank of another process (one message each;
 * ok 0 when they could not be exported: the receivers then skip this sender). */
static ccl_result_t send_round(ccl_comm_t *comm, GpuComm *g, GpuReg *s, uint32_t tag, int round, int lo, int cnt,
                               FdBatch *b)
{
    int fds[CCL__GPU_MAX_FDS], nfds = 0;
    ccl_result_t r = CCL_OK;
    *b = (FdBatch){.rank = comm->rank, .round = round, .count = cnt, .ok = 1};
    for (int i = 0; i < cnt && r == CCL_OK; i++) {
        CUresult cr = ccl__cu.MemExportToShareableHandle(&fds[i], s->held[lo + i],
                                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (cr != CUDA_SUCCESS) r = ccl__gpu_cu_fail(comm, cr, "cuMemExportToShareableHandle (registered memory)");
        else nfds++;
        b->size[i] = s->size[lo + i];
    }
    if (r != CCL_OK) b->ok = 0, b->count = 0;
    size_t hlen = offsetof(FdBatch, size) + sizeof(uint64_t) * (size_t)b->count;
    for (int p = 0; p < comm->nranks; p++)
        if (g->pids[p] != g->pids[comm->rank] &&
            ccl__gpu_fd_send(g->nonce, tag, p, b, hlen, fds, b->ok ? nfds : 0) != 0 && r == CCL_OK)
            r = ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot send registered memory's descriptors to rank %d: %s",
                               comm->rank, p, strerror(errno));
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return r;
}

/* Receives round `round`'s message of every rank of another process that has one, and
 * maps what it carries while *r is CCL_OK (a failure goes to *r; cum[q]: how far into
 * rank q's range it has mapped). -1 when a message did not come (the rounds end). */
static int recv_round(ccl_comm_t *comm, GpuComm *g, GpuReg *s, int ls, int round, int B, const CclRegSpan *all,
                      const size_t *at, size_t *cum, ccl_result_t *r, FdBatch *b)
{
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = comm->device},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int expect = 0;
    for (int q = 0; q < comm->nranks; q++)
        expect += g->pids[q] != g->pids[comm->rank] && all[q].pieces > (uint64_t)round * (uint64_t)B;
    for (int k = 0; k < expect; k++) {
        int fds[CCL__GPU_MAX_FDS], nfds = 0;
        memset(b, 0, offsetof(FdBatch, size));
        int got = ccl__gpu_fd_recv(ls, comm->timeout_ms, b, sizeof *b, fds, CCL__GPU_MAX_FDS, &nfds);
        int q = b->rank;
        if (got != 0 || q < 0 || q >= comm->nranks || b->round != round || (b->ok && b->count != nfds)) {
            for (int i = 0; i < nfds; i++) close(fds[i]);
            if (*r == CCL_OK)
                *r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: did not receive every peer's registered "
                                    "memory within %d ms (round %d, %d of %d messages)", comm->rank, comm->timeout_ms,
                                    round, k, expect);
            return -1;
        }
        for (int i = 0; i < nfds; i++) {
            CUmemGenericAllocationHandle h = 0;
            CUdeviceptr va = g->mapped[q] + at[q] + cum[q];
            CUresult cr = CUDA_SUCCESS;
            if (*r == CCL_OK && b->ok &&
                (cr = ccl__cu.MemImportFromShareableHandle(&h, (void *)(uintptr_t)fds[i],
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) == CUDA_SUCCESS) {
                if ((cr = ccl__cu.MemMap(va, (size_t)b->size[i], 0, h, 0)) != CUDA_SUCCESS || add_map(s, va, (size_t)b->size[i], h) != 0) {
                    if (cr == CUDA_SUCCESS) ccl__cu.MemUnmap(va, (size_t)b->size[i]);
                    ccl__cu.MemRelease(h);
                    *r = cr != CUDA_SUCCESS ? ccl__gpu_cu_fail(comm, cr, "cuMemMap (a peer's registered memory)")
                                            : ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory",
                                                             comm->rank);
                }
            } else if (cr != CUDA_SUCCESS && *r == CCL_OK) {
                *r = ccl__gpu_cu_fail(comm, cr, "cuMemImportFromShareableHandle (a peer's registered memory)");
            }
            cum[q] += (size_t)b->size[i];
            close(fds[i]);
        }
        if (*r == CCL_OK && b->ok && cum[q] == all[q].span) {
            CUresult cr = ccl__cu.MemSetAccess(g->mapped[q] + at[q], (size_t)all[q].span, &acc, 1);
            if (cr != CUDA_SUCCESS) *r = ccl__gpu_cu_fail(comm, cr, "cuMemSetAccess (a peer's registered memory)");
        }
    }
    return 0;
}

/* Every rank of another process gets this rank's allocations, and this rank theirs, in
 * rounds. Every rank takes part in every round even after a failure of its own (the
 * others would wait for its messages); register.c's next exchange tells everyone. */
static ccl_result_t pass(ccl_comm_t *comm, GpuComm *g, GpuReg *s, const CclRegSpan *all, const size_t *at,
                         const ccl_bootstrap_t *boot, ccl_result_t r)
{
    int n = comm->nranks, me = comm->rank;
    uint32_t tag = ++g->fd_rounds;   /* every rank counts its reg_map calls alike */
    int B = 512 / (n * n);
    B = B < 4 ? 4 : B > CCL__GPU_MAX_FDS ? CCL__GPU_MAX_FDS : B;
    uint64_t most = 0;
    for (int p = 0; p < n; p++)
        most = all[p].pieces > most ? all[p].pieces : most;
    int rounds = (int)((most + (uint64_t)B - 1) / (uint64_t)B);
    int ls = ccl__gpu_fd_listen(g->nonce, tag, me, 2 * n + 8);
    int32_t listening = ls >= 0, *everyone = calloc((size_t)n, sizeof *everyone);
    size_t *cum = calloc((size_t)n, sizeof *cum);
    FdBatch *b = malloc(sizeof *b);
    if (!everyone || !cum || !b || boot->allgather(boot->ctx, &listening, everyone, sizeof listening) != 0) {
        if (ls >= 0) close(ls);
        free(everyone), free(cum), free(b);
        return ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: the exchange of registered memory failed (out of "
                              "memory, or a peer gave up)", me);
    }
    for (int p = 0; p < n; p++)
        if (!everyone[p]) {
            if (ls >= 0) close(ls);
            free(everyone), free(cum), free(b);
            return ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d cannot listen on a Unix socket for the exchange of "
                                  "registered memory", p);
        }
    for (int round = 0; round < rounds; round++) {
        int lo = round * B, cnt = s->n - lo < B ? s->n - lo : B;
        ccl_result_t rs = cnt > 0 ? send_round(comm, g, s, tag, round, lo, cnt, b) : CCL_OK;
        if (r == CCL_OK) r = rs;
        if (recv_round(comm, g, s, ls, round, B, all, at, cum, &r, b) != 0 || boot->barrier(boot->ctx) != 0) {
            if (r == CCL_OK)
                r = ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: a peer gave up the exchange of registered "
                                   "memory", me);
            break;                   /* a message missing: later rounds would wait for nothing */
        }
    }
    close(ls);
    free(everyone), free(cum), free(b);
    return r;
}

ccl_result_t ccl__gpu_reg_map(ccl_comm_t *comm, void *state, const CclRegSpan *all, const size_t *at,
                              const ccl_bootstrap_t *boot)
{
    GpuComm *g = gpu_comm(comm);
    GpuReg *s = state;
    ccl__cu.CtxSetCurrent(g->ctx);
    ccl_result_t r = map_own(comm, g, s, at[comm->rank], &all[comm->rank]);
    return g->remote ? pass(comm, g, s, all, at, boot, r) : r;
}

/* ---- reg_release, reg_same ---- */

void ccl__gpu_reg_release(ccl_comm_t *comm, void *state, int at_destroy)
{
    GpuComm *g = gpu_comm(comm);
    GpuReg *s = state;
    ccl__cu.CtxSetCurrent(g->ctx);
    for (int i = s->nmaps - 1; i >= 0; i--) {
        if (at_destroy) {
            ccl__gpu_unmap(g->device, s->maps[i].va, s->maps[i].size, 0, s->maps[i].imported);
            continue;
        }
        ccl__cu.MemUnmap(s->maps[i].va, s->maps[i].size);
        if (s->maps[i].imported) ccl__cu.MemRelease(s->maps[i].imported);
    }
    reg_free(s);
}

int ccl__gpu_reg_same(ccl_comm_t *comm, void *state, const void *ptr, size_t bytes)
{
    GpuReg *s = state;
    (void)ptr, (void)bytes;          /* the range lies in s's allocations, from s->base on */
    ccl__cu.CtxSetCurrent(gpu_comm(comm)->ctx);
    CUdeviceptr at = s->base;
    for (int i = 0; i < s->n; i++) {
        CUmemGenericAllocationHandle h = 0;
        if (ccl__cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)at) != CUDA_SUCCESS) return 0;
        int same = h == s->held[i];
        ccl__cu.MemRelease(h);
        if (!same) return 0;
        at += s->size[i];
    }
    return 1;
}

/* ---- pools ---- */

/* A pool's allocation: what pool_free needs, without the comm. */
typedef struct {
    CUcontext ctx;
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle;
} GpuPoolMem;

ccl_result_t ccl__gpu_pool_alloc(ccl_comm_t *comm, size_t bytes, void **ptr, size_t *size, void **state)
{
    GpuComm *g = gpu_comm(comm);
    ccl__cu.CtxSetCurrent(g->ctx);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = comm->device}};
    int fd = 0;
    ccl__cu.DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, g->dev);
    if (fd) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CU_CHECK(ccl__cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
             "cuMemGetAllocationGranularity (pool)");
    if (!gran) gran = 2 << 20;
    GpuPoolMem *m = calloc(1, sizeof *m);
    if (!m || bytes > SIZE_MAX - gran) {
        free(m);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "ccl_mem_pool_alloc: rank %d: out of memory", comm->rank);
    }
    *m = (GpuPoolMem){.ctx = g->ctx, .size = (bytes + gran - 1) / gran * gran};
    CUresult cr = ccl__cu.MemCreate(&m->handle, m->size, &prop, 0);
    if (cr != CUDA_SUCCESS) {
        free(m);
        return ccl__set_error(comm, cr == CUDA_ERROR_OUT_OF_MEMORY ? CCL_ERR_OUT_OF_MEMORY : CCL_ERR_CUDA,
                              "ccl_mem_pool_alloc: rank %d: cuMemCreate of %zu bytes on GPU %d failed: %s", comm->rank,
                              (bytes + gran - 1) / gran * gran, comm->device, ccl__cuda_error(cr));
    }
    CUmemAccessDesc acc[64];
    int nd = g->nproc_devs < 64 ? g->nproc_devs : 64;
    for (int k = 0; k < nd; k++)
        acc[k] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = g->proc_devs[k]},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    const char *what = "cuMemAddressReserve (pool)";
    if ((cr = ccl__cu.MemAddressReserve(&m->va, m->size, gran, 0, 0)) == CUDA_SUCCESS &&
        (what = "cuMemMap (pool)", cr = ccl__cu.MemMap(m->va, m->size, 0, m->handle, 0)) == CUDA_SUCCESS &&
        (what = "cuMemSetAccess (pool)", cr = ccl__cu.MemSetAccess(m->va, m->size, acc, (size_t)nd)) == CUDA_SUCCESS) {
        *ptr = (void *)(uintptr_t)m->va;
        *size = m->size;
        *state = m;
        return CCL_OK;
    }
    ccl__gpu_pool_free(m);
    return ccl__gpu_cu_fail(comm, cr, what);
}

void ccl__gpu_pool_free(void *state)
{
    GpuPoolMem *m = state;
    ccl__cu.CtxSetCurrent(m->ctx);
    if (m->va) {
        ccl__cu.MemUnmap(m->va, m->size);
        ccl__cu.MemAddressFree(m->va, m->size);
    }
    ccl__cu.MemRelease(m->handle);
    free(m);
}
