"""The analytic cost model: pure functions of (model, cluster, workload, plans), vectorised over plans."""

from .training import TrainingEstimate, estimate_training

__all__ = ["TrainingEstimate", "estimate_training"]
