/* heap.c: the offset allocator behind the symmetric heap.
 *
 * Takes allocation and free requests in the order the user's thread makes them; gives
 * heap offsets. The invariant that makes memory symmetric: the allocator is a pure
 * function of its request sequence (first fit over a sorted list, no randomness, no
 * addresses), so ranks that make the same requests in the same order get the same
 * offsets. Offsets are CCL__HEAP_ALIGN-aligned. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

void ccl__heap_alloc_init(CclHeapAlloc *h, size_t lo, size_t hi)
{
    memset(h, 0, sizeof *h);
    h->lo = lo;
    h->hi = hi;
}

void ccl__heap_alloc_fini(CclHeapAlloc *h)
{
    free(h->used);
    memset(h, 0, sizeof *h);
}

/* One user allocation's word in CclHeapAlloc.user_sum (splitmix64's finalizer). */
static uint64_t range_word(const struct CclRange *r)
{
    uint64_t x = (uint64_t)r->off * 0x9e3779b97f4a7c15ull ^ (uint64_t)r->bytes;
    x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ x >> 27) * 0x94d049bb133111ebull;
    return x ^ x >> 31;
}

int ccl__heap_alloc(CclHeapAlloc *h, size_t bytes, int user, size_t *off)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes > h->hi - h->lo)
        return -1;
    size_t size = (bytes + CCL__HEAP_ALIGN - 1) / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
    /* First fit: the gap before used[i] starts where used[i-1] ends. */
    size_t start = h->lo;
    int at = h->n;
    for (int i = 0; i < h->n; i++) {
        if (h->used[i].off - start >= size) {
            at = i;
            break;
        }
        start = h->used[i].off + h->used[i].size;
    }
    if (at == h->n && (start > h->hi || h->hi - start < size))
        return -1;
    if (h->n == h->cap) {
        int ncap = h->cap ? 2 * h->cap : 16;
        struct CclRange *nu = realloc(h->used, sizeof *nu * (size_t)ncap);
        if (!nu)
            return -1;
        h->used = nu;
        h->cap = ncap;
    }
    memmove(&h->used[at + 1], &h->used[at], sizeof *h->used * (size_t)(h->n - at));
    h->used[at] = (struct CclRange){start, size, bytes, user};
    h->n++;
    if (user) {
        h->nuser++;
        h->user_sum += range_word(&h->used[at]);
    }
    *off = start;
    return 0;
}

static int find(const CclHeapAlloc *h, size_t off)
{
    int lo = 0, hi = h->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (h->used[mid].off + h->used[mid].size <= off)
            lo = mid + 1;
        else if (h->used[mid].off > off)
            hi = mid - 1;
        else
            return mid;
    }
    return -1;
}

int ccl__heap_free(CclHeapAlloc *h, size_t off)
{
    int i = find(h, off);
    if (i < 0 || h->used[i].off != off)
        return -1;
    if (h->used[i].user) {
        h->nuser--;
        h->user_sum -= range_word(&h->used[i]);
    }
    memmove(&h->used[i], &h->used[i + 1], sizeof *h->used * (size_t)(h->n - i - 1));
    h->n--;
    return 0;
}

int ccl__heap_find_user(const CclHeapAlloc *h, size_t off, size_t bytes, size_t *start, size_t *size)
{
    int i = find(h, off);
    if (i < 0 || !h->used[i].user) {
        *start = *size = 0;
        return -1;
    }
    *start = h->used[i].off;
    *size = h->used[i].bytes;
    return off + bytes <= h->used[i].off + h->used[i].bytes ? 0 : -1;
}

size_t ccl__heap_largest_free(const CclHeapAlloc *h)
{
    size_t start = h->lo, best = 0;
    for (int i = 0; i < h->n; i++) {
        if (h->used[i].off - start > best)
            best = h->used[i].off - start;
        start = h->used[i].off + h->used[i].size;
    }
    if (h->hi > start && h->hi - start > best)
        best = h->hi - start;
    return best / CCL__HEAP_ALIGN * CCL__HEAP_ALIGN;
}
