"""``python -m serving.server`` takes tensorflow_model_server's flags: names, defaults, syntax, conflicts."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from serving import status
from serving.checkout import REPO_ROOT
from serving.server import flags as server_flags
from serving.server.flags import (
    DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
    FlagError,
    ServerFlags,
    default_max_tensor_elements,
    effective_grpc_max_concurrent_rpcs,
    effective_grpc_max_concurrent_streams,
    effective_max_tensor_elements,
    parse_flags,
    validate_flags,
)
from tests.support.tf_serving_flags import TF_SERVING_2_17_1_FLAGS, TF_SERVING_HEAD_ONLY_FLAGS

EMBEDDED_ONLY_FLAGS = {"rest_api_max_body_bytes", "rest_api_read_timeout_seconds", "rest_api_max_connections",
                       "rest_api_max_concurrent_requests", "bind_address", "grpc_max_concurrent_rpcs",
                       "max_tensor_elements", "log_format",
                       "max_request_memory_bytes", "max_in_flight_memory_bytes", "rest_api_max_body_bytes_in_flight",
                       "grpc_read_timeout_seconds", "grpc_max_connections", "grpc_max_concurrent_streams",
                       "quarantine_dir", "grpc_max_receive_message_bytes",
                       "request_capture_dir", "request_capture_sample_rate", "request_capture_max_bytes",
                       "request_capture_max_bytes_per_day", "request_capture_exclude_models",
                       "request_capture_queue_size"}


def test_every_tf_serving_flag_exists_with_its_default():
    defaults = ServerFlags()
    for name, default in {**TF_SERVING_2_17_1_FLAGS, **TF_SERVING_HEAD_ONLY_FLAGS}.items():
        assert getattr(defaults, name) == default, name


def test_no_flag_is_invented_beyond_the_documented_embedded_extension():
    ours = {f.name for f in dataclasses.fields(ServerFlags)}
    assert ours - set(TF_SERVING_2_17_1_FLAGS) - set(TF_SERVING_HEAD_ONLY_FLAGS) == EMBEDDED_ONLY_FLAGS
    for name in EMBEDDED_ONLY_FLAGS:
        assert "EMBEDDED-ONLY" in next(f for f in dataclasses.fields(ServerFlags) if f.name == name).metadata["help"]


@pytest.mark.parametrize("argv", [
    ["--port=9000", "--rest_api_port=9001", "--model_name=m"],
    ["--port", "9000", "--rest_api_port", "9001", "--model_name", "m"],
    ["-port=9000", "--rest_api_port", "9001", "-model_name", "m"],
])
def test_equals_and_space_forms_parse_the_same(argv):
    flags = parse_flags(argv).flags
    assert (flags.port, flags.rest_api_port, flags.model_name) == (9000, 9001, "m")


@pytest.mark.parametrize("argv, expected", [
    (["--enable_batching"], True),
    (["--enable_batching=true"], True),
    (["--enable_batching=1"], True),
    (["--enable_batching=false"], False),
    (["--enable_batching=0"], False),
    (["--enable_batching", "false"], False),
    (["--enable_batching", "--port=1"], True),
])
def test_boolean_flag_forms(argv, expected):
    assert parse_flags(argv).flags.enable_batching is expected


def test_bare_boolean_does_not_swallow_a_positional_that_is_not_a_boolean():
    command_line = parse_flags(["--enable_model_warmup", "stray"])
    assert command_line.flags.enable_model_warmup is True
    assert command_line.unknown == ("stray",)


def test_unknown_flags_are_returned_not_fatal_as_in_tf_serving():
    command_line = parse_flags(["--port=1", "--no_such_flag=3", "--model_base_path=/m"])
    assert command_line.unknown == ("--no_such_flag=3",)
    assert command_line.flags.model_base_path == "/m"
    assert command_line.given == {"port", "model_base_path"}


@pytest.mark.parametrize("argv, message", [
    (["--port=abc"], "Couldn't interpret value abc for flag port."),
    (["--enable_batching=maybe"], "Couldn't interpret value maybe for flag enable_batching."),
    (["--per_process_gpu_memory_fraction=lots"], "for flag per_process_gpu_memory_fraction"),
    (["--port"], "Flag --port needs a value."),
])
def test_bad_value_for_a_known_flag_is_an_error_naming_it(argv, message):
    with pytest.raises(FlagError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_flags(argv)


def test_gpu_only_flags_are_accepted_and_reported_as_having_no_effect(caplog):
    command_line = parse_flags(["--model_base_path=/m", "--per_process_gpu_memory_fraction=0.5",
                                "--xla_gpu_compilation_enabled=true", "--enable_batching"])
    assert command_line.flags.per_process_gpu_memory_fraction == 0.5
    with caplog.at_level("WARNING"):
        names = server_flags.log_no_effect(command_line)
    assert names == ["per_process_gpu_memory_fraction", "xla_gpu_compilation_enabled"]
    assert "--per_process_gpu_memory_fraction=0.5 is accepted but has no effect" in caplog.text
    assert "enable_batching" not in caplog.text


@pytest.mark.parametrize("argv, code, message", [
    (["--model_base_path=/m", "--batching_parameters_file=/b.config"], status.Code.INVALID_ARGUMENT,
     "server_options.batching_parameters_file is set without setting server_options.enable_batching to true."),
    (["--port=0", "--model_base_path=/m"], status.Code.INVALID_ARGUMENT,
     "At least one of server_options.grpc_port or server_options.grpc_socket_path must be set."),
    ([], status.Code.INVALID_ARGUMENT,
     "Both server_options.model_base_path and server_options.model_config_file are empty!"),
    (["--model_base_path=/m", "--tensorflow_session_parallelism=1", "--tensorflow_intra_op_parallelism=1",
      "--tensorflow_inter_op_parallelism=1"], status.Code.INVALID_ARGUMENT, "You cannot configure all."),
    (["--model_base_path=/m", "--use_alts_credentials", "--ssl_config_file=/s"], status.Code.INVALID_ARGUMENT,
     "Either use_alts_credentials must be false or ssl_config_file must be empty."),
    (["--model_base_path=/m", "--use_alts_credentials"], status.Code.UNIMPLEMENTED, "no ALTS credentials"),
    (["--model_base_path=/m", "--bind_address=127.0.0.1:8500"], status.Code.INVALID_ARGUMENT,
     "--bind_address must be an IP address or host name"),
    (["--model_base_path=/m", "--rest_api_max_body_bytes=0"], status.Code.INVALID_ARGUMENT,
     "--rest_api_max_body_bytes must be positive."),
    (["--model_base_path=/m", "--rest_api_max_connections=0"], status.Code.INVALID_ARGUMENT,
     "--rest_api_max_connections must be positive."),
    (["--model_base_path=/m", "--rest_api_max_concurrent_requests=-1"], status.Code.INVALID_ARGUMENT,
     "--rest_api_max_concurrent_requests must be positive."),
    (["--model_base_path=/m", "--rest_api_read_timeout_seconds=-1"], status.Code.INVALID_ARGUMENT,
     "--rest_api_read_timeout_seconds must not be negative."),
])
def test_conflicting_flags_fail_as_tf_serving_does(argv, code, message):
    with pytest.raises(status.ServingError) as caught:
        validate_flags(parse_flags(argv).flags)
    assert caught.value.code == code
    assert message in caught.value.details


def test_ssl_config_file_is_accepted_and_documents_that_rest_stays_plain():
    flags = parse_flags(["--model_base_path=/m", "--ssl_config_file=/etc/tls/ssl.config"]).flags
    validate_flags(flags)
    assert flags.ssl_config_file == "/etc/tls/ssl.config"
    assert "ssl_config_file" not in server_flags.NO_EFFECT_FLAGS
    help_text = next(f for f in dataclasses.fields(ServerFlags) if f.name == "ssl_config_file").metadata["help"]
    assert "client_verify" in help_text and "HTTP/REST port has no TLS" in help_text


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "::1", "localhost"])
def test_bind_address_defaults_to_loopback_and_takes_addresses_and_names(address):
    assert ServerFlags().bind_address == "127.0.0.1"
    validate_flags(parse_flags(["--model_base_path=/m", f"--bind_address={address}"]).flags)


@pytest.mark.parametrize("flag", ["--grpc_max_concurrent_rpcs=-1", "--max_tensor_elements=-1",
                                  "--grpc_max_concurrent_streams=-1"])
def test_negative_admission_bounds_are_refused(flag):
    with pytest.raises(status.InvalidArgument, match=flag.split("=")[0]):
        validate_flags(parse_flags(["--model_base_path=/m", flag]).flags)


def test_admission_bounds_default_to_the_thread_pool_and_the_hosts_memory():
    flags = ServerFlags(grpc_max_threads=6)
    assert effective_grpc_max_concurrent_rpcs(flags) == 256                  # the floor: REST's bound
    assert effective_grpc_max_concurrent_rpcs(ServerFlags(grpc_max_threads=100)) == 400
    assert effective_max_tensor_elements(flags) == default_max_tensor_elements() <= 2**28
    assert default_max_tensor_elements(memory_bytes=64 * 1000) == 1000   # one request: 1/8 of memory at 8 B
    assert default_max_tensor_elements(memory_bytes=1 << 40) == 2**28
    given = parse_flags(["--grpc_max_concurrent_rpcs=5", "--max_tensor_elements=100"]).flags
    assert (effective_grpc_max_concurrent_rpcs(given), effective_max_tensor_elements(given)) == (5, 100)


def test_streams_per_connection_default_to_twice_the_admission_bound():
    # Above the bound: one channel past it is refused by admission at once, never by HTTP/2's limit.
    assert effective_grpc_max_concurrent_streams(ServerFlags()) == 2 * effective_grpc_max_concurrent_rpcs(
        ServerFlags()) == DEFAULT_GRPC_MAX_CONCURRENT_STREAMS
    assert effective_grpc_max_concurrent_streams(ServerFlags(grpc_max_concurrent_rpcs=32)) == 64
    assert effective_grpc_max_concurrent_streams(ServerFlags(grpc_max_concurrent_streams=7)) == 7


def test_batching_parameters_file_with_enable_batching_is_valid():
    flags = parse_flags(["--model_base_path=/m", "--enable_batching", "--batching_parameters_file=/b.config"]).flags
    assert flags.enable_batching and flags.batching_parameters_file == "/b.config"
    assert validate_flags(flags) is None  # raises InvalidArgument where TF Serving refuses (without --enable_batching)


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "serving.server", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_version_prints_model_server_and_tensorflow_versions_and_exits_0():
    result = _run_module("--version")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("TensorFlow ModelServer: 2.17.1")
    assert lines[1] == "TensorFlow Library: 2.17.1"


def test_batching_file_without_enable_batching_fails_to_start_with_exit_255():
    result = _run_module("--model_base_path=/nonexistent", "--batching_parameters_file=/b.config")
    assert result.returncode == 255
    assert ("Failed to start server. Error: INVALID_ARGUMENT: server_options.batching_parameters_file "
            "is set without setting server_options.enable_batching to true.") in result.stderr


def test_bad_flag_value_prints_usage_and_exits_255():
    result = _run_module("--port=eighty")
    assert result.returncode == 255
    assert "Couldn't interpret value eighty for flag port." in result.stderr
    assert "--rest_api_timeout_in_ms=30000" in result.stdout


def test_help_prints_every_flag_with_its_default():
    result = _run_module("--help")
    assert result.returncode == 0
    for name in TF_SERVING_2_17_1_FLAGS:
        assert f"--{name}=" in result.stdout, name


@pytest.mark.parametrize("compose_file", ["docker-compose.yml", "docker-compose.cpu.yml"])
def test_the_compose_files_tf_serving_command_line_parses_without_unknown_flags(compose_file):
    import re

    import yaml

    path = REPO_ROOT / compose_file
    class ComposeLoader(yaml.SafeLoader):
        """Compose's merge tags (!override, !reset) keep their node's plain value."""

    def plain(loader, _suffix, node):
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node)
        return loader.construct_scalar(node)

    ComposeLoader.add_multi_constructor("!", plain)
    services = yaml.load(path.read_text(), Loader=ComposeLoader)["services"]
    command = next(s["command"] for s in services.values()
                   if isinstance(s.get("command"), list) and any(str(a).startswith("--port=") for a in s["command"]))
    # ${VAR:-default} as compose expands it with the variable unset.
    argv = [re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(arg)) for arg in command]
    command_line = parse_flags(argv)
    assert command_line.unknown == ()
    validate_flags(command_line.flags)
    # The GPU stack batches; on CPU, make up serves without batching (measured slower there).
    assert command_line.flags.enable_batching == (compose_file == "docker-compose.yml")
    assert command_line.flags.allow_version_labels_for_unavailable_models
