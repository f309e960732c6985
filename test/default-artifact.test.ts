// The built-in default artifact: generated once into the cache, shaped like Gemma 4's head,
// pinned by size and XXH3-64, reused, and regenerated when damaged.
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { cacheDir, DEFAULT_ARTIFACT, defaultArtifactPath, fileXxh3, isValidDefaultArtifact } from "../src/artifact/default.ts";
import { readGguf, tensorData } from "../src/artifact/gguf.ts";
import { loadHead } from "../src/artifact/head.ts";

const cache = mkdtempSync(join(tmpdir(), "lmhead-cache-"));
const savedEnv = { LMHEAD_CACHE: process.env.LMHEAD_CACHE, XDG_CACHE_HOME: process.env.XDG_CACHE_HOME };
process.env.LMHEAD_CACHE = cache;
afterAll(() => {
  rmSync(cache, { recursive: true, force: true });
  for (const [k, v] of Object.entries(savedEnv)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
});

describe("default artifact", () => {
  test("Bun.hash.xxHash3 is standard XXH3-64 (the pin depends on it)", () => {
    expect(Bun.hash.xxHash3("")).toBe(0x2d06800538d394c2n);
    expect(Bun.hash.xxHash3(new Uint8Array(0))).toBe(0x2d06800538d394c2n);
  });

  test("cache folder: $LMHEAD_CACHE, then $XDG_CACHE_HOME/lmhead, then ~/.cache/lmhead", () => {
    expect(cacheDir()).toBe(cache);
    delete process.env.LMHEAD_CACHE;
    process.env.XDG_CACHE_HOME = "/x/cache";
    expect(cacheDir()).toBe("/x/cache/lmhead");
    delete process.env.XDG_CACHE_HOME;
    expect(cacheDir()).toBe(join(homedir(), ".cache", "lmhead"));
    process.env.LMHEAD_CACHE = cache;
  });

  let path = "";
  test("first use generates it: Gemma-4-shaped tied Q6_K head, pinned size and checksum", async () => {
    path = await defaultArtifactPath();
    expect(path).toBe(join(cache, DEFAULT_ARTIFACT.fileName));
    expect(statSync(path).size).toBe(DEFAULT_ARTIFACT.fileBytes);
    expect(fileXxh3(path)).toBe(DEFAULT_ARTIFACT.xxh3);

    const h = loadHead(path);
    expect(h).toMatchObject({ arch: "gemma4", hidden: 2816, vocab: 262144, softcap: 30 });
    expect(h.eps).toBe(Math.fround(1e-6));
    expect(h.head).toMatchObject({ name: "token_embd.weight", typeId: 14, tied: true });
    expect(h.head.format.name).toBe("Q6_K");
    expect(h.head.bytes).toBe(605_552_640); // 262144 rows of 11 Q6_K blocks of 210 bytes
    expect(readGguf(path).tensors.has("output.weight")).toBe(false);
    const norm = new Float32Array(tensorData(h.gguf, h.norm).slice().buffer);
    expect(norm.length).toBe(2816);
    expect(Math.min(...norm)).toBeGreaterThanOrEqual(0.75);
    expect(Math.max(...norm)).toBeLessThanOrEqual(1.25);
    // No temp files left behind.
    expect(readdirSync(cache)).toEqual([DEFAULT_ARTIFACT.fileName]);
  });

  test("later uses reuse the file without rewriting it", async () => {
    const before = statSync(path);
    expect(await defaultArtifactPath()).toBe(path);
    expect(await defaultArtifactPath()).toBe(path);
    const after = statSync(path);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  });

  test("a damaged copy (one byte changed) fails verification and is regenerated", async () => {
    const fd = openSync(path, "r+");
    const byte = new Uint8Array(1);
    readSync(fd, byte, 0, 1, 300_000_000);
    byte[0] ^= 0xff;
    writeSync(fd, byte, 0, 1, 300_000_000);
    closeSync(fd);
    expect(isValidDefaultArtifact(path)).toBe(false);
    const damagedIno = statSync(path).ino;
    expect(await defaultArtifactPath()).toBe(path);
    expect(statSync(path).ino).not.toBe(damagedIno); // replaced by rename, not patched in place
    expect(isValidDefaultArtifact(path)).toBe(true);
  });

  test("a copy of the wrong size is regenerated", async () => {
    // Replace rather than truncate: truncating a file that is mapped can crash the process.
    const short = join(cache, "short");
    writeFileSync(short, new Uint8Array(1000));
    renameSync(short, path);
    expect(isValidDefaultArtifact(path)).toBe(false);
    expect(await defaultArtifactPath()).toBe(path);
    expect(statSync(path).size).toBe(DEFAULT_ARTIFACT.fileBytes);
    expect(fileXxh3(path)).toBe(DEFAULT_ARTIFACT.xxh3);
  });
});
