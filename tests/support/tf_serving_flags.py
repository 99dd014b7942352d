"""tensorflow_model_server's own flags and defaults, typed out from TF Serving's source (not from serving/server)."""
from __future__ import annotations

import os

__all__ = ["CPUS", "TF_SERVING_2_17_1_FLAGS", "TF_SERVING_HEAD_ONLY_FLAGS"]

CPUS = os.cpu_count() or 1

# tensorflow/serving 2.17.1 model_servers/main.cc flag list, defaults from server.h
# (Server::Options and its constructor) and main.cc's locals. Typed out from the
# source, independently of serving/server/flags.py.
TF_SERVING_2_17_1_FLAGS = {
    "port": 8500,
    "grpc_socket_path": "",
    "rest_api_port": 0,
    "rest_api_num_threads": 4 * CPUS,
    "rest_api_timeout_in_ms": 30000,
    "rest_api_enable_cors_support": False,
    "enable_batching": False,
    "allow_version_labels_for_unavailable_models": False,
    "batching_parameters_file": "",
    "enable_per_model_batching_parameters": False,
    "model_config_file": "",
    "model_config_file_poll_wait_seconds": 0,
    "model_name": "default",
    "model_base_path": "",
    "num_load_threads": 0,
    "num_unload_threads": 0,
    "max_num_load_retries": 5,
    "load_retry_interval_micros": 60_000_000,
    "file_system_poll_wait_seconds": 1,
    "flush_filesystem_caches": True,
    "tensorflow_session_parallelism": 0,
    "tensorflow_session_config_file": "",
    "tensorflow_intra_op_parallelism": 0,
    "tensorflow_inter_op_parallelism": 0,
    "use_alts_credentials": False,
    "ssl_config_file": "",
    "platform_config_file": "",
    "per_process_gpu_memory_fraction": 0.0,
    "saved_model_tags": "serve",
    "grpc_channel_arguments": "",
    "grpc_max_threads": 4 * CPUS,
    "enable_model_warmup": True,
    "num_request_iterations_for_warmup": 0,
    "version": False,
    "monitoring_config_file": "",
    "remove_unused_fields_from_bundle_metagraph": True,
    "prefer_tflite_model": False,
    "num_tflite_pools": CPUS,
    "num_tflite_interpreters_per_pool": 1,
    "enable_signature_method_name_check": False,
    "xla_cpu_compilation_enabled": False,
    "enable_profiler": True,
    "thread_pool_factory_config_file": "",
    "mixed_precision": "",
    "skip_initialize_tpu": False,
    "enable_grpc_healthcheck_service": False,
}
# Added after 2.17 (HEAD main.cc); accepted so newer command lines run too.
TF_SERVING_HEAD_ONLY_FLAGS = {"xla_gpu_compilation_enabled": False,
                              "enable_serialization_as_tensor_content": False}
