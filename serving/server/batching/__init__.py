"""Server-side batching (TF Serving's ``batching/``): options, queue, scheduler, adapter."""
__all__: list[str] = []
