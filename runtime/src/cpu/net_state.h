/* cpu/net_state.h: the inter-node proxy's messages, its kept state and its rings (net.c's
 * head says what each message does). Private to cpu/net.c, which alone includes it: the
 * types apart from the code, so that each file stays short. */
#ifndef CCL_CPU_NET_STATE_H
#define CCL_CPU_NET_STATE_H

#include <pthread.h>

#include "cpu/net.h"

enum { NET_INLINE = 8 << 10, NET_PIECE = 1 << 30 };
enum { F_DATA_FOLLOWS = 1,      /* PUT, P2P: the piece is the sender's next message */
       F_GAVE_UP = 4 };         /* BOOT: the sender gave up the split numbered a >> 32 */
enum { M_PUT = 1, M_ADD, M_ACK, M_IDENT, M_ARRIVE, M_ABORT, M_BYE, M_CTS, M_P2P, M_BOOT, M_EAGER, M_RTS };
enum { CREDITS = CCL__NET_CREDITS };
_Static_assert((int)CCL__NET_EAGER_BYTES <= (int)NET_INLINE, "an eager message is one inline message");

/* Every header also carries what an ACK says (net.c's head), as of when it was posted. */
typedef struct {
    uint32_t kind, flags;
    uint64_t a, b;
    uint64_t applied, complete;
    char pad[40];
} NetHdr;
_Static_assert(sizeof(NetHdr) == 80, "the header is 80 bytes");
_Static_assert(sizeof(CclP2pSlot) <= sizeof(((NetHdr *)0)->pad), "a message's CclP2pSlot fits the header");

/* Point-to-point's rings, each CREDITS slots per peer, message nth in slot nth % CREDITS.
 * The credits keep every message of a pair that is announced and not complete within
 * CREDITS of each other, so no slot is reused before its last use is over:
 *   cts    the sender's: nth + 1 once the CTS of its large message nth has come;
 *   ring   the receiver's: the EAGER or RTS message nth (header and payload, a copy the
 *          proxy made), until the worker takes it (NULL then);
 *   rx     the receiver's: large message nth's recv, registered by the worker before its
 *          CTS goes out (seq = nth + 1); the proxy receives the data into buf and sets got
 *          to nth + 1 once the last piece has landed. */
typedef struct {
    _Atomic uint64_t seq, got;
    char *buf;
    size_t bytes;
} NetRecv;

/* A BOOT message kept for the split's thread (ccl__cpu_net_boot_take). */
typedef struct BootMsg {
    struct BootMsg *next;
    uint64_t tag;
    uint32_t flags;
    size_t bytes;
    char data[];
} BootMsg;

typedef struct Msg {
    struct Msg *next;
    int peer;
    size_t bytes;               /* header and payload */
    void *req, *dreq;           /* the header's send, and the piece's (F_DATA_FOLLOWS) */
    const void *data;           /* F_DATA_FOLLOWS: the piece, where it lies */
    NetHdr h;                   /* the payload follows */
} Msg;

struct CpuNet {
    ccl_comm_t *comm;
    ccl_net_t t;
    int N, me, L;
    pthread_t thread;
    pthread_mutex_t mu;
    Msg *head, *tail;           /* queued by the comm's threads */
    Msg *flight, *flight_tail;  /* posted, not yet complete (proxy only) */
    Msg *dropped;               /* posted to a rank lost since: the transport may hold them
                                   still, so they are freed only at the end (proxy only) */
    pthread_mutex_t sweep_mu;   /* held by whoever sweeps: the proxy thread, or the worker
                                   helping it (ccl__cpu_net_progress); "proxy only" below
                                   means under it */
    double last_busy;           /* when a sweep last did something (proxy only) */
    _Atomic int helping;        /* the worker sweeps while it waits (ccl__cpu_net_helping) */
    _Atomic int stop;
    int broken;                 /* the transport failed: no more calls into it */
    int *cut, ncut;             /* per rank: its connection failed, no more calls for it
                                   (lost()); how many (proxy only) */
    int telling;                /* lost() is telling the other nodes of rank telling - 1
                                   (proxy only) */
    uint64_t sent, sent_bytes, recvd; /* messages and bytes, for the log at the end */
    _Atomic uint64_t *posted, *acked, *arrived; /* per rank */
    _Atomic int *flags;         /* per rank: what ABORT messages said of it (net.h) */
    _Atomic int *lost_by;       /* per rank: 1 + the rank whose connection to it failed */
    uint64_t *applied, *ack_sent;
    int *bye;
    void **rreq;
    char **rbuf;
    int *rdata;                 /* per rank: the posted receive is a PUT's piece (1, into the
                                   heap) or a P2P's (2, into a recv's buffer) */
    uint64_t *idents;           /* [N][CCL_IDENT_RING] CclIdents, as words */
    _Atomic uint64_t *cts;      /* [N][CREDITS], point-to-point's rings (above) */
    _Atomic(char *) *ring;      /* [N][CREDITS] */
    NetRecv *rx;                /* [N][CREDITS] */
    uint64_t *rx_nth;           /* per rank, rdata 2: the message whose piece is being received, */
    int *rx_last;               /* and whether the piece is its last */
    _Atomic uint64_t *taken;    /* per rank: this rank's messages to it whose recvs completed
                                   (its ACKs say; the sender's credits) */
    _Atomic uint64_t *complete; /* per rank: messages from it whose recvs completed here (the
                                   worker's), */
    uint64_t *complete_sent;    /* and what the last ACK to it said (proxy only) */
    _Atomic uint64_t *arrivals; /* per rank: its messages announced here (the last's nth + 1) */
    _Atomic uint64_t *expected; /* per rank: the recvs from it posted so far (the worker's) */
    _Atomic int *held;          /* per rank: its messages in the ring now; */
    int held_peak;              /* the most of one rank's at once (proxy only), */
    uint64_t early;             /* and how many came before their recv (proxy only; the log) */
    BootMsg **boot;             /* per rank: BOOT messages not yet taken, in arrival order (under mu) */
};

#endif
