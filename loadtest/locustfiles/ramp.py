"""Ramp: equal steps up to ``-u`` users over ``--run-time`` (or explicit ``--stages``)."""
from locust import events

from loadtest.shapes import StagesShape, add_shape_arguments, ramp_stages
from loadtest.users import GrpcPredictUser, RestPredictUser, prepare_locustfile

prepare_locustfile(events)
events.init_command_line_parser.add_listener(add_shape_arguments)


class GrpcUser(GrpcPredictUser):
    pass


class RestUser(RestPredictUser):
    pass


class RampShape(StagesShape):
    def build_stages(self, options):
        return ramp_stages(float(options.run_time or 60), int(options.num_users or 8))
