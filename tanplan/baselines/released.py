"""Features of a released model for the private heads: what the model's head receives.

A model pretrained on public data (`tanplan pretrain`) and read back with `tanplan.load_run` is a public
function; the inputs of its head (by default the last top-level Dense of a built-in model: the
penultimate features) are then a public function of each example, so extracting them from the private
examples costs no privacy, and the heads of tanplan.baselines trained on them spend only their own
(ε, δ). They are standardised with the mean and standard deviation of the PUBLIC set's features (public
statistics, as tanplan.baselines.features does for its demo encoder), never with the private ones: a
statistic of the private set would be a release that no head's accounting covers.

The guarantee is the heads' alone only when the model's weights are public: a model trained on the same
private data (a DP-SGD run's release) has spent its own budget on it, and the two compose. `released_features`
reads where the model was trained (`provenance`: tanplan.privacy.init_provenance, judged against `data`, the
private set's [data] config; None: unknown, so anything tanplan trained may be on it) and refuses, before
any feature is computed: an audit's run; a run without privacy on data that may be the private set (ε = ∞);
a run folder whose ledger cannot be read; and a DP-SGD run on data that may be the private set unless
`composed=True` says the caller composes the heads' release with its releases (`provenance(...).events()`,
DpEvents for tanplan.privacy.accounting). A model tanplan did not write is assumed public.
"""

from __future__ import annotations

from pathlib import Path

import flax.linen as nn
import jax
import numpy as np

from tanplan.baselines.data import FeatureSet, feature_set, public_standardiser
from tanplan.engine.release import LoadedRun, load_run
from tanplan.errors import UsageError
from tanplan.models.init import default_head
from tanplan.privacy import init_provenance

EVAL_BATCH = 512


def head_of(run: LoadedRun, head: str | None = None) -> tuple[str, ...]:
    """The module path of the head, as a tuple: `head` ("Dense_0", "/"-joined when nested), or the last
    top-level Dense of a built-in model; UsageError for a plugged-in model that does not name it."""
    name = head or next(iter(default_head(run.card["model"], run.params)), "")
    if not name:
        raise UsageError(f"model {run.card['model']!r} has no built-in head: name the module whose inputs are "
                         "the features (head = \"path/to/Dense_k\")")
    return tuple(name.split("/"))


def head_inputs_fn(run: LoadedRun, head: str | None = None):
    """A jitted fn(x) -> the inputs of the head's `__call__` on the batch x (the activations just before it)."""
    path = head_of(run, head)

    def features(x):
        seen = []

        def grab(next_fun, args, kwargs, context):
            if context.method_name == "__call__" and tuple(context.module.path) == path:
                seen.append(args[0])
            return next_fun(*args, **kwargs)

        with nn.intercept_methods(grab):
            run.model.apply({"params": run.params}, x)
        if len(seen) != 1:
            raise UsageError(f"the module {'/'.join(path)!r} was called {len(seen)} times by the model, not once: "
                             "name its head (the module whose inputs are the features)")
        return seen[0].reshape(seen[0].shape[0], -1)

    return jax.jit(features)


def head_inputs(run: LoadedRun, x: np.ndarray, head: str | None = None, batch: int = EVAL_BATCH) -> np.ndarray:
    """(n, d) float64: the head's inputs for every row of x, by batches padded to `batch` rows (one
    compiled program; the built-in models treat each example alone, so padding changes no row)."""
    fn = head_inputs_fn(run, head)
    out = []
    for start in range(0, len(x), batch):
        chunk = np.asarray(x[start:start + batch], np.float32)
        padded = np.concatenate([chunk, np.zeros((batch - len(chunk), *chunk.shape[1:]), np.float32)])
        out.append(np.asarray(fn(padded))[:len(chunk)])
    return np.concatenate(out).astype(np.float64)


def provenance(folder: str | Path, data=None) -> init_provenance.InitProvenance:
    """Where the released model of `folder` was trained, judged against `data` (the private set's DataConfig,
    or a Config; None: unknown, so every private release of it composes). UsageError for an audit's run, a
    run without privacy on data that may be the private set, a run folder whose ledger cannot be read."""
    data = getattr(data, "data", data)  # a Config: its [data]
    ident = init_provenance.data_identity(data) if data is not None else None
    return init_provenance.of_path(folder, ident, "the released model")


def released_features(folder: str | Path, private, public_x: np.ndarray, head: str | None = None, *, data=None,
                      composed: bool = False) -> tuple[FeatureSet, np.ndarray]:
    """(the private set's features, the public pool's) from the released model of a run folder.

    private: a tanplan Dataset (x_train, y_train, x_test, y_test: the split the heads learn and are scored
    on, the same as a DP-SGD run's on that data); public_x: the public inputs (the pool of DPPL-Public and
    the source of the standardisation statistics). Both are standardised with the public statistics only.
    data: the private set's [data] (a DataConfig or Config), which the model's training data is judged
    against; composed: the caller composes the heads with a model whose releases may be on the private set
    (see the module docstring), which is refused otherwise.
    """
    prov = provenance(folder, data)
    if prov.releases() and not composed:
        there = "" if prov.epsilon_there is None else f", ε = {prov.epsilon_there:.3g} there"
        raise UsageError(f"the released model {str(folder)!r} was trained with DP-SGD on data that may be this "
                         f"private set ({len(prov.releases())} releases{there}): heads on its features compose "
                         "with it; pass data= (the private set's [data]) if it is other data, or composed=True "
                         "and compose provenance(folder).events() with the heads' release")
    run = load_run(folder)
    public = head_inputs(run, public_x, head)
    standardise = public_standardiser(public)
    fs = feature_set(standardise(head_inputs(run, private.x_train, head)), private.y_train,
                     standardise(head_inputs(run, private.x_test, head)), private.y_test, source=str(folder))
    return fs, standardise(public)
