"""The committed TF Serving config files, parsed with TF Serving's protos."""
from __future__ import annotations

import re

import pytest
import yaml

from serving.checkout import REPO_ROOT
from serving.config import load_batching_parameters, load_model_server_config, load_monitoring_config
from serving.config.checks import check_batching_parameters
from serving.config.models import render_model_server_config, without_gpu_only
from serving.model_repo import ZOO

SERVING = REPO_ROOT / "serving"
PUBLISHED = {"digits", "digits_xla", "resnet50", "resnet50_xla", "resnet50_trt_fp16", "text", "ranker"}


def entries(path):
    return {e.name: e for e in load_model_server_config(path).model_config_list.config}


def test_models_config_serves_every_published_name_from_the_container_models_dir():
    config = entries(SERVING / "models.config")
    assert set(config) == PUBLISHED
    assert {e.base_path for e in config.values()} == {f"/models/{n}" for n in PUBLISHED}
    assert {e.model_platform for e in config.values()} == {"tensorflow"}


def test_cpu_models_config_is_the_gpu_config_without_tensorrt():
    gpu = load_model_server_config(SERVING / "models.config")
    cpu = load_model_server_config(SERVING / "models.cpu.config")
    assert set(entries(SERVING / "models.cpu.config")) == PUBLISHED - {"resnet50_trt_fp16"}
    assert cpu == without_gpu_only(gpu)


@pytest.mark.parametrize("name", ["models.config", "models.cpu.config"])
def test_fresh_stack_serves_version_1_with_both_labels_on_it(name):
    for entry in entries(SERVING / name).values():
        assert entry.model_version_policy.WhichOneof("policy_choice") == "specific", entry.name
        assert list(entry.model_version_policy.specific.versions) == [1], entry.name
        assert dict(entry.version_labels) == {"stable": 1, "canary": 1}, entry.name


def test_committed_models_config_is_what_render_writes_for_a_fresh_repository():
    assert load_model_server_config(SERVING / "models.config") == render_model_server_config(ZOO)


@pytest.mark.parametrize("name", ["batching.config", "batching.cpu.config"])
def test_batching_profiles_parse_and_obey_tf_servings_rules(name):
    params = load_batching_parameters(SERVING / name)
    assert params.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    assert check_batching_parameters(params) == []
    assert params.num_batch_threads.value >= 1 and params.max_batch_size.value >= 1


def test_gpu_profile_pads_to_few_shapes_ending_at_max_batch_size():
    params = load_batching_parameters(SERVING / "batching.config")
    sizes = list(params.allowed_batch_sizes)
    assert sizes == sorted(set(sizes)) and sizes[-1] == params.max_batch_size.value
    assert params.batch_timeout_micros.value > 0  # GPU: wait a little to fill batches


def test_cpu_profile_does_not_wait_or_pad():
    params = load_batching_parameters(SERVING / "batching.cpu.config")
    assert params.batch_timeout_micros.value == 0
    assert list(params.allowed_batch_sizes) == []


def test_batching_rule_check_rejects_what_tf_serving_rejects():
    from serving.config import parse_text_proto
    from serving.config.protos import batching_parameters_class

    def problems(text):
        return check_batching_parameters(parse_text_proto(text, batching_parameters_class()()))

    assert problems("max_batch_size { value: 8 } allowed_batch_sizes: [2, 4]")  # last != max
    assert problems("max_batch_size { value: 8 } allowed_batch_sizes: [4, 2, 8]")  # not increasing
    assert problems("max_batch_size { value: 8 } max_execution_batch_size { value: 16 }")
    assert problems("max_batch_size { value: 8 } allowed_batch_sizes: [2, 8]") == []


def test_unknown_batching_field_is_a_parse_error_naming_the_proto(tmp_path):
    bad = tmp_path / "batching.config"
    bad.write_text("max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\n")
    with pytest.raises(ValueError, match="BatchingParameters"):
        load_batching_parameters(bad)


def test_monitoring_path_is_the_one_prometheus_scrapes_on_the_rest_port():
    config = load_monitoring_config(SERVING / "monitoring.config")
    assert config.prometheus_config.enable
    scrape = yaml.safe_load((REPO_ROOT / "monitoring/prometheus/prometheus.yml").read_text())
    job = next(j for j in scrape["scrape_configs"] if j["job_name"] == "tfserving")
    assert job["metrics_path"] == config.prometheus_config.path
    compose = (REPO_ROOT / "docker-compose.yml").read_text()
    rest_port = re.search(r"--rest_api_port=(\d+)", compose).group(1)
    assert job["static_configs"][0]["targets"] == [f"tfserving:{rest_port}"]


def test_every_profile_accepts_the_warmup_batches_the_exporter_writes():
    from serving.config.checks import check_warmup_fits

    warmup_sizes = list(load_batching_parameters(SERVING / "batching.config").allowed_batch_sizes)
    for name in ("batching.config", "batching.cpu.config"):
        params = load_batching_parameters(SERVING / name)
        assert check_warmup_fits(params, warmup_sizes) == [], name
    small = load_batching_parameters(SERVING / "batching.cpu.config")
    small.max_batch_size.value = 32
    assert check_warmup_fits(small, warmup_sizes) == [
        "warmup batch sizes [64] exceed max_batch_size 32: loading a model with those warmup requests fails"]
