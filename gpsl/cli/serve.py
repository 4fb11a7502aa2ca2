"""``gpsl serve``: the model as an HTTP service (:mod:`gpsl.serve`): a Label Studio ML
backend and the tagging API, on uvicorn."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from gpsl.cli import common
from gpsl.errors import InputError


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") \
                from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over HTTP: a Label Studio ML backend and "
                                     "a tagging API (docs/serve.md)",
                       description="Serve MODEL_DIR over HTTP (Label Studio ML backend: "
                                   "/predict /setup /webhook /health; tagging API: /v1/tag "
                                   "/v1/query /v1/model). Every endpoint but /health needs "
                                   "the token.")
    p.add_argument("-m", "--model", required=True, metavar="MODEL_DIR")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_positive(int), default=9090)
    p.add_argument("--token", default=None,
                   help="the token clients send (default $GPSL_SERVE_TOKEN; required)")
    p.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where votes and refitted models are kept (SQLite; default "
                        "MODEL_DIR-serve beside the model)")
    p.add_argument("--workers", type=_positive(int), default=1,
                   help="worker processes (each loads the model once)")
    p.add_argument("--complete", action="store_true",
                   help="annotations are complete: text outside a span is O (default: "
                        "unlabeled)")
    p.add_argument("--refit-every", type=_positive(int), default=10, metavar="N",
                   help="refit in the background after N new or changed annotations "
                        "(default 10; START_TRAINING refits at once)")
    p.add_argument("--train-data", default=None, metavar="FILE",
                   help="a labeled CoNLL file (the model's training file) that every refit "
                        "learns from beside the votes (default: the votes alone)")
    p.add_argument("--max-tasks", type=_positive(int), default=1000,
                   help="tasks or sentences per request (default 1000)")
    p.add_argument("--max-body", type=_positive(int), default=8 << 20, metavar="BYTES",
                   help="request body size (default 8 MiB)")
    p.add_argument("--timeout", type=_positive(float), default=90.0, metavar="SECONDS",
                   help="model time of one request (default 90; Label Studio waits 100)")
    common.add_max_tokens(p)
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   default="INFO")
    p.set_defaults(func=run)


def settings_of(args: argparse.Namespace):
    from gpsl.serve.service import Limits, Settings

    model = Path(args.model)
    if not (model / "model.json").is_file():
        raise InputError("not a gpsl model directory (no model.json)", source=args.model)
    state = args.state_dir or str(model.resolve()) + "-serve"
    limits = Limits(max_body=args.max_body, max_tasks=args.max_tasks,
                    max_tokens=args.max_tokens or Limits.max_tokens, timeout=args.timeout)
    return Settings(model_dir=str(model.resolve()), state_dir=str(Path(state).resolve()),
                    complete=args.complete, refit_every=args.refit_every,
                    train_data=args.train_data, limits=limits)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from gpsl.serve.app import configure_logging, create_app, settings_env
    from gpsl.serve.service import Service

    token = args.token or os.environ.get("GPSL_SERVE_TOKEN", "")
    if not token:
        raise InputError("a token is required: --token T or GPSL_SERVE_TOKEN (e.g. "
                         f"{secrets.token_urlsafe(24)})", source="gpsl serve")
    if args.port > 65535:
        common.refuse("--port", f"{args.port} is not a TCP port (1 to 65535)")
    settings = settings_of(args)
    common.load_model(settings.model_dir)  # a bad model: one line before the server starts
    service = Service(settings)  # a bad --train-data or state directory, the same
    configure_logging(args.log_level)
    print(f"gpsl serve: {settings.model_dir} on http://{args.host}:{args.port} "
          f"(state {settings.state_dir}, {args.workers} worker(s))", file=sys.stderr)
    common_kw = {"host": args.host, "port": args.port, "log_level": args.log_level.lower(),
                 "access_log": False, "timeout_graceful_shutdown": 5}
    if args.workers == 1:
        uvicorn.run(create_app(service, token), **common_kw)
        return 0
    del service  # each worker loads its own
    os.environ["GPSL_SERVE_SETTINGS"] = settings_env(settings)
    os.environ["GPSL_SERVE_TOKEN"] = token
    os.environ["GPSL_SERVE_LOG_LEVEL"] = args.log_level
    uvicorn.run("gpsl.serve.app:create_app", factory=True, workers=args.workers, **common_kw)
    return 0
