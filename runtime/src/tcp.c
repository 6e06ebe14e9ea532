/* tcp.c: the sockets and addresses under tcpboot.c and tcpnet.c (tcp.h): where to listen
 * (CCL_BOOTSTRAP_ADDR, CCL_SOCKET_IFNAME, this host's interfaces), listening, connecting
 * and moving bytes with deadlines on non-blocking sockets, the answer every hello gets,
 * and how messages name ranks. Every wait here is bounded by a deadline its caller gives;
 * a failure leaves errno or a sentence saying what and where. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcp.h"

#define ANSWER_MAGIC "CCLANSW1"

typedef struct {                /* the answer to either hello: the table, or a refusal's text, follows */
    char magic[8];
    uint32_t result;            /* CCL_OK, or the ccl_result_t of the refusal */
    uint32_t bytes;
} Answer;

static int ep_port(const Endpoint *e)
{
    return ntohs(e->sa.ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)&e->sa)->sin6_port
                                             : ((const struct sockaddr_in *)&e->sa)->sin_port);
}

/* e := sa (which may lie in e), with the port unless it is -1, and its text. */
void ccl__tcp_ep_set(Endpoint *e, const struct sockaddr *sa, int port)
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

void ccl__tcp_wire_of(const Endpoint *e, WireAddr *w)
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
int ccl__tcp_ep_of(Endpoint *e, const WireAddr *w)
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
    ccl__tcp_ep_set(e, (struct sockaddr *)&ss, ntohs(w->port));
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
int ccl__tcp_if_address(Endpoint *e, const char *filter, char *why, size_t len)
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
            ccl__tcp_ep_set(e, i->ifa_addr, 0);
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
    ccl__tcp_ep_set(e, res->ai_addr, (int)p);
    freeaddrinfo(res);
    return 0;
}

/* Where the root listens: CCL_BOOTSTRAP_ADDR, else CCL_SOCKET_IFNAME's interface, else the
 * first non-loopback IPv4 address, else 127.0.0.1. */
int ccl__tcp_root_address(Endpoint *e, char *why, size_t len)
{
    const char *addr = getenv("CCL_BOOTSTRAP_ADDR"), *filter = getenv("CCL_SOCKET_IFNAME");
    if (addr && *addr)
        return resolve(e, addr, why, len);
    if (filter && *filter)
        return ccl__tcp_if_address(e, filter, why, len);
    if (ccl__tcp_if_address(e, NULL, why, len) == 0)
        return 0;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ccl__tcp_ep_set(e, (struct sockaddr *)&lo, 0);
    return 0;
}

/* Milliseconds to the deadline, for poll. */
int ccl__tcp_left_ms(double deadline)
{
    double l = deadline - ccl__now_ms();
    return l <= 0 ? 0 : l > 1e9 ? 1000000000 : (int)l + 1;
}

/* Moves n bytes to (out) or from a non-blocking socket by the deadline; IO_ERR leaves
 * errno set. */
int ccl__tcp_io_move(int fd, void *buf, size_t n, double deadline, int out)
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
        int r = poll(&pf, 1, ccl__tcp_left_ms(deadline));
        if (r == 0)
            return IO_TIMEOUT;
        if (r < 0 && errno != EINTR)
            return IO_ERR;
    }
    return IO_OK;
}

const char *ccl__tcp_io_text(int rc)
{
    return rc == IO_TIMEOUT ? "timed out" : rc == IO_EOF ? "the connection was closed" : strerror(errno);
}

void ccl__tcp_no_delay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A socket listening on e (port 0: any; e gets the one it has). fd, or -1 with why. */
int ccl__tcp_listen_on(Endpoint *e, char *why, size_t len)
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
    ccl__tcp_ep_set(e, (struct sockaddr *)&e->sa, -1);
    return fd;
}

/* A connection to e by the deadline: fd, or -1 with errno (ETIMEDOUT at the deadline).
 * With retry, a refused connection is tried again every 50 ms until the deadline. */
int ccl__tcp_connect_to(const Endpoint *e, double deadline, int retry)
{
    for (;;) {
        int fd = socket(e->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int err = connect(fd, (const struct sockaddr *)&e->sa, e->len) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            int k;
            while ((k = poll(&pf, 1, ccl__tcp_left_ms(deadline))) < 0 && errno == EINTR)
                ;
            socklen_t el = sizeof err;
            if (k <= 0)
                err = k == 0 ? ETIMEDOUT : errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                err = errno;
        }
        if (!err) {
            ccl__tcp_no_delay(fd);
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

int ccl__tcp_answer_send(int fd, ccl_result_t result, const void *data, size_t bytes, double deadline)
{
    Answer a = {.result = htonl((uint32_t)result), .bytes = htonl((uint32_t)bytes)};
    memcpy(a.magic, ANSWER_MAGIC, 8);
    int rc = ccl__tcp_io_move(fd, &a, sizeof a, deadline, 1);
    return rc == IO_OK && bytes ? ccl__tcp_io_move(fd, (void *)data, bytes, deadline, 1) : rc;
}

/* An answer of at most max bytes: *data (malloc'd, NUL after it) and *result; IO_ERR
 * with errno EPROTO for something else than an answer. */
int ccl__tcp_answer_recv(int fd, size_t max, double deadline, ccl_result_t *result, char **data, size_t *bytes)
{
    Answer a;
    *data = NULL;
    int rc = ccl__tcp_io_move(fd, &a, sizeof a, deadline, 0);
    if (rc != IO_OK)
        return rc;
    *result = (ccl_result_t)ntohl(a.result);
    *bytes = ntohl(a.bytes);
    if (memcmp(a.magic, ANSWER_MAGIC, 8) || *bytes > max || !(*data = malloc(*bytes + 1))) {
        errno = *data || memcmp(a.magic, ANSWER_MAGIC, 8) || *bytes > max ? EPROTO : ENOMEM;
        return IO_ERR;
    }
    (*data)[*bytes] = 0;
    if ((rc = ccl__tcp_io_move(fd, *data, *bytes, deadline, 0)) != IO_OK) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

/* "rank 3 (host, pid 4711)" */
const char *ccl__tcp_who(const Hello *h, int rank, char *buf, size_t len)
{
    CCL__FMT(buf, len, "rank %d (%.*s, pid %u)", rank, HOST, h->host, ntohl(h->pid));
    return buf;
}

/* The ranks of [lo, hi) whose have[] is negative (a socket not there, a count short), as
 * "rank 3" or "ranks 3, 5 and 7" (8 named). */
void ccl__tcp_missing(const int *have, int lo, int hi, char *buf, size_t len)
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

