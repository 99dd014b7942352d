"""`python -m serving.stack logs|run|ps` (make logs, make export) reuse what make up recorded: its compose
files, profiles, project and variables, from a shell that has none of them. The stand-in `docker` records
each compose call with the variables it ran with (no engine runs the stack here).
"""
from __future__ import annotations

import os
from pathlib import Path

from serving.config.served_config import STATE_FILE, StackState, write_state
from serving.stack.cli import main
from tests.support.docker_cli import fake_docker_cli, set_environ


def _recording_docker(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls"
    fake = fake_docker_cli(tmp_path / "bin", calls)
    text = fake.read_text().replace(f'echo "$*" >> {calls}; exit 0',
                                    f'echo "$* | uid=$HOST_UID config=$TFS_CONFIG_HOST_DIR '
                                    f'port=$GATEWAY_GRPC_PORT grafana=$GRAFANA_ADMIN_PASSWORD" >> {calls}; exit 0')
    fake.write_text(text)
    return fake, calls


def test_logs_run_and_ps_use_the_files_project_and_variables_make_up_recorded(checkout, tmp_path, monkeypatch):
    fake, calls = _recording_docker(tmp_path)
    work = tmp_path / "work"
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}", GATEWAY_GRPC_PORT="18500",
                HOST_UID="4321")
    assert main(["--backend", "compose-cpu", "--images", "local", "--work-dir", str(work)], root=checkout) == 0
    # Another shell: none of make up's variables exported.
    set_environ(monkeypatch, PATH=f"{fake.parent}:{os.environ['PATH']}")
    calls.unlink()
    assert main(["logs", "tfserving", "--tail", "5", "--work-dir", str(work)]) == 0
    assert main(["run", "--work-dir", str(work), "exporter", "python -m exporter export --model digits"]) == 0
    assert main(["ps", "--work-dir", str(work)]) == 0
    logs, run, ps = calls.read_text().splitlines()
    files = (f"-f {checkout}/docker-compose.yml -f {checkout}/docker-compose.cpu.yml "
             f"-f {checkout}/docker-compose.local.yml --project-name tfs-stack")
    recorded = f"uid=4321 config={work / 'compose'} port=18500 grafana=unused-grafana-is-not-started"
    assert logs == f"{files} logs --no-color --tail=5 tfserving | {recorded}"
    assert run == f"{files} run --rm exporter python -m exporter export --model digits | {recorded}"
    assert ps == f"{files} ps --all | {recorded}"


def test_logs_of_the_embedded_stack_show_its_server_log(tmp_path, capsys):
    write_state(StackState("embedded", tmp_path / "models.config", "127.0.0.1:1", "http://127.0.0.1:2", tmp_path,
                           pid=1, pid_start=1), tmp_path / STATE_FILE)
    (tmp_path / "server.log").write_text("".join(f"line {i}\n" for i in range(10)))
    assert main(["logs", "--tail", "2", "--work-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "line 8\nline 9\n"
    assert main(["run", "--work-dir", str(tmp_path), "exporter", "x"]) == 2
    assert "has no containers" in capsys.readouterr().err


def test_without_a_recorded_stack_logs_says_so(tmp_path, capsys):
    assert main(["logs", "--work-dir", str(tmp_path)]) == 2
    assert f"no {tmp_path / STATE_FILE}: make up writes it" in capsys.readouterr().err
