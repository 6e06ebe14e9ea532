/* parse_ctx.h: state shared by the Flex scanner and the Bison parser of one parse. */
#ifndef PARSE_CTX_H
#define PARSE_CTX_H

#include "cclc.h"

struct ParseCtx {
    Arena *arena;
    Diag *diag;
    int line, col;      /* the scanner's position: next character */
    /* Unclosed '{' so far, and where the innermost ones opened, to say which block a
     * truncated file leaves open. */
#define MAX_OPEN_BRACES 64
    int open_braces;
    SrcLoc brace_loc[MAX_OPEN_BRACES];
    Ast *ast;           /* the result */
    int too_deep;       /* an expression passed CCLC_MAX_EXPR_DEPTH (said once) */
};

#endif
