#!/usr/bin/env bash
# Developer loop without pip: configure and build build/<name> (C++ tests, demo and the Python
# module), then stage an importable package in build/<name>/stage that links to python/kiln, so
#   PYTHONPATH=build/<name>/stage python -m pytest tests/python
# runs against this build. Usage: scripts/dev-build.sh NAME [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/dev-build.sh NAME [cmake args]}; shift
dir=build/$name
[ -f "$dir/build.ninja" ] || cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKILN_BUILD_PYTHON=ON "$@" >/dev/null
cmake --build "$dir" -j"${JOBS:-2}"
stage=$dir/stage
rm -rf "$stage" && mkdir -p "$stage/kiln" "$stage/kiln-0.1.0.dist-info"
for f in python/kiln/*; do ln -s "$PWD/$f" "$stage/kiln/"; done
ln -s "$PWD/$(ls "$dir"/_C.*.so)" "$stage/kiln/"
mkdir -p "$stage/kiln/bin" && ln -s "$PWD/$dir/kiln" "$stage/kiln/bin/kiln"  # the CLI, as in the wheel
printf 'Metadata-Version: 2.1\nName: kiln\nVersion: 0.1.0\n' > "$stage/kiln-0.1.0.dist-info/METADATA"
printf '[torch_dynamo_backends]\nkiln = kiln.backend:kiln_backend\n' \
  > "$stage/kiln-0.1.0.dist-info/entry_points.txt"
