"""The store as one person may use it: roles and project membership checked in the back end.

:meth:`gpsl.annotation.Store.acting` (or :meth:`~gpsl.annotation.Store.as_session`) returns an
:class:`ActingStore` for one identity; the pages get nothing else, so whatever a page (or a
request that reaches it) asks for, the back end decides:

* **who**: the identity is checked against the store when the object is made: an account's
  name and role are read from its row (a deleted account is refused), and the single-user
  local identity (the lead) is refused once the store has an account;
* **what**: every method of the :class:`~gpsl.annotation.Store` and of its
  :class:`~gpsl.annotation.reports.Reports` is in one of the tables below: :data:`MEMBER`
  (anyone who is a member of the project the call touches: labelling, the queue, one's
  own view of a sentence) or :data:`LEAD` (settings, training, imports, exports, accounts,
  adjudication, every dashboard, other people's data); a method in neither table is refused
  (deny by default), and :data:`NEVER` (sessions, links, raw rows) is refused to everyone;
* **which project**: the project is found from the call's ``project_id``, ``sentence_id``,
  ``version_id`` or ``version`` argument; a lead may touch every project, anyone else only
  those they are a member of (:func:`gpsl.annotation.accounts.set_member`); the project list
  holds only those;
* **in whose name**: the arguments that credit a vote, a decision, a skip or a lease
  (:data:`SELF`) must be the acting person's own name (None is read as it), so nobody can
  label as someone else or as a reserved name; imported labels are credited to the import
  (``import:<file>``) only;
* **blind mode**: someone who is not a lead, in a project in blind mode, sees only their own
  history, searches by text only and cannot list who voted;
* **the team's model**: the crowd model in a project's settings (every annotator's name and
  confusion matrix) is a lead's: a project read by anyone else comes without it;
* **an accepted suggestion**: a label written with ``source='accepted'`` must be what the
  active model suggests for that token in the person's own view (else it is their own label,
  and is refused as an accepted one);
* **nothing private**: the object keeps its store and caches out of reach (no ``_store``,
  no ``__dict__``): what a page holds is the checked methods and ``who``.

Refusals are :class:`~gpsl.annotation.store_errors.AccessDenied`, one line.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from gpsl.annotation import accounts, auth, projects, team, validate
from gpsl.annotation.accounts import Identity
from gpsl.annotation.reports import Reports
from gpsl.annotation.store_errors import AccessDenied, InputError

#: Store methods anyone may call on a project they are a member of
MEMBER = frozenset({
    "list_projects", "get_project", "sentence_count", "neighbours", "sentence_view",
    "set_labels", "set_label_steps", "set_label", "clear_label", "undo", "skip", "progress",
    "find_sentences",
    "annotators", "sentence_by_number", "sentence_numbers", "active_model", "queue",
    "queue_strategy", "next_sentence", "next_to_annotate", "release_lease", "team_settings",
})
#: Store methods for a lead (every project; other people's votes and data; the team)
LEAD = frozenset({
    "create_project", "create_project_from_sentences", "create_sample_copy",
    "ensure_sample_project", "update_project", "delete_project", "add_sentences", "set_gold",
    "get_sentence", "get_sentences", "sentence_ids", "training_data", "gold_data",
    "export_sentences", "adjudicate", "adjudication_history", "votes", "history",
    "token_history", "start_model_version", "set_model_worker", "finish_model_version",
    "fail_model_version", "mark_stale_running_failed", "set_active_model",
    "get_model_version", "list_model_versions", "list_query_rounds", "save_predictions",
    "get_predictions", "get_query_scores", "has_predictions", "delete_predictions",
    "prune_predictions", "ranked_queue", "leases", "account_count", "list_accounts",
    "create_account", "set_account_password", "set_account_role", "delete_account",
    "issue_sign_in_link", "end_sessions", "members", "set_member", "set_team_settings",
    "fit_crowd_model", "team_votes", "agreement", "annotator_stats", "conflicts",
    "team_figures",
    "start_training", "stop_training", "keep_training", "set_keep_training", "recover",
    "import_sentences", "export_annotations",
    "export_predictions", "preview", "check_model", "model_zip", "training_set",
    "training_labels",
    "export_votes", "import_votes", "create_crowd_project", "import_crowd_folder",
    "own_root", "model_path", "store_summary", "annotations_file", "predictions_file",
    "store_limits", "set_store_limits", "parse_upload", "open_upload", "label_activity",
})
#: Reports anyone may read of a project they are a member of (their own view of it)
MEMBER_REPORTS = frozenset({
    "project", "projects", "progress", "active_version", "scheme", "sentence",
    "own_labels",
    "token_history", "search", "team_settings", "label_stamp", "learning_curve",
})
#: Reports for a lead
LEAD_REPORTS = frozenset({
    "columns", "versions", "version", "with_predictions", "running", "training_progress",
    "keep_training",
    "summary", "calibration", "ranked", "uncertain_tokens", "activity", "crowd", "team",
    "conflicts", "decisions", "tokens", "accounts", "leases",
})
#: never through an acting store: sessions, links and passwords are the door's own business
#: (a lead starting a session for another account would be that account)
NEVER = frozenset({
    "verify_password", "sign_in", "redeem_sign_in_link", "start_session", "session_identity",
    "end_session", "issue_setup_token", "setup_lead", "acting", "as_session", "close",
})
#: the arguments naming who a call credits or serves: the acting person's own name only
SELF = {
    "set_labels": "annotator", "set_label_steps": "annotator", "set_label": "annotator",
    "clear_label": "annotator",
    "undo": "annotator", "skip": "annotator", "adjudicate": "lead",
    "next_sentence": "annotator", "next_to_annotate": "annotator",
    "release_lease": "annotator", "sentence_view": "annotator", "sentence": "annotator",
    "own_labels": "annotator",
}
#: non-leads only: a queue in their own name
SELF_IF_NOT_LEAD = {"queue": "annotator"}
#: labels that come with a file: credited to the import, never to a person
IMPORT_CREDIT = {"import_sentences", "add_sentences", "create_project_from_sentences"}


#: what an :class:`ActingStore` or :class:`ActingReports` keeps out of a page's reach: the
#: unrestricted store, the caches (per object, weakly: it goes with the object)
_PRIVATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: results that carry a project's settings: read without the crowd model by non-leads
_PROJECT_READS = frozenset({"get_project", "list_projects", "project", "projects"})
_LABEL_WRITES = frozenset({"set_labels", "set_label_steps", "set_label"})


def _private(obj) -> SimpleNamespace:
    return _PRIVATE[obj]


def _without_crowd(item):
    """A project (a dict or a :class:`~gpsl.annotation.records.Project`) without the crowd
    model of its settings, or the team settings dict without it."""
    if item is None:
        return None
    if isinstance(item, list):
        return [_without_crowd(x) for x in item]
    if isinstance(item, dict) and "settings" not in item:  # team settings
        return {**item, "crowd": None} if "crowd" in item else item
    settings = item["settings"] if isinstance(item, dict) else item.settings
    if not settings or "crowd" not in settings:
        return item
    kept = {k: v for k, v in settings.items() if k != "crowd"}
    if isinstance(item, dict):
        return {**item, "settings": kept}
    return dataclasses.replace(item, settings=kept)


def _own_progress(progress, name: str):
    """A progress (a dict or a :class:`~gpsl.annotation.records.Progress`) as a blind
    annotator sees it: the counts, but of the votes per person only their own (and the
    imports'), and no label counts (the training labels are other people's votes)."""
    get = progress.get if isinstance(progress, dict) else functools.partial(getattr,
                                                                             progress)
    own = {a: n for a, n in (get("annotators") or {}).items()
           if a == name or validate.is_import(a)}
    changes = {"annotators": own, "label_counts": {}, "disputed_tokens": 0}
    if isinstance(progress, dict):
        return {**progress, **changes}
    return dataclasses.replace(progress, **changes,
                               people=tuple(p for p in progress.people if p == name))


def resolve(store, who: Identity) -> Identity:
    """``who`` as the store knows it now: the account's current name and role (refused
    when it is gone), or the local identity (refused once an account exists)."""
    if who is None:
        raise AccessDenied("not signed in")
    if who.local or who.account_id is None:
        if accounts.count(store.db):
            raise AccessDenied("this store has accounts: sign in first")
        return Identity(validate.person(who.name), "lead", None, True)
    row = accounts.get(store.db, who.account_id)
    if row is None:
        raise AccessDenied("this account no longer exists")
    return Identity(row["name"], row["role"], row["id"], False)


class ActingStore:
    """The :class:`~gpsl.annotation.Store` for one identity (see the module docstring):
    the same methods, each checked before it runs."""

    __slots__ = ("who", "__weakref__")

    def __init__(self, store, who: Identity):
        self.who = resolve(store, who)
        # the unrestricted store and the caches (per object: pages make one per run)
        _PRIVATE[self] = SimpleNamespace(store=store, members={}, blinds={}, owners={})

    # -- what may be read freely --------------------------------------------------------
    @property
    def where(self) -> str:
        return _private(self).store.where

    @property
    def dialect(self) -> str:
        return _private(self).store.dialect

    def __repr__(self) -> str:
        return f"ActingStore({self.where!r}, {self.who.name!r}, {self.who.role})"

    @property
    def reports(self) -> ActingReports:
        return ActingReports(self)

    # -- the checks ---------------------------------------------------------------------
    def is_member(self, project_id: int) -> bool:
        """Whether this person may open the project (a lead: every one)."""
        members = _private(self).members
        if project_id not in members:
            members[project_id] = project_id in accounts.projects_of(
                _private(self).store.db, self.who.account_id)
        return members[project_id]

    def _blind(self, project_id: int | None) -> bool:
        if project_id is None or self.who.is_lead:
            return False
        blinds, store = _private(self).blinds, _private(self).store
        if project_id not in blinds:
            blinds[project_id] = bool(team.settings_of(store.get_project(project_id) or {})
                                      ["blind"])
        return blinds[project_id]

    def _project(self, args: dict, look_up: bool = True) -> int | None:
        """The project a call is about (its ids checked); ``look_up`` False: the ids only
        checked, a sentence's or a version's project not read (a lead's call needs none).
        What a sentence or version belongs to is read once per acting store (a page run)."""
        if args.get("project_id") is not None:
            return validate.whole(args["project_id"], "project id")
        for key, what in (("sentence_id", "sentence id"), ("version_id", "version id")):
            if args.get(key) is not None:
                i = validate.whole(args[key], what)
                if not look_up:
                    return None
                known = _private(self).owners
                if (key, i) not in known:
                    pid = projects.project_of(_private(self).store.db, **{key: i})
                    if pid is None:
                        return None
                    known[(key, i)] = pid
                return known[(key, i)]
        version = args.get("version")
        return getattr(version, "project_id", None)

    def _check_accepted(self, name: str, a: dict) -> None:
        """``source='accepted'``: every label is the active model's suggestion for its token
        in this person's view of the sentence (:meth:`Reports.sentence`)."""
        if name not in _LABEL_WRITES or a.get("source", "human") != "accepted":
            return
        steps = ([a.get("labels") or {}] if name == "set_labels" else
                 [{a.get("token_index"): a.get("label")}] if name == "set_label" else
                 list(a.get("steps") or []))
        view = Reports(_private(self).store).sentence(a["sentence_id"], self.who.name)
        if view is None or view.version is None:
            raise InputError("no model suggestions to accept (train a model first)",
                             source=f"sentence {a['sentence_id']}")
        tokens = view.tokens
        for step in steps:
            for t, lab in dict(step).items():
                t = validate.token_index(t, len(tokens), f"sentence {a['sentence_id']}")
                if lab is not None and tokens[t].suggestion != lab:
                    raise InputError(f"token {t}: {str(lab)[:40]!r} is not the model's "
                                     "suggestion, so it cannot be stored as accepted",
                                     source=f"sentence {a['sentence_id']}")

    def check(self, name: str, fn: Callable, args: tuple, kwargs: dict, *,
              reports: bool = False) -> inspect.BoundArguments:
        """Refuse (:class:`AccessDenied`) unless this identity may make the call (of a
        Store method, or of a report with ``reports``); returns the bound arguments, with
        the acting name filled in where :data:`SELF` wants it."""
        member, lead = (MEMBER_REPORTS, LEAD_REPORTS) if reports else (MEMBER, LEAD)
        if name in NEVER or name.startswith("_") or name not in member | lead:
            raise AccessDenied(f"{name} is not available here")
        who = self.who
        if name not in member and not who.is_lead:
            raise AccessDenied(f"{name.replace('_', ' ')} is for a project lead (you are "
                               f"{who.role})")
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise AccessDenied(f"{name}: {exc}") from None
        bound.apply_defaults()
        a = bound.arguments
        extra = {k: v for name_, prm in bound.signature.parameters.items()
                 if prm.kind is prm.VAR_KEYWORD for k, v in a.get(name_, {}).items()}
        for arg in (SELF.get(name), None if who.is_lead else SELF_IF_NOT_LEAD.get(name)):
            if arg is None or arg not in a:
                continue
            if a[arg] is None:
                a[arg] = who.name
            elif " ".join(str(a[arg]).split()) != who.name:
                raise AccessDenied(f"{name.replace('_', ' ')}: only in your own name "
                                   f"({who.name!r}), not {str(a[arg])[:60]!r}")
        credit = a.get("annotator", extra.get("annotator"))
        if name in IMPORT_CREDIT and credit is not None and not validate.is_import(str(credit)):
            raise AccessDenied("imported labels are credited to the import "
                               "(import:<file name>), never to a person")
        if name == "start_training":  # the run's line names who started it, never a choice
            a["started_by"] = who.name
        if name == "sentence_view" and not who.is_lead and a.get("blind") is not None:
            raise AccessDenied("the project's blind mode decides what you see")
        pid = self._project(a, look_up=not who.is_lead)
        self._check_accepted(name, a)
        if who.is_lead:
            return bound
        if pid is not None and not self.is_member(pid):
            raise AccessDenied(f"you are not a member of project {pid}: ask a lead to add you")
        if self._blind(pid):
            if name == "annotators" or (name in ("search", "find_sentences") and any(
                    extra.get(k) for k in ("label", "annotator", "status", "conflicts"))):
                raise AccessDenied("blind annotation: search by text only")
            if name == "token_history" and a.get("only") != who.name:
                a["only"] = who.name  # the report's own filter: this person's changes
        return bound

    def redact(self, name: str, result, bound: inspect.BoundArguments | None = None):
        """What a non-lead gets of a call's ``result``: only their projects, no project's
        crowd model (every annotator's name and confusion matrix), and in blind mode a
        progress without other people's names and labels."""
        if self.who.is_lead:
            return result
        if name == "progress" and self._blind(self._project(bound.arguments)):
            result = _own_progress(result, self.who.name)
        if name in ("list_projects", "projects"):
            result = [p for p in result
                      if self.is_member(p["id"] if isinstance(p, dict) else p.id)]
        if name in _PROJECT_READS or (name == "team_settings" and isinstance(result, dict)):
            result = _without_crowd(result)
        return result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AccessDenied(f"{name} is not available here")
        target = getattr(_private(self).store, name)  # AttributeError for what it lacks
        if not callable(target):
            raise AccessDenied(f"{name} is not available here")

        def call(*args, **kwargs):
            bound = self.check(name, target, args, kwargs)
            return self.redact(name, target(*bound.args, **bound.kwargs), bound)

        call.__name__ = name
        return call

    # -- the person's own session -------------------------------------------------------
    def end_own_sessions(self) -> int:
        """Sign this person out everywhere (every session of their account)."""
        if self.who.account_id is None:
            return 0
        return auth.end_sessions(_private(self).store.db, self.who.account_id)


class ActingReports:
    """:class:`~gpsl.annotation.reports.Reports` for one identity: every report checked by
    the tables of :class:`ActingStore`."""

    __slots__ = ("__weakref__",)

    def __init__(self, acting: ActingStore):
        _PRIVATE[self] = SimpleNamespace(acting=acting,
                                         reports=Reports(_private(acting).store))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AccessDenied(f"{name} is not available here")
        acting, reports = _private(self).acting, _private(self).reports
        target = getattr(reports, name)

        def call(*args, **kwargs):
            bound = acting.check(name, target, args, kwargs, reports=True)
            return acting.redact(name, target(*bound.args, **bound.kwargs), bound)

        call.__name__ = name
        return call
