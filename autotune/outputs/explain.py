"""Explain one plan: where its step time and memory go, what binds it, and what each one-step change would do.

Pure functions over the cost model.  The sensitivity table changes one axis by one
step (tp, pp and cp doubled or halved with dp absorbing the change, ep doubled or halved on a
mixture of experts with expert dp absorbing it, micro-batch doubled or halved, the next
recompute level, ZeRO stage +-1, another precision) and
estimates each neighbour; a neighbour a validity rule forbids carries the rule.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..inputs.framework import Framework, load_framework
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from ..training.estimate import estimate_training
from ..training.plan import PRECISION, RECOMPUTE, Plan, PlanBatch
from ..training.problem import DEFAULT_MEMORY_HEADROOM
from ..training.space import REASONS, Rules, rejection_reasons
from .tables import largest_parts

SENSITIVITY_AXES = ("tp", "pp", "cp", "ep", "mbs", "recompute", "zero", "precision")
# A plan whose free memory is under this share of the GPU's is memory-bound.
TIGHT_MEMORY = 0.05


@dataclass(frozen=True)
class Neighbour:
    axis: str
    change: str  # e.g. "tp 2 -> 4 (dp 8 -> 4)"
    plan: dict[str, Any] | None
    step_time_s: float | None
    step_time_change: float | None  # fraction, negative = faster
    memory_gib: float | None
    memory_change_gib: float | None
    fits: bool
    reason: str  # why the neighbour is impossible ("" when it is valid)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Explanation:
    plan: Plan
    estimate: dict[str, Any]
    capacity_gib: float
    binding_kind: str  # memory | rule | none | optimum
    binding: str  # one sentence
    sensitivity: list[Neighbour]
    memory_limit_gib: float | None = None  # what a plan may use: the capacity less the search's headroom

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.as_dict(), "estimate": self.estimate, "binding": {"kind": self.binding_kind,
                "text": self.binding}, "sensitivity": [n.to_json() for n in self.sensitivity],
                "memory_limit_gib": self.memory_limit_gib}


def _expert_fit(plan: Plan, fields: dict[str, Any], stage_ranks: int) -> str:
    """Keep a tp or pp step of a MoE plan a plan the rules allow: the expert groups (etp * ep ranks) must tile a
    pipeline stage's ranks.  The etp that followed tp goes back to the plan's own where that tiles (TP2 with ETP1, as
    MoE recipes fold it), and ep halves with the stage's ranks where neither does.  Changes ``fields``; the label's
    suffix says what else moved."""
    etp = fields.get("etp", plan.etp)
    if stage_ranks % (etp * plan.ep) and etp != plan.etp and stage_ranks % (plan.etp * plan.ep) == 0:
        fields["etp"] = etp = plan.etp
    ep = plan.ep
    while ep > 1 and stage_ranks % (etp * ep):
        ep //= 2
    said = ""
    if fields.get("etp", plan.etp) != plan.etp:
        said += f", etp {plan.etp} -> {fields['etp']}"
    if ep != plan.ep:
        fields["ep"] = ep
        said += f", ep {plan.ep} -> {ep}"
    return said


def _moves(plan: Plan, model: ModelSpec | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(axis, label, changed fields) for every one-step change of the sensitivity axes; ep steps only on a mixture of
    experts (``model``), where a dense model has no experts to spread."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    n = plan.n_gpus
    for axis in ("tp", "pp"):
        old = getattr(plan, axis)
        for new in (old * 2, old // 2):
            if new < 1 or new == old:
                continue
            fields: dict[str, Any] = {axis: new}
            if axis == "tp":
                fields["sp"] = new > 1 and (plan.sp or plan.tp == 1)
                if plan.etp == plan.tp:
                    # etp left at its default (= tp) follows tp, as a plan string without etp
                    # would; keeping the old width made every dense tp step "etp differs from tp".
                    fields["etp"] = new
            if axis == "pp" and new == 1:
                fields["vp"] = 1
            mp = (new if axis == "tp" else plan.tp) * (new if axis == "pp" else plan.pp) * plan.cp
            dp = f"dp {plan.dp} -> {n // mp}" if n % mp == 0 else "dp not whole"
            if plan.ep > 1 and n % mp == 0:
                dp += _expert_fit(plan, fields, stage_ranks=(new if axis == "tp" else plan.tp) * plan.cp * (n // mp))
            out.append((axis, f"{axis} {old} -> {new} ({dp})", fields))
    # Context parallelism: the sequence split over twice or half the ranks, dp absorbing the change.  A stage's ranks
    # (tp*cp*dp) stay as they are, so the expert groups still tile them.
    for new in (plan.cp * 2, plan.cp // 2):
        if new < 1 or new == plan.cp:
            continue
        mp = plan.tp * plan.pp * new
        dp = f"dp {plan.dp} -> {n // mp}" if n % mp == 0 else "dp not whole"
        out.append(("cp", f"cp {plan.cp} -> {new} ({dp})", {"cp": new}))
    # Expert parallelism: the experts spread over twice or half the ranks; the expert data parallelism absorbs it (the
    # attention layout, and so dp, stays).
    if model is not None and model.moe is not None:
        stage_ranks = n // plan.pp
        for new in (plan.ep * 2, plan.ep // 2):
            if new < 1 or new == plan.ep:
                continue
            width = plan.etp * new
            edp = (f"expert dp {plan.expert_dp} -> {stage_ranks // width}" if stage_ranks % width == 0
                   else "expert dp not whole")
            out.append(("ep", f"ep {plan.ep} -> {new} ({edp})", {"ep": new}))
    for new in (plan.mbs * 2, plan.mbs // 2):
        if new >= 1 and new != plan.mbs:
            out.append(("mbs", f"micro-batch {plan.mbs} -> {new}", {"mbs": new}))
    level = RECOMPUTE.index(plan.recompute)
    for new_level in (level - 1, level + 1):
        if 0 <= new_level < len(RECOMPUTE):
            out.append(("recompute", f"recompute {plan.recompute} -> {RECOMPUTE[new_level]}",
                        {"recompute": RECOMPUTE[new_level]}))
    for new in (plan.zero - 1, plan.zero + 1):
        if 0 <= new <= 3:
            out.append(("zero", f"ZeRO {plan.zero} -> {new}", {"zero": new}))
    others = [p for p in PRECISION if p != plan.precision and (p != "fp16" or plan.precision == "fp16")]
    for new in others:
        out.append(("precision", f"precision {plan.precision} -> {new}", {"precision": new}))
    return out


def explain(model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plan: Plan,
            rules: Rules | None = None, framework: Framework | None = None,
            memory_headroom: float = DEFAULT_MEMORY_HEADROOM) -> Explanation:
    """Breakdowns, the binding constraint and the one-step sensitivity of ``plan`` run by ``framework``
    (rules: the default space's; framework: the default framework).  A plan fits as the search ranks it:
    within the GPU's memory less ``memory_headroom`` of it (the search's --memory-headroom)."""
    rules = rules or Rules()
    fw = framework if framework is not None else load_framework()
    hw = cluster.hardware
    limit_gib = hw.memory_gib * (1.0 - memory_headroom)
    base_batch = PlanBatch.from_plans([plan])
    base = estimate_training(model, cluster, workload, base_batch, fw).row(0)
    base["fits"] = base["memory_gib_per_gpu"] <= limit_gib
    base_reason = int(rejection_reasons(model, cluster, workload, base_batch, rules, framework=fw)[0])

    candidates: list[tuple[str, str, Plan | None, str]] = []
    for axis, label, fields in _moves(plan, model):
        try:
            changed = dataclasses.replace(plan, **fields)
        except ValueError as exc:
            candidates.append((axis, label, None, str(exc).split(", but got")[0]))
            continue
        candidates.append((axis, label, changed, ""))
    valid_plans = [c[2] for c in candidates if c[2] is not None]
    rows: list[Neighbour] = []
    if valid_plans:
        batch = PlanBatch.from_plans(valid_plans)
        reasons = rejection_reasons(model, cluster, workload, batch, rules, framework=fw)
        est = estimate_training(model, cluster, workload, batch, fw)
    index = 0
    for axis, label, changed, why in candidates:
        if changed is None:
            rows.append(Neighbour(axis, label, None, None, None, None, None, False, why))
            continue
        i = index
        index += 1
        reason = REASONS[int(reasons[i])] if int(reasons[i]) else ""
        step = float(est.step_time_s[i])
        mem = float(est.memory_gib_per_gpu[i])
        rows.append(Neighbour(axis, label, changed.as_dict(), step, step / base["step_time_s"] - 1.0, mem,
                              mem - base["memory_gib_per_gpu"], mem <= limit_gib and not reason, reason))
    kind, text = _binding(base, hw.memory_gib, rows, REASONS[base_reason] if base_reason else "", memory_headroom)
    return Explanation(plan, base, hw.memory_gib, kind, text, rows, limit_gib)


def _binding(base: dict[str, Any], capacity: float, rows: list[Neighbour], base_reason: str,
             memory_headroom: float = 0.0) -> tuple[str, str]:
    mem = base["memory_gib_per_gpu"]
    limit = capacity * (1.0 - memory_headroom)
    if base_reason:
        return "rule", f"this plan breaks a validity rule: {base_reason}"
    if not base["fits"]:
        fixes = [r.change for r in rows if r.fits]
        if mem <= capacity:  # within the GPU, beyond what the headroom leaves
            text = (f"memory: this plan needs {mem:.1f} GiB per GPU, over the {limit:.1f} of {capacity:g} GiB its "
                    f"search let plans use (it kept {memory_headroom:.0%} free)")
        else:
            text = f"memory: this plan needs {mem:.1f} GiB per GPU but the GPU has {capacity:g} GiB"
        return "memory", text + (f"; changes that fit: {', '.join(fixes)}" if fixes else "")
    faster = sorted((r for r in rows if r.step_time_change is not None and r.step_time_change < -1e-9),
                    key=lambda r: r.step_time_change)
    free = capacity - mem
    headroom = f"{free:.1f} GiB of {capacity:g} free"
    if not faster:
        return "optimum", (f"no one-step change is faster; the step is {largest_parts(base)} ({headroom})")
    best = faster[0]
    gain = f"{-best.step_time_change:.1%} faster"
    if best.fits:
        return "none", f"nothing binds: {best.change} is {gain} and fits ({best.memory_gib:.1f} GiB)"
    # the fastest change that is possible, where the fastest of all is not: what the user can do now
    runner_up = next((r for r in faster if r.fits), None)
    also = (f"; {runner_up.change} is {-runner_up.step_time_change:.1%} faster and fits "
            f"({runner_up.memory_gib:.1f} GiB)" if runner_up is not None else "")
    if best.reason:
        return "rule", f"the rule '{best.reason}' binds: {best.change} would be {gain}{also}"
    if best.memory_gib is not None and best.memory_gib > limit:
        tight = " (memory is tight)" if free < TIGHT_MEMORY * capacity else ""
        kept = f", {memory_headroom:.0%} of it kept free by the search" if best.memory_gib <= capacity else ""
        return "memory", (f"memory binds{tight}: {best.change} would be {gain} but needs {best.memory_gib:.1f} "
                          f"of {capacity:g} GiB per GPU{kept} ({headroom} now){also}")
    return "rule", f"{best.change} would be {gain} but is not possible{also}"


__all__ = ["SENSITIVITY_AXES", "Explanation", "Neighbour", "explain"]


# --- serving plans -----------------------------------------------------------------------------------
#
# A serve plan's explanation reads the serving estimate through ``_get``: the estimate's fields may
# change with the serving model, and a field it no longer has shows as missing, not as a crash.

SERVING_AXES = ("tp", "pp", "weights", "kv", "max_batch")


def _get(estimate: Mapping[str, Any] | None, key: str) -> Any:
    return (estimate or {}).get(key)


def _num(estimate: Mapping[str, Any] | None, key: str) -> float | None:
    value = _get(estimate, key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ServingNeighbour:
    axis: str
    change: str  # e.g. "tp 4 -> 8 (replicas 2 -> 1)"
    plan: dict[str, Any] | None
    estimate: dict[str, Any] | None
    throughput_change: float | None  # fraction of output tokens/s, positive = more
    fits: bool
    meets_targets: bool
    reason: str  # why the neighbour cannot run ("" when it can)
    # the move leaves the space the plan was searched over (more workers a pool than it allows): the search could
    # not have returned it, and a --space that allows it would search it
    outside_space: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ServingExplanation:
    plan: Any  # ServePlan
    estimate: dict[str, Any]
    capacity_gib: float
    binding_kind: str  # rule | memory | targets | none | optimum
    binding: str
    sensitivity: list[ServingNeighbour]

    def to_json(self) -> dict[str, Any]:
        return {"workload": "serve", "plan": self.plan.as_dict(), "estimate": self.estimate,
                "binding": {"kind": self.binding_kind, "text": self.binding},
                "sensitivity": [n.to_json() for n in self.sensitivity]}


def _engine_moves(prefix: str, tp: int, pp: int, dp: int, ep: int) -> list[tuple[str, dict[str, int]]]:
    """One-step changes of one engine layout: tp and pp doubled or halved, dp doubled or halved.  The experts keep
    their spread: ep = tp*dp (wide EP) or ep = tp stays so after the change, ep = 1 stays 1."""
    out: list[tuple[str, dict[str, int]]] = []
    for axis in ("tp", "pp", "dp"):
        old = {"tp": tp, "pp": pp, "dp": dp}[axis]
        for new in (old * 2, old // 2):
            if new < 1 or new == old:
                continue
            fields = {"tp": tp, "pp": pp, "dp": dp, axis: new}
            new_ep = ep
            if ep > 1 and ep == tp * dp:
                new_ep = fields["tp"] * fields["dp"]
            elif ep > 1 and ep == tp:
                new_ep = fields["tp"]
            changed = {prefix + axis: new}
            if new_ep != ep:
                changed[prefix + "ep"] = new_ep
            out.append((f"{prefix}{axis} {old} -> {new}", changed))
    return out


def _serving_moves(plan) -> list[tuple[str, str, dict[str, Any]]]:
    """(axis, label, changed fields) of every one-step change of a serve plan; replicas follow the GPU count."""
    from ..serving.plan import KV_DTYPES, WEIGHTS

    out: list[tuple[str, str, dict[str, Any]]] = []
    if plan.disaggregated:
        for side in ("prefill", "decode"):
            pool = getattr(plan, side)
            for label, fields in _engine_moves(f"{side}_", pool.tp, pool.pp, pool.dp, pool.ep):
                out.append((f"{side}_layout", label, fields))
            for new in (pool.workers + 1, pool.workers - 1):
                if new >= 1:
                    out.append((f"{side}_workers", f"{side} workers {pool.workers} -> {new}",
                                {f"{side}_workers": new}))
            # the pool's GPUs as wider or narrower engines (TP2 x2 <-> TP4 x1): the same GPU count
            if pool.tp % 2 == 0:
                out.append((f"{side}_layout", f"{side} TP{pool.tp} x{pool.workers} -> TP{pool.tp // 2} "
                            f"x{pool.workers * 2}", {f"{side}_tp": pool.tp // 2, f"{side}_workers": pool.workers * 2}))
            if pool.workers % 2 == 0:
                out.append((f"{side}_layout", f"{side} TP{pool.tp} x{pool.workers} -> TP{pool.tp * 2} "
                            f"x{pool.workers // 2}", {f"{side}_tp": pool.tp * 2, f"{side}_workers": pool.workers // 2}))
        # GPUs moved between the pools at the same GPU count (every other pool move changes it): the fewest whole
        # workers of each side that hold the same GPUs, lcm(prefill GPUs, decode GPUs)
        pre, dec = plan.prefill, plan.decode
        size_p, size_d = pre.tp * pre.pp * pre.dp, dec.tp * dec.pp * dec.dp
        shared = math.lcm(size_p, size_d)
        k_p, k_d = shared // size_p, shared // size_d
        for (from_p, to_p), (from_d, to_d), what in (
                ((pre.workers, pre.workers - k_p), (dec.workers, dec.workers + k_d), "prefill to decode"),
                ((pre.workers, pre.workers + k_p), (dec.workers, dec.workers - k_d), "decode to prefill")):
            if to_p >= 1 and to_d >= 1:
                out.append(("pool_balance", f"{shared} GPUs from {what}: {from_p}P+{from_d}D -> {to_p}P+{to_d}D",
                            {"prefill_workers": to_p, "decode_workers": to_d}))
    else:
        for label, fields in _engine_moves("", plan.tp, plan.pp, plan.dp, plan.ep):
            out.append((label.split(" ")[0], label, fields))
    for new in WEIGHTS:
        if new != plan.weights:
            out.append(("weights", f"weights {plan.weights} -> {new}", {"weights": new}))
    for new in KV_DTYPES:
        if new != plan.kv:
            out.append(("kv", f"KV cache {plan.kv} -> {new}", {"kv": new}))
    # halved or doubled, a whole number per decode DP rank (the engines' limit is per rank)
    dp = plan.decode.dp if plan.disaggregated else plan.dp
    for new in (plan.max_batch * 2, max(dp, (plan.max_batch // 2) - (plan.max_batch // 2) % dp)):
        if new >= 1 and new != plan.max_batch:
            out.append(("max_batch", f"max batch {plan.max_batch} -> {new}", {"max_batch": new}))
    return out


def _changed_plan(plan, fields: Mapping[str, Any]):
    """``plan`` with ``fields`` (plan-string keys) changed, as a new validated plan."""
    from ..serving.plan import serve_plan_from_fields

    current = {k: v for k, v in plan.as_dict().items() if k != "replicas"}  # replicas follow the new layout
    changed = serve_plan_from_fields({**current, **fields}, plan.n_gpus)
    dp = changed.decode.dp if changed.disaggregated else changed.dp
    if "max_batch" not in fields and changed.max_batch % dp:  # a dp move keeps a whole number of sequences a rank
        mb = max(dp, changed.max_batch - changed.max_batch % dp)
        changed = serve_plan_from_fields({**current, **fields, "max_batch": mb}, plan.n_gpus)
    return changed


def explain_serving(model: ModelSpec, cluster: Cluster, workload, plan, params, *,
                    engine: str = "vllm", checkpoint: str = "bf16",
                    memory_fraction: float | None = None, searched_workers: int | None = None) -> ServingExplanation:
    """The estimate of serve ``plan``, what binds it (a rule, memory, a latency target) and each one-step change.
    ``searched_workers``: the most workers a pool had in the space the plan was searched over (None: no bound)."""
    from ..serving.checkpoint import requirement
    from ..serving.estimate import estimate_serving
    from ..serving.plan import ServePlanBatch
    from ..serving.space import REASONS as SERVE_REASONS
    from ..serving.space import rejection_reasons as serve_rejection_reasons

    def evaluate(plans: list) -> tuple[list[dict[str, Any]], list[str]]:
        batch = ServePlanBatch.from_plans(plans)
        codes = serve_rejection_reasons(model, cluster, batch, engine=engine, checkpoint=checkpoint)
        est = estimate_serving(model, cluster, workload, batch, params, engine=engine, memory_fraction=memory_fraction)
        return [est.row(i) for i in range(len(plans))], [SERVE_REASONS[int(c)] if int(c) else "" for c in codes]

    (base,), (base_reason,) = evaluate([plan])
    candidates: list[tuple[str, str, Any, str]] = []
    for axis, label, fields in _serving_moves(plan):
        try:
            changed = _changed_plan(plan, fields)
        except (TypeError, ValueError) as exc:
            candidates.append((axis, label, None, str(exc).split(", but got")[0]))
            continue
        candidates.append((axis, label, changed, ""))
    valid = [c[2] for c in candidates if c[2] is not None]
    rows_est, rows_reason = evaluate(valid) if valid else ([], [])
    base_tps = _num(base, "output_tokens_per_s")
    rows: list[ServingNeighbour] = []
    index = 0
    for axis, label, changed, why in candidates:
        if changed is None:
            rows.append(ServingNeighbour(axis, label, None, None, None, False, False, why))
            continue
        est, reason = rows_est[index], rows_reason[index]
        index += 1
        tps = _num(est, "output_tokens_per_s")
        change = tps / base_tps - 1.0 if tps is not None and base_tps else None
        # weights the checkpoint does not hold (and the engine cannot make at load) are not a step one can take
        reason = reason or requirement(changed.weights, checkpoint, engine, model.is_moe,
                                       fp4_cores=cluster.hardware.supports("fp4")) or ""
        fits = bool(_get(est, "fits")) and not reason
        outside = ""
        if searched_workers is not None and changed.disaggregated and max(
                changed.prefill.workers, changed.decode.workers) > searched_workers:
            outside = (f"outside the searched space, which allows at most {searched_workers} workers a pool; a "
                       "--space whose workers axis allows more searches it")
        rows.append(ServingNeighbour(axis, label, changed.as_dict(), est, change, fits,
                                     fits and bool(_get(est, "meets_targets")), reason or str(_get(est, "infeasible_reason") or ""),
                                     outside))
    kind, text = _serving_binding(base, base_reason, cluster.hardware.memory_gib, rows,
                                  within=" within the targets" if workload.has_targets else "")
    return ServingExplanation(plan, base, cluster.hardware.memory_gib, kind, text, rows)


def _serving_binding(base: Mapping[str, Any], base_reason: str, capacity: float,
                     rows: list[ServingNeighbour], within: str = " within the targets") -> tuple[str, str]:
    if base_reason:
        return "rule", f"this plan cannot run: {base_reason}"
    memory = _num(base, "memory_gib_per_gpu")
    if not _get(base, "fits"):
        fixes = [r.change for r in rows if r.fits]
        why = _get(base, "infeasible_reason") or "out of memory"
        needs = f" (needs {memory:.1f} of {capacity:g} GiB per GPU)" if memory is not None else ""
        return "memory", f"{why}{needs}" + (f"; changes that fit: {', '.join(fixes)}" if fixes else "")
    if not _get(base, "meets_targets"):
        fixes = [r.change for r in rows if r.meets_targets]
        misses = _get(base, "misses") or "a latency target"
        return "targets", (f"misses {misses}" + (f"; changes that meet the targets: {', '.join(fixes)}"
                                                 if fixes else "; no one-step change meets them"))
    better = sorted((r for r in rows if r.meets_targets and (r.throughput_change or 0) > 1e-9),
                    key=lambda r: -(r.throughput_change or 0))
    bound = _get(base, "decode_bound")
    decode = f"; decode is {bound}-bound" if isinstance(bound, str) and bound else ""
    if not better:
        return "optimum", f"no one-step change gives more output tokens/s{within}{decode}"
    best = better[0]
    outside = f" ({best.outside_space})" if best.outside_space else ""
    return "none", f"nothing binds: {best.change} gives {best.throughput_change:+.1%} output tokens/s{within}{outside}"


__all__ += ["SERVING_AXES", "ServingExplanation", "ServingNeighbour", "explain_serving"]
