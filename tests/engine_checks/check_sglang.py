#!/usr/bin/env python
"""Parse and validate SGLang server command lines with SGLang's own code, on a CPU-only machine.

Used by autotune CI, tests/test_emit_serving_engines.py (target: SGLang 0.5.23).  No weights, no GPU, no network.

    check_sglang.py [--gpu h100|h200|b200|a100|l40s] [--gpus-per-node N] [--json]
                    -- python -m sglang.launch_server --model-path MODEL_DIR [flags...]
    check_sglang.py [options] --batch FILE     # one command line per line (shell quoting, '#' comments)

Accepted spellings of the launcher: ``python -m sglang.launch_server``, ``python3 -m ...``,
``sglang serve``, or the flags alone; leading ``VAR=value`` words are skipped.  MODEL_DIR must be
a local folder with the model's config.json (a tokenizer is not needed: --skip-tokenizer-init is
implied when the folder has none).

Stages, each with SGLang's own code, in the order the launcher runs them:
  1. ``prepare_server_args`` (argparse over every ServerArgs field, --config merging, ServerArgs
     construction); argparse errors -> rejected.
  2. ``ServerArgs.resolve_once`` (the resolution pipeline: model config from config.json, memory
     defaults such as mem_fraction_static / chunked_prefill_size / cuda_graph_max_bs /
     max_running_requests, parallel/DP-attention/EP/PD-disaggregation handling and validation).
  3. ``ServerArgs.check_server_args`` (cross-field validation the Engine runs before publishing).
Device queries are answered as a simulated CUDA GPU (default H100 80 GB, sm90, 8 per node):
torch.cuda's queries are patched, SGLang's own ``override_platform`` supplies the platform facts,
and a stand-in ``nvidia-smi`` on PATH reports the memory.
Exit status: 0 when SGLang accepts every command line, 1 when it rejects one.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import io
import json
import os
import shlex
import stat
import sys
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")

GPUS = {  # name: (major, minor, memory MiB, device name, SMs)
    "a100": (8, 0, 81920, "NVIDIA A100-SXM4-80GB", 108),
    "l40s": (8, 9, 46068, "NVIDIA L40S", 142),
    "h100": (9, 0, 81559, "NVIDIA H100 80GB HBM3", 132),
    "h200": (9, 0, 143771, "NVIDIA H200", 132),
    "b200": (10, 0, 183359, "NVIDIA B200", 148),
    "b300": (10, 3, 275040, "NVIDIA B300 SXM6 AC", 148),
    "gb200": (10, 0, 189471, "NVIDIA GB200", 152),
}


# Compiled CUDA kernel packages that SGLang imports once it believes it is on CUDA.  Their
# libraries need libcuda (absent here) and validation never calls them, so stand-in modules answer
# every import of them (any submodule, any name).
STUB_ROOTS = {"sgl_kernel"}
STUB_VERSIONS = {"sgl_kernel": "0.4.10", "triton": "3.8.0", "torchvision": "0.29.1"}
# Packages SGLang imports at module level but never runs while validating; replaced by stand-ins
# only where they are not installed (the slim, CPU-torch environment).
OPTIONAL_STUBS = ("triton", "torchvision")


class _AnyMeta(type):
    """Stand-in objects: every attribute is another stand-in, calling one gives another, and each
    is a class, so module-level code may also subclass it, hash it or put it in a list."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__qualname__}.{name}")

    def __call__(cls, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]  # used as a decorator: keep the function
        return _stand_in(f"{cls.__qualname__}()")


_STAND_INS: dict = {}


def _stand_in(qual: str):
    """One stand-in per dotted name, so identity and equality checks between two reads of the
    same name (e.g. scalar_types.uint4b8 in a list of supported types) behave."""
    t = _STAND_INS.get(qual)
    if t is None:
        t = _AnyMeta(qual.rsplit(".", 1)[-1], (), {})
        t.__qualname__ = qual
        _STAND_INS[qual] = t
    return t


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return STUB_VERSIONS.get(self.__name__.split(".")[0], "0")
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{self.__name__}.{name}")


class _StubFinder:
    """A meta-path finder that hands out _Stub packages for STUB_ROOTS."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname.split(".")[0] not in STUB_ROOTS:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubFinder, is_package=True)

    @staticmethod
    def create_module(spec):
        m = _Stub(spec.name)
        m.__path__ = []
        return m

    @staticmethod
    def exec_module(module):
        pass


def simulate_gpu(gpu: str, per_node: int) -> None:
    major, minor, mib, name, sms = GPUS[gpu]
    import importlib.util
    for optional in OPTIONAL_STUBS:  # stand-ins only where the real package is absent
        if importlib.util.find_spec(optional) is None:
            STUB_ROOTS.add(optional)
    sys.meta_path.insert(0, _StubFinder)
    # 1. nvidia-smi, which SGLang runs to read the memory size (and the SM version).
    bindir = tempfile.mkdtemp(prefix="fake-nvidia-smi-")
    smi = os.path.join(bindir, "nvidia-smi")
    with open(smi, "w") as f:
        f.write("#!/bin/sh\n"
                "case \"$*\" in\n"
                f"  *memory.total*) for i in $(seq {per_node}); do echo {mib}; done;;\n"
                f"  *compute_cap*) for i in $(seq {per_node}); do echo {major}.{minor}; done;;\n"
                f"  *name*) for i in $(seq {per_node}); do echo '{name}'; done;;\n"
                f"  *) echo 'NVIDIA-SMI stand-in for CPU validation';;\n"
                "esac\n")
    os.chmod(smi, os.stat(smi).st_mode | stat.S_IEXEC)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(per_node)))

    # 2. torch.cuda's device queries.
    import torch
    props = types.SimpleNamespace(name=name, major=major, minor=minor, total_memory=mib * 2**20,
                                  multi_processor_count=sms, gcnArchName="", uuid="GPU-00000000",
                                  L2_cache_size=50 * 2**20, warp_size=32)
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: per_node
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.mem_get_info = lambda device=None: (mib * 2**20, mib * 2**20)
    torch.cuda.is_initialized = lambda: True  # skip the NVML probe; use the answers above
    torch.cuda.current_device = lambda: 0
    if not torch.version.cuda:
        torch.version.cuda = "13.0"

    # 3. SGLang's platform facts, through its own override hook.
    from sglang.srt.runtime_context import override_platform
    cap = major * 10 + minor
    override_platform(
        is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
        is_sm90=cap >= 90, is_sm100=cap >= 100, is_sm100_or_sm110=cap in (100, 103, 110),
        is_sm110=cap == 110, is_sm120=cap >= 120, is_blackwell=cap >= 100,
        is_hopper_with_cuda_12_3=cap == 90, has_amx=False, has_flashinfer=True,
        device_sm=cap, device_capability=(major, minor),
    ).install()


LAUNCHERS = (["python", "-m", "sglang.launch_server"], ["python3", "-m", "sglang.launch_server"],
             ["sglang", "serve"], ["-m", "sglang.launch_server"])


def strip_launcher(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]
    for launcher in LAUNCHERS:
        if words[:len(launcher)] == launcher:
            return words[len(launcher):]
    return words


def one_line(e: BaseException) -> str:
    text = " | ".join(x.strip() for x in str(e).splitlines() if x.strip())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def check(words: list[str]) -> dict:
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.server_args import prepare_server_args

    argv = strip_launcher(words)
    stage = "argparse"
    try:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                sa = prepare_server_args(argv)
        except SystemExit:
            lines = [x for x in err.getvalue().splitlines() if "error:" in x] or [err.getvalue().strip()]
            return {"ok": False, "stage": stage, "error": lines[-1]}
        parser = argparse.ArgumentParser()
        from sglang.srt.server_args import ServerArgs
        ServerArgs.add_cli_args(parser)
        known = set(parser._option_string_actions)
        abbreviated = [w.split("=", 1)[0] for w in argv
                       if w.startswith("--") and len(w) > 2 and w.split("=", 1)[0] not in known]
        if abbreviated:  # argparse took an unambiguous prefix; an emitter must spell flags in full
            return {"ok": False, "stage": stage,
                    "error": f"flag(s) not spelled in full (argparse accepted them as abbreviations): {abbreviated}"}
        stage = "model folder"
        model_dir = sa.model_path
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            raise ValueError(f"{model_dir}: a local folder with config.json is needed (no hub access)")
        if sa.tokenizer_path is None and not any(
                os.path.exists(os.path.join(model_dir, f))
                for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
            sa.skip_tokenizer_init = True
        stage = "resolve_once"
        sa.resolve_once()
        stage = "check_server_args"
        sa.check_server_args()
        cfg = resolving_view(sa)
        keys = ("tp_size", "pp_size", "dp_size", "attn_dp_size", "ep_size", "nnodes", "node_rank",
                "dist_init_addr", "moe_a2a_backend", "quantization", "dtype", "kv_cache_dtype",
                "context_length", "mem_fraction_static", "max_running_requests",
                "chunked_prefill_size", "max_prefill_tokens", "cuda_graph_config", "page_size",
                "attention_backend", "disaggregation_mode", "disaggregation_transfer_backend",
                "disaggregation_bootstrap_port", "load_balance_method", "enable_eplb", "ep_num_redundant_experts")
        out = {"ok": True}
        for k in keys:
            try:
                out[k] = getattr(cfg, k)
            except Exception:  # a field this release does not have
                pass
        try:  # what the checkpoint implies (quantization read from its config.json, context length)
            from sglang.srt.arg_groups.model_override_base import model_config_of
            mc = model_config_of(sa)
            out["model_quantization"] = mc.quantization
            out["model_context_len"] = mc.context_len
        except Exception as e:  # informational only
            out["model_config"] = f"unavailable ({type(e).__name__})"
        cg = out.pop("cuda_graph_config", None)
        if cg is not None:  # the whole capture list is long: keep the sizes that matter
            out["cuda_graph_decode"] = f"{cg.decode.backend}/max_bs={cg.decode.max_bs}"
            out["cuda_graph_prefill"] = f"{cg.prefill.backend}/max_bs={cg.prefill.max_bs}"
        return out
    except BaseException as e:  # SGLang's rejection (asserts and ValueErrors alike)
        if isinstance(e, KeyboardInterrupt):
            raise
        if os.environ.get("CHECK_TRACEBACK"):
            import traceback
            traceback.print_exc()
        return {"ok": False, "stage": stage, "error": one_line(e)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, words = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(prog="check_sglang.py")
    ap.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--batch")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(own)
    if opts.batch:
        with open(opts.batch) as f:
            commands = [c for c in (shlex.split(x, comments=True) for x in f) if c]
    else:
        commands = [words]
    simulate_gpu(opts.gpu, opts.gpus_per_node)
    bad = 0
    for words in commands:
        r = check(words)
        bad += not r["ok"]
        if opts.json:
            print(json.dumps({"command": shlex.join(words), **r}, default=str), flush=True)
        elif r["ok"]:
            print("OK " + " ".join(f"{k}={v}" for k, v in r.items() if k != "ok"), flush=True)
        else:
            print(f"REJECTED at {r['stage']}: {r['error']}", flush=True)
            if len(commands) > 1:
                print(f"   command: {shlex.join(words)}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
