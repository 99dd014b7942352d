"""What the overlays render: the compose command line, the repository's config files, and the fleet's wiring.

Each check reads ``kubectl kustomize``'s output and compares it with its
source read independently (Compose's parsed model, the files themselves), so
a stale generated file or a broken patch fails here too.
"""
from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from deploy.k8s.generate import duration_seconds
from serving.checkout import REPO_ROOT
from serving.config import load_monitoring_config
from tests.support.k8s import K8S_DIR, OVERLAYS, VARIANT, objects, pod_specs

SERVING_CONFIGS = sorted((REPO_ROOT / "serving").glob("*.config"))
RULE_FILES = sorted((REPO_ROOT / "monitoring" / "prometheus" / "rules").glob("*.yml"))
ADAPTER_RULES = K8S_DIR / "prometheus-adapter" / "rules.yaml"


def _container(pod_spec: dict, name: str) -> dict:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == name]
    return container


def _flag(args: list[str], name: str) -> str:
    (value,) = [a.partition("=")[2] for a in args if a.partition("=")[0] == f"--{name}"]
    return value


def _servers(docs: list[dict]) -> dict[str, dict]:
    return {name: d for name, d in objects(docs, "Deployment").items() if name.startswith("tfserving")}


def test_the_overlays_are_found():
    assert {"gpu", "cpu", "canary", "canary-istio"} <= set(OVERLAYS)
    assert set(OVERLAYS) <= set(VARIANT), "say which compose variant a new overlay runs (VARIANT)"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tf_serving_runs_the_compose_command_line_and_image(rendered, compose, overlay):
    service = compose[VARIANT[overlay]]["tfserving"]
    servers = _servers(rendered[overlay])
    assert servers, "no TF Serving Deployment"
    for deployment in servers.values():
        container = _container(deployment["spec"]["template"]["spec"], "tfserving")
        assert container["command"] == service["entrypoint"]
        assert container["args"] == service["command"]
        assert container["image"] == service["image"]
        assert re.fullmatch(r"tensorflow/serving:\d+\.\d+\.\d+" + ("-gpu" if VARIANT[overlay] == "gpu" else ""),
                            container["image"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_exporter_job_runs_the_compose_exporter(rendered, compose, overlay):
    service = compose[VARIANT[overlay]]["exporter"]
    container = _container(objects(rendered[overlay], "Job")["exporter"]["spec"]["template"]["spec"], "exporter")
    assert container["image"] == service["image"]
    assert [container["command"], container["args"]] == [service["entrypoint"], service["command"]]
    # But CUDA's JIT cache: compose keeps it on a host bind mount, which the Job has no counterpart of.
    environment = {k: v for k, v in service["environment"].items() if not k.startswith("CUDA_CACHE_")}
    assert "CUDA_CACHE_PATH" in service["environment"] or VARIANT[overlay] == "cpu"
    assert {e["name"]: e["value"] for e in container["env"]} == environment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_config_map_holds_the_repository_files_byte_for_byte(rendered, overlay):
    (config_map,) = [d for name, d in objects(rendered[overlay], "ConfigMap").items()
                     if name.startswith("tfserving-config-")]
    assert config_map["data"] == {p.name: p.read_text() for p in SERVING_CONFIGS}
    # Every pod mounts it where compose mounts ./serving, and every path flag points into it.
    for key, spec in pod_specs(rendered[overlay]).items():
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m for c in spec["containers"] for m in c["volumeMounts"]}
        assert volumes[mounts["/etc/tfserving"]["name"]]["configMap"]["name"] == config_map["metadata"]["name"], key
    for deployment in _servers(rendered[overlay]).values():
        args = _container(deployment["spec"]["template"]["spec"], "tfserving")["args"]
        batching = ("batching_parameters_file",) if "--enable_batching=true" in args else ()  # not on CPU
        for flag in ("model_config_file", *batching, "monitoring_config_file"):
            path = _flag(args, flag)
            assert path.startswith("/etc/tfserving/") and path.rpartition("/")[2] in config_map["data"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_prometheus_rule_holds_every_rule_file_group(rendered, overlay):
    rule = objects(rendered[overlay], "PrometheusRule")["tfserving"]
    groups = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    assert rule["spec"]["groups"] == groups


def test_probes_size_startup_for_warmup_and_check_a_model_available(rendered, compose):
    healthcheck = compose["gpu"]["tfserving"]["healthcheck"]
    container = _container(_servers(rendered["gpu"])["tfserving"]["spec"]["template"]["spec"], "tfserving")
    startup, readiness = container["startupProbe"], container["readinessProbe"]
    # Readiness and startup run compose's healthcheck: the model's status over REST says AVAILABLE.
    assert startup["exec"]["command"] == readiness["exec"]["command"] == healthcheck["test"][1:]
    assert "AVAILABLE" in readiness["exec"]["command"][-1] and "/v1/models/" in readiness["exec"]["command"][-1]
    # Startup allows compose's start_period (loading and warmup: 600 s) plus its retries.
    allowed = (duration_seconds(healthcheck["start_period"])
               + healthcheck["retries"] * duration_seconds(healthcheck["interval"]))
    assert allowed >= 600 and startup["periodSeconds"] * startup["failureThreshold"] >= allowed
    # Liveness asks the gRPC health service that the command line turns on, on the gRPC port.
    assert "--enable_grpc_healthcheck_service=true" in container["args"]
    assert container["livenessProbe"]["grpc"]["port"] == int(_flag(container["args"], "port"))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_expose_the_command_lines_ports_with_app_protocols(rendered, overlay):
    services = {n: s for n, s in objects(rendered[overlay], "Service").items() if n.startswith("tfserving")}
    istio = overlay == "canary-istio"
    for deployment_name, deployment in _servers(rendered[overlay]).items():
        template = deployment["spec"]["template"]
        args = _container(template["spec"], "tfserving")["args"]
        service = services[deployment_name]
        # The Service selects this track's pods and no other track's.
        selector = service["spec"]["selector"].items()
        for other_name, other in _servers(rendered[overlay]).items():
            assert (selector <= other["spec"]["template"]["metadata"]["labels"].items()) == (other_name == deployment_name)
        ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert ports["grpc"]["port"] == int(_flag(args, "port"))
        assert ports["rest"]["port"] == int(_flag(args, "rest_api_port"))
        assert ports["grpc"]["appProtocol"] == ("grpc" if istio else "kubernetes.io/h2c")
        assert ports["rest"]["appProtocol"] == "http"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_service_monitor_scrapes_the_monitoring_config_path_on_rest(rendered, overlay):
    monitor = objects(rendered[overlay], "ServiceMonitor")["tfserving"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == load_monitoring_config(REPO_ROOT / "serving" / "monitoring.config").prometheus_config.path
    assert endpoint["port"] == "rest"
    prometheus = yaml.safe_load((REPO_ROOT / "monitoring" / "prometheus" / "prometheus.yml").read_text())
    assert endpoint["interval"] == prometheus["global"]["scrape_interval"]
    # The alert rules ask for job="tfserving": both tracks' Services carry that job label value.
    for name, service in objects(rendered[overlay], "Service").items():
        if name.startswith("tfserving"):
            assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "tfserving"
            assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_hardened_and_the_model_volume_is_read_only_for_servers(rendered, overlay):
    for key, spec in pod_specs(rendered[overlay]).items():
        assert spec["automountServiceAccountToken"] is False, key
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"], key
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys() <= container["resources"]["limits"].keys()
        volumes = {v["name"]: v for v in spec["volumes"]}
        (models,) = [m for c in spec["containers"] for m in c["volumeMounts"] if m["mountPath"] == "/models"]
        claim = volumes[models["name"]]["persistentVolumeClaim"]
        claims = objects(rendered[overlay], "PersistentVolumeClaim")
        if key.startswith("Deployment/"):
            assert models["readOnly"] is True and claim["readOnly"] is True
            assert claims[claim["claimName"]]["spec"]["accessModes"] == ["ReadOnlyMany"]
        else:  # the exporter writes versions
            assert not models.get("readOnly") and claims[claim["claimName"]]["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_gpu_variants_ask_for_a_gpu_and_cpu_variants_do_not(rendered, overlay):
    for key, spec in pod_specs(rendered[overlay]).items():
        limits = spec["containers"][0]["resources"]["limits"]
        assert ("nvidia.com/gpu" in limits) == (VARIANT[overlay] == "gpu"), key


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_drain_fits_the_grace_period_and_a_budget_and_spread_cover_the_stable_pods(rendered, overlay):
    stable = _servers(rendered[overlay])["tfserving"]
    spec = stable["spec"]["template"]["spec"]
    pre_stop = _container(spec, "tfserving")["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + 30
    assert {c["topologyKey"] for c in spec["topologySpreadConstraints"]} >= {"kubernetes.io/hostname"}
    budget = objects(rendered[overlay], "PodDisruptionBudget")["tfserving"]
    assert budget["spec"]["selector"]["matchLabels"] == stable["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_hpa_scales_the_stable_deployment_on_metrics_the_adapter_serves(rendered, overlay):
    hpa = objects(rendered[overlay], "HorizontalPodAutoscaler")["tfserving"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tfserving"}
    served = {rule["name"]["as"] for rule in yaml.safe_load(ADAPTER_RULES.read_text())["rules"]}
    names = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]]
    assert set(names) <= served
    assert names[0] == "tfserving_requests_per_second"
    assert ("tfserving_batch_queuing_latency_microseconds" in names) == (overlay == "gpu-queue-latency")
    behavior = hpa["spec"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] < behavior["scaleDown"]["stabilizationWindowSeconds"]
    # The adapter's rules ship in the overlay, in the adapter's namespace, as its config.yaml.
    (config_map,) = [d for d in rendered[overlay] if d["kind"] == "ConfigMap"
                     and d["metadata"]["namespace"] == "monitoring"]
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == yaml.safe_load(ADAPTER_RULES.read_text())


def test_adapter_rules_read_tf_serving_series_per_pod():
    for rule in yaml.safe_load(ADAPTER_RULES.read_text())["rules"]:
        series = re.match(r"(:tensorflow:serving:[a-z_:]+)\{", rule["seriesQuery"]).group(1)
        assert rule["name"]["matches"] == f"^{series}$"
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "by (<<.GroupBy>>)" in rule["metricsQuery"]


@pytest.mark.parametrize("overlay", ["canary", "canary-istio"])
def test_the_canary_splits_traffic_by_weight_between_the_two_tracks(rendered, overlay):
    docs = rendered[overlay]
    services = objects(docs, "Service")
    tracks = {n: d["spec"]["template"]["metadata"]["labels"]["tfs-stack/track"] for n, d in _servers(docs).items()}
    assert tracks == {"tfserving": "stable", "tfserving-canary": "canary"}
    assert objects(docs, "Deployment")["tfserving-canary"]["spec"]["replicas"] == 1
    if overlay == "canary":
        routes = [*objects(docs, "HTTPRoute").values(), *objects(docs, "GRPCRoute").values()]
        assert len(routes) == 2
        splits = [rule["backendRefs"] for route in routes for rule in route["spec"]["rules"]]
        refs = [(ref["name"], ref["port"], ref["weight"]) for split in splits for ref in split]
    else:
        (virtual_service,) = objects(docs, "VirtualService").values()
        splits = [http["route"] for http in virtual_service["spec"]["http"]]
        refs = [(r["destination"]["host"].split(".")[0], r["destination"]["port"]["number"], r["weight"])
                for split in splits for r in split]
    for name, port, _ in refs:
        assert port in [p["port"] for p in services[name]["spec"]["ports"]]
    for split in splits:
        weights = [ref["weight"] for ref in split]
        assert len(split) == 2 and sum(weights) == 100 and weights == [100, 0]  # starts with no canary traffic
    assert {name for name, _, _ in refs} == {"tfserving", "tfserving-canary"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_gateway_namespace_and_prometheus_reach_tf_serving(rendered, overlay):
    policies = objects(rendered[overlay], "NetworkPolicy")
    assert policies["default-deny-ingress"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    ingress = policies["tfserving-ingress"]["spec"]["ingress"]
    peers = [peer for rule in ingress for peer in rule["from"]]
    assert peers == [
        {"namespaceSelector": {"matchLabels": {"tfs-stack/gateway": "true"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
    ]
    assert [p["port"] for p in ingress[1]["ports"]] == ["rest"]  # Prometheus: the metrics port only
    selector = policies["tfserving-ingress"]["spec"]["podSelector"]["matchLabels"].items()
    for deployment in _servers(rendered[overlay]).values():
        assert selector <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_adapter_queries_are_valid_promql_once_the_adapter_fills_them_in(promtool, tmp_path):
    # What prometheus-adapter substitutes for one pod of the namespace, grouped by pod.
    fill = {"<<.LabelMatchers>>": 'namespace="tfs-stack",pod="tfserving-0"', "<<.GroupBy>>": "pod"}
    rules = []
    for rule in yaml.safe_load(ADAPTER_RULES.read_text())["rules"]:
        query = rule["metricsQuery"].replace("<<.Series>>", rule["name"]["matches"].strip("^$"))
        for placeholder, value in fill.items():
            query = query.replace(placeholder, value)
        assert "<<" not in query
        rules.append({"record": f"pod:{rule['name']['as']}", "expr": query})
    path = tmp_path / "adapter.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": rules}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_namespaced_object_names_its_namespace(rendered, overlay):
    # Without one, `kubectl apply -k` creates the object in whatever namespace kubectl points at,
    # away from the Services in tfs-stack that a route sends to.
    missing = [f"{doc['kind']}/{doc['metadata']['name']}" for doc in rendered[overlay]
               if doc["kind"] not in CLUSTER_SCOPED and not doc["metadata"].get("namespace")]
    assert not missing, f"{overlay}: no metadata.namespace on {missing}"
