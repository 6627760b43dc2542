"""``autotune hardware list|show`` and ``autotune models list|show``: the bundled profiles and specs."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.table import Table

from ..errors import InputError
from ..inputs.catalogue import catalogue
from ..inputs.hardware import hardware_names, load_hardware
from ..inputs.modelspec import load_model, model_names
from .app import app, stdout, user_errors

hardware_app = typer.Typer(help="Bundled hardware profiles (used by training and serving plans).", no_args_is_help=True)
models_app = typer.Typer(help="Bundled model specs (used by training and serving plans).", no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")


def _positional(load, name: str, flag: str):
    """``load(name)``, with an error about the name given as NAME (the argument), not the ``flag`` that
    ``search`` and ``predict`` take it by."""
    try:
        return load(name)
    except InputError as exc:
        if exc.field != flag:
            raise
        raise InputError(exc.message, source=exc.source, field="NAME") from None


@hardware_app.command("list", epilog="**Example**\n\n    autotune hardware list")
def hardware_list() -> None:
    """List the bundled hardware profiles (the GPUs training and serving plans run on)."""
    with user_errors():
        table = Table(header_style="bold")
        for col in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GiB", "HBM GB/s", "GPUs/node", "domain",
                    "NIC GB/s/GPU", "$/GPU-h"):
            table.add_column(col, justify="left" if col == "name" else "right")
        for name in hardware_names():
            hw = load_hardware(name)
            fp8 = hw.peak_tflops.get("fp8")
            price = ("~" if hw.price_estimated else "") + f"{hw.price_usd_per_gpu_hour:.2f}"
            table.add_row(name, f"{hw.peak_tflops['bf16']:g}", f"{fp8:g}" if fp8 else "-",
                          f"{hw.memory_gib:g}", f"{hw.memory_bandwidth_gb_per_s:g}", str(hw.gpus_per_node),
                          str(hw.gpus_per_scale_up_domain), f"{hw.inter_node.bandwidth_gb_per_s:g}", price)
        stdout.print(table)
        stdout.print("domain: GPUs one scale-up fabric joins (the node, or 72 on NVL72 racks of 4-GPU trays); ~: estimated price")

@hardware_app.command("show", epilog="**Example**\n\n    autotune hardware show h100-sxm5-80gb")
def hardware_show(name: Annotated[str, typer.Argument(help="Profile name or YAML path.")]) -> None:
    """Show one hardware profile (for training and serving) with the source of every number."""

    with user_errors():
        hw = _positional(load_hardware, name, "--hardware")
        table = Table(title=f"{hw.name}: {hw.description}", header_style="bold", show_lines=False)
        table.add_column("field")
        table.add_column("value", justify="right")
        table.add_column("source")
        rows = {
            "peak_tflops": ", ".join(f"{k} {v:g}" for k, v in hw.peak_tflops.items()),
            "memory_gib": f"{hw.memory_gib:g}",
            "memory_bandwidth_gb_per_s": f"{hw.memory_bandwidth_gb_per_s:g}",
            "gpus_per_node": str(hw.gpus_per_node),
            "scale_up_domain_gpus": str(hw.gpus_per_scale_up_domain),
            "intra_node": f"{hw.intra_node.bandwidth_gb_per_s:g} GB/s, {hw.intra_node.latency_us:g} us",
            "scale_up": f"{hw.scale_up_link.bandwidth_gb_per_s:g} GB/s, {hw.scale_up_link.latency_us:g} us"
                        + ("" if hw.scale_up else " (the node link)"),
            "inter_node": f"{hw.inter_node.bandwidth_gb_per_s:g} GB/s, {hw.inter_node.latency_us:g} us",
            "host_link_bandwidth_gb_per_s": f"{hw.host_link_bandwidth_gb_per_s:g}",
            "cpu_optimizer_params_per_s": f"{hw.cpu_optimizer_params_per_s:.3g}",
            "tdp_w": f"{hw.tdp_w:g}",
            "average_power_w": f"{hw.average_power_w:g}",
            "price_usd_per_gpu_hour": f"{hw.price_usd_per_gpu_hour:g}" + (" (estimate)" if hw.price_estimated else ""),
        }
        for key, value in rows.items():
            table.add_row(key, value, hw.sources.get(key, ""))
        for key, value in dataclasses.asdict(hw.efficiency).items():
            table.add_row(f"efficiency.{key}", f"{value:g}", hw.sources.get(f"efficiency.{key}", "default (docs/cost-model.md)"))
        stdout.print(table)

@models_app.command("list", epilog="**Example**\n\n    autotune models list")
def models_list() -> None:
    """List the bundled model specs (for training and serving plans)."""
    with user_errors():
        table = Table(header_style="bold")
        for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "attention", "MoE"):
            table.add_column(col, justify="left" if col in ("name", "attention", "MoE") else "right")
        for name in model_names():
            m = load_model(name)
            moe = f"{m.moe.n_experts} experts, top-{m.moe.top_k}" if m.moe else "-"
            if m.moe and m.moe.n_shared_experts:
                moe += f" + {m.moe.n_shared_experts} shared"
            table.add_row(name, f"{m.n_params / 1e9:.1f}B", f"{m.n_active_params / 1e9:.1f}B", str(m.n_layers),
                          str(m.hidden_size), f"{m.n_heads}/{m.n_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size),
                          _attention_summary(m), moe)
        stdout.print(table)
        stdout.print("Hugging Face ids of these architectures: profiles/catalogue/hf_models.yaml (--model takes them)")


def _attention_summary(m) -> str:
    """``MLA``, ``MLA+DSA``, ``GQA``; with the layers of other kinds and MTP modules when there are any."""
    kind = ("MLA+DSA" if m.dsa else "MLA") if m.mla else ("MHA" if m.n_kv_heads == m.n_heads else "GQA")
    parts = [kind]
    if m.n_layers_of_kind("sliding"):
        parts.append(f"{m.n_layers_of_kind('sliding')} sliding ({m.sliding_window})")
    if m.n_layers_of_kind("linear"):
        parts.append(f"{m.n_layers_of_kind('linear')} linear")
    if m.mtp_layers:
        parts.append(f"MTP {m.mtp_layers}")
    return ", ".join(parts)

@models_app.command("show", epilog="**Example**\n\n    autotune models show llama3-70b\n\n    autotune models show path/to/config.json")
def models_show(name: Annotated[str, typer.Argument(help="Spec name, spec YAML or HF config.json.")]) -> None:
    """Show one model spec (for training and serving) and its derived sizes."""

    with user_errors():
        m = _positional(load_model, name, "--model")
        table = Table(title=m.name + (f": {m.description}" if m.description else ""), header_style="bold")
        table.add_column("field")
        table.add_column("value", justify="right")
        blocks = ("moe", "mla", "dsa", "linear_attention")
        for key, value in dataclasses.asdict(m).items():
            if key in ("name", "description", *blocks) or (key == "layer_types" and not value):
                continue
            if key == "layer_types":
                value = ", ".join(f"{m.n_layers_of_kind(k)} {k}" for k in ("full", "sliding", "linear")
                                  if m.n_layers_of_kind(k)) + f" (layers 0-3: {', '.join(value[:4])})"
            table.add_row(key, str(value))
        for block in blocks:
            if getattr(m, block) is not None:
                for key, value in dataclasses.asdict(getattr(m, block)).items():
                    table.add_row(f"{block}.{key}", str(value))
        table.add_row("parameters", f"{m.n_params:,}")
        table.add_row("active parameters", f"{m.n_active_params:,}")
        if m.mtp_layers:
            table.add_row("MTP parameters (not in the above)", f"{m.mtp_params:,}")
        table.add_row("KV cache per token, bf16 (full layers)", f"{m.kv_cache_bytes_per_token():,.0f} B")
        ids = [e.hf_id for e in catalogue().values() if e.spec == m.name]
        if ids:
            table.add_row("Hugging Face ids", ", ".join(sorted(ids)))
        stdout.print(table)

