/** Shared test fixtures: seeded data, a head built from host arrays, and f64 references. */
import { MlxDevice, MlxModelWeights, formatInfo } from "../src/index.ts";
import { SplitMix32 } from "../src/random.ts";

/** Uniform draws in [0, 1) from a seeded SplitMix32. */
export function rng(seed: number): () => number {
  const stream = new SplitMix32(seed);
  return () => stream.float();
}

/** Roughly normal values with the given scale. */
export function randomF32(count: number, random: () => number, scale = 1): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = (random() + random() + random() - 1.5) * 2 * scale;
  return out;
}

/** A head over device buffers of its own; `using` (or dispose) frees them and the head's scratch. */
export interface TestHead extends Disposable {
  device: MlxDevice;
  weights: MlxModelWeights;
  norm: Float32Array;
  /** The head as stored. */
  headBytes: Uint8Array;
  /** The head decoded to f32 by the reference decoder, [vocab, hidden]. */
  headValues: Float32Array;
  hidden: number;
  vocab: number;
  cap: number | null;
  eps: number;
}

/** `device` presented as one whose buffers the host cannot address, as a GPU's are: a head on it reads its logits back. */
export function opaqueDevice(device: MlxDevice): MlxDevice {
  return new Proxy(device, { get: (target, prop) => (prop === "hostVisible" ? false : Reflect.get(target, prop, target)) });
}

export function f32Head(device: MlxDevice, hidden: number, vocab: number, seed: number, cap: number | null = 30, weightScale = 0.05): TestHead {
  const random = rng(seed);
  const norm = randomF32(hidden, random, 0.5).map((x) => 1 + x);
  const headValues = randomF32(hidden * vocab, random, weightScale);
  return buildHead(device, hidden, vocab, 0, new Uint8Array(headValues.buffer), headValues, norm, cap, false);
}

export function buildHead(
  device: MlxDevice,
  hidden: number,
  vocab: number,
  typeId: number,
  headBytes: Uint8Array,
  headValues: Float32Array,
  norm: Float32Array,
  cap: number | null,
  tied: boolean,
  eps = 1e-6,
): TestHead {
  if (!formatInfo(typeId)) throw new Error(`unknown type ${typeId}`);
  const normBuffer = device.allocBuffer(hidden * 4);
  normBuffer.write(norm);
  const headBuffer = device.allocBuffer(headBytes.byteLength);
  headBuffer.write(headBytes);
  const weights = new MlxModelWeights(device, {
    hiddenSize: hidden,
    vocabSize: vocab,
    finalNorm: normBuffer,
    head: headBuffer,
    headType: typeId,
    tied,
    finalLogitSoftcapping: cap,
    rmsNormEps: eps,
  });
  return {
    device, weights, norm, headBytes, headValues, hidden, vocab, cap, eps,
    [Symbol.dispose]() {
      weights[Symbol.dispose]();
      normBuffer.free();
      headBuffer.free();
    },
  };
}

/** The head in f64: norm, dot with the decoded weights, softcap. Also returns Σ|y·w| per logit for error bounds. */
export function referenceHead(head: TestHead, hiddenRows: Float32Array, n: number): { logits: Float64Array; magnitude: Float64Array } {
  const { hidden, vocab, norm, headValues, eps, cap } = head;
  const logits = new Float64Array(n * vocab);
  const magnitude = new Float64Array(n * vocab);
  const y = new Float64Array(hidden);
  for (let r = 0; r < n; r++) {
    let ss = 0;
    for (let k = 0; k < hidden; k++) ss += hiddenRows[r * hidden + k]! ** 2;
    const inv = 1 / Math.sqrt(ss / hidden + eps);
    for (let k = 0; k < hidden; k++) y[k] = hiddenRows[r * hidden + k]! * inv * norm[k]!;
    for (let j = 0; j < vocab; j++) {
      let dot = 0;
      let mag = 0;
      const base = j * hidden;
      for (let k = 0; k < hidden; k++) {
        const p = y[k]! * headValues[base + k]!;
        dot += p;
        mag += Math.abs(p);
      }
      logits[r * vocab + j] = cap === null ? dot : Math.tanh(dot / cap) * cap;
      magnitude[r * vocab + j] = mag;
    }
  }
  return { logits, magnitude };
}

/** u32 words of a float array, for bit-for-bit comparisons. */
export function bits(values: Float32Array): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset, values.length);
}
