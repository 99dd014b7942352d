"""Pushing planned configs to a server and waiting for versions to become AVAILABLE."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from serving import status
from serving.config.models import write_model_server_config
from serving.rollout.plan import RolloutError, Step

__all__ = ["ModelServiceClient", "Rollout"]

AVAILABLE = "AVAILABLE"


class ModelServiceClient:
    """TF Serving's ``ModelService`` over gRPC; a context manager.

    Speaks TF Serving's wire format through the project's TensorFlow-free
    schema (``serving.wire``, same field numbers and method paths as
    ``tensorflow.serving``), so the CLI starts in a fraction of a second
    instead of importing TensorFlow with ``tensorflow-serving-api``'s stubs.
    Failures raise ``serving.status`` exceptions with the server's code and message.
    """

    def __init__(self, target: str, *, timeout: float = 300.0) -> None:
        import grpc

        from serving.wire import GET_MODEL_STATUS, RELOAD_CONFIG, apis

        self.target = target
        self.timeout = timeout
        self._channel = grpc.insecure_channel(target)
        self._reload = self._channel.unary_unary(RELOAD_CONFIG,
                                                 request_serializer=apis.ReloadConfigRequest.SerializeToString,
                                                 response_deserializer=apis.ReloadConfigResponse.FromString)
        self._status = self._channel.unary_unary(GET_MODEL_STATUS,
                                                 request_serializer=apis.GetModelStatusRequest.SerializeToString,
                                                 response_deserializer=apis.GetModelStatusResponse.FromString)

    def reload_config(self, config) -> None:
        """Replace the server's whole model config (models left out are unloaded).

        ``config`` is a ``tensorflow.serving.ModelServerConfig``; it travels as its wire bytes.
        """
        from serving.wire import apis

        request = apis.ReloadConfigRequest()
        request.config.ParseFromString(config.SerializeToString())
        response = self._call(self._reload, request)
        if response.status.error_code:
            raise status.error_for(response.status.error_code, response.status.error_message)

    def version_states(self, name: str) -> dict[int, tuple[str, str]]:
        """``{version: (state name, error message)}`` for every version of ``name``."""
        from serving.wire import apis

        request = apis.GetModelStatusRequest()
        request.model_spec.name = name
        response = self._call(self._status, request, timeout=10.0)
        states = apis.ModelVersionStatus.State
        return {s.version: (states.Name(s.state), s.status.error_message)
                for s in response.model_version_status}

    def _call(self, method: Callable, request, timeout: Optional[float] = None):
        import grpc

        try:
            return method(request, timeout=timeout or self.timeout)
        except grpc.RpcError as exc:
            code = status.from_grpc_status(exc.code())
            raise status.error_for(code, exc.details() or "") from exc

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ModelServiceClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Rollout:
    """Applies planned steps: push, wait until AVAILABLE, write the config back.

    ``config_file`` (optional) is rewritten after every accepted step, so a
    server polling that file (``--model_config_file_poll_wait_seconds``) reads
    the state the rollout pushed instead of reverting it.
    """

    def __init__(self, client: ModelServiceClient, *, config_file: Optional[Path] = None,
                 wait_timeout: float = 600.0, poll_interval: float = 0.25,
                 log: Callable[[str], None] = print) -> None:
        self.client = client
        self.config_file = Path(config_file) if config_file else None
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self.log = log

    def apply(self, name: str, steps: Sequence[Step]) -> None:
        """Run ``steps`` for model ``name`` in order; RolloutError on the first failure."""
        if not steps:
            self.log(f"{name}: nothing to do")
        for step in steps:
            self.log(f"{name}: {step.description}")
            try:
                self.client.reload_config(step.config)
            except status.ServingError as exc:
                raise RolloutError(f"the server rejected '{step.description}': {exc}") from exc
            if self.config_file is not None:
                write_model_server_config(step.config, self.config_file)
            self.wait_available(name, step.wait_for)

    def wait_available(self, name: str, versions: Sequence[int]) -> None:
        """Block until every version in ``versions`` is AVAILABLE; RolloutError if one fails."""
        deadline = time.monotonic() + self.wait_timeout
        while True:
            try:
                states = self.client.version_states(name)
            except status.NotFound:
                states = {}
            pending = [v for v in versions if states.get(v, ("", ""))[0] != AVAILABLE]
            if not pending:
                return
            for version in pending:
                state, error = states.get(version, ("", ""))
                if state == "END" and error:
                    raise RolloutError(f"{name} version {version} failed to load: {error}")
            if time.monotonic() > deadline:
                raise RolloutError(f"{name} versions {pending} not AVAILABLE after "
                                   f"{self.wait_timeout:.0f} s (states: {states})")
            time.sleep(self.poll_interval)
