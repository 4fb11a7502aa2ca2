"""Annotation progress of a project (counts only; the pages draw them)."""

from __future__ import annotations

from sqlalchemy import text

from gpsl.annotation.corpus.projects import row as project_row
from gpsl.annotation.store.db import Database


def progress(db: Database, project_id: int, split: str | None = None, *,
             detail: bool = True) -> dict:
    """``sentences, tokens, labeled_tokens, complete_sentences, partial_sentences,
    unlabeled_sentences, pct_complete, pct_sentences_complete, annotators {name: votes},
    votes, disputed_tokens, sources {'human'|'accepted': n}, label_counts {label: n},
    labels_per_day {'YYYY-MM-DD': n}, skipped_sentences`` (labels are derived labels).
    Without ``detail`` only the counts of sentences and tokens: the sums over sentences kept
    in ``project_progress`` (schema 8, by triggers in the transaction of every write), one
    or two rows read (the sidebar's status line on every rerun)."""
    where, args = "s.project_id = :p", {"p": project_id}
    if split is not None:
        where += " AND s.split = :split"
        args["split"] = split

    def tx(conn):
        project_row(conn, project_id)
        counts = conn.execute(text(  # the stored sums over sentences (schema 8)
            "SELECT COALESCE(SUM(n_sentences), 0), COALESCE(SUM(n_tokens), 0),"
            " COALESCE(SUM(n_labeled), 0), COALESCE(SUM(n_complete), 0),"
            " COALESCE(SUM(n_partial), 0),"
            " COALESCE(SUM(n_sentences - n_complete - n_partial), 0) FROM project_progress s"
            f" WHERE {where}"), args).first()
        if not detail:
            return counts, {}, {}, {}, {}, 0, 0

        def grouped(sql):
            return {r[0]: r[1] for r in conn.execute(text(sql), args)}

        join = f"JOIN sentences s ON s.id = a.sentence_id WHERE {where}"
        annotators = grouped(f"SELECT a.annotator, COUNT(*) FROM votes a {join}"
                             " AND a.label IS NOT NULL GROUP BY a.annotator ORDER BY COUNT(*) DESC")
        sources = grouped(f"SELECT a.source, COUNT(*) FROM derived_labels a {join}"
                          " GROUP BY a.source")
        label_counts = grouped(f"SELECT a.label, COUNT(*) FROM derived_labels a {join}"
                               " GROUP BY a.label")
        per_day = grouped("SELECT substr(a.at, 1, 10), COUNT(*) FROM annotation_history a"
                          f" {join} AND a.action = 'set' GROUP BY substr(a.at, 1, 10)"
                          " ORDER BY 1")
        disputed = conn.execute(text(
            "SELECT COUNT(*) FROM (SELECT a.sentence_id, a.token_index FROM votes a"
            f" {join} AND a.label IS NOT NULL GROUP BY a.sentence_id, a.token_index"
            " HAVING COUNT(DISTINCT a.label) > 1) d"), args).scalar_one()
        skipped = conn.execute(text(f"SELECT COUNT(DISTINCT a.sentence_id) FROM skips a {join}"),
                               args).scalar_one()
        return counts, annotators, sources, label_counts, per_day, disputed, skipped

    counts, annotators, sources, label_counts, per_day, disputed, skipped = db.read(tx)
    n_sent, n_tok, n_lab, complete, partial, unlabeled = (int(x) for x in counts)
    return {
        "sentences": n_sent, "tokens": n_tok, "labeled_tokens": n_lab,
        "complete_sentences": complete, "partial_sentences": partial,
        "unlabeled_sentences": unlabeled,
        "pct_complete": 100.0 * n_lab / n_tok if n_tok else 0.0,
        "pct_sentences_complete": 100.0 * complete / n_sent if n_sent else 0.0,
        "annotators": annotators, "votes": sum(annotators.values()),
        "disputed_tokens": int(disputed), "sources": sources, "label_counts": label_counts,
        "labels_per_day": per_day, "skipped_sentences": int(skipped),
    }


def activity(db: Database, project_id: int) -> list[tuple[str, str, int]]:
    """``(day, annotator, labels)``: the labels set per annotator per day (history action
    ``'set'``, not undone), counted by the database."""
    return [(r[0], r[1], int(r[2])) for r in db.read(lambda conn: conn.execute(text(
        "SELECT substr(at, 1, 10), annotator, COUNT(*) FROM annotation_history"
        " WHERE project_id = :p AND action = 'set' AND undone_by IS NULL"
        " GROUP BY substr(at, 1, 10), annotator ORDER BY 1, 2"), {"p": project_id}))]
