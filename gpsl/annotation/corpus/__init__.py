"""Projects and their sentences: projects, sentences (tokens, splits, gold labels), the
model's stored predictions of each sentence, search and the projects' statistics.

Imports :mod:`gpsl.annotation.store` only.
"""
