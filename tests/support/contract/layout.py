"""The model repository and config files the contract suite serves.

``write_contract_repo(model_repo, dest)`` copies the exported models into a
writable directory and writes ``models.config``, ``batching.config`` and
``monitoring.config`` there. ``server_flags(root)`` is the command line (the
same for ``tensorflow_model_server`` and ``python -m serving.server``), with
``root`` the repository as the server sees it (``/models`` in a container).

Models served:

* ``digits``, ``text``, ``ranker`` — version 1, default policy (latest 1);
* ``digits_versions`` — versions 1 and 2, policy ``all``, labels stable→1, canary→2;
* ``digits_specific`` — the same directory, policy ``specific { versions: 1 }``;
* ``digits_live`` — version 1; tests publish version 2 while under load.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

__all__ = ["MODELS", "MONITORING_PATH", "MAX_BATCH_SIZE", "MAX_EXECUTION_BATCH_SIZE", "write_contract_repo", "server_flags",
           "model_config_text", "publish_version"]

MODELS = ["digits", "text", "ranker", "digits_versions", "digits_specific", "digits_live"]
MONITORING_PATH = "/monitoring/prometheus/metrics"
MAX_BATCH_SIZE = 32768         # largest request (the > 4 MiB gRPC test sends 20000 rows)
MAX_EXECUTION_BATCH_SIZE = 64  # largest run: big requests are split (>= the largest warmup batch)
BATCH_TIMEOUT_MICROS = 5000


def model_config_text(root: Path) -> str:
    """``models.config`` with base paths under ``root`` (as the server sees the repository)."""
    def entry(name: str, directory: str, extra: str = "") -> str:
        return (f"  config {{\n    name: '{name}'\n    base_path: '{root / directory}'\n"
                f"    model_platform: 'tensorflow'\n{extra}  }}\n")

    versions_policy = ("    model_version_policy { all {} }\n"
                       "    version_labels { key: 'stable' value: 1 }\n"
                       "    version_labels { key: 'canary' value: 2 }\n")
    return ("model_config_list {\n"
            + entry("digits", "digits") + entry("text", "text") + entry("ranker", "ranker")
            + entry("digits_versions", "versions", versions_policy)
            + entry("digits_specific", "versions", "    model_version_policy { specific { versions: 1 } }\n")
            + entry("digits_live", "live")
            + "}\n")


def write_contract_repo(model_repo: Path, dest: Path, root_in_server: Optional[Path] = None) -> Path:
    """Lay out the contract repository under ``dest``; return ``dest``.

    Config base paths use ``root_in_server`` (default ``dest``), the repository as the server sees it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("digits", "text", "ranker"):
        shutil.copytree(model_repo / name / "1", dest / name / "1")
    for version in ("1", "2"):
        shutil.copytree(model_repo / "digits" / "1", dest / "versions" / version)
    shutil.copytree(model_repo / "digits" / "1", dest / "live" / "1")
    (dest / "models.config").write_text(model_config_text(root_in_server or dest))
    (dest / "batching.config").write_text(
        f"max_batch_size {{ value: {MAX_BATCH_SIZE} }}\n"
        "enable_large_batch_splitting { value: true }\n"
        f"max_execution_batch_size {{ value: {MAX_EXECUTION_BATCH_SIZE} }}\n"
        f"batch_timeout_micros {{ value: {BATCH_TIMEOUT_MICROS} }}\n"
        "max_enqueued_batches { value: 1000 }\n"
        "num_batch_threads { value: 2 }\n")
    (dest / "monitoring.config").write_text(
        f'prometheus_config {{ enable: true, path: "{MONITORING_PATH}" }}\n')
    return dest


def server_flags(root: Path) -> list[str]:
    """Flags for a server whose view of the repository is ``root``; ports are added by the caller."""
    return [f"--model_config_file={root / 'models.config'}",
            f"--monitoring_config_file={root / 'monitoring.config'}",
            "--enable_batching", f"--batching_parameters_file={root / 'batching.config'}",
            "--file_system_poll_wait_seconds=1", "--max_num_load_retries=0",
            # TF Serving checks labels before the first load: without this flag the initial
            # config's labels point at versions not yet available and startup fails.
            "--allow_version_labels_for_unavailable_models"]


def publish_version(source: Path, base: Path, version: int) -> Path:
    """Publish ``source`` as ``base/version`` atomically (staging dir + rename), as the exporter does."""
    staging = base / f".contract-staging-{version}-{os.getpid()}"
    shutil.copytree(source, staging)
    target = base / str(version)
    os.rename(staging, target)
    return target


if __name__ == "__main__":  # lay out a repository for an external TF Serving (see conftest)
    import sys

    args = [Path(a) for a in sys.argv[1:]]
    if len(args) not in (2, 3):
        raise SystemExit("usage: python -m tests.support.contract.layout EXPORTED_REPO DEST [DEST_AS_SERVER_SEES_IT]")
    write_contract_repo(*args)
