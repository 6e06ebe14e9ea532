/* verdict.c: what one rank of `cclc run` found (run.h's Verdict), shared by run.c
 * (fixed-size collectives) and run_v.c (allgatherv, alltoallv): its first failure, and
 * the library's message when synchronizing the ranks fails. Calls nothing of `cclc
 * run` itself, so neither of the two runs calls the other back. */
#include "internal.h"
#include "run.h"

void cclc_run_fail(Verdict *v, const char *msg)
{
    if (!v->failed_call) {
        v->failed_call = 1;
        CCL__FMT(v->first, sizeof v->first, "%s", msg);
    }
}

int cclc_run_sync(ccl_comm_t **comms, int n, Verdict *v, int failed)
{
    for (int i = 0; i < n; i++)
        if (ccl_comm_synchronize(comms[i]) != CCL_OK && !failed) {
            cclc_run_fail(&v[i], ccl_comm_last_error(comms[i]));
            failed = 1;
        }
    return failed;
}
