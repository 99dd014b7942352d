"""The checkout's root, defined once: ``REPO_ROOT``, where ``models/``, ``serving/*.config``, ``docs/``
and ``.cache/`` are.

Every default path of the CLIs (``--model-repo``, the work directory of ``make up``), the image
builds, the benchmarks, the load tools and the tests is relative to it; each imports it from here
instead of counting ``Path(__file__).parents``. Importing this module does nothing else.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parents[1]
