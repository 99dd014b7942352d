"""``python -m serving.server`` — see ``serving.server.main``."""
import logging
import os
import sys

from serving.server.main import main

if __name__ == "__main__":
    code = main()
    # Everything is stopped and drained by now; skip the seconds TensorFlow's and gRPC's
    # interpreter teardown takes, so a stopped container exits within its grace period.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
