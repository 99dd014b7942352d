"""Time `make up` (the embedded backend) until its first predict answers: a fresh start, then a second one.

    python -m tests.support.time_make_up --model-repo /tmp/up-repo --work-dir /tmp/up-work [--model digits]

"fresh" deletes the model repository and the work directory first (what a fresh clone has: no
exports, no served config); "second" starts again with what the first left. Each run starts
`python -m serving.stack --backend embedded` on free ports, POSTs a REST predict of the model every
0.5 s (the exporter's sample inputs, once its manifest exists) until one answers 200 and prints
the seconds since the start; then it waits until make up reports every model loaded (all exports
done), prints that time too, SIGTERMs make up and waits for it. Run it on a quiet machine; it
prints the load average before and after each run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

from serving import codec
from serving.checkout import REPO_ROOT
from serving.model_repo import latest_version_dir, model_versions
from serving.processes import stop_process
from serving.launcher import free_port

__all__ = ["time_first_predict", "main"]

ALL_LOADED = "every model is loaded"  # what make up prints once its exports are served


def _predict_body(model_dir: Path) -> Optional[bytes]:
    from exporter.manifest import load_manifest  # numpy only; the manifest appears with the export

    if not model_versions(model_dir) or not (latest_version_dir(model_dir) / "manifest.json").is_file():
        return None
    inputs = load_manifest(latest_version_dir(model_dir)).sample_inputs()
    return codec.inputs_to_rest_request(inputs, row_format=False)


def _answers(rest: str, model: str, body: bytes) -> bool:
    request = urllib.request.Request(f"{rest}/v1/models/{model}:predict", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status == 200
    except (OSError, urllib.error.HTTPError):
        return False


def time_first_predict(model_repo: Path, work_dir: Path, model: str, log: Path,
                       extra: Sequence[str] = (), timeout: float = 1800.0) -> tuple[float, float]:
    """Seconds from starting make up until a REST predict of ``model`` answers 200, and until
    make up says every model is loaded."""
    grpc_port, rest_port = free_port(), free_port()
    rest = f"http://127.0.0.1:{rest_port}"
    command = [sys.executable, "-m", "serving.stack", "--backend", "embedded", "--model-repo", str(model_repo),
               "--work-dir", str(work_dir), "--grpc", f"127.0.0.1:{grpc_port}", "--rest", rest, *extra]
    print("+", " ".join(command), flush=True)
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        body, first = None, None
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"make up exited with {proc.returncode}; see {log}")
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"not done within {timeout:.0f} s; see {log}")
            if first is None:
                body = body or _predict_body(model_repo / model)
                if body is not None and _answers(rest, model, body):
                    first = time.monotonic() - started
            if first is not None and ALL_LOADED in log.read_text(errors="replace"):
                return first, time.monotonic() - started
            time.sleep(0.5)
    finally:
        stop_process(proc, 60)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.time_make_up", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repo", type=Path, required=True, metavar="DIR",
                        help="a scratch model repository (deleted for the fresh run)")
    parser.add_argument("--work-dir", type=Path, required=True, help="a scratch work directory (deleted too)")
    parser.add_argument("--model", default="digits", help="the model to predict (default: digits)")
    parser.add_argument("--runs", default="fresh,second", help="fresh, second or both (default: fresh,second)")
    parser.add_argument("--models", help="passed to make up as --models")
    args = parser.parse_args(argv)
    extra = ["--models", args.models] if args.models else []
    for run in args.runs.split(","):
        if run == "fresh":
            shutil.rmtree(args.model_repo, ignore_errors=True)
            shutil.rmtree(args.work_dir, ignore_errors=True)
        args.work_dir.mkdir(parents=True, exist_ok=True)
        before = os.getloadavg()
        first, done = time_first_predict(args.model_repo, args.work_dir, args.model,
                                         args.work_dir / f"make-up-{run}.log", extra)
        after = os.getloadavg()
        print(f"{run}: first predict of {args.model} answered after {first:.1f} s, every model loaded after "
              f"{done:.1f} s "
              f"(load average before {before[0]:.2f}, after {after[0]:.2f}; log {args.work_dir}/make-up-{run}.log)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
