"""The Typer app and what every command shares: consoles, the one error path, option types, progress.

Command modules (search, accuracy, emit, report, study, catalog) import from here and never from
each other.  One error path: bad input raises :class:`~autotune.errors.InputError` (or a
``ValueError`` from a validating constructor); :func:`user_errors` prints it as one line and
exits with status 2, without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from ..errors import InputError
from ..inputs.framework import framework_version_note
from ..inputs.loading import strict_json

_REPEATED = "autotune.repeated_option"


class _OneValueGroup(TyperGroup):
    """The command group: an option that takes one value, given twice with two values (``-m a -m b``), is noted
    here, where the raw arguments are still at hand (Click would keep the last silently), and refused by
    :func:`check_given_options` through the one error path.  Repeatable options (``--fix``) and flags are left
    alone, as is the same value given twice."""

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            repeated = _repeated_option(command, rest)
            if repeated:
                ctx.meta[_REPEATED] = repeated
        return name, command, rest


def _repeated_option(command, args: list[str]) -> tuple[str, str, str] | None:
    """(flag, first, second) of the first single-value option given twice with different values, else None."""
    single = {}
    for param in getattr(command, "params", []):
        if (getattr(param, "param_type_name", "") != "option" or getattr(param, "multiple", False)
                or getattr(param, "is_flag", False)):
            continue
        for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
            single[opt] = param
    seen: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            break
        if token.startswith("--"):
            name, eq, attached = token.partition("=")
        elif len(token) > 2 and token[:2] in single:  # a short option with its value attached, as Click reads "-k3"
            name, eq, attached = token[:2], "=", token[2:]
        else:
            name, eq, attached = token, "", ""
        param = single.get(name)
        if param is None:
            i += 1
            continue
        value = attached if eq else (args[i + 1] if i + 1 < len(args) else "")
        given = token if eq else f"{token} {value}"
        i += 1 if eq else 2  # the value is consumed, whatever it looks like (as Click does)
        if param.name in seen and seen[param.name][0] != value:
            return max(param.opts, key=len), seen[param.name][1], given
        seen.setdefault(param.name, (value, given))
    return None


app = typer.Typer(
    cls=_OneValueGroup,
    help="Plan parallel layouts for LLM training and serving: ranked plans, step time or latency, memory, MFU and cost.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)

# Piped output (CI logs, files) gets a fixed width wide enough for the plans table.
stdout = Console(width=None if sys.stdout.isatty() else 132)
stderr = Console(stderr=True)


# A number option beyond these is a typo, not a cluster: refused before it overflows the cost model.
MAX_FLOAT_OPTION = 1e18
MAX_INT_OPTION = 2**31 - 1


class BlankPath(type(Path())):
    """What :func:`path_option` gives for a blank path (``--out ""``, an unset shell variable): refused by
    :func:`check_given_options` with the flag's name, where Path("") would silently mean the current folder."""


def path_option(text: str | Path) -> Path:
    """Typer ``parser`` of a path option or argument (shown as ``<path>``): a blank one becomes a :class:`BlankPath`."""
    if isinstance(text, Path):  # a default, already a path
        return text
    return BlankPath(".") if not text.strip() else Path(text)


def _current_context():
    """The click context of the command being run (None outside one)."""
    try:
        from typer.main import get_current_context  # typer with click vendored
    except ImportError:  # pragma: no cover - older typer on click
        from click import get_current_context
    return get_current_context(silent=True)


def check_given_options() -> None:
    """Every number given on the command line is finite and of a sane size (Click reads "nan" and "inf" as floats
    and any length of digits as an int), no path is blank and no single-value option is given twice; the flag at
    fault is named."""
    ctx = _current_context()
    if ctx is None:
        return
    repeated = ctx.meta.get(_REPEATED)
    if repeated:
        flag, first, second = repeated
        raise InputError(f"must be given once, but got two values ({first!r} and {second!r}); keep the one you mean",
                         field=flag)
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, (list, tuple)) else [value]
        flag = max(param.opts, key=len) if param.opts else (param.name or "")
        for v in values:
            if isinstance(v, BlankPath):
                raise InputError(f"must name a path (a file or folder, e.g. runs/x), but got an empty one "
                                 f"({flag}='')", field=flag)
            if flag == "--plan" and isinstance(v, str) and not v.strip():  # read as the default plan otherwise
                raise InputError("is empty; give the plan as key=value pairs, e.g. tp=8,pp=2", field=flag)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(f"must be a finite number, but got {v}", field=flag)
            limit = MAX_FLOAT_OPTION if isinstance(v, float) else MAX_INT_OPTION
            if abs(v) > limit:
                raise InputError(f"must be at most {limit:,.0f} in size, but got {v if isinstance(v, int) else f'{v:g}'}",
                                 field=flag)


def given_on_command_line(name: str, value: object, default: object) -> bool:
    """Whether the option of parameter ``name`` was given (typed, or from the environment), even at its default value
    (``--engine vllm``, ``--trials 200``): such a flag where it does not apply is refused like any other, where a
    comparison with the default would let it pass unseen.  Called outside a command line (a command function
    used from Python), ``value`` differing from ``default`` is what counts."""
    ctx = _current_context()
    source = ctx.get_parameter_source(name) if ctx is not None else None
    if source is None:
        return value != default
    return source.name != "DEFAULT"


def note_framework_version() -> None:
    """A one-line note when ``--framework NAME@YYYY-MM`` is newer than any version profiled (its newest settings are
    used); every command that takes --framework says it the same way."""
    ctx = _current_context()
    spec = ctx.params.get("framework") if ctx is not None else None
    note = framework_version_note(spec) if isinstance(spec, str) else ""
    if note:
        stderr.print(f"[yellow]note:[/] {escape(note)}.", highlight=False, soft_wrap=True)


def note_borrowed_hardware_name() -> None:
    """A note when a --hardware profile file names itself as a bundled profile with other figures
    (``inputs.hardware.borrowed_name_note``); a file that cannot be read is the command's to report."""
    ctx = _current_context()
    names = (ctx.params if ctx is not None else {}).get("hardware")
    if not isinstance(names, str):
        return
    from ..inputs.hardware import borrowed_name_note

    for name in names.split(","):
        try:
            note = borrowed_name_note(name.strip())
        except (InputError, ValueError, OSError, RecursionError):
            return  # the command reports it
        if note:
            stderr.print(f"[yellow]note:[/] {escape(note)}.", highlight=False, soft_wrap=True)


def note_model_architecture() -> None:
    """A note when a --model config.json's ``architectures`` names another supported family than its
    ``model_type`` (``inputs.hf_config.architecture_note``); a file that cannot be read is the command's to report."""
    ctx = _current_context()
    name = (ctx.params if ctx is not None else {}).get("model")
    if not isinstance(name, str) or not name.strip():
        return
    from ..inputs import loading
    from ..inputs.hf_config import architecture_note

    path = Path(name)
    try:
        if path.is_dir():
            path = path / "config.json"
        if path.suffix != ".json" or not path.is_file():
            return
        # a multimodal wrapper's architectures name the wrapper's class: compared with its own model_type
        say_note(architecture_note(loading.read_mapping(path), source=str(path)))
    except (InputError, ValueError, OSError, RecursionError):
        return  # the command reports it


def note_node_size() -> None:
    """A note when --gpus-per-node makes a node larger than the profile's: the profile's node link (NVLink) is then
    assumed between all of its GPUs, which the profiled system does not have; the user may mean it (another
    system), so it is said, not refused."""
    ctx = _current_context()
    params = ctx.params if ctx is not None else {}
    gpn, names = params.get("gpus_per_node"), params.get("hardware")
    if not isinstance(gpn, int) or not isinstance(names, str):
        return
    from ..inputs.request import MAX_GPUS_PER_NODE

    if gpn > MAX_GPUS_PER_NODE:
        return  # refused by the command, with the bound
    from ..inputs.hardware import load_hardware

    for name in names.split(","):
        try:
            hw = load_hardware(name.strip())
        except (InputError, ValueError, OSError):
            return  # the command reports it
        if gpn > hw.gpus_per_scale_up_domain:
            stderr.print(f"[yellow]note:[/] --gpus-per-node {gpn} makes a node larger than {hw.name}'s "
                         f"{hw.gpus_per_scale_up_domain}-GPU node: its node link ({hw.intra_node.bandwidth_gb_per_s:g} "
                         f"GB/s per GPU) is assumed between all {gpn}; give a profile of your system if its GPUs are "
                         "linked otherwise.", highlight=False, soft_wrap=True)
        elif gpn > hw.gpus_per_node:
            # an NVL72 rack is one NVLink domain of 4-GPU compute trays: the domain is modelled apart from the node,
            # and launch files ask for --gpus-per-node GPUs on each host (Slurm, torchrun --nproc-per-node)
            stderr.print(f"[yellow]note:[/] --gpus-per-node {gpn}: {hw.name}'s nodes hold {hw.gpus_per_node} GPUs, "
                         f"inside a {hw.gpus_per_scale_up_domain}-GPU NVLink domain that is modelled apart from the "
                         f"node; launch files would ask each host for {gpn} GPUs. Leave --gpus-per-node out for "
                         f"{hw.gpus_per_node}-GPU hosts.", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """The one error path: bad input (and a number option that is not finite) exits 2 with one line."""
    try:
        check_given_options()
        note_framework_version()
        note_node_size()
        note_borrowed_hardware_name()
        note_model_architecture()
        yield
    except RecursionError:
        stderr.print("[bold red]error:[/] an input is nested too deeply to read; give a flat file", highlight=False)
        raise typer.Exit(code=2) from None
    except OSError as exc:  # the file system refused (permissions, a full disk) after the checks passed
        where = f"{exc.filename}: " if exc.filename else ""
        stderr.print(f"[bold red]error:[/] {escape(printable(where))}{escape(exc.strerror or str(exc))}; check the path, its "
                     "permissions and free space", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    except (InputError, ValueError) as exc:
        stderr.print(f"[bold red]error:[/] {escape(printable(str(exc)))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with each control character written as its escape (``\\n``, ``\\x1b``): an error quotes what the
    user typed, and ``--objective $'\\x1b[2J'`` cleared the terminal, or a line break split the one line of the error."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


def print_json(document: Any) -> None:
    """One JSON document on stdout (``--json``): nothing else is printed there; standard JSON (a non-finite
    number is null)."""
    print(json.dumps(strict_json(document), allow_nan=False))


def progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=stderr, transient=True,
    )


@contextlib.contextmanager
def progress(label: str) -> Iterator[Callable[[str, int, int], None]]:
    """A progress bar on stderr; yields ``update(stage, done, total)``."""
    with progress_bar() as bar:
        task = bar.add_task(label, total=None)

        def update(stage: str, done: int, total: int) -> None:
            bar.update(task, description=f"{label} ({stage})", completed=done, total=total)

        yield update


def reject_flags(given: dict[str, Any], context: str) -> None:
    """Refuse flags that do not apply, rather than ignore them silently."""
    used = [flag for flag, value in given.items() if value is not None]
    if used:
        raise InputError(f"{', '.join(used)} do{'es' if len(used) == 1 else ''} not apply to {context}; leave "
                         f"{'it' if len(used) == 1 else 'them'} out", field=used[0])


STUDY_HINTS = {
    "--storage": "give an Optuna storage URL (sqlite:///study.db, postgresql://user:pw@host/db or journal:./study.log)",
    "--study": "give the study's name",
}


def check_study_flags(*, required: tuple[str, ...] = (), **given: str | None) -> None:
    """``--storage ''`` or ``--study ''`` (an unset shell variable) is refused, never read as the flag left out:
    an empty storage made a persistent search forget its trials, an empty study name fell back to the default.
    ``required``: the flags the command cannot do without (no 'leave it out' advice for them)."""
    for name, value in given.items():
        flag = f"--{name}"
        if value is not None and not value.strip():
            rest = "" if flag in required else f", or leave {flag} out"
            raise InputError(f"must not be empty: {STUDY_HINTS[flag]}{rest}", field=flag)
        # a study's name is stored and printed back by every worker and report (as model and profile names are
        # refused with one): a line break or a terminal escape there split or rewrote their output
        if name == "study" and value is not None and _CONTROL.search(value):
            raise InputError(f"must not hold a control character (a line break, tab or terminal escape), but got "
                             f"{value!r}; {STUDY_HINTS[flag]}", field=flag)


def check_heartbeat_storage(heartbeat: int, storage: str | None) -> None:
    """``--heartbeat N`` with a ``journal:`` storage is refused: Optuna's journal file keeps no heartbeats, so the
    setting would be dropped without a word (and a stale trial never failed and retried on its account)."""
    if (heartbeat and storage and storage.strip().startswith("journal:")
            and given_on_command_line("heartbeat", heartbeat, 30)):
        raise InputError(f"needs an SQLite or PostgreSQL storage (a journal: file keeps no heartbeats), but got "
                         f"(--heartbeat={heartbeat}, --storage={storage.strip()!r}); drop --heartbeat, or use "
                         "--storage sqlite:///study.db", field="--heartbeat")


WORKLOADS = ("train", "serve")


def check_workload(workload: str) -> str:
    if workload not in WORKLOADS:
        raise InputError(f"must be train or serve, but got {workload!r}", field="--workload")
    return workload


def say_note(text: str | None) -> None:
    """One note on stderr (nothing for None)."""
    if text:
        stderr.print(f"[yellow]note:[/] {escape(text)}.", highlight=False, soft_wrap=True)


def say_diagnosis(diagnosis, *fixes: str) -> None:
    """Why no plan fits (a search.diagnose.Diagnosis) on stderr: what binds, then each change that would fit
    (``fixes`` after the diagnosis's own)."""
    stderr.print(f"[bold red]no plan fits.[/] What binds: {escape(diagnosis.binding)}.", soft_wrap=True,
                 highlight=False)
    for fix_text in [*diagnosis.fixes, *fixes]:
        stderr.print(f"  - {escape(fix_text)}", soft_wrap=True, highlight=False)


def note_inputs(inputs) -> None:
    """Say what is unusual about the inputs, without refusing them."""
    capacity = getattr(inputs.workload, "moe_capacity_factor", None)
    if capacity is not None:
        stderr.print(f"[yellow]note:[/] token dropping: each expert computes {capacity!r} times its mean share of "
                     "tokens (the rest dropped, short experts padded); no host sync per MoE block.", highlight=False)
    limit = inputs.model.max_seq_len
    if limit and inputs.workload.seq_len > limit:
        stderr.print(f"[yellow]note:[/] --seq-len {inputs.workload.seq_len:,} exceeds {inputs.model.name}'s context "
                     f"window of {limit:,} tokens; the plan assumes a long-context extension.", highlight=False)


# --- option types shared by several commands ------------------------------------------------------
Model = Annotated[str, typer.Option("--model", "-m", help="Bundled model name (see `autotune models list`), a spec YAML, or an HF config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help="Bundled hardware profile (see `autotune hardware list`) or a profile YAML.")]
# One GPU count, read as text so that a range or a typo is answered through the one error path
# (inputs.request.single_gpu_count), not by the option parser; `search --gpus` also takes a range.
Gpus = Annotated[Optional[str], typer.Option("--gpus", "-n", help="Number of GPUs (one count; a range LOW..HIGH is capacity planning: `autotune search`).")]
GpusPerNode = Annotated[Optional[int], typer.Option("--gpus-per-node", help="GPUs per node [default: the profile's].")]
Nodes = Annotated[Optional[int], typer.Option("--nodes", help="Number of nodes (instead of --gpus).")]
SeqLen = Annotated[int, typer.Option("--seq-len", "-s", help="Sequence length in tokens.")]
GlobalBatch = Annotated[int, typer.Option("--global-batch", "-b", help="Global batch in sequences.")]
OptSeqLen = Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length in tokens (training).")]
OptGlobalBatch = Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (training).")]
MoeImbalance = Annotated[Optional[float], typer.Option("--moe-imbalance", help="Training, mixtures of experts: tokens the busiest expert-parallel rank receives over the mean [default: 1.0, as force-balanced benchmarks run].")]
MoeCapacityFactor = Annotated[Optional[float], typer.Option("--moe-capacity-factor", help="Training, mixtures of experts: drop tokens past this many times (>= 1) an expert's mean share and pad the rest (Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity): fixed shapes, no host sync [default: dropless].")]
Tokens = Annotated[Optional[float], typer.Option("--tokens", help="Training budget in tokens (e.g. 15e12): adds total time, GPU-hours and cost.")]
Price = Annotated[Optional[float], typer.Option("--price", help="USD per GPU-hour [default: the profile's].")]
Calibration = Annotated[Optional[str], typer.Option("--calibration", help="Calibration overlay YAML from `autotune calibrate`.")]
FrameworkOpt = Annotated[Optional[str], typer.Option("--framework", help="Training software NAME[@VERSION] (e.g. megatron-lm@2024-07, torchtitan, nemo@24.07; see profiles/frameworks/); version = a release or YYYY-MM [default: the --emit target, else megatron-lm, newest profiled].")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout (nothing else).")]
Space = Annotated[Optional[str], typer.Option("--space", help="Search-space YAML [default: the bundled train.yaml or serve.yaml].")]
Fix = Annotated[Optional[list[str]], typer.Option("--fix", help="Pin an axis, repeatable: --fix tp=8 --fix recompute=full.")]

# Serving options, shared by search and predict.
WorkloadKind = Annotated[str, typer.Option("--workload", help="train | serve. serve: inference plans (tp, pp, replicas, quantization, batch limit) under latency targets.")]
InputLen = Annotated[Optional[int], typer.Option("--input-len", help="Serving: prompt tokens per request.")]
OutputLen = Annotated[Optional[int], typer.Option("--output-len", help="Serving: output tokens per request.")]
TtftMs = Annotated[Optional[float], typer.Option("--ttft-ms", help="Serving: time-to-first-token target, ms.")]
TpotMs = Annotated[Optional[float], typer.Option("--tpot-ms", help="Serving: time-per-output-token target, ms.")]
Concurrency = Annotated[Optional[int], typer.Option("--concurrency", help="Serving: concurrent users over the deployment, a closed loop as serving benchmarks run it (clients of equal lengths partly return in synchronised waves, which queue more than staggered arrivals); for production traffic at a rate, give --request-rate instead.")]
RequestRate = Annotated[Optional[float], typer.Option("--request-rate", help="Serving: requests per second (with a --gpus range: find the fewest GPUs).")]
EngineOpt = Annotated[str, typer.Option("--engine", help="Serving: the engine the plans are for, its memory budget rule and fitted parameters: vllm (0.33), sglang (0.5.23) or trtllm; NAME@MAJOR.MINOR names its release (trtllm@0.14: that release's parameters, fitted on its tables; 0.x releases are planned aggregated).")]
CheckpointOpt = Annotated[Optional[str], typer.Option("--checkpoint", help="Serving: the weights you have: bf16, fp8, nvfp4, mxfp4, awq, gptq, compressed-tensors[:fp8|int8|int4|fp4] or modelopt[:fp4|fp8] (a container holds one scheme; bare: fp8 and fp4) [default: the catalogue's record for a Hugging Face id, a config.json's quantization_config, else bf16]. Plans whose weights need another checkpoint say so.")]
MemoryFractionOpt = Annotated[Optional[float], typer.Option("--memory-fraction", help="Serving: the value of the engine's memory flag, 0 < f <= 1: vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction [default: the engine's own: vLLM 0.92, TensorRT-LLM 0.9, SGLang's computed reserve]. The KV cache and batch limit follow it; launch files set it.")]

# Persistent studies (search --storage, tune, worker).
Heartbeat = Annotated[int, typer.Option("--heartbeat", help="Seconds between trial heartbeats (SQLite/PostgreSQL); "
                                        "a trial silent for 2x this + 1 s is stale: failed and retried once. 0: off.")]


def main() -> None:
    app()
