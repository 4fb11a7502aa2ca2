"""The test suite; its folders mirror the code (pytest imports them as packages from the
checkout's root, so ``tests.support`` and ``bench`` import without ``sys.path`` edits)."""
