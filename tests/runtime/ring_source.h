/* ring_source.h: the ring all-reduce as source text, for tests that load an algorithm
 * from a string (ccl_algorithm_load accepts text starting with "algorithm"). */
#ifndef RING_SOURCE_H
#define RING_SOURCE_H

static const char *RING =
    "algorithm tring : allreduce\n"
    "ranks N in 2..64\n"
    "chunks N\n"
    "scratch stage[N - 1]\n"
    "for r in 0..N on r tb 0 {\n"
    "  let next = (r + 1) % N\n"
    "  let prev = (r - 1) % N\n"
    "  for k in 0..N-1 {\n"
    "    if k == 0 { put stage@next[0] <- in[r] } else { put stage@next[k] <- out[(r - k) % N] }\n"
    "    signal next\n"
    "    wait prev\n"
    "    reduce out[(r - k - 1) % N] <- in[(r - k - 1) % N], stage[k]\n"
    "  }\n"
    "  for k in 0..N-1 {\n"
    "    put out@next[(r + 1 - k) % N] <- out[(r + 1 - k) % N]\n"
    "    signal next\n"
    "    wait prev\n"
    "  }\n"
    "}\n";

#endif
