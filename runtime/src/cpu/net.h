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
 * "Point-to-point"). Messages are numbered per pair as CclP2pOp.nth, and each side calls
 * these for its messages in that order. The sender announces every message, within its
 * credits: at most CCL__NET_CREDITS of its messages to one peer that the peer's recvs have
 * not completed yet. A message of at most CCL__NET_EAGER_BYTES goes whole at once (EAGER,
 * copied: the send is done when it returns); a larger one sends its header alone (RTS),
 * and its data only once the receiver answers (CTS), straight from the caller's buffer into
 * the recv's. The receiving proxy keeps what arrives (one slot per credit and sender, so
 * that memory stays bounded) until the receiver's worker takes it: the worker, not the
 * sender, compares the header with its recv (a mismatch fails the recv naming both calls,
 * nothing landed), then copies an eager message's data into the recv's buffer or
 * registers that buffer and sends the CTS. The transport keeps a pair's messages in order
 * and the worker takes them in number order, so the k-th send meets the k-th recv. */
enum { CCL__NET_EAGER_BYTES = 8 << 10, CCL__NET_CREDITS = 8 };

/* The sender. How many of its messages to peer peer's recvs have completed (as peer's
 * proxy last said): message nth may be announced while nth < this + CCL__NET_CREDITS. */
uint64_t ccl__cpu_net_p2p_taken(CpuNet *n, int peer);
/* Announces message send->nth: of at most CCL__NET_EAGER_BYTES, whole (src copied; the
 * send is done); else its header alone (RTS), the data to follow ccl__cpu_net_p2p_data
 * once ccl__cpu_net_p2p_cleared says so. 0, or -1 when out of memory (message set). */
int ccl__cpu_net_p2p_announce(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes);
/* 1 once peer has answered the RTS of message nth (its recv matched), else 0. */
int ccl__cpu_net_p2p_cleared(CpuNet *n, int peer, uint64_t nth);
/* Sends message send->nth's data (`bytes` at src, not copied unless small: src must stay
 * intact until *acked(peer) reaches *mark, when it has landed). 0, or -1 when out of
 * memory (message set). On the comm's worker, while no collective runs. */
int ccl__cpu_net_p2p_data(CpuNet *n, int peer, const CclP2pSlot *send, const void *src, size_t bytes,
                          uint64_t *mark);

/* The receiver. Message nth from peer, once its announcement has arrived: 1 for an eager
 * message, 2 for a large one, with *found its header; 0 while it has not come. */
int ccl__cpu_net_p2p_peek(CpuNet *n, int peer, uint64_t nth, CclP2pSlot *found);
/* Takes message nth, which peek found and which matches the recv (`bytes` at buf): an
 * eager one's data are copied into buf, a large one's will land there (buf registered,
 * the CTS sent). 0, or -1 when out of memory (message set). */
int ccl__cpu_net_p2p_take(CpuNet *n, int peer, uint64_t nth, void *buf, size_t bytes);
/* 1 once large message nth, taken, has landed in its buffer. */
int ccl__cpu_net_p2p_landed(CpuNet *n, int peer, uint64_t nth);
/* The recvs from peer are complete up to message upto (exclusive): its credits, which
 * the proxy returns in its next ACK. */
void ccl__cpu_net_p2p_complete(CpuNet *n, int peer, uint64_t upto);
/* The recvs from peer posted so far reach message upto (exclusive): for the log's count of
 * messages that came before their recv. */
void ccl__cpu_net_p2p_expect(CpuNet *n, int peer, uint64_t upto);
/* Messages from peer whose announcement has arrived (the last one's nth + 1). */
uint64_t ccl__cpu_net_p2p_arrived(CpuNet *n, int peer);

/* One sweep of the proxy's (net.c), run by a thread of the comm while it waits for
 * something from another node (point-to-point messages, a block's flush or signal, a
 * call's identities, the all-rank barrier's ARRIVEs), unless the proxy thread is
 * sweeping: a message the waiter queued leaves, and one that arrived is kept, without
 * waiting for the proxy thread to be scheduled. */
void ccl__cpu_net_progress(CpuNet *n);
/* The worker says whether it is in such a wait (on: 1) or not (0): while it is, the proxy
 * thread naps between its own sweeps instead of only yielding. */
void ccl__cpu_net_helping(CpuNet *n, int on);

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
