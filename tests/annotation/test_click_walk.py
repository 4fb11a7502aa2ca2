"""Issue 41: the walk of one label click through the facade (``Store.set_label`` on a small
SQLite store, keep training off): the gpsl files it enters (``sys.setprofile`` call events)
and its SQL statements.  Measured on main before the services stopped climbing back up into
the facade (f79722b): 11 files, 66 calls, 14 statements; after: 10 files, 56 calls, 11
statements.  The bound keeps a new climb back up (a second read of the sentence's project
after the commit) from coming back unseen."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

import gpsl
from gpsl.annotation import Store

ROOT = Path(gpsl.__file__).resolve().parents[1]


def walk(fn) -> tuple[dict[str, int], int]:
    """``({gpsl file: calls}, SQL statements)`` of ``fn()``."""
    seen: dict[str, int] = {}
    statements: list[str] = []

    def count(conn, cursor, statement, *args):
        statements.append(statement)

    def profile(frame, what, arg):
        name = frame.f_code.co_filename
        if what == "call" and name.startswith(str(ROOT / "gpsl")):
            rel = os.path.relpath(name, ROOT)
            seen[rel] = seen.get(rel, 0) + 1

    event.listen(Engine, "before_cursor_execute", count)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        event.remove(Engine, "before_cursor_execute", count)
    return seen, len(statements)


def test_a_label_click_enters_few_files_and_reads_its_project_once(tmp_path):
    store = Store(tmp_path / "s.sqlite3", models_root=tmp_path / "models")
    pid = store.create_project("p", ["B-LOC", "O"], "", [-1, 1])
    store.add_sentences(pid, [{"tokens": ["a", "b", "c"]} for _ in range(3)])
    sid = store.sentence_ids(pid)[0]
    store.set_label(sid, 0, "O", "ann")  # imports done
    files, statements = walk(lambda: store.set_label(sid, 0, "B-LOC", "ann"))
    assert store.get_sentence(sid)["labels"][0] == "B-LOC"
    assert len(files) <= 10 and statements <= 11, (sorted(files), statements)
    # the step after the commit gets the project from the write: no projects.project_of,
    # no settings read of its own
    assert "gpsl/annotation/corpus/projects.py" not in files, sorted(files)
    assert "gpsl/annotation/training/jobs.py" in files, sorted(files)  # the keep-training step
