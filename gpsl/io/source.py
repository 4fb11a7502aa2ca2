"""Where every reader's text comes from: a path, bytes or a file object, decoded with one
rule (BOM, the encoding, NUL and unpaired surrogates refused naming the line), and its lines.
"""

from __future__ import annotations

import codecs
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from gpsl.errors import InputError

Source = str | os.PathLike | bytes | bytearray | IO[str] | IO[bytes]

_BOM = "\ufeff"
SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------- decoding


def source_name(source: Any, name: str | None) -> str:
    """The name a message gives ``source``: ``name`` if given, else its path or file name."""
    if name is not None:
        return str(name)
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    if isinstance(source, (bytes, bytearray)):
        return "<input>"
    fname = getattr(source, "name", None)
    if isinstance(fname, str) and fname:
        return fname
    return "<input>"


def _line_of(data: bytes | str, offset: int) -> int:
    """1-based line number of ``offset`` (counting LF, CRLF and lone CR as line ends)."""
    head = data[:offset]
    if isinstance(head, str):
        head = head.replace("\r\n", "\n").replace("\r", "\n")
        return head.count("\n") + 1
    head = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return head.count(b"\n") + 1


def _codec(encoding: str, name: str) -> codecs.CodecInfo:
    """The codec of ``encoding``; an unknown or non-text encoding is an InputError."""
    try:
        codec = codecs.lookup(encoding)
    except (LookupError, TypeError, ValueError):
        raise InputError(f"unknown encoding {encoding!r}", source=name) from None
    if not getattr(codec, "_is_text_encoding", True):
        raise InputError(f"{encoding!r} is not a text encoding", source=name)
    return codec


def _checked_path(source: str | os.PathLike, name: str) -> Path:
    """``source`` as a Path that can be read: not a directory, a device or a bad name."""
    path = Path(source)
    try:
        is_dir, exists = path.is_dir(), path.exists()
        readable = not exists or path.is_file() or path.is_fifo()  # a pipe ends, a device never
    except (OSError, ValueError) as exc:  # e.g. an embedded NUL in the path
        raise InputError(f"bad file name: {exc}", source=repr(str(source))) from None
    if is_dir:
        raise InputError("is a directory, not a file", source=name)
    if not readable:
        raise InputError("not a regular file or pipe (a device?)", source=name)
    return path


#: seconds a named pipe may stay silent (no writer yet, or a writer that sends nothing)
#: before it is refused; the environment variable ``GPSL_PIPE_TIMEOUT`` sets it
PIPE_TIMEOUT = 3.0
ENV_PIPE_TIMEOUT = "GPSL_PIPE_TIMEOUT"


def _read_pipe(path: Path, name: str) -> bytes:
    """The bytes of a named pipe until its writer closes it, read without blocking: opening
    a FIFO that has no writer blocks forever, so it is opened non-blocking and every wait
    for data is bounded by :data:`PIPE_TIMEOUT` seconds (``GPSL_PIPE_TIMEOUT``); a pipe
    silent that long is refused with one line."""
    import select

    try:
        timeout = float(os.environ.get(ENV_PIPE_TIMEOUT, "") or PIPE_TIMEOUT)
    except ValueError:
        raise InputError(f"{ENV_PIPE_TIMEOUT} must be a number of seconds",
                         source="<settings>") from None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        chunks = []
        while True:
            if not poller.poll(max(timeout, 0.0) * 1000):
                raise InputError(f"a named pipe that sent nothing for {timeout:g} s (no "
                                 f"writer?); set {ENV_PIPE_TIMEOUT} to wait longer",
                                 source=name)
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:  # the writer closed the pipe
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_source(source: Source, encoding: str, name: str) -> str:
    """Read ``source`` entirely and return its text with a BOM removed; InputError on failure.

    Refused with a one-line :class:`InputError`: a missing path, a directory or another
    non-regular file (a device would never end), a named pipe silent for
    :data:`PIPE_TIMEOUT` seconds (:func:`_read_pipe`), an unknown or non-text encoding, bytes
    the encoding cannot decode (file and line named), NUL characters and unpaired surrogates.
    """
    codec = _codec(encoding, name)
    data: bytes | str
    if isinstance(source, (str, os.PathLike)):
        path = _checked_path(source, name)
        try:
            data = _read_pipe(path, name) if path.is_fifo() else path.read_bytes()
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror or exc}", source=name) from None
        except ValueError as exc:  # an embedded NUL in the path
            raise InputError(f"bad file name: {exc}", source=repr(str(source))) from None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif hasattr(source, "read"):
        try:
            data = source.read()
        except UnicodeError as exc:
            raise InputError(
                f"cannot decode the input with encoding {getattr(exc, 'encoding', encoding)}:"
                f" {getattr(exc, 'reason', exc)}", source=name
            ) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
        if not isinstance(data, (str, bytes, bytearray)):
            raise InputError("the file object returned neither text nor bytes", source=name)
    else:
        raise TypeError(f"cannot read from {type(source).__name__}")

    if isinstance(data, (bytes, bytearray)):
        data = bytes(data)
        if codec.name.startswith("utf-8") and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        try:
            text = data.decode(codec.name)
        except UnicodeDecodeError as exc:
            bad = data[exc.start:exc.start + 1]
            raise InputError(
                f"byte 0x{bad.hex()} cannot be decoded with encoding {encoding}"
                " (wrong encoding?)",
                source=name,
                line=_line_of(data, exc.start),
            ) from None
        except UnicodeError as exc:
            raise InputError(f"cannot decode the input with encoding {encoding}: {exc}",
                             source=name) from None
    else:
        text = data
    if text.startswith(_BOM):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError("NUL byte in input (binary file?)", source=name, line=_line_of(text, nul))
    sur = SURROGATE.search(text)
    if sur is not None:
        raise InputError("unpaired surrogate character (not valid Unicode text)", source=name,
                         line=_line_of(text, sur.start()))
    return text


def text_lines(text: str) -> list[str]:
    """Split on LF, CRLF or lone CR (and nothing else, unlike ``str.splitlines``)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines




#: bytes read at a time by :func:`iter_lines`
BLOCK = 1 << 20


def iter_lines(source: Source, encoding: str, name: str) -> Iterator[str]:
    """The lines :func:`text_lines` gives of :func:`read_source`'s text, read and decoded a block
    at a time from a path, a file object or bytes (as a file), with the same
    checks: the memory held is a block and a line, whatever the size of the file. A problem
    is found when its block is read (line numbers count LF, CRLF and lone CR)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = io.BytesIO(source)  # read a block at a time too: no whole text, no list
    elif not isinstance(source, (str, os.PathLike)) and not hasattr(source, "read"):
        yield from text_lines(read_source(source, encoding, name))
        return
    codec = _codec(encoding, name)
    if isinstance(source, (str, os.PathLike)):
        path = _checked_path(source, name)
        try:
            # a named pipe is read whole, every wait bounded (:func:`_read_pipe`): opening one
            # that has no writer would block forever
            fh = io.BytesIO(_read_pipe(path, name)) if path.is_fifo() else open(path, "rb")  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror or exc}", source=name) from None
    else:
        fh = None
    decoder = codecs.getincrementaldecoder(codec.name)(errors="strict")
    pending, lineno, first = "", 0, True
    try:
        while True:
            try:
                block = (fh or source).read(BLOCK)
            except UnicodeError as exc:
                raise InputError(f"cannot decode the input with encoding "
                                 f"{getattr(exc, 'encoding', encoding)}: "
                                 f"{getattr(exc, 'reason', exc)}", source=name) from None
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
            final = not block
            if isinstance(block, (bytes, bytearray)):
                try:
                    text = decoder.decode(block, final)
                except UnicodeDecodeError as exc:
                    bad = exc.object[exc.start:exc.start + 1]
                    raise InputError(
                        f"byte 0x{bytes(bad).hex()} cannot be decoded with encoding {encoding}"
                        " (wrong encoding?)", source=name,
                        line=lineno + _line_of(pending, len(pending)) - 1
                        + _line_of(exc.object, exc.start)) from None
            elif isinstance(block, str):
                text = block
            else:
                raise InputError("the file object returned neither text nor bytes",
                                 source=name)
            if first and text:  # a BOM as read_source drops it (bytes, then text)
                for drop in (codec.name.startswith("utf-8") and isinstance(block, bytes), True):
                    if drop and text.startswith(_BOM):
                        text = text[1:]
                first = False
            buf = pending + text
            hold = "\r" if not final and buf.endswith("\r") else ""  # maybe half a CRLF
            if hold:
                buf = buf[:-1]
            if "\r" in buf:
                buf = buf.replace("\r\n", "\n").replace("\r", "\n")
            nul = buf.find("\x00")
            if nul >= 0:
                raise InputError("NUL byte in input (binary file?)", source=name,
                                 line=lineno + buf.count("\n", 0, nul) + 1)
            sur = SURROGATE.search(buf)
            if sur is not None:
                raise InputError("unpaired surrogate character (not valid Unicode text)",
                                 source=name, line=lineno + buf.count("\n", 0, sur.start()) + 1)
            parts = buf.split("\n")
            pending = parts.pop() + hold
            lineno += len(parts)
            yield from parts
            if final:
                if pending:
                    yield pending
                return
    finally:
        if fh is not None:
            fh.close()
