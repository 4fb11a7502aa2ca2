"""A throw-away PostgreSQL server for the tests and the robustness report.

Debian's ``postgresql`` package (``/usr/lib/postgresql/<v>/bin``); the server refuses to
run as root, so as root it is run as the ``postgres`` user (``runuser``).  The cluster
lives in a new temporary directory, listens on a free loopback port (and a socket in that
directory) and is stopped and deleted by :meth:`TempPostgres.stop`.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries, or the server would not start."""


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with initdb and pg_ctl (or
    ``$GPSL_PG_BINDIR``)."""
    env = os.environ.get("GPSL_PG_BINDIR")
    candidates = [env] if env else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                           key=lambda p: float(Path(p).parent.name), reverse=True)
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    raise PostgresUnavailable("PostgreSQL server binaries not found (apt-get install "
                              "postgresql, or set GPSL_PG_BINDIR)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TempPostgres:
    """Start with :meth:`start`; :meth:`new_database` gives the URL of a new empty database."""

    def __init__(self, fsync: bool = False):
        self.bindir = find_bindir()
        self.fsync = fsync
        self.dir: Path | None = None
        self.port: int | None = None
        self._names = itertools.count(1)
        self._as_root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = list(args)
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> TempPostgres:
        self.dir = Path(tempfile.mkdtemp(prefix="gpsl-pg-"))
        data = self.dir / "data"
        data.mkdir()
        if self._as_root:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(data, "postgres", "postgres")
        try:
            self._run(str(self.bindir / "initdb"), "-D", str(data), "-A", "trust",
                      "-U", "postgres", "-E", "UTF8", "--no-sync")
            self.port = _free_port()
            opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
                    " -c max_connections=500" + ("" if self.fsync else " -c fsync=off"
                                                 " -c synchronous_commit=off"))
            self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
                      "-t", "60", "-l", str(self.dir / "server.log"), "start")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            log = ""
            with contextlib.suppress(OSError):
                log = (self.dir / "server.log").read_text()[-500:]
            detail = getattr(exc, "stderr", "") or str(exc)
            self.stop()
            raise PostgresUnavailable(f"PostgreSQL did not start: {detail.strip()} {log}") \
                from exc
        return self

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self, prefix: str = "gpsl") -> str:
        """Create a new empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def pg_ctl(self, action: str) -> None:
        """``stop`` / ``start`` the server (faults: a server that goes away and comes back)."""
        data = self.dir / "data"
        if action == "stop":
            self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        else:
            opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
                    " -c max_connections=500" + ("" if self.fsync else " -c fsync=off"))
            self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-w",
                      "-t", "60", "-l", str(self.dir / "server.log"), "start")

    def stop(self) -> None:
        if self.dir is None:
            return
        data = self.dir / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                          "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self) -> TempPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
