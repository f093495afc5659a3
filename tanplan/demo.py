"""`make demo`: the whole pipeline (`tanplan run --baselines`) on the mnist1d default → reports/mnist1d/,
and the planner's report on the paper's ImageNet setting → reports/imagenet/plan/."""

from __future__ import annotations

import sys

from tanplan.cli import main

IMAGENET_PLAN = ["--dataset-size", "1281167", "--batch-size", "16384", "--steps", "72000", "--sigma", "2.5",
                 "--delta", "8e-7", "--accountant", "both"]


def demo(root: str = "reports") -> int:
    print("== the paper's ImageNet plan")
    code = main(["plan", *IMAGENET_PLAN, "--out", f"{root}/imagenet/plan"])
    if code:
        return code
    print("\n== mnist1d: plan → sweep → fit → launch, then the cheaper private methods at the same ε")
    return main(["run", "--config", "experiments/mnist1d.toml", "--out", f"{root}/mnist1d", "--baselines"])


if __name__ == "__main__":
    sys.exit(demo(*sys.argv[1:]))
