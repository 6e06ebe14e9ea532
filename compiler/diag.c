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
    free(d->later);
    d->out = d->later = NULL;
    d->len = d->cap = d->later_len = d->later_cap = 0;
}

/* Appends to the buffer *buf of length *len and capacity *cap. */
static void append_to(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *out = realloc(*buf, c);
        if (!out)
            return; /* out of memory: the message is lost, the compilation goes on */
        *buf = out;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static void append(Diag *d, const char *s, size_t n)
{
    if (d->deferring)
        append_to(&d->later, &d->later_len, &d->later_cap, s, n);
    else
        append_to(&d->out, &d->len, &d->cap, s, n);
}

void cclc_diag_defer(Diag *d, int on)
{
    if (on && !d->deferring && !d->later_len)
        d->later_at = d->len;
    d->deferring = on;
}

void cclc_diag_settle(Diag *d, int errors_before)
{
    d->deferring = 0;
    int causes = d->nerrors - d->nlater - errors_before;
    d->causes = causes > 0 ? causes : d->nlater;
    d->effects = causes > 0 ? d->nlater : 0;
    size_t at = causes > 0 ? d->len : d->later_at; /* causes: after them; else where they stood */
    if (d->later_len && at <= d->len) {
        size_t tail = d->len - at;
        append_to(&d->out, &d->len, &d->cap, d->later, d->later_len); /* grows the buffer */
        if (d->len == at + tail + d->later_len && tail) {
            memmove(d->out + at + d->later_len, d->out + at, tail);
            memcpy(d->out + at, d->later, d->later_len);
        }
    }
    d->causes_len = causes > 0 ? at : d->len;
    free(d->later);
    d->later = NULL;
    d->later_len = d->later_cap = 0;
    d->nlater = 0;
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
    d->nlater += d->deferring;
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
