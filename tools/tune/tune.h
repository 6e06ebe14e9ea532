/* tune.h: what the files of ccl-tune share (see tune.c for the tool).
 *
 *   tune.c    options, ranks, timing, the incumbent, the table: main
 *   model.c   the candidates (the shapes the options allow for every algorithm file)
 *             and the alpha-beta model that ranks them */
#ifndef CCL_TUNE_H
#define CCL_TUNE_H

#include <limits.h>
#include <stddef.h>

#include "ccl.h"
#include "internal.h"
#include "harness.h"

enum { MAX_LIST = 16, MAX_ALGOS = 32, MAX_CANDS = 4096, MAX_SIZES = 48, MAX_REPS = 1000 };

/* ===== options (tune.c) ===== */

typedef struct {
    int ranks;
    int colls[CCL__TUNE_COLLS];      /* 1: tune this collective */
    size_t lo, hi;
    ccl_dtype_t dtype;
    ccl_op_t op;
    int inst[MAX_LIST], ninst;
    int threads[MAX_LIST], nthreads; /* 0 in the list: the backend's default */
    int slices[MAX_LIST], nslices;   /* 0 in the list: the program's */
    int protos;                      /* bit p: Protocol p; 0: the program's and lines (GPU) */
    int keep, per_algo;
    double slack;
    int iters, reps, warmup, iters_given;
    int graph;                       /* -1: on for GPUs */
    ccl_backend_t backend;
    const char *out;
    int dry_run, verbose, timeout_ms;
    double alpha_us, block_gbps, peak_gbps;  /* model parameters; 0: the backend's */
    int model;                       /* -1: the backend's model; 0: CPU's, 1: GPU's (--dry-run studies) */
    int incumbent;                   /* time libccl's current choice too (--no-incumbent: 0) */
    int plain;                       /* --buffers plain: ordinary buffers, the table's ":plain" rows */
} Opts;

/* ===== candidates and the model (model.c) ===== */

/* One library file that admits N, with what the model needs from its Plan (the
 * maximum over ranks, so every rank computes the same). */
typedef struct {
    char path[PATH_MAX], rel[CCL__TUNE_PATH];
    Collective coll;
    Protocol proto;
    int lines;                       /* a line protocol can carry it (cclc_plan_can_run_lines) */
    int pipeline_safe, slices0, ntb;
    double steps;                    /* waits in the longest block: dependent hops */
    double remote, local;            /* chunks moved over links / locally, per unit of K */
} Algo;

typedef struct {
    int algo;
    CclShape shape;                  /* instances, protocol (1 + Protocol), threads, slices */
} Cand;

/* The backend's model parameters (microseconds, GB/s). */
typedef struct {
    double alpha, alpha_ll, block, block_ll, peak, local_block, gamma, launch;
} Model;

/* The model's parameters: the GPU's or the CPU's (gpu), with the options' overrides. */
Model tune_model_for(const Opts *o, int gpu);
/* Predicted microseconds of candidate shape s of algorithm a for a call of `bytes`. */
double tune_model_us(const Model *m, const Algo *a, const CclShape *s, size_t bytes);
/* Reads the model's numbers from a loaded algorithm's Plan into a (path, rel and coll
 * are the caller's). */
void tune_algo_features(Algo *a, const ccl_algorithm_t *alg);
/* Every shape of every algorithm the options allow, under the GPU's shape space where
 * gpu_model (protocols; else the program's own), into cands: how many (at most max). */
int tune_make_cands(const Opts *o, int gpu_model, const Algo *algos, int na, Cand *cands, int max);
/* "FILE I=.. T=.. S=.. PROTOCOL": candidate c of algorithm a as the summary prints it. */
void tune_shape_text(const Cand *c, const Algo *a, char *buf, size_t len);

#endif
