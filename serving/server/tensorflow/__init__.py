"""The TensorFlow part (TF Serving's ``servables/tensorflow/``): servable, loader, warmup, inference."""
__all__: list[str] = []
