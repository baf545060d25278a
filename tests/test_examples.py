"""The C API example (examples/translate_api.c) gives exactly what the CLI gives: same n-best
lists, same scores, for the same model and options."""
import os
import re
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


def declared_functions():
    """The functions include/tern.h declares: names followed by '(' outside comments."""
    import re
    with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return set(re.findall(r"\b(tern_[a-z0-9_]+)\s*\(", text))


def test_shared_library_exports_only_the_public_api():
    lib = os.path.join(BUILD, "libtern.so")
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # "ADDR T tern_x@@TERN_1": the name without its symbol version; the version node itself (an
    # absolute symbol, "A TERN_1") is not a function
    exported = {line.split()[-1].split("@")[0] for line in r.stdout.splitlines()
                if line.strip() and line.split()[-2] != "A"}
    declared = declared_functions()
    assert len(declared) > 30
    # nothing the toolchain must export shows up with a version script (local: *); none allowed
    assert exported == declared, (f"exported, not in tern.h: {sorted(exported - declared)}; "
                                  f"in tern.h, not exported: {sorted(declared - exported)}")


def test_example_linked_against_shared_library(spm_model, data_dir):
    shared = os.path.join(BUILD, "examples", "translate_api_shared")
    ldd = subprocess.run(["ldd", shared], capture_output=True, text=True, timeout=60).stdout
    # found through its SONAME, libtern.so.MAJOR (a link to the library build/libtern.so names too)
    assert os.path.realpath(os.path.join(BUILD, "libtern.so")) in {
        os.path.realpath(w) for w in ldd.split() if re.search(r"libtern\.so(\.[0-9]+)*$", w)}, ldd
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        text = "".join([next(f) for _ in range(20)])
    runs = [subprocess.run([os.path.join(BUILD, "examples", b), spm_model["dir"], "4"], input=text.encode(),
                           capture_output=True, timeout=300) for b in ("translate_api_shared", "translate_api")]
    assert runs[0].returncode == 0, runs[0].stderr.decode()
    assert runs[0].stdout.count(b"\n") == 2 * 20
    assert runs[0].stdout == runs[1].stdout
