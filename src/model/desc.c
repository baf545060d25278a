/*
 * desc.c — the generic functions over a family's description (desc.h).
 */
#include "model/desc.h"

#include <stdio.h>
#include <string.h>

const char *desc_name(const model_desc_t *md, int s, int layer, char *buf, size_t n) {
    const desc_spec_t *p = &md->specs[s];
    if (p->count != DESC_ONCE) snprintf(buf, n, p->name, layer);
    else snprintf(buf, n, "%s", p->name);
    return buf;
}

int desc_used(const model_desc_t *md, int s, const int *dims) {
    int c = md->specs[s].cond;
    return c == DESC_ALWAYS || dims[c] != 0;
}

int desc_stored(const model_desc_t *md, int s, const int *dims) {
    const desc_spec_t *p = &md->specs[s];
    if (!desc_used(md, s, dims)) return 0;
    return !(p->alias && dims[p->alias_if]);
}

void desc_shape(const model_desc_t *md, int s, const int *dims, int *rows, int *cols) {
    const desc_spec_t *p = &md->specs[s];
    *rows = p->rows.mul * dims[p->rows.dim];
    *cols = p->cols.mul ? p->cols.mul * dims[p->cols.dim] : 0;
}

/* The layers [lo, hi) of spec s under dims (a global spec: [-1, 0)). */
static void layer_range(const desc_spec_t *p, const int *dims, int *lo, int *hi) {
    if (p->count == DESC_ONCE) {
        *lo = -1, *hi = 0;
        return;
    }
    *lo = p->lo;
    *hi = dims[p->count];
    if (p->hi && p->hi < *hi) *hi = p->hi;
}

static int emit(const model_desc_t *md, const int *dims, desc_tensor_t *out, int n, int s, int l) {
    if (out) {
        desc_tensor_t *t = &out[n];
        int r, c;
        memset(t, 0, sizeof *t);
        desc_name(md, s, l, t->name, sizeof t->name);
        desc_shape(md, s, dims, &r, &c);
        t->rank = c ? 2 : 1;
        t->shape[0] = r;
        t->shape[1] = c;
        t->spec = s;
        t->layer = l;
    }
    return n + 1;
}

int desc_tensors(const model_desc_t *md, const int *dims, desc_tensor_t *out) {
    int n = 0;
    for (int s = 0; s < md->n_specs;) {
        const desc_spec_t *p = &md->specs[s];
        if (!p->group) {
            int lo, hi;
            layer_range(p, dims, &lo, &hi);
            if (desc_stored(md, s, dims))
                for (int l = lo; l < hi; l++) n = emit(md, dims, out, n, s, l);
            s++;
            continue;
        }
        int end = s, top = 0;
        while (end < md->n_specs && md->specs[end].group == p->group) {
            int lo, hi;
            layer_range(&md->specs[end], dims, &lo, &hi);
            if (hi > top) top = hi;
            end++;
        }
        for (int l = 0; l < top; l++)
            for (int k = s; k < end; k++) {
                int lo, hi;
                layer_range(&md->specs[k], dims, &lo, &hi);
                if (l >= lo && l < hi && desc_stored(md, k, dims)) n = emit(md, dims, out, n, k, l);
            }
        s = end;
    }
    return n;
}

/* The spec named name (global specs only: aliases are global). */
static int find_global(const model_desc_t *md, const char *name) {
    for (int s = 0; s < md->n_specs; s++)
        if (md->specs[s].count == DESC_ONCE && !strcmp(md->specs[s].name, name)) return s;
    return -1;
}

int desc_aliases(const model_desc_t *md, const int *dims, const char **names, const char **targets, int max) {
    int n = 0;
    for (int s = 0; s < md->n_specs && n < max; s++) {
        const desc_spec_t *p = &md->specs[s];
        if (!p->alias || !desc_used(md, s, dims) || !dims[p->alias_if]) continue;
        const char *t = p->alias;
        for (int hops = 0; hops < md->n_specs; hops++) { /* the stored end of a chain of ties */
            int k = find_global(md, t);
            if (k < 0 || !md->specs[k].alias || !dims[md->specs[k].alias_if]) break;
            t = md->specs[k].alias;
        }
        names[n] = p->name, targets[n++] = t;
    }
    return n;
}

int desc_parse(const model_desc_t *md, const char *name, int *spec, int *layer) {
    char buf[160];
    for (int i = 0; md->alt_names && md->alt_names[i][0]; i++)
        if (!strcmp(name, md->alt_names[i][0])) {
            name = md->alt_names[i][1];
            break;
        }
    for (int s = 0; s < md->n_specs; s++) {
        const desc_spec_t *p = &md->specs[s];
        if (p->count == DESC_ONCE) {
            if (strcmp(p->name, name)) continue;
            *spec = s, *layer = -1;
            return 1;
        }
        /* the pattern's prefix, the decimal layer, the pattern's suffix */
        const char *pc = strstr(p->name, "%d");
        size_t pre = (size_t)(pc - p->name);
        if (strncmp(name, p->name, pre) || name[pre] < '0' || name[pre] > '9') continue;
        const char *q = name + pre;
        int l = 0;
        for (; *q >= '0' && *q <= '9' && l < (1 << 20); q++) l = l * 10 + (*q - '0');
        if (l < p->lo || (p->hi && l >= p->hi)) continue;
        desc_name(md, s, l, buf, sizeof buf);
        if (strcmp(buf, name)) continue;
        *spec = s, *layer = l;
        return 1;
    }
    return 0;
}

const char *desc_global_name(const model_desc_t *md, int module, int part) {
    for (int s = 0; s < md->n_specs; s++)
        if (md->specs[s].count == DESC_ONCE && md->specs[s].module == module && md->specs[s].part == part)
            return md->specs[s].name;
    return NULL;
}

int desc_quantizable(const model_desc_t *md, const char *name) {
    int s, l;
    return desc_parse(md, name, &s, &l) && md->specs[s].dtype == DESC_Q8;
}

int desc_stored_int8(const model_desc_t *md, const weights_t *w) {
    for (int i = 0; i < weights_count(w); i++) {
        const tensor_t *t = weights_at(w, i);
        if (t->dtype == DT_I8 && t->rank == 2 && desc_quantizable(md, t->name)) return 1;
    }
    return 0;
}

tern_status_t desc_check_supported(const model_desc_t *md, const weights_t *w) {
    for (int i = 0; md->unsupported_keys && md->unsupported_keys[i]; i++) {
        int64_t v;
        if (weights_get_int(w, md->unsupported_keys[i], &v) && v)
            return tern_error(TERN_ERR_UNSUPPORTED, "%s: '%s' is set: not supported by Tern's %s yet", weights_path(w),
                              md->unsupported_keys[i], md->family);
    }
    for (int i = 0; md->unsupported_parts && i < weights_count(w); i++) {
        const char *n = weights_at(w, i)->name;
        for (int j = 0; md->unsupported_parts[j]; j++)
            if (strstr(n, md->unsupported_parts[j]))
                return tern_error(TERN_ERR_UNSUPPORTED, "%s: tensor '%s': this %s variant is not supported by Tern yet",
                                  weights_path(w), n, md->family);
    }
    return TERN_OK;
}

int desc_scalars(const model_desc_t *md, const int *dims, desc_scalars_t *s) {
    int n = 0;
    memset(s, 0, sizeof *s);
    for (int k = 0; k < md->n_keys && n < DESC_MAX_KEYS; k++) {
        const desc_key_t *key = &md->keys[k];
        if (key->flags & DESC_KEY_READONLY) continue;
        int v = key->dim == DESC_CONST ? key->value : dims[key->dim];
        tensor_t *t = &s->t[n];
        if (key->dtype == DT_I16) s->v[n].i16 = (int16_t)v;
        else if (key->dtype == DT_I8) s->v[n].i8 = (int8_t)v;
        else s->v[n].i32 = v;
        t->name = key->name;
        t->dtype = key->dtype;
        t->rank = 0;
        t->numel = 1;
        t->data = &s->v[n];
        t->nbytes = dtype_size(key->dtype);
        n++;
    }
    return n;
}

int desc_key_get(const model_desc_t *md, int k, const weights_t *w, int64_t *v) {
    const desc_key_t *key = &md->keys[k];
    if (weights_get_int(w, key->name, v)) return 1;
    if (!(key->flags & DESC_KEY_OPTIONAL)) return 0;
    *v = key->value;
    return 1;
}
