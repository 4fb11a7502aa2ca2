"""The constraints a parameter's value must meet, in the spirit of scikit-learn's
``Interval`` and ``StrOptions``, and :class:`Param`, one row of the table of
:mod:`gpsl.params` (which holds every parameter's constraints, default and help).

A :class:`Constraint` says whether a value has its form (``accepts``), gives the form the code
uses (``canonical``), reads it from a string a person typed (``from_text``) and names it for an
error line (``describe``); a :class:`Param` accepts a value that meets any one of its
constraints and refuses anything else with one line naming the parameter.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import numpy as np

from gpsl.errors import InputError

__all__ = ["Constraint", "Interval", "Options", "Boolean", "NoneValue", "InstanceOf",
           "Anything", "Offsets", "Param"]


class Constraint:
    """One acceptable form of a value. ``accepts`` says whether ``value`` has it,
    ``canonical`` gives the form the code uses, ``from_text`` reads it from a command-line or
    text-field string (``ValueError`` when the text does not have this form) and
    ``describe`` names it for an error line."""

    def accepts(self, value) -> bool:
        raise NotImplementedError

    def canonical(self, value):
        return value

    def from_text(self, text: str):
        raise ValueError(text)

    def describe(self) -> str:
        raise NotImplementedError

    def reason(self, value) -> str | None:
        """A specific one-line reason why ``value`` is refused (``None``: the description
        says it)."""
        return None


def _is_int(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _num(x) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) >= 1e5:
        return f"{x:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10_000 else f"{x:g}"


@dataclass(frozen=True)
class Interval(Constraint):
    """A finite number of ``kind`` (``int`` or ``float``) between ``left`` and ``right``;
    ``closed`` says which ends belong to it (``"both"``, ``"left"``, ``"right"``,
    ``"neither"``). A float interval takes ints too; never a bool, NaN or an infinity."""

    kind: type
    left: float
    right: float
    closed: str = "both"

    def accepts(self, value) -> bool:
        if self.kind is int:
            if not _is_int(value):
                return False
        elif not _is_real(value) or not math.isfinite(float(value)):
            return False
        v = value
        lo_ok = v >= self.left if self.closed in ("both", "left") else v > self.left
        hi_ok = v <= self.right if self.closed in ("both", "right") else v < self.right
        return bool(lo_ok and hi_ok)

    def canonical(self, value):
        return int(value) if self.kind is int else float(value)

    def from_text(self, text: str):
        t = text.strip()
        return int(t) if self.kind is int else float(t)

    def describe(self) -> str:
        if self.kind is int and self.left == 1 and self.closed in ("both", "left"):
            return f"a positive integer up to {_num(self.right)}"
        what = "an integer" if self.kind is int else "a number"
        lo = "[" if self.closed in ("both", "left") else "("
        hi = "]" if self.closed in ("both", "right") else ")"
        return f"{what} in {lo}{_num(self.left)}, {_num(self.right)}{hi}"


@dataclass(frozen=True)
class Options(Constraint):
    """One of the strings ``options`` (scikit-learn's ``StrOptions``); ``aliases`` map other
    accepted names to one of them, ``ignore_case`` accepts any case; ``labels`` are the
    options' names for people (widgets)."""

    options: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    ignore_case: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)

    def _key(self, value):
        if not isinstance(value, str):
            return None
        v = value.strip().lower() if self.ignore_case else value
        v = self.aliases.get(v, v)
        return v if v in self.options else None

    def accepts(self, value) -> bool:
        return self._key(value) is not None

    def canonical(self, value):
        return self._key(value)

    def from_text(self, text: str):
        if self._key(text) is None:
            raise ValueError(text)
        return text

    def describe(self) -> str:
        quoted = [repr(o) for o in self.options]
        if len(quoted) <= 2:
            return " or ".join(quoted)
        return f"one of {', '.join(quoted[:-1])} or {quoted[-1]}"

    def label(self, option: str) -> str:
        return self.labels.get(option, option)


@dataclass(frozen=True)
class Boolean(Constraint):
    """``True`` or ``False`` (numpy's bools too)."""

    _TEXT = {"true": True, "yes": True, "on": True, "1": True,
             "false": False, "no": False, "off": False, "0": False}

    def accepts(self, value) -> bool:
        return isinstance(value, bool | np.bool_)

    def canonical(self, value):
        return bool(value)

    def from_text(self, text: str):
        return self._TEXT[text.strip().lower()]

    def describe(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class NoneValue(Constraint):
    """``None``; what it stands for is said in the parameter's help."""

    def accepts(self, value) -> bool:
        return value is None

    def describe(self) -> str:
        return "None"


@dataclass(frozen=True)
class InstanceOf(Constraint):
    """An instance of a type named ``"module:Class"`` (imported when first needed, so the
    table imports nothing heavy), or of ``str``."""

    type_name: str
    what: str

    def accepts(self, value) -> bool:
        if self.type_name == "str":
            return isinstance(value, str)
        if self.type_name == "callable":
            return callable(value)
        module, _, name = self.type_name.partition(":")
        return isinstance(value, getattr(importlib.import_module(module), name))

    def from_text(self, text: str):
        if self.type_name != "str":
            raise ValueError(text)
        return text

    def describe(self) -> str:
        return self.what


#: the Dask protocols a scheduler address may name (``inproc://`` lives in one process only,
#: ``file://`` and the like are no scheduler)
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss")


def address_problem(text: str) -> str | None:
    """Why ``text`` is no Dask scheduler address ``tcp://HOST:PORT`` (None: it is one),
    checked before anything connects (a bad address made Dask try for 20 s)."""
    from urllib.parse import urlsplit

    shown = text if len(text) <= 60 else text[:60] + "…"
    scheme, sep, _ = text.partition("://")
    if not sep or scheme.lower() not in SCHEDULER_SCHEMES:
        return (f"{shown!r} is not a scheduler address: use "
                f"{'/'.join(SCHEDULER_SCHEMES)}://HOST:PORT, e.g. tcp://127.0.0.1:8786")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"{shown!r} is not a scheduler address: {exc}"
    if not parts.hostname or port is None or parts.path not in ("", "/") or parts.query \
            or parts.username or parts.password:
        return f"{shown!r} is not a scheduler address: it needs a host and a port, nothing else"
    return None


@dataclass(frozen=True)
class Anything(Constraint):
    """Any value but a bool or a number; its reader checks it further (a Dask client or a
    scheduler address: :func:`gpsl.distributed.connect`); a string must be a scheduler
    address (:func:`address_problem`)."""

    what: str

    def accepts(self, value) -> bool:
        if isinstance(value, str):
            return address_problem(value) is None
        return value is not None and not isinstance(value, bool | Real)

    def reason(self, value) -> str | None:
        return address_problem(value) if isinstance(value, str) else None

    def from_text(self, text: str):
        if not text.strip():
            raise ValueError(text)
        return text.strip()

    def describe(self) -> str:
        return self.what


@dataclass(frozen=True)
class Offsets(Constraint):
    """A dependency set: a name of ``presets``, text like ``"-1,1"`` or a sequence of
    integers; non-zero (0 is the token itself), distinct, at most ``max_offset`` tokens away,
    at most ``max_count`` of them. Text must name at least one offset (``""`` and ``"-1,,1"``
    are refused); a sequence may be empty (no dependencies)."""

    presets: Mapping[str, tuple[int, ...]]
    max_offset: int
    max_count: int

    def _parse(self, value) -> tuple[int, ...]:
        """The offsets of ``value``, or ``ValueError(one-line reason)``."""
        if isinstance(value, str):
            key = value.strip().upper()
            if key in self.presets:
                return tuple(self.presets[key])
            if not key:
                raise ValueError("give at least one dependency offset, e.g. -1,1")
            parts = value.replace(" ", "").split(",")
            if len(parts) > self.max_count:
                raise ValueError(f"{len(parts)} dependency offsets; at most {self.max_count}")
            try:
                if "" in parts:
                    raise ValueError
                value = [int(p) for p in parts]
            except ValueError:
                raise ValueError(f"bad offsets {_short(value)}: expected integers like "
                                 "-1,1") from None
        try:
            items = list(value)
        except TypeError:
            raise ValueError(f"bad offsets {_short(value)}") from None
        if len(items) > self.max_count:
            raise ValueError(f"{len(items)} dependency offsets; at most {self.max_count}")
        out: list[int] = []
        for o in items:
            if isinstance(o, str):
                try:
                    o = int(o)
                except ValueError:
                    raise ValueError(f"bad offsets {_short(value)}") from None
            integral = _is_int(o) or (_is_real(o) and math.isfinite(o)
                                      and float(o).is_integer())
            if not integral:
                raise ValueError(f"bad offsets {_short(value)}")
            out.append(int(o))
        if any(o == 0 for o in out):
            raise ValueError("dependency offsets must be non-zero (0 is the token itself)")
        far = [o for o in out if abs(o) > self.max_offset]
        if far:
            raise ValueError(f"dependency offset {_short(far[0])} is too far: at most "
                             f"{self.max_offset} tokens either side")
        if len(set(out)) != len(out):
            raise ValueError(f"duplicate dependency offsets in {out}")
        return tuple(out)

    def accepts(self, value) -> bool:
        try:
            self._parse(value)
        except ValueError:
            return False
        return True

    def canonical(self, value):
        return self._parse(value)

    def from_text(self, text: str):
        return self._parse(text)

    def reason(self, value) -> str | None:
        try:
            self._parse(value)
        except ValueError as exc:
            return str(exc)
        return None

    def describe(self) -> str:
        return (f"{', '.join(self.presets)} or distinct non-zero integers like -1,1 (at most "
                f"{self.max_offset} either side)")


def _short(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class Param:
    """One parameter: ``constraints`` (the value meets one of them), the library's
    ``default``, ``help`` (one line), ``doc`` (the reason behind the default), ``flags``
    (command-line option strings; ``()``: not an option), ``label`` (a widget's title),
    ``group`` (``"estimator"``: a :class:`gpsl.model.GPSL` parameter; ``"crowd"``: the crowd
    model's; ``"app"``: a training run's in the app; ``"command"``: a command-line option),
    ``persisted`` (recorded in a saved model's configuration)."""

    name: str
    default: Any
    constraints: tuple[Constraint, ...]
    help: str
    doc: str = ""
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    label: str = ""
    group: str = "estimator"
    persisted: bool = True

    def accepts(self, value) -> bool:
        return any(c.accepts(value) for c in self.constraints)

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.constraints)

    def check(self, value, source: str | None = None):
        """``value`` in its canonical form, or a one-line :class:`InputError`."""
        for c in self.constraints:
            if c.accepts(value):
                return c.canonical(value)
        reasons = [r for r in (c.reason(value) for c in self.constraints) if r]
        if reasons:
            raise InputError(reasons[0], source=source or self.name)
        raise InputError(f"{self.name} must be {self.describe()}, not {_short(value)}",
                         source=source)

    def from_text(self, text: str):
        """The value of a command-line or text-field string (canonical), or a one-line
        :class:`InputError` ``expected ..., got '...'``."""
        for c in self.constraints:
            try:
                value = c.from_text(text)
            except (ValueError, KeyError, OverflowError) as exc:
                if c.reason(text) is not None:
                    raise InputError(str(exc), source=self.name) from None
                continue
            if c.accepts(value):
                return c.canonical(value)
        typed = " or ".join(c.describe() for c in self.constraints
                            if not isinstance(c, NoneValue))
        raise InputError(f"expected {typed}, got {_short(text)}")

    @property
    def options(self) -> tuple[str, ...]:
        """The options of an :class:`Options` parameter (widgets' choices)."""
        return next((c.options for c in self.constraints if isinstance(c, Options)), ())

    def option_label(self, option: str) -> str:
        c = next((c for c in self.constraints if isinstance(c, Options)), None)
        return option if c is None else c.label(option)

    @property
    def interval(self) -> Interval | None:
        """The :class:`Interval` of a numeric parameter (widgets' bounds)."""
        return next((c for c in self.constraints if isinstance(c, Interval)), None)
