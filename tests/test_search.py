"""Search: exact against TPE and random on a small space, Pareto sets, ranking and rejection counts."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.search import pareto_mask, run_search
from autotune.search.result import OUT_OF_MEMORY
from autotune.training.estimate import estimate_training
from autotune.training.plan import PlanBatch
from autotune.training.problem import OBJECTIVES, TrainingProblem, parse_objectives
from autotune.training.space import enumerate_valid, load_space

THROUGHPUT = (OBJECTIVES["throughput"],)
# llama3-8b on 16 H100s, --fix precision=bf16 --fix offload=none --fix cp=1 --fix vp=1:
# 1,920 candidates, 660 valid.
FIXES = {"precision": "bf16", "offload": "none", "cp": 1, "vp": 1}


@functools.lru_cache(maxsize=None)
def problem(fixes: tuple = tuple(FIXES.items()), n_gpus: int = 16, model: str = "llama3-8b",
            hardware: str = "h100-sxm5-80gb", seq: int = 8192, gb: int = 64) -> TrainingProblem:
    space = load_space(None).fixed(dict(fixes))
    return TrainingProblem.build(load_model(model), Cluster(load_hardware(hardware), n_gpus, 8),
                                 TrainWorkload(seq, gb), space)


@functools.lru_cache(maxsize=None)
def exact(objectives=THROUGHPUT, top: int = 10):
    return run_search(problem(), objectives, sampler="exact", top=top)


def all_feasible(prob: TrainingProblem):
    """Every valid plan's estimate, computed directly (not through the search)."""
    enumeration = enumerate_valid(prob.model, prob.cluster, prob.workload, prob.choices, prob.rules)
    return enumeration, estimate_training(prob.model, prob.cluster, prob.workload, enumeration.plans)


def throughput(result) -> float:
    return result.ranked[0].estimate["tokens_per_s_per_gpu"]


def test_exact_finds_the_true_optimum():
    result = exact()
    _, est = all_feasible(problem())
    best = float(np.max(np.where(est.fits, est.tokens_per_s_per_gpu, 0.0)))
    assert throughput(result) == pytest.approx(best, rel=1e-12)
    assert result.sampler == "exact"


def test_exact_results_are_feasible_and_ranked_best_first():
    result = exact()
    assert 1 <= len(result.ranked) <= 10
    assert [r.rank for r in result.ranked] == list(range(1, len(result.ranked) + 1))
    values = [r.estimate["tokens_per_s_per_gpu"] for r in result.ranked]
    assert values == sorted(values, reverse=True)
    prob = problem()
    for r in result.ranked:
        assert r.estimate["fits"] is True
        assert r.estimate["memory_gib_per_gpu"] <= prob.cluster.hardware.memory_gib
        assert r.plan.n_gpus == prob.cluster.n_gpus
        assert r.objective_values["throughput"] == pytest.approx(r.estimate["tokens_per_s_per_gpu"])
        assert int(prob.reasons(PlanBatch.from_plans([r.plan]))[0]) == 0
    assert len({r.plan for r in result.ranked}) == len(result.ranked)  # no duplicates


def test_exact_rejection_counts_add_up_to_the_space():
    result = exact()
    enumeration, est = all_feasible(problem())
    valid = len(enumeration.plans)
    assert result.evaluations == valid
    assert result.space_size == 1920
    oom = result.rejected.get(OUT_OF_MEMORY, 0)
    rule_rejections = sum(v for k, v in result.rejected.items() if k != OUT_OF_MEMORY)
    # Rule rejections and valid plans partition the space; out-of-memory plans are valid plans that do not fit.
    assert rule_rejections + valid == result.space_size
    # "Out of memory" counts plans beyond the capacity less the memory headroom ranked plans keep free.
    fits = problem().fits(est)
    assert oom == int(np.sum(~fits)) and int(np.sum(~est.fits)) <= oom
    assert result.feasible == int(np.sum(fits)) == valid - oom
    assert result.feasible + sum(result.rejected.values()) == result.space_size


def test_auto_picks_exact_for_a_small_space():
    result = run_search(problem(), THROUGHPUT, sampler="auto")
    assert result.sampler == "exact"
    assert result.notes and "exact" in result.notes[0]
    assert throughput(result) == throughput(exact())


# For the TPE-against-exact check, also --fix mbs=1: 480 candidates, 168 valid.  On this space seeded TPE
# reached the optimum with every seed tried (0-7); on the 1,920-candidate space above it lands between
# 88% and 100% of the optimum at 150 trials depending on the seed, about as well as random search.
TPE_FIXES = tuple({**FIXES, "mbs": 1}.items())


@pytest.mark.parametrize("seed", [0, 1])
def test_tpe_gets_within_two_percent_of_the_optimum(seed):
    prob = problem(TPE_FIXES)
    optimum = throughput(run_search(prob, THROUGHPUT, sampler="exact"))
    result = run_search(prob, THROUGHPUT, sampler="tpe", trials=150, seed=seed)
    assert result.sampler == "tpe"
    assert result.evaluations <= 150
    assert throughput(result) >= 0.98 * optimum
    assert throughput(result) <= optimum * (1 + 1e-12)  # nothing beats the exact optimum


def test_samplers_never_beat_the_exact_optimum():
    optimum = throughput(exact())
    for sampler, seed in (("tpe", 0), ("tpe", 5), ("random", 0)):
        result = run_search(problem(), THROUGHPUT, sampler=sampler, trials=100, seed=seed)
        assert throughput(result) <= optimum * (1 + 1e-12), (sampler, seed)


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_samplers_respect_a_fixed_sp(sampler):
    prob = problem(tuple({**FIXES, "sp": True}.items()))
    assert prob.choices["sp"] == (True,)
    for seed in range(3):
        result = run_search(prob, THROUGHPUT, sampler=sampler, trials=60, seed=seed)
        assert all(r.plan.sp for r in result.ranked), (seed, [r.plan.as_string() for r in result.ranked])


def test_same_seed_same_answer():
    runs = [run_search(problem(), THROUGHPUT, sampler="tpe", trials=60, seed=7) for _ in range(2)]
    a, b = ([(r.plan.as_string(), r.estimate["tokens_per_s_per_gpu"]) for r in run.ranked] for run in runs)
    assert a == b
    assert runs[0].evaluations == runs[1].evaluations
    assert runs[0].rejected == runs[1].rejected


def test_random_sampler():
    result = run_search(problem(), THROUGHPUT, sampler="random", trials=80, seed=3)
    assert result.sampler == "random"
    assert 1 <= result.evaluations <= 80
    assert result.ranked
    assert all(r.estimate["fits"] for r in result.ranked)
    assert throughput(result) <= throughput(exact()) * (1 + 1e-12)
    # Each distinct proposal is counted once: valid (feasible or out of memory) or rejected by a rule.
    assert result.feasible + sum(result.rejected.values()) == result.evaluations


def test_tpe_counts_add_up():
    result = run_search(problem(), THROUGHPUT, sampler="tpe", trials=40, seed=1)
    assert result.feasible + sum(result.rejected.values()) == result.evaluations
    assert result.space_size == 1920


def dominated(a: dict, b: dict) -> bool:
    """Is plan a dominated by plan b on (throughput up, memory down)?"""
    ta, ma = a["tokens_per_s_per_gpu"], a["memory_gib_per_gpu"]
    tb, mb = b["tokens_per_s_per_gpu"], b["memory_gib_per_gpu"]
    return tb >= ta and mb <= ma and (tb > ta or mb < ma)


@pytest.mark.parametrize("sampler", ["exact", "tpe"])
def test_multi_objective_returns_a_pareto_set(sampler):
    objectives = parse_objectives("throughput,memory", tokens=None)
    result = run_search(problem(), objectives, sampler=sampler, trials=80, seed=0, top=50)
    assert result.pareto
    assert len(result.ranked) >= 2
    estimates = [r.estimate for r in result.ranked]
    for i, a in enumerate(estimates):
        assert a["fits"]
        for j, b in enumerate(estimates):
            if i != j:
                assert not dominated(a, b), (result.ranked[i].plan.as_string(), result.ranked[j].plan.as_string())


def test_exact_pareto_set_is_not_dominated_by_any_feasible_plan():
    objectives = parse_objectives("throughput,memory", tokens=None)
    result = run_search(problem(), objectives, sampler="exact", top=1000)
    _, est = all_feasible(problem())
    fits = problem().fits(est)  # with the memory headroom ranked plans keep free
    tput, mem = est.tokens_per_s_per_gpu[fits], est.memory_gib_per_gpu[fits]
    for r in result.ranked:
        t, m = r.estimate["tokens_per_s_per_gpu"], r.estimate["memory_gib_per_gpu"]
        assert not np.any((tput >= t) & (mem <= m) & ((tput > t) | (mem < m)))
    # ...and it is the whole front (top was large enough): count the front independently.  Plans with
    # the same estimate are one row that names the others.
    front = pareto_mask(np.stack([tput, -mem], axis=1))
    assert sum(1 + len(r.equivalents) for r in result.ranked) == int(np.sum(front))
    assert len(result.ranked) == len({(float(t), float(m)) for t, m in zip(tput[front], mem[front])})
    # The extremes: the fastest feasible plan and the leanest one are both on it.
    assert max(r.estimate["tokens_per_s_per_gpu"] for r in result.ranked) == pytest.approx(float(tput.max()))
    assert min(r.estimate["memory_gib_per_gpu"] for r in result.ranked) == pytest.approx(float(mem.min()))


def test_pareto_mask():
    scores = np.array([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [1.0, 1.0], [3.0, 1.0], [2.0, 1.5]])
    # [1,1] is dominated by everything; [2,1.5] by [2,2]; the two [3,1] tie and both stay.
    assert list(pareto_mask(scores)) == [True, True, True, False, True, False]


def test_other_objectives_rank_the_right_way():
    prob = problem()
    cost = run_search(prob, parse_objectives("cost", tokens=None), sampler="exact")
    values = [r.estimate["cost_usd_per_million_tokens"] for r in cost.ranked]
    assert values == sorted(values)
    memory = run_search(prob, parse_objectives("memory", tokens=None), sampler="exact")
    mems = [r.estimate["memory_gib_per_gpu"] for r in memory.ranked]
    assert mems == sorted(mems)
    _, est = all_feasible(prob)
    assert mems[0] == pytest.approx(float(est.memory_gib_per_gpu[est.fits].min()))


def test_objective_parsing_errors():
    with pytest.raises(ValueError, match="--tokens"):
        parse_objectives("time", tokens=None)
    with pytest.raises(ValueError, match="unknown"):
        parse_objectives("speed", tokens=None)
    with pytest.raises(ValueError, match="once"):
        parse_objectives("cost,cost", tokens=None)
    assert [o.name for o in parse_objectives("time", tokens=1e12)] == ["time"]


def test_unknown_sampler():
    with pytest.raises(ValueError, match="sampler"):
        run_search(problem(), THROUGHPUT, sampler="annealing")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_gp_without_torch_says_so():
    with pytest.raises(ValueError, match="PyTorch"):
        run_search(problem(), THROUGHPUT, sampler="gp", trials=5)


def test_nothing_fits_gives_an_empty_ranking_with_counts():
    prob = problem(fixes=(("zero", 0),), n_gpus=8, model="llama3-405b", hardware="a100-sxm4-40gb", seq=4096, gb=8)
    result = run_search(prob, THROUGHPUT, sampler="exact")
    assert result.ranked == [] and result.feasible == 0
    assert result.rejected.get(OUT_OF_MEMORY, 0) == result.evaluations > 0
