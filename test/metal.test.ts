/**
 * The Metal backend on Apple hardware: what only a Mac proves, run by `./lmhead test` there.
 * Where no Metal device opens (Linux, an Intel Mac, a paravirtual CI GPU), every test here
 * is skipped and the reason is printed. On a Mac, every head type at N ∈ {1,2,3,5,8,9,16,33}
 * in random slot order must return the CPU backend's bytes on Gemma-shaped heads (hidden
 * 2560, a 4096-row slice of the vocab), and the run writes metal-results.json for the
 * issue: the device, its measured read bandwidth, each type's result and its timings.
 * (Timings are recorded, never asserted; `./lmhead bench --backend metal` is the benchmark.)
 */
import { afterAll, describe, expect, test } from "bun:test";
import { synthBlocks } from "../src/artifact/synth.ts";
import { Rng } from "../src/random.ts";
import { MlxDevice, formatInfo, knownTypeIds, type BandwidthResult } from "../src/index.ts";
import { bits, buildHead, randomF32, rng, type TestHead } from "./support.ts";

const reason = (() => {
  try {
    MlxDevice.open("metal").close();
    return null;
  } catch (e) {
    return (e as Error).message;
  }
})();
if (reason !== null) console.log(`metal: skipped on this machine: ${reason}`);

const hidden = 2560;
const vocab = 4096;
const batchSizes = [1, 2, 3, 5, 8, 9, 16, 33];
const poolRows = 33;
const resultsFile = "metal-results.json";

interface TypeResult {
  type: string;
  identical: boolean;
  firstDifference?: string;
  /** Median ms of a head call on Metal at N = 1 and N = 8 (this shape, not full size). */
  msN1: number;
  msN8: number;
}

const results: TypeResult[] = [];
let metal: MlxDevice | undefined;
let cpu: MlxDevice | undefined;
let bandwidth: BandwidthResult | undefined;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function timeMs(head: TestHead, batch: Float32Array, n: number): number {
  const out = new Float32Array(n * vocab);
  head.weights.lmHeadBatched(batch.subarray(0, n * hidden), n, out); // warm: pipelines, pages
  const samples: number[] = [];
  for (let i = 0; i < 9; i++) {
    const start = Bun.nanoseconds();
    head.weights.lmHeadBatched(batch.subarray(0, n * hidden), n, out);
    samples.push((Bun.nanoseconds() - start) / 1e6);
  }
  return median(samples);
}

/** The same head on both devices; slot s of each batch holds pool row picks[s]. */
function compareType(typeId: number): TypeResult {
  const name = formatInfo(typeId)!.name;
  const headBytes = synthBlocks(typeId, hidden * vocab, new Rng(7000 + typeId), { rms: 0.05 });
  const norm = randomF32(hidden, rng(typeId), 0.3).map((x) => 1 + x);
  using onCpu = buildHead(cpu!, hidden, vocab, typeId, headBytes, new Float32Array(0), norm, 30, false);
  using onMetal = buildHead(metal!, hidden, vocab, typeId, headBytes, new Float32Array(0), norm, 30, false);
  const pool = randomF32(poolRows * hidden, rng(100 + typeId), 2);
  const random = rng(typeId * 31 + 7);
  let firstDifference: string | undefined;
  for (const n of batchSizes) {
    const picks = Array.from({ length: poolRows }, (_, i) => i)
      .map((i) => [random(), i] as const)
      .sort((a, b) => a[0] - b[0])
      .slice(0, n)
      .map(([, i]) => i);
    const batch = new Float32Array(n * hidden);
    picks.forEach((p, s) => batch.set(pool.subarray(p * hidden, (p + 1) * hidden), s * hidden));
    const want = bits(onCpu.weights.lmHeadBatched(batch, n, new Float32Array(n * vocab)).logits);
    const got = bits(onMetal.weights.lmHeadBatched(batch, n, new Float32Array(n * vocab)).logits);
    const at = got.findIndex((w, i) => w !== want[i]);
    if (at >= 0 && firstDifference === undefined) {
      firstDifference = `N=${n}, slot ${Math.floor(at / vocab)}, logit ${at % vocab}: cpu 0x${want[at]!.toString(16)}, metal 0x${got[at]!.toString(16)}`;
    }
  }
  return { type: name, identical: firstDifference === undefined, firstDifference, msN1: timeMs(onMetal, pool, 1), msN8: timeMs(onMetal, pool, 8) };
}

describe.skipIf(reason !== null)("metal on this machine", () => {
  afterAll(async () => {
    const identical = results.filter((r) => r.identical).length;
    const report = {
      device: metal?.info,
      readBandwidthGBs: bandwidth?.gbs,
      bandwidthMethod: bandwidth?.method,
      shape: { hidden, vocab, batchSizes },
      types: results,
    };
    await Bun.write(resultsFile, JSON.stringify(report, null, 2) + "\n");
    console.log(`metal: ${identical}/${results.length} head types bit-identical to the CPU at N ∈ {${batchSizes.join(",")}} on ${metal?.info}; results in ${resultsFile} (attach it to the issue)`);
    metal?.close();
    cpu?.close();
  });

  test("the device opens and measures its read bandwidth", () => {
    metal = MlxDevice.open("metal");
    cpu = MlxDevice.open("cpu");
    expect(metal.kind).toBe("metal");
    expect(metal.hostVisible).toBe(true);
    bandwidth = metal.readBandwidth({ bytes: 256 * 2 ** 20, passes: 5 });
    expect(bandwidth.gbs).toBeGreaterThan(0);
  });

  for (const typeId of knownTypeIds) {
    test(`${formatInfo(typeId)!.name}: Metal logits equal the CPU's bit for bit at every N, in random slot order`, () => {
      const result = compareType(typeId);
      results.push(result);
      if (!result.identical) throw new Error(`${result.type}: ${result.firstDifference}`);
    });
  }
});
