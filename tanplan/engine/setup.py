"""The parts of a run built from its job (tanplan.job.RunJob): the dataset, the flax model, the augmentation
by name; `prepare`, which loads and checks them without the run's secret (nothing is written) and resolves
the job's RunPlan once on its data, and `build`, which builds the run's mechanism (tanplan.dp.mechanism:
route, clipped sum, batches, noise) from its plan and secret, hands it to a stage's wrapper when asked
(tanplan.engine.hooks), and jits the step into a `Run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from tanplan import task as tasks
from tanplan.config import DataConfig
from tanplan import data as datasets
from tanplan.data.dataset import with_train_examples
from tanplan.dp import mechanism as dp_mechanism
from tanplan.dp import optim, pruning, sampling, sharding
from tanplan.dp import partition as dp_partition
from tanplan.dp import step as dp_step
from tanplan.engine import batches, evaluation, precision, routes, sparsity
from tanplan.engine.hooks import Wrapped
from tanplan.engine.memory import check_batches_fit
from tanplan.engine.route_notes import route_line
from tanplan.errors import UsageError
from tanplan.job import RunJob
from tanplan.models import adapters, create_model, freeze
from tanplan.models import init as model_init
from tanplan.models.plugins import check_per_example, check_rows_alone
from tanplan.outcomes.run_summary import Pruning
from tanplan.plugins import is_import_path
from tanplan.privacy import init_provenance
from tanplan.privacy.run_plan import RunPlan


def load_data(d: DataConfig):
    """The Dataset of a [data] section (tanplan.data), cut to data.train_examples when that is set."""
    # (load_dataset through its module: the bad-input tests stand in for it to see nothing loads)
    loaded = datasets.load_dataset(d.dataset, path=d.path or None, num_samples=d.num_samples, seed=d.seed,
                                   options=d.options)
    return with_train_examples(loaded, d.train_examples)


def build_model(job: RunJob, num_classes: int, input_shape=None):
    """The flax module of job.model (tanplan.models). A plugged-in model (an import path) is checked on a
    public synthetic batch of input_shape before it is returned: it must keep no batch statistics and
    give each example an output of its own (tanplan.models.plugins.check_per_example), and its [task]
    functions one scalar per example (tanplan.task.check); UsageError (one line) otherwise."""
    m = job.model
    model = create_model(m.name, num_classes, width=m.width, depth=m.depth, norm_order=m.norm_order, options=m.options,
                         input_shape=input_shape)
    if input_shape is not None and is_import_path(m.name):
        check_per_example(model, input_shape, m.name, seed=job.experiment.seed, num_classes=num_classes)
    if input_shape is not None:
        tasks.check(tasks.from_config(job), num_classes)
    return adapters.adapt(model, job.init.adapters, job.init.adapters_rank)  # [init] adapters: LoRA layers added


def build_augmentation(data: DataConfig, dataset):
    """The per-example augmentation fn(key, x) of a [data] section, or None for the identity."""
    if data.augmentation == "none":
        return None
    return datasets.make_augmentation(data.augmentation, dataset.data_kind, mean=dataset.mean, std=dataset.std)


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
    job: RunJob | None = None  # the job with its RunPlan resolved on `dataset` (`plan` is its plan)


@dataclass(frozen=True)
class CheckedInit:
    """[init] read and judged before any data: its arrays (models.init.read_source) and its provenance."""

    source: tuple
    provenance: init_provenance.InitProvenance


def check_init(job: RunJob) -> CheckedInit | None:
    """[init]'s checks that need no data: init.path is not the private data file; its provenance is read
    (an audit's run, a run folder whose ledger cannot be read, a run without privacy on this data refused:
    tanplan.privacy.init_provenance); its arrays are read and checked (a missing, foreign, truncated, non-
    numeric or non-finite source refused); its frozen_blocks fit the model, pruning is not asked beside
    frozen parameters. None without [init]."""
    freeze.block_patterns(job.init, job.model)
    frozen = job.init.trainable or job.init.frozen or job.init.frozen_blocks or job.init.adapters
    if frozen and sparsity.enabled(job.pruning):
        raise UsageError("[init] trainable / frozen / frozen_blocks / adapters are not allowed with [pruning]: the "
                         "masked step of pruning and gradient dropping updates every parameter")
    if not (job.init.path or job.init.loader):
        return None
    provenance = init_provenance.read(job)  # before its arrays: the private data file is never read as weights
    return CheckedInit(model_init.read_source(job.init), provenance)


def prepare(job: RunJob, dataset=None) -> Prepared:
    """Load the data, resolve the job's plan on it (once: a plan the stage resolved on this N is kept), build the model and its initialisation (experiment.seed, or [init]'s
    weights laid on it by path), and which parameters train ([init] trainable / frozen); BudgetExceeded when
    the plan's releases composed with those [init]'s weights inherited exceed privacy.total_epsilon
    (tanplan.privacy.init_provenance.check_total), before any file is written.
    dataset: the data to train on in place of job.data's (the final-model audit's set, with what it audits held in)."""
    checked = check_init(job)  # before any data is read
    dataset = load_data(job.data) if dataset is None else dataset
    tasks.check_label_dtype(job, getattr(dataset, "label_dtype", ""))  # float labels: refused, not exit 1 later
    job = job.with_plan(dataset.num_train)  # resolved once, here, unless the stage resolved it on this N
    plan = job.plan
    check_batches_fit(job, plan, dataset)  # large rows of a memmap or a source: refused before anything is written
    model = build_model(job, dataset.num_classes, dataset.input_shape)  # a plug-in is checked here, on public inputs
    augment = build_augmentation(job.data, dataset)
    init_key, public_root, test_key = jax.random.split(jax.random.key(job.experiment.seed, impl="threefry2x32"), 3)
    params = model.init(init_key, public_example(dataset.input_shape, 1))["params"]
    init = model_init.load_init(job.init, job.model.name, params,
                                checked.source if checked else None)  # a shape mismatch: refused
    provenance = checked.provenance if checked else None
    init_provenance.check_total(provenance, plan, job)  # with its init's releases: exit 3 before any file
    params = init.params if init is not None else params
    trainable = freeze.trainable_paths(job.init, job.model, params, init.reinitialised if init else ())
    partition = dp_partition.Partition(trainable) if trainable is not None else None
    if is_import_path(job.model.name):  # at the run's own chunk shape: rows mixed at a distance are caught too
        rows = sampling.batch_layout(dataset.num_train, plan.q, job.perf.physical_batch_size).chunk_size
        check_rows_alone(model, params, dataset.input_shape, rows, job.model.name, seed=job.experiment.seed)
    logits_fn = precision.in_compute_dtype(lambda p, x: model.apply({"params": p}, x), job.perf.compute_dtype)
    if not sparsity.enabled(job.pruning):  # the per-layer route's numeric self-check, before anything is written
        routes.check(job, *dp_partition.logits_over(partition, logits_fn, params), public_example(dataset.input_shape))
    return Prepared(dataset, plan, model, logits_fn, augment, params, init_key, public_root, test_key, init, partition,
                    provenance, job)


def init_digest(p: Prepared) -> str | None:
    """The digest of [init]'s weights (None: experiment.seed's draw), which the run's identity binds."""
    return p.init.digest if p.init is not None else None


@dataclass
class Run:
    """Everything one run needs, built once from its job and its secret (DP-SNIP reads it)."""

    job: RunJob
    dataset: Any
    plan: RunPlan
    model: Any
    logits_fn: Callable
    augment: Callable | None
    params: Any  # the initial parameters (public: from experiment.seed or [init]), pruned if asked
    mechanism: dp_mechanism.Mechanism  # batches, clipped sum, noise, events, relation (tanplan.dp.mechanism)
    optimizer: Any
    step: Callable  # jitted (state, batch, roots[, extra]) -> (state, metrics); roots: replicated key data
    eval_batch: Callable
    roots: dict  # {"noise", "augment": secret key data; "public": public key data}, host numpy
    test_key: Any  # public: AugTest's views (of the test set, which no guarantee covers)
    mesh: Any  # every device of every process: the 'data' axis of the batch
    local_mesh: Any  # this process's devices: evaluation
    prune_mask: Any = None
    pruning: Pruning | None = None  # what the summary says of the pruning and dropping
    wrapped: Wrapped | None = None  # a stage's wrapper around the mechanism (tanplan.engine.hooks)
    label_classes: int = 0  # labels read are checked to lie in [0, label_classes) (0: a plugged-in task's labels)
    route_note: str | None = None  # which gradient route applies and why: a plugged-in model, or vmap by its cost
    init: model_init.InitWeights | None = None  # [init]'s weights
    partition: dp_partition.Partition | None = None  # the trainable parameters (None: all): tanplan.dp.partition
    provenance: init_provenance.InitProvenance | None = None  # where [init]'s weights were trained
    keyed: Callable | None = None  # `step` before jax.jit: packed proxies vmap it (tanplan.engine.packed)

    @property
    def route(self) -> str:
        """The gradient route: ghost | vmap | plain."""
        return self.mechanism.route


def build(job: RunJob, secret, prepared: Prepared | None = None, *, wrap: Callable | None = None) -> Run:
    """The run of job (`prepare`d, unless given) with its secret: its mechanism and the jitted step.

    Randomness: experiment.seed (public) draws the initial weights, AugTest's views of the test set and
    random gradient dropping; the run's secret draws the noise, the training examples' augmentation views
    (stream AUGMENT: example i's at step t from fold_in(fold_in(root, t), i), i its dataset index, never its
    position in the batch) and the Poisson batches (Mechanism.batch, which the loop reads). The jitted step
    derives step t's keys inside by fold_in(root, state.step): keys are functions of (secret, step, index)
    only, so a restored state continues with the identical views and noise.
    Its metrics carry `params_finite`, whether the released (noisy) parameters are all finite: the loop
    detects divergence from them, never from the noiseless loss of the private batch.
    wrap(mechanism, trainable params, dataset) (a stage's, tanplan.engine.hooks: the privacy audit's, drawn
    from the audit's own secret, never this one): the step computes the wrapper's noisy sum in place of
    the mechanism's, and takes the wrapper's step inputs as arguments.
    """
    p = prepared or prepare(job)
    job, dataset, plan, params = p.job or job, p.dataset, p.plan, p.params
    if sparsity.enabled(job.pruning) and wrap is not None:
        raise ValueError("a mechanism wrapper goes around the dense step only, not the masked step of pruning")
    optimizer = optim.make_optimizer(job.train)
    devices = sharding.run_devices()  # every device, or the one of a proxy (tanplan.workflow.proxy_devices)
    mask = pruned = wrapped = None
    if sparsity.enabled(job.pruning):  # pre-pruning / gradient dropping: the masked step of tanplan.dp.grad_drop
        mask = sparsity.prune_mask(job, plan, p.logits_fn, params, dataset, jax.random.fold_in(p.init_key, 1), secret)
        params = pruning.apply_mask(params, mask)
        route = routes.Route("vmap" if plan.private else "plain")
        mech = dp_mechanism.build(plan, route.name, None, secret)
        inner = sparsity.masked_step(job, plan, p.logits_fn, p.augment, params, optimizer, mask)
        pruned = sparsity.summary_fields(job.pruning, mask)
    else:
        grad_sum, route = _grad_sum(job, p, params, len(devices))
        mech = dp_mechanism.build(plan, route.name, grad_sum, secret)
        trainable = dp_partition.trainable_of(p.partition, params)
        wrapped = wrap(mech, trainable, dataset) if wrap is not None else None
        inner = dp_step.train_step((wrapped or mech).noisy_sum(), optimizer, expected_batch_size=float(plan.batch_size),
                                   ema_decay=job.train.ema_decay, partition=p.partition)
    roots = {**mech.key_data(), "public": np.asarray(jax.random.key_data(p.public_root))}
    if wrapped is not None:  # step arguments, never constants: a compilation cache on disk would keep them
        roots["wrapped"] = wrapped.step_inputs()
    task = tasks.from_config(job)
    keyed = _keyed_step(inner, masked=mask is not None, inputs=batches.device_inputs(dataset.train))
    return Run(job, dataset, plan, p.model, p.logits_fn, p.augment, params, mech, optimizer,
               jax.jit(keyed, donate_argnums=0),
               evaluation.make_eval_fn(p.logits_fn, task), roots, p.test_key,
               sharding.data_mesh(devices), sharding.data_mesh(_local(devices)), mask, pruned, wrapped,
               label_classes=dataset.num_classes if task is tasks.DEFAULT else 0,
               route_note=route_line(job.model.name, route) if _said(job, route) else None,
               init=p.init, partition=p.partition, provenance=p.provenance, keyed=keyed)


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
    return {"public": public_inputs(run), "data": init_provenance.data_identity(run.job.data),
            "init": prov.record(run.init.digest if run.init else None) if prov else None,
            "inherited": list(prov.groups) if prov else []}


def _grad_sum(job: RunJob, p: Prepared, params, devices: int):
    """The route's clipped sum over the trainable parameters (tanplan.dp.partition), and the Route, chosen at
    the planned chunk's rows on each of the run's devices (public: N, q and the config)."""
    logits_fn, trainable = dp_partition.logits_over(p.partition, p.logits_fn, params)
    layout = sampling.batch_layout(p.dataset.num_train, p.plan.q, job.perf.physical_batch_size, devices)
    route = routes.choose(job, logits_fn, trainable, public_example(p.dataset.input_shape),
                          rows=layout.chunk_size // devices, augment=p.augment)
    make = lambda f: routes.grad_sum_of(job, f, p.augment, route.name, devices)  # noqa: E731
    return dp_partition.grad_sum_over(p.partition, make, p.logits_fn), route


def _local(devices) -> list:
    """This process's devices among the run's."""
    return [d for d in devices if d.process_index == jax.process_index()]


def _said(job: RunJob, route: routes.Route) -> bool:
    """Whether the run tells its route: a plugged-in model's always, a built-in one's where its cost at the
    chunk size took it off the per-layer route."""
    return is_import_path(job.model.name) or (route.name == "vmap" and route.cost is not None)


def _keyed_step(inner: Callable, *, masked: bool, inputs: Callable = lambda batch: batch) -> Callable:
    """step(state, batch, roots, extra=None): step t's keys folded from the roots at state.step, the inner
    step, and whether the released (noisy) parameters are all finite. The masked step also takes the public
    key (random gradient dropping); a wrapped mechanism's step its wrapper's inputs and this step's draws
    (extra: {"args": replicated arrays, "rows": batches read by index}). inputs: the batches' rows as the
    model's inputs, on the device (uint8 pixels normalised: batches.device_inputs)."""

    def step(state, batch, roots, extra=None):
        batch = inputs(batch)
        noise_key, aug_key, public_key = (
            jax.random.fold_in(jax.random.wrap_key_data(roots[name], impl="threefry2x32"), state.step)
            for name in ("noise", "augment", "public"))
        if masked:
            state, metrics = inner(state, batch, noise_key, aug_key, public_key)
        elif extra is None:
            state, metrics = inner(state, batch, noise_key, aug_key)
        else:  # a wrapped mechanism: its run-long inputs, this step's draws and the rows it reads beside the batch
            rows = {name: inputs(rows) for name, rows in extra["rows"].items()}
            state, metrics = inner(state, batch, noise_key, aug_key, {**roots["wrapped"], **extra["args"], **rows})
        finite = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(state.params)]
        return state, {**metrics, "params_finite": jnp.all(jnp.stack(finite))}

    return step
