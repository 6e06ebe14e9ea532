/* tcpboot.c: communicators of several nodes without MPI: ccl_get_unique_id and
 * ccl_comm_init_rank_id, a bootstrap by unique id over TCP, and the inter-node transport
 * (ccl_net_t, tcpnet.c) over the same connections (tcp.h; docs/multinode.md, "A unique id
 * over TCP").
 *
 * The root. ccl_get_unique_id listens on a TCP port and starts a detached thread that
 * serves one rendezvous: every rank connects and says hello (the cookie, nranks, its
 * rank, its timeout, host and pid, and where it listens itself); once all nranks have,
 * the root answers each with every rank's hello, the table, and ends. A hello without
 * the cookie is refused with a message and the root goes on waiting. Ranks that
 * disagree on nranks, two ranks of one number, or a rank that leaves before all came fail
 * the rendezvous: every rank that came, and every one that comes until the deadline, is
 * told why. The deadline: the first rank's timeout after it came (before that,
 * CCL_TIMEOUT_MS after the id was made); ranks that have not come by then are named to
 * those that have. A rank waits a little longer than that for its answer, so that the
 * root's verdict reaches it first.
 *
 * The mesh. With the table, rank i connects to every rank j < i and accepts every j > i
 * (each connection opened by a hello with the cookie and both ranks, answered): one TCP
 * connection per pair of ranks, N - 1 per rank. Every listener exists before its address
 * is in the table and has a backlog, so a connect completes without the peer accepting;
 * a rank connects, then accepts, then reads the answers to its connects, so nobody waits
 * on anybody in a cycle. Failures name the peer (rank, host, pid) and the address.
 *
 * Over the mesh runs the init's bootstrap (ccl_bootstrap_t: an allgather sends this
 * rank's bytes to every other rank and reads exactly as many from each, so no byte of
 * what follows is consumed early, and a peer that closes or fails is named at once); then
 * the communicator's transport (tcpnet.c) over the same connections.
 *
 * Wire structures are fixed-size, integers in network byte order. The id's first 48 of
 * 128 bytes: "CCLUID01", the cookie (16 random bytes), the root's address (family 4 or
 * 6, port, address) and a checksum of those. Limits: one socket per other rank, so a
 * rank needs N - 1 free file descriptors (ulimit -n); IPv6 link-local addresses are
 * not used (an address in the id carries no scope). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "tcp.h"

#define ID_MAGIC "CCLUID01"
#define HELLO_MAGIC "CCLHELO1"
#define MESH_MAGIC "CCLMESH1"

typedef struct {
    char magic[8];
    uint8_t cookie[COOKIE];
    WireAddr root;
    uint32_t check;             /* FNV-1a of the bytes before it, truncated */
} WireId;
_Static_assert(sizeof(WireId) <= CCL_UNIQUE_ID_BYTES, "the id's fields fit in ccl_unique_id_t");

typedef struct {                /* a rank to a lower rank, opening their connection */
    char magic[8];
    uint8_t cookie[COOKIE];
    uint32_t from, to;
} MeshHello;

/* ---- the root ---- */

typedef struct {
    int lfd, n, joined, timeout_ms;
    uint8_t cookie[COOKIE];
    char at[64];
    double deadline;
    int *fd;                    /* per rank, -1 until it came */
    Hello *hello;               /* per rank, as it came (network order) */
    ccl_result_t failed;        /* the rendezvous failed (why[] says how): every rank is told */
    char why[TEXT];
} Root;

/* The same answer to every rank that came, to the ranks of other processes first (a rank
 * of this process may end it, and this thread with it, once it has its own). */
static void root_tell(Root *rt, ccl_result_t r, const void *data, size_t bytes)
{
    char host[HOST] = "";
    gethostname(host, sizeof host - 1);
    for (int mine = 0; mine < 2; mine++)
        for (int p = 0; p < rt->n; p++) {
            int here = ntohl(rt->hello[p].pid) == (uint32_t)getpid() && !strcmp(rt->hello[p].host, host);
            if (here == mine && rt->fd[p] >= 0)
                ccl__tcp_answer_send(rt->fd[p], r, data, bytes, ccl__now_ms() + HELLO_WAIT_MS);
        }
}

/* The rendezvous failed: every rank that came is told why, and so is every one that
 * comes until the deadline. */
static void root_fail(Root *rt, ccl_result_t r, const char *text)
{
    rt->failed = r;
    CCL__FMT(rt->why, sizeof rt->why, "%s", text);
    root_tell(rt, r, rt->why, strlen(rt->why) + 1);
    for (int p = 0; p < rt->n; p++)
        if (rt->fd[p] >= 0) {
            close(rt->fd[p]);
            rt->fd[p] = -1;
        }
}

/* One accepted connection's hello: the rank is in (1), or the connection is to close. */
static int root_take(Root *rt, int fd)
{
    Hello h;
    double by = ccl__now_ms() + HELLO_WAIT_MS;
    if (ccl__tcp_io_move(fd, &h, sizeof h, by, 0) != IO_OK)
        return 0;               /* nothing of ours */
    h.host[HOST - 1] = 0;
    int nranks = (int)ntohl(h.nranks), rank = (int)ntohl(h.rank);
    char text[TEXT] = "", w[128], w2[128];
    ccl_result_t r = CCL_ERR_INVALID_ARGUMENT;
    ccl__tcp_who(&h, rank, w, sizeof w);
    if (memcmp(h.magic, HELLO_MAGIC, 8)) {
        CCL__FMT(text, sizeof text, "the root of a ccl unique id at %s got something else than a rank's hello", rt->at);
    } else if (memcmp(h.cookie, rt->cookie, COOKIE)) {
        CCL__FMT(text, sizeof text, "the root at %s refused %s: wrong cookie (its id is not the one ccl_get_unique_id "
                 "made for this root: an id of another job, or of an earlier call whose root has ended)", rt->at, w);
    } else if (rt->failed) {
        r = rt->failed;
        CCL__FMT(text, sizeof text, "%s", rt->why);
    } else if (nranks < 1 || nranks > CCLC_MAX_RANKS || rank < 0 || rank >= nranks) {
        CCL__FMT(text, sizeof text, "%s came as rank %d of %d", w, rank, nranks);
        root_fail(rt, r, text);
    } else if (rt->n && nranks != rt->n) {
        CCL__FMT(text, sizeof text, "%s passed nranks %d, the ranks before it %d", w, nranks, rt->n);
        root_fail(rt, r, text);
    } else if (rt->n && rt->fd[rank] >= 0) {
        CCL__FMT(text, sizeof text, "%s and %s both came as rank %d (every process must pass its own rank)", w,
                 ccl__tcp_who(&rt->hello[rank], rank, w2, sizeof w2), rank);
        root_fail(rt, r, text);
    } else if (!rt->n) {
        rt->fd = malloc(sizeof *rt->fd * (size_t)nranks);
        rt->hello = calloc((size_t)nranks, sizeof *rt->hello);
        if (!rt->fd || !rt->hello) {
            free(rt->fd);
            free(rt->hello);
            rt->fd = NULL;
            rt->hello = NULL;
            r = CCL_ERR_OUT_OF_MEMORY;
            CCL__FMT(text, sizeof text, "the root at %s is out of memory for %d ranks", rt->at, nranks);
        } else {
            for (int p = 0; p < nranks; p++)
                rt->fd[p] = -1;
            rt->n = nranks;
            rt->timeout_ms = (int)ntohl(h.timeout_ms);
            rt->deadline = ccl__now_ms() + rt->timeout_ms;
        }
    }
    if (text[0]) {
        ccl__tcp_answer_send(fd, r, text, strlen(text) + 1, by);
        return 0;
    }
    rt->fd[rank] = fd;
    rt->hello[rank] = h;
    rt->joined++;
    return 1;
}

static void *root_main(void *arg)
{
    Root *rt = arg;
    for (;;) {
        if (rt->n && rt->joined == rt->n && !rt->failed) {
            root_tell(rt, CCL_OK, rt->hello, sizeof *rt->hello * (size_t)rt->n);
            break;
        }
        int n = rt->failed ? 0 : rt->n;
        struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
        if (!pf) {
            root_fail(rt, CCL_ERR_OUT_OF_MEMORY, "the root is out of memory");
            break;
        }
        pf[0] = (struct pollfd){rt->lfd, POLLIN, 0};
        for (int p = 0; p < n; p++)
            pf[p + 1] = (struct pollfd){rt->fd[p], POLLIN, 0}; /* anything before the answer: it left */
        int k = poll(pf, (nfds_t)n + 1, ccl__tcp_left_ms(rt->deadline));
        int left = -1;
        for (int p = 0; k > 0 && p < n && left < 0; p++)
            if (pf[p + 1].revents)
                left = p;
        int accept_ = k > 0 && pf[0].revents;
        free(pf);
        if (k < 0 && errno == EINTR)
            continue;
        char text[TEXT], w[128];
        if (k == 0 || (k < 0 && errno != EINTR)) {
            if (rt->n && !rt->failed) {
                char list[160];
                ccl__tcp_missing(rt->fd, 0, rt->n, list, sizeof list);
                CCL__FMT(text, sizeof text, "%s of %d never connected to the root at %s within %d ms (the timeout: "
                         "config timeout_ms or CCL_TIMEOUT_MS)", list, rt->n, rt->at, rt->timeout_ms);
                root_fail(rt, CCL_ERR_TIMEOUT, text);
            }
            break;
        }
        if (left >= 0) {
            close(rt->fd[left]);
            rt->fd[left] = -1;
            CCL__FMT(text, sizeof text, "%s left before every rank had connected to the root at %s (its process "
                     "ended, or its init failed)", ccl__tcp_who(&rt->hello[left], left, w, sizeof w), rt->at);
            root_fail(rt, CCL_ERR_PEER_FAILED, text);
            continue;
        }
        if (!accept_)
            continue;
        int fd = accept4(rt->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 && !root_take(rt, fd))
            close(fd);
    }
    for (int p = 0; p < rt->n; p++)
        if (rt->fd[p] >= 0)
            close(rt->fd[p]);
    close(rt->lfd);
    free(rt->fd);
    free(rt->hello);
    free(rt);
    return NULL;
}

static void id_check(WireId *w)
{
    w->check = htonl((uint32_t)ccl__fnv1a(CCL__FNV_SEED, w, offsetof(WireId, check)));
}

ccl_result_t ccl_get_unique_id(ccl_unique_id_t *id)
{
    const char *fn = "ccl_get_unique_id";
    ccl__log_init();
    if (!id)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'id' is NULL", fn);
    int timeout;
    ccl_result_t r = ccl__config_timeout(NULL, fn, &timeout);
    if (r != CCL_OK)
        return r;
    Root *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ccl__set_error(NULL, CCL_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    Endpoint e;
    char why[TEXT];
    rt->lfd = -1;
    if (getrandom(rt->cookie, COOKIE, 0) != COOKIE) {
        CCL__FMT(why, sizeof why, "cannot draw a random cookie (getrandom): %s", strerror(errno));
        r = CCL_ERR_SYSTEM;
    } else if (ccl__tcp_root_address(&e, why, sizeof why) != 0) {
        r = CCL_ERR_INVALID_ARGUMENT;   /* CCL_BOOTSTRAP_ADDR or CCL_SOCKET_IFNAME names nothing usable */
    } else if ((rt->lfd = ccl__tcp_listen_on(&e, why, sizeof why)) < 0) {
        r = CCL_ERR_SYSTEM;
    }
    if (r == CCL_OK) {
        CCL__FMT(rt->at, sizeof rt->at, "%s", e.text);
        rt->timeout_ms = timeout;
        rt->deadline = ccl__now_ms() + timeout;
        int e2 = ccl__thread_start(NULL, root_main, rt); /* detached: it ends on its own */
        if (e2 != 0) {
            CCL__FMT(why, sizeof why, "cannot start the root's thread: %s", strerror(e2));
            r = CCL_ERR_SYSTEM;
        }
    }
    if (r != CCL_OK) {
        if (rt->lfd >= 0)
            close(rt->lfd);
        free(rt);
        return ccl__set_error(NULL, r, "%s: %s", fn, why);
    }
    WireId w;
    memset(id, 0, sizeof *id);
    memset(&w, 0, sizeof w);
    memcpy(w.magic, ID_MAGIC, 8);
    memcpy(w.cookie, rt->cookie, COOKIE);
    ccl__tcp_wire_of(&e, &w.root);
    id_check(&w);
    memcpy(id->internal, &w, sizeof w);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, -1, "%s: the root listens at %s (for %d ms before a rank comes)", fn,
             e.text, timeout);
    return CCL_OK;
}

/* ---- a rank: the mesh ---- */

/* A rank waits a little longer than the root waits for the ranks, so that the root's
 * verdict, naming who did not come, arrives first. */
static int grace_ms(int timeout_ms)
{
    return timeout_ms / 10 > 1000 ? timeout_ms / 10 : 1000;
}

/* Connects to every lower rank, accepts every higher one, then reads the answers to its
 * connects (the file's opening says why that order cannot deadlock). */
static ccl_result_t mesh(TcpNet *t, int lfd, const char *at, double deadline, char *why, size_t len)
{
    char w[128];
    MeshHello mh = {.from = htonl((uint32_t)t->me)};
    memcpy(mh.magic, MESH_MAGIC, 8);
    memcpy(mh.cookie, t->cookie, COOKIE);
    for (int j = 0; j < t->me; j++) {
        Endpoint e;
        int rc = IO_OK;
        mh.to = htonl((uint32_t)j);
        if (ccl__tcp_ep_of(&e, &t->table[j].listen) != 0) {
            CCL__FMT(why, len, "the root's table holds no address for %s", ccl__tcp_who(&t->table[j], j, w, sizeof w));
            return CCL_ERR_INTERNAL;
        }
        if ((t->peer[j].fd = ccl__tcp_connect_to(&e, deadline, 0)) < 0 ||
            (rc = ccl__tcp_io_move(t->peer[j].fd, &mh, sizeof mh, deadline, 1)) != IO_OK) {
            const char *how = t->peer[j].fd < 0 ? strerror(errno) : ccl__tcp_io_text(rc);
            ccl__tcp_who(&t->table[j], j, w, sizeof w);
            CCL__FMT(why, len, "rank %d cannot connect to %s at %s: %s", t->me, w, e.text, how);
            return CCL_ERR_PEER_FAILED;
        }
    }
    int *have = malloc(sizeof *have * (size_t)t->n);
    if (!have) {
        CCL__FMT(why, len, "out of memory");
        return CCL_ERR_OUT_OF_MEMORY;
    }
    for (int need = t->n - 1 - t->me; need > 0;) {
        struct pollfd pf = {lfd, POLLIN, 0};
        int k = poll(&pf, 1, ccl__tcp_left_ms(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            char list[160];
            for (int p = 0; p < t->n; p++)
                have[p] = t->peer[p].fd;
            ccl__tcp_missing(have, t->me + 1, t->n, list, sizeof list);
            free(have);
            CCL__FMT(why, len, "%s never connected to rank %d (listening at %s) within %d ms", list, t->me, at,
                     t->timeout_ms);
            return CCL_ERR_TIMEOUT;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        MeshHello h;
        double by = ccl__now_ms() + HELLO_WAIT_MS < deadline ? ccl__now_ms() + HELLO_WAIT_MS : deadline;
        if (fd < 0)
            continue;
        if (ccl__tcp_io_move(fd, &h, sizeof h, by, 0) != IO_OK) {
            close(fd);
            continue;
        }
        int from = (int)ntohl(h.from);
        char text[TEXT] = "";
        if (memcmp(h.magic, MESH_MAGIC, 8) || memcmp(h.cookie, t->cookie, COOKIE))
            CCL__FMT(text, sizeof text, "rank %d, listening at %s, refused a connection: wrong cookie (not a rank of "
                     "its communicator)", t->me, at);
        else if ((int)ntohl(h.to) != t->me || from <= t->me || from >= t->n || t->peer[from].fd >= 0)
            CCL__FMT(text, sizeof text, "rank %d, listening at %s, refused a connection from rank %d to rank %u "
                     "(not one it waits for)", t->me, at, from, ntohl(h.to));
        if (text[0] || ccl__tcp_answer_send(fd, CCL_OK, NULL, 0, by) != IO_OK) {
            if (text[0])
                ccl__tcp_answer_send(fd, CCL_ERR_INVALID_ARGUMENT, text, strlen(text) + 1, by);
            close(fd);
            continue;
        }
        ccl__tcp_no_delay(fd);
        t->peer[from].fd = fd;
        need--;
    }
    free(have);
    for (int j = 0; j < t->me; j++) {
        ccl_result_t r = CCL_OK;
        char *text = NULL;
        size_t bytes;
        int rc = ccl__tcp_answer_recv(t->peer[j].fd, TEXT, deadline, &r, &text, &bytes);
        if (rc != IO_OK || r != CCL_OK) {
            if (rc == IO_OK)
                CCL__FMT(why, len, "%s", text);
            else
                CCL__FMT(why, len, "%s did not answer rank %d's connection: %s",
                         ccl__tcp_who(&t->table[j], j, w, sizeof w), t->me,
                         rc == IO_EOF ? "it closed it (its process ended, or its init failed)" : ccl__tcp_io_text(rc));
            free(text);
            return rc == IO_TIMEOUT ? CCL_ERR_TIMEOUT : rc == IO_OK ? r : CCL_ERR_PEER_FAILED;
        }
        free(text);
    }
    return CCL_OK;
}

/* A transport's state for rank me of n before any connection (every fd -1), or NULL
 * when out of memory. */
static TcpNet *net_new(int n, int me, int timeout_ms)
{
    TcpNet *t = calloc(1, sizeof *t);
    if (t && !(t->peer = calloc((size_t)n, sizeof *t->peer))) {
        free(t);
        t = NULL;
    }
    if (!t)
        return NULL;
    t->n = n, t->me = me, t->timeout_ms = timeout_ms;
    for (int p = 0; p < n; p++)
        t->peer[p].fd = -1;
    return t;
}

/* Rank me's hello to the others: who it is and where it listens (its cookie is the
 * caller's to set). */
static Hello hello_of(int n, int me, int timeout_ms, const Endpoint *listen)
{
    Hello h = {.nranks = htonl((uint32_t)n), .rank = htonl((uint32_t)me), .timeout_ms = htonl((uint32_t)timeout_ms),
               .pid = htonl((uint32_t)getpid())};
    memcpy(h.magic, HELLO_MAGIC, 8);
    ccl__tcp_wire_of(listen, &h.listen);
    gethostname(h.host, HOST - 1);
    return h;
}

/* Joins the rendezvous at root, then the mesh: the transport's state, or NULL with the
 * result in *r and the message in why. */
static TcpNet *join(const WireId *id, const Endpoint *root, int n, int me, int timeout_ms, ccl_result_t *r, char *why,
                    size_t len)
{
    TcpNet *t = net_new(n, me, timeout_ms);
    if (!t) {
        *r = CCL_ERR_OUT_OF_MEMORY;
        CCL__FMT(why, len, "out of memory");
        return NULL;
    }
    memcpy(t->cookie, id->cookie, COOKIE);
    double deadline = ccl__now_ms() + timeout_ms + grace_ms(timeout_ms);
    int fd = ccl__tcp_connect_to(root, deadline, 1), lfd = -1, rc = IO_OK;
    Endpoint mine;
    socklen_t sl = sizeof mine.sa;
    const char *filter = getenv("CCL_SOCKET_IFNAME");
    char *table = NULL;
    size_t bytes = 0;
    *r = CCL_ERR_SYSTEM;
    if (fd < 0) {
        CCL__FMT(why, len, "rank %d cannot connect to the root at %s: %s (is the process that called "
                 "ccl_get_unique_id still running, and its address reachable from here? CCL_BOOTSTRAP_ADDR or "
                 "CCL_SOCKET_IFNAME there choose it)", me, root->text, strerror(errno));
        goto fail;
    }
    /* This rank listens where CCL_SOCKET_IFNAME says, else where it reaches the root from. */
    if (filter && *filter ? ccl__tcp_if_address(&mine, filter, why, len) != 0
                          : getsockname(fd, (struct sockaddr *)&mine.sa, &sl) != 0)
        goto fail;
    if (!(filter && *filter))
        ccl__tcp_ep_set(&mine, (struct sockaddr *)&mine.sa, 0);
    if ((lfd = ccl__tcp_listen_on(&mine, why, len)) < 0)
        goto fail;
    Hello h = hello_of(n, me, timeout_ms, &mine);
    memcpy(h.cookie, id->cookie, COOKIE);
    ccl_result_t answer = CCL_OK;
    if ((rc = ccl__tcp_io_move(fd, &h, sizeof h, deadline, 1)) == IO_OK)
        rc = ccl__tcp_answer_recv(fd, sizeof(Hello) * (size_t)n, deadline, &answer, &table, &bytes);
    if (rc != IO_OK) {
        *r = rc == IO_TIMEOUT ? CCL_ERR_TIMEOUT : CCL_ERR_PEER_FAILED;
        CCL__FMT(why, len, "rank %d got no answer from the root at %s: %s", me, root->text,
                 rc == IO_TIMEOUT ? "it did not answer in time (the timeout and a grace)"
                 : rc == IO_EOF   ? "it closed the connection (its process ended?)"
                                  : strerror(errno));
        goto fail;
    }
    if (answer != CCL_OK || bytes != sizeof(Hello) * (size_t)n) {
        *r = answer != CCL_OK ? answer : CCL_ERR_INTERNAL;
        CCL__FMT(why, len, "%s", answer != CCL_OK ? table : "the root's table has the wrong size");
        goto fail;
    }
    t->table = (Hello *)table;
    table = NULL;
    close(fd);
    fd = -1;
    if ((*r = mesh(t, lfd, mine.text, ccl__now_ms() + timeout_ms, why, len)) != CCL_OK)
        goto fail;
    close(lfd);
    return t;
fail:
    free(table);
    if (fd >= 0)
        close(fd);
    if (lfd >= 0)
        close(lfd);
    ccl__tcp_net_free(t);
    return NULL;
}

/* ---- the init's bootstrap over the mesh ---- */

/* The header from rank p has come: 0 when it heads this exchange's bytes, else -1 with
 * why (a farewell's message, read here, or what is wrong). */
static int boot_header(TcpNet *t, int p, const BootHdr *h, uint32_t k, size_t bytes, double deadline)
{
    char w[128], text[FAREWELL] = "";
    uint32_t len = ntohl(h->bytes);
    ccl__tcp_who(&t->table[p], p, w, sizeof w);
    if (memcmp(h->magic, BOOT_MAGIC, 4))
        CCL__FMT(t->why, t->whylen, "%s sent rank %d something else than exchange %u of the init", w, t->me, k);
    else if (h->gave_up && len <= sizeof text && ccl__tcp_io_move(t->peer[p].fd, text, len, deadline, 0) == IO_OK)
        CCL__FMT(t->why, t->whylen, "%s gave up in the init: %.*s", w, (int)len, text);
    else if (h->gave_up)
        CCL__FMT(t->why, t->whylen, "%s gave up in the init", w);
    else if (ntohl(h->exchange) != k || len != bytes)
        CCL__FMT(t->why, t->whylen, "%s is out of step with rank %d: its exchange %u of the init has %u bytes, this "
                 "rank's exchange %u has %zu", w, t->me, ntohl(h->exchange), len, k, bytes);
    else
        return 0;
    return -1;
}

/* Every rank's `bytes` to every other rank, and as many read from each, each message
 * headed by a BootHdr: at most the timeout; a peer that closes, fails or gives up named
 * in t->why. A message left midway marks its peer `mid` (no farewell can follow it). */
static int boot_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    TcpNet *t = ctx;
    uint32_t k = ++t->exchanges;
    int n = t->n, fail = 0;
    size_t total = sizeof(BootHdr) + bytes;
    memcpy((char *)out + (size_t)t->me * bytes, in, bytes);
    size_t *sent = calloc((size_t)n * 2, sizeof *sent), *got = sent + n;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    int *have = calloc((size_t)n, sizeof *have);
    BootHdr *hin = calloc((size_t)n, sizeof *hin);
    char *msg = malloc(total), w[128];
    if (!sent || !pf || !have || !hin || !msg) {
        CCL__FMT(t->why, t->whylen, "rank %d is out of memory in exchange %u of the init", t->me, k);
        fail = 1;
    } else {
        BootHdr h = {.exchange = htonl(k), .bytes = htonl((uint32_t)bytes)};
        memcpy(h.magic, BOOT_MAGIC, 4);
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, in, bytes);
    }
    double deadline = ccl__now_ms() + t->timeout_ms;
    for (int pending = (n - 1) * 2; !fail && pending > 0;) {
        for (int p = 0; p < n; p++) {
            short ev = p == t->me ? 0 : (short)((sent[p] < total ? POLLOUT : 0) | (got[p] < total ? POLLIN : 0));
            pf[p] = (struct pollfd){ev ? t->peer[p].fd : -1, ev, 0};
        }
        int r = poll(pf, (nfds_t)n, ccl__tcp_left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            char list[160];
            for (int p = 0; p < n; p++)
                have[p] = p == t->me || got[p] == total ? 0 : -1;
            ccl__tcp_missing(have, 0, n, list, sizeof list);
            CCL__FMT(t->why, t->whylen, "rank %d waited %d ms in exchange %u of the init for %s", t->me,
                     t->timeout_ms, k, list);
            fail = 1;
            break;
        }
        for (int p = 0; p < n && !fail; p++) {
            if (!pf[p].revents)
                continue;
            ssize_t m = 0;
            if (sent[p] < total &&
                (m = send(pf[p].fd, msg + sent[p], total - sent[p], MSG_NOSIGNAL | MSG_DONTWAIT)) > 0)
                pending -= (sent[p] += (size_t)m) == total;
            int head = got[p] < sizeof(BootHdr);
            char *dst = head ? (char *)&hin[p] + got[p] : (char *)out + (size_t)p * bytes + (got[p] - sizeof(BootHdr));
            if (m >= 0 && got[p] < total && (m = recv(pf[p].fd, dst, (head ? sizeof(BootHdr) : total) - got[p],
                                                      MSG_DONTWAIT)) > 0) {
                pending -= (got[p] += (size_t)m) == total;
                if (head && got[p] == sizeof(BootHdr) && boot_header(t, p, &hin[p], k, bytes, deadline) != 0)
                    fail = 1;
            }
            if (!fail && (m == 0 || (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))) {
                CCL__FMT(t->why, t->whylen, "%s left exchange %u of the init (its init failed, or its process "
                         "ended; rank %d's connection to it: %s)", ccl__tcp_who(&t->table[p], p, w, sizeof w), k, t->me,
                         m == 0 ? "closed" : strerror(errno));
                fail = 1;
            }
        }
    }
    for (int p = 0; fail && sent && p < n; p++)
        t->peer[p].mid = sent[p] % total != 0;
    free(sent);
    free(pf);
    free(have);
    free(hin);
    free(msg);
    return fail ? -1 : 0;
}

static int boot_barrier(void *ctx)
{
    char one = 1, all[CCLC_MAX_RANKS];
    return boot_allgather(ctx, &one, all, 1);
}

/* The comm's release: at the destroy, tcpnet.c's. When the init failed (its message is
 * this thread's init error), every peer is first told why, in a farewell (BootHdr), so
 * that each names this rank and the cause rather than whoever it hears from first; the
 * connections are then shut as at a destroy, bounded, so that none is reset with the
 * farewell unread. */
static void boot_release(void *ctx)
{
    TcpNet *t = ctx;
    if (t->why) {
        char text[FAREWELL];    /* the init's message, with what the bootstrap said, as the init will say it */
        CCL__FMT(text, sizeof text, t->why[0] ? "%s (%s)" : "%s", ccl_comm_last_error(NULL), t->why);
        size_t len = strlen(text) + 1;
        BootHdr h = {.exchange = htonl(t->exchanges + 1), .bytes = htonl((uint32_t)len), .gave_up = htonl(1)};
        memcpy(h.magic, BOOT_MAGIC, 4);
        double by = ccl__now_ms() + 1000;
        for (int p = 0; p < t->n; p++)
            if (t->peer[p].fd >= 0 && !t->peer[p].mid &&
                ccl__tcp_io_move(t->peer[p].fd, &h, sizeof h, by, 1) == IO_OK &&
                ccl__tcp_io_move(t->peer[p].fd, text, len, by, 1) == IO_OK)
                t->peer[p].used = 1;
    }
    ccl__tcp_net_release(t);
}

/* ---- a child's connections (ccl_comm_split) ---- */

static int tcp_split(void *ctx, int color, int rank, const ccl_bootstrap_t *members, ccl_net_t *child, char *why,
                     size_t len);

/* The transport over t's connections (tcpnet.c), which splits as below. */
static void tcp_transport(TcpNet *t, ccl_net_t *net)
{
    ccl__tcp_net_ops(t, net);
    net->split = tcp_split;
}

/* ccl_net_t.split over TCP: the members of a child make a mesh of their own, as the
 * init's (above), each over a new listening socket on the address it listens at now (any
 * port), their hellos exchanged through `members` (the parent's split bootstrap, which
 * stands in for the root); the cookie is member 0's, drawn afresh, so that a connection
 * meant for another child is refused. A rank with no color has nothing to make. The
 * parent's TcpNet is only read (its table), so the parent's proxy may go on using it. */
static int tcp_split(void *ctx, int color, int rank, const ccl_bootstrap_t *members, ccl_net_t *child, char *why,
                     size_t len)
{
    const TcpNet *t = ctx;
    if (color == CCL_SPLIT_NOCOLOR)
        return 0;
    int n = members->nranks, lfd = -1;
    TcpNet *c = net_new(n, rank, t->timeout_ms);
    Hello *table = calloc((size_t)n, sizeof *table);
    Endpoint mine;
    if (!c || !table) {
        CCL__FMT(why, len, "out of memory");
        goto fail;
    }
    if (ccl__tcp_ep_of(&mine, &t->table[t->me].listen) != 0) {
        CCL__FMT(why, len, "this rank's own address in the parent's table is damaged");
        goto fail;
    }
    ccl__tcp_ep_set(&mine, (struct sockaddr *)&mine.sa, 0);
    if ((lfd = ccl__tcp_listen_on(&mine, why, len)) < 0)
        goto fail;
    Hello h = hello_of(n, rank, t->timeout_ms, &mine);
    if (rank == 0 && getrandom(h.cookie, COOKIE, 0) != COOKIE) {
        CCL__FMT(why, len, "cannot draw a random cookie (getrandom): %s", strerror(errno));
        goto fail;
    }
    if (members->allgather(members->ctx, &h, table, sizeof h) != 0) {
        CCL__FMT(why, len, "the members' exchange of their addresses failed");
        goto fail;
    }
    memcpy(c->cookie, table[0].cookie, COOKIE);
    c->table = table;
    table = NULL;
    if (mesh(c, lfd, mine.text, ccl__now_ms() + t->timeout_ms, why, len) != CCL_OK)
        goto fail;
    close(lfd);
    tcp_transport(c, child);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, t->me, "ccl_comm_split: rank %d of %d of the new communicator connected "
             "to every other (listening at %s)", rank, n, mine.text);
    return 0;
fail:
    if (lfd >= 0)
        close(lfd);
    free(table);
    if (c)
        ccl__tcp_net_free(c);
    return -1;
}

/* ---- the constructor ---- */

/* The id's fields, checked: 0, or -1 with what is wrong with it. */
static int id_read(const ccl_unique_id_t *id, WireId *w, Endpoint *root, char *why, size_t len)
{
    memcpy(w, id->internal, sizeof *w);
    uint32_t check = w->check;
    id_check(w);
    if (memcmp(w->magic, ID_MAGIC, 8))
        CCL__FMT(why, len, "was not made by ccl_get_unique_id (not an id, or another library's, such as "
                 "libccl_nccl's ncclUniqueId)");
    else if (check != w->check || ccl__tcp_ep_of(root, &w->root) != 0)
        CCL__FMT(why, len, "is damaged (its checksum does not match): hand every rank the 128 bytes unchanged");
    else
        return 0;
    return -1;
}

ccl_result_t ccl_comm_init_rank_id(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank, int ranks_per_node,
                                   int device, const ccl_config_t *config)
{
    const char *fn = "ccl_comm_init_rank_id";
    ccl__log_init();
    if (!comm)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'comm' is NULL", fn);
    *comm = NULL;
    if (nranks < 1 || nranks > CCLC_MAX_RANKS)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'nranks' is %d, outside 1..%d", fn, nranks,
                              CCLC_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'rank' is %d, outside 0..%d", fn, rank,
                              nranks - 1);
    WireId w;
    Endpoint root;
    char why[FAREWELL];
    if (id_read(&id, &w, &root, why, sizeof why) != 0)
        return ccl__set_error(NULL, CCL_ERR_INVALID_ARGUMENT, "%s: argument 'id' %s", fn, why);
    int timeout;
    ccl_result_t r = ccl__config_timeout(config, fn, &timeout);
    if (r != CCL_OK)
        return r;
    TcpNet *t = join(&w, &root, nranks, rank, timeout, &r, why, sizeof why);
    if (!t)
        return ccl__set_error(NULL, r, "%s: %s", fn, why);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, rank, "%s: rank %d of %d connected to every other rank (root %s)", fn, rank,
             nranks, root.text);
    /* The bootstrap's own failure (a peer that closed, a timeout) is the cause of the
     * init's, which says only that the bootstrap failed: it is added to the message. */
    why[0] = 0;
    t->why = why;
    t->whylen = sizeof why;
    ccl_bootstrap_t boot = {.nranks = nranks, .rank = rank, .allgather = boot_allgather, .barrier = boot_barrier,
                            .ctx = t};
    ccl_net_t net;
    tcp_transport(t, &net);
    net.release = boot_release;
    r = ccl__comm_init_net(comm, &boot, &net, ranks_per_node, device, config, fn);
    if (r == CCL_OK) {
        t->why = NULL;          /* the bootstrap is not used after the init */
        return CCL_OK;
    }
    if (why[0]) {
        char first[CCL__ERR_LEN];
        CCL__FMT(first, sizeof first, "%s", ccl_comm_last_error(NULL));
        ccl__set_error(NULL, r, "%s (%s)", first, why);
    }
    return r;
}

