from dataclasses import dataclass
from typing import List, Optional, Sequence

@dataclass
class BLEUScore:
    score: float
    precisions: List[float]
    bp: float
    ratio: float
    sys_len: int
    ref_len: int

@dataclass
class CHRFScore:
    score: float
    name: str

def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]], tokenize: str = "13a",
                lowercase: bool = False, smooth_method: str = "exp", smooth_value: Optional[float] = None,
                max_ngram_order: int = 4, effective_order: bool = False) -> BLEUScore: ...
def sentence_bleu(hypothesis: str, references: Sequence[str], tokenize: str = "13a", lowercase: bool = False,
                  smooth_method: str = "exp", smooth_value: Optional[float] = None, max_ngram_order: int = 4,
                  effective_order: bool = True) -> BLEUScore: ...
def corpus_chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]], char_order: int = 6,
                word_order: int = 0, beta: int = 2, lowercase: bool = False, whitespace: bool = False,
                eps_smoothing: bool = False) -> CHRFScore: ...
