"""The sign-in rate limit under a concurrent burst and behind a reverse proxy, on SQLite and
PostgreSQL: the check and the count are one atomic step (of 41 simultaneous tries for one
name at most MAX_FAILURES_PER_NAME passwords are checked), a name backs off (seconds, at
most MAX_BACKOFF_SECONDS) instead of being locked out, and the client address comes from
the configured proxy header only when the peer is a trusted proxy."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gpsl.annotation import InputError, TooManyAttempts, client_address
from gpsl.annotation.people import auth
from tests.support.limits import limit

STRONG = "sturdy wombat lantern"


def _age_failures(store, seconds: float) -> None:
    """Move every recorded failure ``seconds`` into the past (time passing)."""
    at = (datetime.now(UTC) - timedelta(seconds=seconds)).isoformat(timespec="milliseconds")
    store.db.write(lambda c: c.execute(text("UPDATE sign_in_failures SET at = :at"),
                                       {"at": at}))


def test_a_burst_of_simultaneous_tries_checks_at_most_the_limit(store, monkeypatch):
    # a back-off longer than the burst lasts (argon2 checks take seconds under load):
    # every try past the limit is then refused, whenever it comes
    monkeypatch.setattr(auth, "BACKOFF_BASE_SECONDS", 3600.0)
    monkeypatch.setattr(auth, "MAX_BACKOFF_SECONDS", 3600.0)
    store.create_account("Lea", "lead", STRONG)
    n, right = 41, 20
    barrier, got, lock = threading.Barrier(n), [], threading.Lock()

    def attempt(i):
        barrier.wait()
        password = STRONG if i == right else f"wrong guess number {i}"
        try:
            out = store.sign_in("Lea", password, f"10.0.1.{i}")
        except TooManyAttempts as exc:
            out = exc
        with lock:
            got.append((i, out))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit(120))
    assert len(got) == n
    checked = [(i, out) for i, out in got if not isinstance(out, TooManyAttempts)]
    assert len(checked) <= auth.MAX_FAILURES_PER_NAME, checked
    refused = [out for _, out in got if isinstance(out, TooManyAttempts)]
    assert all("\n" not in str(e) and "for this name" in str(e) for e in refused)
    signed_in = [i for i, out in checked if out is not None]
    assert signed_in in ([], [right])
    # once the back-off has passed the owner signs in: slowed down, never locked out
    _age_failures(store, 3601)
    assert store.sign_in("Lea", STRONG, "10.0.2.1")[0].name == "Lea"


def test_a_name_backs_off_exponentially_and_is_never_locked_out(store):
    store.create_account("Lea", "lead", STRONG)
    assert [auth.backoff_seconds(k) for k in range(auth.MAX_FAILURES_PER_NAME + 4)] == \
        [0.0] * auth.MAX_FAILURES_PER_NAME + [2.0, 4.0, 8.0, 16.0]
    assert auth.backoff_seconds(10 ** 6) == auth.MAX_BACKOFF_SECONDS
    for k in range(auth.MAX_FAILURES_PER_NAME):
        assert store.sign_in("Lea", "wrong guess", f"10.0.0.{k}") is None
    with pytest.raises(TooManyAttempts, match=r"for this name: try again in [12] seconds?$"):
        store.sign_in("Lea", STRONG, "10.0.0.99")
    # a stranger keeps failing (from ever new addresses): each time the wait doubles ...
    for _ in range(12):
        _age_failures(store, auth.MAX_BACKOFF_SECONDS + 1)
        assert store.sign_in("lea", "wrong guess", "10.9.9.9") is None
    with pytest.raises(TooManyAttempts, match="try again in (59|60) seconds"):
        store.sign_in("Lea", STRONG, "10.0.0.99")
    # ... but never beyond MAX_BACKOFF_SECONDS: the owner then signs in
    _age_failures(store, auth.MAX_BACKOFF_SECONDS + 1)
    assert store.sign_in("Lea", STRONG, "10.0.0.99")[0].name == "Lea"
    # and the name's count starts again
    assert store.db.read(lambda c: c.execute(text(
        "SELECT COUNT(*) FROM sign_in_failures WHERE key = 'name:lea'")).scalar_one()) == 0


def test_behind_a_proxy_one_stranger_locks_out_nobody_else(store, monkeypatch):
    """20 wrong tries through the proxy from one address: that address waits, every other
    person behind the same proxy still signs in (the limit counted the proxy before)."""
    monkeypatch.setenv("GPSL_PROXY_HEADER", "X-Forwarded-For")
    monkeypatch.setenv("GPSL_TRUSTED_PROXIES", "127.0.0.1, 10.8.0.0/16")
    store.create_account("Lea", "lead", STRONG)
    store.create_account("Ann", "annotator", "ann's own sturdy phrase")
    proxy = "127.0.0.1"

    def via_proxy(forwarded):
        return client_address(proxy, {"X-Forwarded-For": forwarded})

    stranger = via_proxy("203.0.113.5")
    assert stranger == "203.0.113.5"
    for k in range(auth.MAX_FAILURES_PER_CLIENT):
        assert store.sign_in(f"nobody{k}", "guess guess", stranger) is None
    with pytest.raises(TooManyAttempts, match="from here"):
        store.sign_in("Ann", "ann's own sturdy phrase", stranger)
    who, _ = store.sign_in("Ann", "ann's own sturdy phrase", via_proxy("198.51.100.7"))
    assert who.name == "Ann"
    assert store.sign_in("Lea", STRONG, via_proxy("198.51.100.8"))[0].name == "Lea"
    # the stranger cannot choose a new address: only the proxy's own hop counts
    assert via_proxy("198.51.100.7, 203.0.113.5") == "203.0.113.5"


@pytest.mark.parametrize("peer, headers, expected", [
    ("10.8.0.2", {"X-Forwarded-For": "1.2.3.4, 10.8.0.3"}, "1.2.3.4"),  # two trusted hops
    ("10.8.0.2", {"X-Forwarded-For": "1.2.3.4"}, "1.2.3.4"),
    ("10.8.0.2", {}, "10.8.0.2"),  # no header: the proxy itself
    ("10.8.0.2", {"X-Forwarded-For": "not an address"}, "10.8.0.2"),
    ("10.8.0.2", {"X-Forwarded-For": "[2001:db8::1]:443"}, "2001:db8::1"),
    ("192.0.2.9", {"X-Forwarded-For": "1.2.3.4"}, "192.0.2.9"),  # untrusted peer: ignored
    (None, {"X-Forwarded-For": "1.2.3.4"}, "loopback"),
])
def test_the_client_address_trusts_the_header_only_from_a_trusted_proxy(peer, headers,
                                                                         expected):
    got = client_address(peer, headers, "X-Forwarded-For", "10.8.0.0/16")
    assert got == expected


def test_without_both_settings_every_header_is_ignored(monkeypatch):
    monkeypatch.delenv("GPSL_PROXY_HEADER", raising=False)
    monkeypatch.delenv("GPSL_TRUSTED_PROXIES", raising=False)
    assert client_address("127.0.0.1", {"X-Forwarded-For": "1.2.3.4"}) == "127.0.0.1"
    monkeypatch.setenv("GPSL_PROXY_HEADER", "X-Real-IP")
    assert client_address("127.0.0.1", {"X-Real-IP": "1.2.3.4"}) == "127.0.0.1"
    monkeypatch.setenv("GPSL_TRUSTED_PROXIES", "127.0.0.1")
    assert client_address("127.0.0.1", {"X-Real-IP": "1.2.3.4"}) == "1.2.3.4"
    assert client_address("127.0.0.1", {"Forwarded": "for=1.2.3.4"}, "Forwarded",
                          "127.0.0.1") == "1.2.3.4"
    monkeypatch.setenv("GPSL_TRUSTED_PROXIES", "a proxy")
    with pytest.raises(InputError, match="GPSL_TRUSTED_PROXIES"):
        client_address("127.0.0.1", {})
