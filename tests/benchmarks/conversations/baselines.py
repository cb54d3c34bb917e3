"""The two rankings the served search is compared with, over the same turn texts in the same run:
Okapi BM25 (the plain reference) and the server's encoder alone (cosine)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from infra.embedders import Embedder, create_embedder
from infra.settings import Settings

_WORD = re.compile(r"\w+")
BATCH = 64


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75, idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``) over word tokens."""

    def __init__(self, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.counts = [Counter(tokens(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.counts]
        self.average = sum(self.lengths) / max(1, len(self.lengths))
        frequency = Counter(term for c in self.counts for term in c)
        n = len(self.counts)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}

    def score(self, query: str, index: int) -> float:
        counts, norm = self.counts[index], 1 - self.b + self.b * self.lengths[index] / self.average
        return sum(self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + self.k1 * norm)
                   for t in set(tokens(query)) if t in counts)

    def top(self, query: str, k: int) -> list[int]:
        """The indexes of the ``k`` best documents with a score above zero, best first."""
        scores = [(self.score(query, i), -i) for i in range(len(self.counts))]
        return [-i for s, i in sorted(scores, reverse=True)[:k] if s > 0]


def server_embedder() -> Embedder:
    """The encoder the server is configured with (the same settings, uncached)."""
    return create_embedder(Settings())


def embed(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of ``texts``, in batches of :data:`BATCH`, as one matrix."""
    rows: list[list[float]] = []
    for start in range(0, len(texts), BATCH):
        rows.extend(embedder.embed(list(texts[start:start + BATCH])))
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), embedder.dimensions)


def cosine_top(turns: np.ndarray, questions: np.ndarray, k: int) -> list[list[int]]:
    """For each question, the indexes of its ``k`` nearest turns by cosine, nearest first."""
    scores = questions @ turns.T
    return [[int(i) for i in np.argsort(-row, kind="stable")[:k]] for row in scores]
