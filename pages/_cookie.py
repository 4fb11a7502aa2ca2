"""The session cookie: the browser keeps the session token in a cookie, never in a URL.

A tiny component (``pages/cookie/index.html``, no build step, nothing fetched) writes the
cookie in the app's page; Streamlit hands the cookies of a tab's connection to the server
(``st.context.cookies``), so a reload, a new tab or a server restart finds the session again
until it expires or is revoked. The cookie is ``SameSite=Strict`` (and ``Secure`` over HTTPS)
and named after the store, so two apps on one host keep their sessions apart.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

_component = components.declare_component(
    "cookie", path=str(Path(__file__).resolve().parent / "cookie"))


def name(where: str) -> str:
    """The cookie's name for the store at ``where``."""
    return "gpsl_session_" + hashlib.sha256(str(where).encode("utf-8")).hexdigest()[:12]


def read(where: str) -> str | None:
    """The session token this tab's connection brought (None: no cookie)."""
    try:
        value = st.context.cookies.get(name(where))
    except Exception:  # noqa: BLE001 - no connection context (bare mode)
        return None
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


def write(where: str, token: str | None, max_age: int) -> None:
    """Draw the (invisible) component that sets the cookie (``token`` None: removes it)."""
    _component(name=name(where), value=token, maxAge=int(max_age), key="gpsl_session_cookie",
               default=None)
