"""dev/vislog.py turns main.log files into a PNG of the loss curves."""
from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VISLOG = REPO / "dev" / "vislog.py"


def write_log(path: Path, steps: int, scale: float, with_eval: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in range(steps):
        lr = 3e-4 * 0.5 * (1 + math.cos(math.pi * s / steps))
        lines.append(f"s:{s} trl:{scale * (4.0 + 7.0 / (1 + s / 5)):.4f} lr:{lr:.6e} norm:{1.0 + 0.1 * (s % 7):.4f}")
        if s % 10 == 0:
            lines.append(f"s:{s} tel:{scale * (4.2 + 7.0 / (1 + s / 5)):.4f}")
        if with_eval and s % 20 == 0:
            lines.append(f"s:{s} eval:{0.25 + 0.001 * s:.4f}")
    path.write_text("\n".join(lines) + "\n")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def vislog(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(VISLOG), *map(str, args)], capture_output=True, text=True)


def test_two_runs_make_a_png_of_sensible_size(tmp_path: Path) -> None:
    write_log(tmp_path / "runA" / "main.log", 100, 1.0, with_eval=True)
    write_log(tmp_path / "runB" / "main.log", 60, 0.9, with_eval=False)
    out = tmp_path / "plot.png"
    r = vislog(tmp_path / "runA" / "main.log", tmp_path / "runB" / "main.log", "-o", out, "--ema", "0.8")
    assert r.returncode == 0, r.stderr
    w, h = png_size(out)
    assert 1000 <= w <= 1600 and 700 <= h <= 1200, (w, h)   # four panels as a 2x2 grid
    assert out.stat().st_size > 20_000


def test_malformed_lines_are_skipped_with_a_count(tmp_path: Path) -> None:
    log = tmp_path / "r" / "main.log"
    write_log(log, 20, 1.0, with_eval=False)
    with log.open("a") as f:
        f.write("garbage line\ns:abc trl:1\ns:5 trl:oops\n")
    r = vislog(log, "-o", tmp_path / "p.png", "-l", "only")
    assert r.returncode == 0, r.stderr
    assert "skipped 3 malformed" in r.stderr
    png_size(tmp_path / "p.png")


def test_log_with_nothing_parsable_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    log.write_text("hello\nworld\n")
    r = vislog(log, "-o", tmp_path / "p.png")
    assert r.returncode != 0
    assert "bad.log" in r.stderr and "no log lines parsed" in r.stderr
    assert not (tmp_path / "p.png").exists()


def test_missing_log_and_label_count_mismatch_fail(tmp_path: Path) -> None:
    r = vislog(tmp_path / "nope.log", "-o", tmp_path / "p.png")
    assert r.returncode != 0 and "nope.log" in r.stderr
    log = tmp_path / "a" / "main.log"
    write_log(log, 5, 1.0, with_eval=False)
    r = vislog(log, "-l", "x", "-l", "y")
    assert r.returncode != 0 and "--label" in r.stderr
