"""The C API example (examples/translate_api.c) gives exactly what the CLI gives: same n-best
lists, same scores, for the same model and options."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.dirname(os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern")))


def test_c_api_example_matches_cli(spm_model, data_dir):
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        text = "".join([next(f) for _ in range(40)]) + "\n"   # and one empty line
    ex = subprocess.run([os.path.join(BUILD, "examples", "translate_api"), spm_model["dir"], "4"],
                        input=text.encode(), capture_output=True, timeout=300)
    assert ex.returncode == 0, ex.stderr.decode()
    cli = subprocess.run([os.path.join(BUILD, "tern"), "translate", "-m", spm_model["dir"], "-b", "4",
                          "-n", "2", "-q", "-t", "1"], input=text.encode(), capture_output=True, timeout=300)
    assert cli.returncode == 0, cli.stderr.decode()
    assert ex.stdout.count(b"\n") == 2 * 41
    assert ex.stdout == cli.stdout


def test_c_api_example_reports_errors(tmp_path):
    ex = subprocess.run([os.path.join(BUILD, "examples", "translate_api"), str(tmp_path)],
                        input=b"x\n", capture_output=True, timeout=60)
    assert ex.returncode == 1
    assert str(tmp_path) in ex.stderr.decode() and "no model.safetensors or model.bin" in ex.stderr.decode()
