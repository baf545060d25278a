/* cmd_filter.c — `tern filter`: cleans a parallel corpus with src/text/filter.h, streaming both
 * files line by line (memory: the longest line plus the duplicate hash set). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "text/filter.h"
#include "text/spm.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: tern filter [options] SRC TGT SRC_OUT TGT_OUT\n"
"\n"
"Cleans a parallel corpus as the Scaling-NMT (fairseq, with Moses' clean-corpus-n.perl) and\n"
"OpenNMT papers do: reads SRC and TGT line by line (line i of one is the translation of line i of\n"
"the other), writes the pairs it keeps to SRC_OUT and TGT_OUT unchanged and in order, and reports\n"
"how many pairs each rule removed. It streams: memory is the longest line plus, for the duplicate\n"
"hash set, 16 to 32 bytes per kept pair (48 while the set doubles), so corpora larger than memory\n"
"work.\n"
"\n"
"A pair is removed by the first rule it matches, in this order:\n"
"  1 invalid_utf8     either side is not valid UTF-8\n"
"  2 empty            either side is empty or whitespace only\n"
"  3 too_many_words   either side has more than --max-words words\n"
"  4 too_many_tokens  either side has more than --max-tokens tokens\n"
"  5 ratio            one side's length is more than --max-ratio times the other's\n"
"                     (len(src)/len(tgt) > R or len(tgt)/len(src) > R, as clean-corpus-n.perl)\n"
"  6 few_letters      on either side, letters / non-whitespace characters < --min-letters\n"
"  7 copy             the source equals the target (same words: whitespace normalized)\n"
"  8 language         (--langid SRC,TGT only) a side is reliably in another language: CLD2's\n"
"                     best guess for it is reliable and is not the side's language\n"
"  9 duplicate        the same (source, target) pair, byte for byte, was kept before\n"
"Words are runs of non-whitespace characters (Unicode whitespace, as Python's str.split()).\n"
"Tokens are SentencePiece pieces when a model is given (--spm, --src-spm, --tgt-spm), else words;\n"
"the ratio counts tokens when both sides have a model, else words (a side with no piece at all is\n"
"not judged by the ratio). Letters are Unicode category\n"
"L* characters. Duplicates are detected by the 64-bit XXH3 hash of \"source\\ntarget\": with n\n"
"distinct pairs the chance that two share a hash (and one unique pair is dropped) is about\n"
"n^2/2^65, 2e-11 for 29,000 pairs and 3e-4 for 10^8. Lines are split on '\\n' only and written\n"
"back byte for byte; a last line without '\\n' counts.\n"
"\n"
"options:\n"
"  --max-words N       rule 3 (default 250, Scaling NMT's; 0: off)\n"
"  --max-tokens N      rule 4 (default 0: off)\n"
"  --max-ratio R       rule 5 (default 9, clean-corpus-n.perl's; Scaling NMT used 1.5 on BPE\n"
"                      tokens; 0: off)\n"
"  --min-letters F     rule 6, a fraction in 0..1 (default 0: off; e.g. 0.5)\n"
"  --keep-copies       turn rule 7 off\n"
"  --langid SRC,TGT    turn rule 8 on: the languages of SRC and TGT as ISO 639-1 codes (en,de);\n"
"                      CLD2 (Debian's libcld2) detects each line as plain text, and a line it is\n"
"                      unsure of (too short, mixed) is kept\n"
"  --keep-duplicates   turn rule 9 off\n"
"  --spm MODEL         SentencePiece model for both sides' tokens\n"
"  --src-spm MODEL     SentencePiece model for the source (overrides --spm)\n"
"  --tgt-spm MODEL     SentencePiece model for the target (overrides --spm)\n"
"  --report FILE       write the report there instead of standard error\n"
"  --removed FILE      write \"LINE<TAB>RULE\" for every removed pair (1-based line numbers)\n"
"  -h, --help          this help\n"
"\n"
"The report lists every rule with the pairs it removed (lines starting with '#' are comments):\n"
"  read            29000\n"
"  invalid_utf8    0\n"
"  ...\n"
"  duplicate       15\n"
"  kept            28412\n"
"Exit status: 0 done, 1 error (unreadable file, line counts differ: the outputs are removed),\n"
"2 usage error.\n");
}

static int parse_i64(const char *opt, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : -1;
    if (!v || *end || end == v || errno || x < 0) {
        fprintf(stderr, "tern filter: %s needs a non-negative integer (got '%s')\n", opt, v ? v : "");
        return 0;
    }
    *out = x;
    return 1;
}

static int parse_f64(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    double x = v ? strtod(v, &end) : -1;
    if (!v || *end || end == v || !(x >= lo && x <= hi)) {
        fprintf(stderr, "tern filter: %s needs a number in %g..%g (got '%s')\n", opt, lo, hi, v ? v : "");
        return 0;
    }
    *out = x;
    return 1;
}

/* getline() without the '\n'; -1 at the end of the file. */
static ssize_t read_line(char **buf, size_t *cap, FILE *f) {
    ssize_t n = getline(buf, cap, f);
    if (n > 0 && (*buf)[n - 1] == '\n') n--;
    return n;
}

static int64_t count_rest(FILE *f, char **buf, size_t *cap) {
    int64_t n = 0;
    while (read_line(buf, cap, f) >= 0) n++;
    return n;
}

int cmd_filter(int argc, char **argv) {
    const char *paths[4];
    int npaths = 0;
    const char *spm_both = NULL, *spm_path[2] = {NULL, NULL}, *report_path = NULL, *removed_path = NULL;
    filter_options_t o = filter_default_options();
    char langs[2][16];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE() do { if (!v) { fprintf(stderr, "tern filter: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--max-words")) { NEED_VALUE(); if (!parse_i64(a, v, &o.max_words)) return 2; }
        else if (!strcmp(a, "--max-tokens")) { NEED_VALUE(); if (!parse_i64(a, v, &o.max_tokens)) return 2; }
        else if (!strcmp(a, "--max-ratio")) { NEED_VALUE(); if (!parse_f64(a, v, 0, 1e300, &o.max_ratio)) return 2; }
        else if (!strcmp(a, "--min-letters")) { NEED_VALUE(); if (!parse_f64(a, v, 0, 1, &o.min_letters)) return 2; }
        else if (!strcmp(a, "--keep-copies")) o.copies = 0;
        else if (!strcmp(a, "--keep-duplicates")) o.duplicates = 0;
        else if (!strcmp(a, "--langid")) {
            NEED_VALUE();
            const char *comma = strchr(v, ',');
            if (!comma || comma == v || !comma[1] || strchr(comma + 1, ',') || comma - v >= (long)sizeof langs[0] ||
                strlen(comma + 1) >= sizeof langs[1]) {
                fprintf(stderr, "tern filter: --langid needs SRC,TGT language codes, e.g. en,de (got '%s')\n", v);
                return 2;
            }
            snprintf(langs[0], sizeof langs[0], "%.*s", (int)(comma - v), v);
            snprintf(langs[1], sizeof langs[1], "%s", comma + 1);
            o.src_lang = langs[0];
            o.tgt_lang = langs[1];
        }
        else if (!strcmp(a, "--spm")) { NEED_VALUE(); spm_both = v; }
        else if (!strcmp(a, "--src-spm")) { NEED_VALUE(); spm_path[0] = v; }
        else if (!strcmp(a, "--tgt-spm")) { NEED_VALUE(); spm_path[1] = v; }
        else if (!strcmp(a, "--report")) { NEED_VALUE(); report_path = v; }
        else if (!strcmp(a, "--removed")) { NEED_VALUE(); removed_path = v; }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tern filter: unknown option '%s' (see tern filter --help)\n", a);
            return 2;
        } else {
            if (npaths == 4) { fprintf(stderr, "tern filter: too many files (SRC TGT SRC_OUT TGT_OUT)\n"); return 2; }
            paths[npaths++] = a;
        }
#undef NEED_VALUE
    }
    if (npaths != 4) {
        fprintf(stderr, "tern filter: needs SRC TGT SRC_OUT TGT_OUT; see tern filter --help\n");
        return 2;
    }
    for (int s = 0; s < 2; s++)
        if (!spm_path[s]) spm_path[s] = spm_both;

    int rc = 1;
    spm_t *sp[2] = {NULL, NULL};
    FILE *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL}, *rep = NULL, *rem = NULL;
    filter_t *f = NULL;
    char *buf[2] = {NULL, NULL};
    size_t cap[2] = {0, 0};
    int outputs_open = 0;
    for (int s = 0; s < 2; s++) {
        if (spm_path[s]) {
            if (s == 1 && spm_path[1] == spm_path[0]) { /* one model for both sides */
                continue;
            }
            if (spm_load(&sp[s], spm_path[s])) {
                fprintf(stderr, "tern filter: %s\n", tern_last_error());
                goto out;
            }
        }
    }
    o.src_spm = sp[0];
    o.tgt_spm = sp[1] ? sp[1] : (spm_path[1] ? sp[0] : NULL);
    if (filter_create(&f, &o)) {
        fprintf(stderr, "tern filter: %s\n", tern_last_error());
        goto out;
    }
    for (int s = 0; s < 2; s++) {
        if (!(in[s] = fopen(paths[s], "rb"))) {
            fprintf(stderr, "tern filter: cannot open %s: %s\n", paths[s], strerror(errno));
            goto out;
        }
    }
    for (int s = 0; s < 2; s++) {
        if (!(out[s] = fopen(paths[2 + s], "wb"))) {
            fprintf(stderr, "tern filter: cannot create %s: %s\n", paths[2 + s], strerror(errno));
            goto out;
        }
        outputs_open = 1;
        setvbuf(out[s], NULL, _IOFBF, 1 << 20);
    }
    if (removed_path && !(rem = fopen(removed_path, "w"))) {
        fprintf(stderr, "tern filter: cannot create %s: %s\n", removed_path, strerror(errno));
        goto out;
    }

    int64_t line = 0;
    for (;;) {
        ssize_t n0 = read_line(&buf[0], &cap[0], in[0]);
        ssize_t n1 = read_line(&buf[1], &cap[1], in[1]);
        if (n0 < 0 || n1 < 0) {
            if (ferror(in[0]) || ferror(in[1])) {
                fprintf(stderr, "tern filter: cannot read %s\n", paths[ferror(in[0]) ? 0 : 1]);
                goto out;
            }
            if (n0 >= 0 || n1 >= 0) {
                int longer = n0 >= 0 ? 0 : 1;
                int64_t more = line + 1 + count_rest(in[longer], &buf[longer], &cap[longer]);
                int64_t c0 = longer == 0 ? more : line, c1 = longer == 1 ? more : line;
                fprintf(stderr, "tern filter: line counts differ: source %s has %lld lines, target %s has %lld\n",
                        paths[0], (long long)c0, paths[1], (long long)c1);
                goto out;
            }
            break;
        }
        line++;
        filter_rule_t r;
        if (filter_pair(&r, f, buf[0], (size_t)n0, buf[1], (size_t)n1)) {
            fprintf(stderr, "tern filter: line %lld: %s\n", (long long)line, tern_last_error());
            goto out;
        }
        if (r == FILTER_KEEP) {
            for (int s = 0; s < 2; s++) {
                fwrite(buf[s], 1, (size_t)(s ? n1 : n0), out[s]);
                fputc('\n', out[s]);
            }
        } else if (rem) {
            fprintf(rem, "%lld\t%s\n", (long long)line, filter_rule_name(r));
        }
    }
    for (int s = 0; s < 2; s++) {
        int bad = ferror(out[s]) | fclose(out[s]);
        out[s] = NULL;
        if (bad) {
            fprintf(stderr, "tern filter: cannot write %s\n", paths[2 + s]);
            goto out;
        }
    }
    if (rem) {
        int bad = ferror(rem) | fclose(rem);
        rem = NULL;
        if (bad) {
            fprintf(stderr, "tern filter: cannot write %s\n", removed_path);
            goto out;
        }
    }
    outputs_open = 0;

    rep = report_path ? fopen(report_path, "w") : stderr;
    if (!rep) {
        fprintf(stderr, "tern filter: cannot create %s: %s\n", report_path, strerror(errno));
        goto out;
    }
    const int64_t *c = filter_counts(f);
    size_t set_bytes;
    size_t set_n = filter_hash_set_size(f, &set_bytes);
    fprintf(rep, "# tern filter: %s %s -> %s %s\n", paths[0], paths[1], paths[2], paths[3]);
    fprintf(rep, "# a pair is counted under the first rule that removes it, in this order\n");
    fprintf(rep, "%-16s%lld\n", "read", (long long)line);
    char note[128];
    for (int r = 1; r < FILTER_NRULES; r++) {
        note[0] = 0;
        switch (r) {
        case FILTER_TOO_MANY_WORDS:
            if (o.max_words) snprintf(note, sizeof note, "max %lld words", (long long)o.max_words);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_TOO_MANY_TOKENS:
            if (o.max_tokens)
                snprintf(note, sizeof note, "max %lld %s", (long long)o.max_tokens,
                         o.src_spm || o.tgt_spm ? "tokens (SentencePiece)" : "tokens (words)");
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_RATIO:
            if (o.max_ratio > 0)
                snprintf(note, sizeof note, "max %g, in %s", o.max_ratio,
                         o.src_spm && o.tgt_spm ? "SentencePiece tokens" : "words");
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_FEW_LETTERS:
            if (o.min_letters > 0) snprintf(note, sizeof note, "min %g letters", o.min_letters);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_COPY:
            if (!o.copies) snprintf(note, sizeof note, "off");
            break;
        case FILTER_LANGUAGE:
            if (o.src_lang) snprintf(note, sizeof note, "not %s / not %s (CLD2, reliable)", o.src_lang, o.tgt_lang);
            else snprintf(note, sizeof note, "off");
            break;
        case FILTER_DUPLICATE:
            if (o.duplicates) snprintf(note, sizeof note, "%zu hashes, %zu bytes", set_n, set_bytes);
            else snprintf(note, sizeof note, "off");
            break;
        }
        if (note[0]) fprintf(rep, "%-16s%-10lld# %s\n", filter_rule_name((filter_rule_t)r), (long long)c[r], note);
        else fprintf(rep, "%-16s%lld\n", filter_rule_name((filter_rule_t)r), (long long)c[r]);
    }
    fprintf(rep, "%-16s%lld\n", "kept", (long long)c[FILTER_KEEP]);
    if (report_path && fclose(rep)) {
        rep = NULL;
        fprintf(stderr, "tern filter: cannot write %s\n", report_path);
        goto out;
    }
    rep = NULL;
    rc = 0;
out:
    for (int s = 0; s < 2; s++) {
        if (in[s]) fclose(in[s]);
        if (out[s]) fclose(out[s]);
        free(buf[s]);
        spm_free(sp[s]);
    }
    if (rem) fclose(rem);
    if (rc && outputs_open)
        for (int s = 0; s < 2; s++) unlink(paths[2 + s]);
    filter_free(f);
    return rc;
}
