"""autotune: parallelism auto-tuner for large-model training and serving."""

__version__ = "0.1.0"
