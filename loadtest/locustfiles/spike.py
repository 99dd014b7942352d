"""Spike: baseline users, a jump to ``-u`` users from 40 % to 60 % of the run, baseline again."""
from locust import events

from loadtest.shapes import StagesShape, add_shape_arguments, spike_stages
from loadtest.users import GrpcPredictUser, RestPredictUser, prepare_locustfile

prepare_locustfile(events)
events.init_command_line_parser.add_listener(add_shape_arguments)


class GrpcUser(GrpcPredictUser):
    pass


class RestUser(RestPredictUser):
    pass


class SpikeShape(StagesShape):
    def build_stages(self, options):
        peak = int(options.num_users or 16)
        baseline = options.baseline_users or max(1, peak // 4)
        return spike_stages(float(options.run_time or 60), peak, baseline)
