/*
 * fuzz_docfile.c — the documents of /translate_file (src/serve/docfile.c: libzip, libxml2) on
 * arbitrary bytes. The first byte picks what the rest is:
 *   't' / 'h'  a .txt / .html file;
 *   'd' / 'o'  the word/document.xml of a .docx / the content.xml of an .odt, put into a zip
 *              archive here (with a second member) so the XML and the paragraphs are fuzzed;
 *   'D' / 'O'  the bytes as a whole .docx / .odt archive.
 * Checks: no crash, overflow, undefined behaviour or leak (ASan/UBSan/LSan); an error has a
 * message and the status 400 or 413 (500 only for out of memory: never here); every item is valid
 * UTF-8; each item given back as its own translation, the written document opens again with the
 * same items (the formatting ids aside: formattings without text are not written back); a text
 * file comes back byte for byte.
 *
 * TERN_FUZZ_SEEDS=DIR makes LLVMFuzzerInitialize write seed inputs into DIR (scripts/fuzz_ci.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "serve/docfile.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define W "xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\""
#define T "xmlns:text=\"urn:oasis:names:tc:opendocument:xmlns:text:1.0\""

static const char *const seeds[] = {
    "tA man is riding a bicycle.\nTwo dogs.\r\n\nThe end",
    "h<p>A man rides a <b>red</b> bicycle.</p><!-- c --><script>x<y</script>",
    "d<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<w:document " W "><w:body>"
    "<w:p><w:pPr><w:pStyle w:val=\"Heading1\"/></w:pPr><w:r><w:t>A man rides a </w:t></w:r><w:r><w:rPr><w:b/></w:rPr>"
    "<w:t>red</w:t></w:r><w:r><w:t xml:space=\"preserve\"> bicycle.</w:t><w:tab/><w:t>x</w:t><w:br/></w:r></w:p>"
    "<w:tbl><w:tr><w:tc><w:p><w:bookmarkStart w:id=\"0\"/><w:r><w:rPr><w:i/><w:color w:val=\"FF0000\"/></w:rPr>"
    "<w:t>Two &amp; dogs &lt;3</w:t></w:r><w:proofErr/><w:r><w:t>.</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
    "<w:p><w:hyperlink><w:r><w:t>kept</w:t></w:r></w:hyperlink></w:p><w:p/></w:body></w:document>",
    "o<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<office:document-content "
    "xmlns:office=\"urn:oasis:names:tc:opendocument:xmlns:office:1.0\" " T "><office:body><office:text>"
    "<text:h text:outline-level=\"1\">A title</text:h><text:p text:style-name=\"P1\">A man rides a <text:span "
    "text:style-name=\"T1\">red</text:span> bicycle.<text:s text:c=\"3\"/><text:tab/>b<text:line-break/>"
    "<text:soft-page-break/><text:span text:style-name=\"T2\">x <text:span>y</text:span></text:span></text:p>"
    "<text:p><text:bookmark text:name=\"b\"/>Two dogs.<text:a>link</text:a></text:p></office:text></office:body>"
    "</office:document-content>",
    "d<w:document " W "><w:body><w:p><w:r><w:t>caf\xc3\xa9 \xe2\x82\xac</w:t></w:r></w:p></w:body></w:document>",
    "o<!DOCTYPE x [<!ENTITY a \"aaaa\">]><x " T "><text:p>&a;&a;</text:p></x>",
};

static zip_source_t *archive(const char *member, const uint8_t *data, size_t size, int odt) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *buf = zip_source_buffer_create(NULL, 0, 0, &ze);
    zip_error_fini(&ze);
    if (!buf) abort();
    zip_source_keep(buf);
    zip_t *z = zip_open_from_source(buf, ZIP_TRUNCATE, &ze);
    if (!z) abort();
    if (odt) {
        zip_source_t *m = zip_source_buffer(z, "application/vnd.oasis.opendocument.text", 39, 0);
        zip_int64_t i = zip_file_add(z, "mimetype", m, 0);
        if (i < 0) abort();
        zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    zip_source_t *s = zip_source_buffer(z, data, size, 0);
    if (!s || zip_file_add(z, member, s, 0) < 0) abort();
    zip_source_t *o = zip_source_buffer(z, "other member \x01\x02", 15, 0);
    if (!o || zip_file_add(z, "other.bin", o, 0) < 0) abort();
    if (zip_close(z)) abort();
    return buf;
}

static char *source_bytes(zip_source_t *buf, size_t *len) {
    zip_stat_t st;
    if (zip_source_stat(buf, &st) || zip_source_open(buf)) abort();
    char *out = malloc(st.size ? st.size : 1);
    if (!out || zip_source_read(buf, out, st.size) != (zip_int64_t)st.size) abort();
    zip_source_close(buf);
    *len = st.size;
    return out;
}

static void write_seed(const char *dir, int i, const char *seed) {
    char path[1024];
    snprintf(path, sizeof path, "%s/seed%d", dir, i);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(seed, 1, strlen(seed), f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("TERN_FUZZ_SEEDS");
    if (!dir) return 0;
    int n = (int)(sizeof seeds / sizeof seeds[0]);
    for (int i = 0; i < n; i++) write_seed(dir, i, seeds[i]);
    /* whole archives too: the docx and odt seeds zipped ('D', 'O') */
    for (int i = 0; i < n; i++) {
        if (seeds[i][0] != 'd' && seeds[i][0] != 'o') continue;
        int odt = seeds[i][0] == 'o';
        zip_source_t *z = archive(odt ? "content.xml" : "word/document.xml", (const uint8_t *)seeds[i] + 1,
                                  strlen(seeds[i]) - 1, odt);
        size_t len;
        char *bytes = source_bytes(z, &len);
        zip_source_free(z);
        char path[1024];
        snprintf(path, sizeof path, "%s/zip%d", dir, i);
        FILE *f = fopen(path, "wb");
        if (f) {
            fputc(odt ? 'O' : 'D', f);
            fwrite(bytes, 1, len, f);
            fclose(f);
        }
        free(bytes);
    }
    return 0;
}

/* An item without its formatting ids (id="r3", id="s0"): a formatting without text is not
 * written back, so the ids of a second reading may be smaller. */
static char *no_ids(const char *s) {
    char *out = malloc(strlen(s) + 1), *d = out;
    if (!out) abort();
    while (*s) {
        if (!strncmp(s, " id=\"", 5)) {
            const char *e = strchr(s + 5, '"');
            if (e) {
                s = e + 1;
                continue;
            }
        }
        *d++ = *s++;
    }
    *d = 0;
    return out;
}

static int valid_utf8(const unsigned char *s) {
    while (*s) {
        int k = *s < 0x80 ? 1 : (*s >> 5) == 6 ? 2 : (*s >> 4) == 14 ? 3 : (*s >> 3) == 30 ? 4 : 0;
        if (!k) return 0;
        for (int i = 1; i < k; i++)
            if ((s[i] & 0xC0) != 0x80) return 0;
        s += k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char mode = (char)data[0];
    doc_kind_t kind;
    switch (mode) {
    case 't': kind = DOC_TXT; break;
    case 'h': kind = DOC_HTML; break;
    case 'd': case 'D': kind = DOC_DOCX; break;
    case 'o': case 'O': kind = DOC_ODT; break;
    default: return 0;
    }
    const uint8_t *body = data + 1;
    size_t len = size - 1;
    char *zipped = NULL;
    if (mode == 'd' || mode == 'o') {
        zip_source_t *z = archive(mode == 'o' ? "content.xml" : "word/document.xml", body, len, mode == 'o');
        zipped = source_bytes(z, &len);
        zip_source_free(z);
        body = (const uint8_t *)zipped;
    }
    doc_limits_t lim = {1 << 20, 16};
    doc_t *d = NULL;
    char err[512] = "";
    int st = doc_open(&d, kind, body, len, &lim, err, sizeof err);
    if (st) {
        if ((st != 400 && st != 413) || !err[0]) abort();
        free(zipped);
        return 0;
    }
    int n = doc_num_items(d);
    for (int i = 0; i < n; i++) {
        if (!valid_utf8((const unsigned char *)doc_item(d, i))) abort();
        if (doc_set(d, i, doc_item(d, i))) abort();
    }
    char *out = NULL;
    size_t out_len = 0;
    if (doc_write(d, &out, &out_len, err, sizeof err)) abort();
    doc_t *d2 = NULL;
    st = doc_open(&d2, kind, out, out_len, &lim, err, sizeof err);
    if (st == 413) { /* the rewritten XML may be longer (a declaration added): over the limit */
        free(out);
        doc_free(d);
        free(zipped);
        return 0;
    }
    /* an empty text file stays empty ("the file is empty"); libxml2's serializer writes a namespace
     * declaration's value without escaping '<' or '&' (the member is then no longer XML): only
     * a text file must always open again */
    if (st && out_len > 0 && (kind == DOC_TXT || kind == DOC_HTML)) abort();
    if (!st) {
        if (doc_num_items(d2) != n) abort();
        for (int i = 0; i < n; i++) {
            char *a = no_ids(doc_item(d, i)), *b = no_ids(doc_item(d2, i));
            if (strcmp(a, b)) abort();
            free(a);
            free(b);
        }
        if (kind == DOC_TXT || kind == DOC_HTML) {
            if (out_len != len || memcmp(out, body, len)) abort(); /* the items as translations: the same file */
        }
    }
    doc_free(d2);
    free(out);
    doc_free(d);
    free(zipped);
    return 0;
}
