"""What a test run wrote into the checkout (no test may; ``conftest.py`` checks every run).

:func:`snapshot` records every file of the checkout with its size and modification time,
except the tool caches and the virtual environment listed in :data:`SKIP_DIRS` (Python's
bytecode, pytest's and ruff's caches: written by the tools, not by a test);
:func:`changes` lists the files created, modified or deleted between two snapshots.
"""

from __future__ import annotations

import os
from pathlib import Path

#: directories not looked into: version control, virtual environments, tool caches
SKIP_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache",
                       "node_modules"})


def _skipped(name: str) -> bool:
    return name in SKIP_DIRS or name.endswith(".egg-info")


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``root`` (symbolic links
    included as links, never followed)."""
    files: dict[str, tuple[int, int]] = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # removed while we walked
                continue
            files[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return files


def changes(before: dict, after: dict) -> list[str]:
    """``"created PATH"``, ``"modified PATH"`` and ``"deleted PATH"`` lines, sorted by path."""
    out = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            out.append(f"created {path}")
        elif path not in after:
            out.append(f"deleted {path}")
        elif before[path] != after[path]:
            out.append(f"modified {path}")
    return out
