"""experiments/reader_bench.py's ImageNet-shaped section runs on a small memmap it writes itself (uint8 and
float32 rows, 1 and N threads) and removes it; its figures are printed (their values: the script's own run)."""

import importlib.util
import re

from helpers import ROOT


def test_the_imagenet_section_reads_its_own_memmap_with_one_and_several_threads(capsys, monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("reader_bench", ROOT / "experiments" / "reader_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "bench"))
    bench.imagenet(steps=2, n=48, batch=12, threads=2)
    out = capsys.readouterr().out
    lines = re.findall(r"(uint8|float32) +(\d) thread\(s\): +([\d,]+) rows/s, +([\d,]+) MB/s", out)
    assert [(d, t) for d, t, *_ in lines] == [("uint8", "1"), ("uint8", "2"), ("float32", "1"), ("float32", "2")]
    assert all(int(rows.replace(",", "")) > 0 for *_, rows, _ in lines), out
    assert "normalised on the device (cpu)" in out and "(224, 224, 3)" in out
    assert not (tmp_path / "bench").exists()  # the synthetic memmap is removed
