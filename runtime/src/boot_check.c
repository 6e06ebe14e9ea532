/* boot_check.c: the bootstrap, checked.
 *
 * A bootstrap's allgather is the user's code (or MPI's); one that reports success
 * with wrong bytes in `out` (entries missing, out of order, from another exchange or
 * another job, changed on the way) would have the backends map garbage names and
 * follow garbage pointers. So comm_create hands the backend a wrapper: every rank sends
 * its bytes followed by a frame (a magic word, its rank, the rank count, the exchange's
 * number and size, and a checksum of it all), and every entry that comes back is
 * checked before the backend sees any of it. A damaged entry fails the exchange (-1)
 * with what was wrong and where in `why`; comm_create reports it as the cause. Part of
 * the base: calls only the base. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

enum { BOOT_MAGIC = 0x43434c424f4f5431ull }; /* "CCLBOOT1" */

typedef struct {
    uint64_t magic, exchange, bytes, hash;
    uint32_t rank, nranks;
} BootFrame;

static uint64_t frame_hash(const void *payload, size_t bytes, BootFrame f)
{
    f.hash = 0;
    return ccl__fnv1a(ccl__fnv1a(CCL__FNV_SEED, payload, bytes), &f, sizeof f);
}

/* What is wrong with the entry at rank p's place (NULL: nothing), into buf. */
static const char *frame_damage(const CclCheckedBoot *cb, const char *entry, size_t bytes, int p, char *buf, size_t len)
{
    BootFrame f;
    memcpy(&f, entry + bytes, sizeof f);
    size_t frame = bytes + sizeof f, zero = 0;
    while (zero < frame && !entry[zero])
        zero++;
    if (zero == frame)
        CCL__FMT(buf, len, "is all zeros (nothing was written there)");
    else if (f.magic != BOOT_MAGIC)
        CCL__FMT(buf, len, "is not what a rank of this communicator sent (foreign bytes: another job's data, or "
                 "memory the allgather never wrote)");
    else if (f.nranks != (uint32_t)cb->user->nranks)
        CCL__FMT(buf, len, "comes from a bootstrap of %u ranks; this one has %d", f.nranks, cb->user->nranks);
    else if (f.rank != (uint32_t)p)
        CCL__FMT(buf, len, "holds rank %u's bytes (entries out of rank order)", f.rank);
    else if (f.exchange != (uint64_t)cb->exchanges || f.bytes != bytes)
        CCL__FMT(buf, len, "belongs to rank %d's exchange %llu of %llu bytes (the ranks are out of step)", p,
                 (unsigned long long)f.exchange, (unsigned long long)f.bytes);
    else if (f.hash != frame_hash(entry, bytes, f))
        CCL__FMT(buf, len, "was changed on the way (its checksum does not match)");
    else
        return NULL;
    return buf;
}

static int checked_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    CclCheckedBoot *cb = ctx;
    int n = cb->user->nranks, me = cb->user->rank;
    size_t frame = bytes + sizeof(BootFrame);
    cb->exchanges++;
    cb->damaged = 0;
    char *mine = malloc(frame), *all = calloc((size_t)n, frame);
    if (!mine || !all) {
        free(mine), free(all);
        CCL__FMT(cb->why, sizeof cb->why, "out of memory for the bootstrap's exchange %d", cb->exchanges);
        return -1;
    }
    memcpy(mine, in, bytes);
    BootFrame f = {.magic = BOOT_MAGIC, .exchange = (uint64_t)cb->exchanges, .bytes = bytes, .rank = (uint32_t)me,
                   .nranks = (uint32_t)n};
    f.hash = frame_hash(in, bytes, f);
    memcpy(mine + bytes, &f, sizeof f);
    int rc = cb->user->allgather(cb->user->ctx, mine, all, frame);
    for (int p = 0; p < n && rc == 0; p++) {
        char what[200];
        if (frame_damage(cb, all + (size_t)p * frame, bytes, p, what, sizeof what)) {
            CCL__FMT(cb->why, sizeof cb->why,
                     "argument 'bootstrap': its allgather returned success with damaged data in exchange %d of the "
                     "init (%zu bytes per rank): the entry at rank %d's place %s. An allgather must return 0 only "
                     "when out holds every rank's bytes, in rank order (rank p's at offset p * bytes)",
                     cb->exchanges, frame, p, what);
            cb->damaged = cb->ever_damaged = 1;
            rc = -1;
        }
    }
    if (rc == 0)
        for (int p = 0; p < n; p++)
            memcpy((char *)out + (size_t)p * bytes, all + (size_t)p * frame, bytes);
    free(mine);
    free(all);
    return rc;
}

static int checked_barrier(void *ctx)
{
    CclCheckedBoot *cb = ctx;
    return cb->user->barrier(cb->user->ctx);
}

void ccl__boot_checked(CclCheckedBoot *cb, const ccl_bootstrap_t *user, ccl_bootstrap_t *checked)
{
    *cb = (CclCheckedBoot){.user = user};
    *checked = (ccl_bootstrap_t){.nranks = user->nranks, .rank = user->rank, .allgather = checked_allgather,
                                 .barrier = checked_barrier, .ctx = cb};
}

int ccl__boot_damaged(const ccl_bootstrap_t *boot)
{
    return boot->allgather == checked_allgather && ((const CclCheckedBoot *)boot->ctx)->damaged;
}
