"""A real Prometheus (the ``prometheus`` binary) on a free loopback port, for tests."""
from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Optional

import httpx
import yaml

from monitoring.local import write_config
from tests.support.ports import free_port
from tests.support.processes import LoggedProcess, http_ready

__all__ = ["PrometheusProcess", "shorten_alert_for"]


class PrometheusProcess:
    """``prometheus`` with a rendered config and its own TSDB directory; a context manager.

    ``config`` is a prometheus.yml as a dict (see ``monitoring.local.render_config``);
    it is written to ``workdir``. On entry it waits for ``/-/ready``.
    """

    def __init__(self, config: dict, workdir: Path, *, port: Optional[int] = None,
                 timeout: float = 60.0) -> None:
        self.config = config
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.timeout = timeout
        self.process: Optional[LoggedProcess] = None
        self.log_path = self.workdir / "prometheus.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> "PrometheusProcess":
        binary = shutil.which("prometheus")
        if binary is None:
            raise FileNotFoundError("prometheus is not installed (make debs installs it)")
        config_path = write_config(self.config, self.workdir / "prometheus.yml")
        self.process = LoggedProcess(
            [binary, f"--config.file={config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address={self.address}", "--log.level=warn"], self.log_path)
        self.process.start(http_ready(f"{self.url}/-/ready"), "prometheus", self.timeout)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(30)

    def query(self, expr: str) -> list[dict]:
        """Instant query through the HTTP API; raises on a PromQL error."""
        response = httpx.post(f"{self.url}/api/v1/query", data={"query": expr}, timeout=30.0)
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType')}: {body.get('error')} in {expr!r}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def finite_results(self, expr: str) -> list[dict]:
        """The series of ``expr`` whose current value is a finite number."""
        return [r for r in self.query(expr) if math.isfinite(float(r["value"][1]))]

    def alerts(self) -> list[dict]:
        return httpx.get(f"{self.url}/api/v1/alerts", timeout=30.0).json()["data"]["alerts"]

    def rules(self) -> list[dict]:
        """Every loaded rule with its ``health`` and ``lastError`` from live evaluation."""
        groups = httpx.get(f"{self.url}/api/v1/rules", timeout=30.0).json()["data"]["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def targets(self) -> list[dict]:
        return httpx.get(f"{self.url}/api/v1/targets", timeout=30.0).json()["data"]["activeTargets"]

    def __enter__(self) -> "PrometheusProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def shorten_alert_for(rules_dir: Path, dest: Path, duration: str) -> Path:
    """Copy the rule files with every alert's ``for:`` set to ``duration`` (tests only).

    Thresholds and windows stay as shipped; only the time a condition must hold
    before it fires shrinks, so a test can see alerts fire within seconds.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(rules_dir).glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                if "alert" in rule and "for" in rule:
                    rule["for"] = duration
        (dest / path.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest
