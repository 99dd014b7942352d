"""Measures what an operator and a key guesser see at the gateway (Debian's nginx, the repository's templates
with compose's values, in front of the embedded server), for the before/after table:

- the old key after a rotation and a reload (``rotate client`` where gateway.certs has it, else the older
  ``--force issue client``): its HTTP status;
- random-key guesses from one address: guesses per second and replies by status, with a valid key sent
  from the same address beside them.

    PYTHONPATH=$PWD .venv/bin/python -m tests.gateway.measure_keys --model-repo DIR [--guesses 4000]

Not a test: it prints numbers (run it on a quiet machine; they move with the load).
"""
from __future__ import annotations

import argparse
import collections
import os
import secrets as random
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path


from gateway import installed_nginx_version
from gateway import certs
from serving.config.compose import load_compose_model
from serving.launcher import ServerProcess
from tests.support.compose import CPU, PASSWORD, compose_env
from tests.support.gateway import MODEL, compose_values, running_gateway, upstream_values

STATUS = f"/v1/models/{MODEL}"


def _reload(gateway) -> None:
    before = set(Path(f"/proc/{gateway.proc.pid}/task/{gateway.proc.pid}/children").read_text().split())
    os.kill(gateway.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = set(Path(f"/proc/{gateway.proc.pid}/task/{gateway.proc.pid}/children").read_text().split())
        if now - before and not (now & before):
            return
        time.sleep(0.05)


def old_key_after_rotation(gateway, secrets) -> tuple[str, int, int]:
    old = secrets.api_key("client")
    if hasattr(certs, "rotate_client"):
        command = "python -m gateway.certs rotate client"
        certs.rotate_client(secrets.directory, "client")
    else:
        command = "python -m gateway.certs --force issue client"
        certs.issue_client(secrets.directory, "client", force=True)
    _reload(gateway)
    with gateway.http() as http:
        old_status = http.get(gateway.rest_url + STATUS, headers={"x-api-key": old}).status_code
        new_status = http.get(gateway.rest_url + STATUS, headers={"x-api-key": secrets.api_key("client")}).status_code
    return command, old_status, new_status


def guesses(gateway, secrets, total: int, threads: int = 4) -> tuple[float, collections.Counter, collections.Counter]:
    replies: collections.Counter = collections.Counter()
    valid: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def guess(count: int) -> None:
        with gateway.http() as http:
            for i in range(count):
                code = http.get(gateway.rest_url + STATUS, headers={"x-api-key": random.token_hex(32)}).status_code
                with lock:
                    replies[code] += 1
                if i % 100 == 0:
                    code = http.get(gateway.rest_url + STATUS, headers={"x-api-key": secrets.api_key("client")}).status_code
                    with lock:
                        valid[code] += 1

    workers = [threading.Thread(target=guess, args=(total // threads,)) for _ in range(threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(replies.values()) / (time.monotonic() - started), replies, valid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repo", type=Path, required=True, help=f"a repository with {MODEL} in it")
    parser.add_argument("--guesses", type=int, default=4000)
    args = parser.parse_args()
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    env = dict(load_compose_model(CPU, services=["gateway"],
                                  env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD))["services"]["gateway"]["environment"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        secrets = certs.init_secrets(root / "secrets")
        with ServerProcess.for_models({MODEL: args.model_repo / MODEL}, workdir=root / "server") as server:
            values = compose_values(env, **upstream_values(server))
            with running_gateway(nginx, installed_nginx_version(nginx), values, root / "gateway", secrets,
                                 server) as gateway:
                command, old, new = old_key_after_rotation(gateway, secrets)
                print(f"rotation ({command} + nginx reload): old key {old}, new key {new}")
                rate, replies, valid = guesses(gateway, secrets, args.guesses)
                print(f"{sum(replies.values())} random-key guesses from one address, 4 connections: {rate:,.0f}/s; "
                      f"replies {dict(sorted(replies.items()))}; a valid key beside them: {dict(valid)}")


if __name__ == "__main__":
    main()
