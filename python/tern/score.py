"""sacreBLEU-exact evaluation metrics from libtern (src/text/score.h).

``corpus_bleu`` and ``corpus_chrf`` take sacreBLEU's arguments and give sacreBLEU's numbers (the
same floating-point operations; tests/test_python.py compares them with sacrebleu's own at 1e-9).
References are a list of reference *streams*, as in sacreBLEU: ``refs[r][i]`` is reference r of
hypothesis i. The GIL is released while scoring.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from . import _tern

__all__ = ["BLEUScore", "CHRFScore", "corpus_bleu", "sentence_bleu", "corpus_chrf"]


@dataclass
class BLEUScore:
    """A BLEU score with sacreBLEU's fields."""
    score: float
    precisions: List[float]
    bp: float
    ratio: float
    sys_len: int
    ref_len: int

    def __str__(self) -> str:
        p = "/".join(f"{x:.1f}" for x in self.precisions)
        return (f"BLEU = {self.score:.2f} {p} (BP = {self.bp:.3f} ratio = {self.ratio:.3f} "
                f"hyp_len = {self.sys_len} ref_len = {self.ref_len})")


@dataclass
class CHRFScore:
    """A chrF score (name "chrF2", or "chrF2++" with word_order 2)."""
    score: float
    name: str

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}"


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]], tokenize: str = "13a",
                lowercase: bool = False, smooth_method: str = "exp", smooth_value: Optional[float] = None,
                max_ngram_order: int = 4, effective_order: bool = False) -> BLEUScore:
    """Corpus BLEU as ``sacrebleu.corpus_bleu(hypotheses, references, ...)``.

    tokenize: "13a" (default), "intl", "char" or "none"; smooth_method: "exp", "none", "floor",
    "add-k" (smooth_value None: the method's default)."""
    s, prec, bp, ratio, sys_len, ref_len = _tern.corpus_bleu(
        list(hypotheses), [list(r) for r in references], tokenize, bool(lowercase), smooth_method,
        smooth_value, max_ngram_order, bool(effective_order))
    return BLEUScore(s, prec, bp, ratio, sys_len, ref_len)


def sentence_bleu(hypothesis: str, references: Sequence[str], **kwargs) -> BLEUScore:
    """Sentence BLEU as ``sacrebleu.sentence_bleu`` (effective order on by default)."""
    kwargs.setdefault("effective_order", True)
    return corpus_bleu([hypothesis], [[r] for r in references], **kwargs)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]], char_order: int = 6,
                word_order: int = 0, beta: int = 2, lowercase: bool = False, whitespace: bool = False,
                eps_smoothing: bool = False) -> CHRFScore:
    """Corpus chrF (chrF++ with word_order=2) as ``sacrebleu.corpus_chrf(hypotheses, references, ...)``."""
    s = _tern.corpus_chrf(list(hypotheses), [list(r) for r in references], char_order, word_order, beta,
                          bool(lowercase), bool(whitespace), bool(eps_smoothing))
    name = f"chrF{beta}" + ("+" * word_order if word_order else "")
    return CHRFScore(s, name)
