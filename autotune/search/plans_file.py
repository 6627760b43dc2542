"""The ``inputs`` block of a ``plans.json``: written so that the file reads back from anywhere.

``autotune search --out DIR`` writes the model spec, the hardware profile (with any calibration
and --price applied) and the search space into ``inputs`` as plain mappings, beside their names.
``explain``, ``emit`` and ``report`` rebuild the problem from those embedded mappings, so a search
on your own ``config.json`` or profile YAML reads back from another directory, or after the
original file is gone.  A ``plans.json`` written before the embedding (names only) still reads
back when its names are bundled; otherwise the error says to pass ``--model``/``--hardware`` or
to rerun the search.

Every embedded mapping goes back through the same validating loaders as a YAML file, so a
hand-edited or hostile ``plans.json`` is refused with the field at fault, never a traceback.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError
from ..inputs import loading
from ..inputs.calibration import calibrated_hardware
from ..inputs.framework import load_framework
from ..inputs.hardware import (
    Cluster,
    Hardware,
    hardware_to_mapping,
    load_hardware,
)
from ..inputs.modelspec import (
    ModelSpec,
    load_model,
    model_from_mapping,
    model_to_mapping,
)
from ..inputs.request import (TrainingInputs, cluster_from_options, max_moe_imbalance, moe_workload_problem,
                              recorded_hardware)
from ..inputs.workload import (MAX_CAPACITY_FACTOR, MIN_CAPACITY_FACTOR, ServeWorkload, TrainWorkload,
                                tokens_problem)
from ..serving.calibrated import aggregated_only, params_for, release_name
from ..serving.checkpoint import check_checkpoint
from ..serving.engines import DEFAULT_ENGINE, ENGINES, check_memory_fraction, parse_engine
from ..serving.estimate import ServingParams
from ..serving.estimate import SERVING_MODEL_VERSION
from ..serving.overlay import check_serving_model, serving_params_from_mapping
from ..serving.space import ServeSpace, load_serve_space, serve_space_from_mapping
from ..training.plan import PRECISION
from ..training.problem import DEFAULT_MEMORY_HEADROOM, TrainingProblem
from ..training.space import Space, load_space, space_from_mapping

TRAIN_SPACE = "search_spaces/train.yaml"
SERVE_SPACE = "search_spaces/serve.yaml"


def framework_of(inputs: TrainingInputs) -> str:
    """The training framework the estimates assume (``NAME`` or ``NAME@VERSION``), read back by ``load_framework``."""
    fw = inputs.framework
    return fw.label if fw.version else fw.name


def _plain(value: Any) -> Any:
    """JSON-ready: tuples to lists, numpy scalars to Python numbers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def space_mapping(space: Space | ServeSpace) -> dict[str, Any]:
    """A space as its YAML holds it (axes after any --fix; rules for training)."""
    out: dict[str, Any] = {"name": space.name, "axes": {k: v if isinstance(v, str) else list(v)
                                                          for k, v in space.axes.items()}}
    if isinstance(space, Space):
        out["rules"] = dataclasses.asdict(space.rules)
    return _plain(out)


def training_inputs_json(inputs: TrainingInputs, space_path: str | None, space: Space | None = None,
                         problem: TrainingProblem | None = None) -> dict[str, Any]:
    """The ``inputs`` block of a training ``plans.json``: the names, and the spec, profile and space embedded;
    with ``problem``, the precisions searched and the memory headroom kept."""
    hw = inputs.cluster.hardware
    searched = {} if problem is None else {"precisions": list(problem.choices["precision"]),
                                           "memory_headroom": problem.memory_headroom}
    if inputs.workload.moe_imbalance != 1.0:  # written only when stated, so other files stay as they were
        searched["moe_imbalance"] = inputs.workload.moe_imbalance
    if inputs.workload.moe_capacity_factor is not None:
        searched["moe_capacity_factor"] = inputs.workload.moe_capacity_factor
    return _plain({
        **searched,
        "workload": "train",
        "model": inputs.model.name,
        "hardware": hw.name,
        "framework": framework_of(inputs),
        "gpus": inputs.cluster.n_gpus,
        "gpus_per_node": inputs.cluster.gpus_per_node,
        "seq_len": inputs.workload.seq_len,
        "global_batch": inputs.workload.global_batch,
        "tokens": inputs.workload.tokens,
        "price_usd_per_gpu_hour": hw.price_usd_per_gpu_hour,
        "space": space_path or TRAIN_SPACE,
        "model_spec": model_to_mapping(inputs.model),
        "hardware_profile": hardware_to_mapping(hw),
        "space_spec": space_mapping(space if space is not None else load_space(space_path)),
        **({} if inputs.calibration is None else {"calibration": inputs.calibration}),
    })


def serving_inputs_json(model: ModelSpec, hardware: Hardware, space: ServeSpace | None, *,
                        engine: str = DEFAULT_ENGINE, checkpoint: str = "bf16",
                        params: ServingParams | None = None, memory_fraction: float | None = None,
                        release: str | None = None) -> dict[str, Any]:
    """What a serving ``plans.json`` embeds besides the workload: the spec, the profile, the space, and the
    engine, checkpoint and serving parameters (shipped or a --calibration's) its plans were estimated with, the
    engine release the user named (--engine trtllm@0.14; absent: the family), and the engine's memory flag when
    the user set it (--memory-fraction; absent: the engine's default rule)."""
    out: dict[str, Any] = {"model_spec": model_to_mapping(model), "hardware_profile": hardware_to_mapping(hardware),
                           "engine": engine, "checkpoint": checkpoint,
                           "serving_params": (params or params_for(engine)).as_dict(),
                           "serving_model": SERVING_MODEL_VERSION}
    if release is not None:
        out["engine_release"] = release_name(release)
    if memory_fraction is not None:
        out["memory_fraction"] = float(memory_fraction)
    if space is not None:
        out["space_spec"] = space_mapping(space)
    return _plain(out)


# --- reading back ------------------------------------------------------------------------------


def _mapping(inputs: Mapping[str, Any], key: str, source: str) -> dict | None:
    value = inputs.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError(f"must be a mapping, but got a {type(value).__name__}; rerun `autotune search --out DIR`",
                         source=source, field=f"inputs.{key}")
    return value


def _name(inputs: Mapping[str, Any], key: str, source: str) -> str:
    value = inputs.get(key)
    if not isinstance(value, str) or not value:
        raise InputError(f"must name the {key}, but got {value!r}; rerun `autotune search --out DIR`", source=source,
                         field=f"inputs.{key}")
    return value


def _same_name(inputs: Mapping[str, Any], key: str, embedded_name: str, embedded_key: str, source: str) -> None:
    """The name a plans.json records beside the spec or profile it embeds is that one's: an edited name would be
    ignored (the embedded one is what the plans were estimated for)."""
    named = inputs.get(key)
    if isinstance(named, str) and named and named != embedded_name:
        raise InputError(f"must name the {key} of inputs.{embedded_key} ({embedded_name!r}), but got {named!r}; to "
                         f"plan another {key}, rerun the search with it", source=source, field=f"inputs.{key}")


def _bundled_spec_of(typed: str) -> str | None:
    """The bundled spec a typed --model names without reading any file: a bundled name, or a Hugging Face id of the
    catalogue; None for anything --model would read from disk first (an existing path: load_model's order), for a
    path-like name, and for a name autotune does not bundle."""
    from ..inputs.catalogue import resolve_hf_id
    from ..inputs.resources import bundled_dir

    try:
        if Path(typed).exists():
            return None
        names = {p.stem for p in bundled_dir("models").glob("*.yaml")}
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return None
    if typed in names:
        return typed
    if typed.count("/") == 1 and not typed.endswith((".json", ".yaml", ".yml")):
        try:
            entry = resolve_hf_id(typed)
        except (InputError, ValueError):
            return None
        return entry.spec if entry is not None and entry.spec else None
    return None


def _same_typed_model(inputs: Mapping[str, Any], spec: ModelSpec, source: str) -> None:
    """A serving plans.json records the --model the user typed (emit serves that name) beside the spec it embeds. A
    search of a bundled spec whose typed name was edited to another bundled model would be ignored (the embedded
    spec is what the plans were estimated for); a spec from a config.json or YAML has no bundled name to compare."""
    from ..inputs.resources import bundled_dir

    typed = inputs.get("model")
    if not isinstance(typed, str) or not typed or typed == spec.name:
        return
    if not (bundled_dir("models") / f"{spec.name}.yaml").is_file():
        return
    named = _bundled_spec_of(typed)
    if named is not None and named != spec.name:
        also = "" if named == typed else f" (the bundled {named})"
        raise InputError(f"must name the model the plans were searched for, the embedded inputs.model_spec "
                         f"({spec.name!r}), but got ({typed!r}{also}); to plan another model, rerun the search with it",
                         source=source, field="inputs.model")


def model_from_plans(inputs: Mapping[str, Any], source: str, override: str | ModelSpec | None = None) -> ModelSpec:
    """The model a plans.json was searched for: ``--model`` when given, else the embedded spec, else the bundled name."""
    if isinstance(override, ModelSpec):
        return override
    if override is not None:
        return load_model(override)
    embedded = _mapping(inputs, "model_spec", source)
    if embedded is not None:
        spec = model_from_mapping(embedded, source=f"{source}: inputs.model_spec")
        # a training search records the spec's own name (a serving one what the user typed, e.g. a Hugging Face id)
        if inputs.get("workload") != "serve":
            _same_name(inputs, "model", spec.name, "model_spec", source)
        else:
            _same_typed_model(inputs, spec, source)
        return spec
    name = _name(inputs, "model", source)
    try:
        return load_model(name)
    except InputError:
        raise InputError(f"names model {name!r}, which is not bundled, and embeds no spec (an older plans.json); "
                         "pass --model with the spec or config.json the search used, or rerun the search",
                         source=source, field="inputs.model") from None


def hardware_from_plans(inputs: Mapping[str, Any], source: str, override: str | None = None) -> Hardware:
    """The profile a plans.json was searched on: ``--hardware`` when given, else the embedded profile, else by name."""
    if override is not None:
        return load_hardware(override)
    # the price the search applied, checked whether or not a profile is embedded (which holds that price already)
    price = inputs.get("price_usd_per_gpu_hour")
    if price is not None:
        price = loading.number(dict(inputs), "price_usd_per_gpu_hour", source=source, section="inputs",
                               positive=False, minimum=0)
    embedded = _mapping(inputs, "hardware_profile", source)
    if embedded is not None:  # it holds the price the search applied; an edited price_usd_per_gpu_hour wins
        hw = recorded_hardware(embedded, source=f"{source}: inputs.hardware_profile")
        _same_name(inputs, "hardware", hw.name, "hardware_profile", source)
        return hw if price is None else hw.with_price(price)
    name = _name(inputs, "hardware", source)
    try:
        hw = load_hardware(name)
    except InputError:
        raise InputError(f"names hardware {name!r}, which is not bundled, and embeds no profile (an older "
                         "plans.json); pass --hardware with the profile YAML the search used, or rerun the search",
                         source=source, field="inputs.hardware") from None
    return hw if price is None else hw.with_price(price)


def _count(inputs: Mapping[str, Any], key: str, source: str, given: int | None = None, *,
           required: bool = True) -> int | None:
    if given is not None:
        return given
    if inputs.get(key) is None and not required:
        return None
    return loading.integer(dict(inputs), key, source=source, section="inputs")


def framework_from_plans(named: str | None, source: str, *, flag: bool = False):
    """The framework profile a plans.json names (``inputs.framework``), or ``--framework`` when ``flag``; an unknown
    name or version is refused by that key, with the way out."""
    try:
        return load_framework(named)
    except InputError as exc:  # it names the profile: name the file's key (or the flag) instead
        where = {"field": "--framework"} if flag else {"source": source, "field": "inputs.framework"}
        raise InputError(f"{exc.message}; name a framework and version `autotune search --framework` knows, or "
                         "rerun the search", **where) from None


def _search_settings(inputs: Mapping[str, Any], source: str) -> tuple[tuple[str, ...] | None, float | None]:
    """The precisions searched and the memory headroom kept (None where the file predates them); every reader of a
    training plans.json checks them, so explain and emit refuse what report refuses."""
    precisions = inputs.get("precisions")
    if precisions is not None:
        if (not isinstance(precisions, list) or not precisions
                or not all(isinstance(p, str) and p in PRECISION for p in precisions)):
            raise InputError(f"must list precisions among {', '.join(PRECISION)}, but got {precisions!r}; fix it or "
                             "rerun `autotune search --out DIR`", source=source, field="inputs.precisions")
        precisions = tuple(dict.fromkeys(precisions))
    headroom = None
    if inputs.get("memory_headroom") is not None:
        headroom = loading.number(dict(inputs), "memory_headroom", source=source, section="inputs", positive=False,
                                  minimum=0, maximum=0.99)
    return precisions, headroom


def training_inputs_from_plans(inputs: Mapping[str, Any], source: str, *, model: str | ModelSpec | None = None,
                               hardware: str | None = None, gpus: int | None = None, gpus_per_node: int | None = None,
                               seq_len: int | None = None, global_batch: int | None = None,
                               calibration: str | None = None, framework: str | None = None) -> TrainingInputs:
    """The model, cluster, workload and framework of a training plans.json; flags given override the file's values."""
    _search_settings(inputs, source)
    spec = model_from_plans(inputs, source, model)
    hw = hardware_from_plans(inputs, source, hardware)
    if calibration is not None:
        hw = calibrated_hardware(hw, calibration)
    n = _count(inputs, "gpus", source, gpus)
    gpn = _count(inputs, "gpus_per_node", source, gpus_per_node, required=False)
    try:
        cluster = cluster_from_options(hw, n, gpn, None)
    except InputError as exc:
        raise InputError(f"{exc}", source=source) from None
    tokens = inputs.get("tokens")
    if tokens is not None:
        tokens = loading.number(dict(inputs), "tokens", source=source, section="inputs")
    try:
        imbalance = 1.0 if inputs.get("moe_imbalance") is None else loading.number(
            dict(inputs), "moe_imbalance", source=source, section="inputs", minimum=1.0,
            maximum=max_moe_imbalance(spec) or 1e3)  # E/k: the busiest rank receives at most every token
        capacity = None if inputs.get("moe_capacity_factor") is None else loading.number(
            dict(inputs), "moe_capacity_factor", source=source, section="inputs", minimum=MIN_CAPACITY_FACTOR,
            maximum=MAX_CAPACITY_FACTOR)
        workload = TrainWorkload(seq_len=_count(inputs, "seq_len", source, seq_len),
                                 global_batch=_count(inputs, "global_batch", source, global_batch), tokens=tokens,
                                 moe_imbalance=imbalance, moe_capacity_factor=capacity)
    except InputError as exc:  # already names the file and the field: add the way out
        raise InputError(f"{exc.message}; rerun `autotune search --out` (or delete the key)", source=source,
                         field=exc.field) from None
    except ValueError as exc:
        raise InputError(str(exc), source=source, field="inputs") from None
    problem = tokens_problem(workload.tokens, workload.seq_len, workload.global_batch)  # as search refuses --tokens
    if problem:
        raise InputError(f"{problem}; rerun `autotune search --out` (or delete the key)", source=source,
                         field="inputs.tokens")
    named = framework or inputs.get("framework")
    if named is not None and not isinstance(named, str):
        raise InputError(f"must name a framework (NAME[@VERSION]), but got {named!r}", source=source,
                         field="inputs.framework")
    loaded = framework_from_plans(named, source, flag=framework is not None)
    problem = moe_workload_problem(spec, loaded, workload)
    if problem:
        key = "moe_capacity_factor" if workload.moe_capacity_factor is not None else "moe_imbalance"
        raise InputError(f"{problem} (or rerun the search)", source=source, field=f"inputs.{key}")
    # the overlay the numbers come from: the one given now, else the one the search recorded (its efficiencies are
    # in the embedded profile), none for a --hardware given now (a profile loaded afresh)
    recorded = inputs.get("calibration") if hardware is None else None
    named = Path(calibration).name if calibration is not None else recorded if isinstance(recorded, str) else None
    return TrainingInputs(spec, cluster, workload, loaded, named)


def _named_space(path: Any, bundled: str, source: str) -> str | None:
    """The space file an older plans.json (no ``space_spec``) names, None for the bundled one; a file that is gone
    is the plans.json's problem, named by its field, not a bare 'file not found' of a path the user never typed."""
    if path in (None, bundled):
        return None
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"must name the search space file, but got {path!r}; restore it or rerun the search",
                         source=source, field="inputs.space")
    if not Path(path).exists():
        raise InputError(f"names the search space file {path!r}, which is not found from the current folder, and "
                         "the plans.json embeds no space_spec (an older one); run from the folder the search ran in, "
                         "restore the file, or rerun the search", source=source, field="inputs.space")
    return path


def space_from_plans(inputs: Mapping[str, Any], source: str) -> Space:
    """The training space a plans.json was searched over: embedded, else the path it names (bundled default)."""
    embedded = _mapping(inputs, "space_spec", source)
    if embedded is not None:
        return space_from_mapping(embedded, source=f"{source}: inputs.space_spec")
    path = inputs.get("space")
    return load_space(_named_space(path, TRAIN_SPACE, source))


def memory_headroom_of(inputs: Mapping[str, Any], source: str) -> float:
    """The memory headroom a training plans.json was searched with (the default where the file predates it)."""
    headroom = _search_settings(inputs, source)[1]
    return DEFAULT_MEMORY_HEADROOM if headroom is None else headroom


def training_problem_from_plans(inputs: Mapping[str, Any], source: str) -> TrainingProblem:
    """The search problem a training plans.json came from (its framework, precisions and headroom too)."""
    t = training_inputs_from_plans(inputs, source)
    space = space_from_plans(inputs, source)
    precisions, headroom = _search_settings(inputs, source)
    if precisions is not None:
        space = space.with_precisions(precisions)
    extra = {} if headroom is None else {"memory_headroom": headroom}
    return TrainingProblem.build(t.model, t.cluster, t.workload, space, t.framework, **extra)


@dataclasses.dataclass(frozen=True)
class ServingInputs:
    """What a serving plans.json was searched for."""

    model: ModelSpec
    cluster: Cluster
    workload: ServeWorkload
    space: ServeSpace
    engine: str = DEFAULT_ENGINE
    checkpoint: str = "bf16"
    params: ServingParams = dataclasses.field(default_factory=lambda: params_for(DEFAULT_ENGINE))
    memory_fraction: float | None = None  # the engine's memory flag as searched (None: the engine's default rule)
    release: str | None = None  # the engine release the search named (trtllm-0.14), None: the family's

    def check_plan(self, plan: Any, source: str, rank: int) -> None:
        """A plan the recorded release cannot run (a hand-edited file): TensorRT-LLM 0.x is planned aggregated
        only, as search and predict plan it."""
        if getattr(plan, "disaggregated", False) and aggregated_only(self.release):
            raise InputError(f"plan of rank {rank} is disaggregated, but {release_name(self.release)} is planned "
                             "aggregated only (its parameters come from aggregated tables); rerun the search with a "
                             "1.x release for disaggregated plans", source=source, field="plans.plan")


def _serving_stack(inputs: Mapping[str, Any], source: str) -> tuple[str, str, ServingParams, str | None]:
    """Engine, checkpoint and parameters of a serving plans.json; a file written before they were recorded
    reads as vLLM with bf16 weights and the shipped parameters."""
    recorded = [k for k in ("engine", "checkpoint", "serving_params") if k in inputs]
    if recorded and len(recorded) < 3:  # a file that records the stack records all of it
        missing = [k for k in ("engine", "checkpoint", "serving_params") if k not in recorded]
        raise InputError(f"records {', '.join(recorded)} but not {', '.join(missing)}; rerun `autotune search "
                         "--workload serve --out DIR`", source=source, field=f"inputs.{missing[0]}")
    for key in recorded:
        if inputs[key] is None:
            raise InputError("must not be null; rerun `autotune search --workload serve --out DIR`", source=source,
                             field=f"inputs.{key}")
    engine = inputs.get("engine", DEFAULT_ENGINE)
    if engine not in ENGINES:
        raise InputError(f"must be one of {', '.join(ENGINES)}, but got {engine!r}", source=source,
                         field="inputs.engine")
    try:
        checkpoint = check_checkpoint(str(inputs.get("checkpoint", "bf16")))
    except ValueError as exc:
        raise InputError(str(exc), source=source, field="inputs.checkpoint") from None
    params = params_for(engine)
    if "serving_params" in inputs or "serving_model" in inputs:
        check_serving_model(inputs, source=source, field="inputs.serving_model",
                            redo="rerun `autotune search --workload serve --out DIR`")
    if "serving_params" in inputs:
        params = serving_params_from_mapping(inputs["serving_params"], params, source=source,
                                             section="inputs.serving_params", complete=True)
    release = None
    if inputs.get("engine_release") is not None:
        text = inputs["engine_release"]
        try:
            family, release = parse_engine(text) if isinstance(text, str) else (None, None)
        except ValueError as exc:
            raise InputError(f"{exc}; rerun the search", source=source, field="inputs.engine_release") from None
        if family != engine or release is None:
            raise InputError(f"must name a release of the recorded engine {engine} as {engine}@MAJOR.MINOR, but got "
                             f"{text!r}; rerun the search", source=source, field="inputs.engine_release")
    return engine, checkpoint, params, release


def serving_inputs_from_plans(inputs: Mapping[str, Any], source: str, *,
                              model: str | ModelSpec | None = None) -> ServingInputs:
    """The model, cluster, request shape and space of a serving plans.json (``inputs.workload`` is ``serve``)."""
    spec = model_from_plans(inputs, source, model)
    hw = hardware_from_plans(inputs, source)
    if inputs.get("gpus") is None:
        raise InputError("holds no GPU count: no GPU count in the searched range met the targets, so there is no "
                         "plan to read; rerun the search with a wider --gpus range", source=source, field="inputs.gpus")
    n = _count(inputs, "gpus", source)
    gpn = _count(inputs, "gpus_per_node", source, required=False)
    try:
        cluster = cluster_from_options(hw, n, gpn, None)
    except InputError as exc:
        raise InputError(f"{exc}", source=source) from None
    numbers = dict(inputs)

    def optional(key: str) -> float | None:
        return None if numbers.get(key) is None else loading.number(numbers, key, source=source, section="inputs")

    try:
        workload = ServeWorkload(
            input_len=loading.integer(numbers, "input_len", source=source, section="inputs"),
            output_len=loading.integer(numbers, "output_len", source=source, section="inputs"),
            ttft_ms=optional("ttft_ms"), tpot_ms=optional("tpot_ms"),
            concurrency=None if numbers.get("concurrency") is None else
            loading.integer(numbers, "concurrency", source=source, section="inputs"),
            request_rate=optional("request_rate"))
    except InputError as exc:  # the workload's own checks name a flag, not the file
        if exc.source is not None:
            raise
        flag = (exc.field or "").lstrip("-").replace("-", "_")  # --request-rate -> inputs.request_rate
        mapped = {"ttft": "ttft_ms", "tpot": "tpot_ms"}.get(flag, flag)
        # and its fix speaks of the flags too: in a file, the fields that hold them
        message = re.sub(r"--(input-len|output-len|ttft-ms|tpot-ms|concurrency|request-rate)\b",
                         lambda m: "inputs." + m.group(1).replace("-", "_"), exc.message)
        raise InputError(message, source=source, field=f"inputs.{mapped}" if mapped else None) from None
    if inputs.get("mode") is not None and inputs["mode"] != workload.mode:  # a label the load it records implies
        raise InputError(f"must be the load the file records ({workload.mode}: from concurrency and request_rate), "
                         f"but got {inputs['mode']!r}; restore it or rerun the search", source=source,
                         field="inputs.mode")
    embedded = _mapping(inputs, "space_spec", source)
    if embedded is not None:
        space = serve_space_from_mapping(embedded, source=f"{source}: inputs.space_spec")
    else:
        space = load_serve_space(_named_space(inputs.get("space"), SERVE_SPACE, source))
    engine, checkpoint, params, release = _serving_stack(inputs, source)
    fraction = None
    if "memory_fraction" in inputs:  # absent: the engine's default rule; a recorded value is a number
        try:
            fraction = check_memory_fraction(inputs["memory_fraction"])
        except ValueError as exc:
            raise InputError(f"{exc}; leave the key out for the engine's default, or rerun the search", source=source,
                             field="inputs.memory_fraction") from None
    return ServingInputs(spec, cluster, workload, space, engine, checkpoint, params, fraction, release)


__all__ = ["SERVE_SPACE", "TRAIN_SPACE", "ServingInputs", "framework_of", "hardware_from_plans", "model_from_plans",
           "serving_inputs_from_plans", "serving_inputs_json", "space_from_plans", "space_mapping",
           "training_inputs_from_plans", "training_inputs_json", "training_problem_from_plans"]
