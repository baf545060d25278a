"""Type hints of the tern package (see __init__.py for the docstrings)."""
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Union

from . import score as score

__version__: str

Tokens = List[str]
Source = Union[str, Sequence[str]]

class TernError(RuntimeError): ...
class CancelledError(TernError): ...
class NotAvailableError(TernError, NotImplementedError): ...

@dataclass
class TranslationResult:
    hypotheses: list  # List[List[str]] for token input, List[str] for string input
    scores: List[float]
    attention: list
    logits: list
    def __getitem__(self, key: str): ...

@dataclass
class ScoringResult:
    tokens: Optional[List[str]]
    log_probs: List[float]

@dataclass
class QualityEstimate:
    hypothesis: List[str]
    score: float
    words: List[tuple]
    tokens: List[str]
    log_probs: List[float]

@dataclass
class ExecutionStats:
    num_tokens: int
    num_examples: int
    total_time_in_ms: float

TranslationStats = ExecutionStats

@dataclass
class GenerationStepResult:
    step: int
    batch_id: int
    token_id: int
    hypothesis_id: int
    token: Optional[str]
    log_prob: Optional[float]
    logits: Optional[list]
    is_last: bool
    token_ids: List[int]
    text: str
    delta: Optional[str]

StepResult = GenerationStepResult

class AsyncTranslationResult:
    def result(self) -> TranslationResult: ...
    def done(self) -> bool: ...

class AsyncScoringResult:
    def result(self) -> ScoringResult: ...
    def done(self) -> bool: ...

def set_log_level(level: int) -> None: ...
def get_cuda_device_count() -> int: ...
def get_supported_compute_types(device: str, device_index: int = 0) -> set: ...

class Translator:
    model_dir: str
    inter_threads: int
    intra_threads: int
    def __init__(self, model_path: Union[str, os.PathLike, None] = None, device: str = "cpu",
                 compute_type: Union[str, dict] = "default", inter_threads: int = 1, intra_threads: int = 0,
                 max_batch_tokens: int = 4096, *, device_index: Union[int, List[int]] = 0,
                 max_queued_batches: int = 0, flash_attention: bool = False, tensor_parallel: bool = False,
                 files: object = None, model_dir: Union[str, os.PathLike, None] = None,
                 shortlist: Optional[str] = None) -> None: ...
    @property
    def device(self) -> str: ...
    @property
    def device_index(self) -> List[int]: ...
    @property
    def compute_type(self) -> str: ...
    @property
    def num_translators(self) -> int: ...
    @property
    def num_queued_batches(self) -> int: ...
    @property
    def num_active_batches(self) -> int: ...
    @property
    def tensor_parallel(self) -> bool: ...
    @property
    def model_is_loaded(self) -> bool: ...
    def unload_model(self, to_cpu: bool = False) -> None: ...
    def load_model(self, keep_cache: bool = False) -> None: ...
    @property
    def info(self) -> dict: ...
    def translate_batch(self, source: Sequence[Source], target_prefix: Optional[Sequence[Optional[Source]]] = None,
                        max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                        num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                        max_input_length: int = 1024, max_decoding_length: int = 256,
                        min_decoding_length: int = 1, return_scores: bool = False,
                        callback: Optional[Callable[[GenerationStepResult], Optional[bool]]] = None,
                        sampling_topk: int = 1, sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                        seed: int = 12345, *, asynchronous: bool = False, patience: float = 1,
                        disable_unk: bool = False, suppress_sequences: Optional[Sequence[Source]] = None,
                        end_token: Union[str, List[str], List[int], None] = None, return_end_token: bool = False,
                        prefix_bias_beta: float = 0, use_vmap: bool = False, return_logits_vocab: bool = False,
                        return_attention: bool = False, return_alternatives: bool = False,
                        min_alternative_expansion_prob: float = 0,
                        replace_unknowns: bool = False,
                        no_sort: bool = False,
                        beams_apart: bool = False) -> Union[List[TranslationResult], List[AsyncTranslationResult]]: ...
    def translate_iterable(self, source: Iterable[Source], target_prefix: Optional[Iterable[Optional[Source]]] = None,
                           max_batch_size: int = 32, batch_type: str = "examples",
                           **kwargs) -> Iterator[TranslationResult]: ...
    def generate_tokens(self, source: Source, target_prefix: Optional[Source] = None, *,
                        max_decoding_length: int = 256, min_decoding_length: int = 1, sampling_topk: int = 1,
                        sampling_topp: float = 1, sampling_temperature: float = 1, return_log_prob: bool = False,
                        repetition_penalty: float = 1, no_repeat_ngram_size: int = 0, disable_unk: bool = False,
                        suppress_sequences: Optional[Sequence[Source]] = None,
                        end_token: Union[str, List[str], List[int], None] = None, max_input_length: int = 1024,
                        use_vmap: bool = False, seed: int = 12345) -> Iterator[GenerationStepResult]: ...
    def translate_file(self, source_path: Union[str, os.PathLike], output_path: Union[str, os.PathLike],
                       target_path: Optional[Union[str, os.PathLike]] = None, max_batch_size: int = 32,
                       read_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                       patience: float = 1, num_hypotheses: int = 1, length_penalty: float = 1.0,
                       coverage_penalty: float = 0.0, repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                       disable_unk: bool = False, suppress_sequences: Optional[Sequence[Source]] = None,
                       end_token: Union[str, List[str], List[int], None] = None, prefix_bias_beta: float = 0,
                       max_input_length: int = 1024, max_decoding_length: int = 256, min_decoding_length: int = 1,
                       use_vmap: bool = False, with_scores: bool = False, sampling_topk: int = 1,
                       sampling_topp: float = 1, sampling_temperature: float = 1, replace_unknowns: bool = False,
                       source_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                       target_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                       target_detokenize_fn: Optional[Callable[[List[str]], str]] = None, *,
                       raw_text: bool = False, seed: int = 12345, no_sort: bool = False) -> ExecutionStats: ...
    def estimate_quality(self, source: Sequence[Sequence[str]], **kwargs) -> List[QualityEstimate]: ...
    def score_batch(self, source: Sequence[Source], target: Sequence[Source], max_batch_size: int = 0,
                    batch_type: str = "examples", max_input_length: int = 1024, offset: int = 0, *,
                    asynchronous: bool = False) -> Union[List[ScoringResult], List[AsyncScoringResult]]: ...
    def score_iterable(self, source: Iterable[Sequence[str]], target: Iterable[Sequence[str]],
                       max_batch_size: int = 64, batch_type: str = "examples", **kwargs) -> Iterator[ScoringResult]: ...
    def score_file(self, source_path: Union[str, os.PathLike], target_path: Union[str, os.PathLike],
                   output_path: Union[str, os.PathLike], max_batch_size: int = 32, read_batch_size: int = 0,
                   batch_type: str = "examples", max_input_length: int = 1024, offset: int = 0,
                   with_tokens_score: bool = False, source_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                   target_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
                   target_detokenize_fn: Optional[Callable[[List[str]], str]] = None) -> ExecutionStats: ...
