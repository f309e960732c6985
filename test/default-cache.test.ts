/**
 * The default artifact's cache folder: a folder it cannot use fails before 606 MB are
 * generated, with an LmheadError naming the path and the size; temp files left by an
 * interrupted run are removed at the next run, a live writer's are not.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_ARTIFACT, defaultArtifactPath, removeStaleTemps } from "../src/artifact/default.ts";
import { LmheadError } from "../src/errors.ts";

const dir = mkdtempSync(join(tmpdir(), "lmhead-cache-test-"));
const savedCache = process.env.LMHEAD_CACHE;
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  if (savedCache === undefined) delete process.env.LMHEAD_CACHE;
  else process.env.LMHEAD_CACHE = savedCache;
});
const name = DEFAULT_ARTIFACT.fileName;
const size = DEFAULT_ARTIFACT.fileBytes;

/** The pid of a process that has exited (pids are not reused this soon). */
function deadPid(): number {
  const proc = Bun.spawnSync(["true"]);
  return proc.pid;
}

async function expectCacheError(message: RegExp): Promise<void> {
  let caught: unknown;
  try {
    await defaultArtifactPath();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(LmheadError);
  expect((caught as LmheadError).code).toBe("io");
  expect((caught as LmheadError).message).toMatch(message);
}

describe("a cache folder the artifact cannot be written to", () => {
  test("the artifact's path is a directory: refused before generating, naming the path and the size", async () => {
    const cache = join(dir, "dir-in-the-way");
    mkdirSync(join(cache, name), { recursive: true });
    process.env.LMHEAD_CACHE = cache;
    await expectCacheError(new RegExp(`${name}: cannot write the default artifact \\(${size} bytes\\) there: the path exists and is not a regular file`));
    expect(readdirSync(cache)).toEqual([name]);
  });

  test("the cache folder is a file: refused, naming it", async () => {
    const cache = join(dir, "a-file");
    writeFileSync(cache, "x");
    process.env.LMHEAD_CACHE = cache;
    await expectCacheError(new RegExp(`cannot write the default artifact \\(${size} bytes\\) there: cache folder .*a-file: .*(EEXIST|ENOTDIR)`));
  });

  // Root can write anywhere, but not to a read-only or full file system: a private mount
  // namespace (unshare -rm, no privileges needed) gives the child a small tmpfs.
  const unshare = Bun.spawnSync(["unshare", "-rm", "true"], { stderr: "ignore" }).exitCode === 0;
  async function inNamespace(mountOptions: string, readOnly: boolean): Promise<{ result: { error?: { code: string; message: string } }; stderr: string; left: string[] }> {
    const mount = mkdtempSync(join(dir, "mnt-"));
    const cache = join(mount, "cache");
    const stale = `${cache}/${name}.tmp-${hostname()}-${deadPid()}-1`;
    const script = [
      `mount -t tmpfs -o ${mountOptions} tmpfs '${mount}'`,
      `mkdir '${cache}'`,
      `echo partial > '${stale}'`,
      readOnly ? `mount -o remount,ro '${mount}'` : "true",
      `"$0" "$@"`,
      `ls -A '${cache}'`,
    ].join(" && ");
    const proc = Bun.spawn(["unshare", "-rm", "sh", "-c", script, process.execPath, join(import.meta.dir, "default-cache.child.ts")], {
      env: { ...process.env, LMHEAD_CACHE: cache },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
    expect(await proc.exited).toBe(0);
    const [json, ...left] = stdout.trim().split("\n");
    return { result: JSON.parse(json!), stderr, left };
  }

  test.skipIf(!unshare)("a full file system: refused before generating, naming the folder, the free bytes and the size (needs unshare -rm)", async () => {
    const { result, stderr, left } = await inNamespace("size=1m", false);
    expect(result.error!.code).toBe("io");
    expect(result.error!.message).toMatch(new RegExp(`/cache: \\d+ bytes free, the default artifact needs ${size}`));
    expect(stderr).not.toContain("generating");
    // The stale temp file was removed on the way; the run's own temp file too.
    expect(left).toEqual([]);
  });

  test.skipIf(!unshare)("a read-only file system: refused before generating, naming the path and the size (needs unshare -rm)", async () => {
    const { result, stderr } = await inNamespace("size=1m", true);
    expect(result.error!.code).toBe("io");
    expect(result.error!.message).toMatch(new RegExp(`/cache/${name}: cannot write the default artifact \\(${size} bytes\\) there: .*EROFS`));
    expect(stderr).not.toContain("generating");
  });
});

describe("temp files of interrupted runs", () => {
  test("removed when their writer is gone or they are a day old; a live writer's and other files are kept", () => {
    const cache = join(dir, "temps");
    mkdirSync(cache);
    const path = join(cache, name);
    const temp = (suffix: string, ageMs = 0): string => {
      const file = `${name}.tmp-${suffix}`;
      writeFileSync(join(cache, file), "partial");
      const t = new Date(Date.now() - ageMs);
      utimesSync(join(cache, file), t, t);
      return file;
    };
    const dead = deadPid();
    const removed = [temp(`${hostname()}-${dead}-1`), temp(`${dead}-2`), temp(`other-host-${dead}-3`, 2 * 86_400_000)];
    const kept = [temp(`${hostname()}-${process.pid}-4`), temp(`other-host-${dead}-5`), "unrelated.tmp-1-1", `${name}.partial`];
    for (const file of kept.slice(2)) writeFileSync(join(cache, file), "x");
    removeStaleTemps(path);
    expect(readdirSync(cache).sort()).toEqual([...kept].sort());
    for (const file of removed) expect(existsSync(join(cache, file))).toBe(false);
  });
});
