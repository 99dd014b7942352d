"""GPU-host report: preflight, then the tuner and the fp32/xla/trt-fp16 sweep of resnet50 (``make gpu-report``).

For a user with an NVIDIA GPU and Docker. Steps, each stopping the report when it fails:

1. **Preflight** (each failure printed with its fix; exit code 3 when one fails):

   - ``nvidia-smi`` runs and lists a GPU;
   - the driver is new enough for the pinned images' CUDA 12: TF Serving
     2.17's GPU image is built on CUDA 12.2 with cuDNN 8 (``tensorflow/serving``
     ``.bazelrc`` of the 2.15-2.17 builds: ``CUDA_TOOLKIT_PATH=/usr/local/cuda-12.2``,
     ``TF_CUDNN_VERSION=8``; base ``nvidia/cuda:12.2.0-base-ubuntu20.04``,
     ``tools/docker/Dockerfile.gpu``), the exporter's TensorFlow 2.17
     on CUDA 12.3 / cuDNN 8.9 (tensorflow.org "Tested build configurations").
     CUDA 12.x runs on any driver >= 525.60.13 through minor-version
     compatibility (docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html:
     "CUDA 12.x >= 525"; 525.60.13 is CUDA 12.0's Linux minimum in the CUDA
     release notes); PTX JIT (Hopper, compute_90) needs the 12.2 driver,
     >= 535.54.03, so older drivers get a warning;
   - compute capability >= 5.0: the image's kernels are built for
     ``sm_50,sm_60,sm_70,sm_80,compute_90`` (same ``.bazelrc``); TF-TRT FP16 runs
     on any of them but is only fast with tensor cores (>= 7.0), so below
     that a warning;
   - Docker with the NVIDIA container runtime (``docker info`` lists ``nvidia``
     among its runtimes; ``serving.stack.docker.probe_engine``);
   - TF Serving's GPU image (the compose ``tfserving`` service's ``image``) is
     present locally: nothing here pulls it (``docker image inspect``).

2. Export ``resnet50`` in fp32, xla and trt-fp16 in the compose exporter
   container (the TensorRT engines are built on this GPU).
3. Bring up the compose stack's ``tfserving`` (with an override publishing
   127.0.0.1:8500/8501), sweep resnet50 in fp32/xla/trt-fp16 over gRPC, stop it.
4. Run the tuner against TF Serving's GPU image (``loadtest tune --docker --gpu``).
5. Record every measurement in ``out/gpu-report/measurements.json`` and render
   ``out/gpu-report/report.md`` from it: the seed-style table (XLA and TF-TRT
   FP16 against FP32, with TensorRT's top-1 agreement and largest output
   difference against FP32 from the exporter's validation manifest), then
   the tuner's table.

NOT RUN on the development machines of this project (no GPU; an engine without the image at most):
there it stops at preflight with the reason and exit code 3, and prints no
number it did not measure. ``render_report`` is tested on a recorded input.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from loadtest.tune_report import render_markdown
from serving.checkout import REPO_ROOT
from serving.model_repo import latest_version_dir, published_name
from serving.stack.docker import Engine, image_absent_reason, image_present, probe_engine, tfserving_image

__all__ = [
    "MIN_DRIVER",
    "PTX_DRIVER",
    "MIN_COMPUTE_CAPABILITY",
    "TENSOR_CORE_CAPABILITY",
    "EXIT_PREFLIGHT",
    "Check",
    "Gpu",
    "parse_nvidia_smi",
    "check_driver",
    "check_compute_capability",
    "check_container_runtime",
    "check_tfserving_image",
    "preflight",
    "variant_table",
    "render_report",
    "main",
]

MIN_DRIVER = (525, 60, 13)         # CUDA 12.x minor-version compatibility (Linux)
PTX_DRIVER = (535, 54, 3)          # CUDA 12.2's own driver: PTX JIT (compute_90) works
MIN_COMPUTE_CAPABILITY = (5, 0)    # TF Serving 2.17 GPU image: sm_50,sm_60,sm_70,sm_80,compute_90
TENSOR_CORE_CAPABILITY = (7, 0)    # FP16 TensorRT is fast from Volta on
EXIT_OK, EXIT_STEP_FAILED, EXIT_PREFLIGHT = 0, 1, 3
MODEL = "resnet50"
VARIANTS = ("fp32", "xla", "trt-fp16")
_QUERY = "name,driver_version,compute_cap,memory.total"
_FIX_DRIVER = ("install or upgrade the NVIDIA driver (525.60.13 or newer; 535+ recommended): "
               "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/")
_FIX_RUNTIME = ("install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker && "
                "sudo systemctl restart docker`: "
                "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html")

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Check:
    """One preflight check: what was found, and the fix when it failed (a warning does not stop the report)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    compute_capability: str
    memory: str


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The GPUs in ``nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader``."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            gpus.append(Gpu(parts[0], parts[1], parts[2], parts[3]))
    return gpus


def check_driver(version: str) -> list[Check]:
    """The driver against CUDA 12's minor-version-compatibility minimum, and the PTX-JIT warning."""
    found = _version(version)
    if not found or found < MIN_DRIVER:
        return [Check("driver", False, f"driver {version or '?'} is older than 525.60.13, the oldest that runs "
                                       "CUDA 12.x (TF Serving 2.17's GPU image: CUDA 12.2)", _FIX_DRIVER)]
    checks = [Check("driver", True, f"driver {version} runs CUDA 12.x (>= 525.60.13)")]
    if found < PTX_DRIVER:
        checks.append(Check("driver PTX JIT", False, f"driver {version} predates CUDA 12.2 (535.54.03): kernels "
                                                     "JIT-compiled from PTX (compute_90, e.g. H100) will not load",
                            _FIX_DRIVER, warning=True))
    return checks


def check_compute_capability(gpu: Gpu) -> list[Check]:
    """Supported by the image's kernels (>= 5.0); tensor cores for FP16 TensorRT (>= 7.0) or a warning."""
    found = _version(gpu.compute_capability)
    if not found or found < MIN_COMPUTE_CAPABILITY:
        return [Check("compute capability", False,
                      f"{gpu.name} has compute capability {gpu.compute_capability}; TF Serving 2.17's GPU image has "
                      "kernels for 5.0 and newer only (sm_50,sm_60,sm_70,sm_80,compute_90)",
                      "use a GPU of compute capability 5.0 or newer (7.0+ for fast FP16)")]
    checks = [Check("compute capability", True, f"{gpu.name}: {gpu.compute_capability} (>= 5.0)")]
    if found < TENSOR_CORE_CAPABILITY:
        checks.append(Check("FP16 tensor cores", False,
                            f"{gpu.name} ({gpu.compute_capability}) has no tensor cores: trt-fp16 will run but "
                            "not be faster than FP32", "a Volta (7.0) or newer GPU for FP16 speed", warning=True))
    return checks


def check_container_runtime(engine: Engine) -> Check:
    """The engine must answer and list the ``nvidia`` runtime (``docker info``)."""
    if engine.cli is None:
        return Check("NVIDIA container runtime", False, engine.reason,
                     "install Docker Engine with the compose plugin, then the NVIDIA Container Toolkit")
    if not engine.answers:
        return Check("NVIDIA container runtime", False, engine.reason,
                     "start the Docker daemon and make sure this user may use it")
    if "nvidia" in engine.runtimes:
        return Check("NVIDIA container runtime", True, "docker lists the nvidia runtime")
    return Check("NVIDIA container runtime", False,
                 f"docker's runtimes are {', '.join(sorted(engine.runtimes)) or 'unknown'}: no nvidia runtime, so "
                 "containers cannot see the GPU", _FIX_RUNTIME)


def check_tfserving_image(image: str, present: bool) -> Check:
    """TF Serving's GPU image must be here: the report never pulls it."""
    if present:
        return Check("TF Serving GPU image", True, f"{image} is present locally")
    return Check("TF Serving GPU image", False, image_absent_reason(image),
                 "get the image into this engine (see above), then run the report again")


def _run(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def preflight(run: Runner = _run, which: Callable[[str], Optional[str]] = shutil.which, docker: str = "docker"
              ) -> tuple[list[Check], list[Gpu]]:
    """Every preflight check in order; checks that need ``nvidia-smi`` are reported as not run without it.

    ``run`` and ``which`` serve ``nvidia-smi``; ``docker`` is the CLI the engine is asked through.
    """
    checks: list[Check] = []
    gpus: list[Gpu] = []
    if which("nvidia-smi") is None:
        checks.append(Check("nvidia-smi", False, "nvidia-smi is not on PATH: no NVIDIA driver on this host "
                                                 "(or no GPU)", _FIX_DRIVER))
    else:
        result = run(["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader"])
        gpus = parse_nvidia_smi(result.stdout) if result.returncode == 0 else []
        if not gpus:
            error = (result.stderr or result.stdout).strip().splitlines()
            checks.append(Check("nvidia-smi", False, "nvidia-smi lists no GPU"
                                + (f": {error[0]}" if error else ""), _FIX_DRIVER))
        else:
            checks.append(Check("nvidia-smi", True, "; ".join(f"{g.name} ({g.memory})" for g in gpus)))
            checks += check_driver(gpus[0].driver)
            for gpu in gpus:
                checks += check_compute_capability(gpu)
    engine = probe_engine(docker)
    checks.append(check_container_runtime(engine))
    if engine.answers:
        image = tfserving_image(gpu=True)
        checks.append(check_tfserving_image(image, image_present(image, docker)))
    return checks, gpus


def format_checks(checks: Sequence[Check]) -> str:
    lines = []
    for check in checks:
        status = "ok  " if check.ok else ("WARN" if check.warning else "FAIL")
        lines.append(f"{status}  {check.name}: {check.detail}")
        if not check.ok and check.fix:
            lines.append(f"      fix: {check.fix}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the report, from recorded measurements

def _variant_numbers(series: Sequence[Mapping[str, Any]], budget_ms: Optional[float]) -> dict[str, dict[str, Any]]:
    """Per variant, from the sweep's series: p50 at concurrency 1 and the best throughput within the budget."""
    numbers: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        name = published_name(MODEL, variant)
        levels = next((s["levels"] for s in series if s["label"].split("/")[0] == name), None)
        if not levels:
            continue
        ok = [lv for lv in levels if not lv.get("errors") and (budget_ms is None or lv["p99_ms"] <= budget_ms)]
        best = max(ok, key=lambda lv: lv["throughput_rps"], default=None)
        p50 = next((lv["p50_ms"] for lv in levels if lv["level"] == 1), None)
        numbers[variant] = {"p50_c1_ms": p50, "best_rps": best["throughput_rps"] if best else 0.0,
                            "best_level": best["level"] if best else None}
    return numbers


def variant_table(measurements: Mapping[str, Any]) -> list[str]:
    """The seed-style rows for XLA and TF-TRT FP16 against FP32, with TensorRT's agreement with FP32."""
    budget = measurements.get("p99_budget_ms")
    numbers = _variant_numbers(measurements["sweep"]["series"], budget)
    fp32 = numbers.get("fp32")
    lines = ["| setting | default | tuned | latency (ms) p50 c=1 | throughput gain | accuracy vs FP32 |",
             "|---|---|---|---|---|---|"]
    if fp32 is None:
        return lines + ["| (no fp32 series in the sweep) | | | | | |"]
    agreement = measurements.get("trt_agreement") or {}
    for variant, setting, tuned in (("xla", "XLA", "`jit_compile` + --xla_cpu_compilation_enabled"),
                                    ("trt-fp16", "TensorRT", "TF-TRT FP16 engines")):
        row = numbers.get(variant)
        if row is None:
            lines.append(f"| {setting} | off | {tuned} | not measured | - | - |")
            continue
        gain = 100 * (row["best_rps"] / fp32["best_rps"] - 1) if fp32["best_rps"] else None
        accuracy = "same graph (fp32 math)" if variant == "xla" else (
            f"top-1 agreement {100 * agreement['top1_agreement']:.2f} %, max abs diff "
            f"{agreement['max_abs_error']:.3g}" if agreement else "not recorded")
        lines.append(f"| {setting} | off (fp32) | {tuned} | {fp32['p50_c1_ms']:.2f} → {row['p50_c1_ms']:.2f} | "
                     + (f"{gain:+.0f} %" if gain is not None else "-") + f" | {accuracy} |")
    return lines


def render_report(measurements: Mapping[str, Any]) -> str:
    """``report.md`` from ``measurements.json``: host and preflight, the variant table, then the tuner's report."""
    host = measurements["host"]
    lines = [f"# GPU-host report: {MODEL} on {', '.join(g['name'] for g in host['gpus'])}", "",
             f"Driver {host['gpus'][0]['driver']}, compute capability {host['gpus'][0]['compute_capability']}; "
             f"recorded {measurements.get('recorded', '?')}.", "", "## Preflight", "", "```",
             format_checks([Check(**c) for c in measurements["preflight"]]), "```", "",
             f"## fp32 / xla / trt-fp16 (TF Serving GPU image, gRPC, p99 budget "
             f"{measurements.get('p99_budget_ms', 'none')} ms)", "",
             *variant_table(measurements), ""]
    if measurements.get("tune"):
        lines += ["## Tuner", "", render_markdown(measurements["tune"])]
    return "\n".join(lines)


def _trt_agreement(repo: Path) -> Optional[dict[str, Any]]:
    """The exporter's validation of the trt-fp16 export against fp32 (manifest ``agreement``)."""
    try:
        manifest = json.loads((latest_version_dir(repo / published_name(MODEL, "trt-fp16")) / "manifest.json")
                              .read_text())
    except (OSError, ValueError):
        return None
    agreement = manifest.get("agreement") or {}
    return next(iter(agreement.values()), None)


# ---------------------------------------------------------------- the steps (need a GPU host)

def _step(argv: Sequence[str], log: Path) -> None:
    print("$ " + " ".join(argv), flush=True)
    with open(log, "a") as handle:
        result = subprocess.run(list(argv), cwd=REPO_ROOT, stdout=handle, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited with {result.returncode} (see {log})")


def run_steps(out: Path, repo: Path, checks: Sequence[Check], gpus: Sequence[Gpu], quick: bool) -> Path:
    """Export, compose up, sweep, compose stop, tune, record, render. Needs a GPU host with Docker."""
    log = out / "steps.log"
    override = out / "compose.ports.yml"
    override.write_text("services:\n  tfserving:\n    ports:\n      - 127.0.0.1:8500:8500\n"
                        "      - 127.0.0.1:8501:8501\n")
    compose = ["docker", "compose", "-f", "docker-compose.yml", "-f", str(override)]
    ensure = " && ".join(f"python -m exporter ensure --quiet --batching-config=/etc/tfserving/batching.config "
                         f"--model-repo /models --variant {variant} {MODEL}" for variant in VARIANTS)
    _step([*compose, "run", "--rm", "exporter", ensure], log)
    _step([*compose, "up", "-d", "--wait", "tfserving"], log)
    try:
        _step([sys.executable, "-m", "loadtest", "sweep", "--grpc", "127.0.0.1:8500", "--metrics-url",
               "http://127.0.0.1:8501/monitoring/prometheus/metrics", "--model", MODEL, "--variant",
               ",".join(VARIANTS), "--model-repo", str(repo), "--concurrency", "1,2,4,8,16,32",
               "--out", str(out / "sweep")], log)
    finally:
        _step([*compose, "stop", "tfserving"], log)
    _step([sys.executable, "-m", "loadtest", "tune", "--docker", "--gpu", "--model", MODEL, "--model-repo", str(repo),
           "--batching-config", str(REPO_ROOT / "serving" / "batching.config"), "--out", str(out / "tune"),
           *(["--quick"] if quick else [])], log)
    tune = json.loads((out / "tune" / "tune.json").read_text())
    measurements = {"recorded": tune.get("command"), "host": {"gpus": [asdict(g) for g in gpus]},
                    "preflight": [asdict(c) for c in checks], "p99_budget_ms": tune.get("p99_budget_ms"),
                    "sweep": json.loads((out / "sweep" / "sweep.json").read_text()),
                    "trt_agreement": _trt_agreement(repo), "tune": tune}
    (out / "measurements.json").write_text(json.dumps(measurements, indent=2))
    report = out / "report.md"
    report.write_text(render_report(measurements))
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--model-repo", type=Path, default=REPO_ROOT / "models", metavar="DIR",
                        help="the compose stack's model repository (default <checkout>/models)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "gpu-report",
                        help="output directory (default <checkout>/out/gpu-report)")
    parser.add_argument("--preflight-only", action="store_true", help="check the host and stop")
    parser.add_argument("--quick", action="store_true", help="the tuner's --quick")
    parser.add_argument("--render", type=Path, default=None, metavar="MEASUREMENTS.json",
                        help="render report.md again from a recorded measurements.json, measuring nothing")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.render is not None:
        print(render_report(json.loads(args.render.read_text())))
        return EXIT_OK
    checks, gpus = preflight()
    print(format_checks(checks))
    failed = [c for c in checks if not c.ok and not c.warning]
    if failed:
        print(f"gpu-report: preflight failed ({', '.join(c.name for c in failed)}): nothing was measured.",
              file=sys.stderr)
        return EXIT_PREFLIGHT
    if args.preflight_only:
        return EXIT_OK
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        report = run_steps(args.out, args.model_repo.resolve(), checks, gpus, args.quick)
    except RuntimeError as error:
        print(f"gpu-report: {error}", file=sys.stderr)
        return EXIT_STEP_FAILED
    print(report.read_text())
    print(f"wrote {report}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
