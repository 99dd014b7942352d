"""BatchingOptions: TF's defaults, TF Serving's validation wording, BatchingParameters mapping."""
from __future__ import annotations

import dataclasses
import os

import pytest

from serving.config import load_batching_parameters
from serving.server import batching
from serving.server.batching import adapter, batch, options, queue, scheduler
from serving.server.batching.options import BatchingOptions
from serving.status import InvalidArgument


@pytest.fixture
def batching_parameters(tmp_path):
    """A ``BatchingParameters`` read from a text-proto file, as ``--batching_parameters_file`` is."""
    def load(text: str):
        path = tmp_path / "batching.config"
        path.write_text(text)
        return load_batching_parameters(path)
    return load


def test_public_api_is_pinned():
    assert batching.__all__ == ["BatchFn", "BatchingMetrics", "BatchingOptions", "BatchingRunWrapper", "BatchQueue",
                                "BatchScheduler", "QUEUE_FULL_MESSAGE", "QueueFactory", "TaskFuture", "TaskQueue"]
    assert options.__all__ == ["BatchingOptions"]
    assert batch.__all__ == ["Tensors", "BatchFn", "BatchKey", "BatchingMetrics", "SplitJoin", "Task", "TaskFuture", "Batch",
                             "task_size", "batch_key", "split_task", "merge_inputs", "split_outputs"]
    assert queue.__all__ == ["QUEUE_FULL_MESSAGE", "QueueScheduler", "BatchQueue"]
    assert scheduler.__all__ == ["BatchScheduler"]
    assert adapter.__all__ == ["BatchingRunWrapper", "QueueFactory", "TaskQueue"]
    for module in (batching, options, batch, queue, scheduler, adapter):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_defaults_are_tf_shared_batch_scheduler_defaults():
    options = BatchingOptions()
    assert (options.max_batch_size, options.batch_timeout_micros, options.max_enqueued_batches) == (1000, 0, 10)
    assert options.num_batch_threads == len(os.sched_getaffinity(0))
    assert options.thread_pool_name == "model_server_batch_threads"
    assert options.allowed_batch_sizes == ()
    assert not options.pad_variable_length_inputs and not options.enable_large_batch_splitting
    assert options.execution_batch_size == 1000


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BatchingOptions().max_batch_size = 3


def test_from_proto_maps_every_field(batching_parameters):
    options = BatchingOptions.from_proto(batching_parameters("""
        max_batch_size { value: 64 }
        batch_timeout_micros { value: 2000 }
        max_enqueued_batches { value: 100 }
        num_batch_threads { value: 3 }
        thread_pool_name { value: "pool" }
        allowed_batch_sizes: 16
        allowed_batch_sizes: 32
        allowed_batch_sizes: 64
        pad_variable_length_inputs: true
        enable_large_batch_splitting { value: true }
        max_execution_batch_size { value: 64 }
    """))
    assert options == BatchingOptions(
        max_batch_size=64, batch_timeout_micros=2000, max_enqueued_batches=100, num_batch_threads=3,
        thread_pool_name="pool", allowed_batch_sizes=(16, 32, 64), pad_variable_length_inputs=True,
        enable_large_batch_splitting=True, max_execution_batch_size=64)


def test_from_proto_leaves_unset_fields_at_tf_defaults(batching_parameters):
    options = BatchingOptions.from_proto(batching_parameters("max_batch_size { value: 128 }"))
    assert options == BatchingOptions(max_batch_size=128)


def test_allowed_batch_sizes_must_increase():
    with pytest.raises(InvalidArgument, match="monotonically increasing"):
        BatchingOptions(max_batch_size=8, allowed_batch_sizes=(4, 2, 8))


def test_last_allowed_batch_size_must_match_max_batch_size():
    with pytest.raises(InvalidArgument, match="Last entry in allowed_batch_sizes must match max_batch_size; "
                                              "last entry was 4; expected 8"):
        BatchingOptions(max_batch_size=8, allowed_batch_sizes=(2, 4))


def test_with_splitting_last_allowed_size_must_equal_max_execution_batch_size():
    with pytest.raises(InvalidArgument, match="must be equal to max_execution_batch_size"):
        BatchingOptions(max_batch_size=8, enable_large_batch_splitting=True, max_execution_batch_size=4,
                        allowed_batch_sizes=(2, 8))


@pytest.mark.parametrize("field, value, message", [
    ("num_batch_threads", 0, "num_batch_threads must be positive; was 0"),
    ("max_batch_size", 0, "max_batch_size must be positive; was 0"),
    ("batch_timeout_micros", -1, "batch_timeout_micros must be non-negative; was -1"),
    ("max_enqueued_batches", -1, "max_enqueued_batches must be non-negative; was -1"),
])
def test_out_of_range_values_are_rejected_naming_the_rule(field, value, message):
    with pytest.raises(InvalidArgument, match=message):
        BatchingOptions(**{field: value})


def test_max_execution_batch_size_cannot_exceed_max_batch_size():
    with pytest.raises(InvalidArgument, match="max_execution_batch_size must be between 1 and max_batch_size"):
        BatchingOptions(max_batch_size=8, enable_large_batch_splitting=True, max_execution_batch_size=9)


@pytest.mark.parametrize("name", ["batching.config", "batching.cpu.config"])
def test_the_repositorys_batching_configs_are_valid_options(name):
    from serving.checkout import REPO_ROOT

    options = BatchingOptions.from_proto(load_batching_parameters(REPO_ROOT / "serving" / name))
    assert options.max_batch_size >= 1 and options.pad_variable_length_inputs
