"""The serving engines' own parsers and config validation read what `autotune emit --format vllm|sglang` writes
(tests marked `frameworks`).

They need the engines, CPU-only and without weights, in environments of their own:

    bash .ci/install-engines.sh
    AUTOTUNE_VLLM_VENV=.venv-vllm AUTOTUNE_SGLANG_VENV=.venv-sglang python -m pytest -q -m frameworks \
        tests/test_emit_serving_engines.py

How: each plan is emitted as a user would (a search's winner, or a plan string, with a checkpoint); the script
runs once per node (NODE_RANK=k) with stand-in ``vllm``, ``vllm-router`` and ``python`` programs that record
their arguments instead of starting anything; every recorded command then goes through the engine's own code
in its environment (``tests/engine_checks``): vLLM 0.33's ``vllm serve`` parser, its pre-start checks,
``EngineArgs`` and ``create_engine_config``; SGLang 0.5.23's ``prepare_server_args``, ``resolve_once`` and
``check_server_args``; the routers' ``RouterArgs``.  The engines ask the GPU for its capability and memory
while they validate; the checkers answer as the plan's GPU would (H100, H200, B200, GB200 with 4 per node).
Model folders hold only a ``config.json`` (the published configs of tests/data/hf_configs, with the
``quantization_config`` of the checkpoint the plan names).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import ServeWorkload
from autotune.outputs.emit.formats import serving_files
from autotune.search.api import ServingSearch, search_serving
from autotune.serving.plan import parse_serve_plan

ROOT = Path(__file__).resolve().parent.parent
CHECKS = Path(__file__).resolve().parent / "engine_checks"
CONFIGS = Path(__file__).resolve().parent / "data" / "hf_configs"
VENVS = {"vllm": Path(os.environ.get("AUTOTUNE_VLLM_VENV", ROOT / ".venv-vllm")),
         "sglang": Path(os.environ.get("AUTOTUNE_SGLANG_VENV", ROOT / ".venv-sglang"))}
# .ci/install-engines.sh writes the stamp last: an environment still being built counts as missing
MISSING = [f"{name} ({venv})" for name, venv in VENVS.items() if not (venv / ".autotune-engine").exists()]
REQUIRED = os.environ.get("AUTOTUNE_REQUIRE_FRAMEWORKS") == "1"
pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(bool(MISSING) and not REQUIRED,
                       reason=f"engine environments not found: {', '.join(MISSING)}; run .ci/install-engines.sh"),
]

# The simulated GPU each hardware profile is checked as: (checker GPU name, GPUs per node).
SIMULATED = {"h100-sxm5-80gb": ("h100", 8), "h200-sxm-141gb": ("h200", 8), "b200-sxm-180gb": ("b200", 8),
             "gb200-nvl72": ("gb200", 4), "b300-sxm-288gb": ("b300", 8)}

# quantization_config blocks of the checkpoint formats (as their exporters write them)
QUANT = {
    "fp8": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    "compressed-tensors:fp8": {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "float", "symmetric": True,
                                                  "strategy": "channel", "dynamic": False},
                                      "input_activations": {"num_bits": 8, "type": "float", "symmetric": True,
                                                            "strategy": "token", "dynamic": True}}},
        "ignore": ["lm_head"]},
    "compressed-tensors:int8": {
        "quant_method": "compressed-tensors", "format": "int-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "int", "symmetric": True,
                                                  "strategy": "channel", "dynamic": False},
                                      "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                                            "strategy": "token", "dynamic": True}}},
        "ignore": ["lm_head"]},
    "modelopt": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                 "exclude_modules": ["lm_head"]},
}
# model spec -> published config.json folder (tests/data/hf_configs)
CONFIG_OF = {"llama3-70b": "Llama-3.1-70B", "llama3.1-70b": "Llama-3.1-70B", "llama3-8b": "Meta-Llama-3-8B",
             "mixtral-8x7b": "Mixtral-8x7B-v0.1", "deepseek-v3": "DeepSeek-V3", "qwen3-32b": "Qwen3-32B",
             "qwen3-235b-a22b": "Qwen3-235B-A22B-FP8", "gpt-oss-120b": "gpt-oss-120b", "llama3-405b": "Llama-3.1-70B"}
LLAMA_405B = {"hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126, "num_attention_heads": 128,
              "num_key_value_heads": 8}

# (name, model, hardware, GPUs, plan string or "search", input, output, checkpoint, quantization_config key)
PLANS = [
    ("70B 8xH100: the search's winner", "llama3-70b", "h100-sxm5-80gb", 8, "search", 2048, 256, "bf16", None),
    ("70B 8xH100, fp8 checkpoint: the search's winner", "llama3-70b", "h100-sxm5-80gb", 8, "search", 2048, 256, "fp8", "fp8"),
    ("70B TP4 x4 replicas over 2 nodes, online fp8", "llama3-70b", "h100-sxm5-80gb", 16,
     "tp=4,weights=fp8,kv=fp8,max_batch=64", 2048, 256, "bf16", None),
    ("70B TP8 fp8 from a compressed-tensors checkpoint", "llama3-70b", "h100-sxm5-80gb", 8,
     "tp=8,weights=fp8,kv=fp8,max_batch=128", 4096, 512, "compressed-tensors", "compressed-tensors:fp8"),
    ("70B TP4 x2 int4 from an AWQ checkpoint", "llama3-70b", "h100-sxm5-80gb", 8,
     "tp=4,weights=int4,kv=fp8,max_batch=64", 2048, 256, "awq", "awq"),
    ("70B TP4 x2 int4 from a GPTQ checkpoint", "llama3-70b", "h200-sxm-141gb", 8,
     "tp=4,weights=int4,kv=bf16,max_batch=64", 2048, 256, "gptq", "gptq"),
    ("70B TP4 x2 int8 W8A8 from a compressed-tensors checkpoint", "llama3-70b", "h100-sxm5-80gb", 8,
     "tp=4,weights=int8,kv=fp8,max_batch=64", 2048, 256, "compressed-tensors:int8", "compressed-tensors:int8"),
    ("70B TP2 x4 NVFP4 from a ModelOpt checkpoint on B200", "llama3-70b", "b200-sxm-180gb", 8,
     "tp=2,weights=fp4,kv=fp8,max_batch=128", 2048, 256, "modelopt", "modelopt"),
    ("405B TP8 PP2 over 2 nodes", "llama3-405b", "h100-sxm5-80gb", 16, "tp=8,pp=2,weights=fp8,kv=fp8,max_batch=64",
     2048, 256, "bf16", None),
    ("405B TP16 over 2 nodes", "llama3-405b", "h200-sxm-141gb", 16, "tp=16,weights=fp8,kv=fp8,max_batch=64",
     2048, 256, "bf16", None),
    ("8B engine data parallelism DP8", "llama3-8b", "h100-sxm5-80gb", 8, "tp=1,dp=8,weights=bf16,max_batch=1024",
     1024, 256, "bf16", None),
    ("8B x8 replicas behind a router", "llama3-8b", "h100-sxm5-80gb", 8, "tp=1,weights=fp8,kv=fp8,max_batch=256",
     1024, 256, "bf16", None),
    ("Qwen3-32B TP2 x4, online fp8", "qwen3-32b", "h200-sxm-141gb", 8, "tp=2,weights=fp8,kv=fp8,max_batch=256",
     4096, 1024, "bf16", None),
    ("Mixtral TP8 EP8", "mixtral-8x7b", "h100-sxm5-80gb", 8, "tp=8,ep=8,weights=bf16,max_batch=256", 2048, 256,
     "bf16", None),
    ("Mixtral TP2 DP4 EP8 (attention DP)", "mixtral-8x7b", "h100-sxm5-80gb", 8, "tp=2,dp=4,ep=8,weights=fp8,kv=fp8,max_batch=512",
     2048, 256, "bf16", None),
    ("Mixtral NVFP4 experts quantized at load on B200", "mixtral-8x7b", "b200-sxm-180gb", 8,
     "tp=8,ep=8,weights=fp4,kv=fp8,max_batch=256", 2048, 256, "bf16", None),
    ("DeepSeek-V3 DEP8 on H200, fp8 checkpoint", "deepseek-v3", "h200-sxm-141gb", 8,
     "tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=1024", 1024, 1024, "fp8", "native"),
    ("DeepSeek-V3 DEP16 over 2 H200 nodes (wide EP)", "deepseek-v3", "h200-sxm-141gb", 16,
     "tp=1,dp=16,ep=16,weights=fp8,kv=fp8,max_batch=2048", 1024, 1024, "fp8", "native"),
    ("DeepSeek-V3 DEP24 over 3 H200 nodes: 256 experts + 8 redundant copies (EPLB)", "deepseek-v3", "h200-sxm-141gb",
     24, "tp=1,dp=24,ep=24,weights=fp8,kv=fp8,max_batch=1920", 1024, 1024, "fp8", "native"),
    ("DeepSeek-V3 DEP32 in a GB200 NVL72 rack (8 trays)", "deepseek-v3", "gb200-nvl72", 32,
     "tp=1,dp=32,ep=32,weights=fp8,kv=fp8,max_batch=4096", 1024, 1024, "fp8", "native"),
    ("DeepSeek-V3 DEP72 on a whole GB200 NVL72 rack (a rank's prefill chunk whole KV pages)", "deepseek-v3",
     "gb200-nvl72", 72, "tp=1,dp=72,ep=72,weights=fp8,kv=fp8,max_batch=4104", 2048, 1024, "fp8", "native"),
    ("DeepSeek-V3 TP8 on B200, fp8 checkpoint", "deepseek-v3", "b200-sxm-180gb", 8,
     "tp=8,weights=fp8,kv=fp8,max_batch=256", 4096, 1024, "fp8", "native"),
    ("Qwen3-235B TP4 EP4 x2, fp8 checkpoint", "qwen3-235b-a22b", "h200-sxm-141gb", 8,
     "tp=4,ep=4,weights=fp8,kv=fp8,max_batch=256", 2048, 512, "fp8", "native"),
    ("gpt-oss-120b TP2 x4, MXFP4 checkpoint", "gpt-oss-120b", "h100-sxm5-80gb", 8,
     "tp=2,weights=mxfp4,kv=bf16,max_batch=256", 1024, 1024, "mxfp4", "native"),
    ("70B disaggregated 2P(TP2) + 1D(TP4)", "llama3-70b", "h100-sxm5-80gb", 8,
     "prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=4,weights=fp8,kv=fp8,max_batch=128", 4096, 256,
     "bf16", None),
    ("DeepSeek-V3 disaggregated 1P(DEP8) + 1D(DEP8) over 2 nodes", "deepseek-v3", "h200-sxm-141gb", 16,
     "prefill_workers=1,prefill_dp=8,prefill_ep=8,decode_workers=1,decode_dp=8,decode_ep=8,weights=fp8,kv=fp8,"
     "max_batch=1024", 4096, 1024, "fp8", "native"),
]
ENGINES = ("vllm", "sglang")
# Plans emitted with a stated --memory-fraction (the value of each engine's own memory flag).
FRACTIONS = {"70B TP8 fp8 from a compressed-tensors checkpoint": {"vllm": 0.95, "sglang": 0.86}}


def _model_dir(root: Path, model: str, quant: str | None) -> Path:
    folder = root / f"{model}--{(quant or 'bf16').replace(':', '-')}"
    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((CONFIGS / CONFIG_OF[model] / "config.json").read_text())
    if model == "llama3-405b":
        config.update(LLAMA_405B)
    if quant != "native":
        config.pop("quantization_config", None)
        if quant:
            config["quantization_config"] = QUANT[quant]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


STUB = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
argv = [name] + sys.argv[1:]
with open(os.environ["AUTOTUNE_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": argv, "devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}}) + "\\n")
"""


def _commands(script: str, tmp: Path, model_dir: Path, n_nodes: int) -> list[dict]:
    """Run the emitted script once per node with stand-in launchers; the commands it would have run."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("vllm", "vllm-router", "python", "python3"):
        path = bindir / name
        path.write_text(STUB.format(python=sys.executable))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (tmp / "serve.sh").write_text(script)
    record = tmp / "record.jsonl"
    record.unlink(missing_ok=True)
    addrs = " ".join(f"10.0.0.{k + 1}" for k in range(n_nodes))
    for rank in range(n_nodes):
        env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "MODEL": str(model_dir),
               "NODE_RANK": str(rank), "NODE_ADDRS": addrs, "AUTOTUNE_RECORD": str(record)}
        subprocess.run(["bash", str(tmp / "serve.sh")], env=env, check=True, timeout=60)
    return [json.loads(line) for line in record.read_text().splitlines()]


def _emit(engine: str, case: tuple, tmp: Path) -> tuple[list[dict], str]:
    name, model, hardware, gpus, plan_text, i, o, checkpoint, quant = case
    spec = load_model(model)
    if plan_text == "search":
        outcome = search_serving(ServingSearch(model=model, hardware=hardware, gpus=gpus, engine=engine,
                                               checkpoint=checkpoint, workload=ServeWorkload(i, o), top=1))
        plan = outcome.result.ranked[0].plan
    else:
        plan = parse_serve_plan(plan_text, gpus)
    files, estimate = serving_files(engine, plan, spec, hardware, i, o, checkpoint=checkpoint,
                                    memory_fraction=FRACTIONS.get(name, {}).get(engine))
    assert estimate["fits"], (name, engine, estimate.get("infeasible_reason"))
    assert "needs_checkpoint" not in estimate, (name, engine, estimate["needs_checkpoint"])
    script = next(iter(files.values()))
    n_nodes = max(int(line.split(")")[0]) for line in script.splitlines() if line[:1].isdigit() and line.endswith(")")) + 1
    model_dir = _model_dir(tmp.parent, model, quant)
    return _commands(script, tmp, model_dir, n_nodes), plan.as_string()


def _run_checker(engine: str, script: str, gpu: str, per_node: int, commands: list[list[str]], tmp: Path) -> list[dict]:
    batch = tmp / f"{engine}-{script}-{gpu}.txt"
    batch.write_text("\n".join(shlex.join(c) for c in commands) + "\n")
    python = VENVS["sglang" if script == "check_router.py" else engine] / "bin" / "python"  # routers: in SGLang's
    args = [str(python), str(CHECKS / script), "--batch", str(batch), "--json"]
    if script != "check_router.py":
        args += ["--gpu", gpu, "--gpus-per-node", str(per_node)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env, cwd=str(tmp))
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(commands), f"{engine} {script} {gpu}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return results


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every plan emitted for both engines, and the engines' verdict on every command of every script."""
    root = tmp_path_factory.mktemp("engines")
    emitted: dict[tuple[str, str], tuple[list[dict], str]] = {}
    for engine in ENGINES:
        for k, case in enumerate(PLANS):
            tmp = root / f"{engine}-{k}"
            tmp.mkdir()
            emitted[(engine, case[0])] = _emit(engine, case, tmp)
    # group the distinct commands by checker and simulated GPU; one process per group
    groups: dict[tuple[str, str, str, int], list[list[str]]] = {}
    owners: dict[tuple[str, str, str, int, str], list[tuple[str, str]]] = {}
    hardware = {case[0]: case[2] for case in PLANS}
    for (engine, name), (commands, _) in emitted.items():
        gpu, per_node = SIMULATED[hardware[name]]
        for c in commands:
            argv = c["argv"]
            script = "check_router.py" if argv[0] == "vllm-router" or "sglang_router.launch_router" in argv else \
                f"check_{engine}.py"
            key = (engine, script, gpu if script != "check_router.py" else "-", per_node)
            line = shlex.join(argv)
            if line not in {shlex.join(x) for x in groups.setdefault(key, [])}:
                groups[key].append(argv)
            owners.setdefault((*key, line), []).append((engine, name))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_run_checker, key[0], key[1], key[2], key[3], cmds, root)
                   for key, cmds in groups.items()}
        verdicts = {}
        for key, future in futures.items():
            for argv, result in zip(groups[key], future.result()):
                for owner in owners[(*key, shlex.join(argv))]:
                    verdicts.setdefault(owner, []).append(result)
    return emitted, verdicts


@pytest.mark.parametrize("engine", ENGINES)
def test_at_least_twenty_plans_are_checked_per_engine(checked, engine):
    emitted, verdicts = checked
    names = [name for (e, name) in emitted if e == engine]
    assert len(names) >= 20
    kinds = " ".join(names)
    for word in ("disaggregated", "over 2 nodes", "DeepSeek", "Mixtral", "checkpoint", "router", "NVL72"):
        assert word in kinds


@pytest.mark.parametrize("case", [c[0] for c in PLANS])
@pytest.mark.parametrize("engine", ENGINES)
def test_the_engine_accepts_every_command_of_the_plan(checked, engine, case):
    emitted, verdicts = checked
    commands, plan = emitted[(engine, case)]
    results = verdicts[(engine, case)]
    assert results, f"{case}: no command recorded"
    rejected = [f"{r['command']}\n    -> {r.get('stage')}: {r.get('error')}" for r in results if not r["ok"]]
    assert not rejected, f"{engine} rejected the plan {plan}:\n" + "\n".join(rejected)
    servers = [c for c in commands if c["argv"][0] == "vllm" or "sglang.launch_server" in c["argv"]]
    assert all(c["devices"] for c in servers)  # every server is pinned to its node's GPUs


def test_what_the_engines_resolved_matches_the_plan(checked):
    """The engines read the plan as meant: parallel sizes, batch limit, memory flag and context length."""
    emitted, verdicts = checked
    vllm = {r["command"]: r for r in verdicts[("vllm", "70B TP4 x4 replicas over 2 nodes, online fp8")]}
    server = next(r for c, r in vllm.items() if "vllm serve" in c)
    assert server["tp"] == 4 and server["max_num_seqs"] == 64 and server["quantization"] == "fp8_per_tensor"
    assert server["gpu_memory_utilization"] == pytest.approx(0.92) and server["max_model_len"] == 3072
    wide = [r for r in verdicts[("vllm", "DeepSeek-V3 DEP16 over 2 H200 nodes (wide EP)")] if r.get("dp")]
    assert wide and all(r["dp"] == 16 and r["expert_parallel"] for r in wide)
    sg = next(r for r in verdicts[("sglang", "DeepSeek-V3 DEP8 on H200, fp8 checkpoint")] if "tp_size" in r)
    assert sg["tp_size"] == 8 and sg["attn_dp_size"] == 8 and sg["ep_size"] == 8
    # an EP width that does not divide the experts: both engines balance with the redundant copies the plan counts
    eplb = "DeepSeek-V3 DEP24 over 3 H200 nodes: 256 experts + 8 redundant copies (EPLB)"
    served = [r for r in verdicts[("vllm", eplb)] if r.get("dp")]
    assert served and all(r["eplb"] and r["redundant_experts"] == 8 and r["expert_parallel"] for r in served)
    served = [r for r in verdicts[("sglang", eplb)] if "ep_size" in r]
    assert served and all(r["enable_eplb"] and r["ep_num_redundant_experts"] == 8 and r["ep_size"] == 24
                          for r in served)
    # a stated --memory-fraction is the value each engine resolves
    (case, fractions), = FRACTIONS.items()
    stated = next(r for r in verdicts[("vllm", case)] if "gpu_memory_utilization" in r)
    assert stated["gpu_memory_utilization"] == pytest.approx(fractions["vllm"])
    stated = next(r for r in verdicts[("sglang", case)] if "mem_fraction_static" in r)
    assert stated["mem_fraction_static"] == pytest.approx(fractions["sglang"])


# The memory each simulated GPU reports to SGLang (tests/engine_checks/check_sglang.py GPUS), MiB
SIMULATED_MIB = {"h100": 81559, "h200": 143771, "b200": 183359, "gb200": 189471, "b300": 275040}


def test_sglangs_own_default_memory_fraction_is_the_emitted_one(checked, tmp_path):
    """Each SGLang server's --mem-fraction-static is what SGLang 0.5.23 itself resolves with the flag left out
    (arg_groups/memory_hook.py), compared as the memory it reserves outside the static pool: the emitted fraction is
    of the profile's memory (the total CUDA reports), SGLang's of the simulated GPU's nvidia-smi total (a few hundred
    MiB apart), and each is
    rounded to three decimals (half a thousandth of the GPU each way).  A plan emitted with a stated fraction keeps
    that fraction and is left out."""
    emitted, _ = checked
    hardware = {case[0]: case[2] for case in PLANS}
    groups: dict[tuple[str, int], list[tuple[str, float, list[str]]]] = {}
    for (engine, name), (commands, _) in emitted.items():
        if engine != "sglang" or name in FRACTIONS:
            continue
        gpu, per_node = SIMULATED[hardware[name]]
        seen = set()
        for c in commands:
            argv = c["argv"]
            if "sglang.launch_server" not in argv:
                continue
            k = argv.index("--mem-fraction-static")
            bare = argv[:k] + argv[k + 2:]
            line = shlex.join(bare[:bare.index("--node-rank")] if "--node-rank" in bare else bare)
            if line not in seen:
                seen.add(line)
                groups.setdefault((gpu, per_node), []).append((name, float(argv[k + 1]), bare))
    from autotune.inputs.hardware import load_hardware
    profile_mib = {SIMULATED[h][0]: load_hardware(h).memory_gib * 1024 for h in SIMULATED}
    off = []
    for (gpu, per_node), rows in groups.items():
        results = _run_checker("sglang", "check_sglang.py", gpu, per_node, [r[2] for r in rows], tmp_path)
        for (name, ours, _), result in zip(rows, results):
            assert result["ok"], (name, result)
            theirs = float(result["mem_fraction_static"])
            ours_mib, theirs_mib = (1 - ours) * profile_mib[gpu], (1 - theirs) * SIMULATED_MIB[gpu]
            # SGLang divides its reserve by nvidia-smi's total and applies the fraction to CUDA's, autotune's fraction
            # is of CUDA's total (the profile's memory_gib, 0.4% less on a B200): 128 MiB for that, beside the rounding
            if abs(ours_mib - theirs_mib) > 0.0005 * (profile_mib[gpu] + SIMULATED_MIB[gpu]) + 128:
                off.append(f"{name}: autotune {ours} ({ours_mib:.0f} MiB reserved), SGLang {theirs} "
                           f"({theirs_mib:.0f} MiB)")
    assert sum(len(r) for r in groups.values()) >= 25
    assert not off, "\n".join(dict.fromkeys(off))
