"""Every compose service, both variants, every profile: the container hardening rules, on Compose's own model.

Each rule is checked for every service; a service that must break one is listed
here with the reason, and nowhere else.
"""
from __future__ import annotations

import pytest

from serving.config.compose import load_compose_model
from serving.stack.choice import compose_profiles
from tests.support.compose import CPU, GPU, PASSWORD, compose_env

# Services that run as root, and why.
ROOT_SERVICES = {
    "dcgm-exporter": "NVIDIA DCGM reads the GPUs' profiling counters as root with SYS_ADMIN",
}
# Capabilities a service adds back after dropping ALL, and the profile it must be under.
ADDED_CAPABILITIES = {"dcgm-exporter": ({"SYS_ADMIN"}, "gpu-metrics")}
# Writable bind mounts (host paths a container may change). CUDA's JIT cache: GPU variant only.
WRITABLE_BINDS = {"exporter": {"/models", "/var/cache/cuda"}, "tfserving": {"/var/cache/cuda"}}


def service_name(key: str) -> str:
    return key.split("/", 1)[1]


def failures(every_service: dict, rule) -> dict[str, str]:
    """``{service: why}`` for each service that breaks ``rule`` (which returns None or why)."""
    found = {key: rule(service_name(key), service) for key, service in every_service.items()}
    return {key: why for key, why in found.items() if why}


def test_both_variants_are_checked_with_every_service(every_service):
    names = {service_name(k) for k in every_service}
    assert names == {"exporter", "tfserving", "gateway", "capture", "prometheus", "grafana", "dcgm-exporter"}
    assert len(every_service) == 14


def test_every_service_runs_as_an_explicit_non_root_user(every_service):
    def rule(name: str, service: dict):
        user = str(service.get("user", ""))
        if not user:
            return "no `user:` (the image's default user applies)"
        is_root = user.split(":")[0] in ("0", "root")
        if is_root and name not in ROOT_SERVICES:
            return f"runs as root ({user})"
        if not is_root and name in ROOT_SERVICES:
            return "listed as needing root but is not root: drop it from ROOT_SERVICES"
        return None
    assert failures(every_service, rule) == {}


def test_every_root_filesystem_is_read_only_with_tmpfs_for_scratch(every_service):
    def rule(name: str, service: dict):
        if service.get("read_only") is not True:
            return "read_only is not true"
        for mount in service.get("tmpfs", []):
            if "size=" not in mount:
                return f"tmpfs {mount} has no size"
        return None
    assert failures(every_service, rule) == {}


def test_every_service_drops_every_capability_and_adds_back_only_what_is_listed(every_service):
    def rule(name: str, service: dict):
        if service.get("cap_drop") != ["ALL"]:
            return f"cap_drop is {service.get('cap_drop')}, not [ALL]"
        added = set(service.get("cap_add", []))
        allowed = ADDED_CAPABILITIES.get(name, (set(), None))[0]
        return f"adds {sorted(added - allowed)}" if added - allowed else None
    assert failures(every_service, rule) == {}


def test_every_service_forbids_gaining_privileges(every_service):
    def rule(name: str, service: dict):
        if "no-new-privileges:true" not in service.get("security_opt", []):
            return "no no-new-privileges:true"
        if service.get("privileged"):
            return "privileged"
        shared = [k for k in ("network_mode", "pid", "ipc", "userns_mode") if service.get(k) == "host"]
        return f"shares the host's {shared}" if shared else None
    assert failures(every_service, rule) == {}


def test_every_service_has_memory_cpu_and_pids_limits(every_service):
    def rule(name: str, service: dict):
        missing = [k for k in ("mem_limit", "cpus", "pids_limit") if not service.get(k)]
        if missing:
            return f"no {', '.join(missing)}"
        if int(service["mem_limit"]) <= 0 or float(service["cpus"]) <= 0 or int(service["pids_limit"]) <= 0:
            return "a limit is not positive"
        return None
    assert failures(every_service, rule) == {}


def test_tf_serving_memory_is_bounded_well_below_a_host(gpu_model, cpu_model):
    for model in (gpu_model, cpu_model):
        limit = int(model["services"]["tfserving"]["mem_limit"])
        assert 1 << 30 <= limit <= 64 << 30


def test_only_listed_binds_are_writable(every_service):
    def rule(name: str, service: dict):
        writable = {v["target"] for v in service.get("volumes", [])
                    if v["type"] == "bind" and not v.get("read_only")}
        extra = writable - WRITABLE_BINDS.get(name, set())
        return f"writable binds {sorted(extra)}" if extra else None
    assert failures(every_service, rule) == {}


def test_added_capabilities_exist_only_under_their_profile(gpu_model, cpu_model, every_service):
    for key, service in every_service.items():
        name = service_name(key)
        if name in ADDED_CAPABILITIES:
            assert service.get("profiles") == [ADDED_CAPABILITIES[name][1]], key
    # Without the profile, `up` starts nothing that adds a capability.
    for model in (gpu_model, cpu_model):
        assert not any(s.get("cap_add") for s in model["services"].values())
        assert "dcgm-exporter" not in model["services"]
    with_profile = load_compose_model(GPU, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD,
                                                           COMPOSE_PROFILES="gpu-metrics"))
    assert with_profile["services"]["dcgm-exporter"]["cap_add"] == ["SYS_ADMIN"]


@pytest.mark.parametrize("files", [GPU, CPU], ids=["gpu", "cpu"])
def test_hardening_holds_with_the_values_of_dotenv_changed(files):
    """The limits come from .env with defaults; another host's values keep every rule."""
    env = compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, TFS_MEM_LIMIT="8g", TFS_CPUS="2", HOST_UID="1234")
    tfserving = load_compose_model(files, env=env)["services"]["tfserving"]
    assert int(tfserving["mem_limit"]) == 8 << 30 and float(tfserving["cpus"]) == 2
    assert tfserving["user"] == "1234:1000" and tfserving["read_only"] is True


def test_make_up_turns_the_gpu_metrics_profile_on_only_on_a_gpu_host():
    assert compose_profiles("compose-gpu") == [ADDED_CAPABILITIES["dcgm-exporter"][1]]
    assert compose_profiles("compose-cpu") == [] and compose_profiles("embedded") == []


def test_dcgm_exporter_skips_its_entrypoints_setcap_on_the_read_only_root(every_service):
    # dcgm-exporter 3.3.5-3.4.1 docker/dcgm-exporter-entrypoint.sh: setcap runs unless NO_SETCAP is
    # non-empty, fails on a read-only root and prints a misleading "use --cap-add SYS_ADMIN".
    for key in ("gpu/dcgm-exporter", "cpu/dcgm-exporter"):
        service = every_service[key]
        assert service["read_only"] is True and "SYS_ADMIN" in service["cap_add"]
        assert service["environment"]["NO_SETCAP"]


def test_every_container_log_is_rotated(every_service):
    """json-file with a size and a count, on every service of both variants (the local images' override
    changes image names only: test_local_override.py). Before: Docker's default json-file without
    max-size, which grows until the disk is full."""
    def rule(name: str, service: dict):
        logging = service.get("logging") or {}
        options = logging.get("options") or {}
        if logging.get("driver") != "json-file" or not options.get("max-size") or not options.get("max-file"):
            return f"log not rotated: {logging}"
        return None
    assert failures(every_service, rule) == {}
