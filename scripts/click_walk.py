"""The walk of one label click through the facade: the gpsl files it enters (``sys.setprofile``
call events), the calls and the SQL statements (issue 41; docs/ARCHITECTURE.md)::

    python scripts/click_walk.py

A small SQLite store in a temporary folder; the click is ``Store.set_label`` and the same
through an acting store (the app's path), each after a first click that did the imports.
"""
import os
import sys
import tempfile
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpsl  # noqa: E402
from gpsl.annotation import Store  # noqa: E402

ROOT = Path(gpsl.__file__).resolve().parents[1]
STATEMENTS = []
def _count(conn, cursor, statement, *a):
    STATEMENTS.append(statement)

def walk(fn):
    seen = {}
    STATEMENTS.clear()
    event.listen(Engine, "before_cursor_execute", _count)
    def prof(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if f.startswith(str(ROOT / "gpsl")):
                seen.setdefault(os.path.relpath(f, ROOT), 0)
                seen[os.path.relpath(f, ROOT)] += 1
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        event.remove(Engine, "before_cursor_execute", _count)
    return seen

with tempfile.TemporaryDirectory() as d:
    store = Store(Path(d) / "s.db")
    pid = store.create_project("p", ["B-LOC", "O"], "", [-1, 1])
    store.add_sentences(pid, [{"tokens": ["a", "b", "c"]} for _ in range(3)])
    sid = store.sentence_ids(pid)[0]
    lead = store.create_account("lead", "lead", "Quartz-Lantern-Velvet-93")
    who = store.verify_password("lead", "Quartz-Lantern-Velvet-93")
    acting = store.acting(who)
    store.set_label(sid, 0, "O", "lead")  # warm: imports done
    acting.set_label(sid, 1, "O", "lead")
    for name, fn in (("Store.set_label", lambda: store.set_label(sid, 0, "B-LOC", "lead")),
                     ("ActingStore.set_label", lambda: acting.set_label(sid, 1, "B-LOC", "lead"))):
        seen = walk(fn)
        print(f"{name}: {len(seen)} gpsl files entered, {sum(seen.values())} calls, "
              f"{len(STATEMENTS)} SQL statements")
        for f, n in sorted(seen.items()):
            print(f"   {n:4d} {f}")
    store.close()
