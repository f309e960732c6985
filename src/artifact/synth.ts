// Deterministic synthetic weights: random but valid blocks of any format lmhead knows.
//
// Quantized blocks are random bytes (random codes and sub-block scales) with their f16 scale
// fields (at the table's dOffset/mOffset) overwritten by finite values chosen so dequantized
// weights have an RMS near `rms`; with RMS-normed inputs, logits then come out O(1–10).
import { formatInfo, rowBytes, type FormatInfo } from "../formats.ts";
import { Rng } from "../random.ts";

export { Rng };

// The synthetic bytes (and so the default artifact's checksum) assume a little-endian host,
// as every platform Bun runs on is.
if (new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) throw new Error("lmhead needs a little-endian host");

/**
 * Calibration, not layout (layout comes from formatInfo): RMS of a dequantized value when the
 * block's f16 scale `d` is 1 and all other bytes are uniformly random (derived from the decode
 * formulas in hf2q-head-spec.md §4, checked against gguf-py's dequantize: every type lands
 * within 15% of the target RMS), and the `m`/`dmin` field as a multiple of `d` that roughly
 * centres the codes (Q5_1 adds m; the K-quants subtract dmin·min).
 */
const CALIBRATION: Record<string, { codeRms: number; mPerD?: number }> = {
  Q4_0: { codeRms: 4.6 },
  Q5_0: { codeRms: 9.2 },
  Q5_1: { codeRms: 10.8, mPerD: -15.5 },
  Q8_0: { codeRms: 73.9 },
  IQ4_NL: { codeRms: 67.4 },
  IQ4_XS: { codeRms: 1247 },
  Q2_K: { codeRms: 16.5, mPerD: 1.5 },
  Q3_K: { codeRms: 43.5 },
  Q4_K: { codeRms: 321, mPerD: 7.5 },
  Q5_K: { codeRms: 658, mPerD: 15.5 },
  Q6_K: { codeRms: 1367 },
};

export interface SynthOptions {
  /** Target RMS of the dequantized weights (default 0.05). */
  rms?: number;
}

function knownFormat(typeId: number): FormatInfo {
  const f = formatInfo(typeId);
  if (f === undefined) throw new Error(`synth: ggml type ${typeId} is not known to lmhead`);
  return f;
}

/** Bytes for `values` weights of `typeId` (values must be whole blocks). Written into `out` if given. */
export function synthBlocks(typeId: number, values: number, rng: Rng, opts: SynthOptions = {}, out?: Uint8Array): Uint8Array {
  const f = knownFormat(typeId);
  const bytes = rowBytes(typeId, values);
  const blocks = values / f.blockValues;
  const dst = out ?? new Uint8Array(bytes);
  if (dst.byteLength !== bytes) throw new Error(`synth: output has ${dst.byteLength} bytes, ${f.name} needs ${bytes}`);
  const rms = opts.rms ?? 0.05;
  const dv = new DataView(dst.buffer, dst.byteOffset, dst.byteLength);

  if (f.blockValues === 1) {
    // Dense: uniform in ±rms·√3 has RMS `rms`.
    const half = rms * Math.sqrt(3);
    for (let i = 0; i < values; i++) {
      const v = half * (2 * rng.float() - 1);
      if (f.blockBytes === 4) dv.setFloat32(i * 4, v, true);
      else if (f.name === "BF16") dv.setUint16(i * 2, bf16Bits(v), true);
      else dv.setFloat16(i * 2, v, true);
    }
    return dst;
  }

  const cal = CALIBRATION[f.name];
  if (cal === undefined) throw new Error(`synth: no scale calibration for ${f.name}`);
  rng.fill(dst);
  const dBase = rms / cal.codeRms;
  for (let blk = 0; blk < blocks; blk++) {
    const at = blk * f.blockBytes;
    const d = dBase * (0.5 + rng.float());
    dv.setFloat16(at + f.dOffset, d, true);
    if (f.mOffset !== null) {
      const m = d * (cal.mPerD ?? 0) * (0.5 + rng.float());
      dv.setFloat16(at + f.mOffset, m, true);
    }
  }
  return dst;
}

/** `values` F32 numbers uniform in center ± spread (norm weights: center 1). */
export function synthF32(values: number, rng: Rng, center = 0, spread = 1): Float32Array {
  const out = new Float32Array(values);
  for (let i = 0; i < values; i++) out[i] = center + spread * (2 * rng.float() - 1);
  return out;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** bfloat16 bits of a finite number: its f32 bits rounded to the upper half, to nearest even. */
export function bf16Bits(v: number): number {
  f32Scratch[0] = v;
  const bits = u32Scratch[0];
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}
