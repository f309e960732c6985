// GGUF reader (versions 2 and 3, little-endian), after ggml docs/gguf.md.
//
// The file is mapped read-only by the native library (file.ts) and parsed in place: tensor
// data never enters the JS heap. One JS window holds at most 4 GiB, so for bigger files (real
// Gemma 4 GGUFs are ~16 GB) the header is parsed from the first 4 GiB and a tensor past that
// gets its own window when it is asked for; device buffers over the file have no such limit.
//
// Every count, length and offset read from the file is checked against the bytes that remain
// before it is used, so a damaged or hostile file ends in a GgufError, never in a crash, an
// out-of-bounds read or an allocation the file's own size does not bound.
//
// Every tensor's extent is checked against the file, whatever its type: the native ggml type
// table knows the block size of every type ggml defines, including those lmhead only skips
// (Q4_1, I32, ...). An invalid or removed type id is an error, as in gguf-py and llama.cpp.
import { LmheadError } from "../errors.ts";
import { rowBytes } from "../formats.ts";
import { MAX_WINDOW_BYTES, MappedFile } from "./file.ts";

export type GgufErrorKind =
  | "io"
  | "truncated"
  | "magic"
  | "version"
  | "count"
  | "string"
  | "value-type"
  | "value"
  | "nesting"
  | "duplicate"
  | "alignment"
  | "dims"
  | "type"
  | "misaligned"
  | "past-end";

/** Any problem with a GGUF file's structure. `file` is the path (or a label for in-memory bytes). */
export class GgufError extends LmheadError {
  readonly file: string;
  readonly kind: GgufErrorKind;
  constructor(file: string, kind: GgufErrorKind, problem: string) {
    super("bad_artifact", `${file}: ${problem}`);
    this.file = file;
    this.kind = kind;
  }
}

/** GGUF metadata value type ids. */
export const ValueType = {
  U8: 0,
  I8: 1,
  U16: 2,
  I16: 3,
  U32: 4,
  I32: 5,
  F32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  U64: 10,
  I64: 11,
  F64: 12,
} as const;
export type ValueType = (typeof ValueType)[keyof typeof ValueType];

export type GgufArrayItems =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array
  | boolean[]
  | string[]
  | GgufArray[];

/** An array value: numeric items come back as typed arrays (copies, so alignment never matters). */
export interface GgufArray {
  itemType: ValueType;
  items: GgufArrayItems;
}

/** A metadata value with its stored type: u64/i64 are bigint, other numbers are number. */
export interface GgufValue {
  type: ValueType;
  value: number | bigint | boolean | string | GgufArray;
}

export interface GgufTensor {
  name: string;
  typeId: number;
  /** GGUF `ne`: fastest-varying dimension first (a head is [hidden, vocab]). */
  dims: number[];
  /** Absolute byte offset of the data in the file. */
  fileOffset: number;
  /** Data size in bytes. */
  bytes: number;
}

export interface GgufFile {
  /** Path of the file, or the label given to parseGguf. */
  file: string;
  /** Size of the whole file in bytes. */
  fileBytes: number;
  version: number;
  alignment: number;
  metadata: Map<string, GgufValue>;
  /** In file order. */
  tensors: Map<string, GgufTensor>;
  /** Absolute byte offset of the tensor data section. */
  dataOffset: number;
  /**
   * The file's first min(fileBytes, 4 GiB) bytes (all of it for files up to 4 GiB), read-only:
   * it backs the metadata and the tensors in that range. Every window keeps its mapping alive.
   */
  mapping: Uint8Array;
}

const MAGIC = 0x46554747; // "GGUF" read as little-endian u32
const DEFAULT_ALIGNMENT = 32;
const MAX_DIMS = 4;
// Arrays of arrays recurse; a file could nest thousands deep in a few kilobytes.
const MAX_ARRAY_DEPTH = 8;
// Smallest encodings, used to bound counts by the bytes that remain.
const MIN_KV_BYTES = 8 + 4 + 1; // key length, value type, a 1-byte value
const MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8; // name length, n_dims (0), type, offset
// No ggml type stores fewer than 1 bit per value, so a tensor with more values than 8× the
// file's bytes cannot be in the file, whatever its type (this also keeps counts below 2^53).
const MAX_VALUES_PER_FILE_BYTE = 8;

const FIXED_VALUE_BYTES: Record<number, number> = {
  [ValueType.U8]: 1,
  [ValueType.I8]: 1,
  [ValueType.U16]: 2,
  [ValueType.I16]: 2,
  [ValueType.U32]: 4,
  [ValueType.I32]: 4,
  [ValueType.F32]: 4,
  [ValueType.BOOL]: 1,
  [ValueType.U64]: 8,
  [ValueType.I64]: 8,
  [ValueType.F64]: 8,
};

function minValueBytes(type: number): number {
  if (type === ValueType.STRING) return 8;
  if (type === ValueType.ARRAY) return 12;
  return FIXED_VALUE_BYTES[type];
}

const utf8 = new TextDecoder("utf-8");
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/** Sequential little-endian reader that turns every out-of-range read into a GgufError. */
class Cursor {
  pos = 0;
  /** What is being read, for "truncated reading …" messages. */
  what = "header";
  private readonly dv: DataView;
  constructor(
    readonly bytes: Uint8Array,
    readonly file: string,
    /** The whole file's size; more than bytes.byteLength when only a first window is mapped. */
    readonly fileBytes: number,
  ) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  get remaining(): number {
    return this.bytes.byteLength - this.pos;
  }
  fail(kind: GgufErrorKind, problem: string): never {
    throw new GgufError(this.file, kind, problem);
  }
  need(n: number): number {
    if (n > this.remaining) {
      if (this.fileBytes > this.bytes.byteLength) {
        this.fail("io", `reading ${this.what}: the header does not fit in the first ${this.bytes.byteLength} bytes, all lmhead maps at once`);
      }
      this.fail("truncated", `truncated reading ${this.what} (at byte ${this.pos})`);
    }
    const at = this.pos;
    this.pos += n;
    return at;
  }
  u8(): number {
    return this.dv.getUint8(this.need(1));
  }
  i8(): number {
    return this.dv.getInt8(this.need(1));
  }
  u16(): number {
    return this.dv.getUint16(this.need(2), true);
  }
  i16(): number {
    return this.dv.getInt16(this.need(2), true);
  }
  u32(): number {
    return this.dv.getUint32(this.need(4), true);
  }
  i32(): number {
    return this.dv.getInt32(this.need(4), true);
  }
  f32(): number {
    return this.dv.getFloat32(this.need(4), true);
  }
  f64(): number {
    return this.dv.getFloat64(this.need(8), true);
  }
  u64(): bigint {
    return this.dv.getBigUint64(this.need(8), true);
  }
  i64(): bigint {
    return this.dv.getBigInt64(this.need(8), true);
  }
  /** A u64 count of items that each take at least `minItemBytes` of the rest of the file. */
  count(label: string, minItemBytes: number): number {
    const n = this.u64();
    if (n > BigInt(Math.floor(this.remaining / minItemBytes))) {
      this.fail("count", `${label} ${n} cannot fit in the ${this.remaining} bytes left in the file`);
    }
    return Number(n);
  }
  /** Raw bytes of a GGUF string (u64 length, then UTF-8 bytes). */
  stringBytes(label: string): Uint8Array {
    const n = this.u64();
    if (n > BigInt(this.remaining)) {
      this.fail("string", `${label}: string length ${n} exceeds file (${this.remaining} bytes left)`);
    }
    const at = this.need(Number(n));
    return this.bytes.subarray(at, at + Number(n));
  }
  string(label: string): string {
    return utf8.decode(this.stringBytes(label));
  }
  /** Keys and tensor names must be exact, so invalid UTF-8 there is an error, not U+FFFD. */
  name(label: string): string {
    const raw = this.stringBytes(label);
    try {
      return utf8Strict.decode(raw);
    } catch {
      return this.fail("string", `${label} is not valid UTF-8`);
    }
  }
}

function readScalar(c: Cursor, type: number, label: string): number | bigint | boolean | string {
  switch (type) {
    case ValueType.U8:
      return c.u8();
    case ValueType.I8:
      return c.i8();
    case ValueType.U16:
      return c.u16();
    case ValueType.I16:
      return c.i16();
    case ValueType.U32:
      return c.u32();
    case ValueType.I32:
      return c.i32();
    case ValueType.F32:
      return c.f32();
    case ValueType.F64:
      return c.f64();
    case ValueType.U64:
      return c.u64();
    case ValueType.I64:
      return c.i64();
    case ValueType.BOOL: {
      const b = c.u8();
      if (b > 1) c.fail("value", `${label}: bool byte ${b} is neither 0 nor 1`);
      return b === 1;
    }
    case ValueType.STRING:
      return c.string(label);
  }
  return c.fail("value-type", `${label}: unknown value type ${type}`);
}

/** Copies `n` fixed-size little-endian items into a fresh (aligned) typed array. */
function readNumericArray(c: Cursor, itemType: number, n: number): GgufArrayItems {
  const itemBytes = FIXED_VALUE_BYTES[itemType];
  const at = c.need(n * itemBytes);
  const copy = c.bytes.slice(at, at + n * itemBytes);
  const buf = copy.buffer;
  switch (itemType) {
    case ValueType.U8:
      return copy;
    case ValueType.I8:
      return new Int8Array(buf);
    case ValueType.U16:
      return new Uint16Array(buf);
    case ValueType.I16:
      return new Int16Array(buf);
    case ValueType.U32:
      return new Uint32Array(buf);
    case ValueType.I32:
      return new Int32Array(buf);
    case ValueType.F32:
      return new Float32Array(buf);
    case ValueType.F64:
      return new Float64Array(buf);
    case ValueType.U64:
      return new BigUint64Array(buf);
    default:
      return new BigInt64Array(buf);
  }
}

function readArray(c: Cursor, label: string, depth: number): GgufArray {
  if (depth > MAX_ARRAY_DEPTH) c.fail("nesting", `${label}: arrays nested deeper than ${MAX_ARRAY_DEPTH}`);
  const itemType = c.u32();
  const minBytes = minValueBytes(itemType);
  if (minBytes === undefined) c.fail("value-type", `${label}: unknown value type ${itemType} in array`);
  const n = c.count(`${label}: array length`, minBytes);
  if (itemType === ValueType.STRING) {
    const items: string[] = [];
    for (let i = 0; i < n; i++) items.push(c.string(label));
    return { itemType, items };
  }
  if (itemType === ValueType.BOOL) {
    const items: boolean[] = [];
    for (let i = 0; i < n; i++) items.push(readScalar(c, itemType, label) as boolean);
    return { itemType, items };
  }
  if (itemType === ValueType.ARRAY) {
    const items: GgufArray[] = [];
    for (let i = 0; i < n; i++) items.push(readArray(c, label, depth + 1));
    return { itemType, items };
  }
  return { itemType: itemType as ValueType, items: readNumericArray(c, itemType, n) };
}

function readValue(c: Cursor, type: number, label: string): GgufValue {
  if (type === ValueType.ARRAY) return { type, value: readArray(c, label, 1) };
  return { type: type as ValueType, value: readScalar(c, type, label) };
}

function readAlignment(c: Cursor, metadata: Map<string, GgufValue>): number {
  const v = metadata.get("general.alignment");
  if (v === undefined) return DEFAULT_ALIGNMENT;
  if (v.type !== ValueType.U32) c.fail("alignment", `general.alignment has value type ${v.type}, expected u32 (4)`);
  const a = v.value as number;
  if (a === 0 || (a & (a - 1)) !== 0) c.fail("alignment", `general.alignment ${a} is not a power of two`);
  return a;
}

interface RawTensor {
  name: string;
  typeId: number;
  dims: number[];
  relOffset: bigint;
}

function readTensorInfo(c: Cursor, index: number, fileBytes: number): RawTensor {
  c.what = `tensor info ${index}`;
  const name = c.name(`tensor ${index} name`);
  c.what = `tensor info ${index} ('${name}')`;
  const nDims = c.u32();
  if (nDims > MAX_DIMS) c.fail("dims", `tensor '${name}' has ${nDims} dimensions (at most ${MAX_DIMS})`);
  const maxValues = BigInt(fileBytes) * BigInt(MAX_VALUES_PER_FILE_BYTE);
  const dims: number[] = [];
  let values = 1n;
  for (let d = 0; d < nDims; d++) {
    const ne = c.u64();
    values *= ne;
    // Checked after every factor so the product stays small (and a 0 cannot hide an overflow).
    if (ne > maxValues || values > maxValues) {
      c.fail("dims", `tensor '${name}' dims overflow: dimension ${d} is ${ne}, more values than the file can hold`);
    }
    dims.push(Number(ne));
  }
  const typeId = c.u32();
  const relOffset = c.u64();
  return { name, typeId, dims, relOffset };
}

/** Bytes of a tensor of ggml type typeId with dims `dims` (row first); throws rowBytes's LmheadError. */
export function tensorBytes(typeId: number, dims: readonly number[]): number {
  return dims.slice(1).reduce((a, b) => a * b, rowBytes(typeId, dims.length > 0 ? dims[0]! : 1)); // < 2^53, see MAX_VALUES_PER_FILE_BYTE
}

/** tensorBytes, or a GgufError if the type id is invalid or removed or the rows are not whole blocks. */
function checkedTensorBytes(c: Cursor, t: RawTensor): number {
  try {
    return tensorBytes(t.typeId, t.dims);
  } catch (e) {
    return c.fail((e as LmheadError).code === "unsupported" ? "type" : "dims", `tensor '${t.name}': ${(e as Error).message}`);
  }
}

/** Parses GGUF bytes already in memory (a mapping, or a buffer in tests). */
export function parseGguf(bytes: Uint8Array, file = "<memory>"): GgufFile {
  return parse(bytes, file, bytes.byteLength);
}

/** `bytes` is the file's first bytes.byteLength bytes, of fileBytes in all. */
function parse(bytes: Uint8Array, file: string, fileBytes: number): GgufFile {
  const c = new Cursor(bytes, file, fileBytes);
  c.what = "header";
  const magic = c.u32();
  if (magic !== MAGIC) c.fail("magic", `not a GGUF file (magic 0x${magic.toString(16).padStart(8, "0")})`);
  const version = c.u32();
  if (version !== 2 && version !== 3) {
    const hint = version === 0x02000000 || version === 0x03000000 ? " (a big-endian GGUF?)" : "";
    c.fail("version", `unsupported GGUF version ${version}${hint}; only 2 and 3 are read`);
  }
  const tensorCount = c.count("tensor count", MIN_TENSOR_INFO_BYTES);
  const kvCount = c.count("metadata count", MIN_KV_BYTES);
  if (tensorCount * MIN_TENSOR_INFO_BYTES + kvCount * MIN_KV_BYTES > c.remaining) {
    c.fail("count", `${tensorCount} tensors and ${kvCount} metadata entries cannot fit in the file`);
  }

  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    c.what = `metadata key ${i}`;
    const key = c.name(`metadata key ${i}`);
    c.what = `metadata value ${i} ('${key}')`;
    if (metadata.has(key)) c.fail("duplicate", `duplicate metadata key '${key}'`);
    const type = c.u32();
    metadata.set(key, readValue(c, type, `metadata '${key}'`));
  }
  const alignment = readAlignment(c, metadata);

  const raw: RawTensor[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const t = readTensorInfo(c, i, fileBytes);
    if (seen.has(t.name)) c.fail("duplicate", `duplicate tensor name '${t.name}'`);
    seen.add(t.name);
    raw.push(t);
  }
  const dataOffset = Math.ceil(c.pos / alignment) * alignment;

  const tensors = new Map<string, GgufTensor>();
  for (const t of raw) {
    if (t.relOffset % BigInt(alignment) !== 0n) {
      c.fail("misaligned", `misaligned tensor offset ${t.relOffset} for '${t.name}' (alignment ${alignment})`);
    }
    const bytes = checkedTensorBytes(c, t);
    const start = BigInt(dataOffset) + t.relOffset;
    if (start + BigInt(bytes) > BigInt(fileBytes)) {
      c.fail("past-end", `tensor data past end of file: '${t.name}' needs bytes ${start}..${start + BigInt(bytes)} of ${fileBytes}`);
    }
    tensors.set(t.name, { name: t.name, typeId: t.typeId, dims: t.dims, fileOffset: Number(start), bytes });
  }
  return { file, fileBytes, version, alignment, metadata, tensors, dataOffset, mapping: bytes };
}

// The mapped file of each GgufFile that readGguf made (parseGguf's have none), and the windows
// made for tensors past gguf.mapping, by name.
const mappedFiles = new WeakMap<GgufFile, { file: MappedFile; windows: Map<string, Uint8Array> }>();

/** Opens `path` read-only, or throws a GgufError ("io") saying why it cannot. */
export function openGgufFile(path: string): MappedFile {
  try {
    return MappedFile.open(path);
  } catch (e) {
    throw new GgufError(path, "io", (e as Error).message);
  }
}

/** Maps and parses a GGUF file. The mapping lives while the result or any view into it does. */
export function readGguf(path: string): GgufFile {
  return parseMapped(openGgufFile(path));
}

/** A GGUF file's header for users: metadata and the tensor table, without the mapped bytes. */
export type GgufHeader = Omit<GgufFile, "mapping">;

/**
 * The header of a GGUF file, as the package exports it: the mapping behind readGguf's result
 * is read-only memory, and a write through it would end the process, so users get no view of
 * it (loadModel reads the weights).
 */
export function readGgufHeader(path: string): GgufHeader {
  const { mapping: _, ...header } = readGguf(path);
  return header;
}

/** Parses an open file; the result keeps the file open (and mapped) while it is reachable. */
export function parseMapped(file: MappedFile): GgufFile {
  if (file.bytes === 0) throw new GgufError(file.path, "truncated", "truncated reading header (empty file)");
  const gguf = parse(file.window(0, Math.min(file.bytes, MAX_WINDOW_BYTES)), file.path, file.bytes);
  mappedFiles.set(gguf, { file, windows: new Map() });
  return gguf;
}

/** Zero-copy read-only view of a tensor's data (it keeps its mapping alive). Never write through it. */
export function tensorData(gguf: GgufFile, t: GgufTensor): Uint8Array {
  if (t.fileOffset + t.bytes <= gguf.mapping.byteLength) return gguf.mapping.subarray(t.fileOffset, t.fileOffset + t.bytes);
  const { file, windows } = mappedFiles.get(gguf) ?? fail(gguf, "past-end", `tensor '${t.name}' lies past the bytes given`);
  if (t.bytes > MAX_WINDOW_BYTES) fail(gguf, "io", `tensor '${t.name}' needs a ${t.bytes}-byte window; one window holds at most ${MAX_WINDOW_BYTES}`);
  const window = windows.get(t.name) ?? file.window(t.fileOffset, t.bytes);
  windows.set(t.name, window);
  return window;
}

function fail(gguf: GgufFile, kind: GgufErrorKind, problem: string): never {
  throw new GgufError(gguf.file, kind, problem);
}

/** A scalar numeric metadata value as a JS number (u64/i64 only if exactly representable). */
export function metaNumber(gguf: GgufFile, key: string): number | undefined {
  const v = gguf.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v.value === "number") return v.value;
  if (typeof v.value === "bigint" && v.value <= BigInt(Number.MAX_SAFE_INTEGER) && v.value >= -BigInt(Number.MAX_SAFE_INTEGER)) {
    return Number(v.value);
  }
  throw new GgufError(gguf.file, "value", `metadata '${key}' is not a number (value type ${v.type})`);
}

export function metaString(gguf: GgufFile, key: string): string | undefined {
  const v = gguf.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v.value !== "string") throw new GgufError(gguf.file, "value", `metadata '${key}' is not a string (value type ${v.type})`);
  return v.value;
}
