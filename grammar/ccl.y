/* ccl.y: the grammar of the CCL language.
 *
 * A pure (reentrant) LALR(1) parser with locations. It builds the Ast of compiler/cclc.h
 * in the parse's arena and nothing else: names are resolved and integers evaluated by
 * compiler/expand.c. Statements are self-delimiting (each starts with a keyword), so
 * newlines carry no meaning and `;` is optional.
 *
 * On the first syntax error the parse stops: one precise message beats a cascade. */

%define api.pure full
%define api.prefix {cclc_yy}
%define parse.error custom
%locations
%param {yyscan_t scanner}
%parse-param {struct ParseCtx *ctx}

%code requires {
#include "cclc.h"
#include "parse_ctx.h"
typedef void *yyscan_t;
}

%code {
#include <string.h>
#define YYSTYPE CCLC_YYSTYPE
#define YYLTYPE CCLC_YYLTYPE
#include "lex.yy.h"

/* Bison's stack bound doubles as the nesting limit: deep nesting fails with a clear
 * message instead of exhausting memory or recursing without end in later passes. */
#define YYMAXDEPTH 1000
#define YYINITDEPTH 200

static void cclc_yyerror(CCLC_YYLTYPE *loc, yyscan_t scanner, struct ParseCtx *ctx, const char *msg);

static SrcLoc L(CCLC_YYLTYPE l)
{
    SrcLoc s = {l.first_line, l.first_column, 1};
    if (l.last_line == l.first_line && l.last_column >= l.first_column)
        s.len = l.last_column - l.first_column + 1;
    return s;
}

static Expr *expr_new(struct ParseCtx *ctx, ExprKind kind, CCLC_YYLTYPE loc)
{
    Expr *e = cclc_arena_alloc(ctx->arena, sizeof *e);
    e->kind = kind;
    e->loc = L(loc);
    e->depth = 1;
    return e;
}

/* An expression's depth (CCLC_MAX_EXPR_DEPTH): past the limit, one error, and the tree
 * stops growing deeper, so no later pass recurses further. */
static Expr *deepen(struct ParseCtx *ctx, Expr *e)
{
    int l = e->lhs ? e->lhs->depth : 0, r = e->rhs ? e->rhs->depth : 0, c = e->cond ? e->cond->depth : 0;
    e->depth = 1 + (l > r ? (l > c ? l : c) : (r > c ? r : c));
    if (e->depth <= CCLC_MAX_EXPR_DEPTH)
        return e;
    if (!ctx->too_deep)
        cclc_diag_error(ctx->diag, e->loc, "expression too deep: more than %d operators nest here; split it with `let`",
                        CCLC_MAX_EXPR_DEPTH);
    ctx->too_deep = 1;
    return e->lhs && e->lhs->depth >= e->depth - 1 ? e->lhs : e->rhs;
}
static Expr *binary(struct ParseCtx *ctx, int op, Expr *lhs, Expr *rhs, CCLC_YYLTYPE loc)
{
    if (ctx->too_deep) /* the program is refused: build no more (memory stays bounded) */
        return lhs;
    Expr *e = expr_new(ctx, EX_BINARY, loc);
    e->op = op;
    e->lhs = lhs;
    e->rhs = rhs;
    return deepen(ctx, e);
}

static Stmt *stmt_new(struct ParseCtx *ctx, StmtKind kind, CCLC_YYLTYPE loc)
{
    Stmt *s = cclc_arena_alloc(ctx->arena, sizeof *s);
    s->kind = kind;
    s->loc = L(loc);
    return s;
}

static SetExpr *set_new(struct ParseCtx *ctx, SetKind kind, Expr *elem, CCLC_YYLTYPE loc)
{
    SetExpr *s = cclc_arena_alloc(ctx->arena, sizeof *s);
    s->kind = kind;
    s->elem = elem;
    s->loc = L(loc);
    return s;
}

static Stmt *step_new(struct ParseCtx *ctx, StepKind kind, CCLC_YYLTYPE loc)
{
    Stmt *s = stmt_new(ctx, ST_STEP, loc);
    s->step = kind;
    return s;
}

/* Header items may each appear once. */
static void header_once(struct ParseCtx *ctx, const void *already, const char *what, CCLC_YYLTYPE loc)
{
    if (already)
        cclc_diag_error(ctx->diag, L(loc), "'%s' is given twice in the header", what);
}
}

%union {
    int64_t num;
    const char *str;
    Expr *expr;
    SetExpr *set;
    AstRef *ref;
    Stmt *stmt;
    StmtList stmts;
    RefList refs;
    ChannelKind chan;
}

%token ALGORITHM "'algorithm'" RANKS "'ranks'" IN "'in'" WHERE "'where'"
%token CHUNKS "'chunks'" PROTOCOL "'protocol'" SIZES "'sizes'" INSTANCES "'instances'"
%token PIPELINE "'pipeline'" SCRATCH "'scratch'" CONNECT "'connect'" MEMORY "'memory'"
%token PORT "'port'" NET "'net'" NODES "'nodes'" ALL "'all'" OTHERS "'others'" FOR "'for'" IF "'if'" ELSE "'else'"
%token LET "'let'" ON "'on'" TB "'tb'" PUT "'put'" GET "'get'" COPY "'copy'"
%token REDUCE "'reduce'" SIGNAL "'signal'" WAIT "'wait'" BARRIER "'barrier'" FLUSH "'flush'"
%token BIARROW "'<->'" ARROW "'<-'" DOTDOT "'..'" EQ "'=='" NE "'!='" LE "'<='" GE "'>='"
%token ANDAND "'&&'" OROR "'||'" SHL "'<<'" SHR "'>>'"
%token <num> INT "integer"
%token <str> IDENT "identifier"
%token TOO_BIG "number too large" BAD_CHAR "invalid character" BAD_NUMBER "malformed number"

%type <expr> expr opt_tb
%type <set> peer index_set peers comprehension
%type <ref> ref
%type <refs> ref_list
%type <stmt> stmt step for_stmt on_stmt if_stmt
%type <stmts> stmts block else_part loop_body
%type <str> buf_name coll_word
%type <chan> channel opt_channel

%right '?' ':'
%left OROR
%left ANDAND
%left '|'
%left '^'
%left '&'
%left EQ NE
%left '<' LE '>' GE
%left SHL SHR
%left '+' '-'
%left '*' '/' '%'
%precedence UNARY

%start program

%%

/* program: 'algorithm' NAME ':' COLLECTIVE, then header items and statements in any
 * order (header items only at the top level). */
program
    : ALGORITHM IDENT ':' coll_word {
          Ast *ast = ctx->ast;
          ast->name = $2;
          ast->name_loc = L(@2);
          ast->coll_loc = L(@4);
          static const struct { const char *name; Collective coll; } colls[] = {
              {"allreduce", COLL_ALLREDUCE}, {"allgather", COLL_ALLGATHER},
              {"reduce_scatter", COLL_REDUCE_SCATTER}, {"alltoall", COLL_ALLTOALL},
              {"broadcast", COLL_BROADCAST}, {"reduce", COLL_REDUCE},
              {"allgatherv", COLL_ALLGATHERV}, {"alltoallv", COLL_ALLTOALLV},
          };
          int found = 0;
          for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
              if (!strcmp($4, colls[i].name)) {
                  ast->coll = colls[i].coll;
                  found = 1;
              }
          if (!found)
              cclc_diag_error(ctx->diag, L(@4), "unknown collective '%s' (expected allreduce, "
                              "allgather, reduce_scatter, alltoall, broadcast, reduce, allgatherv or alltoallv)", $4);
      }
      items
    ;

items
    : %empty
    | items header_item
    | items stmt          { vec_push(ctx->arena, &ctx->ast->body, $2); }
    ;

header_item
    : RANKS IDENT IN expr DOTDOT expr {
          header_once(ctx, ctx->ast->nvar, "ranks", @1);
          ctx->ast->nvar = $2;
          ctx->ast->ranks_lo = $4;
          ctx->ast->ranks_hi = $6;
          ctx->ast->ranks_loc = L(@1);
      }
    | NODES IDENT IDENT IDENT {
          /* nodes M x L: the ranks are M nodes of L ranks each, N = M * L, rank r on node
           * r / L (docs/multinode.md). The middle word must be 'x'. */
          header_once(ctx, ctx->ast->nodes_var, "nodes", @1);
          if (strcmp($3, "x") != 0)
              cclc_diag_error(ctx->diag, L(@3), "expected 'x' between the node count and the ranks per node "
                              "('nodes M x L'), not '%s'", $3);
          else if (!strcmp($2, $4))
              cclc_diag_error(ctx->diag, L(@4), "'%s' names both the node count and the ranks per node", $2);
          ctx->ast->nodes_var = $2;
          ctx->ast->local_var = $4;
          ctx->ast->nodes_loc = L(@1);
      }
    | WHERE expr {
          $2->loc = L(@2); /* a failed constraint underlines all of it */
          vec_push(ctx->arena, &ctx->ast->where, $2);
      }
    | CHUNKS expr         { header_once(ctx, ctx->ast->chunks, "chunks", @1); ctx->ast->chunks = $2; }
    | CHUNKS IDENT '=' expr {
          /* chunks NAME = EXPR: the chunk count under a name of the program's choosing
           * (without one it is K). */
          header_once(ctx, ctx->ast->chunks, "chunks", @1);
          ctx->ast->chunks = $4;
          ctx->ast->chunks_name = $2;
          ctx->ast->chunks_name_loc = L(@2);
      }
    | INSTANCES expr      { header_once(ctx, ctx->ast->instances, "instances", @1); ctx->ast->instances = $2; }
    | PIPELINE expr       { header_once(ctx, ctx->ast->pipeline, "pipeline", @1); ctx->ast->pipeline = $2; }
    | PROTOCOL IDENT {
          int p = cclc_proto_parse($2);
          if (p >= 0) ctx->ast->protocol = (Protocol)p;
          else cclc_diag_error(ctx->diag, L(@2), "unknown protocol '%s' (expected simple, ll or ll128)", $2);
      }
    | SIZES INT DOTDOT INT {
          if ($2 <= 0 || $4 < $2)
              cclc_diag_error(ctx->diag, L(@1), "'sizes' needs 0 < low <= high bytes");
          ctx->ast->size_lo = $2;
          ctx->ast->size_hi = $4;
      }
    ;

stmts
    : %empty              { $$ = (StmtList){0}; }
    | stmts stmt          { $$ = $1; vec_push(ctx->arena, &$$, $2); }
    ;

block
    : '{' stmts '}'       { $$ = $2; }
    ;

stmt
    : LET IDENT '=' expr  { $$ = stmt_new(ctx, ST_LET, @$); $$->var = $2; $$->value = $4; }
    | SCRATCH IDENT '[' expr ']' {
          $$ = stmt_new(ctx, ST_SCRATCH, @2);
          $$->var = $2;
          $$->value = $4;
      }
    | CONNECT channel ALL { $$ = stmt_new(ctx, ST_CONNECT, @$); $$->chan = $2; }
    | CONNECT channel expr BIARROW expr {
          $$ = stmt_new(ctx, ST_CONNECT, @$);
          $$->chan = $2;
          $$->end_a = $3;
          $$->end_b = $5;
      }
    | for_stmt
    | if_stmt
    | on_stmt
    | step
    | ';'                 { $$ = stmt_new(ctx, ST_LET, @$); $$->var = NULL; }
    ;

channel
    : MEMORY              { $$ = CHAN_MEMORY; }
    | PORT                { $$ = CHAN_PORT; }
    | NET                 { $$ = CHAN_NET; }
    ;

/* The channel a put, get or reduce names (`put port out@p[0] <- in[0]`), where a pair of
 * ranks has both; CHAN_NONE: the pair's one channel (expand.c decides). */
opt_channel
    : %empty              { $$ = CHAN_NONE; }
    | channel
    ;

/* for VAR in LO..HI BODY: half-open; the body is a block or a single for/on statement,
 * so `for r in 0..N on r tb 0 { ... }` reads as one line. */
for_stmt
    : FOR IDENT IN expr DOTDOT expr loop_body {
          $$ = stmt_new(ctx, ST_FOR, @1);
          $$->var = $2;
          $$->lo = $4;
          $$->hi = $6;
          $$->body = $7;
      }
    ;

loop_body
    : block
    | for_stmt            { $$ = (StmtList){0}; vec_push(ctx->arena, &$$, $1); }
    | on_stmt             { $$ = (StmtList){0}; vec_push(ctx->arena, &$$, $1); }
    ;

if_stmt
    : IF expr block else_part {
          $$ = stmt_new(ctx, ST_IF, @1);
          $$->cond = $2;
          $$->body = $3;
          $$->orelse = $4;
      }
    ;

else_part
    : %empty              { $$ = (StmtList){0}; }
    | ELSE block          { $$ = $2; }
    | ELSE if_stmt        { $$ = (StmtList){0}; vec_push(ctx->arena, &$$, $2); }
    ;

on_stmt
    : ON expr opt_tb block {
          $$ = stmt_new(ctx, ST_ON, @1);
          $$->rank = $2;
          $$->tb = $3;
          $$->body = $4;
      }
    ;

opt_tb
    : %empty              { $$ = NULL; }
    | TB expr             { $$ = $2; }
    ;

step
    : PUT opt_channel ref ARROW ref {
          $$ = step_new(ctx, STEP_PUT, @1);
          $$->chan = $2;
          $$->dst = $3;
          vec_push(ctx->arena, &$$->srcs, $5);
      }
    | GET opt_channel ref ARROW ref {
          $$ = step_new(ctx, STEP_GET, @1);
          $$->chan = $2;
          $$->dst = $3;
          vec_push(ctx->arena, &$$->srcs, $5);
      }
    | COPY ref ARROW ref  { $$ = step_new(ctx, STEP_COPY, @1); $$->dst = $2; vec_push(ctx->arena, &$$->srcs, $4); }
    | REDUCE opt_channel ref ARROW ref_list {
          $$ = step_new(ctx, STEP_REDUCE, @1);
          $$->chan = $2;
          $$->dst = $3;
          $$->srcs = $5;
      }
    | SIGNAL peers        { $$ = step_new(ctx, STEP_SIGNAL, @1); $$->peers = $2; }
    | WAIT peers          { $$ = step_new(ctx, STEP_WAIT, @1); $$->peers = $2; }
    /* signal[NAME] P, wait[NAME] P: a named semaphore; waits pair with the signals of
     * their own name only. */
    | SIGNAL '[' IDENT ']' peers { $$ = step_new(ctx, STEP_SIGNAL, @1); $$->peers = $5; $$->tag = $3; }
    | WAIT '[' IDENT ']' peers { $$ = step_new(ctx, STEP_WAIT, @1); $$->peers = $5; $$->tag = $3; }
    | FLUSH peers         { $$ = step_new(ctx, STEP_FLUSH, @1); $$->peers = $2; }
    | BARRIER             { $$ = step_new(ctx, STEP_BARRIER, @1); }
    ;

ref_list
    : ref                 { $$ = (RefList){0}; vec_push(ctx->arena, &$$, $1); }
    | ref_list ',' ref    { $$ = $1; vec_push(ctx->arena, &$$, $3); }
    ;

/* BUF, BUF[INDEX], BUF[LO..HI], BUF@PEER[...]: no index means the whole buffer. */
ref
    : buf_name {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
      }
    | buf_name '[' index_set ']' {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
          $$->index = $3;
      }
    | buf_name '[' expr DOTDOT expr ']' {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
          $$->lo = $3;
          $$->hi = $5;
      }
    | buf_name '@' peer {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
          $$->peer = $3;
      }
    | buf_name '@' peer '[' index_set ']' {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
          $$->peer = $3;
          $$->index = $5;
      }
    | buf_name '@' peer '[' expr DOTDOT expr ']' {
          $$ = cclc_arena_alloc(ctx->arena, sizeof *$$);
          $$->loc = L(@$);
          $$->buf = $1;
          $$->peer = $3;
          $$->lo = $5;
          $$->hi = $7;
      }
    ;

/* `reduce` is both a step keyword and a collective's name. */
coll_word
    : IDENT
    | REDUCE              { $$ = "reduce"; }
    ;

/* `in` is both a keyword (for x in ...) and the input buffer's name. */
buf_name
    : IDENT
    | IN                  { $$ = "in"; }
    ;

/* After '@' only a simple operand, so `s@next[k]` needs no parentheses and
 * `s@(r + 1) % N` cannot be misread. */
peer
    : IDENT               { Expr *e = expr_new(ctx, EX_NAME, @1); e->name = $1; $$ = set_new(ctx, SET_ONE, e, @1); }
    | INT                 { Expr *e = expr_new(ctx, EX_INT, @1); e->value = $1; $$ = set_new(ctx, SET_ONE, e, @1); }
    | '(' expr ')'        { $$ = set_new(ctx, SET_ONE, $2, @2); }
    | OTHERS              { $$ = set_new(ctx, SET_OTHERS, NULL, @1); }
    | ALL                 { $$ = set_new(ctx, SET_ALL, NULL, @1); }
    | comprehension
    ;

index_set
    : expr                { $$ = set_new(ctx, SET_ONE, $1, @1); }
    | OTHERS              { $$ = set_new(ctx, SET_OTHERS, NULL, @1); }
    | ALL                 { $$ = set_new(ctx, SET_ALL, NULL, @1); }
    | comprehension
    ;

peers
    : expr                { $$ = set_new(ctx, SET_ONE, $1, @1); }
    | OTHERS              { $$ = set_new(ctx, SET_OTHERS, NULL, @1); }
    | ALL                 { $$ = set_new(ctx, SET_ALL, NULL, @1); }
    | comprehension
    ;

/* { ELEM : VAR in LO..HI } and { ELEM : VAR in LO..HI, COND } */
comprehension
    : '{' expr ':' IDENT IN expr DOTDOT expr '}' {
          $$ = set_new(ctx, SET_COMPREHENSION, $2, @$);
          $$->var = $4;
          $$->lo = $6;
          $$->hi = $8;
      }
    | '{' expr ':' IDENT IN expr DOTDOT expr ',' expr '}' {
          $$ = set_new(ctx, SET_COMPREHENSION, $2, @$);
          $$->var = $4;
          $$->lo = $6;
          $$->hi = $8;
          $$->cond = $10;
      }
    ;

expr
    : INT                 { $$ = expr_new(ctx, EX_INT, @1); $$->value = $1; }
    | IDENT               { $$ = expr_new(ctx, EX_NAME, @1); $$->name = $1; }
    | IDENT '(' expr ')'  { $$ = expr_new(ctx, EX_CALL, @1); $$->name = $1; $$->lhs = $3; $$ = deepen(ctx, $$); }
    | IDENT '(' expr ',' expr ')' {
          $$ = expr_new(ctx, EX_CALL, @1);
          $$->name = $1;
          $$->lhs = $3;
          $$->rhs = $5;
          $$ = deepen(ctx, $$);
      }
    /* A bounded fold: sum, min or max of the body for VAR = LO .. HI-1 (half-open). */
    | IDENT '(' IDENT IN expr DOTDOT expr ':' expr ')' {
          $$ = expr_new(ctx, EX_FOLD, @1);
          $$->name = $1;
          $$->var = $3;
          $$->cond = $5;
          $$->rhs = $7;
          $$->lhs = $9;
          $$ = deepen(ctx, $$);
      }
    | '(' expr ')'        { $$ = $2; }
    | '-' expr %prec UNARY { $$ = expr_new(ctx, EX_UNARY, @1); $$->op = '-'; $$->lhs = $2; $$ = deepen(ctx, $$); }
    | '!' expr %prec UNARY { $$ = expr_new(ctx, EX_UNARY, @1); $$->op = '!'; $$->lhs = $2; $$ = deepen(ctx, $$); }
    | expr '?' expr ':' expr {
          $$ = expr_new(ctx, EX_COND, @2);
          $$->cond = $1;
          $$->lhs = $3;
          $$->rhs = $5;
          $$ = deepen(ctx, $$);
      }
    | expr '+' expr       { $$ = binary(ctx, '+', $1, $3, @2); }
    | expr '-' expr       { $$ = binary(ctx, '-', $1, $3, @2); }
    | expr '*' expr       { $$ = binary(ctx, '*', $1, $3, @2); }
    | expr '/' expr       { $$ = binary(ctx, '/', $1, $3, @2); }
    | expr '%' expr       { $$ = binary(ctx, '%', $1, $3, @2); }
    | expr SHL expr       { $$ = binary(ctx, SHL, $1, $3, @2); }
    | expr SHR expr       { $$ = binary(ctx, SHR, $1, $3, @2); }
    | expr '&' expr       { $$ = binary(ctx, '&', $1, $3, @2); }
    | expr '^' expr       { $$ = binary(ctx, '^', $1, $3, @2); }
    | expr '|' expr       { $$ = binary(ctx, '|', $1, $3, @2); }
    | expr '<' expr       { $$ = binary(ctx, '<', $1, $3, @2); }
    | expr '>' expr       { $$ = binary(ctx, '>', $1, $3, @2); }
    | expr LE expr        { $$ = binary(ctx, LE, $1, $3, @2); }
    | expr GE expr        { $$ = binary(ctx, GE, $1, $3, @2); }
    | expr EQ expr        { $$ = binary(ctx, EQ, $1, $3, @2); }
    | expr NE expr        { $$ = binary(ctx, NE, $1, $3, @2); }
    | expr ANDAND expr    { $$ = binary(ctx, ANDAND, $1, $3, @2); }
    | expr OROR expr      { $$ = binary(ctx, OROR, $1, $3, @2); }
    ;

%%

/* "unexpected X, expected A, B or C", with the readable token names given above. The
 * scanner's error tokens get messages of their own. */
static int yyreport_syntax_error(const yypcontext_t *pctx, yyscan_t scanner, struct ParseCtx *ctx)
{
    CCLC_YYLTYPE loc = *yypcontext_location(pctx);
    yysymbol_kind_t got = yypcontext_token(pctx);
    const char *text = cclc_yyget_text(scanner);
    if (got == YYSYMBOL_TOO_BIG) {
        cclc_diag_error(ctx->diag, L(loc), "number '%s' is too large (integers are 64-bit)", text);
        return 0;
    }
    if (got == YYSYMBOL_BAD_NUMBER) {
        cclc_diag_error(ctx->diag, L(loc), "malformed number '%s'", text);
        return 0;
    }
    if (got == YYSYMBOL_BAD_CHAR) {
        unsigned char c = (unsigned char)text[0];
        if (c >= 0x20 && c < 0x7f)
            cclc_diag_error(ctx->diag, L(loc), "unexpected character '%c'", c);
        else
            cclc_diag_error(ctx->diag, L(loc), "unexpected byte 0x%02x (CCL source is ASCII)", c);
        return 0;
    }
    if (got == YYSYMBOL_YYEOF && ctx->open_braces > 0) {
        int k = ctx->open_braces <= MAX_OPEN_BRACES ? ctx->open_braces - 1 : MAX_OPEN_BRACES - 1;
        cclc_diag_error(ctx->diag, ctx->brace_loc[k], "this '{' is never closed (the file ends first)");
        return 0;
    }
    enum { MAX_EXPECTED = 6 };
    yysymbol_kind_t expected[MAX_EXPECTED];
    int n = yypcontext_expected_tokens(pctx, expected, MAX_EXPECTED);
    /* Tokens are quoted up to 40 characters: an identifier may be a megabyte long. */
    char token[64] = "";
    if (got == YYSYMBOL_IDENT || got == YYSYMBOL_INT)
        snprintf(token, sizeof token, strlen(text) > 40 ? " '%.40s...'" : " '%s'", text);
    char expect[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof expect; i++)
        len += (size_t)snprintf(expect + len, sizeof expect - len, "%s%s", i == 0 ? ", expected " : i == n - 1 ? " or " : ", ",
                                yysymbol_name(expected[i]));
    char msg[512];
    snprintf(msg, sizeof msg, "unexpected %s%s%s", got == YYSYMBOL_YYEOF ? "end of file" : yysymbol_name(got), token, expect);
    cclc_diag_error(ctx->diag, L(loc), "%s", msg);
    return 0;
}

static void cclc_yyerror(CCLC_YYLTYPE *loc, yyscan_t scanner, struct ParseCtx *ctx, const char *msg)
{
    (void)scanner;
    if (!strcmp(msg, "memory exhausted"))
        cclc_diag_error(ctx->diag, L(*loc), "nesting too deep: blocks and parentheses may nest a few hundred levels (the parser keeps 1000 states)");
    else
        cclc_diag_error(ctx->diag, L(*loc), "%s", msg);
}

Ast *cclc_parse_source(Arena *a, const Source *src, Diag *d)
{
    struct ParseCtx ctx = {.arena = a, .diag = d, .line = 1, .col = 1};
    ctx.ast = cclc_arena_alloc(a, sizeof *ctx.ast);
    yyscan_t scanner;
    if (cclc_yylex_init_extra(&ctx, &scanner))
        internal_error("cannot start the scanner");
    YY_BUFFER_STATE buf = cclc_yy_scan_bytes(src->text, (int)src->size, scanner);
    int errors_before = d->nerrors;
    int rc = cclc_yyparse(scanner, &ctx);
    cclc_yy_delete_buffer(buf, scanner);
    cclc_yylex_destroy(scanner);
    if (rc != 0 || d->nerrors > errors_before)
        return NULL;
    if (!ctx.ast->nvar) {
        cclc_diag_error(d, ctx.ast->name_loc, "algorithm '%s' has no 'ranks N in LO..HI' line", ctx.ast->name);
        return NULL;
    }
    return ctx.ast;
}
