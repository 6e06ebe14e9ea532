/* A stand-in libnccl.so for tests/perf/unit/report_test.c: every symbol ccl-perf requires,
 * each returning success, ncclGetVersion saying FAKE_VERSION, and optionally the buffer
 * allocator (FAKE_MEMALLOC, NCCL 2.19+) and the windows (FAKE_WINDOWS, NCCL 2.27+). It
 * only lets perf_nccl_load look up symbols: nothing in it communicates.
 *
 *   cc -shared -fPIC -DFAKE_VERSION=22605 -DFAKE_MEMALLOC -o libnccl-2.26.so fake_nccl.c */
#include <stddef.h>
#include <stdlib.h>

typedef int R;
typedef struct { char internal[128]; } Id;

R ncclGetVersion(int *v);
R ncclGetUniqueId(Id *id);
R ncclCommInitRank(void **comm, int n, Id id, int rank);
R ncclCommDestroy(void *comm);
R ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c, void *st);
R ncclAllGather(const void *s, void *r, size_t n, int t, void *c, void *st);
R ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *c, void *st);
R ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *c, void *st);
R ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *c, void *st);
R ncclSend(const void *s, size_t n, int t, int peer, void *c, void *st);
R ncclRecv(void *r, size_t n, int t, int peer, void *c, void *st);
R ncclGroupStart(void);
R ncclGroupEnd(void);
const char *ncclGetErrorString(R r);

R ncclGetVersion(int *v) { *v = FAKE_VERSION; return 0; }
R ncclGetUniqueId(Id *id) { return 0; }
R ncclCommInitRank(void **comm, int n, Id id, int rank) { return 0; }
R ncclCommDestroy(void *comm) { return 0; }
R ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c, void *st) { return 0; }
R ncclAllGather(const void *s, void *r, size_t n, int t, void *c, void *st) { return 0; }
R ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *c, void *st) { return 0; }
R ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *c, void *st) { return 0; }
R ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *c, void *st) { return 0; }
R ncclSend(const void *s, size_t n, int t, int peer, void *c, void *st) { return 0; }
R ncclRecv(void *r, size_t n, int t, int peer, void *c, void *st) { return 0; }
R ncclGroupStart(void) { return 0; }
R ncclGroupEnd(void) { return 0; }
const char *ncclGetErrorString(R r) { return "fake NCCL"; }

#ifdef FAKE_MEMALLOC
R ncclMemAlloc(void **p, size_t n);
R ncclMemFree(void *p);
R ncclMemAlloc(void **p, size_t n) { return (*p = malloc(n)) ? 0 : 1; }
R ncclMemFree(void *p) { free(p); return 0; }
#endif

#ifdef FAKE_WINDOWS
R ncclCommWindowRegister(void *comm, void *buf, size_t n, void **win, int flags);
R ncclCommWindowDeregister(void *comm, void *win);
R ncclCommWindowRegister(void *comm, void *buf, size_t n, void **win, int flags) { *win = buf; return 0; }
R ncclCommWindowDeregister(void *comm, void *win) { return 0; }
#endif
