#!/usr/bin/env bash
# Installs, CPU only, the parts of the serving engines whose own parsers and config validation check what
# `autotune emit --format vllm|sglang` writes (the tests marked `frameworks` in
# tests/test_emit_serving_engines.py), each in a virtual environment of its own (their pins conflict:
# vLLM wants transformers 5.20 and compressed-tensors 0.17, SGLang transformers 5.19 and 0.18). Then run,
# from the repository root, with autotune's own test environment:
#
#   AUTOTUNE_VLLM_VENV=.venv-vllm AUTOTUNE_SGLANG_VENV=.venv-sglang python -m pytest -q -m frameworks \
#       tests/test_emit_serving_engines.py
#
# Pinned releases (the ones autotune's serving emitters target):
#   vLLM 0.33.0, SGLang 0.5.23 (each wheel with --no-deps: their own dependency lists pull a CUDA torch,
#     flashinfer, cutlass-dsl, deep-gemm and friends, several GB)
#   an exact list of their pure-Python / CPU dependencies, --no-deps (vllm-0.33.0-cpu-deps.txt,
#     sglang-0.5.23-cpu-deps.txt beside this script), and torch's own (torch-2.13.0-cpu-deps.txt)
#   torch 2.13.0, CPU build: shared by both environments (a .pth file points at it), taken from
#     .venv-frameworks (.ci/install-frameworks.sh) when it is there, else installed once from the file
#     this machine image carries (no CUDA download)
#   vllm-router 0.1.17 and sglang-router 0.3.2 (--no-deps, into the SGLang environment: their argument
#     modules need nothing else)
# Both environments install at the same time. A second run finds the stamp files and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH=2.13.0
VLLM=0.33.0
SGLANG=0.5.23
VLLM_ROUTER=0.1.17
SGLANG_ROUTER=0.3.2
VLLM_VENV="${AUTOTUNE_VLLM_VENV:-.venv-vllm}"
SGLANG_VENV="${AUTOTUNE_SGLANG_VENV:-.venv-sglang}"
TORCH_DIR="${AUTOTUNE_ENGINES_TORCH:-.venv-engines-torch}"
FRAMEWORKS_VENV="${AUTOTUNE_FRAMEWORKS_VENV:-.venv-frameworks}"
# --no-compile: pip would byte-compile every module of these trees (about a minute of CPU per environment,
# 13,000 files in SGLang's); the tests import a small part of them, which Python compiles as it imports.
PIPQ=(--quiet --disable-pip-version-check --no-compile)
started=$SECONDS

# --- torch, once ------------------------------------------------------------------------------------------
if [[ ! -f "$TORCH_DIR/.autotune-torch" || "$(cat "$TORCH_DIR/.autotune-torch")" != "torch=$TORCH" ]]; then
    rm -rf "$TORCH_DIR"
    mkdir -p "$TORCH_DIR"
    fw_site=""
    if [[ -x "$FRAMEWORKS_VENV/bin/python" ]]; then
        fw_site="$("$FRAMEWORKS_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    fi
    if [[ -n "$fw_site" ]] && compgen -G "$fw_site/torch-$TORCH*.dist-info" >/dev/null; then
        for entry in torch torchgen functorch "$fw_site"/torch-"$TORCH"*.dist-info; do
            name="$(basename "$entry")"
            [[ -e "$fw_site/$name" ]] && ln -s "$(cd "$fw_site" && pwd)/$name" "$TORCH_DIR/$name"
        done
        echo "torch $TORCH: linked from $FRAMEWORKS_VENV"
    else
        python3 -m pip install "${PIPQ[@]}" --no-deps --target "$TORCH_DIR" "torch==$TORCH"
        echo "torch $TORCH: installed into $TORCH_DIR"
    fi
    echo "torch=$TORCH" > "$TORCH_DIR/.autotune-torch"
fi
torch_path="$(cd "$TORCH_DIR" && pwd)"

install_one() {  # name version venv deps-file [extra packages...]
    local name=$1 version=$2 venv=$3 deps=$4
    shift 4
    local stamp="torch=$TORCH $name=$version deps=$(cat "$deps" .ci/torch-$TORCH-cpu-deps.txt | md5sum | cut -c1-12) extra=$*"
    if [[ -f "$venv/.autotune-engine" && "$(cat "$venv/.autotune-engine")" == "$stamp" ]]; then
        echo "$name already installed in $venv ($stamp)"
        return
    fi
    local t0=$SECONDS
    rm -rf "$venv"
    python3 -m venv "$venv"
    local py="$venv/bin/python"
    echo "$torch_path" > "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/autotune-engines-torch.pth"
    "$py" -m pip install "${PIPQ[@]}" --no-deps "$name==$version" "$@"
    "$py" -m pip install "${PIPQ[@]}" --no-deps -r "$deps" -r ".ci/torch-$TORCH-cpu-deps.txt"
    "$py" -c "import importlib.metadata as m, torch; print('$name', m.version('$name'), 'torch', torch.__version__)"
    echo "$stamp" > "$venv/.autotune-engine"
    echo "$name $version: $((SECONDS - t0)) s, $(du -sh "$venv" | cut -f1) in $venv"
}

logs="$(mktemp -d)"
install_one vllm "$VLLM" "$VLLM_VENV" ".ci/vllm-$VLLM-cpu-deps.txt" >"$logs/vllm.log" 2>&1 &
vllm_pid=$!
install_one sglang "$SGLANG" "$SGLANG_VENV" ".ci/sglang-$SGLANG-cpu-deps.txt" \
    "vllm-router==$VLLM_ROUTER" "sglang-router==$SGLANG_ROUTER" >"$logs/sglang.log" 2>&1 &
sglang_pid=$!
status=0
wait "$vllm_pid" || status=1
wait "$sglang_pid" || status=1
grep -v "^WARNING: Location" "$logs/vllm.log" "$logs/sglang.log" || true
rm -rf "$logs"
echo "serving engines: $((SECONDS - started)) s in all"
exit "$status"
