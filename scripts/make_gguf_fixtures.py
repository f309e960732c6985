#!/usr/bin/env python3
"""Writes the GGUF cross-check fixtures in test/fixtures/gguf/ with gguf-py, llama.cpp's own
Python GGUF writer, so lmhead's reader is checked against an independent implementation.

Regenerating is a developer step (the outputs are committed; tests only read them):

    python3 -m venv /tmp/gguf-venv
    /tmp/gguf-venv/bin/pip install gguf==0.19.0 numpy==2.4.6
    /tmp/gguf-venv/bin/python scripts/make_gguf_fixtures.py

Pinned: gguf 0.19.0 (and numpy 2.4.6, which its quantizers use). The output is deterministic.

For each fixture X.gguf there is X.json describing exactly what was written: metadata (key,
value type id, value; 64-bit integers as decimal strings, f32 values as the f32 actually stored),
tensors (name, ggml type id and name, GGUF dims fastest-first, byte size, offset relative to the
data section, sha256 of the stored bytes, and for types gguf-py can decode, sha256 of its
dequantized little-endian f32 values).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf.quants import dequantize, quantize

GGUF_VERSION = "0.19.0"
OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "gguf"

HIDDEN = 256
VOCAB = 48


def json_value(value, vtype: V, sub_type: V | None = None):
    """A metadata value as the reader will see it, in JSON."""
    if vtype == V.ARRAY:
        items = list(value)
        item_type = sub_type if sub_type is not None else V.get_type(items[0])
        return {"itemType": int(item_type), "items": [json_value(v, item_type) for v in items]}
    if vtype in (V.UINT64, V.INT64):
        return str(int(value))
    if vtype == V.FLOAT32:
        return float(np.float32(value))
    if vtype == V.FLOAT64:
        return float(value)
    if vtype == V.BOOL:
        return bool(value)
    if vtype == V.STRING:
        return value if isinstance(value, str) else value.decode("utf-8")
    return int(value)


def add_many_metadata(w: gguf.GGUFWriter, arch: str) -> None:
    """One key of every value type, and arrays of them (nested arrays too)."""
    w.add_uint8("fixture.u8", 255)
    w.add_int8("fixture.i8", -128)
    w.add_uint16("fixture.u16", 65535)
    w.add_int16("fixture.i16", -32768)
    w.add_uint32("fixture.u32", 4294967295)
    w.add_int32("fixture.i32", -2147483648)
    w.add_float32("fixture.f32", 0.1)
    w.add_float64("fixture.f64", -1.0e-300)
    w.add_uint64("fixture.u64", 18446744073709551615)
    w.add_int64("fixture.i64", -9223372036854775808)
    w.add_bool("fixture.bool_true", True)
    w.add_bool("fixture.bool_false", False)
    w.add_string("fixture.string", "héllo, wörld ✓ 🦙")
    w.add_array("fixture.array_i32", [1, -2, 3, 2147483647])
    w.add_array("fixture.array_f32", [0.5, -1.25, 3.4e38])
    w.add_array("fixture.array_str", ["a", "", "ünïcode", "<0x0A>"])
    w.add_array("fixture.array_bool", [True, False, True])
    w.add_array("fixture.array_nested_str", [["x", "yy"], ["zzz"], ["", "w"]])
    w.add_key_value("fixture.array_u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("fixture.array_i16", [-32768, 0, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("fixture.array_u64", [0, 18446744073709551615], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("fixture.array_i64", [-9223372036854775808, 7], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("fixture.array_f64", [1.5, -2.0e200], V.ARRAY, sub_type=V.FLOAT64)
    w.add_uint32(f"{arch}.embedding_length", HIDDEN)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)


def q6_k_rows(rng: np.random.Generator, rows: int, values: int) -> np.ndarray:
    """Random Q6_K codes and sub-block scales with a sane f16 super-scale per block.

    gguf-py has no Q6_K quantizer. The block is ql[128] qh[64] scales[16] d (f16, the last two
    bytes, per ggml's block_q6_K); the dequantization check in main() confirms the layout with
    gguf-py's own decoder.
    """
    blocks = rng.integers(0, 256, size=(rows, values // 256, 210), dtype=np.uint8)
    d = (rng.uniform(0.5, 1.5, size=(rows, values // 256)) * 3.7e-5).astype("<f2")
    blocks[:, :, 208:210] = d.view(np.uint8).reshape(rows, values // 256, 2)
    return blocks.reshape(rows, -1)


def write_fixture(name: str, arch: str, alignment: int | None, tensors: list[tuple[str, np.ndarray, Q]], softcap: float | None) -> None:
    path = OUT / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    add_many_metadata(w, arch)
    if softcap is not None:
        w.add_float32(f"{arch}.final_logit_softcapping", softcap)

    described = []
    offset = 0
    align = alignment or gguf.GGUF_DEFAULT_ALIGNMENT
    for tname, data, qtype in tensors:
        raw = qtype not in (Q.F32, Q.F16, Q.I32)
        w.add_tensor(tname, data, raw_dtype=qtype if raw else None)
        shape = gguf.quant_shape_from_byte_shape(data.shape, qtype) if raw else data.shape
        entry = {
            "name": tname,
            "type": int(qtype),
            "typeName": qtype.name,
            "dims": [int(d) for d in reversed(shape)],
            "bytes": int(data.nbytes),
            "dataOffset": offset,
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        }
        if qtype != Q.I32:
            deq = dequantize(data.view(np.uint8) if raw else data, qtype).astype("<f4")
            assert np.isfinite(deq).all(), f"{tname}: non-finite dequantized values"
            assert np.abs(deq).max() < 2.0, f"{tname}: implausible magnitudes (layout assumption wrong?)"
            entry["dequantF32Sha256"] = hashlib.sha256(deq.tobytes()).hexdigest()
        described.append(entry)
        offset += -(-data.nbytes // align) * align

    metadata = [
        {"key": k, "type": int(v.type), "value": json_value(v.value, v.type, v.sub_type)}
        for k, v in w.kv_data[0].items()
    ]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    sidecar = {
        "generator": f"gguf-py {GGUF_VERSION} via scripts/make_gguf_fixtures.py",
        "file": path.name,
        "version": 3,
        "alignment": align,
        "fileBytes": path.stat().st_size,
        "metadata": metadata,
        "tensors": described,
    }
    (OUT / f"{name}.json").write_text(json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def main() -> None:
    installed = importlib.metadata.version("gguf")
    if installed != GGUF_VERSION:
        sys.exit(f"expected gguf {GGUF_VERSION}, found {installed} (see the top of this script)")
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    norm = rng.uniform(0.75, 1.25, size=HIDDEN).astype(np.float32)
    floats = lambda rows: (rng.standard_normal((rows, HIDDEN)) * 0.05).astype(np.float32)  # noqa: E731

    # Tied Q8_0 head (no output.weight), plus tensors of types lmhead does not know (Q4_1, I32).
    write_fixture(
        "gguf-py-tied-q8_0",
        "gemma4",
        None,
        [
            ("output_norm.weight", norm, Q.F32),
            ("token_embd.weight", quantize(floats(VOCAB), Q.Q8_0), Q.Q8_0),
            ("extra.q4_1", quantize(floats(4), Q.Q4_1), Q.Q4_1),
            ("extra.i32", np.arange(-3, 4, dtype=np.int32), Q.I32),
        ],
        softcap=30.0,
    )
    # Untied Q6_K head next to a Q4_0 embedding, with a custom alignment.
    write_fixture(
        "gguf-py-untied-q6_k",
        "gemma4",
        64,
        [
            ("token_embd.weight", quantize(floats(VOCAB), Q.Q4_0), Q.Q4_0),
            ("output.weight", q6_k_rows(rng, VOCAB, HIDDEN), Q.Q6_K),
            ("output_norm.weight", norm, Q.F32),
        ],
        softcap=30.0,
    )
    # Untied F16 head, BF16 embedding, a non-gemma4 arch without softcap.
    write_fixture(
        "gguf-py-untied-f16",
        "gemma3",
        None,
        [
            ("output_norm.weight", norm, Q.F32),
            ("output.weight", floats(VOCAB).astype(np.float16), Q.F16),
            ("token_embd.weight", quantize(floats(VOCAB), Q.BF16), Q.BF16),
        ],
        softcap=None,
    )


if __name__ == "__main__":
    main()
