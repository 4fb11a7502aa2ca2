"""The store as one person may use it: roles and project membership checked in the back end.

:meth:`gpsl.annotation.Store.acting` (or :meth:`~gpsl.annotation.Store.as_session`) returns an
:class:`ActingStore` for one identity; the pages get nothing else, so whatever a page (or a
request that reaches it) asks for, the back end decides:

* **who**: the identity is checked against the store when the object is made: an account's
  name and role are read from its row (a deleted account is refused), and the single-user
  local identity (the lead) is refused once the store has an account;
* **what**: every method of the :class:`~gpsl.annotation.Store` and of its
  :class:`~gpsl.annotation.reports.Reports` carries its declaration
  (:mod:`gpsl.annotation.permissions`, re-exported here): ``@requires(Role.ANNOTATOR)``
  (anyone who is a member of the project the call touches: labelling, the queue, one's
  own view of a sentence) or ``@requires(Role.LEAD)`` (settings, training, imports, exports,
  accounts, adjudication, every dashboard, other people's data); a method without one is
  refused (deny by default), and ``@door_only`` (sessions, links, raw rows) is refused to
  everyone;
* **which project**: the project is found from the call's ``project_id``, ``sentence_id``,
  ``version_id`` or ``version`` argument; a lead may touch every project, anyone else only
  those they are a member of (:func:`gpsl.annotation.people.accounts.set_member`); the project list
  holds only those;
* **in whose name**: the arguments that credit a vote, a decision, a skip or a lease
  (a declaration's ``own``) must be the acting person's own name (None is read as it), so
  nobody can label as someone else or as a reserved name; imported labels are credited to
  the import (``import:<file>``) only;
* **blind mode**: someone who is not a lead, in a project in blind mode, sees only their own
  history, searches by text only and cannot list who voted;
* **the team's model**: the crowd model in a project's settings (every annotator's name and
  confusion matrix) is a lead's: a project read by anyone else comes without it;
* **an accepted suggestion**: a label written with ``source='accepted'`` must be what the
  active model suggests for that token in the person's own view (else it is their own label,
  and is refused as an accepted one);
* **nothing private**: the object keeps its store and caches out of reach (no ``_store``,
  no ``__dict__``): what a page holds is the checked methods and ``who``.

Refusals are :class:`~gpsl.annotation.store.store_errors.AccessDenied`, one line.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from gpsl.annotation.corpus import projects
from gpsl.annotation.labeling import team
from gpsl.annotation.people import accounts, auth
from gpsl.annotation.people.accounts import Identity
from gpsl.annotation.permissions import (
    BLIND_FILTERS,
    Accepted,
    Blind,
    Role,
    Rule,
    Shows,
    declaration,
    declared,
    door_only,
    requires,
    rule_of,
)
from gpsl.annotation.reports import Reports
from gpsl.annotation.store import validate
from gpsl.annotation.store.store_errors import AccessDenied, InputError

#: what an :class:`ActingStore` or :class:`ActingReports` keeps out of a page's reach: the
#: unrestricted store, the caches (per object, weakly: it goes with the object)
_PRIVATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _private(obj) -> SimpleNamespace:
    return _PRIVATE[obj]


def _without_crowd(item):
    """A project (a dict or a :class:`~gpsl.annotation.store.records.Project`) without the crowd
    model of its settings, or the team settings dict without it."""
    if item is None:
        return None
    if isinstance(item, list):
        return [_without_crowd(x) for x in item]
    if isinstance(item, dict) and "settings" not in item:  # team settings
        return {**item, "crowd": None} if "crowd" in item else item
    if not isinstance(item, dict) and not hasattr(item, "settings"):
        return item  # a record without settings (the team settings' record has no model)
    settings = item["settings"] if isinstance(item, dict) else item.settings
    if not settings or "crowd" not in settings:
        return item
    kept = {k: v for k, v in settings.items() if k != "crowd"}
    if isinstance(item, dict):
        return {**item, "settings": kept}
    return dataclasses.replace(item, settings=kept)


def _own_progress(progress, name: str):
    """A progress (a dict or a :class:`~gpsl.annotation.store.records.Progress`) as a blind
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

    def _check_accepted(self, rule: Rule, a: dict) -> None:
        """``source='accepted'``: every label is the active model's suggestion for its token
        in this person's view of the sentence (:meth:`Reports.sentence`)."""
        if rule.accepted is None or a.get("source", "human") != "accepted":
            return
        steps = ([a.get("labels") or {}] if rule.accepted is Accepted.MAPPING else
                 [{a.get("token_index"): a.get("label")}] if rule.accepted is Accepted.ONE
                 else list(a.get("steps") or []))
        view = Reports(_private(self).store.home).sentence(a["sentence_id"], self.who.name)
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

    def check(self, name: str, fn: Callable, args: tuple, kwargs: dict
              ) -> inspect.BoundArguments:
        """Refuse (:class:`AccessDenied`) unless this identity may make the call of ``fn``
        (the store's or a report's method ``name``) by its declaration
        (:mod:`.permissions`; none, or :func:`~.permissions.door_only`: refused); returns
        the bound arguments, with the acting name filled in where the declaration names it."""
        rule = declaration(fn)
        if name.startswith("_") or rule is None or rule.role is None:
            raise AccessDenied(f"{name} is not available here")
        who = self.who
        if rule.role is Role.LEAD and not who.is_lead:
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
        for arg in (rule.own, None if who.is_lead else rule.own_unless_lead):
            if arg is None or arg not in a:
                continue
            if a[arg] is None:
                a[arg] = who.name
            elif " ".join(str(a[arg]).split()) != who.name:
                raise AccessDenied(f"{name.replace('_', ' ')}: only in your own name "
                                   f"({who.name!r}), not {str(a[arg])[:60]!r}")
        credit = rule.import_credit and a.get(rule.import_credit,
                                              extra.get(rule.import_credit))
        if credit is not None and not validate.is_import(str(credit)):
            raise AccessDenied("imported labels are credited to the import "
                               "(import:<file name>), never to a person")
        if rule.by is not None:  # e.g. the run's line names who started it, never a choice
            a[rule.by] = who.name
        if rule.project_decides is not None and not who.is_lead and \
                a.get(rule.project_decides) is not None:
            raise AccessDenied("the project's blind mode decides what you see")
        pid = self._project(a, look_up=not who.is_lead)
        self._check_accepted(rule, a)
        if who.is_lead:
            return bound
        if pid is not None and not self.is_member(pid):
            raise AccessDenied(f"you are not a member of project {pid}: ask a lead to add you")
        if (rule.blind or rule.blind_own) and self._blind(pid):
            if rule.blind is Blind.REFUSED or (rule.blind is Blind.TEXT_ONLY and any(
                    extra.get(k) for k in BLIND_FILTERS)):
                raise AccessDenied("blind annotation: search by text only")
            if rule.blind_own is not None and a.get(rule.blind_own) != who.name:
                a[rule.blind_own] = who.name  # e.g. a report's own filter: their changes
        return bound

    def redact(self, rule: Rule, result, bound: inspect.BoundArguments | None = None):
        """What a non-lead gets of a call's ``result`` by its declaration's ``shows``: only
        their projects, no project's crowd model (every annotator's name and confusion
        matrix), and in blind mode a progress without other people's names and labels."""
        if self.who.is_lead or rule.shows is None:
            return result
        if rule.shows is Shows.OWN_PROGRESS and self._blind(self._project(bound.arguments)):
            result = _own_progress(result, self.who.name)
        if rule.shows is Shows.MEMBER_PROJECTS:
            result = [p for p in result
                      if self.is_member(p["id"] if isinstance(p, dict) else p.id)]
        if rule.shows in (Shows.MEMBER_PROJECTS, Shows.NO_CROWD):
            result = _without_crowd(result)
        return result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AccessDenied(f"{name} is not available here")
        target = getattr(_private(self).store, name)  # AttributeError for what it lacks
        if not callable(target):
            raise AccessDenied(f"{name} is not available here")
        return _checked(self, target, name)

    # -- the person's own session -------------------------------------------------------
    def end_own_sessions(self) -> int:
        """Sign this person out everywhere (every session of their account)."""
        if self.who.account_id is None:
            return 0
        return auth.end_sessions(_private(self).store.db, self.who.account_id)


class ActingReports:
    """:class:`~gpsl.annotation.reports.Reports` for one identity: every report checked by
    its declaration, as :class:`ActingStore` checks the store's methods."""

    __slots__ = ("__weakref__",)

    def __init__(self, acting: ActingStore):
        _PRIVATE[self] = SimpleNamespace(acting=acting,
                                         reports=Reports(_private(acting).store.home))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AccessDenied(f"{name} is not available here")
        acting, reports = _private(self).acting, _private(self).reports
        target = getattr(reports, name)
        return _checked(acting, target, name)


def _checked(acting: ActingStore, target: Callable, name: str) -> Callable:
    """``target`` (the method ``name`` of the store or of its reports, bound) checked on
    every call by its declaration for ``acting``'s identity."""
    def call(*args, **kwargs):
        bound = acting.check(name, target, args, kwargs)
        return acting.redact(declaration(target), target(*bound.args, **bound.kwargs), bound)

    call.__name__ = name
    return call


__all__ = ["Accepted", "ActingReports", "ActingStore", "Blind", "Role", "Shows", "declaration",
           "declared", "door_only", "requires", "resolve", "rule_of"]
