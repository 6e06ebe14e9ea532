/* tcpnet.c: the inter-node transport (ccl_net_t) of a communicator from a unique id, over
 * the connections tcpboot.c made (tcp.h; docs/multinode.md, "A unique id over TCP"). Only
 * libccl's proxy (cpu/net.c: its thread, or the comm's worker sweeping in its place, one
 * at a time) calls it, once the init is over.
 *
 * A message is a frame, an 8-byte big-endian length and the bytes, moved by non-blocking
 * calls that the proxy's test() drives. Per peer, sends go out in the order posted (one
 * queue; TCP keeps their bytes in order) and one receive at a time reads exactly one
 * frame, and no byte further: one sender's messages arrive in the order sent, as the
 * proxy requires. A connection that fails (reset, closed, a frame larger than the
 * receive) fails every request on it, with its errno, and says so in the log (WARN).
 *
 * At release, a connection that carried messages is shut for writing and read until the
 * peer shuts it too (at most RELEASE_MS, and the timeout): a close with bytes unread
 * resets the connection, which could make the peer lose what it has not read yet (the
 * last acknowledgments, the goodbye). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp.h"

enum { RELEASE_MS = 10000 };

void ccl__tcp_net_free(TcpNet *t)
{
    for (int p = 0; t->peer && p < t->n; p++) {
        TcpPeer *pe = &t->peer[p];
        if (pe->fd >= 0)
            close(pe->fd);
        for (TcpReq *q = pe->sq, *next; q; q = next) {
            next = q->next;
            free(q);
        }
        free(pe->rq);
    }
    free(t->peer);
    free(t->table);
    free(t);
}


static int peer_failed(TcpNet *t, int p, int err)
{
    char w[128];
    TcpPeer *pe = &t->peer[p];
    if (!pe->err)
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, t->me, "the connection to %s failed: %s",
                 ccl__tcp_who(&t->table[p], p, w, sizeof w),
                 err == ECONNRESET ? "it was closed or reset (its process ended?)" : strerror(err));
    pe->err = err;
    return err;
}

/* A frame's length began with BOOT_MAGIC, which no length does (its first 4 bytes are
 * 0): peer p's init failed after this rank's had ended its exchanges, and p said why
 * (tcpboot.c's farewell, of which the magic and exchange number are read). The rest is
 * read for the log, briefly; the connection fails. */
static int farewell(TcpNet *t, int p)
{
    BootHdr h;
    char text[FAREWELL] = "", w[128];
    double by = ccl__now_ms() + 100;
    int fd = t->peer[p].fd;
    if (ccl__tcp_io_move(fd, &h.bytes, sizeof h - offsetof(BootHdr, bytes), by, 0) == IO_OK &&
        ntohl(h.bytes) <= sizeof text)
        ccl__tcp_io_move(fd, text, ntohl(h.bytes), by, 0);
    text[sizeof text - 1] = 0;
    CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, t->me, "%s gave up in its init: %s",
             ccl__tcp_who(&t->table[p], p, w, sizeof w), text[0] ? text : "(its reason did not come)");
    t->peer[p].err = ECONNABORTED;
    return ECONNABORTED;
}

/* Writes what the kernel takes of p's queued sends, in order. 0, or the errno of a
 * failure. */
static int push(TcpNet *t, int p)
{
    TcpPeer *pe = &t->peer[p];
    for (TcpReq *q; (q = pe->wq) && !pe->err;) {
        struct iovec v[2];
        int nv = 0;
        if (q->moved < 8)
            v[nv++] = (struct iovec){q->len + q->moved, 8 - q->moved};
        size_t off = q->moved > 8 ? q->moved - 8 : 0;
        if (q->bytes > off)
            v[nv++] = (struct iovec){q->buf + off, q->bytes - off};
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        ssize_t k = sendmsg(pe->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : peer_failed(t, p, errno);
        if ((q->moved += (size_t)k) < 8 + q->bytes)
            return 0;           /* the kernel's buffer is full */
        q->complete = 1;
        pe->wq = q->next;
    }
    return pe->err;
}

/* Takes q out of p's sends (tested, or cancelled). */
static void unlink_send(TcpPeer *pe, TcpReq *q)
{
    for (TcpReq **pp = &pe->sq, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            if (pe->sq_tail == q)
                pe->sq_tail = prev;
            if (pe->wq == q)
                pe->wq = q->next;
            return;
        }
}

/* Reads into p's receive what has arrived of its frame, and no further. */
static int pull(TcpNet *t, int p)
{
    TcpPeer *pe = &t->peer[p];
    for (TcpReq *q; (q = pe->rq) && !pe->err;) {
        int head = q->moved < 8;
        char *dst = head ? (char *)q->len + q->moved : q->buf + (q->moved - 8);
        size_t want = head ? 8 - q->moved : q->bytes - (q->moved - 8);
        ssize_t k = want ? recv(pe->fd, dst, want, MSG_DONTWAIT) : 0;
        if (want && k < 0 && errno == EINTR)
            continue;
        if (want && k < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : peer_failed(t, p, errno);
        if (want && k == 0)
            return peer_failed(t, p, ECONNRESET);
        q->moved += (size_t)k;
        if (head && q->moved == 8) {
            uint64_t b = 0;
            for (int i = 0; i < 8; i++)
                b = b << 8 | q->len[i];
            if (!memcmp(q->len, BOOT_MAGIC, 4))
                return farewell(t, p);
            if (b > q->cap)
                return peer_failed(t, p, EMSGSIZE);
            q->bytes = (size_t)b;
        }
        if (q->moved == 8 + q->bytes) {  /* (bytes is 0 until the length is in: moved is 8 then) */
            q->complete = 1;
            pe->rq = NULL;
        }
    }
    return pe->err;
}

static int post(TcpNet *t, int peer, int recv, void *buf, size_t bytes, void **req)
{
    TcpPeer *pe = peer >= 0 && peer < t->n && peer != t->me ? &t->peer[peer] : NULL;
    TcpReq *q = pe && !pe->err && !(recv && pe->rq) ? calloc(1, sizeof *q) : NULL;
    if (!q)
        return !pe ? EINVAL : pe->err ? pe->err : recv && pe->rq ? EBUSY : ENOMEM;
    *q = (TcpReq){.peer = peer, .recv = recv, .buf = buf, .cap = bytes, .bytes = recv ? 0 : bytes};
    for (int i = 0; i < 8; i++)
        q->len[i] = (unsigned char)((uint64_t)bytes >> (56 - 8 * i));
    pe->used = 1;
    *req = q;
    if (recv) {
        pe->rq = q;
        return pull(t, peer);
    }
    if (pe->sq_tail)
        pe->sq_tail->next = q;
    else
        pe->sq = q;
    pe->sq_tail = q;
    if (!pe->wq)
        pe->wq = q;
    return push(t, peer);
}

static int tcp_isend(void *ctx, int peer, const void *buf, size_t bytes, void **req)
{
    return post(ctx, peer, 0, (void *)buf, bytes, req);
}

static int tcp_irecv(void *ctx, int peer, void *buf, size_t bytes, void **req)
{
    return post(ctx, peer, 1, buf, bytes, req);
}

static int tcp_test(void *ctx, void *req, int *done, size_t *bytes)
{
    TcpNet *t = ctx;
    TcpReq *q = req;
    if (!q->complete)
        q->recv ? pull(t, q->peer) : push(t, q->peer);
    *done = q->complete;
    if (!q->complete)
        return t->peer[q->peer].err;
    *bytes = q->bytes;
    if (!q->recv)
        unlink_send(&t->peer[q->peer], q); /* the first, almost always: sends complete in order */
    free(q);
    return 0;
}

/* Drops a request. One that has moved part of its frame leaves the stream out of step:
 * the connection is used no more. */
static int tcp_cancel(void *ctx, void *req)
{
    TcpNet *t = ctx;
    TcpReq *q = req;
    TcpPeer *pe = &t->peer[q->peer];
    if (pe->rq == q)
        pe->rq = NULL;
    if (!q->recv)
        unlink_send(pe, q);
    if (q->moved && !q->complete && !pe->err)
        pe->err = ECANCELED;
    free(q);
    return 0;
}

/* Shuts every connection that carried messages for writing and reads it until the peer
 * has shut it too (the file's opening says why), at most RELEASE_MS; then closes all. */
void ccl__tcp_net_release(void *ctx)
{
    TcpNet *t = ctx;
    struct pollfd *pf = calloc((size_t)t->n, sizeof *pf);
    int open = 0;
    for (int p = 0; pf && p < t->n; p++) {
        TcpPeer *pe = &t->peer[p];
        pf[p].fd = -1;
        if (pe->fd >= 0 && pe->used && !pe->err && shutdown(pe->fd, SHUT_WR) == 0) {
            pf[p] = (struct pollfd){pe->fd, POLLIN, 0};
            open++;
        }
    }
    double deadline = ccl__now_ms() + (t->timeout_ms < RELEASE_MS ? t->timeout_ms : RELEASE_MS);
    while (open > 0) {
        int k = poll(pf, (nfds_t)t->n, ccl__tcp_left_ms(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        for (int p = 0; p < t->n; p++) {
            char sink[4096];
            if (pf[p].fd < 0 || !pf[p].revents)
                continue;
            ssize_t m = recv(pf[p].fd, sink, sizeof sink, MSG_DONTWAIT);
            if (m == 0 || (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                pf[p].fd = -1;
                open--;
            }
        }
    }
    free(pf);
    ccl__tcp_net_free(t);
}


void ccl__tcp_net_ops(TcpNet *t, ccl_net_t *net)
{
    *net = (ccl_net_t){.isend = tcp_isend, .irecv = tcp_irecv, .test = tcp_test, .cancel = tcp_cancel,
                       .release = ccl__tcp_net_release, .ctx = t, .thread_safe = 1};
}
