/**
 * Model files, mapped read-only by the native library (open O_RDONLY, mmap PROT_READ +
 * MAP_SHARED): a file the process cannot write (read-only mode or mount, another user's
 * cache) loads all the same, and nothing can write through the mapping to the file.
 *
 * JS reads the mapping through zero-copy Uint8Arrays over its pages: windows, which hold their
 * own native reference (dropped when collected), and views lent to a callback. The pages are
 * read-only, so a write through either kills the process (SIGSEGV): they are for reading.
 */
import { toArrayBuffer } from "bun:ffi";
import { existsSync, statSync } from "node:fs";
import { LmheadError } from "../errors.ts";
import { check, handleOut, lib } from "../native.ts";
import { MlxBuffer, type MlxDevice } from "../runtime.ts";

/** Bun cannot make one ArrayBuffer over more than 4 GiB, so that is the largest window. */
export const MAX_WINDOW_BYTES = 2 ** 32;

const closeHandle = (handle: bigint): void => void lib.lmh_file_close(handle);
const unclosedFiles = new FinalizationRegistry<bigint>(closeHandle);
const windowReferences = new FinalizationRegistry<bigint>(closeHandle);
/** References that keep mappings whose lent bytes were transferred away alive for good. */
const keptForever: bigint[] = [];

export class MappedFile implements Disposable {
  #handle: bigint | null;

  private constructor(
    readonly path: string,
    handle: bigint,
    /** Size of the file when it was opened. */
    readonly bytes: number,
    private readonly address: number,
  ) {
    this.#handle = handle;
    unclosedFiles.register(this, handle, this);
  }

  /** Opens and maps `path`; failures (missing, not a regular file, unreadable) are LmheadErrors "cannot open: …", code "io". */
  static open(path: string): MappedFile {
    const encoded = new TextEncoder().encode(path);
    const info = new BigUint64Array(2);
    const handle = handleOut((out) => lib.lmh_file_open(encoded.byteLength > 0 ? encoded : null, encoded.byteLength, out, info), "cannot open");
    return new MappedFile(path, handle, Number(info[0]), Number(info[1]));
  }

  /**
   * Zero-copy read-only view of bytes [offset, offset + bytes) that holds its own reference to
   * the mapping, dropped when the view is collected. Never write through it.
   */
  window(offset: number, bytes: number): Uint8Array {
    const memory = this.#memory(offset, bytes);
    if (bytes > 0) windowReferences.register(memory, handleOut((out) => lib.lmh_file_retain(this.#open(), out), `${this.path}: window`));
    return new Uint8Array(memory);
  }

  /**
   * Lends `use` a zero-copy read-only view of bytes [offset, offset + bytes) and returns what it
   * returns. The view takes no reference and is detached when `use` returns (a reference kept
   * past it reads as empty), so the mapping can go as soon as the file is closed. Transferring
   * its ArrayBuffer out of `use` is an error that keeps the mapping for the life of the process.
   */
  read<T>(offset: number, bytes: number, use: (view: Uint8Array) => T): T {
    const lent = this.#memory(offset, bytes);
    try {
      return use(new Uint8Array(lent));
    } finally {
      if (lent.detached) this.#keepForever();
      else lent.transfer(0);
    }
  }

  /** Throws an LmheadError ("io") if the file was truncated or modified in place since it was opened. */
  check(): void {
    check(lib.lmh_file_check(this.#open()), "model file check");
  }

  /** A read-only device buffer over [offset, offset + bytes), without copying; it keeps the mapping alive. */
  wrap(device: MlxDevice, offset: number, bytes: number): MlxBuffer {
    this.#checkRange(offset, bytes);
    const handle = handleOut((out) => lib.lmh_buffer_wrap_file(device.handle, this.#open(), offset, bytes, out), `${this.path}: wrap`);
    return new MlxBuffer(handle, bytes, device, undefined, true);
  }

  /** Drops this handle's reference: buffers and windows over the file keep the mapping until they go. */
  close(): void {
    if (this.#handle === null) return;
    check(lib.lmh_file_close(this.#handle), "close model file");
    this.#handle = null;
    unclosedFiles.unregister(this);
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #memory(offset: number, bytes: number): ArrayBuffer {
    this.#checkRange(offset, bytes);
    if (bytes > MAX_WINDOW_BYTES) throw new LmheadError("out_of_bounds", `${this.path}: a window of ${bytes} bytes; one window holds at most ${MAX_WINDOW_BYTES}`);
    this.#open();
    return bytes === 0 ? new ArrayBuffer(0) : toArrayBuffer(this.address + offset, 0, bytes);
  }

  #keepForever(): never {
    keptForever.push(handleOut((out) => lib.lmh_file_retain(this.#open(), out), `${this.path}: keep`));
    throw new LmheadError("invalid_argument", `${this.path}: a lent view was transferred out of read(); the file stays mapped for the life of the process so that it remains valid`);
  }

  #open(): bigint {
    if (this.#handle === null) throw new LmheadError("bad_handle", `${this.path}: the model file is closed`);
    return this.#handle;
  }

  #checkRange(offset: number, bytes: number): void {
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(bytes) || offset < 0 || bytes < 0 || offset + bytes > this.bytes) {
      throw new LmheadError("out_of_bounds", `${this.path}: range [${offset}, ${offset + bytes}) outside the file's ${this.bytes} bytes`);
    }
  }
}

/**
 * Device, inode, size and modification time of the file at `path` (undefined if there is none):
 * equal identities mean, short of a write that restores the mtime, the same bytes.
 */
export function fileIdentity(path: string): string | undefined {
  if (!existsSync(path)) return undefined;
  const st = statSync(path);
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
}
