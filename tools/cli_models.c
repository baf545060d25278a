/* cli_models.c — models by name: `tern translate -m en-de` finds an installed model. A -m value
 * that exists (a directory, or anything else: the library then says what is wrong with it) or that
 * contains a '/' is a path, used as it is; a bare name that is not here is looked up, in order, in
 * the folders of TERN_MODELS_DIR (separated by ':'), in share/tern/models beside the executable
 * (BIN/../share/tern/models, where `make install` puts the shipped model, whatever the PREFIX),
 * and in the DATADIR the program was built for (TERN_DATADIR/models). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "cli.h"

#ifndef TERN_DATADIR
#define TERN_DATADIR "/usr/local/share/tern"
#endif

#define MAX_SEARCH 16

typedef struct {
    char dirs[MAX_SEARCH][PATH_MAX];
    int n;
} search_path_t;

static void add_dir(search_path_t *s, const char *dir, size_t len) {
    if (!len || len >= PATH_MAX || s->n == MAX_SEARCH) return;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->dirs[i]) == len && !memcmp(s->dirs[i], dir, len)) return;
    memcpy(s->dirs[s->n], dir, len);
    s->dirs[s->n++][len] = 0;
}

static void search_path(search_path_t *s) {
    s->n = 0;
    const char *env = getenv("TERN_MODELS_DIR");
    for (const char *p = env; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        add_dir(s, p, len);
        p = colon ? colon + 1 : p + len;
    }
    /* the executable's PREFIX: /PREFIX/bin/tern -> /PREFIX/share/tern/models */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;           /* the bin folder */
        slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;                  /* its parent: the prefix ("" for /bin) */
            char d[PATH_MAX];
            int len = snprintf(d, sizeof d, "%s/share/tern/models", exe);
            if (len > 0 && len < (int)sizeof d) add_dir(s, d, (size_t)len);
        }
    }
    const char *built = TERN_DATADIR "/models";
    add_dir(s, built, strlen(built));
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "en-de, fr-en" (the model folders in dir, sorted, at most a line's worth) into buf. */
static void list_models(const char *dir, char *buf, size_t size) {
    buf[0] = 0;
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        char p[PATH_MAX];
        if (nm[0] != '.' && snprintf(p, sizeof p, "%s/%s/config.json", dir, nm) < (int)sizeof p &&
            access(p, R_OK) == 0 && used + strlen(nm) + 8 < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", nm);
        free(names[i]);
    }
    free(names);
}

const char *cli_model_dir(const char *cmd, const char *name, char *buf, size_t size) {
    struct stat st;
    if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") || stat(name, &st) == 0)
        return name;
    search_path_t s;
    search_path(&s);
    for (int i = 0; i < s.n; i++) {
        int len = snprintf(buf, size, "%s/%s", s.dirs[i], name);
        if (len > 0 && (size_t)len < size && is_dir(buf)) return buf;
    }
    fprintf(stderr, "tern %s: no model '%s': not a directory here, and not an installed model in:\n", cmd, name);
    for (int i = 0; i < s.n; i++) {
        char models[512];
        if (!is_dir(s.dirs[i])) {
            fprintf(stderr, "  %s (no such folder)\n", s.dirs[i]);
            continue;
        }
        list_models(s.dirs[i], models, sizeof models);
        fprintf(stderr, "  %s (models: %s)\n", s.dirs[i], models[0] ? models : "none");
    }
    fprintf(stderr, "Give a model directory's path, or set TERN_MODELS_DIR to folders of models (':' between them).\n");
    return NULL;
}
