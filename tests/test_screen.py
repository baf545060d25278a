"""The int8 pre-screen of the float32 output projection in greedy search (src/kernels/screen.h,
docs/kernels.md "The int8 pre-screen of the output projection"): with it on (the default) and off
(TERN_SCREEN=0), greedy float32 translation of Multi30k test_2016_flickr (1,000 lines) by the
shipped model (models/en-de, int8 weights run as float32) gives the same output lines.

The screen's candidates provably hold the argmax of every row; their values are summed as oneDNN's
packed float32 kernel sums them (bit for bit, tests/c/test_screen.c), so where the full projection
runs packed ("float32 layer packed" in the TERN_SCREEN_STATS line) every line must be identical.
Where it is not (no packed kernel; under the AVX2 cap Tern's own panels now pack it, with the same
sums) the full projection runs through dnnl_sgemm,
whose summation order differs in the last bits: a near tie could go the other way, so there at
least 99 % of lines must be identical (measured: all). The runs print the mean number of candidates
per row. Beam search never screens (its stats line counts no row)."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
AVX2 = {"TERN_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
STATS = re.compile(r"output projection screen: (\d+) rows, (\d+) candidates \(([0-9.]+) per row\), "
                   r"(\d+) fallbacks, float32 layer (\w+)")


def translate(src, out, screen, env=None, threads=1, beam=1, model=MODEL):
    e = {**os.environ, **(env or {}), "TERN_SCREEN": "1" if screen else "0", "TERN_SCREEN_STATS": "1"}
    r = subprocess.run([TERN, "translate", "-m", str(model), "--compute-type", "float32", "-b", str(beam),
                        "-t", str(threads), "-q", src, str(out)], capture_output=True, text=True, env=e,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return out.read_text(encoding="utf-8").split("\n")[:-1], STATS.search(r.stderr)


@pytest.mark.parametrize("cap,threads", [("none", 1), ("none", 2), ("AVX2", 1)])
def test_greedy_float32_screen_on_off_identical(data_dir, tmp_path, cap, threads):
    src = os.path.join(data_dir, "multi30k", "test_2016_flickr.en")
    env = AVX2 if cap == "AVX2" else None
    off, st_off = translate(src, tmp_path / "off.de", False, env, threads)
    on, st = translate(src, tmp_path / "on.de", True, env, threads)
    assert st_off is None, "TERN_SCREEN=0 still built a screen"
    assert st is not None, "no screen was built for the float32 projection"
    rows, cands, per_row, fallbacks, source = int(st[1]), int(st[2]), float(st[3]), int(st[4]), st[5]
    same = sum(a == b for a, b in zip(off, on))
    print(f"\ncap {cap}, {threads} thread(s): {same}/{len(off)} lines identical; {rows} rows screened, "
          f"{per_row:.2f} candidates per row, {fallbacks} fallbacks; float32 layer {source}")
    assert len(off) == len(on) == 1000
    assert rows > 10000 and cands >= rows
    if source == "packed":
        assert same == len(off)
    else:
        assert same >= 0.99 * len(off)


@pytest.mark.parametrize("cap", ["none", "AVX2"])
def test_greedy_screen_with_banned_tokens(data_dir, tmp_path, cap):
    """Tokens the model never outputs (generation_config.json's bad_words_ids: a Hugging Face
    checkpoint's pad, kept by its conversions) leave greedy search its screened argmax: the model
    gives a row its full logits where the screen's largest is a banned token, the suppression then
    removes it. Banned here: "▁Mann" and "." (often the argmax after the first step, where the
    screen runs), on the first 500 lines of test_2016_flickr: the output equals the unscreened one
    line for line (measured on all 1,000 lines: without the full-logits rows, 104 differ), and no
    output has a banned piece."""
    import json
    d = tmp_path / "m"
    d.mkdir()
    for f in os.listdir(MODEL):
        if f != "generation_config.json":
            os.symlink(os.path.join(MODEL, f), d / f)
    vocab = json.load(open(os.path.join(MODEL, "shared_vocabulary.json"), encoding="utf-8"))
    (d / "generation_config.json").write_text(json.dumps({"bad_words_ids": [[vocab.index("▁Mann")], [vocab.index(".")]]}))
    src = tmp_path / "in.en"
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(500)), encoding="utf-8")
    env = AVX2 if cap == "AVX2" else None
    off, _ = translate(str(src), tmp_path / "off.de", False, env, model=d)
    on, st = translate(str(src), tmp_path / "on.de", True, env, model=d)
    plain, _ = translate(str(src), tmp_path / "plain.de", True, env)
    assert st is not None and int(st[1]) > 5000, "the banned tokens turned the screen off"
    print(f"\ncap {cap}: {int(st[1])} rows screened; {sum(a == b for a, b in zip(on, off))}/{len(off)} lines as "
          f"unscreened; {sum(a != b for a, b in zip(on, plain))} differ from the model without bans")
    assert len(on) == len(off) == 500
    if st[5] == "packed":
        assert on == off
    else:
        assert sum(a == b for a, b in zip(on, off)) >= 0.99 * len(off)
    assert sum(a != b for a, b in zip(on, plain)) > 250
    assert not any(" Mann " in f" {x} " or x.endswith(".") for x in on)


def test_beam_search_does_not_screen(data_dir, tmp_path):
    src = tmp_path / "in.en"
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        src.write_text("".join(next(f) for _ in range(20)), encoding="utf-8")
    off, _ = translate(str(src), tmp_path / "off.de", False, beam=4)
    on, st = translate(str(src), tmp_path / "on.de", True, beam=4)
    assert on == off
    assert st is not None and int(st[1]) == 0
