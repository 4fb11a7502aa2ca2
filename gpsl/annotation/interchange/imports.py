"""Reading annotations in: uploads in the formats of :mod:`.tool_formats` (CoNLL/CRF++
columns, JSONL, plain text, Label Studio, doccano, Prodigy, CoNLL-2003), read as a stream
(issue 37: import at 100k sentences in bounded memory), checked, summarised and written.

:class:`Upload` holds the uploaded bytes and their format; it never holds the file's
sentences.  Its first pass (:meth:`Upload.summary`) reads every sentence, checks it with one
line naming file and line (:func:`parse_upload` is this pass keeping the sentences) and counts
what the pages show; the import passes (:func:`import_upload`, :func:`create_project`) read
the file again, :data:`CHUNK` sentences at a time, and write them inside ONE transaction: a
bad sentence anywhere and nothing is stored.

Streamed: CoNLL / CRF++ columns, CoNLL-2003, gpsl's JSONL, plain text, doccano and Prodigy
JSONL (a line at a time; for the last three the bytes are checked for UTF-8 and NUL first, a
megabyte at a time).  A Label Studio export is ONE JSON array: it is read whole, as before."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from gpsl import limits
from gpsl.annotation.corpus import projects
from gpsl.annotation.corpus import sentences as sents
from gpsl.annotation.interchange.tool_formats import (  # noqa: F401 - re-exported: imports' readers
    _SPAN_READERS,
    FORMATS,
    UPLOAD_TYPES,
    guess_format,
    iter_doccano,
    iter_prodigy,
    read_conll2003,
    read_doccano,
    read_labelstudio,
    read_prodigy,
    spans_to_labels,
    split_lines,
    tokenize,
)
from gpsl.annotation.store import validate
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.errors import InputError, clean_source
from gpsl.io import Sentence
from gpsl.io.formats import conll_sentences, iter_conll, iter_jsonl, iter_text, tab_separated
from gpsl.io.source import BLOCK
from gpsl.tags import sort_labels


def parse_upload(data: bytes, filename: str, fmt: str | None = None, *,
                 max_bytes: int | None = None, max_tokens: int | None = None) -> list[Sentence]:
    """Read uploaded bytes as ``fmt`` (None: by extension).  Refused with one InputError
    line naming the file (and line): too large (:func:`gpsl.limits.max_upload_bytes`), a
    sentence too long (``max_tokens``), and every problem of the readers.  The whole file's
    sentences in a list: the app streams instead (:class:`Upload`, whose first pass this
    is, keeping the sentences)."""
    return Upload(data, filename, fmt, max_bytes=max_bytes, max_tokens=max_tokens).sentences()


def upload_limits() -> tuple[float | None, int | None]:
    """``(megabytes per upload, tokens per sentence)`` as configured (None: no limit;
    :mod:`gpsl.limits`, set by :data:`LIMIT_SETTINGS`); a bad setting raises InputError."""
    size = limits.max_upload_bytes()
    return (size / limits.MB if size else None), limits.max_tokens() or None


#: the environment variables that set the upload limits (megabytes, tokens per sentence)
LIMIT_SETTINGS = (limits.ENV_MAX_UPLOAD_MB, limits.ENV_MAX_TOKENS)


@dataclass(frozen=True)
class UploadSummary:
    sentences: int
    tokens: int
    labeled: int
    n_columns: int
    labels: list[str]


def summarize(sentences: Sequence[Sentence]) -> UploadSummary:
    return UploadSummary(
        sentences=len(sentences), tokens=sum(len(s) for s in sentences),
        labeled=sum(len(s) - s.n_missing for s in sentences),
        n_columns=len(sentences[0].tokens[0]) if sentences and sentences[0].tokens else 0,
        labels=sort_labels({lab for s in sentences for lab in s.labels if lab is not None}))


def unknown_labels(sentences: Iterable[Sentence], labels: Sequence[str]) -> list[str]:
    known = set(labels)
    return sort_labels({lab for s in sentences for lab in s.labels
                        if lab is not None and lab not in known})


def import_sentences(db, project_id: int, sentences: Sequence[Sentence], *,
                     split: str = "train", doc: str | None = None, annotator: str = "import",
                     add_labels: Sequence[str] = ()) -> int:
    """Append sentences to a project, all or nothing; into ``'heldout'`` the file's labels
    go as gold labels.  ``add_labels`` join the label set in the same transaction.  An
    :class:`Upload` is written a chunk at a time (:func:`import_upload`)."""
    if isinstance(sentences, Upload):
        return import_upload(db, project_id, sentences, split=split, doc=doc,
                             annotator=annotator, add_labels=add_labels)
    sentences = list(sentences)
    project = projects.get(db, project_id)
    if project is None:
        raise InputError(f"no project with id {project_id}", source="<import>")
    first = sents.page(db, project_id, None, 0, 1)
    known = set(project["labels"])
    labels = list(project["labels"]) + [x for x in add_labels if x not in known]
    n_columns = len(first[0]["tokens"][0]) if first else None
    for a in range(0, len(sentences), 2000):  # precise messages first, a page at a time
        checked = validate.sentences(sentences[a:a + 2000], labels, source=doc or "<upload>",
                                     n_columns=n_columns, first=a)
        n_columns = n_columns or len(checked[0]["tokens"][0])
    if split == "heldout":
        return projects.add_sentences(db, project_id, [Sentence(s.tokens, None, s.line)
                                                       for s in sentences], split="heldout",
                                      doc=doc, annotator=annotator,
                                      gold=[s.labels for s in sentences],
                                      add_labels=add_labels)
    return projects.add_sentences(db, project_id, sentences, split=split, doc=doc,
                                  annotator=annotator, add_labels=add_labels)


#: sentences read, checked and written at a time by the import passes
CHUNK = 2000
_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class Upload:
    """Uploaded bytes read as ``fmt`` (None: by the file name's extension), iterable any
    number of times.  Refused with one InputError line naming the file: too large
    (:func:`gpsl.limits.max_upload_bytes`, here), an unknown format (here), every problem
    of the readers, a sentence over ``max_tokens`` and a bad label (:meth:`summary`)."""

    def __init__(self, data: bytes, filename: str, fmt: str | None = None, *,
                 max_bytes: int | None = None, max_tokens: int | None = None):
        self.source = clean_source(filename) if filename else "<upload>"
        if data is None:
            raise InputError("no file data", source=self.source)
        limits.check_upload_size(len(data), limits.max_upload_bytes(max_bytes), self.source)
        self.fmt = fmt or guess_format(filename)
        if self.fmt not in FORMATS:
            raise InputError(f"unknown format {self.fmt!r}", source=self.source)
        self.data = bytes(data)
        self.max_tokens = max_tokens
        self._summary: UploadSummary | None = None
        self._start = 0  # after the byte-order marks (span formats)

    # ------------------------------------------------------------------ reading
    def _checked_bytes(self) -> None:
        """The span formats' checks of the whole file, in :func:`parse_upload`'s
        order, without decoding it whole: UTF-8 (a megabyte at a time, cut at line ends),
        then NUL."""
        data, pos = self.data, 0
        while pos < len(data):
            end = data.find(b"\n", min(pos + BLOCK, len(data)))
            end = len(data) if end < 0 else end + 1
            try:
                data[pos:end].decode("utf-8")
            except UnicodeDecodeError as exc:
                at = pos + exc.start
                raise InputError(f"not UTF-8 text (byte {at})", source=self.source,
                                 line=data.count(b"\n", 0, at) + 1) from None
            pos = end
        start = 0
        while data.startswith(_BOM, start):  # one mark, or several (a file saved twice)
            start += len(_BOM)
        nul = data.find(b"\x00", start)
        if nul >= 0:  # no store keeps it (PostgreSQL refuses it): refused at parse
            raise InputError("NUL byte in input (binary file?)", source=self.source,
                             line=data.count(b"\n", 0, nul) + 1)
        self._start = start

    def _lines(self) -> Iterator[str]:
        """The decoded lines after :meth:`_checked_bytes` (:func:`tool_formats.split_lines`)."""
        data, pos = self.data, self._start
        for m in _EOL.finditer(data, pos):
            yield data[pos:m.start()].decode("utf-8")
            pos = m.end()
        yield data[pos:].decode("utf-8")

    def _read(self) -> Iterator[Sentence]:
        """The reader's sentences, one at a time, with the reader's own errors."""
        fmt, src, cap = self.fmt, self.source, self.max_tokens
        if fmt == "conll":
            return iter_conll(self.data, name=src, max_tokens=cap)
        if fmt == "jsonl":
            return iter_jsonl(self.data, name=src, max_tokens=cap)
        if fmt == "text":
            return iter_text(self.data, name=src, max_tokens=cap)
        self._checked_bytes()
        if fmt == "doccano":
            return iter_doccano(self._lines(), src)
        if fmt == "prodigy":
            return iter_prodigy(self._lines(), src)
        if fmt == "conll2003":
            return conll_sentences(self._conll2003(), src, "_", True, None, None,
                                   tabbed=tab_separated(self._conll2003()))
        if fmt == "labelstudio":  # one JSON array: read whole
            return iter(read_labelstudio(self.data[self._start:].decode("utf-8"), src))
        raise AssertionError(fmt)  # every format of FORMATS is read above

    def _conll2003(self) -> Iterator[str]:
        """CoNLL-2003 lines, ``-DOCSTART-`` lines left blank (every line keeps its number)."""
        for ln in self._lines():
            yield "" if ln.lstrip("\ufeff").startswith("-DOCSTART-") else ln

    def _scan(self, keep: list | None = None) -> UploadSummary:
        """Read and check every sentence (errors in :func:`parse_upload`'s order:
        the reader's, then a sentence too long, then a bad label); count them; ``keep``:
        a list the sentences are appended to."""
        span = self.fmt in _SPAN_READERS
        per_token = self.fmt in ("conll", "conll2003")
        cap = limits.max_tokens(self.max_tokens) if span else None
        too_long = bad_label = None
        seen: set[str] = set()
        n = tokens = labeled = n_columns = 0
        for s in self._read():
            if not n:
                n_columns = len(s.tokens[0]) if s.tokens else 0
            n += 1
            tokens += len(s.tokens)
            labeled += len(s.tokens) - s.n_missing
            if too_long is None and cap and len(s.tokens) > cap:
                too_long = InputError(f"sentence of {len(s.tokens)} tokens (the limit is "
                                      f"{cap})", source=self.source, line=s.line)
            if bad_label is None:
                bad_label = self._check_labels(s, seen, per_token)
            if keep is not None:
                keep.append(s)
        if span and not n:
            raise InputError("no sentences found", source=self.source)
        if too_long is not None or bad_label is not None:
            raise too_long or bad_label
        return UploadSummary(sentences=n, tokens=tokens, labeled=labeled,
                             n_columns=n_columns, labels=sort_labels(seen))

    def _check_labels(self, s: Sentence, seen: set, per_token: bool) -> InputError | None:
        """What a project's label set may hold, checked where the file is named (None: fine)."""
        for t, lab in enumerate(s.labels):
            if lab is not None and lab not in seen:
                line = (s.line + t) if per_token else s.line
                try:
                    validate.text(lab, f"label {lab!r}", self.source, line=line,
                                  one_line=True)
                except InputError as exc:
                    return exc
                seen.add(lab)
                if len(seen) > validate.MAX_LABELS:
                    return InputError(f"more than {validate.MAX_LABELS:,} distinct labels (a "
                                      "project takes at most that many): is the last column "
                                      "the labels?", source=self.source, line=line)
        return None

    # ------------------------------------------------------------------ what callers use
    def summary(self) -> UploadSummary:
        """The first pass: every sentence checked, counted, none kept (computed once)."""
        if self._summary is None:
            self._summary = self._scan()
        return self._summary

    def sentences(self) -> list[Sentence]:
        """Every sentence in a list (:func:`parse_upload`): the whole file in memory."""
        out: list[Sentence] = []
        self._summary = self._scan(out)
        return out

    def unknown_labels(self, labels: Sequence[str]) -> list[str]:
        """The file's labels that are not in ``labels``."""
        known = set(labels)
        return [lab for lab in self.summary().labels if lab not in known]

    def __len__(self) -> int:
        return self.summary().sentences

    def __iter__(self) -> Iterator[Sentence]:
        self.summary()  # checked whole before anything is handed out
        return self._read()

    def chunks(self, size: int = CHUNK) -> Iterator[list[Sentence]]:
        """The sentences, ``size`` at a time (after :meth:`summary`)."""
        it = iter(self)
        while chunk := list(islice(it, size)):
            yield chunk


def _write(conn, project_id: int, it: Iterator[Sentence], split: str, doc, annotator: str,
           labels: Sequence[str], n_columns: int | None, source: str, first: int = 0,
           n: int | None = None) -> int:
    """Check and append the next ``n`` sentences of ``it`` (None: all), numbered from
    ``first`` in messages, a chunk at a time inside the caller's transaction; into
    ``'heldout'`` the file's labels go as gold labels."""
    done = 0
    while chunk := list(islice(it, CHUNK if n is None else min(CHUNK, n - done))):
        checked = validate.sentences(chunk, labels, source=source, n_columns=n_columns,
                                     first=first + done)  # the precise messages first
        n_columns = n_columns or len(checked[0]["tokens"][0])
        del checked
        gold = None
        if split == "heldout":
            gold = [s.labels for s in chunk]
            chunk = [Sentence(s.tokens, None, s.line) for s in chunk]
        done += sents.insert(conn, project_id, chunk, split, doc, annotator, gold)
    return done


def import_upload(db, project_id: int, upload: Upload, *, split: str = "train",
                  doc: str | None = None, annotator: str = "import",
                  add_labels: Sequence[str] = ()) -> int:
    """:func:`import_sentences` of an upload: appended a chunk at a time in one
    transaction (all or nothing); ``add_labels`` join the label set in it."""
    upload.summary()  # the file's own problems first, before any write
    split = validate.split(split)
    annotator = validate.credit(annotator)
    if isinstance(add_labels, str):
        raise InputError("add_labels must be a list of strings", source=doc or "<import>")
    add_labels = [str(x) for x in add_labels]

    def tx(conn):
        try:
            projects.row(conn, project_id, db.for_update())
        except NotFoundError:
            raise InputError(f"no project with id {project_id}", source="<import>") from None
        if add_labels:
            projects.extend_labels(conn, project_id, add_labels)
        labels = projects.as_dict(projects.row(conn, project_id))["labels"]
        return _write(conn, project_id, iter(upload), split, doc, annotator, labels,
                      projects.token_columns(conn, project_id), doc or "<upload>")

    out = db.write(tx)
    db.analyze()  # the planner sees the sentences and votes just written
    return out


def create_project(db, name: str, upload: Upload, labels: Sequence[str],
                   template: str | None, offsets: Sequence[int], kernel: str = "linear", *,
                   heldout_fraction: float = 0.0, doc: str | None = None,
                   annotator: str = "import", settings: dict | None = None) -> int:
    """:func:`projects.create_from_sentences` of an upload: the project and its sentences
    (the last ``heldout_fraction`` held out, their labels gold) in one transaction."""
    summary = upload.summary()
    annotator = validate.credit(annotator)
    labels = list(labels)
    source = doc or "<upload>"
    if set(summary.labels) - set(labels):  # the message names the sentence and token
        for k, chunk in enumerate(upload.chunks()):
            validate.sentences(chunk, labels, source=source, first=k * CHUNK)
    if template is None:
        template = projects.default_features(summary.n_columns)
    if template and template.strip():
        validate.template(template, summary.n_columns)
    n = summary.sentences
    n_held = int(round(float(heldout_fraction) * n)) if n > 1 else 0
    n_held = min(n_held, n - 1) if n_held else 0

    def tx(conn):
        db.lock(conn, 0x70726A)  # concurrent creates of one name: one wins, one is told
        pid = projects.insert(conn, name, labels, template or "", list(offsets), kernel,
                              settings or {})
        it = iter(upload)  # one pass: the first sentences train, the last held out
        _write(conn, pid, it, "train", doc, annotator, labels, None, source, 0, n - n_held)
        if n_held:
            _write(conn, pid, it, "heldout", doc, annotator, labels,
                   projects.token_columns(conn, pid), source, n - n_held)
        return pid

    out = db.write(tx)
    db.analyze()  # the planner sees the sentences and votes just written
    return out
