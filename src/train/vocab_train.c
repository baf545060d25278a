/*
 * vocab_train.c — SentencePiece training for `tern vocab` (see vocab_train.h): atomic
 * PREFIX.model/PREFIX.vocab, JSON vocabulary lists, model-directory layouts with config.json.
 */
#include "train/vocab_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_dir.h"
#include "text/vocab.h"

tern_status_t vocab_train_spm(const char *prefix, const char *const *inputs, int n,
                              const spm_train_options_t *o) {
    spm_train_options_t t = o ? *o : spm_train_default_options();
    size_t pl = strlen(prefix) + 64;
    char *tmp = malloc(pl), *a = malloc(pl), *b = malloc(pl);
    tern_status_t st = TERN_OK;
    if (!tmp || !a || !b) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", prefix);
        goto done;
    }
    snprintf(tmp, pl, "%s.tmp%ld", prefix, (long)getpid());
    t.inputs = inputs;
    t.n_inputs = n;
    t.model_prefix = tmp;
    if ((st = spm_train_files(&t))) goto done;
    static const char *ext[] = {".model", ".vocab"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, pl, "%s%s", tmp, ext[i]);
        snprintf(b, pl, "%s%s", prefix, ext[i]);
        if (rename(a, b) != 0) {
            st = tern_error(TERN_ERR_IO, "%s: cannot write: %s", b, strerror(errno));
            goto done;
        }
    }
done:
    if (st && tmp && a) {
        snprintf(a, pl, "%s.model", tmp);
        unlink(a);
        snprintf(a, pl, "%s.vocab", tmp);
        unlink(a);
    }
    free(tmp);
    free(a);
    free(b);
    return st;
}

tern_status_t vocab_write_json(const char *spm_path, const char *json_path) {
    spm_t *s;
    tern_status_t st = spm_load(&s, spm_path);
    if (st) return st;
    int n = spm_piece_count(s);
    const char **pieces = malloc(sizeof *pieces * (size_t)(n > 0 ? n : 1));
    vocab_t *v = NULL;
    if (!pieces) {
        st = tern_error(TERN_ERR_NOMEM, "%s: out of memory", json_path);
        goto done;
    }
    for (int i = 0; i < n; i++) pieces[i] = spm_id_to_piece(s, i);
    if ((st = vocab_from_tokens(&v, pieces, n))) goto done;
    st = model_dir_write_vocab(v, json_path);
done:
    vocab_free(v);
    free(pieces);
    spm_free(s);
    return st;
}

/* The piece of special id `id` (named `what`) of the model at path, into out. */
static tern_status_t special_piece(const spm_t *s, const char *path, int id, const char *what, char *out,
                                   size_t n) {
    const char *p = spm_id_to_piece(s, id);
    if (id < 0 || !p)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: a model directory needs a %s piece (its id is %d)", path, what,
                          id);
    if (strlen(p) >= n) return tern_error(TERN_ERR_INVALID_ARG, "%s: %s piece too long", path, what);
    snprintf(out, n, "%s", p);
    return TERN_OK;
}

static tern_status_t train_side(const char *dir, const char *stem, const char *model_name, const char *json_name,
                                const char *const *inputs, int n, const spm_train_options_t *o) {
    char prefix[4096], from[4200], to[4200];
    path_join(prefix, sizeof prefix, dir, stem);
    tern_status_t st = vocab_train_spm(prefix, inputs, n, o);
    if (st) return st;
    snprintf(from, sizeof from, "%s.model", prefix);
    path_join(to, sizeof to, dir, model_name);
    if (strcmp(from, to) && rename(from, to) != 0)
        return tern_error(TERN_ERR_IO, "%s: cannot write: %s", to, strerror(errno));
    path_join(from, sizeof from, dir, json_name);
    return vocab_write_json(to, from);
}

tern_status_t vocab_train_model_dir(const char *dir, const char *const *src_inputs, int n_src,
                                    const char *const *tgt_inputs, int n_tgt, int separate,
                                    const spm_train_options_t *o, int add_source_bos, int add_source_eos) {
    spm_train_options_t t = o ? *o : spm_train_default_options();
    if (n_src < 1 || n_tgt < 1)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: a model directory's vocabulary needs source and target files",
                          dir);
    if (t.pad_id < 0 || t.unk_id < 0 || t.bos_id < 0 || t.eos_id < 0)
        return tern_error(TERN_ERR_INVALID_ARG, "%s: a model directory needs the padding, unknown, begin and end "
                          "pieces (ids %d %d %d %d; -1 disables one)", dir, t.pad_id, t.unk_id, t.bos_id, t.eos_id);
    tern_status_t st = model_dir_mkdir(dir);
    if (st) return st;
    char model_path[4096];
    if (separate) {
        if ((st = train_side(dir, "source", "source.spm", "source_vocabulary.json", src_inputs, n_src, &t)) ||
            (st = train_side(dir, "target", "target.spm", "target_vocabulary.json", tgt_inputs, n_tgt, &t)))
            return st;
        path_join(model_path, sizeof model_path, dir, "source.spm");
    } else {
        const char **all = malloc(sizeof *all * (size_t)(n_src + n_tgt));
        if (!all) return tern_error(TERN_ERR_NOMEM, "out of memory");
        memcpy(all, src_inputs, sizeof *all * (size_t)n_src);
        memcpy(all + n_src, tgt_inputs, sizeof *all * (size_t)n_tgt);
        st = train_side(dir, "sentencepiece", "sentencepiece.model", "shared_vocabulary.json", all, n_src + n_tgt,
                        &t);
        free(all);
        if (st) return st;
        path_join(model_path, sizeof model_path, dir, "sentencepiece.model");
    }
    spm_t *s;
    if ((st = spm_load(&s, model_path))) return st;
    model_config_t c;
    model_config_defaults(&c);
    char pad[64];
    if (!(st = special_piece(s, model_path, t.unk_id, "unknown (unk_id)", c.unk_token, sizeof c.unk_token)) &&
        !(st = special_piece(s, model_path, t.bos_id, "begin (bos_id)", c.bos_token, sizeof c.bos_token)) &&
        !(st = special_piece(s, model_path, t.eos_id, "end (eos_id)", c.eos_token, sizeof c.eos_token)) &&
        !(st = special_piece(s, model_path, t.pad_id, "padding (pad_id)", pad, sizeof pad))) {
        snprintf(c.decoder_start_token, sizeof c.decoder_start_token, "%s", c.bos_token);
        c.add_source_bos = add_source_bos != 0;
        c.add_source_eos = add_source_eos != 0;
        st = model_dir_write_config(dir, NULL, &c, pad);
    }
    spm_free(s);
    return st;
}
