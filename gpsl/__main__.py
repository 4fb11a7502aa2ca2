"""``python -m gpsl``: see :mod:`gpsl.cli`."""

import sys

from gpsl.cli import main

if __name__ == "__main__":
    sys.exit(main())
