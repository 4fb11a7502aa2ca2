"""What the serve tests share: a small word-only NER corpus with the protocol example's labels
(Person, Location, Time), a model trained on it by ``gpsl train``, the labeling config."""

from __future__ import annotations

import random
import urllib.request
from pathlib import Path

from gpsl.cli import main

CONFIG = ('<View>\n  <Text name="text" value="$text"/>\n  <Labels name="ner" toName="text">\n'
          '    <Label value="Person"/>\n    <Label value="Location"/>\n'
          '    <Label value="Time"/>\n    <Label value="Food"/>\n  </Labels>\n</View>')
PEOPLE = ["Obama", "Merkel", "Alice Smith", "Bob", "Carol Jones", "Dmitri", "Eve", "Frank"]
PLACES = ["New York", "Paris", "Berlin", "Rome", "San Francisco", "Tokyo", "Oslo"]
TIMES = ["3pm today", "noon", "Monday morning", "8am tomorrow", "tonight"]
FRAMES = ["President {p} is speaking at {t} in {l} .", "{p} flew to {l} on {t} .",
          "In {l} , {p} met the press at {t} .", "{p} will visit {l} {t} .",
          "Reporters waited for {p} in {l} ."]


def sentence(rng: random.Random) -> list[tuple[str, str]]:
    frame = rng.choice(FRAMES)
    fill = {"p": ("Person", rng.choice(PEOPLE)), "l": ("Location", rng.choice(PLACES)),
            "t": ("Time", rng.choice(TIMES))}
    out = []
    for word in frame.split():
        if word.startswith("{"):
            kind, text = fill[word[1]]
            out += [(w, f"{'B' if i == 0 else 'I'}-{kind}") for i, w in
                    enumerate(text.split())]
        else:
            out.append((word, "O"))
    return out


def write_corpus(path: Path, n: int = 60, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.write_text("\n\n".join("\n".join(f"{w} {lab}" for w, lab in sentence(rng))
                                for _ in range(n)) + "\n", encoding="utf-8")
    return path


def train_model(root: Path) -> tuple[Path, Path]:
    """``(model dir, training file)`` of a word-only model (``-t ner``, 2-fold calibration)."""
    data = write_corpus(root / "train.conll")
    model = root / "model"
    assert main(["train", "-t", "ner", "--calibrate-folds", "2", "-q", str(data),
                 str(model)]) == 0
    return model, data


def answers(url: str) -> bool:
    """``GET url/health`` answers 200 (gpsl serve's, or Label Studio's)."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False
