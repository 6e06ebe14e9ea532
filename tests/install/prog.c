/* prog.c: a user's program, built by tests/install/run.sh outside the tree against the
 * installed ccl.pc and run with no CCL_ variable, so libccl must find its algorithms by
 * itself.
 *
 *   prog NRANKS
 *
 * Prints ccl_version(), then an all-reduce of 1001 floats (host buffers) over NRANKS
 * ranks on the CPU backend, chosen by the config rather than CCL_BACKEND; each element
 * is checked, and ccl_comm_explain_choice's line names the algorithm file that ran.
 * Exits 0 when every element is right, else 1 with what went wrong on stderr. */
#include <stdio.h>
#include <stdlib.h>

#include <ccl.h>

#define MAX_RANKS 8

static int failed(const char *call, ccl_result_t r, const ccl_comm_t *comm)
{
    fprintf(stderr, "%s failed: %s: %s\n", call, ccl_result_string(r), ccl_comm_last_error(comm));
    return 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n < 2 || n > MAX_RANKS) {
        fprintf(stderr, "usage: %s NRANKS (2..%d)\n", argv[0], MAX_RANKS);
        return 2;
    }
    printf("ccl_version %s\n", ccl_version());

    enum { COUNT = 1001 };
    static float bufs[MAX_RANKS][COUNT];
    ccl_comm_t *comms[MAX_RANKS];
    ccl_config_t cfg = {.backend = CCL_BACKEND_CPU, .heap_bytes = 16 << 20};
    ccl_result_t r = ccl_comm_init_all(comms, n, NULL, &cfg);
    if (r != CCL_OK)
        return failed("ccl_comm_init_all", r, NULL);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < COUNT; i++)
            bufs[k][i] = (float)(k + 1) + (float)i;
    for (int k = 0; k < n; k++)
        if ((r = ccl_all_reduce(bufs[k], bufs[k], COUNT, CCL_F32, CCL_SUM, comms[k], NULL)) != CCL_OK)
            return failed("ccl_all_reduce", r, comms[k]);
    for (int k = 0; k < n; k++)
        if ((r = ccl_comm_synchronize(comms[k])) != CCL_OK)
            return failed("ccl_comm_synchronize", r, comms[k]);

    int bad = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < COUNT; i++) {
            float want = (float)(n * (n + 1) / 2) + (float)(n * i);
            if (bufs[k][i] != want && bad++ < 5)
                fprintf(stderr, "rank %d: element %d is %g, expected %g\n", k, i, bufs[k][i], want);
        }
    char why[1024];
    ccl_comm_explain_choice(comms[0], why, sizeof why);
    printf("all-reduce on %d ranks: %s; ran %s\n", n, bad ? "WRONG" : "every element right", why);
    for (int k = 0; k < n; k++)
        ccl_comm_destroy(comms[k]);
    return bad ? 1 : 0;
}
