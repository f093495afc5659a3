"""A dataset larger than memory: a folder of .npy files read through numpy memmaps, and its converters.

The folder (`data.dataset = "memmap"`, `data.path = FOLDER`):

    meta.json                  {"format": "tanplan-memmap", "version": 1, "name", "num_classes", "class_names",
                                "input_shape", "dtype", "scale", "mean", "std", "splits": {"train": n, "test": m}}
    train_x.npy  train_y.npy   (n, *input_shape) pixels (uint8) or values (float32); (n,) int32 labels
    test_x.npy   test_y.npy

A row is read as float32 `(value·scale − mean) / std` per channel: uint8 pixels are stored as they are
(a quarter of float32's size) and normalised with the PUBLIC constants in meta.json, never with
statistics of the training set: when read (`source[indices]`: the test set), or, for the training
batches, on the device inside the jitted step (the rows travel as uint8: tanplan.data.pixels). Only the rows asked for are read (`MemmapSource[indices]`, in
ascending order from tanplan.data.source.read_rows): the operating system pages them in and may drop
them again, so the training set never has to fit in memory.

Converters write the folder one image at a time (memory: one image), into a temporary folder renamed
into place at the end and removed on any failure, so an interrupted conversion leaves nothing
half-written; sizes that cannot fit (the files on the free disk space, one image in the available memory:
`check_fits`) are refused before anything is written:

- `convert_cifar10(batches_dir, out)`: the python-pickle CIFAR-10 batches (read by tanplan.data.cifar10's
  safe unpickler), with CIFAR-10's published mean and std;
- `convert_image_folder(root, out, image_size=...)`: root/train/<class>/*.jpg|png|... and root/test/<class>/
  (or root/val/, ImageNet's layout), classes in name order, each image resized on its shorter side and
  centre-cropped to image_size × image_size; mean and std ImageNet's published constants unless given.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np

import tanplan.data.cifar10 as cifar10
import tanplan.data.dataset as dataset
from tanplan.data.pixels import Pixels
from tanplan.data.source import check_constants, describe
from tanplan.errors import UsageError

FORMAT, VERSION = "tanplan-memmap", 1
META = "meta.json"
SPLITS = ("train", "test")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
# ImageNet's published per-channel mean and std (public constants, as every torchvision model uses).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class MemmapSource:
    """One split of a memmap folder as a random-access source: source[indices] -> (float32 x, int32 y).

    The files are opened on first use (and again after unpickling: a Ray worker gets the paths, not
    the mappings). The step reader (tanplan.engine.batches) reads training rows by `fill` instead:
    uint8 pixels stay uint8 (`pixels` holds their public constants, and the jitted step normalises them
    on the device), other rows are normalised here as `source[indices]` does. `fill` is thread-safe:
    several reader threads fill disjoint row ranges of one batch at once.
    """

    def __init__(self, folder: str | os.PathLike, split: str, meta: dict):
        self.folder, self.split = str(folder), split
        self.input_shape = tuple(meta["input_shape"])
        self.num_classes = int(meta["num_classes"])
        self._n = int(meta["splits"][split])
        channels = self.input_shape[-1]
        self._normal = Pixels(float(meta.get("scale", 1.0)), tuple(meta.get("mean") or [0.0] * channels),
                              tuple(meta.get("std") or [1.0] * channels))
        stored = _npy_header(Path(folder) / f"{split}_x.npy")[1]
        self.pixels = self._normal if stored == np.uint8 else None  # uint8 rows travel as they are
        self.row_dtype = np.dtype(np.uint8 if self.pixels else np.float32)  # what `fill` writes
        self.forward_reads = True  # a file: `fill` reads fastest in ascending index order
        self._x = self._y = None
        self._opening = threading.Lock()

    def _open(self):
        with self._opening:  # reader threads may meet here first
            if self._x is None:
                folder = Path(self.folder)
                self._y = np.load(folder / f"{self.split}_y.npy", mmap_mode="r")
                self._x = np.load(folder / f"{self.split}_x.npy", mmap_mode="r")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, indices):
        self._open()
        return self._normal.on_host(self._x[indices]), np.asarray(self._y[indices], np.int32)

    def fill(self, indices: np.ndarray, x_out: np.ndarray) -> np.ndarray:
        """The inputs of rows `indices` (ascending: a forward read through the file) into x_out (row_dtype),
        in their order, uint8 pixels in one copy straight from the mapping; returns their int32 labels."""
        self._open()
        if self.pixels is not None:
            np.take(self._x, indices, axis=0, out=x_out)
        else:
            x_out[...] = self._normal.on_host(self._x[indices])
        return np.asarray(self._y[indices], np.int32)

    def __getstate__(self):
        return {**self.__dict__, "_x": None, "_y": None, "_opening": None}

    def __setstate__(self, state):
        self.__dict__.update(state, _opening=threading.Lock())

    def __repr__(self) -> str:
        return f"MemmapSource({self.folder!r}, {self.split!r}, {self._n} rows)"


def read_meta(folder) -> dict:
    """meta.json of a memmap folder, checked against its .npy headers; UsageError naming what is wrong."""
    folder = Path(folder).expanduser()
    if not (folder / META).is_file():
        raise UsageError(f"data.path = {str(folder)!r} is not a memmap dataset: no {META} (make one with "
                         "`tanplan convert`)")
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(f"{folder / META} is unreadable: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UsageError(f"{folder / META} is not a {FORMAT} version {VERSION} description")
    try:
        shape = tuple(int(d) for d in meta["input_shape"])
        classes = int(meta["num_classes"])
        sizes = {s: int(meta["splits"][s]) for s in SPLITS}
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{folder / META} lacks input_shape, num_classes or splits") from None
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise UsageError(f"{folder / META}: input_shape {list(shape)} is not allowed: (length, channels) or "
                         "(height, width, channels), each at least 1")
    if classes < 2:
        raise UsageError(f"{folder / META}: num_classes = {classes}; a classifier needs at least 2")
    declared = meta.get("dtype")
    for split in SPLITS:
        for part, want in (("x", (sizes[split], *shape)), ("y", (sizes[split],))):
            path = folder / f"{split}_{part}.npy"
            got, dtype, offset = _npy_header(path)
            if got != want:
                raise UsageError(f"{path}: shape {got} where {META} says {want}")
            if part == "x" and declared is not None and dtype != _dtype(declared, folder):
                raise UsageError(f"{path}: dtype {dtype} where {META} says {declared!r}; re-convert the folder")
            if part == "x" and not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
                raise UsageError(f"{path}: dtype {dtype}; inputs must be numbers")
            if part == "y" and not np.issubdtype(dtype, np.integer):
                raise UsageError(f"{path}: dtype {dtype}; labels must be integers (class indices)")
            need = offset + int(np.prod(want, dtype=np.int64)) * dtype.itemsize
            if path.stat().st_size < need:
                raise UsageError(f"{path} is truncated: {path.stat().st_size:,} bytes where its header needs "
                                 f"{need:,}; re-convert the folder")
    _check_constants(meta, shape[-1], folder / META)
    for split in SPLITS:
        _check_labels(folder / f"{split}_y.npy", classes, public=split == "test")
    return meta


def _dtype(name, folder) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        raise UsageError(f"{folder / META}: dtype {name!r} is not a numpy dtype") from None


def _check_constants(meta: dict, channels: int, where: Path) -> None:
    """scale: one finite number > 0; mean and std (when given): one finite number per channel, std > 0."""
    scale = meta.get("scale", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not np.isfinite(scale) or scale <= 0:
        raise UsageError(f"{where}: scale = {scale!r} is not allowed: one finite number > 0 (1/255 for pixels)")
    for key in ("mean", "std"):
        if meta.get(key) is not None:
            check_constants(meta[key], channels, f"{where}: {key}", positive=key == "std")


def _check_labels(path: Path, classes: int, public: bool, rows: int = 1 << 20) -> None:
    """Every label of the .npy at path in [0, classes), scanned in slices (vectorised: a label file is 4 bytes a
    row); a training label's value is never stated (private), a test label's is."""
    labels = np.load(path, mmap_mode="r")
    for start in range(0, len(labels), rows):
        y = np.asarray(labels[start:start + rows])
        if y.size and (y.min() < 0 or y.max() >= classes):
            what = (f"the label {int(y.min() if y.min() < 0 else y.max())}" if public
                    else "a label outside this range")
            raise UsageError(f"{path}: labels must lie in [0, {classes}) ({META}'s num_classes); it holds {what}")


def load_memmap(folder):
    """The memmap folder as tanplan.data.source.Sources (no row is read but the first test row)."""
    folder = Path(folder).expanduser()
    meta = read_meta(folder)
    return describe(meta.get("name") or folder.name, MemmapSource(folder, "train", meta),
                    MemmapSource(folder, "test", meta), num_classes=int(meta["num_classes"]),
                    input_shape=tuple(meta["input_shape"]), mean=meta.get("mean"), std=meta.get("std"),
                    fingerprint=fingerprint(folder))


def input_rank(folder) -> int | None:
    """The rank of one example, from meta.json alone (None when unreadable: reported when loaded)."""
    try:
        return len(json.loads((Path(folder).expanduser() / META).read_text(encoding="utf-8"))["input_shape"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# Files up to this size are hashed whole; a larger one by its size, its first and last block and
# _SAMPLES blocks spread evenly between (4 MiB read per file, whatever its size).
_WHOLE_BYTES = 16 * 2**20
_BLOCK = 4096
_SAMPLES = 1024


def fingerprint(folder) -> str:
    """What identifies the folder's rows, the same for every copy of it (other paths and file times): a
    digest of meta.json and of each .npy file's content (`content_digest`). Each worker of a multi-host
    run recomputes it from its own copy and must find the driver's (tanplan.dp.secret)."""
    folder = Path(folder)
    digest = hashlib.blake2b(digest_size=16)
    digest.update((folder / META).read_bytes())
    for split in SPLITS:
        for part in ("x", "y"):
            digest.update(f"{split}_{part}:{content_digest(folder / f'{split}_{part}.npy')}".encode())
    return digest.hexdigest()


def content_digest(path: Path) -> str:
    """A digest of the file's bytes that stays cheap on a large file: its size and every byte up to
    _WHOLE_BYTES; beyond, its size, first and last block and _SAMPLES blocks at fixed, evenly spread
    offsets (a change outside the sampled blocks of a large file goes unseen: a copy of the folder is
    recognised, an edit of it is not guaranteed to be)."""
    size = path.stat().st_size
    digest = hashlib.blake2b(str(size).encode(), digest_size=16)
    with open(path, "rb") as f:
        if size <= _WHOLE_BYTES:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
            return digest.hexdigest()
        last = size - _BLOCK
        for offset in (0, *(last * i // (_SAMPLES + 1) for i in range(1, _SAMPLES + 1)), last):
            f.seek(offset)
            digest.update(f.read(_BLOCK))
    return digest.hexdigest()


def _npy_header(path: Path) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, offset of the data) from a .npy file's header, without reading its data."""
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            offset = f.tell()
        if fortran and len(shape) > 1:
            raise ValueError("Fortran-ordered array; tanplan reads C-ordered rows")
        return tuple(shape), np.dtype(dtype), offset
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read {path} as .npy: {err}") from None


# ----------------------------------------------------------------------------------------------------
# Writing


class _Folder:
    """A memmap folder being written: a temporary sibling of `out`, renamed to it by `commit`."""

    def __init__(self, out: Path):
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        self.sizes: dict[str, int] = {}

    def split(self, name: str, n: int, shape: tuple[int, ...], dtype):
        self.sizes[name] = n
        x = np.lib.format.open_memmap(self.tmp / f"{name}_x.npy", mode="w+", dtype=dtype, shape=(n, *shape))
        y = np.lib.format.open_memmap(self.tmp / f"{name}_y.npy", mode="w+", dtype=np.int32, shape=(n,))
        return x, y

    def commit(self, meta: dict) -> Path:
        meta = {"format": FORMAT, "version": VERSION, **meta, "splits": dict(self.sizes)}
        (self.tmp / META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        if self.out.is_dir():
            self.out.rmdir()  # the user's empty --out (anything in it was refused before writing began)
        os.replace(self.tmp, self.out)
        return self.out

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


# Copies of one image a conversion holds at once (the decoded source at least the crop's size, the resized
# image, the crop, its numpy array): what one image costs in memory, as a multiple of its crop's bytes.
_RESIZE_COPIES = 4


def check_fits(rows: int, shape: tuple[int, ...], out, *, working: int, what: str) -> None:
    """UsageError (one line, before anything is written) unless a conversion of `rows` uint8 images of
    `shape` fits: its files on the free disk space where `out` goes, and its working memory (`working`
    bytes: one image being resized) in the memory available now. A conversion that does not fit would be
    killed part-way (the OOM killer) and leave a half-written sparse file behind."""
    row = int(np.prod(shape, dtype=np.int64))
    files = rows * (row + 4) + 4 * 4096  # pixels and int32 labels, and the four .npy headers
    where = Path(out).expanduser().absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if files > free:
        raise UsageError(f"{what} is not allowed here: {rows:,} images of {'×'.join(map(str, shape))} need "
                         f"{files / 2**30:,.1f} GiB on disk and {where} has {free / 2**30:,.1f} GiB free; "
                         "use a smaller --image-size or another --out")
    memory = dataset.available_memory()  # looked up on its module: a test may stand in for it
    if memory is not None and working > memory:
        raise UsageError(f"{what} is not allowed: one image of {'×'.join(map(str, shape))} needs about "
                         f"{working / 2**30:,.1f} GiB of memory while resized and {memory / 2**30:,.1f} GiB are "
                         "available; use a smaller --image-size")


def _check_out(out) -> Path:
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {str(out)!r} is not allowed: it exists and is not an empty folder")
    return out  # an empty one stays until the finished folder replaces it: a failed conversion leaves it as it was


def convert_cifar10(batches_dir, out) -> Path:
    """The CIFAR-10 python-pickle batches in `batches_dir` as a memmap folder `out` (uint8 pixels)."""
    root = cifar10.resolve_dir(batches_dir)
    check_fits(60_000, (32, 32, 3), out, working=30_000_000, what="CIFAR-10")  # a batch file at a time: 30 MB
    out = _check_out(out)
    meta = cifar10.read_meta(root)
    folder = _Folder(out)
    try:
        for split, files in (("train", cifar10.TRAIN_FILES), ("test", (cifar10.TEST_FILE,))):
            batches = [cifar10.read_batch(root / name) for name in files]
            x, y = folder.split(split, sum(len(b[1]) for b in batches), (32, 32, 3), np.uint8)
            start = 0
            for images, labels in batches:  # a batch at a time: 10,000 images, 30 MB
                x[start:start + len(labels)] = images
                y[start:start + len(labels)] = labels
                start += len(labels)
            x.flush()
            y.flush()
            del x, y
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get("label_names", [])]
        return folder.commit({"name": "cifar10", "num_classes": len(names) or 10, "class_names": names,
                              "input_shape": [32, 32, 3], "dtype": "uint8", "scale": 1 / 255,
                              "mean": list(cifar10.MEAN), "std": list(cifar10.STD)})
    except BaseException:
        folder.abort()
        raise


def image_folder_files(root: Path, split: str, classes: list[str] | None = None) -> tuple[list[str], list[tuple[Path, int]]]:
    """(class names, [(image file, label)]) of root/split/<class>/*, classes in name order."""
    base = root / split
    found = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    classes = classes if classes is not None else found
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise UsageError(f"{base}: class folder {unknown[0]!r} is not among the training classes")
    files = [(path, label) for label, name in enumerate(classes) if (base / name).is_dir()
             for path in sorted((base / name).iterdir()) if path.suffix.lower() in IMAGE_SUFFIXES]
    return classes, files


def convert_image_folder(root, out, *, image_size: int, channels: int = 3, mean=None, std=None) -> Path:
    """root/train/<class>/ and root/test/<class>/ (or root/val/) as a memmap folder of uint8 images of
    image_size × image_size × channels (shorter side resized, then centre-cropped)."""
    from PIL import Image

    root = Path(root).expanduser()
    if not (root / "train").is_dir():
        raise UsageError(f"{root} has no train/ folder: an image folder holds train/<class>/ and test/<class>/ "
                         "(or val/<class>/)")
    test_split = next((s for s in ("test", "val") if (root / s).is_dir()), None)
    if test_split is None:
        raise UsageError(f"{root} has no test/ or val/ folder beside train/")
    if channels not in (1, 3):
        raise UsageError(f"--channels {channels} is not allowed: use 1 (grey) or 3 (RGB)")
    if image_size < 1:
        raise UsageError(f"--image-size {image_size} is not allowed: must be >= 1")
    classes, train_files = image_folder_files(root, "train")
    if len(classes) < 2:
        raise UsageError(f"{root / 'train'} holds {len(classes)} class folder(s); a classifier needs at least 2")
    _, test_files = image_folder_files(root, test_split, classes)
    for split, files in (("train", train_files), (test_split, test_files)):
        if not files:
            raise UsageError(f"{root / split} holds no image ({', '.join(IMAGE_SUFFIXES)})")
    mean = tuple(mean) if mean is not None else (IMAGENET_MEAN if channels == 3 else (0.5,))
    std = tuple(std) if std is not None else (IMAGENET_STD if channels == 3 else (0.5,))
    if len(mean) != channels or len(std) != channels or min(std) <= 0 or not np.isfinite([*mean, *std]).all():
        raise UsageError(f"mean and std must hold {channels} finite value(s) each, std > 0")
    check_fits(len(train_files) + len(test_files), (image_size, image_size, channels), out,
               working=_RESIZE_COPIES * image_size * image_size * channels, what=f"--image-size {image_size}")
    out = _check_out(out)
    folder = _Folder(out)
    mode = "RGB" if channels == 3 else "L"
    try:
        for split, files in (("train", train_files), ("test", test_files)):
            x, y = folder.split(split, len(files), (image_size, image_size, channels), np.uint8)
            for i, (path, label) in enumerate(files):
                try:
                    with Image.open(path) as image:
                        x[i] = _square(image.convert(mode), image_size).reshape(image_size, image_size, channels)
                except (OSError, ValueError) as err:
                    raise UsageError(f"cannot read image {path}: {err}") from None
                y[i] = label
            x.flush()
            y.flush()
            del x, y
        return folder.commit({"name": root.name, "num_classes": len(classes), "class_names": classes,
                              "input_shape": [image_size, image_size, channels], "dtype": "uint8",
                              "scale": 1 / 255, "mean": list(mean), "std": list(std)})
    except BaseException:
        folder.abort()
        raise


def _square(image, size: int) -> np.ndarray:
    """The image resized so that its shorter side is `size`, then the centre size × size crop."""
    from PIL import Image

    w, h = image.size
    scale = size / min(w, h)
    image = image.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.Resampling.BILINEAR)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)), np.uint8)
