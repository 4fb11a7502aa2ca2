"""README.md and docs/ stay short and true: the README's length, every relative link and
anchor, the library snippet run as written, the command-line synopsis against the real
commands, CI against the README's test command, and every benchmark result cited with its
command by a docs page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import checkout as _checkout
from tests.support.limits import limit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250
FENCE = re.compile(r"^(```|~~~)(\w*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "sample_data" / "README.md"]


def code_blocks(text: str, language: str | None = None) -> list[str]:
    """The fenced code blocks of a Markdown text (of one language if given)."""
    return [m.group(3) for m in FENCE.finditer(text)
            if language is None or m.group(2) == language]


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links there are not links)."""
    text = FENCE.sub("", text)
    return re.sub(r"``.*?``|`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (GitHub numbers repeated ones)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for md in markdown_files():
        for target in LINK.findall(prose(md.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(ROOT)}: {target}"
            if not dest.is_relative_to(ROOT):
                broken.append(f"{where} (outside the checkout)")
            elif not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_checker_finds_a_broken_link_and_a_lost_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## The app\n", encoding="utf-8")
    assert anchors(tmp_path / "a.md") == {"title", "the-app"}
    text = "[ok](a.md#the-app) [lost](a.md#teams) `[code](nowhere.md)` [x](b.md)"
    assert LINK.findall(prose(text)) == ["a.md#the-app", "a.md#teams", "b.md"]
    assert slug("The annotation back end (`gpsl/annotation/`)") == \
        "the-annotation-back-end-gpslannotation"


def test_the_library_snippet_runs_as_written(tmp_path):
    """The README's Python block, unchanged, in a new directory beside the sample data (the
    snippet reads ``sample_data/`` as it would from the checkout); it writes only there."""
    (snippet,) = code_blocks(README.read_text(encoding="utf-8"), "python")
    (tmp_path / "snippet.py").write_text(snippet, encoding="utf-8")
    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data", target_is_directory=True)
    before = _checkout.snapshot(ROOT)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=limit(600))
    assert out.returncode == 0, out.stderr
    # the model goes to a temporary folder, never beside the snippet (the checkout)
    assert len(list(temp.glob("*/model/model.json"))) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample_data", "snippet.py", "temp"]
    assert _checkout.changes(before, _checkout.snapshot(ROOT)) == []


def test_the_command_line_synopsis_names_real_commands():
    blocks = [b for b in code_blocks(README.read_text(encoding="utf-8"))
              if "python -m gpsl " in b]
    assert len(blocks) == 1
    commands = {line.split()[3] for line in blocks[0].splitlines()
                if line.startswith("python -m gpsl ")}
    assert commands == {"train", "test", "eval", "query", "aggregate"}
    for command in sorted(commands):
        out = subprocess.run([sys.executable, "-m", "gpsl", command, "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=limit(60))
        assert out.returncode == 0 and "usage:" in out.stdout, (command, out.stderr)


def test_ci_runs_the_readmes_test_command():
    text = README.read_text(encoding="utf-8")
    assert "make test" in [b.strip() for b in code_blocks(text)]
    script = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
              if ln.strip() and not ln.lstrip().startswith("#")]
    assert script[-1] == "make test"


def result_files() -> list[Path]:
    folder = ROOT / "bench" / "results"
    return sorted(p for p in folder.rglob("*.md") if "tmp" not in p.relative_to(folder).parts)


def test_every_benchmark_result_is_cited_by_a_docs_page():
    """A result file in bench/results/ is named in docs/ (its file name, or its folder for a
    result in a folder of its own), and every `python -m bench.X` there exists."""
    docs = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    folder = ROOT / "bench" / "results"
    missing = []
    for path in result_files():
        rel = path.relative_to(folder)
        name = f"{rel.parent.as_posix()}/" if len(rel.parts) > 1 else rel.name
        if name not in docs:
            missing.append(str(rel))
    assert not missing, f"results no docs page cites: {missing}"
    modules = set(re.findall(r"python -m (bench\.[\w.]+)", docs))
    assert modules
    for module in modules:
        base = ROOT / Path(*module.split("."))
        assert base.with_suffix(".py").is_file() or (base / "__main__.py").is_file(), module


def test_the_benchmark_index_has_the_command_of_every_result():
    """Each row of the index names its result files and a `python -m bench...` command."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    assert rows
    for row in rows:
        assert "python -m bench." in row, row
