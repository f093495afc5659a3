"""What a run writes when its steps are over: the last evaluation (a run resumed at its end), the
RunSummary, AugTest's accuracy, the released model and its card, ledger.json with its PLD figures and
summary.json. Every figure is a function of the noisy parameters, the test set and public information
(the config, N, the planned layout, the expected B): never of the sampled batches."""

from __future__ import annotations

import dataclasses
import time

import jax

from tanplan.engine import evaluation
from tanplan.engine.hooks import RunHooks
from tanplan.engine.session import Session
from tanplan.job import RunJob
from tanplan.dp.partition import trainable_of
from tanplan.models import adapters
from tanplan.outcomes.run_summary import Init, Layout, RunSummary
from tanplan.provenance import Environment


def close_run(s: Session, *, started: float, backend: str, env: Environment, hooks: RunHooks) -> RunSummary:
    """Evaluate what a run resumed at its end saved, close the tracker, build the summary (with AugTest
    and the model when the run finished) and write ledger.json and summary.json."""
    if not s.history and not s.interrupted and s.diverged_at is None:  # resumed at the end: evaluate what was saved
        s.history.append(s.evaluate(s.ledger.steps))
    s.tracker.close()  # (left open by an error: its writes are flushed, TensorBoard's thread is a daemon)
    summary = run_summary(s, started=started, backend=backend, env=env, hooks=hooks)
    if s.diverged_at is None and not s.interrupted:
        run = s.run
        augtest = evaluation.evaluate_augtest(s.job, run.logits_fn, s.released_params(), run.dataset, run.augment,
                                              run.test_key)
        summary = dataclasses.replace(summary, test_accuracy_augtest=augtest)
        summary = dataclasses.replace(summary, model=s.folder.write_model(released_model(s),
                                                                          model_card(s.job, s, summary)))
    s.folder.write_ledger(s.ledger, with_pld=run_is_target(s))
    s.folder.write_summary(summary)
    return summary


def released_model(s: Session):
    """The parameters model/params.npz holds: the released ones, adapters merged into their base kernels
    (tanplan.models.adapters.merged: the base model's paths and shapes, the same function of the input)."""
    params = s.released_params()
    return adapters.merged(params) if s.job.init.adapters else params


def parameter_counts(run) -> tuple[int, int]:
    """(trainable, frozen) scalars of the run's parameters (tanplan.dp.partition; adapters included)."""
    total = sum(int(leaf.size) for leaf in jax.tree.leaves(run.params))
    trainable = sum(int(leaf.size) for leaf in jax.tree.leaves(trainable_of(run.partition, run.params)))
    return trainable, total - trainable


def run_is_target(s: Session) -> bool:
    return s.run.plan.target is None


def run_summary(s: Session, *, started: float, backend: str, env: Environment, hooks: RunHooks) -> RunSummary:
    """The RunSummary of the session's run: its last evaluation, its ledger's figures, its plan, how it ran,
    and what a stage's hooks say it is (release_marks; private_release false when it is not one)."""
    plan, ledger, final = s.run.plan, s.ledger, (s.history[-1] if s.history else {})
    # PLD at a proxy's small σ takes minutes (or cannot run), and a proxy's own ε guarantees nothing: RDP.
    pld = ledger.pld_figures() if run_is_target(s) else {"epsilon_pld": None, "epsilon_replace_one": None}
    accountant_of_record, neighbouring_of_record = ledger.record()
    train_seconds = s.train_seconds()
    trainable, frozen = parameter_counts(s.run)
    return RunSummary(
        test_accuracy=final.get("test_accuracy"), test_loss=final.get("test_loss"),
        epsilon=ledger.epsilon_of_record(), epsilon_accountant=accountant_of_record,
        epsilon_neighbouring=neighbouring_of_record,
        epsilon_rdp=ledger.epsilon("rdp"), epsilon_pld=pld["epsilon_pld"],
        epsilon_replace_one=pld["epsilon_replace_one"], neighbouring=plan.neighbouring,
        delta=plan.delta, accountant=plan.accountant, private=plan.private,
        noise_secret=not s.run.mechanism.secret.reproducible,
        dataset_size=plan.dataset_size, batch_size=plan.batch_size, steps=ledger.steps, planned_steps=plan.steps,
        sigma=plan.sigma, snip_sigma=plan.snip_sigma or None, clip_norm=plan.clip_norm,
        target=plan.target, grad_method=s.run.route,
        layout=Layout(chunks=s.planned.chunks, chunk_size=s.planned.chunk_size), backend=backend,
        devices=s.run.mesh.devices.size, processes=jax.process_count(), resumed_from_step=s.start,
        steps_this_run=ledger.steps - s.start, wall_seconds=time.perf_counter() - started,
        train_seconds=train_seconds,
        samples_per_second=s.examples / train_seconds if train_seconds > 0 and s.examples else None,
        params_checksum=evaluation.params_checksum(s.state.params), evaluated_at_step=final.get("step"),
        diverged_at_step=s.diverged_at, interrupted=s.interrupted,
        test_accuracy_no_ema=final.get("test_accuracy_no_ema"), pruning=s.run.pruning,
        trainable_parameters=trainable, frozen_parameters=frozen,
        platform=env.platform, device_kind=env.device_kind, versions=env.versions,
        init=init_of(s.run, ledger), **marks_of(hooks))


def marks_of(hooks: RunHooks) -> dict:
    """The summary's fields a stage's hooks set: its release_marks, and private_release false for a run that
    is not a private release (absent otherwise, as in every other run's summary.json)."""
    return hooks.release_marks | ({} if hooks.private_release else {"private_release": False})


def init_of(run, ledger=None) -> Init | None:
    """What summary.json says of [init]: the weights' source and digest, the head re-initialised, the
    trainable and frozen scalars, where the weights were trained (`provenance`, from the run's ledger: the
    composed ε is its figure of record); None for a run from experiment.seed's draw with every parameter
    trained."""
    if run.init is None and run.partition is None:
        return None
    trainable, frozen = parameter_counts(run)
    return Init(source=run.init.source if run.init else "", digest=run.init.digest if run.init else None,
                reinitialised=run.init.reinitialised if run.init else (), trainable_parameters=trainable,
                frozen_parameters=frozen, provenance=provenance_of(run, ledger))


def provenance_of(run, ledger) -> dict | None:
    """What summary.json and the model card say of where [init]'s weights were trained: the provenance's
    record (tanplan.privacy.init_provenance), with this run's own ε of record beside the composed one."""
    if run.provenance is None:
        return None
    record = run.provenance.record(run.init.digest if run.init else None)
    return record | {"epsilon_this_run": ledger.epsilon_this_run() if ledger is not None else None}


def model_card(job: RunJob, s: Session, summary: RunSummary) -> dict:
    """model/model.json: the architecture, the weights released and the figures of record (`epsilon`: the
    composition with what its [init] inherited, `init` saying what that was); an audited run's says it is
    not a private release."""
    m, dataset = job.model, s.run.dataset
    card = {"model": m.name, "width": m.width, "depth": m.depth, "norm_order": m.norm_order, "options": m.options,
            "num_classes": dataset.num_classes, "input_shape": list(dataset.input_shape),
            "weights": "ema" if job.train.ema_decay > 0 else "final", "steps": summary.steps,
            "epsilon": summary.epsilon, "epsilon_accountant": summary.epsilon_accountant,
            "epsilon_neighbouring": summary.epsilon_neighbouring, "delta": summary.delta,
            "noise_secret": summary.noise_secret,
            "test_accuracy": summary.test_accuracy}
    if summary.private_release is False:  # an audit's run: trained with canaries, for the audit only
        card |= {"private_release": False}
    if summary.audit_canaries:
        card |= {"audit_canaries": summary.audit_canaries}
    if job.init.adapters:  # trained as low-rank adapters, released merged: the base model's shapes
        card |= {"adapters": {"targets": list(job.init.adapters), "rank": job.init.adapters_rank, "merged": True}}
    if summary.init is not None and summary.init.provenance:  # what it starts from: "epsilon" composes it
        card |= {"init": dict(summary.init.provenance)}
    return card
