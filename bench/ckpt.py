"""Checkpoint save and restore against the disk's own speed.

With about `--gb` GB of float32 tensors, in a temp dir on one disk, each repetition runs, interleaved:
1. a durable `Checkpointer.save` against `dd if=/dev/zero bs=16M conv=fdatasync` of the same size (aim >= 0.9x),
   taking turns at going first, and against `torch.save` + fsync when torch is installed;
2. a cold restore (page cache dropped where permitted) against a cold `dd` read of the same size (aim >= 0.9x),
   on three paths: `restore(into=...)`, which reads each tensor straight into arrays the caller allocated (and
   touched) before the clock started, as a resume into a built model and optimizer does (the path the aim is
   judged on); `restore()`, which allocates new arrays; and `restore(mapped=True)` (the tensors copy-on-write
   views of the files, nothing allocated or copied); and a cold `verify` (every checksum, no arrays
   allocated), which shows what allocating costs;
3. how long `save_async` blocks the training step against a synchronous save (aim <= 10%), both ways it can
   stage the tensors: copied on the caller's thread before it returns (`staging="caller"`: the block is the
   call), or copied in the background while the training loop goes on to its next forward pass, which here
   reads every tensor once (the least a forward pass does; real ones do far more per parameter), and waits
   with `wait_staged()` before its next optimizer update (`staging="background"`: the block is the call plus
   that wait). How much slower that forward pass ran beside the save is reported too.
Medians are reported, and the load average at the start and the end. The last line is the summary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from rich.progress import Progress

from crossrail.runtime import Checkpointer

Tensors = dict[str, npt.NDArray[Any]]
DD_BLOCK = 16 << 20


def make_state(gb: float, tensors: int) -> Tensors:
    """`gb` of a training state as a resume loads it: a third weights, a third each AdamW moment (neutral names)."""
    weights = max(1, tensors // 3)
    per = max(1, int(gb * 1e9) // (3 * weights) // 4)
    rng = np.random.default_rng(0)
    out: Tensors = {}
    for prefix in ("", "optim.m.", "optim.v."):
        out |= {f"{prefix}layers.{i}.weight": rng.random(per, dtype=np.float32) for i in range(weights)}
    return out


def timed(fn: Callable[[], object]) -> float:
    """Seconds `fn` took; what it returns (restored arrays) is let go after the clock stops, not on it."""
    t0 = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t0
    del result
    return elapsed


def dd(*args: str) -> None:
    subprocess.run(["dd", *args], check=True, capture_output=True)


def drop_caches(root: Path) -> bool:
    """Drop the page cache so the next read comes from the disk; False where this process may not.

    All of it where this process may (root); otherwise each file under `root` is written back and then
    evicted with posix_fadvise(DONTNEED), which any owner of the file may ask for.
    """
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError:
        return evict(root)
    return True


def evict(root: Path) -> bool:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                return False
            finally:
                os.close(fd)
    return True


def torch_save_fsync(state: Tensors, path: Path) -> Callable[[], None] | None:
    """`torch.save` of the same tensors, then fsync; None when torch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    tensors = {name: torch.from_numpy(a) for name, a in state.items()}

    def save() -> None:
        with open(path, "wb") as f:
            torch.save(tensors, f)
            f.flush()
            os.fsync(f.fileno())

    return save


class Run:
    """One temp dir, the state, and the timings of each repetition by measure."""

    def __init__(self, root: Path, state: Tensors, nbytes: int) -> None:
        self.root, self.state, self.nbytes = root, state, nbytes
        self.count = -(-nbytes // DD_BLOCK)
        self.times: dict[str, list[float]] = {}
        self.cold = True
        self.step = 0
        self.torch = torch_save_fsync(state, root / "torch.pt")
        self.async_ckpts: dict[str, Checkpointer] = {}
        # A built model and optimizer: allocated and written before any clock starts.
        self.into = {name: np.ones_like(a) for name, a in state.items()}

    def record(self, name: str, seconds: float) -> None:
        self.times.setdefault(name, []).append(seconds)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    def repetition(self) -> None:
        dd_file = self.root / "dd.bin"
        self.step += 1
        ckpt = Checkpointer(str(self.root / "ckpt"))
        step = self.step
        writes: list[tuple[str, Callable[[], object]]] = [
            (
                "dd_write",
                lambda: dd("if=/dev/zero", f"of={dd_file}", "bs=16M", f"count={self.count}", "conv=fdatasync"),
            ),
            ("save", lambda: ckpt.save(self.state, step)),
        ]
        # Measured on a VM: the second of two back-to-back 1 GB writes ran slower, whichever it was (presumably
        # the first one's data still being flushed below the guest), so they take turns going first.
        for name, write in writes if len(self.times.get("save", [])) % 2 == 0 else writes[::-1]:
            self.record(name, timed(write))
        if self.torch is not None:
            self.record("torch_save", timed(self.torch))
            (self.root / "torch.pt").unlink()
        self.cold = drop_caches(self.root) and self.cold
        self.record("dd_read", timed(lambda: dd(f"if={dd_file}", "of=/dev/null", "bs=16M")))
        self.cold = drop_caches(self.root) and self.cold
        self.record("restore_into", timed(lambda: Checkpointer(str(self.root / "ckpt")).restore(step, into=self.into)))
        if any(not np.array_equal(self.into[name], a) for name, a in self.state.items()):
            raise AssertionError("restore(into=...) did not give back the saved tensors")
        self.cold = drop_caches(self.root) and self.cold
        self.record("restore", timed(lambda: Checkpointer(str(self.root / "ckpt")).restore(step)))
        self.cold = drop_caches(self.root) and self.cold
        self.record("restore_mapped", timed(lambda: Checkpointer(str(self.root / "ckpt")).restore(step, mapped=True)))
        self.cold = drop_caches(self.root) and self.cold
        self.record("verify", timed(lambda: Checkpointer(str(self.root / "ckpt")).verify(step)))
        self.async_block()
        shutil.rmtree(self.root / "ckpt")
        dd_file.unlink()

    def async_block(self) -> None:
        """How long save_async holds the training step, staged either way; the staging buffers live as long as
        the run, as in a loop."""
        self.record("forward", timed(lambda: forward(self.state)))
        for staging in ("caller", "background"):
            ckpt = self.async_ckpts.get(staging)
            if ckpt is None:
                ckpt = self.async_ckpts[staging] = Checkpointer(str(self.root / "async"))
                self.step += 1
                ckpt.save_async(self.state, self.step).wait()  # the first save allocates the buffers
            self.step += 1
            t0 = time.perf_counter()
            handle = ckpt.save_async(self.state, self.step, staging=staging)  # type: ignore[arg-type]
            called = time.perf_counter() - t0
            if staging == "caller":
                self.record("async_block", called)
            else:
                self.record("forward_beside_save", timed(lambda: forward(self.state)))
                self.record("async_block_background", called + timed(ckpt.wait_staged))
            handle.wait()
            for old in (self.root / "async").iterdir():
                shutil.rmtree(old)


def forward(state: Tensors) -> None:
    """A stand-in for a forward pass: reads every tensor once."""
    for a in state.values():
        float(a.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="state size in GB (default 1.0; 0.2 for a quick check)")
    ap.add_argument("--tensors", type=int, default=16, help="float32 tensors the state is split into (default 16)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    ap.add_argument("--dir", default=None, help="where the temp dir goes (default: the system temp dir)")
    args = ap.parse_args()

    start_load = os.getloadavg()
    state = make_state(args.gb, args.tensors)
    nbytes = sum(a.nbytes for a in state.values())
    root = Path(tempfile.mkdtemp(prefix="crossrail-bench-ckpt-", dir=args.dir))
    run = Run(root, state, nbytes)
    load = ", ".join(f"{x:.1f}" for x in start_load)
    print(f"state: {nbytes / 1e9:.2f} GB in {len(state)} float32 tensors; temp dir {root}")
    print(f"{os.cpu_count()} cores, load average {load} at the start (a loaded machine makes every figure noisier)")
    try:
        with Progress() as progress:
            task = progress.add_task("save, restore, async save and their baselines", total=args.reps)
            for _ in range(args.reps):
                run.repetition()
                progress.advance(task)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(run, nbytes, start_load[0])


def report(run: Run, nbytes: int, start_load: float) -> None:
    def rate(name: str) -> float:
        return nbytes / run.median(name) / 1e6

    save_x, restore_x = rate("save") / rate("dd_write"), rate("restore") / rate("dd_read")
    into_x = rate("restore_into") / rate("dd_read")
    mapped_x = rate("restore_mapped") / rate("dd_read")
    block_share = run.median("async_block") / run.median("save")
    background_share = run.median("async_block_background") / run.median("save")
    slower = run.median("forward_beside_save") / run.median("forward") - 1
    cache = "cold (page cache dropped)" if run.cold else "WARM: the page cache could not be dropped (not root?)"
    print(
        f"durable save:  {rate('save'):7.0f} MB/s   dd conv=fdatasync {rate('dd_write'):7.0f} MB/s   "
        f"{save_x:.2f}x (aim >= 0.9x)"
    )
    if run.torch is None:
        torch_note = "torch=skipped"
        print("torch.save + fsync: skipped, torch is not installed here (pip install torch==2.13.0 to compare)")
    else:
        torch_note = f"torch={rate('torch_save'):.0f}MB/s"
        print(
            f"torch.save + fsync: {rate('torch_save'):7.0f} MB/s   ours {rate('save') / rate('torch_save'):.2f}x of it"
        )
    print(
        f"restore(into=arrays allocated before), {cache}: {rate('restore_into'):7.0f} MB/s   dd read "
        f"{rate('dd_read'):7.0f} MB/s   {into_x:.2f}x (aim >= 0.9x: the path a resume into a built model takes)"
    )
    print(
        f"restore() into new arrays, {cache}: {rate('restore'):7.0f} MB/s   {restore_x:.2f}x dd read (the cost of "
        "faulting in fresh memory)"
    )
    print(
        f"restore(mapped=True), {cache}: {rate('restore_mapped'):7.0f} MB/s   {mapped_x:.2f}x dd read (copy-on-write "
        "views of the files: nothing allocated or copied)"
    )
    print(
        f"verify (every checksum, no arrays allocated): {rate('verify'):7.0f} MB/s   "
        f"{rate('verify') / rate('dd_read'):.2f}x dd read"
    )
    print(
        f"training step blocked by save_async, copy on the caller: {run.median('async_block') * 1000:.0f} ms vs save "
        f"{run.median('save') * 1000:.0f} ms: {block_share:.1%} (aim <= 10%)"
    )
    print(
        f"training step blocked by save_async, copy in the background until wait_staged() before the next update: "
        f"{run.median('async_block_background') * 1000:.0f} ms: {background_share:.1%} (aim <= 10%); the forward "
        f"pass beside it took {run.median('forward_beside_save') * 1000:.0f} ms against "
        f"{run.median('forward') * 1000:.0f} ms alone ({slower:+.0%})"
    )
    for name, times in run.times.items():
        print(f"  {name:22s} s per repetition: {' '.join(f'{t:.3f}' for t in times)}")
    end_load = os.getloadavg()[0]
    print(
        f"SUMMARY ckpt {nbytes / 1e9:.2f}GB x{len(run.times['save'])} medians: save {save_x:.2f}x dd (aim >= 0.9), "
        f"{'cold' if run.cold else 'warm'} restore into allocated arrays (the trainers' resume) {into_x:.2f}x dd "
        f"(aim >= 0.9), into new arrays {restore_x:.2f}x, mapped {mapped_x:.2f}x, "
        f"async block {background_share:.1%} of sync save with background staging, {block_share:.1%} copying on the "
        f"caller (aim <= 10%), forward beside the save {slower:+.0%}, {torch_note}, "
        f"load {start_load:.1f} -> {end_load:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
