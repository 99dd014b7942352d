"""Every rendered object validates: built-in kinds against Kubernetes 1.32's OpenAPI schema (PyPI
``kubernetes-validate``, offline, strict: unknown fields fail), custom resources against their
published CRD schemas vendored in deploy/k8s/schemas/ (see its README for versions and sources).
"""
from __future__ import annotations

import copy
from functools import cache

import pytest
import yaml
from jsonschema import Draft4Validator

from tests.support.k8s import K8S_DIR, OVERLAYS

KUBERNETES_VERSION = "1.32.0"  # the kubectl of the build image; bump with the cluster
SCHEMAS = K8S_DIR / "schemas"


def kubernetes_validate():
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra) is not installed")


def _closed(schema: dict) -> dict:
    """The schema with every object that lists properties closed to other fields, as strict field
    validation on the API server treats a structural schema (unless it preserves unknown fields)."""
    schema = copy.deepcopy(schema)

    def close(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    # apiVersion, kind and metadata are the API server's, whatever the CRD lists.
    schema["properties"].update({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                 "metadata": {"type": "object"}})
    return schema


@cache
def crd_schemas() -> dict[tuple[str, str], Draft4Validator]:
    """``(apiVersion, kind)`` → a validator for each served version of each vendored CRD."""
    out = {}
    for path in sorted(SCHEMAS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        assert crd["kind"] == "CustomResourceDefinition", path
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = _closed(version["schema"]["openAPIV3Schema"])
                # The metaschema without its format checks: the CRDs' patterns are Go (RE2) regexes,
                # e.g. a `^(?i)...` that Python's re rejects in a field the manifests never set.
                Draft4Validator(Draft4Validator.META_SCHEMA).validate(schema)
                out[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = Draft4Validator(schema)
    return out


def _crd_errors(doc: dict) -> list[str]:
    validator = crd_schemas()[(doc["apiVersion"], doc["kind"])]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_vendored_crds_cover_the_custom_resources_used():
    assert {kind for _, kind in crd_schemas()} == {"ServiceMonitor", "PrometheusRule", "HTTPRoute", "GRPCRoute",
                                                   "VirtualService"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_its_schema(rendered, overlay):
    kv = kubernetes_validate()
    problems = []
    for doc in rendered[overlay]:
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        if (doc["apiVersion"], doc["kind"]) in crd_schemas():
            problems += [f"{name}: {e}" for e in _crd_errors(doc)]
            continue
        try:  # a kind with no schema raises SchemaNotFoundError: every object must be validated somewhere
            kv.validate(doc, KUBERNETES_VERSION, strict=True)
        except kv.ValidationError as error:
            problems.append(f"{name}: {error}")
    assert problems == []


def test_a_misspelt_field_fails_both_validations(rendered):
    kv = kubernetes_validate()
    docs = {(d["kind"], d["metadata"]["name"]): d for d in rendered["canary"]}
    deployment = copy.deepcopy(docs[("Deployment", "tfserving")])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"grpc": {"port": 8500}}
    with pytest.raises(kv.ValidationError):
        kv.validate(deployment, KUBERNETES_VERSION, strict=True)
    route = copy.deepcopy(docs[("HTTPRoute", "tfserving-rest")])
    route["spec"]["rules"][0]["backendRefs"][0]["wieght"] = 100
    assert any("wieght" in e for e in _crd_errors(route))
    monitor = copy.deepcopy(docs[("ServiceMonitor", "tfserving")])
    monitor["spec"]["endpoints"][0]["interval"] = "fifteen seconds"  # not a duration: the CRD's pattern
    assert _crd_errors(monitor)
    rule = copy.deepcopy(docs[("PrometheusRule", "tfserving")])
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert any("'expr' is a required property" in e for e in _crd_errors(rule))
