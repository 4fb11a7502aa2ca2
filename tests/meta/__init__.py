"""The repository itself: the import structure, hygiene of the suite, the docs."""
