"""The peers' environments: each peer framework's pinned venv under ``.cache/peers/``, built once."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from serving.checkout import REPO_ROOT


__all__ = ["APPS", "BASE_REQUIREMENTS", "PEERS", "PeerSpec", "PeerUnavailable", "VENV_ROOT", "clean_env",
           "ensure_venv"]

APPS = Path(__file__).resolve().parent.parent / "peer_apps"
VENV_ROOT = REPO_ROOT / ".cache" / "peers"

# The peers' interpreter pins: the project's own (pyproject.toml's `tf` extra and base), so every
# server runs the same TensorFlow build.
BASE_REQUIREMENTS = ("tensorflow-cpu==2.17.1", "numpy==1.26.4")


class PeerUnavailable(RuntimeError):
    """A peer that cannot be installed or started here; the message says why."""


Argv = Callable[[Path, str, str, int, int], list[str]]
"""(venv, model, version dir, port, spare port) -> the peer's command line."""


@dataclass(frozen=True)
class PeerSpec:
    """A peer server: its venv (shared by variants of one framework), pins and command line."""

    name: str
    venv: str
    requirements: tuple[str, ...]
    argv: Argv
    env: Callable[[str, str], dict[str, str]] = lambda model, path: {}

    def pinned(self) -> str:
        return "".join(f"{r}\n" for r in BASE_REQUIREMENTS + self.requirements)


def _gunicorn(workers: int) -> Argv:
    def argv(venv: Path, model: str, path: str, port: int, _: int) -> list[str]:
        return [str(venv / "bin" / "gunicorn"), "--workers", str(workers), "--threads", "8",
                "--bind", f"127.0.0.1:{port}", "--chdir", str(APPS), f"flask_app:create_app({model!r}, {path!r})"]
    return argv


PEERS: dict[str, PeerSpec] = {spec.name: spec for spec in (
    PeerSpec("flask-1w", "flask", ("flask==3.1.3", "gunicorn==23.0.0"), _gunicorn(1)),
    PeerSpec("flask-2w", "flask", ("flask==3.1.3", "gunicorn==23.0.0"), _gunicorn(2)),
    PeerSpec("fastapi", "fastapi", ("fastapi==0.115.12", "uvicorn==0.34.2"),
             lambda venv, model, path, port, _: [str(venv / "bin" / "uvicorn"), "--factory", "--app-dir", str(APPS),
                                                 "--host", "127.0.0.1", "--port", str(port), "fastapi_app:create_app"],
             env=lambda model, path: {"MODEL_NAME": model, "MODEL_PATH": path}),
    PeerSpec("kserve", "kserve", ("kserve==0.15.2",),
             lambda venv, model, path, port, spare: [str(venv / "bin" / "python"), str(APPS / "kserve_app.py"),
                                                     "--model_name", model, "--model_dir", path,
                                                     "--http_port", str(port), "--grpc_port", str(spare)]),
)}


def ensure_venv(spec: PeerSpec, root: Path = VENV_ROOT) -> Path:
    """The peer's venv under ``root``, built with its pins unless a build with the same pins exists.

    The pins are written to ``<venv>/peer-requirements.txt`` after a successful install; a venv
    without it (or with other pins) is built anew. ``PeerUnavailable`` says why an install failed.
    """
    venv = root / spec.venv
    stamp = venv / "peer-requirements.txt"
    if stamp.exists() and stamp.read_text() == spec.pinned():
        return venv
    print(f"installing peer '{spec.venv}' into {venv}: {' '.join(BASE_REQUIREMENTS + spec.requirements)} "
          f"(first time only; TensorFlow is large, this takes minutes)", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"{spec.venv}.install.log"
    steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"],
             [str(venv / "bin" / "python"), "-m", "pip", "install", *BASE_REQUIREMENTS, *spec.requirements]]
    with open(log, "wb") as out:
        for step in steps:
            done = subprocess.run(step, check=False, stdout=out, stderr=subprocess.STDOUT, env=clean_env())
            if done.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
                raise PeerUnavailable(f"`{' '.join(step[-3:])}` failed (log {log}):\n{tail}")
    stamp.write_text(spec.pinned())
    return venv


def clean_env(extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The environment of a peer process: no PYTHONPATH (nothing of this checkout leaks in)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {"TF_CPP_MIN_LOG_LEVEL": "2", **env, "PYTHONUNBUFFERED": "1", **extra}
