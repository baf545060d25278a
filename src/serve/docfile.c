/* docfile.c — documents cut into items and rebuilt (docfile.h): libzip for the archives, libxml2
 * for their XML. */
#include "serve/docfile.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <zip.h>

#define NS_W "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
#define NS_TEXT "urn:oasis:names:tc:opendocument:xmlns:text:1.0"

const char *const doc_formats[4] = {".txt", ".html", ".docx", ".odt"};

doc_limits_t doc_default_limits(void) { return (doc_limits_t){100u << 20, 1000}; }

int doc_kind_of(const char *name) {
    const char *dot = name ? strrchr(name, '.') : NULL;
    if (!dot) return -1;
    if (!strcasecmp(dot, ".txt")) return DOC_TXT;
    if (!strcasecmp(dot, ".html") || !strcasecmp(dot, ".htm")) return DOC_HTML;
    if (!strcasecmp(dot, ".docx")) return DOC_DOCX;
    if (!strcasecmp(dot, ".odt")) return DOC_ODT;
    return -1;
}

const char *doc_content_type(doc_kind_t kind) {
    switch (kind) {
    case DOC_TXT: return "text/plain; charset=utf-8";
    case DOC_HTML: return "text/html; charset=utf-8";
    case DOC_DOCX: return "application/vnd.openxmlformats-officedocument.wordprocessingml.document";
    case DOC_ODT: return "application/vnd.oasis.opendocument.text";
    }
    return "application/octet-stream";
}

/* ------------------------------------------------------------------ the document */

typedef struct {
    char *name;
    unsigned char *data;
    size_t len;
    int32_t method; /* compression method */
    time_t mtime;
    int is_dir;
} member_t;

/* One formatting of a paragraph's runs: a docx run's w:rPr (a copy; NULL: none) or an odt span's
 * style name (NULL: the paragraph's own). */
typedef struct {
    xmlNodePtr rpr;
    xmlChar *style;
} fmt_t;

typedef struct {
    xmlNodePtr p;
    fmt_t *fmts;
    int n_fmts, base;
} para_t;

struct doc {
    doc_kind_t kind;
    char *text; /* .txt, .html: the file (NUL-terminated) */
    size_t bom; /* .txt, .html: 3 when it starts with a byte order mark */
    member_t *members;
    int n_members, xml_member;
    xmlDocPtr xml;
    para_t *paras; /* [n_items] .docx, .odt */
    char **items, **trans;
    int n_items, cap_items;
    long chars;
};

static int errf(char *err, size_t en, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int errf(char *err, size_t en, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, en, fmt, ap);
    va_end(ap);
    return status;
}

int doc_num_items(const doc_t *d) { return d->n_items; }
const char *doc_item(const doc_t *d, int i) { return d->items[i]; }
int doc_items_html(const doc_t *d) { return d->kind != DOC_TXT; }
long doc_chars(const doc_t *d) { return d->chars; }

static long utf8_chars(const char *s, size_t n) {
    long c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* The length of a valid UTF-8 sequence at s (n bytes left), or 0. */
static int utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int k;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07;
    else return 0;
    if ((size_t)k > n) return 0;
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return k;
}

static int add_item(doc_t *d, char *text) {
    if (d->n_items == d->cap_items) {
        int cap = d->cap_items ? 2 * d->cap_items : 16;
        char **it = realloc(d->items, (size_t)cap * sizeof *it);
        if (!it) return -1;
        d->items = it;
        if (d->kind == DOC_DOCX || d->kind == DOC_ODT) {
            para_t *p = realloc(d->paras, (size_t)cap * sizeof *p);
            if (!p) return -1;
            d->paras = p;
        }
        d->cap_items = cap;
    }
    d->items[d->n_items++] = text;
    return 0;
}

/* ------------------------------------------------------------------ .txt and .html */

static int open_text(doc_t *d, const unsigned char *data, size_t len, char *err, size_t en) {
    long line = 1;
    for (size_t i = 0; i < len;) {
        if (data[i] == 0) return errf(err, en, 400, "a NUL byte at line %ld (byte %zu): not a text file", line, i);
        int k = utf8_seq(data + i, len - i);
        if (!k) return errf(err, en, 400, "not valid UTF-8 at line %ld (byte %zu)", line, i);
        if (data[i] == '\n') line++;
        i += (size_t)k;
    }
    d->bom = len >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
    if (!(d->text = malloc(len + 1))) return errf(err, en, 500, "out of memory");
    memcpy(d->text, data, len);
    d->text[len] = 0;
    d->chars = utf8_chars(d->text + d->bom, len - d->bom);
    int blank = 1;
    for (size_t i = d->bom; i < len && blank; i++) blank = strchr(" \t\r\n", d->text[i]) != NULL;
    if (blank) return 0; /* nothing to translate: the file comes back as it was */
    char *item = strdup(d->text + d->bom);
    if (!item || add_item(d, item)) {
        free(item);
        return errf(err, en, 500, "out of memory");
    }
    return 0;
}

/* ------------------------------------------------------------------ archives */

static int read_zip(doc_t *d, const void *data, size_t len, const doc_limits_t *lim, char *err, size_t en) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(data, len, 0, &ze);
    if (!src) {
        zip_error_fini(&ze);
        return errf(err, en, 500, "out of memory");
    }
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY, &ze);
    if (!za) {
        int st = errf(err, en, 400, "not a zip archive (%s)", zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return st;
    }
    zip_error_fini(&ze);
    int st = 0;
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n > lim->max_entries) {
        st = errf(err, en, 413, "the archive has %lld entries, more than the limit of %d", (long long)n,
                  lim->max_entries);
        goto done;
    }
    if (!(d->members = calloc((size_t)(n > 0 ? n : 1), sizeof *d->members))) {
        st = errf(err, en, 500, "out of memory");
        goto done;
    }
    size_t total = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        zip_stat_t zs;
        if (zip_stat_index(za, (zip_uint64_t)i, 0, &zs) || !(zs.valid & ZIP_STAT_NAME)) {
            st = errf(err, en, 400, "entry %lld of the archive cannot be read (%s)", (long long)i, zip_strerror(za));
            goto done;
        }
        for (int k = 0; k < d->n_members; k++)
            if (!strcmp(d->members[k].name, zs.name)) {
                st = errf(err, en, 400, "the archive has two members named %.200s", zs.name);
                goto done;
            }
        if (!zs.name[0]) {
            st = errf(err, en, 400, "entry %lld of the archive has no name", (long long)i);
            goto done;
        }
        member_t *m = &d->members[d->n_members++];
        if (!(m->name = strdup(zs.name))) {
            st = errf(err, en, 500, "out of memory");
            goto done;
        }
        m->method = zs.valid & ZIP_STAT_COMP_METHOD ? zs.comp_method : ZIP_CM_DEFLATE;
        m->mtime = zs.valid & ZIP_STAT_MTIME ? zs.mtime : time(NULL);
        size_t nl = strlen(m->name);
        if (nl && m->name[nl - 1] == '/') {
            m->is_dir = 1;
            continue;
        }
        zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
        if (!zf) {
            st = errf(err, en, 400, "%s: cannot be read from the archive (%s)", m->name, zip_strerror(za));
            goto done;
        }
        size_t cap = 0;
        for (;;) {
            if (m->len == cap) {
                size_t nc = cap ? 2 * cap : 65536;
                if (nc > lim->max_uncompressed - total + 1) nc = lim->max_uncompressed - total + 1;
                if (nc <= cap) {
                    zip_fclose(zf);
                    st = errf(err, en, 413, "%s: the archive's members hold more than %zu bytes once uncompressed",
                              m->name, lim->max_uncompressed);
                    goto done;
                }
                unsigned char *b = realloc(m->data, nc);
                if (!b) {
                    zip_fclose(zf);
                    st = errf(err, en, 500, "out of memory");
                    goto done;
                }
                m->data = b;
                cap = nc;
            }
            zip_int64_t k = zip_fread(zf, m->data + m->len, cap - m->len);
            if (k < 0) {
                st = errf(err, en, 400, "%s: cannot be read from the archive (%s)", m->name, zip_file_strerror(zf));
                zip_fclose(zf);
                goto done;
            }
            if (k == 0) break;
            m->len += (size_t)k;
        }
        zip_fclose(zf);
        total += m->len;
    }
done:
    zip_discard(za); /* frees src */
    return st;
}

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;
static void xml_init(void) { xmlInitParser(); }

/* The parser's first error (libxml2 goes on after some, e.g. a byte that is not UTF-8, and its
 * last error is then another one). */
typedef struct {
    int set, line, code;
    char msg[256];
} first_error_t;

static void on_xml_error(void *data, xmlErrorPtr e) {
    xmlParserCtxtPtr ctxt = data;
    first_error_t *fe = ctxt ? ctxt->_private : NULL;
    if (!fe || fe->set || !e || e->level < XML_ERR_ERROR) return;
    fe->set = 1;
    fe->line = e->line;
    fe->code = e->code;
    snprintf(fe->msg, sizeof fe->msg, "%s", e->message ? e->message : "not XML");
    size_t l = strlen(fe->msg);
    while (l && (fe->msg[l - 1] == '\n' || fe->msg[l - 1] == ' ')) fe->msg[--l] = 0;
}

/* Parses member name of the archive into d->xml. */
static int parse_member(doc_t *d, const char *name, char *err, size_t en) {
    int k = 0;
    while (k < d->n_members && strcmp(d->members[k].name, name)) k++;
    if (k == d->n_members)
        return errf(err, en, 400, "no %s in the archive: not a %s document", name,
                    d->kind == DOC_DOCX ? "Word (.docx)" : "OpenDocument text (.odt)");
    member_t *m = &d->members[k];
    if (m->len > INT32_MAX) return errf(err, en, 413, "%s: too large", name);
    d->xml_member = k;
    xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
    if (!ctxt) return errf(err, en, 500, "out of memory");
    first_error_t fe = {0};
    ctxt->_private = &fe;
    ctxt->userData = ctxt;
    if (ctxt->sax) ctxt->sax->serror = on_xml_error;
    /* no network, no entity substitution (an entity stays a reference), no messages on stderr */
    d->xml = xmlCtxtReadMemory(ctxt, (const char *)m->data, (int)m->len, name, NULL,
                               XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    int st = 0;
    if (!d->xml) {
        if (!fe.set) { /* (the handler saw nothing: the context's last error) */
            xmlErrorPtr e = xmlCtxtGetLastError(ctxt);
            on_xml_error(ctxt, e);
            if (!fe.set) fe.set = 1, fe.line = 1, snprintf(fe.msg, sizeof fe.msg, "not XML");
        }
        if (strstr(fe.msg, "UTF-8") || fe.code == XML_ERR_INVALID_ENCODING)
            st = errf(err, en, 400, "%s: not valid UTF-8 text at line %d: %s", name, fe.line, fe.msg);
        else
            st = errf(err, en, 400, "%s: malformed XML at line %d: %s", name, fe.line, fe.msg);
    } else if (!xmlDocGetRootElement(d->xml)) {
        st = errf(err, en, 400, "%s: no root element", name);
    }
    xmlFreeParserCtxt(ctxt);
    return st;
}

static int is_el(xmlNodePtr n, const char *ns, const char *name) {
    return n && n->type == XML_ELEMENT_NODE && n->ns && n->ns->href && !strcmp((const char *)n->ns->href, ns) &&
           !strcmp((const char *)n->name, name);
}

/* ------------------------------------------------------------------ a paragraph's pieces */

/* A paragraph as pieces: text with a formatting, or a tab or a break. */
typedef struct {
    int kind; /* 0 text, 1 tab, 2 break */
    int fmt;
    char *text;
    size_t len;
} piece_t;

typedef struct {
    piece_t *v;
    int n, cap;
    fmt_t *fmts;
    int n_fmts, cap_fmts;
} pieces_t;

static void pieces_free(pieces_t *ps, int keep_fmts) {
    for (int i = 0; i < ps->n; i++) free(ps->v[i].text);
    free(ps->v);
    if (!keep_fmts) {
        for (int i = 0; i < ps->n_fmts; i++) {
            xmlFreeNode(ps->fmts[i].rpr);
            xmlFree(ps->fmts[i].style);
        }
        free(ps->fmts);
    }
    memset(ps, 0, sizeof *ps);
}

static int piece_add(pieces_t *ps, int kind, int fmt, const char *text, size_t len) {
    if (kind == 0 && len == 0) return 0;
    if (kind == 0 && ps->n && ps->v[ps->n - 1].kind == 0 && ps->v[ps->n - 1].fmt == fmt) { /* merged */
        piece_t *p = &ps->v[ps->n - 1];
        char *t = realloc(p->text, p->len + len + 1);
        if (!t) return -1;
        memcpy(t + p->len, text, len);
        p->len += len;
        t[p->len] = 0;
        p->text = t;
        return 0;
    }
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 8;
        piece_t *v = realloc(ps->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        ps->v = v;
        ps->cap = cap;
    }
    piece_t *p = &ps->v[ps->n];
    *p = (piece_t){kind, fmt, NULL, 0};
    if (kind == 0) {
        if (!(p->text = malloc(len + 1))) return -1;
        memcpy(p->text, text, len);
        p->text[len] = 0;
        p->len = len;
    }
    ps->n++;
    return 0;
}

/* The index of a formatting equal to (rpr serialized, style), added when new (rpr copied). */
static int fmt_find(pieces_t *ps, xmlDocPtr doc, xmlNodePtr rpr, const xmlChar *style) {
    char *key = NULL;
    if (rpr) {
        xmlBufferPtr b = xmlBufferCreate();
        if (!b) return -1;
        xmlNodeDump(b, doc, rpr, 0, 0);
        key = strdup((const char *)xmlBufferContent(b));
        xmlBufferFree(b);
        if (!key) return -1;
    }
    for (int i = 0; i < ps->n_fmts; i++) {
        int same;
        if (rpr || ps->fmts[i].rpr) {
            same = 0;
            if (rpr && ps->fmts[i].rpr) {
                xmlBufferPtr b = xmlBufferCreate();
                if (!b) {
                    free(key);
                    return -1;
                }
                xmlNodeDump(b, doc, ps->fmts[i].rpr, 0, 0);
                same = !strcmp(key, (const char *)xmlBufferContent(b));
                xmlBufferFree(b);
            }
        } else
            same = (!style && !ps->fmts[i].style) ||
                   (style && ps->fmts[i].style && !xmlStrcmp(style, ps->fmts[i].style));
        if (same) {
            free(key);
            return i;
        }
    }
    free(key);
    if (ps->n_fmts == ps->cap_fmts) {
        int cap = ps->cap_fmts ? 2 * ps->cap_fmts : 4;
        fmt_t *f = realloc(ps->fmts, (size_t)cap * sizeof *f);
        if (!f) return -1;
        ps->fmts = f;
        ps->cap_fmts = cap;
    }
    fmt_t *f = &ps->fmts[ps->n_fmts];
    f->rpr = rpr ? xmlCopyNode(rpr, 1) : NULL;
    f->style = style ? xmlStrdup(style) : NULL;
    if ((rpr && !f->rpr) || (style && !f->style)) {
        xmlFreeNode(f->rpr);
        xmlFree(f->style);
        return -1;
    }
    return ps->n_fmts++;
}

/* The tag name of a docx formatting: b, i or u when its properties are only that, else span. */
static const char *fmt_tag(const fmt_t *f) {
    if (!f->rpr) return "span";
    int b = 0, i = 0, u = 0, other = 0;
    for (xmlNodePtr c = f->rpr->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE) continue;
        const char *n = (const char *)c->name;
        if (!strcmp(n, "b") || !strcmp(n, "bCs")) b = 1;
        else if (!strcmp(n, "i") || !strcmp(n, "iCs")) i = 1;
        else if (!strcmp(n, "u")) u = 1;
        else other = 1;
    }
    if (other || b + i + u != 1) return "span";
    return b ? "b" : i ? "i" : "u";
}

/* Appends s (n bytes) to a growing string. */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_str(sbuf_t *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_escaped(sbuf_t *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&': sb_str(b, "&amp;"); break;
        case '<': sb_str(b, "&lt;"); break;
        case '>': sb_str(b, "&gt;"); break;
        default: sb_add(b, s + i, 1);
        }
    }
}

/* The paragraph's pieces as an HTML item: the main formatting (most characters) bare, the others
 * inline tags; NULL when there is no text to translate (or out of memory: *oom). */
static char *pieces_html(pieces_t *ps, int odt, int *base, long *chars, int *oom) {
    *oom = 0;
    long *count = calloc((size_t)(ps->n_fmts ? ps->n_fmts : 1), sizeof *count);
    if (!count) {
        *oom = 1;
        return NULL;
    }
    int has_text = 0;
    long total = 0;
    for (int i = 0; i < ps->n; i++)
        if (ps->v[i].kind == 0) {
            long c = utf8_chars(ps->v[i].text, ps->v[i].len);
            count[ps->v[i].fmt] += c;
            total += c;
            for (size_t k = 0; k < ps->v[i].len && !has_text; k++) has_text = !strchr(" \t\r\n", ps->v[i].text[k]);
        }
    *base = 0;
    for (int f = 1; f < ps->n_fmts; f++)
        if (count[f] > count[*base]) *base = f;
    free(count);
    if (!has_text) return NULL;
    *chars = total;
    sbuf_t b = {0};
    for (int i = 0; i < ps->n; i++) {
        const piece_t *p = &ps->v[i];
        if (p->kind == 1) sb_str(&b, "<tab/>");
        else if (p->kind == 2) sb_str(&b, "<br/>");
        else if (p->fmt == *base) sb_escaped(&b, p->text, p->len);
        else {
            char open[64];
            const char *tag = odt ? "span" : fmt_tag(&ps->fmts[p->fmt]);
            snprintf(open, sizeof open, "<%s id=\"%c%d\">", tag, odt ? 's' : 'r', p->fmt);
            sb_str(&b, open);
            sb_escaped(&b, p->text, p->len);
            snprintf(open, sizeof open, "</%s>", tag);
            sb_str(&b, open);
        }
    }
    if (b.oom || !b.s) {
        free(b.s);
        *oom = 1;
        return NULL;
    }
    return b.s;
}

/* ------------------------------------------------------------------ .docx */

/* Elements that may stand between a paragraph's runs and stay where they are. */
static int docx_kept(xmlNodePtr c) {
    static const char *const names[] = {"pPr", "bookmarkStart", "bookmarkEnd", "proofErr", "permStart", "permEnd",
                                        "commentRangeStart", "commentRangeEnd", NULL};
    for (int i = 0; names[i]; i++)
        if (is_el(c, NS_W, names[i])) return 1;
    return 0;
}

/* The pieces of a docx paragraph; 1 when it holds something else (kept untranslated), -1 OOM. */
static int docx_pieces(xmlDocPtr doc, xmlNodePtr p, pieces_t *ps) {
    for (xmlNodePtr c = p->children; c; c = c->next) {
        if (c->type != XML_ELEMENT_NODE) continue;
        if (docx_kept(c)) continue;
        if (!is_el(c, NS_W, "r")) return 1;
        xmlNodePtr rpr = NULL;
        for (xmlNodePtr e = c->children; e; e = e->next)
            if (is_el(e, NS_W, "rPr")) rpr = e;
        int f = fmt_find(ps, doc, rpr, NULL);
        if (f < 0) return -1;
        for (xmlNodePtr e = c->children; e; e = e->next) {
            if (e->type != XML_ELEMENT_NODE || e == rpr || is_el(e, NS_W, "lastRenderedPageBreak")) continue;
            int rc = 0;
            if (is_el(e, NS_W, "t")) {
                xmlChar *t = xmlNodeGetContent(e);
                if (!t) return -1;
                rc = piece_add(ps, 0, f, (const char *)t, strlen((const char *)t));
                xmlFree(t);
            } else if (is_el(e, NS_W, "tab")) {
                rc = piece_add(ps, 1, f, NULL, 0);
            } else if (is_el(e, NS_W, "cr")) {
                rc = piece_add(ps, 2, f, NULL, 0);
            } else if (is_el(e, NS_W, "br")) {
                xmlChar *type = xmlGetNsProp(e, (const xmlChar *)"type", (const xmlChar *)NS_W);
                int plain = !type || !xmlStrcmp(type, (const xmlChar *)"textWrapping");
                xmlFree(type);
                if (!plain) return 1; /* a page or column break */
                rc = piece_add(ps, 2, f, NULL, 0);
            } else
                return 1;
            if (rc) return -1;
        }
    }
    return 0;
}

/* Elements of a tree in document order that match, collected first (the tree changes later). */
typedef struct {
    xmlNodePtr *v;
    int n, cap;
} nodes_t;

static int collect(xmlNodePtr n, const char *ns, const char *a, const char *b, nodes_t *out) {
    for (; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE) continue;
        if (is_el(n, ns, a) || (b && is_el(n, ns, b))) {
            if (out->n == out->cap) {
                int cap = out->cap ? 2 * out->cap : 64;
                xmlNodePtr *v = realloc(out->v, (size_t)cap * sizeof *v);
                if (!v) return -1;
                out->v = v;
                out->cap = cap;
            }
            out->v[out->n++] = n;
        }
        if (collect(n->children, ns, a, b, out)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ .odt */

static int odt_inline(xmlDocPtr doc, xmlNodePtr parent, const xmlChar *style, pieces_t *ps, int top) {
    int f = fmt_find(ps, doc, NULL, style);
    if (f < 0) return -1;
    for (xmlNodePtr c = parent->children; c; c = c->next) {
        int rc = 0;
        if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) {
            rc = piece_add(ps, 0, f, (const char *)c->content, c->content ? strlen((const char *)c->content) : 0);
        } else if (c->type == XML_ENTITY_REF_NODE) {
            return 1; /* an entity reference (a DTD's): the paragraph stays as it is */
        } else if (c->type != XML_ELEMENT_NODE) {
            continue;
        } else if (is_el(c, NS_TEXT, "span")) {
            xmlChar *st = xmlGetNsProp(c, (const xmlChar *)"style-name", (const xmlChar *)NS_TEXT);
            rc = odt_inline(doc, c, st ? st : style, ps, 0);
            xmlFree(st);
            if (rc) return rc;
            continue;
        } else if (is_el(c, NS_TEXT, "s")) {
            rc = piece_add(ps, 0, f, " ", 1);
        } else if (is_el(c, NS_TEXT, "tab")) {
            rc = piece_add(ps, 1, f, NULL, 0);
        } else if (is_el(c, NS_TEXT, "line-break")) {
            rc = piece_add(ps, 2, f, NULL, 0);
        } else if (is_el(c, NS_TEXT, "soft-page-break")) {
            continue;
        } else if (top && (is_el(c, NS_TEXT, "bookmark") || is_el(c, NS_TEXT, "bookmark-start") ||
                           is_el(c, NS_TEXT, "bookmark-end"))) {
            continue;
        } else
            return 1;
        if (rc) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ opening */

static int open_xml_doc(doc_t *d, char *err, size_t en) {
    int odt = d->kind == DOC_ODT;
    int st = parse_member(d, odt ? "content.xml" : "word/document.xml", err, en);
    if (st) return st;
    nodes_t paras = {0};
    if (collect(xmlDocGetRootElement(d->xml), odt ? NS_TEXT : NS_W, odt ? "p" : "p", odt ? "h" : NULL, &paras)) {
        free(paras.v);
        return errf(err, en, 500, "out of memory");
    }
    for (int i = 0; i < paras.n; i++) {
        pieces_t ps = {0};
        int rc = odt ? odt_inline(d->xml, paras.v[i], NULL, &ps, 1) : docx_pieces(d->xml, paras.v[i], &ps);
        if (rc < 0) goto oom;
        if (rc > 0) { /* kept as it is */
            pieces_free(&ps, 0);
            continue;
        }
        int base = 0, oom = 0;
        long chars = 0;
        char *html = pieces_html(&ps, odt, &base, &chars, &oom);
        if (oom) goto oom;
        if (!html) {
            pieces_free(&ps, 0);
            continue;
        }
        if (add_item(d, html)) {
            free(html);
            goto oom;
        }
        d->paras[d->n_items - 1] = (para_t){paras.v[i], ps.fmts, ps.n_fmts, base};
        d->chars += chars;
        pieces_free(&ps, 1);
        continue;
    oom:
        pieces_free(&ps, 0);
        free(paras.v);
        return errf(err, en, 500, "out of memory");
    }
    free(paras.v);
    return 0;
}

int doc_open(doc_t **out, doc_kind_t kind, const void *data, size_t len, const doc_limits_t *lim, char *err,
             size_t en) {
    *out = NULL;
    pthread_once(&xml_once, xml_init);
    doc_t *d = calloc(1, sizeof *d);
    if (!d) return errf(err, en, 500, "out of memory");
    d->kind = kind;
    d->xml_member = -1;
    doc_limits_t dl = lim ? *lim : doc_default_limits();
    int st;
    if (len == 0) st = errf(err, en, 400, "the file is empty");
    else if (kind == DOC_TXT || kind == DOC_HTML) st = open_text(d, data, len, err, en);
    else if ((st = read_zip(d, data, len, &dl, err, en)) == 0) st = open_xml_doc(d, err, en);
    if (st == 0 && !(d->trans = calloc((size_t)(d->n_items ? d->n_items : 1), sizeof *d->trans)))
        st = errf(err, en, 500, "out of memory");
    if (st) {
        doc_free(d);
        return st;
    }
    *out = d;
    return 0;
}

int doc_set(doc_t *d, int i, const char *t) {
    if (i < 0 || i >= d->n_items) return -1;
    char *c = strdup(t ? t : "");
    if (!c) return -1;
    free(d->trans[i]);
    d->trans[i] = c;
    return 0;
}

/* ------------------------------------------------------------------ writing */

/* The translation of a paragraph (HTML with our tags) back into pieces (formats of para). */
static int parse_translation(const char *s, const para_t *pa, int odt, pieces_t *ps) {
    int stack[64], depth = 0;
    sbuf_t text = {0};
    int rc = 0;
#define FLUSH()                                                                                                     \
    do {                                                                                                            \
        if (text.n && piece_add(ps, 0, depth ? stack[depth - 1] : pa->base, text.s, text.n)) rc = -1;               \
        text.n = 0;                                                                                                 \
    } while (0)
    for (const char *p = s; *p && !rc;) {
        if (*p == '<') {
            const char *e = strchr(p, '>');
            if (!e) { /* not a tag: text */
                sb_add(&text, p, 1);
                p++;
                continue;
            }
            FLUSH();
            const char *q = p + 1;
            int close = *q == '/';
            if (close) q++;
            size_t nl = 0;
            while (q + nl < e && ((q[nl] >= 'a' && q[nl] <= 'z') || (q[nl] >= 'A' && q[nl] <= 'Z'))) nl++;
            if (!close && nl == 3 && !strncmp(q, "tab", 3)) rc = piece_add(ps, 1, depth ? stack[depth - 1] : pa->base, NULL, 0);
            else if (!close && nl == 2 && !strncmp(q, "br", 2))
                rc = piece_add(ps, 2, depth ? stack[depth - 1] : pa->base, NULL, 0);
            else if (close) {
                if (depth) depth--;
            } else {
                const char *id = strstr(p, " id=\"");
                int f = -1;
                if (id && id < e && id[5] == (odt ? 's' : 'r')) f = atoi(id + 6);
                if (f < 0 || f >= pa->n_fmts) f = depth ? stack[depth - 1] : pa->base;
                if (e[-1] != '/' && depth < 64) stack[depth++] = f;
            }
            p = e + 1;
        } else if (*p == '&') {
            static const struct {
                const char *ent;
                const char *ch;
            } ents[] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&#39;", "'"}};
            size_t k = 0;
            for (; k < sizeof ents / sizeof ents[0]; k++)
                if (!strncmp(p, ents[k].ent, strlen(ents[k].ent))) break;
            if (k < sizeof ents / sizeof ents[0]) {
                sb_str(&text, ents[k].ch);
                p += strlen(ents[k].ent);
            } else {
                sb_add(&text, p, 1);
                p++;
            }
        } else {
            sb_add(&text, p, 1);
            p++;
        }
        if (text.oom) rc = -1;
    }
    if (!rc) FLUSH();
#undef FLUSH
    free(text.s);
    return rc;
}

static xmlNodePtr docx_run(xmlDocPtr doc, xmlNsPtr ns, const fmt_t *f, const piece_t *p) {
    xmlNodePtr r = xmlNewDocNode(doc, ns, (const xmlChar *)"r", NULL);
    if (!r) return NULL;
    if (f->rpr) {
        xmlNodePtr c = xmlDocCopyNode(f->rpr, doc, 1);
        if (!c || !xmlAddChild(r, c)) goto bad;
    }
    xmlNodePtr e;
    if (p->kind == 1) e = xmlNewDocNode(doc, ns, (const xmlChar *)"tab", NULL);
    else if (p->kind == 2) e = xmlNewDocNode(doc, ns, (const xmlChar *)"br", NULL);
    else {
        e = xmlNewDocNode(doc, ns, (const xmlChar *)"t", NULL);
        if (e) {
            xmlNodePtr t = xmlNewDocTextLen(doc, (const xmlChar *)p->text, (int)p->len);
            if (!t || !xmlAddChild(e, t)) {
                xmlFreeNode(t);
                xmlFreeNode(e);
                goto bad;
            }
            xmlNodeSetSpacePreserve(e, 1);
        }
    }
    if (!e || !xmlAddChild(r, e)) {
        xmlFreeNode(e);
        goto bad;
    }
    return r;
bad:
    xmlFreeNode(r);
    return NULL;
}

static int docx_rebuild(xmlDocPtr doc, const para_t *pa, const pieces_t *ps) {
    xmlNodePtr first = NULL;
    for (xmlNodePtr c = pa->p->children; c && !first; c = c->next)
        if (is_el(c, NS_W, "r")) first = c;
    xmlNsPtr ns = pa->p->ns;
    for (int i = 0; i < ps->n; i++) {
        xmlNodePtr r = docx_run(doc, ns, &pa->fmts[ps->v[i].fmt], &ps->v[i]);
        if (!r) return -1;
        if (first) xmlAddPrevSibling(first, r);
        else xmlAddChild(pa->p, r);
    }
    for (xmlNodePtr c = first, next; c; c = next) {
        next = c->next;
        if (is_el(c, NS_W, "r")) {
            xmlUnlinkNode(c);
            xmlFreeNode(c);
        }
    }
    return 0;
}

static int odt_rebuild(xmlDocPtr doc, const para_t *pa, const pieces_t *ps) {
    for (xmlNodePtr c = pa->p->children, next; c; c = next) { /* all but bookmarks go */
        next = c->next;
        if (is_el(c, NS_TEXT, "bookmark") || is_el(c, NS_TEXT, "bookmark-start") ||
            is_el(c, NS_TEXT, "bookmark-end"))
            continue;
        xmlUnlinkNode(c);
        xmlFreeNode(c);
    }
    xmlNsPtr ns = pa->p->ns;
    for (int i = 0; i < ps->n; i++) {
        const piece_t *p = &ps->v[i];
        const fmt_t *f = &pa->fmts[p->fmt];
        xmlNodePtr parent = pa->p;
        if (f->style) {
            xmlNodePtr last = pa->p->last; /* the same span as the previous piece */
            if (i > 0 && ps->v[i - 1].fmt == p->fmt && is_el(last, NS_TEXT, "span")) parent = last;
            else {
                xmlNodePtr sp = xmlNewDocNode(doc, ns, (const xmlChar *)"span", NULL);
                if (!sp || !xmlNewNsProp(sp, ns, (const xmlChar *)"style-name", f->style) || !xmlAddChild(pa->p, sp)) {
                    xmlFreeNode(sp);
                    return -1;
                }
                parent = sp;
            }
        }
        xmlNodePtr e;
        if (p->kind == 1) e = xmlNewDocNode(doc, ns, (const xmlChar *)"tab", NULL);
        else if (p->kind == 2) e = xmlNewDocNode(doc, ns, (const xmlChar *)"line-break", NULL);
        else e = xmlNewDocTextLen(doc, (const xmlChar *)p->text, (int)p->len);
        if (!e || !xmlAddChild(parent, e)) {
            xmlFreeNode(e);
            return -1;
        }
    }
    return 0;
}

static int write_zip(doc_t *d, char **out, size_t *len, char *err, size_t en) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *buf = zip_source_buffer_create(NULL, 0, 0, &ze);
    if (!buf) {
        zip_error_fini(&ze);
        return errf(err, en, -1, "out of memory");
    }
    zip_source_keep(buf);
    zip_t *zo = zip_open_from_source(buf, ZIP_TRUNCATE, &ze);
    zip_error_fini(&ze);
    if (!zo) {
        zip_source_free(buf);
        return errf(err, en, -1, "cannot create the archive");
    }
    int st = 0;
    for (int i = 0; i < d->n_members && !st; i++) {
        member_t *m = &d->members[i];
        zip_int64_t idx;
        if (m->is_dir) idx = zip_dir_add(zo, m->name, ZIP_FL_ENC_GUESS);
        else {
            zip_source_t *s = zip_source_buffer(zo, m->data, m->len, 0);
            if (!s) {
                st = errf(err, en, -1, "out of memory");
                break;
            }
            idx = zip_file_add(zo, m->name, s, ZIP_FL_ENC_GUESS);
            if (idx < 0) zip_source_free(s);
        }
        if (idx < 0) st = errf(err, en, -1, "%s: cannot be added to the archive (%s)", m->name, zip_strerror(zo));
        else if (!m->is_dir)
            zip_set_file_compression(zo, (zip_uint64_t)idx, m->method == ZIP_CM_STORE ? ZIP_CM_STORE : ZIP_CM_DEFLATE,
                                     0);
        if (idx >= 0) zip_file_set_mtime(zo, (zip_uint64_t)idx, m->mtime, 0);
    }
    if (st) zip_discard(zo);
    else if (zip_close(zo)) {
        st = errf(err, en, -1, "cannot write the archive (%s)", zip_strerror(zo));
        zip_discard(zo);
    }
    if (!st) {
        zip_stat_t zs;
        if (zip_source_stat(buf, &zs) || !(zs.valid & ZIP_STAT_SIZE) || zip_source_open(buf)) {
            st = errf(err, en, -1, "cannot read the archive back");
        } else {
            *len = (size_t)zs.size;
            if (!(*out = malloc(*len ? *len : 1))) st = errf(err, en, -1, "out of memory");
            else if (zip_source_read(buf, *out, zs.size) != (zip_int64_t)zs.size) {
                free(*out);
                *out = NULL;
                st = errf(err, en, -1, "cannot read the archive back");
            }
            zip_source_close(buf);
        }
    }
    zip_source_free(buf);
    return st;
}

int doc_write(doc_t *d, char **out, size_t *len, char *err, size_t en) {
    *out = NULL;
    *len = 0;
    if (d->kind == DOC_TXT || d->kind == DOC_HTML) {
        const char *t = d->n_items && d->trans[0] ? d->trans[0] : d->text + d->bom;
        size_t n = strlen(t);
        if (!(*out = malloc(d->bom + n + 1))) return errf(err, en, -1, "out of memory");
        memcpy(*out, d->text, d->bom);
        memcpy(*out + d->bom, t, n + 1);
        *len = d->bom + n;
        return 0;
    }
    int odt = d->kind == DOC_ODT, changed = 0;
    for (int i = 0; i < d->n_items; i++) {
        if (!d->trans[i]) continue;
        changed = 1;
        pieces_t ps = {0};
        int rc = parse_translation(d->trans[i], &d->paras[i], odt, &ps);
        if (!rc) rc = odt ? odt_rebuild(d->xml, &d->paras[i], &ps) : docx_rebuild(d->xml, &d->paras[i], &ps);
        pieces_free(&ps, 1);
        if (rc) return errf(err, en, -1, "out of memory");
    }
    if (!changed) return write_zip(d, out, len, err, en); /* nothing translated: the member as it was */
    xmlChar *x = NULL;
    int xl = 0;
    xmlDocDumpMemoryEnc(d->xml, &x, &xl, "UTF-8");
    if (!x) return errf(err, en, -1, "out of memory");
    member_t *m = &d->members[d->xml_member];
    free(m->data);
    if (!(m->data = malloc((size_t)xl + 1))) {
        xmlFree(x);
        return errf(err, en, -1, "out of memory");
    }
    memcpy(m->data, x, (size_t)xl);
    m->len = (size_t)xl;
    xmlFree(x);
    return write_zip(d, out, len, err, en);
}

void doc_free(doc_t *d) {
    if (!d) return;
    for (int i = 0; i < d->n_items; i++) {
        free(d->items[i]);
        if (d->trans) free(d->trans[i]);
        if (d->paras) {
            for (int k = 0; k < d->paras[i].n_fmts; k++) {
                xmlFreeNode(d->paras[i].fmts[k].rpr);
                xmlFree(d->paras[i].fmts[k].style);
            }
            free(d->paras[i].fmts);
        }
    }
    free(d->items);
    free(d->trans);
    free(d->paras);
    for (int i = 0; i < d->n_members; i++) {
        free(d->members[i].name);
        free(d->members[i].data);
    }
    free(d->members);
    if (d->xml) xmlFreeDoc(d->xml);
    free(d->text);
    free(d);
}
