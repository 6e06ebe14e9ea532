/* tcp.h: what tcp.c, tcpboot.c and tcpnet.c share: the communicator from a unique id
 * over TCP (docs/multinode.md, "A unique id over TCP"). tcpboot.c makes the connections
 * (the root's rendezvous, then a mesh of one connection per pair of ranks) and runs the
 * init's bootstrap over them; tcpnet.c is the transport (ccl_net_t) over the same
 * connections once the init is over; tcp.c has the sockets and addresses under both.
 * Wire structures are fixed-size, integers in network byte order. */
#ifndef CCL_TCP_H
#define CCL_TCP_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "internal.h"

enum { COOKIE = 16, HOST = 64, HELLO_WAIT_MS = 5000, TEXT = 512, FAREWELL = 2048 };

typedef struct {
    uint8_t family, pad;        /* 4 or 6 */
    uint16_t port;
    uint8_t addr[16];
} WireAddr;

typedef struct {                /* a rank to the root; the root's answer is every rank's */
    char magic[8];
    uint8_t cookie[COOKIE];
    uint32_t nranks, rank, timeout_ms, pid;
    WireAddr listen;
    char host[HOST];
} Hello;

typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
    char text[64];              /* "10.0.0.1:4567", "[fd00::1]:4567" */
} Endpoint;


/* Each rank's message in an exchange of the init's bootstrap: this header, then its
 * bytes; or, from a rank whose init failed, a farewell: the header (gave_up 1) and its
 * message (tcpboot.c). A farewell may also come where the transport expects a frame
 * (the peer failed after this rank's exchanges ended): no frame's length begins with
 * BOOT_MAGIC, so tcpnet.c knows it. */
typedef struct {
    char magic[4];
    uint32_t exchange, bytes, gave_up;
} BootHdr;
#define BOOT_MAGIC "CCLX"

/* ---- tcp.c: addresses ---- */

/* e := sa (which may lie in e), with the port unless it is -1, and its text. */
void ccl__tcp_ep_set(Endpoint *e, const struct sockaddr *sa, int port);
void ccl__tcp_wire_of(const Endpoint *e, WireAddr *w);
/* 0, or -1 for a family that is neither 4 nor 6 (damaged bytes). */
int ccl__tcp_ep_of(Endpoint *e, const WireAddr *w);
/* The first address of this host's interfaces (up) that `filter` (CCL_SOCKET_IFNAME's
 * syntax, as NCCL_SOCKET_IFNAME's: "eth,ib", "=eth0", "^docker,lo") admits, IPv4 before
 * IPv6 (never link-local); with no filter, the first IPv4 address that is not loopback.
 * 0, or -1 with why. */
int ccl__tcp_if_address(Endpoint *e, const char *filter, char *why, size_t len);
/* Where the root listens: CCL_BOOTSTRAP_ADDR ("host", "host:port", "[v6]:port"), else
 * CCL_SOCKET_IFNAME's interface, else the first non-loopback IPv4 address, else
 * 127.0.0.1. 0, or -1 with why (the variable and what is wrong with it). */
int ccl__tcp_root_address(Endpoint *e, char *why, size_t len);

/* ---- tcp.c: sockets, every wait bounded by a deadline (ccl__now_ms) ---- */

enum { IO_OK = 0, IO_ERR = -1, IO_TIMEOUT = -2, IO_EOF = -3 };


/* Milliseconds to the deadline, for poll. */
int ccl__tcp_left_ms(double deadline);
/* Moves n bytes to (out) or from a non-blocking socket by the deadline; IO_ERR leaves
 * errno set. */
int ccl__tcp_io_move(int fd, void *buf, size_t n, double deadline, int out);
/* What an IO_ result says, for a message. */
const char *ccl__tcp_io_text(int rc);
void ccl__tcp_no_delay(int fd);
/* A non-blocking socket listening on e (port 0: any; e gets the one it has). fd, or -1
 * with why ("cannot listen on ADDR: ..."). */
int ccl__tcp_listen_on(Endpoint *e, char *why, size_t len);
/* A non-blocking connection to e by the deadline: fd, or -1 with errno (ETIMEDOUT at the
 * deadline). With retry, a refused connection is tried again every 50 ms until then. */
int ccl__tcp_connect_to(const Endpoint *e, double deadline, int retry);
/* The answer to a hello: result (CCL_OK, or why it was refused) and bytes of data (the
 * table, or the refusal's text). */
int ccl__tcp_answer_send(int fd, ccl_result_t result, const void *data, size_t bytes, double deadline);
/* An answer of at most max bytes: *data (malloc'd, NUL after it) and *result; IO_ERR
 * with errno EPROTO for something else than an answer. */
int ccl__tcp_answer_recv(int fd, size_t max, double deadline, ccl_result_t *result, char **data, size_t *bytes);
/* "rank 3 (host, pid 4711)", from its hello. */
const char *ccl__tcp_who(const Hello *h, int rank, char *buf, size_t len);
/* The ranks of [lo, hi) whose have[] is negative (a socket not there, a count short), as
 * "rank 3" or "ranks 3, 5 and 7" (8 named). */
void ccl__tcp_missing(const int *have, int lo, int hi, char *buf, size_t len);

/* ---- a rank's connections: made by tcpboot.c, the transport's in tcpnet.c ---- */

typedef struct TcpReq {
    struct TcpReq *next;
    int peer, recv, complete;
    unsigned char len[8];       /* the frame's length, big-endian: written first, or read first */
    char *buf;
    size_t cap, bytes, moved;   /* moved: of the length and the bytes together */
} TcpReq;

typedef struct {
    int fd, err;                /* err: why the connection ended (errno; ECONNRESET at its end) */
    int used;                   /* messages went through it: release shuts it down gently */
    int mid;                    /* the init's bootstrap stopped midway through a message to it */
    TcpReq *sq, *sq_tail;       /* sends not yet tested, in order (so release frees them all) */
    TcpReq *wq;                 /* the first of them not yet written whole */
    TcpReq *rq;                 /* the one receive */
} TcpPeer;

typedef struct {
    int n, me, timeout_ms;
    uint8_t cookie[COOKIE];
    TcpPeer *peer;
    Hello *table;               /* every rank's hello (host, pid, address), for messages */
    uint32_t exchanges;         /* the bootstrap's allgathers so far */
    char *why;                  /* during the init: where a failing allgather says why */
    size_t whylen;
} TcpNet;


/* ---- tcpnet.c ---- */

/* The transport over t's connections; its release (at the comm's destroy, or when its
 * init fails) is ccl__tcp_net_release. Its split is tcpboot.c's to set: making a child's
 * connections is the bootstrap's work. */
void ccl__tcp_net_ops(TcpNet *t, ccl_net_t *net);
/* Shuts the connections that carried messages for writing and reads them until their
 * peers shut them too (bounded: tcpnet.c says why), then closes all and frees t. */
void ccl__tcp_net_release(void *t);
/* Closes t's connections and frees it, at once. */
void ccl__tcp_net_free(TcpNet *t);

#endif
