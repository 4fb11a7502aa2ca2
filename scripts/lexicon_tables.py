"""Derive gpsl's compact word-cluster tables (``gpsl/data/lexicon-LANG.tsv.xz``) from the pinned
``spacy-lookups-data`` wheel (MIT). Run from the checkout, no make needed::

    python scripts/lexicon_tables.py            # en de es
    python scripts/lexicon_tables.py en         # English only

It pip-downloads the wheel (about 98 MB) into a temporary folder under /tmp, reads
``LANG_lexeme_cluster.json.gz`` (Brown clusters, each word's bit-string path stored as an
integer whose lowest bit is the path's first step) and ``LANG_lexeme_prob.json.gz`` (the word's
log-probability), keeps the words that have a cluster (the 200,000 most
probable when there are more), and writes one ``word<TAB>cluster<TAB>
bucket`` line per word, sorted, xz-compressed, where ``bucket`` is ``floor(-log p)`` (0-19; ``-``
when the wheel has no probability table). The wheel stays out of the repository and out of the
runtime install; gpsl reads only the derived tables (:mod:`gpsl.lexicon`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import math
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "spacy-lookups-data"
VERSION = "1.0.5"
SHA256 = "466f21f087e4144bc93800679437ec5a17be7d0888734b1ba880b3ecb0978bc6"
OUT = Path(__file__).resolve().parent.parent / "gpsl" / "data"
LANGUAGES = ("en", "de", "es")
MAX_WORDS = 200_000


def download(folder: str) -> Path:
    """The pinned wheel, checked against its SHA-256."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    f"{PACKAGE}=={VERSION}", "-d", folder], check=True)
    wheel = next(Path(folder).glob("spacy_lookups_data-*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != SHA256:
        sys.exit(f"{wheel}: SHA-256 {digest} is not the pinned {SHA256}")
    return wheel


def table(wheel: zipfile.ZipFile, lang: str) -> bytes:
    """The derived table of one language, uncompressed."""
    def load(name: str) -> dict:
        path = f"spacy_lookups_data/data/{lang}_lexeme_{name}.json.gz"
        if path not in wheel.namelist():
            return {}
        return json.loads(gzip.decompress(wheel.read(path)))

    clusters, probs = load("cluster"), load("prob")
    words = [w for w, c in clusters.items() if c]
    if len(words) > MAX_WORDS:  # the most probable words (the wheel's en table has 190,129)
        words = sorted(words, key=lambda w: (-probs.get(w, -99.0), w))[:MAX_WORDS]
    rows = []
    for word in sorted(words):
        if "\t" in word or "\n" in word:
            continue
        p = probs.get(word)
        bucket = "-" if p is None else str(min(19, int(math.floor(-p))))
        rows.append(f"{word}\t{int(clusters[word])}\t{bucket}\n")
    return "".join(rows).encode("utf-8")


def main(argv: list[str]) -> None:
    langs = argv or list(LANGUAGES)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, zipfile.ZipFile(download(tmp)) as whl:
        for lang in langs:
            data = table(whl, lang)
            if not data:
                sys.exit(f"{PACKAGE} {VERSION} has no cluster table for {lang!r}")
            out = OUT / f"lexicon-{lang}.tsv.xz"
            out.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
            n_words = data.count(b"\n")
            print(f"{out}: {n_words} words, {out.stat().st_size} bytes")
        licence = whl.read(f"spacy_lookups_data-{VERSION}.dist-info/LICENSE").decode()
    (OUT / "LICENSE-lexicon.txt").write_text(
        f"gpsl/data/lexicon-*.tsv.xz are derived by scripts/lexicon_tables.py from\n"
        f"{PACKAGE} {VERSION} (LANG_lexeme_cluster.json.gz and LANG_lexeme_prob.json.gz),\n"
        f"distributed under the following licence:\n\n{licence}")


if __name__ == "__main__":
    main(sys.argv[1:])
