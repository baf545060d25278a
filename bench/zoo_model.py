#!/usr/bin/python3
"""The random-weight models of bench/bench_zoo.py, built with transformers (Debian's /usr/bin/python3
has torch and transformers; ctranslate2 is put on its path by bench_zoo.py for the conversion).

    /usr/bin/python3 bench/zoo_model.py build SHAPE SPM_DIR OUT KNOBS_JSON   # OUT/hf (+ OUT/marian)
    /usr/bin/python3 bench/zoo_model.py convert OUT                          # OUT/ct2 (ctranslate2's converter)

SHAPE "marian": a MarianMTModel of OPUS-MT's shape (6+6 layers, d 512, 8 heads, ffn 2048, swish,
post-norm, embeddings shared by both sides and tied to the output layer, times sqrt(d), sinusoidal
positions, final_logits_bias; 58,101 rows: OPUS-MT en-de's vocabulary size, </s> 0, <unk> 1, <pad>
last) saved with save_pretrained beside MarianTokenizer's files (vocab.json, source.spm,
target.spm); the same weights as Marian's model.npz (Marian's names, W as [in, out], its
special:model.yml) with a vocab.json for Marian. The position tables stored in the checkpoint are
Marian's sinusoids (frequency exp(-i ln 10000 / (d/2 - 1))), so transformers, CTranslate2, Tern
and Marian add the same positions.
SHAPE "nllb": an M2M100ForConditionalGeneration of NLLB-200-600M's shape (12+12 layers, d 1024,
16 heads, ffn 4096, relu, pre-norm with final layer norms, tied embeddings times sqrt(d), fairseq's
sinusoids at position + 2; 256,206 rows) beside NllbTokenizer's files (sentencepiece.bpe.model:
fairseq's ids, the 202 language codes, <mask>; the rows past them are spare, as NLLB's).
Both use the bench's 32k SentencePiece pieces; the rows past them are extra pieces (<extra_N>,
Marian) or spare rows (NLLB).

Weights: transformers' random init (normal, std 0.02; seed fixed), then a length mechanism set by
hand so that outputs are about as long as their sources (random weights alone give an end token at
once or never). Sinusoidal positions cannot be overwritten as bench_translate.py's learned table
is, so the mechanism reads them:
  * a clean subspace: the cosine columns of low frequency (below 1e-3: about 1 over a sentence) and
    as many of middle frequency (3e-3 .. 3e-2: periods of 200 .. 2,100 positions): the embeddings
    hold nothing there and no sublayer reads or writes them, so there the residual stream holds
    the positions' cosines alone (scaled by each layer norm in a post-norm model), on both sides;
  * readouts r_E (even columns of each band: encoder) and r_D (odd ones: decoder), +1 on the low
    band and -1 on the middle one: r . pe(t) = f(t) = sum over the middle band of (1 - cos(w t))
    (less a little from the low band), about quadratic in t over a sentence, the same function on
    both sides; the weights sum to 0, so a layer norm's mean cancels, only its 1/sigma stays;
  * the last decoder layer's cross-attention: zero query (uniform attention over the source), one
    value coordinate = V_SCALE x r_E . encoder output / s_E (the mean of f over the source
    positions), written by its output projection as -w / V_SCALE x that along u (u in the
    decoder's columns, r_D . u = 1);
  * the end token's embedding row (tied: its output row) = g / s_D x r_D, plus the bias b
    (final_logits_bias for Marian; for NLLB, which has none, a column that the decoder's final
    layer norm sets to 1 and only </s> reads): its logit is about g (f(t) - w mean_j f(j)) + b.
s_E and s_D (what the layer norms leave of the readouts) are measured with transformers on the
built model; w is calibrated by bench_zoo.py on a sample of the source lines (b stays 0, below the
other logits at step 0: no end token at once). Every GEMM keeps its full shape: the cost per token
is that of the shape; only the lengths are steered. The outputs are degenerate (tied random
embeddings make a token its own best successor), which costs what any output of their length costs.
"""
import json
import math
import os
import shutil
import sys

import numpy as np

SEED = 1234
SHAPES = {
    "marian": dict(model_type="marian", layers=6, d=512, heads=8, ff=2048, activation="swish", rows=58101,
                   max_pos=512),
    "nllb": dict(model_type="m2m_100", layers=12, d=1024, heads=16, ff=4096, activation="relu", rows=256206,
                 max_pos=1024),
}
FIT_POSITIONS = 300   # positions the scale of the readouts is measured over
LOW_BAND = 1e-3       # cosines of frequency below: about 1 over a sentence
MID_BAND = (3e-3, 3e-2)  # cosines of these frequencies: 1 - cos(w t) grows over a sentence
V_SCALE = 0.05        # the value coordinate carries V_SCALE x f (the out projection 1 / V_SCALE): int8-sized
V_COORD = 5           # the last cross-attention's value coordinate (head 0) that carries the source position
BIAS_COL_NLLB = 3     # NLLB's bias column (a sine column of high frequency, outside the clean subspace)


def marian_pieces(spm_vocab, rows):
    """OPUS-MT's layout: </s> 0, <unk> 1, the SentencePiece pieces, extra pieces, <pad> last."""
    with open(spm_vocab, encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    assert pieces[:3] == ["<unk>", "<s>", "</s>"], pieces[:3]
    vocab = ["</s>", "<unk>"] + pieces[1:2] + pieces[3:]
    i = 0
    while len(vocab) < rows - 1:
        vocab.append(f"<extra_{i}>")
        i += 1
    return vocab + ["<pad>"]


def sinusoids(P, C, offset=0):
    """Marian's and fairseq's sinusoids: sin in the first half, cos in the second, frequency
    exp(-i ln 10000 / (C/2 - 1)), rows for positions offset .. offset + P - 1 (float32 as Marian)."""
    h = C // 2
    inc = np.float32(math.log(10000.0) / (h - 1))
    freq = np.exp(np.arange(h, dtype=np.float32) * -inc)
    ang = np.arange(offset, offset + P, dtype=np.float32)[:, None] * freq[None, :]
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1).astype(np.float32), freq


def readouts(shape):
    """Clean columns and the readouts r_E, r_D (d-vectors: +1 on cosines of low frequency, about 1
    over a sentence, -1 on as many cosines of middle frequency): r . pe(t) = f(t) = sum over the
    middle band of (1 - cos(w t)) (less a little from the low band), about quadratic in t over a
    sentence's length, the same function on both sides; weights summing to 0. u: r_D . u = 1."""
    d = shape["d"]
    h = d // 2
    offset = 2 if shape["model_type"] == "m2m_100" else 0
    _, freq = sinusoids(1, d)
    low = [h + i for i in range(h) if freq[i] < LOW_BAND]
    mid = [h + i for i in range(h) if MID_BAND[0] <= freq[i] < MID_BAND[1]]
    n = min(len(low), len(mid)) // 2 * 2
    low, mid = low[-n:], mid[:n]
    E, D = low[0::2] + mid[0::2], low[1::2] + mid[1::2]
    rE, rD = np.zeros(d), np.zeros(d)
    rE[low[0::2]], rE[mid[0::2]] = 1.0, -1.0
    rD[low[1::2]], rD[mid[1::2]] = 1.0, -1.0
    pe, _ = sinusoids(FIT_POSITIONS, d, offset)
    return dict(clean=sorted(low + mid), E=E, D=D, rE=rE, rD=rD, u=rD / (rD @ rD), offset=offset,
                fE=pe @ rE, fD=pe @ rD)


def make_tokenizer(shape, spm_dir, out):
    spm_model = os.path.join(spm_dir, "spm.model")
    if shape["model_type"] == "marian":
        vocab = marian_pieces(os.path.join(spm_dir, "spm.vocab"), shape["rows"])
        with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump({p: i for i, p in enumerate(vocab)}, f, ensure_ascii=False)
        for n in ("source.spm", "target.spm"):
            shutil.copy(spm_model, os.path.join(out, n))
        from transformers import MarianTokenizer
        tok = MarianTokenizer(os.path.join(out, "source.spm"), os.path.join(out, "target.spm"),
                              os.path.join(out, "vocab.json"))
        tok.save_pretrained(out)
        return dict(eos=0, unk=1, pad=len(vocab) - 1, start=len(vocab) - 1, vocab=vocab)
    from transformers import NllbTokenizer
    tok = NllbTokenizer(spm_model, src_lang="eng_Latn", tgt_lang="deu_Latn")
    tok.save_pretrained(out)
    return dict(eos=tok.eos_token_id, unk=tok.unk_token_id, pad=tok.pad_token_id, start=tok.eos_token_id,
                named=len(tok), eng=tok.convert_tokens_to_ids("eng_Latn"), deu=tok.convert_tokens_to_ids("deu_Latn"))


def build(shape_name, spm_dir, out, knobs):
    import torch
    shape = SHAPES[shape_name]
    d, L = shape["d"], shape["layers"]
    hf = os.path.join(out, "hf")
    if os.path.exists(hf):
        shutil.rmtree(hf)
    os.makedirs(hf)
    tk = make_tokenizer(shape, spm_dir, hf)
    common = dict(vocab_size=shape["rows"], d_model=d, encoder_layers=L, decoder_layers=L,
                  encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
                  encoder_ffn_dim=shape["ff"], decoder_ffn_dim=shape["ff"], activation_function=shape["activation"],
                  max_position_embeddings=shape["max_pos"], scale_embedding=True, pad_token_id=tk["pad"],
                  eos_token_id=tk["eos"], decoder_start_token_id=tk["start"], dropout=0.0, attention_dropout=0.0,
                  activation_dropout=0.0, init_std=0.02, bad_words_ids=[[tk["pad"]]])
    torch.manual_seed(SEED)
    if shape["model_type"] == "marian":
        from transformers import MarianConfig, MarianMTModel
        cfg = MarianConfig(decoder_vocab_size=shape["rows"], share_encoder_decoder_embeddings=True,
                           tie_word_embeddings=True, forced_eos_token_id=tk["eos"], **common)
        model = MarianMTModel(cfg)
    else:
        from transformers import M2M100Config, M2M100ForConditionalGeneration
        cfg = M2M100Config(bos_token_id=0, forced_eos_token_id=tk["eos"], **common)
        model = M2M100ForConditionalGeneration(cfg)
    model.eval()
    ro = readouts(shape)
    C = torch.tensor(ro["clean"])
    m = model.model
    with torch.no_grad():
        emb = m.shared.weight
        emb[:, C] = 0.0
        emb[tk["pad"]] = 0.0  # Marian's and CTranslate2's decoder start: a zero embedding
        emb[tk["eos"]] = 0.0
        if shape["model_type"] == "marian":
            pe, _ = sinusoids(shape["max_pos"], d)
            m.encoder.embed_positions.weight.copy_(torch.from_numpy(pe))
            m.decoder.embed_positions.weight.copy_(torch.from_numpy(pe))
        layers = list(m.encoder.layers) + list(m.decoder.layers)
        for lay in layers:  # the random model neither reads nor writes the clean columns
            reads = [lay.self_attn.q_proj, lay.self_attn.k_proj, lay.self_attn.v_proj, lay.fc1]
            if hasattr(lay, "encoder_attn"):
                reads += [lay.encoder_attn.q_proj, lay.encoder_attn.k_proj, lay.encoder_attn.v_proj]
            for lin in reads:
                lin.weight[:, C] = 0.0
            for lin in [lay.self_attn.out_proj, lay.fc2] + ([lay.encoder_attn.out_proj] if hasattr(lay, "encoder_attn") else []):
                lin.weight[C, :] = 0.0
                lin.bias[C] = 0.0
        last = m.decoder.layers[-1].encoder_attn
        last.q_proj.weight.zero_()
        last.q_proj.bias.zero_()
        last.v_proj.weight[V_COORD] = 0.0
        last.v_proj.bias[V_COORD] = 0.0
        last.out_proj.weight[:, V_COORD] = 0.0
        if shape["model_type"] == "m2m_100":
            m.decoder.layer_norm.weight[BIAS_COL_NLLB] = 0.0
            m.decoder.layer_norm.bias[BIAS_COL_NLLB] = 1.0
            emb[:, BIAS_COL_NLLB] = 0.0
    # what the layer norms leave of the readouts: slopes of r_E . encoder output and r_D . decoder output
    s_e, s_d = measure(model, tk, ro, shape)
    with torch.no_grad():
        last.v_proj.weight[V_COORD] = torch.from_numpy(V_SCALE * ro["rE"] / s_e).float()
        last.out_proj.weight[torch.tensor(ro["D"]), V_COORD] = torch.from_numpy(
            -knobs["w"] / V_SCALE * ro["u"][ro["D"]]).float()
        emb[tk["eos"]] = torch.from_numpy(knobs["g"] / s_d * ro["rD"]).float()
        if shape["model_type"] == "marian":
            model.final_logits_bias.zero_()
            model.final_logits_bias[0, tk["eos"]] = knobs["b"]
            model.final_logits_bias[0, tk["unk"]] = -1e4  # Marian never outputs <unk>
            model.final_logits_bias[0, tk["pad"]] = -1e4  # nor does anyone output <pad>
        else:
            emb[tk["eos"], BIAS_COL_NLLB] = knobs["b"]
    model.save_pretrained(hf, safe_serialization=True)
    os.remove(os.path.join(hf, "generation_config.json"))  # the bench gives every decoding option
    if shape["model_type"] == "marian":  # save_pretrained leaves the position tables out: store Marian's
        from safetensors.torch import load_file, save_file
        st = os.path.join(hf, "model.safetensors")
        t = load_file(st)
        for side in ("encoder", "decoder"):
            t[f"model.{side}.embed_positions.weight"] = getattr(m, side).embed_positions.weight.detach().clone()
        save_file(t, st, metadata={"format": "pt"})
    info = dict(s_e=s_e, s_d=s_d, clean=len(ro["clean"]), knobs=knobs, tokens=tk.get("named", shape["rows"]))
    if shape["model_type"] == "marian":
        write_marian(model, shape, tk, os.path.join(out, "marian"))
    with open(os.path.join(out, "build.json"), "w") as f:
        json.dump(info, f)
    print(json.dumps(info))


def measure(model, tk, ro, shape):
    """Slopes of the readouts over position on random inputs (the mechanism's scale after the norms)."""
    import torch
    g = torch.Generator().manual_seed(7)
    B, T = 4, 120
    ids = torch.randint(10, 30000, (B, T), generator=g)
    dec = torch.randint(10, 30000, (B, T), generator=g)
    dec[:, 0] = tk["start"]
    with torch.no_grad():
        o = model(input_ids=ids, decoder_input_ids=dec, output_hidden_states=True)
        enc = o.encoder_last_hidden_state.double().numpy()
        dech = o.decoder_hidden_states[-1].double().numpy()  # after the final norm (pre-norm) / last layer
    ye = (enc @ ro["rE"]).mean(0)
    yd = (dech @ ro["rD"]).mean(0)
    fe, fd = ro["fE"][:T], ro["fD"][:T]
    s_e = float(np.median(ye[10:] / fe[10:]))
    s_d = float(np.median(yd[10:] / fd[10:]))
    print(f"readout slopes: encoder {s_e:.4f}, decoder {s_d:.4f}", file=sys.stderr)
    return s_e, s_d


def write_marian(model, shape, tk, out):
    """The same weights as Marian's model.npz (names of Marian's transformer, W as [in, out], biases
    and norms as [1, n]) with its options and a vocab.json (piece -> id)."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    a = {"Wemb": sd["model.shared.weight"]}

    def lin(prefix, hf, pairs):
        for mname, hname in pairs:
            a[f"{prefix}_W{mname}"] = np.ascontiguousarray(sd[f"{hf}.{hname}.weight"].T)
            a[f"{prefix}_b{mname}"] = sd[f"{hf}.{hname}.bias"][None, :]

    def norm(name, hf):
        a[f"{name}_ln_scale"] = sd[f"{hf}.weight"][None, :]
        a[f"{name}_ln_bias"] = sd[f"{hf}.bias"][None, :]

    att = [("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")]
    for side in ("encoder", "decoder"):
        for i in range(shape["layers"]):
            hf = f"model.{side}.layers.{i}"
            p = f"{side}_l{i + 1}"
            lin(f"{p}_self", f"{hf}.self_attn", att)
            norm(f"{p}_self_Wo", f"{hf}.self_attn_layer_norm")
            if side == "decoder":
                lin(f"{p}_context", f"{hf}.encoder_attn", att)
                norm(f"{p}_context_Wo", f"{hf}.encoder_attn_layer_norm")
            lin(f"{p}_ffn", hf, [("1", "fc1"), ("2", "fc2")])
            norm(f"{p}_ffn_ffn", f"{hf}.final_layer_norm")
    a["decoder_ff_logit_out_b"] = sd["final_logits_bias"].reshape(1, -1)
    V = shape["rows"]
    yml = f"""type: transformer
dim-vocabs:
  - {V}
  - {V}
dim-emb: {shape['d']}
enc-depth: {shape['layers']}
dec-depth: {shape['layers']}
transformer-heads: {shape['heads']}
transformer-dim-ffn: {shape['ff']}
transformer-ffn-depth: 2
transformer-ffn-activation: {shape['activation']}
transformer-preprocess: ""
transformer-postprocess: dan
transformer-postprocess-emb: d
transformer-postprocess-top: ""
transformer-decoder-autoreg: self-attention
transformer-aan-depth: 2
transformer-aan-activation: swish
transformer-aan-nogate: false
transformer-tied-layers: []
transformer-guided-alignment-layer: last
transformer-train-position-embeddings: false
transformer-depth-scaling: false
tied-embeddings: false
tied-embeddings-src: false
tied-embeddings-all: true
enc-type: bidirectional
enc-cell: gru
dec-cell: gru
dec-cell-base-depth: 2
dec-cell-high-depth: 1
layer-normalization: false
right-left: false
skip: false
output-omit-bias: false
factors-combine: sum
factors-dim-emb: 0
lemma-dim-emb: 0
ulr: false
input-types: []
bert-train-type-embeddings: true
bert-type-vocab-size: 2
version: v1.12.0
"""
    a["special:model.yml"] = np.frombuffer(yml.encode() + b"\0", dtype=np.int8)
    np.savez(os.path.join(out, "model.npz"), **a)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(tk["vocab"])}, f, ensure_ascii=False, indent=0)


def convert(out):
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_model(self, model_class, path, **kwargs):  # ctranslate2 4.8 says dtype, transformers 4.40 torch_dtype
            kwargs["torch_dtype"] = kwargs.pop("dtype", None)
            return super().load_model(model_class, path, **kwargs)

        def load_tokenizer(self, tokenizer_class, path, **kwargs):  # the fast NLLB one needs protobuf
            return super().load_tokenizer(tokenizer_class, path, use_fast=False, **kwargs)

    dst = os.path.join(out, "ct2")
    Converter(os.path.join(out, "hf")).convert(dst, force=True)
    print(json.dumps(dict(ct2=dst)))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
    elif sys.argv[1] == "convert":
        convert(sys.argv[2])
    else:
        raise SystemExit(__doc__)
