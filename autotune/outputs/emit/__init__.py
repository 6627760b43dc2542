"""Launch configs for a plan: Megatron-LM, DeepSpeed, torchtitan, and Slurm around any of them.

``EMITTERS`` maps each format name to its :class:`Emitter`.  Every emitter
declares what it cannot express (``can_express`` lists the reasons, naming the
plan field and the alternatives) and renders files as text (``render`` returns a
mapping of file name to text).  Writing them is the CLI's job (``autotune/cli/emit.py``).
See docs/launch-configs.md for the targeted releases and the mapping of each plan key.
"""

from __future__ import annotations

from typing import Mapping

from ...errors import InputError
from . import deepspeed, megatron, sglang, slurm, torchtitan, vllm
from .base import EmitContext, Emitter, Launch, Limit, refusal

FRAMEWORKS: Mapping[str, Emitter] = {
    "megatron": megatron.EMITTER,
    "deepspeed": deepspeed.EMITTER,
    "torchtitan": torchtitan.EMITTER,
}
EMITTERS: Mapping[str, Emitter] = {**FRAMEWORKS, "slurm": slurm.make_emitter(dict(FRAMEWORKS))}
FORMATS = tuple(EMITTERS)
DEFAULT_FRAMEWORK = "megatron"
# Serving launch commands (serve plans, not training plans): format -> render(ServeContext).
SERVING_EMITTERS = {"vllm": vllm.render, "sglang": sglang.render}


def get_emitter(name: str, framework: str | None = None) -> Emitter:
    """The emitter of a format; for ``slurm``, specialised to the framework it runs."""
    if name not in EMITTERS:
        raise InputError(f"unknown format {name!r}; choose from {', '.join(FORMATS)}", field="--format")
    if name != "slurm":
        return EMITTERS[name]
    framework = framework or DEFAULT_FRAMEWORK
    if framework not in FRAMEWORKS:
        raise InputError(f"unknown framework {framework!r}; choose from {', '.join(FRAMEWORKS)}", field="--framework")
    return slurm.for_framework(EMITTERS["slurm"], FRAMEWORKS[framework])


def alternatives(context: EmitContext, exclude: str) -> list[str]:
    """The frameworks that can express this plan, other than ``exclude``."""
    return [name for name, em in FRAMEWORKS.items()
            if name != exclude and not em.can_express(context.plan, context.model, context)]


def render(name: str, context: EmitContext) -> dict[str, str]:
    """Files of format ``name`` for the plan in ``context``; a refusal names the fields and what can run it."""
    emitter = get_emitter(name, context.framework)
    reasons = emitter.can_express(context.plan, context.model, context)
    if reasons:
        others = alternatives(context, context.framework if name == "slurm" else name)
        hint = (f" Formats that can express it: {', '.join(others)}." if others
                else " No other framework can express it either; change the plan (see `autotune predict`).")
        raise InputError(refusal(emitter, reasons) + "." + hint, field="--format")
    return emitter.render(context)


__all__ = [
    "EMITTERS", "FRAMEWORKS", "FORMATS", "DEFAULT_FRAMEWORK", "EmitContext", "Emitter", "Launch", "Limit",
    "get_emitter", "render", "alternatives", "SERVING_EMITTERS",
]
