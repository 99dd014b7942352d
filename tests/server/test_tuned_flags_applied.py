"""The flags the tuner searches really take effect in the embedded server, as in TF Serving.

- ``--tensorflow_intra_op_parallelism`` / ``--tensorflow_inter_op_parallelism``
  size TensorFlow's thread pools: the server process has exactly as many more
  threads as the two pools grew (every other thread count is pinned).
- An ``xla`` model (``jit_compile=True``) served with
  ``--xla_cpu_compilation_enabled=true`` is compiled by XLA: TensorFlow logs
  "Compiled cluster using XLA!" during its warmup.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.models import cached_export
from tests.support.servers import EmbeddedServer

pytestmark = pytest.mark.slow

# gRPC and REST pools pinned, so only TensorFlow's pools differ between the two servers.
_PINNED = ["--grpc_max_threads=2", "--rest_api_num_threads=2"]


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_intra_and_inter_op_flags_size_tensorflows_thread_pools(model_repo, tmp_path):
    counts = {}
    for intra, inter in ((1, 1), (7, 5)):
        flags = [*_PINNED, f"--tensorflow_intra_op_parallelism={intra}", f"--tensorflow_inter_op_parallelism={inter}"]
        with EmbeddedServer.for_models({"digits": model_repo / "digits"}, workdir=tmp_path / f"{intra}-{inter}",
                                       extra_flags=flags) as server:
            counts[intra, inter] = _threads(server.pid)
            log = Path(server.log_path).read_text()
        assert f"intra_op_parallelism_threads={intra}, inter_op_parallelism_threads={inter}" in log
    # TensorFlow's intra-op pool grew by 6 threads and its inter-op pool by 4
    assert counts[7, 5] - counts[1, 1] == (7 - 1) + (5 - 1), counts


def test_an_xla_variant_is_compiled_by_xla_with_the_flag(tmp_path):
    repo = cached_export(("digits",), "xla")
    server = EmbeddedServer.for_models({"digits_xla": repo / "digits_xla"}, workdir=tmp_path,
                                       extra_flags=["--xla_cpu_compilation_enabled=true"])
    server.env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # TensorFlow's INFO line that XLA compiled a cluster
    with server:
        pass
    assert "Compiled cluster using XLA!" in Path(server.log_path).read_text()
