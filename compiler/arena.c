/* arena.c: bump allocation for one compilation.
 *
 * Every structure of a compilation (AST, program, plan, strings) is carved from one
 * arena and freed with it, so no pass frees anything and no structure has mixed
 * ownership. Blocks grow geometrically; large requests get a block of their own.
 *
 * Out of memory. Inside libccl an allocation failure must not abort the user's
 * process, so cclc_compile_source asks to be jumped back to (cclc_oom_jump, per thread) and
 * returns COMPILE_OUT_OF_MEMORY instead. Every allocation of a compilation goes through
 * here (the arena, and cclc_calloc/cclc_realloc for the verifier's and expand's heap
 * memory); with no jump set (the cclc driver) a failure is internal_error as before.
 * Heap memory a pass held when the jump came is lost: a leak on that path only.
 *
 * Test hook: with CCL_TEST_FAIL_ALLOC=k in the environment the k-th of these
 * allocations (counted from when the variable last changed) fails, so the tests can
 * reach every failure point. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

typedef struct Block {
    struct Block *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
} ArenaBlock;

struct Arena {
    ArenaBlock *head;
    size_t next_size;
};

/* Where this thread's failed allocations jump; NULL: internal_error. */
static _Thread_local jmp_buf *oom_env;

jmp_buf *cclc_oom_jump(jmp_buf *env)
{
    jmp_buf *old = oom_env;
    oom_env = env;
    return old;
}

static _Noreturn void out_of_memory(size_t bytes)
{
    if (oom_env)
        longjmp(*oom_env, 1);
    internal_error("out of memory (asked for %zu bytes)", bytes);
}

/* The test hook: 1 when this allocation is the k-th of CCL_TEST_FAIL_ALLOC=k. The
 * count restarts whenever the variable's value changes; a test sets it from one thread
 * while no other compiles. */
static int test_fails(void)
{
    static long count;
    static char seen[32];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const char *k = getenv("CCL_TEST_FAIL_ALLOC");
    if (!k || !*k)
        return 0;
    pthread_mutex_lock(&mu);
    if (strncmp(k, seen, sizeof seen)) {
        snprintf(seen, sizeof seen, "%s", k);
        count = 0;
    }
    long n = ++count;
    pthread_mutex_unlock(&mu);
    return n == atol(k);
}

void *cclc_calloc(size_t n, size_t size)
{
    void *p = test_fails() ? NULL : calloc(n ? n : 1, size ? size : 1);
    if (!p)
        out_of_memory(n * size);
    return p;
}

void *cclc_realloc(void *p, size_t size)
{
    void *q = test_fails() ? NULL : realloc(p, size ? size : 1);
    if (!q)
        out_of_memory(size);
    return q;
}

Arena *cclc_arena_new(void)
{
    Arena *a = cclc_calloc(1, sizeof *a);
    a->next_size = 64 * 1024;
    return a;
}

void cclc_arena_free(Arena *a)
{
    if (!a)
        return;
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *cclc_arena_alloc(Arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bsize = size > a->next_size ? size : a->next_size;
        b = test_fails() ? NULL : malloc(sizeof *b + bsize);
        if (!b)
            out_of_memory(bsize);
        b->used = 0;
        b->size = bsize;
        b->next = a->head;
        a->head = b;
        if (a->next_size < (64u << 20))
            a->next_size *= 2;
    }
    void *p = b->data + b->used;
    b->used += size;
    memset(p, 0, size);
    return p;
}

char *cclc_arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = cclc_arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *cclc_arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = cclc_arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}
