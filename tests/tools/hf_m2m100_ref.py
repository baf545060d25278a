"""transformers' M2M100ForConditionalGeneration (M2M-100 and NLLB) as the reference of Tern's loader
(tests/test_hf_m2m100.py).

    /usr/bin/python3 hf_m2m100_ref.py REQUEST.json OUT.json

REQUEST.json: {"cases": [case, ...]}, each case {"dir": model directory to write, "seed": s, "tokenizer":
"nllb" or "m2m100", "spm": a SentencePiece BPE model, "config": M2M100Config keyword arguments (vocab_size is
set to the tokenizer's length + "spare_rows"), "src_lang", "tgt_lang", "init_std", "qk_std", "cross_std",
"emb_std", "max_len": N, "inputs": [[piece, ...], ...] (source pieces without language code and end token),
"texts": [raw sentences], "calibrate": {"lo", "hi", "iters", "target", "n"}}.

The tokenizer is transformers' own (NllbTokenizer over the SentencePiece model alone; M2M100Tokenizer over
it and a vocab.json of its pieces), saved with save_pretrained into dir; the model is
M2M100ForConditionalGeneration(M2M100Config(**config)) with torch.manual_seed(seed) and random weights
(normal(0, init_std); q and k weights normal(0, qk_std); the cross-attention's v and out normal(0,
cross_std); the shared embedding normal(0, emb_std); layer-norm weights uniform(0.5, 1.5)). M2M-100 has no
logits bias: the length of the outputs is set by moving the end token's embedding row (tied to the output
layer) along the decoder's final layer-norm bias, bisected so that the mean greedy length of the first n
inputs is near target. Saved with save_pretrained(dir, safe_serialization=True).

OUT.json per case: "ids": the tokenizer's source ids of each input ([code] pieces </s>), "greedy" and
"beam" (generate with forced_bos_token_id = the target language's id, num_beams 1 / 4, length_penalty 0,
early_stopping False, max_new_tokens N, bad_words_ids [[pad]], renormalize_logits True: output ids after
the start token and the language code, without the end token), "force" (log_softmax of the logits of the
decoder input [</s>, code, greedy output]: the log-prob of each greedy token and then of the end token),
"text_ids" (the tokenizer's ids of each raw text) and "text" (generate greedy on them, batch_decode with
skip_special_tokens).
"""
import json
import re
import sys

import torch


def tokenizer(req):
    d = req["dir"]
    if req["tokenizer"] == "nllb":
        from transformers import NllbTokenizer
        tok = NllbTokenizer(vocab_file=req["spm"], src_lang=req["src_lang"], tgt_lang=req["tgt_lang"])
    else:
        import sentencepiece as spm
        from transformers import M2M100Tokenizer
        sp = spm.SentencePieceProcessor(model_file=req["spm"])
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(3, sp.get_piece_size()):
            vocab[sp.id_to_piece(i)] = len(vocab)
        with open(f"{d}/../m2m_vocab.json", "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        tok = M2M100Tokenizer(vocab_file=f"{d}/../m2m_vocab.json", spm_file=req["spm"], src_lang=req["src_lang"],
                              tgt_lang=req["tgt_lang"])
    tok.save_pretrained(d)
    return tok


def randomize(model, r):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "shared" in name or "embed_tokens" in name:
                p.normal_(0.0, r["emb_std"])
            elif "layer_norm" in name and name.endswith(".weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.normal_(0.0, r["qk_std"])  # peaked attention: outputs that depend on the source
            elif name.endswith(("encoder_attn.v_proj.weight", "encoder_attn.out_proj.weight")):
                p.normal_(0.0, r["cross_std"])
            else:
                p.normal_(0.0, r["init_std"])


def batch(seqs, pad):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


def generate(model, cfg, seqs, tgt, max_len, beams):
    ids, mask = batch(seqs, cfg.pad_token_id)
    out = model.generate(input_ids=ids, attention_mask=mask, num_beams=beams, do_sample=False,
                         max_new_tokens=max_len, forced_bos_token_id=tgt, bad_words_ids=[[cfg.pad_token_id]],
                         renormalize_logits=True, length_penalty=0.0, early_stopping=False, num_return_sequences=1)
    res = []
    for row in out.tolist():
        assert row[0] == cfg.decoder_start_token_id and row[1] == tgt, row[:2]
        row = row[2:]
        res.append(row[:row.index(cfg.eos_token_id)] if cfg.eos_token_id in row else row)
    return res


def force(model, cfg, seqs, tgt, outs):
    ids, mask = batch(seqs, cfg.pad_token_id)
    T = max(len(t) for t in outs) + 2
    dec = torch.full((len(outs), T), cfg.pad_token_id, dtype=torch.long)
    for i, t in enumerate(outs):
        dec[i, :len(t) + 2] = torch.tensor([cfg.decoder_start_token_id, tgt] + list(t), dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    lp = logits.double().log_softmax(-1)
    res = []
    for i, t in enumerate(outs):
        y = list(t) + [cfg.eos_token_id]
        res.append([float(lp[i, k + 1, y[k]]) for k in range(len(y))])
    return res


def calibrate(model, cfg, req, seqs, tgt):
    """Moves the end token's (tied) embedding row along the decoder's final layer-norm bias."""
    c = req["calibrate"]
    emb = model.model.shared.weight
    base = emb[cfg.eos_token_id].clone()
    beta = model.model.decoder.layer_norm.bias
    direction = beta / beta.norm()
    lo, hi = c["lo"], c["hi"]
    for _ in range(c["iters"]):
        mid = (lo + hi) / 2
        emb[cfg.eos_token_id] = base + mid * direction
        outs = generate(model, cfg, seqs[:c["n"]], tgt, req["max_len"], 1)
        mean = sum(len(h) for h in outs) / len(outs)
        lo, hi = (mid, hi) if mean > c["target"] else (lo, mid)
    emb[cfg.eos_token_id] = base + (lo + hi) / 2 * direction


def one(req):
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    tok = tokenizer(req)
    # M2M100Tokenizer's len() leaves out its language codes and <madeupwordN> rows (M2M-100's embedding has them)
    n = len(tok) if req["tokenizer"] == "nllb" else tok.encoder_size + len(tok.lang_token_to_id) + tok.num_madeup_words
    cfg = M2M100Config(**dict(req["config"], vocab_size=n + req.get("spare_rows", 0)))
    torch.manual_seed(req["seed"])
    model = M2M100ForConditionalGeneration(cfg).eval()
    randomize(model, req)
    tgt = tok.convert_tokens_to_ids(tok.lang_code_to_token[req["tgt_lang"]] if req["tokenizer"] == "m2m100"
                                    else req["tgt_lang"])
    seqs = [tok.convert_tokens_to_ids(s) for s in req["inputs"]]
    src = tok.convert_tokens_to_ids(tok.lang_code_to_token[req["src_lang"]] if req["tokenizer"] == "m2m100"
                                    else req["src_lang"])
    seqs = [[src] + s + [cfg.eos_token_id] for s in seqs]
    out = {"ids": seqs}
    with torch.no_grad():
        calibrate(model, cfg, req, seqs, tgt)
        model.save_pretrained(req["dir"], safe_serialization=True)
        out["greedy"] = generate(model, cfg, seqs, tgt, req["max_len"], 1)
        out["beam"] = generate(model, cfg, seqs, tgt, req["max_len"], 4)
        out["force"] = force(model, cfg, seqs, tgt, out["greedy"])
        if req.get("texts"):
            enc = tok(req["texts"], return_tensors="pt", padding=True)
            out["text_ids"] = [[i for i in row if i != cfg.pad_token_id] for row in enc["input_ids"].tolist()]
            gen = model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=req["max_len"],
                                 forced_bos_token_id=tgt, bad_words_ids=[[cfg.pad_token_id]], renormalize_logits=True)
            out["text"] = tok.batch_decode(gen, skip_special_tokens=True)
            if req["tokenizer"] == "m2m100":
                # M2M100Tokenizer built from scratch (4.40.2) does not list its codes as special tokens, so
                # batch_decode keeps "__fr__" in the text; the Hub's files list them
                # (additional_special_tokens) and it drops them, as NllbTokenizer does: so does Tern
                codes = re.compile("|".join(re.escape(t) for t in tok.lang_token_to_id))
                out["text"] = [codes.sub("", t) for t in out["text"]]
                out["special"] = tok.all_special_tokens + list(tok.lang_token_to_id)
    # rows no tokenizer names (NLLB's spare ones, M2M-100's <madeupwordN>) as Tern names them
    out.setdefault("special", tok.all_special_tokens)  # what batch_decode(skip_special_tokens=True) leaves out
    out["vocab"] = [tok.convert_ids_to_tokens(i) if i < n - (0 if req["tokenizer"] == "nllb" else tok.num_madeup_words)
                    else f"<unused_{i}>" for i in range(cfg.vocab_size)]
    return out


def main(req_path, out_path):
    torch.set_num_threads(1)
    req = json.load(open(req_path))
    json.dump({"cases": [one(r) for r in req["cases"]]}, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
