/**
 * Every head type hf2q admits: bit-identical rows at any N (in any slot order),
 * accuracy against an f64 reference over the fixture-proven decoder, and admission.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { synthBlocks } from "../src/artifact/synth.ts";
import { Rng } from "../src/random.ts";
import { LmheadError, MlxDevice, MlxModelWeights, dequantize, formatInfo, knownTypeIds, rowBytes } from "../src/index.ts";
import { bits, buildHead, randomF32, referenceHead, rng } from "./support.ts";

const device = MlxDevice.open("cpu");
afterAll(() => device.close());

const batchSizes = [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 31, 32, 33, 64, 100];
const vocab = 67;

/** Block-32 and dense types also get a partial last chunk (k % 256 != 0). */
function hiddenFor(typeId: number): number {
  return formatInfo(typeId)!.blockValues === 256 ? 512 : 576;
}

function typeHead(typeId: number, seed: number) {
  const hidden = hiddenFor(typeId);
  const random = new Rng(seed);
  const headBytes = synthBlocks(typeId, hidden * vocab, random, { rms: 0.3 });
  const norm = randomF32(hidden, rng(seed), 0.3).map((x) => 1 + x);
  return buildHead(device, hidden, vocab, typeId, headBytes, dequantize(typeId, headBytes), norm, 30, false);
}

for (const typeId of knownTypeIds) {
  const name = formatInfo(typeId)!.name;
  describe(name, () => {
    const head = typeHead(typeId, 1000 + typeId);
    afterAll(() => head[Symbol.dispose]());
    const hidden = head.hidden;
    const pool = randomF32(100 * hidden, rng(typeId), 2);
    const row = (i: number) => pool.subarray(i * hidden, (i + 1) * hidden);

    test(`row identity at N ∈ {${batchSizes.join(",")}} in random slot order`, () => {
      const single = Array.from({ length: 100 }, (_, i) => bits(head.weights.lmHeadBatched(row(i), 1).logits).slice());
      const random = rng(typeId * 31 + 7);
      for (const n of batchSizes) {
        // n distinct rows of the pool in a random order: slot s holds row picks[s].
        const picks = Array.from({ length: 100 }, (_, i) => i)
          .map((i) => [random(), i] as const)
          .sort((a, b) => a[0] - b[0])
          .slice(0, n)
          .map(([, i]) => i);
        const batch = new Float32Array(n * hidden);
        picks.forEach((p, s) => batch.set(row(p), s * hidden));
        const out = head.weights.lmHeadBatched(batch, n);
        for (let s = 0; s < n; s++) {
          const got = bits(out.row(s));
          const want = single[picks[s]!]!;
          if (!got.every((w, j) => w === want[j])) throw new Error(`${name} N=${n}: slot ${s} (row ${picks[s]}) differs from its 1-row call`);
        }
      }
    });

    test("logits within the stated tolerance of an f64 reference", () => {
      const n = 3;
      const rows = pool.subarray(0, n * hidden);
      const out = head.weights.lmHeadBatched(rows, n);
      const ref = referenceHead(head, rows, n);
      // Decoded weights are exact (fixture-proven); what remains is the f32 accumulation
      // (≤ 2·hidden·2^-24·Σ|y·w|), the norm's few roundings and tanh's 1 ulp.
      let nonzero = 0;
      for (let i = 0; i < n * vocab; i++) {
        const bound = 2 * hidden * 2 ** -24 * ref.magnitude[i]! + 8 * 2 ** -24 * Math.abs(ref.logits[i]!) + 1e-6;
        expect(Math.abs(out.logits[i]! - ref.logits[i]!)).toBeLessThanOrEqual(bound);
        if (Math.abs(ref.logits[i]!) > 0.5) nonzero++;
      }
      expect(nonzero).toBeGreaterThan(n * vocab / 4); // the data is not degenerate
    });
  });
}

describe("rowBytes: the native table's block sizes", () => {
  test("whole blocks of each type, from the table; anything else is a typed error", () => {
    expect(rowBytes(0, 2816)).toBe(2816 * 4); // F32
    expect(rowBytes(8, 64)).toBe(2 * 34); // Q8_0: 32 values in 34 bytes
    expect(rowBytes(14, 2816)).toBe(11 * 210); // Q6_K: 256 values in 210 bytes
    expect(rowBytes(14, 0)).toBe(0);
    expect(() => rowBytes(14, 2800)).toThrow(/2800 values is not a whole number of Q6_K blocks \(256 values each\)/);
    expect(rowBytes(3, 64)).toBe(2 * 20); // Q4_1: lmhead only skips it in files, the table still sizes it
    expect(() => rowBytes(0xffffffff, 32)).toThrow(/unknown ggml type id 4294967295/);
    expect(() => rowBytes(31, 32)).toThrow(/ggml type 31 \(Q4_0_4_4\) was removed from ggml/);
    expect(() => rowBytes(0, -4)).toThrow(LmheadError);
    expect(() => rowBytes(0, 2.5)).toThrow(LmheadError);
    expect(() => rowBytes(0, 2 ** 52)).toThrow(/overflow/);
  });
});

describe("admission: one predicate for every path, checked before any dispatch", () => {
  const norm = () => {
    const b = device.allocBuffer(256 * 4);
    b.write(new Float32Array(256).fill(1));
    return b;
  };
  const admit = (typeId: number, hidden: number, headBytes: number, tied: boolean) => () => {
    using head = device.allocBuffer(headBytes);
    using n = norm();
    using other = hidden === 256 ? null : device.allocBuffer(hidden * 4);
    const finalNorm = other ?? n;
    new MlxModelWeights(device, { hiddenSize: hidden, vocabSize: 4, finalNorm, head, headType: typeId, tied, finalLogitSoftcapping: 30, rmsNormEps: 1e-6 });
  };
  const fails = (fn: () => void, message: RegExp) => {
    expect(fn).toThrow(LmheadError);
    expect(fn).toThrow(message);
  };

  test("hidden not a multiple of the block size", () => {
    fails(admit(14, 288, (288 / 256) * 210 * 4, false), /hidden 288 is not a multiple of the Q6_K block of 256 values/);
    fails(admit(8, 40, 34 * 4, false), /hidden 40 is not a multiple of the Q8_0 block of 32 values/);
  });
  test("unknown type", () => fails(admit(3, 256, 1024, false), /unknown or unsupported ggml type id 3/));
  test("weight buffer of the wrong byte size", () => {
    fails(admit(14, 256, 210 * 4 - 1, false), /Q6_K head weight is 839 bytes, expected 840 for vocab 4 x hidden 256/);
    fails(admit(0, 256, 256 * 4 * 4 + 4, false), /F32 head weight is 4100 bytes, expected 4096/);
  });
  for (const typeId of knownTypeIds.filter((t) => !formatInfo(t)!.tiedHead)) {
    const f = formatInfo(typeId)!;
    test(`tied ${f.name} is rejected, untied ${f.name} is admitted`, () => {
      const bytes = rowBytes(typeId, 256) * 4;
      fails(admit(typeId, 256, bytes, true), new RegExp(`tied head of stored type ${f.name}`));
      expect(admit(typeId, 256, bytes, false)).not.toThrow();
    });
  }
  test("the tied-admitted set is hf2q's", () => {
    const tied = knownTypeIds.filter((t) => formatInfo(t)!.tiedHead).map((t) => formatInfo(t)!.name).sort();
    expect(tied).toEqual(["BF16", "F16", "F32", "Q2_K", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0"]);
  });
});
