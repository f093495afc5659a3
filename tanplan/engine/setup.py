"""The parts of a run built from its Config: the dataset, the flax model, the augmentation by name;
`prepare`, which loads and checks them without the run's secret (nothing is written), and `build`, which
builds the run's mechanism (tanplan.dp.mechanism: route, clipped sum, batches, noise) from its plan and
secret, wraps the audit's canaries around it when asked, and jits the step into a `Run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from tanplan import task as tasks
from tanplan.config import Config
from tanplan import data as datasets
from tanplan.data.dataset import with_train_examples
from tanplan.dp import canaries as canary_lib
from tanplan.dp import input_canaries
from tanplan.dp import mechanism as dp_mechanism
from tanplan.dp import optim, pruning, sampling, sharding
from tanplan.dp import partition as dp_partition
from tanplan.dp import step as dp_step
from tanplan.engine import batches, evaluation, precision, routes, sparsity
from tanplan.engine.memory import check_batches_fit
from tanplan.engine.route_notes import route_line
from tanplan.errors import UsageError
from tanplan.models import create_model, freeze
from tanplan.models import init as model_init
from tanplan.models.plugins import check_per_example, check_rows_alone
from tanplan.outcomes.run_summary import Pruning
from tanplan.plugins import is_import_path
from tanplan.privacy import init_provenance
from tanplan.privacy.mechanism import RunPlan, resolve_plan


def load_data(cfg: Config):
    """The Dataset of cfg.data (tanplan.data), cut to data.train_examples when that is set."""
    d = cfg.data  # (load_dataset through its module: the bad-input tests stand in for it to see nothing loads)
    loaded = datasets.load_dataset(d.dataset, path=d.path or None, num_samples=d.num_samples, seed=d.seed,
                                   options=d.options)
    return with_train_examples(loaded, d.train_examples)


def build_model(cfg: Config, num_classes: int, input_shape=None):
    """The flax module of cfg.model (tanplan.models). A plugged-in model (an import path) is checked on a
    public synthetic batch of input_shape before it is returned: it must keep no batch statistics and
    give each example an output of its own (tanplan.models.plugins.check_per_example), and its [task]
    functions one scalar per example (tanplan.task.check); UsageError (one line) otherwise."""
    m = cfg.model
    model = create_model(m.name, num_classes, width=m.width, depth=m.depth, norm_order=m.norm_order, options=m.options,
                         input_shape=input_shape)
    if input_shape is not None and is_import_path(m.name):
        check_per_example(model, input_shape, m.name, seed=cfg.experiment.seed, num_classes=num_classes)
    if input_shape is not None:
        tasks.check(tasks.from_config(cfg), num_classes)
    return model


def build_augmentation(cfg: Config, dataset):
    """The per-example augmentation fn(key, x) of cfg.data, or None for the identity."""
    if cfg.data.augmentation == "none":
        return None
    return datasets.make_augmentation(cfg.data.augmentation, dataset.data_kind, mean=dataset.mean, std=dataset.std)


def public_example(input_shape, rows: int = 2) -> np.ndarray:
    """Inputs of the data's shape built from public information only (zeros; the ghost-route check adds
    its own fixed-seed noise): model initialisation and the routes' self-checks read these, never
    training rows, so their outcome (the route in summary.json) is not a function of private data."""
    return np.zeros((rows, *input_shape), np.float32)


@dataclass
class Prepared:
    """What a run is before its secret: data, plan, model, initial parameters. Built by `prepare`, which
    checks everything (UsageError) and writes nothing, so a refused run leaves no file behind."""

    dataset: Any
    plan: RunPlan
    model: Any
    logits_fn: Callable
    augment: Callable | None
    params: Any
    init_key: Any
    public_root: Any
    test_key: Any
    init: model_init.InitWeights | None = None  # [init]'s weights (None: experiment.seed's draw)
    partition: dp_partition.Partition | None = None  # the trainable parameters (None: all of them)
    provenance: init_provenance.InitProvenance | None = None  # where [init]'s weights were trained


@dataclass(frozen=True)
class CheckedInit:
    """[init] read and judged before any data: its arrays (models.init.read_source) and its provenance."""

    source: tuple
    provenance: init_provenance.InitProvenance


def check_init(cfg: Config) -> CheckedInit | None:
    """[init]'s checks that need no data: init.path is not the private data file; its provenance is read
    (an audit's run, a run folder whose ledger cannot be read, a run without privacy on this data refused:
    tanplan.privacy.init_provenance); its arrays are read and checked (a missing, foreign, truncated, non-
    numeric or non-finite source refused); its frozen_blocks fit the model, pruning is not asked beside
    frozen parameters. None without [init]."""
    freeze.block_patterns(cfg)
    frozen = cfg.init.trainable or cfg.init.frozen or cfg.init.frozen_blocks
    if frozen and sparsity.enabled(cfg):
        raise UsageError("[init] trainable / frozen / frozen_blocks are not allowed with [pruning]: the masked step "
                         "of pruning and gradient dropping updates every parameter")
    if not (cfg.init.path or cfg.init.loader):
        return None
    provenance = init_provenance.read(cfg)  # before its arrays: the private data file is never read as weights
    return CheckedInit(model_init.read_source(cfg), provenance)


def prepare(cfg: Config, dataset=None) -> Prepared:
    """Load the data, resolve the plan, build the model and its initialisation (experiment.seed, or [init]'s
    weights laid on it by path), and which parameters train ([init] trainable / frozen); BudgetExceeded when
    the plan's releases composed with those [init]'s weights inherited exceed privacy.total_epsilon
    (tanplan.privacy.init_provenance.check_total), before any file is written.
    dataset: the data to train on in place of cfg.data's (the final-model audit's set, with its canaries)."""
    checked = check_init(cfg)  # before any data is read
    dataset = load_data(cfg) if dataset is None else dataset
    tasks.check_label_dtype(cfg, getattr(dataset, "label_dtype", ""))  # float labels: refused, not exit 1 later
    plan = resolve_plan(cfg, dataset.num_train)
    check_batches_fit(cfg, plan, dataset)  # large rows of a memmap or a source: refused before anything is written
    model = build_model(cfg, dataset.num_classes, dataset.input_shape)  # a plug-in is checked here, on public inputs
    augment = build_augmentation(cfg, dataset)
    init_key, public_root, test_key = jax.random.split(jax.random.key(cfg.experiment.seed, impl="threefry2x32"), 3)
    params = model.init(init_key, public_example(dataset.input_shape, 1))["params"]
    init = model_init.load_init(cfg, params, checked.source if checked else None)  # a shape mismatch: refused
    provenance = checked.provenance if checked else None
    init_provenance.check_total(provenance, plan, cfg)  # with its init's releases: exit 3 before any file
    params = init.params if init is not None else params
    trainable = freeze.trainable_paths(cfg, params)
    partition = dp_partition.Partition(trainable) if trainable is not None else None
    if is_import_path(cfg.model.name):  # at the run's own chunk shape: rows mixed at a distance are caught too
        rows = sampling.batch_layout(dataset.num_train, plan.q, cfg.train.physical_batch_size).chunk_size
        check_rows_alone(model, params, dataset.input_shape, rows, cfg.model.name, seed=cfg.experiment.seed)
    logits_fn = precision.in_compute_dtype(lambda p, x: model.apply({"params": p}, x), cfg.train.compute_dtype)
    if not sparsity.enabled(cfg):  # the per-layer route's numeric self-check, before anything is written
        routes.check(cfg, *dp_partition.logits_over(partition, logits_fn, params), public_example(dataset.input_shape))
    return Prepared(dataset, plan, model, logits_fn, augment, params, init_key, public_root, test_key, init, partition,
                    provenance)


def init_digest(p: Prepared) -> str | None:
    """The digest of [init]'s weights (None: experiment.seed's draw), which the run's identity binds."""
    return p.init.digest if p.init is not None else None


@dataclass
class Run:
    """Everything one run needs, built once from its Config and its secret (DP-SNIP reads it)."""

    cfg: Config
    dataset: Any
    plan: RunPlan
    model: Any
    logits_fn: Callable
    augment: Callable | None
    params: Any  # the initial parameters (public: from experiment.seed or [init]), pruned if asked
    mechanism: dp_mechanism.Mechanism  # batches, clipped sum, noise, events, relation (tanplan.dp.mechanism)
    optimizer: Any
    step: Callable  # jitted (state, batch, roots[, audit]) -> (state, metrics); roots: replicated key data
    eval_batch: Callable
    roots: dict  # {"noise", "augment": secret key data; "public": public key data}, host numpy
    test_key: Any  # public: AugTest's views (of the test set, which no guarantee covers)
    mesh: Any  # every device of every process: the 'data' axis of the batch
    local_mesh: Any  # this process's devices: evaluation
    prune_mask: Any = None
    pruning: Pruning | None = None  # what the summary says of the pruning and dropping
    audited: canary_lib.Audited | input_canaries.InputAudited | None = None  # the audit's canaries around the mechanism (tanplan.dp.canaries)
    label_classes: int = 0  # labels read are checked to lie in [0, label_classes) (0: a plugged-in task's labels)
    route_note: str | None = None  # which gradient route applies and why: a plugged-in model, or vmap by its cost
    init: model_init.InitWeights | None = None  # [init]'s weights
    partition: dp_partition.Partition | None = None  # the trainable parameters (None: all): tanplan.dp.partition
    provenance: init_provenance.InitProvenance | None = None  # where [init]'s weights were trained

    @property
    def route(self) -> str:
        """The gradient route: ghost | vmap | plain."""
        return self.mechanism.route


def build(cfg: Config, secret, prepared: Prepared | None = None, *, canaries: int = 0,
          canary_kind: str = "gradient") -> Run:
    """The run of cfg (`prepare`d, unless given) with its secret: its mechanism and the jitted step.

    Randomness: experiment.seed (public) draws the initial weights, AugTest's views of the test set and
    random gradient dropping; the run's secret draws the noise, the training examples' augmentation views
    (stream AUGMENT: example i's at step t from fold_in(fold_in(root, t), i), i its dataset index, never its
    position in the batch) and the Poisson batches (Mechanism.batch, which the loop reads). The jitted step
    derives step t's keys inside by fold_in(root, state.step): keys are functions of (secret, step, index)
    only, so a restored state continues with the identical views and noise.
    Its metrics carry `params_finite`, whether the released (noisy) parameters are all finite: the loop
    detects divergence from them, never from the noiseless loss of the private batch.
    canaries > 0 (the privacy audit only, tanplan.workflow.audit): that many gradient canaries wrap the
    mechanism (tanplan.dp.canaries.wrap: drawn from the audit's own secret, never this one), joining its clipped
    sum before the noise;
    canary_kind "input": that many crafted examples instead, clipped with the batch (tanplan.dp.input_canaries).
    """
    p = prepared or prepare(cfg)
    dataset, plan, params = p.dataset, p.plan, p.params
    if sparsity.enabled(cfg) and canaries:
        raise ValueError("gradient canaries are inserted by the dense step only, not by the masked step of pruning")
    optimizer = optim.make_optimizer(cfg.train)
    devices = sharding.run_devices()  # every device, or the one of a proxy (tanplan.workflow.proxy_devices)
    mask = pruned = audited = None
    if sparsity.enabled(cfg):  # pre-pruning / gradient dropping: the masked step of tanplan.dp.grad_drop
        mask = sparsity.prune_mask(cfg, plan, p.logits_fn, params, dataset, jax.random.fold_in(p.init_key, 1), secret)
        params = pruning.apply_mask(params, mask)
        route = routes.Route("vmap" if plan.private else "plain")
        mech = dp_mechanism.build(plan, route.name, None, secret)
        inner = sparsity.masked_step(cfg, plan, p.logits_fn, p.augment, params, optimizer, mask)
        pruned = sparsity.summary_fields(cfg, mask)
    else:
        grad_sum, route = _grad_sum(cfg, p, params, len(devices))
        mech = dp_mechanism.build(plan, route.name, grad_sum, secret)
        trainable = dp_partition.trainable_of(p.partition, params)
        audited = _audited(mech, canaries, canary_kind, trainable, dataset) if canaries else None
        inner = dp_step.train_step((audited or mech).noisy_sum(), optimizer, expected_batch_size=float(plan.batch_size),
                                   ema_decay=cfg.train.ema_decay, partition=p.partition)
    roots = {**mech.key_data(), "public": np.asarray(jax.random.key_data(p.public_root))}
    if audited is not None:  # step arguments, never constants: a compilation cache on disk would keep them
        roots["canaries"] = audited.arrays.step_inputs()
    task = tasks.from_config(cfg)
    return Run(cfg, dataset, plan, p.model, p.logits_fn, p.augment, params, mech, optimizer,
               jax.jit(_keyed_step(inner, masked=mask is not None, inputs=batches.device_inputs(dataset.train)),
                       donate_argnums=0),
               evaluation.make_eval_fn(p.logits_fn, task), roots, p.test_key,
               sharding.data_mesh(devices), sharding.data_mesh(_local(devices)), mask, pruned, audited,
               label_classes=dataset.num_classes if task is tasks.DEFAULT else 0,
               route_note=route_line(cfg.model.name, route) if _said(cfg, route) else None,
               init=p.init, partition=p.partition, provenance=p.provenance)


def _audited(mech, canaries: int, kind: str, trainable, dataset):
    """The audit's canaries around the mechanism: gradient canaries, or input-space ones (crafted examples)."""
    if kind == "input":
        return input_canaries.wrap(mech, canaries, dataset.input_shape, dataset.num_classes)
    return canary_lib.wrap(mech, canaries, trainable)


def public_inputs(run: Run) -> dict | None:
    """What the ledger records as the public inputs of the run's releases: [init]'s source and digest, when
    nothing of them composes (a public run's weights, or weights tanplan did not write: assumed public)."""
    if run.init is None:
        return None
    if run.provenance is None:
        return {"init": {"source": run.init.source, "digest": run.init.digest}}
    return run.provenance.public(run.init.digest)


def ledger_inputs(run: Run) -> dict:
    """The Ledger's fields that say what the run starts from: `public`, `init` (its provenance), `inherited`
    (the releases of every run its weights descend from, composed where they may be on its data:
    tanplan.privacy.init_provenance) and `data` (its training data as configured, for a later run from it)."""
    prov = run.provenance
    return {"public": public_inputs(run), "data": init_provenance.data_identity(run.cfg.data),
            "init": prov.record(run.init.digest if run.init else None) if prov else None,
            "inherited": list(prov.groups) if prov else []}


def _grad_sum(cfg: Config, p: Prepared, params, devices: int):
    """The route's clipped sum over the trainable parameters (tanplan.dp.partition), and the Route, chosen at
    the planned chunk's rows on each of the run's devices (public: N, q and the config)."""
    logits_fn, trainable = dp_partition.logits_over(p.partition, p.logits_fn, params)
    layout = sampling.batch_layout(p.dataset.num_train, p.plan.q, cfg.train.physical_batch_size, devices)
    route = routes.choose(cfg, logits_fn, trainable, public_example(p.dataset.input_shape),
                          rows=layout.chunk_size // devices, augment=p.augment)
    make = lambda f: routes.grad_sum_of(cfg, f, p.augment, route.name, devices)  # noqa: E731
    return dp_partition.grad_sum_over(p.partition, make, p.logits_fn), route


def _local(devices) -> list:
    """This process's devices among the run's."""
    return [d for d in devices if d.process_index == jax.process_index()]


def _said(cfg: Config, route: routes.Route) -> bool:
    """Whether the run tells its route: a plugged-in model's always, a built-in one's where its cost at the
    chunk size took it off the per-layer route."""
    return is_import_path(cfg.model.name) or (route.name == "vmap" and route.cost is not None)


def _keyed_step(inner: Callable, *, masked: bool, inputs: Callable = lambda batch: batch) -> Callable:
    """step(state, batch, roots, audit=None): step t's keys folded from the roots at state.step, the inner
    step, and whether the released (noisy) parameters are all finite. The masked step also takes the public
    key (random gradient dropping); the audit's step its canary inputs and this step's draws. inputs: the
    batches' rows as the model's inputs, on the device (uint8 pixels normalised: batches.device_inputs)."""

    def step(state, batch, roots, audit=None):
        batch = inputs(batch)
        if audit is not None and "shadow" in audit:  # gradient canaries' shadow batch (input canaries have none)
            audit = {**audit, "shadow": inputs(audit["shadow"])}
        noise_key, aug_key, public_key = (
            jax.random.fold_in(jax.random.wrap_key_data(roots[name], impl="threefry2x32"), state.step)
            for name in ("noise", "augment", "public"))
        if masked:
            state, metrics = inner(state, batch, noise_key, aug_key, public_key)
        elif audit is None:
            state, metrics = inner(state, batch, noise_key, aug_key)
        else:  # audit: this step's sampled canaries and the auditor's shadow batch (tanplan.dp.canaries.step_draws)
            state, metrics = inner(state, batch, noise_key, aug_key, {**roots["canaries"], **audit})
        finite = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(state.params)]
        return state, {**metrics, "params_finite": jnp.all(jnp.stack(finite))}

    return step
