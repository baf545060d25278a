"""recipes/backtranslate-en-de.sh at its smallest (~15 s; docs/training.md, "Back-translation").

Runs the recipe with a tiny reverse and forward model (20 updates each, 500 real pairs, 300
monolingual German lines, sampled back-translation top-5) and checks its outputs:
* the real pairs are Multi30k train's first 500 lines, the monolingual German the German side of
  lines 501-800 (never their English), and the synthetic English has one line per German line;
* the synthetic English is what `tern translate` of the reverse model's checkpoint gives for the
  monolingual German with the same sampling options (re-translated here: identical files);
* the forward model trained on the weighted mix: its log names both corpora, draws every kept real
  pair once and round(0.5 x kept) synthetic pairs in epoch 1, and RESULTS.txt reports it.
"""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "build", "tern")
RECIPE = os.path.join(ROOT, "recipes", "backtranslate-en-de.sh")


def lines(p):
    with open(p, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


@pytest.fixture(scope="module")
def run_recipe(tmp_path_factory, data_dir):
    if not os.path.exists(TERN):
        pytest.skip(f"{TERN} not built")
    work = tmp_path_factory.mktemp("bt")
    env = dict(os.environ, TERN_BIN=TERN, TERN_DATA=data_dir, WORK=str(work), N_REAL="500", N_MONO="300",
               REV_UPDATES="20", UPDATES="20", LAYERS="1", DMODEL="32", FF="64", HEADS="2", VOCAB="300",
               THREADS="1", SAMPLING_TOPK="5", OMP_NUM_THREADS="1")
    r = subprocess.run(["bash", RECIPE], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return work, os.path.join(data_dir, "multi30k")


def test_data_and_line_counts(run_recipe):
    work, m = run_recipe
    train_en, train_de = lines(os.path.join(m, "train.en")), lines(os.path.join(m, "train.de"))
    assert lines(work / "real.en") == train_en[:500] and lines(work / "real.de") == train_de[:500]
    assert lines(work / "mono.de") == train_de[500:800]
    synth = lines(work / "synth.en")
    assert len(synth) == 300
    assert not set(synth) & set(train_en[500:800]) - {""}, "the English of the monolingual lines leaked"


def test_synthetic_is_the_reverse_models_translation(run_recipe):
    work, _ = run_recipe
    rev = sorted(p for p in os.listdir(work / "reverse") if p.startswith("checkpoint-"))[-1]
    out = work / "again.en"
    subprocess.run([TERN, "translate", "-m", str(work / "reverse" / rev), "--sampling-topk", "5", "--seed", "1",
                    "-t", "1", str(work / "mono.de"), str(out)], check=True, capture_output=True,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert lines(out) == lines(work / "synth.en")


def test_forward_model_used_the_mix(run_recipe):
    work, _ = run_recipe
    log = (work / "forward" / "train.log").read_text()
    kept = {int(k): int(n) for k, n in re.findall(r"train \[(\d+)\]: \d+ pairs, (\d+) kept", log)}
    mix = re.findall(r"mix: epoch 1 corpus (\d+) \((.*?)\): (\d+) pairs drawn, weight (\S+) x (\d+) kept", log)
    assert [m[1] for m in mix] == [str(work / "real.en"), str(work / "synth.en")]
    assert int(mix[0][2]) == kept[0] and kept[0] >= 490
    assert int(mix[1][2]) == int(0.5 * kept[1] + 0.5) and float(mix[1][3]) == 0.5
    res = (work / "RESULTS.txt").read_text()
    print("\n" + res)
    assert "back-translated: 300" in res and "synth.en" in res and "BLEU" in res
