"""Builds tern._tern, a CPython extension over libtern.so (the repository's shared library).

Where libtern comes from (python/README.md, "Building"):
  TERN_ROOT       the repository (default: the parent of this directory, when it holds include/tern.h)
  TERN_BUILD_DIR  the folder with libtern.so (default: $TERN_ROOT/build)
  TERN_NO_MAKE=1  use the libtern.so found there as it is; otherwise `make -C $TERN_ROOT
                  $TERN_BUILD_DIR/libtern.so` runs first (a no-op when it is up to date)
libtern.so is copied into the package next to the extension, which finds it through its rpath
($ORIGIN); the Debian libraries libtern links (oneDNN, OpenBLAS, SentencePiece, ...) come from the
system, as for the CLI (scripts/setup.sh installs them).
"""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.environ.get("TERN_ROOT", os.path.join(HERE, "..")))
BUILD = os.path.abspath(os.environ.get("TERN_BUILD_DIR", os.path.join(ROOT, "build")))
LIB = os.path.join(BUILD, "libtern.so")


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
        # libtern.so beside the extension (found through the rpath $ORIGIN)
        dests = [os.path.join(self.build_lib, "tern")]
        if self.inplace:
            dests.append(os.path.join(HERE, "tern"))
        for d in dests:
            os.makedirs(d, exist_ok=True)
            shutil.copy2(LIB, os.path.join(d, "libtern.so"))


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

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
