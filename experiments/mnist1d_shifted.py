"""Write the public set of experiments/mnist1d_finetune.toml: mnist1d drawn with OTHER generation settings
(more correlated and i.i.d. noise, more shear, more scaling; another seed), so that pretraining on it is
not simply the private task. Offline (the mnist1d package generates it).

    .venv/bin/python experiments/mnist1d_shifted.py reports/finetune/mnist1d_shifted.npz   # the venv has mnist1d
"""

import random
import sys
from pathlib import Path

import numpy as np
from mnist1d.data import get_dataset_args, make_dataset
from mnist1d.utils import ObjectView

SHIFT = {"corr_noise_scale": 0.5, "iid_noise_scale": 0.1, "shear_scale": 1.2, "scale_coeff": 0.6}
SEED, SAMPLES = 1031, 10_000


def main(out: str) -> None:
    args = get_dataset_args(as_dict=True)
    args.pop("url", None)
    args.update(SHIFT, num_samples=SAMPLES, seed=SEED)
    np.random.seed(SEED)
    random.seed(SEED)
    d = make_dataset(ObjectView(args))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, x_train=d["x"].astype(np.float32)[..., None], y_train=d["y"].astype(np.int32),
             x_test=d["x_test"].astype(np.float32)[..., None], y_test=d["y_test"].astype(np.int32))
    print(f"wrote {out}: {len(d['y'])} train, {len(d['y_test'])} test, shifted by {SHIFT}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/finetune/mnist1d_shifted.npz")
