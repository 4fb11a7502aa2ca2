"""``bench.active_learning_pool``'s set-up: the pools' sizes, the query strategies and their
modifiers, the peer's row and the run's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.common import DATA_DIR, RESULTS_DIR

DATASETS = ("chunking", "basenp", "JapaneseNE")
SIZES = {"chunking": (700, 200), "basenp": (700, 200), "JapaneseNE": (600, 116)}
BASE = ("random", "random_sentence", "least_confidence", "margin", "entropy",
        "sentence_least_confidence", "sentence_margin", "sentence_entropy", "bald", "lookahead")
MODIFIERS = ("diverse", "propagate")
PEER = "CRFsuite (sentences, least confidence)"
DEFAULT_STRATEGIES = ("random", "random_sentence", "sentence_entropy", "least_confidence",
                      "entropy", "bald", "lookahead", "entropy+diverse", "entropy+propagate",
                      "bald+diverse+propagate")
SHORTLIST = 3  # short-list size for lookahead and +diverse, in batches
PROPAGATE_STEPS = 5


@dataclass
class Config:
    datasets: list[str] = field(default_factory=lambda: list(DATASETS))
    strategies: list[str] = field(default_factory=lambda: list(DEFAULT_STRATEGIES))
    seeds: int = 3
    n_init: int = 10
    round_fraction: float = 0.02
    max_fraction: float = 0.40
    patience: int = 1
    max_iter: int = 6
    peer: bool = True
    pool: int | None = None
    test: int | None = None
    data_dir: str = str(DATA_DIR)
    out: str = str(RESULTS_DIR)


def parse_spec(spec: str) -> tuple[str, set[str]]:
    """``"bald+diverse"`` -> ``("bald", {"diverse"})``; unknown parts raise ValueError."""
    base, *mods = spec.split("+")
    if base not in BASE:
        raise ValueError(f"unknown strategy {base!r}; choose from {', '.join(BASE)}")
    bad = [m for m in mods if m not in MODIFIERS]
    if bad:
        raise ValueError(f"unknown modifier {bad[0]!r}; choose from {', '.join(MODIFIERS)}")
    if mods and base in ("random_sentence",) or (mods and base.startswith("sentence_")):
        raise ValueError(f"{spec!r}: modifiers apply to token strategies only")
    return base, set(mods)
