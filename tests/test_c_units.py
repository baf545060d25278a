"""Runs every C unit-test binary (build/tests/test_*) as one pytest case each."""
import os
import subprocess
import glob
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINS = sorted(glob.glob(os.path.join(ROOT, "build", "tests", "test_*")))


@pytest.mark.parametrize("binary", BINS, ids=[os.path.basename(b) for b in BINS])
def test_c_unit(binary):
    r = subprocess.run([binary], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, f"{binary} failed:\n{r.stdout}\n{r.stderr}"


def test_c_units_were_built():
    sources = glob.glob(os.path.join(ROOT, "tests", "c", "test_*.c"))
    assert len(BINS) == len(sources), "every tests/c/test_*.c must be built (run make)"
