"""`tanplan convert --from cifar10|image-folder SRC --out DIR`: a dataset as a memmap folder, read by index
at training time (`data.dataset = "memmap"`, `data.path = DIR`) without ever being loaded whole."""

from __future__ import annotations

import argparse

from tanplan.commands._args import positive_int, print_json
from tanplan.data import memmap
from tanplan.errors import UsageError
from tanplan.workflow.inputs import check_out_dir

HELP = ("convert CIFAR-10's batches or an image folder (train/<class>/, test/<class>/ or val/<class>/) into a "
        "memmap folder that training reads by index (data.dataset = \"memmap\")")


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def configure(parser) -> None:
    parser.add_argument("--from", dest="kind", required=True, choices=("cifar10", "image-folder"),
                        help="cifar10: the python-pickle batches; image-folder: SRC/train/<class>/*.jpg|png... and "
                             "SRC/test/<class>/ (or SRC/val/<class>/)")
    parser.add_argument("source", metavar="SRC", help="the folder to convert")
    parser.add_argument("--out", required=True, metavar="DIR", help="the memmap folder to write (new or empty)")
    parser.add_argument("--image-size", type=positive_int, default=64, metavar="S",
                        help="image-folder: images resized on their shorter side and centre-cropped to S×S (default 64)")
    parser.add_argument("--channels", type=int, choices=(1, 3), default=3, help="image-folder: 3 (RGB) or 1 (grey)")
    parser.add_argument("--mean", type=_floats, help="image-folder: per-channel mean of pixels in [0, 1], public "
                        "constants (default ImageNet's 0.485,0.456,0.406)")
    parser.add_argument("--std", type=_floats, help="image-folder: per-channel std (default ImageNet's 0.229,0.224,0.225)")
    parser.add_argument("--json", action="store_true", help="print the folder's description as JSON")


def execute(args) -> int:
    check_out_dir(args.out)
    if args.kind == "cifar10":
        if args.mean or args.std or args.channels != 3:
            raise UsageError("--mean, --std and --channels are not allowed with --from cifar10: its constants are "
                             "CIFAR-10's published ones")
        out = memmap.convert_cifar10(args.source, args.out)
    else:
        out = memmap.convert_image_folder(args.source, args.out, image_size=args.image_size, channels=args.channels,
                                          mean=args.mean, std=args.std)
    meta = memmap.read_meta(out)
    if args.json:
        print_json({"path": str(out), **meta})
        return 0
    shape = "×".join(map(str, meta["input_shape"]))
    print(f"wrote {out}: {meta['splits']['train']:,} training and {meta['splits']['test']:,} test examples of "
          f"{shape} uint8, {meta['num_classes']} classes; train with --set data.dataset=memmap --set data.path={out}")
    return 0
