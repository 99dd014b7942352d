"""The kustomize inputs that come from the compose stack's files, generated, never copied by hand.

One source, two deployments: the ``tfserving`` and ``exporter`` services of
``docker-compose.yml`` (``+ docker-compose.cpu.yml`` for the CPU variant), as
Compose itself parses them with ``.env`` (``serving.config.compose``), give
each variant's Component its image, command line, resources, ``/tmp`` size and
the probes of compose's healthcheck; ``serving/*.config`` become the files of
the ``tfserving-config`` ConfigMap; ``monitoring/prometheus/rules/*.yml``
become the ``PrometheusRule``. The outputs are committed (kustomize reads only
files below a kustomization), and ``stale_files`` (``python -m deploy.k8s
check``, and the tests) reports every output that differs from a fresh render.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from serving.config.compose import load_compose_model

__all__ = [
    "VARIANTS",
    "Checkout",
    "compose_services",
    "container_patch",
    "cpu_quantity",
    "duration_seconds",
    "exporter_patch",
    "memory_quantity",
    "prometheus_rule",
    "render_all",
    "stale_files",
    "write_all",
]

# Variant → the compose files that describe it (as `docker compose -f ... -f ...`).
VARIANTS: dict[str, tuple[str, ...]] = {
    "gpu": ("docker-compose.yml",),
    "cpu": ("docker-compose.yml", "docker-compose.cpu.yml"),
}
SERVER_SERVICE = "tfserving"
EXPORTER_SERVICE = "exporter"
# Compose refuses to interpolate the file without it; nothing read here uses it.
_UNUSED_ENV = {"GRAFANA_ADMIN_PASSWORD": "unused-by-deploy-k8s"}
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Checkout:
    """Where the sources and the generated files live (a repository checkout or a copy of one)."""

    root: Path

    @property
    def k8s(self) -> Path:
        return self.root / "deploy" / "k8s"

    @property
    def serving_dir(self) -> Path:
        return self.root / "serving"

    @property
    def rules_dir(self) -> Path:
        return self.root / "monitoring" / "prometheus" / "rules"

    def compose_files(self, variant: str) -> list[Path]:
        return [self.root / name for name in VARIANTS[variant]]


def compose_services(checkout: Checkout, variant: str) -> dict[str, dict]:
    """The canonical compose model's services of ``variant`` (``tfserving`` and what it depends on).

    Interpolation uses ``.env`` and the defaults in the files only: the
    process environment is left out (but for PATH), so a shell that exports,
    say, TFS_CPUS renders the same manifests as any other.
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **_UNUSED_ENV}
    model = load_compose_model(checkout.compose_files(variant), services=[SERVER_SERVICE],
                               env=env, project_dir=checkout.root)
    return model["services"]


def duration_seconds(text: str) -> float:
    """A Go duration as Compose prints it (``10s``, ``10m0s``, ``1h30m``) in seconds."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def memory_quantity(limit: str | int) -> str:
    """Compose's ``mem_limit`` (bytes) as a Kubernetes quantity, exact (``16Gi``, ``512Mi``)."""
    size = int(limit)
    for suffix, unit in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def cpu_quantity(cpus: float | str) -> str:
    """Compose's ``cpus`` as a Kubernetes quantity (``4``, ``500m``)."""
    millis = round(float(cpus) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _tmpfs_size(service: Mapping, target: str = "/tmp") -> str:
    for entry in service.get("tmpfs", []):
        path, _, options = entry.partition(":")
        size = dict(o.partition("=")[::2] for o in options.split(",") if o).get("size")
        if path == target and size:
            found = re.fullmatch(r"(\d+)([kmg]?)", size.lower())
            if found is None:
                raise ValueError(f"{entry}: size={size} is not a whole number with an optional k, m or g")
            number, unit = found.groups()
            return memory_quantity(int(number) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit])
    raise ValueError(f"the service has no sized tmpfs at {target}")


def _resources(service: Mapping) -> dict:
    # Requests equal limits: the Guaranteed QoS class, as compose reserves the whole limit.
    amounts = {"cpu": cpu_quantity(service["cpus"]), "memory": memory_quantity(service["mem_limit"])}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _healthcheck_command(test: list[str]) -> list[str]:
    if test[0] == "CMD":
        return list(test[1:])
    if test[0] == "CMD-SHELL":
        return ["/bin/sh", "-c", test[1]]
    raise ValueError(f"healthcheck test {test[0]!r} has no exec form")


def _probes(healthcheck: Mapping) -> dict:
    """Compose's healthcheck as a startup and a readiness probe (the same exec command).

    The startup probe allows what compose allows before calling the container
    unhealthy: ``start_period`` (loading and warmup) plus ``retries`` intervals.
    """
    interval = duration_seconds(healthcheck["interval"])
    timeout = duration_seconds(healthcheck["timeout"])
    start = duration_seconds(healthcheck.get("start_period", "0s"))
    check = {"exec": {"command": _healthcheck_command(healthcheck["test"])},
             "periodSeconds": math.ceil(interval), "timeoutSeconds": math.ceil(timeout)}
    return {
        "startupProbe": {**check, "failureThreshold": math.ceil(start / interval) + int(healthcheck["retries"])},
        "readinessProbe": dict(check),
    }


def _header(variant: str, what: str) -> str:
    files = " + ".join(VARIANTS[variant])
    return (f"# GENERATED by `python -m deploy.k8s generate` from {what} of {files} as Compose parses it\n"
            f"# (with .env). Do not edit: change the compose file, then regenerate; the tests fail on a stale copy.\n")


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line strings (rules, scripts), no anchors for repeated values."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(doc: object) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096,
                     allow_unicode=True)


def _workload_patch(api_version: str, kind: str, name: str, service: Mapping, **extra: object) -> dict:
    """A strategic-merge patch giving the workload ``name``'s container (also ``name``) the compose
    service's image, entrypoint and command, resources and ``/tmp`` size, plus ``extra`` fields."""
    container = {
        "name": name,
        "image": service["image"],
        "command": list(service["entrypoint"]),
        "args": list(service["command"]),
        **extra,
        "resources": _resources(service),
    }
    tmp = {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": _tmpfs_size(service)}}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [container], "volumes": [tmp]}}}}


def container_patch(service: Mapping) -> dict:
    """The patch of the ``tfserving`` Deployment from the compose ``tfserving`` service (with its probes)."""
    return _workload_patch("apps/v1", "Deployment", SERVER_SERVICE, service, **_probes(service["healthcheck"]))


# Compose's CUDA JIT cache lives on a host bind mount; the Kubernetes workloads have none.
COMPOSE_ONLY_ENV_PREFIX = "CUDA_CACHE_"


def exporter_patch(service: Mapping) -> dict:
    """The patch of the ``exporter`` Job from the compose ``exporter`` service (with its environment).

    Compose prints a literal ``$`` of the script as ``$$``; Kubernetes reads
    ``$$`` in ``command``/``args`` as an escaped ``$`` too, so the script passes
    through unchanged. ``CUDA_CACHE_*`` are left out: they name compose's host
    bind mount for CUDA's JIT cache, which the Job has no counterpart of.
    """
    env = [{"name": k, "value": str(v)} for k, v in sorted(service.get("environment", {}).items())
           if not k.startswith(COMPOSE_ONLY_ENV_PREFIX)]
    return _workload_patch("batch/v1", "Job", EXPORTER_SERVICE, service, env=env)


def prometheus_rule(rules_dir: Path) -> dict:
    """One ``PrometheusRule`` holding the groups of every rule file, in file-name order."""
    groups = []
    for path in sorted(rules_dir.glob("*.yml")):
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "tfserving", "labels": {"app.kubernetes.io/name": "tfserving",
                                                     "app.kubernetes.io/part-of": "tfs-stack"}},
        "spec": {"groups": groups},
    }


def render_all(checkout: Checkout) -> dict[Path, str]:
    """Every generated file (absolute path → text)."""
    out: dict[Path, str] = {}
    for variant in VARIANTS:
        services = compose_services(checkout, variant)
        generated = checkout.k8s / "components" / variant / "generated"
        out[generated / "tfserving.yaml"] = (_header(variant, "the `tfserving` service")
                                             + _dump(container_patch(services[SERVER_SERVICE])))
        out[generated / "exporter.yaml"] = (_header(variant, "the `exporter` service")
                                            + _dump(exporter_patch(services[EXPORTER_SERVICE])))
    base = checkout.k8s / "base" / "generated"
    out[base / "prometheusrule.yaml"] = (
        "# GENERATED by `python -m deploy.k8s generate` from monitoring/prometheus/rules/*.yml (every group,\n"
        "# file-name order). Do not edit: change the rule files (promtool-tested), then regenerate.\n"
        + _dump(prometheus_rule(checkout.rules_dir)))
    # Byte-for-byte copies: a ConfigMap file must be the file TF Serving reads under compose.
    for path in sorted(checkout.serving_dir.glob("*.config")):
        out[base / "serving" / path.name] = path.read_text()
    return out


def _generated_dirs(checkout: Checkout) -> list[Path]:
    return [checkout.k8s / "components" / v / "generated" for v in VARIANTS] + [checkout.k8s / "base" / "generated"]


def stale_files(checkout: Checkout) -> list[str]:
    """Generated files that are missing, differ from a fresh render, or are left over (relative paths)."""
    rendered = render_all(checkout)
    stale = [path for path, text in rendered.items() if not path.is_file() or path.read_text() != text]
    for directory in _generated_dirs(checkout):
        stale += [p for p in directory.rglob("*") if p.is_file() and p not in rendered]
    return sorted(str(p.relative_to(checkout.root)) for p in stale)


def write_all(checkout: Checkout) -> list[str]:
    """Render and write every generated file, removing left-over ones; returns what changed."""
    changed = stale_files(checkout)
    rendered = render_all(checkout)
    for directory in _generated_dirs(checkout):
        for path in directory.rglob("*"):
            if path.is_file() and path not in rendered:
                path.unlink()
    for path, text in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return changed
