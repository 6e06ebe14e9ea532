/* algorithm.c: loading and freeing an algorithm, and ccl_algorithm_run.
 *
 * Load: cclc_compile_source in-process for this comm's N (and root), keep the Compilation
 * (the Plan lives in its arena; the ranks of one ccl_comm_init_all share it), pick this
 * rank's PlanBlocks, and give the algorithm its semaphores in the heap's semaphore
 * arena.
 *
 * Run: ccl_algorithm_run hands the call to call.c, which resolves it for the backend
 * (staging, scratch, pieces). Freeing waits in a quarantine (below). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Source text starts (after blanks and # comments) with the word "algorithm". */
static int looks_like_source(const char *s)
{
    for (;;) {
        while (isspace((unsigned char)*s))
            s++;
        if (*s != '#')
            break;
        while (*s && *s != '\n')
            s++;
    }
    return !strncmp(s, "algorithm", 9) && (isspace((unsigned char)s[9]) || s[9] == 0);
}

static char *read_file(const char *path, size_t *len, char *why, size_t whylen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whylen, "%s", strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            snprintf(why, whylen, "out of memory");
            break;
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        if (cap > (64u << 20)) {
            snprintf(why, whylen, "larger than 64 MiB");
            free(buf);
            buf = NULL;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb)
            free(buf);
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        snprintf(why, whylen, "%s", strerror(errno));
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

static int coll_rooted(Collective c) { return c == COLL_BROADCAST || c == COLL_REDUCE; }

static void compiled_free(CclCompiled *c)
{
    if (c->comp.arena)
        cclc_compilation_free(&c->comp);
    free(c->source);
    free(c->file);
    free(c);
}

/* Drops one reference; the last one frees it (and unlinks it from the group). */
static void compiled_release(ccl_comm_t *comm, CclCompiled *c)
{
    CclGroup *g = comm->group;
    if (g)
        pthread_mutex_lock(&g->mu);
    int last = --c->refs == 0;
    if (last && g)
        for (CclCompiled **pp = &g->compiled; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
    if (g)
        pthread_mutex_unlock(&g->mu);
    if (last)
        compiled_free(c);
}

/* cclc_compile_source where the stack is deep enough (ccl__with_stack); a thread that
 * could not be started gives COMPILE_NO_STACK, which is no CompileResult. */
enum { COMPILE_NO_STACK = -100 };
typedef struct {
    Compilation *c;
    const char *file, *source;
    size_t len;
    int nranks, nnodes, root;
    int rc;
} CompileJob;

static void compile_job(void *arg)
{
    CompileJob *j = arg;
    j->rc = cclc_compile_source_nodes(j->c, j->file, j->source, j->len, j->nranks, j->nnodes, j->root);
}

static int compile_deep(Compilation *c, const char *file, const char *source, size_t len, int nranks, int nnodes,
                        int root)
{
    CompileJob j = {c, file, source, len, nranks, nnodes, root, COMPILE_NO_STACK};
    memset(c, 0, sizeof *c);
    if (ccl__with_stack(compile_job, &j) != 0)
        return COMPILE_NO_STACK;
    return j.rc;
}

static ccl_result_t no_stack_error(ccl_comm_t *comm, const char *fn, const char *file)
{
    return ccl__set_error(comm, CCL_ERR_SYSTEM,
                          "%s: cannot compile %s: this thread has less than %zu KiB of stack left, and no thread "
                          "with a %zu MiB stack could be started for the compiler", fn, file,
                          CCL__DEEP_STACK_MIN >> 10, CCL__DEEP_STACK >> 20);
}

/* The compilation of (source, N, root): the group's copy when a peer already made it,
 * else a new one (added to the group on success). Takes ownership of source and file.
 * Returns cclc_compile_source's result (or COMPILE_NO_STACK) with *out holding the
 * diagnostics on failure (the caller frees it with compiled_free), or
 * COMPILE_OUT_OF_MEMORY with *out NULL when not even that could be allocated. */
static int compile_shared(ccl_comm_t *comm, char *file, char *source, size_t len, int root, CclCompiled **out)
{
    CclGroup *g = comm->group;
    int N = comm->nranks;
    if (g) {
        pthread_mutex_lock(&g->mu);
        for (CclCompiled *c = g->compiled; c; c = c->next)
            if (c->nranks == N && c->root == root && c->len == len && !strcmp(c->file, file) &&
                !memcmp(c->source, source, len)) {
                c->refs++;
                pthread_mutex_unlock(&g->mu);
                free(file);
                free(source);
                *out = c;
                return COMPILE_OK;
            }
    }
    /* Compiling under the group's lock serializes the ranks' loads of one program, so
     * the first compiles and the others share. */
    CclCompiled *c = calloc(1, sizeof *c);
    int rc = COMPILE_OUT_OF_MEMORY;
    if (c) {
        c->file = file;
        c->source = source;
        c->len = len;
        c->nranks = N;
        c->root = root;
        c->refs = 1;
        rc = compile_deep(&c->comp, file, source, len, N, comm->nnodes, root);
        if (rc == COMPILE_OK && g) {
            c->next = g->compiled;
            g->compiled = c;
        }
    } else {
        free(file);
        free(source);
    }
    if (g)
        pthread_mutex_unlock(&g->mu);
    *out = c;
    return rc;
}

static void alg_free_memory(ccl_algorithm_t *alg)
{
    if (alg->compiled)
        compiled_release(alg->comm, alg->compiled);
    free(alg->blocks);
    free(alg);
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = 0;
}

ccl_result_t ccl__algorithm_load(ccl_comm_t *comm, const char *path_or_source, int root, const char *fn,
                                 ccl_algorithm_t **out)
{
    *out = NULL;
    if (comm->capturing) {
        comm->capture_refused = 1;
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: called inside a CUDA stream capture, but its first call must load %s (compile it, "
                              "allocate its semaphores and device state), which a capture does not allow. Warm up "
                              "before capture: make the call once outside the capture, with every dtype and op and the "
                              "largest count the graph will use (nothing was enqueued; the capture is intact)", fn,
                              looks_like_source(path_or_source) ? "an algorithm" : path_or_source);
    }
    ccl_algorithm_t *alg = calloc(1, sizeof *alg);
    if (!alg)
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    alg->comm = comm;
    size_t len = 0;
    char *file, *source;
    if (looks_like_source(path_or_source)) {
        file = strdup("<string>");
        source = strdup(path_or_source);
        len = source ? strlen(source) : 0;
    } else {
        char why[256];
        file = strdup(path_or_source);
        source = read_file(path_or_source, &len, why, sizeof why);
        if (!source) {
            free(file);
            alg_free_memory(alg);
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                  "%s: argument 'path_or_source': cannot read '%s': %s (source text must start with 'algorithm')",
                                  fn, path_or_source, why);
        }
    }
    if (!file || !source) {
        free(file);
        free(source);
        alg_free_memory(alg);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    int N = comm->nranks;
    int root_ok = root >= 0 && root < N;
    double t0 = ccl__now_ms();
    CclCompiled *compiled;
    int rc = compile_shared(comm, file, source, len, root_ok ? root : 0, &compiled);
    if (rc == COMPILE_NO_STACK) {
        ccl_result_t r = no_stack_error(comm, fn, compiled->file);
        compiled_free(compiled);
        alg_free_memory(alg);
        return r;
    }
    if (rc == COMPILE_OUT_OF_MEMORY) {
        ccl_result_t r = compiled ? ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory while compiling %s for N=%d",
                                                   fn, compiled->file, N)
                                  : ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        if (compiled)
            compiled_free(compiled);
        alg_free_memory(alg);
        return r;
    }
    if (rc != COMPILE_OK) {
        const char *d = compiled->comp.diag.out ? compiled->comp.diag.out : "(no diagnostics)";
        ccl_result_t r;
        if (rc == COMPILE_NOT_ADMITTED)
            r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                               "%s: argument 'comm': %s does not admit this communicator's size N=%d:\n%s", fn,
                               compiled->file, N, d);
        else
            r = ccl__set_error(comm, CCL_ERR_COMPILE, "%s: %s does not compile for N=%d:\n%s", fn, compiled->file, N, d);
        trim(comm->last_error);
        compiled_free(compiled);
        alg_free_memory(alg);
        return r;
    }
    alg->compiled = compiled;
    alg->file = compiled->file;
    alg->source = compiled->source;
    alg->plan = compiled->comp.plan;
    alg->prog = compiled->comp.prog;
    if (coll_rooted(alg->prog->coll) && !root_ok) {
        ccl_result_t r = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'root' is %d, outside 0..%d (%s is a %s)",
                                        fn, root, N - 1, alg->file, cclc_coll_name(alg->prog->coll));
        alg_free_memory(alg);
        return r;
    }
    alg->root = coll_rooted(alg->prog->coll) ? root : 0;
    uint64_t key[2] = {(uint64_t)N, (uint64_t)alg->root};
    alg->plan_hash = ccl__fnv1a(ccl__fnv1a(CCL__FNV_SEED, compiled->source, compiled->len), key, sizeof key);
    alg->instances = alg->prog->instances > 0 ? alg->prog->instances : 1;
    alg->slices = alg->plan->proof.pipeline_safe && alg->prog->pipeline > 1 ? alg->prog->pipeline : 1;

    const Plan *plan = alg->plan;
    alg->blocks = calloc((size_t)plan->nblocks + 1, sizeof *alg->blocks);
    if (!alg->blocks) {
        alg_free_memory(alg);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        if (b->rank == comm->rank)
            alg->blocks[alg->nblocks++] = b;
        for (int o = 0; o < b->nops; o++) {
            const PlanOp *op = &b->ops[o];
            for (int k = 0; k < op->ndst + op->nsrc; k++) {
                const Ref *r = k < op->ndst ? &op->dst[k] : &op->src[k - op->ndst];
                if (r->rank != b->rank && r->buf == BUF_IN)
                    alg->in_remote = 1;
                if (r->rank != b->rank && r->buf == BUF_OUT)
                    alg->out_remote = 1;
            }
        }
    }
    alg->nsems = plan->nsems * alg->instances;
    if (ccl__heap_alloc(&comm->sems, ccl__sem_block_bytes(alg->nsems), 0, &alg->sem_off) != 0) {
        int nsems = alg->nsems;
        alg_free_memory(alg);
        return ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY,
                              "%s: the semaphore arena is full (%s needs %d counters; free unused algorithms)", fn,
                              path_or_source, nsems);
    }
    alg->scratch_off = SIZE_MAX;
    ccl_result_t r = comm->be->alg_prepare(alg);
    if (r == CCL_OK && ccl__handle_add(alg) != 0) {
        comm->be->alg_release(alg);
        r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    if (r == CCL_OK && comm->nalgs == comm->algs_cap) {
        int ncap = comm->algs_cap ? 2 * comm->algs_cap : 8;
        /* Under async_lock: ccl_comm_get_async_error reads the list from any thread. */
        pthread_mutex_lock(&comm->async_lock);
        ccl_algorithm_t **na = realloc(comm->algs, sizeof *na * (size_t)ncap);
        if (na) {
            comm->algs = na;
            comm->algs_cap = ncap;
        }
        pthread_mutex_unlock(&comm->async_lock);
        if (!na) {
            ccl__handle_remove(alg);
            comm->be->alg_release(alg);
            r = ccl__set_error(comm, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        }
    }
    if (r != CCL_OK) {
        ccl__heap_free(&comm->sems, alg->sem_off);
        alg_free_memory(alg);
        return r;
    }
    pthread_mutex_lock(&comm->async_lock);
    comm->algs[comm->nalgs++] = alg;
    pthread_mutex_unlock(&comm->async_lock);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_COMPILE, comm->rank, "%s: %s (%s, N=%d, root %d) ready in %.1f ms", fn, alg->file,
             cclc_coll_name(alg->prog->coll), N, alg->root, ccl__now_ms() - t0);
    *out = alg;
    return CCL_OK;
}

ccl_result_t ccl_algorithm_load(ccl_comm_t *comm, const char *path_or_source, int root, ccl_algorithm_t **alg)
{
    const char *fn = "ccl_algorithm_load";
    if (ccl__check_comm(comm, fn) != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    if (!alg)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'alg' is NULL", fn);
    *alg = NULL;
    if (!path_or_source)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'path_or_source' is NULL", fn);
    ccl_result_t r = ccl__check_usable(comm, fn);
    if (r != CCL_OK)
        return r;
    ccl__range_push(fn);
    ccl__quarantine_release(comm);
    return ccl__range_pop(ccl__algorithm_load(comm, path_or_source, root, fn, alg));
}

/* ---- freeing: the quarantine ----
 *
 * Each rank frees an algorithm after its own work only; a slower peer may still be in
 * the algorithm's last call, signalling into our semaphores and putting into our
 * scratch. Handing those bytes to the next algorithm at once would give it stale
 * counts (a wait that passes early) or overwritten data. So a freed algorithm's blocks
 * wait here: the next call on the communicator, whatever its algorithm, starts with an
 * all-rank barrier (CclCall.fence), after which no peer is still in older calls; once
 * that call has completed on this rank, the next ccl_algorithm_load or ccl_mem_alloc
 * zeroes the blocks and gives them back. Every rank makes the same API calls in the
 * same order, so every rank gives back the same blocks at the same point and the heap
 * stays symmetric. (Not at the library's lazy loads inside a collective: those may run
 * under CUDA-graph capture, where waiting is not allowed.) */

static void quarantine_add(ccl_comm_t *comm, const ccl_algorithm_t *alg)
{
    CclQuarantine *nq = realloc(comm->quarantine, sizeof *nq * (size_t)(comm->nquarantine + 1));
    if (!nq)
        return; /* the blocks stay taken until the comm is destroyed: never reused early */
    comm->quarantine = nq;
    nq[comm->nquarantine++] = (CclQuarantine){.sem_off = alg->sem_off,
                                              .sem_bytes = ccl__sem_block_bytes(alg->nsems),
                                              .scratch_off = alg->scratch_off};
    comm->fence_pending = 1;
}

void ccl__quarantine_release(ccl_comm_t *comm)
{
    int fenced = 0;
    for (int i = 0; i < comm->nquarantine; i++)
        fenced |= comm->quarantine[i].fenced;
    if (!fenced)
        return;
    comm->be->synchronize(comm);
    if (comm->failed)
        return; /* the fence may not have passed; a failed comm allocates nothing more */
    int kept = 0;
    for (int i = 0; i < comm->nquarantine; i++) {
        CclQuarantine q = comm->quarantine[i];
        if (!q.fenced) {
            comm->quarantine[kept++] = q;
            continue;
        }
        /* Free semaphore memory is zero, so the next algorithm there starts from 0. */
        comm->be->heap_zero(comm, q.sem_off, q.sem_bytes);
        ccl__heap_free(&comm->sems, q.sem_off);
        if (q.scratch_off != SIZE_MAX)
            ccl__heap_free(&comm->data, q.scratch_off);
    }
    comm->nquarantine = kept;
}

void ccl__algorithm_destroy(ccl_algorithm_t *alg)
{
    ccl_comm_t *comm = alg->comm;
    ccl__handle_remove(alg);
    comm->be->synchronize(comm);
    for (int i = 0; i < comm->nuses;)
        if (comm->uses[i].alg == alg)
            memmove(&comm->uses[i], &comm->uses[i + 1], sizeof *comm->uses * (size_t)(--comm->nuses - i));
        else
            i++;
    pthread_mutex_lock(&comm->async_lock); /* see ccl__algorithm_load */
    for (int i = 0; i < comm->nalgs; i++)
        if (comm->algs[i] == alg) {
            memmove(&comm->algs[i], &comm->algs[i + 1], sizeof *comm->algs * (size_t)(comm->nalgs - i - 1));
            comm->nalgs--;
            break;
        }
    pthread_mutex_unlock(&comm->async_lock);
    comm->be->alg_release(alg);
    quarantine_add(comm, alg);
    alg_free_memory(alg);
}

ccl_result_t ccl_algorithm_free(ccl_algorithm_t *alg)
{
    /* A second free, or one after the communicator's destroy, finds it gone. */
    if (ccl__check_alg(alg, "ccl_algorithm_free") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    ccl__algorithm_destroy(alg);
    return CCL_OK;
}

const char *ccl_algorithm_name(const ccl_algorithm_t *alg)
{
    return ccl__handle_live(alg) ? alg->prog->name : "?";
}

const char *ccl_algorithm_collective(const ccl_algorithm_t *alg)
{
    return ccl__handle_live(alg) ? cclc_coll_name(alg->prog->coll) : "?";
}

ccl_result_t ccl_algorithm_run(ccl_algorithm_t *alg, const void *sendbuf, void *recvbuf, size_t count,
                               ccl_dtype_t dtype, ccl_op_t op, void *stream)
{
    if (ccl__check_alg(alg, "ccl_algorithm_run") != CCL_OK)
        return CCL_ERR_INVALID_ARGUMENT;
    ccl__range_push("ccl_algorithm_run");
    return ccl__range_pop(ccl__run(alg, sendbuf, recvbuf, count, dtype, op, stream, "ccl_algorithm_run"));
}

/* ---- checking without a communicator ---- */

/* Copies text into buf as snprintf would and reports the full size through needed. */
static void put_report(const char *text, char *buf, size_t len, size_t *needed)
{
    size_t n = strlen(text);
    if (needed)
        *needed = n + 1;
    if (buf && len > 0) {
        size_t k = n < len - 1 ? n : len - 1;
        memcpy(buf, text, k);
        buf[k] = 0;
    }
}

ccl_result_t ccl_algorithm_check(const char *path_or_source, int nranks, int root, char *buf, size_t len,
                                 size_t *needed)
{
    const char *fn = "ccl_algorithm_check";
    if (needed)
        *needed = 1;
    if (buf && len > 0)
        buf[0] = 0;
    if (!path_or_source)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'path_or_source' is NULL", fn);
    if (!buf && len > 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'buf' is NULL with len %zu", fn, len);
    if (nranks < 1 || nranks > CCLC_MAX_RANKS)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'nranks' (%d) is out of range 1..%d", fn,
                              nranks, CCLC_MAX_RANKS);
    const char *file = "<string>";
    char *source;
    size_t size = 0;
    if (looks_like_source(path_or_source)) {
        source = strdup(path_or_source);
        size = source ? strlen(source) : 0;
    } else {
        char why[256] = "out of memory";
        file = path_or_source;
        source = read_file(path_or_source, &size, why, sizeof why);
        if (!source) {
            ccl_result_t r = ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT,
                                            "%s: argument 'path_or_source': cannot read '%s': %s (source text must start "
                                            "with 'algorithm')", fn, path_or_source, why);
            put_report(ccl_comm_last_error(NULL), buf, len, needed);
            return r;
        }
    }
    if (!source)
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);

    /* What `cclc check --explain` prints: the proof on stdout, or the diagnostics (and
     * their count) on stderr. */
    Compilation c;
    int rc = compile_deep(&c, file, source, size, nranks, 1, root);
    if (rc == COMPILE_NO_STACK) {
        free(source);
        ccl_result_t r = no_stack_error(NULL, fn, file);
        put_report(ccl_comm_last_error(NULL), buf, len, needed);
        return r;
    }
    char *text = NULL;
    size_t textlen = 0;
    FILE *out = open_memstream(&text, &textlen);
    if (!out) {
        cclc_compilation_free(&c);
        free(source);
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    ccl_result_t r = CCL_OK;
    if (rc == COMPILE_OK) {
        cclc_verify_explain(out, c.prog, &c.proof);
    } else {
        fputs(c.diag.out ? c.diag.out : "(no diagnostics)\n", out);
        if (c.diag.nerrors > 1)
            fprintf(out, "%d errors\n", c.diag.nerrors);
        r = rc == COMPILE_NOT_ADMITTED ? CCL_ERR_INVALID_ARGUMENT
            : rc == COMPILE_OUT_OF_MEMORY ? CCL_ERR_OUT_OF_MEMORY : CCL_ERR_COMPILE;
    }
    if (fclose(out) != 0 || !text) {
        free(text);
        cclc_compilation_free(&c);
        free(source);
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    cclc_compilation_free(&c);
    free(source);
    put_report(text, buf, len, needed);
    if (r == CCL_ERR_INVALID_ARGUMENT)
        ccl__set_error(NULL, r, "%s: argument 'nranks': %s does not admit N=%d:\n%s", fn, file, nranks, text);
    else if (r != CCL_OK)
        ccl__set_error(NULL, r, "%s: %s does not compile for N=%d:\n%s", fn, file, nranks, text);
    free(text);
    return r;
}
