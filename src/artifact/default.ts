// The built-in default artifact: a synthetic Gemma-4-shaped head (hf2q-head-spec.md §7),
// generated deterministically from a fixed seed the first time it is needed, cached, and
// verified against a pinned checksum.
//
// Hash: XXH3-64 (Bun.hash.xxHash3) over the whole file through a mapping. It only has to catch
// accidental damage (a partial write, a truncated or edited file, a changed generator), not an
// attacker who can already write to the user's cache, and it runs at memory speed (measured on
// the 606 MB file, page cache warm, 2-core x86-64: XXH3 36 ms, SHA-256 via Bun.CryptoHasher
// 424 ms with SHA extensions, several times that without).
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, renameSync, statfsSync, statSync, unlinkSync } from "node:fs";
import { homedir, hostname } from "node:os";
import { basename, dirname, join } from "node:path";
import { LmheadError } from "../errors.ts";
import { rowBytes } from "../formats.ts";
import { fileIdentity, MappedFile } from "./file.ts";
import { Rng, synthBlocks, synthF32 } from "./synth.ts";
import { ggufFileBytes, meta, writeGguf, type GgufContents } from "./writer.ts";

export const DEFAULT_ARTIFACT = {
  /** Bump the version in the name whenever the contents change, with the new pins below. */
  fileName: "gemma4-head-synthetic-v1.gguf",
  arch: "gemma4",
  hidden: 2816,
  vocab: 262144,
  typeId: 14, // Q6_K, tied token_embd.weight (no output.weight)
  softcap: 30,
  eps: 1e-6,
  seed: 0x6c6d6865, // "lmhe"
  /** Pinned: size in bytes and XXH3-64 of the whole file. */
  fileBytes: 605_564_320,
  xxh3: 0x4a654e06309ffb55n,
} as const;

/** `$LMHEAD_CACHE`, else `$XDG_CACHE_HOME/lmhead`, else `~/.cache/lmhead`. */
export function cacheDir(): string {
  const env = process.env;
  if (env.LMHEAD_CACHE) return env.LMHEAD_CACHE;
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, "lmhead");
  return join(homedir(), ".cache", "lmhead");
}

// Rows per generated chunk: ~2.4 MB of Q6_K, small enough to stay in cache, large enough for few writes.
const CHUNK_ROWS = 1024;

/** The default artifact's contents; tensor data is generated lazily, chunk by chunk, while writing. */
export function defaultArtifactContents(): GgufContents {
  const a = DEFAULT_ARTIFACT;
  const headRowBytes = rowBytes(a.typeId, a.hidden);
  // One stream, consumed in a fixed order (norm, then head rows in order), so the bytes are a
  // function of the seed alone.
  const rng = new Rng(a.seed);
  const norm = synthF32(a.hidden, rng, 1, 0.25);
  return {
    metadata: [
      ["general.architecture", meta.str(a.arch)],
      ["general.name", meta.str("lmhead synthetic Gemma 4 head")],
      ["lmhead.synthetic_seed", meta.u32(a.seed)],
      [`${a.arch}.embedding_length`, meta.u32(a.hidden)],
      [`${a.arch}.attention.layer_norm_rms_epsilon`, meta.f32(a.eps)],
      [`${a.arch}.final_logit_softcapping`, meta.f32(a.softcap)],
    ],
    tensors: [
      { name: "output_norm.weight", typeId: 0, dims: [a.hidden], data: new Uint8Array(norm.buffer) },
      {
        name: "token_embd.weight",
        typeId: a.typeId,
        dims: [a.hidden, a.vocab],
        data: {
          bytes: headRowBytes * a.vocab,
          *chunks() {
            const chunk = new Uint8Array(headRowBytes * CHUNK_ROWS);
            for (let row = 0; row < a.vocab; row += CHUNK_ROWS) {
              const rows = Math.min(CHUNK_ROWS, a.vocab - row);
              for (let r = 0; r < rows; r++) {
                synthBlocks(a.typeId, a.hidden, rng, {}, chunk.subarray(r * headRowBytes, (r + 1) * headRowBytes));
              }
              yield chunk.subarray(0, rows * headRowBytes);
            }
          },
        },
      },
    ],
  };
}

/** XXH3-64 of a file (up to 4 GiB), read through a read-only mapping (no copy into the JS heap). */
export function fileXxh3(path: string): bigint {
  let file: MappedFile;
  try {
    file = MappedFile.open(path);
  } catch (e) {
    throw new LmheadError("io", `${path}: ${(e as Error).message}`);
  }
  using _ = file;
  return file.read(0, file.bytes, (view) => Bun.hash.xxHash3(view));
}

function progressReporter(path: string): (written: number, total: number) => void {
  const mb = (n: number) => (n / 1e6).toFixed(0);
  if (!process.stderr.isTTY) {
    let said = false;
    return (_w, total) => {
      if (!said) process.stderr.write(`lmhead: generating the default artifact once (${mb(total)} MB) at ${path}\n`);
      said = true;
    };
  }
  let lastDraw = 0;
  return (written, total) => {
    const now = performance.now();
    if (written < total && now - lastDraw < 100) return;
    lastDraw = now;
    const width = 30;
    const filled = Math.round((written / total) * width);
    const bar = "=".repeat(filled) + " ".repeat(width - filled);
    const pct = Math.floor((written / total) * 100);
    process.stderr.write(`\rlmhead: generating default artifact [${bar}] ${pct}% ${mb(written)}/${mb(total)} MB`);
    if (written === total) process.stderr.write("\n");
  };
}

/**
 * Writes the default artifact to `path` (atomically: temp file, verify, rename) and returns its
 * XXH3-64. A cache it cannot use (a directory in the way, read-only, too little free space)
 * is an LmheadError naming the path and the size, before anything is generated.
 */
export function writeDefaultArtifact(path: string, opts: { progress?: boolean; verify?: boolean } = {}): bigint {
  const contents = defaultArtifactContents();
  const fileBytes = ggufFileBytes(contents);
  const tmp = createTemp(path, fileBytes);
  try {
    checkFreeSpace(tmp, fileBytes);
    try {
      writeGguf(tmp, contents, { onProgress: opts.progress === false ? undefined : progressReporter(path) });
    } catch (e) {
      throw new LmheadError("io", `${path}: writing the default artifact (${fileBytes} bytes) failed: ${(e as Error).message}`);
    }
    const size = statSync(tmp).size;
    const hash = fileXxh3(tmp);
    if (opts.verify !== false && (size !== DEFAULT_ARTIFACT.fileBytes || hash !== DEFAULT_ARTIFACT.xxh3)) {
      throw new Error(
        `generated default artifact does not match its pins: ${size} bytes, xxh3 0x${hash.toString(16)}; ` +
          `expected ${DEFAULT_ARTIFACT.fileBytes} bytes, xxh3 0x${DEFAULT_ARTIFACT.xxh3.toString(16)} (did the generator change?)`,
      );
    }
    renameSync(tmp, path);
    return hash;
  } finally {
    if (existsSync(tmp)) unlinkSync(tmp);
  }
}

/**
 * Creates the (empty) temp file the artifact is written to, beside `path`: proves the cache
 * folder can be written before any work. Its name carries this host and process id, so a
 * later run can tell an interrupted writer's leftover from a live writer's file.
 */
function createTemp(path: string, fileBytes: number): string {
  const cannot = (problem: string): never => {
    throw new LmheadError("io", `${path}: cannot write the default artifact (${fileBytes} bytes) there: ${problem}; set LMHEAD_CACHE to another folder`);
  };
  if (existsSync(path) && !statSync(path).isFile()) cannot("the path exists and is not a regular file");
  try {
    mkdirSync(dirname(path), { recursive: true });
  } catch (e) {
    cannot(`cache folder ${dirname(path)}: ${(e as Error).message}`);
  }
  removeStaleTemps(path);
  const tmp = `${path}${TEMP_INFIX}${hostname()}-${process.pid}-${Math.floor(Math.random() * 1e9)}`;
  try {
    closeSync(openSync(tmp, "wx"));
  } catch (e) {
    cannot((e as Error).message);
  }
  return tmp;
}

function checkFreeSpace(tmp: string, fileBytes: number): void {
  const fs = statfsSync(tmp);
  const free = fs.bavail * fs.bsize;
  if (free < fileBytes) {
    throw new LmheadError("io", `${dirname(tmp)}: ${free} bytes free, the default artifact needs ${fileBytes}; free some space or set LMHEAD_CACHE to another folder`);
  }
}

const TEMP_INFIX = ".tmp-";
// A temp file this old is stale whoever wrote it: a live writer touches it every few milliseconds.
const STALE_TEMP_MS = 24 * 3600 * 1000;

/**
 * Removes temp files of `path` left by interrupted writers: those of a process of this host
 * that no longer runs, and any untouched for a day (a writer on another host sharing the
 * folder, or a pid since reused). A concurrent writer's file is left alone.
 */
export function removeStaleTemps(path: string): void {
  const dir = dirname(path);
  const prefix = basename(path) + TEMP_INFIX;
  for (const name of readdirSync(dir)) {
    if (!name.startsWith(prefix)) continue;
    // host-pid-random; files of earlier versions have no host part.
    const writer = /^(?:(.+)-)?(\d+)-\d+$/.exec(name.slice(prefix.length));
    const temp = join(dir, name);
    try {
      const st = statSync(temp);
      const deadWriter = writer !== null && (writer[1] ?? hostname()) === hostname() && !processRuns(Number(writer[2]));
      if (!deadWriter && Date.now() - st.mtimeMs < STALE_TEMP_MS) continue;
      unlinkSync(temp);
      process.stderr.write(`lmhead: removed ${temp} (${st.size} bytes), left by an interrupted run\n`);
    } catch {
      // Gone already (another run cleaned it), or the folder is read-only: nothing to do.
    }
  }
}

function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM"; // it runs, as another user
  }
}

/** True if `path` exists with the pinned size and checksum. */
export function isValidDefaultArtifact(path: string): boolean {
  if (!existsSync(path) || !statSync(path).isFile() || statSync(path).size !== DEFAULT_ARTIFACT.fileBytes) return false;
  return fileXxh3(path) === DEFAULT_ARTIFACT.xxh3;
}

// Files verified in this process, by path, with the identity they had: the 606 MB hash runs
// once per process, and again only if the file was replaced or modified since.
const verified = new Map<string, string>();

/** Path of the cached default artifact, generating (or regenerating a damaged copy of) it first. */
export async function defaultArtifactPath(): Promise<string> {
  const path = join(cacheDir(), DEFAULT_ARTIFACT.fileName);
  const id = fileIdentity(path);
  if (id !== undefined && verified.get(path) === id) return path;
  if (!isValidDefaultArtifact(path)) {
    if (id !== undefined && statSync(path).isFile()) process.stderr.write(`lmhead: ${path} does not match its pinned size and checksum; regenerating\n`);
    writeDefaultArtifact(path);
  } else if (existsSync(dirname(path))) {
    removeStaleTemps(path);
  }
  verified.set(path, fileIdentity(path)!);
  return path;
}
