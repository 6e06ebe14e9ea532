/* model.c: ccl-tune's candidates and the model that ranks them (docs/tuner.md, "ccl-tune").
 *
 * Takes the algorithm files of one collective (read from their Plans: dependent steps,
 * bytes moved over links and locally, blocks per rank, protocol) and the options' shape
 * space; gives every candidate (file x instances x threads x slices x protocol) and a
 * simple alpha-beta estimate of its time per size. The estimate only chooses what
 * tune.c times; the table is decided by the times. Pure: no communicator, no state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"

Model tune_model_for(const Opts *o, int gpu)
{
    /* GPU: H100/H200 over NVLink (docs/perf/gpu-first: one LL block moves ~14 GB/s;
     * the SM-store ceiling is ~355 GB/s per GPU). CPU: host threads through memory. */
    Model m = gpu ? (Model){1.5, 0.8, 20, 14, 360, 60, 0.1, 4}
                  : (Model){5, 5, 2, 2, 6, 4, 3, 10};
    if (o->alpha_us)
        m.alpha = m.alpha_ll = o->alpha_us;
    if (o->block_gbps)
        m.block = m.block_ll = o->block_gbps;
    if (o->peak_gbps)
        m.peak = o->peak_gbps;
    return m;
}

/* Predicted microseconds of candidate c for a call of `bytes`: the dependent steps
 * pipelined over S slices, each a latency plus its share of the remote bytes at the
 * bandwidth of the rank's blocks (bounded by the peak), plus local copies and a small
 * cost per physical block. */
double tune_model_us(const Model *m, const Algo *a, const CclShape *s, size_t bytes)
{
    /* LL: LL's latency and block bandwidth, twice the bytes; LL128: LL's latency,
     * Simple's block bandwidth, 128/120 of the bytes. */
    Protocol proto = a->lines ? ccl__shape_protocol(s->protocol, a->proto) : PROTO_SIMPLE;
    int ll = proto == PROTO_LL, lines = proto != PROTO_SIMPLE;
    double P = (double)a->ntb * (s->instances ? s->instances : 1);
    double tf = s->threads ? s->threads / 512.0 : 1.0;
    double bw = (ll ? m->block_ll : m->block) * P * tf;
    if (bw > m->peak)
        bw = m->peak;
    double S = s->slices ? s->slices : 1, steps = a->steps;
    double remote = a->remote * (double)bytes * (ll ? 2 : lines ? 128.0 / 120 : 1) / 1e3;  /* KB -> us at GB/s */
    double local = a->local * (double)bytes / 1e3;
    double lbw = m->local_block * P * tf;
    return m->launch + (steps + S - 1) * ((lines ? m->alpha_ll : m->alpha) + remote / (steps * S * bw)) + local / lbw +
           m->gamma * P;
}

/* Reads the model's numbers from a loaded algorithm's Plan. */
void tune_algo_features(Algo *a, const ccl_algorithm_t *alg)
{
    const Plan *pl = alg->plan;
    const Program *pg = alg->prog;
    int N = pl->nranks, K = pg->chunks > 0 ? pg->chunks : 1;
    double *rem = calloc((size_t)N, sizeof *rem), *loc = calloc((size_t)N, sizeof *loc);
    int steps = 1;
    for (int b = 0; rem && loc && b < pl->nblocks; b++) {
        const PlanBlock *blk = &pl->blocks[b];
        int waits = 0;
        for (int i = 0; i < blk->nops; i++) {
            const PlanOp *op = &blk->ops[i];
            if (op->kind == OP_WAIT)
                waits++;
            if (op->kind != OP_XFER)
                continue;
            for (int k = 0; k < op->ndst + op->nsrc; k++) {
                const Ref *r = k < op->ndst ? &op->dst[k] : &op->src[k - op->ndst];
                if (r->rank != blk->rank)
                    rem[blk->rank] += r->count;
                else
                    loc[blk->rank] += r->count;
            }
        }
        if (waits > steps)
            steps = waits;
    }
    a->steps = steps;
    a->remote = a->local = 0;
    for (int r = 0; rem && loc && r < N; r++) {
        if (rem[r] / K > a->remote)
            a->remote = rem[r] / K;
        if (loc[r] / K > a->local)
            a->local = loc[r] / K;
    }
    free(rem);
    free(loc);
    a->ntb = pl->ntb > 0 ? pl->ntb : 1;
    a->proto = pg->protocol;
    a->lines = cclc_plan_can_run_lines(pl);
    a->pipeline_safe = pl->proof.pipeline_safe;
    a->slices0 = alg->slices;
}

int tune_make_cands(const Opts *o, int gpu_model, const Algo *algos, int na, Cand *cands, int max)
{
    int n = 0;
    for (int a = 0; a < na; a++) {
        /* Lines (ll, ll128) may replace Simple or each other; Simple never replaces lines.
         * A program no line protocol can carry runs as Simple whatever is asked: only its
         * own protocol is timed. */
        int protos[3], np = 0;
        if (!gpu_model || !algos[a].lines) {
            protos[np++] = 0;        /* the program's protocol */
        } else {
            for (int p = PROTO_SIMPLE; p <= PROTO_LL128; p++)
                if ((!o->protos || (o->protos & 1 << p)) && (p != PROTO_SIMPLE || algos[a].proto == PROTO_SIMPLE))
                    protos[np++] = 1 + p;
        }
        int sl[MAX_LIST + 1], nsl = 0;
        if (!algos[a].pipeline_safe) {
            sl[nsl++] = 1;
        } else if (o->nslices) {
            for (int k = 0; k < o->nslices; k++)
                sl[nsl++] = o->slices[k];
        } else {
            sl[nsl++] = 1;
            if (algos[a].slices0 > 1)
                sl[nsl++] = algos[a].slices0;
        }
        for (int p = 0; p < np; p++)
            for (int i = 0; i < o->ninst; i++)
                for (int t = 0; t < o->nthreads; t++)
                    for (int s = 0; s < nsl; s++) {
                        if (n == max)
                            return n;
                        cands[n++] = (Cand){.algo = a, .shape = {.instances = o->inst[i], .threads = o->threads[t],
                                                                 .slices = sl[s], .protocol = protos[p]}};
                    }
    }
    return n;
}

void tune_shape_text(const Cand *c, const Algo *a, char *buf, size_t len)
{
    char th[16];
    if (c->shape.threads)
        CCL__FMT(th, sizeof th, "%d", c->shape.threads);
    else
        CCL__FMT(th, sizeof th, "-");
    /* A program no line protocol can carry runs as Simple, whatever it or the shape asks. */
    Protocol proto = a->lines ? ccl__shape_protocol(c->shape.protocol, a->proto) : PROTO_SIMPLE;
    CCL__FMT(buf, len, "%s I=%d T=%s S=%d %s", a->rel, c->shape.instances, th, c->shape.slices, cclc_proto_name(proto));
}
