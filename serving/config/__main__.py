"""``python -m serving.config check|render``."""
import sys

from serving.config.cli import main

sys.exit(main())
