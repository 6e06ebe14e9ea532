/* ast.c: names of the language's enumerations, for messages and plans. */
#include "cclc.h"

const char *cclc_coll_name(Collective c)
{
    static const char *names[] = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"};
    return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "?";
}

const char *cclc_proto_name(Protocol p)
{
    static const char *names[] = {"simple", "ll", "ll128"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

const char *cclc_step_name(StepKind k)
{
    static const char *names[] = {"put", "get", "copy", "reduce", "signal", "wait", "barrier", "flush"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

int cclc_coll_in_chunks(Collective c, int nranks, int k)
{
    return (c == COLL_REDUCE_SCATTER || c == COLL_ALLTOALL) ? nranks * k : k;
}

int cclc_coll_out_chunks(Collective c, int nranks, int k)
{
    return (c == COLL_ALLGATHER || c == COLL_ALLTOALL) ? nranks * k : k;
}
