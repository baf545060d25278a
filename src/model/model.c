/*
 * model.c — tern_model_load(): finds the model's files, reads config.json, chooses the family by
 * its "architecture" (family.h), loads the weights (CTranslate2 model.bin or Tern's
 * model.safetensors), builds the family's network, loads vocabularies and SentencePiece, and
 * checks that they agree. tern_model_load_ensemble(): several models as one (ensemble.h).
 * Text <-> token id conversion for both sides.
 */
#include "model/model.h"

#include "model/ensemble.h"
#include "model/generation.h"
#include "model/hf_format.h"
#include "model/marian_format.h"
#include "search/shortlist.h"
#include "model/transformer_desc.h"

#include <stdlib.h>
#include <string.h>

/* tern_model_options_t grew in 1.2 (shortlist): this is the TERN_1.2 version, the default one;
 * src/batch/abi_compat.c has the TERN_1 one, which returns the 1.0.0/1.1.0 layout. */
tern_model_options_t tern_model_default_options_1_2(void);
__asm__(".symver tern_model_default_options_1_2, tern_model_default_options@@TERN_1.2");

tern_model_options_t tern_model_default_options_1_2(void) {
    tern_model_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.compute_type = TERN_COMPUTE_AUTO;
    o.use_spm = -1;
    return o;
}

static const char *find_file(char *buf, size_t n, const char *dir, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        path_join(buf, n, dir, names[i]);
        if (file_exists(buf)) return buf;
    }
    return NULL;
}

static const char *const vocab_shared[] = {"shared_vocabulary.json", "shared_vocabulary.txt", NULL};
static const char *const vocab_src[] = {"source_vocabulary.json", "source_vocabulary.txt", NULL};
static const char *const vocab_tgt[] = {"target_vocabulary.json", "target_vocabulary.txt", NULL};

static tern_status_t load_vocab_pair(tern_model_t *m) {
    char p[2048];
    tern_status_t st;
    const char *const *shared = vocab_shared, *const *src = vocab_src, *const *tgt = vocab_tgt;
    if (find_file(p, sizeof p, m->dir, shared)) {
        if ((st = vocab_load(&m->src_vocab, p))) return st;
        m->tgt_vocab = m->src_vocab;
        snprintf(m->src_vocab_path, sizeof m->src_vocab_path, "%s", p);
        snprintf(m->tgt_vocab_path, sizeof m->tgt_vocab_path, "%s", p);
        return TERN_OK;
    }
    if (!find_file(p, sizeof p, m->dir, src))
        return tern_error(TERN_ERR_IO, "%s: no vocabulary found (shared_vocabulary.json, or "
                          "source_vocabulary.json and target_vocabulary.json)", m->dir);
    if ((st = vocab_load(&m->src_vocab, p))) return st;
    snprintf(m->src_vocab_path, sizeof m->src_vocab_path, "%s", p);
    if (!find_file(p, sizeof p, m->dir, tgt))
        return tern_error(TERN_ERR_IO, "%s: source_vocabulary found but no target_vocabulary", m->dir);
    snprintf(m->tgt_vocab_path, sizeof m->tgt_vocab_path, "%s", p);
    return vocab_load(&m->tgt_vocab, p);
}

static tern_status_t load_spm(tern_model_t *m, const tern_model_options_t *o) {
    char p[2048], q[2048];
    tern_status_t st;
    static const char *src[] = {"source.spm", "sentencepiece.model", "spm.model", "source.model",
                                "sentencepiece.bpe.model", NULL};
    static const char *tgt[] = {"target.spm", "target.model", NULL};
    if (o->use_spm == 0) return TERN_OK;
    const char *sp = o->source_spm ? o->source_spm : m->spm_path[0][0] ? m->spm_path[0] : find_file(p, sizeof p, m->dir, src);
    const char *tp = o->target_spm ? o->target_spm : m->spm_path[1][0] ? m->spm_path[1] : find_file(q, sizeof q, m->dir, tgt);
    if (!tp) tp = sp;
    if (!sp && tp) sp = tp;
    if (!sp) {
        if (o->use_spm == 1)
            return tern_error(TERN_ERR_IO, "%s: no SentencePiece model found (source.spm, "
                              "sentencepiece.model, spm.model); give one with --spm", m->dir);
        return TERN_OK;
    }
    if ((st = spm_load(&m->src_spm, sp))) return st;
    if (tp == sp || !strcmp(tp, sp)) {
        m->tgt_spm = m->src_spm;
        return TERN_OK;
    }
    return spm_load(&m->tgt_spm, tp);
}

/* A Hugging Face checkpoint (hf_format.h): its weights, config, vocabularies and the tokens it
 * never outputs, taken over by m. */
static tern_status_t load_hf(tern_model_t *m, const char *dir, const tern_model_options_t *o, int marian) {
    hf_checkpoint_t c;
    tern_status_t st = marian ? marian_checkpoint_load(&c, dir)
                              : hf_checkpoint_load(&c, dir, o->use_spm != 0 && !o->source_spm && !o->target_spm);
    if (st) return st;
    strcpy(m->format, marian ? "marian" : "huggingface");
    memcpy(m->spm_path[0], c.src_spm_path, sizeof m->spm_path[0]);
    memcpy(m->spm_path[1], c.tgt_spm_path, sizeof m->spm_path[1]);
    memcpy(m->shortlist, c.shortlist, sizeof m->shortlist);
    m->never_on_logprobs = marian; /* Marian sets <unk>'s log-probability to -inf, the others unchanged */
    m->marian_codes = !strcmp(c.model_type, "marian");
    m->weights = c.weights, m->src_vocab = c.src_vocab, m->tgt_vocab = c.tgt_vocab, m->cfg = c.cfg;
    memcpy(m->src_vocab_path, c.src_vocab_path, sizeof m->src_vocab_path);
    memcpy(m->tgt_vocab_path, c.tgt_vocab_path, sizeof m->tgt_vocab_path);
    m->never_tok = malloc(sizeof(int) * (size_t)(c.never_off[c.n_never] + 1));
    m->never_off = malloc(sizeof(int) * (size_t)(c.n_never + 1));
    if (!m->never_tok || !m->never_off) return tern_error(TERN_ERR_NOMEM, "out of memory");
    memcpy(m->never_tok, c.never, sizeof(int) * (size_t)c.never_off[c.n_never]);
    memcpy(m->never_off, c.never_off, sizeof(int) * (size_t)(c.n_never + 1));
    m->n_never = c.n_never;
    m->langs = c.langs, m->n_langs = c.n_langs; /* taken over */
    c.langs = NULL, c.n_langs = 0;
    if (m->n_langs > 0) {
        int V = vocab_size(m->tgt_vocab);
        if (!(m->tgt_skip = calloc((size_t)V, 1))) return tern_error(TERN_ERR_NOMEM, "out of memory");
        static const char *const special[] = {"<s>", "<pad>", "<mask>"};
        for (int i = 0; i < 3; i++) {
            int id = vocab_lookup(m->tgt_vocab, special[i]);
            if (id >= 0) m->tgt_skip[id] = 1;
        }
        for (int i = 0; i < m->n_langs; i++) {
            int id = vocab_lookup(m->tgt_vocab, m->langs[i]);
            if (id >= 0) m->tgt_skip[id] = 1;
        }
    }
    return TERN_OK;
}

/* config.json, the family and the weights: a Hugging Face checkpoint (*hf set: its vocabularies
 * are loaded too), Tern's model.safetensors or CTranslate2's model.bin. */
static tern_status_t load_weights(tern_model_t *m, const char *dir, const tern_model_options_t *o, int *hf) {
    char p[2048];
    tern_status_t st;
    model_config_defaults(&m->cfg);
    path_join(p, sizeof p, dir, "config.json");
    if ((*hf = marian_is_dir(dir) || hf_is_checkpoint(p))) {
        if ((st = load_hf(m, dir, o, marian_is_dir(dir)))) return st;
    } else if (file_exists(p) && (st = model_config_load(&m->cfg, p))) {
        return st;
    }
    if ((st = model_family_find(&m->fam, &m->cfg, p))) return st;
    if (*hf) return TERN_OK;
    path_join(p, sizeof p, dir, "model.safetensors");
    if (file_exists(p)) {
        strcpy(m->format, "tern");
        return weights_load_safetensors_flags(&m->weights, p, WEIGHTS_DEFER_COPIES);
    }
    path_join(p, sizeof p, dir, "model.bin");
    if (!file_exists(p)) return tern_error(TERN_ERR_IO, "%s: no model.safetensors or model.bin in this directory", dir);
    strcpy(m->format, "ctranslate2");
    return weights_load_ct2_flags(&m->weights, p, WEIGHTS_DEFER_COPIES);
}

void tern_model_free(tern_model_t *m) {
    if (!m) return;
    if (m->fam && m->net) m->fam->free(m->net);
    if (!m->n_members) vmap_free(m->vmap);
    for (int k = 0; k < m->n_members; k++) tern_model_free(m->members[k]);
    free(m->members);
    weights_free(m->weights);
    if (!m->n_members) free(m->never_tok), free(m->never_off);
    for (int i = 0; i < m->n_langs && !m->n_members; i++) free(m->langs[i]);
    if (!m->n_members) free(m->langs), free(m->tgt_skip);
    if (m->tgt_vocab != m->src_vocab) vocab_free(m->tgt_vocab);
    vocab_free(m->src_vocab);
    if (m->tgt_spm != m->src_spm) spm_free(m->tgt_spm);
    spm_free(m->src_spm);
    free(m);
}

tern_status_t tern_model_load(tern_model_t **out, const char *dir, const tern_model_options_t *options) {
    *out = NULL;
    tern_model_options_t o, defaults = tern_model_default_options();
    /* 1.0.0's and 1.1.0's struct ended at use_vmap (shortlist came in 1.2) */
    tern_status_t ost = api_struct_in(&o, options, &defaults, sizeof o, MODEL_OPTIONS_SIZE_1_0, "tern_model_options_t");
    if (ost) return ost;
    if (!dir) return tern_error(TERN_ERR_INVALID_ARG, "no model directory given");
    tern_model_t *m = calloc(1, sizeof *m);
    if (!m) return tern_error(TERN_ERR_NOMEM, "out of memory");
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    tern_status_t st;
    int hf = 0;
    if ((st = load_weights(m, dir, &o, &hf))) goto fail;
    m->search = tern_search_default_params();
    if ((st = model_generation_load(&m->search, m->search_source, sizeof m->search_source, dir))) goto fail;
    char vmap_path[2048] = "";
    if (o.vmap) snprintf(vmap_path, sizeof vmap_path, "%s", o.vmap);
    else if (o.use_vmap) path_join(vmap_path, sizeof vmap_path, dir, "vmap.txt");
    /* a Marian lexical shortlist: the option's, else a Marian directory's decoder.yml's */
    const char *sl = o.shortlist ? o.shortlist : m->shortlist[0] ? m->shortlist : NULL;
    if (sl && !strcmp(sl, "none")) sl = NULL;
    shortlist_spec_t spec;
    if (sl && (st = shortlist_spec_parse(&spec, sl, o.shortlist ? "shortlist" : "decoder.yml shortlist"))) goto fail;
    if (sl && vmap_path[0]) {
        st = tern_error(TERN_ERR_INVALID_ARG, "%s: a vocabulary map (%s) and a shortlist (%s): give one", dir, vmap_path,
                        spec.path);
        goto fail;
    }
    if ((vmap_path[0] || sl) && !m->fam->set_vocab) {
        st = tern_error(TERN_ERR_UNSUPPORTED, "%s: the %s family cannot use a %s", dir, m->fam->name,
                        sl ? "shortlist" : "vocabulary map");
        goto fail;
    }
    if (sl && !file_exists(spec.path)) {
        st = tern_error(TERN_ERR_IO, "%s: shortlist not found", spec.path);
        goto fail;
    }
    if (vmap_path[0] && !file_exists(vmap_path)) {
        st = tern_error(TERN_ERR_IO, "%s: vocabulary map not found", vmap_path);
        goto fail;
    }
    /* Large unaligned tensors were not copied at load: a family that reads them in place (the
     * Transformer quantizes float32 weights to int8 straight from the file) never makes a float32
     * copy of them; what it did not copy or give back is copied now (the table is read-only after). */
    if (!m->fam->deferred_weights && (st = weights_settle(m->weights))) goto fail;
    if ((st = m->fam->build(&m->net, m->weights, &m->cfg, o.compute_type,
                            vmap_path[0] || sl ? MODEL_BUILD_VOCAB_MAP : 0)))
        goto fail;
    if ((st = weights_settle(m->weights))) goto fail;
    m->fam->describe(m->net, &m->info);
    if (!hf && (st = load_vocab_pair(m))) goto fail;
    int nsrc = m->info.source_vocab_size, ntgt = m->info.target_vocab_size;
    if (vocab_size(m->src_vocab) != nsrc || vocab_size(m->tgt_vocab) != ntgt) {
        /* Name the vocabulary file and the embedding tensor (in its weights file) that disagree. */
        int target = vocab_size(m->src_vocab) == nsrc;
        st = tern_error(TERN_ERR_MISMATCH, "%s: %s vocabulary has %d tokens but tensor '%s' in %s has %d rows",
                        target ? m->tgt_vocab_path : m->src_vocab_path, target ? "target" : "source",
                        vocab_size(target ? m->tgt_vocab : m->src_vocab),
                        m->fam->vocab_tensor(m->net, m->weights, target), weights_path(m->weights),
                        target ? ntgt : nsrc);
        goto fail;
    }
    m->src_bos = vocab_lookup(m->src_vocab, m->cfg.bos_token);
    m->src_eos = vocab_lookup(m->src_vocab, m->cfg.eos_token);
    m->src_unk = vocab_lookup(m->src_vocab, m->cfg.unk_token);
    m->tgt_start = vocab_lookup(m->tgt_vocab, m->cfg.decoder_start_token);
    m->tgt_eos = vocab_lookup(m->tgt_vocab, m->cfg.eos_token);
    m->tgt_unk = vocab_lookup(m->tgt_vocab, m->cfg.unk_token);
    if (m->tgt_start < 0 || m->tgt_eos < 0) {
        st = tern_error(TERN_ERR_MISMATCH, "%s: the target vocabulary lacks the decoder start token "
                        "'%s' or the end token '%s'", dir, m->cfg.decoder_start_token, m->cfg.eos_token);
        goto fail;
    }
    if ((m->cfg.add_source_bos && m->src_bos < 0) || (m->cfg.add_source_eos && m->src_eos < 0)) {
        st = tern_error(TERN_ERR_MISMATCH, "%s: the source vocabulary lacks '%s' or '%s'", dir,
                        m->cfg.bos_token, m->cfg.eos_token);
        goto fail;
    }
    int64_t never_unk = 0; /* a converted Marian model: <unk> never output, as Marian */
    if (!hf && weights_get_int(m->weights, transformer_key_name(TKEY_DEC_NEVER_UNK), &never_unk) && never_unk &&
        m->tgt_unk >= 0) {
        m->never_tok = malloc(sizeof(int));
        m->never_off = malloc(2 * sizeof(int));
        if (!m->never_tok || !m->never_off) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        m->never_tok[0] = m->tgt_unk, m->never_off[0] = 0, m->never_off[1] = 1, m->n_never = 1;
        m->never_on_logprobs = 1;
    }
    if (!hf && !m->n_never) { /* generation_config.json's bad_words_ids (a converted or fine-tuned HF model) */
        hf_checkpoint_t *g = calloc(1, sizeof *g);
        if (!g) {
            st = tern_error(TERN_ERR_NOMEM, "out of memory");
            goto fail;
        }
        st = hf_generation_never(g, dir, vocab_size(m->tgt_vocab));
        if (!st && g->n_never) {
            m->never_tok = malloc(sizeof(int) * (size_t)g->never_off[g->n_never]);
            m->never_off = malloc(sizeof(int) * (size_t)(g->n_never + 1));
            if (!m->never_tok || !m->never_off) st = tern_error(TERN_ERR_NOMEM, "out of memory");
            else {
                memcpy(m->never_tok, g->never, sizeof(int) * (size_t)g->never_off[g->n_never]);
                memcpy(m->never_off, g->never_off, sizeof(int) * (size_t)(g->n_never + 1));
                m->n_never = g->n_never;
            }
        }
        free(g);
        if (st) goto fail;
    }
    if ((st = load_spm(m, &o))) goto fail;
    if (vmap_path[0]) {
        int always[3] = {m->tgt_unk, m->tgt_start, m->tgt_eos};
        if ((st = vmap_load(&m->vmap, vmap_path, m->src_vocab, m->tgt_vocab, always, 3))) goto fail;
    }
    if (sl) {
        shortlist_info_t si;
        if ((st = shortlist_load(&m->vmap, &spec, m->src_vocab, m->tgt_vocab, m->src_vocab == m->tgt_vocab, m->tgt_eos,
                                 &si)))
            goto fail;
        TERN_INFO("%s: %s shortlist, first %ld, best %ld: lists for %ld source words, %ld entries", spec.path,
                   si.binary ? "binary" : "text", si.first, si.best, si.sources, si.entries);
    }
    *out = m;
    return TERN_OK;
fail:
    tern_model_free(m);
    return st;
}

tern_search_params_t tern_model_search_params(const tern_model_t *m, const char **source) {
    if (source) *source = m->search_source[0] ? m->search_source : NULL;
    return m->search;
}

/* tern_model_info_t grew in 1.1 (languages): this is the TERN_1.1 version, the default one;
 * src/batch/abi_compat.c has the TERN_1 one, which returns the 1.0.0 layout. */
tern_model_info_t tern_model_info_1_1(const tern_model_t *m);
__asm__(".symver tern_model_info_1_1, tern_model_info@@TERN_1.1");

tern_model_info_t tern_model_info_1_1(const tern_model_t *m) {
    tern_model_info_t i = m->info;
    i.struct_size = sizeof i;
    i.format = m->format;
    i.has_spm = m->n_members ? m->members[0]->src_spm != NULL : m->src_spm != NULL;
    if (!m->n_members) i.num_members = 1;
    const tern_model_t *m0 = m->n_members ? m->members[0] : m;
    i.num_languages = m0->n_langs;
    i.languages = (const char *const *)m0->langs;
    return i;
}

long tern_model_hparam(const tern_model_info_t *info, const char *name, long missing) {
    for (int i = 0; info && name && i < info->num_hparams; i++)
        if (!strcmp(info->hparams[i].name, name)) return info->hparams[i].value;
    return missing;
}

const tern_model_t *tern_model_member(const tern_model_t *m, int i) {
    if (!m || i < 0) return NULL;
    if (!m->n_members) return i == 0 ? m : NULL;
    return i < m->n_members ? m->members[i] : NULL;
}

/* The members' target vocabularies must be identical: names the first differing piece. */
static tern_status_t check_target_vocabs(const tern_model_t *a, const tern_model_t *b) {
    int na = vocab_size(a->tgt_vocab), nb = vocab_size(b->tgt_vocab);
    for (int i = 0; i < na || i < nb; i++) {
        const char *x = i < na ? vocab_token(a->tgt_vocab, i) : NULL, *y = i < nb ? vocab_token(b->tgt_vocab, i) : NULL;
        if (x && y && !strcmp(x, y)) continue;
        return tern_error(TERN_ERR_MISMATCH,
                          "ensemble: target vocabularies differ at piece %d: %s%s%s in %s (%d pieces) but %s%s%s in %s "
                          "(%d pieces); ensemble members need identical target vocabularies", i,
                          x ? "'" : "", x ? x : "none", x ? "'" : "", a->tgt_vocab_path, na,
                          y ? "'" : "", y ? y : "none", y ? "'" : "", b->tgt_vocab_path, nb);
    }
    if (a->tgt_start != b->tgt_start || a->tgt_eos != b->tgt_eos)
        return tern_error(TERN_ERR_MISMATCH, "ensemble: %s and %s use different decoder start or end tokens "
                          "('%s'/'%s' and '%s'/'%s')", a->dir, b->dir, a->cfg.decoder_start_token, a->cfg.eos_token,
                          b->cfg.decoder_start_token, b->cfg.eos_token);
    return TERN_OK;
}

tern_status_t tern_model_load_ensemble(tern_model_t **out, const char *const *dirs, int n, const float *weights,
                                       tern_ensemble_mode_t mode, const tern_model_options_t *options) {
    *out = NULL;
    if (n < 1 || !dirs) return tern_error(TERN_ERR_INVALID_ARG, "an ensemble needs at least one model directory");
    tern_model_t *m = calloc(1, sizeof *m);
    const model_family_t **fams = calloc((size_t)n, sizeof *fams);
    void **nets = calloc((size_t)n, sizeof *nets);
    tern_status_t st = TERN_OK;
    if (!m || !fams || !nets || !(m->members = calloc((size_t)n, sizeof *m->members))) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int k = 0; k < n; k++) {
        if ((st = tern_model_load(&m->members[k], dirs[k], options))) goto fail;
        m->n_members = k + 1;
        if (k > 0 && (st = check_target_vocabs(m->members[0], m->members[k]))) goto fail;
        fams[k] = m->members[k]->fam;
        nets[k] = m->members[k]->net;
    }
    if ((st = ensemble_new(&m->net, fams, nets, weights, n, mode))) goto fail;
    m->fam = &model_family_ensemble;
    m->fam->describe(m->net, &m->info);
    snprintf(m->dir, sizeof m->dir, "%s", dirs[0]);
    strcpy(m->format, "ensemble");
    const tern_model_t *m0 = m->members[0];
    m->cfg = m0->cfg;
    m->src_bos = m->src_eos = m->src_unk = -1;
    m->tgt_start = m0->tgt_start;
    m->tgt_eos = m0->tgt_eos;
    m->tgt_unk = m0->tgt_unk;
    m->vmap = m0->vmap;
    m->never_tok = m0->never_tok, m->never_off = m0->never_off, m->n_never = m0->n_never;
    m->langs = m0->langs, m->n_langs = m0->n_langs, m->tgt_skip = m0->tgt_skip; /* not owned */
    m->search = m0->search;
    memcpy(m->search_source, m0->search_source, sizeof m->search_source);
    free(fams), free(nets);
    *out = m;
    return TERN_OK;
fail:
    free(fams), free(nets);
    tern_model_free(m);
    return st;
}

/* Splits pre-tokenized text on ASCII whitespace into a pieces block like spm_encode's. */
static tern_status_t split_pieces(const char *text, size_t len, char ***pieces, int *n) {
    int count = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
        if (i >= len) break;
        count++;
        while (i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
    }
    char **block = malloc((size_t)(count + 1) * sizeof(char *) + len + 1);
    if (!block) return tern_error(TERN_ERR_NOMEM, "out of memory");
    char *s = (char *)(block + count + 1);
    int k = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
        if (i >= len) break;
        block[k++] = s;
        while (i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) *s++ = text[i++];
        *s++ = 0;
    }
    block[k] = NULL;
    *pieces = block;
    *n = count;
    return TERN_OK;
}

static tern_status_t text_to_ids(const vocab_t *v, const spm_t *sp, int unk, const char *text, size_t len,
                                 int extra, int **ids, int *n) {
    char **pieces = NULL;
    int np = 0;
    tern_status_t st = sp ? spm_encode(sp, text, len, &pieces, &np) : split_pieces(text, len, &pieces, &np);
    if (st) return st;
    int *out = malloc((size_t)(np + extra + 1) * sizeof(int));
    if (!out) {
        free(pieces);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < np; i++) {
        int id = vocab_lookup(v, pieces[i]);
        out[i] = id >= 0 ? id : (unk >= 0 ? unk : 0);
    }
    free(pieces);
    *ids = out;
    *n = np;
    return TERN_OK;
}

/* MarianTokenizer's language code (">>fra<<", its regular expression ">>.+<<"): the span from the
 * first ">>" to the last "<<" after it is cut out of the text before SentencePiece, and when the
 * text starts with it, it is the first token, looked up whole. */
static tern_status_t marian_text_to_ids(const tern_model_t *m, const char *text, size_t len, int **ids, int *n) {
    const char *a = NULL, *b = NULL;
    for (size_t i = 0; i + 1 < len && !a; i++)
        if (text[i] == '>' && text[i + 1] == '>') a = text + i;
    for (size_t i = len; a && i >= 2 && !b; i--)
        if (text[i - 2] == '<' && text[i - 1] == '<' && text + i - 2 > a + 2) b = text + i;
    if (!b) return text_to_ids(m->src_vocab, m->src_spm, m->src_unk, text, len, 2, ids, n);
    char *rest = malloc(len + 1);
    if (!rest) return tern_error(TERN_ERR_NOMEM, "out of memory");
    size_t k = (size_t)(a - text);
    memcpy(rest, text, k);
    memcpy(rest + k, b, len - (size_t)(b - text));
    k += len - (size_t)(b - text);
    tern_status_t st = text_to_ids(m->src_vocab, m->src_spm, m->src_unk, rest, k, 3, ids, n);
    free(rest);
    if (st || a != text) return st;
    int code = vocab_lookup_n(m->src_vocab, a, (size_t)(b - a));
    memmove(*ids + 1, *ids, (size_t)*n * sizeof(int));
    (*ids)[0] = code >= 0 ? code : (m->src_unk >= 0 ? m->src_unk : 0);
    (*n)++;
    return TERN_OK;
}

static tern_status_t encode_source_one(const tern_model_t *m, const char *text, size_t len, int max_len,
                                       int pretok, const char *lang, int **ids, int *n, int *truncated) {
    int *tok, nt;
    *truncated = 0;
    tern_status_t st = m->marian_codes && !pretok && m->src_spm
                           ? marian_text_to_ids(m, text, len, &tok, &nt)
                           : text_to_ids(m->src_vocab, pretok ? NULL : m->src_spm, m->src_unk, text, len, 2, &tok, &nt);
    if (st) return st;
    if (nt == 0) { /* empty input: no tokens at all, even with bos/eos configured */
        *ids = tok;
        *n = 0;
        return TERN_OK;
    }
    int code = lang ? vocab_lookup(m->src_vocab, lang) : -1;
    if (lang && code < 0) {
        free(tok);
        return tern_error(TERN_ERR_INVALID_ARG, "source language '%s': not a token of %s", lang, m->src_vocab_path);
    }
    int extra = (m->cfg.add_source_bos ? 1 : 0) + (m->cfg.add_source_eos ? 1 : 0) + (code >= 0);
    if (code >= 0) { /* text_to_ids left room for 2 more tokens */
        int *t2 = realloc(tok, (size_t)(nt + 3) * sizeof(int));
        if (!t2) {
            free(tok);
            return tern_error(TERN_ERR_NOMEM, "out of memory");
        }
        tok = t2;
    }
    if (max_len > m->info.max_source_length) max_len = m->info.max_source_length;
    if (max_len > 0 && nt + extra > max_len) {
        nt = max_len - extra > 1 ? max_len - extra : 1;
        *truncated = 1;
    }
    if (m->cfg.add_source_bos) {
        memmove(tok + 1, tok, (size_t)nt * sizeof(int));
        tok[0] = m->src_bos;
        nt++;
    }
    if (code >= 0) { /* NllbTokenizer (legacy_behaviour false) and M2M100Tokenizer: [code] tokens </s> */
        memmove(tok + 1, tok, (size_t)nt * sizeof(int));
        tok[0] = code;
        nt++;
    }
    /* a multilingual model's pieces may end with </s> already, as CTranslate2 takes NLLB's tokens */
    int has_eos = m->n_langs > 0 && pretok && nt > 0 && tok[nt - 1] == m->src_eos;
    if (m->cfg.add_source_eos && !has_eos) tok[nt++] = m->src_eos;
    *ids = tok;
    *n = nt;
    return TERN_OK;
}

/* An ensemble's source: each member's ids prefixed by their count (ensemble.h); a member that
 * finds no token in a line others do gets its end token (else unknown token, else id 0). */
static tern_status_t encode_source_ensemble(const tern_model_t *m, const char *text, size_t len, int max_len,
                                            int pretok, const char *lang, int **ids, int *n, int *truncated) {
    int K = m->n_members;
    int **part = calloc((size_t)K, sizeof *part), *plen = calloc((size_t)K, sizeof *plen);
    tern_status_t st = TERN_OK;
    *truncated = 0;
    *ids = NULL;
    *n = 0;
    if (!part || !plen) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int longest = 0, total = 0;
    for (int k = 0; k < K; k++) {
        int tr = 0;
        if ((st = encode_source_one(m->members[k], text, len, max_len, pretok, lang, &part[k], &plen[k], &tr)))
            goto done;
        *truncated |= tr;
        if (plen[k] > longest) longest = plen[k];
    }
    for (int k = 0; k < K; k++) total += 1 + (plen[k] ? plen[k] : 1);
    int *out = malloc((size_t)total * sizeof(int));
    if (!out) {
        st = tern_error(TERN_ERR_NOMEM, "out of memory");
        goto done;
    }
    int w = 0;
    if (longest > 0)
        for (int k = 0; k < K; k++) {
            const tern_model_t *mk = m->members[k];
            if (plen[k] == 0) {
                out[w++] = 1;
                out[w++] = mk->src_eos >= 0 ? mk->src_eos : mk->src_unk >= 0 ? mk->src_unk : 0;
            } else {
                out[w++] = plen[k];
                memcpy(out + w, part[k], (size_t)plen[k] * sizeof(int));
                w += plen[k];
            }
        }
    *ids = out;
    *n = longest;
done:
    for (int k = 0; part && k < K; k++) free(part[k]);
    free(part), free(plen);
    return st;
}

tern_status_t model_encode_source_lang(const tern_model_t *m, const char *text, size_t len, int max_len, int pretok,
                                       const char *lang, int **ids, int *n, int *truncated) {
    if (m->n_members) return encode_source_ensemble(m, text, len, max_len, pretok, lang, ids, n, truncated);
    return encode_source_one(m, text, len, max_len, pretok, lang, ids, n, truncated);
}

tern_status_t model_encode_source_ex(const tern_model_t *m, const char *text, size_t len, int max_len, int pretok,
                                     int **ids, int *n, int *truncated) {
    return model_encode_source_lang(m, text, len, max_len, pretok, NULL, ids, n, truncated);
}

tern_status_t model_encode_source(const tern_model_t *m, const char *text, size_t len, int max_len,
                                  int **ids, int *n, int *truncated) {
    return model_encode_source_ex(m, text, len, max_len, 0, ids, n, truncated);
}

tern_status_t model_encode_target_ex(const tern_model_t *m, const char *text, size_t len, int pretok, int **ids,
                                     int *n) {
    if (m->n_members) m = m->members[0]; /* the members' target vocabularies are identical */
    return text_to_ids(m->tgt_vocab, pretok ? NULL : m->tgt_spm, m->tgt_unk, text, len, 0, ids, n);
}

tern_status_t model_encode_target(const tern_model_t *m, const char *text, size_t len, int **ids, int *n) {
    return model_encode_target_ex(m, text, len, 0, ids, n);
}

tern_status_t model_decode_target(const tern_model_t *m, const int *ids, int n, int keep_unk, char **text) {
    return model_decode_target_ex(m, ids, n, keep_unk, 0, text);
}

tern_status_t model_decode_target_ex(const tern_model_t *m, const int *ids, int n, int keep_unk, int pretok,
                                     char **text) {
    return model_decode_target_repl(m, ids, n, keep_unk, pretok, NULL, text);
}

/* A replacement token (a source piece or word) as a SentencePiece piece to decode: SentencePiece
 * writes a piece it does not know as it is, so its word-boundary marks become spaces here (and
 * at the start of the output, after nothing but word marks, its leading one is dropped, as
 * SentencePiece drops the output's first space). malloc'd. */
static char *repl_surface(const char *r, int first) {
    static const char mark[] = "\xe2\x96\x81"; /* U+2581 */
    size_t l = strlen(r);
    char *o = malloc(l + 1), *w = o;
    if (!o) return NULL;
    for (const char *s = r; *s;) {
        if (strncmp(s, mark, 3) == 0) {
            if (!(first && w == o)) *w++ = ' ';
            s += 3;
        } else {
            *w++ = *s++;
        }
    }
    *w = 0;
    return o;
}

tern_status_t model_decode_target_repl(const tern_model_t *m, const int *ids, int n, int keep_unk, int pretok,
                                       const char *const *repl, char **text) {
    if (m->n_members) m = m->members[0];
    char **own = NULL; /* replacements rewritten for SentencePiece */
    if (repl && m->tgt_spm && !pretok && !(own = calloc((size_t)(n ? n : 1), sizeof *own)))
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    const char **pieces = malloc((size_t)(n + 1) * sizeof(char *));
    if (!pieces) {
        free(own);
        return tern_error(TERN_ERR_NOMEM, "out of memory");
    }
    int k = 0, only_marks = 1; /* only_marks: the pieces so far decode to nothing (word marks alone) */
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        if (repl && repl[i]) {
            const char *p = repl[i];
            if (own && !(p = own[i] = repl_surface(repl[i], only_marks))) p = "";
            only_marks = only_marks && !*p;
            pieces[k++] = p;
            total += strlen(p) + 1;
            continue;
        }
        if (!keep_unk && ids[i] == m->tgt_unk && m->tgt_spm && !pretok) continue;
        if (m->tgt_skip && m->tgt_spm && !pretok && ids[i] >= 0 && ids[i] < vocab_size(m->tgt_vocab) && m->tgt_skip[ids[i]])
            continue;
        const char *p = vocab_token(m->tgt_vocab, ids[i]);
        if (!p) p = "";
        for (const char *q = p; only_marks && *q; q += 3)
            if (strncmp(q, "\xe2\x96\x81", 3) != 0) only_marks = 0;
        pieces[k++] = p;
        total += strlen(p) + 1;
    }
    tern_status_t st = TERN_OK;
    if (m->tgt_spm && !pretok) {
        st = spm_decode(m->tgt_spm, pieces, k, text);
    } else {
        char *s = malloc(total);
        if (!s) st = tern_error(TERN_ERR_NOMEM, "out of memory");
        else {
            char *w = s;
            for (int i = 0; i < k; i++) {
                size_t l = strlen(pieces[i]);
                if (i) *w++ = ' ';
                memcpy(w, pieces[i], l);
                w += l;
            }
            *w = 0;
            *text = s;
        }
    }
    free(pieces);
    for (int i = 0; own && i < n; i++) free(own[i]);
    free(own);
    return st;
}
