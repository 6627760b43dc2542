"""A training search problem (model, cluster, workload, space) and its objectives."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ..errors import comma_items
from ..inputs.framework import Framework, load_framework
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .estimate import TrainingEstimate, estimate_training
from .plan import PlanBatch
from .space import NOT_EXPRESSIBLE, Rules, Space, axis_choices, rejection_reasons


@dataclass(frozen=True)
class Objective:
    name: str
    direction: str  # "maximize" or "minimize"
    unit: str
    value: Callable[[TrainingEstimate, "TrainingProblem"], np.ndarray]

    @property
    def sign(self) -> float:
        """+1 where larger is better; ranks sort by ``sign * value`` descending."""
        return 1.0 if self.direction == "maximize" else -1.0


def _training_days(est: TrainingEstimate, problem: "TrainingProblem") -> np.ndarray:
    tokens_per_s = est.tokens_per_s_per_gpu * problem.cluster.n_gpus
    return problem.workload.tokens / tokens_per_s / 86400.0


OBJECTIVES: Mapping[str, Objective] = {
    "throughput": Objective("throughput", "maximize", "tokens/s/GPU", lambda est, _: est.tokens_per_s_per_gpu),
    "cost": Objective("cost", "minimize", "USD per million tokens", lambda est, _: est.cost_usd_per_million_tokens),
    "time": Objective("time", "minimize", "days to train --tokens", _training_days),
    "memory": Objective("memory", "minimize", "GiB per GPU", lambda est, _: est.memory_gib_per_gpu),
}


def parse_objectives(text: str, *, tokens: float | None) -> tuple[Objective, ...]:
    names = comma_items(text, what="--objective")
    if not names:
        raise ValueError("--objective needs at least one of: " + ", ".join(OBJECTIVES))
    unknown = [n for n in names if n not in OBJECTIVES]
    if unknown:
        raise ValueError(f"unknown objective(s) {', '.join(unknown)}; choose from {', '.join(OBJECTIVES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"each objective may appear once, but got ({text})")
    if "time" in names and tokens is None:
        raise ValueError("--objective time needs --tokens (the training budget in tokens)")
    return tuple(OBJECTIVES[n] for n in names)


# Ranked plans leave this fraction of HBM free (`search --memory-headroom`): an estimate within the
# last few percent of capacity is within the model's memory error (docs/accuracy.md) of not fitting,
# and the CUDA context of other processes, NCCL's lazily allocated buffers and allocator growth
# live there.
DEFAULT_MEMORY_HEADROOM = 0.03


@dataclass(frozen=True)
class TrainingProblem:
    """Everything a search needs besides the sampler: the three cost-model inputs and the space."""

    model: ModelSpec
    cluster: Cluster
    workload: TrainWorkload
    choices: Mapping[str, tuple]
    rules: Rules
    space: Space
    # Plans a launch-config format can express (``search --emit``); None: every plan.
    express: Callable[[PlanBatch], np.ndarray] | None = None
    # The software the plans run on (default: autotune.inputs.framework.DEFAULT_FRAMEWORK, newest).
    framework: Framework | None = None
    # Ranked plans keep this fraction of HBM free (--memory-headroom): a plan needing more than
    # (1 - memory_headroom) x capacity is counted as out of memory.
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM

    def __post_init__(self) -> None:
        if self.framework is None:
            object.__setattr__(self, "framework", load_framework())
        if not 0.0 <= self.memory_headroom < 1.0:
            raise ValueError(f"0 <= memory_headroom < 1 must hold, but got (memory_headroom={self.memory_headroom})")
        # + 0.0 turns --memory-headroom -0 into 0: it had printed "plans keep -0% of HBM free"
        object.__setattr__(self, "memory_headroom", self.memory_headroom + 0.0)

    @classmethod
    def build(cls, model: ModelSpec, cluster: Cluster, workload: TrainWorkload, space: Space,
              framework: Framework | None = None,
              memory_headroom: float = DEFAULT_MEMORY_HEADROOM) -> "TrainingProblem":
        return cls(model, cluster, workload, axis_choices(space, model, cluster, workload, framework), space.rules, space,
                   framework=framework, memory_headroom=memory_headroom)

    def with_inputs(self, *, cluster: Cluster | None = None, workload: TrainWorkload | None = None) -> "TrainingProblem":
        """The same space on another cluster or workload (choices such as pp depend on them)."""
        rebuilt = TrainingProblem.build(self.model, cluster or self.cluster, workload or self.workload, self.space,
                                        self.framework, self.memory_headroom)
        return dataclasses.replace(rebuilt, express=self.express)

    def reasons(self, plans: PlanBatch) -> np.ndarray:
        reasons = rejection_reasons(self.model, self.cluster, self.workload, plans, self.rules, framework=self.framework)
        if self.express is not None:
            reasons = np.where((reasons == 0) & ~self.express(plans), NOT_EXPRESSIBLE, reasons)
        return reasons

    def evaluate(self, plans: PlanBatch) -> TrainingEstimate:
        return estimate_training(self.model, self.cluster, self.workload, plans, self.framework)

    @property
    def memory_limit_gib(self) -> float:
        """What a plan may use per GPU: the capacity less the headroom kept free."""
        return self.cluster.hardware.memory_gib * (1.0 - self.memory_headroom)

    def fits(self, est: TrainingEstimate) -> np.ndarray:
        """Plans that fit with the headroom kept free."""
        return est.memory_gib_per_gpu <= self.memory_limit_gib
