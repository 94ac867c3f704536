#!/usr/bin/env bash
# The CUDA path of `verify --model` (and `verify --serve` where a CUDA vLLM is
# installed), on a machine with an NVIDIA GPU and nothing but this repository.
#
#   bash benchmarks/device_check.sh [OUT_DIR]      # default OUT_DIR: $OUT or ./device-results
#
# Installs mmport as the README's first command does (unless MMPORT_NO_INSTALL=1),
# then per family: scaffold the port, `verify --model --tiny --device cuda` (the HF
# model's tiny twin on the GPU beside the port's processing), and, when
# MMPORT_SERVE_PYTHON names a python with a CUDA build of vLLM, `verify --serve`
# as well. Each run writes its JSON report; summary.txt has one line per run with
# its exit code and wall time. Budget: about ten minutes in all (each command is
# capped; FAMILIES chooses fewer or others).
set -uo pipefail
cd "$(dirname "$0")/.."

out=${1:-${OUT:-./device-results}}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
families=${FAMILIES:-"llava qwen2_vl paligemma"}

say() { echo "$*" | tee -a "$summary"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >>"$summary" 2>&1; then
  say "no NVIDIA GPU visible (nvidia-smi): nothing to check here"
  exit 2
fi
if [ "${MMPORT_NO_INSTALL:-0}" != 1 ]; then
  python3 -m pip install -q torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.1 -e . \
    >"$out/install.log" 2>&1 || say "install failed (see install.log); using what is installed"
fi
python3 - >>"$summary" 2>&1 <<'EOF'
import torch, transformers
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}), "
      f"transformers {transformers.__version__}, device: "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
EOF

run() {
  # run NAME TIMEOUT COMMAND...: one capped command, its exit code and wall time in the summary.
  local name=$1 limit=$2 started=$SECONDS status
  shift 2
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  status=$?
  say "$name: exit $status in $((SECONDS - started)) s"
}

for family in $families; do
  port="$out/ports/$family"
  run "$family-scaffold" 120 python3 -m mmport scaffold "$family" -o "$port" --force
  processing=$(ls "$port"/*_processing.py 2>/dev/null | head -1)
  [ -n "$processing" ] || continue
  run "$family-model-cuda" 240 python3 -m mmport verify "$family" --port "$processing" \
    --model --tiny --device cuda --probes 4 --settings 1 --json "$out/$family-model-cuda.json"
  if [ -n "${MMPORT_SERVE_PYTHON:-}" ]; then
    run "$family-serve" 300 python3 -m mmport verify "$family" --port "$processing" \
      --serve --probes 2 --settings 0 --json "$out/$family-serve.json"
  fi
done
say "done: reports in $out"
