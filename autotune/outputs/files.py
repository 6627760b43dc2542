"""Reading and writing the files a person keeps: plans.json / plans.csv and launch configs.

Nothing a user already has is overwritten without ``force``; a destination is checked before
any long work starts (:func:`check_out_dir`) and created only when there is something to write.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InputError
from ..inputs.loading import check_regular_file, load_json, strict_json

EXECUTABLE_SUFFIXES = (".sh", ".sbatch")
PLANS_JSON = "plans.json"


# Suffixes of the files autotune writes or reads: a new --out folder so named is a file name given by mistake.
FILE_SUFFIXES = frozenset({".html", ".htm", ".json", ".csv", ".yaml", ".yml", ".sh", ".sbatch", ".png", ".txt", ".md"})


def check_out_dir(path: Path, force: bool, *, must_be_empty: bool = True) -> None:
    """Refuse a destination that cannot take the files: a file, a non-empty folder (without ``force``, when
    ``must_be_empty``), or a place that cannot be created or written.  Leaves nothing behind."""
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder; choose another --out", source=str(path))
    if path.is_dir():
        if must_be_empty and any(path.iterdir()) and not force:
            raise InputError("folder is not empty; choose another --out, or pass --force to overwrite its files",
                             source=str(path))
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError("folder is not writable; choose another --out", source=str(path))
        _probe(path, path, "--out")
        return
    if path.suffix.lower() in FILE_SUFFIXES or path.name.lower() in FILE_SUFFIXES:  # "report.html", ".json"
        # --out names a folder of several files: "--out report.html" would make a folder called report.html
        raise InputError(f"is a file name ({path.suffix}), but --out names the folder the files are written to; "
                         f"give a folder, e.g. --out {path.with_suffix('')}", source=str(path))
    _check_creatable(path, "--out")


def _check_creatable(path: Path, flag: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable folder (parents are created)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():  # a dangling link cannot be created through
            break
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot be created: {parent} is not a folder; choose another {flag}", source=str(path))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot be created: {parent} is not writable; choose another {flag}", source=str(path))
    _probe(parent, path, flag)


def _probe(folder: Path, path: Path, flag: str) -> None:
    """Create and remove an empty folder in ``folder``: what os.access cannot tell (root passes it on /proc, a
    kernel or FUSE file system may refuse anyway) is found before the work, not after it."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".autotune-probe-", dir=folder))
    except OSError as error:
        raise InputError(f"cannot be written: {folder} refuses new entries ({error.strerror or error}); "
                         f"choose another {flag}", source=str(path)) from None


def check_out_file(path: Path, force: bool, flag: str = "--out") -> None:
    """Refuse a file destination that cannot be written: a folder, an existing file (without ``force``), an
    unwritable place.  Leaves nothing behind; the caller creates missing parent folders when it writes."""
    if path.is_dir():
        raise InputError(f"is a folder; give a file name for {flag}, e.g. {path / 'calib.yaml'}", source=str(path))
    if path.exists() or path.is_symlink():
        if not path.is_symlink() and not stat.S_ISREG(path.stat().st_mode):
            # opened for writing, a named pipe waits forever for a reader and a device (/dev/sda as root) is
            # written through; --force is for replacing a file, not those (a symbolic link is replaced, not followed)
            raise InputError(f"is not a regular file (a named pipe, socket or device), so it cannot be replaced; "
                             f"choose another {flag}, a file name", source=str(path))
        if not force:
            raise InputError(f"exists; choose another {flag} or pass --force to overwrite it", source=str(path))
        if not os.access(path, os.W_OK):
            raise InputError(f"is not writable; choose another {flag}", source=str(path))
        return
    _check_creatable(path, flag)


def _csv_row(entry: Mapping[str, Any]) -> dict[str, Any]:
    # the plan as `autotune predict --plan` and `emit` take it, so a row goes back in without retyping its fields
    text = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in entry["plan"].items())
    row: dict[str, Any] = {"rank": entry["rank"], "plan": text, **entry["plan"]}
    estimate = entry["estimate"]
    row.update({k: v for k, v in estimate.items() if not isinstance(v, (dict, list))})
    # Breakdowns flatten to one column per part, named with the part's unit.
    row.update({f"time_{k}_s": v for k, v in (estimate.get("time_breakdown_s") or {}).items()})
    row.update({f"memory_{k}_gib": v for k, v in (estimate.get("memory_breakdown_gib") or {}).items()})
    return {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in row.items()}


def unlink_symlink(path: Path) -> Path:
    """A file autotune is about to write that is a symbolic link is replaced, not written through: the link's
    target (a user's file elsewhere, or a place a dangling link points to) is left alone."""
    if path.is_symlink():
        path.unlink()
    return path


def write_plans(path: Path, document: Mapping[str, Any]) -> list[Path]:
    """``plans.json`` (the whole document) and ``plans.csv`` (one row per ranked plan) in folder ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    json_path = unlink_symlink(path / PLANS_JSON)
    json_path.write_text(json.dumps(strict_json(document), indent=2, allow_nan=False) + "\n")  # readable back
    csv_path = unlink_symlink(path / "plans.csv")
    rows = [_csv_row(entry) for entry in document["plans"]]
    fieldnames: list[str] = []
    for row in rows:
        fieldnames.extend(k for k in row if k not in fieldnames)
    with open(csv_path, "w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)
    return [json_path, csv_path]


def refuse_overwrite(out: Path, names: Iterable[str], force: bool) -> None:
    """Refuse (InputError) to write files of these names into folder ``out`` when one exists there, unless ``force``,
    or when ``out`` is not a folder; writes nothing."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder; choose another --out", source=str(out))
    existing = [name for name in names if (out / name).exists() or (out / name).is_symlink()]
    if existing and not force:
        raise InputError(f"would overwrite {', '.join(existing)}; pass --force, or choose another --out", source=str(out))


def write_files(out: Path, files: Mapping[str, str], force: bool) -> list[Path]:
    """Write ``files`` (name -> text) into folder ``out``; refuse to overwrite an existing file unless ``force``."""
    refuse_overwrite(out, files, force)
    paths = [out / name for name in files]
    out.mkdir(parents=True, exist_ok=True)
    for path, text in zip(paths, files.values()):
        unlink_symlink(path).write_text(text, encoding="utf-8")  # as its sha256 in plans.json is taken
        if path.suffix in EXECUTABLE_SUFFIXES:
            path.chmod(0o755)
    return paths


LAUNCH_FILES_KEY = "launch_files"  # the launch files a search wrote beside its plans.json: name -> sha256


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _recorded_launch_files(out: Path) -> dict[str, str | None]:
    """The launch files an earlier search recorded in ``out``'s plans.json, each with the sha256 of what it wrote
    (None for a plans.json of an older release, whose record is a list of names): relative names inside ``out``
    only (a damaged or hand-edited record names nothing that could reach outside the folder, and an entry whose
    hash is not a sha256 nothing at all)."""
    try:
        doc = json.loads((out / PLANS_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    record = doc.get(LAUNCH_FILES_KEY) if isinstance(doc, dict) else None
    if isinstance(record, list):
        entries: dict[str, str | None] = {n: None for n in record if isinstance(n, str)}
    elif isinstance(record, dict):
        entries = {n: h.lower() for n, h in record.items()
                   if isinstance(h, str) and len(h) == 64 and all(c in "0123456789abcdefABCDEF" for c in h)}
    else:
        return {}
    return {Path(n).as_posix(): h for n, h in entries.items() if n and not Path(n).is_absolute()
            and ".." not in Path(n).parts and Path(n).name not in (PLANS_JSON, "plans.csv")}


def _inside(out: Path, name: str) -> Path | None:
    """``out / name`` when it is a regular file reached without a symbolic link below ``out`` and resolves inside
    ``out``; None otherwise (a link, a folder, a file elsewhere: not what a search wrote there)."""
    path = out
    try:  # a damaged record (a name too long for the file system, ...) removes nothing and stops nothing
        for part in Path(name).parts:
            path = path / part
            if path.is_symlink():
                return None
        if not path.is_file() or not path.resolve(strict=True).is_relative_to(out.resolve(strict=True)):
            return None
    except (OSError, RuntimeError, ValueError):  # unreadable, a link loop further up, a NUL in the name
        return None
    return path


@dataclass
class SearchFolder:
    """What :func:`write_search_folder` did: the paths written, the earlier search's launch files removed, and
    those it kept, each with why (edited since that search wrote it, or could not be removed)."""
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    kept: list[tuple[Path, str]] = field(default_factory=list)


def write_search_folder(out: Path, document: Mapping[str, Any], files: Mapping[str, str],
                        force: bool) -> SearchFolder:
    """A search's folder: plans.json and plans.csv, then its launch ``files`` (name -> text).  plans.json records
    each launch file's name and the sha256 of its text, so that a later search written over the folder with
    ``force`` removes the ones it does not write again: they would launch another search's plan beside a
    plans.json that no longer holds it.  Only files the record names, inside ``out`` (no symbolic link on the
    way) and unchanged since (their sha256 matches) are removed; an edited one is kept and said so.  Which to
    remove is settled before anything is written; a file named by an older record without hashes is kept."""
    done = SearchFolder()
    earlier = _recorded_launch_files(out) if force and out.is_dir() else {}
    doomed: list[Path] = []
    for name, digest in sorted(earlier.items()):
        path = _inside(out, name)
        if name in files or path is None or path in doomed:
            continue  # rewritten, or not what a search wrote (a link, a folder, a file elsewhere): not removed
        if digest is None:
            # a plans.json of an older release names its files without their hashes: whether one was edited since
            # cannot be told, so it is kept (--force replaces what is written again, never what it cannot vouch for)
            done.kept.append((path, "cannot tell whether it was edited (plans.json of an older release records no "
                                    "hash); remove it yourself if it is the old search's"))
            continue
        if digest is not None:
            try:
                unchanged = _sha256(path.read_bytes()) == digest
            except OSError as exc:
                done.kept.append((path, f"could not be read to check it is unedited ({exc.strerror or exc})"))
                continue
            if not unchanged:
                done.kept.append((path, "edited since the search wrote it"))
                continue
        doomed.append(path)
    record = {name: _sha256(text.encode("utf-8")) for name, text in sorted(files.items())}
    done.written = write_plans(out, {**document, LAUNCH_FILES_KEY: record})
    done.written += write_files(out, files, force) if files else []
    for path in doomed:
        try:
            path.unlink()
        except OSError as exc:
            done.kept.append((path, f"could not be removed ({exc.strerror or exc})"))
            continue
        done.removed.append(path)
        parent = path.parent
        while parent != out and not parent.is_symlink():  # an engine's subfolder the new search does not write
            try:
                parent.rmdir()  # only when empty: a folder holding anything else stays
            except OSError:
                break
            parent = parent.parent
    return done


def plans_path(source: str | Path, *, plan_strings: bool = True) -> Path | None:
    """The plans.json that ``source`` names (a file or its folder), or None when ``source`` is a plan string
    (``key=value`` pairs; anything else is a path, which read_plans reports when it does not exist).  Words that
    read both ways (``tp=2`` beside a file named ``tp=2``) are refused, naming both readings: ``./tp=2`` is the
    file, ``--plan tp=2`` the plan string.  ``plan_strings=False``: where only a path goes (explain's PLANS,
    report's RESULT), ``source`` is a path whatever it holds."""
    path = Path(source)
    text = str(source)
    if (plan_strings and "=" in text and "/" not in text and os.sep not in text and path.suffix != ".json"
            and (path.exists() or path.is_symlink())):
        # `emit tp=2` beside a file or folder named tp=2 read that as a plans.json: the same words meant a plan
        # string a folder over.  Neither reading is guessed; each is one keystroke away.
        kind = "folder" if path.is_dir() else "file"
        raise InputError(f"reads two ways: a plan string, or the {kind} {text!r} in this folder; write --plan "
                         f"{text} for the plan string, or ./{text} for the {kind}", field="PLAN")
    if path.is_dir():  # its plans.json; a folder without one is reported as such by read_plans
        return path / PLANS_JSON if (path / PLANS_JSON).exists() else path
    if not plan_strings or path.suffix == ".json" or path.is_file() or "=" not in str(source):
        return path
    return None


def read_plans(path: Path) -> dict[str, Any]:
    """A plans.json written by ``autotune search --out DIR`` (given as the file or its folder)."""
    if path.is_dir():
        if not (path / PLANS_JSON).exists():
            raise InputError(f"is a folder without a {PLANS_JSON}; give a plans.json written by `autotune search "
                             "--out DIR` (or its folder)", source=str(path))
        path = path / PLANS_JSON
    check_regular_file(path)
    if not path.is_file():
        plan_hint = "" if path.suffix == ".json" or "/" in str(path) else ", or a plan string of key=value pairs (tp=8,pp=2)"
        raise InputError(f"no such file; give a plans.json written by `autotune search --out DIR` (or its folder)"
                         f"{plan_hint}", source=str(path))
    try:
        doc = load_json(path.read_text(encoding="utf-8"), source=str(path))
    except RecursionError:
        raise InputError("is nested too deeply to be a plans.json; give a plans.json written by "
                         "`autotune search --out DIR`", source=str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"is not JSON ({str(exc)[:120]}); give a plans.json written by `autotune search --out DIR`",
                         source=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror or exc})", source=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plans"), list) or not isinstance(doc.get("inputs"), dict):
        raise InputError("has no 'plans' list and 'inputs' object; give a plans.json written by "
                         "`autotune search --out DIR`", source=str(path))
    for key in ("space_spec", "model_spec", "hardware_profile"):  # embedded inputs: objects when present
        value = doc["inputs"].get(key)
        if value is not None and not isinstance(value, dict):
            raise InputError(f"must be an object, but got ({key}={value!r}); restore it or rerun `autotune search "
                             "--out DIR`", source=str(path), field=f"inputs.{key}")
    # absent in the files of the first releases, which were all training searches (a serving search's inputs
    # without it were edited: said, not read as a training search with its keys missing)
    if "workload" not in doc["inputs"] and {"input_len", "output_len", "engine"} & set(doc["inputs"]):
        raise InputError("is missing, and the file's inputs are a serving search's (input_len, output_len, engine); "
                         "restore \"workload\": \"serve\" or rerun `autotune search --workload serve --out DIR`",
                         source=str(path), field="inputs.workload")
    kind = doc["inputs"].get("workload", "train")
    if kind not in ("train", "serve"):
        raise InputError(f"must be 'train' or 'serve' (the search that wrote the file), but got {kind!r}; rerun "
                         "`autotune search --out DIR`", source=str(path), field="inputs.workload")
    check_search_block(doc, str(path))
    return doc


def ranked_entries(document: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    """The plan entries of a plans.json document in the order of the ranks they record (1 = best), each rank
    a whole number held once: a file whose entries were reordered or pruned by hand keeps its ranking."""
    entries = document.get("plans")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError("is not a plans.json from `autotune search --out` (it needs 'inputs' and 'plans')",
                         source=source)
    ranks = [entry.get("rank") for entry in entries]
    bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int) or r < 1]
    if bad or len(set(ranks)) != len(ranks):
        what = f"a rank that is not a whole number >= 1 ({bad[0]!r})" if bad else "a rank given twice"
        raise InputError(f"each plan needs its own whole-number 'rank', but got {what}; rerun `autotune search "
                         "--out DIR`", source=source, field="plans")
    for entry in entries:
        if entry.get("plan") == {}:  # read as the default plan, which the search did not rank
            raise InputError(f"plan of rank {entry['rank']} is empty; restore it or rerun `autotune search --out DIR`",
                             source=source, field="plans.plan")
        # explain and emit estimate again rather than read it, but a damaged one says the file was edited: every
        # command that reads the file refuses it, as report does
        if not isinstance(entry.get("estimate"), dict):
            raise InputError(f"plan of rank {entry['rank']} has no 'estimate' object, but got "
                             f"(estimate={entry.get('estimate')!r}); restore it or rerun `autotune search --out DIR`",
                             source=source, field="plans.estimate")
    return sorted(entries, key=lambda entry: entry["rank"])


# The largest count a plans.json's search block may hold: more plans than any search evaluates (a hand edit to
# 10**30 is a typo, which the report's number formatting would not survive).
MAX_SEARCH_COUNT = 10**15


def check_search_block(document: Mapping[str, Any], source: str) -> None:
    """The ``search`` block of a plans.json, as the commands that read it quote it (the report's summary: plans
    evaluated, the space, those that fit, the sampler, the objective ranked by): absent, or an object whose counts
    are whole numbers 0..MAX_SEARCH_COUNT, whose sampler is a name and whose objectives are a list of names.  A hand
    edit (null, -5, 1e30, an objective that is a number) is refused here, naming the field, where the file is read."""
    if "search" not in document:
        return
    search = document["search"]
    fix = "restore it or rerun `autotune search --out DIR`"
    if not isinstance(search, dict):
        raise InputError(f"must be an object, but got (search={search!r}); {fix}", source=source, field="search")
    for key in ("evaluations", "space_size", "feasible", "meeting_targets", "recorded"):
        if key not in search:
            continue
        value = search[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEARCH_COUNT:
            raise InputError(f"0 <= {key} <= {MAX_SEARCH_COUNT:,} must hold (a whole number of plans), but got "
                             f"({key}={value!r}); {fix}", source=source, field=f"search.{key}")
    if "sampler" in search and not (isinstance(search["sampler"], str) and search["sampler"].strip()):
        raise InputError(f"must be the sampler's name, but got (sampler={search['sampler']!r}); {fix}", source=source,
                         field="search.sampler")
    if "objectives" in search:
        objectives = search["objectives"]
        if not isinstance(objectives, list) or not objectives or not all(isinstance(o, str) for o in objectives):
            raise InputError(f"must be a list of objective names such as [\"throughput\"], but got (objectives="
                             f"{objectives!r}); {fix}", source=source, field="search.objectives")
    if "elapsed_s" in search:
        elapsed = search["elapsed_s"]
        if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed <= MAX_SEARCH_COUNT:
            raise InputError(f"must be a number of seconds >= 0, but got (elapsed_s={elapsed!r}); {fix}",
                             source=source, field="search.elapsed_s")
    if "rejected" in search:
        rejected = search["rejected"]
        if not isinstance(rejected, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_SEARCH_COUNT for n in rejected.values()):
            raise InputError(f"must map each reason to a whole number of plans, but got (rejected={rejected!r}); {fix}",
                             source=source, field="search.rejected")


def plan_entry(document: Mapping[str, Any], rank: int, source: str) -> dict[str, Any]:
    """The entry whose ``rank`` is ``rank`` in a plans.json document (:func:`ranked_entries`), checked to hold a
    ``plan`` mapping."""
    entries = ranked_entries(document, source)
    if not entries:
        raise InputError("lists no plans (nothing fitted); rerun the search with more GPUs or other settings",
                         source=source)
    ranks = [entry["rank"] for entry in entries]
    if rank not in ranks:
        held = ", ".join(map(str, ranks[:10])) + (f", ... ({len(ranks)} in all)" if len(ranks) > 10 else "")
        raise InputError(f"has no plan of rank {rank} (it holds ranks {held}); choose --rank from those",
                         source=source, field="--rank")
    entry = entries[ranks.index(rank)]
    if not isinstance(entry.get("plan"), dict):
        raise InputError(f"plan of rank {rank} is malformed (no 'plan' object); rerun `autotune search --out DIR`",
                         source=source, field="plans")
    check_plan_keys(entry["plan"], (document.get("inputs") or {}).get("workload") == "serve", source, rank)
    return entry


def check_plan_keys(plan: Mapping[str, Any], serve: bool, source: str, rank: Any) -> None:
    """A plan that lacks a key its plans.json has always recorded (a hand-deleted one, which would be read as its
    default) is refused, naming the key."""
    missing = missing_plan_keys(plan, serve=serve)
    if missing:
        raise InputError(f"plan of rank {rank} must hold every key a search records, but lacks "
                         f"({', '.join(missing)}); a deleted key would be read as its default: restore it, or rerun "
                         "`autotune search --out DIR`", source=source, field=f"plans.plan.{missing[0]}")


def missing_plan_keys(plan: Mapping[str, Any], *, serve: bool) -> list[str]:
    """The keys every plans.json has recorded for each of its plans, since the first release, that ``plan`` lacks
    (training.plan.RECORDED_PLAN_KEYS, serving.plan.recorded_serve_keys): the keys added since (a training plan's
    etp and schedule, a serving plan's mode and dp) read as the defaults the older files meant."""
    if not serve:
        from ..training.plan import RECORDED_PLAN_KEYS

        return [k for k in RECORDED_PLAN_KEYS if k not in plan]
    from ..serving.plan import recorded_serve_keys

    return [k for k in recorded_serve_keys(plan) if k not in plan]
