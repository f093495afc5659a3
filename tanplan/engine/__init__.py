"""One DP-SGD run from its job (tanplan.job.RunJob, never the Config): THE training loop (every `train`, proxy of `sweep` and `fit`, and `launch`)
and what it needs beside it.

Modules: loop (train_and_evaluate: the loop on one screen), setup (prepare and build a run: data, model,
its mechanism and the jitted step), session (one run in flight and its periodic jobs: evaluation,
checkpoint, throughput, bar), closing (the RunSummary, AugTest, the model card), routes (the gradient
route and why), route_notes (what the user is told of it), run_folder (a run's files and lock),
run_identity (what a resume must match and the secret is bound to), checkpoint (orbax checkpoints),
batches (the step's rows read by index, prefetched), evaluation (test metrics, AugTest, checksum), release
(the released model), sparsity (pruning and dropping in a run), memory (will the batches fit), tracking
(TensorBoard and plugged-in writers), epsilon_ticker (the bar's ε), ray_worker (the Ray Train launch),
bench (DP step against the fastest non-private one), hooks (what a stage adds around a run: the audit's
wrapper of the mechanism). The run's summary type is tanplan.outcomes.run_summary.

Built on tanplan.dp (the mechanism in JAX), tanplan.models and tanplan.data; accounted by
tanplan.privacy. Imports JAX: import the modules you need.
"""
