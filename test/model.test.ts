/** Artifacts end to end: a GGUF file on disk → loadModel (mapped, zero-copy) → head logits. */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGguf, tensorData } from "../src/artifact/gguf.ts";
import { Rng, synthBlocks, synthF32 } from "../src/artifact/synth.ts";
import { meta, writeGguf, type TensorSource } from "../src/artifact/writer.ts";
import { MlxDevice, dequantize, formatInfo, knownTypeIds, loadModel } from "../src/index.ts";
import { lastError, lib } from "../src/native.ts";
import { bits, buildHead, opaqueDevice, randomF32, rng } from "./support.ts";

const device = MlxDevice.open("cpu");
afterAll(() => device.close());
const dir = mkdtempSync(join(tmpdir(), "lmhead-model-"));
const hidden = 512;
const vocab = 97;

function writeHead(name: string, typeId: number, tied: boolean, seed: number): { path: string; head: Uint8Array; norm: Float32Array } {
  const random = new Rng(seed);
  const head = synthBlocks(typeId, hidden * vocab, random);
  const norm = synthF32(hidden, random, 1, 0.2);
  const tensors: TensorSource[] = [{ name: "output_norm.weight", typeId: 0, dims: [hidden], data: new Uint8Array(norm.buffer) }];
  tensors.push({ name: "token_embd.weight", typeId: tied ? typeId : 8, dims: [hidden, vocab], data: tied ? head : synthBlocks(8, hidden * vocab, random) });
  if (!tied) tensors.push({ name: "output.weight", typeId, dims: [hidden, vocab], data: head });
  const path = join(dir, name);
  writeGguf(path, {
    metadata: [
      ["general.architecture", meta.str("gemma4")],
      ["gemma4.attention.layer_norm_rms_epsilon", meta.f32(1e-6)],
      ["gemma4.final_logit_softcapping", meta.f32(30)],
    ],
    tensors,
  });
  return { path, head, norm };
}

describe("write → read → head, for every head type", () => {
  for (const typeId of knownTypeIds) {
    const format = formatInfo(typeId)!;
    for (const tied of format.tiedHead ? [false, true] : [false]) {
      test(`${format.name} ${tied ? "tied" : "untied"}: logits equal the head built from the same bytes in memory`, async () => {
        const written = writeHead(`${format.name}-${tied}.gguf`, typeId, tied, typeId + (tied ? 100 : 0));
        using model = await loadModel(device, written.path);
        expect(model.tied).toBe(tied);
        expect(model.weights.headType).toBe(typeId);
        const direct = buildHead(device, hidden, vocab, typeId, written.head, dequantize(typeId, written.head), written.norm, 30, tied);
        const n = 3;
        const rows = randomF32(n * hidden, rng(typeId), 2);
        expect(bits(model.weights.lmHeadBatched(rows, n).logits)).toEqual(bits(direct.weights.lmHeadBatched(rows, n).logits));
      });
    }
  }
});

test("the head is a view into the mapped file: no copy of the weights", async () => {
  const written = writeHead("view.gguf", 14, true, 5);
  using model = await loadModel(device, written.path);
  const gguf = readGguf(written.path);
  const mapped = tensorData(gguf, gguf.tensors.get("token_embd.weight")!);
  model.weights.head.withHostBytes((view: Uint8Array) => {
    expect(view.byteLength).toBe(written.head.byteLength);
    expect(view).toEqual(written.head);
  });
  // The tied head and the embedding table are the same bytes: the embedding row decodes what the head holds.
  expect(bits(model.embedding.row(3))).toEqual(bits(dequantize(14, mapped.subarray(3 * 420, 4 * 420))));
});

test("embedding rows are the table's stored rows decoded, tied or untied, loaded in place or copied, on a device that sees host memory or not", async () => {
  for (const tied of [true, false]) {
    const written = writeHead(`rows-${tied}.gguf`, 14, tied, 9);
    const gguf = readGguf(written.path);
    const table = tensorData(gguf, gguf.tensors.get("token_embd.weight")!);
    const typeId = tied ? 14 : 8;
    const stored = table.byteLength / vocab;
    for (const copy of [false, true]) {
      for (const d of [device, opaqueDevice(device)]) {
        using model = await loadModel(d, written.path, { copy });
        for (const token of [0, 3, vocab - 1]) {
          expect(bits(model.embedding.row(token))).toEqual(bits(dequantize(typeId, table.subarray(token * stored, (token + 1) * stored))));
        }
        expect(() => model.embedding.row(vocab)).toThrow(`token ${vocab} outside [0, ${vocab})`);
      }
    }
  }
});

test("a buffer over the read-only file lends a copy to the host, never its pages", async () => {
  const written = writeHead("lend.gguf", 8, true, 6);
  using model = await loadModel(device, written.path);
  expect(model.weights.head.readOnly).toBe(true);
  // A write through the lent bytes would fault on the read-only pages; it lands in a copy.
  model.weights.head.withHostBytes((bytes) => bytes.fill(0xff));
  model.weights.head.withHostBytes((bytes) => expect(Array.from(bytes)).toEqual(Array.from(written.head)));
  expect(lib.lmh_buffer_host_ptr(model.weights.head.handle, new BigUint64Array(1))).not.toBe(0);
  expect(lastError()).toContain("read-only view of a model file");
});

test("tied Q3_K is refused with a clear error naming the file", async () => {
  const path = writeHead("q3k-tied.gguf", 11, true, 9).path;
  expect(loadModel(device, path)).rejects.toThrow(/q3k-tied\.gguf.*Q3_K/);
});

describe("files written by the gguf package (llama.cpp's own writer)", () => {
  const fixtures = join(import.meta.dir, "fixtures", "gguf");
  for (const file of readdirSync(fixtures).filter((f) => f.endsWith(".gguf"))) {
    test(`${file}: the head equals the one computed from our writer's copy of the same tensors`, async () => {
      using theirs = await loadModel(device, join(fixtures, file));
      const gguf = readGguf(join(fixtures, file));
      const copy = join(dir, `copy-${file}`);
      writeGguf(copy, {
        metadata: [...gguf.metadata].filter(([key]) => key !== "general.alignment"),
        tensors: [...gguf.tensors.values()].map((t) => ({ name: t.name, typeId: t.typeId, dims: t.dims, data: tensorData(gguf, t) })),
      });
      using ours = await loadModel(device, copy);
      const n = 2;
      const rows = randomF32(n * theirs.weights.hiddenSize, rng(1), 2);
      const a = theirs.weights.lmHeadBatched(rows, n);
      expect(a.logits.some((v) => v !== 0)).toBe(true);
      expect(bits(a.logits)).toEqual(bits(ours.weights.lmHeadBatched(rows, n).logits));
    });
  }
});
