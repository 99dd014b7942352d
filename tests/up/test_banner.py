"""The banner's batching line: the settings the server runs with and the file they come from."""
from __future__ import annotations

from serving.checkout import REPO_ROOT
from serving.stack.banner import batching_summary

CPU_FILE = REPO_ROOT / "serving" / "batching.cpu.config"


def test_the_batching_line_names_the_settings_and_the_file():
    line = batching_summary(["--enable_batching=true", f"--batching_parameters_file={CPU_FILE}"], REPO_ROOT)
    assert line == ("batching: max_batch_size 64, batch_timeout_micros 0, max_enqueued_batches 16, "
                    "num_batch_threads 4, from serving/batching.cpu.config")


def test_a_file_outside_the_checkout_is_named_by_its_path(tmp_path):
    path = tmp_path / "b.config"
    path.write_text("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 8\n")
    line = batching_summary(["--enable_batching", f"--batching_parameters_file={path}"], REPO_ROOT)
    assert line == f"batching: max_batch_size 8, allowed_batch_sizes [4, 8], from {path}"


def test_without_enable_batching_the_line_says_it_is_off():
    assert batching_summary([f"--batching_parameters_file={CPU_FILE}"], REPO_ROOT).startswith("batching: off")
    assert batching_summary(["--enable_batching=false"], REPO_ROOT).startswith("batching: off")
