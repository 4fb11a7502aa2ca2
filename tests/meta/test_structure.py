"""The shape of the code: imports run one way, the pages see only the facade, modules stay small.

The import graph is read from the source (``ast``: every ``import`` and ``from ... import``,
in functions too) of ``gpsl/``, ``pages/`` and ``app.py``; ``from P import name`` is an import
of ``P.name`` when that is a module, else of ``P``.  A submodule's implicit import of its parent
package is not an edge (as import-linter counts it).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600

# The layers of gpsl/annotation, bottom first: its sub-packages, then the modules
# above them. A module imports its own sub-package or lower layers only; the
# sub-packages of one layer do not import each other (no cycle within a package).
LAYERS = {
    "store": {"store"},
    "corpus and people": {"corpus", "people"},
    "labeling": {"labeling"},
    "training and interchange": {"interchange", "training"},
    "permissions": {"permissions"},
    "services": {"reports"},
    "facade": {"__init__", "access", "facade", "facade_team"},
    "entry": {"setup", "worker"},
}
SUBPACKAGES = {p.parent.name for p in (ROOT / "gpsl" / "annotation").glob("*/__init__.py")}
#: the rules' modules: pure, no database, no store
PURE_MODULES = {"gpsl.annotation.labeling.rules",
                "gpsl.annotation.training.evaluation",
                "gpsl.annotation.training.joint_labels",
                "gpsl.annotation.training.pool"}
#: what the rules may import of the back end: values, nothing that reads or writes
PURE_ALLOWED = {"gpsl.annotation.store.records"}
#: imports inside functions that gpsl/annotation and pages/ may make: optional dependencies
#: only a runner that uses them needs (Dask, for GPSL_DASK_SCHEDULER), and pandas, which the
#: reports import on first use so that the training worker (which never draws a table) starts
#: without it (0.35 CPU s of its start-up, docs/speed.md)
LAZY_ALLOWED = {"distributed", "pandas"}
#: what pages/ and app.py may import besides the standard library and each other
PAGE_ALLOWED = {"gpsl.annotation", "streamlit", "pandas", "plotly"}

# Modules over MAX_LINES that this wave leaves to their owners, to be split and then removed
# from this list (the lead empties it); an entry that is no longer over the limit fails too.
TOO_LONG: dict[str, str] = {}
# Import loops this wave leaves to their owners (the lead empties this too; a loop that is
# gone fails until its entry is removed).
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of gpsl/, pages/ and app.py."""
    out = {"app": ROOT / "app.py"}
    for top in ("gpsl", "pages"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """``(imported module, inside a function)`` of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, bool]] = []

    def visit(node, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for a in child.names:
                    full = f"{base}.{a.name}"
                    out.append((full if full in MODULES else base, inner))
            visit(child, inner)

    visit(tree, False)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def _unit(module: str) -> str | None:
    """The sub-package of gpsl/annotation a module is in, or the top-level module itself
    (``__init__`` for the package); None outside gpsl/annotation."""
    if module != "gpsl.annotation" and not module.startswith("gpsl.annotation."):
        return None
    parts = module.split(".")[2:]
    return parts[0] if parts else "__init__"


def _layer(module: str) -> int | None:
    unit = _unit(module)
    if unit is None:
        return None
    for k, members in enumerate(LAYERS.values()):
        if unit in members:
            return k
    raise AssertionError(f"{module} is in no layer of LAYERS: add it (or its sub-package) where "
                         "it belongs")


def test_the_import_graph_has_no_cycle():
    """No loop of imports, those made inside functions included (a lazy import hides a
    loop from the interpreter, not from the reader)."""
    internal = {name: {m for m, _ in imps if m in MODULES and m != name}
                for name, imps in GRAPH.items()}
    found = {frozenset(c) for c in _cycles(internal)}
    assert not found - set(KNOWN_CYCLES), sorted(sorted(c) for c in found - set(KNOWN_CYCLES))
    stale = [sorted(c) for c in set(KNOWN_CYCLES) - found]
    assert not stale, f"no longer a loop: remove {stale} from KNOWN_CYCLES"


def test_the_annotation_back_end_imports_run_down_its_layers():
    """A module imports its own sub-package or lower layers; two sub-packages of one layer
    never import each other (an upward or sideways import fails, naming both modules)."""
    names = list(LAYERS)
    for name, imps in GRAPH.items():
        here = _layer(name)
        if here is None:
            continue
        for module, _ in imps:
            there = _layer(module)
            if there is None or module == name:
                continue
            assert there <= here, (f"{name} ({names[here]}) imports {module} "
                                   f"({names[there]}): imports run down the layers")
            if there == here and _unit(module) != _unit(name):
                assert not {_unit(module), _unit(name)} & SUBPACKAGES, (
                    f"{name} imports {module}: sub-packages of one layer do not import each other")
            if name in PURE_MODULES:
                assert module in PURE_ALLOWED, f"the rule module {name} imports {module}"
        if name in PURE_MODULES:
            assert not any(m.split(".")[0] == "sqlalchemy" for m, _ in imps), name


def test_every_back_end_module_is_in_a_sub_package_or_above_them():
    """gpsl/annotation/ holds the sub-packages and, above them, the facade and the entries."""
    for name in MODULES:
        if _unit(name) is not None:
            _layer(name)  # fails for a module in no layer
    assert SUBPACKAGES <= set().union(*LAYERS.values()), "a sub-package in no layer of LAYERS"
    low = [k for k, members in enumerate(LAYERS.values()) if members & SUBPACKAGES]
    high = [k for k, members in enumerate(LAYERS.values()) if members - SUBPACKAGES]
    assert max(low) < min(high), "the sub-packages are the bottom layers, the modules above"


def test_no_import_inside_a_function_but_optional_dependencies():
    for name, imps in GRAPH.items():
        if not name.startswith(("gpsl.annotation", "pages", "app")):
            continue
        lazy = {m for m, nested in imps if nested}
        assert {m.split(".")[0] for m in lazy} <= LAZY_ALLOWED, (name, sorted(lazy))


def test_the_pages_see_only_the_facade():
    """pages/ and app.py import ``gpsl.annotation`` (the facade, its records, errors and
    helpers), Streamlit, pandas, plotly, the standard library and each other: no back-end
    module, no other gpsl module, no database library, no numerics."""
    for name, imps in GRAPH.items():
        if not (name == "app" or name.startswith("pages")):
            continue
        for module, _ in imps:
            top = module.split(".")[0]
            if (top == "pages" and module in MODULES) or module in PAGE_ALLOWED or \
                    top in ("streamlit", "plotly") or top in sys.stdlib_module_names:
                continue
            pytest.fail(f"{name} imports {module}: the pages see only gpsl.annotation")


def test_the_library_imports_no_streamlit_and_no_page():
    for name, imps in GRAPH.items():
        if name.startswith("gpsl"):
            bad = sorted(m for m, _ in imps if m.split(".")[0] in ("streamlit", "pages", "app"))
            assert not bad, (name, bad)


def test_no_module_is_over_600_lines():
    """gpsl/, pages/, app.py and bench/ (the benchmarks split by concept, e.g. bench/paper_*.py)."""
    long = {}
    for path in sorted([*MODULES.values(), *(ROOT / "bench").rglob("*.py")]):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            long[str(path.relative_to(ROOT))] = n
    unexpected = {p: n for p, n in long.items() if p not in TOO_LONG}
    assert not unexpected, f"modules over {MAX_LINES} lines: {unexpected}"
    stale = sorted(set(TOO_LONG) - set(long))
    assert not stale, f"no longer over {MAX_LINES} lines: remove {stale} from TOO_LONG"


def test_the_estimator_does_not_import_calibration():
    """Calibration has one owner (issue 41): :func:`gpsl.calibration.calibrate` wraps the
    estimator (the fold fits, the choice of calibrator) as scikit-learn's
    ``CalibratedClassifierCV`` does, and ``gpsl/model.py`` imports no module of
    ``gpsl.calibration``, at the top or inside a function."""
    bad = sorted({m for m, _ in GRAPH["gpsl.model"]
                  if m == "gpsl.calibration" or m.startswith("gpsl.calibration.")})
    assert not bad, f"gpsl.model imports {bad}: calibration belongs to the wrapper"


# ------------------------------------------------------------------ permission declarations


def _facade_classes():
    from gpsl.annotation import Store
    from gpsl.annotation.reports import Reports

    return Store, Reports


def test_every_public_facade_method_declares_its_permission():
    """Each public method of Store (its mixins included) and of its Reports carries one
    declaration of gpsl.annotation.permissions: an undecorated method fails here (and is
    refused to everyone through an acting store)."""
    from gpsl.annotation import permissions

    for cls in _facade_classes():
        rules = permissions.declared(cls)
        assert len(rules) > 20, cls
        missing = sorted(n for n, rule in rules.items() if rule is None)
        assert not missing, f"{cls.__name__}: no permission declared on {missing}"


def test_a_declaration_naming_a_missing_argument_fails_when_the_class_is_defined():
    """Renaming an argument a declaration names (the acting person's own name, the labels
    an accepted write carries, ...) stops the import instead of skipping the check."""
    from gpsl.annotation.permissions import Accepted, Blind, Role, door_only, requires

    with pytest.raises(TypeError, match="annotator"):
        class Renamed:  # noqa: F841 - the class statement is what fails
            @requires(Role.ANNOTATOR, own="annotator")
            def skip(self, sentence_id: int, annotator_name: str) -> None: ...
    bad = [
        ({"own_unless_lead": "annotator"}, lambda self, project_id, who=None: None),
        ({"by": "started_by"}, lambda self, project_id, config: None),
        ({"accepted": Accepted.STEPS}, lambda self, sentence_id, steps, annotator: None),
        ({"accepted": Accepted.ONE}, lambda self, sentence_id, token, label, source: None),
        ({"import_credit": "annotator"}, lambda self, project_id, items: None),
        ({"blind": Blind.TEXT_ONLY}, lambda self, project_id, text="": None),
        ({"blind_own": "only"}, lambda self, sentence_id, token_index: None),
        ({"project_decides": "blind"}, lambda self, sentence_id, annotator: None),
    ]
    for kw, fn in bad:
        with pytest.raises(TypeError, match="not an argument"):
            requires(Role.LEAD, **kw)(fn)
    # what they name, they may name: an import credit or a search filter through **kw
    assert requires(Role.LEAD, import_credit="annotator")(lambda self, pid, **kw: None)
    assert requires(Role.ANNOTATOR, blind=Blind.TEXT_ONLY)(lambda self, pid, **f: None)
    with pytest.raises(TypeError, match="one permission declaration"):
        door_only(requires(Role.LEAD)(lambda self: None))
    with pytest.raises(TypeError, match="Role"):
        requires("lead")


def _strings(node) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_the_acting_store_keeps_no_table_of_method_names():
    """gpsl/annotation/access.py enforces the declarations: no set, dict, list or tuple of
    the facade's method names, and no comparison of the called method's ``name`` with one
    (``name == "start_training"``, ``name in ("search", ...)``). (A dict key such as
    ``"crowd"`` may share a report's name: only a comparison with ``name`` counts.)"""
    from gpsl.annotation import access

    methods = set()
    for cls in _facade_classes():
        methods |= {n for n in dir(cls) if not n.startswith("_")}
    for old in ("MEMBER", "LEAD", "NEVER", "SELF", "SELF_IF_NOT_LEAD", "IMPORT_CREDIT",
                "MEMBER_REPORTS", "LEAD_REPORTS", "_PROJECT_READS", "_LABEL_WRITES"):
        assert not hasattr(access, old), old
    tree = ast.parse(Path(access.__file__).read_text(encoding="utf-8"))
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                isinstance(x, ast.Name) and x.id == "name"
                for x in (node.left, *node.comparators)):
            named += sorted(_strings(node) & methods)
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None \
                        and not isinstance(stmt.value, ast.Constant):
                    named += sorted(_strings(stmt.value) & methods)
    assert not named, f"access.py names facade methods: {named}"


def test_only_bench_peers_imports_the_peers():
    """The peers are written once: no bench module but bench/peers.py imports sklearn-crfsuite,
    python-crfsuite or crowd-kit (the others call bench.peers)."""
    peers = {"sklearn_crfsuite", "pycrfsuite", "crowdkit"}
    found = {}
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            hits = sorted({n.split(".")[0] for n in names} & peers)
            if hits:
                found.setdefault(str(path.relative_to(ROOT)), []).extend(hits)
    assert set(found) == {"bench/peers.py"}, found


#: the modules of gpsl/annotation that may import or hold the facade (``Store``): the facade,
#: the door over it, the package's names, and a process's main that opens a store (setup)
FACADE_USERS = {"facade", "facade_team", "access", "__init__", "setup"}


def _short(name: str) -> str:
    return name.removeprefix("gpsl.annotation").lstrip(".") or "__init__"


def test_no_back_end_module_but_the_facade_imports_it():
    """The services take the database or the store's ``owned.Home``, never the facade: no
    module below it imports ``gpsl.annotation.facade`` (or ``Store`` from the package)."""
    for name, path in MODULES.items():
        if not name.startswith("gpsl.annotation") or _short(name) in FACADE_USERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = {a.name for a in node.names}
                assert "facade" not in (node.module or "") and "facade" not in names and \
                    "Store" not in names, f"{name} imports the facade"
            elif isinstance(node, ast.Import):
                assert not any("facade" in a.name for a in node.names), name


def _facade_parameters(name: str, tree: ast.AST) -> list[str]:
    """``module.function(parameter: annotation)`` of every parameter named ``store`` or
    ``facade``, or annotated as a ``Store``, in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is None:
                continue
            note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            if arg.arg in ("store", "facade") or "Store" in note:
                found.append(f"{name}.{node.name}({arg.arg}: {note or '-'})")
    return found


def test_no_service_function_receives_the_facade():
    """No function or method of gpsl/annotation below the facade has a parameter named
    ``store`` (or ``facade``) or annotated as the ``Store``: what a service needs of the
    store is its database or its ``Home`` (the calls back up that the layer test cannot see
    are gone with it)."""
    found = []
    for name, path in MODULES.items():
        if name.startswith("gpsl.annotation") and _short(name) not in FACADE_USERS:
            found += _facade_parameters(name, ast.parse(path.read_text(encoding="utf-8")))
    assert not found, f"these receive the facade: {found}"


def test_the_parameter_check_sees_a_service_taking_the_store():
    source = ("def start(store, project_id):\n    return store.get_project(project_id)\n"
              "class R:\n    def __init__(self, s: 'Store'):\n        self.s = s\n"
              "def fine(db, home, *, models_root=None):\n    pass\n")
    assert _facade_parameters("m", ast.parse(source)) == [
        "m.start(store: -)", "m.__init__(s: 'Store')"]


def test_crowd_io_and_cli_import_no_private_name_of_another_module():
    """gpsl/io, gpsl/crowd and gpsl/cli import no ``_name`` of another module, and nothing
    imports one of gpsl/io's: a helper two modules share is public (issue 41)."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpsl")):
                continue
            owned = name.startswith(("gpsl.io", "gpsl.crowd", "gpsl.cli")) or \
                node.module.startswith("gpsl.io")
            bad += [f"{name}: {node.module}.{a.name}" for a in node.names
                    if owned and a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
