/**
 * Builds the npm packages of a release, the way Bun-native packages ship: `lmhead` (the
 * TypeScript sources) with an optional dependency on one package per platform, and each
 * `@lmhead/<os>-<cpu>` holding that platform's prebuilt library, with `os` and `cpu` fields
 * so a package manager installs only the user's. Each library is cross-built with Zig here
 * (the macOS one needs no SDK); each package is packed into zig-out/packages/*.tgz.
 *
 *   ./lmhead package [platform ...]   platforms: linux-x64, darwin-arm64 (default: both)
 */
import { $ } from "bun";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { basename, join } from "node:path";

export const platforms = {
  // scripts/bootstrap.sh builds a checkout's library for linux-x64's target too, so this build is cached.
  "linux-x64": { target: "x86_64-linux-gnu", os: "linux", cpu: "x64", file: "liblmhead.so" },
  "darwin-arm64": { target: "aarch64-macos", os: "darwin", cpu: "arm64", file: "liblmhead.dylib" },
} as const;
export type Platform = keyof typeof platforms;

const root = join(import.meta.dir, "..");
const out = join(root, "zig-out", "packages");
const manifest = await Bun.file(join(root, "package.json")).json();
const version: string = manifest.version;

/** Writes `files` and package.json into a fresh staging folder and packs it; returns the tarball. */
async function pack(name: string, packageJson: object, copy: (stage: string) => void): Promise<string> {
  const stage = join(out, "stage", name.replace("/", "-"));
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  copy(stage);
  await Bun.write(join(stage, "package.json"), JSON.stringify({ name, version, ...packageJson }, null, 2) + "\n");
  // --quiet prints only the tarball's name.
  const tarball = (await $`bun pm pack --destination ${out} --quiet`.cwd(stage).text()).trim();
  return join(out, basename(tarball));
}

async function platformPackage(platform: Platform): Promise<string> {
  const p = platforms[platform];
  const prefix = join(root, "zig-out", platform);
  await $`zig build -Dtarget=${p.target} --prefix ${prefix} --summary none`.cwd(root);
  return pack(`@lmhead/${platform}`, { description: `liblmhead for ${platform}, prebuilt`, os: [p.os], cpu: [p.cpu], files: [p.file] }, (stage) =>
    cpSync(join(prefix, "lib", p.file), join(stage, p.file)),
  );
}

async function mainPackage(): Promise<string> {
  const optionalDependencies = Object.fromEntries(Object.keys(platforms).map((p) => [`@lmhead/${p}`, version]));
  const { name, description, type, module, bin } = manifest;
  return pack(name, { description, type, module, bin, files: ["src", "README.md"], optionalDependencies }, (stage) => {
    cpSync(join(root, "src"), join(stage, "src"), { recursive: true });
    cpSync(join(root, "README.md"), join(stage, "README.md"));
  });
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const wanted = (args.length > 0 ? args : Object.keys(platforms)) as Platform[];
  for (const p of wanted) if (!(p in platforms)) throw new Error(`unknown platform ${p}; known: ${Object.keys(platforms).join(", ")}`);
  mkdirSync(out, { recursive: true });
  const tarballs = [await mainPackage()];
  for (const p of wanted) tarballs.push(await platformPackage(p));
  for (const t of tarballs) console.log(t);
}
