"""Debian packages: `make deb` (Makefile, debian/; docs/library.md, "Debian packages"), built,
checked, installed and removed again:

  - `make deb` builds tern, libternMAJOR (libtern1: the package follows the SONAME), libtern-dev
    and tern-model-en-de into build-deb/, each with
    the version of include/tern.h (debian/changelog is generated from it and CHANGELOG.md), and
    lintian reports no error (build-deb/lintian.log: no "E:" line);
  - each package holds what it should: tern the executable and its man pages, libternMAJOR the
    library under /usr/lib/<multiarch> with a symbols file listing exactly the functions the
    library exports (those tern.h declares, at symbol version TERN_MAJOR), libtern-dev the link,
    libtern.a, tern.h
    and tern.pc, tern-model-en-de (arch all) /usr/share/tern/models/en-de;
  - installed with `apt-get install ./build-deb/*.deb` (as root; skipped otherwise, saying why):
    `/usr/bin/tern translate -m en-de` (the model found by name) gives what build/tern gives with
    -m models/en-de; examples/translate_api.c built with `pkg-config --cflags --libs tern` loads
    /usr/lib/<multiarch>/libtern.so.MAJOR and prints what build/examples/translate_api prints; man
    finds the pages;
  - `apt-get remove --purge` leaves none of the files `dpkg -L` listed, nor /usr/bin/tern;
  - bad input: `make deb` without debhelper's tools says to run scripts/setup.sh, and a version
    that CHANGELOG.md does not have is refused.
Packages left installed by an earlier run are removed first; the packages are removed at the end
whatever happens (other tests compare an installed tern with build/).
"""
import glob
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")         # the plain build `make deb` reuses (not TERN_BIN's)
DEBS = os.path.join(ROOT, "build-deb")
SENTENCE = "A man is riding a bicycle .\n"
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
APT_LOCK = ["-o", "DPkg::Lock::Timeout=120"]


def version():
    with open(os.path.join(ROOT, "include", "tern.h"), encoding="utf-8") as f:
        return re.search(r'^#define TERN_VERSION "(\d+\.\d+\.\d+)"$', f.read(), re.M).group(1)


LIBPKG = "libtern" + version().split(".")[0]    # the runtime package is named after the SONAME
PACKAGES = ["tern", LIBPKG, "libtern-dev", "tern-model-en-de"]


def run(cmd, **kw):
    kw.setdefault("timeout", 300)
    kw.setdefault("text", True)
    return subprocess.run(cmd, capture_output=True, **kw)


def multiarch():
    return run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()


def installed_packages():
    r = run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *PACKAGES])
    return [line.split()[0] for line in r.stdout.splitlines() if line.endswith(" installed")]


def purge():
    r = run(["apt-get", *APT_LOCK, "remove", "--purge", "-y", *PACKAGES], env=APT_ENV)
    return r


@pytest.fixture(scope="module")
def debs():
    if not os.path.exists(os.path.join(BUILD, "tern")):
        pytest.fail(f"{BUILD}/tern is missing: run make")
    r = run(["make", "--no-print-directory", "-C", ROOT, "deb"], timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    print(r.stdout[-1500:])
    v = version()
    files = {p: os.path.join(DEBS, f"{p}_{v}_{'all' if p == 'tern-model-en-de' else 'amd64'}.deb")
             for p in PACKAGES}
    for p, f in files.items():
        assert os.path.exists(f), (p, sorted(os.listdir(DEBS)))
    return files


def deb_files(deb):
    """The paths a .deb holds (links included, directories left out)."""
    out = run(["dpkg-deb", "-c", deb]).stdout
    paths = []
    for line in out.splitlines():
        name = line.split(None, 5)[5].split(" -> ")[0]
        if not name.endswith("/"):
            paths.append(name[1:])          # "./usr/bin/tern" -> "/usr/bin/tern"
    return sorted(paths)


def test_lintian_no_errors(debs):
    with open(os.path.join(DEBS, "lintian.log"), encoding="utf-8") as f:
        log = f.read()
    print("\nlintian:\n" + log)
    assert not [line for line in log.splitlines() if line.startswith("E:")], log


def test_package_contents(debs):
    v = version()
    major = v.split(".")[0]
    lib = f"/usr/lib/{multiarch()}"
    want = {
        "tern": ["/usr/bin/tern", "/usr/share/man/man1/tern.1.gz", "/usr/share/man/man1/tern-translate.1.gz",
                 "/usr/share/doc/tern/copyright", "/usr/share/doc/tern/changelog.gz"],
        LIBPKG: [f"{lib}/libtern.so.{v}", f"{lib}/libtern.so.{major}", f"/usr/share/doc/{LIBPKG}/copyright"],
        "libtern-dev": [f"{lib}/libtern.so", f"{lib}/libtern.a", "/usr/include/tern.h", f"{lib}/pkgconfig/tern.pc"],
        "tern-model-en-de": ["/usr/share/tern/models/en-de/" + f for f in os.listdir(os.path.join(ROOT, "models", "en-de"))],
    }
    for p, deb in debs.items():
        files = deb_files(deb)
        for f in want[p]:
            assert f in files, (p, f, files)
        fields = run(["dpkg-deb", "-f", deb, "Package", "Version", "Architecture"]).stdout
        assert f"Package: {p}\nVersion: {v}\n" in fields, fields
    # each file in one package only; the library in libternMAJOR, not in tern (which links it statically)
    all_files = [f for deb in debs.values() for f in deb_files(deb)]
    assert len(all_files) == len(set(all_files))
    assert not [f for f in deb_files(debs["tern"]) if "libtern" in f]
    assert run(["dpkg-deb", "-f", debs["tern-model-en-de"], "Architecture"]).stdout.strip() == "all"
    # libternMAJOR ships a symbols file that lists exactly the functions the library exports at
    # each symbol version, which are those the version script gives them (scripts/export_map.sh:
    # TERN_<major> for 1.0.0's functions, TERN_<major>.<minor> for those tern.h marks as added or
    # changed in that release), each with the first version that has it; libtern-dev needs this
    # very libternMAJOR
    ctl = run(["dpkg-deb", "--ctrl-tarfile", debs[LIBPKG]], text=False).stdout
    symbols = subprocess.run(["tar", "-xOf", "-", "./symbols"], input=ctl, capture_output=True).stdout.decode()
    assert f"libtern.so.{major} {LIBPKG}" in symbols and f" tern_model_load@TERN_{major} 1.0.0" in symbols, symbols
    listed = set(re.findall(r"^ (tern_\w+)@(TERN_[0-9.]+) ([0-9.]+)$", symbols, re.M))
    script = run(["sh", os.path.join(ROOT, "scripts", "export_map.sh"), "cc", os.path.join(ROOT, "include", "tern.h"),
                  f"TERN_{major}"]).stdout
    exported = set()
    vt = tuple(int(x) for x in v.split("."))
    for node, body in re.findall(r"^(TERN_[0-9.]+) \{\n  global:\n(.*?)^(?:  local: \*;\n)?\}", script, re.M | re.S):
        since = "1.0.0" if node == f"TERN_{major}" else node.removeprefix("TERN_") + ".0"
        # a node of the next, unreleased minor version (TERN_1.3 while TERN_VERSION is 1.2.0):
        # dpkg-gensymbols gives its symbols the version being built until the release bumps it
        if tuple(int(x) for x in since.split(".")) > vt:
            since = v
        exported |= {(n, node, since) for n in re.findall(r"^\s+(tern_\w+);$", body, re.M)}
    assert len(exported) > 30 and listed == exported, (sorted(listed - exported), sorted(exported - listed))
    dev = run(["dpkg-deb", "-f", debs["libtern-dev"], "Depends"]).stdout
    assert f"{LIBPKG} (= {v})" in dev, dev
    # the changelog says the version of include/tern.h
    data = run(["dpkg-deb", "--fsys-tarfile", debs["tern"]], text=False).stdout
    gz = subprocess.run(["tar", "-xOf", "-", "./usr/share/doc/tern/changelog.gz"], input=data, capture_output=True).stdout
    first = subprocess.run(["gzip", "-dc"], input=gz, capture_output=True).stdout.decode().splitlines()[0]
    assert first.startswith(f"tern ({v}) "), first


def test_changelog_follows_the_version(tmp_path):
    """debian/changelog.sh refuses a version that CHANGELOG.md's newest release is not."""
    ok = run(["sh", os.path.join(ROOT, "debian", "changelog.sh"), version(), os.path.join(ROOT, "CHANGELOG.md")])
    assert ok.returncode == 0 and ok.stdout.startswith(f"tern ({version()}) unstable;"), ok.stderr
    bad = run(["sh", os.path.join(ROOT, "debian", "changelog.sh"), "9.9.9", os.path.join(ROOT, "CHANGELOG.md")])
    assert bad.returncode != 0 and bad.stdout == "", bad.stdout
    assert f"include/tern.h says 9.9.9 but the newest release of" in bad.stderr, bad.stderr


def test_make_deb_without_debhelper(tmp_path):
    r = run(["make", "--no-print-directory", "-C", ROOT, "deb", "DEB_TOOLS=dpkg-buildpackage dh-not-installed",
             f"DEB_DIR={tmp_path}/debs"])
    assert r.returncode != 0
    assert "make deb: 'dh-not-installed' is not installed: run scripts/setup.sh" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "debs")


@pytest.fixture(scope="module")
def installed(debs):
    if os.geteuid() != 0:
        pytest.skip("installing the .debs needs root (apt-get install); CI runs the suite as root")
    if installed_packages():                       # left by an earlier run
        r = purge()
        assert r.returncode == 0, r.stdout + r.stderr
    try:
        r = run(["apt-get", *APT_LOCK, "install", "-y", "--no-install-recommends", *debs.values()], env=APT_ENV)
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(installed_packages()) == sorted(PACKAGES), r.stdout
        listed = {p: run(["dpkg", "-L", p]).stdout.split("\n") for p in PACKAGES}
        yield {p: [f for f in fs if f and f != "/."] for p, fs in listed.items()}
    finally:
        if installed_packages():
            purge()


def test_installed_files(installed, debs):
    for p in PACKAGES:
        for f in deb_files(debs[p]):
            assert f in installed[p], (p, f)
            assert os.path.lexists(f), f
    assert os.access("/usr/bin/tern", os.X_OK)
    r = run(["/usr/bin/tern", "--version"])
    assert r.stdout.strip() == f"tern {version()}", r.stdout
    r = run(["man", "-w", "tern-translate"])
    assert r.returncode == 0 and r.stdout.strip() == "/usr/share/man/man1/tern-translate.1.gz", r.stdout + r.stderr


def test_quick_start(installed, tmp_path):
    """The README's quick start from /usr/bin/tern: the model by name, from a folder without it."""
    env = dict(os.environ)
    env.pop("TERN_MODELS_DIR", None)
    got = run(["/usr/bin/tern", "translate", "-m", "en-de"], input=SENTENCE, env=env, cwd=str(tmp_path))
    assert got.returncode == 0, got.stderr
    want = run([os.path.join(BUILD, "tern"), "translate", "-m", os.path.join(ROOT, "models", "en-de")], input=SENTENCE)
    assert want.returncode == 0, want.stderr
    assert got.stdout == want.stdout and got.stdout.strip(), (got.stdout, want.stdout)


def test_example_through_pkg_config(installed, tmp_path):
    env = dict(os.environ)
    for k in ("PKG_CONFIG_PATH", "LD_LIBRARY_PATH", "TERN_MODELS_DIR"):
        env.pop(k, None)
    flags = run(["pkg-config", "--cflags", "--libs", "tern"], env=env)
    assert flags.returncode == 0 and "-ltern" in flags.stdout, flags.stdout + flags.stderr
    assert run(["pkg-config", "--modversion", "tern"], env=env).stdout.strip() == version()
    exe = str(tmp_path / "translate_api")
    cc = run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe, os.path.join(ROOT, "examples", "translate_api.c"),
              *flags.stdout.split()], env=env, cwd=str(tmp_path))
    assert cc.returncode == 0, cc.stdout + cc.stderr
    ldd = run(["ldd", exe], env=env).stdout
    # /lib is /usr/lib on a merged-/usr system
    assert re.search(rf"libtern\.so\.\d+ => (/usr)?/lib/{multiarch()}/libtern\.so\.\d+ ", ldd), ldd
    got = run([exe, "/usr/share/tern/models/en-de", "4"], input=SENTENCE, env=env)
    assert got.returncode == 0, got.stderr
    want = run([os.path.join(BUILD, "examples", "translate_api"), os.path.join(ROOT, "models", "en-de"), "4"],
               input=SENTENCE)
    assert want.returncode == 0, want.stderr
    assert got.stdout == want.stdout and got.stdout.startswith("0 ||| "), (got.stdout, want.stdout)


def test_remove_leaves_nothing(installed):
    """Last: apt-get remove --purge, then no file of the packages is left."""
    r = purge()
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed_packages() == [], installed_packages()
    left = []
    for p, paths in installed.items():
        for f in paths:
            if os.path.lexists(f) and not (os.path.isdir(f) and not os.path.islink(f)):
                left.append(f)
            # the folders that are the packages' own go too (/usr/share/tern, /usr/share/doc/PKG)
            elif os.path.isdir(f) and (f.startswith("/usr/share/tern") or f.startswith(f"/usr/share/doc/{p}")):
                left.append(f)
    assert left == [], left
    assert not os.path.lexists("/usr/bin/tern")
    assert f"/usr/lib/{multiarch()}/libtern" not in run(["ldconfig", "-p"]).stdout
    # the .debs are still there to install again
    assert len(glob.glob(os.path.join(DEBS, "*.deb"))) == len(PACKAGES)
