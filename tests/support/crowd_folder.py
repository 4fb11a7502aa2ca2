"""A small hand-made crowd folder (the one-folder-per-annotator layout) for the crowd-folder
tests, written under a test's temporary directory (a plain module, imported as
``_crowd_folder``).

Two documents, three workers (hand-counted in :data:`EXPECTED`):

* W1 labels both documents exactly as the gold tokens: 10 votes;
* W2 splits ``U.S.`` into ``U.S`` ``.`` labeled ``B-LOC O`` (an entity on part of the word:
  both pieces dropped, "split labeled in part"), writes ``Pariss`` for ``Paris`` (dropped,
  "text differs"): 8 votes;
* W3 has a line without a token (dropped, "empty token") and splits ``U.S.`` into ``U.S``
  ``.`` labeled ``B-LOC I-LOC`` (one entity: one vote, ``B-LOC``): 7 votes.
"""

from __future__ import annotations

from pathlib import Path

GOLD = {
    "d1.txt": "Ada B-PER\nLovelace I-PER\nvisited O\nU.S. B-LOC\ntoday O\n\nBob B-PER\nran O\n",
    "d2.txt": "Paris B-LOC\nis O\nbig O\n",
}
WORKERS = {
    "W1": GOLD,
    "W2": {"d1.txt": "Ada B-PER\nLovelace O\nvisited O\nU.S B-LOC\n. O\ntoday O\n\n"
                     "Bob O\nran O\n",
           "d2.txt": "Pariss B-LOC\nis O\nbig O\n"},
    "W3": {"d1.txt": "Ada B-PER\nLovelace I-PER\n O\nvisited O\nU.S B-LOC\n. I-LOC\n"
                     "today O\n\nBob B-PER\nran O\n"},
}
EXPECTED = {"workers": 3, "documents": 2, "worker_tokens": 30, "votes": 25,
            "dropped": {"empty token": 1, "split labeled in part": 2, "text differs": 1},
            "per_worker": {"W1": 10, "W2": 8, "W3": 7}}
LABELS = ("B-LOC", "I-LOC", "B-PER", "I-PER", "O")


def write_folder(root: Path, split: str = "val", workers=None, gold=None) -> Path:
    """The crowd folder ``root/split`` (files of :data:`GOLD` and :data:`WORKERS`, or the
    given ones); returns it."""
    base = Path(root) / split
    for name, text in (gold or GOLD).items():
        (base / "ground_truth").mkdir(parents=True, exist_ok=True)
        (base / "ground_truth" / name).write_text(text, encoding="utf-8")
    for who, docs in (workers or WORKERS).items():
        folder = base / "mturk_train_data" / who
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in docs.items():
            (folder / name).write_text(text, encoding="utf-8")
    return base


def upload_files(folder: Path) -> list[tuple[str, bytes]]:
    """The files of a folder as a browser's directory upload gives them: ``(path inside the
    picked folder's parent, bytes)``."""
    return [(str(p.relative_to(folder.parent)), p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()]
