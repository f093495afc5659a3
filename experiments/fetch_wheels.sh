#!/usr/bin/env bash
# The wheels experiments/gpu_check.sh installs on a GPU machine without network (Python 3.12, x86-64):
# tanplan's training dependencies that such a machine's image lacks, at the versions tested here. The image's
# own jax/jaxlib (with its CUDA plug-in), numpy, scipy and the rest are used as they are. Run where pip works.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$here/wheels" \
  jax-privacy==2.0.0 dp-accounting==0.6.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types typing-inspection \
  dm-tree==0.1.10 mnist1d==0.0.2.post1 flax==0.12.8 optax==0.2.8 chex==0.1.92 orbax-checkpoint==0.12.8 tensorboardX
ls "$here/wheels"
