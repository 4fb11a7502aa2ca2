"""Model versions: one row per training run (running → done / failed / killed), numbered
1, 2, ... within each project (``number``; the ``id`` is global), the project's active
version, and the identity of each run's worker process (pid and its start time, so a reused
pid is never taken for a live worker)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import text

from gpsl.annotation.corpus import projects
from gpsl.annotation.store.db import Database, dumps, loads, now
from gpsl.annotation.store.processes import process_started
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.errors import InputError


def as_dict(r) -> dict:
    m = r._mapping
    return {"id": m["id"], "project_id": m["project_id"], "created_at": m["created_at"],
            "finished_at": m["finished_at"], "settings": loads(m["settings"], {}),
            "classes": loads(m["classes"]), "bound_trace": loads(m["bound_trace"]),
            "metrics": loads(m["metrics"]), "path": m["path"],
            "n_labeled_tokens": m["n_labeled_tokens"], "status": m["status"],
            "active": bool(m["active"]), "error": m["error"],
            "number": m["number"] if m["number"] is not None else m["id"],
            "query_strategy": m["query_strategy"]}


def row(conn, version_id: int):
    r = conn.execute(text("SELECT * FROM model_versions WHERE id = :v"),
                     {"v": version_id}).first()
    if r is None:
        raise NotFoundError(f"no model version with id {version_id}")
    return r


def start(db: Database, project_id: int, settings: Mapping | None = None, *,
          pid: int | None = None, pid_started: float | None = None) -> int:
    """Record a training run (status ``'running'``); returns its id.  ``settings['pid']``
    and ``settings['pid_started']`` (the process's start time) identify its worker;
    ``settings['history_mark']`` is the project's newest label event then
    (:func:`history_top`)."""
    settings = dict(settings or {})
    settings["pid"] = int(pid if pid is not None else settings.get("pid") or os.getpid())
    if pid_started is None:
        pid_started = process_started(settings["pid"])
    settings["pid_started"] = pid_started

    def tx(conn):
        if conn.execute(text("SELECT id FROM projects WHERE id = :p" + db.for_update()),
                        {"p": project_id}).first() is None:  # the lock serialises the numbering
            raise NotFoundError(f"no project with id {project_id}")
        number = conn.execute(text("SELECT COALESCE(MAX(number), 0) + 1 FROM model_versions"
                                   " WHERE project_id = :p"), {"p": project_id}).scalar_one()
        # the labels this run can see end here: "keep training" counts new ones from it
        settings["history_mark"] = history_top(conn, project_id)
        return conn.execute(text(
            "INSERT INTO model_versions (project_id, created_at, settings, status, number)"
            " VALUES (:p, :at, :s, 'running', :n) RETURNING id"),
            {"p": project_id, "at": now(), "s": dumps(settings), "n": number}).scalar_one()

    return db.write(tx)


def set_worker(db: Database, version_id: int, pid: int, started: float | None,
               extra: Mapping | None = None) -> None:
    """Record the worker process of a version (pid and its start time; ``extra``: more
    settings about it, e.g. the host and runner of a Dask job)."""

    def tx(conn):
        settings = loads(row(conn, version_id)._mapping["settings"], {})
        settings.update(extra or {})
        settings["pid"], settings["pid_started"] = int(pid), started
        conn.execute(text("UPDATE model_versions SET settings = :s WHERE id = :v"),
                     {"s": dumps(settings), "v": version_id})

    db.write(tx)


def finish(db: Database, version_id: int, path, bound_trace: Sequence[float] | None = None,
           metrics: Mapping | None = None, n_labeled_tokens: int | None = None, *,
           classes: Sequence[str] | None = None, activate: bool = False,
           query_strategy: str | None = None) -> bool:
    """Mark a running version ``'done'`` (and with ``activate`` make it the project's active
    version in the same transaction); ``query_strategy``: the name of the query scores its
    predictions carry (a key of :data:`gpsl.active.QUERY_SCORES`).  False when it is no
    longer running."""

    def tx(conn):
        project_id = row(conn, version_id)._mapping["project_id"]
        n = conn.execute(text(
            "UPDATE model_versions SET status = 'done', finished_at = :at, path = :path,"
            " bound_trace = :bt, metrics = :m, n_labeled_tokens = :n, classes = :c, error = NULL,"
            " query_strategy = :qs WHERE id = :v AND status = 'running'"),
            {"at": now(), "path": None if path is None else os.fspath(path),
             "bt": dumps(list(bound_trace) if bound_trace is not None else None),
             "m": dumps(metrics), "n": None if n_labeled_tokens is None else int(n_labeled_tokens),
             "c": None if classes is None else dumps(list(classes)), "qs": query_strategy,
             "v": version_id}).rowcount
        if n and activate:
            _activate(conn, project_id, version_id)
        return n > 0

    return db.write(tx)


def _activate(conn, project_id, version_id) -> None:
    conn.execute(text("UPDATE model_versions SET active = 0 WHERE project_id = :p AND"
                      " active = 1"), {"p": project_id})
    if version_id is not None:
        conn.execute(text("UPDATE model_versions SET active = 1 WHERE id = :v"),
                     {"v": version_id})


def fail(db: Database, version_id: int, error: str, status: str = "failed") -> bool:
    """Mark a running version ``'failed'``/``'killed'`` with a reason; False when it was not
    running."""
    if status not in ("failed", "killed"):
        raise ValueError(f"status must be 'failed' or 'killed', got {status!r}")

    def tx(conn):
        row(conn, version_id)
        return conn.execute(text(
            "UPDATE model_versions SET status = :st, error = :e, finished_at = :at"
            " WHERE id = :v AND status = 'running'"),
            {"st": status, "e": " ".join(str(error).split()), "at": now(),
             "v": version_id}).rowcount > 0

    return db.write(tx)


def mark_stale_failed(db: Database, alive: Callable[[dict], bool | None],
                      reason: Callable[[dict], str], project_id: int | None = None) -> list[int]:
    """Mark ``'failed'`` every running version whose worker ``alive(settings)`` says is gone
    (False; None = cannot tell: left alone), with ``reason(version)``; returns the ids."""
    sql, args = "SELECT * FROM model_versions WHERE status = 'running'", {}
    if project_id is not None:
        sql += " AND project_id = :p"
        args["p"] = project_id
    running = [as_dict(r) for r in db.read(lambda conn: conn.execute(text(sql), args).fetchall())]
    stale = [v for v in running if alive(v["settings"]) is False]
    if not stale:
        return []

    def tx(conn):
        done = []
        for v in stale:
            n = conn.execute(text(
                "UPDATE model_versions SET status = 'failed', finished_at = :at, error = :e"
                " WHERE id = :v AND status = 'running'"),
                {"at": now(), "e": reason(v), "v": v["id"]}).rowcount
            if n:
                done.append(v["id"])
        return done

    return db.write(tx)


def set_active(db: Database, project_id: int, version_id: int | None) -> None:
    """Make a ``'done'`` version of the project the active one (None: none)."""

    def tx(conn):
        if version_id is not None:
            m = row(conn, version_id)._mapping
            if m["project_id"] != project_id:
                raise InputError(f"model version {version_id} belongs to another project",
                                 source="<model>")
            if m["status"] != "done":
                raise InputError(f"model version {version_id} is {m['status']}, not done",
                                 source="<model>")
        _activate(conn, project_id, version_id)

    db.write(tx)


def active(db: Database, project_id: int) -> dict | None:
    r = db.read(lambda conn: conn.execute(text(
        "SELECT * FROM model_versions WHERE project_id = :p AND active = 1"),
        {"p": project_id}).first(), single=True)
    return None if r is None else as_dict(r)


def get(db: Database, version_id: int) -> dict | None:
    r = db.read(lambda conn: conn.execute(text("SELECT * FROM model_versions WHERE id = :v"),
                                          {"v": version_id}).first(), single=True)
    return None if r is None else as_dict(r)


def list_all(db: Database, project_id: int) -> list[dict]:
    return db.read(lambda conn: [as_dict(r) for r in conn.execute(text(
        "SELECT * FROM model_versions WHERE project_id = :p ORDER BY id"), {"p": project_id})],
        single=True)


def query_rounds(db: Database, project_id: int) -> list[dict]:
    """Query rounds recorded by schema-1 stores (kept, no longer written)."""
    return db.read(lambda conn: [
        {"id": r[0], "project_id": r[1], "model_version_id": r[2], "created_at": r[3],
         "strategy": r[4], "items": loads(r[5])}
        for r in conn.execute(text(
            "SELECT id, project_id, model_version_id, created_at, strategy, items"
            " FROM query_rounds WHERE project_id = :p ORDER BY id"), {"p": project_id})])


# ----------------------------------------------------------------- keep training (the marks)

_NEW_LABELS = ("SELECT COUNT(*) FROM annotation_history WHERE project_id = :p AND id > :m"
               " AND action = 'set' AND new_label IS NOT NULL")


def history_top(conn, project_id: int) -> int:
    """The newest label event of the project (``annotation_history.id``; 0 without one): a
    training run records it when it starts (``settings['history_mark']``)."""
    return int(conn.execute(text("SELECT COALESCE(MAX(id), 0) FROM annotation_history"
                                 " WHERE project_id = :p"), {"p": project_id}).scalar_one())


def _mark(conn, project_id: int, keep: Mapping) -> int:
    """Where the count of new labels starts: the newer of the keep-training setting's mark
    and the history mark of the project's newest version (any status: a run that failed
    waits for N more labels too, never retried at every label)."""
    r = conn.execute(text("SELECT settings FROM model_versions WHERE project_id = :p"
                          " ORDER BY id DESC LIMIT 1"), {"p": project_id}).first()
    last = loads(r[0], {}).get("history_mark", 0) if r is not None else 0
    return max(int(keep.get("mark", 0) or 0), int(last or 0))


def new_labels(db: Database, project_id: int, keep: Mapping) -> int:
    """Labels set (not cleared) in the project since the keep-training mark."""
    def tx(conn):
        return int(conn.execute(text(_NEW_LABELS), {"p": project_id,
                                                    "m": _mark(conn, project_id, keep)})
                   .scalar_one())

    return db.read(tx)


def claim_keep_training(db: Database, project_id: int, every: int) -> int | None:
    """One transaction, the project's row locked: when keep training is on, ``every`` labels
    or more were set since the mark and no version of the project is running, move the
    mark to the newest label event and return it (the caller starts the run); else None.
    Two writers that both saw enough labels: one claims, the other finds the mark moved."""

    def tx(conn):
        settings = projects.settings_of(conn, project_id, db.for_update())
        keep = dict(settings.get("keep_training") or {})
        if not keep.get("on"):
            return None
        n = conn.execute(text(_NEW_LABELS), {"p": project_id,
                                             "m": _mark(conn, project_id, keep)}).scalar_one()
        if int(n) < int(every) or conn.execute(text(
                "SELECT 1 FROM model_versions WHERE project_id = :p AND status = 'running'"),
                {"p": project_id}).first() is not None:
            return None
        keep["mark"] = history_top(conn, project_id)
        settings["keep_training"] = keep
        projects.write_settings(conn, project_id, settings)
        return keep["mark"]

    return db.write(tx)
