"""The stack's orchestration: ``make up`` and ``make down`` (``python -m serving.stack``).

``make up`` runs the stack with what this host has, one module per job:

- ``docker``: the one Docker probe (``docker info``), TF Serving's image from
  the compose files, and the one way to run TF Serving in a container (the
  GPU preflight, the contract tests and the load tools use it too);
- ``choice``: which backend (compose GPU, compose CPU, or the embedded server);
- ``compose``: the compose backends (plan, preflight, start, record, stop);
- ``embedded``: the embedded server with the CPU variant's command, and its
  export queue;
- ``prepared_configs``: the config files each backend serves, made at each
  start (the embedded stack's persistent ``models.config``, reconciled with
  the model repository; compose's configs directory);
- ``banner``: the progress lines and the banner (addresses, batching, log,
  how to stop);
- ``down``: ``make down``, from ``stack.json``;
- ``identity``: which process a pid is (pid and start time), and children that die with ``make up``;
- ``work_lock``: one ``make up`` per work directory;
- ``running``: what of a recorded stack runs now (``make up`` refuses on it, ``make down`` acts on it);
- ``scrape``: Prometheus' config for the compose services started (no job for a service not running);
- ``recorded``: ``logs``, ``run`` and ``ps`` with the compose files, project and variables recorded;
- ``cli``: the command line.

Every backend records what it started in ``<work dir>/stack.json``
(``serving.config.served_config``), which ``serving.config add|remove``,
``serving.rollout`` and ``make down`` default to.
"""
__all__: list[str] = []
