"""``autotune tune`` (measured trials) and ``autotune worker`` (join a persistent study)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import InputError
from ..inputs.request import TrainingRequest, moe_imbalance_note, single_gpu_count
from ..outputs.files import check_out_file
from ..search.api import check_trials, inputs_json, parse_fixes
from ..search import valid_plan_count
from ..search.diagnose import diagnose, no_valid_plan
from ..search.fingerprint import storage_file
from ..search.optuna_study import (
    EXACT_ATTR,
    count_trials,
    enqueue_plans,
    load_for_worker,
    make_storage,
    open_study,
    run_study,
    trial_records,
)
from ..search.tune import (
    Terminated,
    calibrate_from_trials,
    parse_command,
    prior_plans,
    run_benchmark,
    sigterm_as_interrupt,
    trials_to_best,
    unread_result_keys_note,
)
from ..training.problem import TrainingProblem, parse_objectives
from ..training.space import load_space
from .app import (
    MoeCapacityFactor,
    MoeImbalance,
    Calibration,
    FrameworkOpt,
    GlobalBatch,
    Gpus,
    GpusPerNode,
    HardwareOpt,
    Heartbeat,
    JsonOut,
    Model,
    Nodes,
    Price,
    SeqLen,
    Tokens,
    app,
    path_option,
    check_heartbeat_storage,
    check_study_flags,
    given_on_command_line,
    print_json,
    say_diagnosis,
    say_note,
    stderr,
    stdout,
    user_errors,
)

MAX_WAIT_S = 7 * 24 * 3600  # worker --wait: a week
_STATUS_STYLE = {"ok": "green", "failed": "red", "infeasible": "yellow"}

Storage = Annotated[str, typer.Option("--storage", help="Optuna storage URL: sqlite:///study.db, "
                                      "postgresql://user:pw@host/db, or journal:./study.log.")]
Run = Annotated[Optional[str], typer.Option("--run", help="Benchmark command, run once per trial (split with shlex, "
                                            "no shell). The plan arrives as AUTOTUNE_* environment variables.")]
Shell = Annotated[bool, typer.Option("--shell", help="Run --run through /bin/sh (pipes, &&); the plan still "
                                     "arrives only through the environment.")]
TrialTimeout = Annotated[Optional[float], typer.Option("--trial-timeout", help="Seconds before a benchmark run is "
                                                       "stopped and its trial failed.")]

def check_not_storage(out: Path, storage: str) -> None:
    """A file autotune writes (--calibrate) must not be the study's own storage file: writing it would overwrite the
    study (created or continued before the file is written, whether or not it exists yet)."""
    held = storage_file(storage)
    # os.path.realpath, not Path.resolve: a link that loops (ln -s x x) raised RuntimeError there, a traceback; here
    # it is left as it stands and check_out_file refuses it as an existing file
    if held is not None and os.path.realpath(out) == os.path.realpath(held):
        raise InputError(f"is the --storage file of the study ({storage}), which writing the overlay would overwrite; "
                         "give the overlay its own file, e.g. --calibrate calib.yaml", source=str(out),
                         field="--calibrate")


def trial_printer(json_out: bool):
    def report(event: dict) -> None:
        outcome = event.get("outcome")
        if outcome in ("duplicate", "surplus"):
            return
        style = _STATUS_STYLE.get(outcome, "dim")
        value = event.get("values")
        shown = f" {value[0]:,.1f} tok/s/GPU" if value and outcome == "ok" else ""
        reason = f" ({event['reason']})" if event.get("reason") and outcome != "ok" else ""
        stderr.print(f"[{style}]trial {event['number']} {outcome}[/] {event.get('plan')}{shown}{reason}",
                     highlight=False, soft_wrap=True)
    return report

def measure_with(command, shell: bool, timeout: float | None, inputs: dict):

    said: set[str] = set()

    def measure(plan, estimate, number):
        result = run_benchmark(command, plan, estimate=estimate, inputs=inputs, trial=number, timeout_s=timeout,
                               shell=shell)
        note = unread_result_keys_note(result.extra)
        if note and note not in said:  # once a study, not once a trial
            said.add(note)
            say_note(note)
        return result
    return measure

def no_success(document: dict, study: str) -> None:
    """No benchmark run of the study succeeded: say why (the commonest failure reasons) and exit 1."""
    from collections import Counter

    trials = document["trials"]
    reasons = Counter((t.get("failure_reason") or t.get("outcome") or "unknown").splitlines()[0][:160] for t in trials)
    why = "; ".join(f"{reason} ({count}x)" for reason, count in reasons.most_common(3)) or "no benchmark ran"
    stderr.print(f"[bold red]no benchmark run succeeded[/] in study {study!r} ({len(trials)} runs): {why}. Run the "
                 "--run command by hand with the AUTOTUNE_* variables of a failed trial (autotune tune --json shows "
                 "them with stderr_tail) and fix it, then run the same tune command again.",
                 highlight=False, soft_wrap=True)
    raise typer.Exit(code=1)


def interrupted(study: str, exc: KeyboardInterrupt) -> None:
    """Ctrl-C (exit 130) or SIGTERM (143, 128 + its number, as a shell reports it): a trial in progress was stopped
    (its benchmark with it) and failed; what finished is saved."""
    terminated = isinstance(exc, Terminated)
    stderr.print(f"[bold]{'terminated' if terminated else 'interrupted'}.[/] A trial in progress (and its benchmark, "
                 f"if one was running) was stopped and not counted, and is queued to run again; finished trials are saved in "
                 f"study {study!r}; run the same command to continue.", highlight=False, soft_wrap=True)
    raise typer.Exit(code=143 if terminated else 130)

def show_tune(records, study: str, *, json_out: bool, top: int, calibrated=None, notes=()):

    ran = [r for r in records if r["user_attrs"].get("slot")
           and r["user_attrs"].get("outcome") in ("ok", "failed", "infeasible")]
    ok = sorted((r for r in ran if r["user_attrs"]["outcome"] == "ok"), key=lambda r: -r["values"][0])
    failed = [r for r in ran if r["user_attrs"]["outcome"] != "ok"]
    skipped = [r for r in records if r["user_attrs"].get("outcome") == "skipped"]
    needed, best_key = trials_to_best(records)

    def entry(r):
        a = r["user_attrs"]
        return {"trial": r["number"], "plan": a.get("plan"), "outcome": a.get("outcome"),
                "measured": a.get("measured"), "predicted_tokens_per_s_per_gpu": a.get("predicted_tokens_per_s_per_gpu"),
                "error_pct": a.get("error_pct"), "failure_reason": a.get("failure_reason"),
                "stderr_tail": a.get("stderr_tail"), "retry_of": r.get("retry_of")}

    document = {"best": entry(ok[0]) if ok else None, "trials": [entry(r) for r in sorted(ran, key=lambda r: r["number"])],
                "study": {"name": study, "runs": len(ran), "ok": len(ok), "failed": len(failed),
                          "skipped_by_prior": len(skipped), "trials_to_best": needed}}
    if calibrated is not None:
        document["calibration"] = calibrated.to_json()
    if json_out:
        print_json(document)
        return document
    for note in notes:
        stdout.print(f"[dim]{note}[/]", highlight=False)
    table = Table(title=f"Measured trials of {study}, best first", header_style="bold")
    for col in ("trial", "plan", "measured tok/s/GPU", "predicted", "error", "peak GiB"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    for r in ok[:top]:
        a = r["user_attrs"]
        peak = a["measured"].get("peak_memory_gib")
        table.add_row(str(r["number"]), a["plan_key"], f"{r['values'][0]:,.1f}",
                      f"{a.get('predicted_tokens_per_s_per_gpu', 0):,.1f}", f"{a.get('error_pct', 0):+.1f}%",
                      "-" if peak is None else f"{peak:.1f}")
    stdout.print(table)
    for r in failed:
        a = r["user_attrs"]
        stdout.print(f"[red]trial {r['number']} {a['outcome']}[/]: {a['plan_key']}: {a.get('failure_reason')}",
                     highlight=False, soft_wrap=True)
    if ok:
        stdout.print(f"Best: {ok[0]['user_attrs']['plan_key']} at {ok[0]['values'][0]:,.1f} tokens/s/GPU, first "
                     f"measured at run {needed} of {len(ran)}; {len(failed)} run{'' if len(failed) == 1 else 's'} "
                     f"failed, {len(skipped)} plan{'' if len(skipped) == 1 else 's'} skipped as predicted not to fit.",
                     highlight=False, soft_wrap=True)
    if calibrated is not None:
        stdout.print(f"Calibration: MAPE {calibrated.before.mape_pct:.1f}% before, {calibrated.after.mape_pct:.1f}% "
                     "after the fit.", highlight=False)
    return document

@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune tune -m llama3-8b -H h100-sxm5-80gb --gpus 8 -s 8192 -b 64 --run 'python bench.py --steps 10' "
        "--storage sqlite:///tune.db --study llama8b --trials 20 --trial-timeout 900\n\n"
        "    autotune tune ... --run 'sbatch --wait --parsable job.sh' --calibrate calib.yaml\n\n"
        "The command gets AUTOTUNE_TP, AUTOTUNE_PP, ..., AUTOTUNE_PLAN (plan string), AUTOTUNE_PLAN_JSON (a file) "
        "and AUTOTUNE_RESULT_JSON; it prints one JSON line {\"tokens_per_s_per_gpu\": ..., \"peak_memory_gib\": ...} "
        "or writes it to AUTOTUNE_RESULT_JSON. See docs/distributed.md."
    )
)
def tune(
    model: Model,
    hardware: HardwareOpt,
    seq_len: SeqLen,
    global_batch: GlobalBatch,
    run: Run = None,
    gpus: Gpus = None,
    gpus_per_node: GpusPerNode = None,
    nodes: Nodes = None,
    tokens: Tokens = None,
    price: Price = None,
    calibration: Calibration = None,
    space: Annotated[Optional[str], typer.Option("--space", help="Search-space YAML [default: the bundled train.yaml].")] = None,
    fix: Annotated[Optional[list[str]], typer.Option("--fix", help="Pin an axis, repeatable: --fix tp=8.")] = None,
    storage: Storage = "sqlite:///autotune-tune.db",
    study: Annotated[Optional[str], typer.Option("--study", help="Study name [default: tune-MODEL-GPUSxHARDWARE].")] = None,
    new: Annotated[bool, typer.Option("--new", help="Replace an existing study of that name.")] = False,
    trials: Annotated[int, typer.Option("--trials", help="Benchmark runs in total (a re-run continues up to this).")] = 20,
    shell: Shell = False,
    trial_timeout: TrialTimeout = None,
    sampler: Annotated[str, typer.Option("--sampler", help="tpe | random, after the prior's plans.")] = "tpe",
    seed: Annotated[int, typer.Option("--seed", help="Sampler seed.")] = 0,
    prior_top: Annotated[int, typer.Option("--prior-top", help="Run the cost model's best N plans first.")] = 10,
    margin: Annotated[float, typer.Option("--margin", help="Skip plans predicted to need more than memory x (1 + margin).")] = 0.10,
    no_prior: Annotated[bool, typer.Option("--no-prior", help="No cost-model prior: no queued plans, nothing skipped.")] = False,
    calibrate: Annotated[Optional[Path], typer.Option("--calibrate", help="At the end, refit the profile's efficiency "
                                                      "parameters to the measured trials and write the overlay here.", parser=path_option, metavar="<path>")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --calibrate file.")] = False,
    heartbeat: Heartbeat = 30,
    framework: FrameworkOpt = None,
    moe_imbalance: MoeImbalance = None,
    moe_capacity_factor: MoeCapacityFactor = None,
    top: Annotated[int, typer.Option("--top", "-k", help="Measured plans to show.")] = 10,
    json_out: JsonOut = False,
) -> None:
    """Measure training plans with your own benchmark command; the cost model picks and orders them.
    (Serving plans are ranked by the serving model: `autotune search --workload serve`.)"""
    with user_errors():
        if run is None:
            raise InputError("is required: the benchmark command to run per trial", field="--run")
        command = parse_command(run, shell)
        check_trials(trials)
        if trial_timeout is not None and trial_timeout <= 0:
            raise InputError(f"must be > 0 seconds, but got {trial_timeout}", field="--trial-timeout")
        if not 0 <= margin <= 1:
            raise InputError(f"must be between 0 and 1, but got {margin}", field="--margin")
        if sampler not in ("tpe", "random"):
            raise InputError(f"must be tpe or random, but got {sampler!r}", field="--sampler")
        if heartbeat < 0:
            raise InputError(f"must be >= 0 seconds, but got {heartbeat}", field="--heartbeat")
        check_study_flags(storage=storage, study=study, required=("--storage",))
        check_heartbeat_storage(heartbeat, storage)
        if no_prior:  # nothing is queued and nothing skipped: a prior setting would be dropped without a word
            for flag, name, value, default in (("--prior-top", "prior_top", prior_top, 10),
                                               ("--margin", "margin", margin, 0.10)):
                if given_on_command_line(name, value, default):
                    raise InputError(f"sets the cost-model prior, which --no-prior turns off, but got ({flag}="
                                     f"{value:g} with --no-prior); drop one of them", field=flag)
        if top < 1:
            raise InputError(f"must be >= 1 plans, but got {top}", field="--top")
        if prior_top < 0:
            raise InputError(f"must be >= 0 plans, but got {prior_top}", field="--prior-top")
        if seed < 0:
            raise InputError(f"must be >= 0, but got {seed}", field="--seed")
        if force and calibrate is None:
            raise InputError("lets --calibrate overwrite its file: add --calibrate FILE (or drop --force)",
                             field="--force")
        if calibrate is not None:  # before any benchmark runs: an existing overlay is the user's, kept unless --force
            check_not_storage(calibrate, storage)
            check_out_file(calibrate, force, "--calibrate")
        inputs = TrainingRequest(model=model, hardware=hardware, gpus=single_gpu_count(gpus),
                                 gpus_per_node=gpus_per_node, nodes=nodes, seq_len=seq_len, global_batch=global_batch,
                                 tokens=tokens, price=price, calibration=calibration, framework=framework,
                                 moe_imbalance=moe_imbalance, moe_capacity_factor=moe_capacity_factor).build()
        objectives = parse_objectives("throughput", tokens=tokens)
        problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload,
                                        load_space(space).fixed(parse_fixes(fix or [])), inputs.framework)
        say_note(moe_imbalance_note(inputs.workload, problem.choices["ep"]))
        # A space nothing can run in fails here, before the study exists or a benchmark runs (as search says it).
        hopeless = no_valid_plan(problem)
        if hopeless is not None:
            say_diagnosis(hopeless)
            stderr.print("no benchmark was run.", highlight=False)
            raise typer.Exit(code=1)
        valid = valid_plan_count(problem, trials)
        if valid is not None:  # more benchmark runs than plans would only propose plans already measured
            say_note(f"--trials {trials:,} is more than the {valid:,} valid plans of the space: capped at {valid:,}")
            trials = valid
        prior = [] if no_prior else prior_plans(problem, min(prior_top, trials), margin)
        # every plan would be skipped as predicted not to fit (checked on the best one with --prior-top 0 too)
        if not no_prior and not (prior if prior_top > 0 else prior_plans(problem, 1, margin)):
            say_diagnosis(diagnose(problem, {}), "measure plans predicted not to fit anyway: a larger --margin "
                          f"(now {margin:g}), or --no-prior")
            stderr.print("no benchmark was run.", highlight=False)
            raise typer.Exit(code=1)
        name = study or f"tune-{inputs.model.name}-{inputs.cluster.n_gpus}x{inputs.cluster.hardware.name}"
        store = make_storage(storage, heartbeat_s=heartbeat or None)
        benchmark_inputs = inputs_json(inputs, space)
        # the inputs each benchmark run gets (AUTOTUNE_PLAN_JSON's "inputs") are kept with the study, so that a
        # worker that joins hands its runs the same model, workload and cluster
        settings = {"mode": "tune", "sampler": sampler, "margin": None if no_prior else margin,
                    "trial_timeout": trial_timeout, "prior_top": 0 if no_prior else prior_top,
                    "benchmark_inputs": benchmark_inputs}
        opened, note = open_study(store, name, problem, objectives, new=new, target=trials, settings=settings,
                                  url=storage)
        notes = note.splitlines()
        if not no_prior:
            queued = enqueue_plans(opened, problem, prior)
            if queued:
                notes.append(f"queued the cost model's {queued} best plans predicted to fit to run first")
        for line in notes:
            stderr.print(f"[dim]{escape(line)}[/]", highlight=False, soft_wrap=True)
        measure = measure_with(command, shell, trial_timeout, benchmark_inputs)
        try:
            with sigterm_as_interrupt():
                result = run_study(opened, problem, objectives, sampler_name=sampler, seed=seed, target=trials,
                                   measure=measure, margin=None if no_prior else margin,
                                   report=trial_printer(json_out))
        except KeyboardInterrupt as exc:
            interrupted(name, exc)
        records = trial_records(opened)
        calibrated = None
        notes = []  # those above were said as the study opened: the summary adds only what came after
        succeeded = any(r["user_attrs"].get("outcome") == "ok" and r["state"] == "COMPLETE" for r in records)
        if calibrate is not None and succeeded:
            with stderr.status("refitting the hardware profile to the measured trials"):
                calibrate.parent.mkdir(parents=True, exist_ok=True)
                calibrated = calibrate_from_trials(problem, records, name, calibrate)
            notes.append(f"wrote {calibrate}; apply it with --calibration {calibrate}")
            notes.extend(calibrated.notes())
        document = show_tune(records, name, json_out=json_out, top=top, calibrated=calibrated,
                             notes=notes + result.notes)
        if document["best"] is None:
            no_success(document, name)

@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune worker --storage postgresql://autotune:pw@db-host/autotune --study llama70b\n\n"
        "    autotune worker --storage sqlite:///tune.db --study llama8b --run 'python bench.py' --wait 60\n\n"
        "The study holds its problem (model, hardware, cluster, workload, space, objectives): a worker needs no "
        "other flags, except --run for a study of measured trials (`autotune tune`)."
    )
)
def worker(
    storage: Storage,
    study: Annotated[str, typer.Option("--study", help="Name of the study to join.")],
    run: Run = None,
    shell: Shell = False,
    trial_timeout: TrialTimeout = None,
    trials: Annotated[Optional[int], typer.Option("--trials", help="Stop at this many trials in the study "
                                                  "[default: the study's target].")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Sampler seed [default: random per worker].")] = None,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for the study to be created.")] = 0.0,
    heartbeat: Heartbeat = 30,
    json_out: JsonOut = False,
) -> None:
    """Join a persistent training study (search --storage or tune) and run its trials until it holds its target
    number of finished trials.  (A serving search is exact and needs no workers.)"""

    with user_errors():
        if trials is not None:
            check_trials(trials)
        if not 0 <= wait <= MAX_WAIT_S:
            raise InputError(f"must be between 0 and {MAX_WAIT_S:,} seconds, but got {wait:g}", field="--wait")
        if seed is not None and seed < 0:
            raise InputError(f"must be >= 0, but got {seed}", field="--seed")
        if heartbeat < 0:
            raise InputError(f"must be >= 0 seconds, but got {heartbeat}", field="--heartbeat")
        if trial_timeout is not None and not trial_timeout > 0:  # as tune checks it
            raise InputError(f"must be > 0 seconds, but got {trial_timeout}", field="--trial-timeout")
        check_study_flags(storage=storage, study=study, required=("--storage", "--study"))
        check_heartbeat_storage(heartbeat, storage)
        # a program that cannot start is said before the storage is opened or the study waited for
        command = parse_command(run, shell) if run is not None else None
        # a worker joins a study that search or tune started: without --wait it must not create the storage file
        store = make_storage(storage, heartbeat_s=heartbeat or None, existing=not wait)
        opened, problem, objectives, settings, target = load_for_worker(store, study, wait)
        target = trials or target
        measured = settings.get("mode") == "tune"
        measure = None
        if measured:
            if run is None:
                raise InputError(f"study {study!r} holds measured trials: give the benchmark command with --run",
                                 field="--run")
            timeout = trial_timeout if trial_timeout is not None else settings.get("trial_timeout")
            # what tune gave its own runs; a study tune made before it kept them gives only its name
            stored_inputs = settings.get("benchmark_inputs")
            measure = measure_with(command, shell, timeout,
                                   dict(stored_inputs) if isinstance(stored_inputs, dict) else {"study": study})
        elif run is not None:
            raise InputError(f"study {study!r} is a cost-model search; it runs no command", field="--run")
        if settings.get("sampler") == "exact":
            exact = opened.user_attrs.get(EXACT_ATTR) or {}
            message = (f"study {study!r} was searched exactly: all {exact.get('evaluations', 0):,} valid plans were "
                       "evaluated, so there is nothing for a worker to do; `autotune report --storage ... --study "
                       f"{study}` shows it")
            if json_out:
                print_json({"study": study, "done_here": 0, "not_counted_here": 0, "study_trials": len(opened.trials),
                            "target": target, "notes": [message]})
            else:
                stdout.print(message, highlight=False, soft_wrap=True)
            return
        runs: list[dict] = []  # this worker's benchmark runs, to say so when none of them succeeded
        printer = trial_printer(json_out)

        def report(event: dict) -> None:
            if event.get("outcome") in ("ok", "failed", "infeasible"):
                runs.append(event)
            printer(event)
        try:
            with sigterm_as_interrupt():
                result = run_study(opened, problem, objectives, sampler_name=settings.get("sampler", "tpe"),
                                   seed=seed, target=target, measure=measure,
                                   margin=settings.get("margin") if measured else None,
                                   report=report if measured else None)
        except KeyboardInterrupt as exc:
            interrupted(study, exc)
        total = count_trials(opened, measured)
        summary = {"study": study, "done_here": result.done, "not_counted_here": result.wasted,
                   "study_trials": total, "target": target, "notes": result.notes}
        if json_out:
            print_json(summary)
        else:
            if result.done == 0 and total >= target:  # "holds 20 of 5" read as a count gone wrong
                said = (f"worker finished: study {study!r} already holds {total} trials, at least its target of "
                        f"{target}, so there was nothing to do here; give a larger --trials to search further.")
            else:
                said = f"worker finished: {result.done} trials here; study {study!r} holds {total} (target {target})."
            stdout.print(said + (" " + " ".join(result.notes) if result.notes else ""), highlight=False,
                         soft_wrap=True)
        if any(r.get("outcome") == "failed" for r in runs) and not any(r.get("outcome") == "ok" for r in runs):
            # no benchmark this worker ran succeeded, and some failed: a broken command or environment on this host
            # (out of memory on every plan is a result, and exits 0)
            from collections import Counter

            reasons = Counter((r.get("reason") or r.get("outcome") or "unknown").splitlines()[0][:160] for r in runs)
            why = "; ".join(f"{reason} ({count}x)" for reason, count in reasons.most_common(3))
            stderr.print(f"[bold red]no benchmark run of this worker succeeded[/] ({len(runs)} runs in study "
                         f"{study!r}): {why}. Run the --run command by hand on this host with the AUTOTUNE_* variables "
                         "of a failed trial and fix it.", highlight=False, soft_wrap=True)
            raise typer.Exit(code=1)
