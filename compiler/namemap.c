/* namemap.c: a hash map from names to small integers, in an arena.
 *
 * Name lookups of the compiler (bindings in scope, buffer names) go through one, so a
 * program with a hundred thousand names compiles in linear time. Open addressing with
 * linear probing; the table doubles at half full. Keys are compared as strings and are
 * not copied: they must live as long as the map (the parse's arena). */
#include <string.h>

#include "cclc.h"

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The slot of name: where it is, or the empty slot where it would go. */
static int slot_of(const NameMap *m, const char *name)
{
    int mask = m->cap - 1, i = (int)(name_hash(name) & (uint64_t)mask);
    while (m->keys[i] && strcmp(m->keys[i], name))
        i = (i + 1) & mask;
    return i;
}

int cclc_namemap_get(const NameMap *m, const char *name)
{
    if (!m->cap)
        return -1;
    int i = slot_of(m, name);
    return m->keys[i] ? m->vals[i] : -1;
}

void cclc_namemap_put(NameMap *m, Arena *a, const char *name, int value)
{
    if (2 * (m->n + 1) > m->cap) {
        NameMap bigger = {.cap = m->cap ? 2 * m->cap : 64};
        bigger.keys = cclc_arena_alloc(a, sizeof *bigger.keys * (size_t)bigger.cap);
        bigger.vals = cclc_arena_alloc(a, sizeof *bigger.vals * (size_t)bigger.cap);
        for (int i = 0; i < m->cap; i++)
            if (m->keys[i]) {
                int j = slot_of(&bigger, m->keys[i]);
                bigger.keys[j] = m->keys[i];
                bigger.vals[j] = m->vals[i];
                bigger.n++;
            }
        *m = bigger;
    }
    int i = slot_of(m, name);
    if (!m->keys[i]) {
        m->keys[i] = name;
        m->n++;
    }
    m->vals[i] = value;
}
