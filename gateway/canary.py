"""The gateway's canary routes: which label serves a REST request that names no version and no label.

TF Serving answers a request without a version or a label with the *latest*
version, so once a canary version is loaded every unlabeled client would be
on it. For each model in canary, ``python -m serving.rollout canary`` writes
two small files into ``canary.d/`` beside the gateway's rendered
``nginx.conf`` (nginx.conf includes ``canary.d/*.conf`` at the ``http`` level
and ``canary.d/*.map`` inside the map that names the label; a glob that
matches nothing is no error, so a gateway with no canary has none):

- ``<model>.conf``: a ``split_clients`` on ``$request_id`` that picks
  ``canary`` for ``weight`` percent of requests, ``stable`` for the rest
  (only for 0 < weight < 100; 0 and 100 need no split);
- ``<model>.map``: the model's line of ``$gw_route_label``.

- ``<model>.shadow`` (``canary --shadow PERCENT``, weight 0 only): the model's line of
  ``$gw_shadow_label``: ``canary``, or a second ``split_clients`` in ``<model>.conf`` for a share
  below 100. routes.conf mirrors that share of the model's unlabeled POST predict/classify/regress
  calls to the ``canary`` label (nginx ``mirror``; the copy's answer is discarded, the client
  gets stable's).

While any model has a ``.shadow`` file, ``shadow.mirror`` (included by the
REST location) turns nginx's ``mirror`` on; without a shadow no request is
copied at all (the copy would cost every REST request a subrequest).

routes.conf then rewrites ``/v1/models/M:predict|classify|regress`` and
``/v1/models/M/metadata`` to ``/v1/models/M/labels/<label>...``. The status
path ``/v1/models/M`` is left as it is (it lists every version), and so is
every request that names a version or a label, and every model not in canary.
The gateway applies new files at a graceful reload (``nginx -s reload``:
new workers take the new config, old ones finish their requests).
"""
from __future__ import annotations

import hashlib
import re
from typing import Optional

from serving.config.names import MODEL_NAME, model_name_problem

__all__ = ["CANARY_DIR", "STABLE", "CANARY", "MODEL_NAME", "MIRROR_FILE", "MIRROR_TEXT", "canary_route_files",
           "route_file_names"]

CANARY_DIR = "canary.d"
STABLE, CANARY = "stable", "canary"
# What may appear in a model name the gateway routes: serving.config.names' rule (TF Serving's REST path
# segment is [^/:]+; the rule is the subset that is safe inside an nginx config without quoting).


def _variable(model: str, kind: str = "split") -> str:
    """An nginx variable name for ``model``'s split (names may hold `.` and `-`; a hash keeps them apart)."""
    digest = hashlib.sha1(model.encode()).hexdigest()[:8]
    return f"$gw_{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', model)}_{digest}"


# Included in the REST location while any model is in shadow (a model's own files end .conf, .map, .shadow).
MIRROR_FILE = f"{CANARY_DIR}/shadow.mirror"
MIRROR_TEXT = "# Written by `python -m serving.rollout`: a model is in shadow.\nmirror /.gw-shadow;\n"


def route_file_names(model: str) -> tuple[str, str, str]:
    """The files (relative to the gateway's config directory) that route ``model``: split, label, shadow."""
    return f"{CANARY_DIR}/{model}.conf", f"{CANARY_DIR}/{model}.map", f"{CANARY_DIR}/{model}.shadow"


def canary_route_files(model: str, weight: float, *, shadow: float = 0.0) -> dict[str, str]:
    """``{relative path: text}`` routing ``weight`` percent of ``model``'s unlabeled REST traffic to canary,
    and mirroring ``shadow`` percent of it (weight 0 only) to canary as well; a file of
    :func:`route_file_names` not in it is to be removed."""
    problem = model_name_problem(model)
    if problem is not None:
        raise ValueError(f"the gateway cannot route this model: names must match the model-name rule: {problem}")
    if not 0 <= weight <= 100:
        raise ValueError(f"a canary weight is a percentage in [0, 100], got {weight:g}")
    if not 0 <= shadow <= 100:
        raise ValueError(f"a shadow share is a percentage in [0, 100], got {shadow:g}")
    if shadow and weight:
        raise ValueError(f"a shadow mirrors stable's traffic: it needs weight 0, got weight {weight:g} "
                         f"with shadow {shadow:g}")
    conf, label_map, shadow_map = route_file_names(model)
    header = (f"# Written by `python -m serving.rollout`: {model} canary weight {weight:g}%"
              + (f", shadow {shadow:g}%" if shadow else "") + ".\n")
    if weight in (0, 100):
        split, label = "", CANARY if weight == 100 else STABLE
    else:
        variable = _variable(model)
        split = (f'split_clients "${{request_id}}{model}" {variable} {{\n'
                 f"    {weight:g}% {CANARY};\n    * {STABLE};\n}}\n")
        label = variable
    mirrored: Optional[str] = None
    if shadow:
        mirrored = CANARY
        if shadow < 100:
            variable = _variable(model, "shadow")
            split += (f'split_clients "${{request_id}}{model}/shadow" {variable} {{\n'
                      f'    {shadow:g}% {CANARY};\n    * "";\n}}\n')
            mirrored = variable
    files = {conf: header + split, label_map: header + f"{model} {label};\n"}
    if mirrored is not None:
        files[shadow_map] = header + f"{model} {mirrored};\n"
    return files
