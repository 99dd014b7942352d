"""The security suite's attacks, each a case that ``tests/security`` asserts on and that prints a table when
run as a module: ``attacks`` (the gRPC cases, the napping model's server), ``grpc_table``, ``grpc_stall``,
``rest_attacks``, ``memory_attacks``, ``misc_attacks`` and ``models`` (the napping model's requests)."""
__all__: list[str] = []
