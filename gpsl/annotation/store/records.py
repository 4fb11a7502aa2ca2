"""Typed records: what the store hands to the rules and to the pages, as immutable values.

Rows of the rules (:class:`Vote`, :class:`Derived`) and what the pages show, built by
:mod:`gpsl.annotation.reports` from the store's rows (``from_row``: a row dict as the store's
read methods return it; a missing key takes its default). A record holds values and the few
facts that follow from them by definition (a version's name, a token's uncertainty); the
rules that make them live in :mod:`gpsl.annotation.labeling.rules`, the figures in
:mod:`gpsl.annotation.reports`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpsl import tags

__all__ = ["Account", "AnnotatorRow", "Calibration", "CalibrationReport", "Conflict",
           "CrowdSummary", "Decision", "Derived", "HistoryEntry", "Lease", "Progress", "Project",
           "RankedSentence", "Reliability", "Scheme", "SearchHit", "SearchResult", "SentenceView",
           "TeamFigures", "TeamSettings", "TokenView", "TrainingProgress", "Version", "Vote",
           "KeepTraining",
           "others_hidden", "overlap_of"]


def overlap_of(settings: Mapping | None) -> int:
    """k, the annotators each sentence goes to (a project's ``overlap`` setting, at least 1)."""
    try:
        return max(1, int((settings or {}).get("overlap", 1) or 1))
    except (TypeError, ValueError):
        return 1


def others_hidden(settings: Mapping | None) -> bool:
    """The one rule of what an annotator sees of other people's votes while annotating: in
    blind mode, or with overlap (k >= 2: each sentence gets k independent votes), nothing
    of them until a lead reviews the votes on the Team page; otherwise (k = 1, not blind)
    the training labels, whoever gave them.  Labels imported with a file are always
    shown."""
    settings = settings or {}
    return bool(settings.get("blind", False)) or overlap_of(settings) > 1


def _frozen(d: Mapping | None) -> dict:
    return dict(d or {})


def _empty():
    return field(default_factory=dict)


class Vote(NamedTuple):
    """One annotator's vote on a token, as the rules read it."""

    annotator: str
    label: str | None  # None: the annotator cleared the token ("no label")
    source: str  # 'human', 'accepted' or 'import'
    at: str


class Derived(NamedTuple):
    """A token's training label and whom it is credited to."""

    label: str
    source: str
    annotator: str


# ----------------------------------------------------------------------------- projects


@dataclass(frozen=True)
class Project:
    """A project: its label set (in button order), CRF++ template, dependency offsets,
    kernel, settings (team settings, crowd model), guidelines (Markdown)."""

    id: int
    name: str
    labels: tuple[str, ...]
    template: str = ""
    offsets: tuple[int, ...] = (-1, 1)
    kernel: str = "linear"
    created_at: str | None = None
    settings: Mapping = _empty()
    guidelines: str = ""
    n_sentences: int | None = None

    @classmethod
    def from_row(cls, row: Mapping) -> Project:
        return cls(id=row["id"], name=row["name"], labels=tuple(row.get("labels") or ()),
                   template=row.get("template") or "",
                   offsets=tuple(row.get("offsets") or ()), kernel=row.get("kernel") or "linear",
                   created_at=row.get("created_at"), settings=_frozen(row.get("settings")),
                   guidelines=row.get("guidelines") or "", n_sentences=row.get("n_sentences"))

    @property
    def blind(self) -> bool:
        return bool(self.settings.get("blind", False))

    @property
    def overlap(self) -> int:
        """k, the annotators each sentence goes to."""
        return overlap_of(self.settings)

    @property
    def hides_others(self) -> bool:
        """Whether an annotator sees other people's votes on the Annotate page: never in
        blind mode or with overlap (:func:`others_hidden`)."""
        return others_hidden(self.settings)


@dataclass(frozen=True)
class Progress:
    """Annotation progress of a project (or one split of it); labels are training labels.
    ``annotators``: votes with a label per annotator (imports included: ``people`` are the
    persons among them)."""

    sentences: int = 0
    tokens: int = 0
    labeled_tokens: int = 0
    complete_sentences: int = 0
    partial_sentences: int = 0
    unlabeled_sentences: int = 0
    pct_complete: float = 0.0
    pct_sentences_complete: float = 0.0
    annotators: Mapping = _empty()
    people: tuple[str, ...] = ()
    votes: int = 0
    disputed_tokens: int = 0
    sources: Mapping = _empty()
    label_counts: Mapping = _empty()
    labels_per_day: Mapping = _empty()
    skipped_sentences: int = 0


# ----------------------------------------------------------------------------- model versions


@dataclass(frozen=True)
class Calibration:
    """How a version's marginals were calibrated (its metrics' ``calibration``)."""

    source: str | None = None
    method: str | None = None
    kind: str | None = None
    temperature: float | None = None
    t_unary: float | None = None
    t_pair: float | None = None
    tokens: int = 0
    nll_before: float | None = None
    nll_after: float | None = None
    summary: str | None = None
    #: "selected" (every candidate, cross-validated), "refitted" (the previous choice on the
    #: new scores) or "reused" (the previous calibrator): :mod:`gpsl.annotation.training.refit`
    how: str | None = None

    @classmethod
    def from_row(cls, row: Mapping | None) -> Calibration | None:
        if not row:
            return None
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in row.items() if k in names and v is not None})


@dataclass(frozen=True)
class Version:
    """A model version (one training run): ``status`` running, done, failed or killed;
    ``number`` within its project; ``settings`` its training settings, ``metrics`` its
    figures (held-out, calibration, fit)."""

    id: int
    project_id: int | None = None
    number: int | None = None
    status: str = "done"
    active: bool = False
    created_at: str | None = None
    finished_at: str | None = None
    settings: Mapping = _empty()
    metrics: Mapping = _empty()
    classes: tuple[str, ...] = ()
    path: str | None = None
    n_labeled_tokens: int | None = None
    error: str | None = None
    query_strategy: str | None = None
    bound_trace: tuple[float, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping) -> Version:
        return cls(id=row.get("id", 0), project_id=row.get("project_id"),
                   number=row.get("number"), status=row.get("status", "done"),
                   active=bool(row.get("active", False)), created_at=row.get("created_at"),
                   finished_at=row.get("finished_at"), settings=_frozen(row.get("settings")),
                   metrics=_frozen(row.get("metrics")), classes=tuple(row.get("classes") or ()),
                   path=row.get("path"), n_labeled_tokens=row.get("n_labeled_tokens"),
                   error=row.get("error"), query_strategy=row.get("query_strategy"),
                   bound_trace=tuple(row.get("bound_trace") or ()))

    @property
    def name(self) -> str:
        """``"v3"``: the version's number within its project."""
        return f"v{self.number or self.id}"

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self.settings.get("offsets", (-1, 1)))

    @property
    def inference(self) -> str:
        """The inference mode the fit used (what was asked before it ran)."""
        return self.metrics.get("inference") or self.settings.get("inference") or "full"

    @property
    def calibration(self) -> Calibration | None:
        return Calibration.from_row(self.metrics.get("calibration"))


@dataclass(frozen=True)
class TrainingProgress:
    """A run's progress file: ``phase`` (loading, fitting, calibrating, evaluating, saving,
    predicting, storing, done, failed, stopped), the sweeps so far (``bounds``, ``seconds``),
    the calibration's steps (``step`` of ``steps``, each a ``step_name``: a fold fit, the
    selection, the held-out halves), the prediction chunks (``done`` of ``total``
    sentences), ``eta_seconds`` of the phase (the fit's from the stop rule and the measured
    sweeps, :func:`gpsl.progress.fit_eta`), and ``phases``: ``(name, wall s, CPU s)`` of the
    phases that ended."""

    phase: str = "starting"
    iteration: int = 0
    max_iter: int = 1
    bounds: tuple[float, ...] = ()
    seconds: tuple[float, ...] = ()
    inference: str | None = None
    done: int = 0
    total: int = 0
    sentences: int = 0
    labeled_tokens: int | None = None
    eta_seconds: float | None = None
    step: int = 0
    steps: int = 0
    step_name: str = ""
    phases: tuple[tuple[str, float, float], ...] = ()

    @classmethod
    def from_row(cls, row: Mapping | None, inference: str | None = None) -> TrainingProgress:
        row = row or {}
        return cls(phase=row.get("phase", "starting"), iteration=int(row.get("iteration", 0)),
                   max_iter=int(row.get("max_iter", 1) or 1),
                   bounds=tuple(row.get("bounds") or ()), seconds=tuple(row.get("seconds") or ()),
                   inference=row.get("inference_used") or row.get("inference") or inference,
                   done=int(row.get("done", 0)), total=int(row.get("total", 0) or 0),
                   sentences=int(row.get("sentences", 0) or 0),
                   labeled_tokens=row.get("labeled_tokens"), eta_seconds=row.get("eta_seconds"),
                   step=int(row.get("step", 0) or 0), steps=int(row.get("steps", 0) or 0),
                   step_name=str(row.get("step_name") or ""),
                   phases=tuple((str(p.get("name")), float(p.get("wall", 0.0)),
                                 float(p.get("cpu", 0.0))) for p in row.get("phases") or ()
                                if isinstance(p, Mapping)))


@dataclass(frozen=True)
class KeepTraining:
    """A project's "keep training" setting: ``on``, ``every`` (a run starts by itself after
    this many new labels), ``new_labels`` (set since the last run began), and the bounds and
    help of N (``every_min``, ``every_max``, ``label``, ``help``: written once in the back
    end); ``error``: why the last automatic run could not start, and when (None: it did)."""

    on: bool = False
    every: int = 50
    new_labels: int = 0
    every_min: int = 1
    every_max: int = 100_000
    label: str = ""
    help: str = ""
    error: str | None = None


# ----------------------------------------------------------------------------- annotating


@dataclass(frozen=True)
class TokenView:
    """One token as the Annotate page shows it: its label now (``label``: the training label,
    or in a view that hides other people's votes the annotator's own copy), the active
    model's suggestion, confidence (the largest marginal), best three labels and the queue's
    score of the token (``score``: the stored query score, else least confidence; None where
    the view shows no model output); ``mine``: the annotator's own vote (None: none);
    ``own``: the token in the annotator's own copy of the sentence (their vote, else the
    label imported with the file), which the cursor, the counts and Clear read."""

    index: int
    text: str
    columns: tuple[str, ...]
    label: str | None  # current label (None: unlabeled)
    source: str | None  # 'human' / 'accepted' / None
    annotator: str | None
    suggestion: str | None = None  # the model's label (scheme-valid with a span scheme)
    confidence: float | None = None  # the model's largest marginal
    top: tuple[tuple[str, float], ...] = ()  # best three (label, p)
    votes: Mapping = _empty()  # annotator -> label (None: cleared)
    suggestion_p: float | None = None  # the model's marginal of ``suggestion``
    query: float | None = None  # the stored query score (None: none stored)
    score: float | None = None  # the token's queue score (:func:`rules.token_scores`)
    mine: str | None = None  # the annotator's own vote (None: no vote)
    own: str | None = None  # the annotator's copy: their vote, else the imported label

    @property
    def uncertainty(self) -> float:
        return 0.0 if self.confidence is None else max(0.0, 1.0 - self.confidence)


@dataclass(frozen=True)
class SentenceView:
    """One sentence as an annotator may see it (other people's votes hidden in blind mode
    or with overlap, :func:`others_hidden`), with the active model's output per token;
    ``opening``: the token the cursor opens on (in the annotator's own copy);
    ``flagged``: tokens whose label breaks the span ``scheme`` (-> why); ``blind``: other
    people's votes are hidden here; ``overlap``: the project's k; ``hidden``: how many
    tokens carry a vote of someone else that this view hides."""

    id: int
    project_id: int
    position: int
    doc: str | None
    line: int | None
    split: str
    tokens: tuple[TokenView, ...]
    version: Version | None = None
    scheme: str | None = None
    blind: bool = False
    opening: int = 0
    flagged: Mapping = _empty()
    overlap: int = 1
    hidden: int = 0

    @property
    def labels(self) -> list[str | None]:
        return [t.label for t in self.tokens]

    @property
    def own(self) -> list[str | None]:
        """The annotator's own copy of the sentence (their votes, else the file's labels)."""
        return [t.own for t in self.tokens]

    @property
    def n_labeled(self) -> int:
        """Tokens labeled in the annotator's own copy."""
        return sum(t.own is not None for t in self.tokens)

    @property
    def n_mine(self) -> int:
        """Tokens with the annotator's own vote."""
        return sum(t.mine is not None for t in self.tokens)

    @property
    def n_others(self) -> int:
        """Tokens shown with a label that is not in the annotator's own copy (someone else's,
        visible when the view does not hide them)."""
        return sum(t.label is not None and t.own is None for t in self.tokens)


@dataclass(frozen=True)
class Scheme:
    """A label set's span scheme as the Annotate page uses it: ``name`` (``"BIO"``,
    ``"BILOU"`` ...; None when the labels are no span scheme) and its entity ``types``."""

    name: str | None
    types: tuple[str, ...] = ()

    def span(self, kind: str, n: int) -> list[str]:
        """The labels of an ``n``-token span of entity type ``kind`` (``O``: n times ``O``)."""
        return tags.span_labels(kind, n, self.name)


@dataclass(frozen=True)
class HistoryEntry:
    """One change of a token's votes: ``action`` set, clear, undo or import; ``imported``:
    the labels came with a file (not a person)."""

    id: int
    annotator: str
    action: str
    old_label: str | None
    new_label: str | None
    source: str | None
    at: str
    undone: bool = False
    imported: bool = False


@dataclass(frozen=True)
class SearchHit:
    sentence_id: int
    number: int
    split: str
    n_tokens: int
    n_labeled: int
    tokens: tuple[str, ...]
    marks: tuple[int, ...]


@dataclass(frozen=True)
class SearchResult:
    total: int
    hits: tuple[SearchHit, ...]


# ----------------------------------------------------------------------------- dashboards


@dataclass(frozen=True)
class CalibrationReport:
    """Reliability of a version on the held-out gold: the equal-width reliability table of
    the bins with tokens (``bin_mid``, ``accuracy``, ``count``, ``mean_confidence`` and the
    consistency band ``band_lo``/``band_hi``, ``band_down``/``band_up`` below and above the
    mean confidence), ECEs with their noise floors (what a perfectly calibrated model would
    show on these tokens), selective accuracy, the accept-threshold table and the figures by
    label frequency (the tables are pandas DataFrames)."""

    table: Any
    accuracy: float
    ece: float
    ece_floor: float
    ece_mass: float
    ece_mass_floor: float
    mean_confidence: float
    nll: float
    tokens: int
    selective: Any
    thresholds: Any
    bands: Any


@dataclass(frozen=True)
class VersionSummary:
    """What the Confidence page shows of a version (:mod:`gpsl.annotation.training.summaries`): the
    unlabeled training tokens when it was trained (count, mean confidence, the histogram
    ``lo, hi, mid, count`` and the box per predicted label ``predicted, q1, median, q3,
    lower, upper, n, mean``, pandas), its least confident tokens then, and its reliability
    on the held-out gold (None without)."""

    unlabeled: int
    mean_confidence: float | None
    histogram: Any
    boxes: Any
    least_confident: tuple
    calibration: CalibrationReport | None


@dataclass(frozen=True)
class RankedSentence:
    """A sentence of the uncertainty queue with its queue score, the query score that gave
    it (``strategy``) and its unlabeled tokens' confidences."""

    sentence_id: int
    position: int
    score: float | None
    strategy: str | None
    min_confidence: float
    mean_confidence: float
    unlabeled: int


# ----------------------------------------------------------------------------- teams


@dataclass(frozen=True)
class TrainingLabels:
    """What a project's training runs learn from (the Train and Team pages say it):
    ``key`` (a key of :data:`gpsl.annotation.labeling.rules.TRAINING_RULES`), ``posterior`` (which
    posterior, in words: :data:`gpsl.annotation.labeling.rules.POSTERIORS`) and ``rule`` (the whole
    rule, :func:`gpsl.annotation.labeling.rules.training_rule`)."""

    key: str
    posterior: str
    rule: str


@dataclass(frozen=True)
class TeamSettings:
    """``overlap`` (k annotators per sentence), ``blind``, ``resolve`` (majority or crowd)
    and ``soft`` (training takes the crowd model's posterior as soft labels); ``rule``: the
    training-label rule these make, in words
    (:func:`gpsl.annotation.labeling.rules.training_rule`)."""

    overlap: int = 1
    blind: bool = False
    resolve: str = "majority"
    soft: bool = False
    rule: str = ""

    @property
    def hides_others(self) -> bool:
        return others_hidden({"overlap": self.overlap, "blind": self.blind})


@dataclass(frozen=True)
class Reliability:
    """One annotator's reliability under the crowd model: estimated accuracy, votes, the
    model (full or one-coin), the confusion matrix ``{true: {given: p}}``, the entity
    precision and recall (None without an ``O`` label or an entity) and the agreement
    with the crowd model's label."""

    annotator: str
    accuracy: float | None
    votes: int
    model: str
    confusion: Mapping = _empty()
    precision: float | None = None
    recall: float | None = None
    agreement: float | None = None


@dataclass(frozen=True)
class CrowdSummary:
    """The project's fitted crowd model (Dawid-Skene) as the Team page shows it."""

    n_votes: int
    n_tokens: int
    fitted_at: str
    report: tuple[Reliability, ...]


@dataclass(frozen=True)
class AnnotatorRow:
    """One person's labeling: current votes, sentences, changes, active minutes, speed,
    mean kappa with the others, last action."""

    annotator: str
    votes: int
    sentences: int
    changes: int
    active_minutes: float
    labels_per_hour: float | None
    median_seconds: float | None
    kappa: float | None
    last: str | None


@dataclass(frozen=True)
class Conflict:
    """A token people disagree on: ``votes`` {annotator: label}, the training label now
    (``derived``), the lead's decision and ``status`` (open, resolved, adjudicated)."""

    sentence_id: int
    position: int
    token_index: int
    token: str
    votes: Mapping
    labels: tuple[str | None, ...]
    derived: str | None
    adjudicated: str | None
    status: str


@dataclass(frozen=True)
class TeamFigures:
    """Agreement over the tokens two or more people labeled: pairwise kappa and shared
    tokens (matrices over ``annotators``), Krippendorff's alpha (overall and per label),
    the people's rows and the conflicts."""

    annotators: tuple[str, ...]
    kappa: Any
    shared: Any
    alpha: float
    alpha_by_label: Mapping
    n_tokens: int
    people: tuple[AnnotatorRow, ...]
    conflicts: tuple[Conflict, ...]


@dataclass(frozen=True)
class Decision:
    """One change of a lead's decision on a token (``new_label`` None: withdrawn)."""

    at: str
    lead: str
    old_label: str | None
    new_label: str | None


@dataclass(frozen=True)
class Account:
    id: int
    name: str
    role: str
    has_password: bool
    created_at: str
    link_expires: str | None = None
    sessions: int = 0  # open sessions (signed in somewhere)
    projects: tuple[int, ...] = ()  # the projects it is a member of (a lead sees every one)


@dataclass(frozen=True)
class Lease:
    sentence_id: int
    position: int
    annotator: str
    expires_at: str
