/* segments.h: the CPU backend's side of the v-collectives (segments.c); the common
 * side, the entry points and the tables' layout, is runtime/src/vcoll.c, with
 * backend.h's CclVCall and vlayout.c's helpers. Included by cpu/backend.c only. */
#ifndef CCL_CPU_SEGMENTS_H
#define CCL_CPU_SEGMENTS_H

#include "backend.h"

/* Every rank's segment table of one call, as the call sees it once the identities
 * agree, and the layout that follows from them. */
typedef struct {
    Collective coll;
    int N, K, in_chunks;
    size_t es;
    size_t cs_max;                   /* the chunk stride of the longest segment: scratch's */
    uint64_t *tab;                   /* N tables of CCL__VT_WORDS(N) words, rank-major */
    uint64_t hash;                   /* of every table: equal hashes, equal layouts */
} CpuSegs;

/* The worker's last v call: a call whose algorithm or layout differs from it fences
 * first (an all-rank barrier), since its scratch and staging sit elsewhere. */
typedef struct {
    const void *alg;
    uint64_t hash;                   /* CpuSegs.hash */
} CpuSegsLast;
/* 1 when this call must fence; records it as the last. */
int ccl__segs_moved(CpuSegsLast *last, const void *alg, const CpuSegs *sg);

/* Peer p's in and out as this process maps them, from its table (NULL: the plan never
 * reaches it). */
void ccl__segs_peer_bases(const CpuSegs *sg, ccl_comm_t *comm, int p, char **in, char **out);

/* The words of a v call's table that a Task keeps (the call's own are freed when
 * be->run returns). */
static inline size_t ccl__segs_table_bytes(int N) { return CCL__VT_WORDS(N) * sizeof(uint64_t); }

/* Publishes this rank's table in its vring entry of call seq, before the identity. */
void ccl__segs_publish(ccl_comm_t *comm, const CclCall *c);

/* After every peer's identity matched: reads every rank's table into sg (sg->tab
 * malloc'd: ccl__segs_free), checks that every out segment's count equals its
 * sender's (else CCL_ERR_INVALID_ARGUMENT), and that every rank's scratch and staging
 * fit the v arena (else CCL_ERR_OUT_OF_MEMORY); the message, the same on every rank,
 * in err. */
ccl_result_t ccl__segs_load(ccl_comm_t *comm, const CclCall *c, CpuSegs *sg, char *err, size_t len);
void ccl__segs_free(CpuSegs *sg);

/* Chunk j of data op `op`: each operand's element offset (offs[k], destinations first)
 * and the chunk's length, by the segment of the data it moves (op->content). */
void ccl__segs_chunk(const CpuSegs *sg, const PlanOp *op, int j, size_t *offs, size_t *len);

/* The staged out's segments into the user's recv (gaps between them untouched). */
void ccl__segs_stage_out(const CpuSegs *sg, int rank, void *recv, const void *out);

#endif
