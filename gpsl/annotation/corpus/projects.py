"""Projects: create (with their first sentences, all or nothing), list, update, delete, and
the one builder of the bundled sample project."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from gpsl.annotation.corpus import sentences as sents
from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, dumps, loads, now
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.errors import InputError
from gpsl.io import read_conll
from gpsl.tags import sort_labels

SAMPLE_PROJECT_NAME = "Sample (news entities)"
FIELDS = ("name", "labels", "template", "offsets", "kernel", "settings", "guidelines")
MAX_GUIDELINES = 200_000  # characters of Markdown


def as_dict(row) -> dict:
    m = row._mapping
    d = {"id": m["id"], "name": m["name"], "labels": loads(m["labels"]),
         "template": m["template"], "offsets": loads(m["offsets"]), "kernel": m["kernel"],
         "created_at": m["created_at"], "settings": loads(m["settings"], {}),
         "guidelines": m["guidelines"] if "guidelines" in m else ""}
    if "n_sentences" in m:
        d["n_sentences"] = m["n_sentences"]
    return d


def row(conn, project_id: int, lock: str = ""):
    r = conn.execute(text("SELECT * FROM projects WHERE id = :id" + lock),
                     {"id": project_id}).first()
    if r is None:
        raise NotFoundError(f"no project with id {project_id}")
    return r


def insert(conn, name, labels, template, offsets, kernel, settings) -> int:
    name = validate.project_name(name)
    labels = validate.label_set(labels)
    offsets = validate.offsets(offsets)
    kernel = validate.kernel(kernel)
    if conn.execute(text("SELECT 1 FROM projects WHERE name = :n"), {"n": name}).first():
        raise InputError(f"a project named {name!r} already exists", source="<project>")
    return conn.execute(text(
        "INSERT INTO projects (name, labels, template, offsets, kernel, created_at, settings)"
        " VALUES (:name, :labels, :template, :offsets, :kernel, :at, :settings) RETURNING id"),
        {"name": name, "labels": dumps(labels),
         "template": validate.text(str(template or ""), "the template", "<template>"),
         "offsets": dumps(offsets), "kernel": str(kernel), "at": now(),
         "settings": dumps(dict(settings or {}))}).scalar_one()


def create(db: Database, name: str, labels: Sequence[str], template: str = "",
           offsets: Sequence[int] = (-1, 1), kernel: str = "linear",
           settings: Mapping | None = None, *, sentences=None, heldout=None,
           heldout_gold=None, doc: str | None = None, annotator: str = "import") -> int:
    """Create a project with its first train (and held-out, with gold) sentences in one
    transaction: any problem raises and nothing is written, not even the project row."""
    annotator = validate.credit(annotator)

    def tx(conn):
        db.lock(conn, 0x70726A)  # concurrent creates of one name: one wins, one is told
        pid = insert(conn, name, labels, template, offsets, kernel, settings)
        if sentences is not None:
            sents.insert(conn, pid, list(sentences), "train", doc, annotator, None)
        if heldout:
            sents.insert(conn, pid, list(heldout), "heldout", doc, annotator, heldout_gold)
        return pid

    return db.write(tx)


def add_sentences(db: Database, project_id: int, items, *, split: str = "train",
                  doc: str | None = None, annotator: str = "import", gold=None,
                  add_labels: Sequence[str] = ()) -> int:
    """Append sentences in one transaction; ``add_labels`` join the project's label set in
    the same transaction (both or neither).  Returns how many sentences."""
    split = validate.split(split)
    annotator = validate.credit(annotator)
    if isinstance(add_labels, str):
        raise InputError("add_labels must be a list of strings", source=doc or "<import>")
    add_labels = [str(x) for x in add_labels]
    items = list(items)

    def tx(conn):
        row(conn, project_id, db.for_update())
        if add_labels:
            extend_labels(conn, project_id, add_labels)
        return sents.insert(conn, project_id, items, split, doc, annotator, gold)

    return db.write(tx)


#: the built-in feature set a plain-text (one-column) project starts with
PLAIN_TEXT_FEATURES = "ner"


def default_features(n_columns: int | None) -> str:
    """The feature template a new project starts with: the ``ner`` feature set
    (:class:`gpsl.features.NerFeatures`: word shape, affixes, capitalisation, windows) for
    plain text, one word column; gpsl's default window template over the columns (CRF++
    text) for more."""
    if n_columns is None or int(n_columns) <= 1:
        return PLAIN_TEXT_FEATURES
    return validate.default_template_text(int(n_columns))


def split_heldout(items: list, fraction: float) -> tuple[list, list]:
    """The last ``fraction`` of the items held out (at least one item stays for training)."""
    n_held = int(round(float(fraction) * len(items))) if len(items) > 1 else 0
    n_held = min(n_held, len(items) - 1) if n_held else 0
    return items[:len(items) - n_held], items[len(items) - n_held:]


def create_from_sentences(db: Database, name: str, sentences: Sequence, labels: Sequence[str],
                          template: str | None, offsets: Sequence[int], kernel: str = "linear", *,
                          heldout_fraction: float = 0.0, doc: str | None = None,
                          annotator: str = "import", settings: dict | None = None) -> int:
    """A project from uploaded sentences: the template is checked against the columns
    (None: :func:`default_features`, ``ner`` for plain text), the last
    ``heldout_fraction`` become held-out sentences whose file labels are gold."""
    sentences = list(sentences)
    if not sentences:
        raise InputError("no sentences", source=doc or "<upload>")
    checked = validate.sentences(sentences, labels, source=doc or "<upload>")
    if template is None:
        template = default_features(len(checked[0]["tokens"][0]))
    if template and template.strip():
        validate.template(template, len(checked[0]["tokens"][0]))
    train, held = split_heldout(checked, heldout_fraction)
    return create(db, name, list(labels), template or "", list(offsets), kernel, settings or {},
                  sentences=train,
                  heldout=[{**s, "labels": None} for s in held],
                  heldout_gold=[s["labels"] for s in held], doc=doc, annotator=annotator)


def read_sample(sample_dir: str | os.PathLike) -> dict:
    """The bundled sample as create() arguments: its labels (sorted), template, the last
    20 % held out with gold labels from ``sample_gold.conll`` (matched by tokens)."""
    sample_dir = Path(sample_dir)
    conll, gold_file = sample_dir / "sample.conll", sample_dir / "sample_gold.conll"
    template_file = sample_dir / "template"
    for f in (conll, gold_file, template_file):
        if not f.is_file():
            raise InputError("sample file is missing", source=str(f))
    sentences = read_conll(conll)
    gold = read_conll(gold_file)
    labels = {lab for s in sentences + gold for lab in s.labels if lab is not None}
    if not sentences or not labels:
        raise InputError("no labeled sentences", source=str(conll))
    by_tokens: dict = {}
    for g in gold:
        by_tokens.setdefault(tuple(map(tuple, g.tokens)), g.labels)
    train, held = split_heldout(sentences, 0.2)
    return {"labels": sort_labels(labels), "template": template_file.read_text(encoding="utf-8"),
            "offsets": [-1, 1], "kernel": "linear", "settings": {"sample": True},
            "sentences": train, "heldout": held,
            "heldout_gold": [by_tokens.get(tuple(map(tuple, s.tokens))) for s in held],
            "doc": conll.name}


def create_sample(db: Database, name: str, sample_dir) -> int:
    """A new project from the bundled sample (one transaction)."""
    return create(db, name, **read_sample(sample_dir))


def _existing_default(conn) -> int | None:
    r = conn.execute(text("SELECT id FROM projects WHERE name = :n"),
                     {"n": SAMPLE_PROJECT_NAME}).first()
    if r is None:
        r = conn.execute(text("SELECT id FROM projects ORDER BY id LIMIT 1")).first()
    return None if r is None else r[0]


def ensure_sample(db: Database, sample_dir) -> int:
    """Create the sample project when the store has no project at all; returns its id (or,
    when other projects exist, the sample's or the oldest project's id).  Safe when several
    processes call it at once."""
    found = db.read(_existing_default)
    if found is not None:
        return found
    args = read_sample(sample_dir)

    def tx(conn):
        db.lock(conn, 0x70726A)
        found = _existing_default(conn)
        if found is not None:
            return found
        pid = insert(conn, SAMPLE_PROJECT_NAME, args["labels"], args["template"],
                     args["offsets"], args["kernel"], args["settings"])
        sents.insert(conn, pid, args["sentences"], "train", args["doc"], "import", None)
        if args["heldout"]:
            sents.insert(conn, pid, args["heldout"], "heldout", args["doc"], "import",
                         args["heldout_gold"])
        return pid

    return db.write(tx)


def list_all(db: Database) -> list[dict]:
    """Every project with ``n_sentences``, its sentences of both splits, summed from the
    kept counts (``project_progress``, schema 8) rather than counted: every page run reads
    this list, and counting 100,000 sentences cost 2.4 ms on SQLite and 40 ms on
    PostgreSQL, most of it JIT-compiling the count (the planner guessed a few hundred
    projects, so it judged the query big; as a join to the grouped sums, it does not)."""
    return db.read(lambda conn: [as_dict(r) for r in conn.execute(text(
        "SELECT p.*, COALESCE(g.n, 0) AS n_sentences FROM projects p LEFT JOIN"
        " (SELECT project_id, SUM(n_sentences) AS n FROM project_progress"
        " GROUP BY project_id) g ON g.project_id = p.id ORDER BY p.id"))], single=True)


def get(db: Database, project_id: int) -> dict | None:
    r = db.read(lambda conn: conn.execute(text("SELECT * FROM projects WHERE id = :id"),
                                          {"id": project_id}).first(), single=True)
    return None if r is None else as_dict(r)


def update(db: Database, project_id: int, **fields) -> dict:
    """Change ``name``, ``labels``, ``template``, ``offsets``, ``kernel``, ``settings`` or
    ``guidelines`` (Markdown text for the annotators);
    removing a label still used by a vote, adjudication or gold label raises InputError."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise TypeError(f"update_project: unknown field(s) {', '.join(sorted(unknown))}")

    def tx(conn):
        row(conn, project_id, db.for_update())
        values: dict[str, Any] = {}
        if "name" in fields:
            name = validate.project_name(fields["name"])
            if conn.execute(text("SELECT 1 FROM projects WHERE name = :n AND id != :id"),
                            {"n": name, "id": project_id}).first():
                raise InputError(f"a project named {name!r} already exists",
                                 source="<project>")
            values["name"] = name
        if "labels" in fields:
            labels = validate.label_set(fields["labels"])
            used = {r[0] for r in conn.execute(text(
                "SELECT DISTINCT v.label FROM votes v JOIN sentences s ON s.id = v.sentence_id"
                " WHERE s.project_id = :p AND v.label IS NOT NULL UNION"
                " SELECT DISTINCT a.label FROM adjudications a JOIN sentences s"
                " ON s.id = a.sentence_id WHERE s.project_id = :p UNION"
                " SELECT DISTINCT g.label FROM gold_labels g JOIN sentences s"
                " ON s.id = g.sentence_id WHERE s.project_id = :p"), {"p": project_id})}
            missing = sorted(used - set(labels))
            if missing:
                raise InputError("labels still in use cannot be removed: "
                                 + ", ".join(missing), source="<project>")
            values["labels"] = dumps(labels)
        if "template" in fields:
            values["template"] = validate.text(str(fields["template"] or ""), "the template",
                                               "<template>")
        if "offsets" in fields:
            values["offsets"] = dumps(validate.offsets(fields["offsets"]))
        if "kernel" in fields:
            values["kernel"] = validate.kernel(fields["kernel"])
        if "settings" in fields:
            values["settings"] = dumps(dict(fields["settings"] or {}))
        if "guidelines" in fields:
            guidelines = validate.text(str(fields["guidelines"] or ""), "the guidelines",
                                       "<project>")
            if len(guidelines) > MAX_GUIDELINES:
                raise InputError(f"the guidelines are longer than {MAX_GUIDELINES:,} "
                                 "characters", source="<project>")
            values["guidelines"] = guidelines
        if values:
            cols = ", ".join(f"{k} = :{k}" for k in values)
            conn.execute(text(f"UPDATE projects SET {cols} WHERE id = :id"),
                         {**values, "id": project_id})
        return as_dict(row(conn, project_id))

    return db.write(tx)


def token_columns(conn, project_id: int) -> int | None:
    """How many columns the project's tokens have (None: no sentence yet)."""
    first = conn.execute(text("SELECT tokens FROM sentences WHERE project_id = :p LIMIT 1"),
                         {"p": project_id}).first()
    return len(loads(first[0])[0]) if first else None


def extend_labels(conn, project_id: int, add_labels: Sequence[str], lock: str = "") -> None:
    labels = loads(row(conn, project_id, lock)._mapping["labels"])
    extended = validate.label_set(labels + [x for x in dict.fromkeys(add_labels)
                                            if x not in labels])
    if extended != labels:
        conn.execute(text("UPDATE projects SET labels = :l WHERE id = :id"),
                     {"l": dumps(extended), "id": project_id})


def delete(db: Database, project_id: int) -> bool:
    """Delete a project and everything in it; saved model folders are left alone."""
    return db.write(lambda conn: conn.execute(text("DELETE FROM projects WHERE id = :id"),
                                              {"id": project_id}).rowcount > 0)


# ----------------------------------------------------------------------------- settings


def settings_of(conn, project_id: int, lock: str = "") -> dict:
    """The project's settings (JSON: the team settings, the crowd model, ...)."""
    return loads(row(conn, project_id, lock)._mapping["settings"], {})


def write_settings(conn, project_id: int, settings: Mapping) -> None:
    conn.execute(text("UPDATE projects SET settings = :s WHERE id = :p"),
                 {"s": dumps(dict(settings)), "p": project_id})


def settings_of_sentence(conn, sentence_id: int) -> dict:
    """The settings of the project a sentence belongs to ({} for an unknown sentence)."""
    r = conn.execute(text("SELECT p.settings FROM sentences s JOIN projects p ON"
                          " p.id = s.project_id WHERE s.id = :s"), {"s": sentence_id}).first()
    return loads(r[0], {}) if r else {}


def project_of(db: Database, *, sentence_id: int | None = None,
               version_id: int | None = None) -> int | None:
    """The project a sentence or a model version belongs to (None: no such row)."""
    if sentence_id is not None:
        sql, arg = "SELECT project_id FROM sentences WHERE id = :i", sentence_id
    else:
        sql, arg = "SELECT project_id FROM model_versions WHERE id = :i", version_id
    try:
        arg = int(arg)
    except (TypeError, ValueError):
        return None
    r = db.read(lambda conn: conn.execute(text(sql), {"i": arg}).first(), single=True)
    return None if r is None else int(r[0])
