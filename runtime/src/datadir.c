/* datadir.c: the shipped algorithms' folder of an installed libccl, compiled in.
 *
 * The build folder's libccl has none: it finds the algorithms of its source tree
 * (library.c). `make install` compiles this file again with CCL_INSTALL_ALGORITHM_DIR set
 * to PREFIX's folder (DATADIR/ccl/algorithms) and puts that object into the libccl.a and
 * libccl.so it installs, so a program linked statically with the installed libccl.a,
 * wherever it lies, finds them with no environment variable. */
#include "base.h"

#ifndef CCL_INSTALL_ALGORITHM_DIR
#define CCL_INSTALL_ALGORITHM_DIR ""
#endif

const char ccl__install_algorithm_dir[] = CCL_INSTALL_ALGORITHM_DIR;
