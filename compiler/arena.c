/* arena.c: bump allocation for one compilation.
 *
 * Every structure of a compilation (AST, program, plan, strings) is carved from one
 * arena and freed with it, so no pass frees anything and no structure has mixed
 * ownership. Blocks grow geometrically; large requests get a block of their own.
 * Inside libccl an allocation failure must not abort the user's process, so the
 * compilation can ask to be jumped back to (arena_on_oom) and report it instead. */
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
    jmp_buf *on_oom;        /* where an allocation failure jumps; NULL: internal_error */
};

void arena_on_oom(Arena *a, jmp_buf *env)
{
    a->on_oom = env;
}

Arena *arena_new(void)
{
    Arena *a = calloc(1, sizeof *a);
    if (!a)
        internal_error("out of memory");
    a->next_size = 64 * 1024;
    return a;
}

void arena_free(Arena *a)
{
    if (!a)
        return;
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *arena_alloc(Arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bsize = size > a->next_size ? size : a->next_size;
        b = malloc(sizeof *b + bsize);
        if (!b && a->on_oom)
            longjmp(*a->on_oom, 1);
        if (!b)
            internal_error("out of memory (asked for %zu bytes)", bsize);
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

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}
