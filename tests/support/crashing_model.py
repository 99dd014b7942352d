"""A SavedModel whose warmup kills the process: its ``serving_default`` calls ``tf.raw_ops.Abort``.

``export_aborting(path)`` writes it (``x`` float32 [-1, 3] -> ``y``, as the tiny model's
signature) with one warmup record, so a server that loads it with warmup aborts
(SIGABRT) while warming it up, the way a crashing custom op or a hostile export would.
"""
from __future__ import annotations

from pathlib import Path

from tests.support.models import write_warmup

__all__ = ["export_aborting"]


def export_aborting(path: Path, warmup: bool = True) -> Path:
    """Write the aborting model into ``path`` (a version directory); return it. Without ``warmup`` it loads
    and aborts at its first request."""
    import tensorflow as tf  # TensorFlow: only when the model is built

    class Aborting(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            with tf.control_dependencies([tf.raw_ops.Abort(error_msg="this version aborts the process")]):
                return {"y": tf.identity(x)}

    module = Aborting()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    if warmup:
        write_warmup(path, records=1)
    return path
