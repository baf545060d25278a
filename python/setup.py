"""Builds tern._tern, a CPython extension over libtern.so (the repository's shared library).

Where libtern comes from (python/README.md, "Building"):
  TERN_ROOT       the repository (default: the parent of this directory, when it holds include/tern.h)
  TERN_BUILD_DIR  the folder with libtern.so (default: $TERN_ROOT/build)
  TERN_NO_MAKE=1  use the libtern.so found there as it is; otherwise `make -C $TERN_ROOT
                  $TERN_BUILD_DIR/libtern.so` runs first (a no-op when it is up to date)
  TERN_VENDOR=0   do not vendor libtern's libraries (below): the package then needs the Debian
                  runtime packages libtern links (libdnnl2, libsentencepiece0, ...) installed
libtern.so is copied into the package next to the extension under its SONAME (libtern.so.MAJOR,
the name the extension asks for), found through the extension's rpath ($ORIGIN). The libraries
libtern needs beyond the C/C++ runtime (oneDNN, SentencePiece, cJSON, utf8proc, xxHash, libgomp,
the OpenCL loader oneDNN links) are vendored as auditwheel's `repair` does: copied into
tern/_libs/ under unique names (NAME-<8 hex digits of their SHA-256>.so.N, their SONAMEs set to
that), the copy of libtern and each other made to ask for those names (patchelf --replace-needed)
and to find them through a RUNPATH ($ORIGIN/_libs for libtern, $ORIGIN within _libs/). Unique names
keep another copy of, say, libdnnl.so.2 that the process loaded first from being used instead.
Not vendored (as in manylinux's policy): glibc's libraries (libc, libm, libdl, libpthread, librt,
ld-linux), libgcc_s and libstdc++. The package's version is TERN_VERSION of include/tern.h, the
one place Tern's version is written.
"""
import glob
import hashlib
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("TERN_ROOT", os.path.join(HERE, "..")))
BUILD = os.path.abspath(os.environ.get("TERN_BUILD_DIR", os.path.join(ROOT, "build")))
LIB = os.path.join(BUILD, "libtern.so")


def tern_version():
    """TERN_VERSION from include/tern.h ("MAJOR.MINOR.PATCH")."""
    header = os.path.join(ROOT, "include", "tern.h")
    try:
        with open(header, encoding="utf-8") as f:
            m = re.search(r'^#define TERN_VERSION "(\d+\.\d+\.\d+)"$', f.read(), re.M)
    except OSError:
        m = None
    if not m:
        raise SystemExit(f"tern: no '#define TERN_VERSION \"X.Y.Z\"' in {header}: set TERN_ROOT to the Tern repository")
    return m.group(1)


VERSION = tern_version()
SONAME = "libtern.so." + VERSION.split(".")[0]


def ensure_libtern():
    if not os.path.exists(os.path.join(ROOT, "include", "tern.h")):
        raise SystemExit(f"tern: no include/tern.h under {ROOT}: set TERN_ROOT to the Tern repository")
    if os.environ.get("TERN_NO_MAKE") != "1":
        rel = os.path.relpath(BUILD, ROOT)
        subprocess.run(["make", "-C", ROOT, f"BUILD={rel}", f"{rel}/libtern.so"], check=True)
    if not os.path.exists(LIB):
        raise SystemExit(f"tern: {LIB} not found: run `make` in {ROOT} (or set TERN_BUILD_DIR)")


# sonames left to the system: glibc's and the GCC runtime's C++ libraries (manylinux's policy
# keeps these too); everything else libtern loads is vendored
SYSTEM_LIBS = re.compile(r"^(linux-vdso|linux-gate|ld-linux[-\w]*|libc|libm|libdl|libpthread|librt|libutil|"
                         r"libresolv|libnsl|libanl|libgcc_s|libstdc\+\+)\.so(\.\d+)*$")


def libtern_deps(lib):
    """{soname: path} of every library the dynamic loader would load for lib (ldd: the whole
    closure), less the system ones."""
    r = subprocess.run(["ldd", lib], capture_output=True, text=True, check=True)
    deps = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*(\S+) => (.*?) \(0x[0-9a-f]+\)$", line)
        if m:
            name, path = m.groups()
        else:
            m = re.match(r"^\s*(\S+) => not found$", line)
            if m:
                raise SystemExit(f"tern: {lib} needs {m.group(1)}, which is not installed (scripts/setup.sh)")
            continue
        if not SYSTEM_LIBS.match(name):
            deps[name] = os.path.realpath(path)
    return deps


def patchelf(*args):
    try:
        r = subprocess.run(["patchelf", *args], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit("tern: vendoring libtern's libraries needs patchelf (Debian: apt-get install patchelf; "
                         "or build with TERN_VENDOR=0 to use the system's libraries)") from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"tern: patchelf {' '.join(args)} failed: {e.stderr.strip()}") from None
    return r.stdout


def patch(path, renamed, soname=None, rpath=None):
    """Sets path's SONAME and RUNPATH and renames its DT_NEEDED entries, one change per patchelf
    run (Debian 12's patchelf 0.14 garbles the dynamic section when one run makes several), then
    reads them back to make sure."""
    needed = patchelf("--print-needed", path).split()
    if soname:
        patchelf("--set-soname", soname, path)
    for old in needed:
        if old in renamed:
            patchelf("--replace-needed", old, renamed[old], path)
    if rpath:
        patchelf("--set-rpath", rpath, path)
    want = [renamed.get(n, n) for n in needed]
    got = patchelf("--print-needed", path).split()
    if got != want or (soname and patchelf("--print-soname", path).strip() != soname) or \
            (rpath and patchelf("--print-rpath", path).strip() != rpath):
        raise SystemExit(f"tern: patchelf did not patch {path} as asked (needed {got}, expected {want})")


def vendor(libtern, libs_dir):
    """Copies libtern's libraries into libs_dir under unique names and points libtern (a copy in
    the package) and them at each other (the module docstring says how)."""
    deps = libtern_deps(libtern)
    shutil.rmtree(libs_dir, ignore_errors=True)
    os.makedirs(libs_dir)
    renamed = {}
    for soname, path in sorted(deps.items()):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:8]
        base, ext = soname.split(".so", 1)
        renamed[soname] = f"{base}-{digest}.so{ext}"
        shutil.copyfile(path, os.path.join(libs_dir, renamed[soname]))
    for new in renamed.values():
        dst = os.path.join(libs_dir, new)
        os.chmod(dst, 0o755)
        patch(dst, renamed, soname=new, rpath="$ORIGIN")
    patch(libtern, renamed, rpath="$ORIGIN/_libs")
    return renamed


class BuildExt(build_ext):
    def run(self):
        ensure_libtern()
        super().run()
        # libtern beside the extension under its SONAME (found through the rpath $ORIGIN);
        # build/libtern.so is a link to it, which copyfile follows. The copy drops libtern's debug
        # information (strip --strip-debug: 4 MB to ~2 MB) and, unless TERN_VENDOR=0, gets the
        # vendored libraries in tern/_libs/.
        dests = [os.path.join(self.build_lib, "tern")]
        if self.inplace:
            dests.append(os.path.join(HERE, "tern"))
        for d in dests:
            os.makedirs(d, exist_ok=True)
            dst = os.path.join(d, SONAME)
            for old in glob.glob(os.path.join(d, "libtern.so*")):  # this copy's and stale ones
                os.remove(old)
            shutil.copyfile(LIB, dst)
            os.chmod(dst, 0o755)
            if shutil.which("strip"):
                subprocess.run(["strip", "--strip-debug", dst], check=True)
            if os.environ.get("TERN_VENDOR", "1") != "0":
                vendor(dst, os.path.join(d, "_libs"))
            else:
                shutil.rmtree(os.path.join(d, "_libs"), ignore_errors=True)
        if os.environ.get("TERN_VENDOR", "1") != "0":
            # the extension's RUNPATH: $ORIGIN alone (a Python built with -Wl,-rpath, as pyenv's, adds
            # its own lib folder through LDSHARED, which means nothing on another machine)
            for e in self.extensions:
                patch(self.get_ext_fullpath(e.name), {}, rpath="$ORIGIN")


ext = Extension(
    "tern._tern",
    sources=["tern/_tern.c"],
    # rebuilt when the header or the library changes, not only the C file (an in-tree build/ is reused)
    depends=[os.path.join(ROOT, "include", "tern.h"), LIB],
    include_dirs=[os.path.join(ROOT, "include")],
    library_dirs=[BUILD],
    libraries=["tern"],
    runtime_library_dirs=["$ORIGIN"],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)

setup(version=VERSION, ext_modules=[ext], cmdclass={"build_ext": BuildExt})
