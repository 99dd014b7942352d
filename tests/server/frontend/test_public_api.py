"""The front-end modules' public names are pinned (``__all__``), and importing them has no side effects."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from serving.checkout import REPO_ROOT


PUBLIC = {
    "serving.server.frontends.dataplane": {"DEFAULT_SIGNATURE", "SIGNATURE_DEF_METADATA_FIELD", "ModelManager",
                                           "RequestMetrics", "ModelSpec", "Prediction", "InferenceResult",
                                           "InferenceTask", "ClassificationResult", "RegressionResult", "DataPlane",
                                           "RequestCapture"},
    "serving.server.deadline": {"MAX_DEADLINE_SECONDS", "deadline_after", "remaining_seconds", "request_deadline"},
    "serving.server.batching.adapter": {"BatchingRunWrapper", "QueueFactory", "TaskQueue"},
    "serving.server.frontends.grpc": {"GrpcFrontend", "MAX_MESSAGE_LENGTH", "parse_channel_arguments",
                                      "server_credentials", "listen_address"},
    "serving.server.frontends.rest": {"MetricsPage", "RestFrontend", "RestRoute", "parse_route", "DISPATCH_REGEX",
                                      "PREDICTION_API_REGEX", "MODEL_STATUS_API_REGEX"},
    "serving.server.flags": {"ServerFlags", "CommandLine", "FlagError", "parse_flags", "log_no_effect",
                             "validate_flags", "usage", "NO_EFFECT_FLAGS", "DEFAULT_REST_API_MAX_BODY_BYTES",
                             "DEFAULT_REST_API_READ_TIMEOUT_SECONDS", "DEFAULT_REST_API_MAX_CONNECTIONS",
                             "DEFAULT_REST_API_MAX_CONCURRENT_REQUESTS", "DEFAULT_BIND_ADDRESS",
                             "MAX_TENSOR_ELEMENTS_CAP", "DEFAULT_REQUEST_CAPTURE_MAX_BYTES",
                             "DEFAULT_REQUEST_CAPTURE_QUEUE_SIZE", "default_max_tensor_elements", "effective_max_tensor_elements",
                             "effective_grpc_max_concurrent_rpcs", "LOG_FORMATS",
                             "memory_budget_bytes", "effective_memory_budgets", "DEFAULT_GRPC_READ_TIMEOUT_SECONDS",
                             "DEFAULT_GRPC_MAX_CONNECTIONS", "DEFAULT_GRPC_MAX_CONCURRENT_STREAMS",
                             "effective_grpc_max_concurrent_streams", "effective_quarantine_dir",
                             "effective_grpc_max_receive_message_bytes"},
    "serving.server.frontends.grpc_admission": {"MessageFirstExecutor", "FallbackExecutor", "CONCURRENCY_EXCEEDED",
                                                "SHUTTING_DOWN", "read_timeout_details"},
    "serving.server.frontends.grpc_limits": {"GrpcConnectionLimits", "PENDING_CALLS", "MAX_MESSAGE_LENGTH",
                                             "ChannelArgument", "parse_channel_arguments", "server_options"},
    "serving.server.frontends.grpc_handlers": {"PredictionService", "ModelService"},
    "serving.server.frontends.grpc_deserializers": {"TrimmingRegistrar", "TrimmingHandler"},
    "serving.server.frontends.grpc_credentials": {"server_credentials"},
    "serving.server.frontends.grpc_drain": {"DrainingExecutor", "drain", "CATCH_UP_QUIET_SECONDS",
                                            "CATCH_UP_MAX_SECONDS", "REFUSE_MAX_SECONDS"},
    "serving.server.frontends.socket_shutdown": {"shut_sockets"},
    "serving.server.frontends.rest_routes": {"RestRoute", "parse_route", "try_parse_route", "without_body",
                                             "DISPATCH_REGEX", "PREDICTION_API_REGEX", "MODEL_STATUS_API_REGEX",
                                             "ECHOED_CHARS"},
    "serving.server.frontends.rest_handlers": {"RestHandlers", "Handler", "error_json"},
    "serving.server.frontends.rest_connection": {"JsonErrorHandler", "json_error_handlers", "JSON"},
    "serving.server.frontends.rest_drain": {"drain"},
    "serving.server.frontends.grpcio_internals": {
        "PINNED_GRPCIO", "INSTALLED_GRPCIO", "SUPPORTED", "version_mismatch", "missing_names", "is_unary_request_job",
        "receive_message", "start_receive", "abort", "is_active", "client_closed", "Call", "RpcEvent", "RpcState",
        "StatusCode", "UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "UNIMPLEMENTED"},
    "serving.server.open_file_limit": {"raise_open_file_limit", "connection_cap", "PORT_SHARE"},
    "serving.server.frontends.rest_limits": {"RestLimits", "RequestRefused", "ConnectionGuard", "GuardedSite",
                                             "request_body_encoding", "inflate_gzip",
                                             "body_too_large", "MAX_HEADER_BYTES", "BodyBytes", "BodyCharge"},
    "serving.server.server": {"ModelServer", "DEFAULT_PROMETHEUS_PATH", "single_model_config"},
    "serving.server.main": {"main", "version_text", "DRAIN_GRACE_SECONDS"},
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned_and_every_name_exists(module):
    imported = importlib.import_module(module)
    assert set(imported.__all__) == PUBLIC[module]
    for name in imported.__all__:
        assert hasattr(imported, name), name


def test_importing_the_server_loads_no_tensorflow():
    code = ("import sys, serving.server.main, serving.server.server, serving.server.flags; "
            "print('tensorflow' in sys.modules, 'tensorflow_serving.apis.predict_pb2' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False False", result.stderr


def test_grpc_channel_arguments_are_parsed_like_tf_serving():
    from serving.server.frontends.grpc import parse_channel_arguments

    assert parse_channel_arguments("grpc.max_connection_age_ms=2000, grpc.primary_user_agent=tfs") == [
        ("grpc.max_connection_age_ms", 2000), ("grpc.primary_user_agent", "tfs")]
    assert parse_channel_arguments("") == []
