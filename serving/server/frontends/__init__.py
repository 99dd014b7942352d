"""Front-ends (TF Serving's ``model_servers/``): one data plane, thin gRPC and REST front-ends."""
__all__: list[str] = []
