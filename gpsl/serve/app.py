"""The HTTP server: a Starlette (ASGI) application run by uvicorn.

Every answer is JSON. An error is one line ``{"error": "<what is wrong>"}`` with a 4xx status
(400 bad request, 401 no or wrong token, 404/405 no such endpoint or method, 413 over a limit,
415 not JSON, 422 a request the model cannot serve, 503 over the time limit); an internal error
is a 500 with one line too, never a traceback. Every endpoint but ``/health`` (and ``/``, the
protocol's health alias) needs the token, sent as ``Authorization: Token T``, ``Bearer T`` or
HTTP Basic auth with ``T`` as the password (what Label Studio sends for an ML backend with
"Basic Authentication" on). One JSON log line per request (``gpsl.serve.access``).

Several workers (``uvicorn --workers N``) need an import string: :func:`create_app` is the
factory, reading its settings from the environment (``GPSL_SERVE_SETTINGS``, JSON, written
by ``gpsl serve``; the token from ``GPSL_SERVE_TOKEN``). Each worker loads the model once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hmac
import json
import logging
import os
import time

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gpsl.serve import tagging
from gpsl.serve.labelstudio import ProtocolError
from gpsl.serve.service import Limits, Service, Settings

log = logging.getLogger("gpsl.serve")
access = logging.getLogger("gpsl.serve.access")
OPEN = {"/health", "/"}
_LOG_FIELDS = ("event", "method", "path", "status", "ms", "version", "votes", "tasks",
               "seconds", "error", "client")


class JsonFormatter(logging.Formatter):
    """One JSON object per log line: time, level, logger, message and the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": round(record.created, 3), "level": record.levelname,
               "logger": record.name, "message": record.getMessage()}
        out.update({k: getattr(record, k) for k in _LOG_FIELDS if hasattr(record, k)})
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("gpsl.serve")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status_code=status)


def authorised(header: str | None, token: str) -> bool:
    """``Token T``, ``Bearer T`` or ``Basic base64(user:T)`` (any user name)."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme in ("token", "bearer"):
        given = value
    elif scheme == "basic":
        try:
            given = base64.b64decode(value, validate=True).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


async def read_json(request: Request, limit: int):
    """The request's JSON object, read up to ``limit`` bytes (413 past it)."""
    ctype = request.headers.get("content-type", "")
    if "json" not in ctype.lower():
        raise ProtocolError("send JSON (Content-Type: application/json), not "
                            f"{ctype or 'no type'}", status=415)
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > limit:
        raise ProtocolError(f"request body of {int(size):,} bytes, over the limit of "
                            f"{limit:,}", status=413)
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise ProtocolError(f"request body over the limit of {limit:,} bytes", status=413)
        chunks.append(chunk)
    try:
        data = json.loads(b"".join(chunks), parse_constant=_no_constant)
    except RecursionError:
        raise ProtocolError("not valid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise ProtocolError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProtocolError("the request body must be a JSON object")
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def create_app(service: Service | None = None, token: str | None = None) -> Starlette:
    """The application; without arguments (``uvicorn --factory``) from the environment."""
    if service is None:
        raw = json.loads(os.environ["GPSL_SERVE_SETTINGS"])
        raw["limits"] = Limits(**raw.get("limits", {}))
        configure_logging(os.environ.get("GPSL_SERVE_LOG_LEVEL", "INFO"))
        service = Service(Settings(**raw))
    token = token if token is not None else os.environ.get("GPSL_SERVE_TOKEN", "")
    if not token:
        raise ValueError("a token is required (--token or GPSL_SERVE_TOKEN)")
    limits = service.limits

    async def work(fn, *args):
        try:
            return await asyncio.wait_for(run_in_threadpool(fn, *args), limits.timeout)
        except TimeoutError:
            raise ProtocolError(f"the model took longer than {limits.timeout:g} s; send fewer "
                                "or shorter texts", status=503) from None

    def endpoint(fn, *, body: bool = True):
        async def handler(request: Request):
            payload = await read_json(request, limits.max_body) if body else None
            out = await work(fn, payload) if body else await work(fn)
            status, out = out if isinstance(out, tuple) else (200, out)
            return JSONResponse(out, status_code=status)
        return handler

    async def health(request: Request):
        return JSONResponse({"status": "UP", "model_class": "GPSL",
                             "model_version": service.version})

    def setup(payload):
        return service.setup(payload.get("schema"))

    routes = [
        Route("/", health, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/setup", endpoint(setup), methods=["POST"]),
        Route("/predict", endpoint(service.predict), methods=["POST"]),
        Route("/webhook", endpoint(service.webhook), methods=["POST"]),
        Route("/metrics", endpoint(lambda: {}, body=False), methods=["GET"]),
        Route("/v1/tag", endpoint(lambda p: tagging.tag(p, service)), methods=["POST"]),
        Route("/v1/query", endpoint(lambda p: tagging.query(p, service)), methods=["POST"]),
        Route("/v1/model", endpoint(service.info, body=False), methods=["GET"]),
    ]
    async def guard(request: Request, call_next):
        t0 = time.perf_counter()
        path = request.url.path
        try:
            if path not in OPEN and not authorised(request.headers.get("authorization"),
                                                   token):
                response = error(401, "missing or wrong token (send Authorization: Token T, "
                                      "or Basic auth with T as the password)")
                response.headers["WWW-Authenticate"] = 'Basic realm="gpsl"'
                log.warning("refused", extra={"event": "refused", "path": path, "status": 401,
                                              "error": "missing or wrong token"})
            else:
                response = await call_next(request)
        except ProtocolError as exc:  # the client's: a warning with what it was told
            log.warning("refused", extra={"event": "refused", "path": path,
                                          "status": exc.status, "error": str(exc)})
            response = error(exc.status, str(exc))
        except Exception as exc:  # a bug: one line, logged with its traceback
            log.exception("internal error", extra={"event": "error", "path": path})
            response = error(500, f"internal error: {type(exc).__name__} (see the server log)")
        access.info("request", extra={
            "event": "request", "method": request.method, "path": path,
            "status": response.status_code, "ms": round(1000 * (time.perf_counter() - t0), 1),
            "client": request.client.host if request.client else None})
        return response

    app = Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)])
    app.state.service = service

    async def not_found(request: Request, exc):
        status = getattr(exc, "status_code", 404)
        return error(status, f"{request.method} {request.url.path}: "
                             f"{'no such endpoint' if status == 404 else 'method not allowed'}")

    app.add_exception_handler(404, not_found)
    app.add_exception_handler(405, not_found)
    return app


def settings_env(settings: Settings) -> str:
    """The JSON of ``settings`` for :func:`create_app` in a worker process."""
    return json.dumps(dataclasses.asdict(settings))
