/* registry.c: which NCCL communicators are alive: the shim's, and the real library's
 * that they hold.
 *
 * Handles are checked as libccl's are: live comms are in a registry, a call holds its
 * comm (shim_comm_get) for its length, and destroy or abort take the comm out of the
 * registry first and then wait for the calls holding it, so a comm is never freed
 * under a call, and a dead or foreign pointer gets ncclInvalidArgument, not a crash.
 *
 * The real library's comms are known too, because the real library calls some of its
 * own exported functions by name (NCCL 2.28 calls ncclCommGetAsyncError before every
 * collective, ncclCommRegister inside ncclCommWindowRegister, ...; they are
 * interposable, as NVIDIA links them), and with libccl_nccl preloaded or linked first
 * those calls land in the shim with a real comm. shim_comm_get_or_real tells them
 * apart, so that such a call goes back to the real library untouched. Calls only
 * errors.c, real.c and libccl. */
#include <stdlib.h>

#include "shim.h"

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t registry;

/* Registry lookup; the caller holds registry_mu. */
static int registered(ncclComm_t comm)
{
    for (ncclComm_t c = registry; c; c = c->next)
        if (c == comm)
            return 1;
    return 0;
}

void shim_comm_register(ncclComm_t c)
{
    pthread_mutex_lock(&registry_mu);
    c->next = registry;
    registry = c;
    pthread_mutex_unlock(&registry_mu);
}

int shim_comm_hold(ncclComm_t comm)
{
    pthread_mutex_lock(&registry_mu);
    int ok = comm && registered(comm) && !comm->dying;
    if (ok)
        comm->refs++;
    pthread_mutex_unlock(&registry_mu);
    return ok;
}

ncclResult_t shim_comm_get(ncclComm_t comm, const char *fn)
{
    if (shim_comm_hold(comm))
        return ncclSuccess;
    if (!comm)
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'comm' is NULL", fn);
    return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'comm' (%p) is not a live communicator (destroyed or "
                     "aborted already, or not made by ncclCommInitRank, ncclCommInitAll or ncclCommSplit)", fn,
                     (void *)comm);
}

void shim_comm_put(ncclComm_t comm)
{
    pthread_mutex_lock(&registry_mu);
    if (--comm->refs == 0 && comm->dying)
        pthread_cond_broadcast(&comm->idle);
    pthread_mutex_unlock(&registry_mu);
}

int shim_comm_live(ncclComm_t comm)
{
    pthread_mutex_lock(&registry_mu);
    int ok = comm && registered(comm) && !comm->dying;
    pthread_mutex_unlock(&registry_mu);
    return ok;
}

/* The real library's comms, each as often as adopted: a real comm freed by one thread
 * may come back at the same address, made by another, before the first drops it. */
static ncclComm_t *reals;
static int nreals, maxreals;

void shim_real_adopt(ncclComm_t real)
{
    if (!real)
        return;
    pthread_mutex_lock(&registry_mu);
    if (nreals == maxreals) {
        int more = maxreals ? 2 * maxreals : 16;
        ncclComm_t *r = realloc(reals, sizeof *r * (size_t)more);
        if (r) {
            reals = r;
            maxreals = more;
        }
    }
    /* Out of memory, the real comm stays unknown: the real library's own calls with
     * it then fail, as they did before the shim knew its comms. */
    if (nreals < maxreals)
        reals[nreals++] = real;
    pthread_mutex_unlock(&registry_mu);
}

void shim_real_drop(ncclComm_t real)
{
    pthread_mutex_lock(&registry_mu);
    for (int i = 0; i < nreals; i++)
        if (reals[i] == real) {
            reals[i] = reals[--nreals];
            break;
        }
    pthread_mutex_unlock(&registry_mu);
}

ncclResult_t shim_comm_get_or_real(ncclComm_t comm, const char *fn, const ShimReal **pass)
{
    *pass = NULL;
    if (shim_comm_hold(comm))
        return ncclSuccess;
    pthread_mutex_lock(&registry_mu);
    int known = 0;
    for (int i = 0; comm && i < nreals && !known; i++)
        known = reals[i] == comm;
    pthread_mutex_unlock(&registry_mu);
    if (known && (*pass = shim_real_loaded()))
        return ncclSuccess;
    return shim_comm_get(comm, fn);
}

/* Takes comm out of the registry and waits until no call holds it; ncclSuccess, or
 * ncclInvalidArgument when it is not live (a second destroy). */
ncclResult_t shim_comm_retire(ncclComm_t comm, const char *fn, int abort)
{
    pthread_mutex_lock(&registry_mu);
    if (!registered(comm) || comm->dying) {
        pthread_mutex_unlock(&registry_mu);
        return shim_fail(NULL, ncclInvalidArgument, "%s: argument 'comm' (%p) is not a live communicator "
                         "(destroyed or aborted already?)", fn, (void *)comm);
    }
    comm->dying = 1;
    pthread_mutex_unlock(&registry_mu);
    /* An abort first stops what may be waiting on peers, so that the calls holding the
     * comm return. */
    if (abort && comm->ccl)
        ccl_comm_abort(comm->ccl);
    pthread_mutex_lock(&registry_mu);
    while (comm->refs > 0)
        pthread_cond_wait(&comm->idle, &registry_mu);
    for (ncclComm_t *p = &registry; *p; p = &(*p)->next)
        if (*p == comm) {
            *p = comm->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    return ncclSuccess;
}
