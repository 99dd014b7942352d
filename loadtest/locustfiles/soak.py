"""Bounded soak: steady load paced at ``--user-rps`` per user, for at most ``--max-soak`` seconds."""
import sys

from locust import constant_throughput, events

from loadtest.users import GrpcPredictUser, RestPredictUser, prepare_locustfile

prepare_locustfile(events)


@events.init_command_line_parser.add_listener
def _soak_arguments(parser):
    parser.add_argument("--user-rps", type=float, default=5.0, env_var="LOCUST_USER_RPS",
                        help="requests per second per user (0 = closed loop)")
    parser.add_argument("--max-soak", type=float, default=4 * 3600, env_var="LOCUST_MAX_SOAK",
                        help="refuse --run-time above this many seconds")


@events.init.add_listener
def _bounded(environment, **_):
    options = environment.parsed_options
    if options is not None and not (options.run_time and options.run_time <= options.max_soak):
        print(f"soak needs --run-time of at most {options.max_soak:.0f}s (got {options.run_time})", file=sys.stderr)
        sys.exit(2)


def _paced(user):
    rps = user.environment.parsed_options.user_rps
    return constant_throughput(rps)(user) if rps > 0 else 0.0


class GrpcUser(GrpcPredictUser):
    wait_time = _paced


class RestUser(RestPredictUser):
    wait_time = _paced
