"""Slurm: an ``sbatch`` script that runs a framework's command under ``srun`` and torchrun.

One task per node (``--ntasks-per-node=1``); each task runs torchrun, which starts
one process per GPU and meets the others through the c10d rendezvous on the first
node of the allocation (where the batch script itself runs) at a port that is free
there.  The framework's own files (its config, or the Megatron arguments) are
written beside the script, and the script refers to them from
``$SLURM_SUBMIT_DIR``: submit it from that folder.
"""

from __future__ import annotations

from dataclasses import replace

from . import shell
from .base import (
    EmitContext,
    Emitter,
    header,
    launch_body,
    program_groups,
    torchrun_groups,
)
from .shell import Raw

SCRIPT = "launch.sbatch"

# The environment every run gets: NCCL reports problems, failures end the job rather than hang it.
BASE_ENV: tuple[tuple[str, object], ...] = (
    ("NCCL_DEBUG", "WARN"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", 1),
    ("TORCH_DISTRIBUTED_DEBUG", "OFF"),
    ("PYTHONUNBUFFERED", 1),
    ("OMP_NUM_THREADS", 1),
    ("LOGLEVEL", "INFO"),
)

HERE_SLURM = Raw('"${SLURM_SUBMIT_DIR:-$PWD}"')
FREE_PORT = Raw(
    "\"$(python3 -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1]); s.close()')\""
)


def _placement_note(context: EmitContext) -> list[str]:
    """Where the nodes of a rack-scale NVLink domain (GB200/GB300 NVL72: 18 trays of 4) must lie for the estimate to
    hold: it prices traffic between the nodes of one domain at NVLink rates, which a scattered allocation sends over
    the network instead.  Slurm's topology/block plugin keeps a job's nodes in blocks of ``--segment`` nodes."""
    from ...inputs.hardware import Cluster

    hw = context.hardware_spec
    domain, per_node = hw.scale_up_domain_gpus, context.gpus_on_each_node
    if not domain or domain <= per_node or context.nodes < 2:
        return []
    # the GPUs of a domain the estimate's process groups use: all 72 of an NVL72 rack where the job fills its racks,
    # else the largest power-of-two number of its trays (64), as Cluster.usable_scale_up_domain prices it
    usable = Cluster(hw, context.n_gpus, per_node).usable_scale_up_domain
    in_domain = max(usable // per_node, 1)  # nodes of one domain the estimate groups together
    # Slurm's --segment must divide the job's node count: the largest that does and fits in one domain
    segment = max(k for k in range(1, min(context.nodes, in_domain) + 1) if context.nodes % k == 0)
    where = ("all of them in one rack" if context.nodes <= in_domain
             else f"each {in_domain} nodes of {per_node} GPUs ({in_domain * per_node} of a rack's {domain}) in one rack")
    text = (f"The estimate takes these {context.nodes} nodes to share NVLink domains ({hw.name}: {domain} GPUs a "
            f"domain), {where}; a scattered allocation sends that traffic over the network.")
    if segment > 1:  # a block of one node keeps nothing together: no --segment to advise
        text += (f" On a cluster with Slurm's topology/block, add #SBATCH --segment={segment} to the lines above to keep "
                 f"blocks of {segment} nodes in one rack (if the site's block size allows it).")
    else:
        text += f" No block of several nodes divides {context.nodes} nodes: ask your site how to keep them in racks."
    return ["", text]


def sbatch_script(framework: Emitter, context: EmitContext) -> str:
    assert framework.launch is not None
    run = framework.launch(context)
    job = shell.job_name(f"autotune-{context.model.name}")
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job}",
        f"#SBATCH --nodes={context.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={context.gpus_on_each_node}",
        "#SBATCH --exclusive",
        "#SBATCH --output=%x-%j.out",
    ]
    lines += shell.comment_lines(header(f"Slurm with torchrun, running {framework.release}", context, run.notes))
    lines += shell.comment_lines([
        "",
        "Submit from the folder that holds this script and its framework files: sbatch " + SCRIPT,
        "Add your partition, account and time limit above (#SBATCH --partition=..., --account=..., --time=...).",
    ])
    lines += shell.comment_lines(_placement_note(context))
    lines += ["set -euo pipefail", "", shell.assignment("HERE", HERE_SLURM)]
    lines += shell.comment_lines(["The batch script runs on the first node: it is the rendezvous host, at a port free there."])
    lines += [
        shell.assignment("MASTER_ADDR", Raw('"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"')),
        shell.default_assignment("MASTER_PORT", FREE_PORT),
        "export MASTER_ADDR MASTER_PORT",
        "",
    ]
    # a plan whose optimizer runs on the host sets its own OMP_NUM_THREADS (base.offload_threads)
    lines += ["export " + shell.assignment(name, value) for name, value in BASE_ENV
              if not (name == "OMP_NUM_THREADS" and context.plan.offload == "cpu")]
    lines.append("")
    lines += launch_body(run)
    srun = [("srun",), ("--kill-on-bad-exit=1",), ("--ntasks-per-node=1",), (f"--nodes={context.nodes}",)]
    lines += shell.command(srun + torchrun_groups(context, Raw('"${SLURM_JOB_ID}"')) + program_groups(run))
    return "\n".join(lines) + "\n"


def make_emitter(frameworks: dict[str, Emitter], default: str = "megatron") -> Emitter:
    """The Slurm emitter: it expresses what the wrapped framework (``context.framework``) expresses."""

    def framework_of(context: EmitContext | None) -> Emitter:
        name = context.framework if context is not None else default
        return frameworks[name]

    def render(context: EmitContext) -> dict[str, str]:
        framework = framework_of(context)
        files = framework.render(context)
        files[SCRIPT] = sbatch_script(framework, context)
        return files

    base = frameworks[default]
    emitter = Emitter(
        name="slurm",
        release=f"Slurm sbatch with torchrun ({base.release} unless --framework says otherwise)",
        summary="sbatch script running the framework's command under srun with a torchrun c10d rendezvous",
        limits=base.limits,
        render_files=render,
        workload_checks=base.workload_checks,
    )
    return emitter


def for_framework(slurm: Emitter, framework: Emitter) -> Emitter:
    """The Slurm emitter specialised to one framework (its limits are the framework's)."""
    return replace(slurm, limits=framework.limits, workload_checks=framework.workload_checks,
                   release=f"Slurm sbatch with torchrun running {framework.release}")
