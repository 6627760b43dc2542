#!/usr/bin/env python
"""Parse and validate ``vllm serve`` command lines with vLLM's own code, on a CPU-only machine.

Used by autotune CI, tests/test_emit_serving_engines.py (target: vLLM 0.33.0).  No weights, no GPU, no network.

    check_vllm.py [--gpu h100|h200|b200|a100|l40s] [--gpus-per-node N] [--platform cuda|cpu]
                  [--no-engine-config] [--json] -- vllm serve MODEL_DIR [serve flags...]
    check_vllm.py [options] --batch FILE      # one command line per line (shell quoting; '#' comments)

The words may start with ``vllm serve`` (as an emitted script spells it) or with the model/flags
alone; leading ``VAR=value`` words (CUDA_VISIBLE_DEVICES=...) are skipped.  MODEL_DIR must be a local
folder with the model's config.json (no tokenizer needed: ``--skip-tokenizer-init`` is implied
when the folder has none).

Stages, each with vLLM's own code:
  1. ``vllm serve``'s argument parser (``make_arg_parser``: frontend + every EngineArgs flag);
     argparse errors (unknown flag, bad choice, bad type, bad JSON config) -> rejected.
  2. ``validate_parsed_serve_args`` and the load-balancing/headless checks ``vllm serve`` makes
     before it starts anything (copied from ServeSubcommand.cmd, which would launch the server).
  3. ``AsyncEngineArgs.from_cli_args`` (EngineArgs.__post_init__).
  4. ``create_engine_config`` (ModelConfig from config.json, ParallelConfig, CacheConfig,
     SchedulerConfig, quantization/kv-cache-dtype checks, VllmConfig.__post_init__ and the
     platform's check_and_update_config), against a simulated CUDA GPU (default H100 80 GB,
     compute capability 9.0, 8 per node), because vLLM asks the platform for the device's
     capability, name and memory while it validates (defaults such as max_num_seqs depend on them).
Exit status: 0 when vLLM accepts every command line, 1 when it rejects one (its message is printed).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "CRITICAL")  # its import-time triton_kernels errors are noise here

GPUS = {  # name: (compute capability major, minor, total memory bytes, device name)
    "a100": (8, 0, 80 * 2**30, "NVIDIA A100-SXM4-80GB"),
    "l40s": (8, 9, 46068 * 2**20, "NVIDIA L40S"),
    "h100": (9, 0, 80 * 2**30, "NVIDIA H100 80GB HBM3"),
    "h200": (9, 0, 141 * 2**30, "NVIDIA H200"),
    "b200": (10, 0, 180 * 2**30, "NVIDIA B200"),
    "b300": (10, 3, 275040 * 2**20, "NVIDIA B300 SXM6 AC"),
    "gb200": (10, 0, 189471 * 2**20, "NVIDIA GB200"),
}

# Compiled CUDA extensions that module imports reach while vLLM validates a config.  Loading them
# needs libcuda (absent here); validation never calls into them, so stand-ins take their place.
STUBBED = ("vllm._C_stable_libtorch", "vllm._moe_C_stable_libtorch", "vllm._qutlass_C", "vllm._C",
           "vllm.vllm_flash_attn")


class _Stub(types.ModuleType):
    """A module whose every attribute is a function that must never be called."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def _never(*a, **k):
            raise RuntimeError(f"{self.__name__}.{name} is a CPU-validation stand-in")
        return _never


class _TritonConfig:
    """Stands in for triton.Config where Triton is not installed (module-level autotune lists)."""

    def __init__(self, kwargs=None, num_warps=4, num_stages=3, **extra):
        self.kwargs, self.num_warps, self.num_stages = dict(kwargs or {}), num_warps, num_stages


def install_fake_cuda(gpu: str, per_node: int) -> None:
    """Make vllm.platforms.current_platform a CUDA platform that answers device queries."""
    major, minor, mem, name = GPUS[gpu]
    for mod in STUBBED:
        sys.modules.setdefault(mod, _Stub(mod))
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class SimulatedCuda(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return mem

        @classmethod
        def is_fully_connected(cls, physical_device_ids) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return per_node

        @classmethod
        def get_device_numa_node(cls, device_id: int = 0):
            return None

        @classmethod
        def get_all_device_numa_nodes(cls):
            return None

        @classmethod
        def log_warnings(cls):
            pass

    platforms.current_platform = SimulatedCuda()

    # Capability queries that some modules answer from the compiled ops at import time; answered
    # as the CUDA kernels would on that capability (89 = Ada, 90 = Hopper, 100 = Blackwell).
    import vllm._custom_ops as ops
    ops.cutlass_scaled_mm_supports_fp8 = lambda cap: cap >= 89
    ops.cutlass_scaled_mm_supports_block_fp8 = lambda cap: cap >= 90
    ops.cutlass_scaled_mm_supports_fp4 = lambda cap: cap >= 100
    ops.mxfp4_experts_quant_supported = lambda cap: cap >= 100
    ops.cutlass_group_gemm_supported = lambda cap: cap >= 90

    from vllm.triton_utils import importing, triton
    if isinstance(triton, importing.TritonPlaceholder):
        triton.Config = _TritonConfig


def strip_launcher(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # VAR=value prefixes
    if words[:2] == ["vllm", "serve"]:
        return words[2:]
    if words[:1] == ["serve"]:
        return words[1:]
    return words


def one_line(e: BaseException) -> str:
    text = " | ".join(line.strip() for line in str(e).splitlines()
                      if line.strip() and "errors.pydantic.dev" not in line)
    return f"{type(e).__name__}: {text}"


class Checker:
    def __init__(self, gpu: str, per_node: int, platform: str, engine_config: bool):
        if platform == "cpu":
            os.environ["VLLM_TARGET_DEVICE"] = "cpu"
        else:
            install_fake_cuda(gpu, per_node)
        import vllm
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.entrypoints.common.cli_args import validate_parsed_serve_args
        from vllm.usage.usage_lib import UsageContext
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        self.vllm, self.validate, self.usage = vllm, validate_parsed_serve_args, UsageContext
        parser = FlexibleArgumentParser(prog="vllm")
        sub = parser.add_subparsers(dest="subparser", required=True)
        ServeSubcommand().subparser_init(sub)
        self.parser = parser
        self.engine_config = engine_config

    def not_spelled_in_full(self, argv: list[str]) -> list[str]:
        """argparse takes any unambiguous prefix of a long flag; an emitter must not rely on that."""
        serve = [a for a in self.parser._actions if a.__class__.__name__ == "_SubParsersAction"][0].choices["serve"]
        known = set(serve._option_string_actions)
        bad = []
        for w in argv:
            if w.startswith("--") and len(w) > 2:
                flag = w.split("=", 1)[0]
                if flag not in known and flag.replace("_", "-") not in known:
                    bad.append(flag)
        return bad

    def check(self, words: list[str]) -> dict:
        stage = "argparse"
        try:
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    args = self.parser.parse_args(["serve", *strip_launcher(words)])
            except SystemExit:
                lines = [x for x in err.getvalue().splitlines() if "error:" in x] or [err.getvalue().strip()]
                return {"ok": False, "stage": stage, "error": lines[-1]}

            unknown = self.not_spelled_in_full(strip_launcher(words))
            if unknown:
                return {"ok": False, "stage": stage,
                        "error": f"flag(s) not spelled in full (argparse accepted them as abbreviations): {unknown}"}

            stage = "serve checks"
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
            model_dir = args.model
            if not os.path.isfile(os.path.join(model_dir, "config.json")):
                raise ValueError(f"{model_dir}: a local folder with config.json is needed (no hub access)")
            if args.tokenizer is None and not any(
                    os.path.exists(os.path.join(model_dir, f))
                    for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
                args.skip_tokenizer_init = True
            self.validate(args)
            # The checks `vllm serve` makes before it launches anything (ServeSubcommand.cmd).
            if args.headless and args.api_server_count is not None and args.api_server_count > 0:
                raise ValueError("--api-server-count cannot be used with --headless")
            is_external_lb = args.data_parallel_external_lb or args.data_parallel_rank is not None
            if not args.data_parallel_hybrid_lb and not args.data_parallel_multi_port_external_lb:
                is_hybrid_lb, is_multi_port = args.data_parallel_start_rank is not None, False
            else:
                is_hybrid_lb = args.data_parallel_hybrid_lb
                is_multi_port = args.data_parallel_multi_port_external_lb
            if sum([is_multi_port, is_external_lb, is_hybrid_lb]) > 1:
                raise ValueError("Cannot use more than one data parallel load balancing mode")

            stage = "EngineArgs"
            ea = self.vllm.AsyncEngineArgs.from_cli_args(args)
            out = {"ok": True, "model": ea.model, "tp": ea.tensor_parallel_size,
                   "pp": ea.pipeline_parallel_size, "dp": ea.data_parallel_size}
            if self.engine_config:
                stage = "create_engine_config"
                cfg = ea.create_engine_config(usage_context=self.usage.OPENAI_API_SERVER,
                                              headless=bool(args.headless))
                if args.headless and ea.data_parallel_hybrid_lb:
                    raise ValueError("data_parallel_hybrid_lb is not applicable in headless mode")
                pc, cc, sc, mc = cfg.parallel_config, cfg.cache_config, cfg.scheduler_config, cfg.model_config
                out.update({
                    "world_size": pc.world_size, "dp_local": pc.data_parallel_size_local,
                    "nnodes": pc.nnodes, "expert_parallel": pc.enable_expert_parallel,
                    "eplb": pc.enable_eplb, "redundant_experts": pc.eplb_config.num_redundant_experts,
                    "executor": pc.distributed_executor_backend,
                    "max_model_len": mc.max_model_len, "dtype": str(mc.dtype).replace("torch.", ""),
                    "quantization": mc.quantization, "kv_cache_dtype": cc.cache_dtype,
                    "gpu_memory_utilization": cc.gpu_memory_utilization, "block_size": cc.block_size,
                    "max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens,
                    "chunked_prefill": sc.enable_chunked_prefill,
                    "kv_transfer": (f"{cfg.kv_transfer_config.kv_connector}/{cfg.kv_transfer_config.kv_role}"
                                    if cfg.kv_transfer_config else None),
                })
            return out
        except Exception as e:  # vLLM's rejection
            if os.environ.get("CHECK_TRACEBACK"):
                import traceback
                traceback.print_exc()
            return {"ok": False, "stage": stage, "error": one_line(e)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, words = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(prog="check_vllm.py")
    ap.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--platform", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--no-engine-config", action="store_true", help="stop after EngineArgs")
    ap.add_argument("--batch", help="file with one command line per line")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args(own)
    if opts.batch:
        with open(opts.batch) as f:
            commands = [shlex.split(x, comments=True) for x in f]
        commands = [c for c in commands if c]
    else:
        commands = [words]
    checker = Checker(opts.gpu, opts.gpus_per_node, opts.platform, not opts.no_engine_config)
    bad = 0
    for words in commands:
        r = checker.check(words)
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
