"""The released model: its own artifact, separate from the private checkpoint.

    out/model/params.npz   the parameters a user deploys: the EMA when the EMA is on, else the final ones
    out/model/model.json   what they are: model name and shape, which weights, checksum, (ε, δ) spent

Nothing here can replay the run's noise: no PRNG key, no secret, no optimizer state. Read it back with
`load_params`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tanplan.fileio import write_bytes_atomic, write_json_atomic

FOLDER = "model"


def _flat(params) -> dict[str, np.ndarray]:
    import jax

    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(leaf) for path, leaf in flat}


def write_model(out: Path, params, card: dict) -> Path:
    """out/model/params.npz and out/model/model.json (card: what describes the weights); returns the folder."""
    import io

    folder = Path(out) / FOLDER
    buf = io.BytesIO()
    np.savez(buf, **_flat(params))
    write_bytes_atomic(folder / "params.npz", buf.getvalue())
    write_json_atomic(folder / "model.json", card)
    return folder


def load_params(folder: str | Path) -> dict[str, np.ndarray]:
    """The released parameters as {"layer/name": array} (no pickled objects are read)."""
    with np.load(Path(folder) / "params.npz", allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
