"""tfs-stack."""
__all__: list[str] = []
