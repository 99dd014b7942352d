"""Version rollouts through TF Serving's own config: publish, canary, promote, roll back.

The state of a rollout is the ``ModelServerConfig`` it pushes with
``ModelService.HandleReloadConfigRequest`` (and writes back to the config
file the server polls): each model's ``specific`` version list and its
``stable``/``canary`` labels. A label only ever moves to a version that is
already AVAILABLE, as TF Serving requires, so a move is planned as steps:
load the new version beside the old, move the labels, unload what no label
names. Works against TF Serving and the embedded server alike, through the
SDK's ``GrpcClient``. On Kubernetes, ``serving.rollout.kubernetes`` moves a
canary Deployment's share of traffic instead (route weight patches).
"""
from serving.rollout.plan import (
    RolloutError,
    Step,
    canary_labels,
    plan_label_move,
    promote_labels,
    rollback_labels,
    served_versions,
)
from serving.rollout.runner import Rollout, connect

__all__ = [
    "RolloutError",
    "Step",
    "plan_label_move",
    "canary_labels",
    "promote_labels",
    "rollback_labels",
    "served_versions",
    "connect",
    "Rollout",
]
