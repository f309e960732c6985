/**
 * From a GGUF file (or the built-in default artifact) to MlxModelWeights. By default zero-copy:
 * the file is mapped read-only by the native library and the norm, the head and the embedding
 * are device buffers over it (on Metal this becomes newBufferWithBytesNoCopy over the mapping).
 *
 * A mapped file must not change while it is loaded: model files are replaced by rename, never
 * truncated or rewritten in place (reading a truncated file's lost pages kills the process with
 * SIGBUS). Every head call and embedding row checks the file first and fails cleanly if it
 * changed; `copy: true` reads the weights into memory the process owns instead.
 */
import { defaultArtifactPath } from "./artifact/default.ts";
import type { MappedFile } from "./artifact/file.ts";
import { openGgufFile, parseMapped, type GgufTensor } from "./artifact/gguf.ts";
import { resolveHead, type HeadOptions } from "./artifact/head.ts";
import { dequantize, rowBytes } from "./formats.ts";
import { LmheadError } from "./errors.ts";
import { MlxModelWeights, type HeadWeights } from "./head.ts";
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

export interface LoadOptions extends HeadOptions {
  /**
   * Copy the weights into memory the process owns (about the head's size), so that the file may
   * change or go once loaded. Default false: the weights are read from the read-only mapping.
   */
  copy?: boolean;
}

/** Loads the head of `path`, or of the built-in default artifact when path is null. */
export async function loadModel(device: MlxDevice, path: string | null, opts: LoadOptions = {}): Promise<Model> {
  const file = openGgufFile(path ?? (await defaultArtifactPath()));
  const buffers: MlxBuffer[] = [];
  let weights: MlxModelWeights | undefined;
  try {
    const resolved = resolveHead(parseMapped(file), opts);
    const buffer = (t: GgufTensor): MlxBuffer => {
      const b = opts.copy ? copyTensor(device, file, t) : file.wrap(device, t.fileOffset, t.bytes);
      buffers.push(b);
      return b;
    };
    const head = buffer(resolved.head);
    const spec: HeadWeights = {
      hiddenSize: resolved.hidden,
      vocabSize: resolved.vocab,
      finalNorm: buffer(resolved.norm),
      head,
      headType: resolved.head.typeId,
      tied: resolved.head.tied,
      finalLogitSoftcapping: resolved.softcap,
      rmsNormEps: resolved.eps,
    };
    // Over the mapping, every session and host read checks natively that the file is unchanged.
    weights = new MlxModelWeights(device, spec);
    const { tensor, format, vocab } = resolved.embedding;
    const table = tensor === resolved.head ? head : buffer(tensor);
    const embedding = embeddingTable(table, format.id, resolved.hidden, vocab);
    if (opts.copy) file.close();
    return modelOf(weights, embedding, buffers, file, resolved);
  } catch (e) {
    weights?.[Symbol.dispose]();
    for (const b of buffers.reverse()) b.free();
    file.close();
    throw e;
  }
}

/** The tensor's bytes in a device buffer the process owns, read in windows of at most 256 MiB. */
function copyTensor(device: MlxDevice, file: MappedFile, t: GgufTensor): MlxBuffer {
  const copy = device.allocBuffer(t.bytes);
  const step = 2 ** 28;
  for (let at = 0; at < t.bytes; at += step) file.read(t.fileOffset + at, Math.min(step, t.bytes - at), (view) => copy.write(view, at));
  return copy;
}

function embeddingTable(table: MlxBuffer, typeId: number, hidden: number, vocab: number): EmbeddingTable {
  // One row's stored bytes, reused: a decode loop asks for a row per slot per step.
  const stored = new Uint8Array(rowBytes(typeId, hidden));
  return {
    vocab,
    hidden,
    typeId,
    row(token: number, out?: Float32Array): Float32Array {
      if (!Number.isInteger(token) || token < 0 || token >= vocab) throw new LmheadError("out_of_bounds", `token ${token} outside [0, ${vocab})`);
      table.readInto(stored, token * stored.byteLength); // fails cleanly if the file changed in place
      return dequantize(typeId, stored, out);
    },
  };
}

function modelOf(weights: MlxModelWeights, embedding: EmbeddingTable, buffers: MlxBuffer[], file: MappedFile, head: { file: string; arch: string; head: { tied: boolean } }): Model {
  let disposed = false;
  return {
    weights,
    embedding,
    path: head.file,
    arch: head.arch,
    tied: head.head.tied,
    [Symbol.dispose]() {
      if (disposed) return;
      disposed = true;
      weights[Symbol.dispose]();
      for (const b of buffers.reverse()) b.free();
      file.close();
    },
  };
}
