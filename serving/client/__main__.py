"""Entry point of ``python -m serving.client`` (see ``serving.client.cli``)."""
import sys

from serving.client.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
