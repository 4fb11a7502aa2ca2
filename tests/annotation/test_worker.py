"""The app's training worker, ``python -m gpsl.annotation.worker`` (moved out of the library's
command line): it refuses a store that is not there without creating one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.limits import limit


def _worker(args, env_db):
    env = {k: v for k, v in os.environ.items() if k != "GPSL_DB"}
    if env_db is not None:
        env["GPSL_DB"] = env_db
    return subprocess.run([sys.executable, "-m", "gpsl.annotation.worker", *args], env=env,
                          capture_output=True, text=True, timeout=limit(120))


@pytest.mark.parametrize("form", ["path", "url", "dir"])
def test_a_missing_store_is_refused_and_never_created(tmp_path, form):
    path = tmp_path / "sub" / "nope.sqlite3"
    if form == "dir":
        path.mkdir(parents=True)
    target = f"sqlite:///{path}" if form == "url" else str(path)
    proc = _worker(["--version", "1", "--models-root", str(tmp_path / "models")], target)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gpsl worker: error: ") and proc.stderr.count("\n") == 1
    assert str(path) in proc.stderr
    assert "is not a file" in proc.stderr if form == "dir" else "does not exist" in proc.stderr
    assert proc.stdout == ""
    assert (not path.exists()) if form != "dir" else not any(path.iterdir())
    assert not (tmp_path / "models").exists()


def test_no_store_and_bad_arguments_are_one_line(tmp_path):
    proc = _worker(["--version", "1"], None)
    assert proc.returncode == 2 and "GPSL_DB is not set" in proc.stderr
    for args in (["--version", "x"], [], ["--version", "0"]):
        proc = _worker(args, str(tmp_path / "s.sqlite3"))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (args, proc.stderr)
    assert not (tmp_path / "s.sqlite3").exists()


def test_the_library_command_line_no_longer_hosts_the_worker(capsys):
    from gpsl import cli

    assert cli.main(["worker", "--version", "1"]) == 2
    assert "invalid choice: 'worker'" in capsys.readouterr().err
