"""A crowd folder uploaded as files or one ``.zip``, read safely (the app's crowd upload).

The layout is :mod:`gpsl.io.crowd_raw`'s (``SPLIT/ground_truth/DOC.txt``,
``SPLIT/mturk_train_data/WORKER/DOC.txt``). :func:`read_upload` writes the files of a folder
upload (``(path, bytes)`` pairs, the paths as the browser gives them,
``val/ground_truth/DOC.txt``) or one ``.zip`` of the folder into a private temporary folder
(paths checked: relative, no ``..``, no link, the app's upload limit on their total size,
zip members counted and sized before they are read) and reads it there with
:func:`~gpsl.io.crowd_raw.read_crowd_folder`; every bad file is one line naming its path
inside the upload. What the store makes of it (worker names as people, the label set, the
import) is :mod:`gpsl.annotation.interchange.crowd_folders`'.
"""

from __future__ import annotations

import io
import stat
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from gpsl import limits
from gpsl.errors import InputError
from gpsl.io.crowd import CrowdSentence
from gpsl.io.crowd_raw import GOLD_DIR, AlignmentReport, CrowdFolderError, read_crowd_folder

__all__ = ["MAX_DEPTH", "MAX_FILES", "MAX_NAME_BYTES", "UploadedFolder", "read_upload"]

#: the most files of an upload (a folder's files, or a zip's members)
MAX_FILES = 50_000


class UploadedFolder(NamedTuple):
    """A crowd folder read from an upload: the split folder's ``name``, its gold sentences
    with the workers' aligned votes (``id`` ``DOC:k``) and the alignment report."""

    name: str
    sentences: list[CrowdSentence]
    report: AlignmentReport


#: the deepest path and the longest name (bytes, the file systems' limit) of an upload
MAX_DEPTH = 16
MAX_NAME_BYTES = 255


def _relative(name: str, source: str) -> PurePosixPath | None:
    """An upload's path as a safe relative path (None: a file to skip, e.g. macOS's
    ``__MACOSX/`` or ``.DS_Store``); InputError for an absolute path or one with ``..``."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise InputError(f"bad file name {name!r}", source=source)
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if name.startswith(("/", "\\")) or (parts and parts[0].endswith(":")) or ".." in parts:
        raise InputError("a path outside the folder (absolute or with ..)",
                         source=f"{source}: {name}" if source != name else source)
    if not parts or any(p.startswith(".") or p == "__MACOSX" for p in parts):
        return None
    where = f"{source}: {name[:80]}{'…' if len(name) > 80 else ''}"
    if len(parts) > MAX_DEPTH:
        raise InputError(f"a path {len(parts):,} folders deep (a crowd folder is SPLIT/"
                         f"mturk_train_data/WORKER/DOC.txt; at most {MAX_DEPTH})", source=where)
    long = next((p for p in parts if len(p.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES),
                None)
    if long is not None:
        raise InputError(f"a file or worker name of {len(long.encode('utf-8', 'replace')):,} "
                         f"bytes (at most {MAX_NAME_BYTES})", source=where)
    return PurePosixPath(*parts)


def _write(root: Path, rel: PurePosixPath, data: bytes, source: str) -> None:
    path = root.joinpath(*rel.parts)
    if path.exists():
        raise InputError("the same file twice in the upload", source=str(rel))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise InputError("a file and a folder of the same name", source=str(rel)) from None
    except OSError as exc:
        raise InputError(f"cannot write the upload: {exc.strerror or exc}",
                         source=source) from None


def _unzip(data: bytes, source: str, root: Path, cap: int | None) -> None:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError) as exc:
        raise InputError(f"not a zip file ({exc})", source=source) from None
    with zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        if len(members) > MAX_FILES:
            raise InputError(f"{len(members):,} files (the limit is {MAX_FILES:,})",
                             source=source)
        total = 0
        for m in members:
            if stat.S_ISLNK(m.external_attr >> 16):
                raise InputError(f"{m.filename}: a symbolic link (not read)", source=source)
            rel = _relative(m.filename, source)
            if rel is None:
                continue
            total += m.file_size
            if cap is not None and total > cap:
                raise InputError(f"more than {cap >> 20} MB unpacked (the upload limit, "
                                 f"{limits.ENV_MAX_UPLOAD_MB})", source=source)
            try:
                with zf.open(m) as fh:
                    body = fh.read(m.file_size + 1)
            except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError,
                    EOFError, ValueError) as exc:
                raise InputError(f"{m.filename}: cannot unpack ({exc})",
                                 source=source) from None
            if len(body) != m.file_size:
                raise InputError(f"{m.filename}: its size differs from the zip's directory",
                                 source=source)
            _write(root, rel, body, source)


def _split_dir(root: Path, source: str) -> Path:
    """The folder holding ``ground_truth/`` (exactly one in the upload)."""
    found = sorted(p.parent for p in root.rglob(GOLD_DIR) if p.is_dir())
    if not found:
        raise InputError(f"no {GOLD_DIR}/ folder (expected SPLIT/{GOLD_DIR}/DOC.txt and "
                         "SPLIT/mturk_train_data/WORKER/DOC.txt)", source=source)
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(root)) or "." for p in found[:4])
        raise InputError(f"several crowd folders ({names}): upload one", source=source)
    return found[0]


def _relabel(exc: InputError, root: Path, source: str) -> InputError:
    """The error with the temporary folder taken out of its file names."""
    prefix = str(root) + "/"

    def rel(s):
        return None if s is None else (s[len(prefix):] if s.startswith(prefix) else
                                       (source if s == str(root) else s))

    if isinstance(exc, CrowdFolderError):
        return CrowdFolderError([InputError(p.message.replace(prefix, ""), rel(p.source),
                                            p.line) for p in exc.problems])
    return InputError(exc.message.replace(prefix, ""), rel(exc.source), exc.line)


def read_upload(files: Sequence[tuple[str, bytes]], source: str | None = None
                ) -> UploadedFolder:
    """The crowd folder of an upload: the files of a folder (``(path, bytes)``) or a single
    ``.zip`` of it, written into a private temporary folder and read there by
    :func:`~gpsl.io.crowd_raw.read_crowd_folder` (every sentence kept, voted or not).
    :class:`~gpsl.io.crowd_raw.CrowdFolderError` lists every bad file (one line each, the
    path inside the upload), InputError a problem with the upload itself."""
    files = list(files)
    if not files:
        raise InputError("no files", source=source or "<upload>")
    cap = limits.max_upload_bytes()
    zipped = len(files) == 1 and files[0][0].lower().endswith(".zip")
    source = source or (files[0][0] if zipped else
                        (str(files[0][0]).replace("\\", "/").split("/")[0] or "<upload>"))
    if not zipped:
        if len(files) > MAX_FILES:
            raise InputError(f"{len(files):,} files (the limit is {MAX_FILES:,})",
                             source=source)
        total = sum(len(data) for _, data in files)
        if cap is not None and total > cap:
            raise InputError(f"{total >> 20} MB in all (the upload limit is {cap >> 20} MB, "
                             f"{limits.ENV_MAX_UPLOAD_MB})", source=source)
    else:
        limits.check_upload_size(len(files[0][1]), cap, source)
    with tempfile.TemporaryDirectory(prefix="gpsl-crowd-") as tmp:
        root = Path(tmp)
        try:
            if zipped:
                _unzip(files[0][1], source, root, cap)
            else:
                for name, data in files:
                    rel = _relative(name, source)
                    if rel is not None:
                        _write(root, rel, bytes(data), source)
            split = _split_dir(root, source)
            sentences, report = read_crowd_folder(split, keep_unvoted=True)
        except InputError as exc:
            raise _relabel(exc, root, source) from None
    return UploadedFolder(split.name, sentences, report)
