/* train_data_driver.c — drives the data pipeline and checkpoints from files, for
 * tests/test_train_data.py (and for measuring them).
 *
 *   train_data_driver stats VOCAB_DIR SRC TGT CACHE [MAX_LEN RATIO MAX_TOKENS SEED]
 *       opens (building when needed) the cache of SRC/TGT encoded with the vocabulary directory
 *       VOCAB_DIR (data_vocab_load), plans the batches, prints one JSON object: the data_stats_t
 *       fields, seconds to open, batches per epoch, the largest batch's shape, and the line numbers
 *       of the first epoch's first batch (16 at most).
 *   train_data_driver ckpt VOCAB_DIR SRC TGT CACHE VSRC VTGT VCACHE SAVE_DIR UPDATES
 *       trains a tiny Transformer (C 32, H 4, F 64, 1 + 1 layers, dropout 0) for UPDATES Adam
 *       updates on SRC/TGT, saves checkpoint UPDATES into SAVE_DIR (and one at UPDATES / 2, keeping
 *       the last 2), then prints one JSON line per kept pair of VSRC/VTGT:
 *       {"line": i, "nll": sum of -log p over the target and the end token, "ntokens": n}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/transformer_desc.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/model.h"
#include "train/optim.h"

static int fail(const char *what) {
    fprintf(stderr, "train_data_driver: %s: %s\n", what, tern_last_error());
    return 1;
}

static int cmd_stats(int argc, char **argv) {
    data_vocab_t v;
    if (data_vocab_load(&v, argv[2])) return fail("vocabulary");
    data_options_t o = data_default_options();
    data_batching_t b = data_default_batching();
    if (argc > 6) o.max_src_len = o.max_tgt_len = atoi(argv[6]);
    if (argc > 7) o.max_ratio = (float)atof(argv[7]);
    if (argc > 8) b.max_tokens = atoi(argv[8]);
    if (argc > 9) b.seed = strtoull(argv[9], NULL, 10);
    data_corpus_t *c;
    data_stats_t s;
    double t0 = time_now();
    if (data_corpus_open(&c, argv[5], argv[3], argv[4], &v, &o, &s)) return fail("corpus");
    double t1 = time_now();
    data_iter_t *it;
    if (data_iter_new(&it, c, &b)) return fail("batches");
    double t2 = time_now();
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(it, &mB, &mS, &mT, &ms, &mt);
    const data_batch_t *bt;
    if (data_iter_next(it, &bt) || !bt) return fail("first batch");
    printf("{\"pairs\": %lld, \"kept\": %lld, \"empty\": %lld, \"too_long\": %lld, \"bad_ratio\": %lld, "
           "\"src_tokens\": %lld, \"tgt_tokens\": %lld, \"src_unk\": %lld, \"tgt_unk\": %lld, \"rebuilt\": %d, "
           "\"build_seconds\": %.3f, \"open_seconds\": %.3f, \"plan_seconds\": %.3f, \"cache_bytes\": %llu, "
           "\"batches\": %lld, \"max_B\": %d, \"max_S\": %d, \"max_T\": %d, \"max_src_tokens\": %d, "
           "\"max_tgt_tokens\": %d, \"pad_id\": %d, \"first_batch\": [",
           (long long)s.pairs, (long long)s.kept, (long long)s.empty, (long long)s.too_long,
           (long long)s.bad_ratio, (long long)s.src_tokens, (long long)s.tgt_tokens, (long long)s.src_unk,
           (long long)s.tgt_unk, s.rebuilt, s.build_seconds, t1 - t0, t2 - t1, (unsigned long long)s.cache_bytes,
           (long long)data_iter_batches_per_epoch(it), mB, mS, mT, ms, mt, bt->pad_id);
    for (int r = 0; r < bt->B && r < 16; r++) printf("%s%lld", r ? ", " : "", (long long)bt->ids[r]);
    printf("]}\n");
    data_iter_free(it);
    data_corpus_free(c);
    data_vocab_free(&v);
    return 0;
}

static int cmd_ckpt(char **argv) {
    data_vocab_t v;
    if (data_vocab_load(&v, argv[2])) return fail("vocabulary");
    data_options_t o = data_default_options();
    o.max_src_len = o.max_tgt_len = 64;
    data_corpus_t *c, *vc;
    if (data_corpus_open(&c, argv[5], argv[3], argv[4], &v, &o, NULL)) return fail("corpus");
    if (data_corpus_open(&vc, argv[8], argv[6], argv[7], &v, &o, NULL)) return fail("valid corpus");
    data_batching_t bo = data_default_batching();
    bo.max_tokens = 512;
    data_iter_t *it;
    if (data_iter_new(&it, c, &bo)) return fail("batches");
    tmodel_config_t mc = tmodel_default_config();
    mc.src_vocab = vocab_size(v.src_vocab);
    mc.tgt_vocab = vocab_size(v.tgt_vocab);
    mc.d = 32;
    mc.heads = 4;
    mc.ff = 64;
    mc.enc_layers = mc.dec_layers = 1;
    mc.max_pos = 64;
    mc.share_emb = v.src_vocab == v.tgt_vocab;
    mc.pad_id = v.pad_id;
    mc.dropout = 0;
    tmodel_t m;
    if (tmodel_init(&m, &mc)) return fail("model");
    tmodel_init_params(&m, 1);
    adam_config_t ac = adam_default_config();
    adam_t adam;
    if (adam_init(&adam, m.n_params, &ac)) return fail("adam");
    int mB, mS, mT, ms, mt;
    data_iter_max_shape(it, &mB, &mS, &mT, &ms, &mt);
    tmodel_ws_t *ws, *vws;
    if (tmodel_ws_new(&ws, &m, ms, mt, mS, mT) || tmodel_ws_new(&vws, &m, 64, 64, 64, 64)) return fail("workspace");
    tensor_t *pv = calloc((size_t)m.n_tensors, sizeof *pv), *mv = calloc((size_t)m.n_tensors, sizeof *mv),
             *vv = calloc((size_t)m.n_tensors, sizeof *vv);
    tmodel_tensor_views(&m, m.params, pv);
    tmodel_tensor_views(&m, adam.m, mv);
    tmodel_tensor_views(&m, adam.v, vv);
    int updates = atoi(argv[10]);
    for (int u = 1; u <= updates; u++) {
        const data_batch_t *b;
        if (data_iter_next(it, &b)) return fail("batch");
        if (!b && (data_iter_next(it, &b) || !b)) return fail("batch");
        tmodel_loss_t l;
        tmodel_zero_grad(&m);
        if (tmodel_forward(&m, ws, b->src, b->tgt_in, b->tgt_out, b->B, b->S, b->T, 1, 1, (uint64_t)u, &l) ||
            tmodel_backward(&m, ws, 1.0f / (float)l.ntokens))
            return fail("step");
        adam_step(&adam, m.params, m.grads, 3e-3f);
        if (u == updates / 2 || u == updates) {
            ckpt_group_t g[2] = {{"adam_m/", mv, m.n_tensors}, {"adam_v/", vv, m.n_tensors}};
            ckpt_value_t val = {.name = "adam_t", .type = CKPT_INT, .i = adam.t};
            transformer_spec_t sp = {mc.heads, mc.pre_norm, (int)mc.act, mc.scale_emb};
            transformer_scalars_t spec;
            data_iter_state_t ds = data_iter_state(it);
            ckpt_contents_t cc = {0};
            cc.params = pv;
            cc.n_params = m.n_tensors;
            cc.alias_names = m.alias_name;
            cc.alias_targets = m.alias_target;
            cc.n_aliases = m.n_aliases;
            cc.n_scalars = transformer_desc_scalars(&spec, &sp);
            cc.scalars = spec.t;
            cc.spec_name = TRANSFORMER_SPEC_NAME;
            cc.vocab = &v;
            cc.layer_norm_epsilon = mc.eps;
            cc.groups = g;
            cc.n_groups = 2;
            cc.values = &val;
            cc.n_values = 1;
            cc.data = &ds;
            if (ckpt_save(argv[9], u, &cc, 2, NULL, 0)) return fail("save");
        }
    }
    int src[80], tin[80], tout[80];
    for (int64_t i = 0; i < data_corpus_pairs(vc); i++) {
        if (!data_corpus_kept(vc, i)) continue;
        const int32_t *s, *t;
        int ns, nt, k = 0;
        data_corpus_pair(vc, i, &s, &ns, &t, &nt);
        if (v.cfg.add_source_bos) src[k++] = v.src_bos;
        for (int j = 0; j < ns; j++) src[k++] = s[j];
        if (v.cfg.add_source_eos) src[k++] = v.src_eos;
        tin[0] = v.tgt_start;
        for (int j = 0; j < nt; j++) tin[j + 1] = tout[j] = t[j];
        tout[nt] = v.tgt_eos;
        tmodel_loss_t l;
        if (tmodel_forward(&m, vws, src, tin, tout, 1, k, nt + 1, 0, 0, 0, &l)) return fail("valid forward");
        printf("{\"line\": %lld, \"nll\": %.9g, \"ntokens\": %d}\n", (long long)i, l.nll, l.ntokens);
    }
    free(pv), free(mv), free(vv);
    tmodel_ws_free(ws);
    tmodel_ws_free(vws);
    adam_free(&adam);
    tmodel_free(&m);
    data_iter_free(it);
    data_corpus_free(c);
    data_corpus_free(vc);
    data_vocab_free(&v);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "stats")) return cmd_stats(argc, argv);
    if (argc == 11 && !strcmp(argv[1], "ckpt")) return cmd_ckpt(argv);
    fprintf(stderr, "usage: train_data_driver stats VOCAB_DIR SRC TGT CACHE [MAX_LEN RATIO MAX_TOKENS SEED]\n"
                    "       train_data_driver ckpt VOCAB_DIR SRC TGT CACHE VSRC VTGT VCACHE SAVE_DIR UPDATES\n");
    return 2;
}
