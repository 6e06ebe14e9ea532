/* gpu/mem.c: the symmetric heap on GPUs.
 *
 * Each rank creates its heap with cuMemCreate on its own GPU (exportable as a POSIX
 * file descriptor) and maps it. Peers then reach it in one of two ways:
 *  - same process (ccl_comm_init_all): the owner maps it once and grants access to
 *    every GPU of the process (cuMemSetAccess); all ranks use the same address;
 *  - another process (one process per GPU): the owner exports an FD and sends it over
 *    a Unix socket (SCM_RIGHTS); the peer imports, maps and grants its own GPU access.
 * comm->heap_base[p] is then rank p's heap as addressed from this rank's GPU (a device
 * address: never dereferenced on the host), and the same table is copied to device
 * memory for the kernels. NVLink multicast is never used.
 *
 * The socket rendezvous: every rank listens on an abstract Unix socket named after a
 * nonce all ranks agree on (rank 0's, via the bootstrap all-gather) and its rank; after
 * a barrier each rank connects to every other-process peer and sends its FD, then
 * accepts one connection from each. Listen backlogs hold every connection, so the
 * sends never wait for the accepts. Accepts are bounded by the comm's timeout. */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpu/gpu.h"

typedef struct {
    int64_t pid;
    int64_t device;
    uint64_t va;
    uint64_t size;
    uint64_t nonce;
} GpuPeerInfo;

#define CU_TRY(call, what)                                                                              \
    do {                                                                                                \
        CUresult r_ = (call);                                                                           \
        if (r_ != CUDA_SUCCESS) {                                                                       \
            ccl__set_error(comm, CCL_ERR_CUDA, "rank %d: %s failed: %s", comm->rank, what,              \
                           ccl__cuda_error(r_));                                                        \
            goto fail;                                                                                  \
        }                                                                                               \
    } while (0)

static socklen_t gpu_sock_addr(struct sockaddr_un *a, uint64_t nonce, int rank)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* Abstract namespace (leading NUL): nothing to clean up in the file system. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ccl-heap-%016llx-%d", (unsigned long long)nonce, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int gpu_send_fd(uint64_t nonce, int to, int me, int fd)
{
    struct sockaddr_un a;
    socklen_t len = gpu_sock_addr(&a, nonce, to);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        close(s);
        return -1;
    }
    int32_t payload = me;
    struct iovec iov = {.iov_base = &payload, .iov_len = sizeof payload};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    ssize_t w = sendmsg(s, &msg, 0);
    close(s);
    return w == (ssize_t)sizeof payload ? 0 : -1;
}

/* Accepts one connection on ls (bounded by timeout_ms) and receives (rank, fd). */
static int gpu_recv_fd(int ls, int timeout_ms, int *rank, int *fd)
{
    struct pollfd p = {.fd = ls, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1) return -1;
    int s = accept(ls, NULL, NULL);
    if (s < 0) return -1;
    int32_t payload = -1;
    struct iovec iov = {.iov_base = &payload, .iov_len = sizeof payload};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct pollfd q = {.fd = s, .events = POLLIN};
    ssize_t r = poll(&q, 1, timeout_ms) == 1 ? recvmsg(s, &msg, 0) : -1;
    close(s);
    struct cmsghdr *c = r == (ssize_t)sizeof payload ? CMSG_FIRSTHDR(&msg) : NULL;
    if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
    memcpy(fd, CMSG_DATA(c), sizeof *fd);
    *rank = payload;
    return 0;
}

ccl_result_t ccl__gpu_heap_create(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot)
{
    int n = comm->nranks, me = comm->rank;
    GpuPeerInfo *info = calloc((size_t)n, sizeof *info);
    g->imported = calloc((size_t)n, sizeof *g->imported);
    g->mapped = calloc((size_t)n, sizeof *g->mapped);
    int ls = -1, own_fd = -1;
    if (!info || !g->imported || !g->mapped) {
        ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", me);
        goto fail;
    }

    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = comm->device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CU_TRY(ccl__cu.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
           "cuMemGetAllocationGranularity");
    if (gran == 0) gran = 2 << 20;
    g->heap_size = (comm->heap_bytes + gran - 1) / gran * gran;
    CU_TRY(ccl__cu.MemCreate(&g->own, g->heap_size, &prop, 0), "cuMemCreate (the symmetric heap)");
    CU_TRY(ccl__cu.MemAddressReserve(&g->own_va, g->heap_size, gran, 0, 0), "cuMemAddressReserve");
    CU_TRY(ccl__cu.MemMap(g->own_va, g->heap_size, 0, g->own, 0), "cuMemMap");
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = comm->device},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_TRY(ccl__cu.MemSetAccess(g->own_va, g->heap_size, &acc, 1), "cuMemSetAccess (own GPU)");
    /* The heap must be zero before any peer may signal into it (the bootstrap barrier
     * below), not merely queued to be. */
    CU_TRY(ccl__cu.MemsetD8Async(g->own_va, 0, g->heap_size, g->quiet), "cuMemsetD8Async (zeroing the heap)");
    CU_TRY(ccl__cu.StreamSynchronize(g->quiet), "cuStreamSynchronize (heap zeroed)");

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    GpuPeerInfo mine = {.pid = getpid(), .device = comm->device, .va = g->own_va, .size = g->heap_size,
                        .nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)};
    if (boot->allgather(boot->ctx, &mine, info, sizeof mine) != 0) {
        ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap all-gather failed during heap exchange", me);
        goto fail;
    }
    for (int p = 0; p < n; p++)
        if (info[p].size != g->heap_size) {
            ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "rank %d: heap sizes differ (rank %d: %llu bytes, rank %d: %zu); "
                           "every rank must use the same heap_bytes", me, p, (unsigned long long)info[p].size, me,
                           g->heap_size);
            goto fail;
        }

    /* Same process: grant every GPU of this process access to our heap. */
    CUmemAccessDesc *descs = calloc((size_t)n, sizeof *descs);
    int nd = 0, remote = 0;
    if (!descs) {
        ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d: out of memory", me);
        goto fail;
    }
    for (int p = 0; p < n; p++) {
        if (info[p].pid != mine.pid) {
            remote++;
            continue;
        }
        int dup = 0;
        for (int k = 0; k < nd; k++) dup |= descs[k].location.id == (int)info[p].device;
        if (dup) continue;
        descs[nd].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        descs[nd].location.id = (int)info[p].device;
        descs[nd].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        nd++;
    }
    CUresult ar = ccl__cu.MemSetAccess(g->own_va, g->heap_size, descs, (size_t)nd);
    free(descs);
    CU_TRY(ar, "cuMemSetAccess (the process's GPUs; are they peer-capable?)");
    for (int p = 0; p < n; p++)
        if (info[p].pid == mine.pid) comm->heap_base[p] = (char *)(uintptr_t)info[p].va;

    /* Other processes: FDs over Unix sockets. */
    if (remote) {
        uint64_t nonce = info[0].nonce;
        CU_TRY(ccl__cu.MemExportToShareableHandle(&own_fd, g->own, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle (POSIX FD)");
        struct sockaddr_un a;
        socklen_t len = gpu_sock_addr(&a, nonce, me);
        ls = socket(AF_UNIX, SOCK_STREAM, 0);
        if (ls < 0 || bind(ls, (struct sockaddr *)&a, len) != 0 || listen(ls, n + 8) != 0) {
            ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot listen on a Unix socket for the heap exchange: %s", me,
                           strerror(errno));
            goto fail;
        }
        if (boot->barrier(boot->ctx) != 0) {
            ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap barrier failed during heap exchange", me);
            goto fail;
        }
        for (int p = 0; p < n; p++)
            if (info[p].pid != mine.pid && gpu_send_fd(nonce, p, me, own_fd) != 0) {
                ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot send the heap's FD to rank %d: %s", me, p,
                               strerror(errno));
                goto fail;
            }
        for (int k = 0; k < remote; k++) {
            int from = -1, fd = -1;
            if (gpu_recv_fd(ls, comm->timeout_ms, &from, &fd) != 0 || from < 0 || from >= n || g->imported[from]) {
                ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: did not receive every peer's heap FD within %d ms "
                               "(%d of %d)", me, comm->timeout_ms, k, remote);
                if (fd >= 0) close(fd);
                goto fail;
            }
            CUresult r = ccl__cu.MemImportFromShareableHandle(&g->imported[from], (void *)(uintptr_t)fd,
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            close(fd);
            CU_TRY(r, "cuMemImportFromShareableHandle");
            CU_TRY(ccl__cu.MemAddressReserve(&g->mapped[from], g->heap_size, gran, 0, 0), "cuMemAddressReserve (peer)");
            CU_TRY(ccl__cu.MemMap(g->mapped[from], g->heap_size, 0, g->imported[from], 0), "cuMemMap (peer heap)");
            CU_TRY(ccl__cu.MemSetAccess(g->mapped[from], g->heap_size, &acc, 1), "cuMemSetAccess (peer heap)");
            comm->heap_base[from] = (char *)(uintptr_t)g->mapped[from];
        }
        close(ls);
        ls = -1;
        close(own_fd);
        own_fd = -1;
    }

    CU_TRY(ccl__cu.MemAlloc(&g->peers, sizeof(uint64_t) * (size_t)n), "cuMemAlloc (peer table)");
    CU_TRY(ccl__cu.MemcpyAsync(g->peers, (CUdeviceptr)(uintptr_t)comm->heap_base, sizeof(uint64_t) * (size_t)n,
                               g->quiet), "cuMemcpyAsync (peer table)");
    CU_TRY(ccl__cu.MemAlloc(&g->bar_gen, 8), "cuMemAlloc");
    CU_TRY(ccl__cu.MemsetD8Async(g->bar_gen, 0, 8, g->quiet), "cuMemsetD8Async");
    /* Kernels on the user's (possibly non-blocking) stream must see both. */
    CU_TRY(ccl__cu.StreamSynchronize(g->quiet), "cuStreamSynchronize (peer table)");
    /* Nobody may touch a peer's heap before every rank has mapped and zeroed its own. */
    if (boot->barrier(boot->ctx) != 0) {
        ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap barrier failed after heap exchange", me);
        goto fail;
    }
    free(info);
    return CCL_OK;

fail:
    if (ls >= 0) close(ls);
    if (own_fd >= 0) close(own_fd);
    free(info);
    ccl__gpu_heap_destroy(comm, g);
    return CCL_ERR_CUDA;
}

/* Ranks sharing the GPU may still run kernels on this heap (their waits end by timeout
 * at worst): gpu/device.c parks the releases until the GPU's last comm goes. */
void ccl__gpu_heap_destroy(ccl_comm_t *comm, GpuComm *g)
{
    for (int p = 0; g->mapped && p < comm->nranks; p++)
        ccl__gpu_unmap(g->device, g->mapped[p], g->heap_size, g->imported[p]);
    free(g->mapped);
    free(g->imported);
    g->mapped = NULL;
    g->imported = NULL;
    ccl__gpu_free_device_mem(g->device, g->peers);
    ccl__gpu_free_device_mem(g->device, g->bar_gen);
    ccl__gpu_unmap(g->device, g->own_va, g->heap_size, g->own);
    g->peers = g->bar_gen = g->own_va = 0;
    g->own = 0;
}
