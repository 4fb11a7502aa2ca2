"""The command line, in the spirit of CRF++'s ``crf_learn`` and ``crf_test``; one module per
command group, every model option read from :mod:`gpsl.params`.

::

    python -m gpsl train -t template [-d -1,1] [--kernel linear|rbf] train.data model_dir
    python -m gpsl train --scheduler tcp://HOST:8786 ... train.data model_dir   (on Dask)
    python -m gpsl test -m model_dir [--decoder rns|viterbi] [--marginals] test.data [-o out]
    python -m gpsl eval -m model_dir test.data
    python -m gpsl query -m model_dir [--strategy S] [--batch N] pool.data
    python -m gpsl aggregate crowd.jsonl [-o out] [--report annotators.json]
    python -m gpsl aggregate --model joint -t ner raw/val [-o out]   (a folder per annotator)
    python -m gpsl train --crowd [-t ner] [--trusted NAME] crowd.jsonl|raw/val model_dir

:mod:`~gpsl.cli.train` (``train``, ``train --crowd``), :mod:`~gpsl.cli.tag` (``test``,
``eval``), :mod:`~gpsl.cli.query`, :mod:`~gpsl.cli.aggregate`, :mod:`~gpsl.cli.crowd` (the
crowd options, reading and report that ``aggregate`` and ``train --crowd`` share),
:mod:`~gpsl.cli.common` (argument types, errors, output), :mod:`~gpsl.cli.main` (the parser
and the one-line error of every command).
"""

from gpsl.cli.common import parse_offsets_arg
from gpsl.cli.main import build_parser, main

__all__ = ["main", "build_parser", "parse_offsets_arg"]
