"""Steady load: ``-u`` users from the start until ``--run-time``."""
from locust import events

from loadtest.users import GrpcPredictUser, RestPredictUser, prepare_locustfile

prepare_locustfile(events)


class GrpcUser(GrpcPredictUser):
    pass


class RestUser(RestPredictUser):
    pass
