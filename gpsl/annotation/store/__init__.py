"""The store's foundation: the database (SQLite or PostgreSQL), its schema and migrations,
the back end's errors, the typed records, the one set of input checks, the files and
limits a store owns and the operating-system processes of its training workers.

The bottom layer: imports nothing else of :mod:`gpsl.annotation`.
"""
