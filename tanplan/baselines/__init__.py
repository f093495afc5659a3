"""Private heads on frozen features and DP prototypes: the baselines a DP-SGD plan is weighed against.

Seven methods, each a small module-level function that trains a classifier on features from a public
encoder and states its guarantee in its docstring:

| method | paper | released | guarantee |
| --- | --- | --- | --- |
| dp-ls | Mehta et al. 2023 Alg. 3 | G, A_j, b_j once | 3/(2σ²)-zCDP |
| dp-newton | Mehta et al. 2023 Alg. 2 | per step: gradient and per-class Hessians | T/σ²-zCDP |
| dp-fc | Mehta et al. 2023 Alg. 4 | feature covariance once, then T clipped gradients | (T+1)/(2σ²)-zCDP |
| dp-adam | Mehta et al. 2023 Alg. 1 (full batch) | T clipped gradients | T/(2σ²)-zCDP |
| dppl-mean | Wahdany et al. 2024 §4.1 | per class: noisy count, 3 CoinPress steps | ρ-zCDP (parallel over classes) |
| dppl-public | Wahdany et al. 2024 Alg. 1 | per class: one public point (exponential mechanism) | ε-DP (pure) |
| dppl-publick | Wahdany et al. 2024 §C.3 | per class: K public points (joint exponential mechanism) | ε-DP (pure) |

Every guarantee is for add/remove-one neighbouring datasets (one example, with its label, present in
one dataset and absent from the other), the relation tanplan's DP-SGD accountant uses too. The dataset
size n is a public normaliser, as in DP-SGD. Under replace-one neighbours every sensitivity doubles at
most (a replacement is a removal and an addition), and the (ε, δ) of the Gaussian methods is that of
σ/2; the pure ε-DP methods become 2ε-DP.

Nothing here imports JAX at import time; `tanplan.baselines.runner` ties methods, calibration and
metrics together and is what the `tanplan baseline` command calls. `tanplan.baselines.released` (JAX)
reads the features a released or pretrained model gives its head, for the heads above.
"""

METHODS = ("dp-ls", "dp-newton", "dp-fc", "dp-adam", "dppl-mean", "dppl-public", "dppl-publick")
PUBLIC_METHODS = ("dppl-public", "dppl-publick")
