/* cpu/net_state.h: the inter-node proxy's messages, its kept state and its rings (net.c's
 * head says what each message does). Private to cpu/net.c, which alone includes it: the
 * types apart from the code, so that each file stays short. */
#ifndef CCL_CPU_NET_STATE_H
#define CCL_CPU_NET_STATE_H

#include <pthread.h>

#include "cpu/net.h"

enum { NET_INLINE = 8 << 10, NET_PIECE = 1 << 30 };
enum { F_DATA_FOLLOWS = 1,      /* PUT, P2P: the piece is the sender's next message */
       F_MISMATCH = 2,          /* P2P: no data; the sender's call does not match the CTS */
       F_GAVE_UP = 4 };         /* BOOT: the sender gave up the split numbered a >> 32 */
enum { M_PUT = 1, M_ADD, M_ACK, M_IDENT, M_ARRIVE, M_ABORT, M_BYE, M_CTS, M_P2P, M_BOOT, M_EAGER };
enum { WIN = CCL__NET_P2P_WINDOW, CREDITS = CCL__NET_EAGER_CREDITS };
_Static_assert((int)CCL__NET_EAGER_BYTES <= (int)NET_INLINE, "an eager message is one inline message");

typedef struct {
    uint32_t kind, flags;
    uint64_t a, b;
    char pad[40];
} NetHdr;
_Static_assert(sizeof(NetHdr) == 64, "the header is 64 bytes");
_Static_assert(sizeof(CclP2pSlot) <= sizeof(((NetHdr *)0)->pad), "a CTS's and a P2P's CclP2pSlot fits the header");

/* Point-to-point, the sender's side: the CTS of message nth from rank p, in slot nth % WIN
 * of p's ring (seq = nth + 1 once it is there). The receiver sends CTS nth + WIN only once
 * message nth has landed, which, unless it went eager (whose CTS nobody reads), the sender
 * sent only after reading CTS nth: so a slot is never overwritten before it is read. */
typedef struct {
    _Atomic uint64_t seq;
    uint64_t count, dtype;
} NetCts;

/* The receiver's side: recv nth from rank p, registered by the worker before its CTS
 * goes out (seq = nth + 1), in slot nth % WIN; the proxy receives the message's pieces into
 * buf. want: the recv's header, which an eager message must match. bad: the sender
 * refused the match (F_MISMATCH), or an eager message did not match; found is its header. */
typedef struct {
    _Atomic uint64_t seq;
    char *buf;
    size_t bytes;
    CclP2pSlot want;
    _Atomic int bad;
    CclP2pSlot found;
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
    NetCts *cts;                /* [N][W], point-to-point (above) */
    NetRecv *rx;                /* [N][W] */
    _Atomic uint64_t *cleared;  /* per rank: messages to it it has cleared (the last CTS's nth + 1) */
    _Atomic uint64_t *landed;   /* per rank: messages from it wholly received (the last's nth + 1) */
    uint64_t *rx_nth;           /* per rank, rdata 2: the message whose piece is being received, */
    int *rx_last;               /* and whether the piece is its last */
    char **early;               /* [N][CREDITS]: EAGER messages (header and payload) that came
                                   before their recv could take them, message nth in slot
                                   nth % CREDITS (proxy only) */
    _Atomic uint64_t *taken;    /* per rank: this rank's messages to it that have landed there
                                   (its ACKs say; the sender's credits) */
    uint64_t *landed_sent;      /* per rank: the landed count the last ACK to it carried */
    uint64_t early_total;       /* EAGER messages that had to wait for their recv, */
    int early_held, early_peak; /* how many wait now, and at most (for the log) */
    BootMsg **boot;             /* per rank: BOOT messages not yet taken, in arrival order (under mu) */
};

#endif
