"""The compose stack's engine side: ``docker`` (the one Docker probe, TF Serving's image name from the
compose files, and the one way to run TF Serving in a container)."""
__all__: list[str] = []
