/* register.c: registered memory (ccl_mem_register, ccl_mem_deregister) and the memory
 * pools frameworks allocate from (ccl_mem_pool_*, torch's CUDAPluggableAllocator).
 *
 * A registration makes a user's range [ptr, ptr + bytes) reachable by every peer at one
 * heap offset, the same on every rank, so that a call on a buffer inside it runs as on a
 * ccl_mem_alloc buffer: zero-copy, with the kernels' addressing (heap_base[p] + offset)
 * unchanged (call.c's ccl__run puts the registered alias in the call). Three kinds:
 *  - HEAP: the range lies in a live ccl_mem_alloc buffer, which peers reach already:
 *    recorded, and ccl_mem_free refuses the buffer while it is registered;
 *  - MAPPED: the backend maps the allocations the range lies in into the window (heap
 *    offsets past the heap's end, [win_off, win_off + win_bytes)) of the rank's heap, as
 *    every process addresses it (GPUs: cuMemCreate memory; docs/gpu-backend.md);
 *  - RECORDED: the backend cannot map it, but calls may use it staged (the CPU backend
 *    in one process): recorded only.
 *
 * Collective: every rank calls, in the same order, with the same bytes. A call the cache
 * answers (the range, or a range inside it, registered already) is local: one reference
 * more, once the backend has checked that the range still lies in the same allocations.
 * Every other call (and the deregistration that drops the last reference) is one
 * exchange among all ranks over the comm's mailboxes (mailbox.c), in which every rank
 * says what it has or why it failed, so that every rank reaches the same verdict and
 * fails alike, naming the rank at fault. A MAPPED registration then takes a block of the
 * window at the same offset on every rank (the window's allocator, as the heap's, is a
 * pure function of its request sequence), the backend maps every rank's allocations,
 * and a second exchange tells every rank whether every rank did. The exchanges carry the
 * count of registration calls each rank has made, cache hits included, so that ranks
 * whose caches answered differently are told apart from ranks registering different
 * ranges.
 *
 * Placement: rank p's range starts lead[p] bytes into its first allocation; each rank's
 * allocations are mapped so that the range itself starts at W + max(lead) on every rank.
 * A mapping starts on the allocations' granularity, so the ranks' leads must agree
 * modulo it (ranks that run the same program allocate alike; a rank whose range sits at
 * another place within its 2 MiB page is refused, naming both places).
 *
 * Pools: ccl_mem_pool_alloc allocates with the backend and registers; freeing retires
 * the registration on this rank at once (the lookup stops finding it, since the address
 * may come back for other memory) and keeps its mappings until every rank has retired
 * it, which the exchanges count: each carries a rank's retirees, and the retirees of
 * every rank are released by every rank after the exchange. Destroy releases all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef enum { REG_HEAP, REG_MAPPED, REG_RECORDED } RegKind;

struct ccl_mem_reg {
    ccl_comm_t *comm;
    const char *ptr;                 /* the user's range */
    size_t bytes;
    RegKind kind;
    size_t off;                      /* HEAP, MAPPED: the heap offset of ptr; else SIZE_MAX */
    size_t block;                    /* MAPPED: the window block's offset (its allocation) */
    uint64_t id;                     /* registrations made on comm before this one: equal on every rank */
    int refs;
    /* A pool's registration this rank has freed (from any thread): no lookup finds it,
     * its mappings wait until every rank has freed it. */
    _Atomic int retired;
    void *state;                     /* the backend's (MAPPED) */
};

struct CclRegs {
    CclHeapAlloc window;             /* [win_off, win_off + win_bytes) */
    int n, cap;
    ccl_mem_reg_t **r;               /* live and retired, in the order made */
    uint64_t calls;                  /* ccl_mem_register and _deregister calls so far */
    uint64_t made;                   /* registrations made: the next id */
    _Atomic int live_mapped;         /* live MAPPED registrations: ccl__reg_find's quick answer */
};

enum { REG_OP_REGISTER = 1, REG_OP_DEREGISTER = 2, REG_RETIREES = 32, REG_WHY = 1024 };

/* What a rank says in a registration's exchange. */
typedef struct {
    uint64_t calls;                  /* its registration calls, this one included */
    uint32_t op;                     /* REG_OP_* */
    uint32_t ok;                     /* 0: its own part failed (why) */
    uint32_t kind;                   /* RegKind (a register) */
    uint32_t nretired;
    uint32_t result;                 /* !ok: its failure's ccl_result_t */
    uint32_t pad;
    uint64_t bytes;
    uint64_t key;                    /* register, HEAP: the heap offset; deregister: the id */
    uint64_t ptr;                    /* for messages */
    CclRegSpan span;                 /* MAPPED */
    uint64_t retired[REG_RETIREES];  /* ids of pool registrations it has retired */
    char why[REG_WHY];
} RegVote;

static const char *kind_name(uint32_t k)
{
    return k == REG_HEAP ? "a ccl_mem_alloc buffer" : k == REG_MAPPED ? "memory the backend maps for peers"
                                                                      : "memory peers cannot map (recorded only)";
}

/* ---- the table ---- */

static CclRegs *regs_of(ccl_comm_t *comm)
{
    if (!comm->regs && (comm->regs = calloc(1, sizeof *comm->regs)))
        ccl__heap_alloc_init(&comm->regs->window, comm->win_off, comm->win_off + comm->win_bytes);
    return comm->regs;
}

static int live(const ccl_mem_reg_t *e)
{
    return !atomic_load_explicit(&e->retired, memory_order_relaxed);
}

/* The live registration that holds [p, p + bytes) whole, or NULL. */
static ccl_mem_reg_t *containing(const CclRegs *t, const char *p, size_t bytes)
{
    for (int i = 0; t && i < t->n; i++) {
        ccl_mem_reg_t *e = t->r[i];
        if (live(e) && p >= e->ptr && bytes <= e->bytes && (size_t)(p - e->ptr) <= e->bytes - bytes)
            return e;
    }
    return NULL;
}

/* A live registration that overlaps [p, p + bytes) without holding it, or NULL. */
static ccl_mem_reg_t *overlapping(const CclRegs *t, const char *p, size_t bytes)
{
    for (int i = 0; t && i < t->n; i++) {
        ccl_mem_reg_t *e = t->r[i];
        if (live(e) && p < e->ptr + e->bytes && e->ptr < p + bytes)
            return e;
    }
    return NULL;
}

int ccl__reg_find(const ccl_comm_t *comm, const void *p, size_t bytes, size_t *off)
{
    const CclRegs *t = comm->regs;
    if (!t || !atomic_load_explicit(&t->live_mapped, memory_order_relaxed) || !p)
        return 0;
    ccl_mem_reg_t *e = containing(t, p, bytes ? bytes : 1);
    if (!e || e->kind != REG_MAPPED)
        return 0;
    *off = e->off + (size_t)((const char *)p - e->ptr);
    return 1;
}

int ccl__reg_holds_heap(const ccl_comm_t *comm, size_t off, size_t bytes)
{
    const CclRegs *t = comm->regs;
    int n = 0;
    for (int i = 0; t && i < t->n; i++)
        n += t->r[i]->kind == REG_HEAP && t->r[i]->off < off + bytes && off < t->r[i]->off + t->r[i]->bytes;
    return n;
}

uint64_t ccl__reg_layout(const ccl_comm_t *comm)
{
    const CclRegs *t = comm->regs;
    return t ? t->window.user_sum ^ (uint64_t)t->window.nuser << 56 : 0;
}

/* Drops e's mappings and window block and frees it (every rank is past its use, or
 * the comm is being destroyed). */
static void release(ccl_comm_t *comm, ccl_mem_reg_t *e, int at_destroy)
{
    CclRegs *t = comm->regs;
    if (e->state && comm->be->reg_release)
        comm->be->reg_release(comm, e->state, at_destroy);
    if (e->kind == REG_MAPPED) {
        ccl__heap_free(&t->window, e->block);
        if (live(e))
            atomic_fetch_sub(&t->live_mapped, 1);
    }
    for (int i = 0; i < t->n; i++)
        if (t->r[i] == e) {
            memmove(&t->r[i], &t->r[i + 1], sizeof *t->r * (size_t)(t->n - i - 1));
            t->n--;
            break;
        }
    free(e);
}

/* ---- the exchange ---- */

/* This rank's retired registrations, oldest first, into v (at most REG_RETIREES). */
static void note_retirees(const CclRegs *t, RegVote *v)
{
    for (int i = 0; t && i < t->n && v->nretired < REG_RETIREES; i++)
        if (!live(t->r[i]))
            v->retired[v->nretired++] = t->r[i]->id;
}

/* Releases the registrations every rank has retired (every rank does the same, from
 * the same votes, so the window's allocator stays the same everywhere). */
static void reap(ccl_comm_t *comm, const RegVote *all)
{
    CclRegs *t = comm->regs;
    int n = comm->nranks;
    for (uint32_t k = 0; k < all[0].nretired && k < REG_RETIREES; k++) {
        uint64_t id = all[0].retired[k];
        int everywhere = 1;
        for (int p = 1; p < n && everywhere; p++) {
            int found = 0;
            for (uint32_t j = 0; j < all[p].nretired && j < REG_RETIREES; j++)
                found |= all[p].retired[j] == id;
            everywhere = found;
        }
        for (int i = 0; everywhere && i < t->n; i++)
            if (t->r[i]->id == id && !live(t->r[i])) {
                CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "registration %llu: freed by every rank's pool, "
                         "unmapped", (unsigned long long)id);
                release(comm, t->r[i], 0);
                break;
            }
    }
}

/* One allgather of votes among all ranks, on a mailbox operation of its own. 0, or -1
 * with the message set. `sb` and `boot` stay usable for the operation's next steps. */
static int exchange(ccl_comm_t *comm, const char *fn, CclMboxBoot *sb, ccl_bootstrap_t *boot, int *everyone,
                    const void *mine, void *all, size_t bytes, int first)
{
    if (first && !comm->mbox) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: registering memory on a communicator of %d nodes is not "
                       "implemented yet (docs/multinode.md)", fn, comm->nnodes);
        return -1;
    }
    if (first) {
        for (int p = 0; p < comm->nranks; p++)
            everyone[p] = p;
        ccl__mbox_boot(sb, comm->mbox, ++comm->mbox_ops, everyone, comm->nranks, comm->rank, comm->timeout_ms, boot);
    }
    if (boot->allgather(boot->ctx, mine, all, bytes) == 0)
        return 0;
    ccl__set_error(comm, CCL_ERR_PEER_FAILED, "%s: rank %d: not every rank came to the registration's exchange: %s "
                   "(every rank must make the same ccl_mem_register and ccl_mem_deregister calls in the same order)",
                   fn, comm->rank, sb->why);
    return -1;
}

/* The verdict on every rank's vote, the same on every rank: CCL_OK, or the failure with
 * its message (naming the ranks) in buf. */
static ccl_result_t judge(const RegVote *all, int n, int me, char *buf, size_t len)
{
    /* A rank that failed itself says its own failure; the others name the first. */
    for (int k = -1; k < n; k++) {
        int p = k < 0 ? me : k;
        if (all[p].ok)
            continue;
        int others = 0;
        for (int q = 0; q < n; q++)
            others += q != p && !all[q].ok;
        CCL__FMT(buf, len, "rank %d: %s%s", p, all[p].why, others ? " (and other ranks failed too)" : "");
        return p == me ? (ccl_result_t)all[p].result : CCL_ERR_PEER_FAILED;
    }
    for (int p = 1; p < n; p++) {
        const RegVote *a = &all[0], *b = &all[p];
        const char *an = a->op == REG_OP_REGISTER ? "ccl_mem_register" : "ccl_mem_deregister";
        const char *bn = b->op == REG_OP_REGISTER ? "ccl_mem_register" : "ccl_mem_deregister";
        if (a->calls != b->calls || a->op != b->op) {
            CCL__FMT(buf, len, "the ranks are not in the same registration call: rank 0 is in its registration call %llu "
                     "(%s), rank %d in its call %llu (%s); every rank must make the same ccl_mem_register and "
                     "ccl_mem_deregister calls in the same order (a range registered again is answered from the "
                     "cache without an exchange, so ranks that register again where others register anew fall out "
                     "of step)", (unsigned long long)a->calls, an, p, (unsigned long long)b->calls, bn);
            return CCL_ERR_INVALID_ARGUMENT;
        }
        if (a->op == REG_OP_DEREGISTER && a->key != b->key) {
            CCL__FMT(buf, len, "the ranks deregister different registrations: rank 0 its registration %llu (%llu "
                     "bytes at %#llx), rank %d its registration %llu (%llu bytes at %#llx); deregister in the same "
                     "order on every rank", (unsigned long long)a->key, (unsigned long long)a->bytes,
                     (unsigned long long)a->ptr, p, (unsigned long long)b->key, (unsigned long long)b->bytes,
                     (unsigned long long)b->ptr);
            return CCL_ERR_INVALID_ARGUMENT;
        }
        if (a->op != REG_OP_REGISTER)
            continue;
        if (a->bytes != b->bytes) {
            CCL__FMT(buf, len, "the ranks register different sizes: rank 0 registers %llu bytes at %#llx, rank %d "
                     "%llu bytes at %#llx; every rank must register the same number of bytes",
                     (unsigned long long)a->bytes, (unsigned long long)a->ptr, p, (unsigned long long)b->bytes,
                     (unsigned long long)b->ptr);
            return CCL_ERR_INVALID_ARGUMENT;
        }
        if (a->kind != b->kind) {
            CCL__FMT(buf, len, "the ranks register different kinds of memory: rank 0's range (%#llx) is %s, rank %d's "
                     "(%#llx) is %s; register the same kind of memory on every rank", (unsigned long long)a->ptr,
                     kind_name(a->kind), p, (unsigned long long)b->ptr, kind_name(b->kind));
            return CCL_ERR_INVALID_ARGUMENT;
        }
        if (a->kind == REG_HEAP && a->key != b->key) {
            CCL__FMT(buf, len, "the ranks register ccl_mem_alloc memory at different heap offsets: rank 0 at %llu, rank "
                     "%d at %llu; allocate the same sizes in the same order on every rank",
                     (unsigned long long)a->key, p, (unsigned long long)b->key);
            return CCL_ERR_NOT_SYMMETRIC;
        }
    }
    if (all[0].op != REG_OP_REGISTER || all[0].kind != REG_MAPPED)
        return CCL_OK;
    /* Every range must start at one offset modulo every rank's mapping granularity. */
    uint64_t align = 1, lead = 0;
    for (int p = 0; p < n; p++) {
        align = all[p].span.align > align ? all[p].span.align : align;
        lead = all[p].span.lead > lead ? all[p].span.lead : lead;
    }
    for (int p = 1; p < n; p++)
        if ((all[0].span.lead - all[p].span.lead) % align) {
            CCL__FMT(buf, len, "the ranks' ranges sit at different places in their memory's %llu-byte pages: rank 0's "
                     "(%#llx) starts %llu bytes into its page, rank %d's (%#llx) %llu bytes; peers map whole pages, so "
                     "every rank's range must start at the same offset within a page (allocate alike on every rank, "
                     "or register ranges that start on a page)", (unsigned long long)align,
                     (unsigned long long)all[0].ptr, (unsigned long long)(all[0].span.lead % align), p,
                     (unsigned long long)all[p].ptr, (unsigned long long)(all[p].span.lead % align));
            return CCL_ERR_NOT_SYMMETRIC;
        }
    (void)lead;
    return CCL_OK;
}


/* ---- ccl_mem_register ---- */

/* This rank's own part of a new registration: the checks and what the range is. */
static void inspect(ccl_comm_t *comm, const char *p, size_t bytes, RegVote *v, void **state)
{
    CclRegs *t = comm->regs;
    ccl_mem_reg_t *o;
    v->ok = 0;
    v->result = CCL_ERR_INVALID_ARGUMENT;
    if (!p) {
        CCL__FMT(v->why, sizeof v->why, "argument 'ptr' is NULL");
    } else if (!bytes) {
        CCL__FMT(v->why, sizeof v->why, "argument 'bytes' is 0");
    } else if ((o = overlapping(t, p, bytes))) {
        CCL__FMT(v->why, sizeof v->why, "the range %p..%p (%zu bytes) overlaps registration %llu, %p..%p (%zu "
                 "bytes), without lying inside it: registrations of one communicator are disjoint (deregister "
                 "that one first, or register one range that holds both)", (const void *)p,
                 (const void *)(p + bytes), bytes, (unsigned long long)o->id, (const void *)o->ptr,
                 (const void *)(o->ptr + o->bytes), o->bytes);
    } else if (p >= comm->heap_base[comm->rank] && p < comm->heap_base[comm->rank] + comm->heap_bytes) {
        size_t off = (size_t)(p - comm->heap_base[comm->rank]), start, size;
        v->kind = REG_HEAP;
        v->key = off;
        v->ok = ccl__heap_find_user(&comm->data, off, bytes, &start, &size) == 0;
        if (!v->ok)
            CCL__FMT(v->why, sizeof v->why, "the range %p (%zu bytes) lies in the symmetric heap but not inside one "
                     "live ccl_mem_alloc buffer", (const void *)p, bytes);
    } else if (comm->be->reg_inspect) {
        CclRegSpan span = {0};
        ccl_result_t r = comm->be->reg_inspect(comm, p, bytes, &span, state);
        v->ok = r == CCL_OK;
        v->result = (uint32_t)r;
        v->kind = *state ? REG_MAPPED : REG_RECORDED;
        v->span = span;
        if (!v->ok)
            CCL__FMT(v->why, sizeof v->why, "%s", comm->last_error);
    } else {
        v->ok = 1;
        v->kind = REG_RECORDED;
    }
}

/* The window block of a MAPPED registration, the same on every rank, and where each
 * rank's allocations go (at) and its range starts (*off). -1 when the window is full. */
static int place(CclRegs *t, const RegVote *all, int n, size_t *block, size_t *at, size_t *off)
{
    uint64_t align = 1, lead = 0, tail = 0;
    for (int p = 0; p < n; p++) {
        align = all[p].span.align > align ? all[p].span.align : align;
        lead = all[p].span.lead > lead ? all[p].span.lead : lead;
        uint64_t rest = all[p].span.span - all[p].span.lead;
        tail = rest > tail ? rest : tail;
    }
    uint64_t need = (lead + tail + align - 1) / align * align + align;
    if (need > SIZE_MAX / 4 || ccl__heap_alloc(&t->window, (size_t)need, 1, block) != 0)
        return -1;
    size_t w = (*block + (size_t)align - 1) / (size_t)align * (size_t)align;
    for (int p = 0; p < n; p++)
        at[p] = w + (size_t)(lead - all[p].span.lead);
    *off = w + (size_t)lead;
    return 0;
}


/* One vote of a register or deregister: this rank's retirees noted in `mine`, every
 * rank's vote exchanged into `all`, the pool segments every rank has freed reaped, and
 * the verdict every rank reaches alike; its message (in msg, CCL__ERR_LEN bytes) set as
 * the comm's error when it fails. `sb` and `boot` stay usable for the next steps. */
static ccl_result_t vote(ccl_comm_t *comm, const char *fn, CclMboxBoot *sb, ccl_bootstrap_t *boot, int *everyone,
                         RegVote *mine, RegVote *all, char *msg)
{
    note_retirees(comm->regs, mine);
    if (exchange(comm, fn, sb, boot, everyone, mine, all, sizeof *mine, 1) != 0)
        return CCL_ERR_PEER_FAILED;
    reap(comm, all);
    ccl_result_t r = judge(all, comm->nranks, comm->rank, msg, CCL__ERR_LEN);
    if (r != CCL_OK)
        ccl__set_error(comm, r, "%s: %s", fn, msg);
    return r;
}
/* After the backend's mapping: every rank says whether its own worked; the verdict, the
 * same on every rank, with the message in buf. */
static ccl_result_t confirm(ccl_comm_t *comm, const char *fn, CclMboxBoot *sb, ccl_bootstrap_t *boot,
                            ccl_result_t mine, char *buf, size_t len)
{
    typedef struct {
        uint32_t ok, result;
        char why[REG_WHY];
    } Ack;
    int n = comm->nranks;
    Ack me = {.ok = mine == CCL_OK, .result = (uint32_t)mine};
    CCL__FMT(me.why, sizeof me.why, "%s", mine == CCL_OK ? "" : comm->last_error);
    Ack *all = calloc((size_t)n, sizeof *all);
    if (!all)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (exchange(comm, fn, sb, boot, NULL, &me, all, sizeof me, 0) != 0) {
        free(all);
        CCL__FMT(buf, len, "%s", comm->last_error);
        return CCL_ERR_PEER_FAILED;
    }
    ccl_result_t r = CCL_OK;
    for (int k = -1; k < n && r == CCL_OK; k++) {
        int p = k < 0 ? comm->rank : k;
        if (!all[p].ok) {
            CCL__FMT(buf, len, "%s: rank %d could not map the registered memory: %s", fn, p, all[p].why);
            r = p == comm->rank ? (ccl_result_t)all[p].result : CCL_ERR_PEER_FAILED;
        }
    }
    free(all);
    return r;
}

/* A cache hit: one more reference, once the backend says the memory is still the same. */
static ccl_result_t hit(ccl_comm_t *comm, const char *fn, ccl_mem_reg_t *e, const char *p, size_t bytes,
                        ccl_mem_reg_t **reg)
{
    if (e->state && comm->be->reg_same && !comm->be->reg_same(comm, e->state, e->ptr, e->bytes))
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: the range %p (%zu bytes) lies in registration %llu (%p, %zu bytes), but that memory "
                              "was freed and other memory now sits at its address: deregister memory before freeing "
                              "it (ccl_mem_deregister on every rank)", fn, (const void *)p, bytes,
                              (unsigned long long)e->id, (const void *)e->ptr, e->bytes);
    e->refs++;
    *reg = e;
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: %zu bytes at %p: in registration %llu (from the cache; "
             "%d references)", fn, bytes, (const void *)p, (unsigned long long)e->id, e->refs);
    return CCL_OK;
}

static int table_reserve(CclRegs *t)
{
    if (t->n < t->cap)
        return 0;
    int cap = t->cap ? 2 * t->cap : 8;
    ccl_mem_reg_t **nr = realloc(t->r, sizeof *nr * (size_t)cap);
    if (!nr)
        return -1;
    t->r = nr;
    t->cap = cap;
    return 0;
}

/* A registration no rank has yet: the exchange, the verdict, the window and the
 * mapping. Every failure is every rank's (but running out of host memory here). */
static ccl_result_t register_new(ccl_comm_t *comm, const char *fn, const char *p, size_t bytes, ccl_mem_reg_t **reg)
{
    CclRegs *t = comm->regs;
    int n = comm->nranks;
    void *state = NULL;
    RegVote *mine = calloc(1, sizeof *mine), *all = calloc((size_t)n, sizeof *all);
    int *everyone = malloc(sizeof *everyone * (size_t)n);
    size_t *at = calloc((size_t)n, sizeof *at);
    CclRegSpan *spans = calloc((size_t)n, sizeof *spans);
    ccl_mem_reg_t *e = calloc(1, sizeof *e);
    char *msg = malloc(CCL__ERR_LEN);
    ccl_result_t r = CCL_OK;
    if (!mine || !all || !everyone || !at || !spans || !e || !msg || table_reserve(t) != 0) {
        r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    *mine = (RegVote){.calls = t->calls, .op = REG_OP_REGISTER, .bytes = bytes, .ptr = (uint64_t)(uintptr_t)p};
    inspect(comm, p, bytes, mine, &state);
    CclMboxBoot sb;
    ccl_bootstrap_t boot;
    if ((r = vote(comm, fn, &sb, &boot, everyone, mine, all, msg)) != CCL_OK)
        goto out;
    *e = (ccl_mem_reg_t){.comm = comm, .ptr = p, .bytes = bytes, .kind = (RegKind)mine->kind, .off = SIZE_MAX,
                         .id = t->made++, .refs = 1};
    if (e->kind == REG_HEAP)
        e->off = (size_t)mine->key;
    if (e->kind == REG_MAPPED) {
        if (place(t, all, n, &e->block, at, &e->off) != 0) {
            r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                               "%s: the registration window has no room for %zu more bytes (it spans %zu bytes per "
                               "rank; %d registrations hold it): deregister memory no longer used, or raise "
                               "CCL_WINDOW_BYTES", fn, bytes, comm->win_bytes, t->n);
            goto out;
        }
        for (int q = 0; q < n; q++)
            spans[q] = all[q].span;
        ccl_result_t mapped = comm->be->reg_map(comm, state, spans, at, &boot);
        if ((r = confirm(comm, fn, &sb, &boot, mapped, msg, CCL__ERR_LEN)) != CCL_OK) {
            ccl__heap_free(&t->window, e->block);
            ccl__set_error(comm, r, "%s", msg);
            goto out;
        }
        atomic_fetch_add(&t->live_mapped, 1);
    }
    e->state = state;
    state = NULL;
    t->r[t->n++] = e;
    *reg = e;
    if (e->off == SIZE_MAX)
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: registration %llu: %zu bytes at %p, %s", fn,
                 (unsigned long long)e->id, bytes, (const void *)p, kind_name(e->kind));
    else
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: registration %llu: %zu bytes at %p, %s, at heap "
                 "offset %zu", fn, (unsigned long long)e->id, bytes, (const void *)p, kind_name(e->kind), e->off);
    e = NULL;
out:
    if (state && comm->be->reg_release)
        comm->be->reg_release(comm, state, 0);
    free(e);
    free(mine), free(all), free(everyone), free(at), free(spans), free(msg);
    return r;
}

ccl_result_t ccl_mem_register(ccl_comm_t *comm, void *ptr, size_t bytes, ccl_mem_reg_t **reg)
{
    const char *fn = "ccl_mem_register";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!reg)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'reg' is NULL", fn);
    *reg = NULL;
    ccl_result_t r = ccl__check_usable_poll(comm, fn);
    if (r != CCL_OK)
        return r;
    CclRegs *t = regs_of(comm);
    if (!t)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    t->calls++;
    ccl_mem_reg_t *e = ptr && bytes ? containing(t, ptr, bytes) : NULL;
    if (e)
        return hit(comm, fn, e, ptr, bytes, reg);
    ccl__range_push(fn);
    return ccl__range_pop(register_new(comm, fn, ptr, bytes, reg));
}

/* ---- ccl_mem_deregister ---- */

/* The last reference's deregistration: every rank's work is done, then every rank drops
 * it (or, when the ranks disagree, none does). */
static ccl_result_t deregister_last(ccl_comm_t *comm, const char *fn, ccl_mem_reg_t *reg, int valid)
{
    CclRegs *t = comm->regs;
    int n = comm->nranks;
    comm->be->synchronize(comm);     /* this rank's calls on it are done; the exchange waits for the others' */
    RegVote *mine = calloc(1, sizeof *mine), *all = calloc((size_t)n, sizeof *all);
    int *everyone = malloc(sizeof *everyone * (size_t)n);
    char *msg = malloc(CCL__ERR_LEN);
    ccl_result_t r = CCL_OK;
    if (!mine || !all || !everyone || !msg) {
        r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    *mine = (RegVote){.calls = t->calls, .op = REG_OP_DEREGISTER, .ok = (uint32_t)valid,
                      .result = CCL_ERR_INVALID_ARGUMENT, .key = valid ? reg->id : ~0ull,
                      .bytes = valid ? reg->bytes : 0, .ptr = valid ? (uint64_t)(uintptr_t)reg->ptr : 0};
    if (!valid && !reg)
        CCL__FMT(mine->why, sizeof mine->why, "argument 'reg' is NULL");
    else if (!valid)
        CCL__FMT(mine->why, sizeof mine->why, "argument 'reg' (%p) is not a live registration of this communicator "
                 "(deregistered already, or made by ccl_mem_register on another communicator)", (void *)reg);
    CclMboxBoot sb;
    ccl_bootstrap_t boot;
    if ((r = vote(comm, fn, &sb, &boot, everyone, mine, all, msg)) != CCL_OK)
        goto out;
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: registration %llu (%zu bytes at %p)", fn,
             (unsigned long long)reg->id, reg->bytes, (const void *)reg->ptr);
    release(comm, reg, 0);
out:
    free(mine), free(all), free(everyone), free(msg);
    return r;
}

ccl_result_t ccl_mem_deregister(ccl_comm_t *comm, ccl_mem_reg_t *reg)
{
    const char *fn = "ccl_mem_deregister";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    CclRegs *t = regs_of(comm);
    if (!t)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    /* Looked up, never followed first: a stale or foreign pointer is only compared. */
    int valid = 0;
    for (int i = 0; reg && i < t->n && !valid; i++)
        valid = t->r[i] == reg && live(reg);
    if (ccl__check_usable(comm, fn) != CCL_OK) {
        /* Its peers have stopped: no exchange, the mappings go now. */
        if (valid && --reg->refs == 0)
            release(comm, reg, 1);
        return CCL_OK;
    }
    t->calls++;
    if (valid && reg->refs > 1) {
        reg->refs--;
        CCL__LOG(CCL__LOG_INFO, CCL__SUB_ALLOC, comm->rank, "%s: registration %llu: %d references left", fn,
                 (unsigned long long)reg->id, reg->refs);
        return CCL_OK;
    }
    ccl__range_push(fn);
    return ccl__range_pop(deregister_last(comm, fn, reg, valid));
}

/* ---- memory pools (ccl_mem_pool_*: torch's CUDAPluggableAllocator) ----
 *
 * Torch calls the allocator from whatever thread allocates, so the segments and the
 * comm serving each GPU live in one table under a lock, which ccl_comm_destroy takes too
 * (ccl__reg_release_all): a free that races a destroy either retires its registration
 * before the destroy releases it, or finds the comm gone and frees only the memory. */

enum { POOL_DEVICES = 64 };

typedef struct PoolSeg {
    struct PoolSeg *next;
    void *ptr;
    const CclBackend *be;            /* pool_free needs no comm */
    void *state;
    ccl_comm_t *comm;                /* NULL once the comm was destroyed */
    ccl_mem_reg_t *reg;
} PoolSeg;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static PoolSeg *pool_segs;
static ccl_comm_t *pool_comm[POOL_DEVICES]; /* by GPU ordinal */

ccl_result_t ccl_mem_pool_attach(ccl_comm_t *comm)
{
    const char *fn = "ccl_mem_pool_attach";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!comm->be->pool_alloc || !comm->be->pool_free)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: the %s backend has no memory pools (they are the GPU "
                              "backend's)", fn, comm->be->name);
    if (comm->device < 0 || comm->device >= POOL_DEVICES)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: GPU %d is beyond the %d the pools serve", fn,
                              comm->device, POOL_DEVICES);
    pthread_mutex_lock(&pool_mu);
    ccl_comm_t *other = pool_comm[comm->device];
    if (!other)
        pool_comm[comm->device] = comm;
    pthread_mutex_unlock(&pool_mu);
    if (other && other != comm)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: GPU %d serves the pool of another communicator "
                              "(%p) already: one communicator per GPU serves pools (ranks sharing a GPU cannot "
                              "both; detach that one first)", fn, comm->device, (void *)other);
    return CCL_OK;
}

ccl_result_t ccl_mem_pool_detach(ccl_comm_t *comm)
{
    if (ccl__check_comm(comm, "ccl_mem_pool_detach") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&pool_mu);
    for (int d = 0; d < POOL_DEVICES; d++)
        if (pool_comm[d] == comm)
            pool_comm[d] = NULL;
    pthread_mutex_unlock(&pool_mu);
    return CCL_OK;
}

void *ccl_mem_pool_alloc(ptrdiff_t bytes, int device, void *stream)
{
    (void)stream;                    /* the memory is ready when this returns */
    if (bytes <= 0 || device < 0 || device >= POOL_DEVICES)
        return NULL;
    pthread_mutex_lock(&pool_mu);
    ccl_comm_t *comm = pool_comm[device];
    pthread_mutex_unlock(&pool_mu);
    PoolSeg *s = comm ? calloc(1, sizeof *s) : NULL;
    if (!s)
        return NULL;
    void *ptr = NULL, *state = NULL;
    size_t size = 0;
    ccl_mem_reg_t *reg = NULL;
    if (comm->be->pool_alloc(comm, (size_t)bytes, &ptr, &size, &state) != CCL_OK) {
        free(s);
        return NULL;
    }
    if (ccl_mem_register(comm, ptr, size, &reg) != CCL_OK) {
        comm->be->pool_free(state);
        free(s);
        return NULL;
    }
    *s = (PoolSeg){.ptr = ptr, .be = comm->be, .state = state, .comm = comm, .reg = reg};
    pthread_mutex_lock(&pool_mu);
    s->next = pool_segs;
    pool_segs = s;
    pthread_mutex_unlock(&pool_mu);
    return ptr;
}

void ccl_mem_pool_free(void *ptr, ptrdiff_t bytes, int device, void *stream)
{
    (void)bytes, (void)device, (void)stream;
    pthread_mutex_lock(&pool_mu);
    PoolSeg **pp = &pool_segs, *s;
    while ((s = *pp) && s->ptr != ptr)
        pp = &s->next;
    if (s) {
        *pp = s->next;
        ccl_mem_reg_t *e = s->reg;
        if (e) {
            /* The lookup's count goes first: once `retired` is set the comm's thread may
             * release e at any time. */
            if (e->kind == REG_MAPPED)
                atomic_fetch_sub(&s->comm->regs->live_mapped, 1);
            atomic_store(&e->retired, 1);
        }
    }
    pthread_mutex_unlock(&pool_mu);
    if (s) {
        s->be->pool_free(s->state);
        free(s);
    }
}

/* ---- destroy ---- */

void ccl__reg_release_all(ccl_comm_t *comm)
{
    pthread_mutex_lock(&pool_mu);
    for (PoolSeg *s = pool_segs; s; s = s->next)
        if (s->comm == comm)
            s->comm = NULL, s->reg = NULL;
    for (int d = 0; d < POOL_DEVICES; d++)
        if (pool_comm[d] == comm)
            pool_comm[d] = NULL;
    pthread_mutex_unlock(&pool_mu);
    CclRegs *t = comm->regs;
    if (!t)
        return;
    while (t->n > 0)
        release(comm, t->r[t->n - 1], 1);
    free(t->r);
    ccl__heap_alloc_fini(&t->window);
    free(t);
    comm->regs = NULL;
}
