"""Shared pytest fixtures: paths to the repository, the tern binary and the shared data."""
import os
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERN = os.path.join(ROOT, "build", "tern")
DATA = os.environ.get("TERN_DATA", os.path.join(ROOT, "..", "shared", "data"))


@pytest.fixture(scope="session")
def tern_bin():
    assert os.path.exists(TERN), "build/tern is missing: run make"
    return TERN


@pytest.fixture(scope="session")
def data_dir():
    if not os.path.isdir(DATA):
        pytest.skip(f"shared data not found at {DATA} (set TERN_DATA)")
    return DATA
