"""Random inputs for the robustness report: byte-level damage of a file (:func:`_mutate`) and
random CoNLL, JSONL, plain-text files and CRF++ templates, some valid and some not."""

from __future__ import annotations

import json
import random

_WORDS = ["the", "dog", "Anna", "Paris", "New York", "_", "", " ", "\t", "ü", "東京", "a b",
          "%x[0,0]", "\u3000", "\ufeff", "\x0b", "\u2028", "0", "-1", "O", "B-PER", "I-PER"]
_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "_", "X"]


# ----------------------------------------------------------------------------- byte mutations


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random damaging edits of ``data``."""
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(14)
        lines = data.split(b"\n")
        i = rng.randrange(len(lines)) if lines else 0
        if op == 0:
            data = b""
        elif op == 1:
            data = b"\n" * rng.randint(1, 50)
        elif op == 2:  # invalid UTF-8
            pos = rng.randint(0, len(data))
            data = data[:pos] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + \
                data[pos:]
        elif op == 3:  # NUL
            pos = rng.randint(0, len(data))
            data = data[:pos] + b"\x00" + data[pos:]
        elif op == 4:
            data = b"\xef\xbb\xbf" + data
        elif op == 5:
            data = data.replace(b"\n", rng.choice([b"\r\n", b"\r"]))
        elif op == 6:  # ragged column
            if lines and lines[i]:
                lines[i] = lines[i] + rng.choice([b" extra", b"\tx\ty"]) \
                    if rng.random() < 0.5 else lines[i].split(b" ")[0]
            data = b"\n".join(lines)
        elif op == 7:  # huge line
            lines.insert(i, b"w" * rng.choice([10_000, 1_100_000]) + b" X")
            data = b"\n".join(lines)
        elif op == 8:  # truncate
            data = data[:rng.randint(0, len(data))]
        elif op == 9:  # random bytes
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif op == 10:  # duplicate lines
            if lines:
                lines[i:i] = [lines[i]] * rng.randint(1, 5)
            data = b"\n".join(lines)
        elif op == 11:  # control characters and odd whitespace
            pos = rng.randint(0, len(data))
            data = data[:pos] + rng.choice(["\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u3000",
                                            "\ufeff", "\x7f"]).encode() + data[pos:]
        elif op == 12:  # swap two lines
            if len(lines) > 1:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            data = b"\n".join(lines)
        else:  # flip one byte
            if data:
                pos = rng.randrange(len(data))
                data = data[:pos] + bytes([data[pos] ^ (1 << rng.randrange(8))]) + data[pos + 1:]
    return data


def _word(rng: random.Random) -> str:
    if rng.random() < 0.97:
        return rng.choice(["the", "dog", "Anna", "Paris", "ran", ".", "ü", "東京", "New York",
                           "\u3000", "\x0b", "a\u2028b"])
    return rng.choice(_WORDS)


def gen_conll(rng: random.Random) -> bytes:
    n_cols = rng.randint(1, 4)
    out = []
    for _ in range(rng.randint(0, 6)):
        for _ in range(rng.randint(1, 8)):
            cols = [_word(rng).replace(" ", "").replace("\t", "") or "x"
                    for _ in range(n_cols - 1)]
            out.append(" ".join(cols + [rng.choice(_LABELS)]))
        out.append("")
    if rng.random() < 0.05:  # a very long sentence
        out += ["tok X"] * rng.choice([1001, 20_000])
    data = "\n".join(out).encode()
    return _mutate(rng, data) if rng.random() < 0.5 else data


def _json_value(rng: random.Random, depth: int = 0):
    r = rng.randrange(9)
    if r == 0 or depth > 3:
        return rng.choice([None, True, False, 0, -1, 1.5, 10**30, "", "x", "a b"])
    if r == 1:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r == 2:
        return {"k": _json_value(rng, depth + 1)}
    return _word(rng)


def gen_jsonl(rng: random.Random) -> bytes:
    lines = []
    ids = []
    for k in range(rng.randint(0, 6)):
        n = rng.randint(1, 6) if rng.random() < 0.95 else 0
        obj: dict = {}
        r = rng.random()
        if r < 0.7:
            obj["tokens"] = [_word(rng) for _ in range(n)]
        elif r < 0.85:
            obj["tokens"] = [[_word(rng), _word(rng)] for _ in range(n)]
        elif r < 0.9:
            obj["tokens"] = _json_value(rng)
        elif r < 0.93:
            obj["tokens"] = ["w"] * rng.choice([1001, 1_000_000])
        if rng.random() < 0.7:
            m = n if rng.random() < 0.95 else rng.randint(0, 7)
            obj["labels"] = [rng.choice(_LABELS + [None, None]) if rng.random() < 0.99
                             else _json_value(rng) for _ in range(m)]
        if rng.random() < 0.5:
            obj["id"] = rng.choice(ids) if ids and rng.random() < 0.1 else \
                rng.choice([k, f"s{k}"]) if rng.random() < 0.9 else \
                rng.choice([True, 1.5, None, [k]])
            ids.append(obj["id"]) if isinstance(obj["id"], (int, str)) else None
        text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.03:
            text = rng.choice(["[" * 5000 + "]" * 5000, '{"tokens": [' + "9" * 5000 + "]}",
                               '{"tokens": ["\\ud800"]}', '{"tokens": ["a\\u0000b"]}',
                               '{"tokens": ["a\\nb"]}', "[1, 2]", "null", '"x"', "{"])
        lines.append(text)
    data = "\n".join(lines).encode()
    return _mutate(rng, data) if rng.random() < 0.3 else data


def gen_text(rng: random.Random) -> bytes:
    lines = [" ".join(_word(rng) for _ in range(rng.randint(0, 10)))
             for _ in range(rng.randint(0, 6))]
    if rng.random() < 0.05:
        lines.append(" ".join(["w"] * rng.choice([1001, 1_000_000])))
    data = "\n".join(lines).encode()
    return _mutate(rng, data) if rng.random() < 0.6 else data


def gen_template(rng: random.Random) -> str:
    lines = []
    for k in range(rng.randint(0, 6)):
        kind = rng.choice(["U", "U", "U", "U", "U", "B", "#", ""]) if rng.random() < 0.95 \
            else rng.choice(["X", "u", " U", "%"])
        body = f"{kind}{k:02d}:"
        for _ in range(rng.randint(0, 3)):
            row = rng.choice([-1, 0, 1, 2, -8, 8]) if rng.random() < 0.9 else \
                rng.choice([9, -9, 99999999, -(10**30)])
            col = rng.choice([0, 0, 1]) if rng.random() < 0.9 else \
                rng.choice([3, -1, 99999999, 10**40])
            macro = rng.choice([f"%x[{row},{col}]", f"%x[{row},{col}", f"%x[{row}]",
                                f"%x[ {row},{col}]", "%", "%y[0,0]", f"%x[a,{col}]"]
                               if rng.random() < 0.05 else [f"%x[{row},{col}]"])
            body += macro + rng.choice(["", "/", "|", " "])
        lines.append(body)
    text = rng.choice(["\n", "\r\n", "\r"]).join(lines)
    if rng.random() < 0.1:
        text = _mutate(rng, text.encode()).decode("utf-8", errors="replace")
    return text
