"""The Python wheel (issue 25 point 5): built, installed into a fresh virtual environment and used
with no repository around it.

The wheel is built by `pip wheel --no-build-isolation --no-deps` from a copy of python/ (TERN_ROOT
pointing at this repository, TERN_BUILD_DIR at the build `make` left, so that the in-tree
python/build/ of other builds cannot leak into it), installed with `pip install --no-index
--no-deps` into a new venv of the interpreter that runs the tests (no numpy or anything else: the
package needs only the standard library), and run from a temporary folder holding a copy of
models/en-de, with an environment of PATH, HOME and LANG only (no TERN_*, PYTHONPATH or
LD_LIBRARY_PATH). Checks:
  - `import tern` + Translator.translate_batch (beam 4, no length penalty) gives exactly the lines
    of `build/tern translate -m models/en-de` on the first 20 lines of Multi30k test_2016_flickr;
    `python -m tern translate` and the `tern-nmt` console script give them too;
  - no OpenMPI: OpenMPI is installed on this machine, so (i) no ELF file of the installed package
    asks for (DT_NEEDED) libmpi, libopen-*, libmicrohttpd, libgnutls or libsentencepiece_train, every
    library it asks for is either vendored in tern/_libs or glibc / the GCC C++ runtime, and its
    RUNPATHs are $ORIGIN-relative; (ii) after translating, no libmpi/libopen-/libmicrohttpd is
    mapped (/proc/self/maps) and every mapped library is the package's, the interpreter's or glibc /
    the C++ runtime; (iii) where `unshare -m` works (root), the translation runs again in a private
    mount namespace in which OpenMPI, libmicrohttpd, gnutls and the Debian libraries the wheel
    vendors (oneDNN, SentencePiece, cJSON, utf8proc, xxHash, libgomp, the OpenCL loader) are
    hidden (/dev/null bound over each file, a tmpfs over /usr/lib/x86_64-linux-gnu/openmpi) and so
    is the repository (a tmpfs over it) -- the script first checks that loading them by name now
    fails -- and gives the same lines;
  - the symbol versions the package's libraries need stay within what python/README.md states
    (GLIBC_2.34, GLIBCXX_3.4.30, CXXABI_1.3.13: glibc >= 2.34, libstdc++ of GCC >= 12: the
    vendored ICU 72 calls GCC 12's std::condition_variable::wait);
  - a CPU without AVX2 and FMA (TERN_CPUINFO: a cpuinfo of an Ivy Bridge, which has AVX but no
    AVX2): `import tern`, `python -m tern` and `tern-nmt` exit 1 with the message naming avx2 and fma
    on stderr, and no signal;
  - `tern-nmt translate` with a missing model directory: exit 2, one line naming it, no traceback.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.dirname(os.path.abspath(os.environ.get("TERN_BIN", os.path.join(ROOT, "build", "tern"))))
TERN = os.path.join(BUILD, "tern")
MODEL = os.path.join(ROOT, "models", "en-de")
N_LINES = 20
# libtern's SONAME, libtern.so.MAJOR of TERN_VERSION (include/tern.h): the wheel holds it under that name
with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as _f:
    SONAME = "libtern.so." + re.search(r'^#define TERN_VERSION "(\d+)\.\d+\.\d+"$', _f.read(), re.M).group(1)
# the sonames a wheel may leave to the system (python/setup.py's SYSTEM_LIBS)
SYSTEM = re.compile(r"^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|"
                    r"libgcc_s\.so\.1|libstdc\+\+\.so\.6)$")
FORBIDDEN = re.compile(r"libmpi|libopen-(pal|rte)|libmicrohttpd|libgnutls|libsentencepiece_train")
# the symbol versions python/README.md states (update it together with these)
MAX_VERSIONS = {"GLIBC": (2, 34), "GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13)}
# an Ivy Bridge's flags: AVX and F16C, but no AVX2, FMA, BMI1/2, MOVBE or LZCNT
IVY_BRIDGE = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
              "ht syscall nx rdtscp lm constant_tsc pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 x2apic popcnt aes "
              "xsave avx f16c rdrand lahf_lm")


def run(cmd, env, cwd, **kw):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory, data_dir):
    assert os.path.exists(os.path.join(BUILD, "libtern.so")), "build/libtern.so is missing: run make"
    base = tmp_path_factory.mktemp("wheel")
    src = base / "python"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.so", "*.so.*",
                                                  "_libs"))
    env = dict(os.environ, TERN_ROOT=ROOT, TERN_BUILD_DIR=BUILD, TERN_NO_MAKE="1")
    r = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(base / "dist"),
             str(src)], env, str(base))
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = glob.glob(str(base / "dist" / "tern_nmt-*.whl"))
    assert len(wheels) == 1, wheels
    # honest tag: this CPython, linux_x86_64 (not manylinux: see python/README.md)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert os.path.basename(wheels[0]).endswith(f"-{tag}-{tag}-linux_x86_64.whl"), wheels[0]
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "tern/__main__.py" in names and "tern/_cpu.py" in names and f"tern/{SONAME}" in names
    assert any(re.match(r"tern/_libs/libdnnl-[0-9a-f]{8}\.so\.2$", n) for n in names), names
    assert not any(n.endswith(".c") for n in names), names

    # a fresh venv of the interpreter behind this one (.venv's base: the pyenv or system Python)
    venv = base / "venv"
    py = getattr(sys, "_base_executable", None) or sys.executable
    r = run([py, "-m", "venv", str(venv)], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, str(base))
    assert r.returncode == 0, r.stdout + r.stderr
    vpy = str(venv / "bin" / "python")
    r = run([vpy, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--disable-pip-version-check", wheels[0]],
            {"PATH": "/usr/bin:/bin", "HOME": str(base)}, str(base))
    assert r.returncode == 0, r.stdout + r.stderr

    # a working folder with no repository around: the model and the input copied in
    work = base / "work"
    work.mkdir()
    shutil.copytree(MODEL, work / "en-de")
    with open(os.path.join(data_dir, "multi30k", "test_2016_flickr.en"), encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(N_LINES)]
    (work / "in.txt").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    def cli(*flags):
        r = subprocess.run([TERN, "translate", "-m", MODEL, "-q", "-t", "1", *flags],
                           input=(work / "in.txt").read_text(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out = r.stdout.split("\n")[:-1]
        assert len(out) == N_LINES
        return out

    # the API's beam 4 without length penalty; the CLIs' default: the model's generation_config.json
    want, want_default = cli("-b", "4", "--length-penalty", "0"), cli()
    clean = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    site = run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"], clean, str(work)).stdout.strip()
    return {"venv": venv, "py": vpy, "work": work, "want": want, "want_default": want_default, "env": clean,
            "pkg": os.path.join(site, "tern"),
            "base_prefix": run([vpy, "-c", "import sys; print(sys.base_prefix)"], clean, str(work)).stdout.strip()}


# translates in.txt through the API, prints the output lines, then the mapped libraries after a
# line "--maps--"
TRANSLATE = r"""
import re, tern
tr = tern.Translator("en-de", inter_threads=1, intra_threads=1)
lines = open("in.txt", encoding="utf-8").read().split("\n")[:-1]
for r in tr.translate_batch(lines, beam_size=4, length_penalty=0):
    print(r.hypotheses[0])
print("--maps--")
print(tern.__file__)
for p in sorted(set(re.findall(r"\s(/\S+\.so[\w.+-]*)$", open("/proc/self/maps").read(), re.M))):
    print(p)
"""


def split_maps(out):
    text, maps = out.split("--maps--\n")
    maps = maps.split("\n")[:-1]
    return text.split("\n")[:-1], maps[0], maps[1:]


def test_wheel_translates_without_repository(wheel_env):
    w = wheel_env
    r = run([w["py"], "-c", TRANSLATE], w["env"], str(w["work"]))
    assert r.returncode == 0, r.stderr
    got, init, maps = split_maps(r.stdout)
    assert init == os.path.join(w["pkg"], "__init__.py"), init
    assert got == w["want"]
    assert not [m for m in maps if FORBIDDEN.search(m)], maps
    assert not [m for m in maps if m.startswith(ROOT + os.sep)], maps
    for m in maps:
        soname = re.match(r"^(.*?\.so(?:\.\d+)?)", os.path.basename(m)).group(1)  # libstdc++.so.6.0.30: libstdc++.so.6
        ok = m.startswith(w["pkg"] + os.sep) or m.startswith(w["base_prefix"] + os.sep) or SYSTEM.match(soname)
        assert ok, f"{m} is mapped: neither the package's, the interpreter's nor glibc / the C++ runtime"
    assert any("/_libs/libdnnl-" in m for m in maps), maps


def test_cli_and_entry_point(wheel_env):
    w = wheel_env
    with open(w["work"] / "in.txt", "rb") as f:
        r = run([w["py"], "-m", "tern", "translate", "-m", "en-de", "-t", "1"], w["env"], str(w["work"]), stdin=f)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:-1] == w["want_default"]  # the model's decoding defaults, as tern translate
    out = w["work"] / "out.txt"
    r = run([str(w["venv"] / "bin" / "tern-nmt"), "translate", "-m", "en-de", "-t", "1", "--max-batch-size", "3",
             "-b", "4", "--length-penalty", "0", "in.txt", str(out)], w["env"], str(w["work"]))
    assert r.returncode == 0, r.stderr
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == w["want"]
    # a missing model directory: one line naming it, exit 2
    r = run([str(w["venv"] / "bin" / "tern-nmt"), "translate", "-m", "no-such-model"], w["env"], str(w["work"]),
            stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr == "tern-nmt: model directory 'no-such-model' does not exist\n", r.stderr


def elf_files(pkg):
    out = []
    for dirpath, _, files in os.walk(pkg):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    out.append(p)
    return out


def test_dependencies_vendored_no_mpi(wheel_env):
    pkg = wheel_env["pkg"]
    elfs = elf_files(pkg)
    vendored = {os.path.basename(p) for p in glob.glob(os.path.join(pkg, "_libs", "*"))}
    assert len(elfs) == 2 + len(vendored), elfs  # _tern, libtern.so.MAJOR and _libs/
    maxv = {}
    for p in elfs:
        d = subprocess.run(["readelf", "-d", "-W", p], capture_output=True, text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", d)
        bad = [n for n in needed if FORBIDDEN.search(n)]
        assert not bad, (p, bad)
        for n in needed:
            assert n in vendored or n == SONAME or SYSTEM.match(n), f"{p} needs {n}: neither vendored nor glibc / the C++ runtime"
        for rp in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", d):
            assert all(x.startswith("$ORIGIN") for x in rp.split(":")), (p, rp)
        v = subprocess.run(["readelf", "-V", "-W", p], capture_output=True, text=True, check=True).stdout
        for name, ver in re.findall(r"Name: (GLIBC|GLIBCXX|CXXABI)_([\d.]+)", v):
            t = tuple(int(x) for x in ver.split("."))
            maxv[name] = max(maxv.get(name, t), t)
    for name, t in maxv.items():
        assert t <= MAX_VERSIONS[name], (f"{name}_{'.'.join(map(str, t))} needed: more than python/README.md says "
                                         f"({name}_{'.'.join(map(str, MAX_VERSIONS[name]))}); update both")


# run in a private mount namespace: OpenMPI, libmicrohttpd, gnutls, the libraries the wheel vendors
# and the repository hidden; first checks the hiding took
HIDDEN_LIBS = ("libmpi", "libopen-pal", "libopen-rte", "libmicrohttpd", "libgnutls", "libdnnl", "libsentencepiece",
               "libcld2", "libcjson", "libutf8proc", "libxxhash", "libgomp", "libOpenCL")
HIDE = r"""
set -eu
LIB=/usr/lib/x86_64-linux-gnu
[ -d $LIB/openmpi ] && mount -t tmpfs none $LIB/openmpi
for f in {pats}; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; fi
done
mount -t tmpfs none "{root}"
exec "$@"
"""
CHECK_HIDDEN = r"""
import ctypes, os, sys
assert not os.listdir(sys.argv[1]), "the repository is still visible"
for name in ("libmpi.so.40", "libmicrohttpd.so.12", "libdnnl.so.2", "libsentencepiece.so.0", "libgomp.so.1"):
    try:
        ctypes.CDLL(name)
    except OSError:
        continue
    raise SystemExit(f"{name} still loads")
"""


def test_wheel_with_mpi_and_debian_libraries_hidden(wheel_env):
    w = wheel_env
    if not shutil.which("unshare") or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("unshare -m is not permitted here (not root): the readelf and /proc/self/maps checks stand")
    pats = " ".join(f"/usr/lib/x86_64-linux-gnu/{p}*.so*" for p in HIDDEN_LIBS)
    script = HIDE.replace("{pats}", pats).replace("{root}", ROOT)
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
    r = run(cmd + [w["py"], "-c", CHECK_HIDDEN, ROOT], w["env"], str(w["work"]))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(cmd + [w["py"], "-c", TRANSLATE], w["env"], str(w["work"]))
    assert r.returncode == 0, r.stderr
    got, _, maps = split_maps(r.stdout)
    assert got == w["want"]
    assert not [m for m in maps if FORBIDDEN.search(m)], maps


def test_cpu_without_avx2_refused(wheel_env):
    w = wheel_env
    fake = w["work"] / "cpuinfo-ivybridge"
    fake.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Core(TM) i7-3770\n"
                    f"flags\t\t: {IVY_BRIDGE}\n\n", encoding="utf-8")
    env = dict(w["env"], TERN_CPUINFO=str(fake))
    cmds = [[w["py"], "-c", "import tern"],
            [w["py"], "-m", "tern", "translate", "-m", "en-de"],
            [str(w["venv"] / "bin" / "tern-nmt"), "translate", "-m", "en-de"]]
    for cmd in cmds:
        r = run(cmd, env, str(w["work"]), stdin=subprocess.DEVNULL)
        assert r.returncode == 1, (cmd, r.returncode, r.stderr)  # an exception's exit, not a signal
        last = r.stderr.strip().split("\n")[-1]
        assert last.startswith("ImportError: tern: Tern's wheel needs an x86-64 CPU with AVX2 and FMA"), r.stderr
        lacks = last.split("this CPU lacks: ")[1].split(".")[0].split(", ")
        assert "avx2" in lacks and "fma" in lacks and "avx" not in lacks, lacks
        assert not r.stdout
