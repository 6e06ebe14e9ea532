/* notes.c: notes between two ranks (base.h, runtime/src/notes.c), which the GPU
 * backend's IPC handshake rides on (gpu/ipc.c).
 *
 *  - slots: one note in flight per pair and lane (a second send waits for the take),
 *    lanes independent, a take copies the note once, and every refusal (-1): no notes,
 *    a rank outside the comm, a peer not mapped, a sender at or past CCL__NOTE_RANKS, a
 *    note too long;
 *  - stream: a writer thread and a reader thread pass 200,000 notes of 112 bytes each
 *    through one slot; every note arrives once, in order, whole (no byte of another);
 *  - comms: the comm's own notes (comm->notes, over its mailboxes), 3 ranks as threads
 *    and 3 as forked processes: every rank sends every other rank a note on each lane and
 *    takes each peer's.
 * Prints "ok notes/..." or "FAIL notes/...: why"; exits 1 on any failure. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forked_ranks.h"

static int failures;

#define FAIL(...)                  \
    do {                           \
        printf("FAIL notes/");     \
        printf(__VA_ARGS__);       \
        printf("\n");              \
        failures++;                \
    } while (0)

/* Rank `rank`'s view of n ranks' inboxes (shared by every view). */
static CclNotes view(CclNoteSlot **inbox, int n, int rank)
{
    return (CclNotes){.nranks = n, .rank = rank, .inbox = inbox};
}

static void slots(void)
{
    int f0 = failures;
    enum { N = 3 };
    CclNoteSlot *boxes[N];
    for (int p = 0; p < N; p++)
        boxes[p] = calloc(CCL__NOTE_RANKS * CCL__NOTE_LANES, sizeof(CclNoteSlot));
    CclNotes a = view(boxes, N, 0), b = view(boxes, N, 1);
    char note[CCL__NOTE_BYTES] = "first", got[CCL__NOTE_BYTES];
    if (ccl__note_send(&a, 1, 0, note, 6) != 1) FAIL("slots: the first send was not posted");
    if (ccl__note_send(&a, 1, 0, "second", 7) != 0) FAIL("slots: a second send before the take was posted");
    if (ccl__note_send(&a, 1, 1, "other lane", 11) != 1) FAIL("slots: lane 1 waited for lane 0");
    if (ccl__note_take(&b, 2, 0, got, 6) != 0) FAIL("slots: rank 2 had a note it never sent");
    if (ccl__note_take(&b, 0, 0, got, 6) != 1 || strcmp(got, "first")) FAIL("slots: the take did not copy the note");
    if (ccl__note_take(&b, 0, 0, got, 6) != 0) FAIL("slots: one note was taken twice");
    if (ccl__note_take(&b, 0, 1, got, 11) != 1 || strcmp(got, "other lane")) FAIL("slots: lane 1's note was lost");
    if (ccl__note_send(&a, 1, 0, "second", 7) != 1) FAIL("slots: a send after the take was refused");
    if (ccl__note_take(&b, 0, 0, got, 7) != 1 || strcmp(got, "second")) FAIL("slots: the second note is wrong");
    /* Refusals. */
    if (ccl__note_send(NULL, 1, 0, note, 1) != -1 || ccl__note_take(NULL, 0, 0, got, 1) != -1)
        FAIL("slots: no notes, yet not refused");
    if (ccl__note_send(&a, N, 0, note, 1) != -1 || ccl__note_send(&a, -1, 0, note, 1) != -1)
        FAIL("slots: a rank outside the comm was not refused");
    if (ccl__note_send(&a, 1, CCL__NOTE_LANES, note, 1) != -1) FAIL("slots: a lane past the last was not refused");
    if (ccl__note_send(&a, 1, 0, note, CCL__NOTE_BYTES + 1) != -1) FAIL("slots: a note too long was not refused");
    CclNoteSlot *mapped = boxes[2];
    boxes[2] = NULL;
    if (ccl__note_send(&a, 2, 0, note, 1) != -1) FAIL("slots: a peer not mapped here was not refused");
    boxes[2] = mapped;
    CclNotes far = view(boxes, CCL__NOTE_RANKS + 1, CCL__NOTE_RANKS);
    CclNoteSlot *wide[CCL__NOTE_RANKS + 1] = {0};
    far.inbox = wide;
    wide[0] = boxes[0];
    if (ccl__note_send(&far, 0, 0, note, 1) != -1) FAIL("slots: a sender past CCL__NOTE_RANKS was not refused");
    for (int p = 0; p < N; p++)
        free(boxes[p]);
    if (failures == f0)
        printf("ok notes/slots (one in flight per lane, lanes apart, every refusal)\n");
}

/* ---- one slot, two threads ---- */

enum { STREAM = 200000 };
static CclNoteSlot *stream_boxes[2];

static void *writer(void *arg)
{
    (void)arg;
    CclNotes w = view(stream_boxes, 2, 0);
    unsigned char note[CCL__NOTE_BYTES];
    for (uint32_t k = 0; k < STREAM;) {
        memset(note, (int)(k & 0xff), sizeof note);
        memcpy(note, &k, sizeof k);
        int r = ccl__note_send(&w, 1, 0, note, sizeof note);
        if (r < 0)
            return "refused";
        k += r;
    }
    return NULL;
}

static void stream(void)
{
    int f0 = failures;
    for (int p = 0; p < 2; p++)
        stream_boxes[p] = calloc(CCL__NOTE_RANKS * CCL__NOTE_LANES, sizeof(CclNoteSlot));
    pthread_t t;
    pthread_create(&t, NULL, writer, NULL);
    CclNotes rd = view(stream_boxes, 2, 1);
    unsigned char note[CCL__NOTE_BYTES];
    for (uint32_t want = 0; want < STREAM && failures == f0;) {
        int r = ccl__note_take(&rd, 0, 0, note, sizeof note);
        if (r < 0) {
            FAIL("stream: a take was refused");
            break;
        }
        if (!r)
            continue;
        uint32_t k;
        memcpy(&k, note, sizeof k);
        if (k != want)
            FAIL("stream: note %u arrived where %u was due", k, want);
        for (size_t i = sizeof k; i < sizeof note && failures == f0; i++)
            if (note[i] != (k & 0xff))
                FAIL("stream: note %u is torn: byte %zu is 0x%02x", k, i, note[i]);
        want++;
    }
    void *why;
    pthread_join(t, &why);
    if (why)
        FAIL("stream: the writer's send was %s", (const char *)why);
    for (int p = 0; p < 2; p++)
        free(stream_boxes[p]);
    if (failures == f0)
        printf("ok notes/stream (%d notes of %d bytes through one slot, in order, whole)\n", STREAM, CCL__NOTE_BYTES);
}

/* ---- a comm's own notes ---- */

/* Every rank sends every other rank "from R to P lane L" on both lanes, then takes each
 * peer's (polling: a peer may not have sent yet). 0 when all came right. */
static int exchange(ccl_comm_t *comm, const char *mode)
{
    int me = comm->rank, n = comm->nranks, bad = 0;
    if (!comm->notes) {
        FAIL("comms/%s: rank %d's comm has no notes", mode, me);
        return -1;
    }
    for (int p = 0; p < n; p++)
        for (int lane = 0; lane < CCL__NOTE_LANES && p != me; lane++) {
            char note[64];
            snprintf(note, sizeof note, "from %d to %d lane %d", me, p, lane);
            if (ccl__note_send(comm->notes, p, lane, note, sizeof note) != 1) {
                FAIL("comms/%s: rank %d's note to rank %d on lane %d was not posted", mode, me, p, lane);
                bad = 1;
            }
        }
    for (int p = 0; p < n; p++)
        for (int lane = 0; lane < CCL__NOTE_LANES && p != me; lane++) {
            char got[64], want[64];
            snprintf(want, sizeof want, "from %d to %d lane %d", p, me, lane);
            int r = 0;
            for (long spin = 0; spin < 200000000L && (r = ccl__note_take(comm->notes, p, lane, got, sizeof got)) == 0;
                 spin++) {}
            if (r != 1 || strcmp(got, want)) {
                FAIL("comms/%s: rank %d took %s from rank %d on lane %d", mode, me, r == 1 ? got : "nothing", p, lane);
                bad = 1;
            }
        }
    return bad ? -1 : 0;
}

static ccl_comm_t *thread_comms[3];

static void *thread_rank(void *arg)
{
    return (void *)(intptr_t)exchange(thread_comms[(intptr_t)arg], "threads");
}

static void comms_threads(void)
{
    int f0 = failures;
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    if (ccl_comm_init_all(thread_comms, 3, NULL, &cfg) != CCL_OK) {
        FAIL("comms/threads: init: %s", ccl_comm_last_error(NULL));
        return;
    }
    pthread_t t[3];
    for (intptr_t r = 0; r < 3; r++)
        pthread_create(&t[r], NULL, thread_rank, (void *)r);
    for (int r = 0; r < 3; r++)
        pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++)
        ccl_comm_destroy(thread_comms[r]);
    if (failures == f0)
        printf("ok notes/comms/threads (3 ranks, both lanes, every pair)\n");
}

static int process_rank(int rank, int arg)
{
    (void)arg;
    CclEnvBoot *eb;
    ccl_bootstrap_t boot;
    ccl_algorithm_t *alg;
    ccl_comm_t *comm = forked_rank_open("notes/comms/processes", rank, 10000, "algorithms/allreduce/ring.ccl", &alg,
                                        &eb, &boot);
    if (!comm)
        return 1;
    int r = exchange(comm, "processes");
    boot.barrier(boot.ctx);
    ccl_comm_destroy(comm);
    ccl__env_boot_close(eb);
    return r ? 1 : 0;
}

static void comms_processes(void)
{
    int codes[3], f0 = failures;
    forked_ranks_run("notes-test", 3, process_rank, 0, codes);
    for (int r = 0; r < 3; r++)
        if (codes[r] != 0)
            FAIL("comms/processes: rank %d exited %d", r, codes[r]);
    if (failures == f0)
        printf("ok notes/comms/processes (3 forked ranks, both lanes, every pair)\n");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    slots();
    stream();
    comms_threads();
    comms_processes();
    return failures ? 1 : 0;
}
