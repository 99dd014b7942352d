"""The server TF Serving's own ported tests run against: TF Serving's test models under its test names.

``write_testdata_repo(dest, root_in_server)`` lays out the rebuilt testdata
models (``tests.support.half_plus_two``) and a ``models.config`` serving:

* ``saved_model_half_plus_two_2_versions`` — ``http_rest_api_handler_test.cc``'s
  server: versions 123 and 124 on disk, policy ``specific { versions: 123 }``,
  label ``Version_Label`` -> 123;
* ``default`` and ``half_plus_two`` — ``saved_model_half_plus_two_cpu`` (version
  123), ``tensorflow_model_server_test.py``'s ``--model_name=default`` server and
  its config-file server;
* ``half_plus_three`` — ``saved_model_half_plus_three`` (version 123);
* ``test_model`` — ``saved_model_half_plus_two_2_versions``, policy ``specific { versions: 123 }``: the
  ``test_model`` of ``classification_service_test.cc``, ``regression_service_test.cc``,
  ``predict_util_test.cc`` and ``multi_inference_helper_test.cc``;
* ``two_versions`` — the same directory, policy ``all``: ``get_model_status_impl_test.cc``'s model
  once both of its versions are loaded.

A ``monitoring.config`` turns on Prometheus at TF Serving's default path.
``testdata_flags(root)`` is the command line, the same for
``tensorflow_model_server`` and ``python -m serving.server``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from tests.support.half_plus_two import half_plus_two_repo

__all__ = ["REST_HANDLER_MODEL", "VERSION", "VERSION_LABEL", "TESTDATA_MODELS", "write_testdata_repo",
           "testdata_flags"]

REST_HANDLER_MODEL = "saved_model_half_plus_two_2_versions"
VERSION = 123
VERSION_LABEL = "Version_Label"
TESTDATA_MODELS = [REST_HANDLER_MODEL, "default", "half_plus_two", "half_plus_three", "test_model", "two_versions"]


def _config_text(root: Path) -> str:
    def entry(name: str, directory: str, extra: str = "") -> str:
        return (f"  config {{\n    name: '{name}'\n    base_path: '{root / directory}'\n"
                f"    model_platform: 'tensorflow'\n{extra}  }}\n")

    return ("model_config_list {\n"
            + entry(REST_HANDLER_MODEL, "saved_model_half_plus_two_2_versions",
                    f"    model_version_policy {{ specific {{ versions: {VERSION} }} }}\n"
                    f"    version_labels {{ key: '{VERSION_LABEL}' value: {VERSION} }}\n")
            + entry("default", "saved_model_half_plus_two_cpu")
            + entry("half_plus_two", "saved_model_half_plus_two_cpu")
            + entry("half_plus_three", "saved_model_half_plus_three")
            + entry("test_model", "saved_model_half_plus_two_2_versions",
                    f"    model_version_policy {{ specific {{ versions: {VERSION} }} }}\n")
            + entry("two_versions", "saved_model_half_plus_two_2_versions", "    model_version_policy { all {} }\n")
            + "}\n")


def write_testdata_repo(dest: Path, root_in_server: Optional[Path] = None) -> Path:
    """The models and ``models.config`` under ``dest`` (config base paths under ``root_in_server``)."""
    half_plus_two_repo(dest)
    (dest / "models.config").write_text(_config_text(root_in_server or dest))
    (dest / "monitoring.config").write_text(
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }\n')
    return dest


def testdata_flags(root: Path) -> list[str]:
    """Flags for a server whose view of the repository is ``root``; ports are added by the caller."""
    return [f"--model_config_file={root / 'models.config'}", f"--monitoring_config_file={root / 'monitoring.config'}",
            "--file_system_poll_wait_seconds=1",
            "--max_num_load_retries=0",
            # The label is in the initial config: TF Serving checks labels before the first load.
            "--allow_version_labels_for_unavailable_models"]
