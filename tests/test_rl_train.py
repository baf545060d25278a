"""`tern train --init-from MODEL --rl-gleu` (RL refinement with the GLEU reward, src/train/rl.h) as a
whole, on the shipped models/en-de and the first 120 Multi30k training pairs, one thread:

* exact resume with accumulation: 6 updates of 2 micro-batches straight equal 3 + `--resume` to
  6, bit for bit (the final model.safetensors, every train_curve.tsv row but its elapsed time, and
  the validations with BLEU every 2 updates, which an RL run scores, identical in valid_curve.tsv): the samples are
  drawn from a seed that is a function of (--seed, update) and keyed by micro-batch and sentence;
* the objective's ML part is the plain likelihood (label smoothing off: loss == nll in every
  row), the log reports the mean GLEU reward of the samples (in [0, 1]), and the samples matter:
  --seed 2 gives other parameters than --seed 1 (the batches' order is the same file order here,
  --no-shuffle, so only the samples differ);
* data-parallel: `mpirun -np 2 ... --update-freq 1` against one process with `--update-freq 2`, at
  a learning rate of 1e-12 (the parameters stay put, so both draw their samples from the same
  model with the same keys): every update's loss equal (1e-9 relative) and gradient norm equal to
  float rounding (1e-6 relative): the ranks' samples, rewards and REINFORCE gradients add up to
  the single process's (the buckets are reduced after the sample passes);
* the recurrent families (GNMT, attention GRU) start from their own checkpoints (--init-from reads
  their shape) and refine;
* bad input: --rl-gleu without --init-from, without --train-tgt, --rl-samples 1: clear errors.
The REINFORCE gradient itself is checked against PyTorch in tests/test_rl_torch.py."""
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
N = 120


def run(*args, ok=True):
    r = subprocess.run([TERN, *map(str, args)], capture_output=True, text=True, timeout=900)
    if ok:
        assert r.returncode == 0, f"tern {' '.join(map(str, args[:2]))}:\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def m30k(data_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("m30k")
    for side in ("en", "de"):
        lines = open(os.path.join(data_dir, "multi30k", f"train.{side}"), encoding="utf-8").read().split("\n")[:N]
        (d / f"t.{side}").write_text("".join(l + "\n" for l in lines), encoding="utf-8")
        lines = open(os.path.join(data_dir, "multi30k", f"val.{side}"), encoding="utf-8").read().split("\n")[:20]
        (d / f"v.{side}").write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return d


def read_st(path):
    """{name: numpy array} of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "I8": np.int8, "I16": np.int16, "I32": np.int32}[v["dtype"]]
        out[k] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out


def rl_train(m30k, save, *extra, bleu=False):
    return run("train", "--init-from", MODEL, "--rl-gleu", "--rl-samples", 3, "--rl-alpha", 0.5,
               "--train-src", m30k / "t.en", "--train-tgt", m30k / "t.de", "--save-dir", save,
               "--lr", "1e-4", "--lr-scheduler", "constant", *([] if bleu else ["--no-bleu"]), "--no-plot", "-t", "1",
               "--max-tokens", 400, "--update-freq", 2, "--log-interval", 1, "--no-shuffle", "--no-progress", *extra)


def final(save):
    ck = sorted(p for p in os.listdir(save) if p.startswith("checkpoint-"))[-1]
    return (save / ck / "model.safetensors").read_bytes()


def curve(save):
    """train_curve.tsv's rows without the elapsed-time column."""
    return [l.rsplit("\t", 1)[0] for l in (save / "train_curve.tsv").read_text().split("\n") if l and not l.startswith("#")]


def test_rl_resume_is_exact(m30k, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    valid = ["--valid-src", m30k / "v.en", "--valid-tgt", m30k / "v.de", "--valid-interval-updates", 2,
             "--bleu-beam", 1, "--early-stop-metric", "bleu"]
    r = rl_train(m30k, a, "--seed", 1, "--max-updates", 6, *valid, bleu=True)
    rl_train(m30k, b, "--seed", 1, "--max-updates", 3, *valid, bleu=True)
    rl_train(m30k, b, "--seed", 1, "--max-updates", 6, "--resume", *valid, bleu=True)
    va, vb = ((x / "valid_curve.tsv").read_text() for x in (a, b))
    rows = [l.split("\t") for l in va.split("\n") if l and not l.startswith("#")]
    assert va == vb and [x[0] for x in rows] == ["2", "4", "6"] and all(float(x[5]) > 0 for x in rows), va
    assert final(a) == final(b), "resumed RL refinement differs from the straight run"
    ca, cb = curve(a), curve(b)
    assert len(ca) == 6 and ca == cb
    for row in ca:  # update epoch loss nll ...: label smoothing off
        f = row.split("\t")
        assert f[2] == f[3], row
    rewards = [float(l.split("mean GLEU reward ")[1].split()[0]) for l in r.stderr.split("\n") if "mean GLEU reward" in l]
    assert len(rewards) == 6 and all(0.0 < x < 1.0 for x in rewards), rewards
    print(f"\nmean GLEU reward per update: {rewards}")
    c = tmp_path / "c"
    rl_train(m30k, c, "--seed", 2, "--max-updates", 2)
    d = tmp_path / "d"
    rl_train(m30k, d, "--seed", 1, "--max-updates", 2)
    assert final(c) != final(d), "the samples (seeded by --seed) do not reach the parameters"


def test_rl_bad_input(m30k, tmp_path):
    common = ["--train-src", m30k / "t.en", "--save-dir", tmp_path / "s", "-q", "--no-plot"]
    r = run("train", "--rl-gleu", "--vocab", MODEL, "--train-tgt", m30k / "t.de", *common, ok=False)
    assert r.returncode == 2 and "--rl-gleu refines a trained model: give it with --init-from" in r.stderr, r.stderr
    r = run("train", "--rl-gleu", "--init-from", MODEL, *common, ok=False)
    assert r.returncode == 2 and "--rl-gleu needs target references" in r.stderr, r.stderr
    r = run("train", "--rl-gleu", "--init-from", MODEL, "--train-tgt", m30k / "t.de", "--rl-samples", 1, *common,
            ok=False)
    assert r.returncode == 2 and "--rl-samples" in r.stderr, r.stderr


def test_rl_mpi_equals_single_process(m30k, tmp_path):
    if not shutil.which("mpirun"):
        msg = "mpirun not found: install openmpi-bin (scripts/setup.sh)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    args = ["train", "--init-from", MODEL, "--rl-gleu", "--rl-samples", 3, "--rl-alpha", 0.5, "--train-src",
            m30k / "t.en", "--train-tgt", m30k / "t.de", "--lr", "1e-12", "--lr-scheduler", "constant", "--no-bleu",
            "--no-plot", "-q", "-t", 1, "--max-tokens", 400, "--max-updates", 4, "--seed", 5]
    a, b = tmp_path / "single", tmp_path / "mpi"
    r = subprocess.run([TERN, *map(str, args), "--save-dir", str(a), "--update-freq", "2"], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", TERN, *map(str, args),
                        "--save-dir", str(b), "--update-freq", "1"], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ra = [l.split("\t") for l in (a / "train_curve.tsv").read_text().split("\n") if l and not l.startswith("#")]
    rb = [l.split("\t") for l in (b / "train_curve.tsv").read_text().split("\n") if l and not l.startswith("#")]
    assert len(ra) == len(rb) == 4
    worst = 0.0
    for x, y in zip(ra, rb):
        assert x[7] == y[7]  # tokens
        assert abs(float(x[2]) - float(y[2])) <= 1e-9 * float(y[2])
        worst = max(worst, abs(float(x[6]) - float(y[6])) / float(y[6]))
    print(f"\nRL, mpirun -np 2 vs --update-freq 2: gradient norm gap {worst:.2e}")
    assert worst <= 1e-6


@pytest.mark.parametrize("arch,opts", [("gnmt", ["--layers", 3, "--hidden", 32, "--attention-size", 24, "--tie-projection"]),
                                       ("rnn-gru", ["--emb-dim", 24, "--rnn-dim", 32, "--layer-norm"])])
def test_rl_recurrent_families(arch, opts, m30k, tmp_path):
    """The recurrent families start from their own checkpoints (config_from_model: the shape read
    from the tensors) and refine with --rl-gleu: at lr 1e-12 the refined parameters are the
    checkpoint's (to 1e-6 of the largest), the log reports rewards, the result translates."""
    common = ["--train-src", m30k / "t.en", "--train-tgt", m30k / "t.de", "--no-bleu", "--no-plot", "-t", 1,
              "--max-tokens", 400, "--no-progress"]
    run("vocab", "--model-dir", tmp_path / "v", "--source", m30k / "t.en", "--target", m30k / "t.de",
        "--vocab-size", 300, "-t", 1)
    run("train", "--architecture", arch, "--vocab", tmp_path / "v", "--save-dir", tmp_path / "ml", "--max-updates", 3,
        *opts, *common, "-q")
    ml = tmp_path / "ml" / "checkpoint-00000003"
    r = run("train", "--init-from", ml, "--rl-gleu", "--rl-samples", 3, "--save-dir", tmp_path / "rl",
            "--max-updates", 2, "--lr", "1e-12", "--lr-scheduler", "constant", "--log-interval", 1, *common)
    assert "mean GLEU reward" in r.stderr, r.stderr[-2000:]
    a = read_st(ml / "model.safetensors")
    b = read_st(tmp_path / "rl" / "checkpoint-00000002" / "model.safetensors")
    assert set(a) == set(b)
    for k in a:
        if a[k].dtype == np.float32 and a[k].ndim > 0:
            assert np.abs(a[k] - b[k]).max() <= 1e-6 * max(1.0, np.abs(a[k]).max()), k
    out = run("translate", "-m", tmp_path / "rl" / "checkpoint-00000002", "-q", "-t", 1, m30k / "t.en").stdout
    assert out.count("\n") == N
