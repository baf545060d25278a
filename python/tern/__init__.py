"""Tern — neural machine translation in C, from Python.

``tern.Translator`` is shaped like ``ctranslate2.Translator``: ``translate_batch`` takes token lists
(as CTranslate2 does) or raw strings (through the model's SentencePiece model), with CTranslate2's
argument names where they mean the same; ``score_batch``, ``translate_file`` and
``translate_iterable`` as well. Every call into the C library releases the GIL, and a Translator
holds ``inter_threads`` translators, so that as many Python threads translate at once.
``tern.score`` gives sacreBLEU-exact BLEU and chrF.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Union

from ._cpu import check as _check_cpu
_check_cpu()  # x86-64-v3 (AVX2, FMA) or a clear ImportError, before libtern loads (tern/_cpu.py)
from . import _tern
from . import score  # noqa: F401  (tern.score)
from ._tern import CancelledError, TernError

__all__ = ["Translator", "TranslationResult", "ScoringResult", "TranslationStats", "StepResult",
           "TernError", "CancelledError", "score", "__version__", "set_log_level"]

__version__ = _tern.version()

Tokens = List[str]


@dataclass
class TranslationResult:
    """One input's result: ``hypotheses`` best first (token lists for token input, strings for
    string input) and their ``scores`` (empty unless ``return_scores=True``; normalized by the
    length penalty when one is set, as CTranslate2's)."""
    hypotheses: list
    scores: List[float] = field(default_factory=list)

    def __getitem__(self, key):  # result["tokens"] style access, as CTranslate2 allows
        if key in ("tokens", "hypotheses"):
            return self.hypotheses[0] if key == "tokens" else self.hypotheses
        if key == "score":
            return self.scores[0] if self.scores else None
        raise KeyError(key)


@dataclass
class ScoringResult:
    """Force-decoding result: ``log_probs`` of each target token and of the final end token;
    ``tokens`` the target tokens plus ``"</s>"`` (token input only; None for string input)."""
    tokens: Optional[Tokens]
    log_probs: List[float]


@dataclass
class TranslationStats:
    """What ``translate_file`` did: examples (lines), target tokens, wall time in milliseconds."""
    num_examples: int
    num_tokens: int
    total_time_in_ms: float


@dataclass
class StepResult:
    """A streaming event given to ``callback`` (see Translator.translate_batch)."""
    batch_id: int          # index of the input in the call
    step: int              # decoding step (-1: beam search's final event)
    token_ids: List[int]   # the hypothesis so far, target vocabulary ids
    text: str              # the hypothesis so far, as the result gives it (pieces joined by spaces for token input)
    delta: Optional[str]   # greedy search: the text added since the previous event of this input
    is_last: bool          # the input's last event


def set_log_level(level: int) -> None:
    """libtern's log level: 0 quiet, 1 error, 2 warning (default), 3 info, 4 debug."""
    _tern.set_log_level(level)


def _is_tokens(batch) -> bool:
    """True when batch is a list of token lists (CTranslate2 style), False for a list of str."""
    for x in batch:
        if isinstance(x, str):
            return False
        if isinstance(x, (list, tuple)):
            return True
        raise TypeError(f"each input must be a str or a list of str tokens, got {type(x).__name__}")
    return True


def _join(tokens: Sequence[str], what: str) -> str:
    for t in tokens:
        if not isinstance(t, str):
            raise TypeError(f"{what}: tokens must be str, got {type(t).__name__}")
        if not t or any(c.isspace() for c in t):
            raise ValueError(f"{what}: a token may be neither empty nor contain whitespace: {t!r}")
    return " ".join(tokens)


class Translator:
    """A translation model loaded once, with ``inter_threads`` translators sharing its weights.

    Args:
      model_dir: a Tern model directory (config.json + model.safetensors) or a CTranslate2 one
        (model.bin + config.json + vocabularies); a SentencePiece model in it (sentencepiece.model,
        source.spm/target.spm) is used for string inputs.
      device: "cpu" (the only device of this build).
      compute_type: "default"/"auto" (as stored: int8 weights run int8), "float32", "int8"
        ("int8_float32" is read as "int8").
      inter_threads: translations that may run at once (one per Python thread calling in).
      intra_threads: threads of each translation; 0: the cores divided by inter_threads.
      max_batch_tokens: the default token budget of one batch (source tokens, padded).
    """

    def __init__(self, model_dir: Union[str, os.PathLike], device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 1, intra_threads: int = 0, max_batch_tokens: int = 4096) -> None:
        if device != "cpu":
            raise ValueError(f"device {device!r} is not supported by this build of Tern (only 'cpu')")
        self.model_dir = os.fspath(model_dir)
        self.device = device
        self.compute_type = compute_type
        self.inter_threads = inter_threads
        self.intra_threads = intra_threads
        self._t = _tern._Translator(self.model_dir, compute_type, inter_threads, intra_threads, max_batch_tokens)

    @property
    def info(self) -> dict:
        """Facts about the model (family, format, vocabulary sizes, int8, has_spm, ...) and its
        ``decoding_defaults`` (its generation_config.json over Tern's: what ``tern translate`` and
        ``python -m tern translate`` use without flags; translate_batch keeps CTranslate2's
        argument defaults)."""
        return self._t._info()

    def translate_batch(self, source: Sequence[Union[str, Sequence[str]]],
                        target_prefix: Optional[Sequence[Optional[Union[str, Sequence[str]]]]] = None,
                        max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                        num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                        max_input_length: int = 1024, max_decoding_length: int = 256,
                        min_decoding_length: int = 1, return_scores: bool = False,
                        callback: Optional[Callable[[StepResult], Optional[bool]]] = None,
                        sampling_topk: int = 1, sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                        seed: int = 12345, source_lang: Optional[str] = None,
                        target_lang: Optional[str] = None) -> List[TranslationResult]:
        """Translates a batch; the GIL is released while Tern works.

        ``source`` is a list of token lists (CTranslate2's form: the model's vocabulary pieces; the
        hypotheses are then token lists) or a list of raw strings (through the model's
        SentencePiece model; the hypotheses are then strings). ``target_prefix`` (same form, one
        per input, None/empty for none) forces the first target tokens. ``max_batch_size`` with
        ``batch_type`` "examples" caps the sentences of a batch, with "tokens" sets its token budget
        (0: the Translator's budget). The other arguments mean what CTranslate2's mean (defaults as
        CTranslate2's: beam 2, length penalty 1; ``length_penalty`` 0 for Tern's CLI default);
        ``min_decoding_length`` counts output tokens before the end token may come.

        ``callback`` (optional) is called with a StepResult per input per decoding step: greedy
        search (``beam_size=1``) gives the hypothesis after each token and a ``delta`` of text (the
        deltas of an input concatenate to its final hypothesis); beam search gives the best live
        hypothesis of each step, then the final one (``is_last``). Returning True stops the whole
        call with ``tern.CancelledError``; an exception in the callback stops it and is re-raised.

        Sampling (``beam_size=1``; docs/decoding.md): ``sampling_topk`` (1: argmax, 0: all tokens),
        ``sampling_topp``, ``sampling_temperature`` as CTranslate2's; with sampling,
        ``num_hypotheses`` is the number of samples per input (best score first). The draws depend
        only on ``seed``, the input's index, the sample and the step (not on batches or threads).
        ``repetition_penalty`` and ``no_repeat_ngram_size`` as CTranslate2's.

        A multilingual model (M2M-100, NLLB; ``languages`` lists its codes): ``source_lang`` and
        ``target_lang`` (e.g. "eng_Latn", "deu_Latn") put the source's code first and force the
        target's as the first output token, left out of the hypotheses (needed for raw strings). Token
        lists may carry the codes themselves as CTranslate2 takes them: ``["eng_Latn", "▁Hello",
        "</s>"]`` with ``target_prefix=[["deu_Latn"]]`` (the code then stays in the hypothesis).
        """
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        source = list(source)
        tokens = _is_tokens(source)
        if tokens:
            src = [_join(s, "source") for s in source]
        else:
            src = source
        pre = None
        if target_prefix is not None:
            target_prefix = list(target_prefix)
            if len(target_prefix) != len(source):
                raise ValueError(f"target_prefix has {len(target_prefix)} entries for {len(source)} inputs")
            pre = []
            for p in target_prefix:
                if p is None:
                    pre.append(None)
                elif tokens:
                    if isinstance(p, str):
                        raise TypeError("target_prefix must be token lists when the source is")
                    pre.append(_join(p, "target_prefix"))
                else:
                    if not isinstance(p, str):
                        raise TypeError("target_prefix must be strings when the source is")
                    pre.append(p)
        cb = None
        if callback is not None:
            def cb(index, step, ids, text, delta, is_last):
                return callback(StepResult(index, step, ids, text, delta, bool(is_last)))
        out = self._t._translate(
            src, pre, tokens, beam_size, num_hypotheses if sampling_topk == 1 else 1, float(length_penalty), float(coverage_penalty),
            max_decoding_length, min_decoding_length, bool(return_scores),
            max_batch_size if batch_type == "examples" else 0, max_batch_size if batch_type == "tokens" else 0,
            max_input_length, cb, int(sampling_topk), float(sampling_topp), float(sampling_temperature),
            int(num_hypotheses) if sampling_topk != 1 else 1, int(seed), float(repetition_penalty),
            int(no_repeat_ngram_size), source_lang, target_lang)
        results = []
        for hyps, scores in out:
            if tokens:
                hyps = [h.split(" ") if h else [] for h in hyps]
            results.append(TranslationResult(hyps, list(scores) if scores is not None else []))
        return results

    def translate_iterable(self, source: Iterable[Union[str, Sequence[str]]],
                           target_prefix: Optional[Iterable[Optional[Union[str, Sequence[str]]]]] = None,
                           max_batch_size: int = 32, batch_type: str = "examples",
                           **kwargs) -> Iterator[TranslationResult]:
        """Translates an iterable of inputs (token lists or strings), yielding results in order;
        reads ``max_batch_size`` examples at a time (with batch_type "tokens": groups of about
        that many tokens). Other arguments as translate_batch."""
        it = iter(source)
        pit = iter(target_prefix) if target_prefix is not None else None
        while True:
            chunk, pchunk, ntok = [], [], 0
            for x in it:
                chunk.append(x)
                if pit is not None:
                    pchunk.append(next(pit))
                ntok += len(x) if not isinstance(x, str) else len(x.split()) + 1
                if (batch_type == "examples" and len(chunk) >= max_batch_size) or \
                        (batch_type == "tokens" and ntok >= max_batch_size):
                    break
            if not chunk:
                return
            yield from self.translate_batch(chunk, target_prefix=pchunk if pit is not None else None, **kwargs)

    def translate_file(self, source_path: Union[str, os.PathLike], output_path: Union[str, os.PathLike],
                       max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                       num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                       max_input_length: int = 1024, max_decoding_length: int = 256,
                       min_decoding_length: int = 1, with_scores: bool = False) -> TranslationStats:
        """Translates a text file, one line per line, in constant memory, as ``tern translate``
        does (the same code: raw lines through SentencePiece, or pre-tokenized pieces for a model
        without one; ``inter_threads`` translators in parallel). With ``num_hypotheses`` > 1 or
        ``with_scores`` each line becomes "i ||| hypothesis ||| score" lines, as the CLI writes them.
        The GIL is released while it runs."""
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        n, tok, sec = self._t._translate_file(
            os.fspath(source_path), os.fspath(output_path), beam_size, num_hypotheses, float(length_penalty),
            float(coverage_penalty), max_decoding_length, min_decoding_length, bool(with_scores),
            max_batch_size if batch_type == "examples" else 0, max_batch_size if batch_type == "tokens" else 0,
            max_input_length)
        return TranslationStats(n, tok, sec * 1000.0)

    def score_batch(self, source: Sequence[Union[str, Sequence[str]]],
                    target: Sequence[Union[str, Sequence[str]]]) -> List[ScoringResult]:
        """Force decoding: the log-probability of each target token given its source, and of the
        end token (CTranslate2's score_batch). Token lists or strings, as translate_batch takes
        them (both sides in the same form). The GIL is released while Tern works."""
        source, target = list(source), list(target)
        if len(source) != len(target):
            raise ValueError(f"{len(source)} sources for {len(target)} targets")
        tokens = _is_tokens(source) if source else True
        if source and _is_tokens(target) != tokens:
            raise TypeError("source and target must both be token lists or both strings")
        if tokens:
            src = [_join(s, "source") for s in source]
            tgt = [_join(t, "target") for t in target]
        else:
            src, tgt = source, target
        lps = self._t._score(src, tgt, tokens)
        out = []
        for i, lp in enumerate(lps):
            toks = None
            if tokens:
                toks = list(target[i])[:max(len(lp) - 1, 0)] + ["</s>"] if lp else []
            out.append(ScoringResult(toks, list(lp)))
        return out

    def __repr__(self) -> str:
        return (f"tern.Translator({self.model_dir!r}, device={self.device!r}, compute_type={self.compute_type!r}, "
                f"inter_threads={self.inter_threads}, intra_threads={self.intra_threads})")


def _batched(it, n):  # kept for callers that chunk themselves
    it = iter(it)
    while chunk := list(itertools.islice(it, n)):
        yield chunk
