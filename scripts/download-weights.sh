#!/usr/bin/env bash
# Fetches the official Mimi weights (Hugging Face kyutai/mimi: model.safetensors + config.json)
# into the Hugging Face cache layout, where mimi finds them without --weights.
#   HF_HOME (default ~/.cache/huggingface) / hub/models--kyutai--mimi/snapshots/main/
set -euo pipefail
hf=${HF_HOME:-$HOME/.cache/huggingface}
dest="$hf/hub/models--kyutai--mimi/snapshots/main"
mkdir -p "$dest"
base=https://huggingface.co/kyutai/mimi/resolve/main
for f in config.json model.safetensors; do
  if [ -s "$dest/$f" ]; then echo "have $dest/$f"; continue; fi
  echo "fetching $f ..."
  curl -fL --retry 3 --connect-timeout 20 -o "$dest/$f.part" "$base/$f" || { rm -f "$dest/$f.part"; exit 1; }
  mv "$dest/$f.part" "$dest/$f"
done
echo "weights in $dest"
