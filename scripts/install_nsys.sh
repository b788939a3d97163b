#!/usr/bin/env bash
# Install NVIDIA Nsight Systems 2022.4 into .cache/nsys (see nsys_parsers/install_nsys.sh, which
# `nsys-mine profile --install-nsys` also uses, with the user cache as its target).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$here/nsys_parsers/install_nsys.sh" "${1:-$here/.cache/nsys}"
