"""The GNMT family decoded by Tern against a PyTorch reference run step by step.

tests/tools/gnmt_torch_ref.py rebuilds the model from torch.nn.LSTMCell and GNMT's attention
written out (float64) and decodes 200 random inputs of each random-weight model (shapes below):
* greedy: `tern translate -b 1` gives the reference's output on >= 99.5 % of the inputs
  (identical token sequences; near-ties between the two top tokens may flip in float32);
* beam 4 (no penalties, --min-length 0): identical to the reference's beam search (CTranslate2's
  candidates as Tern's src/search/beam.c takes them) on >= 97 % of the inputs;
* force decoding: `tern rescore` gives every token's log-probability (the end token included)
  within 1e-4 of the reference's (targets: the reference's greedy outputs);
* int8 (`--compute-type int8`, every matrix quantized per output row): every forced token's
  log-prob within 0.15 of the reference's (measured 0.013-0.077: small widths H 10-16 and large
  random weights); greedy outputs identical on >= 50 % of the inputs (measured 69-95 %: one
  flipped near-tie changes the rest of a sentence);
* coverage penalty: `tern translate -b 4 --coverage-penalty 0.2 --scores`: every output's score is
  the reference's log-prob sum plus GNMT's penalty from the reference's attention within 1e-4
  (this family's attention rows reach the search).

Models are written here with numpy (names: src/model/gnmt_desc.h): a 40-piece shared vocabulary,
uniform weights. Binary: $TERN_BIN (default build/tern); PyTorch: /usr/bin/python3 (Debian's
python3-torch), skipped with a message where either is missing.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from train_torch_ref import st_write  # noqa: E402
from testutil import safetensors_header  # noqa: E402

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
TORCH_PY = "/usr/bin/python3"
REF = os.path.join(ROOT, "tests", "tools", "gnmt_torch_ref.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
V = 40
PIECES = ["<unk>", "<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(4, V)]
EOS, START = 2, 1
N_INPUTS, MAX_LEN = 200, 30
INT8_MIN_SAME, INT8_MAX_DIFF = 0.50, 0.15  # measured 69-95 % and 0.013-0.077

# (label, H, A, Le, Ld, tie). The end token's bias is calibrated by the reference (bisection on 20
# inputs) for a mean greedy length near 12: outputs of varied lengths, not all 1 or MAX_LEN.
SHAPES = [("h16-3x3", 16, 12, 3, 3, False), ("h12-1x2-tied", 12, 10, 1, 2, True), ("h10-4x4", 10, 8, 4, 4, False)]


def have_torch():
    if not os.path.exists(TORCH_PY):
        return False
    r = subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True)
    return r.returncode == 0


def write_model(d, H, A, Le, Ld, tie, eos_bias, seed):
    rng = np.random.default_rng(seed)
    Dv = 2 * H if Le == 1 else H

    def u(*shape, r=0.5):
        return rng.uniform(-r, r, size=shape).astype(np.float32)

    t = {"encoder/embeddings/weight": u(V, H, r=1.0)}
    for l in range(Le):
        K = 2 * H if l == 1 else H
        for p in [f"encoder/layer_{l}"] + (["encoder/layer_0_reverse"] if l == 0 else []):
            t[p + "/weight_ih"], t[p + "/weight_hh"] = u(4 * H, K), u(4 * H, H)
            t[p + "/bias_ih"], t[p + "/bias_hh"] = u(4 * H, r=0.2), u(4 * H, r=0.2)
    for l in range(Ld):
        p = f"decoder/layer_{l}"
        t[p + "/weight_ih"], t[p + "/weight_hh"] = u(4 * H, H + Dv), u(4 * H, H)
        t[p + "/bias_ih"], t[p + "/bias_hh"] = u(4 * H, r=0.2), u(4 * H, r=0.2)
    t["decoder/attention/linear_query/weight"] = u(A, H, r=1.0)
    t["decoder/attention/linear_key/weight"] = u(A, Dv, r=1.0)
    t["decoder/attention/linear_key/bias"] = u(A, r=0.5)
    t["decoder/attention/v"] = u(A, r=2.0)
    if not tie:
        t["decoder/projection/weight"] = u(V, H, r=2.0)
    t["decoder/projection/bias"] = u(V, r=0.5)
    t["decoder/projection/bias"][EOS] += eos_bias
    for k, v in [("hidden_size", H), ("attention_size", A), ("encoder_layers", Le), ("decoder_layers", Ld)]:
        t["gnmt/" + k] = np.array(v, dtype=np.int32)
    # decoder/embeddings is the encoder's (shared), the projection the decoder embedding (tied):
    # Tern's safetensors aliases live in the metadata as model_dir.c writes them
    aliases = {"decoder/embeddings/weight": "encoder/embeddings/weight"}
    if tie:
        aliases["decoder/projection/weight"] = "encoder/embeddings/weight"
    os.makedirs(d, exist_ok=True)
    st_write(os.path.join(d, "model.safetensors"), t, {"ct2_spec": "GnmtSpec", **{f"alias:{k}": v for k, v in aliases.items()}})
    with open(os.path.join(d, "shared_vocabulary.json"), "w") as f:
        json.dump(PIECES, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "decoder_start_token": "<s>",
                   "add_source_bos": False, "add_source_eos": True, "pad_token": "<pad>", "architecture": "gnmt",
                   "format": "tern", "format_version": 1}, f)


def run(*args, input=None):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, input=input, timeout=600)
    assert r.returncode == 0, f"{args[:3]}: {r.stderr[-2000:]}"
    return r.stdout


@pytest.fixture(scope="module", params=SHAPES, ids=[s[0] for s in SHAPES])
def case(request, tmp_path_factory):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    if not have_torch():
        pytest.skip(f"PyTorch not available under {TORCH_PY} (Debian python3-torch)")
    label, H, A, Le, Ld, tie = request.param
    d = tmp_path_factory.mktemp("gnmt_" + label)
    seed = sum(map(ord, label))
    rng = np.random.default_rng(5)
    srcs = [list(rng.integers(4, V, size=int(rng.integers(1, 16)))) for _ in range(N_INPUTS)]
    write_model(d / "model", H, A, Le, Ld, tie, 0.0, seed)
    cal = {"eos": EOS, "start": START, "max_len": MAX_LEN, "min_len": 1,
           "calibrate": {"lo": -2.0, "hi": 4.0, "iters": 7, "target": 12,
                         "inputs": [[int(i) for i in s] + [EOS] for s in srcs[:20]]}}
    (d / "cal.json").write_text(json.dumps(cal))
    subprocess.run([TORCH_PY, REF, str(d / "model"), str(d / "cal.json"), str(d / "cal_out.json")], check=True,
                   timeout=600)
    write_model(d / "model", H, A, Le, Ld, tie, json.loads((d / "cal_out.json").read_text())["eos_bias"], seed)
    src_txt = "".join(" ".join(PIECES[i] for i in s) + "\n" for s in srcs)
    (d / "src.txt").write_text(src_txt)
    req = {"eos": EOS, "start": START, "max_len": MAX_LEN, "min_len": 1,
           "greedy": [[int(i) for i in s] + [EOS] for s in srcs]}
    (d / "req.json").write_text(json.dumps(req))
    subprocess.run([TORCH_PY, REF, str(d / "model"), str(d / "req.json"), str(d / "ref.json")], check=True,
                   timeout=600)
    ref = json.loads((d / "ref.json").read_text())
    # force decoding of the reference's greedy outputs
    req2 = {"eos": EOS, "start": START, "force": [[[int(i) for i in s] + [EOS], h] for s, h in zip(srcs, ref["greedy"])]}
    (d / "req2.json").write_text(json.dumps(req2))
    subprocess.run([TORCH_PY, REF, str(d / "model"), str(d / "req2.json"), str(d / "ref2.json")], check=True,
                   timeout=600)
    ref["force"] = json.loads((d / "ref2.json").read_text())["force"]
    (d / "tgt.txt").write_text("".join(" ".join(PIECES[i] for i in h) + "\n" for h in ref["greedy"]))
    return label, d, srcs, ref


def translate(d, *extra):
    out = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              *extra, input=(d / "src.txt").read_text())
    return [line.split() for line in out.split("\n")[:N_INPUTS]]


def rescore(d, *extra):
    out = run(TERN, "rescore", "-m", d / "model", "-s", d / "src.txt", "--target", d / "tgt.txt", "--pretokenized",
              *extra)
    return [[float(x) for x in line.split("|||")[0].split()] for line in out.strip("\n").split("\n")]


def test_greedy_and_force_decoding(case):
    label, d, srcs, ref = case
    hyps = translate(d, "-b", 1)
    want = [[PIECES[i] for i in h] for h in ref["greedy"]]
    same = sum(h == w for h, w in zip(hyps, want)) / N_INPUTS
    lps = rescore(d)
    assert len(lps) == N_INPUTS
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    assert all(len(x) == len(y) for x, y in zip(lps, ref["force"]))
    mean_len = np.mean([len(h) for h in ref["greedy"]])
    print(f"\n{label}: greedy identical {same:.1%} of {N_INPUTS} (mean length {mean_len:.1f}); "
          f"force-decoding max |log-prob difference| {diff:.2e}")
    assert same >= 0.995
    assert diff <= 1e-4


def test_int8(case):
    label, d, srcs, ref = case
    hyps = translate(d, "-b", 1, "--compute-type", "int8")
    want = [[PIECES[i] for i in h] for h in ref["greedy"]]
    same = sum(h == w for h, w in zip(hyps, want)) / N_INPUTS
    lps = rescore(d, "--compute-type", "int8")
    diff = max(max(abs(a - b) for a, b in zip(x, y)) for x, y in zip(lps, ref["force"]))
    print(f"\n{label}: int8 greedy identical {same:.1%}; force-decoding max |log-prob difference| {diff:.3g}")
    assert same >= INT8_MIN_SAME
    assert diff <= INT8_MAX_DIFF


def test_convert_int8_follows_the_description(case, tmp_path):
    """`tern convert --quantize int8` stores int8 (with per-row "_scale") exactly the matrices GNMT's
    description marks int8-able (every LSTM matrix, the attention's two, an untied projection; not
    the embeddings), the converted model loads them divided by their scales, and run as stored
    ("auto" = int8) it decodes exactly as the original with --compute-type int8."""
    label, d, srcs, ref = case
    q = tmp_path / "q"
    run(TERN, "convert", "--from", d / "model", "-o", q, "--quantize", "int8")
    orig = safetensors_header(d / "model" / "model.safetensors")
    conv = safetensors_header(q / "model.safetensors")
    want = {n for n, t in orig.items() if n != "__metadata__" and len(t["shape"]) == 2 and "embeddings" not in n}
    got = {n for n, t in conv.items() if n != "__metadata__" and t["dtype"] == "I8"}
    assert got == want and any("weight_hh" in n for n in got)
    for n in got:
        assert conv[n + "_scale"]["dtype"] == "F32" and conv[n + "_scale"]["shape"] == conv[n]["shape"][:1]
    for beam in (1, 4):
        a = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
                "-b", beam, "--compute-type", "int8", input=(d / "src.txt").read_text())
        b = run(TERN, "translate", "-m", q, "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
                "-b", beam, input=(d / "src.txt").read_text())
        assert a == b and len(a.split("\n")) == N_INPUTS + 1
    assert "compute: int8" in run(TERN, "info", "-m", q)


def test_beam4(case):
    """Beam 4 (no penalties, --min-length 0) against the reference's beam search over the same
    candidates (tests/tools/gnmt_torch_ref.py, beam()): identical outputs on >= 97 %."""
    label, d, srcs, ref = case
    out = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              "-b", 4, "--min-length", 0, input=(d / "src.txt").read_text())
    hyps = [line.split() for line in out.split("\n")[:N_INPUTS]]
    req = {"eos": EOS, "start": START, "max_len": MAX_LEN, "beam_size": 4,
           "beam": [[int(i) for i in s] + [EOS] for s in srcs]}
    (d / "req4.json").write_text(json.dumps(req))
    subprocess.run([TORCH_PY, REF, str(d / "model"), str(d / "req4.json"), str(d / "ref4.json")], check=True,
                   timeout=900)
    want = [[PIECES[i] for i in h] for h in json.loads((d / "ref4.json").read_text())["beam"]]
    same = sum(h == w for h, w in zip(hyps, want)) / N_INPUTS
    print(f"\n{label}: beam 4 identical {same:.1%} of {N_INPUTS}")
    assert same >= 0.97


def test_coverage_penalty(case):
    """Beam 4 with GNMT's coverage penalty (beta 0.2): each output's score equals the reference's
    sum of its tokens' log-probs plus beta * sum_j log(min(coverage_j, 1)), coverage_j the sum of the
    attention on source position j over its steps (end token included), within 1e-4. --min-length
    0: the search then scores the model's own distribution (with the end token masked at step 0
    it would renormalize without it)."""
    label, d, srcs, ref = case
    beta = 0.2
    out = run(TERN, "translate", "-m", d / "model", "--pretokenized", "-t", 1, "--max-decoding-length", MAX_LEN,
              "-b", 4, "--coverage-penalty", beta, "--scores", "--min-length", 0, input=(d / "src.txt").read_text())
    rows = [line.split(" ||| ") for line in out.strip("\n").split("\n")]
    assert len(rows) == N_INPUTS
    index = {p: i for i, p in enumerate(PIECES)}
    hyps = [[index[p] for p in (r[1].split() if len(r) == 3 else [])] for r in rows]
    rows = [r if len(r) == 3 else [r[0], "", r[-1]] for r in rows]
    req = {"eos": EOS, "start": START, "force": [[[int(i) for i in s] + [EOS], h] for s, h in zip(srcs, hyps)]}
    (d / "req3.json").write_text(json.dumps(req))
    subprocess.run([TORCH_PY, REF, str(d / "model"), str(d / "req3.json"), str(d / "ref3.json")], check=True,
                   timeout=600)
    r3 = json.loads((d / "ref3.json").read_text())
    worst, penalized = 0.0, 0
    for row, lps, cov in zip(rows, r3["force"], r3["coverage"]):
        pen = beta * sum(np.log(min(c, 1.0)) for c in cov if c > 0)
        penalized += pen < -1e-3
        worst = max(worst, abs(float(row[2]) - (sum(lps) + pen)))
    print(f"\n{label}: beam 4, coverage penalty {beta}: {penalized} of {N_INPUTS} outputs penalized; "
          f"max |score - reference| {worst:.2e}")
    assert penalized > 0
    assert worst <= 1e-4
