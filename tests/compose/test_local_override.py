"""docker-compose.local.yml names the stand-in images and changes nothing else.

The merged model (Compose's own ``config``) of the CPU stack with the override
must equal the one without it once image names (and the exporter's
``BASE_IMAGE`` build argument) are masked: no port, flag, volume, user,
healthcheck or hardening line may differ, so what runs on the local images
is the stack a user runs.
"""
from __future__ import annotations

import copy

import pytest

from serving.checkout import REPO_ROOT
from serving.config.compose import load_compose_model
from tests.support.compose import CPU, PASSWORD, compose_env

LOCAL = [*CPU, REPO_ROOT / "docker-compose.local.yml"]
UPSTREAM_NAMES = ("tensorflow/serving", "tensorflow/tensorflow", "nginx", "prom/prometheus", "grafana/grafana",
                  "nvcr.io/", "nvidia/")


def masked(model: dict) -> dict:
    out = copy.deepcopy(model)
    for service in out["services"].values():
        service.pop("image", None)
        service.get("build", {}).get("args", {}).pop("BASE_IMAGE", None)
    return out


@pytest.fixture(scope="module")
def local_model() -> dict:
    return load_compose_model(LOCAL, env=compose_env(GRAFANA_ADMIN_PASSWORD=PASSWORD, COMPOSE_PROFILES="*"))


def test_the_override_changes_only_image_names(cpu_model_all_profiles, local_model):
    assert masked(local_model) == masked(cpu_model_all_profiles)


def test_the_override_does_change_the_images_it_names(cpu_model_all_profiles, local_model):
    changed = {name for name, service in local_model["services"].items()
               if service.get("image") != cpu_model_all_profiles["services"][name].get("image")
               or service.get("build") != cpu_model_all_profiles["services"][name].get("build")}
    assert changed == {"exporter", "capture", "tfserving", "gateway", "prometheus"}


def test_no_stand_in_carries_an_upstream_name(cpu_model_all_profiles, local_model):
    for name in ("tfserving", "gateway", "prometheus"):
        image = local_model["services"][name]["image"]
        assert image.startswith("tfs-stack-local/"), image
        assert not image.startswith(UPSTREAM_NAMES), image
    for built in ("exporter", "capture"):
        base = local_model["services"][built]["build"]["args"]["BASE_IMAGE"]
        assert base.startswith("tfs-stack-local/"), base


def test_the_stand_ins_are_the_images_make_images_builds(local_model):
    from deploy.images import IMAGES

    built = {image.name for image in IMAGES}
    named = {local_model["services"][n]["image"] for n in ("tfserving", "gateway", "prometheus")}
    named |= {local_model["services"][n]["build"]["args"]["BASE_IMAGE"] for n in ("exporter", "capture")}
    assert named <= built, named - built
