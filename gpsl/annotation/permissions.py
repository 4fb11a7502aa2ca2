"""Who may call a method of the facade, declared on the method itself.

Every public method of :class:`~gpsl.annotation.Store` and of its
:class:`~gpsl.annotation.reports.Reports` carries exactly one declaration (as doccano's
views carry their ``permission_classes``)::

    @requires(Role.ANNOTATOR, own="annotator")   # a member of the project, in their own name
    def set_labels(self, sentence_id, labels, annotator, source="human"): ...

    @requires(Role.LEAD)                          # a lead
    def delete_project(self, project_id): ...

    @door_only                                    # never through an acting store
    def start_session(self, account_id): ...

:class:`gpsl.annotation.access.ActingStore` reads the declaration of the method called
(:func:`declaration`) and enforces it; a method without one is refused to everyone (deny by
default), and ``tests/meta/test_structure.py`` fails on it.  A declaration that names an argument
the method does not have raises :class:`TypeError` when the method is defined (at import):
renaming an argument cannot silently drop a check.

This module is pure (the standard library only), so the facade's services (the reports) may
declare their methods too.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)

#: the search filters a blind annotator may not use (:attr:`Blind.TEXT_ONLY`): they would
#: show other people's labels and names
BLIND_FILTERS = ("label", "annotator", "status", "conflicts")
#: where a declaration is kept on a function (copied by :func:`functools.wraps`)
_ATTR = "__gpsl_permission__"


class Role(enum.Enum):
    """Who may call: :attr:`ANNOTATOR` anyone who is a member of the project the call
    touches (a lead is a member of every project), :attr:`LEAD` a project lead."""

    ANNOTATOR = "annotator"
    LEAD = "lead"


class Blind(enum.Enum):
    """What a project's blind mode does to a call of someone who is not a lead."""

    #: refused outright (who voted)
    REFUSED = "refused"
    #: search by text only: the filters :data:`BLIND_FILTERS` are refused
    TEXT_ONLY = "text only"


class Shows(enum.Enum):
    """What someone who is not a lead gets of a call's result."""

    #: of a list of projects only those they are a member of, without the crowd model
    MEMBER_PROJECTS = "member projects"
    #: a project (or the team settings) without the crowd model (every annotator's name and
    #: confusion matrix: the lead's)
    NO_CROWD = "no crowd"
    #: in blind mode a progress with only their own votes per person and no label counts
    OWN_PROGRESS = "own progress"


class Accepted(enum.Enum):
    """How a label write carries its labels, checked when ``source='accepted'``: each must
    be the active model's suggestion in the person's own view.  The value: the arguments."""

    #: ``labels``: one mapping token index -> label
    MAPPING = ("labels",)
    #: ``steps``: a sequence of such mappings
    STEPS = ("steps",)
    #: ``token_index`` and ``label``: one token
    ONE = ("token_index", "label")


@dataclasses.dataclass(frozen=True)
class Rule:
    """One method's declaration (see :func:`requires`); ``role`` None: :func:`door_only`."""

    role: Role | None
    own: str | None = None
    own_unless_lead: str | None = None
    by: str | None = None
    import_credit: str | None = None
    accepted: Accepted | None = None
    project_decides: str | None = None
    blind: Blind | None = None
    blind_own: str | None = None
    shows: Shows | None = None


def requires(role: Role, *, own: str | None = None, own_unless_lead: str | None = None,
             by: str | None = None, import_credit: str | None = None,
             accepted: Accepted | None = None, project_decides: str | None = None,
             blind: Blind | None = None, blind_own: str | None = None,
             shows: Shows | None = None) -> Callable[[F], F]:
    """Declare who may call the decorated method through an acting store.

    ``role``: :class:`Role`; the project is the one of the call's ``project_id``,
    ``sentence_id``, ``version_id`` or ``version`` argument.  The arguments named:

    * ``own``: must be the acting person's own name (None is read as it), for a lead too:
      nobody votes, decides, skips or holds a lease as someone else;
    * ``own_unless_lead``: the same for anyone who is not a lead;
    * ``by``: set to the acting person's name whatever the caller passed (who started it);
    * ``import_credit``: labels that come with a file are credited to the import
      (``import:<file>``), never to a person (the argument may come through ``**kw``);
    * ``accepted``: with ``source='accepted'`` the labels (:class:`Accepted`) must be the
      active model's suggestions in the person's view;
    * ``project_decides``: an argument only a lead may set: for anyone else the project's
      blind mode decides it;
    * ``blind``: what blind mode refuses (:class:`Blind`); ``blind_own``: an argument
      that blind mode sets to the acting person's name (their own changes only);
    * ``shows``: what a non-lead gets of the result (:class:`Shows`).

    Raises :class:`TypeError` when the method is defined if a named argument is not one of
    its arguments, or if the method already has a declaration."""
    if not isinstance(role, Role):
        raise TypeError(f"requires: role must be a Role, got {role!r}")
    rule = Rule(role, own, own_unless_lead, by, import_credit, accepted, project_decides,
                blind, blind_own, shows)

    def declare(fn: F) -> F:
        params = inspect.signature(fn).parameters
        free = any(p.kind is p.VAR_KEYWORD for p in params.values())
        named = [own, own_unless_lead, by, project_decides, blind_own,
                 *(accepted.value + ("source",) if accepted else ())]
        missing = [a for a in named if a is not None and a not in params]
        if import_credit is not None and import_credit not in params and not free:
            missing.append(import_credit)
        if blind is Blind.TEXT_ONLY and not free:
            missing.append("**filters")
        if missing:
            raise TypeError(f"{fn.__qualname__}: the permission names {', '.join(missing)}, "
                            f"not an argument of {fn.__name__}{inspect.signature(fn)}")
        return _declare(fn, rule)

    return declare


def door_only(fn: F) -> F:
    """Declare a method the door's own business (sessions, links, passwords, the store
    itself): refused to everyone through an acting store (a lead starting a session for
    another account would be that account)."""
    return _declare(fn, Rule(None))


def _declare(fn: F, rule: Rule) -> F:
    if not inspect.isfunction(fn):
        raise TypeError(f"a permission is declared on a function, not on {fn!r} (put "
                        "@staticmethod above it)")
    if _ATTR in vars(fn):
        raise TypeError(f"{fn.__qualname__}: one permission declaration per method")
    setattr(fn, _ATTR, rule)
    return fn


def declaration(fn) -> Rule | None:
    """The declaration of a function, a method (bound or not) or a static method; None
    without one."""
    fn = getattr(fn, "__func__", fn)  # a bound method, a staticmethod or classmethod
    return vars(fn).get(_ATTR) if inspect.isfunction(fn) else None


def rule_of(owner: type, name: str) -> Rule | None:
    """The declaration of ``owner``'s method ``name`` (inherited ones too; a static method's
    as well), None without one (a private name, a property, an undeclared method)."""
    if name.startswith("_"):
        return None
    try:
        return declaration(inspect.getattr_static(owner, name))
    except AttributeError:
        return None


def declared(owner: type) -> dict[str, Rule | None]:
    """Every public method of ``owner`` (inherited ones, static ones) and its declaration
    (None: none)."""
    names = {n for n in dir(owner) if not n.startswith("_")}
    out = {}
    for name in sorted(names):
        attr = inspect.getattr_static(owner, name)
        if inspect.isfunction(attr) or isinstance(attr, (staticmethod, classmethod)):
            out[name] = rule_of(owner, name)
    return out


__all__ = ["Accepted", "Blind", "Role", "Rule", "Shows", "declaration", "declared",
           "door_only", "requires", "rule_of"]
