"""People: accounts, roles and passwords, sign-in, sessions and links.

Imports :mod:`gpsl.annotation.store` only.
"""
