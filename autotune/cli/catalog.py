"""``autotune hardware list|show`` and ``autotune models list|show``: the bundled profiles and specs."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.table import Table

from ..inputs.hardware import hardware_names, load_hardware
from ..inputs.modelspec import load_model, model_names
from .app import app, stdout, user_errors

hardware_app = typer.Typer(help="Bundled hardware profiles (used by training and serving plans).", no_args_is_help=True)
models_app = typer.Typer(help="Bundled model specs (used by training and serving plans).", no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")


@hardware_app.command("list", epilog="**Example**\n\n    autotune hardware list")
def hardware_list() -> None:
    """List the bundled hardware profiles (the GPUs training and serving plans run on)."""
    with user_errors():
        table = Table(header_style="bold")
        for col in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GiB", "HBM GB/s", "GPUs/node", "NIC GB/s/GPU", "$/GPU-h"):
            table.add_column(col, justify="left" if col == "name" else "right")
        for name in hardware_names():
            hw = load_hardware(name)
            fp8 = hw.peak_tflops.get("fp8")
            table.add_row(name, f"{hw.peak_tflops['bf16']:g}", f"{fp8:g}" if fp8 else "-", f"{hw.memory_gib:g}",
                          f"{hw.memory_bandwidth_gb_per_s:g}", str(hw.gpus_per_node),
                          f"{hw.inter_node.bandwidth_gb_per_s:g}", f"{hw.price_usd_per_gpu_hour:.2f}")
        stdout.print(table)

@hardware_app.command("show", epilog="**Example**\n\n    autotune hardware show h100-sxm5-80gb")
def hardware_show(name: Annotated[str, typer.Argument(help="Profile name or YAML path.")]) -> None:
    """Show one hardware profile (for training and serving) with the source of every number."""

    with user_errors():
        hw = load_hardware(name)
        table = Table(title=f"{hw.name}: {hw.description}", header_style="bold", show_lines=False)
        table.add_column("field")
        table.add_column("value", justify="right")
        table.add_column("source")
        rows = {
            "peak_tflops": ", ".join(f"{k} {v:g}" for k, v in hw.peak_tflops.items()),
            "memory_gib": f"{hw.memory_gib:g}",
            "memory_bandwidth_gb_per_s": f"{hw.memory_bandwidth_gb_per_s:g}",
            "gpus_per_node": str(hw.gpus_per_node),
            "intra_node": f"{hw.intra_node.bandwidth_gb_per_s:g} GB/s, {hw.intra_node.latency_us:g} us",
            "inter_node": f"{hw.inter_node.bandwidth_gb_per_s:g} GB/s, {hw.inter_node.latency_us:g} us",
            "host_link_bandwidth_gb_per_s": f"{hw.host_link_bandwidth_gb_per_s:g}",
            "cpu_optimizer_params_per_s": f"{hw.cpu_optimizer_params_per_s:.3g}",
            "tdp_w": f"{hw.tdp_w:g}",
            "average_power_w": f"{hw.average_power_w:g}",
            "price_usd_per_gpu_hour": f"{hw.price_usd_per_gpu_hour:g}",
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
        for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "MoE"):
            table.add_column(col, justify="left" if col in ("name", "MoE") else "right")
        for name in model_names():
            m = load_model(name)
            moe = f"{m.moe.n_experts} experts, top-{m.moe.top_k}" if m.moe else "-"
            table.add_row(name, f"{m.n_params / 1e9:.1f}B", f"{m.n_active_params / 1e9:.1f}B", str(m.n_layers),
                          str(m.hidden_size), f"{m.n_heads}/{m.n_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size), moe)
        stdout.print(table)

@models_app.command("show", epilog="**Example**\n\n    autotune models show llama3-70b\n\n    autotune models show path/to/config.json")
def models_show(name: Annotated[str, typer.Argument(help="Spec name, spec YAML or HF config.json.")]) -> None:
    """Show one model spec (for training and serving) and its derived sizes."""

    with user_errors():
        m = load_model(name)
        table = Table(title=m.name + (f": {m.description}" if m.description else ""), header_style="bold")
        table.add_column("field")
        table.add_column("value", justify="right")
        for key, value in dataclasses.asdict(m).items():
            if key in ("name", "description", "moe"):
                continue
            table.add_row(key, str(value))
        if m.moe:
            for key, value in dataclasses.asdict(m.moe).items():
                table.add_row(f"moe.{key}", str(value))
        table.add_row("parameters", f"{m.n_params:,}")
        table.add_row("active parameters", f"{m.n_active_params:,}")
        stdout.print(table)

