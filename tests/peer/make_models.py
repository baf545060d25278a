#!/usr/bin/env python3
"""Builds small random-weight CTranslate2 Transformer models with ctranslate2's spec API.

Command line:
    make_models.py OUTDIR [--shape NAME ...] [--int8] [--float16] [--legacy] [--seed N]
writes OUTDIR/<shape>/ (float32), OUTDIR/<shape>-int8/, OUTDIR/<shape>-float16/ and, with
--legacy, hand-serialized model.bin files of older binary versions (OUTDIR/legacy-v5, -v3, -v1).

As a module:
    from make_models import SHAPES, make_model, make_spec, write_legacy_model_bin
    make_model(SHAPES[0], "/tmp/m", quantization=None)   # or "int8" / "float16"

The weights are random (numpy only) but chosen so that decoding is well defined: the output
projection is scaled up so that next-token distributions are peaked (greedy decoding is not
dominated by near-ties), and </s> gets a positive bias so that sentences end.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import ctranslate2  # noqa: F401  (the peer whose format we build)
from ctranslate2.specs import common_spec, transformer_spec

SPECIALS = ["<unk>", "<s>", "</s>"]
MAX_POSITIONS = 256     # rows of the learned position table (decode at most this many tokens)
TARGET_LENGTH = (6.0, 14.0)  # mean greedy output length the </s> bias is calibrated to


def make_tokens(n, offset=0):
    """n tokens: the specials, then "▁a" "b" "▁c" ... and two-letter pieces after the alphabet."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = list(SPECIALS)
    i = offset
    while len(out) < n:
        if i < 26:
            base = letters[i]
        else:
            base = letters[(i // 26 - 1) % 26] + letters[i % 26]
        tok = ("\u2581" + base) if i % 2 == 0 else base
        if tok not in out:
            out.append(tok)
        i += 1
    return out


# Each shape: a dict of the knobs. d_model and ffn sizes are small so tests stay fast.
SHAPES = [
    dict(name="pre-shared-tied", enc_layers=2, dec_layers=2, heads=4, d=32, ff=64, pre_norm=True,
         activation="relu", src_vocab=50, tgt_vocab=50, shared_vocab=True, tie_output=True,
         share_embeddings=False, learned_pos=False, scale_embeddings=True, eps=None),
    dict(name="post-separate-untied", enc_layers=1, dec_layers=1, heads=2, d=16, ff=48, pre_norm=False,
         activation="relu", src_vocab=40, tgt_vocab=60, shared_vocab=False, tie_output=False,
         share_embeddings=False, learned_pos=False, scale_embeddings=True, eps=None),
    dict(name="pre-gelu-learnedpos", enc_layers=3, dec_layers=1, heads=8, d=32, ff=32, pre_norm=True,
         activation="gelu", src_vocab=70, tgt_vocab=45, shared_vocab=False, tie_output=False,
         share_embeddings=False, learned_pos=True, scale_embeddings=False, eps=None),
    dict(name="post-gelu-shared-all", enc_layers=2, dec_layers=3, heads=1, d=24, ff=40, pre_norm=False,
         activation="gelu", src_vocab=30, tgt_vocab=30, shared_vocab=True, tie_output=True,
         share_embeddings=True, learned_pos=False, scale_embeddings=True, eps=None),
    dict(name="pre-eps-noscale", enc_layers=1, dec_layers=2, heads=2, d=16, ff=32, pre_norm=True,
         activation="relu", src_vocab=120, tgt_vocab=120, shared_vocab=True, tie_output=False,
         share_embeddings=False, learned_pos=False, scale_embeddings=False, eps=1e-3),
    dict(name="post-big-vocab", enc_layers=3, dec_layers=3, heads=4, d=32, ff=64, pre_norm=False,
         activation="relu", src_vocab=200, tgt_vocab=150, shared_vocab=False, tie_output=True,
         share_embeddings=False, learned_pos=False, scale_embeddings=True, eps=None),
]
SHAPES_BY_NAME = {s["name"]: s for s in SHAPES}


def vocabularies(shape):
    if "tokens" in shape:  # a given shared vocabulary (e.g. a SentencePiece model's pieces)
        return shape["tokens"], shape["tokens"]
    src = make_tokens(shape["src_vocab"])
    tgt = src if shape["shared_vocab"] else make_tokens(shape["tgt_vocab"], offset=7)
    return src, tgt


def make_spec(shape, seed=1234, eos_bias=None):
    """The TransformerSpec of a shape with random weights (validated, not yet optimized).
    eos_bias: the bias of </s> in the output projection (default: calibrated, see eos_bias_for)."""
    if eos_bias is None:
        eos_bias = eos_bias_for(shape, seed)
    rng = np.random.default_rng([seed, sum(map(ord, shape["name"]))])
    d, ff, H = shape["d"], shape["ff"], shape["heads"]
    act = common_spec.Activation.GELU if shape["activation"] == "gelu" else common_spec.Activation.RELU
    spec = transformer_spec.TransformerSpec.from_config(
        (shape["enc_layers"], shape["dec_layers"]), H, pre_norm=shape["pre_norm"], activation=act)
    src_tokens, tgt_tokens = vocabularies(shape)
    Vs, Vt = len(src_tokens), len(tgt_tokens)
    emb_scale = 1.0 if shape["scale_embeddings"] else np.sqrt(d)

    def r(*s, std=None):
        std = (1.0 / np.sqrt(s[-1])) if std is None else std
        return (rng.standard_normal(s) * std).astype(np.float32)

    def ln(layer):
        layer.gamma = (1.0 + r(d, std=0.1)).astype(np.float32)
        layer.beta = r(d, std=0.1)

    def lin(layer, o, i):
        layer.weight = r(o, i)
        layer.bias = r(o, std=0.1)

    enc, dec = spec.encoder, spec.decoder
    enc.scale_embeddings = shape["scale_embeddings"]
    dec.scale_embeddings = shape["scale_embeddings"]
    # Embeddings of std 1 per dimension once scaled by sqrt(d) (or unscaled): a normal input scale.
    # Tied output embeddings need the larger std of the projection (below) instead.
    emb_std = (3.0 / np.sqrt(d)) if shape["tie_output"] else emb_scale / np.sqrt(d)
    enc.embeddings[0].weight = r(Vs, d, std=emb_std)
    for L in enc.layer:
        ln(L.self_attention.layer_norm)
        lin(L.self_attention.linear[0], 3 * d, d)
        lin(L.self_attention.linear[1], d, d)
        ln(L.ffn.layer_norm)
        lin(L.ffn.linear_0, ff, d)
        lin(L.ffn.linear_1, d, ff)
    if shape["pre_norm"]:
        ln(enc.layer_norm)
    if shape["share_embeddings"]:
        dec.embeddings.weight = enc.embeddings[0].weight  # same array: optimize() aliases it
    else:
        dec.embeddings.weight = r(Vt, d, std=emb_std)
    for L in dec.layer:
        ln(L.self_attention.layer_norm)
        lin(L.self_attention.linear[0], 3 * d, d)
        lin(L.self_attention.linear[1], d, d)
        ln(L.attention.layer_norm)
        lin(L.attention.linear[0], d, d)
        lin(L.attention.linear[1], 2 * d, d)
        lin(L.attention.linear[2], d, d)
        ln(L.ffn.layer_norm)
        lin(L.ffn.linear_0, ff, d)
        lin(L.ffn.linear_1, d, ff)
    if shape["pre_norm"]:
        ln(dec.layer_norm)
    if shape["learned_pos"]:
        enc.position_encodings.encodings = r(MAX_POSITIONS, d, std=0.3)
        dec.position_encodings.encodings = r(MAX_POSITIONS, d, std=0.3)
    # Output projection: peaked distributions (std 3/sqrt(d) per weight -> logits of std ~3 for a
    # normalized input); tied to the decoder embeddings when asked (same array -> an alias).
    if shape["tie_output"]:
        dec.projection.weight = dec.embeddings.weight
    else:
        dec.projection.weight = r(Vt, d, std=3.0 / np.sqrt(d))
    bias = r(Vt, std=0.5)
    bias[2] = eos_bias  # </s>: calibrated so that greedy outputs end after about 10 tokens
    bias[0] -= 4.0  # <unk> and <s> are rarely produced
    bias[1] -= 4.0
    dec.projection.bias = bias
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    if shape["eps"] is not None:
        spec.config.layer_norm_epsilon = shape["eps"]
    spec.validate()
    return spec


_EOS_CACHE = {}


def calibration_inputs(shape, n=32):
    src, _ = vocabularies(shape)
    rng = np.random.default_rng(99)
    return [[src[i] for i in rng.integers(3, len(src), size=rng.integers(2, 15))] for _ in range(n)]


def eos_bias_for(shape, seed=1234):
    """The </s> bias for which CTranslate2's greedy decoding of random inputs gives outputs of
    mean length within TARGET_LENGTH (bisection: the first </s> can only come earlier as its bias
    grows). Cached per (shape, seed)."""
    key = (shape["name"], seed)
    if key in _EOS_CACHE:
        return _EOS_CACHE[key]
    import tempfile
    inputs = calibration_inputs(shape)
    lo, hi = -5.0, 30.0
    b = 0.5 * (lo + hi)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(20):
            b = 0.5 * (lo + hi)
            spec = make_spec(shape, seed, eos_bias=b)
            spec.optimize()
            spec.save(tmp)
            tr = ctranslate2.Translator(tmp, device="cpu", compute_type="float32", intra_threads=1)
            res = tr.translate_batch(inputs, beam_size=1, max_decoding_length=60)
            del tr
            for f in os.listdir(tmp):
                os.remove(os.path.join(tmp, f))
            mean = float(np.mean([len(r.hypotheses[0]) for r in res]))
            if mean > TARGET_LENGTH[1]:
                lo = b
            elif mean < TARGET_LENGTH[0]:
                hi = b
            else:
                break
    _EOS_CACHE[key] = b
    return b


def make_model(shape, out_dir, quantization=None, seed=1234):
    """Writes the CTranslate2 model directory of a shape (quantization None, "int8" or "float16").
    Returns out_dir."""
    if isinstance(shape, str):
        shape = SHAPES_BY_NAME[shape]
    spec = make_spec(shape, seed)
    spec.optimize(quantization=quantization)  # aliases tied weights, quantizes if asked
    os.makedirs(out_dir, exist_ok=True)
    for f in ("model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
              "target_vocabulary.json"):
        if os.path.exists(os.path.join(out_dir, f)):
            os.remove(os.path.join(out_dir, f))
    spec.save(out_dir)
    return out_dir


def read_vocabulary(model_dir, side):
    """The token list of a saved CTranslate2 model's side ("source" or "target")."""
    for name in ("shared_vocabulary.json", f"{side}_vocabulary.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    for name in ("shared_vocabulary.txt", f"{side}_vocabulary.txt"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f]
    raise FileNotFoundError(f"no {side} vocabulary in {model_dir}")


def spec_variables(spec):
    """(variables, aliases) of an optimized spec as model.bin stores them: variables is a sorted
    list of (name, numpy array), aliases a list of (alias, target)."""
    variables, aliases = [], []
    for name, value in spec.variables(ordered=True):
        if isinstance(value, str):
            aliases.append((name, value))
        else:
            variables.append((name, value.numpy() if hasattr(value, "numpy") else np.asarray(value)))
    return variables, aliases


_DTYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "bfloat16": 5}


def write_legacy_model_bin(path, spec_name, revision, variables, aliases, version):
    """Serializes a model.bin by hand in the format of binary `version` (1..6):
    v>=2 spec name + revision; v>=4 dtype byte + byte count, else item size + element count;
    v>=3 aliases."""
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<H", len(b) + 1) + b + b"\0"

    out = [struct.pack("<I", version)]
    if version >= 2:
        out += [string(spec_name), struct.pack("<I", revision)]
    out.append(struct.pack("<I", len(variables)))
    for name, arr in variables:
        arr = np.array(arr, order="C", copy=True)  # (ascontiguousarray would make scalars 1-d)
        out += [string(name), struct.pack("<B", arr.ndim)]
        out += [struct.pack("<I", dim) for dim in arr.shape]
        if version >= 4:
            out += [struct.pack("<B", _DTYPE_IDS[str(arr.dtype)]), struct.pack("<I", arr.nbytes)]
        else:
            if str(arr.dtype) not in ("float32", "int16", "int8"):
                raise ValueError(f"{name}: dtype {arr.dtype} cannot be stored in binary version {version}")
            out += [struct.pack("<B", arr.itemsize), struct.pack("<I", arr.size)]
        out.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    if version >= 3:
        out.append(struct.pack("<I", len(aliases)))
        for a, t in aliases:
            out += [string(a), string(t)]
    with open(path, "wb") as f:
        f.write(b"".join(out))


def make_legacy_model(shape, out_dir, version, seed=1234):
    """A model directory whose model.bin is hand-serialized in binary `version`. Versions < 3 have
    no aliases: tied weights are stored twice. Returns (out_dir, variables, aliases)."""
    if isinstance(shape, str):
        shape = SHAPES_BY_NAME[shape]
    spec = make_spec(shape, seed)
    spec.optimize(quantization=None)
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)  # config + vocabularies; model.bin replaced below
    variables, aliases = spec_variables(spec)
    if version < 3:
        byname = dict(variables)
        variables = sorted(variables + [(a, byname[t]) for a, t in aliases])
        aliases = []
    write_legacy_model_bin(os.path.join(out_dir, "model.bin"), spec.name, spec.revision, variables,
                           aliases, version)
    return out_dir, variables, aliases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--shape", action="append", help="shape name (default: all); " +
                    ", ".join(SHAPES_BY_NAME))
    ap.add_argument("--int8", action="store_true", help="also write <shape>-int8 (quantization=int8)")
    ap.add_argument("--float16", action="store_true", help="also write <shape>-float16")
    ap.add_argument("--legacy", action="store_true", help="also write legacy-v5, legacy-v3, legacy-v1")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args(argv)
    names = args.shape or list(SHAPES_BY_NAME)
    for n in names:
        make_model(SHAPES_BY_NAME[n], os.path.join(args.out_dir, n), None, args.seed)
        if args.int8:
            make_model(SHAPES_BY_NAME[n], os.path.join(args.out_dir, n + "-int8"), "int8", args.seed)
        if args.float16:
            make_model(SHAPES_BY_NAME[n], os.path.join(args.out_dir, n + "-float16"), "float16", args.seed)
    if args.legacy:
        for v in (5, 3, 1):
            make_legacy_model(SHAPES[0], os.path.join(args.out_dir, f"legacy-v{v}"), v, args.seed)
    json.dump({"shapes": names}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
