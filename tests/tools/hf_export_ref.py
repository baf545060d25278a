"""transformers' MarianMTModel on a checkpoint `tern convert --to hf` wrote (tests/test_hf_export.py).

    /usr/bin/python3 hf_export_ref.py REQUEST.json OUT.json

REQUEST.json: {"cases": [{"dir": the exported directory, "inputs": [[source ids without the end token], ...],
"max_len": N, "beam": 4, "force": [[target ids], ...]}, ...]}. Each directory is loaded with
MarianMTModel.from_pretrained (float32, eval) and MarianConfig/GenerationConfig as transformers reads them;
OUT.json per case: "config" (the keys transformers took: pad, eos, decoder start, vocab sizes, scale_embedding,
share/tie), "greedy" and "beam" (generate() as hf_marian_ref.generate: num_beams 1 / 4, length_penalty 0,
early_stopping False, min_new_tokens 1, bad_words_ids [[pad]], renormalize_logits True; ids without the start
and end tokens), "force" (log_softmax of the logits at each token of the given targets, then at the end
token), with "texts": "text" (MarianTokenizer of the directory's source.spm/target.spm/vocab.json, greedy
generate, batch_decode(skip_special_tokens=True)), "missing"/"unexpected" (what from_pretrained reported: nothing may be left at its random init).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_marian_ref import force, generate, texts  # noqa: E402


def one(req):
    from transformers import MarianMTModel
    model, info = MarianMTModel.from_pretrained(req["dir"], output_loading_info=True)
    model = model.eval()
    cfg = model.config
    out = {"missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
           "config": {k: getattr(cfg, k) for k in ("pad_token_id", "eos_token_id", "decoder_start_token_id",
                                                    "vocab_size", "decoder_vocab_size", "scale_embedding",
                                                    "share_encoder_decoder_embeddings", "tie_word_embeddings",
                                                    "max_position_embeddings", "activation_function")},
           "generation": {"num_beams": model.generation_config.num_beams,
                          "max_length": model.generation_config.max_length}}
    with torch.no_grad():
        out["greedy"] = generate(model, cfg, req["inputs"], req["max_len"], 1)
        out["beam"] = generate(model, cfg, req["inputs"], req["max_len"], req.get("beam", 4))
        out["force"] = force(model, cfg, req["inputs"], req["force"])
        if req.get("texts"):  # raw text: MarianTokenizer over the exported tokenizer files, greedy, batch_decode
            out["text"] = texts(model, req["dir"], req["texts"], req["max_len"])
    return out


def main(req_path, out_path):
    torch.set_num_threads(1)
    req = json.load(open(req_path))
    json.dump({"cases": [one(r) for r in req["cases"]]}, open(out_path, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
