"""A real Label Studio for the integration test: installed once from pip into its own virtual
environment outside the checkout, started on loopback with a throwaway data directory.

    python -m tests.support.labelstudio install     (what `make labelstudio` runs; idempotent)

The environment is ``$GPSL_LS_VENV`` or ``~/.cache/gpsl-ls-venv``; ``requirements-labelstudio
.txt`` (beside this file) pins its whole tree, and a stamp with that file's SHA-256 says the
install is complete, so a changed pin reinstalls and a finished install is never repeated.
Label Studio runs with its SQLite in the data directory, its update check off, no analytics
or error reporting, a first user and legacy API token from the environment, and loopback
ML backends and webhooks allowed (``ML_BLOCK_LOCAL_IP``, ``SSRF_PROTECTION_ENABLED``: gpsl
serve runs on 127.0.0.1 beside it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.serve import answers

REQUIREMENTS = Path(__file__).with_name("requirements-labelstudio.txt")
VENV = Path(os.environ.get("GPSL_LS_VENV", Path.home() / ".cache" / "gpsl-ls-venv"))
USER, PASSWORD = "lead@example.com", "lead-pass-2468"
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"


class InstallError(RuntimeError):
    pass


def _digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def python() -> Path:
    return VENV / "bin" / "python"


def installed() -> bool:
    stamp = VENV / ".gpsl-installed"
    return stamp.is_file() and stamp.read_text().strip() == _digest() and python().exists()


def ensure_installed(log=sys.stderr) -> Path:
    """The environment's Python, installing it first if needed (one installer at a time:
    a lock file beside the environment)."""
    if installed():
        return python()
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / (VENV.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed():
            return python()
        steps = [] if python().exists() else [[sys.executable, "-m", "venv", str(VENV)]]
        steps.append([str(python()), "-m", "pip", "install", "--disable-pip-version-check",
                      "-q", "-r", str(REQUIREMENTS)])
        for cmd in steps:
            print("labelstudio:", " ".join(cmd), file=log, flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                tail = " ".join((done.stderr or done.stdout).split()[-40:])
                raise InstallError(f"{' '.join(cmd[:4])} ... failed: {tail}")
        (VENV / ".gpsl-installed").write_text(_digest() + "\n")
    return python()


def env(data_dir: Path) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LABEL_STUDIO", "DJANGO"))}
    base.pop("HOST", None)
    return {**base,
            "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
            "LABEL_STUDIO_USERNAME": USER, "LABEL_STUDIO_PASSWORD": PASSWORD,
            "LABEL_STUDIO_USER_TOKEN": TOKEN, "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
            "ML_BLOCK_LOCAL_IP": "false", "SSRF_PROTECTION_ENABLED": "false",
            "LATEST_VERSION_CHECK": "false", "COLLECT_ANALYTICS": "false",
            "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "", "FEATURE_FLAGS_OFFLINE": "true"}


@contextlib.contextmanager
def running(data_dir: Path, port: int, startup: float):
    """Label Studio on ``127.0.0.1:port`` with its data in ``data_dir``; yields its URL."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = open(data_dir.parent / "labelstudio.log", "w")
    proc = subprocess.Popen(
        [str(python()), "-m", "label_studio.server", "start", "--no-browser", "--host",
         "127.0.0.1", "--port", str(port), "--internal-host", "127.0.0.1"],
        stdout=log, stderr=subprocess.STDOUT, env=env(data_dir), cwd=data_dir,
        start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + startup
        while not answers(url):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"Label Studio did not start (see {log.name})")
            time.sleep(2.0)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m tests.support.labelstudio install")
    try:
        print(f"labelstudio: {ensure_installed()}")
    except InstallError as exc:
        raise SystemExit(f"labelstudio: {exc}") from None
