/* diag.c: diagnostics a person can act on.
 *
 * Each error is rendered at once into the Diag's text buffer as
 *   FILE:LINE:COL: error: MESSAGE
 *    <the source line>
 *    ^~~~
 * so the compiler library can hand the whole report to the runtime (which never
 * prints) and cclc can print it to stderr. After CCLC_MAX_ERRORS errors the rest are
 * counted, not rendered. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cclc.h"

void cclc_diag_init(Diag *d, const Source *src)
{
    memset(d, 0, sizeof *d);
    d->src = src;
}

void cclc_diag_fini(Diag *d)
{
    free(d->out);
    d->out = NULL;
    d->len = d->cap = 0;
}

static void append(Diag *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap ? d->cap : 256;
        while (cap < d->len + n + 1)
            cap *= 2;
        char *out = realloc(d->out, cap);
        if (!out)
            return; /* out of memory: the message is lost, the compilation goes on */
        d->out = out;
        d->cap = cap;
    }
    memcpy(d->out + d->len, s, n);
    d->len += n;
    d->out[d->len] = 0;
}

static void appendv(Diag *d, const char *fmt, va_list ap)
{
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, copy);
    va_end(copy);
    if (n < 0)
        return;
    if ((size_t)n < sizeof buf) {
        append(d, buf, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big)
        return; /* out of memory: as in append */
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    append(d, big, (size_t)n);
    free(big);
}

static void appendf(Diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    appendv(d, fmt, ap);
    va_end(ap);
}

/* The source line `line` and a caret under [col, col+len), or nothing when the line
 * does not exist. Long lines are cut around the column so a 1 MB line stays readable;
 * tabs are kept so the caret lines up in a terminal. */
static void show_line(Diag *d, int line, int col, int len)
{
    const Source *s = d->src;
    if (!s || !s->text || line < 1)
        return;
    const char *p = s->text, *end = s->text + s->size;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    if (p >= end && line > 1)
        return;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol)
        eol = end;
    size_t width = (size_t)(eol - p);
    size_t from = 0;
    enum { SHOWN = 160 };
    if (col > SHOWN - 20 && width > SHOWN)
        from = (size_t)col - 60;
    size_t upto = width - from > SHOWN ? from + SHOWN : width;
    append(d, " ", 1);
    for (size_t i = from; i < upto; i++) {
        char c = p[i];
        append(d, (c == '\t' || (c >= 0x20 && c < 0x7f)) ? &c : "?", 1);
    }
    append(d, "\n ", 2);
    for (size_t i = from; i + 1 < (size_t)col && i < upto; i++)
        append(d, p[i] == '\t' ? "\t" : " ", 1);
    append(d, "^", 1);
    for (int i = 1; i < len && i < SHOWN; i++)
        append(d, "~", 1);
    append(d, "\n", 1);
}

static void report(Diag *d, const char *kind, SrcLoc loc, const char *fmt, va_list ap)
{
    const char *file = d->src && d->src->file ? d->src->file : "<input>";
    if (loc.line > 0)
        appendf(d, "%s:%d:%d: %s: ", file, loc.line, loc.col, kind);
    else
        appendf(d, "%s: %s: ", file, kind);
    appendv(d, fmt, ap);
    append(d, "\n", 1);
    if (loc.line > 0)
        show_line(d, loc.line, loc.col, loc.len > 0 ? loc.len : 1);
}

void cclc_diag_error(Diag *d, SrcLoc loc, const char *fmt, ...)
{
    d->nerrors++;
    if (d->nerrors > CCLC_MAX_ERRORS) {
        if (!d->truncated)
            appendf(d, "(further errors not shown)\n");
        d->truncated = 1;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(d, "error", loc, fmt, ap);
    va_end(ap);
}

void cclc_diag_note(Diag *d, SrcLoc loc, const char *fmt, ...)
{
    if (d->truncated)
        return;
    va_list ap;
    va_start(ap, fmt);
    report(d, "note", loc, fmt, ap);
    va_end(ap);
}

void cclc_diag_plain(Diag *d, const char *fmt, ...)
{
    d->nerrors++;
    va_list ap;
    va_start(ap, fmt);
    report(d, "error", (SrcLoc){0, 0, 0}, fmt, ap);
    va_end(ap);
}

_Noreturn void ccl__internal_error(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cclc: internal error at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(this is a bug in the compiler; please report it with the input)\n");
    va_end(ap);
    abort();
}
