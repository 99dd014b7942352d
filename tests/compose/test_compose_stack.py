"""docker-compose.yml and its CPU variant, as parsed by the real Compose v2 binary.

Nothing here starts a container (no Docker engine on CI): these are the
static checks of the GPU path that docs/gpu-host.md names.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess

import pytest

from deploy.k8s.generate import duration_seconds
from serving.checkout import REPO_ROOT
from serving.config import load_model_server_config
from serving.config.compose import compose_command, load_compose_model, volume_map
from serving.model_repo import published_name
from tests.support.compose import CPU, GPU, PASSWORD, compose_env, dotenv, flags

GPU_DEVICE = {"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}


def devices(service: dict) -> list:
    return (service.get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices", [])


@pytest.mark.parametrize("files", [GPU, CPU], ids=["gpu", "cpu"])
def test_compose_accepts_the_stack(files):
    cmd = [*compose_command(), *[a for f in files for a in ("-f", str(f))], "config", "-q"]
    proc = subprocess.run(cmd, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("files", [GPU, CPU], ids=["gpu", "cpu"])
def test_compose_reads_the_stack_without_a_grafana_password_in_the_environment(files):
    load_compose_model(files, env=compose_env())  # Grafana's password is a file: nothing to interpolate


def test_grafana_reads_its_password_from_a_secret_file_never_the_environment(gpu_model):
    grafana = gpu_model["services"]["grafana"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana["environment"]
    assert PASSWORD not in json.dumps(gpu_model)  # exported or not, it reaches no container's environment
    target = grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    assert [(s["source"], s["target"]) for s in grafana["secrets"]] == [("grafana_admin_password", target)]
    # A file secret (a bind mount): an environment secret is copied in, which read_only refuses.
    assert gpu_model["secrets"]["grafana_admin_password"]["file"].endswith("/gateway/secrets/grafana-admin-password")
    assert "GRAFANA_ADMIN_PASSWORD" not in dotenv()


def test_gpu_services_reserve_nvidia_gpus(gpu_model_all_profiles):
    services = gpu_model_all_profiles["services"]
    for name in ("exporter", "tfserving", "dcgm-exporter"):
        assert devices(services[name]) == [GPU_DEVICE], name
    assert services["tfserving"]["image"].endswith("-gpu")


def test_cpu_variant_has_no_gpu_reservation_tensorrt_or_dcgm(cpu_model, cpu_model_all_profiles):
    services = cpu_model["services"]
    assert "dcgm-exporter" not in services  # behind the gpu-metrics profile
    assert devices(cpu_model_all_profiles["services"]["dcgm-exporter"]) == []
    assert all(devices(s) == [] for s in services.values())
    assert not services["tfserving"]["image"].endswith("-gpu")
    assert services["exporter"]["build"]["args"]["WITH_TENSORRT"] == "0"
    assert "trt" not in services["exporter"]["command"][0]


def test_cpu_command_differs_only_in_the_models_file_and_serving_without_batching(gpu_model, cpu_model):
    gpu = flags(gpu_model["services"]["tfserving"]["command"])
    cpu = flags(cpu_model["services"]["tfserving"]["command"])
    changed = {k for k in gpu.keys() | cpu.keys() if gpu.get(k) != cpu.get(k)}
    assert changed == {"model_config_file", "enable_batching", "batching_parameters_file"}
    assert cpu["model_config_file"].endswith("/models.cpu.config")
    assert "enable_batching" not in cpu and "batching_parameters_file" not in cpu


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_every_tfserving_flag_is_a_flag_of_the_pinned_tf_serving(variant, gpu_model, cpu_model):
    # TF Serving prints its usage text for an unknown flag and starts without it (main.cc at 2.17.1).
    from tests.support.tf_serving_flags import TF_SERVING_2_17_1_FLAGS
    assert dotenv()["TF_SERVING_VERSION"] == "2.17.1"  # the flag list below is 2.17.1's
    command = (gpu_model if variant == "gpu" else cpu_model)["services"]["tfserving"]["command"]
    assert set(flags(command)) - set(TF_SERVING_2_17_1_FLAGS) == set()


def test_tfserving_flags_point_at_the_serving_files(gpu_model):
    service = gpu_model["services"]["tfserving"]
    args = flags(service["command"])
    mounts = volume_map(service)
    assert mounts["/etc/tfserving"] == REPO_ROOT / "serving"
    for flag, name in (("model_config_file", "models.config"), ("batching_parameters_file", "batching.config"),
                       ("monitoring_config_file", "monitoring.config")):
        assert args[flag] == f"/etc/tfserving/{name}"
    assert args["enable_batching"] == "true"
    # In TF Serving 2.17.1 this one flag keeps XLA on for CPU and GPU; --xla_gpu_compilation_enabled
    # is a flag from 2.18.0 on, and 2.17.1 answers it with its usage text.
    assert args["xla_cpu_compilation_enabled"] == "true"
    assert "xla_gpu_compilation_enabled" not in args
    assert int(args["model_config_file_poll_wait_seconds"]) > 0
    # Labels of the startup config are assigned before its models load (ServerCore::ReloadConfig).
    assert args["allow_version_labels_for_unavailable_models"] == "true"
    assert 0 < float(args["per_process_gpu_memory_fraction"]) < 1
    assert args["rest_api_port"] != args["port"]
    assert service["entrypoint"] == ["/usr/bin/tensorflow_model_server"]


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_models_are_mounted_read_only_into_tfserving_and_writable_for_the_exporter(variant, gpu_model, cpu_model):
    services = (gpu_model if variant == "gpu" else cpu_model)["services"]
    serving = {v["target"]: v for v in services["tfserving"]["volumes"]}
    assert serving["/models"]["read_only"] is True
    assert serving["/models"]["source"] == str(REPO_ROOT / "models")
    assert serving["/etc/tfserving"]["read_only"] is True
    exporter = {v["target"]: v for v in services["exporter"]["volumes"]}
    assert not exporter["/models"].get("read_only")


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_every_published_port_binds_loopback(variant, gpu_model_all_profiles, cpu_model_all_profiles):
    model = gpu_model_all_profiles if variant == "gpu" else cpu_model_all_profiles
    ports = [p for s in model["services"].values() for p in s.get("ports", [])]
    assert len(ports) >= 4
    assert {p["host_ip"] for p in ports} == {"127.0.0.1"}


def test_tfserving_starts_after_the_exporter_completes(gpu_model, cpu_model):
    for model in (gpu_model, cpu_model):
        depends = model["services"]["tfserving"]["depends_on"]
        assert depends["exporter"]["condition"] == "service_completed_successfully"


def test_healthcheck_asks_the_rest_port_with_bash_not_curl(gpu_model):
    service = gpu_model["services"]["tfserving"]
    check = service["healthcheck"]
    assert check["test"][:3] == ["CMD", "bash", "-c"]
    script = check["test"][3]
    assert "curl" not in script and "wget" not in script
    assert f"/dev/tcp/127.0.0.1/{flags(service['command'])['rest_api_port']}" in script
    assert "GET /v1/models/%s" in script and '"AVAILABLE"' in script  # each served model (test_healthcheck.py)
    assert check["start_period"]  # resnet50 + TensorRT engines take minutes to load


def test_gpu_services_keep_cudas_jit_cache_on_a_host_directory_that_must_exist(gpu_model, cpu_model):
    # A Hopper GPU compiles TensorFlow's kernels from PTX at start (TF Serving 2.17.1 carries SASS up to
    # sm_80): the cache must outlive the container, and HOME (/) is read-only.
    for name in ("exporter", "tfserving"):
        service = gpu_model["services"][name]
        mounts = {v["target"]: v for v in service["volumes"]}
        cache = mounts[service["environment"]["CUDA_CACHE_PATH"]]
        assert cache["type"] == "bind" and not cache.get("read_only")
        assert cache["source"] == str(REPO_ROOT / ".cache" / "cuda" / name)
        # Compose renders create_host_path: false as its absence; the engine would make the directory root's.
        assert not cache["bind"].get("create_host_path")
        assert int(service["environment"]["CUDA_CACHE_MAXSIZE"]) >= 2 ** 31
        cpu = cpu_model["services"][name]
        assert not any(k.startswith("CUDA_") for k in cpu.get("environment") or {})
        assert "/var/cache/cuda" not in {v["target"] for v in cpu["volumes"]}
    # A first start with an empty cache: TensorFlow warns the JIT "could take 30 minutes or longer".
    start = gpu_model["services"]["tfserving"]["healthcheck"]["start_period"]
    assert duration_seconds(start) >= 30 * 60, start


@pytest.mark.parametrize("service", ["prometheus", "grafana"])
def test_monitoring_services_have_healthchecks(gpu_model, service):
    assert gpu_model["services"][service]["healthcheck"]["test"]


def test_monitoring_mounts_the_monitoring_helpers_paths(gpu_model):
    prometheus = {v["target"]: v["source"] for v in gpu_model["services"]["prometheus"]["volumes"] if v["type"] == "bind"}
    assert prometheus["/etc/prometheus/prometheus.yml"] == str(REPO_ROOT / "monitoring/prometheus/prometheus.yml")
    assert prometheus["/etc/prometheus/rules"] == str(REPO_ROOT / "monitoring/prometheus/rules")
    grafana = {v["target"]: v["source"] for v in gpu_model["services"]["grafana"]["volumes"] if v["type"] == "bind"}
    assert grafana["/etc/grafana/provisioning"] == str(REPO_ROOT / "monitoring/grafana/provisioning")
    assert grafana["/etc/grafana/dashboards"] == str(REPO_ROOT / "monitoring/grafana/dashboards")
    for source in [*prometheus.values(), *grafana.values()]:
        assert (REPO_ROOT / source).exists(), source


def test_images_are_pinned_in_dotenv_and_never_latest(gpu_model_all_profiles):
    env = dotenv()
    images = [s["image"] for s in gpu_model_all_profiles["services"].values()]
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name and tag and "latest" not in tag, image
    raw = "\n".join((REPO_ROOT / f).read_text() for f in ("docker-compose.yml", "docker-compose.cpu.yml"))
    for line in re.findall(r"image: (\S+)", raw):
        assert "${" in line, f"{line}: the tag must come from .env"
    for key in ("TF_VERSION", "TF_BASE_IMAGE_VERSION", "TF_SERVING_VERSION", "PROMETHEUS_VERSION", "GRAFANA_VERSION", "DCGM_EXPORTER_VERSION",
                "NGINX_VERSION"):
        assert env[key] and env[key] != "latest", key


def test_tensorflow_pin_is_the_same_in_dotenv_images_and_pyproject(gpu_model):
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()

    def extra(name: str) -> list[tuple[str, str]]:
        body = re.search(rf"^{re.escape(name)} = \[(.*?)\]", pyproject, re.S | re.M).group(1)
        return re.findall(r'"([\w-]+)==([\w.]+)', body)

    cpu, gpu = extra("tf"), dict(extra("tf-gpu"))
    # The CPU-only build wherever no GPU is used; the CUDA build and the serving API for the exporter image.
    assert {name for name, _ in cpu} == {"tensorflow-cpu", "tensorflow"}
    assert set(gpu) == {"tensorflow", "tensorflow-serving-api"}
    pins = {version for _, version in cpu} | set(gpu.values())
    env = dotenv()
    assert pins == {env["TF_VERSION"]} == {env["TF_SERVING_VERSION"]}, pins
    pins = gpu
    services = gpu_model["services"]
    assert services["tfserving"]["image"] == f"tensorflow/serving:{pins['tensorflow']}-gpu"
    assert services["exporter"]["build"]["args"]["TF_VERSION"] == pins["tensorflow"]


def test_the_exporter_base_image_is_the_pinned_minor_release_with_its_own_pin(gpu_model, cpu_model):
    # TensorFlow publishes no image for most patch releases (none for 2.17.1): the base is a release
    # of the same major.minor, and the Dockerfile's pip step installs TF_VERSION on top of it.
    env = dotenv()
    base, pin = env["TF_BASE_IMAGE_VERSION"], env["TF_VERSION"]
    assert base.split(".")[:2] == pin.split(".")[:2], (base, pin)
    assert re.fullmatch(r"\d+\.\d+\.\d+", base), base
    assert gpu_model["services"]["exporter"]["build"]["args"]["BASE_IMAGE"] == f"tensorflow/tensorflow:{base}-gpu"
    assert cpu_model["services"]["exporter"]["build"]["args"]["BASE_IMAGE"] == f"tensorflow/tensorflow:{base}"
    text = (REPO_ROOT / "exporter/Dockerfile").read_text()
    assert f"ARG BASE_IMAGE=tensorflow/tensorflow:{base}-gpu" in text
    assert f"ARG TF_VERSION={pin}" in text


def exporter_calls(script: str) -> list[dict]:
    """The exporter service's `ensure` lines: variant, models and batching file of each."""
    lines = script.replace("$$", "$").strip().splitlines()  # compose's canonical output keeps $$ escaped
    assignment, *calls = lines
    name, _, value = assignment.partition("=")
    parsed = []
    for line in calls:
        argv = shlex.split(line.replace(f"${name}", value))
        assert argv[:4] == ["python", "-m", "exporter", "ensure"], line
        options = dict(a.lstrip("-").split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        variant = argv[argv.index("--variant") + 1]
        models = [a for a in argv[4:] if not a.startswith("-") and a not in (variant, "/models")]
        parsed.append({"variant": variant, "models": models, "batching": options.get("batching-config")})
    return parsed


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_exporter_exports_exactly_the_models_tfserving_serves(variant, gpu_model, cpu_model):
    services = (gpu_model if variant == "gpu" else cpu_model)["services"]
    assert services["exporter"]["entrypoint"] == ["/bin/sh", "-ec"]
    tfserving = flags(services["tfserving"]["command"])
    served = {e.name for e in load_model_server_config(
        tfserving["model_config_file"].replace("/etc/tfserving", str(REPO_ROOT / "serving"))).model_config_list.config}
    calls = exporter_calls(services["exporter"]["command"][0])
    exported = [published_name(m, c["variant"]) for c in calls for m in c["models"]]
    assert sorted(exported) == sorted(served)
    # Warmup (and TensorRT engines) cover the batch sizes tfserving's batching file allows; the CPU
    # variant serves without batching and warms up for the CPU profile that turning it on serves.
    profile = tfserving.get("batching_parameters_file", "/etc/tfserving/batching.cpu.config")
    assert {c["batching"] for c in calls} == {profile}
    cuda_cache = {"/var/cache/cuda"} if variant == "gpu" else set()
    assert {v["target"] for v in services["exporter"]["volumes"]} == {"/models", "/etc/tfserving", *cuda_cache}


def test_exporter_dockerfile_builds_from_the_pinned_tensorflow_with_tensorrt_8_6():
    text = (REPO_ROOT / "exporter/Dockerfile").read_text()
    assert re.search(r"TENSORRT_DEB_VERSION=8\.6\.\d+\.\d+-1\+cuda12", text)
    assert "libnvinfer8=" in text and "libnvinfer-plugin8=" in text
    assert 'ENTRYPOINT ["python", "-m", "exporter"]' in text


def dockerfile_steps(text: str) -> list[str]:
    """The Dockerfile's instructions, one string each (continuation lines joined, comments dropped)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [step.strip() for step in "\n".join(lines).replace("\\\n", " ").splitlines() if step.strip()]


def test_exporter_dependencies_install_in_a_layer_the_code_does_not_invalidate():
    steps = dockerfile_steps((REPO_ROOT / "exporter/Dockerfile").read_text())
    installs = [i for i, s in enumerate(steps) if s.startswith("RUN") and "pip install" in s]
    assert len(installs) == 2, steps
    deps, code = installs
    copied_before_deps = [s for s in steps[:deps] if s.startswith("COPY")]
    assert copied_before_deps == ["COPY pyproject.toml constraints.txt ./"]  # not README.md, serving/ or exporter/
    assert '".[exporter-image]"' in steps[deps] and "touch README.md" in steps[deps]
    copied_after = {s for s in steps[deps:code] if s.startswith("COPY")}
    assert {"COPY serving ./serving", "COPY exporter ./exporter"} <= copied_after
    assert "--no-deps" in steps[code] and "[exporter-image]" not in steps[code]
    # The version check runs at build time, after the last install.
    assert "tf.__version__" in steps[code] and "${TF_VERSION}" in steps[code]


def test_the_gpu_host_guide_the_files_point_to_exists_and_says_what_never_ran():
    for name in ("exporter/Dockerfile", "docker-compose.yml", ".env", "README.md"):
        for doc in re.findall(r"docs/[\w-]+\.md", (REPO_ROOT / name).read_text()):
            assert (REPO_ROOT / doc).is_file(), f"{name} points to {doc}"
    guide = (REPO_ROOT / "docs/gpu-host.md").read_text()
    assert "docs/gpu-host.md" in (REPO_ROOT / "README.md").read_text()
    for heading in ("## What you need", "## Start the stack", "## What the first start does", "## What has never run"):
        assert heading in guide, heading
    # The commands match the compose files: the CUDA cache directories they mount, the base image.
    env = dotenv()
    assert f"tensorflow/tensorflow:{env['TF_BASE_IMAGE_VERSION']}-gpu" in guide
    assert "mkdir -p .cache/cuda/tfserving .cache/cuda/exporter" in guide
