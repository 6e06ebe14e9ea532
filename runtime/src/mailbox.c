/* mailbox.c: a bootstrap every communicator keeps for its life (ccl_comm_split).
 *
 * The user's bootstrap is valid only during ccl_comm_init_rank, but splitting a
 * communicator is collective again and its children need a bootstrap of their own. So
 * every comm makes, at its creation, one host mailbox per rank that every rank maps:
 * in one process a block of N mailboxes shared by the ranks' threads (freed by the
 * last to leave); across processes one POSIX shm segment per rank, named in the first
 * exchange before it exists and unlinked by every rank once all have mapped it (as the
 * CPU heaps are). Every rank of a comm is on one host, whatever the backend (the CPU
 * backend's heaps, the GPU backend's IPC, both need it).
 *
 * Over the mailboxes, a bootstrap among any subset of the comm's ranks (the members of
 * one color of a split): an allgather writes this rank's bytes into its mailbox, posts
 * (epoch, exchange) in its `posted` word (release), waits for every member's word,
 * copies their bytes, then posts the same pair in `done` and waits for every member's
 * `done` before returning, so that nobody overwrites a mailbox a member still reads.
 * The epoch is the comm's split count, the same on every rank, so subsets that ran
 * different numbers of exchanges in an earlier split never confuse a later one. Waits
 * are bounded by the comm's timeout, watch the members' pids (a dead one fails the wait
 * at once), and a member that gave up says so in its `failed` word.
 *
 * A communicator of several nodes has mailboxes too, but only its node's ranks map each
 * other's (no memory spans the nodes): box[p] is NULL for a rank of another node, and the
 * bootstrap reaches such a member through the backend's inter-node transport instead
 * (CclBackend.boot_send and boot_take: a message per exchange, kept by the receiving
 * proxy until taken, so no `done` round is needed with it). Its mailboxes serve
 * ccl_comm_split only: the watchdog and registration do not use them.
 *
 * The mailboxes also say, for the watchdog (watchdog.c), which process every rank is and
 * whether it left the communicator on purpose (its `left` word), so that a process that
 * goes away after ccl_comm_destroy or exit() is not taken for a dead peer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

enum { MBOX_SLOT = 4096 };

typedef struct {
    _Atomic uint64_t posted, done;   /* (epoch << 32 | exchange) of the last write, read */
    _Atomic uint64_t failed;         /* an epoch this rank gave up in (0: none) */
    _Atomic int64_t pid;
    /* Non-zero once this rank left the communicator on purpose (ccl_comm_destroy, or its
     * process exiting through exit()): its process going away later is no failure. */
    _Atomic uint64_t left;
    char pad[24];
    char data[MBOX_SLOT];
    /* Rank q's notes to this mailbox's rank (base.h, notes.c): q * CCL__NOTE_LANES + lane. */
    CclNoteSlot notes[CCL__NOTE_RANKS * CCL__NOTE_LANES];
} Mailbox;

struct CclMailboxes {
    int nranks, rank;
    ccl_comm_t *comm;                /* several nodes: whose backend reaches the other nodes */
    /* One process: the ranks' mailboxes in one block, shared by token (ccl__share_*)
     * and freed by the last comm that holds it. */
    Mailbox *block;
    uint64_t block_token;
    Mailbox **box;                   /* box[p]: rank p's, mapped here */
    int shm;                         /* box[p] are shm mappings (processes) */
    int64_t *pids;                   /* pids[p]: rank p's process, from the first exchange */
    CclNotes notes;                  /* over box[p]'s note slots (ccl__mbox_notes) */
    CclNoteSlot **inbox;
};

typedef struct {
    int64_t pid;
    uint64_t block;                  /* one process: rank 0's block */
    char name[64];                   /* processes: this rank's segment */
} MboxHello;

static void unmap_all(CclMailboxes *m)
{
    for (int p = 0; m->shm && p < m->nranks; p++)
        if (m->box[p])
            munmap(m->box[p], sizeof(Mailbox));
}

void ccl__mbox_close(CclMailboxes *m)
{
    if (!m)
        return;
    if (m->block)
        ccl__share_drop(m->block_token);
    unmap_all(m);
    free(m->box);
    free(m->pids);
    free(m->inbox);
    free(m);
}

static int open_peer(CclMailboxes *m, int p, const char *name, char *why, size_t len)
{
    int fd = shm_open(name, O_RDWR, 0);
    struct stat st;
    if (fd < 0)
        snprintf(why, len, "cannot open rank %d's mailbox %s: %s", p, name, strerror(errno));
    else if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) ||
             (size_t)st.st_size != sizeof(Mailbox))
        snprintf(why, len, "rank %d's mailbox /dev/shm%s is not this user's 600 segment of %zu bytes: not used", p,
                 name, sizeof(Mailbox));
    else {
        void *a = mmap(NULL, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (a == MAP_FAILED)
            snprintf(why, len, "mmap of rank %d's mailbox %s: %s", p, name, strerror(errno));
        else
            m->box[p] = a;
    }
    if (fd >= 0)
        close(fd);
    return m->box[p] ? 0 : -1;
}

ccl_result_t ccl__mbox_open(ccl_comm_t *comm, const ccl_bootstrap_t *boot, CclMailboxes **out)
{
    static _Atomic unsigned counter;
    int n = comm->nranks, me = comm->rank;
    *out = NULL;
    CclMailboxes *m = calloc(1, sizeof *m);
    MboxHello *all = calloc((size_t)n, sizeof *all);
    if (!m || !(m->box = calloc((size_t)n, sizeof *m->box)) || !(m->pids = calloc((size_t)n, sizeof *m->pids)) ||
        !(m->inbox = calloc((size_t)n, sizeof *m->inbox)) || !all) {
        free(all);
        ccl__mbox_close(m);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "out of memory");
    }
    m->nranks = n;
    m->rank = me;
    /* Several nodes: only the node's ranks are mapped (the others are processes of other
     * hosts, whose pids mean nothing here). */
    int nodes = comm->nnodes > 1, L = comm->local;
    m->comm = nodes ? comm : NULL;
    MboxHello hello = {.pid = getpid()};
    snprintf(hello.name, sizeof hello.name, "/ccl-box-%ld-%d-%u", (long)getpid(), me, atomic_fetch_add(&counter, 1));
    /* Rank 0 offers a block for the case that every rank is in this process, by token
     * (a damaged exchange cannot make a rank follow a made-up pointer). */
    uint64_t token = 0;
    if (me == 0) {
        Mailbox *block = calloc((size_t)n, sizeof *block);
        if (block && !(token = ccl__share_put(block, free)))
            free(block);
    }
    hello.block = token;
    int got = boot->allgather(boot->ctx, &hello, all, sizeof hello) == 0;
    int local = !nodes;
    for (int p = 0; got && p < n; p++) {
        local &= all[p].pid == all[0].pid;
        m->pids[p] = all[p].pid;
    }
    if (got && local && (m->block = ccl__share_get(all[0].block)))
        m->block_token = all[0].block;
    if (token)
        ccl__share_drop(token); /* rank 0's hold for the exchange (its get holds on) */
    if (!got) {
        free(all);
        ccl__mbox_close(m);
        return ccl__set_error(comm, CCL_ERR_PEER_FAILED, "bootstrap failed while making the mailboxes");
    }
    char why[320] = "";
    int fd = -1;
    if (local) {
        if (!m->block)
            snprintf(why, sizeof why, "rank 0's mailboxes are gone or were never made");
        for (int p = 0; p < n && m->block; p++)
            m->box[p] = &m->block[p];
    } else {
        for (int p = 0; p < n && !why[0]; p++) {
            char want[48];
            snprintf(want, sizeof want, "/ccl-box-%lld-%d-", (long long)all[p].pid, p);
            if (!memchr(all[p].name, 0, sizeof all[p].name) || strncmp(all[p].name, want, strlen(want)) ||
                strchr(all[p].name + 1, '/'))
                snprintf(why, sizeof why, "rank %d's mailbox name from the bootstrap is not one it makes", p);
        }
        if (!why[0]) {
            fd = shm_open(hello.name, O_CREAT | O_EXCL | O_RDWR, 0600);
            void *a = MAP_FAILED;
            if (fd >= 0 && ftruncate(fd, sizeof(Mailbox)) == 0)
                a = mmap(NULL, sizeof(Mailbox), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (a == MAP_FAILED)
                snprintf(why, sizeof why, "cannot make mailbox %s: %s", hello.name, strerror(errno));
            else
                m->box[me] = a;
            if (a != MAP_FAILED)
                atomic_store(&m->box[me]->pid, (int64_t)getpid());
            if (fd >= 0)
                close(fd);
            m->shm = 1;
        }
    }
    /* Made (or not) everywhere: then map the peers' and agree. */
    int32_t ok = !why[0], *oks = calloc((size_t)n, sizeof *oks);
    int boot_ok = oks && boot->allgather(boot->ctx, &ok, oks, sizeof ok) == 0;
    for (int p = 0; boot_ok && !local && p < n && !why[0]; p++)
        if (!oks[p])
            snprintf(why, sizeof why, "rank %d could not make its mailbox", p);
        else if (p != me && (!nodes || p / L == me / L) && open_peer(m, p, all[p].name, why, sizeof why) != 0)
            break;
    ok = !why[0];
    boot_ok = boot_ok && boot->allgather(boot->ctx, &ok, oks, sizeof ok) == 0;
    for (int p = 0; boot_ok && p < n && !why[0]; p++)
        if (!oks[p])
            snprintf(why, sizeof why, "rank %d could not map every mailbox", p);
    if (!local)
        for (int p = 0; p < n; p++)
            if (!nodes || p / L == me / L)
                shm_unlink(all[p].name);
    free(oks);
    free(all);
    if (!boot_ok || why[0]) {
        ccl__mbox_close(m); /* the block lives on while any rank holds it */
        return boot_ok ? ccl__set_error(comm, CCL_ERR_SYSTEM, "%s", why)
                       : ccl__set_error(comm, CCL_ERR_PEER_FAILED, "bootstrap failed while making the mailboxes");
    }
    *out = m;
    return CCL_OK;
}

/* ---- the ranks' processes, for the watchdog (watchdog.c) ---- */

int ccl__mbox_has_processes(const CclMailboxes *m)
{
    return m->shm;
}

CclNotes *ccl__mbox_notes(CclMailboxes *m)
{
    if (!m)
        return NULL;
    for (int p = 0; p < m->nranks; p++)
        m->inbox[p] = m->box[p] ? m->box[p]->notes : NULL;
    m->notes = (CclNotes){.nranks = m->nranks, .rank = m->rank, .inbox = m->inbox};
    return &m->notes;
}

int ccl__mbox_dead_peer(const CclMailboxes *m, int64_t *pid)
{
    for (int p = ccl__first_dead(m->pids, m->nranks, 0); p >= 0; p = ccl__first_dead(m->pids, m->nranks, p + 1))
        if (!atomic_load_explicit(&m->box[p]->left, memory_order_acquire)) {
            *pid = m->pids[p];
            return p;
        }
    return -1;
}

void ccl__mbox_leave(CclMailboxes *m)
{
    /* Only the rank's own process speaks for it: a forked child holding a copy of the
     * communicator is not the rank. */
    if (m && m->shm && m->pids[m->rank] == getpid())
        atomic_store_explicit(&m->box[m->rank]->left, 1, memory_order_release);
}

/* ---- a bootstrap over some of the ranks' mailboxes ---- */

/* Waits until every member's word (`posted` or `done`) reaches want. 0, or -1 with why
 * in sb->why: a member gave up, died, or the timeout passed. */
static int wait_members(CclMboxBoot *sb, int done, uint64_t want)
{
    double deadline = ccl__now_ms() + sb->timeout_ms, probe = ccl__now_ms() + CCL__PROBE_MS;
    for (int i = 0; i < sb->n; i++) {
        Mailbox *b = sb->mb->box[sb->members[i]];
        if (!b)
            continue;           /* a rank of another node: wait_remote */
        for (unsigned it = 0; atomic_load_explicit(done ? &b->done : &b->posted, memory_order_acquire) < want; it++) {
            if (atomic_load(&b->failed) == want >> 32) {
                snprintf(sb->why, sizeof sb->why, "rank %d gave up", sb->members[i]);
                return -1;
            }
            if (atomic_load_explicit(&b->left, memory_order_acquire)) {
                snprintf(sb->why, sizeof sb->why, "rank %d left the communicator (ccl_comm_destroy)", sb->members[i]);
                return -1;
            }
            if ((it & 63) == 63) {
                double now = ccl__now_ms();
                if (now > probe) {
                    int64_t pid = atomic_load(&b->pid);
                    if (pid > 0 && ccl__pid_dead((long)pid)) {
                        snprintf(sb->why, sizeof sb->why, "rank %d (pid %lld) is gone", sb->members[i], (long long)pid);
                        return -1;
                    }
                    probe = now + CCL__PROBE_MS;
                }
                if (now > deadline) {
                    snprintf(sb->why, sizeof sb->why, "rank %d did not come within %d ms", sb->members[i],
                             sb->timeout_ms);
                    return -1;
                }
            }
            ccl__backoff(it);
        }
    }
    return 0;
}

/* Exchange want's bytes from p, a rank of another node, into out: 0, or -1 with why. */
static int wait_remote(CclMboxBoot *sb, int p, uint64_t want, void *out, size_t bytes)
{
    ccl_comm_t *comm = sb->mb->comm;
    double deadline = ccl__now_ms() + sb->timeout_ms;
    char scratch[1];
    for (unsigned it = 0;; it++) {
        int rc = comm->be->boot_take(comm, p, want, out ? out : scratch, bytes, sb->why, sizeof sb->why);
        if (rc > 0)
            return 0;
        if (rc < 0)
            return -1;
        if ((it & 63) == 63 && ccl__now_ms() > deadline) {
            snprintf(sb->why, sizeof sb->why, "rank %d (node %d) did not come within %d ms", p, p / comm->local,
                     sb->timeout_ms);
            return -1;
        }
        ccl__backoff(it);
    }
}

static int mbox_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    CclMboxBoot *sb = ctx;
    if (bytes > MBOX_SLOT) {
        snprintf(sb->why, sizeof sb->why, "an allgather of %zu bytes, more than a mailbox holds (%d)", bytes,
                 MBOX_SLOT);
        ccl__mbox_boot_fail(sb);
        return -1;
    }
    Mailbox *mine = sb->mb->box[sb->mb->rank];
    uint64_t want = (uint64_t)sb->epoch << 32 | ++sb->exchanges;
    memcpy(mine->data, in, bytes);
    atomic_store_explicit(&mine->posted, want, memory_order_release);
    ccl_comm_t *comm = sb->mb->comm;
    for (int i = 0; i < sb->n; i++)
        if (!sb->mb->box[sb->members[i]] && comm->be->boot_send(comm, sb->members[i], want, 0, in, bytes) != 0) {
            snprintf(sb->why, sizeof sb->why, "rank %d cannot send its part of the exchange to rank %d (another "
                     "node): out of memory", sb->mb->rank, sb->members[i]);
            return ccl__mbox_boot_fail(sb), -1;
        }
    if (wait_members(sb, 0, want) != 0)
        return ccl__mbox_boot_fail(sb), -1;
    for (int i = 0; i < sb->n && bytes; i++)
        if (sb->mb->box[sb->members[i]])
            memcpy((char *)out + (size_t)i * bytes, sb->mb->box[sb->members[i]]->data, bytes);
    for (int i = 0; i < sb->n; i++)
        if (!sb->mb->box[sb->members[i]] &&
            wait_remote(sb, sb->members[i], want, out ? (char *)out + (size_t)i * bytes : NULL, bytes) != 0)
            return ccl__mbox_boot_fail(sb), -1;
    atomic_store_explicit(&mine->done, want, memory_order_release);
    if (wait_members(sb, 1, want) != 0)
        return ccl__mbox_boot_fail(sb), -1;
    return 0;
}

static int mbox_barrier(void *ctx)
{
    char none = 0;
    return mbox_allgather(ctx, &none, NULL, 0);
}

void ccl__mbox_boot(CclMboxBoot *sb, CclMailboxes *mb, uint32_t epoch, const int *members, int n, int me,
                    int timeout_ms, ccl_bootstrap_t *boot)
{
    *sb = (CclMboxBoot){.mb = mb, .epoch = epoch, .members = members, .n = n, .timeout_ms = timeout_ms};
    *boot = (ccl_bootstrap_t){.nranks = n, .rank = me, .allgather = mbox_allgather, .barrier = mbox_barrier,
                              .ctx = sb};
}

void ccl__mbox_boot_fail(CclMboxBoot *sb)
{
    atomic_store(&sb->mb->box[sb->mb->rank]->failed, sb->epoch);
    ccl_comm_t *comm = sb->mb->comm;
    for (int i = 0; i < sb->n; i++)
        if (!sb->mb->box[sb->members[i]])
            comm->be->boot_send(comm, sb->members[i], (uint64_t)sb->epoch << 32, 1, sb->why, strlen(sb->why) + 1);
}
