/** The block formats, as the native table (native/numerics/formats.zig) defines them. */
import { LmheadError } from "./errors.ts";
import { check, lib, nativeString } from "./native.ts";
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

const cache = new Map<number, FormatInfo | undefined>();

/** The format of a ggml type id, or undefined if lmhead does not know the type. */
export function formatInfo(typeId: number): FormatInfo | undefined {
  if (!Number.isInteger(typeId) || typeId < 0 || typeId > 0xffffffff) return undefined;
  if (cache.has(typeId)) return cache.get(typeId);
  const info = new Uint32Array(6);
  let known = true;
  const name = nativeString((dst, capacity, len) => {
    const status = lib.lmh_format_info(typeId, info, dst, capacity, len);
    if (status !== 0) known = false;
    return 0;
  }, "format info");
  const format = known
    ? {
        id: typeId,
        name,
        blockValues: info[0]!,
        blockBytes: info[1]!,
        dOffset: info[2]!,
        mOffset: info[3] === 0xffffffff ? null : info[3]!,
        head: info[4] === 1,
        tiedHead: info[5] === 1,
      }
    : undefined;
  cache.set(typeId, format);
  return format;
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
 * the native table. Throws when the type is unknown or `values` is not whole blocks.
 */
export function rowBytes(typeId: number, values: number): number {
  const format = formatInfo(typeId);
  if (!format) throw new LmheadError("unsupported", `unknown ggml type id ${typeId}`);
  if (!Number.isSafeInteger(values) || values < 0) throw new LmheadError("invalid_argument", `${values} ${format.name} values is not a non-negative integer`);
  if (values % format.blockValues !== 0) {
    throw new LmheadError("invalid_argument", `${values} values is not a whole number of ${format.name} blocks (${format.blockValues} values each)`);
  }
  const bytes = (values / format.blockValues) * format.blockBytes;
  if (!Number.isSafeInteger(bytes)) throw new LmheadError("overflow", `${values} ${format.name} values overflow a byte count`);
  return bytes;
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
