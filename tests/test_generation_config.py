"""A model directory's decoding defaults (generation_config.json, src/model/generation.h): read at
load, shown by `tern info`, used by `tern translate` wherever no flag is given (a flag wins, field by
field), and refused with a message naming the file and the key when malformed. The model is the
shipped models/en-de, its tensors and vocabularies linked into a temporary directory with a
generation_config.json of each test's own."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "en-de")
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
LINES = ["A man is riding a bicycle .", "Two dogs play in the snow .", "A little girl in a red dress is "
         "smiling at the camera while her brother climbs a tree .", "People ."] * 3


def model_with(tmp_path, text):
    d = tmp_path / "m"
    d.mkdir()
    for f in os.listdir(MODEL):
        if f != "generation_config.json":
            os.symlink(os.path.join(MODEL, f), d / f)
    if text is not None:
        (d / "generation_config.json").write_text(text)
    return d


def run(*args):
    return subprocess.run([TERN, *map(str, args)], capture_output=True, text=True, timeout=300,
                          input="".join(l + "\n" for l in LINES))


def translate(d, *flags):
    r = run("translate", "-m", d, "-t", "1", "-q", *flags)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == len(LINES)
    return r.stdout


def info(d):
    r = run("info", "-m", d)
    assert r.returncode == 0, r.stderr
    return dict(line.split(": ", 1) for line in r.stdout.strip().split("\n"))


def test_bad_words_ids_never_generated(tmp_path):
    """bad_words_ids (transformers' key: what a directory converted from a Hugging Face checkpoint, or
    fine-tuned from one, keeps of the tokens the model never generates) is honoured in any model
    directory: greedy output = the same model with --suppress of that piece, and not the plain one."""
    import json
    vocab = json.load(open(os.path.join(MODEL, "shared_vocabulary.json")))
    d = model_with(tmp_path, '{"bad_words_ids": [[%d]]}' % vocab.index("▁Mann"))
    (tmp_path / "suppress.txt").write_text("▁Mann\n")
    banned = translate(d, "-b", "1")
    assert banned == translate(MODEL, "-b", "1", "--suppress", tmp_path / "suppress.txt")
    assert banned != translate(MODEL, "-b", "1") and "Mann" in translate(MODEL, "-b", "1")


def test_defaults_are_used_and_flags_win(tmp_path):
    # transformers' keys (max_length counts the start token) beside ones Tern ignores
    d = model_with(tmp_path, '{"num_beams": 2, "length_penalty": 0.0, "max_length": 7, "min_length": 3, '
                             '"transformers_version": "4.40.0", "pad_token_id": 3}')
    f = info(d)
    assert f["decoding_defaults"] == str(d / "generation_config.json")
    assert (f["beam_size"], f["length_penalty"], f["max_decoding_length"], f["min_length"]) == ("2", "0", "6", "2")
    base = ["--length-penalty", "0", "--max-decoding-length", "6", "--min-length", "2"]
    assert translate(d) == translate(MODEL, "-b", "2", *base)
    # a flag wins for its field only; the others stay the model's
    assert translate(d, "-b", "1") == translate(MODEL, "-b", "1", *base)
    assert translate(d, "--max-decoding-length", "40") == translate(MODEL, "-b", "2", "--length-penalty", "0",
                                                                    "--max-decoding-length", "40", "--min-length", "2")
    # the defaults change the output here (6 tokens at most): they are really used
    assert translate(d) != translate(MODEL, "-b", "2", "--length-penalty", "0")


def test_length_penalty_defaults_to_transformers_one(tmp_path):
    d = model_with(tmp_path, '{"num_beams": 3}')
    assert info(d)["length_penalty"] == "1"
    assert translate(d) == translate(MODEL, "-b", "3", "--length-penalty", "1")


def test_no_file_means_terns_defaults(tmp_path):
    d = model_with(tmp_path, None)
    f = info(d)
    assert f["decoding_defaults"].startswith("Tern's")
    assert (f["beam_size"], f["length_penalty"], f["max_decoding_length"], f["min_length"]) == ("4", "0", "256", "1")
    assert translate(d) == translate(MODEL, "-b", "4", "--length-penalty", "0")


@pytest.mark.parametrize("text,words", [
    ('{"num_beams": "five"}', ['"num_beams"', "integer"]),
    ('{"num_beams": 2.5}', ['"num_beams"', "integer"]),
    ('{"num_beams": 0}', ['"num_beams"', "[1, 1024]"]),
    ('{"length_penalty": -1}', ['"length_penalty"']),
    ('{"length_norm": "wu"}', ['"length_norm"', '"gnmt"']),
    ('{"num_beams": 2, "num_return_sequences": 3}', ['"num_return_sequences" (3) exceeds "num_beams" (2)']),
    ('{"num_beams": 2', ["not a JSON object"]),
    ('[1, 2]', ["not a JSON object"]),
    ('', ["not a JSON object"]),
])
def test_malformed_file_is_named(tmp_path, text, words):
    d = model_with(tmp_path, text)
    for cmd in (("translate", "-m", d, "-q"), ("info", "-m", d)):
        r = run(*cmd)
        assert r.returncode != 0 and r.stdout == ""
        assert str(d / "generation_config.json") in r.stderr, r.stderr
        for w in words:
            assert w in r.stderr, r.stderr
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_convert_carries_the_file(tmp_path):
    d = model_with(tmp_path, '{"num_beams": 2, "length_penalty": 0.5}')
    r = run("convert", "--from", d, "-o", tmp_path / "c", "--quantize", "float16")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c" / "generation_config.json").read_text() == (d / "generation_config.json").read_text()
    f = info(tmp_path / "c")
    assert (f["beam_size"], f["length_penalty"]) == ("2", "0.5")
