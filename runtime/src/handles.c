/* handles.c: which communicator and algorithm handles are alive.
 *
 * Every entry point checks its handle against this set before touching it (check.c), so
 * a destroyed or freed handle, a second destroy or free, or a pointer that never was a
 * handle gets CCL_ERR_INVALID_ARGUMENT with a message instead of a crash. The set of live handles is
 * a hash set of pointers (open addressing, deleted slots marked), under one mutex. What
 * it cannot tell: a handle whose memory was reused by a newer handle of the same kind is
 * that newer handle (docs/api.md). Part of the base: calls only the base (util.c). */
#include <stdint.h>
#include <stdlib.h>

#include "base.h"

#define DELETED ((const void *)1)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const void **slots;
static size_t cap, used;             /* used: live and deleted slots */

static size_t slot_hash(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17);
}

/* Where p is, or else the first free slot of its probe sequence (cap > 0). */
static size_t find(const void *p)
{
    size_t i = slot_hash(p) & (cap - 1), free_at = SIZE_MAX;
    while (slots[i]) {
        if (slots[i] == p)
            return i;
        if (slots[i] == DELETED && free_at == SIZE_MAX)
            free_at = i;
        i = (i + 1) & (cap - 1);
    }
    return free_at != SIZE_MAX ? free_at : i;
}

static int grow(void)
{
    size_t ncap = cap ? 2 * cap : 64;
    const void **old = slots, **fresh = calloc(ncap, sizeof *fresh);
    if (!fresh)
        return -1;
    size_t ocap = cap;
    slots = fresh;
    cap = ncap;
    used = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i] && old[i] != DELETED) {
            slots[find(old[i])] = old[i];
            used++;
        }
    free(old);
    return 0;
}

int ccl__handle_add(const void *h)
{
    pthread_mutex_lock(&mu);
    int ok = 2 * (used + 1) <= cap || grow() == 0;
    if (ok) {
        size_t i = find(h);
        if (slots[i] != h) {
            used += !slots[i];
            slots[i] = h;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok ? 0 : -1;
}

int ccl__handle_remove(const void *h)
{
    pthread_mutex_lock(&mu);
    int was = 0;
    if (cap) {
        size_t i = find(h);
        if (slots[i] == h) {
            slots[i] = DELETED;
            was = 1;
        }
    }
    pthread_mutex_unlock(&mu);
    return was;
}

int ccl__handle_live(const void *h)
{
    if (!h)
        return 0;
    pthread_mutex_lock(&mu);
    int live = cap && slots[find(h)] == h;
    pthread_mutex_unlock(&mu);
    return live;
}

int ccl__handle_hold(ccl_comm_t *comm)
{
    int live = 0;
    if (comm) {
        pthread_mutex_lock(&mu);
        live = cap && slots[find(comm)] == comm;
        if (live)
            atomic_fetch_add(&comm->holds, 1);
        pthread_mutex_unlock(&mu);
    }
    return live;
}

void ccl__release_comm(ccl_comm_t *comm)
{
    atomic_fetch_sub(&comm->holds, 1);
}

/* Holds last as long as a call that never waits (a poll, an abort): spinning politely
 * costs less than a condition variable every call would have to signal. */
void ccl__wait_unheld(ccl_comm_t *comm)
{
    for (unsigned it = 0; atomic_load(&comm->holds) > 0; it++)
        ccl__backoff(it);
}

/* ---- objects the ranks of one process share at init ----
 *
 * In one process, rank 0 of an init makes objects every rank uses (the CPU heaps'
 * world, the mailboxes' block). They travel through the bootstrap as tokens, never as
 * raw pointers: a rank finds the object by its token here, taking a reference, or not at
 * all (the object is gone, or the token is damaged), so nobody follows a pointer a
 * damaged exchange made up, and the last reference frees the object however the init
 * ended. */

typedef struct {
    uint64_t token;
    void *obj;
    void (*release)(void *);
    int refs;
} Shared;

static Shared *shared;
static int nshared, shared_cap;
static uint64_t next_token;

uint64_t ccl__share_put(void *obj, void (*release)(void *))
{
    pthread_mutex_lock(&mu);
    if (!next_token) /* a start no damaged token is likely to hit */
        next_token = ((uint64_t)(uintptr_t)&next_token * 0x9e3779b97f4a7c15ull) | 1;
    uint64_t t = 0;
    if (nshared < shared_cap || (shared = realloc(shared, sizeof *shared * (size_t)(shared_cap = shared_cap ? 2 * shared_cap : 8)))) {
        t = next_token += 0x9e3779b97f4a7c16ull;
        shared[nshared++] = (Shared){t, obj, release, 1};
    }
    pthread_mutex_unlock(&mu);
    return t;
}

void *ccl__share_get(uint64_t token)
{
    void *obj = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; token && i < nshared && !obj; i++)
        if (shared[i].token == token) {
            shared[i].refs++;
            obj = shared[i].obj;
        }
    pthread_mutex_unlock(&mu);
    return obj;
}

void ccl__share_drop(uint64_t token)
{
    void *obj = NULL;
    void (*release)(void *) = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; token && i < nshared; i++)
        if (shared[i].token == token) {
            if (--shared[i].refs == 0) {
                obj = shared[i].obj;
                release = shared[i].release;
                shared[i] = shared[--nshared];
            }
            break;
        }
    pthread_mutex_unlock(&mu);
    if (release)
        release(obj);
}
