"""``bench.paper``'s set-up: its methods, the paper's published numbers, the run's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.common import DATA_DIR, PAPER_SIZES, RESULTS_DIR
from bench.peers import PEER_PARAMS

# --------------------------------------------------------------------------- methods

GPSL_OFFSETS = {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}

METHODS = (*GPSL_OFFSETS, *PEER_PARAMS)
PAPER_RNS = "GPSL2 (m+v/2)"
"""GPSL2 predicted with the paper's RNS local score m + v/2 (the default uses the means m)."""
DEFAULT_METHODS = METHODS
#: Methods whose per-token marginals are probabilities trained for likelihood (calibration).
MARGINAL_METHODS = ("GPSL1", "GPSL2", "GPSL4", "CRFsuite", "LogReg")
CRF_COMPLETE = "CRFsuite (complete sentences)"

DEFAULT_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
QUICK_DATASETS = ("seg", "chunking")
QUICK_FRACTIONS = (0.1, 0.3)
QUICK_PARTITIONS = 2
QUICK_SIZES = {"seg": (20, 16), "chunking": (25, 25)}
QUICK_MAX_ITER = 10
N_BINS = 10

# --------------------------------------------------------------------------- the paper
# Srijith, Balamurugan, Shevade, "Gaussian process pseudo-likelihood models for sequence
# labeling" (../shared/paper/gpsl-paper.tex), section 6. Hamming loss in %, mean +- std over 10
# partitions; marks: "*" significantly different from the best method, "+" from GPstruct
# (paired t-test, 5%); "best" = bold in the paper.
PAPER_TABLE1 = {
    "GPSL1": {"basenp": (5.73, 0.98, "*"), "chunking": (13.02, 1.87, "*"),
              "seg": (23.45, 2.96, "best"), "JapaneseNE": (8.26, 2.63, "*")},
    "GPSL2": {"basenp": (5.55, 0.92, "*"), "chunking": (12.69, 1.69, "*"),
              "seg": (23.51, 2.93, ""), "JapaneseNE": (7.86, 2.45, "*")},
    "GPSL4": {"basenp": (5.54, 0.94, "*"), "chunking": (12.70, 1.79, "*"),
              "seg": (23.53, 2.85, ""), "JapaneseNE": (7.82, 2.56, "*")},
    "CRF": {"basenp": (5.21, 0.84, "+"), "chunking": (11.76, 1.73, "*+"),
            "seg": (24.10, 3.49, "*+"), "JapaneseNE": (7.76, 2.80, "*")},
    "SSVM": {"basenp": (5.19, 0.91, "best+"), "chunking": (10.71, 1.49, "best+"),
             "seg": (23.46, 3.45, ""), "JapaneseNE": (6.17, 2.60, "best+")},
    "GPstruct": {"basenp": (5.66, 0.93, "*"), "chunking": (12.56, 1.82, "*"),
                 "seg": (23.55, 2.90, ""), "JapaneseNE": (7.79, 2.92, "*")},
}
#: Paper Table 1 header rows: number of labels and of features.
PAPER_DATA = {"basenp": (3, 6438), "chunking": (14, 29764), "seg": (2, 1386),
              "JapaneseNE": (17, 102799)}
#: Paper Table 2: average training time in seconds (Matlab, 3.2 GHz Intel, 4 GB).
PAPER_TABLE2 = {
    "seg": {"GPSL1": 17.13, "GPSL2": 19.64, "GPSL4": 22.83, "GPstruct": 3.82e3},
    "chunking": {"GPSL1": 1.09e3, "GPSL2": 1.35e3, "GPSL4": 1.71e3, "GPstruct": 4.56e4},
    "basenp": {"GPSL1": 6.01e3, "GPSL2": 6.69e3, "GPSL4": 7.25e3, "GPstruct": 7.54e4},
    "JapaneseNE": {"GPSL1": 1.24e3, "GPSL2": 1.56e3, "GPSL4": 1.93e3, "GPstruct": 4.92e4},
}
#: Paper Table 3: GPSL1 with Algorithm 2 vs Viterbi (UGM): loss %, paired t, runtime s, iterations.
PAPER_TABLE3 = {
    "seg": {"loss_rns": 23.45, "loss_viterbi": 24.26, "t": 3.8183, "time_rns": 0.1227,
            "time_viterbi": 0.0856, "iterations": 5},
    "chunking": {"loss_rns": 13.02, "loss_viterbi": 13.69, "t": 3.6421, "time_rns": 0.2491,
                 "time_viterbi": 0.2628, "iterations": 5},
    "basenp": {"loss_rns": 5.73, "loss_viterbi": 5.75, "t": 0.3162, "time_rns": 0.5207,
               "time_viterbi": 0.5338, "iterations": 4},
    "JapaneseNE": {"loss_rns": 8.26, "loss_viterbi": 8.84, "t": 2.475, "time_rns": 0.3661,
                   "time_viterbi": 0.5653, "iterations": 3},
}


# --------------------------------------------------------------------------- configuration


@dataclass
class Config:
    """Settings of one run (see ``--help``)."""

    datasets: list[str]
    methods: list[str]
    fractions: list[float]
    n_partitions: int = 10
    missing_partitions: int | None = None  # Figure 3 on the first N partitions (None = all)
    seed: int = 0
    max_iter: int = 100
    tol: float | None = None  # None = the GPSL default
    learn_hyper: bool | None = None  # None = the GPSL default
    inference: str = "full"  # Table 1 is the full GP's; "sparse" for the scalable mode
    sizes: dict = field(default_factory=lambda: dict(PAPER_SIZES))
    data_dir: str = str(DATA_DIR)
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False
    verbose: bool = True
