/* notes.c: notes between two ranks of one host (base.h), in slots of the comm's
 * mailboxes (mailbox.c maps them; comm->notes says where).
 *
 * A slot has one writer (the sender) and one reader (the receiver): the sender fills the
 * data only once the receiver has taken the previous note, and publishes them with
 * `sent` (release); the receiver copies them out before it moves `taken` (release), so
 * neither ever waits. Calls only the base. */
#include <string.h>

#include "base.h"

/* The slot from rank `from` to rank `to` on `lane`, or NULL where notes do not go. */
static CclNoteSlot *slot(const CclNotes *n, int from, int to, int lane, size_t bytes)
{
    if (!n || from < 0 || to < 0 || from >= n->nranks || to >= n->nranks || from >= CCL__NOTE_RANKS || lane < 0 ||
        lane >= CCL__NOTE_LANES || bytes > CCL__NOTE_BYTES || !n->inbox[to])
        return NULL;
    return &n->inbox[to][from * CCL__NOTE_LANES + lane];
}

int ccl__note_send(CclNotes *n, int to, int lane, const void *note, size_t bytes)
{
    CclNoteSlot *s = slot(n, n ? n->rank : -1, to, lane, bytes);
    if (!s)
        return -1;
    uint64_t sent = atomic_load_explicit(&s->sent, memory_order_relaxed);
    if (atomic_load_explicit(&s->taken, memory_order_acquire) != sent)
        return 0;
    memcpy(s->data, note, bytes);
    atomic_store_explicit(&s->sent, sent + 1, memory_order_release);
    return 1;
}

int ccl__note_take(CclNotes *n, int from, int lane, void *note, size_t bytes)
{
    CclNoteSlot *s = slot(n, from, n ? n->rank : -1, lane, bytes);
    if (!s)
        return -1;
    uint64_t sent = atomic_load_explicit(&s->sent, memory_order_acquire);
    if (atomic_load_explicit(&s->taken, memory_order_relaxed) == sent)
        return 0;
    memcpy(note, s->data, bytes);
    atomic_store_explicit(&s->taken, sent, memory_order_release);
    return 1;
}
