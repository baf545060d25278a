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

@dataclass
class TranslationResult:
    hypotheses: list  # List[List[str]] for token input, List[str] for string input
    scores: List[float]
    def __getitem__(self, key: str): ...

@dataclass
class ScoringResult:
    tokens: Optional[List[str]]
    log_probs: List[float]

@dataclass
class TranslationStats:
    num_examples: int
    num_tokens: int
    total_time_in_ms: float

@dataclass
class StepResult:
    batch_id: int
    step: int
    token_ids: List[int]
    text: str
    delta: Optional[str]
    is_last: bool

def set_log_level(level: int) -> None: ...

class Translator:
    model_dir: str
    device: str
    compute_type: str
    inter_threads: int
    intra_threads: int
    def __init__(self, model_dir: Union[str, os.PathLike], device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 1, intra_threads: int = 0, max_batch_tokens: int = 4096) -> None: ...
    @property
    def info(self) -> dict: ...
    def translate_batch(self, source: Sequence[Source], target_prefix: Optional[Sequence[Optional[Source]]] = None,
                        max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                        num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                        max_input_length: int = 1024, max_decoding_length: int = 256,
                        min_decoding_length: int = 1, return_scores: bool = False,
                        callback: Optional[Callable[[StepResult], Optional[bool]]] = None,
                        sampling_topk: int = 1, sampling_topp: float = 1.0, sampling_temperature: float = 1.0,
                        repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0,
                        seed: int = 12345) -> List[TranslationResult]: ...
    def translate_iterable(self, source: Iterable[Source], target_prefix: Optional[Iterable[Optional[Source]]] = None,
                           max_batch_size: int = 32, batch_type: str = "examples",
                           **kwargs) -> Iterator[TranslationResult]: ...
    def translate_file(self, source_path: Union[str, os.PathLike], output_path: Union[str, os.PathLike],
                       max_batch_size: int = 0, batch_type: str = "examples", beam_size: int = 2,
                       num_hypotheses: int = 1, length_penalty: float = 1.0, coverage_penalty: float = 0.0,
                       max_input_length: int = 1024, max_decoding_length: int = 256,
                       min_decoding_length: int = 1, with_scores: bool = False) -> TranslationStats: ...
    def score_batch(self, source: Sequence[Source], target: Sequence[Source]) -> List[ScoringResult]: ...
