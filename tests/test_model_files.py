"""Bad model files, on models written by CTranslate2 itself (tests/peer/make_models.py).

1. build/tests/test_model_files --ct2-dir DIR... cuts each real model.bin at every byte of its
   header, of every variable's name/rank/dims/dtype/size fields, inside every tensor's data and at
   every byte of the aliases, and corrupts fields of a tensor: each must give TERN_ERR_FORMAT with
   a message naming the file and the header, the tensor or the aliases (tests/c/test_model_files.c;
   the same binary without arguments runs the synthetic cases, also under ASan/UBSan).
2. `tern info -m DIR` on corrupted copies: a non-zero exit status (not a signal), a message that
   names the file and the tensor, no sanitizer report; and the model's facts on valid ones.
"""
import os
import shutil
import struct
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peer"))

ctranslate2 = pytest.importorskip("ctranslate2")
import make_models  # noqa: E402

TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
TEST_BIN = os.path.join(os.environ.get("TERN_TEST_BIN_DIR", os.path.join(ROOT, "build", "tests")),
                        "test_model_files")
SHAPE = make_models.SHAPES_BY_NAME["pre-shared-tied"]       # d 32, ff 64, 2+2 layers, vocab 50
SEPARATE = make_models.SHAPES_BY_NAME["post-separate-untied"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Real CTranslate2 model directories: float32, int8, float16, separate vocabularies, and
    hand-serialized legacy binary versions 5, 3 and 1."""
    base = tmp_path_factory.mktemp("ct2-models")
    out = {}
    for quant in (None, "int8", "float16"):
        d = str(base / f"v6-{quant or 'float32'}")
        make_models.make_model(SHAPE, d, quantization=quant)
        out[quant or "float32"] = d
    d = str(base / "separate")
    make_models.make_model(SEPARATE, d)
    out["separate"] = d
    for v in (5, 3, 1):
        d = str(base / f"legacy-v{v}")
        make_models.make_legacy_model(SHAPE, d, v)
        out[f"v{v}"] = d
    return out


# ------------------------------------------------------------------ model.bin layout and writer

DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}


def scan(data):
    """(version, variables, aliases, alias_at) of a valid model.bin; each variable a dict with
    its name, shape, dtype id, raw bytes and the offsets of its fields."""
    p = 0

    def u32():
        nonlocal p
        p += 4
        return struct.unpack_from("<I", data, p - 4)[0]

    def string():
        nonlocal p
        n = struct.unpack_from("<H", data, p)[0]
        s = data[p + 2:p + 1 + n].decode()
        p += 2 + n
        return s

    version = u32()
    if version >= 2:
        string()
        u32()
    count = u32()
    variables = []
    for _ in range(count):
        v = {"rec": p}
        v["name"] = string()
        v["rank_at"] = p
        rank = data[p]
        p += 1
        v["shape"] = [u32() for _ in range(rank)]
        v["dtype_at"] = p
        tag = data[p]
        p += 1
        v["size_at"] = p
        size = u32()
        nbytes = size if version >= 4 else size * tag
        v["dtype"] = tag if version >= 4 else {4: 0, 2: 2, 1: 1}[tag]
        v["data_at"] = p
        v["bytes"] = data[p:p + nbytes]
        p += nbytes
        v["end"] = p
        variables.append(v)
    alias_at = p
    aliases = []
    if version >= 3:
        for _ in range(u32()):
            aliases.append((string(), string()))
    return version, variables, aliases, alias_at


def serialize(variables, aliases, spec="TransformerSpec", revision=7):
    """A binary-version-6 model.bin of (name, shape, dtype id, raw bytes) variables."""
    def string(s):
        b = s.encode()
        return struct.pack("<H", len(b) + 1) + b + b"\0"

    out = [struct.pack("<I", 6), string(spec), struct.pack("<I", revision), struct.pack("<I", len(variables))]
    for name, shape, dtype, raw in variables:
        out += [string(name), struct.pack("<B", len(shape))] + [struct.pack("<I", d) for d in shape]
        out += [struct.pack("<BI", dtype, len(raw)), raw]
    out.append(struct.pack("<I", len(aliases)))
    for a, t in aliases:
        out += [string(a), string(t)]
    return b"".join(out)


def copy_model(src, tmp_path, name="m"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return str(dst)


def tern_info(model_dir):
    r = subprocess.run([TERN, "info", "-m", model_dir], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def assert_clean_failure(model_dir, *substrings):
    rc, out, err = tern_info(model_dir)
    assert rc > 0, f"tern info should fail with an exit status (got {rc}):\n{out}{err}"
    assert "Sanitizer" not in err and "runtime error" not in err, err
    for s in substrings:
        assert s in err, f"message lacks {s!r}:\n{err}"
    return err


# ------------------------------------------------------------------ tests

def test_sweep_real_models(models):
    assert os.path.exists(TEST_BIN), f"{TEST_BIN} is missing: run make"
    dirs = [models[k] for k in ("float32", "int8", "float16", "separate", "v5", "v3", "v1")]
    r = subprocess.run([TEST_BIN, "--ct2-dir"] + dirs, capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "0 failed" in r.stdout
    assert r.stdout.count("cut points of") == len(dirs)


@pytest.mark.parametrize("kind", ["float32", "int8", "float16", "separate", "v5", "v3", "v1"])
def test_tern_info_valid(models, kind):
    rc, out, err = tern_info(models[kind])
    assert rc == 0, err
    facts = dict(line.split(": ", 1) for line in out.strip().split("\n"))
    shape = SEPARATE if kind == "separate" else SHAPE
    assert facts["format"] == "ctranslate2"
    assert int(facts["d_model"]) == shape["d"]
    assert int(facts["num_heads"]) == shape["heads"]
    assert int(facts["ffn_dim"]) == shape["ff"]
    assert int(facts["encoder_layers"]) == shape["enc_layers"]
    assert int(facts["decoder_layers"]) == shape["dec_layers"]
    assert int(facts["source_vocab_size"]) == shape["src_vocab"]
    assert int(facts["target_vocab_size"]) == shape["tgt_vocab"]
    assert facts["compute"] == ("int8" if kind == "int8" else "float32")


@pytest.mark.parametrize("kind", ["float32", "int8", "separate"])
def test_tern_info_tensors(models, kind):
    """`tern info --tensors`: every variable of model.bin, in the file's order, with its dtype and
    shape, as the Transformer's description reads it: matrices int8-able, vectors float32 only,
    scales beside their matrices, flags as config keys; nothing the description does not know;
    then the file's aliases."""
    r = subprocess.run([TERN, "info", "-m", models[kind], "--tensors"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(models[kind], "model.bin"), "rb") as f:
        version, variables, aliases, _ = scan(f.read())
    lines = r.stdout.split("model.bin: transformer, ")[1].strip().split("\n")
    assert lines[0] == f"{len(variables)} tensors"
    rows = [l.split() for l in lines[1:1 + len(variables)]]
    assert [row[0] for row in rows] == [v["name"] for v in variables]
    for row, v in zip(rows, variables):
        role = " ".join(row[row.index(next(x for x in row if x.endswith("]"))) + 1:])
        shape = [int(x) for x in " ".join(row[2:]).split("[")[1].split("]")[0].replace(",", " ").split()]
        assert shape == list(v["shape"]), row
        if v["name"].endswith("_scale"):
            assert role == "int8 scales", row
        elif len(v["shape"]) == 2:
            assert role == "matrix (int8-able)", row
        elif len(v["shape"]) == 1:
            assert role == "float32 only", row
        else:
            assert role in ("config key", "not in the description"), row
    int8 = sum(r[1] == "int8" and len(v["shape"]) == 2 for r, v in zip(rows, variables))
    assert int8 == (sum(len(v["shape"]) == 2 and not v["name"].endswith("_scale") for v in variables)
                    if kind == "int8" else 0)
    tied = lines[1 + len(variables):]
    assert len(tied) == len(aliases) and all(" = " in l for l in tied)


TARGET = "encoder/layer_1/ffn/linear_0/weight"   # [64, 32] float32 (int8 in the int8 model)


def corrupt_bytes(model_dir, fn):
    path = os.path.join(model_dir, "model.bin")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    version, variables, aliases, alias_at = scan(bytes(data))
    byname = {v["name"]: v for v in variables}
    data = fn(data, byname, alias_at)
    with open(path, "wb") as f:
        f.write(data)
    return path


def rewrite(model_dir, fn):
    """Rewrites model.bin (v6) from its variables after fn(list of [name, shape, dtype, raw], aliases)."""
    path = os.path.join(model_dir, "model.bin")
    with open(path, "rb") as f:
        version, variables, aliases, _ = scan(f.read())
    vs = [[v["name"], v["shape"], v["dtype"], v["bytes"]] for v in variables]
    vs, aliases = fn(vs, list(aliases))
    with open(path, "wb") as f:
        f.write(serialize(vs, aliases))
    return path


def _set_u32(data, at, value):
    data[at:at + 4] = struct.pack("<I", value)
    return data


CASES = {
    # name: (model kind, corruption applied to a copy, expected substrings besides the file path)
    "truncated-in-tensor-data": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: b[:v[TARGET]["data_at"] + 100]), [f"tensor '{TARGET}'", "data truncated"]),
    "truncated-in-name": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: b[:v[TARGET]["rec"] + 10]), ["(after 'encoder/layer_1/ffn/linear_0/bias')"]),
    "truncated-in-header": ("float32", lambda d: corrupt_bytes(d, lambda b, v, a: b[:10]), ["header"]),
    "truncated-in-aliases": ("float32", lambda d: corrupt_bytes(d, lambda b, v, a: b[:a + 6]), ["alias"]),
    "empty": ("float32", lambda d: corrupt_bytes(d, lambda b, v, a: b[:0]), ["header: truncated binary version"]),
    "rank-9": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: b[:v[TARGET]["rank_at"]] + b"\x09" + b[v[TARGET]["rank_at"] + 1:]),
        [f"tensor '{TARGET}'", "rank exceeds 8"]),
    "dtype-9": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: b[:v[TARGET]["dtype_at"]] + b"\x09" + b[v[TARGET]["dtype_at"] + 1:]),
        [f"tensor '{TARGET}'", "unknown dtype id 9"]),
    "byte-count": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: _set_u32(b, v[TARGET]["size_at"], len(v[TARGET]["bytes"]) + 4)),
        [f"tensor '{TARGET}'", "8196 bytes stored but its shape and dtype float32 need 8192"]),
    "dims": ("float32", lambda d: corrupt_bytes(
        d, lambda b, v, a: _set_u32(b, v[TARGET]["rank_at"] + 1, 0x80000000)),
        [f"tensor '{TARGET}'", "bytes stored but its shape"]),
    "missing-tensor": ("float32", lambda d: rewrite(
        d, lambda vs, al: ([x for x in vs if x[0] != TARGET], al)), [f"missing tensor '{TARGET}'"]),
    "transposed": ("float32", lambda d: rewrite(
        d, lambda vs, al: ([[n, s[::-1] if n == TARGET else s, t, r] for n, s, t, r in vs], al)),
        [f"tensor '{TARGET}': expected shape [64, 32], got [32, 64]"]),
    "alias-to-missing": ("float32", lambda d: rewrite(
        d, lambda vs, al: (vs, [(a, t + "x") for a, t in al])),
        ["alias 'decoder/projection/weight' -> unknown 'decoder/embeddings/weightx'"]),
    "int8-scale-missing": ("int8", lambda d: rewrite(
        d, lambda vs, al: ([x for x in vs if x[0] != TARGET + "_scale"], al)),
        [f"tensor '{TARGET}' is int8 but '{TARGET}_scale' is missing"]),
    "float16-as-int16": ("float16", lambda d: rewrite(
        d, lambda vs, al: ([[n, s, 2 if n == TARGET else t, r] for n, s, t, r in vs], al)),
        [f"tensor '{TARGET}'", "is int16 but"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tern_info_corrupt_model_bin(models, tmp_path, case):
    kind, corrupt, expected = CASES[case]
    d = copy_model(models[kind], tmp_path)
    path = corrupt(d)
    assert_clean_failure(d, path, *expected)


def test_vocabulary_mismatch(models, tmp_path):
    d = copy_model(models["float32"], tmp_path)
    voc = os.path.join(d, "shared_vocabulary.json")
    with open(voc) as f:
        tokens = f.read()
    import json
    toks = json.loads(tokens)
    with open(voc, "w") as f:
        json.dump(toks[:-1], f)
    assert_clean_failure(d, voc, f"source vocabulary has {len(toks) - 1} tokens but tensor "
                         "'encoder/embeddings_0/weight'", os.path.join(d, "model.bin"), f"has {len(toks)} rows")


def test_separate_target_vocabulary_mismatch(models, tmp_path):
    d = copy_model(models["separate"], tmp_path)
    voc = os.path.join(d, "target_vocabulary.json")
    import json
    with open(voc) as f:
        toks = json.load(f)
    with open(voc, "w") as f:
        json.dump(toks + ["extra"], f)
    assert_clean_failure(d, voc, "target vocabulary has", "tensor 'decoder/embeddings/weight'")


def test_garbage_config(models, tmp_path):
    d = copy_model(models["float32"], tmp_path)
    cfg = os.path.join(d, "config.json")
    with open(cfg, "wb") as f:
        f.write(b'{"unk_token": "<unk>", "bos_token": ')
    assert_clean_failure(d, cfg, "not valid JSON")


def test_missing_config_uses_defaults(models, tmp_path):
    d = copy_model(models["float32"], tmp_path)
    os.remove(os.path.join(d, "config.json"))
    rc, out, err = tern_info(d)
    assert rc == 0, err


def test_missing_model_file(models, tmp_path):
    d = copy_model(models["float32"], tmp_path)
    os.remove(os.path.join(d, "model.bin"))
    assert_clean_failure(d, d, "no model.safetensors or model.bin")


def test_architecture_key_chooses_the_family(models, tmp_path):
    """config.json's "architecture" picks the model family (src/model/family.c): "transformer"
    (any case) loads as without the key; an unknown value is an error naming config.json and the
    value."""
    import json
    d = copy_model(models["float32"], tmp_path)
    cfg = os.path.join(d, "config.json")
    with open(cfg) as f:
        conf = json.load(f)
    for arch in ("transformer", "Transformer"):
        with open(cfg, "w") as f:
            json.dump(dict(conf, architecture=arch), f)
        rc, out, err = tern_info(d)
        assert rc == 0, err
        assert "family: transformer\n" in out
    with open(cfg, "w") as f:
        json.dump(dict(conf, architecture="gru-bahdanau"), f)
    assert_clean_failure(d, cfg, "unknown model architecture 'gru-bahdanau'", "transformer")
    with open(cfg, "w") as f:
        json.dump(dict(conf, architecture=7), f)
    assert_clean_failure(d, cfg, "'architecture' must be a string")
