/* uniqueid.c: communicators from a unique id over TCP (ccl_get_unique_id,
 * ccl_comm_init_rank_id), with no MPI: this program forks its ranks itself
 * (tests/uniqueid/run.sh; docs/multinode.md, "A unique id over TCP").
 *
 *   uniqueid MODE NRANKS RANKS_PER_NODE [R]
 *
 * Rank 0 makes the id and writes it into a pipe to each other rank, as a launcher's own
 * channel would carry it; every rank then makes the communicator (the CPU backend,
 * ranks_per_node nodes of that many ranks, so ranks of different nodes share no memory
 * and reach each other only through the TCP transport), and:
 *   check    runs tests/multinode's cases (cases.h) on smaller counts, every element
 *            checked; rank 0 prints one line per case, every rank "rank R: wrong N"
 *   p2p      cases.h's point-to-point cases on counts 1, 1001 and 65539, likewise
 *   v        cases.h's ccl_all_gather_v and ccl_all_to_all_v cases, likewise
 *   split    cases.h's splits (by node, by local index, with a rank of no color, an
 *            uneven layout refused), each child's collectives checked; rank 0 prints a
 *            line per split, every rank "rank R: wrong N"
 *   splitskip  rank R destroys its communicator without splitting it; every other rank's
 *            split (by local index) fails, and prints what it returned and its message
 *   skip     rank R never makes the communicator (it exits once it has the id); every
 *            other rank prints what its init returned and its message
 *   cookie   rank R is given the id of an earlier root at the same address and port
 *            (CCL_BOOTSTRAP_ADDR names a fixed port here): its connection is refused for
 *            its cookie, and the others time out, naming it
 *   noroot   the id comes from a process that has ended: every rank's init fails
 *   baddev   rank R passes device -5: its init refuses it once the connections are made,
 *            and closes them; the others fail at once, naming rank R
 *   kill     rank R is killed (SIGKILL) once the communicator is made, while the others
 *            all-reduce: they fail soon, each naming rank R (cases.h, run_kill_case)
 *   killmid  the same, rank R killed 300 ms into the all-reduces, in the middle of one
 *   badid    the id's first byte changed, then nranks 0 and rank = nranks: every
 *            argument refused, named
 *   getid    ccl_get_unique_id alone (the script sets CCL_BOOTSTRAP_ADDR or
 *            CCL_SOCKET_IFNAME to something wrong): prints its result and message
 * Every rank prints "rank R: init: RESULT: MESSAGE" when its init fails. The program
 * exits 0 when every rank exited 0 (in skip, cookie, noroot, baddev, kill and killmid: when
 * every rank that should fail did, and printed why; R killed excepted). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"

#include "../multinode/cases.h"

enum { MAX_RANKS = 16 };

static void fail_now(ccl_comm_t *comm, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, ccl_comm_last_error(comm));
    exit(1);
}

static long own(long wrong)
{
    return wrong;
}

/* A TCP port free on 127.0.0.1 just now, for CCL_BOOTSTRAP_ADDR. */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* An id whose root has ended: made by a child process that exits at once. 0 or -1. */
static int stale_id(ccl_unique_id_t *id)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ccl_result_t r = ccl_get_unique_id(id);
        if (r != CCL_OK)
            fprintf(stderr, "stale id: %s\n", ccl_comm_last_error(NULL));
        _exit(r == CCL_OK && write(fds[1], id, sizeof *id) == (ssize_t)sizeof *id ? 0 : 1);
    }
    close(fds[1]);
    int status = 1;
    ssize_t got = read(fds[0], id, sizeof *id);
    close(fds[0]);
    waitpid(pid, &status, 0);
    return got == (ssize_t)sizeof *id && status == 0 ? 0 : -1;
}

/* One rank: takes (rank 0: makes) the id, makes the communicator, runs the mode. The
 * process's exit status. */
static int run_rank(const char *mode, int rpn, int who, int (*pipes)[2], const ccl_unique_id_t *stale)
{
    ccl_unique_id_t id;
    if (rank == 0 && !strcmp(mode, "noroot")) {
        id = *stale;
    } else if (rank == 0) {
        if (ccl_get_unique_id(&id) != CCL_OK) {
            printf("rank 0: ccl_get_unique_id: %s\n", ccl_comm_last_error(NULL));
            return 1;
        }
    }
    for (int p = 1; p < size; p++)
        if (rank == 0 && write(pipes[p][1], &id, sizeof id) != (ssize_t)sizeof id)
            return 1;
    if (rank != 0 && read(pipes[rank][0], &id, sizeof id) != (ssize_t)sizeof id) {
        printf("rank %d: no id from rank 0\n", rank);
        return 1;
    }
    if (rank == who && !strcmp(mode, "cookie"))
        id = *stale;
    if (rank == who && !strcmp(mode, "skip"))
        return 0;
    ccl_comm_t *comm;
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU};
    int device = rank == who && !strcmp(mode, "baddev") ? -5 : CCL_DEVICE_AUTO;
    ccl_result_t r = ccl_comm_init_rank_id(&comm, size, id, rank, rpn, device, &cfg);
    if (r != CCL_OK) {
        printf("rank %d: init: %s: %s\n", rank, ccl_result_string(r), ccl_comm_last_error(NULL));
        return strcmp(mode, "check") && strcmp(mode, "p2p") && strcmp(mode, "v") && strcmp(mode, "split") ? 0 : 2;
    }
    if (!strcmp(mode, "kill") || !strcmp(mode, "killmid")) {
        int status = run_kill_case(comm, who, !strcmp(mode, "kill") ? 0 : 300);
        ccl_comm_destroy(comm);
        return status;
    }
    if (!strcmp(mode, "splitskip")) {
        /* Rank `who` destroys its communicator and ends without splitting it. */
        ccl_comm_t *child = NULL;
        r = rank == who ? CCL_OK : ccl_comm_split(comm, rank % rpn, rank, &child, NULL);
        if (rank != who)
            printf("rank %d: split: %s: %s\n", rank, ccl_result_string(r), ccl_comm_last_error(comm));
        if (child)
            ccl_comm_destroy(child);
        ccl_comm_destroy(comm);
        return rank == who ? 0 : r == CCL_OK;
    }
    if (!strcmp(mode, "split")) {
        long wrong = run_split_cases(comm, rpn, own);
        printf("rank %d: wrong %ld\n", rank, wrong);
        fflush(stdout);
        return ccl_comm_destroy(comm) != CCL_OK || wrong != 0;
    }
    if (!strcmp(mode, "p2p") || !strcmp(mode, "v")) {
        static const size_t counts[] = {1, 1001, 65539};
        long wrong = !strcmp(mode, "v") ? run_v_cases(comm, own) : run_p2p_cases(comm, counts, 3, own);
        printf("rank %d: wrong %ld\n", rank, wrong);
        fflush(stdout);
        return ccl_comm_destroy(comm) != CCL_OK || wrong != 0;
    }
    if (strcmp(mode, "check")) {
        printf("rank %d: init succeeded in mode %s\n", rank, mode);
        ccl_comm_destroy(comm);
        return 3;
    }
    static const size_t counts[] = {1, 1001, 65539};
    const CaseCounts cc = {counts, counts, counts, counts, counts, 3, 3, 3, 3, 3, NULL, 0};
    long wrong = run_cases(comm, &cc, own);
    printf("rank %d: wrong %ld\n", rank, wrong);
    fflush(stdout);
    return ccl_comm_destroy(comm) != CCL_OK || wrong != 0;
}

/* badid: the arguments ccl_comm_init_rank_id must refuse before it connects anywhere. */
static int bad_arguments(void)
{
    ccl_unique_id_t id;
    ccl_comm_t *comm;
    if (ccl_get_unique_id(&id) != CCL_OK) {
        printf("ccl_get_unique_id: %s\n", ccl_comm_last_error(NULL));
        return 1;
    }
    ccl_unique_id_t bad = id;
    bad.internal[0] ^= 1;
    ccl_result_t r[3] = {ccl_comm_init_rank_id(&comm, 2, bad, 0, 0, CCL_DEVICE_AUTO, NULL), CCL_OK, CCL_OK};
    printf("bad id: %s: %s\n", ccl_result_string(r[0]), ccl_comm_last_error(NULL));
    r[1] = ccl_comm_init_rank_id(&comm, 0, id, 0, 0, CCL_DEVICE_AUTO, NULL);
    printf("nranks 0: %s: %s\n", ccl_result_string(r[1]), ccl_comm_last_error(NULL));
    r[2] = ccl_comm_init_rank_id(&comm, 2, id, 2, 0, CCL_DEVICE_AUTO, NULL);
    printf("rank 2 of 2: %s: %s\n", ccl_result_string(r[2]), ccl_comm_last_error(NULL));
    printf("NULL id: %s: %s\n", ccl_result_string(ccl_get_unique_id(NULL)), ccl_comm_last_error(NULL));
    return r[0] != CCL_ERR_INVALID_ARGUMENT || r[1] != CCL_ERR_INVALID_ARGUMENT || r[2] != CCL_ERR_INVALID_ARGUMENT;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "check";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "badid"))
        return bad_arguments();
    if (!strcmp(mode, "getid")) {
        ccl_unique_id_t id;
        ccl_result_t r = ccl_get_unique_id(&id);
        printf("ccl_get_unique_id: %s: %s\n", ccl_result_string(r), ccl_comm_last_error(NULL));
        return r == CCL_OK;
    }
    size = argc > 2 ? atoi(argv[2]) : 4;
    int rpn = argc > 3 ? atoi(argv[3]) : 2, who = argc > 4 ? atoi(argv[4]) : size - 1;
    if (size < 1 || size > MAX_RANKS) {
        fprintf(stderr, "usage: uniqueid check|p2p|split|splitskip|skip|cookie|noroot|baddev|kill|killmid|badid|getid "
                "NRANKS RANKS_PER_NODE [R]\n");
        return 2;
    }
    ccl_unique_id_t stale;
    if (!strcmp(mode, "cookie") || !strcmp(mode, "noroot")) {
        /* A fixed port: the stale id's root and rank 0's listen at the same address. */
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
        setenv("CCL_BOOTSTRAP_ADDR", addr, 1);
        if (stale_id(&stale) != 0) {
            fprintf(stderr, "cannot make the stale id\n");
            return 1;
        }
    }
    int pipes[MAX_RANKS][2];
    pid_t pids[MAX_RANKS];
    for (int p = 0; p < size; p++)
        if (pipe(pipes[p]) != 0)
            return 1;
    for (int p = 0; p < size; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            rank = p;
            int status = run_rank(mode, rpn, who, pipes, &stale);
            fflush(stdout);
            _exit(status);
        }
    }
    for (int p = 0; p < size; p++) {
        close(pipes[p][0]);
        close(pipes[p][1]);
    }
    int failed = 0;
    for (int p = 0; p < size; p++) {
        int status = 0;
        waitpid(pids[p], &status, 0);
        if (p == who && !strncmp(mode, "kill", 4) && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
            continue;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("rank %d: exit status %d%s\n", p, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                   WIFSIGNALED(status) ? " (killed by a signal)" : "");
            failed = 1;
        }
    }
    return failed;
}
