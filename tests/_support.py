"""Helpers shared by several test modules (a plain module, imported as ``_support``)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

from gpsl.store import Store

BP, IP, BL, OUT = "B-PER", "I-PER", "B-LOC", "O"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_status(url: str) -> int | None:
    """The HTTP status of ``url``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def tiny_store(path: Path, extra=()) -> tuple[Store, int]:
    """A small person/location project: labeled, partial, unlabeled and held-out sentences."""
    store = Store(path)
    pid = store.create_project("tiny", [BP, IP, BL, OUT])
    store.add_sentences(pid, [
        {"tokens": "Anna Smith went to Paris .".split(), "labels": [BP, IP, OUT, OUT, BL, OUT]},
        {"tokens": "Bob Jones flew to Rome .".split(), "labels": [BP, IP, OUT, OUT, BL, OUT]},
        {"tokens": "Anna went to Rome .".split(), "labels": [BP, None, None, BL, None]},
        {"tokens": "Bob Smith went to Paris .".split()},
        {"tokens": "Zork Quuxly blorped fnord Xyzzy !".split()},
        {"tokens": "Carl went to Oslo .".split()},
        *extra,
    ])
    store.add_sentences(pid, [{"tokens": "Anna flew to Paris .".split()}], split="heldout",
                        gold=[[BP, OUT, OUT, BL, OUT]])
    return store, pid
