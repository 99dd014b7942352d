"""``python -m serving.stack``: ``make up`` and ``make down`` (``serving.stack.cli``)."""
import sys

from serving.stack.cli import main

sys.exit(main())
