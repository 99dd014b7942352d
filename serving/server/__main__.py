"""``python -m serving.server`` — see ``serving.server.main``."""
import sys

from serving.server.main import main

if __name__ == "__main__":
    sys.exit(main())
