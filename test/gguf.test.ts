// GGUF reader, writer and head resolution: round trips, every bad-file case, fuzzing and the
// gguf-py cross-check fixtures.
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dequantize, formatInfo } from "../src/formats.ts";
import { GgufError, parseGguf, readGguf, tensorData, ValueType, type GgufArray, type GgufErrorKind, type GgufFile, type GgufValue } from "../src/artifact/gguf.ts";
import { ArtifactError, loadHead, resolveHead } from "../src/artifact/head.ts";
import { Rng, synthBlocks, synthF32 } from "../src/artifact/synth.ts";
import { ByteBuilder, encodeGguf, meta, writeGguf, type GgufContents, type TensorSource } from "../src/artifact/writer.ts";
import { runFuzz } from "../scripts/fuzz_gguf.ts";

const dir = mkdtempSync(join(tmpdir(), "lmhead-gguf-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let fileNo = 0;
function tmpFile(bytes: Uint8Array, name = `f${fileNo++}.gguf`): string {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
}

// ggml type ids lmhead must know (hf2q-head-spec.md §4).
const KNOWN = { F32: 0, F16: 1, Q4_0: 2, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q2_K: 10, Q3_K: 11, Q4_K: 12, Q5_K: 13, Q6_K: 14, IQ4_NL: 20, IQ4_XS: 23, BF16: 30 } as const;
const Q4_1 = 3; // a real ggml type lmhead does not know

interface HeadSpec {
  typeId: number;
  tied: boolean;
  hidden?: number;
  vocab?: number;
  arch?: string;
  softcap?: number | null;
  normTypeId?: number;
  extra?: TensorSource[];
  metadata?: [string, GgufValue][];
}

/** A small head artifact; returns the contents and the head/norm bytes written. */
function headContents(spec: HeadSpec, seed = 1): { contents: GgufContents; head: Uint8Array; norm: Uint8Array } {
  const { typeId, tied, hidden = 256, vocab = 5, arch = "gemma4", softcap = 30, normTypeId = KNOWN.F32 } = spec;
  const rng = new Rng(seed);
  const head = synthBlocks(typeId, hidden * vocab, rng);
  const norm = normTypeId === KNOWN.F32 ? new Uint8Array(synthF32(hidden, rng, 1, 0.2).buffer) : synthBlocks(normTypeId, hidden, rng);
  const metadata: [string, GgufValue][] = [
    ["general.architecture", meta.str(arch)],
    [`${arch}.attention.layer_norm_rms_epsilon`, meta.f32(1e-6)],
  ];
  if (softcap !== null) metadata.push([`${arch}.final_logit_softcapping`, meta.f32(softcap)]);
  metadata.push(...(spec.metadata ?? []));
  const tensors: TensorSource[] = [{ name: "output_norm.weight", typeId: normTypeId, dims: [hidden], data: norm }];
  if (tied) tensors.push({ name: "token_embd.weight", typeId, dims: [hidden, vocab], data: head });
  else {
    tensors.push({ name: "token_embd.weight", typeId: KNOWN.Q8_0, dims: [hidden, vocab], data: synthBlocks(KNOWN.Q8_0, hidden * vocab, rng) });
    tensors.push({ name: "output.weight", typeId, dims: [hidden, vocab], data: head });
  }
  tensors.push(...(spec.extra ?? []));
  return { contents: { metadata, tensors }, head, norm };
}

function expectGgufError(fn: () => unknown, file: string, kind: GgufErrorKind, message: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(GgufError);
  const e = caught as GgufError;
  expect(e.file).toBe(file);
  expect(e.message).toStartWith(`${file}: `);
  expect(e.message).toMatch(message);
  expect(e.kind).toBe(kind);
}

function expectArtifactError(fn: () => unknown, message: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(ArtifactError);
  expect((caught as ArtifactError).message).toMatch(message);
}

/** Raw GGUF bytes for crafted (mostly broken) files: header, then whatever `body` writes. */
function raw(body: (b: ByteBuilder) => void, h: { magic?: string; version?: number; tensors?: bigint | number; kvs?: bigint | number } = {}): Uint8Array {
  const b = new ByteBuilder();
  b.raw(new TextEncoder().encode(h.magic ?? "GGUF"))
    .u32(h.version ?? 3)
    .u64(h.tensors ?? 0)
    .u64(h.kvs ?? 0);
  body(b);
  return b.bytes();
}

/** One tensor info. */
function tensorInfo(b: ByteBuilder, name: string, dims: (number | bigint)[], typeId: number, offset: number | bigint): void {
  b.str(name).u32(dims.length);
  for (const d of dims) b.u64(d);
  b.u32(typeId).u64(offset);
}

/** A file whose tensor infos are given raw, followed by an aligned data section of `dataBytes` zeros. */
function withTensors(infos: (b: ByteBuilder) => number, dataBytes: number): Uint8Array {
  const b = new ByteBuilder();
  const body = new ByteBuilder();
  const n = infos(body);
  b.raw(new TextEncoder().encode("GGUF")).u32(3).u64(n).u64(0).raw(body.bytes()).pad(32);
  b.raw(new Uint8Array(dataBytes));
  return b.bytes();
}

function indexOfBytes(hay: Uint8Array, needle: string): number {
  const n = new TextEncoder().encode(needle);
  outer: for (let i = 0; i + n.length <= hay.length; i++) {
    for (let j = 0; j < n.length; j++) if (hay[i + j] !== n[j]) continue outer;
    return i;
  }
  throw new Error(`'${needle}' not found`);
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function plainArray(items: GgufArray["items"]): unknown[] {
  return Array.from(items as ArrayLike<unknown>, (x) => (typeof x === "object" && x !== null && "itemType" in x ? plainValue(x as GgufArray) : x));
}
function plainValue(a: GgufArray): unknown {
  return { itemType: a.itemType, items: plainArray(a.items) };
}

describe("round trip write → read", () => {
  test("every known head type keeps its tensor bytes, type and dims, untied and (where admitted) tied", () => {
    for (const [name, typeId] of Object.entries(KNOWN)) {
      const f = formatInfo(typeId);
      expect(f?.name).toBe(name);
      for (const tied of [false, true]) {
        if (tied && !f!.tiedHead) continue;
        const { contents, head, norm } = headContents({ typeId, tied, vocab: 7 }, typeId + 1);
        const path = tmpFile(encodeGguf(contents));
        const g = readGguf(path);
        const t = g.tensors.get(tied ? "token_embd.weight" : "output.weight")!;
        expect(t.typeId).toBe(typeId);
        expect(t.dims).toEqual([256, 7]);
        expect(t.bytes).toBe((256 / f!.blockValues) * f!.blockBytes * 7);
        expect(tensorData(g, t)).toEqual(head);
        const h = resolveHead(g);
        expect(h.head.tied).toBe(tied);
        expect(tensorData(g, h.head)).toEqual(head);
        expect(tensorData(g, h.norm)).toEqual(norm);
        expect([h.hidden, h.vocab]).toEqual([256, 7]);
      }
    }
  });

  test("streamed writeGguf and in-memory encodeGguf give the same file", () => {
    const { contents } = headContents({ typeId: KNOWN.Q6_K, tied: true, vocab: 9 });
    const streamed: GgufContents = {
      metadata: contents.metadata,
      tensors: contents.tensors.map((t) => {
        const d = t.data as Uint8Array;
        // Uneven chunks, to catch offset bookkeeping across chunk boundaries.
        return { ...t, data: { bytes: d.byteLength, *chunks() { for (let i = 0; i < d.byteLength; i += 333) yield d.subarray(i, i + 333); } } };
      }),
    };
    const path = join(dir, "streamed.gguf");
    const progress: number[] = [];
    const bytes = writeGguf(path, streamed, { onProgress: (w) => progress.push(w) });
    const inMemory = encodeGguf(contents);
    expect(bytes).toBe(inMemory.byteLength);
    expect(new Uint8Array(readFileSync(path))).toEqual(inMemory);
    expect(progress.length).toBeGreaterThan(3);
    expect(progress.at(-1)).toBeLessThanOrEqual(bytes);
  });

  test("writer rejects data of the wrong size for a known type", () => {
    const bad: GgufContents = { metadata: [], tensors: [{ name: "w", typeId: KNOWN.Q8_0, dims: [32, 2], data: new Uint8Array(67) }] };
    expect(() => encodeGguf(bad)).toThrow(/67 data bytes given, Q8_0 \[32,2\] needs 68/);
  });

  test("metadata of every value type, arrays of each, nested arrays and version 2", () => {
    const entries: [string, GgufValue][] = [
      ["u8", meta.u8(255)],
      ["i8", meta.i8(-128)],
      ["u16", meta.u16(65535)],
      ["i16", meta.i16(-32768)],
      ["u32", meta.u32(0xffffffff)],
      ["i32", meta.i32(-0x80000000)],
      ["f32", meta.f32(0.1)],
      ["f64", meta.f64(-1e-300)],
      ["u64", meta.u64((1n << 64n) - 1n)],
      ["i64", meta.i64(-(1n << 63n))],
      ["t", meta.bool(true)],
      ["f", meta.bool(false)],
      ["s", meta.str("héllo ✓ 🦙")],
      ["empty", meta.str("")],
      ["a.u8", meta.array({ itemType: ValueType.U8, items: new Uint8Array([0, 255]) })],
      ["a.i8", meta.array({ itemType: ValueType.I8, items: new Int8Array([-128, 127]) })],
      ["a.u16", meta.array({ itemType: ValueType.U16, items: new Uint16Array([1, 65535]) })],
      ["a.i16", meta.array({ itemType: ValueType.I16, items: new Int16Array([-1, 2]) })],
      ["a.u32", meta.array({ itemType: ValueType.U32, items: new Uint32Array([0xffffffff]) })],
      ["a.i32", meta.array({ itemType: ValueType.I32, items: new Int32Array([-5, 6, 7]) })],
      ["a.f32", meta.array({ itemType: ValueType.F32, items: new Float32Array([0.5, -1e30]) })],
      ["a.f64", meta.array({ itemType: ValueType.F64, items: new Float64Array([Math.PI]) })],
      ["a.u64", meta.array({ itemType: ValueType.U64, items: new BigUint64Array([(1n << 64n) - 1n]) })],
      ["a.i64", meta.array({ itemType: ValueType.I64, items: new BigInt64Array([-(1n << 63n), 3n]) })],
      ["a.bool", meta.array({ itemType: ValueType.BOOL, items: [true, false] })],
      ["a.str", meta.array({ itemType: ValueType.STRING, items: ["a", "", "ü"] })],
      ["a.empty", meta.array({ itemType: ValueType.U32, items: new Uint32Array(0) })],
      [
        "a.nested",
        meta.array({
          itemType: ValueType.ARRAY,
          items: [
            { itemType: ValueType.STRING, items: ["x", "yy"] },
            { itemType: ValueType.ARRAY, items: [{ itemType: ValueType.STRING, items: ["deep"] }] },
          ],
        }),
      ],
    ];
    const bytes = encodeGguf({ metadata: entries, tensors: [] });
    for (const version of [3, 2]) {
      new DataView(bytes.buffer).setUint32(4, version, true);
      const g = parseGguf(bytes, "meta.gguf");
      expect(g.version).toBe(version);
      expect([...g.metadata.keys()]).toEqual(entries.map(([k]) => k));
      for (const [key, want] of entries) {
        const got = g.metadata.get(key)!;
        expect(got.type).toBe(want.type);
        if (want.type === ValueType.ARRAY) {
          const a = got.value as GgufArray;
          expect(a.items.constructor).toBe((want.value as GgufArray).items.constructor);
          expect(plainValue(a)).toEqual(plainValue(want.value as GgufArray));
        } else if (want.type === ValueType.F32) {
          expect(got.value).toBe(Math.fround(want.value as number));
        } else {
          expect(got.value).toBe(want.value);
        }
      }
    }
  });

  test("general.alignment sets the data offsets; 32 by default", () => {
    for (const alignment of [undefined, 1, 64, 4096]) {
      const { contents } = headContents({
        typeId: KNOWN.Q8_0,
        tied: false,
        metadata: alignment === undefined ? [] : [["general.alignment", meta.u32(alignment)]],
      });
      const g = parseGguf(encodeGguf(contents), "a.gguf");
      const a = alignment ?? 32;
      expect(g.alignment).toBe(a);
      expect(g.dataOffset % a).toBe(0);
      for (const t of g.tensors.values()) expect((t.fileOffset - g.dataOffset) % a).toBe(0);
    }
  });

  test("reads through a mapping: views share the mapping's memory, nothing is copied", () => {
    const { contents } = headContents({ typeId: KNOWN.Q6_K, tied: true });
    const bytes = encodeGguf(contents);
    const path = tmpFile(bytes);
    const h = loadHead(path);
    expect(h.gguf.mapping.byteLength).toBe(bytes.byteLength);
    expect(tensorData(h.gguf, h.head).buffer).toBe(h.gguf.mapping.buffer);
    expect(tensorData(h.gguf, h.norm).buffer).toBe(h.gguf.mapping.buffer);
    expect(tensorData(h.gguf, h.head).byteOffset).toBe(readGguf(path).tensors.get("token_embd.weight")!.fileOffset);
  });

  test("tensors of types lmhead only skips parse with their extent; decoding them is an error", () => {
    const { contents } = headContents({
      typeId: KNOWN.Q8_0,
      tied: true,
      extra: [
        { name: "blk.0.ffn.weight", typeId: Q4_1, dims: [64, 2], data: new Uint8Array(2 * 2 * 20) },
        { name: "i32", typeId: 26, dims: [3], data: new Uint8Array(12) },
      ],
    });
    const path = tmpFile(encodeGguf(contents));
    const g = readGguf(path);
    const q41 = g.tensors.get("blk.0.ffn.weight")!;
    expect(q41.typeId).toBe(Q4_1);
    expect(q41.bytes).toBe(80);
    expect(g.tensors.get("i32")!.bytes).toBe(12);
    expect(tensorData(g, q41).byteLength).toBe(80);
    expect(() => dequantize(Q4_1, tensorData(g, q41))).toThrow(/unknown ggml type id 3/);
    expect(resolveHead(g).head.typeId).toBe(KNOWN.Q8_0);
  });
});

describe("synthetic weights", () => {
  test("every known type: finite weights with RMS within 20% of the target (native reference decoder)", () => {
    const rng = new Rng(5);
    for (const [name, typeId] of Object.entries(KNOWN)) {
      for (const rms of [0.05, 0.5]) {
        const v = dequantize(typeId, synthBlocks(typeId, 256 * 64, rng, { rms }));
        let ss = 0;
        for (const x of v) ss += x * x;
        expect({ name, finite: v.every(Number.isFinite) }).toEqual({ name, finite: true });
        expect(Math.abs(Math.sqrt(ss / v.length) / rms - 1)).toBeLessThan(0.2);
      }
    }
  });

  test("same seed, same bytes; another seed, other bytes", () => {
    const a = synthBlocks(KNOWN.Q6_K, 2816 * 3, new Rng(42));
    expect(synthBlocks(KNOWN.Q6_K, 2816 * 3, new Rng(42))).toEqual(a);
    expect(synthBlocks(KNOWN.Q6_K, 2816 * 3, new Rng(43))).not.toEqual(a);
    // Writing into an unaligned window gives the same bytes as a fresh buffer.
    const window = new Uint8Array(a.byteLength + 1).subarray(1);
    expect(synthBlocks(KNOWN.Q6_K, 2816 * 3, new Rng(42), {}, window)).toEqual(a);
  });
});

describe("head resolution", () => {
  const load = (spec: HeadSpec, opts = {}) => resolveHead(parseGguf(encodeGguf(headContents(spec).contents), "head.gguf"), opts);

  test("tied: token_embd bytes, no output.weight; untied: output.weight wins over token_embd", () => {
    const tied = load({ typeId: KNOWN.Q8_0, tied: true });
    expect(tied.head).toMatchObject({ name: "token_embd.weight", tied: true, typeId: KNOWN.Q8_0 });
    const untied = load({ typeId: KNOWN.Q6_K, tied: false });
    expect(untied.head).toMatchObject({ name: "output.weight", tied: false, typeId: KNOWN.Q6_K });
    expect(untied).toMatchObject({ arch: "gemma4", hidden: 256, vocab: 5, softcap: 30 });
    expect(untied.eps).toBe(Math.fround(1e-6));
  });

  test("tied Q3_K (and the other non-embedding types) are rejected; untied they are accepted", () => {
    for (const name of ["Q3_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS"] as const) {
      expectArtifactError(() => load({ typeId: KNOWN[name], tied: true }), new RegExp(`'token_embd.weight' \\[256, 5\\]: head admission: tied head of stored type ${name}`));
      expect(load({ typeId: KNOWN[name], tied: false }).head.typeId).toBe(KNOWN[name]);
    }
  });

  test("softcap: gemma4 without it is an error unless allowed; other archs run without", () => {
    expectArtifactError(() => load({ typeId: KNOWN.Q8_0, tied: true, softcap: null }), /missing metadata 'gemma4.final_logit_softcapping'/);
    expect(load({ typeId: KNOWN.Q8_0, tied: true, softcap: null }, { allowMissingSoftcap: true }).softcap).toBeNull();
    expect(load({ typeId: KNOWN.Q8_0, tied: true, softcap: null, arch: "gemma3" }).softcap).toBeNull();
    expect(load({ typeId: KNOWN.Q8_0, tied: true, softcap: 50, arch: "gemma3" }).softcap).toBe(50);
    expectArtifactError(() => load({ typeId: KNOWN.Q8_0, tied: true, softcap: 0 }), /final_logit_softcapping' is 0, expected a finite value > 0/);
  });

  test("eps and softcap are converted to f32 once, at load: values f32 turns into 0, a subnormal or Inf are refused", () => {
    const eps = (v: GgufValue) => [["gemma4.attention.layer_norm_rms_epsilon", v]] as [string, GgufValue][];
    const withMeta = (metadata: [string, GgufValue][], softcap: number | null = 30) => {
      const { contents } = headContents({ typeId: KNOWN.Q8_0, tied: true, softcap });
      const kept = [...contents.metadata].filter(([k]) => !metadata.some(([m]) => m === k));
      return resolveHead(parseGguf(encodeGguf({ metadata: [...kept, ...metadata], tensors: contents.tensors }), "m.gguf"));
    };
    expectArtifactError(() => withMeta(eps(meta.f64(1e-50))), /'gemma4.attention.layer_norm_rms_epsilon' is 1e-50 \(0 as f32, the precision lmhead computes in\), expected a finite value > 0/);
    expectArtifactError(() => withMeta(eps(meta.f64(1e-40))), /is 1e-40 \(9.99994610111476e-41 as f32/);
    expectArtifactError(() => withMeta(eps(meta.f32(1e-40))), /is 9.99994610111476e-41, expected a finite value > 0 that f32 holds as a normal number/);
    expectArtifactError(() => withMeta([["gemma4.final_logit_softcapping", meta.f64(1e300)]], null), /'gemma4.final_logit_softcapping' is 1e\+300 \(Infinity as f32/);
    expectArtifactError(() => withMeta([["gemma4.final_logit_softcapping", meta.f64(-30)]], null), /is -30, expected a finite value > 0/);
    const ok = withMeta([...eps(meta.f64(1e-6)), ["gemma4.final_logit_softcapping", meta.f64(30.1)]], null);
    expect([ok.eps, ok.softcap]).toEqual([Math.fround(1e-6), Math.fround(30.1)]);
    expect(withMeta(eps(meta.u32(1))).eps).toBe(1);
  });

  test("output_norm.weight must be F32 of length hidden", () => {
    expectArtifactError(() => load({ typeId: KNOWN.Q8_0, tied: true, normTypeId: KNOWN.F16 }), /'output_norm.weight' must have exact F32 storage, found F16/);
    const wrongLength = headContents({ typeId: KNOWN.Q8_0, tied: true });
    (wrongLength.contents.tensors as TensorSource[])[0] = { name: "output_norm.weight", typeId: 0, dims: [128], data: new Uint8Array(512) };
    expectArtifactError(() => resolveHead(parseGguf(encodeGguf(wrongLength.contents), "n.gguf")), /'output_norm.weight' must be \[256\], has dims \[128\]/);
  });

  test("missing pieces and bad shapes are named", () => {
    const strip = (drop: (name: string) => boolean, dropMeta: (key: string) => boolean = () => false) => {
      const { contents } = headContents({ typeId: KNOWN.Q8_0, tied: false });
      return parseGguf(
        encodeGguf({ metadata: [...contents.metadata].filter(([k]) => !dropMeta(k)), tensors: contents.tensors.filter((t) => !drop(t.name)) }),
        "s.gguf",
      );
    };
    expectArtifactError(() => resolveHead(strip((n) => n !== "output_norm.weight")), /neither 'output.weight' nor 'token_embd.weight'/);
    expectArtifactError(() => resolveHead(strip((n) => n === "output_norm.weight")), /missing tensor 'output_norm.weight'/);
    expectArtifactError(() => resolveHead(strip(() => false, (k) => k === "general.architecture")), /missing metadata 'general.architecture'/);
    expectArtifactError(() => resolveHead(strip(() => false, (k) => k.endsWith("epsilon"))), /missing metadata 'gemma4.attention.layer_norm_rms_epsilon'/);
    // Rank 3 head.
    const rng = new Rng(3);
    const rank3 = headContents({ typeId: KNOWN.Q8_0, tied: true });
    (rank3.contents.tensors as TensorSource[])[1] = { name: "token_embd.weight", typeId: KNOWN.Q8_0, dims: [256, 5, 1], data: synthBlocks(KNOWN.Q8_0, 256 * 5, rng) };
    expectArtifactError(() => resolveHead(parseGguf(encodeGguf(rank3.contents), "r.gguf")), /must be rank 2 \[hidden, vocab\], has dims \[256, 5, 1\]/);
    // Head of a type lmhead does not know.
    const unknown = headContents({ typeId: KNOWN.Q8_0, tied: true });
    (unknown.contents.tensors as TensorSource[])[1] = { name: "token_embd.weight", typeId: Q4_1, dims: [256, 5], data: new Uint8Array(5 * 8 * 20) };
    expectArtifactError(() => resolveHead(parseGguf(encodeGguf(unknown.contents), "u.gguf")), /'token_embd.weight' \[256, 5\]: head admission: unknown or unsupported ggml type id 3 for an output head/);
    // Declared embedding_length disagrees with the head.
    expectArtifactError(() => load({ typeId: KNOWN.Q8_0, tied: true, metadata: [["gemma4.embedding_length", meta.u32(512)]] }), /'gemma4.embedding_length' is 512 but 'token_embd.weight' rows have 256 values/);
  });

  test("untied: a token embedding smaller than the head's vocab is refused at load; a larger one is used", () => {
    const untied = (embdVocab: number) => {
      const { contents } = headContents({ typeId: KNOWN.Q6_K, tied: false, vocab: 5 });
      const tensors = contents.tensors.map((t) => (t.name === "token_embd.weight" ? { ...t, dims: [256, embdVocab], data: synthBlocks(KNOWN.Q8_0, 256 * embdVocab, new Rng(2)) } : t));
      return resolveHead(parseGguf(encodeGguf({ metadata: contents.metadata, tensors }), "e.gguf"));
    };
    expectArtifactError(() => untied(4), /'token_embd.weight' has 4 rows but 'output.weight' has vocab 5: tokens 4..4, which the head can produce, would have no embedding/);
    expect(untied(7).embedding).toMatchObject({ vocab: 7, tensor: { name: "token_embd.weight" } });
    expect(untied(5).embedding.vocab).toBe(5);
  });

  test("a head whose data is not 4-byte aligned is rejected (alignment 1 allows it)", () => {
    const { contents } = headContents({
      typeId: KNOWN.Q8_0,
      tied: true,
      metadata: [["general.alignment", meta.u32(1)]],
      extra: [],
    });
    // A few bytes of an unknown type (24 = ggml I8) first shift everything after it off 4-byte
    // alignment; the header size does not depend on the pad's length, so measure it with 4 bytes.
    const withPad = (n: number): GgufContents => ({ metadata: contents.metadata, tensors: [{ name: "pad", typeId: 24, dims: [n], data: new Uint8Array(n) }, ...contents.tensors] });
    const normAt4 = parseGguf(encodeGguf(withPad(4))).tensors.get("output_norm.weight")!.fileOffset;
    const shifted = withPad(normAt4 % 4 === 3 ? 2 : 1);
    expectArtifactError(() => resolveHead(parseGguf(encodeGguf(shifted), "al.gguf")), /data is not 4-byte aligned \(general.alignment 1\)/);
  });

  test("a dense head whose rows are read 16 bytes at a time must start 16-byte aligned; a quantized one 4-byte", () => {
    const at = (typeId: number, pad: number) => {
      const { contents } = headContents({ typeId, tied: true, metadata: [["general.alignment", meta.u32(4)]], extra: [] });
      return encodeGguf({ metadata: contents.metadata, tensors: [{ name: "pad", typeId: 24, dims: [pad], data: new Uint8Array(pad) }, ...contents.tensors] });
    };
    // The header's size does not depend on the pad's length: shift the head to 4 past a multiple of 16.
    const offset = parseGguf(at(KNOWN.F16, 16)).tensors.get("token_embd.weight")!.fileOffset;
    const pad = 16 + ((20 - (offset % 16)) % 16);
    expect(parseGguf(at(KNOWN.F16, pad)).tensors.get("token_embd.weight")!.fileOffset % 16).toBe(4);
    expectArtifactError(() => resolveHead(parseGguf(at(KNOWN.F16, pad), "f16.gguf")), /'token_embd.weight' data is not 16-byte aligned \(general.alignment 4\)/);
    expect(resolveHead(parseGguf(at(KNOWN.Q8_0, pad), "q8.gguf")).head.typeId).toBe(KNOWN.Q8_0);
  });

  test("errors name the file", () => {
    const { contents } = headContents({ typeId: KNOWN.Q3_K, tied: true });
    const path = tmpFile(encodeGguf(contents), "named-q3k.gguf");
    expectArtifactError(() => loadHead(path), new RegExp(`^${escapeRe(path)}: 'token_embd.weight' \\[256, 5\\]: head admission: tied head of stored type Q3_K`));
  });
});

describe("bad files", () => {
  const valid = encodeGguf(headContents({ typeId: KNOWN.Q8_0, tied: false, extra: [{ name: "extra", typeId: KNOWN.F32, dims: [8], data: new Uint8Array(32) }] }).contents);

  test("missing file, directory, empty file", () => {
    const missing = join(dir, "nope.gguf");
    expectGgufError(() => readGguf(missing), missing, "io", /cannot open: .*ENOENT|no such file/i);
    const sub = join(dir, "a-directory");
    mkdirSync(sub);
    expectGgufError(() => readGguf(sub), sub, "io", /cannot open: not a regular file/);
    const empty = tmpFile(new Uint8Array(0));
    expectGgufError(() => readGguf(empty), empty, "truncated", /empty file/);
  });

  test("truncated anywhere: every prefix that cuts into the header, infos or data fails (through the mapping too)", () => {
    const g = parseGguf(valid);
    const dataEnd = Math.max(...[...g.tensors.values()].map((t) => t.fileOffset + t.bytes!));
    for (let n = 0; n < dataEnd; n++) {
      expect(() => parseGguf(valid.subarray(0, n), "cut.gguf")).toThrow(GgufError);
    }
    // Only trailing padding can go.
    expect(() => parseGguf(valid.subarray(0, dataEnd))).not.toThrow();
    const path = tmpFile(valid.subarray(0, 30));
    expectGgufError(() => readGguf(path), path, "count", /tensor count 4 cannot fit in the 14 bytes left/);
    const header = tmpFile(valid.subarray(0, 10));
    expectGgufError(() => readGguf(header), header, "truncated", /truncated reading header/);
  });

  test("truncated reading tensor info 3", () => {
    const bytes = withTensors((b) => {
      for (let i = 0; i < 4; i++) tensorInfo(b, `t${i}`, [8], KNOWN.F32, i * 32);
      return 4;
    }, 4 * 32);
    const at = indexOfBytes(bytes, "t3") + 2 + 4 + 3; // past the name and n_dims, inside the first dim
    expectGgufError(() => parseGguf(bytes.subarray(0, at), "t.gguf"), "t.gguf", "truncated", /truncated reading tensor info 3 \('t3'\)/);
  });

  test("wrong magic, unsupported versions", () => {
    expectGgufError(() => parseGguf(raw(() => {}, { magic: "GGML" }), "m.gguf"), "m.gguf", "magic", /not a GGUF file \(magic 0x4c4d4747\)/);
    for (const v of [0, 1, 4, 0xffffffff]) {
      expectGgufError(() => parseGguf(raw(() => {}, { version: v }), "v.gguf"), "v.gguf", "version", new RegExp(`unsupported GGUF version ${v};`));
    }
    expectGgufError(() => parseGguf(raw(() => {}, { version: 0x03000000 }), "be.gguf"), "be.gguf", "version", /big-endian/);
  });

  test("counts that cannot fit in the file", () => {
    expectGgufError(() => parseGguf(raw(() => {}, { tensors: (1n << 64n) - 1n }), "c.gguf"), "c.gguf", "count", /tensor count 18446744073709551615 cannot fit/);
    expectGgufError(() => parseGguf(raw(() => {}, { kvs: 1n << 40n }), "c.gguf"), "c.gguf", "count", /metadata count 1099511627776 cannot fit/);
    // Each count fits alone, together they do not.
    const both = raw((b) => b.raw(new Uint8Array(40)), { tensors: 1, kvs: 2 });
    expectGgufError(() => parseGguf(both, "c.gguf"), "c.gguf", "count", /1 tensors and 2 metadata entries cannot fit/);
    const arr = raw((b) => b.str("k").u32(ValueType.ARRAY).u32(ValueType.U32).u64(1n << 62n), { kvs: 1 });
    expectGgufError(() => parseGguf(arr, "c.gguf"), "c.gguf", "count", /metadata 'k': array length 4611686018427387904 cannot fit/);
  });

  test("strings with impossible lengths", () => {
    const key = raw((b) => b.u64(1n << 40n).raw(new Uint8Array(16)), { kvs: 1 });
    expectGgufError(() => parseGguf(key, "s.gguf"), "s.gguf", "string", /metadata key 0: string length 1099511627776 exceeds file/);
    const value = raw((b) => b.str("k").u32(ValueType.STRING).u64((1n << 64n) - 1n), { kvs: 1 });
    expectGgufError(() => parseGguf(value, "s.gguf"), "s.gguf", "string", /metadata 'k': string length 18446744073709551615 exceeds file/);
    const name = withTensors((b) => {
      b.u64(1000).raw(new Uint8Array(30));
      return 1;
    }, 0);
    expectGgufError(() => parseGguf(name, "s.gguf"), "s.gguf", "string", /tensor 0 name: string length 1000 exceeds file/);
    const badUtf8 = raw((b) => b.u64(2).u8(0xc3).u8(0x28).u32(ValueType.U8).u8(1), { kvs: 1 });
    expectGgufError(() => parseGguf(badUtf8, "s.gguf"), "s.gguf", "string", /metadata key 0 is not valid UTF-8/);
  });

  test("unknown value type ids, bad bools, deep nesting, duplicate keys", () => {
    const scalar = raw((b) => b.str("k").u32(13).u32(0), { kvs: 1 });
    expectGgufError(() => parseGguf(scalar, "v.gguf"), "v.gguf", "value-type", /metadata 'k': unknown value type 13/);
    const inArray = raw((b) => b.str("k").u32(ValueType.ARRAY).u32(99).u64(1).u32(0), { kvs: 1 });
    expectGgufError(() => parseGguf(inArray, "v.gguf"), "v.gguf", "value-type", /unknown value type 99 in array/);
    const bool = raw((b) => b.str("k").u32(ValueType.BOOL).u8(2), { kvs: 1 });
    expectGgufError(() => parseGguf(bool, "v.gguf"), "v.gguf", "value", /bool byte 2 is neither 0 nor 1/);
    const deep = raw(
      (b) => {
        b.str("k").u32(ValueType.ARRAY);
        for (let i = 0; i < 20; i++) b.u32(ValueType.ARRAY).u64(1);
        b.u32(ValueType.U8).u64(0);
      },
      { kvs: 1 },
    );
    expectGgufError(() => parseGguf(deep, "v.gguf"), "v.gguf", "nesting", /arrays nested deeper than 8/);
    const dup = raw((b) => b.str("k").u32(ValueType.U8).u8(1).str("k").u32(ValueType.U8).u8(2), { kvs: 2 });
    expectGgufError(() => parseGguf(dup, "v.gguf"), "v.gguf", "duplicate", /duplicate metadata key 'k'/);
  });

  test("general.alignment must be a u32 power of two", () => {
    for (const a of [0, 24, 0x80000001]) {
      const bytes = raw((b) => b.str("general.alignment").u32(ValueType.U32).u32(a), { kvs: 1 });
      expectGgufError(() => parseGguf(bytes, "al.gguf"), "al.gguf", "alignment", new RegExp(`general.alignment ${a} is not a power of two`));
    }
    const i32 = raw((b) => b.str("general.alignment").u32(ValueType.I32).i32(32), { kvs: 1 });
    expectGgufError(() => parseGguf(i32, "al.gguf"), "al.gguf", "alignment", /general.alignment has value type 5, expected u32/);
  });

  test("dims: too many, overflowing, not whole blocks", () => {
    const five = withTensors((b) => (tensorInfo(b, "x", [1, 1, 1, 1, 1], KNOWN.F32, 0), 1), 32);
    expectGgufError(() => parseGguf(five, "d.gguf"), "d.gguf", "dims", /tensor 'x' has 5 dimensions \(at most 4\)/);
    const product = withTensors((b) => (tensorInfo(b, "x", [1n << 32n, 1n << 32n, 1n << 32n], KNOWN.F32, 0), 1), 32);
    expectGgufError(() => parseGguf(product, "d.gguf"), "d.gguf", "dims", /tensor 'x' dims overflow/);
    const huge = withTensors((b) => (tensorInfo(b, "x", [0, (1n << 64n) - 1n], KNOWN.F32, 0), 1), 32);
    expectGgufError(() => parseGguf(huge, "d.gguf"), "d.gguf", "dims", /dimension 1 is 18446744073709551615/);
    // Unknown types get the same bound.
    const unknown = withTensors((b) => (tensorInfo(b, "x", [1n << 40n], Q4_1, 0), 1), 32);
    expectGgufError(() => parseGguf(unknown, "d.gguf"), "d.gguf", "dims", /dims overflow/);
    const partial = withTensors((b) => (tensorInfo(b, "x", [33, 2], KNOWN.Q8_0, 0), 1), 128);
    expectGgufError(() => parseGguf(partial, "d.gguf"), "d.gguf", "dims", /tensor 'x': 33 values is not a whole number of Q8_0 blocks \(32 values each\)/);
  });

  test("invalid and removed ggml type ids are refused on any tensor, as gguf-py and llama.cpp refuse them", () => {
    const cases: [number, RegExp][] = [
      [0xffffffff, /tensor 'blk.0.unused': unknown ggml type id 4294967295/],
      [43, /unknown ggml type id 43/],
      [4, /ggml type 4 \(Q4_2\) was removed from ggml; files must use Q4_0/],
      [31, /ggml type 31 \(Q4_0_4_4\) was removed from ggml; files must use Q4_0 \(repacked at run time\)/],
      [38, /ggml type 38 \(IQ4_NL_8_8\) was removed/],
    ];
    for (const [typeId, message] of cases) {
      const bytes = withTensors((b) => (tensorInfo(b, "blk.0.unused", [32], typeId, 0), 1), 64);
      expectGgufError(() => parseGguf(bytes, "t.gguf"), "t.gguf", "type", message);
    }
    // Beside a valid head, in a file: the head is not enough to make the file loadable.
    const { contents } = headContents({ typeId: KNOWN.Q8_0, tied: true });
    const withBad = encodeGguf({ ...contents, tensors: [...contents.tensors, { name: "blk.0.unused", typeId: KNOWN.F32, dims: [8], data: new Uint8Array(32) }] });
    const typeAt = indexOfBytes(withBad, "blk.0.unused") + "blk.0.unused".length + 4 + 8; // past the name, n_dims and the dim
    new DataView(withBad.buffer).setUint32(typeAt, 0xffffffff, true);
    const path = tmpFile(withBad);
    expectGgufError(() => loadHead(path), path, "type", /tensor 'blk.0.unused': unknown ggml type id 4294967295/);
  });

  test("a file cut inside the data of a tensor lmhead only skips is refused", () => {
    const { contents } = headContents({ typeId: KNOWN.Q8_0, tied: true, extra: [{ name: "blk.0.q4_1", typeId: Q4_1, dims: [64, 2], data: new Uint8Array(80) }] });
    const bytes = encodeGguf(contents);
    const t = parseGguf(bytes).tensors.get("blk.0.q4_1")!;
    expect(t.bytes).toBe(80);
    const path = tmpFile(bytes.subarray(0, t.fileOffset + t.bytes - 1));
    expectGgufError(() => readGguf(path), path, "past-end", /tensor data past end of file: 'blk.0.q4_1' needs bytes \d+\.\.\d+ of \d+/);
  });

  test("tensor data past the end of the file, misaligned offsets, duplicate names", () => {
    const past = withTensors((b) => (tensorInfo(b, "x", [8], KNOWN.F32, 32), 1), 32);
    expectGgufError(() => parseGguf(past, "p.gguf"), "p.gguf", "past-end", /tensor data past end of file: 'x'/);
    const far = withTensors((b) => (tensorInfo(b, "x", [8], KNOWN.F32, (1n << 64n) - 32n), 1), 32);
    expectGgufError(() => parseGguf(far, "p.gguf"), "p.gguf", "past-end", /tensor data past end of file/);
    const unknownFar = withTensors((b) => (tensorInfo(b, "x", [32], Q4_1, 64), 1), 32);
    expectGgufError(() => parseGguf(unknownFar, "p.gguf"), "p.gguf", "past-end", /tensor data past end of file/);
    // The data section itself is cut short: a valid file minus its last 40 bytes.
    const cut = valid.subarray(0, valid.byteLength - 40);
    expectGgufError(() => parseGguf(cut, "p.gguf"), "p.gguf", "past-end", /tensor data past end of file: 'extra'/);
    const mis = withTensors((b) => (tensorInfo(b, "x", [8], KNOWN.F32, 8), 1), 64);
    expectGgufError(() => parseGguf(mis, "p.gguf"), "p.gguf", "misaligned", /misaligned tensor offset 8 for 'x' \(alignment 32\)/);
    const dup = withTensors((b) => (tensorInfo(b, "x", [8], KNOWN.F32, 0), tensorInfo(b, "x", [8], KNOWN.F32, 32), 2), 64);
    expectGgufError(() => parseGguf(dup, "p.gguf"), "p.gguf", "duplicate", /duplicate tensor name 'x'/);
  });
});

describe("files over 4 GiB (one Bun mapping holds at most 4 GiB)", () => {
  // A sparse file: a filler tensor of nearly 4 GiB, then the norm straddling the 4 GiB mark,
  // the head past it, and an (overlapping) tensor of more than 4 GiB. Only the written pages
  // take disk space.
  test("header from the first window, tensors past it through their own windows", () => {
    const hidden = 256;
    const vocab = 5;
    const rng = new Rng(11);
    const head = synthBlocks(KNOWN.Q8_0, hidden * vocab, rng);
    const norm = new Uint8Array(synthF32(hidden, rng, 1, 0.2).buffer);
    const fillerValues = 2 ** 30 - 128; // F32: 4 GiB - 512 bytes
    const b = new ByteBuilder();
    b.raw(new TextEncoder().encode("GGUF")).u32(3).u64(4).u64(2);
    b.str("general.architecture").u32(ValueType.STRING).str("gemma3");
    b.str("gemma3.attention.layer_norm_rms_epsilon").u32(ValueType.F32).f32(1e-6);
    tensorInfo(b, "filler", [fillerValues], KNOWN.F32, 0);
    tensorInfo(b, "output_norm.weight", [hidden], KNOWN.F32, fillerValues * 4);
    tensorInfo(b, "token_embd.weight", [hidden, vocab], KNOWN.Q8_0, fillerValues * 4 + hidden * 4);
    tensorInfo(b, "big", [2 ** 30 + 2 ** 16], KNOWN.F32, 2 ** 17);
    b.pad(32);
    const header = b.bytes();
    const normAt = header.byteLength + fillerValues * 4;
    const headAt = normAt + hidden * 4;
    expect(normAt).toBeLessThan(2 ** 32);
    expect(normAt + hidden * 4).toBeGreaterThan(2 ** 32);
    const path = join(dir, "sparse-5g.gguf");
    const fd = openSync(path, "w");
    try {
      writeSync(fd, header, 0, header.byteLength, 0);
      writeSync(fd, norm, 0, norm.byteLength, normAt);
      writeSync(fd, head, 0, head.byteLength, headAt);
      ftruncateSync(fd, headAt + head.byteLength + 8 * 2 ** 20);
    } finally {
      closeSync(fd);
    }
    try {
      const g = readGguf(path);
      expect(g.fileBytes).toBe(headAt + head.byteLength + 8 * 2 ** 20);
      expect(g.mapping.byteLength).toBe(2 ** 32);
      const h = resolveHead(g);
      expect(tensorData(g, h.head)).toEqual(head);
      expect(tensorData(g, h.norm)).toEqual(norm);
      expect(tensorData(g, h.head).buffer).not.toBe(g.mapping.buffer);
      expect(h.softcap).toBeNull();
      expect(tensorData(g, g.tensors.get("filler")!).buffer).toBe(g.mapping.buffer);
      expectGgufError(() => tensorData(g, g.tensors.get("big")!), path, "io", /tensor 'big' needs a \d+-byte window; one window holds at most 4294967296/);
    } finally {
      rmSync(path);
    }
  });
});

describe("fuzz", () => {
  test("3000 seeded mutations of valid files either parse or throw GgufError", () => {
    const report = runFuzz(3000, 12345);
    const others = report.others.map((o) => `${o.ops.join(" ")}: ${String(o.error)}`);
    expect(others).toEqual([]);
    // The mutations must exercise both outcomes and several distinct error kinds.
    expect(report.counts.get("parsed") ?? 0).toBeGreaterThan(100);
    expect([...report.counts.keys()].filter((k) => k.startsWith("GgufError:")).length).toBeGreaterThanOrEqual(8);
  });

  test("the fuzz run is reproducible from its seed", () => {
    expect([...runFuzz(300, 99).counts]).toEqual([...runFuzz(300, 99).counts]);
  });
});

describe("gguf-py fixtures (scripts/make_gguf_fixtures.py)", () => {
  const fixtures = join(import.meta.dir, "fixtures", "gguf");
  const names = ["gguf-py-tied-q8_0", "gguf-py-untied-q6_k", "gguf-py-untied-f16"];

  interface SidecarArray {
    itemType: number;
    items: unknown[];
  }
  /** Our value in the sidecar's JSON conventions (64-bit integers as decimal strings). */
  function asJson(type: number, v: unknown): unknown {
    if (type === ValueType.ARRAY) {
      const a = v as GgufArray;
      return { itemType: a.itemType, items: Array.from(a.items as ArrayLike<unknown>, (x) => asJson(a.itemType, x)) };
    }
    if (typeof v === "bigint") return v.toString();
    return v;
  }

  for (const name of names) {
    test(`${name}: same metadata, tensors, types, shapes, offsets and bytes as gguf-py wrote`, async () => {
      const side = JSON.parse(readFileSync(join(fixtures, `${name}.json`), "utf8"));
      const g: GgufFile = readGguf(join(fixtures, `${name}.gguf`));
      expect(g.mapping.byteLength).toBe(side.fileBytes);
      expect(g.version).toBe(side.version);
      expect(g.alignment).toBe(side.alignment);
      expect([...g.metadata.keys()]).toEqual(side.metadata.map((m: { key: string }) => m.key));
      for (const m of side.metadata as { key: string; type: number; value: unknown }[]) {
        const got = g.metadata.get(m.key)!;
        expect(got.type as number).toBe(m.type);
        expect(asJson(got.type, got.value)).toEqual(m.value as SidecarArray);
      }
      expect([...g.tensors.keys()]).toEqual(side.tensors.map((t: { name: string }) => t.name));
      for (const t of side.tensors as { name: string; type: number; dims: number[]; bytes: number; dataOffset: number; sha256: string }[]) {
        const ours = g.tensors.get(t.name)!;
        expect(ours.typeId).toBe(t.type);
        expect(ours.dims).toEqual(t.dims);
        expect(ours.fileOffset - g.dataOffset).toBe(t.dataOffset);
        expect(ours.bytes).toBe(t.bytes);
        const data = g.mapping.subarray(ours.fileOffset, ours.fileOffset + t.bytes);
        expect(new Bun.CryptoHasher("sha256").update(data).digest("hex")).toBe(t.sha256);
      }
      const h = resolveHead(g);
      const headName = side.tensors.some((t: { name: string }) => t.name === "output.weight") ? "output.weight" : "token_embd.weight";
      expect(h.head.name).toBe(headName);
      expect(h.head.tied).toBe(headName === "token_embd.weight");
      expect([h.hidden, h.vocab]).toEqual(side.tensors.find((t: { name: string }) => t.name === headName).dims);
    });
  }

  test("the native reference decoder agrees with gguf-py's dequantize on every fixture tensor", () => {
    let checked = 0;
    for (const name of names) {
      const side = JSON.parse(readFileSync(join(fixtures, `${name}.json`), "utf8"));
      const g = readGguf(join(fixtures, `${name}.gguf`));
      for (const t of side.tensors as { name: string; type: number; dequantF32Sha256?: string }[]) {
        if (t.dequantF32Sha256 === undefined || formatInfo(t.type) === undefined) continue;
        const values = dequantize(t.type, tensorData(g, g.tensors.get(t.name)!));
        expect({ tensor: `${name}/${t.name}`, sha256: new Bun.CryptoHasher("sha256").update(new Uint8Array(values.buffer)).digest("hex") }).toEqual({
          tensor: `${name}/${t.name}`,
          sha256: t.dequantF32Sha256,
        });
        checked++;
      }
    }
    expect(checked).toBe(8);
  });

  test("our writer's copy of a fixture reads back identically", () => {
    const g = readGguf(join(fixtures, "gguf-py-untied-q6_k.gguf"));
    const copy = encodeGguf({
      metadata: g.metadata,
      tensors: [...g.tensors.values()].map((t) => ({ name: t.name, typeId: t.typeId, dims: t.dims, data: tensorData(g, t) })),
    });
    // Same layout rules as gguf-py: the whole file is byte-identical.
    expect(copy).toEqual(new Uint8Array(g.mapping));
  });
});

test("the package exports a GGUF file's header only: no view of its read-only pages", async () => {
  const index = await import("../src/index.ts");
  expect("readGguf" in index).toBe(false);
  const dir = mkdtempSync(join(tmpdir(), "lmhead-header-"));
  try {
    const path = join(dir, "header.gguf");
    writeGguf(path, { metadata: [["general.architecture", meta.str("gemma4")]], tensors: [{ name: "t", dims: [32], typeId: 0, data: new Uint8Array(128) }] });
    const header = index.readGgufHeader(path);
    expect(header.tensors.has("t")).toBe(true);
    expect("mapping" in header).toBe(false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
