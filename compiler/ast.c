/* ast.c: names of the language's enumerations, for messages and plans. */
#include <string.h>

#include "cclc.h"

const char *cclc_coll_name(Collective c)
{
    static const char *names[] = {"allreduce", "allgather",  "reduce_scatter", "alltoall",
                                  "broadcast", "reduce",     "allgatherv",     "alltoallv"};
    return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "?";
}

const char *cclc_proto_name(Protocol p)
{
    static const char *names[] = {"simple", "ll", "ll128"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

int cclc_proto_parse(const char *name)
{
    for (int p = PROTO_SIMPLE; p <= PROTO_LL128; p++)
        if (!strcmp(name, cclc_proto_name((Protocol)p)))
            return p;
    return -1;
}

const char *cclc_step_name(StepKind k)
{
    static const char *names[] = {"put", "get", "copy", "reduce", "signal", "wait", "barrier", "flush"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

Collective cclc_coll_base(Collective c)
{
    return c == COLL_ALLGATHERV ? COLL_ALLGATHER : c == COLL_ALLTOALLV ? COLL_ALLTOALL : c;
}

int cclc_coll_is_v(Collective c)
{
    return c == COLL_ALLGATHERV || c == COLL_ALLTOALLV;
}

int cclc_lines_ll128(Collective c, Protocol p)
{
    return p == PROTO_LL128 && !cclc_coll_is_v(c);
}

int cclc_coll_in_chunks(Collective c, int nranks, int k)
{
    c = cclc_coll_base(c);
    return (c == COLL_REDUCE_SCATTER || c == COLL_ALLTOALL) ? nranks * k : k;
}

int cclc_coll_out_chunks(Collective c, int nranks, int k)
{
    c = cclc_coll_base(c);
    return (c == COLL_ALLGATHER || c == COLL_ALLTOALL) ? nranks * k : k;
}

int cclc_coll_home(Collective c, int nranks, int k, int root, int buf, int rank, int chunk)
{
    c = cclc_coll_base(c);
    int in_chunks = cclc_coll_in_chunks(c, nranks, k), j = chunk / k, pos = chunk % k;
    if (c != COLL_ALLGATHER && c != COLL_ALLTOALL && c != COLL_BROADCAST)
        return -1;
    if (buf == BUF_IN)
        return rank * in_chunks + chunk;
    if (buf != BUF_OUT)
        return -1;
    switch (c) {
    case COLL_ALLGATHER: return j * in_chunks + pos;                   /* out@r[j*K+c] = in@j[c] */
    case COLL_ALLTOALL: return j * in_chunks + rank * k + pos;         /* out@r[j*K+c] = in@j[r*K+c] */
    default: return root * in_chunks + chunk;                          /* out@r[c] = in@root[c] */
    }
}
