"""Run Prometheus without Docker against a local TF Serving (or the embedded server).

``python -m monitoring.local`` renders ``monitoring/prometheus/prometheus.yml`` for
loopback targets (the server's REST URL, ``--rest``, http://127.0.0.1:8501 by
default) with the very same rule files, and runs the ``prometheus`` binary
(Debian's package) with a local storage directory (default
``<checkout>/.cache/prometheus``), listening on 127.0.0.1:9090.

``render_config`` is also what the tests use, so the scrape jobs, metrics path and
rule files a test proves are the ones the compose stack ships.
"""
from __future__ import annotations

import argparse
import copy
import os
import shutil
import sys
import urllib.parse
from pathlib import Path
from typing import Optional, Sequence

import yaml

from serving.addresses import rest_address

__all__ = ["MONITORING_DIR", "PROMETHEUS_CONFIG", "RULES_DIR", "render_config", "write_config", "build_parser",
           "main"]

MONITORING_DIR = Path(__file__).resolve().parent
DEFAULT_STORAGE = MONITORING_DIR.parent / ".cache" / "prometheus"
PROMETHEUS_CONFIG = MONITORING_DIR / "prometheus" / "prometheus.yml"
RULES_DIR = MONITORING_DIR / "prometheus" / "rules"


def render_config(*, tfserving: Sequence[str], dcgm: Sequence[str] = (),
                  prometheus: Optional[str] = None, rules_dir: Path = RULES_DIR,
                  scrape_interval: str = "15s", evaluation_interval: str = "15s",
                  metrics_path: Optional[str] = None) -> dict:
    """The shipped prometheus.yml with its targets and intervals replaced.

    ``tfserving``/``dcgm`` are ``host:port`` lists; a job with no targets is
    dropped (no DCGM exporter outside a GPU host). ``prometheus`` is this
    Prometheus' own address, or None to drop the self-scrape. Rule files become
    ``rules_dir/*.yml`` (absolute), so a copy of the rules can be used instead.
    """
    config = copy.deepcopy(yaml.safe_load(PROMETHEUS_CONFIG.read_text()))
    config["global"]["scrape_interval"] = scrape_interval
    config["global"]["scrape_timeout"] = scrape_interval if _seconds(scrape_interval) < 10 else "10s"
    config["global"]["evaluation_interval"] = evaluation_interval
    config["rule_files"] = [str(Path(rules_dir).resolve() / "*.yml")]
    targets = {"tfserving": list(tfserving), "dcgm-exporter": list(dcgm),
               "prometheus": [prometheus] if prometheus else []}
    jobs = []
    for job in config["scrape_configs"]:
        wanted = targets[job["job_name"]]
        if not wanted:
            continue
        job["static_configs"] = [{"targets": wanted}]
        if job["job_name"] == "tfserving" and metrics_path:
            job["metrics_path"] = metrics_path
        jobs.append(job)
    config["scrape_configs"] = jobs
    return config


def write_config(config: dict, path: Path) -> Path:
    """Write ``config`` as YAML to ``path`` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for suffix in ("ms", "s", "m", "h"):
        if duration.endswith(suffix):
            return float(duration[: -len(suffix)]) * units[suffix]
    raise ValueError(f"unsupported duration {duration!r}")


def _scrape_target(rest_url: str) -> str:
    """Prometheus' ``host:port`` target for a server's REST URL (``http://HOST:PORT``)."""
    parts = urllib.parse.urlsplit(rest_url if "//" in rest_url else f"http://{rest_url}")
    if not parts.hostname or parts.port is None:
        raise SystemExit(f"--rest needs a URL with a port, e.g. http://127.0.0.1:8501, not {rest_url!r}")
    return parts.netloc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m monitoring.local", description=__doc__.splitlines()[0])
    parser.add_argument("--rest", action="append", default=None, metavar="URL", type=rest_address,
                        help="REST URL of a TF Serving (or embedded) server to scrape "
                             "(repeatable; default http://127.0.0.1:8501)")
    parser.add_argument("--dcgm", action="append", default=[], metavar="HOST:PORT",
                        help="DCGM exporter address (repeatable; none by default)")
    parser.add_argument("--metrics-path", default=None,
                        help="TF Serving metrics path (default: the one in prometheus.yml)")
    parser.add_argument("--listen", default="127.0.0.1:9090", help="Prometheus listen address")
    parser.add_argument("--storage", type=Path, default=DEFAULT_STORAGE,
                        help=f"TSDB directory (default {DEFAULT_STORAGE})")
    parser.add_argument("--scrape-interval", default="5s")
    parser.add_argument("--prometheus-binary", default="prometheus")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Render the config into the storage directory and exec ``prometheus``."""
    args = build_parser().parse_args(argv)
    binary = shutil.which(args.prometheus_binary)
    if binary is None:
        print("prometheus not found: apt-get install prometheus (or make debs)", file=sys.stderr)
        return 1
    storage = Path(args.storage).resolve()
    targets = [_scrape_target(url) for url in args.rest or ["http://127.0.0.1:8501"]]
    config = render_config(tfserving=targets, dcgm=args.dcgm,
                           prometheus=args.listen, scrape_interval=args.scrape_interval,
                           evaluation_interval=args.scrape_interval, metrics_path=args.metrics_path)
    config_path = write_config(config, storage / "prometheus.yml")
    command = [binary, f"--config.file={config_path}", f"--storage.tsdb.path={storage / 'data'}",
               f"--web.listen-address={args.listen}", "--web.enable-lifecycle"]
    print(f"Prometheus on http://{args.listen} scraping {config['scrape_configs'][0]['static_configs']}",
          file=sys.stderr)
    os.execv(binary, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
