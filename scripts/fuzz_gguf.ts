// Mutation fuzzer for the GGUF reader and head resolution.
//
//   bun scripts/fuzz_gguf.ts [--cases 100000] [--seed 1]
//
// Small valid files written by our writer are mutated (byte flips, truncations, splices,
// deletions, length-field and type-field edits). Every case must either parse or throw
// GgufError (resolving a head may also throw ArtifactError); anything else is a reader bug.
// Prints counts per outcome and exits 1 if any case threw something else.
// test/gguf.test.ts runs a few thousand cases of the same engine.
import { ArtifactError, resolveHead } from "../src/artifact/head.ts";
import { GgufError, parseGguf, tensorData, ValueType } from "../src/artifact/gguf.ts";
import { Rng, synthBlocks, synthF32 } from "../src/artifact/synth.ts";
import { encodeGguf, meta, type GgufContents } from "../src/artifact/writer.ts";

const F32 = 0;
const Q8_0 = 8;
const Q6_K = 14;
const Q4_1 = 3; // a ggml type lmhead does not know

/** The valid files that mutations start from: tied and untied heads, rich metadata, an unknown type. */
export function baseFiles(): Uint8Array[] {
  const rng = new Rng(7);
  const norm = (hidden: number) => new Uint8Array(synthF32(hidden, rng, 1, 0.2).buffer);
  const tied: GgufContents = {
    metadata: [
      ["general.architecture", meta.str("gemma4")],
      ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ["gemma4.final_logit_softcapping", meta.f32(30)],
      ["gemma4.embedding_length", meta.u32(64)],
      ["x.u8", meta.u8(7)],
      ["x.i64", meta.i64(-5n)],
      ["x.u64", meta.u64(1n << 40n)],
      ["x.f64", meta.f64(2.5)],
      ["x.bool", meta.bool(true)],
      ["x.tokens", meta.array({ itemType: ValueType.STRING, items: ["<pad>", "<eos>", "a", "bb"] })],
      ["x.scores", meta.array({ itemType: ValueType.F32, items: new Float32Array([0, -1, 2.5]) })],
    ],
    tensors: [
      { name: "output_norm.weight", typeId: F32, dims: [64], data: norm(64) },
      { name: "token_embd.weight", typeId: Q8_0, dims: [64, 6], data: synthBlocks(Q8_0, 64 * 6, rng) },
    ],
  };
  const untied: GgufContents = {
    metadata: [
      ["general.architecture", meta.str("gemma4")],
      ["general.alignment", meta.u32(64)],
      ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ["gemma4.final_logit_softcapping", meta.f32(30)],
      [
        "x.nested",
        meta.array({
          itemType: ValueType.ARRAY,
          items: [
            { itemType: ValueType.STRING, items: ["p", "qq"] },
            { itemType: ValueType.I16, items: new Int16Array([-3, 4]) },
          ],
        }),
      ],
      ["x.i8s", meta.array({ itemType: ValueType.I8, items: new Int8Array([-1, 2]) })],
    ],
    tensors: [
      { name: "token_embd.weight", typeId: Q4_1, dims: [256, 2], data: rng_bytes(rng, 2 * 8 * 20) },
      { name: "output.weight", typeId: Q6_K, dims: [256, 3], data: synthBlocks(Q6_K, 256 * 3, rng) },
      { name: "output_norm.weight", typeId: F32, dims: [256], data: norm(256) },
    ],
  };
  const bare: GgufContents = { metadata: [["general.architecture", meta.str("llama")]], tensors: [] };
  return [encodeGguf(tied), encodeGguf(untied), encodeGguf(bare)];
}

function rng_bytes(rng: Rng, n: number): Uint8Array {
  const b = new Uint8Array(n);
  rng.fill(b);
  return b;
}

const INTERESTING_U64 = [0n, 1n, 2n, 7n, 8n, 31n, 32n, 64n, 255n, 4096n, (1n << 31n) - 1n, 1n << 31n, (1n << 32n) - 1n, 1n << 32n, 1n << 40n, 1n << 53n, 1n << 62n, 1n << 63n, (1n << 64n) - 1n];
const INTERESTING_U32 = [0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 30, 99, 0x7fffffff, 0x80000000, 0xffffffff];

function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs[rng.u32() % xs.length];
}

/** Offsets whose u64 looks like a length or count in a small file (high half zero, value small). */
function lengthFields(b: Uint8Array): number[] {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: number[] = [];
  for (let i = 0; i + 8 <= b.byteLength; i++) {
    if (dv.getUint32(i + 4, true) === 0 && dv.getUint32(i, true) < b.byteLength) out.push(i);
  }
  return out;
}

/** One mutated copy of `base` (1–3 mutations). */
export function mutate(rng: Rng, base: Uint8Array, others: readonly Uint8Array[]): { bytes: Uint8Array; ops: string[] } {
  let b = base.slice();
  const ops: string[] = [];
  const n = 1 + (rng.u32() % 3);
  for (let m = 0; m < n && b.byteLength > 0; m++) {
    const at = rng.u32() % b.byteLength;
    switch (rng.u32() % 7) {
      case 0: {
        b[at] ^= 1 << rng.u32() % 8;
        ops.push(`flip@${at}`);
        break;
      }
      case 1: {
        b[at] = rng.u32() & 0xff;
        ops.push(`set@${at}`);
        break;
      }
      case 2: {
        b = b.slice(0, at);
        ops.push(`truncate@${at}`);
        break;
      }
      case 3: {
        // Splice a range of another file (or this one) over this one, maybe growing it.
        const src = pick(rng, others);
        const from = rng.u32() % src.byteLength;
        const len = Math.min(1 + (rng.u32() % 64), src.byteLength - from);
        const grown = new Uint8Array(Math.max(b.byteLength, at + len));
        grown.set(b);
        grown.set(src.subarray(from, from + len), at);
        b = grown;
        ops.push(`splice@${at}+${len}`);
        break;
      }
      case 4: {
        const len = Math.min(1 + (rng.u32() % 16), b.byteLength - at);
        const cut = new Uint8Array(b.byteLength - len);
        cut.set(b.subarray(0, at));
        cut.set(b.subarray(at + len), at);
        b = cut;
        ops.push(`delete@${at}+${len}`);
        break;
      }
      case 5: {
        const fields = lengthFields(b);
        if (fields.length === 0) break;
        const f = pick(rng, fields);
        const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
        const old = dv.getBigUint64(f, true);
        const choice = rng.u32() % 3;
        const v = choice === 0 ? pick(rng, INTERESTING_U64) : choice === 1 ? old + BigInt((rng.u32() % 17) - 8) : BigInt(b.byteLength) + BigInt(rng.u32() % 64);
        dv.setBigUint64(f, BigInt.asUintN(64, v), true);
        ops.push(`len@${f}=${BigInt.asUintN(64, v)}`);
        break;
      }
      default: {
        if (at + 4 > b.byteLength) break;
        const v = pick(rng, INTERESTING_U32);
        new DataView(b.buffer, b.byteOffset, b.byteLength).setUint32(at, v, true);
        ops.push(`u32@${at}=${v}`);
      }
    }
  }
  return { bytes: b, ops };
}

export type Outcome = { kind: "parsed" } | { kind: "error"; name: string } | { kind: "other"; error: unknown };

/** Parses one input and touches everything a caller would use. */
export function runCase(bytes: Uint8Array): Outcome {
  try {
    const g = parseGguf(bytes, "fuzz.gguf");
    for (const t of g.tensors.values()) tensorData(g, t);
    try {
      resolveHead(g);
    } catch (e) {
      if (!(e instanceof ArtifactError || e instanceof GgufError)) throw e;
    }
    return { kind: "parsed" };
  } catch (e) {
    if (e instanceof GgufError) return { kind: "error", name: e.kind };
    return { kind: "other", error: e };
  }
}

export interface FuzzReport {
  cases: number;
  counts: Map<string, number>;
  /** The first few cases that threw something other than GgufError. */
  others: { ops: string[]; error: unknown }[];
  ms: number;
}

export function runFuzz(cases: number, seed: number): FuzzReport {
  const rng = new Rng(seed);
  const bases = baseFiles();
  const counts = new Map<string, number>();
  const others: FuzzReport["others"] = [];
  const t0 = performance.now();
  for (let i = 0; i < cases; i++) {
    const { bytes, ops } = mutate(rng, pick(rng, bases), bases);
    const r = runCase(bytes);
    const key = r.kind === "parsed" ? "parsed" : r.kind === "error" ? `GgufError:${r.name}` : "OTHER";
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (r.kind === "other" && others.length < 10) others.push({ ops, error: r.error });
  }
  return { cases, counts, others, ms: performance.now() - t0 };
}

if (import.meta.main) {
  const arg = (name: string, dflt: number) => {
    const i = process.argv.indexOf(name);
    return i >= 0 ? Number(process.argv[i + 1]) : dflt;
  };
  const report = runFuzz(arg("--cases", 100_000), arg("--seed", 1));
  console.log(`${report.cases} cases in ${(report.ms / 1000).toFixed(1)} s`);
  for (const [k, v] of [...report.counts].sort((a, b) => b[1] - a[1])) console.log(`${String(v).padStart(8)}  ${k}`);
  for (const o of report.others) console.log("OTHER:", o.ops.join(" "), o.error);
  process.exit(report.counts.has("OTHER") ? 1 : 0);
}
