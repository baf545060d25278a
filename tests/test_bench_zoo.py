"""bench/zoo_model.py's length mechanism (issue 26 point 6), its arithmetic only (no model is built:
that needs torch and takes minutes; bench/bench_zoo.py checks the lengths it gives with Tern, and
reports Tern's agreement with CTranslate2 and Marian). For both shapes:
* the readouts' weights sum to 0 (a layer norm's mean cancels) and the encoder's and decoder's
  columns are disjoint (the end token's tied row, written at the source's </s>, is not read back
  by the encoder's readout);
* f(t) = r . pe(t) rises at every step over the lengths of sentences (0 .. 180) and is the same
  function on both sides (within 4 %), so the end token comes at a step that follows the source
  length;
* the sinusoids are Marian's (sin then cos halves, frequency exp(-i ln 10000 / (C/2 - 1))).
"""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import zoo_model  # noqa: E402


@pytest.mark.parametrize("shape", sorted(zoo_model.SHAPES))
def test_readouts(shape):
    ro = zoo_model.readouts(zoo_model.SHAPES[shape])
    assert abs(ro["rE"].sum()) < 1e-9 and abs(ro["rD"].sum()) < 1e-9
    assert not np.any((ro["rE"] != 0) & (ro["rD"] != 0))
    assert set(np.flatnonzero(ro["rE"])) | set(np.flatnonzero(ro["rD"])) == set(ro["clean"])
    assert abs(ro["rD"] @ ro["u"] - 1.0) < 1e-12
    fE, fD = ro["fE"][:181], ro["fD"][:181]
    assert np.all(np.diff(fD) > 0) and np.all(np.diff(fE) > 0)
    assert np.max(np.abs(fE - fD)[20:]) <= 0.04 * fD[-1]


def test_sinusoids():
    pe, freq = zoo_model.sinusoids(3, 8)
    assert np.allclose(freq, [math.exp(-i * math.log(10000.0) / 3) for i in range(4)])
    assert np.allclose(pe[2, :4], np.sin(2 * freq)) and np.allclose(pe[2, 4:], np.cos(2 * freq))
