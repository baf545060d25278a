"""Tern — neural machine translation in C, from Python.

``tern.Translator`` is a drop-in for ``ctranslate2.Translator`` (ctranslate2 4.x) on the CPU: the
same constructor, methods, argument names, defaults and result types (TranslationResult,
ScoringResult, GenerationStepResult, AsyncTranslationResult, ExecutionStats), CTranslate2's
compute-type resolution and ``inter_threads`` replicas that share one large call. Where an option
cannot mean anything on Tern it raises ``tern.NotAvailableError`` (a TernError and a
NotImplementedError) that names it, never a silent ignore. Beyond CTranslate2, ``translate_batch``
and ``score_batch`` also take raw strings (through the model's SentencePiece model), and the
callback's events carry the hypothesis text so far. Every call into the C library releases the GIL.
``tern.score`` gives sacreBLEU-exact BLEU and chrF.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Union

from ._cpu import check as _check_cpu
_check_cpu()  # x86-64-v3 (AVX2, FMA) or a clear ImportError, before libtern loads (tern/_cpu.py)
from . import _tern
from . import score  # noqa: F401  (tern.score)
from ._tern import CancelledError, TernError

__all__ = ["Translator", "TranslationResult", "ScoringResult", "GenerationStepResult", "StepResult",
           "AsyncTranslationResult", "AsyncScoringResult", "ExecutionStats", "TranslationStats", "QualityEstimate",
           "TernError", "CancelledError", "NotAvailableError", "score", "__version__", "set_log_level",
           "get_supported_compute_types", "get_cuda_device_count"]

__version__ = _tern.version()

Tokens = List[str]


class NotAvailableError(TernError, NotImplementedError):
    """An option CTranslate2 has that Tern cannot honour (yet): raised instead of ignoring it."""


def _not_available(what: str) -> NotAvailableError:
    return NotAvailableError(f"{what} is not available yet in Tern")


# ------------------------------------------------------------------ result types (CTranslate2's)

@dataclass
class TranslationResult:
    """One input's result, as CTranslate2's: ``hypotheses`` best first (token lists for token
    input, strings for string input), their ``scores`` (empty unless ``return_scores=True``;
    normalized by the length penalty when one is set), ``attention`` (with ``return_attention=True``:
    per hypothesis, per output token, the weights over the source tokens, as CTranslate2's; else
    empty) and ``logits`` (empty: return_logits_vocab is not available)."""
    hypotheses: list
    scores: List[float] = field(default_factory=list)
    attention: list = field(default_factory=list)
    logits: list = field(default_factory=list)

    def __getitem__(self, key):  # result["tokens"] style access (Tern's older API)
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
class QualityEstimate:
    """Tern's quality estimate of a best translation (Translator.estimate_quality): ``hypothesis``
    its tokens, ``score`` the mean log-probability of its tokens and end token (the model's, by
    force decoding: sum of ``log_probs`` over their number), ``words`` Bergamot's word scores: for
    each word (the tokens from one starting with "\u2581" up to the next) ``(word, start, end,
    score)`` with [start, end) its token positions and score the mean of their log-probs,
    ``tokens``/``log_probs`` what they are made of (the hypothesis and "</s>")."""
    hypothesis: Tokens
    score: float
    words: List[tuple]
    tokens: Tokens
    log_probs: List[float]


@dataclass
class ExecutionStats:
    """What translate_file / score_file did (CTranslate2's fields): target tokens (of the best
    hypotheses; for scoring, with the end tokens), examples (lines), wall time in milliseconds."""
    num_tokens: int
    num_examples: int
    total_time_in_ms: float


TranslationStats = ExecutionStats  # Tern's older name


@dataclass
class GenerationStepResult:
    """One decoding step of one input (generate_tokens, and translate_batch's callback), with
    CTranslate2's fields: ``step``, ``batch_id``, ``token_id``, ``hypothesis_id``, ``token`` (the
    piece; ``"</s>"`` on the end step), ``log_prob`` (generate_tokens with return_log_prob; None
    otherwise), ``logits`` (None), ``is_last``; and Tern's: ``token_ids`` (the hypothesis so far),
    ``text`` (it as the result gives it) and ``delta`` (greedy search: the text this step adds)."""
    step: int
    batch_id: int
    token_id: int
    hypothesis_id: int
    token: Optional[str]
    log_prob: Optional[float]
    logits: Optional[list]
    is_last: bool
    token_ids: List[int] = field(default_factory=list, repr=False)
    text: str = field(default="", repr=False)
    delta: Optional[str] = field(default=None, repr=False)


StepResult = GenerationStepResult  # Tern's older name


class _AsyncResult:
    def __init__(self, future: concurrent.futures.Future, index: int) -> None:
        self._future, self._index = future, index

    def result(self):
        """Blocks until the batch is done; its result (or raises its exception)."""
        return self._future.result()[self._index]

    def done(self) -> bool:
        """Whether the result is ready."""
        return self._future.done()


class AsyncTranslationResult(_AsyncResult):
    """translate_batch(asynchronous=True)'s per-input handle: ``result()`` and ``done()``."""


class AsyncScoringResult(_AsyncResult):
    """score_batch(asynchronous=True)'s per-input handle: ``result()`` and ``done()``."""


def set_log_level(level: int) -> None:
    """libtern's log level: 0 quiet, 1 error, 2 warning (default), 3 info, 4 debug."""
    _tern.set_log_level(level)


def get_cuda_device_count() -> int:
    """0: this build of Tern's Python package runs on the CPU only."""
    return 0


def get_supported_compute_types(device: str, device_index: int = 0) -> set:
    """The compute types Tern runs on device (CTranslate2's function): {"int8", "int8_float32", "float32"} on the CPU."""
    if device != "cpu":
        raise ValueError(f"device {device!r} is not supported by this build of Tern (only 'cpu')")
    return {"int8", "int8_float32", "float32"}


# ------------------------------------------------------------------ input helpers

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


# CTranslate2's compute types this CPU cannot run efficiently: CTranslate2 refuses them on the CPU
# with this message (checked against ctranslate2 4.x), so Tern does too.
_CT_NOT_ON_CPU = ("int8_float16", "int8_bfloat16", "float16", "bfloat16")
_CT_ALL = ("default", "auto", "int8", "int8_float32", "int16", "float32") + _CT_NOT_ON_CPU


def _resolve_compute_type(ct: str) -> str:
    """CTranslate2's name -> what libtern loads with ("default": as stored, "int8", "float32")."""
    if ct not in _CT_ALL:
        raise ValueError(f"invalid compute type: {ct!r} (one of {', '.join(_CT_ALL)})")
    if ct in _CT_NOT_ON_CPU:
        raise ValueError(f"Requested {ct} compute type, but the target device or backend do not support "
                         f"efficient {ct} computation.")
    if ct == "int16":
        raise NotAvailableError("compute_type 'int16' is not available in Tern (int8, int8_float32, float32)")
    if ct == "default":
        return "default"
    if ct == "float32":
        return "float32"
    return "int8"  # auto (CTranslate2 picks int8_float32 on a CPU with AVX2), int8, int8_float32


def _check_options(patience, prefix_bias_beta, return_logits_vocab, return_attention, return_alternatives,
                   replace_unknowns) -> None:
    if not patience > 0:
        raise ValueError(f"patience must be > 0 (got {patience})")
    if not 0 <= prefix_bias_beta < 1:
        raise ValueError(f"prefix_bias_beta must be in [0, 1) (got {prefix_bias_beta})")
    if prefix_bias_beta > 0 and return_alternatives:
        raise ValueError("prefix_bias_beta is not compatible with return_alternatives")
    if return_logits_vocab:
        raise _not_available("return_logits_vocab")
    if return_alternatives and (return_attention or replace_unknowns):
        raise _not_available("return_alternatives with return_attention or replace_unknowns")


def _check_no_sort(value, name: str = "no_sort") -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False (got {value!r})")


def _max_input_length(n: int) -> int:
    if n < 0:
        raise ValueError("max_input_length must be >= 0")
    return n if n > 0 else 1 << 30  # CTranslate2's 0: no truncation


class Translator:
    """A translation model loaded once, with ``inter_threads`` translators sharing its weights
    (CTranslate2's Translator: the same arguments, with its semantics on the CPU).

    Args:
      model_path: a CTranslate2 model directory (model.bin + config.json + vocabularies) or a Tern
        one (config.json + model.safetensors); a SentencePiece model in it (sentencepiece.model,
        source.spm/target.spm) is used for string inputs. (``model_dir=`` is accepted too.)
      device: "cpu", or "auto" (the CPU: this build has no GPU).
      device_index: 0, or a list of 0s (one set of ``inter_threads`` replicas per entry).
      compute_type: CTranslate2's names and resolution on a CPU with AVX2: "default" (as stored:
        int8 weights run int8_float32, float16/bfloat16/float32 ones float32), "auto", "int8",
        "int8_float32" (int8_float32), "float32"; "float16", "bfloat16", "int8_float16" and
        "int8_bfloat16" are refused as CTranslate2 refuses them on the CPU; "int16" is not
        available in Tern. A dict {device: type} takes the entry of the device.
      inter_threads: translators (replicas); one call is split across them, and as many Python
        threads translate at once.
      intra_threads: threads of each translator; 0: the cores divided by inter_threads.
      max_queued_batches: asynchronous calls waiting for a replica before the next one blocks
        (-1: unlimited, 0: 4 per replica).
      flash_attention, tensor_parallel: GPU features; True is refused (as CTranslate2 on the CPU).
      files: models from memory are not available in Tern (None only).
      max_batch_tokens: (Tern) the default token budget of one batch (source tokens, padded).
      shortlist: (Tern) a Marian lexical shortlist, "FILE[,first,best[,threshold]]" (Marian's
        --shortlist values; text lex.s2t or marian-conv's binary file): every call's output is
        restricted to it as Marian restricts it; None: a Marian model directory's decoder.yml
        shortlist if it has one; "none": no shortlist (docs/models.md).
    """

    def __init__(self, model_path: Union[str, os.PathLike, None] = None, device: str = "cpu",
                 compute_type: Union[str, dict] = "default", inter_threads: int = 1, intra_threads: int = 0,
                 max_batch_tokens: int = 4096, *, device_index: Union[int, List[int]] = 0,
                 max_queued_batches: int = 0, flash_attention: bool = False, tensor_parallel: bool = False,
                 files: object = None, model_dir: Union[str, os.PathLike, None] = None,
                 shortlist: Optional[str] = None) -> None:
        if (model_path is None) == (model_dir is None):
            raise TypeError("give the model directory once: model_path (or model_dir)")
        if device not in ("cpu", "auto"):
            raise ValueError(f"device {device!r} is not supported by this build of Tern (only 'cpu'; 'auto' selects it)")
        indices = [device_index] if isinstance(device_index, int) else list(device_index)
        if not indices or any(not isinstance(i, int) or i != 0 for i in indices):
            raise ValueError(f"Invalid CPU device index: {device_index!r} (the CPU is device 0)")
        if isinstance(compute_type, dict):
            compute_type = compute_type.get("cpu", "default")
        if flash_attention:
            raise ValueError("flash_attention needs a GPU (Ampere or newer); Tern runs on the CPU")
        if tensor_parallel:
            raise ValueError("tensor_parallel runs only on CUDA; Tern runs on the CPU")
        if files is not None:
            raise _not_available("files= (a model from memory)")
        if inter_threads < 1 or intra_threads < 0:
            raise ValueError("inter_threads must be >= 1 and intra_threads >= 0")
        if max_queued_batches < -1:
            raise ValueError("max_queued_batches must be -1 (unlimited), 0 (automatic) or > 0")
        self.model_dir = os.fspath(model_path if model_path is not None else model_dir)
        self._device_index = indices
        self._requested_compute_type = compute_type
        self._load_ct = _resolve_compute_type(compute_type)
        self.inter_threads = inter_threads
        self.intra_threads = intra_threads
        self._replicas = inter_threads * len(indices)
        self._max_batch_tokens = max_batch_tokens
        self._shortlist = None if shortlist is None else os.fspath(shortlist)
        self._t = self._load(False)
        self._t_int8 = bool(self._t._info()["int8"])
        self._vmap_t = None  # loaded on the first use_vmap=True call
        self._lock = threading.Lock()
        self._split_pool = None  # threads that run the parts of one call on the replicas
        self._async_pool = None  # threads that run asynchronous calls
        queued = self._replicas * 4 if max_queued_batches == 0 else max_queued_batches
        self._queue_slots = threading.BoundedSemaphore(queued) if queued > 0 else None
        self._queued = 0
        self._active = 0
        self._vocab = None

    def _load(self, use_vmap: bool):
        return _tern._Translator(self.model_dir, self._load_ct, self._replicas, self.intra_threads,
                                 self._max_batch_tokens, use_vmap=use_vmap, shortlist=self._shortlist)

    # -------------------------------------------------------------- CTranslate2's attributes

    @property
    def device(self) -> str:
        """Device this translator runs on ("cpu")."""
        return "cpu"

    @property
    def device_index(self) -> List[int]:
        """Device IDs this translator runs on."""
        return list(self._device_index)

    @property
    def compute_type(self) -> str:
        """The compute type as CTranslate2 reports it: "int8_float32" or "float32"."""
        return "int8_float32" if self._t_int8 else "float32"

    @property
    def num_translators(self) -> int:
        """Translators (replicas) backing this instance."""
        return self._replicas

    @property
    def num_queued_batches(self) -> int:
        """Asynchronous calls waiting for a replica."""
        return self._queued

    @property
    def num_active_batches(self) -> int:
        """Asynchronous calls waiting or running."""
        return self._active

    @property
    def tensor_parallel(self) -> bool:
        return False

    @property
    def model_is_loaded(self) -> bool:
        return self._t is not None

    def unload_model(self, to_cpu: bool = False) -> None:
        """Frees the model (the next call needs load_model()); to_cpu changes nothing on the CPU."""
        if not to_cpu:
            self._t = self._vmap_t = None

    def load_model(self, keep_cache: bool = False) -> None:
        """Loads the model back after unload_model()."""
        if self._t is None:
            self._t = self._load(False)

    def _translator(self, use_vmap: bool = False):
        if self._t is None:
            raise RuntimeError("The model for this translator was unloaded (call load_model())")
        if not use_vmap:
            return self._t
        with self._lock:
            if self._vmap_t is None:
                self._vmap_t = self._load(True)
            return self._vmap_t

    @property
    def info(self) -> dict:
        """Facts about the model (family, format, vocabulary sizes, int8, has_spm, ...) and its
        ``decoding_defaults`` (its generation_config.json over Tern's: what ``tern translate`` and
        ``python -m tern translate`` use without flags; translate_batch keeps CTranslate2's
        argument defaults)."""
        return self._translator()._info()

    def _target_vocab(self):
        """The target pieces (for the token of a step event) and the end token: read from the
        model directory's vocabulary file, as CTranslate2 names them, once."""
        if self._vocab is None:
            pieces, eos = None, "</s>"
            try:
                with open(os.path.join(self.model_dir, "config.json"), encoding="utf-8") as f:
                    eos = json.load(f).get("eos_token") or eos
            except (OSError, ValueError):
                pass
            for name in ("target_vocabulary", "shared_vocabulary", "vocabulary"):
                base = os.path.join(self.model_dir, name)
                if os.path.exists(base + ".json"):
                    with open(base + ".json", encoding="utf-8") as f:
                        pieces = json.load(f)
                    break
                if os.path.exists(base + ".txt"):
                    with open(base + ".txt", encoding="utf-8") as f:
                        pieces = [line.rstrip("\n") for line in f]
                    break
            ids = {p: i for i, p in enumerate(pieces)} if pieces else {}
            self._vocab = (pieces or [], eos, ids.get(eos, -1))
        return self._vocab

    # -------------------------------------------------------------- running on the replicas

    def _pool(self):
        with self._lock:
            if self._split_pool is None:
                self._split_pool = concurrent.futures.ThreadPoolExecutor(self._replicas, thread_name_prefix="tern-part")
            return self._split_pool

    def _parts(self, n: int, can_split: bool):
        """Cuts n inputs into contiguous parts, one per replica (CTranslate2 spreads one call's
        batches over its replicas); one part when there is one replica or little work."""
        k = min(self._replicas, n) if can_split else 1
        if k <= 1:
            return [(0, n)]
        step, extra = divmod(n, k)
        out, a = [], 0
        for j in range(k):
            b = a + step + (1 if j < extra else 0)
            out.append((a, b))
            a = b
        return out

    def _run_parts(self, n: int, can_split: bool, fn):
        """fn(a, b) -> list for each part, run in parallel on the replicas (each C call releases
        the GIL and takes a free translator), concatenated in order."""
        parts = self._parts(n, can_split)
        if len(parts) == 1:
            return fn(0, n)
        futures = [self._pool().submit(fn, a, b) for a, b in parts]
        out = []
        for f in futures:
            out.extend(f.result())
        return out

    def _submit_async(self, fn, n: int, cls):
        """Runs fn() on the asynchronous pool (max_queued_batches bounds the waiting calls: the
        caller blocks while it is full) and gives one handle per input."""
        with self._lock:
            if self._async_pool is None:
                self._async_pool = concurrent.futures.ThreadPoolExecutor(self._replicas, thread_name_prefix="tern-async")
            pool = self._async_pool
        if self._queue_slots is not None:
            self._queue_slots.acquire()
        with self._lock:
            self._queued += 1
            self._active += 1

        def job():
            with self._lock:
                self._queued -= 1
            try:
                return fn()
            finally:
                with self._lock:
                    self._active -= 1
                if self._queue_slots is not None:
                    self._queue_slots.release()
        future = pool.submit(job)
        return [cls(future, i) for i in range(n)]

    # -------------------------------------------------------------- translation

    def _end_token_ok(self, end_token) -> None:
        if end_token is None:
            return
        _, eos, eos_id = self._target_vocab()
        items = [end_token] if isinstance(end_token, (str, int)) else list(end_token)
        if not all(x == eos or (isinstance(x, int) and x == eos_id) for x in items):
            raise _not_available(f"end_token other than the model's end token ({eos!r})")

    def translate_batch(self, source: Sequence[Union[str, Sequence[str]]],
                        target_prefix: Optional[Sequence[Optional[Union[str, Sequence[str]]]]] = None,
                        max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                        num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                        max_input_length: int = 1024, max_decoding_length: int = 256,
                        min_decoding_length: int = 1, return_scores: bool = False,
                        callback: Optional[Callable[[GenerationStepResult], Optional[bool]]] = None,
                        sampling_topk: int = 1, sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                        seed: int = 12345, *, asynchronous: bool = False, patience: float = 1,
                        disable_unk: bool = False, suppress_sequences: Optional[Sequence] = None,
                        end_token=None, return_end_token: bool = False, prefix_bias_beta: float = 0,
                        use_vmap: bool = False, return_logits_vocab: bool = False, return_attention: bool = False,
                        return_alternatives: bool = False, min_alternative_expansion_prob: float = 0,
                        replace_unknowns: bool = False, source_lang: Optional[str] = None,
                        target_lang: Optional[str] = None, no_sort: bool = False, beams_apart: bool = False,
                        _index_offset: int = 0):
        """Translates a batch (CTranslate2's translate_batch); the GIL is released while Tern works.

        ``source`` is a list of token lists (CTranslate2's form: the model's vocabulary pieces; the
        hypotheses are then token lists) or a list of raw strings (through the model's
        SentencePiece model; the hypotheses are then strings). ``target_prefix`` (same form, one
        per input, None/empty for none) forces the first target tokens. ``max_batch_size`` with
        ``batch_type`` "examples" caps the sentences of a batch, with "tokens" sets its token budget
        (0: the Translator's budget). The other arguments mean what CTranslate2's mean, with its
        defaults (beam 2, length penalty 1); ``min_decoding_length`` counts output tokens before
        the end token may come; ``max_input_length`` 0 truncates nothing.

        A call with several inputs is cut into contiguous parts run at once on the
        ``inter_threads`` replicas (results in input order, the same as on one replica).
        ``asynchronous=True`` returns one AsyncTranslationResult per input at once.

        ``callback`` (optional) is called with a GenerationStepResult per input per decoding
        step: greedy search (``beam_size=1``) gives each token (and the end token, ``is_last``),
        with the hypothesis so far and a ``delta`` of text (the deltas of an input concatenate to
        its final hypothesis); beam search (Tern only) gives the best live hypothesis of each step,
        then the final one (``is_last``). Returning True stops the whole call with
        ``tern.CancelledError``; an exception in the callback stops it and is re-raised.

        Sampling (``beam_size=1``; docs/decoding.md): ``sampling_topk`` (1: argmax, 0: all tokens),
        ``sampling_topp``, ``sampling_temperature`` as CTranslate2's; with sampling,
        ``num_hypotheses`` is the number of samples per input (best score first). The draws depend
        only on ``seed`` (Tern), the input's index, the sample and the step (not on batches,
        replicas or threads). ``repetition_penalty``, ``no_repeat_ngram_size``, ``disable_unk``
        and ``suppress_sequences`` (token lists; strings for string input) as CTranslate2's;
        ``use_vmap`` restricts the output to the model directory's vmap.txt (as CTranslate2's);
        ``end_token`` may only name the model's end token; ``return_end_token`` appends it to the
        token hypotheses that ended with it. ``return_alternatives`` (token input; greedy search,
        or beam search with ``length_penalty=0``) gives ``num_hypotheses`` alternatives at the
        first position after the prefix, each continued by the search, as CTranslate2's
        (``min_alternative_expansion_prob`` drops the unlikely ones).
        ``return_logits_vocab`` raises tern.NotAvailableError. ``prefix_bias_beta`` (beam search,
        with ``target_prefix``) biases towards the prefix instead of forcing it, as CTranslate2's.
        ``patience`` as CTranslate2's: with a length or coverage penalty, beam search stops a
        sentence once round(beam_size * patience) hypotheses finished.
        ``return_attention`` fills each result's ``attention`` (per hypothesis, per output token,
        the weights over the source tokens: the C core's tern_attention_t). ``replace_unknowns``
        replaces each ``<unk>`` of the hypotheses by the source token attended to most at that
        step (token input: the source token itself, as CTranslate2's; string input: its source
        piece), in the C core (tern_request_t.replace_unknowns).

        A multilingual model (M2M-100, NLLB; ``info["languages"]`` lists its codes): ``source_lang``
        and ``target_lang`` (e.g. "eng_Latn", "deu_Latn") put the source's code first and force the
        target's as the first output token, left out of the hypotheses (needed for raw strings). Token
        lists may carry the codes themselves as CTranslate2 takes them: ``["eng_Latn", "▁Hello",
        "</s>"]`` with ``target_prefix=[["deu_Latn"]]`` (the code then stays in the hypothesis).

        ``no_sort=True`` (Tern) cuts the batches from consecutive inputs in their order instead of
        from the inputs sorted by length (tern_request_t.no_sort, ``tern translate --no-sort``: the
        same results, fixed batches without continuous batching). ``beams_apart=True`` (Tern) runs
        every hypothesis of a decoding step through the decoder on its own (``tern translate
        --batch-beams off``: the SDL paper's unbatched baseline, the same results, slower).
        """
        _check_no_sort(no_sort)
        _check_no_sort(beams_apart, "beams_apart")
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        _check_options(patience, prefix_bias_beta, return_logits_vocab, return_attention, return_alternatives,
                       replace_unknowns)
        self._end_token_ok(end_token)
        if return_alternatives:
            if callback is not None:
                raise ValueError("return_alternatives does not take a callback")
            if sampling_topk != 1:
                raise _not_available("return_alternatives with sampling")
            if beam_size > 1 and length_penalty != 0:
                raise _not_available("return_alternatives with beam search and a length penalty (use beam_size=1 "
                                     "or length_penalty=0)")
            kw = dict(max_batch_size=max_batch_size, batch_type=batch_type, beam_size=beam_size,
                      coverage_penalty=coverage_penalty, max_input_length=max_input_length,
                      max_decoding_length=max_decoding_length, min_decoding_length=min_decoding_length,
                      repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                      disable_unk=disable_unk, suppress_sequences=suppress_sequences, use_vmap=use_vmap)
            run = lambda: self._alternatives(source, target_prefix, num_hypotheses, length_penalty,  # noqa: E731
                                             min_alternative_expansion_prob, return_scores, return_end_token, kw)
            if asynchronous:
                return self._submit_async(run, len(source), AsyncTranslationResult)
            return run()
        source = list(source)
        tokens = _is_tokens(source)
        src = [_join(s, "source") for s in source] if tokens else source
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
        suppress = []
        for seq in suppress_sequences or []:
            if tokens:
                if isinstance(seq, str):
                    raise TypeError("suppress_sequences must be token lists when the source is")
                suppress.append(_join(seq, "suppress_sequences"))
            else:
                if not isinstance(seq, str):
                    raise TypeError("suppress_sequences must be strings when the source is")
                suppress.append(seq)
        if disable_unk:
            if not tokens:
                raise _not_available("disable_unk with string input (give token lists)")
            suppress.append("<unk>")
        if return_end_token and not tokens:
            raise ValueError("return_end_token needs token input (the end token is a piece)")
        mil = _max_input_length(max_input_length)
        sampling = sampling_topk != 1
        translator = self._translator(use_vmap)
        cb = None
        if callback is not None:
            cb = self._event_converter(callback, tokens)
        eos = self._target_vocab()[1] if return_end_token else None

        def part(a: int, b: int):
            out = translator._translate(
                src[a:b], pre[a:b] if pre is not None else None, tokens, beam_size,
                num_hypotheses if not sampling else 1, float(length_penalty), float(coverage_penalty),
                max_decoding_length, min_decoding_length, bool(return_scores),
                max_batch_size if batch_type == "examples" else 0, max_batch_size if batch_type == "tokens" else 0,
                mil, cb, int(sampling_topk), float(sampling_topp), float(sampling_temperature),
                int(num_hypotheses) if sampling else 1, int(seed), float(repetition_penalty),
                int(no_repeat_ngram_size), suppress or None, _index_offset + a, source_lang, target_lang,
                bool(return_attention), bool(replace_unknowns), float(patience),
                float(prefix_bias_beta), no_sort=no_sort, beams_apart=beams_apart)
            results = []
            for hyps, scores, attention in out:
                if tokens:
                    hyps = [h.split(" ") if h else [] for h in hyps]
                    if eos is not None:  # ended with the end token unless the length cap stopped it
                        hyps = [h + [eos] if len(h) < max_decoding_length else h for h in hyps]
                results.append(TranslationResult(hyps, list(scores) if scores is not None else [],
                                                 attention if attention is not None else []))
            return results

        # a callback sees one call's events in order: no split
        run = lambda: self._run_parts(len(src), callback is None, part)  # noqa: E731
        if asynchronous:
            return self._submit_async(run, len(src), AsyncTranslationResult)
        return run()

    def _alternatives(self, source, target_prefix, n: int, lp: float, min_prob: float, return_scores: bool,
                      return_end_token: bool, kw) -> List[TranslationResult]:
        """return_alternatives, as CTranslate2 does it: at the first position after the prefix, the
        n most probable tokens (a beam search of n over one step, the end token not allowed
        there), those of probability >= min_prob kept; then each continued by the search (one
        hypothesis) from the prefix and that token. Score: the token's log-probability plus the
        continuation's, the latter normalized by its length (end token included) ** lp. The
        continuation runs with length penalty 0 (greedy search does not depend on it, and beam
        search here only has it 0), so its score is the raw sum of its tokens (a target prefix
        is not scored)."""
        source = list(source)
        if not _is_tokens(source):
            raise _not_available("return_alternatives with string input (give token lists)")
        prefixes = list(target_prefix) if target_prefix is not None else [None] * len(source)
        if len(prefixes) != len(source):
            raise ValueError(f"target_prefix has {len(prefixes)} entries for {len(source)} inputs")
        eos = self._target_vocab()[1]
        M = kw["max_decoding_length"]
        out = []
        for src, pre in zip(source, prefixes):
            pre = list(pre or [])
            P = len(pre)
            if P >= M:  # no position left to expand: n copies of the prefix cut to the maximum, as CTranslate2
                out.append(TranslationResult([pre[:M] for _ in range(n)], [0.0] * n if return_scores else []))
                continue
            first = dict(kw, beam_size=n, max_decoding_length=P + 1, min_decoding_length=P + 1)
            e = self.translate_batch([src], [pre or None], num_hypotheses=n, length_penalty=0, return_scores=True,
                                     **first)[0]
            keep = [(h, sc) for h, sc in zip(e.hypotheses, e.scores) if math.exp(sc) >= min_prob]
            if not keep:
                out.append(TranslationResult([], []))
                continue
            # the continuation's minimum length counts from after the expanded token, as CTranslate2's
            rest = dict(kw, min_decoding_length=max(kw["min_decoding_length"] - P - 1, 0))
            cont = self.translate_batch([src] * len(keep), [h for h, _ in keep], num_hypotheses=1,
                                        length_penalty=0, return_scores=True, **rest)
            # CTranslate2's continuation may end at once (its end token right after the expanded
            # token), which a search after a target prefix never does (in either engine): with
            # beam search that ending competes with the search's best by score
            ends = None
            if kw["beam_size"] > 1 and rest["min_decoding_length"] == 0:
                ends = [x.log_probs[-1] for x in self.score_batch([src] * len(keep), [h for h, _ in keep],
                                                                  max_input_length=kw["max_input_length"])]
            hyps, scores = [], []
            for j, ((h0, sc), r) in enumerate(zip(keep, cont)):
                h = r.hypotheses[0]
                suffix = r.scores[0]
                if ends is not None and len(h0) < M and ends[j] >= suffix:
                    h, suffix = list(h0), ends[j]
                ended = len(h) < M
                n_suffix = len(h) - len(h0) + (1 if ended else 0)
                scores.append(sc + (suffix / (n_suffix ** lp) if n_suffix else 0.0))
                hyps.append(h + [eos] if return_end_token and ended else h)
            out.append(TranslationResult(hyps, scores if return_scores else []))
        return out

    def _event_converter(self, callback, tokens: bool):
        """The C event (index, step, ids, text, delta, is_last) -> CTranslate2's GenerationStepResult."""
        pieces, eos, eos_id = self._target_vocab()
        seen = {}

        def cb(index, step, ids, text, delta, is_last):
            n_prev = seen.get(index, -1)
            seen[index] = len(ids)
            if step >= 0 and len(ids) == n_prev and is_last:  # the end token's step adds nothing
                tid, tok = eos_id, eos
            elif ids:
                tid = ids[-1]
                tok = pieces[tid] if 0 <= tid < len(pieces) else (text.split(" ")[-1] if tokens else None)
            else:
                tid, tok = eos_id, eos
            return callback(GenerationStepResult(step, index, tid, 0, tok, None, None, bool(is_last),
                                                 list(ids), text, delta))
        return cb

    def translate_iterable(self, source: Iterable[Union[str, Sequence[str]]],
                           target_prefix: Optional[Iterable[Optional[Union[str, Sequence[str]]]]] = None,
                           max_batch_size: int = 32, batch_type: str = "examples",
                           **kwargs) -> Iterator[TranslationResult]:
        """Translates an iterable of inputs (token lists or strings), yielding results in order
        (CTranslate2's translate_iterable): reads enough inputs for every replica at once (with
        batch_type "tokens": groups of about max_batch_size tokens each), translated in batches of
        ``max_batch_size``. Other arguments as translate_batch."""
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        for k in ("asynchronous", "callback"):
            if kwargs.get(k):
                raise ValueError(f"translate_iterable does not take {k}")
        it = iter(source)
        pit = iter(target_prefix) if target_prefix is not None else None
        budget = max(max_batch_size, 1) * self._replicas
        while True:
            chunk, pchunk, ntok = [], [], 0
            for x in it:
                chunk.append(x)
                if pit is not None:
                    try:
                        pchunk.append(next(pit))
                    except StopIteration:
                        raise ValueError(f"target_prefix ended after {len(pchunk)} of the inputs") from None
                ntok += len(x) if not isinstance(x, str) else len(x.split()) + 1
                if (batch_type == "examples" and len(chunk) >= budget) or \
                        (batch_type == "tokens" and ntok >= budget):
                    break
            if not chunk:
                return
            yield from self.translate_batch(chunk, target_prefix=pchunk if pit is not None else None,
                                            max_batch_size=max_batch_size, batch_type=batch_type, **kwargs)

    def generate_tokens(self, source: Union[str, Sequence[str]],
                        target_prefix: Optional[Union[str, Sequence[str]]] = None, *,
                        max_decoding_length: int = 256, min_decoding_length: int = 1, sampling_topk: int = 1,
                        sampling_topp: float = 1, sampling_temperature: float = 1, return_log_prob: bool = False,
                        repetition_penalty: float = 1, no_repeat_ngram_size: int = 0, disable_unk: bool = False,
                        suppress_sequences=None, end_token=None, max_input_length: int = 1024,
                        use_vmap: bool = False, seed: int = 12345) -> Iterator[GenerationStepResult]:
        """Yields the tokens of one input as greedy search (or sampling) chooses them
        (CTranslate2's generate_tokens): one GenerationStepResult per token, the end token last
        (``is_last``), each as soon as the search chose it (the search runs on a thread; closing
        the generator stops it). With ``return_log_prob`` (greedy search, token input) each step's
        ``log_prob`` is its token's log-probability as CTranslate2 gives it (0 for prefix tokens),
        from re-running the search after each prefix of the result: the steps then come when the
        search is done."""
        if return_log_prob and sampling_topk != 1:
            raise _not_available("return_log_prob with sampling")
        if isinstance(source, str):
            if return_log_prob:
                raise _not_available("return_log_prob with string input (give token lists)")
        else:
            source = list(source)
        opts = dict(beam_size=1, max_decoding_length=max_decoding_length, min_decoding_length=min_decoding_length,
                    repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                    disable_unk=disable_unk, suppress_sequences=suppress_sequences, end_token=end_token,
                    max_input_length=max_input_length, use_vmap=use_vmap)
        events: "queue.Queue" = queue.Queue()
        stop = threading.Event()
        done = object()

        def on_step(ev):
            events.put(ev)
            return stop.is_set()

        def run():
            try:
                self.translate_batch([source], target_prefix=[target_prefix] if target_prefix is not None else None,
                                     sampling_topk=sampling_topk, sampling_topp=sampling_topp,
                                     sampling_temperature=sampling_temperature, seed=seed, callback=on_step, **opts)
            except CancelledError:
                pass
            except BaseException as e:  # noqa: BLE001  (re-raised in the consumer)
                events.put(e)
            events.put(done)

        worker = threading.Thread(target=run, name="tern-generate", daemon=True)
        worker.start()
        try:
            if not return_log_prob:
                while (ev := events.get()) is not done:
                    if isinstance(ev, BaseException):
                        raise ev
                    yield ev
                return
            steps = []
            while (ev := events.get()) is not done:
                if isinstance(ev, BaseException):
                    raise ev
                steps.append(ev)
            lps = self._step_log_probs(source, steps, len(target_prefix or []), opts)
            for ev, lp in zip(steps, lps):
                ev.log_prob = lp
                yield ev
        finally:
            stop.set()
            worker.join()

    def _step_log_probs(self, source, steps, n_prefix: int, opts) -> List[float]:
        """The log-probability of each step's token in a finished greedy search (the end token's
        too): forced target tokens 0 (as CTranslate2), then for each k the search re-run with the
        first k tokens as target prefix, whose score (length penalty 0: the sum of the generated
        tokens' log-probabilities, the prefix not counted) is the log-probability of the rest; so
        token k's is the difference of rows k and k+1. Greedy search is deterministic, so each row
        continues to the same hypothesis (checked; otherwise each token is taken alone: a search
        of one token after its prefix)."""
        if not steps:
            return []
        eos = self._target_vocab()[1]
        ended = steps[-1].is_last and steps[-1].token == eos and len(steps[-1].token_ids) == len(steps) - 1
        hyp = [ev.token for ev in (steps[:-1] if ended else steps)]
        L = len(hyp)
        ks = list(range(n_prefix, L + 1 if ended else L))
        rows = self.translate_batch([source] * len(ks), target_prefix=[hyp[:k] or None for k in ks],
                                    return_scores=True, length_penalty=0, **opts)
        tail = {}
        if all(r.hypotheses[0] == hyp for r in rows):
            tail = {k: r.scores[0] for k, r in zip(ks, rows)}
        else:  # one search of one token per position
            for k in ks:
                o = dict(opts, max_decoding_length=k + 1)
                r = self.translate_batch([source], target_prefix=[hyp[:k] or None], return_scores=True,
                                         length_penalty=0, **o)[0]
                tail[k] = r.scores[0]  # token k alone: the rest starts at k + 1
            lps = [0.0] * n_prefix + [tail[k] for k in ks]
            return lps
        end = (L + 1) if ended else L
        tail[end] = 0.0
        return [0.0] * n_prefix + [tail[k] - tail[k + 1] for k in ks]

    def translate_file(self, source_path: Union[str, os.PathLike], output_path: Union[str, os.PathLike],
                       target_path: Optional[Union[str, os.PathLike]] = None, max_batch_size: int = 32,
                       read_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                       patience: float = 1, num_hypotheses: int = 1, length_penalty: float = 1.0,
                       coverage_penalty: float = 0.0, repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                       disable_unk: bool = False, suppress_sequences=None, end_token=None,
                       prefix_bias_beta: float = 0, max_input_length: int = 1024, max_decoding_length: int = 256,
                       min_decoding_length: int = 1, use_vmap: bool = False, with_scores: bool = False,
                       sampling_topk: int = 1, sampling_topp: float = 1, sampling_temperature: float = 1,
                       replace_unknowns: bool = False, source_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                       target_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                       target_detokenize_fn: Optional[Callable[[List[str]], str]] = None, *,
                       raw_text: bool = False, seed: int = 12345, no_sort: bool = False) -> ExecutionStats:
        """Translates a tokenized text file as CTranslate2's translate_file: each line is tokens
        separated by spaces (or what ``source_tokenize_fn`` makes of it), ``target_path`` gives
        each line's target prefix; each input writes ``num_hypotheses`` lines, its tokens joined
        by spaces (or ``target_detokenize_fn``'s text), preceded by "score ||| " with
        ``with_scores``. Read ``read_batch_size`` lines at a time (0: max_batch_size x 16 x
        replicas), in constant memory, spread over the replicas. Options as translate_batch.

        ``raw_text=True`` (Tern): raw lines through the model's SentencePiece model in C, as
        ``tern translate`` does (the same code and output format: "i ||| hypothesis ||| score" for
        n-best lists or with_scores; ``max_batch_size`` 0 is the Translator's token budget).
        ``no_sort`` as translate_batch's (batches in the order of each chunk's lines)."""
        _check_no_sort(no_sort)
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        if raw_text:
            return self._translate_file_raw(source_path, output_path, max_batch_size, batch_type, beam_size,
                                            num_hypotheses, length_penalty, coverage_penalty, max_input_length,
                                            max_decoding_length, min_decoding_length, with_scores, no_sort)
        opts = dict(beam_size=beam_size, patience=patience, num_hypotheses=num_hypotheses,
                    length_penalty=length_penalty, coverage_penalty=coverage_penalty,
                    repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size,
                    disable_unk=disable_unk, suppress_sequences=suppress_sequences, end_token=end_token,
                    prefix_bias_beta=prefix_bias_beta, max_input_length=max_input_length,
                    max_decoding_length=max_decoding_length, min_decoding_length=min_decoding_length,
                    use_vmap=use_vmap, return_scores=with_scores, sampling_topk=sampling_topk,
                    sampling_topp=sampling_topp, sampling_temperature=sampling_temperature,
                    replace_unknowns=replace_unknowns, seed=seed, max_batch_size=max_batch_size,
                    batch_type=batch_type, no_sort=no_sort)
        _check_options(patience, prefix_bias_beta, False, False, False, replace_unknowns)
        src_path, out_path = os.fspath(source_path), os.fspath(output_path)
        tgt_path = os.fspath(target_path) if target_path is not None else None
        read = read_batch_size if read_batch_size > 0 else max(max_batch_size, 1) * 16 * self._replicas
        detok = target_detokenize_fn or " ".join
        t0 = time.perf_counter()
        n_ex = n_tok = 0
        offset = 0  # the index of the chunk's first line: the sampling draws of one call
        with open(src_path, encoding="utf-8") as fs, open(out_path, "w", encoding="utf-8") as fo, \
                (open(tgt_path, encoding="utf-8") if tgt_path else contextlib.nullcontext()) as ft:
            for chunk in _read_chunks(fs, ft, src_path, tgt_path, read, batch_type, source_tokenize_fn,
                                      target_tokenize_fn):
                srcs = [s for s, _ in chunk]
                pres = [p for _, p in chunk] if ft is not None else None
                # each chunk's sampling draws are those of its lines' place in the file
                for r in self.translate_batch(srcs, target_prefix=pres, _index_offset=offset, **opts):
                    for k, h in enumerate(r.hypotheses):
                        text = detok(h)
                        fo.write(f"{_g(r.scores[k])} ||| {text}\n" if with_scores else text + "\n")
                    n_tok += len(r.hypotheses[0]) if r.hypotheses else 0
                n_ex += len(chunk)
                offset += len(chunk)
        return ExecutionStats(n_tok, n_ex, (time.perf_counter() - t0) * 1000.0)

    def _translate_file_raw(self, source_path, output_path, max_batch_size, batch_type, beam_size, num_hypotheses,
                            length_penalty, coverage_penalty, max_input_length, max_decoding_length,
                            min_decoding_length, with_scores, no_sort=False) -> ExecutionStats:
        n, tok, sec = self._translator()._translate_file(
            os.fspath(source_path), os.fspath(output_path), beam_size, num_hypotheses, float(length_penalty),
            float(coverage_penalty), max_decoding_length, min_decoding_length, bool(with_scores),
            max_batch_size if batch_type == "examples" else 0, max_batch_size if batch_type == "tokens" else 0,
            _max_input_length(max_input_length), no_sort=no_sort)
        return ExecutionStats(tok, n, sec * 1000.0)

    # -------------------------------------------------------------- scoring

    def score_batch(self, source: Sequence[Union[str, Sequence[str]]],
                    target: Sequence[Union[str, Sequence[str]]], max_batch_size: int = 0,
                    batch_type: str = "examples", max_input_length: int = 1024, offset: int = 0, *,
                    asynchronous: bool = False):
        """Force decoding (CTranslate2's score_batch): the log-probability of each target token
        given its source, and of the end token, the first ``offset`` tokens left out. Token lists
        or strings (both sides in the same form; strings give ``tokens`` None). Spread over the
        replicas as translate_batch; ``asynchronous=True`` returns AsyncScoringResult handles.
        The GIL is released while Tern works."""
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        if offset < 0:
            raise ValueError("offset must be >= 0")
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
        mil = _max_input_length(max_input_length)
        translator = self._translator()

        def part(a: int, b: int):
            lps = translator._score(src[a:b], tgt[a:b], tokens, max_batch_size if batch_type == "examples" else 0,
                                    max_batch_size if batch_type == "tokens" else 0, mil)
            out = []
            for i, lp in zip(range(a, b), lps):
                toks = None
                if tokens:
                    toks = list(target[i])[:max(len(lp) - 1, 0)] + ["</s>"] if lp else []
                    toks = toks[offset:]
                out.append(ScoringResult(toks, list(lp)[offset:]))
            return out

        run = lambda: self._run_parts(len(src), True, part)  # noqa: E731
        if asynchronous:
            return self._submit_async(run, len(src), AsyncScoringResult)
        return run()

    def estimate_quality(self, source: Sequence[Sequence[str]], **kwargs) -> List["QualityEstimate"]:
        """Tern's quality estimates (no CTranslate2 counterpart: its translate_batch returns no
        token log-probabilities): each source's best translation by translate_batch (``kwargs``
        are its arguments; one hypothesis), force-decoded by score_batch, as the C API's
        tern_request_t.token_scores and `tern translate --quality` give them (docs/translate.md).
        Token lists only (the hypothesis's own tokens are scored)."""
        source = list(source)
        if source and not _is_tokens(source):
            raise TypeError("estimate_quality takes token lists (the hypotheses' own tokens are scored)")
        if kwargs.get("num_hypotheses", 1) != 1 or kwargs.get("asynchronous") or kwargs.get("return_end_token"):
            raise ValueError("estimate_quality estimates one best translation: no num_hypotheses, asynchronous or "
                             "return_end_token")
        mil = kwargs.get("max_input_length", 1024)
        hyps = [r.hypotheses[0] if r.hypotheses else [] for r in self.translate_batch(source, **kwargs)]
        out = []
        for src, hyp, sc in zip(source, hyps, self.score_batch(source, hyps, max_input_length=mil)):
            lps = list(sc.log_probs)
            words, cur = [], None
            for k, tok in enumerate(hyp[:max(len(lps) - 1, 0)]):
                if cur is None or tok.startswith("\u2581"):
                    cur = [tok.replace("\u2581", ""), k, k + 1, [lps[k]]]
                    words.append(cur)
                else:
                    cur[0] += tok
                    cur[2] = k + 1
                    cur[3].append(lps[k])
            out.append(QualityEstimate(list(hyp), sum(lps) / len(lps) if lps else 0.0,
                                       [(w, a, b, sum(v) / len(v)) for w, a, b, v in words],
                                       list(sc.tokens or []), lps))
        return out

    def score_iterable(self, source: Iterable[Sequence[str]], target: Iterable[Sequence[str]],
                       max_batch_size: int = 64, batch_type: str = "examples", **kwargs) -> Iterator[ScoringResult]:
        """Scores an iterable of (source, target) pairs, yielding results in order (CTranslate2's
        score_iterable). Other arguments as score_batch."""
        if kwargs.get("asynchronous"):
            raise ValueError("score_iterable does not take asynchronous")
        it = zip(source, target)
        budget = max(max_batch_size, 1) * self._replicas
        while True:
            chunk, ntok = [], 0
            for s, t in it:
                chunk.append((s, t))
                ntok += max(len(s), len(t)) if not isinstance(s, str) else len(s.split()) + 1
                if (batch_type == "examples" and len(chunk) >= budget) or (batch_type == "tokens" and ntok >= budget):
                    break
            if not chunk:
                return
            yield from self.score_batch([s for s, _ in chunk], [t for _, t in chunk], max_batch_size=max_batch_size,
                                        batch_type=batch_type, **kwargs)

    def score_file(self, source_path: Union[str, os.PathLike], target_path: Union[str, os.PathLike],
                   output_path: Union[str, os.PathLike], max_batch_size: int = 32, read_batch_size: int = 0,
                   batch_type: str = "examples", max_input_length: int = 1024, offset: int = 0,
                   with_tokens_score: bool = False, source_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                   target_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                   target_detokenize_fn: Optional[Callable[[List[str]], str]] = None) -> ExecutionStats:
        """Scores a parallel tokenized file pair as CTranslate2's score_file: each output line is
        "score ||| target tokens </s>" (the score the mean log-probability over the target tokens
        and the end token), with ``with_tokens_score`` followed by " ||| " and each token's
        log-probability. Lines whose counts differ are an error naming both files."""
        if batch_type not in ("examples", "tokens"):
            raise ValueError("batch_type must be 'examples' or 'tokens'")
        src_path, tgt_path, out_path = os.fspath(source_path), os.fspath(target_path), os.fspath(output_path)
        read = read_batch_size if read_batch_size > 0 else max(max_batch_size, 1) * 16 * self._replicas
        detok = target_detokenize_fn or " ".join
        t0 = time.perf_counter()
        n_ex = n_tok = 0
        with open(src_path, encoding="utf-8") as fs, open(tgt_path, encoding="utf-8") as ft, \
                open(out_path, "w", encoding="utf-8") as fo:
            for chunk in _read_chunks(fs, ft, src_path, tgt_path, read, batch_type, source_tokenize_fn,
                                      target_tokenize_fn, need_target=True):
                res = self.score_batch([s for s, _ in chunk], [t for _, t in chunk], max_batch_size=max_batch_size,
                                       batch_type=batch_type, max_input_length=max_input_length, offset=offset)
                for (s, t), r in zip(chunk, res):
                    toks, lps = r.tokens, r.log_probs
                    if not s:  # an empty source scores nothing: zeros, as CTranslate2 writes them (no offset)
                        toks = list(t) + ["</s>"]
                        lps = [0.0] * len(toks)
                    mean = sum(lps) / len(lps) if lps else 0.0
                    line = f"{_g(mean)} ||| {detok(toks)}"
                    if with_tokens_score:
                        line += " ||| " + " ".join(_g(x) for x in lps)
                    fo.write(line + "\n")
                    n_tok += len(lps)
                n_ex += len(chunk)
        return ExecutionStats(n_tok, n_ex, (time.perf_counter() - t0) * 1000.0)

    def __repr__(self) -> str:
        return (f"tern.Translator({self.model_dir!r}, device='cpu', compute_type={self._requested_compute_type!r}, "
                f"inter_threads={self.inter_threads}, intra_threads={self.intra_threads})")

    def __del__(self) -> None:
        for p in (getattr(self, "_split_pool", None), getattr(self, "_async_pool", None)):
            if p is not None:
                p.shutdown(wait=False)


def _g(x: float) -> str:
    """A float as CTranslate2's files write it (C++ ostream's default: %g, 6 digits)."""
    return f"{x:g}"


def _read_chunks(fs, ft, src_path, tgt_path, size, batch_type, src_fn, tgt_fn, need_target=False):
    """Reads (source tokens, target tokens or None) pairs from the files, `size` examples (or
    about `size` tokens) at a time; a token list that is not a list of non-empty, space-free
    str, or files of different lengths, are errors naming the file and the line."""
    lineno = 0
    chunk, ntok = [], 0
    for line in fs:
        lineno += 1
        tline = None
        if ft is not None:
            tline = ft.readline()
            if not tline:
                raise ValueError(f"{tgt_path}: has {lineno - 1} lines, fewer than {src_path}")
        s = _tokens_of(line, src_fn, src_path, lineno)
        t = _tokens_of(tline, tgt_fn, tgt_path, lineno) if tline is not None else None
        chunk.append((s, t))
        ntok += len(s)
        if (batch_type == "examples" and len(chunk) >= size) or (batch_type == "tokens" and ntok >= size):
            yield chunk
            chunk, ntok = [], 0
    if ft is not None and ft.readline():
        raise ValueError(f"{tgt_path}: has more lines than {src_path} ({lineno})")
    if chunk:
        yield chunk


def _tokens_of(line: str, fn, path: str, lineno: int) -> List[str]:
    line = line.rstrip("\n")
    toks = fn(line) if fn is not None else line.split()
    if not isinstance(toks, (list, tuple)) or any(not isinstance(t, str) or not t or any(c.isspace() for c in t)
                                                  for t in toks):
        raise ValueError(f"{path}:{lineno}: the tokenizer must give a list of non-empty tokens without spaces, "
                         f"got {toks!r}")
    return list(toks)


def _batched(it, n):  # kept for callers that chunk themselves
    it = iter(it)
    while chunk := list(itertools.islice(it, n)):
        yield chunk
