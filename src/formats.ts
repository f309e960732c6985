/** The block formats, as the native table (native/numerics/formats.zig) defines them. */
import { LmheadError } from "./errors.ts";
import { check, lastError, lib, nativeString } from "./native.ts";
import { expectTyped } from "./typed.ts";

export interface FormatInfo {
  /** ggml type id. */
  id: number;
  name: string;
  blockValues: number;
  blockBytes: number;
  /** Byte offset of the f16 super-scale inside a block (0 for dense types). */
  dOffset: number;
  /** Byte offset of the f16 min/dmin field, if the format has one. */
  mOffset: number | null;
  /** Admitted as an untied output head. */
  head: boolean;
  /** Admitted as a tied (token_embd) head. */
  tiedHead: boolean;
}

/** A ggml type id's table entry, or the native message saying why there is none. */
const cache = new Map<number, FormatInfo | string>();

function lookup(typeId: number): FormatInfo | string {
  if (!Number.isInteger(typeId) || typeId < 0 || typeId > 0xffffffff) return `ggml type id ${typeId} is not a u32`;
  const cached = cache.get(typeId);
  if (cached !== undefined) return cached;
  const info = new Uint32Array(6);
  let problem: string | null = null;
  const name = nativeString((dst, capacity, len) => {
    if (lib.lmh_format_info(typeId, info, dst, capacity, len) !== 0) problem = lastError();
    return 0;
  }, "format info");
  const entry =
    problem ??
    ({
      id: typeId,
      name,
      blockValues: info[0]!,
      blockBytes: info[1]!,
      dOffset: info[2]!,
      mOffset: info[3] === 0xffffffff ? null : info[3]!,
      head: info[4] === 1,
      tiedHead: info[5] === 1,
    } satisfies FormatInfo);
  cache.set(typeId, entry);
  return entry;
}

/**
 * Any type ggml defines, including those lmhead only skips over in a file (Q4_1, I32, ...:
 * `head` and `tiedHead` false); undefined for unknown and removed ids.
 */
export function typeInfo(typeId: number): FormatInfo | undefined {
  const entry = lookup(typeId);
  return typeof entry === "string" ? undefined : entry;
}

/** The format of a type lmhead decodes (exactly the types admitted as a head), or undefined. */
export function formatInfo(typeId: number): FormatInfo | undefined {
  const entry = typeInfo(typeId);
  return entry?.head ? entry : undefined;
}

/** Every type lmhead knows, by ggml type id (ggml ids are below 64). */
export const knownTypeIds: readonly number[] = Array.from({ length: 64 }, (_, id) => id).filter(
  (id) => formatInfo(id) !== undefined,
);

/** The type id of a ggml type name such as "Q6_K" (case-insensitive). */
export function typeIdOf(name: string): number {
  const id = knownTypeIds.find((t) => formatInfo(t)!.name.toLowerCase() === name.toLowerCase());
  if (id === undefined) throw new LmheadError("invalid_argument", `unknown type ${name}; known: ${knownTypeIds.map((t) => formatInfo(t)!.name).join(", ")}`);
  return id;
}

/**
 * Bytes of `values` consecutive values of ggml type typeId (a row, or a whole tensor), from
 * the native table, for any type ggml defines (decoded or only skipped). Throws when the type
 * is unknown or removed (the native message says which) or `values` is not whole blocks.
 */
export function rowBytes(typeId: number, values: number): number {
  const format = lookup(typeId);
  if (typeof format === "string") throw new LmheadError("unsupported", format);
  if (!Number.isSafeInteger(values) || values < 0) throw new LmheadError("invalid_argument", `${values} ${format.name} values is not a non-negative integer`);
  if (values % format.blockValues !== 0) {
    throw new LmheadError("invalid_argument", `${values} values is not a whole number of ${format.name} blocks (${format.blockValues} values each)`);
  }
  const bytes = (values / format.blockValues) * format.blockBytes;
  if (!Number.isSafeInteger(bytes)) throw new LmheadError("overflow", `${values} ${format.name} values overflow a byte count`);
  return bytes;
}

/** The native head admission predicate (type, tied, block multiple, exact byte size): throws its message. */
export function admitHead(typeId: number, hidden: number, vocab: number, weightBytes: number, tied: boolean): void {
  check(lib.lmh_head_admit(typeId, hidden, vocab, weightBytes, tied ? 1 : 0), "head admission");
}

/** Decodes whole blocks of ggml type typeId with the reference decoder (the kernels' own), into `out` when given. */
export function dequantize(typeId: number, bytes: Uint8Array, out?: Float32Array): Float32Array {
  expectTyped(bytes, "Uint8Array", "dequantize: bytes");
  if (out !== undefined) expectTyped(out, "Float32Array", "dequantize: out");
  const format = formatInfo(typeId);
  if (!format) throw new LmheadError("unsupported", `unknown ggml type id ${typeId}`);
  const values = (bytes.byteLength / format.blockBytes) * format.blockValues;
  const dst = out ?? new Float32Array(Number.isInteger(values) ? values : 0);
  check(lib.lmh_dequantize(typeId, bytes.byteLength ? bytes : null, bytes.byteLength, dst.length ? dst : null, dst.length), `dequantize ${format.name}`);
  return dst;
}
