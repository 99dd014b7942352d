"""``python -m serving.rollout k8s``: canary weight steps as route patches, printed or applied with kubectl.

The printed patches are applied to the routes with the real ``kubectl patch
--local`` (no cluster: it patches the file's object offline), to the canary
overlay rendered by ``kubectl kustomize`` when this checkout has
``deploy/k8s``, and to a minimal fixture of the same shape always.
``--apply`` would change a cluster; no cluster runs here, so a stand-in
``kubectl`` on PATH records its arguments instead.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serving.checkout import REPO_ROOT
from serving.rollout.kubernetes import RolloutError, load_objects, parse_steps, weight_patches
from tests.support.rollout import FIXTURE

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: patches cannot be applied")



def _overlay_objects(name: str) -> list[dict]:
    overlay = REPO_ROOT / "deploy" / "k8s" / "overlays" / name
    if not overlay.is_dir():
        pytest.skip(f"{overlay} is not in this checkout (deploy/k8s comes with the Kubernetes manifests)")
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: the overlay cannot be rendered")
    out = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return load_objects(out.stdout)


SOURCES = {
    "fixture-gateway": (lambda: load_objects(FIXTURE), "gateway"),
    "fixture-istio": (lambda: load_objects(FIXTURE), "istio"),
    "overlay-canary": (lambda: _overlay_objects("canary"), "gateway"),
    "overlay-canary-istio": (lambda: _overlay_objects("canary-istio"), "istio"),
}


def _patch_locally(obj: dict, operations: list, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / f"{obj['kind']}-{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj))
    return subprocess.run([KUBECTL, "patch", "--local", "-f", str(path), "--type=json", "-p", json.dumps(operations),
                           "-o", "json"], capture_output=True, text=True, timeout=120)


def _without_weights(value):
    if isinstance(value, dict):
        return {k: _without_weights(v) for k, v in value.items() if k != "weight"}
    if isinstance(value, list):
        return [_without_weights(v) for v in value]
    return value


def _weights(obj: dict) -> list[dict[str, int]]:
    """Per rule that names both Services: Service -> weight."""
    if obj["kind"] == "VirtualService":
        rules = [[(r["destination"]["host"].split(".")[0], r.get("weight")) for r in h["route"]]
                 for h in obj["spec"]["http"]]
    else:
        rules = [[(r["name"], r.get("weight")) for r in rule["backendRefs"]] for rule in obj["spec"]["rules"]]
    return [dict(rule) for rule in rules if {"tfserving", "tfserving-canary"} <= dict(rule).keys()]


@needs_kubectl
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_each_step_applies_cleanly_and_sets_the_weights(source, tmp_path):
    load, mesh = SOURCES[source]
    objects = load()
    routes = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in
              (("VirtualService",) if mesh == "istio" else ("HTTPRoute", "GRPCRoute"))}
    for percent in (0, 10, 50, 100):
        patches = weight_patches(objects, percent, mesh=mesh)
        assert {(p.kind, p.name) for p in patches} == set(routes)
        for patch in patches:
            out = _patch_locally(routes[(patch.kind, patch.name)], list(patch.operations), tmp_path)
            assert out.returncode == 0, out.stderr
            patched = json.loads(out.stdout)
            assert _weights(patched) and all(w == {"tfserving": 100 - percent, "tfserving-canary": percent}
                                             for w in _weights(patched)), patched
            # everything but the weights is as rendered
            assert _without_weights(patched["spec"]) == _without_weights(routes[(patch.kind, patch.name)]["spec"])


@needs_kubectl
def test_a_route_whose_backends_moved_refuses_the_patch(tmp_path):
    objects = load_objects(FIXTURE)
    patch, = (p for p in weight_patches(objects, 10) if p.kind == "HTTPRoute")
    route = next(o for o in objects if o["kind"] == "HTTPRoute")
    refs = route["spec"]["rules"][1]["backendRefs"]
    refs.reverse()  # someone edited the live route: index 0 is the canary now
    out = _patch_locally(route, list(patch.operations), tmp_path)
    assert out.returncode != 0 and "test" in out.stderr.lower()


def test_namespace_is_the_routes_own_else_the_overlays_and_untouched_rules_stay_out():
    patches = {p.kind: p for p in weight_patches(load_objects(FIXTURE), 10)}
    assert patches["GRPCRoute"].namespace == "serving"
    assert patches["HTTPRoute"].namespace == "tfs-stack"  # none of its own: the Deployment's
    # rule 0 names only `other`: no operation touches it; the GRPCRoute lists the canary first
    assert all(op["path"].startswith("/spec/rules/1/") for op in patches["HTTPRoute"].operations)
    assert patches["GRPCRoute"].operations[0] == {"op": "test", "path": "/spec/rules/0/backendRefs/1/name",
                                                  "value": "tfserving"}
    args = patches["HTTPRoute"].kubectl_args()
    assert args[:6] == ["patch", "httproute", "tfserving-rest", "-n", "tfs-stack", "--type=json"]


def test_unknown_backends_and_bad_steps_are_refused_with_the_rule():
    with pytest.raises(RolloutError, match="no HTTPRoute/GRPCRoute splits traffic between backends 'a' and 'b'"):
        weight_patches(load_objects(FIXTURE), 10, stable="a", canary="b")
    assert parse_steps("0,10,50,100") == (0, 10, 50, 100)
    for bad in ("10,5", "0,150", "ten"):
        with pytest.raises(RolloutError):
            parse_steps(bad)


# ---------------------------------------------------------------- the CLI

def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving.rollout", "k8s", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


@needs_kubectl
def test_printed_commands_are_kubectl_patches_that_apply(tmp_path):
    manifest = tmp_path / "canary.yaml"
    manifest.write_text(FIXTURE)
    out = _cli("canary", "--manifest", str(manifest))
    assert out.returncode == 0, out.stderr
    headers = [line for line in out.stdout.splitlines() if line.startswith("#")]
    assert headers == ["# canary 0%, stable 100%", "# canary 10%, stable 90%", "# canary 50%, stable 50%",
                       "# canary 100%, stable 0%"]
    commands = [shlex.split(line) for line in out.stdout.splitlines() if line.startswith("kubectl ")]
    assert len(commands) == 8  # two routes per step
    route = next(o for o in load_objects(FIXTURE) if o["kind"] == "HTTPRoute")
    last = next(c for c in reversed(commands) if c[1:4] == ["patch", "httproute", "tfserving-rest"])
    applied = _patch_locally(route, json.loads(last[last.index("-p") + 1]), tmp_path)
    assert applied.returncode == 0 and _weights(json.loads(applied.stdout)) == [
        {"tfserving": 0, "tfserving-canary": 100}]


def _fake_kubectl(directory: Path, fail_on_call: int = 0) -> Path:
    """A stand-in for kubectl (no cluster runs here): appends its argv to calls.jsonl, fails on one call."""
    log = directory / "calls.jsonl"
    script = directory / "kubectl"
    script.write_text(f"""#!{sys.executable}
import json, sys
with open({str(log)!r}, "a") as handle:
    handle.write(json.dumps(sys.argv[1:]) + "\\n")
calls = sum(1 for _ in open({str(log)!r}))
if calls == {fail_on_call}:
    sys.stderr.write("Error from server (NotFound): httproutes.gateway.networking.k8s.io not found\\n")
    sys.exit(1)
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return log


def test_apply_runs_kubectl_patch_for_every_route_of_every_step_in_order(tmp_path):
    manifest = tmp_path / "canary.yaml"
    manifest.write_text(FIXTURE)
    log = _fake_kubectl(tmp_path)
    out = _cli("canary", "--manifest", str(manifest), "--steps", "10,50", "--apply",
               env={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(c[0], c[1], c[2]) for c in calls] == [("patch", "httproute", "tfserving-rest"),
                                                   ("patch", "grpcroute", "tfserving-grpc")] * 2
    weights = [[op["value"] for op in json.loads(c[c.index("-p") + 1]) if op["op"] == "add"] for c in calls]
    assert weights == [[90, 10], [90, 10], [50, 50], [50, 50]]  # stable, then canary, whatever their order
    assert "canary at 50%, stable at 50%" in out.stdout


def test_rollback_applies_stable_100_and_a_failing_kubectl_stops_with_exit_1(tmp_path):
    manifest = tmp_path / "canary.yaml"
    manifest.write_text(FIXTURE)
    log = _fake_kubectl(tmp_path, fail_on_call=1)
    path = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    out = _cli("rollback", "--mesh", "istio", "--manifest", str(manifest), "--apply", env=path)
    assert out.returncode == 1 and "NotFound" in out.stderr and "rollout failed" in out.stderr
    log.write_text("")
    _fake_kubectl(tmp_path)  # succeeds from now on
    out = _cli("rollback", "--mesh", "istio", "--manifest", str(manifest), "--apply", env=path)
    assert out.returncode == 0, out.stderr
    call, = [json.loads(line) for line in log.read_text().splitlines()]
    assert call[:5] == ["patch", "virtualservice", "tfserving", "-n", "tfs-stack"]
    assert [op["value"] for op in json.loads(call[-1]) if op["op"] == "add"] == [100, 0]
