/*
 * train_plot.c — `tern train`'s curves.png: the training and validation curves of a save
 * directory (train_curve.tsv, valid_curve.tsv written by the trainer) plotted by gnuplot through
 * a pipe. Process-level work (running another program), so it lives in the CLI, not the library.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli.h"

static int in_path(const char *prog) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    while (*path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        if (len > 0 && len < 3000) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)len, path, prog);
            if (access(buf, X_OK) == 0) return 1;
        }
        path += len + (e != NULL);
    }
    return 0;
}

/* A gnuplot single-quoted string: quotes doubled. */
static void gp_quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    if (n < 3) return;
    out[k++] = '\'';
    for (; *s && k + 3 < n; s++) {
        if (*s == '\'') out[k++] = '\'';
        out[k++] = *s;
    }
    out[k++] = '\'';
    out[k] = 0;
}

tern_status_t train_plot(const char *save_dir, const char *out_png) {
    if (!in_path("gnuplot"))
        return tern_error(TERN_ERR_UNSUPPORTED, "gnuplot is not installed (Debian: apt-get install gnuplot-nox); the "
                          "curves are in %s/train_curve.tsv and valid_curve.tsv", save_dir);
    char tp[4096], vp[4096], qt[8300], qv[8300], qo[8300];
    path_join(tp, sizeof tp, save_dir, "train_curve.tsv");
    path_join(vp, sizeof vp, save_dir, "valid_curve.tsv");
    if (!file_exists(tp)) return tern_error(TERN_ERR_IO, "%s: no training curve", tp);
    gp_quote(qt, sizeof qt, tp);
    gp_quote(qv, sizeof qv, vp);
    gp_quote(qo, sizeof qo, out_png);
    FILE *g = popen("gnuplot", "w");
    if (!g) return tern_error(TERN_ERR_IO, "cannot run gnuplot: %s", strerror(errno));
    /* inline data: the training loss averaged over windows of w updates (token-weighted) and the
     * BLEU rows of the validation curve */
    int rows = 0, has_valid = 0, has_bleu = 0;
    char line[1024];
    FILE *f = fopen(tp, "r");
    if (f) {
        while (fgets(line, sizeof line, f)) rows += line[0] != '#';
        rewind(f);
        int w = rows / 50 > 1 ? rows / 50 : 1, k = 0;
        double ls = 0, ts = 0;
        fprintf(g, "$TRAIN << EOD\n");
        while (fgets(line, sizeof line, f)) {
            long u;
            double loss, tok;
            if (line[0] == '#' || sscanf(line, "%ld\t%*s\t%lf\t%*s\t%*s\t%*s\t%*s\t%lf", &u, &loss, &tok) != 3)
                continue;
            ls += loss * tok, ts += tok;
            if (++k == w) {
                fprintf(g, "%ld\t%.6g\n", u, ls / ts);
                k = 0, ls = ts = 0;
            }
        }
        fprintf(g, "EOD\n");
        fclose(f);
    }
    f = fopen(vp, "r");
    fprintf(g, "$BLEU << EOD\n");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            long u;
            double b;
            if (line[0] == '#') continue;
            has_valid = 1;
            if (sscanf(line, "%ld\t%*s\t%*s\t%*s\t%*s\t%lf", &u, &b) == 2 && b >= 0) {
                fprintf(g, "%ld\t%.4f\n", u, b);
                has_bleu = 1;
            }
        }
        fclose(f);
    }
    fprintf(g, "EOD\n");
    fprintf(g, "set terminal pngcairo size 1400,600 font ',10'\nset output %s\n", qo);
    fprintf(g, "set datafile separator '\\t'\nset grid\nset key top right\nset multiplot layout 1,2\n");
    fprintf(g, "set title 'loss (nats per target token)'\nset xlabel 'update'\nset ylabel 'loss'\n");
    fprintf(g, "plot %s using 1:3 with lines lc rgb '#c8d8f0' title 'train (per update)'", qt);
    if (rows > 0)
        fprintf(g, ", $TRAIN using 1:2 with lines lw 2 lc rgb '#2060c0' title 'train (mean of %d)'",
                rows / 50 > 1 ? rows / 50 : 1);
    if (has_valid)
        fprintf(g, ", %s using 1:3 with linespoints lc rgb '#d04010' pt 7 ps 0.6 title 'valid loss', "
                   "%s using 1:4 with linespoints lc rgb '#208040' pt 5 ps 0.5 title 'valid nll'", qv, qv);
    fprintf(g, "\nset title 'validation BLEU and learning rate'\nset ylabel 'BLEU'\nset y2label 'learning rate'\n"
               "set y2tics\nset ytics nomirror\n");
    fprintf(g, "plot %s using 1:6 axes x1y2 with lines lc rgb '#808080' title 'lr'", qt);
    if (has_bleu)
        fprintf(g, ", $BLEU using 1:2 axes x1y1 with linespoints lc rgb '#6020a0' pt 7 ps 0.7 title 'BLEU'");
    fprintf(g, "\nunset multiplot\nset output\n");
    int rc = pclose(g);
    if (rc != 0) return tern_error(TERN_ERR_IO, "gnuplot failed (exit status %d) writing %s", rc, out_png);
    return TERN_OK;
}
