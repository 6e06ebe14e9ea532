/* cpu/heaps.c: the CPU backend's symmetric heaps.
 *
 * Ranks in one process (all pids equal) get anonymous mappings shared through a
 * refcounted LocalWorld, unmapped when the last rank is destroyed (a peer's thread may
 * still read a destroyed rank's heap); ranks in several processes each send the name
 * of the POSIX shm segment they are about to create through the bootstrap, create it,
 * map every peer's, and once the init is decided every rank unlinks every name (the
 * kernel frees a segment when the last process unmaps it, even after a crash; a rank
 * that dies during the init has its name unlinked by its peers). On a comm of several
 * nodes (docs/multinode.md) a rank maps only the heaps of its own node's ranks: those of
 * other nodes stay NULL in heap_base, and what crosses nodes goes through cpu/net.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cpu/heaps.h"

/* The heaps of the ranks of one process, unmapped with the world when the last comm
 * drops it (ccl__share_drop): a peer's thread may still read a destroyed rank's heap. */
struct LocalWorld {
    int nranks;
    size_t heap_bytes;
    _Atomic(char *) *bases;          /* each rank's, set by that rank once it joined */
};

static void world_release(void *obj)
{
    LocalWorld *w = obj;
    for (int p = 0; p < w->nranks; p++)
        if (w->bases[p])
            munmap(w->bases[p], w->heap_bytes);
    free(w->bases);
    free(w);
}

/* What a rank says in the bootstrap exchanges of ccl__cpu_heaps_create. */
typedef struct {
    int64_t pid;
    uint64_t heap_bytes;
    uint64_t shm_cap;           /* default heaps in processes: what /dev/shm holds per rank */
    int32_t ok, heap_default;
    int32_t local;              /* ranks per node (ccl_comm.local) */
    uint64_t ptr, world;
    char name[64];
} Hello;

static void *map_anonymous(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static ccl_result_t boot_fail(ccl_comm_t *comm, const char *step)
{
    return ccl__set_error(comm, CCL_ERR_PEER_FAILED, "bootstrap failed during %s (a peer gave up or the bootstrap's allgather failed)", step);
}

/* One process: rank 0 makes the world and shares it by token (ccl__share_put); every
 * rank that finds it takes a reference and registers its heap there, so the heaps live
 * as long as any comm of the init, and a rank that gave up or saw damaged data never
 * follows a pointer it cannot trust. A heap a peer may already use (this rank's view
 * was damaged, the peer's perhaps not) stays mapped: a leak of address space after a
 * failed init, never a fault in a peer. */
static ccl_result_t init_local(ccl_comm_t *comm, CpuHeaps *h, const ccl_bootstrap_t *boot, Hello *all)
{
    int n = comm->nranks;
    Hello me = {0};
    char *heap = map_anonymous(comm->heap_bytes);
    uint64_t token = 0;
    if (comm->rank == 0) {
        LocalWorld *w = calloc(1, sizeof *w);
        if (w && !(w->bases = calloc((size_t)n, sizeof *w->bases))) {
            free(w);
            w = NULL;
        }
        if (w) {
            w->nranks = n;
            w->heap_bytes = comm->heap_bytes;
            if (!(token = ccl__share_put(w, world_release)))
                free(w->bases), free(w);
        }
    }
    me.ok = heap && (comm->rank != 0 || token);
    me.ptr = (uint64_t)(uintptr_t)heap;
    me.world = token;
    int got = boot->allgather(boot->ctx, &me, all, sizeof me) == 0;
    int bad = -1;
    for (int p = 0; got && p < n && bad < 0; p++)
        if (!all[p].ok || !all[p].ptr || (p == 0) != (all[p].world != 0))
            bad = p;
    LocalWorld *w = got && bad < 0 ? ccl__share_get(all[0].world) : NULL;
    if (comm->rank == 0)
        ccl__share_drop(token); /* rank 0's hold for the exchange; its get above holds on */
    if (!w) {
        if (heap && !ccl__boot_damaged(boot))
            munmap(heap, comm->heap_bytes);
        if (!got)
            return boot_fail(comm, "the heap exchange");
        if (bad >= 0)
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "rank %d could not map its %zu-byte heap", bad,
                                  comm->heap_bytes);
        return ccl__set_error(comm, CCL_ERR_PEER_FAILED, "rank 0 gave up the heaps before this rank joined them");
    }
    atomic_store(&w->bases[comm->rank], heap);
    h->world = w;
    h->world_token = all[0].world;
    for (int p = 0; p < n; p++)
        comm->heap_base[p] = (char *)(uintptr_t)all[p].ptr;
    return CCL_OK;
}

static void unmap_peers(ccl_comm_t *comm)
{
    for (int p = 0; p < comm->nranks; p++)
        if (comm->heap_base[p]) {
            munmap(comm->heap_base[p], comm->heap_bytes);
            comm->heap_base[p] = NULL;
        }
}

/* Every rank's segment name from the first exchange, unlinked: each rank does it once
 * the init is decided, either way, so that a rank that died after it made its segment
 * leaves nothing in /dev/shm (its peers unlink it for it). Names were checked (names_ok). */
static void unlink_all(int n, const Hello *first)
{
    for (int p = 0; p < n; p++)
        shm_unlink(first[p].name);
}

/* A peer's heap is opened (and unlinked) by the name it sent: only a name such a rank
 * makes (its pid and rank in it), never another job's or a path elsewhere. -1 with why. */
static int names_ok(int n, const Hello *first, char *why, size_t len)
{
    for (int p = 0; p < n; p++) {
        char want[64];
        snprintf(want, sizeof want, "/ccl-heap-%lld-%d-", (long long)first[p].pid, p);
        if (!memchr(first[p].name, 0, sizeof first[p].name) || strncmp(first[p].name, want, strlen(want)) != 0 ||
            strchr(first[p].name + 1, '/')) {
            snprintf(why, len, "argument 'bootstrap': rank %d's heap name from the exchange, '%.*s', is not one rank "
                     "%d (pid %lld) makes ('%s...'): not opened", p, (int)strnlen(first[p].name, sizeof first[p].name),
                     first[p].name, p, (long long)first[p].pid, want);
            return -1;
        }
    }
    return 0;
}

/* Opens and maps rank p's segment; 0, or -1 with why. */
static int map_peer(ccl_comm_t *comm, int p, const char *name, char *why, size_t len)
{
    int pfd = shm_open(name, O_RDWR, 0);
    struct stat st;
    if (pfd < 0) {
        snprintf(why, len, "cannot open rank %d's heap %s: %s (the CPU backend needs every rank on one host)", p, name,
                 strerror(errno));
    } else if (fstat(pfd, &st) != 0) {
        snprintf(why, len, "cannot inspect rank %d's heap %s: %s", p, name, strerror(errno));
    } else if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        snprintf(why, len, "rank %d's heap /dev/shm%s belongs to uid %u with mode %03o, not to this user (uid %u) with "
                 "mode 600: not used", p, name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                 (unsigned)geteuid());
    } else if ((size_t)st.st_size != comm->heap_bytes) {
        snprintf(why, len, "rank %d's heap %s has %lld bytes, not the %zu every rank agreed on", p, name,
                 (long long)st.st_size, comm->heap_bytes);
    } else {
        void *m = mmap(NULL, comm->heap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pfd, 0);
        if (m == MAP_FAILED)
            snprintf(why, len, "mmap of rank %d's heap %s: %s", p, name, strerror(errno));
        else
            comm->heap_base[p] = m;
    }
    if (pfd >= 0)
        close(pfd);
    return comm->heap_base[p] ? 0 : -1;
}

/* Processes: every rank makes its segment under the name it sent in the first exchange
 * (`first`), says whether that worked (second exchange), maps every peer's, and the
 * ranks agree on the outcome (third); then every rank unlinks every name, so the
 * segments live on only in the mappings and vanish with the last process that maps
 * them. A rank that dies inside this leaves no name behind as long as one peer lives to
 * decide the init (it unlinks the dead rank's name with the others). */
static ccl_result_t init_shm(ccl_comm_t *comm, const ccl_bootstrap_t *boot, const Hello *first)
{
    int n = comm->nranks, me_rank = comm->rank;
    const char *name = first[me_rank].name;
    char why[320] = "";
    if (names_ok(n, first, why, sizeof why) != 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s", why);
    Hello *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        snprintf(why, sizeof why, "shm_open(%s): %s", name, strerror(errno));
    else if (ftruncate(fd, (off_t)comm->heap_bytes) != 0)
        snprintf(why, sizeof why, "ftruncate(%s, %zu): %s", name, comm->heap_bytes, strerror(errno));
    else {
        void *p = mmap(NULL, comm->heap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (p == MAP_FAILED)
            snprintf(why, sizeof why, "mmap(%s): %s", name, strerror(errno));
        else
            comm->heap_base[me_rank] = p;
    }
    if (fd >= 0)
        close(fd);
    Hello me = {.ok = comm->heap_base[me_rank] != NULL};
    int bad = -1;
    if (boot->allgather(boot->ctx, &me, all, sizeof me) != 0) {
        /* Damaged data seen here only: the peers go on to the agreement below, so this
         * rank takes part in it, saying no, rather than leave them waiting. */
        if (!ccl__boot_damaged(boot)) {
            unmap_peers(comm);
            unlink_all(n, first);
            free(all);
            return boot_fail(comm, "the heap exchange");
        }
        bad = me_rank;
        snprintf(why, sizeof why, "the heap exchange came back damaged");
    }
    for (int p = 0; p < n && bad < 0; p++)
        if (!all[p].ok)
            bad = p;
    for (int p = 0; p < n && bad < 0 && !why[0]; p++)
        if (p != me_rank && p / comm->local == me_rank / comm->local && map_peer(comm, p, first[p].name, why, sizeof why) != 0)
            break;
    Hello agree = {.ok = why[0] == 0 && bad < 0 && !ccl__boot_damaged(boot)};
    int boot_ok = boot->allgather(boot->ctx, &agree, all, sizeof agree) == 0;
    int all_ok = boot_ok;
    for (int p = 0; p < n && all_ok; p++)
        if (!all[p].ok) {
            all_ok = 0;
            if (!why[0])
                snprintf(why, sizeof why, "rank %d could not create or map the heaps", bad >= 0 ? bad : p);
        }
    free(all);
    unlink_all(n, first);
    if (!all_ok) {
        unmap_peers(comm);
        if (!boot_ok)
            return boot_fail(comm, "the heap agreement");
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "%s", why);
    }
    return CCL_OK;
}

/* Bytes of heap each of n processes may have in /dev/shm: its free space split n + 1
 * ways (a margin for everything else there), in whole MiB; SIZE_MAX if unknown. */
static uint64_t shm_cap(int n)
{
    struct statvfs st;
    if (statvfs("/dev/shm", &st) != 0)
        return UINT64_MAX;
    uint64_t avail = (uint64_t)st.f_bavail * (uint64_t)st.f_frsize;
    return avail / (uint64_t)(n + 1) / (1u << 20) * (1u << 20);
}

ccl_result_t ccl__cpu_heaps_create(ccl_comm_t *comm, const ccl_bootstrap_t *boot, CpuHeaps *h)
{
    int n = comm->nranks;
    Hello *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    static _Atomic unsigned counter;
    Hello me = {.pid = getpid(), .heap_bytes = comm->heap_bytes, .heap_default = comm->heap_default,
                .shm_cap = shm_cap(n), .local = comm->local};
    /* The segment's name (processes only) travels now, before it exists: a peer then
     * knows it even if this rank dies right after making it (init_shm). */
    snprintf(me.name, sizeof me.name, "/ccl-heap-%ld-%d-%u", (long)getpid(), comm->rank, atomic_fetch_add(&counter, 1));
    if (boot->allgather(boot->ctx, &me, all, sizeof me) != 0) {
        free(all);
        return boot_fail(comm, "the first exchange");
    }
    int local = 1, all_default = 1;
    for (int p = 0; p < n; p++) {
        local &= all[p].pid == all[0].pid;
        all_default &= all[p].heap_default;
        if (all[p].pid <= 0 || (p == comm->rank && all[p].pid != me.pid)) {
            ccl_result_t r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                            "argument 'bootstrap': its allgather says rank %d has pid %lld (this "
                                            "process is %lld): the exchange's data is wrong", p,
                                            (long long)all[p].pid, (long long)me.pid);
            free(all);
            return r;
        }
    }
    /* Processes share /dev/shm: a default heap shrinks to what it holds (touching a
     * page past that would fault), every rank taking the smallest. */
    if (!local && all_default) {
        size_t heap = comm->heap_bytes;
        for (int p = 0; p < n; p++)
            if (all[p].shm_cap < heap)
                heap = all[p].shm_cap;
        if (heap < 2 * (size_t)CCL__HEAP_DATA) {
            free(all);
            return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                                  "/dev/shm has room for only %zu bytes of heap per rank (at least %zu needed); "
                                  "enlarge it or set CCL_HEAP_BYTES", heap, 2 * (size_t)CCL__HEAP_DATA);
        }
        comm->heap_bytes = heap;
        for (int p = 0; p < n; p++)
            all[p].heap_bytes = heap;
    }
    for (int p = 0; p < n; p++) {
        if (all[p].local != comm->local) {
            ccl_result_t r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                            "the ranks disagree on the ranks per node: rank %d has %d, rank %d %d "
                                            "(CCL_RANKS_PER_NODE or ranks_per_node must be equal everywhere)",
                                            comm->rank, comm->local, p, (int)all[p].local);
            free(all);
            return r;
        }
        if (local && comm->nnodes > 1) {
            free(all);
            return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%d nodes in one process: a communicator of several "
                                  "nodes needs one process per rank (mpirun)", comm->nnodes);
        }
        if (all[p].heap_bytes != comm->heap_bytes) {
            ccl_result_t r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                            "the ranks disagree on the heap size: rank 0 asks for %llu bytes, rank %d for %llu "
                                            "(ccl_config_t.heap_bytes / CCL_HEAP_BYTES must be equal everywhere)",
                                            (unsigned long long)all[0].heap_bytes, p, (unsigned long long)all[p].heap_bytes);
            free(all);
            return r;
        }
    }
    if (!local && !(h->pids = malloc(sizeof *h->pids * (size_t)n))) {
        free(all);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    /* Only a peer of this node has a process this rank can look at (a pid on another
     * host means nothing here): 0, never looked at. */
    for (int p = 0; !local && p < n; p++)
        h->pids[p] = p / comm->local == comm->rank / comm->local ? all[p].pid : 0;
    ccl_result_t r = local ? init_local(comm, h, boot, all) : init_shm(comm, boot, all);
    free(all);
    if (r != CCL_OK) {
        free(h->pids);
        h->pids = NULL;
    } else if (!local) {
        h->shm = 1;
    }
    return r;
}

void ccl__cpu_heaps_destroy(ccl_comm_t *comm, CpuHeaps *h)
{
    if (h->world) {
        ccl__share_drop(h->world_token);
        h->world = NULL;
    } else {
        unmap_peers(comm);
    }
    free(h->pids);
    h->pids = NULL;
}
