"""Declared peak dense TFLOP/s per chip type and precision, from the vendors' datasheets: MFU's denominator.

accelerator_utilization (docs/metrics.md) is the model FLOP/s a run achieved over the peak its chips are
declared to reach at its precision, so two frameworks on one chip are judged against one peak, never against
a peak each trainer measured for itself. Dense (no sparsity) figures:

- NVIDIA H100 SXM: 989 TF32-with-sparsity halves to 494.5 (tf32); 989.4 bf16/fp16; 1,978.9 fp8; 67 fp32
  (NVIDIA H100 Tensor Core GPU datasheet, 2023).
- NVIDIA A100 SXM: 156 tf32; 312 bf16/fp16; 19.5 fp32 (NVIDIA A100 Tensor Core GPU datasheet, 2021).
- Google TPU v5p: 459 bf16; 918 int8 (cloud.google.com/tpu/docs/v5p). TPU v5e: 197 bf16; 394 int8
  (cloud.google.com/tpu/docs/v5e). TPU v4: 275 bf16 (cloud.google.com/tpu/docs/v4).
A precision the table lacks for a known chip falls back to its bf16 figure; an unknown chip has no peak. A fleet
pool's `peak_tflops` (docs/formats/fleet.md) declares its chips' peaks instead of this table.
"""

from __future__ import annotations

from collections.abc import Mapping

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""The precisions a peak is declared for (the table's and a fleet pool's `peak_tflops` keys)."""

PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "h100": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
    "a100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "tpu-v5p": {"bf16": 459.0, "int8": 918.0},
    "tpu-v5e": {"bf16": 197.0, "int8": 394.0},
    "tpu-v4": {"bf16": 275.0},
}


def peak_flops(chip_type: str, precision: str, declared: Mapping[str, float] | None = None) -> float | None:
    """FLOP/s one chip of `chip_type` is declared to reach at `precision` (bf16 where the precision is not listed):
    by `declared` (a pool's `peak_tflops`) when it is given and not empty, else by the vendors' table."""
    by_precision = declared or PEAK_TFLOPS.get(chip_type.lower())
    if not by_precision:
        return None
    tflops = by_precision.get(precision.lower(), by_precision.get("bf16"))
    return None if tflops is None else tflops * 1e12
