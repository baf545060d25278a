"""Builds tern._tern, a CPython extension over libtern.so (the repository's shared library).

Where libtern comes from (python/README.md, "Building"):
  TERN_ROOT       the repository (default: the parent of this directory, when it holds include/tern.h)
  TERN_BUILD_DIR  the folder with libtern.so (default: $TERN_ROOT/build)
  TERN_NO_MAKE=1  use the libtern.so found there as it is; otherwise `make -C $TERN_ROOT
                  $TERN_BUILD_DIR/libtern.so` runs first (a no-op when it is up to date)
libtern.so is copied into the package next to the extension under its SONAME (libtern.so.MAJOR,
the name the extension asks for), found through the extension's rpath ($ORIGIN); the Debian
libraries libtern links (oneDNN, SentencePiece, ...) come from the system, as for the CLI
(scripts/setup.sh installs them). The package's version is TERN_VERSION of include/tern.h, the one
place Tern's version is written.
"""
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


class BuildExt(build_ext):
    def run(self):
        ensure_libtern()
        super().run()
        # libtern beside the extension under its SONAME (found through the rpath $ORIGIN);
        # build/libtern.so is a link to it, which copy2 follows
        dests = [os.path.join(self.build_lib, "tern")]
        if self.inplace:
            dests.append(os.path.join(HERE, "tern"))
        for d in dests:
            os.makedirs(d, exist_ok=True)
            shutil.copy2(LIB, os.path.join(d, SONAME))


ext = Extension(
    "tern._tern",
    sources=["tern/_tern.c"],
    include_dirs=[os.path.join(ROOT, "include")],
    library_dirs=[BUILD],
    libraries=["tern"],
    runtime_library_dirs=["$ORIGIN"],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
)

setup(version=VERSION, ext_modules=[ext], cmdclass={"build_ext": BuildExt})
