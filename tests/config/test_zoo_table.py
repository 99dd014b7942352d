"""The zoo table (``serving.model_repo``) agrees with the exporter's zoo, variants and names.

``serving.config`` renders and checks ``models.config`` from the table without
importing the exporter; this test is what fails when the two drift apart.
"""
from __future__ import annotations

from exporter.variants import VARIANTS
from exporter.zoo import MODELS
from serving.model_repo import VARIANT_SUFFIXES, ZOO, published_name


def test_every_served_model_is_a_zoo_model_of_the_exporter():
    assert sorted({m.model for m in ZOO} - set(MODELS)) == []


def test_every_zoo_model_of_the_exporter_is_served():
    assert sorted(set(MODELS) - {m.model for m in ZOO}) == []


def test_the_variants_are_the_exporters():
    assert sorted(VARIANT_SUFFIXES) == sorted(VARIANTS)
    assert sorted({m.variant for m in ZOO} - set(VARIANTS)) == []


def test_the_exporter_publishes_every_served_model_under_its_name():
    assert [(m.name, VARIANTS[m.variant].published_name(m.model)) for m in ZOO
            if VARIANTS[m.variant].published_name(m.model) != m.name] == []
    assert [m.name for m in ZOO] == [published_name(m.model, m.variant) for m in ZOO]


def test_published_names_are_distinct():
    assert len({m.name for m in ZOO}) == len(ZOO)


def test_only_tensorrt_variants_are_gpu_only():
    assert sorted({m.variant for m in ZOO if m.gpu_only}) == ["trt-fp16"]
