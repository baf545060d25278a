/*
 * _tern.c — the CPython extension under the `tern` package: a thin layer over libtern's public C
 * API (include/tern.h, linked as libtern.so). The Python side (tern/__init__.py) shapes the
 * arguments and results as ctranslate2.Translator does; this file converts them, releases the GIL
 * around every call into libtern, and keeps a pool of inter_threads translators per model so that
 * several Python threads translate at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

static PyObject *TernError;     /* tern.TernError (RuntimeError) */
static PyObject *TernCancelled; /* tern.CancelledError (TernError) */

/* Raises the Python exception for a Tern status (the message from tern_last_error()). */
static PyObject *raise_status(tern_status_t st, const char *msg) {
    PyObject *type = TernError;
    if (st == TERN_ERR_INVALID_ARG) type = PyExc_ValueError;
    else if (st == TERN_ERR_IO) type = PyExc_OSError;
    else if (st == TERN_ERR_NOMEM) type = PyExc_MemoryError;
    else if (st == TERN_ERR_CANCELLED) type = TernCancelled;
    PyErr_Format(type, "%s: %s", tern_status_string(st), msg && *msg ? msg : "(no message)");
    return NULL;
}

/* ------------------------------------------------------------------ string lists */

typedef struct {
    const char **s; /* n UTF-8 strings owned by the objects in `keep` */
    PyObject *keep; /* a list holding the bytes/str objects */
    Py_ssize_t n;
} strlist_t;

static void strlist_free(strlist_t *l) {
    free(l->s);
    Py_XDECREF(l->keep);
    memset(l, 0, sizeof *l);
}

/* A sequence of str (or None, as "") into C strings; 0 on success, -1 with an exception. */
static int strlist_from(strlist_t *l, PyObject *seq, const char *what) {
    memset(l, 0, sizeof *l);
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    l->s = calloc((size_t)(n ? n : 1), sizeof(char *));
    l->keep = fast;
    l->n = n;
    if (!l->s) {
        PyErr_NoMemory();
        strlist_free(l);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (o == Py_None) {
            l->s[i] = NULL;
            continue;
        }
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s: item %zd is not a str", what, i);
            strlist_free(l);
            return -1;
        }
        const char *u = PyUnicode_AsUTF8(o); /* cached in the str object, which `fast` holds */
        if (!u) {
            strlist_free(l);
            return -1;
        }
        l->s[i] = u;
    }
    return 0;
}

/* ------------------------------------------------------------------ the translator object */

typedef struct {
    PyObject_HEAD
    tern_model_t *model;
    tern_translator_options_t opt;
    tern_translator_t **tr;     /* inter_threads translators */
    int *busy;
    int ntr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ok;
} TranslatorObject;

/* Takes a free translator (waits without the GIL for one). */
static int pool_take(TranslatorObject *self) {
    pthread_mutex_lock(&self->mu);
    for (;;) {
        for (int i = 0; i < self->ntr; i++)
            if (!self->busy[i]) {
                self->busy[i] = 1;
                pthread_mutex_unlock(&self->mu);
                return i;
            }
        pthread_cond_wait(&self->cv, &self->mu);
    }
}

static void pool_give(TranslatorObject *self, int i) {
    pthread_mutex_lock(&self->mu);
    self->busy[i] = 0;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

static void Translator_dealloc(TranslatorObject *self) {
    for (int i = 0; self->tr && i < self->ntr; i++) tern_translator_free(self->tr[i]);
    free(self->tr);
    free(self->busy);
    if (self->model) tern_model_free(self->model);
    if (self->sync_ok) {
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Translator_init(TranslatorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model_dir", "compute_type", "inter_threads", "intra_threads", "max_batch_tokens",
                             "use_spm", "use_vmap", "shortlist", NULL};
    const char *dir, *ct = "default", *shortlist = NULL;
    int inter = 1, intra = 0, max_tokens = 4096, use_spm = -1, use_vmap = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|siiiipz", kwlist, &dir, &ct, &inter, &intra, &max_tokens, &use_spm,
                                     &use_vmap, &shortlist))
        return -1;
    if (self->model) {
        PyErr_SetString(PyExc_RuntimeError, "Translator already initialized");
        return -1;
    }
    tern_model_options_t mo = tern_model_default_options();
    if (!strcmp(ct, "default") || !strcmp(ct, "auto")) mo.compute_type = TERN_COMPUTE_AUTO;
    else if (!strcmp(ct, "float32")) mo.compute_type = TERN_COMPUTE_FLOAT32;
    else if (!strcmp(ct, "int8") || !strcmp(ct, "int8_float32")) mo.compute_type = TERN_COMPUTE_INT8;
    else {
        PyErr_Format(PyExc_ValueError, "compute_type '%s' is not supported (default, auto, float32, int8, int8_float32)", ct);
        return -1;
    }
    mo.use_spm = use_spm;
    mo.use_vmap = use_vmap; /* CTranslate2's use_vmap: the model directory's vmap.txt */
    mo.shortlist = shortlist; /* a Marian lexical shortlist "FILE[,first,best[,threshold]]" (or "none") */
    if (inter < 1 || intra < 0 || max_tokens < 1) {
        PyErr_SetString(PyExc_ValueError, "inter_threads must be >= 1, intra_threads >= 0, max_batch_tokens >= 1");
        return -1;
    }
    tern_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_model_load(&self->model, dir, &mo);
    Py_END_ALLOW_THREADS
    if (st) return raise_status(st, tern_last_error()), -1;
    self->opt = tern_translator_default_options();
    self->opt.workers = inter;
    self->opt.threads_per_worker = intra;
    self->opt.max_batch_tokens = max_tokens;
    self->tr = calloc((size_t)inter, sizeof *self->tr);
    self->busy = calloc((size_t)inter, sizeof *self->busy);
    if (!self->tr || !self->busy) return PyErr_NoMemory(), -1;
    self->ntr = inter;
    for (int i = 0; i < inter; i++)
        if ((st = tern_translator_create(&self->tr[i], self->model, &self->opt))) return raise_status(st, tern_last_error()), -1;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    self->sync_ok = 1;
    return 0;
}

static int check_ready(TranslatorObject *self) {
    if (!self->model) {
        PyErr_SetString(PyExc_RuntimeError, "Translator not initialized");
        return -1;
    }
    return 0;
}

/* The token callback: calls the Python function with the GIL held. */
typedef struct {
    PyObject *fn;
    PyObject *error; /* the first exception the callback raised (a new reference) */
} pycb_t;

static int token_trampoline(const tern_token_event_t *ev, void *ud) {
    pycb_t *cb = ud;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    PyObject *ids = PyList_New(ev->num_tokens);
    for (int k = 0; ids && k < ev->num_tokens; k++) PyList_SET_ITEM(ids, k, PyLong_FromLong(ev->token_ids[k]));
    PyObject *r = ids ? PyObject_CallFunction(cb->fn, "iiNsOi", ev->index, ev->step, ids, ev->text,
                                              ev->delta ? PyUnicode_FromString(ev->delta) : Py_NewRef(Py_None),
                                              ev->is_last)
                      : NULL;
    if (!r) {
        if (!cb->error) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_NormalizeException(&t, &v, &tb);
            if (tb) PyException_SetTraceback(v, tb);
            cb->error = v;
            Py_XDECREF(t);
            Py_XDECREF(tb);
        } else {
            PyErr_Clear();
        }
        stop = 1;
    } else {
        stop = PyObject_IsTrue(r) == 1;
        Py_DECREF(r);
    }
    PyGILState_Release(g);
    return stop;
}

/* The search parameters of translate_batch and translate_file (CTranslate2's argument names). */
static tern_search_params_t search_params(int beam, int nhyp, float lp, float cp, int maxlen, int minlen) {
    tern_search_params_t sp = tern_search_default_params();
    sp.beam_size = beam;
    sp.num_hypotheses = nhyp;
    sp.length_penalty = lp;
    sp.coverage_penalty = cp;
    sp.max_decoding_length = maxlen;
    sp.min_length = minlen;
    return sp;
}

/* One source's attention as CTranslate2 returns it: per hypothesis, per output token, the list of
 * weights over the source tokens. NULL with an exception set. */
static PyObject *attention_list(const tern_attention_t *a) {
    PyObject *hyps = PyList_New(a->num_hypotheses);
    for (int k = 0; hyps && k < a->num_hypotheses; k++) {
        int T = a->target_lengths[k], S = a->source_length;
        PyObject *rows = PyList_New(T);
        for (int t = 0; rows && t < T; t++) {
            PyObject *row = PyList_New(S);
            for (int j = 0; row && j < S; j++) {
                PyObject *f = PyFloat_FromDouble(a->weights[k][(size_t)t * S + j]);
                if (!f) {
                    Py_CLEAR(row);
                    break;
                }
                PyList_SET_ITEM(row, j, f);
            }
            if (!row) {
                Py_CLEAR(rows);
                break;
            }
            PyList_SET_ITEM(rows, t, row);
        }
        if (!rows) {
            Py_CLEAR(hyps);
            break;
        }
        PyList_SET_ITEM(hyps, k, rows);
    }
    return hyps;
}

/* _translate(sources, target_prefix, pretokenized, beam_size, num_hypotheses, length_penalty,
 *            coverage_penalty, max_decoding_length, min_decoding_length, return_scores,
 *            max_batch_size, max_batch_tokens, max_input_length, callback)
 * -> list of (hypotheses: list[str], scores: list[float] | None, attention: list | None) */
static PyObject *Translator_translate(TranslatorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"sources", "target_prefix", "pretokenized", "beam_size", "num_hypotheses",
                             "length_penalty", "coverage_penalty", "max_decoding_length", "min_decoding_length",
                             "return_scores", "max_batch_size", "max_batch_tokens", "max_input_length",
                             "callback", "sampling_topk", "sampling_topp", "sampling_temperature", "num_samples",
                             "seed", "repetition_penalty", "no_repeat_ngram_size", "suppress", "index_offset",
                             "source_lang", "target_lang", "return_attention", "replace_unknowns", "patience", "prefix_bias_beta",
                             "no_sort", "beams_apart", NULL};
    PyObject *sources, *prefixes = Py_None, *callback = Py_None, *suppress = Py_None;
    long long index_offset = 0;
    const char *src_lang = NULL, *tgt_lang = NULL;
    int pretok = 0, beam = 2, nhyp = 1, maxlen = 256, minlen = 1, rs = 0, mbs = 0, mbt = 0, mil = 1024;
    int ra = 0, ru = 0, ns = 0, ba = 0;
    float patience = 1.0f, pbb = 0.0f;
    float lp = 1.0f, cp = 0.0f;
    tern_search_params_t d = tern_search_default_params(); /* sampling and repetition: its defaults */
    unsigned long long seed = d.seed;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OpiiffiipiiiOiffiKfiOLzzppffpp", kwlist, &sources, &prefixes, &pretok,
                                     &beam, &nhyp, &lp, &cp, &maxlen, &minlen, &rs, &mbs, &mbt, &mil, &callback,
                                     &d.sampling_topk, &d.sampling_topp, &d.sampling_temperature, &d.num_samples,
                                     &seed, &d.repetition_penalty, &d.no_repeat_ngram_size, &suppress, &index_offset,
                                     &src_lang, &tgt_lang, &ra, &ru, &patience, &pbb, &ns, &ba))
        return NULL;
    if (index_offset < 0) {
        PyErr_SetString(PyExc_ValueError, "index_offset must be >= 0");
        return NULL;
    }
    if (check_ready(self)) return NULL;
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable");
        return NULL;
    }
    if (mil < 1) {
        PyErr_SetString(PyExc_ValueError, "max_input_length must be >= 1");
        return NULL;
    }
    strlist_t src, pre = {0}, sup = {0};
    if (suppress != Py_None && strlist_from(&sup, suppress, "suppress must be a sequence of str")) return NULL;
    if (strlist_from(&src, sources, "sources must be a sequence")) {
        strlist_free(&sup);
        return NULL;
    }
    if (prefixes != Py_None) {
        if (strlist_from(&pre, prefixes, "target_prefix must be a sequence")) {
            strlist_free(&src), strlist_free(&sup);
            return NULL;
        }
        if (pre.n != src.n) {
            PyErr_Format(PyExc_ValueError, "target_prefix has %zd entries for %zd sources", pre.n, src.n);
            strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
            return NULL;
        }
    }
    if (src.n > 0x7fffffff || sup.n > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "too many sources or suppressed sequences");
        strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
        return NULL;
    }
    int n = (int)src.n;
    /* suppressed sequences (CTranslate2's suppress_sequences and disable_unk): pieces or piece
     * sequences, read as the sources are (pretokenized or through SentencePiece) */
    tern_text_t *supt = sup.n ? calloc((size_t)sup.n, sizeof *supt) : NULL;
    /* the sampling index of each source: its place in the caller's whole input, so that a call
     * cut into parts (inter_threads) draws what one call would */
    long *sidx = index_offset ? calloc((size_t)(n ? n : 1), sizeof *sidx) : NULL;
    if ((sup.n && !supt) || (index_offset && !sidx)) {
        free(supt), free(sidx);
        strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < sup.n; k++) supt[k].text = sup.s[k] ? sup.s[k] : "", supt[k].origin = "suppress_sequences";
    for (int i = 0; sidx && i < n; i++) sidx[i] = (long)index_offset + i;
    tern_search_params_t sp = search_params(beam, nhyp, lp, cp, maxlen, minlen);
    sp.return_scores = rs;
    sp.sampling_topk = d.sampling_topk, sp.sampling_topp = d.sampling_topp;
    sp.sampling_temperature = d.sampling_temperature, sp.num_samples = d.num_samples, sp.seed = (uint64_t)seed;
    sp.repetition_penalty = d.repetition_penalty, sp.no_repeat_ngram_size = d.no_repeat_ngram_size;
    sp.patience = patience, sp.prefix_bias_beta = pbb;
    tern_request_t call = tern_request_default();
    call.sources = src.s;
    call.num_sources = n;
    call.params = &sp;
    call.pretokenized = pretok;
    call.max_batch_size = mbs;
    call.max_batch_tokens = mbt;
    call.max_input_length = mil;
    call.suppress = supt;
    call.num_suppress = (int)sup.n;
    call.source_index = sidx;
    call.source_lang = src_lang;
    call.target_lang = tgt_lang;
    call.replace_unknowns = ru;
    call.no_sort = ns;
    call.beams_apart = ba;
    pycb_t cb = {callback, NULL};
    if (callback != Py_None) {
        call.on_token = token_trampoline;
        call.on_token_data = &cb;
    }
    /* target prefixes: one extras entry per source (each with its prefix, "" for none) */
    tern_source_extras_t *ex = pre.s ? calloc((size_t)(n ? n : 1), sizeof *ex) : NULL;
    const tern_source_extras_t **exp = pre.s ? calloc((size_t)(n ? n : 1), sizeof *exp) : NULL;
    if (pre.s && (!ex || !exp)) {
        free(ex), free(exp), free(supt), free(sidx);
        strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
        return PyErr_NoMemory();
    }
    for (int i = 0; pre.s && i < n; i++) {
        ex[i].struct_size = sizeof ex[i];
        ex[i].target_prefix = pre.s[i] ? pre.s[i] : "";
        exp[i] = &ex[i];
    }
    call.extras = exp;
    tern_result_t *res = calloc((size_t)(n ? n : 1), sizeof *res);
    tern_attention_t *att = ra ? calloc((size_t)(n ? n : 1), sizeof *att) : NULL;
    call.attention = att;
    if (!res || (ra && !att)) {
        free(res), free(att);
        free(ex), free(exp), free(supt), free(sidx);
        strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
        return PyErr_NoMemory();
    }
    tern_status_t st;
    char err[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    int w = pool_take(self);
    tern_translator_t *tr = self->tr[w];
    st = tern_translate(tr, &call, res);
    if (st) snprintf(err, sizeof err, "%s", tern_last_error());
    pool_give(self, w);
    Py_END_ALLOW_THREADS
    free(ex), free(exp), free(supt), free(sidx);
    strlist_free(&src), strlist_free(&pre), strlist_free(&sup);
    if (cb.error) { /* the callback raised: that exception, not the cancellation it caused */
        for (int i = 0; i < n; i++) tern_result_free(&res[i]);
        for (int i = 0; att && i < n; i++) tern_attention_free(&att[i]);
        free(res), free(att);
        PyErr_SetObject((PyObject *)Py_TYPE(cb.error), cb.error);
        Py_DECREF(cb.error);
        return NULL;
    }
    if (st) {
        free(res), free(att);
        return raise_status(st, err);
    }
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++) {
        PyObject *hyps = PyList_New(res[i].num_hypotheses);
        PyObject *scores = res[i].scores ? PyList_New(res[i].num_hypotheses) : Py_NewRef(Py_None);
        if (!hyps || !scores) {
            Py_XDECREF(hyps), Py_XDECREF(scores);
            Py_CLEAR(out);
            break;
        }
        for (int k = 0; k < res[i].num_hypotheses; k++) {
            PyList_SET_ITEM(hyps, k, PyUnicode_DecodeUTF8(res[i].hypotheses[k], (Py_ssize_t)strlen(res[i].hypotheses[k]),
                                                          "replace"));
            if (res[i].scores) PyList_SET_ITEM(scores, k, PyFloat_FromDouble(res[i].scores[k]));
        }
        PyObject *attn = att ? attention_list(&att[i]) : Py_NewRef(Py_None);
        if (!attn) {
            Py_DECREF(hyps), Py_DECREF(scores);
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, PyTuple_Pack(3, hyps, scores, attn));
        Py_DECREF(hyps), Py_DECREF(scores), Py_DECREF(attn);
    }
    for (int i = 0; i < n; i++) tern_result_free(&res[i]);
    for (int i = 0; att && i < n; i++) tern_attention_free(&att[i]);
    free(res), free(att);
    return out;
}

/* _score(sources, targets, pretokenized, max_batch_size, max_batch_tokens, max_input_length)
 * -> list[list[float]] (per target token, EOS last; batch settings and input cap <= 0: the translator's) */
static PyObject *Translator_score(TranslatorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"sources", "targets", "pretokenized", "max_batch_size", "max_batch_tokens",
                             "max_input_length", NULL};
    PyObject *sources, *targets;
    int pretok = 0, mbs = 0, mbt = 0, mil = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|piii", kwlist, &sources, &targets, &pretok, &mbs, &mbt, &mil))
        return NULL;
    if (check_ready(self)) return NULL;
    strlist_t src, tgt;
    if (strlist_from(&src, sources, "sources must be a sequence")) return NULL;
    if (strlist_from(&tgt, targets, "targets must be a sequence")) {
        strlist_free(&src);
        return NULL;
    }
    if (src.n != tgt.n || src.n > 0x7fffffff) {
        PyErr_Format(PyExc_ValueError, "%zd sources for %zd targets", src.n, tgt.n);
        strlist_free(&src), strlist_free(&tgt);
        return NULL;
    }
    int n = (int)src.n;
    float **lp = calloc((size_t)(n ? n : 1), sizeof *lp);
    int *cnt = calloc((size_t)(n ? n : 1), sizeof *cnt);
    if (!lp || !cnt) {
        free(lp), free(cnt);
        strlist_free(&src), strlist_free(&tgt);
        return PyErr_NoMemory();
    }
    tern_request_t call = tern_request_default();
    call.sources = src.s;
    call.targets = tgt.s;
    call.num_sources = n;
    call.pretokenized = pretok;
    call.max_batch_size = mbs;    /* <= 0: the translator's */
    call.max_batch_tokens = mbt;
    call.max_input_length = mil;
    tern_status_t st;
    char err[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    int w = pool_take(self);
    st = tern_score(self->tr[w], &call, lp, cnt);
    if (st) snprintf(err, sizeof err, "%s", tern_last_error());
    pool_give(self, w);
    Py_END_ALLOW_THREADS
    strlist_free(&src), strlist_free(&tgt);
    PyObject *out = NULL;
    if (st) raise_status(st, err);
    else if ((out = PyList_New(n)))
        for (int i = 0; i < n; i++) {
            PyObject *l = PyList_New(cnt[i]);
            for (int k = 0; l && k < cnt[i]; k++) PyList_SET_ITEM(l, k, PyFloat_FromDouble(lp[i][k]));
            if (!l) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, l);
        }
    tern_score_results_free(lp, n);
    free(lp), free(cnt);
    return out;
}

/* translate_file's stream: lines in from a FILE, results out as lines ("i ||| hypothesis ||| score"
 * for n-best lists or with_scores, as the CLI writes them), progress kept for the return value. */
typedef struct {
    FILE *in, *out;
    char *line;
    size_t cap;
    int nh, with_scores, write_failed;
    long sentences, tokens;
    double seconds;
} file_io_t;

static int file_read(long line, const char **text, size_t *len, const tern_source_extras_t **ex, void *ud) {
    file_io_t *io = ud;
    ssize_t r = getline(&io->line, &io->cap, io->in);
    if (r < 0) return ferror(io->in) ? -1 : 0;
    *text = io->line;
    *len = (size_t)r;
    *ex = NULL;
    return 1;
}

static int file_write(long line, const tern_result_t *r, void *ud) {
    file_io_t *io = ud;
    for (int k = 0; k < io->nh; k++) {
        const char *text = k < r->num_hypotheses ? r->hypotheses[k] : "";
        float score = k < r->num_hypotheses && r->scores ? r->scores[k] : 0.0f;
        int ok = io->nh == 1 && !io->with_scores ? fprintf(io->out, "%s\n", text) >= 0
                                                 : fprintf(io->out, "%ld ||| %s ||| %.6f\n", line, text, score) >= 0;
        if (!ok) return io->write_failed = 1;
    }
    return 0;
}

static void on_progress(long sentences, long tokens, double seconds, void *ud) {
    file_io_t *p = ud;
    p->sentences = sentences;
    p->tokens = tokens;
    p->seconds = seconds;
}

/* _translate_file(input_path, output_path, beam_size, num_hypotheses, length_penalty,
 *                 coverage_penalty, max_decoding_length, min_decoding_length, with_scores,
 *                 max_batch_size, max_batch_tokens, max_input_length, no_sort) -> (sentences, tokens, seconds) */
static PyObject *Translator_translate_file(TranslatorObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"input_path", "output_path", "beam_size", "num_hypotheses", "length_penalty",
                             "coverage_penalty", "max_decoding_length", "min_decoding_length", "with_scores",
                             "max_batch_size", "max_batch_tokens", "max_input_length", "no_sort", NULL};
    const char *in_path, *out_path;
    int beam = 2, nhyp = 1, maxlen = 256, minlen = 1, ws = 0, mbs = 0, mbt = 0, mil = 1024, ns = 0;
    float lp = 1.0f, cp = 0.0f;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|iiffiipiiip", kwlist, &in_path, &out_path, &beam, &nhyp, &lp, &cp,
                                     &maxlen, &minlen, &ws, &mbs, &mbt, &mil, &ns))
        return NULL;
    if (check_ready(self)) return NULL;
    tern_search_params_t sp = search_params(beam, nhyp, lp, cp, maxlen, minlen);
    /* scores reach the file only in n-best lists or with with_scores: otherwise greedy search
     * needs no log-softmax */
    sp.return_scores = nhyp > 1 || ws;
    tern_status_t st = tern_search_params_check(&sp);
    if (st) return raise_status(st, tern_last_error());
    tern_translator_options_t o = self->opt;
    o.max_input_length = mil;
    if (mbs > 0) o.max_batch_size = mbs;
    if (mbt > 0) o.max_batch_tokens = mbt;
    FILE *in = fopen(in_path, "rb");
    if (!in) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, in_path);
    FILE *out = fopen(out_path, "wb");
    if (!out) {
        fclose(in);
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, out_path);
    }
    file_io_t io = {in, out, NULL, 0, nhyp, ws, 0, 0, 0, 0};
    tern_request_t req = tern_request_default();
    req.params = &sp;
    req.no_sort = ns;
    req.read_source = file_read;
    req.on_line = file_write;
    req.progress = on_progress;
    req.stream_data = &io;
    char err[1024] = "";
    int close_err = 0;
    Py_BEGIN_ALLOW_THREADS
    st = tern_translate_stream(self->model, &o, &req);
    if (st) snprintf(err, sizeof err, "%s", io.write_failed ? "cannot write the output" : tern_last_error());
    fclose(in);
    close_err = fclose(out) != 0;
    Py_END_ALLOW_THREADS
    free(io.line);
    if (st) return raise_status(io.write_failed ? TERN_ERR_IO : st, err);
    if (close_err) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, out_path);
    return Py_BuildValue("(lld)", io.sentences, io.tokens, io.seconds);
}

static PyObject *Translator_info(TranslatorObject *self, PyObject *unused) {
    if (check_ready(self)) return NULL;
    tern_model_info_t mi = tern_model_info(self->model);
    const char *src;
    tern_search_params_t sp = tern_model_search_params(self->model, &src);
    PyObject *dd = Py_BuildValue("{s:i,s:i,s:d,s:d,s:i,s:i,s:z}", "beam_size", sp.beam_size, "num_hypotheses",
                                 sp.num_hypotheses, "length_penalty", (double)sp.length_penalty, "coverage_penalty",
                                 (double)sp.coverage_penalty, "max_decoding_length", sp.max_decoding_length,
                                 "min_decoding_length", sp.min_length, "source", src);
    if (!dd) return NULL;
    PyObject *langs = PyList_New(mi.num_languages); /* a multilingual model's codes (empty: none) */
    for (int i = 0; langs && i < mi.num_languages; i++) {
        PyObject *s = PyUnicode_FromString(mi.languages[i]);
        if (!s) {
            Py_CLEAR(langs);
            break;
        }
        PyList_SET_ITEM(langs, i, s);
    }
    if (!langs) {
        Py_DECREF(dd);
        return NULL;
    }
    return Py_BuildValue("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:n,s:i,s:N,s:N}", "family", mi.family, "format", mi.format,
                         "source_vocab_size", mi.source_vocab_size, "target_vocab_size", mi.target_vocab_size,
                         "int8", mi.int8, "has_spm", mi.has_spm, "max_target_length", mi.max_target_length,
                         "weight_bytes", (Py_ssize_t)mi.weight_bytes, "inter_threads", self->ntr,
                         "decoding_defaults", dd, "languages", langs);
}

static PyMethodDef Translator_methods[] = {
    {"_translate", (PyCFunction)(void (*)(void))Translator_translate, METH_VARARGS | METH_KEYWORDS,
     "Translates a list of strings (the GIL is released). See tern.Translator.translate_batch."},
    {"_score", (PyCFunction)(void (*)(void))Translator_score, METH_VARARGS | METH_KEYWORDS,
     "Force-decodes targets given sources: per-token log-probabilities (EOS last)."},
    {"_translate_file", (PyCFunction)(void (*)(void))Translator_translate_file, METH_VARARGS | METH_KEYWORDS,
     "Translates a text file line by line (tern_translate_stream, as the CLI)."},
    {"_info", (PyCFunction)Translator_info, METH_NOARGS, "Facts about the loaded model."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject TranslatorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._tern._Translator",
    .tp_basicsize = sizeof(TranslatorObject),
    .tp_dealloc = (destructor)Translator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A loaded model and a pool of translators (the C layer of tern.Translator).",
    .tp_methods = Translator_methods,
    .tp_init = (initproc)Translator_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ scores */

/* refs: a sequence of reference streams, each a sequence of n str. */
static int refs_from(strlist_t **out, int *R, PyObject *refs, Py_ssize_t n) {
    PyObject *fast = PySequence_Fast(refs, "references must be a sequence of reference streams");
    if (!fast) return -1;
    Py_ssize_t r = PySequence_Fast_GET_SIZE(fast);
    if (r < 1 || r > 1000) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "references: 1..1000 reference streams");
        return -1;
    }
    strlist_t *l = calloc((size_t)r, sizeof *l);
    if (!l) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < r; k++) {
        if (strlist_from(&l[k], PySequence_Fast_GET_ITEM(fast, k), "a reference stream must be a sequence") ||
            l[k].n != n) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "reference stream %zd has %zd sentences for %zd hypotheses", k, l[k].n, n);
            for (Py_ssize_t j = 0; j <= k; j++) strlist_free(&l[j]);
            free(l);
            Py_DECREF(fast);
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (!l[k].s[i]) {
                PyErr_SetString(PyExc_TypeError, "references must be str");
                for (Py_ssize_t j = 0; j <= k; j++) strlist_free(&l[j]);
                free(l);
                Py_DECREF(fast);
                return -1;
            }
    }
    Py_DECREF(fast);
    *out = l;
    *R = (int)r;
    return 0;
}

/* The hypotheses (str only) and reference streams of tern.score's functions; -1 with a Python
 * error set. */
static int score_inputs(strlist_t *hyps, strlist_t **refs, int *R, PyObject *hyps_o, PyObject *refs_o) {
    if (strlist_from(hyps, hyps_o, "hypotheses must be a sequence")) return -1;
    for (Py_ssize_t i = 0; i < hyps->n; i++)
        if (!hyps->s[i]) {
            strlist_free(hyps);
            PyErr_SetString(PyExc_TypeError, "hypotheses must be str");
            return -1;
        }
    if (refs_from(refs, R, refs_o, hyps->n)) {
        strlist_free(hyps);
        return -1;
    }
    return 0;
}

static PyObject *py_corpus_bleu(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"hypotheses", "references", "tokenize", "lowercase", "smooth_method", "smooth_value",
                             "max_ngram_order", "effective_order", NULL};
    PyObject *hyps_o, *refs_o, *sv = Py_None;
    tern_bleu_options_t o = tern_bleu_default_options();
    int lc = 0, eff = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|spsOip", kwlist, &hyps_o, &refs_o, &o.tokenize, &lc,
                                     &o.smooth_method, &sv, &o.max_ngram_order, &eff))
        return NULL;
    o.lowercase = lc;
    o.effective_order = eff;
    if (sv != Py_None && (o.smooth_value = PyFloat_AsDouble(sv)) == -1.0 && PyErr_Occurred()) return NULL;
    strlist_t hyps, *refs = NULL;
    int R = 0;
    if (score_inputs(&hyps, &refs, &R, hyps_o, refs_o)) return NULL;
    const char **rp[1000];
    for (int r = 0; r < R; r++) rp[r] = refs[r].s;
    tern_bleu_score_t b;
    tern_status_t st;
    char err[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    st = tern_corpus_bleu(&b, hyps.s, (const char *const *const *)rp, (size_t)hyps.n, R, &o);
    if (st) snprintf(err, sizeof err, "%s", tern_last_error());
    Py_END_ALLOW_THREADS
    for (int r = 0; r < R; r++) strlist_free(&refs[r]);
    free(refs);
    strlist_free(&hyps);
    if (st) return raise_status(st, err);
    PyObject *prec = PyList_New(o.max_ngram_order);
    for (int k = 0; prec && k < o.max_ngram_order; k++) PyList_SET_ITEM(prec, k, PyFloat_FromDouble(b.precisions[k]));
    return Py_BuildValue("(dNddLL)", b.score, prec, b.bp, b.ratio, b.sys_len, b.ref_len);
}

static PyObject *py_corpus_chrf(PyObject *mod, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"hypotheses", "references", "char_order", "word_order", "beta", "lowercase",
                             "whitespace", "eps_smoothing", NULL};
    PyObject *hyps_o, *refs_o;
    tern_chrf_options_t o = tern_chrf_default_options();
    int lc = 0, ws = 0, eps = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|iiippp", kwlist, &hyps_o, &refs_o, &o.char_order, &o.word_order,
                                     &o.beta, &lc, &ws, &eps))
        return NULL;
    o.lowercase = lc, o.whitespace = ws, o.eps_smoothing = eps;
    strlist_t hyps, *refs = NULL;
    int R = 0;
    if (score_inputs(&hyps, &refs, &R, hyps_o, refs_o)) return NULL;
    const char **rp[1000];
    for (int r = 0; r < R; r++) rp[r] = refs[r].s;
    double score = 0;
    tern_status_t st;
    char err[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    st = tern_corpus_chrf(&score, hyps.s, (const char *const *const *)rp, (size_t)hyps.n, R, &o);
    if (st) snprintf(err, sizeof err, "%s", tern_last_error());
    Py_END_ALLOW_THREADS
    for (int r = 0; r < R; r++) strlist_free(&refs[r]);
    free(refs);
    strlist_free(&hyps);
    if (st) return raise_status(st, err);
    return PyFloat_FromDouble(score);
}

static PyObject *py_version(PyObject *mod, PyObject *unused) { return PyUnicode_FromString(tern_version()); }

static PyObject *py_set_log_level(PyObject *mod, PyObject *arg) {
    long l = PyLong_AsLong(arg);
    if (l == -1 && PyErr_Occurred()) return NULL;
    if (l < TERN_LOG_QUIET || l > TERN_LOG_DEBUG) {
        PyErr_SetString(PyExc_ValueError, "log level must be 0 (quiet) .. 4 (debug)");
        return NULL;
    }
    tern_set_log_level((tern_log_level_t)l);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"corpus_bleu", (PyCFunction)(void (*)(void))py_corpus_bleu, METH_VARARGS | METH_KEYWORDS,
     "corpus_bleu(hypotheses, references, ...) -> (score, precisions, bp, ratio, sys_len, ref_len)"},
    {"corpus_chrf", (PyCFunction)(void (*)(void))py_corpus_chrf, METH_VARARGS | METH_KEYWORDS,
     "corpus_chrf(hypotheses, references, ...) -> score"},
    {"version", py_version, METH_NOARGS, "libtern's version string."},
    {"set_log_level", py_set_log_level, METH_O, "Sets libtern's log level (0 quiet .. 4 debug)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_tern", "The C layer of the tern package.", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tern(void) {
    if (PyType_Ready(&TranslatorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    TernError = PyErr_NewExceptionWithDoc("tern.TernError", "An error reported by libtern.", PyExc_RuntimeError, NULL);
    TernCancelled = PyErr_NewExceptionWithDoc("tern.CancelledError", "A translation was stopped by its callback.",
                                              TernError, NULL);
    if (!TernError || !TernCancelled || PyModule_AddObject(m, "TernError", Py_NewRef(TernError)) < 0 ||
        PyModule_AddObject(m, "CancelledError", Py_NewRef(TernCancelled)) < 0 ||
        PyModule_AddObject(m, "_Translator", Py_NewRef((PyObject *)&TranslatorType)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
