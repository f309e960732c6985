/**
 * From a GGUF file (or the built-in default artifact) to MlxModelWeights, zero-copy:
 * the file is memory-mapped, each mapping is wrapped once as a device buffer, and the
 * norm and head are views into it at their tensor offsets (on Metal this becomes
 * newBufferWithBytesNoCopy over the page-aligned mapping, with the same views).
 */
import { defaultArtifactPath } from "./artifact/default.ts";
import { readGguf, tensorData } from "./artifact/gguf.ts";
import { resolveHead, type HeadOptions } from "./artifact/head.ts";
import { dequantize, formatInfo } from "./formats.ts";
import { LmheadError } from "./errors.ts";
import { MlxModelWeights } from "./head.ts";
import type { MlxBuffer, MlxDevice } from "./runtime.ts";

/** The token embedding table, for hidden-row sources that start from a token. */
export interface EmbeddingTable {
  vocab: number;
  hidden: number;
  typeId: number;
  /**
   * Row `token`, decoded and unscaled (Gemma's √hidden belongs to the caller's gather): into
   * `out` (hidden values) when given and the table must decode, so a caller can reuse one array.
   */
  row(token: number, out?: Float32Array): Float32Array;
}

export interface Model extends Disposable {
  weights: MlxModelWeights;
  embedding: EmbeddingTable;
  path: string;
  arch: string;
  tied: boolean;
}

/** Loads the head of `path`, or of the built-in default artifact when path is null. */
export async function loadModel(device: MlxDevice, path: string | null, opts: HeadOptions = {}): Promise<Model> {
  const file = path ?? (await defaultArtifactPath());
  const gguf = readGguf(file);
  const resolved = resolveHead(gguf, opts);
  const buffers: MlxBuffer[] = [];
  const wrapped = new Map<ArrayBufferLike, MlxBuffer>();
  /** A view of a tensor inside its (page-aligned) mapping, wrapping each mapping once. */
  const tensorBuffer = (bytes: Uint8Array): MlxBuffer => {
    let mapping = wrapped.get(bytes.buffer);
    if (!mapping) {
      mapping = device.wrapHost(new Uint8Array(bytes.buffer));
      wrapped.set(bytes.buffer, mapping);
      buffers.push(mapping);
    }
    const view = mapping.view(bytes.byteOffset, bytes.byteLength);
    buffers.push(view);
    return view;
  };
  const weights = new MlxModelWeights(device, {
    hiddenSize: resolved.hidden,
    vocabSize: resolved.vocab,
    finalNorm: tensorBuffer(resolved.norm.bytes),
    head: tensorBuffer(resolved.head.bytes),
    headType: resolved.head.typeId,
    tied: resolved.head.tied,
    finalLogitSoftcapping: resolved.softcap,
    rmsNormEps: resolved.eps,
  });

  // The embedding is the head when tied; an untied file's token_embd of a type lmhead
  // cannot decode (or none at all) falls back to the head's rows.
  const embd = gguf.tensors.get("token_embd.weight");
  const usable = embd && formatInfo(embd.typeId) && embd.dims.length === 2 && embd.dims[0] === resolved.hidden;
  const table = usable ? { typeId: embd.typeId, bytes: tensorData(gguf, embd), vocab: embd.dims[1]! } : { ...resolved.head, vocab: resolved.vocab };
  const format = formatInfo(table.typeId)!;
  const rowBytes = (resolved.hidden / format.blockValues) * format.blockBytes;
  const embedding: EmbeddingTable = {
    vocab: table.vocab,
    hidden: resolved.hidden,
    typeId: table.typeId,
    row(token: number, out?: Float32Array): Float32Array {
      if (!Number.isInteger(token) || token < 0 || token >= table.vocab) throw new LmheadError("out_of_bounds", `token ${token} outside [0, ${table.vocab})`);
      return dequantize(table.typeId, table.bytes.subarray(token * rowBytes, (token + 1) * rowBytes), out);
    },
  };

  return {
    weights,
    embedding,
    path: file,
    arch: resolved.arch,
    tied: resolved.head.tied,
    [Symbol.dispose]() {
      weights[Symbol.dispose]();
      for (const b of buffers.reverse()) b.free();
    },
  };
}
