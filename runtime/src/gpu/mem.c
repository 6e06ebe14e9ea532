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
 * Each heap's reservation is longer than the heap: win_bytes more (the same on every
 * rank), the window where registered memory is mapped (gpu/window.c), so that it lies
 * at heap offsets past the heap's end (comm->win_off) in every process's view.
 *
 * The socket rendezvous: every rank listens on an abstract Unix socket named after a
 * nonce all ranks agree on (rank 0's, via the bootstrap all-gather), a tag (0 for the
 * heaps, one per registration after) and its rank; after
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
    uint64_t win;                    /* the window this rank would take (the largest wins) */
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

static socklen_t gpu_sock_addr(struct sockaddr_un *a, uint64_t nonce, uint32_t tag, int rank)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    /* Abstract namespace (leading NUL): nothing to clean up in the file system. */
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ccl-heap-%016llx-%u-%d", (unsigned long long)nonce,
                     tag, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int ccl__gpu_fd_listen(uint64_t nonce, uint32_t tag, int rank, int backlog)
{
    struct sockaddr_un a;
    socklen_t len = gpu_sock_addr(&a, nonce, tag, rank);
    int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (ls >= 0 && (bind(ls, (struct sockaddr *)&a, len) != 0 || listen(ls, backlog) != 0)) {
        close(ls);
        ls = -1;
    }
    return ls;
}

/* The control buffer of a message of up to CCL__GPU_MAX_FDS descriptors. */
typedef union {
    char buf[CMSG_SPACE(sizeof(int) * CCL__GPU_MAX_FDS)];
    struct cmsghdr align;
} GpuFdCtl;

int ccl__gpu_fd_send(uint64_t nonce, uint32_t tag, int to, const void *head, size_t hlen, const int *fds, int nfds)
{
    if (nfds < 0 || nfds > CCL__GPU_MAX_FDS) return -1;
    struct sockaddr_un a;
    socklen_t len = gpu_sock_addr(&a, nonce, tag, to);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    if (connect(s, (struct sockaddr *)&a, len) != 0) {
        close(s);
        return -1;
    }
    struct iovec iov = {.iov_base = (void *)head, .iov_len = hlen};
    GpuFdCtl ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        msg.msg_control = ctl.buf;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t w = sendmsg(s, &msg, MSG_NOSIGNAL);
    close(s);
    return w == (ssize_t)hlen ? 0 : -1;
}

int ccl__gpu_fd_recv(int ls, int timeout_ms, void *head, size_t hlen, int *fds, int maxfds, int *nfds)
{
    *nfds = 0;
    struct pollfd p = {.fd = ls, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1) return -1;
    int s = accept(ls, NULL, NULL);
    if (s < 0) return -1;
    struct iovec iov = {.iov_base = head, .iov_len = hlen};
    GpuFdCtl ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct pollfd q = {.fd = s, .events = POLLIN};
    ssize_t r = poll(&q, 1, timeout_ms) == 1 ? recvmsg(s, &msg, MSG_CMSG_CLOEXEC) : -1;
    close(s);
    if (r < 0) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof fd);
            if (*nfds < maxfds) fds[(*nfds)++] = fd;
            else close(fd);
        }
    }
    return (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) ? -1 : 0;
}

/* The window's size for a GPU: CCL_WINDOW_BYTES (SIZE_MAX when it is no size), else
 * twice the GPU's memory rounded up to 4 GiB: room for every byte of it registered,
 * with the slack of placing ranges of several ranks that differ. Address space only. */
size_t ccl__gpu_window_bytes(CUdevice dev)
{
    const char *env = getenv("CCL_WINDOW_BYTES");
    uint64_t v = 0;
    if (env && *env)
        return ccl__parse_size(env, &v) == 0 && v <= CCL__HEAP_MAX ? (size_t)v : SIZE_MAX;
    size_t total = 0, four = (size_t)4 << 30;
    if (ccl__cu.DeviceTotalMem(&total, dev) != CUDA_SUCCESS || total == 0) total = (size_t)80 << 30;
    return (2 * total + four - 1) / four * four;
}

ccl_result_t ccl__gpu_heap_create(ccl_comm_t *comm, GpuComm *g, const ccl_bootstrap_t *boot)
{
    int n = comm->nranks, me = comm->rank;
    GpuPeerInfo *info = calloc((size_t)n, sizeof *info);
    g->imported = calloc((size_t)n, sizeof *g->imported);
    g->mapped = calloc((size_t)n, sizeof *g->mapped);
    g->pids = calloc((size_t)n, sizeof *g->pids);
    g->proc_devs = calloc((size_t)n, sizeof *g->proc_devs);
    int ls = -1, own_fd = -1;
    if (!info || !g->imported || !g->mapped || !g->pids || !g->proc_devs) {
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
    size_t win = ccl__gpu_window_bytes(g->dev);
    if (win == SIZE_MAX) {
        ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "rank %d: CCL_WINDOW_BYTES=%s is not a size of at most 64 TiB "
                       "(digits, then K, M, G or T)", me, getenv("CCL_WINDOW_BYTES"));
        goto fail;
    }
    win = win / gran * gran;
    CU_TRY(ccl__cu.MemCreate(&g->own, g->heap_size, &prop, 0), "cuMemCreate (the symmetric heap)");
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = comm->device},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    GpuPeerInfo mine = {.pid = getpid(), .device = comm->device, .size = g->heap_size, .win = win,
                        .nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)};
    /* First every rank's window (the largest: one size everywhere), then the reservations. */
    if (boot->allgather(boot->ctx, &mine, info, sizeof mine) != 0) {
        ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap all-gather failed during heap exchange", me);
        goto fail;
    }
    for (int p = 0; p < n; p++)
        win = info[p].win > win ? (size_t)info[p].win : win;
    g->win_bytes = win;
    CU_TRY(ccl__cu.MemAddressReserve(&g->own_va, g->heap_size + g->win_bytes, gran, 0, 0),
           "cuMemAddressReserve (the heap and its window of registered memory; CCL_WINDOW_BYTES=0 reserves none)");
    CU_TRY(ccl__cu.MemMap(g->own_va, g->heap_size, 0, g->own, 0), "cuMemMap");
    CU_TRY(ccl__cu.MemSetAccess(g->own_va, g->heap_size, &acc, 1), "cuMemSetAccess (own GPU)");
    /* The heap must be zero before any peer may signal into it (the bootstrap barrier
     * below), not merely queued to be. */
    CU_TRY(ccl__cu.MemsetD8Async(g->own_va, 0, g->heap_size, g->quiet), "cuMemsetD8Async (zeroing the heap)");
    CU_TRY(ccl__cu.StreamSynchronize(g->quiet), "cuStreamSynchronize (heap zeroed)");
    mine.va = g->own_va;
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
    for (int p = 0; p < n; p++) {
        g->pids[p] = info[p].pid;
        int dup = 0;
        for (int k = 0; k < g->nproc_devs; k++) dup |= g->proc_devs[k] == (int)info[p].device;
        if (info[p].pid == mine.pid && !dup) g->proc_devs[g->nproc_devs++] = (int)info[p].device;
    }
    g->remote = remote > 0;
    g->nonce = info[0].nonce;
    comm->win_off = g->heap_size;
    comm->win_bytes = g->win_bytes;

    /* Other processes: FDs over Unix sockets. */
    if (remote) {
        uint64_t nonce = info[0].nonce;
        CU_TRY(ccl__cu.MemExportToShareableHandle(&own_fd, g->own, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle (POSIX FD)");
        if ((ls = ccl__gpu_fd_listen(nonce, 0, me, n + 8)) < 0) {
            ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot listen on a Unix socket for the heap exchange: %s", me,
                           strerror(errno));
            goto fail;
        }
        if (boot->barrier(boot->ctx) != 0) {
            ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: bootstrap barrier failed during heap exchange", me);
            goto fail;
        }
        int32_t from_me = me;
        for (int p = 0; p < n; p++)
            if (info[p].pid != mine.pid && ccl__gpu_fd_send(nonce, 0, p, &from_me, sizeof from_me, &own_fd, 1) != 0) {
                ccl__set_error(comm, CCL_ERR_SYSTEM, "rank %d: cannot send the heap's FD to rank %d: %s", me, p,
                               strerror(errno));
                goto fail;
            }
        for (int k = 0; k < remote; k++) {
            int32_t from = -1;
            int fd = -1, nfd = 0;
            int got = ccl__gpu_fd_recv(ls, comm->timeout_ms, &from, sizeof from, &fd, 1, &nfd);
            if (got != 0 || nfd != 1 || from < 0 || from >= n || g->imported[from]) {
                ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank %d: did not receive every peer's heap FD within %d ms "
                               "(%d of %d)", me, comm->timeout_ms, k, remote);
                if (fd >= 0) close(fd);
                goto fail;
            }
            CUresult r = ccl__cu.MemImportFromShareableHandle(&g->imported[from], (void *)(uintptr_t)fd,
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            close(fd);
            CU_TRY(r, "cuMemImportFromShareableHandle");
            CU_TRY(ccl__cu.MemAddressReserve(&g->mapped[from], g->heap_size + g->win_bytes, gran, 0, 0),
                   "cuMemAddressReserve (peer heap and window)");
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
        ccl__gpu_unmap(g->device, g->mapped[p], g->heap_size, g->heap_size + g->win_bytes, g->imported[p]);
    free(g->mapped);
    free(g->imported);
    free(g->pids);
    free(g->proc_devs);
    g->mapped = NULL;
    g->imported = NULL;
    g->pids = NULL;
    g->proc_devs = NULL;
    ccl__gpu_free_device_mem(g->device, g->peers);
    ccl__gpu_free_device_mem(g->device, g->bar_gen);
    ccl__gpu_unmap(g->device, g->own_va, g->heap_size, g->heap_size + g->win_bytes, g->own);
    g->peers = g->bar_gen = g->own_va = 0;
    g->own = 0;
}
