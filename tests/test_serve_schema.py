"""Schema fuzzing of `tern serve`: schemathesis reads the OpenAPI description the server serves
at /openapi.json and sends generated requests (examples, boundary cases, random fuzzing) to every
operation. Checks: no 5xx, status codes, content types, headers and bodies as described,
schema-violating requests refused, undeclared methods answered 405 with Allow. Not checked:
"every schema-valid request is accepted" -- the description cannot state the limits that depend
on each other or on the server's options (num_hypotheses <= beam_size, a model named in `model`
that is loaded, characters per request): those are refused with 400 on purpose.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import Server  # noqa: E402

pytest.importorskip("schemathesis", reason="schemathesis not installed (tests/requirements.txt)")
ST = os.path.join(os.path.dirname(sys.executable), "schemathesis")


def test_schemathesis_finds_nothing(tmp_path):
    assert os.path.exists(ST), f"schemathesis CLI not found beside {sys.executable}"
    # short decodes keep the run bounded; the fuzzer sends up to 50 examples per operation
    s = Server(tmp_path, "--max-decoding-length", "32")
    try:
        r = subprocess.run([ST, "run", f"http://127.0.0.1:{s.port}/openapi.json", "--checks", "all",
                            "--exclude-checks", "positive_data_acceptance", "-n", "50", "--seed", "1",
                            "--request-timeout", "60", "--workers", "1"],
                           capture_output=True, text=True, timeout=400, cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
        assert "failures" not in r.stdout.splitlines()[-1] or " 0 failures" in r.stdout.splitlines()[-1]
    finally:
        assert s.stop() == 0, s.stderr()
