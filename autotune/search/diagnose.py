"""When no plan fits: say what binds and the smallest changes that would fit.

Users of today's planners complain that "no configuration found" tells them
nothing.  Here every change is tried for real with the cost model: more GPUs,
ZeRO-3, optimizer offload, full recomputation, micro-batch 1, a shorter
sequence; the answer lists the ones that produce a fitting plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..inputs.hardware import Cluster
from ..training.problem import DEFAULT_MEMORY_HEADROOM, TrainingProblem
from ..training.space import (FW_DUALPIPE, FW_FP4, FW_MOE_SP, FW_OFFLOAD, FW_ZERO, MTP_STAGE, REASONS, SP_SEQUENCE, enumerate_valid,
                              rules_every_plan_breaks)

SAMPLE_LIMIT = 400_000  # plans evaluated per alternative, at most


@dataclass(frozen=True)
class Diagnosis:
    binding: str  # one sentence: what stops every plan
    fixes: list[str]  # changes that would produce a fitting plan, cheapest first


def _best_fit(problem: TrainingProblem) -> tuple[int, float, float]:
    """(valid plans, lowest memory GiB/GPU, best tokens/s/GPU among fitting plans or 0)."""
    enumeration = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                                  problem.framework)
    plans = enumeration.plans
    if len(plans) == 0:
        return 0, float("inf"), 0.0
    if len(plans) > SAMPLE_LIMIT:
        plans = plans.take(np.random.default_rng(0).choice(len(plans), SAMPLE_LIMIT, replace=False))
    est = problem.evaluate(plans)
    best = float(np.max(np.where(problem.fits(est), est.tokens_per_s_per_gpu, 0.0)))
    return len(enumeration.plans), float(np.min(est.memory_gib_per_gpu)), best


def _with_choices(problem: TrainingProblem, **choices) -> TrainingProblem:
    return dataclasses.replace(problem, choices={**problem.choices, **choices})


def _with_gpus(problem: TrainingProblem, n_gpus: int) -> TrainingProblem:
    # A partial node (--gpus 2 on 8-GPU nodes) grows into whole nodes of the profile's size.
    cluster = problem.cluster
    gpn = cluster.hardware.gpus_per_node if cluster.n_gpus < cluster.hardware.gpus_per_node else cluster.gpus_per_node
    return problem.with_inputs(cluster=Cluster(cluster.hardware, n_gpus, min(gpn, n_gpus)))


def _remedy(reason: str, problem: TrainingProblem) -> str:
    """What to change when every plan breaks ``reason``."""
    model, cluster, workload = problem.model, problem.cluster, problem.workload
    tp_ok = [t for t in (1, 2, 4, 8, 16) if model.n_heads % t == 0 and model.n_kv_heads % t == 0]
    remedies = {
        REASONS[1]: f"choose tp, pp and cp whose product divides {cluster.n_gpus} GPUs (--fix values or --space axes)",
        REASONS[2]: f"tp must divide the {model.n_heads} heads: use tp in {tp_ok}",
        REASONS[3]: f"tp must divide the {model.n_kv_heads} KV heads: use tp in {tp_ok}",
        REASONS[4]: (f"keep tp <= {cluster.gpus_per_scale_up_domain} GPUs per node (NVLink domain), or set "
                     "rules.tp_within_node: false in --space"),
        REASONS[5]: f"use pp <= {model.n_layers} layers",
        REASONS[6]: "choose pp*vp dividing the layers, or set rules.uneven_pipeline: true in --space",
        REASONS[7]: "vp > 1 needs pp > 1",
        REASONS[8]: "sequence parallelism needs tp > 1",
        REASONS[9]: f"cp must leave 2*cp dividing the sequence ({workload.seq_len})",
        REASONS[SP_SEQUENCE]: (f"with sequence parallelism cp*tp must divide the sequence ({workload.seq_len}, whose "
                               f"largest power-of-two divisor is {workload.seq_len & -workload.seq_len}): use tp*cp up "
                               f"to that, or a --seq-len that 8 divides (e.g. {-(-workload.seq_len // 8) * 8})"),
        REASONS[10]: "ep must divide the expert count",
        REASONS[11]: "etp*ep must divide tp*cp*dp: lower ep or etp (etp=1 lets EP span the TP ranks), or raise the GPU count",
        REASONS[12]: "a dense model needs ep=1",
        REASONS[13]: (f"the global batch ({workload.global_batch}) must divide by dp*micro-batch: use --global-batch "
                      f"as a multiple of the GPU count ({cluster.n_gpus}), or fix a larger tp*pp"),
        REASONS[14]: f"the {cluster.hardware.name} supports {', '.join(p for p in cluster.hardware.peak_tflops if p in ('bf16', 'fp16', 'fp8', 'fp4'))}",
        REASONS[15]: "optimizer offload needs zero >= 1",
        REASONS[16]: "with the rule sp_with_tp, tp > 1 needs sp=true",
        REASONS[FW_FP4]: (f"{problem.framework.label} does not offer fp4 (NVFP4) training: search --precision bf16,fp8, "
                          "or give a framework that offers it (megatron-lm from 2025-10, megatron-bridge from 2026-02)"),
        REASONS[FW_MOE_SP]: (f"{problem.framework.label} trains a mixture of experts with tp > 1 only under sequence "
                             "parallelism: allow sp=true in the --space, or fix tp=1"),
        REASONS[FW_DUALPIPE]: (f"{problem.framework.label} does not offer the DualPipe schedule: drop --fix "
                               "schedule=dualpipe, or give --framework other (a generic framework that offers it)"),
        REASONS[FW_OFFLOAD]: (f"{problem.framework.label} does not offer optimizer CPU offload: drop --fix "
                              "offload=cpu, or give a framework that offers it (deepspeed, megatron-deepspeed, "
                              "megatron-bridge, megatron-lm from 2025-03, nemo from 25.04)"),
        REASONS[FW_ZERO]: (f"{problem.framework.label} offers ZeRO {', '.join(map(str, problem.framework.zero_stages))}"
                           f" ({', '.join(map(str, problem.framework.zero_stages_with_pp)) or 'none'} with pp > 1"
                           f"{'' if problem.framework.zero3_with_ep else '; not 3 with ep > 1'}): fix one of those"),
        REASONS[MTP_STAGE]: (f"choose a pp whose last stage keeps the {model.mtp_layers} MTP module(s): "
                             f"{model.n_layers + model.mtp_layers} blocks minus (pp-1) x ceil(blocks/pp) must be at "
                             f"least {model.mtp_layers}"),
    }
    return remedies.get(reason, "loosen --fix values or the --space axes")


def diagnose(problem: TrainingProblem, rejected: dict[str, int], *, sampler: str = "exact",
             evaluations: int = 0) -> Diagnosis:
    """Why no plan was ranked. ``sampler`` and ``evaluations``: how the search looked (a sampled search that
    missed the fitting plans is told so, not sent to change the model or cluster)."""
    valid, lowest_gib, best = _best_fit(problem)
    capacity = problem.cluster.hardware.memory_gib
    if sampler != "exact" and best > 0:
        binding = (f"the {sampler} sampler tried only {evaluations:,} plan{'s' if evaluations != 1 else ''}, none of "
                   f"which fits; the space holds {valid:,} valid plans, and some fit (best {_rate(best)} tokens/s/GPU)")
        return Diagnosis(binding, [f"more trials (--trials {max(200, 10 * evaluations):,})",
                                   "every plan of the space (--sampler exact)"])
    if valid == 0:
        # counted over the whole space (a sampled search saw a few plans of it), as they are cheap to count here
        counts = dict(enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                                      problem.framework).rejected) or rejected
        # the GPU-count rule last, as top_rejection orders it: any layout space rejects many plans by it, and the
        # rule that binds is another (a micro-batch past the batch, a schedule the framework lacks)
        top = sorted(((n, r) for r, n in counts.items()), key=lambda nr: (nr[1] == REASONS[1], -nr[0]))[:3]
        # a rule that every plan breaks binds, though rules checked before it reject the plans first
        every = [REASONS[c] for c in rules_every_plan_breaks(problem.model, problem.cluster, problem.workload,
                                                              problem.choices, problem.rules, problem.framework)]
        if every:
            others = [r for _, r in top if r not in every]
            binding = (f"every plan of the space breaks {'; '.join(every)}"
                       + (f" (and others: {'; '.join(others)})" if others else ""))
            return Diagnosis(binding, [_remedy(r, problem) for r in every])
        reasons = "; ".join(f"{r} ({n:,} plans)" for n, r in top)
        binding = f"every plan of the space breaks a validity rule: {reasons}"
        return Diagnosis(binding, [_remedy(r, problem) for _, r in top])

    headroom = problem.memory_headroom
    usable = capacity * (1.0 - headroom)
    if lowest_gib <= capacity:  # it would fit but for the share of memory kept free
        binding = (f"memory headroom: the leanest valid plan needs {lowest_gib:.1f} GiB per GPU, within the "
                   f"{problem.cluster.hardware.name}'s {capacity:g} GiB but above the {usable:.1f} GiB that "
                   f"--memory-headroom {headroom:g} leaves")
    else:
        binding = (
            f"memory: the leanest valid plan needs {lowest_gib:.1f} GiB per GPU, "
            f"but the {problem.cluster.hardware.name} has {capacity:g} GiB"
        )
    candidates: list[tuple[str, TrainingProblem]] = []
    if headroom > 0.0:
        lower = DEFAULT_MEMORY_HEADROOM if headroom > DEFAULT_MEMORY_HEADROOM else 0.0
        label = f"{lower:g}, the default" if lower == DEFAULT_MEMORY_HEADROOM else f"{lower:g}"
        candidates.append((f"a smaller --memory-headroom ({label})",
                           dataclasses.replace(problem, memory_headroom=lower)))
    choices = problem.choices
    if 3 not in choices["zero"]:
        candidates.append(("allow ZeRO-3 (--fix zero=3, or add 3 to the space's zero axis)", _with_choices(problem, zero=(3,))))
    if "full" not in choices["recompute"]:
        candidates.append(("full activation recomputation (--fix recompute=full)", _with_choices(problem, recompute=("full",))))
    if 1 not in choices["mbs"]:
        candidates.append(("micro-batch 1 (--fix mbs=1)", _with_choices(problem, mbs=(1,))))
    if "cpu" not in choices["offload"]:
        candidates.append(("optimizer offload to CPU (--fix offload=cpu)", _with_choices(problem, offload=("cpu",))))
    seq = problem.workload.seq_len
    if seq >= 256:
        shorter = problem.with_inputs(workload=dataclasses.replace(problem.workload, seq_len=seq // 2))
        candidates.append((f"a shorter sequence (--seq-len {seq // 2})", shorter))
    fixes = []
    for label, alternative in candidates:
        _, low, best = _best_fit(alternative)
        if best > 0:
            fixes.append(f"{label}: fits, best {_rate(best)} tokens/s/GPU")
    # The fewest GPUs that fit with this space, doubling up to 1024x.
    for doublings in range(1, 11):
        n = problem.cluster.n_gpus * 2**doublings
        _, _, best = _best_fit(_with_gpus(problem, n))
        if best > 0:
            fixes.append(f"more GPUs (--gpus {n}): fits, best {_rate(best)} tokens/s/GPU")
            break
    if not fixes:
        fixes.append("a GPU with more memory (see `autotune hardware list`), or a smaller model")
    return Diagnosis(binding, fixes)


def _rate(tokens_per_s: float) -> str:
    """A throughput for a remedy: whole tokens/s, or two significant digits below 10 (a model of 100,000 layers
    fits on more GPUs at 0.04 tokens/s/GPU, which whole numbers wrote as 'best 0')."""
    return f"{tokens_per_s:,.0f}" if tokens_per_s >= 10 else f"{tokens_per_s:.2g}"


def top_rejection(problem: TrainingProblem, rejected: dict[str, int]) -> str:
    """The rule that rejected most plans and what to change: ``tp*pp*cp does not divide the GPU count`` comes last,
    as any layout space rejects many plans by it (and another GPU count takes other ones)."""
    if not rejected:
        return "the space holds no plan; loosen --fix values or the --space axes"
    reason, _ = min(rejected.items(), key=lambda kv: (kv[0] == REASONS[1], -kv[1]))
    return f"{reason}; {_remedy(reason, problem)}"


def no_valid_plan(problem: TrainingProblem) -> Diagnosis | None:
    """What breaks every plan of a space that holds no valid one (None when it holds some): what a search would say
    after evaluating nothing, said before anything runs (``autotune tune``, whose trials are benchmark runs)."""
    enumeration = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                                  problem.framework)
    if len(enumeration.plans):
        return None
    return diagnose(problem, dict(enumeration.rejected))


__all__ = ["Diagnosis", "diagnose", "no_valid_plan", "top_rejection"]
