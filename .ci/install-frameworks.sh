#!/usr/bin/env bash
# Installs, CPU only, the training frameworks whose own parsers check what `autotune emit`
# writes (the tests marked `frameworks`, in tests/test_emit_frameworks.py), into a virtual
# environment of their own, kept apart from the one the other tests use (torch there would
# change what `--sampler gp` does). Then run, from the repository root:
#
#   "${AUTOTUNE_FRAMEWORKS_VENV:-.venv-frameworks}/bin/python" -m pytest -q -m frameworks tests/test_emit_frameworks.py
#
# Pinned releases (the ones autotune's emitters target):
#   torch 2.13.0, CPU build: the file this machine image carries (pip takes it, no CUDA download)
#   DeepSpeed 0.19.8 (built from its sdist with no compiled ops: DS_BUILD_OPS=0)
#   torchtitan 0.3.0 (registered Python configs; needs Python >= 3.11)
#   megatron-core 0.19.2: its wheel carries megatron/training/arguments.py, Megatron-LM's parser.
#     The wheel is tagged for Python >= 3.12 only, so its pure-Python files are unpacked beside
#     the environment (the one compiled module, a dataset helper, is not used) and put on its
#     path with a .pth file; the tests give Python 3.11 the one name it lacks (typing.override).
#   triton 3.9.0: megatron.core imports it at import time (no GPU is used).
#   torchao 0.18.0: torchtitan's float8 converter needs it to build an fp8 config.
# A second run finds the stamp file and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${AUTOTUNE_FRAMEWORKS_VENV:-.venv-frameworks}"
TORCH=2.13.0
DEEPSPEED=0.19.8
TORCHTITAN=0.3.0
TRITON=3.9.0
TORCHAO=0.18.0
MEGATRON_CORE=0.19.2
STAMP="torch=$TORCH deepspeed=$DEEPSPEED torchtitan=$TORCHTITAN torchao=$TORCHAO triton=$TRITON megatron-core=$MEGATRON_CORE"

if [[ -f "$VENV/.autotune-frameworks" && "$(cat "$VENV/.autotune-frameworks")" == "$STAMP" ]]; then
    echo "frameworks already installed in $VENV ($STAMP)"
    exit 0
fi

python3 -m venv "$VENV"
PY="$VENV/bin/python"
# --no-compile: pip would byte-compile every module of these trees (torch, DeepSpeed, torchtitan: about a minute
# of CPU); the tests import a small part of them, which Python compiles as it imports.
PIP=("$PY" -m pip install --quiet --disable-pip-version-check --no-compile)

# autotune's own dependencies and the test runner (autotune itself is imported from the checkout).
"${PIP[@]}" "optuna>=5.0" "numpy>=1.24" "scipy>=1.10" "rich>=13" "typer>=0.12" "pyyaml>=6" "pytest>=7" "hypothesis>=6"
"${PIP[@]}" "torch==$TORCH"
"${PIP[@]}" "torch==$TORCH" "triton==$TRITON" "torchtitan==$TORCHTITAN" "torchao==$TORCHAO"
# DeepSpeed's setup.py imports torch, so it builds against the torch installed above.
DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation "torch==$TORCH" "deepspeed==$DEEPSPEED"

wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$wheels" "megatron-core==$MEGATRON_CORE"
target="$(cd "$VENV" && pwd)/megatron-core-$MEGATRON_CORE"
rm -rf "$target"
"$PY" -m zipfile -e "$wheels"/megatron_core-"$MEGATRON_CORE"-*.whl "$target"
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$target" > "$site/autotune-megatron-core.pth"

echo "$STAMP" > "$VENV/.autotune-frameworks"
du -sh "$VENV"
