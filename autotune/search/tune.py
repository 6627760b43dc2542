"""Measured trials: run the user's benchmark once per plan, with the cost model as the prior.

``autotune tune --run CMD`` hands each trial's plan to ``CMD`` through the environment
(``AUTOTUNE_TP``, ``AUTOTUNE_PP``, ..., ``AUTOTUNE_PLAN`` as a plan string, and
``AUTOTUNE_PLAN_JSON``: a file holding ``{"plan", "estimate", "inputs", "trial"}``), never by
pasting values into a shell string.  ``CMD`` is split with :func:`shlex.split` and run without
a shell unless ``shell=True``.  It reports one JSON object with at least
``tokens_per_s_per_gpu`` (optionally ``peak_memory_gib``), either as a line on stdout (the
last such line wins) or written to the file named by ``AUTOTUNE_RESULT_JSON`` (which wins).

A non-zero exit, a timeout, a crash (killed by a signal) or no measurement makes the trial
failed, as does a result beyond what the GPU can do (:func:`implausibility`, checked where the study
records the trial); an out-of-memory marker in its output (or ``"oom": true`` in its result) makes it
infeasible.  The reason and the tail of stderr are kept on the trial.

This module runs processes; Optuna stays in :mod:`autotune.search.optuna_search`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..inputs.hardware import MEASURED_MEMORY_MARGIN
from ..inputs.loading import is_finite_number, repeated_key
from ..training.plan import PLAN_KEYS, canonical_fields
from ..training.problem import TrainingProblem
from ..training.validation import throughput_ceiling
from .fingerprint import plan_env

OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory", "cublas_status_alloc_failed",
               "hipErrorOutOfMemory".lower(), "autotune-oom")
STDERR_TAIL_CHARS = 4000
_GRACE_S = 5.0  # between SIGTERM and SIGKILL when a benchmark must stop


@dataclass(frozen=True)
class Measurement:
    status: str  # ok | failed | infeasible
    tokens_per_s_per_gpu: float | None = None
    peak_memory_gib: float | None = None
    reason: str = ""
    stderr_tail: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    extra: Mapping[str, Any] | None = None

    def as_dict(self) -> dict:
        out = {"status": self.status, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
               "peak_memory_gib": self.peak_memory_gib, "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3)}
        if self.reason:
            out["reason"] = self.reason
        if self.extra:
            out["extra"] = dict(self.extra)
        return out


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (:func:`sigterm_as_interrupt`)."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Handle SIGTERM (``kill``, a scheduler's stop, a container's shutdown) as Ctrl-C while measuring: the running
    benchmark's process group is stopped, its trial recorded as failed (not counted) and the caller told, instead
    of this process dying and leaving the benchmark's group running.  Once: a second SIGTERM during that cleanup
    does not cut it short.  Only the main thread can take signals; elsewhere nothing changes."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) == signal.SIG_IGN):  # a parent that ignores it for us is obeyed
        yield
        return
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


SHELL_PUNCTUATION = frozenset("();<>|&")


def _shell_operator(run: str) -> str | None:
    """The first unquoted shell operator of ``run`` (a pipe, a redirection such as ``>``, ``1>``, ``&>``, a ``;``
    or ``&&``, a subshell ``$(...)`` or a backquote), None when there is none.  Quoted text is an argument:
    ``--sep "|"`` passes a bar to the benchmark, as a shell would."""
    lexer = shlex.shlex(run, posix=False, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None  # unbalanced quotes: shlex.split has said so already
    for token in tokens:
        if token[:1] in ("'", '"'):
            continue
        if set(token) <= SHELL_PUNCTUATION or "`" in token or "$(" in token:
            return token
    return None


class _RepeatedKey(ValueError):
    """A benchmark result that states one key twice (JSON would keep the last, silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    twice = repeated_key(pairs)
    if twice is not None:
        raise _RepeatedKey(twice)
    return dict(pairs)


def _result_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_unique_pairs)


def parse_command(run: str, shell: bool) -> list[str] | str:
    if not run or not run.strip():
        raise InputError("needs the benchmark command, e.g. --run 'python bench.py --steps 20'", field="--run")
    if shell:
        return run
    try:
        argv = shlex.split(run)
    except ValueError as exc:
        raise InputError(f"cannot be split like a shell would ({exc}); fix the quoting or pass --shell", field="--run") from None
    if not argv:
        raise InputError("is empty after splitting", field="--run")
    # without a shell an operator is an argument: 'bench.py | tee log' would run bench.py with '|' 'tee' 'log'
    operator = _shell_operator(run)
    if operator is not None:
        raise InputError(f"holds the shell operator {operator!r}, which only a shell runs (without one the benchmark "
                         "would get it as an argument); pass --shell, or leave the operator out", field="--run")
    # A program that cannot start fails every trial the same way; say so before a study is created or opened.
    program = argv[0]
    if shutil.which(program) is None:
        if os.sep not in program:
            why = "is not on PATH; give its path (--run './bench.sh') or its interpreter (--run 'python bench.py')"
        elif os.path.isfile(program):
            why = f"is not executable; run chmod +x {shlex.quote(program)}, or give its interpreter (--run 'sh ...')"
        else:
            why = "does not exist; check the path (relative paths start from the folder autotune runs in)"
        raise InputError(f"names the program {program!r}, which {why}", field="--run")
    return argv


def _result_from_json(data: Any) -> tuple[float | None, float | None, bool, str]:
    """(tokens/s/GPU, peak GiB, oom, problem) from a result object."""
    if not isinstance(data, dict):
        return None, None, False, "the result is not a JSON object"
    oom = data.get("oom")
    if oom is not None and not isinstance(oom, bool):
        # "oom": "no" was read as no marker and "oom": 1 or "true" as a missing throughput: say what JSON takes
        return None, None, False, f"oom must be true or false (JSON booleans), but got {oom!r}"
    if oom is True:
        return None, None, True, ""
    value = data.get("tokens_per_s_per_gpu")
    if not is_finite_number(value) or value <= 0:
        return None, None, False, f"tokens_per_s_per_gpu must be a finite positive number, but got {value!r}"
    peak = data.get("peak_memory_gib")
    if peak is not None and (not is_finite_number(peak) or peak < 0):
        return None, None, False, f"peak_memory_gib must be a finite number >= 0, but got {peak!r}"
    return float(value), None if peak is None else float(peak), False, ""


def _last_json_line(text: str) -> Any:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                data = _result_json(line)
            except json.JSONDecodeError:
                continue
            except _RepeatedKey:
                # a log line may repeat a key; a result line may not (its value would be the last one's)
                plain = json.loads(line)
                if isinstance(plain, dict) and ("tokens_per_s_per_gpu" in plain or "oom" in plain):
                    raise
                continue
            if isinstance(data, dict) and ("tokens_per_s_per_gpu" in data or "oom" in data):
                return data
    return None


def _stop(proc: subprocess.Popen) -> None:
    """Stop the benchmark and everything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, _GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_benchmark(command: list[str] | str, plan: Mapping[str, Any], *, estimate: Mapping[str, Any] | None = None,
                  inputs: Mapping[str, Any] | None = None, trial: int | None = None, timeout_s: float | None = None,
                  shell: bool = False, cwd: str | None = None, extra_env: Mapping[str, str] | None = None) -> Measurement:
    """Run the benchmark once for ``plan`` and read its measurement."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autotune-trial-") as tmp:
        plan_file = Path(tmp) / "plan.json"
        result_file = Path(tmp) / "result.json"
        plan_file.write_text(json.dumps({"plan": dict(plan), "estimate": dict(estimate or {}),
                                         "inputs": dict(inputs or {}), "trial": trial}, indent=1))
        env = dict(os.environ)
        env.update(plan_env(plan))
        shown = canonical_fields({k: plan[k] for k in PLAN_KEYS if k in plan})  # as Plan.as_string writes it
        env.update({"AUTOTUNE_PLAN": ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                               for k, v in shown.items()),
                    "AUTOTUNE_PLAN_JSON": str(plan_file), "AUTOTUNE_RESULT_JSON": str(result_file),
                    "AUTOTUNE_TRIAL": "" if trial is None else str(trial)})
        env.update(extra_env or {})
        with open(Path(tmp) / "stdout", "w+b") as out, open(Path(tmp) / "stderr", "w+b") as err:
            timed_out = False
            proc = None
            try:  # one try from the start: a signal just after the benchmark starts stops it too
                try:
                    proc = subprocess.Popen(command, shell=shell, env=env, cwd=cwd, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
                except OSError as exc:
                    return Measurement("failed", reason=f"cannot start the command: {exc.strerror or exc}",
                                       wall_s=time.monotonic() - started)
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(proc)
            except BaseException:  # Ctrl-C or SIGTERM: the benchmark runs in its own session, stop it too
                if proc is not None:
                    _stop(proc)
                raise
            out.seek(0)
            stdout = out.read().decode(errors="replace")
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        wall = time.monotonic() - started
        tail = stderr[-STDERR_TAIL_CHARS:]
        code = proc.returncode
        if timed_out:
            return Measurement("failed", reason=f"timed out after {timeout_s:g} s (--trial-timeout)", stderr_tail=tail,
                               exit_code=code, wall_s=wall)
        data = None
        try:
            if result_file.exists() and result_file.stat().st_size:
                try:
                    data = _result_json(result_file.read_text())
                except json.JSONDecodeError as exc:
                    return Measurement("failed", reason=f"AUTOTUNE_RESULT_JSON is not valid JSON ({exc.msg})",
                                       stderr_tail=tail, exit_code=code, wall_s=wall)
            if data is None:
                data = _last_json_line(stdout)
        except _RepeatedKey as exc:
            return Measurement("failed", reason=f"the result states the key {str(exc)!r} twice, and JSON keeps only "
                               "the last; report each key once", stderr_tail=tail, exit_code=code, wall_s=wall)
        value, peak, oom, problem = _result_from_json(data) if data is not None else (None, None, False, "")
        lowered = (stderr[-20000:] + stdout[-20000:]).lower()
        if oom or (code != 0 and any(marker in lowered for marker in OOM_MARKERS)):
            return Measurement("infeasible", reason="out of memory (marker in the benchmark's output)",
                               stderr_tail=tail, exit_code=code, wall_s=wall)
        if code != 0:
            if code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = f"signal {-code}"
                reason = f"crashed: killed by {name}"
            else:
                reason = f"exit status {code}"
            return Measurement("failed", reason=reason, stderr_tail=tail, exit_code=code, wall_s=wall)
        if data is None:
            return Measurement("failed", reason="no measurement: print one JSON line with tokens_per_s_per_gpu "
                               "or write it to AUTOTUNE_RESULT_JSON", stderr_tail=tail, exit_code=code, wall_s=wall)
        if problem:
            return Measurement("failed", reason=problem, stderr_tail=tail, exit_code=code, wall_s=wall)
        extra = {k: v for k, v in data.items() if k not in ("tokens_per_s_per_gpu", "peak_memory_gib")}
        return Measurement("ok", tokens_per_s_per_gpu=value, peak_memory_gib=peak, stderr_tail=tail, exit_code=code,
                           wall_s=wall, extra=extra or None)


READ_RESULT_KEYS = ("tokens_per_s_per_gpu", "peak_memory_gib")


def unread_result_keys_note(extra: Mapping[str, Any] | None) -> str:
    """A note naming a benchmark result key that is not read but looks like one that is ('peak_memory_gb' for
    peak_memory_gib): kept under ``extra``, such a key had dropped the memory comparison without a word.  Other
    keys (a benchmark's own figures) are the user's and pass silently.  "" when there is nothing to say."""
    import difflib

    said = []
    for key in extra or {}:
        match = difflib.get_close_matches(str(key), READ_RESULT_KEYS, n=1, cutoff=0.75)
        if match:
            said.append(f"{key!r} (did you mean {match[0]!r}?)")
    return ("result key(s) " + ", ".join(said) + " are not read: the benchmark's JSON must use the names autotune "
            "reads") if said else ""


# A measurement beyond these is a benchmark bug (wrong units, all GPUs summed, a counter overflow), not a result:
# its throughput past training.validation's ceiling (a multiple of the GPU's peak), or its peak memory past the GPU's
# memory by more than a small margin (Hardware.plausible_memory_gib: decimal GB counted as GiB).
def implausibility(problem: TrainingProblem, measurement: Measurement, precision: str | None = None) -> str:
    """Why a benchmark's result cannot be real on the study's GPU and model, run in ``precision`` (the plan's;
    ``""`` when it can)."""
    hw, model = problem.cluster.hardware, problem.model
    value, peak_gib = measurement.tokens_per_s_per_gpu, measurement.peak_memory_gib
    ceiling, why = throughput_ceiling(hw, model, problem.workload.seq_len, precision)
    if value is not None and value > ceiling:
        return (f"tokens_per_s_per_gpu <= {ceiling:,.0f} must hold ({why}), but got (tokens_per_s_per_gpu={value:g}); "
                "check the benchmark's units: tokens per second per GPU")
    limit = hw.plausible_memory_gib
    if peak_gib is not None and peak_gib > limit:
        return (f"peak_memory_gib <= {limit:,.1f} must hold (the {hw.name}'s {hw.memory_gib:g} GiB and "
                f"{MEASURED_MEMORY_MARGIN:.0%}: more cannot be resident on one GPU), but got (peak_memory_gib="
                f"{peak_gib:g}); check the benchmark's units: GiB per GPU, the peak of one GPU, not their sum")
    return ""


def prior_plans(problem: TrainingProblem, top: int, margin: float) -> list[dict]:
    """The cost model's ``top`` fastest plans predicted to fit within capacity x (1 + margin)."""
    from .exact import exact_search

    if top <= 0:
        return []
    evaluated = exact_search(problem)
    capacity = problem.cluster.hardware.memory_gib
    scored = []
    for batch, est in evaluated.estimates:
        ok = np.flatnonzero(est.memory_gib_per_gpu <= capacity * (1.0 + margin))
        for i in ok[np.argsort(-est.tokens_per_s_per_gpu[ok], kind="stable")][:top]:
            scored.append((float(est.tokens_per_s_per_gpu[i]), batch.plan(int(i)).as_string(), batch.plan(int(i))))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [p.as_dict() for _, _, p in scored[:top]]


def _plausible(peak_gib: float | None, hardware) -> float | None:
    """A trial's peak memory, or None where it is beyond the GPU (a trial a study recorded before that was checked:
    its throughput is kept, its memory not fitted)."""
    return peak_gib if peak_gib is None or peak_gib <= hardware.plausible_memory_gib else None


def measured_runs(problem: TrainingProblem, records: Sequence[Mapping[str, Any]], study: str):
    """The study's successful measured trials as :class:`~autotune.training.runs.MeasuredRun` rows (for calibration)."""
    from ..training.runs import MeasuredRun

    runs = []
    for r in records:
        attrs = r["user_attrs"]
        if attrs.get("outcome") != "ok" or r["state"] != "COMPLETE":
            continue
        plan = attrs["plan"]
        measured = attrs["measured"]
        known = {k: plan[k] for k in ("tp", "pp", "cp", "ep", "vp", "sp", "zero", "mbs", "recompute", "precision",
                                      "offload")}
        runs.append(MeasuredRun(
            id=f"trial-{r['number']}", source_group=study, model=problem.model, gpu=problem.cluster.hardware.name,
            n_gpus=problem.cluster.n_gpus, gpus_per_node=problem.cluster.gpus_per_node, workload=problem.workload,
            known=known, unknown=(), measured_tokens_per_s_per_gpu=float(measured["tokens_per_s_per_gpu"]),
            measured_memory_gib_per_gpu=_plausible(measured.get("peak_memory_gib"), problem.cluster.hardware),
            framework=problem.framework))
    return runs


def calibrate_from_trials(problem: TrainingProblem, records: Sequence[Mapping[str, Any]], study: str,
                          out: Path, params: Sequence[str] | None = None):
    """Refit the hardware profile's efficiency parameters to the measured trials; write the overlay."""
    from ..training.calibration import DEFAULT_PARAMS, fit

    runs = measured_runs(problem, records, study)
    if len(runs) < 2:
        raise InputError(f"needs at least 2 successful measured trials, but the study has {len(runs)}",
                         field="--calibrate")
    hw = problem.cluster.hardware
    result = fit(runs, lambda name: hw, params=tuple(params or DEFAULT_PARAMS), logo=False)
    result.write(out)
    return result


def trials_to_best(records: Sequence[Mapping[str, Any]]) -> tuple[int | None, str | None]:
    """How many benchmark runs (in trial order) it took to first measure the study's best plan."""
    runs = [r for r in sorted(records, key=lambda r: r["number"])
            if r["user_attrs"].get("slot") and r["user_attrs"].get("outcome") in ("ok", "failed", "infeasible")]
    best = max((r for r in runs if r["user_attrs"].get("outcome") == "ok"),
               key=lambda r: r["values"][0], default=None)
    if best is None:
        return None, None
    for i, r in enumerate(runs, start=1):
        if r["user_attrs"].get("plan_key") == best["user_attrs"]["plan_key"]:
            return i, best["user_attrs"]["plan_key"]
    return None, None
