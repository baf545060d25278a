"""transformers' MarianMTModel as the reference of Tern's Hugging Face loader (tests/test_hf_marian.py).

    /usr/bin/python3 hf_marian_ref.py info
    /usr/bin/python3 hf_marian_ref.py REQUEST.json OUT.json

REQUEST.json: {"cases": [case, ...]}, each case {"dir": model directory to write, "seed": s, "config": MarianConfig keyword
arguments, "vocab": [pieces, id order], "init_std", "qk_std", "cross_std", "emb_std": stds of the random weights, "pad_bias": added to
the pad token's final_logits_bias, "max_len": N, "inputs": [[source ids], ...] (without the end
token), "calibrate": {"lo", "hi", "iters", "target", "n"}, "beam": 4, "texts": [raw sentences],
"store_positions": true to write the whole state dict (the position tables included) instead}.

It builds MarianMTModel(MarianConfig(**config)) with torch.manual_seed(seed), gives every
parameter random values (normal(0, init_std); attention q and k weights normal(0, qk_std), the
cross-attention's v and out weights normal(0, cross_std), the embeddings normal(0, emb_std); layer-norm weights uniform(0.5, 1.5); the sinusoidal
position tables untouched: transformers computes them) and final_logits_bias normal(0, 0.5), bisects the end token's final_logits_bias
so that the mean greedy length of the first n inputs is near target, and writes the model with
save_pretrained(dir, safe_serialization=True) and vocab.json. OUT.json: "eos_bias", "greedy" and
"beam" (output ids without the start and end tokens) from generate(), "force" (the log-prob of
each token of the greedy outputs, then of the end token: log_softmax of the model's logits, the
pad token included), and with "texts" and source.spm/target.spm in dir: "text" (MarianTokenizer,
generate greedy, batch_decode).

generate(): greedy (num_beams 1) and beam search (num_beams 4, length_penalty 0, early_stopping
False), both with max_new_tokens N, min_new_tokens 1, bad_words_ids [[pad]] and renormalize_logits
True: tokens removed by a processor (the pad token, the end token at the first step) are removed
before the normalization, as Tern's search and Marian do (transformers' default applies
bad_words_ids to log-probs already normalized over the whole vocabulary).
"""
import json
import sys

import torch


def info():
    import transformers
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}))


def randomize(model, std, qk_std, cross_std, emb_std):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "embed_tokens" in name or "shared" in name:
                p.normal_(0.0, emb_std)
                continue
            if "layer_norm" in name and name.endswith(".weight"):
                p.uniform_(0.5, 1.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.normal_(0.0, qk_std)  # peaked attention: outputs that depend on the source
            elif name.endswith(("encoder_attn.v_proj.weight", "encoder_attn.out_proj.weight")):
                p.normal_(0.0, cross_std)
            else:
                p.normal_(0.0, std)
        model.final_logits_bias.normal_(0.0, 0.5)


def batch(seqs, pad, eos):
    n = max(len(s) for s in seqs) + 1
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s) + 1] = torch.tensor(list(s) + [eos])
        mask[i, :len(s) + 1] = 1
    return ids, mask


def strip(out, eos):
    res = []
    for row in out.tolist():
        row = row[1:]
        res.append(row[:row.index(eos)] if eos in row else row)
    return res


def generate(model, cfg, seqs, max_len, beams):
    ids, mask = batch(seqs, cfg.pad_token_id, cfg.eos_token_id)
    out = model.generate(input_ids=ids, attention_mask=mask, num_beams=beams, do_sample=False,
                         max_new_tokens=max_len, min_new_tokens=1, bad_words_ids=[[cfg.pad_token_id]],
                         renormalize_logits=True, length_penalty=0.0, early_stopping=False,
                         num_return_sequences=1)
    return strip(out, cfg.eos_token_id)


def force(model, cfg, seqs, tgts):
    ids, mask = batch(seqs, cfg.pad_token_id, cfg.eos_token_id)
    T = max(len(t) for t in tgts) + 1
    dec = torch.full((len(tgts), T), cfg.pad_token_id, dtype=torch.long)
    for i, t in enumerate(tgts):
        dec[i, 1:len(t) + 1] = torch.tensor(t, dtype=torch.long)
    dec[:, 0] = cfg.decoder_start_token_id
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    lp = logits.double().log_softmax(-1)
    res = []
    for i, t in enumerate(tgts):
        y = list(t) + [cfg.eos_token_id]
        res.append([float(lp[i, k, y[k]]) for k in range(len(y))])
    return res


def calibrate(model, cfg, req):
    """Bisects the end token's bias: mean greedy length of the first n inputs near target."""
    c = req["calibrate"]
    lo, hi, base = c["lo"], c["hi"], model.final_logits_bias[0, cfg.eos_token_id].item()
    seqs = req["inputs"][:c["n"]]
    for _ in range(c["iters"]):
        mid = (lo + hi) / 2
        model.final_logits_bias[0, cfg.eos_token_id] = base + mid
        mean = sum(len(h) for h in generate(model, cfg, seqs, req["max_len"], 1)) / len(seqs)
        lo, hi = (mid, hi) if mean > c["target"] else (lo, mid)
    model.final_logits_bias[0, cfg.eos_token_id] = base + (lo + hi) / 2
    return (lo + hi) / 2


def texts(model, d, lines, max_len):
    from transformers import MarianTokenizer
    tok = MarianTokenizer(source_spm=f"{d}/source.spm", target_spm=f"{d}/target.spm", vocab=f"{d}/vocab.json")
    enc = tok(lines, return_tensors="pt", padding=True)
    out = model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=max_len, min_new_tokens=1,
                         bad_words_ids=[[model.config.pad_token_id]], renormalize_logits=True)
    return {"ids": [x[:-1] for x in enc["input_ids"].tolist()],
            "text": tok.batch_decode(out, skip_special_tokens=True)}


def one(req):
    from transformers import MarianConfig, MarianMTModel
    torch.manual_seed(req["seed"])
    cfg = MarianConfig(**req["config"])
    model = MarianMTModel(cfg).eval()
    randomize(model, req["init_std"], req["qk_std"], req["cross_std"], req.get("emb_std", req["init_std"]))
    with torch.no_grad():
        model.final_logits_bias[0, cfg.pad_token_id] += req.get("pad_bias", 0.0)
        out = {"eos_bias": calibrate(model, cfg, req) if "calibrate" in req else 0.0}
        d = req["dir"]
        model.save_pretrained(d, safe_serialization=True)
        if req.get("store_positions"):  # as older checkpoints: the whole state dict, position tables included
            from safetensors.torch import save_file
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, f"{d}/model.safetensors",
                      metadata={"format": "pt"})
        with open(f"{d}/vocab.json", "w") as f:
            json.dump({p: i for i, p in enumerate(req["vocab"])}, f, ensure_ascii=False)
        out["greedy"] = generate(model, cfg, req["inputs"], req["max_len"], 1)
        out["beam"] = generate(model, cfg, req["inputs"], req["max_len"], req.get("beam", 4))
        out["force"] = force(model, cfg, req["inputs"], out["greedy"])
        if req.get("texts"):
            out["text"] = texts(model, d, req["texts"], req["max_len"])
    return out


def main(req_path, out_path):
    torch.set_num_threads(1)
    req = json.load(open(req_path))
    json.dump({"cases": [one(r) for r in req["cases"]]}, open(out_path, "w"))


if __name__ == "__main__":
    if sys.argv[1:] == ["info"]:
        info()
    else:
        main(sys.argv[1], sys.argv[2])
