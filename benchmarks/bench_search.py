"""Benchmark of autotune's search: cost-model speed and sampler quality.

Run from the repository root (autotune must be importable, e.g. ``pip install -e .``)::

    python benchmarks/bench_search.py            # full run: a few minutes on 2 cores
    python benchmarks/bench_search.py --quick    # fewer seeds and repetitions: well under a minute
    python benchmarks/bench_search.py --json bench.json

Part A, speed: for each scenario, every valid plan of the default search space is
enumerated and the vectorised cost model (``estimate_training``) is timed on all of
them at once (best of 3); the figure is plans per second.  The same call on a batch
of one plan shows the fixed cost per call, which is what a sequential sampler pays
for every trial.

Part B, quality: the exact search gives the true optimum of the cost model on the
space (it evaluates every valid plan).  TPE, GP (when PyTorch is installed) and
random search then run with several trial budgets and seeds; each run's best
feasible throughput is divided by the exact optimum.  The table shows the mean and
the worst of that ratio over the seeds, how many seeds found the optimum itself,
and the mean wall time of one run.

Timings are printed, never asserted: they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

# Run from a checkout without installing: the package sits beside this folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotune.training.estimate import estimate_training  # noqa: E402
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.training.problem import TrainingProblem, parse_objectives
from autotune.search import run_search
from autotune.search import count_valid_upper_bound
from autotune.training.space import axis_choices, enumerate_valid, load_space
from autotune.inputs.workload import TrainWorkload

try:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
except ImportError:  # rich is a dependency of autotune; this only guards odd installs
    sys.exit("bench_search.py needs rich (pip install rich)")

BUDGETS = (50, 100, 200, 500)
SAMPLERS = ("tpe", "gp", "random")
# Part B includes a scenario only if its exact search is cheap: at most this many valid plans.
EXACT_PLAN_LIMIT = 1_000_000
# A ratio this close to 1 counts as "found the optimum" (ties between equal plans).
OPTIMUM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Scenario:
    model: str
    hardware: str
    gpus: int
    seq_len: int
    global_batch: int
    optional: bool = False  # in part B only if the exact search is cheap

    @property
    def label(self) -> str:
        return f"{self.model} / {self.gpus}x {self.hardware} / s={self.seq_len} B={self.global_batch}"

    @property
    def short(self) -> str:
        return f"{self.model} @ {self.gpus} GPUs"


SPEED_SCENARIOS = (
    Scenario("llama3-8b", "h100-sxm5-80gb", 8, 8192, 64),
    Scenario("llama3-70b", "h100-sxm5-80gb", 64, 8192, 512),
    Scenario("mixtral-8x7b", "h100-sxm5-80gb", 64, 4096, 1024),
    Scenario("gpt3-175b", "a100-sxm4-80gb", 1024, 2048, 1536),
    Scenario("llama3-405b", "h100-sxm5-80gb", 16384, 8192, 2048),
)

QUALITY_SCENARIOS = (
    Scenario("gpt3-175b", "a100-sxm4-80gb", 1024, 2048, 1536),
    Scenario("llama3-70b", "h100-sxm5-80gb", 64, 8192, 512),
    Scenario("mixtral-8x7b", "h100-sxm5-80gb", 64, 4096, 1024),
    Scenario("llama3-405b", "h100-sxm5-80gb", 16384, 8192, 2048, optional=True),
)


def build_problem(sc: Scenario) -> TrainingProblem:
    hardware = load_hardware(sc.hardware)
    cluster = Cluster(hardware, sc.gpus, min(hardware.gpus_per_node, sc.gpus))
    workload = TrainWorkload(sc.seq_len, sc.global_batch)
    return TrainingProblem.build(load_model(sc.model), cluster, workload, load_space(None))


def best_of(repeats: int, fn) -> float:
    """The shortest of ``repeats`` timings of ``fn()``, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# ----------------------------------------------------------------------------- part A


def bench_speed(sc: Scenario, repeats: int, single_calls: int) -> dict:
    hardware = load_hardware(sc.hardware)
    cluster = Cluster(hardware, sc.gpus, min(hardware.gpus_per_node, sc.gpus))
    workload = TrainWorkload(sc.seq_len, sc.global_batch)
    model = load_model(sc.model)
    space = load_space(None)
    choices = axis_choices(space, model, cluster, workload)

    enumeration = None

    def enumerate_once():
        nonlocal enumeration
        enumeration = enumerate_valid(model, cluster, workload, choices, space.rules)

    enumerate_s = best_of(repeats, enumerate_once)
    plans = enumeration.plans
    n = len(plans)
    estimate_s = best_of(repeats, lambda: estimate_training(model, cluster, workload, plans))

    one = plans.take(np.arange(1))
    estimate_training(model, cluster, workload, one)  # warm-up

    def single_loop():
        for _ in range(single_calls):
            estimate_training(model, cluster, workload, one)

    single_s = best_of(repeats, single_loop) / single_calls
    return {
        "scenario": sc.label,
        "space_size": enumeration.space_size,
        "valid_plans": n,
        "enumerate_s": enumerate_s,
        "estimate_s": estimate_s,
        "plans_per_s": n / estimate_s if estimate_s > 0 else float("inf"),
        "single_plan_call_s": single_s,
        "single_plan_calls_per_s": 1.0 / single_s if single_s > 0 else float("inf"),
    }


def print_speed(console: Console, rows: list[dict], repeats: int, single_calls: int) -> None:
    table = Table(title=f"A. Cost-model speed (best of {repeats})", title_justify="left")
    table.add_column("scenario")
    table.add_column("space", justify="right")
    table.add_column("valid plans", justify="right")
    table.add_column("enumerate s", justify="right")
    table.add_column("estimate s", justify="right")
    table.add_column("plans/s", justify="right", style="bold")
    table.add_column("1-plan call", justify="right")
    table.add_column("1-plan calls/s", justify="right")
    for r in rows:
        table.add_row(
            r["scenario"], f"{r['space_size']:,}", f"{r['valid_plans']:,}", f"{r['enumerate_s']:.3f}",
            f"{r['estimate_s']:.3f}", f"{r['plans_per_s']:,.0f}", f"{r['single_plan_call_s'] * 1e6:,.0f} µs",
            f"{r['single_plan_calls_per_s']:,.0f}",
        )
    console.print(table)
    console.print(
        f"  1-plan call: mean of {single_calls} calls of estimate_training on a batch of one plan "
        "(the fixed cost per call that a sequential sampler pays per trial)."
    )


# ----------------------------------------------------------------------------- part B


@dataclass
class Cell:
    """Runs of one sampler at one budget on one scenario, over the seeds."""

    ratios: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    evaluations: list[int] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "seeds": len(self.ratios),
            "mean_ratio": statistics.fmean(self.ratios),
            "worst_ratio": min(self.ratios),
            "found_optimum": sum(r >= 1.0 - OPTIMUM_TOLERANCE for r in self.ratios),
            "mean_wall_s": statistics.fmean(self.wall_s),
            "mean_distinct_plans": statistics.fmean(self.evaluations),
            "ratios": self.ratios,
        }


def gp_unavailable() -> str | None:
    """Why Optuna's GP sampler cannot run here, or None when it can."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"PyTorch does not import ({exc}); install it with pip install 'autotune[gp]'"
    return None


def best_throughput(result) -> float:
    return float(result.ranked[0].estimate["tokens_per_s_per_gpu"]) if result.ranked else 0.0


def bench_quality(console: Console, sc: Scenario, samplers: list[str], budgets: tuple[int, ...], seeds: int,
                  gp_budgets: tuple[int, ...], gp_seeds: int) -> dict | None:
    problem = build_problem(sc)
    objectives = parse_objectives("throughput", tokens=None)
    bound = count_valid_upper_bound(problem)
    if sc.optional and bound > EXACT_PLAN_LIMIT:
        console.print(f"  skipped {sc.label}: up to {bound:,} valid plans, over the exact-search limit "
                      f"of {EXACT_PLAN_LIMIT:,}")
        return None
    exact = run_search(problem, objectives, sampler="exact", top=1)
    optimum = best_throughput(exact)
    if optimum <= 0:
        console.print(f"  skipped {sc.label}: no plan fits, so there is no optimum to compare with")
        return None
    out = {
        "scenario": sc.label,
        "exact": {
            "optimum_tokens_per_s_per_gpu": optimum,
            "plan": exact.ranked[0].plan.as_string(),
            "plan_short": _short_plan(exact.ranked[0].plan),
            "valid_plans": exact.evaluations,
            "feasible_plans": exact.feasible,
            "space_size": exact.space_size,
            "wall_s": exact.elapsed_s,
        },
        "samplers": {},
    }
    for sampler in samplers:
        sampler_budgets = gp_budgets if sampler == "gp" else budgets
        sampler_seeds = gp_seeds if sampler == "gp" else seeds
        cells = {}
        for budget in sampler_budgets:
            cell = Cell()
            for seed in range(sampler_seeds):
                start = time.perf_counter()
                result = run_search(problem, objectives, sampler=sampler, trials=budget, seed=seed, top=1)
                cell.wall_s.append(time.perf_counter() - start)
                cell.ratios.append(best_throughput(result) / optimum)
                cell.evaluations.append(result.evaluations)
            cells[budget] = cell.summary()
        out["samplers"][sampler] = cells
    return out


def _short_plan(plan) -> str:
    return (f"{plan.layout()}{' +SP' if plan.sp else ''} · zero={plan.zero} mbs={plan.mbs} "
            f"recompute={plan.recompute} {plan.precision} offload={plan.offload}")


def _cell_text(summary: dict | None) -> str:
    if summary is None:
        return "[dim]-[/]"
    mean, worst = summary["mean_ratio"], summary["worst_ratio"]
    flag = " [red]>1?[/]" if summary["worst_ratio"] > 1.0 + 1e-6 or mean > 1.0 + 1e-6 else ""
    colour = "green" if worst >= 0.99 else "yellow" if worst >= 0.95 else "red"
    return (
        f"[{colour}]{mean:.3f} / {worst:.3f}[/]{flag}\n"
        f"[dim]opt {summary['found_optimum']}/{summary['seeds']} · {summary['mean_wall_s']:.2f} s\n"
        f"{summary['mean_distinct_plans']:,.0f} plans[/]"
    )


def print_quality(console: Console, results: list[dict], budgets: tuple[int, ...]) -> None:
    table = Table(
        title="B. Search quality: best found / exact optimum (mean / worst over seeds)",
        title_justify="left",
    )
    table.add_column("scenario", min_width=30)
    table.add_column("sampler")
    for b in budgets:
        table.add_column(f"{b} trials", justify="right")
    for res in results:
        ex = res["exact"]
        name = res["scenario"].replace(" / s=", "\ns=").replace(" / ", "\n", 1)
        name += (
            f"\n[bold]optimum {ex['optimum_tokens_per_s_per_gpu']:,.1f}[/] tok/s/GPU"
            f"\n[dim]exact: {ex['valid_plans']:,} valid plans\n({ex['feasible_plans']:,} fit) in {ex['wall_s']:.2f} s[/]"
        )
        first = True
        for sampler, cells in res["samplers"].items():
            table.add_row(name if first else "", sampler, *[_cell_text(cells.get(b)) for b in budgets],
                          end_section=sampler == list(res["samplers"])[-1])
            first = False
    console.print(table)
    console.print(
        "  Each cell: mean / worst ratio of the best feasible throughput found to the exact optimum; "
        "'opt k/n': seeds that found the optimum itself; 'plans': mean distinct plans the sampler proposed "
        "(valid or not; repeats are answered from a cache, so this is below the trial budget); mean wall time "
        "of one run (`run_search`, including the final ranking)."
    )


def print_optimum_plans(console: Console, results: list[dict]) -> None:
    table = Table(title="Exact optima", title_justify="left")
    table.add_column("scenario")
    table.add_column("best plan (cost model)", overflow="fold")
    table.add_column("tok/s/GPU", justify="right")
    for res in results:
        ex = res["exact"]
        table.add_row(res["scenario"], ex["plan_short"], f"{ex['optimum_tokens_per_s_per_gpu']:,.1f}")
    console.print(table)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 seeds, 1 GP seed, fewer timing repetitions")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per sampler and budget (default 5; 2 with --quick)")
    parser.add_argument("--gp-seeds", type=int, default=None,
                        help="seeds for the GP sampler, which is far slower per trial (default 2; 1 with --quick)")
    parser.add_argument("--gp-max-trials", type=int, default=200,
                        help="largest GP budget to run (default 200: GP refits its model every trial)")
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    args = parser.parse_args(argv)

    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 5)
    gp_seeds = args.gp_seeds if args.gp_seeds is not None else (1 if args.quick else 2)
    if seeds < 1 or gp_seeds < 1:
        parser.error("--seeds and --gp-seeds must be >= 1")
    repeats = 3
    single_calls = 100 if args.quick else 300

    console = Console(width=None if sys.stdout.isatty() else 132)
    import optuna

    console.print(
        f"[bold]autotune search benchmark[/] ({'quick' if args.quick else 'full'}): python {platform.python_version()}, "
        f"numpy {np.__version__}, optuna {optuna.__version__}, {os.cpu_count()} CPUs"
    )
    started = time.perf_counter()

    speed_rows = [bench_speed(sc, repeats, single_calls) for sc in SPEED_SCENARIOS]
    print_speed(console, speed_rows, repeats, single_calls)
    console.print()

    samplers = list(SAMPLERS)
    gp_note = gp_unavailable()
    if gp_note:
        samplers.remove("gp")
        console.print(f"[yellow]GP skipped:[/] {escape(gp_note)}.")
    gp_budgets = tuple(b for b in BUDGETS if b <= args.gp_max_trials)
    if not gp_note and gp_budgets != BUDGETS:
        console.print(f"GP runs budgets {', '.join(map(str, gp_budgets))} with {gp_seeds} seed(s) "
                      f"(raise --gp-max-trials / --gp-seeds for more).")
    console.print(f"TPE and random: {seeds} seed(s) per budget.")
    quality = []
    for sc in QUALITY_SCENARIOS:
        res = bench_quality(console, sc, samplers, BUDGETS, seeds, gp_budgets, gp_seeds)
        if res is not None:
            quality.append(res)
    print_quality(console, quality, BUDGETS)
    print_optimum_plans(console, quality)
    total_s = time.perf_counter() - started
    console.print(f"Total wall time {total_s:.1f} s.")

    if args.json:
        document = {
            "mode": "quick" if args.quick else "full",
            "environment": {"python": platform.python_version(), "numpy": np.__version__,
                            "optuna": optuna.__version__, "cpus": os.cpu_count()},
            "speed": speed_rows,
            "quality": {
                "budgets": list(BUDGETS),
                "seeds": seeds,
                "gp": {"skipped": gp_note, "budgets": list(gp_budgets), "seeds": gp_seeds},
                "scenarios": quality,
            },
            "total_wall_s": total_s,
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(document, fh, indent=2)
        console.print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
