"""`make demo`: the planner on the paper's ImageNet setting and on the mnist1d default, reports in reports/."""

from __future__ import annotations

import sys

from tanplan.cli import main

SETTINGS = {
    "imagenet": ["--dataset-size", "1281167", "--batch-size", "16384", "--steps", "72000", "--sigma", "2.5",
                 "--delta", "8e-7", "--accountant", "both"],
    "mnist1d": ["--dataset-size", "48000", "--batch-size", "4096", "--steps", "300", "--epsilon", "8",
                "--accountant", "both"],
}


def demo(root: str = "reports") -> int:
    for name, argv in SETTINGS.items():
        print(f"== {name}")
        code = main(["plan", *argv, "--out", f"{root}/{name}/plan"])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(demo(*sys.argv[1:]))
