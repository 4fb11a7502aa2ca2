"""The service's state: Label Studio's tasks, every annotator's vote, the refits and the
current model, in one SQLite file (``STATE_DIR/serve.sqlite3``).

Every write is one transaction (``with connection:``), so a killed server loses nothing it
had acknowledged; several workers share the file (WAL journal, a busy timeout). A vote is
one Label Studio annotation: ``(task, annotation id)`` -> annotator and one label per token
(JSON, ``null`` where the annotator left the token unlabeled). Deleting the annotation in
Label Studio deletes the vote; nothing else ever does.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id INTEGER PRIMARY KEY, project TEXT NOT NULL, text TEXT NOT NULL,
    tokens TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS votes (
    task_id INTEGER NOT NULL REFERENCES tasks(task_id), annotation_id INTEGER NOT NULL,
    annotator TEXT NOT NULL, labels TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (task_id, annotation_id));
CREATE TABLE IF NOT EXISTS models (
    version TEXT PRIMARY KEY, path TEXT NOT NULL, n_votes INTEGER NOT NULL,
    n_tasks INTEGER NOT NULL, created REAL NOT NULL, seconds REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class State:
    """One connection per thread of a worker (SQLite connections are not shared)."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "serve.sqlite3"
        with self._connect() as db:
            db.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA foreign_keys=ON")
        return db

    def _write(self, statements) -> None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            for sql, args in statements:
                db.execute(sql, args)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def _read(self, sql: str, args=()) -> list[tuple]:
        db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    # ------------------------------------------------------------------ votes

    def put_vote(self, task_id: int, project: str, text: str, tokens: list[str],
                 annotation_id: int, annotator: str, labels: list[str | None]) -> None:
        """The task (its text and tokens, kept as first seen, updated when the text changed)
        and the annotation's vote, in one transaction; bumps the count of new votes."""
        self._write([
            ("INSERT INTO tasks VALUES (?, ?, ?, ?) ON CONFLICT(task_id) DO UPDATE SET "
             "project=excluded.project, text=excluded.text, tokens=excluded.tokens",
             (task_id, project, text, json.dumps(tokens, ensure_ascii=False))),
            ("INSERT INTO votes VALUES (?, ?, ?, ?, ?) ON CONFLICT(task_id, annotation_id) "
             "DO UPDATE SET annotator=excluded.annotator, labels=excluded.labels, "
             "updated=excluded.updated",
             (task_id, annotation_id, annotator, json.dumps(labels), time.time())),
            ("INSERT INTO meta VALUES ('new_votes', '1') ON CONFLICT(key) DO UPDATE SET "
             "value=CAST(value AS INTEGER) + 1", ()),
        ])

    def delete_vote(self, annotation_id: int) -> bool:
        """Delete the vote of a Label Studio annotation (ids are unique across tasks; the
        ANNOTATIONS_DELETED event names the annotations only); False if there was none."""
        n = self._read("SELECT COUNT(*) FROM votes WHERE annotation_id=?", (annotation_id,))[0][0]
        if n:
            self._write([
                ("DELETE FROM votes WHERE annotation_id=?", (annotation_id,)),
                ("INSERT INTO meta VALUES ('new_votes', '1') ON CONFLICT(key) DO UPDATE SET "
                 "value=CAST(value AS INTEGER) + 1", ()),
            ])
        return bool(n)

    def training_tasks(self) -> list[tuple[int, list[str], dict[str, list[str | None]]]]:
        """``(task id, tokens, {annotator: labels})`` of every task with a vote."""
        rows = self._read("SELECT t.task_id, t.tokens, v.annotator, v.labels FROM votes v "
                          "JOIN tasks t ON t.task_id = v.task_id ORDER BY t.task_id, "
                          "v.annotation_id")
        out: dict[int, tuple[list[str], dict]] = {}
        for task_id, tokens, annotator, labels in rows:
            toks, votes = out.setdefault(task_id, (json.loads(tokens), {}))
            labs = json.loads(labels)
            if len(labs) == len(toks):  # a vote on an older text of the task is not used
                votes[annotator] = labs
        return [(k, toks, votes) for k, (toks, votes) in out.items() if votes]

    def counts(self) -> dict:
        n_votes, n_tasks, n_annot = self._read(
            "SELECT COUNT(*), COUNT(DISTINCT task_id), COUNT(DISTINCT annotator) FROM votes")[0]
        return {"votes": n_votes, "tasks": n_tasks, "annotators": n_annot,
                "new_votes": self.new_votes()}

    # ------------------------------------------------------------------ meta, models

    def get(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else default

    def put(self, key: str, value: str) -> None:
        self._write([("INSERT INTO meta VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                      "value=excluded.value", (key, value))])

    def new_votes(self) -> int:
        return int(self.get("new_votes", "0"))

    def claim_refit(self, stale_after: float) -> bool:
        """Take the one refit slot of all workers (False while another refit runs, unless it
        started more than ``stale_after`` seconds ago: its process died)."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT value FROM meta WHERE key='refit_started'").fetchone()
            now = time.time()
            if row and float(row[0]) > 0 and now - float(row[0]) < stale_after:
                db.execute("ROLLBACK")
                return False
            db.execute("INSERT INTO meta VALUES ('refit_started', ?) ON CONFLICT(key) DO "
                       "UPDATE SET value=excluded.value", (repr(now),))
            db.execute("COMMIT")
            return True
        except BaseException:
            db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def finish_refit(self, version: str | None, path: str | None, n_votes: int,
                     n_tasks: int, seconds: float, consumed: int, error: str = "") -> None:
        """Record the refit's model as current (or its error), give the slot back and count
        the votes it used as no longer new, in one transaction."""
        st = [("UPDATE meta SET value='0' WHERE key='refit_started'", ()),
              ("INSERT INTO meta VALUES ('refit_error', ?) ON CONFLICT(key) DO UPDATE SET "
               "value=excluded.value", (error,)),
              ("UPDATE meta SET value=CAST(MAX(0, CAST(value AS INTEGER) - ?) AS TEXT) "
               "WHERE key='new_votes'", (consumed,))]
        if version is not None:
            st += [("INSERT OR REPLACE INTO models VALUES (?, ?, ?, ?, ?, ?)",
                    (version, path, n_votes, n_tasks, time.time(), seconds)),
                   ("INSERT INTO meta VALUES ('current', ?) ON CONFLICT(key) DO UPDATE SET "
                    "value=excluded.value", (version,))]
        self._write(st)

    def current_model(self) -> tuple[str, str] | None:
        """``(version, path)`` of the latest refit, None before the first."""
        version = self.get("current")
        if not version:
            return None
        rows = self._read("SELECT path FROM models WHERE version=?", (version,))
        return (version, rows[0][0]) if rows else None

    def refits(self) -> list[dict]:
        rows = self._read("SELECT version, n_votes, n_tasks, created, seconds FROM models "
                          "ORDER BY created")
        return [dict(zip(("version", "votes", "tasks", "created", "seconds"), r)) for r in rows]
