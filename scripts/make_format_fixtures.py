#!/usr/bin/env python3
"""Writes test/fixtures/formats.bin: GGML blocks and their dequantized F32 values, computed by an
independent implementation (llama.cpp's `gguf` Python package, `gguf.quants.dequantize`).
native/numerics/formats.zig checks its decoders against this file bit for bit.

Regenerating the fixtures is a developer step, NOT part of the test run (the file is committed):

    python3 -m venv /tmp/fmtvenv
    /tmp/fmtvenv/bin/pip install gguf==0.19.0 numpy==2.4.6
    /tmp/fmtvenv/bin/python scripts/make_format_fixtures.py   # from the repository root

Pinned versions: gguf 0.19.0, numpy 2.4.6 (the script refuses to run with others, so that the fixture
always describes the same reference). The output is deterministic (fixed seed).

Content: every type of the head table except F32 (whose "dequantization" is a byte view):
  * quantized types: random bytes with every f16 scale field (`d`, and `dmin`/`m` where the format has
    one) overwritten by a finite f16 drawn over the whole exponent range (subnormals included), with a
    few negative and ±0 scales; plus edge blocks: all-zero bytes, max codes (all code bytes 0xFF) and
    min codes (code bytes 0x00) with sane scales, and alternating code patterns.
  * F16 / BF16: every bit pattern with exponent all-zeros (±0, subnormals) or all-ones (±Inf, every
    NaN payload, quiet and signalling), plus random normal patterns. numpy converts f16→f32 exactly,
    keeping NaN payloads and NOT quieting signalling NaNs (e.g. 0x7C01 -> 0x7F802000); gguf's BF16 is a
    16-bit shift. The Zig test therefore compares NaNs by bit pattern, like every other value.

Layout (all little-endian, no padding):
  header:  magic u32 = 0x464D484C ("LHMF" as bytes 'L','H','M','F'), version u32 = 1, section count u32
  section: type id u32 (ggml id), block count u32 (n),
           raw blocks  n * block_bytes bytes,
           values      n * block_values f32 (gguf's dequantization of those blocks, in element order)
"""

import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from importlib.metadata import version

GGUF_VERSION = "0.19.0"
NUMPY_VERSION = "2.4.6"
MAGIC = 0x464D484C
FORMAT_VERSION = 1

# type: (block_values, block_bytes, f16 scale offsets, code byte ranges, random block count)
# Mirrors the table in native/numerics/formats.zig (checked against gguf's GGML_QUANT_SIZES below).
QUANT = {
    T.Q4_0:   (32, 18, [0], [(2, 18)], 80),
    T.Q5_0:   (32, 22, [0], [(2, 22)], 80),
    T.Q5_1:   (32, 24, [0, 2], [(4, 24)], 80),
    T.Q8_0:   (32, 34, [0], [(2, 34)], 80),
    T.IQ4_NL: (32, 18, [0], [(2, 18)], 80),
    T.Q2_K:   (256, 84, [80, 82], [(16, 80)], 12),
    T.Q3_K:   (256, 110, [108], [(0, 96)], 12),
    T.Q4_K:   (256, 144, [0, 2], [(16, 144)], 12),
    T.Q5_K:   (256, 176, [0, 2], [(16, 176)], 12),
    T.Q6_K:   (256, 210, [208], [(0, 192)], 12),
    T.IQ4_XS: (256, 136, [0], [(8, 136)], 12),
}


def random_f16_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite f16 bit patterns: uniform exponent 0..30 (0 = subnormal), random mantissa, ~30% negative,
    and a few exact ±0."""
    exp = rng.integers(0, 31, size=n, dtype=np.uint16)
    man = rng.integers(0, 1024, size=n, dtype=np.uint16)
    sign = (rng.random(n) < 0.3).astype(np.uint16)
    bits = (sign << 15) | (exp << 10) | man
    zero = rng.random(n) < 0.04
    bits[zero] = (bits[zero] & 0x8000)
    return bits


def sane_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite, normal, moderate f16 scales (as a quantizer would write): |x| in [2^-14, 2^-2)."""
    return np.array(rng.uniform(2.0 ** -14, 0.25, size=n) * np.where(rng.random(n) < 0.2, -1, 1),
                    dtype=np.float16).view(np.uint16)


def quant_blocks(rng: np.random.Generator, t: T) -> np.ndarray:
    bv, bb, scale_offs, code_ranges, n_random = QUANT[t]
    assert gguf.GGML_QUANT_SIZES[t] == (bv, bb), t
    blocks = [rng.integers(0, 256, size=(n_random, bb), dtype=np.uint8)]
    for off in scale_offs:
        blocks[0][:, off:off + 2] = random_f16_scales(rng, n_random).view(np.uint8).reshape(n_random, 2)

    edges = []
    edges.append(np.zeros(bb, dtype=np.uint8))                        # all zero
    for fill in (0xFF, 0x00, 0xAA, 0x55, 0x0F, 0xF0):                 # extreme / alternating codes
        b = np.full(bb, fill, dtype=np.uint8)
        for off in scale_offs:
            b[off:off + 2] = sane_f16(rng, 1).view(np.uint8)
        edges.append(b)
    b = rng.integers(0, 256, size=bb, dtype=np.uint8)                  # max codes, max-magnitude scales
    for lo, hi in code_ranges:
        b[lo:hi] = 0xFF
    for off in scale_offs:
        b[off:off + 2] = np.array([0x7BFF], dtype=np.uint16).view(np.uint8)   # 65504
    edges.append(b)
    b = rng.integers(0, 256, size=bb, dtype=np.uint8)                  # smallest subnormal scales
    for off in scale_offs:
        b[off:off + 2] = np.array([0x8001], dtype=np.uint16).view(np.uint8)   # -2^-24
    edges.append(b)
    return np.concatenate([blocks[0], np.stack(edges)], axis=0)


def dense_patterns(rng: np.random.Generator, t: T) -> np.ndarray:
    if t == T.F16:
        man_bits, exp_all = 10, 0x7C00
    else:
        man_bits, exp_all = 7, 0x7F80
    man = np.arange(1 << man_bits, dtype=np.uint16)
    special = np.concatenate([man, man | exp_all])                      # exp 0 (±0, subnormal), exp max
    special = np.concatenate([special, special | 0x8000])
    normal = rng.integers(0, 1 << 16, size=512, dtype=np.uint16)
    return np.concatenate([special, normal]).view(np.uint8).reshape(-1, 2)


def main() -> None:
    if version("gguf") != GGUF_VERSION or np.__version__ != NUMPY_VERSION:
        sys.exit(f"need gguf=={GGUF_VERSION} numpy=={NUMPY_VERSION}, have gguf {version('gguf')} numpy {np.__version__}")
    rng = np.random.default_rng(20240611)
    sections = []
    for t in (T.F16, T.BF16):
        sections.append((t, dense_patterns(rng, t)))
    for t in QUANT:
        sections.append((t, quant_blocks(rng, t)))

    out = bytearray(struct.pack("<III", MAGIC, FORMAT_VERSION, len(sections)))
    for t, blocks in sections:
        bv, bb = gguf.GGML_QUANT_SIZES[t]
        n = blocks.shape[0]
        assert blocks.shape == (n, bb) and blocks.dtype == np.uint8
        with np.errstate(all="ignore"):
            values = gguf.quants.dequantize(blocks.reshape(-1), t)
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        assert values.shape == (n * bv,), (t, values.shape)
        out += struct.pack("<II", int(t), n)
        out += blocks.tobytes()
        out += values.astype("<f4").tobytes()
        print(f"{t.name:7s} {n:5d} blocks", file=sys.stderr)

    path = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "formats.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    print(f"wrote {path} ({len(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
