/* plan.c: the Plan as text for people (`cclc plan`) and as JSON for tools (`--json`).
 *
 * Output depends only on the Plan: no addresses, no hash order, no timestamps, so
 * golden files can compare it byte for byte. */
#include <stdio.h>

#include "cclc.h"

static const char *op_name(OpKind k)
{
    static const char *names[] = {"xfer", "signal", "wait", "barrier", "flush", "sync"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static void print_ref(FILE *out, const Program *p, Ref r)
{
    if (r.count == 1)
        fprintf(out, "%s@%d[%d]", p->buf_name[r.buf], r.rank, r.chunk);
    else
        fprintf(out, "%s@%d[%d..%d]", p->buf_name[r.buf], r.rank, r.chunk, r.chunk + r.count);
}

static void print_lines(FILE *out, const PlanOp *op)
{
    fprintf(out, "  # line%s ", op->nlines == 1 ? "" : "s");
    for (int i = 0; i < op->nlines; i++)
        fprintf(out, "%s%d", i ? "," : "", op->lines[i]);
}

/* What each chunk of the op moves, where that sizes it: v-collectives, whose data (its
 * segment); fixed-size collectives' scratch-only ops, the data's chunk position. */
static void print_content(FILE *out, const Program *p, const PlanOp *op)
{
    if (!op->content)
        return;
    int inch = p->buf_chunks[BUF_IN], count = op->dst[0].count, v = cclc_coll_is_v(p->coll);
    fprintf(out, v ? " (data of" : " (data of position");
    for (int j = 0; j < count; j++) {
        int h = op->content[j];
        if (h < 0)
            fprintf(out, "%s none", j ? "," : "");
        else if (v)
            fprintf(out, "%s in@%d[%d]", j ? "," : "", h / inch, h % inch);
        else
            fprintf(out, "%s %d", j ? "," : "", h);
    }
    fprintf(out, ")");
}

void cclc_plan_print_text(FILE *out, const Plan *plan)
{
    const Program *p = plan->prog;
    fprintf(out, "plan %s: %s, N=%d", p->name, cclc_coll_name(p->coll), p->nranks);
    if (p->coll == COLL_BROADCAST || p->coll == COLL_REDUCE)
        fprintf(out, ", root=%d", p->root);
    fprintf(out, ", chunks %d, protocol %s, instances %d, pipeline %d\n", p->chunks, cclc_proto_name(p->protocol),
            p->instances, plan->proof.pipeline_safe ? p->pipeline : 1);
    fprintf(out, "buffers (chunks per rank):");
    for (int b = 0; b < p->nbufs; b++)
        fprintf(out, " %s %d%s", p->buf_name[b], p->buf_chunks[b], b + 1 < p->nbufs ? "," : "\n");
    fprintf(out, "thread blocks per rank: %d, semaphores per rank: %d\n", plan->ntb, plan->nsems);
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        fprintf(out, "\nrank %d tb %d:\n", b->rank, b->tb);
        for (int k = 0; k < b->nops; k++) {
            const PlanOp *op = &b->ops[k];
            fprintf(out, "  %3d %-7s ", k, op_name(op->kind));
            if (op->kind == OP_XFER) {
                for (int d = 0; d < op->ndst; d++) {
                    fprintf(out, "%s", d ? ", " : "");
                    print_ref(out, p, op->dst[d]);
                }
                fprintf(out, " <- %s", op->nsrc > 1 ? "reduce(" : "");
                for (int s = 0; s < op->nsrc; s++) {
                    fprintf(out, "%s", s ? ", " : "");
                    print_ref(out, p, op->src[s]);
                }
                fprintf(out, "%s%s", op->nsrc > 1 ? ")" : "", op->chan == CHAN_PORT ? " via port" : op->chan == CHAN_NET ? " via net" : "");
                print_content(out, p, op);
            } else if (op->npeer) {
                fprintf(out, "peer%s", op->npeer == 1 ? "" : "s");
                for (int j = 0; j < op->npeer; j++)
                    fprintf(out, " %d", op->peer[j]);
                if (op->kind != OP_FLUSH) {
                    fprintf(out, " (sem");
                    for (int j = 0; j < op->npeer; j++)
                        fprintf(out, " %d", op->sem[j]);
                    fprintf(out, op->kind == OP_SIGNAL ? " on the peer)" : ")");
                }
            }
            print_lines(out, op);
            fprintf(out, "\n");
        }
    }
}

static void json_ref(FILE *out, const Program *p, Ref r)
{
    fprintf(out, "{\"buf\": \"%s\", \"rank\": %d, \"chunk\": %d, \"count\": %d}", p->buf_name[r.buf], r.rank, r.chunk,
            r.count);
}

static void json_refs(FILE *out, const Program *p, const char *key, const Ref *refs, int n)
{
    fprintf(out, ", \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s", i ? ", " : "");
        json_ref(out, p, refs[i]);
    }
    fprintf(out, "]");
}

static void json_ints(FILE *out, const char *key, const int *v, int n)
{
    fprintf(out, ", \"%s\": [", key);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%d", i ? ", " : "", v[i]);
    fprintf(out, "]");
}

/* Names and buffers are identifiers of the language, so they need no JSON escaping. */
void cclc_plan_print_json(FILE *out, const Plan *plan)
{
    const Program *p = plan->prog;
    fprintf(out, "{\n  \"algorithm\": \"%s\", \"collective\": \"%s\", \"nranks\": %d, \"root\": %d,\n", p->name,
            cclc_coll_name(p->coll), p->nranks, p->root);
    fprintf(out, "  \"chunks\": %d, \"protocol\": \"%s\", \"instances\": %d, \"pipeline\": %d,\n", p->chunks,
            cclc_proto_name(p->protocol), p->instances, plan->proof.pipeline_safe ? p->pipeline : 1);
    fprintf(out, "  \"thread_blocks\": %d, \"semaphores\": %d,\n  \"buffers\": [", plan->ntb, plan->nsems);
    for (int b = 0; b < p->nbufs; b++)
        fprintf(out, "%s{\"name\": \"%s\", \"chunks\": %d}", b ? ", " : "", p->buf_name[b], p->buf_chunks[b]);
    fprintf(out, "],\n  \"blocks\": [");
    for (int i = 0; i < plan->nblocks; i++) {
        const PlanBlock *b = &plan->blocks[i];
        fprintf(out, "%s\n    {\"rank\": %d, \"tb\": %d, \"ops\": [", i ? "," : "", b->rank, b->tb);
        for (int k = 0; k < b->nops; k++) {
            const PlanOp *op = &b->ops[k];
            fprintf(out, "%s\n      {\"op\": \"%s\"", k ? "," : "", op_name(op->kind));
            if (op->kind == OP_XFER) {
                json_refs(out, p, "dst", op->dst, op->ndst);
                json_refs(out, p, "src", op->src, op->nsrc);
                fprintf(out, ", \"channel\": \"%s\"", op->chan == CHAN_PORT ? "port" : op->chan == CHAN_NET ? "net" : "memory");
                /* v-collectives: per chunk, the in chunk (rank * in chunks + index) whose data it
                 * moves, -1 for none (the text's "data of in@q[i]"); fixed-size collectives'
                 * scratch-only ops: the data's chunk position (the text's "data of position c"). */
                if (op->content)
                    json_ints(out, cclc_coll_is_v(p->coll) ? "content" : "position", op->content, op->dst[0].count);
            }
            if (op->npeer) {
                json_ints(out, "peers", op->peer, op->npeer);
                json_ints(out, "sems", op->sem, op->npeer);
            }
            json_ints(out, "lines", op->lines, op->nlines);
            fprintf(out, "}");
        }
        fprintf(out, "\n    ]}");
    }
    fprintf(out, "\n  ]\n}\n");
}
