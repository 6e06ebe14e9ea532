/* parse_ctx.h: state shared by the Flex scanner and the Bison parser of one parse. */
#ifndef PARSE_CTX_H
#define PARSE_CTX_H

#include "cclc.h"

struct ParseCtx {
    Arena *arena;
    Diag *diag;
    int line, col;      /* the scanner's position: next character */
    int depth;          /* nesting of blocks and parentheses, bounded by CCLC_MAX_NESTING */
    Ast *ast;           /* the result */
};

#endif
