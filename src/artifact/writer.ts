// GGUF v3 writer for tests, fixtures and the default artifact.
//
// The header (metadata + tensor infos) is built in memory; tensor data is either a small
// Uint8Array or a stream of chunks, written to the file as it comes, so a 600 MB tensor never
// exists as one JS buffer. Tensor offsets follow gguf-py's layout: each tensor starts at the
// next multiple of the alignment after the previous one, and the data section starts aligned.
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { typeInfo } from "../formats.ts";
import { tensorBytes, ValueType, type GgufArray, type GgufValue } from "./gguf.ts";

/** Growable little-endian byte buffer (also used by tests to craft raw, even broken, files). */
export class ByteBuilder {
  private buf = new Uint8Array(256);
  private dv = new DataView(this.buf.buffer);
  length = 0;

  /** Claims n bytes and returns their offset. It may replace buf/dv: call it before using them. */
  private reserve(n: number): number {
    if (this.length + n > this.buf.byteLength) {
      const bigger = new Uint8Array(Math.max(this.buf.byteLength * 2, this.length + n));
      bigger.set(this.buf.subarray(0, this.length));
      this.buf = bigger;
      this.dv = new DataView(bigger.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }
  u8(v: number): this {
    const at = this.reserve(1);
    this.dv.setUint8(at, v);
    return this;
  }
  i8(v: number): this {
    const at = this.reserve(1);
    this.dv.setInt8(at, v);
    return this;
  }
  u16(v: number): this {
    const at = this.reserve(2);
    this.dv.setUint16(at, v, true);
    return this;
  }
  i16(v: number): this {
    const at = this.reserve(2);
    this.dv.setInt16(at, v, true);
    return this;
  }
  u32(v: number): this {
    const at = this.reserve(4);
    this.dv.setUint32(at, v, true);
    return this;
  }
  i32(v: number): this {
    const at = this.reserve(4);
    this.dv.setInt32(at, v, true);
    return this;
  }
  f32(v: number): this {
    const at = this.reserve(4);
    this.dv.setFloat32(at, v, true);
    return this;
  }
  f64(v: number): this {
    const at = this.reserve(8);
    this.dv.setFloat64(at, v, true);
    return this;
  }
  u64(v: bigint | number): this {
    const at = this.reserve(8);
    this.dv.setBigUint64(at, BigInt(v), true);
    return this;
  }
  i64(v: bigint | number): this {
    const at = this.reserve(8);
    this.dv.setBigInt64(at, BigInt(v), true);
    return this;
  }
  raw(bytes: Uint8Array): this {
    const at = this.reserve(bytes.byteLength); // may replace this.buf
    this.buf.set(bytes, at);
    return this;
  }
  /** GGUF string: u64 byte length, then UTF-8 bytes. */
  str(s: string): this {
    const b = new TextEncoder().encode(s);
    return this.u64(b.byteLength).raw(b);
  }
  /** Zero bytes up to the next multiple of `alignment`. */
  pad(alignment: number): this {
    this.reserve(padBytes(this.length, alignment)); // new bytes are already zero
    return this;
  }
  bytes(): Uint8Array<ArrayBuffer> {
    return this.buf.slice(0, this.length);
  }
}

function padBytes(offset: number, alignment: number): number {
  return (alignment - (offset % alignment)) % alignment;
}

/** Metadata value constructors, so call sites name the stored type. */
export const meta = {
  u8: (v: number): GgufValue => ({ type: ValueType.U8, value: v }),
  i8: (v: number): GgufValue => ({ type: ValueType.I8, value: v }),
  u16: (v: number): GgufValue => ({ type: ValueType.U16, value: v }),
  i16: (v: number): GgufValue => ({ type: ValueType.I16, value: v }),
  u32: (v: number): GgufValue => ({ type: ValueType.U32, value: v }),
  i32: (v: number): GgufValue => ({ type: ValueType.I32, value: v }),
  f32: (v: number): GgufValue => ({ type: ValueType.F32, value: v }),
  f64: (v: number): GgufValue => ({ type: ValueType.F64, value: v }),
  u64: (v: bigint): GgufValue => ({ type: ValueType.U64, value: v }),
  i64: (v: bigint): GgufValue => ({ type: ValueType.I64, value: v }),
  bool: (v: boolean): GgufValue => ({ type: ValueType.BOOL, value: v }),
  str: (v: string): GgufValue => ({ type: ValueType.STRING, value: v }),
  array: (a: GgufArray): GgufValue => ({ type: ValueType.ARRAY, value: a }),
};

const INT_RANGES: Record<number, [number, number]> = {
  [ValueType.U8]: [0, 0xff],
  [ValueType.I8]: [-0x80, 0x7f],
  [ValueType.U16]: [0, 0xffff],
  [ValueType.I16]: [-0x8000, 0x7fff],
  [ValueType.U32]: [0, 0xffffffff],
  [ValueType.I32]: [-0x80000000, 0x7fffffff],
};

function writeScalar(b: ByteBuilder, type: number, v: unknown, key: string): void {
  const bad = (): never => {
    throw new Error(`metadata '${key}': ${String(v)} cannot be stored as value type ${type}`);
  };
  const range = INT_RANGES[type];
  if (range !== undefined) {
    if (typeof v !== "number" || !Number.isInteger(v) || v < range[0] || v > range[1]) bad();
  }
  switch (type) {
    case ValueType.U8:
      return void b.u8(v as number);
    case ValueType.I8:
      return void b.i8(v as number);
    case ValueType.U16:
      return void b.u16(v as number);
    case ValueType.I16:
      return void b.i16(v as number);
    case ValueType.U32:
      return void b.u32(v as number);
    case ValueType.I32:
      return void b.i32(v as number);
    case ValueType.F32:
      if (typeof v !== "number") bad();
      return void b.f32(v as number);
    case ValueType.F64:
      if (typeof v !== "number") bad();
      return void b.f64(v as number);
    case ValueType.U64:
      if (typeof v !== "bigint" || v < 0n || v >= 1n << 64n) bad();
      return void b.u64(v as bigint);
    case ValueType.I64:
      if (typeof v !== "bigint" || v < -(1n << 63n) || v >= 1n << 63n) bad();
      return void b.i64(v as bigint);
    case ValueType.BOOL:
      if (typeof v !== "boolean") bad();
      return void b.u8(v ? 1 : 0);
    case ValueType.STRING:
      if (typeof v !== "string") bad();
      return void b.str(v as string);
    case ValueType.ARRAY:
      return writeArray(b, v as GgufArray, key);
  }
  bad();
}

function writeArray(b: ByteBuilder, a: GgufArray, key: string): void {
  b.u32(a.itemType).u64(a.items.length);
  for (const item of a.items as Iterable<unknown>) {
    writeScalar(b, a.itemType, item, key);
  }
}

/** Tensor data: bytes in memory, or a byte count plus a chunk stream for big tensors. */
export type TensorData = Uint8Array | { bytes: number; chunks: () => Iterable<Uint8Array> };

export interface TensorSource {
  name: string;
  typeId: number;
  /** GGUF `ne`, fastest-varying first: a head is [hidden, vocab]. */
  dims: readonly number[];
  data: TensorData;
}

export interface GgufContents {
  /** Written in this order. A `general.alignment` entry (u32, power of two) sets the alignment. */
  metadata: Iterable<readonly [string, GgufValue]>;
  tensors: readonly TensorSource[];
}

function dataBytes(d: TensorData): number {
  return d instanceof Uint8Array ? d.byteLength : d.bytes;
}

/** Checks a tensor's declared data size against its type and dims (the native ggml type table). */
function checkTensor(t: TensorSource): void {
  let want: number;
  try {
    want = tensorBytes(t.typeId, t.dims);
  } catch (e) {
    throw new Error(`tensor '${t.name}': ${(e as Error).message}`);
  }
  if (dataBytes(t.data) !== want) {
    throw new Error(`tensor '${t.name}': ${dataBytes(t.data)} data bytes given, ${typeInfo(t.typeId)!.name} ${JSON.stringify(t.dims)} needs ${want}`);
  }
}

/** Header bytes (magic through the padding before the data section), plus layout facts. */
function encodeHeader(contents: GgufContents): { header: Uint8Array; alignment: number; totalBytes: number } {
  const entries = [...contents.metadata];
  let alignment = 32;
  for (const [key, v] of entries) {
    if (key !== "general.alignment") continue;
    const a = v.value as number;
    if (v.type !== ValueType.U32 || a === 0 || (a & (a - 1)) !== 0) throw new Error(`general.alignment must be a u32 power of two`);
    alignment = a;
  }
  const names = new Set<string>();
  for (const t of contents.tensors) {
    if (names.has(t.name)) throw new Error(`duplicate tensor name '${t.name}'`);
    names.add(t.name);
    checkTensor(t);
  }
  const b = new ByteBuilder();
  b.raw(new TextEncoder().encode("GGUF")).u32(3).u64(contents.tensors.length).u64(entries.length);
  for (const [key, v] of entries) {
    b.str(key).u32(v.type);
    writeScalar(b, v.type, v.value, key);
  }
  let relOffset = 0;
  for (const t of contents.tensors) {
    b.str(t.name).u32(t.dims.length);
    for (const d of t.dims) b.u64(d);
    b.u32(t.typeId).u64(relOffset);
    relOffset += dataBytes(t.data) + padBytes(dataBytes(t.data), alignment);
  }
  b.pad(alignment);
  return { header: b.bytes(), alignment, totalBytes: b.length + relOffset };
}

function* chunksOf(d: TensorData): Iterable<Uint8Array> {
  if (d instanceof Uint8Array) yield d;
  else yield* d.chunks();
}

/** Whole file in memory: for small files (tests, fuzzing). */
export function encodeGguf(contents: GgufContents): Uint8Array<ArrayBuffer> {
  const { header, alignment, totalBytes } = encodeHeader(contents);
  const out = new Uint8Array(totalBytes);
  out.set(header);
  let at = header.byteLength;
  for (const t of contents.tensors) {
    const start = at;
    for (const chunk of chunksOf(t.data)) {
      out.set(chunk, at);
      at += chunk.byteLength;
    }
    if (at - start !== dataBytes(t.data)) throw new Error(`tensor '${t.name}': chunks gave ${at - start} bytes, declared ${dataBytes(t.data)}`);
    at += padBytes(at - start, alignment);
  }
  return out;
}

/** Bytes the file for `contents` will have. */
export function ggufFileBytes(contents: GgufContents): number {
  return encodeHeader(contents).totalBytes;
}

export interface WriteOptions {
  /** Called after each chunk with bytes written so far and the final file size. */
  onProgress?: (writtenBytes: number, totalBytes: number) => void;
}

/** Streams a GGUF file to `path` (created or replaced in place; callers wanting atomicity write a temp file and rename). Returns its size in bytes. */
export function writeGguf(path: string, contents: GgufContents, opts: WriteOptions = {}): number {
  const { header, alignment, totalBytes } = encodeHeader(contents);
  const fd = openSync(path, "w");
  try {
    let written = 0;
    const put = (bytes: Uint8Array): void => {
      let done = 0;
      while (done < bytes.byteLength) done += writeSync(fd, bytes, done, bytes.byteLength - done);
      written += bytes.byteLength;
    };
    const zeros = new Uint8Array(alignment);
    put(header);
    for (const t of contents.tensors) {
      const start = written;
      for (const chunk of chunksOf(t.data)) {
        put(chunk);
        opts.onProgress?.(written, totalBytes);
      }
      if (written - start !== dataBytes(t.data)) throw new Error(`tensor '${t.name}': chunks gave ${written - start} bytes, declared ${dataBytes(t.data)}`);
      put(zeros.subarray(0, padBytes(written - start, alignment)));
    }
    fsyncSync(fd);
    return written;
  } finally {
    closeSync(fd);
  }
}
