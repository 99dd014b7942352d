"""Canary traffic weights in Kubernetes: the canary overlay's routes stepped 0 -> 10 -> 50 -> 100, or rolled back.

The version rollout of ``serving.rollout`` moves TF Serving's version labels
inside one server. On Kubernetes a canary is a second Deployment (its own
image, flags or model) behind a weighted split, and the rollout moves the
split: ``deploy/k8s/overlays/canary`` routes REST (``HTTPRoute``) and gRPC
(``GRPCRoute``) through the Gateway API, ``overlays/canary-istio`` through an
Istio ``VirtualService``, each starting at stable 100 / canary 0.

A step is one JSON patch (RFC 6902, ``kubectl patch --type=json``) per route.
It is computed from the rendered overlay (``kubectl kustomize``, or a file of
rendered objects): for every rule that names both backends, a ``test`` of each
backend's name at its index (so a route whose backends moved refuses the patch
instead of shifting the wrong weight) and an ``add`` of its weight. Rules that
name one backend only are left alone. ``rollback`` is the step to canary 0.

Nothing here needs a cluster to print; ``--apply`` runs ``kubectl patch``.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

import yaml

from serving.rollout.plan import RolloutError

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = [
    "MESHES",
    "DEFAULT_STEPS",
    "DEFAULT_STABLE",
    "DEFAULT_CANARY",
    "RoutePatch",
    "parse_steps",
    "load_objects",
    "render_overlay",
    "weight_patches",
    "apply_patches",
]

# The route kinds each overlay splits traffic with.
MESHES: dict[str, tuple[str, ...]] = {"gateway": ("HTTPRoute", "GRPCRoute"), "istio": ("VirtualService",)}
DEFAULT_STEPS = (0, 10, 50, 100)
DEFAULT_STABLE, DEFAULT_CANARY = "tfserving", "tfserving-canary"


@dataclass(frozen=True)
class RoutePatch:
    """One route's weights at one step: the JSON patch and where it goes."""

    kind: str
    name: str
    namespace: Optional[str]
    canary_percent: int
    operations: tuple[Mapping[str, JSON], ...]

    def kubectl_args(self) -> list[str]:
        """``kubectl``'s arguments (without the program) that apply this patch."""
        where = ["-n", self.namespace] if self.namespace else []
        return ["patch", self.kind.lower(), self.name, *where, "--type=json",
                "-p", json.dumps(list(self.operations), separators=(",", ":"))]

    def command(self, kubectl: str = "kubectl") -> str:
        return shlex.join([kubectl, *self.kubectl_args()])


def parse_steps(text: str) -> tuple[int, ...]:
    """``0,10,50,100`` as canary percentages: integers in [0, 100], rising."""
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise RolloutError(f"--steps takes canary percentages like 0,10,50,100, got {text!r}") from None
    if any(not 0 <= s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
        raise RolloutError(f"--steps must rise through percentages in [0, 100], got {text!r}")
    return steps


def load_objects(text: str) -> list[dict[str, JSON]]:
    """The Kubernetes objects of a multi-document YAML (``kubectl kustomize``'s output)."""
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict) and doc.get("kind")]


def render_overlay(overlay: Path, kubectl: str = "kubectl") -> list[dict[str, JSON]]:
    """``kubectl kustomize OVERLAY``'s objects (no cluster needed)."""
    try:
        out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise RolloutError(f"{kubectl} not found: install kubectl or give --manifest with the rendered "
                           f"overlay") from None
    if out.returncode != 0:
        raise RolloutError(f"kubectl kustomize {overlay} failed: {out.stderr.strip()}")
    return load_objects(out.stdout)


def _backend_name(ref: Mapping[str, Any], istio: bool) -> Optional[str]:
    """The Service a route entry sends to: ``name`` (Gateway API); the ``subset``, else the first label of
    ``destination.host`` (Istio: ``tfserving.tfs-stack.svc.cluster.local`` is ``tfserving``)."""
    if not istio:
        return ref.get("name")
    destination = ref.get("destination") or {}
    return destination.get("subset") or str(destination.get("host", "")).split(".")[0] or None


def _operations(route: Mapping[str, Any], canary_percent: int, stable: str, canary: str) -> list[dict[str, JSON]]:
    istio = route["kind"] == "VirtualService"
    rules, refs_key = ("http", "route") if istio else ("rules", "backendRefs")
    ops: list[dict[str, JSON]] = []
    for i, rule in enumerate(route.get("spec", {}).get(rules) or []):
        refs = rule.get(refs_key) or []
        names = [_backend_name(ref, istio) for ref in refs]
        if stable not in names or canary not in names:
            continue
        for backend, weight in ((stable, 100 - canary_percent), (canary, canary_percent)):
            j = names.index(backend)
            base = f"/spec/{rules}/{i}/{refs_key}/{j}"
            if istio:
                field = "subset" if refs[j]["destination"].get("subset") else "host"
                identity, value = f"destination/{field}", refs[j]["destination"][field]
            else:
                identity, value = "name", refs[j]["name"]
            ops.append({"op": "test", "path": f"{base}/{identity}", "value": value})
            ops.append({"op": "add", "path": f"{base}/weight", "value": weight})
    return ops


def weight_patches(objects: Iterable[Mapping[str, Any]], canary_percent: int, *, mesh: str = "gateway",
                   stable: str = DEFAULT_STABLE, canary: str = DEFAULT_CANARY,
                   namespace: Optional[str] = None) -> list[RoutePatch]:
    """One patch per route of ``mesh`` that splits between ``stable`` and ``canary``.

    The namespace is the route's own, else ``namespace``, else the namespace of
    the rendered Deployments (a route kustomize left without one lands where
    the overlay's workloads are). ``RolloutError`` when no route splits
    between the two backends.
    """
    if mesh not in MESHES:
        raise RolloutError(f"--mesh is one of {', '.join(MESHES)}, got {mesh!r}")
    objects = list(objects)
    fallback = namespace or next((o["metadata"].get("namespace") for o in objects
                                  if o.get("kind") == "Deployment" and o["metadata"].get("namespace")), None)
    patches = []
    for route in (o for o in objects if o.get("kind") in MESHES[mesh]):
        ops = _operations(route, canary_percent, stable, canary)
        if ops:
            meta = route["metadata"]
            patches.append(RoutePatch(route["kind"], meta["name"], meta.get("namespace") or fallback,
                                      canary_percent, tuple(ops)))
    if not patches:
        kinds = "/".join(MESHES[mesh])
        raise RolloutError(f"no {kinds} splits traffic between backends {stable!r} and {canary!r} "
                           f"(a rule must name both); check --stable-backend/--canary-backend and the overlay")
    return patches


def apply_patches(steps: Sequence[Sequence[RoutePatch]], *, kubectl: str = "kubectl", interval_s: float = 0.0,
                  echo: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> None:
    """Run ``kubectl patch`` for every route of every step, ``interval_s`` apart between steps.

    Stops at the first failing ``kubectl`` with ``RolloutError`` (its stderr
    included): later steps are not applied.
    """
    for index, step in enumerate(steps):
        if index and interval_s > 0:
            echo(f"waiting {interval_s:g} s before the next step")
            sleep(interval_s)
        for patch in step:
            echo(f"applying canary {patch.canary_percent}% to {patch.kind}/{patch.name}")
            try:
                out = subprocess.run([kubectl, *patch.kubectl_args()], capture_output=True, text=True, timeout=120)
            except FileNotFoundError:
                raise RolloutError(f"{kubectl} not found: nothing was applied from this step on") from None
            if out.returncode != 0:
                raise RolloutError(f"{patch.command(kubectl)} failed ({out.returncode}): {out.stderr.strip()}")
