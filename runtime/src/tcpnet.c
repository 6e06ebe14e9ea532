/* tcpnet.c: communicators of several nodes without MPI: ccl_get_unique_id and
 * ccl_comm_init_rank_id, a bootstrap by unique id over TCP, and the inter-node transport
 * (ccl_net_t) over the same connections (docs/multinode.md, "A unique id over TCP").
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
 * Over the mesh run the init's bootstrap (ccl_bootstrap_t: an allgather sends this
 * rank's bytes to every other rank and reads exactly as many from each, so no byte of
 * what follows is consumed early), then the communicator's transport (ccl_net_t), which
 * only libccl's proxy thread (cpu/net.c) calls, once the init is over. A message is a
 * frame, an 8-byte big-endian length and the bytes, moved by non-blocking calls that the
 * proxy's test() drives. Per peer, sends go out in the order posted (one queue; TCP keeps
 * their bytes in order) and one receive at a time reads exactly one frame: one sender's
 * messages arrive in the order sent, as the proxy requires. At release, a connection
 * that carried messages is shut for writing and read until the peer shuts it too (at
 * most RELEASE_MS): a close with bytes unread resets the connection, which could make
 * the peer lose what it has not read yet (the last acknowledgments, the goodbye).
 *
 * Wire structures are fixed-size, integers in network byte order. The id's first 48 of
 * 128 bytes: "CCLUID01", the cookie (16 random bytes), the root's address (family 4 or
 * 6, port, address) and a checksum of those. Limits: one socket per other rank, so a
 * rank needs N - 1 free file descriptors (ulimit -n); IPv6 link-local addresses are
 * not used (an address in the id carries no scope). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

enum { COOKIE = 16, HOST = 64, HELLO_WAIT_MS = 5000, RELEASE_MS = 10000, TEXT = 512 };
#define ID_MAGIC "CCLUID01"
#define HELLO_MAGIC "CCLHELO1"
#define MESH_MAGIC "CCLMESH1"
#define ANSWER_MAGIC "CCLANSW1"

typedef struct {
    uint8_t family, pad;        /* 4 or 6 */
    uint16_t port;
    uint8_t addr[16];
} WireAddr;

typedef struct {
    char magic[8];
    uint8_t cookie[COOKIE];
    WireAddr root;
    uint32_t check;             /* FNV-1a of the bytes before it, truncated */
} WireId;
_Static_assert(sizeof(WireId) <= CCL_UNIQUE_ID_BYTES, "the id's fields fit in ccl_unique_id_t");

typedef struct {                /* a rank to the root; the root's answer is every rank's */
    char magic[8];
    uint8_t cookie[COOKIE];
    uint32_t nranks, rank, timeout_ms, pid;
    WireAddr listen;
    char host[HOST];
} Hello;

typedef struct {                /* a rank to a lower rank, opening their connection */
    char magic[8];
    uint8_t cookie[COOKIE];
    uint32_t from, to;
} MeshHello;

typedef struct {                /* the answer to either hello: what follows is the table or a refusal's text */
    char magic[8];
    uint32_t result;            /* CCL_OK, or the ccl_result_t of the refusal */
    uint32_t bytes;
} Answer;

/* ---- addresses ---- */

typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
    char text[64];              /* "10.0.0.1:4567", "[fd00::1]:4567" */
} Endpoint;

static int ep_port(const Endpoint *e)
{
    return ntohs(e->sa.ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)&e->sa)->sin6_port
                                             : ((const struct sockaddr_in *)&e->sa)->sin_port);
}

/* e := sa (which may lie in e), with the port unless it is -1, and its text. */
static void ep_set(Endpoint *e, const struct sockaddr *sa, int port)
{
    struct sockaddr_storage copy;
    socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    memcpy(&copy, sa, sl);
    memset(e, 0, sizeof *e);
    e->len = sl;
    memcpy(&e->sa, &copy, sl);
    sa = (const struct sockaddr *)&copy;
    if (port >= 0 && sa->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)&e->sa)->sin6_port = htons((uint16_t)port);
    else if (port >= 0)
        ((struct sockaddr_in *)&e->sa)->sin_port = htons((uint16_t)port);
    char a[INET6_ADDRSTRLEN] = "?";
    int v6 = sa->sa_family == AF_INET6;
    inet_ntop(sa->sa_family, v6 ? (const void *)&((struct sockaddr_in6 *)&e->sa)->sin6_addr
                                : (const void *)&((struct sockaddr_in *)&e->sa)->sin_addr, a, sizeof a);
    CCL__FMT(e->text, sizeof e->text, v6 ? "[%s]:%d" : "%s:%d", a, ep_port(e));
}

static void wire_of(const Endpoint *e, WireAddr *w)
{
    memset(w, 0, sizeof *w);
    int v6 = e->sa.ss_family == AF_INET6;
    w->family = v6 ? 6 : 4;
    w->port = htons((uint16_t)ep_port(e));
    if (v6)
        memcpy(w->addr, &((const struct sockaddr_in6 *)&e->sa)->sin6_addr, 16);
    else
        memcpy(w->addr, &((const struct sockaddr_in *)&e->sa)->sin_addr, 4);
}

/* 0, or -1 for a family that is neither 4 nor 6 (damaged bytes). */
static int ep_of(Endpoint *e, const WireAddr *w)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (w->family == 6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, w->addr, 16);
    } else if (w->family == 4) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, w->addr, 4);
    } else {
        return -1;
    }
    ep_set(e, (struct sockaddr *)&ss, ntohs(w->port));
    return 0;
}

/* Whether interface `name` passes CCL_SOCKET_IFNAME's filter, as NCCL_SOCKET_IFNAME's: a
 * comma-separated list of name prefixes ("eth,ib"), of exact names after '=' ("=eth0"),
 * or of prefixes to avoid after '^' ("^docker,lo"). */
static int if_passes(const char *name, const char *filter)
{
    int avoid = *filter == '^', exact = *filter == '=';
    for (const char *s = filter + (avoid || exact); *s;) {
        size_t n = strcspn(s, ",");
        if (n && !strncmp(name, s, n) && (!exact || !name[n]))
            return !avoid;
        s += n + (s[n] == ',');
    }
    return avoid;
}

/* The first address of this host's interfaces (up) that `filter` admits, IPv4 before
 * IPv6 (never link-local); with no filter, the first IPv4 address that is not loopback.
 * 0, or -1 with why. */
static int if_address(Endpoint *e, const char *filter, char *why, size_t len)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0) {
        CCL__FMT(why, len, "cannot list this host's network interfaces (getifaddrs): %s", strerror(errno));
        return -1;
    }
    int found = 0;
    for (int v6 = 0; v6 < 1 + (filter != NULL) && !found; v6++)
        for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != (v6 ? AF_INET6 : AF_INET) || !(i->ifa_flags & IFF_UP))
                continue;
            if (filter ? !if_passes(i->ifa_name, filter) : (i->ifa_flags & IFF_LOOPBACK) != 0)
                continue;
            if (v6 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
                continue;
            ep_set(e, i->ifa_addr, 0);
            found = 1;
        }
    if (!found && filter) {
        char names[200] = "";
        size_t n = 0;
        for (struct ifaddrs *i = ifs; i && n + IF_NAMESIZE + 3 < sizeof names; i = i->ifa_next)
            if (i->ifa_addr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6) &&
                !strstr(names, i->ifa_name))
                n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", i->ifa_name);
        CCL__FMT(why, len, "CCL_SOCKET_IFNAME='%s' admits no interface of this host that is up with an address "
                 "(it has: %s)", filter, n ? names : "none");
    }
    freeifaddrs(ifs);
    return found ? 0 : -1;
}

/* CCL_BOOTSTRAP_ADDR: "host", "host:port", "[v6]:port" or a bare IPv6 address. */
static int resolve(Endpoint *e, const char *spec, char *why, size_t len)
{
    char host[256];
    const char *port = NULL, *close_ = spec[0] == '[' ? strchr(spec, ']') : NULL;
    if (close_) {
        CCL__FMT(host, sizeof host, "%.*s", (int)(close_ - spec - 1), spec + 1);
        port = close_[1] == ':' ? close_ + 2 : close_[1] ? "?" : NULL;
    } else {
        const char *colon = strchr(spec, ':');
        int one = colon && !strchr(colon + 1, ':');
        CCL__FMT(host, sizeof host, "%.*s", one ? (int)(colon - spec) : (int)strlen(spec), spec);
        port = one ? colon + 1 : NULL;
    }
    char *end = NULL;
    long p = port ? strtol(port, &end, 10) : 0;
    if (port && (!*port || *end || p < 0 || p > 65535)) {
        CCL__FMT(why, len, "CCL_BOOTSTRAP_ADDR='%s': '%s' is not a port (0 to 65535)", spec, port);
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        CCL__FMT(why, len, "CCL_BOOTSTRAP_ADDR='%s': cannot resolve '%s': %s", spec, host,
                 rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    ep_set(e, res->ai_addr, (int)p);
    freeaddrinfo(res);
    return 0;
}

/* Where the root listens: CCL_BOOTSTRAP_ADDR, else CCL_SOCKET_IFNAME's interface, else the
 * first non-loopback IPv4 address, else 127.0.0.1. */
static int root_address(Endpoint *e, char *why, size_t len)
{
    const char *addr = getenv("CCL_BOOTSTRAP_ADDR"), *filter = getenv("CCL_SOCKET_IFNAME");
    if (addr && *addr)
        return resolve(e, addr, why, len);
    if (filter && *filter)
        return if_address(e, filter, why, len);
    if (if_address(e, NULL, why, len) == 0)
        return 0;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ep_set(e, (struct sockaddr *)&lo, 0);
    return 0;
}

/* ---- sockets ---- */

enum { IO_OK = 0, IO_ERR = -1, IO_TIMEOUT = -2, IO_EOF = -3 };

/* Milliseconds to the deadline, for poll. */
static int left_ms(double deadline)
{
    double l = deadline - ccl__now_ms();
    return l <= 0 ? 0 : l > 1e9 ? 1000000000 : (int)l + 1;
}

/* Moves n bytes to (out) or from a non-blocking socket by the deadline; IO_ERR leaves
 * errno set. */
static int io_move(int fd, void *buf, size_t n, double deadline, int out)
{
    char *p = buf;
    while (n) {
        ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return IO_EOF;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return IO_ERR;
        struct pollfd pf = {fd, out ? POLLOUT : POLLIN, 0};
        int r = poll(&pf, 1, left_ms(deadline));
        if (r == 0)
            return IO_TIMEOUT;
        if (r < 0 && errno != EINTR)
            return IO_ERR;
    }
    return IO_OK;
}

static const char *io_text(int rc)
{
    return rc == IO_TIMEOUT ? "timed out" : rc == IO_EOF ? "the connection was closed" : strerror(errno);
}

static void no_delay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A socket listening on e (port 0: any; e gets the one it has). fd, or -1 with why. */
static int listen_on(Endpoint *e, char *why, size_t len)
{
    int fd = socket(e->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t sl = sizeof e->sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&e->sa, e->len) != 0 || listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, (struct sockaddr *)&e->sa, &sl) != 0) {
        CCL__FMT(why, len, "cannot listen on %s: %s", e->text, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ep_set(e, (struct sockaddr *)&e->sa, -1);
    return fd;
}

/* A connection to e by the deadline: fd, or -1 with errno (ETIMEDOUT at the deadline).
 * With retry, a refused connection is tried again every 50 ms until the deadline. */
static int connect_to(const Endpoint *e, double deadline, int retry)
{
    for (;;) {
        int fd = socket(e->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int err = connect(fd, (const struct sockaddr *)&e->sa, e->len) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int k;
            while ((k = poll(&pf, 1, left_ms(deadline))) < 0 && errno == EINTR)
                ;
            socklen_t el = sizeof err;
            if (k <= 0)
                err = k == 0 ? ETIMEDOUT : errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                err = errno;
        }
        if (!err) {
            no_delay(fd);
            return fd;
        }
        close(fd);
        if (!retry || (err != ECONNREFUSED && err != EINTR && err != EAGAIN) || ccl__now_ms() + 50 > deadline) {
            errno = err;
            return -1;
        }
        usleep(50000);
    }
}

static int answer_send(int fd, ccl_result_t result, const void *data, size_t bytes, double deadline)
{
    Answer a = {.result = htonl((uint32_t)result), .bytes = htonl((uint32_t)bytes)};
    memcpy(a.magic, ANSWER_MAGIC, 8);
    int rc = io_move(fd, &a, sizeof a, deadline, 1);
    return rc == IO_OK && bytes ? io_move(fd, (void *)data, bytes, deadline, 1) : rc;
}

/* An answer of at most max bytes: *data (malloc'd, NUL after it) and *result; IO_ERR
 * with errno EPROTO for something else than an answer. */
static int answer_recv(int fd, size_t max, double deadline, ccl_result_t *result, char **data, size_t *bytes)
{
    Answer a;
    *data = NULL;
    int rc = io_move(fd, &a, sizeof a, deadline, 0);
    if (rc != IO_OK)
        return rc;
    *result = (ccl_result_t)ntohl(a.result);
    *bytes = ntohl(a.bytes);
    if (memcmp(a.magic, ANSWER_MAGIC, 8) || *bytes > max || !(*data = malloc(*bytes + 1))) {
        errno = *data || memcmp(a.magic, ANSWER_MAGIC, 8) || *bytes > max ? EPROTO : ENOMEM;
        return IO_ERR;
    }
    (*data)[*bytes] = 0;
    if ((rc = io_move(fd, *data, *bytes, deadline, 0)) != IO_OK) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

/* "rank 3 (host, pid 4711)" */
static const char *who(const Hello *h, int rank, char *buf, size_t len)
{
    CCL__FMT(buf, len, "rank %d (%.*s, pid %u)", rank, HOST, h->host, ntohl(h->pid));
    return buf;
}

/* The ranks of [lo, hi) whose have[] is negative (a socket not there, a count short), as
 * "rank 3" or "ranks 3, 5 and 7" (8 named). */
static void missing(const int *have, int lo, int hi, char *buf, size_t len)
{
    int total = 0, shown = 0;
    for (int r = lo; r < hi; r++)
        total += have[r] < 0;
    size_t n = (size_t)snprintf(buf, len, "rank%s ", total > 1 ? "s" : "");
    for (int r = lo; r < hi && n < len; r++)
        if (have[r] < 0 && shown < 8)
            n += (size_t)snprintf(buf + n, len - n, "%s%d", !shown++ ? "" : shown == total ? " and " : ", ", r);
    if (total > shown && n < len)
        snprintf(buf + n, len - n, " and %d more", total - shown);
}

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

static void root_fail(Root *rt, ccl_result_t r, const char *text)
{
    rt->failed = r;
    CCL__FMT(rt->why, sizeof rt->why, "%s", text);
    for (int p = 0; p < rt->n; p++)
        if (rt->fd[p] >= 0) {
            answer_send(rt->fd[p], r, rt->why, strlen(rt->why) + 1, ccl__now_ms() + HELLO_WAIT_MS);
            close(rt->fd[p]);
            rt->fd[p] = -1;
        }
}

/* One accepted connection's hello: the rank is in (1), or the connection is to close. */
static int root_take(Root *rt, int fd)
{
    Hello h;
    double by = ccl__now_ms() + HELLO_WAIT_MS;
    if (io_move(fd, &h, sizeof h, by, 0) != IO_OK)
        return 0;               /* nothing of ours */
    h.host[HOST - 1] = 0;
    int nranks = (int)ntohl(h.nranks), rank = (int)ntohl(h.rank);
    char text[TEXT] = "", w[128], w2[128];
    ccl_result_t r = CCL_ERR_INVALID_ARGUMENT;
    who(&h, rank, w, sizeof w);
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
                 who(&rt->hello[rank], rank, w2, sizeof w2), rank);
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
        answer_send(fd, r, text, strlen(text) + 1, by);
        return 0;
    }
    rt->fd[rank] = fd;
    rt->hello[rank] = h;
    rt->joined++;
    return 1;
}

/* Every rank's answer: the table, to the ranks of other processes first (a rank of this
 * process may end it, and this thread with it, once it has its own). */
static void root_answer(Root *rt)
{
    char host[HOST] = "";
    gethostname(host, sizeof host - 1);
    for (int mine = 0; mine < 2; mine++)
        for (int p = 0; p < rt->n; p++) {
            int here = ntohl(rt->hello[p].pid) == (uint32_t)getpid() && !strcmp(rt->hello[p].host, host);
            if (here == mine)
                answer_send(rt->fd[p], CCL_OK, rt->hello, sizeof *rt->hello * (size_t)rt->n,
                            ccl__now_ms() + rt->timeout_ms);
        }
}

static void *root_main(void *arg)
{
    Root *rt = arg;
    for (;;) {
        if (rt->n && rt->joined == rt->n && !rt->failed) {
            root_answer(rt);
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
        int k = poll(pf, (nfds_t)n + 1, left_ms(rt->deadline));
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
                missing(rt->fd, 0, rt->n, list, sizeof list);
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
                     "ended, or its init failed)", who(&rt->hello[left], left, w, sizeof w), rt->at);
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
    } else if (root_address(&e, why, sizeof why) != 0 || (rt->lfd = listen_on(&e, why, sizeof why)) < 0) {
        r = CCL_ERR_SYSTEM;
    }
    if (r == CCL_OK) {
        CCL__FMT(rt->at, sizeof rt->at, "%s", e.text);
        rt->timeout_ms = timeout;
        rt->deadline = ccl__now_ms() + timeout;
        /* The root takes no signal meant for the program's own threads. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int e2 = pthread_create(&t, &attr, root_main, rt);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    wire_of(&e, &w.root);
    id_check(&w);
    memcpy(id->internal, &w, sizeof w);
    CCL__LOG(CCL__LOG_INFO, CCL__SUB_INIT, -1, "%s: the root listens at %s (for %d ms before a rank comes)", fn,
             e.text, timeout);
    return CCL_OK;
}

/* ---- a rank: the mesh ---- */

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
    TcpReq *sq, *sq_tail, *rq;  /* sends in order; the one receive */
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

/* A rank waits a little longer than the root waits for the ranks, so that the root's
 * verdict, naming who did not come, arrives first. */
static int grace_ms(int timeout_ms)
{
    return timeout_ms / 10 > 1000 ? timeout_ms / 10 : 1000;
}

static void net_free(TcpNet *t)
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
        if (ep_of(&e, &t->table[j].listen) != 0) {
            CCL__FMT(why, len, "the root's table holds no address for %s", who(&t->table[j], j, w, sizeof w));
            return CCL_ERR_INTERNAL;
        }
        if ((t->peer[j].fd = connect_to(&e, deadline, 0)) < 0 ||
            (rc = io_move(t->peer[j].fd, &mh, sizeof mh, deadline, 1)) != IO_OK) {
            const char *how = t->peer[j].fd < 0 ? strerror(errno) : io_text(rc);
            CCL__FMT(why, len, "rank %d cannot connect to %s at %s: %s", t->me, who(&t->table[j], j, w, sizeof w),
                     e.text, how);
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
        int k = poll(&pf, 1, left_ms(deadline));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            char list[160];
            for (int p = 0; p < t->n; p++)
                have[p] = t->peer[p].fd;
            missing(have, t->me + 1, t->n, list, sizeof list);
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
        if (io_move(fd, &h, sizeof h, by, 0) != IO_OK) {
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
        if (text[0] || answer_send(fd, CCL_OK, NULL, 0, by) != IO_OK) {
            if (text[0])
                answer_send(fd, CCL_ERR_INVALID_ARGUMENT, text, strlen(text) + 1, by);
            close(fd);
            continue;
        }
        no_delay(fd);
        t->peer[from].fd = fd;
        need--;
    }
    free(have);
    for (int j = 0; j < t->me; j++) {
        ccl_result_t r = CCL_OK;
        char *text = NULL;
        size_t bytes;
        int rc = answer_recv(t->peer[j].fd, TEXT, deadline, &r, &text, &bytes);
        if (rc != IO_OK || r != CCL_OK) {
            if (rc == IO_OK)
                CCL__FMT(why, len, "%s", text);
            else
                CCL__FMT(why, len, "%s did not answer rank %d's connection: %s", who(&t->table[j], j, w, sizeof w),
                         t->me, rc == IO_EOF ? "it closed it (its process ended, or its init failed)" : io_text(rc));
            free(text);
            return rc == IO_TIMEOUT ? CCL_ERR_TIMEOUT : rc == IO_OK ? r : CCL_ERR_PEER_FAILED;
        }
        free(text);
    }
    return CCL_OK;
}

/* Joins the rendezvous at root, then the mesh: the transport's state, or NULL with the
 * result in *r and the message in why. */
static TcpNet *join(const WireId *id, const Endpoint *root, int n, int me, int timeout_ms, ccl_result_t *r, char *why,
                    size_t len)
{
    TcpNet *t = calloc(1, sizeof *t);
    if (t)
        t->peer = calloc((size_t)n, sizeof *t->peer);
    if (!t || !t->peer) {
        free(t);
        *r = CCL_ERR_OUT_OF_MEMORY;
        CCL__FMT(why, len, "out of memory");
        return NULL;
    }
    *t = (TcpNet){.n = n, .me = me, .timeout_ms = timeout_ms, .peer = t->peer};
    memcpy(t->cookie, id->cookie, COOKIE);
    for (int p = 0; p < n; p++)
        t->peer[p].fd = -1;
    double deadline = ccl__now_ms() + timeout_ms + grace_ms(timeout_ms);
    int fd = connect_to(root, deadline, 1), lfd = -1, rc = IO_OK;
    Endpoint mine;
    socklen_t sl = sizeof mine.sa;
    const char *filter = getenv("CCL_SOCKET_IFNAME");
    Hello h = {.nranks = htonl((uint32_t)n), .rank = htonl((uint32_t)me), .timeout_ms = htonl((uint32_t)timeout_ms),
               .pid = htonl((uint32_t)getpid())};
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
    if (filter && *filter ? if_address(&mine, filter, why, len) != 0
                          : getsockname(fd, (struct sockaddr *)&mine.sa, &sl) != 0)
        goto fail;
    if (!(filter && *filter))
        ep_set(&mine, (struct sockaddr *)&mine.sa, 0);
    if ((lfd = listen_on(&mine, why, len)) < 0)
        goto fail;
    memcpy(h.magic, HELLO_MAGIC, 8);
    memcpy(h.cookie, id->cookie, COOKIE);
    wire_of(&mine, &h.listen);
    gethostname(h.host, HOST - 1);
    ccl_result_t answer = CCL_OK;
    if ((rc = io_move(fd, &h, sizeof h, deadline, 1)) == IO_OK)
        rc = answer_recv(fd, sizeof(Hello) * (size_t)n, deadline, &answer, &table, &bytes);
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
    net_free(t);
    return NULL;
}

/* ---- the init's bootstrap over the mesh ---- */

/* Every rank's `bytes` to every other rank, and as many read from each: at most the
 * timeout, a peer that closes or fails named in t->why. */
static int boot_allgather(void *ctx, const void *in, void *out, size_t bytes)
{
    TcpNet *t = ctx;
    uint32_t k = ++t->exchanges;
    int n = t->n, fail = 0;
    memcpy((char *)out + (size_t)t->me * bytes, in, bytes);
    size_t *sent = calloc((size_t)n * 2, sizeof *sent), *got = sent + n;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    int *have = calloc((size_t)n, sizeof *have);
    char w[128];
    if (!sent || !pf || !have) {
        CCL__FMT(t->why, t->whylen, "rank %d is out of memory in exchange %u of the init", t->me, k);
        fail = 1;
    }
    double deadline = ccl__now_ms() + t->timeout_ms;
    for (int pending = (n - 1) * 2; !fail && pending > 0 && bytes;) {
        for (int p = 0; p < n; p++) {
            short ev = (short)((p != t->me && sent[p] < bytes ? POLLOUT : 0) | (p != t->me && got[p] < bytes ? POLLIN : 0));
            pf[p] = (struct pollfd){ev ? t->peer[p].fd : -1, ev, 0};
        }
        int r = poll(pf, (nfds_t)n, left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            char list[160];
            for (int p = 0; p < n; p++)
                have[p] = p == t->me || got[p] == bytes ? 0 : -1;
            missing(have, 0, n, list, sizeof list);
            CCL__FMT(t->why, t->whylen, "rank %d waited %d ms in exchange %u of the init for %s", t->me,
                     t->timeout_ms, k, list);
            fail = 1;
            break;
        }
        for (int p = 0; p < n && !fail; p++) {
            if (!pf[p].revents)
                continue;
            ssize_t m = 0;
            if (sent[p] < bytes && (m = send(pf[p].fd, (const char *)in + sent[p], bytes - sent[p],
                                             MSG_NOSIGNAL | MSG_DONTWAIT)) > 0)
                pending -= (sent[p] += (size_t)m) == bytes;
            if (m >= 0 && got[p] < bytes &&
                (m = recv(pf[p].fd, (char *)out + (size_t)p * bytes + got[p], bytes - got[p], MSG_DONTWAIT)) > 0)
                pending -= (got[p] += (size_t)m) == bytes;
            if (m == 0 || (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                CCL__FMT(t->why, t->whylen, "%s, in exchange %u of the init with rank %d: %s",
                         who(&t->table[p], p, w, sizeof w), k, t->me,
                         m == 0 ? "closed its connection (its init failed, or its process ended)" : strerror(errno));
                fail = 1;
            }
        }
    }
    free(sent);
    free(pf);
    free(have);
    return fail ? -1 : 0;
}

static int boot_barrier(void *ctx)
{
    char one = 1, all[CCLC_MAX_RANKS];
    return boot_allgather(ctx, &one, all, 1);
}

/* ---- the transport (ccl_net_t): frames over non-blocking sockets ---- */

static int peer_failed(TcpNet *t, int p, int err)
{
    char w[128];
    TcpPeer *pe = &t->peer[p];
    if (!pe->err)
        CCL__LOG(CCL__LOG_WARN, CCL__SUB_INIT, t->me, "the connection to %s failed: %s", who(&t->table[p], p, w, sizeof w),
                 err == ECONNRESET ? "it was closed or reset (its process ended?)" : strerror(err));
    pe->err = err;
    return err;
}

/* Writes what the kernel takes of p's queued sends, in order. 0, or the errno of a
 * failure. */
static int push(TcpNet *t, int p)
{
    TcpPeer *pe = &t->peer[p];
    for (TcpReq *q; (q = pe->sq) && !pe->err;) {
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
        if (!(pe->sq = q->next))
            pe->sq_tail = NULL;
    }
    return pe->err;
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
            if (b > q->cap)
                return peer_failed(t, p, EMSGSIZE);
            q->bytes = (size_t)b;
        }
        if (q->moved == 8 + q->bytes && !head) {
            q->complete = 1;
            pe->rq = NULL;
        } else if (q->moved == 8 && q->bytes == 0) {
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
    for (TcpReq **pp = &pe->sq, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            if (pe->sq_tail == q)
                pe->sq_tail = prev;
            break;
        }
    if (q->moved && !q->complete && !pe->err)
        pe->err = ECANCELED;
    free(q);
    return 0;
}

/* Shuts every connection that carried messages for writing and reads it until the peer
 * has shut it too (the file's opening says why), at most RELEASE_MS; then closes all. */
static void tcp_release(void *ctx)
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
        int k = poll(pf, (nfds_t)t->n, left_ms(deadline));
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
    net_free(t);
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
    else if (check != w->check || ep_of(root, &w->root) != 0)
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
    char why[TEXT];
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
    ccl_net_t net = {.isend = tcp_isend, .irecv = tcp_irecv, .test = tcp_test, .cancel = tcp_cancel,
                     .release = tcp_release, .ctx = t, .thread_safe = 1};
    r = ccl__comm_init_net(comm, &boot, &net, ranks_per_node, device, config, fn);
    if (r == CCL_OK) {
        t->why = NULL;          /* the bootstrap is not used after the init */
        return CCL_OK;
    }
    if (why[0]) {
        char first[1024];
        CCL__FMT(first, sizeof first, "%s", ccl_comm_last_error(NULL));
        ccl__set_error(NULL, r, "%s (%s)", first, why);
    }
    return r;
}
