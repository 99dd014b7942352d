"""Where a canary's share of traffic is set: the gateway's canary routes, or Kubernetes route weights.

One seam, :class:`TrafficRoutes`: ``set_weight(model, percent)`` sends about
``percent`` of the model's unlabeled REST traffic to the ``canary`` label and
the rest to ``stable``; ``clear(model)`` removes the model's routes (no canary:
requests pass unchanged). The weight is the canary's percentage everywhere:
``canary --weight``, ``auto --steps`` and ``k8s canary --steps``.
``set_weight(model, 0, shadow=percent)`` (the gateways only) also mirrors that
share of the model's unlabeled traffic to ``canary``, answers discarded
(``canary --shadow``); any other write of the model's routes ends the shadow.

Routes are served state, changed like a models config (``serving.config.config_lock``):
each change holds the lock ``.canary.d.lock`` beside the gateway's ``nginx.conf``
from its first write to the end of the reload, and, given ``expected`` (the
model's :meth:`state` as the command read it), writes only if the model's routes
are still that (else ``StaleConfig``: another operator changed them; nothing of
this command's was written). Each write returns the new state for the next one.

- :class:`HostNginx`: an nginx on this host (the tests' gateway): the files
  of ``gateway.canary`` beside its ``nginx.conf``, ``nginx -t``, then SIGHUP to
  the master (graceful: old workers finish what they hold), and a wait until
  new workers run the new config.
- :class:`ComposeGateway`: the compose ``gateway`` container (found by its
  compose labels): the files written into its rendered config directory
  (``/tmp``, a tmpfs: a restarted gateway comes back without canary routes,
  so run the ``canary`` command again), ``nginx -t`` and ``nginx -s reload``
  with ``docker exec``.
- :class:`NoGateway`: the embedded stack, which has no gateway: weight 0 only
  (gRPC clients of the SDK default to ``stable`` by themselves).
- :class:`KubernetesRoutes`: the canary overlay's HTTPRoute/GRPCRoute (or
  Istio) weights between the stable and canary Services, printed or applied
  with ``kubectl`` (``serving.rollout.kubernetes``).
"""
from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence

from gateway.canary import CANARY_DIR, MIRROR_FILE, MIRROR_TEXT, canary_route_files, route_file_names
from serving.config.config_lock import ABSENT, ConfigLock, StaleConfig, read_snapshot
from serving.rollout import kubernetes
from serving.rollout.plan import RolloutError

if TYPE_CHECKING:
    from serving.codec import JSON

__all__ = ["TrafficRoutes", "HostNginx", "ComposeGateway", "NoGateway", "KubernetesRoutes", "nginx_workers",
           "nginx_reloaded", "routes_for"]

Run = Callable[..., subprocess.CompletedProcess]


class TrafficRoutes(Protocol):
    """Sets the share of a model's unlabeled traffic the canary gets; each call takes effect before it returns.

    ``expected``: the model's :meth:`state` this command last read or wrote (None: write whatever is there);
    a mismatch raises ``StaleConfig``. Both return the model's new state."""

    def set_weight(self, model: str, weight: float, *, shadow: float = 0.0,
                   expected: Optional[str] = None) -> str: ...

    def clear(self, model: str, *, expected: Optional[str] = None) -> str: ...

    def state(self, model: str) -> str: ...

    def describe(self) -> str: ...


def _route_files(model: str, weight: float, shadow: float) -> dict[str, Optional[str]]:
    """Every route file of ``model``: the text to write, None to remove (a shadow that ends, say)."""
    return {**dict.fromkeys(route_file_names(model)), **canary_route_files(model, weight, shadow=shadow)}


def _with_mirror(model: str, files: Mapping[str, Optional[str]], other_shadows: Iterable[str]
                 ) -> dict[str, Optional[str]]:
    """``files`` plus the mirror switch: on while this model or another (``other_shadows``: the ``.shadow``
    files there are, this model's included or not) is in shadow."""
    own = route_file_names(model)[2]
    shadowed = files.get(own) is not None or any(Path(name).name != Path(own).name for name in other_shadows)
    return {**files, MIRROR_FILE: MIRROR_TEXT if shadowed else None}


def _check_state(model: str, expected: Optional[str], current: str, where: str) -> None:
    if expected is not None and expected != current:
        raise StaleConfig(f"{model}'s routes in {where} changed since this command read them (another "
                          "operator's canary, shadow, promote or rollback): nothing of this command's routes "
                          "was written; check `python -m serving.rollout status` and rerun")


def nginx_workers(master_pid: int) -> set[int]:
    """The child processes of an nginx master (its workers, and old ones still finishing requests)."""
    try:
        text = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text()
    except OSError:
        return set()
    return {int(pid) for pid in text.split()}


def _accepting(worker: int) -> bool:
    """Whether the nginx worker ``worker`` still runs and is not shutting down."""
    try:
        title = Path(f"/proc/{worker}/cmdline").read_bytes()
    except OSError:
        return False
    return bool(title) and b"shutting down" not in title


def nginx_reloaded(master_pid: int, workers_before: set[int]) -> bool:
    """Whether nginx ``master_pid`` switched to a new config since it ran ``workers_before``: new workers run
    (the master starts them once it read the config) and no old one accepts any more (each sets its title to
    "... is shutting down" and closes its listeners)."""
    return bool(nginx_workers(master_pid) - workers_before) and not any(_accepting(w) for w in workers_before)


class HostNginx:
    """An nginx on this host, given its ``nginx.conf`` (the canary files go beside it)."""

    def __init__(self, conf: Path, *, nginx: str = "nginx", reload_timeout: float = 30.0,
                 run: Run = subprocess.run) -> None:
        self.conf = Path(conf)
        self.nginx = nginx
        self.reload_timeout = reload_timeout
        self._run = run

    def describe(self) -> str:
        return f"nginx {self.conf}"

    def _pid(self) -> int:
        match = re.search(r"^\s*pid\s+([^;\s]+)\s*;", self.conf.read_text(), re.M)
        pid_file = Path(match.group(1)) if match else self.conf.parent / "nginx.pid"
        try:
            return int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            raise RolloutError(f"no running nginx for {self.conf}: {pid_file} names no process") from None

    def _write(self, files: Mapping[str, Optional[str]]) -> None:
        for relative, text in files.items():
            path = self.conf.parent / relative
            if text is None:
                path.unlink(missing_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    def lock(self) -> ConfigLock:
        """The routes' lock (``.canary.d.lock`` beside nginx.conf): one change and its reload at a time."""
        return ConfigLock(self.conf.parent / CANARY_DIR)

    def state(self, model: str) -> str:
        """The version of ``model``'s routes: a SHA-256 of its label file (each write rewrites its header)."""
        return read_snapshot(self.conf.parent / route_file_names(model)[1]).version

    def _apply(self, model: str, files: Mapping[str, Optional[str]], expected: Optional[str]) -> str:
        with self.lock().hold(self.reload_timeout, who=f"serving.rollout routes {model}"):
            _check_state(model, expected, self.state(model), str(self.conf.parent))
            shadows = [p.name for p in (self.conf.parent / CANARY_DIR).glob("*.shadow")]
            self._reload(_with_mirror(model, files, shadows))
            return self.state(model)

    def _reload(self, files: Mapping[str, Optional[str]]) -> None:
        pid = self._pid()
        self._write(files)
        check = self._run([self.nginx, "-t", "-q", "-e", "stderr", "-p", f"{self.conf.parent}/", "-c",
                           str(self.conf)], capture_output=True, text=True, timeout=60)
        if check.returncode != 0:
            raise RolloutError(f"nginx refused the canary routes (nothing reloaded): {check.stderr.strip()}")
        before = nginx_workers(pid)
        os.kill(pid, signal.SIGHUP)  # graceful reload
        deadline = time.monotonic() + self.reload_timeout
        while not nginx_reloaded(pid, before):
            if time.monotonic() > deadline:
                raise RolloutError(f"nginx {pid} did not switch to the new config within {self.reload_timeout:g} s")
            time.sleep(0.02)

    def set_weight(self, model: str, weight: float, *, shadow: float = 0.0, expected: Optional[str] = None) -> str:
        return self._apply(model, _route_files(model, weight, shadow), expected)

    def clear(self, model: str, *, expected: Optional[str] = None) -> str:
        return self._apply(model, dict.fromkeys(route_file_names(model)), expected)


class ComposeGateway:
    """The compose stack's ``gateway`` container, reached with ``docker exec``."""

    def __init__(self, *, project: str = "tfs-stack", service: str = "gateway", conf: str = "/tmp/nginx.conf",
                 docker: str = "docker", run: Run = subprocess.run) -> None:
        self.project, self.service, self.conf, self.docker = project, service, conf, docker
        self._run = run

    def describe(self) -> str:
        return f"compose {self.project} service {self.service}"

    def _docker(self, *args: str, stdin: Optional[str] = None) -> str:
        try:
            out = self._run([self.docker, *args], input=stdin, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            raise RolloutError(f"{self.docker} not found: the compose gateway cannot be reached") from None
        if out.returncode != 0:
            raise RolloutError(f"{self.docker} {' '.join(args[:2])} failed: {out.stderr.strip()}")
        return out.stdout

    def container(self) -> str:
        ids = self._docker("ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                           "--filter", f"label=com.docker.compose.service={self.service}").split()
        if not ids:
            raise RolloutError(f"no running {self.service} container of compose project {self.project} "
                               "(`make up` starts it)")
        return ids[0]

    def commands(self, container: str, files: Mapping[str, Optional[str]]) -> list[tuple[list[str], Optional[str]]]:
        """The ``docker`` argument lists (and their stdin) that apply ``files`` and reload."""
        conf_dir = str(Path(self.conf).parent)
        steps: list[tuple[list[str], Optional[str]]] = [
            (["exec", container, "mkdir", "-p", f"{conf_dir}/{CANARY_DIR}"], None)]
        for relative, text in files.items():
            target = f"{conf_dir}/{relative}"
            if text is None:
                steps.append((["exec", container, "rm", "-f", target], None))
            else:
                steps.append((["exec", "-i", container, "sh", "-c", 'cat > "$1.tmp" && mv "$1.tmp" "$1"', "sh",
                               target], text))
        steps.append((["exec", container, "nginx", "-t", "-q", "-c", self.conf], None))
        steps.append((["exec", container, "nginx", "-s", "reload", "-c", self.conf], None))
        return steps

    def lock(self) -> ConfigLock:
        """The routes' lock on this host (the container's files are changed only through ``docker exec``)."""
        return ConfigLock(Path(tempfile.gettempdir()) / f"tfs-stack-{self.project}-{self.service}-{CANARY_DIR}")

    def state(self, model: str) -> str:
        container = self.container()
        target = f"{Path(self.conf).parent}/{route_file_names(model)[1]}"
        text = self._docker("exec", container, "sh", "-c", 'cat "$1" 2>/dev/null || true', "sh", target)
        return hashlib.sha256(text.encode()).hexdigest() if text else ABSENT

    def _apply(self, model: str, files: Mapping[str, Optional[str]], expected: Optional[str]) -> str:
        with self.lock().hold(600.0, who=f"serving.rollout routes {model}"):
            if expected is not None:
                _check_state(model, expected, self.state(model), self.describe())
            container = self.container()
            listed = self._docker("exec", container, "sh", "-c", 'ls "$1" 2>/dev/null || true', "sh",
                                  f"{Path(self.conf).parent}/{CANARY_DIR}")
            shadows = [name for name in listed.split() if name.endswith(".shadow")]
            for args, stdin in self.commands(container, _with_mirror(model, files, shadows)):
                self._docker(*args, stdin=stdin)
            label_map = files.get(route_file_names(model)[1])
            return hashlib.sha256(label_map.encode()).hexdigest() if label_map else ABSENT

    def set_weight(self, model: str, weight: float, *, shadow: float = 0.0, expected: Optional[str] = None) -> str:
        return self._apply(model, _route_files(model, weight, shadow), expected)

    def clear(self, model: str, *, expected: Optional[str] = None) -> str:
        return self._apply(model, dict.fromkeys(route_file_names(model)), expected)


class NoGateway:
    """A stack without a gateway (the embedded one): nothing splits traffic, so only weight 0 is possible."""

    def describe(self) -> str:
        return "no gateway"

    def state(self, model: str) -> str:
        return ""

    def set_weight(self, model: str, weight: float, *, shadow: float = 0.0, expected: Optional[str] = None) -> str:
        if weight or shadow:
            flag = f"--weight {weight:g}" if weight else f"--shadow {shadow:g}"
            raise RolloutError(f"{flag} needs a gateway that splits traffic (the compose stack's, "
                               "--nginx-conf for an nginx of this host, or --k8s); this stack has none")
        return ""

    def clear(self, model: str, *, expected: Optional[str] = None) -> str:
        return ""


class KubernetesRoutes:
    """The canary overlay's route weights (one Deployment per side, so ``model`` does not narrow them)."""

    def __init__(self, objects: Iterable[Mapping[str, JSON]], *, mesh: str = "gateway",
                 stable: str = kubernetes.DEFAULT_STABLE, canary: str = kubernetes.DEFAULT_CANARY,
                 namespace: Optional[str] = None, kubectl: str = "kubectl", apply: bool = False,
                 echo: Callable[[str], None] = print) -> None:
        self.objects = list(objects)
        self.mesh, self.stable, self.canary, self.namespace = mesh, stable, canary, namespace
        self.kubectl, self.apply, self.echo = kubectl, apply, echo

    def describe(self) -> str:
        return f"kubernetes {self.mesh} routes {self.stable}/{self.canary}"

    def patches(self, weight: float) -> list[kubernetes.RoutePatch]:
        if weight != int(weight):
            raise RolloutError(f"Kubernetes route weights are whole percentages, got {weight:g}")
        return kubernetes.weight_patches(self.objects, int(weight), mesh=self.mesh, stable=self.stable,
                                         canary=self.canary, namespace=self.namespace)

    def state(self, model: str) -> str:
        return ""

    def set_weight(self, model: str, weight: float, *, shadow: float = 0.0, expected: Optional[str] = None) -> str:
        if shadow:
            raise RolloutError("--shadow is the compose or host nginx gateway's (nginx mirror); the Kubernetes "
                               "routes only weigh traffic")
        step = self.patches(weight)
        if self.apply:
            kubernetes.apply_patches([step], kubectl=self.kubectl, echo=self.echo)
            return ""
        for patch in step:
            self.echo(patch.command(self.kubectl))
        return ""

    def clear(self, model: str, *, expected: Optional[str] = None) -> str:
        return self.set_weight(model, 0)


def routes_for(kind: str, *, nginx_conf: Optional[Path] = None, nginx: str = "nginx",
               k8s_objects: Sequence[Mapping[str, JSON]] = (), compose_project: Optional[str] = None,
               **k8s: Any) -> TrafficRoutes:
    """The :class:`TrafficRoutes` named by the CLI's ``--gateway`` (``nginx``, ``compose``, ``none``, ``k8s``)."""
    if kind == "nginx":
        if nginx_conf is None:
            raise RolloutError("--gateway nginx needs --nginx-conf (the gateway's rendered nginx.conf)")
        return HostNginx(nginx_conf, nginx=nginx)
    if kind == "compose":
        return ComposeGateway(project=compose_project) if compose_project else ComposeGateway()
    if kind == "k8s":
        return KubernetesRoutes(k8s_objects, **k8s)
    if kind == "none":
        return NoGateway()
    raise RolloutError(f"--gateway is one of nginx, compose, k8s, none; got {kind!r}")
