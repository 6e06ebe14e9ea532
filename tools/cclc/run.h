/* run.h: `cclc run` (run.c), the part of the cclc driver that links libccl. */
#ifndef CCLC_RUN_H
#define CCLC_RUN_H

/* argv[0] is the FILE argument (everything after "run"); returns the exit status. */
int cclc_run_command(int argc, char **argv);

#endif
