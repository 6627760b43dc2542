"""What every emitter shares: the plan in context, the limits of a framework, launch scripts.

Rendering is pure: an emitter turns an :class:`EmitContext` into a mapping of file
names to file text, and never touches the disk (``autotune/cli/emit.py`` writes).
An emitter declares what it cannot express as :class:`Limit` values, each a
vectorised test over a :class:`~autotune.training.plan.PlanBatch` with a message that
names the plan field and the alternatives; ``can_express`` (one plan) and
``expressible`` (a whole search batch) read the same limits, so they agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...errors import InputError
from ...inputs.hardware import Hardware, load_hardware
from ...inputs.modelspec import ModelSpec
from ...training.plan import Plan, PlanBatch
from . import shell
from .shell import Group, Raw


@dataclass(frozen=True)
class EmitContext:
    """One plan with everything a launch config needs: model, cluster shape, workload, estimate."""

    plan: Plan
    model: ModelSpec
    hardware: str
    gpus_per_node: int
    seq_len: int
    global_batch: int
    estimate: Mapping[str, Any] | None = None
    tokens: float | None = None
    data_path: str | None = None
    tokenizer: str | None = None
    framework: str = "megatron"  # what a Slurm script runs
    moe_capacity_factor: float | None = None  # token dropping with padding (workload); None: dropless
    # The hardware the plan was estimated on; a custom profile (--hardware FILE, or embedded in plans.json) is
    # not in the catalogue by its name, so emitters read this one.  None: the bundled profile ``hardware`` names.
    hardware_profile: Hardware | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise InputError(f"must be >= 1, but got {self.gpus_per_node}", field="gpus_per_node")
        if self.n_gpus > self.gpus_per_node and self.n_gpus % self.gpus_per_node:
            raise InputError(f"{self.n_gpus} GPUs do not fill whole nodes of {self.gpus_per_node}", field="gpus_per_node")
        per_step = self.plan.mbs * self.plan.dp
        if self.global_batch % per_step:
            raise InputError(
                f"global batch {self.global_batch} is not a multiple of micro-batch x DP = "
                f"{self.plan.mbs} x {self.plan.dp}; change --global-batch or the plan's mbs",
                field="global_batch",
            )
        if self.seq_len < 1:
            raise InputError(f"must be >= 1, but got {self.seq_len}", field="seq_len")

    @property
    def hardware_spec(self) -> Hardware:
        return self.hardware_profile if self.hardware_profile is not None else load_hardware(self.hardware)

    @property
    def n_gpus(self) -> int:
        return self.plan.n_gpus

    @property
    def nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)

    @property
    def gpus_on_each_node(self) -> int:
        return min(self.gpus_per_node, self.n_gpus)

    @property
    def accumulation(self) -> int:
        """Micro-batches per DP rank per step (gradient accumulation, or pipeline micro-batches)."""
        return self.global_batch // (self.plan.mbs * self.plan.dp)

    @property
    def train_steps(self) -> int | None:
        if self.tokens is None:
            return None
        per_step = self.seq_len * self.global_batch
        return max(1, -(-int(self.tokens) // per_step))


@dataclass(frozen=True)
class Limit:
    """One thing a framework cannot express.

    ``blocks(plans, model)`` is True for the plans it rules out; ``why(plan, model)``
    says why, naming the plan (or model) field and the alternatives.
    """

    field: str
    blocks: Callable[[PlanBatch, ModelSpec], np.ndarray]
    why: Callable[[Plan, ModelSpec], str]
    model_only: bool = False  # the same answer for every plan of a model


def model_limit(field_name: str, test: Callable[[ModelSpec], bool], why: Callable[[Plan, ModelSpec], str]) -> Limit:
    """A limit that depends on the model alone (the same answer for every plan)."""
    return Limit(field_name, lambda plans, model: np.full(len(plans), bool(test(model))), why, model_only=True)


@dataclass(frozen=True)
class Launch:
    """The command every node runs under torchrun, as data (the shell and Slurm scripts share it).

    ``settings`` are variables a user may override from the environment (name, default,
    comment); ``exports`` are environment variables the framework needs; ``arrays`` are
    named argument lists, each a sequence of groups (a flag with its values);
    ``program`` is what torchrun starts (a script path or ``-m module``).
    """

    program: tuple[shell.Word, ...]
    arrays: tuple[tuple[str, tuple[Group, ...]], ...] = ()
    settings: tuple[tuple[str, shell.Word, str], ...] = ()
    exports: tuple[tuple[str, shell.Word], ...] = ()
    notes: tuple[str, ...] = ()

    def argv(self) -> list[shell.Word]:
        """The program and its arguments as one flat list (what the framework's parser sees)."""
        out = list(self.program)
        for _, groups in self.arrays:
            out += shell.flatten(groups)
        return out


def refuse_token_dropping(context: EmitContext, framework: str, why: str) -> None:
    """Refuse a workload that drops MoE tokens (``moe_capacity_factor``) in a framework that cannot."""
    if context.model.moe and context.moe_capacity_factor is not None:
        raise InputError(f"workload field moe_capacity_factor={context.moe_capacity_factor!r}: {framework} {why}; "
                         "drop --moe-capacity-factor, or emit --format megatron", field="--format")


@dataclass(frozen=True)
class Emitter:
    """A launch-config writer for one framework (or a launcher around one)."""

    name: str
    release: str
    summary: str
    limits: tuple[Limit, ...]
    render_files: Callable[[EmitContext], dict[str, str]]
    launch: Callable[[EmitContext], Launch] | None = None
    # Limits of the workload rather than the plan: (model, sequence length) -> reason or None.
    workload_checks: tuple[Callable[[ModelSpec, int], str | None], ...] = ()

    def can_express(self, plan: Plan, model: ModelSpec, context: EmitContext | None = None) -> list[str]:
        """Why this framework cannot run ``plan`` for ``model`` (empty: it can)."""
        batch = PlanBatch.from_plans([plan])
        reasons = [limit.why(plan, model) for limit in self.limits if bool(limit.blocks(batch, model)[0])]
        if context is not None:
            reasons += [r for r in (check(model, context.seq_len) for check in self.workload_checks) if r]
        return reasons

    def expressible(self, plans: PlanBatch, model: ModelSpec, seq_len: int | None = None) -> np.ndarray:
        """True for each plan of the batch that this framework can express (at ``seq_len``, if given)."""
        ok = np.ones(len(plans), dtype=bool)
        if seq_len is not None and any(check(model, seq_len) for check in self.workload_checks):
            return ~ok
        for limit in self.limits:
            ok &= ~np.asarray(limit.blocks(plans, model), dtype=bool)
        return ok

    def model_reasons(self, model: ModelSpec, seq_len: int | None = None) -> list[str]:
        """Why no plan at all of ``model`` (at ``seq_len``, if given) can be expressed (empty: some can)."""
        probe = Plan(n_gpus=1)
        reasons = [limit.why(probe, model) for limit in self.limits
                   if limit.model_only and bool(limit.blocks(PlanBatch.from_plans([probe]), model)[0])]
        if seq_len is not None:
            reasons += [r for r in (check(model, seq_len) for check in self.workload_checks) if r]
        return reasons

    def render(self, context: EmitContext) -> dict[str, str]:
        """The files of this format, by name; raises :class:`InputError` for a plan it cannot express."""
        reasons = self.can_express(context.plan, context.model, context)
        if reasons:
            raise InputError(refusal(self, reasons), field="--format")
        return self.render_files(context)


def refusal(emitter: Emitter, reasons: Sequence[str]) -> str:
    text = f"{emitter.name} ({emitter.release}) cannot express this plan: " + "; ".join(reasons)
    return text


# --- shared text ------------------------------------------------------------------------

def plan_summary(context: EmitContext) -> list[str]:
    """The comment block every file carries: the plan, the workload and the prediction."""
    plan, model = context.plan, context.model
    lines = [
        f"model: {model.name}; hardware: {context.hardware}; {context.nodes} node(s) x {context.gpus_on_each_node} GPUs "
        f"= {context.n_gpus} GPUs",
        f"plan: {plan.as_string()}",
        f"layout: {plan.layout()} (world size {context.n_gpus} = tp {plan.tp} x pp {plan.pp} x cp {plan.cp} x dp {plan.dp}"
        + (f"; ep {plan.ep} nests inside dp x cp" if plan.ep > 1 and plan.etp == plan.tp else "")
        + (f"; experts: etp {plan.etp} x ep {plan.ep} x expert-dp {plan.expert_dp} over the same ranks (MoE parallel "
           f"folding)" if plan.etp != plan.tp else "") + ")",
        f"batch: global {context.global_batch} sequences of {context.seq_len} tokens = micro-batch {plan.mbs} x "
        f"{context.accumulation} micro-batches x dp {plan.dp}",
    ]
    est = context.estimate
    if est:
        lines.append(
            f"predicted: step {est['step_time_s']:.3f} s, {est['memory_gib_per_gpu']:.1f} GiB per GPU, "
            f"MFU {est['mfu']:.1%}, {est['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU (autotune's analytic cost model)"
        )
    return lines


def header(emitter_release: str, context: EmitContext, extra: Sequence[str] = ()) -> list[str]:
    lines = [f"Written by autotune for {emitter_release}. Edit freely; rerun `autotune emit` to regenerate."]
    lines += plan_summary(context)
    lines += list(extra)
    return lines


HERE_SCRIPT = Raw('"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"')


def offload_threads(context: "EmitContext") -> list[tuple[str, shell.Word]]:
    """``OMP_NUM_THREADS`` for a plan that runs its optimizer on the host: the node's cores shared among its GPU
    ranks.  torchrun and the Slurm script otherwise give each rank one thread, and CPU Adam (DeepSpeed's OpenMP
    kernel, the torch CPU optimizer behind Megatron's offload) would run single-threaded, far below the host
    optimizer rate the estimate takes (the profile's cpu_optimizer_params_per_s)."""
    if context.plan.offload != "cpu":
        return []
    n = context.gpus_on_each_node
    return [("OMP_NUM_THREADS", Raw(f'"$(( $(nproc) > {n} ? $(nproc) / {n} : 1 ))"'))]


def launch_body(launch: Launch) -> list[str]:
    """Settings, exports and argument arrays of a launch, as script lines."""
    lines: list[str] = []
    for name, default, note in launch.settings:
        if note:
            lines += shell.comment_lines([note])
        lines.append(shell.default_assignment(name, default))
    if launch.settings:
        lines.append("")
    for name, value in launch.exports:
        lines.append("export " + shell.assignment(name, value))
    if launch.exports:
        lines.append("")
    for name, groups in launch.arrays:
        lines += shell.array(name, groups)
    if launch.arrays:
        lines.append("")
    return lines


def program_groups(launch: Launch) -> list[Group]:
    """The program and ``"${ARRAY[@]}"`` references, then any extra arguments given to the script."""
    groups: list[Group] = [tuple(launch.program)]
    for name, _ in launch.arrays:
        groups.append((Raw(f'"${{{name}[@]}}"'),))
    groups.append((Raw('"$@"'),))
    return groups


def torchrun_groups(context: EmitContext, rdzv_id: shell.Word) -> list[Group]:
    """torchrun with the c10d rendezvous at ``$MASTER_ADDR:$MASTER_PORT``."""
    return [
        ("torchrun",),
        ("--nnodes", context.nodes),
        ("--nproc-per-node", context.gpus_on_each_node),
        ("--rdzv-backend", "c10d"),
        ("--rdzv-endpoint", Raw('"${MASTER_ADDR}:${MASTER_PORT}"')),
        ("--rdzv-id", rdzv_id),
    ]


def node_script(emitter: Emitter, context: EmitContext, launch: Launch) -> str:
    """A bash script to run on every node (outside Slurm): torchrun with a c10d rendezvous."""
    lines = ["#!/usr/bin/env bash"]
    lines += shell.comment_lines(header(emitter.release, context, launch.notes))
    lines += shell.comment_lines([
        "",
        f"Run this script on each of the {context.nodes} node(s) with the same MASTER_ADDR (the first node) and MASTER_PORT;",
        "extra arguments are passed on to the training program. Under Slurm use `autotune emit --format slurm`.",
    ])
    lines += ["set -euo pipefail", "", shell.assignment("HERE", HERE_SCRIPT)]
    lines += [shell.default_assignment("MASTER_ADDR", "localhost"), shell.default_assignment("MASTER_PORT", 29500)]
    lines += [shell.default_assignment("RDZV_ID", "autotune"), ""]
    lines += launch_body(launch)
    lines += shell.command(torchrun_groups(context, Raw('"$RDZV_ID"')) + program_groups(launch))
    return "\n".join(lines) + "\n"

