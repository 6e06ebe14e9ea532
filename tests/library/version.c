/* version.c: ccl_version() agrees with the header's CCL_VERSION_* macros. Built once
 * against libccl.a (make) and once against libccl.so (tests/library/run.sh); prints
 * "ok NAME" or "FAIL NAME: why". */
#include <stdio.h>
#include <string.h>

#include "ccl.h"

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "version";
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", CCL_VERSION_MAJOR, CCL_VERSION_MINOR, CCL_VERSION_PATCH);
    const char *got = ccl_version();
    if (!got || strcmp(got, want)) {
        printf("FAIL %s: ccl_version() is \"%s\", the header says \"%s\"\n", name, got ? got : "(null)", want);
        return 1;
    }
    printf("ok %s\n", name);
    return 0;
}
