"""``python -m serving.rollout``."""
import sys

from serving.rollout.cli import main

sys.exit(main())
