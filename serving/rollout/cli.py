"""``python -m serving.rollout``: publish a version, canary it, promote or roll back.

Every command that moves labels reads the current state from the models
config the server runs, checks that every base path and version it names is
on disk (TF Serving would wait for a missing one, and hold every later reload),
then, holding the config's lock (``serving.config.served_config.change_served_config``),
writes each planned step to the file (if it is still what was read) and
pushes it with ``HandleReloadConfigRequest``, waiting for the versions to be
AVAILABLE (``GetModelStatus``). A step that fails puts the model's entry back
as it was; the other models are never touched. A move whose model's entry
another command changed since it was read is refused with exit code 4.
``rollback`` marks the canary's version rolled back in the model's directory
(``serving.config.rollbacks``): no config writer serves it as stable again
unless asked for by number.

The config and the server default to what the running stack serves
(``serving.config.served_config``: the file and gRPC target ``make up`` recorded in
``<work dir>/stack.json``, compose or embedded); without a state file, the
compose file ``serving/models.config`` on ``127.0.0.1:8500``. ``publish``
writes into the stack's model repository by default.

``k8s canary`` / ``k8s rollback`` move a Kubernetes canary's traffic instead
(``serving.rollout.kubernetes``): they print, or apply with ``kubectl``
(``--apply``), the canary overlay's route weights at each step.

Flags use the project's CLI vocabulary: ``--grpc HOST:PORT`` for the server,
``--model-repo DIR`` for the model repository, ``--version N`` and ``--label
NAME``. Default paths are anchored on the checkout, not the current directory.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from exporter.capture_source import CaptureSourceError, add_window_arguments, window_from_args
from serving import status
from serving.addresses import grpc_address, rest_address
from serving.checkout import REPO_ROOT
from serving.client import Connection, GrpcClient, RestClient, add_connection_arguments, connection_from_args
from serving.config.config_lock import LockTimeout, StaleConfig
from serving.config.reload import ReloadError, version_states
from serving.config.rollbacks import ROLLED_BACK_FILE, record_rollback, reinstate
from serving.config.served_config import (
    DEFAULT_WORK_DIR,
    STATE_FILE,
    ServedConfig,
    change_served_config,
    read_state,
    served_config,
    stack_model_repo,
)
from serving.rollout import analyze, auto, kubernetes, shadow, traffic, verdict
from serving.rollout.plan import (
    RolloutError,
    canary_labels,
    find_model,
    plan_label_move,
    promote_labels,
    rollback_labels,
    served_versions,
)
from serving.rollout.publish import export_version, publish_saved_model
from serving.stack.endpoint import stack_endpoint

if TYPE_CHECKING:  # tensorflow_serving's protos load only when a config is read
    from tensorflow_serving.config.model_server_config_pb2 import ModelConfig, ModelServerConfig

__all__ = ["main", "build_parser", "EXIT_STALE"]

# The gateway credential the canary analysis uses by default (its own, high, rate limit; make certs issues it).
ANALYSIS_ROLE = "loadtest"

# The exit code of a label move refused because another command changed this model's entry since it was read
# (or held the config's lock past --timeout): nothing was sent; read the config again and rerun.
EXIT_STALE = 4


def _publish(args: argparse.Namespace) -> int:
    model_repo = args.model_repo or stack_model_repo(args.work_dir)
    if args.from_dir:
        path = publish_saved_model(args.from_dir, model_repo, args.model, args.version)
    else:
        path = export_version(args.model_name or args.model, model_repo,
                              variant=args.variant, version=args.version)
    print(f"published {path} (not served yet: `python -m serving.rollout canary "
          f"--model {args.model} --version {path.name}`)")
    return 0


def _labels_for(args: argparse.Namespace, config: ModelServerConfig) -> dict[str, int]:
    if args.command == "canary":
        return canary_labels(config, args.model, args.version)
    if args.command == "promote":
        return promote_labels(config, args.model)
    if args.command == "rollback":
        return rollback_labels(config, args.model)
    return {**find_model(config, args.model).version_labels, args.label: args.version}


def _served(args: argparse.Namespace) -> ServedConfig:
    """The config and the server pushes go to; the label moves' and ``status``'s connection arguments, when
    given, replace the stack's CA and admin key (``analyze``/``auto`` give theirs to the analysis only)."""
    served = served_config(args.config_file, grpc=args.grpc, model_repo=getattr(args, "model_repo", None),
                           work_dir=args.work_dir)
    connection: Optional[Connection] = getattr(args, "connection", None)
    if args.command not in ("analyze", "auto") and connection is not None and connection.given:
        served = dataclasses.replace(served, connection=connection)
    return served


def _check_versions_exist(served: ServedConfig, config: ModelServerConfig, model: str,
                          labels: dict[str, int]) -> None:
    entry = find_model(config, model)
    base = served.host_path(entry.base_path)
    found = served.versions_on_disk(entry)
    if not found:
        _check_paths(served, [config])  # the model's directory is not there at all: say why
    missing = sorted(set(labels.values()) - set(found))
    if missing:
        raise RolloutError(f"{model}: version(s) {missing} not found in {base} (has {found}); publish first")


def _check_paths(served: ServedConfig, configs: Sequence[ModelServerConfig]) -> None:
    """Refuse, before anything is sent, a config whose base paths or versions are not on disk."""
    problems = list(dict.fromkeys(p for config in configs for p in served.problems(config)))
    if problems:
        hint = (" (the embedded server reads host paths: a compose config with /models/... paths "
                "does not fit it; leave --config-file out to use the stack's config)"
                if not served.mounts and any("/models/" in p for p in problems) else "")
        raise RolloutError(f"nothing was sent to {served.grpc}: {served.path} names what this host does not "
                           f"have: {'; '.join(problems)}{hint}")


def _routes(args: argparse.Namespace) -> traffic.TrafficRoutes:
    """The gateway (or Kubernetes routes) ``--gateway`` names; ``auto``: compose's when make up started
    a compose stack, else none."""
    kind = args.gateway
    state = read_state(Path(args.work_dir) / STATE_FILE) if kind in ("auto", "compose") else None
    if kind == "auto":
        kind = "compose" if state is not None and state.backend.startswith("compose") else "none"
    objects = _k8s_objects(args) if kind == "k8s" else ()
    # The compose project make up started (its name is in stack.json), else compose's default for the checkout.
    project = state.compose_project if state is not None and state.compose_project else None
    return traffic.routes_for(kind, nginx_conf=args.nginx_conf, nginx=args.nginx, k8s_objects=objects,
                              compose_project=project, **(_k8s_backends(args) if kind == "k8s" else {}))


def _move(args: argparse.Namespace) -> int:
    served = _served(args)
    snapshot = served.snapshot()
    config = served.parse(snapshot)

    def plan(config: ModelServerConfig) -> list:
        labels = _labels_for(args, config)
        _check_versions_exist(served, config, args.model, labels)
        steps = plan_label_move(config, args.model, labels)
        _check_paths(served, [config, *(step.config for step in steps)])
        return steps

    labels, steps = _labels_for(args, config), plan(config)
    routes = _routes(args) if args.command in ("canary", "promote", "rollback") else None
    if args.command == "canary" and args.shadow and not isinstance(routes, (traffic.HostNginx, traffic.ComposeGateway)):
        raise RolloutError(f"--shadow needs the gateway's mirror (the compose stack's, or --gateway nginx); "
                           f"{routes.describe() if routes else 'no gateway'} has none: nothing was changed")
    weight, shadow = getattr(args, "weight", 0.0), getattr(args, "shadow", None) or 0.0
    if args.dry_run:
        for step in steps:
            print(f"would {step.description}")
        if routes is not None and not isinstance(routes, traffic.NoGateway):
            print(f"would route {weight:g}% of unlabeled traffic to canary"
                  + (f" and mirror {shadow:g}% of it to canary" if shadow else "") + f" ({routes.describe()})"
                  if args.command == "canary" else f"would remove the canary routes ({routes.describe()})")
        return 0
    # The routes as read: every route write below is a compare-and-swap on them (another operator's change in
    # between refuses this command's, exit 4), each under the routes' lock (serving.rollout.traffic).
    route_state = routes.state(args.model) if routes is not None else None
    entry = find_model(config, args.model)
    if args.command == "rollback":
        _record_rollback(args, served, entry)
    if routes is not None and args.command in ("canary", "rollback"):
        # Unlabeled requests onto `stable` before a new version is loaded (TF Serving would give them the
        # latest), and off the canary before its version goes.
        route_state = routes.set_weight(args.model, 0, expected=route_state)
    # Another command's change since the read is kept when it left this model's entry as it was (the plan
    # is made again on the new file); a change of this model's entry refuses the move (StaleConfig).
    change_served_config(served, args.model, plan, snapshot=snapshot, replan=_same_entry(args.model),
                         write_file=not args.no_write_back, timeout=args.timeout,
                         who=f"serving.rollout {args.command} {args.model}")
    if args.command == "promote" or (args.command == "set-label" and args.label == "stable"):
        _reinstate(served, entry, labels["stable"])
    if routes is not None:
        if args.command == "canary":
            routes.set_weight(args.model, weight, shadow=shadow, expected=route_state)
        else:
            # one version serves every label again: no route needed (a shadow ends here too)
            routes.clear(args.model, expected=route_state)
    print(f"{args.model}: labels {dict(sorted(labels.items()))}"
          + (f", {weight:g}% of unlabeled traffic on canary" + (f", {shadow:g}% mirrored to canary (shadow)"
             if shadow else "") + f" ({routes.describe()})" if args.command == "canary" and routes is not None else ""))
    return 0


def _same_entry(model: str) -> Callable[[ModelServerConfig, ModelServerConfig], bool]:
    def same(old: ModelServerConfig, new: ModelServerConfig) -> bool:
        try:
            return find_model(old, model) == find_model(new, model)
        except RolloutError:
            return False
    return same


def _record_rollback(args: argparse.Namespace, served: ServedConfig, entry: ModelConfig) -> None:
    """Mark the canary's version rolled back in the model's directory, before the labels move back."""
    canary, stable = entry.version_labels.get("canary"), entry.version_labels.get("stable")
    if canary is None or canary == stable:
        return
    model_dir = served.host_path(entry.base_path)
    try:
        record_rollback(model_dir, canary, by=getattr(args, "moved_by", f"serving.rollout {args.command}"))
    except OSError as exc:
        print(f"warning: {args.model} version {canary} is rolled back but could not be marked in {model_dir} "
              f"({exc}): a later config add or make up could serve it as stable again", file=sys.stderr)
        return
    print(f"{args.model}: version {canary} marked rolled back ({model_dir / ROLLED_BACK_FILE}); no config "
          "writer serves it as stable again unless asked for by number")


def _reinstate(served: ServedConfig, entry: ModelConfig, version: int) -> None:
    model_dir = served.host_path(entry.base_path)
    try:
        if reinstate(model_dir, version):
            print(f"{entry.name}: version {version} had been rolled back; now stable as asked, its mark in "
                  f"{model_dir / ROLLED_BACK_FILE} is cleared")
    except OSError as exc:
        print(f"warning: {entry.name} version {version}'s rollback mark could not be cleared ({exc})",
              file=sys.stderr)


def _status(args: argparse.Namespace) -> int:
    served = _served(args)
    entry = find_model(served.load(), args.model)
    print(f"{args.model}: config serves {served_versions(entry)}, labels {dict(sorted(entry.version_labels.items()))}")
    with served.connect() as client:
        for version, state in sorted(version_states(client, args.model).items()):
            error = state.error_message
            print(f"  version {version}: {state.state}{' ' + error if error else ''}")
    return 0


def _client(args: argparse.Namespace, served: ServedConfig, grpc: Optional[str],
            rest: Optional[str]) -> Union[GrpcClient, RestClient]:
    """An analysis side's client: the address given (else the stack's server) with the connection arguments
    given, else, at the stack's own address, the stack's CA and its ``loadtest`` key (else ``client``)."""
    connection: Connection = args.connection
    stack = stack_endpoint(role=ANALYSIS_ROLE, work_dir=args.work_dir)
    if not (grpc or rest):
        if stack is None or stack.grpc != served.grpc:
            if not connection.given:
                return served.connect()  # a server no stack records: as the pushes reach it
            grpc = served.grpc
        else:
            grpc = stack.grpc
    at_stack = stack is not None and ((grpc and grpc == stack.grpc) or
                                      (rest and rest.rstrip("/") == stack.rest.rstrip("/")))
    if stack is not None and at_stack and not connection.given:
        connection = stack.connection
    kwargs = connection.client_kwargs()
    if rest:
        return RestClient(rest, timeout=args.request_timeout, **kwargs)
    assert grpc   # given, or the server's when neither address was
    return GrpcClient(grpc, timeout=args.request_timeout, **kwargs)


def _analysis(args: argparse.Namespace, served: ServedConfig) -> Callable[[Optional[dict]], analyze.Report]:
    """One analysis run per call (the SDK's clients stay open for the command's life)."""
    entry = find_model(served.load(), args.model)
    if "stable" not in entry.version_labels:
        raise RolloutError(f"{args.model} has no `stable` label: nothing to compare the canary with")
    model_dir, stable = served.host_path(entry.base_path), entry.version_labels["stable"]
    version_dir = model_dir / str(stable)
    manifest = analyze.stable_manifest(version_dir)
    live = getattr(args, "live", None)
    batches = ([] if live else
               analyze.load_inputs(args.inputs, version_dir, batch_size=args.batch_size, signature=args.signature,
                                   window=window_from_args(args), model=args.model))
    separate = args.canary_grpc or args.canary_rest
    stable, canary, described = analyze.compared_versions(args.model, entry.version_labels, separate)
    context = analyze.output_context(manifest, args.signature, version_dir,
                                     None if canary is None else model_dir / str(canary))
    # Live: each side by its version number, so the analysis' own calls, if captured, name a version and are
    # never compared again (serving.rollout.live); offline: by label.
    sides = _sides(args, served, dict(entry.version_labels) if live else None)
    thresholds = analyze.Thresholds(args.min_agreement, args.atol, args.rtol, args.max_p50_ratio,
                                    args.max_p99_ratio, args.max_error_rate, args.min_requests, args.mode,
                                    args.max_row_diff, args.max_shift, dict(args.output_kind or ()))

    pacing = analyze.Pacing(max_rate=args.max_rate, retry_budget=args.retry_budget)

    def run(gateway_errors: Optional[dict]) -> analyze.Report:
        if live:
            replayed = shadow.live_replay(args, sides)
        else:
            replayed = analyze.replay(sides, batches, rounds=args.rounds, pacing=pacing)
        return analyze.analyze(args.model, replayed, thresholds, top1=args.top1_output,
                               gateway_errors=gateway_errors, context=context, sides=described)
    return run


def _sides(args: argparse.Namespace, served: ServedConfig,
           versions: Optional[dict[str, int]] = None) -> list[analyze.Side]:
    """``stable`` and ``canary`` as the analysis calls them: by label (by the labels' ``versions`` if given), or
    the canary on a server of its own, unlabeled."""
    stable_client = _client(args, served, args.grpc, args.rest)
    separate = args.canary_grpc or args.canary_rest
    canary_client = _client(args, served, args.canary_grpc, args.canary_rest) if separate else stable_client

    def where(label: str) -> dict:
        if separate and label == "canary":
            return {}
        return {"version": versions[label]} if versions else {"label": label}

    return [analyze.Side("stable", lambda b: stable_client.predict(args.model, b, signature=args.signature,
                                                                   **where("stable"))),
            analyze.Side("canary", lambda b: canary_client.predict(args.model, b, signature=args.signature,
                                                                   **where("canary")))]


def _analyze(args: argparse.Namespace) -> int:
    report = _analysis(args, _served(args))(None)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    if args.report:  # the JSON beside the table, from the same run
        args.report.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return analyze.EXIT_CODES[report.verdict]


def _auto(args: argparse.Namespace) -> int:
    served = _served(args)
    routes = _routes(args)
    if args.shadow_phase and not isinstance(routes, (traffic.HostNginx, traffic.ComposeGateway)):
        raise RolloutError(f"--shadow-phase needs the gateway's mirror (the compose stack's, or --gateway nginx); "
                           f"{routes.describe()} has none: nothing was changed")
    steps = kubernetes.parse_steps(args.steps)
    if isinstance(routes, traffic.NoGateway) and any(steps):
        print(f"{args.model}: no gateway splits traffic on this stack: weight steps {args.steps} skipped; the "
              "analysis before traffic decides (--gateway nginx|compose|k8s moves weights)")
        steps = ()

    def move(command: str) -> Callable[[], None]:
        def run() -> None:
            # auto's connection arguments are the analysis'; its moves push with the stack's admin key
            _move(argparse.Namespace(**{**vars(args), "command": command, "weight": 0.0, "shadow": None,
                                        "dry_run": False,
                                        "moved_by": "serving.rollout auto", "connection": None}))
        return run

    access_log: Optional[auto.AccessLog] = None
    if args.access_log:
        access_log = auto.FileAccessLog(args.access_log)
    elif isinstance(routes, traffic.ComposeGateway):
        access_log = auto.ComposeAccessLog(routes)
    runner: list = []

    def analyze_once(gateway_errors):
        if not runner:  # after the canary is loaded: it reads the stable label
            runner.append(_analysis(argparse.Namespace(**{**vars(args), "live": None}), served))
        return runner[0](gateway_errors)

    def shadow_phase() -> analyze.Report:  # the live analysis, for the phase's duration
        return _analysis(argparse.Namespace(**{**vars(args), "duration": args.shadow_phase}), served)(None)

    report = args.report or Path(args.work_dir) / f"rollout-{args.model}-{args.version}.json"
    code, _ = auto.run_auto(args.model, args.version, steps, canary=move("canary"), promote=move("promote"),
                            rollback=move("rollback"), routes=routes, analyze_once=analyze_once,
                            access_log=access_log, wait_s=args.interval, report_path=report,
                            shadow_phase=shadow_phase if args.shadow_phase else None, shadow_percent=args.shadow)
    return code


def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("where the sides are (default: the stack's server, labels stable and canary)")
    where.add_argument("--rest", metavar="URL", default=None, type=rest_address,
                       help="analyze over REST at URL (e.g. the gateway)")
    where.add_argument("--canary-grpc", metavar="HOST:PORT", default=None, type=grpc_address,
                       help="the canary on a server of its own (Kubernetes: the canary Service), unlabeled")
    where.add_argument("--canary-rest", metavar="URL", default=None, type=rest_address, help="the same over REST")
    where.add_argument("--request-timeout", type=float, default=30.0, help="seconds per call (default 30)")
    pace = p.add_argument_group("pacing through a gateway (its limiter's refusals are resent, never counted as "
                                "errors)")
    pace.add_argument("--max-rate", type=float, default=None, metavar="CALLS_PER_S",
                      help="at most this many calls a second (default: as fast as answers come, slowing down at "
                           "each refusal of the gateway's limiter)")
    pace.add_argument("--retry-budget", type=int, default=analyze.Pacing().retry_budget, metavar="N",
                      help="refusals of the gateway's limiter resent in one analysis, both sides together; past it "
                           f"the verdict is INCONCLUSIVE (default {analyze.Pacing().retry_budget})")
    what = p.add_argument_group("what is replayed")
    what.add_argument("--inputs", default="manifest",
                      help="manifest (the stable version's golden rows, default), warmup (its warmup records), a "
                           "request capture (a capture file or directory, with --since/--until: each captured "
                           "request replayed as it was sent), or a file: .npz, a REST body .json")
    add_window_arguments(what, "--inputs")
    what.add_argument("--signature", default="serving_default", help="signature to call (default serving_default)")
    what.add_argument("--batch-size", type=int, default=1,
                      help="rows per request (default 1: a latency per row, and enough calls to compare)")
    what.add_argument("--rounds", type=int, default=5,
                      help="rounds of every batch to each side (default 5: latency is judged on the median round)")
    what.add_argument("--top1-output", default=None,
                      help="an output judged by top-1 agreement (same as --output NAME=top1)")
    what.add_argument("--output", dest="output_kind", action="append", type=_output_kind, metavar="NAME=KIND",
                      help="judge output NAME as KIND: top1, distribution, elementwise, equal or ignore (default: "
                           "detected from the manifest and the answers; repeat for several)")
    what.add_argument("--mode", choices=verdict.MODES, default=verdict.Rules.mode,
                      help="retrain: top-1 agreement for class outputs, distributions for scores; elementwise: "
                           "--atol/--rtol on every value (variants of the same weights); default auto: elementwise "
                           "when both versions hold the same weights, else retrain")
    limits = p.add_argument_group("thresholds (docs/rollout.md explains the defaults)")
    defaults = analyze.Thresholds()
    limits.add_argument("--min-agreement", type=float, default=defaults.min_agreement,
                        help="top-1 agreement a faithful retrain keeps at least; FAIL when more rows changed class "
                             f"than such a version shows 99 times in 100 (default {defaults.min_agreement})")
    limits.add_argument("--max-row-diff", type=float, default=defaults.max_row_diff,
                        help="scores: 90th percentile of |canary - stable| per row, in standard deviations of "
                             f"stable's values (default {defaults.max_row_diff})")
    limits.add_argument("--max-shift", type=float, default=defaults.max_shift,
                        help=f"scores: mean difference in standard deviations (default {defaults.max_shift})")
    limits.add_argument("--atol", type=float, default=None,
                        help="elementwise: absolute tolerance (default: the manifest's, else 1e-5)")
    limits.add_argument("--rtol", type=float, default=None,
                        help="elementwise: relative tolerance (default: the manifest's, else 1e-4)")
    limits.add_argument("--max-p50-ratio", type=float, default=defaults.max_p50_ratio,
                        help=f"canary/stable p50 latency (default {defaults.max_p50_ratio})")
    limits.add_argument("--max-p99-ratio", type=float, default=defaults.max_p99_ratio,
                        help=f"canary/stable p99 latency (default {defaults.max_p99_ratio})")
    limits.add_argument("--max-error-rate", type=float, default=defaults.max_error_rate,
                        help=f"canary's error rate above stable's (default {defaults.max_error_rate})")
    limits.add_argument("--min-requests", type=int, default=defaults.min_requests,
                        help=f"answers per side below which the verdict is INCONCLUSIVE (default {defaults.min_requests})")


_OVERLAYS = {"gateway": REPO_ROOT / "deploy" / "k8s" / "overlays" / "canary",
             "istio": REPO_ROOT / "deploy" / "k8s" / "overlays" / "canary-istio"}


def _k8s_objects(args: argparse.Namespace) -> list[dict]:
    if args.manifest:
        return kubernetes.load_objects(args.manifest.read_text())
    return kubernetes.render_overlay(args.overlay or _OVERLAYS[args.mesh], args.kubectl)


def _k8s_backends(args: argparse.Namespace) -> dict:
    return {"mesh": args.mesh, "stable": args.stable_backend, "canary": args.canary_backend,
            "namespace": args.namespace, "kubectl": args.kubectl, "apply": args.apply}


def _kubernetes(args: argparse.Namespace) -> int:
    objects = _k8s_objects(args)
    weights = kubernetes.parse_steps(args.steps) if args.k8s_command == "canary" else (0,)
    steps = [kubernetes.weight_patches(objects, weight, mesh=args.mesh, stable=args.stable_backend,
                                       canary=args.canary_backend, namespace=args.namespace) for weight in weights]
    if args.apply:
        kubernetes.apply_patches(steps, kubectl=args.kubectl, interval_s=getattr(args, "interval", 0.0))
        print(f"canary at {weights[-1]}%, stable at {100 - weights[-1]}%")
        return 0
    for step in steps:
        print(f"# canary {step[0].canary_percent}%, stable {100 - step[0].canary_percent}%")
        for patch in step:
            print(patch.command(args.kubectl))
    return 0


def _add_kubernetes(sub: argparse._SubParsersAction) -> None:
    k8s = sub.add_parser("k8s", help="Kubernetes canary: step the route weights, or roll back")
    k8s_sub = k8s.add_subparsers(dest="k8s_command", required=True)
    canary = k8s_sub.add_parser("canary", help="canary weights in steps (default 0 -> 10 -> 50 -> 100)")
    rollback = k8s_sub.add_parser("rollback", help="all traffic back to stable (stable 100, canary 0)")
    canary.add_argument("--steps", default=",".join(map(str, kubernetes.DEFAULT_STEPS)),
                        help="canary percentages in order (default 0,10,50,100; one value for one step)")
    canary.add_argument("--interval", type=float, default=0.0,
                        help="with --apply: seconds to wait between steps (default 0: watch, then run the next "
                             "step yourself with --steps N)")
    for p in (canary, rollback):
        add_k8s_options(p)


def add_k8s_options(p: argparse.ArgumentParser) -> None:
    """Where the Kubernetes canary's routes are: the overlay, its backends, kubectl."""
    p.add_argument("--mesh", choices=sorted(kubernetes.MESHES), default="gateway",
                   help="gateway: Gateway API HTTPRoute/GRPCRoute (overlays/canary); istio: VirtualService "
                        "(overlays/canary-istio)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--overlay", type=Path, default=None,
                        help="kustomize overlay to render with kubectl (default <checkout>/deploy/k8s/overlays/"
                             "canary, or canary-istio for --mesh istio)")
    source.add_argument("--manifest", type=Path, default=None, help="the rendered overlay as a YAML file")
    p.add_argument("--stable-backend", default=kubernetes.DEFAULT_STABLE,
                   help=f"stable Service name (default {kubernetes.DEFAULT_STABLE})")
    p.add_argument("--canary-backend", default=kubernetes.DEFAULT_CANARY,
                   help=f"canary Service name (default {kubernetes.DEFAULT_CANARY})")
    p.add_argument("--namespace", default=None,
                   help="namespace of routes that name none (default: the overlay's Deployments')")
    p.add_argument("--kubectl", default="kubectl", help="kubectl program (default kubectl on PATH)")
    p.add_argument("--apply", action="store_true", help="run kubectl patch instead of printing the commands")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m serving.rollout", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    publish = sub.add_parser("publish", help="put a new version into the model repository")
    publish.add_argument("--from", dest="from_dir", type=Path, help="a SavedModel directory to copy")
    publish.add_argument("--model-name", help="zoo model to export (default: --model) when --from is absent")
    publish.add_argument("--variant", default="fp32", help="exporter variant when exporting (default: fp32)")
    moves = {
        "canary": "load VERSION beside stable and point `canary` at it",
        "promote": "point `stable` at the canary's version and unload the old one",
        "rollback": "point `canary` back at stable and unload the canary's version",
        "set-label": "point LABEL at VERSION (loading it first)",
    }
    movers = [sub.add_parser(name, help=text) for name, text in moves.items()]
    stat = sub.add_parser("status", help="the config's versions and labels, and the server's states")
    for p in [publish, *movers, stat]:
        p.add_argument("--model", default=None, help="published model name, e.g. digits")
    for p in [*movers, stat]:
        p.add_argument("--grpc", metavar="HOST:PORT", default=None, type=grpc_address,
                       help="the server's gRPC address (default: the stack's, from make up's stack.json; "
                            "else 127.0.0.1:8500)")
        p.add_argument("--config-file", type=Path, default=None,
                       help="models config the server runs (default: the one the stack serves; without "
                            "make up's stack.json, <checkout>/serving/models.config)")
        add_connection_arguments(p)  # default: the stack's CA and admin key (make certs)
    for p in [publish, *movers, stat]:
        p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                       help=f"make up's work directory, whose stack.json says what the stack serves, "
                            f"where (default: {DEFAULT_WORK_DIR})")
    for p in [publish, *movers]:
        p.add_argument("--model-repo", type=Path, metavar="DIR", default=None,
                       help="host model repository (default: the stack's, else <checkout>/models); for a "
                            "compose config, the host directory of /models")
    for p in movers:
        p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a version to load")
        p.add_argument("--no-write-back", action="store_true", help="do not rewrite --config-file")
        p.add_argument("--dry-run", action="store_true", help="print the steps only")
    publish.add_argument("--version", type=int, metavar="N", help="version number (default: next free)")
    for name in ("canary", "set-label"):
        movers[list(moves).index(name)].add_argument("--version", type=int, metavar="N", default=None)
    movers[list(moves).index("set-label")].add_argument("--label", metavar="NAME", required=True)
    canary = movers[list(moves).index("canary")]
    canary.add_argument("--weight", type=_percent, default=0.0,
                        help="percent of unlabeled REST traffic the gateway sends to `canary` (default 0: "
                             "clients opt in with --label canary; the rest stays on stable)")
    canary.add_argument("--shadow", type=_percent, nargs="?", const=100.0, default=None, metavar="PERCENT",
                        help="shadow canary (with --weight 0): the gateway also sends a copy of PERCENT (default "
                             "100) of the model's unlabeled REST predict/classify/regress calls to `canary` and "
                             "discards its answers; clients get stable's. promote, rollback or another canary "
                             "command ends it")
    for p in movers[:3]:
        add_gateway_options(p)
    for p in [publish, *movers, stat]:
        p.add_argument("model_arg", nargs="?", metavar="MODEL", help="the model (same as --model)")
    for p in movers[:1]:
        p.add_argument("version_arg", nargs="?", type=int, metavar="VERSION", help="the version (same as --version)")
    analysis = sub.add_parser("analyze", help="replay inputs to stable and canary; PASS (0), FAIL (1), "
                                              "INCONCLUSIVE (2)")
    progressive = sub.add_parser("auto", help="canary, analyze, step the weight, analyze again; promote or roll back")
    for p in (analysis, progressive):
        p.add_argument("model_arg", nargs="?", metavar="MODEL", help="the model (same as --model)")
        p.add_argument("--model", default=None, help="published model name")
        p.add_argument("--grpc", metavar="HOST:PORT", default=None, type=grpc_address,
                       help="the server's gRPC address (default: the stack's)")
        p.add_argument("--config-file", type=Path, default=None, help="models config the server runs (default: "
                                                                       "the stack's)")
        p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="make up's work directory")
        p.add_argument("--model-repo", type=Path, metavar="DIR", default=None, help="host model repository")
        _add_analysis_options(p)
        # The analysis' clients only (pushes use the stack's admin key); default at the stack's address: its CA
        # and the loadtest key, else client.
        add_connection_arguments(p)
    shadow.add_live_options(analysis)
    analysis.add_argument("--json", action="store_true", help="print the report as JSON")
    analysis.add_argument("--report", type=Path, default=None, help="also write the report as JSON to FILE")
    progressive.add_argument("version_arg", nargs="?", type=int, metavar="VERSION", help="the version (same as --version)")
    progressive.add_argument("--version", type=int, metavar="N", default=None)
    progressive.add_argument("--steps", default="10,50,100", help="canary weights in order (default 10,50,100)")
    progressive.add_argument("--interval", type=float, default=60.0,
                             help="seconds of traffic at each weight before it is judged (default 60)")
    progressive.add_argument("--access-log", type=Path, default=None,
                             help="the gateway's JSON access log file (compose: read with docker logs)")
    progressive.add_argument("--report", type=Path, default=None,
                             help="JSON report (default <work dir>/rollout-MODEL-VERSION.json)")
    progressive.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for a version to load")
    progressive.add_argument("--no-write-back", action="store_true", help="do not rewrite --config-file")
    add_gateway_options(progressive)
    shadow.add_shadow_phase_options(progressive)
    _add_kubernetes(sub)
    return parser


def _output_kind(text: str) -> tuple[str, str]:
    name, _, kind = text.rpartition("=")
    if not name or kind not in verdict.KINDS:
        raise argparse.ArgumentTypeError(f"--output takes NAME=KIND with KIND one of {', '.join(verdict.KINDS)}, "
                                         f"got {text!r}")
    return name, kind


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a weight is a percentage in [0, 100], got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"a weight is a percentage in [0, 100], got {text!r}")
    return value


def add_gateway_options(p: argparse.ArgumentParser) -> None:
    """``--gateway`` and what each kind needs (the Kubernetes options of ``k8s canary``)."""
    p.add_argument("--gateway", choices=("auto", "compose", "nginx", "k8s", "none"), default="auto",
                   help="what splits unlabeled traffic: compose (the stack's gateway container), nginx (an "
                        "nginx on this host: --nginx-conf), k8s (the canary overlay's route weights), none; "
                        "default auto: compose when make up started a compose stack, else none")
    p.add_argument("--nginx-conf", type=Path, default=None,
                   help="with --gateway nginx: the gateway's rendered nginx.conf (its canary.d/ goes beside it)")
    p.add_argument("--nginx", default="nginx", help="with --gateway nginx: the nginx binary (default nginx)")
    add_k8s_options(p)


def _positionals(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``canary MODEL VERSION`` as well as ``--model``/``--version``; each said once."""
    for flag, positional in (("model", "model_arg"), ("version", "version_arg")):
        given = getattr(args, positional, None)
        if given is None:
            continue
        if getattr(args, flag, None) not in (None, given):
            parser.error(f"--{flag} and the {positional[:-4].upper()} argument disagree")
        setattr(args, flag, given)
    if hasattr(args, "model_arg") and not args.model:
        parser.error("the model is required (MODEL or --model)")
    if getattr(args, "command", None) in ("canary", "set-label", "auto") and getattr(args, "version", None) is None:
        parser.error("the version is required (VERSION or --version N)")
    if getattr(args, "command", None) in ("analyze", "auto"):
        shadow.check_live_args(args, parser.error)
    if args.command == "canary" and args.shadow and args.weight:
        parser.error("--shadow mirrors stable's traffic to the canary: it takes --weight 0 (the default)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _positionals(args, parser)
    if hasattr(args, "root_certificates"):
        try:
            args.connection = connection_from_args(args)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        if args.command == "publish":
            return _publish(args)
        if args.command == "status":
            return _status(args)
        if args.command == "k8s":
            return _kubernetes(args)
        if args.command == "analyze":
            return _analyze(args)
        if args.command == "auto":
            return _auto(args)
        return _move(args)
    except analyze.SameVersion as exc:
        print(f"analyze refused: {exc}", file=sys.stderr)
        return 2
    except CaptureSourceError as exc:   # inputs that cannot be replayed: a usage error
        print(f"rollout refused: {exc}", file=sys.stderr)
        return 2
    except (StaleConfig, LockTimeout) as exc:
        print(f"rollout refused: {exc}", file=sys.stderr)
        return 3 if args.command in ("analyze", "auto") else EXIT_STALE
    except (ReloadError, status.ServingError, FileNotFoundError, FileExistsError) as exc:
        print(f"rollout failed: {exc}", file=sys.stderr)
        return 3 if args.command in ("analyze", "auto") else 1
