"""First-run setup of an annotation store for a team: the lead account, from the command line.

::

    python -m gpsl.annotation.setup [--db PATH_OR_URL] [--name NAME] [--password-stdin]
    python -m gpsl.annotation.setup --token            (a one-time setup token instead)
    python -m gpsl.annotation.setup --reset NAME       (a lead's new password)
    make setup                                          (the first form, on the app's store)

While a store has no account the app is single-user and, served on a loopback address, its
user is the lead; served to others it shows only a setup form that asks for a setup token.
This command makes the first lead account (a name and a password that zxcvbn rates hard to
guess, :func:`gpsl.annotation.people.accounts.check_password`), so the first visitor of a freshly
served app never becomes its owner. ``--token`` prints a one-time token (24 hours, one use)
to type into that setup form instead; the app prints one too on its console while the store
has no account. ``--reset`` gives an existing account a new password (every session of it
ends): the way back in for a lead who forgot theirs, for whoever can run commands on the
server.

The store is ``--db``, else ``$GPSL_DB``, else ``data/gpsl.sqlite3`` under the current
directory (the app's default when started from the repository, as ``make`` does). The
password is asked twice on the terminal (never on the command line, where other users of the
machine could read it), or read from one line of standard input with ``--password-stdin``.
Errors are one line ``gpsl setup: error: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path

from gpsl.annotation.facade import Store
from gpsl.annotation.store.db import default_db_url
from gpsl.errors import GpslError, InputError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise InputError(message, source="arguments")


def _password(args) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if not sys.stdin.isatty():
        raise InputError("no terminal to ask the password on: give it on standard input "
                         "with --password-stdin", source="arguments")
    first = getpass.getpass("Password: ")
    if getpass.getpass("The same password again: ") != first:
        raise InputError("the two passwords differ", source="password")
    return first


def _name(args) -> str:
    if args.name:
        return args.name
    if not sys.stdin.isatty() or args.password_stdin:
        raise InputError("give the account's name with --name", source="arguments")
    return input("Name of the lead account: ")


def main(argv: Sequence[str] | None = None) -> int:
    p = _Parser(prog="python -m gpsl.annotation.setup",
                description="Create the first lead account of an annotation store (or print "
                            "a one-time setup token, or reset a password).")
    p.add_argument("--db", default=None, metavar="PATH_OR_URL",
                   help="the store (default $GPSL_DB, else data/gpsl.sqlite3 here)")
    p.add_argument("--name", default=None, help="the lead's name (asked when not given)")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from one line of standard input")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--token", action="store_true",
                      help="print a one-time setup token for the app's setup form instead")
    mode.add_argument("--reset", metavar="NAME", default=None,
                      help="give the account NAME a new password (its sessions end)")
    try:
        args = p.parse_args(argv)
        target = args.db or default_db_url(Path.cwd())
        if "://" not in target:
            Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
        with Store(target) as store:
            if args.token:
                token = store.issue_setup_token()
                if token is None:
                    raise InputError("the store has accounts already: no setup needed (a "
                                     "lead manages accounts on the Team page)", source=store.where)
                print(f"Setup token (one use, 24 hours): {token}")
                print("Open the app and type it into the setup form.", file=sys.stderr)
                return 0
            if args.reset is not None:
                match = [a for a in store.list_accounts()
                         if a["name"].lower() == " ".join(args.reset.split()).lower()]
                if not match:
                    raise InputError(f"no account named {args.reset!r}", source=store.where)
                store.set_account_password(match[0]["id"], _password(args))
                print(f"New password set for {match[0]['name']} (their sessions ended).")
                return 0
            if store.account_count():
                raise InputError("the store has accounts already: sign in as a lead (or use "
                                 "--reset NAME for a forgotten password)", source=store.where)
            name = _name(args)
            store.create_account(name, "lead", _password(args))
            print(f"Lead account {' '.join(name.split())!r} created in {store.where}: sign-in "
                  "is on. Start the app and sign in with it.")
            return 0
    except (GpslError, OSError, ValueError, EOFError, KeyboardInterrupt) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"gpsl setup: error: {text}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
