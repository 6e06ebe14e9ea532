/* agree.c: agreement among ranks through a ccl_bootstrap_t (see harness.h). The same
 * calls serve both launch modes: the environment bootstrap between processes and the
 * threads bootstrap inside one process. */
#include <string.h>

#include "harness.h"

int tool_allgather(const ccl_bootstrap_t *boot, int nranks, const void *in, void *out, size_t bytes, void *scratch)
{
    if (bytes <= TOOL_AGREE_PIECE)
        return boot->allgather(boot->ctx, in, out, bytes) != 0 ? -1 : 0;
    char *tmp = scratch;
    for (size_t off = 0; off < bytes; off += TOOL_AGREE_PIECE) {
        size_t m = bytes - off < TOOL_AGREE_PIECE ? bytes - off : TOOL_AGREE_PIECE;
        if (boot->allgather(boot->ctx, (const char *)in + off, tmp, m) != 0)
            return -1;
        for (int r = 0; r < nranks; r++)
            memcpy((char *)out + (size_t)r * bytes + off, tmp + (size_t)r * m, m);
    }
    return 0;
}
