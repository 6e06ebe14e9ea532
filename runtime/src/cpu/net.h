/* cpu/net.h: the CPU backend's inter-node proxy (net.c), for communicators of several
 * nodes (docs/multinode.md). Included by cpu/backend.c and cpu/waits.c only. */
#ifndef CCL_CPU_NET_H
#define CCL_CPU_NET_H

#include "backend.h"

typedef struct CpuNet CpuNet;

/* What an abort message says of the rank it names (ccl__cpu_net_flags): its node's ranks
 * found its process gone, it called ccl_comm_abort, or a rank's connection to it failed
 * (the transport lost it; the message names that rank too). */
enum { CCL__NET_GONE = 1, CCL__NET_ABORTED = 2, CCL__NET_LOST = 4 };

/* Starts the proxy thread of comm (comm->nnodes > 1; its own heap mapped): posts a
 * receive per rank of another node. On failure the message is set. */
ccl_result_t ccl__cpu_net_start(ccl_comm_t *comm, CpuNet **out);
/* Sends what is queued, says goodbye to every remote rank and serves their messages until
 * each has said goodbye too (bounded by the timeout; shortly after an abort), cancels the
 * receives and joins the thread. */
void ccl__cpu_net_stop(CpuNet *n);

/* A net put: `bytes` at src into rank peer's heap at offset off, sent in pieces. The
 * data are copied before it returns. 0, or -1 when out of memory (message set). */
int ccl__cpu_net_put(CpuNet *n, int peer, size_t off, const void *src, size_t bytes);
/* A signal: adds 1 (release) to the 64-bit word at offset off of peer's heap, after
 * every put posted to peer before it has landed. */
int ccl__cpu_net_add(CpuNet *n, int peer, size_t off);
/* Flush: the pieces posted to peer so far, and how many of them peer has applied. */
uint64_t ccl__cpu_net_posted(CpuNet *n, int peer);
_Atomic uint64_t *ccl__cpu_net_acked(CpuNet *n, int peer);

/* Point-to-point with a rank of another node (cpu/p2p.c drives it; docs/multinode.md,
 * "Point-to-point"). The receiver clears each message with a CTS, and the sender of a
 * large message sends it only then, straight into the recv's buffer: so a large message
 * never waits in a buffer of the proxy, and the sender learns the recv's count and dtype
 * before it sends a byte. A message of at most CCL__NET_EAGER_BYTES goes at once
 * instead (eager), and waits, if its recv has not come yet, in the receiving proxy: at
 * most CCL__NET_EAGER_CREDITS of them per pair (the sender's credits, returned as recvs
 * take them), so that memory stays bounded. At most CCL__NET_P2P_WINDOW messages from
 * one rank to another are cleared and not yet landed (the rings of net.c are that
 * long). Messages are numbered per pair as CclP2pOp.nth; each side calls these for its
 * messages in that order, and a message lands only after every earlier one of its pair. */
enum { CCL__NET_P2P_WINDOW = 16, CCL__NET_EAGER_BYTES = 8 << 10, CCL__NET_EAGER_CREDITS = 8 };
/* The receiver: recv message recv->nth from peer (its count and dtype in *recv) into
 * buf, `bytes` long; requires recv->nth < ccl__cpu_net_p2p_landed(peer) + the window. */
int ccl__cpu_net_p2p_recv(CpuNet *n, int peer, const CclP2pSlot *recv, void *buf, size_t bytes);
/* Messages from peer wholly received so far (the last one's nth + 1). */
uint64_t ccl__cpu_net_p2p_landed(CpuNet *n, int peer);
/* 1 when peer refused message nth, or its eager message nth does not match the recv:
 * *found is its header (nothing of it landed); else 0. */
int ccl__cpu_net_p2p_refused(CpuNet *n, int peer, uint64_t nth, CclP2pSlot *found);
/* The sender: 1 when peer has cleared message nth to it (*count, *dtype: its recv's),
 * else 0; and how many messages peer has cleared in all. */
int ccl__cpu_net_p2p_cleared(CpuNet *n, int peer, uint64_t nth, uint64_t *count, uint64_t *dtype);
uint64_t ccl__cpu_net_p2p_cleared_upto(CpuNet *n, int peer);
/* Sends message send->nth (`bytes` at src, not copied unless small: src must stay
 * intact until *acked(peer) reaches *mark, when it has landed); refuse: only the header,
 * flagged so that the receiver fails naming both calls (no mark). 0, or -1 when out of
 * memory (message set). On the comm's worker, while no collective runs. */
int ccl__cpu_net_p2p_send(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes, int refuse,
                          uint64_t *mark);
/* Sends message send->nth of at most CCL__NET_EAGER_BYTES (copied) without waiting for
 * its CTS; requires send->nth < ccl__cpu_net_p2p_taken(peer) + CCL__NET_EAGER_CREDITS.
 * Its recv checks it (a mismatch fails the recv, naming both calls). 0, or -1 when out of
 * memory (message set). */
int ccl__cpu_net_p2p_eager(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes);
/* The sender: how many of its messages to peer peer's recvs have taken so far (the last
 * one's nth + 1, as peer's proxy last said): a message is done once this passes it. */
uint64_t ccl__cpu_net_p2p_taken(CpuNet *n, int peer);

/* This rank's identity of a call, to every rank of another node, and a remote rank's
 * for seq as it arrived (1, or 0 when it has not). */
int ccl__cpu_net_ident(CpuNet *n, const CclIdent *id);
int ccl__cpu_net_ident_read(CpuNet *n, int p, uint64_t seq, CclIdent *out);
/* The all-rank barrier's arrival word, to every rank of another node, and what remote
 * rank p's arrived at. */
int ccl__cpu_net_arrive(CpuNet *n, uint64_t k);
_Atomic uint64_t *ccl__cpu_net_arrived(CpuNet *n, int p);
/* Tells every rank of another node to stop on behalf of rank d (abort value d + 1),
 * with what is known of d (CCL__NET_GONE, CCL__NET_ABORTED; CCL__NET_LOST with `by`, the
 * rank whose connection to d failed, else -1); and what such messages said of rank p,
 * with *by (-1 when no rank said it lost p). */
void ccl__cpu_net_abort(CpuNet *n, int d, int flags, int by);
int ccl__cpu_net_flags(CpuNet *n, int p, int *by);

/* ccl_comm_split's bootstrap with a rank of another node (mailbox.c, through
 * CclBackend.boot_send and boot_take): `bytes` (at most 8 KiB) of exchange `tag` to peer,
 * or with gave_up the news that this rank gave up split tag >> 32 (the bytes: why); and exchange tag's
 * bytes from peer: 1 once they are in buf, 0 while they have not come, -1 with why when
 * peer gave up that split, sent a different size, left, or the comm was stopped. */
int ccl__cpu_net_boot_send(CpuNet *n, int peer, uint64_t tag, int gave_up, const void *buf, size_t bytes);
int ccl__cpu_net_boot_take(CpuNet *n, int peer, uint64_t tag, void *buf, size_t bytes, char *why, size_t len);

#endif
