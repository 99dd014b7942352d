"""The rule for a model's name: what every part of the stack can carry without quoting.

A model's name travels as a REST path segment (``/v1/models/NAME``, where TF
Serving matches ``[^/:]+``), a directory of the model repository, a file of
the gateway's ``canary.d/`` and a word of its nginx config. The rule is the
subset safe in all of them: ASCII letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or a digit, no ``..``, at most
:data:`MAX_MODEL_NAME_LENGTH` characters. ``serving.config add|check`` and
the gateway's canary routes hold names to it; it is defined here once.
"""
from __future__ import annotations

import re
from typing import Optional

__all__ = ["MODEL_NAME", "MAX_MODEL_NAME_LENGTH", "MODEL_NAME_RULE", "model_name_problem"]

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_MODEL_NAME_LENGTH = 128
MODEL_NAME_RULE = (f"a model name is 1 to {MAX_MODEL_NAME_LENGTH} ASCII letters, digits, '.', '_' or '-', "
                   "starting with a letter or a digit, without '..'")


def model_name_problem(name: str) -> Optional[str]:
    """Why ``name`` breaks the rule (a sentence naming it), or None when it is a valid model name."""
    shown = repr(name if len(name) <= 40 else name[:40] + "...")
    if len(name) > MAX_MODEL_NAME_LENGTH:
        return f"model name {shown} has {len(name)} characters: {MODEL_NAME_RULE}"
    if not MODEL_NAME.fullmatch(name) or ".." in name:
        return f"invalid model name {shown}: {MODEL_NAME_RULE}"
    return None
