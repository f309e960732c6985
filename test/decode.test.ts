// The decode loop over the batched head: continuous batching with staggered admission and
// eviction, slot-aware byte equivalence (hf2q's slot_aware_* suite) for every known head type,
// token selection (greedy ties, seeded sampling) and the default hidden source.
import { afterAll, describe, expect, test } from "bun:test";
import { synthBlocks } from "../src/artifact/synth.ts";
import { hash32, Rng, SplitMix32 } from "../src/random.ts";
import {
  DecodeLoop,
  EmbeddingHiddenSource,
  Sampler,
  argmax,
  argmaxRows,
  denseEmbedding,
  describeEquivalence,
  parseSampling,
  serialReference,
  slotAwareEquivalence,
  staggeredRequests,
  topKRows,
  type DecodeRequest,
  type HiddenSource,
  type RequestResult,
  type Sampling,
} from "../src/decode/index.ts";
import { LmheadError, MlxDevice, counters, dequantize, formatInfo, knownTypeIds, type MlxModelWeights } from "../src/index.ts";
import { buildHead, f32Head, opaqueDevice, rng, type TestHead } from "./support.ts";

const device = MlxDevice.open("cpu");
afterAll(() => device.close());

const hidden = 512;
const vocab = 500;

/** A head of typeId with random-but-valid blocks (random codes, finite f16 scales at dOffset/mOffset). */
function typedHead(typeId: number, seed: number, on: MlxDevice = device): TestHead {
  const f = formatInfo(typeId)!;
  const random = new Rng(seed);
  const bytes = synthBlocks(typeId, hidden * vocab, random, { rms: 0.05 });
  const values = dequantize(typeId, bytes);
  const norm = new Float32Array(hidden).map(() => 0.75 + 0.5 * random.float());
  return buildHead(on, hidden, vocab, typeId, bytes, values, norm, 30, f.tiedHead);
}

function sourceFor(head: TestHead): HiddenSource {
  return new EmbeddingHiddenSource(denseEmbedding(head.headValues, head.vocab, head.hidden));
}

const sample = (temperature: number, topK: number, seed: number): Sampling => ({ kind: "sample", temperature, topK, seed });

/**
 * Staggered arrivals, varied lengths, greedy and sampled requests side by side. With 2 slots,
 * "b" runs alone at step 2 (its row moves from 1 to 0 and back); with more, requests join and
 * leave mid-generation of others.
 */
const schedule: DecodeRequest[] = [
  { id: "a", firstToken: 17, maxNewTokens: 2, arrivalStep: 0 },
  { id: "b", firstToken: 401, maxNewTokens: 6, arrivalStep: 0, sampling: sample(1, 40, 11) },
  { id: "c", firstToken: 17, maxNewTokens: 2, arrivalStep: 3 }, // same first token as "a": rows still differ
  { id: "d", firstToken: 250, maxNewTokens: 5, arrivalStep: 5, sampling: sample(0.7, 0, 3) },
  { id: "e", firstToken: 3, maxNewTokens: 1, arrivalStep: 4 },
  { id: "f", firstToken: 499, maxNewTokens: 4, arrivalStep: 4, sampling: sample(1.3, 5, 11) },
  { id: "g", firstToken: 0, maxNewTokens: 3, arrivalStep: 7 },
];

describe("slot-aware byte equivalence: batched decode == each request alone, every token and logit bit", () => {
  for (const typeId of knownTypeIds) {
    const name = formatInfo(typeId)!.name;
    test(`${name}: slots 2, 3, 5 with staggered admission and eviction`, () => {
      using head = typedHead(typeId, 1000 + typeId);
      const reports = slotAwareEquivalence(head.weights, schedule, { slots: [2, 3, 5], hiddenSource: sourceFor(head) });
      for (const r of reports) {
        if (!r.ok) throw new Error(`${name}: ${describeEquivalence(r)}`);
        expect(r.mismatchCount).toBe(0);
        expect(r.tokensCompared).toBe(23); // 2+6+2+5+1+4+3
        expect(r.logitWordsCompared).toBe(23 * vocab);
        expect(r.calls.serial).toBe(23);
        // Not vacuous: calls were batched, requests joined and left while others ran, rows moved.
        expect(r.maxRows).toBeGreaterThan(1);
        expect(r.staggeredAdmissions).toBeGreaterThan(0);
        expect(r.evictionsWithPeers).toBeGreaterThan(0);
        expect(r.rowMoves).toBeGreaterThan(0);
      }
      expect(reports.map((r) => r.maxRows)).toEqual([2, 3, 4]);
    });
  }

  test("a generated staggered workload over 4 slots, Q6_K and Q8_0", () => {
    for (const typeId of [14, 8]) {
      using head = typedHead(typeId, 77);
      const requests = staggeredRequests({ count: 10, vocab, slots: 4, minNew: 1, maxNew: 6, seed: 5, sampling: sample(0.9, 20, 42), upfront: 2, meanGap: 1.5 });
      const [r] = slotAwareEquivalence(head.weights, requests, { slots: 4, hiddenSource: sourceFor(head) });
      expect(r!.ok).toBe(true);
      expect(r!.maxRows).toBe(4);
    }
  });

  test("each request alone on a reference device: the same head there passes, another head fails", () => {
    using second = MlxDevice.open("cpu");
    using head = typedHead(14, 31);
    using same = typedHead(14, 31, second);
    using other = typedHead(14, 32, second);
    const options = (reference: TestHead) => ({ slots: 3, hiddenSource: sourceFor(head), reference: { weights: reference.weights, hiddenSource: sourceFor(reference) } });
    const [pass] = slotAwareEquivalence(head.weights, schedule, options(same));
    expect(pass!.ok).toBe(true);
    expect(pass!.tokensCompared).toBe(23);
    const [fail] = slotAwareEquivalence(head.weights, schedule, options(other));
    expect(fail!.ok).toBe(false);
    using narrow = f32Head(second, hidden, vocab - 1, 5);
    expect(() => slotAwareEquivalence(head.weights, schedule, options(narrow))).toThrow("the reference head is 512 x 499, the batched one 512 x 500");
  });

  test("the check is not vacuous: a row that depends on its peers is caught", () => {
    using head = f32Head(device, hidden, vocab, 9);
    const honest = sourceFor(head);
    let fillsThisStep = 0;
    // Leaks the number of rows gathered before it into the row: alone it is always 0.
    const leaky: HiddenSource = {
      hidden,
      fill(out, offset, request, token, position) {
        honest.fill(out, offset, request, token, position);
        if (offset === 0) fillsThisStep = 0;
        out[offset] = out[offset]! + fillsThisStep++ * 1e-3;
      },
    };
    const [r] = slotAwareEquivalence(head.weights, schedule, { slots: 3, hiddenSource: leaky });
    expect(r!.ok).toBe(false);
    expect(r!.mismatches[0]!.kind).toBe("logits");
    expect(r!.mismatches[0]!.row).toBeGreaterThan(0);
    expect(describeEquivalence(r!)).toStartWith("FAIL slots=3");
  });
});

describe("the loop", () => {
  const head = f32Head(device, hidden, vocab, 21);
  afterAll(() => head[Symbol.dispose]());
  const source = sourceFor(head);

  test("admits at arrival into the lowest free slot, queues when full, evicts when done", () => {
    const steps: { rows: number; admitted: readonly string[]; finished: string[] }[] = [];
    const loop = new DecodeLoop(head.weights, { slots: 2, hiddenSource: source, onStep: (s) => steps.push({ ...s, finished: s.finished.map((r) => r.id) }) });
    loop.submit({ id: "x", firstToken: 1, maxNewTokens: 2, arrivalStep: 0 });
    loop.submit({ id: "y", firstToken: 2, maxNewTokens: 4, arrivalStep: 1 });
    loop.submit({ id: "z", firstToken: 3, maxNewTokens: 1, arrivalStep: 1 }); // waits for a slot
    loop.submit({ id: "w", firstToken: 4, maxNewTokens: 1, arrivalStep: 9 }); // after idle time
    const { results, stats } = loop.run();
    const byId = Object.fromEntries(results.map((r) => [r.id, r]));
    expect(byId.x).toMatchObject({ slot: 0, admittedStep: 0, finishedStep: 1, reason: "length" });
    expect(byId.y).toMatchObject({ slot: 1, admittedStep: 1, finishedStep: 4, reason: "length" });
    expect(byId.z).toMatchObject({ slot: 0, admittedStep: 2, finishedStep: 2, reason: "length" });
    expect(byId.w).toMatchObject({ slot: 0, admittedStep: 9, finishedStep: 9 });
    expect(results.map((r) => [r.id, r.tokens.length])).toEqual([["x", 2], ["z", 1], ["y", 4], ["w", 1]]); // in the order they ended
    expect(steps.map((s) => s.rows)).toEqual([1, 2, 2, 1, 1, 1]);
    expect(steps.map((s) => s.admitted)).toEqual([["x"], ["y"], ["z"], [], [], ["w"]]);
    expect(steps.map((s) => s.finished)).toEqual([[], ["x"], ["z"], [], ["y"], ["w"]]);
    expect(stats).toMatchObject({ calls: 6, slotTokens: 8, admissions: 4, finished: 4, failed: 0, retries: 0, maxRows: 2, callsByRows: [0, 4, 2] });
    expect(loop.done).toBe(true);
    expect(loop.step()).toBeNull();
  });

  test("one head call per step, on views of one gather buffer", () => {
    const seen: { buffer: ArrayBufferLike; n: number }[] = [];
    const spy = new Proxy(head.weights, {
      get(target, prop) {
        if (prop === "lmHeadBatched") {
          return (rows: Float32Array, n: number) => {
            seen.push({ buffer: rows.buffer, n });
            return target.lmHeadBatched(rows, n);
          };
        }
        return Reflect.get(target, prop, target);
      },
    }) as MlxModelWeights;
    const loop = new DecodeLoop(spy, { slots: 3, hiddenSource: source });
    for (const r of schedule) loop.submit(r);
    const before = counters();
    const { stats } = loop.run();
    const after = counters();
    expect(seen.length).toBe(stats.calls);
    expect(new Set(seen.map((s) => s.buffer)).size).toBe(1);
    const byRows = [0, 0, 0, 0];
    for (const s of seen) byRows[s.n]!++;
    expect(byRows).toEqual(stats.callsByRows);
    expect(after.dispatches - before.dispatches).toBe(4 * stats.calls); // norm, matmul, softcap, non-finite count per call
  });

  test("a device the host cannot see: every step's logits come back into one array the head keeps", () => {
    using opaque = f32Head(opaqueDevice(device), hidden, vocab, 21); // the same head as `head`
    const memories: ArrayBufferLike[] = [];
    const spied = new Proxy(opaque.weights, {
      get(target, prop) {
        if (prop === "lmHeadBatched") {
          return (rows: Float32Array, n: number, out?: Float32Array) => {
            const result = target.lmHeadBatched(rows, n, out);
            memories.push(result.logits.buffer);
            return result;
          };
        }
        return Reflect.get(target, prop, target);
      },
    }) as MlxModelWeights;
    const loop = new DecodeLoop(spied, { slots: 3, hiddenSource: sourceFor(opaque) });
    for (const r of schedule) loop.submit(r);
    const { results } = loop.run();
    expect(memories.length).toBeGreaterThan(5);
    // The head's scratch doubles its rows as the batch grows (1, 2, then 4 for 3 slots): at most 3 arrays for every call.
    expect(new Set(memories).size).toBeLessThanOrEqual(3);
    // The same tokens as the head whose device lends its own memory.
    const lending = new DecodeLoop(head.weights, { slots: 3, hiddenSource: source });
    for (const r of schedule) lending.submit(r);
    expect(results.map((r) => [r.id, r.tokens])).toEqual(lending.run().results.map((r) => [r.id, r.tokens]));
  });

  test("stop tokens end a request early, keeping the token", () => {
    const probe = new DecodeLoop(head.weights, { slots: 1, hiddenSource: source });
    probe.submit({ id: "p", firstToken: 5, maxNewTokens: 4 });
    const tokens = probe.run().results[0]!.tokens;
    const loop = new DecodeLoop(head.weights, { slots: 1, hiddenSource: source });
    loop.submit({ id: "p", firstToken: 5, maxNewTokens: 4, stopTokens: [tokens[1]!] });
    const r = loop.run().results[0]!;
    expect(r.tokens).toEqual(tokens.slice(0, tokens.indexOf(tokens[1]!) + 1));
    expect(r.reason).toBe("stop");
  });

  test("maxCalls stops a run with requests unfinished", () => {
    const loop = new DecodeLoop(head.weights, { slots: 2, hiddenSource: source });
    for (const r of schedule) loop.submit(r);
    const { results, stats } = loop.run({ maxCalls: 3 });
    expect(stats.calls).toBe(3);
    expect(results.length).toBeLessThan(schedule.length);
    expect(loop.active + loop.pending).toBe(schedule.length - results.length);
    expect(loop.run().results.length).toBe(schedule.length - results.length); // and a later run ends them
  });

  test("bad requests are typed errors", () => {
    const loop = new DecodeLoop(head.weights, { slots: 1, hiddenSource: source });
    expect(() => loop.submit({ id: "a", firstToken: vocab, maxNewTokens: 1 })).toThrow("outside the vocabulary");
    expect(() => loop.submit({ id: "a", firstToken: 0, maxNewTokens: 0 })).toThrow("maxNewTokens 0");
    loop.submit({ id: "a", firstToken: 0, maxNewTokens: 1 });
    expect(() => loop.submit({ id: "a", firstToken: 0, maxNewTokens: 1 })).toThrow("submitted twice");
    expect(() => new DecodeLoop(head.weights, { slots: 0, hiddenSource: source })).toThrow("slots 0");
    const wrong = new EmbeddingHiddenSource(denseEmbedding(new Float32Array(4 * 8), 4, 8));
    expect(() => new DecodeLoop(head.weights, { slots: 1, hiddenSource: wrong })).toThrow("the head needs 512");
  });
});

describe("token selection", () => {
  test("argmax: ties go to the lowest index", () => {
    expect(argmax(new Float32Array([1, 3, 3, 2, 3]))).toBe(1);
    expect(argmax(new Float32Array(100).fill(-7))).toBe(0);
    expect(argmax(new Float32Array([-0, 0, 0]))).toBe(0);
    const big = new Float32Array(262144).map((_, i) => (i % 1000) / 1000);
    expect(argmax(big)).toBe(999);
  });

  test("argmax: the plain loop's answer on rows of special values, through views at any offset", () => {
    const plain = (v: Float32Array) => {
      let best = 0;
      for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
      return best;
    };
    const specials = [0, -0, 1, -1, Infinity, -Infinity, NaN, 2.5, 2.5];
    const rng = new SplitMix32(7);
    const buffer = new Float32Array(400);
    let rows = 0;
    for (let n = 1; n <= 130; n++) {
      for (const offset of [0, 1, 3]) {
        for (let kind = 0; kind < 3; kind++) {
          const row = buffer.subarray(offset, offset + n);
          for (let i = 0; i < n; i++) {
            const u = rng.float();
            row[i] = kind === 0 ? u * 60 - 30 : kind === 1 ? Math.floor(u * 3) : specials[Math.floor(u * specials.length)]!;
          }
          expect(argmax(row)).toBe(plain(row));
          rows++;
        }
      }
    }
    expect(rows).toBe(130 * 9);
    expect(argmax(new Float32Array([NaN, 1, 2]))).toBe(0); // a NaN first is never beaten
    expect(argmax(new Float32Array([-Infinity, NaN, -Infinity]))).toBe(0);
    expect(() => argmax(new Float32Array(0))).toThrow("argmax: values is empty");
  });

  test("argmaxRows: each row's argmax, rows long enough for the thread pool and short ones", () => {
    const rng = new SplitMix32(11);
    for (const [rows, rowValues] of [[1, 7], [5, 3], [9, 20000]] as const) {
      const values = new Float32Array(rows * rowValues).map(() => Math.floor(rng.float() * 500));
      const got = argmaxRows(values, rows, new Uint32Array(rows + 2).fill(77));
      for (let r = 0; r < rows; r++) expect(got[r]).toBe(argmax(values.subarray(r * rowValues, (r + 1) * rowValues)));
      expect(Array.from(got.subarray(rows))).toEqual([77, 77]); // past the rows: untouched
    }
    expect(() => argmaxRows(new Float32Array(10), 3, new Uint32Array(3))).toThrow("argmaxRows: 10 values, 3 rows and 3 indices");
    expect(() => argmaxRows(new Float32Array(10), 2, new Uint32Array(1))).toThrow("an index per row");
    expect(() => argmaxRows(new Float32Array(10), 2, new Int32Array(2) as unknown as Uint32Array)).toThrow("argmaxRows: into must be a Uint32Array, got Int32Array(2)");
  });

  test("greedy decode through the head picks the lowest of tied tokens (bit-identical logits)", () => {
    // Rows 3, 10 and 400 of the head are equal and aligned with the (constant) hidden row:
    // their logits are the same bits and the largest.
    const random = rng(4);
    const values = new Float32Array(vocab * hidden).map(() => (random() - 0.5) * 0.02);
    for (const t of [400, 10, 3]) values.fill(0.1, t * hidden, (t + 1) * hidden);
    using head = buildHead(device, hidden, vocab, 0, new Uint8Array(values.buffer), values, new Float32Array(hidden).fill(1), 30, false);
    const constant: HiddenSource = { hidden, fill: (out, offset) => void out.fill(1, offset, offset + hidden) };
    const logits: Float32Array[] = [];
    const loop = new DecodeLoop(head.weights, { slots: 2, hiddenSource: constant, onToken: (e) => void logits.push(e.logits.slice()) });
    loop.submit({ id: "g", firstToken: 0, maxNewTokens: 2 });
    loop.submit({ id: "k1", firstToken: 0, maxNewTokens: 2, sampling: sample(1, 1, 9) }); // top-1 sampling is greedy too
    const { results } = loop.run();
    expect(results.map((r) => r.tokens)).toEqual([[3, 3], [3, 3]]);
    const l = new Uint32Array(logits[0]!.buffer);
    expect(l[3]).toBe(l[10]!);
    expect(l[3]).toBe(l[400]!);
  });

  test("top-k keeps ties in index order", () => {
    const logits = new Float32Array([0, 5, 1, 5, 5, 2]);
    const s = new Sampler();
    // top-2 of {1, 3, 4} tied at 5 is {1, 3}; a cold temperature never leaves them.
    const picks = new Set<number>();
    const r = new SplitMix32(1);
    for (let i = 0; i < 200; i++) picks.add(s.pick(logits, sample(0.01, 2, 0), r));
    expect([...picks].sort()).toEqual([1, 3]);
  });

  test("top-k picks what the insertion loop over the row picks, for every k, seed and kind of row", () => {
    // The loop the sampler ran in JavaScript before its top-k went native: the oracle.
    const oracle = (logits: Float32Array, k: number, t: number, r: SplitMix32): number => {
      const idx: number[] = [];
      const val: number[] = [];
      for (let i = 0; i < logits.length; i++) {
        const v = logits[i]!;
        if (idx.length === k && !(v > val[k - 1]!)) continue;
        let at = idx.length < k ? idx.push(0) - 1 : k - 1;
        if (val.length < idx.length) val.push(0);
        while (at > 0 && v > val[at - 1]!) {
          val[at] = val[at - 1]!;
          idx[at] = idx[at - 1]!;
          at--;
        }
        val[at] = v;
        idx[at] = i;
      }
      let sum = 0;
      for (const v of val) sum += Math.exp((v - val[0]!) / t);
      const target = r.float() * sum;
      let acc = 0;
      for (let j = 0; j < k; j++) {
        acc += Math.exp((val[j]! - val[0]!) / t);
        if (acc > target) return idx[j]!;
      }
      return idx[0]!;
    };
    const random = rng(5);
    const s = new Sampler();
    for (let round = 0; round < 300; round++) {
      const n = 2 + Math.floor(random() * 3000);
      // Coarse values (many ties), a run of equal maxima now and then, signed zeros and -Inf.
      const logits = new Float32Array(n).map(() => Math.round((random() - 0.5) * (round % 2 ? 8 : 4000)) / 4);
      if (round % 5 === 0) logits.fill(3, Math.floor(n / 3), Math.floor(n / 3) + 20);
      if (round % 7 === 0) for (let i = 0; i < n; i += 11) logits[i] = round % 14 ? -0 : -Infinity;
      const k = 1 + Math.floor(random() * Math.min(n - 1, round % 3 ? 64 : n - 1));
      const t = [0.05, 0.7, 2][round % 3]!;
      const seed = Math.floor(random() * 2 ** 32);
      const a = new SplitMix32(seed);
      const b = new SplitMix32(seed);
      for (let draw = 0; draw < 3; draw++) expect(s.pick(logits, sample(t, k, 0), a)).toBe(oracle(logits, k, t, b));
    }
  });

  test("top-k of many rows at once: each row's own k, rows of k = 0 untouched, bad shapes refused by name", () => {
    const random = rng(9);
    const rows = 5;
    const vocab = 300;
    const logits = new Float32Array(rows * vocab).map(() => Math.round(random() * 50));
    const ks = new Uint32Array([3, 0, 1, 7, 7]);
    const indices = new Uint32Array(rows * 7).fill(99);
    const kept = new Float32Array(rows * 7);
    topKRows(logits, rows, ks, 7, indices, kept);
    const one = new Uint32Array(1);
    for (let r = 0; r < rows; r++) {
      const k = ks[r]!;
      const row = logits.subarray(r * vocab, (r + 1) * vocab);
      const alone = new Uint32Array(Math.max(k, 1));
      one[0] = k;
      if (k > 0) topKRows(row, 1, one, k, alone, new Float32Array(k));
      expect(Array.from(indices.subarray(r * 7, r * 7 + k))).toEqual(Array.from(alone.subarray(0, k)));
      expect(Array.from(indices.subarray(r * 7 + k, r * 7 + 7))).toEqual(new Array(7 - k).fill(99));
      for (let j = 0; j < k; j++) expect(kept[r * 7 + j]).toBe(row[indices[r * 7 + j]!]!);
    }
    expect(() => topKRows(logits, rows, ks, 7, new Uint32Array(7), kept)).toThrow("topKRows: 1500 values, 5 rows, 5 ks, k up to 7, 7 indices");
    expect(() => topKRows(logits, rows, new Uint32Array([8, 0, 0, 0, 0]), 7, indices, kept)).toThrow("row 0: k 8 past k_max 7");
    expect(() => topKRows(logits, 7, ks, 7, indices, kept)).toThrow(LmheadError);
  });

  test("sampling follows the softmax", () => {
    const s = new Sampler();
    const r = new SplitMix32(123);
    const logits = new Float32Array([0, Math.log(3)]);
    for (const topK of [0, 2]) {
      let ones = 0;
      for (let i = 0; i < 4000; i++) ones += s.pick(logits, sample(1, topK, 0), r);
      expect(ones / 4000).toBeGreaterThan(0.72);
      expect(ones / 4000).toBeLessThan(0.78);
    }
  });

  test("sampling is deterministic for a seed, differs across seeds, and ignores the other slots", () => {
    using head = typedHead(14, 5);
    const source = sourceFor(head);
    const run = (seed: number, slots: number, peers: boolean): string => {
      const loop = new DecodeLoop(head.weights, { slots, hiddenSource: source });
      for (let i = 0; i < 3; i++) loop.submit({ id: `s${i}`, firstToken: 100 + i, maxNewTokens: 12, sampling: sample(1.5, 50, seed) });
      if (peers) for (let i = 0; i < 3; i++) loop.submit({ id: `peer${i}`, firstToken: 7 * i, maxNewTokens: 5 + i, arrivalStep: i, sampling: sample(1, 0, 99) });
      return JSON.stringify(loop.run().results.filter((r) => r.id.startsWith("s")).map((r) => r.tokens));
    };
    const a = run(1, 3, false);
    expect(run(1, 3, false)).toBe(a);
    expect(run(1, 6, true)).toBe(a); // same tokens next to other requests, in other slots
    expect(run(1, 1, false)).toBe(a); // and one at a time
    expect(run(2, 3, false)).not.toBe(a);
    expect(run(3, 3, false)).not.toBe(run(2, 3, false));
  });

  test("token selection refuses logits that are not a Float32Array", () => {
    expect(() => argmax([1, 2] as unknown as Float32Array)).toThrow("argmax: values must be a Float32Array, got Array(2)");
    expect(() => new Sampler().pick(new Float64Array(2) as unknown as Float32Array, sample(1, 0, 1), null)).toThrow(
      "sampler: logits must be a Float32Array, got Float64Array(2)",
    );
  });

  test("parseSampling", () => {
    expect(parseSampling("greedy")).toEqual({ kind: "greedy" });
    expect(parseSampling("temp:0.8,topk:20,seed:7")).toEqual({ kind: "sample", temperature: 0.8, topK: 20, seed: 7 });
    expect(parseSampling("seed:3")).toEqual({ kind: "sample", temperature: 1, topK: 40, seed: 3 });
    expect(parseSampling("temp:0")).toEqual({ kind: "greedy" });
    for (const bad of ["", "temp:-1", "topk:1.5", "seed:-2", "seed:4294967296", "temp:abc", "top:3", "temp:1,temp:2", "temp"]) {
      expect(() => parseSampling(bad)).toThrow("bad sampling");
    }
  });
});

describe("default hidden source", () => {
  const values = new Float32Array(vocab * hidden).map((_, i) => Math.sin(i) * 0.05);
  const source = new EmbeddingHiddenSource(denseEmbedding(values, vocab, hidden));

  test("embedding row x sqrt(hidden) plus a bounded per-request, per-position perturbation (16x the row's RMS)", () => {
    const out = new Float32Array(hidden * 2);
    const ctx = { id: "r", key: hash32("r") };
    source.fill(out, hidden, ctx, 42, 0);
    let rowSq = 0;
    for (let k = 0; k < hidden; k++) rowSq += (values[42 * hidden + k]! * Math.sqrt(hidden)) ** 2;
    const rowRms = Math.sqrt(rowSq / hidden);
    let noiseSq = 0;
    let noiseSum = 0;
    for (let k = 0; k < hidden; k++) {
      const noise = out[hidden + k]! - values[42 * hidden + k]! * Math.sqrt(hidden);
      expect(Math.abs(noise)).toBeLessThanOrEqual(16 * Math.sqrt(3) * rowRms * (1 + 1e-5));
      noiseSq += noise * noise;
      noiseSum += noise;
    }
    expect(Math.sqrt(noiseSq / hidden) / rowRms).toBeGreaterThan(14);
    expect(Math.sqrt(noiseSq / hidden) / rowRms).toBeLessThan(18);
    expect(Math.abs(noiseSum / hidden)).toBeLessThan(2 * rowRms); // zero-mean, up to sampling error
    expect(Array.from(out.subarray(0, hidden)).every((v) => v === 0)).toBe(true); // only its own window

    const again = new Float32Array(hidden);
    source.fill(again, 0, ctx, 42, 0);
    expect(again).toEqual(out.subarray(hidden));
    const other = new Float32Array(hidden);
    source.fill(other, 0, ctx, 42, 1);
    expect(other).not.toEqual(again);
    source.fill(other, 0, { id: "s", key: hash32("s") }, 42, 0);
    expect(other).not.toEqual(again);
  });

  test("SplitMix32.fill (the perturbation's words) writes what u32() would give, and the stream goes on after them", () => {
    for (const seed of [0, 1, 0xffffffff, hash32("r")]) {
      const a = new SplitMix32(seed);
      const b = new SplitMix32(seed);
      const words = new Uint32Array(37);
      a.fill(words);
      for (let i = 0; i < words.length; i++) expect(words[i]).toBe(b.u32());
      a.fill(words.subarray(0, 0));
      expect(a.u32()).toBe(b.u32()); // the state moved past exactly the words written
    }
  });

  test("it writes only into a Float32Array with room for the row", () => {
    const ctx = { id: "r", key: hash32("r") };
    expect(() => source.fill([] as unknown as Float32Array, 0, ctx, 1, 0)).toThrow("hidden source: out must be a Float32Array, got Array(0)");
    expect(() => source.fill(new Float32Array(hidden), 1, ctx, 1, 0)).toThrow(`row [1, ${hidden + 1}) outside out's ${hidden} values`);
    expect(() => denseEmbedding([0] as unknown as Float32Array, 1, 1)).toThrow("dense embedding: values must be a Float32Array, got Array(1)");
  });

  test("it decodes every embedding row into one reused array", () => {
    const outs = new Set<Float32Array | undefined>();
    const table = {
      vocab,
      hidden,
      typeId: 0,
      row: (token: number, out?: Float32Array) => {
        outs.add(out);
        return values.subarray(token * hidden, (token + 1) * hidden);
      },
    };
    const spied = new EmbeddingHiddenSource(table);
    const row = new Float32Array(hidden);
    for (let t = 0; t < 5; t++) spied.fill(row, 0, { id: "r", key: hash32("r") }, t, t);
    expect(outs.size).toBe(1);
    expect([...outs][0]).toBeInstanceOf(Float32Array);
  });

  test("out-of-vocabulary tokens are refused", () => {
    expect(() => source.fill(new Float32Array(hidden), 0, { id: "r", key: 1 }, vocab, 0)).toThrow("outside the vocabulary");
  });

  test("staggered workloads are deterministic and ordered by arrival", () => {
    const opts = { count: 20, vocab, slots: 4, minNew: 2, maxNew: 9, seed: 8, sampling: parseSampling("greedy") };
    const a = staggeredRequests(opts);
    expect(staggeredRequests(opts)).toEqual(a);
    expect(a.slice(0, 4).every((r) => r.arrivalStep === 0)).toBe(true);
    expect(a.every((r, i) => i === 0 || r.arrivalStep! >= a[i - 1]!.arrivalStep!)).toBe(true);
    expect(a.at(-1)!.arrivalStep).toBeGreaterThan(0);
    expect(a.every((r) => r.maxNewTokens >= 2 && r.maxNewTokens <= 9 && r.firstToken < vocab)).toBe(true);
  });
});

describe("one request cannot stop the others", () => {
  const head = typedHead(14, 41);
  const source = sourceFor(head);
  afterAll(() => head[Symbol.dispose]());
  const requests: DecodeRequest[] = [
    { id: "g", firstToken: 10, maxNewTokens: 6 },
    { id: "s", firstToken: 20, maxNewTokens: 6, sampling: sample(1, 40, 3) },
    { id: "bad", firstToken: 30, maxNewTokens: 6 },
    { id: "late", firstToken: 40, maxNewTokens: 4, arrivalStep: 2, sampling: sample(0.8, 0, 9) },
  ];
  const solo = serialReference(head.weights, requests, source);

  /** Runs the requests over 4 slots; every token of the requests in `healthy` must equal its solo run, logits bit for bit. */
  function runAll(hiddenSource: HiddenSource, healthy: string[], onToken?: (id: string, position: number) => void) {
    const loop = new DecodeLoop(head.weights, {
      slots: 4,
      hiddenSource,
      onToken: (e) => {
        if (healthy.includes(e.id)) {
          expect(e.token).toBe(solo.tokens.get(e.id)![e.position]!);
          expect(new Uint32Array(e.logits.buffer, e.logits.byteOffset, e.logits.length)).toEqual(solo.logits.get(e.id)![e.position]!);
        }
        onToken?.(e.id, e.position);
      },
    });
    for (const r of requests) loop.submit(r);
    const report = loop.run();
    const byId = new Map(report.results.map((r) => [r.id, r]));
    for (const id of healthy) expect(byId.get(id)).toMatchObject({ reason: "length", error: null, tokens: solo.tokens.get(id)! });
    for (const r of report.results) expect(r.tokens.length).toBeLessThanOrEqual(requests.find((q) => q.id === r.id)!.maxNewTokens);
    expect(loop.done).toBe(true);
    return { byId, stats: report.stats, loop };
  }

  test("a request whose row comes back non-finite ends alone, with the rows named; the others equal their solo runs", () => {
    const poisoned: HiddenSource = {
      hidden,
      fill(out, offset, request, token, position) {
        source.fill(out, offset, request, token, position);
        if (request.id === "bad" && position === 2) out[offset + 5] = NaN;
      },
    };
    const { byId, stats } = runAll(poisoned, ["g", "s", "late"]);
    const bad = byId.get("bad")!;
    expect(bad).toMatchObject({ reason: "error", finishedStep: 2, tokens: solo.tokens.get("bad")!.slice(0, 2) });
    expect(bad.error).toContain("non-finite logits in row 2 of 4");
    expect(stats).toMatchObject({ finished: 3, failed: 1, retries: 1 });
  });

  test("a hidden source that throws for one request ends it alone", () => {
    const throwing: HiddenSource = {
      hidden,
      fill(out, offset, request, token, position) {
        if (request.id === "bad" && position === 1) throw new Error("no row for you");
        source.fill(out, offset, request, token, position);
      },
    };
    const { byId, stats } = runAll(throwing, ["g", "s", "late"]);
    expect(byId.get("bad")).toMatchObject({ reason: "error", error: "hidden source: no row for you", tokens: solo.tokens.get("bad")!.slice(0, 1) });
    expect(stats).toMatchObject({ finished: 3, failed: 1, retries: 0 });
  });

  test("a throwing onToken ends that request alone, even on its last token; the loop stays consistent", () => {
    const { byId, stats } = runAll(source, ["bad", "late"], (id, position) => {
      if ((id === "s" && position === 1) || (id === "g" && position === 5)) throw new Error(`consumer of ${id} gone`);
    });
    expect(byId.get("s")).toMatchObject({ reason: "error", error: "onToken threw: consumer of s gone", tokens: solo.tokens.get("s")!.slice(0, 2) });
    expect(byId.get("g")).toMatchObject({ reason: "error", error: "onToken threw: consumer of g gone", tokens: solo.tokens.get("g")! });
    expect(stats).toMatchObject({ finished: 2, failed: 2 });
  });

  test("a throwing onStep leaves the step complete: the next run goes on as if nothing happened", () => {
    let thrown = false;
    const loop = new DecodeLoop(head.weights, {
      slots: 4,
      hiddenSource: source,
      onStep: (e) => {
        if (e.step === 1 && !thrown) {
          thrown = true;
          throw new Error("observer failed");
        }
      },
    });
    for (const r of requests) loop.submit(r);
    expect(() => loop.run()).toThrow("observer failed");
    const { results } = loop.run();
    const tokens = new Map(results.map((r) => [r.id, r.tokens.length]));
    expect(tokens).toEqual(new Map(requests.map((r) => [r.id, r.maxNewTokens]))); // no step lost or repeated
    expect(loop.stats.slotTokens).toBe(6 + 6 + 6 + 4);
  });
});

describe("a long-running loop holds only what is queued or running", () => {
  const head = f32Head(device, hidden, vocab, 43);
  const source = sourceFor(head);
  afterAll(() => head[Symbol.dispose]());

  test("ended requests are handed over and released: their ids can be submitted again", () => {
    const loop = new DecodeLoop(head.weights, { slots: 2, hiddenSource: source });
    const handed: RequestResult[] = [];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5; i++) loop.submit({ id: `r${i}`, firstToken: i, maxNewTokens: 1 + (i % 3) });
      expect(() => loop.submit({ id: "r0", firstToken: 0, maxNewTokens: 1 })).toThrow("submitted twice"); // while in flight
      handed.push(...loop.run().results);
    }
    expect(handed.length).toBe(15);
    const r4 = handed.filter((r) => r.id === "r4");
    expect(r4.length).toBe(3);
    expect(r4[2]!.tokens).toEqual(r4[0]!.tokens); // the same request again, the same tokens
  });

  test("statistics stay a fixed size however many calls ran", () => {
    const loop = new DecodeLoop(head.weights, { slots: 3, hiddenSource: source });
    const shape = () => JSON.stringify(loop.stats, (_, v) => (typeof v === "number" ? 0 : v));
    for (let i = 0; i < 3; i++) loop.submit({ id: `a${i}`, firstToken: i, maxNewTokens: 2 });
    loop.run();
    const early = shape();
    for (let i = 0; i < 60; i++) loop.submit({ id: `b${i}`, firstToken: i, maxNewTokens: 1 + (i % 4) });
    const { stats } = loop.run();
    expect(shape()).toBe(early);
    expect(stats.callsByRows.length).toBe(4);
    expect(stats.callsByRows.reduce((a, b) => a + b, 0)).toBe(stats.calls);
    expect(stats.headNsQuantiles.p50).toBeGreaterThan(0);
    expect(stats.headNsQuantiles.p50).toBeLessThanOrEqual(stats.headNsQuantiles.max);
  });
});
