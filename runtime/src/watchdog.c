/* watchdog.c: a thread per communicator that finds peers whose process died, on every
 * backend (internal.h, "watchdog.c").
 *
 * Where ranks are processes, a peer can die without a word (kill -9, a crash, _exit).
 * The CPU backend's waits look at the peers' pids while they wait (cpu/waits.c), but a
 * rank that is not waiting never hears of it, and GPU kernels cannot look at all: a
 * kernel waiting on a dead peer would wait out the timeout (10 minutes by default). So
 * every such comm has a thread that looks every CCL__PROBE_MS, the same look the CPU
 * waits take (ccl__first_dead, through ccl__mbox_dead_peer: the pids every rank gave
 * the comm's mailboxes). On a death, unless the comm has already failed (its pending
 * asynchronous error, its sticky failure, or what the backend has seen: poll), it sets
 * the comm's asynchronous error, naming the rank, its pid and the host, and stops every
 * rank on the dead one's behalf (CclBackend.peer_gone, else abort): the abort word at
 * offset 0 of every heap, which CPU waits and GPU kernels both watch, so they give up
 * within milliseconds. Then it ends: one failure stops the comm for good.
 *
 * A peer that left on purpose is no failure: ccl_comm_destroy marks the rank's mailbox
 * (ccl__mbox_leave), and so does this file when the process exits with status 0 while it
 * still has comms (an on_exit handler); the process of a rank that finished and went is
 * then gone without its peers failing. A process that exits with another status, or
 * through _exit or a signal, is dead to its peers. (A peer that left on purpose while a
 * rank still waits for it is found by the CPU waits' own look, and on GPUs by the
 * timeout.)
 *
 * Lifetime: started at the end of the comm's creation; ccl_comm_abort tells it to end,
 * ccl_comm_destroy ends it and joins it before it frees anything. It waits on a
 * condition variable with a deadline, never a sleep, so ending it is immediate. Forks:
 * a child has none of its parent's threads; pthread_atfork empties the process's list
 * of watchdogs in the child, and a child that destroys an inherited comm only forgets
 * its watchdog (ccl__watchdog_stop checks the pid) and never marks the rank's mailbox
 * (ccl__mbox_leave checks it too). */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

struct CclWatchdog {
    ccl_comm_t *comm;
    pid_t pid;                       /* the process whose thread it is */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;               /* on CLOCK_MONOTONIC */
    int stop;                        /* under mu: end now */
    CclWatchdog *next;               /* the process's list (under list_mu) */
};

/* Every watchdog of this process, for the exit handler. */
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static CclWatchdog *list;
/* Set by the exit handler: the process is going, nothing more is reported. */
static _Atomic int exiting;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* ---- the process: exit and fork ---- */

/* Status 0: every comm this process still has was left on purpose (a rank that
 * finished and exits without destroying its comms is common). Any other status leaves
 * the mailboxes alone: a rank that exits failing is dead to its peers. The list's lock
 * is tried, not waited for: a thread may have been stopped holding it by the exit. */
static void on_process_exit(int status, void *arg)
{
    (void)arg;
    atomic_store(&exiting, 1);
    int locked = -1;
    for (int i = 0; i < 100 && (locked = pthread_mutex_trylock(&list_mu)) != 0; i++)
        usleep(1000);
    if (locked != 0)
        return;
    for (CclWatchdog *w = list; status == 0 && w; w = w->next)
        ccl__mbox_leave(w->comm->mbox);
    pthread_mutex_unlock(&list_mu);
}

#ifndef __GLIBC__
static void at_process_exit(void)
{
    on_process_exit(0, NULL); /* no on_exit: the status is not known */
}
#endif

static void before_fork(void)
{
    pthread_mutex_lock(&list_mu);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&list_mu);
}

/* The child is the forking thread alone: the list's watchdogs are the parent's. */
static void after_fork_child(void)
{
    list = NULL;
    pthread_mutex_unlock(&list_mu);
}

static void setup_process(void)
{
#ifdef __GLIBC__
    /* on_exit handlers, unlike atexit's, are not dropped when a library is unloaded:
     * libccl stays loaded once it has one (RTLD_NODELETE on itself; a static link
     * finds the program, which stays anyway). */
    Dl_info self;
    if (dladdr((void *)on_process_exit, &self) && self.dli_fname)
        dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    on_exit(on_process_exit, NULL);
#else
    atexit(at_process_exit);
#endif
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* ---- the thread ---- */

/* Rank `dead` (pid) is gone: the comm's error and the stop, unless it failed already. */
static void report(ccl_comm_t *comm, int dead, int64_t pid)
{
    pthread_mutex_lock(&comm->async_lock);
    ccl_result_t earlier = comm->async_result != CCL_OK ? comm->async_result : comm->failed;
    if (earlier == CCL_OK && comm->be->poll)
        earlier = comm->be->poll(comm);
    pthread_mutex_unlock(&comm->async_lock);
    if (earlier != CCL_OK)
        return; /* stopped already (perhaps by `dead` itself, before it went): that error says why */
    char host[256];
    ccl__set_async_error(comm, CCL_ERR_PEER_FAILED,
                         "rank %d: peer rank %d (pid %lld) is gone from host %s (killed, crashed, or exited without "
                         "ccl_comm_destroy): the communicator is stopped on every rank; destroy it", comm->rank, dead,
                         (long long)pid, ccl__host_name(host, sizeof host));
    if (comm->be->peer_gone)
        comm->be->peer_gone(comm, dead);
    else
        comm->be->abort(comm);
}

static void *watch(void *arg)
{
    CclWatchdog *w = arg;
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        at.tv_nsec += (long)CCL__PROBE_MS * 1000000L;
        at.tv_sec += at.tv_nsec / 1000000000L;
        at.tv_nsec %= 1000000000L;
        while (!w->stop && pthread_cond_timedwait(&w->cv, &w->mu, &at) != ETIMEDOUT)
            ;
        if (w->stop || atomic_load(&exiting))
            break;
        pthread_mutex_unlock(&w->mu);
        int64_t pid = 0;
        int dead = ccl__mbox_dead_peer(w->comm->mbox, &pid);
        if (dead >= 0 && !atomic_load(&exiting))
            report(w->comm, dead, pid);
        pthread_mutex_lock(&w->mu);
        if (dead >= 0)
            break;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- start and stop ---- */

void ccl__watchdog_start(ccl_comm_t *comm)
{
    comm->watchdog = NULL;
    if (!comm->mbox || !ccl__mbox_has_processes(comm->mbox))
        return;
    pthread_once(&once, setup_process);
    CclWatchdog *w = calloc(1, sizeof *w);
    pthread_condattr_t ca;
    if (!w || pthread_condattr_init(&ca) != 0) {
        free(w);
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, comm->rank, "no watchdog for dead peers (out of memory): only the "
                 "waits' timeout finds them");
        return;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&w->mu, NULL);
    w->comm = comm;
    w->pid = getpid();
    int rc = ccl__thread_start(&w->thread, watch, w);
    if (rc != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, comm->rank, "no watchdog for dead peers (pthread_create: error %d): "
                 "only the waits' timeout finds them", rc);
        return;
    }
    pthread_mutex_lock(&list_mu);
    w->next = list;
    list = w;
    pthread_mutex_unlock(&list_mu);
    comm->watchdog = w;
}

static void halt(CclWatchdog *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void ccl__watchdog_halt(ccl_comm_t *comm)
{
    CclWatchdog *w = comm->watchdog;
    if (w && w->pid == getpid())
        halt(w);
}

void ccl__watchdog_stop(ccl_comm_t *comm)
{
    CclWatchdog *w = comm->watchdog;
    if (!w)
        return;
    comm->watchdog = NULL;
    if (w->pid != getpid()) {
        /* A forked child: no thread to join, and the parent's thread may have held mu
         * at the fork, so mu is not touched (nor destroyed). */
        free(w);
        return;
    }
    pthread_mutex_lock(&list_mu);
    for (CclWatchdog **p = &list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&list_mu);
    halt(w);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
