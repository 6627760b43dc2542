"""Persistent Optuna studies: storages, workers sharing one study, and measured trials.

Part of the Optuna adapter (with ``optuna_search.py``, whose samplers it reuses).  A study
lives in an Optuna storage (SQLite, PostgreSQL or a journal file); its user attributes hold
the problem's fingerprint, so that a worker can rebuild the problem and a re-run can say
exactly what changed.  The study's own trials are the cache: no plan is evaluated twice.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Persistent studies: storage, the problem record, workers and measured trials
#
# A trial's user attributes (what optuna-dashboard shows): ``plan`` (the plan object of the
# JSON contract), ``plan_key`` (its plan string), ``estimate`` (the cost model's full estimate),
# ``outcome`` (evaluated | cached | invalid | skipped | duplicate | surplus for the cost model;
# ok | failed | infeasible for a measured trial), and for measured trials ``measured``,
# ``predicted_tokens_per_s_per_gpu``, ``error_pct``, ``failure_reason``, ``stderr_tail``.
# The study's records are the cache: before evaluating, a trial looks for a live trial with a
# lower number and the same plan (the lowest number owns a plan) and answers from it.
import json as _json
import os as _os
import re as _re
import socket as _socket
import time as _time
import warnings
from dataclasses import dataclass as _dataclass
from dataclasses import field as _field
from dataclasses import replace as _replace
from pathlib import Path as _Path
from shlex import quote as _shlex_quote
from typing import Any as _Any
from typing import Callable, Sequence
from typing import Mapping as _Mapping

import numpy as np
import optuna

from ..errors import InputError
from ..training.plan import PLAN_KEYS, PlanBatch, resolved_fields
from ..training.problem import Objective, TrainingProblem
from ..training.space import REASONS, space_size
from .fingerprint import (
    check_same_problem,
    fingerprint,
    parse_storage_url,
    problem_from_fingerprint,
    sqlite_database,
)
from .optuna_search import _WORST, make_sampler
from .result import Evaluated
from .tune import implausibility

PROBLEM_ATTR = "autotune.problem"
WORKER_ATTR = "autotune.worker"  # system attribute of a trial: the process running it (host, pid, start)
EXACT_ATTR = "autotune.exact"  # study attribute: the exact search recorded in the study (summary)
SETTINGS_ATTR = "autotune.settings"
TARGET_ATTR = "autotune.target_trials"
_STATES = optuna.trial.TrialState
_SETTLE_S = 10.0  # how long to wait for a lower-numbered running trial to record its plan
_OWNER_WAIT_S = 30.0  # how long a cost-model trial waits for the owner of its plan to finish
# A running trial that has not named its process after this long belongs to a process that died
# between creating it and naming itself (a live one names itself in the same breath: see _Claiming).
_UNCLAIMED_S = 10.0


# --- which process runs a trial, and is it alive ----------------------------------------------------------

def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (boot id and start tick, Linux), so that a reused pid is not taken for it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        return f"{boot}:{int(fields[19])}"
    except (OSError, IndexError, ValueError):
        return None


_ME = {"host": _socket.gethostname(), "pid": _os.getpid(), "start": _process_start(_os.getpid())}


def this_process() -> dict:
    """The identity a trial records for the process running it."""
    if _ME["pid"] != _os.getpid():  # forked
        _ME.update(pid=_os.getpid(), start=_process_start(_os.getpid()))
    return dict(_ME)


def _alive(worker: _Mapping[str, _Any]) -> bool | None:
    """Whether the process that recorded ``worker`` still runs: None when it ran on another host (unknowable here)."""
    me = this_process()
    if worker.get("host") != me["host"]:
        return None
    pid = worker.get("pid")
    if not isinstance(pid, int):
        return None
    if pid == me["pid"]:
        return worker.get("start") == me["start"]
    start = _process_start(pid)
    if start is not None or worker.get("start") is not None:
        return start is not None and start == worker.get("start")
    try:
        _os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class _Claiming(optuna.samplers.BaseSampler):
    """A sampler that names this process on each trial as soon as Optuna creates it (``before_trial``), before
    any sampling, so that a process killed mid-trial is known by its trial; everything else is the inner one's."""

    def __init__(self, inner: optuna.samplers.BaseSampler):
        self._inner = inner

    def infer_relative_search_space(self, study, trial):
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, this_process())
        self._inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose process is gone, and queue each one's plan to run again.

    A process on this host that no longer runs (or a trial that never named its process) is dead; a trial of
    another host is left to the heartbeat (``--heartbeat``).  Returns the numbers of the trials failed.
    """
    storage = study._storage
    failed = []
    now = _time.time()
    for t in study.get_trials(deepcopy=False, states=(_STATES.RUNNING,)):
        worker = t.system_attrs.get(WORKER_ATTR)
        if worker is None:
            started = t.datetime_start.timestamp() if t.datetime_start else now
            dead = now - started > _UNCLAIMED_S
        else:
            dead = _alive(worker) is False
        if not dead:
            continue
        try:
            # Killed after recording its outcome but before completing: the outcome no longer holds (the trial
            # is failed and run again), so that it is not counted.
            if t.user_attrs.get("outcome") is not None:
                storage.set_trial_user_attr(t._trial_id, "outcome", None)
            if not storage.set_trial_state_values(t._trial_id, state=_STATES.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process failed it first
        frozen = storage.get_trial(t._trial_id)
        _queue_again(study, frozen)
        failed.append(frozen.number)
    return failed


def _queue_again(study: optuna.Study, frozen) -> None:
    """Queue the plan of failed trial ``frozen`` to run again (a WAITING copy naming the trial it retries)."""
    system_attrs = {"failed_trial": frozen.number, "retry_history": [], **frozen.system_attrs}
    system_attrs["retry_history"] = [*system_attrs["retry_history"], frozen.number]
    system_attrs.pop(WORKER_ATTR, None)
    user_attrs = {k: v for k, v in frozen.user_attrs.items() if k != "outcome"}  # the retry records its own
    study.add_trial(optuna.create_trial(state=_STATES.WAITING, params=frozen.params,
                                        distributions=frozen.distributions, user_attrs=user_attrs,
                                        system_attrs=system_attrs))


def queue_interrupted(study: optuna.Study) -> list[int]:
    """Queue again the trials this process was running when it was interrupted (Ctrl-C, SIGTERM): Optuna fails
    them without an outcome, which does not count, but nothing ran them again -- a study resumed after a
    scheduler's SIGTERM never measured the plan it had been measuring (the cost model's best, when it was the
    first).  Returns their numbers."""
    queued: list[int] = []
    try:
        me = this_process()
        trials = study.get_trials(deepcopy=False)
        retried = {n for t in trials for n in (t.system_attrs.get("retry_history") or [])}
        for t in trials:
            # a benchmark that failed is a result (outcome "failed"); any other failed trial of this process was
            # stopped, perhaps after recording its outcome but before completing (not counted: _counted)
            if (t.state == _STATES.FAIL and t.system_attrs.get(WORKER_ATTR) == me
                    and t.user_attrs.get("outcome") != "failed" and t.number not in retried):
                _queue_again(study, t)
                queued.append(t.number)
    except Exception:  # noqa: BLE001 - the storage failing here must not hide the interrupt being handled
        pass
    return queued


class _TrialFailed(Exception):
    """A measured trial failed; its reason and stderr tail are already on the trial."""


class _Surplus(Exception):
    """The study already has its target number of trials."""


def redact(url: str) -> str:
    return _re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


_SQLITE_MAGIC = b"SQLite format 3\x00"


# Optuna's RDB schema (optuna/storages/_rdb/models.py, and alembic's own): an SQLite file holding tables, none of
# them these, belongs to something else, which opening it as a storage would add Optuna's tables to.
_OPTUNA_TABLES = frozenset({
    "studies", "study_directions", "study_user_attributes", "study_system_attributes", "trials", "trial_params",
    "trial_values", "trial_intermediate_values", "trial_user_attributes", "trial_system_attributes",
    "trial_heartbeats", "version_info", "alembic_version"})
_JOURNAL_SETTLE_S = 2.0  # how long a journal's partial last line may be another process's write in progress


def _sqlite_tables(path: _Path) -> set[str] | None:
    """The tables of an SQLite file, read without writing to it (None: it cannot be read now, e.g. locked)."""
    import sqlite3

    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            connection.close()
    except sqlite3.Error:
        return None


def _journal_lines(path: _Path) -> int:
    """The lines of a journal file (a partial last one counted), read in blocks."""
    lines, last = 0, b"\n"
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def _last_line(path: _Path) -> bytes:
    """The last line of a file, with its newline if it has one (read backwards, in blocks)."""
    with open(path, "rb") as handle:
        end = handle.seek(0, _os.SEEK_END)
        tail, position = b"", end
        while position > 0:
            step = min(1 << 16, position)
            position -= step
            handle.seek(position)
            tail = handle.read(step) + tail
            cut = tail.rfind(b"\n", 0, len(tail) - 1)
            if cut >= 0:
                return tail[cut + 1:]
        return tail


def _drop_last_line(path: _Path, lines: int) -> str:
    """A shell line that keeps a copy of a journal and drops its last line in place (the workers' --storage stays)."""
    quoted, backup = _shlex_quote(str(path)), _shlex_quote(f"{path}.bak")
    return f"cp {quoted} {backup} && head -n {lines - 1} {backup} > {quoted}"


def _journal_tail_problem(path: _Path) -> str | None:
    """What is wrong with a journal's last line, or None: a partial line (a write cut short; a line another process
    is writing is waited for, at most _JOURNAL_SETTLE_S), or a line that is not one JSON record (a partial line
    that a later record was joined to).  Optuna reads past either, and the next record it appends spoils the file."""
    deadline = _time.monotonic() + _JOURNAL_SETTLE_S
    while True:
        line = _last_line(path)
        if line.endswith(b"\n") or _time.monotonic() >= deadline:
            break
        _time.sleep(0.1)
    if not line.endswith(b"\n"):
        number = _journal_lines(path)
        return (f"ends in a partial line (line {number}: a write cut short, e.g. a process killed mid-write or a "
                f"full disk), which the next record would be joined to; with no worker running, drop that last line "
                f"({_drop_last_line(path, number)}) and run again")
    try:
        _json.loads(line)
    except ValueError:
        number = _journal_lines(path)
        return (f"line {number}, the last, is not one whole JSON record (a write cut short, then another joined to "
                f"it); with no worker running, drop that line ({_drop_last_line(path, number)}; the trial record on "
                "it is lost) and run again")
    return None


def _journal_damage(path: _Path) -> str | None:
    """Where a journal file stops being JSON lines (the first line that is not one JSON record), or None."""
    try:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    _json.loads(line)
                except ValueError:
                    return (f"{str(path)!r}: line {number} is not one whole JSON record (a write cut short, then "
                            "another joined to it); delete that line (the trial records on it are lost) or restore "
                            "the file from a copy")
    except OSError:
        return None
    return None


def check_storage_file(url: str, *, existing: bool = False, reading: bool = False) -> None:
    """The file behind an SQLite or journal URL, before Optuna opens it (opening writes to it): a named pipe or
    device is refused (reading it would wait or never end), as is a file of something else (it would be turned
    into a database or appended to), an SQLite database of something else (Optuna would add its tables to it),
    a journal whose last line was cut short (the next record would be joined to it) and an SQLite database in
    memory (no other process sees it, and it is gone when this one exits); with ``existing`` (a worker or a
    report, which join a study), a file that is not there (opening it would create an empty one).  ``reading``
    (a report, which writes nothing) takes a journal whose last line is cut short: Optuna reads up to it."""
    kind, target = parse_storage_url(url)
    if kind == "sqlite":
        database = sqlite_database(url)
        if database is None:
            raise InputError("an SQLite database in memory cannot hold a study (no other worker sees it, and it is "
                             "gone when this process exits, so a re-run cannot continue it), but got "
                             f"({redact(url)!r}); name a file, e.g. sqlite:///study.db", field="--storage")
        target = database
    elif kind != "journal":
        return
    path = _Path(target)
    hint = "sqlite:///relative.db or sqlite:////absolute/path.db" if kind == "sqlite" else "journal:./study.log"
    join = f"give the --storage URL that `autotune search` or `autotune tune` wrote the study to ({hint})"
    try:
        if path.is_dir():
            raise InputError(f"{target!r} is a folder; name a file in it ({hint})", field="--storage")
        folder = path.parent
        if not path.exists() and not folder.is_dir():
            raise InputError(f"the folder {str(folder)!r} of {target!r} does not exist; create it (mkdir -p "
                             f"{_shlex_quote(str(folder))}) or name a file in a folder that exists", field="--storage")
        if path.exists() and not path.is_file():
            raise InputError(f"{target!r} is not a regular file (a pipe, socket or device), so it cannot hold a "
                             f"study; name a file ({hint})", field="--storage")
        head = None
        if path.is_file():
            with open(path, "rb") as handle:  # its first bytes only: a study database may be large
                head = handle.read(len(_SQLITE_MAGIC))
        tail = _journal_tail_problem(path) if kind == "journal" and head and not reading else None
    except OSError as exc:  # a name too long, a folder not readable
        raise InputError(f"cannot use {target!r} as a study storage ({exc.strerror or exc}); {hint}",
                         field="--storage") from None
    if head is None or not head:
        if existing:
            what = f"no such file {target!r} (from {redact(url)!r})" if head is None else \
                f"{target!r} is empty, so it holds no study"
            raise InputError(f"{what}; {join}", field="--storage")
        return
    ours = (head == _SQLITE_MAGIC) if kind == "sqlite" else (head.lstrip()[:1] == b"{")
    if not ours:
        what = "an SQLite database" if kind == "sqlite" else "an Optuna journal (JSON lines)"
        raise InputError(f"{target!r} is not {what}, and opening it would change it; choose another file ({hint})",
                         field="--storage")
    if kind == "sqlite":
        tables = _sqlite_tables(path)
        # Optuna's: its version tables (a newer release may add tables), or only its tables (another worker is
        # creating them); a database with a "trials" table of its own is not
        if tables and not tables & {"version_info", "alembic_version"} and not tables <= _OPTUNA_TABLES:
            shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
            raise InputError(f"{target!r} is an SQLite database of something else (tables {shown}), not an Optuna "
                             "study database, and opening it would add Optuna's tables to it; name a new file, e.g. "
                             "sqlite:///study.db", field="--storage")
    elif tail is not None:
        raise InputError(f"{target!r} {tail}", field="--storage")


# The pip package of each database driver SQLAlchemy may import for a storage URL (by the module it imports).
_DRIVER_PACKAGES = {
    # SQLAlchemy 2.1 opens a plain postgresql:// URL with psycopg 3, postgresql+psycopg2:// with psycopg2; the
    # autotune[postgres] extra installs both
    "psycopg2": "psycopg2-binary (or pip install 'autotune[postgres]')",
    "psycopg": "'psycopg[binary]' (or pip install 'autotune[postgres]')",
    "pg8000": "pg8000", "asyncpg": "asyncpg", "MySQLdb": "mysqlclient", "pymysql": "PyMySQL",
    "mysql": "mysql-connector-python", "mariadb": "mariadb", "cymysql": "cymysql",
}


def _missing_driver(url: str, exc: ImportError) -> str:
    """What to say when the database driver of ``url`` is not installed: the URL, the module and its package."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ModuleNotFoundError):
        cause = cause.__cause__ or cause.__context__
    module = (getattr(cause, "name", None) or "").split(".")[0]
    if not module:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"cannot open {redact(url)}: its database driver cannot be imported ({first}); install the driver "
                "the URL names")
    package = _DRIVER_PACKAGES.get(module, module)
    return (f"{redact(url)} needs the database driver {module!r}, which is not installed; install it with pip "
            f"install {package}, or use a storage that needs none (sqlite:///study.db or journal:./study.log)")


def make_storage(url: str, *, heartbeat_s: int | None = None, retries: int = 1, existing: bool = False,
                 reading: bool = False):
    """An Optuna storage for ``url``; with ``heartbeat_s`` (RDB only), stale trials are failed and retried; with
    ``existing``, the SQLite or journal file must already hold studies; ``reading``: it is only read
    (:func:`check_storage_file`)."""
    kind, target = parse_storage_url(url)
    check_storage_file(url, existing=existing, reading=reading)
    try:
        if kind == "journal":
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(target))
        engine_kwargs: dict = {"connect_args": {"timeout": 60}} if kind == "sqlite" else {"pool_pre_ping": True}
        beat: dict = {}
        if heartbeat_s:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                beat = {"heartbeat_interval": int(heartbeat_s), "grace_period": 2 * int(heartbeat_s) + 1,
                        "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retries)}
        for attempt in range(5):  # processes starting together race to create the tables
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **beat)
            except Exception as exc:
                racing = ("already exists", "locked", "UNIQUE constraint", "duplicate key")
                if attempt == 4 or not any(text in str(exc) for text in racing):
                    raise
                _time.sleep(0.2 * (attempt + 1))
    except ImportError as exc:  # Optuna wraps the driver's ModuleNotFoundError in its own ImportError
        raise InputError(_missing_driver(url, exc), field="--storage") from None
    except InputError:
        raise
    except Exception as exc:  # sqlalchemy / OS errors: unreachable server, bad path, bad credentials
        damage = _journal_damage(_Path(target)) if kind == "journal" and isinstance(exc, ValueError) else None
        if damage:
            raise InputError(damage, field="--storage") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot open {redact(url)}: {first}; check the URL, the server and that the folder exists",
                         field="--storage") from None


def _heartbeat_on(storage) -> bool:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    return bool(is_heartbeat_enabled(storage))


def _margin_flag(margin: _Any) -> str:
    return "--no-prior" if margin is None else f"--margin {margin:g}"


def _continued_settings(study: optuna.Study, name: str, given: _Mapping[str, _Any]) -> tuple[dict, list[str]]:
    """The settings a continued study keeps (stored for its workers), and what to say about those given that differ
    from the stored ones.  As with Optuna's ``load_if_exists``, what only steers the coming trials may change on a
    re-run (the sampler, a benchmark's timeout), said in a note; what decided the trials already recorded may not:
    ``--margin`` (or ``--no-prior``) chose which plans were skipped unmeasured, so a study measured under one margin
    and continued under another would hold trials of two rules, and it is refused naming both.  The cost model's
    prior was queued when the study began: a changed ``--prior-top`` queues nothing, and the note says so."""
    stored = dict(study.user_attrs.get(SETTINGS_ATTR) or {})
    kept, notes = dict(given), []
    if given.get("mode") == "tune" and "margin" in stored and stored["margin"] != given.get("margin"):
        raise InputError(f"must be the study's to continue it, but got ({_margin_flag(given.get('margin'))}; study "
                         f"{name!r}: {_margin_flag(stored['margin'])}): its recorded trials were skipped or measured "
                         f"by that margin; give {_margin_flag(stored['margin'])} to continue it, --new to start it "
                         "over, or another --study", field="--margin")
    if stored.get("sampler") not in (None, given.get("sampler")) and given.get("sampler") != "exact":
        before = "searched exactly" if stored["sampler"] == "exact" else f"sampled with {stored['sampler']}"
        notes.append(f"study {name!r} was {before}: this run, and workers that join from now on, sample with "
                     f"{given.get('sampler')}")
    if "trial_timeout" in stored and stored["trial_timeout"] != given.get("trial_timeout"):
        def shown(value):
            return "none" if value is None else f"{value:g} s"
        notes.append(f"--trial-timeout: {shown(given.get('trial_timeout'))} from now on, for this run and workers "
                     f"that join (study {name!r} had {shown(stored['trial_timeout'])})")
    if ("prior_top" in stored and stored["prior_top"] != given.get("prior_top")
            and study.user_attrs.get("autotune.prior_enqueued") is not None):
        notes.append(f"--prior-top {given.get('prior_top')} changes nothing: study {name!r} queued its prior "
                     f"({stored['prior_top']} plans) when it began")
        kept["prior_top"] = stored["prior_top"]
    return kept, notes


def open_study(storage, name: str, problem: TrainingProblem, objectives: Sequence[Objective], *, new: bool,
               target: int, settings: _Mapping[str, _Any], url: str | None = None) -> tuple[optuna.Study, str]:
    """Create the study, or continue it after checking that it was made for the same problem and settings.

    On a re-run, ``target`` (``--trials``) is what this run continues up to; the study's stored target (what its
    workers run up to) is never lowered by it.  A study that already holds ``target`` finished trials has nothing
    to run, and the note says so (``url``, the storage's URL, names where)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    fp = fingerprint(problem, objectives)
    note = ""
    if name in optuna.study.get_all_study_names(storage):
        if new:
            old = optuna.load_study(study_name=name, storage=storage)
            note = f"replaced study {name!r} ({len(old.trials)} trials) with a new one"
            optuna.delete_study(study_name=name, storage=storage)
        else:
            study = optuna.load_study(study_name=name, storage=storage)
            check_stored_records(study.user_attrs, name)
            check_same_problem(study.user_attrs.get(PROBLEM_ATTR), fp, study=name)
            mode = (study.user_attrs.get(SETTINGS_ATTR) or {}).get("mode")
            if mode and mode != settings.get("mode"):
                raise InputError(f"study {name!r} holds {mode} trials; use `autotune {mode}` to continue it, "
                                 "or choose another --study name", field="--study")
            kept, notes = _continued_settings(study, name, settings)
            stored_target = study.user_attrs.get(TARGET_ATTR)
            stored_target = stored_target if isinstance(stored_target, int) and not isinstance(stored_target, bool) \
                else 0
            study.set_user_attr(TARGET_ATTR, max(int(target), stored_target))
            study.set_user_attr(SETTINGS_ATTR, kept)
            held = count_finished(study, settings.get("mode") == "tune")
            where = f" in {redact(url)}" if url else ""
            if held >= target:
                said = (f"the study {name!r}{where} already holds {held} trials (--trials {target}): nothing to run; "
                        "raise --trials to run more")
            else:
                said = f"continuing study {name!r}: {held} trials so far, up to {target} in total"
            if stored_target > target:
                said += f" (the study's target for its workers stays {stored_target})"
            return study, "\n".join([said, *notes])
    study = optuna.create_study(storage=storage, study_name=name, directions=[o.direction for o in objectives],
                                load_if_exists=True)
    if PROBLEM_ATTR in study.user_attrs:  # another process created it a moment ago
        check_same_problem(study.user_attrs[PROBLEM_ATTR], fp, study=name)
    else:
        study.set_user_attr(PROBLEM_ATTR, fp)
    study.set_user_attr(TARGET_ATTR, int(target))
    study.set_user_attr(SETTINGS_ATTR, dict(settings))
    return study, note or f"new study {name!r}, {target} trials"


def check_stored_records(attrs: _Mapping[str, _Any], name: str) -> None:
    """A study's settings (a mapping) and target (a whole number of trials, 1 to 1,000,000) as autotune stores them:
    a hand edit to null or text had ended worker, report and a re-run search in a traceback."""
    if SETTINGS_ATTR in attrs and not isinstance(attrs[SETTINGS_ATTR], _Mapping):
        raise InputError(f"study {name!r}: its stored settings cannot be read (a mapping was expected, but got "
                         f"{attrs[SETTINGS_ATTR]!r}); start a new study", field="--study")
    target = attrs.get(TARGET_ATTR, 1)
    if isinstance(target, bool) or not isinstance(target, int) or not 1 <= target <= 1_000_000:
        raise InputError(f"study {name!r}: its stored target cannot be read (a whole number of trials from 1 to "
                         f"1,000,000 was expected, but got {target!r}); start a new study", field="--study")


def load_for_worker(storage, name: str, wait_s: float = 0.0):
    """``(study, problem, objectives, settings, target)`` from the study's own records."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    deadline = _time.monotonic() + max(wait_s, 0.0)
    while True:
        if name in optuna.study.get_all_study_names(storage):
            study = optuna.load_study(study_name=name, storage=storage)
            attrs = study.user_attrs
            if PROBLEM_ATTR in attrs and SETTINGS_ATTR in attrs and TARGET_ATTR in attrs:
                check_stored_records(attrs, name)
                problem, objectives = problem_from_fingerprint(attrs[PROBLEM_ATTR], study=name)
                return study, problem, objectives, dict(attrs[SETTINGS_ATTR]), int(attrs[TARGET_ATTR])
        if _time.monotonic() >= deadline:
            raise InputError(f"no autotune study {name!r} in that storage; create it with `autotune search` or "
                             "`autotune tune` with the same --storage and --study (or wait for it with --wait)",
                             field="--study")
        _time.sleep(0.5)


def _plan_key(fields: _Mapping[str, _Any]) -> str:
    fields = resolved_fields(fields)  # etp "tp" as its number, so one plan has one key
    return ",".join(f"{k}={str(fields[k]).lower() if isinstance(fields[k], bool) else fields[k]}" for k in PLAN_KEYS)


def _jsonable(value):
    return _json.loads(_json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def _counted(trials, measured: bool, upto: int | None = None) -> int:
    n = 0
    for t in trials:
        if upto is not None and t.number > upto:
            continue
        attrs = t.user_attrs
        outcome = attrs.get("outcome")
        if outcome == "surplus" or t.state == _STATES.WAITING:
            continue
        if measured and not attrs.get("slot"):
            continue
        if t.state == _STATES.FAIL and outcome != "failed":
            continue  # killed (stale) or interrupted, perhaps after recording its result: retried, not counted
        if measured and t.state == _STATES.RUNNING and not attrs.get("slot"):
            continue
        n += 1
    return n


def count_trials(study: optuna.Study, measured: bool) -> int:
    return _counted(study.get_trials(deepcopy=False), measured)


def count_finished(study: optuna.Study, measured: bool) -> int:
    """Trials that count and are finished (not running): what ``--trials N`` asks for."""
    return _counted([t for t in study.get_trials(deepcopy=False) if t.state != _STATES.RUNNING], measured)


@_dataclass
class StudyRun:
    """What one process did in a study."""

    study: optuna.Study
    done: int = 0  # trials this process finished
    wasted: int = 0  # trials that did not count (duplicates, skipped plans)
    notes: list = _field(default_factory=list)


def run_study(
    study: optuna.Study,
    problem: TrainingProblem,
    objectives: Sequence[Objective],
    *,
    sampler_name: str,
    seed: int | None,
    target: int,
    measure: Callable | None = None,
    margin: float | None = None,
    report: Callable[[dict], None] | None = None,
) -> StudyRun:
    """Take part in ``study`` until it holds ``target`` counted trials.

    Without ``measure`` every trial is a cost-model evaluation (``autotune search``); with it,
    a trial runs the user's benchmark (``measure(plan, estimate, number) -> measurement``) and
    only trials that ran it count toward ``target``.  ``margin``: plans predicted to need more
    than capacity x (1 + margin) are skipped without running.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    measured = measure is not None
    choices = problem.choices
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    fixed = {k: choices[k][0] for k in PLAN_KEYS if len(choices[k]) == 1}
    storage = study._storage
    existing = len(study.get_trials(deepcopy=False))
    # A fresh seed per resumption, so that a resumed sampler does not replay the first proposals.
    run_seed = None if seed is None else seed + existing
    study = optuna.load_study(study_name=study.study_name, storage=storage,
                              sampler=_Claiming(make_sampler(sampler_name, run_seed, len(objectives))))
    state = StudyRun(study=study)
    capacity = problem.cluster.hardware.memory_gib
    beat = _heartbeat_on(storage)

    def fields_of(params: _Mapping[str, _Any]) -> dict | None:
        fields = dict(fixed)
        for key in varying:
            if key not in params:
                return None
            fields[key] = params[key]
        if derive_sp:
            fields["sp"] = fields["tp"] > 1
        return fields

    def key_of(t) -> str | None:
        if "plan_key" in t.user_attrs:
            return t.user_attrs["plan_key"]
        params = t.params or t.system_attrs.get("fixed_params") or {}
        fields = fields_of(params)
        return _plan_key(fields) if fields else None

    def owner_of(number: int, key: str):
        """The lowest-numbered live trial before ``number`` with plan ``key`` (None: this trial owns it)."""
        deadline = _time.monotonic() + _SETTLE_S
        while True:
            owner, unsettled = None, False
            for t in study.get_trials(deepcopy=False):
                if t.number >= number:
                    continue
                live = t.state in (_STATES.RUNNING, _STATES.COMPLETE)
                if measured:
                    live = live or t.state == _STATES.WAITING or (
                        t.state == _STATES.FAIL and t.user_attrs.get("outcome") == "failed")
                if not live or t.user_attrs.get("outcome") in ("surplus", "duplicate"):
                    continue
                if t.state == _STATES.RUNNING and "plan_key" not in t.user_attrs:
                    started = t.datetime_start.timestamp() if t.datetime_start else 0.0
                    unsettled = unsettled or _time.time() - started < _SETTLE_S
                    continue
                if key_of(t) == key and (owner is None or t.number < owner.number):
                    owner = t
            if owner is not None or not unsettled or _time.monotonic() > deadline:
                return owner
            _time.sleep(0.05)

    def finish(trial, outcome: str, values, constraints, attrs: _Mapping[str, _Any] | None = None):
        for name, value in (attrs or {}).items():
            trial.set_user_attr(name, _jsonable(value))
        trial.set_constraint("invalid", constraints[0])
        trial.set_constraint("memory_overshoot_gib", constraints[1])
        trial.set_user_attr("outcome", outcome)
        return values if len(values) > 1 else values[0]

    def take_slot(trial) -> bool:
        if measured:
            trial.set_user_attr("slot", True)
        trials = study.get_trials(deepcopy=False)
        # Cost model: every running trial will count, so rank by number (exact, race-free).
        # Measured: a slot is taken just before running, so count them all.
        if _counted(trials, measured, upto=None if measured else trial.number) > target:
            trial.set_user_attr("outcome", "surplus")
            return False
        return True

    copy_keys = ("estimate", "rejected", "measured", "predicted_tokens_per_s_per_gpu", "error_pct",
                 "failure_reason", "stderr_tail")

    def objective(trial: optuna.Trial):
        if not measured and not take_slot(trial):
            raise _Surplus()
        fields = dict(fixed)
        for key in varying:
            fields[key] = trial.suggest_categorical(key, list(choices[key]))
        if derive_sp:
            fields["sp"] = fields["tp"] > 1
        key = _plan_key(fields)
        batch = PlanBatch.from_columns(problem.cluster.n_gpus, {k: [fields[k]] for k in PLAN_KEYS})
        reason = int(problem.reasons(batch)[0])
        plan = {**resolved_fields({k: fields[k] for k in PLAN_KEYS}),
                "dp": problem.cluster.n_gpus // (fields["tp"] * fields["pp"] * fields["cp"])}
        trial.set_user_attr("plan", _jsonable(plan))
        trial.set_user_attr("plan_key", key)  # from here on, other trials can see this plan
        worst = [_WORST[o.direction] for o in objectives]
        if reason:
            return finish(trial, "invalid", worst, (1.0, 0.0), {"rejected": REASONS[reason]})
        owner = owner_of(trial.number, key)
        if owner is not None and not measured and owner.state == _STATES.RUNNING:
            deadline = _time.monotonic() + _OWNER_WAIT_S
            while owner.state == _STATES.RUNNING and _time.monotonic() < deadline:
                _time.sleep(0.05)
                owner = storage.get_trial(owner._trial_id)
            if owner.state != _STATES.COMPLETE:
                owner = None
        if owner is not None:
            if owner.state == _STATES.COMPLETE or (measured and owner.state == _STATES.FAIL):
                attrs = {k: owner.user_attrs[k] for k in copy_keys if k in owner.user_attrs}
                attrs["cached_from"] = owner.number
                constraints = (owner.system_attrs.get("constraints:invalid", 0.0),
                               owner.system_attrs.get("constraints:memory_overshoot_gib", 0.0))
                if owner.state == _STATES.FAIL:
                    for k, v in attrs.items():
                        trial.set_user_attr(k, _jsonable(v))
                    trial.set_user_attr("outcome", "cached")
                    raise _TrialFailed(f"same plan as failed trial {owner.number}")
                return finish(trial, "cached", list(owner.values), constraints, attrs)
            # measured: the plan is running (or queued) elsewhere
            trial.set_user_attr("duplicate_of", owner.number)
            trial.set_user_attr("outcome", "duplicate")
            raise _TrialFailed(f"plan already taken by trial {owner.number}")
        est = problem.evaluate(batch)
        row = _jsonable(est.row(0))
        overshoot = float(est.memory_gib_per_gpu[0] - est.memory_capacity_gib * (1.0 - problem.memory_headroom))
        if not measured:
            values = [float(o.value(est, problem)[0]) for o in objectives]
            return finish(trial, "evaluated", values, (0.0, overshoot), {"estimate": row})
        predicted = float(est.tokens_per_s_per_gpu[0])
        if margin is not None and float(est.memory_gib_per_gpu[0]) > capacity * (1.0 + margin):
            return finish(trial, "skipped", [0.0], (0.0, overshoot), {
                "estimate": row, "skipped": f"predicted {float(est.memory_gib_per_gpu[0]):.1f} GiB per GPU > "
                                            f"{capacity:g} GiB x (1 + margin {margin:g})"})
        if not take_slot(trial):
            raise _Surplus()
        result = measure(plan, row, trial.number)
        why = implausibility(problem, result, plan.get("precision")) if result.status == "ok" else ""
        if why:  # a benchmark bug, not a result: the trial failed (and the study goes on)
            result = _replace(result, status="failed", reason=f"implausible result: {why}")
        attrs: dict = {"estimate": row, "predicted_tokens_per_s_per_gpu": predicted, "wall_s": result.wall_s,
                       "measured": result.as_dict()}
        if result.status == "ok":
            attrs["error_pct"] = (predicted / result.tokens_per_s_per_gpu - 1.0) * 100.0
            peak = result.peak_memory_gib
            return finish(trial, "ok", [result.tokens_per_s_per_gpu],
                          (0.0, (peak - capacity) if peak is not None else min(overshoot, 0.0)), attrs)
        attrs["failure_reason"] = result.reason
        attrs["stderr_tail"] = result.stderr_tail
        if result.status == "infeasible":
            return finish(trial, "infeasible", [0.0], (0.0, max(overshoot, 1.0)), attrs)
        for k, v in attrs.items():
            trial.set_user_attr(k, _jsonable(v))
        trial.set_user_attr("outcome", "failed")
        raise _TrialFailed(result.reason)

    wasted_cap = 5 * target + 50

    def callback(study_: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        outcome = frozen.user_attrs.get("outcome")
        counts = outcome not in ("surplus", "duplicate") and (not measured or outcome in ("ok", "failed", "infeasible"))
        if counts:
            state.done += 1
        else:
            state.wasted += 1
        if report:
            report({"number": frozen.number, "state": frozen.state.name, "outcome": outcome,
                    "plan": frozen.user_attrs.get("plan_key"), "values": frozen.values,
                    "reason": frozen.user_attrs.get("failure_reason") or frozen.user_attrs.get("skipped")
                    or frozen.user_attrs.get("rejected")})
        if count_trials(study_, measured) >= target:
            study_.stop()
        elif state.wasted > wasted_cap:
            state.notes.append(f"stopped after {state.wasted} trials that ran nothing new: the sampler keeps "
                               "proposing plans already tried (is the space exhausted?)")
            study_.stop()

    def reap(settle: bool = False) -> int:
        """Fail the trials of dead processes (heartbeat-stale ones, and this host's gone ones) and queue retries.
        ``settle``: first wait (at most _UNCLAIMED_S) for running trials that have not named their process."""
        if settle:
            deadline = _time.monotonic() + _UNCLAIMED_S + 1.0
            while _time.monotonic() < deadline and any(
                    WORKER_ATTR not in t.system_attrs for t in study.get_trials(deepcopy=False, states=(_STATES.RUNNING,))):
                _time.sleep(0.2)
        if beat:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                optuna.storages.fail_stale_trials(study)
        dead = fail_dead_trials(study)
        if dead:
            state.notes.append(f"trial(s) {', '.join(map(str, dead))} of a process that is gone: failed and queued "
                               "to run again")
        return len(dead)

    # --trials N means N finished trials: a trial left RUNNING by a killed process is failed and run again,
    # here at the start and again at the end (another process on this host may have died meanwhile).
    reap()
    try:
        for _ in range(1000):
            if count_trials(study, measured) < target:
                study.optimize(objective, n_trials=None, callbacks=[callback], catch=(_TrialFailed, _Surplus))
            if count_finished(study, measured) >= target or state.wasted > wasted_cap:
                break
            # Counted trials still run: another live process's (it finishes them), or a dead one's (run them again).
            if not reap(settle=True):
                break
    except KeyboardInterrupt:
        queue_interrupted(study)  # the trial it was running runs again when the study is resumed
        raise
    return state


def enqueue_plans(study: optuna.Study, problem: TrainingProblem, plans: Sequence[_Mapping[str, _Any]]) -> int:
    """Queue plans (the cost model's best) to be tried first, once per study."""
    if study.user_attrs.get("autotune.prior_enqueued"):
        return 0
    choices = problem.choices
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    for plan in plans:
        study.enqueue_trial({k: plan[k] for k in varying}, skip_if_exists=True)
    study.set_user_attr("autotune.prior_enqueued", len(plans))
    return len(plans)


def trial_records(study: optuna.Study) -> list[dict]:
    """Every trial as plain data: number, state, values, user attributes, and retry history."""
    out = []
    for t in study.get_trials(deepcopy=False):
        out.append({"number": t.number, "state": t.state.name, "values": t.values, "user_attrs": dict(t.user_attrs),
                    "retry_of": t.system_attrs.get("failed_trial"),
                    "duration_s": t.duration.total_seconds() if t.duration else None})
    return out


def load_records(url: str, name: str) -> list[dict]:
    """The trial records of study ``name`` in ``url`` (for reports and tests)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = make_storage(url, existing=True, reading=True)
    if name not in optuna.study.get_all_study_names(storage):
        raise InputError(f"no study {name!r} in {redact(url)}", field="--study")
    return trial_records(optuna.load_study(study_name=name, storage=storage))


def evaluated_from_study(study: optuna.Study, problem: TrainingProblem) -> Evaluated:
    """Every distinct plan the study's trials evaluated, re-estimated in one batch (for ranking)."""
    seen: dict[str, dict] = {}
    rejected: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False, states=(_STATES.COMPLETE,)):
        key, plan = t.user_attrs.get("plan_key"), t.user_attrs.get("plan")
        if not key or key in seen or not plan:
            continue
        seen[key] = plan
        if t.user_attrs.get("rejected"):
            reason = t.user_attrs["rejected"]
            rejected[reason] = rejected.get(reason, 0) + 1
    batch_plans = []
    for plan in seen.values():
        columns = {k: [plan[k]] for k in PLAN_KEYS}
        batch = PlanBatch.from_columns(problem.cluster.n_gpus, columns)
        if not int(problem.reasons(batch)[0]):
            batch_plans.append(plan)
    estimates = []
    if batch_plans:
        batch = PlanBatch.from_columns(
            problem.cluster.n_gpus, {k: np.array([p[k] for p in batch_plans], dtype=object) for k in PLAN_KEYS})
        estimates.append((batch, problem.evaluate(batch)))
    return Evaluated(estimates=estimates, space_size=space_size(problem.choices), rejected=rejected,
                     evaluations=len(seen))


# --- an exact search kept in a study -----------------------------------------------------------------------


def stored_sampler(storage, name: str) -> str | None:
    """The sampler an existing autotune study was searched with, or None (no such study, or no trials yet)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if name not in optuna.study.get_all_study_names(storage):
        return None
    study = optuna.load_study(study_name=name, storage=storage)
    if not study.get_trials(deepcopy=False):
        return None
    settings = study.user_attrs.get(SETTINGS_ATTR) or {}
    return settings.get("sampler") if isinstance(settings, dict) else None


def record_exact(study: optuna.Study, problem: TrainingProblem, objectives: Sequence[Objective], ranked: Sequence,
                 summary: _Mapping[str, _Any]) -> int:
    """Keep an exact search in ``study``: its ranked plans as completed trials (what ``report --storage`` ranks
    and a dashboard shows) and its counts as the study attribute ``autotune.exact``.  Plans the study already
    holds are not added again; returns how many trials were added."""
    from optuna.distributions import CategoricalDistribution

    choices = problem.choices
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    distributions = {k: CategoricalDistribution(list(choices[k])) for k in varying}
    held = {t.user_attrs.get("plan_key") for t in study.get_trials(deepcopy=False)}
    capacity = problem.cluster.hardware.memory_gib
    new = []
    for r in ranked:
        plan = r.plan.as_dict()
        key = _plan_key(plan)
        if key in held:
            continue
        values = [float(r.objective_values[o.name]) for o in objectives]
        overshoot = float(r.estimate["memory_gib_per_gpu"]) - capacity
        new.append(optuna.trial.create_trial(
            params={k: plan[k] for k in varying}, distributions=distributions,
            values=values, user_attrs={"plan": _jsonable(plan), "plan_key": key, "estimate": _jsonable(r.estimate),
                                       "outcome": "evaluated", "exact_rank": r.rank},
            system_attrs={"constraints:invalid": 0.0, "constraints:memory_overshoot_gib": min(overshoot, 0.0)}))
    if new:
        study.add_trials(new)
    study.set_user_attr(EXACT_ATTR, _jsonable(dict(summary)))
    return len(new)
