"""``python -m serving.capture``: see ``serving.capture._cli``."""
from __future__ import annotations

import sys

from serving.capture._cli import main

if __name__ == "__main__":
    sys.exit(main())
