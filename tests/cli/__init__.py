"""The command line (``gpsl train/test/aggregate/serve``) and hostile inputs to it."""
