"""Lexical knowledge learned on unlabeled text, for the built-in feature set ``ner``: each
word's Brown cluster (its path in a binary merge tree of words, Brown et al. 1992; used for NER
by Ratinov and Roth 2009) and a word-frequency bucket.

The tables ``gpsl/data/lexicon-LANG.tsv.xz`` are derived by ``scripts/lexicon_tables.py`` from
``spacy-lookups-data`` 1.0.5 (MIT; ``gpsl/data/LICENSE-lexicon.txt``): one ``word<TAB>cluster
<TAB>bucket`` line per word that has a cluster. ``cluster`` is the path as an integer whose
lowest bit is the path's first step, so the path's first ``k`` steps are ``cluster & (2**k -
1)``; ``bucket`` is ``floor(-log p(word))`` (0-19) or ``-``. Nothing is fetched at run time; a
table is read once per process (about 0.3 s for English's 190,129 words).

A word is looked up as written, then lowercased, then title-cased (``LONDON`` has its own
cluster, ``london`` none, ``Paris`` and ``London`` share one); a word in none of these forms
reads ``none``, one value shared by every word the table lacks.
"""

from __future__ import annotations

import functools
import lzma
from pathlib import Path

from gpsl.errors import InputError

__all__ = ["CLUSTER_LENGTHS", "DEFAULT_GROUPS", "GROUPS", "Lexicon", "languages", "lexicon"]

DATA = Path(__file__).resolve().parent / "data"
#: the cluster path prefixes' lengths (Ratinov and Roth 2009 use 4, 6, 10 and 20)
CLUSTER_LENGTHS = (4, 6, 10, 20)
#: the lexical feature groups of ``ner``: Brown cluster prefixes, the frequency bucket
GROUPS = ("cluster", "freq")
#: the groups of plain ``ner``: the clusters pay on the CoNLL crowd's learning curve, the
#: frequency bucket does not (docs/real-crowd.md, ``python -m bench.crowd_real --curve``)
DEFAULT_GROUPS = ("cluster",)
NONE = "none"


def languages() -> tuple[str, ...]:
    """The languages that have a table, sorted."""
    return tuple(sorted(p.name[len("lexicon-"):-len(".tsv.xz")]
                        for p in DATA.glob("lexicon-*.tsv.xz")))


class Lexicon:
    """One language's table: :meth:`clusters` and :meth:`buckets` of a sentence's words."""

    def __init__(self, lang: str, table: dict[str, tuple[int, str]]):
        self.lang = lang
        self.table = table

    def entry(self, word: str) -> tuple[int, str] | None:
        """The ``(cluster, bucket)`` of ``word`` as written, lowercased or title-cased."""
        get = self.table.get
        return get(word) or get(word.lower()) or get(word.title())

    def clusters(self, words: list[str], k: int) -> list[str]:
        """The first ``k`` steps of each word's cluster path (hex), ``none`` when unknown."""
        mask = (1 << k) - 1
        out = []
        for w in words:
            e = self.entry(w)
            out.append(NONE if e is None else format(e[0] & mask, "x"))
        return out

    def buckets(self, words: list[str]) -> list[str]:
        """Each word's frequency bucket ``floor(-log p)``, ``none`` when unknown."""
        out = []
        for w in words:
            e = self.entry(w)
            out.append(NONE if e is None or e[1] == "-" else e[1])
        return out


@functools.lru_cache(maxsize=4)
def lexicon(lang: str = "en") -> Lexicon:
    """The table of ``lang``; :class:`InputError` (one line) for a language without one."""
    path = DATA / f"lexicon-{lang}.tsv.xz"
    if not lang.isalpha() or not path.is_file():
        raise InputError(f"no word-cluster table for language {lang!r} (tables: "
                         + ", ".join(languages()) + ")", source="ner")
    table: dict[str, tuple[int, str]] = {}
    for line in lzma.decompress(path.read_bytes()).decode("utf-8").splitlines():
        word, cluster, bucket = line.split("\t")
        table[word] = (int(cluster), bucket)
    return Lexicon(lang, table)
