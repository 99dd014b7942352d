"""The suite's support package: what tests share that is not a fixture (fixtures stay in conftest.py files).

``models`` (the zoo export cache, the one tiny SavedModel), ``user_model`` / ``user_models`` (a user's models),
``servers`` / ``ports`` (the embedded server and free ports, from the launcher), ``wait`` (polling for what a
system shows), ``lifecycle`` and ``serving`` (manager and server helpers), ``cli`` and ``exporter`` (the CLIs
as subprocesses), ``config``, ``compose``, ``compose_stack``, ``docker_cli``, ``gateway``, ``k8s``,
``prometheus``, ``promql``, ``pki``, ``arrays``, ``tf_serving_flags`` and ``contract``; ``fake_serving`` (the
client suite's fake TF Serving over gRPC and REST), ``load`` (saturation, open loop and drain load on the one
driver), ``processes`` (a logged program: start, wait until ready, stop), ``security`` (the security
suite's attack cases), ``recorded`` (benchmark cells from given figures), ``time_make_up`` (a script
that times ``make up`` from a fresh start and a second one), ``races`` (operator commands raced on a live
server, and its 20-trial script), ``hostile_servers`` (servers that trickle, inflate or malform answers, for
the SDK), ``stub_upstream`` (a stub REST upstream behind the gateway), ``measure_keys`` (key rotation and
guessing through the gateway, measured), ``crashing_model`` (a SavedModel that aborts the process) and
``half_plus_two`` (TF Serving's own test models, rebuilt).
"""
__all__: list[str] = []
