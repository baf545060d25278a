"""`make install` and `make uninstall` (Makefile, scripts/install.sh), on the build the suite runs
after `make` (build/, or the folder of TERN_BIN), into temporary prefixes:

  - the files: bin/tern, lib/libtern.so.X.Y.Z with its SONAME libtern.so.X and the links
    libtern.so.X and libtern.so, lib/libtern.a (the runtime only), include/tern.h,
    lib/pkgconfig/tern.pc, share/man/man1/tern.1 and tern-COMMAND.1 for every command `tern --help`
    lists (`man -l` renders them), share/tern/models/en-de, share/doc/tern (LICENSE, CHANGELOG.md);
  - one version everywhere: TERN_VERSION of include/tern.h = `tern --version` = the SONAME's and
    the file name's = tern.pc's = CHANGELOG.md's latest release;
  - examples/translate_api.c built with `pkg-config --cflags --libs tern` against the installed
    copy and run: it loads the installed libtern.so and prints what build/examples/translate_api
    prints;
  - the lean runtime: `ldd` of the installed libtern.so shows no MPI, no libmicrohttpd/GnuTLS, no
    libsentencepiece_train, and its libtern.a holds no training or server object;
  - models by name: the installed `tern translate -m en-de`, run where no en-de folder is, gives
    what build/tern gives with -m models/en-de; TERN_MODELS_DIR adds folders; a missing name is an
    error that lists where it looked and the models found there;
  - the ABI rule of tern.h (struct_size): set by the defaults, 0 read as the known layout, a larger
    one refused with a message naming the struct;
  - DESTDIR staging (tern.pc names the PREFIX, not the staging folder);
  - bad input: an unwritable prefix fails with a clear message and writes nothing;
  - `make uninstall` leaves no file behind;
  - the CPU guard of the tern executable (tools/cpu_guard.c): on a CPU without x86-64-v3's
    features (simulated by the test hook TERN_FAKE_NO_CPU_FEATURES) tern names the missing ones and
    exits 1 before any x86-64-v3 code runs; the guard's object holds no VEX-encoded (AVX) or
    BMI/MOVBE instruction, and it is in the executable only, not in libtern.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))
BUILD = os.path.dirname(os.path.abspath(TERN))
SENTENCE = "A man is riding a bicycle .\n"


def version():
    with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as f:
        return re.search(r'^#define TERN_VERSION "(\d+\.\d+\.\d+)"$', f.read(), re.M).group(1)


def make(*args, **kw):
    return subprocess.run(["make", "--no-print-directory", "-C", ROOT, f"BUILD={os.path.relpath(BUILD, ROOT)}",
                           *args], capture_output=True, text=True, timeout=600, **kw)


def files_under(d):
    """Every file and link under d (relative paths), directories left out."""
    out = []
    for base, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(base, f), d) for f in files]
        out += [os.path.relpath(os.path.join(base, x), d) for x in dirs if os.path.islink(os.path.join(base, x))]
    return sorted(out)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not os.path.exists(TERN):
        pytest.fail(f"{TERN} is missing: run make")
    p = str(tmp_path_factory.mktemp("prefix") / "usr")
    r = make("install", f"PREFIX={p}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"installed tern {version()} under {p}" in r.stdout, r.stdout
    return p


def env_for(prefix, **extra):
    env = dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ.get("PATH", ""),
               LD_LIBRARY_PATH=os.path.join(prefix, "lib"), PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    env.pop("TERN_MODELS_DIR", None)
    env.update(extra)
    return env


def test_installed_files(prefix):
    v = version()
    major = v.split(".")[0]
    files = set(files_under(prefix))
    for f in ["bin/tern", f"lib/libtern.so.{v}", f"lib/libtern.so.{major}", "lib/libtern.so", "lib/libtern.a",
              "include/tern.h", "lib/pkgconfig/tern.pc", "share/man/man1/tern.1", "share/man/man1/tern-translate.1",
              "share/tern/models/en-de/config.json", "share/tern/models/en-de/model.safetensors",
              "share/tern/models/en-de/sentencepiece.model", "share/tern/models/en-de/shared_vocabulary.json",
              "share/doc/tern/LICENSE", "share/doc/tern/CHANGELOG.md"]:
        assert f in files, (f, sorted(files))
    lib = os.path.join(prefix, "lib")
    assert os.readlink(os.path.join(lib, f"libtern.so.{major}")) == f"libtern.so.{v}"
    assert os.readlink(os.path.join(lib, "libtern.so")) == f"libtern.so.{major}"
    assert not os.path.islink(os.path.join(lib, f"libtern.so.{v}"))
    assert os.access(os.path.join(prefix, "bin", "tern"), os.X_OK)
    # the model as shipped, byte for byte
    for f in os.listdir(os.path.join(ROOT, "models", "en-de")):
        with open(os.path.join(ROOT, "models", "en-de", f), "rb") as a, \
                open(os.path.join(prefix, "share", "tern", "models", "en-de", f), "rb") as b:
            assert a.read() == b.read(), f
    # nothing left from the atomic copies
    assert not [f for f in files if ".tmp" in f], files


def test_one_version_everywhere(prefix):
    v = version()
    major = v.split(".")[0]
    r = subprocess.run([os.path.join(prefix, "bin", "tern"), "--version"], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == f"tern {v}", r.stdout
    dyn = subprocess.run(["readelf", "-d", os.path.join(prefix, "lib", "libtern.so")], capture_output=True, text=True,
                         timeout=60).stdout
    assert re.search(rf"\(SONAME\)\s+Library soname: \[libtern\.so\.{major}\]", dyn), dyn
    r = subprocess.run(["pkg-config", "--modversion", "tern"], env=env_for(prefix), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == v, r.stdout + r.stderr
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", f.read(), re.M)
    assert releases and releases[0] == v, releases
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        assert f.readline().strip() == "MIT License"


def test_man_pages(prefix):
    man1 = os.path.join(prefix, "share", "man", "man1")
    listing = subprocess.run([TERN, "--help"], capture_output=True, text=True, timeout=60).stdout
    cmds = re.findall(r"^  ([a-z][a-z-]*)  ", listing.split("commands:")[1], re.M)
    assert "translate" in cmds and "serve" in cmds, cmds
    assert sorted(os.listdir(man1)) == sorted(["tern.1"] + [f"tern-{c}.1" for c in cmds])
    r = subprocess.run(["man", "-l", os.path.join(man1, "tern-translate.1")], env=dict(os.environ, MANWIDTH="100"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = re.sub(r".\x08", "", r.stdout)
    assert "tern-translate - translate text with a model" in text, text[:500]
    assert "--beam-size" in text and "SYNOPSIS" in text and f"tern {version()}" in text
    help_text = subprocess.run([TERN, "translate", "--help"], capture_output=True, text=True, timeout=60).stdout
    for line in help_text.splitlines():      # every option line of --help is in the page
        if line.strip().startswith("--"):
            assert line.split()[0] in text, line


def test_example_through_pkg_config(prefix, tmp_path):
    env = env_for(prefix)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "tern"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert flags.returncode == 0, flags.stderr
    assert f"-I{prefix}/include" in flags.stdout and f"-L{prefix}/lib" in flags.stdout, flags.stdout
    exe = str(tmp_path / "translate_api")
    cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe,
                         os.path.join(ROOT, "examples", "translate_api.c"), *flags.stdout.split()],
                        capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert cc.returncode == 0, cc.stdout + cc.stderr
    ldd = subprocess.run(["ldd", exe], env=env, capture_output=True, text=True, timeout=60).stdout
    assert re.search(rf"libtern\.so\.\d+ => {re.escape(prefix)}/lib/libtern\.so\.\d+ ", ldd), ldd
    model = os.path.join(prefix, "share", "tern", "models", "en-de")
    got = subprocess.run([exe, model, "4"], input=SENTENCE, env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    want = subprocess.run([os.path.join(BUILD, "examples", "translate_api"), os.path.join(ROOT, "models", "en-de"), "4"],
                          input=SENTENCE, capture_output=True, text=True, timeout=300)
    assert want.returncode == 0, want.stderr
    assert got.stdout == want.stdout and got.stdout.startswith("0 ||| "), (got.stdout, want.stdout)


def test_runtime_library_is_lean(prefix):
    lib = os.path.join(prefix, "lib", "libtern.so")
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=60)
    assert ldd.returncode == 0, ldd.stderr
    print("\nldd " + lib + ":\n" + ldd.stdout)
    needed = [line.split()[0] for line in ldd.stdout.splitlines() if line.strip()]
    for bad in ("libmpi", "libopen-rte", "libopen-pal", "libmicrohttpd", "libgnutls", "libsentencepiece_train"):
        assert not [n for n in needed if n.startswith(bad)], (bad, needed)
    assert "not found" not in ldd.stdout, ldd.stdout
    # what it does link: the inference libraries
    for good in ("libdnnl", "libsentencepiece.so", "libcld2.so", "libcld2_full.so", "libcjson", "libutf8proc", "libxxhash"):
        assert [n for n in needed if n.startswith(good)], (good, needed)
    # the static runtime holds neither training nor the server
    members = subprocess.run(["ar", "t", os.path.join(prefix, "lib", "libtern.a")], capture_output=True, text=True,
                             timeout=60).stdout.split()
    assert "translator.o" in members and "spm.o" in members, members
    for bad in ("trainer.o", "dist.o", "optim.o", "spm_train.o", "server.o", "engine.o"):
        assert bad not in members, (bad, members)


def test_model_by_name(prefix, tmp_path):
    env = env_for(prefix)
    installed = subprocess.run(["tern", "translate", "-m", "en-de"], input=SENTENCE, env=env, cwd=str(tmp_path),
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    built = subprocess.run([TERN, "translate", "-m", os.path.join(ROOT, "models", "en-de")], input=SENTENCE,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert installed.stdout == built.stdout and installed.stdout.strip(), (installed.stdout, built.stdout)
    # TERN_MODELS_DIR: more folders of models, searched first
    extra = tmp_path / "more"
    extra.mkdir()
    os.symlink(os.path.join(ROOT, "models", "en-de"), str(extra / "mine"))
    r = subprocess.run(["tern", "translate", "-m", "mine"], input=SENTENCE, cwd=str(tmp_path),
                       env=env_for(prefix, TERN_MODELS_DIR=f"/nonexistent:{extra}"), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout == built.stdout, r.stderr
    # a path that exists is used as it is, even with a name's shape
    os.symlink(os.path.join(ROOT, "models", "en-de"), str(tmp_path / "here"))
    r = subprocess.run(["tern", "info", "-m", "here"], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr


def test_missing_model_name(prefix, tmp_path):
    for args in (["translate", "-m", "xx-yy"], ["info", "-m", "xx-yy"], ["rescore", "-m", "xx-yy", "-s", "a", "--target", "b"]):
        r = subprocess.run(["tern", *args], input="", env=env_for(prefix, TERN_MODELS_DIR=str(tmp_path / "none")),
                           cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        err = r.stderr
        assert f"tern {args[0]}: no model 'xx-yy'" in err, err
        assert f"{prefix}/share/tern/models (models: en-de)" in err, err
        assert f"{tmp_path}/none (no such folder)" in err, err
        assert "TERN_MODELS_DIR" in err, err


def test_struct_size_abi(prefix):
    """tern.h's struct_size rule through ctypes on the installed library (in a child process)."""
    code = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
class Chrf(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t)] + [(n, ctypes.c_int) for n in
                ("char_order", "word_order", "beta", "lowercase", "whitespace", "eps_smoothing")]
lib.tern_chrf_default_options.restype = Chrf
lib.tern_last_error.restype = ctypes.c_char_p
o = lib.tern_chrf_default_options()
assert o.struct_size == ctypes.sizeof(Chrf) == 32, o.struct_size
hyp = (ctypes.c_char_p * 1)(b"Ein Mann fahrt Fahrrad .")
ref = (ctypes.c_char_p * 1)(b"Ein Mann fahrt ein Fahrrad .")
refs = (ctypes.POINTER(ctypes.c_char_p) * 1)(ctypes.cast(ref, ctypes.POINTER(ctypes.c_char_p)))
def chrf(opt):
    s = ctypes.c_double()
    st = lib.tern_corpus_chrf(ctypes.byref(s), hyp, refs, ctypes.c_size_t(1), 1, ctypes.byref(opt))
    return st, s.value
st, want = chrf(o)
assert st == 0 and 0 < want < 100, (st, want)
o.struct_size = 0                     # zeroed by hand: the known layout
assert chrf(o) == (0, want)
o.struct_size = 4096                  # a newer tern.h than this library
st, _ = chrf(o)
assert st == 5, st                    # TERN_ERR_INVALID_ARG
msg = lib.tern_last_error().decode()
assert "tern_chrf_options_t.struct_size is 4096" in msg, msg
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code, os.path.join(prefix, "lib", "libtern.so")], env=env_for(prefix),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_destdir_staging(tmp_path):
    stage = tmp_path / "stage"
    r = make("install", f"DESTDIR={stage}", "PREFIX=/opt/tern")
    assert r.returncode == 0, r.stdout + r.stderr
    root = stage / "opt" / "tern"
    assert (root / "bin" / "tern").exists() and (root / "share" / "tern" / "models" / "en-de" / "config.json").exists()
    pc = (root / "lib" / "pkgconfig" / "tern.pc").read_text()
    assert "prefix=/opt/tern\n" in pc and str(stage) not in pc, pc
    r = make("uninstall", f"DESTDIR={stage}", "PREFIX=/opt/tern")
    assert r.returncode == 0, r.stdout + r.stderr
    assert files_under(str(stage)) == []


def test_unwritable_prefix(tmp_path):
    r = make("install", "PREFIX=/proc/forbidden")
    assert r.returncode != 0
    assert "make install: cannot write to /proc/forbidden/" in r.stderr, r.stderr
    assert "Nothing was installed" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # a read-only folder (root may write anywhere but on a read-only mount, so /proc stands for it
    # above; an unprivileged user gets the same message from a folder without write permission)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        r = make("install", f"PREFIX={ro}/usr")
        assert r.returncode != 0 and "make install: cannot write to" in r.stderr, r.stderr
        assert files_under(str(ro)) == []


CPU_MESSAGE = ("tern: this build needs an x86-64 CPU with AVX2 and FMA (x86-64-v3: Intel Haswell, AMD Zen or newer); "
               "this CPU lacks: ")


@pytest.mark.parametrize("fake, lacks", [("avx2,fma", "avx2 fma"), ("fma", "fma"), ("avx2 bmi2 movbe", "avx2 bmi2 movbe")])
def test_cpu_guard(prefix, tmp_path, fake, lacks):
    """tools/cpu_guard.c: the built and the installed tern refuse a CPU that lacks x86-64-v3's features
    (TERN_FAKE_NO_CPU_FEATURES, a test hook, simulates one) with one line naming them and exit 1,
    whatever the command; without the hook they run."""
    for exe, env in ((TERN, dict(os.environ)), ("tern", env_for(prefix))):
        for args in (["--version"], ["translate", "-m", os.path.join(ROOT, "models", "en-de")]):
            r = subprocess.run([exe, *args], input=SENTENCE, env=dict(env, TERN_FAKE_NO_CPU_FEATURES=fake),
                               cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
            assert (r.returncode, r.stdout, r.stderr) == (1, "", CPU_MESSAGE + lacks + "\n"), (exe, args, r)
        r = subprocess.run([exe, "--version"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == f"tern {version()}", (exe, r)


def test_cpu_guard_is_baseline_x86_64():
    """The guard runs on any x86-64 CPU: its object has no instruction beyond baseline x86-64 (no
    VEX-encoded AVX/AVX2/FMA/F16C, no BMI1/2, LZCNT or MOVBE), and it is the tern executable's, not
    libtern's (the library never exits)."""
    obj = os.path.join(BUILD, "tools", "cpu_guard.o")
    d = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True, timeout=60)
    assert d.returncode == 0 and "<tern_cpu_guard>:" in d.stdout, d.stderr
    mnemonics = {line.split("\t")[1].split()[0] for line in d.stdout.splitlines()
                 if line.count("\t") >= 1 and line.split("\t")[1].strip()}
    beyond = {m for m in mnemonics if re.match(r"^(v[a-z]|andn$|bextr|bls|bzhi|pdep|pext|rorx|sarx|shlx|shrx|mulx|"
                                              r"lzcnt|tzcnt|movbe)", m)}
    assert mnemonics and not beyond, sorted(beyond)
    for lib in ("libtern.so", "libtern.a"):
        syms = subprocess.run(["nm", "-A", os.path.join(BUILD, lib)], capture_output=True, text=True, timeout=60)
        assert "tern_cpu_guard" not in syms.stdout, lib


def test_uninstall_leaves_nothing(prefix):
    """Last: removes what the module's fixture installed."""
    r = make("uninstall", f"PREFIX={prefix}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert files_under(prefix) == [], files_under(prefix)
    assert not os.path.exists(os.path.join(prefix, "share", "tern"))
    shutil.rmtree(prefix)
